//! WGSL source of the helper functions generated kernels call: numpy semantics for the ops
//! WGSL leaves undefined (`log` of negatives, `pow` of negatives, float-to-int of NaN, integer
//! division by zero), `f64` transcendentals (Vulkan's `GLSL.std.450` `exp`/`log`/`sin`/… are
//! 32-bit only), Philox random numbers, and the status word of fallible kernels.
//!
//! Each helper is a template over a type `T` (`f32`/`f64`/`i32`/`i64`) instantiated on
//! demand. Accuracy (checked by the backend's tests against the `f64` oracle):
//! * `f32`: the driver's `exp log sin cos` (Vulkan bounds: `exp` 3 + 2·|x| ulp, `log` 3 ulp
//!   outside [0.5, 2] and 2⁻²¹ absolute inside, `sin`/`cos` 2⁻¹¹ absolute on [-π, π] —
//!   software drivers are far better); `expm1`, `log1p`, `tanh` are built on them with
//!   Kahan's cancellation-free forms.
//! * `f64`: own range-reduced polynomials: `exp`, `log` within a few ulp; `sin`/`cos` within a
//!   few ulp for |x| ≤ 10⁶ (three-part Cody–Waite reduction), degrading beyond; `pow` as
//!   `exp(y·log x)` (relative error ≈ |y·log x|·2⁻⁵³). Where the adapter has 64-bit
//!   integers, `exp` scales by 2^k and `log` splits off the exponent through the bits
//!   rather than `ldexp`/`frexp` (same results; NVIDIA's compiler rejected shaders holding
//!   several of those).
//!
//! Depends on nothing (it is text).

/// Helper names a kernel may need, with their instantiated text. With `int64` (the adapter
/// has `SHADER_INT64`), `f64` `exp` and `log` scale and split by their exponent bits instead
/// of `ldexp`/`frexp`.
pub(crate) fn helper(name: &str, ty: &str, int64: bool) -> String {
    let t = match name {
        "consts" => CONSTS,
        "log" if ty == "f64" && int64 => {
            return instantiate(&LOG_F64.replace(FREXP, FREXP_BITS), ty)
        }
        "log" if ty == "f64" => LOG_F64,
        "log" => LOG_F32,
        "exp" if ty == "f64" && int64 => {
            return instantiate(&EXP_F64.replace(LDEXP, LDEXP_BITS), ty)
        }
        "exp" if ty == "f64" => EXP_F64,
        "exp" => EXP_F32,
        "sqrt" => SQRT,
        "sincos" if ty == "f64" => SINCOS_F64,
        "sincos" => SINCOS_F32,
        "expm1" => EXPM1,
        "log1p" => LOG1P,
        "tanh" => TANH,
        "pow" => POW,
        "fdivmod" => FDIVMOD,
        "idivmod" => IDIVMOD,
        "ipow" => IPOW,
        "f2i32" => F2I32,
        "f2i64" => F2I64,
        "words" if ty == "i64" => WORDS_I64,
        "words" => WORDS_I32,
        "philox" => PHILOX,
        "ext" => EXT,
        "status" => STATUS,
        other => panic!("unknown WGSL helper {other}"),
    };
    let t = if name == "pow" {
        let core = if ty == "f64" {
            "k_exp_T(y * k_log_T(ax))"
        } else {
            "pow(ax, y)"
        };
        t.replace("POWCORE", core)
    } else {
        t.to_string()
    };
    instantiate(&t, ty)
}

/// Replaces the type parameter `T` (a standalone identifier, or a `_T` name suffix) by `ty`.
fn instantiate(text: &str, ty: &str) -> String {
    let b = text.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = String::with_capacity(text.len());
    for (i, ch) in text.char_indices() {
        let is_param = ch == 'T'
            && !b.get(i + 1).is_some_and(|&c| ident(c))
            && (i == 0 || !ident(b[i - 1]) || (b[i - 1] == b'_' && i >= 2 && ident(b[i - 2])));
        if is_param {
            out.push_str(ty);
        } else {
            out.push(ch);
        }
    }
    out
}

/// Which helpers `name` calls (so they are emitted first).
pub(crate) fn deps(name: &str) -> &'static [&'static str] {
    match name {
        "log" | "exp" | "sqrt" | "sincos" | "fdivmod" | "f2i32" | "f2i64" => &["consts"],
        "expm1" => &["consts", "exp", "log"],
        "log1p" => &["consts", "log"],
        "tanh" => &["consts", "exp", "log", "expm1"],
        "pow" => &["consts", "exp", "log"],
        "idivmod" | "ipow" => &["status", "words"],
        _ => &[],
    }
}

