//! Training by oracle (DRAGNN's `build_greedy_training` and `MasterBuilder.build_training`,
//! training beam 1), with each training step **one kiln evaluation**.
//!
//! A step first walks the components along the oracle on the host ([`walk_oracle`]):
//! for every step of every component it records the fixed features, the translated linked
//! features (as rows of the source's activation table) and the oracle labels.
//! The recorded features do not depend on the network (the oracle decides every
//! transition), so the network for the whole batch is one graph: [`forward`] builds every
//! component's layers over all its steps (the *bulk* layout `[steps × batch, dim]`,
//! step-major), [`cost`] the softmax cross-entropy averaged over valid steps, and the
//! [`Trainer`] adds the L2 term, takes gradients and lets the optimizer evaluate loss,
//! gradients and update together.
//! The graph's operations depend on the spec and, for units with state or recurrent links,
//! on the number of steps; sizes do not enter kiln's cache key, so batches of the same
//! step count reuse one compiled plan.
//!
//! [`Unroll::Bulk`] embeds every step at once and runs units without state on all rows in
//! one go (recurrent links and LSTMs still step); [`Unroll::StepByStep`] builds each step
//! separately, as the dynamic builder does; both compute the same values.
//!
//! Depends on [`super`] (the models), [`crate::network`], [`crate::session`],
//! [`crate::spec`] and kiln-optim.

use kiln::{Array, DType};
use kiln_optim::{Adam, Optimizer, Parameter, Sgd};

use super::{ComponentModel, MasterModel};
use crate::component::FixedFeatureOutput;
use crate::document::{write_conllu, Sentence};
use crate::network::{
    floats, gather_links, DropoutSeeds, FixedBatch, Layers, LinkBatch, LstmState, NetworkError,
    ReshapeTo,
};
use crate::session::ComputeSession;
use crate::spec::{GridPoint, TrainTarget};

/// What one component's oracle walk over a batch recorded, in the bulk layout: row
/// `step * stride + item`.
#[derive(Debug, Clone)]
pub struct Walk {
    /// The steps taken (the longest item's).
    pub steps: usize,
    /// Items per step (batch × beam; beam is 1 in training).
    pub stride: usize,
    /// The fixed features of each channel.
    pub fixed: Vec<FixedBatch>,
    /// The linked features of each channel, as rows of their source's table.
    pub linked: Vec<LinkBatch>,
    /// The oracle label of every row (-1: a final state, no loss).
    pub labels: Vec<i64>,
}

/// The step counts of components that build a graph piece per step are padded to a
/// multiple of this in training, so that batches of similar length share one compiled plan.
pub const STEP_BUCKET: usize = 8;

/// A training batch's step count padded to a multiple of [`STEP_BUCKET`]: training batches
/// mix lengths, so a padded step costs little beside the plans it saves.
///
/// ```
/// assert_eq!(kiln_dragnn::model::train::training_steps(17), 24);
/// ```
pub fn training_steps(steps: usize) -> usize {
    steps.div_ceil(STEP_BUCKET) * STEP_BUCKET
}

/// An inference batch's step count padded to a multiple of an eighth of its highest power
/// of two (exact below 16): at most 1/8 more steps, one compiled plan per bucket (at most 8
/// per doubling of the length).
/// Inference batches are sorted by length, so a coarser padding (16 to 24 steps with
/// [`training_steps`]) would be mostly wasted work: it made the bulk components compute
/// 1.32 rows per token on the Turkish test set, against 1.13 with no padding at all.
///
/// ```
/// use kiln_dragnn::model::train::inference_steps;
/// assert_eq!((1..16).map(inference_steps).collect::<Vec<_>>(), (1..16).collect::<Vec<_>>());
/// assert_eq!([16, 17, 33, 70, 1000].map(inference_steps), [16, 18, 36, 72, 1024]);
/// ```
pub fn inference_steps(steps: usize) -> usize {
    let grain = match steps.checked_ilog2() {
        Some(p) if p > 3 => 1usize << (p - 3),
        _ => 1,
    };
    steps.div_ceil(grain).saturating_mul(grain)
}

/// Serializes sentences as a session's input items.
pub fn items(sentences: &[Sentence]) -> Vec<String> {
    sentences
        .iter()
        .map(|s| write_conllu(std::slice::from_ref(s)))
        .collect()
}

/// The row of a source component's bulk table that a translated link reads.
pub(crate) fn source_row(
    l: &crate::translator::LinkIndex,
    stride: usize,
    beam: usize,
) -> Option<usize> {
    if l.step_index < 0 || l.beam_index < 0 {
        return None;
    }
    Some(l.step_index as usize * stride + l.batch_index * beam + l.beam_index as usize)
}

/// Walks components `0..=last` of `model` along the oracle over `sentences` (training beam
/// 1), recording each component's features and labels.
pub fn walk_oracle(
    model: &MasterModel,
    session: &mut ComputeSession,
    sentences: &[Sentence],
    last: usize,
) -> crate::Result<Vec<Walk>> {
    session.reset_session();
    session.set_input_data(items(sentences));
    let mut walks: Vec<Walk> = Vec::new();
    for comp in &model.components()[..=last] {
        session.initialize_component_data(&comp.name, 1)?;
        let walk = walk_component(session, comp, |s| (walks[s].stride, 1), training_steps)?;
        walks.push(walk);
    }
    Ok(walks)
}

