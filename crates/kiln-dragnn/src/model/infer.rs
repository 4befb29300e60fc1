//! Inference (DRAGNN's `build_greedy_inference` and beam inference): each component runs
//! step by step, every step **one kiln evaluation** of the batch, then advances its beams
//! from the log-softmaxed logits (`AdvanceFromPrediction`: an item's score is its path's
//! log-probability, so items of different histories compare fairly; components without
//! logits advance along the oracle) and writes its annotations (`FinalizeData`).
//! An LSTM's state follows the beam: after each step, every slot takes the state of the
//! slot its item came from.
//!
//! Components whose features never depend on their own predictions (shift-only ones, and
//! taggers that read no predicted tags: DRAGNN's bulk annotation) run every step in one
//! evaluation instead, with the training code's bulk graph, and then advance their beams
//! from the precomputed scores (beam 1 only).
//!
//! A step's graph has the same operations at every step and for every batch: finished
//! sentences keep their rows (their features embed as zeros or as the final state's), so
//! kiln's graph cache compiles each component's step once.
//! The layers that linked features read are copied to host tables after each step, and
//! linked inputs are gathered from them on the host (the source's values are already
//! computed; only the projection runs in the graph).
//!
//! [`parse`] splits sentences into batches of similar length, runs them on several
//! threads with sessions from a [`ComputeSessionPool`], and returns the annotated sentences
//! in input order.
//!
//! Depends on [`super`] (the models), [`crate::network`], [`crate::session`],
//! [`crate::pool`] and [`crate::document`].

use std::sync::Mutex;

use kiln::{Array, DType};

use super::train::{component_forward, items, source_row, walk_component, Unroll};
use super::MasterModel;
use crate::component::FixedFeatureOutput;
use crate::document::{read_conllu, Sentence};
use crate::network::{floats, gather_links_host, FixedBatch, Layers, LinkBatch, NetworkError};
use crate::pool::ComputeSessionPool;
use crate::session::ComputeSession;

/// A component's activations that linked features read, on the host: for each layer its
/// width and its rows, `step * stride + batch * beam + slot`.
#[derive(Debug, Default)]
struct HostTables {
    stride: usize,
    beam: usize,
    layers: Vec<(String, usize, Vec<f32>)>,
}

impl HostTables {
    fn get(&self, layer: &str) -> Option<(&[f32], usize)> {
        self.layers
            .iter()
            .find(|(n, _, _)| n == layer)
            .map(|(_, d, v)| (v.as_slice(), *d))
    }
}

/// Options of inference.
#[derive(Debug, Clone, PartialEq)]
pub struct InferOptions {
    /// The beam size of components that predict (`None`: each spec's
    /// `inference_beam_size`).
    pub beam: Option<usize>,
    /// Sentences per batch.
    pub batch_size: usize,
    /// Threads (each with its own session).
    pub threads: usize,
}

impl Default for InferOptions {
    fn default() -> InferOptions {
        InferOptions {
            beam: None,
            batch_size: 32,
            threads: 1,
        }
    }
}

/// As `f32` values on the host.
fn host_f32(a: &Array) -> kiln::Result<Vec<f32>> {
    if a.dtype() == DType::F32 {
        a.to_vec::<f32>()
    } else {
        a.cast(DType::F32).to_vec::<f32>()
    }
}

