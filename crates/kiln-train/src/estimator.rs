//! [`Estimator`]: trains, evaluates and predicts with a [`Model`] — TF's Estimator for kiln.
//! [`RunConfig`] says where checkpoints go, how often, the seed, the strategy and the warm
//! start; [`Until`] says how long `train` runs.
//!
//! A training step builds the model function's graph for each micro-batch, differentiates
//! it, evaluates it (one evaluation with the update on one device; one per micro-batch on
//! the replicas, then the fixed-order reduction and one update), and advances the global
//! step and the input cursor.
//! The input is prepared ahead on a producer thread through a [`StagingArea`], so batch
//! `i + 1` is read, mapped and cut while step `i` computes.
//!
//! **Resuming is exact**: a new estimator on a model directory restores the newest
//! checkpoint's parameters, optimizer state, global step, seed, learning-rate scale and
//! input cursor, and every seed a model function draws is a function of (seed, step,
//! micro-batch, tag) — so 40 steps, a restart and 60 more write the bytes 100 steps would.
//!
//! Depends on kiln and kiln-optim's public APIs and every other module of the crate.

use crate::checkpoint;
use crate::hooks::{CheckpointSaver, Hook, RunContext, StepInfo, StepLog};
use crate::model::{trainable, Pending};
use crate::session::BatchLen;
pub(crate) use crate::session::{evaluate, Session};
pub use crate::session::{Metrics, Snapshot};
use crate::strategy::{Flat, Layout};
use crate::{
    Batch, Context, Cursor, Dataset, DatasetIter, Error, Mode, Model, Result, StagingArea,
    Strategy, Variables,
};
use kiln::{Array, DType};
use kiln_optim::{Optimizer, Parameter};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long [`Estimator::train`] runs (TF's `steps` and `max_steps`).
///
/// ```
/// use kiln_train::Until;
/// assert_eq!(Until::Steps(10).target(5), 15);     // relative to the global step
/// assert_eq!(Until::MaxSteps(10).target(15), 10); // an absolute cap: nothing to do
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// This many more steps (or until the input ends).
    Steps(u64),
    /// Until the global step reaches this (or the input ends); nothing if it already has.
    MaxSteps(u64),
}

impl Until {
    /// The global step to stop at, from the current one.
    ///
    /// ```
    /// use kiln_train::Until;
    /// assert_eq!(Until::Steps(100).target(250), 350);
    /// assert_eq!(Until::MaxSteps(100).target(250), 100);
    /// ```
    pub fn target(self, global_step: u64) -> u64 {
        match self {
            Until::Steps(n) => global_step.saturating_add(n),
            Until::MaxSteps(n) => n,
        }
    }
}

/// Where a warm start takes its parameters from.
///
/// ```
/// let w = kiln_train::WarmStart::new("pretrained/ckpt-900.safetensors").only(["embed"]);
/// assert_eq!(w.names.as_deref(), Some(&["embed".to_string()][..]));
/// ```
#[derive(Clone, Debug)]
pub struct WarmStart {
    /// A safetensors file: another run's checkpoint or plain parameters.
    pub path: PathBuf,
    /// The variables to take from it (`None`: every one it has by name).
    pub names: Option<Vec<String>>,
}

impl WarmStart {
    /// Every variable the file holds by name.
    ///
    /// ```
    /// let w = kiln_train::WarmStart::new("pretrained.safetensors");
    /// assert!(w.names.is_none()); // every variable the file holds
    /// ```
    pub fn new(path: impl Into<PathBuf>) -> WarmStart {
        WarmStart {
            path: path.into(),
            names: None,
        }
    }

    /// Only these variables.
    ///
    /// ```
    /// let w = kiln_train::WarmStart::new("base/ckpt-100.safetensors").only(["dense_0/w", "dense_0/b"]);
    /// assert_eq!(w.names.map(|n| n.len()), Some(2));
    /// ```
    pub fn only<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> WarmStart {
        self.names = Some(names.into_iter().map(Into::into).collect());
        self
    }
}

/// An estimator's configuration (TF's `RunConfig`).
///
/// ```
/// use kiln_train::{RunConfig, Strategy};
/// let c = RunConfig::new()
///     .model_dir("runs/mlp")
///     .seed(7)
///     .save_every_steps(100)
///     .keep_max(3)
///     .strategy(Strategy::mirrored(2, 32)?);
/// assert_eq!(c.keep_max, 3);
/// # Ok::<(), kiln_train::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Where checkpoints (and `train.jsonl` with `log_every`) go; `None` keeps nothing.
    pub model_dir: Option<PathBuf>,
    /// The seed every initialiser and model-function seed derives from.
    pub seed: u64,
    /// Save a checkpoint every this many steps (and at the end of `train`).
    pub save_every_steps: Option<u64>,
    /// Save a checkpoint when this many seconds have passed since the last.
    pub save_every_secs: Option<f64>,
    /// Keep at most this many checkpoints (0: all); the oldest go first.
    pub keep_max: usize,
    /// Append a JSON line to `model_dir/train.jsonl` (stderr without a model dir) every this
    /// many steps.
    pub log_every: Option<u64>,
    /// How steps run.
    pub strategy: Strategy,
    /// Parameters to start from when the model dir has no checkpoint.
    pub warm_start: Option<WarmStart>,
    /// Batches prepared ahead on a producer thread (0: on the training thread).
    pub prefetch: usize,
    /// Show a progress bar when stderr is a terminal.
    pub progress: bool,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            model_dir: None,
            seed: 0,
            save_every_steps: None,
            save_every_secs: None,
            keep_max: 5,
            log_every: None,
            strategy: Strategy::OneDevice,
            warm_start: None,
            prefetch: 2,
            progress: true,
        }
    }
}