/// Walks one readied component along the oracle until it is terminal, recording its
/// features and labels; `source(i)` gives the `(stride, beam)` of component `i`'s table
/// (the bulk layout's), for the links that read it. A component whose unit steps pads its
/// step count to `pad(steps)` (training: [`training_steps`]; inference:
/// [`inference_steps`]).
pub(crate) fn walk_component(
    session: &mut ComputeSession,
    comp: &ComponentModel,
    source: impl Fn(usize) -> (usize, usize),
    pad: impl Fn(usize) -> usize,
) -> crate::Result<Walk> {
    let name = comp.name.as_str();
    let beam = session.beam_size(name)?;
    let stride = session.batch_size(name)? * beam;
    let mut fixed: Vec<FixedBatch> = Vec::new();
    let mut linked: Vec<LinkBatch> = comp.linked.iter().map(|l| LinkBatch::new(l.size)).collect();
    let mut labels = Vec::new();
    let mut steps = 0usize;
    let mut step_fixed: Vec<Vec<FixedFeatureOutput>> = vec![Vec::new(); comp.fixed.len()];
    while !session.is_terminal(name)? {
        for (c, out) in step_fixed.iter_mut().enumerate() {
            let mut o = FixedFeatureOutput::default();
            session.get_input_features(name, c, &mut o)?;
            out.push(o);
        }
        for (c, l) in comp.linked.iter().enumerate() {
            let links = session.get_translated_link_features(name, c)?;
            let (src_stride, src_beam) = if l.recurrent {
                (stride, beam)
            } else {
                source(l.source)
            };
            linked[c].add_step(&links, |x| source_row(x, src_stride, src_beam));
        }
        for b in session.emit_oracle_labels(name)? {
            labels.extend(b.into_iter().map(i64::from));
        }
        // beams shorter than the max beam are padded
        labels.resize((steps + 1) * stride, -1);
        session.advance_from_oracle(name)?;
        steps += 1;
    }
    // Units that step (LSTMs, recurrent links) build one graph piece per step: pad the
    // step count so batches share compiled plans. Padding steps have no features, no
    // links and no loss.
    if comp.unit.is_recurrent() || comp.has_recurrent_links() {
        let padded = pad(steps).max(steps);
        for l in &mut linked {
            l.rows = padded * stride;
            l.source_rows.resize(padded * stride * l.size, None);
        }
        labels.resize(padded * stride, -1);
        steps = padded;
    }
    for (c, outs) in step_fixed.iter().enumerate() {
        let mut batch = FixedBatch::new(steps * stride, comp.fixed[c].size);
        for (t, o) in outs.iter().enumerate() {
            batch.add_step(t * stride, o)?;
        }
        fixed.push(batch);
    }
    Ok(Walk {
        steps,
        stride,
        fixed,
        linked,
        labels,
    })
}

/// Applies each fixed channel's feature-id dropout ([`crate::model::IdDropout`]) to the
/// walks' features, drawing from `seed`.
pub fn drop_feature_ids(model: &MasterModel, walks: &mut [Walk], seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x5851_f42d_4c95_7f2d);
    for (comp, walk) in model.components().iter().zip(walks.iter_mut()) {
        for (input, batch) in comp.fixed.iter().zip(walk.fixed.iter_mut()) {
            if let Some(d) = &input.dropout {
                batch.drop_ids(d.id, |id| d.keep_of(id), &mut rng);
            }
        }
    }
}

/// How [`forward`] builds a component's graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unroll {
    /// Every step's embeddings at once; units without state on all rows at once.
    Bulk,
    /// Each step separately, as DRAGNN's dynamic builder does.
    StepByStep,
}

/// A zero-row table of `dim` columns (the history before the first step).
fn empty_table(dim: usize, dtype: DType) -> kiln::Result<Array> {
    Array::try_zeros(&[0, dim], dtype)
}

/// Concatenates per-step layers into bulk layers.
fn concat_steps(steps: &[Layers]) -> Result<Layers, NetworkError> {
    let mut out = Layers::default();
    let Some(first) = steps.first() else {
        return Ok(out);
    };
    for name in first.names() {
        let parts: Vec<&Array> = steps.iter().filter_map(|l| l.get(name)).collect();
        out.push(name, Array::try_concat(&parts, 0)?);
    }
    Ok(out)
}

/// What a recurrent linked channel reads in the bulk path: a `[steps * stride, width]`
/// table of the component's own activations, written a step at a time with one `where`
/// (a growing concatenation would cost one gradient node per earlier step, so a number of
/// nodes quadratic in the steps), holding the source layer already times the channel's
/// projection when it has one (gathering and projecting commute).
struct RecurrentTable {
    /// The channel.
    channel: usize,
    /// `[steps * stride, width]`.
    table: Array,
    steps: usize,
    stride: usize,
    /// The projection's source rows `[source_dim, dim]` and its out-of-range row `[1, dim]`.
    projection: Option<(Array, Array)>,
}

