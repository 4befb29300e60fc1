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
    /// The storage, if `v` holds this type.
    fn vec(v: &TypedVec) -> Option<&Aligned<Self>>;
    /// The storage, if `v` holds this type.
    fn vec_mut(v: &mut TypedVec) -> Option<&mut Aligned<Self>>;
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
            fn vec(v: &TypedVec) -> Option<&Aligned<Self>> {
                match v {
                    TypedVec::$v(x) => Some(x),
                    _ => None,
                }
            }
            #[inline]
            fn vec_mut(v: &mut TypedVec) -> Option<&mut Aligned<Self>> {
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

/// From this size on, [`Aligned::try_zeroed`] asks the allocator whether it can have the
/// memory before allocating it. Smaller requests cannot fail short of the whole machine
/// (and under Linux's overcommit only requests near the machine's memory fail); and the
/// probe stays above glibc's largest dynamic mmap threshold (32 MiB), since freeing a
/// smaller probe would raise that threshold and move later buffers of its size from fresh,
/// kernel-zeroed pages to the heap, which `calloc` must clear (W5's 4 MiB outputs: 8 %).
const TRY_RESERVE_MIN_BYTES: usize = 1 << 30;

/// The boundary [`Aligned`] storage starts on: one cache line, one AVX-512 vector.
pub const ALIGN_BYTES: usize = 64;

/// An owned vector whose elements start on a 64-byte boundary ([`ALIGN_BYTES`]) when it was
/// allocated by [`Aligned::zeroed`] (the buffer pool's, so every kernel output and
/// interpreter register): the system allocator returns 16-byte aligned memory, and a vector
/// load or store that straddles two cache lines costs about twice one that does not (in L1,
/// AVX-512: 0.90 vs 0.39 ns per vector; in L2 1.93 vs 1.48). The storage is a `Vec<T>`
/// with `lead` elements of padding before the elements, so it moves to and from host data
/// without a copy. A vector wrapped with [`Aligned::from_vec`] keeps the caller's layout.
///
/// ```
/// use kiln_cpu::Aligned;
/// let v = Aligned::<f32>::zeroed(100);
/// assert_eq!((v.len(), v.as_ptr() as usize % 64), (100, 0));
/// assert_eq!(&Aligned::from_vec(vec![1, 2])[..], &[1, 2]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Aligned<T> {
    vec: Vec<T>,
    lead: usize,
}

impl<T: Copy + Default> Aligned<T> {
    /// Padding elements to allocate so that some start within them is aligned.
    const PAD: usize = ALIGN_BYTES / std::mem::size_of::<T>();

    /// `len` zeros (default values), starting on a 64-byte boundary; large lengths get
    /// fresh, lazily zeroed pages.
    pub fn zeroed(len: usize) -> Aligned<T> {
        let vec = vec![T::default(); len + Self::PAD];
        let mut v = Aligned { vec, lead: 0 };
        v.realign(len);
        v
    }

    /// [`Aligned::zeroed`], or `None` when the memory cannot be had: the length with its
    /// padding overflows, or the allocator refuses it. Large requests are first reserved
    /// with `try_reserve_exact` (an allocation that can fail instead of aborting), released
    /// and allocated again zeroed, so they keep fresh, lazily zeroed pages.
    ///
    /// ```
    /// use kiln_cpu::Aligned;
    /// assert_eq!(Aligned::<f64>::try_zeroed(10).map(|v| v.len()), Some(10));
    /// assert!(Aligned::<f64>::try_zeroed(usize::MAX - 2).is_none());
    /// assert!(Aligned::<f32>::try_zeroed(1 << 60).is_none()); // 4 EiB
    /// ```
    pub fn try_zeroed(len: usize) -> Option<Aligned<T>> {
        let n = len.checked_add(Self::PAD)?;
        if n.checked_mul(std::mem::size_of::<T>())? >= TRY_RESERVE_MIN_BYTES {
            let mut probe: Vec<T> = Vec::new();
            probe.try_reserve_exact(n).ok()?;
        }
        Some(Aligned::zeroed(len))
    }

    /// Wraps a vector as it is (no copy; its first element starts where the allocator put
    /// it).
    pub fn from_vec(vec: Vec<T>) -> Aligned<T> {
        Aligned { vec, lead: 0 }
    }

    /// Resizes to `len` elements with unspecified (initialised) contents, starting on a
    /// 64-byte boundary when the storage has room for the padding: what the buffer pool
    /// does with a vector it hands out again. Only storage beyond the previous end is
    /// written (zeros), so reuse costs no pass over the elements.
    pub fn realign(&mut self, len: usize) {
        let lead = self.vec.as_ptr().align_offset(ALIGN_BYTES);
        self.lead = if lead <= Self::PAD && lead + len <= self.vec.capacity() {
            lead
        } else {
            0
        };
        self.vec.resize(self.lead + len, T::default());
    }

