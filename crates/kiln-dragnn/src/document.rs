//! CoNLL-U documents: [`Sentence`]s read with [`read_conllu`] and written back with
//! [`write_conllu`] **byte for byte**, the serialized input form of a batch.
//!
//! A sentence keeps every line it was read from: its comments, its word rows (integer IDs,
//! the *tokens* the transition systems walk), its multiword-token rows (`1-2`) and its
//! empty-node rows (`1.1`), in their original order and with their ten tab-separated
//! columns untouched (FEATS with repeated keys, DEPS, MISC: nothing is normalised). Typed
//! accessors read the columns the parser needs ([`Sentence::form`], [`Sentence::upos`],
//! [`Sentence::head`], [`Sentence::deprel`], ...) and setters
//! ([`Sentence::set_head`], [`Sentence::set_deprel`], [`Sentence::set_upos`], ...)
//! replace a column with a prediction, which writing then outputs.
//!
//! # Line policy (what makes the round trip exact)
//! - The text is split into lines at `\n`. A sentence is a run of non-blank lines; the
//!   blank lines that follow it belong to it ([`Sentence::blank_lines_after`]), and blank
//!   lines before the first sentence of a document belong to that first sentence.
//! - A sentence uses one line ending, `\n` or `\r\n`, decided by its first line; a line of
//!   the same sentence that ends otherwise is an error ([`DocumentError::MixedLineEndings`]).
//! - Whether the document's last line ended with a line ending is kept on the last sentence
//!   ([`Sentence::ends_with_newline`]); the Turkish treebank's files, for example, end
//!   without one and without a trailing blank line.
//! - [`write_conllu`] writes each sentence as it was read. Only where that would glue two
//!   sentences together (a sentence that is not written last but was read without a final
//!   line ending or without a blank line after it) does it add the line ending and one
//!   blank line, so that its output always reads back to the same sentences.
//! - A document of blank lines only holds no sentence, and writes back as the empty string.
//!
//! Reading checks what the transition systems rely on and reports the line number of the
//! first problem: ten columns, no empty column, IDs of words numbered 1, 2, 3, ... with
//! ranges and empty nodes where CoNLL-U puts them, and each word's HEAD `_` or a word index
//! in `0..=n` other than its own.
//!
//! The treebank split of design.md §7 is [`split`] (sentence `i` of each file goes to test
//! when `i % 10 == 9`, to dev when `i % 10 == 8`, else to train) and
//! [`read_turkish_treebank`] applies it to `web.conllu` then `wiki.conllu`.
//!
//! Depends on nothing else in the crate (std and `thiserror`).

use std::fmt;
use std::path::{Path, PathBuf};

/// The number of columns of a CoNLL-U row.
///
/// ```
/// assert_eq!(kiln_dragnn::document::NUM_COLUMNS, 10);
/// ```
pub const NUM_COLUMNS: usize = 10;

/// The ten columns of a CoNLL-U row, in order.
///
/// ```
/// use kiln_dragnn::document::Column;
/// assert_eq!(Column::Head.index(), 6);
/// assert_eq!(Column::Feats.to_string(), "FEATS");
/// assert_eq!(Column::ALL.len(), 10);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Column {
    /// ID: a word index from 1, a multiword range `1-2` or an empty node `1.1`.
    Id,
    /// FORM: the word form.
    Form,
    /// LEMMA: the lemma.
    Lemma,
    /// UPOS: the universal part-of-speech tag (the tagger's tag set).
    Upos,
    /// XPOS: the language-specific (fine) tag.
    Xpos,
    /// FEATS: morphological features, `key=value` pairs joined by `|` (kept verbatim).
    Feats,
    /// HEAD: the head's ID, 0 for the root.
    Head,
    /// DEPREL: the dependency label.
    Deprel,
    /// DEPS: the enhanced dependency graph (kept verbatim).
    Deps,
    /// MISC: anything else, e.g. `SpaceAfter=No` (kept verbatim).
    Misc,
}

impl Column {
    /// Every column, in file order.
    pub const ALL: [Column; NUM_COLUMNS] = [
        Column::Id,
        Column::Form,
        Column::Lemma,
        Column::Upos,
        Column::Xpos,
        Column::Feats,
        Column::Head,
        Column::Deprel,
        Column::Deps,
        Column::Misc,
    ];

    /// The column's position in a row, from 0.
    ///
    /// ```
    /// use kiln_dragnn::document::Column;
    /// assert_eq!(Column::Id.index(), 0);
    /// assert_eq!(Column::Misc.index(), 9);
    /// ```
    pub fn index(self) -> usize {
        self as usize
    }

    /// The column's name as the CoNLL-U format writes it (`ID`, `FORM`, ...).
    ///
    /// ```
    /// use kiln_dragnn::document::Column;
    /// assert_eq!(Column::Deprel.name(), "DEPREL");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Column::Id => "ID",
            Column::Form => "FORM",
            Column::Lemma => "LEMMA",
            Column::Upos => "UPOS",
            Column::Xpos => "XPOS",
            Column::Feats => "FEATS",
            Column::Head => "HEAD",
            Column::Deprel => "DEPREL",
            Column::Deps => "DEPS",
            Column::Misc => "MISC",
        }
    }
}

