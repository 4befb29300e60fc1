//! Host-side element data: the values of inputs, scalars and evaluated results.
//!
//! Data is owned (`Vec`) or shared (`Arc`), never borrowed, so a lazy expression can never
//! outlive the data it reads. A backend can hand out its storage as [`Recycled`] data: a
//! `Vec` with a *home* (a [`Recycle`] implementation, e.g. a buffer pool) that gets the
//! `Vec` back, as an owned [`HostVec`], when the last handle on it is dropped, instead of
//! freeing it. Depends on [`crate::dtype`] only.

use crate::dtype::{DType, Scalar};
use std::ops::Deref;
use std::sync::Arc;

/// An immutable, cheaply clonable buffer of `T`: a moved-in `Vec`, a shared slice, a
/// [`Recycled`] `Vec` that goes back to its home when the last clone is dropped, or
/// [`Foreign`] storage (a memory-mapped file). No conversion copies the elements.
///
/// ```
/// use kiln_ir::Shared;
/// let a = Shared::from(vec![1.0f32, 2.0]);
/// let b = a.clone(); // shares, does not copy
/// assert_eq!(&b[..], &[1.0, 2.0]);
/// ```
#[derive(Clone, Debug)]
pub enum Shared<T> {
    /// A `Vec` moved in (no copy).
    Vec(Arc<Vec<T>>),
    /// A shared slice (no copy).
    Slice(Arc<[T]>),
    /// A `Vec` handed to its home when the last handle drops (see [`Shared::recycled`]).
    Recycled(Arc<Recycled<T>>),
    /// Storage owned by something else, kept alive by the handle (see [`Foreign`]).
    Foreign(Arc<dyn Foreign<T>>),
}

/// Element storage that kiln does not own: a tensor inside a memory-mapped file, a buffer
/// of another library. kiln reads it through [`Foreign::elements`] and keeps the value alive
/// as long as an array (or a plan input) refers to it; it never writes to it.
///
/// ```
/// use kiln_ir::{Foreign, Shared};
/// use std::sync::Arc;
/// #[derive(Debug)]
/// struct Evens(Vec<i64>);
/// impl Foreign<i64> for Evens {
///     fn elements(&self) -> &[i64] {
///         &self.0
///     }
/// }
/// let s: Shared<i64> = Shared::Foreign(Arc::new(Evens(vec![0, 2, 4])));
/// assert_eq!(&s[..], &[0, 2, 4]);
/// ```
pub trait Foreign<T>: Send + Sync + std::fmt::Debug {
    /// The elements (the same slice on every call).
    fn elements(&self) -> &[T];
}

impl<T> Deref for Shared<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Shared::Vec(v) => v,
            Shared::Slice(s) => s,
            Shared::Recycled(r) => r,
            Shared::Foreign(f) => f.elements(),
        }
    }
}

impl<T> From<Vec<T>> for Shared<T> {
    fn from(v: Vec<T>) -> Self {
        Shared::Vec(Arc::new(v))
    }
}

impl<T> From<Arc<Vec<T>>> for Shared<T> {
    fn from(v: Arc<Vec<T>>) -> Self {
        Shared::Vec(v)
    }
}

impl<T> From<Arc<[T]>> for Shared<T> {
    fn from(v: Arc<[T]>) -> Self {
        Shared::Slice(v)
    }
}

impl<T> From<Recycled<T>> for Shared<T> {
    fn from(v: Recycled<T>) -> Self {
        Shared::Recycled(Arc::new(v))
    }
}

