//! The training run (DRAGNN's `trainer_lib.run_training`): a schedule of targets, batches
//! of similar length, dev evaluation every `report_every` steps, and the best parameters
//! by the evaluation metric kept (in memory: a snapshot holds the parameters' array
//! handles, which optimizer steps replace rather than mutate, so it costs no copy).
//! With `use_moving_average` the run keeps exponential moving averages of the parameters
//! and evaluates, keeps and returns those.
//!
//! Depends on [`super::train`], [`super::infer`], [`crate::scorer`] and
//! [`crate::document`].

use std::time::Instant;

use kiln::Array;

use super::infer::{parse, InferOptions};
use super::train::{StepStats, Trainer};
use crate::document::Sentence;
use crate::network::NetworkError;
use crate::scorer::{score, Score};

/// The seed of DRAGNN's target schedule.
pub const SCHEDULE_SEED: u64 = 0x31337;

/// What a run selects checkpoints by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Metric {
    /// Labeled attachment score.
    Las,
    /// Unlabeled attachment score.
    Uas,
    /// UPOS accuracy.
    Upos,
    /// The mean of UPOS accuracy and LAS.
    UposLas,
}

impl Metric {
    /// The metric's value in a score (all words, punctuation included).
    ///
    /// ```
    /// use kiln_dragnn::model::run::Metric;
    /// let s = kiln_dragnn::scorer::Score::default();
    /// assert!(Metric::Las.of(&s).is_nan());
    /// ```
    pub fn of(self, s: &Score) -> f64 {
        match self {
            Metric::Las => s.all.las_pct(),
            Metric::Uas => s.all.uas_pct(),
            Metric::Upos => s.all.upos_pct(),
            Metric::UposLas => (s.all.upos_pct() + s.all.las_pct()) / 2.0,
        }
    }
}

/// Options of a training run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOptions {
    /// Sentences per batch.
    pub batch_size: usize,
    /// Steps of each target before the interleaved schedule, in target order.
    pub pretrain_steps: Vec<usize>,
    /// Steps of each target in the interleaved schedule.
    pub train_steps: Vec<usize>,
    /// Evaluate on dev every this many steps (and at the end).
    pub report_every: usize,
    /// The seed of the schedule and of the batches.
    pub seed: u64,
    /// Stop (after evaluating) once this many seconds have passed.
    pub time_limit: Option<f64>,
    /// The checkpoint metric.
    pub metric: Metric,
    /// Inference options of dev evaluation.
    pub infer: InferOptions,
}

impl Default for RunOptions {
    fn default() -> RunOptions {
        RunOptions {
            batch_size: 32,
            pretrain_steps: Vec::new(),
            train_steps: vec![1000],
            report_every: 200,
            seed: SCHEDULE_SEED,
            time_limit: None,
            metric: Metric::Las,
            infer: InferOptions::default(),
        }
    }
}

/// What a run reports.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A training step.
    Step {
        /// The step, from 1.
        step: usize,
        /// Seconds since the start.
        seconds: f64,
        /// The step's statistics.
        #[serde(flatten)]
        stats: StepStats,
    },
    /// A dev evaluation.
    Eval {
        /// The step.
        step: usize,
        /// Seconds since the start (training and evaluation).
        seconds: f64,
        /// Seconds the evaluation took.
        eval_seconds: f64,
        /// The metric's value.
        metric: f64,
        /// Whether it is the best so far.
        best: bool,
        /// The dev score.
        score: Score,
    },
}

/// The targets' schedule: each target's pretrain steps in order, then every target's
/// train steps shuffled together with `seed`.
///
/// ```
/// use kiln_dragnn::model::run::schedule;
/// let s = schedule(&[2, 0], &[3, 5], 7);
/// assert_eq!(&s[..2], [0, 0]);
/// assert_eq!(s.len(), 10);
/// assert_eq!(s.iter().filter(|&&t| t == 1).count(), 5);
/// ```
pub fn schedule(pretrain: &[usize], train: &[usize], seed: u64) -> Vec<usize> {
    let mut out = Vec::new();
    for (t, &n) in pretrain.iter().enumerate() {
        out.extend(std::iter::repeat_n(t, n));
    }
    let mut rest = Vec::new();
    for (t, &n) in train.iter().enumerate() {
        rest.extend(std::iter::repeat_n(t, n));
    }
    fastrand::Rng::with_seed(seed).shuffle(&mut rest);
    out.extend(rest);
    out
}