impl fmt::Display for Column {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Errors of reading, writing and editing documents. Reading errors name the line (from 1).
///
/// ```
/// use kiln_dragnn::document::{read_conllu, DocumentError};
/// let err = read_conllu("1\tword\t_\n").unwrap_err();
/// assert!(matches!(err, DocumentError::ColumnCount { line: 1, found: 3 }));
/// assert_eq!(err.to_string(), "line 1: expected 10 tab-separated columns, found 3");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DocumentError {
    /// A row without exactly ten tab-separated columns.
    #[error("line {line}: expected 10 tab-separated columns, found {found}")]
    ColumnCount {
        /// The line, from 1.
        line: usize,
        /// How many columns it has.
        found: usize,
    },
    /// An empty column (CoNLL-U writes `_` for no value).
    #[error("line {line}: column {column} is empty (write `_` for no value)")]
    EmptyField {
        /// The line, from 1.
        line: usize,
        /// The empty column.
        column: Column,
    },
    /// An ID that is not a word index, range or empty node, or is out of order.
    #[error("line {line}: bad ID `{id}`: {reason}")]
    BadId {
        /// The line, from 1.
        line: usize,
        /// The ID as written.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A word's HEAD that is not `_` or a word index `0..=n` other than its own.
    #[error("line {line}: bad HEAD `{head}` of word {word}: {reason}")]
    BadHead {
        /// The line, from 1.
        line: usize,
        /// The word's ID (from 1).
        word: usize,
        /// The HEAD as written.
        head: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A line whose ending (`\n` or `\r\n`) differs from its sentence's first line.
    #[error("line {line}: its line ending differs from the rest of its sentence (mixed `\\n` and `\\r\\n`)")]
    MixedLineEndings {
        /// The line, from 1.
        line: usize,
    },
    /// A file that is not valid UTF-8.
    #[error("{}: line {line}: not valid UTF-8", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// The first line with invalid bytes, from 1.
        line: usize,
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
        source: Box<DocumentError>,
    },
    /// A word index past the end of the sentence.
    #[error("word index {index} is out of range for a sentence of {len} words")]
    TokenIndex {
        /// The index (from 0).
        index: usize,
        /// The number of words.
        len: usize,
    },
    /// A value that cannot be written into a column.
    #[error("cannot set {column} to `{value}`: {reason}")]
    BadValue {
        /// The column.
        column: Column,
        /// The value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// The ID of a row.
///
/// ```
/// use kiln_dragnn::document::RowId;
/// assert_eq!(RowId::parse("3"), Some(RowId::Word(3)));
/// assert_eq!(RowId::parse("1-2"), Some(RowId::Range(1, 2)));
/// assert_eq!(RowId::parse("4.1"), Some(RowId::Empty(4, 1)));
/// assert_eq!(RowId::parse("0"), None);
/// assert_eq!(RowId::parse("x"), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowId {
    /// A word (a token of the transition systems), numbered from 1.
    Word(usize),
    /// A multiword token spanning words `first..=last`.
    Range(usize, usize),
    /// An empty node: the `k`-th (from 1) after word `i` (0 for before the first word).
    Empty(usize, usize),
}

/// Parses a decimal number of ASCII digits only (no sign, no `+`, no spaces).
fn parse_digits(s: &str) -> Option<usize> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl RowId {
    /// Parses an ID column; `None` when it is none of the three forms (or a word `0`).
    ///
    /// ```
    /// use kiln_dragnn::document::RowId;
    /// assert_eq!(RowId::parse("10"), Some(RowId::Word(10)));
    /// assert_eq!(RowId::parse("-1"), None);
    /// ```
    pub fn parse(s: &str) -> Option<RowId> {
        if let Some((a, b)) = s.split_once('-') {
            return Some(RowId::Range(parse_digits(a)?, parse_digits(b)?));
        }
        if let Some((a, b)) = s.split_once('.') {
            return Some(RowId::Empty(parse_digits(a)?, parse_digits(b)?));
        }
        match parse_digits(s)? {
            0 => None,
            n => Some(RowId::Word(n)),
        }
    }
}

/// One row of a sentence: its [`RowId`] and its ten columns, kept as the line it was read
/// from (so that writing reproduces it exactly).
///
/// ```
/// use kiln_dragnn::document::{Column, read_conllu};
/// let s = &read_conllu("1\tev\tev\tNOUN\tNN\tCase=Nom|Case=Bare\t0\troot\t_\tSpaceAfter=No\n")
///     .unwrap()[0];
/// let row = s.word(0).unwrap();
/// assert_eq!(row.field(Column::Form), "ev");
/// assert_eq!(row.feats(), vec![("Case", "Nom"), ("Case", "Bare")]);
/// assert!(!row.space_after());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    id: RowId,
    line: String,
    /// Byte offset where each column ends; column `c` is `line[start(c)..ends[c]]`.
    ends: [u32; NUM_COLUMNS],
}

impl Row {
    /// Splits `line` into its columns; errors name `line_no`.
    fn parse(line: &str, line_no: usize) -> Result<Row, DocumentError> {
        let mut ends = [0u32; NUM_COLUMNS];
        let mut n = 0;
        for (i, b) in line.bytes().enumerate() {
            if b == b'\t' {
                if n < NUM_COLUMNS {
                    ends[n] = u32::try_from(i).map_err(|_| DocumentError::BadValue {
                        column: Column::ALL[n],
                        value: String::new(),
                        reason: format!("line {line_no} is longer than 4 GiB"),
                    })?;
                }
                n += 1;
            }
        }
        let found = n + 1;
        if found != NUM_COLUMNS {
            return Err(DocumentError::ColumnCount {
                line: line_no,
                found,
            });
        }
        ends[NUM_COLUMNS - 1] = u32::try_from(line.len()).map_err(|_| DocumentError::BadValue {
            column: Column::Misc,
            value: String::new(),
            reason: format!("line {line_no} is longer than 4 GiB"),
        })?;
        let mut row = Row {
            id: RowId::Word(1),
            line: line.to_string(),
            ends,
        };
        for c in Column::ALL {
            if row.field(c).is_empty() {
                return Err(DocumentError::EmptyField {
                    line: line_no,
                    column: c,
                });
            }
        }
        let id = row.field(Column::Id);
        row.id = RowId::parse(id).ok_or_else(|| DocumentError::BadId {
            line: line_no,
            id: id.to_string(),
            reason: "not a word index from 1, a range `a-b` or an empty node `a.b`".into(),
        })?;
        Ok(row)
    }

    fn start(&self, c: Column) -> usize {
        match c.index() {
            0 => 0,
            i => self.ends[i - 1] as usize + 1,
        }
    }

    /// The row's ID.
    ///
    /// ```
    /// use kiln_dragnn::document::{read_conllu, RowId};
    /// let s = &read_conllu("1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n").unwrap()[0];
    /// assert_eq!(s.word(0).unwrap().id(), RowId::Word(1));
    /// ```
    pub fn id(&self) -> RowId {
        self.id
    }

