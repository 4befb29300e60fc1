//! Components: the [`Component`] trait (DRAGNN's `Component` interface: one transition
//! system over a batch of beams, advanced from scores or along the oracle, with fixed,
//! linked and bulk feature extraction, oracle labels, finalization and tracing), the types
//! its methods exchange ([`FeatureAllocator`], [`FixedFeatureOutput`], [`BulkFeatures`],
//! [`RawLinkFeature`], [`ComponentTrace`], ...), [`ComponentError`], and the two backends
//! the reference registers: [`SyntaxNetComponent`] (any of the crate's transition systems
//! over [`ParserState`]s) and [`StatelessComponent`] (a pass-through of its predecessor's
//! states, for bulk components with linked features only).
//!
//! A component is driven by a [`crate::session::ComputeSession`], which owns the input
//! batch and hands it to the methods that read or write sentences
//! ([`Component::initialize_data`], [`Component::finalize_data`]). The states passed from a
//! component to its successor are [`ParserState`]s ([`Component::get_beam`]).
//!
//! Depends on [`crate::beam`], [`crate::transition`], [`crate::translator`],
//! [`crate::input`], [`crate::features`], [`crate::term_map`] and [`crate::spec`].

mod stateless;
mod syntaxnet;

pub use stateless::StatelessComponent;
pub use syntaxnet::SyntaxNetComponent;

use crate::input::InputBatchCache;
use crate::transition::ParserState;
use crate::translator::{LinkIndex, TranslationSource};

/// Errors of components, with the reference's messages where it had one.
///
/// ```
/// use kiln_dragnn::component::ComponentError;
/// let err = ComponentError::NotSupported { component: "s".into(), method: "advance_from_oracle" };
/// assert!(err.to_string().starts_with("[s] Method not supported"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ComponentError {
    /// A method that the component does not implement (every extraction or advance of a
    /// [`StatelessComponent`]).
    #[error("[{component}] Method not supported: {method}")]
    NotSupported {
        /// The component.
        component: String,
        /// The method.
        method: &'static str,
    },
    /// [`Component::initialize_data`] with a max beam size of 0.
    #[error("[{component}] Requested max beam size must be greater than 0.")]
    ZeroBeamSize {
        /// The component.
        component: String,
    },
    /// Parent states for a different number of batch items than the input has sentences.
    #[error("[{component}] the predecessor's beams hold {parents} batch items, but the input holds {sentences} sentences")]
    BatchMismatch {
        /// The component.
        component: String,
        /// The number of batch items of the parent states.
        parents: usize,
        /// The number of sentences.
        sentences: usize,
    },
    /// A score matrix whose action count is not the transition system's.
    #[error("[{component}] static action set does not match transition matrix ({given} actions given, the transition system has {expected})")]
    ActionSetMismatch {
        /// The component.
        component: String,
        /// The transition system's action count.
        expected: usize,
        /// The action count given.
        given: usize,
    },
    /// A score matrix of the wrong number of items (`num_items` must be batch × max beam,
    /// and the scores `num_items × num_actions`).
    #[error("[{component}] score matrix of {len} scores for {num_items} items × {num_actions} actions; expected {expected_items} items (batch × max beam)")]
    MatrixShape {
        /// The component.
        component: String,
        /// The number of scores.
        len: usize,
        /// The items given.
        num_items: usize,
        /// The actions given.
        num_actions: usize,
        /// batch × max beam.
        expected_items: usize,
    },
    /// A beam that could not be advanced or initialised.
    #[error("[{component}] batch item {batch}: {source}")]
    Beam {
        /// The component.
        component: String,
        /// The batch item.
        batch: usize,
        /// The beam's error.
        source: crate::beam::BeamError,
    },
    /// A channel index past the component's channels.
    #[error("[{component}] has no {kind} feature channel {channel} (it has {count})")]
    NoChannel {
        /// The component.
        component: String,
        /// `fixed` or `linked`.
        kind: &'static str,
        /// The channel asked for.
        channel: usize,
        /// How many it has.
        count: usize,
    },
    /// Tracing turned on before the component holds data.
    #[error("[{component}] Cannot initialize trace before InitializeData().")]
    TraceBeforeData {
        /// The component.
        component: String,
    },
    /// Traces asked for while tracing is off.
    #[error("[{component}] Tracing is not enabled.")]
    TracingNotEnabled {
        /// The component.
        component: String,
    },
}

