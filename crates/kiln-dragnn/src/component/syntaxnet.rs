//! [`SyntaxNetComponent`]: a component over any of the crate's transition systems, with
//! beams of [`ParserState`]s (DRAGNN's `SyntaxNetComponent`).
//!
//! Depends on [`crate::beam`], [`crate::transition`], [`crate::features`],
//! [`crate::translator`], [`crate::input`], [`crate::term_map`] and [`crate::spec`].

use std::sync::{Arc, Mutex, MutexGuard};

use super::{
    BulkFeatures, Component, ComponentError, ComponentStepTrace, ComponentTrace, FeatureAllocator,
    FixedFeatureOutput, LinkedFeatureTrace, RawLinkFeature,
};
use crate::beam::{Beam, TransitionState};
use crate::features::{self, FixedFeature, FixedFeatures, LinkFeatures};
use crate::input::{InputBatchCache, Sentences};
use crate::spec::ComponentSpec;
use crate::term_map::TermMaps;
use crate::transition::{self, ParserState, TransitionSystem};
use crate::translator::{LinkIndex, Method, TranslationSource, TranslatorError};

/// One recorded step of one batch item: per slot after the step, the action its state took
/// and its score; and the linked features recorded before the step, per channel, over the
/// slots before the step (`max_beam × channel size`).
#[derive(Debug, Clone, Default)]
struct StepRecord {
    slots: Vec<(i32, f32)>,
    links: Vec<(usize, Vec<Option<LinkIndex>>)>,
}

/// The trace kept while tracing is on.
#[derive(Debug, Default)]
struct TraceState {
    enabled: bool,
    /// `[batch][step]`.
    records: Vec<Vec<StepRecord>>,
    /// `[batch]`: linked features recorded for the coming step.
    pending: Vec<Vec<(usize, Vec<Option<LinkIndex>>)>>,
}

/// A component over one of the crate's transition systems, built from a
/// [`ComponentSpec`]: the transition system by its registered name and parameters, the
/// term maps given here, and the spec's fixed and linked feature channels.
///
/// ```
/// use std::sync::Arc;
/// use kiln_dragnn::component::{Component, SyntaxNetComponent};
/// use kiln_dragnn::document::read_conllu;
/// use kiln_dragnn::input::InputBatchCache;
/// use kiln_dragnn::spec::ComponentSpec;
/// use kiln_dragnn::term_map::{TermMaps, TermMapOptions};
///
/// let conllu = "1\tEv\t_\tNOUN\t_\t_\t2\tnsubj\t_\t_\n2\tgüzel\t_\tADJ\t_\t_\t0\troot\t_\t_\n";
/// let maps = Arc::new(TermMaps::build(&read_conllu(conllu)?, &TermMapOptions::default()));
/// let spec = ComponentSpec::from_text(
///     "name: 'parser' transition_system { registered_name: 'arc-standard' }",
/// )?;
/// let mut parser = SyntaxNetComponent::new(&spec, maps)?;
/// let mut input = InputBatchCache::new(vec![conllu.into()]);
/// parser.initialize_data(&[], 2, &mut input)?;
/// while !parser.is_terminal() {
///     parser.advance_from_oracle()?;
/// }
/// parser.finalize_data(&mut input)?;
/// assert_eq!(input.serialized_data()?, [conllu]);
/// # Ok::<(), kiln_dragnn::Error>(())
/// ```
#[derive(Debug)]
pub struct SyntaxNetComponent {
    name: String,
    system: Box<dyn TransitionSystem>,
    maps: Arc<TermMaps>,
    num_actions: usize,
    fixed: Vec<Box<dyn FixedFeatures>>,
    linked: Vec<Box<dyn LinkFeatures>>,
    beams: Vec<Beam<ParserState>>,
    max_beam: usize,
    ready: bool,
    trace: Mutex<TraceState>,
}

