//! Splitting a channel's `fml` string into its feature templates, as the `size` of a
//! [`FixedFeatureChannel`](super::FixedFeatureChannel) or
//! [`LinkedFeatureChannel`](super::LinkedFeatureChannel) counts them.
//!
//! The grammar is SyntaxNet's feature extraction language, read only as far as counting and
//! naming templates needs:
//!
//! ```text
//! model     := { extractor }
//! extractor := spec [ '.' extractor | '{' { extractor } '}' ]
//! spec      := name [ '(' arguments ')' ] [ ':' name ]
//! ```
//!
//! Templates are separated by whitespace; a group `f { a b c }` stands for the templates
//! `f.a f.b f.c`, so `input.token {digit hyphen punctuation-amount quote}` is 4 templates (the
//! UD Hungarian spec gives that channel `size: 4`).
//!
//! Depends on nothing else in the crate.

use std::fmt;

/// The deepest chain of `.` and `{ }` nesting accepted in one template; deeper input is an
/// error, not a stack overflow.
pub const MAX_FML_DEPTH: usize = 64;

/// Why an `fml` string cannot be split into templates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FmlError {
    /// The byte offset in the `fml` string where the problem was found.
    pub offset: usize,
    /// What is wrong there.
    pub message: String,
}

impl fmt::Display for FmlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.message)
    }
}

impl std::error::Error for FmlError {}

/// The feature templates of an `fml` string, each written out in full (a group's members are
/// prefixed with the group's path, `f { a b }` giving `f.a` and `f.b`).
///
/// An empty `fml`, an empty group, an unbalanced bracket or a character that cannot start a
/// feature name is an error.
///
/// # Examples
///
/// ```
/// use kiln_dragnn::spec::fml_templates;
///
/// let words = fml_templates("input(-1).word input.word input(1).word").unwrap();
/// assert_eq!(words, ["input(-1).word", "input.word", "input(1).word"]);
///
/// let other = fml_templates("input.token {digit hyphen punctuation-amount quote }").unwrap();
/// assert_eq!(other.len(), 4);
/// assert_eq!(other[0], "input.token.digit");
///
/// assert!(fml_templates("input.token {digit").is_err());
/// ```
pub fn fml_templates(fml: &str) -> Result<Vec<String>, FmlError> {
    let mut parser = Parser { text: fml, pos: 0 };
    let mut out = Vec::new();
    parser.skip_whitespace();
    while parser.pos < fml.len() {
        if parser.peek() == Some('}') {
            return Err(parser.error("a '}' without its '{'"));
        }
        parser.extractor("", 0, &mut out)?;
        parser.skip_whitespace();
    }
    if out.is_empty() {
        return Err(FmlError {
            offset: 0,
            message: "no feature templates".to_owned(),
        });
    }
    Ok(out)
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn error(&self, message: impl Into<String>) -> FmlError {
        FmlError {
            offset: self.pos,
            message: message.into(),
        }
    }

    fn skip_whitespace(&mut self) {
        while let Some(c) = self.peek().filter(|c| c.is_whitespace()) {
            self.pos += c.len_utf8();
        }
    }

    fn is_name_char(c: char) -> bool {
        c.is_alphanumeric() || matches!(c, '_' | '-' | '/')
    }

    fn name(&mut self) -> Result<(), FmlError> {
        let start = self.pos;
        while let Some(c) = self.peek().filter(|&c| Self::is_name_char(c)) {
            self.pos += c.len_utf8();
        }
        if self.pos == start {
            return Err(match self.peek() {
                Some(c) => self.error(format!("expected a feature name, found {c:?}")),
                None => self.error("expected a feature name, found the end"),
            });
        }
        Ok(())
    }

    /// `name [ '(' arguments ')' ] [ ':' name ]`, returned as written.
    fn spec(&mut self) -> Result<&'a str, FmlError> {
        let start = self.pos;
        self.name()?;
        if self.peek() == Some('(') {
            let open = self.pos;
            self.pos += 1;
            let mut in_string = false;
            loop {
                let Some(c) = self.peek() else {
                    return Err(FmlError {
                        offset: open,
                        message: "a '(' without its ')'".to_owned(),
                    });
                };
                self.pos += c.len_utf8();
                match c {
                    '\\' if in_string => {
                        if let Some(escaped) = self.peek() {
                            self.pos += escaped.len_utf8();
                        }
                    }
                    '"' => in_string = !in_string,
                    ')' if !in_string => break,
                    '(' | '{' | '}' if !in_string => {
                        return Err(FmlError {
                            offset: self.pos - 1,
                            message: format!("{c:?} inside the arguments of a feature"),
                        })
                    }
                    _ => {}
                }
            }
        }
        if self.peek() == Some(':') {
            self.pos += 1;
            self.name()?;
        }
        Ok(&self.text[start..self.pos])
    }

    fn extractor(
        &mut self,
        prefix: &str,
        depth: usize,
        out: &mut Vec<String>,
    ) -> Result<(), FmlError> {
        if depth >= MAX_FML_DEPTH {
            return Err(self.error(format!(
                "feature nested more than {MAX_FML_DEPTH} levels deep"
            )));
        }
        let spec = self.spec()?;
        let full = if prefix.is_empty() {
            spec.to_owned()
        } else {
            format!("{prefix}.{spec}")
        };
        if self.peek() == Some('.') {
            self.pos += 1;
            return self.extractor(&full, depth + 1, out);
        }
        let before_space = self.pos;
        self.skip_whitespace();
        if self.peek() != Some('{') {
            self.pos = before_space;
            out.push(full);
            return Ok(());
        }
        let open = self.pos;
        self.pos += 1;
        let count = out.len();
        self.skip_whitespace();
        loop {
            match self.peek() {
                None => {
                    return Err(FmlError {
                        offset: open,
                        message: "a '{' without its '}'".to_owned(),
                    })
                }
                Some('}') => {
                    self.pos += 1;
                    break;
                }
                Some(_) => {
                    self.extractor(&full, depth + 1, out)?;
                    self.skip_whitespace();
                }
            }
        }
        if out.len() == count {
            return Err(FmlError {
                offset: open,
                message: format!("the group of {full:?} is empty"),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_plain_and_grouped_templates() {
        assert_eq!(fml_templates("constant").unwrap(), ["constant"]);
        assert_eq!(
            fml_templates("stack.child(1).sibling(-1).label prefix(length=3)").unwrap(),
            ["stack.child(1).sibling(-1).label", "prefix(length=3)"]
        );
        assert_eq!(
            fml_templates("input.token{a b{c d}} e").unwrap(),
            ["input.token.a", "input.token.b.c", "input.token.b.d", "e"]
        );
        assert_eq!(
            fml_templates("input.word:words").unwrap(),
            ["input.word:words"]
        );
    }

    #[test]
    fn rejects_malformed_templates() {
        for bad in ["", "   ", "a {", "a }", "a {}", "a(1", "a..b", ".a", "a(()"] {
            assert!(fml_templates(bad).is_err(), "{bad:?}");
        }
        let deep = "a.".repeat(100_000) + "a";
        assert!(fml_templates(&deep).is_err());
        let deep = "a {".repeat(100_000);
        assert!(fml_templates(&deep).is_err());
    }
}