    /// Sets the length to `len`: truncates, or extends with zeros.
    pub fn resize(&mut self, len: usize) {
        self.vec.resize(self.lead + len, T::default());
    }

    /// Shortens to `len` elements (no effect if already shorter).
    pub fn truncate(&mut self, len: usize) {
        self.vec.truncate(self.lead + len);
    }

    /// The storage's capacity in elements, padding included (what it holds in memory).
    pub fn capacity(&self) -> usize {
        self.vec.capacity()
    }

    /// The storage and the number of padding elements before the elements (no copy).
    pub fn into_parts(self) -> (Vec<T>, usize) {
        (self.vec, self.lead)
    }

    /// The elements as a plain vector: moved out, shifted to the front if there is
    /// padding.
    pub fn into_vec(self) -> Vec<T> {
        let (mut v, lead) = self.into_parts();
        v.drain(..lead);
        v
    }
}

impl<T> std::ops::Deref for Aligned<T> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        &self.vec[self.lead..]
    }
}

impl<T> std::ops::DerefMut for Aligned<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.vec[self.lead..]
    }
}

impl<T: PartialEq> PartialEq for Aligned<T> {
    fn eq(&self, other: &Aligned<T>) -> bool {
        self[..] == other[..]
    }
}

/// An owned vector of one element type ([`Aligned`] storage).
#[derive(Clone, Debug, PartialEq)]
pub enum TypedVec {
    /// `bool`.
    Bool(Aligned<bool>),
    /// `i32`.
    I32(Aligned<i32>),
    /// `i64`.
    I64(Aligned<i64>),
    /// `f32`.
    F32(Aligned<f32>),
    /// `f64`.
    F64(Aligned<f64>),
}

impl Default for TypedVec {
    fn default() -> Self {
        TypedVec::Bool(Aligned::default())
    }
}

impl TypedVec {
    /// `len` zeros of `dtype` starting on a 64-byte boundary ([`Aligned::zeroed`]; fresh,
    /// lazily zeroed pages for large lengths).
    pub fn zeros(dtype: DType, len: usize) -> TypedVec {
        with_dtype!(dtype, T => T::wrap_aligned(Aligned::zeroed(len)))
    }

    /// [`TypedVec::zeros`], or `None` when the memory cannot be had
    /// ([`Aligned::try_zeroed`]).
    pub fn try_zeros(dtype: DType, len: usize) -> Option<TypedVec> {
        with_dtype!(dtype, T => Aligned::try_zeroed(len).map(T::wrap_aligned))
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

    /// The capacity of the storage in elements (padding included).
    pub fn capacity(&self) -> usize {
        with_variant!(self, TypedVec, v => v.capacity())
    }

    /// Makes this `len` elements of unspecified (initialised) contents starting on a
    /// 64-byte boundary where the storage has room ([`Aligned::realign`]: only storage
    /// beyond the previous end is written).
    pub fn set_len_zeroed(&mut self, len: usize) {
        with_variant!(self, TypedVec, v => v.realign(len))
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
            HostData::from(v.into_vec())
        })
    }

    /// The first `len` elements as host data that go back to `home` (the buffer pool) when
    /// the last handle on them drops, moving the vector (no copy; the padding before the
    /// elements goes with it). The capacity is kept.
    pub fn into_recycled_host(self, len: usize, home: &'static dyn Recycle) -> HostData {
        with_variant!(self, TypedVec, v => {
            let mut v = v;
            v.truncate(len);
            let (vec, lead) = v.into_parts();
            HostData::recycled_from(HostVec::from(vec), lead, home)
        })
    }

    /// A copy of the elements of a typed slice.
    pub fn from_slice(s: TSlice<'_>) -> TypedVec {
        match s {
            TSlice::Bool(v) => TypedVec::Bool(Aligned::from_vec(v.to_vec())),
            TSlice::I32(v) => TypedVec::I32(Aligned::from_vec(v.to_vec())),
            TSlice::I64(v) => TypedVec::I64(Aligned::from_vec(v.to_vec())),
            TSlice::F32(v) => TypedVec::F32(Aligned::from_vec(v.to_vec())),
            TSlice::F64(v) => TypedVec::F64(Aligned::from_vec(v.to_vec())),
        }
    }

    /// The storage inside; panics if the dtype differs (an internal invariant).
    pub fn typed_mut<T: Elem>(&mut self) -> &mut Aligned<T> {
        let dt = self.dtype();
        T::vec_mut(self)
            .unwrap_or_else(|| panic!("kiln-cpu: expected {} storage, found {dt}", T::DTYPE))
    }
}

