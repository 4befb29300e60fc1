//! `kiln-translate`: decodes lines from stdin to stdout with a kiln beam search, with the
//! options users of amun/Marian know. Models:
//! - `--model g2p:PATH`: g2p-en's `checkpoint20.npz`; each input line is a word, the output
//!   its phonemes;
//! - `--model cn2en:DIR`: the cn2en Chinese→English model, a directory holding its
//!   `model.pth`, `input_lang.pkl` and `output_lang.pkl` (as `scripts/fetch-data.sh` leaves
//!   them in `data/cn2en`); each input line is a sentence, the output its English words.
//!
//! - `--model att:PATH`: an attention encoder-decoder trained by `kiln-g2p-train` (a
//!   safetensors file); words to phonemes in g2p-en's vocabularies, so it can form an ensemble
//!   with g2p-en, and it has attention: `--alignment hard|soft` prints alignments of letters
//!   (source positions; the last one is the end marker) to phonemes.
//!
//! Several `--model`s form an ensemble; they must share one vocabulary.
//!
//! Options are parsed with `clap` into [`Raw`], every value optional; `-c FILE.yml` reads a YAML file keyed by the long option names (Marian style: `beam-size: 6`, `models: [g2p:PATH]`) into the same struct with `serde_norway` (see `common`); [`options`] merges the two (the command line wins), applies the defaults and checks every value, all before a model is loaded.
//! The YAML crate is `serde_norway`, a maintained fork of `serde_yaml` 0.9 (deprecated by its author in 2024) with the same serde API that also maintains its own libyaml port (`unsafe-libyaml-norway`), which `serde_yaml_ng` leaves to the `unsafe-libyaml` of the deprecated crate.
//! Input is read line by line, a block of `mini-batch × maxi-batch` lines at a time, and each block's output is written before the next is read.
//! When stderr is a terminal, a running count of the lines done and their rate is shown there (`indicatif`); a summary line (lines, words, speed) ends every run.
//!
//! ```text
//! echo activationist | kiln-translate --model g2p:data/g2p_en/checkpoint20.npz -b 4 --n-best
//! echo 我不知道。 | kiln-translate --model cn2en:data/cn2en -b 1
//! echo phoneme | kiln-translate --model att:crates/kiln-beam/models/g2p-attention.safetensors --alignment hard
//! printf 'beam-size: 6\nnormalize: 0.6\nmodels: [g2p:data/g2p_en/checkpoint20.npz]\n' > decoder.yml
//! echo activationist | kiln-translate -c decoder.yml -b 2
//! ```
//!
//! Depends on `common` (options), kiln-beam's public API and `indicatif`.

mod common;

use clap::{CommandFactory, Parser};
use common::{Merge, OptionError};
use indicatif::{ProgressBar, ProgressStyle};
use kiln_beam::{
    decode_parallel, nbest_lines, phoneme_vocab, AlignmentKind, AttentionModel, BeamSearch, Cn2En,
    G2p, Gnmt, MiniBatch, Scorer, SearchConfig,
};
use serde::Deserialize;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// The largest beam.
const MAX_BEAM: usize = 1024;
/// The most decoding threads.
const MAX_THREADS: usize = 256;
/// The most sentences per mini-batch, and the most mini-batches per maxi-batch.
const MAX_BATCH: usize = 65_536;
/// The most source words per mini-batch (`--mini-batch-words`).
const MAX_BATCH_WORDS: usize = 1 << 24;
/// The longest input line kept (`--max-input`), in symbols.
const MAX_INPUT: usize = 1 << 20;
/// The largest `--max-length-factor` (the search also stops at 10,000 steps).
const MAX_LENGTH_FACTOR: f64 = 100.0;

const EXAMPLES: &str = "\
examples:
  echo activationist | kiln-translate --model g2p:data/g2p_en/checkpoint20.npz -b 4 --n-best
  echo 我不知道。 | kiln-translate --model cn2en:data/cn2en -b 1
  echo phoneme | kiln-translate --model att:crates/kiln-beam/models/g2p-attention.safetensors --alignment hard
  kiln-translate -c decoder.yml -b 2 < input > output   (decoder.yml: beam-size: 6, models: [...])";

