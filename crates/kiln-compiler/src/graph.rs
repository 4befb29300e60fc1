//! The compiler's working graph: a flat, topologically ordered node list (operands first)
//! that passes rewrite by building a new list. Converted from a [`LazyExpr`]; verified with
//! the IR's own typing rules ([`kiln_ir::Op::check`]) after every pass in debug builds.
//!
//! Depends on `kiln-ir`.

use kiln_ir::{DType, Error, LazyExpr, Op, Result, Shape, SymShape};
use smallvec::SmallVec;

/// A node of the working graph.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GNode {
    /// The op.
    pub op: Op,
    /// Its dtype.
    pub dtype: DType,
    /// Its concrete shape at compile time (decisions that must hold for every binding use
    /// `sym`; concrete sizes only guide heuristics).
    pub shape: Shape,
    /// Its relative shape.
    pub sym: SymShape,
    /// Operand indices (all smaller than this node's index).
    pub inputs: SmallVec<[u32; 2]>,
    /// Binding index of `Param`, `Scalar`, `Random` nodes.
    pub binding: Option<u32>,
}

/// A flat DAG with outputs.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Graph {
    /// Nodes in topological order.
    pub nodes: Vec<GNode>,
    /// Output node indices, in request order (may repeat).
    pub outputs: Vec<u32>,
}

impl Graph {
    /// Converts a lowered expression.
    ///
    /// ```
    /// use kiln_ir::{build, HostData, LazyExpr, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f32; 3]), Shape::from([3])).unwrap();
    /// let y = build::unary(UnaryOp::Exp, &a).unwrap();
    /// let g = kiln_compiler::Graph::from_expr(&LazyExpr::from_roots(&[&y]));
    /// assert_eq!(g.nodes.len(), 2);
    /// ```
    pub fn from_expr(e: &LazyExpr) -> Graph {
        let nodes = e
            .graph
            .node_indices()
            .map(|n| {
                let x = &e.graph[n];
                GNode {
                    op: x.op.clone(),
                    dtype: x.dtype,
                    shape: x.shape.clone(),
                    sym: x.sym.clone(),
                    inputs: e.inputs(n).into_iter().map(|i| i.index() as u32).collect(),
                    binding: x.binding,
                }
            })
            .collect();
        Graph {
            nodes,
            outputs: e.outputs.iter().map(|o| o.index() as u32).collect(),
        }
    }

    /// Users of each node (by index), with multiplicity; outputs count as a use.
    ///
    /// ```
    /// # use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Shape};
    /// let a = build::data(HostData::from(vec![1.0f32; 3]), Shape::from([3])).unwrap();
    /// let y = build::binary(BinaryOp::Mul, &a, &a).unwrap();
    /// let g = kiln_compiler::Graph::from_expr(&LazyExpr::from_roots(&[&y]));
    /// assert_eq!(g.use_counts(), vec![2, 1]);
    /// ```
    pub fn use_counts(&self) -> Vec<u32> {
        let mut c = vec![0u32; self.nodes.len()];
        for n in &self.nodes {
            for &i in &n.inputs {
                c[i as usize] += 1;
            }
        }
        for &o in &self.outputs {
            c[o as usize] += 1;
        }
        c
    }

    /// The verifier: operands precede users and every node satisfies its op's typing rule.
    ///
    /// ```
    /// # use kiln_ir::{build, HostData, LazyExpr, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f32; 3]), Shape::from([3])).unwrap();
    /// let y = build::unary(UnaryOp::Exp, &a).unwrap();
    /// assert!(kiln_compiler::Graph::from_expr(&LazyExpr::from_roots(&[&y])).verify().is_ok());
    /// ```
    pub fn verify(&self) -> Result<()> {
        for (k, n) in self.nodes.iter().enumerate() {
            let fail = |message: String| Error::Verifier {
                node: k,
                op: n.op.to_string(),
                message,
            };
            if n.inputs.iter().any(|&i| i as usize >= k) {
                return Err(fail("an operand does not precede its user".into()));
            }
            if n.sym.len() != n.shape.rank() {
                return Err(fail("relative and concrete shapes differ in rank".into()));
            }
            let ins: Vec<(DType, &Shape)> = n
                .inputs
                .iter()
                .map(|&i| (self.nodes[i as usize].dtype, &self.nodes[i as usize].shape))
                .collect();
            n.op.check(&ins, n.dtype, &n.shape).map_err(fail)?;
        }
        if self.outputs.iter().any(|&o| o as usize >= self.nodes.len()) {
            return Err(Error::Verifier {
                node: 0,
                op: "outputs".into(),
                message: "output out of range".into(),
            });
        }
        Ok(())
    }

    /// Graphviz DOT text; `cluster[i]`, when given, draws node `i` inside cluster `k`
    /// (the kernel it was fused into).
    ///
    /// ```
    /// # use kiln_ir::{build, HostData, LazyExpr, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f32; 3]), Shape::from([3])).unwrap();
    /// let y = build::unary(UnaryOp::Exp, &a).unwrap();
    /// let g = kiln_compiler::Graph::from_expr(&LazyExpr::from_roots(&[&y]));
    /// assert!(g.to_dot(&[None, Some(0)]).contains("cluster_0"));
    /// ```
    pub fn to_dot(&self, cluster: &[Option<usize>]) -> String {
        use std::fmt::Write as _;
        let mut s = String::from("digraph kiln {\n  node [shape=box, fontname=monospace];\n");
        let mut is_output = vec![false; self.nodes.len()];
        for &o in &self.outputs {
            is_output[o as usize] = true;
        }
        let label = |i: usize| {
            let n = &self.nodes[i];
            let out = if is_output[i] { ", style=bold" } else { "" };
            format!(
                "n{i} [label=\"{}\\n{} {}\"{out}];",
                n.op.to_string().replace('"', "'"),
                n.dtype,
                n.shape
            )
        };
        // the nodes of each cluster, in node order (one pass: a plan may have many kernels)
        let mut members: Vec<Vec<usize>> = Vec::new();
        for (i, c) in cluster.iter().enumerate() {
            if let Some(k) = *c {
                if members.len() <= k {
                    members.resize_with(k + 1, Vec::new);
                }
                members[k].push(i);
            }
        }
        for (k, nodes) in members.iter().enumerate() {
            let _ = writeln!(
                s,
                "  subgraph cluster_{k} {{\n    label=\"kernel {k}\"; style=rounded;"
            );
            for &i in nodes {
                let _ = writeln!(s, "    {}", label(i));
            }
            s.push_str("  }\n");
        }
        for i in 0..self.nodes.len() {
            if cluster.get(i).copied().flatten().is_none() {
                let _ = writeln!(s, "  {}", label(i));
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            for (p, &j) in n.inputs.iter().enumerate() {
                let _ = writeln!(s, "  n{j} -> n{i} [label=\"{p}\"];");
            }
        }
        s.push_str("}\n");
        s
    }
}
