//! Optimizer steps on the GPU write parameters and slots in place: `Adam::step_owned` on wgpu
//! writes every parameter and both moments over their old storage (after the first step,
//! which reads host values), `Adam::step` with gradients the caller still holds writes
//! only the moments, and both train to the CPU's values. The model embeds its inputs (a
//! gather, whose gradient is a scatter-add): the run confirms their indices before it
//! writes anything over. Skipped with a message when kiln has
//! no wgpu adapter (or was built without its `wgpu` feature), unless `KILN_REQUIRE_GPU=1`.
//!
//! One test: it switches the process's default device, which the steps evaluate on.

use kiln::{Array, DType, Device};
use kiln_optim::{Adam, Optimizer, Parameter};

fn params() -> Vec<Parameter> {
    let emb = Array::uniform(&[30, 24], -1.0, 1.0, 6, DType::F32).unwrap();
    let w1 = Array::uniform(&[24, 16], -0.3, 0.3, 7, DType::F32).unwrap();
    let b1 = Array::zeros(&[16], DType::F32);
    let w2 = Array::uniform(&[16, 5], -0.3, 0.3, 8, DType::F32).unwrap();
    // Values made on the host, the same whichever device trains.
    [("emb", emb), ("w1", w1), ("b1", b1), ("w2", w2)]
        .into_iter()
        .map(|(n, v)| Parameter::new(n, v.to_host().unwrap()))
        .collect()
}

fn loss_and_grads(ps: &[Parameter], step: u64) -> (Array, Vec<Array>) {
    let ids: Vec<i64> = (0..12).map(|i| (i * 11 + step as i64 * 5) % 30).collect();
    let ids = Array::from_vec(ids, &[12]).unwrap();
    let labels: Vec<i64> = (0..12).map(|i| (i * 7 + step as i64) % 5).collect();
    let y = Array::from_vec(labels, &[12])
        .unwrap()
        .one_hot(5, DType::F32);
    let v: Vec<Array> = ps.iter().map(Parameter::value).collect();
    let x = v[0].take(&ids, 0);
    let h = (x.matmul(&v[1]) + &v[2]).tanh();
    let loss = -(h.matmul(&v[3]).log_softmax(-1) * y).sum(None, false) / 12.0;
    let refs: Vec<&Array> = v.iter().collect();
    let g = kiln::grad(&loss, &refs).unwrap();
    (loss, g)
}

/// Trains 6 steps; `owned` hands the gradients over. Returns the losses, the parameters
/// and the results written in place per step.
fn train(owned: bool) -> (Vec<f32>, Vec<Vec<f32>>, Vec<u64>) {
    let ps = params();
    let refs: Vec<&Parameter> = ps.iter().collect();
    let mut opt = Adam::new(0.01);
    let mut losses = Vec::new();
    let mut donated = Vec::new();
    for step in 0..6 {
        let (loss, g) = loss_and_grads(&ps, step);
        let before = Device::Wgpu.memory().donated;
        if owned {
            opt.step_owned(&refs, g, &[&loss]).unwrap();
        } else {
            opt.step(&refs, &g, &[&loss]).unwrap();
        }
        donated.push(Device::Wgpu.memory().donated - before);
        losses.push(loss.item::<f32>().unwrap());
    }
    let values = ps
        .iter()
        .map(|p| p.value().to_vec::<f32>().unwrap())
        .collect();
    (losses, values, donated)
}

fn close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

#[test]
fn adam_on_the_gpu_updates_in_place_with_the_cpus_results() {
    if !Device::Wgpu.is_available() {
        let why = Device::Wgpu.describe();
        assert!(
            std::env::var("KILN_REQUIRE_GPU").map_or(true, |v| v != "1"),
            "KILN_REQUIRE_GPU=1 but wgpu is unavailable: {why}"
        );
        eprintln!("in-place optimizer steps: skipped: {why}");
        return;
    }
    // The reference: the same training on the CPU.
    kiln::set_default_device(Device::Cpu).unwrap();
    let (cpu_losses, cpu_values, _) = train(true);
    kiln::set_default_device(Device::Wgpu).unwrap();
    let owned = train(true);
    let borrowed = train(false);
    kiln::set_default_device(Device::Cpu).unwrap();
    // Step 1 reads host values (the parameters start on the host, the moments as zeros):
    // nothing on the device to write over. Later steps write each parameter and both its
    // moments over their old storage: 12.
    assert_eq!(
        owned.2,
        vec![0, 12, 12, 12, 12, 12],
        "in place per step, owned"
    );
    // Held gradients read the old parameters: only the moments are written over.
    assert_eq!(
        borrowed.2,
        vec![0, 8, 8, 8, 8, 8],
        "in place per step, held"
    );
    for (name, run) in [("owned", &owned), ("held", &borrowed)] {
        close(&run.0, &cpu_losses, &format!("{name}: losses"));
        for (i, (g, c)) in run.1.iter().zip(&cpu_values).enumerate() {
            close(g, c, &format!("{name}: parameter {i} after 6 steps"));
        }
    }
}
