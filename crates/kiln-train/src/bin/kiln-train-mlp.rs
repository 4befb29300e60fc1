//! `kiln-train-mlp`: trains the demo MLP on a synthetic classification set with
//! kiln-train's estimator — the crate's demo, and the process the resume and crash tests
//! start, kill and restart. Prints one JSON line with the outcome.
//!
//! With `--mpi` (feature `mpi`) each process of an `mpiexec -np N` job is one replica.
//!
//! Depends on kiln-train (`Estimator`, `demo`, with `mpi` its `multiprocess`), clap and
//! serde_json.

use clap::Parser;
use kiln_train::demo::{synthetic_classification, training_input, Mlp};
use kiln_train::{Estimator, NanGuard, RunConfig, Strategy, Until};
use std::path::PathBuf;

/// Train an MLP on Gaussian clusters with kiln-train.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Checkpoints go here; an existing checkpoint is resumed.
    #[arg(long)]
    model_dir: Option<PathBuf>,
    /// Train this many more steps.
    #[arg(long, conflicts_with = "max_steps")]
    steps: Option<u64>,
    /// Train until the global step reaches this.
    #[arg(long)]
    max_steps: Option<u64>,
    /// Mirrored replicas (0: one device).
    #[arg(long, default_value_t = 0)]
    replicas: usize,
    /// Examples per micro-batch with --replicas.
    #[arg(long, default_value_t = 16)]
    micro_batch: usize,
    /// Examples per global batch.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Examples in the data set.
    #[arg(long, default_value_t = 2048)]
    examples: usize,
    /// Features per example.
    #[arg(long, default_value_t = 32)]
    dims: usize,
    /// Hidden widths, comma-separated.
    #[arg(long, default_value = "64,64", value_delimiter = ',')]
    hidden: Vec<usize>,
    /// Classes.
    #[arg(long, default_value_t = 8)]
    classes: usize,
    /// The run's seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Dropout probability of hidden units.
    #[arg(long, default_value_t = 0.1)]
    dropout: f64,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 3e-3)]
    lr: f64,
    /// Learning-rate decay factor every --decay-steps.
    #[arg(long, default_value_t = 0.9)]
    decay: f64,
    /// See --decay.
    #[arg(long, default_value_t = 10)]
    decay_steps: u64,
    /// Save a checkpoint every this many steps.
    #[arg(long)]
    save_every: Option<u64>,
    /// Keep at most this many checkpoints (0: all).
    #[arg(long, default_value_t = 5)]
    keep_max: usize,
    /// Log a JSON line every this many steps (to MODEL_DIR/train.jsonl).
    #[arg(long)]
    log_every: Option<u64>,
    /// Batches prepared ahead.
    #[arg(long, default_value_t = 2)]
    prefetch: usize,
    /// One replica per MPI process (run under `mpiexec -np N`; built with feature `mpi`).
    #[arg(long, conflicts_with = "replicas")]
    mpi: bool,
    /// Fault injection for crash tests: panic after step STEP (on rank RANK only, if given).
    #[arg(long, value_name = "STEP[:RANK]")]
    panic_at: Option<String>,
    /// Fault injection for deadline tests: hang after step STEP (on rank RANK only).
    #[arg(long, value_name = "STEP[:RANK]")]
    stall_at: Option<String>,
}

/// Panics or hangs after a given step (on one rank, or on all).
struct Fault {
    stall: bool,
    step: u64,
    rank: Option<usize>,
    my_rank: usize,
}

impl Fault {
    fn parse(stall: bool, spec: &str, my_rank: usize) -> kiln_train::Result<Fault> {
        let (step, rank) = match spec.split_once(':') {
            Some((s, r)) => (s, Some(r)),
            None => (spec, None),
        };
        let bad = || {
            kiln_train::Error::invalid(
                "--panic-at/--stall-at",
                format!("{spec:?} is not STEP or STEP:RANK (whole numbers)"),
            )
        };
        Ok(Fault {
            stall,
            step: step.parse().map_err(|_| bad())?,
            rank: rank.map(|r| r.parse()).transpose().map_err(|_| bad())?,
            my_rank,
        })
    }
}