    /// One column's text, exactly as written.
    ///
    /// ```
    /// use kiln_dragnn::document::{read_conllu, Column};
    /// let s = &read_conllu("1\ta\tb\tX\tY\t_\t0\troot\t_\t_\n").unwrap()[0];
    /// assert_eq!(s.word(0).unwrap().field(Column::Xpos), "Y");
    /// ```
    pub fn field(&self, c: Column) -> &str {
        &self.line[self.start(c)..self.ends[c.index()] as usize]
    }

    /// The row as written (the ten columns joined by tabs, without the line ending).
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let line = "1\ta\tb\tX\tY\t_\t0\troot\t_\t_";
    /// let s = &read_conllu(line).unwrap()[0];
    /// assert_eq!(s.word(0).unwrap().line(), line);
    /// ```
    pub fn line(&self) -> &str {
        &self.line
    }

    /// The FEATS column as `(key, value)` pairs in order, repeated keys kept; empty for `_`.
    /// A feature without `=` has an empty value.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let s = &read_conllu("1\ta\t_\t_\t_\tA=1|B=2|A=3\t0\troot\t_\t_").unwrap()[0];
    /// assert_eq!(s.word(0).unwrap().feats(), vec![("A", "1"), ("B", "2"), ("A", "3")]);
    /// ```
    pub fn feats(&self) -> Vec<(&str, &str)> {
        key_values(self.field(Column::Feats))
    }

    /// The MISC column as `(key, value)` pairs in order; empty for `_`.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let s = &read_conllu("1\ta\t_\t_\t_\t_\t0\troot\t_\tSpaceAfter=No|X=y").unwrap()[0];
    /// assert_eq!(s.word(0).unwrap().misc(), vec![("SpaceAfter", "No"), ("X", "y")]);
    /// ```
    pub fn misc(&self) -> Vec<(&str, &str)> {
        key_values(self.field(Column::Misc))
    }

    /// False when MISC holds `SpaceAfter=No`.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let s = &read_conllu("1\ta\t_\t_\t_\t_\t0\troot\t_\t_").unwrap()[0];
    /// assert!(s.word(0).unwrap().space_after());
    /// ```
    pub fn space_after(&self) -> bool {
        // Read in place: features ask this of a token at every step.
        !self
            .field(Column::Misc)
            .split('|')
            .any(|kv| kv == "SpaceAfter=No")
    }

    /// Replaces one column (not the ID) without checking the value.
    fn replace(&mut self, c: Column, value: &str) {
        let mut line = String::with_capacity(self.line.len() + value.len());
        let mut ends = [0u32; NUM_COLUMNS];
        for col in Column::ALL {
            if col.index() > 0 {
                line.push('\t');
            }
            line.push_str(if col == c { value } else { self.field(col) });
            ends[col.index()] = line.len() as u32;
        }
        self.line = line;
        self.ends = ends;
    }
}

/// Splits a `k=v|k=v` column into pairs; `_` is none.
fn key_values(col: &str) -> Vec<(&str, &str)> {
    if col == "_" {
        return Vec::new();
    }
    col.split('|')
        .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
        .collect()
}

/// A line of a sentence, in file order (see [`Sentence::lines`]).
///
/// ```
/// use kiln_dragnn::document::{read_conllu, Line};
/// let s = &read_conllu("# sent_id = 1\n1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n").unwrap()[0];
/// let lines: Vec<Line> = s.lines().collect();
/// assert!(matches!(lines[0], Line::Comment("# sent_id = 1")));
/// assert!(matches!(lines[1], Line::Row(_)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// A comment line, `#` included.
    Comment(&'a str),
    /// A word, multiword-token or empty-node row.
    Row(&'a Row),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Item {
    Comment(String),
    Row(Row),
}

/// One CoNLL-U sentence: its lines in order, its words (the rows with integer IDs, indexed
/// from 0 here: word `i` has ID `i + 1`), and the blank lines and line ending that make
/// writing it reproduce the input byte for byte (see the module doc).
///
/// Heads use SyntaxNet's convention: a word index from 0, and -1 for the root.
///
/// ```
/// use kiln_dragnn::document::read_conllu;
/// let text = "# text = Ev güzel.\n\
///             1\tEv\tev\tNOUN\tNN\t_\t2\tnsubj\t_\t_\n\
///             2\tgüzel\tgüzel\tADJ\tJJ\t_\t0\troot\t_\tSpaceAfter=No\n\
///             3\t.\t.\tPUNCT\t.\t_\t2\tp\t_\t_\n";
/// let mut s = read_conllu(text).unwrap().remove(0);
/// assert_eq!(s.len(), 3);
/// assert_eq!(s.text(), Some("Ev güzel."));
/// assert_eq!(s.surface_text(), "Ev güzel.");
/// assert_eq!((s.form(0), s.upos(1), s.head(0), s.head(1)), ("Ev", "ADJ", Some(1), Some(-1)));
/// assert_eq!(s.to_conllu(), text);
/// s.set_head(2, Some(0)).unwrap();
/// s.set_deprel(2, "punct").unwrap();
/// assert!(s.to_conllu().ends_with("3\t.\t.\tPUNCT\t.\t_\t1\tpunct\t_\t_\n"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sentence {
    items: Vec<Item>,
    /// Item index of each word.
    words: Vec<usize>,
    blank_lines_before: usize,
    blank_lines_after: usize,
    ends_with_newline: bool,
    crlf: bool,
}

impl Sentence {
    /// The number of words (rows with an integer ID).
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let text = "1-2\tdel\t_\t_\t_\t_\t_\t_\t_\t_\n\
    ///             1\tde\t_\tADP\t_\t_\t0\troot\t_\t_\n\
    ///             2\tel\t_\tDET\t_\t_\t1\tdet\t_\t_\n";
    /// assert_eq!(read_conllu(text).unwrap()[0].len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether the sentence has no word (only comments).
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// assert!(read_conllu("# only a comment\n").unwrap()[0].is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Every line in file order: comments and rows of all three kinds.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let s = &read_conllu("# a\n# b\n1\tx\t_\t_\t_\t_\t0\troot\t_\t_").unwrap()[0];
    /// assert_eq!(s.lines().count(), 3);
    /// ```
    pub fn lines(&self) -> impl Iterator<Item = Line<'_>> + '_ {
        self.items.iter().map(|it| match it {
            Item::Comment(c) => Line::Comment(c),
            Item::Row(r) => Line::Row(r),
        })
    }

