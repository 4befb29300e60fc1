//! The [`Model`] trait (TF's `model_fn`), the [`Context`] a model function builds its graph
//! in, variable creation by name ([`Init`]), and the store of variables ([`Variables`]) an
//! estimator keeps between calls.
//!
//! A variable is created on the first call that asks for it, from the run's seed and its
//! name alone (so creation order and thread count never change a value), or from a
//! checkpoint or warm-start file when one is pending; later calls get the same parameter.
//!
//! Depends on kiln and kiln-optim's public APIs, `crate::spec`, `crate::batch`,
//! `crate::error`.

use crate::{Batch, Error, Mode, Result, Spec};
use kiln::{Array, DType};
use kiln_optim::Parameter;
use std::collections::HashMap;
use std::sync::Arc;

/// A model: its function from a batch to a [`Spec`] (TF's `model_fn(features, labels, mode,
/// params)`; `params` is `self`).
///
/// The function only builds lazy expressions; the estimator evaluates them. It asks the
/// [`Context`] for its variables by name, so the first call creates them and every later
/// call (any mode, any replica) gets the same ones.
///
/// ```
/// use kiln_train::{Context, Init, Mode, Model, Spec};
/// struct Linear;
/// impl Model for Linear {
///     type Features = kiln::Array;
///     type Labels = kiln::Array;
///     fn model_fn(&self, x: &kiln::Array, y: Option<&kiln::Array>, mode: Mode, cx: &mut Context<'_>)
///         -> kiln_train::Result<Spec> {
///         let w = cx.variable("w", &[2, 1], kiln::DType::F32, Init::Zeros)?;
///         let pred = x.try_matmul(&w)?;
///         let mut spec = Spec::new().prediction("y", &pred);
///         if let Some(y) = y {
///             spec = spec.loss(&(&pred - y).square().mean(None, false));
///         }
///         if mode == Mode::Train {
///             spec = spec.optimizer(kiln_optim::Sgd::new(0.1));
///         }
///         Ok(spec)
///     }
/// }
/// ```
pub trait Model: Send + Sync {
    /// One batch's features.
    type Features: Batch;
    /// One batch's labels (`()` for none).
    type Labels: Batch;

    /// Builds the graph for one batch: `labels` is `None` when predicting.
    ///
    /// ```
    /// use kiln_train::{demo, Context, Mode, Model, Variables};
    /// let mlp = demo::Mlp::new(&[2, 3]);
    /// let mut vars = Variables::new(0);
    /// let x = kiln::Array::zeros(&[4, 2], kiln::DType::F32);
    /// let mut cx = Context::new(&mut vars, Mode::Predict, 0, 0);
    /// let spec = mlp.model_fn(&x, None, Mode::Predict, &mut cx)?;
    /// assert!(spec.loss.is_none() && spec.optimizer.is_none());
    /// assert_eq!(spec.predictions[0].1.shape(), &[4, 3]); // the logits
    /// assert_eq!(vars.len(), 2); // the call created dense_0/w and dense_0/b
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    fn model_fn(
        &self,
        features: &Self::Features,
        labels: Option<&Self::Labels>,
        mode: Mode,
        cx: &mut Context<'_>,
    ) -> Result<Spec>;
}

/// How a variable gets its first value (when no checkpoint or warm start supplies one).
/// Random ones are seeded by the run's seed and the variable's name.
///
/// ```
/// let i = kiln_train::Init::Uniform { low: -0.1, high: 0.1 };
/// assert!(matches!(i, kiln_train::Init::Uniform { .. }));
/// ```
#[derive(Clone, Debug)]
pub enum Init {
    /// All zeros.
    Zeros,
    /// All ones.
    Ones,
    /// One value everywhere.
    Constant(f64),
    /// Uniform on `[low, high)`.
    Uniform {
        /// The lower bound.
        low: f64,
        /// The upper bound.
        high: f64,
    },
    /// Normal with this mean and standard deviation.
    Normal {
        /// The mean.
        mean: f64,
        /// The standard deviation.
        std: f64,
    },
    /// Glorot (Xavier) uniform: `±sqrt(6 / (fan_in + fan_out))`, the fans from the last two
    /// axes (one axis: both its length).
    GlorotUniform,
    /// This array (of the variable's dtype and shape).
    Value(Array),
}

