//! In-place updates on the GPU (`kiln::eval_donating`; feature `wgpu`; skipped with a message
//! without an adapter unless `KILN_REQUIRE_GPU=1`): a training step writes its new
//! parameters over the old ones, with the CPU's results; an array anything else can still
//! read is never written over (another handle, a held array computed from it, a plan with a
//! fallible gather, an update that fails on an integer division); a donated array reads as
//! an error; a long loop keeps memory flat.
//!
//! Depends on kiln's public API only.
#![cfg(feature = "wgpu")]

mod common;

use kiln::{Array, Device};
use std::sync::Mutex;

/// The device counters are process-wide: tests that read them run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The loss of a small MLP and its gradients, as a user writes them.
fn loss_and_grads(params: &[Array], x: &Array, y: &Array) -> (Array, Vec<Array>) {
    let (w1, b1, w2, b2) = (&params[0], &params[1], &params[2], &params[3]);
    let h = (x.matmul(w1) + b1).relu();
    let logits = h.matmul(w2) + b2;
    let n = x.shape()[0] as f32;
    let loss = -(logits.log_softmax(-1) * y).sum(None, false) / n;
    let g = kiln::grad(&loss, &[w1, b1, w2, b2]).unwrap();
    (loss, g)
}

/// New parameters `p - 0.05 g` and the loss; the gradients are dropped here.
fn sgd_step(params: &[Array], x: &Array, y: &Array) -> (Vec<Array>, Array) {
    let (loss, g) = loss_and_grads(params, x, y);
    let new = params
        .iter()
        .zip(&g)
        .map(|(p, g)| p - &(g * 0.05f32))
        .collect();
    (new, loss)
}

fn param_bytes(params: &[Array]) -> u64 {
    params.iter().map(|p| p.size() as u64 * 4).sum()
}

#[test]
fn a_training_step_writes_its_parameters_over_the_old_ones() {
    if !common::wgpu_or_skip("donation") {
        return;
    }
    let _s = serial();
    let n = 16;
    let mut gpu = common::mlp_init(Device::Wgpu);
    let mut cpu = common::mlp_init(Device::Cpu);
    for step in 0..5 {
        let (x, y) = common::mlp_batch(step, n);
        let (new, loss) = sgd_step(&gpu, &x, &y);
        let refs: Vec<&Array> = new.iter().chain([&loss]).collect();
        let donors: Vec<&Array> = gpu.iter().collect();
        Device::Wgpu.synchronize();
        let before = Device::Wgpu.memory();
        kiln::eval_donating_on(Device::Wgpu, &refs, &donors).unwrap();
        let after = Device::Wgpu.memory();
        assert_eq!(
            after.donated - before.donated,
            4,
            "step {step}: every parameter written in place"
        );
        // The old and new parameters never coexist: the live bytes grow by less than one
        // copy of the model (the new values took the old storage).
        assert!(
            after.live_bytes < before.live_bytes + param_bytes(&gpu),
            "step {step}: live bytes {} -> {} with {} bytes of parameters",
            before.live_bytes,
            after.live_bytes,
            param_bytes(&gpu)
        );
        // The old handles read as an error naming the donation, not as the new values.
        let e = gpu[0].to_vec::<f32>().unwrap_err().to_string();
        assert!(e.contains("donated"), "{e}");
        gpu = new;
        let l = loss.item::<f32>().unwrap();
        // The same step on the CPU (the CPU backend is checked against numpy and the
        // reference interpreter by its own suites).
        let (new, loss) = sgd_step(&cpu, &x, &y);
        let refs: Vec<&Array> = new.iter().chain([&loss]).collect();
        let donors: Vec<&Array> = cpu.iter().collect();
        kiln::eval_donating_on(Device::Cpu, &refs, &donors).unwrap();
        common::close(&[l], &[loss.item::<f32>().unwrap()], 1e-4, "loss");
        cpu = new;
    }
    for (i, (g, c)) in gpu.iter().zip(&cpu).enumerate() {
        common::close(
            &g.to_vec::<f32>().unwrap(),
            &c.to_vec::<f32>().unwrap(),
            1e-4,
            &format!("parameter {i} after 5 in-place steps"),
        );
    }
}

