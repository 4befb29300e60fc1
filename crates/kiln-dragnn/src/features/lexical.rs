//! The word-shape features of SyntaxNet's `sentence_features.cc` — `digit`, `hyphen`,
//! `capitalization`, `punctuation-amount` and `quote` — as small enumerations computed from a
//! token's form, with the character classes of SyntaxNet's `char_properties.cc` they use.
//!
//! The values and their quirks are SyntaxNet's:
//! - `digit` and `capitalization` look at ASCII bytes only (`capitalization(utf8=true)` uses
//!   Unicode case instead, which SyntaxNet left unimplemented);
//! - `punctuation-amount` tests each character against SyntaxNet's punctuation-or-symbol
//!   list (ASCII punctuation plus the listed Unicode punctuation, currency, sub/superscript
//!   and unit symbols — not the whole Unicode `P`/`S` categories), and an empty form counts
//!   as all punctuation;
//! - `quote` gives the two-character Penn Treebank quotes ` `` ` (open) and `''` (close),
//!   and resolves a one-*byte* form that is both an open and a close quote (`"`, `'`, `` ` ``)
//!   by the parity of such quotes before it in the sentence; a multi-byte quote such as `“`
//!   or `«` is `NO_QUOTE`, as in SyntaxNet.
//!
//! Depends on [`crate::document`] (the sentence's forms).

use crate::document::Sentence;

/// A word-shape feature: an enumeration of a token's form.
///
/// ```
/// use kiln_dragnn::features::lexical::Category;
/// assert_eq!(Category::Quote.cardinality(), 4);
/// assert_eq!(Category::Digit.name(), "digit");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Category {
    /// `digit`: 0 no digit, 1 some digits, 2 all digits (ASCII).
    Digit,
    /// `hyphen`: 0 no `-`, 1 has a `-`.
    Hyphen,
    /// `capitalization`: 0 lowercase, 1 uppercase, 2 capitalized, 3 capitalized and
    /// sentence-initial, 4 non-alphabetic. `utf8` uses Unicode case rather than ASCII.
    Capitalization {
        /// Whether to use Unicode case (the `utf8=true` parameter).
        utf8: bool,
    },
    /// `punctuation-amount`: 0 none, 1 some, 2 all characters punctuation or symbols.
    PunctuationAmount,
    /// `quote`: 0 no quote, 1 open, 2 close, 3 unknown (resolved in a sentence by parity).
    Quote,
    /// `space-after` (kiln-dragnn's own): 0 when MISC has `SpaceAfter=No`, else 1 (in
    /// treebanks that split words into parts, the parts of one word).
    SpaceAfter,
}

impl Category {
    /// The number of values (SyntaxNet's `CARDINALITY`).
    ///
    /// ```
    /// use kiln_dragnn::features::lexical::Category;
    /// assert_eq!(Category::Capitalization { utf8: false }.cardinality(), 5);
    /// assert_eq!(Category::Hyphen.cardinality(), 2);
    /// ```
    pub fn cardinality(self) -> usize {
        match self {
            Category::Digit | Category::PunctuationAmount => 3,
            Category::Hyphen | Category::SpaceAfter => 2,
            Category::Capitalization { .. } => 5,
            Category::Quote => 4,
        }
    }

    /// The FML name.
    ///
    /// ```
    /// use kiln_dragnn::features::lexical::Category;
    /// assert_eq!(Category::PunctuationAmount.name(), "punctuation-amount");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Category::Digit => "digit",
            Category::Hyphen => "hyphen",
            Category::Capitalization { .. } => "capitalization",
            Category::PunctuationAmount => "punctuation-amount",
            Category::Quote => "quote",
            Category::SpaceAfter => "space-after",
        }
    }

    /// The value of word `focus` (in range) of `sentence`.
    ///
    /// ```
    /// use kiln_dragnn::document::read_conllu;
    /// use kiln_dragnn::features::lexical::Category;
    /// let doc = read_conllu("1\t\"\t_\t_\t_\t_\t_\t_\t_\t_\n\
    ///                        2\tWell-known\t_\t_\t_\t_\t_\t_\t_\t_\n\
    ///                        3\t\"\t_\t_\t_\t_\t_\t_\t_\t_\n").unwrap();
    /// let s = &doc[0];
    /// assert_eq!(Category::Quote.value(s, 0), 1); // open
    /// assert_eq!(Category::Quote.value(s, 2), 2); // close: the second `"`
    /// assert_eq!(Category::Hyphen.value(s, 1), 1);
    /// assert_eq!(Category::Capitalization { utf8: false }.value(s, 1), 2);
    /// assert_eq!(Category::PunctuationAmount.value(s, 1), 1);
    /// ```
    pub fn value(self, sentence: &Sentence, focus: usize) -> usize {
        let form = sentence.form(focus);
        match self {
            Category::Digit => digit(form),
            Category::Hyphen => usize::from(form.contains('-')),
            Category::Capitalization { utf8 } => capitalization(form, focus == 0, utf8),
            Category::PunctuationAmount => punctuation_amount(form),
            Category::SpaceAfter => {
                usize::from(sentence.word(focus).is_none_or(|w| w.space_after()))
            }
            Category::Quote => match quote(form) {
                UNKNOWN_QUOTE => {
                    let before = (0..focus)
                        .filter(|&i| quote(sentence.form(i)) == UNKNOWN_QUOTE)
                        .count();
                    if before % 2 == 0 {
                        OPEN_QUOTE
                    } else {
                        CLOSE_QUOTE
                    }
                }
                q => q,
            },
        }
    }
}

