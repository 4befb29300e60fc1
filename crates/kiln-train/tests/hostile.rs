//! Hostile inputs give errors that name the operation, never panics or hangs, and leave the
//! estimator as it was: empty and ragged batches, huge and clashing variables, NaN and
//! negative learning rates and clip norms, damaged and foreign checkpoints, missing
//! warm-start files, micro-batches that leave a replica idle.

mod common;

use kiln::{Array, DType};
use kiln_train::demo::{collate, synthetic_classification, training_input, Mlp};
use kiln_train::{
    Context, Dataset, Estimator, Init, Mode, Model, RunConfig, Spec, Strategy, Until, WarmStart,
};
use std::path::PathBuf;

fn scratch(name: &str) -> PathBuf {
    common::scratch("hostile", name)
}

fn quiet() -> RunConfig {
    RunConfig::new().progress(false)
}

fn input() -> Dataset<(Array, Array)> {
    training_input(
        synthetic_classification(64, 4, 2, 1.0, 3).expect("data"),
        16,
        1,
    )
    .expect("input")
}

/// A model whose learning rate, clip norm and variable shape the test picks.
struct Knobs {
    lr: f64,
    clip: Option<f64>,
    shape: Vec<usize>,
}

impl Model for Knobs {
    type Features = Array;
    type Labels = Array;
    fn model_fn(
        &self,
        x: &Array,
        y: Option<&Array>,
        mode: Mode,
        cx: &mut Context<'_>,
    ) -> kiln_train::Result<Spec> {
        let w = cx.variable("w", &self.shape, DType::F32, Init::Ones)?;
        let pred = x.try_matmul(&w.reshape(&[4, 1]))?.squeeze(Some(&[-1]));
        let mut spec = Spec::new().prediction("y", &pred);
        if let Some(y) = y {
            spec = spec.loss(&pred.try_sub(y.cast(DType::F32))?.square().mean(None, false));
        }
        if mode == Mode::Train {
            spec = spec.optimizer(kiln_optim::Sgd::new(self.lr));
            if let Some(c) = self.clip {
                spec = spec.clip_global_norm(c);
            }
        }
        Ok(spec)
    }
}

fn knobs(lr: f64, clip: Option<f64>) -> Knobs {
    Knobs {
        lr,
        clip,
        shape: vec![4],
    }
}

#[test]
fn bad_learning_rates_and_clip_norms_are_errors_that_change_nothing() {
    for (lr, clip, says) in [
        (f64::NAN, None, "learning rate"),
        (-1.0, None, "learning rate"),
        (f64::INFINITY, None, "learning rate"),
        (0.1, Some(f64::NAN), "clip_global_norm"),
        (0.1, Some(-1.0), "clip_global_norm"),
    ] {
        let mut est = Estimator::new(knobs(lr, clip), quiet()).expect("estimator");
        let e = est
            .train(&input(), Until::Steps(3), &mut [])
            .expect_err("a bad hyperparameter");
        assert!(e.to_string().contains(says), "lr {lr}, clip {clip:?}: {e}");
        assert_eq!(est.global_step(), 0);
        if let Some(w) = est.variables().get("w") {
            assert_eq!(w.value().to_vec::<f32>().expect("w"), vec![1.0; 4]);
        }
    }
}

#[test]
fn huge_and_clashing_variables_are_errors() {
    let mut est = Estimator::new(
        Knobs {
            lr: 0.1,
            clip: None,
            shape: vec![1 << 31, 1 << 31],
        },
        quiet(),
    )
    .expect("estimator");
    let e = est
        .train(&input(), Until::Steps(1), &mut [])
        .expect_err("a variable of 2^62 elements");
    assert!(!e.to_string().is_empty());
    // one name asked for with two shapes
    let mut vars = kiln_train::Variables::new(0);
    let mut cx = Context::new(&mut vars, Mode::Train, 0, 0);
    cx.variable("v", &[2], DType::F32, Init::Zeros)
        .expect("first");
    let e = cx
        .variable("v", &[3], DType::F32, Init::Zeros)
        .expect_err("another shape");
    assert!(
        e.to_string().contains("\"v\"") && e.to_string().contains("[2]"),
        "{e}"
    );
    let e = cx
        .variable("optim/x", &[1], DType::F32, Init::Zeros)
        .expect_err("a reserved name");
    assert!(e.to_string().contains("optim/"), "{e}");
    let e = cx
        .variable("i", &[1], DType::I64, Init::Zeros)
        .expect_err("an integer variable");
    assert!(e.to_string().contains("f32 or f64"), "{e}");
}

