//! Embedding of features (DRAGNN's `get_input_tensor`): fixed channels as sparse lookups
//! into `[vocabulary + 1, dim]` matrices summed per slot, linked channels as rows of a
//! source component's stored activations with the out-of-range indicator and an optional
//! `[source_dim + 1, dim]` projection.
//!
//! The host side collects features into batches with a fixed layout ([`FixedBatch`],
//! [`LinkBatch`]); the graph side turns a batch into kiln operations.
//! A batch's *rows* are output rows (steps × batch items in the bulk layout, batch items
//! at one step); a row's slots are the channel's `size` templates.
//! Missing features (a slot with no id, a padding beam slot) embed as zeros, so a step's
//! graph has the same operations whatever its features are: only sizes change, and kiln's
//! graph cache reuses the compiled plan.
//!
//! Depends on kiln's public API, [`crate::component::FixedFeatureOutput`],
//! [`crate::translator::LinkIndex`] and [`super::NetworkError`].

use kiln::{Array, DType};

use super::{NetworkError, ReshapeTo};
use crate::component::FixedFeatureOutput;
use crate::translator::LinkIndex;

/// The fixed features of one channel for `rows` output rows, padded to the widest cell:
/// cell `row * size + slot` holds `width` `(id, weight)` pairs, unused pairs `(0, 0.0)`.
///
/// ```
/// use kiln_dragnn::component::FixedFeatureOutput;
/// use kiln_dragnn::network::FixedBatch;
/// // one step of 2 items, channel size 2: item 0 slot 1 has ids 4 and 5, item 1 slot 0 has 3
/// let out = FixedFeatureOutput { indices: vec![1, 1, 2], ids: vec![4, 5, 3], weights: vec![1.0, 0.5, 1.0] };
/// let mut b = FixedBatch::new(2, 2);
/// b.add_step(0, &out)?;
/// assert_eq!(b.width(), 2);
/// assert_eq!(b.ids(), [0, 0, 4, 5, 3, 0, 0, 0]);
/// assert_eq!(b.weights(), [0.0, 0.0, 1.0, 0.5, 1.0, 0.0, 0.0, 0.0]);
/// # Ok::<(), kiln_dragnn::network::NetworkError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct FixedBatch {
    rows: usize,
    size: usize,
    /// Every (cell, id, weight) in order of arrival: one allocation per batch rather than
    /// one per cell (a parser step fills thousands of cells).
    entries: Vec<(usize, i64, f32)>,
}

impl PartialEq for FixedBatch {
    /// Equal when they hold the same pairs in each cell, in the same order.
    fn eq(&self, other: &FixedBatch) -> bool {
        (self.rows, self.size) == (other.rows, other.size)
            && self.width() == other.width()
            && self.ids() == other.ids()
            && self.weights() == other.weights()
    }
}

impl FixedBatch {
    /// An empty batch of `rows` rows of `size` slots.
    ///
    /// ```
    /// let b = kiln_dragnn::network::FixedBatch::new(3, 2);
    /// assert_eq!((b.rows(), b.size(), b.width()), (3, 2, 1));
    /// ```
    pub fn new(rows: usize, size: usize) -> FixedBatch {
        FixedBatch {
            rows,
            size,
            entries: Vec::new(),
        }
    }

    /// The number of rows.
    ///
    /// ```
    /// assert_eq!(kiln_dragnn::network::FixedBatch::new(3, 2).rows(), 3);
    /// ```
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The slots per row.
    ///
    /// ```
    /// assert_eq!(kiln_dragnn::network::FixedBatch::new(3, 2).size(), 2);
    /// ```
    pub fn size(&self) -> usize {
        self.size
    }

