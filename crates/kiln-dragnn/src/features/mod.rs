//! The feature language (FML): fixed features (ids of words, tags, labels, ... at positions
//! located from the parser state) and linked features (token indices that translators turn
//! into steps of another component), parsed from a channel's `fml` and extracted from a
//! [`ParserState`].
//!
//! - [`parse`]: the `fml` string into an AST of [`parse::FeatureNode`]s and flat
//!   [`parse::Template`]s, one per channel slot (`input.token {digit hyphen}` is two);
//! - [`template`]: each template checked and typed — a locator (`input(k)`, `stack(k)`), tree
//!   hops (`head(k)`, `child(k)`, `sibling(k)`), and the value read there — or `last-action`;
//!   its module doc lists every feature function and its defaults (**all arguments default
//!   to 0, as in SyntaxNet: a bare `head`, `child` or `sibling` is the identity**);
//! - [`lexical`]: the word-shape enumerations;
//! - [`FixedChannel`] and [`LinkChannel`]: the channels, behind the [`FixedFeatures`] and
//!   [`LinkFeatures`] traits that [`fixed_channel`] and [`link_channel`] return.
//!
//! # Ids and vocabulary sizes (SyntaxNet's conventions)
//!
//! Every value type has *base* values (the terms of its map, or its categories) and special
//! values after them. With `W`, `T`, `L`, `C` the numbers of words, tags, labels and
//! characters of the [`TermMaps`], `A` the affixes of the requested kind and length, `G`
//! the character n-grams of the requested options, and `K` a word shape's cardinality:
//!
//! | feature | base ids | unknown | `<OUTSIDE>` | `<ROOT>` | domain |
//! |---|---|---|---|---|---|
//! | `word` | `0..W` | `W` | `W+1` | `W+2` | `W+3` |
//! | `tag` (gold/input tag) | `0..T` | `T` | `T+1` | `T+2` | `T+3` |
//! | `pred-tag` | `0..T` (predicted) | none | none | none | `T+3` |
//! | `label` (current arc) | `0..L` | `L` | `L+1` | `L+2`, also an unattached token | `L+3` |
//! | `known-word` | `0..W` | none | none | `W` | `W+1` |
//! | `char` | `0..C`, `C` break char | `C+1` | `C+2` | `C+3` | `C+4` |
//! | `prefix`/`suffix(length=n)` | `0..A` | `A` (also a shorter word) | `A+1` | `A+2` | `A+3` |
//! | `char-ngram` (one id per n-gram) | `0..G` | `G` (no n-gram known) | `G+1` | `G+2` | `G+3` |
//! | `digit` `hyphen` `capitalization` `punctuation-amount` `quote` | `0..K` | — | `K` | `K+1` | `K+2` |
//! | `last-action` | previous action + 1, 0 before the first | — | — | — | actions + 1 |
//! | `focus`, `gold-head` | the token index | — | none | none | 100 (nominal) |
//!
//! "none" means the slot gives no feature ([`FixedFeatures::extract`] appends nothing for
//! it), as SyntaxNet drops negative ids. `<OUTSIDE>` is a position with no token (`input(3)`
//! past the end, `stack(2)` below the bottom, a missing child or sibling); `<ROOT>` the
//! artificial root (-1: on the stack, `input(-1)` at the start, the head of an unattached
//! token). Inside `token { ... }` features are SyntaxNet's *sentence* features: they have no
//! `<ROOT>` value (the root is `<OUTSIDE>`) and their domain is one smaller.
//!
//! A channel's [`FixedFeatures::vocabulary_size`] is the largest domain of its templates
//! (SyntaxNet's `GetDomainSize`); ids of all its templates share it, so the embedding matrix
//! is `[vocabulary_size + 1, dim]` and its last row, `vocabulary_size`, is never extracted:
//! it is the padding row a network may give a slot with no feature. The spec's own
//! `vocabulary_size` is not consulted (DRAGNN fills it from the resources, as the value
//! computed here). `last-action` takes `num_actions + 1` values; [`fixed_channel`] sizes it
//! by [`default_num_actions`] (enough for every registered transition system),
//! [`fixed_channel_with_actions`] by the component's own count. The affix tables of
//! `prefix`/`suffix` are built from the word map: the affixes of exactly `n` characters of
//! its terms, ids in word-map order (SyntaxNet read a `prefix-table`/`suffix-table`
//! resource); so is `char-ngram`'s table, the n-grams of its terms in word-map order
//! (SyntaxNet read a `char-ngram-map` resource counted from the training words).
//!
//! # The tree the locators walk
//!
//! Hops read the partial tree of the state as SyntaxNet's `ParserState` does: an unattached
//! token's head is -1 like a token attached to the root, so the root's rightmost child is
//! the last token with head -1 (attached or not), and unattached tokens are each other's
//! siblings. See [`ParserState::ancestor`], [`ParserState::leftmost_child`],
//! [`ParserState::rightmost_child`], [`ParserState::left_sibling`] and
//! [`ParserState::right_sibling`].
//!
//! Depends on [`crate::transition`], [`crate::term_map`], [`crate::spec`] and
//! [`crate::document`].

