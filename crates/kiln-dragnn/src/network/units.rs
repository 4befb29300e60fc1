//! Network units (DRAGNN's `network_units.py`) written with kiln arrays: [`NetworkUnit`]
//! holds one of `IdentityNetwork`, `FeedForwardNetwork`, `LSTMNetwork` (the reference's
//! coupled-gate LSTM) and `LayerNormBasicLSTMNetwork` (TensorFlow's layer-normalised basic
//! LSTM cell, as the example specs use it), built from a component's `network_unit` spec.
//!
//! A unit maps an input `[rows, input_dim]` (and, for the LSTMs, the previous step's state
//! per row) to named [`Layers`] that linked features can read and, unless it has none,
//! `logits`.
//! The LSTMs split their work: [`NetworkUnit::project_input`] multiplies the input by its
//! weights (for every step at once in the bulk path), [`NetworkUnit::forward`] does the
//! recurrent part of one step.
//!
//! Parameters live in a [`ParamStore`] under `{component}/{name}`, initialised as the
//! reference does: weights normal with std 1e-4, hidden biases 0.2, softmax biases 0,
//! layer-norm gains 1 and offsets 0.
//!
//! Depends on kiln's public API, [`crate::spec`], [`super::params`] and
//! [`super::NetworkError`].

use kiln::{Array, DType};

use super::params::{Init, ParamStore};
use super::{NetworkError, ReshapeTo};
use crate::spec::{ComponentSpec, GridPoint};

/// The standard deviation of weight initialisation (the reference's
/// `tf.random_normal_initializer(stddev=1e-4)`).
pub const WEIGHT_STD: f64 = 1e-4;
/// The initial value of hidden-layer biases.
pub const HIDDEN_BIAS: f64 = 0.2;
/// Layer normalisation's variance epsilon.
pub const LAYER_NORM_EPS: f64 = 1e-6;

/// Named activations of one step (or of every step, in the bulk layout), in the order the
/// unit declares them.
///
/// ```
/// use kiln_dragnn::network::Layers;
/// let mut l = Layers::default();
/// l.push("layer_0", kiln::Array::zeros(&[2, 3], kiln::DType::F32));
/// assert_eq!(l.get("layer_0").map(|a| a.shape().to_vec()), Some(vec![2, 3]));
/// assert!(l.get("logits").is_none());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Layers {
    entries: Vec<(String, Array)>,
}

impl Layers {
    /// Adds (or replaces) layer `name`.
    ///
    /// ```
    /// let mut l = kiln_dragnn::network::Layers::default();
    /// l.push("a", kiln::Array::scalar(1.0f32));
    /// l.push("a", kiln::Array::scalar(2.0f32));
    /// assert_eq!(l.names().count(), 1);
    /// ```
    pub fn push(&mut self, name: &str, value: Array) {
        match self.entries.iter_mut().find(|(n, _)| n == name) {
            Some(e) => e.1 = value,
            None => self.entries.push((name.to_string(), value)),
        }
    }

    /// Layer `name`.
    ///
    /// ```
    /// assert!(kiln_dragnn::network::Layers::default().get("x").is_none());
    /// ```
    pub fn get(&self, name: &str) -> Option<&Array> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    /// The layers' names, in order.
    ///
    /// ```
    /// assert_eq!(kiln_dragnn::network::Layers::default().names().count(), 0);
    /// ```
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.entries.iter().map(|(n, _)| n.as_str())
    }

    /// The layers, in order.
    ///
    /// ```
    /// assert!(kiln_dragnn::network::Layers::default().iter().next().is_none());
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Array)> + '_ {
        self.entries.iter().map(|(n, a)| (n.as_str(), a))
    }
}

/// The recurrent state of an LSTM, one row per batch (and beam) item.
///
/// ```
/// use kiln_dragnn::network::LstmState;
/// let s = LstmState::zeros(2, 4, kiln::DType::F32)?;
/// assert_eq!(s.h.shape(), &[2, 4]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct LstmState {
    /// The hidden state `[rows, hidden]`.
    pub h: Array,
    /// The cell state `[rows, hidden]`.
    pub c: Array,
}

impl LstmState {
    /// The zero state (the state before the first step).
    ///
    /// ```
    /// let s = kiln_dragnn::network::LstmState::zeros(1, 3, kiln::DType::F64)?;
    /// assert_eq!(s.c.to_vec::<f64>()?, vec![0.0; 3]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn zeros(rows: usize, hidden: usize, dtype: DType) -> kiln::Result<LstmState> {
        Ok(LstmState {
            h: Array::try_zeros(&[rows, hidden], dtype)?,
            c: Array::try_zeros(&[rows, hidden], dtype)?,
        })
    }
}

/// Dropout during training: keep probabilities come from the unit, the masks' seeds from
/// here (a new seed per mask, all derived from `base`, which changes each training step at
/// no recompilation: seeds are run-time values in kiln).
///
/// ```
/// let mut d = kiln_dragnn::network::DropoutSeeds::new(5);
/// assert_ne!(d.next_seed(), d.next_seed());
/// ```
#[derive(Debug, Clone)]
pub struct DropoutSeeds {
    base: u64,
    counter: u64,
}

