//! Values resident on the GPU between evaluations (feature `wgpu`; skipped with a message
//! without an adapter unless `KILN_REQUIRE_GPU=1`): explicit transfers, results left on the
//! device, bytes moved per training step counted by the backend, device memory flat over a
//! thousand steps, strict placement, and results equal to the CPU's.
//!
//! Depends on kiln's public API only.
#![cfg(feature = "wgpu")]

mod common;

use kiln::{Array, DType, Device};
use std::sync::Mutex;

/// The transfer and memory counters are process-wide: tests that read them run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn explicit_transfers_move_values_and_count_bytes() {
    if !common::wgpu_or_skip("resident values") {
        return;
    }
    let _s = serial();
    let host: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5 - 7.0).collect();
    let x = Array::from_vec(host.clone(), &[10, 100]).unwrap();
    assert_eq!(x.device(), Some(Device::Cpu));
    let before = Device::Wgpu.transfers();
    let g = x.to_device(Device::Wgpu).unwrap();
    let moved = Device::Wgpu.transfers() - before;
    assert_eq!(g.device(), Some(Device::Wgpu));
    assert_eq!((moved.uploads, moved.uploaded_bytes), (1, 4000));
    assert_eq!(moved.downloaded_bytes, 0);
    // Already there: shared, nothing moves.
    let again = g.to_device(Device::Wgpu).unwrap();
    assert_eq!((Device::Wgpu.transfers() - before).uploads, 1);
    // To the host: one download of exactly the value, and the data is the original.
    let before = Device::Wgpu.transfers();
    let h = again.to_host().unwrap();
    let moved = Device::Wgpu.transfers() - before;
    assert_eq!((moved.downloads, moved.downloaded_bytes), (1, 4000));
    assert_eq!(h.device(), Some(Device::Cpu));
    assert_eq!(h.to_vec::<f32>().unwrap(), host);
    assert_eq!(h.shape(), &[10, 100]);
    // `again` shares `g`'s node, which kept the host copy that download made.
    let before = Device::Wgpu.transfers();
    assert_eq!(g.to_vec::<f32>().unwrap(), host);
    assert_eq!((Device::Wgpu.transfers() - before).downloads, 0);
    // Reading a resident value downloads it once; later reads use the kept host copy.
    let fresh = x.to_device(Device::Wgpu).unwrap();
    let before = Device::Wgpu.transfers();
    assert_eq!(fresh.to_vec::<f32>().unwrap(), host);
    assert_eq!(fresh.at::<f32>(&[9, 99]).unwrap(), host[999]);
    assert_eq!(format!("{fresh}"), format!("{x}"));
    assert_eq!((Device::Wgpu.transfers() - before).downloads, 1);
    assert_eq!(
        fresh.device(),
        Some(Device::Wgpu),
        "still resident after the read"
    );
}

#[test]
fn gpu_results_stay_resident_and_feed_later_evaluations_in_place() {
    if !common::wgpu_or_skip("resident values") {
        return;
    }
    let _s = serial();
    let a: Vec<f32> = (0..4096).map(|i| (i as f32 * 0.01).sin()).collect();
    let x = Array::from_vec(a.clone(), &[4096])
        .unwrap()
        .to_device(Device::Wgpu)
        .unwrap();
    let before = Device::Wgpu.transfers();
    let y = (&x * 2.0 + 1.0).exp();
    kiln::eval_on(Device::Wgpu, &[&y]).unwrap();
    assert_eq!(y.device(), Some(Device::Wgpu));
    let z = (&y - &x).sum(None, false);
    kiln::eval_on(Device::Wgpu, &[&z]).unwrap();
    let moved = Device::Wgpu.transfers() - before;
    assert_eq!(
        moved.uploaded_bytes, 0,
        "resident inputs are never uploaded again"
    );
    assert_eq!(
        moved.downloaded_bytes, 0,
        "nothing comes down until it is read"
    );
    let want: f64 = a.iter().map(|&v| ((v * 2.0 + 1.0).exp() - v) as f64).sum();
    let got = z.item::<f32>().unwrap() as f64;
    assert!((got - want).abs() <= 1e-4 * want.abs(), "{got} vs {want}");
    assert_eq!((Device::Wgpu.transfers() - before).downloaded_bytes, 4);
}

