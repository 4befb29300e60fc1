//! Optimizers: [`Sgd`] (plain, momentum, Nesterov, weight decay) and [`Adam`] (and AdamW with
//! decoupled weight decay), plus [`clip_by_global_norm`]. Each `step` builds the update
//! expressions and evaluates them in one `kiln::eval` with the caller's extra outputs.
//!
//! Depends on the crate root (`Parameter`, `Error`) and kiln's public API.

use crate::{Error, Parameter, Result};
use kiln::Array;
use std::collections::HashMap;

/// An optimizer: turns gradients into parameter updates.
pub trait Optimizer {
    /// Updates `params` from `grads` (same order, same shapes), evaluating `extra` (e.g. the
    /// loss) in the same pass so forward, backward and update share one compiled plan.
    fn step(&mut self, params: &[&Parameter], grads: &[Array], extra: &[&Array]) -> Result<()>;
    /// The learning rate.
    fn learning_rate(&self) -> f64;
    /// Changes the learning rate (a run-time scalar: no recompilation).
    fn set_learning_rate(&mut self, lr: f64);
}

fn check(op: &'static str, params: &[&Parameter], grads: &[Array]) -> Result<()> {
    if params.len() != grads.len() {
        return Err(Error::Invalid {
            op,
            message: format!("{} parameters but {} gradients", params.len(), grads.len()),
        });
    }
    for (p, g) in params.iter().zip(grads) {
        if g.shape() != p.shape() || g.dtype() != p.dtype() {
            return Err(Error::Mismatch {
                op,
                name: p.name().to_string(),
                expected: crate::describe(p.dtype(), p.shape()),
                found: crate::describe(g.dtype(), g.shape()),
                hint: "pass the gradients in the order of the parameters".into(),
            });
        }
    }
    Ok(())
}

/// Zeros of a parameter's dtype and shape, as data (so the first step is the same graph as
/// every later one).
fn zero_state(p: &Parameter) -> Result<Array> {
    let n: usize = p.shape().iter().product();
    Ok(match p.dtype() {
        kiln::DType::F32 => Array::from_vec(vec![0.0f32; n], p.shape())?,
        kiln::DType::F64 => Array::from_vec(vec![0.0f64; n], p.shape())?,
        other => {
            return Err(Error::Invalid {
                op: "optimizer",
                message: format!(
                    "parameter {:?} has dtype {other}; only f32 and f64 parameters can be trained",
                    p.name()
                ),
            })
        }
    })
}

/// Evaluates the new values, new states and extras together, then stores them.
fn commit(
    params: &[&Parameter],
    new_values: Vec<Array>,
    state: &mut HashMap<String, Vec<Array>>,
    new_state: Vec<(String, Vec<Array>)>,
    extra: &[&Array],
) -> Result<()> {
    let mut all: Vec<&Array> = new_values.iter().collect();
    for (_, s) in &new_state {
        all.extend(s.iter());
    }
    all.extend(extra.iter().copied());
    kiln::eval(&all)?;
    for (p, v) in params.iter().zip(new_values) {
        p.assign(v)?;
    }
    for (k, s) in new_state {
        state.insert(k, s);
    }
    Ok(())
}

/// Stochastic gradient descent with optional momentum (heavy-ball or Nesterov) and L2 weight
/// decay: `g' = g + wd·p`, `b = μ·b + g'`, `p -= lr·b` (Nesterov: `p -= lr·(g' + μ·b)`).
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
    state: HashMap<String, Vec<Array>>,
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
            state: HashMap::new(),
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
}

impl Optimizer for Sgd {
    fn step(&mut self, params: &[&Parameter], grads: &[Array], extra: &[&Array]) -> Result<()> {
        check("Sgd::step", params, grads)?;
        let mut values = Vec::with_capacity(params.len());
        let mut new_state = Vec::new();
        for (p, g) in params.iter().zip(grads) {
            let w = p.value();
            let g = if self.weight_decay != 0.0 {
                g + &(&w * self.weight_decay)
            } else {
                g.clone()
            };
            let dir = if self.momentum != 0.0 {
                let prev = match self.state.get(p.name()) {
                    Some(s) => s[0].clone(),
                    None => zero_state(p)?,
                };
                let b = &(&prev * self.momentum) + &g;
                let d = if self.nesterov {
                    &g + &(&b * self.momentum)
                } else {
                    b.clone()
                };
                new_state.push((p.name().to_string(), vec![b]));
                d
            } else {
                g
            };
            values.push(&w - &(&dir * self.lr));
        }
        commit(params, values, &mut self.state, new_state, extra)
    }

    fn learning_rate(&self) -> f64 {
        self.lr
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.lr = lr;
    }
}

/// Adam (Kingma & Ba, 2015) with bias correction; with [`Adam::weight_decay`], AdamW
/// (Loshchilov & Hutter, 2019): decay is applied to the weights, not the gradient.
///
/// The bias corrections are folded into two run-time scalars per step,
/// `α_t = lr·√(1-β₂ᵗ)/(1-β₁ᵗ)` and `ε_t = ε·√(1-β₂ᵗ)`, so no step is ever a new graph.
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
    t: i32,
    state: HashMap<String, Vec<Array>>,
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
            t: 0,
            state: HashMap::new(),
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
}

impl Optimizer for Adam {
    fn step(&mut self, params: &[&Parameter], grads: &[Array], extra: &[&Array]) -> Result<()> {
        check("Adam::step", params, grads)?;
        self.t += 1;
        let c1 = 1.0 - self.beta1.powi(self.t);
        let c2 = 1.0 - self.beta2.powi(self.t);
        let alpha = self.lr * c2.sqrt() / c1;
        let eps = self.eps * c2.sqrt();
        let mut values = Vec::with_capacity(params.len());
        let mut new_state = Vec::new();
        for (p, g) in params.iter().zip(grads) {
            let w = p.value();
            let (m0, v0) = match self.state.get(p.name()) {
                Some(s) => (s[0].clone(), s[1].clone()),
                None => (zero_state(p)?, zero_state(p)?),
            };
            let m = &(&m0 * self.beta1) + &(g * (1.0 - self.beta1));
            let v = &(&v0 * self.beta2) + &(&g.square() * (1.0 - self.beta2));
            let update = &(&m * alpha) / &(&v.sqrt() + eps);
            let w = if self.weight_decay != 0.0 {
                &w - &(&w * (self.lr * self.weight_decay))
            } else {
                w
            };
            values.push(&w - &update);
            new_state.push((p.name().to_string(), vec![m, v]));
        }
        commit(params, values, &mut self.state, new_state, extra)
    }

    fn learning_rate(&self) -> f64 {
        self.lr
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.lr = lr;
    }
}

/// Scales `grads` so their global L2 norm is at most `max_norm` (lazily, in the same graph);
/// returns the scaled gradients and the norm before scaling.
///
/// ```
/// use kiln::Array;
/// let g = vec![Array::from_vec(vec![3.0f64], &[1])?, Array::from_vec(vec![4.0f64], &[1])?];
/// let (clipped, norm) = kiln_optim::clip_by_global_norm(&g, 1.0)?;
/// assert!((norm.item::<f64>()? - 5.0).abs() < 1e-12);
/// assert!((clipped[0].item::<f64>()? - 0.6).abs() < 1e-6);
/// # Ok::<(), kiln_optim::Error>(())
/// ```
pub fn clip_by_global_norm(grads: &[Array], max_norm: f64) -> Result<(Vec<Array>, Array)> {
    let Some(first) = grads.first() else {
        return Err(Error::Invalid {
            op: "clip_by_global_norm",
            message: "no gradients given".into(),
        });
    };
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
