//! The op set: what a node of the graph computes, and the typing invariants each op obeys.
//!
//! Ops here are *primitives*: implicit numpy conveniences (promotion, broadcasting, weak
//! scalars, `mean`, `softmax`, ...) are lowered by [`crate::build`] into explicit casts,
//! `BroadcastTo` and these primitives, so every backend implements a small, regular set.
//! Depends on [`crate::dtype`] and [`crate::shape`].

use crate::dtype::{DType, Scalar};
use crate::id::{Id, ParamId};
use crate::shape::Shape;
use smallvec::SmallVec;
use std::fmt;

/// Defines a fieldless enum and its `ALL` constant, every member in declaration order: the
/// list is complete by construction (a member added to the enum is in `ALL`), which the
/// exhaustive tests over every op rely on.
macro_rules! with_all {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $member:ident,)* }) => {
        $(#[$meta])*
        pub enum $name {
            $($(#[$vmeta])* $member,)*
        }

        impl $name {
            /// Every member, in declaration order.
            pub const ALL: [$name; [$(stringify!($member)),*].len()] = [$($name::$member),*];
        }
    };
}

with_all! {
    /// Elementwise functions of one operand.
    ///
    /// ```
    /// assert_eq!(kiln_ir::UnaryOp::Exp.name(), "exp");
    /// ```
    #[allow(missing_docs)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum UnaryOp {
        Neg,
        Abs,
        Sign,
        Exp,
        Log,
        Log1p,
        Expm1,
        Sqrt,
        Rsqrt,
        Square,
        Recip,
        Sin,
        Cos,
        Tanh,
        Sigmoid,
        Relu,
        Floor,
        Ceil,
        /// Round half to even, as `numpy.round`.
        Round,
        IsNan,
        LogicalNot,
    }
}

impl UnaryOp {
    /// The op's name, as in numpy where numpy has it.
    ///
    /// ```
    /// assert_eq!(kiln_ir::UnaryOp::LogicalNot.name(), "logical_not");
    /// ```
    pub fn name(self) -> &'static str {
        use UnaryOp::*;
        match self {
            Neg => "neg",
            Abs => "abs",
            Sign => "sign",
            Exp => "exp",
            Log => "log",
            Log1p => "log1p",
            Expm1 => "expm1",
            Sqrt => "sqrt",
            Rsqrt => "rsqrt",
            Square => "square",
            Recip => "recip",
            Sin => "sin",
            Cos => "cos",
            Tanh => "tanh",
            Sigmoid => "sigmoid",
            Relu => "relu",
            Floor => "floor",
            Ceil => "ceil",
            Round => "round",
            IsNan => "isnan",
            LogicalNot => "logical_not",
        }
    }

    /// True for ops whose result is always a float (integer operands are cast to `f64`
    /// first, as numpy does for `int32`/`int64`).
    ///
    /// ```
    /// assert!(kiln_ir::UnaryOp::Sqrt.is_float_valued());
    /// assert!(!kiln_ir::UnaryOp::Abs.is_float_valued());
    /// ```
    pub fn is_float_valued(self) -> bool {
        use UnaryOp::*;
        matches!(
            self,
            Exp | Log | Log1p | Expm1 | Sqrt | Rsqrt | Recip | Sin | Cos | Tanh | Sigmoid
        )
    }

    /// True for ops whose result is `bool`.
    ///
    /// ```
    /// assert!(kiln_ir::UnaryOp::IsNan.is_predicate());
    /// ```
    pub fn is_predicate(self) -> bool {
        matches!(self, UnaryOp::IsNan | UnaryOp::LogicalNot)
    }
}

with_all! {
    /// Elementwise functions of two operands of equal dtype and shape.
    ///
    /// ```
    /// assert!(kiln_ir::BinaryOp::Lt.is_comparison());
    /// ```
    #[allow(missing_docs)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum BinaryOp {
        Add,
        Sub,
        Mul,
        /// True division on floats. (Integer operands are cast to float by [`crate::build`].)
        Div,
        /// numpy's `floor_divide`: rounds toward negative infinity.
        FloorDiv,
        /// numpy's `remainder`: the result has the sign of the divisor.
        Rem,
        Pow,
        /// Propagates NaN, as `numpy.maximum`.
        Maximum,
        /// Propagates NaN, as `numpy.minimum`.
        Minimum,
        Eq,
        Ne,
        Lt,
        Le,
        Gt,
        Ge,
        LogicalAnd,
        LogicalOr,
    }
}