impl SyntaxNetComponent {
    /// Builds the component `spec` describes: its transition system by registered name and
    /// parameters (an error for an unknown one), and its fixed and linked channels through
    /// [`features::fixed_channel`] and [`features::link_channel`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::component::SyntaxNetComponent;
    /// use kiln_dragnn::spec::ComponentSpec;
    /// use kiln_dragnn::term_map::TermMaps;
    /// use kiln_dragnn::translator::TranslationSource;
    /// let spec = ComponentSpec::from_text("name: 't' transition_system { registered_name: 'tagger' }")?;
    /// assert_eq!(SyntaxNetComponent::new(&spec, Arc::new(TermMaps::default()))?.name(), "t");
    /// let bad = ComponentSpec::from_text("name: 't' transition_system { registered_name: 'nope' }")?;
    /// assert!(SyntaxNetComponent::new(&bad, Arc::new(TermMaps::default())).is_err());
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn new(spec: &ComponentSpec, maps: Arc<TermMaps>) -> crate::Result<SyntaxNetComponent> {
        // `last-action` features range over this component's own actions.
        let num_actions = system_of(spec)?.num_actions(&maps);
        let fixed = spec
            .fixed_feature
            .iter()
            .map(|c| features::fixed_channel_with_actions(c, &maps, num_actions))
            .collect::<Result<Vec<_>, _>>()?;
        let linked = spec
            .linked_feature
            .iter()
            .map(features::link_channel)
            .collect::<Result<Vec<_>, _>>()?;
        SyntaxNetComponent::with_channels(spec, maps, fixed, linked)
    }

    /// Builds the component with the given fixed and linked channels instead of the spec's
    /// (the spec's transition system and name are used).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::component::{Component, SyntaxNetComponent};
    /// use kiln_dragnn::spec::ComponentSpec;
    /// use kiln_dragnn::term_map::TermMaps;
    /// let spec = ComponentSpec::from_text("name: 's' transition_system { registered_name: 'shift-only' }")?;
    /// let c = SyntaxNetComponent::with_channels(&spec, Arc::new(TermMaps::default()), vec![], vec![])?;
    /// assert!(!c.is_ready());
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn with_channels(
        spec: &ComponentSpec,
        maps: Arc<TermMaps>,
        fixed: Vec<Box<dyn FixedFeatures>>,
        linked: Vec<Box<dyn LinkFeatures>>,
    ) -> crate::Result<SyntaxNetComponent> {
        let system = system_of(spec)?;
        let num_actions = system.num_actions(&maps);
        Ok(SyntaxNetComponent {
            name: spec.name().to_string(),
            system,
            maps,
            num_actions,
            fixed,
            linked,
            beams: Vec::new(),
            max_beam: 0,
            ready: false,
            trace: Mutex::new(TraceState::default()),
        })
    }

    /// The transition system.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::component::SyntaxNetComponent;
    /// use kiln_dragnn::spec::ComponentSpec;
    /// use kiln_dragnn::term_map::TermMaps;
    /// let spec = ComponentSpec::from_text("name: 'p' transition_system { registered_name: 'arc-standard' }")?;
    /// let c = SyntaxNetComponent::new(&spec, Arc::new(TermMaps::default()))?;
    /// assert_eq!(c.transition_system().name(), "arc-standard");
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn transition_system(&self) -> &dyn TransitionSystem {
        self.system.as_ref()
    }

    /// The beams, one per batch item.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kiln_dragnn::component::SyntaxNetComponent;
    /// use kiln_dragnn::spec::ComponentSpec;
    /// use kiln_dragnn::term_map::TermMaps;
    /// let spec = ComponentSpec::from_text("name: 'p' transition_system { registered_name: 'shift-only' }")?;
    /// assert!(SyntaxNetComponent::new(&spec, Arc::new(TermMaps::default()))?.beams().is_empty());
    /// # Ok::<(), kiln_dragnn::Error>(())
    /// ```
    pub fn beams(&self) -> &[Beam<ParserState>] {
        &self.beams
    }

    fn traces(&self) -> MutexGuard<'_, TraceState> {
        self.trace.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn state(&self, batch: usize, beam: i32) -> Option<&ParserState> {
        let beam = usize::try_from(beam).ok()?;
        self.beams.get(batch)?.beam_state(beam)
    }

