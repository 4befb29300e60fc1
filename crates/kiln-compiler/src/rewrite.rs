//! Rewrites on the working [`Graph`]: IEEE-safe algebraic simplification, movement-op
//! folding, common-subexpression elimination by hash-consing, and dead-node elimination.
//!
//! Simplifications that depend on a scalar's value (`x * 1`, `x / 1`, `x - 0`, `x + -0.0`,
//! integer `x + 0`) are sound across bindings because the scalar's class (exactly 0, -0.0
//! or 1) is part of the graph-cache key. `x - x → 0` and float `x + 0 → x` are *not*
//! applied: they change NaN, inf and -0.0 results.
//!
//! Depends on `kiln-ir` only.

use kiln_ir::{
    scalar_key_value, BinaryOp, DType, Dim, ExprNode, Graph, IdVec, NodeId, Op, UnaryOp,
};
use smallvec::SmallVec;
use std::hash::BuildHasher;

/// The value of a node that is a scalar (possibly reshaped/broadcast) whose key class is
/// exact, i.e. `-0.0`, `0` or `1`.
fn const_class(g: &IdVec<NodeId, ExprNode>, mut i: NodeId) -> Option<f64> {
    loop {
        let n = &g[i];
        match &n.op {
            Op::Reshape | Op::BroadcastTo => i = n.inputs[0],
            Op::Scalar(s) => return scalar_key_value(*s),
            _ => return None,
        }
    }
}

fn is_unit_reshape(from: &[Dim], to: &[Dim]) -> bool {
    let a: SmallVec<[Dim; 4]> = from
        .iter()
        .copied()
        .filter(|d| *d != Dim::Const(1))
        .collect();
    let b: SmallVec<[Dim; 4]> = to.iter().copied().filter(|d| *d != Dim::Const(1)).collect();
    a == b
}

/// Whether a reshape only inserts or removes size-1 dimensions.
///
/// ```
/// use kiln_ir::Dim;
/// assert!(kiln_compiler::rewrite::unit_reshape(&[Dim::Sym(0)], &[Dim::Const(1), Dim::Sym(0)]));
/// assert!(!kiln_compiler::rewrite::unit_reshape(&[Dim::Sym(0), Dim::Sym(1)], &[Dim::Sym(2)]));
/// ```
pub fn unit_reshape(from: &[Dim], to: &[Dim]) -> bool {
    is_unit_reshape(from, to)
}

fn lossless(from: DType, to: DType) -> bool {
    use DType::*;
    matches!(
        (from, to),
        (Bool, _)
            | (I32, I64)
            | (I32, F64)
            | (F32, F64)
            | (I32, I32)
            | (I64, I64)
            | (F32, F32)
            | (F64, F64)
    )
}

