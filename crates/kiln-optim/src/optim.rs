//! Optimizers: [`Sgd`] (plain, momentum, Nesterov, weight decay) and [`Adam`] (and AdamW with
//! decoupled weight decay), plus [`clip_by_global_norm`].
//! Each `step` builds the update expressions and evaluates them in one `kiln::eval` with the
//! caller's extra outputs.
//!
//! Every optimizer steps through one driver, [`State::step`], which is the only code that
//! changes an optimizer's state or a parameter's value.
//! It checks everything that can be checked without evaluating (hyperparameters, dtypes,
//! shapes, names, stored state), builds every new value, evaluates them together with the
//! extras, and only then commits: parameters, per-parameter slots and the step count all at
//! once, in code that cannot fail.
//! So a step that returns an error has changed nothing.
//!
//! Every optimizer exports and restores its state (step count, hyperparameters, slots) as
//! an [`OptimizerState`], built and checked by `crate::state`.
//!
//! Depends on the crate root (`Parameter`, `Error`), `crate::state` and kiln's public API.

use crate::state::{Hp, Spec, State};
use crate::{describe, failing, Error, OptimizerState, Parameter, Result};
use kiln::Array;
use std::borrow::Cow;
use std::collections::HashMap;

/// An optimizer: turns gradients into parameter updates.
///
/// A step is all or nothing: when `step` returns an error, the parameters and the
/// optimizer's state (step count, momentum buffers, moments) are exactly as before.
///
/// ```
/// use kiln_optim::{Adam, Optimizer, Parameter};
/// let w = Parameter::new("w", kiln::Array::from_vec(vec![1.0f32], &[1])?);
/// let bad = kiln::Array::from_vec(vec![1.0f32], &[1])?.take(&kiln::Array::from_vec(vec![5i64], &[1])?, 0);
/// let mut opt = Adam::new(0.1);
/// let g = [kiln::Array::from_vec(vec![2.0f32], &[1])?];
/// assert!(opt.step(&[&w], &g, &[&bad]).is_err()); // the extra output fails to evaluate
/// assert_eq!((opt.steps(), w.value().to_vec::<f32>()?), (0, vec![1.0]));
/// # Ok::<(), kiln_optim::Error>(())
/// ```
pub trait Optimizer {
    /// Updates `params` from `grads` (same order, same shapes), evaluating `extra` (e.g. the
    /// loss) in the same pass so forward, backward and update share one compiled plan.
    /// On error nothing has changed.
    fn step(&mut self, params: &[&Parameter], grads: &[Array], extra: &[&Array]) -> Result<()>;
    /// [`Optimizer::step`], taking the gradients: they are dropped once the update is built,
    /// so when nothing else holds the parameters, their old values or the gradients, the
    /// step writes the new values over the old ones on a GPU (in place, see
    /// [`kiln::eval_donating`]) instead of allocating a second copy of the model.
    /// On error nothing has changed, except after a device error (such as running out of
    /// device memory) during an in-place step, which leaves the parameters written over
    /// unreadable.
    ///
    /// ```
    /// use kiln_optim::{Optimizer, Parameter, Sgd};
    /// let w = Parameter::new("w", kiln::Array::from_vec(vec![1.0f32], &[1])?);
    /// let g = vec![kiln::Array::from_vec(vec![2.0f32], &[1])?];
    /// Sgd::new(0.5).step_owned(&[&w], g, &[])?;
    /// assert_eq!(w.value().to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), kiln_optim::Error>(())
    /// ```
    fn step_owned(
        &mut self,
        params: &[&Parameter],
        grads: Vec<Array>,
        extra: &[&Array],
    ) -> Result<()> {
        self.step(params, &grads, extra)
    }
    /// The learning rate.
    fn learning_rate(&self) -> f64;
    /// Changes the learning rate (a run-time scalar: no recompilation).
    /// A NaN, infinite or negative rate is reported by the next `step`, which then changes
    /// nothing.
    fn set_learning_rate(&mut self, lr: f64);
    /// Everything the optimizer carries between steps, as data: its kind, step count and
    /// hyperparameters, and per parameter name its slots (see [`OptimizerState`]).
    /// The arrays are handles to the optimizer's own, already evaluated.
    ///
    /// ```
    /// use kiln_optim::{Optimizer, Parameter, Sgd};
    /// let w = Parameter::new("w", kiln::Array::from_vec(vec![1.0f32], &[1])?);
    /// let mut sgd = Sgd::new(0.1).momentum(0.9);
    /// sgd.step(&[&w], &[kiln::Array::from_vec(vec![1.0f32], &[1])?], &[])?;
    /// let state = sgd.state();
    /// assert_eq!((state.kind(), state.steps(), state.tensors().len()), ("Sgd", 1, 1));
    /// # Ok::<(), kiln_optim::Error>(())
    /// ```
    fn state(&self) -> OptimizerState;
    /// Restores a state made by [`Optimizer::state`] (of this optimizer or of one built the
    /// same way): the step count, every slot, and the learning rate (call
    /// [`Optimizer::set_learning_rate`] afterwards to train on at another one).
    ///
    /// The state must be of the same kind of optimizer, with the same hyperparameters but the
    /// learning rate, and hold every slot of each parameter it names, float, of one dtype and
    /// shape; otherwise this is an [`Error::State`] naming the mismatch, and nothing has
    /// changed. The slots' shapes are checked against the parameters by the next `step` (and
    /// by [`crate::load_checkpoint`], which has them).
    ///
    /// ```
    /// use kiln_optim::{Adam, Optimizer, Parameter, Sgd};
    /// let w = Parameter::new("w", kiln::Array::from_vec(vec![1.0f32], &[1])?);
    /// let mut adam = Adam::new(0.1);
    /// adam.step(&[&w], &[kiln::Array::from_vec(vec![1.0f32], &[1])?], &[])?;
    /// let mut resumed = Adam::new(0.1);
    /// resumed.load_state(&adam.state())?;
    /// assert_eq!(resumed.steps(), 1);
    /// // another kind of optimizer, or other hyperparameters: an error that changes nothing
    /// let mut sgd = Sgd::new(0.1);
    /// assert!(sgd.load_state(&adam.state()).is_err());
    /// let mut other = Adam::new(0.1).betas(0.8, 0.999);
    /// let e = other.load_state(&adam.state()).unwrap_err();
    /// assert!(e.to_string().contains("beta1"), "{e}");
    /// assert_eq!((sgd.steps(), other.steps()), (0, 0));
    /// # Ok::<(), kiln_optim::Error>(())
    /// ```
    fn load_state(&mut self, state: &OptimizerState) -> Result<()>;
}

