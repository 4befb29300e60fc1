//! The kernels, one module per family. Each takes the kernel, its launch, its inputs and its
//! output buffers, and checks the plan's contract for its kind before touching memory.
//!
//! Depends on the rest of the crate; nothing outside it but kiln-compiler's plan types and `kiln-ir`.

pub mod elementwise;
pub mod gather;
mod gemm;
pub mod group;
pub mod matmul;
pub mod reduce;
pub mod scatter;
