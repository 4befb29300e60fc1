//! kiln's gradients against `jax.value_and_grad` for composite models, in f64.
//!
//! `fixtures/jax_grad.json` is written by `fixtures/gen_jax_grad_fixtures.py` (its docstring
//! says how to run it with a throwaway jax install, and describes the format). Each case holds
//! a model's inputs, jax's loss value and the gradient of the loss with respect to every float
//! input. Every model is written twice: in jax.numpy in the generator and with kiln's public
//! API here ([`models`]); the test builds the loss, takes [`kiln::value_and_grad`] with respect
//! to the same inputs, evaluates the value and all the gradients in **one** [`kiln::eval`] call
//! and compares.
//!
//! # Comparison
//! Shapes must match exactly. Values within `RTOL * |expected| + ATOL * max(1, max |expected|)`
//! (per gradient array): the two libraries sum and multiply in different orders, so results
//! agree to a few ulp of the array's scale, not of each element (a gradient that is a
//! difference of O(1) terms can be tiny). NaN must meet NaN and infinities match exactly (the
//! committed fixtures have none in their results; the inputs have `-inf`).
//!
//! Every case of the file must have a model here and every model a case
//! ([`fixtures_cover_every_case`]), so a case dropped from the generator fails the run.

use kiln::{Array, DType};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::OnceLock;

const FIXTURES: &str = include_str!("fixtures/jax_grad.json");

/// Relative tolerance per element.
const RTOL: f64 = 1e-10;
/// Absolute tolerance, times the largest magnitude of the expected array (at least 1).
const ATOL: f64 = 1e-12;

fn fixtures() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| serde_json::from_str(FIXTURES).expect("jax_grad.json parses"))
}

fn cases() -> &'static [Value] {
    fixtures()["cases"].as_array().expect("a list of cases")
}

fn case(name: &str) -> &'static Value {
    cases()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("case {name:?} is missing from fixtures/jax_grad.json"))
}

fn float(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().expect("a float"),
        Value::String(s) => match s.as_str() {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            other => panic!("bad float string {other:?}"),
        },
        other => panic!("not a float: {other}"),
    }
}

fn shape(a: &Value) -> Vec<usize> {
    a["shape"]
        .as_array()
        .expect("a shape")
        .iter()
        .map(|d| d.as_u64().expect("a dimension") as usize)
        .collect()
}

fn floats(a: &Value) -> Vec<f64> {
    a["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(float)
        .collect()
}

fn array(a: &Value) -> Array {
    let sh = shape(a);
    let data = a["data"].as_array().expect("data");
    match a["dtype"].as_str().expect("a dtype") {
        "float64" => Array::from_vec(floats(a), &sh),
        "int64" => Array::from_vec(
            data.iter().map(|v| v.as_i64().expect("an int")).collect(),
            &sh,
        ),
        "bool" => Array::from_vec(
            data.iter().map(|v| v.as_bool().expect("a bool")).collect(),
            &sh,
        ),
        other => panic!("unsupported dtype {other}"),
    }
    .expect("data matches the shape")
}

/// A case's inputs by name.
struct Inputs(BTreeMap<String, Array>);

impl Inputs {
    fn get(&self, name: &str) -> &Array {
        self.0
            .get(name)
            .unwrap_or_else(|| panic!("the case has no input {name:?}"))
    }
}

/// Checks `got` against `want`; pushes a message per mismatch (at most a few per array).
fn compare(what: &str, got: &[f64], want: &[f64], failures: &mut Vec<String>) {
    if got.len() != want.len() {
        failures.push(format!(
            "{what}: {} elements, expected {}",
            got.len(),
            want.len()
        ));
        return;
    }
    let scale = want
        .iter()
        .filter(|w| w.is_finite())
        .fold(1.0f64, |m, w| m.max(w.abs()));
    let mut bad = 0;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= RTOL * w.abs() + ATOL * scale
        };
        if !ok {
            bad += 1;
            if bad <= 5 {
                failures.push(format!(
                    "{what}[{i}]: kiln {g:e}, jax {w:e} (diff {:e})",
                    (g - w).abs()
                ));
            }
        }
    }
    if bad > 5 {
        failures.push(format!(
            "{what}: {bad} of {} elements differ in all",
            want.len()
        ));
    }
}

