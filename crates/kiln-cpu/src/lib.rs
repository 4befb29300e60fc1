//! # kiln-cpu
//!
//! The CPU backend. At this stage of the project it executes expressions with the reference
//! interpreter (`kiln-reference`), so every result is exact to the oracle; the SIMD fused-kernel
//! executor, multithreading and GEMM replace the interpreter behind the same
//! [`kiln_compiler::Executor`] interface without changing the front end.
//!
//! Depends on `kiln-ir`, `kiln-compiler` and `kiln-reference`.

use kiln_compiler::Executor;
use kiln_ir::{HostData, LazyExpr, Result};

/// The CPU backend.
///
/// ```
/// use kiln_compiler::Executor;
/// use kiln_ir::{build, HostData, LazyExpr, Shape};
/// let a = build::data(HostData::from(vec![2.0f64]), Shape::from([1])).unwrap();
/// let out = kiln_cpu::CpuBackend.execute(&LazyExpr::from_roots(&[&a])).unwrap();
/// assert_eq!(out[0].len(), 1);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

impl Executor for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn execute(&self, expr: &LazyExpr) -> Result<Vec<HostData>> {
        kiln_reference::evaluate(expr)
    }
}