/// The estimator's variables: parameters by name, in creation order, and what initialises
/// the next one created (the run's seed, a pending checkpoint, a warm-start file).
///
/// ```
/// let vars = kiln_train::Variables::new(7);
/// assert!(vars.is_empty());
/// ```
#[derive(Debug, Default)]
pub struct Variables {
    params: Vec<Arc<Parameter>>,
    index: HashMap<String, usize>,
    seed: u64,
    /// Values a variable must start from when created: a checkpoint being resumed.
    restore: Option<Pending>,
    /// Values a variable starts from when the warm-start file has it.
    warm: Option<Pending>,
}

/// Tensors by name, waiting for their variables to be created.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) source: String,
    pub(crate) tensors: HashMap<String, Array>,
}

impl Variables {
    /// An empty store whose random initialisers derive from `seed`.
    ///
    /// ```
    /// use kiln_train::{Init, Variables};
    /// let normal = Init::Normal { mean: 0.0, std: 1.0 };
    /// let (mut a, mut b) = (Variables::new(7), Variables::new(7));
    /// let wa = a.variable("w", &[3], kiln::DType::F32, &normal)?;
    /// let wb = b.variable("w", &[3], kiln::DType::F32, &normal)?;
    /// assert_eq!(wa.value().to_vec::<f32>()?, wb.value().to_vec::<f32>()?); // same seed and name
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn new(seed: u64) -> Variables {
        Variables {
            seed,
            ..Variables::default()
        }
    }

