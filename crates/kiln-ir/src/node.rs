//! The front-end graph: reference-counted [`Node`]s that record an op, its operands, and the
//! dtype and shape inferred when the node was built.
//!
//! A node that has been evaluated keeps its value and drops its operands, so a loop such as
//! `w = w - lr * g` does not grow a chain of dead history. A value may live on the host, on a
//! device (resident, [`DeviceData`]), or both once a resident value was downloaded. Dropping is iterative: a chain of a
//! million unevaluated nodes does not overflow the stack. Depends on [`crate::op`],
//! [`crate::data`], [`crate::value`], [`crate::shape`], [`crate::dtype`].

use crate::data::HostData;
use crate::dtype::DType;
use crate::op::Op;
use crate::shape::Shape;
use crate::value::{DeviceData, Value};
use smallvec::SmallVec;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// A shared handle to a [`Node`].
///
/// ```
/// let n: kiln_ir::NodeRef = kiln_ir::build::scalar(kiln_ir::Scalar::Int(1), kiln_ir::DType::I32);
/// assert_eq!(n.dtype(), kiln_ir::DType::I32);
/// ```
pub type NodeRef = Arc<Node>;

/// Operand lists.
///
/// ```
/// let ins: kiln_ir::Inputs = Default::default();
/// assert!(ins.is_empty());
/// ```
pub type Inputs = SmallVec<[NodeRef; 2]>;

/// One node of the lazy graph.
///
/// ```
/// use kiln_ir::{build, HostData, Shape, DType};
/// let a = build::data(HostData::from(vec![1.0f32, 2.0]), Shape::from([2])).unwrap();
/// assert_eq!(a.dtype(), DType::F32);
/// assert!(a.value().is_some());
/// ```
#[derive(Debug)]
pub struct Node {
    op: Op,
    dtype: DType,
    shape: Shape,
    inputs: Mutex<Inputs>,
    value: OnceLock<HostData>,
    resident: OnceLock<DeviceData>,
}

impl Node {
    /// Creates a node; the caller has checked the op's invariants (see [`Op::check`]).
    ///
    /// ```
    /// use kiln_ir::{Node, Op, Scalar, DType, Shape};
    /// let n = Node::new(Op::Scalar(Scalar::Float(1.0)), DType::F32, Shape::scalar(), Default::default());
    /// assert_eq!(n.shape().rank(), 0);
    /// ```
    pub fn new(op: Op, dtype: DType, shape: Shape, inputs: Inputs) -> NodeRef {
        Arc::new(Node {
            op,
            dtype,
            shape,
            inputs: Mutex::new(inputs),
            value: OnceLock::new(),
            resident: OnceLock::new(),
        })
    }

    /// A leaf holding `data` (length already checked against `shape`).
    ///
    /// ```
    /// use kiln_ir::{Node, HostData, Shape};
    /// let n = Node::with_value(HostData::from(vec![1i64]), Shape::scalar());
    /// assert!(n.value().is_some());
    /// ```
    pub fn with_value(data: HostData, shape: Shape) -> NodeRef {
        let node = Node {
            op: Op::Data,
            dtype: data.dtype(),
            shape,
            inputs: Mutex::new(SmallVec::new()),
            value: OnceLock::new(),
            resident: OnceLock::new(),
        };
        let _ = node.value.set(data);
        Arc::new(node)
    }

    /// A leaf holding a resident value (length already checked against `shape`).
    ///
    /// ```
    /// # use kiln_ir::{DType, DeviceBuffer, DeviceData, HostData, Node, Shape};
    /// # #[derive(Debug)] struct Mirror(HostData);
    /// # impl DeviceBuffer for Mirror {
    /// #     fn device(&self) -> &'static str { "mirror" }
    /// #     fn dtype(&self) -> DType { self.0.dtype() }
    /// #     fn len(&self) -> usize { self.0.len() }
    /// #     fn download(&self) -> kiln_ir::Result<HostData> { Ok(self.0.clone()) }
    /// #     fn as_any(&self) -> &dyn std::any::Any { self }
    /// # }
    /// let d = DeviceData::new(Mirror(HostData::from(vec![1.0f32, 2.0])));
    /// let n = Node::with_resident(d, Shape::from([2]));
    /// assert!(n.is_evaluated() && n.value().is_none() && n.resident().is_some());
    /// ```
    pub fn with_resident(data: DeviceData, shape: Shape) -> NodeRef {
        let node = Node {
            op: Op::Data,
            dtype: data.dtype(),
            shape,
            inputs: Mutex::new(SmallVec::new()),
            value: OnceLock::new(),
            resident: OnceLock::new(),
        };
        let _ = node.resident.set(data);
        Arc::new(node)
    }