/// Where [`Component::get_fixed_features`] writes: asked once for `n` entries, it returns
/// three slices of length `n` (feature indices, ids, weights), as the reference's three
/// allocator callbacks did. [`FixedFeatureOutput`] is the ready-made implementation.
///
/// ```
/// use kiln_dragnn::component::{FeatureAllocator, FixedFeatureOutput};
/// let mut out = FixedFeatureOutput::default();
/// let (indices, ids, weights) = out.allocate(2);
/// indices[1] = 7;
/// ids[1] = 3;
/// weights[1] = 0.5;
/// assert_eq!((out.indices.as_slice(), out.ids[1], out.weights[1]), (&[0, 7][..], 3, 0.5));
/// ```
pub trait FeatureAllocator {
    /// Room for `n` features: `(indices, ids, weights)`, each of length `n`.
    fn allocate(&mut self, n: usize) -> (&mut [i32], &mut [i64], &mut [f32]);
}

/// Sparse fixed features of one channel, as three parallel vectors.
///
/// For [`Component::get_fixed_features`] `indices[i] = (batch * max_beam + beam) * size +
/// slot`; for [`Component::bulk_get_fixed_features`] `indices[i] = slot * (elements *
/// steps) + element * steps + step`.
///
/// ```
/// use kiln_dragnn::component::{FeatureAllocator, FixedFeatureOutput};
/// let mut out = FixedFeatureOutput::default();
/// out.allocate(3);
/// assert_eq!(out.len(), 3);
/// assert_eq!(out.weights, [0.0; 3]);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FixedFeatureOutput {
    /// Output rows.
    pub indices: Vec<i32>,
    /// Feature ids.
    pub ids: Vec<i64>,
    /// Feature weights.
    pub weights: Vec<f32>,
}

impl FixedFeatureOutput {
    /// The number of features.
    ///
    /// ```
    /// assert_eq!(kiln_dragnn::component::FixedFeatureOutput::default().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether there are no features.
    ///
    /// ```
    /// assert!(kiln_dragnn::component::FixedFeatureOutput::default().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }
}

impl FeatureAllocator for FixedFeatureOutput {
    fn allocate(&mut self, n: usize) -> (&mut [i32], &mut [i64], &mut [f32]) {
        self.indices = vec![0; n];
        self.ids = vec![0; n];
        self.weights = vec![0.0; n];
        (&mut self.indices, &mut self.ids, &mut self.weights)
    }
}

/// What [`Component::bulk_get_fixed_features`] fills: one [`FixedFeatureOutput`] per fixed
/// channel, with optional padding of the batch (`pad_to_batch` batch items) and of the steps
/// (`pad_to_step` steps) used in the index layout.
///
/// ```
/// use kiln_dragnn::component::BulkFeatures;
/// let bulk = BulkFeatures::default();
/// assert!(bulk.channels.is_empty() && bulk.pad_to_batch.is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BulkFeatures {
    /// Lay the elements out as if the batch held this many items (at least the batch size).
    pub pad_to_batch: Option<usize>,
    /// Lay the steps out as if there were this many (at least the steps taken).
    pub pad_to_step: Option<usize>,
    /// The features, one entry per fixed channel (filled by the component).
    pub channels: Vec<FixedFeatureOutput>,
}