    /// The comment lines (with their `#`), in order.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let s = &read_conllu("# newdoc\n# sent_id = 7\n1\tx\t_\t_\t_\t_\t0\troot\t_\t_").unwrap()[0];
    /// assert_eq!(s.comments().collect::<Vec<_>>(), ["# newdoc", "# sent_id = 7"]);
    /// ```
    pub fn comments(&self) -> impl Iterator<Item = &str> + '_ {
        self.items.iter().filter_map(|it| match it {
            Item::Comment(c) => Some(c.as_str()),
            Item::Row(_) => None,
        })
    }

    /// The value of the first `# key = value` comment.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let s = &read_conllu("# sent_id = tr:1\n1\tx\t_\t_\t_\t_\t0\troot\t_\t_").unwrap()[0];
    /// assert_eq!(s.comment_value("sent_id"), Some("tr:1"));
    /// assert_eq!(s.comment_value("text"), None);
    /// ```
    pub fn comment_value(&self, key: &str) -> Option<&str> {
        self.comments().find_map(|c| {
            let rest = c.strip_prefix('#')?.trim_start();
            let (k, v) = rest.split_once('=')?;
            (k.trim_end() == key).then(|| v.strip_prefix(' ').unwrap_or(v))
        })
    }

    /// The `# sent_id = ...` comment's value.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let s = &read_conllu("# sent_id = s1\n1\tx\t_\t_\t_\t_\t0\troot\t_\t_").unwrap()[0];
    /// assert_eq!(s.sent_id(), Some("s1"));
    /// ```
    pub fn sent_id(&self) -> Option<&str> {
        self.comment_value("sent_id")
    }

    /// The `# text = ...` comment's value.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let s = &read_conllu("# text = x\n1\tx\t_\t_\t_\t_\t0\troot\t_\t_").unwrap()[0];
    /// assert_eq!(s.text(), Some("x"));
    /// ```
    pub fn text(&self) -> Option<&str> {
        self.comment_value("text")
    }

    /// The surface text rebuilt from the rows: each word's FORM, or a multiword token's
    /// FORM in place of the words it spans, followed by a space unless its MISC has
    /// `SpaceAfter=No` (and never after the last). Empty nodes add nothing.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let text = "1-2\tdel\t_\t_\t_\t_\t_\t_\t_\t_\n\
    ///             1\tde\t_\tADP\t_\t_\t3\tcase\t_\t_\n\
    ///             2\tel\t_\tDET\t_\t_\t3\tdet\t_\t_\n\
    ///             3\tmar\t_\tNOUN\t_\t_\t0\troot\t_\tSpaceAfter=No\n\
    ///             4\t.\t_\tPUNCT\t_\t_\t3\tpunct\t_\t_\n";
    /// assert_eq!(read_conllu(text).unwrap()[0].surface_text(), "del mar.");
    /// ```
    pub fn surface_text(&self) -> String {
        let mut out = String::new();
        let mut covered_until = 0;
        let mut space = false;
        for it in &self.items {
            let Item::Row(r) = it else { continue };
            let form = match r.id {
                RowId::Range(a, b) if b >= a => {
                    covered_until = b;
                    r.field(Column::Form)
                }
                RowId::Word(i) if i > covered_until => r.field(Column::Form),
                _ => continue,
            };
            if space {
                out.push(' ');
            }
            out.push_str(form);
            space = r.space_after();
        }
        out
    }

