//! Index-based ops the decoders need: `take` (gather, embedding lookup), its adjoint
//! `scatter_add` (segment sums), `one_hot` and `top_k`. Depends on `kiln-ir`'s builders.

use crate::Array;
use kiln_ir::{build, DType, Error, Result, Shape};

impl Array {
    /// Gathers along `axis` with integer `indices` of any shape (numpy's `take`): the result
    /// has shape `self.shape[..axis] + indices.shape + self.shape[axis+1..]`. Indices in
    /// `-n..n` are valid; others are an error at evaluation naming the index.
    ///
    /// ```
    /// use kiln::Array;
    /// let table = Array::from_vec(vec![0.0f32, 1.0, 10.0, 11.0, 20.0, 21.0], &[3, 2])?;
    /// let ids = Array::from_vec(vec![2i64, 0, 2], &[3])?;
    /// assert_eq!(table.try_take(&ids, 0)?.to_vec::<f32>()?, vec![20.0, 21.0, 0.0, 1.0, 20.0, 21.0]);
    /// let bad = Array::from_vec(vec![3i64], &[1])?;
    /// assert!(table.try_take(&bad, 0)?.eval().is_err());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_take(&self, indices: &Array, axis: isize) -> Result<Array> {
        Ok(Array::from_node(build::take(
            &self.node,
            &indices.node,
            axis,
        )?))
    }

    /// Panicking form of [`Array::try_take`] (panics on build errors only; bad index values
    /// are reported when the result is evaluated).
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![5, 6, 7], &[3])?;
    /// let i = kiln::Array::from_vec(vec![-1i32], &[1])?;
    /// assert_eq!(a.take(&i, 0).to_vec::<i32>()?, vec![7]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn take(&self, indices: &Array, axis: isize) -> Array {
        crate::unwrap_or_panic(self.try_take(indices, axis))
    }

    /// Scatter-add, the adjoint of [`Array::try_take`]: a zeros array of `shape` with the
    /// slices of `self` added at `indices` along `axis` (numpy's `np.add.at` into zeros,
    /// JAX's `zeros.at[...].add(self)`); repeated indices accumulate.
    /// `self` must have shape `shape[..axis] + indices.shape + shape[axis+1..]`.
    /// Indices in `-n..n` are valid; others are an error at evaluation naming the index.
    /// A segment sum is `values.try_scatter_add(&segment_of_each_row, 0, &[segments, dim])`.
    ///
    /// ```
    /// use kiln::Array;
    /// let rows = Array::from_vec(vec![1.0f32, 2.0, 10.0, 20.0, 100.0, 200.0], &[3, 2])?;
    /// let to = Array::from_vec(vec![2i64, 0, 2], &[3])?;
    /// let s = rows.try_scatter_add(&to, 0, &[4, 2])?;
    /// assert_eq!(s.to_vec::<f32>()?, vec![10.0, 20.0, 0.0, 0.0, 101.0, 202.0, 0.0, 0.0]);
    /// assert!(rows.try_scatter_add(&to, 0, &[4, 3]).is_err()); // the rows are 2 wide
    /// let bad = Array::from_vec(vec![4i64, 0, 0], &[3])?;
    /// assert!(rows.try_scatter_add(&bad, 0, &[4, 2])?.eval().is_err());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_scatter_add(&self, indices: &Array, axis: isize, shape: &[usize]) -> Result<Array> {
        Ok(Array::from_node(build::scatter_add(
            &self.node,
            &indices.node,
            axis,
            Shape::from(shape),
        )?))
    }

    /// Panicking form of [`Array::try_scatter_add`] (panics on build errors only; bad index
    /// values are reported when the result is evaluated).
    ///
    /// ```
    /// let u = kiln::Array::from_vec(vec![1, 2, 3], &[3])?;
    /// let i = kiln::Array::from_vec(vec![0i32, -1, 0], &[3])?;
    /// assert_eq!(u.scatter_add(&i, 0, &[2]).to_vec::<i32>()?, vec![4, 2]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn scatter_add(&self, indices: &Array, axis: isize, shape: &[usize]) -> Array {
        crate::unwrap_or_panic(self.try_scatter_add(indices, axis, shape))
    }

    /// One-hot encoding of integer `self` with `depth` classes, as `dtype`: shape
    /// `self.shape + [depth]`. Indices outside `0..depth` give an all-zero row (as
    /// `jax.nn.one_hot`).
    ///
    /// ```
    /// let ids = kiln::Array::from_vec(vec![1i64, 0, 5], &[3])?;
    /// let h = ids.try_one_hot(3, kiln::DType::F32)?;
    /// assert_eq!(h.to_vec::<f32>()?, vec![0., 1., 0., 1., 0., 0., 0., 0., 0.]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_one_hot(&self, depth: usize, dtype: DType) -> Result<Array> {
        if !self.dtype().is_int() {
            return Err(Error::UnsupportedDType {
                op: "one_hot",
                dtype: self.dtype(),
                hint: "class indices must be i32 or i64; cast them first".into(),
            });
        }
        crate::named("one_hot", || {
            let classes = Array::from_node(build::iota(Shape::from([depth]), 0, self.dtype())?);
            Ok(self.try_expand_dims(-1)?.try_eq(&classes)?.cast(dtype))
        })
    }

    /// Panicking form of [`Array::try_one_hot`].
    ///
    /// ```
    /// let ids = kiln::Array::from_vec(vec![0i32], &[1])?;
    /// assert_eq!(ids.one_hot(2, kiln::DType::I64).to_vec::<i64>()?, vec![1, 0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn one_hot(&self, depth: usize, dtype: DType) -> Array {
        crate::unwrap_or_panic(self.try_one_hot(depth, dtype))
    }

    /// The `k` largest elements along the last axis, in descending order, and their `i64`
    /// indices. Ties go to the lower index; NaN counts as larger than every number.
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1.0f32, 3.0, 3.0, 2.0], &[4])?;
    /// let (v, i) = a.try_top_k(2)?;
    /// assert_eq!(v.to_vec::<f32>()?, vec![3.0, 3.0]);
    /// assert_eq!(i.to_vec::<i64>()?, vec![1, 2]);
    /// assert!(a.try_top_k(5).is_err());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_top_k(&self, k: usize) -> Result<(Array, Array)> {
        let (v, i) = build::top_k(&self.node, k)?;
        Ok((Array::from_node(v), Array::from_node(i)))
    }

    /// Panicking form of [`Array::try_top_k`].
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![5, 1, 9], &[3])?;
    /// let (v, _) = a.top_k(1);
    /// assert_eq!(v.to_vec::<i32>()?, vec![9]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn top_k(&self, k: usize) -> (Array, Array) {
        crate::unwrap_or_panic(self.try_top_k(k))
    }
}
