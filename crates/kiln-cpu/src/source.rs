//! Kernel inputs as the kernels read them: a [`Src`] is a source (buffer data, the kernel's
//! own output for in-place inputs, or a virtual `Iota`/`Random` generator) plus the walk of
//! its resolved view. [`Src::read`] copies any range of positions of any walk into a typed
//! destination.
//!
//! Depends on [`crate::walk`], [`crate::typed`], [`crate::buffer`], `kiln-compiler`, `kiln-ir`.

use crate::buffer::CpuBuffer;
use crate::typed::{with_variant, Elem, TSlice, TSliceMut, TypedVec};
use crate::walk::{gather, internal, Walk};
use kiln_compiler::{Arg, Kernel, Launch, Source, ViewOp};
use kiln_ir::{random, DType, Dim, Distribution, Result};

/// Where a kernel input's elements come from.
#[derive(Clone, Copy, Debug)]
pub enum SrcKind<'a> {
    /// Buffer data.
    Data(TSlice<'a>),
    /// The kernel's output `j` (in place): read from the output buffer.
    Alias(usize),
    /// Element at linear index `l` is `(l / stride) % len` (`len == 0`: no modulo).
    Iota {
        /// Elements per step along the axis in the base shape.
        stride: usize,
        /// The axis' size in the base shape.
        len: usize,
    },
    /// Element at linear index `l` is the generator's element `l`.
    Random {
        /// The distribution.
        dist: Distribution,
        /// The seed.
        seed: u64,
    },
}

/// A kernel input ready to be read.
#[derive(Clone, Debug)]
pub struct Src<'a> {
    /// The source.
    pub kind: SrcKind<'a>,
    /// The element type.
    pub dtype: DType,
    /// The input's view, possibly permuted to the kernel's iteration order.
    pub walk: Walk,
}

impl Src<'_> {
    /// Contiguous buffer data: `Some(slice starting at position 0)`.
    pub fn direct(&self) -> Option<TSlice<'_>> {
        match self.kind {
            SrcKind::Data(d) => {
                let off = self.walk.contiguous_offset()? as usize;
                Some(d.range(off, off + self.walk.numel))
            }
            _ => None,
        }
    }

    /// Copies positions `start..start + dst.len()` of `walk` (from element `offset`) into
    /// `dst`, which has the source's dtype. `outs` are the kernel's outputs (for aliases).
    pub fn read(
        &self,
        walk: &Walk,
        offset: isize,
        start: usize,
        dst: TSliceMut<'_>,
        outs: &[TSliceMut<'_>],
    ) {
        match self.kind {
            SrcKind::Data(d) => gather_typed(d, walk, offset, start, dst),
            SrcKind::Alias(j) => gather_typed(outs[j].as_ref(), walk, offset, start, dst),
            SrcKind::Iota { stride, len } => with_variant!(dst, TSliceMut, d => {
                walk.runs_at(offset, start, d.len(), |pos, base, s, n| {
                    for (t, o) in d[pos..pos + n].iter_mut().enumerate() {
                        let l = (base + t as isize * s) as usize / stride;
                        let c = if len == 0 { l } else { l % len };
                        *o = Elem::from_i64(c as i64);
                    }
                })
            }),
            SrcKind::Random { dist, seed } => with_variant!(dst, TSliceMut, d => {
                walk.runs_at(offset, start, d.len(), |pos, base, s, n| {
                    for (t, o) in d[pos..pos + n].iter_mut().enumerate() {
                        *o = random_elem(dist, seed, (base + t as isize * s) as u64);
                    }
                })
            }),
        }
    }

    /// [`Src::read`] of the source's own walk.
    pub fn read_own(&self, start: usize, dst: TSliceMut<'_>, outs: &[TSliceMut<'_>]) {
        self.read(&self.walk, self.walk.offset, start, dst, outs)
    }

    /// Like [`Src::read`], converting to `dst`'s dtype if it differs from the source's.
    pub fn read_cast(
        &self,
        walk: &Walk,
        offset: isize,
        start: usize,
        mut dst: TSliceMut<'_>,
        outs: &[TSliceMut<'_>],
    ) {
        if dst.dtype() == self.dtype {
            self.read(walk, offset, start, dst, outs);
        } else {
            let mut tmp = TypedVec::zeros(self.dtype, dst.len());
            self.read(walk, offset, start, tmp.as_mut_slice(), outs);
            crate::typed::copy_cast(tmp.as_slice(), dst.range(0, tmp.len()));
        }
    }

    /// Every position of the source's own walk, as a contiguous vector.
    pub fn materialize(&self, outs: &[TSliceMut<'_>]) -> TypedVec {
        let mut v = TypedVec::zeros(self.dtype, self.walk.numel);
        self.read_own(0, v.as_mut_slice(), outs);
        v
    }
}

#[inline]
fn random_elem<T: Elem>(dist: Distribution, seed: u64, l: u64) -> T {
    match (dist, T::DTYPE) {
        (Distribution::Uniform, DType::F32) => T::from_f64(random::uniform_f32(seed, l) as f64),
        (Distribution::Uniform, _) => T::from_f64(random::uniform(seed, l)),
        (Distribution::Normal, _) => T::from_f64(random::normal(seed, l)),
    }
}

fn gather_typed(src: TSlice<'_>, walk: &Walk, offset: isize, start: usize, dst: TSliceMut<'_>) {
    match (src, dst) {
        (TSlice::Bool(s), TSliceMut::Bool(d)) => gather(s, walk, offset, start, d),
        (TSlice::I32(s), TSliceMut::I32(d)) => gather(s, walk, offset, start, d),
        (TSlice::I64(s), TSliceMut::I64(d)) => gather(s, walk, offset, start, d),
        (TSlice::F32(s), TSliceMut::F32(d)) => gather(s, walk, offset, start, d),
        (TSlice::F64(s), TSliceMut::F64(d)) => gather(s, walk, offset, start, d),
        (s, d) => unreachable!(
            "source dtype {} read into {} (checked when the source was built)",
            s.dtype(),
            d.dtype()
        ),
    }
}

/// How a kernel reads an input that aliases one of its outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AliasPolicy {
    /// Read from the output buffer directly (elementwise kernels, which read each block
    /// before writing it), if the view is the output's contiguous layout; else snapshot.
    InPlace,
    /// Copy the output buffer before the kernel writes it.
    Snapshot,
}

