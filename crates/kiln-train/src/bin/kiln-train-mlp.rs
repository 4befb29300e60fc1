//! `kiln-train-mlp`: trains the demo MLP on a synthetic classification set with
//! kiln-train's estimator — the crate's demo, and the process the resume and crash tests
//! start, kill and restart. Prints one JSON line with the outcome.
//!
//! Depends on kiln-train (`Estimator`, `demo`), clap and serde_json.

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
}

fn main() {
    let args = Args::parse();
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
    let strategy = if args.replicas == 0 {
        Strategy::OneDevice
    } else {
        Strategy::mirrored(args.replicas, args.micro_batch)?
    };
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
    let report = est.train(&input, until, &mut [&mut guard])?;
    let eval = kiln_train::Dataset::from_slices(data)
        .batch(256)?
        .try_map(kiln_train::demo::collate);
    let metrics = est.evaluate(&eval, None, None)?;
    Ok(serde_json::json!({
        "global_step": report.global_step,
        "steps": report.steps,
        "last_loss": report.last_loss,
        "stopped_by": report.stopped_by,
        "checkpoint": report.checkpoint,
        "eval_loss": metrics["loss"],
        "eval_accuracy": metrics["accuracy"],
    }))
}