#[test]
fn a_resident_input_on_the_cpu_moves_or_is_refused_under_strict_placement() {
    if !common::wgpu_or_skip("resident values") {
        return;
    }
    let _s = serial();
    let x = Array::from_vec(vec![1.0f32, -2.0, 3.5], &[3])
        .unwrap()
        .to_device(Device::Wgpu)
        .unwrap();
    let y = x.abs() * 2.0;
    kiln::set_strict_placement(true);
    let err = kiln::eval_on(Device::Cpu, &[&y]).unwrap_err().to_string();
    kiln::set_strict_placement(false);
    assert!(
        err.contains("resident on wgpu") && err.contains("strict placement"),
        "{err}"
    );
    assert!(!y.is_evaluated(), "a refused evaluation stores nothing");
    // Without strict placement the value moves through the host (a logged transfer).
    kiln::eval_on(Device::Cpu, &[&y]).unwrap();
    assert_eq!(y.device(), Some(Device::Cpu));
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![2.0, 4.0, 7.0]);
}

#[test]
fn a_value_error_surfaces_at_the_gpu_evaluation_and_stores_nothing() {
    if !common::wgpu_or_skip("resident values") {
        return;
    }
    let _s = serial();
    let table = Array::from_vec(vec![1.0f32, 2.0, 3.0], &[3])
        .unwrap()
        .to_device(Device::Wgpu)
        .unwrap();
    let idx = Array::from_vec(vec![0i32, 7], &[2]).unwrap();
    let g = table.take(&idx, 0);
    let err = kiln::eval_on(Device::Wgpu, &[&g]).unwrap_err().to_string();
    assert!(err.contains("index 7"), "{err}");
    assert!(!g.is_evaluated());
    // A good index afterwards works, and stays resident.
    let ok = table.take(&Array::from_vec(vec![2i32, 0], &[2]).unwrap(), 0);
    kiln::eval_on(Device::Wgpu, &[&ok]).unwrap();
    assert_eq!(ok.device(), Some(Device::Wgpu));
    assert_eq!(ok.to_vec::<f32>().unwrap(), vec![3.0, 1.0]);
}

/// One SGD step of a small MLP, written as a user would; returns the new parameters and
/// the loss.
fn mlp_step(params: &[Array], x: &Array, y: &Array, batch: usize) -> (Vec<Array>, Array) {
    let (w1, b1, w2, b2) = (&params[0], &params[1], &params[2], &params[3]);
    let h = (x.matmul(w1) + b1).relu();
    let logits = h.matmul(w2) + b2;
    let loss = -(logits.log_softmax(-1) * y).sum(None, false) / batch as f32;
    let g = kiln::grad(&loss, &[w1, b1, w2, b2]).unwrap();
    let new = params
        .iter()
        .zip(&g)
        .map(|(p, g)| p - &(g * 0.05f32))
        .collect();
    (new, loss)
}

#[test]
fn a_training_step_on_the_gpu_uploads_only_the_batch_and_downloads_only_the_loss() {
    if !common::wgpu_or_skip("resident values") {
        return;
    }
    let _s = serial();
    let n = 16;
    let mut gpu = common::mlp_init(Device::Wgpu);
    let mut cpu = common::mlp_init(Device::Cpu);
    for step in 0..5 {
        let (x, y) = common::mlp_batch(step, n);
        let before = Device::Wgpu.transfers();
        let (new, loss) = mlp_step(&gpu, &x, &y, n);
        let refs: Vec<&Array> = new.iter().chain([&loss]).collect();
        kiln::eval_on(Device::Wgpu, &refs).unwrap();
        let l = loss.item::<f32>().unwrap();
        let moved = Device::Wgpu.transfers() - before;
        // Up: x (16×64 f32) and y (16×10 f32); down: the loss.
        assert_eq!(
            moved.uploaded_bytes,
            (n * 64 * 4 + n * 10 * 4) as u64,
            "step {step}"
        );
        assert_eq!(moved.downloaded_bytes, 4, "step {step}");
        assert!(new.iter().all(|p| p.device() == Some(Device::Wgpu)));
        gpu = new;
        // The same step on the CPU (the reference here: the CPU backend is checked against
        // numpy and the reference interpreter by its own suites).
        let (new, loss) = mlp_step(&cpu, &x, &y, n);
        let refs: Vec<&Array> = new.iter().chain([&loss]).collect();
        kiln::eval_on(Device::Cpu, &refs).unwrap();
        common::close(&[l], &[loss.item::<f32>().unwrap()], 1e-4, "loss");
        cpu = new;
    }
    for (i, (g, c)) in gpu.iter().zip(&cpu).enumerate() {
        common::close(
            &g.to_vec::<f32>().unwrap(),
            &c.to_vec::<f32>().unwrap(),
            1e-4,
            &format!("parameter {i} after 5 steps"),
        );
    }
}

