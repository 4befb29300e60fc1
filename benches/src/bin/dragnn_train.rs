//! Training-step speed of kiln-dragnn (issue 29): one training step (oracle walk, graph,
//! loss, gradients and Adam update in one kiln evaluation) with the bulk graph
//! (`Unroll::Bulk`: every step's embeddings at once, feed-forward units on all rows at once,
//! recurrent links through a table written with `where`) against the step-by-step graph
//! (`Unroll::StepByStep`, as DRAGNN's dynamic builder unrolls), interleaved in one process
//! on the same batches of the Turkish treebank's training part.
//!
//! Each mode first runs `--warmup` steps on every batch (compiling each batch shape once),
//! then the modes alternate batch by batch for `--steps` timed steps each; it prints one
//! JSON line per mode with the CPU model, the median and quartiles of the step time, and
//! sentences per second, plus one line with the ratio of the medians.
//!
//! Usage: `cargo run --release -p kiln-benches --bin dragnn-train -- [--spec SPEC] [--steps N]`.
//!
//! Depends on kiln-dragnn's public API, `clap`, `serde` and `serde_json`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use kiln_dragnn::document::{read_turkish_treebank, Sentence};
use kiln_dragnn::model::run::Batches;
use kiln_dragnn::model::train::{Trainer, Unroll};
use kiln_dragnn::model::MasterModel;
use kiln_dragnn::spec::{MasterSpec, TrainingGridSpec};
use kiln_dragnn::term_map::{TermMapOptions, TermMaps};
use serde::Serialize;

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "dragnn-train",
    version,
    about = "Times kiln-dragnn training steps, bulk against step by step; one JSON line per mode."
)]
struct Cli {
    /// The master spec (its directory's training_grid.textproto gives the grid point).
    #[arg(
        long,
        default_value = "crates/kiln-dragnn/specs/turkish/master_spec.textproto"
    )]
    spec: PathBuf,
    /// The treebank directory.
    #[arg(long, default_value = "data/turkish-treebanks")]
    data: PathBuf,
    /// Timed steps per mode.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Distinct batches (each mode warms up on all of them first).
    #[arg(long, default_value_t = 5)]
    batches: usize,
    /// Sentences per batch.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
}

#[derive(Serialize)]
struct Record {
    mode: String,
    cpu: String,
    steps: usize,
    batch_size: usize,
    median_s: f64,
    p25_s: f64,
    p75_s: f64,
    sentences_per_s: f64,
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let split = read_turkish_treebank(&cli.data)?;
    let maps = Arc::new(TermMaps::build(&split.train, &TermMapOptions::default()));
    let spec = MasterSpec::from_file(&cli.spec)?;
    let grid_path = cli.spec.with_file_name("training_grid.textproto");
    let grid = TrainingGridSpec::from_text(&std::fs::read_to_string(&grid_path)?)?;
    let point = grid.grid_point.first().cloned().unwrap_or_default();
    let lengths: Vec<usize> = split.train.iter().map(Sentence::len).collect();
    let mut batcher = Batches::new(&lengths, cli.batch_size, 7);
    let batches: Vec<Vec<Sentence>> = (0..cli.batches.max(1))
        .map(|_| {
            batcher
                .next_batch()
                .iter()
                .map(|&i| split.train[i].clone())
                .collect()
        })
        .collect();
    let modes = [("bulk", Unroll::Bulk), ("step-by-step", Unroll::StepByStep)];
    let mut trainers = Vec::new();
    for (_, unroll) in modes {
        let model = MasterModel::new(spec.clone(), point.clone(), maps.clone(), kiln::DType::F32)?;
        let mut t = Trainer::new(model, &grid.target, unroll)?;
        for b in &batches {
            t.step(0, b)?;
        }
        trainers.push(t);
    }
    let mut times = vec![Vec::new(); modes.len()];
    for s in 0..cli.steps {
        let b = &batches[s % batches.len()];
        for (m, t) in trainers.iter_mut().enumerate() {
            let start = Instant::now();
            t.step(0, b)?;
            times[m].push(start.elapsed().as_secs_f64());
        }
    }
    let mut medians = Vec::new();
    for ((name, _), mut ts) in modes.iter().zip(times) {
        ts.sort_by(f64::total_cmp);
        let median = quantile(&ts, 0.5);
        medians.push(median);
        let rec = Record {
            mode: name.to_string(),
            cpu: kiln_benches::cpu_model(),
            steps: ts.len(),
            batch_size: cli.batch_size,
            median_s: median,
            p25_s: quantile(&ts, 0.25),
            p75_s: quantile(&ts, 0.75),
            sentences_per_s: cli.batch_size as f64 / median,
        };
        println!("{}", serde_json::to_string(&rec)?);
    }
    println!(
        "{}",
        serde_json::json!({"ratio": "step-by-step median / bulk median", "value": medians[1] / medians[0]})
    );
    Ok(())
}