impl BinaryOp {
    /// Whether the op can raise a value error at evaluation on operands of `dtype`: integer
    /// `//` and `%` by zero ([`crate::Error::DivisionByZero`]) and an integer to a negative
    /// power ([`crate::Error::NegativeIntegerPower`]), as `scalar_ops::binary`
    /// defines them.
    ///
    /// ```
    /// use kiln_ir::{BinaryOp, DType};
    /// assert!(BinaryOp::FloorDiv.can_fail(DType::I32));
    /// assert!(!BinaryOp::FloorDiv.can_fail(DType::F32));
    /// assert!(!BinaryOp::Add.can_fail(DType::I64));
    /// ```
    pub fn can_fail(self, dtype: DType) -> bool {
        use BinaryOp::*;
        let integer = match dtype {
            DType::I32 | DType::I64 => true,
            DType::Bool | DType::F32 | DType::F64 => false,
        };
        match self {
            FloorDiv | Rem | Pow => integer,
            Add | Sub | Mul | Div | Maximum | Minimum | Eq | Ne | Lt | Le | Gt | Ge
            | LogicalAnd | LogicalOr => false,
        }
    }

    /// The op's name, as in numpy.
    ///
    /// ```
    /// assert_eq!(kiln_ir::BinaryOp::FloorDiv.name(), "floor_divide");
    /// ```
    pub fn name(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Add => "add",
            Sub => "subtract",
            Mul => "multiply",
            Div => "divide",
            FloorDiv => "floor_divide",
            Rem => "remainder",
            Pow => "power",
            Maximum => "maximum",
            Minimum => "minimum",
            Eq => "equal",
            Ne => "not_equal",
            Lt => "less",
            Le => "less_equal",
            Gt => "greater",
            Ge => "greater_equal",
            LogicalAnd => "logical_and",
            LogicalOr => "logical_or",
        }
    }

    /// True for `eq ne lt le gt ge`.
    ///
    /// ```
    /// assert!(!kiln_ir::BinaryOp::Add.is_comparison());
    /// ```
    pub fn is_comparison(self) -> bool {
        use BinaryOp::*;
        matches!(self, Eq | Ne | Lt | Le | Gt | Ge)
    }

    /// True for ops whose result is `bool` (comparisons and logical ops).
    ///
    /// ```
    /// assert!(kiln_ir::BinaryOp::LogicalOr.is_predicate());
    /// ```
    pub fn is_predicate(self) -> bool {
        self.is_comparison() || matches!(self, BinaryOp::LogicalAnd | BinaryOp::LogicalOr)
    }
}

/// Reductions with an identity (`Sum`, `Prod`) or without (`Max`, `Min`).
///
/// ```
/// assert_eq!(kiln_ir::ReduceOp::Sum.name(), "sum");
/// ```
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    /// Propagates NaN.
    Max,
    /// Propagates NaN.
    Min,
}

impl ReduceOp {
    /// The op's name.
    ///
    /// ```
    /// assert_eq!(kiln_ir::ReduceOp::Max.name(), "max");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }
}

/// Index-of-extremum reductions along one axis; ties and NaN give the first index.
///
/// ```
/// assert_eq!(kiln_ir::ArgReduceOp::ArgMin.name(), "argmin");
/// ```
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgReduceOp {
    ArgMax,
    ArgMin,
}

impl ArgReduceOp {
    /// The op's name.
    ///
    /// ```
    /// assert_eq!(kiln_ir::ArgReduceOp::ArgMax.name(), "argmax");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            ArgReduceOp::ArgMax => "argmax",
            ArgReduceOp::ArgMin => "argmin",
        }
    }
}