impl RunConfig {
    /// The defaults: no model dir, seed 0, keep 5, one device, prefetch 2.
    ///
    /// ```
    /// let c = kiln_train::RunConfig::new();
    /// assert_eq!((c.seed, c.keep_max, c.prefetch), (0, 5, 2));
    /// assert!(c.model_dir.is_none() && c.save_every_steps.is_none());
    /// ```
    pub fn new() -> RunConfig {
        RunConfig::default()
    }

    /// Sets the model directory.
    ///
    /// ```
    /// let c = kiln_train::RunConfig::new().model_dir("runs/a");
    /// assert_eq!(c.model_dir.as_deref(), Some(std::path::Path::new("runs/a")));
    /// ```
    pub fn model_dir(mut self, dir: impl Into<PathBuf>) -> RunConfig {
        self.model_dir = Some(dir.into());
        self
    }

    /// Sets the seed.
    ///
    /// ```
    /// assert_eq!(kiln_train::RunConfig::new().seed(42).seed, 42);
    /// ```
    pub fn seed(mut self, seed: u64) -> RunConfig {
        self.seed = seed;
        self
    }

    /// Saves every `n` steps.
    ///
    /// ```
    /// let c = kiln_train::RunConfig::new().save_every_steps(500);
    /// assert_eq!(c.save_every_steps, Some(500));
    /// ```
    pub fn save_every_steps(mut self, n: u64) -> RunConfig {
        self.save_every_steps = Some(n);
        self
    }

    /// Saves every `secs` seconds.
    ///
    /// ```
    /// let c = kiln_train::RunConfig::new().save_every_secs(600.0);
    /// assert_eq!(c.save_every_secs, Some(600.0));
    /// ```
    pub fn save_every_secs(mut self, secs: f64) -> RunConfig {
        self.save_every_secs = Some(secs);
        self
    }

    /// Keeps at most `n` checkpoints (0: all).
    ///
    /// ```
    /// let c = kiln_train::RunConfig::new().keep_max(0); // keep every checkpoint
    /// assert_eq!(c.keep_max, 0);
    /// ```
    pub fn keep_max(mut self, n: usize) -> RunConfig {
        self.keep_max = n;
        self
    }

    /// Logs every `n` steps.
    ///
    /// ```
    /// let c = kiln_train::RunConfig::new().log_every(10);
    /// assert_eq!(c.log_every, Some(10));
    /// ```
    pub fn log_every(mut self, n: u64) -> RunConfig {
        self.log_every = Some(n);
        self
    }

    /// Sets the strategy.
    ///
    /// ```
    /// use kiln_train::{RunConfig, Strategy};
    /// let c = RunConfig::new().strategy(Strategy::mirrored(4, 8)?);
    /// assert_eq!(c.strategy.replicas(), 4);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn strategy(mut self, strategy: Strategy) -> RunConfig {
        self.strategy = strategy;
        self
    }

    /// Warm-starts from another model's parameters.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, RunConfig, Until, WarmStart};
    /// let dir = std::env::temp_dir().join(format!("kiln-warm-{}", std::process::id()));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let mut base = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().model_dir(&dir).progress(false))?;
    /// base.train(&input, Until::Steps(2), &mut [])?;
    /// let path = base.save_checkpoint()?;
    /// let config = RunConfig::new().seed(9).warm_start(WarmStart::new(&path));
    /// let mut tuned = Estimator::new(demo::Mlp::new(&[2, 2]), config)?;
    /// tuned.evaluate(&input, Some(1), None)?; // the first call creates the variables, from the file
    /// let w = |e: &Estimator<demo::Mlp>| e.variables().get("dense_0/w").unwrap().value().to_vec::<f32>();
    /// assert_eq!(w(&base)?, w(&tuned)?);
    /// assert_eq!(tuned.global_step(), 0); // a warm start is not a resumption
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn warm_start(mut self, warm: WarmStart) -> RunConfig {
        self.warm_start = Some(warm);
        self
    }

    /// Sets how many batches are prepared ahead.
    ///
    /// ```
    /// let c = kiln_train::RunConfig::new().prefetch(0); // batches prepared on the training thread
    /// assert_eq!(c.prefetch, 0);
    /// ```
    pub fn prefetch(mut self, n: usize) -> RunConfig {
        self.prefetch = n;
        self
    }

    /// Turns the progress bar off (or on, where stderr is a terminal).
    ///
    /// ```
    /// assert!(!kiln_train::RunConfig::new().progress(false).progress);
    /// ```
    pub fn progress(mut self, on: bool) -> RunConfig {
        self.progress = on;
        self
    }

    fn check(&self) -> Result<()> {
        const OP: &str = "Estimator::new";
        if self.save_every_steps == Some(0) || self.log_every == Some(0) {
            return Err(Error::invalid(
                OP,
                "save_every_steps or log_every is 0: pass at least 1 (or leave it unset)",
            ));
        }
        if self
            .save_every_secs
            .is_some_and(|s| !(s.is_finite() && s > 0.0))
        {
            return Err(Error::invalid(
                OP,
                format!(
                    "save_every_secs is {:?}: pass a positive number of seconds",
                    self.save_every_secs
                ),
            ));
        }
        if let Strategy::Mirrored {
            replicas,
            micro_batch_size,
        } = self.strategy
        {
            if replicas == 0 || micro_batch_size == 0 {
                return Err(Error::invalid(
                    OP,
                    "a Mirrored strategy needs at least 1 replica and micro-batches of at \
                     least 1 (build it with Strategy::mirrored)",
                ));
            }
        }
        Ok(())
    }
}

/// One example's predictions, by name.
///
/// ```
/// use kiln_train::{demo, Dataset, Estimator, Prediction, RunConfig};
/// let mut est = Estimator::new(demo::Mlp::new(&[2, 3]), RunConfig::new())?;
/// let x = kiln::Array::from_vec(vec![0.5f32, -1.0], &[1, 2])?;
/// let p: Prediction = est.predict(&Dataset::from_slices(vec![x]), None)?.next().unwrap()?;
/// assert_eq!(p["logits"].shape(), &[3]);
/// assert!(p["class"].shape().is_empty()); // one class per example
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub type Prediction = BTreeMap<String, Array>;

