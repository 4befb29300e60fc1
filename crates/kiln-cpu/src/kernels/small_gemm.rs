//! kiln's own float GEMM: the small forms, for small products, without `matrixmultiply`'s
//! set-up (no packing of the right operand when its rows are contiguous, no allocation
//! proportional to it, no threading), and the blocked form for large ones
//! ([`gemm_blocked`]: both operands packed block by block for the caches, 12×32 register
//! blocks at AVX-512; [`super::matmul`] says which products take it).
//!
//! `c = α·(a @ b) + β·c` (`c` contiguous `m×n`; [`Scale`]) is computed in blocks of `MR` rows
//! by `NR` columns held in registers: each step `p` of the dot products multiplies element `p`
//! of the block's `MR` rows of `a` by `NR` contiguous elements of `b`'s row `p`, read in
//! place. Rows of `a` with unit column stride are read in place too; other layouts are copied
//! per block into a `k × MR` panel (contiguous copies for a transposed `a`). Rows left over
//! (`m % MR`) run one at a time; columns left over (`n % NR`) run one vector (`NV`) at a time,
//! the last partial vector through a zero-padded `k × NV` copy of those columns of `b`. A
//! right operand whose column stride is not 1 is first copied into a contiguous `k × n`
//! matrix.
//!
//! Like the other hot loops, the kernel is `#[inline(always)]` generic code compiled once per
//! [`crate::isa`] level: `NR` is four vector registers wide at the AVX-512 level (32
//! registers) and two below it (16), `MR = 4`, so a block is sixteen (eight) accumulator
//! registers, enough independent multiply-adds to keep both FMA units busy (64³ f32 on one
//! core: 78–85 GMAC/s at AVX-512, `matrixmultiply` 53 with its packing). The register block
//! itself ([`Micro`]) is portable array code below AVX-512 and `std::arch` intrinsics at
//! AVX-512 ([`Zmm`]: a fixed vector width whatever the target's preferred width). Every
//! element is an ordered sum over `p` of `a[i,p]·b[p,j]` (fused at the AVX2 and AVX-512
//! levels), so results do not depend on the block an element falls in.
//!
//! That is the broadcast form. Products with fewer columns than a vector (`n < NV`: a
//! 10-class output layer) would fill `n` of its lanes, so two other forms take them
//! ([`choose`]): when `a` is transposed (`hᵀ @ g`, a weight gradient), the broadcast form
//! computes the transposed product `bᵀ @ aᵀ`, whose right operand then has contiguous rows
//! and whose columns fill the vectors ([`gemm_transposed`]: the same sums); when `a`'s rows
//! are contiguous (`h @ w`), each element is a dot product over `NV` lanes of a row of `a`
//! and a packed column of `b`, two rows by up to five columns at a time ([`gemm_dot`]:
//! lane-strided partial sums, added pairwise at the end). Each form is compiled as its own
//! copy per level.
//!
//! The blocked form copies the right operand's `kc × nc` block into panels of `NR` columns
//! and `MR` rows of the left operand's `kc` steps into a panel, per thread (each thread
//! keeps its buffers, [`Scratch`]); its register block ([`Micro::packed`]) walks the two
//! panels contiguously, and the steps of a long product go in blocks whose register
//! blocks continue the previous block's partial sums, so every element is still the one
//! ordered sum over `p`.
//!
//! All indexing is safe (bounds-checked slices), except in the AVX-512 packed register
//! block, which walks its panels with pointers after checking their lengths once.
//! `unsafe`: the calls into the `#[target_feature]` copies (as in [`crate::simd`]), the
//! AVX-512 blocks' and the dot products' (`simd_dot!`) unaligned vector loads and stores
//! inside fixed-size arrays and slices, and the packed block's pointer walk; all compiled
//! out under Miri (which runs the portable copies of every form, the blocked one included).
//!
//! Depends on `super::gemm` (the GEMM description and its tuning table) and `crate::tune`
//! (the cache blocks).

use super::gemm::tuning::{A_BLOCK_BYTES, PACK_MIN_BYTES, PACK_ROWS, SCRATCH_KEEP};
use super::gemm::{Gemm, FEW_COLUMNS};

/// The float types the kernel handles.
pub(super) trait Real:
    Copy + Default + PartialEq + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self>
{
    const ONE: Self;
    /// `a·b + c`, fused when `F`.
    fn madd<const F: bool>(a: Self, b: Self, c: Self) -> Self;
    /// The calling thread's [`Scratch`] of this type, moved out (empty buffers if already
    /// taken); [`Real::put_scratch`] hands it back.
    fn take_scratch() -> Scratch<Self>;
    /// Keeps `s` (trimmed) as the calling thread's scratch.
    fn put_scratch(s: Scratch<Self>);
}

/// The blocked form's packing buffers, one set per thread and type, kept across products:
/// a fresh megabyte per product cost its page faults each time (`relu(x @ w + b)` at
/// 1024², 2 threads, ~8 % slower). What a product leaves beyond [`SCRATCH_KEEP`] elements
/// is freed.
#[derive(Default)]
pub(super) struct Scratch<T> {
    b: Vec<T>,
    a: Vec<T>,
    part: Vec<T>,
}

impl<T> Scratch<T> {
    fn trim(&mut self) {
        for v in [&mut self.b, &mut self.a, &mut self.part] {
            if v.capacity() > SCRATCH_KEEP {
                *v = Vec::new();
            }
        }
    }
}

macro_rules! scratch_of {
    ($t:ty, $scratch:ident) => {
        thread_local! {
            static $scratch: std::cell::RefCell<Scratch<$t>> = Default::default();
        }
        impl Real for $t {
            const ONE: $t = 1.0;
            #[inline(always)]
            fn madd<const F: bool>(a: $t, b: $t, c: $t) -> $t {
                if F {
                    a.mul_add(b, c)
                } else {
                    a * b + c
                }
            }
            fn take_scratch() -> Scratch<$t> {
                $scratch.with(|s| std::mem::take(&mut *s.borrow_mut()))
            }
            fn put_scratch(mut s: Scratch<$t>) {
                s.trim();
                $scratch.with(|c| *c.borrow_mut() = s);
            }
        }
    };
}

scratch_of!(f32, SCRATCH_F32);
scratch_of!(f64, SCRATCH_F64);

/// The right operand as the kernel reads it: row `p` starts at `off + p*rs` and its
/// elements are contiguous.
#[derive(Clone, Copy)]
struct Rows<'a, T> {
    data: &'a [T],
    off: isize,
    rs: isize,
}

/// What is stored: `c = α·(a@b) + β·L`, the product scaled and rounded first, then `β·L`
/// (`β = ±1` in practice: exact) added and rounded: the rounding of the epilogue
/// `α·acc ± L` it stands for. `L` is `c` itself unless `add` names it; neither is read
/// when `β = 0`.
#[derive(Clone, Copy)]
pub(super) struct Scale<'a, T> {
    pub(super) alpha: T,
    pub(super) beta: T,
    pub(super) add: Option<Addend<'a, T>>,
}

