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
//! ```text
//! echo activationist | kiln-translate --model g2p:data/g2p_en/checkpoint20.npz -b 4 --n-best
//! echo 我不知道。 | kiln-translate --model cn2en:data/cn2en -b 1
//! echo phoneme | kiln-translate --model att:crates/kiln-beam/models/g2p-attention.safetensors --alignment hard
//! ```

mod common;

use kiln_beam::{
    decode_parallel, nbest_lines, phoneme_vocab, AlignmentKind, AttentionModel, BeamSearch, Cn2En,
    G2p, MiniBatch, Scorer, SearchConfig,
};
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Instant;

const USAGE: &str =
    "usage: kiln-translate --model g2p:PATH|cn2en:DIR|att:PATH [options] < input > output

options:
  -b, --beam-size N          beam size (default 4)
      --n-best               print n-best lists: id ||| words ||| F0= c ||| total
      --normalize A          length normalisation exponent (score = (cost - wp*len) / len^A)
      --word-penalty WP      word penalty
      --gnmt ALPHA,BETA      rank by the GNMT length and coverage penalties instead
                             (Wu et al. 2016 s7; BETA > 0 needs an att: model)
      --max-length-factor F  stop at F x source length (default 3)
      --mini-batch N         sentences per mini-batch (default 16)
      --mini-batch-words N   cut mini-batches by source words instead (at most N each)
      --maxi-batch N         mini-batches read and sorted together (default 100)
      --threads N            decoding threads (default 1)
      --weights W1,W2,...    ensemble weights, one per --model
      --allow-unk            allow the UNK word in the output
      --alignment hard|soft  print alignments: words ||| 0-0 1-2 ... (hard) or
                             0.9,0.1 ... (soft); needs an att: model
      --max-input N          crop input lines to N symbols, with a warning (default 200)
  -h, --help";