const CONSTS: &str = "
fn k_nan_T() -> T { return T(bitcast<f32>(0x7fc00000u)); }
fn k_inf_T() -> T { return T(bitcast<f32>(0x7f800000u)); }
fn k_isnan_T(x: T) -> bool { return (bitcast<u32>(f32(x)) & 0x7fffffffu) > 0x7f800000u; }
";

const LOG_F32: &str = "
fn k_log_T(x: T) -> T {
    if (k_isnan_T(x)) { return x; }
    if (x < 0.0) { return k_nan_T(); }
    if (x == 0.0) { return -k_inf_T(); }
    if (x == k_inf_T()) { return x; }
    return log(x);
}
";

const EXP_F32: &str = "
fn k_exp_T(x: T) -> T {
    if (k_isnan_T(x)) { return x; }
    if (x > 88.72284) { return k_inf_T(); }
    if (x < -103.97208) { return 0.0; }
    return exp(x);
}
";

const SQRT: &str = "
fn k_sqrt_T(x: T) -> T {
    if (x < T(0.0)) { return k_nan_T(); }
    return sqrt(x);
}
";

const SINCOS_F32: &str = "
fn k_sin_T(x: T) -> T {
    if (abs(x) == k_inf_T()) { return k_nan_T(); }
    return sin(x);
}
fn k_cos_T(x: T) -> T {
    if (abs(x) == k_inf_T()) { return k_nan_T(); }
    return cos(x);
}
";

const EXP_F64: &str = "
fn k_exp_T(x: T) -> T {
    if (k_isnan_T(x)) { return x; }
    if (x > 709.782712893384lf) { return k_inf_T(); }
    if (x < -745.1332191019412lf) { return 0.0lf; }
    let k = round(x * 1.4426950408889634lf);
    let r = (x - k * 0.6931471803691238lf) - k * 1.9082149292705877e-10lf;
    var p = 1.0lf / 6227020800.0lf;
    p = p * r + 1.0lf / 479001600.0lf;
    p = p * r + 1.0lf / 39916800.0lf;
    p = p * r + 1.0lf / 3628800.0lf;
    p = p * r + 1.0lf / 362880.0lf;
    p = p * r + 1.0lf / 40320.0lf;
    p = p * r + 1.0lf / 5040.0lf;
    p = p * r + 1.0lf / 720.0lf;
    p = p * r + 1.0lf / 120.0lf;
    p = p * r + 1.0lf / 24.0lf;
    p = p * r + 1.0lf / 6.0lf;
    p = p * r + 0.5lf;
    p = p * r * r + r + 1.0lf;
    let ki = i32(k);
    let h = ki / 2;
    return ldexp(ldexp(p, h), ki - h);
}
";

/// `EXP_F64`'s scaling by 2^k, in two steps so that each factor is a normal number.
const LDEXP: &str = "return ldexp(ldexp(p, h), ki - h);";
/// The same scaling by factors built from their exponent bits (the same rounding: the first
/// product is exact). NVIDIA's Vulkan compiler failed on shaders holding several inlined
/// `f64` `ldexp`s and `frexp`s ("NVVM compilation failed").
const LDEXP_BITS: &str = "return p * bitcast<f64>(u64(u32(h + 1023)) << 52u) \
    * bitcast<f64>(u64(u32(ki - h + 1023)) << 52u);";
/// `LOG_F64`'s split of a normal positive `x` into `m` in [0.5, 1) and its exponent.
const FREXP: &str = "let fe = frexp(x);
    var m = fe.fract;
    var e = i32(fe.exp) + e0;";
/// The same split from the bits.
const FREXP_BITS: &str = "let xb = bitcast<u64>(x);
    var m = bitcast<f64>((xb & 0x000ffffffffffffflu) | 0x3fe0000000000000lu);
    var e = i32(u32(xb >> 52u)) - 1022 + e0;";

