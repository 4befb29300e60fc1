//! Vectorised math: branch-free per-lane functions that the compiler turns into SIMD loops
//! (inlined into the `simd` module's copies for SSE2, AVX2 + FMA and AVX-512), and the slice
//! kernels built from them.
//!
//! Every function takes a const `FMA` flag (fused multiply-add in the AVX2/AVX-512 copies,
//! separate multiply and add at the baseline) and handles the whole input range: ±0, ±inf,
//! NaN, subnormal inputs and outputs. Maximum errors, measured against an `f64` reference
//! (`f64` libm, rounded to `f32`) over a sweep of every 97th `f32` bit pattern plus special
//! values (`tests/vmath.rs` checks them at every ISA level):
//!
//! | function | method | max error (normal results) |
//! |---|---|---|
//! | `exp_f32` | Cephes `expf`: `n = round(x·log2 e)`, Cody–Waite `ln 2`, degree-6 polynomial, 2ⁿ by an add to the exponent field where results are normal (the slice kernels patch the rest), in two steps elsewhere (exact overflow to inf, one rounding into subnormals) | 2 ulp |
//! | `ln_f32` | Cephes `logf`: mantissa in [√½, √2), degree-9 polynomial; subnormal inputs prescaled by 2²³ | 2 ulp |
//! | `tanh_f32` | odd polynomial for \|x\| < 0.625, else `1 − 2/(e^{2|x|}+1)` | 3 ulp |
//! | `sigmoid_f32` | `e = exp(−|x|)`, `1/(1+e)` or `e/(1+e)` (no cancellation for x < 0) | 3 ulp |
//! | `sin_f32`, `cos_f32` | in `f64`: `n = round(x·2/π)`, two-part Cody–Waite π/2 (exact products for \|x\| < 2¹⁷), fdlibm kernel polynomials, one rounding to `f32`; \|x\| ≥ 2¹⁷, inf and NaN go to `std` | 1 ulp |
//!
//! Subnormal results are within one subnormal spacing (2⁻¹⁴⁹) of the reference. `f64`
//! transcendentals use `std` (libm) per element; `f64` arithmetic is vectorised.
//!
//! Depends on `crate::simd` (the ISA level) and `kiln-ir`'s op enums.

// The polynomial coefficients are quoted as Cephes and fdlibm publish them.
#![allow(clippy::excessive_precision)]

use crate::simd::versions;
use kiln_ir::{BinaryOp, UnaryOp};