pub mod chen_manning;
mod extract;
pub mod lexical;
pub mod parse;
pub mod template;

pub use extract::{default_num_actions, FixedChannel, LinkChannel, NUMERIC_DOMAIN};

use crate::spec::{FixedFeatureChannel, LinkedFeatureChannel};
use crate::term_map::TermMaps;
use crate::transition::ParserState;

/// Errors of parsing and building feature channels; each names the channel and the template
/// (the whole `fml` for syntax and size errors).
///
/// ```
/// use kiln_dragnn::{features::{link_channel, FeatureError}, spec::LinkedFeatureChannel};
/// let spec = LinkedFeatureChannel { name: Some("rnn".into()), fml: Some("stack.focus".into()), size: Some(2), ..Default::default() };
/// let err = link_channel(&spec).unwrap_err();
/// assert!(matches!(err, FeatureError::SizeMismatch { size: 2, templates: 1, .. }));
/// assert_eq!(err.to_string(), "channel rnn: size is 2, but fml 'stack.focus' has 1 feature templates");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FeatureError {
    /// An `fml` that does not parse (the template is the whole `fml`).
    #[error("channel {channel}: feature template '{template}': {message}")]
    Parse {
        /// The channel's name.
        channel: String,
        /// The template.
        template: String,
        /// What is wrong.
        message: String,
    },
    /// A feature function that does not exist, or not where the template uses it.
    #[error("channel {channel}: feature template '{template}': unknown feature `{feature}` here ({expected})")]
    UnknownFeature {
        /// The channel's name.
        channel: String,
        /// The template.
        template: String,
        /// The feature function's name.
        feature: String,
        /// What may come there.
        expected: String,
    },
    /// An argument or parameter a feature function does not take, or a bad value.
    #[error("channel {channel}: feature template '{template}': `{feature}`: {message}")]
    BadArgument {
        /// The channel's name.
        channel: String,
        /// The template.
        template: String,
        /// The feature function's name.
        feature: String,
        /// What is wrong.
        message: String,
    },
    /// A feature function SyntaxNet has that kiln-dragnn does not support.
    #[error(
        "channel {channel}: feature template '{template}': `{feature}` is not supported: {reason}"
    )]
    Unsupported {
        /// The channel's name.
        channel: String,
        /// The template.
        template: String,
        /// The feature function's name.
        feature: String,
        /// Why.
        reason: String,
    },
    /// A channel whose `size` is not the number of templates in its `fml`.
    #[error(
        "channel {channel}: size is {size}, but fml '{fml}' has {templates} feature templates"
    )]
    SizeMismatch {
        /// The channel's name.
        channel: String,
        /// The channel's `fml`.
        fml: String,
        /// The channel's `size`.
        size: i32,
        /// The number of templates.
        templates: usize,
    },
}