/// An untranslated linked feature: the batch item and beam slot it belongs to, and the
/// value its template located (a token index; negative when there is none).
///
/// ```
/// use kiln_dragnn::component::RawLinkFeature;
/// let f = RawLinkFeature { batch_idx: 0, beam_idx: 1, feature_value: 3 };
/// assert_eq!(f.feature_value, 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawLinkFeature {
    /// The batch item.
    pub batch_idx: usize,
    /// The beam slot.
    pub beam_idx: i32,
    /// The located value.
    pub feature_value: i32,
}

/// The linked features of one channel recorded at one step of a trace: the translated
/// features of the traced beam slot (`None` for a padding slot).
///
/// ```
/// use kiln_dragnn::component::LinkedFeatureTrace;
/// let t = LinkedFeatureTrace { channel: "rnn".into(), features: vec![None] };
/// assert_eq!(t.features.len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LinkedFeatureTrace {
    /// The channel's name.
    pub channel: String,
    /// The features of the slot, one per template.
    pub features: Vec<Option<LinkIndex>>,
}

/// One step of a [`ComponentTrace`]: what the traced item did.
///
/// ```
/// use kiln_dragnn::component::ComponentStepTrace;
/// let s = ComponentStepTrace { step: 0, action: 2, action_name: "SHIFT".into(), score: 0.0, linked_features: vec![] };
/// assert_eq!(s.action, 2);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentStepTrace {
    /// The step.
    pub step: usize,
    /// The action taken.
    pub action: i32,
    /// The action's name, as the transition system writes it.
    pub action_name: String,
    /// The item's score after the step.
    pub score: f32,
    /// The linked features extracted before the step (with tracing on).
    pub linked_features: Vec<LinkedFeatureTrace>,
}

/// The trace of one final beam item of a component: its steps, first to last.
///
/// ```
/// use kiln_dragnn::component::ComponentTrace;
/// let t = ComponentTrace { name: "tagger".into(), steps: vec![] };
/// assert_eq!(t.name, "tagger");
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ComponentTrace {
    /// The component's name.
    pub name: String,
    /// The steps.
    pub steps: Vec<ComponentStepTrace>,
}

/// The trace of one final item of a session's last component, through every component
/// (DRAGNN's `MasterTrace`): one [`ComponentTrace`] per component, in spec order.
///
/// ```
/// use kiln_dragnn::component::{ComponentTrace, MasterTrace};
/// let m = MasterTrace { component_trace: vec![ComponentTrace::default()] };
/// assert_eq!(m.component_trace.len(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MasterTrace {
    /// One trace per component.
    pub component_trace: Vec<ComponentTrace>,
}