/// The range a hyperparameter must lie in.
#[derive(Debug, Clone, Copy)]
enum Range {
    /// Finite and at least 0.
    NonNegative,
    /// In `[0, 1)`.
    Unit,
}

/// A hyperparameter, checked when a step starts (the builders and `set_learning_rate`
/// cannot fail).
struct Hyper {
    name: &'static str,
    value: f64,
    range: Range,
    hint: &'static str,
}

impl Hyper {
    /// The learning rate, which every optimizer has.
    fn learning_rate(lr: f64) -> Hyper {
        Hyper {
            name: "learning rate",
            value: lr,
            range: Range::NonNegative,
            hint: LR_HINT,
        }
    }

    fn check(&self, op: &'static str) -> Result<()> {
        let (ok, expected) = match self.range {
            Range::NonNegative => (
                self.value.is_finite() && self.value >= 0.0,
                "finite and at least 0",
            ),
            Range::Unit => ((0.0..1.0).contains(&self.value), "in [0, 1)"),
        };
        if ok {
            return Ok(());
        }
        Err(Error::Hyperparameter {
            op,
            name: self.name,
            value: self.value,
            expected,
            hint: self.hint,
        })
    }
}

const LR_HINT: &str = "set a valid one with set_learning_rate (a schedule that divides by zero \
                       gives NaN or inf); this step changed nothing";

