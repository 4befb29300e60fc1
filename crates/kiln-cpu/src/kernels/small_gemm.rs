//! A GEMM for small float products, without `matrixmultiply`'s set-up: no packing of the right
//! operand when its rows are contiguous, no allocation proportional to it, no threading.
//!
//! `c = a @ b` (`c` contiguous `m×n`) is computed in blocks of `MR` rows by `NR` columns held
//! in registers: the block's `MR` rows of `a` are copied once into a `k × MR` panel (any
//! strides), and each step `p` of the dot products multiplies that panel's row `p` by `NR`
//! contiguous elements of `b`'s row `p`, read in place. Rows left over (`m % MR`) run one at a
//! time; columns left over (`n % NR`) go through a zero-padded `k × NR` copy of those columns
//! of `b`. A right operand whose column stride is not 1 is first copied into a contiguous
//! `k × n` matrix.
//!
//! Like the other hot loops, the kernel is `#[inline(always)]` generic code compiled for the
//! current [`crate::isa`] level: `NR` is two vector registers wide at that level (f32: 32 for
//! AVX-512, 16 for AVX2, 8 for SSE2; f64 half that) and `MR = 4`, so a block is eight
//! accumulator registers, enough independent multiply-adds to hide the FMA latency. Every
//! element is an ordered sum over `p` of `a[i,p]·b[p,j]` (fused at the AVX2 and AVX-512
//! levels), so results do not depend on the block an element falls in.
//!
//! All indexing is safe (bounds-checked slices); the only `unsafe` is the call into the
//! `#[target_feature]` copies, as in [`crate::simd`].

use super::matmul::Gemm;

/// The float types the kernel handles.
pub(super) trait Real:
    Copy + Default + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self>
{
    /// `a·b + c`, fused when `F`.
    fn madd<const F: bool>(a: Self, b: Self, c: Self) -> Self;
}

impl Real for f32 {
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

/// The `MR × NR` block `ap @ b[.., j0..j0+NR]`, `ap` being the `k × MR` panel of `a`.
#[inline(always)]
fn block<T: Real, const F: bool, const MR: usize, const NR: usize>(
    ap: &[[T; MR]],
    b: Rows<'_, T>,
    j0: usize,
) -> [[T; NR]; MR] {
    let mut acc = [[T::default(); NR]; MR];
    let mut off = b.off + j0 as isize;
    for a in ap {
        let start = off as usize;
        let brow: &[T; NR] = b.data[start..start + NR].try_into().expect("NR elements");
        for r in 0..MR {
            for l in 0..NR {
                acc[r][l] = T::madd::<F>(a[r], brow[l], acc[r][l]);
            }
        }
        off += b.rs;
    }
    acc
}

/// Rows `i0..i0+MR` of `c`: `ap` is refilled with the `k × MR` panel of those rows of `a`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn row_block<T: Real, const F: bool, const MR: usize, const NR: usize>(
    g: &Gemm,
    a: &[T],
    i0: usize,
    b: Rows<'_, T>,
    tail: &[T],
    ap: &mut Vec<[T; MR]>,
    c: &mut [T],
) {
    let (k, n) = (g.k, g.n);
    ap.clear();
    ap.resize(k, [T::default(); MR]);
    for r in 0..MR {
        let base = g.aoff + (i0 + r) as isize * g.rsa;
        if g.csa == 1 {
            let row = &a[base as usize..base as usize + k];
            for (dst, &x) in ap.iter_mut().zip(row) {
                dst[r] = x;
            }
        } else {
            for (p, dst) in ap.iter_mut().enumerate() {
                dst[r] = a[(base + p as isize * g.csa) as usize];
            }
        }
    }
    let nfull = n / NR * NR;
    let mut j0 = 0;
    while j0 < nfull {
        let acc = block::<T, F, MR, NR>(ap, b, j0);
        for (r, row) in acc.iter().enumerate() {
            let at = (i0 + r) * n + j0;
            c[at..at + NR].copy_from_slice(row);
        }
        j0 += NR;
    }
    if nfull < n {
        let panel = Rows {
            data: tail,
            off: 0,
            rs: NR as isize,
        };
        let acc = block::<T, F, MR, NR>(ap, panel, 0);
        let w = n - nfull;
        for (r, row) in acc.iter().enumerate() {
            let at = (i0 + r) * n + nfull;
            c[at..at + w].copy_from_slice(&row[..w]);
        }
    }
}

