//! [`LazyExpr`]: everything needed for a set of outputs, as a [`Graph`] with broadcasting made
//! explicit, the run-time values bound to it and its structural key.
//!
//! This is what the compiler and every backend consume. Depends on [`crate::graph`],
//! [`crate::id`], [`crate::node`], [`crate::op`], [`crate::shape`], [`crate::trace`],
//! [`crate::value`].

use crate::error::{Error, Result};
use crate::graph::{ExprNode, Graph};
use crate::id::{Id, IdVec, NodeId, ParamId};
use crate::node::NodeRef;
use crate::op::Op;
use crate::shape::{Dim, Shape, SymShape};
use crate::trace::{trace, Bindings, Key, Trace};
use crate::value::Value;

/// A lowered expression: its [`Graph`] (node ids in topological order, operands first), the
/// data of its parameters, its bindings and its structural key.
///
/// ```
/// use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Shape};
/// let a = build::data(HostData::from(vec![1.0f32, 2.0]), Shape::from([2])).unwrap();
/// let b = build::data(HostData::from(vec![3.0f32, 4.0]), Shape::from([2])).unwrap();
/// let y = build::binary(BinaryOp::Mul, &a, &b).unwrap();
/// let e = LazyExpr::from_roots(&[&y]);
/// assert_eq!(e.params.len(), 2);
/// assert!(e.to_dot().contains("multiply"));
/// ```
#[derive(Clone, Debug)]
pub struct LazyExpr {
    /// The DAG and its outputs (in the order requested; may repeat).
    pub graph: Graph,
    /// Data of `Op::Param(i)`, by `i`.
    pub params: IdVec<ParamId, Value>,
    /// All run-time values: parameter data, scalars, seeds, dimension sizes.
    pub bindings: Bindings,
    /// The structural key (see [`crate::trace()`]).
    pub key: Key,
}

impl LazyExpr {
    /// Collects everything `roots` depend on. Nodes with a value become parameters, numbered
    /// in the order a depth-first walk from the roots first meets them, so equal structure
    /// gives equal numbering. Iterative: deep graphs do not overflow the stack.
    ///
    /// ```
    /// use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f64, 2.0]), Shape::from([2])).unwrap();
    /// let y = build::unary(UnaryOp::Exp, &a).unwrap();
    /// let e = LazyExpr::from_roots(&[&y]);
    /// assert_eq!(e.graph.nodes.len(), 2);
    /// assert_eq!(e.graph.outputs.len(), 1);
    /// ```
    pub fn from_roots(roots: &[&NodeRef]) -> LazyExpr {
        LazyExpr::from_trace(trace(roots, true))
    }