const NO_QUOTE: usize = 0;
const OPEN_QUOTE: usize = 1;
const CLOSE_QUOTE: usize = 2;
const UNKNOWN_QUOTE: usize = 3;

/// `digit` of a form: ASCII digits only; an empty form has none.
fn digit(form: &str) -> usize {
    let bytes = form.as_bytes();
    let Some((first, rest)) = bytes.split_first() else {
        return 0;
    };
    let mut has = first.is_ascii_digit();
    let mut all = has;
    for b in rest {
        let d = b.is_ascii_digit();
        all &= d;
        has |= d;
        if has && !all {
            return 1;
        }
    }
    if all {
        2
    } else {
        0
    }
}

/// `capitalization` of a form.
fn capitalization(form: &str, sentence_initial: bool, utf8: bool) -> usize {
    let (upper, lower) = if utf8 {
        (
            form.chars().any(char::is_uppercase),
            form.chars().any(char::is_lowercase),
        )
    } else {
        (
            form.bytes().any(|b| b.is_ascii_uppercase()),
            form.bytes().any(|b| b.is_ascii_lowercase()),
        )
    };
    match (upper, lower) {
        (false, true) => 0,
        (true, false) => 1,
        (false, false) => 4,
        (true, true) if sentence_initial => 3,
        (true, true) => 2,
    }
}

/// `punctuation-amount` of a form.
fn punctuation_amount(form: &str) -> usize {
    let mut has = false;
    let mut all = true;
    for c in form.chars() {
        let p = is_punctuation_or_symbol(c);
        all &= p;
        has |= p;
        if has && !all {
            return 1;
        }
    }
    if all {
        2
    } else {
        0
    }
}

/// `quote` of a form, before the sentence-level resolution of unknown quotes.
fn quote(form: &str) -> usize {
    match form {
        "``" => OPEN_QUOTE,
        "''" => CLOSE_QUOTE,
        _ if form.len() == 1 => {
            let c = form.chars().next().unwrap_or('\0');
            match (is_open_quote(c), is_close_quote(c)) {
                (true, false) => OPEN_QUOTE,
                (false, true) => CLOSE_QUOTE,
                (true, true) => UNKNOWN_QUOTE,
                (false, false) => NO_QUOTE,
            }
        }
        _ => NO_QUOTE,
    }
}

/// SyntaxNet's `open_quote` characters.
fn is_open_quote(c: char) -> bool {
    matches!(
        c as u32,
        0x22 | 0x27 | 0x60 | 0xAB | 0xBB | 0x2018
            ..=0x201F
                | 0x2039
                | 0x203A
                | 0x300C
                | 0x300E
                | 0x301D
                | 0xFE41
                | 0xFE43
                | 0xFF02
                | 0xFF07
                | 0xFF62
    )
}

/// SyntaxNet's `close_quote` characters.
fn is_close_quote(c: char) -> bool {
    matches!(
        c as u32,
        0x22 | 0x27
            | 0x60
            | 0xAB
            | 0xBB
            | 0x2018
            | 0x2019
            | 0x201C
            | 0x201D
            | 0x2039
            | 0x203A
            | 0x300D
            | 0x300F
            | 0x301E
            | 0x301F
            | 0xFE42
            | 0xFE44
            | 0xFF02
            | 0xFF07
            | 0xFF63
    )
}

