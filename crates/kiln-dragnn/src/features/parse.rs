//! The FML parser: an `fml` string into a small AST of [`FeatureNode`]s (SyntaxNet's
//! `FeatureFunctionDescriptor`: a feature type, an optional integer argument, named
//! parameters, an optional `:name`, nested features), and that tree flattened into
//! [`Template`]s, one per slot of the channel.
//!
//! The grammar is SyntaxNet's `FMLParser`'s:
//!
//! ```text
//! fml       := { feature }
//! feature   := NAME [ '(' parameter { ',' parameter } ')' ] [ ':' (NAME | STRING) ]
//!              [ '.' feature | '{' feature { feature } '}' ]
//! parameter := NUMBER | NAME '=' (NAME | NUMBER | STRING)
//! NAME      := (letter | '_' | '/') { letter | digit | '_' | '-' | '/' }
//! NUMBER    := ('+' | '-' | digit) { digit | '.' }      (an argument must fit an i32)
//! STRING    := '"' { any character but '"', or '\' and any character } '"'
//! ```
//!
//! Items are separated by optional whitespace. Where SyntaxNet's parser accepted more, this
//! one reports an error, so that [`crate::spec::fml_templates`] (which validation uses to
//! count a channel's `size`) and this parser agree on every `fml` both accept: an empty `fml`
//! or group (`f {}`), two positional arguments (`input(1,2)`), a `#` comment, and nesting
//! deeper than [`MAX_FML_DEPTH`] features are errors. Errors are [`FmlError`]s carrying the
//! byte offset in the `fml` string; nothing here panics or recurses deeper than
//! [`MAX_FML_DEPTH`].
//!
//! Depends on [`crate::spec`] (its [`FmlError`] and [`MAX_FML_DEPTH`]).

use std::fmt;

use crate::spec::{FmlError, MAX_FML_DEPTH};

/// One feature function of an `fml` string, with the features nested in it: `kind(argument,
/// key=value, ...):name`, then one nested feature after `.` or several in `{ }`.
///
/// ```
/// use kiln_dragnn::features::parse::parse_fml;
/// let nodes = parse_fml("stack(1).child(-1).prefix(length=3):p").unwrap();
/// let stack = &nodes[0];
/// assert_eq!((stack.kind.as_str(), stack.argument), ("stack", Some(1)));
/// let child = &stack.nested[0];
/// assert_eq!((child.kind.as_str(), child.argument), ("child", Some(-1)));
/// let prefix = &child.nested[0];
/// assert_eq!(prefix.parameters, [("length".to_string(), "3".to_string())]);
/// assert_eq!(prefix.name.as_deref(), Some("p"));
/// assert!(prefix.nested.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureNode {
    /// The feature type (`input`, `word`, `token`, ...).
    pub kind: String,
    /// The positional argument (`input(-1)`), if one was written. SyntaxNet's default is 0.
    pub argument: Option<i32>,
    /// Named parameters (`prefix(length=3)`), in order, values without their quotes.
    pub parameters: Vec<(String, String)>,
    /// The feature's name after `:`, if any (informative only).
    pub name: Option<String>,
    /// The nested features: one after `.`, the members of a `{ }` group, or none.
    pub nested: Vec<FeatureNode>,
    /// The byte offset of the feature type in the `fml` string.
    pub offset: usize,
}

/// One link of a [`Template`]'s chain: a feature function without its nested features.
///
/// ```
/// use kiln_dragnn::features::parse::parse_templates;
/// let t = &parse_templates("input(2).word").unwrap()[0];
/// assert_eq!(t.chain[0].kind, "input");
/// assert_eq!(t.chain[0].argument, Some(2));
/// assert_eq!(t.chain[1].to_string(), "word");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureCall {
    /// The feature type.
    pub kind: String,
    /// The positional argument, if written.
    pub argument: Option<i32>,
    /// Named parameters, in order.
    pub parameters: Vec<(String, String)>,
    /// The name after `:`, if any.
    pub name: Option<String>,
    /// The byte offset of the feature type in the `fml` string.
    pub offset: usize,
}

