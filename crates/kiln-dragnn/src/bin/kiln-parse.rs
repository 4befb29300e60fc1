//! `kiln-parse`: tags and parses CoNLL-U with a trained kiln-dragnn model.
//!
//! ```text
//! kiln-parse --model DIR [--beam N] [--threads N] [--batch-size N] < in.conllu > out.conllu
//! ```
//!
//! The input needs ID, FORM, LEMMA and MISC; the other columns may be `_` and are not read
//! as features.
//! The output fills what the model predicts (UPOS, HEAD, DEPREL) and keeps every other
//! column, comment and blank line as it came.
//! `--stats` prints sentences per second and compiles to stderr.
//!
//! Depends on kiln-dragnn's public API and `clap`.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use kiln_dragnn::document::{read_conllu, write_conllu};
use kiln_dragnn::model::infer::{parse, InferOptions};
use kiln_dragnn::model::MasterModel;

/// Tags and parses CoNLL-U from stdin (or --input) with a kiln-dragnn model.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The model directory (as kiln-dragnn-train writes it).
    #[arg(long)]
    model: PathBuf,
    /// Beam size of the predicting components (default: each spec's inference_beam_size).
    #[arg(long)]
    beam: Option<usize>,
    /// Threads, each parsing its own batches.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Sentences per batch.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Read this file instead of stdin.
    #[arg(long)]
    input: Option<PathBuf>,
    /// Write this file instead of stdout.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Print speed and compile counts to stderr.
    #[arg(long)]
    stats: bool,
}

fn run(args: Args) -> Result<(), String> {
    if args.beam == Some(0) || args.threads == 0 || args.batch_size == 0 {
        return Err("--beam, --threads and --batch-size must be at least 1".into());
    }
    let model =
        MasterModel::load(&args.model).map_err(|e| format!("{}: {e}", args.model.display()))?;
    let text = match &args.input {
        Some(p) => std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?,
        None => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| format!("stdin: {e}"))?;
            s
        }
    };
    let sentences = read_conllu(&text).map_err(|e| format!("input: {e}"))?;
    let before = kiln::cache_stats();
    let start = Instant::now();
    let options = InferOptions {
        beam: args.beam,
        batch_size: args.batch_size,
        threads: args.threads,
    };
    let parsed = parse(&model, &sentences, &options).map_err(|e| e.to_string())?;
    let seconds = start.elapsed().as_secs_f64();
    let out = write_conllu(&parsed);
    match &args.output {
        Some(p) => std::fs::write(p, out).map_err(|e| format!("{}: {e}", p.display()))?,
        None => {
            let mut o = std::io::stdout().lock();
            o.write_all(out.as_bytes())
                .and_then(|_| o.flush())
                .map_err(|e| format!("stdout: {e}"))?;
        }
    }
    if args.stats {
        let after = kiln::cache_stats();
        let words: usize = sentences.iter().map(|s| s.len()).sum();
        let compiles = after.misses - before.misses;
        eprintln!(
            "{} sentences ({} words) in {:.3} s: {:.0} sentences/s, {:.0} words/s; {} compiles ({:.1} per 1,000 sentences)",
            sentences.len(),
            words,
            seconds,
            sentences.len() as f64 / seconds,
            words as f64 / seconds,
            compiles,
            compiles as f64 * 1000.0 / sentences.len().max(1) as f64
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kiln-parse: {e}");
            ExitCode::FAILURE
        }
    }
}
