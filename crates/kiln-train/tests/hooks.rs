//! The built-in hooks: the NaN guard names the step and the parameter, early stopping and
//! stop-at-step end training when they should, reduce-LR-on-plateau scales the rate and
//! restores the best parameters, keep-best keeps the best checkpoint, the step log writes
//! JSON lines with the window's mean loss, and checkpoint listeners hear every save.

mod common;

use kiln::{Array, DType};
use kiln_train::{
    CheckpointListener, CheckpointSaver, Context, Dataset, EarlyStopping, Error, Estimator, Goal,
    Hook, Init, KeepBest, Mode, Model, Monitor, NanGuard, ReduceLrOnPlateau, RunConfig, RunContext,
    Spec, StepInfo, StepLog, StopAtStep, Until,
};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

fn scratch(name: &str) -> PathBuf {
    common::scratch("hooks", name)
}

/// `y ≈ w·x` by least squares with SGD at `lr`.
struct Scale {
    lr: f64,
}

impl Model for Scale {
    type Features = Array;
    type Labels = Array;
    fn model_fn(
        &self,
        x: &Array,
        y: Option<&Array>,
        mode: Mode,
        cx: &mut Context<'_>,
    ) -> kiln_train::Result<Spec> {
        let w = cx.variable("w", &[1], DType::F64, Init::Zeros)?;
        let pred = x.try_mul(&w)?;
        let mut spec = Spec::new().prediction("y", &pred);
        if let Some(y) = y {
            spec = spec.loss(&pred.try_sub(y)?.square().mean(None, false));
        }
        if mode == Mode::Train {
            spec = spec.optimizer(kiln_optim::Sgd::new(self.lr));
        }
        Ok(spec)
    }
}

/// Batches `(x, y)` of four examples, `x` = 1 except where `nan_at` puts a NaN.
fn batches(y: f64, nan_at: Option<usize>) -> Dataset<(Array, Array)> {
    Dataset::from_fn(1000, move |i| {
        let x = if Some(i) == nan_at { f64::NAN } else { 1.0 };
        (
            Array::from_vec(vec![x; 4], &[4]).expect("x"),
            Array::from_vec(vec![y; 4], &[4]).expect("y"),
        )
    })
}

fn quiet() -> RunConfig {
    RunConfig::new().progress(false)
}

#[test]
fn the_nan_guard_names_the_step_and_the_parameter() {
    let mut est = Estimator::new(Scale { lr: 0.1 }, quiet()).expect("estimator");
    let mut guard = NanGuard::new(1);
    let e = est
        .train(&batches(1.0, Some(2)), Until::Steps(10), &mut [&mut guard])
        .expect_err("a NaN input");
    match &e {
        Error::NonFinite {
            step, parameter, ..
        } => {
            assert_eq!((*step, parameter.as_deref()), (3, Some("w")), "{e}");
        }
        other => panic!("expected NonFinite, got {other:?}"),
    }
    assert!(
        e.to_string().contains("step 3") && e.to_string().contains("\"w\""),
        "{e}"
    );
    // without the guard the run goes on with NaN
    let mut est = Estimator::new(Scale { lr: 0.1 }, quiet()).expect("estimator");
    let r = est
        .train(&batches(1.0, Some(2)), Until::Steps(10), &mut [])
        .expect("train");
    assert!(r.last_loss.is_nan());
}

#[test]
fn early_stopping_and_stop_at_step_end_training() {
    // a learning rate of 0: the loss never improves after the first check
    let mut est = Estimator::new(Scale { lr: 0.0 }, quiet()).expect("estimator");
    let mut early = EarlyStopping::new(Monitor::TrainLoss, 1, Goal::Minimize, 3);
    let r = est
        .train(&batches(1.0, None), Until::Steps(100), &mut [&mut early])
        .expect("train");
    assert_eq!(r.steps, 4, "{r:?}");
    assert!(r.stopped_by.contains("EarlyStopping"), "{r:?}");
    assert_eq!(early.best(), Some(1.0));
    let mut est = Estimator::new(Scale { lr: 0.1 }, quiet()).expect("estimator");
    let mut stop = StopAtStep::new(5);
    let r = est
        .train(&batches(1.0, None), Until::Steps(100), &mut [&mut stop])
        .expect("train");
    assert_eq!(r.global_step, 5);
}

/// Records the learning rate of each step and `w` after the other hooks ran.
#[derive(Default)]
struct Watch {
    lr: Vec<f64>,
    w: Vec<f64>,
    loss: Vec<f64>,
}

impl<M: Model> Hook<M> for Watch {
    fn after_step(&mut self, cx: &mut RunContext<'_, M>, s: &StepInfo) -> kiln_train::Result<()> {
        self.lr.push(s.learning_rate);
        self.loss.push(s.loss);
        self.w.push(cx.parameters()[0].value().to_vec::<f64>()?[0]);
        Ok(())
    }
}

