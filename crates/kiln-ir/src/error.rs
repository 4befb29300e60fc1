//! The one error type of kiln: every failure, at build time or at evaluation, is a variant of
//! [`Error`] whose message names the operation, the shapes/dtypes involved and a fix.
//!
//! Depends on [`crate::shape`] and [`crate::dtype`] for the values it reports.

use crate::{DType, Shape};

/// `Result` with kiln's [`Error`].
///
/// ```
/// fn f() -> kiln_ir::Result<u8> { Ok(1) }
/// assert_eq!(f(), Ok(1));
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when building or evaluating an expression.
///
/// Every variant but [`Error::Verifier`] names the operation the user called: an operation
/// written with others (`mean` with `sum`) renames the errors of its parts
/// ([`Error::with_op`]).
///
/// ```
/// use kiln_ir::{Error, Shape};
/// let e = Error::ShapeMismatch {
///     op: "add",
///     lhs: Shape::from([2, 3]),
///     rhs: Shape::from([4]),
///     hint: "reshape one operand".into(),
/// };
/// assert!(e.to_string().contains("(2, 3)") && e.to_string().contains("(4,)"));
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two operands whose shapes do not fit together (broadcasting, matmul, concat, ...).
    #[error("{op}: shapes {lhs} and {rhs} are incompatible: {hint}")]
    ShapeMismatch {
        /// The operation.
        op: &'static str,
        /// The first operand's shape.
        lhs: Shape,
        /// The second operand's shape.
        rhs: Shape,
        /// What to do about it.
        hint: String,
    },
    /// An axis outside `-rank..rank`.
    #[error("{op}: axis {axis} is out of range for an array of rank {rank}: valid axes are {lo}..{rank} (negative counts from the end)", lo = -(*rank as isize))]
    InvalidAxis {
        /// The operation.
        op: &'static str,
        /// The axis given.
        axis: isize,
        /// The rank of the operand.
        rank: usize,
    },
    /// A dtype the operation does not accept.
    #[error("{op}: dtype {dtype} is not supported: {hint}")]
    UnsupportedDType {
        /// The operation.
        op: &'static str,
        /// The offending dtype.
        dtype: DType,
        /// What to do about it.
        hint: String,
    },
    /// Reading data back as a different type than the array holds.
    #[error("{op}: the array has dtype {actual} but {requested} was requested: {hint}")]
    DTypeMismatch {
        /// The operation.
        op: &'static str,
        /// The array's dtype.
        actual: DType,
        /// The dtype requested.
        requested: DType,
        /// What to do about it.
        hint: String,
    },
    /// A data buffer whose length does not match the shape it is given.
    #[error("{op}: {len} elements cannot have shape {shape} ({expected} elements): pass data of length {expected} or a shape with {len} elements")]
    DataLength {
        /// The operation.
        op: &'static str,
        /// The data's length.
        len: usize,
        /// The shape requested.
        shape: Shape,
        /// The number of elements the shape needs.
        expected: usize,
    },
    /// A reshape whose element count does not match.
    #[error("{op}: cannot reshape an array of shape {from} ({from_numel} elements) into {to}: {hint}", from_numel = from.numel())]
    InvalidReshape {
        /// The operation.
        op: &'static str,
        /// The input's shape.
        from: Shape,
        /// The requested shape, with -1 shown as written.
        to: String,
        /// What to do about it.
        hint: String,
    },
    /// A Rust scalar that does not fit the array's dtype (`int32_array + (1 << 40)`).
    #[error("{op}: the scalar {value} does not fit dtype {dtype}: cast the array to a wider dtype first")]
    ScalarOverflow {
        /// The operation.
        op: &'static str,
        /// The scalar.
        value: String,
        /// The array's dtype.
        dtype: DType,
    },
    /// A bad argument that is not a shape, axis or dtype (a zero step, `k` larger than the
    /// axis, a reduction over an empty axis without identity, ...).
    #[error("{op}: {message}: {hint}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What is wrong.
        message: String,
        /// What to do about it.
        hint: String,
    },
    /// An index outside its axis, found at evaluation (`take`).
    #[error("{op}: index {index} is out of bounds for axis {axis} with size {size} (valid: {lo}..{size})", lo = -(*size as i64))]
    IndexOutOfRange {
        /// The operation.
        op: &'static str,
        /// The offending index.
        index: i64,
        /// The axis indexed.
        axis: usize,
        /// The axis' size.
        size: usize,
    },
    /// Integer division or remainder by zero, found at evaluation.
    #[error("{op}: integer division by zero (dividend {dividend}, dtype {dtype}): mask the zero divisors with `where` or cast to a float dtype to get inf/nan")]
    DivisionByZero {
        /// The operation.
        op: &'static str,
        /// The dividend at the first zero divisor.
        dividend: i64,
        /// The dtype.
        dtype: DType,
    },
    /// An integer raised to a negative integer power, found at evaluation.
    #[error("{op}: integers to negative integer powers are not allowed (base {base}, exponent {exponent}): cast to a float dtype first")]
    NegativeIntegerPower {
        /// The operation.
        op: &'static str,
        /// The base.
        base: i64,
        /// The exponent.
        exponent: i64,
    },
    /// A value was requested as a scalar but the array has several elements.
    #[error("{op}: an array of shape {shape} has {numel} elements, not 1: index or reduce it first", numel = shape.numel())]
    NotAScalar {
        /// The operation.
        op: &'static str,
        /// The array's shape.
        shape: Shape,
    },
    /// A shape with more elements than an array may have ([`crate::MAX_ELEMENTS`]), found
    /// when the expression is built.
    #[error("{op}: an array of shape {shape} would have {elements} elements, more than the {max} an array may have: use a smaller shape", max = crate::MAX_ELEMENTS)]
    TooLarge {
        /// The operation.
        op: &'static str,
        /// The shape asked for.
        shape: Shape,
        /// The dtype asked for.
        dtype: DType,
        /// The exact element count, in decimal.
        elements: String,
    },
    /// Memory for a result could not be allocated, found at evaluation.
    #[error("{op}: cannot allocate {bytes} bytes for {what}: the machine does not have that much memory free; evaluate smaller arrays or fewer at once")]
    OutOfMemory {
        /// The operation.
        op: &'static str,
        /// The bytes asked for.
        bytes: u64,
        /// What the memory was for.
        what: String,
    },
    /// An IR invariant does not hold (a bug in kiln, reported by the verifier).
    #[error("IR verifier: node {node} ({op}): {message}. This is a bug in kiln; please report it")]
    Verifier {
        /// The node index.
        node: usize,
        /// The op's name.
        op: String,
        /// The broken invariant.
        message: String,
    },
}

