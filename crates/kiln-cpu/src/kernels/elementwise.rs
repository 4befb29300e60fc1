//! `KernelKind::Elementwise`: the program evaluated block by block over the space, each
//! result stored into its contiguous output.

use crate::buffer::CpuBuffer;
use crate::interp::{Interp, BLOCK};
use crate::source::{self, AliasPolicy, Src};
use crate::typed::{copy_cast, TSliceMut};
use crate::walk::internal;
use kiln_compiler::{Arg, Kernel, Launch, Program};
use kiln_ir::Result;

/// Runs an elementwise kernel.
pub fn run(
    kernel: &Kernel,
    program: &Program,
    launch: &Launch<'_>,
    inputs: &[Arg<'_, CpuBuffer>],
    outputs: &mut [CpuBuffer],
) -> Result<()> {
    let numel = launch.space.numel();
    check_outputs(outputs, program.results.len(), numel)?;
    for (i, v) in launch.views.iter().enumerate() {
        if v.shape != launch.space {
            return Err(internal(format!(
                "elementwise input {i} is viewed as {} over the space {}",
                v.shape, launch.space
            )));
        }
    }
    let snaps = source::snapshots(launch, inputs, outputs, |_| AliasPolicy::InPlace, None);
    let srcs = source::build(kernel, launch, inputs, &snaps, outputs, None)?;
    let mut interp = Interp::new(program, &srcs, None, launch.scalars, numel)?;
    let mut outs: Vec<TSliceMut<'_>> = outputs.iter_mut().map(|b| b.as_mut_slice()).collect();
    run_blocks(&mut interp, &srcs, &mut outs, 0, numel)
}

/// Checks that there are `count` outputs of at least `numel` elements.
pub fn check_outputs(outputs: &[CpuBuffer], count: usize, numel: usize) -> Result<()> {
    if outputs.len() != count {
        return Err(internal(format!(
            "{} output buffers for {count} results",
            outputs.len()
        )));
    }
    for (j, o) in outputs.iter().enumerate() {
        if o.len() < numel {
            return Err(internal(format!(
                "output {j} has {} elements, the kernel writes {numel}",
                o.len()
            )));
        }
    }
    Ok(())
}

/// Evaluates positions `start..end` block by block, storing result `j` into `outs[j]`.
/// Within a block every load happens before any store, so an input aliased with an output
/// (read with the output's layout) sees its old values.
pub fn run_blocks(
    interp: &mut Interp<'_>,
    srcs: &[Src<'_>],
    outs: &mut [TSliceMut<'_>],
    start: usize,
    end: usize,
) -> Result<()> {
    let mut s = start;
    while s < end {
        let n = BLOCK.min(end - s);
        interp.eval(srcs, outs, s, n)?;
        for (j, out) in outs.iter_mut().enumerate().take(interp.results()) {
            copy_cast(interp.result(j, srcs, s, n), out.range(s, s + n));
        }
        s += n;
    }
    Ok(())
}
