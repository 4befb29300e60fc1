//! Term frequency maps: the word, tag, label and character vocabularies that features and
//! transition systems index, built from training sentences as SyntaxNet's lexicon builder
//! builds them, and saved in its term-frequency-map text format.
//!
//! A [`TermMap`] gives each term an id by **descending frequency, then lexicographic
//! (byte) order**, so the most frequent term is 0. A term not in the map gets
//! [`TermMap::unknown_id`] `== len()`, the one extra value SyntaxNet's term features have
//! (`NumValues() == Size() + 1`); [`TermMap::vocabulary_size`] `== len() + 1` counts it, and
//! is what a fixed feature channel's `vocabulary_size` holds for a plain term feature.
//!
//! The text format (`save`/`load`) is SyntaxNet's: a first line with the number of terms,
//! then one `term count` line per term in id order. Loading checks the format (the count,
//! positive counts in descending order, no duplicate or empty term) and applies the same
//! `min_frequency` and `max_terms` cut as building. A term may hold spaces (the count is
//! after the last one) but no line break.
//!
//! [`TermMaps`] bundles the four maps of a parser: words (FORM), tags (UPOS by default,
//! see [`TagColumn`]: the Turkish treebank's UPOS is the Google-style universal tag set the
//! tagger predicts; XPOS is its finer tag set), labels (DEPREL) and characters (every
//! character of every FORM).
//!
//! Depends on [`crate::document`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::document::{Column, Sentence};

/// Errors of building, saving and loading term maps.
///
/// ```
/// use kiln_dragnn::term_map::{TermMap, TermMapError};
/// let err = TermMap::from_text("2\na 3\n", 0, 0).unwrap_err();
/// assert!(matches!(err, TermMapError::Format { line: 3, .. }));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TermMapError {
    /// A term-map text that does not follow the format.
    #[error("line {line}: {message}")]
    Format {
        /// The line, from 1.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A term that the text format cannot hold.
    #[error("term `{term}` cannot be saved: {reason}")]
    BadTerm {
        /// The term (escaped).
        term: String,
        /// Why.
        reason: &'static str,
    },
    /// A file that cannot be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// An error in a file (wraps the error of its text with the file's path).
    #[error("{}: {source}", path.display())]
    InFile {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: Box<TermMapError>,
    },
}

/// Counts terms; [`TermCounter::into_map`] turns the counts into a [`TermMap`].
///
/// ```
/// use kiln_dragnn::term_map::TermCounter;
/// let mut c = TermCounter::new();
/// for w in ["b", "a", "b", "c", "a", "b"] {
///     c.add(w);
/// }
/// let map = c.into_map(0, 0);
/// assert_eq!(map.terms().collect::<Vec<_>>(), ["b", "a", "c"]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct TermCounter {
    counts: HashMap<String, u64>,
}

impl TermCounter {
    /// An empty counter.
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermCounter;
    /// assert!(TermCounter::new().into_map(0, 0).is_empty());
    /// ```
    pub fn new() -> TermCounter {
        TermCounter::default()
    }

    /// Counts one occurrence of `term`.
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermCounter;
    /// let mut c = TermCounter::new();
    /// c.add("x");
    /// c.add("x");
    /// assert_eq!(c.into_map(0, 0).frequency(0), Some(2));
    /// ```
    pub fn add(&mut self, term: &str) {
        self.add_n(term, 1);
    }

    /// Counts `n` occurrences of `term`.
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermCounter;
    /// let mut c = TermCounter::new();
    /// c.add_n("x", 5);
    /// assert_eq!(c.into_map(0, 0).frequency(0), Some(5));
    /// ```
    pub fn add_n(&mut self, term: &str, n: u64) {
        if n == 0 {
            return;
        }
        match self.counts.get_mut(term) {
            Some(c) => *c += n,
            None => {
                self.counts.insert(term.to_string(), n);
            }
        }
    }

    /// The map of the counted terms: ids by descending count then lexicographic order,
    /// keeping only terms counted at least `min_frequency` times and at most the first
    /// `max_terms` of them (0: no limit), as SyntaxNet's `TermFrequencyMap::Load` cuts.
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermCounter;
    /// let mut c = TermCounter::new();
    /// c.add_n("rare", 1);
    /// c.add_n("often", 9);
    /// c.add_n("sometimes", 3);
    /// assert_eq!(c.clone().into_map(2, 0).terms().collect::<Vec<_>>(), ["often", "sometimes"]);
    /// assert_eq!(c.into_map(0, 1).terms().collect::<Vec<_>>(), ["often"]);
    /// ```
    pub fn into_map(self, min_frequency: u64, max_terms: usize) -> TermMap {
        let mut terms: Vec<(String, u64)> = self.counts.into_iter().collect();
        terms.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        TermMap::from_sorted(terms, min_frequency, max_terms)
    }
}

