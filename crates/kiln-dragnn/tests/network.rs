//! The network side of kiln-dragnn (`kiln_dragnn::network`), each piece against an
//! independent reference:
//! - every network unit (`FeedForwardNetwork` with and without layer normalisation of the
//!   input and of the first hidden layer, two hidden layers, several nonlinearities;
//!   the coupled-gate `LSTMNetwork` and the `LayerNormBasicLSTMNetwork` over three steps
//!   with the state fed from step to step; `IdentityNetwork`): forward values against a
//!   plain-Rust `f64` implementation of the reference's equations, and gradients
//!   (`kiln::grad`, in `f64`) against central finite differences with respect to every
//!   parameter and the input;
//! - the embedding of fixed features (multi-valued cells, weights, the `embedding_dim: -1`
//!   pass-through) against hand-computed sums, and its gradient with respect to the
//!   embedding matrix; `gather_links` against `gather_links_host`; `embed_links` with and
//!   without projection, and the out-of-range indicator row;
//! - `layer_norm` against a hand-written mean/variance normalisation;
//! - `DropoutSeeds::apply`: kept fraction within a binomial tolerance, kept values scaled
//!   by `1 / keep`, determinism per seed;
//! - errors of `NetworkUnit::from_spec` (unknown unit, bad `hidden_layer_sizes`, an LSTM
//!   with two hidden sizes, keep probabilities outside `(0, 1]`), which must name the
//!   component.
//!
//! Depends on kiln's public API (`Array`, `grad`, `eval`), kiln-optim's `Parameter::assign`
//! (through `ParamStore::parameter`), and kiln-dragnn's `network`, `spec` and `component`
//! modules.

use std::collections::HashMap;

use kiln::{Array, DType};
use kiln_dragnn::component::FixedFeatureOutput;
use kiln_dragnn::network::{
    embed_fixed, embed_links, gather_links, gather_links_host, layer_norm, DropoutSeeds,
    FeedForward, FixedBatch, LayerNormLstm, LinkBatch, Lstm, LstmState, NetworkUnit, Nonlinearity,
    ParamStore, LAYER_NORM_EPS,
};
use kiln_dragnn::spec::{ComponentSpec, GridPoint};

type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// The finite-difference step.
const EPS: f64 = 1e-6;
/// Gradient tolerance: `|analytic - numeric| <= ATOL + RTOL * max(|analytic|, |numeric|)`.
const ATOL: f64 = 1e-7;
const RTOL: f64 = 1e-5;

// ---------------------------------------------------------------------------------------
// Helpers: a deterministic generator, host linear algebra, parameter randomisation.
// ---------------------------------------------------------------------------------------

/// SplitMix64: deterministic test data without depending on the code under test.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[-scale, scale)`.
    fn sym(&mut self, scale: f64) -> f64 {
        (2.0 * self.unit() - 1.0) * scale
    }

    fn vec(&mut self, n: usize, scale: f64) -> Vec<f64> {
        (0..n).map(|_| self.sym(scale)).collect()
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `a [m, k] · b [k, n]`, row-major.
fn matmul(a: &[f64], m: usize, k: usize, b: &[f64], n: usize) -> Vec<f64> {
    assert_eq!((a.len(), b.len()), (m * k, k * n));
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|t| a[i * k + t] * b[t * n + j]).sum();
        }
    }
    out
}

