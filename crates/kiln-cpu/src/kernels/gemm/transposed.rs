//! The transposed form: a product with few columns and a transposed `a` computed as the
//! broadcast form over `bᵀ @ aᵀ`, whose right operand then has contiguous rows and whose
//! columns fill the vectors, then scaled into `c`.
//!
//! Depends on [`super`] (the descriptor, `Real`, `Rows`, `Scale`), [`super::micro`] and
//! [`super::broadcast`].

use super::broadcast::gemm_broadcast;
use super::micro::Micro;
use super::{Gemm, Real, Scale};

/// `c = (bᵀ @ aᵀ)ᵀ` for a transposed `a` and few columns: the broadcast form over the
/// transposed product, whose right operand `aᵀ` then has contiguous rows read in place and
/// whose `m` columns fill the vectors (the broadcast form copies `a` into panels and fills 10
/// of 16 lanes for ten columns). The same products in the
/// same order as [`gemm_broadcast`], into a scratch `n × m` matrix, then scaled into `c`.
#[inline(always)]
pub(super) fn gemm_transposed<
    T: Real,
    K: Micro<T>,
    const MR: usize,
    const NR: usize,
    const NV: usize,
>(
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
