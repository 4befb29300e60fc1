//! # kiln-compiler
//!
//! The layer between the IR and the backends: the passes (rewrites and CSE, the verifier,
//! fusion, the memory plan, row groups) that turn a `LazyExpr` into a backend-neutral
//! [`Plan`], the graph cache and [`Engine`] that compile each graph structure once, and the
//! [`Backend`] interface with the loop that runs a plan's kernels on one ([`run_with`]).
//!
//! Depends on `kiln-ir` only; knows nothing of SIMD, WGSL or any backend type.

pub mod backend;
pub mod cache;
pub mod compile;
pub mod engine;
pub mod fuse;
pub mod group;
pub mod inspect;
pub mod memory;
pub mod plan;
pub mod rewrite;
pub mod target;
pub mod text;

pub use backend::{
    eval_prelude, run, run_with, Arg, Backend, GroupArg, GroupKernel, Launch, RunOptions,
    TRANSFER_TARGET,
};
pub use cache::{CacheStats, GraphCache, MissReason, MissRecord};
pub use compile::{compile, compile_for, compile_with_limit, Compiled};
pub use engine::{Engine, DEFAULT_CAPACITY};
pub use inspect::{KernelReport, Report};
pub use kiln_ir::{ExprNode, Graph};
pub use plan::RowGroup;
pub use plan::{
    BufferDesc, BufferId, Donation, Input, InputId, Inst, InstOp, Kernel, KernelId, KernelKind,
    OutputRef, Plan, Program, RegId, Slot, SlotId, Source, Strided, View, ViewOp,
};
pub use target::Target;
