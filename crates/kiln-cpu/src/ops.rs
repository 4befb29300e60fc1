//! The elementwise ops over typed columns, with the semantics of `kiln_ir::scalar_ops::{unary,
//! binary}` (the oracle's): floats compute at their own precision (except `floor_divide`/`remainder`, which
//! run numpy's algorithm in `f64` and round, as the oracle does), integers wrap, integer
//! division by zero and negative integer powers are errors naming the first offending
//! element.
//!
//! Each op is one `match` on the op and dtype outside a tight loop over the column, so the
//! loops are plain slice maps that the compiler can vectorise.
//!
//! Depends on [`crate::typed`] and `kiln-ir`.

use crate::typed::{copy_cast, with_variant, Elem, TSlice, TSliceMut};
use kiln_ir::{BinaryOp, DType, Error, Result, UnaryOp};
use std::ops::{Add, Div, Mul, Neg, Sub};

/// Float element types.
pub trait Float:
    Elem
    + Neg<Output = Self>
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// NaN.
    const NAN: Self;
    /// -inf.
    const NEG_INF: Self;
    /// +inf.
    const INF: Self;
    /// Widening.
    fn to_f64(self) -> f64;
    /// |x|.
    fn abs(self) -> Self;
    /// e^x.
    fn exp(self) -> Self;
    /// ln x.
    fn ln(self) -> Self;
    /// ln(1 + x).
    fn ln_1p(self) -> Self;
    /// e^x - 1.
    fn exp_m1(self) -> Self;
    /// √x.
    fn sqrt(self) -> Self;
    /// sin x.
    fn sin(self) -> Self;
    /// cos x.
    fn cos(self) -> Self;
    /// tanh x.
    fn tanh(self) -> Self;
    /// ⌊x⌋.
    fn floor(self) -> Self;
    /// ⌈x⌉.
    fn ceil(self) -> Self;
    /// Round half to even.
    fn round_even(self) -> Self;
    /// x^y.
    fn powf(self, y: Self) -> Self;
    /// IEEE max (NaN handled by the caller).
    fn fmax(self, y: Self) -> Self;
    /// IEEE min (NaN handled by the caller).
    fn fmin(self, y: Self) -> Self;
    /// The maximum (`max`) or minimum of `xs`, NaN-propagating (see
    /// [`crate::vmath::extremum_f32`]).
    fn extremum(xs: &[Self], max: bool) -> Self;
    /// `acc[i]` ← the maximum (`max`) or minimum of `acc[i]` and `xs[i]`, NaN-propagating
    /// (see [`crate::vmath`]'s `accumulate_max_f32`).
    fn accumulate_extremum(acc: &mut [Self], xs: &[Self], max: bool);
}

