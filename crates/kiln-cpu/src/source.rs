//! Kernel inputs as the kernels read them: a [`Src`] is a source (buffer data, the kernel's
//! own output for in-place inputs, or a virtual `Iota`/`Random` generator) plus the walk of
//! its resolved view. [`Src::read`] copies any range of positions of any walk into a typed
//! destination; [`prefetch`] hints the next block of large contiguous sources into the cache.
//!
//! Depends on [`crate::walk`], [`crate::typed`], [`crate::buffer`], [`crate::tune`] (the prefetch policy), `kiln-compiler`, `kiln-ir`.

use crate::buffer::CpuBuffer;
use crate::tune::Prefetch;
use crate::typed::{with_variant, Elem, TSlice, TSliceMut, TypedVec};
use crate::walk::{gather, internal, Walk};
use kiln_compiler::{Arg, Kernel, Launch, Source};
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

/// Positions per block: the interpreter ([`crate::interp`]) evaluates a kernel this many
/// positions at a time, and the reads here fetch and hint blocks of it.
pub const BLOCK: usize = 1024;

/// Hints the CPU to fetch the block of positions `start..end` of every contiguous source
/// (the block after the one about to be evaluated), or that block moved [`Tuning::prefetch_ahead`]
/// − 1 times [`BLOCK`] positions further on, into the cache level [`Tuning::prefetch`] names ([`crate::tuning`]:
/// the measurements per CPU vendor are in `tune.rs`): the interpreter reads its sources one
/// instruction at a time, so without a hint only one or two input streams are in flight at
/// once.
///
/// Only sources of at least [`PREFETCH_MIN_BYTES`] are hinted: smaller ones are likely in the
/// last-level cache, where the hint only costs instructions and L1 lines (row softmax over a
/// 16 MiB array and W1 at 1M elements ran ~8 % slower with it).
///
/// [`Tuning::prefetch_ahead`]: crate::Tuning::prefetch_ahead
/// [`Tuning::prefetch`]: crate::Tuning::prefetch
pub fn prefetch(srcs: &[Src<'_>], start: usize, end: usize) {
    let tuning = crate::tune::tuning();
    if tuning.prefetch == Prefetch::Off || start >= end {
        return;
    }
    let shift = BLOCK.saturating_mul(tuning.prefetch_ahead - 1);
    let (start, end) = (start.saturating_add(shift), end.saturating_add(shift));
    for src in srcs.iter().filter(|s| s.hinted()) {
        src.prefetch(start, end, tuning.prefetch);
    }
}

/// The smallest source [`prefetch`] hints.
pub const PREFETCH_MIN_BYTES: usize = 32 << 20;

/// Positions per block of an elementwise kernel over `srcs`: [`Tuning::stream_block`] when
/// [`prefetch`] hints two or more of them, else [`BLOCK`].
///
/// Short blocks keep several input streams advancing together; with one stream they only
/// add per-block work (on Zen 4, 256-position blocks ran W1's four streams 1.23× faster,
/// and one-stream W2 and W3 1.26× and 1.41× slower, when they applied to every hinted
/// kernel; see `docs/performance-log.md`, 2026-11-27).
///
/// [`Tuning::stream_block`]: crate::Tuning::stream_block
pub fn block_len(srcs: &[Src<'_>]) -> usize {
    let tuning = crate::tune::tuning();
    let hinted =
        tuning.prefetch != Prefetch::Off && srcs.iter().filter(|s| s.hinted()).count() >= 2;
    if hinted {
        tuning.stream_block.clamp(1, BLOCK)
    } else {
        BLOCK
    }
}

/// Prefetches the cache lines of `bytes` bytes from `base` with the `_mm_prefetch` hint
/// `HINT` (a hint: never faults).
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[target_feature(enable = "sse")]
fn prefetch_lines<const HINT: i32>(base: *const i8, bytes: usize) {
    let mut at = 0;
    while at < bytes {
        std::arch::x86_64::_mm_prefetch::<HINT>(base.wrapping_add(at));
        at += 64;
    }
}

/// Memory the calling thread will read after its current work, hinted a slice at a time
/// ([`ahead_step`]).
#[derive(Default)]
struct Ahead {
    /// `(address, bytes)` regions still to hint, the next one last.
    regions: Vec<(usize, usize)>,
    /// Bytes hinted per step.
    per_step: usize,
}

thread_local! {
    static AHEAD: std::cell::RefCell<Ahead> = std::cell::RefCell::new(Ahead::default());
}

/// Sets the memory the calling thread reads after its current work (a row group's next
/// block of rows, see [`crate::kernels::group`]), to be hinted into the cache over `steps`
/// calls of [`ahead_step`], so that fetching it overlaps the current work instead of
/// stalling the next block's first reads (row softmax, 4096×1024 f32: one thread
/// 7.4–7.7 → 5.5–5.9 ms; two threads ~6 %). Replaces what was set before; `&[]` clears it.
/// The addresses are only ever prefetched, never read, so a region freed before its hint
/// is harmless.
pub fn set_ahead(regions: &[(usize, usize)], steps: usize) {
    let total: usize = regions.iter().map(|r| r.1).sum();
    AHEAD.with(|a| {
        let mut a = a.borrow_mut();
        a.regions.clear();
        a.regions
            .extend(regions.iter().rev().filter(|r| r.1 > 0).copied());
        a.per_step = total.div_ceil(steps.max(1)).next_multiple_of(64);
    });
}

/// Hints the next slice of the memory set by [`set_ahead`] into the cache (nothing once
/// all of it has been hinted). Called once per block by the kernels' block loops.
#[inline]
pub fn ahead_step() {
    AHEAD.with(|a| {
        let mut a = a.borrow_mut();
        let mut left = a.per_step;
        while left > 0 {
            let Some(r) = a.regions.last_mut() else {
                return;
            };
            let n = left.min(r.1);
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            // SAFETY: SSE is part of the x86-64 baseline, so every x86-64 CPU runs the
            // `#[target_feature(enable = "sse")]` function; a prefetch never faults,
            // whatever the address.
            unsafe {
                prefetch_lines::<{ std::arch::x86_64::_MM_HINT_T0 }>(r.0 as *const i8, n)
            };
            r.0 = r.0.wrapping_add(n);
            r.1 -= n;
            left -= n;
            if r.1 == 0 {
                a.regions.pop();
            }
        }
    });
}

/// Bytes set by [`set_ahead`] on this thread that [`ahead_step`] has not hinted yet.
#[cfg(test)]
fn ahead_left() -> usize {
    AHEAD.with(|a| a.borrow().regions.iter().map(|r| r.1).sum())
}

impl Src<'_> {
    /// Whether [`prefetch`] hints this source: contiguous buffer data of at least
    /// [`PREFETCH_MIN_BYTES`] (a broadcast source, whose walk may be as long, is not read
    /// as a stream).
    fn hinted(&self) -> bool {
        self.walk.numel.saturating_mul(self.dtype.size_bytes()) >= PREFETCH_MIN_BYTES
            && self.direct().is_some()
    }

    /// Hints the CPU to fetch positions `start..end` of contiguous buffer data into the
    /// cache level `to` (no effect on other sources, on values, or under Miri).
    pub fn prefetch(&self, start: usize, end: usize, to: Prefetch) {
        // Off x86-64 (aarch64's hint intrinsic is not stable Rust) the hint is skipped.
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        let _ = (start, end, to);
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        if let Some(d) = self.direct() {
            let end = end.min(d.len());
            if start >= end {
                return;
            }
            with_variant!(d, TSlice, v => {
                let bytes = std::mem::size_of_val(&v[start..end]);
                let base = v[start..end].as_ptr() as *const i8;
                use std::arch::x86_64::{_MM_HINT_T0, _MM_HINT_T2};
                match to {
                    // SAFETY: SSE is part of the x86-64 baseline, so every x86-64 CPU runs the
                    // `#[target_feature(enable = "sse")]` function.
                    Prefetch::L1 => unsafe { prefetch_lines::<_MM_HINT_T0>(base, bytes) },
                    // SAFETY: as above.
                    Prefetch::L2 => unsafe { prefetch_lines::<_MM_HINT_T2>(base, bytes) },
                    Prefetch::Off => {}
                }
            });
        }
    }

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

/// A kernel input as the kernel loops see it: data, the kernel's own output `j` (in place),
/// or a virtual source. Made from launch arguments by [`ins`], or by the row-group executor
/// from row blocks of its buffers.
#[derive(Clone, Copy, Debug)]
pub enum In<'a> {
    /// Buffer data.
    Data(TSlice<'a>),
    /// The kernel's output `j` (in place).
    Output(usize),
    /// `Iota` or `Random`.
    Virtual,
}

/// The inputs of a launch as [`In`]s.
pub fn ins<'a>(args: &[Arg<'a, CpuBuffer>]) -> Vec<In<'a>> {
    args.iter()
        .map(|a| match a {
            Arg::Buffer(b) => In::Data(b.as_slice()),
            Arg::Output(j) => In::Output(*j),
            Arg::Virtual => In::Virtual,
        })
        .collect()
}