impl RecurrentTable {
    fn new(
        comp: &ComponentModel,
        store: &crate::network::ParamStore,
        channel: usize,
        steps: usize,
        stride: usize,
    ) -> Result<RecurrentTable, NetworkError> {
        let l = &comp.linked[channel];
        let projection = match l.dim {
            Some(_) => {
                let p = store.value(&format!("{}/linked_embedding_matrix_{channel}", comp.name))?;
                let d = l.source_dim;
                Some((
                    p.try_slice(kiln::s![0..d])?,
                    p.try_slice(kiln::s![d..d + 1])?,
                ))
            }
            None => None,
        };
        let width = l.dim.unwrap_or(l.source_dim);
        Ok(RecurrentTable {
            channel,
            table: Array::try_zeros(&[steps * stride, width], store.dtype())?,
            steps,
            stride,
            projection,
        })
    }

    /// The channel's embedding for `batch` (one step's rows), `[rows, size * width]`.
    fn embed(&self, batch: &LinkBatch) -> Result<Array, NetworkError> {
        let dtype = self.table.dtype();
        let n = batch.source_rows.len();
        let idx: Vec<i64> = batch
            .source_rows
            .iter()
            .map(|r| r.map_or(0, |r| r as i64))
            .collect();
        let oob: Vec<f32> = batch
            .source_rows
            .iter()
            .map(|r| if r.is_some() { 0.0 } else { 1.0 })
            .collect();
        let oob = floats(oob, &[n, 1], dtype)?;
        let keep = oob.try_sub(1.0)?.try_neg()?;
        let mut g = self
            .table
            .try_take(&Array::from_vec(idx, &[n])?, 0)?
            .try_mul(&keep)?;
        if let Some((_, out_of_range)) = &self.projection {
            g = g.try_add(&oob.try_matmul(out_of_range)?)?;
        }
        let width = g.shape()[1];
        Ok(g.reshape_to(&[batch.rows, batch.size * width])?)
    }

    /// Writes step `t`'s source layer (`[stride, source_dim]`).
    fn write(&mut self, t: usize, layer: &Array) -> Result<(), NetworkError> {
        let q = match &self.projection {
            Some((p, _)) => layer.try_matmul(p)?,
            None => layer.clone(),
        };
        let width = q.shape()[1];
        let rows = self.steps * self.stride;
        let spread = q
            .reshape_to(&[1, self.stride, width])?
            .try_broadcast_to(&[self.steps, self.stride, width])?
            .reshape_to(&[rows, width])?;
        let mask: Vec<bool> = (0..rows).map(|r| r / self.stride == t).collect();
        let mask = Array::from_vec(mask, &[rows, 1])?;
        self.table = kiln::where_(&mask, &spread, &self.table)?;
        Ok(())
    }
}

/// Writes step `t`'s layers into the recurrent tables that read them.
fn write_recurrent(
    comp: &ComponentModel,
    tables: &mut [RecurrentTable],
    t: usize,
    layers: &Layers,
) -> Result<(), NetworkError> {
    for r in tables {
        let l = &comp.linked[r.channel];
        let layer = layers.get(&l.layer).ok_or_else(|| NetworkError::BadUnit {
            component: comp.name.clone(),
            unit: "linked feature".into(),
            message: format!("the unit has no layer '{}'", l.layer),
        })?;
        r.write(t, layer)?;
    }
    Ok(())
}