    /// Adds one step's features, whose indices are `item * size + slot`, to the rows from
    /// `first_row` on.
    /// An index outside the batch is an error naming it.
    ///
    /// ```
    /// use kiln_dragnn::{component::FixedFeatureOutput, network::FixedBatch};
    /// let mut b = FixedBatch::new(1, 1);
    /// let out = FixedFeatureOutput { indices: vec![1], ids: vec![0], weights: vec![1.0] };
    /// assert!(b.add_step(0, &out).is_err());
    /// ```
    pub fn add_step(
        &mut self,
        first_row: usize,
        out: &FixedFeatureOutput,
    ) -> Result<(), NetworkError> {
        let base = first_row * self.size;
        let cells = self.rows * self.size;
        self.entries.reserve(out.len());
        for i in 0..out.len() {
            let cell = usize::try_from(out.indices[i])
                .ok()
                .and_then(|x| x.checked_add(base))
                .filter(|&c| c < cells)
                .ok_or(NetworkError::FeatureIndex {
                    index: i64::from(out.indices[i]),
                    first_row,
                    rows: self.rows,
                    size: self.size,
                })?;
            self.entries.push((cell, out.ids[i], out.weights[i]));
        }
        Ok(())
    }

    /// The most pairs in one cell (at least 1).
    ///
    /// ```
    /// assert_eq!(kiln_dragnn::network::FixedBatch::new(0, 0).width(), 1);
    /// ```
    pub fn width(&self) -> usize {
        let mut count = vec![0usize; self.rows * self.size];
        let mut most = 1;
        for &(c, _, _) in &self.entries {
            count[c] += 1;
            most = most.max(count[c]);
        }
        most
    }

    /// The pairs laid out `[rows * size * width]` (padding `pad`), each cell's in order of
    /// arrival.
    fn laid_out<T: Copy>(&self, pad: T, pick: impl Fn(&(usize, i64, f32)) -> T) -> Vec<T> {
        let w = self.width();
        let cells = self.rows * self.size;
        let mut out = vec![pad; cells * w];
        if w == 1 {
            for e in &self.entries {
                out[e.0] = pick(e);
            }
            return out;
        }
        let mut fill = vec![0usize; cells];
        for e in &self.entries {
            out[e.0 * w + fill[e.0]] = pick(e);
            fill[e.0] += 1;
        }
        out
    }

    /// The ids, `[rows * size * width]`, padding 0.
    ///
    /// ```
    /// assert_eq!(kiln_dragnn::network::FixedBatch::new(1, 2).ids(), [0, 0]);
    /// ```
    pub fn ids(&self) -> Vec<i64> {
        self.laid_out(0, |e| e.1)
    }

    /// The weights, `[rows * size * width]`, padding 0.
    ///
    /// ```
    /// assert_eq!(kiln_dragnn::network::FixedBatch::new(1, 1).weights(), [0.0]);
    /// ```
    pub fn weights(&self) -> Vec<f32> {
        self.laid_out(0.0, |e| e.2)
    }

    /// Feature-id dropout: replaces each id by `to` with probability `1 - keep(id)`,
    /// drawing from `rng`; weights stay.
    /// Returns how many ids were replaced.
    ///
    /// ```
    /// use kiln_dragnn::{component::FixedFeatureOutput, network::FixedBatch};
    /// let mut b = FixedBatch::new(3, 1);
    /// b.add_step(0, &FixedFeatureOutput { indices: vec![0, 1, 2], ids: vec![4, 5, 6], weights: vec![1.0; 3] })?;
    /// let mut rng = fastrand::Rng::with_seed(1);
    /// assert_eq!(b.drop_ids(9, |id| if id == 5 { 0.0 } else { 1.0 }, &mut rng), 1);
    /// assert_eq!(b.ids(), [4, 9, 6]);
    /// # Ok::<(), kiln_dragnn::network::NetworkError>(())
    /// ```
    pub fn drop_ids(
        &mut self,
        to: i64,
        keep: impl Fn(i64) -> f32,
        rng: &mut fastrand::Rng,
    ) -> usize {
        let mut dropped = 0;
        for e in &mut self.entries {
            let k = keep(e.1);
            // `k >= 1` draws nothing, so a channel kept whole leaves the stream untouched
            if k < 1.0 && rng.f32() >= k {
                e.1 = to;
                dropped += 1;
            }
        }
        dropped
    }