/// Copies of the output buffers that aliased inputs read (see [`AliasPolicy`]).
pub fn snapshots(
    launch: &Launch<'_>,
    inputs: &[Arg<'_, CpuBuffer>],
    outputs: &[CpuBuffer],
    policy: impl Fn(usize) -> AliasPolicy,
    perm: Option<&[usize]>,
) -> Vec<Option<TypedVec>> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, a)| match a {
            Arg::Output(j) => {
                let w = view_walk(launch, i, perm);
                let in_place =
                    policy(i) == AliasPolicy::InPlace && w.contiguous_offset() == Some(0);
                (!in_place).then(|| TypedVec::from_slice(outputs[*j].as_slice()))
            }
            _ => None,
        })
        .collect()
}

fn view_walk(launch: &Launch<'_>, i: usize, perm: Option<&[usize]>) -> Walk {
    match perm {
        Some(p) => Walk::permuted(&launch.views[i], p),
        None => Walk::of(&launch.views[i]),
    }
}

/// Builds the sources of a kernel's inputs, each walking its view (permuted by `perm`).
/// Checks dtypes and that every buffer view stays inside its buffer.
pub fn build<'a>(
    kernel: &Kernel,
    launch: &Launch<'_>,
    inputs: &[Arg<'a, CpuBuffer>],
    snaps: &'a [Option<TypedVec>],
    outputs: &[CpuBuffer],
    perm: Option<&[usize]>,
) -> Result<Vec<Src<'a>>> {
    if inputs.len() != kernel.inputs.len() || launch.views.len() != kernel.inputs.len() {
        return Err(internal(format!(
            "{} inputs, {} args, {} views",
            kernel.inputs.len(),
            inputs.len(),
            launch.views.len()
        )));
    }
    let mut dims: Option<Vec<Option<usize>>> = None;
    let mut out = Vec::with_capacity(inputs.len());
    for (i, (input, arg)) in kernel.inputs.iter().zip(inputs).enumerate() {
        let walk = view_walk(launch, i, perm);
        let what = || format!("input {i} ({:?})", input.source);
        let kind = match (arg, &snaps[i]) {
            (_, Some(snap)) => SrcKind::Data(snap.as_slice()),
            (Arg::Buffer(b), None) => SrcKind::Data(b.as_slice()),
            (Arg::Output(j), None) => {
                let o = outputs
                    .get(*j)
                    .ok_or_else(|| internal(format!("{}: no output {j}", what())))?;
                if o.dtype() != input.dtype {
                    return Err(internal(format!(
                        "{}: dtype {} aliases an output of {}",
                        what(),
                        input.dtype,
                        o.dtype()
                    )));
                }
                walk.check(o.len(), &what())?;
                SrcKind::Alias(*j)
            }
            (Arg::Virtual, None) => match input.source {
                Source::Iota { axis } => {
                    let dims = dims.get_or_insert_with(|| symbol_values(kernel, launch));
                    let base: Vec<Option<usize>> = input
                        .view
                        .base
                        .iter()
                        .map(|d| match *d {
                            Dim::Const(c) => Some(c),
                            Dim::Sym(s) => dims.get(s as usize).copied().flatten(),
                        })
                        .collect();
                    let mut stride: Option<usize> = base
                        .get(axis + 1..)
                        .unwrap_or(&[])
                        .iter()
                        .copied()
                        .product();
                    let mut len = if axis == 0 {
                        Some(0)
                    } else {
                        base.get(axis).copied().flatten()
                    };
                    if stride.is_none() || len.is_none() {
                        // Sizes that only the base states: read them off the strides.
                        let bs = base_strides(input, &launch.views[i]);
                        let at = |k: usize| {
                            bs.get(k)
                                .copied()
                                .flatten()
                                .filter(|&s| s > 0)
                                .map(|s| s as usize)
                        };
                        stride = stride.or_else(|| {
                            if axis + 1 == bs.len() {
                                Some(1)
                            } else {
                                at(axis)
                            }
                        });
                        len = len.or_else(|| Some(at(axis - 1)? / stride?));
                    }
                    match (stride, len) {
                        (Some(stride), Some(len)) => SrcKind::Iota { stride: stride.max(1), len },
                        _ => {
                            return Err(internal(format!(
                                "{}: the base shape {:?} of an iota cannot be resolved from the launch (Launch carries no symbol values)",
                                what(),
                                input.view.base
                            )))
                        }
                    }
                }
                Source::Random { dist, seed } => {
                    let seed = *launch
                        .seeds
                        .get(seed as usize)
                        .ok_or_else(|| internal(format!("{}: no seed {seed}", what())))?;
                    SrcKind::Random { dist, seed }
                }
                _ => {
                    return Err(internal(format!(
                        "{}: a buffer source passed as virtual",
                        what()
                    )))
                }
            },
        };
        if let SrcKind::Data(d) = kind {
            if d.dtype() != input.dtype {
                return Err(internal(format!(
                    "{}: declared {} but the buffer holds {}",
                    what(),
                    input.dtype,
                    d.dtype()
                )));
            }
            walk.check(d.len(), &what())?;
        }
        out.push(Src {
            kind,
            dtype: input.dtype,
            walk,
        });
    }
    Ok(out)
}