/// One extracted fixed feature: the template's slot in its channel, the id, its weight.
///
/// ```
/// use kiln_dragnn::features::FixedFeature;
/// let f = FixedFeature { slot: 0, id: 3, weight: 1.0 };
/// assert_eq!(f, FixedFeature { slot: 0, id: 3, weight: 1.0 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FixedFeature {
    /// The template's position in the channel (`0..size`).
    pub slot: usize,
    /// The id: a row of the channel's embedding matrix, below `vocabulary_size` (row
    /// `vocabulary_size` is the padding row, never extracted); `focus` and `gold-head` give
    /// token indices instead (see the module doc).
    pub id: i64,
    /// The weight (1.0 unless the feature says otherwise).
    pub weight: f32,
}

/// A fixed-feature channel, ready to extract.
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
/// use kiln_dragnn::features::{fixed_channel, FixedFeature, FixedFeatures};
/// use kiln_dragnn::spec::FixedFeatureChannel;
/// use kiln_dragnn::transition::ParserState;
/// let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
/// let maps = TermMaps::build(&doc, &TermMapOptions::default());
/// let spec = FixedFeatureChannel { name: Some("a".into()), fml: Some("last-action".into()), ..Default::default() };
/// let channel: Box<dyn FixedFeatures> = fixed_channel(&spec, &maps).unwrap();
/// assert_eq!((channel.name(), channel.size()), ("a", 1));
/// let mut out = Vec::new();
/// channel.extract(&ParserState::new(Arc::new(doc[0].clone()), &maps), &mut out);
/// assert_eq!(out, [FixedFeature { slot: 0, id: 0, weight: 1.0 }]);
/// ```
pub trait FixedFeatures: Send + Sync + std::fmt::Debug {
    /// The channel's name.
    fn name(&self) -> &str;
    /// The number of templates (the channel's `size`).
    fn size(&self) -> usize;
    /// The ids of the channel's vocabulary: an id is below this (the embedding matrix has
    /// one more row, the padding row `vocabulary_size`).
    fn vocabulary_size(&self) -> usize;
    /// The unknown term's id, where every template of the channel has the same one (a
    /// channel of word templates: `W`); `None` otherwise (shapes, `last-action`, mixed
    /// value types).
    ///
    /// ```
    /// use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
    /// use kiln_dragnn::{features::{fixed_channel, FixedFeatures}, spec::FixedFeatureChannel};
    /// let doc = read_conllu("1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n2\tb\t_\tX\t_\t_\t1\tdep\t_\t_").unwrap();
    /// let maps = TermMaps::build(&doc, &TermMapOptions::default());
    /// let words = FixedFeatureChannel { name: Some("w".into()), fml: Some("input.word stack.word".into()), ..Default::default() };
    /// assert_eq!(fixed_channel(&words, &maps).unwrap().unknown_id(), Some(2)); // two words
    /// let mixed = FixedFeatureChannel { name: Some("m".into()), fml: Some("input.word input.tag".into()), ..Default::default() };
    /// assert_eq!(fixed_channel(&mixed, &maps).unwrap().unknown_id(), None);
    /// ```
    fn unknown_id(&self) -> Option<usize> {
        None
    }
    /// Appends the features of `state` to `out` (a template may give several, as a
    /// `token { ... }` group does, or none).
    fn extract(&self, state: &ParserState, out: &mut Vec<FixedFeature>);
}

