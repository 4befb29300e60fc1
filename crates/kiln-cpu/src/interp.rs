//! The blocked program interpreter (numexpr style).
//!
//! A [`Program`] is evaluated over a block of consecutive positions of the kernel's
//! iteration space at a time: each instruction runs over the whole block, reading its
//! operands' columns and writing its own typed column (a *register*, [`BLOCK`] elements).
//! Registers (taken from the buffer pool, handed back on drop) are assigned once per launch
//! with a liveness scan, so a long program touches
//! only as many columns as it has live values; scalar registers are filled once. A `Load`
//! of a contiguous buffer view of the right dtype reads the buffer in place (no copy).
//! Two float `+ - * /` instructions where the second is the first's only reader run as one
//! pass ([`ops::binary2`]; same roundings), so `(a*b + c)*d - a` makes two passes, not four;
//! likewise a `where` and the float comparison it alone reads ([`ops::compare_select`]),
//! and, in blocks where one operand of a float `+ - *` is uniform (below), an `exp`, `log`,
//! `tanh` or `sigmoid` and the binary op it alone reads (`exp(x − max)` of a softmax row:
//! [`ops::unary_of_uniform`]; the binary step is deferred to its reader).
//!
//! A load of a source whose outermost dimension is broadcast (a bias row over the rows of
//! `x + b`) has a period: a block's values depend only on its start modulo the period, so the
//! load keeps its register and reads again only when a block starts at another phase or is
//! longer (a bias add is now no slower than adding a whole second matrix).
//!
//! A block's positions are independent of every other block's, so ranges of blocks can run
//! on different threads, each with its own [`Interp`] (registers), later.
//!
//! Depends on [`crate::ops`], [`crate::source`], [`crate::typed`], `kiln-compiler`.

use crate::ops;
use crate::source::Src;
use crate::typed::{copy_cast, TSlice, TSliceMut, TypedVec};
use crate::walk::internal;
use kiln_compiler::{InstOp, Program, RegId};
use kiln_ir::{DType, Id, Result, Scalar};
use smallvec::SmallVec;

/// Repeats `x`'s element 0 over the rest of it.
#[inline(always)]
fn repeat_first_generic<const FMA: bool>(x: TSliceMut<'_>) {
    use crate::typed::with_variant;
    with_variant!(x, TSliceMut, x => {
        if let Some((first, rest)) = x.split_first_mut() {
            rest.fill(*first);
        }
    });
}

crate::simd::versions! {
    /// [`repeat_first_generic`] at the current ISA level, like the other block loops (a
    /// default build's baseline copy stores 16 bytes at a time).
    fn repeat_first = repeat_first_generic(x: TSliceMut<'_>) -> ()
}

/// Positions per block (defined beside the sources' reads, [`crate::source`], which size
/// their hints and streams by it).
pub use crate::source::BLOCK;

/// Where a value lives during a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loc {
    /// Register `r`, positions `0..n`.
    Reg(usize),
    /// Source `s`, read in place (contiguous buffer data).
    Direct(usize),
    /// Computed inside its only reader's step (see [`Step::pair`]); never read.
    Fused,
}

#[derive(Clone, Copy, Debug)]
struct Step {
    /// The instruction.
    inst: usize,
    /// Its register (unused for `Direct` loads).
    out: usize,
    /// A scratch register of the op's natural dtype when the instruction's declared dtype
    /// differs (the result is then cast).
    tmp: Option<usize>,
    /// `Some((f, left))`: the instruction is `op(value f, z)` (`left`) or `op(z, value f)`
    /// and computes the binary instruction `f` on the fly (`f`'s location is
    /// [`Loc::Fused`]); for a `where`, `f` is its condition, a comparison (`left` unused).
    pair: Option<(usize, bool)>,
    /// For a load of a periodic source (see [`period`]): its period. The load keeps its own
    /// register and skips blocks whose values it already holds.
    hoist: usize,
    /// For a unary step: the binary instruction it computes on the fly in blocks where that
    /// instruction was deferred ([`Interp::deferred`]; `exp(x − max)` in one pass).
    shift: Option<usize>,
    /// For a binary step read only by such a unary step: the reader's op. In a block where
    /// this step takes its uniform form and [`ops::unary_of_uniform_ok`] holds, it is
    /// skipped and its reader computes both.
    defer: Option<kiln_ir::UnaryOp>,
}

/// A compiled program with its registers.
#[derive(Debug)]
pub struct Interp<'p> {
    program: &'p Program,
    /// Source read by `InstOp::Acc` (matmul epilogues).
    acc: Option<usize>,
    locs: Vec<Loc>,
    steps: Vec<Step>,
    regs: Vec<TypedVec>,
    /// Values of `Scalar` instructions, converted to their dtype.
    scalar_vals: Vec<Option<Scalar>>,
    scalars_filled: bool,
    /// Position of element 0 of the `outs` slices passed to [`Interp::eval`] (a thread's
    /// chunk of the outputs): in-place (aliased) inputs read element `p - outs_base`.
    outs_base: usize,
    /// `(step, j)`: the step computes result `j` straight into output `j`'s block (see
    /// [`Interp::store_results`]) instead of a register copied out afterwards.
    stores: SmallVec<[(usize, usize); 2]>,
    /// Results go out through a streaming [`crate::stream::Writer`] (set by
    /// [`Interp::set_streaming`]): no direct stores.
    streaming: bool,
    /// `(load step, reader step, output)`: a load of output `j` read in place, whose only
    /// reader is a uniform-operand `+ - * /` storing into output `j`: in a block where the
    /// reader takes the uniform form it runs over the output in place and the load is
    /// skipped; otherwise the load runs just before the reader (see
    /// [`Interp::store_results`]).
    lazy: Option<(usize, usize, usize)>,
    /// Per source: positions per run of one repeated value (its walk's innermost dimension
    /// when that is broadcast, else 1). A block inside one such run loads one value.
    spans: Vec<usize>,
    /// Per value, for the current block: its register holds one value in element 0 that
    /// stands for every position (a *uniform* load, see [`Interp::eval`]).
    uniform: Vec<bool>,
    /// Per step: the values it reads (with those of the instruction it fuses) that can be
    /// uniform — register loads of a source with a span above 1. Computed once, so a block
    /// checks only these (most steps: none) before running the step.
    maybe_uniform: Vec<SmallVec<[usize; 2]>>,
    /// Per step: for a hoisted load, `(start % period, n)` of the block its register holds
    /// (`usize::MAX` first: none yet).
    held: Vec<(usize, usize)>,
    /// Per instruction, for the current block: `Some(left)` when its step (see
    /// [`Step::defer`]) was skipped and its reader computes it, with the uniform operand on
    /// the left (`left`) or the right. Set by the binary step each block before its
    /// reader runs.
    deferred: Vec<Option<bool>>,
    /// Per step: a unary op that runs on one element and stays uniform in blocks where its
    /// operand is uniform (and it does not store into an output).
    unary_uniform: Vec<bool>,
}

