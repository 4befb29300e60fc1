//! # kiln-compiler
//!
//! The layer between the IR and the backends. Today it holds the [`Executor`] interface that
//! every backend implements and that the front end calls; the passes (CSE, folding, fusion,
//! memory planning), the backend-neutral plan and the graph cache are built here next, behind
//! the same interface.
//!
//! Depends on `kiln-ir` only; knows nothing of SIMD, WGSL or any backend type.

pub mod backend;
pub mod cache;
pub mod compile;
pub mod engine;
pub mod fuse;
pub mod graph;
pub mod group;
pub mod inspect;
pub mod memory;
pub mod plan;
pub mod rewrite;

pub use backend::{
    eval_prelude, run, run_with, Arg, Backend, GroupArg, GroupKernel, Launch, RunOptions,
    TRANSFER_TARGET,
};
pub use cache::{CacheStats, GraphCache, MissReason, MissRecord};
pub use compile::{compile, compile_for, compile_with_limit, Compiled, Target};
pub use engine::{Engine, DEFAULT_CAPACITY};
pub use graph::{GNode, Graph};
pub use group::RowGroup;
pub use inspect::{KernelReport, Report};
pub use plan::{
    BufferDesc, Donation, Input, Inst, InstOp, Kernel, KernelKind, OutputRef, Plan, Program, Slot,
    Source, Strided, View, ViewOp,
};

use kiln_ir::{HostData, LazyExpr, Result};

/// Something that evaluates a [`LazyExpr`]: a backend, or the reference interpreter.
///
/// Implementations must return one value per entry of `expr.outputs`, in order, each with
/// the output node's dtype and `shape.numel()` elements in row-major order, and must report
/// evaluation errors (bad `take` index, integer division by zero, ...) as
/// [`kiln_ir::Error`] values without panicking.
///
/// ```
/// use kiln_compiler::Executor;
/// use kiln_ir::{build, HostData, LazyExpr, Result, Shape};
///
/// struct Reference;
/// impl Executor for Reference {
///     fn name(&self) -> &'static str { "reference" }
///     fn execute(&self, expr: &LazyExpr) -> Result<Vec<HostData>> {
///         kiln_reference::evaluate(expr)
///     }
/// }
/// let a = build::data(HostData::from(vec![1i32]), Shape::from([1])).unwrap();
/// let out = Reference.execute(&LazyExpr::from_roots(&[&a])).unwrap();
/// assert_eq!(out[0].len(), 1);
/// ```
pub trait Executor: Send + Sync {
    /// A short name for messages (`"cpu"`, `"wgpu"`).
    ///
    /// ```
    /// # use kiln_compiler::Executor;
    /// # struct Nop;
    /// # impl Executor for Nop {
    /// #     fn name(&self) -> &'static str { "nop" }
    /// #     fn execute(&self, _: &kiln_ir::LazyExpr) -> kiln_ir::Result<Vec<kiln_ir::HostData>> { Ok(vec![]) }
    /// # }
    /// let backend: &dyn Executor = &Nop;
    /// assert_eq!(backend.name(), "nop");
    /// ```
    fn name(&self) -> &'static str;
    /// Evaluates every output of `expr`.
    ///
    /// ```
    /// # use kiln_compiler::Executor;
    /// # use kiln_ir::{build, HostData, LazyExpr, Shape, UnaryOp};
    /// # struct Reference;
    /// # impl Executor for Reference {
    /// #     fn name(&self) -> &'static str { "reference" }
    /// #     fn execute(&self, e: &LazyExpr) -> kiln_ir::Result<Vec<HostData>> { kiln_reference::evaluate(e) }
    /// # }
    /// let a = build::data(HostData::from(vec![4.0f64]), Shape::from([1])).unwrap();
    /// let y = build::unary(UnaryOp::Sqrt, &a).unwrap();
    /// let out = Reference.execute(&LazyExpr::from_roots(&[&y])).unwrap();
    /// assert_eq!(out[0].get(0), kiln_ir::Scalar::Float(2.0));
    /// ```
    fn execute(&self, expr: &LazyExpr) -> Result<Vec<HostData>>;
}