#[test]
fn an_array_another_handle_reads_is_never_written_over() {
    if !common::wgpu_or_skip("donation") {
        return;
    }
    let _s = serial();
    let gpu = common::mlp_init(Device::Wgpu);
    let host: Vec<Vec<f32>> = gpu
        .iter()
        .map(|p| p.to_host().unwrap().to_vec::<f32>().unwrap())
        .collect();
    // Fresh placements: no host copy left in the nodes, so a read goes to the device.
    let gpu: Vec<Array> = gpu
        .iter()
        .map(|p| p.to_host().unwrap().to_device(Device::Wgpu).unwrap())
        .collect();
    let kept = gpu[0].clone(); // a second handle on w1
    let (x, y) = common::mlp_batch(0, 8);
    let (new, loss) = sgd_step(&gpu, &x, &y);
    let refs: Vec<&Array> = new.iter().chain([&loss]).collect();
    let donors: Vec<&Array> = gpu.iter().collect();
    let before = Device::Wgpu.memory().donated;
    kiln::eval_donating_on(Device::Wgpu, &refs, &donors).unwrap();
    assert_eq!(Device::Wgpu.memory().donated - before, 3, "all but w1");
    assert_eq!(kept.to_vec::<f32>().unwrap(), host[0], "w1 as it was");
    assert_eq!(gpu[0].to_vec::<f32>().unwrap(), host[0]);
}

#[test]
fn a_held_array_computed_from_a_donor_keeps_it_unwritten() {
    if !common::wgpu_or_skip("donation") {
        return;
    }
    let _s = serial();
    let gpu = common::mlp_init(Device::Wgpu);
    let cpu = common::mlp_init(Device::Cpu);
    let (x, y) = common::mlp_batch(1, 8);
    // The gradients stay held (unevaluated) across the step: they read every parameter
    // (through the forward pass), so nothing may be written over.
    let (loss, grads) = loss_and_grads(&gpu, &x, &y);
    let new: Vec<Array> = gpu
        .iter()
        .zip(&grads)
        .map(|(p, g)| p - &(g * 0.05f32))
        .collect();
    let refs: Vec<&Array> = new.iter().chain([&loss]).collect();
    let donors: Vec<&Array> = gpu.iter().collect();
    let before = Device::Wgpu.memory().donated;
    kiln::eval_donating_on(Device::Wgpu, &refs, &donors).unwrap();
    assert_eq!(Device::Wgpu.memory().donated - before, 0);
    // Evaluated afterwards, the held gradients are the CPU's.
    let (_, want) = loss_and_grads(&cpu, &x, &y);
    for (i, (g, w)) in grads.iter().zip(&want).enumerate() {
        common::close(
            &g.to_vec::<f32>().unwrap(),
            &w.to_vec::<f32>().unwrap(),
            1e-4,
            &format!("gradient {i}"),
        );
    }
}

