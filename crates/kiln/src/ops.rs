//! Elementwise operations: unary functions, binary functions with numpy promotion and
//! broadcasting, comparisons, `where`, `clip`, `cast`, and the `+ - * / %` operators for
//! owned, borrowed and Rust-scalar operands.
//!
//! Every fallible method `x` has a `try_x` twin returning [`Result`]; `x` panics with the
//! same message (like ndarray's operators). Depends on `kiln-ir`'s builders.

use crate::Array;
use kiln_ir::{build, BinaryOp, DType, Result, Scalar, UnaryOp};

/// Either an array or a *weak* Rust scalar (`2.0`, `1i32`, `true`): the right operand of a
/// binary method. A weak scalar adapts to the array's dtype (`f32_array * 2.0` stays `f32`).
///
/// ```
/// use kiln::{Array, IntoOperand, Operand};
/// assert!(matches!(2.0f64.into_operand(), Operand::Scalar(_)));
/// let a = Array::zeros(&[2], kiln::DType::F32);
/// assert!(matches!((&a).into_operand(), Operand::Array(_)));
/// ```
#[derive(Clone, Debug)]
pub enum Operand {
    /// An array (strong dtype).
    Array(Array),
    /// A weak scalar.
    Scalar(Scalar),
}

/// Conversion into an [`Operand`]; implemented for `Array`, `&Array`, `f32`, `f64`, `i32`,
/// `i64` and `bool`.
///
/// ```
/// use kiln::IntoOperand;
/// let _ = 3i64.into_operand();
/// ```
pub trait IntoOperand {
    /// The operand.
    fn into_operand(self) -> Operand;
}

impl IntoOperand for Array {
    fn into_operand(self) -> Operand {
        Operand::Array(self)
    }
}
impl IntoOperand for &Array {
    fn into_operand(self) -> Operand {
        Operand::Array(self.clone())
    }
}
impl IntoOperand for Operand {
    fn into_operand(self) -> Operand {
        self
    }
}
macro_rules! scalar_operand {
    ($($t:ty => $v:expr),*) => {$(
        impl IntoOperand for $t {
            fn into_operand(self) -> Operand {
                #[allow(clippy::redundant_closure_call)]
                Operand::Scalar(($v)(self))
            }
        }
    )*};
}
scalar_operand!(f32 => |x: f32| Scalar::Float(x as f64), f64 => Scalar::Float,
                i32 => |x: i32| Scalar::Int(x as i64), i64 => Scalar::Int, bool => Scalar::Bool);