#[test]
fn a_thousand_resident_steps_do_not_grow_device_memory() {
    if !common::wgpu_or_skip("resident values") {
        return;
    }
    let _s = serial();
    let n = 8;
    let mut params = common::mlp_init(Device::Wgpu);
    let (x, y) = common::mlp_batch(0, n);
    let (x, y) = (
        x.to_device(Device::Wgpu).unwrap(),
        y.to_device(Device::Wgpu).unwrap(),
    );
    let mut live = Vec::new();
    let before = Device::Wgpu.transfers();
    let mut first = 0.0;
    let mut last = 0.0;
    for step in 0..1000 {
        let (new, loss) = mlp_step(&params, &x, &y, n);
        let refs: Vec<&Array> = new.iter().chain([&loss]).collect();
        kiln::eval_on(Device::Wgpu, &refs).unwrap();
        params = new;
        if step == 0 || step == 999 {
            let l = loss.item::<f32>().unwrap();
            if step == 0 {
                first = l;
            } else {
                last = l;
            }
        }
        if step % 100 == 99 {
            Device::Wgpu.synchronize();
            live.push(Device::Wgpu.memory().live_bytes);
        }
    }
    let moved = Device::Wgpu.transfers() - before;
    assert_eq!(
        moved.uploaded_bytes, 0,
        "resident batch and parameters: nothing goes up"
    );
    assert_eq!(moved.downloads, 2, "two loss reads");
    assert!(
        live.windows(2).all(|w| w[1] <= w[0]),
        "device memory in use after every 100 steps grew: {live:?}"
    );
    assert!(
        last < first,
        "training on one batch lowers its loss: {first} -> {last}"
    );
}

#[test]
fn downloads_land_in_the_cpu_pool_and_go_back_to_it() {
    if !common::wgpu_or_skip("resident values") {
        return;
    }
    let _s = serial();
    let n = 1 << 16;
    let x = Array::arange(0.0, n as f64, 1.0, DType::F32)
        .unwrap()
        .to_host()
        .unwrap()
        .to_device(Device::Wgpu)
        .unwrap();
    let pool = kiln_cpu::CpuBackend::pool();
    let read = |k: f32| -> Vec<f32> {
        let y = &x * k;
        kiln::eval_on(Device::Wgpu, &[&y]).unwrap();
        y.to_host().unwrap().to_vec::<f32>().unwrap()
    };
    // The first read's storage goes home when its arrays drop; the second reuses it.
    let first = read(2.0);
    assert_eq!(first[n - 1], 2.0 * (n - 1) as f32);
    let hits = pool.stats().hits;
    let second = read(3.0);
    assert_eq!(second[12345], 3.0 * 12345.0);
    assert!(
        pool.stats().hits > hits,
        "the second download did not reuse pooled storage: {:?}",
        pool.stats()
    );
}

#[test]
fn every_dtype_and_empty_shapes_round_trip_through_the_gpu() {
    if !common::wgpu_or_skip("resident values") {
        return;
    }
    let _s = serial();
    for shape in [&[0usize][..], &[3, 0], &[1], &[5, 7]] {
        let n: usize = shape.iter().product();
        let arrays = [
            Array::from_vec((0..n).map(|i| i % 3 == 0).collect::<Vec<bool>>(), shape).unwrap(),
            Array::from_vec(
                (0..n as i32).map(|i| i * 7 - 20).collect::<Vec<i32>>(),
                shape,
            )
            .unwrap(),
            Array::from_vec(
                (0..n as i64)
                    .map(|i| i * -3 + (1 << 40))
                    .collect::<Vec<i64>>(),
                shape,
            )
            .unwrap(),
            Array::from_vec(
                (0..n)
                    .map(|i| [f32::NAN, -0.0, 1.5, f32::INFINITY][i % 4])
                    .collect::<Vec<f32>>(),
                shape,
            )
            .unwrap(),
            Array::from_vec(
                (0..n).map(|i| i as f64 * 0.1 - 1e300).collect::<Vec<f64>>(),
                shape,
            )
            .unwrap(),
        ];
        for a in arrays {
            if !Device::Wgpu.supports(a.dtype()) {
                continue;
            }
            let what = format!("{} {shape:?}", a.dtype());
            let g = a.to_device(Device::Wgpu).unwrap();
            assert_eq!(g.shape(), shape, "{what}");
            let back = g.to_host().unwrap();
            // Compare as printed: NaN equals NaN, and -0.0 keeps its sign.
            assert_eq!(format!("{back:?}"), format!("{a:?}"), "{what}");
            // An op on the GPU reading the resident value matches the CPU's.
            // (A concat copies every element in a kernel, whatever the dtype.)
            let on_gpu = Array::concat(&[&g, &g], 0);
            let on_cpu = Array::concat(&[&a, &a], 0);
            kiln::eval_on(Device::Wgpu, &[&on_gpu]).unwrap();
            kiln::eval_on(Device::Cpu, &[&on_cpu]).unwrap();
            assert_eq!(format!("{on_gpu:?}"), format!("{on_cpu:?}"), "{what}");
        }
    }
}
