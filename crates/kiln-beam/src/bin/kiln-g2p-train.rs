//! `kiln-g2p-train`: trains kiln-beam's attention encoder-decoder on the CMU Pronouncing
//! Dictionary with kiln's autodiff, then reports word and phoneme error rates on the held-out
//! words for it and (when `--g2p-en` points at g2p-en's checkpoint) for g2p-en.
//!
//! ```text
//! bash scripts/fetch-data.sh
//! cargo run --release -p kiln-beam --bin kiln-g2p-train -- --out g2p-attention.safetensors
//! cargo run --release -p kiln-beam --bin kiln-g2p-train -- --eval-only \
//!     --out crates/kiln-beam/models/g2p-attention.safetensors --g2p-en data/g2p_en/checkpoint20.npz
//! ```
//!
//! Training: Adam, mini-batches of words sorted by length (shuffled batch order per epoch,
//! seeded), global-norm clipping at 5, the learning rate halved whenever the dev-set loss does
//! not improve; the weights of the best dev loss are kept. Prints one JSON line per epoch and one
//! per evaluated model (`serde_json` records; a NaN or infinite number, such as a diverged loss,
//! is written `null`), and, when stderr is a terminal, a progress bar of each epoch's steps
//! (`indicatif`).
//!
//! Options are parsed with `clap` into [`Raw`]; `-c FILE.yml` reads the same keys from a YAML file with `serde_norway` (see `common`), and [`options`] merges the two (the command line wins), applies the defaults and checks every value before anything is read.
//!
//! Depends on `common` (options), kiln-beam's, kiln-optim's and kiln's public APIs, `serde_json`
//! and `indicatif`.

mod common;

use clap::{CommandFactory, Parser};
use common::{Merge, OptionError};
use indicatif::{ProgressBar, ProgressStyle};
use kiln_beam::{
    decode_parallel, error_rates, phoneme_vocab, read_cmudict, AttentionConfig, AttentionModel,
    BeamSearch, Entry, G2p, Scorer, SearchConfig, Split,
};
use kiln_optim::{clip_by_global_norm, Adam, Optimizer, Parameter};
use serde::{Deserialize, Serialize};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

/// The largest beam.
const MAX_BEAM: usize = 1024;
/// The largest layer size in `--size`.
const MAX_SIZE: usize = 4096;

/// The options as the command line or the config file gives them, every value optional so that the two can be merged.
#[derive(Parser, Deserialize, Debug, Default, Clone, PartialEq)]
#[command(
    name = "kiln-g2p-train",
    version,
    about = "Trains kiln-beam's attention encoder-decoder on cmudict and reports its error rates."
)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
struct Raw {
    /// A YAML file of options keyed by their long names (epochs: 10, size: [48, 96, 192, 96, 48]); the command line overrides it
    #[arg(short = 'c', long, value_name = "FILE.yml")]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// cmudict.dict [default: data/cmudict/cmudict.dict]
    #[arg(long, value_name = "PATH")]
    dict: Option<String>,
    /// Where to save the model [default: g2p-attention.safetensors]
    #[arg(long, value_name = "PATH")]
    out: Option<String>,
    /// Passes over the training words, 1 to 100000 [default: 8]
    #[arg(long, value_name = "N", value_parser = common::whole::<usize>, allow_hyphen_values = true)]
    epochs: Option<usize>,
    /// Words per step, 1 to 65536 [default: 64]
    #[arg(long, value_name = "N", value_parser = common::whole::<usize>, allow_hyphen_values = true)]
    batch: Option<usize>,
    /// Adam learning rate, finite and above 0 [default: 0.002]
    #[arg(long, value_name = "X", allow_hyphen_values = true)]
    lr: Option<f64>,
    /// Initialisation and shuffling seed [default: 1]
    #[arg(long, value_name = "N", value_parser = common::whole::<u64>, allow_hyphen_values = true)]
    seed: Option<u64>,
    /// Embedding, encoder (per direction), decoder, attention, output sizes, each 1 to 4096 [default: 48,96,192,96,48]
    #[arg(long, value_name = "E,H,D,A,O", value_delimiter = ',', value_parser = common::whole::<usize>, allow_hyphen_values = true)]
    #[serde(deserialize_with = "common::numbers")]
    size: Option<Vec<usize>>,
    /// Train on the first N training words only (quick runs)
    #[arg(long, value_name = "N", value_parser = common::whole::<usize>, allow_hyphen_values = true)]
    max_words: Option<usize>,
    /// Held-out words to score [default: all test words]
    #[arg(long, value_name = "N", value_parser = common::whole::<usize>, allow_hyphen_values = true)]
    eval_words: Option<usize>,
    /// Beam for the error rates, 1 to 1024 [default: 1]
    #[arg(long, value_name = "N", value_parser = common::whole::<usize>, allow_hyphen_values = true)]
    beam: Option<usize>,
    /// Load --out and only evaluate it
    #[arg(long)]
    eval_only: bool,
    /// Also evaluate g2p-en's checkpoint20.npz on the same words
    #[arg(long, value_name = "PATH")]
    g2p_en: Option<String>,
}