/// Endless batches of sentence indices: each epoch shuffles the corpus, sorts chunks of
/// 16 batches by length (so a batch's sentences have similar lengths and few padded
/// steps), and shuffles the batches.
///
/// ```
/// use kiln_dragnn::model::run::Batches;
/// let lengths = [3, 9, 4, 8, 5, 7];
/// let mut b = Batches::new(&lengths, 2, 1);
/// let first: Vec<Vec<usize>> = (0..3).map(|_| b.next_batch()).collect();
/// let mut all: Vec<usize> = first.concat();
/// all.sort();
/// assert_eq!(all, [0, 1, 2, 3, 4, 5]); // one epoch covers every sentence once
/// ```
#[derive(Debug)]
pub struct Batches {
    lengths: Vec<usize>,
    batch: usize,
    rng: fastrand::Rng,
    queue: Vec<Vec<usize>>,
}

impl Batches {
    /// Batches of `batch` sentences over sentences of these lengths.
    pub fn new(lengths: &[usize], batch: usize, seed: u64) -> Batches {
        Batches {
            lengths: lengths.to_vec(),
            batch: batch.max(1),
            rng: fastrand::Rng::with_seed(seed),
            queue: Vec::new(),
        }
    }

    /// The next batch (empty only for an empty corpus).
    pub fn next_batch(&mut self) -> Vec<usize> {
        if self.queue.is_empty() {
            let mut order: Vec<usize> = (0..self.lengths.len()).collect();
            self.rng.shuffle(&mut order);
            for chunk in order.chunks_mut(self.batch * 16) {
                chunk.sort_by_key(|&i| self.lengths[i]);
                self.queue
                    .extend(chunk.chunks(self.batch).map(<[usize]>::to_vec));
            }
            self.rng.shuffle(&mut self.queue);
        }
        self.queue.pop().unwrap_or_default()
    }
}

/// The values of `trainer`'s parameters, in store order (handles: no copy).
fn values(trainer: &Trainer) -> Vec<Array> {
    trainer
        .model()
        .params()
        .parameters()
        .map(|p| p.value())
        .collect()
}

/// Exponential moving averages of every parameter (`GridPoint.use_moving_average`), as
/// TensorFlow's `ExponentialMovingAverage` with `num_updates` keeps them for DRAGNN: after
/// update `n`, `avg = d·avg + (1 − d)·value` with `d = min(average_weight, (1 + n) / (10 + n))`,
/// starting from the initial values. Dev evaluation, the best snapshot and so the saved model
/// use the averages.
struct Average {
    weight: f64,
    values: Vec<Array>,
}

impl Average {
    /// The averages of `trainer`'s parameters, when its grid point asks for them; an
    /// `average_weight` outside `(0, 1]` is an error naming it.
    fn new(trainer: &Trainer) -> crate::Result<Option<Average>> {
        let grid = trainer.model().grid();
        if !grid.use_moving_average() {
            return Ok(None);
        }
        let weight = grid.average_weight();
        if !(weight > 0.0 && weight <= 1.0) {
            return Err(NetworkError::BadUnit {
                component: "(grid point)".into(),
                unit: "average_weight".into(),
                message: format!("average_weight is {weight}; it must be in (0, 1]"),
            }
            .into());
        }
        Ok(Some(Average {
            weight,
            values: values(trainer),
        }))
    }

    /// Folds in the parameters' values after update `n` (from 1).
    fn update(&mut self, trainer: &Trainer, n: usize) -> crate::Result<()> {
        let n = n as f64;
        let d = self.weight.min((1.0 + n) / (10.0 + n));
        let next: Vec<Array> = trainer
            .model()
            .params()
            .parameters()
            .zip(&self.values)
            .map(|(p, avg)| {
                let v = p.value();
                // In the parameter's own dtype: f64 scalars are weak, so f32 stays f32.
                avg * d + &(&v * (1.0 - d))
            })
            .collect();
        kiln::eval(&next.iter().collect::<Vec<_>>())?;
        self.values = next;
        Ok(())
    }

    /// Assigns the averages to `trainer`'s parameters.
    fn assign_to(&self, trainer: &Trainer) -> crate::Result<()> {
        for (p, v) in trainer.model().params().parameters().zip(&self.values) {
            p.assign(v.clone()).map_err(NetworkError::from)?;
        }
        Ok(())
    }
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// Steps taken.
    pub steps: usize,
    /// The best dev metric.
    pub best_metric: f64,
    /// The step of the best evaluation.
    pub best_step: usize,
    /// The dev score of the best evaluation.
    pub best_score: Option<Score>,
    /// Seconds spent.
    pub seconds: f64,
}

