//! # kiln-cpu
//!
//! The CPU backend: [`CpuBackend`] implements [`kiln_compiler::Backend`], executing the
//! kernels of a compiled [`kiln_compiler::Plan`] on host memory.
//!
//! There is no code generation here: each kernel kind is Rust code, and an elementwise program is interpreted block by block over SIMD loops compiled ahead of time in several instruction-set versions and picked at run time.
//! Every op has the semantics of `kiln-reference` (the oracle): integers wrap, integer division by zero and negative integer powers are errors naming the first offending element, `maximum`/`minimum` propagate NaN, casts follow `Scalar::cast`.
//! The measurements behind the choices below are in `docs/performance.md` ("Figures behind the CPU kernels' choices") and `docs/performance-log.md` (from 2026-11-21 on).
//!
//! ## Modules
//!
//! * `buffer`: [`CpuBuffer`] and the process-wide [`BufferPool`].
//! * `typed`: typed element storage ([`TypedVec`], [`Aligned`]), borrowed typed views, the [`Elem`] trait of the generic kernels and the cast rules ([`Conv`]).
//! * `walk` and `source`: strided iteration in runs, and kernel inputs as the kernels read them (buffers, in-place outputs, virtual `Iota`/`Random` sources), with the prefetch hints.
//! * `interp` and `ops`: the blocked program interpreter and the elementwise ops over typed columns.
//! * [`vmath`] and `simd`: vectorised math with documented error bounds, and run-time instruction-set selection ([`isa`]).
//! * `kernels`: one module per kernel family: `elementwise`, `reduce`, `matmul` (with `gemm`: the product's description, which kernel takes it, kiln's own GEMM forms and their tuning table), `gather` (`take`, `concat`, `top_k`), `scatter` (`scatter_add`) and `group` (row groups).
//! * `par` and `team`: the kernels' parallel loops on kiln's own thread team ([`Team`]).
//! * `stream`: non-temporal stores for large outputs nothing reads back.
//! * `tune`: what the backend knows of the machine ([`machine`]) and the tuning chosen from it ([`tuning`]).
//!
//! ## Buffers and the pool
//!
//! A buffer ([`CpuBuffer`]) is a typed `Vec`, or caller data shared without a copy: `upload` wraps the `HostData`, so inputs are uploaded zero-copy.
//! Released owned buffers (scratch, intermediates, dropped outputs) go to a process-wide [`BufferPool`]: free lists by dtype and power-of-two capacity class, bounded in bytes ([`DEFAULT_POOL_BYTES`]) and to 64 vectors per dtype and class, the least recently released freed first to make room; a vector larger than the bound is freed.
//! So a plan run repeatedly reuses warm memory.
//! A plan buffer the allocator cannot give is `Error::OutOfMemory` ([`BufferPool::try_take`]), not an abort.
//!
//! `download` moves an owned `Vec` out without a copy, as `kiln_ir::Recycled` data homed at the pool: when the user drops the last handle on the result, the storage comes back to the pool.
//! A later allocation of a similar size then reuses its warm pages: no page faults, no kernel zeroing, and no zeroing pass by the pool (a reused vector is only extended, never cleared).
//! A value still held is never handed out again: the pool only sees it after the drop.
//! An allocation of `len` elements reuses a vector of up to twice the capacity it needs, so a user's array may carry capacity up to 2× its length.
//! `Shared::into_vec` of a unique handle moves the `Vec` out to the user, and it no longer goes home.
//!
//! Pool storage starts on a cache line: every vector the pool hands out (kernel outputs, group buffers, interpreter registers) is an [`Aligned`] `Vec` with up to 64 bytes of padding before the elements, chosen so that they start on a 64-byte boundary (a 64-byte vector load that straddles two lines costs about twice one that does not).
//! The padding travels with the storage: a downloaded output is `Recycled::starting_at` its first element and goes home whole, and `into_vec` shifts the elements over the padding to the front of the same allocation.
//! Alignment is for speed only: no kernel assumes it, and user inputs keep the allocator's 16-byte alignment.
//!
//! Fresh buffers of 4 MiB or more are advised `MADV_HUGEPAGE` before their first touch (Linux): fresh 4 KiB page faults cost as much as the work (`docs/performance-log.md`, 2026-11-21).
//!
//! ## Elementwise programs
//!
//! An elementwise program runs in a numexpr-style blocked interpreter (`interp`): each instruction is evaluated over a block of 1,024 positions (4 KiB of f32: a program's live registers fit in L1) into a typed register column, reading its inputs through their strided views (in place when contiguous and of the right dtype).
//! Registers come from the pool and are assigned once per launch by a liveness scan; scalar registers are filled once.
//! A float `+ - * /` instruction whose only reader is another float `+ - * /` is computed inside that reader's pass, wherever it is in the program, as one bit-identical pass (its operands live until then); so is a float comparison read only by a `where` (`vmath::compare_select_*`: the mask is never stored as `bool`s).
//! An output read in place by a uniform-operand `+ - * /` that stores back into it runs in place instead of being copied into a register first (`Interp::lazy`, `vmath::binary_uniform_in_place_*`).
//! A load of a source broadcast over its outermost dimension (a bias row) keeps its own register and reads again only when a block starts at another phase of its period (`Step::hoist`).
//! Float ops run SIMD lane kernels ([`vmath`]: vectorised `exp log tanh sigmoid sin cos` with documented ulp bounds); `exp`, `sigmoid` and `tanh` scale by 2ⁿ with an exponent add where results are normal and patch the rest, and a division by a per-row value is a reciprocal and a Markstein correction (correctly rounded; out-of-range elements are divided); every such fast path is bit-identical to the plain one.
//! Spaces of 64K positions or more run on all cores, in chunks of 32 blocks fixed by the size alone, each thread with its own registers (`kernels/elementwise.rs`).
//!
//! A coming block of contiguous sources of 32 MiB or more is hinted into the cache (`source`), at the level and the distance the vendor's tuning picks ([`Tuning`]).
//! An elementwise kernel over two or more such streams runs in shorter blocks (`Tuning::stream_block`, `source::block_len`), so that its streams advance together.
//!
//! ## Instruction sets
//!
//! A default build targets baseline x86-64 (SSE2).
//! The hot loops are `#[inline(always)]` generic code compiled three times: at the baseline, with AVX2 + FMA and with AVX-512; the copy to run is picked per call from the level detected once ([`isa`]), so a default build uses the CPU's widest vectors.
//! `KILN_CPU_ISA=scalar|sse2|avx2|avx512` (or [`set_isa`]) lowers the level, never above what the CPU has; tests use it to run every path the machine can run.
//! On aarch64 the baseline level is NEON with fused multiply-add ([`BASE_FMA`], named `neon`), tested under qemu-user in CI.
//!
//! ## Reductions
//!
//! Reductions (`kernels/reduce.rs`) fold the prologue's blocks into per-output accumulators, in an iteration order chosen so that each fold is a tight loop or a vector update: `f64` for float sums and products (`f64` sums Neumaier-compensated), wrapping `i64` for integer sums and products, the element type for `max`/`min` (NaN propagates).
//! Sums of f32 (`vmath::sum_f32`, `vmath::dot_f32`) keep 32 `f64` lanes; runs shorter than that (a row of 10 classes) are folded without the per-call ISA dispatch, with the same value.
//! A reduction whose prologue is exactly `x * y` of two contiguous f32 inputs folds the products as it forms them, bit-identical to the two passes.
//! A prologue value that later kernels need too (a side output, such as softmax's `exp(x - max)`) is computed straight into the side output and folded from there (`fold`, `Interp::store_result_into`).
//! Large reductions run on the team over pieces fixed by the sizes alone: a full reduction folds chunks into partials merged in chunk order, a row reduction gives each task whole rows, and a reduction over leading axes that keeps the last one folds pieces of the positions into partial accumulators of every output, merged in piece order.
//! So results never depend on the thread count.
//!
//! ## Matrix products
//!
//! `kernels/matmul.rs` runs batched products over strided views without copying the operands; the product's description (`Gemm`) is `kernels/gemm.rs`, which both the choice of kernel and the kernels read.
//! Which kernel takes a float product:
//!
//! * kiln's small forms (`kernels/gemm/`: unpacked register blocks, 4×64 f32 at AVX-512, one call per block of rows) take products with at most 16 rows (up to 2²⁵ multiply-adds), of at most 32³ multiply-adds, with fewer than 16 columns (below 2M multiply-adds), or, when the left operand's rows are contiguous, of at most 64³ multiply-adds or with a right operand of at most 32 KiB (below 2M multiply-adds).
//!   Where the vendor's tuning says so (`Tuning::gemm_broadcast_avx512`, AMD: the broadcast form measured faster than both others on Zen 4), they take every product at AVX-512 whose left operand has contiguous rows.
//!   Products with fewer columns than a vector run transposed when the left operand is transposed, else as dot products over a packed copy of the right operand; right operands over 32 KiB are packed into panels from 128 rows.
//! * kiln's blocked form (`gemm_blocked`) takes the others at AVX-512 from 128 columns and 64 steps (scaled ones only within one block of steps): the right operand packed per block for L2, the left operand's 12-row panels packed once per block of steps and kept for every block of columns, 12×32 register blocks, long sums continued block to block so that each element stays one ordered sum.
//! * `matrixmultiply` (its AVX-512 kernels; built without its own threads) takes the rest.
//!
//! Products of 2M multiply-adds or more (the small forms' from `m·n·(k+16)` ≥ 1M: their stores bound them) split their rows over the team, so one team serves every kernel and nested parallel work composes.
//! Every element of kiln's forms is an ordered sum over the steps, so results do not depend on the block an element falls in.
//! An epilogue's affine part `α·acc ± L` (a bias add `x @ w + b`, an SGD step `w - lr·(xᵀ @ g)`, a scaling) runs inside the GEMM as `C = α·A@B + β·L`; the rest (the `relu` of `relu(x @ w + b)`), or a whole epilogue that is not affine, runs over `C` in place.
//! `L` is read in place by kiln's GEMM stores when its view has a unit column stride and evenly spaced rows (a broadcast bias, a contiguous array, columns of a wider one: `gemm::Addend`, `matmul::AddendRows`), else (and for `matrixmultiply`) copied into `C` first.
//! Prefill, product and epilogue run per block of output rows in the task that computes the block, so the epilogue reads rows still in that core's cache and needs no dispatch of its own.
//!
//! ## Other kernels
//!
//! `take`, `concat` and `top_k` copy through the views (`kernels/gather.rs`).
//! `scatter_add` is serial, so repeated indices accumulate in order and results are deterministic (`kernels/scatter.rs`).
//!
//! ## Row groups
//!
//! The compiler marks runs of kernels whose rows are independent (a row reduction and the kernels that read its result row by row: softmax, layer norm); `kernels/group.rs` runs them block of rows by block of rows.
//! The group's buffers are cut into blocks of rows (about 768 KiB of rows over everything the group touches, at most 3/4 of L2, [`CacheBlocks`]; below the kernels' parallel threshold); every kernel of a block runs through the ordinary elementwise and reduction loops over views of the block's rows, and blocks run in parallel, so intermediate rows stay in L2.
//! Small groups run as one block, which is the kernels one after another.
//! While a block runs, its thread hints the next block's rows of the inputs from outside the group (not the group's own buffers, which a block writes before it reads them) into the cache a slice per kernel block (`source::set_ahead` / `ahead_step`, a thread-local list of address ranges that are only ever prefetched), so that the next block's first reads do not stall.
//!
//! ## Streamed outputs
//!
//! An elementwise kernel whose outputs nothing of the plan reads back (`Launch::unread_outputs`) and that writes 48 MiB or more ([`DEFAULT_STREAM_MIN_BYTES`], [`set_stream_min_bytes`]) streams them (`stream`): results go through the block registers and out with non-temporal stores, at AVX-512, and at AVX2 where the vendor's tuning says so (`Tuning::stream_avx2`).
//! That saves the read-for-ownership of every destination line and leaves the inputs in cache; smaller outputs stay in cache for whatever reads them next.
//! The `Writer` holds the outputs while it writes and fences (`sfence`) when dropped; no in-place sources take that path.
//!
//! ## Threads
//!
//! Parallel loops (`par`) run on [`Team`], kiln's own thread team: the calling thread plus `KILN_NUM_THREADS − 1` helpers (default: the cores the process may use) that spin for 1 ms after each loop ([`DEFAULT_SPIN`], `KILN_SPIN_US`) before they sleep, so a loop starts and ends without waking a thread.
//! For 100 ms after a loop found the team busy (other threads are evaluating and keep the cores busy), helpers sleep at once instead of spinning.
//! Items are claimed in shrinking contiguous runs, the caller among the claimers; a loop started while the team is busy, or nested in an item, runs on its caller.
//! Items are cut by the shape alone, never by the thread count, so results do not depend on it.
//! [`Team::install`] runs a closure with another team serving the calling thread's loops.
//! Why not a work-stealing pool: see `team`'s module docs.
//!
//! ## Machine tuning
//!
//! The machine's vendor, model and caches are read once at start-up ([`machine`]).
//! One table entry per vendor ([`Tuning::for_vendor`], each with the measurement behind it) picks the prefetch level and distance, the block length over several streams, streaming at AVX2 and the GEMM form at AVX-512; the GEMM's and the row groups' cache blocks are bounded by the L1d and L2 sizes ([`CacheBlocks`]).
//! `KILN_PREFETCH`, `KILN_PREFETCH_AHEAD`, `KILN_STREAM_BLOCK`, `KILN_STREAM_AVX2`, `KILN_GEMM_BROADCAST`, `KILN_L1D_BYTES` and `KILN_L2_BYTES` override them.
//!
//! ## `unsafe`
//!
//! This crate and kiln-io are the only crates of the workspace that allow `unsafe`; every block carries a `// SAFETY:` comment (`clippy::undocumented_unsafe_blocks` is denied).
//! It is used for the calls into the `#[target_feature]` copies, the small GEMM's vector loads and stores and its packed block's pointer walk, the two calls into `matrixmultiply`, the streaming stores and their fence, the prefetch hints, `madvise`, and the thread team's lifetime-erased job pointer; `docs/ARCHITECTURE.md` ("Cross-cutting concerns") lists each with its reason.
//! The SIMD, streaming, prefetch and `madvise` code is compiled out under Miri, which runs the portable paths.
//!
//! Depends on `kiln-ir`, `kiln-compiler`, `matrixmultiply` and (Linux) `libc`; the oracle,
//! `kiln-reference`, only in tests.
//!
//! ```
//! use kiln_compiler::{BufferDesc, Input, Inst, InstOp, Kernel, KernelKind, OutputRef, Plan, Program, Slot, Source, View};
//! use kiln_ir::{Bindings, DType, Dim, HostData, IdVec, UnaryOp};
//! // y = -x over a 1-D array of symbolic length.
//! let shape: kiln_ir::SymShape = [Dim::Sym(0)].into_iter().collect();
//! let mut program = Program::default();
//! let mut inputs = IdVec::new();
//! let x = inputs.push(Input { source: Source::Param(kiln_ir::ParamId::from_u32(0)), dtype: DType::F32, view: View::identity(shape.clone()) });
//! let v = program.insts.push(Inst { op: InstOp::Load(x), dtype: DType::F32 });
//! let y = program.insts.push(Inst { op: InstOp::Unary(UnaryOp::Neg, v), dtype: DType::F32 });
//! program.results.push(y);
//! let mut plan = Plan::default();
//! let b = plan.buffers.push(BufferDesc { dtype: DType::F32, slots: vec![], output: true, last_use: Default::default() });
//! let s = plan.slots.push(Slot { dtype: DType::F32, shape: shape.clone(), buffer: b });
//! plan.buffers[b].slots.push(s);
//! plan.kernels.push(Kernel { kind: KernelKind::Elementwise { program }, space: shape, inputs, outputs: [s].into_iter().collect() });
//! plan.outputs.push(OutputRef::Slot(s));
//! let bindings = Bindings { params: vec![HostData::from(vec![1.0f32, -2.0]).into()].into(), dims: vec![2], ..Bindings::default() };
//! let out = kiln_compiler::run(kiln_cpu::cpu(), &plan, &bindings).unwrap();
//! assert_eq!(out[0].get(1), kiln_ir::Scalar::Float(2.0));
//! ```
#![warn(missing_docs)]

