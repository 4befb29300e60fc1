//! Hooks around training steps ([`Hook`]: begin, before and after each step, end, and a
//! stop request), what they may do ([`RunContext`]: save, evaluate, snapshot and restore,
//! scale the learning rate, stop), and the built-in ones: [`CheckpointSaver`] (with
//! [`CheckpointListener`]s), [`StepLog`] (JSON lines), [`StopAtStep`], [`NanGuard`],
//! [`EarlyStopping`], [`ReduceLrOnPlateau`] (with restore-best) and [`KeepBest`].
//!
//! The monitoring hooks watch a [`Monitor`]: the mean training loss since their last check,
//! or a metric of an evaluation they run every `every` steps.
//! Their own counters are not in checkpoints: a resumed run starts them afresh.
//!
//! Depends on kiln and kiln-optim's public APIs, serde_json, and `crate::estimator`,
//! `crate::model`, `crate::dataset`, `crate::error`.

use crate::estimator::{evaluate, Metrics, Session, Snapshot};
use crate::{Dataset, Error, Model, Result, RunConfig};
use kiln::Array;
use kiln_optim::Parameter;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one training step did, as hooks see it after the step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepInfo {
    /// The global step after this update (1 after the first).
    pub step: u64,
    /// The step's loss: the mean over its global batch.
    pub loss: f64,
    /// The learning rate the update used.
    pub learning_rate: f64,
    /// Examples in the global batch.
    pub examples: usize,
    /// Time the step took (graph building, evaluation, update).
    pub step_time: Duration,
    /// Time the step waited for its input.
    pub input_wait: Duration,
}

impl StepInfo {
    /// Examples per second over the step and its input wait.
    ///
    /// ```
    /// let s = kiln_train::StepInfo { step: 1, loss: 0.5, learning_rate: 0.1, examples: 64,
    ///     step_time: std::time::Duration::from_millis(30), input_wait: std::time::Duration::from_millis(2) };
    /// assert_eq!(s.examples_per_sec(), 2000.0);
    /// ```
    pub fn examples_per_sec(&self) -> f64 {
        let t = (self.step_time + self.input_wait).as_secs_f64();
        if t > 0.0 {
            self.examples as f64 / t
        } else {
            f64::INFINITY
        }
    }
}

/// What a hook may see and do during `train`.
pub struct RunContext<'a, M: Model> {
    model: &'a M,
    config: &'a RunConfig,
    session: &'a mut Session,
    stop: &'a mut Option<String>,
}

