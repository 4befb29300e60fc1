//! Batched beam search over an ensemble of scorers, length normalisation and the GNMT
//! penalties, batching over threads, and n-best output.
//!
//! Depends on `crate::history`, `crate::scorer` and kiln's public API.

use crate::history::{Beam, Histories, History, Hypothesis};
use crate::scorer::Scorer;
use crate::{Error, Result};
use kiln::{Array, DType};
use std::sync::Arc;

/// The GNMT length and coverage penalties (Wu et al. 2016, §7):
/// `score = log P / lp + cp`, `lp = ((5 + |Y|) / 6)^α`, `cp = β Σ_i log(min(Σ_j a_ij, 1))`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gnmt {
    /// Length penalty exponent α.
    pub alpha: f64,
    /// Coverage penalty weight β (needs a scorer with attention; 0 disables it).
    pub beta: f64,
}

/// Search options, named as in amun/Marian.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchConfig {
    /// Beam size (`-b`).
    pub beam: usize,
    /// Length normalisation exponent α in `(cost − wp·len) / len^α` (`--normalize`; 0: none).
    pub normalize: f64,
    /// Word penalty `wp` (`--word-penalty`).
    pub word_penalty: f64,
    /// Stop at `max_length_factor × source length` words (`--max-length-factor`).
    pub max_length_factor: f64,
    /// Allow the UNK word (`--allow-unk`).
    pub allow_unk: bool,
    /// The UNK word id, if the vocabulary has one.
    pub unk: Option<usize>,
    /// The sentence-start word id.
    pub bos: usize,
    /// The sentence-end word id.
    pub eos: usize,
    /// Use the GNMT penalties instead of `normalize`/`word_penalty`.
    pub gnmt: Option<Gnmt>,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            beam: 4,
            normalize: 0.0,
            word_penalty: 0.0,
            max_length_factor: 3.0,
            allow_unk: false,
            unk: None,
            bos: 0,
            eos: 1,
            gnmt: None,
        }
    }
}

impl SearchConfig {
    /// The ranking score of a finished hypothesis.
    ///
    /// ```
    /// let c = kiln_beam::SearchConfig { normalize: 1.0, word_penalty: 0.5, ..Default::default() };
    /// assert_eq!(c.score(-4.0, 2, &[]), (-4.0 - 1.0) / 2.0);
    /// ```
    pub fn score(&self, cost: f64, len: usize, attention: &[Vec<f32>]) -> f64 {
        let len = len.max(1) as f64;
        match self.gnmt {
            Some(g) => {
                let lp = ((5.0 + len) / 6.0).powf(g.alpha);
                let cp = if g.beta != 0.0 && !attention.is_empty() {
                    let src = attention[0].len();
                    (0..src)
                        .map(|j| {
                            attention
                                .iter()
                                .map(|a| a[j] as f64)
                                .sum::<f64>()
                                .clamp(1e-12, 1.0)
                                .ln()
                        })
                        .sum::<f64>()
                        * g.beta
                } else {
                    0.0
                };
                cost / lp + cp
            }
            None => (cost - self.word_penalty * len) / len.powf(self.normalize),
        }
    }
}

/// A beam search over an ensemble of scorers.
pub struct BeamSearch {
    scorers: Vec<Box<dyn Scorer>>,
    config: SearchConfig,
}

impl BeamSearch {
    /// A search over `scorers` (their log-probabilities are summed with their weights).
    pub fn new(scorers: Vec<Box<dyn Scorer>>, config: SearchConfig) -> BeamSearch {
        BeamSearch { scorers, config }
    }

    /// The configuration.
    pub fn config(&self) -> &SearchConfig {
        &self.config
    }

