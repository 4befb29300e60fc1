//! Reductions along any axes with `keepdims` (`sum mean prod max min argmax argmin`) and the
//! numerically stable composites `logsumexp`, `softmax`, `log_softmax`.
//!
//! `axes: None` means all axes. Depends on `kiln-ir`'s builders.

use crate::Array;
use kiln_ir::{build, ArgReduceOp, ReduceOp, Result};

macro_rules! reductions {
    ($($name:ident $try:ident $op:ident $doc:literal;)*) => {
        impl Array {
            $(
                #[doc = concat!($doc, "\n\nOver `axes` (`None`: all; negative count from the end), keeping them as size-1 dimensions if `keepdims`. Axis errors are reported now.\n\n```\nlet a = kiln::Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;\nassert_eq!(a.", stringify!($try), "(Some(&[-1]), false)?.shape(), &[2]);\nassert_eq!(a.", stringify!($try), "(None, true)?.shape(), &[1, 1]);\nassert!(a.", stringify!($try), "(Some(&[2]), false).is_err());\n# Ok::<(), kiln::Error>(())\n```")]
                pub fn $try(&self, axes: Option<&[isize]>, keepdims: bool) -> Result<Array> {
                    Ok(Array::from_node(build::reduce(ReduceOp::$op, &self.node, axes, keepdims)?))
                }
                #[doc = concat!("Panicking form of [`Array::", stringify!($try), "`].\n\n```\nlet a = kiln::Array::from_vec(vec![1i64, 2, 3], &[3])?;\nlet r = a.", stringify!($name), "(None, false);\nassert_eq!(r.shape(), &[] as &[usize]);\n# Ok::<(), kiln::Error>(())\n```")]
                #[track_caller]
                pub fn $name(&self, axes: Option<&[isize]>, keepdims: bool) -> Array {
                    crate::unwrap_or_panic(self.$try(axes, keepdims))
                }
            )*
        }
    };
}

reductions! {
    sum try_sum Sum "Sum (bool and `i32` give `i64`, as numpy; integers wrap).";
    prod try_prod Prod "Product (bool and `i32` give `i64`; integers wrap).";
    max try_max Max "Maximum; NaN propagates; an empty reduced axis is an error (no identity).";
    min try_min Min "Minimum; NaN propagates; an empty reduced axis is an error (no identity).";
}