impl<'a, M: Model> RunContext<'a, M> {
    pub(crate) fn new(
        model: &'a M,
        config: &'a RunConfig,
        session: &'a mut Session,
        stop: &'a mut Option<String>,
    ) -> RunContext<'a, M> {
        RunContext {
            model,
            config,
            session,
            stop,
        }
    }

    /// The global step.
    pub fn global_step(&self) -> u64 {
        self.session.global_step
    }

    /// The run's configuration.
    pub fn config(&self) -> &RunConfig {
        self.config
    }

    /// The model directory, if any.
    pub fn model_dir(&self) -> Option<&Path> {
        self.config.model_dir.as_deref()
    }

    /// Asks `train` to stop before the next step.
    pub fn request_stop(&mut self, reason: impl Into<String>) {
        *self.stop = Some(reason.into());
    }

    /// The variables in creation order.
    pub fn parameters(&self) -> &[Arc<Parameter>] {
        self.session.variables.parameters()
    }

    /// The factor on the model function's learning rate (1 unless a hook changed it; kept in
    /// checkpoints).
    pub fn learning_rate_scale(&self) -> f64 {
        self.session.lr_scale
    }

    /// Sets the factor on the model function's learning rate (positive and finite).
    pub fn set_learning_rate_scale(&mut self, scale: f64) -> Result<()> {
        if !(scale.is_finite() && scale > 0.0) {
            return Err(Error::invalid(
                "RunContext::set_learning_rate_scale",
                format!("a scale of {scale}: pass a positive, finite number"),
            ));
        }
        self.session.lr_scale = scale;
        Ok(())
    }

    /// Writes this step's checkpoint into the model directory (once per step) and prunes to
    /// `keep_max`; returns its path.
    pub fn save_checkpoint(&mut self) -> Result<PathBuf> {
        let Some(dir) = self.config.model_dir.clone() else {
            return Err(Error::invalid(
                "RunContext::save_checkpoint",
                "the estimator has no model_dir: set one with RunConfig::model_dir",
            ));
        };
        self.session.save(&dir, self.config.keep_max)
    }

    /// When the last checkpoint was written (or the run started).
    pub fn last_saved_at(&self) -> Instant {
        self.session.saved_at
    }

    /// Evaluates the current parameters on `input` (see
    /// [`Estimator::evaluate`](crate::Estimator::evaluate)).
    pub fn evaluate(
        &mut self,
        input: &Dataset<(M::Features, M::Labels)>,
        steps: Option<u64>,
    ) -> Result<Metrics> {
        let step = self.session.global_step;
        evaluate(self.model, &mut self.session.variables, step, input, steps)
    }

    /// The parameters and optimizer state now, as handles (no copy).
    pub fn snapshot(&self) -> Snapshot {
        self.session.snapshot()
    }

    /// Puts back a snapshot's parameters only (the optimizer's moments, the global step
    /// and the input go on).
    pub fn restore_parameters(&mut self, snapshot: &Snapshot) -> Result<()> {
        self.session.restore_parameters(snapshot)
    }

    /// Puts back a snapshot's parameters and optimizer state (the global step and input
    /// go on).
    pub fn restore(&mut self, snapshot: &Snapshot) -> Result<()> {
        self.session.restore(snapshot)
    }
}

/// Code run around training steps. Every method has a default that does nothing.
///
/// ```
/// use kiln_train::{Hook, Model, RunContext, StepInfo};
/// /// Counts steps.
/// struct Count(u64);
/// impl<M: Model> Hook<M> for Count {
///     fn after_step(&mut self, _cx: &mut RunContext<'_, M>, _step: &StepInfo) -> kiln_train::Result<()> {
///         self.0 += 1;
///         Ok(())
///     }
/// }
/// ```
pub trait Hook<M: Model> {
    /// Before the first step of a `train` call.
    fn begin(&mut self, _cx: &mut RunContext<'_, M>) -> Result<()> {
        Ok(())
    }

    /// Before the step that will make the global step `step`.
    fn before_step(&mut self, _step: u64) -> Result<()> {
        Ok(())
    }

    /// After a step; an error ends `train` with it.
    fn after_step(&mut self, _cx: &mut RunContext<'_, M>, _step: &StepInfo) -> Result<()> {
        Ok(())
    }

    /// After the last step of a `train` call that ended without an error.
    fn end(&mut self, _cx: &mut RunContext<'_, M>) -> Result<()> {
        Ok(())
    }

    /// Whether `train` should stop before the next step.
    fn should_stop(&self) -> bool {
        false
    }

    /// The hook's name, for reports.
    fn name(&self) -> String {
        let full = std::any::type_name::<Self>();
        let path = full.split('<').next().unwrap_or(full);
        path.rsplit("::").next().unwrap_or(path).to_string()
    }
}

/// Told when a [`CheckpointSaver`] saves.
pub trait CheckpointListener: Send {
    /// Before step `step`'s checkpoint is written.
    fn before_save(&mut self, _step: u64) -> Result<()> {
        Ok(())
    }

    /// After step `step`'s checkpoint was written to `path`.
    fn after_save(&mut self, _step: u64, _path: &Path) -> Result<()> {
        Ok(())
    }
}

/// Saves a checkpoint every `every_steps` steps and/or `every_secs` seconds, and at the end
/// of `train`; the estimator adds one when its config asks for saving.
///
/// ```
/// let saver = kiln_train::CheckpointSaver::new(Some(100), None);
/// assert!(saver.last_saved().is_none());
/// ```
pub struct CheckpointSaver {
    every_steps: Option<u64>,
    every_secs: Option<f64>,
    listeners: Vec<Box<dyn CheckpointListener>>,
    last: Option<PathBuf>,
}

