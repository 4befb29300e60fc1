//! [`ComputeSession`]: one computation over a batch, driving a master spec's components in
//! spec order (DRAGNN's `ComputeSession`/`ComputeSessionImpl`), with [`SessionError`]s
//! carrying the reference's messages where it CHECK-failed.
//!
//! A session builds one [`Component`] per `ComponentSpec` through a [`ComponentBuilder`]
//! (by default [`default_component_builder`]: the backends `SyntaxNetComponent` and
//! `StatelessComponent`), chains them in spec order (each component's predecessor is the
//! previous one), and builds one [`IndexTranslator`] per linked feature channel. Methods
//! that read a component's state ("readied" methods) fail with "Could not find component"
//! for an unknown name and "without first initializing it" before
//! [`ComputeSession::initialize_component_data`]. Methods taking `&self` (feature
//! extraction, oracle labels, ...) may run from several threads at once.
//!
//! Depends on [`crate::component`], [`crate::translator`], [`crate::input`],
//! [`crate::spec`] and [`crate::term_map`].

use std::sync::{Arc, Mutex};

use crate::component::{
    BulkFeatures, Component, FeatureAllocator, MasterTrace, StatelessComponent, SyntaxNetComponent,
};
use crate::input::InputBatchCache;
use crate::spec::{ComponentSpec, GridPoint, MasterSpec};
use crate::term_map::TermMaps;
use crate::translator::{IndexTranslator, LinkIndex, TranslationSource};

/// Errors of compute sessions and pools, with the reference's messages.
///
/// ```
/// use kiln_dragnn::session::SessionError;
/// let e = SessionError::UnknownComponent { name: "x".into(), known: "a, b".into() };
/// assert!(e.to_string().contains("Could not find component"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// A component name that the session does not have.
    #[error("Could not find component \"{name}\" in the component set (components: {known}). Missing component. Exiting.")]
    UnknownComponent {
        /// The name asked for.
        name: String,
        /// The session's components, comma-separated.
        known: String,
    },
    /// [`ComputeSession::spec`] of a component that the spec does not have.
    #[error("Missing component '{name}'")]
    MissingComponent {
        /// The name asked for.
        name: String,
    },
    /// A readied method on a component whose data is not initialised.
    #[error("Component '{name}' was asked for data without first initializing it.")]
    NotReady {
        /// The component.
        name: String,
    },
    /// Component data initialised before the session has input.
    #[error("Cannot initialize component '{name}' without providing input data.")]
    NoInput {
        /// The component.
        name: String,
    },
    /// The predecessor of a component being initialised is not terminal.
    #[error("Source component '{source_component}' for currently active component '{component}' is not terminal. Are you using bulk feature extraction with only linked features? If so, consider using the StatelessComponent instead.")]
    SourceNotTerminal {
        /// The predecessor.
        source_component: String,
        /// The component being initialised.
        component: String,
    },
    /// [`ComputeSession::translators`] of a component without linked features.
    #[error("Could not find component '{name}' in the translator set (it has no linked features)")]
    NoTranslators {
        /// The component.
        name: String,
    },
    /// A linked channel index past the component's channels.
    #[error("Component '{name}' has no linked feature channel {channel} (it has {count})")]
    NoLinkedChannel {
        /// The component.
        name: String,
        /// The channel asked for.
        channel: usize,
        /// How many it has.
        count: usize,
    },
    /// A backend registered name that no component has.
    #[error("component '{component}': unknown backend '{backend}' (registered: SyntaxNetComponent, StatelessComponent)")]
    UnknownBackend {
        /// The component.
        component: String,
        /// The backend's registered name.
        backend: String,
    },
    /// A component list that does not match the spec.
    #[error("{given} components given for a spec of {expected}")]
    ComponentCount {
        /// Components in the spec.
        expected: usize,
        /// Components given.
        given: usize,
    },
    /// A trace whose beam path leaves a component's traces.
    #[error("component '{component}' has no trace for batch item {batch}, beam slot {beam}")]
    MissingTrace {
        /// The component.
        component: String,
        /// The batch item.
        batch: usize,
        /// The beam slot.
        beam: i32,
    },
}