/// The layers of one component over all steps of its walk, in the bulk layout.
pub(crate) fn component_forward(
    model: &MasterModel,
    comp: &ComponentModel,
    walk: &Walk,
    tables: &[Layers],
    unroll: Unroll,
    mut dropout: Option<&mut DropoutSeeds>,
) -> Result<Layers, NetworkError> {
    let store = model.params();
    let dtype = store.dtype();
    let (steps, stride) = (walk.steps, walk.stride);
    let rows = steps * stride;
    let table_of = |i: usize| -> Result<&Array, NetworkError> {
        let l = &comp.linked[i];
        tables[l.source]
            .get(&l.layer)
            .ok_or_else(|| NetworkError::BadUnit {
                component: comp.name.clone(),
                unit: "linked feature".into(),
                message: format!("source layer '{}' was not computed", l.layer),
            })
    };
    let bulk = unroll == Unroll::Bulk;
    if bulk && !comp.has_recurrent_links() && !comp.unit.is_recurrent() {
        let mut parts = Vec::new();
        for (i, b) in walk.fixed.iter().enumerate() {
            parts.push(comp.embed_fixed(store, i, b)?);
        }
        for (i, b) in walk.linked.iter().enumerate() {
            let (g, oob) = gather_links(table_of(i)?, b)?;
            parts.push(comp.embed_linked(store, i, &g, &oob, rows)?);
        }
        return Ok(comp.run(store, &parts, None, dropout)?.0);
    }
    // Embeddings of every step at once where they do not depend on the network.
    let mut bulk_parts: Vec<Option<Array>> = Vec::new();
    if bulk {
        for (i, b) in walk.fixed.iter().enumerate() {
            bulk_parts.push(Some(comp.embed_fixed(store, i, b)?));
        }
        for (i, b) in walk.linked.iter().enumerate() {
            if comp.linked[i].recurrent {
                bulk_parts.push(None);
            } else {
                let (g, oob) = gather_links(table_of(i)?, b)?;
                bulk_parts.push(Some(comp.embed_linked(store, i, &g, &oob, rows)?));
            }
        }
    }
    // A feed-forward unit's first product splits over the input's columns: the columns
    // embedded in bulk are multiplied for every step at once; only the recurrent links'
    // columns are multiplied step by step.
    let split = if bulk && comp.unit.splits_first_layer() {
        let w0 = store.value(&format!("{}/weights_0", comp.name))?;
        let mut bulk_x = Vec::new();
        let mut bulk_w = Vec::new();
        let mut rec_w = Vec::new();
        let mut offset = 0usize;
        for (i, width) in comp.part_widths().into_iter().enumerate() {
            let w = w0.try_slice(kiln::s![offset..offset + width])?;
            match bulk_parts.get(i) {
                Some(Some(a)) => {
                    bulk_x.push(a.clone());
                    bulk_w.push(w);
                }
                _ => rec_w.push(w),
            }
            offset += width;
        }
        let x: Vec<&Array> = bulk_x.iter().collect();
        let x = comp.unit.project_input(
            store,
            &comp.name,
            &Array::try_concat(&x, 1)?,
            dropout.as_deref_mut(),
        )?;
        let w: Vec<&Array> = bulk_w.iter().collect();
        let pre = x.try_matmul(&Array::try_concat(&w, 0)?)?;
        let w: Vec<&Array> = rec_w.iter().collect();
        Some((pre, Array::try_concat(&w, 0)?))
    } else {
        None
    };
    // A recurrent unit whose every input is embedded in bulk: its input projection
    // (`x · x2h`, linear and independent of the state) runs for every step at once, one large
    // product instead of one small product per step. Training keeps the per-step form, whose
    // input dropout draws one mask per step.
    let projected = if bulk && dropout.is_none() && comp.unit.is_recurrent() && split.is_none() {
        let parts: Option<Vec<&Array>> = bulk_parts.iter().map(Option::as_ref).collect();
        match parts {
            Some(parts) => Some(comp.unit.project_input(
                store,
                &comp.name,
                &Array::try_concat(&parts, 1)?,
                None,
            )?),
            None => None,
        }
    } else {
        None
    };
    let mut recurrent: Vec<RecurrentTable> = Vec::new();
    if bulk {
        for (i, l) in comp.linked.iter().enumerate() {
            if l.recurrent {
                recurrent.push(RecurrentTable::new(comp, store, i, steps, stride)?);
            }
        }
    }
    let mut state: Option<LstmState> = comp.unit.initial_state(stride, dtype)?;
    let mut history: Vec<Layers> = Vec::with_capacity(steps);
    let stepping = comp.unit.without_logits();
    for t in 0..steps {
        let slice = |a: &Array| a.try_slice(kiln::s![t * stride..(t + 1) * stride]);
        if let Some((pre, rec_w)) = &split {
            let mut rec = Vec::new();
            for r in &recurrent {
                rec.push(r.embed(&walk.linked[r.channel].rows_range(t * stride, stride))?);
            }
            let rec: Vec<&Array> = rec.iter().collect();
            let x = comp.unit.project_input(
                store,
                &comp.name,
                &Array::try_concat(&rec, 1)?,
                dropout.as_deref_mut(),
            )?;
            let xw0 = slice(pre)?.try_add(&x.try_matmul(rec_w)?)?;
            let layers = comp.unit.forward_from_first_matmul(
                store,
                &comp.name,
                &xw0,
                dropout.as_deref_mut(),
            )?;
            write_recurrent(comp, &mut recurrent, t, &layers)?;
            history.push(layers);
            continue;
        }
        if let Some(z) = &projected {
            // The softmax layer runs once over every step afterwards, not per step.
            let (layers, next) =
                stepping.forward(store, &comp.name, &slice(z)?, state.as_ref(), None)?;
            state = next;
            history.push(layers);
            continue;
        }
        let mut parts = Vec::new();
        for (i, b) in walk.fixed.iter().enumerate() {
            parts.push(match bulk_parts.get(i) {
                Some(Some(a)) => slice(a)?,
                _ => comp.embed_fixed(store, i, &b.rows_range(t * stride, stride))?,
            });
        }
        for (i, b) in walk.linked.iter().enumerate() {
            let l = &comp.linked[i];
            if let Some(Some(a)) = bulk_parts.get(walk.fixed.len() + i) {
                parts.push(slice(a)?);
                continue;
            }
            let rows_t = b.rows_range(t * stride, stride);
            if let Some(r) = recurrent.iter().find(|r| r.channel == i) {
                parts.push(r.embed(&rows_t)?);
                continue;
            }
            let (g, oob) = if l.recurrent {
                let own: Vec<&Array> = history.iter().filter_map(|h| h.get(&l.layer)).collect();
                let table = if own.is_empty() {
                    empty_table(l.source_dim, dtype)?
                } else {
                    Array::try_concat(&own, 0)?
                };
                gather_links(&table, &rows_t)?
            } else {
                gather_links(table_of(i)?, &rows_t)?
            };
            parts.push(comp.embed_linked(store, i, &g, &oob, stride)?);
        }
        let (layers, next) = comp.run(store, &parts, state.as_ref(), dropout.as_deref_mut())?;
        state = next;
        write_recurrent(comp, &mut recurrent, t, &layers)?;
        history.push(layers);
    }
    if history.is_empty() {
        // No steps (an empty batch): zero-row layers of the right widths.
        let mut out = Layers::default();
        for (name, dim) in comp.unit.layers() {
            out.push(&name, empty_table(dim, dtype)?);
        }
        return Ok(out);
    }
    let mut out = concat_steps(&history)?;
    if projected.is_some() {
        if let Some(last) = out.get("last_layer").cloned() {
            if let Some(logits) = comp.unit.logits(store, &comp.name, &last)? {
                out.push("logits", logits);
            }
        }
    }
    Ok(out)
}

