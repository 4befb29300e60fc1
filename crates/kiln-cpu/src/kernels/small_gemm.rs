//! A GEMM for small float products, without `matrixmultiply`'s set-up: no packing of the right
//! operand when its rows are contiguous, no allocation proportional to it, no threading.
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
//! All indexing is safe (bounds-checked slices). `unsafe`: the calls into the
//! `#[target_feature]` copies (as in [`crate::simd`]) and the AVX-512 block's unaligned
//! vector loads and stores inside fixed-size arrays; all compiled out under Miri.

use super::matmul::Gemm;

/// The float types the kernel handles.
pub(super) trait Real:
    Copy + Default + PartialEq + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self>
{
    const ONE: Self;
    /// `a·b + c`, fused when `F`.
    fn madd<const F: bool>(a: Self, b: Self, c: Self) -> Self;
}

impl Real for f32 {
    const ONE: f32 = 1.0;
    #[inline(always)]
    fn madd<const F: bool>(a: f32, b: f32, c: f32) -> f32 {
        if F {
            a.mul_add(b, c)
        } else {
            a * b + c
        }
    }
}

impl Real for f64 {
    const ONE: f64 = 1.0;
    #[inline(always)]
    fn madd<const F: bool>(a: f64, b: f64, c: f64) -> f64 {
        if F {
            a.mul_add(b, c)
        } else {
            a * b + c
        }
    }
}

/// The right operand as the kernel reads it: row `p` starts at `off + p*rs` and its
/// elements are contiguous.
#[derive(Clone, Copy)]
struct Rows<'a, T> {
    data: &'a [T],
    off: isize,
    rs: isize,
}

/// What is stored: `c = α·(a@b) + β·c`, the product scaled and rounded first, then `β·c`
/// (`β = ±1` in practice: exact) added and rounded: the rounding of the epilogue
/// `α·acc ± L` it stands for. `c` is not read when `β = 0`.
#[derive(Clone, Copy)]
pub(super) struct Scale<T> {
    pub(super) alpha: T,
    pub(super) beta: T,
}

/// `MR` rows of the left operand as the kernel reads them: element `p` of every row.
trait Panel<T, const MR: usize>: Copy {
    fn at(&self, p: usize) -> [T; MR];
}

/// Rows read in place (unit column stride), each `k` long.
#[derive(Clone, Copy)]
struct InPlace<'a, T, const MR: usize>([&'a [T]; MR]);

impl<T: Copy, const MR: usize> Panel<T, MR> for InPlace<'_, T, MR> {
    #[inline(always)]
    fn at(&self, p: usize) -> [T; MR] {
        std::array::from_fn(|r| self.0[r][p])
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
}

/// How one ISA level computes a register block: the `MR × NR` block
/// `a @ b[.., j0..j0+NR]` over `k` steps, `a` being `MR` rows.
trait Micro<T> {
    fn block<P: Panel<T, MR>, const MR: usize, const NR: usize>(
        a: P,
        k: usize,
        b: Rows<'_, T>,
        j0: usize,
    ) -> [[T; NR]; MR];
}

/// Arrays LLVM vectorises at the level of the copy it is compiled into (`F`: fused
/// multiply-adds).
struct Lanes<const F: bool>;