    /// Builds the DAG from a [`Trace`] recorded with its nodes.
    ///
    /// ```
    /// use kiln_ir::{build, trace, HostData, LazyExpr, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f64]), Shape::from([1])).unwrap();
    /// let y = build::unary(UnaryOp::Sin, &a).unwrap();
    /// let e = LazyExpr::from_trace(trace(&[&y], true));
    /// assert_eq!(e.graph.nodes.len(), 2);
    /// ```
    ///
    /// Front-end broadcasting is made explicit: a `BroadcastTo` that adds leading axes
    /// becomes a `Reshape` to the padded shape and a `BroadcastTo` of equal rank, and a
    /// binary operand of another shape than the result gets those nodes before it: the
    /// passes and backends see operands of the result's shape and broadcasts of equal rank
    /// only.
    ///
    /// ```
    /// use kiln_ir::{build, trace, HostData, LazyExpr, Op, Shape};
    /// let b = build::data(HostData::from(vec![1.0f32; 3]), Shape::from([3])).unwrap();
    /// let y = build::broadcast_to(&b, &Shape::from([2, 3])).unwrap();
    /// assert_eq!(y.inputs()[0].shape().dims(), &[3]); // one front-end node
    /// let e = LazyExpr::from_trace(trace(&[&y], true));
    /// let ops: Vec<(Op, Vec<usize>)> =
    ///     e.graph.nodes.values().map(|n| (n.op.clone(), n.shape.dims().to_vec())).collect();
    /// assert_eq!(ops[1..], [(Op::Reshape, vec![1, 3]), (Op::BroadcastTo, vec![2, 3])]);
    ///
    /// // A binary op broadcasts its operands itself in the front end: explicit after lowering.
    /// let a = build::data(HostData::from(vec![1.0f32; 6]), Shape::from([2, 3])).unwrap();
    /// let s = build::binary(kiln_ir::BinaryOp::Add, &a, &b).unwrap();
    /// assert_eq!(s.inputs()[1].shape().dims(), &[3]);
    /// let e = LazyExpr::from_trace(trace(&[&s], true));
    /// assert!(e.verify().is_ok());
    /// let ops: Vec<Op> = e.graph.nodes.values().map(|n| n.op.clone()).collect();
    /// assert_eq!(ops.iter().filter(|o| **o == Op::BroadcastTo).count(), 1);
    /// ```
    pub fn from_trace(t: Trace) -> LazyExpr {
        let traced = t.graph;
        let mut nodes: IdVec<NodeId, ExprNode> = IdVec::with_capacity(traced.nodes.len());
        // Traced id → lowered id (ids shift where a reshape or broadcast is inserted).
        let mut at: IdVec<NodeId, NodeId> = IdVec::with_capacity(traced.nodes.len());
        for mut n in traced.nodes.into_vec() {
            for i in n.inputs.iter_mut() {
                *i = at[*i];
            }
            match n.op {
                // The operand padded to the rank (the node itself broadcasts it).
                Op::BroadcastTo => n.inputs[0] = pad_rank(&mut nodes, n.inputs[0], n.shape.rank()),
                // Each operand padded and broadcast to the result's shape.
                Op::Binary(_) => {
                    for i in n.inputs.iter_mut() {
                        if nodes[*i].shape != n.shape {
                            let padded = pad_rank(&mut nodes, *i, n.shape.rank());
                            *i = nodes.push(ExprNode {
                                op: Op::BroadcastTo,
                                dtype: nodes[padded].dtype,
                                shape: n.shape.clone(),
                                sym: n.sym.clone(),
                                inputs: smallvec::smallvec![padded],
                                binding: None,
                            });
                        }
                    }
                }
                _ => {}
            }
            at.push(nodes.push(n));
        }
        let outputs = traced.outputs.iter().map(|&o| at[o]).collect();
        let expr = LazyExpr {
            graph: Graph { nodes, outputs },
            params: t.bindings.params.clone(),
            bindings: t.bindings,
            key: t.key,
        };
        #[cfg(debug_assertions)]
        if let Err(e) = expr.verify() {
            panic!("{e}");
        }
        expr
    }

    /// The IR verifier: the graph's ([`Graph::verify`]), and every parameter matches its
    /// data.
    ///
    /// ```
    /// use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f64, 2.0]), Shape::from([2])).unwrap();
    /// let y = build::unary(UnaryOp::Exp, &a).unwrap();
    /// let e = LazyExpr::from_roots(&[&y]);
    /// assert!(e.verify().is_ok());
    /// ```
    pub fn verify(&self) -> Result<()> {
        self.graph.verify()?;
        for (n, node) in self.graph.nodes.iter() {
            if let Op::Param(p) = node.op {
                let fail = |message: &str| Error::Verifier {
                    node: n.index(),
                    op: node.op.to_string(),
                    message: message.into(),
                };
                let d = self
                    .params
                    .get(p)
                    .ok_or_else(|| fail("missing parameter data"))?;
                if d.dtype() != node.dtype || d.len() != node.shape.numel() {
                    return Err(fail("parameter data does not match the node"));
                }
            }
        }
        Ok(())
    }

    /// The hash of the structural [`Key`]: ops with their attributes, dtypes, relative
    /// shapes and wiring, with parameters by number. Scalar values (beyond their class),
    /// random seeds, parameter data and sizes other than 0 and 1 are excluded, so a new
    /// learning rate, new input data or a new batch size gives the same hash.
    ///
    /// ```
    /// use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Scalar, Shape};
    /// let f = |v: f32, s: f64| {
    ///     let a = build::data(HostData::from(vec![v; 3]), Shape::from([3])).unwrap();
    ///     let y = build::binary_scalar(BinaryOp::Mul, &a, Scalar::Float(s), false).unwrap();
    ///     LazyExpr::from_roots(&[&y]).structural_hash()
    /// };
    /// assert_eq!(f(1.0, 2.0), f(5.0, 0.5));
    /// ```
    pub fn structural_hash(&self) -> u64 {
        self.key.hash()
    }

