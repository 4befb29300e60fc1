//! Typed element storage: [`TypedVec`] (an owned `Vec` of one of the five element types) and
//! the borrowed views [`TSlice`] / [`TSliceMut`], the [`Elem`] trait that the generic kernels
//! are written against, and the conversion rules of `kiln_ir::Op::Cast` ([`Conv`]).
//!
//! Depends on `kiln-ir` only.

use kiln_ir::{DType, HostData, HostVec, Recycle, Scalar};

/// Conversion with kiln's cast rules: float to int truncates toward zero and saturates (NaN
/// gives 0), int to int wraps, int to float rounds directly, anything to bool is `x != 0`
/// (NaN is true), bool is 0 or 1.
pub trait Conv<U> {
    /// The converted value.
    fn conv(self) -> U;
}

macro_rules! conv_numeric {
    ($from:ty => $($to:ty),*) => {$(
        impl Conv<$to> for $from {
            #[inline(always)]
            fn conv(self) -> $to {
                self as $to
            }
        }
    )*};
}
conv_numeric!(i32 => i32, i64, f32, f64);
conv_numeric!(i64 => i32, i64, f32, f64);
conv_numeric!(f32 => i32, i64, f32, f64);
conv_numeric!(f64 => i32, i64, f32, f64);

macro_rules! conv_bool {
    ($($t:ty: $zero:expr),*) => {$(
        impl Conv<bool> for $t {
            #[inline(always)]
            fn conv(self) -> bool {
                self != $zero
            }
        }
        impl Conv<$t> for bool {
            #[inline(always)]
            fn conv(self) -> $t {
                self as u8 as $t
            }
        }
    )*};
}
conv_bool!(i32: 0, i64: 0, f32: 0.0, f64: 0.0);

impl Conv<bool> for bool {
    #[inline(always)]
    fn conv(self) -> bool {
        self
    }
}