impl<T: Real, const F: bool> Micro<T> for Lanes<F> {
    #[inline(always)]
    fn block<P: Panel<T, MR>, const MR: usize, const NR: usize>(
        a: P,
        k: usize,
        b: Rows<'_, T>,
        j0: usize,
    ) -> [[T; NR]; MR] {
        let mut acc = [[T::default(); NR]; MR];
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
/// `ymm` accumulators and spills (W6 7.1 → 17.9 µs per iteration); here the width is fixed.
#[cfg(all(target_arch = "x86_64", not(miri)))]
struct Zmm;

/// The intrinsic blocks: `$lanes` elements per register, at most four registers per row.
#[cfg(all(target_arch = "x86_64", not(miri)))]
macro_rules! zmm_block {
    ($t:ty, $f:ident, $lanes:literal, $zero:ident, $load:ident, $store:ident, $set1:ident, $fmadd:ident) => {
        #[target_feature(enable = "avx512f")]
        #[inline]
        fn $f<P: Panel<$t, MR>, const MR: usize, const NR: usize>(
            a: P,
            k: usize,
            b: Rows<'_, $t>,
            j0: usize,
        ) -> [[$t; NR]; MR] {
            use std::arch::x86_64::*;
            let nv = NR / $lanes;
            assert!(
                NR == nv * $lanes && nv <= 4,
                "{NR} columns in 512-bit registers"
            );
            let mut acc = [[$zero(); 4]; MR];
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
            let mut out = [[0.0; NR]; MR];
            for r in 0..MR {
                for v in 0..nv {
                    // SAFETY: `out[r]` holds `NR` elements: as for the loads above.
                    unsafe { $store(out[r].as_mut_ptr().add(v * $lanes), acc[r][v]) };
                }
            }
            out
        }

        impl Micro<$t> for Zmm {
            #[inline(always)]
            fn block<P: Panel<$t, MR>, const MR: usize, const NR: usize>(
                a: P,
                k: usize,
                b: Rows<'_, $t>,
                j0: usize,
            ) -> [[$t; NR]; MR] {
                debug_assert!(crate::simd::detected_isa() >= crate::simd::Isa::Avx512);
                // SAFETY: `Zmm` is named only in the AVX-512 copies of `dispatch!`, which run
                // only when `detected_isa()` found AVX-512F on this CPU.
                unsafe { $f::<P, MR, NR>(a, k, b, j0) }
            }
        }
    };
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
zmm_block!(
    f32,
    zmm_f32,
    16,
    _mm512_setzero_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_set1_ps,
    _mm512_fmadd_ps
);
#[cfg(all(target_arch = "x86_64", not(miri)))]
zmm_block!(
    f64,
    zmm_f64,
    8,
    _mm512_setzero_pd,
    _mm512_loadu_pd,
    _mm512_storeu_pd,
    _mm512_set1_pd,
    _mm512_fmadd_pd
);

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
    sc: Scale<T>,
) {
    let k = g.k;
    let base = |r: usize| g.aoff + (i0 + r) as isize * g.rsa;
    if g.csa == 1 {
        let rows = InPlace(std::array::from_fn(|r| {
            let start = base(r) as usize;
            &a[start..start + k]
        }));
        columns::<T, K, _, MR, NR, NV>(rows, g, i0, b, tail, c, sc);
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
        columns::<T, K, _, MR, NR, NV>(Packed(scratch), g, i0, b, tail, c, sc);
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
    sc: Scale<T>,
) {
    let (k, n) = (g.k, g.n);
    let mut j0 = 0;
    while j0 + NR <= n {
        let acc = K::block::<P, MR, NR>(rows, k, b, j0);
        store(c, n, (i0, j0), &acc, NR, sc);
        j0 += NR;
    }
    // Columns left over: one vector at a time in place, the last partial vector through
    // the zero-padded copy of those columns.
    while j0 + NV <= n {
        let acc = K::block::<P, MR, NV>(rows, k, b, j0);
        store(c, n, (i0, j0), &acc, NV, sc);
        j0 += NV;
    }
    if j0 < n {
        let panel = Rows {
            data: tail,
            off: 0,
            rs: NV as isize,
        };
        let acc = K::block::<P, MR, NV>(rows, k, panel, 0);
        store(c, n, (i0, j0), &acc, n - j0, sc);
    }
}

/// Writes the first `w` columns of `acc` to rows `i0..` of `c` (`n` columns) from column
/// `j0`, scaled by `sc`.
#[inline(always)]
fn store<T: Real, const MR: usize, const W: usize>(
    c: &mut [T],
    n: usize,
    (i0, j0): (usize, usize),
    acc: &[[T; W]; MR],
    w: usize,
    sc: Scale<T>,
) {
    let zero = T::default();
    for (r, row) in acc.iter().enumerate() {
        let at = (i0 + r) * n + j0;
        let out = &mut c[at..at + w];
        if sc.alpha == T::ONE && sc.beta == zero {
            out.copy_from_slice(&row[..w]);
        } else if sc.beta == zero {
            for (o, &x) in out.iter_mut().zip(row) {
                *o = sc.alpha * x;
            }
        } else {
            for (o, &x) in out.iter_mut().zip(row) {
                *o = sc.alpha * x + sc.beta * *o;
            }
        }
    }
}

/// `c = α·(a @ b) + β·c` for `k > 0`, operands in bounds (checked by the caller).
#[inline(always)]
fn gemm<T: Real, K: Micro<T>, const MR: usize, const NR: usize, const NV: usize>(
    g: &Gemm,
    a: &[T],
    b: &[T],
    c: &mut [T],
    sc: Scale<T>,
) {
    let (m, k, n) = (g.m, g.k, g.n);
    let packed: Vec<T>;
    let rows = if g.csb == 1 {
        Rows {
            data: b,
            off: g.boff,
            rs: g.rsb,
        }
    } else {
        packed = (0..k)
            .flat_map(|p| {
                (0..n).map(move |j| b[(g.boff + p as isize * g.rsb + j as isize * g.csb) as usize])
            })
            .collect();
        Rows {
            data: &packed,
            off: 0,
            rs: n as isize,
        }
    };
    let nfull = n / NV * NV;
    let mut tail = Vec::new();
    if nfull < n {
        tail.resize(k * NV, T::default());
        for (p, t) in tail.chunks_exact_mut(NV).enumerate() {
            let start = (rows.off + p as isize * rows.rs) as usize + nfull;
            t[..n - nfull].copy_from_slice(&rows.data[start..start + n - nfull]);
        }
    }
    let mut i0 = 0;
    let (mut scratch, mut scratch1) = (Vec::new(), Vec::new());
    while i0 + MR <= m {
        row_block::<T, K, MR, NR, NV>(g, a, i0, rows, &tail, &mut scratch, c, sc);
        i0 += MR;
    }
    while i0 < m {
        row_block::<T, K, 1, NR, NV>(g, a, i0, rows, &tail, &mut scratch1, c, sc);
        i0 += 1;
    }
}

macro_rules! dispatch {
    ($name:ident, $at:ident, $t:ty, [$($p512:literal),*], [$($p256:literal),*], [$($p128:literal),*]) => {
        /// `c = α·(a @ b) + β·c` at the current ISA level (see the module docs).
        pub(super) fn $name(g: &Gemm, a: &[$t], b: &[$t], c: &mut [$t], sc: Scale<$t>) {
            $at(crate::simd::isa(), g, a, b, c, sc)
        }

        /// `c = α·(a @ b) + β·c` at `level`, lowered to what the CPU has (tests run every
        /// level without touching the process-wide one).
        fn $at(
            level: crate::simd::Isa,
            g: &Gemm,
            a: &[$t],
            b: &[$t],
            c: &mut [$t],
            sc: Scale<$t>,
        ) {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2(g: &Gemm, a: &[$t], b: &[$t], c: &mut [$t], sc: Scale<$t>) {
                gemm::<$t, Lanes<true>, $($p256),*>(g, a, b, c, sc)
            }
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
            unsafe fn avx512(g: &Gemm, a: &[$t], b: &[$t], c: &mut [$t], sc: Scale<$t>) {
                gemm::<$t, Zmm, $($p512),*>(g, a, b, c, sc)
            }
            match level.min(crate::simd::detected_isa()) {
                #[cfg(all(target_arch = "x86_64", not(miri)))]
                // SAFETY: the level is clamped to `detected_isa()`, which reports `Avx512` only
                // if it found avx512f/vl/dq/bw, avx2 and fma on this CPU.
                crate::simd::Isa::Avx512 => unsafe { avx512(g, a, b, c, sc) },
                #[cfg(all(target_arch = "x86_64", not(miri)))]
                // SAFETY: clamped as above: `Avx2` only if the CPU has avx2 and fma.
                crate::simd::Isa::Avx2 => unsafe { avx2(g, a, b, c, sc) },
                _ => gemm::<$t, Lanes<false>, $($p128),*>(g, a, b, c, sc),
            }
        }
    };
}

// MR, NR (columns per block: four vectors at AVX-512, two below) and NV (one vector) per level.
dispatch!(sgemm, sgemm_at, f32, [4, 64, 16], [4, 16, 8], [4, 8, 4]);
dispatch!(dgemm, dgemm_at, f64, [4, 32, 8], [4, 8, 4], [4, 4, 2]);

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
                dgemm_at(level, &g, &a64, &b64, &mut c, Scale { alpha, beta });
                // The inputs are multiples of 1/4 and 1/2 with small sums, the coefficients
                // powers of two: every result is exact in f64 and f32.
                assert_eq!(
                    c,
                    expect,
                    "f64 {m}x{k}x{n} {level:?} {:?} α={alpha} β={beta}",
                    (rsa, csa, rsb, csb)
                );
                let mut c32: Vec<f32> = prior.iter().map(|&x| start(x) as f32).collect();
                let sc = Scale {
                    alpha: alpha as f32,
                    beta: beta as f32,
                };
                sgemm_at(level, &g, &a32, &b32, &mut c32, sc);
                let c32: Vec<f64> = c32.iter().map(|&x| x as f64).collect();
                assert_eq!(
                    c32,
                    expect,
                    "f32 {m}x{k}x{n} {level:?} {:?} α={alpha} β={beta}",
                    (rsa, csa, rsb, csb)
                );
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