/// Runs training: the schedule of `options` over `train`, dev evaluations, and at the end
/// the trainer's model holds the best parameters found (by dev metric). `report` sees
/// every event (for logs and progress).
pub fn run_training(
    trainer: &mut Trainer,
    train: &[Sentence],
    dev: &[Sentence],
    options: &RunOptions,
    mut report: impl FnMut(&Event),
) -> crate::Result<RunResult> {
    let targets = trainer.target_names().len();
    let bad = |message: String| -> crate::Error {
        NetworkError::BadUnit {
            component: "(training run)".into(),
            unit: "options".into(),
            message,
        }
        .into()
    };
    if options.train_steps.len() != targets
        || (!options.pretrain_steps.is_empty() && options.pretrain_steps.len() != targets)
    {
        return Err(bad(format!(
            "{} targets but {} train step counts and {} pretrain step counts (give one per target)",
            targets,
            options.train_steps.len(),
            options.pretrain_steps.len()
        )));
    }
    if train.is_empty() {
        return Err(bad("no training sentences".into()));
    }
    let mut average = Average::new(trainer)?;
    let plan = schedule(&options.pretrain_steps, &options.train_steps, options.seed);
    let lengths: Vec<usize> = train.iter().map(Sentence::len).collect();
    let mut batches = Batches::new(&lengths, options.batch_size, options.seed ^ 0x5eed);
    let start = Instant::now();
    let mut best: Option<(f64, usize, Score, Vec<Array>)> = None;
    let mut steps = 0;
    let evaluate = |trainer: &Trainer,
                    average: &Option<Average>,
                    step: usize,
                    best: &mut Option<(f64, usize, Score, Vec<Array>)>,
                    report: &mut dyn FnMut(&Event)|
     -> crate::Result<()> {
        if dev.is_empty() {
            return Ok(());
        }
        let t = Instant::now();
        // With moving averages the averaged parameters are evaluated (and kept as the best),
        // then the training values are put back.
        let training = values(trainer);
        if let Some(a) = average {
            a.assign_to(trainer)?;
        }
        let parsed = parse(trainer.model(), dev, &options.infer);
        let snapshot = values(trainer);
        for (p, v) in trainer.model().params().parameters().zip(&training) {
            p.assign(v.clone()).map_err(NetworkError::from)?;
        }
        let s = score(dev, &parsed?)?;
        let m = options.metric.of(&s);
        let is_best = best.as_ref().is_none_or(|(b, ..)| m > *b);
        if is_best {
            *best = Some((m, step, s, snapshot));
        }
        report(&Event::Eval {
            step,
            seconds: start.elapsed().as_secs_f64(),
            eval_seconds: t.elapsed().as_secs_f64(),
            metric: m,
            best: is_best,
            score: s,
        });
        Ok(())
    };
    for (i, &target) in plan.iter().enumerate() {
        let idx = batches.next_batch();
        let batch: Vec<Sentence> = idx.iter().map(|&j| train[j].clone()).collect();
        let stats = trainer.step(target, &batch)?;
        steps = i + 1;
        if let Some(a) = average.as_mut() {
            a.update(trainer, steps)?;
        }
        report(&Event::Step {
            step: steps,
            seconds: start.elapsed().as_secs_f64(),
            stats,
        });
        let out_of_time = options
            .time_limit
            .is_some_and(|l| start.elapsed().as_secs_f64() >= l);
        if steps % options.report_every.max(1) == 0 || steps == plan.len() || out_of_time {
            evaluate(trainer, &average, steps, &mut best, &mut report)?;
        }
        if out_of_time {
            break;
        }
    }
    let mut result = RunResult {
        steps,
        best_metric: f64::NAN,
        best_step: steps,
        best_score: None,
        seconds: start.elapsed().as_secs_f64(),
    };
    if let Some((m, step, s, snapshot)) = best {
        for (p, v) in trainer.model().params().parameters().zip(snapshot) {
            p.assign(v).map_err(NetworkError::from)?;
        }
        result.best_metric = m;
        result.best_step = step;
        result.best_score = Some(s);
    }
    Ok(result)
}
