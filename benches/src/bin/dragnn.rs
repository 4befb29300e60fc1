//! kiln-parse's speed and accuracy (issue 29's benchmark): a trained kiln-dragnn model tags
//! and parses a CoNLL-U file (by default the Turkish test part with the predicted columns
//! blanked, as `benches/dragnn/run.py` writes it) with beam 1 and 8 on 1 and 2 threads.
//!
//! For each setting the file is parsed `--repeats` times after one warm-up parse (which
//! compiles each component's step once); it prints one JSON line per setting with the CPU
//! model, the median seconds, sentences and words per second, the compiles of the warm-up
//! and of the timed runs per 1,000 sentences, and the UPOS, UAS and LAS against `--gold`.
//! Reading the model and the input is not timed; `parse` (batching, features, kiln
//! evaluation, beams, finalizing, CoNLL-U out through the session) is.
//!
//! Usage: `cargo run --release -p kiln-benches --bin dragnn -- --model DIR --input IN --gold GOLD`
//! (`benches/dragnn/run.py` runs it beside UDPipe).
//!
//! Depends on kiln-dragnn's public API, `clap`, `serde` and `serde_json`.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use kiln_dragnn::document::{read_conllu_file, split, Column, Sentence};
use kiln_dragnn::model::infer::{parse, InferOptions};
use kiln_dragnn::model::MasterModel;
use kiln_dragnn::scorer::{score, score_grouped};
use serde::Serialize;

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "dragnn",
    version,
    about = "Times kiln-dragnn parsing; one JSON line per setting."
)]
struct Cli {
    /// The model directory.
    #[arg(long)]
    model: PathBuf,
    /// The input CoNLL-U.
    #[arg(long, required_unless_present = "treebank")]
    input: Option<PathBuf>,
    /// The gold CoNLL-U (same sentences) for accuracy.
    #[arg(long)]
    gold: Option<PathBuf>,
    /// The Turkish treebank directory instead of --input/--gold: its test part (split per
    /// file, so each sentence's genre is its file's, web or wiki), parsed from copies with
    /// UPOS, XPOS, FEATS, HEAD and DEPREL blanked.
    #[arg(long, conflicts_with_all = ["input", "gold"])]
    treebank: Option<PathBuf>,
    /// Which part of the treebank: dev or test.
    #[arg(long, default_value = "test")]
    part: String,
    /// Timed parses per setting.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Beam sizes to run.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    beams: Vec<usize>,
    /// Thread counts to run.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Sentences per batch (`InferOptions::batch_size`) to run.
    #[arg(long, value_delimiter = ',', default_value = "32")]
    batch_sizes: Vec<usize>,
}

#[derive(Serialize)]
struct Record {
    tool: &'static str,
    cpu: String,
    beam: usize,
    threads: usize,
    batch_size: usize,
    sentences: usize,
    words: usize,
    median_s: f64,
    runs_s: Vec<f64>,
    sentences_per_s: f64,
    words_per_s: f64,
    warmup_compiles_per_1000: f64,
    timed_compiles_per_1000: f64,
    upos: Option<f64>,
    uas: Option<f64>,
    las: Option<f64>,
    /// The full score (all words and without punctuation; per genre with --treebank).
    score: Option<serde_json::Value>,
}

/// Blanked input, gold sentences and each sentence's genre.
type Parts = (Vec<Sentence>, Vec<Sentence>, Vec<&'static str>);

/// The treebank's `part` split per file, with each sentence's genre, and blanked copies.
fn treebank(dir: &std::path::Path, part: &str) -> Result<Parts, Box<dyn std::error::Error>> {
    let mut gold = Vec::new();
    let mut genres = Vec::new();
    for (file, genre) in [("web.conllu", "web"), ("wiki.conllu", "wiki")] {
        let parts = split(read_conllu_file(dir.join(file))?);
        let chosen = match part {
            "dev" => parts.dev,
            "test" => parts.test,
            other => return Err(format!("--part {other}: use dev or test").into()),
        };
        genres.extend(std::iter::repeat_n(genre, chosen.len()));
        gold.extend(chosen);
    }
    let mut input = gold.clone();
    for s in &mut input {
        for i in 0..s.len() {
            for c in [
                Column::Upos,
                Column::Xpos,
                Column::Feats,
                Column::Head,
                Column::Deprel,
            ] {
                s.set_field(i, c, "_")?;
            }
        }
    }
    Ok((input, gold, genres))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let model = MasterModel::load(&cli.model)?;
    let (input, gold, genres) = match (&cli.treebank, &cli.input) {
        (Some(dir), _) => {
            let (i, g, genres) = treebank(dir, &cli.part)?;
            (i, Some(g), Some(genres))
        }
        (None, Some(path)) => (
            read_conllu_file(path)?,
            cli.gold.as_ref().map(read_conllu_file).transpose()?,
            None,
        ),
        (None, None) => return Err("--input or --treebank is needed".into()),
    };
    let words: usize = input.iter().map(|s| s.len()).sum();
    let n = input.len().max(1) as f64;
    for &beam in &cli.beams {
        for (&threads, &batch_size) in cli
            .threads
            .iter()
            .flat_map(|t| cli.batch_sizes.iter().map(move |b| (t, b)))
        {
            let options = InferOptions {
                beam: Some(beam),
                threads,
                batch_size,
            };
            let before = kiln::cache_stats().misses;
            let out = parse(&model, &input, &options)?;
            let warm = kiln::cache_stats().misses;
            let mut runs = Vec::new();
            for _ in 0..cli.repeats.max(1) {
                let t = Instant::now();
                let again = parse(&model, &input, &options)?;
                runs.push(t.elapsed().as_secs_f64());
                std::hint::black_box(again);
            }
            let timed = kiln::cache_stats().misses;
            let mut sorted = runs.clone();
            sorted.sort_by(f64::total_cmp);
            let median = sorted[sorted.len() / 2];
            let s = gold.as_ref().map(|g| score(g, &out)).transpose()?;
            let full = match (&gold, &genres) {
                (Some(g), Some(genres)) => {
                    Some(serde_json::to_value(score_grouped(g, &out, genres)?)?)
                }
                (Some(_), None) => s.map(serde_json::to_value).transpose()?,
                _ => None,
            };
            let rec = Record {
                tool: "kiln-dragnn",
                cpu: kiln_benches::cpu_model(),
                beam,
                threads,
                batch_size,
                sentences: input.len(),
                words,
                median_s: median,
                runs_s: runs,
                sentences_per_s: input.len() as f64 / median,
                words_per_s: words as f64 / median,
                warmup_compiles_per_1000: (warm - before) as f64 * 1000.0 / n,
                timed_compiles_per_1000: (timed - warm) as f64 * 1000.0
                    / n
                    / cli.repeats.max(1) as f64,
                upos: s.map(|s| s.all.upos_pct()),
                uas: s.map(|s| s.all.uas_pct()),
                las: s.map(|s| s.all.las_pct()),
                score: full,
            };
            println!("{}", serde_json::to_string(&rec)?);
        }
    }
    Ok(())
}