/// Checks that parameters and gradients line up: one float gradient of the parameter's dtype
/// and shape per float parameter, and no two parameters of one name.
fn check(op: &'static str, params: &[&Parameter], grads: &[Array]) -> Result<()> {
    if params.len() != grads.len() {
        return Err(Error::Invalid {
            op,
            message: format!(
                "{} parameters but {} gradients: pass one gradient per parameter, in the same \
                 order (as kiln::grad returns them)",
                params.len(),
                grads.len()
            ),
        });
    }
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(params.len());
    for (i, (p, g)) in params.iter().zip(grads).enumerate() {
        if let Some(first) = seen.insert(p.name(), i) {
            return Err(Error::Duplicate {
                op,
                name: p.name().to_string(),
                first,
                second: i,
                context: " (an optimizer keeps its state by name, so they would share it)".into(),
            });
        }
        if !p.dtype().is_float() {
            return Err(Error::Untrainable {
                op,
                name: p.name().to_string(),
                dtype: p.dtype(),
            });
        }
        if g.shape() != p.shape() || g.dtype() != p.dtype() {
            return Err(Error::Mismatch {
                op,
                name: p.name().to_string(),
                expected: describe(p.dtype(), p.shape()),
                found: format!("{} (its gradient)", describe(g.dtype(), g.shape())),
                hint: "pass one gradient per parameter, in the same order, each of its \
                       parameter's dtype and shape"
                    .into(),
            });
        }
    }
    Ok(())
}

/// Zeros of a parameter's dtype and shape, as data (so the first step is the same graph as
/// every later one).
fn zero_state(op: &'static str, p: &Parameter) -> Result<Array> {
    let n: usize = p.shape().iter().product();
    Ok(match p.dtype() {
        kiln::DType::F32 => Array::from_vec(vec![0.0f32; n], p.shape())?,
        kiln::DType::F64 => Array::from_vec(vec![0.0f64; n], p.shape())?,
        dtype => {
            return Err(Error::Untrainable {
                op,
                name: p.name().to_string(),
                dtype,
            })
        }
    })
}

/// One parameter's inputs to an update rule.
struct Inputs<'a> {
    /// The step being taken: 1 for the first.
    t: u64,
    /// The parameter's current value.
    value: Array,
    /// Its gradient.
    grad: &'a Array,
    /// Its slots after the last committed step (zeros before its first).
    slots: Vec<Array>,
}

/// One parameter's outputs from an update rule: its new value and new slots.
struct Outputs {
    value: Array,
    slots: Vec<Array>,
}

