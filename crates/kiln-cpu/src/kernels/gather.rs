//! Data-movement kernels: `Take` (gather rows along an axis), `Concat` (copy each input into
//! its region) and `TopK` (per-row selection).
//!
//! Depends on the elementwise kernels' checks, `crate::source`, `crate::typed`, `crate::walk` and kiln-compiler's plan types.

use super::elementwise::check_outputs;
use crate::buffer::CpuBuffer;
use crate::source::{self, AliasPolicy, Src};
use crate::typed::{copy_cast, with_dtype, Elem, TSlice, TSliceMut, TypedVec};
use crate::walk::{internal, Walk};
use kiln_compiler::{Arg, Kernel, Launch};
use kiln_ir::{Error, Result};
use std::cmp::Ordering;

fn sources<'a>(
    kernel: &Kernel,
    launch: &Launch<'_>,
    inputs: &[Arg<'a, CpuBuffer>],
    snaps: &'a [Option<TypedVec>],
    outputs: &[CpuBuffer],
) -> Result<Vec<Src<'a>>> {
    source::build(
        kernel,
        launch,
        &source::ins(inputs),
        snaps,
        &source::views(outputs),
        None,
    )
}

/// Runs a take kernel: output `[..axis] + idx.shape + [axis+1..]` of the table.
pub fn take(
    kernel: &Kernel,
    axis: usize,
    launch: &Launch<'_>,
    inputs: &[Arg<'_, CpuBuffer>],
    outputs: &mut [CpuBuffer],
) -> Result<()> {
    if launch.views.len() != 2 {
        return Err(internal(format!("take with {} inputs", launch.views.len())));
    }
    let (tv, iv) = (&launch.views[0], &launch.views[1]);
    let t = tv.shape.dims();
    if axis >= t.len() {
        return Err(internal(format!(
            "take along axis {axis} of a table of shape {}",
            tv.shape
        )));
    }
    let mut want: Vec<usize> = t[..axis].to_vec();
    want.extend_from_slice(iv.shape.dims());
    want.extend_from_slice(&t[axis + 1..]);
    if want != launch.space.dims() {
        return Err(internal(format!(
            "take of {} by {} into {}",
            tv.shape, iv.shape, launch.space
        )));
    }
    let numel = launch.space.numel();
    check_outputs(outputs, 1, numel)?;
    if numel == 0 {
        return Ok(()); // nothing is read, so no index is checked (as the reference)
    }
    let snaps = source::snapshots(
        launch,
        &source::ins(inputs),
        &source::views(outputs),
        |_| AliasPolicy::Snapshot,
        None,
    );
    let srcs = sources(kernel, launch, inputs, &snaps, outputs)?;
    let size = t[axis];
    // Indices, checked in order: the first bad one is the one the reference reports.
    let raw = srcs[1].materialize(&[]);
    let mut idx = vec![0i64; raw.len()];
    copy_cast(raw.as_slice(), TSliceMut::I64(&mut idx));
    for j in idx.iter_mut() {
        let v = if *j < 0 { *j + size as i64 } else { *j };
        if v < 0 || v >= size as i64 {
            return Err(Error::IndexOutOfRange {
                op: "take",
                index: *j,
                axis,
                size,
            });
        }
        *j = v;
    }
    let outer: usize = t[..axis].iter().product();
    let inner_walk = Walk::new(&t[axis + 1..], &tv.strides[axis + 1..], 0);
    let inner = inner_walk.numel;
    let mut outer_offs = Vec::with_capacity(outer);
    Walk::new(&t[..axis], &tv.strides[..axis], tv.offset).runs(0, outer, |_, base, s, len| {
        outer_offs.extend((0..len).map(|i| base + i as isize * s));
    });
    let step = tv.strides[axis];
    let mut out = outputs[0].as_mut_slice();
    let mut pos = 0;
    for &o in &outer_offs {
        for &j in &idx {
            srcs[0].read_cast(
                &inner_walk,
                o + j as isize * step,
                0,
                out.range(pos, pos + inner),
                &[],
            );
            pos += inner;
        }
    }
    Ok(())
}

/// Runs a concat kernel.
pub fn concat(
    kernel: &Kernel,
    axis: usize,
    launch: &Launch<'_>,
    inputs: &[Arg<'_, CpuBuffer>],
    outputs: &mut [CpuBuffer],
) -> Result<()> {
    let space = launch.space.dims();
    if axis >= space.len() {
        return Err(internal(format!(
            "concat along axis {axis} into {}",
            launch.space
        )));
    }
    let mut total = 0;
    for v in &launch.views {
        let s = v.shape.dims();
        let ok = s.len() == space.len() && (0..s.len()).all(|a| a == axis || s[a] == space[a]);
        if !ok {
            return Err(internal(format!(
                "concat of {} into {} along {axis}",
                v.shape, launch.space
            )));
        }
        total += s[axis];
    }
    if total != space[axis] {
        return Err(internal(format!(
            "concat of {total} along axis {axis} into {}",
            launch.space
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
    let srcs = sources(kernel, launch, inputs, &snaps, outputs)?;
    let outer: usize = space[..axis].iter().product();
    let inner: usize = space[axis + 1..].iter().product();
    let mut out = outputs[0].as_mut_slice();
    let mut off = 0;
    for (src, v) in srcs.iter().zip(&launch.views) {
        let len = v.shape.0[axis];
        let chunk = len * inner;
        if chunk > 0 {
            for o in 0..outer {
                let dst = (o * total + off) * inner;
                src.read_cast(
                    &src.walk,
                    src.walk.offset,
                    o * chunk,
                    out.range(dst, dst + chunk),
                    &[],
                );
            }
        }
        off += len;
    }
    Ok(())
}

/// Runs a top-k kernel along the last axis.
pub fn top_k(
    kernel: &Kernel,
    k: usize,
    indices: &[bool],
    launch: &Launch<'_>,
    inputs: &[Arg<'_, CpuBuffer>],
    outputs: &mut [CpuBuffer],
) -> Result<()> {
    let Some(v) = launch.views.first() else {
        return Err(internal("top_k without input".into()));
    };
    let shape = v.shape.dims();
    let Some(&len) = shape.last() else {
        return Err(internal("top_k of a rank-0 array".into()));
    };
    let rows: usize = shape[..shape.len() - 1].iter().product();
    let mut want = shape.to_vec();
    *want.last_mut().expect("rank >= 1") = k;
    if k > len || want != launch.space.dims() || indices.len() != outputs.len() {
        return Err(internal(format!(
            "top_k (k = {k}) of {} into {}",
            v.shape, launch.space
        )));
    }
    check_outputs(outputs, indices.len(), rows * k)?;
    if rows * k == 0 {
        return Ok(());
    }
    let snaps = source::snapshots(
        launch,
        &source::ins(inputs),
        &source::views(outputs),
        |_| AliasPolicy::Snapshot,
        None,
    );
    let srcs = sources(kernel, launch, inputs, &snaps, outputs)?;
    let src = &srcs[0];
    with_dtype!(src.dtype, T => top_k_typed::<T>(src, rows, len, k, indices, outputs));
    Ok(())
}

fn top_k_typed<T: Elem>(
    src: &Src<'_>,
    rows: usize,
    len: usize,
    k: usize,
    flags: &[bool],
    outputs: &mut [CpuBuffer],
) {
    let mut row = TypedVec::zeros(T::DTYPE, len);
    let mut order: Vec<usize> = Vec::with_capacity(len);
    let mut top_i = vec![0i64; k];
    let mut top_v = TypedVec::zeros(T::DTYPE, k);
    let mut outs: Vec<TSliceMut<'_>> = outputs.iter_mut().map(|b| b.as_mut_slice()).collect();
    for r in 0..rows {
        src.read_own(r * len, row.as_mut_slice(), &[]);
        let vals: &[T] = T::slice(row.as_slice()).expect("row has the source dtype");
        // Descending, NaN largest, ties to the lower index: a total order on indices.
        let cmp = |&i: &usize, &j: &usize| -> Ordering {
            let (x, y) = (vals[i], vals[j]);
            match (x.is_nan(), y.is_nan()) {
                (true, true) => i.cmp(&j),
                (true, false) => Ordering::Less,
                (false, true) => Ordering::Greater,
                _ => y.partial_cmp(&x).unwrap_or(Ordering::Equal).then(i.cmp(&j)),
            }
        };
        order.clear();
        order.extend(0..len);
        if k < len {
            order.select_nth_unstable_by(k, cmp);
        }
        order[..k].sort_unstable_by(cmp);
        let tv = top_v.typed_mut::<T>();
        for (t, &i) in order[..k].iter().enumerate() {
            top_i[t] = i as i64;
            tv[t] = vals[i];
        }
        for (out, &want_idx) in outs.iter_mut().zip(flags) {
            let src = if want_idx {
                TSlice::I64(&top_i)
            } else {
                top_v.as_slice()
            };
            copy_cast(src, out.range(r * k, (r + 1) * k));
        }
    }
}