impl<T: Element> Shared<T> {
    /// A buffer over `vec` (no copy) that hands `vec` to `home` when the last clone is
    /// dropped, unless [`Shared::into_vec`] took it out first.
    ///
    /// ```
    /// use kiln_ir::{HostVec, Recycle, Shared};
    /// #[derive(Debug)]
    /// struct Print;
    /// impl Recycle for Print {
    ///     fn recycle(&self, v: HostVec) {
    ///         println!("{} elements of capacity come home", v.capacity());
    ///     }
    /// }
    /// static HOME: Print = Print;
    /// let a = Shared::recycled(vec![1.5f64, 2.5], &HOME);
    /// assert_eq!(&a[..], &[1.5, 2.5]);
    /// drop(a); // prints
    /// ```
    pub fn recycled(vec: Vec<T>, home: &'static dyn Recycle) -> Shared<T> {
        Shared::from(Recycled::new(vec, home))
    }

    /// [`Shared::recycled`] over the elements `vec[start..]`: the first `start` elements
    /// are padding that stays with the storage (a backend aligns its buffers this way).
    ///
    /// ```
    /// use kiln_ir::{HostVec, Recycle, Shared};
    /// #[derive(Debug)]
    /// struct Home;
    /// impl Recycle for Home {
    ///     fn recycle(&self, _: HostVec) {}
    /// }
    /// let a = Shared::recycled_from(vec![0.0f32, 0.0, 1.5, 2.5], 2, &Home);
    /// assert_eq!(&a[..], &[1.5, 2.5]);
    /// assert_eq!(a.into_vec(), vec![1.5, 2.5]);
    /// ```
    pub fn recycled_from(vec: Vec<T>, start: usize, home: &'static dyn Recycle) -> Shared<T> {
        Shared::from(Recycled::starting_at(vec, start, home))
    }
}

impl<T: Clone> Shared<T> {
    /// The elements as a `Vec`, moving them out without a copy when this is the only handle
    /// to a `Vec`-backed (or [`Recycled`]) buffer; a shared slice or [`Foreign`] storage is
    /// copied. The caller then owns the `Vec`: a
    /// recycled one no longer goes home.
    ///
    /// ```
    /// let v = kiln_ir::Shared::from(vec![1, 2, 3]).into_vec();
    /// assert_eq!(v, vec![1, 2, 3]);
    /// ```
    pub fn into_vec(self) -> Vec<T> {
        match self {
            Shared::Vec(v) => Arc::try_unwrap(v).unwrap_or_else(|v| (*v).clone()),
            Shared::Slice(s) => s.to_vec(),
            Shared::Recycled(r) => match Arc::try_unwrap(r) {
                Ok(r) => r.into_vec(),
                Err(r) => r.to_vec(),
            },
            Shared::Foreign(f) => f.elements().to_vec(),
        }
    }
}

/// The home of [`Recycled`] storage: receives each vector whose last handle was dropped
/// (a backend's buffer pool implements it). It is called from `Drop`, on whichever thread
/// drops the last handle, so it should be quick and must not panic.
///
/// ```
/// use kiln_ir::{HostVec, Recycle, Shared};
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// #[derive(Debug)]
/// struct Count(AtomicUsize);
/// impl Recycle for Count {
///     fn recycle(&self, _: HostVec) {
///         self.0.fetch_add(1, Ordering::Relaxed);
///     }
/// }
/// static HOME: Count = Count(AtomicUsize::new(0));
/// drop(Shared::recycled(vec![1i32, 2, 3], &HOME));
/// assert_eq!(HOME.0.load(Ordering::Relaxed), 1);
/// ```
pub trait Recycle: Send + Sync + std::fmt::Debug {
    /// Takes back a vector (its length and contents are whatever its last owner left).
    fn recycle(&self, v: HostVec);
}

