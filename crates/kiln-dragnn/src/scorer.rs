//! Scoring tagged and parsed sentences against gold ones: [`score`] and [`score_grouped`] count correct words into [`Counts`], [`Score`] and [`Report`].
//!
//! The conventions are those of the CoNLL 2018 shared task with **gold tokenization**.
//! Gold and system have the same words, compared position by position; a sentence whose word count differs, or a word whose FORM differs, is an error ([`ScoreError`]), not a score.
//! The metrics are UPOS and XPOS accuracy, UAS (the head is right), LA (the label is right) and LAS (both are right).
//! A label is the whole DEPREL string, subtype included: `nmod:poss` and `nmod` differ.
//! (The official `conll18_ud_eval.py` compares only the part before the `:`; strip subtypes from both sides before scoring to get its numbers.)
//! A system HEAD of `_` is a wrong head, not an error; a word whose gold HEAD is `_` has no right head, so it counts as wrong too.
//!
//! Every metric is counted twice: over all words, punctuation included (the shared task's numbers), and without punctuation.
//! A word is punctuation when its **gold** UPOS is `PUNCT`, whatever the system tagged it.
//!
//! Whole-sentence exact match is counted too: a sentence is complete when all its counted words have the right head (and label), so a sentence without counted words is complete.
//!
//! Percentages are `f64` from 0 to 100, and NaN when nothing was counted (no words, or no sentences), which is honest: 0 of 0 is neither 0 % nor 100 %.
//!
//! All result types derive `serde::Serialize` (counts only, not percentages), so that a command-line tool can print them as JSON lines.
//!
//! ```
//! use kiln_dragnn::document::read_conllu;
//! use kiln_dragnn::scorer::score;
//! let gold = read_conllu("1\tEv\tev\tNOUN\tNN\t_\t2\tnsubj\t_\t_\n\
//!                         2\tgüzel\tgüzel\tADJ\tJJ\t_\t0\troot\t_\t_\n\
//!                         3\t.\t.\tPUNCT\t.\t_\t2\tpunct\t_\t_\n")?;
//! let mut system = gold.clone();
//! system[0].set_head(2, Some(0))?; // the full stop now hangs from `Ev`
//! let s = score(&gold, &system)?;
//! assert_eq!((s.all.words, s.all.heads), (3, 2));
//! assert_eq!((s.no_punct.words, s.no_punct.heads), (2, 2));
//! assert_eq!(s.no_punct.uas_pct(), 100.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Depends on [`crate::document`].

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Add, AddAssign};

use serde::Serialize;

use crate::document::{Column, Sentence};

/// The gold UPOS that makes a word punctuation.
const PUNCT: &str = "PUNCT";

/// Errors of scoring: the inputs do not line up, so no score is meaningful.
///
/// Sentence and word indices count from 0; a word's CoNLL-U ID is its index plus 1.
///
/// ```
/// use kiln_dragnn::document::read_conllu;
/// use kiln_dragnn::scorer::{score, ScoreError};
/// let gold = read_conllu("# sent_id = s1\n1\tev\t_\tNOUN\t_\t_\t0\troot\t_\t_\n")?;
/// let system = read_conllu("# sent_id = s1\n1\tevi\t_\tNOUN\t_\t_\t0\troot\t_\t_\n")?;
/// let err = score(&gold, &system).unwrap_err();
/// assert!(matches!(err, ScoreError::Form { sentence: 0, word: 0, .. }));
/// assert_eq!(
///     err.to_string(),
///     "sentence 0 (sent_id = s1), word 0 (ID 1): gold FORM `ev`, system FORM `evi` \
///      (scoring needs gold tokenization)"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScoreError {
    /// Gold and system hold different numbers of sentences.
    #[error("gold has {gold} sentences, system has {system}")]
    SentenceCount {
        /// The number of gold sentences.
        gold: usize,
        /// The number of system sentences.
        system: usize,
    },
    /// A sentence whose gold and system word counts differ.
    #[error(
        "sentence {sentence}{}: gold has {gold} words, system has {system} \
         (scoring needs gold tokenization)",
        describe_id(.sent_id)
    )]
    WordCount {
        /// The sentence's index (from 0).
        sentence: usize,
        /// The sentence's `# sent_id` (the gold one's, else the system one's), if it has one.
        sent_id: Option<String>,
        /// The gold sentence's number of words.
        gold: usize,
        /// The system sentence's number of words.
        system: usize,
    },
    /// A word whose gold and system FORMs differ.
    #[error(
        "sentence {sentence}{}, word {word} (ID {}): gold FORM `{gold}`, system FORM `{system}` \
         (scoring needs gold tokenization)",
        describe_id(.sent_id),
        .word + 1
    )]
    Form {
        /// The sentence's index (from 0).
        sentence: usize,
        /// The sentence's `# sent_id` (the gold one's, else the system one's), if it has one.
        sent_id: Option<String>,
        /// The word's index in its sentence (from 0).
        word: usize,
        /// The gold FORM.
        gold: String,
        /// The system FORM.
        system: String,
    },
    /// A group list whose length is not the number of sentences.
    #[error("{groups} group names for {sentences} sentences (give one per sentence)")]
    GroupCount {
        /// The number of group names given.
        groups: usize,
        /// The number of sentences.
        sentences: usize,
    },
}

