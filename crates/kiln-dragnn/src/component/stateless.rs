//! [`StatelessComponent`]: the pass-through component for bulk components that read only
//! linked features (DRAGNN's `StatelessComponent`).
//!
//! Depends on [`crate::transition`] (the states it forwards), [`crate::translator`],
//! [`crate::input`] and [`crate::spec`].

use super::{
    BulkFeatures, Component, ComponentError, ComponentTrace, FeatureAllocator, RawLinkFeature,
};
use crate::input::InputBatchCache;
use crate::spec::ComponentSpec;
use crate::transition::ParserState;
use crate::translator::{LinkIndex, Method, TranslationSource, TranslatorError};

/// Forwards its predecessor's states: [`Component::get_beam`] returns them, the source beam
/// index of slot `i` is `i`, it is always ready and terminal, takes no steps, finalizing
/// writes nothing, and every extraction, advance or trace method fails with
/// "\[name\] Method not supported".
///
/// ```
/// use kiln_dragnn::component::{Component, StatelessComponent};
/// use kiln_dragnn::input::InputBatchCache;
/// use kiln_dragnn::spec::ComponentSpec;
/// use kiln_dragnn::translator::TranslationSource;
/// let spec = ComponentSpec::from_text("name: 'bulk'")?;
/// let mut c = StatelessComponent::new(&spec);
/// c.initialize_data(&[], 4, &mut InputBatchCache::default())?;
/// assert!(c.is_ready() && c.is_terminal());
/// assert_eq!((c.source_beam_index(3, 0), c.steps_taken(0)), (3, 0));
/// assert!(c.advance_from_oracle().unwrap_err().to_string().contains("[bulk] Method not supported"));
/// # Ok::<(), kiln_dragnn::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct StatelessComponent {
    name: String,
    states: Vec<Vec<ParserState>>,
    max_beam: usize,
}

impl StatelessComponent {
    /// The component named by `spec` (nothing else of the spec is used).
    ///
    /// ```
    /// use kiln_dragnn::component::StatelessComponent;
    /// use kiln_dragnn::spec::ComponentSpec;
    /// use kiln_dragnn::translator::TranslationSource;
    /// let c = StatelessComponent::new(&ComponentSpec::from_text("name: 'x'")?);
    /// assert_eq!(c.name(), "x");
    /// # Ok::<(), kiln_dragnn::spec::SpecError>(())
    /// ```
    pub fn new(spec: &ComponentSpec) -> StatelessComponent {
        StatelessComponent {
            name: spec.name().to_string(),
            states: Vec::new(),
            max_beam: 0,
        }
    }

    fn unsupported<T>(&self, method: &'static str) -> crate::Result<T> {
        Err(ComponentError::NotSupported {
            component: self.name.clone(),
            method,
        }
        .into())
    }
}

impl TranslationSource for StatelessComponent {
    fn name(&self) -> &str {
        &self.name
    }
    fn source_beam_index(&self, current_index: i32, _batch: usize) -> i32 {
        current_index
    }
    fn beam_index_at_step(&self, _step: i32, current_index: i32, _batch: usize) -> i32 {
        current_index
    }
    fn steps_taken(&self, _batch: usize) -> i32 {
        0
    }
    fn lookup_step(
        &self,
        method: Method,
        _batch: usize,
        _beam: i32,
        _value: i32,
    ) -> Result<i32, TranslatorError> {
        Err(TranslatorError::Unsupported {
            component: format!("[{}]", self.name),
            method,
        })
    }
}

impl Component for StatelessComponent {
    fn initialize_data(
        &mut self,
        parent_states: &[Vec<ParserState>],
        max_beam_size: usize,
        _input: &mut InputBatchCache,
    ) -> crate::Result<()> {
        self.states = parent_states.to_vec();
        self.max_beam = max_beam_size;
        Ok(())
    }
    fn is_ready(&self) -> bool {
        true
    }
    fn initialize_tracing(&mut self) -> crate::Result<()> {
        Ok(())
    }
    fn disable_tracing(&mut self) {}
    fn batch_size(&self) -> usize {
        self.states.len()
    }
    fn beam_size(&self) -> usize {
        self.max_beam
    }
    fn advance_from_prediction(&mut self, _: &[f32], _: usize, _: usize) -> crate::Result<()> {
        self.unsupported("advance_from_prediction")
    }
    fn advance_from_oracle(&mut self) -> crate::Result<()> {
        self.unsupported("advance_from_oracle")
    }
    fn is_terminal(&self) -> bool {
        true
    }
    fn get_beam(&self) -> Vec<Vec<ParserState>> {
        self.states.clone()
    }
    fn get_fixed_features(&self, _: usize, _: &mut dyn FeatureAllocator) -> crate::Result<usize> {
        self.unsupported("get_fixed_features")
    }
    fn bulk_get_fixed_features(&mut self, _: &mut BulkFeatures) -> crate::Result<usize> {
        self.unsupported("bulk_get_fixed_features")
    }
    fn get_raw_link_features(&self, _: usize) -> crate::Result<Vec<Option<RawLinkFeature>>> {
        self.unsupported("get_raw_link_features")
    }
    fn get_oracle_labels(&self) -> crate::Result<Vec<Vec<i32>>> {
        self.unsupported("get_oracle_labels")
    }
    /// Nothing to write: the predecessor's states are not this component's analysis.
    fn finalize_data(&mut self, _: &mut InputBatchCache) -> crate::Result<()> {
        Ok(())
    }
    fn reset_component(&mut self) {
        self.states.clear();
        self.max_beam = 0;
    }
    fn get_trace_protos(&self) -> crate::Result<Vec<Vec<ComponentTrace>>> {
        self.unsupported("get_trace_protos")
    }
    fn add_translated_link_features_to_trace(
        &self,
        _: &[Option<LinkIndex>],
        _: usize,
    ) -> crate::Result<()> {
        self.unsupported("add_translated_link_features_to_trace")
    }
}
