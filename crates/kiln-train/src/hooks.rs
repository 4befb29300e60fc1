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
//! Depends on kiln and kiln-optim's public APIs, serde_json, and `crate::session` (the estimator's state),
//! `crate::model`, `crate::dataset`, `crate::error`.

use crate::session::{evaluate, Metrics, Session, Snapshot};
use crate::{Dataset, Error, Model, Result, RunConfig};
use kiln::Array;
use kiln_optim::Parameter;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one training step did, as hooks see it after the step.
///
/// ```
/// use kiln_train::{demo, Estimator, Hook, RunConfig, RunContext, StepInfo, Until};
/// /// Records every step.
/// struct Record(Vec<StepInfo>);
/// impl Hook<demo::Mlp> for Record {
///     fn after_step(&mut self, _cx: &mut RunContext<'_, demo::Mlp>, step: &StepInfo) -> kiln_train::Result<()> {
///         self.0.push(step.clone());
///         Ok(())
///     }
/// }
/// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
/// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
/// let mut rec = Record(Vec::new());
/// est.train(&input, Until::Steps(2), &mut [&mut rec])?;
/// assert_eq!(rec.0.iter().map(|s| s.step).collect::<Vec<_>>(), [1, 2]);
/// assert_eq!((rec.0[0].examples, rec.0[0].learning_rate), (4, 1e-3));
/// # Ok::<(), kiln_train::Error>(())
/// ```
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
///
/// ```
/// use kiln_train::{demo, Estimator, Hook, RunConfig, RunContext, StepInfo, Until};
/// /// Stops once a step's loss is below a threshold.
/// struct StopBelow(f64);
/// impl Hook<demo::Mlp> for StopBelow {
///     fn after_step(&mut self, cx: &mut RunContext<'_, demo::Mlp>, step: &StepInfo) -> kiln_train::Result<()> {
///         if step.loss < self.0 {
///             cx.request_stop(format!("loss below {} at step {}", self.0, cx.global_step()));
///         }
///         Ok(())
///     }
/// }
/// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
/// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
/// let r = est.train(&input, Until::Steps(100), &mut [&mut StopBelow(f64::INFINITY)])?;
/// assert_eq!((r.steps, r.stopped_by.as_str()), (1, "loss below inf at step 1"));
/// # Ok::<(), kiln_train::Error>(())
/// ```
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
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Hook, RunConfig, RunContext, Until};
    /// /// Remembers the step `train` began at.
    /// struct Start(u64);
    /// impl Hook<demo::Mlp> for Start {
    ///     fn begin(&mut self, cx: &mut RunContext<'_, demo::Mlp>) -> kiln_train::Result<()> {
    ///         self.0 = cx.global_step();
    ///         Ok(())
    ///     }
    /// }
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// est.train(&input, Until::Steps(2), &mut [])?;
    /// let mut start = Start(0);
    /// est.train(&input, Until::Steps(1), &mut [&mut start])?;
    /// assert_eq!(start.0, 2);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn global_step(&self) -> u64 {
        self.session.global_step
    }

    /// The run's configuration.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Hook, RunConfig, RunContext, Until};
    /// /// Remembers the run's seed.
    /// struct Seed(u64);
    /// impl Hook<demo::Mlp> for Seed {
    ///     fn begin(&mut self, cx: &mut RunContext<'_, demo::Mlp>) -> kiln_train::Result<()> {
    ///         self.0 = cx.config().seed;
    ///         Ok(())
    ///     }
    /// }
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().seed(6).progress(false))?;
    /// let mut seed = Seed(0);
    /// est.train(&input, Until::Steps(1), &mut [&mut seed])?;
    /// assert_eq!(seed.0, 6);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn config(&self) -> &RunConfig {
        self.config
    }

    /// The model directory, if any.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Hook, RunConfig, RunContext, Until};
    /// /// Saves at the end, where there is a model directory.
    /// struct SaveIfDir(bool);
    /// impl Hook<demo::Mlp> for SaveIfDir {
    ///     fn end(&mut self, cx: &mut RunContext<'_, demo::Mlp>) -> kiln_train::Result<()> {
    ///         if cx.model_dir().is_some() {
    ///             cx.save_checkpoint()?;
    ///             self.0 = true;
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// let mut hook = SaveIfDir(false);
    /// est.train(&input, Until::Steps(1), &mut [&mut hook])?;
    /// assert!(!hook.0); // no model_dir in the config
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn model_dir(&self) -> Option<&Path> {
        self.config.model_dir.as_deref()
    }

    /// Asks `train` to stop before the next step.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Hook, RunConfig, RunContext, Until};
    /// /// Refuses to train past a budget of steps.
    /// struct Budget(u64);
    /// impl Hook<demo::Mlp> for Budget {
    ///     fn begin(&mut self, cx: &mut RunContext<'_, demo::Mlp>) -> kiln_train::Result<()> {
    ///         if cx.global_step() >= self.0 {
    ///             cx.request_stop("over budget");
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// est.train(&input, Until::Steps(2), &mut [])?;
    /// let r = est.train(&input, Until::Steps(5), &mut [&mut Budget(2)])?;
    /// assert_eq!((r.steps, r.stopped_by.as_str()), (0, "over budget"));
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn request_stop(&mut self, reason: impl Into<String>) {
        *self.stop = Some(reason.into());
    }

    /// The variables in creation order.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Hook, RunConfig, RunContext, Until};
    /// /// Lists the variables when `train` ends.
    /// struct Names(Vec<String>);
    /// impl Hook<demo::Mlp> for Names {
    ///     fn end(&mut self, cx: &mut RunContext<'_, demo::Mlp>) -> kiln_train::Result<()> {
    ///         self.0 = cx.parameters().iter().map(|p| p.name().to_string()).collect();
    ///         Ok(())
    ///     }
    /// }
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// let mut names = Names(Vec::new());
    /// est.train(&input, Until::Steps(1), &mut [&mut names])?;
    /// assert_eq!(names.0, ["dense_0/w", "dense_0/b"]); // creation order
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn parameters(&self) -> &[Arc<Parameter>] {
        self.session.variables.parameters()
    }

    /// The factor on the model function's learning rate (1 unless a hook changed it; kept in
    /// checkpoints).
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Hook, RunConfig, RunContext, Until};
    /// /// Remembers the scale when `train` begins.
    /// struct Scale(f64);
    /// impl Hook<demo::Mlp> for Scale {
    ///     fn begin(&mut self, cx: &mut RunContext<'_, demo::Mlp>) -> kiln_train::Result<()> {
    ///         self.0 = cx.learning_rate_scale();
    ///         Ok(())
    ///     }
    /// }
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// let mut scale = Scale(0.0);
    /// est.train(&input, Until::Steps(1), &mut [&mut scale])?;
    /// assert_eq!(scale.0, 1.0); // no hook has changed it
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn learning_rate_scale(&self) -> f64 {
        self.session.lr_scale
    }

    /// Sets the factor on the model function's learning rate (positive and finite).
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Hook, RunConfig, RunContext, StepInfo, Until};
    /// /// Halves the learning rate, and records the rate each step used.
    /// struct Halve(Vec<f64>);
    /// impl Hook<demo::Mlp> for Halve {
    ///     fn begin(&mut self, cx: &mut RunContext<'_, demo::Mlp>) -> kiln_train::Result<()> {
    ///         assert!(cx.set_learning_rate_scale(0.0).is_err());
    ///         cx.set_learning_rate_scale(0.5)
    ///     }
    ///     fn after_step(&mut self, _cx: &mut RunContext<'_, demo::Mlp>, step: &StepInfo) -> kiln_train::Result<()> {
    ///         self.0.push(step.learning_rate);
    ///         Ok(())
    ///     }
    /// }
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// let mut halve = Halve(Vec::new());
    /// est.train(&input, Until::Steps(2), &mut [&mut halve])?;
    /// assert_eq!(halve.0, [5e-4, 5e-4]); // the Mlp's 1e-3, halved
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
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
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Hook, RunConfig, RunContext, StepInfo, Until};
    /// /// Saves after step 2.
    /// struct SaveAt2(Option<std::path::PathBuf>);
    /// impl Hook<demo::Mlp> for SaveAt2 {
    ///     fn after_step(&mut self, cx: &mut RunContext<'_, demo::Mlp>, step: &StepInfo) -> kiln_train::Result<()> {
    ///         if step.step == 2 {
    ///             self.0 = Some(cx.save_checkpoint()?);
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// let dir = std::env::temp_dir().join(format!("kiln-cx-save-{}", std::process::id()));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().model_dir(&dir).progress(false))?;
    /// let mut hook = SaveAt2(None);
    /// est.train(&input, Until::Steps(3), &mut [&mut hook])?;
    /// assert_eq!(hook.0, Some(kiln_train::checkpoint_path(&dir, 2)));
    /// assert_eq!(kiln_train::read_checkpoint(hook.0.unwrap())?.global_step, 2);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
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
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Hook, RunConfig, RunContext, StepInfo, Until};
    /// use std::time::Duration;
    /// /// Saves when a minute has passed since the last checkpoint.
    /// struct EveryMinute(u32);
    /// impl Hook<demo::Mlp> for EveryMinute {
    ///     fn after_step(&mut self, cx: &mut RunContext<'_, demo::Mlp>, _: &StepInfo) -> kiln_train::Result<()> {
    ///         if cx.last_saved_at().elapsed() >= Duration::from_secs(60) {
    ///             cx.save_checkpoint()?;
    ///             self.0 += 1;
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// let mut hook = EveryMinute(0);
    /// est.train(&input, Until::Steps(2), &mut [&mut hook])?;
    /// assert_eq!(hook.0, 0); // the run started less than a minute ago
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn last_saved_at(&self) -> Instant {
        self.session.saved_at
    }

    /// Evaluates the current parameters on `input` (see
    /// [`Estimator::evaluate`](crate::Estimator::evaluate)).
    ///
    /// ```
    /// use kiln::Array;
    /// use kiln_train::{demo, Dataset, Estimator, Hook, RunConfig, RunContext, StepInfo, Until};
    /// /// Evaluates every 2 steps.
    /// struct EvalEvery2 {
    ///     input: Dataset<(Array, Array)>,
    ///     losses: Vec<f64>,
    /// }
    /// impl Hook<demo::Mlp> for EvalEvery2 {
    ///     fn after_step(&mut self, cx: &mut RunContext<'_, demo::Mlp>, step: &StepInfo) -> kiln_train::Result<()> {
    ///         if step.step % 2 == 0 {
    ///             self.losses.push(cx.evaluate(&self.input, Some(1))?["loss"]);
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// let mut hook = EvalEvery2 { input: input.clone(), losses: Vec::new() };
    /// est.train(&input, Until::Steps(4), &mut [&mut hook])?;
    /// assert_eq!(hook.losses.len(), 2);
    /// assert!(hook.losses.iter().all(|l| l.is_finite()));
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn evaluate(
        &mut self,
        input: &Dataset<(M::Features, M::Labels)>,
        steps: Option<u64>,
    ) -> Result<Metrics> {
        let step = self.session.global_step;
        evaluate(self.model, &mut self.session.variables, step, input, steps)
    }

    /// The parameters and optimizer state now, as handles (no copy).
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Hook, RunConfig, RunContext, Snapshot, Until};
    /// /// Takes a snapshot when `train` ends.
    /// struct AtEnd(Option<Snapshot>);
    /// impl Hook<demo::Mlp> for AtEnd {
    ///     fn end(&mut self, cx: &mut RunContext<'_, demo::Mlp>) -> kiln_train::Result<()> {
    ///         self.0 = Some(cx.snapshot());
    ///         Ok(())
    ///     }
    /// }
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// let mut at = AtEnd(None);
    /// est.train(&input, Until::Steps(3), &mut [&mut at])?;
    /// let snap = at.0.unwrap();
    /// assert_eq!(snap.global_step, 3);
    /// assert_eq!(snap.get("dense_0/b").unwrap().shape(), &[2]);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn snapshot(&self) -> Snapshot {
        self.session.snapshot()
    }

    /// Puts back a snapshot's parameters only (the optimizer's moments, the global step
    /// and the input go on).
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Hook, RunConfig, RunContext, Snapshot, Until};
    /// /// Puts the parameters back when `train` ends.
    /// struct Undo(Option<Snapshot>);
    /// impl Hook<demo::Mlp> for Undo {
    ///     fn begin(&mut self, cx: &mut RunContext<'_, demo::Mlp>) -> kiln_train::Result<()> {
    ///         self.0 = Some(cx.snapshot());
    ///         Ok(())
    ///     }
    ///     fn end(&mut self, cx: &mut RunContext<'_, demo::Mlp>) -> kiln_train::Result<()> {
    ///         cx.restore_parameters(self.0.as_ref().unwrap())
    ///     }
    /// }
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// est.train(&input, Until::Steps(1), &mut [])?;
    /// let w = |e: &Estimator<demo::Mlp>| e.variables().get("dense_0/w").unwrap().value().to_vec::<f32>();
    /// let before = w(&est)?;
    /// est.train(&input, Until::Steps(2), &mut [&mut Undo(None)])?;
    /// assert_eq!(w(&est)?, before);
    /// assert_eq!(est.optimizer().unwrap().state().steps(), 3); // the optimizer's state went on
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn restore_parameters(&mut self, snapshot: &Snapshot) -> Result<()> {
        self.session.restore_parameters(snapshot)
    }

    /// Puts back a snapshot's parameters and optimizer state (the global step and input
    /// go on).
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Hook, RunConfig, RunContext, Snapshot, Until};
    /// /// Puts the parameters and the optimizer's state back when `train` ends.
    /// struct Undo(Option<Snapshot>);
    /// impl Hook<demo::Mlp> for Undo {
    ///     fn begin(&mut self, cx: &mut RunContext<'_, demo::Mlp>) -> kiln_train::Result<()> {
    ///         self.0 = Some(cx.snapshot());
    ///         Ok(())
    ///     }
    ///     fn end(&mut self, cx: &mut RunContext<'_, demo::Mlp>) -> kiln_train::Result<()> {
    ///         cx.restore(self.0.as_ref().unwrap())
    ///     }
    /// }
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// est.train(&input, Until::Steps(1), &mut [])?;
    /// let w = |e: &Estimator<demo::Mlp>| e.variables().get("dense_0/w").unwrap().value().to_vec::<f32>();
    /// let before = w(&est)?;
    /// est.train(&input, Until::Steps(2), &mut [&mut Undo(None)])?;
    /// assert_eq!(w(&est)?, before);
    /// assert_eq!(est.optimizer().unwrap().state().steps(), 1);
    /// assert_eq!(est.global_step(), 3); // the global step went on
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
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
    ///
    /// ```
    /// use kiln_train::{demo, Hook, StopAtStep};
    /// assert_eq!(Hook::<demo::Mlp>::name(&StopAtStep::new(5)), "StopAtStep");
    /// ```
    fn name(&self) -> String {
        let full = std::any::type_name::<Self>();
        let path = full.split('<').next().unwrap_or(full);
        path.rsplit("::").next().unwrap_or(path).to_string()
    }
}

