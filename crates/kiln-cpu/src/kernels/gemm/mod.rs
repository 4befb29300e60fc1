//! The GEMM problem descriptor both matrix-product modules read: [`Gemm`], one `m×k @ k×n`
//! product over strided operands, with its bounds check; and [`tuning`], the table of every
//! constant of the GEMM kernels' choices.
//! Which kernel takes a product is decided in [`super::matmul`]; the small and blocked
//! kernels are in [`super::small_gemm`].
//!
//! Depends on [`crate::walk`] only.

pub(crate) mod tuning;

use crate::walk::Walk;

pub(crate) use tuning::FEW_COLUMNS;

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
