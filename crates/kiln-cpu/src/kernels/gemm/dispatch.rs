//! The one dispatch decision inside kiln's GEMM: which form computes a product ([`choose`]:
//! broadcast, dot-product, transposed, or blocked for the large ones), and the entry points
//! per float type that pick the ISA level's copy of that form (`sgemm`, `sgemm_large`,
//! `dgemm`, `dgemm_large`), each form compiled once per level with the level's register
//! block sizes.
//! `unsafe`: the calls into the `#[target_feature]` copies, made only at a level the CPU has.
//! Which products reach kiln's GEMM at all (against `matrixmultiply`) is `super::super::matmul`'s
//! decision (`Gemm::small`, `Gemm::blocked`).
//!
//! Depends on [`super`] and every form module ([`super::broadcast`], [`super::dot`],
//! [`super::transposed`], [`super::blocked`]), [`super::micro`], [`super::x86`] and
//! [`super::tuning`].

use super::blocked::scaled_in_one_block;
use super::blocked::{gemm_blocked, Blocking};
use super::broadcast::gemm_broadcast;
use super::dot::gemm_dot;
use super::micro::{Lanes, Micro};
use super::transposed::gemm_transposed;
use super::tuning::{
    BLOCKED_MIN_COLUMNS, BLOCKED_MIN_STEPS, PAR_GEMM_MACS, PAR_SMALL_WORK, SMALL_ANY_MACS,
    SMALL_B_BYTES, SMALL_MACS, SMALL_ROWS, SMALL_ROWS_MAX_MACS, STORE_MACS,
};
#[cfg(all(target_arch = "x86_64", not(miri)))]
use super::x86::{Ymm, Zmm};
use super::{Gemm, Real, Scale, FEW_COLUMNS};

/// The three ways of computing a product (the forms differ in what fills the vectors).
pub(super) trait Form {
    /// `c = α·(a @ b) + β·c` for `k > 0`, operands in bounds (checked by the caller).
    fn run<
        T: Real,
        K: Micro<T>,
        const MR: usize,
        const NR: usize,
        const NV: usize,
        const BMR: usize,
        const BNR: usize,
    >(
        g: &Gemm,
        a: &[T],
        b: &[T],
        c: &mut [T],
        sc: Scale<'_, T>,
        bk: Blocking,
    );
}

/// [`gemm_broadcast`].
pub(super) struct Broadcast;
/// [`gemm_blocked`] (`BMR × BNR` register blocks).
pub(super) struct Blocked;
/// [`gemm_dot`].
pub(super) struct Dot;
/// [`gemm_transposed`].
pub(super) struct Transposed;

/// `impl Form for $form`, `$body` computing the product from `g, a, b, c, sc, bk` (the
/// generic parameters in scope as in [`Form::run`]).
macro_rules! form {
    ($form:ident, |$g:ident, $a:ident, $b:ident, $c:ident, $sc:ident, $bk:ident| $body:block) => {
        impl Form for $form {
            #[inline(always)]
            #[allow(unused_variables)]
            fn run<
                T: Real,
                K: Micro<T>,
                const MR: usize,
                const NR: usize,
                const NV: usize,
                const BMR: usize,
                const BNR: usize,
            >(
                $g: &Gemm,
                $a: &[T],
                $b: &[T],
                $c: &mut [T],
                $sc: Scale<'_, T>,
                $bk: Blocking,
            ) $body
        }
    };
}

form!(Broadcast, |g, a, b, c, sc, bk| {
    gemm_broadcast::<T, K, MR, NR, NV>(g, a, b, c, sc)
});

form!(Blocked, |g, a, b, c, sc, bk| {
    gemm_blocked::<T, K, BMR, BNR>(g, a, b, c, sc, bk)
});

form!(Dot, |g, a, b, c, sc, bk| {
    gemm_dot::<T, K, NV>(g, a, b, c, sc)
});

form!(Transposed, |g, a, b, c, sc, bk| {
    // Five rows per block: the few rows of the transposed product (`n < NV`) then
    // split into full blocks more often (ten columns: two blocks of five instead of
    // two of four and two single rows), and the block instances differ from the
    // broadcast form's, whose inlining they would otherwise change.
    gemm_transposed::<T, K, 5, NR, NV>(g, a, b, c, sc)
});

/// Which [`Form`] computes the product at a level whose vectors hold `nv` elements: fewer
/// columns than a vector go to the transposed product when `a` is transposed (its rows
/// then fill the vectors), else to the dot-product form when `a`'s rows are contiguous;
/// everything else to the broadcast form.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Choice {
    Broadcast,
    Dot,
    Transposed,
    Blocked,
}

pub(super) fn choose(g: &Gemm, nv: usize) -> Choice {
    // "Few" is fewer than sixteen at every level: at AVX2 (8 lanes) ten columns fill one
    // vector and a quarter of the next, and the broadcast form was three to four times
    // slower than the dot-product and transposed forms there.
    let few = g.n < FEW_COLUMNS.max(nv);
    if few && g.m >= nv && g.rsa == 1 && g.csa != 1 {
        Choice::Transposed
    } else if few && g.k >= nv && g.csa == 1 {
        Choice::Dot
    } else {
        Choice::Broadcast
    }
}