impl FeatureCall {
    /// The named parameter `key`'s value, if given (the last one where repeated).
    ///
    /// ```
    /// use kiln_dragnn::features::parse::parse_templates;
    /// let t = &parse_templates("input.suffix(length=2)").unwrap()[0];
    /// assert_eq!(t.chain[1].parameter("length"), Some("2"));
    /// assert_eq!(t.chain[1].parameter("width"), None);
    /// ```
    pub fn parameter(&self, key: &str) -> Option<&str> {
        self.parameters
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Writes the call in canonical FML: `kind`, `kind(1)`, `kind(length=3)`, `kind(-1):name`
/// (parameter values are quoted when they are not plain names or numbers).
impl fmt::Display for FeatureCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.kind)?;
        if self.argument.is_some() || !self.parameters.is_empty() {
            f.write_str("(")?;
            let mut first = true;
            if let Some(a) = self.argument {
                write!(f, "{a}")?;
                first = false;
            }
            for (k, v) in &self.parameters {
                if !first {
                    f.write_str(",")?;
                }
                first = false;
                let plain = !v.is_empty()
                    && v.chars()
                        .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '/' | '.' | '+'));
                if plain {
                    write!(f, "{k}={v}")?;
                } else {
                    write!(
                        f,
                        "{k}=\"{}\"",
                        v.replace('\\', "\\\\").replace('"', "\\\"")
                    )?;
                }
            }
            f.write_str(")")?;
        }
        if let Some(name) = &self.name {
            write!(f, ":{name}")?;
        }
        Ok(())
    }
}

/// One feature template: the chain of feature functions from a top-level feature down to a
/// leaf, as a channel's slot extracts it (a group `f { a b }` gives the templates `f.a` and
/// `f.b`).
///
/// ```
/// use kiln_dragnn::features::parse::parse_templates;
/// let ts = parse_templates("input.token { digit hyphen }").unwrap();
/// assert_eq!(ts.len(), 2);
/// assert_eq!(ts[1].to_string(), "input.token.hyphen");
/// assert_eq!(ts[1].chain.len(), 3);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// The feature functions, outermost first.
    pub chain: Vec<FeatureCall>,
}

/// Writes the template in canonical FML: the calls joined by `.`.
impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, call) in self.chain.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            write!(f, "{call}")?;
        }
        Ok(())
    }
}

impl FeatureNode {
    /// The node without its nested features.
    fn call(&self) -> FeatureCall {
        FeatureCall {
            kind: self.kind.clone(),
            argument: self.argument,
            parameters: self.parameters.clone(),
            name: self.name.clone(),
            offset: self.offset,
        }
    }

    /// The templates of this node: one per leaf under it, in order.
    ///
    /// ```
    /// use kiln_dragnn::features::parse::parse_fml;
    /// let node = &parse_fml("stack { word tag.x }").unwrap()[0];
    /// let names: Vec<String> = node.templates().iter().map(|t| t.to_string()).collect();
    /// assert_eq!(names, ["stack.word", "stack.tag.x"]);
    /// ```
    pub fn templates(&self) -> Vec<Template> {
        let mut out = Vec::new();
        let mut path = Vec::new();
        self.flatten(&mut path, &mut out);
        out
    }

    fn flatten(&self, path: &mut Vec<FeatureCall>, out: &mut Vec<Template>) {
        path.push(self.call());
        if self.nested.is_empty() {
            out.push(Template {
                chain: path.clone(),
            });
        } else {
            for n in &self.nested {
                n.flatten(path, out);
            }
        }
        path.pop();
    }
}

/// Writes the node in canonical FML (`f.g`, `f { a b }`).
impl fmt::Display for FeatureNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.call())?;
        match self.nested.as_slice() {
            [] => Ok(()),
            [one] => write!(f, ".{one}"),
            many => {
                f.write_str(" {")?;
                for n in many {
                    write!(f, " {n}")?;
                }
                f.write_str(" }")
            }
        }
    }
}

/// Parses an `fml` string into its top-level features (see the module doc for the grammar).
///
/// ```
/// use kiln_dragnn::features::parse::parse_fml;
/// let nodes = parse_fml("input.word stack { word tag }").unwrap();
/// assert_eq!(nodes.len(), 2);
/// assert_eq!(nodes[1].nested.len(), 2);
/// assert_eq!(nodes[1].to_string(), "stack { word tag }");
/// let err = parse_fml("input.token {digit").unwrap_err();
/// assert_eq!(err.offset, 12);
/// assert!(parse_fml("").is_err());
/// ```
pub fn parse_fml(fml: &str) -> Result<Vec<FeatureNode>, FmlError> {
    let mut p = Parser::new(fml);
    p.next_item()?;
    let mut out = Vec::new();
    while p.item != Item::End {
        let Item::Name(_) = p.item else {
            return Err(p.error_here(format!(
                "expected a feature type name, found {}",
                p.item.describe()
            )));
        };
        out.push(p.feature(0)?);
    }
    if out.is_empty() {
        return Err(FmlError {
            offset: 0,
            message: "no feature templates".to_owned(),
        });
    }
    Ok(out)
}

