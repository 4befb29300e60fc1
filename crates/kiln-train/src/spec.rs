//! What a model function returns: [`Mode`], the [`Spec`] (loss, predictions, metrics, the
//! parameters to train and the optimizer), its per-mode check, and the streaming
//! [`Metric`]s an evaluation accumulates.
//!
//! Depends on kiln's public API, kiln-optim's `Optimizer` and `crate::error`.

use crate::{Error, Result};
use kiln::{Array, DType};
use kiln_optim::Optimizer;

/// What the model function is asked to build: a training step, an evaluation, predictions.
///
/// ```
/// assert_eq!(format!("{:?}", kiln_train::Mode::Train), "Train");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Mode {
    /// A training step: the spec needs a loss and an optimizer.
    Train,
    /// An evaluation: the spec needs a loss; metrics are optional.
    Eval,
    /// Inference: the spec needs predictions.
    Predict,
}

/// A metric an evaluation accumulates over its batches, built from this batch's arrays.
///
/// ```
/// use kiln_train::Metric;
/// let labels = kiln::Array::from_vec(vec![1i64, 0, 2], &[3])?;
/// let predicted = kiln::Array::from_vec(vec![1i64, 2, 2], &[3])?;
/// let m = Metric::accuracy(&labels, &predicted)?;
/// let (total, count) = m.parts()?;
/// kiln::eval(&[&total, &count])?;
/// assert_eq!((total.item::<f64>()?, count.item::<f64>()?), (2.0, 3.0));
/// # Ok::<(), kiln_train::Error>(())
/// ```
#[derive(Clone, Debug)]
pub enum Metric {
    /// The mean of every element of `values` (each weighted by `weights`, broadcast to it,
    /// when given) over the whole evaluation.
    Mean {
        /// The values (any shape).
        values: Array,
        /// Their weights, or `None` for 1 each.
        weights: Option<Array>,
    },
}

impl Metric {
    /// The mean of `values` over the evaluation.
    ///
    /// ```
    /// let m = kiln_train::Metric::mean(&kiln::Array::from_vec(vec![1.0f32, 3.0], &[2])?);
    /// assert!(matches!(m, kiln_train::Metric::Mean { weights: None, .. }));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn mean(values: &Array) -> Metric {
        Metric::Mean {
            values: values.clone(),
            weights: None,
        }
    }

    /// The weighted mean of `values` over the evaluation (weights broadcast to the values).
    ///
    /// ```
    /// let v = kiln::Array::from_vec(vec![1.0f32, 3.0], &[2])?;
    /// let w = kiln::Array::from_vec(vec![1.0f32, 0.0], &[2])?;
    /// let (t, c) = kiln_train::Metric::weighted_mean(&v, &w).parts()?;
    /// assert_eq!((t.item::<f64>()?, c.item::<f64>()?), (1.0, 1.0));
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn weighted_mean(values: &Array, weights: &Array) -> Metric {
        Metric::Mean {
            values: values.clone(),
            weights: Some(weights.clone()),
        }
    }

    /// The fraction of positions where `labels` equals `predicted` (same shape).
    ///
    /// ```
    /// use kiln_train::Metric;
    /// let labels = kiln::Array::from_vec(vec![0i64, 1], &[2])?;
    /// let (t, c) = Metric::accuracy(&labels, &labels)?.parts()?;
    /// assert_eq!(t.item::<f64>()? / c.item::<f64>()?, 1.0);
    /// let three = kiln::Array::from_vec(vec![0i64, 1, 1], &[3])?;
    /// assert!(Metric::accuracy(&labels, &three).is_err()); // one prediction per label
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn accuracy(labels: &Array, predicted: &Array) -> Result<Metric> {
        if labels.shape() != predicted.shape() {
            return Err(Error::invalid(
                "Metric::accuracy",
                format!(
                    "labels of shape {:?} and predictions of shape {:?}: pass one prediction \
                     per label (an argmax over the class axis)",
                    labels.shape(),
                    predicted.shape()
                ),
            ));
        }
        Ok(Metric::mean(&labels.try_eq(predicted)?.cast(DType::F64)))
    }

    /// This batch's contribution as two f64 scalars: the weighted sum and the weight.
    ///
    /// ```
    /// let m = kiln_train::Metric::mean(&kiln::Array::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?);
    /// let (total, count) = m.parts()?;
    /// assert_eq!((total.item::<f64>()?, count.item::<f64>()?), (6.0, 3.0));
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn parts(&self) -> Result<(Array, Array)> {
        match self {
            Metric::Mean { values, weights } => {
                let v = values.cast(DType::F64);
                match weights {
                    None => Ok((v.sum(None, false), Array::scalar(v.size() as f64))),
                    Some(w) => {
                        let w = w.cast(DType::F64).try_broadcast_to(v.shape())?;
                        Ok((v.try_mul(&w)?.sum(None, false), w.sum(None, false)))
                    }
                }
            }
        }
    }
}