#[inline(always)]
fn fma<const F: bool>(a: f32, b: f32, c: f32) -> f32 {
    if F {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

#[inline(always)]
fn fma64<const F: bool>(a: f64, b: f64, c: f64) -> f64 {
    if F {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// e^x (see the module docs for the error bound).
///
/// ```
/// assert!((kiln_cpu::vmath::exp_f32::<false>(1.0) - std::f32::consts::E).abs() < 1e-6);
/// ```
#[inline(always)]
pub fn exp_f32<const F: bool>(x: f32) -> f32 {
    let xc = x.clamp(-104.0, 89.0); // NaN stays NaN and is patched below
    let (y, e) = exp_core::<F>(xc);
    let e1 = e >> 1;
    let e2 = e - e1;
    let s1 = f32::from_bits(((e1 + 127) as u32) << 23);
    let s2 = f32::from_bits(((e2 + 127) as u32) << 23);
    let v = y * s1 * s2;
    if x.is_nan() {
        x
    } else {
        v
    }
}

/// `(y, n)` with e^x = y·2ⁿ, `y` in about [0.7, 1.42]: the reduction and polynomial of
/// [`exp_f32`] for `|x| ≤ 104`.
#[inline(always)]
fn exp_core<const F: bool>(x: f32) -> (f32, i32) {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    let t = fma::<F>(x, LOG2E, MAGIC);
    let n = t - MAGIC;
    let e = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let r = fma::<F>(n, -C1, x);
    let r = fma::<F>(n, -C2, r);
    let mut p = 1.987_569_1e-4f32;
    p = fma::<F>(p, r, 1.398_199_9e-3);
    p = fma::<F>(p, r, 8.333_452e-3);
    p = fma::<F>(p, r, 4.166_579_6e-2);
    p = fma::<F>(p, r, 1.666_666_5e-1);
    p = fma::<F>(p, r, 5.000_000_1e-1);
    (fma::<F>(p, r * r, r) + 1.0, e)
}

/// Inputs of [`exp_f32`] whose results are normal with room to spare: there [`exp_normal`]
/// scales by 2ⁿ with one integer add to the exponent field.
const EXP_NORMAL: (f32, f32) = (-86.0, 88.0);

/// [`exp_f32`] for `x` in [`EXP_NORMAL`] (bit-identical there: 2ⁿ scaling is exact for normal
/// results), without the clamp, the NaN test and the two-step scaling; any other input gives
/// an unspecified value (the slice kernels patch those elements).
#[inline(always)]
fn exp_normal<const F: bool>(x: f32) -> f32 {
    let (y, e) = exp_core::<F>(x);
    f32::from_bits((y.to_bits() as i32).wrapping_add(e << 23) as u32)
}

/// Whether [`exp_normal`] is exact for `x` (false for NaN).
#[inline(always)]
fn exp_normal_ok(x: f32) -> bool {
    x >= EXP_NORMAL.0 && x <= EXP_NORMAL.1
}

/// ln x (see the module docs for the error bound).
///
/// ```
/// assert!((kiln_cpu::vmath::ln_f32::<false>(std::f32::consts::E) - 1.0).abs() < 1e-6);
/// assert_eq!(kiln_cpu::vmath::ln_f32::<false>(0.0), f32::NEG_INFINITY);
/// ```
#[inline(always)]
pub fn ln_f32<const F: bool>(x: f32) -> f32 {
    const SQRTHF: f32 = std::f32::consts::FRAC_1_SQRT_2;
    let sub = x < f32::MIN_POSITIVE;
    let xs = if sub { x * 8_388_608.0 } else { x };
    let bits = xs.to_bits();
    let e0 = ((bits >> 23) & 0xff) as i32 - 126 - if sub { 23 } else { 0 };
    let m0 = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000);
    let small = m0 < SQRTHF;
    let e = if small { e0 - 1 } else { e0 };
    let m = if small { m0 + m0 - 1.0 } else { m0 - 1.0 };
    let z = m * m;
    let mut y = 7.037_683_6e-2f32;
    y = fma::<F>(y, m, -1.151_461e-1);
    y = fma::<F>(y, m, 1.167_699_9e-1);
    y = fma::<F>(y, m, -1.242_014_1e-1);
    y = fma::<F>(y, m, 1.424_932_3e-1);
    y = fma::<F>(y, m, -1.666_805_8e-1);
    y = fma::<F>(y, m, 2.000_071_4e-1);
    y = fma::<F>(y, m, -2.499_999_4e-1);
    y = fma::<F>(y, m, 3.333_333_1e-1);
    y = y * m * z;
    let fe = e as f32;
    y = fma::<F>(fe, -2.121_944_4e-4, y);
    y = fma::<F>(z, -0.5, y);
    let r = m + y;
    let r = fma::<F>(fe, 0.693_359_4, r);
    let r = if x == f32::INFINITY { x } else { r };
    let r = if x == 0.0 { f32::NEG_INFINITY } else { r };
    if x < 0.0 || x.is_nan() {
        f32::NAN
    } else {
        r
    }
}

/// tanh x (see the module docs for the error bound).
///
/// ```
/// assert!((kiln_cpu::vmath::tanh_f32::<false>(0.5) - 0.5f32.tanh()).abs() < 1e-7);
/// ```
#[inline(always)]
pub fn tanh_f32<const F: bool>(x: f32) -> f32 {
    let ax = x.abs();
    let z = x * x;
    let mut p = -5.704_988_7e-3f32;
    p = fma::<F>(p, z, 2.063_908_9e-2);
    p = fma::<F>(p, z, -5.373_971_6e-2);
    p = fma::<F>(p, z, 1.333_144_2e-1);
    p = fma::<F>(p, z, -3.333_328_2e-1);
    let small = fma::<F>(p * z, ax, ax);
    // For |x| ≥ 10, 1 − 2/(e^{2|x|}+1) rounds to 1 whatever e^{2|x|} is: clamping the
    // argument to 20 keeps it in `exp_normal`'s range (bit-identical to `exp_f32` there).
    let a2 = ax + ax;
    let e = exp_normal::<F>(if a2 > 20.0 { 20.0 } else { a2 });
    let big = 1.0 - 2.0 / (e + 1.0);
    // NaN takes `small`, which is NaN.
    let r = if ax >= 0.625 { big } else { small };
    r.copysign(x)
}

/// The logistic function 1 / (1 + e^-x) (see the module docs for the error bound).
///
/// ```
/// assert_eq!(kiln_cpu::vmath::sigmoid_f32::<false>(0.0), 0.5);
/// ```
#[inline(always)]
pub fn sigmoid_f32<const F: bool>(x: f32) -> f32 {
    let e = exp_f32::<F>(-x.abs());
    let s = 1.0 / (1.0 + e);
    if x >= 0.0 {
        s
    } else {
        e * s
    }
}

/// [`sigmoid_f32`] through [`exp_normal`]: bit-identical where `−|x|` is in its range.
#[inline(always)]
fn sigmoid_normal<const F: bool>(x: f32) -> f32 {
    let e = exp_normal::<F>(-x.abs());
    let s = 1.0 / (1.0 + e);
    if x >= 0.0 {
        s
    } else {
        e * s
    }
}

/// Inputs of `sin_f32`/`cos_f32` at or above this magnitude (and inf, NaN) are computed by
/// `std` (the slice kernels patch them after the vector loop).
pub const TRIG_FAST_LIMIT: f32 = 131_072.0;

#[inline(always)]
fn sincos<const F: bool, const COS: bool>(x: f32) -> f32 {
    const TWO_OVER_PI: f64 = std::f64::consts::FRAC_2_PI;
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52
    const PIO2_1: f64 = 1.570_796_326_734_125_6; // first 33 bits of pi/2
    const PIO2_1T: f64 = 6.077_100_506_506_192e-11; // pi/2 - PIO2_1
    let ax = (x as f64).abs();
    let t = fma64::<F>(ax, TWO_OVER_PI, MAGIC);
    let n = t - MAGIC;
    let q = t.to_bits() & 3;
    let r = fma64::<F>(n, -PIO2_1, ax);
    let r = fma64::<F>(n, -PIO2_1T, r);
    let z = r * r;
    let mut ps = 1.589_690_995_211_55e-10f64;
    ps = fma64::<F>(ps, z, -2.505_076_025_340_686_3e-8);
    ps = fma64::<F>(ps, z, 2.755_731_370_707_006_8e-6);
    ps = fma64::<F>(ps, z, -1.984_126_982_985_795e-4);
    ps = fma64::<F>(ps, z, 8.333_333_333_322_49e-3);
    ps = fma64::<F>(ps, z, -1.666_666_666_666_663_2e-1);
    let s = fma64::<F>(r * z, ps, r);
    let mut pc = -1.135_964_755_778_819_5e-11f64;
    pc = fma64::<F>(pc, z, 2.087_572_321_298_175e-9);
    pc = fma64::<F>(pc, z, -2.755_731_435_139_066_3e-7);
    pc = fma64::<F>(pc, z, 2.480_158_728_947_673e-5);
    pc = fma64::<F>(pc, z, -1.388_888_888_887_411e-3);
    pc = fma64::<F>(pc, z, 4.166_666_666_666_66e-2);
    let c = fma64::<F>(z * z, pc, 1.0 - 0.5 * z);
    let odd = q & 1 == 1;
    let (a, b) = if odd { (c, s) } else { (s, c) };
    let v = if COS {
        if (q + 1) & 2 != 0 {
            -b
        } else {
            b
        }
    } else {
        let v = if q & 2 != 0 { -a } else { a };
        if x.is_sign_negative() {
            -v
        } else {
            v
        }
    };
    v as f32
}

/// sin x for |x| < [`TRIG_FAST_LIMIT`] (see the module docs); larger, inf and NaN inputs give
/// unspecified values here: use [`unary_f32`], which patches them.
///
/// ```
/// assert!((kiln_cpu::vmath::sin_f32::<false>(1.0) - 1.0f32.sin()).abs() < 1e-7);
/// ```
#[inline(always)]
pub fn sin_f32<const F: bool>(x: f32) -> f32 {
    sincos::<F, false>(x)
}

/// cos x for |x| < [`TRIG_FAST_LIMIT`] (see [`sin_f32`]).
///
/// ```
/// assert!((kiln_cpu::vmath::cos_f32::<false>(1.0) - 1.0f32.cos()).abs() < 1e-7);
/// ```
#[inline(always)]
pub fn cos_f32<const F: bool>(x: f32) -> f32 {
    sincos::<F, true>(x)
}

/// `o[i] = fast(x[i])`, then `o[i] = exact(x[i])` where `!ok(x[i])`: one branch-free pass
/// (it vectorises) that also notes whether any element needs the exact function, and a patch
/// loop only if one does.
#[inline(always)]
fn patched(
    x: &[f32],
    o: &mut [f32],
    fast: impl Fn(f32) -> f32,
    ok: impl Fn(f32) -> bool,
    exact: impl Fn(f32) -> f32,
) {
    let n = x.len().min(o.len());
    let (x, o) = (&x[..n], &mut o[..n]);
    let mut outside = false;
    for i in 0..n {
        o[i] = fast(x[i]);
        outside |= !ok(x[i]);
    }
    if outside {
        for i in 0..n {
            if !ok(x[i]) {
                o[i] = exact(x[i]);
            }
        }
    }
}

#[inline(always)]
fn map<T: Copy, U>(x: &[T], o: &mut [U], f: impl Fn(T) -> U) {
    let n = x.len().min(o.len());
    let (x, o) = (&x[..n], &mut o[..n]);
    for i in 0..n {
        o[i] = f(x[i]);
    }
}

#[inline(always)]
fn zip_map<T: Copy>(x: &[T], y: &[T], o: &mut [T], f: impl Fn(T, T) -> T) {
    let n = x.len().min(y.len()).min(o.len());
    let (x, y, o) = (&x[..n], &y[..n], &mut o[..n]);
    for i in 0..n {
        o[i] = f(x[i], y[i]);
    }
}

#[inline(always)]
fn unary_f32_generic<const F: bool>(op: UnaryOp, x: &[f32], o: &mut [f32]) -> bool {
    use UnaryOp::*;
    match op {
        Neg => map(x, o, |a| -a),
        Abs => map(x, o, |a| a.abs()),
        Square => map(x, o, |a| a * a),
        Recip => map(x, o, |a| 1.0 / a),
        Sqrt => map(x, o, |a| a.sqrt()),
        Rsqrt => map(x, o, |a| 1.0 / a.sqrt()),
        Relu => map(x, o, |a| if a > 0.0 || a.is_nan() { a } else { 0.0 }),
        Exp => patched(x, o, exp_normal::<F>, exp_normal_ok, exp_f32::<F>),
        Log => map(x, o, ln_f32::<F>),
        Tanh => map(x, o, tanh_f32::<F>),
        Sigmoid => patched(
            x,
            o,
            sigmoid_normal::<F>,
            |a| exp_normal_ok(-a.abs()),
            sigmoid_f32::<F>,
        ),
        Sin | Cos => {
            if op == Sin {
                map(x, o, sin_f32::<F>)
            } else {
                map(x, o, cos_f32::<F>)
            }
            // A branch-free scan (it vectorises) before the patching loop (which does not):
            // the patch is rare, the scan cheap.
            let outside = x.iter().fold(false, |acc, &a| {
                acc | a.is_nan() | (a.abs() >= TRIG_FAST_LIMIT)
            });
            if outside {
                for (o, &a) in o.iter_mut().zip(x) {
                    if a.is_nan() || a.abs() >= TRIG_FAST_LIMIT {
                        *o = if op == Sin { a.sin() } else { a.cos() };
                    }
                }
            }
        }
        _ => return false,
    }
    true
}

versions! {
    /// `o[i] = op(x[i])` for the float ops with a lane kernel; returns false (writing
    /// nothing) for the others. Runs at the current [`crate::isa`] level (`scalar` counts as
    /// the baseline here; the caller decides whether to use lanes at all).
    ///
    /// ```
    /// let mut o = [0.0f32; 3];
    /// assert!(kiln_cpu::vmath::unary_f32(kiln_ir::UnaryOp::Exp, &[0.0, 1.0, f32::NEG_INFINITY], &mut o));
    /// assert_eq!(o[0], 1.0);
    /// assert_eq!(o[2], 0.0);
    /// ```
    pub fn unary_f32 = unary_f32_generic(op: UnaryOp, x: &[f32], o: &mut [f32]) -> bool
}

#[inline(always)]
fn unary_f64_generic<const F: bool>(op: UnaryOp, x: &[f64], o: &mut [f64]) -> bool {
    use UnaryOp::*;
    match op {
        Neg => map(x, o, |a| -a),
        Abs => map(x, o, |a| a.abs()),
        Square => map(x, o, |a| a * a),
        Recip => map(x, o, |a| 1.0 / a),
        Sqrt => map(x, o, |a| a.sqrt()),
        Rsqrt => map(x, o, |a| 1.0 / a.sqrt()),
        Relu => map(x, o, |a| if a > 0.0 || a.is_nan() { a } else { 0.0 }),
        _ => return false,
    }
    true
}

versions! {
    /// Like [`unary_f32`] for `f64` (arithmetic only; transcendentals return false).
    ///
    /// ```
    /// let mut o = [0.0f64; 1];
    /// assert!(kiln_cpu::vmath::unary_f64(kiln_ir::UnaryOp::Sqrt, &[4.0], &mut o));
    /// assert_eq!(o[0], 2.0);
    /// ```
    pub fn unary_f64 = unary_f64_generic(op: UnaryOp, x: &[f64], o: &mut [f64]) -> bool
}

macro_rules! binary_generic {
    ($name:ident, $t:ty) => {
        #[inline(always)]
        fn $name<const F: bool>(op: BinaryOp, x: &[$t], y: &[$t], o: &mut [$t]) -> bool {
            use BinaryOp::*;
            match op {
                Add => zip_map(x, y, o, |a, b| a + b),
                Sub => zip_map(x, y, o, |a, b| a - b),
                Mul => zip_map(x, y, o, |a, b| a * b),
                Div => zip_map(x, y, o, |a, b| a / b),
                Maximum => zip_map(x, y, o, |a, b| {
                    if a.is_nan() || b.is_nan() {
                        <$t>::NAN
                    } else {
                        a.max(b)
                    }
                }),
                Minimum => zip_map(x, y, o, |a, b| {
                    if a.is_nan() || b.is_nan() {
                        <$t>::NAN
                    } else {
                        a.min(b)
                    }
                }),
                _ => return false,
            }
            true
        }
    };
}
binary_generic!(binary_f32_generic, f32);
binary_generic!(binary_f64_generic, f64);

versions! {
    /// `o[i] = op(x[i], y[i])` for `+ - * /`, `maximum`, `minimum` (NaN-propagating); false
    /// for the other ops.
    ///
    /// ```
    /// let mut o = [0.0f32; 2];
    /// assert!(kiln_cpu::vmath::binary_f32(kiln_ir::BinaryOp::Mul, &[2.0, 3.0], &[4.0, 5.0], &mut o));
    /// assert_eq!(o, [8.0, 15.0]);
    /// ```
    pub fn binary_f32 = binary_f32_generic(op: BinaryOp, x: &[f32], y: &[f32], o: &mut [f32]) -> bool
}

versions! {
    /// [`binary_f32`] for `f64`.
    ///
    /// ```
    /// let mut o = [0.0f64; 1];
    /// assert!(kiln_cpu::vmath::binary_f64(kiln_ir::BinaryOp::Sub, &[2.0], &[4.0], &mut o));
    /// assert_eq!(o, [-2.0]);
    /// ```
    pub fn binary_f64 = binary_f64_generic(op: BinaryOp, x: &[f64], y: &[f64], o: &mut [f64]) -> bool
}

/// The `+ - * /` of `binary_uniform*` with the uniform value `$s` on the right (or on the
/// left when `$left`), each applied by the caller's loop macro `$each!(closure)`; evaluates
/// to true, or returns false from the caller for other ops.
macro_rules! uniform_arms {
    ($op:expr, $left:expr, $s:expr, $each:ident) => {{
        match ($op, $left) {
            (Add, false) => $each!(|a| a + $s),
            (Add, true) => $each!(|a| $s + a),
            (Sub, false) => $each!(|a| a - $s),
            (Sub, true) => $each!(|a| $s - a),
            (Mul, false) => $each!(|a| a * $s),
            (Mul, true) => $each!(|a| $s * a),
            (Div, false) => $each!(|a| a / $s),
            (Div, true) => $each!(|a| $s / a),
            _ => return false,
        }
        true
    }};
}

/// `o[i] = op(x[i], s)` (`left`: `op(s, x[i])`) for `+ - * /`: an operand that is one value
/// over the whole run (a per-row broadcast value) used without filling a register with it.
/// Each element rounds exactly as [`binary_f32`] with that value repeated.
///
/// `x / s` with FMA takes the reciprocal once and corrects each quotient (Markstein):
/// `q = x·r`, `e = fma(−q, s, x)` (exact), `q' = fma(e, r, q)`, which is the correctly rounded
/// `x / s` when `r = RN(1/s)` and nothing underflows or overflows — guaranteed here by
/// `|s|` in `[2^-P, 2^P]` and `|x|` in `[2^-E, 2^E]` (`P`, `E`: 24, 100 for f32; 53, 900
/// for f64). A multiply and two FMAs instead of a `vdivps` (f32: 0.2 → 0.05 ns/element in
/// L1). The range is checked per 256 bytes of dividends ([`markstein_chunk`]): a chunk
/// holding an element outside it (0, NaN, ±∞, tiny or huge) is divided (a whole block of
/// 1024 was before: an f32 softmax row with a probability below 2^-100 divided every element,
/// 0.10 → 0.22 ns/element; per chunk 0.08–0.09 with or without). Checked bit for bit against
/// division over every f32 significand at ten exponents for 37 divisors (scratch run) and by
/// `tests/vmath.rs` at every ISA level.
macro_rules! binary_uniform_generic {
    ($name:ident, $chunk:ident, $tail:ident, $t:ty, $p:expr, $e:expr) => {
        /// [`markstein_chunk`] over a last partial chunk `x` (shorter than a chunk), padded
        /// with ones (in range); returns the chunk, whose first `x.len()` elements are the
        /// quotients.
        #[inline(always)]
        fn $tail(x: &[$t], s: $t, r: $t, lo: $t, hi: $t) -> [$t; 256 / size_of::<$t>()] {
            let mut padded = [1.0; 256 / size_of::<$t>()];
            padded[..x.len()].copy_from_slice(x);
            let mut last = [0.0; 256 / size_of::<$t>()];
            $chunk(&padded, s, r, lo, hi, &mut last);
            last
        }

        /// `o = x / s` over one chunk of 256 bytes (four AVX-512 vectors) by the Markstein
        /// correction with `r = RN(1/s)`, or by division where an element of
        /// the chunk is outside `[lo, hi]` in magnitude (NaN compares false: outside). `o`
        /// may be a copy of `x` (the in-place form).
        #[inline(always)]
        fn $chunk(x: &[$t; 256 / size_of::<$t>()], s: $t, r: $t, lo: $t, hi: $t, o: &mut [$t]) {
            const C: usize = 256 / size_of::<$t>();
            let o: &mut [$t; C] = o.try_into().expect("a chunk");
            let mut outside = false;
            for k in 0..C {
                let a = x[k];
                let p = a * r;
                let e = (-p).mul_add(s, a);
                o[k] = e.mul_add(r, p);
                outside |= !(a.abs() >= lo && a.abs() <= hi);
            }
            if outside {
                for k in 0..C {
                    o[k] = x[k] / s;
                }
            }
        }

        #[inline(always)]
        fn $name<const F: bool>(op: BinaryOp, left: bool, x: &[$t], s: $t, o: &mut [$t]) -> bool {
            use BinaryOp::*;
            let n = x.len().min(o.len());
            let (x, o) = (&x[..n], &mut o[..n]);
            let two: $t = 2.0;
            if F && op == Div && !left && s.abs() >= two.powi(-$p) && s.abs() <= two.powi($p) {
                const C: usize = 256 / size_of::<$t>();
                let (r, lo, hi) = (1.0 / s, two.powi(-$e), two.powi($e));
                let (xc, mut oc) = (x.chunks_exact(C), o.chunks_exact_mut(C));
                let xr = xc.remainder();
                for (xs, os) in xc.zip(&mut oc) {
                    $chunk(xs.try_into().expect("a chunk"), s, r, lo, hi, os);
                }
                let or = oc.into_remainder();
                if !or.is_empty() {
                    or.copy_from_slice(&$tail(xr, s, r, lo, hi)[..or.len()]);
                }
                return true;
            }
            macro_rules! each {
                ($f:expr) => {
                    for i in 0..n {
                        o[i] = $f(x[i]);
                    }
                };
            }
            uniform_arms!(op, left, s, each)
        }
    };
}
binary_uniform_generic!(
    binary_uniform_f32_generic,
    markstein_chunk,
    markstein_tail,
    f32,
    24,
    100
);
binary_uniform_generic!(
    binary_uniform_f64_generic,
    markstein_chunk_f64,
    markstein_tail_f64,
    f64,
    53,
    900
);

versions! {
    /// `o[i] = op(x[i], s)`, or `op(s, x[i])` when `left`, for `+ - * /` (false otherwise):
    /// bit-identical to [`binary_f32`] with `s` repeated, without the repeated operand.
    ///
    /// ```
    /// let mut o = [0.0f32; 2];
    /// assert!(kiln_cpu::vmath::binary_uniform_f32(kiln_ir::BinaryOp::Sub, true, &[2.0, 3.0], 10.0, &mut o));
    /// assert_eq!(o, [8.0, 7.0]);
    /// ```
    pub fn binary_uniform_f32 = binary_uniform_f32_generic(op: BinaryOp, left: bool, x: &[f32], s: f32, o: &mut [f32]) -> bool
}

versions! {
    /// [`binary_uniform_f32`] for `f64`.
    ///
    /// ```
    /// let mut o = [0.0f64; 1];
    /// assert!(kiln_cpu::vmath::binary_uniform_f64(kiln_ir::BinaryOp::Div, false, &[3.0], 2.0, &mut o));
    /// assert_eq!(o, [1.5]);
    /// ```
    pub fn binary_uniform_f64 = binary_uniform_f64_generic(op: BinaryOp, left: bool, x: &[f64], s: f64, o: &mut [f64]) -> bool
}

/// `o[i] = u(op(x[i], s))` (`left`: `u(op(s, x[i]))`) for `u` in `exp log tanh sigmoid` and
/// `op` in `+ - *`: a unary op of a binary op with a uniform operand, in one pass
/// (`exp(x − max)` of a softmax row). `op` rounds as [`binary_uniform_f32`] and `u` as
/// [`unary_f32`], so the result equals the two passes bit for bit; the intermediate is never
/// stored (division is left to the two passes: [`binary_uniform_f32`] divides by a corrected
/// reciprocal there).
#[inline(always)]
fn unary_of_uniform_f32_generic<const F: bool>(
    u: UnaryOp,
    op: BinaryOp,
    left: bool,
    x: &[f32],
    s: f32,
    o: &mut [f32],
) -> bool {
    use BinaryOp::*;
    macro_rules! each {
        ($pre:expr) => {{
            let pre = $pre;
            match u {
                UnaryOp::Exp => patched(
                    x,
                    o,
                    |a| exp_normal::<F>(pre(a)),
                    |a| exp_normal_ok(pre(a)),
                    |a| exp_f32::<F>(pre(a)),
                ),
                UnaryOp::Sigmoid => patched(
                    x,
                    o,
                    |a| sigmoid_normal::<F>(pre(a)),
                    |a| exp_normal_ok(-pre(a).abs()),
                    |a| sigmoid_f32::<F>(pre(a)),
                ),
                UnaryOp::Log => map(x, o, |a| ln_f32::<F>(pre(a))),
                UnaryOp::Tanh => map(x, o, |a| tanh_f32::<F>(pre(a))),
                _ => return false,
            }
        }};
    }
    match (op, left) {
        (Add, false) => each!(|a: f32| a + s),
        (Add, true) => each!(|a: f32| s + a),
        (Sub, false) => each!(|a: f32| a - s),
        (Sub, true) => each!(|a: f32| s - a),
        (Mul, false) => each!(|a: f32| a * s),
        (Mul, true) => each!(|a: f32| s * a),
        _ => return false,
    }
    true
}

versions! {
    /// `o[i] = u(op(x[i], s))`, or `u(op(s, x[i]))` when `left`, in one pass, for `u` in
    /// `Exp Log Tanh Sigmoid` and `op` in `Add Sub Mul` (false, writing nothing, otherwise):
    /// bit-identical to [`binary_uniform_f32`] followed by [`unary_f32`].
    ///
    /// ```
    /// use kiln_ir::{BinaryOp, UnaryOp};
    /// let mut o = [0.0f32; 2];
    /// assert!(kiln_cpu::vmath::unary_of_uniform_f32(UnaryOp::Exp, BinaryOp::Sub, false, &[3.0, 2.0], 3.0, &mut o));
    /// assert_eq!(o[0], 1.0);
    /// assert!((o[1] - (-1.0f32).exp()).abs() < 1e-7);
    /// ```
    pub fn unary_of_uniform_f32 = unary_of_uniform_f32_generic(u: UnaryOp, op: BinaryOp, left: bool, x: &[f32], s: f32, o: &mut [f32]) -> bool
}

/// [`binary_uniform_generic`] over `o` in place (`o[i] = op(o[i], s)`, or `op(s, o[i])`):
/// the same roundings, the division by the same [`markstein_chunk`] over each chunk (read
/// into registers before it is written).
macro_rules! binary_uniform_in_place_generic {
    ($name:ident, $chunk:ident, $tail:ident, $t:ty, $p:expr, $e:expr) => {
        #[inline(always)]
        fn $name<const F: bool>(op: BinaryOp, left: bool, o: &mut [$t], s: $t) -> bool {
            use BinaryOp::*;
            let two: $t = 2.0;
            if F && op == Div && !left && s.abs() >= two.powi(-$p) && s.abs() <= two.powi($p) {
                const C: usize = 256 / size_of::<$t>();
                let (r, lo, hi) = (1.0 / s, two.powi(-$e), two.powi($e));
                let mut oc = o.chunks_exact_mut(C);
                for os in &mut oc {
                    let xs: [$t; C] = (&*os).try_into().expect("a chunk");
                    $chunk(&xs, s, r, lo, hi, os);
                }
                let or = oc.into_remainder();
                if !or.is_empty() {
                    let last = $tail(or, s, r, lo, hi);
                    let m = or.len();
                    or.copy_from_slice(&last[..m]);
                }
                return true;
            }
            macro_rules! each {
                ($f:expr) => {
                    for v in o.iter_mut() {
                        *v = $f(*v);
                    }
                };
            }
            uniform_arms!(op, left, s, each)
        }
    };
}
binary_uniform_in_place_generic!(
    binary_uniform_in_place_f32_generic,
    markstein_chunk,
    markstein_tail,
    f32,
    24,
    100
);
binary_uniform_in_place_generic!(
    binary_uniform_in_place_f64_generic,
    markstein_chunk_f64,
    markstein_tail_f64,
    f64,
    53,
    900
);

versions! {
    /// [`binary_uniform_f32`] in place: `o[i] = op(o[i], s)`, or `op(s, o[i])` when `left`,
    /// bit-identical to it (false for ops other than `+ - * /`).
    ///
    /// ```
    /// let mut o = [3.0f32, 6.0];
    /// assert!(kiln_cpu::vmath::binary_uniform_in_place_f32(kiln_ir::BinaryOp::Div, false, &mut o, 3.0));
    /// assert_eq!(o, [1.0, 2.0]);
    /// ```
    pub fn binary_uniform_in_place_f32 = binary_uniform_in_place_f32_generic(op: BinaryOp, left: bool, o: &mut [f32], s: f32) -> bool
}

versions! {
    /// [`binary_uniform_in_place_f32`] for `f64`.
    ///
    /// ```
    /// let mut o = [1.0f64];
    /// assert!(kiln_cpu::vmath::binary_uniform_in_place_f64(kiln_ir::BinaryOp::Sub, true, &mut o, 4.0));
    /// assert_eq!(o, [3.0]);
    /// ```
    pub fn binary_uniform_in_place_f64 = binary_uniform_in_place_f64_generic(op: BinaryOp, left: bool, o: &mut [f64], s: f64) -> bool
}

#[inline(always)]
fn zip3_map<T: Copy>(x: &[T], y: &[T], z: &[T], o: &mut [T], f: impl Fn(T, T, T) -> T) {
    let n = x.len().min(y.len()).min(z.len()).min(o.len());
    let (x, y, z, o) = (&x[..n], &y[..n], &z[..n], &mut o[..n]);
    for i in 0..n {
        o[i] = f(x[i], y[i], z[i]);
    }
}

/// `o = second(first(x, y), z)` (`left`) or `second(z, first(x, y))`, both ops among
/// `+ - * /`, in one pass: each op rounds as it does alone, so the result equals the two
/// [`binary_f32`] passes bit for bit.
macro_rules! binary2_generic {
    ($name:ident, $t:ty) => {
        #[inline(always)]
        fn $name<const F: bool>(
            first: BinaryOp,
            second: BinaryOp,
            left: bool,
            x: &[$t],
            y: &[$t],
            z: &[$t],
            o: &mut [$t],
        ) -> bool {
            use BinaryOp::*;
            macro_rules! then {
                ($g:expr) => {
                    match (second, left) {
                        (Add, true) => zip3_map(x, y, z, o, |a, b, c| ($g)(a, b) + c),
                        (Add, false) => zip3_map(x, y, z, o, |a, b, c| c + ($g)(a, b)),
                        (Sub, true) => zip3_map(x, y, z, o, |a, b, c| ($g)(a, b) - c),
                        (Sub, false) => zip3_map(x, y, z, o, |a, b, c| c - ($g)(a, b)),
                        (Mul, true) => zip3_map(x, y, z, o, |a, b, c| ($g)(a, b) * c),
                        (Mul, false) => zip3_map(x, y, z, o, |a, b, c| c * ($g)(a, b)),
                        (Div, true) => zip3_map(x, y, z, o, |a, b, c| ($g)(a, b) / c),
                        (Div, false) => zip3_map(x, y, z, o, |a, b, c| c / ($g)(a, b)),
                        _ => return false,
                    }
                };
            }
            match first {
                Add => then!(|a: $t, b: $t| a + b),
                Sub => then!(|a: $t, b: $t| a - b),
                Mul => then!(|a: $t, b: $t| a * b),
                Div => then!(|a: $t, b: $t| a / b),
                _ => return false,
            }
            true
        }
    };
}
binary2_generic!(binary2_f32_generic, f32);
binary2_generic!(binary2_f64_generic, f64);

versions! {
    /// Two arithmetic ops in one pass: `o[i] = second(first(x[i], y[i]), z[i])` when
    /// `left`, else `second(z[i], first(x[i], y[i]))`; both ops among `+ - * /` (false
    /// otherwise). Bit-identical to two [`binary_f32`] calls, without the intermediate.
    ///
    /// ```
    /// use kiln_ir::BinaryOp::{Add, Mul};
    /// let mut o = [0.0f32; 2];
    /// assert!(kiln_cpu::vmath::binary2_f32(Mul, Add, true, &[2.0, 3.0], &[4.0, 5.0], &[1.0, 1.0], &mut o));
    /// assert_eq!(o, [9.0, 16.0]);
    /// ```
    pub fn binary2_f32 = binary2_f32_generic(
        first: BinaryOp,
        second: BinaryOp,
        left: bool,
        x: &[f32],
        y: &[f32],
        z: &[f32],
        o: &mut [f32],
    ) -> bool
}

versions! {
    /// [`binary2_f32`] for `f64`.
    ///
    /// ```
    /// use kiln_ir::BinaryOp::{Div, Sub};
    /// let mut o = [0.0f64; 1];
    /// assert!(kiln_cpu::vmath::binary2_f64(Sub, Div, false, &[5.0], &[1.0], &[8.0], &mut o));
    /// assert_eq!(o, [2.0]);
    /// ```
    pub fn binary2_f64 = binary2_f64_generic(
        first: BinaryOp,
        second: BinaryOp,
        left: bool,
        x: &[f64],
        y: &[f64],
        z: &[f64],
        o: &mut [f64],
    ) -> bool
}

/// `o[i] = c[i] ? a[i] : b[i]` on the bit patterns of the elements, without branches (a
/// mask from each `bool`), so it vectorises; a data-dependent branch per element (a ReLU
/// mask is a coin flip) mispredicts about half the time.
macro_rules! select_generic {
    ($name:ident, $t:ty, $u:ty, $to:expr, $from:expr) => {
        #[inline(always)]
        fn $name<const F: bool>(c: &[bool], a: &[$t], b: &[$t], o: &mut [$t]) {
            let n = o.len().min(c.len()).min(a.len()).min(b.len());
            let (c, a, b, o) = (&c[..n], &a[..n], &b[..n], &mut o[..n]);
            for i in 0..n {
                let m = <$u>::from(c[i]).wrapping_neg();
                o[i] = $from(($to(a[i]) & m) | ($to(b[i]) & !m));
            }
        }
    };
}
select_generic!(select_f32_generic, f32, u32, f32::to_bits, f32::from_bits);
select_generic!(select_f64_generic, f64, u64, f64::to_bits, f64::from_bits);
select_generic!(select_i32_generic, i32, u32, |x: i32| x as u32, |x: u32| x
    as i32);
select_generic!(select_i64_generic, i64, u64, |x: i64| x as u64, |x: u64| x
    as i64);

versions! {
    /// `o[i] = if c[i] { a[i] } else { b[i] }`, branch-free (over the shortest of the four).
    ///
    /// ```
    /// let mut o = [0.0f32; 3];
    /// kiln_cpu::vmath::select_f32(&[true, false, true], &[1.0, 2.0, 3.0], &[7.0, 8.0, 9.0], &mut o);
    /// assert_eq!(o, [1.0, 8.0, 3.0]);
    /// ```
    pub fn select_f32 = select_f32_generic(c: &[bool], a: &[f32], b: &[f32], o: &mut [f32]) -> ()
}

versions! {
    /// [`select_f32`] for `f64`.
    ///
    /// ```
    /// let mut o = [0.0f64; 2];
    /// kiln_cpu::vmath::select_f64(&[false, true], &[1.0, 2.0], &[7.0, 8.0], &mut o);
    /// assert_eq!(o, [7.0, 2.0]);
    /// ```
    pub fn select_f64 = select_f64_generic(c: &[bool], a: &[f64], b: &[f64], o: &mut [f64]) -> ()
}

versions! {
    /// [`select_f32`] for `i32`.
    ///
    /// ```
    /// let mut o = [0i32; 2];
    /// kiln_cpu::vmath::select_i32(&[false, true], &[1, -2], &[7, 8], &mut o);
    /// assert_eq!(o, [7, -2]);
    /// ```
    pub fn select_i32 = select_i32_generic(c: &[bool], a: &[i32], b: &[i32], o: &mut [i32]) -> ()
}

versions! {
    /// [`select_f32`] for `i64`.
    ///
    /// ```
    /// let mut o = [0i64; 2];
    /// kiln_cpu::vmath::select_i64(&[true, false], &[-1, 2], &[7, 8], &mut o);
    /// assert_eq!(o, [-1, 8]);
    /// ```
    pub fn select_i64 = select_i64_generic(c: &[bool], a: &[i64], b: &[i64], o: &mut [i64]) -> ()
}

/// `o[i] = if x[i] <op> y[i] { a[i] } else { b[i] }` for the comparisons `Eq Ne Lt Le Gt Ge`
/// (IEEE: a NaN compares unequal to everything) in one pass, the comparison's mask never
/// stored as `bool`s; false (writing nothing) for any other op.
macro_rules! compare_select_generic {
    ($name:ident, $t:ty, $u:ty) => {
        #[inline(always)]
        fn $name<const F: bool>(
            op: BinaryOp,
            x: &[$t],
            y: &[$t],
            a: &[$t],
            b: &[$t],
            o: &mut [$t],
        ) -> bool {
            let n = o.len().min(x.len()).min(y.len()).min(a.len()).min(b.len());
            let (x, y, a, b, o) = (&x[..n], &y[..n], &a[..n], &b[..n], &mut o[..n]);
            // On the bit patterns, as in `select_generic`: written as `if c { a[i] } else
            // { b[i] }`, LLVM selected between the two addresses and gathered.
            macro_rules! each {
                ($f:expr) => {
                    for i in 0..n {
                        let m = <$u>::from($f(x[i], y[i])).wrapping_neg();
                        o[i] = <$t>::from_bits((a[i].to_bits() & m) | (b[i].to_bits() & !m));
                    }
                };
            }
            match op {
                BinaryOp::Eq => each!(|p, q| p == q),
                BinaryOp::Ne => each!(|p, q| p != q),
                BinaryOp::Lt => each!(|p, q| p < q),
                BinaryOp::Le => each!(|p, q| p <= q),
                BinaryOp::Gt => each!(|p, q| p > q),
                BinaryOp::Ge => each!(|p, q| p >= q),
                _ => return false,
            }
            true
        }
    };
}
compare_select_generic!(compare_select_f32_generic, f32, u32);
compare_select_generic!(compare_select_f64_generic, f64, u64);

versions! {
    /// `o[i] = if x[i] <op> y[i] { a[i] } else { b[i] }` for the comparisons
    /// `Eq Ne Lt Le Gt Ge` in one vectorised pass (a ReLU's gradient
    /// `where(h > 0, g, 0)`); returns false (writing nothing) for any other op.
    ///
    /// ```
    /// let mut o = [0.0f32; 3];
    /// let (h, g) = ([1.0, -2.0, f32::NAN], [5.0, 6.0, 7.0]);
    /// assert!(kiln_cpu::vmath::compare_select_f32(kiln_ir::BinaryOp::Gt, &h, &[0.0; 3], &g, &[0.0; 3], &mut o));
    /// assert_eq!(o, [5.0, 0.0, 0.0]);
    /// ```
    pub fn compare_select_f32 = compare_select_f32_generic(op: BinaryOp, x: &[f32], y: &[f32], a: &[f32], b: &[f32], o: &mut [f32]) -> bool
}

versions! {
    /// [`compare_select_f32`] for `f64`.
    ///
    /// ```
    /// let mut o = [0.0f64; 2];
    /// assert!(kiln_cpu::vmath::compare_select_f64(kiln_ir::BinaryOp::Le, &[1.0, 2.0], &[1.0, 1.0], &[3.0, 4.0], &[5.0, 6.0], &mut o));
    /// assert_eq!(o, [3.0, 6.0]);
    /// ```
    pub fn compare_select_f64 = compare_select_f64_generic(op: BinaryOp, x: &[f64], y: &[f64], a: &[f64], b: &[f64], o: &mut [f64]) -> bool
}

/// The number of `f64` partial sums [`sum_f32`] and [`dot_f32`] keep.
const SUM_LANES: usize = 32;

/// The sum of the lane partials, combined pairwise (halves added lane by lane).
///
/// Not inlined on purpose: inlined, LLVM vectorised the accumulation loops that feed it with
/// 2-lane (`xmm`) vectors to match this function's shuffles, even under AVX-512; called
/// through memory, the loops use full-width vectors (`sum_f32` of 4,096 f32 in L1 at AVX-512:
/// 0.098 → 0.060 ns/element, AVX2 0.053; a scratch binary per variant).
#[inline(never)]
fn combine_pairwise(p: &[f64; SUM_LANES]) -> f64 {
    let mut p = *p;
    let mut w = SUM_LANES;
    while w > 1 {
        w /= 2;
        for k in 0..w {
            p[k] += p[k + w];
        }
    }
    p[0]
}

#[inline(always)]
fn sum_f32_generic<const F: bool>(xs: &[f32]) -> f64 {
    // `SUM_LANES` f64 partial sums (vector lanes), combined pairwise: error ~ n·2⁻⁵³ relative.
    let mut p = [0.0f64; SUM_LANES];
    let chunks = xs.chunks_exact(SUM_LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..SUM_LANES {
            p[k] += c[k] as f64;
        }
    }
    let mut s = combine_pairwise(&p);
    for &x in rest {
        s += x as f64;
    }
    s
}

#[inline(always)]
fn dot_f32_generic<const F: bool>(xs: &[f32], ys: &[f32]) -> f64 {
    // `sum_f32` of the f32 products `xs[i] * ys[i]` (each rounded to f32, as a separate
    // multiply would), with the same lanes and association: bit-identical to the two passes.
    let n = xs.len().min(ys.len());
    let (xs, ys) = (&xs[..n], &ys[..n]);
    let mut p = [0.0f64; SUM_LANES];
    let (xc, yc) = (xs.chunks_exact(SUM_LANES), ys.chunks_exact(SUM_LANES));
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (c, d) in xc.zip(yc) {
        for k in 0..SUM_LANES {
            p[k] += (c[k] * d[k]) as f64;
        }
    }
    let mut s = combine_pairwise(&p);
    for (&x, &y) in xr.iter().zip(yr) {
        s += (x * y) as f64;
    }
    s
}

versions! {
    /// [`sum_f32`] of the products `xs[i] * ys[i]` (over the shorter slice), each product
    /// rounded to `f32`: the same value as multiplying into a buffer and summing it, in one
    /// pass (a fused `sum(a * b)`).
    ///
    /// ```
    /// assert_eq!(kiln_cpu::vmath::dot_f32(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]), 32.0);
    /// ```
    pub fn dot_f32 = dot_f32_generic(xs: &[f32], ys: &[f32]) -> f64
}

#[inline(always)]
fn accumulate_f32_generic<const F: bool>(acc: &mut [f64], xs: &[f32]) {
    for (a, &x) in acc.iter_mut().zip(xs) {
        *a += x as f64;
    }
}

versions! {
    /// `acc[i] += xs[i]` widened to `f64` (over the shorter of the two): one row of a sum
    /// over leading axes (`x.sum(axis=0)`) added to the per-column accumulators.
    ///
    /// ```
    /// let mut acc = [1.0f64, 2.0];
    /// kiln_cpu::vmath::accumulate_f32(&mut acc, &[0.5, 0.25]);
    /// assert_eq!(acc, [1.5, 2.25]);
    /// ```
    pub fn accumulate_f32 = accumulate_f32_generic(acc: &mut [f64], xs: &[f32]) -> ()
}

/// `acc[i]` becomes the maximum (or minimum) of itself and `xs[i]`, NaN-propagating as the
/// reductions' fold (a NaN `xs[i]` replaces `acc[i]`; a NaN `acc[i]` stays): one row of an
/// extremum over leading axes (`x.max(axis=0)`) folded into the per-column accumulators, as
/// a select the compiler vectorises at each ISA level.
macro_rules! accumulate_extremum {
    ($generic:ident, $name:ident, $t:ty, $max:literal) => {
        #[inline(always)]
        fn $generic<const F: bool>(acc: &mut [$t], xs: &[$t]) {
            for (a, &x) in acc.iter_mut().zip(xs) {
                let better = if $max { x > *a } else { x < *a };
                #[allow(clippy::eq_op)] // `x != x`: NaN
                let nan = x != x;
                *a = if better || nan { x } else { *a };
            }
        }
        versions! {
            pub(crate) fn $name = $generic(acc: &mut [$t], xs: &[$t]) -> ()
        }
    };
}
accumulate_extremum!(accumulate_max_f32_generic, accumulate_max_f32, f32, true);
accumulate_extremum!(accumulate_min_f32_generic, accumulate_min_f32, f32, false);
accumulate_extremum!(accumulate_max_f64_generic, accumulate_max_f64, f64, true);
accumulate_extremum!(accumulate_min_f64_generic, accumulate_min_f64, f64, false);

/// The sum of `f32` values accumulated in `f64` (32 lanes combined pairwise); the
/// association depends only on `xs.len()`. Fewer than 32 values fill no lane set: their
/// sum is the left fold from 0, computed here without the per-call dispatch to the ISA
/// level's copy (the same value).
///
/// ```
/// assert_eq!(kiln_cpu::vmath::sum_f32(&[1.0; 100]), 100.0);
/// assert_eq!(kiln_cpu::vmath::sum_f32(&[0.5, -2.0]), -1.5);
/// ```
#[inline]
pub fn sum_f32(xs: &[f32]) -> f64 {
    if xs.len() < SUM_LANES {
        return xs.iter().fold(0.0, |s, &x| s + x as f64);
    }
    sum_f32_lanes(xs)
}

versions! {
    /// [`sum_f32`] at the current [`crate::isa`] level, whatever the length.
    fn sum_f32_lanes = sum_f32_generic(xs: &[f32]) -> f64
}

/// The maximum (`max`) or minimum of `xs` in independent lanes, NaN-propagating: any NaN
/// makes the result the last NaN of `xs`; an empty slice gives the fold's identity (−∞ for
/// the maximum, +∞ for the minimum). Which zero is returned when `-0.0` and `0.0` tie for the
/// extremum is unspecified (the lanes see the elements in another order than a left fold).
macro_rules! extremum_generic {
    ($name:ident, $short:ident, $t:ty, $fma:ident) => {
        /// The extremum of fewer elements than a lane set (a softmax over 10 classes): one
        /// plain pass, no lane set-up.
        #[inline(always)]
        fn $short(xs: &[$t], max: bool) -> $t {
            let mut m = if max {
                <$t>::NEG_INFINITY
            } else {
                <$t>::INFINITY
            };
            let mut nan = None;
            for &x in xs {
                if x != x {
                    nan = Some(x);
                } else if (max && x > m) || (!max && x < m) {
                    m = x;
                }
            }
            nan.unwrap_or(m)
        }

        #[inline(always)]
        fn $name<const F: bool, const L: usize>(xs: &[$t], max: bool) -> $t {
            let init = if max {
                <$t>::NEG_INFINITY
            } else {
                <$t>::INFINITY
            };
            if xs.len() < L {
                return $short(xs, max);
            }
            let mut p = [init; L];
            // A lane's NaN flag: the sum of x·0, which is NaN from the first NaN (or ±∞,
            // which then costs a scan) on: one FMA per vector. A `u32` flag per lane
            // (x != x, or-ed) took three more instructions per vector.
            let mut z: [$t; L] = [0.0; L];
            let chunks = xs.chunks_exact(L);
            let rest = chunks.remainder();
            if max {
                for c in chunks {
                    for k in 0..L {
                        let x = c[k];
                        p[k] = if x > p[k] { x } else { p[k] };
                        z[k] = $fma::<F>(x, 0.0, z[k]);
                    }
                }
            } else {
                for c in chunks {
                    for k in 0..L {
                        let x = c[k];
                        p[k] = if x < p[k] { x } else { p[k] };
                        z[k] = $fma::<F>(x, 0.0, z[k]);
                    }
                }
            }
            // The lanes halved pairwise (a vector op per halving), then the rest.
            let mut w = L / 2;
            while w > 0 {
                for k in 0..w {
                    let (a, b) = (p[k], p[k + w]);
                    p[k] = if (max && b > a) || (!max && b < a) {
                        b
                    } else {
                        a
                    };
                }
                w /= 2;
            }
            let mut m = p[0];
            for &x in rest {
                if (max && x > m) || (!max && x < m) {
                    m = x;
                }
            }
            if z.iter().any(|z| z.is_nan()) || rest.iter().any(|x| x.is_nan()) {
                return xs.iter().rev().copied().find(|x| x.is_nan()).unwrap_or(m);
            }
            m
        }
    };
}
extremum_generic!(extremum_f32_generic, extremum_f32_short, f32, fma);
extremum_generic!(extremum_f64_generic, extremum_f64_short, f64, fma64);

/// The maximum (`max = true`) or minimum of `xs`, vectorised; NaN-propagating (a NaN in
/// `xs` gives its last NaN); `-inf`/`+inf` for an empty slice. Slices shorter than a lane
/// set are folded here, without the per-call dispatch to the ISA level's copy (a row
/// reduction over 10 classes calls this once per row).
///
/// ```
/// assert_eq!(kiln_cpu::vmath::extremum_f32(&[1.0, 5.0, -2.0], true), 5.0);
/// assert_eq!(kiln_cpu::vmath::extremum_f32(&[1.0, 5.0, -2.0], false), -2.0);
/// assert!(kiln_cpu::vmath::extremum_f32(&[1.0, f32::NAN], true).is_nan());
/// ```
#[inline]
pub fn extremum_f32(xs: &[f32], max: bool) -> f32 {
    if xs.len() < 32 {
        return extremum_f32_short(xs, max);
    }
    extremum_f32_lanes(xs, max)
}

/// [`extremum_f32`] for `f64`.
///
/// ```
/// assert_eq!(kiln_cpu::vmath::extremum_f64(&[], true), f64::NEG_INFINITY);
/// assert_eq!(kiln_cpu::vmath::extremum_f64(&[3.0, -1.0], false), -1.0);
/// ```
#[inline]
pub fn extremum_f64(xs: &[f64], max: bool) -> f64 {
    if xs.len() < 16 {
        return extremum_f64_short(xs, max);
    }
    extremum_f64_lanes(xs, max)
}

versions! {
    /// [`extremum_f32`] at the current [`crate::isa`] level, whatever the length. Lanes:
    /// 32 at AVX2, where 64 (8 `ymm` maxima and 8 NaN flags) spilled to the stack and ran
    /// three times slower; 64 at AVX-512 and the baseline, where fewer were slower
    /// (`docs/performance-log.md`, 2026-11-28).
    fn extremum_f32_lanes = extremum_f32_generic lanes(64, 32, 64)(xs: &[f32], max: bool) -> f32
}

versions! {
    /// [`extremum_f64`] at the current [`crate::isa`] level, whatever the length. Lanes: 8
    /// at the baseline and 16 at AVX2 (four registers of maxima and four of NaN flags; 32
    /// spilled), 32 at AVX-512.
    fn extremum_f64_lanes = extremum_f64_generic lanes(8, 16, 32)(xs: &[f64], max: bool) -> f64
}

/// `o[i] = x[i] <op> y[i]` for a comparison `op` (over the shortest of the three slices);
/// IEEE semantics: a NaN compares unequal to everything.
#[inline(always)]
fn compare_lanes<T: PartialOrd + Copy>(op: BinaryOp, x: &[T], y: &[T], o: &mut [bool]) -> bool {
    let n = x.len().min(y.len()).min(o.len());
    let (x, y, o) = (&x[..n], &y[..n], &mut o[..n]);
    macro_rules! each {
        ($f:expr) => {
            for i in 0..n {
                o[i] = $f(x[i], y[i]);
            }
        };
    }
    match op {
        BinaryOp::Eq => each!(|a, b| a == b),
        BinaryOp::Ne => each!(|a, b| a != b),
        BinaryOp::Lt => each!(|a, b| a < b),
        BinaryOp::Le => each!(|a, b| a <= b),
        BinaryOp::Gt => each!(|a, b| a > b),
        BinaryOp::Ge => each!(|a, b| a >= b),
        _ => return false,
    }
    true
}

macro_rules! compare_generic {
    ($name:ident, $t:ty) => {
        #[inline(always)]
        fn $name<const F: bool>(op: BinaryOp, x: &[$t], y: &[$t], o: &mut [bool]) -> bool {
            compare_lanes(op, x, y, o)
        }
    };
}
compare_generic!(compare_f32_generic, f32);
compare_generic!(compare_f64_generic, f64);
compare_generic!(compare_i32_generic, i32);
compare_generic!(compare_i64_generic, i64);

versions! {
    /// `o[i] = x[i] <op> y[i]` for the comparisons `Eq Ne Lt Le Gt Ge`, vectorised at the
    /// current [`crate::isa`] level; returns false (writing nothing) for any other op.
    ///
    /// ```
    /// let mut o = [false; 3];
    /// assert!(kiln_cpu::vmath::compare_f32(kiln_ir::BinaryOp::Gt, &[1.0, 2.0, f32::NAN], &[1.5, 1.5, 0.0], &mut o));
    /// assert_eq!(o, [false, true, false]);
    /// ```
    pub fn compare_f32 = compare_f32_generic(op: BinaryOp, x: &[f32], y: &[f32], o: &mut [bool]) -> bool
}

versions! {
    /// [`compare_f32`] for `f64`.
    ///
    /// ```
    /// let mut o = [false; 2];
    /// assert!(kiln_cpu::vmath::compare_f64(kiln_ir::BinaryOp::Ne, &[1.0, f64::NAN], &[1.0, f64::NAN], &mut o));
    /// assert_eq!(o, [false, true]);
    /// ```
    pub fn compare_f64 = compare_f64_generic(op: BinaryOp, x: &[f64], y: &[f64], o: &mut [bool]) -> bool
}

versions! {
    /// [`compare_f32`] for `i32`.
    ///
    /// ```
    /// let mut o = [false; 2];
    /// assert!(kiln_cpu::vmath::compare_i32(kiln_ir::BinaryOp::Le, &[1, 3], &[2, 2], &mut o));
    /// assert_eq!(o, [true, false]);
    /// ```
    pub fn compare_i32 = compare_i32_generic(op: BinaryOp, x: &[i32], y: &[i32], o: &mut [bool]) -> bool
}

versions! {
    /// [`compare_f32`] for `i64`.
    ///
    /// ```
    /// let mut o = [false; 2];
    /// assert!(kiln_cpu::vmath::compare_i64(kiln_ir::BinaryOp::Eq, &[i64::MIN, 3], &[i64::MIN, 2], &mut o));
    /// assert_eq!(o, [true, false]);
    /// ```
    pub fn compare_i64 = compare_i64_generic(op: BinaryOp, x: &[i64], y: &[i64], o: &mut [bool]) -> bool
}