macro_rules! float {
    ($t:ident, $extremum:path, $acc_max:path, $acc_min:path) => {
        impl Float for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NAN: Self = $t::NAN;
            const NEG_INF: Self = $t::NEG_INFINITY;
            const INF: Self = $t::INFINITY;
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn abs(self) -> Self {
                $t::abs(self)
            }
            #[inline(always)]
            fn exp(self) -> Self {
                $t::exp(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                $t::ln(self)
            }
            #[inline(always)]
            fn ln_1p(self) -> Self {
                $t::ln_1p(self)
            }
            #[inline(always)]
            fn exp_m1(self) -> Self {
                $t::exp_m1(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                $t::sqrt(self)
            }
            #[inline(always)]
            fn sin(self) -> Self {
                $t::sin(self)
            }
            #[inline(always)]
            fn cos(self) -> Self {
                $t::cos(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                $t::tanh(self)
            }
            #[inline(always)]
            fn floor(self) -> Self {
                $t::floor(self)
            }
            #[inline(always)]
            fn ceil(self) -> Self {
                $t::ceil(self)
            }
            #[inline(always)]
            fn round_even(self) -> Self {
                $t::round_ties_even(self)
            }
            #[inline(always)]
            fn powf(self, y: Self) -> Self {
                $t::powf(self, y)
            }
            #[inline(always)]
            fn fmax(self, y: Self) -> Self {
                $t::max(self, y)
            }
            #[inline(always)]
            fn fmin(self, y: Self) -> Self {
                $t::min(self, y)
            }
            #[inline(always)]
            fn extremum(xs: &[Self], max: bool) -> Self {
                $extremum(xs, max)
            }
            #[inline(always)]
            fn accumulate_extremum(acc: &mut [Self], xs: &[Self], max: bool) {
                if max {
                    $acc_max(acc, xs)
                } else {
                    $acc_min(acc, xs)
                }
            }
        }
    };
}
float!(
    f32,
    crate::vmath::extremum_f32,
    crate::vmath::accumulate_max_f32,
    crate::vmath::accumulate_min_f32
);
float!(
    f64,
    crate::vmath::extremum_f64,
    crate::vmath::accumulate_max_f64,
    crate::vmath::accumulate_min_f64
);

/// Integer element types.
pub trait Int: Elem + Ord {
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// Smallest value.
    const MIN: Self;
    /// Largest value.
    const MAX: Self;
    /// Widening.
    fn to_i64(self) -> i64;
    /// Wrapping +.
    fn wadd(self, y: Self) -> Self;
    /// Wrapping -.
    fn wsub(self, y: Self) -> Self;
    /// Wrapping *.
    fn wmul(self, y: Self) -> Self;
    /// Wrapping truncating division.
    fn wdiv(self, y: Self) -> Self;
    /// Wrapping truncating remainder.
    fn wrem(self, y: Self) -> Self;
    /// Wrapping negation.
    fn wneg(self) -> Self;
    /// Wrapping absolute value.
    fn wabs(self) -> Self;
    /// -1, 0 or 1.
    fn sign(self) -> Self;
}

macro_rules! int {
    ($t:ident) => {
        impl Int for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const MIN: Self = $t::MIN;
            const MAX: Self = $t::MAX;
            #[inline(always)]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline(always)]
            fn wadd(self, y: Self) -> Self {
                self.wrapping_add(y)
            }
            #[inline(always)]
            fn wsub(self, y: Self) -> Self {
                self.wrapping_sub(y)
            }
            #[inline(always)]
            fn wmul(self, y: Self) -> Self {
                self.wrapping_mul(y)
            }
            #[inline(always)]
            fn wdiv(self, y: Self) -> Self {
                self.wrapping_div(y)
            }
            #[inline(always)]
            fn wrem(self, y: Self) -> Self {
                self.wrapping_rem(y)
            }
            #[inline(always)]
            fn wneg(self) -> Self {
                self.wrapping_neg()
            }
            #[inline(always)]
            fn wabs(self) -> Self {
                self.wrapping_abs()
            }
            #[inline(always)]
            fn sign(self) -> Self {
                self.signum()
            }
        }
    };
}
int!(i32);
int!(i64);

#[inline(always)]
fn map<T: Copy, U>(x: &[T], o: &mut [U], f: impl Fn(T) -> U) {
    for (o, &a) in o.iter_mut().zip(x) {
        *o = f(a);
    }
}

#[inline(always)]
fn zip_map<T: Copy, U>(x: &[T], y: &[T], o: &mut [U], f: impl Fn(T, T) -> U) {
    for ((o, &a), &b) in o.iter_mut().zip(x).zip(y) {
        *o = f(a, b);
    }
}

/// Whether the lane kernels of [`crate::vmath`] run (every level but `scalar`).
#[inline]
fn lanes() -> bool {
    crate::simd::isa() >= crate::simd::Isa::Sse2
}

/// The first `n` elements of a destination (a register or an output block) of type `T`.
#[inline]
pub fn out_mut<T: Elem>(out: TSliceMut<'_>, n: usize) -> &mut [T] {
    let dt = out.dtype();
    match T::slice_mut(out) {
        Some(o) => &mut o[..n],
        None => panic!("kiln-cpu: expected {} storage, found {dt}", T::DTYPE),
    }
}

/// The dtype `op` produces for an operand of `dtype`.
pub fn unary_dtype(op: UnaryOp, dtype: DType) -> DType {
    if op.is_predicate() {
        DType::Bool
    } else {
        dtype
    }
}

/// The dtype `op` produces for operands of `dtype`.
pub fn binary_dtype(op: BinaryOp, dtype: DType) -> DType {
    if op.is_predicate() {
        DType::Bool
    } else {
        dtype
    }
}

fn unsupported(op: &'static str, dtype: DType) -> Error {
    Error::UnsupportedDType {
        op,
        dtype,
        hint: "the plan applies this op to a dtype it is not defined for (a kiln bug: the builders cast first)".into(),
    }
}

/// `out[..n] = op(x)`; `out` has [`unary_dtype`].
pub fn unary(op: UnaryOp, x: TSlice<'_>, out: TSliceMut<'_>) -> Result<()> {
    let n = x.len();
    match op {
        UnaryOp::IsNan => {
            let o = out_mut::<bool>(out, n);
            match x {
                TSlice::F32(v) => map(v, o, |a| a.is_nan()),
                TSlice::F64(v) => map(v, o, |a| a.is_nan()),
                _ => o.fill(false),
            }
        }
        UnaryOp::LogicalNot => {
            let o = out_mut::<bool>(out, n);
            with_variant!(x, TSlice, v => map(v, o, |a| !crate::typed::Conv::<bool>::conv(a)))
        }
        _ => match x {
            TSlice::F32(v) => {
                let o = out_mut(out, n);
                if !(lanes() && crate::vmath::unary_f32(op, v, o)) {
                    unary_float(op, v, o)
                }
            }
            TSlice::F64(v) => {
                let o = out_mut(out, n);
                if !(lanes() && crate::vmath::unary_f64(op, v, o)) {
                    unary_float(op, v, o)
                }
            }
            TSlice::I32(v) => unary_int(op, v, out_mut(out, n))?,
            TSlice::I64(v) => unary_int(op, v, out_mut(out, n))?,
            TSlice::Bool(v) => {
                use UnaryOp::*;
                match op {
                    // Integer semantics of 0/1, converted back to bool: all identities.
                    Neg | Abs | Sign | Square | Relu | Floor | Ceil | Round => {
                        out_mut(out, n).copy_from_slice(v)
                    }
                    _ => return Err(unsupported(op.name(), DType::Bool)),
                }
            }
        },
    }
    Ok(())
}

fn unary_float<T: Float>(op: UnaryOp, x: &[T], o: &mut [T]) {
    use UnaryOp::*;
    match op {
        Neg => map(x, o, |a| -a),
        Abs => map(x, o, |a| a.abs()),
        Sign => map(x, o, |a| {
            if a > T::ZERO {
                T::ONE
            } else if a < T::ZERO {
                -T::ONE
            } else if a == T::ZERO {
                T::ZERO // +0 for both zeros, as numpy
            } else {
                a // NaN
            }
        }),
        Exp => map(x, o, |a| a.exp()),
        Log => map(x, o, |a| a.ln()),
        Log1p => map(x, o, |a| a.ln_1p()),
        Expm1 => map(x, o, |a| a.exp_m1()),
        Sqrt => map(x, o, |a| a.sqrt()),
        Rsqrt => map(x, o, |a| T::ONE / a.sqrt()),
        Square => map(x, o, |a| a * a),
        Recip => map(x, o, |a| T::ONE / a),
        Sin => map(x, o, |a| a.sin()),
        Cos => map(x, o, |a| a.cos()),
        Tanh => map(x, o, |a| a.tanh()),
        Sigmoid => map(x, o, |a| T::ONE / (T::ONE + (-a).exp())),
        Relu => map(x, o, |a| {
            if a.is_nan() || a > T::ZERO {
                a
            } else {
                T::ZERO
            }
        }),
        Floor => map(x, o, |a| a.floor()),
        Ceil => map(x, o, |a| a.ceil()),
        Round => map(x, o, |a| a.round_even()),
        IsNan | LogicalNot => unreachable!("predicates are handled by `unary`"),
    }
}

fn unary_int<T: Int>(op: UnaryOp, x: &[T], o: &mut [T]) -> Result<()> {
    use UnaryOp::*;
    match op {
        Neg => map(x, o, |a| a.wneg()),
        Abs => map(x, o, |a| a.wabs()),
        Sign => map(x, o, |a| a.sign()),
        Square => map(x, o, |a| a.wmul(a)),
        Relu => map(x, o, |a| a.max(T::ZERO)),
        Floor | Ceil | Round => o.copy_from_slice(x),
        _ => return Err(unsupported(op.name(), T::DTYPE)),
    }
    Ok(())
}

pub use kiln_ir::scalar_ops::{float_floor_div, float_rem};

/// `out[..n] = op(a, b)`; `out` has [`binary_dtype`]. `a` and `b` have equal dtypes (logical
/// ops accept any).
pub fn binary(op: BinaryOp, a: TSlice<'_>, b: TSlice<'_>, out: TSliceMut<'_>) -> Result<()> {
    use BinaryOp::*;
    let n = a.len();
    debug_assert_eq!(n, b.len());
    if matches!(op, LogicalAnd | LogicalOr) {
        let mut ta = vec![false; 0];
        let mut tb = vec![false; 0];
        let a = as_bools(a, &mut ta);
        let b = as_bools(b, &mut tb);
        let o = out_mut::<bool>(out, n);
        match op {
            LogicalAnd => zip_map(a, b, o, |x, y| x && y),
            _ => zip_map(a, b, o, |x, y| x || y),
        }
        return Ok(());
    }
    if a.dtype() != b.dtype() {
        return Err(crate::walk::internal(format!(
            "{}: operands of dtypes {} and {}",
            op.name(),
            a.dtype(),
            b.dtype()
        )));
    }
    if op.is_comparison() {
        let o = out_mut::<bool>(out, n);
        match (a, b) {
            (TSlice::Bool(x), TSlice::Bool(y)) => compare(op, x, y, o),
            (TSlice::I32(x), TSlice::I32(y)) if lanes() => {
                crate::vmath::compare_i32(op, x, y, o);
            }
            (TSlice::I64(x), TSlice::I64(y)) if lanes() => {
                crate::vmath::compare_i64(op, x, y, o);
            }
            (TSlice::F32(x), TSlice::F32(y)) if lanes() => {
                crate::vmath::compare_f32(op, x, y, o);
            }
            (TSlice::F64(x), TSlice::F64(y)) if lanes() => {
                crate::vmath::compare_f64(op, x, y, o);
            }
            (TSlice::I32(x), TSlice::I32(y)) => compare(op, x, y, o),
            (TSlice::I64(x), TSlice::I64(y)) => compare(op, x, y, o),
            (TSlice::F32(x), TSlice::F32(y)) => compare(op, x, y, o),
            (TSlice::F64(x), TSlice::F64(y)) => compare(op, x, y, o),
            _ => unreachable!("equal dtypes"),
        }
        return Ok(());
    }
    match (a, b) {
        (TSlice::F32(x), TSlice::F32(y)) => {
            let o = out_mut(out, n);
            if lanes() && crate::vmath::binary_f32(op, x, y, o) {
                return Ok(());
            }
            binary_float(op, x, y, o)
        }
        (TSlice::F64(x), TSlice::F64(y)) => {
            let o = out_mut(out, n);
            if lanes() && crate::vmath::binary_f64(op, x, y, o) {
                return Ok(());
            }
            binary_float(op, x, y, o)
        }
        (TSlice::I32(x), TSlice::I32(y)) => binary_int(op, x, y, out_mut(out, n)),
        (TSlice::I64(x), TSlice::I64(y)) => binary_int(op, x, y, out_mut(out, n)),
        (TSlice::Bool(x), TSlice::Bool(y)) => {
            let o = out_mut::<bool>(out, n);
            match op {
                Maximum => zip_map(x, y, o, |p, q| p || q),
                Minimum => zip_map(x, y, o, |p, q| p && q),
                _ => return Err(unsupported(op.name(), DType::Bool)),
            }
            Ok(())
        }
        _ => unreachable!("equal dtypes"),
    }
}

/// Whether [`binary2`] evaluates `second(first(..), ..)` for operands of `dtype`.
pub fn fuses(first: BinaryOp, second: BinaryOp, dtype: DType) -> bool {
    use BinaryOp::*;
    let arith = |op| matches!(op, Add | Sub | Mul | Div);
    arith(first) && arith(second) && matches!(dtype, DType::F32 | DType::F64)
}

/// Whether [`binary_uniform`] computes `op` over `dtype` (float `+ - * /`).
pub fn uniform_ok(op: BinaryOp, dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F64)
        && matches!(
            op,
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div
        )
}