impl Array {
    /// Applies a unary op (the general form of `exp`, `sqrt`, ...).
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![4.0f32], &[1])?;
    /// assert_eq!(a.try_unary(kiln::UnaryOp::Sqrt)?.to_vec::<f32>()?, vec![2.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_unary(&self, op: UnaryOp) -> Result<Array> {
        Ok(Array::from_node(build::unary(op, &self.node)?))
    }

    /// Applies a binary op with numpy promotion and broadcasting; `rhs` may be an array or a
    /// weak Rust scalar.
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1.0f32, 2.0], &[2])?;
    /// let b = a.try_binary(kiln::BinaryOp::Pow, 2.0)?;
    /// assert_eq!(b.to_vec::<f32>()?, vec![1.0, 4.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_binary(&self, op: BinaryOp, rhs: impl IntoOperand) -> Result<Array> {
        Ok(Array::from_node(match rhs.into_operand() {
            Operand::Array(b) => build::binary(op, &self.node, &b.node)?,
            Operand::Scalar(s) => build::binary_scalar(op, &self.node, s, false)?,
        }))
    }

    /// `lhs op self` where `lhs` is a weak scalar (`2.0 - x`).
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1.0f32, 2.0], &[2])?;
    /// let b = a.try_binary_rev(kiln::BinaryOp::Sub, 10.0)?;
    /// assert_eq!(b.to_vec::<f32>()?, vec![9.0, 8.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_binary_rev(&self, op: BinaryOp, lhs: impl IntoOperand) -> Result<Array> {
        Ok(Array::from_node(match lhs.into_operand() {
            Operand::Array(a) => build::binary(op, &a.node, &self.node)?,
            Operand::Scalar(s) => build::binary_scalar(op, &self.node, s, true)?,
        }))
    }

    /// Conversion to `dtype`: float→int truncates toward zero and saturates (NaN → 0),
    /// int→int wraps, anything→bool is `x != 0`.
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![-1.7f64, 2.9], &[2])?;
    /// assert_eq!(a.cast(kiln::DType::I32).to_vec::<i32>()?, vec![-1, 2]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn cast(&self, dtype: DType) -> Array {
        Array::from_node(build::cast(&self.node, dtype))
    }

    /// `where(cond, a, b)` elementwise: `a` where `cond` is true (non-zero), else `b`; the
    /// three broadcast together, `a` and `b` promote (scalars are weak).
    ///
    /// ```
    /// use kiln::Array;
    /// let x = Array::from_vec(vec![-1.0f32, 2.0], &[2])?;
    /// let y = Array::try_where(&x.gt(0.0), &x, 0.0)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![0.0, 2.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_where(cond: &Array, a: impl IntoOperand, b: impl IntoOperand) -> Result<Array> {
        let (a, b) = (a.into_operand(), b.into_operand());
        let like = match (&a, &b) {
            (Operand::Array(x), _) | (_, Operand::Array(x)) => Some(x.dtype()),
            _ => None,
        };
        let to_node = |o: Operand, other: &Operand| -> Result<Array> {
            Ok(match o {
                Operand::Array(x) => x,
                Operand::Scalar(s) => {
                    let dt = match (like, other) {
                        (Some(d), Operand::Array(_)) => DType::promote_weak(d, s.kind()),
                        _ => Scalar::default_dtype(s.kind()),
                    };
                    if !s.fits(dt) {
                        return Err(kiln_ir::Error::ScalarOverflow {
                            op: "where",
                            value: s.to_string(),
                            dtype: dt,
                        });
                    }
                    Array::from_node(build::scalar(s, dt))
                }
            })
        };
        let an = to_node(a.clone(), &b)?;
        let bn = to_node(b, &a)?;
        Ok(Array::from_node(build::where_(
            &cond.node, &an.node, &bn.node,
        )?))
    }

    /// Panicking form of [`Array::try_where`].
    ///
    /// ```
    /// use kiln::Array;
    /// let x = Array::from_vec(vec![1i32, -2], &[2])?;
    /// assert_eq!(Array::where_(&x.lt(0), 0, &x).to_vec::<i32>()?, vec![1, 0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn where_(cond: &Array, a: impl IntoOperand, b: impl IntoOperand) -> Array {
        crate::unwrap_or_panic(Self::try_where(cond, a, b))
    }

    /// Limits values to `[lo, hi]` (numpy's `clip`: `minimum(maximum(x, lo), hi)`).
    ///
    /// ```
    /// let x = kiln::Array::from_vec(vec![-2.0f32, 0.5, 3.0], &[3])?;
    /// assert_eq!(x.try_clip(0.0, 1.0)?.to_vec::<f32>()?, vec![0.0, 0.5, 1.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_clip(&self, lo: impl IntoOperand, hi: impl IntoOperand) -> Result<Array> {
        crate::named("clip", || self.try_maximum(lo)?.try_minimum(hi))
    }

    /// Panicking form of [`Array::try_clip`].
    ///
    /// ```
    /// let x = kiln::Array::from_vec(vec![5i64, -5], &[2])?;
    /// assert_eq!(x.clip(-1, 1).to_vec::<i64>()?, vec![1, -1]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn clip(&self, lo: impl IntoOperand, hi: impl IntoOperand) -> Array {
        crate::unwrap_or_panic(self.try_clip(lo, hi))
    }
}

