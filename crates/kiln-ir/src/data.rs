//! Host-side element data: the values of inputs, scalars and evaluated results.
//!
//! Data is owned (`Vec`) or shared (`Arc`), never borrowed, so a lazy expression can never
//! outlive the data it reads. Depends on [`crate::dtype`] only.

use crate::dtype::{DType, Scalar};
use std::ops::Deref;
use std::sync::Arc;

/// An immutable, cheaply clonable buffer of `T`: either a moved-in `Vec` or a shared slice.
/// Neither conversion copies the elements.
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
}

impl<T> Deref for Shared<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Shared::Vec(v) => v,
            Shared::Slice(s) => s,
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

impl<T: Clone> Shared<T> {
    /// The elements as a `Vec`, moving them out without a copy when this is the only handle
    /// to a `Vec`-backed buffer.
    ///
    /// ```
    /// let v = kiln_ir::Shared::from(vec![1, 2, 3]).into_vec();
    /// assert_eq!(v, vec![1, 2, 3]);
    /// ```
    pub fn into_vec(self) -> Vec<T> {
        match self {
            Shared::Vec(v) => Arc::try_unwrap(v).unwrap_or_else(|v| (*v).clone()),
            Shared::Slice(s) => s.to_vec(),
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