/// The values of the size symbols that the launch reveals: every relative shape the kernel
/// states (its space, each view's result and, walking each view's ops backwards through
/// permutes, broadcasts and reshapes, the intermediate shapes) matched against its resolved
/// counterpart. Needed only for `Iota` inputs, whose element depends on the base shape.
fn symbol_values(kernel: &Kernel, launch: &Launch<'_>) -> Vec<Option<usize>> {
    let mut dims: Vec<Option<usize>> = Vec::new();
    let learn = |sym: &[Dim], conc: &[usize], dims: &mut Vec<Option<usize>>| {
        for (d, &c) in sym.iter().zip(conc) {
            if let Dim::Sym(s) = *d {
                let s = s as usize;
                if dims.len() <= s {
                    dims.resize(s + 1, None);
                }
                dims[s] = Some(c);
            }
        }
    };
    learn(&kernel.space, launch.space.dims(), &mut dims);
    for _ in 0..3 {
        for (input, resolved) in kernel.inputs.iter().zip(&launch.views) {
            // Relative shapes of every stage of the view.
            let mut stages = vec![input.view.base.clone()];
            for op in &input.view.ops {
                let prev = stages.last().expect("non-empty");
                stages.push(match op {
                    ViewOp::Reshape(t) | ViewOp::Broadcast(t) | ViewOp::Slice { shape: t, .. } => {
                        t.clone()
                    }
                    ViewOp::Permute(p) => p.iter().map(|&a| prev[a]).collect(),
                });
            }
            let mut conc: Vec<usize> = resolved.shape.dims().to_vec();
            learn(&stages[stages.len() - 1], &conc, &mut dims);
            for (k, op) in input.view.ops.iter().enumerate().rev() {
                let before = &stages[k];
                let next: Option<Vec<usize>> = match op {
                    ViewOp::Permute(p) => {
                        let mut c = vec![0; p.len()];
                        for (i, &a) in p.iter().enumerate() {
                            c[a] = conc[i];
                        }
                        Some(c)
                    }
                    ViewOp::Broadcast(_) => Some(
                        before
                            .iter()
                            .zip(&conc)
                            .map(|(d, &c)| match *d {
                                Dim::Const(v) => v,
                                Dim::Sym(_) => c,
                            })
                            .collect(),
                    ),
                    ViewOp::Reshape(_) => {
                        let total: usize = conc.iter().product();
                        let unknown: Vec<u32> = before
                            .iter()
                            .filter_map(|d| match *d {
                                Dim::Sym(s)
                                    if dims.get(s as usize).copied().flatten().is_none() =>
                                {
                                    Some(s)
                                }
                                _ => None,
                            })
                            .collect();
                        let known: usize = before
                            .iter()
                            .map(|d| match *d {
                                Dim::Const(v) => v,
                                Dim::Sym(s) => dims.get(s as usize).copied().flatten().unwrap_or(1),
                            })
                            .product();
                        match unknown.as_slice() {
                            [] => Some(kiln_ir::resolve_shape(before, &fill(&dims)).0.to_vec()),
                            [s] if known > 0 && total % known == 0 => {
                                let s = *s as usize;
                                dims.resize(dims.len().max(s + 1), None);
                                dims[s] = Some(total / known);
                                Some(kiln_ir::resolve_shape(before, &fill(&dims)).0.to_vec())
                            }
                            _ => None,
                        }
                    }
                    ViewOp::Slice { .. } => None,
                };
                match next {
                    Some(c) => {
                        learn(before, &c, &mut dims);
                        conc = c;
                    }
                    None => break,
                }
            }
        }
    }
    dims
}