/// The addend `L` of [`Scale`] read in place: row `i` is `data[off + i·rs..][..n]` (unit
/// column stride; `rs = 0` repeats one row, a broadcast bias). Read by the stores, so `L`
/// is not copied into `c` first (a prefill cost about a tenth of a small affine product's
/// whole evaluation).
#[derive(Clone, Copy)]
pub(super) struct Addend<'a, T> {
    pub(super) data: &'a [T],
    pub(super) off: isize,
    pub(super) rs: isize,
}

impl<'a, T> Addend<'a, T> {
    /// Columns `j0..j0 + w` of row `i` (panics outside `data`).
    #[inline(always)]
    fn row(&self, i: usize, j0: usize, w: usize) -> &'a [T] {
        let s = (self.off + i as isize * self.rs) as usize + j0;
        &self.data[s..s + w]
    }
}

/// `MR` rows of the left operand as the kernel reads them: element `p` of every row.
trait Panel<T, const MR: usize>: Copy {
    fn at(&self, p: usize) -> [T; MR];
    /// The first `k` steps only (panics if there are fewer): a kernel that cuts its panel
    /// to its `k` steps first reads every step without a bounds check (four per step in a
    /// block not inlined into its caller, a measurable share of a small product).
    fn first(self, k: usize) -> Self;
}

/// Rows read in place (unit column stride), each `k` long.
#[derive(Clone, Copy)]
struct InPlace<'a, T, const MR: usize>([&'a [T]; MR]);

impl<T: Copy, const MR: usize> Panel<T, MR> for InPlace<'_, T, MR> {
    #[inline(always)]
    fn at(&self, p: usize) -> [T; MR] {
        std::array::from_fn(|r| self.0[r][p])
    }
    #[inline(always)]
    fn first(self, k: usize) -> Self {
        InPlace(self.0.map(|row| &row[..k]))
    }
}

/// A `k × MR` copy: entry `p` holds element `p` of each row.
#[derive(Clone, Copy)]
struct Packed<'a, T, const MR: usize>(&'a [[T; MR]]);

impl<T: Copy, const MR: usize> Panel<T, MR> for Packed<'_, T, MR> {
    #[inline(always)]
    fn at(&self, p: usize) -> [T; MR] {
        self.0[p]
    }
    #[inline(always)]
    fn first(self, k: usize) -> Self {
        Packed(&self.0[..k])
    }
}

/// How one ISA level computes a register block: the `MR × NR` block
/// `init + a @ b[.., j0..j0+NR]` over `k` steps, `a` being `MR` rows, the products added
/// one `p` at a time to the accumulators that start at `init` (zero when `None`): a sum
/// over `p` split into blocks of steps continued this way rounds as the unsplit one.
trait Micro<T: Real> {
    /// Whether products are added with fused multiply-adds.
    const FUSED: bool;
    fn block<P: Panel<T, MR>, const MR: usize, const NR: usize>(
        a: P,
        k: usize,
        b: Rows<'_, T>,
        j0: usize,
        init: Option<&[[T; NR]; MR]>,
    ) -> [[T; NR]; MR];

    /// [`Micro::block`] over packed operands: `a` holds `k` groups of `MR` values (element
    /// `p` of each row), `b` `k` rows of `NR` values ([`gemm_blocked`]'s panels).
    #[inline(always)]
    fn packed<const MR: usize, const NR: usize>(
        a: &[T],
        b: &[T],
        k: usize,
        init: Option<&[[T; NR]; MR]>,
    ) -> [[T; NR]; MR] {
        let mut acc = init.copied().unwrap_or([[T::default(); NR]; MR]);
        for (x, y) in a.chunks_exact(MR).zip(b.chunks_exact(NR)).take(k) {
            for r in 0..MR {
                for l in 0..NR {
                    acc[r][l] = if Self::FUSED {
                        T::madd::<true>(x[r], y[l], acc[r][l])
                    } else {
                        T::madd::<false>(x[r], y[l], acc[r][l])
                    };
                }
            }
        }
        acc
    }

    /// `R × J` dot products of the dot-product form ([`dot_rows`]' contract and value).
    #[inline(always)]
    fn dot<const L: usize, const R: usize, const J: usize>(
        x: [&[T]; R],
        tail: [&[T; L]; R],
        bt: &[T],
        stride: usize,
    ) -> [[T; J]; R] {
        if Self::FUSED {
            dot_rows::<T, true, L, R, J>(x, tail, bt, stride)
        } else {
            dot_rows::<T, false, L, R, J>(x, tail, bt, stride)
        }
    }
}

/// Arrays LLVM vectorises at the level of the copy it is compiled into (`F`: fused
/// multiply-adds).
struct Lanes<const F: bool>;

impl<T: Real, const F: bool> Micro<T> for Lanes<F> {
    const FUSED: bool = F;
    #[inline(always)]
    fn block<P: Panel<T, MR>, const MR: usize, const NR: usize>(
        a: P,
        k: usize,
        b: Rows<'_, T>,
        j0: usize,
        init: Option<&[[T; NR]; MR]>,
    ) -> [[T; NR]; MR] {
        let mut acc = init.copied().unwrap_or([[T::default(); NR]; MR]);
        let a = a.first(k);
        let mut off = b.off + j0 as isize;
        for p in 0..k {
            let start = off as usize;
            let brow: &[T; NR] = b.data[start..start + NR].try_into().expect("NR elements");
            let x = a.at(p);
            for r in 0..MR {
                for l in 0..NR {
                    acc[r][l] = T::madd::<F>(x[r], brow[l], acc[r][l]);
                }
            }
            off += b.rs;
        }
        acc
    }
}

/// 512-bit registers through intrinsics, for the AVX-512 copies only. The arrays of
/// [`Lanes`] follow the target's preferred vector width: built with `-C target-cpu=native`
/// on this machine LLVM prefers 256-bit vectors, and the 4×64 f32 block then needs 32
/// `ymm` accumulators and spills (W6 became more than twice as slow); here the width is fixed.
#[cfg(all(target_arch = "x86_64", not(miri)))]
struct Zmm;

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

/// [`dot_rows`] in registers of `$lanes` elements through intrinsics (`$feat`), for the
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
struct Ymm;

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

/// Where the blocks of one block of the product go: columns `jc..jc + g.n` of `c`, whose
/// rows are `ldc` long; `cont`: the accumulators continue the partial sums already there
/// (a later block of the steps `p`), else they start at zero; `sc` scales what is stored.
#[derive(Clone, Copy)]
struct Dest<'a, T> {
    ldc: usize,
    jc: usize,
    cont: bool,
    sc: Scale<'a, T>,
    /// `Some(kc)`: the right operand is packed in panels of `NR` columns, `kc` rows each
    /// ([`pack_panels`]), instead of read as rows.
    panels: Option<usize>,
}