/// Matches every variant that names the user's operation in an `op: &'static str` field,
/// binding it to `$op`; `Error::Verifier` (a node's op, as a string) goes to `$verifier`.
macro_rules! match_op {
    ($e:expr, $op:ident => $named:expr, $verifier:pat => $v:expr) => {
        match $e {
            Error::ShapeMismatch { op: $op, .. }
            | Error::InvalidAxis { op: $op, .. }
            | Error::UnsupportedDType { op: $op, .. }
            | Error::DTypeMismatch { op: $op, .. }
            | Error::DataLength { op: $op, .. }
            | Error::InvalidReshape { op: $op, .. }
            | Error::ScalarOverflow { op: $op, .. }
            | Error::InvalidArgument { op: $op, .. }
            | Error::IndexOutOfRange { op: $op, .. }
            | Error::DivisionByZero { op: $op, .. }
            | Error::NegativeIntegerPower { op: $op, .. }
            | Error::NotAScalar { op: $op, .. }
            | Error::TooLarge { op: $op, .. }
            | Error::OutOfMemory { op: $op, .. } => $named,
            $verifier => $v,
        }
    };
}

impl Error {
    /// The operation the error names.
    ///
    /// ```
    /// let e = kiln_ir::Error::InvalidAxis { op: "sum", axis: 3, rank: 2 };
    /// assert_eq!(e.op(), "sum");
    /// ```
    pub fn op(&self) -> &str {
        match_op!(self, op => op, Error::Verifier { op, .. } => op)
    }

    /// The same error naming `user_op`: what an operation written with others (`mean` with
    /// `sum`, `softmax` with `max`) returns, so that the message names the call the user
    /// made. A verifier error (a bug in kiln) keeps its node's op.
    ///
    /// ```
    /// let e = kiln_ir::Error::InvalidAxis { op: "sum", axis: 3, rank: 2 };
    /// assert!(e.with_op("mean").to_string().starts_with("mean: axis 3"));
    /// ```
    pub fn with_op(mut self, user_op: &'static str) -> Error {
        match_op!(&mut self, op => *op = user_op, Error::Verifier { .. } => {});
        self
    }
}