/// The element strides of a view's contiguous base, where the resolved view reveals them:
/// walking the ops backwards, a slice divides a stride by its step, a permute moves it, a
/// broadcast keeps it (except on broadcast dimensions); a reshape ends the walk.
fn base_strides(
    input: &kiln_compiler::Input,
    resolved: &kiln_compiler::Strided,
) -> Vec<Option<isize>> {
    let view = &input.view;
    let mut stages = vec![view.base.clone()];
    for op in &view.ops {
        let prev = stages.last().expect("non-empty");
        stages.push(match op {
            ViewOp::Reshape(t) | ViewOp::Broadcast(t) | ViewOp::Slice { shape: t, .. } => t.clone(),
            ViewOp::Permute(p) => p.iter().map(|&a| prev[a]).collect(),
        });
    }
    let mut cur: Vec<Option<isize>> = resolved.strides.iter().map(|&s| Some(s)).collect();
    for (k, op) in view.ops.iter().enumerate().rev() {
        let before = &stages[k];
        cur = match op {
            ViewOp::Slice { step, .. } => cur
                .iter()
                .zip(step)
                .map(|(s, &st)| {
                    s.and_then(|s| (st != 0 && s % st as isize == 0).then(|| s / st as isize))
                })
                .collect(),
            ViewOp::Permute(p) => {
                let mut pre = vec![None; p.len()];
                for (i, &a) in p.iter().enumerate() {
                    pre[a] = cur[i];
                }
                pre
            }
            ViewOp::Broadcast(t) => before
                .iter()
                .zip(t)
                .zip(&cur)
                .map(|((b, t), &s)| {
                    if *b == Dim::Const(1) && *t != Dim::Const(1) {
                        None
                    } else {
                        s
                    }
                })
                .collect(),
            ViewOp::Reshape(_) => return vec![None; view.base.len()],
        };
    }
    cur
}

fn fill(dims: &[Option<usize>]) -> Vec<usize> {
    dims.iter().map(|d| d.unwrap_or(0)).collect()
}
