//! A step that fails changes nothing, for every optimizer (SGD, SGD with weight decay,
//! momentum, Nesterov, Adam, AdamW): no parameter value, no momentum buffer or moment, no step
//! count.
//! Each failure is checked against a twin optimizer that never saw it: after the failure both
//! take the same real steps, and their parameters must agree bit for bit.
//! A failure before the first step is also checked against the first update computed by hand
//! in f64 (for Adam: bias-corrected with t = 1).
//! Also here: hostile hyperparameters (NaN, infinite or negative learning rates, β outside
//! [0, 1), ...) are errors that change nothing, NaN and infinite gradients are data that stay
//! in their own elements, and `clip_by_global_norm` rejects what it cannot clip.

use kiln::{Array, DType};
use kiln_optim::{clip_by_global_norm, Adam, Error, Optimizer, Parameter, Sgd};

/// An optimizer configuration under test.
struct Config {
    name: &'static str,
    /// The operation its errors name.
    op: &'static str,
    make: fn() -> Box<dyn Optimizer>,
    /// Whether it keeps per-parameter state (momentum buffers, moments).
    stateful: bool,
    /// The first update of one f64 element `w` with gradient `g`, by hand.
    first: fn(f64, f64) -> f64,
}

fn configs() -> Vec<Config> {
    vec![
        Config {
            name: "sgd",
            op: "Sgd::step",
            make: || Box::new(Sgd::new(0.1)),
            stateful: false,
            first: |w, g| w - 0.1 * g,
        },
        Config {
            name: "sgd with weight decay",
            op: "Sgd::step",
            make: || Box::new(Sgd::new(0.1).weight_decay(0.01)),
            stateful: false,
            first: |w, g| w - 0.1 * (g + 0.01 * w),
        },
        Config {
            name: "momentum",
            op: "Sgd::step",
            make: || Box::new(Sgd::new(0.1).momentum(0.9).weight_decay(0.01)),
            stateful: true,
            // the buffer starts at zero: b = g'
            first: |w, g| w - 0.1 * (g + 0.01 * w),
        },
        Config {
            name: "nesterov",
            op: "Sgd::step",
            make: || Box::new(Sgd::new(0.1).momentum(0.9).nesterov(true)),
            stateful: true,
            first: |w, g| w - 0.1 * (g + 0.9 * g),
        },
        Config {
            name: "adam",
            op: "Adam::step",
            make: || Box::new(Adam::new(0.05)),
            stateful: true,
            first: |w, g| adam_first(w, g, 0.05, 0.9, 0.999, 1e-8, 0.0),
        },
        Config {
            name: "adamw",
            op: "Adam::step",
            make: || Box::new(Adam::new(0.05).weight_decay(0.01)),
            stateful: true,
            first: |w, g| adam_first(w, g, 0.05, 0.9, 0.999, 1e-8, 0.01),
        },
        Config {
            name: "adam with custom betas and eps",
            op: "Adam::step",
            make: || Box::new(Adam::new(0.02).betas(0.8, 0.99).eps(1e-3)),
            stateful: true,
            first: |w, g| adam_first(w, g, 0.02, 0.8, 0.99, 1e-3, 0.0),
        },
    ]
}

/// Adam's (AdamW's) first update, by the textbook: moments from zero, bias-corrected with
/// t = 1, decoupled decay.
fn adam_first(w: f64, g: f64, lr: f64, b1: f64, b2: f64, eps: f64, wd: f64) -> f64 {
    let t = 1;
    let m = (1.0 - b1) * g;
    let v = (1.0 - b2) * g * g;
    let m_hat = m / (1.0 - b1.powi(t));
    let v_hat = v / (1.0 - b2.powi(t));
    let w = w - lr * wd * w;
    w - lr * m_hat / (v_hat.sqrt() + eps)
}

/// The model: an f64 and an f32 parameter.
fn model() -> (Parameter, Parameter) {
    (
        Parameter::new("a", f64s(&[0.5, -1.0, 2.0])),
        Parameter::new(
            "b",
            Array::from_vec(vec![1.0f32, -0.25, 3.5, 0.0], &[2, 2]).unwrap(),
        ),
    )
}

