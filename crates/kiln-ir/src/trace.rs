//! The one traversal from front-end [`Node`]s to everything a graph needs to be compiled or
//! re-run: the structural **key** (graph-cache key), the **bindings** (parameter data, scalar
//! values, random seeds and concrete dimension sizes) and, when asked, the nodes as a
//! [`crate::Graph`], which becomes a [`crate::LazyExpr`].
//!
//! Shapes are *relative*: each distinct dimension size other than 0 and 1 becomes a symbol
//! numbered in order of first appearance, so `[12, 64]` and `[7, 64]` give the same key, while
//! 0 and 1 (which change broadcasting and emptiness) stay literal. Scalar values enter the key
//! only as a class (exactly `0`, `-0.0`, `1`, or other), which lets the compiler simplify
//! `x * 1` without recompiling for every learning rate. Nothing else about values, and
//! nothing about pointers, enters the key. Depends on [`crate::graph`], [`crate::id`],
//! [`crate::node`], [`crate::op`], [`crate::shape`], [`crate::value`].

use crate::dtype::{DType, Scalar};
use crate::graph::{ExprNode, Graph};
use crate::id::{IdVec, NodeId, ParamId};
use crate::node::{Node, NodeRef};
use crate::op::Op;
use crate::shape::{Dim, SymShape};
use crate::value::Value;
use smallvec::SmallVec;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// The graph-cache key: the structure of a traced graph as a token string, with its hash
/// precomputed. Equal structure gives equal keys, in any thread.
///
/// ```
/// use kiln_ir::{build, trace, BinaryOp, HostData, Scalar, Shape};
/// let key = |n: usize, s: f64| {
///     let a = build::data(HostData::from(vec![1.0f32; n * 4]), Shape::from([n, 4])).unwrap();
///     let y = build::binary_scalar(BinaryOp::Mul, &a, Scalar::Float(s), false).unwrap();
///     trace(&[&y], false).key
/// };
/// assert_eq!(key(12, 0.5), key(7, 2.5));   // new batch size, new scalar: same key
/// assert_ne!(key(12, 0.5), key(1, 0.5));   // a size-1 dimension changes broadcasting
/// ```
#[derive(Clone, Debug)]
pub struct Key {
    hash: u64,
    tokens: Vec<u64>,
    layers: [u64; 4],
}

impl Key {
    /// The precomputed 64-bit hash (FNV-1a over the tokens; stable across runs).
    ///
    /// ```
    /// # use kiln_ir::{build, trace, HostData, Shape};
    /// let a = build::data(HostData::from(vec![1i32]), Shape::from([1])).unwrap();
    /// assert_eq!(trace(&[&a], false).key.hash(), trace(&[&a], false).key.hash());
    /// ```
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// The token string.
    ///
    /// ```
    /// # use kiln_ir::{build, trace, HostData, Shape};
    /// let a = build::data(HostData::from(vec![1i32]), Shape::from([1])).unwrap();
    /// assert!(!trace(&[&a], false).key.tokens().is_empty());
    /// ```
    pub fn tokens(&self) -> &[u64] {
        &self.tokens
    }

    /// Coarser fingerprints, each including the previous: `[ops and wiring, + scalar
    /// classes, + dtypes, + ranks]`. The full key adds the relative sizes. Used to explain a
    /// cache miss, so computed only by a trace that records its nodes (the compile path); a
    /// key-only trace (the cache-hit path) leaves them zero.
    ///
    /// ```
    /// # use kiln_ir::{build, trace, HostData, Shape};
    /// let a = build::data(HostData::from(vec![1i32; 4]), Shape::from([4])).unwrap();
    /// let b = build::data(HostData::from(vec![1i32; 5]), Shape::from([5, 1])).unwrap();
    /// let (ka, kb) = (trace(&[&a], true).key, trace(&[&b], true).key);
    /// assert_eq!(ka.layers()[2], kb.layers()[2]); // same ops and dtypes
    /// assert_ne!(ka.layers()[3], kb.layers()[3]); // different ranks
    /// ```
    pub fn layers(&self) -> [u64; 4] {
        self.layers
    }
}

/// Keys are equal when their token strings are (the layers are derived data).
impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.hash == other.hash && self.tokens == other.tokens
    }
}