/// A vocabulary: terms with their training counts, ids by descending count then
/// lexicographic order, and the unknown id `len()` for every other term.
///
/// ```
/// use kiln_dragnn::term_map::TermMap;
/// let map = TermMap::from_text("3\nthe 10\na 4\ncat 4\n", 0, 0).unwrap();
/// assert_eq!((map.id("the"), map.id("a"), map.id("cat"), map.id("dog")), (0, 1, 2, 3));
/// assert_eq!(map.unknown_id(), 3);
/// assert_eq!(map.vocabulary_size(), 4);
/// assert_eq!(map.term(2), Some("cat"));
/// assert_eq!(map.to_text().unwrap(), "3\nthe 10\na 4\ncat 4\n");
/// ```
#[derive(Clone, Default)]
pub struct TermMap {
    // Shared: a map is built once and then only read, and every session's feature channels
    // hold it (a clone copies three pointers, not the vocabulary).
    terms: Arc<Vec<(String, u64)>>,
    // Fx hashing: features look terms up for every token at every step, and SipHash's
    // protection against chosen keys buys nothing for a vocabulary read from a file.
    index: Arc<HashMap<String, usize, rustc_hash::FxBuildHasher>>,
    // The affix maps derived from the terms so far, built once and shared by every clone
    // (each session's channels ask for them: [`TermMap::affixes`]).
    affixes: Arc<Mutex<Vec<AffixKey>>>,
    // The character n-gram tables derived so far, shared the same way.
    ngrams: Arc<Mutex<Vec<NgramKey>>>,
}

/// An n-gram table of [`TermMap::char_ngrams`] and the options it was cut with.
type NgramKey = (NgramOptions, Arc<NgramTable>);

/// An affix map of [`TermMap::affixes`]: its length, whether prefixes, the map.
type AffixKey = (u32, bool, Arc<AffixMap>);

/// Two maps are equal when they hold the same terms with the same counts.
impl PartialEq for TermMap {
    fn eq(&self, other: &TermMap) -> bool {
        self.terms == other.terms
    }
}

impl Eq for TermMap {}

impl std::fmt::Debug for TermMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TermMap")
            .field("terms", &self.terms)
            .finish()
    }
}

/// The affixes of one kind and length of a map's terms (SyntaxNet's affix tables), or their
/// character n-grams ([`TermMap::char_ngrams`]): each string's id is the order in which the
/// terms, in id order, first give it.
///
/// ```
/// use kiln_dragnn::term_map::{AffixMap, TermMap};
/// let words = TermMap::from_text("3\nkitap 3\nkalem 2\nev 1\n", 0, 0).unwrap();
/// let suffixes = words.affixes(2, false);
/// assert_eq!((suffixes.id("ap"), suffixes.id("em"), suffixes.id("ev")), (Some(0), Some(1), Some(2)));
/// assert_eq!(suffixes.len(), 3);
/// assert_eq!(AffixMap::affix("kitap", 3, true), Some("kit"));
/// assert_eq!(AffixMap::affix("ev", 3, false), None); // shorter than the affix
/// ```
#[derive(Debug, Default)]
pub struct AffixMap {
    ids: HashMap<String, usize, rustc_hash::FxBuildHasher>,
}

impl AffixMap {
    /// The prefix (`prefix`) or suffix of `word` of `length` characters; `None` when the
    /// word is shorter.
    ///
    /// ```
    /// use kiln_dragnn::term_map::AffixMap;
    /// assert_eq!(AffixMap::affix("ağaç", 2, false), Some("aç"));
    /// assert_eq!(AffixMap::affix("ağaç", 4, true), Some("ağaç"));
    /// ```
    pub fn affix(word: &str, length: u32, prefix: bool) -> Option<&str> {
        let length = length as usize;
        if prefix {
            match word.char_indices().nth(length) {
                Some((end, _)) => Some(&word[..end]),
                None if word.chars().count() == length => Some(word),
                None => None,
            }
        } else {
            let count = word.chars().count();
            if count < length {
                return None;
            }
            let start = word
                .char_indices()
                .nth(count - length)
                .map_or(word.len(), |(i, _)| i);
            Some(&word[start..])
        }
    }

