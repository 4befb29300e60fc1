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
//! A step's graph has the same operations at every step and for every batch.
//! A unit with state (an LSTM) keeps the rows of finished sentences (their features embed
//! as zeros or as the final state's), so its step's shapes never change.
//! A unit without state (a feed-forward parser) computes only the rows of sentences still
//! parsing; kiln's graph cache compiles a new plan for a new row count only where the count
//! changes the shapes' size pattern (it becomes 1, or equal to another dimension).
//! The layers that linked features read are copied to host tables after each step.
//! A step's whole input is written on the host and goes up as one array, so the step's
//! graph starts at the unit's first product: fixed channels sum rows of host copies of
//! their embedding matrices; a channel reading an earlier component copies rows of that
//! component's table projected once, before the steps; a channel reading the component's
//! own earlier steps copies rows projected in the graph of the step that made them.
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
use crate::network::{floats, Layers, LinkBatch, NetworkError};
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
    /// The rows and width of `layer`, which a linked feature of `reader` reads; an error
    /// naming both when the source did not keep it.
    fn layer(
        &self,
        reader: &super::ComponentModel,
        layer: &str,
    ) -> Result<(&[f32], usize), NetworkError> {
        self.layers
            .iter()
            .find(|(n, _, _)| n == layer)
            .map(|(_, d, v)| (v.as_slice(), *d))
            .ok_or_else(|| NetworkError::BadUnit {
                component: reader.name.clone(),
                unit: "linked feature".into(),
                message: format!("layer '{layer}' of its source was not kept"),
            })
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
    run_session_with(model, session, beam, &HostEmbeddings::new(model, beam)?)
}

/// The beam a component runs with: `beam` (else its spec's `inference_beam_size`) when it
/// predicts, 1 when it has no actions.
fn beam_of(model: &MasterModel, comp: &super::ComponentModel, beam: Option<usize>) -> usize {
    let cspec = &model.spec().component[comp.index];
    if comp.unit.num_actions().is_some() {
        beam.unwrap_or(cspec.inference_beam_size().max(1) as usize)
            .max(1)
    } else {
        1
    }
}

/// Whether a component with beam `k` runs every step in one pass ([`run_bulk`]) rather
/// than step by step.
fn runs_in_bulk(model: &MasterModel, comp: &super::ComponentModel, k: usize) -> bool {
    k == 1 && annotates_in_bulk(&model.spec().component[comp.index])
}

/// Host copies of the fixed channels' embedding matrices of the components that run step
/// by step, made once per [`parse`] and read by each of its batches' steps
/// ([`StepInput`]); a component that runs in bulk embeds in its graph and gets none.
/// For a unit whose first product splits
/// ([`crate::network::NetworkUnit::splits_first_layer`]), a channel of at most
/// [`PRODUCT_VOCABULARY`] rows also gets its matrix times each slot's rows of the unit's
/// first weights ([`HostChannel::product`]).
struct HostEmbeddings(Vec<Vec<HostChannel>>);

/// A fixed channel's host copies (see [`HostEmbeddings`]).
#[derive(Clone, Default)]
struct HostChannel {
    /// The embedding matrix (`None`: the ids pass through, `embedding_dim: -1`).
    matrix: Option<HostMatrix>,
    /// `[vocabulary + 1, size, hidden]`: row `id`, slot `s` is the matrix's row `id` times
    /// the first weights' rows of slot `s`, its share of the unit's first product.
    product: Option<std::sync::Arc<[f32]>>,
}

/// The largest vocabulary (embedding matrix rows) whose products with the first weights
/// are made once per parse: a product costs the matrix's rows × `dim` × `size` × `hidden`
/// multiply-adds once, where multiplying the channel's columns in each step costs its
/// step rows × the same, so it pays once a parse has more step rows than the vocabulary
/// (labels, actions and the like have tens of values; words have thousands and stay in
/// the step's product).
const PRODUCT_VOCABULARY: usize = 256;

/// The unit's first weights (`[input_dim, hidden]`) restricted to columns
/// `offset..offset + size * dim` of its input, as `[dim, size * hidden]`: slot `s`'s rows
/// side by side, so that `rows · result` gives every slot's share of the first product.
fn slot_weights(w0: &Array, offset: usize, size: usize, dim: usize) -> kiln::Result<Array> {
    let blocks = (0..size)
        .map(|s| w0.try_slice(kiln::s![offset + s * dim..offset + (s + 1) * dim]))
        .collect::<kiln::Result<Vec<_>>>()?;
    Array::try_concat(&blocks.iter().collect::<Vec<_>>(), 1)
}

impl HostEmbeddings {
    /// The copies a parse with `beam` reads.
    fn new(model: &MasterModel, beam: Option<usize>) -> crate::Result<HostEmbeddings> {
        HostEmbeddings::of(model, |comp| {
            !runs_in_bulk(model, comp, beam_of(model, comp, beam))
        })
    }

