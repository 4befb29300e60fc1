//! The kernels, one module per family. Each takes the kernel, its launch, its inputs and its
//! output buffers, and checks the plan's contract for its kind before touching memory.

pub mod elementwise;
pub mod gather;
pub mod group;
pub mod matmul;
pub mod reduce;
pub mod scatter;
mod small_gemm;