/// ` (sent_id = X)`, or nothing without an ID.
fn describe_id(sent_id: &Option<String>) -> String {
    match sent_id {
        Some(id) => format!(" (sent_id = {id})"),
        None => String::new(),
    }
}

/// `100 * n / d`, NaN when `d` is 0.
fn pct(n: usize, d: usize) -> f64 {
    if d == 0 {
        f64::NAN
    } else {
        100.0 * n as f64 / d as f64
    }
}

/// Correct-word counts of one set of words (all words, or the words that are not punctuation).
///
/// Each field but `words` and `sentences` counts the words (or sentences) that are right in one respect.
/// The `*_pct` methods give percentages, NaN when nothing was counted.
///
/// ```
/// use kiln_dragnn::scorer::Counts;
/// let c = Counts { words: 4, upos: 4, xpos: 3, heads: 3, labels: 3, labeled: 2, ..Counts::default() };
/// assert_eq!((c.upos_pct(), c.xpos_pct(), c.uas_pct(), c.las_pct()), (100.0, 75.0, 75.0, 50.0));
/// assert!(Counts::default().uas_pct().is_nan());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Counts {
    /// The number of words counted.
    pub words: usize,
    /// Words whose UPOS is right.
    pub upos: usize,
    /// Words whose XPOS is right.
    pub xpos: usize,
    /// Words whose head is right (UAS).
    pub heads: usize,
    /// Words whose DEPREL is right, whatever their head (LA).
    pub labels: usize,
    /// Words whose head and DEPREL are both right (LAS).
    pub labeled: usize,
    /// The number of sentences counted.
    pub sentences: usize,
    /// Sentences whose counted words all have the right head.
    pub complete_heads: usize,
    /// Sentences whose counted words all have the right head and DEPREL.
    pub complete_labeled: usize,
}

impl Counts {
    /// UPOS accuracy in percent (NaN without words).
    ///
    /// ```
    /// use kiln_dragnn::scorer::Counts;
    /// assert_eq!(Counts { words: 8, upos: 6, ..Counts::default() }.upos_pct(), 75.0);
    /// ```
    pub fn upos_pct(&self) -> f64 {
        pct(self.upos, self.words)
    }

    /// XPOS accuracy in percent (NaN without words).
    ///
    /// ```
    /// use kiln_dragnn::scorer::Counts;
    /// assert_eq!(Counts { words: 8, xpos: 2, ..Counts::default() }.xpos_pct(), 25.0);
    /// ```
    pub fn xpos_pct(&self) -> f64 {
        pct(self.xpos, self.words)
    }

    /// Unlabeled attachment score in percent: words with the right head (NaN without words).
    ///
    /// ```
    /// use kiln_dragnn::scorer::Counts;
    /// assert_eq!(Counts { words: 4, heads: 1, ..Counts::default() }.uas_pct(), 25.0);
    /// ```
    pub fn uas_pct(&self) -> f64 {
        pct(self.heads, self.words)
    }

    /// Labeled attachment score in percent: words with the right head and DEPREL (NaN without words).
    ///
    /// ```
    /// use kiln_dragnn::scorer::Counts;
    /// assert_eq!(Counts { words: 4, labeled: 3, ..Counts::default() }.las_pct(), 75.0);
    /// ```
    pub fn las_pct(&self) -> f64 {
        pct(self.labeled, self.words)
    }