/// The options as the command line or the config file gives them, every value optional so that the two can be merged.
#[derive(Parser, Deserialize, Debug, Default, Clone, PartialEq)]
#[command(
    name = "kiln-translate",
    version,
    about = "Decodes lines from stdin to stdout with a kiln beam search (amun/Marian options).",
    override_usage = "kiln-translate --model g2p:PATH|cn2en:DIR|att:PATH [OPTIONS] < input > output",
    after_help = EXAMPLES
)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
struct Raw {
    /// A YAML file of options keyed by their long names (beam-size: 6, model: g2p:PATH); the command line overrides it
    #[arg(short = 'c', long, value_name = "FILE.yml")]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// A model: g2p:PATH (g2p-en's checkpoint20.npz), cn2en:DIR or att:PATH (from kiln-g2p-train); several form an ensemble
    #[arg(
        short = 'm',
        long = "model",
        visible_alias = "models",
        value_name = "KIND:PATH"
    )]
    #[serde(alias = "models", deserialize_with = "common::strings")]
    model: Vec<String>,
    /// Beam size, 1 to 1024 [default: 4]
    #[arg(short = 'b', long, value_name = "N", value_parser = common::whole::<usize>, allow_hyphen_values = true)]
    beam_size: Option<usize>,
    /// Print n-best lists: id ||| words ||| F0= c ||| total
    #[arg(long)]
    n_best: bool,
    /// Length normalisation exponent A: score = (cost - wp*len) / len^A [default: 0]
    #[arg(short = 'n', long, value_name = "A", allow_hyphen_values = true)]
    normalize: Option<f64>,
    /// Word penalty WP [default: 0]
    #[arg(long, value_name = "WP", allow_hyphen_values = true)]
    word_penalty: Option<f64>,
    /// Rank by the GNMT length and coverage penalties instead (Wu et al. 2016 s7; BETA >= 0, and BETA > 0 needs an att: model)
    #[arg(
        long,
        value_name = "ALPHA,BETA",
        value_delimiter = ',',
        allow_hyphen_values = true
    )]
    #[serde(deserialize_with = "common::numbers")]
    gnmt: Option<Vec<f64>>,
    /// Stop at F x source length, 0 < F <= 100 [default: 3]
    #[arg(long, value_name = "F", allow_hyphen_values = true)]
    max_length_factor: Option<f64>,
    /// Sentences per mini-batch [default: 16]
    #[arg(long, value_name = "N", value_parser = common::whole::<usize>, allow_hyphen_values = true)]
    mini_batch: Option<usize>,
    /// Cut mini-batches by source words instead (at most N each)
    #[arg(long, value_name = "N", value_parser = common::whole::<usize>, allow_hyphen_values = true)]
    mini_batch_words: Option<usize>,
    /// Mini-batches read and sorted together [default: 100]
    #[arg(long, value_name = "N", value_parser = common::whole::<usize>, allow_hyphen_values = true)]
    maxi_batch: Option<usize>,
    /// Decoding threads, 1 to 256; they share the loaded models, and no more run than there are mini-batches [default: 1]
    #[arg(long, value_name = "N", value_parser = common::whole::<usize>, allow_hyphen_values = true)]
    threads: Option<usize>,
    /// Ensemble weights, one per --model, finite and >= 0 [default: 1 each]
    #[arg(
        long,
        value_name = "W1,W2,...",
        value_delimiter = ',',
        allow_hyphen_values = true
    )]
    #[serde(deserialize_with = "common::numbers")]
    weights: Option<Vec<f64>>,
    /// Allow the UNK word in the output
    #[arg(long)]
    allow_unk: bool,
    /// Print alignments: words ||| 0-0 1-2 ... (hard) or 0.9,0.1 ... (soft); needs an att: model
    #[arg(long, value_name = "KIND")]
    alignment: Option<Alignment>,
    /// Crop input lines to N symbols, with a warning [default: 200]
    #[arg(long, value_name = "N", value_parser = common::whole::<usize>, allow_hyphen_values = true)]
    max_input: Option<usize>,
}

/// `--alignment hard|soft`.
#[derive(clap::ValueEnum, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Alignment {
    /// One source position per target word.
    Hard,
    /// The attention weights over the source, per target word.
    Soft,
}