impl Eq for Key {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// The values a traced graph runs with: everything that is *not* in its [`Key`].
///
/// ```
/// use kiln_ir::{build, trace, BinaryOp, HostData, Scalar, Shape};
/// let a = build::data(HostData::from(vec![1.0f32; 6]), Shape::from([2, 3])).unwrap();
/// let y = build::binary_scalar(BinaryOp::Add, &a, Scalar::Float(0.5), false).unwrap();
/// let b = trace(&[&y], false).bindings;
/// assert_eq!(b.params.len(), 1);
/// assert_eq!(b.scalars, vec![Scalar::Float(0.5)]);
/// assert_eq!(b.dims, vec![2, 3]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Bindings {
    /// Input data, by parameter number.
    pub params: IdVec<ParamId, Value>,
    /// Scalar values, by scalar number (already converted to each node's dtype).
    pub scalars: Vec<Scalar>,
    /// Random seeds, by random-node number.
    pub seeds: Vec<u64>,
    /// Dimension sizes, by symbol.
    pub dims: Vec<usize>,
}

/// What [`trace`] returns.
#[derive(Clone, Debug)]
pub struct Trace {
    /// The structural key.
    pub key: Key,
    /// The run-time values.
    pub bindings: Bindings,
    /// The nodes in post-order (operands first), if requested, and the roots (also when
    /// the nodes were not requested).
    pub graph: Graph,
}

/// Scalar value classes that enter the key (see the module docs).
fn scalar_class(s: Scalar) -> u64 {
    match s {
        Scalar::Float(x) if x == 0.0 && x.is_sign_negative() => 1,
        Scalar::Float(0.0) => 2,
        Scalar::Float(1.0) => 3,
        Scalar::Int(0) | Scalar::Bool(false) => 2,
        Scalar::Int(1) | Scalar::Bool(true) => 3,
        _ => 0,
    }
}

/// The class of a scalar value as the key sees it: `Some(v)` for the values the compiler may
/// simplify on (`-0.0`, `0`, `1`), `None` for any other value.
///
/// ```
/// use kiln_ir::{Scalar, scalar_key_value};
/// assert_eq!(scalar_key_value(Scalar::Float(1.0)), Some(1.0));
/// assert_eq!(scalar_key_value(Scalar::Float(0.3)), None);
/// ```
pub fn scalar_key_value(s: Scalar) -> Option<f64> {
    match scalar_class(s) {
        1 => Some(-0.0),
        2 => Some(0.0),
        3 => Some(1.0),
        _ => None,
    }
}

fn dtype_code(d: DType) -> u64 {
    d as u64
}

/// Appends the op's structural tokens: its kind and its attributes, never its values.
///
/// One exhaustive match with every field named (no `..`, no catch-all arm): a new op, or a
/// new attribute of an op, does not compile until it is given its tokens here, so two
/// graphs differing in it can never share a plan (`crates/kiln-ir/tests/cache_key.rs`).
/// The fields bound to `_` are values, which the bindings carry: a parameter's index, a
/// scalar's value (its class is added by the caller), a random stream's seed.
fn op_tokens(op: &Op, t: &mut Vec<u64>) {
    let axes = |t: &mut Vec<u64>, a: &[usize]| {
        t.push(a.len() as u64);
        t.extend(a.iter().map(|&x| x as u64));
    };
    match op {
        Op::Param(_) => t.push(1),
        Op::Data => t.push(2),
        Op::Scalar(_) => t.push(3),
        Op::Iota { axis } => t.extend([4, *axis as u64]),
        Op::Random { dist, seed: _ } => t.extend([5, *dist as u64]),
        Op::Unary(u) => t.extend([6, *u as u64]),
        Op::Binary(b) => t.extend([7, *b as u64]),
        Op::Where => t.push(8),
        Op::Cast => t.push(9),
        Op::Reshape => t.push(10),
        Op::Permute(p) => {
            t.push(11);
            axes(t, p);
        }
        Op::BroadcastTo => t.push(12),
        Op::Slice { start, step } => {
            t.extend([13, start.len() as u64, step.len() as u64]);
            t.extend(start.iter().map(|&a| a as u64));
            t.extend(step.iter().map(|&a| a as u64));
        }
        Op::Concat { axis } => t.extend([14, *axis as u64]),
        Op::Reduce { op, axes: a } => {
            t.extend([15, *op as u64]);
            axes(t, a);
        }
        Op::ArgReduce { op, axis } => t.extend([16, *op as u64, *axis as u64]),
        Op::MatMul => t.push(17),
        Op::Take { axis } => t.extend([18, *axis as u64]),
        Op::TopK { k, indices } => t.extend([19, *k as u64, u64::from(*indices)]),
        Op::ScatterAdd { axis } => t.extend([20, *axis as u64]),
        Op::StopGradient => t.push(21),
    }
}