/// What a `train` call did.
///
/// ```
/// use kiln_train::{demo, Estimator, RunConfig, Until};
/// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?.take(3);
/// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
/// let report = est.train(&input, Until::Steps(10), &mut [])?;
/// assert_eq!((report.steps, report.global_step), (3, 3));
/// assert_eq!(report.stopped_by, "input ended");
/// assert!(report.last_loss.is_finite() && report.checkpoint.is_none());
/// # Ok::<(), kiln_train::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TrainReport {
    /// The global step at the end.
    pub global_step: u64,
    /// Steps this call ran.
    pub steps: u64,
    /// The last step's loss (NaN if no step ran).
    pub last_loss: f64,
    /// Why it stopped: `"target"`, `"input ended"` or a hook's reason.
    pub stopped_by: String,
    /// Time the training thread waited for input.
    pub input_wait: Duration,
    /// The checkpoint written at the end, if any.
    pub checkpoint: Option<PathBuf>,
}

/// Trains, evaluates and predicts with a model (see the module docs).
///
/// ```
/// use kiln_train::{Context, Dataset, Estimator, Init, Mode, Model, RunConfig, Spec, Until};
/// struct Mean;
/// impl Model for Mean {
///     type Features = kiln::Array;
///     type Labels = kiln::Array;
///     fn model_fn(&self, _x: &kiln::Array, y: Option<&kiln::Array>, mode: Mode, cx: &mut Context<'_>)
///         -> kiln_train::Result<Spec> {
///         let m = cx.variable("m", &[], kiln::DType::F64, Init::Zeros)?;
///         let mut spec = Spec::new().prediction("m", &m.reshape(&[1]));
///         if let Some(y) = y {
///             spec = spec.loss(&(y - &m).square().mean(None, false));
///         }
///         Ok(if mode == Mode::Train { spec.optimizer(kiln_optim::Sgd::new(0.5)) } else { spec })
///     }
/// }
/// // one batch of four examples with labels 0, 1, 2, 3, over and over
/// let batch = (kiln::Array::zeros(&[4, 1], kiln::DType::F64),
///              kiln::Array::from_vec(vec![0.0, 1.0, 2.0, 3.0], &[4])?);
/// let input = Dataset::from_slices(vec![batch]).repeat(None);
/// let mut est = Estimator::new(Mean, RunConfig::new().progress(false))?;
/// est.train(&input, Until::Steps(40), &mut [])?;
/// let metrics = est.evaluate(&Dataset::from_slices(vec![(kiln::Array::zeros(&[1, 1], kiln::DType::F64),
///     kiln::Array::from_vec(vec![1.5], &[1])?)]), None, None)?;
/// assert!(metrics["loss"] < 1e-9); // m learned the mean, 1.5
/// assert_eq!(est.global_step(), 40);
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub struct Estimator<M: Model> {
    model: M,
    config: RunConfig,
    session: Session,
}

/// A training batch cut into micro-batches, with the input cursor after it.
type Staged<B> = (Result<Vec<B>>, Option<Cursor>);

