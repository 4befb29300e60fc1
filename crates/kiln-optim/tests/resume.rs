//! Training resumes from a checkpoint bit for bit: for Adam, AdamW, SGD with momentum and
//! Nesterov SGD, a small MLP regression trained 40 steps, saved with `save_checkpoint`, loaded
//! into fresh parameters and a new optimizer with `load_checkpoint` and trained 60 more steps
//! ends with exactly the parameters, moments, momentum buffers and step count of 100 steps
//! without a break (f32 bit patterns compared).
//! Also: loading a checkpoint that does not fit (another kind of optimizer, other
//! hyperparameters, a missing or misshapen tensor, state of a parameter not given, a file
//! without optimizer state) is an error naming the mismatch that leaves parameters and
//! optimizer unchanged, and a failed `save_checkpoint` leaves an existing file intact.

mod common;

use common::{entries, scratch};
use kiln::{Array, DType};
use kiln_optim::{
    load_checkpoint, save_checkpoint, save_safetensors, Adam, Error, Optimizer, Parameter, Sgd,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The data: 32 points in 4 dimensions and a smooth nonlinear target.
fn data() -> (Array, Array) {
    let x = Array::normal(&[32, 4], 0.0, 1.0, 7, DType::F32).unwrap();
    let w = Array::from_vec(vec![0.5f32, -1.0, 0.25, 2.0], &[4, 1]).unwrap();
    let y = x.matmul(&w).tanh() + &(&x.slice(kiln::s![.., 0..1]) * 0.3);
    kiln::eval(&[&x, &y]).unwrap();
    (x, y)
}

/// A 4-16-1 MLP, initialised from `seed` (or all zeros, for parameters about to be loaded).
fn mlp(seed: Option<u64>) -> Vec<Parameter> {
    let init = |shape: &[usize], scale: f64, k: u64| match seed {
        Some(s) => Array::normal(shape, 0.0, scale, s + k, DType::F32).unwrap(),
        None => Array::zeros(shape, DType::F32),
    };
    vec![
        Parameter::new("layer0.w", init(&[4, 16], 0.5, 0)),
        Parameter::new("layer0.b", init(&[16], 0.1, 1)),
        Parameter::new("layer1.w", init(&[16, 1], 0.25, 2)),
        Parameter::new("layer1.b", init(&[1], 0.1, 3)),
    ]
}

/// Steps `from..to` of mean-squared-error training, with a learning-rate schedule that
/// depends on the step number.
fn train(params: &[Parameter], opt: &mut dyn Optimizer, base_lr: f64, steps: std::ops::Range<u64>) {
    let (x, y) = data();
    let refs: Vec<&Parameter> = params.iter().collect();
    for t in steps {
        let v: Vec<Array> = params.iter().map(Parameter::value).collect();
        let hidden = (x.matmul(&v[0]) + &v[1]).tanh();
        let out = hidden.matmul(&v[2]) + &v[3];
        let loss = (&out - &y).square().mean(None, false);
        let g = kiln::grad(&loss, &v.iter().collect::<Vec<_>>()).unwrap();
        opt.set_learning_rate(base_lr / (1.0 + 0.02 * t as f64));
        opt.step(&refs, &g, &[&loss]).unwrap();
    }
}

fn bits(a: &Array) -> Vec<u32> {
    a.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

/// Everything training changes, exactly: every parameter's bits, every state tensor's name,
/// shape and bits, the step count and the hyperparameters (the learning rate included).
#[derive(Debug, PartialEq)]
struct Snapshot {
    params: Vec<(String, Vec<usize>, Vec<u32>)>,
    state: Vec<(String, Vec<usize>, Vec<u32>)>,
    steps: u64,
    kind: String,
    hypers: BTreeMap<String, String>,
}

fn snapshot(params: &[Parameter], opt: &dyn Optimizer) -> Snapshot {
    let state = opt.state();
    Snapshot {
        params: params
            .iter()
            .map(|p| (p.name().to_string(), p.shape().to_vec(), bits(&p.value())))
            .collect(),
        state: state
            .tensors()
            .iter()
            .map(|(n, a)| (n.clone(), a.shape().to_vec(), bits(a)))
            .collect(),
        steps: state.steps(),
        kind: state.kind().to_string(),
        hypers: state.hyperparameters().clone(),
    }
}

/// An optimizer configuration under test.
struct Config {
    name: &'static str,
    make: fn() -> Box<dyn Optimizer>,
    lr: f64,
    /// State tensors per parameter.
    slots: usize,
}

fn configs() -> Vec<Config> {
    vec![
        Config {
            name: "adam",
            make: || Box::new(Adam::new(0.0)),
            lr: 0.02,
            slots: 2,
        },
        Config {
            name: "adamw",
            make: || Box::new(Adam::new(0.0).weight_decay(0.1).betas(0.85, 0.995)),
            lr: 0.02,
            slots: 2,
        },
        Config {
            name: "momentum",
            make: || Box::new(Sgd::new(0.0).momentum(0.9).weight_decay(1e-3)),
            lr: 0.05,
            slots: 1,
        },
        Config {
            name: "nesterov",
            make: || Box::new(Sgd::new(0.0).momentum(0.8).nesterov(true)),
            lr: 0.05,
            slots: 1,
        },
        Config {
            name: "plain sgd",
            make: || Box::new(Sgd::new(0.0)),
            lr: 0.05,
            slots: 0,
        },
    ]
}

#[test]
fn training_resumed_from_a_checkpoint_matches_training_without_a_break_bit_for_bit() {
    let dir = scratch("bits");
    for c in configs() {
        // 100 steps without a break
        let whole = mlp(Some(1));
        let mut opt = (c.make)();
        train(&whole, opt.as_mut(), c.lr, 0..100);
        let expected = snapshot(&whole, opt.as_ref());
        assert_eq!(expected.steps, 100, "{}", c.name);
        assert_eq!(expected.state.len(), 4 * c.slots, "{}", c.name);

        // 40 steps, saved
        let path = dir.join(format!("{}.safetensors", c.name.replace(' ', "_")));
        let first = mlp(Some(1));
        let mut opt = (c.make)();
        train(&first, opt.as_mut(), c.lr, 0..40);
        let refs: Vec<&Parameter> = first.iter().collect();
        save_checkpoint(&path, &refs, opt.as_ref()).unwrap();
        let at_40 = snapshot(&first, opt.as_ref());
        drop((first, opt));

        // fresh parameters and a new optimizer (another learning rate: the checkpoint's is
        // restored), loaded, then 60 more steps
        let resumed = mlp(None);
        let mut opt = (c.make)();
        opt.set_learning_rate(123.0);
        let refs: Vec<&Parameter> = resumed.iter().collect();
        load_checkpoint(&path, &refs, opt.as_mut()).unwrap();
        assert_eq!(
            snapshot(&resumed, opt.as_ref()),
            at_40,
            "{}: the loaded state",
            c.name
        );
        train(&resumed, opt.as_mut(), c.lr, 40..100);
        let got = snapshot(&resumed, opt.as_ref());
        assert_eq!(got, expected, "{}: resumed vs without a break", c.name);

        // and the last 60 steps did change the parameters
        assert_ne!(at_40.params, expected.params, "{}", c.name);
    }
    assert_eq!(entries(&dir).len(), configs().len(), "{:?}", entries(&dir));
    std::fs::remove_dir_all(&dir).ok();
}

/// A checkpoint of 5 Adam steps and a target (fresh parameters, an optimizer) that has taken
/// 3 steps of its own, so "unchanged" means more than "still zero".
fn adam_checkpoint(dir: &Path) -> PathBuf {
    let path = dir.join("adam.safetensors");
    let params = mlp(Some(1));
    let mut opt = Adam::new(0.02);
    train(&params, &mut opt, 0.02, 0..5);
    let refs: Vec<&Parameter> = params.iter().collect();
    save_checkpoint(&path, &refs, &opt).unwrap();
    path
}

/// Rewrites the checkpoint at `from` to `to` through `edit` of its tensors and metadata.
fn edited(
    from: &Path,
    to: &Path,
    edit: impl FnOnce(&mut Vec<(String, Array)>, &mut BTreeMap<String, String>),
) {
    let file = kiln_io::read_safetensors(from).unwrap();
    let mut meta = file.metadata().clone();
    let mut tensors = file.into_tensors();
    edit(&mut tensors, &mut meta);
    let t: Vec<(&str, &Array)> = tensors.iter().map(|(n, a)| (n.as_str(), a)).collect();
    let m: Vec<(&str, &str)> = meta.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    kiln_io::write_safetensors(to, &t, &m).unwrap();
}

#[test]
fn a_checkpoint_that_does_not_fit_is_an_error_that_changes_nothing() {
    let dir = scratch("mismatch");
    let good = adam_checkpoint(&dir);
    let bad = dir.join("bad.safetensors");
    let no_state = dir.join("params-only.safetensors");
    {
        let params = mlp(Some(1));
        let refs: Vec<&Parameter> = params.iter().collect();
        save_safetensors(&no_state, &refs).unwrap();
    }

    type Edit = Box<dyn FnOnce(&mut Vec<(String, Array)>, &mut BTreeMap<String, String>)>;
    /// The edit that removes the tensor `name`.
    fn removed(name: &'static str) -> Option<Edit> {
        Some(Box::new(move |t, _| t.retain(|(n, _)| n != name)))
    }
    /// The edit that puts `with` in place of the tensor `name`.
    fn replaced(name: &'static str, with: Array) -> Option<Edit> {
        Some(Box::new(move |t, _| {
            if let Some((_, a)) = t.iter_mut().find(|(n, _)| n == name) {
                *a = with;
            }
        }))
    }
    /// The edit that adds the tensors `new`.
    fn added(new: Vec<(&'static str, Array)>) -> Option<Edit> {
        Some(Box::new(move |t, _| {
            t.extend(new.into_iter().map(|(n, a)| (n.to_string(), a)))
        }))
    }

    /// What is wrong, the file's edit, the optimizer to load into, what the error must say.
    type Case = (
        &'static str,
        Option<Edit>,
        Box<dyn Optimizer>,
        Vec<&'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            "another kind of optimizer",
            None,
            Box::new(Sgd::new(0.02).momentum(0.9)),
            vec!["\"Adam\"", "\"Sgd\""],
        ),
        (
            "AdamW for Adam",
            None,
            Box::new(Adam::new(0.02).weight_decay(0.01)),
            vec!["weight_decay", "0.0", "0.01"],
        ),
        (
            "other betas",
            None,
            Box::new(Adam::new(0.02).betas(0.9, 0.99)),
            vec!["beta2", "0.999", "0.99"],
        ),
        (
            "a missing moment",
            removed("optim/layer0.w/exp_avg_sq"),
            Box::new(Adam::new(0.02)),
            vec!["\"layer0.w\"", "exp_avg_sq", "incomplete"],
        ),
        (
            "a moment of the wrong shape",
            replaced("optim/layer1.w/exp_avg", Array::zeros(&[1, 16], DType::F32)),
            Box::new(Adam::new(0.02)),
            vec!["\"layer1.w\"", "[16, 1]", "[1, 16]", "layer1.w/exp_avg"],
        ),
        (
            "a moment of another dtype",
            replaced("optim/layer1.b/exp_avg_sq", Array::zeros(&[1], DType::F64)),
            Box::new(Adam::new(0.02)),
            vec!["\"layer1.b\"", "float64", "float32"],
        ),
        (
            "a parameter of the wrong shape",
            replaced("layer0.b", Array::zeros(&[15], DType::F32)),
            Box::new(Adam::new(0.02)),
            vec!["\"layer0.b\"", "[16]", "[15]"],
        ),
        (
            "a missing parameter",
            removed("layer1.b"),
            Box::new(Adam::new(0.02)),
            vec!["no tensor named \"layer1.b\""],
        ),
        (
            "state of a parameter not given",
            added(vec![
                ("optim/layer2.w/exp_avg", Array::zeros(&[2], DType::F32)),
                ("optim/layer2.w/exp_avg_sq", Array::zeros(&[2], DType::F32)),
            ]),
            Box::new(Adam::new(0.02)),
            vec!["\"layer2.w\"", "not among the 4 parameters"],
        ),
        (
            "an unknown slot",
            added(vec![(
                "optim/layer0.b/velocity",
                Array::zeros(&[16], DType::F32),
            )]),
            Box::new(Adam::new(0.02)),
            vec!["\"layer0.b/velocity\"", "exp_avg"],
        ),
        (
            "a corrupt step count",
            Some(Box::new(|_, m| {
                m.insert("optim/steps".into(), "five".into());
            })),
            Box::new(Adam::new(0.02)),
            vec!["step count", "\"five\""],
        ),
        (
            "a missing hyperparameter",
            Some(Box::new(|_, m| {
                m.remove("optim/eps");
            })),
            Box::new(Adam::new(0.02)),
            vec!["eps"],
        ),
        (
            "another layout version",
            Some(Box::new(|_, m| {
                m.insert("optim/format".into(), "2".into());
            })),
            Box::new(Adam::new(0.02)),
            vec!["version \"2\""],
        ),
    ];
    let n_cases = cases.len();
    for (what, edit, mut opt, says) in cases {
        let path = match edit {
            None => good.clone(),
            Some(edit) => {
                edited(&good, &bad, edit);
                bad.clone()
            }
        };
        // the target has state of its own
        let params = mlp(Some(9));
        train(&params, opt.as_mut(), 0.01, 0..3);
        let before = snapshot(&params, opt.as_ref());
        let refs: Vec<&Parameter> = params.iter().collect();
        let e = load_checkpoint(&path, &refs, opt.as_mut()).unwrap_err();
        let message = e.to_string();
        assert!(
            message.starts_with("load_checkpoint: "),
            "{what}: {message}"
        );
        assert!(
            message.contains(&path.display().to_string()),
            "{what}: {message}"
        );
        for s in says {
            assert!(message.contains(s), "{what}: {message:?} lacks {s:?}");
        }
        assert!(
            matches!(
                e,
                Error::State { .. } | Error::Mismatch { .. } | Error::Missing { .. }
            ),
            "{what}: {e:?}"
        );
        assert_eq!(snapshot(&params, opt.as_ref()), before, "{what}: changed");
    }
    assert_eq!(n_cases, 13);

    // a subset of the parameters: the state of the others has no parameter to fit
    let params = mlp(Some(9));
    let mut opt = Adam::new(0.02);
    let e = load_checkpoint(&good, &[&params[0], &params[1]], &mut opt).unwrap_err();
    assert!(e.to_string().contains("not among the 2 parameters"), "{e}");
    assert_eq!(opt.steps(), 0);
    assert_eq!(
        params[0].value().to_vec::<f32>().unwrap(),
        mlp(Some(9))[0].value().to_vec::<f32>().unwrap()
    );

    // a file without optimizer state
    let refs: Vec<&Parameter> = params.iter().collect();
    let e = load_checkpoint(&no_state, &refs, &mut opt)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no optimizer state") && e.contains("load_safetensors"),
        "{e}"
    );
    assert_eq!(opt.steps(), 0);

    // and the good checkpoint does load
    load_checkpoint(&good, &refs, &mut opt).unwrap();
    assert_eq!(opt.steps(), 5);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_failed_save_checkpoint_leaves_an_existing_checkpoint_intact() {
    let dir = scratch("save");
    let path = adam_checkpoint(&dir);
    let saved = std::fs::read(&path).unwrap();
    let params = mlp(Some(1));
    let mut opt = Adam::new(0.02);
    train(&params, &mut opt, 0.02, 0..2);
    let refs: Vec<&Parameter> = params.iter().collect();

    // the optimizer trained a parameter that is not saved: its state could not be restored
    let e = save_checkpoint(&path, &refs[..3], &opt)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("save_checkpoint: ") && e.contains("\"layer1.b\"") && e.contains("not among"),
        "{e}"
    );
    // a parameter named with the optimizer's prefix
    let clash = Parameter::new("optim/x", Array::zeros(&[1], DType::F32));
    let mut with_clash = refs.clone();
    with_clash.push(&clash);
    let e = save_checkpoint(&path, &with_clash, &opt)
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"optim/x\"") && e.contains("rename it"), "{e}");
    // a parameter of the same name as a trained one but another shape
    let other = Parameter::new("layer1.b", Array::zeros(&[2], DType::F32));
    let e = save_checkpoint(&path, &[refs[0], refs[1], refs[2], &other], &opt)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"layer1.b\"") && e.contains("[2]") && e.contains("[1]"),
        "{e}"
    );
    // a value that fails to evaluate
    let table = Array::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let broken = Parameter::new(
        "broken",
        table.take(&Array::from_vec(vec![0i64, 9], &[2]).unwrap(), 0),
    );
    let mut with_broken = refs.clone();
    with_broken.push(&broken);
    let e = save_checkpoint(&path, &with_broken, &opt)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"broken\"") && e.contains("nothing was written"),
        "{e}"
    );
    // duplicates
    let e = save_checkpoint(&path, &[refs[0], refs[0]], &Sgd::new(0.1)).unwrap_err();
    assert!(matches!(e, Error::Duplicate { .. }), "{e:?}");

    assert_eq!(std::fs::read(&path).unwrap(), saved);
    assert_eq!(entries(&dir), vec!["adam.safetensors"]);

    // a good save replaces it whole, leaving no temporary file
    save_checkpoint(&path, &refs, &opt).unwrap();
    assert_ne!(std::fs::read(&path).unwrap(), saved);
    assert_eq!(entries(&dir), vec!["adam.safetensors"]);
    let file = kiln_io::read_safetensors(&path).unwrap();
    assert_eq!(file.metadata()["optim/steps"], "2");
    assert_eq!(file.metadata()["optim/kind"], "Adam");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn optimizer_state_round_trips_through_load_state() {
    // without a file: state() of one optimizer, load_state() into another built the same way
    for c in configs() {
        let params = mlp(Some(4));
        let mut a = (c.make)();
        train(&params, a.as_mut(), c.lr, 0..7);
        let mut b = (c.make)();
        b.load_state(&a.state()).unwrap();
        assert_eq!(
            snapshot(&params, b.as_ref()),
            snapshot(&params, a.as_ref()),
            "{}",
            c.name
        );
        // both take the same next steps
        let twin = mlp(Some(4));
        for (p, q) in twin.iter().zip(&params) {
            p.assign(q.value()).unwrap();
        }
        train(&params, a.as_mut(), c.lr, 7..9);
        train(&twin, b.as_mut(), c.lr, 7..9);
        assert_eq!(
            snapshot(&twin, b.as_ref()),
            snapshot(&params, a.as_ref()),
            "{}",
            c.name
        );
    }
}