/// The checked options, with the defaults applied.
#[derive(Debug, Clone, PartialEq)]
struct Options {
    dict: String,
    out: String,
    epochs: usize,
    batch: usize,
    lr: f64,
    seed: u64,
    size: [usize; 5],
    max_words: Option<usize>,
    eval_words: Option<usize>,
    beam: usize,
    eval_only: bool,
    g2p_en: Option<String>,
}

/// Reads the config file the command line names, if any, and returns the checked [`options`].
fn resolve(cli: &Raw) -> Result<Options, OptionError> {
    common::resolve(cli, cli.config.as_deref(), options)
}

/// The command line over the config file: defaults applied, every value checked.
fn options(m: &Merge<'_, Raw>) -> Result<Options, OptionError> {
    let size = m
        .checked(
            "--size",
            |r| r.size.clone(),
            |v| {
                if v.len() != 5 {
                    return Err(format!("{} sizes: give five sizes E,H,D,A,O", v.len()));
                }
                v.iter()
                    .try_for_each(|&n| common::in_range(n, &(1..=MAX_SIZE)))
            },
        )?
        .map_or([48, 96, 192, 96, 48], |v| [v[0], v[1], v[2], v[3], v[4]]);
    Ok(Options {
        dict: m
            .any(|r| r.dict.clone())
            .unwrap_or_else(|| "data/cmudict/cmudict.dict".into()),
        out: m
            .any(|r| r.out.clone())
            .unwrap_or_else(|| "g2p-attention.safetensors".into()),
        epochs: m.count("--epochs", |r| r.epochs, 1..=100_000)?.unwrap_or(8),
        batch: m.count("--batch", |r| r.batch, 1..=65_536)?.unwrap_or(64),
        lr: m
            .real("--lr", |r| r.lr, |x| x > 0.0, "above 0")?
            .unwrap_or(0.002),
        seed: m.any(|r| r.seed).unwrap_or(1),
        size,
        max_words: m.count("--max-words", |r| r.max_words, 1..=usize::MAX)?,
        eval_words: m.count("--eval-words", |r| r.eval_words, 1..=usize::MAX)?,
        beam: m.count("--beam", |r| r.beam, 1..=MAX_BEAM)?.unwrap_or(1),
        eval_only: m.flag(|r| r.eval_only),
        g2p_en: m.any(|r| r.g2p_en.clone()),
    })
}

/// A batch: source ids (letters + `</s>`) and target phoneme ids.
type Batch = (Vec<Vec<usize>>, Vec<Vec<usize>>);

fn batches(entries: &[&Entry], size: usize) -> Vec<Batch> {
    let mut sorted: Vec<&Entry> = entries.to_vec();
    sorted.sort_by_key(|e| (e.word.len(), e.phonemes.len(), e.word.clone()));
    sorted
        .chunks(size)
        .map(|c| {
            (
                c.iter().map(|e| G2p::encode_word(&e.word)).collect(),
                c.iter().map(|e| e.phonemes.clone()).collect(),
            )
        })
        .collect()
}

