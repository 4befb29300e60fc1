//! Typed feature templates: a parsed [`Template`] checked against the feature functions
//! kiln-dragnn knows and turned into a [`Feature`] — a [`Path`] (a state locator and the tree
//! hops after it) and the value read at the located token, or the state feature
//! `last-action` — with errors naming the channel and the template.
//!
//! # The feature functions (SyntaxNet's registries)
//!
//! A template starts with a *state feature*:
//! - `input(k)`: the token `k` positions from the input pointer (default `k = 0`);
//! - `stack(k)`: stack position `k`, 0 the top (default 0);
//! - `last-action(k)`: the previous action + 1, or 0 before the first (default `k = 0`;
//!   `k < 0` is always 0 as in SyntaxNet; `k > 0`, an older action, needs an action history
//!   the state does not keep and is unsupported).
//!
//! After `input`/`stack` come *token hops* (SyntaxNet's parser index locators), applied to
//! the partial tree built so far:
//! - `head(k)`: the head, `k` times;
//! - `child(k)`: `k > 0` the rightmost child, `k < 0` the leftmost, `|k|` levels down;
//! - `sibling(k)`: `k < 0` the `|k|`-th sibling to the left, `k > 0` to the right.
//!
//! **Their default argument is 0, as in SyntaxNet** (whose `FeatureFunctionDescriptor`'s
//! `argument` defaults to 0 for every feature): a bare `head`, `child` or `sibling` is the
//! identity, so write `head(1)`, `child(1)`, `sibling(-1)`.
//!
//! Then one *token feature* ends the template: `word`, `known-word`, `char`, `tag`,
//! `pred-tag`, `label`, `digit`, `hyphen`, `capitalization` (`utf8=true|false`),
//! `punctuation-amount`, `quote`, `prefix(length=n)`, `suffix(length=n)`, `char-ngram`
//! (`max_char_ngram_length=3`, `use_terminators=false`, `mark_boundaries=false` by default;
//! one feature per n-gram), `focus`, `gold-head`, and kiln-dragnn's own `lemma` (the LEMMA column's id in the lemma map) and
//! `space-after` (0 where MISC has `SpaceAfter=No`); or `token`, after which come SyntaxNet's *sentence* features: optional
//! `offset(k)` hops (`focus + k`, unchecked as in SyntaxNet) and one of `word`, `known-word`,
//! `char`, `tag`, `label` (the gold DEPREL), `digit`, `hyphen`, `capitalization`,
//! `punctuation-amount`, `quote`, `prefix(length=n)`, `suffix(length=n)`, `char-ngram`,
//! `lemma`, `space-after`. Sentence features
//! have no `<ROOT>` value: the root counts as outside the sentence.
//!
//! Known but unsupported (an [`FeatureError::Unsupported`] error): `lcword`,
//! `morphology-set` (resources kiln-dragnn's term maps do not hold), `char-input`,
//! `last-char-focus`, `first-char-focus` (character-level components), `sentence`.
//!
//! Depends on [`super::parse`] (the templates), [`super::lexical`] (word shapes),
//! [`super::FeatureError`], [`crate::term_map::NgramOptions`] and
//! [`crate::transition::ParserState`] (locating).

use super::lexical::Category;
use super::parse::{FeatureCall, Template};
use super::FeatureError;
use crate::term_map::NgramOptions;
use crate::transition::ParserState;

/// Where a template starts: a position the parser state locates.
///
/// ```
/// use kiln_dragnn::features::template::Locator;
/// assert_ne!(Locator::Input(0), Locator::Stack(0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Locator {
    /// `input(k)`: [`ParserState::input`]`(k)`.
    Input(i32),
    /// `stack(k)`: [`ParserState::stack`]`(k)`.
    Stack(i32),
}

/// A move in the partial tree from one located token to another.
///
/// ```
/// use kiln_dragnn::features::template::Hop;
/// assert_eq!(Hop::Child(-1), Hop::Child(-1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hop {
    /// `head(k)`: [`ParserState::ancestor`]`(focus, k)` (`k <= 0`: the token itself).
    Head(i32),
    /// `child(k)`: [`ParserState::rightmost_child`] for `k > 0`,
    /// [`ParserState::leftmost_child`] for `k < 0`, `|k|` levels (0: the token itself).
    Child(i32),
    /// `sibling(k)`: [`ParserState::left_sibling`] for `k < 0`,
    /// [`ParserState::right_sibling`] for `k > 0` (0: the token itself).
    Sibling(i32),
}