/// Whether [`unary_of_uniform`] computes `u(op(x, s))` for `dtype` at the current ISA level
/// (the lane kernels run; `f32`; `u` in `exp log tanh sigmoid`, `op` in `+ - *`).
pub fn unary_of_uniform_ok(u: UnaryOp, op: BinaryOp, dtype: DType) -> bool {
    dtype == DType::F32
        && lanes()
        && matches!(
            u,
            UnaryOp::Exp | UnaryOp::Log | UnaryOp::Tanh | UnaryOp::Sigmoid
        )
        && matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul)
}

/// `out[i] = u(op(x[i], s[0]))`, or `u(op(s[0], x[i]))` when `left`, in one pass for what
/// [`unary_of_uniform_ok`] accepts: equal bit for bit to [`binary_uniform`] then [`unary`].
pub fn unary_of_uniform(
    u: UnaryOp,
    op: BinaryOp,
    left: bool,
    x: TSlice<'_>,
    s: TSlice<'_>,
    out: TSliceMut<'_>,
) -> Result<()> {
    let n = x.len();
    let done = match (x, s) {
        (TSlice::F32(x), TSlice::F32(&[s, ..])) if lanes() => {
            crate::vmath::unary_of_uniform_f32(u, op, left, x, s, out_mut(out, n))
        }
        _ => false,
    };
    if done {
        Ok(())
    } else {
        Err(crate::walk::internal(format!(
            "{} of {} with a uniform operand of {} elements: not supported for these operands",
            u.name(),
            op.name(),
            s.len()
        )))
    }
}