impl DropoutSeeds {
    /// Seeds derived from `base`.
    ///
    /// ```
    /// let _ = kiln_dragnn::network::DropoutSeeds::new(0);
    /// ```
    pub fn new(base: u64) -> DropoutSeeds {
        DropoutSeeds { base, counter: 0 }
    }

    /// The next mask's seed.
    ///
    /// ```
    /// let mut a = kiln_dragnn::network::DropoutSeeds::new(1);
    /// let mut b = kiln_dragnn::network::DropoutSeeds::new(1);
    /// assert_eq!(a.next_seed(), b.next_seed());
    /// ```
    pub fn next_seed(&mut self) -> u64 {
        self.counter += 1;
        let mut z = self
            .base
            .wrapping_add(self.counter.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `x` with each element kept with probability `keep` (and scaled by `1 / keep`), or
    /// `x` itself when `keep >= 1`.
    ///
    /// ```
    /// let mut d = kiln_dragnn::network::DropoutSeeds::new(1);
    /// let x = kiln::Array::ones(&[1000], kiln::DType::F32);
    /// let y = d.apply(&x, 0.5)?.to_vec::<f32>()?;
    /// assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
    /// assert_eq!(d.apply(&x, 1.0)?.to_vec::<f32>()?, vec![1.0; 1000]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn apply(&mut self, x: &Array, keep: f64) -> kiln::Result<Array> {
        if keep >= 1.0 {
            return Ok(x.clone());
        }
        let u = Array::uniform(x.shape(), 0.0, 1.0, self.next_seed(), x.dtype())?;
        let mask = u.try_lt(keep)?.cast(x.dtype());
        x.try_mul(&mask)?.try_mul(1.0 / keep)
    }
}

/// A FeedForwardNetwork's nonlinearity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nonlinearity {
    /// `max(x, 0)` (the default).
    Relu,
    /// `tanh`.
    Tanh,
    /// `x` for `x > 0`, else `e^x - 1`.
    Elu,
    /// The logistic sigmoid.
    Sigmoid,
    /// `x`.
    Identity,
}

impl Nonlinearity {
    fn parse(s: &str) -> Option<Nonlinearity> {
        Some(match s {
            "relu" => Nonlinearity::Relu,
            "tanh" => Nonlinearity::Tanh,
            "elu" => Nonlinearity::Elu,
            "sigmoid" => Nonlinearity::Sigmoid,
            "identity" => Nonlinearity::Identity,
            _ => return None,
        })
    }

    fn apply(self, x: &Array) -> kiln::Result<Array> {
        match self {
            Nonlinearity::Relu => x.try_relu(),
            Nonlinearity::Tanh => x.try_tanh(),
            Nonlinearity::Sigmoid => x.try_sigmoid(),
            Nonlinearity::Identity => Ok(x.clone()),
            Nonlinearity::Elu => {
                let neg = x.try_minimum(0.0)?.try_exp()?.try_sub(1.0)?;
                kiln::where_(&x.try_gt(0.0)?, x, &neg)
            }
        }
    }
}

/// A `FeedForwardNetwork`.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedForward {
    /// The input width.
    pub input_dim: usize,
    /// The hidden layers' widths.
    pub hidden: Vec<usize>,
    /// The number of actions (`None`: `omit_logits`).
    pub num_actions: Option<usize>,
    /// Layer normalisation of the input.
    pub layer_norm_input: bool,
    /// Layer normalisation of layer 0 (replacing its bias).
    pub layer_norm_hidden: bool,
    /// The nonlinearity.
    pub nonlinearity: Nonlinearity,
    /// The dropout keep probability of the input (1: none).
    pub keep: f64,
    /// Whether hidden layers get dropout too.
    pub dropout_all_layers: bool,
}

/// An `LSTMNetwork`: the reference's coupled-gate LSTM,
/// `i = σ(x·x2i + h·h2i + c·c2i + bi)`, `f = 1 − i`,
/// `c' = f ⊙ c + i ⊙ tanh(x·x2c + h·h2c + bc)`, `o = σ(x·x2o + h·h2o + c'·c2o + bo)`,
/// `h' = o ⊙ tanh(c')`.
/// The three input matrices are one parameter `x2ico` (columns i, c, o), as are the three
/// hidden ones (`h2ico`) and the biases (`bico`); `c2i` and `c2o` are separate.
#[derive(Debug, Clone, PartialEq)]
pub struct Lstm {
    /// The input width.
    pub input_dim: usize,
    /// The hidden width.
    pub hidden: usize,
    /// The number of actions (`None`: `omit_logits`).
    pub num_actions: Option<usize>,
    /// The input dropout keep probability.
    pub input_keep: f64,
    /// The keep probability of `h` fed back.
    pub recurrent_keep: f64,
}

