//! The x86 register blocks through `std::arch` intrinsics: [`Zmm`] (512-bit vectors, the
//! AVX-512 copies) and [`Ymm`] (the AVX2 copies' dot products), a fixed vector width
//! whatever the target's preferred one.
//! `unsafe`: unaligned vector loads and stores inside fixed-size arrays and bounds-checked
//! slices, and the packed block's pointer walk after one length check; compiled out under
//! Miri.
//!
//! Depends on [`super`] (`Rows`) and [`super::micro`] (`Micro`, `Panel`, `lane_sum`).

use super::micro::{lane_sum, Micro, Panel};
use super::Rows;

/// 512-bit registers through intrinsics, for the AVX-512 copies only. The arrays of
/// [`super::micro::Lanes`] follow the target's preferred vector width: built with `-C target-cpu=native`
/// on this machine LLVM prefers 256-bit vectors, and the 4×64 f32 block then needs 32
/// `ymm` accumulators and spills (W6 became more than twice as slow); here the width is fixed.
#[cfg(all(target_arch = "x86_64", not(miri)))]
pub(super) struct Zmm;

/// The intrinsic blocks: `$lanes` elements per register, at most four registers per row.
#[cfg(all(target_arch = "x86_64", not(miri)))]
macro_rules! zmm_block {
    ($reg:ident, $level:ident, $feat:literal, $t:ty, $v:ty, $f:ident, $packed:ident, $start:ident, $finish:ident, $lanes:literal, $zero:ident, $load:ident, $store:ident, $set1:ident, $fmadd:ident, $dot:ident) => {
        /// The accumulators of an `MR × NR` block (`NR / $lanes` registers per row used):
        /// zero, or loaded from `init`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn $start<const MR: usize, const NR: usize>(
            init: Option<&[[$t; NR]; MR]>,
        ) -> [[$v; 4]; MR] {
            use std::arch::x86_64::*;
            let mut acc = [[$zero(); 4]; MR];
            if let Some(init) = init {
                for r in 0..MR {
                    for v in 0..NR / $lanes {
                        // SAFETY: `init[r]` holds `NR` elements, so the `$lanes` from
                        // `v·$lanes` (`v < NR / $lanes`) lie inside it.
                        acc[r][v] = unsafe { $load(init[r].as_ptr().add(v * $lanes)) };
                    }
                }
            }
            acc
        }

        /// The accumulators stored as an array (the inverse of the function above).
        #[target_feature(enable = $feat)]
        #[inline]
        fn $finish<const MR: usize, const NR: usize>(acc: &[[$v; 4]; MR]) -> [[$t; NR]; MR] {
            use std::arch::x86_64::*;
            let mut out = [[0.0; NR]; MR];
            for r in 0..MR {
                for v in 0..NR / $lanes {
                    // SAFETY: `out[r]` holds `NR` elements: as for the loads above.
                    unsafe { $store(out[r].as_mut_ptr().add(v * $lanes), acc[r][v]) };
                }
            }
            out
        }

        #[target_feature(enable = $feat)]
        #[inline]
        fn $f<P: Panel<$t, MR>, const MR: usize, const NR: usize>(
            a: P,
            k: usize,
            b: Rows<'_, $t>,
            j0: usize,
            init: Option<&[[$t; NR]; MR]>,
        ) -> [[$t; NR]; MR] {
            use std::arch::x86_64::*;
            let nv = NR / $lanes;
            assert!(
                NR == nv * $lanes && nv <= 4,
                "{NR} columns in {} registers of {} lanes",
                nv,
                $lanes
            );
            let mut acc = $start::<MR, NR>(init);
            let a = a.first(k);
            let mut off = b.off + j0 as isize;
            for p in 0..k {
                let start = off as usize;
                let brow: &[$t; NR] = b.data[start..start + NR].try_into().expect("NR elements");
                let mut bv = [$zero(); 4];
                for (v, reg) in bv.iter_mut().enumerate().take(nv) {
                    // SAFETY: `brow` holds `NR = nv·$lanes` elements, so the `$lanes` from
                    // `v·$lanes` (`v < nv`) lie inside it; `loadu` needs no alignment.
                    *reg = unsafe { $load(brow.as_ptr().add(v * $lanes)) };
                }
                let x = a.at(p);
                for r in 0..MR {
                    let xr = $set1(x[r]);
                    for v in 0..nv {
                        acc[r][v] = $fmadd(xr, bv[v], acc[r][v]);
                    }
                }
                off += b.rs;
            }
            $finish::<MR, NR>(&acc)
        }

        /// [`Micro::packed`] in registers: the panels walked with pointers after one check
        /// of their lengths (no bounds check per step).
        #[target_feature(enable = $feat)]
        #[inline]
        fn $packed<const MR: usize, const NR: usize>(
            a: &[$t],
            b: &[$t],
            k: usize,
            init: Option<&[[$t; NR]; MR]>,
        ) -> [[$t; NR]; MR] {
            use std::arch::x86_64::*;
            let nv = NR / $lanes;
            assert!(
                NR == nv * $lanes && nv <= 4,
                "{NR} columns in {} registers of {} lanes",
                nv,
                $lanes
            );
            assert!(
                a.len() >= k * MR && b.len() >= k * NR,
                "packed panels too short"
            );
            let mut acc = $start::<MR, NR>(init);
            let (mut pa, mut pb) = (a.as_ptr(), b.as_ptr());
            for _ in 0..k {
                let mut bv = [$zero(); 4];
                for (v, reg) in bv.iter_mut().enumerate().take(nv) {
                    // SAFETY: before step `p` (`p < k`) `pb` is `b`'s start plus `p·NR`, and
                    // `b` holds at least `k·NR` elements (asserted above): the `$lanes`
                    // from `pb + v·$lanes` (`v < nv`, `nv·$lanes = NR`) lie inside it.
                    *reg = unsafe { $load(pb.add(v * $lanes)) };
                }
                for r in 0..MR {
                    // SAFETY: likewise `pa` is `a`'s start plus `p·MR` and `a` holds at
                    // least `k·MR` elements, so `pa + r` (`r < MR`) is inside it.
                    let xr = $set1(unsafe { *pa.add(r) });
                    for v in 0..nv {
                        acc[r][v] = $fmadd(xr, bv[v], acc[r][v]);
                    }
                }
                // `wrapping_add`: after the last step the pointers may end one panel past
                // the slices (never read).
                pa = pa.wrapping_add(MR);
                pb = pb.wrapping_add(NR);
            }
            $finish::<MR, NR>(&acc)
        }

        impl Micro<$t> for $reg {
            const FUSED: bool = true;
            #[inline(always)]
            fn packed<const MR: usize, const NR: usize>(
                a: &[$t],
                b: &[$t],
                k: usize,
                init: Option<&[[$t; NR]; MR]>,
            ) -> [[$t; NR]; MR] {
                // SAFETY: as for `block` below.
                unsafe { $packed::<MR, NR>(a, b, k, init) }
            }
            #[inline(always)]
            fn block<P: Panel<$t, MR>, const MR: usize, const NR: usize>(
                a: P,
                k: usize,
                b: Rows<'_, $t>,
                j0: usize,
                init: Option<&[[$t; NR]; MR]>,
            ) -> [[$t; NR]; MR] {
                debug_assert!(crate::simd::detected_isa() >= crate::simd::Isa::$level);
                // SAFETY: `$reg` is named only in the copies of `dispatch!` for `$level`,
                // which run only when `detected_isa()` found `$feat` on this CPU.
                unsafe { $f::<P, MR, NR>(a, k, b, j0, init) }
            }
            simd_dot_method!($t, $dot, $lanes, $level);
        }
    };
}