    fn build(words: &TermMap, length: u32, prefix: bool) -> AffixMap {
        let mut ids: HashMap<String, usize, rustc_hash::FxBuildHasher> = HashMap::default();
        for word in words.terms() {
            if let Some(a) = Self::affix(word, length, prefix) {
                if !ids.contains_key(a) {
                    let next = ids.len();
                    ids.insert(a.to_owned(), next);
                }
            }
        }
        AffixMap { ids }
    }

    /// The id of `affix`, `None` for an affix no term has.
    ///
    /// ```
    /// let words = kiln_dragnn::term_map::TermMap::from_text("1\nab 1\n", 0, 0).unwrap();
    /// assert_eq!((words.affixes(1, true).id("a"), words.affixes(1, true).id("b")), (Some(0), None));
    /// ```
    pub fn id(&self, affix: &str) -> Option<usize> {
        self.ids.get(affix).copied()
    }

    /// The number of affixes.
    ///
    /// ```
    /// let words = kiln_dragnn::term_map::TermMap::from_text("2\nab 2\ncb 1\n", 0, 0).unwrap();
    /// assert_eq!(words.affixes(1, false).len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether no term is long enough to have an affix of this length.
    ///
    /// ```
    /// assert!(kiln_dragnn::term_map::TermMap::default().affixes(2, true).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// How `char-ngram` cuts a word into character n-grams: SyntaxNet's `CharNgram` parameters
/// `max_char_ngram_length` (default 3), `use_terminators` (default false: `^` and `$` added
/// as characters before and after the word) and `mark_boundaries` (default false: an
/// n-gram starting the word is prefixed with `^ `, one ending it suffixed with ` $`).
///
/// ```
/// use kiln_dragnn::term_map::NgramOptions;
/// let o = NgramOptions::default();
/// assert_eq!((o.max_length, o.terminators, o.mark_boundaries), (3, false, false));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NgramOptions {
    /// The longest n-gram, in characters (at least 1).
    pub max_length: u32,
    /// Whether `^` and `$` stand before and after the word as characters of their own.
    pub terminators: bool,
    /// Whether n-grams at the word's start and end are marked `^ ` and ` $`.
    pub mark_boundaries: bool,
}

impl Default for NgramOptions {
    fn default() -> NgramOptions {
        NgramOptions {
            max_length: 3,
            terminators: false,
            mark_boundaries: false,
        }
    }
}

/// Calls `f` with each character n-gram of `word` (SyntaxNet's `CharNgram` order: by start
/// position, then by length from 1 up to `options.max_length`; an n-gram never spans a
/// space). Repeated n-grams are given each time they occur.
///
/// ```
/// use kiln_dragnn::term_map::{char_ngrams, NgramOptions};
/// let mut got = Vec::new();
/// char_ngrams("eve", NgramOptions { max_length: 2, ..Default::default() }, |g| got.push(g.to_string()));
/// assert_eq!(got, ["e", "ev", "v", "ve", "e"]);
/// let mut got = Vec::new();
/// let o = NgramOptions { max_length: 2, terminators: true, mark_boundaries: false };
/// char_ngrams("ev", o, |g| got.push(g.to_string()));
/// assert_eq!(got, ["^", "^e", "e", "ev", "v", "v$", "$"]);
/// let mut got = Vec::new();
/// let o = NgramOptions { max_length: 2, terminators: false, mark_boundaries: true };
/// char_ngrams("ev", o, |g| got.push(g.to_string()));
/// assert_eq!(got, ["^ e", "^ ev $", "v $"]);
/// ```
pub fn char_ngrams(word: &str, options: NgramOptions, mut f: impl FnMut(&str)) {
    let mut chars: Vec<&str> = Vec::with_capacity(word.len() + 2);
    if options.terminators {
        chars.push("^");
    }
    chars.extend(word.char_indices().map(|(i, c)| &word[i..i + c.len_utf8()]));
    if options.terminators {
        chars.push("$");
    }
    let mut gram = String::new();
    for start in 0..chars.len() {
        gram.clear();
        if options.mark_boundaries && start == 0 {
            gram.push_str("^ ");
        }
        for (k, c) in chars[start..]
            .iter()
            .take(options.max_length as usize)
            .enumerate()
        {
            if *c == " " {
                break;
            }
            gram.push_str(c);
            if options.mark_boundaries && start + k + 1 == chars.len() {
                let end = gram.len();
                gram.push_str(" $");
                f(&gram);
                gram.truncate(end);
            } else {
                f(&gram);
            }
        }
    }
}