impl<M: Model> Estimator<M> {
    /// An estimator; with a model directory holding checkpoints, it resumes from the newest
    /// (parameters, optimizer state, global step, seed, learning-rate scale, input
    /// cursor), and the seed is the checkpoint's.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, RunConfig, Until};
    /// let dir = std::env::temp_dir().join(format!("kiln-resume-{}", std::process::id()));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let config = RunConfig::new().model_dir(&dir).save_every_steps(2).seed(4).progress(false);
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), config.clone())?;
    /// est.train(&input, Until::Steps(3), &mut [])?; // saves at step 2 and at the end
    /// let resumed = Estimator::new(demo::Mlp::new(&[2, 2]), config.seed(0))?;
    /// assert_eq!((resumed.global_step(), resumed.seed()), (3, 4)); // the checkpoint's step and seed
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn new(model: M, config: RunConfig) -> Result<Estimator<M>> {
        const OP: &str = "Estimator::new";
        config.check()?;
        let mut session = Session {
            variables: Variables::new(config.seed),
            optimizer: None,
            pending_optimizer: None,
            global_step: 0,
            seed: config.seed,
            lr_scale: 1.0,
            input: None,
            saved_step: None,
            saved_at: Instant::now(),
            chief: config.strategy.is_chief(),
            synced: false,
        };
        let latest = match &config.model_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| Error::io(OP, dir, e))?;
                checkpoint::remove_temporaries(dir);
                checkpoint::latest_checkpoint(dir)?
            }
            None => None,
        };
        if let Some(path) = latest {
            let ckpt = checkpoint::read_checkpoint(&path)?;
            session.variables = Variables::new(ckpt.seed);
            session.seed = ckpt.seed;
            session.global_step = ckpt.global_step;
            session.lr_scale = ckpt.lr_scale;
            session.input = ckpt.input;
            session.pending_optimizer = ckpt.optimizer;
            session.saved_step = Some(ckpt.global_step);
            session.variables.set_restore(Some(Pending {
                source: path.display().to_string(),
                tensors: ckpt.parameters.into_iter().collect(),
            }));
        } else if let Some(warm) = &config.warm_start {
            let file = kiln_io::read_safetensors(&warm.path)?;
            let mut tensors: HashMap<String, Array> = file
                .into_tensors()
                .into_iter()
                .filter(|(n, _)| !n.starts_with(kiln_optim::OPTIMIZER_PREFIX))
                .collect();
            if let Some(names) = &warm.names {
                for n in names {
                    if !tensors.contains_key(n) {
                        let mut have: Vec<&String> = tensors.keys().collect();
                        have.sort();
                        return Err(Error::checkpoint(
                            OP,
                            &warm.path,
                            format!(
                                "the warm start asks for {n:?}, which it does not hold (it \
                                 holds {have:?})"
                            ),
                        ));
                    }
                }
                tensors.retain(|n, _| names.contains(n));
            }
            session.variables.set_warm(Some(Pending {
                source: warm.path.display().to_string(),
                tensors,
            }));
        }
        Ok(Estimator {
            model,
            config,
            session,
        })
    }

    /// The model.
    ///
    /// ```
    /// let est = kiln_train::Estimator::new(kiln_train::demo::Mlp::new(&[2, 3]), kiln_train::RunConfig::new())?;
    /// assert_eq!(est.model().sizes, vec![2, 3]);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn model(&self) -> &M {
        &self.model
    }

    /// The configuration.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, RunConfig};
    /// let est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().keep_max(2))?;
    /// assert_eq!(est.config().keep_max, 2);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn config(&self) -> &RunConfig {
        &self.config
    }

    /// The number of updates so far (restored from a checkpoint included).
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, RunConfig, Until};
    /// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// assert_eq!(est.global_step(), 0);
    /// est.train(&input, Until::Steps(2), &mut [])?;
    /// assert_eq!(est.global_step(), 2);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn global_step(&self) -> u64 {
        self.session.global_step
    }

    /// The run's seed (a resumed run's is its checkpoint's).
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, RunConfig};
    /// let est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().seed(8))?;
    /// assert_eq!(est.seed(), 8);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn seed(&self) -> u64 {
        self.session.seed
    }

    /// The variables created so far.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, RunConfig};
    /// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new())?;
    /// assert!(est.variables().is_empty()); // created by the first call of the model function
    /// est.evaluate(&input, Some(1), None)?;
    /// assert_eq!(est.variables().len(), 2);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn variables(&self) -> &Variables {
        &self.session.variables
    }

    /// The optimizer, once the first training step has created it.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, RunConfig, Until};
    /// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// assert!(est.optimizer().is_none());
    /// est.train(&input, Until::Steps(2), &mut [])?;
    /// let adam = est.optimizer().unwrap();
    /// assert_eq!((adam.learning_rate(), adam.state().steps()), (1e-3, 2));
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn optimizer(&self) -> Option<&(dyn Optimizer + Send)> {
        self.session.optimizer.as_deref()
    }

    /// Where the training input stands (the next `train` continues from it).
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, RunConfig, Until};
    /// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// assert!(est.input_cursor().is_none());
    /// est.train(&input, Until::Steps(1), &mut [])?;
    /// let mut it = input.iter();
    /// it.next();
    /// assert_eq!(est.input_cursor(), Some(&it.cursor())); // just after the first batch
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn input_cursor(&self) -> Option<&Cursor> {
        self.session.input.as_ref()
    }

    /// Makes the next `train` read its input from the start.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, RunConfig, Until};
    /// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// est.train(&input, Until::Steps(1), &mut [])?;
    /// est.reset_input();
    /// assert!(est.input_cursor().is_none());
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn reset_input(&mut self) {
        self.session.input = None;
    }

    /// Writes a checkpoint of the current state now (into the model directory) and returns
    /// its path.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, RunConfig, Until};
    /// let dir = std::env::temp_dir().join(format!("kiln-save-{}", std::process::id()));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().model_dir(&dir).progress(false))?;
    /// est.train(&input, Until::Steps(1), &mut [])?; // no save_every_*: nothing saved
    /// assert!(kiln_train::latest_checkpoint(&dir)?.is_none());
    /// assert_eq!(est.save_checkpoint()?, kiln_train::checkpoint_path(&dir, 1));
    /// let mut no_dir = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new())?;
    /// assert!(no_dir.save_checkpoint().is_err());
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn save_checkpoint(&mut self) -> Result<PathBuf> {
        let Some(dir) = self.config.model_dir.clone() else {
            return Err(Error::invalid(
                "Estimator::save_checkpoint",
                "the estimator has no model_dir: set one with RunConfig::model_dir",
            ));
        };
        self.session.save(&dir, self.config.keep_max)
    }

    /// Trains until `until` (or the input ends, or a hook stops it), running `hooks` around
    /// every step, and saves a checkpoint at the end when there is a model directory and
    /// `save_every_steps` or `save_every_secs` is set.
    ///
    /// The input yields global batches as `(features, labels)`; it continues from where the
    /// last `train` (or the restored checkpoint) left it.
    ///
    /// ```
    /// use kiln_train::{demo, Estimator, NanGuard, RunConfig, Until};
    /// let input = demo::training_input(demo::synthetic_classification(8, 2, 2, 0.1, 0)?, 4, 0)?;
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), RunConfig::new().progress(false))?;
    /// let mut guard = NanGuard::new(1);
    /// let r = est.train(&input, Until::Steps(3), &mut [&mut guard])?;
    /// assert_eq!((r.steps, r.stopped_by.as_str()), (3, "target"));
    /// let r = est.train(&input, Until::MaxSteps(5), &mut [])?; // the input goes on where it stopped
    /// assert_eq!((r.steps, r.global_step), (2, 5));
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn train(
        &mut self,
        input: &Dataset<(M::Features, M::Labels)>,
        until: Until,
        hooks: &mut [&mut dyn Hook<M>],
    ) -> Result<TrainReport> {
        let target = until.target(self.session.global_step);
        let mut report = TrainReport {
            global_step: self.session.global_step,
            steps: 0,
            last_loss: f64::NAN,
            stopped_by: "target".into(),
            input_wait: Duration::ZERO,
            checkpoint: None,
        };
        if self.session.global_step >= target {
            return Ok(report);
        }
        let iter = match &self.session.input {
            Some(c) => input.iter_from(c).map_err(|e| {
                Error::invalid(
                    "Estimator::train",
                    format!(
                        "the input does not continue where the last train call (or the \
                         restored checkpoint) left off: {e}; to train on another input, call \
                         Estimator::reset_input first"
                    ),
                )
            })?,
            None => input.iter(),
        };
        let mut feed = Feed::start(iter, self.config.strategy.clone(), self.config.prefetch)?;
        let mut saver = (self.config.model_dir.is_some()
            && (self.config.save_every_steps.is_some() || self.config.save_every_secs.is_some()))
        .then(|| CheckpointSaver::new(self.config.save_every_steps, self.config.save_every_secs));
        let chief = self.session.chief;
        let mut logger =
            self.config
                .log_every
                .filter(|_| chief)
                .map(|n| match &self.config.model_dir {
                    Some(dir) => StepLog::to_file(dir.join("train.jsonl"), n),
                    None => Ok(StepLog::to_stderr(n)),
                });
        let mut logger = match logger.take() {
            Some(Ok(l)) => Some(l),
            Some(Err(e)) => return Err(e),
            None => None,
        };
        let progress = (self.config.progress && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new(target - self.session.global_step);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:40} {pos}/{len} steps, {per_sec}, eta {eta} {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
        let mut stop: Option<String> = None;
        {
            let mut all: Vec<&mut dyn Hook<M>> = Vec::with_capacity(hooks.len() + 2);
            for h in hooks.iter_mut() {
                all.push(&mut **h);
            }
            if let Some(s) = saver.as_mut() {
                all.push(s);
            }
            if let Some(l) = logger.as_mut() {
                all.push(l);
            }
            let result = self.train_loop(
                &mut all,
                target,
                &mut feed,
                &mut stop,
                &progress,
                &mut report,
            );
            if let Some(bar) = &progress {
                bar.finish_and_clear();
            }
            result?;
            let mut cx = RunContext::new(&self.model, &self.config, &mut self.session, &mut stop);
            for h in all.iter_mut() {
                h.end(&mut cx)?;
            }
        }
        report.input_wait = feed.wait();
        report.global_step = self.session.global_step;
        report.checkpoint = saver.and_then(|s| s.last_saved());
        Ok(report)
    }

    fn train_loop(
        &mut self,
        hooks: &mut [&mut dyn Hook<M>],
        target: u64,
        feed: &mut Feed<(M::Features, M::Labels)>,
        stop: &mut Option<String>,
        progress: &Option<indicatif::ProgressBar>,
        report: &mut TrainReport,
    ) -> Result<()> {
        {
            let mut cx = RunContext::new(&self.model, &self.config, &mut self.session, stop);
            for h in hooks.iter_mut() {
                h.begin(&mut cx)?;
            }
        }
        while self.session.global_step < target {
            if let Some(reason) = stop.take() {
                report.stopped_by = reason;
                return Ok(());
            }
            if let Some(h) = hooks.iter().find(|h| h.should_stop()) {
                report.stopped_by = format!("a hook ({})", h.name());
                return Ok(());
            }
            for h in hooks.iter_mut() {
                h.before_step(self.session.global_step + 1)?;
            }
            let wait_start = Instant::now();
            let Some((micro, cursor)) = feed.next() else {
                report.stopped_by = "input ended".into();
                return Ok(());
            };
            let waited = wait_start.elapsed();
            let micro = micro?;
            let examples: usize = micro.iter().filter_map(|b| b.batch_len()).sum();
            let start = Instant::now();
            let (loss, lr) = train_step(
                &self.model,
                &mut self.session,
                &self.config.strategy,
                &micro,
            )?;
            let step_time = start.elapsed();
            self.session.global_step += 1;
            self.session.input = cursor;
            report.steps += 1;
            report.last_loss = loss;
            let info = StepInfo {
                step: self.session.global_step,
                loss,
                learning_rate: lr,
                examples,
                step_time,
                input_wait: waited,
            };
            let mut cx = RunContext::new(&self.model, &self.config, &mut self.session, stop);
            for h in hooks.iter_mut() {
                h.after_step(&mut cx, &info)?;
            }
            if let Some(bar) = progress {
                bar.inc(1);
                bar.set_message(format!("loss {loss:.4}"));
            }
        }
        if let Some(reason) = stop.take() {
            report.stopped_by = reason;
        }
        Ok(())
    }

    /// Evaluates the model on `input` (at most `steps` batches; `None`: all of it), with the
    /// estimator's current parameters, or with `checkpoint`'s (read into a separate store:
    /// the estimator is unchanged). Returns every metric, `loss` (the mean over examples)
    /// and `global_step`.
    ///
    /// ```
    /// use kiln_train::{demo, Dataset, Estimator, RunConfig, Until};
    /// let data = demo::synthetic_classification(64, 2, 2, 0.1, 0)?;
    /// let input = demo::training_input(data.clone(), 16, 0)?;
    /// let mlp = demo::Mlp { learning_rate: 0.05, ..demo::Mlp::new(&[2, 2]) };
    /// let mut est = Estimator::new(mlp, RunConfig::new().progress(false))?;
    /// est.train(&input, Until::Steps(30), &mut [])?;
    /// let all = Dataset::from_slices(data).batch(16)?.try_map(demo::collate); // one pass
    /// let m = est.evaluate(&all, None, None)?;
    /// assert!(m["accuracy"] > 0.9, "{m:?}");
    /// assert_eq!(m["global_step"], 30.0);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn evaluate(
        &mut self,
        input: &Dataset<(M::Features, M::Labels)>,
        steps: Option<u64>,
        checkpoint: Option<&Path>,
    ) -> Result<Metrics> {
        match checkpoint {
            None => {
                let step = self.session.global_step;
                evaluate(&self.model, &mut self.session.variables, step, input, steps)
            }
            Some(path) => {
                let (mut vars, step) = variables_from(path)?;
                evaluate(&self.model, &mut vars, step, input, steps)
            }
        }
    }

    /// Predictions for every example of `input`, streamed batch by batch, with the current
    /// parameters or `checkpoint`'s (the estimator is unchanged).
    ///
    /// ```
    /// use kiln_train::{demo, Dataset, Estimator, RunConfig};
    /// let mut est = Estimator::new(demo::Mlp::new(&[2, 3]), RunConfig::new())?;
    /// let x = kiln::Array::from_vec(vec![0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0], &[3, 2])?;
    /// let preds: Vec<_> = est.predict(&Dataset::from_slices(vec![x]), None)?.collect::<Result<_, _>>()?;
    /// assert_eq!(preds.len(), 3); // one per example
    /// assert_eq!(preds[0]["logits"].shape(), &[3]);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn predict<'a>(
        &'a mut self,
        input: &Dataset<M::Features>,
        checkpoint: Option<&Path>,
    ) -> Result<Predictions<'a, M>> {
        let (vars, step) = match checkpoint {
            None => (
                Vars::Borrowed(&mut self.session.variables),
                self.session.global_step,
            ),
            Some(path) => {
                let (v, s) = variables_from(path)?;
                (Vars::Owned(Box::new(v)), s)
            }
        };
        Ok(Predictions {
            model: &self.model,
            vars,
            step,
            iter: input.iter(),
            ready: VecDeque::new(),
        })
    }
}