/// A home that also hands vectors out: a device backend downloads into them, so downloaded
/// values reuse warm host storage and go back there when their last handle drops (kiln
/// gives its GPU backend the CPU backend's buffer pool).
///
/// ```
/// use kiln_ir::{DType, HostData, HostPool, HostVec, Recycle};
/// #[derive(Debug)]
/// struct Fresh;
/// impl Recycle for Fresh {
///     fn recycle(&self, _: HostVec) {}
/// }
/// impl HostPool for Fresh {
///     fn take_host(&self, dtype: DType, len: usize) -> (HostVec, usize) {
///         assert_eq!(dtype, DType::F32);
///         (HostVec::from(vec![0.0f32; len]), 0)
///     }
/// }
/// static HOME: Fresh = Fresh;
/// let (v, start) = HOME.take_host(DType::F32, 3);
/// let d = HostData::recycled_from(v, start, &HOME);
/// assert_eq!(d.len(), 3);
/// ```
pub trait HostPool: Recycle {
    /// A vector of `dtype` whose elements `[start, start + len)` the caller fills (its
    /// length is `start + len`; the first `start` elements are padding); returns it and
    /// `start`. Contents are unspecified.
    fn take_host(&self, dtype: DType, len: usize) -> (HostVec, usize);
}

/// An owned vector of one of the five element types (what a [`Recycle`] home receives).
///
/// ```
/// use kiln_ir::{DType, HostVec};
/// let v = HostVec::from(vec![1.0f32; 8]);
/// assert_eq!((v.dtype(), v.capacity()), (DType::F32, 8));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum HostVec {
    /// `bool` elements.
    Bool(Vec<bool>),
    /// `i32` elements.
    I32(Vec<i32>),
    /// `i64` elements.
    I64(Vec<i64>),
    /// `f32` elements.
    F32(Vec<f32>),
    /// `f64` elements.
    F64(Vec<f64>),
}

impl HostVec {
    /// The dtype of the elements.
    ///
    /// ```
    /// assert_eq!(kiln_ir::HostVec::from(vec![1i64]).dtype(), kiln_ir::DType::I64);
    /// ```
    pub fn dtype(&self) -> DType {
        match self {
            HostVec::Bool(_) => DType::Bool,
            HostVec::I32(_) => DType::I32,
            HostVec::I64(_) => DType::I64,
            HostVec::F32(_) => DType::F32,
            HostVec::F64(_) => DType::F64,
        }
    }

    /// The capacity of the vector, in elements.
    ///
    /// ```
    /// let v = kiln_ir::HostVec::from(Vec::<bool>::with_capacity(10));
    /// assert!(v.capacity() >= 10);
    /// ```
    pub fn capacity(&self) -> usize {
        match self {
            HostVec::Bool(v) => v.capacity(),
            HostVec::I32(v) => v.capacity(),
            HostVec::I64(v) => v.capacity(),
            HostVec::F32(v) => v.capacity(),
            HostVec::F64(v) => v.capacity(),
        }
    }
}

impl From<HostVec> for HostData {
    /// The vector as plain host data (no copy, no home).
    fn from(v: HostVec) -> HostData {
        match v {
            HostVec::Bool(v) => HostData::from(v),
            HostVec::I32(v) => HostData::from(v),
            HostVec::I64(v) => HostData::from(v),
            HostVec::F32(v) => HostData::from(v),
            HostVec::F64(v) => HostData::from(v),
        }
    }
}

/// A `Vec` with a home: when dropped, the `Vec` is handed to `home` ([`Recycle::recycle`])
/// instead of freed. Held behind an `Arc` in [`Shared::Recycled`], so the storage goes home
/// when the last handle on it drops. Reads as a slice; never handed out mutably, so what
/// goes home is exactly what was put in. A zero-capacity `Vec` is not sent home (there is
/// nothing to reuse).
///
/// ```
/// use kiln_ir::{HostVec, Recycle, Recycled};
/// use std::sync::Mutex;
/// #[derive(Debug)]
/// struct Keep(Mutex<Vec<HostVec>>);
/// impl Recycle for Keep {
///     fn recycle(&self, v: HostVec) {
///         self.0.lock().unwrap().push(v);
///     }
/// }
/// static HOME: Keep = Keep(Mutex::new(Vec::new()));
/// let r = Recycled::new(vec![7i32, 8], &HOME);
/// assert_eq!(r[1], 8);
/// drop(r);
/// assert_eq!(HOME.0.lock().unwrap()[0], HostVec::I32(vec![7, 8]));
/// ```
#[derive(Debug)]
pub struct Recycled<T> {
    vec: Vec<T>,
    /// The elements are `vec[start..]`.
    start: usize,
    home: &'static dyn Recycle,
    /// `T::into_host_vec` (a function pointer, so `Recycled<T>` and its `Drop` need no
    /// `Element` bound and [`Shared`] stays unbounded).
    wrap: fn(Vec<T>) -> HostVec,
}