fn f64s(v: &[f64]) -> Array {
    Array::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

/// The gradients of real step `k`: data that differs from step to step.
fn grads(k: usize) -> Vec<Array> {
    let k = k as f64;
    vec![
        f64s(&[0.5 - 0.3 * k, -1.25, 2.0 + k]),
        Array::from_vec(vec![0.1f32 * k as f32, -2.0, 0.75, 1.0 + k as f32], &[2, 2]).unwrap(),
    ]
}

/// A real step `k`, with a loss-like extra output evaluated in the same pass.
fn real_step(opt: &mut dyn Optimizer, a: &Parameter, b: &Parameter, k: usize) {
    let extra = (&a.value() * &a.value()).sum(None, false);
    opt.step(&[a, b], &grads(k), &[&extra]).unwrap();
}

/// A parameter's bits.
fn bits(p: &Parameter) -> Vec<u64> {
    match p.dtype() {
        DType::F64 => p
            .value()
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect(),
        DType::F32 => p
            .value()
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|x| u64::from(x.to_bits()))
            .collect(),
        other => panic!("no float parameter: {other}"),
    }
}

/// A float64 `[n]` array that fails when evaluated (a `take` out of range).
fn failing_f64(n: usize) -> Array {
    let idx: Vec<i64> = (0..n as i64)
        .map(|i| if i == 0 { 7 } else { i - 1 })
        .collect();
    f64s(&vec![1.0; n]).take(&Array::from_vec(idx, &[n]).unwrap(), 0)
}

/// A way for a step to fail, and what its error must say.
struct Failure {
    what: &'static str,
    /// Attempts the failing step.
    run: fn(&mut dyn Optimizer, &Parameter, &Parameter) -> kiln_optim::Result<()>,
    /// Text the error must contain.
    says: &'static [&'static str],
}

fn failures() -> Vec<Failure> {
    vec![
        Failure {
            what: "an int parameter",
            run: |opt, a, b| {
                let n = Parameter::new("n", Array::from_vec(vec![1i64, 2], &[2]).unwrap());
                let mut g = grads(9);
                g.push(Array::from_vec(vec![1i64, 1], &[2]).unwrap());
                opt.step(&[a, b, &n], &g, &[])
            },
            says: &["\"n\"", "int64", "f32 or f64"],
        },
        Failure {
            what: "a bool parameter",
            run: |opt, a, b| {
                let n = Parameter::new("flag", Array::from_vec(vec![true], &[1]).unwrap());
                let mut g = grads(9);
                g.push(Array::from_vec(vec![false], &[1]).unwrap());
                opt.step(&[a, &n, b], &g, &[])
            },
            says: &["\"flag\"", "bool"],
        },
        Failure {
            what: "an extra output that fails to evaluate",
            run: |opt, a, b| {
                let loss = (&a.value() * 2.0).sum(None, false);
                let bad = failing_f64(2);
                opt.step(&[a, b], &grads(9), &[&loss, &bad])
            },
            says: &[
                "extra output #1",
                "no parameter and no optimizer state changed",
            ],
        },
        Failure {
            what: "a gradient that fails to evaluate",
            run: |opt, a, b| {
                let mut g = grads(9);
                g[0] = failing_f64(3);
                opt.step(&[a, b], &g, &[])
            },
            says: &["gradient of parameter \"a\""],
        },
        Failure {
            what: "a parameter whose value fails to evaluate",
            run: |opt, a, b| {
                let c = Parameter::new("c", failing_f64(3));
                let mut g = grads(9);
                g.push(f64s(&[1.0, 1.0, 1.0]));
                opt.step(&[a, b, &c], &g, &[])
            },
            says: &["value of parameter \"c\""],
        },
        Failure {
            what: "one gradient too few",
            run: |opt, a, b| opt.step(&[a, b], &grads(9)[..1], &[]),
            says: &["2 parameters but 1 gradients"],
        },
        Failure {
            what: "a gradient of the wrong shape",
            run: |opt, a, b| {
                let mut g = grads(9);
                g[1] = Array::zeros(&[4], DType::F32);
                opt.step(&[a, b], &g, &[])
            },
            says: &["\"b\"", "[2, 2]", "[4]"],
        },
        Failure {
            what: "a gradient of the wrong dtype",
            run: |opt, a, b| {
                let mut g = grads(9);
                g[0] = g[0].cast(DType::F32);
                opt.step(&[a, b], &g, &[])
            },
            says: &["\"a\"", "float64", "float32"],
        },
        Failure {
            what: "two parameters of one name",
            run: |opt, a, b| {
                let twin = Parameter::new("a", f64s(&[0.0, 0.0, 0.0]));
                let mut g = grads(9);
                g.push(f64s(&[1.0, 1.0, 1.0]));
                opt.step(&[a, b, &twin], &g, &[])
            },
            says: &["#0 and #2", "\"a\"", "distinct"],
        },
        Failure {
            what: "a NaN learning rate",
            run: |opt, a, b| {
                let lr = opt.learning_rate();
                opt.set_learning_rate(f64::NAN);
                let r = opt.step(&[a, b], &grads(9), &[]);
                opt.set_learning_rate(lr);
                r
            },
            says: &["learning rate is NaN", "set_learning_rate"],
        },
    ]
}