/// Told when a [`CheckpointSaver`] saves.
///
/// ```
/// use kiln_train::{demo, CheckpointListener, CheckpointSaver, Estimator, RunConfig, Until};
/// use std::sync::{Arc, Mutex};
/// /// Remembers the steps saved.
/// #[derive(Clone, Default)]
/// struct Saved(Arc<Mutex<Vec<u64>>>);
/// impl CheckpointListener for Saved {
///     fn after_save(&mut self, step: u64, path: &std::path::Path) -> kiln_train::Result<()> {
///         assert!(path.exists());
///         self.0.lock().unwrap().push(step);
///         Ok(())
///     }
/// }
/// let dir = std::env::temp_dir().join(format!("kiln-listener-{}", std::process::id()));
/// # std::fs::remove_dir_all(&dir).ok();
/// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
/// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().model_dir(&dir).progress(false))?;
/// let saved = Saved::default();
/// let mut saver = CheckpointSaver::new(Some(2), None).listener(saved.clone());
/// est.train(&input, Until::Steps(3), &mut [&mut saver])?;
/// assert_eq!(*saved.0.lock().unwrap(), [2, 3]); // every 2 steps, and at the end
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), kiln_train::Error>(())
/// ```
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
    ///
    /// ```
    /// use kiln_train::{demo, CheckpointSaver, Estimator, RunConfig, Until};
    /// let dir = std::env::temp_dir().join(format!("kiln-saver-new-{}", std::process::id()));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().model_dir(&dir).progress(false))?;
    /// let mut saver = CheckpointSaver::new(Some(2), None);
    /// est.train(&input, Until::Steps(5), &mut [&mut saver])?;
    /// let steps: Vec<u64> = kiln_train::list_checkpoints(&dir)?.into_iter().map(|c| c.0).collect();
    /// assert_eq!(steps, [2, 4, 5]);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn new(every_steps: Option<u64>, every_secs: Option<f64>) -> CheckpointSaver {
        CheckpointSaver {
            every_steps,
            every_secs,
            listeners: Vec::new(),
            last: None,
        }
    }

    /// Adds a listener.
    ///
    /// ```
    /// use kiln_train::{demo, CheckpointListener, CheckpointSaver, Estimator, RunConfig, Until};
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// /// Counts saves.
    /// struct Count(Arc<AtomicUsize>);
    /// impl CheckpointListener for Count {
    ///     fn before_save(&mut self, _step: u64) -> kiln_train::Result<()> {
    ///         self.0.fetch_add(1, Ordering::SeqCst);
    ///         Ok(())
    ///     }
    /// }
    /// let dir = std::env::temp_dir().join(format!("kiln-saver-listener-{}", std::process::id()));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().model_dir(&dir).progress(false))?;
    /// let saves = Arc::new(AtomicUsize::new(0));
    /// let mut saver = CheckpointSaver::new(None, None).listener(Count(saves.clone()));
    /// est.train(&input, Until::Steps(3), &mut [&mut saver])?;
    /// assert_eq!(saves.load(Ordering::SeqCst), 1); // only at the end
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn listener(mut self, l: impl CheckpointListener + 'static) -> CheckpointSaver {
        self.listeners.push(Box::new(l));
        self
    }

    /// The last checkpoint it wrote.
    ///
    /// ```
    /// use kiln_train::{demo, CheckpointSaver, Estimator, RunConfig, Until};
    /// let dir = std::env::temp_dir().join(format!("kiln-saver-last-{}", std::process::id()));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().model_dir(&dir).progress(false))?;
    /// let mut saver = CheckpointSaver::new(Some(2), None);
    /// est.train(&input, Until::Steps(3), &mut [&mut saver])?;
    /// assert_eq!(saver.last_saved(), Some(kiln_train::checkpoint_path(&dir, 3)));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
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
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, RunConfig, StepLog, Until};
    /// use std::sync::{Arc, Mutex};
    /// /// A buffer the example reads back.
    /// #[derive(Clone, Default)]
    /// struct Buf(Arc<Mutex<Vec<u8>>>);
    /// impl std::io::Write for Buf {
    ///     fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
    ///         self.0.lock().unwrap().extend_from_slice(b);
    ///         Ok(b.len())
    ///     }
    ///     fn flush(&mut self) -> std::io::Result<()> {
    ///         Ok(())
    ///     }
    /// }
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// let buf = Buf::default();
    /// let mut log = StepLog::new(Box::new(buf.clone()), 2);
    /// est.train(&input, Until::Steps(4), &mut [&mut log])?;
    /// let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    /// assert_eq!(text.lines().count(), 2); // after steps 2 and 4
    /// assert!(text.lines().next().unwrap().contains("\"step\":2"), "{text}");
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
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
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, RunConfig, StepLog, Until};
    /// let path = std::env::temp_dir().join(format!("kiln-steplog-{}.jsonl", std::process::id()));
    /// # std::fs::remove_file(&path).ok();
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// let mut log = StepLog::to_file(&path, 1)?;
    /// est.train(&input, Until::Steps(3), &mut [&mut log])?;
    /// assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);
    /// # std::fs::remove_file(&path).ok();
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
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
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, RunConfig, StepLog, Until};
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// let mut log = StepLog::to_stderr(2); // a JSON line after step 2
    /// let r = est.train(&input, Until::Steps(2), &mut [&mut log])?;
    /// assert_eq!(r.steps, 2);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
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
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, RunConfig, StopAtStep, Until};
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// let mut stop = StopAtStep::new(3);
    /// let r = est.train(&input, Until::Steps(100), &mut [&mut stop])?;
    /// assert_eq!((r.global_step, r.stopped_by.as_str()), (3, "a hook (StopAtStep)"));
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
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
    ///
    /// ```
    /// use kiln_train::{demo, Dataset, Error, Estimator, NanGuard, RunConfig, Until};
    /// let bad = demo::collate(vec![(vec![f32::NAN, 0.0], 0), (vec![1.0, 0.0], 1)])?;
    /// let input = Dataset::from_slices(vec![bad]).repeat(None);
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// let mut guard = NanGuard::new(1);
    /// let e = est.train(&input, Until::Steps(5), &mut [&mut guard]).unwrap_err();
    /// assert!(matches!(e, Error::NonFinite { step: 1, .. }), "{e}");
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
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
///
/// ```
/// use kiln_train::{demo, Monitor};
/// let held_out = demo::synthetic_classification(8, 2, 2, 0.1, 1)?;
/// let input = demo::training_input(held_out, 4, 0)?;
/// let m: Monitor<demo::Mlp> = Monitor::Eval { input, steps: Some(2), metric: "accuracy".into() };
/// assert!(matches!(m, Monitor::Eval { steps: Some(2), .. }));
/// # Ok::<(), kiln_train::Error>(())
/// ```
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
    ///
    /// ```
    /// use kiln_train::Goal;
    /// assert!(!Goal::Minimize.better(0.95, 1.0, 0.1)); // within min_delta of the best
    /// assert!(Goal::Minimize.better(0.85, 1.0, 0.1));
    /// assert!(!Goal::Maximize.better(f64::NAN, 0.5, 0.0));
    /// ```
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
///
/// ```
/// use kiln_train::{demo, EarlyStopping, Estimator, Goal, Monitor, RunConfig, Until};
/// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
/// // a learning rate of 0: the evaluation never improves after its first check
/// let frozen = demo::Mlp { learning_rate: 0.0, ..demo::Mlp::new(&[2, 2]) };
/// let monitor = Monitor::Eval { input: input.clone(), steps: Some(1), metric: "loss".into() };
/// let mut early = EarlyStopping::new(monitor, 1, Goal::Minimize, 2);
/// let mut est = Estimator::new(frozen, RunConfig::new().progress(false))?;
/// let r = est.train(&input, Until::Steps(100), &mut [&mut early])?;
/// assert_eq!((r.steps, r.stopped_by.as_str()), (3, "a hook (EarlyStopping)"));
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub struct EarlyStopping<M: Model> {
    watch: Watch<M>,
    patience: u32,
    bad: u32,
    stop: bool,
}

