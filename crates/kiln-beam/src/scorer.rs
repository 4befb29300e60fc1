//! The [`Scorer`] trait (AmuNMT's shape: encode, begin-sentence state, one decoding step,
//! assemble the beam state from the survivors, vocabulary size, name, weight) and a small
//! table-driven scorer for tests and examples.
//!
//! Depends on kiln's public API.

use crate::Result;
use kiln::{Array, DType};

/// What a scorer returns for one step.
#[derive(Debug, Clone)]
pub struct Step {
    /// Log-probabilities of the next word, `[rows, vocab]`, lazy.
    pub log_probs: Array,
    /// The state after consuming the previous words, `[rows, …]`, lazy.
    pub next_state: Array,
    /// Attention over the source, `[rows, source length]`, if the model has one.
    pub attention: Option<Array>,
}

/// A model that scores next words. Rows are hypotheses: row `r` belongs to sentence
/// `r / rows_per_sentence` of the encoded batch.
pub trait Scorer: Send {
    /// A short name (shown in n-best feature names).
    fn name(&self) -> &str;
    /// The ensemble weight.
    fn weight(&self) -> f64 {
        1.0
    }
    /// The target vocabulary size.
    fn vocab_size(&self) -> usize;
    /// Encodes a batch of source sentences (token ids); called once per batch.
    fn encode(&mut self, batch: &[Vec<usize>]) -> Result<()>;
    /// The state at the beginning of every sentence: `rows = batch × rows_per_sentence` rows.
    fn begin_state(&mut self, rows: usize, rows_per_sentence: usize) -> Result<Array>;
    /// One decoding step from `state` with the previous words `prev` (`i64 [rows]`).
    fn step(&mut self, state: &Array, prev: &Array, rows_per_sentence: usize) -> Result<Step>;
    /// The state of the survivors: row `r` continues row `origin[r]` of `next_state`
    /// (`origin`: `i64 [rows]`).
    fn assemble(&mut self, next_state: &Array, origin: &Array) -> Result<Array> {
        Ok(next_state.try_take(origin, 0)?)
    }
}

/// A toy scorer: next-word logits `T[prev] + 0.5·count(word in source)`, log-softmaxed, in
/// `f64`. Stateless except for the source bias; used by tests and examples.
///
/// ```
/// use kiln_beam::{Scorer, TableScorer};
/// let s = TableScorer::random(4, 1);
/// assert_eq!(s.vocab_size(), 4);
/// ```
#[derive(Debug, Clone)]
pub struct TableScorer {
    table: Vec<f64>,
    vocab: usize,
    bias: Option<Array>,
    name: String,
    weight: f64,
}

impl TableScorer {
    /// A table of `vocab × vocab` logits drawn from a seeded generator.
    ///
    /// ```
    /// let s = kiln_beam::TableScorer::random(3, 9);
    /// assert_eq!(s.table().len(), 9);
    /// ```
    pub fn random(vocab: usize, seed: u64) -> TableScorer {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let table = (0..vocab * vocab)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
            })
            .collect();
        TableScorer {
            table,
            vocab,
            bias: None,
            name: "table".into(),
            weight: 1.0,
        }
    }

    /// Sets the name and ensemble weight.
    ///
    /// ```
    /// let s = kiln_beam::TableScorer::random(3, 9).named("t2", 0.5);
    /// use kiln_beam::Scorer;
    /// assert_eq!((s.name(), s.weight()), ("t2", 0.5));
    /// ```
    pub fn named(mut self, name: &str, weight: f64) -> TableScorer {
        self.name = name.into();
        self.weight = weight;
        self
    }

    /// The logit table, row-major `[prev, next]`.
    ///
    /// ```
    /// assert_eq!(kiln_beam::TableScorer::random(2, 1).table().len(), 4);
    /// ```
    pub fn table(&self) -> &[f64] {
        &self.table
    }

    /// The source bias of a sentence (the same rule the kiln computation uses): 0.5 per
    /// occurrence of each word in the source.
    ///
    /// ```
    /// let s = kiln_beam::TableScorer::random(3, 1);
    /// assert_eq!(s.source_bias(&[2, 2]), vec![0.0, 0.0, 1.0]);
    /// ```
    pub fn source_bias(&self, src: &[usize]) -> Vec<f64> {
        let mut b = vec![0.0; self.vocab];
        for &w in src {
            if w < self.vocab {
                b[w] += 0.5;
            }
        }
        b
    }
}

impl Scorer for TableScorer {
    fn name(&self) -> &str {
        &self.name
    }

    fn weight(&self) -> f64 {
        self.weight
    }

    fn vocab_size(&self) -> usize {
        self.vocab
    }

    fn encode(&mut self, batch: &[Vec<usize>]) -> Result<()> {
        let rows: Vec<f64> = batch.iter().flat_map(|s| self.source_bias(s)).collect();
        self.bias = Some(Array::from_vec(rows, &[batch.len(), self.vocab])?);
        Ok(())
    }

    fn begin_state(&mut self, rows: usize, _rows_per_sentence: usize) -> Result<Array> {
        Ok(Array::zeros(&[rows, 1], DType::F64))
    }

    fn step(&mut self, state: &Array, prev: &Array, rows_per_sentence: usize) -> Result<Step> {
        let rows = prev.shape()[0];
        let bias = self.bias.as_ref().ok_or(crate::Error::Invalid {
            op: "TableScorer::step",
            message: "encode a batch before decoding it".into(),
        })?;
        let table = Array::from_vec(self.table.clone(), &[self.vocab, self.vocab])?;
        let sentence = Array::arange(0.0, rows as f64, 1.0, DType::I64)?
            .try_floor_div(rows_per_sentence as i64)?;
        let logits = table.try_take(prev, 0)? + bias.try_take(&sentence, 0)?;
        Ok(Step {
            log_probs: logits.try_log_softmax(-1)?,
            next_state: state.clone(),
            attention: None,
        })
    }
}