    /// The rows of the words, in order (word `i` has ID `i + 1`).
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let s = &read_conllu("1\tx\t_\t_\t_\t_\t0\troot\t_\t_").unwrap()[0];
    /// assert_eq!(s.words().count(), 1);
    /// ```
    pub fn words(&self) -> impl Iterator<Item = &Row> + '_ {
        self.words.iter().map(|&k| match &self.items[k] {
            Item::Row(r) => r,
            Item::Comment(_) => unreachable!("word indices point at rows"),
        })
    }

    /// Word `i`'s row (from 0), or `None` past the end.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let s = &read_conllu("1\tx\t_\t_\t_\t_\t0\troot\t_\t_").unwrap()[0];
    /// assert!(s.word(0).is_some() && s.word(1).is_none());
    /// ```
    pub fn word(&self, i: usize) -> Option<&Row> {
        match self.items.get(*self.words.get(i)?)? {
            Item::Row(r) => Some(r),
            Item::Comment(_) => None,
        }
    }

    fn word_mut(&mut self, i: usize) -> Result<&mut Row, DocumentError> {
        let len = self.words.len();
        let k = *self
            .words
            .get(i)
            .ok_or(DocumentError::TokenIndex { index: i, len })?;
        match &mut self.items[k] {
            Item::Row(r) => Ok(r),
            Item::Comment(_) => unreachable!("word indices point at rows"),
        }
    }

    /// Word `i`'s column `c`. Panics when `i >= len()` (like slice indexing); use
    /// [`Sentence::word`] to check.
    ///
    /// ```
    /// use kiln_dragnn::document::{read_conllu, Column};
    /// let s = &read_conllu("1\tx\tlem\t_\t_\t_\t0\troot\t_\t_").unwrap()[0];
    /// assert_eq!(s.field(0, Column::Lemma), "lem");
    /// ```
    pub fn field(&self, i: usize, c: Column) -> &str {
        match self.word(i) {
            Some(r) => r.field(c),
            None => panic!(
                "word index {i} is out of range for a sentence of {} words",
                self.len()
            ),
        }
    }

    /// Word `i`'s FORM (panics past the end).
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// assert_eq!(read_conllu("1\tx\t_\t_\t_\t_\t0\troot\t_\t_").unwrap()[0].form(0), "x");
    /// ```
    pub fn form(&self, i: usize) -> &str {
        self.field(i, Column::Form)
    }

    /// Word `i`'s LEMMA (panics past the end).
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// assert_eq!(read_conllu("1\tx\ty\t_\t_\t_\t0\troot\t_\t_").unwrap()[0].lemma(0), "y");
    /// ```
    pub fn lemma(&self, i: usize) -> &str {
        self.field(i, Column::Lemma)
    }

    /// Word `i`'s UPOS, the tagger's tag (panics past the end).
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// assert_eq!(read_conllu("1\tx\t_\tNOUN\tNN\t_\t0\troot\t_\t_").unwrap()[0].upos(0), "NOUN");
    /// ```
    pub fn upos(&self, i: usize) -> &str {
        self.field(i, Column::Upos)
    }

    /// Word `i`'s XPOS (panics past the end).
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// assert_eq!(read_conllu("1\tx\t_\tNOUN\tNN\t_\t0\troot\t_\t_").unwrap()[0].xpos(0), "NN");
    /// ```
    pub fn xpos(&self, i: usize) -> &str {
        self.field(i, Column::Xpos)
    }

    /// Word `i`'s head in SyntaxNet's convention: `Some(j)` for word `j` (from 0),
    /// `Some(-1)` for the root (HEAD `0`), `None` for HEAD `_` (panics past the end).
    /// Reading checked the column, so it always parses.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let s = &read_conllu("1\tx\t_\t_\t_\t_\t0\troot\t_\t_\n2\ty\t_\t_\t_\t_\t1\tdep\t_\t_\n\
    ///                       3\tz\t_\t_\t_\t_\t_\t_\t_\t_").unwrap()[0];
    /// assert_eq!((s.head(0), s.head(1), s.head(2)), (Some(-1), Some(0), None));
    /// ```
    pub fn head(&self, i: usize) -> Option<i32> {
        let h = self.field(i, Column::Head);
        parse_digits(h).map(|h| h as i32 - 1)
    }

    /// Every word's head (see [`Sentence::head`]), `-1` also standing for `_`.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let s = &read_conllu("1\tx\t_\t_\t_\t_\t2\tdep\t_\t_\n2\ty\t_\t_\t_\t_\t0\troot\t_\t_").unwrap()[0];
    /// assert_eq!(s.heads(), vec![1, -1]);
    /// ```
    pub fn heads(&self) -> Vec<i32> {
        (0..self.len())
            .map(|i| self.head(i).unwrap_or(-1))
            .collect()
    }

    /// Word `i`'s DEPREL (panics past the end).
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// assert_eq!(read_conllu("1\tx\t_\t_\t_\t_\t0\troot\t_\t_").unwrap()[0].deprel(0), "root");
    /// ```
    pub fn deprel(&self, i: usize) -> &str {
        self.field(i, Column::Deprel)
    }

    /// Word `i`'s MISC (panics past the end).
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let s = &read_conllu("1\tx\t_\t_\t_\t_\t0\troot\t_\tSpaceAfter=No").unwrap()[0];
    /// assert_eq!(s.misc(0), "SpaceAfter=No");
    /// ```
    pub fn misc(&self, i: usize) -> &str {
        self.field(i, Column::Misc)
    }

    /// Replaces word `i`'s column `c` with `value`, which writing then outputs. The value
    /// must be non-empty and hold no tab or line break; the ID cannot be set, and a HEAD
    /// must be `_` or a word index `0..=len()` other than the word's own.
    ///
    /// ```
    /// use kiln_dragnn::document::{read_conllu, Column};
    /// let mut s = read_conllu("1\tx\t_\t_\t_\t_\t0\troot\t_\t_").unwrap().remove(0);
    /// s.set_field(0, Column::Lemma, "lemma").unwrap();
    /// assert_eq!(s.lemma(0), "lemma");
    /// assert!(s.set_field(0, Column::Lemma, "a\tb").is_err());
    /// assert!(s.set_field(0, Column::Id, "2").is_err());
    /// assert!(s.set_field(1, Column::Lemma, "x").is_err());
    /// ```
    pub fn set_field(&mut self, i: usize, c: Column, value: &str) -> Result<(), DocumentError> {
        let bad = |reason: &str| DocumentError::BadValue {
            column: c,
            value: value.to_string(),
            reason: reason.to_string(),
        };
        let n = self.len();
        if value.is_empty() {
            return Err(bad("a column cannot be empty (write `_` for no value)"));
        }
        if value.contains(['\t', '\n', '\r']) {
            return Err(bad("a column cannot hold a tab or a line break"));
        }
        if c == Column::Id {
            return Err(bad("the ID is the word's position and cannot be set"));
        }
        if c == Column::Head && value != "_" {
            match parse_digits(value) {
                Some(h) if h == i + 1 => return Err(bad("a word cannot be its own head")),
                Some(h) if h <= n => {}
                _ => return Err(bad(&format!("not `_` or a word index 0..={n}"))),
            }
        }
        self.word_mut(i)?.replace(c, value);
        Ok(())
    }

    /// Sets word `i`'s head in SyntaxNet's convention (`Some(j)` word `j` from 0,
    /// `Some(-1)` the root, `None` for `_`).
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let mut s = read_conllu("1\tx\t_\t_\t_\t_\t_\t_\t_\t_\n2\ty\t_\t_\t_\t_\t_\t_\t_\t_").unwrap().remove(0);
    /// s.set_head(0, Some(1)).unwrap();
    /// s.set_head(1, Some(-1)).unwrap();
    /// assert_eq!(s.heads(), vec![1, -1]);
    /// assert!(s.set_head(0, Some(0)).is_err());
    /// assert!(s.set_head(0, Some(2)).is_err());
    /// assert!(s.set_head(0, Some(-2)).is_err());
    /// ```
    pub fn set_head(&mut self, i: usize, head: Option<i32>) -> Result<(), DocumentError> {
        match head {
            None => self.set_field(i, Column::Head, "_"),
            Some(h) if h >= -1 => self.set_field(i, Column::Head, &(h as i64 + 1).to_string()),
            Some(h) => Err(DocumentError::BadValue {
                column: Column::Head,
                value: h.to_string(),
                reason: "a head is a word index from 0 or -1 for the root".into(),
            }),
        }
    }

    /// Sets word `i`'s DEPREL.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let mut s = read_conllu("1\tx\t_\t_\t_\t_\t0\t_\t_\t_").unwrap().remove(0);
    /// s.set_deprel(0, "root").unwrap();
    /// assert_eq!(s.deprel(0), "root");
    /// ```
    pub fn set_deprel(&mut self, i: usize, label: &str) -> Result<(), DocumentError> {
        self.set_field(i, Column::Deprel, label)
    }

    /// Sets word `i`'s UPOS (the tagger's prediction).
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let mut s = read_conllu("1\tx\t_\t_\t_\t_\t0\troot\t_\t_").unwrap().remove(0);
    /// s.set_upos(0, "NOUN").unwrap();
    /// assert_eq!(s.upos(0), "NOUN");
    /// ```
    pub fn set_upos(&mut self, i: usize, tag: &str) -> Result<(), DocumentError> {
        self.set_field(i, Column::Upos, tag)
    }

    /// Sets word `i`'s XPOS.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let mut s = read_conllu("1\tx\t_\t_\t_\t_\t0\troot\t_\t_").unwrap().remove(0);
    /// s.set_xpos(0, "NN").unwrap();
    /// assert_eq!(s.xpos(0), "NN");
    /// ```
    pub fn set_xpos(&mut self, i: usize, tag: &str) -> Result<(), DocumentError> {
        self.set_field(i, Column::Xpos, tag)
    }

    /// The number of blank lines after the sentence as read (1 between sentences of a
    /// well-formed file; 0 for a last sentence without a trailing blank line).
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let row = "1\tx\t_\t_\t_\t_\t0\troot\t_\t_\n";
    /// let doc = read_conllu(&format!("{row}\n\n{row}")).unwrap();
    /// assert_eq!((doc[0].blank_lines_after(), doc[1].blank_lines_after()), (2, 0));
    /// ```
    pub fn blank_lines_after(&self) -> usize {
        self.blank_lines_after
    }

    /// Whether the sentence's last line (its last blank line, if any) ended with a line
    /// ending; false only for the last sentence of a file that ends without one.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let row = "1\tx\t_\t_\t_\t_\t0\troot\t_\t_";
    /// assert!(!read_conllu(row).unwrap()[0].ends_with_newline());
    /// assert!(read_conllu(&format!("{row}\n")).unwrap()[0].ends_with_newline());
    /// ```
    pub fn ends_with_newline(&self) -> bool {
        self.ends_with_newline
    }

    /// Whether the sentence's lines end with `\r\n` rather than `\n`.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let s = &read_conllu("1\tx\t_\t_\t_\t_\t0\troot\t_\t_\r\n\r\n").unwrap()[0];
    /// assert!(s.crlf());
    /// assert_eq!(s.to_conllu(), "1\tx\t_\t_\t_\t_\t0\troot\t_\t_\r\n\r\n");
    /// ```
    pub fn crlf(&self) -> bool {
        self.crlf
    }

    /// The sentence's text exactly as read: blank lines before it (first sentence only),
    /// its lines, its blank lines after, with its line ending, and the final line ending
    /// only if it was there.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// let text = "# c\n1\tx\t_\t_\t_\t_\t0\troot\t_\t_\n\n";
    /// assert_eq!(read_conllu(text).unwrap()[0].to_conllu(), text);
    /// ```
    pub fn to_conllu(&self) -> String {
        let mut out = String::new();
        self.write_into(&mut out, true);
        out
    }

    /// Appends the sentence to `out`; when `last` is false, completes the final line
    /// ending and the separating blank line if they are missing.
    fn write_into(&self, out: &mut String, last: bool) {
        let eol = if self.crlf { "\r\n" } else { "\n" };
        let blank_after = if last {
            self.blank_lines_after
        } else {
            self.blank_lines_after.max(1)
        };
        let total = self.blank_lines_before + self.items.len() + blank_after;
        let mut written = 0;
        let mut line = |out: &mut String, text: &str| {
            out.push_str(text);
            written += 1;
            if written < total || !last || self.ends_with_newline {
                out.push_str(eol);
            }
        };
        for _ in 0..self.blank_lines_before {
            line(out, "");
        }
        for it in &self.items {
            match it {
                Item::Comment(c) => line(out, c),
                Item::Row(r) => line(out, &r.line),
            }
        }
        for _ in 0..blank_after {
            line(out, "");
        }
    }
}