macro_rules! dispatch {
    ($name:ident, $large:ident, $at:ident, $t:ty, [$($p512:literal),*], [$($p256:literal),*], [$($p128:literal),*]) => {
        /// `c = α·(a @ b) + β·c` at the current ISA level (see the module docs).
        pub(crate) fn $name(g: &Gemm, a: &[$t], b: &[$t], c: &mut [$t], sc: Scale<'_, $t>) {
            $at(crate::simd::isa(), None, g, a, b, c, sc)
        }

        /// Like the function above for a large product: the blocked form over packed
        /// operands ([`gemm_blocked`]).
        pub(crate) fn $large(g: &Gemm, a: &[$t], b: &[$t], c: &mut [$t], sc: Scale<'_, $t>) {
            $at(crate::simd::isa(), Some(Blocking::current()), g, a, b, c, sc)
        }

        /// `c = α·(a @ b) + β·c` at `level`, lowered to what the CPU has (tests run every
        /// level without touching the process-wide one). Each form is its own copy per
        /// level, so adding one does not change how the others compile.
        pub(super) fn $at(
            level: crate::simd::Isa,
            large: Option<Blocking>,
            g: &Gemm,
            a: &[$t],
            b: &[$t],
            c: &mut [$t],
            sc: Scale<'_, $t>,
        ) {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2<F: Form>(g: &Gemm, a: &[$t], b: &[$t], c: &mut [$t], sc: Scale<'_, $t>, bk: Blocking) {
                F::run::<$t, Ymm, $($p256),*>(g, a, b, c, sc, bk)
            }
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
            unsafe fn avx512<F: Form>(g: &Gemm, a: &[$t], b: &[$t], c: &mut [$t], sc: Scale<'_, $t>, bk: Blocking) {
                F::run::<$t, Zmm, $($p512),*>(g, a, b, c, sc, bk)
            }
            fn base<F: Form>(g: &Gemm, a: &[$t], b: &[$t], c: &mut [$t], sc: Scale<'_, $t>, bk: Blocking) {
                F::run::<$t, Lanes<{ crate::simd::BASE_FMA }>, $($p128),*>(g, a, b, c, sc, bk)
            }
            /// The vector width (`NV`, the third of the level's constants).
            fn nv(ps: &[usize]) -> usize {
                ps[2]
            }
            let bk = large.unwrap_or(Blocking::current());
            let choose = |g: &Gemm, nv: usize| if large.is_some() { Choice::Blocked } else { choose(g, nv) };
            match level.min(crate::simd::detected_isa()) {
                #[cfg(all(target_arch = "x86_64", not(miri)))]
                crate::simd::Isa::Avx512 => {
                    let choice = choose(g, nv(&[$($p512),*]));
                    // SAFETY: the level is clamped to `detected_isa()`, which reports `Avx512` only
                    // if it found avx512f/vl/dq/bw, avx2 and fma on this CPU.
                    unsafe {
                        match choice {
                            Choice::Broadcast => avx512::<Broadcast>(g, a, b, c, sc, bk),
                            Choice::Dot => avx512::<Dot>(g, a, b, c, sc, bk),
                            Choice::Transposed => avx512::<Transposed>(g, a, b, c, sc, bk),
                            Choice::Blocked => avx512::<Blocked>(g, a, b, c, sc, bk),
                        }
                    }
                }
                #[cfg(all(target_arch = "x86_64", not(miri)))]
                crate::simd::Isa::Avx2 => {
                    let choice = choose(g, nv(&[$($p256),*]));
                    // SAFETY: clamped as above: `Avx2` only if the CPU has avx2 and fma.
                    unsafe {
                        match choice {
                            Choice::Broadcast => avx2::<Broadcast>(g, a, b, c, sc, bk),
                            Choice::Dot => avx2::<Dot>(g, a, b, c, sc, bk),
                            Choice::Transposed => avx2::<Transposed>(g, a, b, c, sc, bk),
                            Choice::Blocked => avx2::<Blocked>(g, a, b, c, sc, bk),
                        }
                    }
                }
                _ => match choose(g, nv(&[$($p128),*])) {
                    Choice::Broadcast => base::<Broadcast>(g, a, b, c, sc, bk),
                    Choice::Dot => base::<Dot>(g, a, b, c, sc, bk),
                    Choice::Transposed => base::<Transposed>(g, a, b, c, sc, bk),
                    Choice::Blocked => base::<Blocked>(g, a, b, c, sc, bk),
                },
            }
        }
    };
}

