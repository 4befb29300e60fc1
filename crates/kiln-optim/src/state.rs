//! Optimizer state as data: [`OptimizerState`], what [`Optimizer::state`] exports and
//! [`Optimizer::load_state`] restores (the step count, the hyperparameters, and per
//! parameter name the slots: SGD's momentum buffer, Adam's two moments), so a run can stop
//! and resume exactly where it was.
//!
//! The state is keyed the way optimizers keep it, by parameter name: the tensor
//! `"{parameter}/{slot}"` (`"w1/exp_avg"`, `"layer.0.w/momentum_buffer"`; a parameter name
//! may itself hold `/`, the slot never does). The hyperparameters and the step count are
//! strings, so the whole state fits a safetensors file (see [`crate::save_checkpoint`]).
//!
//! Restoring checks everything first (the kind of optimizer, every hyperparameter but the
//! learning rate, every slot's name, dtype and shape) and only then replaces the optimizer's
//! state, so a restore that returns an error has changed nothing.
//!
//! Also the step state itself, [`State`] (its driver, `State::step`, is in `crate::optim`).
//!
//! Depends on the crate root (`Error`, `Parameter`) and kiln's public API.
//!
//! [`Optimizer::state`]: crate::Optimizer::state
//! [`Optimizer::load_state`]: crate::Optimizer::load_state

use crate::{describe, Error, Result};
use kiln::Array;
use std::collections::{BTreeMap, HashMap};

/// What an optimizer carries between steps: how many steps it has committed and, per
/// parameter name, its slots (the momentum buffer; Adam's two moments).
/// Only `State::step` (in `crate::optim`) changes it.
#[derive(Debug, Clone, Default)]
pub(crate) struct State {
    pub(crate) steps: u64,
    pub(crate) slots: HashMap<String, Vec<Array>>,
}

/// The prefix of the optimizer's tensors and metadata keys in a checkpoint written by
/// [`crate::save_checkpoint`]; no parameter of a checkpoint may be named with it.
///
/// ```
/// assert_eq!(kiln_optim::OPTIMIZER_PREFIX, "optim/");
/// ```
pub const OPTIMIZER_PREFIX: &str = "optim/";

/// The version of the state's layout, written as the metadata entry `format`.
const FORMAT: &str = "1";

/// Everything an optimizer carries between steps: its kind (`"Sgd"`, `"Adam"`), the number
/// of steps it has taken, its hyperparameters, and per parameter its slots, as named arrays
/// `"{parameter}/{slot}"`.
///
/// Made by [`Optimizer::state`](crate::Optimizer::state), restored by
/// [`Optimizer::load_state`](crate::Optimizer::load_state), written into and read from a
/// checkpoint by [`crate::save_checkpoint`] and [`crate::load_checkpoint`];
/// [`OptimizerState::metadata`] and [`OptimizerState::from_parts`] convert it for any other
/// container of named arrays and string pairs.
///
/// ```
/// use kiln_optim::{Adam, Optimizer, Parameter};
/// let w = Parameter::new("w", kiln::Array::from_vec(vec![1.0f32, 2.0], &[2])?);
/// let mut adam = Adam::new(0.1);
/// adam.step(&[&w], &[kiln::Array::from_vec(vec![0.5f32, -0.5], &[2])?], &[])?;
/// let state = adam.state();
/// assert_eq!((state.kind(), state.steps()), ("Adam", 1));
/// let names: Vec<&str> = state.tensors().iter().map(|(n, _)| n.as_str()).collect();
/// assert_eq!(names, ["w/exp_avg", "w/exp_avg_sq"]);
/// assert_eq!(state.hyperparameters()["beta1"], "0.9");
/// # Ok::<(), kiln_optim::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct OptimizerState {
    kind: String,
    steps: u64,
    hyperparameters: BTreeMap<String, String>,
    tensors: Vec<(String, Array)>,
}