/// Read-only views of a launch's output buffers (for [`snapshots`] and [`build`]).
pub fn views(outputs: &[CpuBuffer]) -> Vec<TSlice<'_>> {
    outputs.iter().map(|b| b.as_slice()).collect()
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
    inputs: &[In<'_>],
    outputs: &[TSlice<'_>],
    policy: impl Fn(usize) -> AliasPolicy,
    perm: Option<&[usize]>,
) -> Vec<Option<TypedVec>> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, a)| match a {
            In::Output(j) => {
                let w = view_walk(launch, i, perm);
                let in_place =
                    policy(i) == AliasPolicy::InPlace && w.contiguous_offset() == Some(0);
                (!in_place).then(|| TypedVec::from_slice(outputs[*j]))
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
    inputs: &[In<'a>],
    snaps: &'a [Option<TypedVec>],
    outputs: &[TSlice<'_>],
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
    let mut out = Vec::with_capacity(inputs.len());
    for (i, (input, arg)) in kernel.inputs.values().zip(inputs).enumerate() {
        let walk = view_walk(launch, i, perm);
        let what = || format!("input {i} ({:?})", input.source);
        let kind = match (arg, &snaps[i]) {
            (_, Some(snap)) => SrcKind::Data(snap.as_slice()),
            (In::Data(d), None) => SrcKind::Data(*d),
            (In::Output(j), None) => {
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
                walk.check(o.len(), format_args!("input {i} ({:?})", input.source))?;
                SrcKind::Alias(*j)
            }
            (In::Virtual, None) => match input.source {
                Source::Iota { axis } => {
                    let base = input.view.base.iter().map(|d| match *d {
                        Dim::Const(c) => Some(c),
                        Dim::Sym(s) => launch.dims.get(s as usize).copied(),
                    });
                    let base: Option<Vec<usize>> = base.collect();
                    match base {
                        Some(base) if axis < base.len() => SrcKind::Iota {
                            stride: base[axis + 1..].iter().product::<usize>().max(1),
                            len: if axis == 0 { 0 } else { base[axis] },
                        },
                        _ => {
                            return Err(internal(format!(
                                "{}: the base shape {:?} of an iota (axis {axis}) is not resolved by the launch's {} symbol values",
                                what(),
                                input.view.base,
                                launch.dims.len()
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
            walk.check(d.len(), format_args!("input {i} ({:?})", input.source))?;
        }
        out.push(Src {
            kind,
            dtype: input.dtype,
            walk,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hint never reads or faults outside the data, whatever the range: empty, past the
    /// end, over a view with an offset, over a non-contiguous source (ignored).
    #[test]
    fn prefetch_accepts_any_range() {
        let data: Vec<f32> = (0..5000).map(|x| x as f32).collect();
        let src = Src {
            kind: SrcKind::Data(TSlice::F32(&data)),
            dtype: DType::F32,
            walk: Walk::contiguous(4000, 1000),
        };
        for (a, b) in [
            (0, 0),
            (0, 1),
            (10, 5),
            (0, 4000),
            (3990, 9000),
            (9000, 9100),
        ] {
            for to in [Prefetch::L1, Prefetch::L2, Prefetch::Off] {
                src.prefetch(a, b, to);
            }
        }
        let strided = Src {
            kind: SrcKind::Data(TSlice::F32(&data)),
            dtype: DType::F32,
            walk: Walk::new(&[100], &[3], 0),
        };
        strided.prefetch(0, 100, Prefetch::L1);
        let iota = Src {
            kind: SrcKind::Iota { stride: 1, len: 0 },
            dtype: DType::I64,
            walk: Walk::contiguous(1 << 30, 0),
        };
        prefetch(&[src, strided, iota], 0, 1 << 30);
        assert_eq!(data[4999], 4999.0);
    }

    /// The look-ahead hints cover what was set, a rounded-up equal slice per step, over
    /// several regions and empty ones, and stop when done; a new set replaces the old, and
    /// addresses that are not the thread's data (freed memory, the top of the address
    /// space) are hinted without a fault.
    #[test]
    fn ahead_hints_what_was_set_over_its_steps() {
        let data = vec![0u8; 1200];
        let at = data.as_ptr() as usize;
        set_ahead(&[(at, 1000), (at + 1000, 0), (at + 1000, 200)], 3);
        assert_eq!(ahead_left(), 1200);
        // 1200 / 3 = 400 bytes a step, rounded up to whole lines: 448.
        for left in [752, 304, 0, 0] {
            ahead_step();
            assert_eq!(ahead_left(), left);
        }
        set_ahead(&[(at, 1200)], 0); // no steps: one step hints all of it
        ahead_step();
        assert_eq!(ahead_left(), 0);
        set_ahead(&[(at, 100)], 10);
        set_ahead(&[], 0);
        assert_eq!(ahead_left(), 0);
        ahead_step();
        let freed = {
            let gone = vec![0u8; 4096];
            gone.as_ptr() as usize
        };
        set_ahead(&[(freed, 4096), (usize::MAX - 100, 64)], 2);
        ahead_step();
        ahead_step();
        assert_eq!(ahead_left(), 0);
        assert_eq!(data[1199], 0);
    }
}