// Per level: MR, NR (columns per block: four vectors at AVX-512, two below) and NV (one
// vector) of the small forms, then MR, NR of the blocked form (two vectors wide; twelve rows
// with 32 registers: 24 accumulators).
dispatch!(
    sgemm,
    sgemm_large,
    sgemm_at,
    f32,
    [4, 64, 16, 12, 32],
    [4, 16, 8, 6, 16],
    [4, 8, 4, 6, 8]
);
dispatch!(
    dgemm,
    dgemm_large,
    dgemm_at,
    f64,
    [4, 32, 8, 12, 16],
    [4, 8, 4, 6, 8],
    [4, 4, 2, 6, 4]
);

/// Whether [`crate::Tuning::gemm_broadcast_avx512`] sends every product with contiguous
/// rows of `a` to kiln's GEMM at this level.
fn broadcast_everywhere() -> bool {
    crate::simd::isa() >= crate::simd::Isa::Avx512 && crate::tune::tuning().gemm_broadcast_avx512
}

/// Which kernel takes a product: kiln's GEMM (and then [`choose`] picks its form) or
/// `matrixmultiply`, and whether its rows split over the thread team.
impl Gemm {
    /// Whether the product goes to kiln's GEMM rather than `matrixmultiply`: few rows
    /// (where `matrixmultiply` packs the whole right operand into a fresh buffer for a few
    /// passes over it), a tiny product, or — when the rows of `a` are contiguous, so the
    /// kernel reads them in place — a small product or a right operand that stays in L1.
    /// A transposed `a` stays on `matrixmultiply`, whose packing reads it in panels: the
    /// small kernel copies it four rows at a time with a stride of `m`, unless the product
    /// has few columns ([`FEW_COLUMNS`]), which the small kernel computes transposed or as dot
    /// products. From [`PAR_GEMM_MACS`] `matrixmultiply`'s row blocks run on all cores.
    /// Each bound was measured against `matrixmultiply` (docs/performance.md, "Figures behind
    /// the CPU kernels' choices"). `elem` is the size of an element in bytes.
    pub(in crate::kernels) fn small(&self, elem: usize) -> bool {
        let macs = self.m.saturating_mul(self.k).saturating_mul(self.n);
        let b_bytes = self.k.saturating_mul(self.n).saturating_mul(elem);
        (self.m <= SMALL_ROWS && macs <= SMALL_ROWS_MAX_MACS)
            || (self.csa == 1 && broadcast_everywhere())
            || macs <= SMALL_ANY_MACS
            || (self.n < FEW_COLUMNS && macs < PAR_GEMM_MACS)
            || (self.csa == 1
                && (macs <= SMALL_MACS || (b_bytes <= SMALL_B_BYTES && macs < PAR_GEMM_MACS)))
    }

    /// Whether a product that is not [`Self::small`] takes kiln's blocked form
    /// (packed 12×32 register blocks at AVX-512, 6×16 at AVX2) rather than `matrixmultiply`:
    /// at the AVX2 level or above, with at least [`BLOCKED_MIN_COLUMNS`] columns and
    /// [`BLOCKED_MIN_STEPS`] steps, and, for a scaled product (`coefs` other than `(1, 0)`:
    /// an epilogue run inside the GEMM), at AVX-512 few enough steps for one block
    /// ([`scaled_in_one_block`]). Above those bounds the blocked form was faster than
    /// `matrixmultiply` on every shape measured at AVX-512, below them slower (a 32-column
    /// register block fills a few columns badly); the figures are in docs/performance.md,
    /// "Figures behind the CPU kernels' choices". At AVX2 it was faster than
    /// `matrixmultiply`'s AVX2 kernel on W5 and W7 (2048³ 8.7%, the MLP step 5%), scaled
    /// products of many steps included (`relu(x @ w + b)` at 256×784×512 10–17%, at 1024³
    /// 4–6%), measured with `matrixmultiply` built without its AVX-512 kernel on a Zen 4
    /// held to AVX2 (docs/performance-log.md, 2026-11-28); the size bounds are AVX-512's.
    pub(in crate::kernels) fn blocked(&self, elem: usize, coefs: (f64, f64)) -> bool {
        let level = crate::simd::isa();
        level >= crate::simd::Isa::Avx2
            && self.n >= BLOCKED_MIN_COLUMNS
            && self.k >= BLOCKED_MIN_STEPS
            && (coefs == (1.0, 0.0)
                || level < crate::simd::Isa::Avx512
                || scaled_in_one_block(self.k, elem))
    }

    /// Whether the product is worth splitting over the team: from [`PAR_GEMM_MACS`]
    /// multiply-adds, or for kiln's forms from [`PAR_SMALL_WORK`] of their cost
    /// model, which counts each stored element as [`STORE_MACS`] multiply-adds (their short
    /// products are bound by the stores and the dot products' lane sums, not the FMAs).
    pub(in crate::kernels) fn parallel(&self, small: bool) -> bool {
        let (m, k, n) = (self.m, self.k, self.n);
        if small {
            m.saturating_mul(n).saturating_mul(k + STORE_MACS) >= PAR_SMALL_WORK
        } else {
            m.saturating_mul(k).saturating_mul(n) >= PAR_GEMM_MACS
        }
    }
}
