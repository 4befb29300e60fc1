//! Movement ops: `reshape` (with `-1`), `transpose`/`permute`, `expand_dims`, `squeeze`,
//! `broadcast_to`, slicing (`s!`), `concat`, `stack`, `flatten`.
//!
//! None of them copies at build time; backends read them in place where they can. Depends on
//! `kiln-ir`'s builders.

use crate::Array;
use kiln_ir::{build, build::SliceArg, Error, NodeRef, Result, Shape};

/// Builds a slicing specification for [`Array::slice`], like numpy's `a[...]`:
/// `s![1..3, ..;2, -1, NEW]` is `a[1:3, ::2, -1, np.newaxis]`. Ranges use Rust syntax
/// (`a..b`, `a..`, `..b`, `..`, `a..=b`), an optional step follows `;` and may be negative,
/// integers index (the axis disappears) and may be negative, `NEW` inserts an axis.
///
/// ```
/// use kiln::{s, Array};
/// let a = Array::arange(0.0, 12.0, 1.0, kiln::DType::F32)?.reshape(&[3, 4]);
/// assert_eq!(a.slice(s![1.., ..;-2]).to_vec::<f32>()?, vec![7.0, 5.0, 11.0, 9.0]);
/// assert_eq!(a.slice(s![-1, 1..3]).to_vec::<f32>()?, vec![9.0, 10.0]);
/// assert_eq!(a.slice(s![.., NEW, 0]).shape(), &[3, 1]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[macro_export]
macro_rules! s {
    (@parse [$($out:expr,)*] [$($cur:tt)*] ; $st:expr , $($rest:tt)*) => {
        $crate::s!(@parse [$($out,)* $crate::s!(@one [$($cur)*] $st),] [] $($rest)*)
    };
    (@parse [$($out:expr,)*] [$($cur:tt)*] ; $st:expr) => {
        &[$($out,)* $crate::s!(@one [$($cur)*] $st)][..]
    };
    (@parse [$($out:expr,)*] [$($cur:tt)+] , $($rest:tt)*) => {
        $crate::s!(@parse [$($out,)* $crate::s!(@one [$($cur)+] 1),] [] $($rest)*)
    };
    (@parse [$($out:expr,)*] [$($cur:tt)*] $t:tt $($rest:tt)*) => {
        $crate::s!(@parse [$($out,)*] [$($cur)* $t] $($rest)*)
    };
    (@parse [$($out:expr,)*] []) => { &[$($out),*][..] };
    (@parse [$($out:expr,)*] [$($cur:tt)+]) => {
        &[$($out,)* $crate::s!(@one [$($cur)+] 1)][..]
    };
    (@one [NEW] $st:expr) => { $crate::SliceArg::NewAxis };
    (@one [$($cur:tt)+] $st:expr) => { $crate::IntoSliceArg::into_slice_arg($($cur)+, $st) };
    ($($t:tt)*) => { $crate::s!(@parse [] [] $($t)*) };
}

/// Conversion of a range or index into a [`SliceArg`] (used by [`s!`]).
///
/// ```
/// use kiln::IntoSliceArg;
/// assert_eq!((1..4).into_slice_arg(1), kiln::SliceArg::range(Some(1), Some(4), 1));
/// assert_eq!((-1).into_slice_arg(1), kiln::SliceArg::Index(-1));
/// ```
pub trait IntoSliceArg {
    /// The slice argument, with `step` for ranges.
    fn into_slice_arg(self, step: isize) -> SliceArg;
}