/// What a model function returns for one mode (TF's `EstimatorSpec`).
///
/// Build it with the methods; [`Spec::check`] says which field a mode lacks.
///
/// ```
/// use kiln_train::{Mode, Spec};
/// let loss = kiln::Array::scalar(0.5f32);
/// let spec = Spec::new().loss(&loss);
/// assert!(spec.check("doc", Mode::Eval).is_ok());
/// let e = spec.check("doc", Mode::Train).unwrap_err().to_string();
/// assert!(e.contains("`optimizer`"), "{e}");
/// ```
#[derive(Default)]
pub struct Spec {
    /// The scalar loss (a mean over the batch's examples).
    pub loss: Option<Array>,
    /// Named predictions, each with the batch on its first axis.
    pub predictions: Vec<(String, Array)>,
    /// Named metrics for evaluation.
    pub metrics: Vec<(String, Metric)>,
    /// The names of the variables to train, or `None` for every variable the call used.
    pub trainable: Option<Vec<String>>,
    /// The optimizer and its hyperparameters for this step (its learning rate is read every
    /// step; its state lives in the estimator).
    pub optimizer: Option<Box<dyn Optimizer + Send>>,
    /// Scale the gradients so their global L2 norm is at most this before the update
    /// (after the replicas' reduction).
    pub clip_global_norm: Option<f64>,
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spec")
            .field("loss", &self.loss.as_ref().map(|l| l.shape().to_vec()))
            .field(
                "predictions",
                &self.predictions.iter().map(|p| &p.0).collect::<Vec<_>>(),
            )
            .field(
                "metrics",
                &self.metrics.iter().map(|m| &m.0).collect::<Vec<_>>(),
            )
            .field("trainable", &self.trainable)
            .field("clip_global_norm", &self.clip_global_norm)
            .field(
                "optimizer",
                &self
                    .optimizer
                    .as_ref()
                    .map(|o| o.state().kind().to_string()),
            )
            .finish()
    }
}

impl Spec {
    /// An empty spec.
    ///
    /// ```
    /// assert!(kiln_train::Spec::new().loss.is_none());
    /// ```
    pub fn new() -> Spec {
        Spec::default()
    }