/// A variable store that creates every variable from checkpoint `path`.
fn variables_from(path: &Path) -> Result<(Variables, u64)> {
    let ckpt = checkpoint::read_checkpoint(path)?;
    let mut vars = Variables::new(ckpt.seed);
    vars.set_restore(Some(Pending {
        source: path.display().to_string(),
        tensors: ckpt.parameters.into_iter().collect(),
    }));
    Ok((vars, ckpt.global_step))
}

/// The input feed of a `train` call: batches cut into micro-batches, on a producer thread
/// through a staging area, or on the calling thread with no prefetch.
enum Feed<B: Batch> {
    Inline {
        iter: DatasetIter<B>,
        strategy: Strategy,
        wait: Duration,
    },
    Staged {
        area: StagingArea<Staged<B>>,
        thread: Option<std::thread::JoinHandle<()>>,
    },
}

fn cut<B: Batch>(strategy: &Strategy, batch: Result<B>) -> Result<Vec<B>> {
    let batch = batch?;
    match strategy {
        Strategy::OneDevice => Ok(vec![batch]),
        _ => strategy.distribute(&batch),
    }
}

impl<B: Batch> Feed<B> {
    fn start(iter: DatasetIter<B>, strategy: Strategy, prefetch: usize) -> Result<Feed<B>> {
        if prefetch == 0 {
            return Ok(Feed::Inline {
                iter,
                strategy,
                wait: Duration::ZERO,
            });
        }
        let area = StagingArea::new(prefetch)?;
        let producer = area.clone();
        let thread = std::thread::spawn(move || {
            let mut iter = iter;
            while let Some(item) = iter.next() {
                let failed = item.is_err();
                let staged = (cut(&strategy, item), Some(iter.cursor()));
                if producer.put(staged).is_err() || failed {
                    break;
                }
            }
            producer.close();
        });
        Ok(Feed::Staged {
            area,
            thread: Some(thread),
        })
    }