/// [`super::micro::dot_rows`] in registers of `$lanes` elements through intrinsics (`$feat`), for the
/// AVX-512 ([`Zmm`]) and AVX2 ([`Ymm`]) copies: the array form was not vectorised (LLVM kept
/// the accumulators in memory, some twenty-five times slower).
#[cfg(all(target_arch = "x86_64", not(miri)))]
macro_rules! simd_dot {
    ($t:ty, $f:ident, $feat:literal, $lanes:literal, $zero:ident, $load:ident, $store:ident, $fmadd:ident) => {
        #[target_feature(enable = $feat)]
        #[inline]
        fn $f<const R: usize, const J: usize>(
            x: [&[$t]; R],
            tail: [&[$t; $lanes]; R],
            bt: &[$t],
            stride: usize,
        ) -> [[$t; J]; R] {
            use std::arch::x86_64::*;
            let k = x[0].len();
            let whole = k / $lanes;
            let steps = k.div_ceil($lanes);
            let mut acc = [[$zero(); J]; R];
            let mut off = 0;
            for s in 0..steps {
                let ys = &bt[off..off + J * $lanes];
                let mut xv = [$zero(); R];
                for r in 0..R {
                    let xr: &[$t; $lanes] = if s < whole {
                        x[r][s * $lanes..(s + 1) * $lanes]
                            .try_into()
                            .expect("one vector")
                    } else {
                        tail[r]
                    };
                    // SAFETY: `xr` holds `$lanes` elements; `loadu` needs no alignment.
                    xv[r] = unsafe { $load(xr.as_ptr()) };
                }
                for j in 0..J {
                    // SAFETY: `ys` holds `J·$lanes` elements, so the `$lanes` from
                    // `j·$lanes` (`j < J`) lie inside it.
                    let yv = unsafe { $load(ys.as_ptr().add(j * $lanes)) };
                    for r in 0..R {
                        acc[r][j] = $fmadd(xv[r], yv, acc[r][j]);
                    }
                }
                off += stride * $lanes;
            }
            let mut out = [[0.0; J]; R];
            for r in 0..R {
                for j in 0..J {
                    let mut lanes = [0.0; $lanes];
                    // SAFETY: `lanes` holds `$lanes` elements; `storeu` needs no alignment.
                    unsafe { $store(lanes.as_mut_ptr(), acc[r][j]) };
                    out[r][j] = lane_sum(lanes);
                }
            }
            out
        }
    };
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
simd_dot!(
    f32,
    zmm_dot_f32,
    "avx512f",
    16,
    _mm512_setzero_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_fmadd_ps
);
#[cfg(all(target_arch = "x86_64", not(miri)))]
simd_dot!(
    f64,
    zmm_dot_f64,
    "avx512f",
    8,
    _mm512_setzero_pd,
    _mm512_loadu_pd,
    _mm512_storeu_pd,
    _mm512_fmadd_pd
);
#[cfg(all(target_arch = "x86_64", not(miri)))]
simd_dot!(
    f32,
    ymm_dot_f32,
    "avx2,fma",
    8,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_fmadd_ps
);
#[cfg(all(target_arch = "x86_64", not(miri)))]
simd_dot!(
    f64,
    ymm_dot_f64,
    "avx2,fma",
    4,
    _mm256_setzero_pd,
    _mm256_loadu_pd,
    _mm256_storeu_pd,
    _mm256_fmadd_pd
);

/// 256-bit registers through intrinsics, for the AVX2 copies only (the same blocks as
/// [`Zmm`]'s, `zmm_block!`, at eight f32 lanes), and `simd_dot!`'s dot products.
#[cfg(all(target_arch = "x86_64", not(miri)))]
pub(super) struct Ymm;

/// The `dot` of [`Zmm`] or [`Ymm`] for one float type: `$f` at `$lanes` lanes.
#[cfg(all(target_arch = "x86_64", not(miri)))]
macro_rules! simd_dot_method {
    ($t:ty, $f:ident, $lanes:literal, $level:ident) => {
        #[inline(always)]
        fn dot<const L: usize, const R: usize, const J: usize>(
            x: [&[$t]; R],
            tail: [&[$t; L]; R],
            bt: &[$t],
            stride: usize,
        ) -> [[$t; J]; R] {
            debug_assert!(crate::simd::detected_isa() >= crate::simd::Isa::$level);
            let tail: [&[$t; $lanes]; R] =
                tail.map(|t| t.as_slice().try_into().expect("one vector of lanes"));
            // SAFETY: this type is named only in the copies of `dispatch!` for this level,
            // which run only when `detected_isa()` found its features on this CPU.
            unsafe { $f::<R, J>(x, tail, bt, stride) }
        }
    };
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
zmm_block!(
    Ymm,
    Avx2,
    "avx2,fma",
    f32,
    std::arch::x86_64::__m256,
    ymm_f32,
    ymm_packed_f32,
    ymm_start_f32,
    ymm_finish_f32,
    8,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_set1_ps,
    _mm256_fmadd_ps,
    ymm_dot_f32
);
#[cfg(all(target_arch = "x86_64", not(miri)))]
zmm_block!(
    Ymm,
    Avx2,
    "avx2,fma",
    f64,
    std::arch::x86_64::__m256d,
    ymm_f64,
    ymm_packed_f64,
    ymm_start_f64,
    ymm_finish_f64,
    4,
    _mm256_setzero_pd,
    _mm256_loadu_pd,
    _mm256_storeu_pd,
    _mm256_set1_pd,
    _mm256_fmadd_pd,
    ymm_dot_f64
);

#[cfg(all(target_arch = "x86_64", not(miri)))]
zmm_block!(
    Zmm,
    Avx512,
    "avx512f",
    f32,
    std::arch::x86_64::__m512,
    zmm_f32,
    zmm_packed_f32,
    zmm_start_f32,
    zmm_finish_f32,
    16,
    _mm512_setzero_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_set1_ps,
    _mm512_fmadd_ps,
    zmm_dot_f32
);
#[cfg(all(target_arch = "x86_64", not(miri)))]
zmm_block!(
    Zmm,
    Avx512,
    "avx512f",
    f64,
    std::arch::x86_64::__m512d,
    zmm_f64,
    zmm_packed_f64,
    zmm_start_f64,
    zmm_finish_f64,
    8,
    _mm512_setzero_pd,
    _mm512_loadu_pd,
    _mm512_storeu_pd,
    _mm512_set1_pd,
    _mm512_fmadd_pd,
    zmm_dot_f64
);