/// Every component's layers over its walk (components `0..walks.len()`), in the bulk
/// layout; `dropout` is `Some` when training.
pub fn forward(
    model: &MasterModel,
    walks: &[Walk],
    unroll: Unroll,
    mut dropout: Option<&mut DropoutSeeds>,
) -> Result<Vec<Layers>, NetworkError> {
    let mut out: Vec<Layers> = Vec::new();
    for (comp, walk) in model.components().iter().zip(walks) {
        let layers = component_forward(model, comp, walk, &out, unroll, dropout.as_deref_mut())?;
        out.push(layers);
    }
    Ok(out)
}

/// A component's cost on a batch: the softmax cross-entropy of `logits` against the oracle
/// labels summed over valid rows and divided by their number (DRAGNN's
/// `build_greedy_training`), and the number of valid rows the argmax gets right.
#[derive(Debug, Clone)]
pub struct Cost {
    /// The mean cross-entropy (a scalar array).
    pub cost: Array,
    /// The correct predictions (a scalar array, `i64`).
    pub correct: Array,
    /// The valid rows.
    pub total: usize,
}

/// The rows with a label (`labels[r] ≥ 0`) as a `[rows]` mask of 1s and 0s of `dtype`, and
/// their number.
fn valid_rows(labels: &[i64], dtype: DType) -> Result<(Array, usize), NetworkError> {
    let mask = labels
        .iter()
        .map(|&l| if l >= 0 { 1.0 } else { 0.0 })
        .collect();
    let total = labels.iter().filter(|&&l| l >= 0).count();
    Ok((floats(mask, &[labels.len()], dtype)?, total))
}

/// The cost of `logits` (`[rows, actions]`) against `labels` (−1: no loss).
pub fn cost(logits: &Array, labels: &[i64]) -> Result<Cost, NetworkError> {
    let rows = labels.len();
    let actions = logits.shape()[1];
    let dtype = logits.dtype();
    let (valid, total) = valid_rows(labels, dtype)?;
    let lab = Array::from_vec(labels.to_vec(), &[rows])?;
    let lse = logits.try_logsumexp(Some(&[-1]), false)?;
    let picked = logits
        .try_mul(&lab.try_one_hot(actions, dtype)?)?
        .try_sum(Some(&[-1]), false)?;
    let sum = lse
        .try_sub(&picked)?
        .try_mul(&valid)?
        .try_sum(None, false)?;
    let cost = sum.try_div(total.max(1) as f64)?;
    let hits = logits.try_argmax(Some(-1), false)?.try_eq(&lab)?;
    let correct = hits
        .try_logical_and(&valid.try_gt(0.0)?)?
        .cast(DType::I64)
        .try_sum(None, false)?;
    Ok(Cost {
        cost,
        correct,
        total,
    })
}

/// The mean cross-entropy of `logits` (`[rows, actions]`) against the distribution
/// `target` (`[rows, actions]`, each row summing to 1) over the rows whose label is valid
/// (`labels[r] ≥ 0`): the distillation term of [`Trainer::set_teachers`].
///
/// ```
/// use kiln::Array;
/// use kiln_dragnn::model::train::soft_cost;
/// let logits = Array::from_vec(vec![0.0f32, 0.0, 5.0, 5.0], &[2, 2])?;
/// let target = Array::from_vec(vec![0.5f32, 0.5, 1.0, 0.0], &[2, 2])?;
/// // Row 0: −(½ ln ½ + ½ ln ½) = ln 2; row 1 has no label.
/// let c = soft_cost(&logits, &target, &[1, -1])?.item::<f32>()?;
/// assert!((c - std::f32::consts::LN_2).abs() < 1e-6);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn soft_cost(logits: &Array, target: &Array, labels: &[i64]) -> Result<Array, NetworkError> {
    let (valid, total) = valid_rows(labels, logits.dtype())?;
    let sum = target
        .try_mul(&logits.try_log_softmax(-1)?)?
        .try_sum(Some(&[-1]), false)?
        .try_mul(&valid)?
        .try_sum(None, false)?;
    Ok(sum.try_neg()?.try_div(total.max(1) as f64)?)
}

/// A trained model whose action distributions a [`Trainer`] also fits, and the session it
/// walks the oracle with.
struct Teacher {
    model: MasterModel,
    session: ComputeSession,
}

/// The teachers of a [`Trainer`] and the weight of their term.
struct Distillation {
    teachers: Vec<Teacher>,
    weight: f64,
}

/// A training target with its normalised weights and own optimizer.
struct Target {
    spec: TrainTarget,
    /// The last component it trains.
    last: usize,
    /// Per component `0..=last`, its weight (summing to 1).
    weights: Vec<f64>,
    /// The parameters it updates.
    params: Vec<String>,
    optimizer: Box<dyn Optimizer + Send>,
    steps: u64,
}

