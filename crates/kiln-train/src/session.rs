//! What an estimator carries between steps and what its hooks see of it: the [`Session`]
//! (variables, optimizer, step, input position: everything a checkpoint holds), parameter
//! [`Snapshot`]s, and the evaluation loop ([`evaluate`]) with its [`Metrics`], shared by
//! [`crate::Estimator`] and the hooks' [`crate::RunContext`].
//!
//! Depends on [`crate::checkpoint`] and the crate root.

use crate::checkpoint::{self, RunState};
use crate::{Batch, Context, Cursor, Dataset, Error, Mode, Model, Result, Variables};
use kiln::{Array, DType};
use kiln_optim::{Optimizer, OptimizerState, Parameter};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// What an estimator carries between steps: everything a checkpoint holds.
pub(crate) struct Session {
    pub(crate) variables: Variables,
    pub(crate) optimizer: Option<Box<dyn Optimizer + Send>>,
    /// Optimizer state from a checkpoint, for the optimizer the first step creates.
    pub(crate) pending_optimizer: Option<OptimizerState>,
    pub(crate) global_step: u64,
    pub(crate) seed: u64,
    pub(crate) lr_scale: f64,
    pub(crate) input: Option<Cursor>,
    /// The step of the newest checkpoint written or read, and when.
    pub(crate) saved_step: Option<u64>,
    pub(crate) saved_at: Instant,
    /// Whether this process writes checkpoints (rank 0 of a multi-process job).
    pub(crate) chief: bool,
    /// Whether the processes of a multi-process job share rank 0's parameters yet.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) synced: bool,
}

/// Parameter values and optimizer state at one moment, as handles (no copy): arrays are
/// immutable, so a snapshot stays what it was.
///
/// ```
/// use kiln_train::{demo, Estimator, Hook, RunConfig, RunContext, Snapshot, StepInfo, Until};
/// /// Keeps the parameters after the first step.
/// struct First(Option<Snapshot>);
/// impl Hook<demo::Mlp> for First {
///     fn after_step(&mut self, cx: &mut RunContext<'_, demo::Mlp>, _: &StepInfo) -> kiln_train::Result<()> {
///         if self.0.is_none() {
///             self.0 = Some(cx.snapshot());
///         }
///         Ok(())
///     }
/// }
/// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
/// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
/// let mut first = First(None);
/// est.train(&input, Until::Steps(3), &mut [&mut first])?;
/// let snap = first.0.unwrap();
/// assert_eq!(snap.global_step, 1);
/// let then = snap.get("dense_0/w").unwrap().to_vec::<f32>()?;
/// let now = est.variables().get("dense_0/w").unwrap().value().to_vec::<f32>()?;
/// assert_ne!(then, now); // two more updates since
/// # Ok::<(), kiln_train::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The global step it was taken at.
    pub global_step: u64,
    values: Vec<(Arc<Parameter>, Array)>,
    optimizer: Option<OptimizerState>,
}

impl Snapshot {
    /// The value a parameter had, by name.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Hook, RunConfig, RunContext, Snapshot, Until};
    /// /// Takes a snapshot when `train` begins.
    /// struct AtBegin(Option<Snapshot>);
    /// impl Hook<demo::Mlp> for AtBegin {
    ///     fn begin(&mut self, cx: &mut RunContext<'_, demo::Mlp>) -> kiln_train::Result<()> {
    ///         self.0 = Some(cx.snapshot());
    ///         Ok(())
    ///     }
    /// }
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// est.train(&input, Until::Steps(1), &mut [])?;
    /// let mut at = AtBegin(None);
    /// est.train(&input, Until::Steps(1), &mut [&mut at])?;
    /// let snap = at.0.unwrap();
    /// assert_eq!(snap.get("dense_0/w").unwrap().shape(), &[2, 2]);
    /// assert!(snap.get("dense_9/w").is_none());
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn get(&self, name: &str) -> Option<&Array> {
        self.values
            .iter()
            .find(|(p, _)| p.name() == name)
            .map(|(_, v)| v)
    }
}