/// `c = a @ b` for `k > 0`, operands in bounds (checked by the caller).
#[inline(always)]
fn gemm<T: Real, const F: bool, const MR: usize, const NR: usize>(
    g: &Gemm,
    a: &[T],
    b: &[T],
    c: &mut [T],
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
    let nfull = n / NR * NR;
    let mut tail = Vec::new();
    if nfull < n {
        tail.resize(k * NR, T::default());
        for (p, t) in tail.chunks_exact_mut(NR).enumerate() {
            let start = (rows.off + p as isize * rows.rs) as usize + nfull;
            t[..n - nfull].copy_from_slice(&rows.data[start..start + n - nfull]);
        }
    }
    let mut i0 = 0;
    let mut ap = Vec::with_capacity(k);
    while i0 + MR <= m {
        row_block::<T, F, MR, NR>(g, a, i0, rows, &tail, &mut ap, c);
        i0 += MR;
    }
    let mut ap1 = Vec::with_capacity(k);
    while i0 < m {
        row_block::<T, F, 1, NR>(g, a, i0, rows, &tail, &mut ap1, c);
        i0 += 1;
    }
}

macro_rules! dispatch {
    ($name:ident, $at:ident, $t:ty, [$($p512:literal),*], [$($p256:literal),*], [$($p128:literal),*]) => {
        /// `c = a @ b` at the current ISA level (see the module docs).
        pub(super) fn $name(g: &Gemm, a: &[$t], b: &[$t], c: &mut [$t]) {
            $at(crate::simd::isa(), g, a, b, c)
        }

        /// `c = a @ b` at `level`, lowered to what the CPU has (tests run every level
        /// without touching the process-wide one).
        fn $at(level: crate::simd::Isa, g: &Gemm, a: &[$t], b: &[$t], c: &mut [$t]) {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2(g: &Gemm, a: &[$t], b: &[$t], c: &mut [$t]) {
                gemm::<$t, true, $($p256),*>(g, a, b, c)
            }
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
            unsafe fn avx512(g: &Gemm, a: &[$t], b: &[$t], c: &mut [$t]) {
                gemm::<$t, true, $($p512),*>(g, a, b, c)
            }
            match level.min(crate::simd::detected_isa()) {
                #[cfg(all(target_arch = "x86_64", not(miri)))]
                // SAFETY: the level is clamped to `detected_isa()`, which reports `Avx512` only
                // if it found avx512f/vl/dq/bw, avx2 and fma on this CPU.
                crate::simd::Isa::Avx512 => unsafe { avx512(g, a, b, c) },
                #[cfg(all(target_arch = "x86_64", not(miri)))]
                // SAFETY: clamped as above: `Avx2` only if the CPU has avx2 and fma.
                crate::simd::Isa::Avx2 => unsafe { avx2(g, a, b, c) },
                _ => gemm::<$t, false, $($p128),*>(g, a, b, c),
            }
        }
    };
}

// MR, NR per level.
dispatch!(sgemm, sgemm_at, f32, [4, 32], [4, 16], [4, 8]);
dispatch!(dgemm, dgemm_at, f64, [4, 16], [4, 8], [4, 4]);

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
            let mut c = vec![f64::NAN; m * n];
            dgemm_at(level, &g, &a64, &b64, &mut c);
            // The inputs are multiples of 1/4 and 1/2 with small sums: exact in f64 and f32.
            assert_eq!(
                c,
                want,
                "f64 {m}x{k}x{n} {level:?} {:?}",
                (rsa, csa, rsb, csb)
            );
            let mut c32 = vec![f32::NAN; m * n];
            sgemm_at(level, &g, &a32, &b32, &mut c32);
            let c32: Vec<f64> = c32.iter().map(|&x| x as f64).collect();
            assert_eq!(
                c32,
                want,
                "f32 {m}x{k}x{n} {level:?} {:?}",
                (rsa, csa, rsb, csb)
            );
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
    fn every_size_from_1_to_70_in_each_dimension() {
        let sizes: Vec<usize> = if cfg!(miri) {
            vec![1, 6]
        } else {
            (1..=70).collect()
        };
        for &s in &sizes {
            check(crate::simd::isa(), s, 3, 5, false);
            check(crate::simd::isa(), 5, s, 3, false);
            check(crate::simd::isa(), 3, 5, s, false);
        }
    }
}
