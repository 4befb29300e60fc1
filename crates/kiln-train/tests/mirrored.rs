//! Mirrored data parallelism: 1, 2 and 4 replicas write byte-identical checkpoints (in this
//! process, and in fresh processes with `KILN_NUM_THREADS=1` and `2`), one device matches a
//! hand-written training loop bit for bit, and micro-batched replicas match it to 1e-5
//! after the first step; every replica count sees the same examples in every global step.

mod common;

use kiln::{Array, DType};
use kiln_optim::{Adam, Optimizer, Parameter};
use kiln_train::demo::{synthetic_classification, training_input, Mlp};
use kiln_train::{
    Context, Dataset, Estimator, Mode, Model, RunConfig, Spec, Strategy, Until, Variables,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

fn scratch(name: &str) -> PathBuf {
    common::scratch("mirrored", name)
}

fn mlp() -> Mlp {
    let mut m = Mlp::new(&[32, 64, 64, 8]);
    m.learning_rate = 3e-3;
    m.decay = 0.9;
    m.decay_steps = 10;
    m
}

fn input() -> Dataset<(Array, Array)> {
    let data = synthetic_classification(1024, 32, 8, 1.0, 42).expect("data");
    training_input(data, 64, 5).expect("input")
}

fn train(model: Mlp, strategy: Strategy, steps: u64, dir: &Path) -> Vec<u8> {
    let config = RunConfig::new()
        .model_dir(dir)
        .seed(11)
        .strategy(strategy)
        .save_every_steps(steps)
        .progress(false);
    let mut est = Estimator::new(model, config).expect("estimator");
    let report = est
        .train(&input(), Until::Steps(steps), &mut [])
        .expect("train");
    assert_eq!(report.global_step, steps);
    std::fs::read(kiln_train::checkpoint_path(dir, steps)).expect("checkpoint")
}

#[test]
fn one_two_and_four_replicas_write_the_same_bytes() {
    let mut with_dropout = mlp();
    with_dropout.dropout = 0.2;
    let mut files = Vec::new();
    for replicas in [1, 2, 4] {
        let dir = scratch(&format!("r{replicas}"));
        let strategy = Strategy::mirrored(replicas, 16).expect("strategy");
        files.push(train(with_dropout.clone(), strategy, 50, &dir));
        std::fs::remove_dir_all(&dir).ok();
    }
    assert!(files[0].len() > 10_000);
    assert!(files[0] == files[1], "1 and 2 replicas differ");
    assert!(files[0] == files[2], "1 and 4 replicas differ");
    // the test can fail: another micro-batch size sums in another order
    let dir = scratch("m32");
    let other = train(
        with_dropout,
        Strategy::mirrored(2, 32).expect("strategy"),
        50,
        &dir,
    );
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        other != files[0],
        "micro-batches of 32 gave the bytes of 16"
    );
}

#[test]
fn replica_counts_agree_in_fresh_processes_for_one_and_two_threads() {
    let bin = env!("CARGO_BIN_EXE_kiln-train-mlp");
    for threads in ["1", "2"] {
        let mut files = Vec::new();
        for replicas in ["1", "2", "4"] {
            let dir = scratch(&format!("p{threads}-{replicas}"));
            let out = Command::new(bin)
                .env("KILN_NUM_THREADS", threads)
                .args(["--steps", "50", "--save-every", "50", "--micro-batch", "16"])
                .args(["--batch", "64", "--replicas", replicas, "--dropout", "0.2"])
                .arg("--model-dir")
                .arg(&dir)
                .output()
                .expect("run kiln-train-mlp");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            files.push(std::fs::read(dir.join("ckpt-50.safetensors")).expect("checkpoint"));
            std::fs::remove_dir_all(&dir).ok();
        }
        assert!(
            files[0] == files[1],
            "KILN_NUM_THREADS={threads}: 1 and 2 replicas differ"
        );
        assert!(
            files[0] == files[2],
            "KILN_NUM_THREADS={threads}: 1 and 4 replicas differ"
        );
    }
}

/// A plain training loop: the model function's graph on the whole batch, kiln::grad, and
/// kiln-optim's Adam, with nothing of the estimator but the variable store.
fn plain_loop(model: &Mlp, steps: u64) -> Vec<(String, Vec<f32>)> {
    let mut vars = Variables::new(11);
    let mut adam: Option<Adam> = None;
    let mut it = input().iter();
    for step in 0..steps {
        let (x, y) = it.next().expect("a batch").expect("batch");
        let mut cx = Context::new(&mut vars, Mode::Train, step, 0);
        let spec = model
            .model_fn(&x, Some(&y), Mode::Train, &mut cx)
            .expect("spec");
        let loss = spec.loss.expect("loss");
        let lr = spec.optimizer.expect("optimizer").learning_rate();
        // the graph read each parameter's current value: the gradient is taken w.r.t. it
        let params: Vec<Arc<Parameter>> = vars.parameters().to_vec();
        let values: Vec<Array> = params.iter().map(|p| p.value()).collect();
        let refs: Vec<&Array> = values.iter().collect();
        let grads = kiln::grad(&loss, &refs).expect("grad");
        let opt = adam.get_or_insert_with(|| Adam::new(lr));
        opt.set_learning_rate(lr);
        let prefs: Vec<&Parameter> = params.iter().map(|p| &**p).collect();
        opt.step(&prefs, &grads, &[&loss]).expect("step");
    }
    vars.parameters()
        .iter()
        .map(|p| {
            (
                p.name().to_string(),
                p.value().to_vec::<f32>().expect("values"),
            )
        })
        .collect()
}