impl OptimizerState {
    /// The kind of optimizer the state belongs to: `"Sgd"` or `"Adam"` (AdamW is an `Adam`
    /// with a weight decay).
    ///
    /// ```
    /// use kiln_optim::Optimizer;
    /// assert_eq!(kiln_optim::Sgd::new(0.1).state().kind(), "Sgd");
    /// ```
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The number of steps taken (Adam's `t` of the bias correction).
    ///
    /// ```
    /// use kiln_optim::Optimizer;
    /// assert_eq!(kiln_optim::Adam::new(0.1).state().steps(), 0);
    /// ```
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The hyperparameters by name, as strings that read back exactly: `lr`, and for
    /// [`crate::Sgd`] `momentum`, `nesterov`, `weight_decay`, for [`crate::Adam`] `beta1`,
    /// `beta2`, `eps`, `weight_decay`.
    ///
    /// ```
    /// use kiln_optim::Optimizer;
    /// let state = kiln_optim::Sgd::new(0.5).momentum(0.9).nesterov(true).state();
    /// assert_eq!(state.hyperparameters()["lr"], "0.5");
    /// assert_eq!(state.hyperparameters()["nesterov"], "true");
    /// ```
    pub fn hyperparameters(&self) -> &BTreeMap<String, String> {
        &self.hyperparameters
    }

    /// The slots as named arrays `"{parameter}/{slot}"`, sorted by parameter name, then in
    /// the optimizer's slot order. Slot names: `momentum_buffer` (SGD with momentum; plain
    /// SGD keeps none), `exp_avg` and `exp_avg_sq` (Adam's first and second moments).
    ///
    /// ```
    /// use kiln_optim::{Optimizer, Parameter, Sgd};
    /// let w = Parameter::new("w", kiln::Array::from_vec(vec![1.0f64], &[1])?);
    /// let mut sgd = Sgd::new(0.1).momentum(0.9);
    /// sgd.step(&[&w], &[kiln::Array::from_vec(vec![2.0f64], &[1])?], &[])?;
    /// let state = sgd.state();
    /// assert_eq!(state.tensors()[0].0, "w/momentum_buffer");
    /// assert_eq!(state.tensors()[0].1.to_vec::<f64>()?, vec![2.0]);
    /// # Ok::<(), kiln_optim::Error>(())
    /// ```
    pub fn tensors(&self) -> &[(String, Array)] {
        &self.tensors
    }

    /// The slot `slot` of parameter `parameter`, if the state holds it.
    ///
    /// ```
    /// use kiln_optim::{Adam, Optimizer, Parameter};
    /// let w = Parameter::new("w", kiln::Array::from_vec(vec![1.0f32], &[1])?);
    /// let mut adam = Adam::new(0.1);
    /// adam.step(&[&w], &[kiln::Array::from_vec(vec![2.0f32], &[1])?], &[])?;
    /// let m = adam.state().get("w", "exp_avg").unwrap().to_vec::<f32>()?;
    /// assert!((m[0] - 0.2).abs() < 1e-6); // (1 - β₁)·g
    /// assert!(adam.state().get("w", "momentum_buffer").is_none());
    /// # Ok::<(), kiln_optim::Error>(())
    /// ```
    pub fn get(&self, parameter: &str, slot: &str) -> Option<&Array> {
        self.tensors
            .iter()
            .find(|(key, _)| split(key) == Some((parameter, slot)))
            .map(|(_, a)| a)
    }

    /// Everything but the arrays, as string pairs: `kind`, `steps`, `format` (the layout's
    /// version) and the [hyperparameters](OptimizerState::hyperparameters).
    /// [`OptimizerState::from_parts`] reads them back.
    ///
    /// ```
    /// use kiln_optim::Optimizer;
    /// let meta = kiln_optim::Adam::new(1e-3).state().metadata();
    /// assert!(meta.contains(&("kind".to_string(), "Adam".to_string())));
    /// assert!(meta.contains(&("steps".to_string(), "0".to_string())));
    /// assert!(meta.contains(&("lr".to_string(), "0.001".to_string())));
    /// ```
    pub fn metadata(&self) -> Vec<(String, String)> {
        let mut out = vec![
            ("format".to_string(), FORMAT.to_string()),
            ("kind".to_string(), self.kind.clone()),
            ("steps".to_string(), self.steps.to_string()),
        ];
        out.extend(
            self.hyperparameters
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        out
    }

    /// A state from its [metadata](OptimizerState::metadata) and its
    /// [tensors](OptimizerState::tensors) (named `"{parameter}/{slot}"`), as read from a file.
    ///
    /// The metadata must hold `format` (this version's `1`), `kind` and `steps`; every other
    /// entry is a hyperparameter. Whether the state fits an optimizer is checked when it is
    /// loaded, by [`Optimizer::load_state`](crate::Optimizer::load_state).
    ///
    /// ```
    /// use kiln_optim::{Adam, Optimizer, OptimizerState, Parameter};
    /// let w = Parameter::new("w", kiln::Array::from_vec(vec![1.0f32], &[1])?);
    /// let mut adam = Adam::new(0.1);
    /// adam.step(&[&w], &[kiln::Array::from_vec(vec![2.0f32], &[1])?], &[])?;
    /// let saved = adam.state();
    /// let meta = saved.metadata().into_iter().collect();
    /// let copy = OptimizerState::from_parts(&meta, saved.tensors().to_vec())?;
    /// let mut resumed = Adam::new(0.1);
    /// resumed.load_state(&copy)?;
    /// assert_eq!(resumed.steps(), 1);
    /// let mut bad = meta.clone();
    /// bad.insert("steps".into(), "-1".into());
    /// assert!(OptimizerState::from_parts(&bad, vec![]).is_err());
    /// # Ok::<(), kiln_optim::Error>(())
    /// ```
    pub fn from_parts(
        metadata: &BTreeMap<String, String>,
        tensors: Vec<(String, Array)>,
    ) -> Result<OptimizerState> {
        const OP: &str = "OptimizerState::from_parts";
        let fail = |message: String| Error::State {
            op: OP,
            what: "the optimizer state".into(),
            message,
        };
        let field = |key: &str| {
            metadata
                .get(key)
                .ok_or_else(|| fail(format!("its metadata has no {key:?} entry")))
        };
        let format = field("format")?;
        if format != FORMAT {
            return Err(fail(format!(
                "its layout is version {format:?}, and this kiln-optim reads version \
                 {FORMAT:?}: load it with the kiln-optim that saved it"
            )));
        }
        let kind = field("kind")?.clone();
        let steps = field("steps")?;
        let steps: u64 = steps.parse().map_err(|_| {
            fail(format!(
                "its step count {steps:?} is not a whole number of at most {}",
                u64::MAX
            ))
        })?;
        let hyperparameters: BTreeMap<String, String> = metadata
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "format" | "kind" | "steps"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut seen = std::collections::HashSet::with_capacity(tensors.len());
        for (key, _) in &tensors {
            if split(key).is_none() {
                return Err(fail(format!(
                    "it holds a tensor named {key:?}, which is not of the form \
                     \"{{parameter}}/{{slot}}\""
                )));
            }
            if !seen.insert(key.as_str()) {
                return Err(fail(format!("it holds two tensors named {key:?}")));
            }
        }
        Ok(OptimizerState {
            kind,
            steps,
            hyperparameters,
            tensors,
        })
    }
}

/// `"{parameter}/{slot}"` split at its last `/`: the parameter may hold `/`, the slot does
/// not. `None` when either part is empty.
pub(crate) fn split(key: &str) -> Option<(&str, &str)> {
    key.rsplit_once('/')
        .filter(|(p, s)| !p.is_empty() && !s.is_empty())
}

/// A hyperparameter's value.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Hp {
    Float(f64),
    Flag(bool),
}

impl Hp {
    /// The value as written: `{:?}` of an `f64` reads back to the same bits.
    fn text(self) -> String {
        match self {
            Hp::Float(v) => format!("{v:?}"),
            Hp::Flag(b) => b.to_string(),
        }
    }