/// Runs `fail` between real steps of `config`'s optimizer and checks it against a twin that
/// never saw it; `first` tells whether the failure comes before the first real step.
fn check_against_twin(config: &Config, failure: &Failure, first: bool) {
    let label = format!(
        "{} / {} ({} the first step)",
        config.name,
        failure.what,
        if first { "before" } else { "after" }
    );
    let (mut opt, (a, b)) = ((config.make)(), model());
    let (mut twin, (ta, tb)) = ((config.make)(), model());
    if !first {
        real_step(opt.as_mut(), &a, &b, 0);
        real_step(twin.as_mut(), &ta, &tb, 0);
    }
    let before = (bits(&a), bits(&b));
    let e = (failure.run)(opt.as_mut(), &a, &b).expect_err(&label);
    let message = e.to_string();
    assert!(message.starts_with(config.op), "{label}: {message}");
    for s in failure.says {
        assert!(message.contains(s), "{label}: {message:?} lacks {s:?}");
    }
    assert_eq!((bits(&a), bits(&b)), before, "{label}: parameters changed");
    assert_eq!(opt.learning_rate(), twin.learning_rate(), "{label}");
    for k in 1..=3 {
        real_step(opt.as_mut(), &a, &b, k);
        real_step(twin.as_mut(), &ta, &tb, k);
        assert_eq!(bits(&a), bits(&ta), "{label}: \"a\" after real step {k}");
        assert_eq!(bits(&b), bits(&tb), "{label}: \"b\" after real step {k}");
    }
}

#[test]
fn every_failed_step_leaves_every_optimizer_as_it_was() {
    for config in configs() {
        for failure in failures() {
            check_against_twin(&config, &failure, false);
            check_against_twin(&config, &failure, true);
        }
    }
}

#[test]
fn a_failed_first_step_leaves_the_first_update_as_computed_by_hand() {
    let w0 = [0.5f64, -1.0, 2.0];
    let g0 = [4.0f64, -0.003, 1e-4];
    for config in configs() {
        for failure in ["an int parameter", "an extra output"] {
            let w = Parameter::new("w", f64s(&w0));
            let mut opt = (config.make)();
            let e = if failure == "an int parameter" {
                let n = Parameter::new("n", Array::from_vec(vec![1i32], &[1]).unwrap());
                let g = [f64s(&g0), Array::from_vec(vec![1i32], &[1]).unwrap()];
                opt.step(&[&w, &n], &g, &[])
            } else {
                opt.step(&[&w], &[f64s(&g0)], &[&failing_f64(1)])
            };
            assert!(e.is_err(), "{} / {failure}", config.name);
            opt.step(&[&w], &[f64s(&g0)], &[]).unwrap();
            let got = w.value().to_vec::<f64>().unwrap();
            for k in 0..3 {
                let want = (config.first)(w0[k], g0[k]);
                assert!(
                    (got[k] - want).abs() <= 1e-14 * want.abs().max(1.0),
                    "{} / {failure}: element {k}: {} vs {want} by hand",
                    config.name,
                    got[k]
                );
            }
        }
    }
}