    /// Sets the loss.
    ///
    /// ```
    /// let spec = kiln_train::Spec::new().loss(&kiln::Array::scalar(0.25f32));
    /// assert_eq!(spec.loss.unwrap().item::<f32>()?, 0.25);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn loss(mut self, loss: &Array) -> Spec {
        self.loss = Some(loss.clone());
        self
    }

    /// Adds a prediction.
    ///
    /// ```
    /// let y = kiln::Array::from_vec(vec![1.0f32, 2.0], &[2])?;
    /// let spec = kiln_train::Spec::new().prediction("y", &y).prediction("y2", &(&y * &y));
    /// let names: Vec<&str> = spec.predictions.iter().map(|(n, _)| n.as_str()).collect();
    /// assert_eq!(names, ["y", "y2"]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn prediction(mut self, name: impl Into<String>, value: &Array) -> Spec {
        self.predictions.push((name.into(), value.clone()));
        self
    }

    /// Adds a metric.
    ///
    /// ```
    /// use kiln_train::{Metric, Mode, Spec};
    /// let loss = kiln::Array::scalar(0.5f32);
    /// let err = kiln::Array::from_vec(vec![0.1f32, 0.3], &[2])?;
    /// let spec = Spec::new().loss(&loss).metric("mae", Metric::mean(&err));
    /// assert!(spec.check("doc", Mode::Eval).is_ok());
    /// let clash = Spec::new().loss(&loss).metric("loss", Metric::mean(&err));
    /// assert!(clash.check("doc", Mode::Eval).is_err()); // "loss" is reserved
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn metric(mut self, name: impl Into<String>, metric: Metric) -> Spec {
        self.metrics.push((name.into(), metric));
        self
    }

    /// Trains only the named variables.
    ///
    /// ```
    /// let spec = kiln_train::Spec::new().trainable(["head/w", "head/b"]);
    /// assert_eq!(spec.trainable.unwrap(), ["head/w", "head/b"]);
    /// ```
    pub fn trainable<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Spec {
        self.trainable = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Sets the optimizer.
    ///
    /// ```
    /// let spec = kiln_train::Spec::new().optimizer(kiln_optim::Adam::new(1e-3));
    /// assert_eq!(spec.optimizer.unwrap().learning_rate(), 1e-3);
    /// ```
    pub fn optimizer(mut self, optimizer: impl Optimizer + Send + 'static) -> Spec {
        self.optimizer = Some(Box::new(optimizer));
        self
    }

    /// Clips the gradients to a global L2 norm of at most `max_norm` before the update.
    ///
    /// ```
    /// let spec = kiln_train::Spec::new().clip_global_norm(5.0);
    /// assert_eq!(spec.clip_global_norm, Some(5.0));
    /// ```
    pub fn clip_global_norm(mut self, max_norm: f64) -> Spec {
        self.clip_global_norm = Some(max_norm);
        self
    }

    /// Checks that the spec has what `mode` needs: a float scalar `loss` (train and eval),
    /// an `optimizer` (train), `predictions` (predict), and distinct prediction and metric
    /// names. The error names the missing field; `op` is the operation the user called.
    ///
    /// ```
    /// use kiln_train::{Mode, Spec};
    /// let y = kiln::Array::from_vec(vec![1.0f32, 2.0], &[2])?;
    /// assert!(Spec::new().prediction("y", &y).check("doc", Mode::Predict).is_ok());
    /// let e = Spec::new().check("doc", Mode::Predict).unwrap_err();
    /// assert!(e.to_string().contains("`predictions`"), "{e}");
    /// let scalar = Spec::new().prediction("s", &kiln::Array::scalar(1.0f32));
    /// assert!(scalar.check("doc", Mode::Predict).is_err()); // no batch axis
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn check(&self, op: &'static str, mode: Mode) -> Result<()> {
        let missing = |missing: &'static str, hint: String| Error::Spec {
            op,
            mode,
            missing,
            hint,
        };
        if matches!(mode, Mode::Train | Mode::Eval) {
            let Some(loss) = &self.loss else {
                return Err(missing(
                    "loss",
                    "set one with Spec::loss (a float scalar, the mean over the batch)".into(),
                ));
            };
            if !loss.shape().is_empty() || !loss.dtype().is_float() {
                return Err(missing(
                    "loss",
                    format!(
                        "the loss is {:?} of shape {:?}, and must be a float scalar: reduce it \
                         with mean(None, false)",
                        loss.dtype(),
                        loss.shape()
                    ),
                ));
            }
        }
        if mode == Mode::Train && self.optimizer.is_none() {
            return Err(missing(
                "optimizer",
                "set one with Spec::optimizer (e.g. kiln_optim::Adam::new(1e-3))".into(),
            ));
        }
        if let Some(c) = self.clip_global_norm {
            if c.is_nan() || c < 0.0 {
                return Err(missing(
                    "clip_global_norm",
                    format!("a norm of {c} cannot clip: pass a number ≥ 0 (infinity: no clipping)"),
                ));
            }
        }
        if mode == Mode::Predict && self.predictions.is_empty() {
            return Err(missing(
                "predictions",
                "add at least one with Spec::prediction".into(),
            ));
        }
        for (what, names) in [
            (
                "predictions",
                self.predictions.iter().map(|p| &p.0).collect::<Vec<_>>(),
            ),
            (
                "metrics",
                self.metrics.iter().map(|m| &m.0).collect::<Vec<_>>(),
            ),
        ] {
            let mut seen = std::collections::HashSet::new();
            for n in names {
                if !seen.insert(n) || (what == "metrics" && n == "loss") {
                    return Err(missing(
                        what,
                        format!(
                            "the name {n:?} is given twice (or is the reserved metric name \
                             \"loss\"): give each a distinct name"
                        ),
                    ));
                }
            }
        }
        if mode == Mode::Predict {
            for (name, p) in &self.predictions {
                if p.ndim() == 0 {
                    return Err(missing(
                        "predictions",
                        format!(
                            "prediction {name:?} is a 0-d array; each prediction needs the \
                             batch on its first axis"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}