/// The character n-grams of a map's terms ([`TermMap::char_ngrams`]): the table of n-grams
/// and, per term, the ids of its n-grams in [`char_ngrams`] order, so that a known word's
/// features need no lookups.
///
/// ```
/// use kiln_dragnn::term_map::{NgramOptions, TermMap};
/// let words = TermMap::from_text("2\nev 2\nve 1\n", 0, 0).unwrap();
/// let t = words.char_ngrams(NgramOptions { max_length: 2, ..Default::default() });
/// assert_eq!(t.of_term(1), Some(&[2, 3, 0][..])); // ve: v ve e
/// assert_eq!(t.of_term(2), None);
/// ```
#[derive(Debug, Default)]
pub struct NgramTable {
    grams: AffixMap,
    offsets: Vec<usize>,
    ids: Vec<u32>,
}

impl NgramTable {
    /// The id of n-gram `gram`, `None` for one no term has.
    ///
    /// ```
    /// use kiln_dragnn::term_map::{NgramOptions, TermMap};
    /// let t = TermMap::from_text("1\nab 1\n", 0, 0).unwrap().char_ngrams(NgramOptions::default());
    /// assert_eq!((t.id("a"), t.id("ab"), t.id("b"), t.id("c")), (Some(0), Some(1), Some(2), None));
    /// ```
    pub fn id(&self, gram: &str) -> Option<usize> {
        self.grams.id(gram)
    }

    /// The number of n-grams.
    ///
    /// ```
    /// use kiln_dragnn::term_map::{NgramOptions, TermMap};
    /// assert_eq!(TermMap::from_text("1\nab 1\n", 0, 0).unwrap().char_ngrams(NgramOptions::default()).len(), 3);
    /// ```
    pub fn len(&self) -> usize {
        self.grams.len()
    }

    /// Whether the table has no n-gram.
    ///
    /// ```
    /// use kiln_dragnn::term_map::{NgramOptions, TermMap};
    /// assert!(TermMap::default().char_ngrams(NgramOptions::default()).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.grams.is_empty()
    }

    /// The ids of term `term`'s n-grams, `None` past the last term.
    ///
    /// ```
    /// use kiln_dragnn::term_map::{NgramOptions, TermMap};
    /// let t = TermMap::from_text("1\nab 1\n", 0, 0).unwrap().char_ngrams(NgramOptions::default());
    /// assert_eq!(t.of_term(0), Some(&[0, 1, 2][..]));
    /// ```
    pub fn of_term(&self, term: usize) -> Option<&[u32]> {
        let (&start, &end) = (self.offsets.get(term)?, self.offsets.get(term + 1)?);
        Some(&self.ids[start..end])
    }
}

