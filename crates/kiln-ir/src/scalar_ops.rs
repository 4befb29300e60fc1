//! The meaning of every elementwise op on one element, written for clarity: what the
//! reference evaluator (`kiln-reference`) applies to every element, and what the backends
//! apply where they compute on the host (the compiler's prelude of scalar arithmetic, the CPU
//! backend's float `//` and `%`). `dtype` is the operands' dtype; results are in full width
//! and rounded to the node's dtype by the caller.
//!
//! Depends on the crate's scalars, op enums and errors only.

use crate::{BinaryOp, DType, Error, Result, Scalar, UnaryOp};

/// `op(x)` for an operand of `dtype`.
///
/// ```
/// use kiln_ir::{DType, Scalar, UnaryOp};
/// assert_eq!(kiln_ir::scalar_ops::unary(UnaryOp::Round, DType::F64, Scalar::Float(2.5)), Scalar::Float(2.0));
/// assert_eq!(kiln_ir::scalar_ops::unary(UnaryOp::Neg, DType::I32, Scalar::Int(i32::MIN as i64)).cast(DType::I32), Scalar::Int(i32::MIN as i64));
/// ```
pub fn unary(op: UnaryOp, dtype: DType, x: Scalar) -> Scalar {
    use UnaryOp::*;
    if op == LogicalNot {
        return Scalar::Bool(!x.as_bool());
    }
    if op == IsNan {
        return Scalar::Bool(matches!(x, Scalar::Float(v) if v.is_nan()));
    }
    if dtype.is_float() {
        let v = x.as_f64();
        return Scalar::Float(match op {
            Neg => -v,
            Abs => v.abs(),
            Sign => {
                if v > 0.0 {
                    1.0
                } else if v < 0.0 {
                    -1.0
                } else if v == 0.0 {
                    0.0 // +0 for both zeros, as numpy
                } else {
                    v // NaN
                }
            }
            Exp => v.exp(),
            Log => v.ln(),
            Log1p => v.ln_1p(),
            Expm1 => v.exp_m1(),
            Sqrt => v.sqrt(),
            Rsqrt => 1.0 / v.sqrt(),
            Square => v * v,
            Recip => 1.0 / v,
            Sin => v.sin(),
            Cos => v.cos(),
            Tanh => v.tanh(),
            Sigmoid => 1.0 / (1.0 + (-v).exp()),
            Relu => {
                if v.is_nan() || v > 0.0 {
                    v // NaN stays NaN
                } else {
                    0.0
                }
            }
            Floor => v.floor(),
            Ceil => v.ceil(),
            Round => v.round_ties_even(),
            IsNan | LogicalNot => unreachable!(),
        });
    }
    // Integers: wrapping arithmetic in i64, truncated to the dtype's width by the caller.
    let v = x.as_i64();
    Scalar::Int(match op {
        Neg => v.wrapping_neg(),
        Abs => v.wrapping_abs(),
        Sign => v.signum(),
        Square => v.wrapping_mul(v),
        Relu => v.max(0),
        Floor | Ceil | Round => v,
        _ => unreachable!("float-valued ops get float operands"),
    })
}

/// numpy's float `floor_divide` (`npy_divmod`): `floor(a / b)` computed so that
/// `a == b * q + r` holds as closely as possible.
///
/// ```
/// assert_eq!(kiln_ir::scalar_ops::float_floor_div(-7.0, 2.0), -4.0);
/// ```
pub fn float_floor_div(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        return a / b;
    }
    let m = a % b;
    let mut div = (a - m) / b;
    if m != 0.0 && ((b < 0.0) != (m < 0.0)) {
        div -= 1.0;
    }
    if div != 0.0 {
        let f = div.floor();
        if div - f > 0.5 {
            f + 1.0
        } else {
            f
        }
    } else {
        (0.0f64).copysign(a / b)
    }
}

/// numpy's float `remainder`: the result has the sign of the divisor.
///
/// ```
/// assert_eq!(kiln_ir::scalar_ops::float_rem(-7.0, 2.0), 1.0);
/// ```
pub fn float_rem(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        return a % b; // NaN
    }
    let m = a % b;
    if m != 0.0 {
        if (b < 0.0) != (m < 0.0) {
            m + b
        } else {
            m
        }
    } else {
        (0.0f64).copysign(b)
    }
}

fn wrapping_pow(mut base: i64, mut exp: u64) -> i64 {
    let mut acc: i64 = 1;
    while exp > 0 {
        if exp & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        exp >>= 1;
    }
    acc
}