impl CheckpointSaver {
    /// A saver (set at least one of the two, or it saves only at the end).
    pub fn new(every_steps: Option<u64>, every_secs: Option<f64>) -> CheckpointSaver {
        CheckpointSaver {
            every_steps,
            every_secs,
            listeners: Vec::new(),
            last: None,
        }
    }

    /// Adds a listener.
    pub fn listener(mut self, l: impl CheckpointListener + 'static) -> CheckpointSaver {
        self.listeners.push(Box::new(l));
        self
    }

    /// The last checkpoint it wrote.
    pub fn last_saved(&self) -> Option<PathBuf> {
        self.last.clone()
    }

    fn save<M: Model>(&mut self, cx: &mut RunContext<'_, M>) -> Result<()> {
        let step = cx.global_step();
        for l in &mut self.listeners {
            l.before_save(step)?;
        }
        let path = cx.save_checkpoint()?;
        for l in &mut self.listeners {
            l.after_save(step, &path)?;
        }
        self.last = Some(path);
        Ok(())
    }
}

impl<M: Model> Hook<M> for CheckpointSaver {
    fn after_step(&mut self, cx: &mut RunContext<'_, M>, step: &StepInfo) -> Result<()> {
        let by_steps = self
            .every_steps
            .is_some_and(|n| step.step.is_multiple_of(n));
        let by_time = self
            .every_secs
            .is_some_and(|s| cx.last_saved_at().elapsed().as_secs_f64() >= s);
        if by_steps || by_time {
            self.save(cx)?;
        }
        Ok(())
    }

    fn end(&mut self, cx: &mut RunContext<'_, M>) -> Result<()> {
        self.save(cx)
    }
}

/// Writes a JSON line every `every` steps: `step`, `loss` (the mean since the last line),
/// `examples_per_sec`, `learning_rate`, `step_ms` and `input_wait_ms` (means too).
///
/// ```
/// let log = kiln_train::StepLog::new(Box::new(std::io::sink()), 10);
/// # let _ = log;
/// ```
pub struct StepLog {
    out: Box<dyn Write + Send>,
    every: u64,
    loss: f64,
    steps: u64,
    examples: usize,
    time: Duration,
    wait: Duration,
}

impl StepLog {
    /// Logs to `out` every `every` steps (at least 1).
    pub fn new(out: Box<dyn Write + Send>, every: u64) -> StepLog {
        StepLog {
            out,
            every: every.max(1),
            loss: 0.0,
            steps: 0,
            examples: 0,
            time: Duration::ZERO,
            wait: Duration::ZERO,
        }
    }

    /// Appends to the file at `path`.
    pub fn to_file(path: impl AsRef<Path>, every: u64) -> Result<StepLog> {
        let path = path.as_ref();
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| Error::io("StepLog::to_file", path, e))?;
        Ok(StepLog::new(Box::new(f), every))
    }

    /// Logs to stderr.
    pub fn to_stderr(every: u64) -> StepLog {
        StepLog::new(Box::new(std::io::stderr()), every)
    }
}

impl<M: Model> Hook<M> for StepLog {
    fn after_step(&mut self, _cx: &mut RunContext<'_, M>, step: &StepInfo) -> Result<()> {
        self.loss += step.loss;
        self.steps += 1;
        self.examples += step.examples;
        self.time += step.step_time;
        self.wait += step.input_wait;
        if !step.step.is_multiple_of(self.every) {
            return Ok(());
        }
        let n = self.steps as f64;
        let total = (self.time + self.wait).as_secs_f64();
        let line = serde_json::json!({
            "step": step.step,
            "loss": self.loss / n,
            "examples_per_sec": if total > 0.0 { self.examples as f64 / total } else { 0.0 },
            "learning_rate": step.learning_rate,
            "step_ms": self.time.as_secs_f64() * 1e3 / n,
            "input_wait_ms": self.wait.as_secs_f64() * 1e3 / n,
        });
        writeln!(self.out, "{line}").map_err(|e| Error::io("StepLog", "the log", e))?;
        self.out
            .flush()
            .map_err(|e| Error::io("StepLog", "the log", e))?;
        self.loss = 0.0;
        self.steps = 0;
        self.examples = 0;
        self.time = Duration::ZERO;
        self.wait = Duration::ZERO;
        Ok(())
    }
}

