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
//! Training runs on kiln-train's [`Estimator`]: Adam, mini-batches of words sorted by length
//! (shuffled batch order per epoch, seeded), global-norm clipping at 5, the learning rate
//! halved (and the best weights restored) whenever the dev-set loss does not improve; the
//! weights of the best dev loss are kept. `--replicas N` trains on N mirrored replicas.
//! The losses and the saved model are bit for bit those of the hand-written loop this
//! replaced (`tests/g2p_train_port.rs` keeps it as the reference).
//! Prints one JSON line per epoch and one per evaluated model (`serde_json` records; a NaN or infinite number, such as a diverged loss,
//! is written `null`), and, when stderr is a terminal, the estimator's progress bar of the
//! run's steps.
//!
//! Options are parsed with `clap` into [`Raw`]; `-c FILE.yml` reads the same keys from a YAML file with `serde_norway` (see `common`), and [`options`] merges the two (the command line wins), applies the defaults and checks every value before anything is read.
//!
//! Depends on `common` (options), kiln-beam's, kiln-train's, kiln-optim's and kiln's public
//! APIs and `serde_json`.

mod common;

use clap::{CommandFactory, Parser};
use common::{Merge, OptionError};
use kiln_beam::{
    decode_parallel, error_rates, phoneme_vocab, read_cmudict, AttentionConfig, AttentionModel,
    BeamSearch, Entry, G2p, Scorer, SearchConfig, Split,
};
use kiln_optim::Adam;
use kiln_train::{
    Context, Dataset, Estimator, Hook, Init, Metric, Mode, RunConfig, RunContext, Snapshot, Spec,
    StepInfo, Strategy, Until,
};
use serde::{Deserialize, Serialize};
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
    /// Mirrored replicas on threads, 0 to 64 (0: one device, one graph per step) [default: 0]
    #[arg(long, value_name = "N", value_parser = common::whole::<usize>, allow_hyphen_values = true)]
    replicas: Option<usize>,
    /// Words per micro-batch with --replicas, 1 to 65536 [default: 16]
    #[arg(long, value_name = "N", value_parser = common::whole::<usize>, allow_hyphen_values = true)]
    micro_batch: Option<usize>,
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
    replicas: usize,
    micro_batch: usize,
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
        replicas: m.count("--replicas", |r| r.replicas, 0..=64)?.unwrap_or(0),
        micro_batch: m
            .count("--micro-batch", |r| r.micro_batch, 1..=65_536)?
            .unwrap_or(16),
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

/// The attention model as a kiln-train model function.
///
/// The estimator owns the variables; each call hands the network's parameters the
/// estimator's current values (`assign`), so the loss the network builds reads them and the
/// gradient is taken with respect to them.
struct AttentionFn<'a> {
    net: &'a AttentionModel,
    lr: f64,
}

impl kiln_train::Model for AttentionFn<'_> {
    type Features = Vec<Vec<usize>>;
    type Labels = Vec<Vec<usize>>;

    fn model_fn(
        &self,
        src: &Vec<Vec<usize>>,
        tgt: Option<&Vec<Vec<usize>>>,
        mode: Mode,
        cx: &mut Context<'_>,
    ) -> kiln_train::Result<Spec> {
        for p in self.net.parameters() {
            let v = cx.variable(p.name(), p.shape(), p.dtype(), Init::Value(p.value()))?;
            p.assign(v)?;
        }
        let Some(tgt) = tgt else {
            return Err(kiln_train::Error::invalid(
                "kiln-g2p-train",
                "the attention model function needs phonemes (it trains and evaluates only)",
            ));
        };
        let loss = self
            .net
            .loss_with_bos(src, tgt, G2p::BOS, G2p::EOS)
            .map_err(kiln_train::Error::model)?;
        // the dev loss is a mean over target tokens (each word's phonemes and </s>)
        let tokens: usize = tgt.iter().map(|t| t.len() + 1).sum();
        let mut spec = Spec::new().loss(&loss).metric(
            "token_loss",
            Metric::weighted_mean(&loss, &kiln::Array::scalar(tokens as f64)),
        );
        if mode == Mode::Train {
            spec = spec.optimizer(Adam::new(self.lr)).clip_global_norm(5.0);
        }
        Ok(spec)
    }
}

/// The end of each epoch: the dev loss, a JSON line, and either a new best model (saved to
/// `--out`) or the best parameters back at half the learning rate.
struct Epochs<'a> {
    net: &'a AttentionModel,
    dev: Dataset<Batch>,
    steps_per_epoch: u64,
    lr: f64,
    out: String,
    start: Instant,
    sum: f64,
    steps: usize,
    best: f64,
    best_values: Option<Snapshot>,
}