impl TermMap {
    /// The character n-grams ([`char_ngrams`]) of the map's terms, as a table whose ids
    /// are the order in which the terms, in id order, first give each n-gram (SyntaxNet
    /// read a `char-ngram-map` resource built from the training words instead); built once
    /// per options and shared by every clone of the map.
    ///
    /// ```
    /// use kiln_dragnn::term_map::{NgramOptions, TermMap};
    /// let words = TermMap::from_text("2\nev 2\nve 1\n", 0, 0).unwrap();
    /// let grams = words.char_ngrams(NgramOptions { max_length: 2, ..Default::default() });
    /// assert_eq!((grams.id("e"), grams.id("ev"), grams.id("v"), grams.id("ve")), (Some(0), Some(1), Some(2), Some(3)));
    /// assert_eq!(grams.len(), 4);
    /// ```
    pub fn char_ngrams(&self, options: NgramOptions) -> Arc<NgramTable> {
        let mut memo = self.ngrams.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, t)) = memo.iter().find(|(o, _)| *o == options) {
            return t.clone();
        }
        let mut table = NgramTable {
            offsets: vec![0],
            ..NgramTable::default()
        };
        for word in self.terms() {
            char_ngrams(word, options, |g| {
                let next = table.grams.ids.len();
                let id = *table.grams.ids.entry(g.to_owned()).or_insert(next);
                table.ids.push(id as u32);
            });
            table.offsets.push(table.ids.len());
        }
        let table = Arc::new(table);
        memo.push((options, table.clone()));
        table
    }

    /// Builds the map from terms already in id order, applying the cut.
    fn from_sorted(terms: Vec<(String, u64)>, min_frequency: u64, max_terms: usize) -> TermMap {
        let limit = if max_terms == 0 {
            usize::MAX
        } else {
            max_terms
        };
        let terms: Vec<(String, u64)> = terms
            .into_iter()
            .take(limit)
            .filter(|(_, c)| *c >= min_frequency)
            .collect();
        let index = terms
            .iter()
            .enumerate()
            .map(|(i, (t, _))| (t.clone(), i))
            .collect();
        TermMap {
            terms: Arc::new(terms),
            index: Arc::new(index),
            affixes: Arc::default(),
            ngrams: Arc::default(),
        }
    }

    /// Whether `other` is this map or a clone of it (the same vocabulary object, not only
    /// equal terms): ids another holder of the map computed can then be reused.
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermMap;
    /// let a = TermMap::from_text("1\nx 1\n", 0, 0).unwrap();
    /// let b = TermMap::from_text("1\nx 1\n", 0, 0).unwrap();
    /// assert!(a.is_shared_with(&a.clone()));
    /// assert!(a == b && !a.is_shared_with(&b));
    /// ```
    pub fn is_shared_with(&self, other: &TermMap) -> bool {
        Arc::ptr_eq(&self.index, &other.index)
    }

    /// The map of the terms' affixes of `length` characters (prefixes when `prefix`), built
    /// the first time a clone of this map asks for it and shared after that.
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermMap;
    /// let words = TermMap::from_text("2\nkitap 2\nkitaplar 1\n", 0, 0).unwrap();
    /// let p = words.affixes(3, true);
    /// assert_eq!((p.len(), p.id("kit")), (1, Some(0)));
    /// assert!(std::sync::Arc::ptr_eq(&p, &words.clone().affixes(3, true)));
    /// ```
    pub fn affixes(&self, length: u32, prefix: bool) -> Arc<AffixMap> {
        let mut memo = self.affixes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, m)) = memo.iter().find(|(l, p, _)| *l == length && *p == prefix) {
            return m.clone();
        }
        let map = Arc::new(AffixMap::build(self, length, prefix));
        memo.push((length, prefix, map.clone()));
        map
    }

    /// The number of terms.
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermMap;
    /// assert_eq!(TermMap::from_text("1\nx 1\n", 0, 0).unwrap().len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.terms.len()
    }

    /// Whether the map has no term.
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermMap;
    /// assert!(TermMap::default().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The id of `term`, or `None` when it is not in the map.
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermMap;
    /// let map = TermMap::from_text("1\nx 1\n", 0, 0).unwrap();
    /// assert_eq!((map.lookup("x"), map.lookup("y")), (Some(0), None));
    /// ```
    pub fn lookup(&self, term: &str) -> Option<usize> {
        self.index.get(term).copied()
    }

    /// The id of `term`, or [`TermMap::unknown_id`] when it is not in the map.
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermMap;
    /// let map = TermMap::from_text("1\nx 1\n", 0, 0).unwrap();
    /// assert_eq!((map.id("x"), map.id("y")), (0, 1));
    /// ```
    pub fn id(&self, term: &str) -> usize {
        self.lookup(term).unwrap_or(self.terms.len())
    }

    /// The id of every term not in the map: `len()`, the extra row after the terms'.
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermMap;
    /// assert_eq!(TermMap::default().unknown_id(), 0);
    /// ```
    pub fn unknown_id(&self) -> usize {
        self.terms.len()
    }

    /// The number of values a term feature takes: the terms and the unknown id,
    /// `len() + 1` (SyntaxNet's `NumValues()`, a fixed channel's `vocabulary_size`).
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermMap;
    /// assert_eq!(TermMap::from_text("2\na 2\nb 1\n", 0, 0).unwrap().vocabulary_size(), 3);
    /// ```
    pub fn vocabulary_size(&self) -> usize {
        self.terms.len() + 1
    }

    /// The term with id `id`, or `None` for the unknown id and beyond.
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermMap;
    /// let map = TermMap::from_text("1\nx 1\n", 0, 0).unwrap();
    /// assert_eq!((map.term(0), map.term(1)), (Some("x"), None));
    /// ```
    pub fn term(&self, id: usize) -> Option<&str> {
        self.terms.get(id).map(|(t, _)| t.as_str())
    }

    /// The training count of the term with id `id`.
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermMap;
    /// assert_eq!(TermMap::from_text("1\nx 7\n", 0, 0).unwrap().frequency(0), Some(7));
    /// ```
    pub fn frequency(&self, id: usize) -> Option<u64> {
        self.terms.get(id).map(|(_, c)| *c)
    }

    /// The terms in id order.
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermMap;
    /// let map = TermMap::from_text("2\nb 2\na 1\n", 0, 0).unwrap();
    /// assert_eq!(map.terms().collect::<Vec<_>>(), ["b", "a"]);
    /// ```
    pub fn terms(&self) -> impl Iterator<Item = &str> + '_ {
        self.terms.iter().map(|(t, _)| t.as_str())
    }

    /// The map in SyntaxNet's text format (see the module doc); fails for a term that
    /// is empty or holds a line break.
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermCounter;
    /// let mut c = TermCounter::new();
    /// c.add("two words");
    /// assert_eq!(c.clone().into_map(0, 0).to_text().unwrap(), "1\ntwo words 1\n");
    /// c.add("a\nb");
    /// assert!(c.into_map(0, 0).to_text().is_err());
    /// ```
    pub fn to_text(&self) -> Result<String, TermMapError> {
        let mut out = format!("{}\n", self.terms.len());
        for (t, c) in self.terms.iter() {
            if t.is_empty() {
                return Err(TermMapError::BadTerm {
                    term: String::new(),
                    reason: "the term is empty",
                });
            }
            if t.contains(['\n', '\r']) {
                return Err(TermMapError::BadTerm {
                    term: t.escape_default().to_string(),
                    reason: "the term holds a line break",
                });
            }
            out.push_str(t);
            out.push(' ');
            out.push_str(&c.to_string());
            out.push('\n');
        }
        Ok(out)
    }

    /// Reads a map in SyntaxNet's text format, keeping terms counted at least
    /// `min_frequency` times and at most the first `max_terms` (0: no limit).
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermMap;
    /// let text = "3\nb 5\na 2\nc 1\n";
    /// assert_eq!(TermMap::from_text(text, 2, 0).unwrap().len(), 2);
    /// assert_eq!(TermMap::from_text(text, 0, 1).unwrap().len(), 1);
    /// let err = TermMap::from_text("2\na 1\nb 2\n", 0, 0).unwrap_err();
    /// assert_eq!(err.to_string(), "line 3: counts must not increase (2 after 1)");
    /// ```
    pub fn from_text(
        text: &str,
        min_frequency: u64,
        max_terms: usize,
    ) -> Result<TermMap, TermMapError> {
        let fail = |line: usize, message: String| TermMapError::Format { line, message };
        let mut lines = text.lines();
        let header = lines
            .next()
            .ok_or_else(|| fail(1, "missing the number of terms".into()))?;
        let total: usize = header
            .trim()
            .parse()
            .map_err(|_| fail(1, format!("`{header}` is not a number of terms")))?;
        let mut terms: Vec<(String, u64)> = Vec::with_capacity(total.min(1 << 20));
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for i in 0..total {
            let line_no = i + 2;
            let line = lines.next().ok_or_else(|| {
                fail(line_no, format!("the header says {total} terms, found {i}"))
            })?;
            let (term, count) = line
                .rsplit_once(' ')
                .ok_or_else(|| fail(line_no, format!("`{line}` is not `term count`")))?;
            if term.is_empty() {
                return Err(fail(line_no, "empty term".into()));
            }
            let count: u64 = match count.parse() {
                Ok(c) if c > 0 => c,
                _ => return Err(fail(line_no, format!("`{count}` is not a positive count"))),
            };
            if let Some(&(_, last)) = terms.last() {
                if count > last {
                    return Err(fail(
                        line_no,
                        format!("counts must not increase ({count} after {last})"),
                    ));
                }
            }
            if let Some(first) = seen.insert(term, line_no) {
                return Err(fail(
                    line_no,
                    format!("duplicate term `{term}` (first on line {first})"),
                ));
            }
            terms.push((term.to_string(), count));
        }
        if let Some(extra) = lines.find(|l| !l.trim().is_empty()) {
            return Err(fail(
                total + 2,
                format!("more terms than the header's {total}: `{extra}`"),
            ));
        }
        Ok(TermMap::from_sorted(terms, min_frequency, max_terms))
    }

    /// Writes the map to a file in the text format.
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermMap;
    /// let path = std::env::temp_dir().join(format!("kiln-dragnn-tm-{}", std::process::id()));
    /// let map = TermMap::from_text("2\nb 2\na 1\n", 0, 0).unwrap();
    /// map.save(&path).unwrap();
    /// assert_eq!(TermMap::load(&path, 0, 0).unwrap(), map);
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), TermMapError> {
        let path = path.as_ref();
        std::fs::write(path, self.to_text()?).map_err(|source| TermMapError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Reads a map from a file in the text format (see [`TermMap::from_text`]).
    ///
    /// ```
    /// use kiln_dragnn::term_map::TermMap;
    /// assert!(TermMap::load("/nonexistent/word-map", 0, 0).is_err());
    /// ```
    pub fn load(
        path: impl AsRef<Path>,
        min_frequency: u64,
        max_terms: usize,
    ) -> Result<TermMap, TermMapError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| TermMapError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        TermMap::from_text(&text, min_frequency, max_terms).map_err(|e| TermMapError::InFile {
            path: path.to_path_buf(),
            source: Box::new(e),
        })
    }
}