/// A target's loss on a batch, its components' costs, and the gradients of the loss with
/// respect to the target's parameters, as lazy arrays.
#[derive(Debug, Clone)]
pub struct LossAndGrads {
    /// The loss: the weighted costs plus the L2 term.
    pub loss: Array,
    /// The costs of the weighted components that have logits, in component order.
    pub costs: Vec<Cost>,
    /// The parameters' names.
    pub names: Vec<String>,
    /// The gradients, in the order of `names`.
    pub grads: Vec<Array>,
}

/// Statistics of one training step.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StepStats {
    /// The target's name.
    pub target: String,
    /// The loss (weighted costs plus the L2 term).
    pub loss: f64,
    /// Per weighted component: `(name, correct, total)` of the oracle actions.
    pub accuracy: Vec<(String, u64, u64)>,
}

/// Trains a [`MasterModel`] by oracle on batches of sentences, one target at a time.
pub struct Trainer {
    model: MasterModel,
    session: ComputeSession,
    targets: Vec<Target>,
    unroll: Unroll,
    dropout: u64,
    distillation: Option<Distillation>,
}

/// The optimizer a grid point asks for.
fn optimizer(grid: &GridPoint) -> crate::Result<Box<dyn Optimizer + Send>> {
    match grid.learning_method() {
        "adam" | "lazyadam" => Ok(Box::new(
            Adam::new(grid.learning_rate())
                .betas(grid.adam_beta1(), grid.adam_beta2())
                .eps(grid.adam_eps()),
        )),
        "momentum" => Ok(Box::new(
            Sgd::new(grid.learning_rate()).momentum(grid.momentum()),
        )),
        other => Err(NetworkError::BadUnit {
            component: "(grid point)".into(),
            unit: "learning_method".into(),
            message: format!(
                "learning_method {other:?} is not one of \"adam\", \"lazyadam\", \"momentum\""
            ),
        }
        .into()),
    }
}

impl Trainer {
    /// A trainer of `model` for `targets` (none: one target training every component with
    /// equal weights), building graphs as `unroll` says.
    pub fn new(
        model: MasterModel,
        targets: &[TrainTarget],
        unroll: Unroll,
    ) -> crate::Result<Trainer> {
        let n = model.components().len();
        let default = [TrainTarget {
            name: Some("all".into()),
            ..Default::default()
        }];
        let targets = if targets.is_empty() {
            &default[..]
        } else {
            targets
        };
        let mut out = Vec::new();
        for t in targets {
            let last = if t.max_index() < 0 {
                n.saturating_sub(1)
            } else {
                (t.max_index() as usize).min(n).saturating_sub(1)
            };
            let bad = |message: String| -> crate::Error {
                NetworkError::BadUnit {
                    component: "(train target)".into(),
                    unit: t.name().to_string(),
                    message,
                }
                .into()
            };
            if t.unroll_using_oracle.iter().any(|u| !u) {
                return Err(bad(
                    "unroll_using_oracle: false (greedy inference inside \
                     training) is not supported; train every component along the oracle"
                        .into(),
                ));
            }
            let mut weights: Vec<f64> = if t.component_weights.is_empty() {
                vec![1.0; last + 1]
            } else {
                if t.component_weights.len() != n {
                    return Err(bad(format!(
                        "{} component_weights for {n} components",
                        t.component_weights.len()
                    )));
                }
                t.component_weights[..=last].to_vec()
            };
            if weights.iter().any(|w| !w.is_finite() || *w < 0.0) {
                return Err(bad(format!(
                    "component_weights {weights:?} must be finite and ≥ 0"
                )));
            }
            let sum: f64 = weights.iter().sum();
            if sum <= 0.0 {
                return Err(bad("component_weights are all 0".into()));
            }
            weights.iter_mut().for_each(|w| *w /= sum);
            let params = target_params(&model, &weights);
            out.push(Target {
                spec: t.clone(),
                last,
                weights,
                params,
                optimizer: optimizer(model.grid())?,
                steps: 0,
            });
        }
        let session = ComputeSession::new(0, model.spec(), model.grid(), model.maps().clone())?;
        let dropout = model.grid().seed() as u64;
        Ok(Trainer {
            model,
            session,
            targets: out,
            unroll,
            dropout,
            distillation: None,
        })
    }

