//! The estimator's contract: `steps` and `max_steps`, hook order, periodic saving and
//! pruning, predictions equal to a forward pass computed on the host, evaluation metrics
//! equal to an offline recomputation, per-mode spec checks, warm starts, evaluating a
//! checkpoint without touching the estimator, and errors from the input.

mod common;

use kiln::{Array, DType};
use kiln_train::demo::{collate, synthetic_classification, training_input, Mlp};
use kiln_train::{
    Context, Dataset, Error, Estimator, Hook, Init, Mode, Model, RunConfig, RunContext, Spec,
    StepInfo, Until, WarmStart,
};
use std::path::PathBuf;

fn scratch(name: &str) -> PathBuf {
    common::scratch("est", name)
}

fn data() -> Vec<(Vec<f32>, i64)> {
    synthetic_classification(256, 6, 3, 1.0, 9).expect("data")
}

fn mlp() -> Mlp {
    let mut m = Mlp::new(&[6, 10, 3]);
    m.learning_rate = 0.01;
    m
}

fn quiet() -> RunConfig {
    RunConfig::new().seed(4).progress(false)
}

#[test]
fn steps_are_relative_and_max_steps_is_a_cap() -> kiln_train::Result<()> {
    let input = training_input(data(), 32, 1)?;
    let mut est = Estimator::new(mlp(), quiet())?;
    assert_eq!(est.train(&input, Until::Steps(10), &mut [])?.steps, 10);
    let r = est.train(&input, Until::Steps(10), &mut [])?;
    assert_eq!((r.steps, r.global_step), (10, 20));
    let r = est.train(&input, Until::MaxSteps(15), &mut [])?;
    assert_eq!((r.steps, r.global_step, est.global_step()), (0, 20, 20));
    let r = est.train(&input, Until::MaxSteps(23), &mut [])?;
    assert_eq!((r.steps, r.global_step), (3, 23));
    // a finite input ends training early
    let short = Dataset::from_slices(data()).batch(100)?.try_map(collate);
    let e = est
        .train(&short, Until::Steps(50), &mut [])
        .expect_err("another input");
    assert!(e.to_string().contains("reset_input"), "{e}");
    est.reset_input();
    let r = est.train(&short, Until::Steps(50), &mut [])?;
    assert_eq!((r.steps, r.stopped_by.as_str()), (3, "input ended"));
    Ok(())
}

/// Records the calls it gets.
#[derive(Default)]
struct Recording(Vec<String>);

impl<M: Model> Hook<M> for Recording {
    fn begin(&mut self, cx: &mut RunContext<'_, M>) -> kiln_train::Result<()> {
        self.0.push(format!("begin {}", cx.global_step()));
        Ok(())
    }
    fn before_step(&mut self, step: u64) -> kiln_train::Result<()> {
        self.0.push(format!("before {step}"));
        Ok(())
    }
    fn after_step(&mut self, _: &mut RunContext<'_, M>, s: &StepInfo) -> kiln_train::Result<()> {
        self.0.push(format!("after {}", s.step));
        Ok(())
    }
    fn end(&mut self, cx: &mut RunContext<'_, M>) -> kiln_train::Result<()> {
        self.0.push(format!("end {}", cx.global_step()));
        Ok(())
    }
}