    /// The number of variables.
    ///
    /// ```
    /// use kiln_train::{Init, Variables};
    /// let mut vars = Variables::new(0);
    /// vars.variable("w", &[2], kiln::DType::F32, &Init::Zeros)?;
    /// vars.variable("w", &[2], kiln::DType::F32, &Init::Zeros)?; // the same one again
    /// assert_eq!(vars.len(), 1);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.params.len()
    }

    /// Whether none has been created.
    ///
    /// ```
    /// use kiln_train::{Init, Variables};
    /// let mut vars = Variables::new(0);
    /// vars.variable("b", &[1], kiln::DType::F64, &Init::Zeros)?;
    /// assert!(!vars.is_empty());
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    /// The variables in creation order.
    ///
    /// ```
    /// use kiln_train::{Init, Variables};
    /// let mut vars = Variables::new(0);
    /// vars.variable("w", &[2, 2], kiln::DType::F32, &Init::GlorotUniform)?;
    /// vars.variable("b", &[2], kiln::DType::F32, &Init::Zeros)?;
    /// let names: Vec<&str> = vars.parameters().iter().map(|p| p.name()).collect();
    /// assert_eq!(names, ["w", "b"]);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn parameters(&self) -> &[Arc<Parameter>] {
        &self.params
    }

    /// The variable of this name.
    ///
    /// ```
    /// use kiln_train::{Init, Variables};
    /// let mut vars = Variables::new(0);
    /// vars.variable("b", &[2], kiln::DType::F32, &Init::Constant(0.5))?;
    /// assert_eq!(vars.get("b").unwrap().value().to_vec::<f32>()?, vec![0.5, 0.5]);
    /// assert!(vars.get("w").is_none());
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn get(&self, name: &str) -> Option<&Arc<Parameter>> {
        self.index.get(name).map(|&i| &self.params[i])
    }

    pub(crate) fn set_restore(&mut self, pending: Option<Pending>) {
        self.restore = pending;
    }

    pub(crate) fn set_warm(&mut self, pending: Option<Pending>) {
        self.warm = pending;
    }

    /// The variable `name`, created with `init` if new; an existing one must have this dtype
    /// and shape.
    ///
    /// ```
    /// use kiln::DType;
    /// use kiln_train::{Init, Variables};
    /// let mut vars = Variables::new(0);
    /// let w = vars.variable("w", &[3], DType::F32, &Init::Ones)?;
    /// assert_eq!(w.shape(), &[3]);
    /// assert!(vars.variable("w", &[4], DType::F32, &Init::Ones).is_err()); // one name, one variable
    /// assert!(vars.variable("n", &[1], DType::I64, &Init::Zeros).is_err()); // floats only
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn variable(
        &mut self,
        name: &str,
        shape: &[usize],
        dtype: DType,
        init: &Init,
    ) -> Result<Arc<Parameter>> {
        const OP: &str = "Context::variable";
        if let Some(p) = self.get(name) {
            if p.dtype() != dtype || p.shape() != shape {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "variable {name:?} exists as {:?} of shape {:?}, and was asked for as \
                         {dtype:?} of shape {shape:?}: one name, one variable; rename one of them",
                        p.dtype(),
                        p.shape()
                    ),
                ));
            }
            return Ok(p.clone());
        }
        if name.is_empty() || name.starts_with(kiln_optim::OPTIMIZER_PREFIX) {
            return Err(Error::invalid(
                OP,
                format!(
                    "the name {name:?} is empty or starts with {:?}, which checkpoints keep for \
                     the optimizer's state: pick another",
                    kiln_optim::OPTIMIZER_PREFIX
                ),
            ));
        }
        if !dtype.is_float() {
            return Err(Error::invalid(
                OP,
                format!("variable {name:?} asked for as {dtype:?}: variables are f32 or f64"),
            ));
        }
        let value = if let Some(pending) = &self.restore {
            pending_value(OP, pending, name, dtype, shape)?
        } else if let Some(v) = self
            .warm
            .as_ref()
            .and_then(|w| w.tensors.get(name).map(|v| (w, v)))
        {
            let (w, v) = v;
            if v.dtype() != dtype || v.shape() != shape {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "the warm-start file {} holds {name:?} as {:?} of shape {:?}, and the \
                         model asks for {dtype:?} of shape {shape:?}: warm-start only matching \
                         variables",
                        w.source,
                        v.dtype(),
                        v.shape()
                    ),
                ));
            }
            v.clone()
        } else {
            initial(
                name,
                shape,
                dtype,
                init,
                derive_seed(self.seed, &[hash_str(name)]),
            )?
        };
        let p = Arc::new(Parameter::new(name, value));
        self.index.insert(name.to_string(), self.params.len());
        self.params.push(p.clone());
        Ok(p)
    }
}

fn pending_value(
    op: &'static str,
    pending: &Pending,
    name: &str,
    dtype: DType,
    shape: &[usize],
) -> Result<Array> {
    let Some(v) = pending.tensors.get(name) else {
        let mut names: Vec<&String> = pending.tensors.keys().collect();
        names.sort();
        return Err(Error::checkpoint(
            op,
            &pending.source,
            format!(
                "it has no variable {name:?} (it holds {names:?}): it was saved by another \
                 model; point model_dir at a fresh directory, or warm-start from it instead"
            ),
        ));
    };
    if v.dtype() != dtype || v.shape() != shape {
        return Err(Error::checkpoint(
            op,
            &pending.source,
            format!(
                "it holds {name:?} as {:?} of shape {:?}, and the model asks for {dtype:?} of \
                 shape {shape:?}: it was saved by another model",
                v.dtype(),
                v.shape()
            ),
        ));
    }
    Ok(v.clone())
}

