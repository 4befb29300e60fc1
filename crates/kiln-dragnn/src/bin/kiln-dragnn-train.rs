//! `kiln-dragnn-train`: trains a DRAGNN master spec by oracle on CoNLL-U files and saves the
//! model with the best dev score.
//!
//! ```text
//! kiln-dragnn-train --spec SPEC --train train.conllu --dev dev.conllu --out DIR
//!                   [--grid TRAINING_GRID] [--steps N] [--batch-size N] [--report-every N]
//!                   [--time-limit SECONDS] [--metric las|uas|upos|upos-las]
//!                   [--projectivize-training-set true|false]
//!                   [--teacher MODEL_DIR]... [--distillation-weight W]
//! kiln-dragnn-train --spec SPEC --treebank data/turkish-treebanks --out DIR ...
//! ```
//!
//! The term maps are built from the training file.
//! Non-projective training trees are lifted to projective ones first (as the reference's
//! trainer does by default), so that arc-standard's static oracle can follow every one.
//! `DIR` receives the model (see `kiln_dragnn::model`), `train.jsonl` (one JSON object per
//! step and per evaluation) and `result.json`.
//! A progress bar is drawn when stderr is a terminal; otherwise each evaluation is one
//! line on stderr.
//!
//! Depends on kiln-dragnn's public API, `clap`, `indicatif` and `serde_json`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use kiln_dragnn::document::{read_conllu_file, read_turkish_treebank, Sentence};
use kiln_dragnn::model::infer::InferOptions;
use kiln_dragnn::model::run::{run_training, Event, Metric, RunOptions};
use kiln_dragnn::model::train::{Trainer, Unroll};
use kiln_dragnn::model::MasterModel;
use kiln_dragnn::spec::{GridPoint, MasterSpec, TrainTarget, TrainingGridSpec};
use kiln_dragnn::term_map::{TermMapOptions, TermMaps};
use kiln_dragnn::transition::projectivize;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum MetricArg {
    Las,
    Uas,
    Upos,
    UposLas,
}

/// Trains a DRAGNN model by oracle and keeps the best one on dev.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The master spec (protobuf text format).
    #[arg(long)]
    spec: PathBuf,
    /// The training grid (a `TrainingGridSpec` in protobuf text format: `grid_point { ... }`
    /// and `target { ... }` entries); default: `training_grid.textproto` beside the spec,
    /// else the default grid point and one target training every component.
    #[arg(long)]
    grid: Option<PathBuf>,
    /// Training sentences (CoNLL-U).
    #[arg(long, required_unless_present = "treebank")]
    train: Option<PathBuf>,
    /// Dev sentences (CoNLL-U).
    #[arg(long, required_unless_present = "treebank")]
    dev: Option<PathBuf>,
    /// The Turkish treebank directory (web.conllu, wiki.conllu): its train and dev parts.
    #[arg(long, conflicts_with_all = ["train", "dev"])]
    treebank: Option<PathBuf>,
    /// Where the model goes.
    #[arg(long)]
    out: PathBuf,
    /// Training steps (batches) per target.
    #[arg(long, default_value_t = 3000)]
    steps: usize,
    /// Sentences per batch.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Evaluate on dev every this many steps.
    #[arg(long, default_value_t = 250)]
    report_every: usize,
    /// Stop after this many seconds (evaluating once more first).
    #[arg(long)]
    time_limit: Option<f64>,
    /// The metric the best checkpoint is chosen by.
    #[arg(long, value_enum, default_value_t = MetricArg::Las)]
    metric: MetricArg,
    /// Threads of dev evaluation.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Lift non-projective training trees to projective ones (the reference trainer's
    /// `projectivize_training_set`); the dev part is scored against its own trees.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    projectivize_training_set: bool,
    /// A trained model (a directory `kiln-dragnn-train` wrote) whose action distributions
    /// the model also fits (knowledge distillation; repeat for an ensemble, whose mean
    /// distribution is fitted). Teachers must have been trained on the same training set.
    #[arg(long)]
    teacher: Vec<PathBuf>,
    /// The weight of the teachers' term in each component's cost (the oracle's has
    /// 1 − this).
    #[arg(long, default_value_t = 0.5)]
    distillation_weight: f64,
}

/// Lifts each sentence's tree to a projective one (`kiln_dragnn::transition::projectivize`)
/// and returns how many sentences changed; a sentence whose heads are incomplete or not a
/// tree is left as it is.
fn projectivize_all(sentences: &mut [Sentence]) -> Result<usize, String> {
    let mut changed = 0;
    for s in sentences {
        if (0..s.len()).any(|i| s.head(i).is_none()) {
            continue;
        }
        let mut heads = s.heads();
        if projectivize(&mut heads).is_some_and(|lifts| lifts > 0) {
            for (i, &h) in heads.iter().enumerate() {
                s.set_head(i, Some(h)).map_err(|e| e.to_string())?;
            }
            changed += 1;
        }
    }
    Ok(changed)
}