    /// The rows `start..start + count` as a batch of their own.
    ///
    /// ```
    /// use kiln_dragnn::{component::FixedFeatureOutput, network::FixedBatch};
    /// let mut b = FixedBatch::new(2, 1);
    /// b.add_step(0, &FixedFeatureOutput { indices: vec![0, 1], ids: vec![7, 8], weights: vec![1.0, 1.0] })?;
    /// assert_eq!(b.rows_range(1, 1).ids(), [8]);
    /// # Ok::<(), kiln_dragnn::network::NetworkError>(())
    /// ```
    pub fn rows_range(&self, start: usize, count: usize) -> FixedBatch {
        let (lo, hi) = (start * self.size, (start + count) * self.size);
        FixedBatch {
            rows: count,
            size: self.size,
            entries: self
                .entries
                .iter()
                .filter(|e| (lo..hi).contains(&e.0))
                .map(|&(c, id, w)| (c - lo, id, w))
                .collect(),
        }
    }
}

/// Where the linked features of one channel read their source: for each `row * size +
/// slot`, a row of the source's activation table, or `None` (out of range: the step −1
/// row, or a padding slot).
///
/// ```
/// use kiln_dragnn::network::LinkBatch;
/// let b = LinkBatch { rows: 2, size: 1, source_rows: vec![Some(3), None] };
/// assert_eq!(b.source_rows.len(), b.rows * b.size);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkBatch {
    /// Output rows.
    pub rows: usize,
    /// Slots per row.
    pub size: usize,
    /// `[rows * size]` source rows.
    pub source_rows: Vec<Option<usize>>,
}

impl LinkBatch {
    /// An empty batch.
    ///
    /// ```
    /// assert!(kiln_dragnn::network::LinkBatch::new(1).source_rows.is_empty());
    /// ```
    pub fn new(size: usize) -> LinkBatch {
        LinkBatch {
            rows: 0,
            size,
            source_rows: Vec::new(),
        }
    }

    /// Appends one step's translated links (`[items * size]`, as
    /// [`crate::session::ComputeSession::get_translated_link_features`] gives them), mapping
    /// each to its source row with `source_row` (`None` for step −1 and padding).
    ///
    /// ```
    /// use kiln_dragnn::network::LinkBatch;
    /// use kiln_dragnn::translator::LinkIndex;
    /// let mut b = LinkBatch::new(1);
    /// let links = [Some(LinkIndex { batch_index: 1, beam_index: 0, step_index: 2 }), None];
    /// b.add_step(&links, |l| Some(l.step_index as usize * 2 + l.batch_index));
    /// assert_eq!((b.rows, b.source_rows.clone()), (2, vec![Some(5), None]));
    /// ```
    pub fn add_step(
        &mut self,
        links: &[Option<LinkIndex>],
        mut source_row: impl FnMut(&LinkIndex) -> Option<usize>,
    ) {
        debug_assert!(self.size == 0 || links.len().is_multiple_of(self.size));
        self.rows += links.len().checked_div(self.size).unwrap_or(0);
        self.source_rows.extend(links.iter().map(|l| match l {
            Some(l) if l.step_index >= 0 => source_row(l),
            _ => None,
        }));
    }

    /// The rows `start..start + count` as a batch of their own.
    ///
    /// ```
    /// let b = kiln_dragnn::network::LinkBatch { rows: 2, size: 1, source_rows: vec![Some(0), Some(1)] };
    /// assert_eq!(b.rows_range(1, 1).source_rows, [Some(1)]);
    /// ```
    pub fn rows_range(&self, start: usize, count: usize) -> LinkBatch {
        LinkBatch {
            rows: count,
            size: self.size,
            source_rows: self.source_rows[start * self.size..(start + count) * self.size].to_vec(),
        }
    }
}

/// A float array of `dtype` from `f32` host values.
pub(crate) fn floats(values: Vec<f32>, shape: &[usize], dtype: DType) -> kiln::Result<Array> {
    let a = Array::from_vec(values, shape)?;
    Ok(if dtype == DType::F32 {
        a
    } else {
        a.cast(dtype)
    })
}