/// SyntaxNet's `punctuation_or_symbol` characters: ASCII punctuation; the open and close
/// expression and quote marks; sentence-leading and -ending marks; connector, dash and other
/// punctuation; sub- and superscripts; currency signs; the token prefix and suffix symbols.
///
/// ```
/// use kiln_dragnn::features::lexical::is_punctuation_or_symbol;
/// for c in ['.', '-', '"', '$', '¿', '«', '—', '…', '€', '%', '°', '、'] {
///     assert!(is_punctuation_or_symbol(c), "{c}");
/// }
/// for c in ['a', '7', ' ', 'ş', '中'] {
///     assert!(!is_punctuation_or_symbol(c), "{c}");
/// }
/// ```
pub fn is_punctuation_or_symbol(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_punctuation();
    }
    if is_open_quote(c) || is_close_quote(c) {
        return true;
    }
    matches!(
        c as u32,
        // Latin-1: ¡ ¢ £ ¤ ¥ © ª « ® ° ² ³ · ¹ º » ¿
        0xA1..=0xA5
            | 0xA9
            | 0xAA
            | 0xAE
            | 0xB0
            | 0xB2
            | 0xB3
            | 0xB7
            | 0xB9
            | 0xBA
            | 0xBF
            // florin, Greek, Armenian, Hebrew, Arabic, Syriac
            | 0x0192
            | 0x037E
            | 0x0387
            | 0x055C
            | 0x055E
            | 0x0589
            | 0x058A
            | 0x05C3
            | 0x060C
            | 0x061B
            | 0x061F
            | 0x066A..=0x066C
            | 0x06D4
            | 0x0700..=0x070A
            | 0x070C
            // Indic, Thai, Tibetan, Myanmar, Ethiopic, Canadian, Runic, Khmer, Mongolian, Limbu
            | 0x0964
            | 0x0965
            | 0x09F2
            | 0x09F3
            | 0x0AF1
            | 0x0BF9
            | 0x0E3F
            | 0x0E5A
            | 0x0E5B
            | 0x0F08
            | 0x0F0D..=0x0F12
            | 0x104A
            | 0x104B
            | 0x1361..=0x1368
            | 0x166D
            | 0x166E
            | 0x16EB..=0x16ED
            | 0x17D4..=0x17D6
            | 0x17DA
            | 0x17DB
            | 0x1802..=0x1806
            | 0x1808
            | 0x1809
            | 0x1944
            | 0x1945
            // General punctuation
            | 0x2010..=0x2016
            | 0x2020
            | 0x2021
            | 0x2026
            | 0x2030..=0x2034
            | 0x203C
            | 0x203D
            | 0x2040
            | 0x2047..=0x2049
            | 0x2053
            // super- and subscripts, currency
            | 0x2070
            | 0x2071
            | 0x2074..=0x207F
            | 0x2080..=0x208E
            | 0x20A0..=0x20B1
            // letterlike symbols, minus
            | 0x2103
            | 0x2106
            | 0x2109
            | 0x2116
            | 0x2117
            | 0x2120
            | 0x2122
            | 0x2125
            | 0x2126
            | 0x212A
            | 0x212B
            | 0x2133
            | 0x2212
            // brackets
            | 0x27E6..=0x27EB
            | 0x2983..=0x2998
            | 0x29D8..=0x29DB
            | 0x29FC
            | 0x29FD
            // CJK
            | 0x3001
            | 0x3002
            | 0x3008..=0x3011
            | 0x3014..=0x301B
            | 0x301C
            | 0x3030
            | 0x30FB
            // presentation forms, small forms
            | 0xFD3E
            | 0xFD3F
            | 0xFDFC
            | 0xFE31
            | 0xFE32
            | 0xFE50
            | 0xFE51
            | 0xFE52
            | 0xFE54..=0xFE59
            | 0xFE5A..=0xFE5C
            | 0xFE61
            | 0xFE63
            | 0xFE68
            // fullwidth and halfwidth forms
            | 0xFF01
            | 0xFF08
            | 0xFF09
            | 0xFF0C..=0xFF0F
            | 0xFF1A
            | 0xFF1B
            | 0xFF1F
            | 0xFF3B..=0xFF3D
            | 0xFF5B
            | 0xFF5D
            | 0xFF61
            | 0xFF64
            | 0xFF65
            | 0xFFE0
            | 0xFFE1
            | 0xFFE5
            | 0xFFE6
    )
}

/// Whether `form` starts with a separator (a space character), SyntaxNet's break character
/// for the `char` feature.
///
/// ```
/// use kiln_dragnn::features::lexical::is_break_char;
/// assert!(is_break_char(" ") && is_break_char("\u{3000}"));
/// assert!(!is_break_char("a") && !is_break_char(""));
/// ```
pub fn is_break_char(form: &str) -> bool {
    form.chars()
        .next()
        .is_some_and(|c| c.is_whitespace() || matches!(c as u32, 0x180E | 0xE5E5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        assert_eq!(
            [
                digit(""),
                digit("ab"),
                digit("a1"),
                digit("12"),
                digit("1a")
            ],
            [0, 0, 1, 2, 1]
        );
        assert_eq!(capitalization("Ab", true, false), 3);
        assert_eq!(capitalization("Äb", false, false), 0); // ASCII only
        assert_eq!(capitalization("Äb", false, true), 2);
        assert_eq!(punctuation_amount(""), 2);
        assert_eq!(punctuation_amount("a.b"), 1);
        assert_eq!(punctuation_amount("..."), 2);
        assert_eq!(punctuation_amount("abc"), 0);
        assert_eq!(
            [
                quote("``"),
                quote("''"),
                quote("\""),
                quote("“"),
                quote("a")
            ],
            [1, 2, 3, 0, 0]
        );
        assert!(is_open_quote('“') && is_close_quote('“') && is_open_quote('‛'));
        assert!(!is_close_quote('‛') && !is_close_quote('„'));
    }
}