#[test]
fn adam_counts_only_the_steps_that_succeed() {
    let (a, b) = model();
    let mut adam = Adam::new(0.01);
    for failure in failures() {
        assert!(
            (failure.run)(&mut adam, &a, &b).is_err(),
            "{}",
            failure.what
        );
    }
    assert_eq!(adam.steps(), 0);
    real_step(&mut adam, &a, &b, 0);
    assert_eq!(adam.steps(), 1);
    for failure in failures() {
        assert!(
            (failure.run)(&mut adam, &a, &b).is_err(),
            "{}",
            failure.what
        );
    }
    assert_eq!(adam.steps(), 1);
    let mut sgd = Sgd::new(0.1).momentum(0.9);
    for failure in failures() {
        assert!((failure.run)(&mut sgd, &a, &b).is_err(), "{}", failure.what);
    }
    assert_eq!(sgd.steps(), 0);
}

#[test]
fn state_kept_for_another_parameter_of_the_same_name_is_an_error() {
    for config in configs().into_iter().filter(|c| c.stateful) {
        let (mut opt, (a, b)) = ((config.make)(), model());
        let (mut twin, (ta, tb)) = ((config.make)(), model());
        real_step(opt.as_mut(), &a, &b, 0);
        real_step(twin.as_mut(), &ta, &tb, 0);
        // a new "a" of another shape: its state must not be broadcast from the old one
        let other = Parameter::new("a", f64s(&[1.0, 2.0, 3.0, 4.0]));
        let e = opt
            .step(&[&other], &[f64s(&[1.0; 4])], &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(config.op)
                && e.contains("\"a\"")
                && e.contains("[4]")
                && e.contains("[3]")
                && e.contains("distinct names"),
            "{}: {e}",
            config.name
        );
        assert_eq!(
            bits(&other),
            bits(&Parameter::new("x", f64s(&[1.0, 2.0, 3.0, 4.0])))
        );
        for k in 1..=2 {
            real_step(opt.as_mut(), &a, &b, k);
            real_step(twin.as_mut(), &ta, &tb, k);
            assert_eq!(
                (bits(&a), bits(&b)),
                (bits(&ta), bits(&tb)),
                "{}",
                config.name
            );
        }
    }
}

/// The hostile values of a hyperparameter that must be finite and at least 0.
const NOT_NON_NEGATIVE: [f64; 5] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    -0.1,
    -f64::MIN_POSITIVE,
];

#[test]
fn hostile_learning_rates_are_errors_that_change_nothing() {
    // a NaN, infinite or negative learning rate is an error (a schedule that divided by zero
    // or overshot), reported by the step since set_learning_rate cannot fail
    for config in configs() {
        for lr in NOT_NON_NEGATIVE {
            let label = format!("{} with learning rate {lr}", config.name);
            let (mut opt, (a, b)) = ((config.make)(), model());
            let (mut twin, (ta, tb)) = ((config.make)(), model());
            real_step(opt.as_mut(), &a, &b, 0);
            real_step(twin.as_mut(), &ta, &tb, 0);
            let good = opt.learning_rate();
            opt.set_learning_rate(lr);
            let e = opt.step(&[&a, &b], &grads(1), &[]).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::Hyperparameter {
                        name: "learning rate",
                        ..
                    }
                ) && e.to_string().starts_with(config.op)
                    && e.to_string().contains(&format!("is {lr}")),
                "{label}: {e}"
            );
            assert_eq!((bits(&a), bits(&b)), (bits(&ta), bits(&tb)), "{label}");
            opt.set_learning_rate(good);
            real_step(opt.as_mut(), &a, &b, 1);
            real_step(twin.as_mut(), &ta, &tb, 1);
            assert_eq!((bits(&a), bits(&b)), (bits(&ta), bits(&tb)), "{label}");
        }
    }
}

