//! [`Array`]: the lazy, immutable, cheaply clonable handle users hold, with its constructors
//! from data and its evaluation methods (`eval`, `to_vec`, `item`).
//!
//! Depends on `kiln-ir` (nodes, builders) and [`crate::eval`].

use crate::eval;
use kiln_ir::{build, DType, Element, Error, HostData, NodeRef, Result, Shape, Shared};
use std::sync::Arc;

/// A lazy n-dimensional array.
///
/// Every operation records a node and returns at once with the result's shape and dtype
/// known; values are computed when needed (`eval`, `to_vec`, `item`, printing). Cloning is
/// cheap (a reference count) and clones share the evaluated value.
///
/// ```
/// use kiln::Array;
/// let a = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
/// let b = (&a * 2.0 + 1.0).sum(None, false);
/// assert_eq!(b.shape(), &[] as &[usize]);      // known before evaluation
/// assert_eq!(b.item::<f32>()?, 24.0);          // evaluates
/// # Ok::<(), kiln::Error>(())
/// ```
///
/// Input data is moved in or shared through an `Arc`, never borrowed, so an array cannot
/// outlive its data:
///
/// ```compile_fail
/// let a = {
///     let v = vec![1.0f32, 2.0];
///     kiln::Array::from_vec(&v[..], &[2]) // a borrowed slice is not accepted
/// };
/// ```
#[derive(Clone)]
pub struct Array {
    pub(crate) node: NodeRef,
}

impl Array {
    pub(crate) fn from_node(node: NodeRef) -> Array {
        Array { node }
    }

    /// The graph node behind this array (for tools that inspect or lower the graph).
    ///
    /// ```
    /// let a = kiln::Array::zeros(&[2], kiln::DType::F32);
    /// assert_eq!(a.node().shape().dims(), &[2]);
    /// ```
    pub fn node(&self) -> &NodeRef {
        &self.node
    }