/// One simplification step on node `n` (operands already rewritten): `Ok(i)` means "use
/// existing node `i` instead", `Err(n)` the (possibly changed) node to keep.
#[allow(clippy::result_large_err)] // `Err` is the rewritten node, not an error
fn simplify(g: &IdVec<NodeId, ExprNode>, mut n: ExprNode) -> Result<NodeId, ExprNode> {
    let same_type = |i: NodeId, n: &ExprNode| g[i].dtype == n.dtype && g[i].sym == n.sym;
    match n.op.clone() {
        Op::Binary(op) => {
            let (a, b) = (n.inputs[0], n.inputs[1]);
            let (ca, cb) = (const_class(g, a), const_class(g, b));
            let int = n.dtype.is_int();
            let one = |c: Option<f64>| c == Some(1.0);
            let zero = |c: Option<f64>| c == Some(0.0) && c.is_some_and(|v| v.is_sign_positive());
            let neg_zero = |c: Option<f64>| c.is_some_and(|v| v == 0.0 && v.is_sign_negative());
            let keep = match op {
                BinaryOp::Mul if one(cb) => Some(a),
                BinaryOp::Mul if one(ca) => Some(b),
                BinaryOp::Div if one(cb) => Some(a),
                BinaryOp::Sub if zero(cb) => Some(a),
                BinaryOp::Add if neg_zero(cb) || (int && zero(cb)) => Some(a),
                BinaryOp::Add if neg_zero(ca) || (int && zero(ca)) => Some(b),
                _ => None,
            };
            if let Some(k) = keep {
                if same_type(k, &n) {
                    return Ok(k);
                }
            }
            Err(n)
        }
        Op::Unary(UnaryOp::Neg) => {
            let x = &g[n.inputs[0]];
            if x.op == Op::Unary(UnaryOp::Neg) {
                return Ok(x.inputs[0]);
            }
            Err(n)
        }
        Op::StopGradient => Ok(n.inputs[0]),
        Op::Where => {
            if n.inputs[1] == n.inputs[2] {
                return Ok(n.inputs[1]);
            }
            Err(n)
        }
        Op::Cast => {
            let x = &g[n.inputs[0]];
            if x.dtype == n.dtype {
                return Ok(n.inputs[0]);
            }
            if x.op == Op::Cast {
                let inner = x.inputs[0];
                let src = g[inner].dtype;
                if src == n.dtype && lossless(src, x.dtype) {
                    return Ok(inner);
                }
            }
            Err(n)
        }
        Op::Reshape => {
            let x = &g[n.inputs[0]];
            if x.sym == n.sym && x.shape == n.shape {
                return Ok(n.inputs[0]);
            }
            if x.op == Op::Reshape {
                n.inputs[0] = x.inputs[0];
                if g[x.inputs[0]].shape == n.shape {
                    return Ok(x.inputs[0]);
                }
            }
            Err(n)
        }
        Op::BroadcastTo => {
            let x = &g[n.inputs[0]];
            if x.shape == n.shape {
                return Ok(n.inputs[0]);
            }
            if x.op == Op::BroadcastTo {
                n.inputs[0] = x.inputs[0];
            }
            Err(n)
        }
        Op::Permute(p) => {
            let x = &g[n.inputs[0]];
            let (src, perm): (NodeId, SmallVec<[usize; 4]>) = match &x.op {
                Op::Permute(q) => (x.inputs[0], p.iter().map(|&a| q[a]).collect()),
                _ => (n.inputs[0], p.clone()),
            };
            if perm.iter().enumerate().all(|(i, &a)| i == a) {
                return Ok(src);
            }
            n.inputs[0] = src;
            n.op = Op::Permute(perm);
            Err(n)
        }
        Op::Slice { start, step } => {
            let x = &g[n.inputs[0]];
            if let Op::Slice {
                start: s1,
                step: t1,
            } = &x.op
            {
                let mut st: SmallVec<[i64; 4]> = SmallVec::new();
                let mut sp: SmallVec<[i64; 4]> = SmallVec::new();
                for k in 0..start.len() {
                    let len = n.shape.0[k];
                    st.push(if len == 0 {
                        0
                    } else {
                        s1[k] + start[k] * t1[k]
                    });
                    sp.push(t1[k] * step[k]);
                }
                n.inputs[0] = x.inputs[0];
                n.op = Op::Slice {
                    start: st,
                    step: sp,
                };
            }
            Err(n)
        }
        _ => Err(n),
    }
}

/// How many times the rules may rewrite one node before it is kept as it is.
const MAX_REWRITE_ROUNDS: usize = 64;