#[test]
fn hooks_see_begin_each_step_and_end_and_saves_are_pruned() -> kiln_train::Result<()> {
    let dir = scratch("hooks");
    let input = training_input(data(), 32, 1)?;
    let config = quiet().model_dir(&dir).save_every_steps(3).keep_max(2);
    let mut est = Estimator::new(mlp(), config)?;
    let mut rec = Recording::default();
    est.train(&input, Until::Steps(4), &mut [&mut rec])?;
    let mut expected = vec!["begin 0".to_string()];
    for k in 1..=4 {
        expected.push(format!("before {k}"));
        expected.push(format!("after {k}"));
    }
    expected.push("end 4".into());
    assert_eq!(rec.0, expected);
    // saved at 3 and at the end (4); then 6, 9 and the end (10): two kept
    est.train(&input, Until::Steps(6), &mut [])?;
    let steps: Vec<u64> = kiln_train::list_checkpoints(&dir)?
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(steps, vec![9, 10]);
    // a new estimator on the directory resumes at step 10
    let again = Estimator::new(mlp(), quiet().model_dir(&dir))?;
    assert_eq!(again.global_step(), 10);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

/// The MLP's forward pass in f64 on the host, from the estimator's parameter values.
fn host_logits(est: &Estimator<Mlp>, x: &[f32], n: usize) -> Vec<Vec<f64>> {
    let sizes = est.model().sizes.clone();
    let value = |name: &str| -> Vec<f64> {
        let p = est.variables().get(name).expect("a parameter");
        p.value()
            .to_vec::<f32>()
            .expect("values")
            .iter()
            .map(|&v| f64::from(v))
            .collect()
    };
    (0..n)
        .map(|r| {
            let mut h: Vec<f64> = x[r * sizes[0]..(r + 1) * sizes[0]]
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            for i in 0..sizes.len() - 1 {
                let w = value(&format!("dense_{i}/w"));
                let b = value(&format!("dense_{i}/b"));
                let out: Vec<f64> = (0..sizes[i + 1])
                    .map(|j| {
                        b[j] + (0..sizes[i])
                            .map(|k| h[k] * w[k * sizes[i + 1] + j])
                            .sum::<f64>()
                    })
                    .collect();
                h = if i + 2 < sizes.len() {
                    out.into_iter().map(|v| v.max(0.0)).collect()
                } else {
                    out
                };
            }
            h
        })
        .collect()
}

#[test]
fn predictions_are_the_forward_pass_and_metrics_an_offline_recomputation() -> kiln_train::Result<()>
{
    let mut est = Estimator::new(mlp(), quiet())?;
    est.train(&training_input(data(), 32, 1)?, Until::Steps(30), &mut [])?;
    let examples = data();
    let n = examples.len();
    let x: Vec<f32> = examples.iter().flat_map(|e| e.0.clone()).collect();
    let labels: Vec<i64> = examples.iter().map(|e| e.1).collect();
    let reference = host_logits(&est, &x, n);
    // predictions, batches of 50 (the last one short), one example at a time
    let features = Dataset::from_slices(examples.clone())
        .batch(50)?
        .try_map(|b| Ok(collate(b)?.0));
    let predicted: Vec<_> = est
        .predict(&features, None)?
        .collect::<kiln_train::Result<_>>()?;
    assert_eq!(predicted.len(), n);
    for (p, want) in predicted.iter().zip(&reference) {
        let got = p["logits"].to_vec::<f32>()?;
        for (g, w) in got.iter().zip(want) {
            assert!(
                (f64::from(*g) - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "{got:?} vs {want:?}"
            );
        }
        let argmax = (0..want.len())
            .max_by(|&a, &b| want[a].total_cmp(&want[b]))
            .expect("classes");
        assert_eq!(p["class"].item::<i64>()?, argmax as i64);
    }
    // evaluation: mean cross-entropy and accuracy over all examples
    let mut loss = 0.0;
    let mut right = 0;
    for (logits, &y) in reference.iter().zip(&labels) {
        let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + logits.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        loss += lse - logits[y as usize];
        let argmax = (0..logits.len())
            .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
            .expect("c");
        right += usize::from(argmax as i64 == y);
    }
    let eval = Dataset::from_slices(examples).batch(50)?.try_map(collate);
    let metrics = est.evaluate(&eval, None, None)?;
    assert!(
        (metrics["loss"] - loss / n as f64).abs() < 1e-5,
        "{metrics:?} vs {}",
        loss / n as f64
    );
    assert_eq!(metrics["accuracy"], right as f64 / n as f64);
    assert_eq!(metrics["global_step"], 30.0);
    // steps limits the batches read
    let two = est.evaluate(&eval, Some(2), None)?;
    assert_ne!(two["loss"], metrics["loss"]);
    Ok(())
}

/// A model whose spec lacks what its flags say.
struct Broken {
    loss: bool,
    optimizer: bool,
    predictions: bool,
}

impl Model for Broken {
    type Features = Array;
    type Labels = Array;
    fn model_fn(
        &self,
        x: &Array,
        _: Option<&Array>,
        _: Mode,
        cx: &mut Context<'_>,
    ) -> kiln_train::Result<Spec> {
        let w = cx.variable("w", &[2, 1], DType::F32, Init::Ones)?;
        let y = x.try_matmul(&w)?;
        let mut spec = Spec::new();
        if self.loss {
            spec = spec.loss(&y.mean(None, false));
        }
        if self.optimizer {
            spec = spec.optimizer(kiln_optim::Sgd::new(0.1));
        }
        if self.predictions {
            spec = spec.prediction("y", &y);
        }
        Ok(spec)
    }
}

#[test]
fn a_spec_missing_what_its_mode_needs_names_the_field() -> kiln_train::Result<()> {
    let batch = (
        Array::ones(&[4, 2], DType::F32),
        Array::ones(&[4, 1], DType::F32),
    );
    let input = Dataset::from_slices(vec![batch]).repeat(None);
    for (loss, optimizer, field) in [(false, true, "`loss`"), (true, false, "`optimizer`")] {
        let model = Broken {
            loss,
            optimizer,
            predictions: false,
        };
        let mut est = Estimator::new(model, quiet())?;
        let e = est
            .train(&input, Until::Steps(1), &mut [])
            .expect_err("a broken spec");
        assert!(
            matches!(
                e,
                Error::Spec {
                    mode: Mode::Train,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains(field), "{e}");
        assert_eq!(est.global_step(), 0);
    }
    let mut est = Estimator::new(
        Broken {
            loss: true,
            optimizer: true,
            predictions: false,
        },
        quiet(),
    )?;
    let features = Dataset::from_slices(vec![Array::ones(&[4, 2], DType::F32)]);
    let e = est
        .predict(&features, None)?
        .next()
        .expect("an item")
        .expect_err("no predictions");
    assert!(e.to_string().contains("`predictions`"), "{e}");
    Ok(())
}

#[test]
fn warm_start_takes_parameters_by_name_and_evaluating_a_checkpoint_changes_nothing(
) -> kiln_train::Result<()> {
    let dir = scratch("warm-a");
    let input = training_input(data(), 32, 1)?;
    let mut a = Estimator::new(mlp(), quiet().model_dir(&dir).save_every_steps(20))?;
    a.train(&input, Until::Steps(20), &mut [])?;
    let ckpt = kiln_train::checkpoint_path(&dir, 20);
    // a new model warm-started from the first layer only
    let mut b = Estimator::new(
        mlp(),
        quiet()
            .seed(99)
            .warm_start(WarmStart::new(&ckpt).only(["dense_0/w"])),
    )?;
    let probe = Dataset::from_slices(data()).batch(64)?.try_map(collate);
    b.evaluate(&probe, Some(1), None)?; // creates the variables
    let value =
        |e: &Estimator<Mlp>, n: &str| e.variables().get(n).expect(n).value().to_vec::<f32>();
    assert_eq!(value(&b, "dense_0/w")?, value(&a, "dense_0/w")?);
    assert_ne!(value(&b, "dense_1/w")?, value(&a, "dense_1/w")?);
    assert_eq!(b.global_step(), 0);
    // evaluating a's checkpoint from b: a's numbers, b untouched
    let before = value(&b, "dense_1/w")?;
    let from_ckpt = b.evaluate(&probe, None, Some(&ckpt))?;
    let from_a = a.evaluate(&probe, None, None)?;
    assert_eq!(from_ckpt, from_a);
    assert_eq!(value(&b, "dense_1/w")?, before);
    // a warm start naming a missing variable is an error naming it
    let e = Estimator::new(
        mlp(),
        quiet().warm_start(WarmStart::new(&ckpt).only(["nope"])),
    )
    .err()
    .expect("an error");
    assert!(e.to_string().contains("\"nope\""), "{e}");
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

#[test]
fn input_errors_and_bad_configs_are_reported() -> kiln_train::Result<()> {
    // a collate error in the pipeline ends train with it
    let bad = Dataset::from_slices(vec![vec![(vec![1.0f32; 6], 0i64), (vec![1.0; 5], 1)]])
        .try_map(collate);
    let mut est = Estimator::new(mlp(), quiet())?;
    let e = est
        .train(&bad, Until::Steps(3), &mut [])
        .expect_err("a ragged batch");
    assert!(e.to_string().contains("demo::collate"), "{e}");
    assert_eq!(est.global_step(), 0);
    for config in [
        quiet().save_every_steps(0),
        quiet().log_every(0),
        quiet().save_every_secs(f64::NAN),
    ] {
        assert!(Estimator::new(mlp(), config).is_err());
    }
    // saving without a model dir says what to set
    let e = est.save_checkpoint().expect_err("no model dir");
    assert!(e.to_string().contains("model_dir"), "{e}");
    Ok(())
}
