//! The dot-product form, for few columns and rows of `a` read in place: `b` packed into
//! aligned chunks of each column, each element of `c` a dot product over a vector's lanes,
//! two rows by up to five columns per pass.
//!
//! Depends on [`super`] (the descriptor, `Real`, `Scale`), [`super::micro`] and
//! [`super::broadcast`] (`store`).

use super::broadcast::store;
use super::micro::Micro;
use super::{Gemm, Real, Scale};

/// The dot-product form, for few columns (`n < L`, one vector) and rows of `a` read in place
/// (`csa = 1`): `b` is copied into 64-byte aligned chunks of `L` elements of each column
/// (zero-padded past `k`) and each element of `c` is a dot product over `L` lanes
/// ([`super::micro::dot_rows`]), two rows of `a` by up to five columns per pass ([`dot_columns`]). The
/// broadcast form fills only `n` of a vector's `L` lanes, and an unaligned packed copy
/// loses most of the gain.
#[inline(always)]
pub(super) fn gemm_dot<T: Real, K: Micro<T>, const L: usize>(
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
pub(super) fn dot_columns<T: Real, K: Micro<T>, const L: usize, const R: usize>(
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
pub(super) fn aligned_64<T>(v: &mut [T], len: usize) -> &mut [T] {
    let size = std::mem::size_of::<T>();
    let skip = (64 - v.as_ptr() as usize % 64) % 64 / size;
    &mut v[skip..skip + len]
}
