//! # kiln-cpu
//!
//! The CPU backend: [`CpuBackend`] implements [`kiln_compiler::Backend`], executing the
//! kernels of a compiled [`kiln_compiler::Plan`] on host memory.
//!
//! * **Buffers** ([`CpuBuffer`]) are typed `Vec`s, or caller data shared without a copy
//!   (`upload` wraps the `HostData`, `download` moves the `Vec` out). Released buffers go to a
//!   process-wide [`BufferPool`] (bucketed by dtype and size, bounded in bytes), so a plan run
//!   repeatedly reuses warm memory. Downloaded outputs are `kiln_ir::Recycled` data homed at
//!   that pool: their storage comes back to it when the user drops the last handle, so the
//!   next evaluation of the same size writes warm pages instead of faulting in fresh ones.
//! * **Elementwise programs** run in a numexpr-style blocked interpreter: each instruction is
//!   evaluated over a block of 1024 positions (4 KiB of f32: a program's live registers fit
//!   in L1) into a typed scratch column, reading inputs through their strided views (in place
//!   when contiguous). Float ops run SIMD lane kernels ([`vmath`]: vectorised `exp log tanh
//!   sigmoid sin cos` with documented error bounds) compiled for SSE2, AVX2 + FMA and AVX-512
//!   and picked at run time ([`isa`], `KILN_CPU_ISA`), so a default build uses the CPU's
//!   widest vectors. Spaces of 64K positions or more run on all cores ([`Team`]: the calling
//!   thread and helpers that spin briefly between loops) in chunks fixed by the size alone,
//!   each thread with its own registers.
//! * **Reductions** fold the prologue's blocks into per-output accumulators (`f64` for float
//!   sums, vectorised, Neumaier-compensated for `f64`; wrapping `i64` for integers). Large
//!   full reductions fold fixed chunks into partials merged in chunk order; large row
//!   reductions give each task whole rows; so results never depend on the thread count.
//!   **Matmul** uses `matrixmultiply` (AVX-512 kernels) on the strided views directly, its
//!   rows split over the thread team above ~2M multiply-adds (one team for every kernel), and
//!   for products with at most 16 rows, at most 64³ multiply-adds or a right operand of at
//!   most 64×64 elements its own unpacked register-blocked kernel (`kernels/small_gemm.rs`);
//!   affine epilogues (`x @ w + b`, `w - lr·(xᵀ @ g)`) run inside either. **take**,
//!   **concat** and **top-k** copy through the views.
//! * **Row groups** (`kernels/group.rs`): the compiler marks runs of kernels whose rows are
//!   independent (a row reduction and the kernels that read its result row by row: softmax,
//!   layer norm); they run block of rows by block of rows, every kernel of the group over a
//!   block before the next block, blocks in parallel, so intermediate rows stay in L2.
//! * **Streamed outputs** (`stream.rs`): an elementwise kernel's outputs that nothing of the
//!   plan reads back, 48 MiB or more in all, are written with AVX-512 non-temporal stores
//!   (no read-for-ownership of the destination, inputs left in cache); smaller outputs stay
//!   in cache for whatever reads them next ([`set_stream_min_bytes`]).
//! * **Fresh memory**: large fresh buffers are advised `MADV_HUGEPAGE` before first touch
//!   (fresh 4 KiB page faults cost as much as the work; see `docs/performance-log.md`, 2026-11-21).
//!
//! Every op has the semantics of `kiln-reference` (the oracle): integers wrap, division by
//! zero is an error, `maximum`/`minimum` propagate NaN, casts follow `Scalar::cast`.
//!
//! Depends on `kiln-ir`, `kiln-compiler`, `matrixmultiply` and (Linux) `libc`; the oracle,
//! `kiln-reference`, only in tests.
//!
//! ```
//! use kiln_compiler::{Input, Inst, InstOp, Kernel, KernelKind, Plan, Program, Slot, BufferDesc, OutputRef, Source, View};
//! use kiln_ir::{Bindings, DType, Dim, HostData, UnaryOp};
//! // y = -x over a 1-D array of symbolic length.
//! let shape: kiln_ir::SymShape = [Dim::Sym(0)].into_iter().collect();
//! let program = Program {
//!     insts: vec![
//!         Inst { op: InstOp::Load(0), dtype: DType::F32 },
//!         Inst { op: InstOp::Unary(UnaryOp::Neg, 0), dtype: DType::F32 },
//!     ],
//!     results: [1].into_iter().collect(),
//! };
//! let plan = Plan {
//!     kernels: vec![Kernel {
//!         kind: KernelKind::Elementwise { program },
//!         space: shape.clone(),
//!         inputs: vec![Input { source: Source::Param(0), dtype: DType::F32, view: View::identity(shape.clone()) }],
//!         outputs: [0].into_iter().collect(),
//!     }],
//!     slots: vec![Slot { dtype: DType::F32, shape, buffer: 0 }],
//!     buffers: vec![BufferDesc { dtype: DType::F32, slots: vec![0], output: true, last_use: 0 }],
//!     outputs: vec![OutputRef::Slot(0)],
//!     ..Plan::default()
//! };
//! let bindings = Bindings { params: vec![HostData::from(vec![1.0f32, -2.0]).into()], dims: vec![2], ..Bindings::default() };
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