/// The period of a source whose outermost dimension is broadcast (a bias row repeated over
/// the rows of its reader): position `p` reads the element of position `p % period`, so a
/// block's values depend only on where it starts modulo the period. 0 for other sources
/// (and for periods above a block, which blocks rarely repeat), or when the innermost
/// dimension is broadcast too (those loads are uniform per block instead).
fn period(src: &Src<'_>) -> usize {
    let w = &src.walk;
    match (src.kind, w.strides.first(), w.strides.last()) {
        (crate::source::SrcKind::Data(_), Some(0), Some(&inner))
            if w.shape.len() > 1 && inner != 0 =>
        {
            let p = w.numel / w.shape[0];
            if p <= BLOCK {
                p
            } else {
                0
            }
        }
        _ => 0,
    }
}

impl<'p> Interp<'p> {
    /// Compiles `program` for sources `srcs` (each of which walks `numel` positions) and the
    /// scalar table. `acc` is the source `InstOp::Acc` reads.
    pub fn new(
        program: &'p Program,
        srcs: &[Src<'_>],
        acc: Option<usize>,
        scalars: &[Scalar],
        numel: usize,
    ) -> Result<Self> {
        let insts = program.insts.as_slice();
        let bad = |i: usize, what: String| {
            internal(format!(
                "program instruction {i} ({:?}): {what}",
                insts[i].op
            ))
        };
        // Validate and compute each instruction's natural dtype.
        let mut natural = Vec::with_capacity(insts.len());
        let mut scalar_vals = vec![None; insts.len()];
        for (i, inst) in insts.iter().enumerate() {
            let operand = |v: RegId| -> Result<DType> {
                if v.index() < i {
                    Ok(insts[v.index()].dtype)
                } else {
                    Err(bad(i, format!("operand {v} is not an earlier value")))
                }
            };
            let src = |s: usize| -> Result<DType> {
                let src = srcs.get(s).ok_or_else(|| bad(i, format!("no input {s}")))?;
                if src.walk.numel != numel {
                    return Err(bad(
                        i,
                        format!(
                            "input {s} is viewed over {} positions, the space has {numel}",
                            src.walk.numel
                        ),
                    ));
                }
                Ok(src.dtype)
            };
            let nat = match inst.op {
                InstOp::Load(s) => src(s.index())?,
                InstOp::Acc => src(acc.ok_or_else(|| bad(i, "no accumulator here".into()))?)?,
                InstOp::Scalar(s) => {
                    let v = scalars
                        .get(s as usize)
                        .ok_or_else(|| bad(i, format!("no scalar {s}")))?;
                    scalar_vals[i] = Some(v.cast(inst.dtype));
                    inst.dtype
                }
                InstOp::Unary(op, x) => ops::unary_dtype(op, operand(x)?),
                InstOp::Binary(op, a, b) => {
                    let (da, db) = (operand(a)?, operand(b)?);
                    if da != db && !op.is_predicate() {
                        return Err(bad(i, format!("operand dtypes {da} and {db}")));
                    }
                    ops::binary_dtype(op, da)
                }
                InstOp::Where(c, a, b) => {
                    operand(c)?;
                    let (da, db) = (operand(a)?, operand(b)?);
                    if da != db {
                        return Err(bad(i, format!("branch dtypes {da} and {db}")));
                    }
                    da
                }
                InstOp::Cast(x) => {
                    operand(x)?;
                    inst.dtype
                }
            };
            natural.push(nat);
        }
        for &r in &program.results {
            if r.index() >= insts.len() {
                return Err(internal(format!(
                    "program result {r} of {} instructions",
                    insts.len()
                )));
            }
        }
        // Liveness: the last instruction reading each value (results live to the end).
        let mut last_use = vec![0usize; insts.len()];
        for (i, inst) in insts.iter().enumerate() {
            for v in operands(&inst.op) {
                last_use[v] = i;
            }
        }
        for &r in &program.results {
            last_use[r.index()] = usize::MAX;
        }
        // Pairs run as one pass: `i` fuses into `j`, the only instruction reading it (read
        // once there; no result is `i`), when both are float `+ - * /` of one dtype, `i` is
        // not itself the second of a pair and `j` has no first yet. `i` is then computed
        // inside `j`'s step, so its operands live until `j`. Whatever runs between the two
        // does not read `i`: the compiler's order `a, b, *, c, +, d, *, -` for
        // `(a*b + c)*d - a` (each load just before its first reader) makes two pairs, two
        // passes, and so does `a*b + tanh(c)` computed as `*`, `tanh`, `+`.
        let mut readers = vec![0usize; insts.len()];
        for inst in insts {
            for v in operands(&inst.op) {
                readers[v] += 1;
            }
        }
        let mut pair: Vec<Option<(usize, bool)>> = vec![None; insts.len()];
        let mut fused = vec![false; insts.len()];
        for i in 0..insts.len() {
            let InstOp::Binary(first, ..) = &insts[i].op else {
                continue;
            };
            let j = last_use[i];
            if readers[i] != 1 || j >= insts.len() {
                continue;
            }
            let InstOp::Binary(second, u, v) = &insts[j].op else {
                continue;
            };
            let dt = insts[i].dtype;
            if pair[i].is_some()
                || pair[j].is_some()
                || natural[i] != dt
                || natural[j] != dt
                || insts[j].dtype != dt
                || !ops::fuses(*first, *second, dt)
            {
                continue;
            }
            let left = match (u.index() == i, v.index() == i) {
                (true, false) => true,
                (false, true) => false,
                _ => continue,
            };
            pair[j] = Some((i, left));
            fused[i] = true;
            // Read at `j` now (results already live to the end).
            for x in operands(&insts[i].op) {
                last_use[x] = last_use[x].max(j);
            }
        }
        // A `where` whose condition is a float comparison read only there runs as one pass
        // too ([`ops::compare_select`]): the comparison is computed inside the `where`'s
        // step and its mask is never stored as `bool`s (a ReLU's gradient, `where(h > 0,
        // g, 0)`, ran at about half the speed of `h * g` as two passes).
        for (j, inst) in insts.iter().enumerate() {
            let InstOp::Where(c, a, b) = inst.op else {
                continue;
            };
            let i = c.index();
            let InstOp::Binary(cmp, x, y) = insts[i].op else {
                continue;
            };
            let dt = inst.dtype;
            if readers[i] != 1
                || last_use[i] != j
                || fused[i]
                || pair[i].is_some()
                || pair[j].is_some()
                || natural[j] != dt
                || insts[a.index()].dtype != dt
                || insts[b.index()].dtype != dt
                || insts[y.index()].dtype != insts[x.index()].dtype
                || !ops::compare_select_ok(cmp, insts[x.index()].dtype, dt)
            {
                continue;
            }
            pair[j] = Some((i, true));
            fused[i] = true;
            for v in operands(&insts[i].op) {
                last_use[v] = last_use[v].max(j);
            }
        }
        let spans: Vec<usize> = srcs
            .iter()
            .map(|src| match (src.kind, src.walk.strides.last()) {
                (crate::source::SrcKind::Data(_), Some(0)) => {
                    src.walk.shape.last().copied().unwrap_or(1)
                }
                _ => 1,
            })
            .collect();
        // A unary op of a float `+ - *` read only there (`exp(x - m)`), one of whose operands
        // is a load that can be uniform over a block (a per-row broadcast value), may run as
        // one pass ([`ops::unary_of_uniform`]): where the binary step takes its uniform form,
        // it is skipped and the unary step computes both, the intermediate never stored (a
        // softmax row's `x − max` pass). The binary keeps its register for the other blocks,
        // and its operands live until the unary step.
        let mut shift: Vec<Option<usize>> = vec![None; insts.len()];
        let mut defer: Vec<Option<kiln_ir::UnaryOp>> = vec![None; insts.len()];
        // A load (or the accumulator) of a source repeating each value over a run of
        // positions: what a block may read as one value.
        let spanned = |op: &InstOp| match *op {
            InstOp::Load(s) => spans[s.index()] > 1,
            InstOp::Acc => acc.is_some_and(|s| spans[s] > 1),
            _ => false,
        };
        let may_be_uniform = |v: RegId| spanned(&insts[v.index()].op);
        for (j, inst) in insts.iter().enumerate() {
            let InstOp::Unary(u, f) = inst.op else {
                continue;
            };
            let i = f.index();
            let InstOp::Binary(bop, a, b) = insts[i].op else {
                continue;
            };
            let dt = inst.dtype;
            if readers[i] != 1
                || last_use[i] != j
                || fused[i]
                || pair[i].is_some()
                || natural[i] != dt
                || insts[i].dtype != dt
                || natural[j] != dt
                || !(may_be_uniform(a) || may_be_uniform(b))
                || !ops::unary_of_uniform_ok(u, bop, dt)
            {
                continue;
            }
            shift[j] = Some(i);
            defer[i] = Some(u);
            for v in operands(&insts[i].op) {
                last_use[v] = last_use[v].max(j);
            }
        }
        // Register assignment (registers hold a block, or the whole space if smaller).
        let block = numel.min(BLOCK);
        let mut regs: Vec<TypedVec> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        // Scalar registers are filled once and kept for the whole launch: they are never
        // shared with another value.
        let alloc =
            |dt: DType, shared: bool, regs: &mut Vec<TypedVec>, free: &mut Vec<usize>| -> usize {
                if let Some(p) = free.iter().position(|&r| shared && regs[r].dtype() == dt) {
                    return free.swap_remove(p);
                }
                // From the process-wide pool (handed back on drop): a launch allocates no
                // fresh scratch once the pool is warm. Registers are written before read.
                regs.push(crate::POOL.take(dt, block));
                regs.len() - 1
            };
        let mut locs = Vec::with_capacity(insts.len());
        let mut steps = Vec::with_capacity(insts.len());
        // Values whose register is never handed to another value: scalars (filled once)
        // and hoisted loads (kept across blocks).
        let mut pinned = vec![false; insts.len()];
        for (i, inst) in insts.iter().enumerate() {
            if fused[i] {
                locs.push(Loc::Fused);
                continue;
            }
            let direct = match inst.op {
                InstOp::Load(s) => Some(s.index()),
                InstOp::Acc => acc,
                _ => None,
            }
            .filter(|&s| srcs[s].dtype == inst.dtype && srcs[s].direct().is_some());
            if let Some(s) = direct {
                locs.push(Loc::Direct(s));
                continue;
            }
            let is_scalar = matches!(inst.op, InstOp::Scalar(_));
            let hoist = match inst.op {
                InstOp::Load(s) if srcs[s.index()].dtype == inst.dtype => period(&srcs[s.index()]),
                _ => 0,
            };
            pinned[i] = is_scalar || hoist > 0;
            let out = alloc(inst.dtype, !pinned[i], &mut regs, &mut free);
            let tmp =
                (natural[i] != inst.dtype).then(|| alloc(natural[i], true, &mut regs, &mut free));
            locs.push(Loc::Reg(out));
            steps.push(Step {
                inst: i,
                out,
                tmp,
                pair: pair[i],
                hoist,
                shift: shift[i],
                defer: defer[i],
            });
            if let Some(t) = tmp {
                free.push(t);
            }
            // This step's reads: its operands, and the fused or deferred instruction's.
            let fused_reads = pair[i]
                .map(|(f, _)| f)
                .into_iter()
                .chain(shift[i])
                .flat_map(|f| operands(&insts[f].op));
            let mut seen: SmallVec<[usize; 6]> = SmallVec::new();
            for v in operands(&inst.op).chain(fused_reads) {
                if seen.contains(&v) {
                    continue;
                }
                seen.push(v);
                if last_use[v] == i && !pinned[v] {
                    if let Loc::Reg(r) = locs[v] {
                        free.push(r);
                    }
                }
            }
        }
        // Values that can be uniform over a block: register loads of a source with a span
        // above 1, and unary ops of such values (computed on one element then: `1 / s` or
        // `exp(-m)` of a per-row value), unless fused, deferred-to or converted.
        let mut can_uniform = vec![false; insts.len()];
        for st in &steps {
            let i = st.inst;
            can_uniform[i] = matches!(locs[i], Loc::Reg(_))
                && match insts[i].op {
                    InstOp::Load(_) | InstOp::Acc => spanned(&insts[i].op),
                    InstOp::Unary(_, x) => {
                        can_uniform[x.index()]
                            && st.tmp.is_none()
                            && st.pair.is_none()
                            && st.shift.is_none()
                            && st.hoist == 0
                    }
                    _ => false,
                };
        }
        let can_be_uniform = |v: usize| can_uniform[v];
        let steps_unary_uniform: Vec<bool> = steps
            .iter()
            .map(|st| can_uniform[st.inst] && matches!(insts[st.inst].op, InstOp::Unary(..)))
            .collect();
        let maybe_uniform: Vec<SmallVec<[usize; 2]>> = steps
            .iter()
            .map(|st| {
                let fused = st
                    .pair
                    .into_iter()
                    .flat_map(|(f, _)| operands(&insts[f].op));
                let mut reads: SmallVec<[usize; 2]> = SmallVec::new();
                for v in operands(&insts[st.inst].op).chain(fused) {
                    if can_be_uniform(v) && !reads.contains(&v) {
                        reads.push(v);
                    }
                }
                reads
            })
            .collect();
        Ok(Interp {
            program,
            acc,
            locs,
            steps,
            regs,
            scalar_vals,
            scalars_filled: false,
            outs_base: 0,
            stores: SmallVec::new(),
            streaming: false,
            lazy: None,
            spans,
            uniform: vec![false; insts.len()],
            deferred: vec![None; insts.len()],
            unary_uniform: steps_unary_uniform,
            held: vec![(usize::MAX, 0); maybe_uniform.len()],
            maybe_uniform,
        })
    }

    /// Evaluates every instruction over positions `start..start + n` (`n <= BLOCK`).
    /// `outs` are the kernel's outputs, read by in-place (aliased) inputs.
    pub fn eval(
        &mut self,
        srcs: &[Src<'_>],
        outs: &mut [TSliceMut<'_>],
        start: usize,
        n: usize,
    ) -> Result<()> {
        debug_assert!(n <= BLOCK);
        let program = self.program;
        let insts = program.insts.as_slice();
        for si in 0..self.steps.len() {
            let step = self.steps[si];
            let Step { inst, out, tmp, .. } = step;
            let op = &insts[inst].op;
            if let InstOp::Scalar(_) = op {
                if !self.scalars_filled {
                    let v = self.scalar_vals[inst].expect("set for scalars");
                    fill_scalar(&mut self.regs[out], v);
                }
                continue;
            }
            self.uniform[inst] = false;
            if let Some((ls, bs, j)) = self.lazy {
                if si == ls {
                    continue;
                }
                if si == bs {
                    if self.uses_uniform(step) {
                        let InstOp::Binary(bop, a, b) = *op else {
                            unreachable!("a lazy load's reader is a binary step")
                        };
                        let left = self.uniform[a.index()];
                        let sv = if left { a } else { b };
                        let base = start - self.outs_base;
                        let s = self.value(sv, srcs, start, 1);
                        ops::binary_uniform_in_place(bop, left, outs[j].range(base, base + n), s)?;
                        continue;
                    }
                    self.load_alias(self.steps[ls], srcs, outs, start, n);
                }
            }
            if let (Some(u), InstOp::Binary(bop, a, _)) = (step.defer, op) {
                let d =
                    self.uses_uniform(step) && ops::unary_of_uniform_ok(u, *bop, insts[inst].dtype);
                self.deferred[inst] = d.then(|| self.uniform[a.index()]);
                if d {
                    continue;
                }
            }
            if let (true, InstOp::Unary(_, x)) = (self.unary_uniform[si], op) {
                if self.uniform[x.index()] && !self.stores.iter().any(|&(st, _)| st == si) {
                    let mut dst = std::mem::take(&mut self.regs[out]);
                    let res = self.compute(step, srcs, start, 1, dst.as_mut_slice().range(0, 1));
                    self.regs[out] = dst;
                    res?;
                    self.uniform[inst] = true;
                    continue;
                }
            }
            if !self.maybe_uniform[si].is_empty() && !self.uses_uniform(step) {
                self.materialize_operands(si, n);
            }
            if let Some(&(_, j)) = self.stores.iter().find(|&&(st, _)| st == si) {
                // Straight into the output block (no tmp: the dtypes agree).
                let base = start - self.outs_base;
                self.compute(step, srcs, start, n, outs[j].range(base, base + n))?;
                continue;
            }
            if step.hoist > 0 {
                // A periodic load: skipped when its register already holds this block.
                let (phase, len) = self.held[si];
                if phase == start % step.hoist && len >= n {
                    continue;
                }
                self.held[si] = (start % step.hoist, n);
            }
            let target = tmp.unwrap_or(out);
            let mut dst = std::mem::take(&mut self.regs[target]);
            let res = match *op {
                InstOp::Load(_) | InstOp::Acc => {
                    let s = match *op {
                        InstOp::Load(s) => s.index(),
                        _ => self.acc.expect("checked in new"),
                    };
                    let src = &srcs[s];
                    // A block inside one run of a repeated value (a per-row broadcast value)
                    // loads that value once; see `uses_uniform`.
                    let span = self.spans[s];
                    let uniform = n > 1 && span > 1 && start / span == (start + n - 1) / span;
                    let m = if uniform { 1 } else { n };
                    self.uniform[inst] = uniform;
                    let offset = match src.kind {
                        // Aliased inputs are contiguous from 0 over the whole output; `outs`
                        // may be a chunk of it starting at `outs_base`.
                        crate::source::SrcKind::Alias(_) => {
                            src.walk.offset - self.outs_base as isize
                        }
                        _ => src.walk.offset,
                    };
                    src.read(
                        &src.walk,
                        offset,
                        start,
                        dst.as_mut_slice().range(0, m),
                        outs,
                    );
                    Ok(())
                }
                _ => self.compute(step, srcs, start, n, dst.as_mut_slice().range(0, n)),
            };
            if tmp.is_some() {
                let m = if self.uniform[inst] { 1 } else { n };
                let mut o = std::mem::take(&mut self.regs[out]);
                copy_cast(dst.as_slice().range(0, m), o.as_mut_slice().range(0, m));
                self.regs[out] = o;
            }
            self.regs[target] = dst;
            res?;
        }
        self.scalars_filled = true;
        // Results are read over the whole block.
        for j in 0..self.program.results.len() {
            let r = (self.program.results[j]).index();
            if self.uniform[r] {
                self.materialize(r, n);
            }
        }
        Ok(())
    }

    /// Runs the load step `step` of an output read in place (see [`Interp::lazy`]).
    fn load_alias(
        &mut self,
        step: Step,
        srcs: &[Src<'_>],
        outs: &[TSliceMut<'_>],
        start: usize,
        n: usize,
    ) {
        let InstOp::Load(x) = self.program.insts.as_slice()[step.inst].op else {
            unreachable!("a lazy load is a load")
        };
        let src = &srcs[x.index()];
        let offset = src.walk.offset - self.outs_base as isize;
        let mut dst = std::mem::take(&mut self.regs[step.out]);
        src.read(
            &src.walk,
            offset,
            start,
            dst.as_mut_slice().range(0, n),
            outs,
        );
        self.regs[step.out] = dst;
    }

    /// Whether `step` reads its uniform operand (if any) as one value: a float `+ - * /`
    /// of exactly one uniform operand ([`ops::binary_uniform`]). Other steps read every
    /// operand over the whole block ([`Interp::materialize_operands`]).
    fn uses_uniform(&self, step: Step) -> bool {
        let inst = &self.program.insts.as_slice()[step.inst];
        match inst.op {
            InstOp::Binary(op, a, b) => {
                step.pair.is_none()
                    && step.tmp.is_none()
                    && self.uniform[a.index()] != self.uniform[b.index()]
                    && ops::uniform_ok(op, inst.dtype)
            }
            _ => false,
        }
    }

    /// Repeats the uniform operands of step `si` (and of the instruction it fuses) over the
    /// block.
    fn materialize_operands(&mut self, si: usize, n: usize) {
        for k in 0..self.maybe_uniform[si].len() {
            let v = self.maybe_uniform[si][k];
            if self.uniform[v] {
                self.materialize(v, n);
            }
        }
    }

    /// Repeats uniform value `v`'s element 0 over positions `0..n` of its register.
    fn materialize(&mut self, v: usize, n: usize) {
        if let Loc::Reg(r) = self.locs[v] {
            let mut whole = self.regs[r].as_mut_slice();
            repeat_first(whole.range(0, n));
        }
        self.uniform[v] = false;
    }

    /// Evaluates a unary, binary, `where` or cast instruction over the block into `dst`
    /// (`n` elements of the instruction's natural dtype).
    fn compute(
        &self,
        step: Step,
        srcs: &[Src<'_>],
        start: usize,
        n: usize,
        dst: TSliceMut<'_>,
    ) -> Result<()> {
        let insts = self.program.insts.as_slice();
        let op = &insts[step.inst].op;
        if let (Some((f, _)), InstOp::Where(_, a, b)) = (step.pair, op) {
            let InstOp::Binary(cmp, x, y) = insts[f].op else {
                unreachable!("a fused where's condition is a comparison")
            };
            return ops::compare_select(
                cmp,
                (self.value(x, srcs, start, n), self.value(y, srcs, start, n)),
                (
                    self.value(*a, srcs, start, n),
                    self.value(*b, srcs, start, n),
                ),
                dst,
            );
        }
        if let Some((f, Some(left))) = step.shift.map(|f| (f, self.deferred[f])) {
            let (InstOp::Unary(u, _), InstOp::Binary(bop, a, b)) = (op, &insts[f].op) else {
                unreachable!("a deferred binary is read by a unary step")
            };
            let (x, s) = if left { (b, a) } else { (a, b) };
            return ops::unary_of_uniform(
                *u,
                *bop,
                left,
                self.value(*x, srcs, start, n),
                self.value(*s, srcs, start, 1),
                dst,
            );
        }
        if let Some((f, left)) = step.pair {
            let (InstOp::Binary(first, x, y), InstOp::Binary(second, u, v)) = (&insts[f].op, op)
            else {
                unreachable!("pairs are of binary instructions")
            };
            let z = if left { *v } else { *u };
            return ops::binary2(
                (*first, *second, left),
                self.value(*x, srcs, start, n),
                self.value(*y, srcs, start, n),
                self.value(z, srcs, start, n),
                dst,
            );
        }
        match *op {
            InstOp::Unary(uop, x) => ops::unary(uop, self.value(x, srcs, start, n), dst),
            InstOp::Binary(bop, a, b) if self.uses_uniform(step) => {
                let left = self.uniform[a.index()];
                let (x, s) = if left { (b, a) } else { (a, b) };
                ops::binary_uniform(
                    bop,
                    left,
                    self.value(x, srcs, start, n),
                    self.value(s, srcs, start, 1),
                    dst,
                )
            }
            InstOp::Binary(bop, a, b) => ops::binary(
                bop,
                self.value(a, srcs, start, n),
                self.value(b, srcs, start, n),
                dst,
            ),
            InstOp::Where(c, a, b) => ops::select(
                self.value(c, srcs, start, n),
                self.value(a, srcs, start, n),
                self.value(b, srcs, start, n),
                dst,
            ),
            InstOp::Cast(x) => {
                copy_cast(self.value(x, srcs, start, n), dst);
                Ok(())
            }
            InstOp::Load(_) | InstOp::Acc | InstOp::Scalar(_) => {
                unreachable!("loads and scalars are handled by eval")
            }
        }
    }

    /// Lets [`Interp::eval`] compute result `j` straight into `outs[j]` (saving the copy
    /// out of its register) where that is safe: the step comes after every load of a source
    /// that reads an output in place (a block's in-place loads must precede its stores; an
    /// in-place `x / s` still stores directly), the result is computed by an
    /// unary/binary/`where`/cast step of the output's dtype with no conversion, no later
    /// instruction reads it, and no other result is the same value. Results for which it
    /// returns true must not be copied out by the caller.
    pub fn store_results(&mut self, srcs: &[Src<'_>], outs: &[TSliceMut<'_>]) {
        self.stores.clear();
        self.lazy = None;
        if self.streaming {
            return;
        }
        let results = &self.program.results;
        for (j, &r) in results.iter().enumerate() {
            let Some(out) = outs.get(j) else { continue };
            if results.iter().filter(|&&x| x == r).count() != 1 {
                continue;
            }
            if let Some(si) = self.store_step(srcs, r.index(), out.dtype()) {
                self.stores.push((si, j));
            }
        }
        self.lazy = self.lazy_load(srcs);
    }

    /// A load of output `j` read in place whose only reader is a `+ - * /` of the uniform
    /// kind storing into output `j` at the same positions: the reader can run in place.
    fn lazy_load(&self, srcs: &[Src<'_>]) -> Option<(usize, usize, usize)> {
        let insts = self.program.insts.as_slice();
        for &(bs, j) in &self.stores {
            let step = self.steps[bs];
            let InstOp::Binary(bop, a, b) = insts[step.inst].op else {
                continue;
            };
            if step.pair.is_some()
                || step.tmp.is_some()
                || a == b
                || !ops::uniform_ok(bop, insts[step.inst].dtype)
            {
                continue;
            }
            for v in [a, b] {
                let v = v.index();
                let InstOp::Load(x) = insts[v].op else {
                    continue;
                };
                let in_place = srcs.get(x.index()).is_some_and(|src| {
                    matches!(src.kind, crate::source::SrcKind::Alias(k) if k == j)
                        && src.walk.contiguous_offset() == Some(0)
                        && src.dtype == insts[v].dtype
                });
                let readers = insts
                    .iter()
                    .filter(|i| operands(&i.op).any(|u| u == v))
                    .count();
                let result = self.program.results.iter().any(|&r| r.index() == v);
                if !in_place || readers != 1 || result || !matches!(self.locs[v], Loc::Reg(_)) {
                    continue;
                }
                if let Some(ls) = self
                    .steps
                    .iter()
                    .position(|st| st.inst == v && st.tmp.is_none())
                {
                    return Some((ls, bs, j));
                }
            }
        }
        None
    }

    /// Lets [`Interp::eval`] compute result `j` (only) straight into `outs[k]` under the
    /// conditions of [`Interp::store_results`] except that other results may be the same
    /// value: the caller then reads them from `outs[k]` (a reduction whose side output is
    /// the value it folds). Returns whether it will.
    pub fn store_result_into(
        &mut self,
        srcs: &[Src<'_>],
        j: usize,
        k: usize,
        dtype: DType,
    ) -> bool {
        self.stores.clear();
        self.lazy = None;
        if self.streaming {
            return false;
        }
        match self.store_step(srcs, (self.program.results[j]).index(), dtype) {
            Some(si) => {
                self.stores.push((si, k));
                true
            }
            None => false,
        }
    }

    /// The step that computes instruction `r` if it may store straight into an output of
    /// `dtype` (see [`Interp::store_results`]).
    fn store_step(&self, srcs: &[Src<'_>], r: usize, dtype: DType) -> Option<usize> {
        let insts = self.program.insts.as_slice();
        // Steps before this one load every aliased source.
        let after_aliases = self
            .steps
            .iter()
            .rposition(|st| match insts[st.inst].op {
                InstOp::Load(x) => srcs
                    .get(x.index())
                    .is_none_or(|src| matches!(src.kind, crate::source::SrcKind::Alias(_))),
                _ => false,
            })
            .map_or(0, |p| p + 1);
        let computed = matches!(
            insts[r].op,
            InstOp::Unary(..) | InstOp::Binary(..) | InstOp::Where(..) | InstOp::Cast(_)
        );
        if !computed
            || insts[r].dtype != dtype
            || insts[r + 1..]
                .iter()
                .any(|i| operands(&i.op).any(|v| v == r))
        {
            return None;
        }
        self.steps
            .iter()
            .position(|st| st.inst == r && st.tmp.is_none())
            .filter(|&si| si >= after_aliases)
    }

    /// Streams the results out (non-temporal stores, see [`crate::stream`]) if `on` and no
    /// source reads an output in place (an in-place load needs the outputs in
    /// [`Interp::eval`]); returns whether it will.
    pub fn set_streaming(&mut self, on: bool, srcs: &[Src<'_>]) -> bool {
        self.streaming = on
            && srcs
                .iter()
                .all(|s| !matches!(s.kind, crate::source::SrcKind::Alias(_)));
        self.streaming
    }

    /// Whether results go out through a streaming writer ([`Interp::set_streaming`]).
    pub fn streaming(&self) -> bool {
        self.streaming
    }

    /// Whether [`Interp::eval`] writes result `j` into its output itself.
    pub fn stores_result(&self, j: usize) -> bool {
        self.stores.iter().any(|&(_, k)| k == j)
    }

    /// Sets the position of element 0 of the `outs` slices that [`Interp::eval`] receives.
    pub fn set_outs_base(&mut self, base: usize) {
        self.outs_base = base;
    }

    /// Value `v` (an instruction index) over the current block.
    pub fn value<'s>(
        &'s self,
        v: RegId,
        srcs: &'s [Src<'_>],
        start: usize,
        n: usize,
    ) -> TSlice<'s> {
        match self.locs[v.index()] {
            Loc::Reg(r) => self.regs[r].as_slice().range(0, n),
            Loc::Direct(s) => srcs[s]
                .direct()
                .expect("direct sources are contiguous data")
                .range(start, start + n),
            Loc::Fused => unreachable!("a fused value is read only inside its pair's step"),
        }
    }

    /// Result `j` of the program over the current block.
    pub fn result<'s>(
        &'s self,
        j: usize,
        srcs: &'s [Src<'_>],
        start: usize,
        n: usize,
    ) -> TSlice<'s> {
        self.value(self.program.results[j], srcs, start, n)
    }

    /// The declared dtype of result `j`.
    pub fn result_dtype(&self, j: usize) -> DType {
        self.program.insts[self.program.results[j]].dtype
    }

    /// Whether results `a` and `b` are the same value.
    pub fn same_result(&self, a: usize, b: usize) -> bool {
        self.program.results[a] == self.program.results[b]
    }

    /// Stops [`Interp::eval`] storing results into outputs (see [`Interp::store_results`]).
    pub fn clear_stores(&mut self) {
        self.stores.clear();
        self.lazy = None;
    }

    /// Number of results.
    pub fn results(&self) -> usize {
        self.program.results.len()
    }
}

impl Drop for Interp<'_> {
    fn drop(&mut self) {
        for r in self.regs.drain(..) {
            crate::POOL.put(r);
        }
    }
}

fn operands(op: &InstOp) -> impl Iterator<Item = usize> {
    op.operands().into_iter().map(RegId::index)
}

fn fill_scalar(reg: &mut TypedVec, v: Scalar) {
    use crate::typed::{with_variant, Elem};
    with_variant!(reg, TypedVec, r => r.fill(Elem::from_scalar(v)))
}

#[cfg(test)]
mod tests {
    //! Which instructions run as fused pairs (values: `tests/elementwise.rs`).
    use super::*;
    use crate::source::SrcKind;
    use crate::walk::Walk;
    use kiln_compiler::{InputId, Inst};
    use kiln_ir::BinaryOp::{self, *};

    // Instructions written with plain numbers (values and inputs by position).
    #[allow(non_snake_case)]
    fn Load(i: usize) -> InstOp {
        InstOp::Load(InputId::new(i))
    }
    #[allow(non_snake_case)]
    fn Binary(op: BinaryOp, a: usize, b: usize) -> InstOp {
        InstOp::Binary(op, RegId::new(a), RegId::new(b))
    }
    #[allow(non_snake_case)]
    fn Where(c: usize, a: usize, b: usize) -> InstOp {
        InstOp::Where(RegId::new(c), RegId::new(a), RegId::new(b))
    }
    #[allow(non_snake_case)]
    fn Unary(op: kiln_ir::UnaryOp, x: usize) -> InstOp {
        InstOp::Unary(op, RegId::new(x))
    }
    #[allow(non_snake_case)]
    fn Cast(x: usize) -> InstOp {
        InstOp::Cast(RegId::new(x))
    }

    /// The steps (instruction, fused pair) of `insts` over four contiguous f32 sources.
    fn steps(insts: Vec<Inst>, results: &[u32]) -> Vec<(usize, Option<(usize, bool)>)> {
        let data = vec![1.0f32; 8];
        let srcs: Vec<Src<'_>> = (0..4)
            .map(|_| Src {
                kind: SrcKind::Data(TSlice::F32(&data)),
                dtype: DType::F32,
                walk: Walk::contiguous(8, 0),
            })
            .collect();
        let program = Program {
            insts: insts.into(),
            results: results.iter().map(|&r| RegId::new(r as usize)).collect(),
        };
        let interp = Interp::new(&program, &srcs, None, &[], 8).expect("valid program");
        let fused: Vec<usize> = (0..program.insts.len())
            .filter(|&i| interp.locs[i] == Loc::Fused)
            .collect();
        for &f in &fused {
            assert!(interp.steps.iter().any(|s| s.pair.map(|p| p.0) == Some(f)));
        }
        interp.steps.iter().map(|s| (s.inst, s.pair)).collect()
    }

    /// An f32 instruction.
    fn f32_inst(op: InstOp) -> Inst {
        Inst {
            op,
            dtype: DType::F32,
        }
    }

    /// Loads 0..4 of four f32 sources, then `ops` (operands index earlier values), results.
    fn pairs(ops: &[(BinaryOp, u32, u32)], results: &[u32]) -> Vec<(usize, Option<(usize, bool)>)> {
        let mut insts: Vec<Inst> = (0..4).map(|s| f32_inst(Load(s))).collect();
        insts.extend(ops.iter().map(|&(op, a, b)| Inst {
            op: Binary(op, a as usize, b as usize),
            dtype: if op.is_predicate() {
                DType::Bool
            } else {
                DType::F32
            },
        }));
        steps(insts, results)
    }

    #[test]
    fn a_chain_of_four_runs_as_two_pairs() {
        // ((x*y + z)*w - x)
        let got = pairs(&[(Mul, 0, 1), (Add, 4, 2), (Mul, 5, 3), (Sub, 6, 0)], &[7]);
        assert_eq!(got, vec![(5, Some((4, true))), (7, Some((6, true)))]);
        // z - x*y: the fused value on the right.
        let got = pairs(&[(Mul, 0, 1), (Sub, 2, 4)], &[5]);
        assert_eq!(got, vec![(5, Some((4, false)))]);
    }

    #[test]
    fn pairs_skip_what_runs_between_them() {
        // ((x*y + z)*w - x) as the compiler emits it: x, y, *, z, +, w, *, -.
        let insts = [
            Load(0),
            Load(1),
            Binary(Mul, 0, 1),
            Load(2),
            Binary(Add, 2, 3),
            Load(3),
            Binary(Mul, 4, 5),
            Binary(Sub, 6, 0),
        ];
        let got = steps(insts.into_iter().map(f32_inst).collect(), &[7]);
        assert_eq!(got, vec![(4, Some((2, true))), (7, Some((6, true)))]);
        // x*y + (-z): the product fuses into its reader across the negation.
        let insts = [
            Load(0),
            Load(1),
            Load(2),
            Binary(Mul, 0, 1),
            Unary(kiln_ir::UnaryOp::Neg, 2),
            Binary(Add, 3, 4),
        ];
        let got = steps(insts.into_iter().map(f32_inst).collect(), &[5]);
        assert_eq!(got, vec![(4, None), (5, Some((3, true)))]);
    }

    #[test]
    fn a_where_fuses_the_float_comparison_it_alone_reads() {
        let inst = |op, dtype| Inst { op, dtype };
        let (b, i) = (DType::Bool, DType::I32);
        let base = || (0..4).map(|s| f32_inst(Load(s))).collect::<Vec<_>>();
        // where(x > y, z, w): fused, across a load between them (a direct read, no step).
        let mut insts = base();
        insts.push(inst(Binary(Gt, 0, 1), b));
        insts.push(f32_inst(Load(2)));
        insts.push(f32_inst(Where(4, 5, 3)));
        assert_eq!(steps(insts, &[6]), vec![(6, Some((4, true)))]);
        // The mask read twice, or kept as a result: not fused.
        let mut insts = base();
        insts.push(inst(Binary(Lt, 0, 1), b));
        insts.push(f32_inst(Where(4, 2, 3)));
        insts.push(f32_inst(Where(4, 3, 2)));
        assert_eq!(
            steps(insts.clone(), &[5, 6]),
            vec![(4, None), (5, None), (6, None)]
        );
        insts.truncate(6);
        assert_eq!(steps(insts, &[5, 4]), vec![(4, None), (5, None)]);
        // A logical op, or a comparison of other dtypes than the branches: not fused.
        let mut insts = base();
        insts.push(inst(Binary(Lt, 0, 1), b));
        insts.push(inst(Binary(Gt, 2, 3), b));
        insts.push(inst(Binary(LogicalAnd, 4, 5), b));
        insts.push(f32_inst(Where(6, 0, 1)));
        assert_eq!(
            steps(insts, &[7]),
            vec![(4, None), (5, None), (6, None), (7, None)]
        );
        let mut insts = base();
        insts.push(inst(Cast(0), i));
        insts.push(inst(Cast(1), i));
        insts.push(inst(Binary(Le, 4, 5), b));
        insts.push(f32_inst(Where(6, 2, 3)));
        assert_eq!(
            steps(insts, &[7]),
            vec![(4, None), (5, None), (6, None), (7, None)]
        );
    }

    #[test]
    fn values_read_twice_or_kept_are_not_fused() {
        // t + t
        assert_eq!(
            pairs(&[(Mul, 0, 1), (Add, 4, 4)], &[5]),
            vec![(4, None), (5, None)]
        );
        // t is a result too
        assert_eq!(
            pairs(&[(Mul, 0, 1), (Add, 4, 2)], &[5, 4]),
            vec![(4, None), (5, None)]
        );
        // t read again later
        assert_eq!(
            pairs(&[(Mul, 0, 1), (Add, 4, 2), (Sub, 5, 4)], &[6]),
            vec![(4, None), (6, Some((5, true)))]
        );
        // not arithmetic: a comparison, a maximum
        assert_eq!(
            pairs(&[(Maximum, 0, 1), (Add, 4, 2)], &[5]),
            vec![(4, None), (5, None)]
        );
        assert_eq!(
            pairs(&[(Mul, 0, 1), (Lt, 4, 2)], &[5]),
            vec![(4, None), (5, None)]
        );
    }

    #[test]
    fn a_periodic_load_is_reread_when_a_block_starts_at_another_phase() {
        // x + b with b a row of `c` repeated over the rows (walk [rows, c], strides [0, 1]),
        // evaluated over blocks of every phase and length in an irregular order: each block
        // must equal -(x[p] + b[p % c]), whatever the hoisted register held before.
        let (rows, c) = (40usize, 48usize);
        let numel = rows * c;
        let x: Vec<f32> = (0..numel).map(|p| p as f32).collect();
        let b: Vec<f32> = (0..c).map(|j| 1000.0 * (j + 1) as f32).collect();
        let srcs = [
            Src {
                kind: SrcKind::Data(TSlice::F32(&x)),
                dtype: DType::F32,
                walk: Walk::contiguous(numel, 0),
            },
            Src {
                kind: SrcKind::Data(TSlice::F32(&b)),
                dtype: DType::F32,
                walk: Walk::new(&[rows, c], &[0, 1], 0),
            },
        ];
        assert_eq!(period(&srcs[1]), c);
        // -(x + b): the negation's register must not be the hoisted load's, free after the
        // addition as it may seem.
        let program = Program {
            insts: vec![
                f32_inst(Load(0)),
                f32_inst(Load(1)),
                f32_inst(Binary(Add, 0, 1)),
                f32_inst(Unary(kiln_ir::UnaryOp::Neg, 2)),
            ]
            .into(),
            results: [RegId::new(3)].into_iter().collect(),
        };
        let mut interp = Interp::new(&program, &srcs, None, &[], numel).expect("valid");
        assert!(interp.steps.iter().any(|st| st.hoist == c));
        let blocks = [
            (0, 1024),
            (1024, 100),
            (1024 + 48, 50),
            (5, 7),
            (53, 7),
            (53, 30),
            (0, 48),
            (96, 48),
            (7, 1),
            (numel - 3, 3),
        ];
        for (start, n) in blocks {
            interp.eval(&srcs, &mut [], start, n).expect("evaluates");
            let got = interp.result(0, &srcs, start, n);
            let TSlice::F32(got) = got else { panic!("f32") };
            let want: Vec<f32> = (start..start + n).map(|p| -(x[p] + b[p % c])).collect();
            assert_eq!(got, &want[..], "block at {start}, {n} long");
        }
    }
}