/// A `LayerNormBasicLSTMNetwork`: TensorFlow's `LayerNormBasicLSTMCell`
/// (`[i, j, f, o] = LN([x, h]·W)` per gate, `c' = LN(c ⊙ σ(f + 1) + σ(i) ⊙ drop(tanh(j)))`,
/// `h' = tanh(c') ⊙ σ(o)`); `W` is stored as `x2h` and `h2h`.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerNormLstm {
    /// The input width.
    pub input_dim: usize,
    /// The hidden width.
    pub hidden: usize,
    /// The number of actions (`None`: `omit_logits`).
    pub num_actions: Option<usize>,
    /// The input dropout keep probability.
    pub input_keep: f64,
    /// The keep probability of the cell input `tanh(j)`.
    pub recurrent_keep: f64,
}

/// One component's network unit.
///
/// ```
/// use kiln_dragnn::network::{NetworkUnit, ParamStore};
/// use kiln_dragnn::spec::{ComponentSpec, GridPoint};
/// let spec = ComponentSpec::from_text(
///     "name: 'tagger' network_unit { registered_name: 'FeedForwardNetwork' parameters { key: 'hidden_layer_sizes' value: '8' } }",
/// )?;
/// let unit = NetworkUnit::from_spec(&spec, 5, 3, &GridPoint::default())?;
/// let names: Vec<_> = unit.layers().into_iter().map(|(n, d)| format!("{n}:{d}")).collect();
/// assert_eq!(names, ["layer_0:8", "last_layer:8", "logits:3"]);
/// let mut store = ParamStore::new(0, kiln::DType::F32);
/// unit.create_params(&mut store, "tagger")?;
/// let x = kiln::Array::ones(&[2, 5], kiln::DType::F32);
/// let (layers, _) = unit.forward(&store, "tagger", &unit.project_input(&store, "tagger", &x, None)?, None, None)?;
/// assert_eq!(layers.get("logits").unwrap().shape(), &[2, 3]);
/// # Ok::<(), kiln_dragnn::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum NetworkUnit {
    /// `IdentityNetwork`: the input is the one layer, `input_embeddings`.
    Identity {
        /// The input width.
        input_dim: usize,
    },
    /// `FeedForwardNetwork`.
    FeedForward(FeedForward),
    /// `LSTMNetwork`.
    Lstm(Lstm),
    /// `LayerNormBasicLSTMNetwork` (also accepted as `wrapped_units.LayerNormBasicLSTMNetwork`).
    LayerNormLstm(LayerNormLstm),
}

/// Reads a unit parameter (`None` when absent).
fn param<T: std::str::FromStr>(
    spec: &ComponentSpec,
    key: &str,
    unit: &str,
) -> Result<Option<T>, NetworkError> {
    let Some(v) = spec.network_unit.as_ref().and_then(|u| u.parameter(key)) else {
        return Ok(None);
    };
    v.trim()
        .parse()
        .map(Some)
        .map_err(|_| NetworkError::BadUnit {
            component: spec.name().to_string(),
            unit: unit.to_string(),
            message: format!("parameter {key} = {v:?} does not parse"),
        })
}

fn flag(spec: &ComponentSpec, key: &str, unit: &str) -> Result<bool, NetworkError> {
    Ok(param::<String>(spec, key, unit)?.is_some_and(|v| v == "true" || v == "True" || v == "1"))
}

fn hidden_sizes(spec: &ComponentSpec, unit: &str) -> Result<Vec<usize>, NetworkError> {
    let Some(s) = param::<String>(spec, "hidden_layer_sizes", unit)? else {
        return Ok(Vec::new());
    };
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(NetworkError::BadUnit {
                component: spec.name().to_string(),
                unit: unit.to_string(),
                message: format!("hidden_layer_sizes {s:?}: {p:?} is not a positive integer"),
            }),
        })
        .collect()
}

/// A keep probability from a unit parameter, falling back to `fallback` when absent or
/// negative; it must lie in `(0, 1]`.
fn keep_prob(
    spec: &ComponentSpec,
    key: &str,
    unit: &str,
    fallback: f64,
) -> Result<f64, NetworkError> {
    let v = match param::<f64>(spec, key, unit)? {
        Some(v) if v >= 0.0 => v,
        _ => fallback,
    };
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(NetworkError::BadUnit {
            component: spec.name().to_string(),
            unit: unit.to_string(),
            message: format!(
                "{key}: keep probability {v} is outside (0, 1] (1 is no dropout; the grid \
                 point's dropout_rate is a keep probability too)"
            ),
        })
    }
}

/// `x · w + b` with the parameters of the store.
fn affine(x: &Array, w: &Array, b: Option<&Array>) -> kiln::Result<Array> {
    let y = x.try_matmul(w)?;
    match b {
        Some(b) => y.try_add(b),
        None => Ok(y),
    }
}