/// A locator and the hops after it: a way from the parser state to a token.
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
/// use kiln_dragnn::features::template::{Hop, Locator, Path};
/// let doc = read_conllu("1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
/// let mut s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
/// s.push(1);
/// s.add_arc(0, 1, 0);
/// let path = Path { locator: Locator::Stack(0), hops: vec![Hop::Child(-1)] };
/// assert_eq!(path.locate(&s), 0);
/// let path = Path { locator: Locator::Stack(1), hops: vec![Hop::Head(1)] };
/// assert_eq!(path.locate(&s), -2); // no stack(1)
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Path {
    /// The starting position.
    pub locator: Locator,
    /// The hops, in order.
    pub hops: Vec<Hop>,
}

impl Path {
    /// The located token: its index, -1 for the root, -2 for no token (SyntaxNet's focus).
    /// A hop from a position that is neither a token nor the root gives -2.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
    /// use kiln_dragnn::features::template::{Hop, Locator, Path};
    /// let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
    /// let s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
    /// let input = |k| Path { locator: Locator::Input(k), hops: vec![] };
    /// assert_eq!((input(0).locate(&s), input(-1).locate(&s), input(1).locate(&s)), (0, -1, -2));
    /// let up = Path { locator: Locator::Input(0), hops: vec![Hop::Head(1)] };
    /// assert_eq!(up.locate(&s), -1); // unattached: the root
    /// ```
    pub fn locate(&self, state: &ParserState) -> i32 {
        let mut focus = match self.locator {
            Locator::Input(k) => state.input(k),
            Locator::Stack(k) => state.stack(k),
        };
        for hop in &self.hops {
            if focus == -2 {
                break;
            }
            focus = match *hop {
                Hop::Head(k) => state.ancestor(focus, u32::try_from(k).unwrap_or(0)),
                Hop::Child(k) if k < 0 => state.leftmost_child(focus, k.unsigned_abs()),
                Hop::Child(k) => state.rightmost_child(focus, k.unsigned_abs()),
                Hop::Sibling(k) if k < 0 => state.left_sibling(focus, k.unsigned_abs()),
                Hop::Sibling(k) => state.right_sibling(focus, k.unsigned_abs()),
            };
        }
        focus
    }
}

/// What a token feature reads at the located token.
///
/// ```
/// use kiln_dragnn::features::template::TokenValue;
/// assert_eq!(TokenValue::Prefix(3), TokenValue::Prefix(3));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenValue {
    /// `word`: the form's id in the word map.
    Word,
    /// `known-word`: the form's id in the word map; nothing for unknown forms.
    KnownWord,
    /// `lemma` (kiln-dragnn's own): the LEMMA's id in the lemma map (`_` is a term too).
    Lemma,
    /// `char`: the form's id in the character map (for one-character tokens).
    Char,
    /// `tag`: the sentence's tag (gold or input tag) in the tag map.
    Tag,
    /// `pred-tag`: the tag the state's tagger assigned; nothing before it did.
    PredTag,
    /// `label`: the state's arc label (parser context) or the gold DEPREL (inside `token`).
    Label,
    /// A word-shape enumeration.
    Shape(Category),
    /// `prefix(length=n)`.
    Prefix(u32),
    /// `suffix(length=n)`.
    Suffix(u32),
    /// `char-ngram(max_char_ngram_length=n,use_terminators=b,mark_boundaries=b)`: the ids
    /// of the form's character n-grams ([`crate::term_map::char_ngrams`]), one feature per
    /// n-gram the table holds (a multi-valued slot: its embeddings are summed).
    CharNgram(NgramOptions),
    /// `focus`: the located index itself (negative: nothing).
    Focus,
    /// `gold-head`: the located token's gold head (negative: nothing).
    GoldHead,
}