#[test]
fn reduce_lr_on_plateau_scales_the_rate_and_restores_the_best() {
    // training pulls w to 1 while the evaluation wants -1: every check after the first is
    // worse, so each one reduces the rate and puts back step 1's w
    let monitor = Monitor::Eval {
        input: batches(-1.0, None).take(1),
        steps: None,
        metric: "loss".into(),
    };
    let mut reduce = ReduceLrOnPlateau::new(monitor, 1, Goal::Minimize, 0.5, 1)
        .expect("hook")
        .restore_best(true);
    let mut watch = Watch::default();
    let mut est = Estimator::new(Scale { lr: 0.1 }, quiet()).expect("estimator");
    est.train(
        &batches(1.0, None),
        Until::Steps(4),
        &mut [&mut reduce, &mut watch],
    )
    .expect("train");
    assert_eq!(watch.lr, vec![0.1, 0.1, 0.05, 0.025]);
    assert_eq!(reduce.reductions(), 3);
    // step 1 moved w to 0.2 (gradient -2 at lr 0.1); every later step's move was undone
    assert_eq!(watch.w, vec![0.2, 0.2, 0.2, 0.2]);
    assert!(
        ReduceLrOnPlateau::<Scale>::new(Monitor::TrainLoss, 1, Goal::Minimize, 1.5, 1).is_err()
    );
}

#[test]
fn keep_best_keeps_the_best_checkpoint_outside_pruning() {
    let dir = scratch("best");
    // the evaluation agrees with training for 6 steps, so every check improves
    let monitor = Monitor::Eval {
        input: batches(1.0, None).take(1),
        steps: None,
        metric: "loss".into(),
    };
    let mut best = KeepBest::new(monitor, 2, Goal::Minimize);
    let config = quiet().model_dir(&dir).keep_max(1);
    let mut est = Estimator::new(Scale { lr: 0.1 }, config).expect("estimator");
    est.train(&batches(1.0, None), Until::Steps(6), &mut [&mut best])
        .expect("train");
    let kept = best.kept().expect("a kept checkpoint").to_path_buf();
    assert_eq!(kept, dir.join("best").join("ckpt-6.safetensors"));
    let ckpt = kiln_train::read_checkpoint(&kept).expect("readable");
    assert_eq!(ckpt.global_step, 6);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("best/best.json")).expect("json"))
            .expect("parse");
    assert_eq!(json["step"], 6);
    // only one file in best/ besides best.json
    assert_eq!(std::fs::read_dir(dir.join("best")).expect("dir").count(), 2);
    std::fs::remove_dir_all(&dir).ok();
}

/// A `Write` the test can read back.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(Clone, Default)]
struct Heard(Arc<Mutex<Vec<String>>>);

impl CheckpointListener for Heard {
    fn before_save(&mut self, step: u64) -> kiln_train::Result<()> {
        self.0.lock().expect("lock").push(format!("before {step}"));
        Ok(())
    }
    fn after_save(&mut self, step: u64, path: &Path) -> kiln_train::Result<()> {
        assert!(path.exists());
        self.0.lock().expect("lock").push(format!("after {step}"));
        Ok(())
    }
}

#[test]
fn the_step_log_writes_json_lines_and_listeners_hear_every_save() {
    let out = Shared::default();
    let mut log = StepLog::new(Box::new(out.clone()), 2);
    let heard = Heard::default();
    let mut saver = CheckpointSaver::new(Some(2), None).listener(heard.clone());
    let mut watch = Watch::default();
    let dir = scratch("log");
    let mut est = Estimator::new(Scale { lr: 0.1 }, quiet().model_dir(&dir)).expect("estimator");
    est.train(
        &batches(1.0, None),
        Until::Steps(5),
        &mut [&mut watch, &mut log, &mut saver],
    )
    .expect("train");
    let text = String::from_utf8(out.0.lock().expect("lock").clone()).expect("utf-8");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert_eq!(lines.len(), 2);
    for (line, k) in lines.iter().zip([2usize, 4]) {
        assert_eq!(line["step"], k);
        let mean = (watch.loss[k - 2] + watch.loss[k - 1]) / 2.0;
        assert_eq!(line["loss"].as_f64(), Some(mean));
        assert_eq!(line["learning_rate"].as_f64(), Some(0.1));
        assert!(line["examples_per_sec"].as_f64().is_some_and(|v| v > 0.0));
    }
    let heard = heard.0.lock().expect("lock").clone();
    assert_eq!(
        heard,
        vec!["before 2", "after 2", "before 4", "after 4", "before 5", "after 5"]
    );
    std::fs::remove_dir_all(&dir).ok();
}