impl<T: Element> Recycled<T> {
    /// Wraps `vec` (no copy); it goes to `home` when this is dropped.
    ///
    /// ```
    /// use kiln_ir::{HostVec, Recycle, Recycled};
    /// #[derive(Debug)]
    /// struct Ignore;
    /// impl Recycle for Ignore {
    ///     fn recycle(&self, _: HostVec) {}
    /// }
    /// let r = Recycled::new(vec![true, false], &Ignore);
    /// assert_eq!(r.len(), 2);
    /// ```
    pub fn new(vec: Vec<T>, home: &'static dyn Recycle) -> Recycled<T> {
        Recycled::starting_at(vec, 0, home)
    }

    /// Wraps the elements `vec[start..]` (no copy; `start` is clamped to the length): the
    /// first `start` are padding, which goes home with the rest.
    ///
    /// ```
    /// use kiln_ir::{HostVec, Recycle, Recycled};
    /// #[derive(Debug)]
    /// struct Ignore;
    /// impl Recycle for Ignore {
    ///     fn recycle(&self, _: HostVec) {}
    /// }
    /// let r = Recycled::starting_at(vec![9i64, 1, 2], 1, &Ignore);
    /// assert_eq!(&r[..], &[1, 2]);
    /// ```
    pub fn starting_at(vec: Vec<T>, start: usize, home: &'static dyn Recycle) -> Recycled<T> {
        Recycled {
            start: start.min(vec.len()),
            vec,
            home,
            wrap: T::into_host_vec,
        }
    }
}

impl<T> Recycled<T> {
    /// The `Vec` of the elements, moved out; it no longer goes home. No copy, except that
    /// elements after padding ([`Recycled::starting_at`]) are moved to the front.
    ///
    /// ```
    /// use kiln_ir::{HostVec, Recycle, Recycled};
    /// #[derive(Debug)]
    /// struct Never;
    /// impl Recycle for Never {
    ///     fn recycle(&self, _: HostVec) {
    ///         unreachable!("into_vec took the vector out")
    ///     }
    /// }
    /// let v = Recycled::new(vec![1i32, 2], &Never).into_vec();
    /// assert_eq!(v, vec![1, 2]);
    /// ```
    pub fn into_vec(mut self) -> Vec<T> {
        // `Drop` then sees an empty, zero-capacity vector and sends nothing home.
        let mut v = std::mem::take(&mut self.vec);
        v.drain(..self.start);
        v
    }

    /// The home the storage goes back to.
    ///
    /// ```
    /// use kiln_ir::{HostVec, Recycle, Recycled};
    /// #[derive(Debug)]
    /// struct Home;
    /// impl Recycle for Home {
    ///     fn recycle(&self, _: HostVec) {}
    /// }
    /// let r = Recycled::new(vec![1.0f32], &Home);
    /// assert_eq!(format!("{:?}", r.home()), "Home");
    /// ```
    pub fn home(&self) -> &'static dyn Recycle {
        self.home
    }
}

impl<T> Deref for Recycled<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.vec[self.start..]
    }
}

impl<T> Drop for Recycled<T> {
    fn drop(&mut self) {
        if self.vec.capacity() > 0 {
            let v = std::mem::take(&mut self.vec);
            self.home.recycle((self.wrap)(v));
        }
    }
}

