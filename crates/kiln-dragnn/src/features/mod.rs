//! The feature language (FML): fixed features (ids of words, tags, labels, ... at positions
//! located from the parser state) and linked features (token indices that translators turn
//! into steps of another component), parsed from a channel's `fml` and extracted from a
//! [`ParserState`].
//!
//! (Being written: the signatures below are the contract components are built against.)
//!
//! Depends on [`crate::transition`], [`crate::term_map`] and [`crate::spec`].

use crate::spec::{FixedFeatureChannel, LinkedFeatureChannel};
use crate::term_map::TermMaps;
use crate::transition::ParserState;

/// Errors of parsing and building feature channels.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FeatureError {
    /// A template that does not parse.
    #[error("channel {channel}: feature template '{template}': {message}")]
    Parse {
        /// The channel's name.
        channel: String,
        /// The template.
        template: String,
        /// What is wrong.
        message: String,
    },
}

/// One extracted fixed feature: the template's slot in its channel, the id, its weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FixedFeature {
    /// The template's position in the channel (`0..size`).
    pub slot: usize,
    /// The id (a row of the channel's embedding matrix; `vocabulary_size` is the
    /// unknown/padding row).
    pub id: i64,
    /// The weight (1.0 unless the feature says otherwise).
    pub weight: f32,
}

/// A fixed-feature channel, ready to extract.
pub trait FixedFeatures: Send + Sync + std::fmt::Debug {
    /// The channel's name.
    fn name(&self) -> &str;
    /// The number of templates (the channel's `size`).
    fn size(&self) -> usize;
    /// The ids of the channel's vocabulary: an id is below this (the last row is the
    /// unknown/padding row).
    fn vocabulary_size(&self) -> usize;
    /// Appends the features of `state` to `out` (a template may give several, as a
    /// `token { ... }` group does, or none).
    fn extract(&self, state: &ParserState, out: &mut Vec<FixedFeature>);
}

/// A linked-feature channel, ready to extract.
pub trait LinkFeatures: Send + Sync + std::fmt::Debug {
    /// The channel's name.
    fn name(&self) -> &str;
    /// The number of templates (the channel's `size`).
    fn size(&self) -> usize;
    /// One value per template: a token (or character) index, or a negative value when the
    /// located position does not exist (the translator then gives step -1).
    fn extract(&self, state: &ParserState) -> Vec<i32>;
}

/// Builds the fixed-feature channel a spec describes, over the term maps of the training
/// data.
pub fn fixed_channel(
    spec: &FixedFeatureChannel,
    maps: &TermMaps,
) -> Result<Box<dyn FixedFeatures>, FeatureError> {
    let _ = maps;
    Err(FeatureError::Parse {
        channel: spec.name().to_string(),
        template: spec.fml().to_string(),
        message: "fixed features are not implemented yet".into(),
    })
}

/// Builds the linked-feature channel a spec describes.
pub fn link_channel(spec: &LinkedFeatureChannel) -> Result<Box<dyn LinkFeatures>, FeatureError> {
    Err(FeatureError::Parse {
        channel: spec.name().to_string(),
        template: spec.fml().to_string(),
        message: "linked features are not implemented yet".into(),
    })
}
