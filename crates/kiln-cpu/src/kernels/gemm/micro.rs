//! The register block's interface: [`Micro`], how one ISA level computes an `MR × NR` block
//! of a product (and a packed one, and the dot-product form's `R × J` dots), with the
//! portable implementation [`Lanes`] (arrays LLVM vectorises for the level it is compiled
//! at); and [`Panel`], the left operand's rows as a block reads them (in place or packed).
//!
//! Also the portable dot products of the dot-product form ([`dot_rows`], [`lane_sum`]).
//!
//! Depends on [`super`] (`Real`, `Rows`).

use super::{Real, Rows};

/// `MR` rows of the left operand as the kernel reads them: element `p` of every row.
pub(super) trait Panel<T, const MR: usize>: Copy {
    fn at(&self, p: usize) -> [T; MR];
    /// The first `k` steps only (panics if there are fewer): a kernel that cuts its panel
    /// to its `k` steps first reads every step without a bounds check (four per step in a
    /// block not inlined into its caller, a measurable share of a small product).
    fn first(self, k: usize) -> Self;
}

/// Rows read in place (unit column stride), each `k` long.
#[derive(Clone, Copy)]
pub(super) struct InPlace<'a, T, const MR: usize>(pub(super) [&'a [T]; MR]);

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
pub(super) struct Packed<'a, T, const MR: usize>(pub(super) &'a [[T; MR]]);

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
pub(super) trait Micro<T: Real> {
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
    /// `p` of each row), `b` `k` rows of `NR` values ([`super::blocked::gemm_blocked`]'s panels).
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
pub(super) struct Lanes<const F: bool>;

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

/// The sum of the lanes, halves added pairwise (a fixed order for a given `L`, a power of
/// two).
#[inline(always)]
pub(super) fn lane_sum<T: Real, const L: usize>(mut v: [T; L]) -> T {
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
/// elements zero-padded in `tail[r]`) with `J` columns of `b` packed by [`super::dot::gemm_dot`] (chunk
/// `s` of column `j` at `(s·stride + j)·L`, zero-padded past `k`): `L`-lane partial sums in
/// order over the row, then [`lane_sum`]. `R·J` independent accumulators hide the latency of
/// the multiply-adds; the packed chunks of one column lie `stride·L` apart, a stride only
/// known at run time.
#[inline(always)]
pub(super) fn dot_rows<T: Real, const F: bool, const L: usize, const R: usize, const J: usize>(
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