mod buffer;
mod interp;
mod kernels;
mod ops;
mod par;
mod simd;
mod source;
mod stream;
mod team;
mod tune;
mod typed;
pub mod vmath;
mod walk;

pub use buffer::{BufferPool, CpuBuffer, PoolStats, DEFAULT_POOL_BYTES};
pub use simd::{detected_isa, isa, set_isa, Isa, BASE_FMA};
pub use stream::{
    set_stream_min_bytes, stream_min_bytes, streamed_bytes, DEFAULT_STREAM_MIN_BYTES,
};
pub use team::{Team, DEFAULT_SPIN};
pub use tune::{
    machine, parse_size, parse_vendor, tuning, CacheBlocks, Machine, Prefetch, Tuning, Vendor,
};
pub use typed::{Aligned, Conv, Elem, TSlice, TSliceMut, TypedVec, ALIGN_BYTES};

use kiln_compiler::{Arg, Backend, GroupKernel, Kernel, KernelKind, Launch};
use kiln_ir::{DType, HostData, Result};

/// The buffer pool shared by every [`CpuBackend`] (one host, one pool).
static POOL: BufferPool = BufferPool::new(DEFAULT_POOL_BYTES);

/// The CPU backend. It holds no state of its own (buffers are pooled process-wide, see
/// [`CpuBackend::pool`]), so it can be a `static` or a temporary.
///
/// ```
/// use kiln_compiler::Engine;
/// use kiln_ir::{build, HostData, Shape, UnaryOp};
/// let engine = Engine::new(kiln_cpu::CpuBackend, 8);
/// let a = build::data(HostData::from(vec![4.0f64]), Shape::from([1])).unwrap();
/// let y = build::unary(UnaryOp::Sqrt, &a).unwrap();
/// let out = engine.evaluate(&[&y]).unwrap();
/// assert_eq!(out[0].get(0), kiln_ir::Scalar::Float(2.0));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

