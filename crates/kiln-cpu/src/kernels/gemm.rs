//! The GEMM problem descriptor both matrix-product modules read: [`Gemm`], one `m×k @ k×n`
//! product over strided operands, with its bounds check, and the column count below which
//! a product counts as narrow ([`FEW_COLUMNS`]). Which kernel takes a product is decided in
//! [`super::matmul`]; the small and blocked kernels are in [`super::small_gemm`].
//!
//! Depends on [`crate::walk`] only.

use crate::walk::Walk;

/// Products with fewer columns than this (one AVX-512 vector of `f32`) take the small
/// kernels ([`super::small_gemm`]'s transposed and dot-product forms) below `matmul`'s
/// parallel threshold: `matrixmultiply` packs both operands and fills few of its register
/// block's columns.
pub(crate) const FEW_COLUMNS: usize = 16;

/// One `m×k @ k×n` product; every element `aoff + i*rsa + p*csa` (`i < m`, `p < k`) lies in
/// `a`, likewise for `b` (checked by `source::build` against the buffers), and `c` is the
/// contiguous `m×n` output.
#[derive(Clone, Copy)]
pub(crate) struct Gemm {
    pub(crate) m: usize,
    pub(crate) k: usize,
    pub(crate) n: usize,
    pub(crate) aoff: isize,
    pub(crate) rsa: isize,
    pub(crate) csa: isize,
    pub(crate) boff: isize,
    pub(crate) rsb: isize,
    pub(crate) csb: isize,
}

impl Gemm {
    /// Debug check of the bounds the callers guarantee.
    pub(crate) fn in_bounds(&self, alen: usize, blen: usize, clen: usize) -> bool {
        let a = Walk::new(&[self.m, self.k], &[self.rsa, self.csa], self.aoff);
        let b = Walk::new(&[self.k, self.n], &[self.rsb, self.csb], self.boff);
        a.check(alen, "a").is_ok() && b.check(blen, "b").is_ok() && clen == self.m * self.n
    }

    /// Panics unless the operand views lie inside the slices (see [`Self::in_bounds`]).
    pub(crate) fn check(&self, alen: usize, blen: usize, clen: usize) {
        assert!(
            self.in_bounds(alen, blen, clen),
            "matmul operand views out of bounds"
        );
    }
}