    /// Whether `text` reads as this value (NaN matches NaN).
    fn matches(self, text: &str) -> bool {
        match self {
            Hp::Float(v) => text
                .parse::<f64>()
                .is_ok_and(|x| x == v || (x.is_nan() && v.is_nan())),
            Hp::Flag(b) => text.parse::<bool>() == Ok(b),
        }
    }
}

/// What an optimizer's state must look like: its kind, the hyperparameters that must match
/// (all but the learning rate, which is restored), and the names of its slots.
pub(crate) struct Spec {
    /// The operation errors name (`Adam::load_state`).
    pub op: &'static str,
    pub kind: &'static str,
    pub hypers: Vec<(&'static str, Hp)>,
    pub slots: &'static [&'static str],
}

impl Spec {
    /// The state of an optimizer of this spec with learning rate `lr`. Slots of another
    /// count than the spec's (left by a builder that changed the momentum after steps) are
    /// never read by a step, so they are left out.
    pub fn export(&self, lr: f64, state: &State) -> OptimizerState {
        let mut hyperparameters: BTreeMap<String, String> = self
            .hypers
            .iter()
            .map(|(k, v)| (k.to_string(), v.text()))
            .collect();
        hyperparameters.insert("lr".into(), Hp::Float(lr).text());
        let mut names: Vec<&String> = state
            .slots
            .iter()
            .filter(|(_, s)| s.len() == self.slots.len())
            .map(|(n, _)| n)
            .collect();
        names.sort();
        let tensors = names
            .into_iter()
            .flat_map(|n| {
                self.slots
                    .iter()
                    .zip(&state.slots[n])
                    .map(move |(slot, a)| (format!("{n}/{slot}"), a.clone()))
            })
            .collect();
        OptimizerState {
            kind: self.kind.into(),
            steps: state.steps,
            hyperparameters,
            tensors,
        }
    }