impl State {
    /// The one step driver: checks `hypers` and the inputs, builds every parameter's new
    /// value and `n_slots` new slots with `rule`, evaluates them together with `extra`, and
    /// only then commits parameters, slots and the step count.
    /// On error nothing has changed.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &mut self,
        op: &'static str,
        hypers: &[Hyper],
        n_slots: usize,
        params: &[&Parameter],
        grads: Cow<'_, [Array]>,
        extra: &[&Array],
        mut rule: impl FnMut(Inputs<'_>) -> Outputs,
    ) -> Result<()> {
        // 1. everything that can be checked before evaluating
        for h in hypers {
            h.check(op)?;
        }
        check(op, params, &grads)?;
        let t = self.steps.checked_add(1).ok_or_else(|| Error::Invalid {
            op,
            message: "the step count would overflow u64: use a fresh optimizer".into(),
        })?;
        // 2. the new values and slots, as lazy expressions
        let mut values = Vec::with_capacity(params.len());
        let mut slots = Vec::with_capacity(if n_slots == 0 { 0 } else { params.len() });
        for (p, g) in params.iter().zip(grads.iter()) {
            let previous = self.previous(op, p, n_slots)?;
            let out = rule(Inputs {
                t,
                value: p.value(),
                grad: g,
                slots: previous,
            });
            for a in std::iter::once(&out.value).chain(&out.slots) {
                if a.dtype() != p.dtype() || a.shape() != p.shape() {
                    return Err(Error::Invalid {
                        op,
                        message: format!(
                            "internal error: the update of {:?} ({}) is {}; please report it",
                            p.name(),
                            describe(p.dtype(), p.shape()),
                            describe(a.dtype(), a.shape())
                        ),
                    });
                }
            }
            values.push(out.value);
            if n_slots > 0 {
                slots.push(out.slots);
            }
        }
        // Gradients handed over are dropped now: held, they would keep the old values
        // readable and block writing the new ones over them.
        let grads: &[Array] = match grads {
            Cow::Borrowed(g) => g,
            Cow::Owned(g) => {
                drop(g);
                &[]
            }
        };
        // 3. one evaluation of everything the step produces and the caller asked for, which
        // may write the new parameters and slots over the old ones (each parameter's value
        // is locked meanwhile: its own handle is the one donated, and no reader sees a value
        // written over)
        let mut all: Vec<&Array> = values.iter().collect();
        all.extend(slots.iter().flatten());
        all.extend(extra.iter().copied());
        let evaluated = {
            let mut held: Vec<_> = params.iter().map(|p| p.lock()).collect();
            let mut donors: Vec<&Array> = held.iter().map(|h| &**h).collect();
            for p in params {
                if let Some(s) = self.slots.get(p.name()) {
                    donors.extend(s.iter());
                }
            }
            let r = kiln::eval_donating(&all, &donors);
            drop(donors);
            if r.is_ok() {
                // 4. the commit: nothing below can fail
                for (h, v) in held.iter_mut().zip(values) {
                    **h = v;
                }
            }
            r
        };
        if let Err(source) = evaluated {
            return Err(Error::Eval {
                op,
                what: culprit(params, grads, extra),
                unchanged: "no parameter and no optimizer state changed".into(),
                source: Box::new(source),
            });
        }
        for (p, s) in params.iter().zip(slots) {
            self.slots.insert(p.name().to_string(), s);
        }
        self.steps = t;
        Ok(())
    }

    /// The parameter's slots after the last committed step, or zeros before its first.
    /// Slots stored for another parameter of the same name (another dtype or shape) are an
    /// error, never broadcast.
    fn previous(&self, op: &'static str, p: &Parameter, n_slots: usize) -> Result<Vec<Array>> {
        match self.slots.get(p.name()) {
            Some(s) if s.len() == n_slots => {
                if let Some(a) = s
                    .iter()
                    .find(|a| a.dtype() != p.dtype() || a.shape() != p.shape())
                {
                    return Err(Error::Mismatch {
                        op,
                        name: p.name().to_string(),
                        expected: describe(p.dtype(), p.shape()),
                        found: format!(
                            "optimizer state of {} from an earlier step",
                            describe(a.dtype(), a.shape())
                        ),
                        hint: "this optimizer trained another parameter of this name; give \
                               the parameters distinct names or use a fresh optimizer for a new \
                               model"
                            .into(),
                    });
                }
                Ok(s.clone())
            }
            _ => (0..n_slots).map(|_| zero_state(op, p)).collect(),
        }
    }
}

/// Names the input that made a step's evaluation fail (an error path only: each group is
/// evaluated on its own, then its members one by one).
fn culprit(params: &[&Parameter], grads: &[Array], extra: &[&Array]) -> String {
    let values: Vec<Array> = params.iter().map(|p| p.value()).collect();
    let groups: [Vec<(String, &Array)>; 3] = [
        extra
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("extra output #{i}"), *a))
            .collect(),
        params
            .iter()
            .zip(&values)
            .map(|(p, v)| (format!("the value of parameter {:?}", p.name()), v))
            .collect(),
        params
            .iter()
            .zip(grads)
            .map(|(p, g)| (format!("the gradient of parameter {:?}", p.name()), g))
            .collect(),
    ];
    for group in &groups {
        if let Some(what) = failing(group) {
            return what;
        }
    }
    format!(
        "the update of {} parameters with {} extra outputs",
        params.len(),
        extra.len()
    )
}