    /// The op.
    ///
    /// ```
    /// use kiln_ir::{build, HostData, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f32, 2.0]), Shape::from([2])).unwrap();
    /// let e = build::unary(UnaryOp::Exp, &a).unwrap();
    /// assert_eq!(e.op().name(), "exp");
    /// ```
    pub fn op(&self) -> &Op {
        &self.op
    }

    /// The dtype, known without evaluating.
    ///
    /// ```
    /// use kiln_ir::{build, HostData, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f32, 2.0]), Shape::from([2])).unwrap();
    /// let e = build::unary(UnaryOp::Exp, &a).unwrap();
    /// assert_eq!(e.dtype(), kiln_ir::DType::F32);
    /// ```
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape, known without evaluating.
    ///
    /// ```
    /// use kiln_ir::{build, HostData, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f32, 2.0]), Shape::from([2])).unwrap();
    /// let e = build::unary(UnaryOp::Exp, &a).unwrap();
    /// assert_eq!(e.shape().dims(), &[2]);
    /// ```
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The value, if the node is input data or has been evaluated.
    ///
    /// ```
    /// use kiln_ir::{build, HostData, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f32, 2.0]), Shape::from([2])).unwrap();
    /// let e = build::unary(UnaryOp::Exp, &a).unwrap();
    /// assert!(a.value().is_some() && e.value().is_none());
    /// ```
    pub fn value(&self) -> Option<&HostData> {
        self.value.get()
    }

    /// The resident (device) value, if the node was evaluated on a device that keeps its
    /// results, or made with [`Node::with_resident`].
    ///
    /// See [`Node::with_resident`].
    pub fn resident(&self) -> Option<&DeviceData> {
        self.resident.get()
    }

    /// Whether the node has a value, on the host or on a device.
    ///
    /// ```
    /// use kiln_ir::{build, HostData, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f32]), Shape::from([1])).unwrap();
    /// let e = build::unary(UnaryOp::Exp, &a).unwrap();
    /// assert!(a.is_evaluated() && !e.is_evaluated());
    /// ```
    pub fn is_evaluated(&self) -> bool {
        self.value.get().is_some() || self.resident.get().is_some()
    }

    /// The value as the tracer binds it (host copy and device value, whichever exist).
    ///
    /// ```
    /// use kiln_ir::{build, HostData, Shape};
    /// let a = build::data(HostData::from(vec![1.0f32]), Shape::from([1])).unwrap();
    /// assert!(a.bound_value().unwrap().host().is_some());
    /// ```
    pub fn bound_value(&self) -> Option<Value> {
        match (self.value.get(), self.resident.get()) {
            (Some(h), Some(d)) => Some(Value::both(h.clone(), d.clone())),
            (Some(h), None) => Some(Value::from(h.clone())),
            (None, Some(d)) => Some(Value::from(d.clone())),
            (None, None) => None,
        }
    }

    /// The host value, downloading a resident value on first use (the host copy is kept
    /// beside the device value). `Ok(None)` if the node has no value.
    ///
    /// ```
    /// use kiln_ir::{build, HostData, Shape};
    /// let a = build::data(HostData::from(vec![1.0f32]), Shape::from([1])).unwrap();
    /// assert_eq!(a.host_value()?.unwrap().len(), 1);
    /// # Ok::<(), kiln_ir::Error>(())
    /// ```
    pub fn host_value(&self) -> crate::Result<Option<&HostData>> {
        if let Some(h) = self.value.get() {
            return Ok(Some(h));
        }
        let Some(d) = self.resident.get() else {
            return Ok(None);
        };
        let h = d.download()?;
        // Another thread may have stored an equal copy meanwhile: either is the value.
        let _ = self.value.set(h);
        Ok(self.value.get())
    }

    /// Moves the value out (the node is then unevaluated data-less; only its sole owner can
    /// do this, so no other handle sees the change).
    ///
    /// ```
    /// use kiln_ir::{build, HostData, Shape};
    /// let mut a = build::data(HostData::from(vec![1i32, 2]), Shape::from([2])).unwrap();
    /// let node = std::sync::Arc::get_mut(&mut a).unwrap();
    /// assert_eq!(node.take_value().unwrap().len(), 2);
    /// ```
    pub fn take_value(&mut self) -> Option<HostData> {
        self.value.take()
    }