/// Builds the component a `ComponentSpec` describes (a session's test seam: inject mocks).
pub type ComponentBuilder =
    dyn Fn(&ComponentSpec) -> crate::Result<Box<dyn Component>> + Send + Sync;

/// The builder of the reference's registry: `backend.registered_name`
/// `SyntaxNetComponent` (with `maps`) or `StatelessComponent`; any other name is an error.
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::session::default_component_builder;
/// use kiln_dragnn::spec::ComponentSpec;
/// use kiln_dragnn::term_map::TermMaps;
/// let build = default_component_builder(Arc::new(TermMaps::default()));
/// let spec = ComponentSpec::from_text("name: 'a' backend { registered_name: 'StatelessComponent' }")?;
/// assert_eq!(build(&spec)?.name(), "a");
/// let spec = ComponentSpec::from_text("name: 'a' backend { registered_name: 'Nope' }")?;
/// assert!(build(&spec).is_err());
/// # Ok::<(), kiln_dragnn::Error>(())
/// ```
pub fn default_component_builder(maps: Arc<TermMaps>) -> Arc<ComponentBuilder> {
    Arc::new(
        move |spec: &ComponentSpec| -> crate::Result<Box<dyn Component>> {
            match spec.backend_name() {
                "SyntaxNetComponent" => Ok(Box::new(SyntaxNetComponent::new(spec, maps.clone())?)),
                "StatelessComponent" => Ok(Box::new(StatelessComponent::new(spec))),
                other => Err(SessionError::UnknownBackend {
                    component: spec.name().to_string(),
                    backend: other.to_string(),
                }
                .into()),
            }
        },
    )
}

/// One computation over a batch of input items, through a master spec's components.
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::session::ComputeSession;
/// use kiln_dragnn::spec::{GridPoint, MasterSpec};
/// use kiln_dragnn::term_map::TermMaps;
///
/// let spec = MasterSpec::from_text(r#"
///   component { name: "tagger" transition_system { registered_name: "tagger" }
///               backend { registered_name: "SyntaxNetComponent" } }
/// "#)?;
/// let mut session = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
/// assert!(session.batch_size("tagger").unwrap_err().to_string().contains("without first initializing it"));
/// session.set_input_data(vec!["1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n".into()]);
/// session.initialize_component_data("tagger", 1)?;
/// assert_eq!(session.batch_size("tagger")?, 1);
/// while !session.is_terminal("tagger")? {
///     session.advance_from_oracle("tagger")?;
/// }
/// session.finalize_data("tagger")?;
/// assert_eq!(session.get_serialized_predictions()?.len(), 1);
/// # Ok::<(), kiln_dragnn::Error>(())
/// ```
pub struct ComputeSession {
    id: usize,
    spec: MasterSpec,
    grid_point: GridPoint,
    components: Vec<Box<dyn Component>>,
    /// Per component: its linked channels' translators (`None` without linked features).
    translators: Vec<Option<Vec<IndexTranslator>>>,
    /// In a mutex only to make the session `Sync` (the cache holds `dyn Any + Send`); the
    /// `&mut self` methods reach it without locking.
    input: Mutex<Option<InputBatchCache>>,
    tracing: bool,
}

impl std::fmt::Debug for ComputeSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComputeSession")
            .field("id", &self.id)
            .field(
                "components",
                &self.components.iter().map(|c| c.name()).collect::<Vec<_>>(),
            )
            .field("tracing", &self.tracing)
            .finish()
    }
}