/// Distributions of [`Op::Random`].
///
/// ```
/// let d = kiln_ir::Distribution::Uniform;
/// assert_eq!(format!("{d:?}"), "Uniform");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// Uniform on `[0, 1)`.
    Uniform,
    /// Standard normal.
    Normal,
}

/// Axis lists and permutations.
///
/// ```
/// let axes: kiln_ir::Axes = smallvec::smallvec![0, 2];
/// assert_eq!(axes.len(), 2);
/// ```
pub type Axes = SmallVec<[usize; 4]>;

/// What a node computes. The node's own dtype and shape complete the description (the target
/// of `Cast`, `Reshape`, `BroadcastTo`, the shape of `Iota` and `Random`).
///
/// Values (`Scalar`'s value, `Random`'s seed, `Param` data) are runtime parameters: they never
/// enter the structural hash.
///
/// ```
/// use kiln_ir::{Op, UnaryOp};
/// assert_eq!(Op::Unary(UnaryOp::Exp).name(), "exp");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// The `i`-th input buffer of a [`crate::LazyExpr`].
    Param(ParamId),
    /// A node whose value is held by the node itself (input data or an evaluated result).
    /// Only in the front-end graph; lowered to [`Op::Param`] in a `LazyExpr`.
    Data,
    /// A rank-0 value of the node's dtype.
    Scalar(Scalar),
    /// The index along `axis`, in the node's dtype and shape.
    Iota {
        /// The axis whose index is produced.
        axis: usize,
    },
    /// Counter-based random numbers: element `i` (row-major) is a pure function of
    /// `(seed, i)` (Philox-4x32-10, see [`crate::random`]).
    Random {
        /// The distribution.
        dist: Distribution,
        /// The seed.
        seed: u64,
    },
    /// Elementwise unary function.
    Unary(UnaryOp),
    /// Elementwise binary function of two operands of equal dtype whose shapes broadcast
    /// (numpy's rule) to the node's. In a lowered graph (`LazyExpr::from_trace`) both
    /// operands have the node's shape: the broadcast is an explicit `BroadcastTo` there.
    Binary(BinaryOp),
    /// `where(cond, a, b)`: `cond` is bool; all three have the node's shape.
    Where,
    /// Conversion to the node's dtype. Float to int truncates toward zero and saturates
    /// (NaN gives 0); int to int wraps; anything to bool is `x != 0`.
    Cast,
    /// Same elements, the node's shape, row-major order.
    Reshape,
    /// Axis permutation: output axis `i` is input axis `perm[i]`.
    Permute(Axes),
    /// numpy broadcasting to the node's shape: the input's axes align with the last ones of
    /// the output, each of size 1 or the output's; the missing leading axes and the size-1
    /// ones repeat. (One node for `bias[n] → [m, n]`: `LazyExpr::from_trace` lowers a
    /// rank change to a `Reshape` first, so the compiler sees equal ranks.)
    BroadcastTo,
    /// Strided window: output index `j` on axis `a` reads input index `start[a] + j*step[a]`.
    Slice {
        /// First index per axis.
        start: SmallVec<[i64; 4]>,
        /// Step per axis (non-zero, may be negative).
        step: SmallVec<[i64; 4]>,
    },
    /// Concatenation of all operands along `axis`.
    Concat {
        /// The axis.
        axis: usize,
    },
    /// Reduction over `axes`, keeping them as size-1 dimensions.
    Reduce {
        /// The reduction.
        op: ReduceOp,
        /// Sorted, distinct axes.
        axes: Axes,
    },
    /// Index of the extremum along `axis` (kept as size 1), as `i64`.
    ArgReduce {
        /// The reduction.
        op: ArgReduceOp,
        /// The axis.
        axis: usize,
    },
    /// `[.., m, k] @ [.., k, n]` with equal batch dimensions.
    MatMul,
    /// Gather: output is `a.shape[..axis] + idx.shape + a.shape[axis+1..]`; negative indices
    /// count from the end; out-of-range indices are an evaluation error.
    Take {
        /// The axis gathered along.
        axis: usize,
    },
    /// Scatter-add, the adjoint of `Take`: operands `(updates, indices)`; the result (the
    /// node's shape) is zero except that `updates[.., j.., ..]` is added at
    /// `[.., indices[j..], ..]` along `axis` (repeated indices accumulate). Out-of-range
    /// indices are an evaluation error, negative ones count from the end.
    ScatterAdd {
        /// The axis scattered along.
        axis: usize,
    },
    /// Identity in value; blocks gradients (`kiln::stop_gradient`).
    StopGradient,
    /// The `k` largest values (or their `i64` indices) along the last axis, in descending
    /// order; ties go to the lower index; NaN counts as larger than every number.
    TopK {
        /// How many.
        k: usize,
        /// True for the indices, false for the values.
        indices: bool,
    },
}