/// Typed element data of one of the five dtypes.
///
/// ```
/// use kiln_ir::{HostData, DType};
/// let d = HostData::from(vec![1i32, 2, 3]);
/// assert_eq!(d.dtype(), DType::I32);
/// assert_eq!(d.len(), 3);
/// ```
#[derive(Clone, Debug)]
pub enum HostData {
    /// `bool` elements.
    Bool(Shared<bool>),
    /// `i32` elements.
    I32(Shared<i32>),
    /// `i64` elements.
    I64(Shared<i64>),
    /// `f32` elements.
    F32(Shared<f32>),
    /// `f64` elements.
    F64(Shared<f64>),
}

impl HostData {
    /// The dtype of the elements.
    ///
    /// ```
    /// assert_eq!(kiln_ir::HostData::from(vec![true]).dtype(), kiln_ir::DType::Bool);
    /// ```
    pub fn dtype(&self) -> DType {
        match self {
            HostData::Bool(_) => DType::Bool,
            HostData::I32(_) => DType::I32,
            HostData::I64(_) => DType::I64,
            HostData::F32(_) => DType::F32,
            HostData::F64(_) => DType::F64,
        }
    }

    /// The number of elements.
    ///
    /// ```
    /// assert_eq!(kiln_ir::HostData::from(vec![1.0f64; 4]).len(), 4);
    /// ```
    pub fn len(&self) -> usize {
        match self {
            HostData::Bool(v) => v.len(),
            HostData::I32(v) => v.len(),
            HostData::I64(v) => v.len(),
            HostData::F32(v) => v.len(),
            HostData::F64(v) => v.len(),
        }
    }

    /// True if there are no elements.
    ///
    /// ```
    /// assert!(kiln_ir::HostData::from(Vec::<f32>::new()).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as a [`Scalar`].
    ///
    /// ```
    /// use kiln_ir::{HostData, Scalar};
    /// assert_eq!(HostData::from(vec![5i64]).get(0), Scalar::Int(5));
    /// ```
    pub fn get(&self, i: usize) -> Scalar {
        match self {
            HostData::Bool(v) => Scalar::Bool(v[i]),
            HostData::I32(v) => Scalar::Int(v[i] as i64),
            HostData::I64(v) => Scalar::Int(v[i]),
            HostData::F32(v) => Scalar::Float(v[i] as f64),
            HostData::F64(v) => Scalar::Float(v[i]),
        }
    }

    /// Host data over `v` (no copy) that hands `v` back to `home` when the last handle on it
    /// is dropped (see [`Recycled`]).
    ///
    /// ```
    /// use kiln_ir::{HostData, HostVec, Recycle};
    /// #[derive(Debug)]
    /// struct Pool;
    /// impl Recycle for Pool {
    ///     fn recycle(&self, _: HostVec) {}
    /// }
    /// let d = HostData::recycled(HostVec::from(vec![1i32, 2]), &Pool);
    /// assert_eq!((d.dtype(), d.len()), (kiln_ir::DType::I32, 2));
    /// ```
    pub fn recycled(v: HostVec, home: &'static dyn Recycle) -> HostData {
        HostData::recycled_from(v, 0, home)
    }

    /// [`HostData::recycled`] over the elements from `start` on (the first `start` are
    /// padding that goes home with the storage; see [`Recycled::starting_at`]).
    ///
    /// ```
    /// use kiln_ir::{HostData, HostVec, Recycle, Scalar};
    /// #[derive(Debug)]
    /// struct Pool;
    /// impl Recycle for Pool {
    ///     fn recycle(&self, _: HostVec) {}
    /// }
    /// let d = HostData::recycled_from(HostVec::from(vec![0i32, 7, 8]), 1, &Pool);
    /// assert_eq!((d.len(), d.get(0)), (2, Scalar::Int(7)));
    /// ```
    pub fn recycled_from(v: HostVec, start: usize, home: &'static dyn Recycle) -> HostData {
        match v {
            HostVec::Bool(v) => HostData::Bool(Shared::recycled_from(v, start, home)),
            HostVec::I32(v) => HostData::I32(Shared::recycled_from(v, start, home)),
            HostVec::I64(v) => HostData::I64(Shared::recycled_from(v, start, home)),
            HostVec::F32(v) => HostData::F32(Shared::recycled_from(v, start, home)),
            HostVec::F64(v) => HostData::F64(Shared::recycled_from(v, start, home)),
        }
    }