/// One of the five element types.
pub trait Elem:
    Copy
    + Default
    + PartialOrd
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
    + Conv<bool>
    + Conv<i32>
    + Conv<i64>
    + Conv<f32>
    + Conv<f64>
{
    /// The matching dtype.
    const DTYPE: DType;
    /// The vector, if `v` holds this type.
    fn vec(v: &TypedVec) -> Option<&Vec<Self>>;
    /// The vector, if `v` holds this type.
    fn vec_mut(v: &mut TypedVec) -> Option<&mut Vec<Self>>;
    /// The slice, if `s` holds this type.
    fn slice(s: TSlice<'_>) -> Option<&[Self]>;
    /// The slice, if `s` holds this type.
    fn slice_mut(s: TSliceMut<'_>) -> Option<&mut [Self]>;
    /// The value of a scalar converted to this type (`Scalar::cast` rules).
    fn from_scalar(s: Scalar) -> Self;
    /// Cast from `i64`.
    fn from_i64(x: i64) -> Self;
    /// Cast from `f64`.
    fn from_f64(x: f64) -> Self;
    /// True for a float NaN.
    fn is_nan(self) -> bool;
}

macro_rules! elem {
    ($t:ty, $v:ident, $nan:expr, $from_scalar:expr) => {
        impl Elem for $t {
            const DTYPE: DType = DType::$v;
            #[inline]
            fn vec(v: &TypedVec) -> Option<&Vec<Self>> {
                match v {
                    TypedVec::$v(x) => Some(x),
                    _ => None,
                }
            }
            #[inline]
            fn vec_mut(v: &mut TypedVec) -> Option<&mut Vec<Self>> {
                match v {
                    TypedVec::$v(x) => Some(x),
                    _ => None,
                }
            }
            #[inline]
            fn slice(s: TSlice<'_>) -> Option<&[Self]> {
                match s {
                    TSlice::$v(x) => Some(x),
                    _ => None,
                }
            }
            #[inline]
            fn slice_mut(s: TSliceMut<'_>) -> Option<&mut [Self]> {
                match s {
                    TSliceMut::$v(x) => Some(x),
                    _ => None,
                }
            }
            #[inline]
            fn from_scalar(s: Scalar) -> Self {
                #[allow(clippy::redundant_closure_call)]
                ($from_scalar)(s.cast(DType::$v))
            }
            #[inline(always)]
            fn from_i64(x: i64) -> Self {
                Conv::<$t>::conv(x)
            }
            #[inline(always)]
            fn from_f64(x: f64) -> Self {
                Conv::<$t>::conv(x)
            }
            #[inline(always)]
            #[allow(clippy::redundant_closure_call)]
            fn is_nan(self) -> bool {
                ($nan)(self)
            }
        }
    };
}
elem!(bool, Bool, |_| false, |s: Scalar| s.as_bool());
elem!(i32, I32, |_| false, |s: Scalar| s.as_i64() as i32);
elem!(i64, I64, |_| false, |s: Scalar| s.as_i64());
elem!(f32, F32, |x: f32| x.is_nan(), |s: Scalar| s.as_f64() as f32);
elem!(f64, F64, |x: f64| x.is_nan(), |s: Scalar| s.as_f64());

/// Runs `$body` with the type alias `$T` bound to the element type of `$dt`.
macro_rules! with_dtype {
    ($dt:expr, $T:ident => $body:expr) => {
        match $dt {
            kiln_ir::DType::Bool => {
                type $T = bool;
                $body
            }
            kiln_ir::DType::I32 => {
                type $T = i32;
                $body
            }
            kiln_ir::DType::I64 => {
                type $T = i64;
                $body
            }
            kiln_ir::DType::F32 => {
                type $T = f32;
                $body
            }
            kiln_ir::DType::F64 => {
                type $T = f64;
                $body
            }
        }
    };
}
pub(crate) use with_dtype;

/// Runs `$body` with `$v` bound to the typed slice inside a [`TSlice`] (or [`TSliceMut`],
/// [`TypedVec`]: any enum with the five variants).
macro_rules! with_variant {
    ($e:expr, $Enum:ident, $v:ident => $body:expr) => {
        match $e {
            $Enum::Bool($v) => $body,
            $Enum::I32($v) => $body,
            $Enum::I64($v) => $body,
            $Enum::F32($v) => $body,
            $Enum::F64($v) => $body,
        }
    };
}
pub(crate) use with_variant;

/// An owned vector of one element type.
#[derive(Clone, Debug, PartialEq)]
pub enum TypedVec {
    /// `bool`.
    Bool(Vec<bool>),
    /// `i32`.
    I32(Vec<i32>),
    /// `i64`.
    I64(Vec<i64>),
    /// `f32`.
    F32(Vec<f32>),
    /// `f64`.
    F64(Vec<f64>),
}

impl Default for TypedVec {
    fn default() -> Self {
        TypedVec::Bool(Vec::new())
    }
}

impl TypedVec {
    /// `len` zeros of `dtype` (fresh, lazily zeroed pages for large lengths).
    pub fn zeros(dtype: DType, len: usize) -> TypedVec {
        with_dtype!(dtype, T => T::wrap(vec![T::default(); len]))
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        match self {
            TypedVec::Bool(_) => DType::Bool,
            TypedVec::I32(_) => DType::I32,
            TypedVec::I64(_) => DType::I64,
            TypedVec::F32(_) => DType::F32,
            TypedVec::F64(_) => DType::F64,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        with_variant!(self, TypedVec, v => v.len())
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacity in elements.
    pub fn capacity(&self) -> usize {
        with_variant!(self, TypedVec, v => v.capacity())
    }

    /// Sets the length to `len`: truncates, or extends with zeros (only the new tail is
    /// written).
    pub fn set_len_zeroed(&mut self, len: usize) {
        with_variant!(self, TypedVec, v => {
            if v.len() > len {
                v.truncate(len)
            } else {
                v.resize(len, Default::default())
            }
        })
    }

    /// The elements as a typed slice.
    pub fn as_slice(&self) -> TSlice<'_> {
        match self {
            TypedVec::Bool(v) => TSlice::Bool(v),
            TypedVec::I32(v) => TSlice::I32(v),
            TypedVec::I64(v) => TSlice::I64(v),
            TypedVec::F32(v) => TSlice::F32(v),
            TypedVec::F64(v) => TSlice::F64(v),
        }
    }

    /// The elements as a mutable typed slice.
    pub fn as_mut_slice(&mut self) -> TSliceMut<'_> {
        match self {
            TypedVec::Bool(v) => TSliceMut::Bool(v),
            TypedVec::I32(v) => TSliceMut::I32(v),
            TypedVec::I64(v) => TSliceMut::I64(v),
            TypedVec::F32(v) => TSliceMut::F32(v),
            TypedVec::F64(v) => TSliceMut::F64(v),
        }
    }

    /// The first `len` elements as host data, moving the vector (no copy).
    pub fn into_host(self, len: usize) -> HostData {
        with_variant!(self, TypedVec, v => {
            let mut v = v;
            v.truncate(len);
            HostData::from(v)
        })
    }

    /// The first `len` elements as host data that go back to `home` (the buffer pool) when
    /// the last handle on them drops, moving the vector (no copy). The capacity is kept.
    pub fn into_recycled_host(self, len: usize, home: &'static dyn Recycle) -> HostData {
        let mut v = self;
        with_variant!(&mut v, TypedVec, x => x.truncate(len));
        HostData::recycled(v.into(), home)
    }

    /// A copy of the elements of a typed slice.
    pub fn from_slice(s: TSlice<'_>) -> TypedVec {
        match s {
            TSlice::Bool(v) => TypedVec::Bool(v.to_vec()),
            TSlice::I32(v) => TypedVec::I32(v.to_vec()),
            TSlice::I64(v) => TypedVec::I64(v.to_vec()),
            TSlice::F32(v) => TypedVec::F32(v.to_vec()),
            TSlice::F64(v) => TypedVec::F64(v.to_vec()),
        }
    }

    /// The `Vec<T>` inside; panics if the dtype differs (an internal invariant).
    pub fn typed_mut<T: Elem>(&mut self) -> &mut Vec<T> {
        let dt = self.dtype();
        T::vec_mut(self)
            .unwrap_or_else(|| panic!("kiln-cpu: expected {} storage, found {dt}", T::DTYPE))
    }
}

impl From<HostVec> for TypedVec {
    /// The same vector (moved, no copy).
    fn from(v: HostVec) -> TypedVec {
        match v {
            HostVec::Bool(v) => TypedVec::Bool(v),
            HostVec::I32(v) => TypedVec::I32(v),
            HostVec::I64(v) => TypedVec::I64(v),
            HostVec::F32(v) => TypedVec::F32(v),
            HostVec::F64(v) => TypedVec::F64(v),
        }
    }
}

impl From<TypedVec> for HostVec {
    /// The same vector (moved, no copy).
    fn from(v: TypedVec) -> HostVec {
        match v {
            TypedVec::Bool(v) => HostVec::Bool(v),
            TypedVec::I32(v) => HostVec::I32(v),
            TypedVec::I64(v) => HostVec::I64(v),
            TypedVec::F32(v) => HostVec::F32(v),
            TypedVec::F64(v) => HostVec::F64(v),
        }
    }
}

/// Wrapping a `Vec<T>` as a [`TypedVec`].
pub trait Wrap: Sized {
    /// The wrapped vector.
    fn wrap(v: Vec<Self>) -> TypedVec;
}

macro_rules! wrap {
    ($($t:ty => $v:ident),*) => {$(
        impl Wrap for $t {
            fn wrap(v: Vec<$t>) -> TypedVec {
                TypedVec::$v(v)
            }
        }
    )*};
}
wrap!(bool => Bool, i32 => I32, i64 => I64, f32 => F32, f64 => F64);

/// A borrowed slice of one element type.
#[derive(Clone, Copy, Debug)]
pub enum TSlice<'a> {
    /// `bool`.
    Bool(&'a [bool]),
    /// `i32`.
    I32(&'a [i32]),
    /// `i64`.
    I64(&'a [i64]),
    /// `f32`.
    F32(&'a [f32]),
    /// `f64`.
    F64(&'a [f64]),
}

impl<'a> TSlice<'a> {
    /// The dtype.
    pub fn dtype(&self) -> DType {
        match self {
            TSlice::Bool(_) => DType::Bool,
            TSlice::I32(_) => DType::I32,
            TSlice::I64(_) => DType::I64,
            TSlice::F32(_) => DType::F32,
            TSlice::F64(_) => DType::F64,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        with_variant!(self, TSlice, v => v.len())
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements `a..b`.
    pub fn range(self, a: usize, b: usize) -> TSlice<'a> {
        match self {
            TSlice::Bool(v) => TSlice::Bool(&v[a..b]),
            TSlice::I32(v) => TSlice::I32(&v[a..b]),
            TSlice::I64(v) => TSlice::I64(&v[a..b]),
            TSlice::F32(v) => TSlice::F32(&v[a..b]),
            TSlice::F64(v) => TSlice::F64(&v[a..b]),
        }
    }

    /// The slice of host data.
    pub fn of_host(d: &'a HostData) -> TSlice<'a> {
        match d {
            HostData::Bool(v) => TSlice::Bool(v),
            HostData::I32(v) => TSlice::I32(v),
            HostData::I64(v) => TSlice::I64(v),
            HostData::F32(v) => TSlice::F32(v),
            HostData::F64(v) => TSlice::F64(v),
        }
    }
}

/// A mutable borrowed slice of one element type.
#[derive(Debug)]
pub enum TSliceMut<'a> {
    /// `bool`.
    Bool(&'a mut [bool]),
    /// `i32`.
    I32(&'a mut [i32]),
    /// `i64`.
    I64(&'a mut [i64]),
    /// `f32`.
    F32(&'a mut [f32]),
    /// `f64`.
    F64(&'a mut [f64]),
}

impl TSliceMut<'_> {
    /// The dtype.
    pub fn dtype(&self) -> DType {
        match self {
            TSliceMut::Bool(_) => DType::Bool,
            TSliceMut::I32(_) => DType::I32,
            TSliceMut::I64(_) => DType::I64,
            TSliceMut::F32(_) => DType::F32,
            TSliceMut::F64(_) => DType::F64,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        with_variant!(self, TSliceMut, v => v.len())
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A read-only view.
    pub fn as_ref(&self) -> TSlice<'_> {
        match self {
            TSliceMut::Bool(v) => TSlice::Bool(v),
            TSliceMut::I32(v) => TSlice::I32(v),
            TSliceMut::I64(v) => TSlice::I64(v),
            TSliceMut::F32(v) => TSlice::F32(v),
            TSliceMut::F64(v) => TSlice::F64(v),
        }
    }

    /// Splits at `mid` (consuming the borrow), like `<[T]>::split_at_mut`.
    pub fn split_at(self, mid: usize) -> (Self, Self) {
        match self {
            TSliceMut::Bool(v) => {
                let (a, b) = v.split_at_mut(mid);
                (TSliceMut::Bool(a), TSliceMut::Bool(b))
            }
            TSliceMut::I32(v) => {
                let (a, b) = v.split_at_mut(mid);
                (TSliceMut::I32(a), TSliceMut::I32(b))
            }
            TSliceMut::I64(v) => {
                let (a, b) = v.split_at_mut(mid);
                (TSliceMut::I64(a), TSliceMut::I64(b))
            }
            TSliceMut::F32(v) => {
                let (a, b) = v.split_at_mut(mid);
                (TSliceMut::F32(a), TSliceMut::F32(b))
            }
            TSliceMut::F64(v) => {
                let (a, b) = v.split_at_mut(mid);
                (TSliceMut::F64(a), TSliceMut::F64(b))
            }
        }
    }

    /// Elements `a..b`, mutably.
    pub fn range(&mut self, a: usize, b: usize) -> TSliceMut<'_> {
        match self {
            TSliceMut::Bool(v) => TSliceMut::Bool(&mut v[a..b]),
            TSliceMut::I32(v) => TSliceMut::I32(&mut v[a..b]),
            TSliceMut::I64(v) => TSliceMut::I64(&mut v[a..b]),
            TSliceMut::F32(v) => TSliceMut::F32(&mut v[a..b]),
            TSliceMut::F64(v) => TSliceMut::F64(&mut v[a..b]),
        }
    }
}

/// Copies `src` into `dst` (equal lengths), converting with the cast rules if the dtypes
/// differ.
pub fn copy_cast(src: TSlice<'_>, dst: TSliceMut<'_>) {
    debug_assert_eq!(src.len(), dst.len());
    // Same dtype: a plain copy (memcpy), not an element-by-element conversion loop.
    match (src, dst) {
        (TSlice::Bool(s), TSliceMut::Bool(d)) => copy_prefix(s, d),
        (TSlice::I32(s), TSliceMut::I32(d)) => copy_prefix(s, d),
        (TSlice::I64(s), TSliceMut::I64(d)) => copy_prefix(s, d),
        (TSlice::F32(s), TSliceMut::F32(d)) => copy_prefix(s, d),
        (TSlice::F64(s), TSliceMut::F64(d)) => copy_prefix(s, d),
        (src, dst) => {
            with_variant!(src, TSlice, s => with_variant!(dst, TSliceMut, d => cast_into(s, d)))
        }
    }
}

/// `dst[i] = src[i]` over the common prefix (as `cast_into` of equal types).
#[inline]
fn copy_prefix<T: Copy>(src: &[T], dst: &mut [T]) {
    let n = src.len().min(dst.len());
    dst[..n].copy_from_slice(&src[..n]);
}

#[inline]
fn cast_into<T: Conv<U> + Copy, U>(src: &[T], dst: &mut [U]) {
    for (o, &x) in dst.iter_mut().zip(src) {
        *o = x.conv();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_follow_scalar_cast() {
        let vals = [
            Scalar::Float(f64::NAN),
            Scalar::Float(-2.7),
            Scalar::Float(3e10),
            Scalar::Float(-3e10),
            Scalar::Float(0.0),
            Scalar::Int(i64::MAX),
            Scalar::Int(-5),
            Scalar::Int(1 << 40),
            Scalar::Bool(true),
        ];
        for v in vals {
            for from in DType::ALL {
                // Values representable in `from`.
                let x = v.cast(from);
                let src = TypedVec::from_slice(HostData::from_scalars(from, [x]).as_tslice());
                for to in DType::ALL {
                    let mut dst = TypedVec::zeros(to, 1);
                    copy_cast(src.as_slice(), dst.as_mut_slice());
                    let got = dst.into_host(1).get(0);
                    let want = x.cast(to);
                    let same = match (got, want) {
                        (Scalar::Float(a), Scalar::Float(b)) => {
                            a == b || (a.is_nan() && b.is_nan())
                        }
                        (a, b) => a == b,
                    };
                    assert!(same, "{x:?} {from} -> {to}: got {got:?} want {want:?}");
                }
            }
        }
    }

    trait AsT {
        fn as_tslice(&self) -> TSlice<'_>;
    }
    impl AsT for HostData {
        fn as_tslice(&self) -> TSlice<'_> {
            TSlice::of_host(self)
        }
    }
}