impl From<HostVec> for TypedVec {
    /// The same vector as storage (moved, no copy; its whole length are the elements).
    fn from(v: HostVec) -> TypedVec {
        match v {
            HostVec::Bool(v) => TypedVec::Bool(Aligned::from_vec(v)),
            HostVec::I32(v) => TypedVec::I32(Aligned::from_vec(v)),
            HostVec::I64(v) => TypedVec::I64(Aligned::from_vec(v)),
            HostVec::F32(v) => TypedVec::F32(Aligned::from_vec(v)),
            HostVec::F64(v) => TypedVec::F64(Aligned::from_vec(v)),
        }
    }
}

impl TypedVec {
    /// The storage as a host vector for a [`Recycle`] home (moved, no copy; padding
    /// included: only its capacity is reused).
    pub fn into_storage(self) -> HostVec {
        match self {
            TypedVec::Bool(v) => HostVec::Bool(v.into_parts().0),
            TypedVec::I32(v) => HostVec::I32(v.into_parts().0),
            TypedVec::I64(v) => HostVec::I64(v.into_parts().0),
            TypedVec::F32(v) => HostVec::F32(v.into_parts().0),
            TypedVec::F64(v) => HostVec::F64(v.into_parts().0),
        }
    }
}

/// Wrapping a `Vec<T>` or [`Aligned`] storage as a [`TypedVec`].
pub trait Wrap: Sized {
    /// The wrapped vector (as it is).
    fn wrap(v: Vec<Self>) -> TypedVec;
    /// The wrapped storage.
    fn wrap_aligned(v: Aligned<Self>) -> TypedVec;
}

macro_rules! wrap {
    ($($t:ty => $v:ident),*) => {$(
        impl Wrap for $t {
            fn wrap(v: Vec<$t>) -> TypedVec {
                TypedVec::$v(Aligned::from_vec(v))
            }
            fn wrap_aligned(v: Aligned<$t>) -> TypedVec {
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
    use std::sync::Mutex;

    fn addr<T>(s: &[T]) -> usize {
        s.as_ptr() as usize
    }

    fn floats(d: &HostData) -> Vec<f64> {
        (0..d.len()).map(|i| d.get(i).as_f64()).collect()
    }

    /// Fresh storage of every dtype and many lengths starts on a 64-byte boundary, reads as
    /// zeros of the asked length, and keeps the alignment when the pool resizes it within
    /// its capacity; a wrapped vector keeps its layout and contents.
    #[test]
    fn aligned_storage_starts_on_a_cache_line() {
        fn check<T: Copy + Default + PartialEq + std::fmt::Debug>() {
            for len in [0usize, 1, 3, 15, 16, 17, 100, 1024, 5000] {
                let mut v = Aligned::<T>::zeroed(len);
                assert_eq!(v.len(), len);
                assert_eq!(addr(&v) % ALIGN_BYTES, 0, "len {len}");
                assert!(v.iter().all(|x| *x == T::default()));
                for shorter in [len / 2, len] {
                    v.realign(shorter);
                    assert_eq!((v.len(), addr(&v) % ALIGN_BYTES), (shorter, 0));
                }
            }
            let w = Aligned::from_vec(vec![T::default(); 5]);
            assert_eq!(w.len(), 5);
        }
        check::<bool>();
        check::<i32>();
        check::<i64>();
        check::<f32>();
        check::<f64>();
        for dt in DType::ALL {
            let v = TypedVec::zeros(dt, 33);
            assert_eq!(with_variant!(&v, TypedVec, x => addr(x)) % ALIGN_BYTES, 0);
        }
    }

    /// Padding never shows: not in the elements, not in the host data made from them
    /// (moved, then converted to a plain vector with the elements at the front), and the
    /// storage goes home whole.
    #[test]
    fn padding_stays_out_of_the_elements() {
        #[derive(Debug)]
        struct Keep(Mutex<Vec<HostVec>>);
        impl Recycle for Keep {
            fn recycle(&self, v: HostVec) {
                self.0.lock().unwrap().push(v);
            }
        }
        static HOME: Keep = Keep(Mutex::new(Vec::new()));
        let mut v = Aligned::<f32>::zeroed(10);
        for (i, x) in v.iter_mut().enumerate() {
            *x = i as f32 + 1.0;
        }
        let want: Vec<f32> = (1..=10).map(|i| i as f32).collect();
        assert_eq!(v.clone().into_vec(), want);
        let t = TypedVec::F32(v);
        let cap = t.capacity();
        let host = t.clone().into_host(4);
        assert_eq!(floats(&host), vec![1.0, 2.0, 3.0, 4.0]);
        let rec = t.into_recycled_host(7, &HOME);
        assert_eq!(rec.len(), 7);
        assert_eq!(floats(&rec), (1..=7).map(f64::from).collect::<Vec<_>>());
        let HostData::F32(shared) = rec.clone() else {
            panic!("f32 data")
        };
        assert_eq!(addr(&shared) % ALIGN_BYTES, 0);
        drop(shared);
        drop(rec);
        let home = HOME.0.lock().unwrap();
        assert_eq!(home.len(), 1);
        assert_eq!(home[0].capacity(), cap);
    }

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
