//! [`Graph`]: kiln's one graph IR, a flat arena of [`ExprNode`]s in topological order
//! (operands first) with the requested outputs.
//!
//! [`crate::trace()`] records the front end's nodes into one, [`crate::LazyExpr`] lowers
//! broadcasting in it, and every compiler pass reads one and builds the next; nothing converts
//! between representations.
//! Holds the IR verifier, the use counts, the text form (`Display`) and the DOT dump.
//! Depends on [`crate::dtype`], [`crate::error`], [`crate::id`], [`crate::op`] and
//! [`crate::shape`].

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::id::{Id, IdVec, NodeId};
use crate::op::Op;
use crate::shape::{sym_text, Shape, SymShape};
use smallvec::SmallVec;
use std::fmt::{self, Write as _};

/// A node of a [`Graph`].
///
/// ```
/// use kiln_ir::{build, HostData, LazyExpr, Shape, UnaryOp};
/// let a = build::data(HostData::from(vec![1.0f64, 2.0]), Shape::from([2])).unwrap();
/// let y = build::unary(UnaryOp::Exp, &a).unwrap();
/// let e = LazyExpr::from_roots(&[&y]);
/// let n = &e.graph.nodes[e.graph.outputs[0]];
/// assert_eq!(n.op.name(), "exp");
/// assert_eq!(e.graph.nodes[n.inputs[0]].op.name(), "param");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ExprNode {
    /// What it computes.
    pub op: Op,
    /// Its dtype.
    pub dtype: DType,
    /// Its concrete shape (decisions that must hold for every binding of a graph-cache key
    /// use `sym`; concrete sizes only guide heuristics).
    pub shape: Shape,
    /// Its relative shape (sizes other than 0 and 1 as symbols, see [`crate::trace()`]).
    pub sym: SymShape,
    /// Its operands, in operand order; each precedes the node.
    pub inputs: SmallVec<[NodeId; 2]>,
    /// For `Param`, `Scalar` and `Random`: the index into the matching
    /// [`crate::Bindings`] list.
    pub binding: Option<u32>,
}

/// A DAG as a flat arena: nodes in topological order, operands first.
///
/// **Invariant: every operand's id is smaller than its user's**, so a forward walk over
/// `nodes` meets operands first and no pass needs a sort.
///
/// ```
/// use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Shape};
/// let a = build::data(HostData::from(vec![1.0f32; 3]), Shape::from([3])).unwrap();
/// let y = build::binary(BinaryOp::Mul, &a, &a).unwrap();
/// let g = LazyExpr::from_roots(&[&y]).graph;
/// assert_eq!(g.nodes.len(), 2);
/// assert!(g.verify().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Graph {
    /// Nodes in topological order.
    pub nodes: IdVec<NodeId, ExprNode>,
    /// The requested outputs, in request order (may repeat).
    pub outputs: Vec<NodeId>,
}

impl Graph {
    /// Users of each node, with multiplicity; outputs count as a use.
    ///
    /// ```
    /// # use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Shape};
    /// let a = build::data(HostData::from(vec![1.0f32; 3]), Shape::from([3])).unwrap();
    /// let y = build::binary(BinaryOp::Mul, &a, &a).unwrap();
    /// let g = LazyExpr::from_roots(&[&y]).graph;
    /// assert_eq!(g.use_counts().as_slice(), &[2, 1]);
    /// ```
    pub fn use_counts(&self) -> IdVec<NodeId, u32> {
        let mut c = IdVec::filled(0u32, self.nodes.len());
        for n in self.nodes.values() {
            for &i in &n.inputs {
                c[i] += 1;
            }
        }
        for &o in &self.outputs {
            c[o] += 1;
        }
        c
    }

    /// The IR verifier: operands precede users, relative and concrete shapes agree in rank,
    /// every node satisfies its op's typing rule ([`Op::check`]), broadcasting is explicit
    /// (a binary op's operands have its shape, a `BroadcastTo` keeps its operand's rank) and
    /// the outputs are nodes of the graph.
    ///
    /// ```
    /// # use kiln_ir::{build, HostData, LazyExpr, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f32; 3]), Shape::from([3])).unwrap();
    /// let y = build::unary(UnaryOp::Exp, &a).unwrap();
    /// let mut g = LazyExpr::from_roots(&[&y]).graph;
    /// assert!(g.verify().is_ok());
    /// g.nodes.values_mut().last().unwrap().dtype = kiln_ir::DType::I32;
    /// assert!(g.verify().is_err());
    /// ```
    pub fn verify(&self) -> Result<()> {
        for (k, n) in self.nodes.iter() {
            let fail = |message: String| Error::Verifier {
                node: k.index(),
                op: n.op.to_string(),
                message,
            };
            if n.inputs.iter().any(|&i| i >= k) {
                return Err(fail("an operand does not precede its user".into()));
            }
            if n.sym.len() != n.shape.rank() {
                return Err(fail("relative and concrete shapes differ in rank".into()));
            }
            let ins: SmallVec<[(DType, &Shape); 3]> = n
                .inputs
                .iter()
                .map(|&i| (self.nodes[i].dtype, &self.nodes[i].shape))
                .collect();
            n.op.check(&ins, n.dtype, &n.shape).map_err(fail)?;
            let explicit = match n.op {
                Op::Binary(_) => ins.iter().all(|(_, s)| *s == &n.shape),
                Op::BroadcastTo => ins[0].1.rank() == n.shape.rank(),
                _ => true,
            };
            if !explicit {
                return Err(fail("an implicit broadcast in a lowered graph".into()));
            }
        }
        if let Some(o) = self.outputs.iter().find(|&&o| !self.nodes.contains(o)) {
            return Err(Error::Verifier {
                node: o.index(),
                op: "outputs".into(),
                message: "an output is not a node of the graph".into(),
            });
        }
        Ok(())
    }