/// An embedding step: the gather and its scatter-add run before the update, so the run
/// confirms their indices were in range and then writes the table over; with an index out
/// of range it returns the error before writing anything, and the table reads as it was.
#[test]
fn an_embedding_step_donates_its_table_once_its_indices_are_confirmed() {
    if !common::wgpu_or_skip("donation") {
        return;
    }
    let _s = serial();
    let table: Vec<f32> = (0..40).map(|i| i as f32 * 0.25).collect();
    let step = |ids: Vec<i64>| {
        let w = Array::from_vec(table.clone(), &[10, 4])
            .unwrap()
            .to_device(Device::Wgpu)
            .unwrap();
        let n = ids.len();
        let ids = Array::from_vec(ids, &[n]).unwrap();
        let loss = w.take(&ids, 0).square().sum(None, false);
        let g = kiln::grad(&loss, &[&w]).unwrap().remove(0);
        let next = &w - &(&g * 0.1f32);
        drop(g);
        let before = Device::Wgpu.memory().donated;
        let run = kiln::eval_donating_on(Device::Wgpu, &[&next, &loss], &[&w]);
        (w, next, run, Device::Wgpu.memory().donated - before)
    };
    let (w, next, run, donated) = step(vec![3, 7, 3]);
    run.unwrap();
    assert_eq!(donated, 1, "the table written in place");
    // Reference by hand: rows 3 (taken twice) and 7 move by 0.1 × 2 × count × value.
    let mut want = table.clone();
    for (row, count) in [(3usize, 2.0f32), (7, 1.0)] {
        for c in 0..4 {
            let v = table[row * 4 + c];
            want[row * 4 + c] = v - 0.1 * 2.0 * count * v;
        }
    }
    common::close(
        &next.to_vec::<f32>().unwrap(),
        &want,
        1e-6,
        "embedding update",
    );
    let e = w.to_vec::<f32>().unwrap_err().to_string();
    assert!(e.contains("donated"), "{e}");
    for bad in [vec![3i64, 10, 3], vec![-11, 2]] {
        let (w, _, run, donated) = step(bad.clone());
        let err = run.unwrap_err();
        assert!(
            matches!(err, kiln::Error::IndexOutOfRange { .. }),
            "{bad:?}: expected an index error, got {err}"
        );
        assert_eq!(donated, 0, "{bad:?}: nothing donated");
        assert_eq!(
            w.to_vec::<f32>().unwrap(),
            table,
            "{bad:?}: the table as it was"
        );
    }
}

/// An integer division by zero inside the kernel that writes the update is an error raised
/// after the kernel ran: the parameter must be neither written over nor lost.
#[test]
fn a_failed_update_leaves_the_donated_parameter_as_it_was() {
    if !common::wgpu_or_skip("donation") {
        return;
    }
    let _s = serial();
    let start: Vec<f32> = (0..6).map(|i| i as f32 * 0.5).collect();
    let w = Array::from_vec(start.clone(), &[6])
        .unwrap()
        .to_device(Device::Wgpu)
        .unwrap();
    let num = Array::from_vec(vec![7i32, 8, 9, 10, 11, 12], &[6]).unwrap();
    let den = Array::from_vec(vec![1i32, 2, 0, 3, 4, 5], &[6]).unwrap();
    let updates = [
        ("floor_divide", num.floor_div(&den)),
        ("remainder", num.rem(&den)),
        ("power", num.pow(&(&den - 1))),
    ];
    for (name, update) in updates {
        let next = &w + &update.cast(kiln::DType::F32);
        let before = Device::Wgpu.memory().donated;
        let err = kiln::eval_donating_on(Device::Wgpu, &[&next], &[&w]).unwrap_err();
        assert!(
            matches!(
                err,
                kiln::Error::DivisionByZero { .. } | kiln::Error::NegativeIntegerPower { .. }
            ),
            "{name}: expected a value error, got {err}"
        );
        assert_eq!(
            Device::Wgpu.memory().donated - before,
            0,
            "{name}: nothing donated"
        );
        assert_eq!(
            w.to_vec::<f32>().unwrap(),
            start,
            "{name}: the parameter as it was"
        );
    }
}