    fn beam_error(&self, batch: usize, source: crate::beam::BeamError) -> crate::Error {
        ComponentError::Beam {
            component: self.name.clone(),
            batch,
            source,
        }
        .into()
    }

    fn fixed_channel(&self, channel: usize) -> crate::Result<&dyn FixedFeatures> {
        self.fixed.get(channel).map(|c| c.as_ref()).ok_or_else(|| {
            ComponentError::NoChannel {
                component: self.name.clone(),
                kind: "fixed",
                channel,
                count: self.fixed.len(),
            }
            .into()
        })
    }

    /// Records, when tracing, one step of the batch items in `advanced`.
    fn record_step(&self, advanced: &[usize]) {
        let mut trace = self.traces();
        if !trace.enabled {
            return;
        }
        let batch = self.beams.len();
        trace.records.resize_with(batch, Vec::new);
        trace.pending.resize_with(batch, Vec::new);
        for &b in advanced {
            let slots = self.beams[b]
                .beam()
                .iter()
                .map(|s| (s.last_action(), s.score()))
                .collect();
            let links = std::mem::take(&mut trace.pending[b]);
            trace.records[b].push(StepRecord { slots, links });
        }
    }

    /// The features of every state, as `(element, feature)` with `element = batch *
    /// max_beam + slot`.
    fn extract_fixed(&self, channel: &dyn FixedFeatures) -> Vec<(usize, FixedFeature)> {
        let mut out = Vec::with_capacity(self.beams.len() * self.max_beam * channel.size());
        let mut buf = Vec::new();
        for (b, beam) in self.beams.iter().enumerate() {
            for (slot, state) in beam.beam().iter().enumerate() {
                buf.clear();
                channel.extract(state, &mut buf);
                let element = b * self.max_beam + slot;
                out.extend(buf.iter().map(|f| (element, *f)));
            }
        }
        out
    }
}

/// One bulk-extracted feature: `(slot, element, step, id, weight)`.
type BulkEntry = (usize, usize, usize, i64, f32);

fn to_i32(v: usize) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

impl TranslationSource for SyntaxNetComponent {
    fn name(&self) -> &str {
        &self.name
    }

    fn source_beam_index(&self, current_index: i32, batch: usize) -> i32 {
        self.beams
            .get(batch)
            .map_or(-1, |b| b.find_previous_index(current_index, 0))
    }

    fn beam_index_at_step(&self, step: i32, current_index: i32, batch: usize) -> i32 {
        self.beams
            .get(batch)
            .map_or(-1, |b| b.find_previous_index(current_index, step))
    }

    fn steps_taken(&self, batch: usize) -> i32 {
        self.beams.get(batch).map_or(0, |b| to_i32(b.num_steps()))
    }

    fn lookup_step(
        &self,
        method: Method,
        batch: usize,
        beam: i32,
        value: i32,
    ) -> Result<i32, TranslatorError> {
        let reverse = |n: usize| {
            let max_index = to_i32(n) - 1;
            if value < 0 || value > max_index {
                -1
            } else {
                max_index - value
            }
        };
        Ok(match method {
            Method::Identity => value,
            Method::History => {
                let taken = self.steps_taken(batch);
                if value < 0 || value > taken - 1 {
                    -1
                } else {
                    taken - 1 - value
                }
            }
            Method::ReverseToken => self
                .state(batch, beam)
                .map_or(-1, |s| reverse(s.num_tokens())),
            Method::ReverseChar => self.state(batch, beam).map_or(-1, |s| {
                reverse(s.sentence().surface_text().trim_end().chars().count())
            }),
            Method::ShiftReduceStep => self
                .state(batch, beam)
                .map_or(-1, |s| s.step_for_token(value)),
            Method::ReduceStep => self
                .state(batch, beam)
                .map_or(-1, |s| s.parent_step_for_token(value)),
            // Composed literally as the reference does: a step is passed where a token is
            // expected.
            Method::ParentShiftReduceStep => self
                .state(batch, beam)
                .map_or(-1, |s| s.step_for_token(s.parent_step_for_token(value))),
        })
    }
}