/// Which CoNLL-U column holds the tags of the tag map (and the tagger's actions).
///
/// ```
/// use kiln_dragnn::term_map::TagColumn;
/// assert_eq!(TagColumn::default(), TagColumn::Upos);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TagColumn {
    /// UPOS: the universal tag set (the default; the Turkish treebank's 14 Google-style
    /// universal tags).
    #[default]
    Upos,
    /// XPOS: the language-specific tag set.
    Xpos,
}

impl TagColumn {
    /// The document column.
    ///
    /// ```
    /// use kiln_dragnn::{document::Column, term_map::TagColumn};
    /// assert_eq!(TagColumn::Xpos.column(), Column::Xpos);
    /// ```
    pub fn column(self) -> Column {
        match self {
            TagColumn::Upos => Column::Upos,
            TagColumn::Xpos => Column::Xpos,
        }
    }
}

/// How [`TermMaps::build`] cuts each map.
///
/// ```
/// use kiln_dragnn::term_map::TermMapOptions;
/// let o = TermMapOptions::default();
/// assert_eq!((o.min_frequency, o.max_terms), (0, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TermMapOptions {
    /// The tag column.
    pub tag_column: TagColumn,
    /// Keep only terms counted at least this often (applies to every map).
    pub min_frequency: u64,
    /// Keep at most this many terms per map, most frequent first (0: no limit).
    pub max_terms: usize,
}