/// Every optimizer's [`Optimizer::load_state`]: checks `saved` against the optimizer's
/// `spec` (kind, hyperparameters, slots), then replaces its `state` and learning rate `lr`
/// with what `saved` holds. On error nothing has changed.
fn load_state(spec: Spec, saved: &OptimizerState, state: &mut State, lr: &mut f64) -> Result<()> {
    (*state, *lr) = spec.restore(saved)?;
    Ok(())
}

/// Stochastic gradient descent with optional momentum (heavy-ball or Nesterov) and L2 weight
/// decay: `g' = g + wd·p`, `b = μ·b + g'`, `p -= lr·b` (Nesterov: `p -= lr·(g' + μ·b)`).
///
/// The learning rate, μ and the weight decay must be finite and at least 0; the step reports
/// any other value and changes nothing.
/// A NaN or infinite gradient is data, not an error: it propagates into its elements, as in
/// PyTorch.
///
/// ```
/// use kiln_optim::{Optimizer, Parameter, Sgd};
/// let p = Parameter::new("x", kiln::Array::from_vec(vec![1.0f64], &[1])?);
/// let mut sgd = Sgd::new(0.5).momentum(0.9).nesterov(true);
/// sgd.step(&[&p], &[kiln::Array::from_vec(vec![2.0f64], &[1])?], &[])?;
/// assert!((p.value().item::<f64>()? - (1.0 - 0.5 * (2.0 + 0.9 * 2.0))).abs() < 1e-12);
/// # Ok::<(), kiln_optim::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Sgd {
    lr: f64,
    momentum: f64,
    nesterov: bool,
    weight_decay: f64,
    state: State,
}

impl Sgd {
    /// Plain SGD with learning rate `lr`.
    ///
    /// ```
    /// assert_eq!(kiln_optim::Sgd::new(0.1).lr(), 0.1);
    /// ```
    pub fn new(lr: f64) -> Sgd {
        Sgd {
            lr,
            momentum: 0.0,
            nesterov: false,
            weight_decay: 0.0,
            state: State::default(),
        }
    }

    /// The learning rate.
    ///
    /// ```
    /// assert_eq!(kiln_optim::Sgd::new(0.3).lr(), 0.3);
    /// ```
    pub fn lr(&self) -> f64 {
        self.lr
    }

    /// Sets the momentum coefficient μ.
    ///
    /// ```
    /// let _ = kiln_optim::Sgd::new(0.1).momentum(0.9);
    /// ```
    pub fn momentum(mut self, mu: f64) -> Sgd {
        self.momentum = mu;
        self
    }

    /// Uses Nesterov momentum.
    ///
    /// ```
    /// let _ = kiln_optim::Sgd::new(0.1).momentum(0.9).nesterov(true);
    /// ```
    pub fn nesterov(mut self, on: bool) -> Sgd {
        self.nesterov = on;
        self
    }

    /// Sets L2 weight decay (added to the gradient).
    ///
    /// ```
    /// let _ = kiln_optim::Sgd::new(0.1).weight_decay(1e-4);
    /// ```
    pub fn weight_decay(mut self, wd: f64) -> Sgd {
        self.weight_decay = wd;
        self
    }

    /// The number of steps taken (failed steps do not count).
    ///
    /// ```
    /// use kiln_optim::{Optimizer, Parameter, Sgd};
    /// let p = Parameter::new("x", kiln::Array::from_vec(vec![1.0f32], &[1])?);
    /// let mut sgd = Sgd::new(0.1);
    /// sgd.step(&[&p], &[kiln::Array::from_vec(vec![1.0f32], &[1])?], &[])?;
    /// assert_eq!(sgd.steps(), 1);
    /// # Ok::<(), kiln_optim::Error>(())
    /// ```
    pub fn steps(&self) -> u64 {
        self.state.steps
    }