impl Epochs<'_> {
    /// Gives the network the values of `snapshot`, or the estimator's current ones.
    fn sync<M: kiln_train::Model>(
        &self,
        cx: &RunContext<'_, M>,
        snapshot: Option<&Snapshot>,
    ) -> kiln_train::Result<()> {
        for p in self.net.parameters() {
            let value = match snapshot {
                Some(s) => s.get(p.name()).cloned(),
                None => cx
                    .parameters()
                    .iter()
                    .find(|q| q.name() == p.name())
                    .map(|q| q.value()),
            };
            if let Some(v) = value {
                p.assign(v)?;
            }
        }
        Ok(())
    }
}

impl<M: kiln_train::Model<Features = Vec<Vec<usize>>, Labels = Vec<Vec<usize>>>> Hook<M>
    for Epochs<'_>
{
    fn begin(&mut self, cx: &mut RunContext<'_, M>) -> kiln_train::Result<()> {
        // until a dev loss beats infinity, "the best" is where training started
        self.best_values = Some(cx.snapshot());
        Ok(())
    }

    fn after_step(
        &mut self,
        cx: &mut RunContext<'_, M>,
        step: &StepInfo,
    ) -> kiln_train::Result<()> {
        self.sum += step.loss;
        self.steps += 1;
        if !step.step.is_multiple_of(self.steps_per_epoch) {
            return Ok(());
        }
        let dev = cx.evaluate(&self.dev, None)?["token_loss"];
        let lr = self.lr * cx.learning_rate_scale();
        let stats = kiln::cache_stats();
        emit(&EpochLine {
            epoch: (step.step / self.steps_per_epoch) as usize,
            train_loss: round(self.sum / self.steps.max(1) as f64, 4),
            dev_loss: round(dev, 4),
            lr,
            seconds: round(self.start.elapsed().as_secs_f64(), 1),
            compiles: stats.misses,
            cache_hits: stats.hits,
        });
        (self.sum, self.steps) = (0.0, 0);
        if dev < self.best {
            self.best = dev;
            self.best_values = Some(cx.snapshot());
            self.sync(cx, None)?;
            self.net.save(&self.out).map_err(kiln_train::Error::model)?;
        } else {
            // back to the best weights (the optimizer's moments go on), at half the rate
            if let Some(best) = &self.best_values {
                cx.restore_parameters(best)?;
            }
            cx.set_learning_rate_scale(cx.learning_rate_scale() / 2.0)?;
        }
        Ok(())
    }
}

/// Trains `model` with kiln-train's estimator: Adam, gradients clipped to a global norm of
/// 5, the batches sorted by length in a seeded order per epoch, a dev check per epoch
/// ([`Epochs`]); ends with the best parameters in `model`.
fn train_model(
    model: &AttentionModel,
    o: &Options,
    train: &[&Entry],
    dev: &[&Entry],
) -> kiln_beam::Result<()> {
    let to_beam = |e: kiln_train::Error| kiln_beam::Error::Invalid {
        op: "kiln-g2p-train",
        message: e.to_string(),
    };
    let mut train_batches = batches(train, o.batch);
    let dev_batches = batches(&dev[..dev.len().min(2000)], 256);
    // each epoch's batch order: the previous one's, shuffled by a seeded xorshift
    let mut seed = o.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut order: Vec<usize> = (0..train_batches.len()).collect();
    let mut schedule = Vec::with_capacity(order.len() * o.epochs);
    for _ in 0..o.epochs {
        shuffle(&mut order, &mut seed);
        schedule.extend_from_slice(&order);
    }
    let all: std::sync::Arc<Vec<Batch>> = std::mem::take(&mut train_batches).into();
    let input = Dataset::from_slices(schedule).map(move |i| all[i].clone());
    let strategy = if o.replicas == 0 {
        Strategy::OneDevice
    } else {
        Strategy::mirrored(o.replicas, o.micro_batch).map_err(to_beam)?
    };
    let config = RunConfig::new().seed(o.seed).strategy(strategy);
    let mut est = Estimator::new(
        AttentionFn {
            net: model,
            lr: o.lr,
        },
        config,
    )
    .map_err(to_beam)?;
    let steps_per_epoch = (input.len().unwrap_or(0) / o.epochs.max(1)) as u64;
    let mut epochs = Epochs {
        net: model,
        dev: Dataset::from_slices(dev_batches),
        steps_per_epoch: steps_per_epoch.max(1),
        lr: o.lr,
        out: o.out.clone(),
        start: Instant::now(),
        sum: 0.0,
        steps: 0,
        best: f64::INFINITY,
        best_values: None,
    };
    est.train(
        &input,
        Until::Steps(steps_per_epoch * o.epochs as u64),
        &mut [&mut epochs],
    )
    .map_err(to_beam)?;
    let best = epochs.best_values.take();
    if let Some(best) = &best {
        for p in model.parameters() {
            if let Some(v) = best.get(p.name()) {
                p.assign(v.clone())?;
            }
        }
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