/// Simplification, movement folding and CSE in one forward pass, then dead-node
/// elimination. Returns the new graph and, for each old node, its new index (if alive).
///
/// ```
/// use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Scalar, Shape, UnaryOp};
/// let a = build::data(HostData::from(vec![1.0f32; 4]), Shape::from([4])).unwrap();
/// let e1 = build::unary(UnaryOp::Exp, &a).unwrap();
/// let e2 = build::unary(UnaryOp::Exp, &a).unwrap(); // same structure: CSE merges it
/// let y = build::binary(BinaryOp::Add, &e1, &e2).unwrap();
/// let y = build::binary_scalar(BinaryOp::Mul, &y, Scalar::Float(1.0), false).unwrap(); // x*1 → x
/// let g = LazyExpr::from_roots(&[&y]).graph;
/// let (g2, _) = kiln_compiler::rewrite::optimize(&g);
/// assert_eq!(g2.nodes.len(), 3); // a, exp, add
/// ```
pub fn optimize(g: &Graph) -> (Graph, IdVec<NodeId, Option<NodeId>>) {
    let mut out: IdVec<NodeId, ExprNode> = IdVec::with_capacity(g.nodes.len());
    let mut map: IdVec<NodeId, NodeId> = IdVec::with_capacity(g.nodes.len());
    // CSE: nodes equal in every field (op and its attributes, scalars by bits, dtype, shapes,
    // operands, binding) are one node. Scalars, parameters and random streams have distinct
    // bindings, so they are never merged by value.
    let hasher = hashbrown::DefaultHashBuilder::default();
    let mut table: hashbrown::HashTable<NodeId> =
        hashbrown::HashTable::with_capacity(g.nodes.len());
    for n in g.nodes.values() {
        let mut n = n.clone();
        for i in n.inputs.iter_mut() {
            *i = map[*i];
        }
        // Apply rules to a fixed point (each rule strictly shrinks or stops; the bound is a
        // guard: a rule pair that undid each other would stop here instead of spinning).
        let mut rounds = 0;
        let idx = loop {
            let before = n.clone();
            rounds += 1;
            match simplify(&out, n) {
                Ok(existing) => break existing,
                Err(m) if m != before && rounds < MAX_REWRITE_ROUNDS => n = m,
                Err(m) => {
                    let h = hasher.hash_one(&m);
                    if let Some(&e) = table.find(h, |&e| out[e] == m) {
                        break e;
                    }
                    let i = out.push(m);
                    table.insert_unique(h, i, |&e| hasher.hash_one(&out[e]));
                    break i;
                }
            }
        };
        map.push(idx);
    }
    let outputs: Vec<NodeId> = g.outputs.iter().map(|&o| map[o]).collect();
    let simplified = Graph {
        nodes: out,
        outputs,
    };
    let (g2, live) = eliminate_dead(&simplified);
    let remap = map.values().map(|&m| live[m]).collect();
    (g2, remap)
}

/// Removes nodes no output depends on; returns the new graph and old → new ids.
///
/// ```
/// # use kiln_ir::{build, HostData, LazyExpr, Shape};
/// let a = build::data(HostData::from(vec![1i32]), Shape::from([1])).unwrap();
/// let g = LazyExpr::from_roots(&[&a]).graph;
/// assert_eq!(kiln_compiler::rewrite::eliminate_dead(&g).0.nodes.len(), 1);
/// ```
pub fn eliminate_dead(g: &Graph) -> (Graph, IdVec<NodeId, Option<NodeId>>) {
    let mut alive = IdVec::filled(false, g.nodes.len());
    for &o in &g.outputs {
        alive[o] = true;
    }
    for (i, n) in g.nodes.iter().rev() {
        if alive[i] {
            for &j in &n.inputs {
                alive[j] = true;
            }
        }
    }
    let mut remap = IdVec::filled(None, g.nodes.len());
    let mut nodes = IdVec::new();
    for (i, n) in g.nodes.iter() {
        if alive[i] {
            let mut n = n.clone();
            for j in n.inputs.iter_mut() {
                *j = remap[*j].expect("operands precede users");
            }
            remap[i] = Some(nodes.push(n));
        }
    }
    let outputs = g
        .outputs
        .iter()
        .map(|&o| remap[o].expect("outputs are alive"))
        .collect();
    (Graph { nodes, outputs }, remap)
}