    fn next(&mut self) -> Option<Staged<B>> {
        match self {
            Feed::Inline {
                iter,
                strategy,
                wait,
            } => {
                let start = Instant::now();
                let item = iter.next()?;
                let out = (cut(strategy, item), Some(iter.cursor()));
                *wait += start.elapsed();
                Some(out)
            }
            Feed::Staged { area, .. } => area.get(),
        }
    }

    fn wait(&self) -> Duration {
        match self {
            Feed::Inline { wait, .. } => *wait,
            Feed::Staged { area, .. } => area.stats().get_wait,
        }
    }
}

impl<B: Batch> Drop for Feed<B> {
    fn drop(&mut self) {
        if let Feed::Staged { area, thread } = self {
            area.close();
            area.clear();
            if let Some(t) = thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// One micro-batch's training graph: the weighted loss and the trainable variables'
/// gradients of it.
struct MicroGraph {
    loss: Array,
    params: Vec<Arc<Parameter>>,
    grads: Vec<Array>,
}

/// What the first micro-batch's spec says about the update.
struct UpdateSpec {
    optimizer: Box<dyn Optimizer + Send>,
    clip: Option<f64>,
}

/// Builds the training graphs of micro-batches `which` of `micro`, each loss weighted by its
/// share of the global batch's examples (when there is more than one micro-batch).
fn build_graphs<M: Model>(
    model: &M,
    session: &mut Session,
    micro: &[(M::Features, M::Labels)],
    which: std::ops::Range<usize>,
) -> Result<(Vec<MicroGraph>, UpdateSpec)> {
    const OP: &str = "Estimator::train";
    let lens: Vec<usize> = micro.iter().map(|b| b.batch_len().unwrap_or(1)).collect();
    let total: usize = lens.iter().sum();
    let mut graphs = Vec::with_capacity(which.len());
    let mut update = None;
    for i in which {
        let (features, labels) = &micro[i];
        let mut cx = Context::new(&mut session.variables, Mode::Train, session.global_step, i);
        let spec = model.model_fn(features, Some(labels), Mode::Train, &mut cx)?;
        spec.check(OP, Mode::Train)?;
        let used = cx.into_used();
        let chosen = trainable(OP, used, spec.trainable.as_deref())?;
        let (Some(loss), Some(optimizer)) = (spec.loss, spec.optimizer) else {
            unreachable!("checked above")
        };
        let loss = if micro.len() == 1 {
            loss
        } else {
            loss.try_mul(lens[i] as f64 / total as f64)?
        };
        let values: Vec<&Array> = chosen.iter().map(|(_, v)| v).collect();
        let grads = kiln::grad(&loss, &values)?;
        if update.is_none() {
            update = Some(UpdateSpec {
                optimizer,
                clip: spec.clip_global_norm,
            });
        }
        graphs.push(MicroGraph {
            loss,
            params: chosen.into_iter().map(|(p, _)| p).collect(),
            grads,
        });
    }
    let Some(update) = update else {
        return Err(Error::invalid(
            OP,
            "a training step with no micro-batch to run",
        ));
    };
    for (i, g) in graphs.iter().enumerate().skip(1) {
        if g.params.len() != graphs[0].params.len()
            || g.params
                .iter()
                .zip(&graphs[0].params)
                .any(|(a, b)| !Arc::ptr_eq(a, b))
        {
            return Err(Error::invalid(
                OP,
                format!(
                    "micro-batch {i} trains other variables than the first: the model \
                     function must use the same variables for every batch"
                ),
            ));
        }
    }
    Ok((graphs, update))
}

/// One training step on `micro` (the global batch's micro-batches); returns the loss (the
/// mean over the global batch) and the learning rate used.
fn train_step<M: Model>(
    model: &M,
    session: &mut Session,
    strategy: &Strategy,
    micro: &[(M::Features, M::Labels)],
) -> Result<(f64, f64)> {
    const OP: &str = "Estimator::train";
    let n = micro.len();
    let blocks = strategy.assignment(n);
    // in one process every micro-batch is ours; in a multi-process job, our rank's run
    let mine = match strategy {
        Strategy::OneDevice | Strategy::Mirrored { .. } => 0..n,
        #[cfg(feature = "mpi")]
        Strategy::MultiProcess { .. } => blocks[strategy.rank().min(blocks.len() - 1)].clone(),
    };
    if mine.is_empty() {
        return Err(Error::invalid(
            OP,
            format!(
                "a global batch of {n} micro-batches for {} replicas leaves replica {} \
                 nothing to do: use larger batches or smaller micro-batches",
                strategy.replicas(),
                strategy.rank()
            ),
        ));
    }
    let built = build_graphs(model, session, micro, mine.clone())?;
    #[cfg(feature = "mpi")]
    let built = if matches!(strategy, Strategy::MultiProcess { .. }) && !session.synced {
        // every rank starts from rank 0's parameters
        let values: Vec<Array> = session
            .variables
            .parameters()
            .iter()
            .map(|p| p.value())
            .collect();
        let layout = Layout::of(OP, &values)?;
        crate::multiprocess::agree_on(layout.len32, "the number of f32 parameters")?;
        crate::multiprocess::agree_on(layout.len64, "the number of f64 parameters")?;
        let mut flat = layout.pack(&values)?;
        crate::multiprocess::broadcast(&mut flat.f32)?;
        crate::multiprocess::broadcast(&mut flat.f64)?;
        for (p, v) in session
            .variables
            .parameters()
            .iter()
            .zip(layout.unpack(&flat)?)
        {
            p.assign(v)?;
        }
        session.synced = true;
        build_graphs(model, session, micro, mine.clone())?
    } else {
        built
    };
    let (graphs, update) = built;
    let lr = update.optimizer.learning_rate() * session.lr_scale;
    if session.optimizer.is_none() {
        let mut opt = update.optimizer;
        if let Some(state) = session.pending_optimizer.take() {
            if let Err(e) = opt.load_state(&state) {
                session.pending_optimizer = Some(state);
                return Err(e.into());
            }
        }
        session.optimizer = Some(opt);
    }
    let params: Vec<&Parameter> = graphs[0].params.iter().map(|p| &**p).collect();
    let Some(opt) = session.optimizer.as_mut() else {
        unreachable!("set above")
    };
    opt.set_learning_rate(lr);
    if *strategy == Strategy::OneDevice {
        let g = &graphs[0];
        let grads = match update.clip {
            Some(c) => kiln_optim::clip_by_global_norm(&g.grads, c)?.0,
            None => g.grads.clone(),
        };
        opt.step(&params, &grads, &[&g.loss])?;
        return Ok((g.loss.cast(DType::F64).item::<f64>()?, lr));
    }
    let layout = Layout::of(OP, &graphs[0].grads)?;
    let evaluate = |g: &MicroGraph| -> Result<f64> {
        let mut outs: Vec<&Array> = Vec::with_capacity(g.grads.len() + 1);
        outs.push(&g.loss);
        outs.extend(&g.grads);
        kiln::eval(&outs)?;
        Ok(g.loss.cast(DType::F64).item::<f64>()?)
    };
    let lists: Vec<&[Array]> = graphs.iter().map(|g| g.grads.as_slice()).collect();
    let (sum, loss) = match strategy {
        Strategy::Mirrored { .. } => {
            let losses = strategy.run(n, |i| evaluate(&graphs[i]))?.into_values();
            let losses: Vec<Vec<f64>> = losses.into_iter().map(|l| vec![l]).collect();
            (layout.tree_sum(&lists)?, crate::tree_sum(losses)[0])
        }
        _ => {
            let mut losses = Vec::with_capacity(graphs.len());
            for g in &graphs {
                losses.push(vec![evaluate(g)?]);
            }
            let mut sum = across_processes(&blocks, n, &lists, losses, &layout)?;
            let loss = sum.f64.pop().unwrap_or(f64::NAN);
            (sum, loss)
        }
    };
    let mut reduced = layout.views(sum)?;
    if let Some(c) = update.clip {
        reduced = kiln_optim::clip_by_global_norm(&reduced, c)?.0;
    }
    opt.step(&params, &reduced, &[])?;
    Ok((loss, lr))
}

/// The sum over all processes of the micro-batches' gradients (this rank's `lists`, one per
/// micro-batch of its run) over the fixed tree, the loss last in the f64 buffer.
///
/// When the ranks' runs are one level of the tree, each rank sums its run first and only
/// the sums travel; otherwise every micro-batch's buffers travel (each run padded to the
/// longest) and every rank folds all of them.
#[cfg(feature = "mpi")]
fn across_processes(
    blocks: &[std::ops::Range<usize>],
    n: usize,
    lists: &[&[Array]],
    losses: Vec<Vec<f64>>,
    layout: &Layout,
) -> Result<Flat> {
    use crate::multiprocess::all_gather;
    let (len32, len64) = (layout.len32, layout.len64 + 1);
    // the gathered buffers' parts `ks`, folded over the tree without copying them out
    let fold = |f32s: &[f32], f64s: &[f64], ks: &[usize]| Flat {
        f32: crate::tree_sum_slices(
            &ks.iter()
                .map(|&k| &f32s[k * len32..(k + 1) * len32])
                .collect::<Vec<_>>(),
        ),
        f64: crate::tree_sum_slices(
            &ks.iter()
                .map(|&k| &f64s[k * len64..(k + 1) * len64])
                .collect::<Vec<_>>(),
        ),
    };
    if crate::strategy::blocks_are_one_level(blocks, n) {
        let mut own = layout.tree_sum(lists)?;
        own.f64.push(crate::tree_sum(losses)[0]);
        return Ok(Flat {
            f32: crate::multiprocess::all_reduce_tree(&own.f32)?,
            f64: crate::multiprocess::all_reduce_tree(&own.f64)?,
        });
    }
    let longest = blocks.iter().map(|b| b.len()).max().unwrap_or(0);
    let mut mine = Flat {
        f32: Vec::with_capacity(longest * len32),
        f64: Vec::with_capacity(longest * len64),
    };
    for k in 0..longest {
        match (lists.get(k), losses.get(k)) {
            (Some(list), Some(loss)) => {
                let flat = layout.pack(list)?;
                mine.f32.extend_from_slice(&flat.f32);
                mine.f64.extend_from_slice(&flat.f64);
                mine.f64.push(loss[0]);
            }
            _ => {
                mine.f32.resize(mine.f32.len() + len32, 0.0);
                mine.f64.resize(mine.f64.len() + len64, 0.0);
            }
        }
    }
    let (f32s, f64s) = (all_gather(&mine.f32)?, all_gather(&mine.f64)?);
    let mut parts = Vec::with_capacity(n);
    for (r, b) in blocks.iter().enumerate() {
        parts.extend((0..b.len()).map(|k| r * longest + k));
    }
    Ok(fold(&f32s, &f64s, &parts))
}

#[cfg(not(feature = "mpi"))]
fn across_processes(
    _blocks: &[std::ops::Range<usize>],
    _n: usize,
    _lists: &[&[Array]],
    _losses: Vec<Vec<f64>>,
    _layout: &Layout,
) -> Result<Flat> {
    Err(Error::invalid(
        "Estimator::train",
        "a multi-process step in a build without the mpi feature",
    ))
}

enum Vars<'a> {
    Borrowed(&'a mut Variables),
    Owned(Box<Variables>),
}

impl Vars<'_> {
    fn get(&mut self) -> &mut Variables {
        match self {
            Vars::Borrowed(v) => v,
            Vars::Owned(v) => v,
        }
    }
}

/// The predictions of [`Estimator::predict`], one example at a time.
///
/// ```
/// use kiln_train::{demo, Dataset, Estimator, RunConfig};
/// let mut est = Estimator::new(demo::Mlp::new(&[2, 3]), RunConfig::new())?;
/// let batches = Dataset::from_fn(4, |_| kiln::Array::ones(&[2, 2], kiln::DType::F32));
/// for p in est.predict(&batches, None)? {
///     let class = p?["class"].item::<i64>()?;
///     assert!((0..3).contains(&class));
/// }
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub struct Predictions<'a, M: Model> {
    model: &'a M,
    vars: Vars<'a>,
    step: u64,
    iter: DatasetIter<M::Features>,
    ready: VecDeque<Prediction>,
}

impl<M: Model> Predictions<'_, M> {
    fn fill(&mut self) -> Result<bool> {
        const OP: &str = "Estimator::predict";
        let Some(features) = self.iter.next() else {
            return Ok(false);
        };
        let features = features?;
        let n = features.batch_len_checked(OP)?;
        let mut cx = Context::new(self.vars.get(), Mode::Predict, self.step, 0);
        let spec = self
            .model
            .model_fn(&features, None, Mode::Predict, &mut cx)?;
        spec.check(OP, Mode::Predict)?;
        let arrays: Vec<&Array> = spec.predictions.iter().map(|(_, a)| a).collect();
        kiln::eval(&arrays)?;
        let mut rows: Vec<Prediction> = (0..n).map(|_| Prediction::new()).collect();
        for (name, a) in &spec.predictions {
            if a.shape()[0] != n {
                return Err(Error::Spec {
                    op: OP,
                    mode: Mode::Predict,
                    missing: "predictions",
                    hint: format!(
                        "prediction {name:?} has shape {:?}, but the batch holds {n} \
                         examples: put the batch on the first axis",
                        a.shape()
                    ),
                });
            }
            for (row, part) in rows.iter_mut().zip(a.split(&vec![1; n])?) {
                row.insert(name.clone(), part.reshape(&shape_of(&a.shape()[1..])));
            }
        }
        self.ready.extend(rows);
        Ok(true)
    }
}

fn shape_of(s: &[usize]) -> Vec<isize> {
    s.iter().map(|&d| d as isize).collect()
}

impl<M: Model> Iterator for Predictions<'_, M> {
    type Item = Result<Prediction>;

    fn next(&mut self) -> Option<Result<Prediction>> {
        loop {
            if let Some(p) = self.ready.pop_front() {
                return Some(Ok(p));
            }
            match self.fill() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