struct Options {
    models: Vec<String>,
    config: SearchConfig,
    n_best: bool,
    mini_batch: usize,
    mini_batch_words: Option<usize>,
    maxi_batch: usize,
    threads: usize,
    weights: Vec<f64>,
    alignment: Option<AlignmentKind>,
    max_input: usize,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        models: vec![],
        config: SearchConfig {
            bos: G2p::BOS,
            eos: G2p::EOS,
            unk: Some(G2p::UNK),
            ..Default::default()
        },
        n_best: false,
        mini_batch: 16,
        mini_batch_words: None,
        maxi_batch: 100,
        threads: 1,
        weights: vec![],
        alignment: None,
        max_input: 200,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
        let num = |name: &str, v: String| {
            v.parse::<f64>()
                .map_err(|_| format!("{name}: {v:?} is not a number"))
        };
        match a.as_str() {
            "-h" | "--help" => return Err(String::new()),
            "--model" | "-m" => o.models.push(val(a)?),
            "-b" | "--beam-size" => o.config.beam = num(a, val(a)?)? as usize,
            "--n-best" => o.n_best = true,
            "--normalize" | "-n" => o.config.normalize = num(a, val(a)?)?,
            "--word-penalty" => o.config.word_penalty = num(a, val(a)?)?,
            "--gnmt" => {
                let v = val(a)?;
                let (alpha, beta) = v
                    .split_once(',')
                    .ok_or(format!("--gnmt: {v:?}: give ALPHA,BETA (e.g. 0.2,0.2)"))?;
                o.config.gnmt = Some(kiln_beam::Gnmt {
                    alpha: num("--gnmt", alpha.to_string())?,
                    beta: num("--gnmt", beta.to_string())?,
                });
            }
            "--max-length-factor" => o.config.max_length_factor = num(a, val(a)?)?,
            "--mini-batch" => o.mini_batch = num(a, val(a)?)? as usize,
            "--mini-batch-words" => o.mini_batch_words = Some(num(a, val(a)?)? as usize),
            "--maxi-batch" => o.maxi_batch = num(a, val(a)?)? as usize,
            "--threads" => o.threads = num(a, val(a)?)? as usize,
            "--allow-unk" => o.config.allow_unk = true,
            "--max-input" => o.max_input = num(a, val(a)?)? as usize,
            "--weights" => {
                o.weights = val(a)?
                    .split(',')
                    .map(|w| num("--weights", w.to_string()))
                    .collect::<Result<_, _>>()?
            }
            "--alignment" => {
                o.alignment = Some(match val(a)?.as_str() {
                    "hard" => AlignmentKind::Hard,
                    "soft" => AlignmentKind::Soft,
                    v => return Err(format!("--alignment: {v:?} is not hard or soft")),
                });
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    if o.models.is_empty() {
        return Err("give a model with --model g2p:PATH, cn2en:DIR or att:PATH".into());
    }
    if !o.weights.is_empty() && o.weights.len() != o.models.len() {
        return Err(format!(
            "--weights has {} values for {} models",
            o.weights.len(),
            o.models.len()
        ));
    }
    if o.config.beam == 0 || o.mini_batch == 0 || o.mini_batch_words == Some(0) {
        return Err("beam size and mini-batch must be at least 1".into());
    }
    let coverage = o.config.gnmt.is_some_and(|g| g.beta != 0.0);
    if coverage && !o.models.iter().any(|m| m.starts_with("att:")) {
        return Err(
            "--gnmt: a coverage penalty (BETA > 0) needs attention; add an att: model or use BETA 0"
                .into(),
        );
    }
    if o.alignment.is_some() && !o.models.iter().any(|m| m.starts_with("att:")) {
        return Err(
            "--alignment: the g2p and cn2en models have no attention; add an att: model".into(),
        );
    }
    Ok(o)
}

/// A model named on the command line, with what the CLI needs of its kind: how a line
/// becomes source ids, how an id becomes a word, and the search's special ids.
#[derive(Clone)]
enum Model {
    /// g2p-en, loaded again by each decoding thread.
    G2p(String),
    /// cn2en, loaded once (clones share the weights).
    Cn2En(Box<Cn2En>),
    /// kiln-beam's attention model over g2p-en's vocabularies, loaded once.
    Attention(Arc<AttentionModel>),
}

impl Model {
    /// Parses `KIND:PATH` and loads the model, so a bad file fails before any input is read.
    fn load(spec: &str) -> Result<Model, String> {
        match spec.split_once(':') {
            Some(("g2p", p)) => {
                G2p::load(p).map_err(|e| e.to_string())?;
                Ok(Model::G2p(p.to_string()))
            }
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
            Model::G2p(p) => Box::new(G2p::load(p)?),
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
    let o = common::options_or_exit("kiln-translate", USAGE, parse);
    for m in &o.models {
        if !matches!(m.split_once(':'), Some(("g2p" | "cn2en" | "att", _))) {
            eprintln!("kiln-translate: --model {m:?}: expected g2p:PATH, cn2en:DIR or att:PATH");
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    }
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
    let weights = if o.weights.is_empty() {
        vec![1.0; models.len()]
    } else {
        o.weights.clone()
    };
    let make = || -> kiln_beam::Result<BeamSearch> {
        let scorers = models
            .iter()
            .zip(&weights)
            .map(|(m, &w)| {
                m.scorer()
                    .map(|s| Box::new(Weighted(s, w)) as Box<dyn Scorer>)
            })
            .collect::<kiln_beam::Result<_>>()?;
        Ok(BeamSearch::new(scorers, config.clone()))
    };
    let mut raw = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut raw) {
        eprintln!("kiln-translate: reading stdin: {e}");
        std::process::exit(1);
    }
    let mut lines: Vec<Option<String>> = Vec::new();
    for (n, bytes) in raw.split(|&b| b == b'\n').enumerate() {
        if n + 1 == raw.split(|&b| b == b'\n').count() && bytes.is_empty() {
            break; // the final newline
        }
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        match std::str::from_utf8(bytes) {
            Ok(s) => {
                let mut s = s.trim().to_string();
                if s.chars().count() > o.max_input {
                    eprintln!(
                        "kiln-translate: line {}: cropped to {} symbols",
                        n + 1,
                        o.max_input
                    );
                    s = s.chars().take(o.max_input).collect();
                }
                lines.push(Some(s));
            }
            Err(_) => {
                eprintln!(
                    "kiln-translate: line {}: invalid UTF-8; writing an empty line",
                    n + 1
                );
                lines.push(None);
            }
        }
    }
    let start = Instant::now();
    let out = std::io::stdout();
    let mut out = out.lock();
    let total = lines.len();
    let mut produced = 0usize;
    let chunk = (o.mini_batch * o.maxi_batch).max(1);
    let names: Vec<String> = (0..models.len()).map(|i| format!("F{i}")).collect();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    for (c, block) in lines.chunks(chunk).enumerate() {
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
        let cut = o
            .mini_batch_words
            .map_or(MiniBatch::Sentences(o.mini_batch), MiniBatch::Words);
        let hist = match decode_parallel(&picked, &make, cut, o.threads) {
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
        for (i, h) in by_line.into_iter().enumerate() {
            let id = c * chunk + i;
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
                        let _ = writeln!(out, "{}", line.replace("  |||", " |||"));
                    }
                }
                Some(h) => {
                    let best = h.best();
                    let words = best.map(|b| strip(b.hyp.words())).unwrap_or_default();
                    produced += words.split_whitespace().count();
                    match (o.alignment, best) {
                        (Some(_), Some(b)) => {
                            let _ = writeln!(out, "{words} ||| {}", align(&b.hyp));
                        }
                        _ => {
                            let _ = writeln!(out, "{words}");
                        }
                    }
                }
                None => {
                    let _ = writeln!(out);
                }
            }
        }
        eprint!(
            "\rkiln-translate: {}/{} lines",
            (c * chunk + block.len()).min(total),
            total
        );
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "\nkiln-translate: {total} lines, {produced} output words in {secs:.2} s ({:.0} lines/s, {:.0} words/s)",
        total as f64 / secs.max(1e-9),
        produced as f64 / secs.max(1e-9)
    );
}