/// Rows `i0..i0+MR` of `c`. Rows of `a` with unit column stride are read in place; others
/// are first copied into `scratch` (a `k × MR` panel: contiguous copies when `a` is
/// transposed).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn row_block<T: Real, K: Micro<T>, const MR: usize, const NR: usize, const NV: usize>(
    g: &Gemm,
    a: &[T],
    i0: usize,
    b: Rows<'_, T>,
    tail: &[T],
    scratch: &mut Vec<[T; MR]>,
    c: &mut [T],
    to: Dest<'_, T>,
) {
    let k = g.k;
    let base = |r: usize| g.aoff + (i0 + r) as isize * g.rsa;
    if g.csa == 1 {
        let rows = InPlace(std::array::from_fn(|r| {
            let start = base(r) as usize;
            &a[start..start + k]
        }));
        columns::<T, K, _, MR, NR, NV>(rows, g, i0, b, tail, c, to);
    } else {
        scratch.clear();
        let first = base(0);
        scratch.extend((0..k).map(|p| {
            let at = first + p as isize * g.csa;
            if g.rsa == 1 {
                let at = at as usize;
                a[at..at + MR].try_into().expect("MR elements")
            } else {
                std::array::from_fn(|r| a[(at + r as isize * g.rsa) as usize])
            }
        }));
        columns::<T, K, _, MR, NR, NV>(Packed(scratch), g, i0, b, tail, c, to);
    }
}

/// The blocks of rows `i0..i0+MR` of `c`, left to right.
#[inline(always)]
fn columns<
    T: Real,
    K: Micro<T>,
    P: Panel<T, MR>,
    const MR: usize,
    const NR: usize,
    const NV: usize,
>(
    rows: P,
    g: &Gemm,
    i0: usize,
    b: Rows<'_, T>,
    tail: &[T],
    c: &mut [T],
    to: Dest<'_, T>,
) {
    let (k, n) = (g.k, g.n);
    let mut j0 = 0;
    if let Some(kc) = to.panels {
        // `b` holds `NR`-column panels, `kc × NR` each, the last one zero-padded.
        while j0 < n {
            let w = NR.min(n - j0);
            let panel = Rows {
                data: b.data,
                off: (j0 * kc) as isize,
                rs: NR as isize,
            };
            let at = (i0, to.jc + j0);
            one::<T, K, P, MR, NR>(rows, k, (panel, 0), c, at, w, to);
            j0 += w;
        }
        return;
    }
    while j0 + NR <= n {
        one::<T, K, P, MR, NR>(rows, k, (b, j0), c, (i0, to.jc + j0), NR, to);
        j0 += NR;
    }
    // Columns left over: one vector at a time in place (a constant width: the stores are
    // vector moves, not `memmove` calls), the last partial vector through the zero-padded
    // copy of those columns.
    while j0 + NV <= n {
        one::<T, K, P, MR, NV>(rows, k, (b, j0), c, (i0, to.jc + j0), NV, to);
        j0 += NV;
    }
    if j0 < n {
        let w = n - j0;
        let panel = Rows {
            data: tail,
            off: 0,
            rs: NV as isize,
        };
        one::<T, K, P, MR, NV>(rows, k, (panel, 0), c, (i0, to.jc + j0), w, to);
    }
}

/// One `MR × W` register block of [`columns`]: columns `from..` of `b` into the block of `c`
/// at `at`, its first `w` columns stored (continuing the partial sums there when `to.cont`).
#[inline(always)]
fn one<T: Real, K: Micro<T>, P: Panel<T, MR>, const MR: usize, const W: usize>(
    rows: P,
    k: usize,
    (b, from): (Rows<'_, T>, usize),
    c: &mut [T],
    at: (usize, usize),
    w: usize,
    to: Dest<'_, T>,
) {
    let init = to.cont.then(|| tile::<T, MR, W>(c, to.ldc, at, (MR, w)));
    let acc = K::block::<P, MR, W>(rows, k, b, from, init.as_ref());
    store(c, to.ldc, at, &acc, w, to.sc);
}

/// The `MR × W` block of `c` (rows `ldc` long) at `(i0, j0)`, its first `rows` rows and
/// `w` columns read and the others zero: the partial sums a continued register block
/// starts from.
#[inline(always)]
fn tile<T: Real, const MR: usize, const W: usize>(
    c: &[T],
    ldc: usize,
    (i0, j0): (usize, usize),
    (rows, w): (usize, usize),
) -> [[T; W]; MR] {
    let mut t = [[T::default(); W]; MR];
    for (r, row) in t.iter_mut().enumerate().take(rows) {
        let at = (i0 + r) * ldc + j0;
        if w == W {
            // A constant width: vector moves, not a `memmove` call per row.
            *row = c[at..at + W].try_into().expect("W elements");
        } else {
            row[..w].copy_from_slice(&c[at..at + w]);
        }
    }
    t
}

/// Writes the first `w` columns of `acc` to rows `i0..` of `c` (`n` columns) from column
/// `j0`, scaled by `sc`.
#[inline(always)]
fn store<T: Real, const W: usize>(
    c: &mut [T],
    n: usize,
    (i0, j0): (usize, usize),
    acc: &[[T; W]],
    w: usize,
    sc: Scale<'_, T>,
) {
    for (r, row) in acc.iter().enumerate() {
        let at = (i0 + r) * n + j0;
        let out = &mut c[at..at + w];
        if sc.alpha == T::ONE && sc.beta == T::default() {
            if w == W {
                // A constant width: vector moves, not a `memmove` call per row.
                let out: &mut [T; W] = out.try_into().expect("W elements");
                *out = *row;
            } else {
                out.copy_from_slice(&row[..w]);
            }
        } else if sc.beta == T::default() {
            for (o, &x) in out.iter_mut().zip(row) {
                *o = sc.alpha * x;
            }
        } else if let Some(add) = sc.add {
            let prior = add.row(i0 + r, j0, w);
            if sc.alpha == T::ONE && sc.beta == T::ONE {
                // `x @ w + b`: no multiplications by one (the same roundings).
                for ((o, &x), &l) in out.iter_mut().zip(row).zip(prior) {
                    *o = x + l;
                }
            } else {
                for ((o, &x), &l) in out.iter_mut().zip(row).zip(prior) {
                    *o = sc.alpha * x + sc.beta * l;
                }
            }
        } else {
            for (o, &x) in out.iter_mut().zip(row) {
                *o = sc.alpha * x + sc.beta * *o;
            }
        }
    }
}

impl<T: Real> Scale<'_, T> {
    /// `α = 1, β = 0`: the product as it is.
    fn plain() -> Self {
        Scale {
            alpha: T::ONE,
            beta: T::default(),
            add: None,
        }
    }

    /// `α·x + β·prior`, `prior` ignored when `β = 0` (it may be anything, NaN included):
    /// what [`store`] writes, one element at a time.
    #[inline(always)]
    fn apply(self, x: T, prior: T) -> T {
        if self.beta == T::default() {
            self.alpha * x
        } else {
            self.alpha * x + self.beta * prior
        }
    }
}