impl ComputeSession {
    /// A session with id `id` over `spec`, its components built by
    /// [`default_component_builder`] with `maps`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::session::ComputeSession;
    /// use kiln_dragnn::spec::{GridPoint, MasterSpec};
    /// use kiln_dragnn::term_map::TermMaps;
    /// let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } }")?;
    /// let s = ComputeSession::new(7, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// assert_eq!(s.id(), 7);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn new(
        id: usize,
        spec: &MasterSpec,
        grid_point: &GridPoint,
        maps: Arc<TermMaps>,
    ) -> crate::Result<ComputeSession> {
        ComputeSession::with_builder(id, spec, grid_point, &*default_component_builder(maps))
    }

    /// A session whose components `builder` builds, one per `ComponentSpec` in spec order.
    ///
    /// ```
    /// use kiln_dragnn::component::{Component, StatelessComponent};
    /// use kiln_dragnn::session::ComputeSession;
    /// use kiln_dragnn::spec::{GridPoint, MasterSpec};
    /// let spec = MasterSpec::from_text("component { name: 'a' }")?;
    /// let s = ComputeSession::with_builder(0, &spec, &GridPoint::default(), &|c| {
    ///     Ok(Box::new(StatelessComponent::new(c)) as Box<dyn Component>)
    /// })?;
    /// assert_eq!(s.description("a")?, "a");
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn with_builder(
        id: usize,
        spec: &MasterSpec,
        grid_point: &GridPoint,
        builder: &ComponentBuilder,
    ) -> crate::Result<ComputeSession> {
        let components = spec
            .component
            .iter()
            .map(builder)
            .collect::<crate::Result<Vec<_>>>()?;
        ComputeSession::from_components(id, spec, grid_point, components)
    }

    /// A session over the given components (one per `ComponentSpec`, in spec order): the
    /// test seam for mock components. Builds the translators of every linked channel.
    ///
    /// ```
    /// use kiln_dragnn::component::{Component, StatelessComponent};
    /// use kiln_dragnn::session::ComputeSession;
    /// use kiln_dragnn::spec::{GridPoint, MasterSpec};
    /// let spec = MasterSpec::from_text("component { name: 'a' }")?;
    /// let c: Box<dyn Component> = Box::new(StatelessComponent::new(&spec.component[0]));
    /// let s = ComputeSession::from_components(0, &spec, &GridPoint::default(), vec![c])?;
    /// assert!(s.translators("a").is_err()); // no linked features
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn from_components(
        id: usize,
        spec: &MasterSpec,
        grid_point: &GridPoint,
        components: Vec<Box<dyn Component>>,
    ) -> crate::Result<ComputeSession> {
        if components.len() != spec.component.len() {
            return Err(SessionError::ComponentCount {
                expected: spec.component.len(),
                given: components.len(),
            }
            .into());
        }
        let names: Vec<&str> = spec.component.iter().map(|c| c.name()).collect();
        let mut translators = Vec::with_capacity(names.len());
        for (i, c) in spec.component.iter().enumerate() {
            if c.linked_feature.is_empty() {
                translators.push(None);
                continue;
            }
            let channel_translators = c
                .linked_feature
                .iter()
                .map(|l| {
                    IndexTranslator::new(&names, i, l.source_component(), l.source_translator())
                })
                .collect::<Result<Vec<_>, _>>()?;
            translators.push(Some(channel_translators));
        }
        Ok(ComputeSession {
            id,
            spec: spec.clone(),
            grid_point: grid_point.clone(),
            components,
            translators,
            input: Mutex::new(None),
            tracing: spec.debug_tracing(),
        })
    }

    fn index(&self, name: &str) -> crate::Result<usize> {
        self.spec.component_index(name).ok_or_else(|| {
            SessionError::UnknownComponent {
                name: name.to_string(),
                known: self
                    .spec
                    .component
                    .iter()
                    .map(|c| c.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            }
            .into()
        })
    }

    /// The component's index after the readiness check (`GetReadiedComponent`).
    fn readied(&self, name: &str) -> crate::Result<usize> {
        let i = self.index(name)?;
        if !self.components[i].is_ready() {
            return Err(SessionError::NotReady {
                name: name.to_string(),
            }
            .into());
        }
        Ok(i)
    }

    /// The readied component (`GetReadiedComponent`).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } }")?;
    /// let s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// assert!(s.readied_component("a")?.is_terminal()); // a stateless component is always ready
    /// assert!(s.readied_component("b").is_err());
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn readied_component(&self, name: &str) -> crate::Result<&dyn Component> {
        let i = self.readied(name)?;
        Ok(self.components[i].as_ref())
    }

    /// Sets the batch: one serialized item (a CoNLL-U sentence) per string.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } }")?;
    /// let mut s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// s.set_input_data(vec!["1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n".into()]);
    /// assert_eq!(s.input_batch_cache().map(|b| b.size()), Some(1));
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn set_input_data(&mut self, data: Vec<String>) {
        *self.input_mut() = Some(InputBatchCache::new(data));
    }

    /// Sets the batch from a cache.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{input::InputBatchCache, session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } }")?;
    /// let mut s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// s.set_input_batch_cache(InputBatchCache::new(vec![]));
    /// assert!(s.input_batch_cache().is_some());
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn set_input_batch_cache(&mut self, batch: InputBatchCache) {
        *self.input_mut() = Some(batch);
    }

    /// The batch, if one was set.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } }")?;
    /// let mut s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// assert!(s.input_batch_cache().is_none());
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn input_batch_cache(&mut self) -> Option<&mut InputBatchCache> {
        self.input_mut().as_mut()
    }

    fn input_mut(&mut self) -> &mut Option<InputBatchCache> {
        self.input.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    /// Seeds component `name`'s beams (max beam size `max_beam_size`): from nothing for
    /// the first component, else from its predecessor's final beams, which must be
    /// terminal. Needs input data. Turns the component's tracing on when the session
    /// traces.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// let spec = MasterSpec::from_text("component { name: 'a' transition_system { registered_name: 'shift-only' } backend { registered_name: 'SyntaxNetComponent' } }")?;
    /// let mut s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// let err = s.initialize_component_data("a", 1).unwrap_err();
    /// assert!(err.to_string().contains("without providing input data"));
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn initialize_component_data(
        &mut self,
        name: &str,
        max_beam_size: usize,
    ) -> crate::Result<()> {
        let i = self.index(name)?;
        let input = input_of(&mut self.input, name)?;
        let parents = if i == 0 {
            Vec::new()
        } else {
            let source = &self.components[i - 1];
            if !source.is_terminal() {
                return Err(SessionError::SourceNotTerminal {
                    source_component: source.name().to_string(),
                    component: name.to_string(),
                }
                .into());
            }
            source.get_beam()
        };
        let component = &mut self.components[i];
        component.initialize_data(&parents, max_beam_size, input)?;
        if self.tracing {
            component.initialize_tracing()?;
        }
        Ok(())
    }

    /// The number of batch items of a readied component.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' transition_system { registered_name: 'shift-only' } backend { registered_name: 'SyntaxNetComponent' } }")?;
    /// let mut s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// s.set_input_data(vec!["1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n".into(); 2]);
    /// s.initialize_component_data("a", 3)?;
    /// assert_eq!((s.batch_size("a")?, s.beam_size("a")?), (2, 3));
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn batch_size(&self, name: &str) -> crate::Result<usize> {
        Ok(self.components[self.readied(name)?].batch_size())
    }

    /// The max beam size of a readied component (see [`batch_size`](Self::batch_size)).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' transition_system { registered_name: 'shift-only' } backend { registered_name: 'SyntaxNetComponent' } }")?;
    /// let s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// assert!(s.beam_size("a").is_err());
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn beam_size(&self, name: &str) -> crate::Result<usize> {
        Ok(self.components[self.readied(name)?].beam_size())
    }

    /// The component's spec ("Missing component" when there is none).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } }")?;
    /// let s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// assert_eq!(s.spec("a")?.name(), "a");
    /// assert!(s.spec("b").unwrap_err().to_string().contains("Missing component"));
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn spec(&self, name: &str) -> crate::Result<&ComponentSpec> {
        self.spec.component_by_name(name).ok_or_else(|| {
            SessionError::MissingComponent {
                name: name.to_string(),
            }
            .into()
        })
    }

    /// The master spec the session was built from.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } }")?;
    /// let s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// assert_eq!(s.master_spec(), &spec);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn master_spec(&self) -> &MasterSpec {
        &self.spec
    }

    /// The grid point the session was built with.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } }")?;
    /// let s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// assert_eq!(s.grid_point(), &GridPoint::default());
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn grid_point(&self) -> &GridPoint {
        &self.grid_point
    }

    fn channel_translator(&self, name: &str, channel: usize) -> crate::Result<&IndexTranslator> {
        let translators = self.translators(name)?;
        translators.get(channel).ok_or_else(|| {
            SessionError::NoLinkedChannel {
                name: name.to_string(),
                channel,
                count: translators.len(),
            }
            .into()
        })
    }

    /// The max beam size of the source of `name`'s linked channel `channel` (the last
    /// component on its translator path).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } } \
    ///   component { name: 'b' backend { registered_name: 'StatelessComponent' } \
    ///               linked_feature { name: 'l' source_component: 'a' source_translator: 'identity' size: 1 } }")?;
    /// let mut s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// s.set_input_data(vec![]);
    /// s.initialize_component_data("a", 4)?;
    /// assert_eq!(s.source_component_beam_size("b", 0)?, 4);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn source_component_beam_size(&self, name: &str, channel: usize) -> crate::Result<usize> {
        let translator = self.channel_translator(name, channel)?;
        let last = *translator.path().last().expect("a path is never empty");
        Ok(self.components[last].beam_size())
    }

    /// One oracle step of every batch and beam item of a readied component.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' transition_system { registered_name: 'shift-only' } backend { registered_name: 'SyntaxNetComponent' } }")?;
    /// let mut s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// s.set_input_data(vec!["1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n".into()]);
    /// s.initialize_component_data("a", 1)?;
    /// s.advance_from_oracle("a")?;
    /// assert!(s.is_terminal("a")?);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn advance_from_oracle(&mut self, name: &str) -> crate::Result<()> {
        let i = self.readied(name)?;
        self.components[i].advance_from_oracle()
    }

    /// Advances a readied component from `scores`, row-major `[num_items, num_actions]`
    /// with `num_items = batch × max beam`.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' transition_system { registered_name: 'shift-only' } backend { registered_name: 'SyntaxNetComponent' } }")?;
    /// let mut s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// s.set_input_data(vec!["1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n".into()]);
    /// s.initialize_component_data("a", 1)?;
    /// assert!(s.advance_from_prediction("a", &[1.0, 2.0], 1, 2).is_err()); // shift-only has 1 action
    /// s.advance_from_prediction("a", &[1.0], 1, 1)?;
    /// assert!(s.is_terminal("a")?);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn advance_from_prediction(
        &mut self,
        name: &str,
        scores: &[f32],
        num_items: usize,
        num_actions: usize,
    ) -> crate::Result<()> {
        let i = self.readied(name)?;
        self.components[i].advance_from_prediction(scores, num_items, num_actions)
    }

    /// The fixed features of channel `channel` of a readied component for the current
    /// step, written through `out`; returns their number (see
    /// [`Component::get_fixed_features`]).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{component::FixedFeatureOutput, session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' transition_system { registered_name: 'shift-only' } backend { registered_name: 'SyntaxNetComponent' } }")?;
    /// let s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// let mut out = FixedFeatureOutput::default();
    /// assert!(s.get_input_features("a", 0, &mut out).is_err()); // not initialised
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn get_input_features(
        &self,
        name: &str,
        channel: usize,
        out: &mut dyn FeatureAllocator,
    ) -> crate::Result<usize> {
        self.components[self.readied(name)?].get_fixed_features(channel, out)
    }

    /// Extracts every fixed channel of a readied component along the oracle path until it
    /// is terminal; returns the number of steps (see
    /// [`Component::bulk_get_fixed_features`]).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{component::BulkFeatures, session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' transition_system { registered_name: 'shift-only' } backend { registered_name: 'SyntaxNetComponent' } }")?;
    /// let mut s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// s.set_input_data(vec!["1\ta\t_\t_\t_\t_\t2\tx\t_\t_\n2\tb\t_\t_\t_\t_\t0\troot\t_\t_\n".into()]);
    /// s.initialize_component_data("a", 1)?;
    /// assert_eq!(s.bulk_get_input_features("a", &mut BulkFeatures::default())?, 2);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn bulk_get_input_features(
        &mut self,
        name: &str,
        out: &mut BulkFeatures,
    ) -> crate::Result<usize> {
        let i = self.readied(name)?;
        self.components[i].bulk_get_fixed_features(out)
    }

    /// The linked features of channel `channel` of a readied component, translated to
    /// `(batch, beam, step)` of the source component; padding slots stay `None`, and a
    /// value that locates nothing gives step -1. With tracing on, the features are
    /// recorded in the component's trace.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' transition_system { registered_name: 'shift-only' } backend { registered_name: 'SyntaxNetComponent' } }")?;
    /// let s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// assert!(s.get_translated_link_features("a", 0).is_err());
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn get_translated_link_features(
        &self,
        name: &str,
        channel: usize,
    ) -> crate::Result<Vec<Option<LinkIndex>>> {
        let i = self.readied(name)?;
        let translator = self.channel_translator(name, channel)?;
        let component = &self.components[i];
        let raw = component.get_raw_link_features(channel)?;
        let sources: Vec<&dyn TranslationSource> = self
            .components
            .iter()
            .map(|c| c.as_ref() as &dyn TranslationSource)
            .collect();
        let mut out = Vec::with_capacity(raw.len());
        for feature in raw {
            out.push(match feature {
                None => None,
                Some(f) => {
                    let mut t =
                        translator.translate(&sources, f.batch_idx, f.beam_idx, f.feature_value)?;
                    if t.step_index < 0 {
                        t.step_index = -1;
                    }
                    Some(t)
                }
            });
        }
        if self.tracing {
            component.add_translated_link_features_to_trace(&out, channel)?;
        }
        Ok(out)
    }

    /// The oracle labels of a readied component, `[batch][item]` (-1 for a final state).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' transition_system { registered_name: 'shift-only' } backend { registered_name: 'SyntaxNetComponent' } }")?;
    /// let mut s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// s.set_input_data(vec!["1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n".into()]);
    /// s.initialize_component_data("a", 1)?;
    /// assert_eq!(s.emit_oracle_labels("a")?, [vec![0]]);
    /// s.advance_from_oracle("a")?;
    /// assert_eq!(s.emit_oracle_labels("a")?, [vec![-1]]);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn emit_oracle_labels(&self, name: &str) -> crate::Result<Vec<Vec<i32>>> {
        self.components[self.readied(name)?].get_oracle_labels()
    }

    /// Whether every beam of a readied component is final.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } }")?;
    /// let s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// assert!(s.is_terminal("a")?);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn is_terminal(&self, name: &str) -> crate::Result<bool> {
        Ok(self.components[self.readied(name)?].is_terminal())
    }

    /// Writes the top item of each beam of a readied component into the input batch.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' transition_system { registered_name: 'shift-only' } backend { registered_name: 'SyntaxNetComponent' } }")?;
    /// let mut s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// assert!(s.finalize_data("a").is_err());
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn finalize_data(&mut self, name: &str) -> crate::Result<()> {
        let i = self.readied(name)?;
        let input = input_of(&mut self.input, name)?;
        self.components[i].finalize_data(input)
    }

    /// The input batch, serialized again with what the components finalized into it.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } }")?;
    /// let s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// assert!(s.get_serialized_predictions().is_err()); // no input
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn get_serialized_predictions(&self) -> crate::Result<Vec<String>> {
        let input = self.input.lock().unwrap_or_else(|e| e.into_inner());
        let input = input.as_ref().ok_or_else(|| SessionError::NoInput {
            name: "(serialized predictions)".to_string(),
        })?;
        Ok(input.serialized_data()?)
    }

    /// One [`MasterTrace`] per final beam item of the last component: the beam path is
    /// walked back through each component's source beam index, and each component's trace
    /// of the item on the path is taken.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' transition_system { registered_name: 'shift-only' } backend { registered_name: 'SyntaxNetComponent' } }")?;
    /// let mut s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// s.set_tracing(true);
    /// s.set_input_data(vec!["1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n".into()]);
    /// s.initialize_component_data("a", 1)?;
    /// s.advance_from_oracle("a")?;
    /// let traces = s.get_trace_protos()?;
    /// assert_eq!(traces.len(), 1);
    /// assert_eq!(traces[0].component_trace[0].steps.len(), 1);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn get_trace_protos(&self) -> crate::Result<Vec<MasterTrace>> {
        let per_component = self
            .components
            .iter()
            .map(|c| c.get_trace_protos())
            .collect::<crate::Result<Vec<_>>>()?;
        let Some(final_beams) = per_component.last() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (batch, final_beam) in final_beams.iter().enumerate() {
            for beam in 0..final_beam.len() {
                let mut path = vec![i32::try_from(beam).unwrap_or(i32::MAX)];
                for c in self.components.iter().skip(1).rev() {
                    let last = *path.last().expect("non-empty");
                    path.push(c.source_beam_index(last, batch));
                }
                path.reverse();
                let mut master = MasterTrace::default();
                for (c, (traces, &slot)) in per_component.iter().zip(&path).enumerate() {
                    let trace = usize::try_from(slot)
                        .ok()
                        .and_then(|s| traces.get(batch)?.get(s))
                        .ok_or_else(|| SessionError::MissingTrace {
                            component: self.components[c].name().to_string(),
                            batch,
                            beam: slot,
                        })?;
                    master.component_trace.push(trace.clone());
                }
                out.push(master);
            }
        }
        Ok(out)
    }

    /// Turns tracing on or off; off disables every component's tracing.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } }")?;
    /// let mut s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// s.set_tracing(true);
    /// assert!(s.tracing());
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn set_tracing(&mut self, tracing: bool) {
        self.tracing = tracing;
        if !tracing {
            for c in &mut self.components {
                c.disable_tracing();
            }
        }
    }

    /// Whether the session traces.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } }")?;
    /// let s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// assert!(!s.tracing()); // the spec's debug_tracing
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn tracing(&self) -> bool {
        self.tracing
    }

    /// Resets every component and drops the input.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' transition_system { registered_name: 'shift-only' } backend { registered_name: 'SyntaxNetComponent' } }")?;
    /// let mut s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// s.set_input_data(vec!["1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n".into()]);
    /// s.initialize_component_data("a", 1)?;
    /// s.reset_session();
    /// assert!(s.batch_size("a").is_err() && s.input_batch_cache().is_none());
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn reset_session(&mut self) {
        for c in &mut self.components {
            c.reset_component();
        }
        *self.input_mut() = None;
    }

    /// The session's id (assigned by the pool).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::default();
    /// assert_eq!(ComputeSession::new(3, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?.id(), 3);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn id(&self) -> usize {
        self.id
    }

    /// The component's name as the component reports it (`GetDescription`).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// # let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } }")?;
    /// let s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// assert_eq!(s.description("a")?, "a");
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn description(&self, name: &str) -> crate::Result<&str> {
        Ok(self.components[self.index(name)?].name())
    }

    /// The translators of a component's linked channels, in channel order; an error for a
    /// component without linked features.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } \
    ///   linked_feature { name: 'l' source_component: 'a' source_translator: 'history' size: 1 } }")?;
    /// let s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// assert_eq!(s.translators("a")?[0].path(), &[0]);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn translators(&self, name: &str) -> crate::Result<&[IndexTranslator]> {
        let i = self.index(name)?;
        self.translators[i].as_deref().ok_or_else(|| {
            SessionError::NoTranslators {
                name: name.to_string(),
            }
            .into()
        })
    }

    /// The translator paths of a component's linked channels, as component names (from
    /// the linking component back to the source).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kiln_dragnn::{session::ComputeSession, spec::{GridPoint, MasterSpec}, term_map::TermMaps};
    /// let spec = MasterSpec::from_text("component { name: 'a' backend { registered_name: 'StatelessComponent' } } \
    ///   component { name: 'b' backend { registered_name: 'StatelessComponent' } \
    ///               linked_feature { name: 'l' source_component: 'a' source_translator: 'identity' size: 1 } }")?;
    /// let s = ComputeSession::new(0, &spec, &GridPoint::default(), Arc::new(TermMaps::default()))?;
    /// assert_eq!(s.translator_paths("b")?, [vec!["b", "a"]]);
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn translator_paths(&self, name: &str) -> crate::Result<Vec<Vec<&str>>> {
        Ok(self
            .translators(name)?
            .iter()
            .map(|t| {
                t.path()
                    .iter()
                    .map(|&i| self.spec.component[i].name())
                    .collect()
            })
            .collect())
    }
}

/// The session's input batch (the field, so that components can be borrowed beside it); an
/// error naming the component `name` that needed it when there is none.
fn input_of<'a>(
    input: &'a mut Mutex<Option<InputBatchCache>>,
    name: &str,
) -> crate::Result<&'a mut InputBatchCache> {
    input
        .get_mut()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()
        .ok_or_else(|| {
            SessionError::NoInput {
                name: name.to_string(),
            }
            .into()
        })
}