const LOG_F64: &str = "
fn k_log_T(x0: T) -> T {
    if (k_isnan_T(x0)) { return x0; }
    if (x0 < 0.0lf) { return k_nan_T(); }
    if (x0 == 0.0lf) { return -k_inf_T(); }
    if (x0 == k_inf_T()) { return x0; }
    var x = x0;
    var e0 = 0;
    if (x < 2.2250738585072014e-308lf) {
        x = x * 18014398509481984.0lf;
        e0 = -54;
    }
    let fe = frexp(x);
    var m = fe.fract;
    var e = i32(fe.exp) + e0;
    if (m < 0.7071067811865476lf) {
        m = m * 2.0lf;
        e = e - 1;
    }
    let f = m - 1.0lf;
    let s = f / (2.0lf + f);
    let z = s * s;
    var p = 1.0lf / 23.0lf;
    p = p * z + 1.0lf / 21.0lf;
    p = p * z + 1.0lf / 19.0lf;
    p = p * z + 1.0lf / 17.0lf;
    p = p * z + 1.0lf / 15.0lf;
    p = p * z + 1.0lf / 13.0lf;
    p = p * z + 1.0lf / 11.0lf;
    p = p * z + 1.0lf / 9.0lf;
    p = p * z + 1.0lf / 7.0lf;
    p = p * z + 1.0lf / 5.0lf;
    p = p * z + 1.0lf / 3.0lf;
    let ef = T(e);
    // log(m) = f - f²/2 + s·(f²/2 + z·p·2): the f²/2 split keeps the leading term exact.
    let hfsq = 0.5lf * f * f;
    let lm = f - (hfsq - s * (hfsq + 2.0lf * z * p));
    return ef * 0.6931471803691238lf + (lm + ef * 1.9082149292705877e-10lf);
}
";

const SINCOS_F64: &str = "
fn k_sinpoly_T(r: T) -> T {
    let z = r * r;
    var p = -1.0lf / 1307674368000.0lf;
    p = p * z + 1.0lf / 6227020800.0lf;
    p = p * z - 1.0lf / 39916800.0lf;
    p = p * z + 1.0lf / 362880.0lf;
    p = p * z - 1.0lf / 5040.0lf;
    p = p * z + 1.0lf / 120.0lf;
    p = p * z - 1.0lf / 6.0lf;
    return r + r * z * p;
}
fn k_cospoly_T(r: T) -> T {
    let z = r * r;
    var p = 1.0lf / 20922789888000.0lf;
    p = p * z - 1.0lf / 87178291200.0lf;
    p = p * z + 1.0lf / 479001600.0lf;
    p = p * z - 1.0lf / 3628800.0lf;
    p = p * z + 1.0lf / 40320.0lf;
    p = p * z - 1.0lf / 720.0lf;
    p = p * z + 1.0lf / 24.0lf;
    return 1.0lf - 0.5lf * z + z * z * p;
}
// Quadrant (0..3) and remainder r of x = q·π/2 + r, |r| ≤ π/4.
fn k_reduce_T(x: T) -> vec2<T> {
    let k = round(x * 0.6366197723675814lf);
    let r = ((x - k * 1.5707963267341256lf) - k * 6.077100506303966e-11lf)
        - k * 2.0222662487111665e-21lf;
    let q = k - 4.0lf * floor(k * 0.25lf);
    return vec2<T>(q, r);
}
fn k_sin_T(x: T) -> T {
    if (k_isnan_T(x) || abs(x) == k_inf_T()) { return k_nan_T(); }
    if (x == 0.0lf) { return x; }
    let qr = k_reduce_T(x);
    let s = k_sinpoly_T(qr.y);
    let c = k_cospoly_T(qr.y);
    if (qr.x == 0.0lf) { return s; }
    if (qr.x == 1.0lf) { return c; }
    if (qr.x == 2.0lf) { return -s; }
    return -c;
}
fn k_cos_T(x: T) -> T {
    if (k_isnan_T(x) || abs(x) == k_inf_T()) { return k_nan_T(); }
    let qr = k_reduce_T(x);
    let s = k_sinpoly_T(qr.y);
    let c = k_cospoly_T(qr.y);
    if (qr.x == 0.0lf) { return c; }
    if (qr.x == 1.0lf) { return -s; }
    if (qr.x == 2.0lf) { return -c; }
    return s;
}
";

const EXPM1: &str = "
fn k_expm1_T(x: T) -> T {
    let u = k_exp_T(x);
    if (u == T(1.0)) { return x; }
    let um1 = u - T(1.0);
    if (um1 == T(-1.0)) { return T(-1.0); }
    if (u == k_inf_T() || k_isnan_T(x)) { return u; }
    // Past where subtracting 1 changes nothing, exp(x) is the answer: Kahan's correction
    // would only add the error of log(u).
    if (um1 == u) { return u; }
    return um1 * x / k_log_T(u);
}
";

