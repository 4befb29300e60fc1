//! Constructors that need no input data: `zeros`, `ones`, `full`, `arange`, `linspace`,
//! `eye`, and seeded `uniform`/`normal` from the counter-based generator.
//!
//! All are lazy: `zeros(&[4096, 4096])` allocates nothing until it is evaluated. Depends on
//! `kiln-ir`'s builders.

use crate::Array;
use kiln_ir::{build, DType, Distribution, Error, Result, Scalar, Shape};

impl Array {
    /// An array of `value` (converted to `dtype`), or an error: an integer that does not fit
    /// `dtype` (numpy 2 raises too), or a shape with more elements than an array may have.
    ///
    /// ```
    /// use kiln::{Array, DType, Error};
    /// let a = Array::try_full(&[2], 7, DType::F32)?;
    /// assert_eq!(a.to_vec::<f32>()?, vec![7.0, 7.0]);
    /// let e = Array::try_full(&[2], 10_000_000_000i64, DType::I32).unwrap_err();
    /// assert!(matches!(e, Error::ScalarOverflow { op: "full", .. }));
    /// assert!(Array::try_full(&[1 << 40, 1 << 30], 0, DType::F32).is_err());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_full(shape: &[usize], value: impl Into<Scalar>, dtype: DType) -> Result<Array> {
        let value = value.into();
        if !value.fits(dtype) {
            return Err(Error::ScalarOverflow {
                op: "full",
                value: value.to_string(),
                dtype,
            });
        }
        let node = build::full(Shape::from(shape), value, dtype).map_err(|e| e.with_op("full"))?;
        Ok(Array::from_node(node))
    }

    /// Panicking form of [`Array::try_full`].
    ///
    /// ```
    /// let a = kiln::Array::full(&[2], 7, kiln::DType::F32);
    /// assert_eq!(a.to_vec::<f32>()?, vec![7.0, 7.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn full(shape: &[usize], value: impl Into<Scalar>, dtype: DType) -> Array {
        crate::unwrap_or_panic(Array::try_full(shape, value, dtype))
    }

    /// An array of zeros, or an error for a shape with more elements than an array may have.
    ///
    /// ```
    /// use kiln::{Array, DType, Error};
    /// assert_eq!(Array::try_zeros(&[2], DType::I32)?.to_vec::<i32>()?, vec![0, 0]);
    /// let e = Array::try_zeros(&[1 << 40, 1 << 30], DType::F32).unwrap_err();
    /// assert!(matches!(e, Error::TooLarge { op: "zeros", .. }));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_zeros(shape: &[usize], dtype: DType) -> Result<Array> {
        Array::try_full(shape, Scalar::Int(0), dtype).map_err(|e| e.with_op("zeros"))
    }

    /// Panicking form of [`Array::try_zeros`].
    ///
    /// ```
    /// assert_eq!(kiln::Array::zeros(&[3], kiln::DType::I32).to_vec::<i32>()?, vec![0, 0, 0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn zeros(shape: &[usize], dtype: DType) -> Array {
        crate::unwrap_or_panic(Array::try_zeros(shape, dtype))
    }

    /// An array of ones, or an error for a shape with more elements than an array may have.
    ///
    /// ```
    /// assert!(kiln::Array::try_ones(&[usize::MAX, 2], kiln::DType::F64).is_err());
    /// ```
    pub fn try_ones(shape: &[usize], dtype: DType) -> Result<Array> {
        Array::try_full(shape, Scalar::Int(1), dtype).map_err(|e| e.with_op("ones"))
    }

    /// Panicking form of [`Array::try_ones`].
    ///
    /// ```
    /// assert_eq!(kiln::Array::ones(&[2], kiln::DType::Bool).to_vec::<bool>()?, vec![true, true]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn ones(shape: &[usize], dtype: DType) -> Array {
        crate::unwrap_or_panic(Array::try_ones(shape, dtype))
    }

    /// An array of zeros with the shape and dtype of `like`.
    ///
    /// ```
    /// let a = kiln::Array::ones(&[2, 2], kiln::DType::F64);
    /// assert_eq!(kiln::Array::zeros_like(&a).shape(), &[2, 2]);
    /// ```
    pub fn zeros_like(like: &Array) -> Array {
        Array::zeros(like.shape(), like.dtype())
    }

    /// An array of ones with the shape and dtype of `like`.
    ///
    /// ```
    /// let a = kiln::Array::zeros(&[2], kiln::DType::I64);
    /// assert_eq!(kiln::Array::ones_like(&a).to_vec::<i64>()?, vec![1, 1]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn ones_like(like: &Array) -> Array {
        Array::ones(like.shape(), like.dtype())
    }

    /// Evenly spaced values in `[start, stop)` (numpy's `arange`): `ceil((stop - start) / step)`
    /// elements, element `i` is `start + i * step` computed in `f64` (exactly in `i64` for
    /// integer dtypes with integral arguments).
    ///
    /// ```
    /// let a = kiln::Array::arange(0.0, 5.0, 2.0, kiln::DType::I32)?;
    /// assert_eq!(a.to_vec::<i32>()?, vec![0, 2, 4]);
    /// assert!(kiln::Array::arange(0.0, 1.0, 0.0, kiln::DType::F32).is_err());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn arange(start: f64, stop: f64, step: f64, dtype: DType) -> Result<Array> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !stop.is_finite() {
            return Err(Error::InvalidArgument {
                op: "arange",
                message: format!("start {start}, stop {stop}, step {step}"),
                hint: "use finite bounds and a finite, non-zero step".into(),
            });
        }
        let limit = match dtype {
            DType::I32 => 2f64.powi(31),
            DType::I64 => 2f64.powi(63),
            _ => f64::INFINITY,
        };
        if start.abs() > limit || stop.abs() > limit {
            return Err(Error::InvalidArgument {
                op: "arange",
                message: format!("start {start}, stop {stop} do not fit dtype {dtype}"),
                hint: "use bounds within the dtype's range, or a wider dtype".into(),
            });
        }
        let n = ((stop - start) / step).ceil().max(0.0) as usize; // saturates: checked below
        let integral = start.fract() == 0.0 && step.fract() == 0.0;
        crate::named("arange", || {
            if dtype.is_int() && integral {
                let i = Array::from_node(build::iota(Shape::from([n]), 0, DType::I64)?);
                return Ok((i * step as i64 + start as i64).cast(dtype));
            }
            let i = Array::from_node(build::iota(Shape::from([n]), 0, DType::F64)?);
            Ok((i * step + start).cast(dtype))
        })
    }

    /// `num` evenly spaced values from `start` to `stop` inclusive (numpy's `linspace`); the
    /// last element is exactly `stop`. For integer dtypes the values are rounded toward −∞
    /// (as numpy 2), not truncated.
    ///
    /// ```
    /// let a = kiln::Array::linspace(0.0, 1.0, 5, kiln::DType::F64)?;
    /// assert_eq!(a.to_vec::<f64>()?, vec![0.0, 0.25, 0.5, 0.75, 1.0]);
    /// let b = kiln::Array::linspace(-5.0, 0.0, 4, kiln::DType::I32)?;
    /// assert_eq!(b.to_vec::<i32>()?, vec![-5, -4, -2, 0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn linspace(start: f64, stop: f64, num: usize, dtype: DType) -> Result<Array> {
        if !start.is_finite() || !stop.is_finite() {
            return Err(Error::InvalidArgument {
                op: "linspace",
                message: format!("start {start}, stop {stop}"),
                hint: "use finite bounds".into(),
            });
        }
        let i = Array::from_node(
            build::iota(Shape::from([num]), 0, DType::F64).map_err(|e| e.with_op("linspace"))?,
        );
        let y = if num <= 1 {
            i + start
        } else {
            let step = (stop - start) / (num - 1) as f64;
            let y = &i * step + start;
            Array::try_where(&i.eq((num - 1) as f64), stop, &y)?
        };
        let y = if dtype.is_int() { y.floor() } else { y };
        Ok(y.cast(dtype))
    }

    /// The `n × m` identity-like matrix (ones on the main diagonal); `m` defaults to `n`; an
    /// error for a shape with more elements than an array may have.
    ///
    /// ```
    /// let e = kiln::Array::try_eye(2, None, kiln::DType::F32)?;
    /// assert_eq!(e.to_vec::<f32>()?, vec![1.0, 0.0, 0.0, 1.0]);
    /// assert!(kiln::Array::try_eye(usize::MAX, None, kiln::DType::F32).is_err());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_eye(n: usize, m: Option<usize>, dtype: DType) -> Result<Array> {
        crate::named("eye", || {
            let shape = Shape::from([n, m.unwrap_or(n)]);
            let r = Array::from_node(build::iota(shape.clone(), 0, DType::I64)?);
            let c = Array::from_node(build::iota(shape, 1, DType::I64)?);
            Ok(r.try_eq(&c)?.cast(dtype))
        })
    }

    /// Panicking form of [`Array::try_eye`].
    ///
    /// ```
    /// let e = kiln::Array::eye(2, None, kiln::DType::F32);
    /// assert_eq!(e.to_vec::<f32>()?, vec![1.0, 0.0, 0.0, 1.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[track_caller]
    pub fn eye(n: usize, m: Option<usize>, dtype: DType) -> Array {
        crate::unwrap_or_panic(Array::try_eye(n, m, dtype))
    }

    /// Uniform random numbers in `[low, high)` of a float `dtype`. Element `i` depends only on
    /// `(seed, i)`: results are the same for any thread count or evaluation order.
    ///
    /// ```
    /// let a = kiln::Array::uniform(&[1000], 2.0, 3.0, 42, kiln::DType::F32)?;
    /// let b = kiln::Array::uniform(&[1000], 2.0, 3.0, 42, kiln::DType::F32)?;
    /// assert_eq!(a.to_vec::<f32>()?, b.to_vec::<f32>()?);
    /// assert!(a.to_vec::<f32>()?.iter().all(|&x| (2.0..3.0).contains(&x)));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn uniform(shape: &[usize], low: f64, high: f64, seed: u64, dtype: DType) -> Result<Array> {
        if !(low.is_finite() && high.is_finite() && (high - low).is_finite()) {
            return Err(Error::InvalidArgument {
                op: "uniform",
                message: format!("low {low}, high {high}"),
                hint: "use finite bounds whose difference is finite (numpy's range check)".into(),
            });
        }
        let r = build::random(Shape::from(shape), dtype, Distribution::Uniform, seed)
            .map_err(|e| e.with_op("uniform"))?;
        Ok(Array::from_node(r) * (high - low) + low)
    }

    /// Normal random numbers with `mean` and standard deviation `std`, of a float `dtype`,
    /// from the counter-based generator (see [`Array::uniform`]).
    ///
    /// ```
    /// let a = kiln::Array::normal(&[10_000], 0.0, 1.0, 7, kiln::DType::F64)?;
    /// let m = a.mean(None, false).item::<f64>()?;
    /// assert!(m.abs() < 0.05);
    /// assert!(kiln::Array::normal(&[3], 0.0, -1.0, 7, kiln::DType::F64).is_err()); // numpy raises
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn normal(shape: &[usize], mean: f64, std: f64, seed: u64, dtype: DType) -> Result<Array> {
        if !(mean.is_finite() && std.is_finite() && std >= 0.0) {
            return Err(Error::InvalidArgument {
                op: "normal",
                message: format!("mean {mean}, std {std}"),
                hint: "use a finite mean and a finite, non-negative standard deviation".into(),
            });
        }
        let r = build::random(Shape::from(shape), dtype, Distribution::Normal, seed)
            .map_err(|e| e.with_op("normal"))?;
        Ok(Array::from_node(r) * std + mean)
    }
}