/// A sentence being read.
struct Builder {
    sentence: Sentence,
    /// The sentence's line ending, once a terminated line has shown it.
    crlf: Option<bool>,
    /// Line number of each item (to report a bad head).
    item_lines: Vec<usize>,
}

/// Checks that a line's ending (`None`: the unterminated last line) agrees with the
/// sentence's, recording it if it is the first.
fn agree(expected: &mut Option<bool>, got: Option<bool>, line: usize) -> Result<(), DocumentError> {
    match (*expected, got) {
        (Some(e), Some(g)) if e != g => Err(DocumentError::MixedLineEndings { line }),
        (None, g) => {
            *expected = g;
            Ok(())
        }
        _ => Ok(()),
    }
}

impl Builder {
    fn new(blank_lines_before: usize, crlf: Option<bool>) -> Builder {
        Builder {
            sentence: Sentence {
                items: Vec::new(),
                words: Vec::new(),
                blank_lines_before,
                blank_lines_after: 0,
                ends_with_newline: true,
                crlf: false,
            },
            crlf,
            item_lines: Vec::new(),
        }
    }

    fn push(&mut self, text: &str, line_no: usize) -> Result<(), DocumentError> {
        if text.starts_with('#') {
            self.sentence.items.push(Item::Comment(text.to_string()));
            self.item_lines.push(line_no);
            return Ok(());
        }
        let row = Row::parse(text, line_no)?;
        let n = self.sentence.words.len();
        let bad_id = |reason: String| DocumentError::BadId {
            line: line_no,
            id: row.field(Column::Id).to_string(),
            reason,
        };
        match row.id {
            RowId::Word(k) if k != n + 1 => {
                return Err(bad_id(format!("expected word ID {}", n + 1)))
            }
            RowId::Word(_) => self.sentence.words.push(self.sentence.items.len()),
            RowId::Range(a, b) if a != n + 1 || b < a => {
                return Err(bad_id(format!(
                    "a multiword range must start at the next word, {}, and not end before it",
                    n + 1
                )))
            }
            RowId::Empty(a, k) if a != n || k == 0 => {
                return Err(bad_id(format!(
                "an empty node follows the word it is numbered after: expected {n}.k with k >= 1"
            )))
            }
            RowId::Range(..) | RowId::Empty(..) => {}
        }
        self.sentence.items.push(Item::Row(row));
        self.item_lines.push(line_no);
        Ok(())
    }