fn initial(name: &str, shape: &[usize], dtype: DType, init: &Init, seed: u64) -> Result<Array> {
    let value = match init {
        Init::Zeros => Array::try_zeros(shape, dtype)?,
        Init::Ones => Array::try_ones(shape, dtype)?,
        Init::Constant(c) => Array::try_full(shape, *c, dtype)?,
        Init::Uniform { low, high } => Array::uniform(shape, *low, *high, seed, dtype)?,
        Init::Normal { mean, std } => Array::normal(shape, *mean, *std, seed, dtype)?,
        Init::GlorotUniform => {
            let (fan_in, fan_out) = match shape {
                [] => (1, 1),
                [n] => (*n, *n),
                [.., a, b] => (*a, *b),
            };
            let limit = (6.0 / (fan_in + fan_out).max(1) as f64).sqrt();
            Array::uniform(shape, -limit, limit, seed, dtype)?
        }
        Init::Value(v) => {
            if v.dtype() != dtype || v.shape() != shape {
                return Err(Error::invalid(
                    "Context::variable",
                    format!(
                        "variable {name:?} is {dtype:?} of shape {shape:?}, and its Init::Value \
                         is {:?} of shape {:?}",
                        v.dtype(),
                        v.shape()
                    ),
                ));
            }
            v.clone()
        }
    };
    // evaluated now, so the first value is data that later graphs read, never recompute
    value.eval()?;
    Ok(value)
}

/// Where a model function builds its graph: the mode, the global step, seeds, and the
/// variables.
///
/// ```
/// use kiln_train::{Context, Init, Mode, Variables};
/// let mut vars = Variables::new(1);
/// let mut cx = Context::new(&mut vars, Mode::Train, 0, 0);
/// let w = cx.variable("w", &[3], kiln::DType::F32, Init::Ones)?;
/// assert_eq!(w.to_vec::<f32>()?, vec![1.0; 3]);
/// assert_ne!(cx.seed("dropout"), cx.seed("noise"));
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub struct Context<'a> {
    variables: &'a mut Variables,
    mode: Mode,
    global_step: u64,
    micro_batch: usize,
    used: Vec<(Arc<Parameter>, Array)>,
}