    /// Decodes a batch of source sentences (token ids); one [`History`] per sentence, in order.
    /// All sentences go through one kiln computation per step.
    pub fn decode(&mut self, batch: &[Vec<usize>]) -> Result<Histories> {
        let cfg = self.config.clone();
        if self.scorers.is_empty() || cfg.beam == 0 {
            return Err(Error::Invalid {
                op: "decode",
                message: "need at least one scorer and a beam of at least 1".into(),
            });
        }
        let vocab = self.scorers[0].vocab_size();
        if self.scorers.iter().any(|s| s.vocab_size() != vocab) {
            return Err(Error::Invalid {
                op: "decode",
                message: "ensemble scorers must share one target vocabulary".into(),
            });
        }
        let (n, b, v) = (batch.len(), cfg.beam, vocab);
        let mut histories = Histories::new(n);
        if n == 0 {
            return Ok(histories);
        }
        let rows = n * b;
        let k = self.scorers.len();
        for s in &mut self.scorers {
            s.encode(batch)?;
        }
        let mut states: Vec<Array> = self
            .scorers
            .iter_mut()
            .map(|s| s.begin_state(rows, b))
            .collect::<Result<_>>()?;
        let start = Arc::new(Hypothesis::start(cfg.bos, k));
        let mut live: Vec<Beam> = vec![vec![start]; n];
        let mut beam_left = vec![b; n];
        let max_len: Vec<usize> = batch
            .iter()
            .map(|src| ((cfg.max_length_factor * src.len() as f64).ceil() as usize).max(1))
            .collect();
        let weights: Vec<f64> = self.scorers.iter().map(|s| s.weight()).collect();
        // Per-column mask: −∞ for UNK unless allowed (shape [vocab]).
        let mut mask = vec![0.0f64; v];
        if let (Some(u), false) = (cfg.unk, cfg.allow_unk) {
            if u < v {
                mask[u] = f64::NEG_INFINITY;
            }
        }
        let mask = Array::from_vec(mask, &[v])?;
        let offsets =
            Array::from_vec((0..n as i64).map(|s| s * (b * v) as i64).collect(), &[n, 1])?;
        let mut t = 0usize;
        while live.iter().any(|l| !l.is_empty()) {
            // previous words and costs per row; dead rows cost −∞
            let mut prev = vec![cfg.bos as i64; rows];
            let mut cost = vec![f64::NEG_INFINITY; rows];
            for (s, hyps) in live.iter().enumerate() {
                for (j, h) in hyps.iter().enumerate() {
                    prev[s * b + j] = h.word as i64;
                    cost[s * b + j] = h.cost;
                }
            }
            let prev = Array::from_vec(prev, &[rows])?;
            let cost = Array::from_vec(cost, &[rows, 1])?;
            let mut steps = Vec::with_capacity(k);
            for (sc, st) in self.scorers.iter_mut().zip(&states) {
                steps.push(sc.step(st, &prev, b)?);
            }
            let mut total = cost.try_add(&mask)?;
            for (st, w) in steps.iter().zip(&weights) {
                total = total.try_add(&st.log_probs.cast(DType::F64).try_mul(*w)?)?;
            }
            let (vals, idx) = total
                .try_reshape(&[n as isize, (b * v) as isize])?
                .try_top_k(b)?;
            // each scorer's own log-probability of every selected candidate
            let global = idx.try_add(&offsets)?.try_reshape(&[-1])?;
            let chosen: Vec<Array> = steps
                .iter()
                .map(|st| {
                    st.log_probs
                        .cast(DType::F64)
                        .try_reshape(&[-1])?
                        .try_take(&global, 0)
                })
                .collect::<kiln::Result<_>>()?;
            let attn: Vec<Array> = steps.iter().filter_map(|st| st.attention.clone()).collect();
            let mut outs: Vec<&Array> = vec![&vals, &idx];
            outs.extend(chosen.iter());
            outs.extend(steps.iter().map(|s| &s.next_state));
            outs.extend(attn.iter());
            kiln::eval(&outs)?;
            let vals = vals.to_vec::<f64>()?;
            let idx = idx.to_vec::<i64>()?;
            let chosen: Vec<Vec<f64>> = chosen
                .iter()
                .map(|c| c.to_vec::<f64>())
                .collect::<kiln::Result<_>>()?;
            let attn: Option<(Vec<f32>, usize)> = match attn.first() {
                Some(a) => Some((a.cast(DType::F32).to_vec::<f32>()?, a.shape()[1])),
                None => None,
            };
            // expand each sentence's beam
            let mut origin = vec![0i64; rows];
            let mut next_live: Vec<Beam> = vec![Vec::new(); n];
            for s in 0..n {
                for j in 0..b {
                    origin[s * b + j] = (s * b) as i64;
                }
                if live[s].is_empty() {
                    continue;
                }
                let mut ended = 0;
                for j in 0..beam_left[s] {
                    let p = s * b + j;
                    if vals[p] == f64::NEG_INFINITY {
                        break;
                    }
                    let (row, word) = ((idx[p] as usize) / v, (idx[p] as usize) % v);
                    let parent = &live[s][row];
                    // the row over this sentence's own source (the batch's rows are padded
                    // to its longest source; padding gets no attention)
                    let attention = attn.as_ref().map(|(a, len)| {
                        let at = (s * b + row) * len;
                        a[at..at + batch[s].len().min(*len)].to_vec()
                    });
                    let hyp = Arc::new(Hypothesis {
                        word,
                        cost: vals[p],
                        costs: (0..k).map(|i| parent.costs[i] + chosen[i][p]).collect(),
                        prev: Some(parent.clone()),
                        prev_index: row,
                        attention,
                        length: parent.length + 1,
                    });
                    let finished = word == cfg.eos || hyp.length >= max_len[s];
                    if finished {
                        let score = cfg.score(hyp.cost, hyp.length, &hyp.attentions());
                        histories[s].add(hyp, score);
                        ended += 1;
                    } else {
                        origin[s * b + next_live[s].len()] = (s * b + row) as i64;
                        next_live[s].push(hyp);
                    }
                }
                // a sentence's beam shrinks by one for each hypothesis that ended
                beam_left[s] -= ended;
                next_live[s].truncate(beam_left[s]);
            }
            live = next_live;
            let origin = Array::from_vec(origin, &[rows])?;
            states = self
                .scorers
                .iter_mut()
                .zip(steps)
                .map(|(sc, st)| sc.assemble(&st.next_state, &origin))
                .collect::<Result<_>>()?;
            t += 1;
            if t > 10_000 {
                return Err(Error::Invalid {
                    op: "decode",
                    message: "no end after 10,000 steps".into(),
                });
            }
        }
        Ok(histories)
    }
}

