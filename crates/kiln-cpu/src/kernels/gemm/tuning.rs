//! Every constant of the GEMM kernels' choices, in one table, each with its reason: which
//! kernel takes a product (`matmul`'s dispatch, `Gemm::small`, `Gemm::blocked`,
//! `Gemm::parallel`), how the small kernels' forms and the blocked form pack and block,
//! and what scratch a thread keeps.
//! The measurements behind the numbers are in `docs/performance.md` ("Figures behind the CPU
//! kernels' choices") and `docs/performance-log.md`; the per-machine cache blocks are
//! `crate::tune`'s (`CacheBlocks`), not here.
//!
//! Depends on nothing.

// Which kernel takes a product (`super::super::matmul`).

/// Products with fewer columns than this (one AVX-512 vector of `f32`) take the small
/// kernels' transposed and dot-product forms below the parallel threshold: `matrixmultiply`
/// packs both operands and fills few of its register block's columns.
pub(crate) const FEW_COLUMNS: usize = 16;
/// Products with at most this many rows take the small kernels (up to
/// [`SMALL_ROWS_MAX_MACS`]): they never pack the right operand.
pub(crate) const SMALL_ROWS: usize = 16;
/// Bound on `m·k·n` for the few-row products (single-threaded there).
pub(crate) const SMALL_ROWS_MAX_MACS: usize = 1 << 25;
/// Products of any layout up to this `m·k·n` take the small kernels: set-up would dominate.
pub(crate) const SMALL_ANY_MACS: usize = 32 * 32 * 32;
/// Products whose left operand has unit column stride take the small kernels up to this
/// `m·k·n`.
pub(crate) const SMALL_MACS: usize = 64 * 64 * 64;
/// ... or, below [`PAR_GEMM_MACS`], when the right operand takes at most this many bytes:
/// it stays in L1 across the passes over it.
pub(crate) const SMALL_B_BYTES: usize = 32 << 10;
/// Products of at least this many multiply-adds split their rows over the thread team:
/// where waking a second thread starts to pay.
pub(crate) const PAR_GEMM_MACS: usize = 1 << 21;
/// Columns of the products the blocked form admits at least: narrower ones fill too few
/// register blocks to repay the packing.
pub(crate) const BLOCKED_MIN_COLUMNS: usize = 128;
/// Steps (`k`) of the products the blocked form admits at least, for the same reason.
pub(crate) const BLOCKED_MIN_STEPS: usize = 64;
/// Small-kernel products split their rows over the team from this much work
/// (`Gemm::parallel`), about what waking a second thread costs; the MLP step's
/// `relu`-masked hidden-layer gradient is above it.
pub(crate) const PAR_SMALL_WORK: usize = 1 << 20;
/// What one stored element costs in `Gemm::parallel`'s model, in multiply-adds: long stores
/// make a product worth splitting earlier.
pub(crate) const STORE_MACS: usize = 16;
/// Rows per parallel block at least: fewer rows per task pay the team's dispatch more often
/// than they save.
pub(crate) const PAR_GEMM_ROWS: usize = 32;

// The small kernels and the blocked form (`super::broadcast`, `super::blocked`).

/// Elements of each per-thread packing buffer kept after a product at most: a fresh
/// megabyte per product cost its page faults each time, and more than this would hold memory
/// no product of the common sizes needs.
pub(crate) const SCRATCH_KEEP: usize = 1 << 21;
/// Bytes of the left operand's packed panels kept per block of steps at most: the rows are
/// packed once per block of steps in groups this large and read by every block of columns
/// (repacking 12 rows per block of columns was 6–8 % of a 2048³ product).
pub(crate) const A_BLOCK_BYTES: usize = 2 << 20;
/// Products with at least this many rows copy each block of the right operand into panels
/// first when the block is larger than [`PACK_MIN_BYTES`]: every block of rows then reads it
/// contiguously (in place, a 64-column slice of a row-major `b` touches a new page every row
/// or two).
pub(crate) const PACK_ROWS: usize = 128;
/// Blocks of the right operand up to this size are read in place: they stay in L1 across
/// the blocks of rows, and packing them cost more than it saved.
pub(crate) const PACK_MIN_BYTES: usize = 32 << 10;