/// The CPU backend, as a `'static` reference.
///
/// ```
/// assert_eq!(kiln_compiler::Backend::name(kiln_cpu::cpu()), "cpu");
/// ```
pub fn cpu() -> &'static CpuBackend {
    static CPU: CpuBackend = CpuBackend;
    &CPU
}

impl CpuBackend {
    /// The process-wide buffer pool (for statistics, [`BufferPool::set_limit`] and
    /// [`BufferPool::clear`]).
    ///
    /// ```
    /// let stats = kiln_cpu::CpuBackend::pool().stats();
    /// assert!(stats.bytes <= stats.limit);
    /// ```
    pub fn pool() -> &'static BufferPool {
        &POOL
    }
}

impl Backend for CpuBackend {
    type Buffer = CpuBuffer;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn allocate(&self, dtype: DType, len: usize) -> Result<CpuBuffer> {
        Ok(CpuBuffer::Owned(POOL.try_take(dtype, len)?))
    }

    fn release(&self, buffer: CpuBuffer) {
        if let CpuBuffer::Owned(v) = buffer {
            POOL.put(v);
        }
    }

    fn upload(&self, data: &HostData) -> Result<CpuBuffer> {
        Ok(CpuBuffer::Shared(data.clone()))
    }

    fn download(&self, buffer: CpuBuffer, dtype: DType, len: usize) -> Result<HostData> {
        if buffer.dtype() != dtype || buffer.len() < len {
            return Err(walk::internal(format!(
                "download of {len} {dtype} elements from a buffer of {} {}",
                buffer.len(),
                buffer.dtype()
            )));
        }
        // Owned storage leaves as recycled data: it comes back to the pool when the user drops
        // the last handle on the result.
        Ok(match buffer {
            CpuBuffer::Owned(v) => v.into_recycled_host(len, &POOL),
            CpuBuffer::Shared(d) if d.len() == len => d,
            CpuBuffer::Shared(d) => TypedVec::from_slice(TSlice::of_host(&d).range(0, len))
                .into_recycled_host(len, &POOL),
        })
    }