#[test]
fn hostile_builder_values_are_errors_that_change_nothing() {
    let mut cases: Vec<(String, &'static str, Box<dyn Optimizer>)> = Vec::new();
    for x in NOT_NON_NEGATIVE {
        cases.push((
            format!("momentum {x}"),
            "momentum",
            Box::new(Sgd::new(0.1).momentum(x)),
        ));
        cases.push((
            format!("sgd weight decay {x}"),
            "weight decay",
            Box::new(Sgd::new(0.1).weight_decay(x)),
        ));
        cases.push((format!("eps {x}"), "ε", Box::new(Adam::new(0.1).eps(x))));
        cases.push((
            format!("adam weight decay {x}"),
            "weight decay",
            Box::new(Adam::new(0.1).weight_decay(x)),
        ));
    }
    for beta in [f64::NAN, f64::INFINITY, 1.0, 1.5, -0.1, -f64::MIN_POSITIVE] {
        cases.push((
            format!("β₁ {beta}"),
            "β₁",
            Box::new(Adam::new(0.1).betas(beta, 0.999)),
        ));
        cases.push((
            format!("β₂ {beta}"),
            "β₂",
            Box::new(Adam::new(0.1).betas(0.9, beta)),
        ));
    }
    for (label, name, mut opt) in cases {
        let (a, b) = model();
        let before = (bits(&a), bits(&b));
        let e = opt.step(&[&a, &b], &grads(0), &[]).unwrap_err();
        assert!(
            matches!(&e, Error::Hyperparameter { name: n, .. } if *n == name),
            "{label}: {e}"
        );
        assert_eq!((bits(&a), bits(&b)), before, "{label}");
    }
    // the edges of the ranges are valid
    let (a, b) = model();
    let mut edge: Vec<Box<dyn Optimizer>> = vec![
        Box::new(Sgd::new(0.0).momentum(0.0).weight_decay(0.0)),
        Box::new(Adam::new(0.0).betas(0.0, 0.0).eps(0.0)),
    ];
    for opt in &mut edge {
        let before = (bits(&a), bits(&b));
        opt.step(&[&a, &b], &grads(1), &[]).unwrap();
        assert_eq!(
            (bits(&a), bits(&b)),
            before,
            "a zero learning rate moves nothing"
        );
    }
}

#[test]
fn nan_and_inf_gradients_are_data_that_stay_in_their_elements() {
    let hostile = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        -f64::MAX,
        1e-310,
        -0.0,
        0.0,
    ];
    for config in configs() {
        for h in hostile {
            let label = format!("{} with gradient {h}", config.name);
            let (mut opt, (a, b)) = ((config.make)(), model());
            let (mut twin, (ta, tb)) = ((config.make)(), model());
            let clean = grads(0);
            let mut dirty = grads(0);
            dirty[0] = f64s(&[h, -1.25, 2.0]);
            dirty[1] = Array::from_vec(vec![h as f32, -2.0, 0.75, 1.0], &[2, 2]).unwrap();
            opt.step(&[&a, &b], &dirty, &[]).expect(&label);
            twin.step(&[&ta, &tb], &clean, &[]).unwrap();
            // the next step is clean for both: the hostile element's state stays in its element
            real_step(opt.as_mut(), &a, &b, 1);
            real_step(twin.as_mut(), &ta, &tb, 1);
            assert_eq!(bits(&a)[1..], bits(&ta)[1..], "{label}");
            assert_eq!(bits(&b)[1..], bits(&tb)[1..], "{label}");
            if h.is_nan() {
                assert!(a.value().to_vec::<f64>().unwrap()[0].is_nan(), "{label}");
            }
        }
    }
}

