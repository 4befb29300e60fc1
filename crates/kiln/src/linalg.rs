//! Matrix products: `matmul` with numpy semantics (1-D, 2-D, batched with broadcasting) and
//! `dot`. Depends on `kiln-ir`'s builders.

use crate::Array;
use kiln_ir::{build, Error, Result};

impl Array {
    /// numpy's `matmul` (`@`): 1-D operands are treated as a row (left) or column (right)
    /// vector and the added axis removed; batch dimensions broadcast. Shape errors are
    /// reported now with both shapes.
    ///
    /// ```
    /// use kiln::Array;
    /// let a = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let v = Array::from_vec(vec![1.0f32, 1.0], &[2])?;
    /// assert_eq!(a.try_matmul(&v)?.to_vec::<f32>()?, vec![3.0, 7.0]);
    /// let bad = Array::zeros(&[3], kiln::DType::F32);
    /// assert!(a.try_matmul(&bad).unwrap_err().to_string().contains("(3,)"));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_matmul(&self, rhs: &Array) -> Result<Array> {
        Ok(Array::from_node(build::matmul(&self.node, &rhs.node)?))
    }

    /// Panicking form of [`Array::try_matmul`].
    ///
    /// ```
    /// let a = kiln::Array::eye(3, None, kiln::DType::F64);
    /// assert_eq!(a.matmul(&a).shape(), &[3, 3]);
    /// ```
    #[track_caller]
    pub fn matmul(&self, rhs: &Array) -> Array {
        crate::unwrap_or_panic(self.try_matmul(rhs))
    }

    /// numpy's `dot`: a product with a scalar (rank 0), the inner product of vectors, the
    /// matrix product of matrices, and for N-D operands a sum over the last axis of `self`
    /// and the second-to-last of `rhs` (no batch broadcasting: every pair is combined).
    ///
    /// ```
    /// use kiln::Array;
    /// let a = Array::from_vec(vec![1, 2, 3], &[3])?;
    /// assert_eq!(a.try_dot(&a)?.item::<i32>()?, 14);
    /// let x = Array::zeros(&[2, 3, 4], kiln::DType::F32);
    /// let y = Array::zeros(&[5, 4, 6], kiln::DType::F32);
    /// assert_eq!(x.try_dot(&y)?.shape(), &[2, 3, 5, 6]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_dot(&self, rhs: &Array) -> Result<Array> {
        crate::named("dot", || self.dot_impl(rhs))
    }

    fn dot_impl(&self, rhs: &Array) -> Result<Array> {
        let (ra, rb) = (self.ndim(), rhs.ndim());
        if ra == 0 || rb == 0 {
            return self.try_mul(rhs);
        }
        // A 1-D operand contracts with the last (left) or second-to-last (right) axis of the
        // other, with no pairing of leading axes: exactly matmul's rule for a 1-D operand.
        if (ra <= 2 && rb <= 2) || ra == 1 || rb == 1 {
            return self.try_matmul(rhs);
        }
        // N-D: contract a[..., k] with b[..., k, n] over every pair of leading indices.
        let k = self.shape()[ra - 1];
        let kb = rhs.shape()[rb - 2];
        if k != kb {
            return Err(Error::ShapeMismatch {
                op: "dot",
                lhs: self.node.shape().clone(),
                rhs: rhs.node.shape().clone(),
                hint: format!("the last axis of the left operand ({k}) must equal the second-to-last of the right ({kb})"),
            });
        }
        // Explicit sizes, not -1: `k` may be 0.
        let m: usize = self.shape()[..ra - 1].iter().product();
        let a2 = self.try_reshape(&[m as isize, k as isize])?;
        let mut perm: Vec<isize> = (0..rb as isize).collect();
        let kax = perm.remove(rb - 2);
        perm.insert(0, kax);
        let n: usize = rhs.shape()[..rb - 2].iter().product::<usize>() * rhs.shape()[rb - 1];
        let b2 = rhs
            .try_permute(&perm)?
            .try_reshape(&[k as isize, n as isize])?;
        let mut out: Vec<isize> = self.shape()[..ra - 1].iter().map(|&d| d as isize).collect();
        out.extend(rhs.shape()[..rb - 2].iter().map(|&d| d as isize));
        out.push(rhs.shape()[rb - 1] as isize);
        a2.try_matmul(&b2)?.try_reshape(&out)
    }

    /// Panicking form of [`Array::try_dot`].
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1.0f64, 2.0], &[2])?;
    /// assert_eq!(a.dot(&a).item::<f64>()?, 5.0);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn dot(&self, rhs: &Array) -> Array {
        crate::unwrap_or_panic(self.try_dot(rhs))
    }
}