/// xorshift for the batch order (the data order is part of the result: seeded, not random).
fn shuffle<T>(v: &mut [T], seed: &mut u64) {
    for i in (1..v.len()).rev() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        v.swap(i, (*seed % (i as u64 + 1)) as usize);
    }
}

fn dev_loss(model: &AttentionModel, dev: &[Batch]) -> kiln_beam::Result<f64> {
    let (mut total, mut tokens) = (0.0, 0usize);
    for (src, tgt) in dev {
        let n: usize = tgt.iter().map(|t| t.len() + 1).sum();
        let loss = model.loss_with_bos(src, tgt, G2p::BOS, G2p::EOS)?;
        total += loss.item::<f32>()? as f64 * n as f64;
        tokens += n;
    }
    Ok(total / tokens.max(1) as f64)
}

fn search_config(beam: usize) -> SearchConfig {
    SearchConfig {
        beam,
        bos: G2p::BOS,
        eos: G2p::EOS,
        unk: Some(G2p::UNK),
        ..Default::default()
    }
}

/// Transcribes `words` with the scorer `make` builds; returns the best phoneme ids per word.
fn transcribe(
    words: &[&Entry],
    beam: usize,
    make: &(dyn Fn() -> kiln_beam::Result<Box<dyn Scorer>> + Sync),
) -> kiln_beam::Result<Vec<Vec<usize>>> {
    let src: Vec<Vec<usize>> = words.iter().map(|e| G2p::encode_word(&e.word)).collect();
    let search = || Ok(BeamSearch::new(vec![make()?], search_config(beam)));
    // one thread per core at most (decode_parallel starts no more than there are mini-batches)
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    Ok(decode_parallel(&src, &search, 32, threads)?.best_words(G2p::EOS))
}

/// One JSON line per epoch.
#[derive(Serialize)]
struct EpochLine {
    epoch: usize,
    train_loss: f64,
    dev_loss: f64,
    lr: f64,
    seconds: f64,
    compiles: u64,
    cache_hits: u64,
}

/// One JSON line per evaluated model: word and phoneme error rates on the test words.
#[derive(Serialize)]
struct ModelLine<'a> {
    model: &'a str,
    beam: usize,
    words: usize,
    wer: f64,
    per: f64,
    seconds: f64,
}

/// Prints `record` as one JSON line with `serde_json`, which writes a NaN or infinite number
/// (a diverged loss) as `null`, so the line stays valid JSON.
fn emit<T: Serialize>(record: &T) {
    let text = serde_json::to_string(record).expect("a record of strings and numbers serializes");
    println!("{text}");
}

/// `x` rounded to `decimals` decimal places (the precision a line reports; NaN stays NaN).
fn round(x: f64, decimals: i32) -> f64 {
    let p = 10f64.powi(decimals);
    (x * p).round() / p
}

fn report(name: &str, words: &[&Entry], pred: &[Vec<usize>], secs: f64, beam: usize) {
    let pairs: Vec<(Vec<usize>, Vec<usize>)> = pred
        .iter()
        .zip(words)
        .map(|(p, e)| (p.clone(), e.phonemes.clone()))
        .collect();
    let r = error_rates(&pairs);
    emit(&ModelLine {
        model: name,
        beam,
        words: r.words,
        wer: round(r.wer, 4),
        per: round(r.per, 4),
        seconds: round(secs, 2),
    });
}