/// The checked options, with the defaults applied.
#[derive(Debug, Clone, PartialEq)]
struct Options {
    models: Vec<String>,
    config: SearchConfig,
    n_best: bool,
    mini_batch: MiniBatch,
    /// Lines read, sorted and decoded together (`mini-batch × maxi-batch`).
    block: usize,
    threads: usize,
    weights: Vec<f64>,
    alignment: Option<AlignmentKind>,
    max_input: usize,
}

/// Reads the config file the command line names, if any, and returns the checked [`options`].
fn resolve(cli: &Raw) -> Result<Options, OptionError> {
    common::resolve(cli, cli.config.as_deref(), options)
}

/// Checks a `KIND:PATH` model spec without loading it.
fn model_spec(spec: &str) -> Result<(), String> {
    match spec.split_once(':') {
        Some(("g2p" | "cn2en" | "att", p)) if !p.is_empty() => Ok(()),
        _ => Err(format!(
            "{spec:?}: expected g2p:PATH, cn2en:DIR or att:PATH"
        )),
    }
}

/// The command line over the config file: defaults applied, every value and every combination checked.
fn options(m: &Merge<'_, Raw>) -> Result<Options, OptionError> {
    let models = m
        .checked(
            "--model",
            |r| (!r.model.is_empty()).then_some(&r.model),
            |ms| ms.iter().try_for_each(|s| model_spec(s)),
        )?
        .cloned()
        .ok_or_else(|| {
            OptionError::invalid("--model", "give a model: g2p:PATH, cn2en:DIR or att:PATH")
        })?;
    let attention = models.iter().any(|s| s.starts_with("att:"));
    let any = |_: f64| true;
    let gnmt = m
        .checked(
            "--gnmt",
            |r| r.gnmt.clone(),
            |v| match v[..] {
                [alpha, beta] if alpha.is_finite() && beta.is_finite() && beta >= 0.0 => {
                    if beta > 0.0 && !attention {
                        Err("a coverage penalty (BETA > 0) needs attention; add an att: model or use BETA 0".into())
                    } else {
                        Ok(())
                    }
                }
                _ => Err(format!(
                    "{}: give ALPHA,BETA (e.g. 0.2,0.2), finite, with BETA >= 0",
                    v.iter().map(f64::to_string).collect::<Vec<_>>().join(",")
                )),
            },
        )?
        .map(|v| Gnmt {
            alpha: v[0],
            beta: v[1],
        });
    let config = SearchConfig {
        beam: m
            .count("--beam-size", |r| r.beam_size, 1..=MAX_BEAM)?
            .unwrap_or(4),
        normalize: m
            .real("--normalize", |r| r.normalize, any, "")?
            .unwrap_or(0.0),
        word_penalty: m
            .real("--word-penalty", |r| r.word_penalty, any, "")?
            .unwrap_or(0.0),
        max_length_factor: m
            .real(
                "--max-length-factor",
                |r| r.max_length_factor,
                |f| f > 0.0 && f <= MAX_LENGTH_FACTOR,
                "above 0 and at most 100",
            )?
            .unwrap_or(3.0),
        allow_unk: m.flag(|r| r.allow_unk),
        gnmt,
        bos: G2p::BOS,
        eos: G2p::EOS,
        unk: Some(G2p::UNK),
    };
    let sentences = m
        .count("--mini-batch", |r| r.mini_batch, 1..=MAX_BATCH)?
        .unwrap_or(16);
    let mini_batch = m
        .count(
            "--mini-batch-words",
            |r| r.mini_batch_words,
            1..=MAX_BATCH_WORDS,
        )?
        .map_or(MiniBatch::Sentences(sentences), MiniBatch::Words);
    let maxi_batch = m
        .count("--maxi-batch", |r| r.maxi_batch, 1..=MAX_BATCH)?
        .unwrap_or(100);
    let weights = m
        .checked(
            "--weights",
            |r| r.weights.clone(),
            |w| {
                if let Some(bad) = w.iter().find(|x| !(x.is_finite() && **x >= 0.0)) {
                    Err(format!("{bad} is not allowed: give finite weights >= 0"))
                } else if w.len() != models.len() {
                    Err(format!(
                        "{} weights for {} models: give one weight per --model",
                        w.len(),
                        models.len()
                    ))
                } else if w.iter().all(|&x| x == 0.0) {
                    Err("every weight is 0: give at least one above 0".into())
                } else {
                    Ok(())
                }
            },
        )?
        .unwrap_or_else(|| vec![1.0; models.len()]);
    let alignment = m
        .checked(
            "--alignment",
            |r| r.alignment,
            |_| {
                if attention {
                    Ok(())
                } else {
                    Err("the g2p and cn2en models have no attention; add an att: model".into())
                }
            },
        )?
        .map(|a| match a {
            Alignment::Hard => AlignmentKind::Hard,
            Alignment::Soft => AlignmentKind::Soft,
        });
    Ok(Options {
        models,
        config,
        n_best: m.flag(|r| r.n_best),
        mini_batch,
        block: sentences.saturating_mul(maxi_batch),
        threads: m
            .count("--threads", |r| r.threads, 1..=MAX_THREADS)?
            .unwrap_or(1),
        weights,
        alignment,
        max_input: m
            .count("--max-input", |r| r.max_input, 1..=MAX_INPUT)?
            .unwrap_or(200),
    })
}