    /// The copies of the components `wanted` picks.
    fn of(
        model: &MasterModel,
        wanted: impl Fn(&super::ComponentModel) -> bool,
    ) -> crate::Result<HostEmbeddings> {
        let store = model.params();
        let mut all = Vec::with_capacity(model.components().len());
        for comp in model.components() {
            if !wanted(comp) {
                all.push(Vec::new());
                continue;
            }
            let w0 = if comp.unit.splits_first_layer() {
                Some(store.value(&format!("{}/weights_0", comp.name))?)
            } else {
                None
            };
            let mut channels = Vec::with_capacity(comp.fixed.len());
            let mut offset = 0;
            for (c, f) in comp.fixed.iter().enumerate() {
                let mut channel = HostChannel::default();
                if let Some(dim) = f.dim {
                    let name = format!("{}/fixed_embedding_matrix_{c}", comp.name);
                    let matrix = store.value(&name)?;
                    if let Some(w0) = w0
                        .as_ref()
                        .filter(|_| matrix.shape()[0] <= PRODUCT_VOCABULARY)
                    {
                        let w = slot_weights(w0, offset, f.size, dim)?;
                        channel.product = Some(host_f32(&matrix.try_matmul(&w)?)?.into());
                    }
                    channel.matrix = Some((host_f32(&matrix)?.into(), dim));
                }
                offset += f.size * f.dim.unwrap_or(1);
                channels.push(channel);
            }
            all.push(channels);
        }
        Ok(HostEmbeddings(all))
    }
}

