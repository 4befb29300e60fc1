//! Row groups (`kiln_compiler::RowGroup`): the group's kernels run block of rows by block of
//! rows — every kernel over rows `r0..r1`, then the next block — so what one kernel writes
//! is still in the core's L2 cache when the next one reads it. Blocks run in parallel; each
//! kernel of a block runs through the ordinary elementwise and reduction loops over a view
//! of the block's rows (inputs written before the group are read in place; the group's own
//! buffers are cut into disjoint row blocks, one set per task).
//!
//! Small groups, rows longer than a block, and single rows run as one block covering every
//! row, which is the kernels run one after another. While a block runs, its thread hints
//! the next block's rows of the group's inputs into the cache a slice per kernel block ([`source::set_ahead`]).
//! Depends on [`super::elementwise`], [`super::reduce`], [`crate::source`],
//! [`crate::typed`], [`crate::par`], `crate::tune` (the block size), `kiln-compiler`.

use super::elementwise::{self, PAR_MIN};
use super::reduce;
use crate::buffer::CpuBuffer;
use crate::interp::BLOCK;
use crate::source::{self, In};
use crate::typed::{with_variant, TSlice, TSliceMut};
use crate::walk::internal;
use kiln_compiler::{GroupArg, GroupKernel, KernelKind, Launch};
use kiln_ir::Result;

/// Bytes of the rows of one block, summed over every buffer and input the group's kernels
/// touch: what should stay in a core's L2 cache between the group's kernels
/// ([`crate::CacheBlocks::group_block_bytes`]; smaller blocks pay each kernel's set-up more
/// often).
fn block_bytes() -> usize {
    crate::tune::tuning().blocks.group_block_bytes
}

