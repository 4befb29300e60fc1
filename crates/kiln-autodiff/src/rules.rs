//! One vector-Jacobian rule per primitive op: given a node, its operands, which operand, and
//! the cotangent `g` of the node's value, the cotangent contribution for that operand (same
//! shape and dtype as the operand), or `None` where the derivative is zero by definition.
//!
//! Depends on `kiln-ir`'s builders only.

use kiln_ir::{
    build, BinaryOp as B, DType, NodeRef, Op, ReduceOp, Result, Scalar, Shape, UnaryOp as U,
};

fn bin(op: B, a: &NodeRef, b: &NodeRef) -> Result<NodeRef> {
    build::binary(op, a, b)
}

fn sc(op: B, a: &NodeRef, v: f64) -> Result<NodeRef> {
    build::binary_scalar(op, a, Scalar::Float(v), false)
}

fn un(op: U, a: &NodeRef) -> Result<NodeRef> {
    build::unary(op, a)
}

fn zeros_like(x: &NodeRef) -> NodeRef {
    build::full_like(x, Scalar::Float(0.0))
}

/// `where(mask, g, 0)`.
fn masked(mask: &NodeRef, g: &NodeRef) -> Result<NodeRef> {
    build::where_(mask, g, &zeros_like(g))
}

fn dims_isize(s: &Shape) -> Vec<isize> {
    s.dims().iter().map(|&d| d as isize).collect()
}

/// `g` (of a shape `to` broadcasts to) summed over the leading axes `to` lacks and the
/// size-1 axes it repeats: the cotangent of a broadcast.
fn sum_to(g: &NodeRef, to: &Shape) -> Result<NodeRef> {
    let from = g.shape();
    let lead = from.rank() - to.rank();
    let axes: Vec<isize> = (0..from.rank())
        .filter(|&k| k < lead || (to.0[k - lead] == 1 && from.0[k] != 1))
        .map(|k| k as isize)
        .collect();
    let summed = build::reduce(ReduceOp::Sum, g, Some(&axes), true)?;
    build::reshape(&summed, &dims_isize(to))
}

/// Swaps the last two axes.
fn swap_last(x: &NodeRef) -> Result<NodeRef> {
    let r = x.shape().rank() as isize;
    let mut p: Vec<isize> = (0..r).collect();
    p.swap((r - 1) as usize, (r - 2) as usize);
    build::permute(x, &p)
}

