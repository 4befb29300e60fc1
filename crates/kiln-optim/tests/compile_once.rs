//! A training loop of 1,000 steps compiles its step exactly once (its own process, so the
//! cache counters see only this loop).

use kiln::{Array, DType};
use kiln_optim::{Adam, Optimizer, Parameter};

#[test]
fn a_thousand_steps_compile_the_step_once() {
    let w = Parameter::new(
        "w",
        Array::normal(&[16, 4], 0.0, 0.1, 1, DType::F32).unwrap(),
    );
    let x = Array::normal(&[32, 16], 0.0, 1.0, 2, DType::F32).unwrap();
    kiln::eval(&[&x, &w.value()]).unwrap(); // the data, outside the measured loop
    let mut opt = Adam::new(1e-2);
    let before = kiln::cache_stats();
    let mut losses = Vec::new();
    for i in 0..1000 {
        let y = x.matmul(&w.value()).tanh();
        let loss = y.square().mean(None, false);
        let g = kiln::grad(&loss, &[&w.value()]).unwrap();
        opt.set_learning_rate(1e-2 / (1.0 + i as f64 * 1e-3)); // a schedule: new scalars only
        opt.step(&[&w], &g, &[&loss]).unwrap(); // forward + backward + update: one plan
        losses.push(loss.item::<f32>().unwrap());
    }
    let after = kiln::cache_stats();
    assert_eq!(
        after.misses - before.misses,
        1,
        "the step compiles once: {:?}",
        after.recent_misses
    );
    assert_eq!(after.hits - before.hits, 999);
    assert!(
        losses[999] < losses[0] * 0.5,
        "the loss decreased: {} -> {}",
        losses[0],
        losses[999]
    );
}