    /// An array that owns `data` (moved, not copied), with `shape`.
    ///
    /// Errors if `data.len()` is not the product of `shape`.
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1i32, 2, 3, 4, 5, 6], &[2, 3])?;
    /// assert_eq!(a.shape(), &[2, 3]);
    /// assert!(kiln::Array::from_vec(vec![1i32, 2], &[3]).is_err());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Array> {
        Self::from_shared(Shared::from(data), shape).map_err(|e| e.with_op("from_vec"))
    }

    /// An array that shares `data` with the caller (no copy).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let data: Arc<[f64]> = Arc::from(vec![1.0, 2.0]);
    /// let a = kiln::Array::from_arc(data.clone(), &[2])?;
    /// assert_eq!(a.to_vec::<f64>()?, vec![1.0, 2.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn from_arc<T: Element>(data: Arc<[T]>, shape: &[usize]) -> Result<Array> {
        Self::from_shared(Shared::from(data), shape).map_err(|e| e.with_op("from_arc"))
    }

    /// An array over a [`Shared`] buffer (a moved `Vec` or a shared slice).
    ///
    /// ```
    /// let a = kiln::Array::from_shared(kiln::Shared::from(vec![true, false]), &[2])?;
    /// assert_eq!(a.dtype(), kiln::DType::Bool);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn from_shared<T: Element>(data: Shared<T>, shape: &[usize]) -> Result<Array> {
        let node =
            build::data(T::wrap(data), Shape::from(shape)).map_err(|e| e.with_op("from_shared"))?;
        Ok(Array::from_node(node))
    }

    /// A rank-0 array holding `value`, with `T`'s dtype (a *strong* scalar: unlike a bare
    /// Rust scalar in `x * 2.0`, it takes part in promotion like any array).
    ///
    /// ```
    /// let s = kiln::Array::scalar(2.5f64);
    /// assert_eq!(s.shape(), &[] as &[usize]);
    /// assert_eq!(s.item::<f64>()?, 2.5);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn scalar<T: Element>(value: T) -> Array {
        Array::from_node(build::scalar(value.to_scalar(), T::DTYPE))
    }

    /// The shape, known without evaluating.
    ///
    /// ```
    /// assert_eq!(kiln::Array::zeros(&[3, 4], kiln::DType::F32).shape(), &[3, 4]);
    /// ```
    pub fn shape(&self) -> &[usize] {
        self.node.shape().dims()
    }

    /// The dtype, known without evaluating.
    ///
    /// ```
    /// assert_eq!(kiln::Array::zeros(&[3], kiln::DType::I64).dtype(), kiln::DType::I64);
    /// ```
    pub fn dtype(&self) -> DType {
        self.node.dtype()
    }

    /// The number of dimensions.
    ///
    /// ```
    /// assert_eq!(kiln::Array::zeros(&[3, 4], kiln::DType::F32).ndim(), 2);
    /// ```
    pub fn ndim(&self) -> usize {
        self.shape().len()
    }

    /// The number of elements.
    ///
    /// ```
    /// assert_eq!(kiln::Array::zeros(&[3, 4], kiln::DType::F32).size(), 12);
    /// ```
    pub fn size(&self) -> usize {
        self.node.shape().numel()
    }

    /// Whether the value has been computed (or was given as data).
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1.0f32], &[1])?;
    /// let b = &a + 1.0;
    /// assert!(a.is_evaluated() && !b.is_evaluated());
    /// b.eval()?;
    /// assert!(b.is_evaluated());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn is_evaluated(&self) -> bool {
        self.node.is_evaluated()
    }

    /// Computes the value now (once; later calls and clones reuse it). Use
    /// [`crate::eval()`] to evaluate several arrays in one pass.
    ///
    /// ```
    /// let a = kiln::Array::arange(0.0, 4.0, 1.0, kiln::DType::F32)?;
    /// let b = a.exp();
    /// b.eval()?;
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn eval(&self) -> Result<()> {
        eval::eval(&[self])
    }

    /// The host value: evaluates, and downloads a resident value (once: the host copy is
    /// kept beside it).
    pub(crate) fn data(&self) -> Result<HostData> {
        self.eval()?;
        Ok(self.node.host_value()?.expect("evaluated").clone())
    }

    /// The elements in row-major order. `T` must be the array's dtype (cast first to convert).
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1i32, 2, 3], &[3])?;
    /// assert_eq!((&a * 2).to_vec::<i32>()?, vec![2, 4, 6]);
    /// assert!(a.to_vec::<f32>().is_err()); // dtype int32, not float32
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.check_dtype::<T>("to_vec")?;
        let d = self.data()?;
        Ok(T::unwrap(&d).expect("dtype checked").to_vec())
    }

    /// The elements in row-major order, moved out without a copy when this handle is the
    /// only one on an evaluated value the array owns (a `Vec` moved in with
    /// [`Array::from_vec`], or a result of evaluation); otherwise copied, as
    /// [`Array::to_vec`] does. `T` must be the array's dtype.
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1.5f32, 2.5], &[2])?;
    /// let b = &a * 2.0;
    /// drop(a);
    /// assert_eq!(b.into_vec::<f32>()?, vec![3.0, 5.0]); // the result's buffer, not a copy
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn into_vec<T: Element>(mut self) -> Result<Vec<T>> {
        self.check_dtype::<T>("into_vec")?;
        self.eval()?;
        if let Some(node) = Arc::get_mut(&mut self.node) {
            if let Some(data) = node.take_value() {
                let shared = T::unwrap(&data).expect("dtype checked").clone();
                drop(data); // `shared` is now the only handle on the storage
                return Ok(shared.into_vec());
            }
        }
        self.to_vec()
    }

    /// The evaluated elements as a [`Shared`] buffer: a new handle on the value, never a
    /// copy (clones of a shared buffer share its storage). `T` must be the array's dtype.
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1i64, 2, 3], &[3])?;
    /// let s = (&a + 1).to_shared::<i64>()?;
    /// assert_eq!(&s[..], &[2, 3, 4]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn to_shared<T: Element>(&self) -> Result<Shared<T>> {
        self.check_dtype::<T>("to_shared")?;
        let d = self.data()?;
        Ok(T::unwrap(&d).expect("dtype checked").clone())
    }

    /// The single element of a one-element array (any shape, e.g. `()` or `(1, 1)`).
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![3.0f64, 4.0], &[2])?;
    /// assert_eq!(a.sum(None, false).item::<f64>()?, 7.0);
    /// assert!(a.item::<f64>().is_err());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn item<T: Element>(&self) -> Result<T> {
        self.check_dtype::<T>("item")?;
        if self.size() != 1 {
            return Err(Error::NotAScalar {
                op: "item",
                shape: self.node.shape().clone(),
            });
        }
        let d = self.data()?;
        Ok(T::unwrap(&d).expect("dtype checked")[0])
    }

    /// The element at a multi-index (negative indices count from the end); evaluates.
    ///
    /// ```
    /// let a = kiln::Array::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[2, 3])?;
    /// assert_eq!(a.at::<i64>(&[1, -1])?, 6);
    /// assert!(a.at::<i64>(&[2, 0]).is_err());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn at<T: Element>(&self, index: &[isize]) -> Result<T> {
        if index.len() != self.ndim() {
            return Err(Error::InvalidArgument {
                op: "at",
                message: format!(
                    "{} indices given for an array of shape {}",
                    index.len(),
                    self.node.shape()
                ),
                hint: "give one index per dimension".into(),
            });
        }
        self.check_dtype::<T>("at")?;
        let args: Vec<crate::SliceArg> = index.iter().map(|&i| crate::SliceArg::Index(i)).collect();
        // evaluation errors keep the op that raised them; building the index names `at`
        let element = crate::named("at", || self.try_slice(&args))?;
        element.item::<T>()
    }

    fn check_dtype<T: Element>(&self, op: &'static str) -> Result<()> {
        if self.dtype() != T::DTYPE {
            return Err(Error::DTypeMismatch {
                op,
                actual: self.dtype(),
                requested: T::DTYPE,
                hint: format!(
                    "read it as {} or convert with `.cast(DType::{:?})`",
                    self.dtype().numpy_name(),
                    T::DTYPE
                ),
            });
        }
        Ok(())
    }
}

impl std::fmt::Debug for Array {
    /// Does not evaluate: shows shape, dtype and whether a value exists.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Array")
            .field("shape", self.node.shape())
            .field("dtype", &self.dtype())
            .field("evaluated", &self.is_evaluated())
            .finish()
    }
}

// Arrays are shared across threads: keep them `Send + Sync`.
const _: () = {
    const fn is_send_sync<T: Send + Sync>() {}
    is_send_sync::<Array>()
};