/// A linked-feature channel, ready to extract.
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::{document::read_conllu, term_map::TermMaps, transition::ParserState};
/// use kiln_dragnn::{features::{link_channel, LinkFeatures}, spec::LinkedFeatureChannel};
/// let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
/// let spec = LinkedFeatureChannel { name: Some("l".into()), fml: Some("input.focus input(1).focus".into()), ..Default::default() };
/// let channel: Box<dyn LinkFeatures> = link_channel(&spec).unwrap();
/// assert_eq!((channel.name(), channel.size()), ("l", 2));
/// let s = ParserState::new(Arc::new(doc[0].clone()), &TermMaps::default());
/// assert_eq!(channel.extract(&s), [0, -1]);
/// ```
pub trait LinkFeatures: Send + Sync + std::fmt::Debug {
    /// The channel's name.
    fn name(&self) -> &str;
    /// The number of templates (the channel's `size`).
    fn size(&self) -> usize;
    /// One value per template: a token (or character) index, or -1 when the located
    /// position is not a token (the root, or no position) — the translator then gives
    /// step -1.
    fn extract(&self, state: &ParserState) -> Vec<i32>;
}

/// Builds the fixed-feature channel a spec describes, over the term maps of the training
/// data ([`FixedChannel::new`]; `last-action` sized by [`default_num_actions`]).
///
/// ```
/// use kiln_dragnn::{document::read_conllu, term_map::{TermMaps, TermMapOptions}};
/// use kiln_dragnn::{features::fixed_channel, spec::FixedFeatureChannel};
/// let doc = read_conllu("1\tx\t_\tX\t_\t_\t0\troot\t_\t_").unwrap();
/// let maps = TermMaps::build(&doc, &TermMapOptions::default());
/// let spec = FixedFeatureChannel { name: Some("words".into()), fml: Some("input.word stack.word".into()), ..Default::default() };
/// let channel = fixed_channel(&spec, &maps).unwrap();
/// assert_eq!((channel.size(), channel.vocabulary_size()), (2, 1 + 3));
/// let bad = FixedFeatureChannel { name: Some("words".into()), fml: Some("input.word(3)".into()), ..Default::default() };
/// assert_eq!(
///     fixed_channel(&bad, &maps).unwrap_err().to_string(),
///     "channel words: feature template 'input.word(3)': `word`: takes no argument, found (3)"
/// );
/// ```
pub fn fixed_channel(
    spec: &FixedFeatureChannel,
    maps: &TermMaps,
) -> Result<Box<dyn FixedFeatures>, FeatureError> {
    Ok(Box::new(FixedChannel::new(spec, maps)?))
}

/// [`fixed_channel`] for a component whose transition system has `num_actions` actions:
/// `last-action` then takes `num_actions + 1` values.
///
/// ```
/// use kiln_dragnn::{features::fixed_channel_with_actions, spec::FixedFeatureChannel, term_map::TermMaps};
/// let spec = FixedFeatureChannel { name: Some("action".into()), fml: Some("last-action".into()), ..Default::default() };
/// assert_eq!(fixed_channel_with_actions(&spec, &TermMaps::default(), 49).unwrap().vocabulary_size(), 50);
/// ```
pub fn fixed_channel_with_actions(
    spec: &FixedFeatureChannel,
    maps: &TermMaps,
    num_actions: usize,
) -> Result<Box<dyn FixedFeatures>, FeatureError> {
    Ok(Box::new(FixedChannel::with_num_actions(
        spec,
        maps,
        num_actions,
    )?))
}

/// Builds the linked-feature channel a spec describes ([`LinkChannel::new`]): every template
/// is a locator path ending in `focus`.
///
/// ```
/// use kiln_dragnn::{features::link_channel, spec::LinkedFeatureChannel};
/// let spec = LinkedFeatureChannel { name: Some("rnn".into()), fml: Some("stack.focus stack(1).focus".into()), ..Default::default() };
/// assert_eq!(link_channel(&spec).unwrap().size(), 2);
/// let chars = LinkedFeatureChannel { name: Some("c".into()), fml: Some("input.last-char-focus".into()), ..Default::default() };
/// assert!(link_channel(&chars).is_err());
/// ```
pub fn link_channel(spec: &LinkedFeatureChannel) -> Result<Box<dyn LinkFeatures>, FeatureError> {
    Ok(Box::new(LinkChannel::new(spec)?))
}
