//! Run-time instruction-set selection.
//!
//! A default `cargo build --release` targets baseline x86-64 (SSE2). The hot loops of the
//! backend (the elementwise float ops and the vectorised math of [`crate::vmath`]) are written
//! once as `#[inline(always)]` generic functions and compiled three times by [`versions!`]: at
//! the baseline, with `avx2,fma`, and with AVX-512 (`avx512f,avx512vl,avx512dq,avx512bw`). The
//! copy to run is picked per call from [`isa`], detected once with `is_x86_feature_detected!`.
//!
//! On aarch64 the baseline is NEON (every aarch64 Linux CPU has it, so nothing is detected):
//! the `sse2` level runs the same lane kernels compiled for NEON, with fused multiply-add
//! ([`BASE_FMA`]), and is named `neon`. No wider level exists there yet (SVE is not used).
//!
//! The level can be lowered (never raised above what the CPU has) with the environment
//! variable `KILN_CPU_ISA=scalar|sse2|avx2|avx512`, read once, or [`set_isa`] — tests use it
//! to run every path the machine can run:
//!
//! * `scalar`: the plain per-element loops with `std`'s libm (no lane kernels);
//! * `sse2` (`neon` on aarch64): the lane kernels compiled for the baseline target;
//! * `avx2`: the same kernels with AVX2 + FMA; `avx512`: with AVX-512.
//!
//! Under Miri only `scalar` and `sse2` exist (detection reports no AVX), so Miri runs the safe
//! fallback paths.
//!
//! The level caps kiln's own kernels only: `matrixmultiply`, which takes the products kiln's
//! GEMM does not (`crate::kernels::matmul`), picks its kernel from the CPU alone and has no
//! switch, so on an AVX-512 CPU held to `avx2` those products still run its AVX-512 kernel.
//!
//! Soundness: the `unsafe` calls in [`versions!`] run a `#[target_feature]` copy only when the
//! current level says the CPU has those features; the level is the detected one or lower
//! ([`set_isa`] clamps), so no instruction the CPU lacks is ever executed.
//!
//! Depends on nothing else in the crate.

use std::sync::atomic::{AtomicU8, Ordering};

/// An instruction-set level of the CPU kernels, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Per-element loops with `std`'s math functions (the reference-like path).
    Scalar = 0,
    /// Lane kernels at the baseline target features: SSE2 on x86-64, NEON on aarch64.
    Sse2 = 1,
    /// Lane kernels with AVX2 and FMA.
    Avx2 = 2,
    /// Lane kernels with AVX-512 (F, VL, DQ, BW) and FMA.
    Avx512 = 3,
}

impl Isa {
    /// Every level, lowest first.
    pub const ALL: [Isa; 4] = [Isa::Scalar, Isa::Sse2, Isa::Avx2, Isa::Avx512];

    /// The level's name as `KILN_CPU_ISA` spells it (the baseline is `neon` on aarch64).
    ///
    /// ```
    /// assert_eq!(kiln_cpu::Isa::Avx2.name(), "avx2");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Sse2 if cfg!(target_arch = "aarch64") => "neon",
            Isa::Sse2 => "sse2",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Parses a name (`scalar`, `sse2`, `neon`, `avx2`, `avx512`); `sse2` and `neon` both
    /// name the baseline lane kernels on any architecture.
    ///
    /// ```
    /// assert_eq!(kiln_cpu::Isa::parse("sse2"), Some(kiln_cpu::Isa::Sse2));
    /// assert_eq!(kiln_cpu::Isa::parse("NEON"), Some(kiln_cpu::Isa::Sse2));
    /// ```
    pub fn parse(s: &str) -> Option<Isa> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("neon") || s.eq_ignore_ascii_case("sse2") {
            return Some(Isa::Sse2);
        }
        Isa::ALL
            .into_iter()
            .find(|i| i.name().eq_ignore_ascii_case(s))
    }

    fn from_u8(v: u8) -> Isa {
        Isa::ALL[v.min(3) as usize]
    }
}

/// Whether the baseline lane kernels use fused multiply-add: yes on aarch64 (NEON's `fmla`
/// is part of the baseline), no on x86-64 (SSE2 has no FMA, and `mul_add` there would call
/// libm).
///
/// ```
/// assert_eq!(kiln_cpu::BASE_FMA, cfg!(target_arch = "aarch64"));
/// ```
pub const BASE_FMA: bool = cfg!(target_arch = "aarch64");

const UNSET: u8 = u8::MAX;
static LEVEL: AtomicU8 = AtomicU8::new(UNSET);