/// Runs a row group (see [`kiln_compiler::Backend::launch_group`]).
pub fn run(
    rows: usize,
    kernels: &[GroupKernel<'_, CpuBuffer>],
    buffers: &mut [CpuBuffer],
    lens: &[usize],
) -> Result<()> {
    let row_len = check(rows, kernels, buffers, lens)?;
    let mut row_bytes = 0;
    let mut row_positions = 0;
    for (b, &len) in buffers.iter().zip(&row_len) {
        row_bytes += len * b.dtype().size_bytes();
    }
    for gk in kernels {
        let positions = gk.launch.space.numel() / rows.max(1);
        row_positions = row_positions.max(positions);
        for (arg, input) in gk.inputs.iter().zip(gk.kernel.inputs.values()) {
            if let GroupArg::Buffer(_) = arg {
                row_bytes += positions * input.dtype.size_bytes();
            }
        }
    }
    // Blocks below the kernels' parallel threshold: each runs on one thread.
    let block = (block_bytes() / row_bytes.max(1))
        .min((PAR_MIN - 1) / row_positions.max(1))
        .max(1);
    let blocked = rows >= 2 * block && rows * row_positions >= PAR_MIN;
    let block = if blocked { block } else { rows };
    // Cut every group buffer into row blocks: one set of pieces per task.
    let tasks = rows.div_ceil(block.max(1)).max(1);
    let mut pieces: Vec<Vec<TSliceMut<'_>>> = (0..tasks).map(|_| Vec::new()).collect();
    for (buf, &len) in buffers.iter_mut().zip(&row_len) {
        let (mut rest, _) = buf.as_mut_slice().split_at(rows * len);
        for (t, set) in pieces.iter_mut().enumerate() {
            let n = block.min(rows - t * block);
            let (head, tail) = rest.split_at(n * len);
            set.push(head);
            rest = tail;
        }
    }
    let run_task = |(t, mut set): (usize, Vec<TSliceMut<'_>>)| {
        let r0 = t * block;
        let r1 = (r0 + block).min(rows);
        if tasks > 1 {
            // The next block's rows of the inputs from outside the group are hinted into
            // the cache while this block runs: a block's first kernel would otherwise stall
            // on every line of its first reads. The group's own buffers are not: a block
            // writes each of their rows before reading it, and hinting those lines only
            // fetched what the block then overwrites (row softmax 4096×1024 f32, scratch
            // timing, two threads 2.05–2.12 → 1.78–1.88 ms, one thread 3.90–4.05 →
            // 3.42–3.48 ms).
            let next = block.min(rows - r1);
            let steps: usize = kernels
                .iter()
                .map(|gk| (gk.launch.space.numel() / rows * (r1 - r0)).div_ceil(BLOCK))
                .sum();
            source::set_ahead(&input_rows(kernels, r1, next), steps);
        }
        let done = kernels
            .iter()
            .try_for_each(|gk| run_rows(gk, r0, r1, &mut set));
        source::set_ahead(&[], 0);
        done
    };
    if tasks == 1 {
        return pieces.into_iter().enumerate().try_for_each(run_task);
    }
    let results: Vec<Result<()>> =
        crate::par::map_init(pieces, || (), |_, t, set| run_task((t, set)));
    results.into_iter().collect()
}

/// Checks the group against the backend contract; returns each buffer's elements per row.
fn check(
    rows: usize,
    kernels: &[GroupKernel<'_, CpuBuffer>],
    buffers: &[CpuBuffer],
    lens: &[usize],
) -> Result<Vec<usize>> {
    if lens.len() != buffers.len() {
        return Err(internal(format!(
            "a row group of {} buffers with {} lengths",
            buffers.len(),
            lens.len()
        )));
    }
    let mut row_len = Vec::with_capacity(lens.len());
    for (i, (&len, b)) in lens.iter().zip(buffers).enumerate() {
        if b.len() < len || (rows == 0 && len != 0) || (rows > 0 && len % rows != 0) {
            return Err(internal(format!(
                "row group buffer {i}: {} elements, {len} written over {rows} rows",
                b.len()
            )));
        }
        row_len.push(len.checked_div(rows).unwrap_or(0));
    }
    for (k, gk) in kernels.iter().enumerate() {
        let fail = |m: String| Err(internal(format!("row group kernel {k}: {m}")));
        if !matches!(
            gk.kernel.kind,
            KernelKind::Elementwise { .. } | KernelKind::Reduce { .. }
        ) || gk.launch.space.dims().first() != Some(&rows)
            || gk.launch.space.rank() < 2
        {
            return fail(format!("{} cannot run by rows", gk.launch.space));
        }
        if gk.outputs.iter().any(|&o| o >= buffers.len())
            || gk.inputs.len() != gk.launch.views.len()
        {
            return fail("buffer or view indices out of range".into());
        }
        for (x, (arg, view)) in gk.inputs.iter().zip(&gk.launch.views).enumerate() {
            if let GroupArg::Group(i) = *arg {
                // Row r must read row r of the buffer: the row stride is the buffer's.
                if i >= buffers.len() || (rows > 1 && view.strides[0] != row_len[i] as isize) {
                    return fail(format!("input {x} is not read row by row"));
                }
            }
        }
    }
    Ok(row_len)
}

/// Runs one kernel of the group over rows `r0..r1`; `set[i]` holds those rows of group
/// buffer `i`.
fn run_rows(
    gk: &GroupKernel<'_, CpuBuffer>,
    r0: usize,
    r1: usize,
    set: &mut [TSliceMut<'_>],
) -> Result<()> {
    let n = r1 - r0;
    let mut space = gk.launch.space.clone();
    space.0[0] = n;
    let views = gk
        .launch
        .views
        .iter()
        .zip(&gk.inputs)
        .map(|(v, arg)| {
            let mut v = v.clone();
            v.shape.0[0] = n;
            if !matches!(arg, GroupArg::Group(_)) {
                // Inputs from outside the group are read in place at their rows; the group's
                // pieces start at row r0 already.
                v.offset += r0 as isize * v.strides[0];
            }
            if n == 0 {
                v.offset = 0;
            }
            v
        })
        .collect();
    let launch = Launch {
        space,
        views,
        scalars: gk.launch.scalars,
        seeds: gk.launch.seeds,
        dims: gk.launch.dims,
        unread_outputs: gk.launch.unread_outputs,
    };
    // The kernel's outputs (mutable pieces, in output order) and its reads of other pieces.
    let mut shared: Vec<Option<TSlice<'_>>> = vec![None; set.len()];
    let mut outs: Vec<(usize, TSliceMut<'_>)> = Vec::with_capacity(gk.outputs.len());
    for (i, piece) in set.iter_mut().enumerate() {
        match gk.outputs.iter().position(|&o| o == i) {
            Some(j) => {
                let len = piece.len();
                outs.push((j, piece.range(0, len)));
            }
            None => shared[i] = Some(piece.as_ref()),
        }
    }
    outs.sort_by_key(|(j, _)| *j);
    let outs: Vec<TSliceMut<'_>> = outs.into_iter().map(|(_, o)| o).collect();
    let mut ins = Vec::with_capacity(gk.inputs.len());
    for arg in &gk.inputs {
        ins.push(match arg {
            GroupArg::Buffer(b) => In::Data(b.as_slice()),
            GroupArg::Virtual => In::Virtual,
            GroupArg::Group(i) => match gk.outputs.iter().position(|o| o == i) {
                Some(j) => In::Output(j),
                None => In::Data(shared[*i].ok_or_else(|| {
                    internal(format!("row group buffer {i} read and written twice"))
                })?),
            },
        });
    }
    match &gk.kernel.kind {
        KernelKind::Elementwise { program } => {
            elementwise::run_io(gk.kernel, program, &launch, &ins, outs)
        }
        KernelKind::Reduce { program, op, axes } => {
            reduce::run_io(gk.kernel, program, *op, axes, &launch, &ins, outs)
        }
        _ => Err(internal(
            "a row group kernel that cannot run by rows".into(),
        )),
    }
}

/// The memory of rows `r0..r0 + n` of the group's inputs from outside it, as distinct
/// `(address, bytes)` regions (views whose rows are not dense, broadcast rows, are left out).
fn input_rows(kernels: &[GroupKernel<'_, CpuBuffer>], r0: usize, n: usize) -> Vec<(usize, usize)> {
    let mut regions: Vec<(usize, usize)> = Vec::new();
    if n == 0 {
        return regions;
    }
    for gk in kernels {
        let per_row = gk.launch.space.numel() / gk.launch.space.dims()[0].max(1);
        for (arg, view) in gk.inputs.iter().zip(&gk.launch.views) {
            let GroupArg::Buffer(b) = arg else { continue };
            let stride = view.strides[0];
            if stride <= 0 || stride as usize > per_row {
                continue;
            }
            let d = b.as_slice();
            let first = (view.offset + r0 as isize * stride).max(0) as usize;
            let last = (first + n * stride as usize).min(d.len());
            if first >= last {
                continue;
            }
            let size = d.dtype().size_bytes();
            let r = (address(d) + first * size, (last - first) * size);
            if !regions.contains(&r) {
                regions.push(r);
            }
        }
    }
    regions
}

/// The address of the first element of `d`.
fn address(d: TSlice<'_>) -> usize {
    with_variant!(d, TSlice, v => v.as_ptr() as usize)
}
