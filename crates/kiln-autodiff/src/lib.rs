//! # kiln-autodiff
//!
//! Reverse-mode automatic differentiation as a transform of kiln's lazy graph: given outputs
//! and cotangents, it builds *new lazy nodes* for the vector-Jacobian products, with the same
//! builders the front end uses. Gradients are therefore ordinary expressions: evaluated in one
//! plan with the forward pass, fused, and cached like any graph; the gradient of a gradient
//! works wherever the rules below are differentiable themselves.
//!
//! Rules (one per primitive op, in [`rules`]): broadcasting sums back to the operand's shape,
//! matmul (batched), take (scatter-add into the table) and scatter-add (take), slicing (a
//! masked gather back to the input's positions, any step), concat, reshape, permute, reductions
//! (`max`/`min` split the gradient equally among tied maxima, as `jax.numpy`; `maximum`/
//! `minimum` send half to each operand on a tie), `where`, casts between float dtypes,
//! top-k values. Comparisons, rounding, `sign`, `argmax`, integer and bool values have no
//! gradient. `stop_gradient` blocks propagation.
//!
//! Depends on `kiln-ir` only.

pub mod rules;

use kiln_ir::{build, DType, Error, Node, NodeRef, Op, Result, Scalar};
use std::sync::Arc;

/// Nodes reachable from `roots`, operands before users (iterative).
fn topo(roots: &[&NodeRef]) -> Vec<NodeRef> {
    let mut order = Vec::new();
    let mut seen: hashbrown::HashSet<*const Node> = hashbrown::HashSet::new();
    let mut stack: Vec<(NodeRef, bool)> = roots.iter().map(|r| ((*r).clone(), false)).collect();
    stack.reverse();
    while let Some((n, expanded)) = stack.pop() {
        let p = Arc::as_ptr(&n);
        if expanded {
            if seen.insert(p) {
                order.push(n);
            }
            continue;
        }
        if seen.contains(&p) {
            continue;
        }
        let ins = n.inputs();
        stack.push((n, true));
        for i in ins.into_iter().rev() {
            if !seen.contains(&Arc::as_ptr(&i)) {
                stack.push((i, false));
            }
        }
    }
    order
}

fn not_differentiable(op: &'static str, what: String, dtype: DType) -> Error {
    Error::UnsupportedDType {
        op,
        dtype,
        hint: format!("{what} is not differentiable: only f32 and f64 values have gradients (cast it, or leave it out)"),
    }
}