    /// What its state must look like.
    fn spec(&self) -> Spec {
        Spec {
            op: "Sgd::load_state",
            kind: "Sgd",
            hypers: vec![
                ("momentum", Hp::Float(self.momentum)),
                ("nesterov", Hp::Flag(self.nesterov)),
                ("weight_decay", Hp::Float(self.weight_decay)),
            ],
            slots: if self.momentum != 0.0 {
                &["momentum_buffer"]
            } else {
                &[]
            },
        }
    }
}

impl Sgd {
    /// One step (see [`Optimizer::step`] and [`Optimizer::step_owned`]).
    fn run(
        &mut self,
        params: &[&Parameter],
        grads: Cow<'_, [Array]>,
        extra: &[&Array],
    ) -> Result<()> {
        let (lr, mu, nesterov, wd) = (self.lr, self.momentum, self.nesterov, self.weight_decay);
        let hypers = [
            Hyper::learning_rate(lr),
            Hyper {
                name: "momentum",
                value: mu,
                range: Range::NonNegative,
                hint: "pass a finite μ ≥ 0 to Sgd::momentum (0.9 is usual)",
            },
            Hyper {
                name: "weight decay",
                value: wd,
                range: Range::NonNegative,
                hint: "pass a finite decay ≥ 0 to Sgd::weight_decay",
            },
        ];
        let n_slots = usize::from(mu != 0.0);
        // The inputs are checked (float, one dtype and shape per parameter), so these
        // operators cannot fail.
        self.state
            .step("Sgd::step", &hypers, n_slots, params, grads, extra, |x| {
                let g = if wd != 0.0 {
                    x.grad + &(&x.value * wd)
                } else {
                    x.grad.clone()
                };
                let (dir, slots) = if mu != 0.0 {
                    let b = &(&x.slots[0] * mu) + &g;
                    let d = if nesterov { &g + &(&b * mu) } else { b.clone() };
                    (d, vec![b])
                } else {
                    (g, Vec::new())
                };
                Outputs {
                    value: &x.value - &(&dir * lr),
                    slots,
                }
            })
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, params: &[&Parameter], grads: &[Array], extra: &[&Array]) -> Result<()> {
        self.run(params, Cow::Borrowed(grads), extra)
    }

    fn step_owned(
        &mut self,
        params: &[&Parameter],
        grads: Vec<Array>,
        extra: &[&Array],
    ) -> Result<()> {
        self.run(params, Cow::Owned(grads), extra)
    }

    fn learning_rate(&self) -> f64 {
        self.lr
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.lr = lr;
    }

    fn state(&self) -> OptimizerState {
        self.spec().export(self.lr, &self.state)
    }

    fn load_state(&mut self, state: &OptimizerState) -> Result<()> {
        load_state(self.spec(), state, &mut self.state, &mut self.lr)
    }
}

/// Adam (Kingma & Ba, 2015) with bias correction; with [`Adam::weight_decay`], AdamW
/// (Loshchilov & Hutter, 2019): decay is applied to the weights, not the gradient.
///
/// The bias corrections are folded into two run-time scalars per step,
/// `α_t = lr·√(1-β₂ᵗ)/(1-β₁ᵗ)` and `ε_t = ε·√(1-β₂ᵗ)`, so no step is ever a new graph.
/// The step count `t` advances only when a step succeeds.
///
/// The learning rate, ε and the weight decay must be finite and at least 0, and β₁, β₂ in
/// `[0, 1)`; the step reports any other value and changes nothing.
/// A NaN or infinite gradient is data, not an error: it propagates into its elements, as in
/// PyTorch.
///
/// ```
/// use kiln_optim::{Adam, Optimizer, Parameter};
/// let p = Parameter::new("x", kiln::Array::from_vec(vec![1.0f64], &[1])?);
/// let mut adam = Adam::new(0.1);
/// adam.step(&[&p], &[kiln::Array::from_vec(vec![4.0f64], &[1])?], &[])?;
/// // first step moves by ≈ lr in the direction of -sign(g)
/// assert!((p.value().item::<f64>()? - 0.9).abs() < 1e-6);
/// # Ok::<(), kiln_optim::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Adam {
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    weight_decay: f64,
    state: State,
}