    /// Builds data of `dtype` from scalars (each converted with [`Scalar::cast`]).
    ///
    /// ```
    /// use kiln_ir::{HostData, Scalar, DType};
    /// let d = HostData::from_scalars(DType::F32, [Scalar::Int(1), Scalar::Float(2.5)]);
    /// assert_eq!(d.get(1), Scalar::Float(2.5));
    /// ```
    pub fn from_scalars(dtype: DType, it: impl IntoIterator<Item = Scalar>) -> HostData {
        let it = it.into_iter();
        match dtype {
            DType::Bool => HostData::from(it.map(|s| s.as_bool()).collect::<Vec<_>>()),
            DType::I32 => HostData::from(
                it.map(|s| s.cast(DType::I32).as_i64() as i32)
                    .collect::<Vec<_>>(),
            ),
            DType::I64 => HostData::from(it.map(|s| s.as_i64()).collect::<Vec<_>>()),
            DType::F32 => HostData::from(it.map(|s| s.as_f64() as f32).collect::<Vec<_>>()),
            DType::F64 => HostData::from(it.map(|s| s.as_f64()).collect::<Vec<_>>()),
        }
    }
}

/// A Rust element type kiln can hold: `bool`, `i32`, `i64`, `f32`, `f64`.
///
/// ```
/// use kiln_ir::{Element, DType};
/// assert_eq!(<f32 as Element>::DTYPE, DType::F32);
/// ```
pub trait Element: Copy + Send + Sync + PartialEq + std::fmt::Debug + 'static {
    /// The matching dtype.
    const DTYPE: DType;
    /// Wraps a buffer of this type.
    fn wrap(data: Shared<Self>) -> HostData;
    /// The buffer, if `data` holds this type.
    fn unwrap(data: &HostData) -> Option<&Shared<Self>>;
    /// The value as a [`Scalar`].
    fn to_scalar(self) -> Scalar;
    /// A vector of this type as a [`HostVec`] (moved, no copy).
    ///
    /// ```
    /// use kiln_ir::{Element, HostVec};
    /// assert_eq!(f64::into_host_vec(vec![2.0]), HostVec::F64(vec![2.0]));
    /// ```
    fn into_host_vec(v: Vec<Self>) -> HostVec;
}