/// Parses an `fml` string and flattens it into its templates, one per channel slot.
///
/// ```
/// use kiln_dragnn::features::parse::parse_templates;
/// let ts = parse_templates("input(-1).word input.token {digit quote}").unwrap();
/// let texts: Vec<String> = ts.iter().map(|t| t.to_string()).collect();
/// assert_eq!(texts, ["input(-1).word", "input.token.digit", "input.token.quote"]);
/// ```
pub fn parse_templates(fml: &str) -> Result<Vec<Template>, FmlError> {
    Ok(parse_fml(fml)?
        .iter()
        .flat_map(FeatureNode::templates)
        .collect())
}

/// A lexical item of FML.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    End,
    Name(String),
    Number(String),
    Str(String),
    Punct(char),
}

impl Item {
    fn describe(&self) -> String {
        match self {
            Item::End => "the end".to_owned(),
            Item::Name(n) => format!("name {n:?}"),
            Item::Number(n) => format!("number {n}"),
            Item::Str(s) => format!("string {s:?}"),
            Item::Punct(c) => format!("{c:?}"),
        }
    }
}

struct Parser<'a> {
    text: &'a str,
    /// Where the next item's scan starts.
    pos: usize,
    /// The current item and where it starts.
    item: Item,
    item_start: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Parser<'a> {
        Parser {
            text,
            pos: 0,
            item: Item::End,
            item_start: 0,
        }
    }

    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn error_here(&self, message: impl Into<String>) -> FmlError {
        FmlError {
            offset: self.item_start,
            message: message.into(),
        }
    }

    fn is_name_start(c: char) -> bool {
        c.is_alphabetic() || c == '_' || c == '/'
    }

    fn is_name_char(c: char) -> bool {
        c.is_alphanumeric() || matches!(c, '_' | '-' | '/')
    }

    /// Reads the next item into `self.item`.
    fn next_item(&mut self) -> Result<(), FmlError> {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
        self.item_start = self.pos;
        let Some(c) = self.bump() else {
            self.item = Item::End;
            return Ok(());
        };
        self.item = if c.is_ascii_digit() || c == '+' || c == '-' {
            while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '.') {
                self.bump();
            }
            Item::Number(self.text[self.item_start..self.pos].to_owned())
        } else if c == '"' {
            let mut s = String::new();
            loop {
                match self.bump() {
                    None => return Err(self.error_here("a string without its closing '\"'")),
                    Some('"') => break,
                    Some('\\') => match self.bump() {
                        Some(e) => s.push(e),
                        None => return Err(self.error_here("a string without its closing '\"'")),
                    },
                    Some(other) => s.push(other),
                }
            }
            Item::Str(s)
        } else if Self::is_name_start(c) {
            while self.peek().is_some_and(Self::is_name_char) {
                self.bump();
            }
            Item::Name(self.text[self.item_start..self.pos].to_owned())
        } else if matches!(c, '(' | ')' | ',' | '=' | ':' | '.' | '{' | '}') {
            Item::Punct(c)
        } else {
            return Err(self.error_here(format!("unexpected character {c:?}")));
        };
        Ok(())
    }

    /// Parses one feature whose type name is the current item; `depth` counts the features
    /// above it.
    fn feature(&mut self, depth: usize) -> Result<FeatureNode, FmlError> {
        if depth >= MAX_FML_DEPTH {
            return Err(self.error_here(format!(
                "feature nested more than {MAX_FML_DEPTH} levels deep"
            )));
        }
        let kind = match &self.item {
            Item::Name(kind) => kind.clone(),
            other => {
                return Err(self.error_here(format!(
                    "expected a feature type name, found {}",
                    other.describe()
                )))
            }
        };
        let mut node = FeatureNode {
            kind,
            argument: None,
            parameters: Vec::new(),
            name: None,
            nested: Vec::new(),
            offset: self.item_start,
        };
        self.next_item()?;
        if self.item == Item::Punct('=') {
            return Err(self.error_here(format!(
                "'=' after {:?}: a parameter outside a feature's parentheses",
                node.kind
            )));
        }
        if self.item == Item::Punct('(') {
            let open = self.item_start;
            self.next_item()?;
            loop {
                self.parameter(&mut node)?;
                match self.item {
                    Item::Punct(',') => self.next_item()?,
                    Item::Punct(')') => break,
                    Item::End => {
                        return Err(FmlError {
                            offset: open,
                            message: "a '(' without its ')'".to_owned(),
                        })
                    }
                    _ => {
                        return Err(self.error_here(format!(
                            "expected ',' or ')' in the parameters of {:?}, found {}",
                            node.kind,
                            self.item.describe()
                        )))
                    }
                }
            }
            self.next_item()?;
        }
        if self.item == Item::Punct(':') {
            self.next_item()?;
            match std::mem::replace(&mut self.item, Item::End) {
                Item::Name(n) | Item::Str(n) => node.name = Some(n),
                other => {
                    self.item = other;
                    return Err(self.error_here(format!(
                        "expected a feature name after ':', found {}",
                        self.item.describe()
                    )));
                }
            }
            self.next_item()?;
        }
        if self.item == Item::Punct('.') {
            self.next_item()?;
            node.nested.push(self.feature(depth + 1)?);
        } else if self.item == Item::Punct('{') {
            let open = self.item_start;
            self.next_item()?;
            loop {
                match self.item {
                    Item::Punct('}') => break,
                    Item::End => {
                        return Err(FmlError {
                            offset: open,
                            message: "a '{' without its '}'".to_owned(),
                        })
                    }
                    _ => node.nested.push(self.feature(depth + 1)?),
                }
            }
            if node.nested.is_empty() {
                return Err(FmlError {
                    offset: open,
                    message: format!("the group of {:?} is empty", node.kind),
                });
            }
            self.next_item()?;
        }
        Ok(node)
    }

    /// Parses one parameter (the current item onwards) into `node`.
    fn parameter(&mut self, node: &mut FeatureNode) -> Result<(), FmlError> {
        match std::mem::replace(&mut self.item, Item::End) {
            Item::Number(text) => {
                if node.argument.is_some() {
                    return Err(
                        self.error_here(format!("{:?} has two positional arguments", node.kind))
                    );
                }
                let value = text.parse::<i32>().map_err(|_| {
                    self.error_here(format!("argument {text} is not a 32-bit integer"))
                })?;
                node.argument = Some(value);
                self.next_item()
            }
            Item::Name(key) => {
                self.next_item()?;
                if self.item != Item::Punct('=') {
                    return Err(self.error_here(format!(
                        "expected '=' after parameter {key:?}, found {}",
                        self.item.describe()
                    )));
                }
                self.next_item()?;
                let value = match std::mem::replace(&mut self.item, Item::End) {
                    Item::Name(v) | Item::Number(v) | Item::Str(v) => v,
                    other => {
                        self.item = other;
                        return Err(self.error_here(format!(
                            "expected a value for parameter {key:?}, found {}",
                            self.item.describe()
                        )));
                    }
                };
                node.parameters.push((key, value));
                self.next_item()
            }
            other => {
                self.item = other;
                Err(self.error_here(format!(
                    "expected an argument or `name=value` in the parameters of {:?}, found {}",
                    node.kind,
                    self.item.describe()
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flattening_matches_fml_templates() {
        for fml in [
            "input.word",
            "input.token {digit hyphen punctuation-amount quote }",
            "a { b { c d } e.f } g",
            "stack(1).child(-1).sibling(1).label prefix(length=3) x:y",
        ] {
            let ours: Vec<String> = parse_templates(fml)
                .unwrap()
                .iter()
                .map(|t| t.to_string())
                .collect();
            assert_eq!(ours, crate::spec::fml_templates(fml).unwrap(), "{fml}");
        }
    }

    #[test]
    fn rejects_malformed_fml() {
        for bad in [
            "",
            " ",
            "a {",
            "a }",
            "a {}",
            "a(1",
            "a..b",
            ".a",
            "a(()",
            "a(1,2)",
            "a(x)",
            "a(x=)",
            "a()",
            "a=1",
            "a:",
            "a(1)(2)",
            "a(\"x",
            "#c",
            "a(99999999999)",
            "a(1.5)",
            "a(-)",
            "a.",
            "a.1",
        ] {
            assert!(parse_fml(bad).is_err(), "{bad:?}");
        }
        let deep = "a.".repeat(100_000) + "a";
        assert!(parse_fml(&deep).is_err());
        let deep = "a {".repeat(100_000);
        assert!(parse_fml(&deep).is_err());
    }
}
