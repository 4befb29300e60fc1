//! Strided iteration: a [`Walk`] is a resolved view with its dimensions coalesced (size-1
//! dimensions dropped, dimensions that step uniformly merged), walked in *runs* along the
//! innermost dimension so that each run is one `copy_from_slice`, `fill` or strided loop.
//!
//! Depends on `kiln-compiler` (for [`Strided`]) and `kiln-ir`.

use kiln_compiler::Strided;
use kiln_ir::{Error, Result};
use smallvec::{smallvec, SmallVec};

/// A coalesced strided view: linear position `l` (row-major over `shape`) is element
/// `offset + Σ idx(l)[k] * strides[k]` of the source. Always rank ≥ 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Walk {
    /// Coalesced dimensions, outermost first.
    pub shape: SmallVec<[usize; 4]>,
    /// Their element strides.
    pub strides: SmallVec<[isize; 4]>,
    /// Element offset of position 0.
    pub offset: isize,
    /// Number of positions.
    pub numel: usize,
}

impl Walk {
    /// Coalesces `shape`/`strides`.
    pub fn new(shape: &[usize], strides: &[isize], offset: isize) -> Walk {
        let numel: usize = shape.iter().product();
        if numel == 0 {
            return Walk {
                shape: smallvec![0],
                strides: smallvec![1],
                offset,
                numel,
            };
        }
        let mut s: SmallVec<[usize; 4]> = SmallVec::new();
        let mut st: SmallVec<[isize; 4]> = SmallVec::new();
        for (&d, &k) in shape.iter().zip(strides) {
            if d == 1 {
                continue;
            }
            if let (Some(pd), Some(&ps)) = (s.last_mut(), st.last()) {
                if ps == k * d as isize {
                    *pd *= d;
                    *st.last_mut().expect("non-empty") = k;
                    continue;
                }
            }
            s.push(d);
            st.push(k);
        }
        if s.is_empty() {
            s.push(1);
            st.push(1);
        }
        Walk {
            shape: s,
            strides: st,
            offset,
            numel,
        }
    }

    /// The walk of a resolved view.
    pub fn of(v: &Strided) -> Walk {
        Walk::new(v.shape.dims(), &v.strides, v.offset)
    }

    /// The walk of a resolved view with its axes permuted (`perm[i]` is the view axis that
    /// becomes axis `i`).
    pub fn permuted(v: &Strided, perm: &[usize]) -> Walk {
        let shape: SmallVec<[usize; 4]> = perm.iter().map(|&a| v.shape.0[a]).collect();
        let strides: SmallVec<[isize; 4]> = perm.iter().map(|&a| v.strides[a]).collect();
        Walk::new(&shape, &strides, v.offset)
    }

    /// A contiguous walk of `n` positions from `offset`.
    pub fn contiguous(n: usize, offset: isize) -> Walk {
        Walk::new(&[n], &[1], offset)
    }

    /// `Some(offset)` if position `l` is element `offset + l`.
    pub fn contiguous_offset(&self) -> Option<isize> {
        (self.shape.len() == 1 && self.strides[0] == 1).then_some(self.offset)
    }

    /// The lowest and highest element reached (for a non-empty walk), relative to `offset`.
    fn extent(&self) -> (i128, i128) {
        let mut lo = 0i128;
        let mut hi = 0i128;
        for (&d, &s) in self.shape.iter().zip(&self.strides) {
            let span = (d as i128 - 1) * s as i128;
            if span < 0 {
                lo += span;
            } else {
                hi += span;
            }
        }
        (lo, hi)
    }

    /// Checks that every element the walk reaches from `offset` lies in `0..len`.
    /// `what` names the view in the error (formatted only on failure).
    pub fn check_at(&self, offset: isize, len: usize, what: impl std::fmt::Display) -> Result<()> {
        if self.numel == 0 {
            return Ok(());
        }
        let (lo, hi) = self.extent();
        let (lo, hi) = (lo + offset as i128, hi + offset as i128);
        if lo < 0 || hi >= len as i128 {
            return Err(internal(format!(
                "{what}: view {:?} (strides {:?}, offset {offset}) reaches elements {lo}..={hi} of a buffer of {len}",
                self.shape, self.strides
            )));
        }
        Ok(())
    }

    /// Checks that every element the walk reaches lies in `0..len`.
    pub fn check(&self, len: usize, what: impl std::fmt::Display) -> Result<()> {
        self.check_at(self.offset, len, what)
    }

    /// Calls `f(pos, base, stride, len)` for the runs covering positions `start..start + n`:
    /// position `start + pos + t` (for `t < len`) is element `base + t * stride`. Runs come in
    /// increasing `pos`; `offset` replaces the walk's own offset.
    #[inline]
    pub fn runs_at(
        &self,
        offset: isize,
        start: usize,
        n: usize,
        mut f: impl FnMut(usize, isize, isize, usize),
    ) {
        if n == 0 {
            return;
        }
        debug_assert!(start + n <= self.numel);
        let r = self.shape.len();
        let inner = self.shape[r - 1];
        let is = self.strides[r - 1];
        if r == 1 {
            f(0, offset + start as isize * is, is, n);
            return;
        }
        let mut q = start / inner;
        let mut j = start % inner;
        if r == 2 {
            // Rows of a matrix (most walks): the row index is the only counter, and it never
            // wraps (`start + n <= numel`). No index vector to set up per call (row
            // reductions call this for every block).
            let mut base = offset + q as isize * self.strides[0];
            let mut pos = 0;
            loop {
                let len = (inner - j).min(n - pos);
                f(pos, base + j as isize * is, is, len);
                pos += len;
                if pos >= n {
                    return;
                }
                j = 0;
                base += self.strides[0];
            }
        }
        let mut idx: SmallVec<[usize; 4]> = smallvec![0; r - 1];
        let mut base = offset;
        for k in (0..r - 1).rev() {
            idx[k] = q % self.shape[k];
            q /= self.shape[k];
            base += idx[k] as isize * self.strides[k];
        }
        let mut pos = 0;
        loop {
            let len = (inner - j).min(n - pos);
            f(pos, base + j as isize * is, is, len);
            pos += len;
            if pos >= n {
                return;
            }
            j = 0;
            let mut k = r - 1;
            while k > 0 {
                k -= 1;
                idx[k] += 1;
                base += self.strides[k];
                if idx[k] < self.shape[k] {
                    break;
                }
                base -= self.strides[k] * self.shape[k] as isize;
                idx[k] = 0;
            }
        }
    }