    /// Label accuracy in percent: words with the right DEPREL, whatever their head (NaN without words).
    ///
    /// ```
    /// use kiln_dragnn::scorer::Counts;
    /// assert_eq!(Counts { words: 2, labels: 1, ..Counts::default() }.la_pct(), 50.0);
    /// ```
    pub fn la_pct(&self) -> f64 {
        pct(self.labels, self.words)
    }

    /// Unlabeled exact match in percent: sentences with every head right (NaN without sentences).
    ///
    /// ```
    /// use kiln_dragnn::scorer::Counts;
    /// let c = Counts { sentences: 4, complete_heads: 1, ..Counts::default() };
    /// assert_eq!(c.uas_exact_pct(), 25.0);
    /// ```
    pub fn uas_exact_pct(&self) -> f64 {
        pct(self.complete_heads, self.sentences)
    }

    /// Labeled exact match in percent: sentences with every head and DEPREL right (NaN without sentences).
    ///
    /// ```
    /// use kiln_dragnn::scorer::Counts;
    /// let c = Counts { sentences: 2, complete_labeled: 1, ..Counts::default() };
    /// assert_eq!(c.las_exact_pct(), 50.0);
    /// ```
    pub fn las_exact_pct(&self) -> f64 {
        pct(self.complete_labeled, self.sentences)
    }
}

impl AddAssign for Counts {
    /// Adds another set's counts field by field (to merge the scores of parts).
    ///
    /// ```
    /// use kiln_dragnn::scorer::Counts;
    /// let mut a = Counts { words: 2, heads: 1, ..Counts::default() };
    /// a += Counts { words: 3, heads: 3, ..Counts::default() };
    /// assert_eq!((a.words, a.heads), (5, 4));
    /// ```
    fn add_assign(&mut self, other: Counts) {
        self.words += other.words;
        self.upos += other.upos;
        self.xpos += other.xpos;
        self.heads += other.heads;
        self.labels += other.labels;
        self.labeled += other.labeled;
        self.sentences += other.sentences;
        self.complete_heads += other.complete_heads;
        self.complete_labeled += other.complete_labeled;
    }
}

impl Add for Counts {
    type Output = Counts;

    /// Adds two sets' counts field by field.
    ///
    /// ```
    /// use kiln_dragnn::scorer::Counts;
    /// let a = Counts { words: 2, upos: 2, ..Counts::default() };
    /// assert_eq!((a + a).upos, 4);
    /// ```
    fn add(mut self, other: Counts) -> Counts {
        self += other;
        self
    }
}

/// The counts of a set of sentences: over all words, and over the words that are not punctuation (gold UPOS `PUNCT`).
///
/// Its `Display` is one line with the main percentages.
///
/// ```
/// use kiln_dragnn::scorer::{Counts, Score};
/// let all = Counts { words: 12345, upos: 12000, xpos: 11000, heads: 10000, labels: 10500, labeled: 9000, ..Counts::default() };
/// let no_punct = Counts { words: 10000, upos: 9700, xpos: 8800, heads: 8000, labels: 8500, labeled: 7000, ..Counts::default() };
/// assert_eq!(
///     Score { all, no_punct }.to_string(),
///     "UPOS 97.21  XPOS 89.10  UAS 81.00  LAS 72.90  (12,345 words; without punctuation: UAS 80.00  LAS 70.00)"
/// );
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Score {
    /// Every word, punctuation included (the CoNLL 2018 numbers).
    pub all: Counts,
    /// The words whose gold UPOS is not `PUNCT`.
    pub no_punct: Counts,
}

impl AddAssign for Score {
    /// Adds another score's counts (to merge the scores of parts).
    ///
    /// ```
    /// use kiln_dragnn::scorer::{Counts, Score};
    /// let one = Counts { words: 1, ..Counts::default() };
    /// let mut s = Score { all: one, no_punct: one };
    /// s += Score { all: one, no_punct: Counts::default() };
    /// assert_eq!((s.all.words, s.no_punct.words), (2, 1));
    /// ```
    fn add_assign(&mut self, other: Score) {
        self.all += other.all;
        self.no_punct += other.no_punct;
    }
}

impl Add for Score {
    type Output = Score;

    /// Adds two scores' counts.
    ///
    /// ```
    /// use kiln_dragnn::scorer::{Counts, Score};
    /// let one = Counts { words: 1, ..Counts::default() };
    /// let s = Score { all: one, no_punct: one };
    /// assert_eq!((s + s).all.words, 2);
    /// ```
    fn add(mut self, other: Score) -> Score {
        self += other;
        self
    }
}

