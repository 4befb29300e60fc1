//! Hypotheses (a word, its cost and per-scorer costs, a back-pointer shared with `Arc`), the
//! [`Beam`] of a sentence's live hypotheses, the per-sentence [`History`] of finished
//! hypotheses with n-best traceback, the [`Histories`] of a batch, and alignments from the
//! attention rows hypotheses carry.
//!
//! Depends on nothing else in the crate.

use std::sync::Arc;

/// One partial or finished translation, linked to its predecessor.
#[derive(Debug, Clone)]
pub struct Hypothesis {
    /// The last word.
    pub word: usize,
    /// The total (unnormalised) log-probability.
    pub cost: f64,
    /// The cost contributed by each scorer (unweighted log-probabilities).
    pub costs: Vec<f64>,
    /// The previous hypothesis (`None` for the sentence start).
    pub prev: Option<Arc<Hypothesis>>,
    /// The beam row of the previous hypothesis in the step that extended it.
    pub prev_index: usize,
    /// The attention row of this step, if a scorer provides one.
    pub attention: Option<Vec<f32>>,
    /// Number of words (including this one; 0 for the start).
    pub length: usize,
}

impl Hypothesis {
    /// The start of a sentence.
    ///
    /// ```
    /// let h = kiln_beam::Hypothesis::start(2, 1);
    /// assert_eq!(h.length, 0);
    /// ```
    pub fn start(bos: usize, scorers: usize) -> Hypothesis {
        Hypothesis {
            word: bos,
            cost: 0.0,
            costs: vec![0.0; scorers],
            prev: None,
            prev_index: 0,
            attention: None,
            length: 0,
        }
    }

    /// The words from the sentence start to here (the start symbol excluded).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let s = Arc::new(kiln_beam::Hypothesis::start(0, 1));
    /// let h = kiln_beam::Hypothesis { word: 7, length: 1, prev: Some(s), ..kiln_beam::Hypothesis::start(0, 1) };
    /// assert_eq!(h.words(), vec![7]);
    /// ```
    pub fn words(&self) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.length);
        let mut h = Some(self);
        while let Some(x) = h {
            if x.prev.is_some() {
                out.push(x.word);
            }
            h = x.prev.as_deref();
        }
        out.reverse();
        out
    }

    /// The attention rows from the sentence start to here.
    ///
    /// ```
    /// assert!(kiln_beam::Hypothesis::start(0, 1).attentions().is_empty());
    /// ```
    pub fn attentions(&self) -> Vec<Vec<f32>> {
        let mut out = Vec::new();
        let mut h = Some(self);
        while let Some(x) = h {
            if let Some(a) = &x.attention {
                out.push(a.clone());
            }
            h = x.prev.as_deref();
        }
        out.reverse();
        out
    }

    /// The alignment of this hypothesis' words (a final `eos` excluded) to a source of
    /// `src_len` positions, from the attention rows it carries (empty without attention).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_beam::{AlignmentKind, Hypothesis};
    /// let s = Arc::new(Hypothesis::start(0, 1));
    /// let h = Hypothesis { word: 7, length: 1, prev: Some(s), attention: Some(vec![0.3, 0.7]),
    ///     ..Hypothesis::start(0, 1) };
    /// assert_eq!(h.alignment(AlignmentKind::Hard, 2, 1), "1-0");
    /// ```
    pub fn alignment(&self, kind: AlignmentKind, src_len: usize, eos: usize) -> String {
        let words = self.words();
        let n = words.len() - usize::from(words.last() == Some(&eos));
        alignment_string(&self.attentions(), n, src_len, kind)
    }
}

/// The live hypotheses of one sentence, best first (row `j` of the sentence's beam is
/// `beam[j]`).
pub type Beam = Vec<Arc<Hypothesis>>;

/// Which alignment to print (`--alignment hard|soft`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlignmentKind {
    /// `s-t` pairs: each target word `t` with the source position `s` it attends to most.
    Hard,
    /// Each target word's attention over the source positions, comma-separated; target words
    /// separated by spaces (Marian's soft-alignment format).
    Soft,
}