/// The lines of the input, read one at a time with one reused buffer: each is its text without the line end, trimmed, or `None` when it is not UTF-8.
/// The last line needs no line end; an input that ends with one has no empty line after it.
struct InputLines<R> {
    input: R,
    buf: Vec<u8>,
}

impl<R: BufRead> InputLines<R> {
    fn new(input: R) -> Self {
        InputLines {
            input,
            buf: Vec::new(),
        }
    }
}

impl<R: BufRead> Iterator for InputLines<R> {
    type Item = std::io::Result<Option<String>>;

    fn next(&mut self) -> Option<Self::Item> {
        self.buf.clear();
        match self.input.read_until(b'\n', &mut self.buf) {
            Ok(0) => None,
            Ok(_) => {
                let line = self.buf.strip_suffix(b"\n").unwrap_or(&self.buf);
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                Some(Ok(std::str::from_utf8(line)
                    .ok()
                    .map(|s| s.trim().to_string())))
            }
            Err(e) => Some(Err(e)),
        }
    }
}

/// A model named on the command line, with what the CLI needs of its kind: how a line
/// becomes source ids, how an id becomes a word, and the search's special ids.
#[derive(Clone)]
enum Model {
    /// g2p-en, loaded once (clones share the weights).
    G2p(Box<G2p>),
    /// cn2en, loaded once (clones share the weights).
    Cn2En(Box<Cn2En>),
    /// kiln-beam's attention model over g2p-en's vocabularies, loaded once.
    Attention(Arc<AttentionModel>),
}

impl Model {
    /// Loads the model of a `KIND:PATH` spec, so a bad file fails before any input is read.
    fn load(spec: &str) -> Result<Model, String> {
        match spec.split_once(':') {
            Some(("g2p", p)) => G2p::load(p)
                .map(|m| Model::G2p(Box::new(m)))
                .map_err(|e| e.to_string()),
            Some(("cn2en", d)) => Cn2En::load(d)
                .map(|m| Model::Cn2En(Box::new(m)))
                .map_err(|e| e.to_string()),
            Some(("att", p)) => {
                let m = AttentionModel::load(p).map_err(|e| e.to_string())?;
                let c = m.config();
                if c.src_vocab != 29 || c.tgt_vocab != phoneme_vocab() {
                    return Err(format!(
                        "--model {spec:?}: vocabularies of {} letters and {} phonemes; an att: model must use g2p-en's 29 and {} (train one with kiln-g2p-train)",
                        c.src_vocab,
                        c.tgt_vocab,
                        phoneme_vocab()
                    ));
                }
                Ok(Model::Attention(Arc::new(m)))
            }
            _ => Err(format!(
                "--model {spec:?}: expected g2p:PATH, cn2en:DIR or att:PATH"
            )),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Model::G2p(_) => "g2p",
            Model::Cn2En(_) => "cn2en",
            Model::Attention(_) => "att",
        }
    }

    fn scorer(&self) -> kiln_beam::Result<Box<dyn Scorer>> {
        Ok(match self {
            Model::G2p(m) => Box::new((**m).clone()),
            Model::Cn2En(m) => Box::new((**m).clone()),
            Model::Attention(m) => Box::new(m.scorer()?),
        })
    }