/// [`binary_uniform`] over `out` in place (`out[i] = op(out[i], s[0])`, or `op(s[0], out[i])`
/// when `left`): the same roundings.
pub fn binary_uniform_in_place(
    op: BinaryOp,
    left: bool,
    out: TSliceMut<'_>,
    s: TSlice<'_>,
) -> Result<()> {
    let done = match (out, s) {
        (TSliceMut::F32(o), TSlice::F32(&[s, ..])) => {
            crate::vmath::binary_uniform_in_place_f32(op, left, o, s)
        }
        (TSliceMut::F64(o), TSlice::F64(&[s, ..])) => {
            crate::vmath::binary_uniform_in_place_f64(op, left, o, s)
        }
        _ => false,
    };
    if done {
        Ok(())
    } else {
        Err(crate::walk::internal(format!(
            "{} in place with a uniform operand of {} elements: not supported for these operands",
            op.name(),
            s.len()
        )))
    }
}

/// `out[i] = op(x[i], s[0])`, or `op(s[0], x[i])` when `left`, for the ops and dtypes of
/// [`uniform_ok`]: a binary op whose other operand is one value over the block (a per-row
/// broadcast value), with the same roundings as [`binary`] over the repeated value.
pub fn binary_uniform(
    op: BinaryOp,
    left: bool,
    x: TSlice<'_>,
    s: TSlice<'_>,
    out: TSliceMut<'_>,
) -> Result<()> {
    let n = x.len();
    let done = match (x, s) {
        (TSlice::F32(x), TSlice::F32(&[s, ..])) => {
            crate::vmath::binary_uniform_f32(op, left, x, s, out_mut(out, n))
        }
        (TSlice::F64(x), TSlice::F64(&[s, ..])) => {
            crate::vmath::binary_uniform_f64(op, left, x, s, out_mut(out, n))
        }
        _ => false,
    };
    if done {
        Ok(())
    } else {
        Err(crate::walk::internal(format!(
            "{} with a uniform operand of {} elements: not supported for these operands",
            op.name(),
            s.len()
        )))
    }
}