    /// Checks what needs the whole sentence (heads, range ends).
    fn finish(self) -> Result<Sentence, DocumentError> {
        let mut s = self.sentence;
        s.crlf = self.crlf.unwrap_or(false);
        let n = s.words.len();
        for (it, &line) in s.items.iter().zip(&self.item_lines) {
            let Item::Row(r) = it else { continue };
            match r.id {
                RowId::Word(w) => {
                    let head = r.field(Column::Head);
                    if head == "_" {
                        continue;
                    }
                    let reason = match parse_digits(head) {
                        Some(h) if h == w => "a word cannot be its own head".to_string(),
                        Some(h) if h <= n => continue,
                        _ => format!("not `_` or a word index 0..={n}"),
                    };
                    return Err(DocumentError::BadHead {
                        line,
                        word: w,
                        head: head.to_string(),
                        reason,
                    });
                }
                RowId::Range(_, b) if b > n => {
                    return Err(DocumentError::BadId {
                        line,
                        id: r.field(Column::Id).to_string(),
                        reason: format!("the range ends past the sentence's last word, {n}"),
                    })
                }
                _ => {}
            }
        }
        Ok(s)
    }
}

/// Reads a CoNLL-U document (see the module doc for the line policy and the checks).
///
/// ```
/// use kiln_dragnn::document::{read_conllu, write_conllu};
/// let text = "1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n\n1\tb\t_\t_\t_\t_\t0\troot\t_\t_\n";
/// let doc = read_conllu(text).unwrap();
/// assert_eq!(doc.len(), 2);
/// assert_eq!(write_conllu(&doc), text);
/// assert!(read_conllu("").unwrap().is_empty());
/// let err = read_conllu("1\ta\t_\t_\t_\t_\t5\troot\t_\t_\n").unwrap_err();
/// assert_eq!(err.to_string(), "line 1: bad HEAD `5` of word 1: not `_` or a word index 0..=1");
/// ```
pub fn read_conllu(text: &str) -> Result<Vec<Sentence>, DocumentError> {
    let mut out = Vec::new();
    if text.is_empty() {
        return Ok(out);
    }
    let ends_with_newline = text.ends_with('\n');
    let body = text.strip_suffix('\n').unwrap_or(text);
    let num_lines = body.bytes().filter(|&b| b == b'\n').count() + 1;
    let mut current: Option<Builder> = None;
    // blank lines before the first sentence, and their line ending
    let mut blank_before = 0;
    let mut crlf_before: Option<bool> = None;
    for (idx, raw) in body.split('\n').enumerate() {
        let line_no = idx + 1;
        let (content, crlf) = if line_no < num_lines || ends_with_newline {
            match raw.strip_suffix('\r') {
                Some(c) => (c, Some(true)),
                None => (raw, Some(false)),
            }
        } else {
            (raw, None)
        };
        if content.is_empty() {
            match current.as_mut() {
                Some(b) => {
                    agree(&mut b.crlf, crlf, line_no)?;
                    b.sentence.blank_lines_after += 1;
                }
                None => {
                    agree(&mut crlf_before, crlf, line_no)?;
                    blank_before += 1;
                }
            }
            continue;
        }
        if let Some(b) = current.take_if(|b| b.sentence.blank_lines_after > 0) {
            out.push(b.finish()?);
        }
        let b = current.get_or_insert_with(|| {
            Builder::new(std::mem::take(&mut blank_before), crlf_before.take())
        });
        agree(&mut b.crlf, crlf, line_no)?;
        b.push(content, line_no)?;
    }
    if let Some(mut b) = current {
        b.sentence.ends_with_newline = ends_with_newline;
        out.push(b.finish()?);
    }
    Ok(out)
}

/// Reads a CoNLL-U file; errors name the file (and the line).
///
/// ```
/// use kiln_dragnn::document::read_conllu_file;
/// let dir = std::env::temp_dir().join(format!("kiln-dragnn-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("a.conllu");
/// std::fs::write(&path, "1\tx\t_\t_\t_\t_\t0\troot\t_\t_\n").unwrap();
/// assert_eq!(read_conllu_file(&path).unwrap().len(), 1);
/// std::fs::write(&path, b"1\tx\xff\t_\t_\t_\t_\t0\troot\t_\t_\n").unwrap();
/// assert!(read_conllu_file(&path).unwrap_err().to_string().ends_with("line 1: not valid UTF-8"));
/// assert!(read_conllu_file(dir.join("absent.conllu")).is_err());
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn read_conllu_file(path: impl AsRef<Path>) -> Result<Vec<Sentence>, DocumentError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| DocumentError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        DocumentError::NotUtf8 {
            path: path.to_path_buf(),
            line: good.iter().filter(|&&b| b == b'\n').count() + 1,
        }
    })?;
    read_conllu(&text).map_err(|e| DocumentError::InFile {
        path: path.to_path_buf(),
        source: Box::new(e),
    })
}