    /// Graphviz DOT text of the DAG: one box per node with its op, dtype and shape.
    ///
    /// ```
    /// use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f64, 2.0]), Shape::from([2])).unwrap();
    /// let y = build::unary(UnaryOp::Exp, &a).unwrap();
    /// let e = LazyExpr::from_roots(&[&y]);
    /// let dot = e.to_dot();
    /// assert!(dot.starts_with("digraph") && dot.contains("exp"));
    /// ```
    pub fn to_dot(&self) -> String {
        self.graph.to_dot()
    }
}

/// Node `x` with size-1 axes prepended up to `rank` (a new `Reshape` node), or `x` itself.
fn pad_rank(nodes: &mut IdVec<NodeId, ExprNode>, x: NodeId, rank: usize) -> NodeId {
    let node = &nodes[x];
    let lead = rank.saturating_sub(node.shape.rank());
    if lead == 0 {
        return x;
    }
    let mut shape = Shape(smallvec::smallvec![1; lead]);
    shape.0.extend_from_slice(node.shape.dims());
    let mut sym: SymShape = smallvec::smallvec![Dim::Const(1); lead];
    sym.extend_from_slice(&node.sym);
    let padded = ExprNode {
        op: Op::Reshape,
        dtype: node.dtype,
        shape,
        sym,
        inputs: smallvec::smallvec![x],
        binding: None,
    };
    nodes.push(padded)
}

#[cfg(test)]
mod tests {
    use crate::{build, BinaryOp, HostData, LazyExpr, ReduceOp, Shape, UnaryOp};

    fn graph(n: usize, op: BinaryOp) -> LazyExpr {
        let a = build::data(HostData::from(vec![0.5f32; n]), Shape::from([n])).unwrap();
        let b = build::data(HostData::from(vec![1.5f32; n]), Shape::from([n])).unwrap();
        let y = build::binary(op, &a, &b).unwrap();
        let y = build::unary(UnaryOp::Exp, &y).unwrap();
        let r = build::reduce(ReduceOp::Sum, &y, None, false).unwrap();
        LazyExpr::from_roots(&[&r, &y])
    }

    #[test]
    fn hash_distinguishes_structure_but_not_values() {
        assert_eq!(
            graph(4, BinaryOp::Add).structural_hash(),
            graph(4, BinaryOp::Add).structural_hash()
        );
        assert_ne!(
            graph(4, BinaryOp::Add).structural_hash(),
            graph(4, BinaryOp::Mul).structural_hash()
        );
        // sizes are symbols; 1 stays literal
        assert_eq!(
            graph(4, BinaryOp::Add).structural_hash(),
            graph(5, BinaryOp::Add).structural_hash()
        );
        assert_ne!(
            graph(4, BinaryOp::Add).structural_hash(),
            graph(1, BinaryOp::Add).structural_hash()
        );
    }

    #[test]
    fn shared_subexpressions_appear_once() {
        let a = build::data(HostData::from(vec![1.0f64; 2]), Shape::from([2])).unwrap();
        let e = build::unary(UnaryOp::Exp, &a).unwrap();
        let y = build::binary(BinaryOp::Add, &e, &e).unwrap();
        let g = LazyExpr::from_roots(&[&y, &e]);
        assert_eq!(g.graph.nodes.len(), 3);
        assert_eq!(g.params.len(), 1);
    }

    #[test]
    fn same_input_twice_is_one_parameter() {
        let a = build::data(HostData::from(vec![1.0f64; 2]), Shape::from([2])).unwrap();
        let y = build::binary(BinaryOp::Mul, &a, &a).unwrap();
        assert_eq!(LazyExpr::from_roots(&[&y]).params.len(), 1);
    }
}