fn run(o: &Options) -> kiln_beam::Result<()> {
    let entries = read_cmudict(&o.dict)?;
    let part =
        |s: Split| -> Vec<&Entry> { entries.iter().filter(|e| Split::of(&e.word) == s).collect() };
    let (mut train, dev, test) = (part(Split::Train), part(Split::Dev), part(Split::Test));
    if let Some(m) = o.max_words {
        train.truncate(m);
    }
    eprintln!(
        "kiln-g2p-train: {} entries: {} train, {} dev, {} test",
        entries.len(),
        train.len(),
        dev.len(),
        test.len()
    );
    // every (batch rows, source length, target length) is its own graph: keep them all
    kiln::set_cache_capacity(4096);
    let model = if o.eval_only {
        AttentionModel::load(&o.out)?
    } else {
        let [e, h, d, a, out] = o.size;
        let cfg = AttentionConfig {
            src_vocab: 29,
            tgt_vocab: phoneme_vocab(),
            emb: e,
            enc_hidden: h,
            dec_hidden: d,
            att_hidden: a,
            out_hidden: out,
        };
        let model = AttentionModel::init(cfg, o.seed, kiln::DType::F32)?;
        train_model(&model, o, &train, &dev)?;
        model
    };
    let mut test = test;
    if let Some(n) = o.eval_words {
        test.truncate(n);
    }
    let t = Instant::now();
    let make = || -> kiln_beam::Result<Box<dyn Scorer>> { Ok(Box::new(model.scorer()?)) };
    let pred = transcribe(&test, o.beam, &make)?;
    report("attention", &test, &pred, t.elapsed().as_secs_f64(), o.beam);
    if let Some(p) = &o.g2p_en {
        let t = Instant::now();
        let g2p = G2p::load(p)?;
        let make = || -> kiln_beam::Result<Box<dyn Scorer>> { Ok(Box::new(g2p.clone())) };
        let pred = transcribe(&test, o.beam, &make)?;
        report("g2p-en", &test, &pred, t.elapsed().as_secs_f64(), o.beam);
    }
    Ok(())
}

fn train_model(
    model: &AttentionModel,
    o: &Options,
    train: &[&Entry],
    dev: &[&Entry],
) -> kiln_beam::Result<()> {
    let mut train_batches = batches(train, o.batch);
    let dev_batches = batches(&dev[..dev.len().min(2000)], 256);
    let params: Vec<&Parameter> = model.parameters().iter().collect();
    let mut opt = Adam::new(o.lr);
    let mut seed = o.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut best = f64::INFINITY;
    let mut best_values: Vec<kiln::Array> = params.iter().map(|p| p.value()).collect();
    let start = Instant::now();
    // a progress bar per epoch, on a terminal only (the JSON lines are the record)
    let terminal = std::io::stderr().is_terminal();
    let style = ProgressStyle::with_template(
        "epoch {prefix} [{bar:30}] {pos}/{len} steps, {elapsed} (eta {eta}): {msg}",
    )
    .expect("a valid template")
    .progress_chars("=> ");
    for epoch in 1..=o.epochs {
        shuffle(&mut train_batches, &mut seed);
        let bar = if terminal {
            ProgressBar::new(train_batches.len() as u64)
                .with_style(style.clone())
                .with_prefix(epoch.to_string())
        } else {
            ProgressBar::hidden()
        };
        let (mut sum, mut steps) = (0.0f64, 0usize);
        for (i, (src, tgt)) in train_batches.iter().enumerate() {
            let loss = model.loss_with_bos(src, tgt, G2p::BOS, G2p::EOS)?;
            let values: Vec<kiln::Array> = params.iter().map(|p| p.value()).collect();
            let wrt: Vec<&kiln::Array> = values.iter().collect();
            let grads = kiln::grad(&loss, &wrt)?;
            let (grads, _norm) = clip_by_global_norm(&grads, 5.0)?;
            opt.step(&params, &grads, &[&loss])?;
            sum += loss.item::<f32>()? as f64;
            steps += 1;
            bar.inc(1);
            if terminal && i % 20 == 19 {
                bar.set_message(format!(
                    "loss {:.4}, {} compiles",
                    sum / steps as f64,
                    kiln::cache_stats().misses
                ));
            }
        }
        bar.finish_and_clear();
        let dev = dev_loss(model, &dev_batches)?;
        let stats = kiln::cache_stats();
        emit(&EpochLine {
            epoch,
            train_loss: round(sum / steps.max(1) as f64, 4),
            dev_loss: round(dev, 4),
            lr: opt.learning_rate(),
            seconds: round(start.elapsed().as_secs_f64(), 1),
            compiles: stats.misses,
            cache_hits: stats.hits,
        });
        if dev < best {
            best = dev;
            best_values = params.iter().map(|p| p.value()).collect();
            model.save(&o.out)?;
        } else {
            // back to the best weights, at half the learning rate
            for (p, v) in params.iter().zip(&best_values) {
                p.assign(v.clone())?;
            }
            opt.set_learning_rate(opt.learning_rate() / 2.0);
        }
    }
    for (p, v) in params.iter().zip(best_values) {
        p.assign(v)?;
    }
    Ok(())
}