const LOG1P: &str = "
// log1p(x) = 2·atanh(x / (2 + x)) near 0 (no cancellation), log(1 + x) elsewhere.
fn k_log1p_T(x: T) -> T {
    if (k_isnan_T(x) || x == k_inf_T()) { return x; }
    if (x < T(-0.2928932188134524) || x > T(0.41421356237309503)) { return k_log_T(T(1.0) + x); }
    if (x == T(0.0)) { return x; }
    let s = x / (T(2.0) + x);
    let z = s * s;
    var p = T(1.0) / T(23.0);
    p = p * z + T(1.0) / T(21.0);
    p = p * z + T(1.0) / T(19.0);
    p = p * z + T(1.0) / T(17.0);
    p = p * z + T(1.0) / T(15.0);
    p = p * z + T(1.0) / T(13.0);
    p = p * z + T(1.0) / T(11.0);
    p = p * z + T(1.0) / T(9.0);
    p = p * z + T(1.0) / T(7.0);
    p = p * z + T(1.0) / T(5.0);
    p = p * z + T(1.0) / T(3.0);
    let hfsq = T(0.5) * x * x;
    return x - (hfsq - s * (hfsq + T(2.0) * z * p));
}
";

const TANH: &str = "
fn k_tanh_T(x: T) -> T {
    let a = abs(x);
    if (a == T(0.0) || k_isnan_T(x)) { return x; }
    var r = T(1.0);
    if (a < T(22.0)) {
        let t = k_expm1_T(T(2.0) * a);
        r = t / (t + T(2.0));
    }
    return select(r, -r, x < T(0.0));
}
";

const POW: &str = "
fn k_pow_T(x: T, y: T) -> T {
    if (y == T(0.0) || x == T(1.0)) { return T(1.0); }
    if (k_isnan_T(x) || k_isnan_T(y)) { return k_nan_T(); }
    let ax = abs(x);
    let yint = floor(y) == y;
    let yodd = yint && abs(y) < T(9007199254740992.0) && !(floor(y * T(0.5)) == y * T(0.5));
    let negx = x < T(0.0) || (x == T(0.0) && T(1.0) / x < T(0.0));
    if (x < T(0.0) && !yint && ax != k_inf_T()) { return k_nan_T(); }
    var r: T;
    if (abs(y) == k_inf_T()) {
        if (ax == T(1.0)) { return T(1.0); }
        r = select(k_inf_T(), T(0.0), (ax < T(1.0)) == (y > T(0.0)));
        return r;
    } else if (ax == T(0.0)) {
        r = select(k_inf_T(), T(0.0), y > T(0.0));
    } else if (ax == k_inf_T()) {
        r = select(T(0.0), k_inf_T(), y > T(0.0));
    } else {
        r = POWCORE;
    }
    return select(r, -r, negx && yodd);
}
";

const FDIVMOD: &str = "
// C's fmod, exact: subtract the largest power-of-two multiple of |b| not above the
// remainder until it is below |b| (each subtraction is exact by Sterbenz's lemma).
fn k_fmod_T(a: T, b: T) -> T {
    if (k_isnan_T(a) || k_isnan_T(b) || abs(a) == k_inf_T() || b == T(0.0)) { return k_nan_T(); }
    if (abs(b) == k_inf_T()) { return a; }
    let y = abs(b);
    var r = abs(a);
    for (var it = 0; it < 2200 && r >= y; it = it + 1) {
        var t = ldexp(y, i32(frexp(r).exp) - i32(frexp(y).exp));
        if (t > r) { t = t * T(0.5); }
        r = r - t;
    }
    return select(r, -r, a < T(0.0) || (a == T(0.0) && T(1.0) / a < T(0.0)));
}
// numpy's remainder and floor_divide (npy_divmod) on top of fmod.
fn k_frem_T(a: T, b: T) -> T {
    if (b == T(0.0)) { return k_fmod_T(a, b); }
    let m = k_fmod_T(a, b);
    if (!(m == T(0.0))) {
        if ((b < T(0.0) && m > T(0.0)) || (b > T(0.0) && m < T(0.0))) { return m + b; }
        return m;
    }
    return select(T(0.0), -T(0.0), b < T(0.0));
}
fn k_ffloordiv_T(a: T, b: T) -> T {
    if (b == T(0.0)) { return a / b; }
    let m = k_fmod_T(a, b);
    var d = (a - m) / b;
    if ((b < T(0.0) && m > T(0.0)) || (b > T(0.0) && m < T(0.0))) { d = d - T(1.0); }
    if (!(d == T(0.0))) {
        let f = floor(d);
        return select(f, f + T(1.0), d - f > T(0.5));
    }
    let q = a / b;
    return select(T(0.0), -T(0.0), q < T(0.0) || (q == T(0.0) && T(1.0) / q < T(0.0)));
}
";

const STATUS: &str = "
fn k_fail(code: u32, v: vec2<u32>) {
    if (atomicCompareExchangeWeak(&kstatus[0], 0u, code).exchanged) {
        atomicStore(&kstatus[1], v.x);
        atomicStore(&kstatus[2], v.y);
    }
}
";