#[test]
fn in_place_steps_keep_device_memory_flat() {
    if !common::wgpu_or_skip("donation") {
        return;
    }
    let _s = serial();
    let mut params = common::mlp_init(Device::Wgpu);
    let (x, y) = common::mlp_batch(0, 8);
    let (x, y) = (
        x.to_device(Device::Wgpu).unwrap(),
        y.to_device(Device::Wgpu).unwrap(),
    );
    let before = Device::Wgpu.memory().donated;
    let mut live = Vec::new();
    let mut losses = Vec::new();
    for step in 0..300 {
        let (new, loss) = sgd_step(&params, &x, &y);
        let refs: Vec<&Array> = new.iter().chain([&loss]).collect();
        let donors: Vec<&Array> = params.iter().collect();
        kiln::eval_donating_on(Device::Wgpu, &refs, &donors).unwrap();
        params = new;
        if step == 0 || step == 299 {
            losses.push(loss.item::<f32>().unwrap());
        }
        if step % 50 == 49 {
            Device::Wgpu.synchronize();
            live.push(Device::Wgpu.memory().live_bytes);
        }
    }
    assert_eq!(Device::Wgpu.memory().donated - before, 4 * 300);
    assert!(
        live.windows(2).all(|w| w[1] <= w[0]),
        "device memory in use after every 50 steps grew: {live:?}"
    );
    assert!(
        losses[1] < losses[0],
        "training on one batch lowers its loss: {losses:?}"
    );
}

/// A random update graph: per parameter, a chain of elementwise steps reading other
/// parameters (some through a reduction), optionally a held intermediate, extra outputs
/// that read the old values, and optionally an integer division in the first parameter's
/// update (`Some(true)`: by a zero, so that the evaluation fails).
#[derive(Clone, Debug)]
struct Case {
    len: usize,
    steps: Vec<Vec<(u8, usize)>>,
    held: Vec<Option<usize>>,
    extras: Vec<(usize, usize)>,
    donate: Vec<bool>,
    divide: Option<bool>,
}

fn arb_case() -> impl proptest::strategy::Strategy<Value = Case> {
    use proptest::prelude::*;
    (2usize..5, 1usize..48).prop_flat_map(|(n, len)| {
        (
            proptest::collection::vec(proptest::collection::vec((0u8..4, 0..n), 0..4), n),
            proptest::collection::vec(proptest::option::weighted(0.3, 0..n), n),
            proptest::collection::vec((0..n, 0..n), 0..3),
            proptest::collection::vec(proptest::bool::weighted(0.8), n),
            proptest::option::weighted(0.25, proptest::bool::ANY),
        )
            .prop_map(move |(steps, held, extras, donate, divide)| Case {
                len,
                steps,
                held,
                extras,
                donate,
                divide,
            })
    })
}

/// The case's new values, extra outputs and held intermediates over `params`.
fn build(case: &Case, params: &[Array]) -> (Vec<Array>, Vec<Array>, Vec<Array>) {
    let mut held = Vec::new();
    let mut news = Vec::new();
    for (i, steps) in case.steps.iter().enumerate() {
        let mut t = &params[i] * 0.5f32;
        if let Some(a) = case.held[i] {
            let h = params[a].tanh();
            t = &t + &h;
            held.push(h);
        }
        for &(kind, a) in steps {
            let p = &params[a];
            t = match kind {
                0 => &(&t * 1.5f32) + p,
                1 => &t.tanh() - &(p * 0.25f32),
                2 => &t + &p.sum(None, true),
                _ => &t * &p.exp().sin(),
            };
        }
        if let (0, Some(zero)) = (i, case.divide) {
            let num: Vec<i32> = (0..case.len as i32).map(|j| j * 3 - 7).collect();
            let den: Vec<i32> = (0..case.len)
                .map(|j| {
                    if zero && j == case.len / 2 {
                        0
                    } else {
                        j as i32 % 3 + 1
                    }
                })
                .collect();
            let q = Array::from_vec(num, &[case.len])
                .unwrap()
                .floor_div(Array::from_vec(den, &[case.len]).unwrap());
            t = &t + &q.cast(kiln::DType::F32);
        }
        news.push(&params[i] - &(&t * 0.1f32));
    }
    let extras = case
        .extras
        .iter()
        .map(|&(a, b)| (&params[a] * &params[b]).sum(None, false))
        .collect();
    (news, extras, held)
}