/// `out = second(first(x, y), z)` (`left`) or `second(z, first(x, y))` in one pass, for
/// ops and a dtype [`fuses`] accepts; equal bit for bit to two [`binary`] calls.
pub fn binary2(
    (first, second, left): (BinaryOp, BinaryOp, bool),
    x: TSlice<'_>,
    y: TSlice<'_>,
    z: TSlice<'_>,
    out: TSliceMut<'_>,
) -> Result<()> {
    let n = x.len();
    let done = match (x, y, z) {
        (TSlice::F32(x), TSlice::F32(y), TSlice::F32(z)) => {
            crate::vmath::binary2_f32(first, second, left, x, y, z, out_mut(out, n))
        }
        (TSlice::F64(x), TSlice::F64(y), TSlice::F64(z)) => {
            crate::vmath::binary2_f64(first, second, left, x, y, z, out_mut(out, n))
        }
        _ => false,
    };
    if done {
        Ok(())
    } else {
        Err(crate::walk::internal(format!(
            "fused {} then {}: not a fused pair for these operands",
            first.name(),
            second.name()
        )))
    }
}

/// Whether [`compare_select`] computes `where(x <op> y, a, b)` with comparison operands of
/// dtype `cmp` and branches of dtype `dtype` (float comparisons, all four of one dtype).
pub fn compare_select_ok(op: BinaryOp, cmp: DType, dtype: DType) -> bool {
    op.is_comparison() && cmp == dtype && matches!(dtype, DType::F32 | DType::F64)
}