macro_rules! element {
    ($t:ty, $variant:ident, $scalar:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn wrap(data: Shared<Self>) -> HostData {
                HostData::$variant(data)
            }
            fn unwrap(data: &HostData) -> Option<&Shared<Self>> {
                match data {
                    HostData::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn to_scalar(self) -> Scalar {
                #[allow(clippy::redundant_closure_call)]
                ($scalar)(self)
            }
            fn into_host_vec(v: Vec<Self>) -> HostVec {
                HostVec::$variant(v)
            }
        }
        impl From<Vec<$t>> for HostVec {
            fn from(v: Vec<$t>) -> HostVec {
                HostVec::$variant(v)
            }
        }
        impl From<Vec<$t>> for HostData {
            fn from(v: Vec<$t>) -> HostData {
                HostData::$variant(Shared::from(v))
            }
        }
    };
}

element!(bool, Bool, Scalar::Bool);
element!(i32, I32, |x: i32| Scalar::Int(x as i64));
element!(i64, I64, Scalar::Int);
element!(f32, F32, |x: f32| Scalar::Float(x as f64));
element!(f64, F64, Scalar::Float);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    /// A home that counts the vectors it receives and keeps the last one.
    #[derive(Debug, Default)]
    struct Counting {
        calls: AtomicUsize,
        last: Mutex<Option<HostVec>>,
    }

    impl Recycle for Counting {
        fn recycle(&self, v: HostVec) {
            self.calls.fetch_add(1, Ordering::SeqCst);
            *self.last.lock().unwrap() = Some(v);
        }
    }

    /// A fresh home per test (leaked: homes are `'static`).
    fn home() -> &'static Counting {
        Box::leak(Box::default())
    }

    #[test]
    fn the_last_handle_sends_the_vector_home_once() {
        let h = home();
        let v = vec![1.0f32, 2.0, 3.0];
        let ptr = v.as_ptr();
        let a = Shared::recycled(v, h);
        let b = a.clone();
        let c = b.clone();
        assert_eq!(ptr, c.as_ptr(), "no copy");
        drop(a);
        drop(c);
        assert_eq!(h.calls.load(Ordering::SeqCst), 0, "clones remain");
        assert_eq!(&b[..], &[1.0, 2.0, 3.0]);
        drop(b);
        assert_eq!(h.calls.load(Ordering::SeqCst), 1);
        match h.last.lock().unwrap().take() {
            Some(HostVec::F32(v)) => {
                assert_eq!(v.as_ptr(), ptr, "the same storage goes home");
                assert_eq!(v, vec![1.0, 2.0, 3.0]);
            }
            other => panic!("expected the f32 vector, got {other:?}"),
        }
    }

    #[test]
    fn host_data_recycles_through_clones_and_threads() {
        let h = home();
        let d = HostData::recycled(HostVec::from(vec![5i64; 100]), h);
        assert_eq!(
            (d.dtype(), d.len(), d.get(99)),
            (DType::I64, 100, Scalar::Int(5))
        );
        let clones: Vec<HostData> = (0..4).map(|_| d.clone()).collect();
        drop(d);
        std::thread::scope(|s| {
            for c in clones {
                s.spawn(move || assert_eq!(c.get(0), Scalar::Int(5)));
            }
        });
        assert_eq!(h.calls.load(Ordering::SeqCst), 1);
        let back = h.last.lock().unwrap().take().unwrap();
        assert_eq!((back.dtype(), back.capacity()), (DType::I64, 100));
    }

    #[test]
    fn into_vec_of_a_unique_handle_moves_out_and_does_not_recycle() {
        let h = home();
        let v = vec![true, false, true];
        let ptr = v.as_ptr();
        let out = Shared::recycled(v, h).into_vec();
        assert_eq!(out, vec![true, false, true]);
        assert_eq!(out.as_ptr(), ptr, "moved, not copied");
        drop(out);
        assert_eq!(h.calls.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn into_vec_of_a_shared_handle_copies_and_the_rest_recycles() {
        let h = home();
        let a = Shared::recycled(vec![1i32, 2], h);
        let b = a.clone();
        let out = a.into_vec();
        assert_eq!(out, vec![1, 2]);
        assert_ne!(
            out.as_ptr(),
            b.as_ptr(),
            "a copy while another handle lives"
        );
        assert_eq!(h.calls.load(Ordering::SeqCst), 0);
        drop(b);
        assert_eq!(h.calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn empty_vectors_do_not_go_home() {
        let h = home();
        drop(Shared::recycled(Vec::<f64>::new(), h));
        assert_eq!(h.calls.load(Ordering::SeqCst), 0);
        // A truncated vector keeps its capacity, so it does go home.
        let mut v = vec![0.5f64; 16];
        v.clear();
        drop(Shared::recycled(v, h));
        assert_eq!(h.calls.load(Ordering::SeqCst), 1);
        assert_eq!(h.last.lock().unwrap().as_ref().unwrap().capacity(), 16);
    }
}
