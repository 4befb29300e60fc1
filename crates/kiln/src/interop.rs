//! Conversions between kiln arrays and [`ndarray`] arrays (feature `ndarray`): an owned
//! `ndarray` array moves into an [`Array`] without a copy when its elements are laid out in
//! row-major order (or column-major: that becomes a lazy transposed view, still no copy), and
//! [`Array::to_ndarray`] hands the evaluated elements back.
//!
//! Depends on [`crate::Array`] and the `ndarray` crate.

use crate::Array;
use kiln_ir::{Element, Result};
use ndarray::{ArrayD, Dimension, IxDyn, ShapeBuilder};

/// Moves an owned `ndarray` array into kiln.
///
/// No copy when the array is in standard (row-major) layout with its first element at the
/// start of its storage; a column-major (Fortran) array becomes a transposed view of its
/// storage, also without a copy; any other layout (a sliced or strided array) is copied in
/// row-major order.
///
/// Panics only for an array of more than [`crate::MAX_ELEMENTS`] elements, which no array in
/// memory can have.
///
/// ```
/// use ndarray::ShapeBuilder; // for `.f()`, column-major shapes
/// let a = ndarray::Array2::from_shape_vec((2, 3), vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
/// let k = kiln::Array::from(a);
/// assert_eq!(k.shape(), &[2, 3]);
/// assert_eq!(k.sum(Some(&[1]), false).to_vec::<f32>().unwrap(), vec![6.0, 15.0]);
/// let f = ndarray::Array2::from_shape_vec((2, 3).f(), vec![1i64, 4, 2, 5, 3, 6]).unwrap();
/// assert_eq!(kiln::Array::from(f).to_vec::<i64>().unwrap(), vec![1, 2, 3, 4, 5, 6]);
/// ```
impl<T: Element, D: Dimension> From<ndarray::Array<T, D>> for Array {
    fn from(a: ndarray::Array<T, D>) -> Array {
        let shape = a.shape().to_vec();
        let built = if a.is_standard_layout() {
            take_storage(a, &shape).and_then(|v| Array::from_vec(v, &shape))
        } else if a.t().is_standard_layout() {
            let reversed: Vec<usize> = shape.iter().rev().copied().collect();
            let axes: Vec<isize> = (0..shape.len() as isize).rev().collect();
            take_storage(a.reversed_axes(), &reversed)
                .and_then(|v| Array::from_vec(v, &reversed))
                .and_then(|k| k.try_permute(&axes))
        } else {
            Array::from_vec(a.iter().copied().collect(), &shape)
        };
        crate::unwrap_or_panic(built)
    }
}

/// The storage of a standard-layout array, moved out (never copied).
/// Storage after the elements is cut off, and elements after an offset moved to the front.
fn take_storage<T: Element, D: Dimension>(
    a: ndarray::Array<T, D>,
    shape: &[usize],
) -> Result<Vec<T>> {
    let n: usize = shape.iter().product();
    let (mut v, offset) = a.into_raw_vec_and_offset();
    v.drain(..offset.unwrap_or(0).min(v.len()));
    v.truncate(n);
    Ok(v)
}

impl Array {
    /// The evaluated elements copied into an owned `ndarray` array of the same shape
    /// (feature `ndarray`). `T` must be the array's dtype. [`Array::into_ndarray`] moves
    /// them instead.
    ///
    /// ```
    /// let k = kiln::Array::arange(0.0, 6.0, 1.0, kiln::DType::F64)?.reshape(&[2, 3]);
    /// let a = k.to_ndarray::<f64>()?;
    /// assert_eq!(a.shape(), &[2, 3]);
    /// assert_eq!(a[[1, 2]], 5.0);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn to_ndarray<T: Element>(&self) -> Result<ArrayD<T>> {
        shaped(self.shape(), self.to_vec::<T>()?)
    }

    /// The evaluated elements as an owned `ndarray` array, moved out without a copy when
    /// this is the only handle on an owned value (see [`Array::into_vec`]), else copied
    /// (feature `ndarray`).
    ///
    /// ```
    /// let k = kiln::Array::from_vec(vec![1i32, 2, 3, 4], &[2, 2])? * 10;
    /// let a = k.into_ndarray::<i32>()?;
    /// assert_eq!(a, ndarray::arr2(&[[10, 20], [30, 40]]).into_dyn());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn into_ndarray<T: Element>(self) -> Result<ArrayD<T>> {
        let shape = self.shape().to_vec();
        shaped(&shape, self.into_vec::<T>()?)
    }
}

fn shaped<T: Element>(shape: &[usize], v: Vec<T>) -> Result<ArrayD<T>> {
    Ok(
        ArrayD::from_shape_vec(IxDyn(shape).into_shape_with_order(), v)
            .expect("kiln's shape and element count agree"),
    )
}