/// The highest level this CPU supports.
///
/// ```
/// assert!(kiln_cpu::detected_isa() >= kiln_cpu::Isa::Sse2);
/// ```
pub fn detected_isa() -> Isa {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let avx2 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        let avx512 = avx2
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512bw");
        if avx512 {
            Isa::Avx512
        } else if avx2 {
            Isa::Avx2
        } else {
            Isa::Sse2
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    {
        Isa::Sse2
    }
}

/// The level the kernels run at: the detected one, lowered by `KILN_CPU_ISA` or
/// [`set_isa`].
///
/// ```
/// assert!(kiln_cpu::isa() <= kiln_cpu::detected_isa());
/// ```
#[inline]
pub fn isa() -> Isa {
    let v = LEVEL.load(Ordering::Relaxed);
    if v != UNSET {
        return Isa::from_u8(v);
    }
    let mut level = detected_isa();
    if let Some(req) = std::env::var("KILN_CPU_ISA")
        .ok()
        .and_then(|s| Isa::parse(&s))
    {
        level = level.min(req);
    }
    LEVEL.store(level as u8, Ordering::Relaxed);
    level
}

/// Sets the level (clamped to [`detected_isa`]) for the whole process; returns the level in
/// force. Results at different levels agree within each op's documented error.
///
/// ```
/// let before = kiln_cpu::isa();
/// assert_eq!(kiln_cpu::set_isa(kiln_cpu::Isa::Scalar), kiln_cpu::Isa::Scalar);
/// kiln_cpu::set_isa(before);
/// ```
pub fn set_isa(level: Isa) -> Isa {
    let level = level.min(detected_isa());
    LEVEL.store(level as u8, Ordering::Relaxed);
    level
}

/// `pub fn $name(args) -> ret` calling `$generic::<FMA>(args)` compiled for the current
/// [`isa`] level: `$generic` must be `#[inline(always)]` so its body is compiled with each
/// copy's target features (`FMA` is true in the AVX2 and AVX-512 copies, and [`BASE_FMA`] in
/// the baseline one).
macro_rules! versions {
    ($(#[$m:meta])* $vis:vis fn $name:ident = $generic:ident ($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) -> $ret {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2($($arg: $ty),*) -> $ret {
                $generic::<true>($($arg),*)
            }
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
            unsafe fn avx512($($arg: $ty),*) -> $ret {
                $generic::<true>($($arg),*)
            }
            match $crate::simd::isa() {
                #[cfg(all(target_arch = "x86_64", not(miri)))]
                // SAFETY: `isa()` reports `Avx512` only if `detected_isa()` found avx512f/vl/dq/bw,
                // avx2 and fma on this CPU (the level is never raised above detection).
                $crate::simd::Isa::Avx512 => unsafe { avx512($($arg),*) },
                #[cfg(all(target_arch = "x86_64", not(miri)))]
                // SAFETY: `isa()` reports `Avx2` or higher only if the CPU has avx2 and fma.
                $crate::simd::Isa::Avx2 => unsafe { avx2($($arg),*) },
                _ => $generic::<{ $crate::simd::BASE_FMA }>($($arg),*),
            }
        }
    };
    // The same with a second const parameter, a lane count per level
    // (`lanes(BASE, AVX2, AVX512)`): loops whose independent lanes fill the register file
    // at one width spill at another (16 `ymm` registers against 32 `zmm`).
    ($(#[$m:meta])* $vis:vis fn $name:ident = $generic:ident lanes($base:expr, $l2:expr, $l512:expr) ($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) -> $ret {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2($($arg: $ty),*) -> $ret {
                $generic::<true, { $l2 }>($($arg),*)
            }
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
            unsafe fn avx512($($arg: $ty),*) -> $ret {
                $generic::<true, { $l512 }>($($arg),*)
            }
            match $crate::simd::isa() {
                #[cfg(all(target_arch = "x86_64", not(miri)))]
                // SAFETY: as in the first form: `Avx512` only where detection found AVX-512.
                $crate::simd::Isa::Avx512 => unsafe { avx512($($arg),*) },
                #[cfg(all(target_arch = "x86_64", not(miri)))]
                // SAFETY: as in the first form: `Avx2` or higher only with avx2 and fma.
                $crate::simd::Isa::Avx2 => unsafe { avx2($($arg),*) },
                _ => $generic::<{ $crate::simd::BASE_FMA }, { $base }>($($arg),*),
            }
        }
    };
}
pub(crate) use versions;
