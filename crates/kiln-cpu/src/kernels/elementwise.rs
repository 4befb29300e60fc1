//! `KernelKind::Elementwise`: the program evaluated block by block over the space, each
//! result stored into its contiguous output.
//!
//! Spaces of at least [`PAR_MIN`] positions are cut into chunks of [`CHUNK`] positions (a
//! multiple of the block) that the thread team ([`crate::Team`]) runs on all cores, each thread with its own registers
//! ([`Interp`]); smaller spaces run on the calling thread. Every position's value is computed
//! the same way on either path, so results do not depend on the thread count; a value error
//! (integer division by zero) reports the first failing chunk's error.
//!
//! Depends on `crate::interp`, `crate::source`, `crate::typed`, `crate::buffer`, `crate::walk` and kiln-compiler's plan types.

use crate::buffer::CpuBuffer;
use crate::interp::{Interp, BLOCK};
use crate::source::{self, AliasPolicy, In, Src};
use crate::typed::{copy_cast, TSliceMut};
use crate::walk::internal;
use kiln_compiler::{Arg, Kernel, Launch, Program};
use kiln_ir::Result;

/// Positions per parallel chunk (32 blocks: 128 KiB of f32 per operand).
pub const CHUNK: usize = 32 * BLOCK;

/// Spaces smaller than this run on the calling thread.
pub const PAR_MIN: usize = 2 * CHUNK;

/// Runs an elementwise kernel.
pub fn run(
    kernel: &Kernel,
    program: &Program,
    launch: &Launch<'_>,
    inputs: &[Arg<'_, CpuBuffer>],
    outputs: &mut [CpuBuffer],
) -> Result<()> {
    let outs = outputs.iter_mut().map(|b| b.as_mut_slice()).collect();
    run_io(kernel, program, launch, &source::ins(inputs), outs)
}

/// [`run`] over input data and output slices (a row group's row blocks, or whole buffers).
pub fn run_io(
    kernel: &Kernel,
    program: &Program,
    launch: &Launch<'_>,
    inputs: &[In<'_>],
    outs: Vec<TSliceMut<'_>>,
) -> Result<()> {
    let numel = launch.space.numel();
    check_lens(outs.iter().map(|o| o.len()), program.results.len(), numel)?;
    for (i, v) in launch.views.iter().enumerate() {
        if v.shape != launch.space {
            return Err(internal(format!(
                "elementwise input {i} is viewed as {} over the space {}",
                v.shape, launch.space
            )));
        }
    }
    let views: Vec<_> = outs.iter().map(|o| o.as_ref()).collect();
    let snaps = source::snapshots(launch, inputs, &views, |_| AliasPolicy::InPlace, None);
    let srcs = source::build(kernel, launch, inputs, &snaps, &views, None)?;
    drop(views);
    let mut interp = Interp::new(program, &srcs, None, launch.scalars, numel)?;
    let out_bytes: usize = outs.iter().map(|o| o.len() * o.dtype().size_bytes()).sum();
    let stream = interp.set_streaming(
        launch.unread_outputs && out_bytes >= crate::stream::stream_min_bytes(),
        &srcs,
    );
    run_space(
        &mut interp,
        || {
            let mut fresh = Interp::new(program, &srcs, None, launch.scalars, numel)?;
            fresh.set_streaming(stream, &srcs);
            Ok(fresh)
        },
        &srcs,
        outs,
        numel,
    )
}

/// Evaluates all `numel` positions into `outs`: serially with `interp` below [`PAR_MIN`],
/// else in parallel chunks, each thread with an interpreter from `fresh` (which must succeed
/// whenever `interp`'s construction did).
pub fn run_space<'p>(
    interp: &mut Interp<'p>,
    fresh: impl Fn() -> Result<Interp<'p>> + Sync,
    srcs: &[Src<'_>],
    mut outs: Vec<TSliceMut<'_>>,
    numel: usize,
) -> Result<()> {
    if numel < PAR_MIN {
        return run_blocks(interp, srcs, &mut outs, 0, numel);
    }
    let nchunks = numel.div_ceil(CHUNK);
    let mut chunks: Vec<Vec<TSliceMut<'_>>> = (0..nchunks).map(|_| Vec::new()).collect();
    for o in outs {
        let (mut rest, _) = o.split_at(numel);
        for (c, chunk) in chunks.iter_mut().enumerate() {
            let len = CHUNK.min(numel - c * CHUNK);
            let (head, tail) = rest.split_at(len);
            chunk.push(head);
            rest = tail;
        }
    }
    let results: Vec<Result<()>> = crate::par::map_init(
        chunks,
        || fresh().ok(),
        |interp, c, mut outs| {
            let interp = interp
                .as_mut()
                .ok_or_else(|| internal("an interpreter failed to build twice".into()))?;
            let start = c * CHUNK;
            interp.set_outs_base(start);
            let end = (start + CHUNK).min(numel);
            run_blocks(interp, srcs, &mut outs, start, end)
        },
    );
    results.into_iter().collect()
}

/// Checks that there are `count` outputs of at least `numel` elements.
pub fn check_outputs(outputs: &[CpuBuffer], count: usize, numel: usize) -> Result<()> {
    check_lens(outputs.iter().map(|o| o.len()), count, numel)
}

/// Checks that there are `count` output lengths, each at least `numel`.
pub fn check_lens(
    lens: impl ExactSizeIterator<Item = usize>,
    count: usize,
    numel: usize,
) -> Result<()> {
    if lens.len() != count {
        return Err(internal(format!(
            "{} output buffers for {count} results",
            lens.len()
        )));
    }
    for (j, len) in lens.enumerate() {
        if len < numel {
            return Err(internal(format!(
                "output {j} has {len} elements, the kernel writes {numel}"
            )));
        }
    }
    Ok(())
}

/// Evaluates positions `start..end` block by block, storing result `j` into `outs[j]`, whose
/// element 0 is position `start`. Within a block every load happens before any store, so an
/// input aliased with an output (read with the output's layout) sees its old values.
pub fn run_blocks(
    interp: &mut Interp<'_>,
    srcs: &[Src<'_>],
    outs: &mut [TSliceMut<'_>],
    start: usize,
    end: usize,
) -> Result<()> {
    interp.set_outs_base(start);
    interp.store_results(srcs, outs);
    let block = source::block_len(srcs);
    if interp.streaming() {
        // No in-place sources (see `Interp::set_streaming`): `eval` needs no outputs.
        let mut writer = crate::stream::Writer::new(outs, true);
        let mut s = start;
        while s < end {
            let n = block.min(end - s);
            source::prefetch(srcs, s + n, (s + 2 * n).min(end));
            source::ahead_step();
            interp.eval(srcs, &mut [], s, n)?;
            for j in 0..interp.results() {
                writer.put(j, s - start, interp.result(j, srcs, s, n));
            }
            s += n;
        }
        return Ok(());
    }
    let mut s = start;
    while s < end {
        let n = block.min(end - s);
        source::prefetch(srcs, s + n, (s + 2 * n).min(end));
        source::ahead_step();
        interp.eval(srcs, outs, s, n)?;
        let r = s - start;
        for (j, out) in outs.iter_mut().enumerate().take(interp.results()) {
            if !interp.stores_result(j) {
                copy_cast(interp.result(j, srcs, s, n), out.range(r, r + n));
            }
        }
        s += n;
    }
    Ok(())
}