/// Runs every component of `model` over the input already in `session` (see
/// [`ComputeSession::set_input_data`]) and finalizes each: the session then holds the
/// annotated batch ([`ComputeSession::get_serialized_predictions`]).
pub fn run_session(
    model: &MasterModel,
    session: &mut ComputeSession,
    beam: Option<usize>,
) -> crate::Result<()> {
    let store = model.params();
    let dtype = store.dtype();
    let spec = model.spec();
    let mut tables: Vec<HostTables> = Vec::new();
    for comp in model.components() {
        let name = comp.name.as_str();
        let cspec = &spec.component[comp.index];
        let predicts = comp.unit.num_actions().is_some();
        let beam_size = if predicts {
            beam.unwrap_or(cspec.inference_beam_size().max(1) as usize)
        } else {
            1
        };
        session.initialize_component_data(name, beam_size.max(1))?;
        let k = session.beam_size(name)?;
        let stride = session.batch_size(name)? * k;
        // The layers of this component that some linked feature reads.
        let mut read: Vec<(String, usize)> = Vec::new();
        for c in model.components() {
            for l in &c.linked {
                if l.source == comp.index && !read.iter().any(|(n, _)| *n == l.layer) {
                    read.push((l.layer.clone(), l.source_dim));
                }
            }
        }
        let mut own = HostTables {
            stride,
            beam: k,
            layers: read
                .iter()
                .map(|(n, d)| (n.clone(), *d, Vec::new()))
                .collect(),
        };
        if k == 1 && annotates_in_bulk(cspec) {
            let logits = run_bulk(model, session, comp, &tables, &mut own)?;
            if let Some(scores) = logits {
                session.initialize_component_data(name, 1)?;
                let width = stride * comp.num_actions;
                let mut t = 0;
                while !session.is_terminal(name)? {
                    let rows = scores.get(t * width..(t + 1) * width).ok_or_else(|| {
                        NetworkError::BadUnit {
                            component: comp.name.clone(),
                            unit: "inference".into(),
                            message: format!(
                                "the bulk pass computed {t} steps, fewer than the beams take"
                            ),
                        }
                    })?;
                    session.advance_from_prediction(name, rows, stride, comp.num_actions)?;
                    t += 1;
                }
            }
            session.finalize_data(name)?;
            tables.push(own);
            continue;
        }
        let mut state = comp.unit.initial_state(stride, dtype)?;
        while !session.is_terminal(name)? {
            let mut parts = Vec::new();
            for (c, f) in comp.fixed.iter().enumerate() {
                let mut out = FixedFeatureOutput::default();
                session.get_input_features(name, c, &mut out)?;
                let mut b = FixedBatch::new(stride, f.size);
                b.add_step(0, &out)?;
                parts.push(comp.embed_fixed(store, c, &b)?);
            }
            for (c, l) in comp.linked.iter().enumerate() {
                let links = session.get_translated_link_features(name, c)?;
                let src = if l.recurrent { &own } else { &tables[l.source] };
                let mut b = LinkBatch::new(l.size);
                b.add_step(&links, |x| source_row(x, src.stride, src.beam));
                let (table, dim) = src.get(&l.layer).ok_or_else(|| NetworkError::BadUnit {
                    component: comp.name.clone(),
                    unit: "linked feature".into(),
                    message: format!("layer '{}' of its source was not kept", l.layer),
                })?;
                let (rows, oob) = gather_links_host(table, dim, &b)?;
                let n = b.source_rows.len();
                let rows = floats(rows, &[n, dim], dtype)?;
                let oob = floats(oob, &[n, 1], dtype)?;
                parts.push(comp.embed_linked(store, c, &rows, &oob, stride)?);
            }
            let (layers, next) = comp.run(store, &parts, state.as_ref(), None)?;
            let scores = match layers.get("logits").filter(|_| predicts) {
                Some(l) => Some(l.try_log_softmax(-1)?),
                None => None,
            };
            let mut outputs: Vec<&Array> = Vec::new();
            if let Some(l) = &scores {
                outputs.push(l);
            }
            for (n, _) in &read {
                if let Some(l) = layers.get(n) {
                    outputs.push(l);
                }
            }
            if let Some(s) = &next {
                outputs.push(&s.h);
                outputs.push(&s.c);
            }
            kiln::eval(&outputs)?;
            for (n, _, table) in &mut own.layers {
                if let Some(l) = layers.get(n) {
                    table.extend(host_f32(l)?);
                }
            }
            state = next;
            match &scores {
                Some(scores) => {
                    let scores = host_f32(scores)?;
                    session.advance_from_prediction(name, &scores, stride, comp.num_actions)?;
                    // A recurrent unit's state follows the beam: each slot continues from the
                    // state of the slot its item came from.
                    if k > 1 {
                        if let Some(st) = state.as_mut() {
                            let c = session.readied_component(name)?;
                            let batch = stride / k;
                            let mut parents = Vec::with_capacity(stride);
                            for b in 0..batch {
                                let step = c.steps_taken(b) - 1;
                                for j in 0..k {
                                    let p = c.beam_index_at_step(step, j as i32, b);
                                    let p = if p < 0 { j } else { p as usize };
                                    parents.push((b * k + p) as i64);
                                }
                            }
                            let idx = Array::from_vec(parents, &[stride])?;
                            st.h = st.h.try_take(&idx, 0)?;
                            st.c = st.c.try_take(&idx, 0)?;
                        }
                    }
                }
                None => session.advance_from_oracle(name)?,
            }
        }
        session.finalize_data(name)?;
        tables.push(own);
    }
    Ok(())
}