impl Adam {
    /// Adam with learning rate `lr`, β = (0.9, 0.999), ε = 1e-8.
    ///
    /// ```
    /// let _ = kiln_optim::Adam::new(1e-3);
    /// ```
    pub fn new(lr: f64) -> Adam {
        Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            state: State::default(),
        }
    }

    /// Sets β₁ and β₂.
    ///
    /// ```
    /// let _ = kiln_optim::Adam::new(1e-3).betas(0.8, 0.99);
    /// ```
    pub fn betas(mut self, beta1: f64, beta2: f64) -> Adam {
        self.beta1 = beta1;
        self.beta2 = beta2;
        self
    }

    /// Sets ε.
    ///
    /// ```
    /// let _ = kiln_optim::Adam::new(1e-3).eps(1e-6);
    /// ```
    pub fn eps(mut self, eps: f64) -> Adam {
        self.eps = eps;
        self
    }

    /// Decoupled weight decay (AdamW): `p -= lr·wd·p` each step.
    ///
    /// ```
    /// let _ = kiln_optim::Adam::new(1e-3).weight_decay(0.01);
    /// ```
    pub fn weight_decay(mut self, wd: f64) -> Adam {
        self.weight_decay = wd;
        self
    }

    /// The number of steps taken, `t` of the bias correction (failed steps do not count).
    ///
    /// ```
    /// use kiln_optim::{Adam, Optimizer, Parameter};
    /// let p = Parameter::new("x", kiln::Array::from_vec(vec![1.0f32], &[1])?);
    /// let mut adam = Adam::new(0.1);
    /// adam.step(&[&p], &[kiln::Array::from_vec(vec![1.0f32], &[1])?], &[])?;
    /// assert_eq!(adam.steps(), 1);
    /// # Ok::<(), kiln_optim::Error>(())
    /// ```
    pub fn steps(&self) -> u64 {
        self.state.steps
    }

    /// What its state must look like.
    fn spec(&self) -> Spec {
        Spec {
            op: "Adam::load_state",
            kind: "Adam",
            hypers: vec![
                ("beta1", Hp::Float(self.beta1)),
                ("beta2", Hp::Float(self.beta2)),
                ("eps", Hp::Float(self.eps)),
                ("weight_decay", Hp::Float(self.weight_decay)),
            ],
            slots: &["exp_avg", "exp_avg_sq"],
        }
    }
}

impl Adam {
    /// One step (see [`Optimizer::step`] and [`Optimizer::step_owned`]).
    fn run(
        &mut self,
        params: &[&Parameter],
        grads: Cow<'_, [Array]>,
        extra: &[&Array],
    ) -> Result<()> {
        let (lr, beta1, beta2, eps, wd) =
            (self.lr, self.beta1, self.beta2, self.eps, self.weight_decay);
        let betas_hint = "pass β₁ and β₂ in [0, 1) to Adam::betas (0.9 and 0.999 are usual)";
        let hypers = [
            Hyper::learning_rate(lr),
            Hyper {
                name: "β₁",
                value: beta1,
                range: Range::Unit,
                hint: betas_hint,
            },
            Hyper {
                name: "β₂",
                value: beta2,
                range: Range::Unit,
                hint: betas_hint,
            },
            Hyper {
                name: "ε",
                value: eps,
                range: Range::NonNegative,
                hint: "pass a finite ε ≥ 0 to Adam::eps (1e-8 is usual)",
            },
            Hyper {
                name: "weight decay",
                value: wd,
                range: Range::NonNegative,
                hint: "pass a finite decay ≥ 0 to Adam::weight_decay",
            },
        ];
        // The inputs are checked (float, one dtype and shape per parameter), so these
        // operators cannot fail.
        self.state
            .step("Adam::step", &hypers, 2, params, grads, extra, |x| {
                // β^t for t past i32::MAX is 0 in f64 for every β in [0, 1)
                let t = i32::try_from(x.t).unwrap_or(i32::MAX);
                let c1 = 1.0 - beta1.powi(t);
                let c2 = 1.0 - beta2.powi(t);
                let alpha = lr * c2.sqrt() / c1;
                let eps_t = eps * c2.sqrt();
                let g = x.grad;
                let m = &(&x.slots[0] * beta1) + &(g * (1.0 - beta1));
                let v = &(&x.slots[1] * beta2) + &(&g.square() * (1.0 - beta2));
                let update = &(&m * alpha) / &(&v.sqrt() + eps_t);
                let w = if wd != 0.0 {
                    &x.value - &(&x.value * (lr * wd))
                } else {
                    x.value
                };
                Outputs {
                    value: &w - &update,
                    slots: vec![m, v],
                }
            })
    }
}

