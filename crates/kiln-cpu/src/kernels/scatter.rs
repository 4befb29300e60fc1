//! `ScatterAdd`: the adjoint of `Take` (embedding-table gradients). Serial: repeated indices
//! accumulate in order, so results are deterministic.
//!
//! Depends on the elementwise kernels' checks, `crate::source`, `crate::typed`, `crate::walk` and kiln-compiler's plan types.

use super::elementwise::check_outputs;
use crate::buffer::CpuBuffer;
use crate::source::{self, AliasPolicy};
use crate::typed::{copy_cast, TSliceMut, TypedVec};
use crate::walk::internal;
use kiln_compiler::{Arg, Kernel, Launch};
use kiln_ir::{Error, Result};

fn add_rows<T: Copy + std::ops::Add<Output = T>>(
    out: &mut [T],
    upd: &[T],
    plan: &[(usize, usize)],
    inner: usize,
) {
    for &(src, dst) in plan {
        for k in 0..inner {
            out[dst + k] = out[dst + k] + upd[src + k];
        }
    }
}

/// Runs a scatter-add kernel.
pub fn scatter_add(
    kernel: &Kernel,
    axis: usize,
    launch: &Launch<'_>,
    inputs: &[Arg<'_, CpuBuffer>],
    outputs: &mut [CpuBuffer],
) -> Result<()> {
    if launch.views.len() != 2 {
        return Err(internal(format!(
            "scatter_add with {} inputs",
            launch.views.len()
        )));
    }
    let out_shape = launch.space.dims();
    let (uv, iv) = (&launch.views[0], &launch.views[1]);
    if axis >= out_shape.len() {
        return Err(internal(format!(
            "scatter_add along axis {axis} into {}",
            launch.space
        )));
    }
    let mut want: Vec<usize> = out_shape[..axis].to_vec();
    want.extend_from_slice(iv.shape.dims());
    want.extend_from_slice(&out_shape[axis + 1..]);
    if want != uv.shape.dims() {
        return Err(internal(format!(
            "scatter_add of {} by {} into {}",
            uv.shape, iv.shape, launch.space
        )));
    }
    let numel = launch.space.numel();
    check_outputs(outputs, 1, numel)?;
    let snaps = source::snapshots(
        launch,
        &source::ins(inputs),
        &source::views(outputs),
        |_| AliasPolicy::Snapshot,
        None,
    );
    let srcs = source::build(
        kernel,
        launch,
        &source::ins(inputs),
        &snaps,
        &source::views(outputs),
        None,
    )?;
    let upd: TypedVec = srcs[0].materialize(&[]);
    let raw = srcs[1].materialize(&[]);
    let mut idx = vec![0i64; raw.len()];
    copy_cast(raw.as_slice(), TSliceMut::I64(&mut idx));
    let size = out_shape[axis];
    // Check every index first (in order: the first bad one is reported, as the reference).
    for j in idx.iter_mut() {
        let v = if *j < 0 { *j + size as i64 } else { *j };
        if v < 0 || v >= size as i64 {
            return Err(Error::IndexOutOfRange {
                op: "scatter_add",
                index: *j,
                axis,
                size,
            });
        }
        *j = v;
    }
    let outer: usize = out_shape[..axis].iter().product();
    let inner: usize = out_shape[axis + 1..].iter().product();
    let n_idx = idx.len();
    // (offset in updates, offset in output) of each row of `inner` elements
    let mut plan = Vec::with_capacity(outer * n_idx);
    for o in 0..outer {
        for (p, &j) in idx.iter().enumerate() {
            plan.push(((o * n_idx + p) * inner, (o * size + j as usize) * inner));
        }
    }
    let mut out = outputs[0].as_mut_slice();
    match (&mut out, &upd) {
        (TSliceMut::F32(o), TypedVec::F32(u)) => {
            o[..numel].fill(0.0);
            add_rows(o, u, &plan, inner)
        }
        (TSliceMut::F64(o), TypedVec::F64(u)) => {
            o[..numel].fill(0.0);
            add_rows(o, u, &plan, inner)
        }
        (TSliceMut::I32(o), TypedVec::I32(u)) => {
            o[..numel].fill(0);
            for &(s, d) in &plan {
                for k in 0..inner {
                    o[d + k] = o[d + k].wrapping_add(u[s + k]);
                }
            }
        }
        (TSliceMut::I64(o), TypedVec::I64(u)) => {
            o[..numel].fill(0);
            for &(s, d) in &plan {
                for k in 0..inner {
                    o[d + k] = o[d + k].wrapping_add(u[s + k]);
                }
            }
        }
        (TSliceMut::Bool(o), TypedVec::Bool(u)) => {
            o[..numel].fill(false);
            for &(s, d) in &plan {
                for k in 0..inner {
                    o[d + k] |= u[s + k];
                }
            }
        }
        _ => {
            return Err(internal(
                "scatter_add dtype mismatch between updates and output".into(),
            ))
        }
    }
    Ok(())
}