/// The file names [`TermMaps::save`] and [`TermMaps::load`] use: SyntaxNet's resource
/// names.
///
/// ```
/// use kiln_dragnn::term_map::MAP_FILES;
/// assert_eq!(MAP_FILES, ["word-map", "tag-map", "label-map", "char-map", "lemma-map"]);
/// ```
pub const MAP_FILES: [&str; 5] = ["word-map", "tag-map", "label-map", "char-map", "lemma-map"];

/// The four vocabularies of a parser, built from training sentences.
///
/// ```
/// use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
/// let doc = read_conllu("1\tEv\t_\tNOUN\tNN\t_\t2\tnsubj\t_\t_\n\
///                        2\tgüzel\t_\tADJ\tJJ\t_\t0\troot\t_\t_\n").unwrap();
/// let maps = TermMaps::build(&doc, &TermMapOptions::default());
/// assert_eq!(maps.words.terms().collect::<Vec<_>>(), ["Ev", "güzel"]);
/// assert_eq!(maps.tags.terms().collect::<Vec<_>>(), ["ADJ", "NOUN"]);
/// assert_eq!(maps.labels.terms().collect::<Vec<_>>(), ["nsubj", "root"]);
/// assert_eq!(maps.chars.len(), 7); // E v g ü z e l
/// assert_eq!(maps.tag(&doc[0], 0), "NOUN");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TermMaps {
    /// Word forms (FORM).
    pub words: TermMap,
    /// Tags (the [`TagColumn`]'s).
    pub tags: TermMap,
    /// Dependency labels (DEPREL).
    pub labels: TermMap,
    /// The characters of the word forms.
    pub chars: TermMap,
    /// Lemmas (LEMMA, `_` included: in treebanks that split words into parts, the parts
    /// after the first have it).
    pub lemmas: TermMap,
    /// Where the tags come from.
    pub tag_column: TagColumn,
}