/// `out = where(x <op> y, a, b)` in one pass, for what [`compare_select_ok`] accepts; equal
/// to a comparison then a [`select`].
pub fn compare_select(
    op: BinaryOp,
    (x, y): (TSlice<'_>, TSlice<'_>),
    (a, b): (TSlice<'_>, TSlice<'_>),
    out: TSliceMut<'_>,
) -> Result<()> {
    let n = a.len();
    let done = match (x, y, a, b) {
        (TSlice::F32(x), TSlice::F32(y), TSlice::F32(a), TSlice::F32(b)) => {
            crate::vmath::compare_select_f32(op, x, y, a, b, out_mut(out, n))
        }
        (TSlice::F64(x), TSlice::F64(y), TSlice::F64(a), TSlice::F64(b)) => {
            crate::vmath::compare_select_f64(op, x, y, a, b, out_mut(out, n))
        }
        _ => false,
    };
    if done {
        Ok(())
    } else {
        Err(crate::walk::internal(format!(
            "where({} ...): not a fused compare-select for these operands",
            op.name()
        )))
    }
}

fn as_bools<'a>(x: TSlice<'a>, tmp: &'a mut Vec<bool>) -> &'a [bool] {
    match x {
        TSlice::Bool(v) => v,
        other => {
            tmp.resize(other.len(), false);
            copy_cast(other, TSliceMut::Bool(tmp));
            tmp
        }
    }
}

fn compare<T: PartialOrd + Copy>(op: BinaryOp, x: &[T], y: &[T], o: &mut [bool]) {
    use BinaryOp::*;
    match op {
        Eq => zip_map(x, y, o, |a, b| a == b),
        Ne => zip_map(x, y, o, |a, b| a != b),
        Lt => zip_map(x, y, o, |a, b| a < b),
        Le => zip_map(x, y, o, |a, b| a <= b),
        Gt => zip_map(x, y, o, |a, b| a > b),
        Ge => zip_map(x, y, o, |a, b| a >= b),
        _ => unreachable!("not a comparison"),
    }
}

fn binary_float<T: Float>(op: BinaryOp, x: &[T], y: &[T], o: &mut [T]) -> Result<()> {
    use BinaryOp::*;
    match op {
        Add => zip_map(x, y, o, |a, b| a + b),
        Sub => zip_map(x, y, o, |a, b| a - b),
        Mul => zip_map(x, y, o, |a, b| a * b),
        Div => zip_map(x, y, o, |a, b| a / b),
        FloorDiv => zip_map(x, y, o, |a, b| {
            T::from_f64(float_floor_div(a.to_f64(), b.to_f64()))
        }),
        Rem => zip_map(x, y, o, |a, b| {
            T::from_f64(float_rem(a.to_f64(), b.to_f64()))
        }),
        Pow => zip_map(x, y, o, |a, b| a.powf(b)),
        Maximum => zip_map(x, y, o, |a, b| {
            if a.is_nan() || b.is_nan() {
                T::NAN
            } else {
                a.fmax(b)
            }
        }),
        Minimum => zip_map(x, y, o, |a, b| {
            if a.is_nan() || b.is_nan() {
                T::NAN
            } else {
                a.fmin(b)
            }
        }),
        _ => return Err(unsupported(op.name(), T::DTYPE)),
    }
    Ok(())
}

fn wrapping_pow<T: Int>(mut base: T, mut exp: u64) -> T {
    let mut acc = T::ONE;
    while exp > 0 {
        if exp & 1 == 1 {
            acc = acc.wmul(base);
        }
        base = base.wmul(base);
        exp >>= 1;
    }
    acc
}

