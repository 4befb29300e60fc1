//! Values that live on a device: the opaque [`DeviceBuffer`] trait a backend implements for
//! the storage it keeps between evaluations, the shared handle [`DeviceData`], and [`Value`],
//! a node's data wherever it lives (host memory, a device, or both).
//!
//! kiln-ir never looks inside a device buffer: only the backend that made it does (through
//! [`DeviceBuffer::as_any`]). Depends on [`crate::data`], [`crate::dtype`], [`crate::error`].

use crate::data::HostData;
use crate::dtype::DType;
use crate::error::Result;
use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

/// Storage a backend keeps on its device after an evaluation (a resident value).
///
/// Its contents never change while any handle on it exists; the backend takes the storage
/// back when the last [`DeviceData`] handle drops.
///
/// ```
/// use kiln_ir::{DType, DeviceBuffer, DeviceData, HostData, Result};
/// // A "device" that keeps a host copy: what a backend implements.
/// #[derive(Debug)]
/// struct Mirror(HostData);
/// impl DeviceBuffer for Mirror {
///     fn device(&self) -> &'static str { "mirror" }
///     fn dtype(&self) -> DType { self.0.dtype() }
///     fn len(&self) -> usize { self.0.len() }
///     fn download(&self) -> Result<HostData> { Ok(self.0.clone()) }
///     fn as_any(&self) -> &dyn std::any::Any { self }
/// }
/// let d = DeviceData::new(Mirror(HostData::from(vec![1.0f32, 2.0])));
/// assert_eq!((d.device(), d.len(), d.bytes()), ("mirror", 2, 8));
/// ```
pub trait DeviceBuffer: Any + Send + Sync + Debug {
    /// The backend's name (`"wgpu"`).
    fn device(&self) -> &'static str;
    /// The element type.
    fn dtype(&self) -> DType;
    /// The number of elements.
    fn len(&self) -> usize;
    /// Whether the buffer holds no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A host copy of the elements (waits for the work that computes them; reports the
    /// value errors that work raised, as the host evaluation would).
    fn download(&self) -> Result<HostData>;
    /// The concrete type, for the backend that made it.
    fn as_any(&self) -> &dyn Any;
}

/// A shared handle on a [`DeviceBuffer`].
///
/// ```
/// # use kiln_ir::{DType, DeviceBuffer, DeviceData, HostData, Result};
/// # #[derive(Debug)] struct Mirror(HostData);
/// # impl DeviceBuffer for Mirror {
/// #     fn device(&self) -> &'static str { "mirror" }
/// #     fn dtype(&self) -> DType { self.0.dtype() }
/// #     fn len(&self) -> usize { self.0.len() }
/// #     fn download(&self) -> Result<HostData> { Ok(self.0.clone()) }
/// #     fn as_any(&self) -> &dyn std::any::Any { self }
/// # }
/// let d = DeviceData::new(Mirror(HostData::from(vec![3i32])));
/// let e = d.clone(); // the same storage
/// assert!(d.same(&e));
/// assert_eq!(e.download()?.len(), 1);
/// # Ok::<(), kiln_ir::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct DeviceData(Arc<dyn DeviceBuffer>);

impl DeviceData {
    /// Wraps a backend's buffer.
    ///
    /// See [`DeviceData`].
    pub fn new(buffer: impl DeviceBuffer) -> DeviceData {
        DeviceData(Arc::new(buffer))
    }

    /// The buffer.
    ///
    /// See [`DeviceBuffer::as_any`] for the backend's downcast.
    pub fn buffer(&self) -> &dyn DeviceBuffer {
        &*self.0
    }