    /// Graphviz DOT text: one box per node with its op, dtype and shape, outputs in bold,
    /// each edge labelled with its operand position.
    ///
    /// ```
    /// # use kiln_ir::{build, HostData, LazyExpr, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f32; 3]), Shape::from([3])).unwrap();
    /// let y = build::unary(UnaryOp::Exp, &a).unwrap();
    /// let dot = LazyExpr::from_roots(&[&y]).graph.to_dot();
    /// assert!(dot.starts_with("digraph") && dot.contains("exp"));
    /// ```
    pub fn to_dot(&self) -> String {
        self.to_dot_clustered::<NodeId>(&IdVec::new())
    }

    /// [`Graph::to_dot`] with node `n` drawn inside cluster `cluster[n]` where that is given
    /// (the compiler passes the kernel each node was fused into).
    ///
    /// ```
    /// # use kiln_ir::{build, HostData, Id, IdVec, LazyExpr, NodeId, Shape, UnaryOp};
    /// kiln_ir::define_id! {
    ///     /// A kernel.
    ///     struct KernelId = "k";
    /// }
    /// let a = build::data(HostData::from(vec![1.0f32; 3]), Shape::from([3])).unwrap();
    /// let y = build::unary(UnaryOp::Exp, &a).unwrap();
    /// let g = LazyExpr::from_roots(&[&y]).graph;
    /// let cluster: IdVec<NodeId, Option<KernelId>> = IdVec::from_vec(vec![None, Some(KernelId::new(2))]);
    /// assert!(g.to_dot_clustered(&cluster).contains("cluster_2"));
    /// ```
    pub fn to_dot_clustered<C: Id>(&self, cluster: &IdVec<NodeId, Option<C>>) -> String {
        let mut s = String::from("digraph kiln {\n  node [shape=box, fontname=monospace];\n");
        let mut is_output = IdVec::filled(false, self.nodes.len());
        for &o in &self.outputs {
            is_output[o] = true;
        }
        let label = |i: NodeId| {
            let n = &self.nodes[i];
            let out = if is_output[i] { ", style=bold" } else { "" };
            format!(
                "n{} [label=\"{}\\n{} {}\"{out}];",
                i.index(),
                n.op.to_string().replace('"', "'"),
                n.dtype,
                n.shape
            )
        };
        let cluster_of = |i: NodeId| cluster.get(i).copied().flatten();
        // the nodes of each cluster, in node order (one pass: a plan may have many kernels)
        let mut members: Vec<Vec<NodeId>> = Vec::new();
        for i in self.nodes.keys() {
            if let Some(k) = cluster_of(i) {
                if members.len() <= k.index() {
                    members.resize_with(k.index() + 1, Vec::new);
                }
                members[k.index()].push(i);
            }
        }
        for (k, nodes) in members.iter().enumerate().filter(|(_, m)| !m.is_empty()) {
            let _ = writeln!(
                s,
                "  subgraph cluster_{k} {{\n    label=\"kernel {k}\"; style=rounded;"
            );
            for &i in nodes {
                let _ = writeln!(s, "    {}", label(i));
            }
            s.push_str("  }\n");
        }
        for i in self.nodes.keys().filter(|&i| cluster_of(i).is_none()) {
            let _ = writeln!(s, "  {}", label(i));
        }
        for (i, n) in self.nodes.iter() {
            for (p, &j) in n.inputs.iter().enumerate() {
                let _ = writeln!(s, "  n{} -> n{} [label=\"{p}\"];", j.index(), i.index());
            }
        }
        s.push_str("}\n");
        s
    }
}

/// The text form: one node per line (`%i = op operands : dtype relative-shape (sizes)`), then
/// the outputs; stable across runs (the compiler's file tests compare it).
///
/// ```
/// use kiln_ir::{build, HostData, LazyExpr, Shape, UnaryOp};
/// let a = build::data(HostData::from(vec![1.0f32; 6]), Shape::from([2, 3])).unwrap();
/// let y = build::unary(UnaryOp::Exp, &a).unwrap();
/// let g = LazyExpr::from_roots(&[&y]).graph;
/// assert_eq!(
///     g.to_string(),
///     "%0 = param 0 : float32 [d0, d1] (2x3)\n%1 = exp %0 : float32 [d0, d1] (2x3)\noutputs %1\n"
/// );
/// ```
impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, n) in self.nodes.iter() {
            write!(f, "{i} = {}", n.op)?;
            let uses_binding = matches!(n.op, Op::Random { .. });
            if let (true, Some(b)) = (uses_binding, n.binding) {
                write!(f, " seed={b}")?;
            }
            for x in &n.inputs {
                write!(f, " {x}")?;
            }
            let sizes: Vec<String> = n.shape.dims().iter().map(ToString::to_string).collect();
            writeln!(
                f,
                " : {} {} ({})",
                n.dtype,
                sym_text(&n.sym),
                if sizes.is_empty() {
                    "scalar".to_string()
                } else {
                    sizes.join("x")
                }
            )?;
        }
        let outs: Vec<String> = self.outputs.iter().map(ToString::to_string).collect();
        writeln!(f, "outputs {}", outs.join(" "))
    }
}