/// `state`, or the zero state of `rows × hidden` kept in `slot`.
fn or_zeros<'a>(
    state: Option<&'a LstmState>,
    slot: &'a mut Option<LstmState>,
    rows: usize,
    hidden: usize,
    dtype: DType,
) -> kiln::Result<&'a LstmState> {
    match state {
        Some(s) => Ok(s),
        None => Ok(slot.insert(LstmState::zeros(rows, hidden, dtype)?)),
    }
}

/// Layer normalisation over the last axis with gain `gamma` and offset `beta`.
///
/// ```
/// use kiln::Array;
/// let x = Array::from_vec(vec![1.0f64, 3.0], &[1, 2])?;
/// let y = kiln_dragnn::network::layer_norm(&x, &Array::ones(&[2], kiln::DType::F64), &Array::zeros(&[2], kiln::DType::F64))?;
/// let v = y.to_vec::<f64>()?;
/// assert!((v[0] + 1.0).abs() < 1e-5 && (v[1] - 1.0).abs() < 1e-5);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn layer_norm(x: &Array, gamma: &Array, beta: &Array) -> kiln::Result<Array> {
    let m = x.try_mean(Some(&[-1]), true)?;
    let d = x.try_sub(&m)?;
    let v = d.try_square()?.try_mean(Some(&[-1]), true)?;
    d.try_mul(&v.try_add(LAYER_NORM_EPS)?.try_rsqrt()?)?
        .try_mul(gamma)?
        .try_add(beta)
}

impl NetworkUnit {
    /// The unit of `spec`'s `network_unit`, for an input of `input_dim` and `num_actions`
    /// actions (a component with one action has no logits), with dropout defaults from
    /// `grid` (`dropout_rate` and `recurrent_dropout_rate` are keep probabilities).
    ///
    /// ```
    /// use kiln_dragnn::{network::NetworkUnit, spec::{ComponentSpec, GridPoint}};
    /// let spec = ComponentSpec::from_text("name: 'x' network_unit { registered_name: 'Conv2DNetwork' }")?;
    /// let e = NetworkUnit::from_spec(&spec, 4, 2, &GridPoint::default()).unwrap_err();
    /// assert!(e.to_string().contains("Conv2DNetwork"), "{e}");
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn from_spec(
        spec: &ComponentSpec,
        input_dim: usize,
        num_actions: usize,
        grid: &GridPoint,
    ) -> Result<NetworkUnit, NetworkError> {
        let name = spec
            .network_unit
            .as_ref()
            .map(|u| u.registered_name().to_string())
            .unwrap_or_default();
        let short = name.rsplit('.').next().unwrap_or(&name).to_string();
        let actions = (num_actions > 1).then_some(num_actions);
        let grid_keep = grid.dropout_rate();
        let grid_recurrent = if grid.recurrent_dropout_rate() < 0.0 {
            grid_keep
        } else {
            grid.recurrent_dropout_rate()
        };
        let bad = |message: String| NetworkError::BadUnit {
            component: spec.name().to_string(),
            unit: name.clone(),
            message,
        };
        let omit = flag(spec, "omit_logits", &name)?;
        let actions = if omit { None } else { actions };
        match short.as_str() {
            "IdentityNetwork" => Ok(NetworkUnit::Identity { input_dim }),
            "FeedForwardNetwork" => {
                let nl = param::<String>(spec, "nonlinearity", &name)?.unwrap_or("relu".into());
                Ok(NetworkUnit::FeedForward(FeedForward {
                    input_dim,
                    hidden: hidden_sizes(spec, &name)?,
                    num_actions: actions,
                    layer_norm_input: flag(spec, "layer_norm_input", &name)?,
                    layer_norm_hidden: flag(spec, "layer_norm_hidden", &name)?,
                    nonlinearity: Nonlinearity::parse(&nl).ok_or_else(|| {
                        bad(format!(
                            "nonlinearity {nl:?} is not one of relu, tanh, elu, sigmoid, identity"
                        ))
                    })?,
                    keep: keep_prob(spec, "dropout_keep_prob", &name, grid_keep)?,
                    dropout_all_layers: flag(spec, "dropout_all_layers", &name)?,
                }))
            }
            "LSTMNetwork" | "LayerNormBasicLSTMNetwork" => {
                let hidden = hidden_sizes(spec, &name)?;
                let [h] = hidden[..] else {
                    return Err(bad(format!(
                        "an LSTM needs exactly one hidden size in hidden_layer_sizes, not {hidden:?}"
                    )));
                };
                let input_keep = keep_prob(spec, "input_dropout_rate", &name, grid_keep)?;
                let recurrent_keep =
                    keep_prob(spec, "recurrent_dropout_rate", &name, grid_recurrent)?;
                Ok(if short == "LSTMNetwork" {
                    NetworkUnit::Lstm(Lstm {
                        input_dim,
                        hidden: h,
                        num_actions: actions,
                        input_keep,
                        recurrent_keep,
                    })
                } else {
                    NetworkUnit::LayerNormLstm(LayerNormLstm {
                        input_dim,
                        hidden: h,
                        num_actions: actions,
                        input_keep,
                        recurrent_keep,
                    })
                })
            }
            _ => Err(bad(format!(
                "unknown network unit {name:?}; kiln-dragnn has IdentityNetwork, \
                 FeedForwardNetwork, LSTMNetwork and LayerNormBasicLSTMNetwork"
            ))),
        }
    }