/// A typed template.
///
/// ```
/// use kiln_dragnn::features::{parse::parse_templates, template::{compile, Feature, TokenValue}};
/// let t = &parse_templates("stack.child(1).sibling(-1).label").unwrap()[0];
/// let Feature::Token { path, token, value } = compile("labels", t).unwrap() else { panic!() };
/// assert_eq!((path.hops.len(), token, value), (2, None, TokenValue::Label));
/// let t = &parse_templates("input.wrod").unwrap()[0];
/// assert!(compile("words", t).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Feature {
    /// A token feature read at a located token.
    Token {
        /// How the token is located.
        path: Path,
        /// `None` for a parser feature; inside `token`, the sum of the `offset(k)` hops.
        token: Option<i64>,
        /// What is read.
        value: TokenValue,
    },
    /// `last-action(k)` (only `k <= 0`).
    LastAction(i32),
}

/// The parser features that can end a template, for error messages.
const TOKEN_FEATURES: &str = "word, known-word, lemma, char, tag, pred-tag, label, digit, \
     hyphen, capitalization, punctuation-amount, quote, space-after, prefix, suffix, char-ngram, focus, gold-head, token, \
     or a hop head, child, sibling";

/// The sentence features allowed inside `token`, for error messages.
const SENTENCE_FEATURES: &str = "word, known-word, lemma, char, tag, label, digit, hyphen, \
     capitalization, punctuation-amount, quote, space-after, prefix, suffix, char-ngram, or the hop \
     offset";

/// Feature functions SyntaxNet has that kiln-dragnn does not support, and why.
fn unsupported(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "lcword" => "it needs an lc-word-map resource, which kiln-dragnn's term maps do not hold",
        "morphology-set" => {
            "it needs a morphology-map resource, which kiln-dragnn's term maps do not hold"
        }
        "char-input" | "last-char-focus" | "first-char-focus" | "text-char" => {
            "character-level components are not part of kiln-dragnn"
        }
        "sentence" => "whole-sentence features are not part of kiln-dragnn",
        _ => return None,
    })
}

/// Builds the errors of one template of one channel.
struct Ctx<'a> {
    channel: &'a str,
    template: String,
}