/// Stops training once the global step reaches `last_step`.
///
/// ```
/// let stop = kiln_train::StopAtStep::new(500);
/// # let _ = stop;
/// ```
pub struct StopAtStep {
    last_step: u64,
    reached: bool,
}

impl StopAtStep {
    /// Stops at `last_step`.
    pub fn new(last_step: u64) -> StopAtStep {
        StopAtStep {
            last_step,
            reached: false,
        }
    }
}

impl<M: Model> Hook<M> for StopAtStep {
    fn begin(&mut self, cx: &mut RunContext<'_, M>) -> Result<()> {
        self.reached = cx.global_step() >= self.last_step;
        Ok(())
    }

    fn after_step(&mut self, _cx: &mut RunContext<'_, M>, step: &StepInfo) -> Result<()> {
        self.reached = step.step >= self.last_step;
        Ok(())
    }

    fn should_stop(&self) -> bool {
        self.reached
    }
}

/// Ends training with [`Error::NonFinite`] — naming the step and the first parameter
/// holding NaN or infinity — when the loss or a parameter goes non-finite (parameters
/// checked every `every` steps, the loss every step).
///
/// ```
/// let guard = kiln_train::NanGuard::new(1);
/// # let _ = guard;
/// ```
pub struct NanGuard {
    every: u64,
}

impl NanGuard {
    /// Checks parameters every `every` steps (at least 1).
    pub fn new(every: u64) -> NanGuard {
        NanGuard {
            every: every.max(1),
        }
    }
}

/// The first of `params` holding a non-finite value (one evaluation for all).
pub(crate) fn first_non_finite(params: &[Arc<Parameter>]) -> Result<Option<String>> {
    let probes: Vec<Array> = params
        .iter()
        .map(|p| p.value().try_mul(0.0)?.try_sum(None, false))
        .collect::<kiln::Result<_>>()?;
    let refs: Vec<&Array> = probes.iter().collect();
    kiln::eval(&refs)?;
    for (p, probe) in params.iter().zip(&probes) {
        if probe.cast(kiln::DType::F64).item::<f64>()?.is_nan() {
            return Ok(Some(p.name().to_string()));
        }
    }
    Ok(None)
}

impl<M: Model> Hook<M> for NanGuard {
    fn after_step(&mut self, cx: &mut RunContext<'_, M>, step: &StepInfo) -> Result<()> {
        let bad_loss = !step.loss.is_finite();
        if bad_loss || step.step.is_multiple_of(self.every) {
            let parameter = first_non_finite(cx.parameters())?;
            if bad_loss || parameter.is_some() {
                return Err(Error::NonFinite {
                    step: step.step,
                    loss: step.loss,
                    parameter,
                });
            }
        }
        Ok(())
    }
}

/// What a monitoring hook watches.
pub enum Monitor<M: Model> {
    /// The mean training loss since the last check (minimise it).
    TrainLoss,
    /// A metric (or `loss`) of an evaluation on `input` (at most `steps` batches).
    Eval {
        /// The evaluation input.
        input: Dataset<(M::Features, M::Labels)>,
        /// At most this many batches (`None`: all).
        steps: Option<u64>,
        /// The metric's name (`loss` or one the model function returns).
        metric: String,
    },
}

/// Whether a smaller or a larger monitored value is better.
///
/// ```
/// assert!(kiln_train::Goal::Minimize.better(1.0, 2.0, 0.0));
/// assert!(kiln_train::Goal::Maximize.better(2.0, 1.0, 0.5));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Goal {
    /// Smaller is better (a loss).
    Minimize,
    /// Larger is better (an accuracy).
    Maximize,
}

