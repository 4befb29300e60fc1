//! # kiln-ir
//!
//! The intermediate representation of kiln: element types and numpy's promotion rules
//! ([`DType`], [`Scalar`]), shapes and broadcasting ([`Shape`]), the primitive op set
//! ([`Op`]), the front-end graph of reference-counted [`Node`]s with the [`build`] functions
//! that infer dtypes and shapes as an expression is written, and the lowered [`LazyExpr`] DAG
//! (petgraph) with its structural hash, DOT dump and verifier.
//!
//! It knows nothing of buffers, devices or kernels, beyond the opaque [`DeviceBuffer`] trait
//! through which a backend's resident values sit in the graph.
//!
//! ```
//! use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Shape};
//! let a = build::data(HostData::from(vec![1.0f32, 2.0, 3.0]), Shape::from([3])).unwrap();
//! let y = build::binary(BinaryOp::Mul, &a, &a).unwrap();
//! assert_eq!(y.shape().dims(), &[3]);
//! let expr = LazyExpr::from_roots(&[&y]);
//! assert_eq!(expr.graph.nodes.len(), 2);
//! ```
//!
//! Depends on `smallvec`, `hashbrown` and `thiserror` only: no buffers, no devices.
#![warn(missing_docs)]

pub mod build;
mod data;
mod donate;
mod dtype;
mod error;
mod expr;
mod graph;
mod id;
mod node;
mod op;
pub mod random;
pub mod scalar_ops;
mod shape;
mod trace;
mod value;

pub use data::{Element, Foreign, HostData, HostPool, HostVec, Recycle, Recycled, Shared};
pub use donate::donatable;
pub use dtype::{DType, Kind, Scalar};
pub use error::{Error, Result};
pub use expr::LazyExpr;
pub use graph::{ExprNode, Graph};
pub use id::{Id, IdVec, NodeId, ParamId};
pub use node::{Inputs, Node, NodeRef};
pub use op::{ArgReduceOp, Axes, BinaryOp, Distribution, Op, ReduceOp, UnaryOp};
pub use shape::{resolve_shape, sym_text, Dim, Shape, SymShape, MAX_ELEMENTS};
pub use trace::{scalar_key_value, trace, Bindings, Key, Trace};
pub use value::{DeviceBuffer, DeviceData, Value};