const IDIVMOD: &str = "
fn k_ifloordiv_T(a: T, b: T) -> T {
    if (b == T(0)) { k_fail(1u, k_words_T(a)); return T(0); }
    let q = a / b;
    let r = a - q * b;
    return select(q, q - T(1), r != T(0) && ((r ^ b) < T(0)));
}
fn k_irem_T(a: T, b: T) -> T {
    if (b == T(0)) { k_fail(2u, k_words_T(a)); return T(0); }
    let r = a - (a / b) * b;
    return select(r, r + b, r != T(0) && ((r ^ b) < T(0)));
}
";

const IPOW: &str = "
fn k_ipow_T(x: T, y: T) -> T {
    if (y < T(0)) {
        k_fail(3u, k_words_T(x));
        atomicStore(&kstatus[3], k_words_T(y).x);
        atomicStore(&kstatus[4], k_words_T(y).y);
        return T(0);
    }
    var acc = T(1);
    var b = x;
    var e = y;
    loop {
        if (e == T(0)) { break; }
        if ((e & T(1)) == T(1)) { acc = acc * b; }
        b = b * b;
        e = e >> 1u;
    }
    return acc;
}
";

const WORDS_I32: &str = "
fn k_words_T(a: T) -> vec2<u32> { return vec2<u32>(bitcast<u32>(a), select(0u, 0xffffffffu, a < 0)); }
";

const WORDS_I64: &str = "
fn k_words_T(a: T) -> vec2<u32> { return vec2<u32>(u32(a & 0xffffffffli), u32(a >> 32u)); }
";

// Float to integer as Rust's `as`: toward zero, saturating, NaN to 0.
const F2I32: &str = "
fn k_f2i32_T(x: T) -> i32 {
    if (k_isnan_T(x)) { return 0; }
    if (x >= T(2147483648.0)) { return 2147483647; }
    if (x <= T(-2147483648.0)) { return -2147483647 - 1; }
    return i32(x);
}
";

const F2I64: &str = "
fn k_f2i64_T(x: T) -> i64 {
    if (k_isnan_T(x)) { return 0li; }
    if (x >= T(9223372036854775808.0)) { return 9223372036854775807li; }
    if (x <= T(-9223372036854775808.0)) { return -9223372036854775807li - 1li; }
    return i64(x);
}
";

// 32-to-64-bit integer conversions from non-negative 16-bit halves only: some drivers
// (lavapipe) sign- or zero-extend `i64(x)` inconsistently depending on the context.
const EXT: &str = "
fn k_u2l(x: u32) -> i64 { return i64(x >> 16u) * 65536li + i64(x & 0xffffu); }
fn k_i2l(x: i32) -> i64 { return (i64((x >> 16) + 32768) - 32768li) * 65536li + i64(x & 0xffff); }
";

const PHILOX: &str = "
fn k_mulhilo(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    return vec2<u32>(p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u), (mid << 16u) | (p00 & 0xffffu));
}
fn k_philox(lo: u32, hi: u32, k0: u32, k1: u32) -> vec4<u32> {
    var c = vec4<u32>(lo, hi, 0u, 0u);
    var ka = k0;
    var kb = k1;
    for (var r = 0u; r < 10u; r = r + 1u) {
        if (r > 0u) {
            ka = ka + 0x9E3779B9u;
            kb = kb + 0xBB67AE85u;
        }
        let p0 = k_mulhilo(0xD2511F53u, c.x);
        let p1 = k_mulhilo(0xCD9E8D57u, c.z);
        c = vec4<u32>(p1.x ^ c.y ^ ka, p1.y, p0.x ^ c.w ^ kb, p0.y);
    }
    return c;
}
fn k_uniform_f32(b: vec4<u32>) -> f32 { return f32(b.x >> 8u) * (1.0 / 16777216.0); }
";

#[cfg(test)]
mod tests {
    use super::helper;

    #[test]
    fn f64_exp_and_log_use_exponent_bits_where_the_adapter_has_int64() {
        let (exp, log) = (helper("exp", "f64", true), helper("log", "f64", true));
        assert!(
            !exp.contains("ldexp") && exp.contains("bitcast<f64>"),
            "{exp}"
        );
        assert!(
            !log.contains("frexp") && log.contains("bitcast<u64>"),
            "{log}"
        );
        assert!(helper("exp", "f64", false).contains("ldexp"));
        assert!(helper("log", "f64", false).contains("frexp"));
        assert_eq!(helper("exp", "f32", true), helper("exp", "f32", false));
    }
}