    /// The layers the unit computes, `(name, width)`, in order.
    ///
    /// ```
    /// let unit = kiln_dragnn::network::NetworkUnit::Identity { input_dim: 4 };
    /// assert_eq!(unit.layers(), [("input_embeddings".to_string(), 4)]);
    /// ```
    pub fn layers(&self) -> Vec<(String, usize)> {
        let mut out = Vec::new();
        let logits = |out: &mut Vec<(String, usize)>, a: Option<usize>| {
            if let Some(a) = a {
                out.push(("logits".to_string(), a));
            }
        };
        match self {
            NetworkUnit::Identity { input_dim } => {
                out.push(("input_embeddings".to_string(), *input_dim))
            }
            NetworkUnit::FeedForward(f) => {
                for (i, h) in f.hidden.iter().enumerate() {
                    out.push((format!("layer_{i}"), *h));
                }
                out.push((
                    "last_layer".to_string(),
                    f.hidden.last().copied().unwrap_or(f.input_dim),
                ));
                logits(&mut out, f.num_actions);
            }
            NetworkUnit::Lstm(l) => {
                for n in ["lstm_h", "lstm_c", "layer_0", "last_layer"] {
                    out.push((n.to_string(), l.hidden));
                }
                logits(&mut out, l.num_actions);
            }
            NetworkUnit::LayerNormLstm(l) => {
                for n in ["state_h_0", "state_c_0", "layer_0", "last_layer"] {
                    out.push((n.to_string(), l.hidden));
                }
                logits(&mut out, l.num_actions);
            }
        }
        out
    }