/// The sum of the lanes, halves added pairwise (a fixed order for a given `L`, a power of
/// two).
#[inline(always)]
fn lane_sum<T: Real, const L: usize>(mut v: [T; L]) -> T {
    let mut w = L;
    while w > 1 {
        w /= 2;
        for l in 0..w {
            v[l] = v[l] + v[l + w];
        }
    }
    v[0]
}

/// `R × J` dot products: each of the `R` rows `x[r]` (all `k` long, their `k % L` last
/// elements zero-padded in `tail[r]`) with `J` columns of `b` packed by [`gemm_dot`] (chunk
/// `s` of column `j` at `(s·stride + j)·L`, zero-padded past `k`): `L`-lane partial sums in
/// order over the row, then [`lane_sum`]. `R·J` independent accumulators hide the latency of
/// the multiply-adds; the packed chunks of one column lie `stride·L` apart, a stride only
/// known at run time.
#[inline(always)]
fn dot_rows<T: Real, const F: bool, const L: usize, const R: usize, const J: usize>(
    x: [&[T]; R],
    tail: [&[T; L]; R],
    bt: &[T],
    stride: usize,
) -> [[T; J]; R] {
    #[inline(always)]
    fn step<T: Real, const F: bool, const L: usize, const R: usize, const J: usize>(
        acc: &mut [[[T; L]; J]; R],
        xs: [&[T; L]; R],
        ys: &[T],
    ) {
        for j in 0..J {
            let yj: &[T; L] = ys[j * L..(j + 1) * L].try_into().expect("L lanes");
            for r in 0..R {
                for l in 0..L {
                    acc[r][j][l] = T::madd::<F>(xs[r][l], yj[l], acc[r][j][l]);
                }
            }
        }
    }
    let k = x[0].len();
    let whole = k / L;
    let mut acc = [[[T::default(); L]; J]; R];
    let mut off = 0;
    for s in 0..whole {
        let xs = std::array::from_fn(|r| x[r][s * L..(s + 1) * L].try_into().expect("L elements"));
        step::<T, F, L, R, J>(&mut acc, xs, &bt[off..off + J * L]);
        off += stride * L;
    }
    if whole * L < k {
        step::<T, F, L, R, J>(&mut acc, tail, &bt[off..off + J * L]);
    }
    acc.map(|row| row.map(lane_sum))
}

/// The dot-product form, for few columns (`n < L`, one vector) and rows of `a` read in place
/// (`csa = 1`): `b` is copied into 64-byte aligned chunks of `L` elements of each column
/// (zero-padded past `k`) and each element of `c` is a dot product over `L` lanes
/// ([`dot_rows`]), two rows of `a` by up to five columns per pass ([`dot_columns`]). The
/// broadcast form fills only `n` of a vector's `L` lanes, and an unaligned packed copy
/// loses most of the gain.
#[inline(always)]
fn gemm_dot<T: Real, K: Micro<T>, const L: usize>(
    g: &Gemm,
    a: &[T],
    b: &[T],
    c: &mut [T],
    sc: Scale<'_, T>,
) {
    let (m, k, n) = (g.m, g.k, g.n);
    let kp = k.next_multiple_of(L);
    let mut storage = vec![T::default(); n * kp + 64 / std::mem::size_of::<T>()];
    let bt = aligned_64(&mut storage, n * kp);
    for (p, chunk) in (0..k).step_by(L).zip(bt.chunks_exact_mut(n * L)) {
        for (j, lanes) in chunk.chunks_exact_mut(L).enumerate() {
            let first = g.boff + p as isize * g.rsb + j as isize * g.csb;
            for (l, e) in lanes.iter_mut().enumerate().take(k - p) {
                *e = b[(first + l as isize * g.rsb) as usize];
            }
        }
    }
    let whole = k / L * L;
    let row = |i: usize| {
        let start = (g.aoff + i as isize * g.rsa) as usize;
        let x = &a[start..start + k];
        let mut tail = [T::default(); L];
        tail[..k - whole].copy_from_slice(&x[whole..]);
        (x, tail)
    };
    let mut i = 0;
    while i < m {
        if i + 2 <= m {
            let ((x0, t0), (x1, t1)) = (row(i), row(i + 1));
            dot_columns::<T, K, L, 2>(i, [x0, x1], [&t0, &t1], bt, c, n, sc);
            i += 2;
        } else {
            let (x0, t0) = row(i);
            dot_columns::<T, K, L, 1>(i, [x0], [&t0], bt, c, n, sc);
            i += 1;
        }
    }
}

/// Rows `i0..i0+R` of `c` in the dot-product form, up to five columns at a time (`2×5`
/// accumulators: enough independent multiply-adds, few enough registers at every level).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn dot_columns<T: Real, K: Micro<T>, const L: usize, const R: usize>(
    i0: usize,
    x: [&[T]; R],
    tail: [&[T; L]; R],
    bt: &[T],
    c: &mut [T],
    n: usize,
    sc: Scale<'_, T>,
) {
    let mut j0 = 0;
    while j0 < n {
        let bt = &bt[j0 * L..];
        let at = (i0, j0);
        let w = (n - j0).min(5);
        match w {
            1 => store(c, n, at, &K::dot::<L, R, 1>(x, tail, bt, n), w, sc),
            2 => store(c, n, at, &K::dot::<L, R, 2>(x, tail, bt, n), w, sc),
            3 => store(c, n, at, &K::dot::<L, R, 3>(x, tail, bt, n), w, sc),
            4 => store(c, n, at, &K::dot::<L, R, 4>(x, tail, bt, n), w, sc),
            _ => store(c, n, at, &K::dot::<L, R, 5>(x, tail, bt, n), w, sc),
        }
        j0 += w;
    }
}

/// The `len` elements of `v` from its first 64-byte aligned one (`v` holds `len` plus a
/// cache line): vector loads from the packed copies then never straddle two cache lines.
fn aligned_64<T>(v: &mut [T], len: usize) -> &mut [T] {
    let size = std::mem::size_of::<T>();
    let skip = (64 - v.as_ptr() as usize % 64) % 64 / size;
    &mut v[skip..skip + len]
}