impl Goal {
    /// Whether `value` beats `best` by more than `min_delta`.
    pub fn better(self, value: f64, best: f64, min_delta: f64) -> bool {
        match self {
            Goal::Minimize => value < best - min_delta,
            Goal::Maximize => value > best + min_delta,
        }
    }
}

/// The watching shared by the monitoring hooks.
struct Watch<M: Model> {
    monitor: Monitor<M>,
    every: u64,
    goal: Goal,
    min_delta: f64,
    loss_sum: f64,
    loss_n: u64,
    best: Option<f64>,
}

impl<M: Model> Watch<M> {
    fn new(monitor: Monitor<M>, every: u64, goal: Goal) -> Watch<M> {
        Watch {
            monitor,
            every: every.max(1),
            goal,
            min_delta: 0.0,
            loss_sum: 0.0,
            loss_n: 0,
            best: None,
        }
    }

    /// After a step: `None` between checks, else the value and whether it is a new best.
    fn observe(
        &mut self,
        cx: &mut RunContext<'_, M>,
        step: &StepInfo,
    ) -> Result<Option<(f64, bool)>> {
        self.loss_sum += step.loss;
        self.loss_n += 1;
        if !step.step.is_multiple_of(self.every) {
            return Ok(None);
        }
        let value = match &self.monitor {
            Monitor::TrainLoss => self.loss_sum / self.loss_n as f64,
            Monitor::Eval {
                input,
                steps,
                metric,
            } => {
                let m = cx.evaluate(input, *steps)?;
                *m.get(metric).ok_or_else(|| {
                    Error::invalid(
                        "Monitor::Eval",
                        format!(
                            "the evaluation has no metric {metric:?} (it has {:?})",
                            m.keys().collect::<Vec<_>>()
                        ),
                    )
                })?
            }
        };
        self.loss_sum = 0.0;
        self.loss_n = 0;
        let improved = !value.is_nan()
            && self
                .best
                .is_none_or(|b| self.goal.better(value, b, self.min_delta));
        if improved {
            self.best = Some(value);
        }
        Ok(Some((value, improved)))
    }
}

/// Stops training when the monitored value has not improved by more than `min_delta` for
/// `patience` checks in a row.
pub struct EarlyStopping<M: Model> {
    watch: Watch<M>,
    patience: u32,
    bad: u32,
    stop: bool,
}

impl<M: Model> EarlyStopping<M> {
    /// Checks `monitor` every `every` steps.
    pub fn new(monitor: Monitor<M>, every: u64, goal: Goal, patience: u32) -> EarlyStopping<M> {
        EarlyStopping {
            watch: Watch::new(monitor, every, goal),
            patience,
            bad: 0,
            stop: false,
        }
    }

    /// Improvements of at most this much do not count.
    pub fn min_delta(mut self, d: f64) -> EarlyStopping<M> {
        self.watch.min_delta = d;
        self
    }

    /// The best value seen.
    pub fn best(&self) -> Option<f64> {
        self.watch.best
    }
}

impl<M: Model> Hook<M> for EarlyStopping<M> {
    fn after_step(&mut self, cx: &mut RunContext<'_, M>, step: &StepInfo) -> Result<()> {
        if let Some((_, improved)) = self.watch.observe(cx, step)? {
            self.bad = if improved { 0 } else { self.bad + 1 };
            self.stop = self.bad >= self.patience.max(1);
        }
        Ok(())
    }

    fn should_stop(&self) -> bool {
        self.stop
    }
}

/// Multiplies the learning-rate scale by `factor` when the monitored value has not
/// improved for `patience` checks, and (with `restore_best`) puts back the parameters and
/// optimizer state of the best check.
pub struct ReduceLrOnPlateau<M: Model> {
    watch: Watch<M>,
    factor: f64,
    patience: u32,
    min_scale: f64,
    restore_best: bool,
    bad: u32,
    best: Option<Snapshot>,
    reductions: u32,
}