/// Adds `b` to every row of `x` (rows of `b.len()`).
fn add_rows(x: &mut [f64], b: &[f64]) {
    for row in x.chunks_mut(b.len()) {
        for (v, bb) in row.iter_mut().zip(b) {
            *v += bb;
        }
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Layer normalisation of every `width`-wide row of `x`: `(x - mean) / sqrt(var + eps)`,
/// times `gamma`, plus `beta` (the population variance, as DRAGNN's `LayerNorm` and
/// TensorFlow's `layer_norm` compute it).
fn ln_rows(x: &[f64], width: usize, gamma: &[f64], beta: &[f64]) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(width) {
        let mean = row.iter().sum::<f64>() / width as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / width as f64;
        let inv = 1.0 / (var + LAYER_NORM_EPS).sqrt();
        for (j, v) in row.iter().enumerate() {
            out.push((v - mean) * inv * gamma[j] + beta[j]);
        }
    }
    out
}

/// Every parameter's current value, on the host.
fn host_params(store: &ParamStore) -> R<HashMap<String, Vec<f64>>> {
    let mut out = HashMap::new();
    for p in store.parameters() {
        out.insert(p.name().to_string(), p.value().to_vec::<f64>()?);
    }
    Ok(out)
}

/// Replaces every parameter with random values of order 0.3 (gains around 1), so that
/// gradients are not dominated by the tiny initial weights.
fn randomize(store: &ParamStore, rng: &mut Rng) -> R {
    for p in store.parameters() {
        let n: usize = p.shape().iter().product();
        let values: Vec<f64> = if p.name().ends_with("gamma") {
            (0..n).map(|_| 1.0 + rng.sym(0.3)).collect()
        } else {
            rng.vec(n, 0.6)
        };
        p.assign(Array::from_vec(values, p.shape())?)?;
    }
    Ok(())
}

fn assert_close_slices(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

/// A loss built from the store's current parameters and the given inputs.
type LossFn<'a> = dyn Fn(&ParamStore, &[Array]) -> R<Array> + 'a;

/// Checks `kiln::grad` of `loss_of` with respect to every parameter of `store` and every
/// input against central finite differences at `per_tensor` random elements of each (every
/// element of tensors that small), and that no gradient is identically zero.
fn check_gradients(
    what: &str,
    store: &ParamStore,
    inputs: &[(Vec<f64>, Vec<usize>)],
    loss_of: &LossFn,
    rng: &mut Rng,
    per_tensor: usize,
) -> R {
    let arrays = |inputs: &[(Vec<f64>, Vec<usize>)]| -> R<Vec<Array>> {
        inputs
            .iter()
            .map(|(v, s)| Ok(Array::from_vec(v.clone(), s)?))
            .collect()
    };
    let xs = arrays(inputs)?;
    let loss = loss_of(store, &xs)?;
    let names: Vec<String> = store.parameters().map(|p| p.name().to_string()).collect();
    assert!(
        !names.is_empty() || !inputs.is_empty(),
        "{what}: nothing to check"
    );
    let values: Vec<Array> = names
        .iter()
        .map(|n| store.value(n))
        .collect::<Result<_, _>>()?;
    let mut wrt: Vec<&Array> = values.iter().collect();
    wrt.extend(xs.iter());
    let grads = kiln::grad(&loss, &wrt)?;
    let mut all: Vec<&Array> = vec![&loss];
    all.extend(grads.iter());
    kiln::eval(&all)?;
    let host: Vec<Vec<f64>> = grads
        .iter()
        .map(|g| g.to_vec::<f64>())
        .collect::<Result<_, _>>()?;
    let eval_loss =
        |store: &ParamStore, xs: &[Array]| -> R<f64> { Ok(loss_of(store, xs)?.item::<f64>()?) };
    let compare = |tensor: &str, i: usize, analytic: f64, numeric: f64| {
        let tol = ATOL + RTOL * analytic.abs().max(numeric.abs());
        assert!(
            (analytic - numeric).abs() <= tol,
            "{what}: d loss / d {tensor}[{i}]: kiln::grad {analytic:e}, finite differences {numeric:e}"
        );
    };
    let picks = |n: usize, rng: &mut Rng| -> Vec<usize> {
        if n <= per_tensor {
            (0..n).collect()
        } else {
            (0..per_tensor).map(|_| rng.below(n)).collect()
        }
    };
    for (k, name) in names.iter().enumerate() {
        let g = &host[k];
        assert!(
            g.iter().any(|v| v.abs() > 1e-8),
            "{what}: the gradient of {name} is zero: {g:?}"
        );
        let p = store
            .parameter(name)
            .ok_or_else(|| format!("no parameter {name}"))?;
        let shape = p.shape().to_vec();
        let base = p.value().to_vec::<f64>()?;
        assert_eq!(g.len(), base.len(), "{what}: gradient of {name}: size");
        for i in picks(base.len(), rng) {
            let mut v = base.clone();
            v[i] = base[i] + EPS;
            p.assign(Array::from_vec(v.clone(), &shape)?)?;
            let plus = eval_loss(store, &xs)?;
            v[i] = base[i] - EPS;
            p.assign(Array::from_vec(v, &shape)?)?;
            let minus = eval_loss(store, &xs)?;
            p.assign(Array::from_vec(base.clone(), &shape)?)?;
            compare(name, i, g[i], (plus - minus) / (2.0 * EPS));
        }
    }
    for (j, (v0, _)) in inputs.iter().enumerate() {
        let g = &host[names.len() + j];
        assert!(
            g.iter().any(|v| v.abs() > 1e-8),
            "{what}: the gradient of input {j} is zero"
        );
        for i in picks(v0.len(), rng) {
            let mut shifted = inputs.to_vec();
            shifted[j].0[i] = v0[i] + EPS;
            let plus = eval_loss(store, &arrays(&shifted)?)?;
            shifted[j].0[i] = v0[i] - EPS;
            let minus = eval_loss(store, &arrays(&shifted)?)?;
            compare(&format!("input {j}"), i, g[i], (plus - minus) / (2.0 * EPS));
        }
    }
    Ok(())
}

/// `Σ a ⊙ weights` for a host weight vector of `a`'s shape.
fn weighted_sum(a: &Array, weights: &[f64]) -> R<Array> {
    let w = Array::from_vec(weights.to_vec(), a.shape())?;
    Ok(a.try_mul(&w)?.try_sum(None, false)?)
}

// ---------------------------------------------------------------------------------------
// FeedForwardNetwork
// ---------------------------------------------------------------------------------------

fn ff(
    input_dim: usize,
    hidden: &[usize],
    num_actions: Option<usize>,
    nl: Nonlinearity,
    ln_input: bool,
    ln_hidden: bool,
) -> NetworkUnit {
    NetworkUnit::FeedForward(FeedForward {
        input_dim,
        hidden: hidden.to_vec(),
        num_actions,
        layer_norm_input: ln_input,
        layer_norm_hidden: ln_hidden,
        nonlinearity: nl,
        keep: 1.0,
        dropout_all_layers: false,
    })
}

fn apply_nl(nl: Nonlinearity, x: f64) -> f64 {
    match nl {
        Nonlinearity::Relu => x.max(0.0),
        Nonlinearity::Tanh => x.tanh(),
        Nonlinearity::Elu => {
            if x > 0.0 {
                x
            } else {
                x.exp() - 1.0
            }
        }
        Nonlinearity::Sigmoid => sigmoid(x),
        Nonlinearity::Identity => x,
    }
}

/// DRAGNN's FeedForwardNetwork on the host: optional layer norm of the input, hidden
/// layers `nl(x·W_i + b_i)` (layer 0 `nl(LN(x·W_0))` with `layer_norm_hidden`), logits
/// `x·W_softmax + b_softmax`. Returns `(layers by name, logits)`.
fn ff_reference(
    f: &FeedForward,
    p: &HashMap<String, Vec<f64>>,
    prefix: &str,
    x: &[f64],
    rows: usize,
) -> (HashMap<String, Vec<f64>>, Option<Vec<f64>>) {
    let g = |s: &str| &p[&format!("{prefix}/{s}")];
    let mut x = x.to_vec();
    if f.layer_norm_input {
        x = ln_rows(
            &x,
            f.input_dim,
            g("layer_norm_input/gamma"),
            g("layer_norm_input/beta"),
        );
    }
    let mut width = f.input_dim;
    let mut layers = HashMap::new();
    for (i, &h) in f.hidden.iter().enumerate() {
        let mut pre = matmul(&x, rows, width, g(&format!("weights_{i}")), h);
        if i == 0 && f.layer_norm_hidden {
            pre = ln_rows(&pre, h, g("layer_norm_0/gamma"), g("layer_norm_0/beta"));
        } else {
            add_rows(&mut pre, g(&format!("bias_{i}")));
        }
        x = pre
            .into_iter()
            .map(|v| apply_nl(f.nonlinearity, v))
            .collect();
        layers.insert(format!("layer_{i}"), x.clone());
        width = h;
    }
    layers.insert("last_layer".to_string(), x.clone());
    let logits = f.num_actions.map(|a| {
        let mut l = matmul(&x, rows, width, g("weights_softmax"), a);
        add_rows(&mut l, g("bias_softmax"));
        l
    });
    (layers, logits)
}

fn check_feed_forward(what: &str, unit: NetworkUnit, seed: u64, rows: usize, out_layer: &str) -> R {
    let NetworkUnit::FeedForward(f) = &unit else {
        unreachable!()
    };
    let mut rng = Rng(seed);
    let mut store = ParamStore::new(seed, DType::F64);
    unit.create_params(&mut store, "ff")?;
    randomize(&store, &mut rng)?;
    let x = rng.vec(rows * f.input_dim, 1.0);

    // Forward values against the host reference.
    let xa = Array::from_vec(x.clone(), &[rows, f.input_dim])?;
    let z = unit.project_input(&store, "ff", &xa, None)?;
    let (layers, state) = unit.forward(&store, "ff", &z, None, None)?;
    assert!(state.is_none());
    let (want_layers, want_logits) = ff_reference(f, &host_params(&store)?, "ff", &x, rows);
    for (name, want) in &want_layers {
        let got = layers
            .get(name)
            .ok_or_else(|| format!("{what}: no layer {name}"))?;
        assert_close_slices(
            &format!("{what}: {name}"),
            &got.to_vec::<f64>()?,
            want,
            1e-12,
        );
    }
    match (layers.get("logits"), want_logits) {
        (Some(got), Some(want)) => {
            assert_eq!(got.shape(), &[rows, f.num_actions.unwrap_or(0)]);
            assert_close_slices(
                &format!("{what}: logits"),
                &got.to_vec::<f64>()?,
                &want,
                1e-12,
            )
        }
        (None, None) => {}
        (got, want) => panic!(
            "{what}: logits present {} but expected {}",
            got.is_some(),
            want.is_some()
        ),
    }
    // The declared layers are the computed ones.
    let declared: Vec<String> = unit.layers().into_iter().map(|(n, _)| n).collect();
    let computed: Vec<String> = layers.names().map(str::to_string).collect();
    assert_eq!(declared, computed, "{what}: layers()");

    // Gradients.
    let out_dim = unit
        .layer_dim(out_layer)
        .ok_or_else(|| format!("no {out_layer}"))?;
    let weights = rng.vec(rows * out_dim, 1.0);
    let input_dim = f.input_dim;
    let loss = |store: &ParamStore, xs: &[Array]| -> R<Array> {
        let z = unit.project_input(store, "ff", &xs[0], None)?;
        let (layers, _) = unit.forward(store, "ff", &z, None, None)?;
        weighted_sum(layers.get(out_layer).ok_or("no layer")?, &weights)
    };
    check_gradients(
        what,
        &store,
        &[(x, vec![rows, input_dim])],
        &loss,
        &mut rng,
        5,
    )
}

#[test]
fn feed_forward_relu_two_hidden_layers() -> R {
    let unit = ff(5, &[4, 3], Some(3), Nonlinearity::Relu, false, false);
    check_feed_forward("relu", unit, 1, 4, "logits")
}

#[test]
fn feed_forward_tanh_with_layer_norm_of_input_and_hidden() -> R {
    let unit = ff(5, &[4, 3], Some(3), Nonlinearity::Tanh, true, true);
    check_feed_forward("tanh + layer norms", unit, 2, 4, "logits")
}

#[test]
fn feed_forward_relu_with_layer_norm_of_hidden_and_no_logits() -> R {
    let unit = ff(6, &[5, 4], None, Nonlinearity::Relu, false, true);
    check_feed_forward(
        "relu + hidden layer norm, omit_logits",
        unit,
        3,
        3,
        "last_layer",
    )
}

#[test]
fn feed_forward_tanh_with_layer_norm_of_input_only() -> R {
    let unit = ff(4, &[6, 3], Some(2), Nonlinearity::Tanh, true, false);
    check_feed_forward("tanh + input layer norm", unit, 4, 5, "logits")
}

#[test]
fn feed_forward_elu_and_sigmoid() -> R {
    let unit = ff(4, &[5, 3], Some(3), Nonlinearity::Elu, false, false);
    check_feed_forward("elu", unit, 5, 4, "logits")?;
    let unit = ff(4, &[5], Some(3), Nonlinearity::Sigmoid, false, true);
    check_feed_forward("sigmoid", unit, 6, 4, "logits")
}

#[test]
fn feed_forward_without_hidden_layers_is_a_linear_softmax() -> R {
    let unit = ff(4, &[], Some(3), Nonlinearity::Relu, false, false);
    check_feed_forward("no hidden layers", unit, 7, 3, "logits")
}

// ---------------------------------------------------------------------------------------
// LSTMNetwork and LayerNormBasicLSTMNetwork
// ---------------------------------------------------------------------------------------

/// One step of DRAGNN's coupled-gate LSTM on the host, per row:
/// `i = σ(x·x2i + h·h2i + c·c2i + bi)`, `c' = (1 − i) c + i tanh(x·x2c + h·h2c + bc)`,
/// `o = σ(x·x2o + h·h2o + c'·c2o + bo)`, `h' = o tanh(c')`.
/// Returns `(h', c', logits)`.
fn lstm_reference(
    l: &Lstm,
    p: &HashMap<String, Vec<f64>>,
    x: &[f64],
    h: &[f64],
    c: &[f64],
    rows: usize,
) -> StepOutput {
    let g = |s: &str| &p[&format!("lstm/{s}")];
    let n = l.hidden;
    let mut z = matmul(x, rows, l.input_dim, g("x2ico"), 3 * n);
    let zh = matmul(h, rows, n, g("h2ico"), 3 * n);
    for (a, b) in z.iter_mut().zip(&zh) {
        *a += b;
    }
    add_rows(&mut z, g("bico"));
    let ci = matmul(c, rows, n, g("c2i"), n);
    let mut c_new = vec![0.0; rows * n];
    for r in 0..rows {
        for j in 0..n {
            let i = sigmoid(z[r * 3 * n + j] + ci[r * n + j]);
            let ct = z[r * 3 * n + n + j].tanh();
            c_new[r * n + j] = (1.0 - i) * c[r * n + j] + i * ct;
        }
    }
    let co = matmul(&c_new, rows, n, g("c2o"), n);
    let mut h_new = vec![0.0; rows * n];
    for r in 0..rows {
        for j in 0..n {
            let o = sigmoid(z[r * 3 * n + 2 * n + j] + co[r * n + j]);
            h_new[r * n + j] = o * c_new[r * n + j].tanh();
        }
    }
    let logits = l.num_actions.map(|a| {
        let mut lg = matmul(&h_new, rows, n, g("weights_softmax"), a);
        add_rows(&mut lg, g("bias_softmax"));
        lg
    });
    (h_new, c_new, logits)
}

/// One step of TensorFlow's `LayerNormBasicLSTMCell` (forget bias 1) on the host:
/// `[i, j, f, o] = [x, h]·W` split in four, each layer-normalised with its own gain and
/// offset, `c' = LN(c σ(f + 1) + σ(i) tanh(j))`, `h' = tanh(c') σ(o)`.
fn ln_lstm_reference(
    l: &LayerNormLstm,
    p: &HashMap<String, Vec<f64>>,
    x: &[f64],
    h: &[f64],
    c: &[f64],
    rows: usize,
) -> StepOutput {
    let g = |s: &str| &p[&format!("lstm/{s}")];
    let n = l.hidden;
    let mut z = matmul(x, rows, l.input_dim, g("x2h"), 4 * n);
    let zh = matmul(h, rows, n, g("h2h"), 4 * n);
    for (a, b) in z.iter_mut().zip(&zh) {
        *a += b;
    }
    let (gamma, beta) = (g("gates/gamma"), g("gates/beta"));
    let mut c_pre = vec![0.0; rows * n];
    let mut o_gate = vec![0.0; rows * n];
    for r in 0..rows {
        let gate = |k: usize| {
            ln_rows(
                &z[r * 4 * n + k * n..r * 4 * n + (k + 1) * n],
                n,
                &gamma[k * n..(k + 1) * n],
                &beta[k * n..(k + 1) * n],
            )
        };
        let (gi, gj, gf, go) = (gate(0), gate(1), gate(2), gate(3));
        for j in 0..n {
            c_pre[r * n + j] = c[r * n + j] * sigmoid(gf[j] + 1.0) + sigmoid(gi[j]) * gj[j].tanh();
            o_gate[r * n + j] = sigmoid(go[j]);
        }
    }
    let c_new = ln_rows(&c_pre, n, g("state/gamma"), g("state/beta"));
    let h_new: Vec<f64> = c_new
        .iter()
        .zip(&o_gate)
        .map(|(c, o)| c.tanh() * o)
        .collect();
    let logits = l.num_actions.map(|a| {
        let mut lg = matmul(&h_new, rows, n, g("weights_softmax"), a);
        add_rows(&mut lg, g("bias_softmax"));
        lg
    });
    (h_new, c_new, logits)
}

/// Runs `unit` over `xs.len()` steps from the zero state; returns per step the layers'
/// logits (if any) and the last state.
fn run_steps(
    unit: &NetworkUnit,
    store: &ParamStore,
    xs: &[Array],
) -> R<(Vec<kiln_dragnn::network::Layers>, LstmState)> {
    let mut state: Option<LstmState> = None;
    let mut out = Vec::new();
    for x in xs {
        let z = unit.project_input(store, "lstm", x, None)?;
        let (layers, next) = unit.forward(store, "lstm", &z, state.as_ref(), None)?;
        state = Some(next.ok_or("a recurrent unit returned no state")?);
        out.push(layers);
    }
    Ok((out, state.ok_or("no steps")?))
}

/// A step's `(h', c', logits)` on the host.
type StepOutput = (Vec<f64>, Vec<f64>, Option<Vec<f64>>);

/// A host reference step: parameters, `x`, `h`, `c`.
type StepReference<'a> =
    dyn Fn(&HashMap<String, Vec<f64>>, &[f64], &[f64], &[f64]) -> StepOutput + 'a;

/// Forward values of 3 steps of `rows` rows against `reference`, then gradients of
/// `Σ_t <logits_t, R_t> + <h_3, Q> + Σ c_3²` by finite differences.
fn check_recurrent(
    what: &str,
    unit: NetworkUnit,
    rows: usize,
    seed: u64,
    reference: &StepReference,
) -> R {
    const STEPS: usize = 3;
    let (input_dim, hidden, state_layers) = match &unit {
        NetworkUnit::Lstm(l) => (l.input_dim, l.hidden, ["lstm_h", "lstm_c"]),
        NetworkUnit::LayerNormLstm(l) => (l.input_dim, l.hidden, ["state_h_0", "state_c_0"]),
        _ => return Err("not a recurrent unit".into()),
    };
    let mut rng = Rng(seed);
    let mut store = ParamStore::new(seed, DType::F64);
    unit.create_params(&mut store, "lstm")?;
    randomize(&store, &mut rng)?;
    let inputs: Vec<(Vec<f64>, Vec<usize>)> = (0..STEPS)
        .map(|_| (rng.vec(rows * input_dim, 1.0), vec![rows, input_dim]))
        .collect();
    let xs: Vec<Array> = inputs
        .iter()
        .map(|(v, s)| Array::from_vec(v.clone(), s))
        .collect::<Result<_, _>>()?;

    // Forward values against the host reference.
    let (steps, last) = run_steps(&unit, &store, &xs)?;
    let p = host_params(&store)?;
    let (mut h, mut c) = (vec![0.0; rows * hidden], vec![0.0; rows * hidden]);
    for (t, layers) in steps.iter().enumerate() {
        let (h2, c2, logits) = reference(&p, &inputs[t].0, &h, &c);
        let at = |name: &str| -> R<Vec<f64>> {
            Ok(layers
                .get(name)
                .ok_or_else(|| format!("{what}: no layer {name}"))?
                .to_vec::<f64>()?)
        };
        assert_close_slices(
            &format!("{what}: step {t} h"),
            &at(state_layers[0])?,
            &h2,
            1e-12,
        );
        assert_close_slices(
            &format!("{what}: step {t} c"),
            &at(state_layers[1])?,
            &c2,
            1e-12,
        );
        assert_close_slices(
            &format!("{what}: step {t} layer_0"),
            &at("layer_0")?,
            &h2,
            1e-12,
        );
        assert_close_slices(
            &format!("{what}: step {t} last_layer"),
            &at("last_layer")?,
            &h2,
            1e-12,
        );
        if let Some(want) = logits {
            assert_close_slices(
                &format!("{what}: step {t} logits"),
                &at("logits")?,
                &want,
                1e-12,
            );
        }
        h = h2;
        c = c2;
    }
    assert_close_slices(
        &format!("{what}: final h"),
        &last.h.to_vec::<f64>()?,
        &h,
        1e-12,
    );
    assert_close_slices(
        &format!("{what}: final c"),
        &last.c.to_vec::<f64>()?,
        &c,
        1e-12,
    );

    // Gradients through the three steps.
    let actions = unit.num_actions();
    let logit_weights: Vec<Vec<f64>> = (0..STEPS)
        .map(|_| rng.vec(rows * actions.unwrap_or(0), 1.0))
        .collect();
    let h_weights = rng.vec(rows * hidden, 1.0);
    let loss = |store: &ParamStore, xs: &[Array]| -> R<Array> {
        let (steps, last) = run_steps(&unit, store, xs)?;
        let mut total = weighted_sum(&last.h, &h_weights)?;
        total = total.try_add(&last.c.try_square()?.try_sum(None, false)?)?;
        if actions.is_some() {
            for (layers, w) in steps.iter().zip(&logit_weights) {
                total = total.try_add(&weighted_sum(layers.get("logits").ok_or("logits")?, w)?)?;
            }
        }
        Ok(total)
    };
    check_gradients(what, &store, &inputs, &loss, &mut rng, 4)
}

#[test]
fn lstm_forward_and_gradients_over_three_steps() -> R {
    let l = Lstm {
        input_dim: 4,
        hidden: 3,
        num_actions: Some(3),
        input_keep: 1.0,
        recurrent_keep: 1.0,
    };
    let reference = {
        let l = l.clone();
        move |p: &HashMap<String, Vec<f64>>, x: &[f64], h: &[f64], c: &[f64]| {
            lstm_reference(&l, p, x, h, c, 2)
        }
    };
    check_recurrent("LSTMNetwork", NetworkUnit::Lstm(l), 2, 11, &reference)
}

#[test]
fn lstm_without_logits() -> R {
    let l = Lstm {
        input_dim: 3,
        hidden: 4,
        num_actions: None,
        input_keep: 1.0,
        recurrent_keep: 1.0,
    };
    let reference = {
        let l = l.clone();
        move |p: &HashMap<String, Vec<f64>>, x: &[f64], h: &[f64], c: &[f64]| {
            lstm_reference(&l, p, x, h, c, 3)
        }
    };
    check_recurrent(
        "LSTMNetwork (omit_logits)",
        NetworkUnit::Lstm(l),
        3,
        12,
        &reference,
    )
}

#[test]
fn layer_norm_lstm_forward_and_gradients_over_three_steps() -> R {
    let l = LayerNormLstm {
        input_dim: 4,
        hidden: 3,
        num_actions: Some(3),
        input_keep: 1.0,
        recurrent_keep: 1.0,
    };
    let reference = {
        let l = l.clone();
        move |p: &HashMap<String, Vec<f64>>, x: &[f64], h: &[f64], c: &[f64]| {
            ln_lstm_reference(&l, p, x, h, c, 2)
        }
    };
    check_recurrent(
        "LayerNormBasicLSTMNetwork",
        NetworkUnit::LayerNormLstm(l),
        2,
        13,
        &reference,
    )
}

#[test]
fn lstm_step_from_a_given_state_matches_the_reference() -> R {
    // A non-zero initial state exercises c·c2i at the first step.
    let l = Lstm {
        input_dim: 2,
        hidden: 3,
        num_actions: Some(2),
        input_keep: 1.0,
        recurrent_keep: 1.0,
    };
    let unit = NetworkUnit::Lstm(l.clone());
    let mut rng = Rng(14);
    let mut store = ParamStore::new(14, DType::F64);
    unit.create_params(&mut store, "lstm")?;
    randomize(&store, &mut rng)?;
    let (x, h, c) = (rng.vec(4, 1.0), rng.vec(6, 1.0), rng.vec(6, 1.0));
    let state = LstmState {
        h: Array::from_vec(h.clone(), &[2, 3])?,
        c: Array::from_vec(c.clone(), &[2, 3])?,
    };
    let z = unit.project_input(&store, "lstm", &Array::from_vec(x.clone(), &[2, 2])?, None)?;
    let (layers, next) = unit.forward(&store, "lstm", &z, Some(&state), None)?;
    let next = next.ok_or("no state")?;
    let (h2, c2, logits) = lstm_reference(&l, &host_params(&store)?, &x, &h, &c, 2);
    assert_close_slices("h", &next.h.to_vec::<f64>()?, &h2, 1e-12);
    assert_close_slices("c", &next.c.to_vec::<f64>()?, &c2, 1e-12);
    let logits = logits.ok_or("no reference logits")?;
    assert_close_slices(
        "logits",
        &layers.get("logits").ok_or("logits")?.to_vec::<f64>()?,
        &logits,
        1e-12,
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// IdentityNetwork
// ---------------------------------------------------------------------------------------

#[test]
fn identity_passes_its_input_and_its_gradient() -> R {
    let unit = NetworkUnit::Identity { input_dim: 4 };
    let mut store = ParamStore::new(0, DType::F64);
    unit.create_params(&mut store, "id")?;
    assert!(store.is_empty());
    let mut rng = Rng(21);
    let x = rng.vec(12, 1.0);
    let w = rng.vec(12, 1.0);
    let xa = Array::from_vec(x.clone(), &[3, 4])?;
    let z = unit.project_input(&store, "id", &xa, None)?;
    let (layers, state) = unit.forward(&store, "id", &z, None, None)?;
    assert!(state.is_none() && layers.get("logits").is_none());
    let out = layers.get("input_embeddings").ok_or("input_embeddings")?;
    assert_eq!(out.to_vec::<f64>()?, x);
    let g = kiln::grad(&weighted_sum(out, &w)?, &[&xa])?;
    assert_eq!(g[0].to_vec::<f64>()?, w);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Embeddings
// ---------------------------------------------------------------------------------------

/// One step's fixed features: `(item, slot, id, weight)`.
type Feature = (usize, usize, i64, f32);

fn output(size: usize, features: &[Feature]) -> FixedFeatureOutput {
    FixedFeatureOutput {
        indices: features.iter().map(|f| (f.0 * size + f.1) as i32).collect(),
        ids: features.iter().map(|f| f.2).collect(),
        weights: features.iter().map(|f| f.3).collect(),
    }
}

/// The steps of a channel of size 2, two items per step: multi-valued cells, weights,
/// empty cells.
fn fixed_steps() -> Vec<Vec<Feature>> {
    vec![
        // step 0: item 0 slot 0 = 1·row 3 + 0.5·row 1; item 0 slot 1 empty;
        //         item 1 slot 0 = row 0, item 1 slot 1 = 0.25·row 4 + 2·row 4 + 1·row 2
        vec![
            (0, 0, 3, 1.0),
            (0, 0, 1, 0.5),
            (1, 0, 0, 1.0),
            (1, 1, 4, 0.25),
            (1, 1, 4, 2.0),
            (1, 1, 2, 1.0),
        ],
        // step 1: item 1 only
        vec![(1, 1, 5, 0.75), (1, 0, 5, 1.0)],
        // step 2: nothing at all (a finished batch)
        vec![],
    ]
}

/// The hand-computed embedding: per row (`step * 2 + item`), per slot, `Σ weight ·
/// matrix[id]` (`Σ weight · id` without a matrix).
fn fixed_reference(
    steps: &[Vec<Feature>],
    matrix: Option<(&[f64], usize)>,
    size: usize,
) -> Vec<f64> {
    let dim = matrix.map_or(1, |m| m.1);
    let rows = steps.len() * 2;
    let mut out = vec![0.0; rows * size * dim];
    for (t, step) in steps.iter().enumerate() {
        for &(item, slot, id, w) in step {
            let base = ((t * 2 + item) * size + slot) * dim;
            for d in 0..dim {
                out[base + d] += f64::from(w)
                    * match matrix {
                        Some((m, dim)) => m[id as usize * dim + d],
                        None => id as f64,
                    };
            }
        }
    }
    out
}

fn fixed_batch(steps: &[Vec<Feature>], size: usize) -> R<FixedBatch> {
    let mut b = FixedBatch::new(steps.len() * 2, size);
    for (t, step) in steps.iter().enumerate() {
        b.add_step(t * 2, &output(size, step))?;
    }
    Ok(b)
}

#[test]
fn embed_fixed_sums_weighted_rows_of_multi_valued_cells() -> R {
    let (vocab, dim, size) = (6, 3, 2);
    let mut rng = Rng(31);
    let m = rng.vec((vocab + 1) * dim, 1.0);
    let steps = fixed_steps();
    let batch = fixed_batch(&steps, size)?;
    assert_eq!((batch.rows(), batch.size(), batch.width()), (6, 2, 3));
    let ma = Array::from_vec(m.clone(), &[vocab + 1, dim])?;
    let e = embed_fixed(Some(&ma), &batch, DType::F64)?;
    assert_eq!(e.shape(), &[6, size * dim]);
    let want = fixed_reference(&steps, Some((&m, dim)), size);
    assert_close_slices("embed_fixed", &e.to_vec::<f64>()?, &want, 1e-12);

    // In f32 too (the training dtype).
    let m32: Vec<f32> = m.iter().map(|&v| v as f32).collect();
    let e32 = embed_fixed(
        Some(&Array::from_vec(m32, &[vocab + 1, dim])?),
        &batch,
        DType::F32,
    )?;
    let got: Vec<f64> = e32.to_vec::<f32>()?.into_iter().map(f64::from).collect();
    assert_close_slices("embed_fixed f32", &got, &want, 1e-5);

    // A range of rows embeds as those rows of the whole.
    let part = embed_fixed(Some(&ma), &batch.rows_range(2, 2), DType::F64)?;
    assert_close_slices(
        "rows_range",
        &part.to_vec::<f64>()?,
        &want[2 * size * dim..4 * size * dim],
        1e-12,
    );
    Ok(())
}

#[test]
fn embed_fixed_without_matrix_passes_weighted_ids() -> R {
    let steps = fixed_steps();
    let batch = fixed_batch(&steps, 2)?;
    let e = embed_fixed(None, &batch, DType::F64)?;
    assert_eq!(e.shape(), &[6, 2]);
    assert_close_slices(
        "ids",
        &e.to_vec::<f64>()?,
        &fixed_reference(&steps, None, 2),
        1e-12,
    );
    Ok(())
}

#[test]
fn fixed_batch_rejects_indices_outside_the_batch() {
    let mut b = FixedBatch::new(2, 3);
    // item 2 of a 2-row batch
    let out = output(3, &[(2, 0, 1, 1.0)]);
    let e = b.add_step(0, &out).unwrap_err().to_string();
    assert!(e.contains("index 6") && e.contains("2 rows"), "{e}");
    // slot 2 of item 0 from row 1 on is the batch's last cell
    assert!(b.add_step(1, &output(3, &[(0, 2, 1, 1.0)])).is_ok());
    let neg = FixedFeatureOutput {
        indices: vec![-1],
        ids: vec![0],
        weights: vec![1.0],
    };
    assert!(b.add_step(0, &neg).is_err());
}

proptest::proptest! {
    /// The batch's ids, weights, width and row ranges against a plain per-cell model: every
    /// cell's pairs in order of arrival, padded to the widest cell, whatever order steps and
    /// features arrive in.
    #[test]
    fn fixed_batch_lays_out_cells_as_a_per_cell_model(
        rows in 1usize..6,
        size in 1usize..4,
        steps in proptest::collection::vec(
            (0usize..6, proptest::collection::vec((0usize..24, 0i64..50, -2.0f32..2.0), 0..12)),
            0..5,
        ),
        range in (0usize..6, 0usize..6),
    ) {
        let mut b = FixedBatch::new(rows, size);
        let mut cells: Vec<Vec<(i64, f32)>> = vec![Vec::new(); rows * size];
        for (first, feats) in &steps {
            let first = first % rows;
            // Only indices inside the batch from `first` on (others are rejected whole).
            let feats: Vec<_> = feats
                .iter()
                .filter(|f| first * size + f.0 < rows * size)
                .collect();
            let out = FixedFeatureOutput {
                indices: feats.iter().map(|f| f.0 as i32).collect(),
                ids: feats.iter().map(|f| f.1).collect(),
                weights: feats.iter().map(|f| f.2).collect(),
            };
            b.add_step(first, &out).unwrap();
            for f in feats {
                cells[first * size + f.0].push((f.1, f.2));
            }
        }
        let layout = |cells: &[Vec<(i64, f32)>]| {
            let w = cells.iter().map(Vec::len).max().unwrap_or(0).max(1);
            let mut ids = vec![0i64; cells.len() * w];
            let mut wts = vec![0f32; cells.len() * w];
            for (c, cell) in cells.iter().enumerate() {
                for (k, &(id, wt)) in cell.iter().enumerate() {
                    ids[c * w + k] = id;
                    wts[c * w + k] = wt;
                }
            }
            (w, ids, wts)
        };
        let (w, ids, wts) = layout(&cells);
        proptest::prop_assert_eq!(b.width(), w);
        proptest::prop_assert_eq!(b.ids(), ids);
        proptest::prop_assert_eq!(b.weights(), wts);
        let start = range.0 % rows;
        let count = range.1 % (rows - start + 1);
        let part = b.rows_range(start, count);
        let (w, ids, wts) = layout(&cells[start * size..(start + count) * size]);
        proptest::prop_assert_eq!((part.rows(), part.width()), (count, w));
        proptest::prop_assert_eq!(part.ids(), ids);
        proptest::prop_assert_eq!(part.weights(), wts);
    }
}

#[test]
fn embed_fixed_gradient_with_respect_to_the_matrix() -> R {
    let (vocab, dim, size) = (6, 3, 2);
    let mut rng = Rng(32);
    let m = rng.vec((vocab + 1) * dim, 1.0);
    let steps = fixed_steps();
    let batch = fixed_batch(&steps, size)?;
    let w = rng.vec(6 * size * dim, 1.0);
    let loss_of = |m: &[f64]| -> R<(Array, Array)> {
        let ma = Array::from_vec(m.to_vec(), &[vocab + 1, dim])?;
        let loss = weighted_sum(&embed_fixed(Some(&ma), &batch, DType::F64)?, &w)?;
        Ok((loss, ma))
    };
    let (loss, ma) = loss_of(&m)?;
    let g = kiln::grad(&loss, &[&ma])?[0].to_vec::<f64>()?;
    // By hand: d/dM[id] = Σ over the id's occurrences of weight · w[row, slot].
    let mut want = vec![0.0; m.len()];
    for (t, step) in steps.iter().enumerate() {
        for &(item, slot, id, wt) in step {
            let base = ((t * 2 + item) * size + slot) * dim;
            for d in 0..dim {
                want[id as usize * dim + d] += f64::from(wt) * w[base + d];
            }
        }
    }
    assert_close_slices("analytic", &g, &want, 1e-12);
    // And by finite differences, every element.
    for i in 0..m.len() {
        let mut p = m.clone();
        p[i] += EPS;
        let plus = loss_of(&p)?.0.item::<f64>()?;
        p[i] = m[i] - EPS;
        let minus = loss_of(&p)?.0.item::<f64>()?;
        let fd = (plus - minus) / (2.0 * EPS);
        assert!(
            (fd - g[i]).abs() <= ATOL + RTOL * fd.abs(),
            "d/dM[{i}]: {} vs {fd}",
            g[i]
        );
    }
    Ok(())
}

fn link_batch(rng: &mut Rng, rows: usize, size: usize, table_rows: usize) -> LinkBatch {
    LinkBatch {
        rows,
        size,
        source_rows: (0..rows * size)
            .map(|i| {
                // the first is out of range, then a mix
                if i == 0 || rng.below(4) == 0 {
                    None
                } else {
                    Some(rng.below(table_rows))
                }
            })
            .collect(),
    }
}

#[test]
fn gather_links_equals_gather_links_host() -> R {
    let mut rng = Rng(41);
    let (n, dim) = (7, 3);
    let table: Vec<f32> = (0..n * dim).map(|_| rng.sym(1.0) as f32).collect();
    let ta = Array::from_vec(table.clone(), &[n, dim])?;
    for size in [1, 2, 3] {
        let b = link_batch(&mut rng, 5, size, n);
        let (rows, oob) = gather_links(&ta, &b)?;
        assert_eq!(rows.shape(), &[5 * size, dim]);
        assert_eq!(oob.shape(), &[5 * size, 1]);
        let (host_rows, host_oob) = gather_links_host(&table, dim, &b)?;
        assert_eq!(rows.to_vec::<f32>()?, host_rows);
        assert_eq!(oob.to_vec::<f32>()?, host_oob);
        // and both against the definition
        for (i, r) in b.source_rows.iter().enumerate() {
            let want: Vec<f32> = match r {
                Some(r) => table[r * dim..(r + 1) * dim].to_vec(),
                None => vec![0.0; dim],
            };
            assert_eq!(host_rows[i * dim..(i + 1) * dim], want[..], "row {i}");
            assert_eq!(host_oob[i], if r.is_some() { 0.0 } else { 1.0 });
        }
    }
    // An empty table (the history before a component's first step): everything is out of
    // range.
    let empty = Array::zeros(&[0, dim], DType::F32);
    let b = LinkBatch {
        rows: 2,
        size: 1,
        source_rows: vec![None, None],
    };
    let (rows, oob) = gather_links(&empty, &b)?;
    assert_eq!(rows.to_vec::<f32>()?, vec![0.0; 2 * dim]);
    assert_eq!(oob.to_vec::<f32>()?, vec![1.0, 1.0]);
    assert_eq!(
        gather_links_host(&[], dim, &b)?,
        (vec![0.0; 2 * dim], vec![1.0, 1.0])
    );
    // A row past the table is an error on both sides.
    let bad = LinkBatch {
        rows: 1,
        size: 1,
        source_rows: vec![Some(n)],
    };
    let e = gather_links(&ta, &bad).unwrap_err().to_string();
    assert!(
        e.contains(&format!("row {n}")) && e.contains(&format!("{n} rows")),
        "{e}"
    );
    assert!(gather_links_host(&table, dim, &bad).is_err());
    Ok(())
}

#[test]
fn embed_links_projects_rows_with_their_out_of_range_indicator() -> R {
    let mut rng = Rng(42);
    let (n, src_dim, dim, rows, size) = (5, 3, 2, 4, 2);
    let table = rng.vec(n * src_dim, 1.0);
    let proj = rng.vec((src_dim + 1) * dim, 1.0);
    let ta = Array::from_vec(table.clone(), &[n, src_dim])?;
    let pa = Array::from_vec(proj.clone(), &[src_dim + 1, dim])?;
    let b = link_batch(&mut rng, rows, size, n);
    assert!(b.source_rows.iter().any(Option::is_some));
    let (g, oob) = gather_links(&ta, &b)?;

    // With a projection: [row, oob] · P, slots side by side.
    let e = embed_links(&g, &oob, Some(&pa), rows, size)?;
    assert_eq!(e.shape(), &[rows, size * dim]);
    let got = e.to_vec::<f64>()?;
    for (i, r) in b.source_rows.iter().enumerate() {
        let mut x = match r {
            Some(r) => table[r * src_dim..(r + 1) * src_dim].to_vec(),
            None => vec![0.0; src_dim],
        };
        x.push(if r.is_some() { 0.0 } else { 1.0 });
        let want = matmul(&x, 1, src_dim + 1, &proj, dim);
        let (row, slot) = (i / size, i % size);
        let at = row * size * dim + slot * dim;
        assert_close_slices(&format!("link {i}"), &got[at..at + dim], &want, 1e-12);
        if r.is_none() {
            // the out-of-range indicator row: exactly the projection's last row
            assert_close_slices(
                &format!("link {i} (out of range)"),
                &got[at..at + dim],
                &proj[src_dim * dim..],
                1e-15,
            );
        }
    }

    // Without: the raw rows, slots side by side.
    let raw = embed_links(&g, &oob, None, rows, size)?;
    assert_eq!(raw.shape(), &[rows, size * src_dim]);
    let got = raw.to_vec::<f64>()?;
    for (i, r) in b.source_rows.iter().enumerate() {
        let want = match r {
            Some(r) => table[r * src_dim..(r + 1) * src_dim].to_vec(),
            None => vec![0.0; src_dim],
        };
        assert_eq!(
            got[i * src_dim..(i + 1) * src_dim],
            want[..],
            "raw link {i}"
        );
    }
    Ok(())
}

#[test]
fn link_batch_add_step_maps_links_to_source_rows() {
    use kiln_dragnn::translator::LinkIndex;
    let mut b = LinkBatch::new(2);
    let l = |batch_index: usize, beam_index: i32, step_index: i32| {
        Some(LinkIndex {
            batch_index,
            beam_index,
            step_index,
        })
    };
    // two items, two slots: step -1 and padding are out of range
    b.add_step(&[l(0, 0, 2), l(0, 0, -1), None, l(1, 0, 0)], |x| {
        Some(x.step_index as usize * 2 + x.batch_index)
    });
    assert_eq!(b.rows, 2);
    assert_eq!(b.source_rows, vec![Some(4), None, None, Some(1)]);
    let r = b.rows_range(1, 1);
    assert_eq!((r.rows, r.source_rows), (1, vec![None, Some(1)]));
}

// ---------------------------------------------------------------------------------------
// layer_norm
// ---------------------------------------------------------------------------------------

#[test]
fn layer_norm_matches_a_hand_written_reference() -> R {
    let mut rng = Rng(51);
    let (rows, width) = (4, 5);
    let x: Vec<f64> = (0..rows * width)
        .map(|i| rng.sym(2.0) + i as f64 * 0.1)
        .collect();
    let gamma: Vec<f64> = (0..width).map(|_| 1.0 + rng.sym(0.5)).collect();
    let beta = rng.vec(width, 0.5);
    let y = layer_norm(
        &Array::from_vec(x.clone(), &[rows, width])?,
        &Array::from_vec(gamma.clone(), &[width])?,
        &Array::from_vec(beta.clone(), &[width])?,
    )?;
    let got = y.to_vec::<f64>()?;
    assert_close_slices(
        "layer_norm",
        &got,
        &ln_rows(&x, width, &gamma, &beta),
        1e-12,
    );
    // With unit gain and no offset every row has mean 0 and variance var/(var+eps) ≈ 1.
    let y = layer_norm(
        &Array::from_vec(x.clone(), &[rows, width])?,
        &Array::ones(&[width], DType::F64),
        &Array::zeros(&[width], DType::F64),
    )?
    .to_vec::<f64>()?;
    for row in y.chunks(width) {
        let mean = row.iter().sum::<f64>() / width as f64;
        let var = row.iter().map(|v| v * v).sum::<f64>() / width as f64;
        assert!(
            mean.abs() < 1e-12 && (var - 1.0).abs() < 1e-5,
            "{mean} {var}"
        );
    }
    // Over the last axis of a 3-D input with a 2-D gain (as the LSTM's gates use it).
    let (a, b, c) = (2, 4, 3);
    let x3 = rng.vec(a * b * c, 1.0);
    let g2: Vec<f64> = (0..b * c).map(|_| 1.0 + rng.sym(0.5)).collect();
    let b2 = rng.vec(b * c, 0.5);
    let y3 = layer_norm(
        &Array::from_vec(x3.clone(), &[a, b, c])?,
        &Array::from_vec(g2.clone(), &[b, c])?,
        &Array::from_vec(b2.clone(), &[b, c])?,
    )?
    .to_vec::<f64>()?;
    for i in 0..a {
        for k in 0..b {
            let at = (i * b + k) * c;
            let want = ln_rows(
                &x3[at..at + c],
                c,
                &g2[k * c..(k + 1) * c],
                &b2[k * c..(k + 1) * c],
            );
            assert_close_slices(&format!("3-D [{i}, {k}]"), &y3[at..at + c], &want, 1e-12);
        }
    }
    // A constant row normalises to the offset.
    let y = layer_norm(
        &Array::from_vec(vec![3.0f64; width], &[1, width])?,
        &Array::from_vec(gamma, &[width])?,
        &Array::from_vec(beta.clone(), &[width])?,
    )?;
    assert_close_slices("constant row", &y.to_vec::<f64>()?, &beta, 1e-12);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Dropout
// ---------------------------------------------------------------------------------------

#[test]
fn dropout_keeps_a_binomial_fraction_scaled_by_one_over_keep() -> R {
    const N: usize = 100_000;
    for (keep, seed) in [(0.7, 1u64), (0.5, 2), (0.1, 3), (0.95, 4)] {
        let x = Array::ones(&[N], DType::F32);
        let y = DropoutSeeds::new(seed).apply(&x, keep)?.to_vec::<f32>()?;
        let scale = 1.0 / keep;
        let mut kept = 0usize;
        for &v in &y {
            if v != 0.0 {
                assert!(
                    (f64::from(v) - scale).abs() < 1e-5 * scale,
                    "keep {keep}: a kept value {v}, not {scale}"
                );
                kept += 1;
            }
        }
        let mean = N as f64 * keep;
        let sd = (N as f64 * keep * (1.0 - keep)).sqrt();
        assert!(
            (kept as f64 - mean).abs() < 5.0 * sd,
            "keep {keep}: kept {kept} of {N}, expected {mean} ± {}",
            5.0 * sd
        );
        // Both halves keep about as much (no positional bias).
        let first = y[..N / 2].iter().filter(|&&v| v != 0.0).count() as f64;
        let sd_half = (N as f64 / 2.0 * keep * (1.0 - keep)).sqrt();
        assert!(
            (first - mean / 2.0).abs() < 5.0 * sd_half,
            "keep {keep}: first half {first}"
        );
    }
    Ok(())
}

#[test]
fn dropout_is_deterministic_per_seed_and_new_per_mask() -> R {
    let mut rng = Rng(61);
    let xs: Vec<f64> = (0..1000).map(|_| 0.5 + rng.unit()).collect(); // never 0
    let x = Array::from_vec(xs.clone(), &[10, 100])?;
    let run = |base: u64| -> R<Vec<Vec<f64>>> {
        let mut d = DropoutSeeds::new(base);
        Ok(vec![
            d.apply(&x, 0.6)?.to_vec::<f64>()?,
            d.apply(&x, 0.6)?.to_vec::<f64>()?,
        ])
    };
    let a = run(9)?;
    assert_eq!(a, run(9)?, "the same base seed gives the same masks");
    assert_ne!(a[0], a[1], "each mask has its own seed");
    assert_ne!(a[0], run(10)?[0], "another base seed gives other masks");
    for y in &a {
        assert_eq!(y.len(), xs.len());
        for (v, x0) in y.iter().zip(&xs) {
            assert!(
                *v == 0.0 || (v - x0 / 0.6).abs() < 1e-12,
                "{v} is neither 0 nor {x0} / 0.6"
            );
        }
    }
    // keep >= 1 is no dropout at all
    let mut d = DropoutSeeds::new(9);
    assert_eq!(d.apply(&x, 1.0)?.to_vec::<f64>()?, xs);
    Ok(())
}

#[test]
fn dropout_inside_units_only_when_asked() -> R {
    // A FeedForward with keep 0.5 drops its input only when given seeds.
    let unit = NetworkUnit::FeedForward(FeedForward {
        input_dim: 200,
        hidden: vec![],
        num_actions: None,
        layer_norm_input: false,
        layer_norm_hidden: false,
        nonlinearity: Nonlinearity::Identity,
        keep: 0.5,
        dropout_all_layers: false,
    });
    let store = ParamStore::new(0, DType::F32);
    let x = Array::ones(&[5, 200], DType::F32);
    let plain = unit
        .project_input(&store, "ff", &x, None)?
        .to_vec::<f32>()?;
    assert!(plain.iter().all(|&v| v == 1.0));
    let mut d = DropoutSeeds::new(3);
    let dropped = unit
        .project_input(&store, "ff", &x, Some(&mut d))?
        .to_vec::<f32>()?;
    let kept = dropped.iter().filter(|&&v| v != 0.0).count();
    assert!(dropped.iter().all(|&v| v == 0.0 || v == 2.0));
    assert!(
        (300..=700).contains(&kept),
        "kept {kept} of 1000 at keep 0.5"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// from_spec and its errors
// ---------------------------------------------------------------------------------------

fn unit_spec(name: &str, unit: &str, params: &[(&str, &str)]) -> R<ComponentSpec> {
    let params: String = params
        .iter()
        .map(|(k, v)| format!(" parameters {{ key: '{k}' value: '{v}' }}"))
        .collect();
    Ok(ComponentSpec::from_text(&format!(
        "name: '{name}' network_unit {{ registered_name: '{unit}'{params} }}"
    ))?)
}

fn unit_error(spec: &ComponentSpec, grid: &GridPoint) -> String {
    match NetworkUnit::from_spec(spec, 6, 4, grid) {
        Ok(u) => panic!("{} built {u:?}", spec.name()),
        Err(e) => e.to_string(),
    }
}

fn assert_mentions(message: &str, parts: &[&str]) {
    for p in parts {
        assert!(message.contains(p), "{message:?} does not mention {p:?}");
    }
}

#[test]
fn from_spec_builds_the_configured_units() -> R {
    let grid = GridPoint::from_text("dropout_rate: 0.8 recurrent_dropout_rate: 0.6")?;
    let spec = unit_spec(
        "tagger",
        "FeedForwardNetwork",
        &[
            ("hidden_layer_sizes", "8, 4"),
            ("layer_norm_input", "true"),
            ("layer_norm_hidden", "True"),
            ("nonlinearity", "tanh"),
            ("dropout_all_layers", "1"),
        ],
    )?;
    assert_eq!(
        NetworkUnit::from_spec(&spec, 6, 4, &grid)?,
        NetworkUnit::FeedForward(FeedForward {
            input_dim: 6,
            hidden: vec![8, 4],
            num_actions: Some(4),
            layer_norm_input: true,
            layer_norm_hidden: true,
            nonlinearity: Nonlinearity::Tanh,
            keep: 0.8,
            dropout_all_layers: true,
        })
    );
    // A unit's own keep probability wins over the grid point's; a negative one falls back.
    let spec = unit_spec(
        "tagger",
        "FeedForwardNetwork",
        &[("dropout_keep_prob", "0.5")],
    )?;
    let NetworkUnit::FeedForward(f) = NetworkUnit::from_spec(&spec, 6, 4, &grid)? else {
        panic!("not a FeedForward")
    };
    assert_eq!(
        (f.keep, f.hidden.len(), f.nonlinearity),
        (0.5, 0, Nonlinearity::Relu)
    );
    let spec = unit_spec(
        "tagger",
        "FeedForwardNetwork",
        &[("dropout_keep_prob", "-1")],
    )?;
    let NetworkUnit::FeedForward(f) = NetworkUnit::from_spec(&spec, 6, 4, &grid)? else {
        panic!("not a FeedForward")
    };
    assert_eq!(f.keep, 0.8);
    // One action: no logits (a shift-only component); omit_logits likewise.
    let NetworkUnit::FeedForward(f) = NetworkUnit::from_spec(&spec, 6, 1, &grid)? else {
        panic!("not a FeedForward")
    };
    assert_eq!(f.num_actions, None);
    let spec = unit_spec(
        "lookahead",
        "LSTMNetwork",
        &[("hidden_layer_sizes", "16"), ("omit_logits", "true")],
    )?;
    assert_eq!(
        NetworkUnit::from_spec(&spec, 6, 4, &grid)?,
        NetworkUnit::Lstm(Lstm {
            input_dim: 6,
            hidden: 16,
            num_actions: None,
            input_keep: 0.8,
            recurrent_keep: 0.6,
        })
    );
    let spec = unit_spec(
        "lookahead",
        "wrapped_units.LayerNormBasicLSTMNetwork",
        &[
            ("hidden_layer_sizes", "16"),
            ("input_dropout_rate", "0.9"),
            ("recurrent_dropout_rate", "0.7"),
        ],
    )?;
    let unit = NetworkUnit::from_spec(&spec, 6, 4, &GridPoint::default())?;
    assert_eq!(
        unit,
        NetworkUnit::LayerNormLstm(LayerNormLstm {
            input_dim: 6,
            hidden: 16,
            num_actions: Some(4),
            input_keep: 0.9,
            recurrent_keep: 0.7,
        })
    );
    let layers: Vec<(String, usize)> = unit.layers();
    let names: Vec<&str> = layers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["state_h_0", "state_c_0", "layer_0", "last_layer", "logits"]
    );
    assert!(unit.is_recurrent());
    // Without a recurrent rate the grid's dropout_rate applies to the recurrent keep too.
    let spec = unit_spec("l", "LSTMNetwork", &[("hidden_layer_sizes", "3")])?;
    let NetworkUnit::Lstm(l) =
        NetworkUnit::from_spec(&spec, 2, 2, &GridPoint::from_text("dropout_rate: 0.75")?)?
    else {
        panic!("not an LSTM")
    };
    assert_eq!((l.input_keep, l.recurrent_keep), (0.75, 0.75));
    Ok(())
}

#[test]
fn from_spec_rejects_an_unknown_unit_naming_the_component() -> R {
    let spec = unit_spec("my_tagger", "Conv2DNetwork", &[])?;
    let e = unit_error(&spec, &GridPoint::default());
    assert_mentions(&e, &["my_tagger", "Conv2DNetwork", "unknown network unit"]);
    // No network unit at all is unknown too.
    let spec = ComponentSpec::from_text("name: 'bare'")?;
    let e = unit_error(&spec, &GridPoint::default());
    assert_mentions(&e, &["bare", "unknown network unit"]);
    Ok(())
}

#[test]
fn from_spec_rejects_bad_hidden_layer_sizes() -> R {
    for (sizes, bad) in [
        ("8,x", "\"x\""),
        ("0", "\"0\""),
        ("16,-3", "\"-3\""),
        ("4.5", "\"4.5\""),
    ] {
        for unit in ["FeedForwardNetwork", "LSTMNetwork"] {
            let spec = unit_spec("parser", unit, &[("hidden_layer_sizes", sizes)])?;
            let e = unit_error(&spec, &GridPoint::default());
            assert_mentions(
                &e,
                &[
                    "parser",
                    unit,
                    "hidden_layer_sizes",
                    bad,
                    "positive integer",
                ],
            );
        }
    }
    Ok(())
}

#[test]
fn from_spec_rejects_an_lstm_without_exactly_one_hidden_size() -> R {
    for unit in ["LSTMNetwork", "LayerNormBasicLSTMNetwork"] {
        let spec = unit_spec("lookahead", unit, &[("hidden_layer_sizes", "8,8")])?;
        let e = unit_error(&spec, &GridPoint::default());
        assert_mentions(
            &e,
            &["lookahead", unit, "exactly one hidden size", "[8, 8]"],
        );
        let spec = unit_spec("lookahead", unit, &[])?;
        let e = unit_error(&spec, &GridPoint::default());
        assert_mentions(&e, &["lookahead", "exactly one hidden size", "[]"]);
    }
    Ok(())
}

#[test]
fn from_spec_rejects_keep_probabilities_outside_zero_one() -> R {
    let grid = GridPoint::default();
    for value in ["0", "1.5", "0.0"] {
        let spec = unit_spec(
            "tagger",
            "FeedForwardNetwork",
            &[("hidden_layer_sizes", "8"), ("dropout_keep_prob", value)],
        )?;
        let e = unit_error(&spec, &grid);
        assert_mentions(&e, &["tagger", "dropout_keep_prob", "outside (0, 1]"]);
        for key in ["input_dropout_rate", "recurrent_dropout_rate"] {
            let spec = unit_spec(
                "lookahead",
                "LSTMNetwork",
                &[("hidden_layer_sizes", "8"), (key, value)],
            )?;
            let e = unit_error(&spec, &grid);
            assert_mentions(&e, &["lookahead", key, "outside (0, 1]"]);
        }
    }
    // The grid point's dropout_rate is a keep probability too.
    for rate in ["0", "2"] {
        let grid = GridPoint::from_text(&format!("dropout_rate: {rate}"))?;
        let spec = unit_spec(
            "tagger",
            "FeedForwardNetwork",
            &[("hidden_layer_sizes", "8")],
        )?;
        let e = unit_error(&spec, &grid);
        assert_mentions(&e, &["tagger", "outside (0, 1]", "dropout_rate"]);
    }
    // A value that is no number.
    let spec = unit_spec(
        "tagger",
        "FeedForwardNetwork",
        &[("dropout_keep_prob", "half")],
    )?;
    let e = unit_error(&spec, &grid);
    assert_mentions(&e, &["tagger", "dropout_keep_prob", "does not parse"]);
    Ok(())
}

#[test]
fn from_spec_rejects_an_unknown_nonlinearity() -> R {
    let spec = unit_spec("tagger", "FeedForwardNetwork", &[("nonlinearity", "swish")])?;
    let e = unit_error(&spec, &GridPoint::default());
    assert_mentions(&e, &["tagger", "swish", "nonlinearity"]);
    Ok(())
}

#[test]
fn param_store_errors_name_the_parameter() -> R {
    let unit = NetworkUnit::Lstm(Lstm {
        input_dim: 2,
        hidden: 3,
        num_actions: Some(2),
        input_keep: 1.0,
        recurrent_keep: 1.0,
    });
    let mut store = ParamStore::new(0, DType::F64);
    unit.create_params(&mut store, "lstm")?;
    // The reference's initialisers: small normal weights, zero LSTM and softmax biases.
    let w = store.value("lstm/x2ico")?.to_vec::<f64>()?;
    assert!(w.iter().all(|v| v.abs() < 1e-3) && w.iter().any(|&v| v != 0.0));
    assert_eq!(store.value("lstm/bico")?.to_vec::<f64>()?, vec![0.0; 9]);
    // Another input width for the same names is a shape error naming the parameter.
    let wider = NetworkUnit::Lstm(Lstm {
        input_dim: 5,
        hidden: 3,
        num_actions: Some(2),
        input_keep: 1.0,
        recurrent_keep: 1.0,
    });
    let e = wider
        .create_params(&mut store, "lstm")
        .unwrap_err()
        .to_string();
    assert_mentions(&e, &["lstm/x2ico", "[2, 9]", "[5, 9]"]);
    // A unit run against a store without its parameters names the missing one.
    let empty = ParamStore::new(0, DType::F64);
    let x = Array::ones(&[1, 2], DType::F64);
    let e = unit
        .project_input(&empty, "lstm", &x, None)
        .unwrap_err()
        .to_string();
    assert_mentions(&e, &["no parameter", "lstm/x2ico"]);
    Ok(())
}

#[test]
fn feature_id_dropout_replaces_about_the_share_it_is_told_to() {
    let n = 20_000;
    let mut b = FixedBatch::new(n, 1);
    let out = FixedFeatureOutput {
        indices: (0..n as i32).collect(),
        ids: (0..n as i64).map(|i| i % 10).collect(),
        weights: vec![1.0; n],
    };
    b.add_step(0, &out).unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    // ids 0..5 kept with probability 0.25, ids 5..10 never dropped
    let dropped = b.drop_ids(99, |id| if id < 5 { 0.25 } else { 1.0 }, &mut rng);
    let ids = b.ids();
    assert_eq!(ids.iter().filter(|&&i| i == 99).count(), dropped);
    assert!(ids
        .iter()
        .enumerate()
        .all(|(k, &i)| i == 99 || i == k as i64 % 10));
    assert!(ids.iter().enumerate().all(|(k, &i)| k % 10 < 5 || i != 99));
    // 10,000 draws at 0.75: mean 7,500, sd 43
    assert!((7_200..=7_800).contains(&dropped), "{dropped} dropped");
    assert_eq!(b.weights(), vec![1.0; n]);
}