    /// Source ids of a non-empty line.
    fn encode(&self, line: &str) -> Vec<usize> {
        match self {
            Model::G2p(_) | Model::Attention(_) => G2p::encode_word(line),
            Model::Cn2En(m) => m.encode_sentence(line),
        }
    }

    fn word(&self, id: usize) -> String {
        match self {
            Model::G2p(_) | Model::Attention(_) => G2p::phoneme(id).to_string(),
            Model::Cn2En(m) => m.word(id).to_string(),
        }
    }

    /// Sets the sentence start, end and UNK ids.
    fn configure(&self, c: &mut SearchConfig) {
        let (bos, eos, unk) = match self {
            Model::G2p(_) | Model::Attention(_) => (G2p::BOS, G2p::EOS, Some(G2p::UNK)),
            Model::Cn2En(_) => (Cn2En::SOS, Cn2En::EOS, None),
        };
        (c.bos, c.eos, c.unk) = (bos, eos, unk);
    }
}

struct Weighted(Box<dyn Scorer>, f64);

impl Scorer for Weighted {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn weight(&self) -> f64 {
        self.1
    }
    fn vocab_size(&self) -> usize {
        self.0.vocab_size()
    }
    fn encode(&mut self, batch: &[Vec<usize>]) -> kiln_beam::Result<()> {
        self.0.encode(batch)
    }
    fn begin_state(&mut self, rows: usize, per: usize) -> kiln_beam::Result<kiln::Array> {
        self.0.begin_state(rows, per)
    }
    fn step(
        &mut self,
        s: &kiln::Array,
        p: &kiln::Array,
        per: usize,
    ) -> kiln_beam::Result<kiln_beam::Step> {
        self.0.step(s, p, per)
    }
}