/// Writes `n` with a comma between groups of three digits (`12,345`).
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl fmt::Display for Score {
    /// One line: `UPOS 95.12  XPOS 93.40  UAS 87.01  LAS 80.33  (12,345 words; without punctuation: UAS 88.00  LAS 81.50)`.
    ///
    /// ```
    /// use kiln_dragnn::scorer::Score;
    /// assert_eq!(
    ///     Score::default().to_string(),
    ///     "UPOS NaN  XPOS NaN  UAS NaN  LAS NaN  (0 words; without punctuation: UAS NaN  LAS NaN)"
    /// );
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, p) = (&self.all, &self.no_punct);
        write!(
            f,
            "UPOS {:.2}  XPOS {:.2}  UAS {:.2}  LAS {:.2}  ({} words; without punctuation: UAS {:.2}  LAS {:.2})",
            a.upos_pct(),
            a.xpos_pct(),
            a.uas_pct(),
            a.las_pct(),
            thousands(a.words),
            p.uas_pct(),
            p.las_pct()
        )
    }
}

/// The score of all sentences and of each group of them (e.g. each genre or source file).
///
/// `total` is the sum of the groups' scores.
/// Its `Display` writes `all: <score>` and then `<group>: <score>` for each group in name order, one per line.
///
/// ```
/// use kiln_dragnn::document::read_conllu;
/// use kiln_dragnn::scorer::score_grouped;
/// let gold = read_conllu("1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n\n1\tb\t_\tX\t_\t_\t0\troot\t_\t_\n")?;
/// let report = score_grouped(&gold, &gold, &["web", "wiki"])?;
/// assert_eq!(report.total.all.words, 2);
/// assert_eq!(report.groups["wiki"].all.words, 1);
/// assert_eq!(report.to_string().lines().count(), 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The score of every sentence.
    pub total: Score,
    /// The score of each group's sentences, by group name.
    pub groups: BTreeMap<String, Score>,
}

impl fmt::Display for Report {
    /// `all: <score>`, then `<group>: <score>` per group, one per line (no final line break).
    ///
    /// ```
    /// use kiln_dragnn::scorer::Report;
    /// assert!(Report::default().to_string().starts_with("all: UPOS NaN"));
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "all: {}", self.total)?;
        for (name, score) in &self.groups {
            write!(f, "\n{name}: {score}")?;
        }
        Ok(())
    }
}

/// Checks that gold and system hold the same number of sentences.
fn check_sentence_count(gold: &[Sentence], system: &[Sentence]) -> Result<(), ScoreError> {
    if gold.len() != system.len() {
        return Err(ScoreError::SentenceCount {
            gold: gold.len(),
            system: system.len(),
        });
    }
    Ok(())
}

/// What is right about one system word.
struct Word {
    upos: bool,
    xpos: bool,
    head: bool,
    label: bool,
}

impl Word {
    /// Adds the word to `counts`, and clears the sentence's `(complete_heads, complete_labeled)` flags where it is wrong.
    fn count(&self, counts: &mut Counts, complete: &mut (bool, bool)) {
        counts.words += 1;
        counts.upos += usize::from(self.upos);
        counts.xpos += usize::from(self.xpos);
        counts.heads += usize::from(self.head);
        counts.labels += usize::from(self.label);
        counts.labeled += usize::from(self.head && self.label);
        complete.0 &= self.head;
        complete.1 &= self.head && self.label;
    }
}