fn compare(op: BinaryOp, a: Scalar, b: Scalar) -> bool {
    use std::cmp::Ordering::*;
    let ord = match (a, b) {
        (Scalar::Int(x), Scalar::Int(y)) => Some(x.cmp(&y)),
        (Scalar::Bool(x), Scalar::Bool(y)) => Some(x.cmp(&y)),
        _ => a.as_f64().partial_cmp(&b.as_f64()),
    };
    match (op, ord) {
        (BinaryOp::Ne, None) => true,
        (_, None) => false,
        (BinaryOp::Eq, Some(o)) => o == Equal,
        (BinaryOp::Ne, Some(o)) => o != Equal,
        (BinaryOp::Lt, Some(o)) => o == Less,
        (BinaryOp::Le, Some(o)) => o != Greater,
        (BinaryOp::Gt, Some(o)) => o == Greater,
        (BinaryOp::Ge, Some(o)) => o != Less,
        _ => unreachable!("not a comparison"),
    }
}

/// `op(a, b)` for operands of `dtype`.
///
/// ```
/// use kiln_ir::{BinaryOp, DType, Scalar};
/// assert_eq!(kiln_ir::scalar_ops::binary(BinaryOp::Rem, DType::I64, Scalar::Int(-7), Scalar::Int(3)).unwrap(), Scalar::Int(2));
/// assert!(kiln_ir::scalar_ops::binary(BinaryOp::FloorDiv, DType::I64, Scalar::Int(1), Scalar::Int(0)).is_err());
/// ```
pub fn binary(op: BinaryOp, dtype: DType, a: Scalar, b: Scalar) -> Result<Scalar> {
    use BinaryOp::*;
    if op.is_comparison() {
        return Ok(Scalar::Bool(compare(op, a, b)));
    }
    match op {
        LogicalAnd => return Ok(Scalar::Bool(a.as_bool() && b.as_bool())),
        LogicalOr => return Ok(Scalar::Bool(a.as_bool() || b.as_bool())),
        _ => {}
    }
    if dtype.is_float() {
        let (x, y) = (a.as_f64(), b.as_f64());
        return Ok(Scalar::Float(match op {
            Add => x + y,
            Sub => x - y,
            Mul => x * y,
            Div => x / y,
            FloorDiv => float_floor_div(x, y),
            Rem => float_rem(x, y),
            Pow => x.powf(y),
            Maximum => {
                if x.is_nan() || y.is_nan() {
                    f64::NAN
                } else {
                    x.max(y)
                }
            }
            Minimum => {
                if x.is_nan() || y.is_nan() {
                    f64::NAN
                } else {
                    x.min(y)
                }
            }
            _ => unreachable!(),
        }));
    }
    if dtype == DType::Bool {
        // Reached by `max`/`min` reductions of bool arrays; the builders lower the other bool
        // arithmetic to logical ops.
        return Ok(Scalar::Bool(match op {
            Maximum => a.as_bool() || b.as_bool(),
            Minimum => a.as_bool() && b.as_bool(),
            _ => unreachable!("bool arithmetic is lowered to logical ops by the builders"),
        }));
    }
    let (x, y) = (a.as_i64(), b.as_i64());
    let zero = || Error::DivisionByZero {
        op: op.name(),
        dividend: x,
        dtype,
    };
    Ok(Scalar::Int(match op {
        Add => x.wrapping_add(y),
        Sub => x.wrapping_sub(y),
        Mul => x.wrapping_mul(y),
        FloorDiv => {
            if y == 0 {
                return Err(zero());
            }
            let q = x.wrapping_div(y);
            if x.wrapping_rem(y) != 0 && ((x < 0) != (y < 0)) {
                q - 1
            } else {
                q
            }
        }
        Rem => {
            if y == 0 {
                return Err(zero());
            }
            let r = x.wrapping_rem(y);
            if r != 0 && ((r < 0) != (y < 0)) {
                r + y
            } else {
                r
            }
        }
        Pow => {
            if y < 0 {
                return Err(Error::NegativeIntegerPower {
                    op: "power",
                    base: x,
                    exponent: y,
                });
            }
            wrapping_pow(x, y as u64)
        }
        Maximum => x.max(y),
        Minimum => x.min(y),
        Div => unreachable!("integer division is lowered to float division"),
        _ => unreachable!(),
    }))
}
