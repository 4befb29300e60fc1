//! [`LazyExpr`]: the graph of everything needed for a set of outputs, lowered from the
//! front-end [`Node`]s onto a petgraph DAG, with input data as numbered parameters.
//!
//! This is what the compiler and every backend consume. It provides the structural hash (the
//! graph-cache key: ops, dtypes, shapes and wiring; never values, never pointers), a DOT dump,
//! and the IR verifier. Depends on [`crate::node`], [`crate::op`], [`crate::value`].

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::node::NodeRef;
use crate::op::Op;
use crate::shape::Shape;
use crate::trace::{trace, Bindings, Dim, Key, SymShape, Trace};
use crate::value::Value;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use smallvec::SmallVec;
use std::fmt::Write as _;

/// A node of a [`LazyExpr`].
///
/// ```
/// use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Shape, UnaryOp};
/// let a = build::data(HostData::from(vec![1.0f64, 2.0]), Shape::from([2])).unwrap();
/// let y = build::unary(UnaryOp::Exp, &a).unwrap();
/// let e = LazyExpr::from_roots(&[&y]);
/// let n = &e.graph[e.outputs[0]];
/// assert_eq!(n.op.name(), "exp");
/// ```
#[derive(Clone, Debug)]
pub struct ExprNode {
    /// What it computes.
    pub op: Op,
    /// Its dtype.
    pub dtype: DType,
    /// Its shape.
    pub shape: Shape,
    /// Its relative shape (sizes other than 0 and 1 as symbols, see [`crate::trace()`]).
    pub sym: SymShape,
    /// For `Param`, `Scalar` and `Random`: the index into the matching [`Bindings`] list.
    pub binding: Option<u32>,
}