impl IntoSliceArg for isize {
    fn into_slice_arg(self, _step: isize) -> SliceArg {
        SliceArg::Index(self)
    }
}
impl IntoSliceArg for i32 {
    fn into_slice_arg(self, _step: isize) -> SliceArg {
        SliceArg::Index(self as isize)
    }
}
impl IntoSliceArg for usize {
    fn into_slice_arg(self, _step: isize) -> SliceArg {
        SliceArg::Index(self as isize)
    }
}
impl IntoSliceArg for SliceArg {
    fn into_slice_arg(self, _step: isize) -> SliceArg {
        self
    }
}
macro_rules! range_arg {
    ($($t:ty),*) => {$(
        impl IntoSliceArg for std::ops::Range<$t> {
            fn into_slice_arg(self, step: isize) -> SliceArg {
                SliceArg::range(Some(self.start as isize), Some(self.end as isize), step)
            }
        }
        impl IntoSliceArg for std::ops::RangeFrom<$t> {
            fn into_slice_arg(self, step: isize) -> SliceArg {
                SliceArg::range(Some(self.start as isize), None, step)
            }
        }
        impl IntoSliceArg for std::ops::RangeTo<$t> {
            fn into_slice_arg(self, step: isize) -> SliceArg {
                SliceArg::range(None, Some(self.end as isize), step)
            }
        }
        impl IntoSliceArg for std::ops::RangeInclusive<$t> {
            fn into_slice_arg(self, step: isize) -> SliceArg {
                let end = *self.end() as isize;
                // `a..=-1` means "through the last element".
                let stop = if end == -1 { None } else { Some(end + 1) };
                SliceArg::range(Some(*self.start() as isize), stop, step)
            }
        }
    )*};
}
range_arg!(isize, i32, usize);
impl IntoSliceArg for std::ops::RangeFull {
    fn into_slice_arg(self, step: isize) -> SliceArg {
        SliceArg::range(None, None, step)
    }
}