macro_rules! unary_methods {
    ($($name:ident $try:ident $op:ident $doc:literal;)*) => {
        impl Array {
            $(
                #[doc = concat!($doc, "\n\nA `bool` array is an error unless noted (cast it first).\n\n```\nlet x = kiln::Array::from_vec(vec![0.5f32, 2.0], &[2])?;\nlet y = x.", stringify!($try), "()?;\nassert_eq!(y.shape(), &[2]);\n# Ok::<(), kiln::Error>(())\n```")]
                pub fn $try(&self) -> Result<Array> {
                    self.try_unary(UnaryOp::$op)
                }
                #[doc = concat!("Panicking form of [`Array::", stringify!($try), "`].\n\n```\nlet x = kiln::Array::from_vec(vec![0.5f64, 2.0], &[2])?;\nlet y = x.", stringify!($name), "();\n# let _ = y.to_vec::<f64>();\n# Ok::<(), kiln::Error>(())\n```")]
                #[track_caller]
                #[allow(clippy::should_implement_trait)]
                pub fn $name(&self) -> Array {
                    crate::unwrap_or_panic(self.$try())
                }
            )*
        }
    };
}

unary_methods! {
    neg try_neg Neg "Negation (integers wrap).";
    abs try_abs Abs "Absolute value (integers wrap: `abs(i32::MIN) == i32::MIN`, as numpy).";
    sign try_sign Sign "-1, 0 or 1 (NaN stays NaN, ±0 gives +0, as numpy).";
    exp try_exp Exp "`e^x`; integers give `f64`.";
    log try_log Log "Natural logarithm (`log(0) = -inf`, negative → NaN).";
    log1p try_log1p Log1p "`log(1 + x)`, accurate near 0.";
    expm1 try_expm1 Expm1 "`e^x - 1`, accurate near 0.";
    sqrt try_sqrt Sqrt "Square root (negative → NaN).";
    rsqrt try_rsqrt Rsqrt "`1 / sqrt(x)`.";
    square try_square Square "`x * x` (integers wrap).";
    recip try_recip Recip "`1 / x`; integers give `f64` (numpy's `reciprocal` keeps integers).";
    sin try_sin Sin "Sine.";
    cos try_cos Cos "Cosine.";
    tanh try_tanh Tanh "Hyperbolic tangent.";
    sigmoid try_sigmoid Sigmoid "Logistic sigmoid `1 / (1 + e^-x)`.";
    relu try_relu Relu "`max(x, 0)`; NaN stays NaN.";
    floor try_floor Floor "Round toward −∞ (integers and bools unchanged).";
    ceil try_ceil Ceil "Round toward +∞ (integers and bools unchanged).";
    round try_round Round "Round half to even, as `numpy.round` (integers unchanged).";
    isnan try_isnan IsNan "True where NaN (always false for integers and bools).";
    logical_not try_logical_not LogicalNot "True where `x == 0` (any dtype).";
}

macro_rules! binary_methods {
    ($($name:ident $try:ident $op:ident $doc:literal;)*) => {
        impl Array {
            $(
                #[doc = concat!($doc, "\n\nnumpy broadcasting and promotion; `rhs` may be an array or a weak Rust scalar. Errors if the shapes do not broadcast.\n\n```\nlet x = kiln::Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;\nlet y = kiln::Array::from_vec(vec![2.0f32, 0.5], &[2])?;\nlet z = x.", stringify!($try), "(&y)?;\nassert_eq!(z.shape(), &[2, 2]);\nlet w = x.", stringify!($try), "(2.0)?;\nassert_eq!(w.shape(), &[2, 2]);\n# Ok::<(), kiln::Error>(())\n```")]
                pub fn $try(&self, rhs: impl IntoOperand) -> Result<Array> {
                    self.try_binary(BinaryOp::$op, rhs)
                }
                #[doc = concat!("Panicking form of [`Array::", stringify!($try), "`].\n\n# Panics\nIf the shapes do not broadcast or the dtypes do not fit the op.\n\n```\nlet x = kiln::Array::from_vec(vec![1i64, 2, 3], &[3])?;\nlet z = x.", stringify!($name), "(2);\n# let _ = z.shape();\n# Ok::<(), kiln::Error>(())\n```")]
                #[track_caller]
                #[allow(clippy::should_implement_trait)]
                pub fn $name(&self, rhs: impl IntoOperand) -> Array {
                    crate::unwrap_or_panic(self.$try(rhs))
                }
            )*
        }
    };
}