fn main() {
    let cli = Raw::parse();
    let o = resolve(&cli).unwrap_or_else(|e| common::exit_usage(Raw::command(), &e));
    if let Err(e) = run(&o) {
        eprintln!("kiln-g2p-train: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn cli(args: &[&str]) -> Raw {
        Raw::try_parse_from(std::iter::once("kiln-g2p-train").chain(args.iter().copied())).unwrap()
    }

    fn merged(cli: &Raw, file: &str) -> Result<Options, OptionError> {
        let path = Path::new("train.yml");
        let file: Raw = common::parse_config(path, file)?;
        options(&Merge {
            cli,
            file: &file,
            path: Some(path),
        })
    }

    #[test]
    fn defaults_the_config_file_and_the_command_line() {
        let o = merged(&cli(&[]), "").unwrap();
        assert_eq!((o.epochs, o.batch, o.beam, o.seed), (8, 64, 1, 1));
        assert_eq!(o.size, [48, 96, 192, 96, 48]);
        assert_eq!(o.dict, "data/cmudict/cmudict.dict");
        let file = "epochs: 10\nsize: [8, 16, 32, 16, 8]\nlr: 0.01\neval-only: true\n";
        let o = merged(&cli(&[]), file).unwrap();
        assert_eq!(
            (o.epochs, o.size, o.lr, o.eval_only),
            (10, [8, 16, 32, 16, 8], 0.01, true)
        );
        let o = merged(&cli(&["--epochs", "2", "--size", "1,2,3,4,5"]), file).unwrap();
        assert_eq!((o.epochs, o.size), (2, [1, 2, 3, 4, 5]));
        assert_eq!(merged(&cli(&[]), "size: 4,4,4,4,4\n").unwrap().size, [4; 5]);
    }

    #[test]
    fn bad_values_are_refused_naming_the_option() {
        for (args, option) in [
            (&["--lr", "nan"][..], "--lr"),
            (&["--lr", "-1"], "--lr"),
            (&["--batch", "0"], "--batch"),
            (&["--beam", "0"], "--beam"),
            (&["--epochs", "0"], "--epochs"),
            (&["--size", "1,2,3"], "--size"),
            (&["--size", "1,2,3,4,100000"], "--size"),
            (&["--max-words", "0"], "--max-words"),
        ] {
            let e = merged(&cli(args), "").unwrap_err().to_string();
            assert!(e.starts_with(option), "{args:?}: {e}");
        }
        let e = merged(&cli(&[]), "lr: .nan\n").unwrap_err().to_string();
        assert!(e.starts_with("--lr") && e.contains("train.yml"), "{e}");
        let e = merged(&cli(&[]), "learning-rate: 1\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("learning-rate") && e.contains("train.yml"),
            "{e}"
        );
        for args in [["--beam", "2.5"], ["--seed", "-1"], ["--size", "1,x,3,4,5"]] {
            let e = Raw::try_parse_from(["kiln-g2p-train"].iter().chain(&args)).unwrap_err();
            assert!(e.to_string().contains(args[0]), "{e}");
        }
    }
}