    /// [`Walk::runs_at`] from the walk's own offset.
    #[inline]
    pub fn runs(&self, start: usize, n: usize, f: impl FnMut(usize, isize, isize, usize)) {
        self.runs_at(self.offset, start, n, f)
    }
}

/// Copies positions `start..start + dst.len()` of the walk (from `offset`) out of `src`.
/// The walk must have been checked against `src.len()`.
#[inline]
pub fn gather<T: Copy>(src: &[T], walk: &Walk, offset: isize, start: usize, dst: &mut [T]) {
    walk.runs_at(offset, start, dst.len(), |pos, base, stride, len| {
        let d = &mut dst[pos..pos + len];
        let b = base as usize;
        match stride {
            1 => d.copy_from_slice(&src[b..b + len]),
            0 => d.fill(src[b]),
            -1 => {
                d.copy_from_slice(&src[b + 1 - len..=b]);
                d.reverse();
            }
            s => {
                for (t, o) in d.iter_mut().enumerate() {
                    *o = src[(base + t as isize * s) as usize];
                }
            }
        }
    });
}

/// An internal error: the plan broke a contract of the backend interface (a kiln bug).
pub fn internal(message: String) -> Error {
    Error::InvalidArgument {
        op: "cpu backend",
        message,
        hint: "this is a bug in kiln (the plan broke a backend contract); please report it".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(shape: &[usize], strides: &[isize], offset: isize) -> Vec<isize> {
        let n: usize = shape.iter().product();
        let mut out = Vec::new();
        for l in 0..n {
            let mut rem = l;
            let mut e = offset;
            for k in (0..shape.len()).rev() {
                e += (rem % shape[k]) as isize * strides[k];
                rem /= shape[k];
            }
            out.push(e);
        }
        out
    }

    #[test]
    fn runs_match_naive_indexing() {
        let cases: &[(&[usize], &[isize], isize)] = &[
            (&[2, 3, 4], &[12, 4, 1], 0),
            (&[2, 3, 4], &[1, 2, 6], 0),
            (&[3, 1, 4], &[0, 7, -1], 3),
            (&[4, 5], &[-5, -1], 19),
            (&[], &[], 5),
            (&[1, 1], &[9, 9], 2),
            (&[2, 2, 2, 2, 3], &[24, 12, 6, 3, 1], 0),
            (&[3, 2], &[0, 0], 1),
            // Rank two after coalescing (the walks' own fast path): padded rows, a
            // transpose, a broadcast row, a per-row broadcast value, reversed rows.
            (&[4, 5], &[7, 1], 2),
            (&[5, 3], &[1, 5], 0),
            (&[3, 4], &[0, 1], 1),
            (&[4, 3], &[1, 0], 0),
            (&[3, 4], &[-4, 1], 8),
        ];
        for &(shape, strides, offset) in cases {
            let w = Walk::new(shape, strides, offset);
            let want = naive(shape, strides, offset);
            assert_eq!(w.numel, want.len());
            for start in 0..want.len() {
                for n in 0..=want.len() - start {
                    let mut got = vec![0isize; n];
                    w.runs(start, n, |pos, base, s, len| {
                        for t in 0..len {
                            got[pos + t] = base + t as isize * s;
                        }
                    });
                    assert_eq!(
                        got,
                        want[start..start + n],
                        "{shape:?} {strides:?} {start} {n}"
                    );
                }
            }
        }
    }

    #[test]
    fn coalesces_contiguous_and_broadcast_dims() {
        let w = Walk::new(&[2, 3, 4], &[12, 4, 1], 0);
        assert_eq!(w.contiguous_offset(), Some(0));
        let w = Walk::new(&[5, 6], &[0, 0], 3);
        assert_eq!((&w.shape[..], &w.strides[..]), (&[30][..], &[0][..]));
        assert_eq!(Walk::new(&[], &[], 4).contiguous_offset(), Some(4));
    }

    #[test]
    fn bounds_are_checked() {
        let w = Walk::new(&[4, 5], &[-5, -1], 19);
        assert!(w.check(20, "t").is_ok());
        assert!(w.check(19, "t").is_err());
        assert!(Walk::new(&[2], &[-1], 0).check(10, "t").is_err());
        assert!(Walk::new(&[0, 3], &[100, 1], 50).check(1, "t").is_ok());
    }

    #[test]
    fn gather_handles_every_stride_kind() {
        let src: Vec<i32> = (0..20).collect();
        let w = Walk::new(&[4, 5], &[-5, -1], 19);
        let mut dst = vec![0; 20];
        gather(&src, &w, w.offset, 0, &mut dst);
        assert_eq!(dst, (0..20).rev().collect::<Vec<_>>());
        let w = Walk::new(&[3, 4], &[0, 2], 1);
        let mut dst = vec![0; 7];
        gather(&src, &w, w.offset, 3, &mut dst);
        assert_eq!(dst, vec![7, 1, 3, 5, 7, 1, 3]);
    }
}