impl Component for SyntaxNetComponent {
    fn initialize_data(
        &mut self,
        parent_states: &[Vec<ParserState>],
        max_beam_size: usize,
        input: &mut InputBatchCache,
    ) -> crate::Result<()> {
        if max_beam_size == 0 {
            return Err(ComponentError::ZeroBeamSize {
                component: self.name.clone(),
            }
            .into());
        }
        let sentences: Vec<Arc<_>> = input
            .get_as::<Sentences>()?
            .0
            .iter()
            .cloned()
            .map(Arc::new)
            .collect();
        if !parent_states.is_empty() && parent_states.len() != sentences.len() {
            return Err(ComponentError::BatchMismatch {
                component: self.name.clone(),
                parents: parent_states.len(),
                sentences: sentences.len(),
            }
            .into());
        }
        self.max_beam = max_beam_size;
        self.beams = (0..sentences.len())
            .map(|_| Beam::new(max_beam_size))
            .collect();
        for (b, sentence) in sentences.into_iter().enumerate() {
            let states = if parent_states.is_empty() {
                vec![self.system.initial_state(sentence, &self.maps)]
            } else {
                parent_states[b]
                    .iter()
                    .take(max_beam_size)
                    .map(|parent| {
                        let mut s = self.system.initial_state(sentence.clone(), &self.maps);
                        s.init_from_parent(parent);
                        s
                    })
                    .collect()
            };
            let result = self.beams[b].init(states);
            result.map_err(|e| self.beam_error(b, e))?;
        }
        {
            let batch = self.beams.len();
            let mut trace = self.traces();
            trace.records = vec![Vec::new(); batch];
            trace.pending = vec![Vec::new(); batch];
        }
        self.ready = true;
        Ok(())
    }

    fn is_ready(&self) -> bool {
        self.ready
    }

    fn initialize_tracing(&mut self) -> crate::Result<()> {
        if !self.ready {
            return Err(ComponentError::TraceBeforeData {
                component: self.name.clone(),
            }
            .into());
        }
        let batch = self.beams.len();
        let mut trace = self.traces();
        trace.enabled = true;
        trace.records = vec![Vec::new(); batch];
        trace.pending = vec![Vec::new(); batch];
        Ok(())
    }

    fn disable_tracing(&mut self) {
        *self.traces() = TraceState::default();
    }

    fn batch_size(&self) -> usize {
        self.beams.len()
    }

    fn beam_size(&self) -> usize {
        self.max_beam
    }

    fn advance_from_prediction(
        &mut self,
        scores: &[f32],
        num_items: usize,
        num_actions: usize,
    ) -> crate::Result<()> {
        if num_actions != self.num_actions {
            return Err(ComponentError::ActionSetMismatch {
                component: self.name.clone(),
                expected: self.num_actions,
                given: num_actions,
            }
            .into());
        }
        let expected_items = self.beams.len() * self.max_beam;
        if num_items != expected_items || scores.len() != num_items * num_actions {
            return Err(ComponentError::MatrixShape {
                component: self.name.clone(),
                len: scores.len(),
                num_items,
                num_actions,
                expected_items,
            }
            .into());
        }
        let stride = num_actions * self.max_beam;
        let mut advanced = Vec::new();
        for b in 0..self.beams.len() {
            if self.beams[b].is_terminal(self.system.as_ref()) {
                continue;
            }
            let rows = &scores[b * stride..(b + 1) * stride];
            let result =
                self.beams[b].advance_from_prediction(self.system.as_ref(), rows, num_actions);
            if let Err(e) = result {
                self.record_step(&advanced);
                return Err(self.beam_error(b, e));
            }
            advanced.push(b);
        }
        self.record_step(&advanced);
        Ok(())
    }