impl TermMaps {
    /// Counts the words, tags, labels and characters of `sentences` (their words only, not
    /// multiword-token or empty-node rows; `_` tags and labels are not counted).
    ///
    /// ```
    /// use kiln_dragnn::{document::read_conllu, term_map::{TagColumn, TermMaps, TermMapOptions}};
    /// let doc = read_conllu("1\ta\t_\tNOUN\tNN\t_\t0\troot\t_\t_\n").unwrap();
    /// let opts = TermMapOptions { tag_column: TagColumn::Xpos, ..Default::default() };
    /// assert_eq!(TermMaps::build(&doc, &opts).tags.term(0), Some("NN"));
    /// ```
    pub fn build<'a>(
        sentences: impl IntoIterator<Item = &'a Sentence>,
        options: &TermMapOptions,
    ) -> TermMaps {
        let (mut words, mut tags, mut labels, mut chars, mut lemmas) = (
            TermCounter::new(),
            TermCounter::new(),
            TermCounter::new(),
            TermCounter::new(),
            TermCounter::new(),
        );
        let tag_col = options.tag_column.column();
        for s in sentences {
            for row in s.words() {
                let form = row.field(Column::Form);
                words.add(form);
                let mut buf = [0u8; 4];
                for ch in form.chars() {
                    chars.add(ch.encode_utf8(&mut buf));
                }
                let tag = row.field(tag_col);
                if tag != "_" {
                    tags.add(tag);
                }
                let label = row.field(Column::Deprel);
                if label != "_" {
                    labels.add(label);
                }
                let lemma = row.field(Column::Lemma);
                if !lemma.is_empty() {
                    lemmas.add(lemma);
                }
            }
        }
        let (m, k) = (options.min_frequency, options.max_terms);
        TermMaps {
            words: words.into_map(m, k),
            tags: tags.into_map(m, k),
            labels: labels.into_map(m, k),
            chars: chars.into_map(m, k),
            lemmas: lemmas.into_map(m, k),
            tag_column: options.tag_column,
        }
    }

    /// Word `i`'s tag in the maps' tag column.
    ///
    /// ```
    /// use kiln_dragnn::{document::read_conllu, term_map::TermMaps};
    /// let doc = read_conllu("1\ta\t_\tNOUN\tNN\t_\t0\troot\t_\t_\n").unwrap();
    /// assert_eq!(TermMaps::default().tag(&doc[0], 0), "NOUN");
    /// ```
    pub fn tag<'s>(&self, sentence: &'s Sentence, i: usize) -> &'s str {
        sentence.field(i, self.tag_column.column())
    }

    /// Saves the maps as `word-map`, `tag-map`, `label-map`, `char-map` and `lemma-map` in `dir`
    /// (created if missing).
    ///
    /// ```
    /// use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// let dir = std::env::temp_dir().join(format!("kiln-dragnn-maps-{}", std::process::id()));
    /// let doc = read_conllu("1\ta\t_\tNOUN\tNN\t_\t0\troot\t_\t_\n").unwrap();
    /// let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// maps.save(&dir).unwrap();
    /// assert_eq!(TermMaps::load(&dir, &TermMapOptions::default()).unwrap(), maps);
    /// std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn save(&self, dir: impl AsRef<Path>) -> Result<(), TermMapError> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|source| TermMapError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        for (name, map) in MAP_FILES.iter().zip(self.maps()) {
            map.save(dir.join(name))?;
        }
        Ok(())
    }

    /// Loads the five maps from `dir` (see [`TermMaps::save`]) with the options' cut and
    /// tag column.
    ///
    /// ```
    /// use kiln_dragnn::term_map::{TermMaps, TermMapOptions};
    /// assert!(TermMaps::load("/nonexistent", &TermMapOptions::default()).is_err());
    /// ```
    pub fn load(dir: impl AsRef<Path>, options: &TermMapOptions) -> Result<TermMaps, TermMapError> {
        let dir = dir.as_ref();
        let load =
            |name: &str| TermMap::load(dir.join(name), options.min_frequency, options.max_terms);
        Ok(TermMaps {
            words: load(MAP_FILES[0])?,
            tags: load(MAP_FILES[1])?,
            labels: load(MAP_FILES[2])?,
            chars: load(MAP_FILES[3])?,
            lemmas: load(MAP_FILES[4])?,
            tag_column: options.tag_column,
        })
    }

    fn maps(&self) -> [&TermMap; 5] {
        [
            &self.words,
            &self.tags,
            &self.labels,
            &self.chars,
            &self.lemmas,
        ]
    }
}