fn main() {
    let cli = Raw::parse();
    let o = resolve(&cli).unwrap_or_else(|e| common::exit_usage(Raw::command(), &e));
    // load every model first: a bad model file fails before any input is read
    let models: Vec<Model> = o
        .models
        .iter()
        .map(|m| Model::load(m))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| {
            eprintln!("kiln-translate: {e}");
            std::process::exit(1)
        });
    let first = &models[0];
    for m in &models[1..] {
        let same = match (first, m) {
            (Model::G2p(_) | Model::Attention(_), Model::G2p(_) | Model::Attention(_)) => true,
            (Model::Cn2En(a), Model::Cn2En(b)) => a.same_vocabularies(b),
            _ => false,
        };
        if !same {
            eprintln!(
                "kiln-translate: an ensemble needs models of one kind and one vocabulary ({} and {} given)",
                first.kind(),
                m.kind()
            );
            std::process::exit(2);
        }
    }
    let mut config = o.config.clone();
    first.configure(&mut config);
    // each decoding thread gets its own scorers; they share the loaded weights
    let make = || -> kiln_beam::Result<BeamSearch> {
        let scorers = models
            .iter()
            .zip(&o.weights)
            .map(|(m, &w)| {
                m.scorer()
                    .map(|s| Box::new(Weighted(s, w)) as Box<dyn Scorer>)
            })
            .collect::<kiln_beam::Result<_>>()?;
        Ok(BeamSearch::new(scorers, config.clone()))
    };
    let start = Instant::now();
    // the running count of lines and their rate: on a terminal only
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::no_length().with_style(
            ProgressStyle::with_template(
                "kiln-translate: {spinner} {human_pos} lines, {per_sec:0}, {elapsed}",
            )
            .expect("a valid template"),
        )
    } else {
        ProgressBar::hidden()
    };
    let mut input = InputLines::new(std::io::stdin().lock());
    let mut out = std::io::stdout().lock();
    let (mut total, mut produced) = (0usize, 0usize);
    let names: Vec<String> = (0..models.len()).map(|i| format!("F{i}")).collect();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    loop {
        // one block of lines: read, decode (sorted by length inside), write, in input order
        let mut block: Vec<Option<String>> = Vec::with_capacity(o.block.min(1 << 16));
        for line in input.by_ref().take(o.block) {
            let n = total + block.len() + 1;
            match line {
                Ok(Some(mut s)) => {
                    if let Some((cut, _)) = s.char_indices().nth(o.max_input) {
                        bar.suspend(|| {
                            eprintln!(
                                "kiln-translate: line {n}: cropped to {} symbols",
                                o.max_input
                            )
                        });
                        s.truncate(cut);
                    }
                    block.push(Some(s));
                }
                Ok(None) => {
                    bar.suspend(|| {
                        eprintln!("kiln-translate: line {n}: invalid UTF-8; writing an empty line")
                    });
                    block.push(None);
                }
                Err(e) => {
                    eprintln!("kiln-translate: reading stdin at line {n}: {e}");
                    std::process::exit(1);
                }
            }
        }
        if block.is_empty() {
            break;
        }
        let srcs: Vec<Vec<usize>> = block
            .iter()
            .map(|l| match l {
                Some(s) if !s.is_empty() => first.encode(s),
                _ => vec![],
            })
            .collect();
        // empty lines (and invalid ones) give empty output lines without decoding
        let todo: Vec<usize> = (0..srcs.len()).filter(|&i| !srcs[i].is_empty()).collect();
        let picked: Vec<Vec<usize>> = todo.iter().map(|&i| srcs[i].clone()).collect();
        let hist = match decode_parallel(&picked, &make, o.mini_batch, o.threads) {
            Ok(h) => h,
            Err(e) => {
                eprintln!("kiln-translate: {e}");
                std::process::exit(1);
            }
        };
        let mut by_line = vec![None; srcs.len()];
        for (&i, h) in todo.iter().zip(hist) {
            by_line[i] = Some(h);
        }
        let mut text = String::new();
        for (i, h) in by_line.into_iter().enumerate() {
            let id = total + i;
            let phon = |w: usize| first.word(w);
            let strip = |ws: Vec<usize>| {
                ws.into_iter()
                    .filter(|&w| w != config.eos)
                    .map(phon)
                    .collect::<Vec<_>>()
                    .join(" ")
                    .trim()
                    .to_string()
            };
            let src_len = srcs[i].len();
            let align = |h: &kiln_beam::Hypothesis| {
                o.alignment
                    .map(|k| h.alignment(k, src_len, config.eos))
                    .unwrap_or_default()
            };
            match h {
                Some(h) if o.n_best => {
                    let aligned: Option<&dyn Fn(&kiln_beam::Hypothesis) -> String> =
                        o.alignment.map(|_| &align as _);
                    let word = |w| {
                        if w == config.eos {
                            String::new()
                        } else {
                            phon(w)
                        }
                    };
                    for line in nbest_lines(id, &h, config.beam, &name_refs, word, aligned) {
                        text.push_str(&line.replace("  |||", " |||"));
                        text.push('\n');
                    }
                }
                Some(h) => {
                    let best = h.best();
                    let words = best.map(|b| strip(b.hyp.words())).unwrap_or_default();
                    produced += words.split_whitespace().count();
                    text.push_str(&words);
                    if let (Some(_), Some(b)) = (o.alignment, best) {
                        text.push_str(" ||| ");
                        text.push_str(&align(&b.hyp));
                    }
                    text.push('\n');
                }
                None => text.push('\n'),
            }
        }
        if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            eprintln!("kiln-translate: writing stdout: {e}");
            std::process::exit(1);
        }
        total += block.len();
        bar.inc(block.len() as u64);
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "kiln-translate: {total} lines, {produced} output words in {secs:.2} s ({:.0} lines/s, {:.0} words/s)",
        total as f64 / secs.max(1e-9),
        produced as f64 / secs.max(1e-9)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::Path;

    fn cli(args: &[&str]) -> Raw {
        Raw::try_parse_from(std::iter::once("kiln-translate").chain(args.iter().copied())).unwrap()
    }

    fn yaml(text: &str) -> Raw {
        common::parse_config(Path::new("decoder.yml"), text).unwrap()
    }

    fn merged(cli: &Raw, file: &Raw) -> Result<Options, OptionError> {
        options(&Merge {
            cli,
            file,
            path: Some(Path::new("decoder.yml")),
        })
    }

    #[test]
    fn defaults_are_amuns() {
        let o = merged(&cli(&["-m", "g2p:x.npz"]), &Raw::default()).unwrap();
        assert_eq!(o.config.beam, 4);
        assert_eq!(o.config.max_length_factor, 3.0);
        assert_eq!(o.mini_batch, MiniBatch::Sentences(16));
        assert_eq!(o.block, 1600);
        assert_eq!((o.threads, o.max_input), (1, 200));
        assert_eq!(o.weights, [1.0]);
    }

    #[test]
    fn the_config_file_sets_values_and_the_command_line_overrides_them() {
        let file = yaml(
            "beam-size: 6\nnormalize: 0.6\nmodels: [g2p:a.npz, att:b.safetensors]\nweights: [1, 0.5]\nn-best: true\nalignment: soft\n",
        );
        let o = merged(&cli(&[]), &file).unwrap();
        assert_eq!(o.config.beam, 6);
        assert_eq!(o.config.normalize, 0.6);
        assert_eq!(o.models, ["g2p:a.npz", "att:b.safetensors"]);
        assert_eq!(o.weights, [1.0, 0.5]);
        assert!(o.n_best);
        assert_eq!(o.alignment, Some(AlignmentKind::Soft));
        let o = merged(&cli(&["-b", "2", "--weights", "0.3,0.7"]), &file).unwrap();
        assert_eq!(o.config.beam, 2);
        assert_eq!(o.config.normalize, 0.6);
        assert_eq!(o.weights, [0.3, 0.7]);
        // the command line's models replace the file's (so the file's weights no longer fit)
        let e = merged(&cli(&["-m", "g2p:c.npz"]), &file).unwrap_err();
        assert!(
            e.to_string().contains("--weights") && e.to_string().contains("decoder.yml"),
            "{e}"
        );
        // one model as a plain string
        let o = merged(&cli(&[]), &yaml("model: g2p:a.npz\ngnmt: 0.2,0\n")).unwrap();
        assert_eq!(o.models, ["g2p:a.npz"]);
        assert_eq!(
            o.config.gnmt,
            Some(Gnmt {
                alpha: 0.2,
                beta: 0.0
            })
        );
    }

    #[test]
    fn a_bad_value_in_the_file_names_the_option_and_the_file_unless_overridden() {
        let file = yaml("model: g2p:a.npz\nbeam-size: 0\n");
        let e = merged(&cli(&[]), &file).unwrap_err().to_string();
        assert!(
            e.contains("--beam-size") && e.contains("decoder.yml"),
            "{e}"
        );
        assert_eq!(merged(&cli(&["-b", "3"]), &file).unwrap().config.beam, 3);
        let e = merged(&cli(&["-b", "3000"]), &file)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--beam-size") && !e.contains("decoder.yml"),
            "{e}"
        );
    }

    #[test]
    fn unknown_keys_and_wrong_types_in_the_file_are_errors_naming_them() {
        let p = Path::new("decoder.yml");
        for (text, want) in [
            ("beam-sise: 6\n", "beam-sise"),
            ("config: other.yml\n", "config"),
            ("beam-size: 2.7\n", "beam-size"),
            ("beam-size: -1\n", "beam-size"),
            ("weights: [1, abc]\n", "weights[1]"),
            ("weights: 1,abc\n", "weights"),
            ("models: 5\n", "models"),
            ("alignment: sideways\n", "alignment"),
        ] {
            let e = common::parse_config::<Raw>(p, text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want) && e.contains("decoder.yml"), "{text}: {e}");
        }
        assert_eq!(
            common::parse_config::<Raw>(p, "# nothing\n").unwrap(),
            Raw::default()
        );
    }

    #[test]
    fn a_config_file_is_read_from_disk() {
        let path = std::env::temp_dir().join(format!("kiln-translate-{}.yml", std::process::id()));
        std::fs::write(&path, "beam-size: 6\nmodels:\n  - att:m.safetensors\n").unwrap();
        let shown = path.display().to_string();
        let o = resolve(&cli(&["-c", &shown])).unwrap();
        assert_eq!((o.config.beam, o.models.len()), (6, 1));
        assert_eq!(
            resolve(&cli(&["-c", &shown, "-b", "9"]))
                .unwrap()
                .config
                .beam,
            9
        );
        std::fs::remove_file(&path).unwrap();
        let e = resolve(&cli(&["-c", &shown])).unwrap_err().to_string();
        assert!(e.contains("--config") && e.contains(&shown), "{e}");
    }

    #[test]
    fn hostile_command_line_values_are_refused_naming_the_option() {
        let m = ["-m", "g2p:x.npz"];
        for (args, option) in [
            (&["-b", "0"][..], "--beam-size"),
            (&["-b", "1025"], "--beam-size"),
            (&["--threads", "5000"], "--threads"),
            (&["--threads", "0"], "--threads"),
            (&["--max-length-factor", "-1"], "--max-length-factor"),
            (&["--max-length-factor", "nan"], "--max-length-factor"),
            (&["--max-length-factor", "1e30"], "--max-length-factor"),
            (&["--weights", "-1"], "--weights"),
            (&["--weights", "nan"], "--weights"),
            (&["--weights", "1,1"], "--weights"),
            (&["--weights", "0"], "--weights"),
            (&["--normalize", "nan"], "--normalize"),
            (&["--word-penalty", "-inf"], "--word-penalty"),
            (&["--gnmt", "0.6"], "--gnmt"),
            (&["--gnmt", "0.2,-1"], "--gnmt"),
            (&["--gnmt", "0.2,0.2"], "--gnmt"),
            (&["--alignment", "hard"], "--alignment"),
            (&["--mini-batch", "0"], "--mini-batch"),
            (&["--mini-batch-words", "0"], "--mini-batch-words"),
            (&["--maxi-batch", "0"], "--maxi-batch"),
            (&["--max-input", "0"], "--max-input"),
        ] {
            let raw = cli(&[&m[..], args].concat());
            let e = merged(&raw, &Raw::default()).unwrap_err().to_string();
            assert!(e.starts_with(option), "{args:?}: {e}");
        }
        let e = merged(&cli(&["-m", "npz:x"]), &Raw::default())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--model") && e.contains("npz:x"), "{e}");
        let e = merged(&cli(&[]), &Raw::default()).unwrap_err().to_string();
        assert!(e.starts_with("--model"), "{e}");
        for args in [
            ["-b", "2.7"],
            ["-b", "inf"],
            ["-b", "1e30"],
            ["--max-input", "-5"],
        ] {
            let e = Raw::try_parse_from(["kiln-translate"].iter().chain(&args)).unwrap_err();
            assert!(e.to_string().contains(args[0]), "{e}");
        }
    }

    #[test]
    fn input_is_read_line_by_line() {
        let lines = |b: &[u8]| -> Vec<Option<String>> {
            InputLines::new(b).collect::<std::io::Result<_>>().unwrap()
        };
        let empty = vec![b'\n'; 200_000];
        let got = lines(&empty);
        assert_eq!(got.len(), 200_000);
        assert!(got.iter().all(|l| l.as_deref() == Some("")));
        assert_eq!(lines(b""), Vec::<Option<String>>::new());
        assert_eq!(lines(b"\n"), [Some(String::new())]);
        assert_eq!(
            lines(b" a \r\n\xff\nb"),
            [Some("a".into()), None, Some("b".into())]
        );
    }

    proptest! {
        #[test]
        fn only_finite_floats_pass(x in prop_oneof![
            Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY), Just(f64::MAX),
            Just(-f64::MAX), Just(-1.0), Just(0.0), any::<f64>()
        ]) {
            let base = || Raw { model: vec!["g2p:x.npz".into()], ..Raw::default() };
            let normalize = merged(&Raw { normalize: Some(x), ..base() }, &Raw::default());
            prop_assert_eq!(normalize.is_ok(), x.is_finite());
            let penalty = merged(&Raw::default(), &Raw { word_penalty: Some(x), ..base() });
            prop_assert_eq!(penalty.is_ok(), x.is_finite());
            let factor = merged(&Raw { max_length_factor: Some(x), ..base() }, &Raw::default());
            prop_assert_eq!(factor.is_ok(), x > 0.0 && x <= MAX_LENGTH_FACTOR);
            let weights = merged(&Raw { weights: Some(vec![x]), ..base() }, &Raw::default());
            prop_assert_eq!(weights.is_ok(), x.is_finite() && x > 0.0);
        }
    }
}