impl<M: Model> ReduceLrOnPlateau<M> {
    /// Checks `monitor` every `every` steps; `factor` in (0, 1).
    pub fn new(
        monitor: Monitor<M>,
        every: u64,
        goal: Goal,
        factor: f64,
        patience: u32,
    ) -> Result<ReduceLrOnPlateau<M>> {
        if !(factor > 0.0 && factor < 1.0) {
            return Err(Error::invalid(
                "ReduceLrOnPlateau::new",
                format!("a factor of {factor}: pass one in (0, 1), e.g. 0.5"),
            ));
        }
        Ok(ReduceLrOnPlateau {
            watch: Watch::new(monitor, every, goal),
            factor,
            patience,
            min_scale: 0.0,
            restore_best: false,
            bad: 0,
            best: None,
            reductions: 0,
        })
    }

    /// Never scales below this.
    pub fn min_scale(mut self, s: f64) -> ReduceLrOnPlateau<M> {
        self.min_scale = s;
        self
    }

    /// Restores the best check's parameters and optimizer state at each reduction.
    pub fn restore_best(mut self, on: bool) -> ReduceLrOnPlateau<M> {
        self.restore_best = on;
        self
    }

    /// How many times it reduced the rate.
    pub fn reductions(&self) -> u32 {
        self.reductions
    }
}

impl<M: Model> Hook<M> for ReduceLrOnPlateau<M> {
    fn after_step(&mut self, cx: &mut RunContext<'_, M>, step: &StepInfo) -> Result<()> {
        let Some((_, improved)) = self.watch.observe(cx, step)? else {
            return Ok(());
        };
        if improved {
            self.bad = 0;
            if self.restore_best {
                self.best = Some(cx.snapshot());
            }
            return Ok(());
        }
        self.bad += 1;
        if self.bad >= self.patience.max(1) {
            self.bad = 0;
            let scale = (cx.learning_rate_scale() * self.factor).max(self.min_scale);
            if scale > 0.0 && scale < cx.learning_rate_scale() {
                cx.set_learning_rate_scale(scale)?;
                self.reductions += 1;
            }
            if let Some(best) = &self.best {
                cx.restore(best)?;
            }
        }
        Ok(())
    }
}

/// Keeps the checkpoint of the best check in `model_dir/best/` (one file, safe from
/// pruning), with `best.json` saying its step and value.
pub struct KeepBest<M: Model> {
    watch: Watch<M>,
    kept: Option<PathBuf>,
}

impl<M: Model> KeepBest<M> {
    /// Checks `monitor` every `every` steps.
    pub fn new(monitor: Monitor<M>, every: u64, goal: Goal) -> KeepBest<M> {
        KeepBest {
            watch: Watch::new(monitor, every, goal),
            kept: None,
        }
    }

    /// The kept checkpoint.
    pub fn kept(&self) -> Option<&Path> {
        self.kept.as_deref()
    }

    /// The best value seen.
    pub fn best(&self) -> Option<f64> {
        self.watch.best
    }
}

impl<M: Model> Hook<M> for KeepBest<M> {
    fn after_step(&mut self, cx: &mut RunContext<'_, M>, step: &StepInfo) -> Result<()> {
        const OP: &str = "KeepBest";
        let Some((value, true)) = self.watch.observe(cx, step)? else {
            return Ok(());
        };
        let source = cx.save_checkpoint()?;
        let Some(dir) = cx.model_dir().map(|d| d.join("best")) else {
            return Ok(());
        };
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(OP, &dir, e))?;
        let Some(name) = source.file_name() else {
            return Ok(());
        };
        let target = dir.join(name);
        let tmp = dir.join(".best.tmp");
        std::fs::copy(&source, &tmp).map_err(|e| Error::io(OP, &tmp, e))?;
        std::fs::rename(&tmp, &target).map_err(|e| Error::io(OP, &target, e))?;
        let info =
            serde_json::json!({"step": step.step, "value": value, "file": name.to_string_lossy()});
        let json = dir.join("best.json");
        std::fs::write(&json, format!("{info}\n")).map_err(|e| Error::io(OP, &json, e))?;
        if let Some(old) = self.kept.replace(target.clone()) {
            if old != target {
                let _ = std::fs::remove_file(old);
            }
        }
        Ok(())
    }
}