/// A lowered expression DAG. Node indices are in topological order (operands first); an edge
/// `a → b` with weight `i` says `a` is operand `i` of `b`.
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
    /// The DAG.
    pub graph: DiGraph<ExprNode, u32>,
    /// Data of `Op::Param(i)`, by `i`.
    pub params: Vec<Value>,
    /// The requested outputs, in the order requested (may repeat).
    pub outputs: Vec<NodeIndex>,
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
    /// assert_eq!(e.graph.node_count(), 2);
    /// assert_eq!(e.outputs.len(), 1);
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
    /// assert_eq!(e.graph.node_count(), 2);
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
    ///     e.graph.node_weights().map(|n| (n.op.clone(), n.shape.dims().to_vec())).collect();
    /// assert_eq!(ops[1..], [(Op::Reshape, vec![1, 3]), (Op::BroadcastTo, vec![2, 3])]);
    ///
    /// // A binary op broadcasts its operands itself in the front end: explicit after lowering.
    /// let a = build::data(HostData::from(vec![1.0f32; 6]), Shape::from([2, 3])).unwrap();
    /// let s = build::binary(kiln_ir::BinaryOp::Add, &a, &b).unwrap();
    /// assert_eq!(s.inputs()[1].shape().dims(), &[3]);
    /// let e = LazyExpr::from_trace(trace(&[&s], true));
    /// assert!(e.verify().is_ok());
    /// let ops: Vec<Op> = e.graph.node_weights().map(|n| n.op.clone()).collect();
    /// assert_eq!(ops.iter().filter(|o| **o == Op::BroadcastTo).count(), 1);
    /// ```
    pub fn from_trace(t: Trace) -> LazyExpr {
        let mut graph: DiGraph<ExprNode, u32> =
            DiGraph::with_capacity(t.nodes.len(), t.nodes.len());
        // Trace position → graph node (positions shift where a reshape is inserted).
        let mut at: Vec<NodeIndex> = Vec::with_capacity(t.nodes.len());
        for n in t.nodes {
            let mut inputs: SmallVec<[NodeIndex; 2]> =
                n.inputs.iter().map(|&i| at[i as usize]).collect();
            match n.op {
                // The operand padded to the rank (the node itself broadcasts it).
                Op::BroadcastTo => inputs[0] = pad_rank(&mut graph, inputs[0], n.shape.rank()),
                // Each operand padded and broadcast to the result's shape.
                Op::Binary(_) => {
                    for i in inputs.iter_mut() {
                        if graph[*i].shape != n.shape {
                            let padded = pad_rank(&mut graph, *i, n.shape.rank());
                            let x = &graph[padded];
                            let b = graph.add_node(ExprNode {
                                op: Op::BroadcastTo,
                                dtype: x.dtype,
                                shape: n.shape.clone(),
                                sym: n.sym.clone(),
                                binding: None,
                            });
                            graph.add_edge(padded, b, 0);
                            *i = b;
                        }
                    }
                }
                _ => {}
            }
            let idx = graph.add_node(ExprNode {
                op: n.op,
                dtype: n.dtype,
                shape: n.shape,
                sym: n.sym,
                binding: n.binding,
            });
            for (pos, &i) in inputs.iter().enumerate() {
                graph.add_edge(i, idx, pos as u32);
            }
            at.push(idx);
        }
        let outputs = t.outputs.iter().map(|&o| at[o as usize]).collect();
        let expr = LazyExpr {
            graph,
            params: t.bindings.params.clone(),
            bindings: t.bindings,
            outputs,
            key: t.key,
        };
        #[cfg(debug_assertions)]
        if let Err(e) = expr.verify() {
            panic!("{e}");
        }
        expr
    }

    /// The operands of `n`, in operand order.
    ///
    /// ```
    /// use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f64, 2.0]), Shape::from([2])).unwrap();
    /// let y = build::unary(UnaryOp::Exp, &a).unwrap();
    /// let e = LazyExpr::from_roots(&[&y]);
    /// let out = e.outputs[0];
    /// assert_eq!(e.inputs(out).len(), 1);
    /// ```
    pub fn inputs(&self, n: NodeIndex) -> Vec<NodeIndex> {
        let mut e: Vec<(u32, NodeIndex)> = self
            .graph
            .edges_directed(n, Direction::Incoming)
            .map(|e| (*e.weight(), e.source()))
            .collect();
        e.sort_unstable_by_key(|x| x.0);
        e.into_iter().map(|x| x.1).collect()
    }

    /// Node indices in topological order (operands before users).
    ///
    /// ```
    /// use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f64, 2.0]), Shape::from([2])).unwrap();
    /// let y = build::unary(UnaryOp::Exp, &a).unwrap();
    /// let e = LazyExpr::from_roots(&[&y]);
    /// let order: Vec<_> = e.topo_order().collect();
    /// assert_eq!(order.last(), Some(&e.outputs[0]));
    /// ```
    pub fn topo_order(&self) -> impl Iterator<Item = NodeIndex> {
        self.graph.node_indices()
    }

    /// The IR verifier: every node satisfies its op's typing invariants ([`Op::check`]),
    /// edges go forward in index order, and parameters match their data.
    ///
    /// ```
    /// use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f64, 2.0]), Shape::from([2])).unwrap();
    /// let y = build::unary(UnaryOp::Exp, &a).unwrap();
    /// let e = LazyExpr::from_roots(&[&y]);
    /// assert!(e.verify().is_ok());
    /// ```
    pub fn verify(&self) -> Result<()> {
        for n in self.graph.node_indices() {
            let node = &self.graph[n];
            let ins = self.inputs(n);
            let fail = |message: String| Error::Verifier {
                node: n.index(),
                op: node.op.to_string(),
                message,
            };
            if ins.iter().any(|i| i.index() >= n.index()) {
                return Err(fail("an operand comes after its user".into()));
            }
            let types: Vec<(DType, &Shape)> = ins
                .iter()
                .map(|&i| (self.graph[i].dtype, &self.graph[i].shape))
                .collect();
            node.op
                .check(&types, node.dtype, &node.shape)
                .map_err(fail)?;
            // Broadcasting is explicit below the front end (see `from_trace`).
            let explicit = match node.op {
                Op::Binary(_) => types.iter().all(|(_, s)| *s == &node.shape),
                Op::BroadcastTo => types[0].1.rank() == node.shape.rank(),
                _ => true,
            };
            if !explicit {
                return Err(fail("an implicit broadcast in a lowered graph".into()));
            }
            if let Op::Param(p) = node.op {
                let d = self
                    .params
                    .get(p as usize)
                    .ok_or_else(|| fail("missing parameter data".into()))?;
                if d.dtype() != node.dtype || d.len() != node.shape.numel() {
                    return Err(fail("parameter data does not match the node".into()));
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
        let mut s = String::from("digraph kiln {\n  node [shape=box, fontname=monospace];\n");
        for n in self.graph.node_indices() {
            let node = &self.graph[n];
            let out = if self.outputs.contains(&n) {
                ", style=bold"
            } else {
                ""
            };
            let _ = writeln!(
                s,
                "  n{} [label=\"{}\\n{} {}\"{}];",
                n.index(),
                node.op.to_string().replace('"', "'"),
                node.dtype,
                node.shape,
                out
            );
        }
        for e in self.graph.edge_references() {
            let _ = writeln!(
                s,
                "  n{} -> n{} [label=\"{}\"];",
                e.source().index(),
                e.target().index(),
                e.weight()
            );
        }
        s.push_str("}\n");
        s
    }
}

/// Node `x` with size-1 axes prepended up to `rank` (a new `Reshape` node), or `x` itself.
fn pad_rank(graph: &mut DiGraph<ExprNode, u32>, x: NodeIndex, rank: usize) -> NodeIndex {
    let node = &graph[x];
    let lead = rank.saturating_sub(node.shape.rank());
    if lead == 0 {
        return x;
    }
    let mut shape = Shape(smallvec::smallvec![1; lead]);
    shape.0.extend_from_slice(node.shape.dims());
    let mut sym: SymShape = smallvec::smallvec![Dim::Const(1); lead];
    sym.extend_from_slice(&node.sym);
    let padded = graph.add_node(ExprNode {
        op: Op::Reshape,
        dtype: node.dtype,
        shape,
        sym,
        binding: None,
    });
    graph.add_edge(x, padded, 0);
    padded
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
        assert_eq!(g.graph.node_count(), 3);
        assert_eq!(g.params.len(), 1);
    }

    #[test]
    fn same_input_twice_is_one_parameter() {
        let a = build::data(HostData::from(vec![1.0f64; 2]), Shape::from([2])).unwrap();
        let y = build::binary(BinaryOp::Mul, &a, &a).unwrap();
        assert_eq!(LazyExpr::from_roots(&[&y]).params.len(), 1);
    }
}