/// The three ways of computing a product (the forms differ in what fills the vectors).
trait Form {
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
struct Broadcast;
/// [`gemm_blocked`] (`BMR × BNR` register blocks).
struct Blocked;
/// [`gemm_dot`].
struct Dot;
/// [`gemm_transposed`].
struct Transposed;

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
enum Choice {
    Broadcast,
    Dot,
    Transposed,
    Blocked,
}

fn choose(g: &Gemm, nv: usize) -> Choice {
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

/// `c = (bᵀ @ aᵀ)ᵀ` for a transposed `a` and few columns: the broadcast form over the
/// transposed product, whose right operand `aᵀ` then has contiguous rows read in place and
/// whose `m` columns fill the vectors (the broadcast form copies `a` into panels and fills 10
/// of 16 lanes for ten columns). The same products in the
/// same order as [`gemm_broadcast`], into a scratch `n × m` matrix, then scaled into `c`.
#[inline(always)]
fn gemm_transposed<T: Real, K: Micro<T>, const MR: usize, const NR: usize, const NV: usize>(
    g: &Gemm,
    a: &[T],
    b: &[T],
    c: &mut [T],
    sc: Scale<'_, T>,
) {
    let (m, n) = (g.m, g.n);
    let t = Gemm {
        m: n,
        k: g.k,
        n: m,
        aoff: g.boff,
        rsa: g.csb,
        csa: g.rsb,
        boff: g.aoff,
        rsb: g.csa,
        csb: g.rsa,
    };
    let mut ct = vec![T::default(); m * n];
    let plain = Scale::plain();
    gemm_broadcast::<T, K, MR, NR, NV>(&t, b, a, &mut ct, plain);
    for (j, col) in ct.chunks_exact(m).enumerate() {
        for (i, &x) in col.iter().enumerate() {
            let prior = match sc.add {
                Some(add) => add.row(i, j, 1)[0],
                None => c[i * n + j],
            };
            c[i * n + j] = sc.apply(x, prior);
        }
    }
}

/// Bytes of the blocked form's packed panel of the left operand (`MR` rows × `kc` steps,
/// read once per register block: it stays in L1): [`crate::CacheBlocks::gemm_a_panel_bytes`].
fn a_panel_bytes() -> usize {
    crate::tune::tuning().blocks.gemm_a_panel_bytes
}

/// Whether a scaled product (`c = α·a@b + β·c` other than `α = 1, β = 0`) with `k` steps
/// of `elem`-byte elements takes the blocked form in one block of steps at AVX-512 (12-row
/// panels), so without its scratch of partial sums: with that scratch the blocked form was
/// no faster than `matrixmultiply` (`relu(x @ w + b)` at 1024², `x @ w + b` at
/// 256×784×512: within the noise, 3–9 % slower in most runs).
pub(super) fn scaled_in_one_block(k: usize, elem: usize) -> bool {
    k <= a_panel_bytes() / (12 * elem)
}

/// The cache blocks of [`gemm_blocked`] (tests shrink them to reach every block edge with
/// small operands).
#[derive(Clone, Copy, Debug)]
pub(super) struct Blocking {
    /// [`a_panel_bytes`].
    a_panel: usize,
    /// [`b_block_bytes`].
    b_block: usize,
    /// [`A_BLOCK_BYTES`].
    a_block: usize,
}

impl Blocking {
    /// The blocks of the caches in force ([`crate::tuning`]).
    pub(super) fn current() -> Blocking {
        Blocking {
            a_panel: a_panel_bytes(),
            b_block: b_block_bytes(),
            a_block: A_BLOCK_BYTES,
        }
    }
}

/// The blocked form for large products: the right operand is copied block by block
/// (`kc × nc`, [`b_block_bytes`]: it stays in L2) into panels of `NR` columns
/// ([`pack_panels`]), the left operand `MR` rows at a time into `kc × MR` panels
/// ([`a_panel_bytes`]: in L1) kept for the later blocks of columns (in groups of rows of
/// [`A_BLOCK_BYTES`]), and each register block walks both panels contiguously
/// ([`Micro::packed`]). The steps `p` go in blocks of `kc`, each register block
/// continuing the partial sums the previous one stored (so every element is the one
/// ordered sum over `p`): in `c` for a product stored unscaled, else in a scratch block
/// (`c` then holds what the scaling adds in, read once by the last block).
#[inline(always)]
fn gemm_blocked<T: Real, K: Micro<T>, const MR: usize, const NR: usize>(
    g: &Gemm,
    a: &[T],
    b: &[T],
    c: &mut [T],
    sc: Scale<'_, T>,
    bk: Blocking,
) {
    let k = g.k;
    let size = std::mem::size_of::<T>();
    let kblocks = k.div_ceil((bk.a_panel / (MR * size)).max(1)).max(1);
    let kc = k.div_ceil(kblocks);
    let nc = (bk.b_block / (kc * size)).max(NR) / NR * NR;
    let mc = (bk.a_block / (kc * size)).max(MR) / MR * MR;
    // The buffers are moved out of the thread-local and back rather than used inside a
    // closure passed to it: a closure's body is compiled with the thread-local's code, at the
    // baseline ISA level in a default build, so the loops, packing and stores of `blocks`
    // ran as SSE2 there (default build 4–8 % slower than `-C target-cpu=native` at 1024³).
    let mut scratch = T::take_scratch();
    let Scratch { b: bp, a: ap, part } = &mut scratch;
    blocks::<T, K, MR, NR>(g, a, b, c, sc, (kblocks, kc, nc, mc), (bp, ap, part));
    T::put_scratch(scratch);
}

/// The loops of [`gemm_blocked`] over its blocks, `part` holding the partial sums of a
/// scaled product (whose `c` holds what the last block adds in).
#[inline(always)]
#[allow(clippy::type_complexity)]
fn blocks<T: Real, K: Micro<T>, const MR: usize, const NR: usize>(
    g: &Gemm,
    a: &[T],
    b: &[T],
    c: &mut [T],
    sc: Scale<'_, T>,
    (kblocks, kc, nc, mc): (usize, usize, usize, usize),
    (bp, ap, part): (&mut Vec<T>, &mut Vec<T>, &mut Vec<T>),
) {
    let (m, k, n) = (g.m, g.k, g.n);
    let unscaled = Scale::plain();
    let plain = sc.alpha == T::ONE && sc.beta == T::default();
    for ic in (0..m).step_by(mc) {
        let mn = mc.min(m - ic);
        if !plain && kblocks > 1 {
            part.clear();
            part.resize(mn * n, T::default());
        }
        for q in 0..kblocks {
            let p0 = q * kc;
            let kq = kc.min(k - p0);
            // Rows `ic..ic + mn` as `MR`-row panels, each packed just before the first block
            // of columns uses it (still in L1 then) and read again by the later ones.
            ap.resize(mn.div_ceil(MR) * MR * kq, T::default());
            let last = q + 1 == kblocks;
            for jc in (0..n).step_by(nc) {
                let jn = nc.min(n - jc);
                pack_panels::<T, NR>(g, b, (p0, kq), (jc, jn), bp);
                for (t, apanel) in ap.chunks_exact_mut(kq * MR).enumerate() {
                    let i0 = ic + t * MR;
                    let rows = MR.min(m - i0);
                    if jc == 0 {
                        pack_rows::<T, MR>(g, a, (i0, rows), (p0, kq), apanel);
                    }
                    let apanel = &*apanel;
                    for (s, panel) in bp.chunks_exact(kq * NR).enumerate() {
                        let j0 = jc + s * NR;
                        let (at, at_part) = ((i0, j0), (i0 - ic, j0));
                        let w = NR.min(jc + jn - j0);
                        let init = (q > 0).then(|| {
                            if plain {
                                tile::<T, MR, NR>(c, n, at, (rows, w))
                            } else {
                                tile::<T, MR, NR>(part, n, at_part, (rows, w))
                            }
                        });
                        let acc = K::packed::<MR, NR>(apanel, panel, kq, init.as_ref());
                        if last {
                            store(c, n, at, &acc[..rows], w, sc);
                        } else if plain {
                            store(c, n, at, &acc[..rows], w, unscaled);
                        } else {
                            store(part, n, at_part, &acc[..rows], w, unscaled);
                        }
                    }
                }
            }
        }
    }
}

/// Copies rows `i0..i0+rows` (`rows <= MR`), columns `p0..p0+kq` of `a` into `out` as a
/// `kq × MR` panel (entry `p` holds element `p` of each row), rows past `rows` zero.
fn pack_rows<T: Real, const MR: usize>(
    g: &Gemm,
    a: &[T],
    (i0, rows): (usize, usize),
    (p0, kq): (usize, usize),
    out: &mut [T],
) {
    debug_assert_eq!(out.len(), kq * MR);
    if rows < MR {
        out.fill(T::default());
    }
    let base = |r: usize| g.aoff + (i0 + r) as isize * g.rsa + p0 as isize * g.csa;
    if g.csa == 1 {
        // Rows read in place, written `MR` apart: one group of `MR` at a time (a write
        // every `MR` elements along each row compiled to a scatter, a sixth of the time).
        let src: [&[T]; MR] = std::array::from_fn(|r| {
            if r < rows {
                let at = base(r) as usize;
                &a[at..at + kq]
            } else {
                &[]
            }
        });
        for (p, o) in out.chunks_exact_mut(MR).enumerate() {
            for r in 0..rows {
                o[r] = src[r][p];
            }
        }
    } else if g.rsa == 1 {
        // A transposed `a`: the `rows` elements of each step are contiguous.
        for (p, o) in out.chunks_exact_mut(MR).enumerate() {
            let at = (base(0) + p as isize * g.csa) as usize;
            o[..rows].copy_from_slice(&a[at..at + rows]);
        }
    } else {
        for (p, o) in out.chunks_exact_mut(MR).enumerate() {
            for (r, x) in o[..rows].iter_mut().enumerate() {
                *x = a[(base(r) + p as isize * g.csa) as usize];
            }
        }
    }
}

/// Bytes of the right operand's block that both forms keep in the L2 cache while every
/// block of rows passes over it: [`crate::CacheBlocks::gemm_b_block_bytes`].
fn b_block_bytes() -> usize {
    crate::tune::tuning().blocks.gemm_b_block_bytes
}

/// Bytes of one row of the left operand's panel per block of steps `p` at most (the panel,
/// `MR` such rows, stays in L1), when the product is stored unscaled:
/// [`crate::CacheBlocks::gemm_kc_bytes`].
fn kc_bytes() -> usize {
    crate::tune::tuning().blocks.gemm_kc_bytes
}

/// Copies rows `p0..p0+kq`, columns `jc..jc+jn` of `b` into `out` as panels of `NR`
/// columns: panel `s` holds columns `jc + s·NR ..` for each row in turn (`kq × NR`
/// contiguous), the last panel zero-padded to `NR` columns.
fn pack_panels<T: Real, const NR: usize>(
    g: &Gemm,
    b: &[T],
    (p0, kq): (usize, usize),
    (jc, jn): (usize, usize),
    out: &mut Vec<T>,
) {
    out.clear();
    out.resize(jn.div_ceil(NR) * NR * kq, T::default());
    for (s, panel) in out.chunks_exact_mut(NR * kq).enumerate() {
        let j0 = jc + s * NR;
        let w = NR.min(jc + jn - j0);
        for (p, row) in panel.chunks_exact_mut(NR).enumerate() {
            let base = g.boff + (p0 + p) as isize * g.rsb + j0 as isize * g.csb;
            if g.csb == 1 && w == NR {
                // A constant width: vector moves, not a `memmove` call per row.
                let at = base as usize;
                let src: &[T; NR] = b[at..at + NR].try_into().expect("NR elements");
                row.copy_from_slice(src);
            } else if g.csb == 1 {
                let at = base as usize;
                row[..w].copy_from_slice(&b[at..at + w]);
            } else {
                for (j, o) in row[..w].iter_mut().enumerate() {
                    *o = b[(base + j as isize * g.csb) as usize];
                }
            }
        }
    }
}

/// The broadcast form (see the module docs), blocked for the caches: columns in blocks of
/// `nc` whose `kc × nc` slice of `b` fits [`b_block_bytes`], and, for a product stored
/// unscaled, the steps `p` in blocks of `kc` ([`kc_bytes`]), the register blocks of each
/// continuing the partial sums the previous one stored in `c` (so every element is still
/// the one ordered sum over `p`). A product small enough is one block.
#[inline(always)]
fn gemm_broadcast<T: Real, K: Micro<T>, const MR: usize, const NR: usize, const NV: usize>(
    g: &Gemm,
    a: &[T],
    b: &[T],
    c: &mut [T],
    sc: Scale<'_, T>,
) {
    let (m, k, n) = (g.m, g.k, g.n);
    let size = std::mem::size_of::<T>();
    let unscaled = Scale::plain();
    let plain = sc.alpha == T::ONE && sc.beta == T::default();
    let kblocks = if plain {
        k.div_ceil((kc_bytes() / size).max(1)).max(1)
    } else {
        1
    };
    let kc = k.div_ceil(kblocks);
    let nc = (b_block_bytes() / (kc * size)).max(NR) / NR * NR;
    let mut packed: Vec<T> = Vec::new();
    let mut tail = Vec::new();
    let mut scratch = Vec::new();
    let mut scratch1 = Vec::new();
    for jc in (0..n).step_by(nc) {
        let jn = nc.min(n - jc);
        for q in 0..kblocks {
            let p0 = q * kc;
            let kq = kc.min(k - p0);
            let pack = g.csb != 1 || (m >= PACK_ROWS && kq * jn * size > PACK_MIN_BYTES);
            let rows = if !pack {
                Rows {
                    data: b,
                    off: g.boff + p0 as isize * g.rsb + jc as isize,
                    rs: g.rsb,
                }
            } else {
                pack_panels::<T, NR>(g, b, (p0, kq), (jc, jn), &mut packed);
                Rows {
                    data: &packed,
                    off: 0,
                    rs: NR as isize,
                }
            };
            let nfull = jn / NV * NV;
            if !pack && nfull < jn {
                tail.clear();
                tail.resize(kq * NV, T::default());
                for (p, t) in tail.chunks_exact_mut(NV).enumerate() {
                    let start = (rows.off + p as isize * rows.rs) as usize + nfull;
                    t[..jn - nfull].copy_from_slice(&rows.data[start..start + jn - nfull]);
                }
            }
            let sub = Gemm {
                k: kq,
                n: jn,
                aoff: g.aoff + p0 as isize * g.csa,
                ..*g
            };
            let to = Dest {
                ldc: n,
                jc,
                cont: q > 0,
                sc: if q + 1 == kblocks { sc } else { unscaled },
                panels: pack.then_some(kq),
            };
            let mut i0 = 0;
            while i0 + MR <= m {
                row_block::<T, K, MR, NR, NV>(&sub, a, i0, rows, &tail, &mut scratch, c, to);
                i0 += MR;
            }
            while i0 < m {
                row_block::<T, K, 1, NR, NV>(&sub, a, i0, rows, &tail, &mut scratch1, c, to);
                i0 += 1;
            }
        }
    }
}

macro_rules! dispatch {
    ($name:ident, $large:ident, $at:ident, $t:ty, [$($p512:literal),*], [$($p256:literal),*], [$($p128:literal),*]) => {
        /// `c = α·(a @ b) + β·c` at the current ISA level (see the module docs).
        pub(super) fn $name(g: &Gemm, a: &[$t], b: &[$t], c: &mut [$t], sc: Scale<'_, $t>) {
            $at(crate::simd::isa(), None, g, a, b, c, sc)
        }

        /// Like the function above for a large product: the blocked form over packed
        /// operands ([`gemm_blocked`]).
        pub(super) fn $large(g: &Gemm, a: &[$t], b: &[$t], c: &mut [$t], sc: Scale<'_, $t>) {
            $at(crate::simd::isa(), Some(Blocking::current()), g, a, b, c, sc)
        }

        /// `c = α·(a @ b) + β·c` at `level`, lowered to what the CPU has (tests run every
        /// level without touching the process-wide one). Each form is its own copy per
        /// level, so adding one does not change how the others compile.
        fn $at(
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

#[cfg(test)]
mod tests {
    //! Every level the machine runs, against an `f64` triple loop, over small shapes with
    //! row-major, transposed, reversed and broadcast operands. Miri runs a subset.
    use super::*;
    use crate::kernels::matmul::tests::naive;
    use crate::simd::{detected_isa, Isa};

    /// The layouts of an `r × s` operand stored in `r·s + 1` elements (one of offset):
    /// row-major, column-major (transposed), rows reversed, columns reversed, and (when
    /// `r > 1`) every row the same (row stride 0).
    fn layouts(r: usize, s: usize) -> Vec<(isize, isize, isize)> {
        let (ri, si) = (r as isize, s as isize);
        let mut v = vec![
            (1, si, 1),
            (1, 1, ri),
            (1 + (ri - 1) * si, -si, 1),
            (si, si, -1),
        ];
        if r > 1 {
            v.push((0, 0, 1));
        }
        v
    }

    fn check(level: Isa, m: usize, k: usize, n: usize, all_layouts: bool) {
        check_form(level, None, (m, k, n), all_layouts)
    }

    /// [`check`] of the small forms (`None`) or the blocked form with blocks `large`.
    fn check_form(
        level: Isa,
        large: Option<Blocking>,
        (m, k, n): (usize, usize, usize),
        all_layouts: bool,
    ) {
        let a64: Vec<f64> = (0..m * k + 1)
            .map(|x| ((x * 7) % 13) as f64 * 0.25 - 1.5)
            .collect();
        let b64: Vec<f64> = (0..k * n + 1)
            .map(|x| ((x * 5) % 11) as f64 * 0.5 - 2.0)
            .collect();
        let a32: Vec<f32> = a64.iter().map(|&x| x as f32).collect();
        let b32: Vec<f32> = b64.iter().map(|&x| x as f32).collect();
        let (la, lb) = (layouts(m, k), layouts(k, n));
        let pairs: Vec<_> = if all_layouts {
            la.iter()
                .flat_map(|&x| lb.iter().map(move |&y| (x, y)))
                .collect()
        } else {
            vec![(la[0], lb[0]), (la[1], lb[1])]
        };
        for ((aoff, rsa, csa), (boff, rsb, csb)) in pairs {
            let g = Gemm {
                m,
                k,
                n,
                aoff,
                rsa,
                csa,
                boff,
                rsb,
                csb,
            };
            assert!(g.in_bounds(a64.len(), b64.len(), m * n));
            let want = naive(&g, &a64, &b64);
            // `c = α·(a@b) + β·c` for the plain product, a scaled one over a `c` that must
            // not be read (NaN), and an SGD-like update of a prefilled `c`.
            let prior: Vec<f64> = (0..m * n).map(|x| (x % 9) as f64 * 0.5 - 2.0).collect();
            for (alpha, beta) in [(1.0, 0.0), (2.0, 0.0), (-0.5, 1.0), (1.0, -1.0)] {
                let expect: Vec<f64> = want
                    .iter()
                    .zip(&prior)
                    .map(|(&p, &c)| alpha * p + beta * c)
                    .collect();
                let start = |x: f64| if beta == 0.0 { f64::NAN } else { x };
                let mut c: Vec<f64> = prior.iter().map(|&x| start(x)).collect();
                let sc = Scale {
                    alpha,
                    beta,
                    add: None,
                };
                dgemm_at(level, large, &g, &a64, &b64, &mut c, sc);
                // The inputs are multiples of 1/4 and 1/2 with small sums, the coefficients
                // powers of two: every result is exact in f64 and f32.
                assert_eq!(
                    c,
                    expect,
                    "f64 {m}x{k}x{n} {level:?} {large:?} {:?} α={alpha} β={beta}",
                    (rsa, csa, rsb, csb)
                );
                let mut c32: Vec<f32> = prior.iter().map(|&x| start(x) as f32).collect();
                let sc = Scale {
                    alpha: alpha as f32,
                    beta: beta as f32,
                    add: None,
                };
                sgemm_at(level, large, &g, &a32, &b32, &mut c32, sc);
                let c32: Vec<f64> = c32.iter().map(|&x| x as f64).collect();
                assert_eq!(
                    c32,
                    expect,
                    "f32 {m}x{k}x{n} {level:?} {large:?} {:?} α={alpha} β={beta}",
                    (rsa, csa, rsb, csb)
                );
                if beta == 0.0 {
                    continue;
                }
                // The addend read in place instead of from `c` (which must then not be
                // read: NaN): rows `n + 3` apart from element 2, and one row for all.
                for rs in [n + 3, 0] {
                    let len = 2 + (m - 1) * rs + n;
                    let l64: Vec<f64> = (0..len).map(|x| (x % 7) as f64 * 0.5 - 1.5).collect();
                    let l32: Vec<f32> = l64.iter().map(|&x| x as f32).collect();
                    let expect: Vec<f64> = (0..m * n)
                        .map(|e| alpha * want[e] + beta * l64[2 + (e / n) * rs + e % n])
                        .collect();
                    let mut c = vec![f64::NAN; m * n];
                    let sc = Scale {
                        alpha,
                        beta,
                        add: Some(Addend {
                            data: &l64[..],
                            off: 2,
                            rs: rs as isize,
                        }),
                    };
                    dgemm_at(level, large, &g, &a64, &b64, &mut c, sc);
                    assert_eq!(
                        c, expect,
                        "f64 addend rs={rs} {m}x{k}x{n} {level:?} {large:?} α={alpha} β={beta}"
                    );
                    let mut c32 = vec![f32::NAN; m * n];
                    let sc = Scale {
                        alpha: alpha as f32,
                        beta: beta as f32,
                        add: Some(Addend {
                            data: &l32[..],
                            off: 2,
                            rs: rs as isize,
                        }),
                    };
                    sgemm_at(level, large, &g, &a32, &b32, &mut c32, sc);
                    let c32: Vec<f64> = c32.iter().map(|&x| x as f64).collect();
                    assert_eq!(
                        c32, expect,
                        "f32 addend rs={rs} {m}x{k}x{n} {level:?} {large:?} α={alpha} β={beta}"
                    );
                }
            }
        }
    }

    #[test]
    fn small_gemm_matches_the_triple_loop_at_every_level() {
        // Under Miri every level runs the same baseline copy: one level, a few shapes.
        let levels: Vec<Isa> = if cfg!(miri) {
            vec![Isa::Sse2]
        } else {
            Isa::ALL
                .into_iter()
                .filter(|&l| l <= detected_isa())
                .collect()
        };
        let dims: &[usize] = if cfg!(miri) {
            &[1, 5, 9]
        } else if std::env::var_os("KILN_EMULATED").is_some() {
            // Under qemu-user (`.ci/run`'s aarch64 step) the full sweep takes minutes: the
            // block-size edges only.
            &[1, 3, 4, 5, 8, 9, 16, 17, 33, 65]
        } else {
            &[
                1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 70,
            ]
        };
        for &level in &levels {
            for &m in dims {
                for &k in dims {
                    for &n in dims {
                        // Every layout pair on a spread of shapes, two pairs on the rest.
                        let all = (m + k + n) % 5 == 0 || m.max(k).max(n) <= 9;
                        check(level, m, k, n, all);
                    }
                }
            }
        }
    }

    /// A 784-512-10 MLP's products at batch 256 (its training step, W7) and others: the
    /// output layer and its gradients take the narrow forms at every vector width, square
    /// and wide products the broadcast form.
    #[test]
    fn the_blocked_form_matches_the_triple_loop_across_its_block_edges() {
        // Blocks shrunk so that small operands cross every edge: steps in blocks of 5 to 20
        // (the continued partial sums of an unscaled product), column blocks of one or two
        // panels with a partial last panel, groups of one or two row panels with a partial
        // last one; every layout.
        let tiny = Blocking {
            a_panel: 480,
            b_block: 4 << 10,
            a_block: 3 << 8,
        };
        let levels: Vec<Isa> = if cfg!(miri) {
            vec![Isa::Sse2]
        } else {
            Isa::ALL
                .into_iter()
                .filter(|&l| l <= detected_isa())
                .collect()
        };
        let shapes: &[(usize, usize, usize)] = if cfg!(miri) {
            &[(7, 11, 9)]
        } else {
            &[
                (1, 1, 1),
                (13, 13, 33),
                (12, 37, 70),
                (25, 7, 100),
                (6, 50, 31),
                (31, 21, 65),
            ]
        };
        for &level in &levels {
            for &shape in shapes {
                check_form(level, Some(tiny), shape, true);
                check_form(level, Some(Blocking::current()), shape, false);
            }
        }
    }

    /// Products as large as those [`crate::Tuning::gemm_broadcast_avx512`] sends to the
    /// broadcast form (a parser's `32×1404 @ 1404×256` step and shapes crossing its blocks of
    /// steps and of the right operand's columns), at every level, row-major and transposed.
    #[test]
    fn the_broadcast_form_matches_the_triple_loop_on_large_products() {
        if cfg!(miri) {
            return;
        }
        for level in Isa::ALL.into_iter().filter(|&l| l <= detected_isa()) {
            for shape in [(32, 1404, 256), (37, 700, 300), (70, 300, 530)] {
                check(level, shape.0, shape.1, shape.2, false);
            }
        }
    }

    #[test]
    fn few_columns_take_the_transposed_or_the_dot_form() {
        let g = |m: usize, k: usize, n: usize, (rsa, csa): (isize, isize)| Gemm {
            m,
            k,
            n,
            aoff: 0,
            rsa,
            csa,
            boff: 0,
            rsb: n as isize,
            csb: 1,
        };
        for nv in [16, 8, 4] {
            // h @ w2 (h row-major): dot products.
            assert_eq!(choose(&g(256, 512, 3, (512, 1)), nv), Choice::Dot);
            // hᵀ @ dl (h transposed in place): the transposed product.
            assert_eq!(choose(&g(512, 256, 3, (1, 512)), nv), Choice::Transposed);
            // dl @ w2ᵀ (512 columns) and a square product: the broadcast form.
            assert_eq!(choose(&g(256, 10, 512, (10, 1)), nv), Choice::Broadcast);
            assert_eq!(choose(&g(64, 64, 64, (64, 1)), nv), Choice::Broadcast);
            // Too few rows to transpose, too short to take dot products.
            assert_eq!(choose(&g(2, 256, 3, (1, 2)), nv), Choice::Broadcast);
            assert_eq!(choose(&g(256, 2, 3, (2, 1)), nv), Choice::Broadcast);
        }
        for nv in [16, 8, 4] {
            assert_eq!(choose(&g(256, 512, 10, (512, 1)), nv), Choice::Dot);
            assert_eq!(choose(&g(512, 256, 15, (1, 512)), nv), Choice::Transposed);
            assert_eq!(choose(&g(256, 512, 16, (512, 1)), nv), Choice::Broadcast);
        }
    }

    #[test]
    fn every_size_from_1_to_100_in_each_dimension() {
        let sizes: Vec<usize> = if cfg!(miri) {
            vec![1, 6]
        } else {
            // Up to 100: a full 64-column block, then a 16-column vector and a partial one.
            (1..=100).collect()
        };
        for &s in &sizes {
            check(crate::simd::isa(), s, 3, 5, false);
            check(crate::simd::isa(), 5, s, 3, false);
            check(crate::simd::isa(), 3, 5, s, false);
        }
    }
}