impl Op {
    /// A short name for messages and DOT labels.
    ///
    /// ```
    /// assert_eq!(kiln_ir::Op::MatMul.name(), "matmul");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            Op::Param(_) => "param",
            Op::Data => "data",
            Op::Scalar(_) => "scalar",
            Op::Iota { .. } => "iota",
            Op::Random { .. } => "random",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Where => "where",
            Op::Cast => "cast",
            Op::Reshape => "reshape",
            Op::Permute(_) => "permute",
            Op::BroadcastTo => "broadcast_to",
            Op::Slice { .. } => "slice",
            Op::Concat { .. } => "concat",
            Op::Reduce { op, .. } => op.name(),
            Op::ArgReduce { op, .. } => op.name(),
            Op::MatMul => "matmul",
            Op::Take { .. } => "take",
            Op::ScatterAdd { .. } => "scatter_add",
            Op::StopGradient => "stop_gradient",
            Op::TopK { indices: false, .. } => "top_k_values",
            Op::TopK { indices: true, .. } => "top_k_indices",
        }
    }

    /// True for leaves (no operands).
    ///
    /// ```
    /// use kiln_ir::Id;
    /// assert!(kiln_ir::Op::Param(kiln_ir::ParamId::new(0)).is_leaf());
    /// ```
    pub fn is_leaf(&self) -> bool {
        matches!(
            self,
            Op::Param(_) | Op::Data | Op::Scalar(_) | Op::Iota { .. } | Op::Random { .. }
        )
    }

    /// Checks the op's typing invariants for operands `inputs` and the node's declared
    /// `(dtype, shape)`. Used by the verifier after every pass; the builders in
    /// [`crate::build`] establish these invariants.
    ///
    /// ```
    /// use kiln_ir::{Op, BinaryOp, DType, Shape};
    /// let s = Shape::from([2]);
    /// let ok = Op::Binary(BinaryOp::Lt).check(&[(DType::F32, &s), (DType::F32, &s)], DType::Bool, &s);
    /// assert!(ok.is_ok());
    /// ```
    pub fn check(
        &self,
        inputs: &[(DType, &Shape)],
        dtype: DType,
        shape: &Shape,
    ) -> Result<(), String> {
        let arity = |n: usize| -> Result<(), String> {
            if inputs.len() == n {
                Ok(())
            } else {
                Err(format!("expects {n} operands, has {}", inputs.len()))
            }
        };
        let same = |what: &str, a: bool| if a { Ok(()) } else { Err(what.to_string()) };
        match self {
            Op::Param(_) | Op::Data | Op::Random { .. } => arity(0),
            Op::Scalar(_) => {
                arity(0)?;
                same("a scalar has rank 0", shape.rank() == 0)
            }
            Op::Iota { axis } => {
                arity(0)?;
                same("iota axis out of range", *axis < shape.rank())
            }
            Op::Unary(u) => {
                arity(1)?;
                let (d, s) = inputs[0];
                same("unary operand shape differs", s == shape)?;
                let want = if u.is_predicate() { DType::Bool } else { d };
                same("unary result dtype", dtype == want)?;
                same(
                    "float-valued unary op on a non-float operand",
                    !u.is_float_valued() || d.is_float(),
                )
            }
            Op::Binary(b) => {
                arity(2)?;
                let ((da, sa), (db, sb)) = (inputs[0], inputs[1]);
                same("binary operands differ in dtype", da == db)?;
                same(
                    "binary operands do not broadcast to the result",
                    sa.broadcasts_to(shape)
                        && sb.broadcasts_to(shape)
                        && Shape::broadcast("check", sa, sb).is_ok_and(|s| &s == shape),
                )?;
                let want = if b.is_predicate() { DType::Bool } else { da };
                same("binary result dtype", dtype == want)?;
                same(
                    "logical op on non-bool operands",
                    !matches!(b, BinaryOp::LogicalAnd | BinaryOp::LogicalOr) || da == DType::Bool,
                )?;
                same(
                    "div on non-float operands",
                    *b != BinaryOp::Div || da.is_float(),
                )
            }
            Op::Where => {
                arity(3)?;
                same("where condition must be bool", inputs[0].0 == DType::Bool)?;
                same(
                    "where branches differ in dtype",
                    inputs[1].0 == dtype && inputs[2].0 == dtype,
                )?;
                same(
                    "where operand shapes",
                    inputs.iter().all(|(_, s)| *s == shape),
                )
            }
            Op::Cast => {
                arity(1)?;
                same("cast changes shape", inputs[0].1 == shape)
            }
            Op::Reshape => {
                arity(1)?;
                same(
                    "reshape changes element count",
                    inputs[0].1.numel() == shape.numel(),
                )?;
                same("reshape changes dtype", inputs[0].0 == dtype)
            }
            Op::Permute(p) => {
                arity(1)?;
                let s = inputs[0].1;
                let mut seen = vec![false; s.rank()];
                same("permutation length", p.len() == s.rank())?;
                for (i, &a) in p.iter().enumerate() {
                    same(
                        "permutation entry",
                        a < s.rank() && !seen[a] && shape.0[i] == s.0[a],
                    )?;
                    seen[a] = true;
                }
                same("permute changes dtype", inputs[0].0 == dtype)
            }
            Op::BroadcastTo => {
                arity(1)?;
                let s = inputs[0].1;
                same("broadcast_to target", s.broadcasts_to(shape))
            }
            Op::Slice { start, step } => {
                arity(1)?;
                let s = inputs[0].1;
                same(
                    "slice rank",
                    start.len() == s.rank() && step.len() == s.rank() && shape.rank() == s.rank(),
                )?;
                for a in 0..s.rank() {
                    let n = shape.0[a] as i64;
                    if n > 0 {
                        let last = start[a] + (n - 1) * step[a];
                        same(
                            "slice window out of bounds",
                            step[a] != 0
                                && start[a] >= 0
                                && last >= 0
                                && (start[a].max(last) as usize) < s.0[a],
                        )?;
                    }
                }
                Ok(())
            }
            Op::Concat { axis } => {
                same("concat needs operands", !inputs.is_empty())?;
                let mut total = 0;
                for (d, s) in inputs {
                    same("concat dtype", *d == dtype)?;
                    same(
                        "concat rank",
                        s.rank() == shape.rank() && *axis < shape.rank(),
                    )?;
                    for a in 0..s.rank() {
                        same("concat dims", a == *axis || s.0[a] == shape.0[a])?;
                    }
                    total += s.0[*axis];
                }
                same("concat length", total == shape.0[*axis])
            }
            Op::Reduce { axes, .. } => {
                arity(1)?;
                let s = inputs[0].1;
                same("reduce rank", s.rank() == shape.rank())?;
                for a in 0..s.rank() {
                    let want = if axes.contains(&a) { 1 } else { s.0[a] };
                    same("reduce shape", shape.0[a] == want)?;
                }
                Ok(())
            }
            Op::ArgReduce { axis, .. } => {
                arity(1)?;
                let s = inputs[0].1;
                same("argreduce dtype", dtype == DType::I64)?;
                same("argreduce axis", *axis < s.rank() && s.0[*axis] > 0)?;
                let mut want = s.clone();
                want.0[*axis] = 1;
                same("argreduce shape", want == *shape)
            }
            Op::MatMul => {
                arity(2)?;
                let ((da, a), (db, b)) = (inputs[0], inputs[1]);
                same("matmul dtypes", da == db && da == dtype)?;
                let r = a.rank();
                same("matmul ranks", r >= 2 && b.rank() == r && shape.rank() == r)?;
                same(
                    "matmul batch dims",
                    a.0[..r - 2] == b.0[..r - 2] && a.0[..r - 2] == shape.0[..r - 2],
                )?;
                same("matmul inner dims", a.0[r - 1] == b.0[r - 2])?;
                same(
                    "matmul result dims",
                    shape.0[r - 2] == a.0[r - 2] && shape.0[r - 1] == b.0[r - 1],
                )
            }
            Op::Take { axis } => {
                arity(2)?;
                let ((da, a), (di, i)) = (inputs[0], inputs[1]);
                same("take dtype", da == dtype && di.is_int())?;
                same("take axis", *axis < a.rank())?;
                let mut want: Vec<usize> = a.0[..*axis].to_vec();
                want.extend_from_slice(i.dims());
                want.extend_from_slice(&a.0[axis + 1..]);
                same("take shape", shape.dims() == &want[..])
            }
            Op::ScatterAdd { axis } => {
                arity(2)?;
                let ((du, u), (di, i)) = (inputs[0], inputs[1]);
                same("scatter_add dtype", du == dtype && di.is_int())?;
                same("scatter_add axis", *axis < shape.rank())?;
                let mut want: Vec<usize> = shape.0[..*axis].to_vec();
                want.extend_from_slice(i.dims());
                want.extend_from_slice(&shape.0[axis + 1..]);
                same("scatter_add updates shape", u.dims() == &want[..])
            }
            Op::StopGradient => {
                arity(1)?;
                same(
                    "stop_gradient changes type",
                    inputs[0].0 == dtype && inputs[0].1 == shape,
                )
            }
            Op::TopK { k, indices } => {
                arity(1)?;
                let (d, s) = inputs[0];
                let r = s.rank();
                same(
                    "top_k rank",
                    r >= 1 && shape.rank() == r && *k <= s.0[r - 1],
                )?;
                same(
                    "top_k shape",
                    shape.0[..r - 1] == s.0[..r - 1] && shape.0[r - 1] == *k,
                )?;
                same(
                    "top_k dtype",
                    dtype == if *indices { DType::I64 } else { d },
                )
            }
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Param(i) => write!(f, "param {}", i.index()),
            Op::Scalar(s) => write!(f, "scalar {s}"),
            Op::Iota { axis } => write!(f, "iota axis={axis}"),
            Op::Random { dist, .. } => write!(f, "random {dist:?}"),
            Op::Permute(p) => write!(f, "permute {:?}", &p[..]),
            Op::Slice { start, step } => {
                write!(f, "slice start={:?} step={:?}", &start[..], &step[..])
            }
            Op::Concat { axis } => write!(f, "concat axis={axis}"),
            Op::Reduce { op, axes } => write!(f, "{} axes={:?}", op.name(), &axes[..]),
            Op::ArgReduce { op, axis } => write!(f, "{} axis={axis}", op.name()),
            Op::Take { axis } => write!(f, "take axis={axis}"),
            Op::ScatterAdd { axis } => write!(f, "scatter_add axis={axis}"),
            Op::TopK { k, .. } => write!(f, "{} k={k}", self.name()),
            other => f.write_str(other.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{BinaryOp, UnaryOp};

    /// `ALL` is made with the enum (`with_all!`): every member once, named apart (each
    /// `name` is an exhaustive `match`, so a new member must get one).
    #[test]
    fn all_lists_every_member_once() {
        let unary: Vec<&str> = UnaryOp::ALL.iter().map(|op| op.name()).collect();
        let binary: Vec<&str> = BinaryOp::ALL.iter().map(|op| op.name()).collect();
        for names in [&unary, &binary] {
            let mut sorted = names.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), names.len(), "{names:?}");
        }
        assert_eq!((unary.len(), binary.len()), (21, 17));
        assert_eq!(UnaryOp::ALL[0], UnaryOp::Neg);
        assert_eq!(BinaryOp::ALL[16], BinaryOp::LogicalOr);
    }
}