fn values(n: usize, len: usize) -> Vec<Vec<f32>> {
    (0..n)
        .map(|i| {
            (0..len)
                .map(|j| ((i * 31 + j * 7) % 23) as f32 * 0.1 - 1.1)
                .collect()
        })
        .collect()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: std::env::var("KILN_DONATE_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Whatever is donated, every result, every held intermediate evaluated afterwards and
    /// every array that still reads equals the CPU's; a donor that no longer reads was
    /// donated and says so.
    #[test]
    fn random_donations_never_change_what_any_array_reads(case in arb_case()) {
        if !Device::Wgpu.is_available() {
            return Ok(());
        }
        let _s = serial();
        let host = values(case.steps.len(), case.len);
        let place = |device: Device| -> Vec<Array> {
            host.iter()
                .map(|v| {
                    Array::from_vec(v.clone(), &[case.len])
                        .unwrap()
                        .to_device(device)
                        .unwrap()
                })
                .collect()
        };
        // The reference: the same graph on the CPU, plainly evaluated.
        let cpu = place(Device::Cpu);
        let (news, extras, held) = build(&case, &cpu);
        let refs: Vec<&Array> = news.iter().chain(&extras).collect();
        if case.divide == Some(true) {
            // A division by zero fails the evaluation on both devices, and on the GPU
            // leaves every parameter as it was, donated or not.
            proptest::prop_assert!(kiln::eval_on(Device::Cpu, &refs).is_err());
            let gpu = place(Device::Wgpu);
            let (news, extras, _) = build(&case, &gpu);
            let refs: Vec<&Array> = news.iter().chain(&extras).collect();
            let donors: Vec<&Array> = gpu.iter().zip(&case.donate)
                .filter_map(|(p, &d)| d.then_some(p))
                .collect();
            let before = Device::Wgpu.memory().donated;
            let err = kiln::eval_donating_on(Device::Wgpu, &refs, &donors).unwrap_err();
            proptest::prop_assert!(matches!(err, kiln::Error::DivisionByZero { .. }), "{}", err);
            proptest::prop_assert_eq!(Device::Wgpu.memory().donated - before, 0);
            for (i, p) in gpu.iter().enumerate() {
                proptest::prop_assert_eq!(&p.to_vec::<f32>().unwrap(), &host[i], "parameter {} of {:?}", i, case);
            }
            return Ok(());
        }
        kiln::eval_on(Device::Cpu, &refs).unwrap();
        let want: Vec<Vec<f32>> = news.iter().chain(&extras).chain(&held)
            .map(|a| a.to_vec::<f32>().unwrap())
            .collect();
        // On the GPU, donating the marked parameters.
        let gpu = place(Device::Wgpu);
        let (news, extras, held) = build(&case, &gpu);
        let refs: Vec<&Array> = news.iter().chain(&extras).collect();
        let donors: Vec<&Array> = gpu.iter().zip(&case.donate)
            .filter_map(|(p, &d)| d.then_some(p))
            .collect();
        let before = Device::Wgpu.memory().donated;
        kiln::eval_donating_on(Device::Wgpu, &refs, &donors).unwrap();
        let donated = Device::Wgpu.memory().donated - before;
        proptest::prop_assert!(donated as usize <= donors.len());
        let got: Vec<Vec<f32>> = news.iter().chain(&extras).chain(&held)
            .map(|a| a.to_vec::<f32>().unwrap())
            .collect();
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            common::close(g, w, 1e-5, &format!("output {k} of {case:?}"));
        }
        let mut unreadable = 0;
        for (i, p) in gpu.iter().enumerate() {
            match p.to_vec::<f32>() {
                Ok(v) => proptest::prop_assert_eq!(&v, &host[i], "parameter {} of {:?}", i, case),
                Err(e) => {
                    proptest::prop_assert!(case.donate[i], "parameter {} was not donated: {}", i, e);
                    proptest::prop_assert!(e.to_string().contains("donated"), "{}", e);
                    unreadable += 1;
                }
            }
        }
        proptest::prop_assert_eq!(unreadable, donated as usize);
    }
}