fn fnv_step(h: u64, t: u64) -> u64 {
    let h = (h ^ t).wrapping_mul(0x0000_0100_0000_01b3);
    h ^ (h >> 29)
}

/// The key's hash: four interleaved FNV-style lanes over the tokens (each lane a serial
/// chain of multiplies, so four run at once: a 7-node graph's ~60 tokens hashed in a
/// quarter of the time of one chain), then folded with the length.
fn fnv(tokens: &[u64]) -> u64 {
    let mut lanes = [
        0xcbf2_9ce4_8422_2325u64,
        0x8422_2325_cbf2_9ce4,
        0x9e37_79b9_7f4a_7c15,
        0x7f4a_7c15_9e37_79b9,
    ];
    let mut chunks = tokens.chunks_exact(4);
    for c in &mut chunks {
        for (h, &t) in lanes.iter_mut().zip(c) {
            *h = fnv_step(*h, t);
        }
    }
    for (h, &t) in lanes.iter_mut().zip(chunks.remainder()) {
        *h = fnv_step(*h, t);
    }
    lanes
        .iter()
        .fold(fnv_step(0, tokens.len() as u64), |h, &l| fnv_step(h, l))
}

/// Running hashes of the key's layers (see [`Key::layers`]).
struct Layers([u64; 4], bool);

impl Layers {
    /// Feeds `t` to layer `level` and every finer one (when enabled).
    fn feed(&mut self, level: usize, t: u64) {
        if !self.1 {
            return;
        }
        for h in &mut self.0[level..] {
            *h = fnv_step(*h, t);
        }
    }
}