/// The cotangent for operand `pos` of `node` (operands `ins`), given the node's cotangent `g`.
pub fn vjp(node: &NodeRef, ins: &[NodeRef], pos: usize, g: &NodeRef) -> Result<Option<NodeRef>> {
    let x = &ins[pos];
    Ok(match node.op() {
        Op::Unary(u) => unary(*u, &ins[0], node, g)?,
        // The cotangent has the result's shape; a broadcast operand gets its sum.
        Op::Binary(b) => match binary(*b, &ins[0], &ins[1], node, pos, g)? {
            Some(d) if d.shape() != x.shape() => Some(sum_to(&d, x.shape())?),
            d => d,
        },
        Op::Where => match pos {
            0 => None,
            1 => Some(masked(&ins[0], g)?),
            _ => Some(build::where_(&ins[0], &zeros_like(g), g)?),
        },
        Op::Cast => {
            if x.dtype().is_float() {
                Some(build::cast(g, x.dtype()))
            } else {
                None
            }
        }
        Op::Reshape => Some(build::reshape(g, &dims_isize(x.shape()))?),
        Op::Permute(p) => {
            let mut inv = vec![0isize; p.len()];
            for (i, &a) in p.iter().enumerate() {
                inv[a] = i as isize;
            }
            Some(build::permute(g, &inv)?)
        }
        Op::BroadcastTo => Some(sum_to(g, x.shape())?),
        Op::Slice { start, step } => Some(slice_back(x, node, start, step, g)?),
        Op::Concat { axis } => {
            let offset: usize = ins[..pos].iter().map(|p| p.shape().0[*axis]).sum();
            let len = x.shape().0[*axis];
            let mut args = vec![build::SliceArg::range(None, None, 1); x.shape().rank()];
            args[*axis] =
                build::SliceArg::range(Some(offset as isize), Some((offset + len) as isize), 1);
            Some(build::slice(g, &args)?)
        }
        Op::Reduce { op, axes } => {
            let gb = build::broadcast_to(g, x.shape())?;
            match op {
                ReduceOp::Sum => Some(gb),
                ReduceOp::Prod => {
                    // d(prod)/dx_i = prod of the other entries. Without zeros that is y / x_i;
                    // with exactly one zero in the group it is the product of the non-zero
                    // entries at the zero and 0 elsewhere; with two or more zeros it is 0.
                    let ax: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
                    let is_zero = sc(B::Eq, x, 0.0)?;
                    let one = build::full_like(x, Scalar::Float(1.0));
                    let nz = build::where_(&is_zero, &one, x)?;
                    let p_nz = build::broadcast_to(
                        &build::reduce(ReduceOp::Prod, &nz, Some(&ax), true)?,
                        x.shape(),
                    )?;
                    let zeros = build::reduce(
                        ReduceOp::Sum,
                        &build::cast(&is_zero, x.dtype()),
                        Some(&ax),
                        true,
                    )?;
                    let zeros = build::broadcast_to(&zeros, x.shape())?;
                    let yb = build::broadcast_to(node, x.shape())?;
                    let at_zero = build::where_(&sc(B::Eq, &zeros, 1.0)?, &p_nz, &zeros_like(x))?;
                    let elsewhere = bin(B::Div, &yb, &nz)?; // y is 0 when the group has a zero
                    Some(bin(
                        B::Mul,
                        &gb,
                        &build::where_(&is_zero, &at_zero, &elsewhere)?,
                    )?)
                }
                ReduceOp::Max | ReduceOp::Min => {
                    // Ties share the gradient equally (as jax.numpy).
                    let yb = build::broadcast_to(node, x.shape())?;
                    let hit = build::cast(&bin(B::Eq, x, &yb)?, x.dtype());
                    let ax: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
                    let count = build::reduce(ReduceOp::Sum, &hit, Some(&ax), true)?;
                    let share = bin(B::Div, &hit, &build::broadcast_to(&count, x.shape())?)?;
                    Some(bin(B::Mul, &gb, &share)?)
                }
            }
        }
        Op::MatMul => match pos {
            0 => Some(build::matmul(g, &swap_last(&ins[1])?)?),
            _ => Some(build::matmul(&swap_last(&ins[0])?, g)?),
        },
        Op::Take { axis } => match pos {
            0 => Some(build::scatter_add(
                g,
                &ins[1],
                *axis as isize,
                x.shape().clone(),
            )?),
            _ => None,
        },
        Op::ScatterAdd { axis } => match pos {
            0 => Some(build::take(g, &ins[1], *axis as isize)?),
            _ => None,
        },
        Op::TopK { k, indices: false } => {
            // Σ_j one_hot(idx_j, n) * g_j over the k selected positions of each row.
            let n = x.shape().0[x.shape().rank() - 1];
            let (_, idx) = build::top_k(x, *k)?;
            let classes = build::iota(Shape::from([n]), 0, DType::I64)?;
            let idx_e = build::reshape(&idx, &[dims_isize(idx.shape()), vec![1]].concat())?;
            let hot = build::cast(&bin(B::Eq, &idx_e, &classes)?, x.dtype());
            let g_e = build::reshape(g, &[dims_isize(g.shape()), vec![1]].concat())?;
            let r = x.shape().rank() as isize;
            Some(build::reduce(
                ReduceOp::Sum,
                &bin(B::Mul, &hot, &g_e)?,
                Some(&[r - 1]),
                false,
            )?)
        }
        Op::TopK { indices: true, .. } | Op::ArgReduce { .. } | Op::StopGradient => None,
        Op::Param(_) | Op::Data | Op::Scalar(_) | Op::Iota { .. } | Op::Random { .. } => None,
    })
}

fn unary(u: U, x: &NodeRef, y: &NodeRef, g: &NodeRef) -> Result<Option<NodeRef>> {
    Ok(Some(match u {
        U::Neg => un(U::Neg, g)?,
        U::Abs => bin(B::Mul, g, &un(U::Sign, x)?)?,
        U::Exp => bin(B::Mul, g, y)?,
        U::Log => bin(B::Div, g, x)?,
        U::Log1p => bin(B::Div, g, &sc(B::Add, x, 1.0)?)?,
        U::Expm1 => bin(B::Mul, g, &sc(B::Add, y, 1.0)?)?,
        U::Sqrt => bin(B::Div, g, &sc(B::Mul, y, 2.0)?)?,
        // d x^(-1/2) = -1/2 x^(-3/2) = -0.5 * y / x
        U::Rsqrt => bin(B::Mul, g, &bin(B::Div, &sc(B::Mul, y, -0.5)?, x)?)?,
        U::Square => bin(B::Mul, g, &sc(B::Mul, x, 2.0)?)?,
        U::Recip => un(U::Neg, &bin(B::Mul, g, &bin(B::Mul, y, y)?)?)?,
        U::Sin => bin(B::Mul, g, &un(U::Cos, x)?)?,
        U::Cos => un(U::Neg, &bin(B::Mul, g, &un(U::Sin, x)?)?)?,
        U::Tanh => bin(
            B::Mul,
            g,
            &build::binary_scalar(B::Sub, &bin(B::Mul, y, y)?, Scalar::Float(1.0), true)?,
        )?,
        U::Sigmoid => {
            let one_minus = build::binary_scalar(B::Sub, y, Scalar::Float(1.0), true)?;
            bin(B::Mul, g, &bin(B::Mul, y, &one_minus)?)?
        }
        // y > 0 exactly where x > 0 (NaN and -0.0 included): reading the output leaves the
        // pre-activation with one consumer, so it fuses into its producer (a matmul's
        // epilogue computes relu(x @ w + b) in one pass instead of storing x @ w for the mask).
        U::Relu => masked(&sc(B::Gt, y, 0.0)?, g)?,
        U::Sign | U::Floor | U::Ceil | U::Round | U::IsNan | U::LogicalNot => return Ok(None),
    }))
}