    /// The step state and learning rate `saved` holds, after checking that it fits: the
    /// same kind, the same hyperparameters (but the learning rate), and per parameter every
    /// slot of the spec, float, all of one dtype and shape.
    pub fn restore(&self, saved: &OptimizerState) -> Result<(State, f64)> {
        let (op, kind) = (self.op, self.kind);
        let fail = |message: String| Error::State {
            op,
            what: "the optimizer state".into(),
            message: format!("{message}; nothing was changed"),
        };
        if saved.kind != kind {
            return Err(fail(format!(
                "it is the state of the optimizer {:?}, and this optimizer is {kind:?}: load \
                 it into {:?} built with the hyperparameters it was saved with",
                saved.kind, saved.kind
            )));
        }
        let rebuild = "build the optimizer with the hyperparameters the state was saved with";
        for (name, value) in &self.hypers {
            match saved.hyperparameters.get(*name) {
                None => {
                    return Err(fail(format!(
                        "it has no value for the hyperparameter {name} (this {kind}'s is {})",
                        value.text()
                    )))
                }
                Some(text) if !value.matches(text) => {
                    return Err(fail(format!(
                        "its {name} is {text}, but this {kind}'s is {}: {rebuild}",
                        value.text()
                    )))
                }
                Some(_) => {}
            }
        }
        let lr = match saved.hyperparameters.get("lr") {
            None => return Err(fail("it has no learning rate (\"lr\")".into())),
            Some(text) => text
                .parse::<f64>()
                .map_err(|_| fail(format!("its learning rate {text:?} is not a number")))?,
        };
        if let Some(unknown) = saved
            .hyperparameters
            .keys()
            .find(|k| *k != "lr" && !self.hypers.iter().any(|(n, _)| n == k))
        {
            return Err(fail(format!(
                "it has a hyperparameter {unknown:?}, which {kind} does not have (it has lr{})",
                self.hypers
                    .iter()
                    .map(|(n, _)| format!(", {n}"))
                    .collect::<String>()
            )));
        }
        let mut grouped: HashMap<&str, Vec<Option<&Array>>> = HashMap::new();
        for (key, a) in &saved.tensors {
            let Some((param, slot)) = split(key) else {
                return Err(fail(format!(
                    "it holds a tensor named {key:?}, not of the form \"{{parameter}}/{{slot}}\""
                )));
            };
            let Some(i) = self.slots.iter().position(|s| *s == slot) else {
                let keeps = if self.slots.is_empty() {
                    "no state per parameter".to_string()
                } else {
                    format!("only {:?} per parameter", self.slots)
                };
                return Err(fail(format!(
                    "it holds {key:?}, but this {kind} keeps {keeps}: {rebuild}"
                )));
            };
            if !a.dtype().is_float() {
                return Err(fail(format!(
                    "its {key:?} is {}; optimizer state is float32 or float64",
                    describe(a.dtype(), a.shape())
                )));
            }
            let entry = grouped
                .entry(param)
                .or_insert_with(|| vec![None; self.slots.len()]);
            if entry[i].replace(a).is_some() {
                return Err(fail(format!("it holds two tensors named {key:?}")));
            }
        }
        let mut slots = HashMap::with_capacity(grouped.len());
        for (param, arrays) in grouped {
            let mut full = Vec::with_capacity(arrays.len());
            for (slot, a) in self.slots.iter().zip(arrays) {
                let Some(a) = a else {
                    return Err(fail(format!(
                        "parameter {param:?} lacks its {slot} ({:?}): the state is incomplete",
                        format!("{param}/{slot}")
                    )));
                };
                full.push(a.clone());
            }
            if let Some((slot, a)) = self
                .slots
                .iter()
                .zip(&full)
                .find(|(_, a)| a.dtype() != full[0].dtype() || a.shape() != full[0].shape())
            {
                return Err(fail(format!(
                    "parameter {param:?} has a {} of {} but a {} of {}",
                    self.slots[0],
                    describe(full[0].dtype(), full[0].shape()),
                    slot,
                    describe(a.dtype(), a.shape())
                )));
            }
            slots.insert(param.to_string(), full);
        }
        Ok((
            State {
                steps: saved.steps,
                slots,
            },
            lr,
        ))
    }
}