/// How [`decode_parallel`] cuts mini-batches: at most this many sentences, or at most this
/// many source words (Marian's `--mini-batch-words`; a longer sentence goes alone). A plain
/// number means sentences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MiniBatch {
    /// At most this many sentences per mini-batch.
    Sentences(usize),
    /// At most this many source words (summed over the sentences) per mini-batch.
    Words(usize),
}

impl From<usize> for MiniBatch {
    fn from(n: usize) -> MiniBatch {
        MiniBatch::Sentences(n)
    }
}

impl MiniBatch {
    /// Cuts `order` (sentence indices, sorted by length) into mini-batches.
    ///
    /// ```
    /// use kiln_beam::MiniBatch;
    /// let lens = [5, 4, 4, 2];
    /// assert_eq!(MiniBatch::Words(8).cut(&[0, 1, 2, 3], |i| lens[i]), vec![vec![0], vec![1, 2], vec![3]]);
    /// assert_eq!(MiniBatch::Sentences(3).cut(&[0, 1, 2, 3], |i| lens[i]), vec![vec![0, 1, 2], vec![3]]);
    /// ```
    pub fn cut(self, order: &[usize], len: impl Fn(usize) -> usize) -> Vec<Vec<usize>> {
        match self {
            MiniBatch::Sentences(n) => order.chunks(n.max(1)).map(<[usize]>::to_vec).collect(),
            MiniBatch::Words(max) => {
                let mut out: Vec<Vec<usize>> = Vec::new();
                let mut words = 0;
                for &i in order {
                    let l = len(i);
                    match out.last_mut() {
                        Some(b) if words + l <= max => b.push(i),
                        _ => {
                            out.push(vec![i]);
                            words = 0;
                        }
                    }
                    words += l;
                }
                out
            }
        }
    }
}

/// Decodes many sentences AmuNMT-style: sort by source length, cut mini-batches
/// ([`MiniBatch`]: by sentences or by words), run them on `threads` threads (each with its own
/// scorers from `make`), and return the histories in input order.
/// No more threads start than there are mini-batches (none for no sentences), so `make` runs at most once per mini-batch.
pub fn decode_parallel(
    sentences: &[Vec<usize>],
    make: &(dyn Fn() -> Result<BeamSearch> + Sync),
    mini_batch: impl Into<MiniBatch>,
    threads: usize,
) -> Result<Histories> {
    let mut order: Vec<usize> = (0..sentences.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(sentences[i].len()));
    let batches = mini_batch.into().cut(&order, |i| sentences[i].len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(vec![None; sentences.len()]);
    let first_error = std::sync::Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1).min(batches.len()) {
            scope.spawn(|| {
                let mut search = match make() {
                    Ok(s) => s,
                    Err(e) => {
                        first_error
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get_or_insert(e);
                        return;
                    }
                };
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(ids) = batches.get(i) else { break };
                    let batch: Vec<Vec<usize>> =
                        ids.iter().map(|&j| sentences[j].clone()).collect();
                    match search.decode(&batch) {
                        Ok(h) => {
                            let mut r = results.lock().unwrap_or_else(|e| e.into_inner());
                            for (&j, hist) in ids.iter().zip(h) {
                                r[j] = Some(hist);
                            }
                        }
                        Err(e) => {
                            first_error
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .get_or_insert(e);
                            return;
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    Ok(results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|h| h.unwrap_or_default())
        .collect::<Vec<History>>()
        .into())
}

/// n-best lines in Moses/amun format: `id ||| words ||| F0= c0 F1= c1 ||| total`; with an
/// `alignment` (e.g. `|h| h.alignment(AlignmentKind::Hard, src_len, eos)`) Marian's
/// `id ||| words ||| alignment ||| F0= … ||| total`.
///
/// ```
/// let lines = kiln_beam::nbest_lines(0, &kiln_beam::History::default(), 5, &["F0"], |w| w.to_string(), None);
/// assert!(lines.is_empty());
/// ```
pub fn nbest_lines(
    id: usize,
    history: &History,
    n: usize,
    names: &[&str],
    word: impl Fn(usize) -> String,
    alignment: Option<&dyn Fn(&Hypothesis) -> String>,
) -> Vec<String> {
    history
        .nbest(n)
        .iter()
        .map(|f| {
            let words: Vec<String> = f.hyp.words().into_iter().map(&word).collect();
            let feats: Vec<String> = names
                .iter()
                .zip(&f.hyp.costs)
                .map(|(nm, c)| format!("{nm}= {c:.6}"))
                .collect();
            let align = alignment.map_or(String::new(), |a| format!(" ||| {}", a(&f.hyp)));
            format!(
                "{id} ||| {}{align} ||| {} ||| {:.6}",
                words.join(" "),
                feats.join(" "),
                f.score
            )
        })
        .collect()
}