    /// The width of layer `name`, if the unit has it.
    ///
    /// ```
    /// let unit = kiln_dragnn::network::NetworkUnit::Identity { input_dim: 4 };
    /// assert_eq!(unit.layer_dim("input_embeddings"), Some(4));
    /// ```
    pub fn layer_dim(&self, name: &str) -> Option<usize> {
        self.layers()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d)
    }

    /// Whether the unit carries a state from step to step (the LSTMs).
    ///
    /// ```
    /// assert!(!kiln_dragnn::network::NetworkUnit::Identity { input_dim: 1 }.is_recurrent());
    /// ```
    pub fn is_recurrent(&self) -> bool {
        matches!(self, NetworkUnit::Lstm(_) | NetworkUnit::LayerNormLstm(_))
    }

    /// The number of actions the unit scores (`None`: no logits).
    ///
    /// ```
    /// assert_eq!(kiln_dragnn::network::NetworkUnit::Identity { input_dim: 1 }.num_actions(), None);
    /// ```
    pub fn num_actions(&self) -> Option<usize> {
        match self {
            NetworkUnit::Identity { .. } => None,
            NetworkUnit::FeedForward(f) => f.num_actions,
            NetworkUnit::Lstm(l) => l.num_actions,
            NetworkUnit::LayerNormLstm(l) => l.num_actions,
        }
    }

    /// The unit without its softmax layer: the same layers but `logits` (see
    /// [`NetworkUnit::logits`], which computes them from `last_layer` afterwards).
    pub(crate) fn without_logits(&self) -> NetworkUnit {
        let mut unit = self.clone();
        match &mut unit {
            NetworkUnit::Identity { .. } => {}
            NetworkUnit::FeedForward(f) => f.num_actions = None,
            NetworkUnit::Lstm(l) => l.num_actions = None,
            NetworkUnit::LayerNormLstm(l) => l.num_actions = None,
        }
        unit
    }

    /// The logits of `last` (rows of the unit's `last_layer`), `None` when the unit has no
    /// softmax layer: what [`NetworkUnit::forward`] computes per step, for many steps at once.
    pub(crate) fn logits(
        &self,
        store: &ParamStore,
        prefix: &str,
        last: &Array,
    ) -> Result<Option<Array>, NetworkError> {
        if self.num_actions().is_none() {
            return Ok(None);
        }
        let v = |s: &str| store.value(&format!("{prefix}/{s}"));
        Ok(Some(affine(
            last,
            &v("weights_softmax")?,
            Some(&v("bias_softmax")?),
        )?))
    }

    /// The hidden width of a recurrent unit.
    fn state_dim(&self) -> Option<usize> {
        match self {
            NetworkUnit::Lstm(l) => Some(l.hidden),
            NetworkUnit::LayerNormLstm(l) => Some(l.hidden),
            _ => None,
        }
    }

    /// The zero state of a recurrent unit for `rows` rows (`None` for the others).
    ///
    /// ```
    /// use kiln_dragnn::network::NetworkUnit;
    /// assert!(NetworkUnit::Identity { input_dim: 1 }.initial_state(3, kiln::DType::F32)?.is_none());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn initial_state(&self, rows: usize, dtype: DType) -> kiln::Result<Option<LstmState>> {
        self.state_dim()
            .map(|h| LstmState::zeros(rows, h, dtype))
            .transpose()
    }

    /// Creates the unit's parameters under `prefix` (those already in the store are kept,
    /// and must have the right shapes).
    ///
    /// ```
    /// use kiln_dragnn::network::{NetworkUnit, ParamStore};
    /// let mut store = ParamStore::new(0, kiln::DType::F32);
    /// NetworkUnit::Identity { input_dim: 3 }.create_params(&mut store, "x")?;
    /// assert!(store.is_empty());
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn create_params(&self, store: &mut ParamStore, prefix: &str) -> Result<(), NetworkError> {
        let n = |s: &str| format!("{prefix}/{s}");
        let w = Init::Normal(WEIGHT_STD);
        let softmax =
            |store: &mut ParamStore, last: usize, a: Option<usize>| -> Result<(), NetworkError> {
                if let Some(a) = a {
                    store.get_or_create(&n("weights_softmax"), &[last, a], w, false)?;
                    store.get_or_create(&n("bias_softmax"), &[a], Init::Constant(0.0), false)?;
                }
                Ok(())
            };
        match self {
            NetworkUnit::Identity { .. } => {}
            NetworkUnit::FeedForward(f) => {
                if f.layer_norm_input {
                    store.get_or_create(
                        &n("layer_norm_input/gamma"),
                        &[f.input_dim],
                        Init::Constant(1.0),
                        false,
                    )?;
                    store.get_or_create(
                        &n("layer_norm_input/beta"),
                        &[f.input_dim],
                        Init::Constant(0.0),
                        false,
                    )?;
                }
                let mut last = f.input_dim;
                for (i, &h) in f.hidden.iter().enumerate() {
                    store.get_or_create(&n(&format!("weights_{i}")), &[last, h], w, true)?;
                    if i == 0 && f.layer_norm_hidden {
                        store.get_or_create(
                            &n("layer_norm_0/gamma"),
                            &[h],
                            Init::Constant(1.0),
                            false,
                        )?;
                        store.get_or_create(
                            &n("layer_norm_0/beta"),
                            &[h],
                            Init::Constant(0.0),
                            false,
                        )?;
                    } else {
                        store.get_or_create(
                            &n(&format!("bias_{i}")),
                            &[h],
                            Init::Constant(HIDDEN_BIAS),
                            false,
                        )?;
                    }
                    last = h;
                }
                softmax(store, last, f.num_actions)?;
            }
            NetworkUnit::Lstm(l) => {
                let h = l.hidden;
                store.get_or_create(&n("x2ico"), &[l.input_dim, 3 * h], w, true)?;
                store.get_or_create(&n("h2ico"), &[h, 3 * h], w, true)?;
                store.get_or_create(&n("c2i"), &[h, h], w, true)?;
                store.get_or_create(&n("c2o"), &[h, h], w, true)?;
                store.get_or_create(&n("bico"), &[3 * h], Init::Constant(0.0), false)?;
                softmax(store, h, l.num_actions)?;
            }
            NetworkUnit::LayerNormLstm(l) => {
                let h = l.hidden;
                store.get_or_create(&n("x2h"), &[l.input_dim, 4 * h], w, true)?;
                store.get_or_create(&n("h2h"), &[h, 4 * h], w, true)?;
                store.get_or_create(&n("gates/gamma"), &[4, h], Init::Constant(1.0), false)?;
                store.get_or_create(&n("gates/beta"), &[4, h], Init::Constant(0.0), false)?;
                store.get_or_create(&n("state/gamma"), &[h], Init::Constant(1.0), false)?;
                store.get_or_create(&n("state/beta"), &[h], Init::Constant(0.0), false)?;
                softmax(store, h, l.num_actions)?;
            }
        }
        Ok(())
    }

    /// The part of a step that does not depend on the previous step, for any number of
    /// rows at once: input dropout and, for the LSTMs, the input times its weights.
    /// Identity and FeedForward units return the (dropped-out) input.
    ///
    /// ```
    /// use kiln_dragnn::network::{Lstm, NetworkUnit, ParamStore};
    /// let unit = NetworkUnit::Lstm(Lstm { input_dim: 2, hidden: 3, num_actions: None, input_keep: 1.0, recurrent_keep: 1.0 });
    /// let mut store = ParamStore::new(0, kiln::DType::F32);
    /// unit.create_params(&mut store, "l")?;
    /// let z = unit.project_input(&store, "l", &kiln::Array::ones(&[5, 2], kiln::DType::F32), None)?;
    /// assert_eq!(z.shape(), &[5, 9]);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn project_input(
        &self,
        store: &ParamStore,
        prefix: &str,
        x: &Array,
        dropout: Option<&mut DropoutSeeds>,
    ) -> Result<Array, NetworkError> {
        let v = |s: &str| store.value(&format!("{prefix}/{s}"));
        let (keep, weights) = match self {
            NetworkUnit::Identity { .. } => (1.0, None),
            NetworkUnit::FeedForward(f) => (f.keep, None),
            NetworkUnit::Lstm(l) => (l.input_keep, Some(v("x2ico")?)),
            NetworkUnit::LayerNormLstm(l) => (l.input_keep, Some(v("x2h")?)),
        };
        let x = match dropout {
            Some(d) => d.apply(x, keep)?,
            None => x.clone(),
        };
        Ok(match weights {
            Some(w) => x.try_matmul(&w)?,
            None => x,
        })
    }

    /// One step of the unit on `input` (from [`NetworkUnit::project_input`]) and, for the
    /// LSTMs, the previous `state` (zeros when `None`): the layers and the new state.
    /// `dropout` is `Some` during training.
    pub fn forward(
        &self,
        store: &ParamStore,
        prefix: &str,
        input: &Array,
        state: Option<&LstmState>,
        mut dropout: Option<&mut DropoutSeeds>,
    ) -> Result<(Layers, Option<LstmState>), NetworkError> {
        let v = |s: &str| store.value(&format!("{prefix}/{s}"));
        let mut layers = Layers::default();
        let rows = input.shape()[0];
        let logits =
            |layers: &mut Layers, last: &Array, a: Option<usize>| -> Result<(), NetworkError> {
                if a.is_some() {
                    let l = affine(last, &v("weights_softmax")?, Some(&v("bias_softmax")?))?;
                    layers.push("logits", l);
                }
                Ok(())
            };
        match self {
            NetworkUnit::Identity { .. } => {
                layers.push("input_embeddings", input.clone());
                Ok((layers, None))
            }
            NetworkUnit::FeedForward(f) => {
                let mut x = input.clone();
                if f.layer_norm_input {
                    x = layer_norm(
                        &x,
                        &v("layer_norm_input/gamma")?,
                        &v("layer_norm_input/beta")?,
                    )?;
                }
                if f.hidden.is_empty() {
                    layers.push("last_layer", x.clone());
                    logits(&mut layers, &x, f.num_actions)?;
                    return Ok((layers, None));
                }
                let xw0 = x.try_matmul(&v("weights_0")?)?;
                Ok((
                    self.forward_from_first_matmul(store, prefix, &xw0, dropout)?,
                    None,
                ))
            }
            NetworkUnit::Lstm(l) => {
                let h = l.hidden;
                let mut zero = None;
                let state = or_zeros(state, &mut zero, rows, h, store.dtype())?;
                let h_prev = match dropout.as_deref_mut() {
                    Some(d) => d.apply(&state.h, l.recurrent_keep)?,
                    None => state.h.clone(),
                };
                let z = input
                    .try_add(&h_prev.try_matmul(&v("h2ico")?)?)?
                    .try_add(&v("bico")?)?;
                let zi = z.try_slice(kiln::s![.., 0..h])?;
                let zc = z.try_slice(kiln::s![.., h..2 * h])?;
                let zo = z.try_slice(kiln::s![.., 2 * h..3 * h])?;
                let i = zi
                    .try_add(&state.c.try_matmul(&v("c2i")?)?)?
                    .try_sigmoid()?;
                let c_tilde = zc.try_tanh()?;
                // c' = (1 - i) c + i c~ = c + i (c~ - c)
                let c = state.c.try_add(&i.try_mul(&c_tilde.try_sub(&state.c)?)?)?;
                let o = zo.try_add(&c.try_matmul(&v("c2o")?)?)?.try_sigmoid()?;
                let h_new = o.try_mul(&c.try_tanh()?)?;
                layers.push("lstm_h", h_new.clone());
                layers.push("lstm_c", c.clone());
                layers.push("layer_0", h_new.clone());
                layers.push("last_layer", h_new.clone());
                logits(&mut layers, &h_new, l.num_actions)?;
                Ok((layers, Some(LstmState { h: h_new, c })))
            }
            NetworkUnit::LayerNormLstm(l) => {
                let h = l.hidden;
                let mut zero = None;
                let state = or_zeros(state, &mut zero, rows, h, store.dtype())?;
                let z = input
                    .try_add(&state.h.try_matmul(&v("h2h")?)?)?
                    .reshape_to(&[rows, 4, h])?;
                let z = layer_norm(&z, &v("gates/gamma")?, &v("gates/beta")?)?;
                let gate = |k: usize| -> kiln::Result<Array> { z.try_slice(kiln::s![.., k]) };
                let (gi, gj, gf, go) = (gate(0)?, gate(1)?, gate(2)?, gate(3)?);
                let mut j = gj.try_tanh()?;
                if let Some(d) = dropout {
                    j = d.apply(&j, l.recurrent_keep)?;
                }
                let c = state
                    .c
                    .try_mul(&gf.try_add(1.0)?.try_sigmoid()?)?
                    .try_add(&gi.try_sigmoid()?.try_mul(&j)?)?;
                let c = layer_norm(&c, &v("state/gamma")?, &v("state/beta")?)?;
                let h_new = c.try_tanh()?.try_mul(&go.try_sigmoid()?)?;
                layers.push("state_h_0", h_new.clone());
                layers.push("state_c_0", c.clone());
                layers.push("layer_0", h_new.clone());
                layers.push("last_layer", h_new.clone());
                logits(&mut layers, &h_new, l.num_actions)?;
                Ok((layers, Some(LstmState { h: h_new, c })))
            }
        }
    }

    /// Whether the unit is a FeedForwardNetwork whose first layer's product `x · W0` can be
    /// split over the input's columns (it has hidden layers and no input layer norm): then
    /// the columns that do not depend on earlier steps can be multiplied for every step at
    /// once, and only the recurrent ones step by step
    /// ([`NetworkUnit::forward_from_first_matmul`]).
    ///
    /// ```
    /// assert!(!kiln_dragnn::network::NetworkUnit::Identity { input_dim: 1 }.splits_first_layer());
    /// ```
    pub fn splits_first_layer(&self) -> bool {
        matches!(self, NetworkUnit::FeedForward(f) if !f.hidden.is_empty() && !f.layer_norm_input)
    }

    /// A FeedForwardNetwork's layers from its first layer's product `xw0 = x · W0` (before
    /// the bias or layer norm); see [`NetworkUnit::splits_first_layer`].
    /// Other units are an error.
    ///
    /// ```
    /// use kiln_dragnn::network::{FeedForward, NetworkUnit, Nonlinearity, ParamStore};
    /// let unit = NetworkUnit::FeedForward(FeedForward {
    ///     input_dim: 2, hidden: vec![3], num_actions: Some(2), layer_norm_input: false,
    ///     layer_norm_hidden: false, nonlinearity: Nonlinearity::Relu, keep: 1.0, dropout_all_layers: false,
    /// });
    /// let mut store = ParamStore::new(0, kiln::DType::F64);
    /// unit.create_params(&mut store, "f")?;
    /// let x = kiln::Array::ones(&[4, 2], kiln::DType::F64);
    /// let (whole, _) = unit.forward(&store, "f", &x, None, None)?;
    /// let xw0 = x.matmul(&store.value("f/weights_0")?);
    /// let split = unit.forward_from_first_matmul(&store, "f", &xw0, None)?;
    /// assert_eq!(whole.get("logits").unwrap().to_vec::<f64>()?, split.get("logits").unwrap().to_vec::<f64>()?);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn forward_from_first_matmul(
        &self,
        store: &ParamStore,
        prefix: &str,
        xw0: &Array,
        mut dropout: Option<&mut DropoutSeeds>,
    ) -> Result<Layers, NetworkError> {
        let NetworkUnit::FeedForward(f) = self else {
            return Err(NetworkError::BadUnit {
                component: prefix.to_string(),
                unit: "FeedForwardNetwork".into(),
                message: "forward_from_first_matmul needs a FeedForwardNetwork".into(),
            });
        };
        let v = |s: &str| store.value(&format!("{prefix}/{s}"));
        let mut layers = Layers::default();
        let mut x = xw0.clone();
        for i in 0..f.hidden.len() {
            let pre = if i == 0 {
                if f.layer_norm_hidden {
                    layer_norm(xw0, &v("layer_norm_0/gamma")?, &v("layer_norm_0/beta")?)?
                } else {
                    xw0.try_add(&v("bias_0")?)?
                }
            } else {
                if f.dropout_all_layers {
                    if let Some(d) = dropout.as_deref_mut() {
                        x = d.apply(&x, f.keep)?;
                    }
                }
                affine(
                    &x,
                    &v(&format!("weights_{i}"))?,
                    Some(&v(&format!("bias_{i}"))?),
                )?
            };
            x = f.nonlinearity.apply(&pre)?;
            layers.push(&format!("layer_{i}"), x.clone());
        }
        layers.push("last_layer", x.clone());
        if f.num_actions.is_some() {
            let l = affine(&x, &v("weights_softmax")?, Some(&v("bias_softmax")?))?;
            layers.push("logits", l);
        }
        Ok(layers)
    }

    /// The parameters of the unit under `prefix` that the L2 regulariser covers.
    ///
    /// ```
    /// use kiln_dragnn::network::NetworkUnit;
    /// assert!(NetworkUnit::Identity { input_dim: 1 }.regularized("x").is_empty());
    /// ```
    pub fn regularized(&self, prefix: &str) -> Vec<String> {
        let n = |s: &str| format!("{prefix}/{s}");
        match self {
            NetworkUnit::Identity { .. } => Vec::new(),
            NetworkUnit::FeedForward(f) => (0..f.hidden.len())
                .map(|i| n(&format!("weights_{i}")))
                .collect(),
            NetworkUnit::Lstm(_) => vec![n("x2ico"), n("h2ico"), n("c2i"), n("c2o")],
            NetworkUnit::LayerNormLstm(_) => vec![n("x2h"), n("h2h")],
        }
    }
}
