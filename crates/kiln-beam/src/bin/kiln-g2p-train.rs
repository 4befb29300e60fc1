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
//! per evaluated model.

mod common;

use kiln_beam::{
    decode_parallel, error_rates, phoneme_vocab, read_cmudict, AttentionConfig, AttentionModel,
    BeamSearch, Entry, G2p, Scorer, SearchConfig, Split,
};
use kiln_optim::{clip_by_global_norm, Adam, Optimizer, Parameter};
use std::time::Instant;

const USAGE: &str = "usage: kiln-g2p-train [options]
  --dict PATH         cmudict.dict (default data/cmudict/cmudict.dict)
  --out PATH          where to save the model (default g2p-attention.safetensors)
  --epochs N          passes over the training words (default 8)
  --batch N           words per step (default 64)
  --lr X              Adam learning rate (default 0.002)
  --seed N            initialisation and shuffling seed (default 1)
  --size E,H,D,A,O    embedding, encoder (per direction), decoder, attention, output sizes
                      (default 48,96,192,96,48)
  --max-words N       train on the first N training words only (quick runs)
  --eval-words N      held-out words to score (default: all test words)
  --beam N            beam for the error rates (default 1)
  --eval-only         load --out and only evaluate it
  --g2p-en PATH       also evaluate g2p-en's checkpoint20.npz on the same words";

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

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        dict: "data/cmudict/cmudict.dict".into(),
        out: "g2p-attention.safetensors".into(),
        epochs: 8,
        batch: 64,
        lr: 0.002,
        seed: 1,
        size: [48, 96, 192, 96, 48],
        max_words: None,
        eval_words: None,
        beam: 1,
        eval_only: false,
        g2p_en: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        let num = |name: &str, v: String| -> Result<usize, String> {
            v.parse()
                .map_err(|_| format!("{name}: {v:?} is not a whole number"))
        };
        match a.as_str() {
            "--dict" => o.dict = val(a)?,
            "--out" => o.out = val(a)?,
            "--epochs" => o.epochs = num(a, val(a)?)?,
            "--batch" => o.batch = num(a, val(a)?)?.max(1),
            "--lr" => {
                let v = val(a)?;
                o.lr = v
                    .parse()
                    .map_err(|_| format!("--lr: {v:?} is not a number"))?
            }
            "--seed" => o.seed = num(a, val(a)?)? as u64,
            "--size" => {
                let v = val(a)?;
                let parts: Vec<usize> = v
                    .split(',')
                    .map(|p| num("--size", p.to_string()))
                    .collect::<Result<_, _>>()?;
                o.size = parts
                    .try_into()
                    .map_err(|_| format!("--size: {v:?}: give five sizes E,H,D,A,O"))?;
            }
            "--max-words" => o.max_words = Some(num(a, val(a)?)?),
            "--eval-words" => o.eval_words = Some(num(a, val(a)?)?),
            "--beam" => o.beam = num(a, val(a)?)?.max(1),
            "--eval-only" => o.eval_only = true,
            "--g2p-en" => o.g2p_en = Some(val(a)?),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(o)
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
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    Ok(decode_parallel(&src, &search, 32, threads)?.best_words(G2p::EOS))
}

fn report(name: &str, words: &[&Entry], pred: &[Vec<usize>], secs: f64, beam: usize) {
    let pairs: Vec<(Vec<usize>, Vec<usize>)> = pred
        .iter()
        .zip(words)
        .map(|(p, e)| (p.clone(), e.phonemes.clone()))
        .collect();
    let r = error_rates(&pairs);
    println!(
        "{{\"model\":\"{name}\",\"beam\":{beam},\"words\":{},\"wer\":{:.4},\"per\":{:.4},\"seconds\":{secs:.2}}}",
        r.words, r.wer, r.per
    );
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
        let make = || -> kiln_beam::Result<Box<dyn Scorer>> { Ok(Box::new(G2p::load(p)?)) };
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
    for epoch in 1..=o.epochs {
        shuffle(&mut train_batches, &mut seed);
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
            if i % 200 == 199 {
                let stats = kiln::cache_stats();
                eprintln!(
                    "epoch {epoch} step {}/{}: loss {:.4} ({:.0} s, {} compiles)",
                    i + 1,
                    train_batches.len(),
                    sum / steps as f64,
                    start.elapsed().as_secs_f64(),
                    stats.misses
                );
            }
        }
        let dev = dev_loss(model, &dev_batches)?;
        let stats = kiln::cache_stats();
        println!(
            "{{\"epoch\":{epoch},\"train_loss\":{:.4},\"dev_loss\":{dev:.4},\"lr\":{},\"seconds\":{:.1},\"compiles\":{},\"cache_hits\":{}}}",
            sum / steps.max(1) as f64,
            opt.learning_rate(),
            start.elapsed().as_secs_f64(),
            stats.misses,
            stats.hits
        );
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
    let o = common::options_or_exit("kiln-g2p-train", USAGE, parse);
    if let Err(e) = run(&o) {
        eprintln!("kiln-g2p-train: {e}");
        std::process::exit(1);
    }
}