impl<M: Model> EarlyStopping<M> {
    /// Checks `monitor` every `every` steps.
    ///
    /// ```
    /// use kiln_train::{demo, EarlyStopping, Estimator, Goal, Monitor, RunConfig, Until};
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// // the mean training loss, checked every 2 steps; 3 checks without improvement stop
    /// let mut early = EarlyStopping::new(Monitor::TrainLoss, 2, Goal::Minimize, 3);
    /// let r = est.train(&input, Until::Steps(4), &mut [&mut early])?;
    /// assert_eq!(r.steps, 4); // 2 checks: too few to stop
    /// assert!(early.best().is_some());
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn new(monitor: Monitor<M>, every: u64, goal: Goal, patience: u32) -> EarlyStopping<M> {
        EarlyStopping {
            watch: Watch::new(monitor, every, goal),
            patience,
            bad: 0,
            stop: false,
        }
    }

    /// Improvements of at most this much do not count.
    ///
    /// ```
    /// use kiln_train::{demo, EarlyStopping, Estimator, Goal, Monitor, RunConfig, Until};
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// // no improvement is large enough: the second check stops
    /// let mut early = EarlyStopping::new(Monitor::TrainLoss, 1, Goal::Minimize, 1).min_delta(f64::INFINITY);
    /// let r = est.train(&input, Until::Steps(10), &mut [&mut early])?;
    /// assert_eq!(r.steps, 2);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn min_delta(mut self, d: f64) -> EarlyStopping<M> {
        self.watch.min_delta = d;
        self
    }

    /// The best value seen.
    ///
    /// ```
    /// use kiln_train::{demo, EarlyStopping, Estimator, Goal, Monitor, RunConfig, Until};
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # // a learning rate of 0: the evaluation never improves after its first check
    /// # let frozen = demo::Mlp { learning_rate: 0.0, ..demo::Mlp::new(&[2, 2]) };
    /// # let monitor = Monitor::Eval { input: input.clone(), steps: Some(1), metric: "loss".into() };
    /// let mut early = EarlyStopping::new(monitor, 1, Goal::Minimize, 10);
    /// assert_eq!(early.best(), None);
    /// let mut est = Estimator::new(frozen, RunConfig::new().progress(false))?;
    /// est.train(&input, Until::Steps(3), &mut [&mut early])?;
    /// assert_eq!(early.best(), Some(est.evaluate(&input, Some(1), None)?["loss"]));
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
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
///
/// ```
/// use kiln_train::{demo, Estimator, Goal, Monitor, ReduceLrOnPlateau, RunConfig, Until};
/// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
/// // a learning rate of 0: the evaluation never improves after its first check
/// let frozen = demo::Mlp { learning_rate: 0.0, ..demo::Mlp::new(&[2, 2]) };
/// let monitor = Monitor::Eval { input: input.clone(), steps: Some(1), metric: "loss".into() };
/// let mut reduce = ReduceLrOnPlateau::new(monitor, 1, Goal::Minimize, 0.5, 1)?;
/// let mut est = Estimator::new(frozen, RunConfig::new().progress(false))?;
/// est.train(&input, Until::Steps(3), &mut [&mut reduce])?;
/// assert_eq!(reduce.reductions(), 2); // after checks 2 and 3
/// # Ok::<(), kiln_train::Error>(())
/// ```
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
    ///
    /// ```
    /// use kiln_train::{demo, Goal, Monitor, ReduceLrOnPlateau};
    /// let halve = ReduceLrOnPlateau::<demo::Mlp>::new(Monitor::TrainLoss, 10, Goal::Minimize, 0.5, 2);
    /// assert!(halve.is_ok());
    /// let grow = ReduceLrOnPlateau::<demo::Mlp>::new(Monitor::TrainLoss, 10, Goal::Minimize, 1.5, 2);
    /// assert!(grow.is_err()); // a factor must shrink the rate
    /// ```
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
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Goal, Monitor, ReduceLrOnPlateau, RunConfig, Until};
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # // a learning rate of 0: the evaluation never improves after its first check
    /// # let frozen = demo::Mlp { learning_rate: 0.0, ..demo::Mlp::new(&[2, 2]) };
    /// # let monitor = Monitor::Eval { input: input.clone(), steps: Some(1), metric: "loss".into() };
    /// let mut reduce = ReduceLrOnPlateau::new(monitor, 1, Goal::Minimize, 0.5, 1)?.min_scale(0.5);
    /// let mut est = Estimator::new(frozen, RunConfig::new().progress(false))?;
    /// est.train(&input, Until::Steps(4), &mut [&mut reduce])?;
    /// assert_eq!(reduce.reductions(), 1); // 1 → 0.5, then held at 0.5
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn min_scale(mut self, s: f64) -> ReduceLrOnPlateau<M> {
        self.min_scale = s;
        self
    }

    /// Restores the best check's parameters and optimizer state at each reduction.
    ///
    /// ```
    /// use kiln_train::{demo, Dataset, Estimator, Goal, Monitor, ReduceLrOnPlateau, RunConfig, Until};
    /// let data = demo::synthetic_classification(8, 2, 2, 0.1, 0)?;
    /// let input = demo::training_input(data.clone(), 8, 0)?; // full batches
    /// // the evaluation's labels are the other class: training makes its loss worse
    /// let flipped: Vec<_> = data.into_iter().map(|(x, c)| (x, 1 - c)).collect();
    /// let eval = Dataset::from_slices(flipped).batch(8)?.try_map(demo::collate);
    /// let monitor = Monitor::Eval { input: eval, steps: None, metric: "loss".into() };
    /// let mut reduce = ReduceLrOnPlateau::new(monitor, 1, Goal::Minimize, 0.5, 1)?.restore_best(true);
    /// let mlp = demo::Mlp { learning_rate: 0.1, ..demo::Mlp::new(&[2, 2]) };
    /// let mut est = Estimator::new(mlp, RunConfig::new().progress(false))?;
    /// est.train(&input, Until::Steps(1), &mut [&mut reduce])?;
    /// let w = |e: &Estimator<demo::Mlp>| e.variables().get("dense_0/w").unwrap().value().to_vec::<f32>();
    /// let after_first = w(&est)?;
    /// est.train(&input, Until::Steps(3), &mut [&mut reduce])?;
    /// assert_eq!(reduce.reductions(), 3);
    /// assert_eq!(w(&est)?, after_first); // every later step was undone
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn restore_best(mut self, on: bool) -> ReduceLrOnPlateau<M> {
        self.restore_best = on;
        self
    }

    /// How many times it reduced the rate.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Goal, Monitor, ReduceLrOnPlateau, RunConfig, Until};
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # // a learning rate of 0: the evaluation never improves after its first check
    /// # let frozen = demo::Mlp { learning_rate: 0.0, ..demo::Mlp::new(&[2, 2]) };
    /// # let monitor = Monitor::Eval { input: input.clone(), steps: Some(1), metric: "loss".into() };
    /// let mut reduce = ReduceLrOnPlateau::new(monitor, 1, Goal::Minimize, 0.5, 2)?;
    /// assert_eq!(reduce.reductions(), 0);
    /// let mut est = Estimator::new(frozen, RunConfig::new().progress(false))?;
    /// est.train(&input, Until::Steps(5), &mut [&mut reduce])?;
    /// assert_eq!(reduce.reductions(), 2); // after checks 3 and 5
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
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
///
/// ```
/// use kiln_train::{demo, Estimator, Goal, KeepBest, Monitor, RunConfig, Until};
/// let dir = std::env::temp_dir().join(format!("kiln-best-doc-{}", std::process::id()));
/// # std::fs::remove_dir_all(&dir).ok();
/// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
/// let monitor = Monitor::Eval { input: input.clone(), steps: Some(2), metric: "loss".into() };
/// let mut best = KeepBest::new(monitor, 2, Goal::Minimize);
/// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().model_dir(&dir).progress(false))?;
/// est.train(&input, Until::Steps(4), &mut [&mut best])?;
/// assert_eq!(best.kept().unwrap().parent(), Some(dir.join("best").as_path()));
/// assert!(dir.join("best/best.json").exists());
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub struct KeepBest<M: Model> {
    watch: Watch<M>,
    kept: Option<PathBuf>,
}