impl<M: kiln_train::Model> kiln_train::Hook<M> for Fault {
    fn after_step(
        &mut self,
        _cx: &mut kiln_train::RunContext<'_, M>,
        step: &kiln_train::StepInfo,
    ) -> kiln_train::Result<()> {
        if step.step == self.step && self.rank.is_none_or(|r| r == self.my_rank) {
            if self.stall {
                eprintln!(
                    "--stall-at: step {} on rank {}: hanging",
                    self.step, self.my_rank
                );
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
            panic!("--panic-at: step {} on rank {}", self.step, self.my_rank);
        }
        Ok(())
    }
}

fn main() {
    let args = Args::parse();
    #[cfg(feature = "mpi")]
    let _mpi = if args.mpi {
        match kiln_train::multiprocess::init() {
            Ok(m) => Some(m),
            Err(e) => {
                eprintln!("kiln-train-mlp: {e}");
                std::process::exit(1);
            }
        }
    } else {
        None
    };
    match run(&args) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("kiln-train-mlp: {e}");
            std::process::exit(1);
        }
    }
}

fn run(args: &Args) -> kiln_train::Result<serde_json::Value> {
    let mut sizes = vec![args.dims];
    sizes.extend(&args.hidden);
    sizes.push(args.classes);
    let mut mlp = Mlp::new(&sizes);
    mlp.dropout = args.dropout;
    mlp.learning_rate = args.lr;
    mlp.decay = args.decay;
    mlp.decay_steps = args.decay_steps;
    let data = synthetic_classification(args.examples, args.dims, args.classes, 1.0, 42)?;
    let input = training_input(data.clone(), args.batch, args.seed)?;
    let strategy = if args.mpi {
        multi_process(args.micro_batch)?
    } else if args.replicas == 0 {
        Strategy::OneDevice
    } else {
        Strategy::mirrored(args.replicas, args.micro_batch)?
    };
    let my_rank = strategy.rank();
    let mut config = RunConfig::new()
        .seed(args.seed)
        .strategy(strategy)
        .keep_max(args.keep_max)
        .prefetch(args.prefetch);
    if let Some(dir) = &args.model_dir {
        config = config.model_dir(dir);
    }
    if let Some(n) = args.save_every {
        config = config.save_every_steps(n);
    }
    if let Some(n) = args.log_every {
        config = config.log_every(n);
    }
    let mut est = Estimator::new(mlp, config)?;
    let until = match (args.steps, args.max_steps) {
        (_, Some(m)) => Until::MaxSteps(m),
        (Some(s), None) => Until::Steps(s),
        (None, None) => Until::Steps(100),
    };
    let mut guard = NanGuard::new(10);
    let mut faults = Vec::new();
    if let Some(spec) = &args.panic_at {
        faults.push(Fault::parse(false, spec, my_rank)?);
    }
    if let Some(spec) = &args.stall_at {
        faults.push(Fault::parse(true, spec, my_rank)?);
    }
    let mut hooks: Vec<&mut dyn kiln_train::Hook<Mlp>> = vec![&mut guard];
    for f in faults.iter_mut() {
        hooks.push(f);
    }
    let report = est.train(&input, until, &mut hooks)?;
    let eval = kiln_train::Dataset::from_slices(data)
        .batch(256)?
        .try_map(kiln_train::demo::collate);
    let metrics = est.evaluate(&eval, None, None)?;
    Ok(serde_json::json!({
        "rank": my_rank,
        "global_step": report.global_step,
        "steps": report.steps,
        "last_loss": report.last_loss,
        "stopped_by": report.stopped_by,
        "checkpoint": report.checkpoint,
        "eval_loss": metrics["loss"],
        "eval_accuracy": metrics["accuracy"],
        "compiles": kiln::cache_stats().misses,
    }))
}

#[cfg(feature = "mpi")]
fn multi_process(micro_batch_size: usize) -> kiln_train::Result<Strategy> {
    Ok(Strategy::MultiProcess { micro_batch_size })
}

#[cfg(not(feature = "mpi"))]
fn multi_process(_micro_batch_size: usize) -> kiln_train::Result<Strategy> {
    Err(kiln_train::Error::invalid(
        "--mpi",
        "this kiln-train-mlp was built without MPI: build it with `--features kiln-train/mpi`",
    ))
}