    /// Trains by knowledge distillation from `teachers` as well as by oracle: each weighted
    /// component's cost becomes `(1 − weight) · cross-entropy against the oracle labels +
    /// weight · cross-entropy against the teachers' mean action distribution`, the teachers
    /// run (without dropout) on the same oracle states in the same kiln evaluation as the
    /// step, and their parameters do not change.
    /// Each teacher must have the trainer's components, in order, with the same action
    /// counts, and the same tag and label maps (the same actions in the same order).
    /// No teachers turns distillation off.
    ///
    /// Errors: a weight outside `[0, 1]`, or a teacher that does not fit.
    pub fn set_teachers(&mut self, teachers: Vec<MasterModel>, weight: f64) -> crate::Result<()> {
        let bad =
            |message: String| -> crate::Error { NetworkError::Distillation { message }.into() };
        if !(0.0..=1.0).contains(&weight) {
            return Err(bad(format!(
                "distillation weight {weight} is outside [0, 1]"
            )));
        }
        if teachers.is_empty() {
            self.distillation = None;
            return Ok(());
        }
        let mine = self.model.components();
        let (maps, labels) = (self.model.maps(), &self.model.maps().labels);
        let mut out = Vec::new();
        for (k, teacher) in teachers.into_iter().enumerate() {
            let theirs = teacher.components();
            for (c, comp) in mine.iter().enumerate() {
                let Some(other) = theirs.get(c) else {
                    return Err(bad(format!(
                        "teacher {k} has {} components; the model has {} ({})",
                        theirs.len(),
                        mine.len(),
                        comp.name
                    )));
                };
                if other.name != comp.name || other.unit.num_actions() != comp.unit.num_actions() {
                    return Err(bad(format!(
                        "teacher {k}'s component {c} is {:?} with {:?} actions; the model's is \
                         {:?} with {:?}",
                        other.name,
                        other.unit.num_actions(),
                        comp.name,
                        comp.unit.num_actions()
                    )));
                }
            }
            let same = |a: &crate::term_map::TermMap, b: &crate::term_map::TermMap| {
                a.terms().eq(b.terms())
            };
            if !same(&teacher.maps().labels, labels) || !same(&teacher.maps().tags, &maps.tags) {
                return Err(bad(format!(
                    "teacher {k}'s tag or label map differs from the model's (train both on \
                     the same training set)"
                )));
            }
            let session =
                ComputeSession::new(0, teacher.spec(), teacher.grid(), teacher.maps().clone())?;
            out.push(Teacher {
                model: teacher,
                session,
            });
        }
        self.distillation = Some(Distillation {
            teachers: out,
            weight,
        });
        Ok(())
    }

    /// The teachers' mean action distribution of each weighted component of target
    /// `target` on `sentences` (`None` for components without one), `rows[c]` rows each,
    /// gradients stopped.
    fn teacher_targets(
        &mut self,
        target: usize,
        sentences: &[Sentence],
        rows: &[usize],
    ) -> crate::Result<Vec<Option<Array>>> {
        let t = &self.targets[target];
        let dtype = self.model.params().dtype();
        let mut sums: Vec<Option<Array>> = vec![None; t.weights.len()];
        let Some(d) = self.distillation.as_mut() else {
            return Ok(sums);
        };
        let n = d.teachers.len() as f64;
        for teacher in &mut d.teachers {
            let walks = walk_oracle(&teacher.model, &mut teacher.session, sentences, t.last)?;
            let layers = forward(&teacher.model, &walks, Unroll::Bulk, None)?;
            for (c, w) in t.weights.iter().enumerate() {
                let Some(logits) = layers[c].get("logits").filter(|_| *w > 0.0) else {
                    continue;
                };
                // The layouts agree row for row (both follow the oracle); only the padding
                // of the step count may differ, and padded rows carry no loss.
                let have = logits.shape()[0];
                // A teacher of another float type (an f32 model teaching an f64 one).
                let p = logits.try_softmax(-1)?.cast(dtype);
                let p = if have >= rows[c] {
                    p.try_slice(kiln::s![0..rows[c]])?
                } else {
                    let pad = Array::try_zeros(&[rows[c] - have, logits.shape()[1]], p.dtype())?;
                    Array::try_concat(&[&p, &pad], 0)?
                };
                sums[c] = Some(match sums[c].take() {
                    Some(s) => s.try_add(&p)?,
                    None => p,
                });
            }
        }
        sums.into_iter()
            .map(|s| s.map(|s| Ok(s.try_div(n)?.stop_gradient())).transpose())
            .collect()
    }

    /// The model being trained.
    pub fn model(&self) -> &MasterModel {
        &self.model
    }

    /// The trained model.
    pub fn into_model(self) -> MasterModel {
        self.model
    }

    /// The targets' names, in order.
    pub fn target_names(&self) -> Vec<String> {
        self.targets
            .iter()
            .map(|t| t.spec.name().to_string())
            .collect()
    }

    /// The loss of target `target` on `sentences` and its gradients with respect to the
    /// target's parameters (names in the same order), as lazy arrays; `dropout_seed` turns
    /// dropout on.
    pub fn loss_and_grads(
        &mut self,
        target: usize,
        sentences: &[Sentence],
        dropout_seed: Option<u64>,
    ) -> crate::Result<LossAndGrads> {
        let t = &self.targets[target];
        let mut walks = walk_oracle(&self.model, &mut self.session, sentences, t.last)?;
        if let Some(seed) = dropout_seed {
            drop_feature_ids(&self.model, &mut walks, seed);
        }
        let rows: Vec<usize> = walks.iter().map(|w| w.labels.len()).collect();
        let soft = self.teacher_targets(target, sentences, &rows)?;
        let alpha = self.distillation.as_ref().map_or(0.0, |d| d.weight);
        let t = &self.targets[target];
        let mut seeds = dropout_seed.map(DropoutSeeds::new);
        let layers = forward(&self.model, &walks, self.unroll, seeds.as_mut())?;
        let store = self.model.params();
        let mut loss: Option<Array> = None;
        let mut costs = Vec::new();
        for (c, w) in t.weights.iter().enumerate() {
            if *w == 0.0 {
                continue;
            }
            let Some(logits) = layers[c].get("logits") else {
                continue;
            };
            let k = cost(logits, &walks[c].labels)?;
            let mut term = k.cost.try_mul(*w)?;
            if let Some(q) = &soft[c] {
                let s = soft_cost(logits, q, &walks[c].labels)?;
                term = k
                    .cost
                    .try_mul(1.0 - alpha)?
                    .try_add(&s.try_mul(alpha)?)?
                    .try_mul(*w)?;
            }
            loss = Some(match loss {
                Some(l) => l.try_add(&term)?,
                None => term,
            });
            costs.push(k);
        }
        let mut loss = match loss {
            Some(l) => l,
            None => Array::try_zeros(&[], store.dtype())?,
        };
        let l2 = self.model.grid().l2_regularization_coefficient();
        if l2 > 0.0 {
            for name in &t.params {
                if store.is_regularized(name) {
                    let w = store.value(name)?;
                    loss =
                        loss.try_add(&w.try_square()?.try_sum(None, false)?.try_mul(0.5 * l2)?)?;
                }
            }
        }
        let values: Vec<Array> = t
            .params
            .iter()
            .map(|n| store.value(n))
            .collect::<Result<_, _>>()?;
        let refs: Vec<&Array> = values.iter().collect();
        let grads = kiln::grad(&loss, &refs)?;
        Ok(LossAndGrads {
            loss,
            costs,
            names: t.params.clone(),
            grads,
        })
    }