/// Traces everything `roots` depend on, depth-first from the roots in order, operands before
/// users. Nodes with a value become parameters, numbered in first-visit order. With
/// `with_nodes`, the node list is recorded too (for compiling); the key and bindings are the
/// same either way. Iterative: deep graphs do not overflow the stack.
///
/// ```
/// use kiln_ir::{build, trace, BinaryOp, HostData, Id, NodeId, Shape};
/// let a = build::data(HostData::from(vec![1.0f32, 2.0]), Shape::from([2])).unwrap();
/// let y = build::binary(BinaryOp::Mul, &a, &a).unwrap();
/// let t = trace(&[&y, &a], true);
/// assert_eq!(t.graph.nodes.len(), 2);
/// assert_eq!(t.graph.outputs, [NodeId::new(1), NodeId::new(0)]);
/// ```
pub fn trace(roots: &[&NodeRef], with_nodes: bool) -> Trace {
    // Initial capacities stay below 1 KiB: glibc consolidates its fast bins on every larger
    // request, which cost more than the trace itself for small graphs (both grow as needed).
    let mut tokens: Vec<u64> = Vec::with_capacity(96);
    let mut bindings = Bindings::default();
    let mut graph = Graph::default();
    let mut seen: hashbrown::HashMap<*const Node, NodeId> = hashbrown::HashMap::with_capacity(16);
    let mut count: u32 = 0;
    let mut sym_values: Vec<usize> = Vec::new();
    let mut layers = Layers([0xcbf2_9ce4_8422_2325; 4], with_nodes);
    // `Enter(node)` expands a node; `Exit(node, operands)` emits it once its operands are
    // emitted. Operands are remembered by address only: as map keys, never dereferenced.
    enum Frame {
        Enter(NodeRef),
        Exit(NodeRef, SmallVec<[*const Node; 2]>),
    }
    let mut stack: Vec<Frame> = Vec::with_capacity(32);
    for root in roots {
        stack.push(Frame::Enter((*root).clone()));
        while let Some(frame) = stack.pop() {
            let (node, ins) = match frame {
                Frame::Enter(node) => {
                    if seen.contains_key(&Arc::as_ptr(&node)) {
                        continue;
                    }
                    if node.is_evaluated() {
                        (node, SmallVec::new())
                    } else {
                        // The operands are cloned only when not seen yet (a handle keeps
                        // each alive while it waits on the stack, whatever another thread
                        // evaluates meanwhile).
                        let (ptrs, exit) = node.with_inputs(|children| {
                            let ptrs: SmallVec<[*const Node; 2]> =
                                children.iter().map(Arc::as_ptr).collect();
                            let exit = stack.len();
                            for c in children.iter().rev() {
                                if !seen.contains_key(&Arc::as_ptr(c)) {
                                    stack.push(Frame::Enter(c.clone()));
                                }
                            }
                            (ptrs, exit)
                        });
                        stack.insert(exit, Frame::Exit(node, ptrs));
                        continue;
                    }
                }
                // Emitted once: a second `Enter` of the node lies below its `Exit` on the
                // stack, so it is popped after the node is emitted (and skipped above).
                Frame::Exit(node, ptrs) => (node, ptrs),
            };
            let key = Arc::as_ptr(&node);
            // Emit the node.
            let param = node.bound_value().map(|v| bindings.params.push(v));
            let op = match param {
                Some(i) => &Op::Param(i),
                None => node.op(),
            };
            let binding = match op {
                Op::Param(i) => Some(i.as_u32()),
                Op::Scalar(sc) => {
                    bindings.scalars.push(*sc);
                    Some(bindings.scalars.len() as u32 - 1)
                }
                Op::Random { seed, .. } => {
                    bindings.seeds.push(*seed);
                    Some(bindings.seeds.len() as u32 - 1)
                }
                _ => None,
            };
            let start = tokens.len();
            op_tokens(op, &mut tokens);
            for &t in &tokens[start..] {
                layers.feed(0, t);
            }
            if let Op::Scalar(sc) = op {
                tokens.push(scalar_class(*sc));
                layers.feed(1, scalar_class(*sc));
            }
            tokens.push(dtype_code(node.dtype()));
            layers.feed(2, dtype_code(node.dtype()));
            tokens.push(node.shape().rank() as u64);
            layers.feed(3, node.shape().rank() as u64);
            let mut sym: SymShape = SmallVec::new();
            for &d in node.shape().dims() {
                let dim = if d <= 1 {
                    Dim::Const(d)
                } else {
                    match sym_values.iter().position(|&v| v == d) {
                        Some(p) => Dim::Sym(p as u32),
                        None => {
                            sym_values.push(d);
                            Dim::Sym(sym_values.len() as u32 - 1)
                        }
                    }
                };
                tokens.push(dim.code());
                if with_nodes {
                    sym.push(dim);
                }
            }
            tokens.push(ins.len() as u64);
            layers.feed(0, ins.len() as u64);
            let mut in_idx: SmallVec<[NodeId; 2]> = SmallVec::new();
            for i in &ins {
                let p = seen[i];
                tokens.push(p.as_u32() as u64);
                layers.feed(0, p.as_u32() as u64);
                in_idx.push(p);
            }
            if with_nodes {
                graph.nodes.push(ExprNode {
                    op: op.clone(),
                    dtype: node.dtype(),
                    shape: node.shape().clone(),
                    sym,
                    inputs: in_idx,
                    binding,
                });
            }
            seen.insert(key, NodeId::from_u32(count));
            count += 1;
        }
        let o = seen[&Arc::as_ptr(root)];
        graph.outputs.push(o);
        tokens.push(u64::MAX);
        tokens.push(o.as_u32() as u64);
        layers.feed(0, u64::MAX);
        layers.feed(0, o.as_u32() as u64);
    }
    bindings.dims = sym_values;
    let hash = fnv(&tokens);
    Trace {
        key: Key {
            hash,
            tokens,
            layers: if with_nodes { layers.0 } else { [0; 4] },
        },
        bindings,
        graph,
    }
}
