//! # kiln
//!
//! Lazy, compiled, numpy-like arrays. Every operation on an [`Array`] records a node and
//! returns at once with the result's shape and dtype known (so shape errors surface at the
//! line that caused them); values are computed when needed — [`Array::eval`],
//! [`Array::to_vec`], [`Array::item`], printing — or for several arrays at once with
//! [`eval()`].
//!
//! ```
//! use kiln::{Array, DType};
//!
//! let x = Array::linspace(-1.0, 1.0, 5, DType::F32)?;
//! let y = (&x * &x + 1.0).sqrt();          // lazy: nothing computed yet
//! assert_eq!(y.shape(), &[5]);
//! assert_eq!(y.dtype(), DType::F32);        // the weak scalar keeps f32
//! let m = y.max(None, false);
//! kiln::eval(&[&y, &m])?;                    // one pass for both
//! println!("{y}");                           // [1.4142135 1.118034  1.        1.118034  1.4142135]
//! # Ok::<(), kiln::Error>(())
//! ```
//!
//! Errors are values of one enum, [`Error`]. Operators and the short method names panic on
//! a shape or dtype error (like ndarray's operators); every such method has a `try_` twin
//! returning [`Result`].
//!
//! See the [`numpy_guide`] for a numpy → kiln table.
//!
//! Depends on `kiln-ir`, `kiln-compiler`, `kiln-autodiff`, `kiln-cpu`, (feature `wgpu`) `kiln-wgpu`
//! and (feature `ndarray`) `ndarray`.
#![warn(missing_docs)]

mod array;
mod creation;
mod device;
mod display;
mod engines;
mod eval;
mod grad;
mod index;
#[cfg(feature = "ndarray")]
mod interop;
mod linalg;
mod movement;
pub mod numpy_guide;
mod ops;
mod reduce;

pub use array::Array;
pub use device::{
    default_device, set_default_device, set_strict_placement, strict_placement, Device,
    DeviceMemory, Transfers,
};
pub use eval::{
    cache_stats, clear_cache, eval, eval_donating, eval_donating_on, eval_on, inspect, lower,
    set_cache_capacity, Inspection, DEFAULT_CACHE_CAPACITY,
};
pub use grad::{grad, value_and_grad, vjp};
pub use kiln_compiler::{CacheStats, KernelReport, MissReason, MissRecord, Report};
pub use kiln_ir::build::SliceArg;
pub use kiln_ir::{
    ArgReduceOp, BinaryOp, DType, Element, Error, Foreign, LazyExpr, ReduceOp, Result, Scalar,
    Shared, UnaryOp, MAX_ELEMENTS,
};
pub use movement::IntoSliceArg;
pub use ops::{IntoOperand, Operand};

/// Runs `f`, naming `op` in its build-time error: an operation written with others (`mean`
/// with `sum`) reports the call the user made ([`Error::with_op`]).
pub(crate) fn named<T>(op: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    f().map_err(|e| e.with_op(op))
}

/// Panics with the error's message, reporting the caller's location.
#[track_caller]
pub(crate) fn unwrap_or_panic<T>(r: Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

/// `where(cond, a, b)`: elements of `a` where `cond` is true, else of `b` (see
/// [`Array::try_where`]).
///
/// ```
/// let x = kiln::Array::from_vec(vec![-1.0f64, 3.0], &[2])?;
/// let y = kiln::where_(&x.lt(0.0), 0.0, &x)?;
/// assert_eq!(y.to_vec::<f64>()?, vec![0.0, 3.0]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn where_(cond: &Array, a: impl IntoOperand, b: impl IntoOperand) -> Result<Array> {
    Array::try_where(cond, a, b)
}