    fn advance_from_oracle(&mut self) -> crate::Result<()> {
        for b in 0..self.beams.len() {
            let result = self.beams[b].advance_from_oracle(self.system.as_ref());
            result.map_err(|e| self.beam_error(b, e))?;
        }
        let all: Vec<usize> = (0..self.beams.len()).collect();
        self.record_step(&all);
        Ok(())
    }

    fn is_terminal(&self) -> bool {
        self.beams
            .iter()
            .all(|b| b.is_terminal(self.system.as_ref()))
    }

    fn is_terminal_at(&self, batch: usize) -> bool {
        self.beams
            .get(batch)
            .is_none_or(|b| b.is_terminal(self.system.as_ref()))
    }

    fn get_beam(&self) -> Vec<Vec<ParserState>> {
        self.beams
            .iter()
            .map(|b| b.beam().first().cloned().into_iter().collect())
            .collect()
    }

    fn get_fixed_features(
        &self,
        channel: usize,
        out: &mut dyn FeatureAllocator,
    ) -> crate::Result<usize> {
        let ch = self.fixed_channel(channel)?;
        let size = ch.size();
        let features = self.extract_fixed(ch);
        let (indices, ids, weights) = out.allocate(features.len());
        for (i, (element, f)) in features.iter().enumerate() {
            indices[i] = to_i32(element * size + f.slot);
            ids[i] = f.id;
            weights[i] = f.weight;
        }
        Ok(features.len())
    }

    fn bulk_get_fixed_features(&mut self, out: &mut BulkFeatures) -> crate::Result<usize> {
        // (slot, element, step, id, weight) per channel.
        let mut collected: Vec<Vec<BulkEntry>> = vec![Vec::new(); self.fixed.len()];
        let mut steps = 0;
        while !self.is_terminal() {
            for (c, ch) in self.fixed.iter().enumerate() {
                for (element, f) in self.extract_fixed(ch.as_ref()) {
                    collected[c].push((f.slot, element, steps, f.id, f.weight));
                }
            }
            self.advance_from_oracle()?;
            steps += 1;
        }
        let batch = out.pad_to_batch.unwrap_or(0).max(self.beams.len());
        let elements = batch * self.max_beam;
        let total_steps = out.pad_to_step.unwrap_or(0).max(steps);
        out.channels = collected
            .into_iter()
            .map(|features| {
                let mut o = FixedFeatureOutput::default();
                o.allocate(features.len());
                for (i, (slot, element, step, id, weight)) in features.into_iter().enumerate() {
                    o.indices[i] =
                        to_i32(slot * (elements * total_steps) + element * total_steps + step);
                    o.ids[i] = id;
                    o.weights[i] = weight;
                }
                o
            })
            .collect();
        Ok(steps)
    }

    fn get_raw_link_features(&self, channel: usize) -> crate::Result<Vec<Option<RawLinkFeature>>> {
        let ch = self
            .linked
            .get(channel)
            .ok_or_else(|| ComponentError::NoChannel {
                component: self.name.clone(),
                kind: "linked",
                channel,
                count: self.linked.len(),
            })?;
        let size = ch.size();
        let mut out = vec![None; self.beams.len() * self.max_beam * size];
        for (b, beam) in self.beams.iter().enumerate() {
            for (slot, state) in beam.beam().iter().enumerate() {
                let base = (b * self.max_beam + slot) * size;
                for (i, value) in ch.extract(state).into_iter().take(size).enumerate() {
                    out[base + i] = Some(RawLinkFeature {
                        batch_idx: b,
                        beam_idx: to_i32(slot),
                        feature_value: value,
                    });
                }
            }
        }
        Ok(out)
    }

    fn get_oracle_labels(&self) -> crate::Result<Vec<Vec<i32>>> {
        Ok(self
            .beams
            .iter()
            .map(|beam| {
                beam.beam()
                    .iter()
                    .map(|s| {
                        if TransitionSystem::is_final(self.system.as_ref(), s) {
                            -1
                        } else {
                            TransitionSystem::oracle(self.system.as_ref(), s)
                                .first()
                                .map_or(-1, |&a| to_i32(a))
                        }
                    })
                    .collect()
            })
            .collect())
    }