/// Builds `model`'s loss on the case's inputs, evaluates it and its gradients with respect to
/// every float input in one `kiln::eval`, and compares with jax.
fn run(name: &str, model: fn(&Inputs) -> Array) {
    let c = case(name);
    let inputs = Inputs(
        c["inputs"]
            .as_object()
            .expect("inputs")
            .iter()
            .map(|(k, v)| (k.clone(), array(v)))
            .collect(),
    );
    let wrt: Vec<String> = c["wrt"]
        .as_array()
        .expect("wrt")
        .iter()
        .map(|v| v.as_str().expect("a name").to_string())
        .collect();
    // gradients with respect to every float input, and only those
    let float_inputs: Vec<&String> = inputs
        .0
        .iter()
        .filter(|(_, a)| a.dtype() == DType::F64)
        .map(|(k, _)| k)
        .collect();
    let mut sorted: Vec<&String> = wrt.iter().collect();
    sorted.sort();
    assert_eq!(
        sorted, float_inputs,
        "{name}: wrt must list every float input"
    );

    let loss = model(&inputs);
    assert_eq!(
        loss.shape(),
        &[] as &[usize],
        "{name}: the loss is a scalar"
    );
    let wrt_arrays: Vec<&Array> = wrt.iter().map(|k| inputs.get(k)).collect();
    let (value, grads) = kiln::value_and_grad(&loss, &wrt_arrays).unwrap();
    let mut all: Vec<&Array> = vec![&value];
    all.extend(grads.iter());
    kiln::eval(&all).unwrap(); // one pass for the value and every gradient
    assert!(all.iter().all(|a| a.is_evaluated()));

    let mut failures = Vec::new();
    compare(
        &format!("{name}: value"),
        &[value.item::<f64>().unwrap()],
        &[float(&c["value"])],
        &mut failures,
    );
    for (k, g) in wrt.iter().zip(&grads) {
        let want = &c["grads"][k.as_str()];
        if g.shape() != shape(want).as_slice() {
            failures.push(format!(
                "{name}: d/d{k} has shape {:?}, expected {:?}",
                g.shape(),
                shape(want)
            ));
            continue;
        }
        compare(
            &format!("{name}: d/d{k}"),
            &g.to_vec::<f64>().unwrap(),
            &floats(want),
            &mut failures,
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The models of the generator, with kiln's public API (same names, same formulas).
mod models {
    use super::Inputs;
    use kiln::{s, Array, DType};

    pub fn mlp_softmax_xent(i: &Inputs) -> Array {
        let h = (i.get("x").matmul(i.get("w1")) + i.get("b1")).relu();
        let logits = h.matmul(i.get("w2")) + i.get("b2");
        let logp = logits.log_softmax(-1);
        let classes = logits.shape()[1];
        let hot = i.get("labels").one_hot(classes, DType::F64);
        -(logp * hot).sum(Some(&[-1]), false).mean(None, false)
    }

    /// PyTorch's GRUCell: weights `[3H, in]` in gate order r, z, n.
    fn gru_step(x: &Array, h: &Array, i: &Inputs) -> Array {
        let hd = h.shape()[1] as isize;
        let gi = x.matmul(&i.get("w_ih").transpose()) + i.get("b_ih");
        let gh = h.matmul(&i.get("w_hh").transpose()) + i.get("b_hh");
        let gate = |a: &Array, k: isize| a.slice(s![.., k * hd..(k + 1) * hd]);
        let r = (gate(&gi, 0) + gate(&gh, 0)).sigmoid();
        let z = (gate(&gi, 1) + gate(&gh, 1)).sigmoid();
        let n = (gate(&gi, 2) + &r * &gate(&gh, 2)).tanh();
        (1.0 - &z) * &n + &z * h
    }

    pub fn gru_cell(i: &Inputs) -> Array {
        (gru_step(i.get("x"), i.get("h"), i) * i.get("out_w")).sum(None, false)
    }

    pub fn gru_unrolled(i: &Inputs) -> Array {
        let xs = i.get("xs");
        let mut h = i.get("h0").clone();
        let mut outs = Vec::new();
        for t in 0..xs.shape()[0] {
            h = gru_step(&xs.slice(s![t]), &h, i);
            outs.push(h.clone());
        }
        let refs: Vec<&Array> = outs.iter().collect();
        (Array::stack(&refs, 0) * i.get("out_w")).sum(None, false)
    }

    pub fn embedding_repeated_ids(i: &Inputs) -> Array {
        let e = i.get("table").take(i.get("ids"), 0).tanh();
        (e * i.get("out_w")).sum(None, false)
    }

    pub fn masked_mean(i: &Inputs) -> Array {
        let (x, mask) = (i.get("x"), i.get("mask"));
        (x * mask).sum(None, false) / mask.sum(None, false)
    }

    pub fn masked_seq_mean(i: &Inputs) -> Array {
        let (x, lengths) = (i.get("x"), i.get("lengths"));
        let (b, l) = (x.shape()[0] as isize, x.shape()[1]);
        let steps = Array::arange(0.0, l as f64, 1.0, DType::I64)
            .unwrap()
            .reshape(&[1, -1]);
        let valid = steps.lt(lengths.reshape(&[b, 1]));
        let t = Array::where_(&valid, x.tanh(), 0.0);
        let per_row = t.sum(Some(&[1]), false) / valid.cast(DType::F64).sum(Some(&[1]), false);
        per_row.mean(None, false)
    }

    pub fn logsumexp_neg_inf(i: &Inputs) -> Array {
        (i.get("x").logsumexp(Some(&[-1]), false) * i.get("out_w")).sum(None, false)
    }

    pub fn layer_norm(i: &Inputs) -> Array {
        let x = i.get("x");
        let d = x - &x.mean(Some(&[-1]), true);
        let var = d.square().mean(Some(&[-1]), true);
        let y = &d / &(var + 1e-5).sqrt() * i.get("gamma") + i.get("beta");
        (y * i.get("out_w")).sum(None, false)
    }

    pub fn attention(i: &Inputs) -> Array {
        let (x, mem) = (i.get("x"), i.get("mem"));
        let heads = 2isize;
        let (b, lq, dm) = (
            x.shape()[0] as isize,
            x.shape()[1] as isize,
            x.shape()[2] as isize,
        );
        let lk = mem.shape()[1] as isize;
        let dh = dm / heads;
        let split = |t: Array, n: isize| t.reshape(&[b, n, heads, dh]).permute(&[0, 2, 1, 3]);
        let q = split(x.matmul(i.get("wq")), lq);
        let k = split(mem.matmul(i.get("wk")), lk);
        let v = split(mem.matmul(i.get("wv")), lk);
        let scores = q.matmul(&k.try_swapaxes(-1, -2).unwrap()) / (dh as f64).sqrt();
        let mask = i.get("key_mask").reshape(&[b, 1, 1, lk]);
        let scores = Array::where_(&mask, &scores, f64::NEG_INFINITY);
        let p = scores.softmax(-1);
        let o = p.matmul(&v).permute(&[0, 2, 1, 3]).reshape(&[b, lq, dm]);
        (o.matmul(i.get("wo")) * i.get("out_w")).sum(None, false)
    }

    pub fn maxpool_ties(i: &Inputs) -> Array {
        let x = i.get("x");
        let d: Vec<isize> = x.shape().iter().map(|&v| v as isize).collect();
        let p = x
            .reshape(&[d[0], d[1], d[2] / 2, 2, d[3] / 2, 2])
            .max(Some(&[3, 5]), false);
        let g = x.max(Some(&[1, 2, 3]), false);
        (p * i.get("out_w")).sum(None, false) + g.sum(None, false)
    }

    pub fn ties_clip_maximum_relu(i: &Inputs) -> Array {
        let x = i.get("x");
        (x.clip(-1.0, 1.0) * i.get("w1")).sum(None, false)
            + (x.maximum(0.0) * i.get("w2")).sum(None, false)
            + (x.relu() * i.get("w3")).sum(None, false)
    }

    pub fn conv1d_strided_pool(i: &Inputs) -> Array {
        let (x, w) = (i.get("x"), i.get("w"));
        let (k_size, length) = (w.shape()[0], x.shape()[1]);
        let l_out = (length - k_size) / 2 + 1;
        let mut acc: Option<Array> = None;
        for k in 0..k_size {
            let term = x
                .slice(s![.., k..k + 2 * (l_out - 1) + 1;2, ..])
                .matmul(&w.slice(s![k]));
            acc = Some(match acc {
                None => term,
                Some(a) => a + term,
            });
        }
        let y = (acc.unwrap() + i.get("b")).tanh(); // [B, l_out, O]
        let last_reversed = y.slice(s![.., ..;-1, ..]).slice(s![.., 0, ..]);
        let feats = Array::concat(
            &[
                &y.mean(Some(&[1]), false),
                &y.max(Some(&[1]), false),
                &last_reversed,
            ],
            -1,
        );
        (feats * i.get("out_w")).sum(None, false)
    }

    pub fn hvp_tanh_layer(i: &Inputs) -> Array {
        let w = i.get("w");
        let f = (i.get("x").matmul(w).tanh() * i.get("c")).sum(None, false);
        let gw = kiln::grad(&f, &[w]).unwrap().remove(0);
        (gw * i.get("v")).sum(None, false)
    }

    pub fn gaussian_nll_broadcast(i: &Inputs) -> Array {
        let log_sigma = i.get("log_sigma");
        let z = (i.get("x") - i.get("mu")) / log_sigma.exp();
        let half_log_2pi = 0.5 * (2.0 * std::f64::consts::PI).ln();
        (0.5f64 * z.pow(2.0) + log_sigma + half_log_2pi).mean(None, false)
    }

    pub fn power_mean(i: &Inputs) -> Array {
        let (x, p) = (i.get("x"), i.get("p"));
        x.pow(p)
            .mean(Some(&[0]), false)
            .pow(1.0 / p)
            .sum(None, false)
    }

    pub fn topk_values(i: &Inputs) -> Array {
        (i.get("x").top_k(3).0 * i.get("out_w")).sum(None, false)
    }

    pub fn prod_with_zero(i: &Inputs) -> Array {
        (i.get("x").prod(Some(&[-1]), false) * i.get("out_w")).sum(None, false)
    }
}

/// One `#[test]` per case (named as the case and its model), and the list of names.
macro_rules! cases {
    ($($(#[$attr:meta])* $name:ident;)*) => {
        /// Every case the fixtures must contain, in the generator's order.
        const CASE_NAMES: &[&str] = &[$(stringify!($name)),*];
        $(
            #[test]
            $(#[$attr])*
            fn $name() {
                run(stringify!($name), models::$name);
            }
        )*
    };
}

cases! {
    mlp_softmax_xent;
    gru_cell;
    gru_unrolled;
    embedding_repeated_ids;
    masked_mean;
    masked_seq_mean;
    logsumexp_neg_inf;
    layer_norm;
    attention;
    maxpool_ties;
    ties_clip_maximum_relu;
    conv1d_strided_pool;
    hvp_tanh_layer;
    gaussian_nll_broadcast;
    power_mean;
    topk_values;
    // regression: the prod rule once computed `g * prod / x`, NaN at zero entries
    prod_with_zero;
}

#[test]
fn fixtures_cover_every_case() {
    let in_file: Vec<&str> = cases()
        .iter()
        .map(|c| c["name"].as_str().expect("a case name"))
        .collect();
    assert_eq!(
        in_file, CASE_NAMES,
        "fixtures/jax_grad.json and this test must list the same cases (regenerate the \
         fixtures with fixtures/gen_jax_grad_fixtures.py, or add the model here)"
    );
    // the cases the issue requires by name
    for required in [
        "mlp_softmax_xent",
        "gru_cell",
        "embedding_repeated_ids",
        "masked_mean",
    ] {
        assert!(in_file.contains(&required), "missing case {required}");
    }
    assert!(fixtures()["jax_version"].is_string());
}