impl Array {
    /// Arithmetic mean; integers give `f64`, floats keep their dtype; an empty reduction is NaN.
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1i32, 2, 3, 4], &[2, 2])?;
    /// assert_eq!(a.try_mean(Some(&[0]), false)?.to_vec::<f64>()?, vec![2.0, 3.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_mean(&self, axes: Option<&[isize]>, keepdims: bool) -> Result<Array> {
        crate::named("mean", || self.mean_impl(axes, keepdims))
    }

    fn mean_impl(&self, axes: Option<&[isize]>, keepdims: bool) -> Result<Array> {
        let x = self.cast(self.dtype().to_float());
        let s = x.try_sum(axes, keepdims)?;
        let reduced = match axes {
            Some(ax) => kiln_ir::Shape::normalize_axes("mean", ax, self.ndim())?,
            None => (0..self.ndim()).collect(),
        };
        // An empty reduction divides 0 by 0: NaN, as numpy (which also warns).
        let count: usize = reduced.iter().map(|&a| self.shape()[a]).product();
        s.try_div(count as f64)
    }

    /// Panicking form of [`Array::try_mean`].
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1.0f32, 2.0], &[2])?;
    /// assert_eq!(a.mean(None, false).item::<f32>()?, 1.5);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn mean(&self, axes: Option<&[isize]>, keepdims: bool) -> Array {
        crate::unwrap_or_panic(self.try_mean(axes, keepdims))
    }

    /// Index of the maximum along `axis` (`None`: of the flattened array), as `i64`; ties and
    /// NaN give the first index.
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1.0f32, 5.0, 5.0, 0.0], &[2, 2])?;
    /// assert_eq!(a.try_argmax(Some(1), false)?.to_vec::<i64>()?, vec![1, 0]);
    /// assert_eq!(a.try_argmax(None, false)?.item::<i64>()?, 1);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_argmax(&self, axis: Option<isize>, keepdims: bool) -> Result<Array> {
        Ok(Array::from_node(build::arg_reduce(
            ArgReduceOp::ArgMax,
            &self.node,
            axis,
            keepdims,
        )?))
    }

    /// Panicking form of [`Array::try_argmax`].
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![3, 9, 2], &[3])?;
    /// assert_eq!(a.argmax(None, false).item::<i64>()?, 1);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn argmax(&self, axis: Option<isize>, keepdims: bool) -> Array {
        crate::unwrap_or_panic(self.try_argmax(axis, keepdims))
    }

    /// Index of the minimum along `axis` (`None`: flattened), as `i64`; ties and NaN give the
    /// first index.
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![3, 1, 1], &[3])?;
    /// assert_eq!(a.try_argmin(Some(0), false)?.item::<i64>()?, 1);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_argmin(&self, axis: Option<isize>, keepdims: bool) -> Result<Array> {
        Ok(Array::from_node(build::arg_reduce(
            ArgReduceOp::ArgMin,
            &self.node,
            axis,
            keepdims,
        )?))
    }

    /// Panicking form of [`Array::try_argmin`].
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![3.0f64, -1.0], &[2])?;
    /// assert_eq!(a.argmin(None, false).item::<i64>()?, 1);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn argmin(&self, axis: Option<isize>, keepdims: bool) -> Array {
        crate::unwrap_or_panic(self.try_argmin(axis, keepdims))
    }

    /// `log(sum(exp(x)))` over `axes`, computed stably as `m + log(sum(exp(x - m)))` with `m`
    /// the maximum (replaced by 0 where it is not finite, as `scipy.special.logsumexp`).
    /// Integers give `f64`.
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1000.0f64, 1000.0], &[2])?;
    /// let l = a.try_logsumexp(None, false)?.item::<f64>()?;
    /// assert!((l - (1000.0 + 2f64.ln())).abs() < 1e-9);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_logsumexp(&self, axes: Option<&[isize]>, keepdims: bool) -> Result<Array> {
        crate::named("logsumexp", || self.logsumexp_impl(axes, keepdims))
    }

    fn logsumexp_impl(&self, axes: Option<&[isize]>, keepdims: bool) -> Result<Array> {
        let x = self.cast(self.dtype().to_float());
        let m = x.try_max(axes, true)?;
        let finite = m.abs().lt(f64::INFINITY);
        let m = Array::try_where(&finite, &m, 0.0)?;
        let s = (&x - &m).exp().try_sum(axes, true)?.log() + &m;
        if keepdims {
            Ok(s)
        } else {
            let reduced = match axes {
                Some(ax) => kiln_ir::Shape::normalize_axes("logsumexp", ax, self.ndim())?,
                None => (0..self.ndim()).collect(),
            };
            let ax: Vec<isize> = reduced.iter().map(|&a| a as isize).collect();
            s.try_squeeze(Some(&ax))
        }
    }

    /// Panicking form of [`Array::try_logsumexp`].
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![0.0f32, 0.0], &[2])?;
    /// assert!((a.logsumexp(None, false).item::<f32>()? - 2f32.ln()).abs() < 1e-6);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn logsumexp(&self, axes: Option<&[isize]>, keepdims: bool) -> Array {
        crate::unwrap_or_panic(self.try_logsumexp(axes, keepdims))
    }

    /// `exp(x) / sum(exp(x))` along `axis`, computed stably (the maximum is subtracted first).
    /// As in `jax.nn.softmax`, PyTorch and MLX, the exponentials are multiplied by the
    /// reciprocal of their sum instead of divided by it: one reciprocal per row, and each
    /// element within about 2 ulp of the correctly rounded quotient (the sum itself is
    /// accumulated in `f64` for `f32` input).
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1.0f32, 1.0, 1000.0, 1000.0], &[2, 2])?;
    /// assert_eq!(a.try_softmax(-1)?.to_vec::<f32>()?, vec![0.5; 4]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_softmax(&self, axis: isize) -> Result<Array> {
        crate::named("softmax", || {
            let x = self.cast(self.dtype().to_float());
            let m = x.try_max(Some(&[axis]), true)?;
            let e = (&x - &m).exp();
            e.try_mul(e.try_sum(Some(&[axis]), true)?.recip())
        })
    }

    /// Panicking form of [`Array::try_softmax`].
    ///
    /// ```
    /// let p = kiln::Array::from_vec(vec![0.0f64, 0.0], &[2])?.softmax(0);
    /// assert_eq!(p.to_vec::<f64>()?, vec![0.5, 0.5]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn softmax(&self, axis: isize) -> Array {
        crate::unwrap_or_panic(self.try_softmax(axis))
    }

    /// `x - logsumexp(x)` along `axis`, computed stably as `(x - m) - log(sum(exp(x - m)))`
    /// with `m` the maximum (0 where it is not finite), as `scipy.special.log_softmax`: the
    /// shifted values keep full precision even where `|x|` is large.
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![0.0f64, 0.0], &[2])?;
    /// assert!((a.try_log_softmax(0)?.to_vec::<f64>()?[0] + 2f64.ln()).abs() < 1e-12);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_log_softmax(&self, axis: isize) -> Result<Array> {
        crate::named("log_softmax", || {
            let x = self.cast(self.dtype().to_float());
            let m = x.try_max(Some(&[axis]), true)?;
            let m = Array::try_where(&m.abs().lt(f64::INFINITY), &m, 0.0)?;
            let t = x.try_sub(&m)?;
            t.try_sub(t.exp().try_sum(Some(&[axis]), true)?.log())
        })
    }

    /// Panicking form of [`Array::try_log_softmax`].
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?;
    /// let p = a.log_softmax(-1).exp().sum(None, false).item::<f32>()?;
    /// assert!((p - 1.0).abs() < 1e-6);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn log_softmax(&self, axis: isize) -> Array {
        crate::unwrap_or_panic(self.try_log_softmax(axis))
    }
}