impl Session {
    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot {
            global_step: self.global_step,
            values: self
                .variables
                .parameters()
                .iter()
                .map(|p| (p.clone(), p.value()))
                .collect(),
            optimizer: self.optimizer.as_ref().map(|o| o.state()),
        }
    }

    pub(crate) fn restore_parameters(&mut self, s: &Snapshot) -> Result<()> {
        for (p, v) in &s.values {
            p.assign(v.clone())?;
        }
        Ok(())
    }

    pub(crate) fn restore(&mut self, s: &Snapshot) -> Result<()> {
        if let (Some(o), Some(state)) = (self.optimizer.as_mut(), &s.optimizer) {
            o.load_state(state)?;
        }
        for (p, v) in &s.values {
            p.assign(v.clone())?;
        }
        Ok(())
    }

    /// Writes a checkpoint of the current step into `dir` (unless this step's is there)
    /// and prunes to `keep_max`.
    pub(crate) fn save(&mut self, dir: &Path, keep_max: usize) -> Result<PathBuf> {
        let path = checkpoint::checkpoint_path(dir, self.global_step);
        if !self.chief || (self.saved_step == Some(self.global_step) && path.exists()) {
            return Ok(path);
        }
        let run = RunState {
            global_step: self.global_step,
            seed: self.seed,
            lr_scale: self.lr_scale,
            input: self.input.as_ref(),
        };
        let optimizer = self.optimizer.as_deref().map(|o| o as &dyn Optimizer);
        let path = checkpoint::write_checkpoint(dir, &run, self.variables.parameters(), optimizer)?;
        self.saved_step = Some(self.global_step);
        self.saved_at = Instant::now();
        checkpoint::prune(dir, keep_max)?;
        Ok(path)
    }
}

/// The metrics of an evaluation: each metric's value, `loss` (the mean over examples) and
/// `global_step`.
///
/// ```
/// use kiln_train::{demo, Estimator, Metrics, RunConfig};
/// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
/// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new())?;
/// let m: Metrics = est.evaluate(&input, Some(2), None)?;
/// assert_eq!(m.keys().collect::<Vec<_>>(), ["accuracy", "global_step", "loss"]);
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub type Metrics = BTreeMap<String, f64>;

/// The evaluation loop shared by [`Estimator::evaluate`] and the hooks.
pub(crate) fn evaluate<M: Model>(
    model: &M,
    vars: &mut Variables,
    global_step: u64,
    input: &Dataset<(M::Features, M::Labels)>,
    steps: Option<u64>,
) -> Result<Metrics> {
    const OP: &str = "Estimator::evaluate";
    let mut loss_sum = 0.0;
    let mut examples = 0usize;
    let mut sums: Vec<(String, f64, f64)> = Vec::new();
    for (k, batch) in input.iter().enumerate() {
        if steps.is_some_and(|s| k as u64 >= s) {
            break;
        }
        let batch = batch?;
        let n = batch.batch_len_checked(OP)?;
        let (features, labels) = batch;
        let mut cx = Context::new(vars, Mode::Eval, global_step, 0);
        let spec = model.model_fn(&features, Some(&labels), Mode::Eval, &mut cx)?;
        spec.check(OP, Mode::Eval)?;
        let Some(loss) = &spec.loss else {
            unreachable!("checked above")
        };
        let loss = loss.cast(DType::F64);
        let mut parts = Vec::with_capacity(spec.metrics.len());
        for (name, m) in &spec.metrics {
            parts.push((name, m.parts()?));
        }
        let mut outs: Vec<&Array> = vec![&loss];
        for (_, (t, c)) in &parts {
            outs.push(t);
            outs.push(c);
        }
        kiln::eval(&outs)?;
        loss_sum += loss.item::<f64>()? * n as f64;
        examples += n;
        if sums.is_empty() {
            sums = parts
                .iter()
                .map(|(n, _)| ((*n).clone(), 0.0, 0.0))
                .collect();
        }
        if sums.len() != parts.len() || sums.iter().zip(&parts).any(|(s, p)| &s.0 != p.0) {
            return Err(Error::invalid(
                OP,
                "the model function returned other metrics for a later batch: return the \
                 same metrics, in the same order, for every batch",
            ));
        }
        for (s, (_, (t, c))) in sums.iter_mut().zip(&parts) {
            s.1 += t.item::<f64>()?;
            s.2 += c.item::<f64>()?;
        }
    }
    let mut out = Metrics::new();
    out.insert(
        "loss".into(),
        if examples == 0 {
            f64::NAN
        } else {
            loss_sum / examples as f64
        },
    );
    out.insert("global_step".into(), global_step as f64);
    for (name, total, count) in sums {
        out.insert(name, total / count);
    }
    Ok(out)
}

/// The example count of a `(features, labels)` batch, or an error naming the operation.
pub(crate) trait BatchLen {
    fn batch_len_checked(&self, op: &'static str) -> Result<usize>;
}

impl<B: Batch> BatchLen for B {
    fn batch_len_checked(&self, op: &'static str) -> Result<usize> {
        match self.batch_len() {
            Some(n) => Ok(n),
            None => {
                // parts that disagree on their length have none: let the split say which
                self.split(&[])?;
                Err(Error::invalid(
                    op,
                    "a batch without a batch axis (all `()`): give features a leading axis",
                ))
            }
        }
    }
}