    fn reduce_side_outputs(&self) -> bool {
        true
    }

    fn row_groups(&self) -> bool {
        true
    }

    fn launch_group(
        &self,
        rows: usize,
        kernels: &[GroupKernel<'_, CpuBuffer>],
        buffers: &mut [CpuBuffer],
        lens: &[usize],
    ) -> Result<()> {
        kernels::group::run(rows, kernels, buffers, lens)
    }

    fn launch(
        &self,
        kernel: &Kernel,
        launch: &Launch<'_>,
        inputs: &[Arg<'_, CpuBuffer>],
        outputs: &mut [CpuBuffer],
    ) -> Result<()> {
        use kernels::*;
        match &kernel.kind {
            KernelKind::Elementwise { program } => {
                elementwise::run(kernel, program, launch, inputs, outputs)
            }
            KernelKind::Reduce { program, op, axes } => {
                reduce::run(kernel, program, *op, axes, launch, inputs, outputs)
            }
            KernelKind::ArgReduce { program, op, axis } => {
                reduce::run_arg(kernel, program, *op, *axis, launch, inputs, outputs)
            }
            KernelKind::MatMul { epilogue } => {
                matmul::run(kernel, epilogue.as_ref(), launch, inputs, outputs, &POOL)
            }
            KernelKind::Take { axis } => gather::take(kernel, *axis, launch, inputs, outputs),
            KernelKind::ScatterAdd { axis } => {
                scatter::scatter_add(kernel, *axis, launch, inputs, outputs)
            }
            KernelKind::TopK { k, indices } => {
                gather::top_k(kernel, *k, indices, launch, inputs, outputs)
            }
            KernelKind::Concat { axis } => gather::concat(kernel, *axis, launch, inputs, outputs),
        }
    }
}