    /// One training step of target `target` on `sentences`: loss, gradients (clipped per
    /// tensor when the grid point says so) and the optimizer's update in one kiln
    /// evaluation.
    pub fn step(&mut self, target: usize, sentences: &[Sentence]) -> crate::Result<StepStats> {
        self.dropout = self.dropout.wrapping_add(0x9e37_79b9_7f4a_7c15);
        // Always seeded: a unit whose keep probability is 1 adds no dropout node.
        let seed = Some(self.dropout);
        let LossAndGrads {
            loss,
            costs,
            names,
            mut grads,
        } = self.loss_and_grads(target, sentences, seed)?;
        let grid = self.model.grid().clone();
        let clip = grid.gradient_clip_norm();
        if clip > 0.0 {
            for g in &mut grads {
                let norm = g.try_square()?.try_sum(None, false)?.try_sqrt()?;
                let scale = norm
                    .try_maximum(1e-12)?
                    .try_recip()?
                    .try_mul(clip)?
                    .try_minimum(1.0)?;
                *g = g.try_mul(&scale)?;
            }
        }
        let t = &mut self.targets[target];
        let decay = if grid.decay_steps() > 0 {
            let e = t.steps as f64 / grid.decay_steps() as f64;
            grid.decay_base()
                .powf(if grid.decay_staircase() { e.floor() } else { e })
        } else {
            1.0
        };
        t.optimizer.set_learning_rate(grid.learning_rate() * decay);
        let store = self.model.params();
        let params: Vec<&Parameter> = names
            .iter()
            .map(|n| {
                store
                    .parameter(n)
                    .ok_or_else(|| NetworkError::MissingParameter {
                        name: n.clone(),
                        known: String::new(),
                    })
            })
            .collect::<Result<_, _>>()?;
        let mut extra: Vec<&Array> = vec![&loss];
        extra.extend(costs.iter().map(|c| &c.correct));
        t.optimizer
            .step(&params, &grads, &extra)
            .map_err(NetworkError::from)?;
        t.steps += 1;
        let mut accuracy = Vec::new();
        let mut k = 0;
        for (c, w) in t.weights.iter().enumerate() {
            if *w == 0.0 || self.model.components()[c].unit.num_actions().is_none() {
                continue;
            }
            let correct = costs[k].correct.item::<i64>()?;
            accuracy.push((
                self.model.components()[c].name.clone(),
                correct.max(0) as u64,
                costs[k].total as u64,
            ));
            k += 1;
        }
        Ok(StepStats {
            target: t.spec.name().to_string(),
            loss: loss.cast(DType::F64).item::<f64>()?,
            accuracy,
        })
    }
}

/// The parameters a target with these component weights updates: every parameter of a
/// component whose cost it weighs or whose layers such a component reads (transitively),
/// except the softmax of components whose cost it does not weigh (unless read as
/// `logits`).
fn target_params(model: &MasterModel, weights: &[f64]) -> Vec<String> {
    let comps = model.components();
    let mut needed = vec![false; weights.len()];
    let mut logits_read = vec![false; weights.len()];
    for c in (0..weights.len()).rev() {
        if weights[c] > 0.0 && comps[c].unit.num_actions().is_some() {
            needed[c] = true;
        }
        if needed[c] {
            for l in &comps[c].linked {
                if l.source < weights.len() {
                    needed[l.source] = true;
                    if l.layer == "logits" {
                        logits_read[l.source] = true;
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    for p in model.params().parameters() {
        let name = p.name();
        let Some((prefix, rest)) = name.split_once('/') else {
            continue;
        };
        let Some(c) = comps.iter().position(|c| c.name == prefix) else {
            continue;
        };
        if c >= weights.len() || !needed[c] {
            continue;
        }
        let softmax = rest == "weights_softmax" || rest == "bias_softmax";
        if softmax && weights[c] == 0.0 && !logits_read[c] {
            continue;
        }
        out.push(name.to_string());
    }
    out
}