    /// The operands (empty once the node has a value).
    ///
    /// ```
    /// use kiln_ir::{build, HostData, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f32, 2.0]), Shape::from([2])).unwrap();
    /// let e = build::unary(UnaryOp::Exp, &a).unwrap();
    /// assert_eq!(e.inputs().len(), 1);
    /// assert!(a.inputs().is_empty());
    /// ```
    pub fn inputs(&self) -> Inputs {
        self.lock_inputs().clone()
    }

    /// Runs `f` over the operands while they are held (no copy of the list: the tracer
    /// clones only the operands it has not seen yet).
    pub(crate) fn with_inputs<R>(&self, f: impl FnOnce(&[NodeRef]) -> R) -> R {
        f(&self.lock_inputs())
    }

    fn lock_inputs(&self) -> MutexGuard<'_, Inputs> {
        // A poisoned lock only means another thread panicked while cloning Arcs; the list
        // itself is always valid.
        self.inputs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores the evaluated value and releases the operands. Returns false (and changes
    /// nothing) if the node already had a value.
    ///
    /// # Panics
    /// If the data's dtype or length does not match the node (a backend bug).
    ///
    /// ```
    /// use kiln_ir::{build, HostData, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f32, 2.0]), Shape::from([2])).unwrap();
    /// let e = build::unary(UnaryOp::Exp, &a).unwrap();
    /// assert!(e.set_value(HostData::from(vec![2.7f32, 7.4])));
    /// assert!(e.inputs().is_empty()); // history released
    /// assert!(!e.set_value(HostData::from(vec![0.0f32, 0.0]))); // already set
    /// ```
    pub fn set_value(&self, data: HostData) -> bool {
        assert_eq!(data.dtype(), self.dtype, "set_value: dtype mismatch");
        assert_eq!(data.len(), self.shape.numel(), "set_value: length mismatch");
        if self.is_evaluated() || self.value.set(data).is_err() {
            return false;
        }
        let released = std::mem::take(&mut *self.lock_inputs());
        drop_iteratively(released);
        true
    }

    /// Stores an evaluated value wherever it lives (see [`Node::set_value`]): a resident
    /// value stays on its device. Returns false (and changes nothing) if the node already
    /// had a value.
    ///
    /// # Panics
    /// If the value's dtype or length does not match the node (a backend bug).
    ///
    /// ```
    /// use kiln_ir::{build, HostData, Shape, UnaryOp, Value};
    /// let a = build::data(HostData::from(vec![1.0f32]), Shape::from([1])).unwrap();
    /// let e = build::unary(UnaryOp::Exp, &a).unwrap();
    /// assert!(e.set_evaluated(Value::from(HostData::from(vec![2.7f32]))));
    /// assert!(e.value().is_some());
    /// ```
    pub fn set_evaluated(&self, value: Value) -> bool {
        assert_eq!(value.dtype(), self.dtype, "set_evaluated: dtype mismatch");
        assert_eq!(
            value.len(),
            self.shape.numel(),
            "set_evaluated: length mismatch"
        );
        if self.is_evaluated() {
            return false;
        }
        match value.device() {
            Some(d) => {
                if self.resident.set(d.clone()).is_err() {
                    return false;
                }
                if let Some(h) = value.host() {
                    let _ = self.value.set(h.clone());
                }
            }
            None => {
                let h = value.host().expect("a Value holds host or device data");
                if self.value.set(h.clone()).is_err() {
                    return false;
                }
            }
        }
        let released = std::mem::take(&mut *self.lock_inputs());
        drop_iteratively(released);
        true
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let inputs = std::mem::take(self.inputs.get_mut().unwrap_or_else(|e| e.into_inner()));
        drop_iteratively(inputs);
    }
}

/// Drops a list of node handles without recursion: nodes whose last handle goes away hand
/// their operands to the work list instead of dropping them in a nested call.
fn drop_iteratively(inputs: Inputs) {
    if inputs.is_empty() {
        return;
    }
    // Inline for the common short lists: dropping a small expression allocates nothing.
    let mut stack: SmallVec<[NodeRef; 8]> = inputs.into_iter().collect();
    while let Some(n) = stack.pop() {
        if let Some(node) = Arc::into_inner(n) {
            let mut node = node;
            let mut inner =
                std::mem::take(node.inputs.get_mut().unwrap_or_else(|e| e.into_inner()));
            stack.extend(inner.drain(..));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{build, HostData, Scalar, Shape};

    #[test]
    fn dropping_a_long_chain_does_not_overflow_the_stack() {
        let mut x = build::data(HostData::from(vec![0.0f64]), Shape::from([1])).unwrap();
        for _ in 0..200_000 {
            x = build::binary_scalar(crate::BinaryOp::Add, &x, Scalar::Float(1.0), false).unwrap();
        }
        drop(x);
    }
}