#[test]
fn clipping_rejects_what_it_cannot_clip() {
    let g = vec![f64s(&[3.0]), f64s(&[4.0])];
    for bad in [f64::NAN, -1.0, f64::NEG_INFINITY] {
        let e = clip_by_global_norm(&g, bad).unwrap_err().to_string();
        assert!(
            e.starts_with("clip_by_global_norm") && e.contains("max_norm"),
            "{e}"
        );
    }
    let e = clip_by_global_norm(&[], 1.0).unwrap_err().to_string();
    assert!(e.contains("no gradients"), "{e}");
    for odd in [
        Array::from_vec(vec![3i64], &[1]).unwrap(),
        Array::from_vec(vec![true], &[1]).unwrap(),
    ] {
        let dtype = odd.dtype();
        let e = clip_by_global_norm(&[g[0].clone(), odd], 1.0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gradient #1") && e.contains(&dtype.to_string()),
            "{e}"
        );
    }
    // infinity never clips; zero clips to zero
    let (c, n) = clip_by_global_norm(&g, f64::INFINITY).unwrap();
    assert_eq!(n.item::<f64>().unwrap(), 5.0);
    assert_eq!(c[1].to_vec::<f64>().unwrap(), vec![4.0]);
    let (c, _) = clip_by_global_norm(&g, 0.0).unwrap();
    assert_eq!(c[0].to_vec::<f64>().unwrap(), vec![0.0]);
}

mod hostile_hyperparameters {
    use super::adam_first;
    use kiln::Array;
    use kiln_optim::{Adam, Optimizer, Parameter};
    use proptest::prelude::*;

    const VALUES: [f64; 10] = [
        f64::NAN,
        f64::INFINITY,
        -1.0,
        -0.0,
        0.0,
        5e-324,
        1e-3,
        0.5,
        0.999,
        1.0,
    ];

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// Any mix of hostile and valid Adam hyperparameters either fails and leaves the
        /// parameter and the step count as they were, or takes the step a plain f64 Adam
        /// takes (bias-corrected, t = 1).
        #[test]
        fn adam_fails_cleanly_or_matches_plain_adam(
            lr in prop::sample::select(VALUES.to_vec()),
            b1 in prop::sample::select(VALUES.to_vec()),
            b2 in prop::sample::select(VALUES.to_vec()),
            // (a subnormal ε is left out: Adam scales ε by √(1 − β₂ᵗ), which rounds it
            // differently from the textbook form this test computes)
            eps in prop::sample::select(vec![f64::NAN, f64::INFINITY, -1.0, -0.0, 0.0, 1e-8, 0.5]),
            wd in prop::sample::select(VALUES.to_vec()),
            g in prop::sample::select(vec![f64::NAN, -2.5, 0.0, 1e-300, 3.0]),
        ) {
            let w0 = [0.75f64, -1.5];
            let p = Parameter::new("w", Array::from_vec(w0.to_vec(), &[2]).unwrap());
            let mut opt = Adam::new(lr).betas(b1, b2).eps(eps).weight_decay(wd);
            let grad = Array::from_vec(vec![g, -g], &[2]).unwrap();
            let got = opt.step(&[&p], &[grad], &[]);
            let w = p.value().to_vec::<f64>().unwrap();
            let valid = lr.is_finite() && lr >= 0.0
                && (0.0..1.0).contains(&b1) && (0.0..1.0).contains(&b2)
                && eps.is_finite() && eps >= 0.0 && wd.is_finite() && wd >= 0.0;
            prop_assert_eq!(got.is_ok(), valid, "{:?}", got);
            if got.is_err() {
                prop_assert_eq!(opt.steps(), 0);
                prop_assert_eq!(w.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    w0.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
            } else {
                prop_assert_eq!(opt.steps(), 1);
                for (i, &s) in [1.0, -1.0].iter().enumerate() {
                    let want = adam_first(w0[i], s * g, lr, b1, b2, eps, wd);
                    let same = (want.is_nan() && w[i].is_nan())
                        || w[i] == want
                        || (w[i] - want).abs() <= 1e-12 * (1.0 + want.abs());
                    prop_assert!(same, "element {}: {} vs {}", i, w[i], want);
                }
            }
        }
    }
}
