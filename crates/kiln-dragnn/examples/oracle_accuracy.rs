//! `oracle_accuracy`: how well trained models, and the ensemble of their mean
//! probabilities, predict the oracle's actions at the oracle's states of a treebank part —
//! the ceiling of what distilling the ensemble into one model (`Trainer::set_teachers`)
//! can teach at those states.
//!
//! ```text
//! cargo run --release -p kiln-dragnn --example oracle_accuracy -- \
//!     --treebank data/turkish-treebanks --part dev MODEL_DIR MODEL_DIR...
//! ```
//!
//! Prints one JSON line per component with actions: per model and for the ensemble, the
//! action accuracy (%) and the mean negative log-likelihood of the oracle's action.
//! The models must share components and actions (as teachers must).
//!
//! Depends on kiln-dragnn's public API (`model::train::{walk_oracle, forward}`), `clap`
//! and `serde_json`.

use std::path::PathBuf;

use clap::Parser;
use kiln_dragnn::document::read_turkish_treebank;
use kiln_dragnn::model::train::{forward, walk_oracle, Unroll};
use kiln_dragnn::model::MasterModel;
use kiln_dragnn::session::ComputeSession;

/// Oracle-state action accuracy of models and of their ensemble.
#[derive(Parser, Debug)]
struct Args {
    /// The Turkish treebank directory.
    #[arg(long)]
    treebank: PathBuf,
    /// The part: train, dev or test.
    #[arg(long, default_value = "dev")]
    part: String,
    /// Sentences per evaluation.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Model directories.
    #[arg(required = true)]
    models: Vec<PathBuf>,
}

/// Per model, then the ensemble: oracle actions predicted and the summed negative
/// log-likelihood of the oracle's action.
#[derive(Clone, Default)]
struct Tally {
    correct: Vec<usize>,
    nll: Vec<f64>,
    total: usize,
}

/// A component's probabilities at every state, row-major, and its action count.
type Probabilities = Option<(Vec<f32>, usize)>;

fn argmax(row: &[f32]) -> usize {
    (0..row.len())
        .max_by(|&x, &y| row[x].total_cmp(&row[y]))
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let split = read_turkish_treebank(&args.treebank)?;
    let sentences = match args.part.as_str() {
        "train" => split.train,
        "dev" => split.dev,
        "test" => split.test,
        other => return Err(format!("--part {other:?}: expected train, dev or test").into()),
    };
    let models: Vec<MasterModel> = args
        .models
        .iter()
        .map(|p| MasterModel::load(p).map_err(|e| format!("{}: {e}", p.display())))
        .collect::<Result<_, _>>()?;
    let mut sessions: Vec<ComputeSession> = models
        .iter()
        .map(|m| ComputeSession::new(0, m.spec(), m.grid(), m.maps().clone()))
        .collect::<Result<_, _>>()?;
    let components = models[0].components().len();
    let k = models.len();
    let mut tallies = vec![
        Tally {
            correct: vec![0; k + 1],
            nll: vec![0.0; k + 1],
            total: 0,
        };
        components
    ];
    for batch in sentences.chunks(args.batch_size.max(1)) {
        // probs[model][component]: row-major probabilities and the action count
        let mut probs: Vec<Vec<Probabilities>> = Vec::new();
        let mut labels: Vec<Vec<i64>> = Vec::new();
        for (m, s) in models.iter().zip(sessions.iter_mut()) {
            if m.components().len() != components {
                return Err("the models have different numbers of components".into());
            }
            let walks = walk_oracle(m, s, batch, components - 1)?;
            let layers = forward(m, &walks, Unroll::Bulk, None)?;
            labels = walks.iter().map(|w| w.labels.clone()).collect();
            let mut per = Vec::new();
            for l in &layers {
                per.push(match l.get("logits") {
                    Some(z) => Some((z.try_softmax(-1)?.to_vec::<f32>()?, z.shape()[1])),
                    None => None,
                });
            }
            probs.push(per);
        }
        for (c, tally) in tallies.iter_mut().enumerate() {
            let Some((_, actions)) = probs[0][c] else {
                continue;
            };
            for (r, &label) in labels[c].iter().enumerate() {
                if label < 0 {
                    continue;
                }
                let label = label as usize;
                tally.total += 1;
                let mut mean = vec![0f32; actions];
                for (i, p) in probs.iter().enumerate() {
                    let (v, a) = p[c].as_ref().ok_or("a model has no logits here")?;
                    if *a != actions {
                        return Err("the models have different action counts".into());
                    }
                    let row = v.get(r * a..(r + 1) * a).ok_or("rows do not line up")?;
                    tally.correct[i] += usize::from(argmax(row) == label);
                    tally.nll[i] -= f64::from(row[label].max(1e-30)).ln();
                    for (m, x) in mean.iter_mut().zip(row) {
                        *m += x / k as f32;
                    }
                }
                tally.correct[k] += usize::from(argmax(&mean) == label);
                tally.nll[k] -= f64::from(mean[label].max(1e-30)).ln();
            }
        }
    }
    for (c, t) in tallies.iter().enumerate() {
        if t.total == 0 {
            continue;
        }
        let n = t.total as f64;
        let row = |i: usize| {
            serde_json::json!({
                "accuracy": 100.0 * t.correct[i] as f64 / n,
                "nll": t.nll[i] / n,
            })
        };
        let line = serde_json::json!({
            "component": models[0].components()[c].name,
            "part": args.part,
            "states": t.total,
            "models": (0..k).map(|i| {
                let mut r = row(i);
                r["model"] = args.models[i].display().to_string().into();
                r
            }).collect::<Vec<_>>(),
            "ensemble": row(k),
        });
        println!("{line}");
    }
    Ok(())
}