impl Array {
    /// A view with a new shape and the same elements in row-major order; one dimension may
    /// be `-1` (inferred).
    ///
    /// ```
    /// let a = kiln::Array::zeros(&[2, 6], kiln::DType::F32);
    /// assert_eq!(a.try_reshape(&[3, -1])?.shape(), &[3, 4]);
    /// let e = a.try_reshape(&[5, -1]).unwrap_err();
    /// assert!(e.to_string().contains("(2, 6)"));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_reshape(&self, shape: &[isize]) -> Result<Array> {
        Ok(Array::from_node(build::reshape(&self.node, shape)?))
    }

    /// Panicking form of [`Array::try_reshape`].
    ///
    /// ```
    /// assert_eq!(kiln::Array::zeros(&[6], kiln::DType::F32).reshape(&[2, 3]).shape(), &[2, 3]);
    /// ```
    #[track_caller]
    pub fn reshape(&self, shape: &[isize]) -> Array {
        crate::unwrap_or_panic(self.try_reshape(shape))
    }

    /// The elements as one dimension.
    ///
    /// ```
    /// assert_eq!(kiln::Array::zeros(&[2, 3], kiln::DType::F32).flatten().shape(), &[6]);
    /// ```
    pub fn flatten(&self) -> Array {
        self.reshape(&[-1])
    }

    /// Reorders axes: output axis `i` is input axis `axes[i]` (negative axes allowed).
    ///
    /// ```
    /// let a = kiln::Array::zeros(&[2, 3, 4], kiln::DType::F32);
    /// assert_eq!(a.try_permute(&[2, 0, 1])?.shape(), &[4, 2, 3]);
    /// assert!(a.try_permute(&[0, 1]).is_err());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_permute(&self, axes: &[isize]) -> Result<Array> {
        Ok(Array::from_node(build::permute(&self.node, axes)?))
    }

    /// Panicking form of [`Array::try_permute`].
    ///
    /// ```
    /// assert_eq!(kiln::Array::zeros(&[2, 3], kiln::DType::F32).permute(&[1, 0]).shape(), &[3, 2]);
    /// ```
    #[track_caller]
    pub fn permute(&self, axes: &[isize]) -> Array {
        crate::unwrap_or_panic(self.try_permute(axes))
    }

    /// Reverses the axes (numpy's `.T`).
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1, 2, 3, 4, 5, 6], &[2, 3])?;
    /// assert_eq!(a.transpose().to_vec::<i32>()?, vec![1, 4, 2, 5, 3, 6]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn transpose(&self) -> Array {
        let axes: Vec<isize> = (0..self.ndim() as isize).rev().collect();
        self.permute(&axes)
    }

    /// Swaps two axes.
    ///
    /// ```
    /// let a = kiln::Array::zeros(&[2, 3, 4], kiln::DType::F32);
    /// assert_eq!(a.try_swapaxes(0, -1)?.shape(), &[4, 3, 2]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_swapaxes(&self, a: isize, b: isize) -> Result<Array> {
        let r = self.ndim();
        let a = Shape::normalize_axis("swapaxes", a, r)?;
        let b = Shape::normalize_axis("swapaxes", b, r)?;
        let mut axes: Vec<isize> = (0..r as isize).collect();
        axes.swap(a, b);
        self.try_permute(&axes)
    }

    /// Inserts a size-1 axis at `axis` (in the result's numbering; negative allowed).
    ///
    /// ```
    /// let a = kiln::Array::zeros(&[2, 3], kiln::DType::F32);
    /// assert_eq!(a.try_expand_dims(-1)?.shape(), &[2, 3, 1]);
    /// assert_eq!(a.try_expand_dims(0)?.shape(), &[1, 2, 3]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_expand_dims(&self, axis: isize) -> Result<Array> {
        let ax = Shape::normalize_axis("expand_dims", axis, self.ndim() + 1)?;
        let mut dims: Vec<isize> = self.shape().iter().map(|&d| d as isize).collect();
        dims.insert(ax, 1);
        self.try_reshape(&dims)
    }

    /// Panicking form of [`Array::try_expand_dims`].
    ///
    /// ```
    /// assert_eq!(kiln::Array::zeros(&[3], kiln::DType::F32).expand_dims(0).shape(), &[1, 3]);
    /// ```
    #[track_caller]
    pub fn expand_dims(&self, axis: isize) -> Array {
        crate::unwrap_or_panic(self.try_expand_dims(axis))
    }

    /// Removes size-1 axes: the given ones (an error if one is not size 1) or all.
    ///
    /// ```
    /// let a = kiln::Array::zeros(&[1, 3, 1], kiln::DType::F32);
    /// assert_eq!(a.try_squeeze(None)?.shape(), &[3]);
    /// assert_eq!(a.try_squeeze(Some(&[-1]))?.shape(), &[1, 3]);
    /// assert!(a.try_squeeze(Some(&[1])).is_err());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_squeeze(&self, axes: Option<&[isize]>) -> Result<Array> {
        let axes: Vec<usize> = match axes {
            Some(ax) => {
                let ax = Shape::normalize_axes("squeeze", ax, self.ndim())?;
                if let Some(&bad) = ax.iter().find(|&&a| self.shape()[a] != 1) {
                    return Err(Error::InvalidArgument {
                        op: "squeeze",
                        message: format!(
                            "axis {bad} of shape {} has size {}, not 1",
                            self.node.shape(),
                            self.shape()[bad]
                        ),
                        hint: "only size-1 axes can be squeezed".into(),
                    });
                }
                ax
            }
            None => (0..self.ndim()).filter(|&a| self.shape()[a] == 1).collect(),
        };
        let dims: Vec<isize> = (0..self.ndim())
            .filter(|a| !axes.contains(a))
            .map(|a| self.shape()[a] as isize)
            .collect();
        self.try_reshape(&dims)
    }

    /// Panicking form of [`Array::try_squeeze`].
    ///
    /// ```
    /// assert_eq!(kiln::Array::zeros(&[1, 2], kiln::DType::F32).squeeze(None).shape(), &[2]);
    /// ```
    #[track_caller]
    pub fn squeeze(&self, axes: Option<&[isize]>) -> Array {
        crate::unwrap_or_panic(self.try_squeeze(axes))
    }

    /// Repeats size-1 dimensions (and prepends axes) to reach `shape` (numpy's `broadcast_to`).
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1.0f32, 2.0], &[2])?;
    /// assert_eq!(a.try_broadcast_to(&[2, 2])?.to_vec::<f32>()?, vec![1.0, 2.0, 1.0, 2.0]);
    /// assert!(a.try_broadcast_to(&[3]).is_err());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_broadcast_to(&self, shape: &[usize]) -> Result<Array> {
        Ok(Array::from_node(build::broadcast_to(
            &self.node,
            &Shape::from(shape),
        )?))
    }

    /// Panicking form of [`Array::try_broadcast_to`].
    ///
    /// ```
    /// assert_eq!(kiln::Array::zeros(&[1], kiln::DType::F32).broadcast_to(&[4]).shape(), &[4]);
    /// ```
    #[track_caller]
    pub fn broadcast_to(&self, shape: &[usize]) -> Array {
        crate::unwrap_or_panic(self.try_broadcast_to(shape))
    }

    /// numpy basic slicing; build `args` with [`s!`]. Index errors are reported now.
    ///
    /// ```
    /// use kiln::s;
    /// let a = kiln::Array::zeros(&[4, 5], kiln::DType::F32);
    /// assert_eq!(a.try_slice(s![..;2, -3..])?.shape(), &[2, 3]);
    /// assert!(a.try_slice(s![4]).is_err());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_slice(&self, args: &[SliceArg]) -> Result<Array> {
        Ok(Array::from_node(build::slice(&self.node, args)?))
    }

    /// Panicking form of [`Array::try_slice`].
    ///
    /// ```
    /// use kiln::s;
    /// let a = kiln::Array::arange(0.0, 5.0, 1.0, kiln::DType::I64)?;
    /// assert_eq!(a.slice(s![..;-1]).to_vec::<i64>()?, vec![4, 3, 2, 1, 0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn slice(&self, args: &[SliceArg]) -> Array {
        crate::unwrap_or_panic(self.try_slice(args))
    }

    /// Joins arrays along an existing axis; dtypes promote.
    ///
    /// ```
    /// use kiln::Array;
    /// let a = Array::from_vec(vec![1i32, 2], &[1, 2])?;
    /// let b = Array::from_vec(vec![3i32, 4], &[1, 2])?;
    /// assert_eq!(Array::try_concat(&[&a, &b], 0)?.to_vec::<i32>()?, vec![1, 2, 3, 4]);
    /// assert_eq!(Array::try_concat(&[&a, &b], 1)?.shape(), &[1, 4]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_concat(arrays: &[&Array], axis: isize) -> Result<Array> {
        let nodes: Vec<NodeRef> = arrays.iter().map(|a| a.node.clone()).collect();
        Ok(Array::from_node(build::concat(&nodes, axis)?))
    }

    /// Panicking form of [`Array::try_concat`].
    ///
    /// ```
    /// let a = kiln::Array::zeros(&[2], kiln::DType::F32);
    /// assert_eq!(kiln::Array::concat(&[&a, &a], 0).shape(), &[4]);
    /// ```
    #[track_caller]
    pub fn concat(arrays: &[&Array], axis: isize) -> Array {
        crate::unwrap_or_panic(Self::try_concat(arrays, axis))
    }

    /// Joins arrays of equal shape along a new axis.
    ///
    /// ```
    /// use kiln::Array;
    /// let a = Array::from_vec(vec![1i32, 2], &[2])?;
    /// let b = Array::from_vec(vec![3i32, 4], &[2])?;
    /// assert_eq!(Array::try_stack(&[&a, &b], 1)?.to_vec::<i32>()?, vec![1, 3, 2, 4]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_stack(arrays: &[&Array], axis: isize) -> Result<Array> {
        let Some(first) = arrays.first() else {
            return Err(Error::InvalidArgument {
                op: "stack",
                message: "no arrays given".into(),
                hint: "pass at least one array".into(),
            });
        };
        for a in arrays {
            if a.shape() != first.shape() {
                return Err(Error::ShapeMismatch {
                    op: "stack",
                    lhs: first.node.shape().clone(),
                    rhs: a.node.shape().clone(),
                    hint: "all arrays must have the same shape".into(),
                });
            }
        }
        let ax = Shape::normalize_axis("stack", axis, first.ndim() + 1)? as isize;
        let parts: Vec<Array> = arrays
            .iter()
            .map(|a| a.try_expand_dims(ax))
            .collect::<Result<_>>()?;
        let refs: Vec<&Array> = parts.iter().collect();
        Self::try_concat(&refs, ax)
    }

    /// Panicking form of [`Array::try_stack`].
    ///
    /// ```
    /// let a = kiln::Array::zeros(&[2], kiln::DType::F32);
    /// assert_eq!(kiln::Array::stack(&[&a, &a, &a], 0).shape(), &[3, 2]);
    /// ```
    #[track_caller]
    pub fn stack(arrays: &[&Array], axis: isize) -> Array {
        crate::unwrap_or_panic(Self::try_stack(arrays, axis))
    }
}