impl Ctx<'_> {
    fn unknown(&self, call: &FeatureCall, expected: &str) -> FeatureError {
        if let Some(reason) = unsupported(&call.kind) {
            return self.unsupported(call, reason);
        }
        FeatureError::UnknownFeature {
            channel: self.channel.to_owned(),
            template: self.template.clone(),
            feature: call.kind.clone(),
            expected: expected.to_owned(),
        }
    }

    fn bad(&self, call: &FeatureCall, message: impl Into<String>) -> FeatureError {
        FeatureError::BadArgument {
            channel: self.channel.to_owned(),
            template: self.template.clone(),
            feature: call.kind.clone(),
            message: message.into(),
        }
    }

    fn unsupported(&self, call: &FeatureCall, reason: impl Into<String>) -> FeatureError {
        FeatureError::Unsupported {
            channel: self.channel.to_owned(),
            template: self.template.clone(),
            feature: call.kind.clone(),
            reason: reason.into(),
        }
    }

    /// Checks that `call` has no named parameter other than `allowed`.
    fn only_parameters(&self, call: &FeatureCall, allowed: &[&str]) -> Result<(), FeatureError> {
        match call
            .parameters
            .iter()
            .find(|(k, _)| !allowed.contains(&k.as_str()))
        {
            None => Ok(()),
            Some((k, _)) if allowed.is_empty() => {
                Err(self.bad(call, format!("takes no parameter, found `{k}`")))
            }
            Some((k, _)) => Err(self.bad(
                call,
                format!("unknown parameter `{k}` (it takes {})", allowed.join(", ")),
            )),
        }
    }

    /// Checks that `call` has no argument and no parameter.
    fn bare(&self, call: &FeatureCall) -> Result<(), FeatureError> {
        if let Some(a) = call.argument {
            return Err(self.bad(call, format!("takes no argument, found ({a})")));
        }
        self.only_parameters(call, &[])
    }

    /// The argument of a locator or hop (default 0), without parameters.
    fn argument(&self, call: &FeatureCall) -> Result<i32, FeatureError> {
        self.only_parameters(call, &[])?;
        Ok(call.argument.unwrap_or(0))
    }

    /// A template may not go on after `call`.
    fn last(&self, call: &FeatureCall, rest: &[FeatureCall]) -> Result<(), FeatureError> {
        match rest.first() {
            None => Ok(()),
            Some(next) => Err(self.bad(
                call,
                format!("takes no nested feature, found `{}` after it", next.kind),
            )),
        }
    }

    /// A template must go on after `call`.
    fn more<'c>(
        &self,
        call: &FeatureCall,
        rest: &'c [FeatureCall],
        what: &str,
    ) -> Result<&'c [FeatureCall], FeatureError> {
        if rest.is_empty() {
            Err(self.bad(call, format!("needs a nested feature ({what}) after it")))
        } else {
            Ok(rest)
        }
    }

    fn ngram(&self, call: &FeatureCall) -> Result<NgramOptions, FeatureError> {
        if let Some(a) = call.argument {
            return Err(self.bad(
                call,
                format!("takes parameters, not a positional argument ({a})"),
            ));
        }
        self.only_parameters(
            call,
            &[
                "max_char_ngram_length",
                "use_terminators",
                "mark_boundaries",
            ],
        )?;
        let mut options = NgramOptions::default();
        if let Some(n) = call.parameter("max_char_ngram_length") {
            options.max_length = match n.parse::<u32>() {
                Ok(n) if (1..=64).contains(&n) => n,
                _ => {
                    return Err(self.bad(
                        call,
                        format!("`max_char_ngram_length={n}` is not a length from 1 to 64"),
                    ))
                }
            };
        }
        let flag = |name: &str, default: bool| -> Result<bool, FeatureError> {
            match call.parameter(name) {
                None => Ok(default),
                Some("true") => Ok(true),
                Some("false") => Ok(false),
                Some(other) => {
                    Err(self.bad(call, format!("`{name}={other}` is not true or false")))
                }
            }
        };
        options.terminators = flag("use_terminators", false)?;
        options.mark_boundaries = flag("mark_boundaries", false)?;
        Ok(options)
    }

    fn affix(&self, call: &FeatureCall) -> Result<u32, FeatureError> {
        if let Some(a) = call.argument {
            return Err(self.bad(
                call,
                format!("takes `length=n`, not a positional argument ({a})"),
            ));
        }
        self.only_parameters(call, &["length"])?;
        let Some(length) = call.parameter("length") else {
            return Err(self.bad(call, "needs `length=n` (n >= 1)"));
        };
        match length.parse::<u32>() {
            Ok(n) if n >= 1 && i32::try_from(n).is_ok() => Ok(n),
            _ => Err(self.bad(
                call,
                format!("`length={length}` is not a length from 1 to 2147483647"),
            )),
        }
    }

    fn capitalization(&self, call: &FeatureCall) -> Result<Category, FeatureError> {
        if let Some(a) = call.argument {
            return Err(self.bad(call, format!("takes no argument, found ({a})")));
        }
        self.only_parameters(call, &["utf8"])?;
        let utf8 = match call.parameter("utf8") {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(self.bad(call, format!("`utf8={other}` is not true or false")))
            }
        };
        Ok(Category::Capitalization { utf8 })
    }

    /// The value of a feature that both contexts share, or `None` if `call` is not one.
    fn shared_value(&self, call: &FeatureCall) -> Result<Option<TokenValue>, FeatureError> {
        let value = match call.kind.as_str() {
            "word" => TokenValue::Word,
            "known-word" => TokenValue::KnownWord,
            "char" => TokenValue::Char,
            "tag" => TokenValue::Tag,
            "label" => TokenValue::Label,
            "digit" => TokenValue::Shape(Category::Digit),
            "hyphen" => TokenValue::Shape(Category::Hyphen),
            "punctuation-amount" => TokenValue::Shape(Category::PunctuationAmount),
            "quote" => TokenValue::Shape(Category::Quote),
            "space-after" => TokenValue::Shape(Category::SpaceAfter),
            "lemma" => TokenValue::Lemma,
            "capitalization" => return Ok(Some(TokenValue::Shape(self.capitalization(call)?))),
            "prefix" => return Ok(Some(TokenValue::Prefix(self.affix(call)?))),
            "suffix" => return Ok(Some(TokenValue::Suffix(self.affix(call)?))),
            "char-ngram" => return Ok(Some(TokenValue::CharNgram(self.ngram(call)?))),
            _ => return Ok(None),
        };
        self.bare(call)?;
        Ok(Some(value))
    }
}