/// Whether a component's features never depend on its own predictions, so that its every
/// step can be computed in one pass (DRAGNN's bulk annotation): a shift-only or tagger
/// transition system (the input advances one token per step whatever the action) with no
/// feature reading predicted tags, labels or actions.
fn annotates_in_bulk(spec: &crate::spec::ComponentSpec) -> bool {
    let system = spec.transition_system_name();
    if system != "shift-only" && system != "tagger" {
        return false;
    }
    !spec.fixed_feature.iter().any(|f| {
        let fml = f.fml();
        fml.contains("pred-tag") || fml.contains("label") || fml.contains("last-action")
    })
}

/// Runs a readied component over every step at once: walks it along the oracle to collect
/// its features (which do not depend on its predictions, see [`annotates_in_bulk`]),
/// builds the bulk graph of [`component_forward`], evaluates it, and copies the layers
/// that linked features read into `own`. Returns the log-softmaxed logits of every step
/// (`[steps * stride, actions]`) when the unit has them.
fn run_bulk(
    model: &MasterModel,
    session: &mut ComputeSession,
    comp: &super::ComponentModel,
    tables: &[HostTables],
    own: &mut HostTables,
) -> crate::Result<Option<Vec<f32>>> {
    let store = model.params();
    let dtype = store.dtype();
    let walk = walk_component(session, comp, |s| (tables[s].stride, tables[s].beam))?;
    let mut sources: Vec<Layers> = Vec::with_capacity(tables.len());
    for t in tables {
        let mut layers = Layers::default();
        for (name, dim, values) in &t.layers {
            let rows = values.len() / (*dim).max(1);
            layers.push(name, floats(values.clone(), &[rows, *dim], dtype)?);
        }
        sources.push(layers);
    }
    let layers = component_forward(model, comp, &walk, &sources, Unroll::Bulk, None)?;
    let scores = match layers
        .get("logits")
        .filter(|_| comp.unit.num_actions().is_some())
    {
        Some(l) => Some(l.try_log_softmax(-1)?),
        None => None,
    };
    let mut outputs: Vec<&Array> = scores.iter().collect();
    for (n, _, _) in &own.layers {
        if let Some(l) = layers.get(n) {
            outputs.push(l);
        }
    }
    kiln::eval(&outputs)?;
    for (n, _, table) in &mut own.layers {
        if let Some(l) = layers.get(n) {
            *table = host_f32(l)?;
        }
    }
    scores
        .as_ref()
        .map(host_f32)
        .transpose()
        .map_err(crate::Error::from)
}

/// Annotates one batch of sentences with `session`.
pub fn annotate_batch(
    model: &MasterModel,
    session: &mut ComputeSession,
    sentences: &[Sentence],
    beam: Option<usize>,
) -> crate::Result<Vec<Sentence>> {
    session.reset_session();
    session.set_input_data(items(sentences));
    run_session(model, session, beam)?;
    let mut out = Vec::with_capacity(sentences.len());
    for text in session.get_serialized_predictions()? {
        out.extend(read_conllu(&text)?);
    }
    Ok(out)
}

/// Annotates `sentences` with `model`: batches of similar length on `options.threads`
/// threads, results in input order.
pub fn parse(
    model: &MasterModel,
    sentences: &[Sentence],
    options: &InferOptions,
) -> crate::Result<Vec<Sentence>> {
    let mut order: Vec<usize> = (0..sentences.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(sentences[i].len()));
    let batch = options.batch_size.max(1);
    let batches: Vec<Vec<usize>> = order.chunks(batch).map(<[usize]>::to_vec).collect();
    let pool = ComputeSessionPool::new(
        model.spec().clone(),
        model.grid().clone(),
        model.maps().clone(),
    );
    let next = Mutex::new(0usize);
    let results: Mutex<Vec<Option<Sentence>>> = Mutex::new(vec![None; sentences.len()]);
    let threads = options.threads.max(1).min(batches.len().max(1));
    let work = || -> crate::Result<()> {
        let mut session = pool.session()?;
        loop {
            let b = {
                let mut n = next.lock().unwrap_or_else(|e| e.into_inner());
                let b = *n;
                *n += 1;
                b
            };
            let Some(idx) = batches.get(b) else {
                return Ok(());
            };
            let input: Vec<Sentence> = idx.iter().map(|&i| sentences[i].clone()).collect();
            let out = annotate_batch(model, &mut session, &input, options.beam)?;
            let mut r = results.lock().unwrap_or_else(|e| e.into_inner());
            for (&i, s) in idx.iter().zip(out) {
                r[i] = Some(s);
            }
        }
    };
    let outcomes: Vec<crate::Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads).map(|_| scope.spawn(work)).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    for o in outcomes {
        o?;
    }
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(results
        .into_iter()
        .zip(sentences)
        .map(|(r, s)| r.unwrap_or_else(|| s.clone()))
        .collect())
}