/// Formats the attention rows of the first `words` target words as an alignment: hard
/// (`0-0 1-2 …`, source position first, ties to the lower position) or soft (`0.91,0.09 …`,
/// three decimals). Rows longer than the source are cut to `src_len` positions.
///
/// ```
/// use kiln_beam::{alignment_string, AlignmentKind};
/// let rows = vec![vec![0.9f32, 0.1], vec![0.2, 0.8], vec![0.5, 0.5]];
/// assert_eq!(alignment_string(&rows, 2, 2, AlignmentKind::Hard), "0-0 1-1");
/// assert_eq!(alignment_string(&rows, 2, 2, AlignmentKind::Soft), "0.900,0.100 0.200,0.800");
/// ```
pub fn alignment_string(
    rows: &[Vec<f32>],
    words: usize,
    src_len: usize,
    kind: AlignmentKind,
) -> String {
    let rows = rows.iter().take(words).map(|r| &r[..src_len.min(r.len())]);
    let parts: Vec<String> = match kind {
        AlignmentKind::Hard => rows
            .enumerate()
            .filter(|(_, r)| !r.is_empty())
            .map(|(t, r)| {
                let s = (0..r.len()).fold(0, |best, j| if r[j] > r[best] { j } else { best });
                format!("{s}-{t}")
            })
            .collect(),
        AlignmentKind::Soft => rows
            .map(|r| {
                r.iter()
                    .map(|a| format!("{a:.3}"))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect(),
    };
    parts.join(" ")
}

/// A finished hypothesis with its normalised score.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The score used for ranking (normalised).
    pub score: f64,
    /// The hypothesis (its last word is EOS unless it was forced to finish at the length limit).
    pub hyp: Arc<Hypothesis>,
}

/// The finished hypotheses of one sentence, best first.
#[derive(Debug, Clone, Default)]
pub struct History {
    finished: Vec<Finished>,
}

impl History {
    /// Adds a finished hypothesis.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let mut h = kiln_beam::History::default();
    /// h.add(Arc::new(kiln_beam::Hypothesis::start(0, 1)), -1.0);
    /// assert_eq!(h.len(), 1);
    /// ```
    pub fn add(&mut self, hyp: Arc<Hypothesis>, score: f64) {
        // keep sorted, best first; equal scores keep insertion order
        let pos = self.finished.partition_point(|f| f.score >= score);
        self.finished.insert(pos, Finished { score, hyp });
    }

    /// The best finished hypothesis.
    ///
    /// ```
    /// assert!(kiln_beam::History::default().best().is_none());
    /// ```
    pub fn best(&self) -> Option<&Finished> {
        self.finished.first()
    }

    /// The `n` best, best first.
    ///
    /// ```
    /// assert!(kiln_beam::History::default().nbest(3).is_empty());
    /// ```
    pub fn nbest(&self, n: usize) -> &[Finished] {
        &self.finished[..n.min(self.finished.len())]
    }

    /// Number of finished hypotheses.
    ///
    /// ```
    /// assert_eq!(kiln_beam::History::default().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.finished.len()
    }

    /// True if nothing finished.
    ///
    /// ```
    /// assert!(kiln_beam::History::default().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.finished.is_empty()
    }
}

/// The histories of a decoded batch, one per sentence in input order. Derefs to the
/// `Vec<History>`.
///
/// ```
/// let h = kiln_beam::Histories::new(2);
/// assert_eq!(h.len(), 2);
/// assert_eq!(h.best_words(1), vec![Vec::<usize>::new(), vec![]]);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Histories {
    histories: Vec<History>,
}

impl Histories {
    /// `n` empty histories.
    pub fn new(n: usize) -> Histories {
        Histories {
            histories: vec![History::default(); n],
        }
    }

    /// Each sentence's best words without a final `eos` (empty where nothing finished).
    pub fn best_words(&self, eos: usize) -> Vec<Vec<usize>> {
        self.histories
            .iter()
            .map(|h| {
                h.best().map_or_else(Vec::new, |b| {
                    let mut w = b.hyp.words();
                    if w.last() == Some(&eos) {
                        w.pop();
                    }
                    w
                })
            })
            .collect()
    }

    /// The histories as a vector.
    ///
    /// ```
    /// assert_eq!(kiln_beam::Histories::new(3).into_vec().len(), 3);
    /// ```
    pub fn into_vec(self) -> Vec<History> {
        self.histories
    }
}

impl From<Vec<History>> for Histories {
    fn from(histories: Vec<History>) -> Histories {
        Histories { histories }
    }
}

impl std::ops::Deref for Histories {
    type Target = Vec<History>;
    fn deref(&self) -> &Vec<History> {
        &self.histories
    }
}

impl std::ops::DerefMut for Histories {
    fn deref_mut(&mut self) -> &mut Vec<History> {
        &mut self.histories
    }
}

impl IntoIterator for Histories {
    type Item = History;
    type IntoIter = std::vec::IntoIter<History>;
    fn into_iter(self) -> Self::IntoIter {
        self.histories.into_iter()
    }
}

impl<'a> IntoIterator for &'a Histories {
    type Item = &'a History;
    type IntoIter = std::slice::Iter<'a, History>;
    fn into_iter(self) -> Self::IntoIter {
        self.histories.iter()
    }
}