fn read_grid(args: &Args) -> Result<(GridPoint, Vec<TrainTarget>), String> {
    let path = args.grid.clone().or_else(|| {
        let p = args.spec.parent()?.join("training_grid.textproto");
        p.exists().then_some(p)
    });
    match path {
        Some(p) => {
            let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            let g =
                TrainingGridSpec::from_text(&text).map_err(|e| format!("{}: {e}", p.display()))?;
            if g.grid_point.len() > 1 {
                return Err(format!(
                    "{}: {} grid points; kiln-dragnn-train trains one (split the grid into files)",
                    p.display(),
                    g.grid_point.len()
                ));
            }
            let point = g.grid_point.into_iter().next().unwrap_or_default();
            Ok((point, g.target))
        }
        None => Ok((GridPoint::default(), Vec::new())),
    }
}

fn run(args: Args) -> Result<(), String> {
    let spec = MasterSpec::from_file(&args.spec).map_err(|e| e.to_string())?;
    let (grid, targets) = read_grid(&args)?;
    let (mut train, dev): (Vec<Sentence>, Vec<Sentence>) = match &args.treebank {
        Some(dir) => {
            let split = read_turkish_treebank(dir).map_err(|e| e.to_string())?;
            (split.train, split.dev)
        }
        None => {
            let read = |p: &Option<PathBuf>| -> Result<Vec<Sentence>, String> {
                let p = p
                    .as_ref()
                    .ok_or("--train and --dev are needed without --treebank")?;
                read_conllu_file(p).map_err(|e| e.to_string())
            };
            (read(&args.train)?, read(&args.dev)?)
        }
    };
    if args.projectivize_training_set {
        let lifted = projectivize_all(&mut train)?;
        eprintln!(
            "projectivized the training set: {lifted} of {} trees lifted",
            train.len()
        );
    }
    let maps = TermMaps::build(&train, &TermMapOptions::default());
    let model = MasterModel::new(spec, grid, Arc::new(maps), kiln::DType::F32)
        .map_err(|e| e.to_string())?;
    let mut trainer = Trainer::new(model, &targets, Unroll::Bulk).map_err(|e| e.to_string())?;
    if !args.teacher.is_empty() {
        let teachers = args
            .teacher
            .iter()
            .map(|p| MasterModel::load(p).map_err(|e| format!("--teacher {}: {e}", p.display())))
            .collect::<Result<Vec<_>, _>>()?;
        trainer
            .set_teachers(teachers, args.distillation_weight)
            .map_err(|e| e.to_string())?;
        eprintln!(
            "distilling from {} teacher(s), weight {}",
            args.teacher.len(),
            args.distillation_weight
        );
    }
    let n = trainer.target_names().len();
    let options = RunOptions {
        batch_size: args.batch_size,
        pretrain_steps: Vec::new(),
        train_steps: vec![args.steps; n],
        report_every: args.report_every,
        time_limit: args.time_limit,
        metric: match args.metric {
            MetricArg::Las => Metric::Las,
            MetricArg::Uas => Metric::Uas,
            MetricArg::Upos => Metric::Upos,
            MetricArg::UposLas => Metric::UposLas,
        },
        infer: InferOptions {
            threads: args.threads,
            ..InferOptions::default()
        },
        ..RunOptions::default()
    };
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let log_path = args.out.join("train.jsonl");
    let mut log = std::io::BufWriter::new(
        std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?,
    );
    let bar = if std::io::stderr().is_terminal() {
        let b = ProgressBar::new((args.steps * n) as u64);
        b.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    } else {
        ProgressBar::hidden()
    };
    eprintln!(
        "training on {} sentences, evaluating on {} ({} targets, {} steps each)",
        train.len(),
        dev.len(),
        n,
        args.steps
    );
    let mut log_error = None;
    let result = run_training(&mut trainer, &train, &dev, &options, |event| {
        if let Ok(line) = serde_json::to_string(event) {
            if let Err(e) = writeln!(log, "{line}") {
                log_error.get_or_insert(e);
            }
        }
        match event {
            Event::Step { stats, .. } => {
                bar.inc(1);
                bar.set_message(format!("loss {:.3}", stats.loss));
            }
            Event::Eval {
                step,
                seconds,
                score,
                best,
                ..
            } => {
                let line = format!(
                    "step {step} ({seconds:.0} s): dev {score}{}",
                    if *best { " (best)" } else { "" }
                );
                if bar.is_hidden() {
                    eprintln!("{line}");
                } else {
                    bar.println(line);
                }
            }
        }
    })
    .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    log.flush()
        .map_err(|e| format!("{}: {e}", log_path.display()))?;
    if let Some(e) = log_error {
        return Err(format!("{}: {e}", log_path.display()));
    }
    trainer.model().save(&args.out).map_err(|e| e.to_string())?;
    let summary = serde_json::json!({
        "steps": result.steps,
        "seconds": result.seconds,
        "best_step": result.best_step,
        "best_metric": result.best_metric,
        "best_dev": result.best_score,
    });
    let path = args.out.join("result.json");
    std::fs::write(&path, format!("{summary:#}\n"))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!(
        "done: {} steps in {:.0} s; best dev at step {}: {}",
        result.steps,
        result.seconds,
        result.best_step,
        result
            .best_score
            .map(|s| s.to_string())
            .unwrap_or_else(|| "(no dev set)".into())
    );
    eprintln!("model saved to {}", args.out.display());
    Ok(())
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kiln-dragnn-train: {e}");
            ExitCode::FAILURE
        }
    }
}