/// Vector-Jacobian products: the gradients of `Σ_i <outputs[i], cotangents[i]>` with respect
/// to each of `wrt`, as lazy nodes. A `wrt` node the outputs do not depend on gets zeros.
///
/// ```
/// use kiln_ir::{build, HostData, Shape, UnaryOp};
/// let x = build::data(HostData::from(vec![0.0f64, 1.0]), Shape::from([2])).unwrap();
/// let y = build::unary(UnaryOp::Exp, &x).unwrap();
/// let ones = build::data(HostData::from(vec![1.0f64, 1.0]), Shape::from([2])).unwrap();
/// let g = kiln_autodiff::vjp(&[&y], &[&ones], &[&x]).unwrap();
/// assert_eq!(g[0].shape().dims(), &[2]);
/// ```
pub fn vjp(
    outputs: &[&NodeRef],
    cotangents: &[&NodeRef],
    wrt: &[&NodeRef],
) -> Result<Vec<NodeRef>> {
    if outputs.len() != cotangents.len() {
        return Err(Error::InvalidArgument {
            op: "vjp",
            message: format!(
                "{} outputs but {} cotangents",
                outputs.len(),
                cotangents.len()
            ),
            hint: "give one cotangent per output".into(),
        });
    }
    for (k, w) in wrt.iter().enumerate() {
        if !w.dtype().is_float() {
            return Err(not_differentiable(
                "grad",
                format!("input {k} (dtype {})", w.dtype()),
                w.dtype(),
            ));
        }
    }
    for (k, (o, c)) in outputs.iter().zip(cotangents).enumerate() {
        if !o.dtype().is_float() {
            return Err(not_differentiable(
                "grad",
                format!("output {k} (dtype {})", o.dtype()),
                o.dtype(),
            ));
        }
        if o.shape() != c.shape() || o.dtype() != c.dtype() {
            return Err(Error::ShapeMismatch {
                op: "vjp",
                lhs: o.shape().clone(),
                rhs: c.shape().clone(),
                hint: format!(
                    "cotangent {k} must have its output's shape and dtype ({})",
                    o.dtype()
                ),
            });
        }
    }
    let order = topo(outputs);
    let index: hashbrown::HashMap<*const Node, usize> = order
        .iter()
        .enumerate()
        .map(|(i, n)| (Arc::as_ptr(n), i))
        .collect();
    let wrt_set: hashbrown::HashSet<*const Node> = wrt.iter().map(|w| Arc::as_ptr(w)).collect();
    // needs[i]: node i is a float value that depends on some wrt node
    let mut needs = vec![false; order.len()];
    let inputs: Vec<Vec<NodeRef>> = order.iter().map(|n| n.inputs().into_vec()).collect();
    for (i, n) in order.iter().enumerate() {
        let from_inputs = !matches!(n.op(), Op::StopGradient)
            && inputs[i].iter().any(|x| needs[index[&Arc::as_ptr(x)]]);
        needs[i] = n.dtype().is_float() && (wrt_set.contains(&Arc::as_ptr(n)) || from_inputs);
    }
    let mut adj: Vec<Option<NodeRef>> = vec![None; order.len()];
    for (o, c) in outputs.iter().zip(cotangents) {
        let i = index[&Arc::as_ptr(o)];
        adj[i] = Some(match adj[i].take() {
            Some(prev) => build::binary(kiln_ir::BinaryOp::Add, &prev, c)?,
            None => (*c).clone(),
        });
    }
    for i in (0..order.len()).rev() {
        if !needs[i] {
            continue;
        }
        let Some(g) = adj[i].clone() else { continue };
        let node = &order[i];
        for (pos, x) in inputs[i].iter().enumerate() {
            let xi = index[&Arc::as_ptr(x)];
            if !needs[xi] {
                continue;
            }
            if let Some(contrib) = rules::vjp(node, &inputs[i], pos, &g)? {
                adj[xi] = Some(match adj[xi].take() {
                    Some(prev) => build::binary(kiln_ir::BinaryOp::Add, &prev, &contrib)?,
                    None => contrib,
                });
            }
        }
    }
    Ok(wrt
        .iter()
        .map(
            |w| match index.get(&Arc::as_ptr(w)).and_then(|&i| adj[i].clone()) {
                Some(g) => g,
                None => build::full_like(w, Scalar::Float(0.0)),
            },
        )
        .collect())
}

/// The gradient of a scalar (one-element) float `loss` with respect to each of `wrt`.
///
/// ```
/// use kiln_ir::{build, BinaryOp, HostData, ReduceOp, Shape};
/// let x = build::data(HostData::from(vec![1.0f64, 2.0]), Shape::from([2])).unwrap();
/// let sq = build::binary(BinaryOp::Mul, &x, &x).unwrap();
/// let loss = build::reduce(ReduceOp::Sum, &sq, None, false).unwrap();
/// let g = kiln_autodiff::grad(&loss, &[&x]).unwrap(); // 2x
/// assert_eq!(g[0].shape().dims(), &[2]);
/// let v = build::data(HostData::from(vec![1.0f64, 2.0]), Shape::from([2])).unwrap();
/// assert!(kiln_autodiff::grad(&v, &[&x]).is_err()); // not a scalar
/// ```
pub fn grad(loss: &NodeRef, wrt: &[&NodeRef]) -> Result<Vec<NodeRef>> {
    if loss.shape().numel() != 1 {
        return Err(Error::InvalidArgument {
            op: "grad",
            message: format!(
                "the loss has shape {} ({} elements), not one element",
                loss.shape(),
                loss.shape().numel()
            ),
            hint: "reduce it to a scalar first (sum or mean), or use vjp with a cotangent".into(),
        });
    }
    if !loss.dtype().is_float() {
        return Err(not_differentiable(
            "grad",
            format!("the loss (dtype {})", loss.dtype()),
            loss.dtype(),
        ));
    }
    let one = build::full_like(loss, Scalar::Float(1.0));
    vjp(&[loss], &[&one], wrt)
}