/// Embeds a fixed channel: `matrix` is `[vocabulary + 1, dim]` (or `None` when the
/// channel's `embedding_dim` is −1 and the ids themselves are the input); the result is
/// `[rows, size * dim]` (`[rows, size]` of ids as floats).
///
/// ```
/// use kiln::Array;
/// use kiln_dragnn::{component::FixedFeatureOutput, network::{embed_fixed, FixedBatch}};
/// let m = Array::from_vec(vec![0.0f32, 1.0, 10.0, 11.0, 20.0, 21.0], &[3, 2])?;
/// let mut b = FixedBatch::new(1, 2);
/// b.add_step(0, &FixedFeatureOutput { indices: vec![0, 0, 1], ids: vec![1, 2, 2], weights: vec![1.0, 0.5, 1.0] })?;
/// let e = embed_fixed(Some(&m), &b, kiln::DType::F32)?;
/// assert_eq!(e.to_vec::<f32>()?, vec![20.0, 21.5, 20.0, 21.0]);
/// # Ok::<(), kiln_dragnn::Error>(())
/// ```
pub fn embed_fixed(
    matrix: Option<&Array>,
    batch: &FixedBatch,
    dtype: DType,
) -> Result<Array, NetworkError> {
    let (rows, size, width) = (batch.rows, batch.size, batch.width());
    let Some(matrix) = matrix else {
        let ids: Vec<f32> = batch.ids().iter().map(|&i| i as f32).collect();
        let ids = floats(ids, &[rows * size, width, 1], dtype)?;
        let weights = floats(batch.weights(), &[rows * size, width, 1], dtype)?;
        return Ok((&ids * &weights)
            .try_sum(Some(&[1, 2]), false)?
            .reshape_to(&[rows, size])?);
    };
    let dim = matrix.shape()[1];
    if width > 1 {
        // Multi-valued slots (character n-grams: tens of ids in some cells, few in most):
        // gather each pair once and sum it into its cell, so the cost follows the pairs,
        // not the batch's widest cell times its cells.
        let n = batch.entries.len();
        let cells: Vec<i64> = batch.entries.iter().map(|e| e.0 as i64).collect();
        let ids: Vec<i64> = batch.entries.iter().map(|e| e.1).collect();
        let mut looked = matrix.try_take(&Array::from_vec(ids, &[n])?, 0)?;
        // Weights are 1 for most channels (n-grams, affixes): no pass over the pairs then.
        if batch.entries.iter().any(|e| e.2 != 1.0) {
            let weights = floats(batch.entries.iter().map(|e| e.2).collect(), &[n, 1], dtype)?;
            looked = looked.try_mul(&weights)?;
        }
        return Ok(looked
            .try_scatter_add(&Array::from_vec(cells, &[n])?, 0, &[rows * size, dim])?
            .reshape_to(&[rows, size * dim])?);
    }
    let ids = Array::from_vec(batch.ids(), &[rows * size * width])?;
    let weights = floats(batch.weights(), &[rows * size, width, 1], dtype)?;
    let looked = matrix
        .try_take(&ids, 0)?
        .reshape_to(&[rows * size, width, dim])?;
    Ok((&looked * &weights)
        .try_sum(Some(&[1]), false)?
        .reshape_to(&[rows, size * dim])?)
}