fn binary_int<T: Int>(op: BinaryOp, x: &[T], y: &[T], o: &mut [T]) -> Result<()> {
    use BinaryOp::*;
    let zero_divisor = || -> Result<()> {
        if let Some(i) = y.iter().position(|&b| b == T::ZERO) {
            return Err(Error::DivisionByZero {
                op: op.name(),
                dividend: x[i].to_i64(),
                dtype: T::DTYPE,
            });
        }
        Ok(())
    };
    match op {
        Add => zip_map(x, y, o, |a, b| a.wadd(b)),
        Sub => zip_map(x, y, o, |a, b| a.wsub(b)),
        Mul => zip_map(x, y, o, |a, b| a.wmul(b)),
        FloorDiv => {
            zero_divisor()?;
            zip_map(x, y, o, |a, b| {
                let q = a.wdiv(b);
                if a.wrem(b) != T::ZERO && ((a < T::ZERO) != (b < T::ZERO)) {
                    q.wsub(T::ONE)
                } else {
                    q
                }
            })
        }
        Rem => {
            zero_divisor()?;
            zip_map(x, y, o, |a, b| {
                let r = a.wrem(b);
                if r != T::ZERO && ((r < T::ZERO) != (b < T::ZERO)) {
                    r.wadd(b)
                } else {
                    r
                }
            })
        }
        Pow => {
            if let Some(i) = y.iter().position(|&b| b < T::ZERO) {
                return Err(Error::NegativeIntegerPower {
                    op: "power",
                    base: x[i].to_i64(),
                    exponent: y[i].to_i64(),
                });
            }
            zip_map(x, y, o, |a, b| wrapping_pow(a, b.to_i64() as u64))
        }
        Maximum => zip_map(x, y, o, |a, b| a.max(b)),
        Minimum => zip_map(x, y, o, |a, b| a.min(b)),
        _ => return Err(unsupported(op.name(), T::DTYPE)),
    }
    Ok(())
}

/// `out[..n] = c ? a : b`.
pub fn select(c: TSlice<'_>, a: TSlice<'_>, b: TSlice<'_>, out: TSliceMut<'_>) -> Result<()> {
    let n = a.len();
    let mut tmp = Vec::new();
    let c = as_bools(c, &mut tmp);
    // The lane kernels are branch-free; the scalar level keeps the plain loop.
    let lanes = lanes();
    match (a, b) {
        (TSlice::F32(x), TSlice::F32(y)) if lanes => {
            crate::vmath::select_f32(c, x, y, out_mut(out, n))
        }
        (TSlice::F64(x), TSlice::F64(y)) if lanes => {
            crate::vmath::select_f64(c, x, y, out_mut(out, n))
        }
        (TSlice::I32(x), TSlice::I32(y)) if lanes => {
            crate::vmath::select_i32(c, x, y, out_mut(out, n))
        }
        (TSlice::I64(x), TSlice::I64(y)) if lanes => {
            crate::vmath::select_i64(c, x, y, out_mut(out, n))
        }
        (TSlice::Bool(x), TSlice::Bool(y)) => select_typed(c, x, y, out_mut(out, n)),
        (TSlice::I32(x), TSlice::I32(y)) => select_typed(c, x, y, out_mut(out, n)),
        (TSlice::I64(x), TSlice::I64(y)) => select_typed(c, x, y, out_mut(out, n)),
        (TSlice::F32(x), TSlice::F32(y)) => select_typed(c, x, y, out_mut(out, n)),
        (TSlice::F64(x), TSlice::F64(y)) => select_typed(c, x, y, out_mut(out, n)),
        _ => {
            return Err(crate::walk::internal(format!(
                "where: branches of dtypes {} and {}",
                a.dtype(),
                b.dtype()
            )))
        }
    }
    Ok(())
}