fn binary(
    op: B,
    a: &NodeRef,
    b: &NodeRef,
    y: &NodeRef,
    pos: usize,
    g: &NodeRef,
) -> Result<Option<NodeRef>> {
    let first = pos == 0;
    Ok(Some(match op {
        B::Add => g.clone(),
        B::Sub => {
            if first {
                g.clone()
            } else {
                un(U::Neg, g)?
            }
        }
        B::Mul => bin(B::Mul, g, if first { b } else { a })?,
        B::Div => {
            if first {
                bin(B::Div, g, b)?
            } else {
                un(U::Neg, &bin(B::Div, &bin(B::Mul, g, y)?, b)?)?
            }
        }
        B::Pow => {
            if first {
                // b * a^(b-1)
                let am1 = bin(B::Pow, a, &sc(B::Sub, b, 1.0)?)?;
                bin(B::Mul, g, &bin(B::Mul, b, &am1)?)?
            } else {
                // y * log(a), with log(0) replaced so that 0^b contributes 0 (as JAX)
                let safe = build::where_(
                    &sc(B::Eq, a, 0.0)?,
                    &build::full_like(a, Scalar::Float(1.0)),
                    a,
                )?;
                bin(B::Mul, g, &bin(B::Mul, y, &un(U::Log, &safe)?)?)?
            }
        }
        B::Maximum | B::Minimum => {
            // the winner gets the gradient; a tie sends half to each operand (as JAX)
            let (me, other) = if first { (a, b) } else { (b, a) };
            let win = if op == B::Maximum { B::Gt } else { B::Lt };
            let w = build::cast(&bin(win, me, other)?, g.dtype());
            let tie = sc(
                B::Mul,
                &build::cast(&bin(B::Eq, me, other)?, g.dtype()),
                0.5,
            )?;
            bin(B::Mul, g, &bin(B::Add, &w, &tie)?)?
        }
        B::Rem => {
            if first {
                g.clone()
            } else {
                un(U::Neg, &bin(B::Mul, g, &bin(B::FloorDiv, a, b)?)?)?
            }
        }
        B::FloorDiv
        | B::Eq
        | B::Ne
        | B::Lt
        | B::Le
        | B::Gt
        | B::Ge
        | B::LogicalAnd
        | B::LogicalOr => return Ok(None),
    }))
}

/// The adjoint of a strided slice: for each sliced axis, gather the cotangent back to the
/// input's positions (`(i - start) / step` where that is a whole index inside the window)
/// and zero elsewhere.
fn slice_back(
    x: &NodeRef,
    y: &NodeRef,
    start: &[i64],
    step: &[i64],
    g: &NodeRef,
) -> Result<NodeRef> {
    if y.shape().numel() == 0 {
        return Ok(zeros_like(x));
    }
    let rank = x.shape().rank();
    let mut cur = g.clone();
    for k in 0..rank {
        let (n, len) = (x.shape().0[k], y.shape().0[k]);
        if start[k] == 0 && step[k] == 1 && len == n {
            continue;
        }
        let i = build::iota(Shape::from([n]), 0, DType::I64)?;
        let d = build::binary_scalar(B::Sub, &i, Scalar::Int(start[k]), false)?;
        // unit steps (nearly every slice) need no division: every position is on the grid
        let (q, lo) = if step[k] == 1 {
            let lo = build::binary_scalar(B::Ge, &d, Scalar::Int(0), false)?;
            (d, lo)
        } else {
            let q = build::binary_scalar(B::FloorDiv, &d, Scalar::Int(step[k]), false)?;
            let r = build::binary_scalar(B::Rem, &d, Scalar::Int(step[k]), false)?;
            let on_grid = build::binary_scalar(B::Eq, &r, Scalar::Int(0), false)?;
            let lo = build::binary_scalar(B::Ge, &q, Scalar::Int(0), false)?;
            (q, bin(B::LogicalAnd, &on_grid, &lo)?)
        };
        let hi = build::binary_scalar(B::Lt, &q, Scalar::Int(len as i64), false)?;
        let valid = bin(B::LogicalAnd, &lo, &hi)?;
        let qc = build::binary_scalar(B::Maximum, &q, Scalar::Int(0), false)?;
        let qc = build::binary_scalar(B::Minimum, &qc, Scalar::Int(len as i64 - 1), false)?;
        let gathered = build::take(&cur, &qc, k as isize)?;
        let mut vshape = vec![1isize; rank];
        vshape[k] = n as isize;
        let valid = build::reshape(&valid, &vshape)?;
        cur = masked(&valid, &gathered)?;
    }
    Ok(cur)
}