/// Checks `template` (of channel `channel`, for errors) and types it.
///
/// ```
/// use kiln_dragnn::features::{parse::parse_templates, template::{compile, Feature}};
/// let t = &parse_templates("last-action").unwrap()[0];
/// assert_eq!(compile("action", t).unwrap(), Feature::LastAction(0));
/// let t = &parse_templates("input.prefix").unwrap()[0];
/// let err = compile("affixes", t).unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "channel affixes: feature template 'input.prefix': `prefix`: needs `length=n` (n >= 1)"
/// );
/// ```
pub fn compile(channel: &str, template: &Template) -> Result<Feature, FeatureError> {
    let cx = Ctx {
        channel,
        template: template.to_string(),
    };
    let Some((first, rest)) = template.chain.split_first() else {
        return Err(FeatureError::Parse {
            channel: channel.to_owned(),
            template: String::new(),
            message: "an empty template".to_owned(),
        });
    };
    let locator = match first.kind.as_str() {
        "last-action" => {
            cx.last(first, rest)?;
            cx.only_parameters(first, &[])?;
            let k = first.argument.unwrap_or(0);
            if k > 0 {
                return Err(cx.unsupported(
                    first,
                    format!(
                        "last-action({k}) reads an older action, and the parser state keeps only \
                         the last one"
                    ),
                ));
            }
            return Ok(Feature::LastAction(k));
        }
        "input" => Locator::Input(cx.argument(first)?),
        "stack" => Locator::Stack(cx.argument(first)?),
        _ => {
            return Err(cx.unknown(
                first,
                "a template starts with a state feature: input, stack or last-action",
            ))
        }
    };
    let mut rest = cx.more(first, rest, TOKEN_FEATURES)?;
    let mut hops = Vec::new();
    loop {
        let (call, after) = rest.split_first().expect("`more` checked");
        let hop = match call.kind.as_str() {
            "head" => Some(Hop::Head(cx.argument(call)?)),
            "child" => Some(Hop::Child(cx.argument(call)?)),
            "sibling" => Some(Hop::Sibling(cx.argument(call)?)),
            _ => None,
        };
        if let Some(hop) = hop {
            hops.push(hop);
            rest = cx.more(call, after, TOKEN_FEATURES)?;
            continue;
        }
        let path = Path { locator, hops };
        let value = match call.kind.as_str() {
            "token" => {
                cx.bare(call)?;
                let mut rest = cx.more(call, after, SENTENCE_FEATURES)?;
                let mut offset: i64 = 0;
                loop {
                    let (call, after) = rest.split_first().expect("`more` checked");
                    if call.kind == "offset" {
                        offset += i64::from(cx.argument(call)?);
                        rest = cx.more(call, after, SENTENCE_FEATURES)?;
                        continue;
                    }
                    let Some(value) = cx.shared_value(call)? else {
                        return Err(cx.unknown(
                            call,
                            &format!("inside `token` come sentence features: {SENTENCE_FEATURES}"),
                        ));
                    };
                    cx.last(call, after)?;
                    return Ok(Feature::Token {
                        path,
                        token: Some(offset),
                        value,
                    });
                }
            }
            "pred-tag" => {
                cx.bare(call)?;
                TokenValue::PredTag
            }
            "focus" => {
                cx.bare(call)?;
                TokenValue::Focus
            }
            "gold-head" => {
                cx.bare(call)?;
                TokenValue::GoldHead
            }
            "input" | "stack" | "last-action" => {
                return Err(cx.unknown(
                    call,
                    &format!("a state feature cannot follow a locator; expected {TOKEN_FEATURES}"),
                ))
            }
            _ => match cx.shared_value(call)? {
                Some(v) => v,
                None => return Err(cx.unknown(call, &format!("expected {TOKEN_FEATURES}"))),
            },
        };
        cx.last(call, after)?;
        return Ok(Feature::Token {
            path,
            token: None,
            value,
        });
    }
}