impl Optimizer for Adam {
    fn step(&mut self, params: &[&Parameter], grads: &[Array], extra: &[&Array]) -> Result<()> {
        self.run(params, Cow::Borrowed(grads), extra)
    }

    fn step_owned(
        &mut self,
        params: &[&Parameter],
        grads: Vec<Array>,
        extra: &[&Array],
    ) -> Result<()> {
        self.run(params, Cow::Owned(grads), extra)
    }

    fn learning_rate(&self) -> f64 {
        self.lr
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.lr = lr;
    }

    fn state(&self) -> OptimizerState {
        self.spec().export(self.lr, &self.state)
    }

    fn load_state(&mut self, state: &OptimizerState) -> Result<()> {
        load_state(self.spec(), state, &mut self.state, &mut self.lr)
    }
}

/// Scales `grads` so their global L2 norm is at most `max_norm` (lazily, in the same graph);
/// returns the scaled gradients and the norm before scaling (of the first gradient's dtype).
///
/// The gradients must be f32 or f64, and `max_norm` at least 0 (`f64::INFINITY` never
/// clips); anything else is an error.
///
/// ```
/// use kiln::Array;
/// let g = vec![Array::from_vec(vec![3.0f64], &[1])?, Array::from_vec(vec![4.0f64], &[1])?];
/// let (clipped, norm) = kiln_optim::clip_by_global_norm(&g, 1.0)?;
/// assert!((norm.item::<f64>()? - 5.0).abs() < 1e-12);
/// assert!((clipped[0].item::<f64>()? - 0.6).abs() < 1e-6);
/// assert!(kiln_optim::clip_by_global_norm(&g, f64::NAN).is_err());
/// # Ok::<(), kiln_optim::Error>(())
/// ```
pub fn clip_by_global_norm(grads: &[Array], max_norm: f64) -> Result<(Vec<Array>, Array)> {
    const OP: &str = "clip_by_global_norm";
    let Some(first) = grads.first() else {
        return Err(Error::Invalid {
            op: OP,
            message: "no gradients given: pass the gradients kiln::grad returned".into(),
        });
    };
    if max_norm.is_nan() || max_norm < 0.0 {
        return Err(Error::Hyperparameter {
            op: OP,
            name: "max_norm",
            value: max_norm,
            expected: "at least 0",
            hint: "pass the largest global norm to allow (f64::INFINITY never clips)",
        });
    }
    if let Some((i, g)) = grads
        .iter()
        .enumerate()
        .find(|(_, g)| !g.dtype().is_float())
    {
        return Err(Error::Invalid {
            op: OP,
            message: format!(
                "gradient #{i} is {}; clipping needs float32 or float64 gradients: pass the \
                 gradients of float parameters only",
                describe(g.dtype(), g.shape())
            ),
        });
    }
    // every gradient is float, so these operators cannot fail
    let mut total = first.square().sum(None, false);
    for g in &grads[1..] {
        total = &total + &g.cast(first.dtype()).square().sum(None, false);
    }
    let norm = total.sqrt();
    // scale = min(1, max_norm / (norm + 1e-6))
    let scale = (max_norm / (&norm + 1e-6)).minimum(1.0);
    let clipped = grads.iter().map(|g| g * &scale.cast(g.dtype())).collect();
    Ok((clipped, norm))
}