/// Scores one sentence pair; `index` (from 0) names it in errors.
fn score_sentence(index: usize, gold: &Sentence, system: &Sentence) -> Result<Score, ScoreError> {
    let sent_id = || gold.sent_id().or(system.sent_id()).map(str::to_string);
    if gold.len() != system.len() {
        return Err(ScoreError::WordCount {
            sentence: index,
            sent_id: sent_id(),
            gold: gold.len(),
            system: system.len(),
        });
    }
    let mut score = Score::default();
    // whether every counted word so far has the right head, and the right head and label
    let mut complete = [(true, true); 2];
    for (w, (g, s)) in gold.words().zip(system.words()).enumerate() {
        let (g_form, s_form) = (g.field(Column::Form), s.field(Column::Form));
        if g_form != s_form {
            return Err(ScoreError::Form {
                sentence: index,
                sent_id: sent_id(),
                word: w,
                gold: g_form.to_string(),
                system: s_form.to_string(),
            });
        }
        let gold_head = gold.head(w);
        let word = Word {
            upos: g.field(Column::Upos) == s.field(Column::Upos),
            xpos: g.field(Column::Xpos) == s.field(Column::Xpos),
            head: gold_head.is_some() && gold_head == system.head(w),
            label: g.field(Column::Deprel) == s.field(Column::Deprel),
        };
        word.count(&mut score.all, &mut complete[0]);
        if g.field(Column::Upos) != PUNCT {
            word.count(&mut score.no_punct, &mut complete[1]);
        }
    }
    for (counts, (complete_heads, complete_labeled)) in [&mut score.all, &mut score.no_punct]
        .into_iter()
        .zip(complete)
    {
        counts.sentences = 1;
        counts.complete_heads = usize::from(complete_heads);
        counts.complete_labeled = usize::from(complete_labeled);
    }
    Ok(score)
}

/// Scores system sentences against gold ones, position by position (see the module doc for the conventions).
///
/// Errors when the numbers of sentences differ, or when a sentence's words differ in number or FORM.
///
/// ```
/// use kiln_dragnn::document::read_conllu;
/// use kiln_dragnn::scorer::{score, ScoreError};
/// let gold = read_conllu("1\ta\t_\tNOUN\tNN\t_\t0\troot\t_\t_\n\
///                         2\tb\t_\tVERB\tVB\t_\t1\tacl:relcl\t_\t_\n")?;
/// let mut system = gold.clone();
/// system[0].set_deprel(1, "acl")?; // right head, label wrong in its subtype only
/// system[0].set_upos(1, "NOUN")?;
/// let s = score(&gold, &system)?;
/// assert_eq!((s.all.upos_pct(), s.all.uas_pct(), s.all.las_pct()), (50.0, 100.0, 50.0));
/// assert_eq!((s.all.complete_heads, s.all.complete_labeled), (1, 0));
/// assert!(matches!(score(&gold, &[]), Err(ScoreError::SentenceCount { gold: 1, system: 0 })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn score(gold: &[Sentence], system: &[Sentence]) -> Result<Score, ScoreError> {
    check_sentence_count(gold, system)?;
    let mut total = Score::default();
    for (i, (g, s)) in gold.iter().zip(system).enumerate() {
        total += score_sentence(i, g, s)?;
    }
    Ok(total)
}

/// Scores like [`score`], and also each group's sentences: `groups[i]` names sentence `i`'s group (e.g. its source file's genre).
///
/// Errors as [`score`] does, and when `groups` does not hold one name per gold sentence.
///
/// ```
/// use kiln_dragnn::document::read_conllu;
/// use kiln_dragnn::scorer::{score_grouped, ScoreError};
/// let row = "1\tx\t_\tX\t_\t_\t0\troot\t_\t_\n\n";
/// let gold = read_conllu(&row.repeat(3))?;
/// let mut system = gold.clone();
/// system[2].set_head(0, None)?; // a missing head is wrong, not an error
/// let report = score_grouped(&gold, &system, &["web", "wiki", "wiki"])?;
/// assert_eq!((report.total.all.words, report.total.all.heads), (3, 2));
/// assert_eq!(report.groups["web"].all.uas_pct(), 100.0);
/// assert_eq!(report.groups["wiki"].all.uas_pct(), 50.0);
/// let err = score_grouped(&gold, &system, &["web"]).unwrap_err();
/// assert!(matches!(err, ScoreError::GroupCount { groups: 1, sentences: 3 }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn score_grouped<S: AsRef<str>>(
    gold: &[Sentence],
    system: &[Sentence],
    groups: &[S],
) -> Result<Report, ScoreError> {
    check_sentence_count(gold, system)?;
    if groups.len() != gold.len() {
        return Err(ScoreError::GroupCount {
            groups: groups.len(),
            sentences: gold.len(),
        });
    }
    let mut report = Report::default();
    for (i, ((g, s), group)) in gold.iter().zip(system).zip(groups).enumerate() {
        let sentence = score_sentence(i, g, s)?;
        report.total += sentence;
        *report.groups.entry(group.as_ref().to_string()).or_default() += sentence;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::thousands;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(12345), "12,345");
        assert_eq!(thousands(1234567), "1,234,567");
    }
}