binary_methods! {
    add try_add Add "Elementwise `self + rhs` (bool: logical or; integers wrap).";
    sub try_sub Sub "Elementwise `self - rhs` (integers wrap; bool is an error, as in numpy).";
    mul try_mul Mul "Elementwise `self * rhs` (bool: logical and; integers wrap).";
    div try_div Div "True division `self / rhs`: integers give `f64`, as numpy's `/`.";
    floor_div try_floor_div FloorDiv "numpy's `//`: rounds toward −∞; integer division by zero is an error at evaluation.";
    rem try_rem Rem "numpy's `%`: the result has the sign of `rhs`; integer remainder by zero is an error at evaluation.";
    pow try_pow Pow "`self ** rhs`; an integer to a negative integer power is an error at evaluation.";
    maximum try_maximum Maximum "Elementwise maximum; NaN propagates.";
    minimum try_minimum Minimum "Elementwise minimum; NaN propagates.";
    eq try_eq Eq "`self == rhs` elementwise, as bool.";
    ne try_ne Ne "`self != rhs` elementwise, as bool (NaN != NaN).";
    lt try_lt Lt "`self < rhs` elementwise, as bool.";
    le try_le Le "`self <= rhs` elementwise, as bool.";
    gt try_gt Gt "`self > rhs` elementwise, as bool.";
    ge try_ge Ge "`self >= rhs` elementwise, as bool.";
    logical_and try_logical_and LogicalAnd "Truth of both (non-zero is true), as bool.";
    logical_or try_logical_or LogicalOr "Truth of either (non-zero is true), as bool.";
}

macro_rules! operator {
    ($trait:ident $method:ident $op:ident) => {
        impl<R: IntoOperand> std::ops::$trait<R> for &Array {
            type Output = Array;
            #[track_caller]
            fn $method(self, rhs: R) -> Array {
                crate::unwrap_or_panic(self.try_binary(BinaryOp::$op, rhs))
            }
        }
        impl<R: IntoOperand> std::ops::$trait<R> for Array {
            type Output = Array;
            #[track_caller]
            fn $method(self, rhs: R) -> Array {
                crate::unwrap_or_panic(self.try_binary(BinaryOp::$op, rhs))
            }
        }
        operator!(@rev $trait $method $op f32 f64 i32 i64);
    };
    (@rev $trait:ident $method:ident $op:ident $($t:ty)*) => {$(
        impl std::ops::$trait<&Array> for $t {
            type Output = Array;
            #[track_caller]
            fn $method(self, rhs: &Array) -> Array {
                crate::unwrap_or_panic(rhs.try_binary_rev(BinaryOp::$op, self))
            }
        }
        impl std::ops::$trait<Array> for $t {
            type Output = Array;
            #[track_caller]
            fn $method(self, rhs: Array) -> Array {
                crate::unwrap_or_panic(rhs.try_binary_rev(BinaryOp::$op, self))
            }
        }
    )*};
}

operator!(Add add Add);
operator!(Sub sub Sub);
operator!(Mul mul Mul);
operator!(Div div Div);
operator!(Rem rem Rem);

impl std::ops::Neg for &Array {
    type Output = Array;
    #[track_caller]
    fn neg(self) -> Array {
        Array::neg(self)
    }
}
impl std::ops::Neg for Array {
    type Output = Array;
    #[track_caller]
    fn neg(self) -> Array {
        Array::neg(&self)
    }
}
impl std::ops::Not for &Array {
    type Output = Array;
    /// Logical not (`x == 0`), as bool.
    fn not(self) -> Array {
        self.logical_not()
    }
}
impl std::ops::Not for Array {
    type Output = Array;
    fn not(self) -> Array {
        self.logical_not()
    }
}