impl<M: Model> KeepBest<M> {
    /// Checks `monitor` every `every` steps.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Goal, KeepBest, Monitor, RunConfig, Until};
    /// let dir = std::env::temp_dir().join(format!("kiln-best-new-{}", std::process::id()));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let monitor = Monitor::Eval { input: input.clone(), steps: Some(2), metric: "accuracy".into() };
    /// let mut best = KeepBest::new(monitor, 1, Goal::Maximize);
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().model_dir(&dir).progress(false))?;
    /// est.train(&input, Until::Steps(2), &mut [&mut best])?;
    /// assert!(best.best().is_some_and(|acc| (0.0..=1.0).contains(&acc)));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn new(monitor: Monitor<M>, every: u64, goal: Goal) -> KeepBest<M> {
        KeepBest {
            watch: Watch::new(monitor, every, goal),
            kept: None,
        }
    }

    /// The kept checkpoint.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Goal, KeepBest, Monitor, RunConfig, Until};
    /// let dir = std::env::temp_dir().join(format!("kiln-best-kept-{}", std::process::id()));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let mut best = KeepBest::new(Monitor::TrainLoss, 2, Goal::Minimize);
    /// assert!(best.kept().is_none());
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().model_dir(&dir).progress(false))?;
    /// est.train(&input, Until::Steps(4), &mut [&mut best])?;
    /// let step = kiln_train::read_checkpoint(best.kept().unwrap())?.global_step;
    /// assert!(step == 2 || step == 4); // a checked step
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn kept(&self) -> Option<&Path> {
        self.kept.as_deref()
    }

    /// The best value seen.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, Goal, KeepBest, Monitor, RunConfig, Until};
    /// let dir = std::env::temp_dir().join(format!("kiln-best-best-{}", std::process::id()));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// # // a learning rate of 0: the evaluation never improves after its first check
    /// # let frozen = demo::Mlp { learning_rate: 0.0, ..demo::Mlp::new(&[2, 2]) };
    /// # let monitor = Monitor::Eval { input: input.clone(), steps: Some(1), metric: "loss".into() };
    /// let mut best = KeepBest::new(monitor, 1, Goal::Minimize);
    /// let mut est = Estimator::new(frozen, RunConfig::new().model_dir(&dir).progress(false))?;
    /// est.train(&input, Until::Steps(2), &mut [&mut best])?;
    /// assert_eq!(best.best(), Some(est.evaluate(&input, Some(1), None)?["loss"]));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
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