#[test]
fn empty_and_ragged_batches_are_errors() {
    let empty = Dataset::from_slices(vec![(
        Array::zeros(&[0, 4], DType::F32),
        Array::zeros(&[0], DType::I64),
    )]);
    let mut est = Estimator::new(
        Mlp::new(&[4, 3, 2]),
        quiet().strategy(Strategy::mirrored(2, 4).expect("strategy")),
    )
    .expect("estimator");
    let e = est
        .train(&empty, Until::Steps(1), &mut [])
        .expect_err("an empty batch");
    assert!(e.to_string().contains("empty batch"), "{e}");
    // features and labels of different lengths
    let ragged = Dataset::from_slices(vec![(
        Array::zeros(&[8, 4], DType::F32),
        Array::zeros(&[7], DType::I64),
    )]);
    est.reset_input();
    let e = est
        .train(&ragged, Until::Steps(1), &mut [])
        .expect_err("8 features, 7 labels");
    assert!(
        e.to_string().contains("8") && e.to_string().contains("7"),
        "{e}"
    );
    // one micro-batch for two replicas leaves one idle: fine in process, an error for MPI;
    // and a collate error names its stage
    let bad = Dataset::from_slices(vec![vec![(vec![1.0f32; 4], 0i64), (vec![1.0; 3], 1)]])
        .try_map(collate);
    est.reset_input();
    let e = est
        .train(&bad, Until::Steps(1), &mut [])
        .expect_err("ragged examples");
    assert!(e.to_string().contains("demo::collate"), "{e}");
    assert_eq!(est.global_step(), 0);
}

#[test]
fn damaged_and_foreign_checkpoints_are_errors_naming_the_file() {
    let dir = scratch("damaged");
    {
        let mut est = Estimator::new(
            Mlp::new(&[4, 3, 2]),
            quiet().model_dir(&dir).save_every_steps(2),
        )
        .expect("estimator");
        est.train(&input(), Until::Steps(2), &mut [])
            .expect("train");
    }
    let newest = kiln_train::checkpoint_path(&dir, 2);
    let bytes = std::fs::read(&newest).expect("read");
    // truncated
    std::fs::write(&newest, &bytes[..bytes.len() / 2]).expect("truncate");
    let e = Estimator::new(Mlp::new(&[4, 3, 2]), quiet().model_dir(&dir))
        .err()
        .expect("a truncated checkpoint");
    assert!(e.to_string().contains("ckpt-2.safetensors"), "{e}");
    // garbage
    std::fs::write(&newest, b"not a checkpoint").expect("garbage");
    assert!(Estimator::new(Mlp::new(&[4, 3, 2]), quiet().model_dir(&dir)).is_err());
    // a model of other shapes on a whole checkpoint: the first step names the variable
    std::fs::write(&newest, &bytes).expect("restore");
    let mut other = Estimator::new(Mlp::new(&[4, 5, 2]), quiet().model_dir(&dir)).expect("opens");
    let e = other
        .train(&input(), Until::Steps(1), &mut [])
        .expect_err("other shapes");
    assert!(e.to_string().contains("dense_0/w"), "{e}");
    // plain safetensors without kiln-train's metadata
    let plain = dir.join("plain.safetensors");
    kiln_io::write_safetensors(&plain, &[("w", &Array::zeros(&[2], DType::F32))], &[])
        .expect("write");
    let e = kiln_train::read_checkpoint(&plain).expect_err("no metadata");
    assert!(e.to_string().contains("kiln_train/"), "{e}");
    // a warm start from a missing file
    let e = Estimator::new(
        Mlp::new(&[4, 3, 2]),
        quiet().warm_start(WarmStart::new(dir.join("missing.safetensors"))),
    )
    .err()
    .expect("a missing warm-start file");
    assert!(e.to_string().contains("missing.safetensors"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn nan_in_the_input_reaches_the_nan_guard_not_a_panic() {
    let nan = Dataset::from_slices(vec![(
        Array::full(&[4, 4], f64::NAN, DType::F32),
        Array::zeros(&[4], DType::I64),
    )])
    .repeat(None);
    let mut est = Estimator::new(Mlp::new(&[4, 3, 2]), quiet()).expect("estimator");
    let mut guard = kiln_train::NanGuard::new(1);
    let e = est
        .train(&nan, Until::Steps(5), &mut [&mut guard])
        .expect_err("NaN features");
    assert!(
        matches!(e, kiln_train::Error::NonFinite { step: 1, .. }),
        "{e:?}"
    );
}