impl<'a> Context<'a> {
    /// A context for one call: `global_step` is the step being built (0 before the first
    /// update), `micro_batch` the index of the micro-batch within the global batch.
    ///
    /// ```
    /// use kiln_train::{Context, Mode, Variables};
    /// let mut vars = Variables::new(3);
    /// let cx = Context::new(&mut vars, Mode::Eval, 10, 2);
    /// assert_eq!((cx.mode(), cx.global_step(), cx.micro_batch()), (Mode::Eval, 10, 2));
    /// ```
    pub fn new(
        variables: &'a mut Variables,
        mode: Mode,
        global_step: u64,
        micro_batch: usize,
    ) -> Context<'a> {
        Context {
            variables,
            mode,
            global_step,
            micro_batch,
            used: Vec::new(),
        }
    }

    /// The mode being built.
    ///
    /// ```
    /// use kiln_train::{Context, Mode, Variables};
    /// let mut vars = Variables::new(0);
    /// assert_eq!(Context::new(&mut vars, Mode::Predict, 0, 0).mode(), Mode::Predict);
    /// ```
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether this is a training step (for dropout and the like).
    ///
    /// ```
    /// use kiln_train::{Context, Mode, Variables};
    /// let mut vars = Variables::new(0);
    /// assert!(Context::new(&mut vars, Mode::Train, 0, 0).is_training());
    /// assert!(!Context::new(&mut vars, Mode::Eval, 0, 0).is_training());
    /// ```
    pub fn is_training(&self) -> bool {
        self.mode == Mode::Train
    }

    /// The global step: how many updates came before this one.
    ///
    /// ```
    /// use kiln_train::{Context, Mode, Variables};
    /// let mut vars = Variables::new(0);
    /// let cx = Context::new(&mut vars, Mode::Train, 41, 0);
    /// let decays = cx.global_step() / 20; // e.g. for a decaying learning rate
    /// assert_eq!(decays, 2);
    /// ```
    pub fn global_step(&self) -> u64 {
        self.global_step
    }

    /// The index of this micro-batch within its global batch (0 without micro-batches).
    ///
    /// ```
    /// use kiln_train::{Context, Mode, Variables};
    /// let mut vars = Variables::new(0);
    /// assert_eq!(Context::new(&mut vars, Mode::Train, 0, 3).micro_batch(), 3);
    /// ```
    pub fn micro_batch(&self) -> usize {
        self.micro_batch
    }

    /// A seed for randomness in this call (dropout, noise): a function of the run's seed,
    /// the global step, the micro-batch and `tag` only — so a resumed run, and any number of
    /// replicas, draw the same numbers.
    ///
    /// ```
    /// use kiln_train::{Context, Mode, Variables};
    /// let (mut a, mut b) = (Variables::new(1), Variables::new(1));
    /// let s = Context::new(&mut a, Mode::Train, 5, 0).seed("dropout");
    /// assert_eq!(s, Context::new(&mut b, Mode::Train, 5, 0).seed("dropout")); // a resumed run's
    /// assert_ne!(s, Context::new(&mut b, Mode::Train, 6, 0).seed("dropout")); // the next step's
    /// assert_ne!(s, Context::new(&mut b, Mode::Train, 5, 1).seed("dropout")); // another micro-batch's
    /// ```
    pub fn seed(&self, tag: &str) -> u64 {
        derive_seed(
            self.variables.seed,
            &[
                self.global_step,
                self.micro_batch as u64,
                hash_str(tag),
                0x5eed,
            ],
        )
    }

    /// The current value of variable `name`, created with `init` on first use (see
    /// [`Init`]); the graph built from it trains the variable in [`Mode::Train`].
    ///
    /// ```
    /// use kiln_train::{Context, Init, Mode, Variables};
    /// let mut vars = Variables::new(0);
    /// let mut cx = Context::new(&mut vars, Mode::Train, 0, 0);
    /// let start = kiln::Array::from_vec(vec![0.5, -0.5], &[2])?;
    /// let b = cx.variable("b", &[2], kiln::DType::F64, Init::Value(start))?;
    /// assert_eq!(b.to_vec::<f64>()?, vec![0.5, -0.5]);
    /// assert!(cx.variable("b", &[3], kiln::DType::F64, Init::Zeros).is_err()); // one name, one variable
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn variable(
        &mut self,
        name: &str,
        shape: &[usize],
        dtype: DType,
        init: Init,
    ) -> Result<Array> {
        let p = self.variables.variable(name, shape, dtype, &init)?;
        if let Some((_, v)) = self.used.iter().find(|(q, _)| Arc::ptr_eq(q, &p)) {
            return Ok(v.clone());
        }
        let v = p.value();
        self.used.push((p, v.clone()));
        Ok(v)
    }

    /// The variables this call used, with the values its graph read, in first-use order.
    pub(crate) fn into_used(self) -> Vec<(Arc<Parameter>, Array)> {
        self.used
    }
}

/// A 64-bit hash of a string (FNV-1a), stable across runs and platforms.
pub(crate) fn hash_str(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A seed mixed from `seed` and `parts` with the SplitMix64 finaliser: well spread, and a
/// pure function of its inputs.
pub(crate) fn derive_seed(seed: u64, parts: &[u64]) -> u64 {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    parts.iter().fold(mix(seed), |h, &p| {
        mix(h ^ p.wrapping_add(0x9e37_79b9_7f4a_7c15))
    })
}

/// The trainable variables of a call: those `spec.trainable` names (every used one when
/// `None`), with the values the graph read.
pub(crate) fn trainable(
    op: &'static str,
    used: Vec<(Arc<Parameter>, Array)>,
    names: Option<&[String]>,
) -> Result<Vec<(Arc<Parameter>, Array)>> {
    let Some(names) = names else {
        return Ok(used);
    };
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        match used.iter().find(|(p, _)| p.name() == n) {
            Some(pair) => out.push(pair.clone()),
            None => {
                let known: Vec<&str> = used.iter().map(|(p, _)| p.name()).collect();
                return Err(Error::Spec {
                    op,
                    mode: Mode::Train,
                    missing: "trainable",
                    hint: format!(
                        "it names {n:?}, which this call did not use (it used {known:?}): \
                         name variables the loss depends on"
                    ),
                });
            }
        }
    }
    Ok(out)
}