/// The source rows gathered for a linked channel, `[rows * size, source_dim]`, with the
/// out-of-range indicator `[rows * size, 1]` (1 where there is no source row).
/// `table` is the source's activations, `[source_rows, source_dim]`.
///
/// ```
/// use kiln::Array;
/// use kiln_dragnn::network::{gather_links, LinkBatch};
/// let table = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
/// let b = LinkBatch { rows: 2, size: 1, source_rows: vec![Some(1), None] };
/// let (rows, oob) = gather_links(&table, &b)?;
/// assert_eq!(rows.to_vec::<f32>()?, vec![3.0, 4.0, 0.0, 0.0]);
/// assert_eq!(oob.to_vec::<f32>()?, vec![0.0, 1.0]);
/// # Ok::<(), kiln_dragnn::Error>(())
/// ```
pub fn gather_links(table: &Array, batch: &LinkBatch) -> Result<(Array, Array), NetworkError> {
    let (n, dim) = (table.shape()[0], table.shape()[1]);
    let zero = Array::try_zeros(&[1, dim], table.dtype())?;
    let padded = Array::try_concat(&[table, &zero], 0)?;
    let mut idx = Vec::with_capacity(batch.source_rows.len());
    let mut oob = Vec::with_capacity(batch.source_rows.len());
    for r in &batch.source_rows {
        match r {
            Some(r) if *r < n => {
                idx.push(*r as i64);
                oob.push(0.0);
            }
            Some(r) => {
                return Err(NetworkError::LinkRow {
                    row: *r,
                    table_rows: n,
                })
            }
            None => {
                idx.push(n as i64);
                oob.push(1.0);
            }
        }
    }
    let count = idx.len();
    let rows = padded.try_take(&Array::from_vec(idx, &[count])?, 0)?;
    let oob = floats(oob, &[count, 1], table.dtype())?;
    Ok((rows, oob))
}

/// Gathers linked rows on the host from a table of evaluated activations (row-major
/// `[table_rows, dim]`): the same values as [`gather_links`], as host vectors, for
/// inference, where the source's activations already live in host memory.
///
/// ```
/// use kiln_dragnn::network::{gather_links_host, LinkBatch};
/// let b = LinkBatch { rows: 2, size: 1, source_rows: vec![Some(1), None] };
/// let (rows, oob) = gather_links_host(&[1.0, 2.0, 3.0, 4.0], 2, &b)?;
/// assert_eq!((rows, oob), (vec![3.0, 4.0, 0.0, 0.0], vec![0.0, 1.0]));
/// # Ok::<(), kiln_dragnn::network::NetworkError>(())
/// ```
pub fn gather_links_host(
    table: &[f32],
    dim: usize,
    batch: &LinkBatch,
) -> Result<(Vec<f32>, Vec<f32>), NetworkError> {
    let n = table.len().checked_div(dim).unwrap_or(0);
    let mut rows = vec![0.0; batch.source_rows.len() * dim];
    let mut oob = vec![0.0; batch.source_rows.len()];
    for (i, r) in batch.source_rows.iter().enumerate() {
        match r {
            Some(r) if *r < n => {
                rows[i * dim..(i + 1) * dim].copy_from_slice(&table[r * dim..(r + 1) * dim])
            }
            Some(r) => {
                return Err(NetworkError::LinkRow {
                    row: *r,
                    table_rows: n,
                })
            }
            None => oob[i] = 1.0,
        }
    }
    Ok((rows, oob))
}

/// Embeds gathered linked rows: with a `projection` (`[source_dim + 1, dim]`), the rows
/// with their out-of-range indicator appended, times the projection; without, the raw
/// rows. The result is `[rows, size * dim]` (`[rows, size * source_dim]` raw).
///
/// ```
/// use kiln::Array;
/// use kiln_dragnn::network::embed_links;
/// let rows = Array::from_vec(vec![3.0f32, 4.0, 0.0, 0.0], &[2, 2])?;
/// let oob = Array::from_vec(vec![0.0f32, 1.0], &[2, 1])?;
/// let p = Array::from_vec(vec![1.0f32, 1.0, 5.0], &[3, 1])?;
/// let e = embed_links(&rows, &oob, Some(&p), 2, 1)?;
/// assert_eq!((e.shape().to_vec(), e.to_vec::<f32>()?), (vec![2, 1], vec![7.0, 5.0]));
/// # Ok::<(), kiln_dragnn::Error>(())
/// ```
pub fn embed_links(
    rows: &Array,
    oob: &Array,
    projection: Option<&Array>,
    out_rows: usize,
    size: usize,
) -> Result<Array, NetworkError> {
    let x = match projection {
        Some(p) => Array::try_concat(&[rows, oob], 1)?.try_matmul(p)?,
        None => rows.clone(),
    };
    let dim = x.shape()[1];
    Ok(x.reshape_to(&[out_rows, size * dim])?)
}