/// A DRAGNN component: a batch of beams of transition states, advanced step by step.
///
/// Object-safe; it extends [`TranslationSource`] (name, source beam index, beam index at a
/// step, steps taken, component-specific step lookups), which translators use.
/// Every method that reads the states is meaningful only once
/// [`initialize_data`](Component::initialize_data) has run ([`is_ready`](Component::is_ready));
/// the session checks that.
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::component::{Component, SyntaxNetComponent};
/// use kiln_dragnn::input::InputBatchCache;
/// use kiln_dragnn::spec::ComponentSpec;
/// use kiln_dragnn::term_map::TermMaps;
///
/// let spec = ComponentSpec::from_text(
///     "name: 'shift' transition_system { registered_name: 'shift-only' }",
/// )?;
/// let mut c: Box<dyn Component> =
///     Box::new(SyntaxNetComponent::new(&spec, Arc::new(TermMaps::default()))?);
/// let mut input = InputBatchCache::new(vec!["1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n".into()]);
/// c.initialize_data(&[], 1, &mut input)?;
/// assert!(c.is_ready() && !c.is_terminal());
/// c.advance_from_oracle()?;
/// assert!(c.is_terminal());
/// assert_eq!(c.steps_taken(0), 1);
/// # Ok::<(), kiln_dragnn::Error>(())
/// ```
pub trait Component: TranslationSource + Send + Sync {
    /// Seeds one beam per batch item: with no parent states one fresh state per sentence of
    /// `input`; otherwise, for batch item `b`, up to `max_beam_size` fresh states each
    /// initialised from one of `parent_states[b]` (its score and beam index).
    fn initialize_data(
        &mut self,
        parent_states: &[Vec<ParserState>],
        max_beam_size: usize,
        input: &mut InputBatchCache,
    ) -> crate::Result<()>;
    /// Whether [`initialize_data`](Component::initialize_data) has run since the last reset.
    fn is_ready(&self) -> bool;
    /// Turns tracing on.
    fn initialize_tracing(&mut self) -> crate::Result<()>;
    /// Turns tracing off and drops what was traced.
    fn disable_tracing(&mut self);
    /// The number of batch items.
    fn batch_size(&self) -> usize;
    /// The max beam size.
    fn beam_size(&self) -> usize;
    /// Advances every non-terminal beam from `scores`, a row-major `[num_items,
    /// num_actions]` matrix with `num_items = batch × max beam` (each beam's rows padded to
    /// the max beam). Fails on the first beam that cannot advance.
    fn advance_from_prediction(
        &mut self,
        scores: &[f32],
        num_items: usize,
        num_actions: usize,
    ) -> crate::Result<()>;
    /// Advances every beam one step along the oracle.
    fn advance_from_oracle(&mut self) -> crate::Result<()>;
    /// Whether every state of every beam is final.
    fn is_terminal(&self) -> bool;
    /// Whether every state of batch item `batch`'s beam is final (inference leaves such
    /// items out of a step's computation). The default, `false`, computes every item.
    fn is_terminal_at(&self, batch: usize) -> bool {
        let _ = batch;
        false
    }
    /// The states passed downstream, `[batch][item]` (a SyntaxNet component passes only the
    /// top item of each beam).
    fn get_beam(&self) -> Vec<Vec<ParserState>>;
    /// The fixed features of channel `channel` for the current step, written through
    /// `out` (asked once for the total count); returns the count. Output rows are
    /// `(batch * max_beam + beam) * channel_size + slot`; padding slots give no entries.
    fn get_fixed_features(
        &self,
        channel: usize,
        out: &mut dyn FeatureAllocator,
    ) -> crate::Result<usize>;
    /// Extracts every fixed channel and advances along the oracle until terminal, filling
    /// `out.channels` (index layout `slot * (elements * steps) + element * steps + step`,
    /// `elements = batch × max beam`); returns the number of steps.
    fn bulk_get_fixed_features(&mut self, out: &mut BulkFeatures) -> crate::Result<usize>;
    /// The untranslated link features of channel `channel`, padded to `batch × max beam ×
    /// channel size` (`None` for padding slots).
    fn get_raw_link_features(&self, channel: usize) -> crate::Result<Vec<Option<RawLinkFeature>>>;
    /// The oracle label of every state, `[batch][item]`: its first gold action, or -1 for a
    /// final state.
    fn get_oracle_labels(&self) -> crate::Result<Vec<Vec<i32>>>;
    /// Writes the top item of each beam into its sentence in `input`.
    fn finalize_data(&mut self, input: &mut InputBatchCache) -> crate::Result<()>;
    /// Drops the beams and the batch (max beam size 0; not ready).
    fn reset_component(&mut self);
    /// The traces of the current beams, `[batch][item]`.
    fn get_trace_protos(&self) -> crate::Result<Vec<Vec<ComponentTrace>>>;
    /// Records translated linked features of channel `channel` (padded as
    /// [`get_raw_link_features`](Component::get_raw_link_features)) in the trace of the
    /// current step.
    fn add_translated_link_features_to_trace(
        &self,
        features: &[Option<LinkIndex>],
        channel: usize,
    ) -> crate::Result<()>;
}