#[inline(always)]
fn select_typed<T: Copy>(c: &[bool], a: &[T], b: &[T], o: &mut [T]) {
    for (((o, &c), &a), &b) in o.iter_mut().zip(c).zip(a).zip(b) {
        *o = if c { a } else { b };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::typed::TypedVec;
    use kiln_ir::Scalar;

    /// Every binary op on a grid of awkward values, against the oracle's scalar definition.
    #[test]
    fn binary_ops_match_the_oracle() {
        let fl = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            2.5,
            -7.25,
            3.0,
            1e300,
            -1e-300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ];
        let it = [
            0i64,
            1,
            -1,
            2,
            -7,
            3,
            13,
            i32::MAX as i64,
            i32::MIN as i64,
            i64::MAX,
            i64::MIN,
        ];
        for op in BinaryOp::ALL {
            for dt in [DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool] {
                let vals: Vec<Scalar> = match dt {
                    DType::Bool => vec![Scalar::Bool(false), Scalar::Bool(true)],
                    d if d.is_float() => fl.iter().map(|&x| Scalar::Float(x).cast(d)).collect(),
                    d => it.iter().map(|&x| Scalar::Int(x).cast(d)).collect(),
                };
                for &p in &vals {
                    for &q in &vals {
                        let defined = match dt {
                            DType::Bool => {
                                op.is_predicate()
                                    || matches!(op, BinaryOp::Maximum | BinaryOp::Minimum)
                            }
                            d if d.is_int() => op != BinaryOp::Div,
                            _ => true,
                        };
                        if !defined {
                            continue; // `unreachable!` in the oracle: the builders never emit it
                        }
                        let want = kiln_reference::binary(op, dt, p, q);
                        let a = TypedVec::from_slice(TSlice::of_host(
                            &kiln_ir::HostData::from_scalars(dt, [p]),
                        ));
                        let b = TypedVec::from_slice(TSlice::of_host(
                            &kiln_ir::HostData::from_scalars(dt, [q]),
                        ));
                        let rdt = binary_dtype(op, dt);
                        let mut out = TypedVec::zeros(rdt, 1);
                        let got = binary(op, a.as_slice(), b.as_slice(), out.as_mut_slice());
                        match want {
                            Err(e) => assert_eq!(got, Err(e), "{op:?} {dt} {p:?} {q:?}"),
                            Ok(w) => {
                                got.unwrap_or_else(|e| panic!("{op:?} {dt} {p:?} {q:?}: {e}"));
                                let g = out.into_host(1).get(0);
                                let w = w.cast(rdt);
                                let ok = match (g, w) {
                                    (Scalar::Float(x), Scalar::Float(y)) => {
                                        x == y
                                            || (x.is_nan() && y.is_nan())
                                            || (x - y).abs() <= 1e-6 * y.abs()
                                    }
                                    _ => g == w,
                                };
                                assert!(ok, "{op:?} {dt} {p:?} {q:?}: got {g:?} want {w:?}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn unary_ops_match_the_oracle() {
        let fl = [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            2.5,
            -2.5,
            3.7,
            -3.7,
            1e-8,
            50.0,
            -50.0,
            f64::INFINITY,
            f64::NAN,
        ];
        let it = [0i64, 1, -1, 7, -7, i32::MIN as i64, i64::MIN, i64::MAX];
        for op in UnaryOp::ALL {
            for dt in [DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool] {
                let vals: Vec<Scalar> = match dt {
                    DType::Bool => vec![Scalar::Bool(false), Scalar::Bool(true)],
                    d if d.is_float() => fl.iter().map(|&x| Scalar::Float(x).cast(d)).collect(),
                    d => it.iter().map(|&x| Scalar::Int(x).cast(d)).collect(),
                };
                for &p in &vals {
                    if !dt.is_float() && op.is_float_valued() {
                        continue; // `unreachable!` in the oracle: the builders cast to float first
                    }
                    let w = kiln_reference::unary(op, dt, p);
                    let a = TypedVec::from_slice(TSlice::of_host(
                        &kiln_ir::HostData::from_scalars(dt, [p]),
                    ));
                    let rdt = unary_dtype(op, dt);
                    let mut out = TypedVec::zeros(rdt, 1);
                    unary(op, a.as_slice(), out.as_mut_slice())
                        .unwrap_or_else(|e| panic!("{op:?} {dt}: {e}"));
                    let g = out.into_host(1).get(0);
                    let w = w.cast(rdt);
                    let ok = match (g, w) {
                        (Scalar::Float(x), Scalar::Float(y)) => {
                            x == y
                                || (x.is_nan() && y.is_nan())
                                || (x - y).abs() <= 2e-7 * y.abs().max(1e-30)
                        }
                        _ => g == w,
                    };
                    assert!(ok, "{op:?} {dt} {p:?}: got {g:?} want {w:?}");
                }
            }
        }
    }
}