fn estimator_params(strategy: Strategy, steps: u64) -> Vec<(String, Vec<f32>)> {
    let mut est = Estimator::new(
        mlp(),
        RunConfig::new().seed(11).strategy(strategy).progress(false),
    )
    .expect("estimator");
    est.train(&input(), Until::Steps(steps), &mut [])
        .expect("train");
    est.variables()
        .parameters()
        .iter()
        .map(|p| {
            (
                p.name().to_string(),
                p.value().to_vec::<f32>().expect("values"),
            )
        })
        .collect()
}

fn relative_difference(a: &[f32], b: &[f32]) -> f64 {
    let diff: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
    let norm: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
    (diff / norm.max(1e-30)).sqrt()
}

#[test]
fn one_device_is_the_plain_loop_and_replicas_are_within_1e5_after_step_one() {
    let reference = plain_loop(&mlp(), 1);
    let one = estimator_params(Strategy::OneDevice, 1);
    assert_eq!(one, reference, "one device differs from the plain loop");
    for replicas in [1, 2, 4] {
        let mirrored = estimator_params(Strategy::mirrored(replicas, 16).expect("strategy"), 1);
        let mut worst = 0.0f64;
        for ((n, a), (m, b)) in mirrored.iter().zip(&reference) {
            assert_eq!(n, m);
            worst = worst.max(relative_difference(a, b));
        }
        assert!(
            worst <= 1e-5,
            "{replicas} replicas: relative difference {worst:e}"
        );
    }
    // after several steps one device still is the plain loop, bit for bit
    assert_eq!(
        estimator_params(Strategy::OneDevice, 5),
        plain_loop(&mlp(), 5)
    );
}

/// A model that records which examples each global step trained on.
struct Recorder {
    seen: Mutex<Vec<(u64, Vec<i64>)>>,
}

impl Model for Recorder {
    type Features = Array;
    type Labels = Array;

    fn model_fn(
        &self,
        x: &Array,
        y: Option<&Array>,
        mode: Mode,
        cx: &mut Context<'_>,
    ) -> kiln_train::Result<Spec> {
        let ids = x.to_vec::<f64>()?.iter().map(|v| *v as i64).collect();
        self.seen
            .lock()
            .map_err(|_| kiln_train::Error::invalid("Recorder", "poisoned"))?
            .push((cx.global_step(), ids));
        let w = cx.variable("w", &[1], DType::F64, kiln_train::Init::Zeros)?;
        let loss = x
            .try_matmul(&w.reshape(&[1, 1]))?
            .try_sub(y.ok_or_else(|| kiln_train::Error::invalid("Recorder", "no labels"))?)?;
        let mut spec = Spec::new().loss(&loss.square().mean(None, false));
        if mode == Mode::Train {
            spec = spec.optimizer(kiln_optim::Sgd::new(0.0));
        }
        Ok(spec)
    }
}

#[test]
fn every_replica_count_trains_on_the_same_examples_in_each_global_step() {
    let ids: Vec<i64> = (0..40).collect();
    let input = Dataset::from_slices(ids)
        .shuffle(3)
        .batch_exact(8)
        .expect("batch")
        .map(|b| {
            let x: Vec<f64> = b.iter().map(|&i| i as f64).collect();
            let n = x.len();
            (
                Array::from_vec(x, &[n, 1]).expect("x"),
                Array::zeros(&[n, 1], DType::F64),
            )
        })
        .repeat(None);
    let mut per_count = Vec::new();
    for strategy in [
        Strategy::OneDevice,
        Strategy::mirrored(1, 3).expect("s"),
        Strategy::mirrored(2, 3).expect("s"),
        Strategy::mirrored(4, 3).expect("s"),
    ] {
        let rec = Recorder {
            seen: Mutex::new(Vec::new()),
        };
        let mut est = Estimator::new(rec, RunConfig::new().strategy(strategy).progress(false))
            .expect("estimator");
        est.train(&input, Until::Steps(12), &mut []).expect("train");
        let seen = est.model().seen.lock().expect("lock").clone();
        let mut by_step: Vec<Vec<i64>> = vec![Vec::new(); 12];
        for (step, ids) in seen {
            by_step[step as usize].extend(ids);
        }
        per_count.push(by_step);
    }
    for by_step in &per_count[1..] {
        assert_eq!(by_step, &per_count[0]);
    }
    // and each epoch of 5 steps covers the 40 examples exactly once
    let mut epoch: Vec<i64> = per_count[0][..5].concat();
    epoch.sort();
    assert_eq!(epoch, (0..40).collect::<Vec<_>>());
}

#[test]
fn replicas_share_compiled_plans_and_later_steps_compile_nothing() {
    let bin = env!("CARGO_BIN_EXE_kiln-train-mlp");
    let compiles = |steps: &str, replicas: &str| -> u64 {
        let out = Command::new(bin)
            .args([
                "--steps",
                steps,
                "--replicas",
                replicas,
                "--micro-batch",
                "16",
            ])
            .output()
            .expect("run kiln-train-mlp");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
        line["compiles"].as_u64().expect("a compile count")
    };
    for replicas in ["1", "2", "4"] {
        // (the NaN guard's first check, at step 10, compiles its probe once)
        let (short, long) = (compiles("20", replicas), compiles("60", replicas));
        assert_eq!(
            short, long,
            "{replicas} replicas: steps 21 to 60 compiled again"
        );
    }
    // and 4 replicas compile what 1 does: the micro-batches share their plans
    assert_eq!(compiles("20", "4"), compiles("20", "1"));
}