/// Writes sentences as CoNLL-U: each as it was read (see the module doc), so that
/// `write_conllu(&read_conllu(text)?) == text` for every text that reads.
///
/// ```
/// use kiln_dragnn::document::{read_conllu, write_conllu};
/// let row = "1\tx\t_\t_\t_\t_\t0\troot\t_\t_";
/// let text = format!("\n# a\n{row}\n\n\n# b\n{row}");
/// assert_eq!(write_conllu(&read_conllu(&text).unwrap()), text);
/// // a sentence read last, written first, gets its separator back
/// let doc = read_conllu(&text).unwrap();
/// let swapped = write_conllu(&[doc[1].clone(), doc[0].clone()]);
/// assert_eq!(swapped, format!("# b\n{row}\n\n\n# a\n{row}\n\n\n"));
/// ```
pub fn write_conllu(sentences: &[Sentence]) -> String {
    let mut out = String::new();
    for (i, s) in sentences.iter().enumerate() {
        s.write_into(&mut out, i + 1 == sentences.len());
    }
    out
}

/// Writes sentences to a CoNLL-U file (see [`write_conllu`]).
///
/// ```
/// use kiln_dragnn::document::{read_conllu, read_conllu_file, write_conllu_file};
/// let dir = std::env::temp_dir().join(format!("kiln-dragnn-docw-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let doc = read_conllu("1\tx\t_\t_\t_\t_\t0\troot\t_\t_\n").unwrap();
/// write_conllu_file(dir.join("out.conllu"), &doc).unwrap();
/// assert_eq!(read_conllu_file(dir.join("out.conllu")).unwrap(), doc);
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn write_conllu_file(
    path: impl AsRef<Path>,
    sentences: &[Sentence],
) -> Result<(), DocumentError> {
    let path = path.as_ref();
    std::fs::write(path, write_conllu(sentences)).map_err(|source| DocumentError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The part of the treebank split a sentence belongs to.
///
/// ```
/// use kiln_dragnn::document::Part;
/// assert_eq!(Part::of_index(0), Part::Train);
/// assert_eq!(Part::of_index(8), Part::Dev);
/// assert_eq!(Part::of_index(19), Part::Test);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// Training sentences (`i % 10` in `0..=7`).
    Train,
    /// Development sentences (`i % 10 == 8`).
    Dev,
    /// Test sentences (`i % 10 == 9`).
    Test,
}

impl Part {
    /// The part of the sentence at index `i` (from 0) of its file.
    ///
    /// ```
    /// use kiln_dragnn::document::Part;
    /// assert_eq!(Part::of_index(7), Part::Train);
    /// ```
    pub fn of_index(i: usize) -> Part {
        match i % 10 {
            9 => Part::Test,
            8 => Part::Dev,
            _ => Part::Train,
        }
    }
}

/// A treebank split into train, dev and test sentences.
///
/// ```
/// use kiln_dragnn::document::{read_conllu, split};
/// let row = "1\tx\t_\t_\t_\t_\t0\troot\t_\t_\n\n";
/// let doc = read_conllu(&row.repeat(25)).unwrap();
/// let mut parts = split(doc.clone());
/// assert_eq!((parts.train.len(), parts.dev.len(), parts.test.len()), (21, 2, 2));
/// parts.append(split(doc));
/// assert_eq!(parts.len(), 50);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// Training sentences, in file order.
    pub train: Vec<Sentence>,
    /// Development sentences, in file order.
    pub dev: Vec<Sentence>,
    /// Test sentences, in file order.
    pub test: Vec<Sentence>,
}

impl Split {
    /// Appends another split's parts (the next file's) to this one's.
    ///
    /// ```
    /// use kiln_dragnn::document::Split;
    /// let mut a = Split::default();
    /// a.append(Split::default());
    /// assert!(a.is_empty());
    /// ```
    pub fn append(&mut self, other: Split) {
        self.train.extend(other.train);
        self.dev.extend(other.dev);
        self.test.extend(other.test);
    }

    /// The number of sentences in all three parts.
    ///
    /// ```
    /// use kiln_dragnn::document::Split;
    /// assert_eq!(Split::default().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.train.len() + self.dev.len() + self.test.len()
    }

    /// Whether all three parts are empty.
    ///
    /// ```
    /// use kiln_dragnn::document::Split;
    /// assert!(Split::default().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Splits one file's sentences in order: sentence `i` (from 0) goes to test when
/// `i % 10 == 9`, to dev when `i % 10 == 8`, else to train (the rule of design.md §7 and
/// of the turkish-treebanks wheel's own reader). Split each file separately and
/// [`Split::append`] them in file order.
///
/// ```
/// use kiln_dragnn::document::{read_conllu, split};
/// let doc = read_conllu(&"1\tx\t_\t_\t_\t_\t0\troot\t_\t_\n\n".repeat(10)).unwrap();
/// let parts = split(doc);
/// assert_eq!((parts.train.len(), parts.dev.len(), parts.test.len()), (8, 1, 1));
/// ```
pub fn split(sentences: impl IntoIterator<Item = Sentence>) -> Split {
    let mut out = Split::default();
    for (i, s) in sentences.into_iter().enumerate() {
        match Part::of_index(i) {
            Part::Train => out.train.push(s),
            Part::Dev => out.dev.push(s),
            Part::Test => out.test.push(s),
        }
    }
    out
}

/// Reads the Turkish treebank (`web.conllu` then `wiki.conllu` under `dir`, as
/// `scripts/fetch-data.sh` puts them in `data/turkish-treebanks/`) and splits each file
/// with [`split`]: 3,881 train, 485 dev and 485 test sentences.
///
/// ```
/// use kiln_dragnn::document::read_turkish_treebank;
/// let dir = std::env::temp_dir().join(format!("kiln-dragnn-tb-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let row = "1\tx\t_\t_\t_\t_\t0\troot\t_\t_\n\n";
/// std::fs::write(dir.join("web.conllu"), row.repeat(9)).unwrap();
/// std::fs::write(dir.join("wiki.conllu"), row.repeat(10)).unwrap();
/// let parts = read_turkish_treebank(&dir).unwrap();
/// assert_eq!((parts.train.len(), parts.dev.len(), parts.test.len()), (16, 2, 1));
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn read_turkish_treebank(dir: impl AsRef<Path>) -> Result<Split, DocumentError> {
    let dir = dir.as_ref();
    let mut out = Split::default();
    for file in ["web.conllu", "wiki.conllu"] {
        out.append(split(read_conllu_file(dir.join(file))?));
    }
    Ok(out)
}