    /// The backend's name.
    ///
    /// See [`DeviceData`].
    pub fn device(&self) -> &'static str {
        self.0.device()
    }

    /// The element type.
    ///
    /// See [`DeviceData`].
    pub fn dtype(&self) -> DType {
        self.0.dtype()
    }

    /// The number of elements.
    ///
    /// See [`DeviceData`].
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds no elements.
    ///
    /// See [`DeviceData`].
    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }

    /// Bytes of the elements (as on the host).
    ///
    /// See [`DeviceData`].
    pub fn bytes(&self) -> usize {
        self.len() * self.dtype().size_bytes()
    }

    /// A host copy (see [`DeviceBuffer::download`]).
    ///
    /// See [`DeviceData`].
    pub fn download(&self) -> Result<HostData> {
        self.0.download()
    }

    /// Whether two handles share one storage.
    ///
    /// See [`DeviceData`].
    pub fn same(&self, other: &DeviceData) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The number of handles on this storage (1: only this one).
    ///
    /// ```
    /// # use kiln_ir::{DType, DeviceBuffer, DeviceData, HostData, Result};
    /// # #[derive(Debug)] struct Mirror(HostData);
    /// # impl DeviceBuffer for Mirror {
    /// #     fn device(&self) -> &'static str { "mirror" }
    /// #     fn dtype(&self) -> DType { self.0.dtype() }
    /// #     fn len(&self) -> usize { self.0.len() }
    /// #     fn download(&self) -> Result<HostData> { Ok(self.0.clone()) }
    /// #     fn as_any(&self) -> &dyn std::any::Any { self }
    /// # }
    /// let d = DeviceData::new(Mirror(HostData::from(vec![3i32])));
    /// assert_eq!(d.handles(), 1);
    /// ```
    pub fn handles(&self) -> usize {
        Arc::strong_count(&self.0)
    }
}

/// A node's data: on the host, on a device, or both (a resident value whose host copy was
/// downloaded). Always at least one.
///
/// ```
/// use kiln_ir::{HostData, Value};
/// let v = Value::from(HostData::from(vec![1.0f32, 2.0]));
/// assert!(v.host().is_some() && v.device().is_none());
/// assert_eq!(v.to_host()?.len(), 2);
/// # Ok::<(), kiln_ir::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Value {
    host: Option<HostData>,
    device: Option<DeviceData>,
}

impl From<HostData> for Value {
    fn from(h: HostData) -> Value {
        Value {
            host: Some(h),
            device: None,
        }
    }
}

impl From<DeviceData> for Value {
    fn from(d: DeviceData) -> Value {
        Value {
            host: None,
            device: Some(d),
        }
    }
}

impl Value {
    /// A resident value with its host copy (same dtype and length).
    ///
    /// # Panics
    /// If the two differ in dtype or length (a caller bug).
    ///
    /// ```
    /// use kiln_ir::{HostData, Value};
    /// let v = Value::from(HostData::from(vec![1i32]));
    /// assert!(v.device().is_none());
    /// ```
    pub fn both(host: HostData, device: DeviceData) -> Value {
        assert!(
            host.dtype() == device.dtype() && host.len() == device.len(),
            "Value::both: the host copy does not match the device value"
        );
        Value {
            host: Some(host),
            device: Some(device),
        }
    }

    /// The host data, if there is a host copy.
    ///
    /// See [`Value`].
    pub fn host(&self) -> Option<&HostData> {
        self.host.as_ref()
    }

    /// The device data, if the value is resident on a device.
    ///
    /// See [`Value`].
    pub fn device(&self) -> Option<&DeviceData> {
        self.device.as_ref()
    }

    /// The element type.
    ///
    /// See [`Value`].
    pub fn dtype(&self) -> DType {
        match (&self.host, &self.device) {
            (Some(h), _) => h.dtype(),
            (None, Some(d)) => d.dtype(),
            (None, None) => unreachable!("a Value holds host or device data"),
        }
    }

    /// The number of elements.
    ///
    /// See [`Value`].
    pub fn len(&self) -> usize {
        match (&self.host, &self.device) {
            (Some(h), _) => h.len(),
            (None, Some(d)) => d.len(),
            (None, None) => unreachable!("a Value holds host or device data"),
        }
    }

    /// Whether it holds no elements.
    ///
    /// See [`Value`].
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The host data: the host copy, or a download of the device value.
    ///
    /// See [`Value`].
    pub fn to_host(&self) -> Result<HostData> {
        match (&self.host, &self.device) {
            (Some(h), _) => Ok(h.clone()),
            (None, Some(d)) => d.download(),
            (None, None) => unreachable!("a Value holds host or device data"),
        }
    }
}