/// [`run_session`] with the host copies of the embedding matrices made already.
fn run_session_with(
    model: &MasterModel,
    session: &mut ComputeSession,
    beam: Option<usize>,
    embeddings: &HostEmbeddings,
) -> crate::Result<()> {
    let store = model.params();
    let dtype = store.dtype();
    let mut tables: Vec<HostTables> = Vec::new();
    for comp in model.components() {
        let name = comp.name.as_str();
        let predicts = comp.unit.num_actions().is_some();
        session.initialize_component_data(name, beam_of(model, comp, beam))?;
        let k = session.beam_size(name)?;
        let stride = session.batch_size(name)? * k;
        // The layers of this component that some linked feature reads from the host: a
        // later component's, or its own raw ones (its own projected links keep their
        // projected rows instead, [`StepInput::extend_own`], or run inside the bulk graph).
        let mut read: Vec<(String, usize)> = Vec::new();
        for c in model.components() {
            for l in &c.linked {
                let host = c.index != comp.index || l.dim.is_none();
                if host && l.source == comp.index && !read.iter().any(|(n, _)| *n == l.layer) {
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
        if runs_in_bulk(model, comp, k) {
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
        // A step's whole input is written on the host ([`StepInput`]) and goes up as one
        // array: fixed channels from host copies of their embedding matrices, linked
        // channels from rows projected once (another component's) or as they are made
        // (the component's own), so the step's graph starts at the unit's first product.
        let matrices = embeddings
            .0
            .get(comp.index)
            .filter(|m| m.len() == comp.fixed.len());
        let matrices = matrices.ok_or_else(|| NetworkError::BadUnit {
            component: comp.name.clone(),
            unit: "inference".into(),
            message: format!(
                "no host copies of its embedding matrices for beam {k} (an internal error: \
                 the copies were made for another beam)"
            ),
        })?;
        let mut input = StepInput::new(model, comp, &tables, matrices, true)?;
        let mut state = comp.unit.initial_state(stride, dtype)?;
        // A unit without state computes only the rows of batch items still parsing: a
        // finished item's rows would be computed and ignored ([`Steps`]).
        let stateless = state.is_none() && !comp.unit.is_recurrent();
        while !session.is_terminal(name)? {
            let step = if stateless {
                let c = session.readied_component(name)?;
                Steps::of(stride / k.max(1), k, |b| c.is_terminal_at(b))
            } else {
                Steps::all(stride)
            };
            let rows = step.rows();
            input.clear(rows);
            for c in 0..comp.fixed.len() {
                let mut out = FixedFeatureOutput::default();
                session.get_input_features(name, c, &mut out)?;
                input.fixed(comp, c, &step.fixed(out, comp.fixed[c].size))?;
            }
            for (c, l) in comp.linked.iter().enumerate() {
                let links = step.links(session.get_translated_link_features(name, c)?, l.size);
                let src = if l.recurrent { &own } else { &tables[l.source] };
                let mut b = LinkBatch::new(l.size);
                b.add_step(&links, |x| source_row(x, src.stride, src.beam));
                input.linked(comp, c, &b, src)?;
            }
            let (layers, next) = match input.finish(dtype)? {
                Finished::FirstProduct(xw0) => (
                    comp.unit
                        .forward_from_first_matmul(store, &comp.name, &xw0, None)?,
                    None,
                ),
                Finished::Input(x) => comp.run(store, &[x], state.as_ref(), None)?,
            };
            let own_projected = input.project_own(comp, &layers)?;
            // The logits come to the host, which log-softmaxes them ([`log_softmax_rows`]):
            // a few dozen values per row, where the graph would spend four small kernels.
            let scores = layers.get("logits").filter(|_| predicts).cloned();
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
            outputs.extend(own_projected.iter().map(|(_, a)| a));
            kiln::eval(&outputs)?;
            for (c, a) in &own_projected {
                input.extend_own(*c, &step, &host_f32(a)?);
            }
            for (n, width, table) in &mut own.layers {
                if let Some(l) = layers.get(n) {
                    step.extend_full(table, &host_f32(l)?, *width);
                }
            }
            state = next;
            match &scores {
                Some(logits) => {
                    let mut computed = host_f32(logits)?;
                    log_softmax_rows(&mut computed, comp.num_actions);
                    let mut scores = Vec::with_capacity(stride * comp.num_actions);
                    step.extend_full(&mut scores, &computed, comp.num_actions);
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

/// Which rows of a step's full `[stride]` layout (`batch × beam`, item-major) the step
/// computes: every row, or those of the batch items still parsing, in order.
struct Steps {
    stride: usize,
    /// For each full row, its row in the step's computation (`None`: left out).
    row_of: Option<Vec<Option<usize>>>,
    rows: usize,
}

impl Steps {
    /// Every row of `stride`.
    fn all(stride: usize) -> Steps {
        Steps {
            stride,
            row_of: None,
            rows: stride,
        }
    }

    /// The rows of the items of `batch` (each `beam` rows) for which `done` is false.
    fn of(batch: usize, beam: usize, done: impl Fn(usize) -> bool) -> Steps {
        let stride = batch * beam;
        let finished: Vec<bool> = (0..batch).map(done).collect();
        if !finished.iter().any(|&d| d) {
            return Steps::all(stride);
        }
        let mut next = 0;
        let row_of = (0..stride)
            .map(|r| {
                (!finished[r / beam.max(1)]).then(|| {
                    next += 1;
                    next - 1
                })
            })
            .collect();
        Steps {
            stride,
            row_of: Some(row_of),
            rows: next,
        }
    }

    /// The rows computed.
    fn rows(&self) -> usize {
        self.rows
    }

    /// A full step's fixed features (indices `row * size + slot`) as the computed rows'.
    fn fixed(&self, out: FixedFeatureOutput, size: usize) -> FixedFeatureOutput {
        let Some(row_of) = &self.row_of else {
            return out;
        };
        let mut kept = FixedFeatureOutput::default();
        for i in 0..out.indices.len() {
            let index = usize::try_from(out.indices[i]).ok();
            let row = index.and_then(|x| row_of.get(x / size.max(1)).copied().flatten());
            if let (Some(index), Some(row)) = (index, row) {
                kept.indices.push((row * size + index % size) as i32);
                kept.ids.push(out.ids[i]);
                kept.weights.push(out.weights[i]);
            }
        }
        kept
    }

    /// A full step's links (`size` per row) as the computed rows'.
    fn links<T: Copy>(&self, links: Vec<T>, size: usize) -> Vec<T> {
        let Some(row_of) = &self.row_of else {
            return links;
        };
        links
            .chunks(size.max(1))
            .zip(row_of)
            .filter(|(_, r)| r.is_some())
            .flat_map(|(chunk, _)| chunk.iter().copied())
            .collect()
    }

    /// Appends the computed rows' values (`width` each) to `table` in the full layout,
    /// zeros in the rows left out.
    fn extend_full(&self, table: &mut Vec<f32>, computed: &[f32], width: usize) {
        let Some(row_of) = &self.row_of else {
            table.extend_from_slice(computed);
            return;
        };
        table.reserve(self.stride * width);
        for r in row_of {
            match r {
                Some(r) => table.extend_from_slice(&computed[r * width..(r + 1) * width]),
                None => table.extend(std::iter::repeat_n(0.0, width)),
            }
        }
    }
}

/// A step's input written on the host, `[rows, width]`: each channel at its column
/// offset, fixed channels then linked ones in spec order, the layout
/// [`super::ComponentModel::run`] concatenates.
/// Fixed channels sum `weight × row` of a host copy of their embedding matrix per cell (as
/// [`crate::network::embed_fixed`]); projected linked channels copy rows of a projected
/// table (as [`crate::network::embed_links`] computes them: [`projected_links`]); raw ones
/// copy the source's rows (zeros out of range).
///
/// When the unit's first product splits over its input's columns
/// ([`crate::network::NetworkUnit::splits_first_layer`]), fixed channels of small
/// vocabularies skip the columns: their matrices times each slot's rows of the first
/// weights are made once per parse ([`HostChannel::product`]), and each step adds those
/// rows into its share of the product ([`First::pre`]), which [`StepInput::finish`] adds to
/// `x · W` over the remaining columns.
/// The parser's label, action and space-after features (220 of its 1,084 columns) thus
/// leave the per-step product.
struct StepInput {
    /// The columns written (those not premultiplied).
    width: usize,
    rows: usize,
    values: Vec<f32>,
    /// Each fixed channel's route.
    fixed: Vec<FixedRoute>,
    /// Each linked channel's column offset and rows.
    linked: Vec<(usize, Link)>,
    /// Where the first product splits: the premultiplied shares.
    first: Option<First>,
}

/// How a fixed channel reaches the unit: as columns of the step input at an offset, with
/// its host matrix (`None`: the ids pass through), or as premultiplied rows added to the
/// first product ([`HostChannel::product`]).
enum FixedRoute {
    Columns(usize, Option<HostMatrix>),
    Product(std::sync::Arc<[f32]>),
}

/// A step's input as [`StepInput::finish`] gives it.
enum Finished {
    /// The written values, `[rows, width]`, for [`super::ComponentModel::run`].
    Input(Array),
    /// Where the first product splits: `x · W + pre`, `[rows, hidden]`, for
    /// [`crate::network::NetworkUnit::forward_from_first_matmul`].
    FirstProduct(Array),
}

/// The split first product of a step (see [`StepInput`]).
struct First {
    hidden: usize,
    /// `[rows, hidden]`: the premultiplied channels' sum.
    pre: Vec<f32>,
    /// The first weights' rows of the written columns, `[width, hidden]`, evaluated.
    weights: Array,
}

/// Adds `w ×` slot `slot` of premultiplied row `index` (`table` is `[rows, size, hidden]`)
/// into `pre` (`hidden` wide); `false` when the table has no such row.
fn add_product(
    pre: &mut [f32],
    table: &[f32],
    size: usize,
    index: usize,
    slot: usize,
    w: f32,
) -> bool {
    let h = pre.len();
    let at = index
        .checked_mul(size)
        .and_then(|x| x.checked_add(slot)?.checked_mul(h));
    let Some(src) = at.and_then(|at| table.get(at..at.checked_add(h)?)) else {
        return false;
    };
    if w == 1.0 {
        for (d, s) in pre.iter_mut().zip(src) {
            *d += s;
        }
    } else {
        for (d, s) in pre.iter_mut().zip(src) {
            *d += w * s;
        }
    }
    true
}

/// A host copy of an embedding matrix (row-major) and its width.
type HostMatrix = (std::sync::Arc<[f32]>, usize);

/// Where a linked channel's rows come from.
enum Link {
    /// A projected table (`table`, `[n, dim]`) and the out-of-range row. For a link to the
    /// component itself, `own` holds the projection's source rows (`[source_dim, dim]`):
    /// each step's layer is projected in the step's graph and appended ([`StepInput::extend_own`]).
    Projected {
        table: Vec<f32>,
        oob: Vec<f32>,
        dim: usize,
        own: Option<Array>,
    },
    /// The source layer's raw rows, `dim` wide.
    Raw { dim: usize },
}

impl StepInput {
    /// The input of `comp`, whose fixed channels' host copies are `embeddings` and whose
    /// earlier components' layers are `tables`; with `split`, channels premultiply where
    /// the unit's first product splits (see [`StepInput`]).
    fn new(
        model: &MasterModel,
        comp: &super::ComponentModel,
        tables: &[HostTables],
        embeddings: &[HostChannel],
        split: bool,
    ) -> crate::Result<StepInput> {
        let store = model.params();
        let w0 = if split && comp.unit.splits_first_layer() {
            Some(store.value(&format!("{}/weights_0", comp.name))?)
        } else {
            None
        };
        // Offsets in the unit's whole input (`at`) and in the written columns (`width`).
        let (mut at, mut width) = (0, 0);
        // The whole input's rows of the written columns, for the direct weights.
        let mut kept: Vec<(usize, usize)> = Vec::new();
        let mut fixed = Vec::with_capacity(comp.fixed.len());
        for (f, host) in comp.fixed.iter().zip(embeddings) {
            let cols = f.size * f.dim.unwrap_or(1);
            match (&host.product, &w0) {
                (Some(p), Some(_)) => fixed.push(FixedRoute::Product(p.clone())),
                _ => {
                    fixed.push(FixedRoute::Columns(width, host.matrix.clone()));
                    kept.push((at, cols));
                    width += cols;
                }
            }
            at += cols;
        }
        let mut linked = Vec::with_capacity(comp.linked.len());
        for (c, l) in comp.linked.iter().enumerate() {
            let cols = l.size * l.dim.unwrap_or(l.source_dim);
            let link = match l.dim {
                Some(dim) => {
                    let p = store.value(&format!("{}/linked_embedding_matrix_{c}", comp.name))?;
                    let (table, oob, own) = if l.recurrent {
                        let oob = p.try_slice(kiln::s![l.source_dim..l.source_dim + 1])?;
                        (
                            Vec::new(),
                            host_f32(&oob)?,
                            Some(p.try_slice(kiln::s![0..l.source_dim])?),
                        )
                    } else {
                        let (source, source_dim) = tables[l.source].layer(comp, &l.layer)?;
                        let (mut table, _) = projected_links(&p, source, source_dim)?;
                        let oob = table.split_off(table.len() - dim);
                        (table, oob, None)
                    };
                    Link::Projected {
                        table,
                        oob,
                        dim,
                        own,
                    }
                }
                None => Link::Raw { dim: l.source_dim },
            };
            linked.push((width, link));
            kept.push((at, cols));
            width += cols;
            at += cols;
        }
        if at != comp.input_dim {
            return Err(NetworkError::BadUnit {
                component: comp.name.clone(),
                unit: "inference".into(),
                message: format!(
                    "the channels are {at} wide, but the unit reads {}",
                    comp.input_dim
                ),
            }
            .into());
        }
        let first = match w0 {
            Some(w0) => {
                let parts = kept
                    .iter()
                    .map(|&(at, cols)| w0.try_slice(kiln::s![at..at + cols]))
                    .collect::<kiln::Result<Vec<_>>>()?;
                let weights = match parts.as_slice() {
                    [] => w0.try_slice(kiln::s![0..0])?,
                    [one] => one.clone(),
                    _ => Array::try_concat(&parts.iter().collect::<Vec<_>>(), 0)?,
                };
                // Evaluated once here, not in every step's graph.
                kiln::eval(&[&weights])?;
                Some(First {
                    hidden: w0.shape()[1],
                    pre: Vec::new(),
                    weights,
                })
            }
            None => None,
        };
        Ok(StepInput {
            width,
            rows: 0,
            values: Vec::new(),
            fixed,
            linked,
            first,
        })
    }

    /// Starts a step of `rows` rows, all zero.
    fn clear(&mut self, rows: usize) {
        self.rows = rows;
        self.values.clear();
        self.values.resize(rows * self.width, 0.0);
        if let Some(f) = &mut self.first {
            f.pre.clear();
            f.pre.resize(rows * f.hidden, 0.0);
        }
    }

    /// The step's written values, `[rows, width]`.
    fn take(&mut self) -> Vec<f32> {
        std::mem::take(&mut self.values)
    }

    /// The step's input as the unit reads it (see [`Finished`]).
    fn finish(&mut self, dtype: DType) -> kiln::Result<Finished> {
        let x = floats(self.take(), &[self.rows, self.width], dtype)?;
        let Some(f) = &mut self.first else {
            return Ok(Finished::Input(x));
        };
        let pre = floats(std::mem::take(&mut f.pre), &[self.rows, f.hidden], dtype)?;
        Ok(Finished::FirstProduct(if self.width == 0 {
            pre
        } else {
            x.try_matmul(&f.weights)?.try_add(&pre)?
        }))
    }

    /// Writes fixed channel `c`'s features (cell `row * size + slot`).
    fn fixed(
        &mut self,
        comp: &super::ComponentModel,
        c: usize,
        out: &FixedFeatureOutput,
    ) -> crate::Result<()> {
        let size = comp.fixed[c].size;
        let bad_id = |id: i64, vocabulary: usize| NetworkError::BadUnit {
            component: comp.name.clone(),
            unit: format!("fixed feature '{}'", comp.fixed[c].name),
            message: format!(
                "feature id {id} lies outside the embedding matrix's {vocabulary} rows"
            ),
        };
        for i in 0..out.len() {
            let cell = usize::try_from(out.indices[i])
                .ok()
                .filter(|&x| x < self.rows * size)
                .ok_or(NetworkError::FeatureIndex {
                    index: i64::from(out.indices[i]),
                    first_row: 0,
                    rows: self.rows,
                    size,
                })?;
            let (row, slot) = (cell / size, cell % size);
            let (id, w) = (out.ids[i], out.weights[i]);
            match &self.fixed[c] {
                FixedRoute::Product(p) => {
                    let index = usize::try_from(id).unwrap_or(usize::MAX);
                    let added = self.first.as_mut().is_some_and(|f| {
                        let h = f.hidden;
                        add_product(&mut f.pre[row * h..(row + 1) * h], p, size, index, slot, w)
                    });
                    if !added {
                        let hidden = self.first.as_ref().map_or(1, |f| f.hidden);
                        return Err(bad_id(id, p.len() / (size * hidden).max(1)).into());
                    }
                }
                FixedRoute::Columns(offset, Some((m, dim))) => {
                    let src = usize::try_from(id)
                        .ok()
                        .and_then(|id| m.get(id * dim..(id + 1) * dim))
                        .ok_or_else(|| bad_id(id, m.len() / dim.max(&1)))?;
                    let at = row * self.width + offset + slot * dim;
                    for (d, s) in self.values[at..at + dim].iter_mut().zip(src) {
                        *d += w * s;
                    }
                }
                FixedRoute::Columns(offset, None) => {
                    self.values[row * self.width + offset + slot] += id as f32 * w
                }
            }
        }
        Ok(())
    }

    /// Writes linked channel `c`'s rows (`batch.source_rows`, `size` per step row) read from
    /// `source`.
    fn linked(
        &mut self,
        comp: &super::ComponentModel,
        c: usize,
        batch: &LinkBatch,
        source: &HostTables,
    ) -> crate::Result<()> {
        let l = &comp.linked[c];
        let size = l.size.max(1);
        if batch.source_rows.len() != self.rows * l.size {
            return Err(NetworkError::BadUnit {
                component: comp.name.clone(),
                unit: format!("linked feature '{}'", l.name),
                message: format!(
                    "{} links for a step of {} rows of {} slots",
                    batch.source_rows.len(),
                    self.rows,
                    l.size
                ),
            }
            .into());
        }
        let (offset, link) = &self.linked[c];
        let (table, oob, dim) = match link {
            Link::Projected {
                table, oob, dim, ..
            } => (table.as_slice(), Some(oob.as_slice()), *dim),
            Link::Raw { dim } => (source.layer(comp, &l.layer)?.0, None, *dim),
        };
        let n = table.len() / dim.max(1);
        for (k, r) in batch.source_rows.iter().enumerate() {
            let src = match r {
                Some(r) if *r < n => &table[r * dim..(r + 1) * dim],
                Some(r) => {
                    return Err(NetworkError::LinkRow {
                        row: *r,
                        table_rows: n,
                    }
                    .into())
                }
                None => match oob {
                    Some(o) => o,
                    None => continue,
                },
            };
            let at = (k / size) * self.width + offset + (k % size) * dim;
            self.values[at..at + dim].copy_from_slice(src);
        }
        Ok(())
    }

    /// For each link of the component to itself that projects, the step's source layer
    /// times the projection (to be evaluated with the step, then [`StepInput::extend_own`]).
    fn project_own(
        &self,
        comp: &super::ComponentModel,
        layers: &Layers,
    ) -> Result<Vec<(usize, Array)>, NetworkError> {
        let mut out = Vec::new();
        for (c, (_, link)) in self.linked.iter().enumerate() {
            if let Link::Projected { own: Some(p), .. } = link {
                let name = &comp.linked[c].layer;
                let layer = layers.get(name).ok_or_else(|| NetworkError::BadUnit {
                    component: comp.name.clone(),
                    unit: format!("linked feature '{}'", comp.linked[c].name),
                    message: format!("reads layer '{name}', which the unit did not make"),
                })?;
                out.push((c, layer.try_matmul(p)?));
            }
        }
        Ok(out)
    }

    /// Appends a step's projected own rows (the computed rows', in the full layout).
    fn extend_own(&mut self, c: usize, step: &Steps, computed: &[f32]) {
        if let Some((
            _,
            Link::Projected {
                table,
                dim,
                own: Some(_),
                ..
            },
        )) = self.linked.get_mut(c)
        {
            step.extend_full(table, computed, *dim);
        }
    }
}

/// Each row of `width` logits replaced by its log-softmax, `x − m − ln Σ exp(x − m)` with
/// `m` the row's maximum (0 where that is not finite, as `kiln::Array::log_softmax` takes
/// it), summed in `f64`.
fn log_softmax_rows(values: &mut [f32], width: usize) {
    for row in values.chunks_mut(width.max(1)) {
        let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        let max = if max.is_finite() { max } else { 0.0 };
        // `f32` exponentials (each within an ulp of the `f64` one's rounding), summed in `f64`.
        let sum: f64 = row.iter().map(|&x| f64::from((x - max).exp())).sum();
        let log = sum.ln() as f32;
        for x in row {
            *x = *x - max - log;
        }
    }
}

/// A linked channel's projection `p` (`[source_dim + 1, dim]`) applied to every row of its
/// source's `table` (`[n, source_dim]` on the host): `[n + 1, dim]`, row `r` being
/// `[table[r], 0] · p` and row `n` the out-of-range row `[0, …, 0, 1] · p`.
/// The same values [`crate::network::embed_links`] computes for each gathered row, computed
/// once per source row instead of once per step and slot.
fn projected_links(
    p: &Array,
    table: &[f32],
    source_dim: usize,
) -> crate::Result<(Vec<f32>, usize)> {
    let dtype = p.dtype();
    let dim = p.shape()[1];
    let n = table.len() / source_dim.max(1);
    let rows = floats(table.to_vec(), &[n, source_dim], dtype)?;
    let projected = Array::try_concat(
        &[
            &rows.try_matmul(&p.try_slice(kiln::s![0..source_dim])?)?,
            &p.try_slice(kiln::s![source_dim..source_dim + 1])?,
        ],
        0,
    )?;
    Ok((host_f32(&projected)?, dim))
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
    let walk = walk_component(
        session,
        comp,
        |s| (tables[s].stride, tables[s].beam),
        super::train::inference_steps,
    )?;
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
    annotate_batch_with(
        model,
        session,
        sentences,
        beam,
        &HostEmbeddings::new(model, beam)?,
    )
}

/// [`annotate_batch`] with the host copies of the embedding matrices made already.
fn annotate_batch_with(
    model: &MasterModel,
    session: &mut ComputeSession,
    sentences: &[Sentence],
    beam: Option<usize>,
    embeddings: &HostEmbeddings,
) -> crate::Result<Vec<Sentence>> {
    session.reset_session();
    session.set_input_data(items(sentences));
    run_session_with(model, session, beam, embeddings)?;
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
    let embeddings = HostEmbeddings::new(model, options.beam)?;
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
            let out = annotate_batch_with(model, &mut session, &input, options.beam, &embeddings)?;
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

#[cfg(test)]
mod tests {
    //! The inference shortcuts against the general embedding functions they stand for.
    use super::*;
    use crate::component::FixedFeatureOutput;
    use crate::network::{gather_links_host, FixedBatch};

    /// A seeded generator of test values: uniform floats in [-1, 1) and indices below `n`.
    struct Rng(fastrand::Rng);

    impl Rng {
        fn new(seed: u64) -> Rng {
            Rng(fastrand::Rng::with_seed(seed))
        }

        fn below(&mut self, n: usize) -> usize {
            self.0.usize(..n)
        }

        fn float(&mut self) -> f32 {
            self.0.f32() * 2.0 - 1.0
        }
    }

    /// Batch item 1 of 3 (beam 2) finished: its rows 2 and 3 are left out of the step, the
    /// others renumbered in order, and results come back to the full layout with zeros.
    #[test]
    fn a_step_leaves_out_the_rows_of_finished_items() {
        let step = Steps::of(3, 2, |b| b == 1);
        assert_eq!(step.rows(), 4);
        // Two slots per row; one feature in each cell, id = 10·row + slot.
        let mut out = FixedFeatureOutput::default();
        for row in 0..6i32 {
            for slot in 0..2i32 {
                out.indices.push(row * 2 + slot);
                out.ids.push(i64::from(10 * row + slot));
                out.weights.push(1.0);
            }
        }
        let kept = step.fixed(out, 2);
        assert_eq!(kept.indices, [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(kept.ids, [0, 1, 10, 11, 40, 41, 50, 51]);
        assert_eq!(step.links((0..12).collect(), 2), [0, 1, 2, 3, 8, 9, 10, 11]);
        let mut table = vec![9.0];
        step.extend_full(&mut table, &[1.0, 2.0, 3.0, 4.0], 1);
        assert_eq!(table, [9.0, 1.0, 2.0, 0.0, 0.0, 3.0, 4.0]);
        // Nothing finished: everything passes through.
        let all = Steps::of(3, 2, |_| false);
        assert_eq!((all.rows(), all.links(vec![1, 2], 1)), (6, vec![1, 2]));
        // Everything finished: no rows.
        assert_eq!(Steps::of(3, 2, |_| true).rows(), 0);
    }

    #[test]
    fn host_log_softmax_equals_the_graphs() {
        let mut rng = Rng::new(5);
        let (rows, width) = (7, 13);
        let mut v: Vec<f32> = (0..rows * width).map(|_| rng.float() * 30.0).collect();
        v[3] = f32::NEG_INFINITY;
        // A row of -inf, and one with +inf: what the graph gives, NaN included.
        for x in &mut v[2 * width..3 * width] {
            *x = f32::NEG_INFINITY;
        }
        v[4 * width + 5] = f32::INFINITY;
        let want = Array::from_vec(v.clone(), &[rows, width])
            .unwrap()
            .log_softmax(-1)
            .to_vec::<f32>()
            .unwrap();
        log_softmax_rows(&mut v, width);
        for (i, (a, b)) in v.iter().zip(&want).enumerate() {
            let same =
                (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-5 * (1.0 + b.abs());
            assert!(same, "element {i}: {a} against {b}");
        }
    }

    /// A lookahead with a hidden layer, and a parser reading it projected and raw, itself
    /// projected (`shift-reduce-step`), and fixed words (two slots) and last actions passed
    /// through (`embedding_dim: -1`).
    const SPEC: &str = r#"
component { name: "lookahead"
  transition_system { registered_name: "shift-only" }
  fixed_feature { name: "words" fml: "input.word" embedding_dim: 4 }
  network_unit { registered_name: "FeedForwardNetwork" parameters { key: "hidden_layer_sizes" value: "3" } }
  backend { registered_name: "SyntaxNetComponent" } }
component { name: "parser"
  transition_system { registered_name: "arc-standard" }
  fixed_feature { name: "words" fml: "input.word stack.word" embedding_dim: 4 }
  fixed_feature { name: "action" fml: "last-action" embedding_dim: -1 }
  linked_feature { name: "projected" fml: "input.focus stack.focus" embedding_dim: 2
    source_component: "lookahead" source_translator: "identity" source_layer: "layer_0" }
  linked_feature { name: "raw" fml: "input.focus" embedding_dim: -1
    source_component: "lookahead" source_translator: "identity" source_layer: "layer_0" }
  linked_feature { name: "own" fml: "stack.focus" embedding_dim: 5
    source_component: "parser" source_translator: "shift-reduce-step" source_layer: "layer_0" }
  network_unit { registered_name: "FeedForwardNetwork" parameters { key: "hidden_layer_sizes" value: "6" } }
  backend { registered_name: "SyntaxNetComponent" } }
"#;

    fn close(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: lengths");
        for (i, (a, b)) in got.iter().zip(want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "{what}, element {i}: {a} against {b}"
            );
        }
    }

    /// The host-written step input against the graph's embeddings of the same features
    /// (`embed_fixed`, `embed_links` of gathered rows, concatenated), with cells holding
    /// several weighted features, empty cells and links out of range; and, where the
    /// unit's first product splits and small fixed channels are premultiplied, the step's
    /// first product against those embeddings times the unit's first weights.
    #[test]
    fn the_host_written_step_input_equals_the_graphs_embeddings() {
        step_input_against_the_graph(false);
        step_input_against_the_graph(true);
    }

    fn step_input_against_the_graph(split: bool) {
        let doc = crate::document::read_conllu(
            "1\ta\t_\tX\t_\t_\t2\tdep\t_\t_\n2\tb\t_\tY\t_\t_\t0\troot\t_\t_\n3\tc\t_\tX\t_\t_\t2\tobj\t_\t_",
        )
        .unwrap();
        let maps = crate::term_map::TermMaps::build(&doc, &Default::default());
        let model = MasterModel::new(
            crate::spec::MasterSpec::from_text(SPEC).unwrap(),
            crate::spec::GridPoint::default(),
            std::sync::Arc::new(maps),
            DType::F32,
        )
        .unwrap();
        let store = model.params();
        let comp = &model.components()[1];
        let mut rng = Rng::new(11);
        for trial in 0..12 {
            let (n, own_n) = (3 + rng.below(20), rng.below(12));
            let look: Vec<f32> = (0..n * 3).map(|_| rng.float()).collect();
            let own_rows: Vec<f32> = (0..own_n * 6).map(|_| rng.float()).collect();
            let lookahead = raw_source(&look);
            let own = HostTables {
                stride: 1,
                beam: 1,
                layers: vec![("layer_0".into(), 6, own_rows.clone())],
            };
            let embeddings = HostEmbeddings::of(&model, |_| true).unwrap();
            let mut input = StepInput::new(
                &model,
                comp,
                std::slice::from_ref(&lookahead),
                &embeddings.0[1],
                split,
            )
            .unwrap();
            // The test's vocabularies are small: with `split`, the word channel (the only
            // fixed one with a matrix) is premultiplied, the rest written.
            assert_eq!(input.width, if split { 13 } else { 21 }, "columns written");
            // The own rows come projected, as a run appends them step by step.
            let mut layers = Layers::default();
            layers.push(
                "layer_0",
                Array::from_vec(own_rows.clone(), &[own_n, 6]).unwrap(),
            );
            for (c, a) in input.project_own(comp, &layers).unwrap() {
                let v = a.to_vec::<f32>().unwrap();
                input.extend_own(c, &Steps::all(own_n), &v);
            }
            let rows = 1 + rng.below(6);
            input.clear(rows);
            let mut want: Vec<Array> = Vec::new();
            for (c, f) in comp.fixed.iter().enumerate() {
                let mut out = FixedFeatureOutput::default();
                for cell in 0..rows * f.size {
                    for _ in 0..rng.below(3) {
                        out.indices.push(cell as i32);
                        out.ids.push(rng.below(f.vocabulary) as i64);
                        out.weights
                            .push(if trial % 2 == 0 { 1.0 } else { rng.float() });
                    }
                }
                input.fixed(comp, c, &out).unwrap();
                let mut b = FixedBatch::new(rows, f.size);
                b.add_step(0, &out).unwrap();
                want.push(comp.embed_fixed(store, c, &b).unwrap());
            }
            for (c, l) in comp.linked.iter().enumerate() {
                let (src, table, width, count) = if l.recurrent {
                    (&own, &own_rows, 6, own_n)
                } else {
                    (&lookahead, &look, 3, n)
                };
                let batch = LinkBatch {
                    rows,
                    size: l.size,
                    source_rows: (0..rows * l.size)
                        .map(|_| (count > 0 && rng.below(4) > 0).then(|| rng.below(count)))
                        .collect(),
                };
                input.linked(comp, c, &batch, src).unwrap();
                let (g, oob) = gather_links_host(table, width, &batch).unwrap();
                let g = Array::from_vec(g, &[rows * l.size, width]).unwrap();
                let oob = Array::from_vec(oob, &[rows * l.size, 1]).unwrap();
                want.push(comp.embed_linked(store, c, &g, &oob, rows).unwrap());
            }
            let want = Array::concat(&want.iter().collect::<Vec<_>>(), 1);
            assert_eq!(want.shape(), &[rows, comp.input_dim]);
            let (got, want) = match input.finish(DType::F32).unwrap() {
                Finished::FirstProduct(xw0) => {
                    assert!(split);
                    let w0 = store.value("parser/weights_0").unwrap();
                    (xw0, want.matmul(&w0))
                }
                Finished::Input(x) => {
                    assert!(!split);
                    (x, want)
                }
            };
            close(
                &got.to_vec::<f32>().unwrap(),
                &want.to_vec::<f32>().unwrap(),
                &format!("split {split}, trial {trial}"),
            );
        }
        // An id past the matrix, a cell past the step, a link past the table: errors.
        let three = raw_source(&[0.0; 9]);
        let embeddings = HostEmbeddings::of(&model, |_| true).unwrap();
        let mut input = StepInput::new(
            &model,
            comp,
            std::slice::from_ref(&three),
            &embeddings.0[1],
            split,
        )
        .unwrap();
        input.clear(1);
        let bad = |index: i32, id: i64| FixedFeatureOutput {
            indices: vec![index],
            ids: vec![id],
            weights: vec![1.0],
        };
        assert!(input.fixed(comp, 0, &bad(0, 1 << 40)).is_err());
        assert!(input.fixed(comp, 0, &bad(2, 0)).is_err());
        let far = LinkBatch {
            rows: 1,
            size: 1,
            source_rows: vec![Some(3)],
        };
        assert!(input.linked(comp, 1, &far, &three).is_err());
    }

    /// A source holding `table` as its `layer_0` (3 wide).
    fn raw_source(table: &[f32]) -> HostTables {
        HostTables {
            stride: 1,
            beam: 1,
            layers: vec![("layer_0".into(), 3, table.to_vec())],
        }
    }
}