    fn finalize_data(&mut self, input: &mut InputBatchCache) -> crate::Result<()> {
        let sentences = &mut input.get_as::<Sentences>()?.0;
        for (b, beam) in self.beams.iter().enumerate() {
            // An empty beam leaves its sentence as it is (the reference only warns).
            let (Some(top), Some(sentence)) = (beam.beam().first(), sentences.get_mut(b)) else {
                continue;
            };
            self.system.finalize(top, &self.maps, sentence)?;
        }
        Ok(())
    }

    fn reset_component(&mut self) {
        self.beams.clear();
        self.max_beam = 0;
        self.ready = false;
        let mut trace = self.traces();
        trace.records.clear();
        trace.pending.clear();
    }

    fn get_trace_protos(&self) -> crate::Result<Vec<Vec<ComponentTrace>>> {
        let trace = self.traces();
        if !trace.enabled {
            return Err(ComponentError::TracingNotEnabled {
                component: self.name.clone(),
            }
            .into());
        }
        let link_size = |c: usize| self.linked.get(c).map_or(0, |l| l.size());
        let link_name = |c: usize| {
            self.linked
                .get(c)
                .map_or(String::new(), |l| l.name().to_string())
        };
        let mut out = Vec::with_capacity(self.beams.len());
        for (b, beam) in self.beams.iter().enumerate() {
            let history = beam.history();
            let records = trace.records.get(b).map_or(&[][..], Vec::as_slice);
            let mut traces = Vec::with_capacity(beam.size());
            for final_slot in 0..beam.size() {
                let mut steps = Vec::new();
                let mut slot = final_slot;
                for (t, record) in records.iter().enumerate().rev() {
                    let (action, score) = record.slots.get(slot).copied().unwrap_or((-1, 0.0));
                    let previous = history
                        .get(t + 1)
                        .and_then(|row| row.get(slot))
                        .copied()
                        .and_then(|p| usize::try_from(p).ok())
                        .unwrap_or(slot);
                    let linked_features = record
                        .links
                        .iter()
                        .map(|(c, features)| {
                            let size = link_size(*c);
                            let start = previous * size;
                            LinkedFeatureTrace {
                                channel: link_name(*c),
                                features: features
                                    .get(start..start + size)
                                    .map(<[_]>::to_vec)
                                    .unwrap_or_default(),
                            }
                        })
                        .collect();
                    steps.push(ComponentStepTrace {
                        step: t,
                        action,
                        action_name: usize::try_from(action)
                            .map(|a| self.system.action_name(a, &self.maps))
                            .unwrap_or_default(),
                        score,
                        linked_features,
                    });
                    slot = previous;
                }
                steps.reverse();
                traces.push(ComponentTrace {
                    name: self.name.clone(),
                    steps,
                });
            }
            out.push(traces);
        }
        Ok(out)
    }

    fn add_translated_link_features_to_trace(
        &self,
        features: &[Option<LinkIndex>],
        channel: usize,
    ) -> crate::Result<()> {
        let mut trace = self.traces();
        if !trace.enabled {
            return Err(ComponentError::TracingNotEnabled {
                component: self.name.clone(),
            }
            .into());
        }
        let per_batch = self.max_beam * self.linked.get(channel).map_or(0, |l| l.size());
        trace.pending.resize_with(self.beams.len(), Vec::new);
        for b in 0..self.beams.len() {
            let slice = features
                .get(b * per_batch..(b + 1) * per_batch)
                .map(<[_]>::to_vec)
                .unwrap_or_default();
            trace.pending[b].push((channel, slice));
        }
        Ok(())
    }
}

/// The transition system a spec names, with its parameters.
fn system_of(spec: &ComponentSpec) -> crate::Result<Box<dyn transition::TransitionSystem>> {
    let params: Vec<(String, String)> = spec
        .transition_system
        .as_ref()
        .map(|t| {
            t.parameters
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    Ok(transition::create(spec.transition_system_name(), params)?)
}
