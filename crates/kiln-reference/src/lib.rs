//! # kiln-reference
//!
//! A deliberately simple interpreter of a [`LazyExpr`]: every element is a [`Scalar`], every
//! op is a loop over output positions written the obvious way, floats are computed in `f64`
//! and rounded to the node's dtype on store, sums and dot products accumulate in `f64`
//! (integers in wrapping `i64`). It is slow on purpose; it is the oracle every optimised
//! backend is tested against.
//!
//! Depends on `kiln-ir` only.
//!
//! ```
//! use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Shape, Scalar};
//! let a = build::data(HostData::from(vec![1.0f32, 2.0]), Shape::from([2])).unwrap();
//! let y = build::binary_scalar(BinaryOp::Mul, &a, Scalar::Float(3.0), false).unwrap();
//! let out = kiln_reference::evaluate(&LazyExpr::from_roots(&[&y])).unwrap();
//! assert_eq!(out[0].get(1), Scalar::Float(6.0));
//! ```
#![warn(missing_docs)]

pub use kiln_ir::scalar_ops::{binary, float_floor_div, float_rem, unary};
use kiln_ir::{
    random, ArgReduceOp, DType, Distribution, Error, HostData, Id, IdVec, LazyExpr, NodeId, Op,
    ReduceOp, Result, Scalar, Shape,
};

/// A dense row-major tensor of scalars.
#[derive(Clone, Debug)]
struct Tensor {
    dtype: DType,
    shape: Shape,
    data: Vec<Scalar>,
}

/// Evaluates every output of `expr`, in order.
///
/// Errors: an out-of-range `take` index, integer division by zero, an integer raised to a
/// negative power — each naming the op and the offending value.
///
/// ```
/// use kiln_ir::{build, HostData, LazyExpr, Shape};
/// let t = build::data(HostData::from(vec![1.0f32, 2.0]), Shape::from([2])).unwrap();
/// let i = build::data(HostData::from(vec![5i64]), Shape::from([1])).unwrap();
/// let g = build::take(&t, &i, 0).unwrap();
/// let err = kiln_reference::evaluate(&LazyExpr::from_roots(&[&g])).unwrap_err();
/// assert!(err.to_string().contains("index 5"));
/// ```
pub fn evaluate(expr: &LazyExpr) -> Result<Vec<HostData>> {
    // Resident parameters are read through a download: the interpreter runs on the host.
    let params: Vec<HostData> = expr
        .params
        .values()
        .map(|v| v.to_host())
        .collect::<Result<_>>()?;
    let g = &expr.graph;
    let mut values: IdVec<NodeId, Option<Tensor>> = IdVec::filled(None, g.nodes.len());
    for (n, node) in g.nodes.iter() {
        let ins: Vec<&Tensor> = node
            .inputs
            .iter()
            .map(|&i| values[i].as_ref().expect("operands are evaluated first"))
            .collect();
        let data = eval_op(&node.op, node.dtype, &node.shape, &ins, &params)?;
        debug_assert_eq!(data.len(), node.shape.numel(), "{}", node.op);
        values[n] = Some(Tensor {
            dtype: node.dtype,
            shape: node.shape.clone(),
            data,
        });
    }
    Ok(g.outputs
        .iter()
        .map(|&o| {
            let t = values[o].as_ref().expect("outputs are evaluated");
            HostData::from_scalars(t.dtype, t.data.iter().copied())
        })
        .collect())
}

/// Multi-index of flat position `flat` in `shape` (row-major).
fn unravel(mut flat: usize, shape: &[usize], out: &mut [usize]) {
    for a in (0..shape.len()).rev() {
        out[a] = flat % shape[a];
        flat /= shape[a];
    }
}

fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// Output positions mapped to input positions through `f(out_index, in_index)`.
fn gather_by(t: &Tensor, out: &Shape, mut f: impl FnMut(&[usize], &mut [usize])) -> Vec<Scalar> {
    let mut oi = vec![0; out.rank()];
    let mut ii = vec![0; t.shape.rank()];
    (0..out.numel())
        .map(|flat| {
            unravel(flat, out.dims(), &mut oi);
            f(&oi, &mut ii);
            t.data[ravel(&ii, t.shape.dims())]
        })
        .collect()
}

fn eval_op(
    op: &Op,
    dtype: DType,
    shape: &Shape,
    ins: &[&Tensor],
    params: &[HostData],
) -> Result<Vec<Scalar>> {
    let n = shape.numel();
    Ok(match op {
        Op::Param(p) => {
            let d = &params[p.index()];
            (0..d.len()).map(|i| d.get(i)).collect()
        }
        Op::Data => unreachable!("Data nodes are lowered to parameters"),
        Op::Scalar(v) => vec![v.cast(dtype)],
        Op::Iota { axis } => {
            let mut idx = vec![0; shape.rank()];
            (0..n)
                .map(|f| {
                    unravel(f, shape.dims(), &mut idx);
                    Scalar::Int(idx[*axis] as i64).cast(dtype)
                })
                .collect()
        }
        Op::Random { dist, seed } => (0..n as u64)
            .map(|i| match (dist, dtype) {
                (Distribution::Uniform, DType::F32) => {
                    Scalar::Float(random::uniform_f32(*seed, i) as f64)
                }
                (Distribution::Uniform, _) => Scalar::Float(random::uniform(*seed, i)),
                (Distribution::Normal, _) => Scalar::Float(random::normal(*seed, i)).cast(dtype),
            })
            .collect(),
        Op::Unary(u) => {
            let a = ins[0];
            a.data
                .iter()
                .map(|&x| unary(*u, a.dtype, x).cast(dtype))
                .collect()
        }
        Op::Binary(b) => {
            let (x, y) = (ins[0], ins[1]);
            x.data
                .iter()
                .zip(&y.data)
                .map(|(&p, &q)| binary(*b, x.dtype, p, q).map(|r| r.cast(dtype)))
                .collect::<Result<_>>()?
        }
        Op::Where => ins[0]
            .data
            .iter()
            .zip(ins[1].data.iter().zip(&ins[2].data))
            .map(|(c, (a, b))| if c.as_bool() { *a } else { *b })
            .collect(),
        Op::Cast => ins[0].data.iter().map(|x| x.cast(dtype)).collect(),
        Op::Reshape => ins[0].data.clone(),
        Op::Permute(perm) => gather_by(ins[0], shape, |o, i| {
            for (k, &p) in perm.iter().enumerate() {
                i[p] = o[k];
            }
        }),
        Op::BroadcastTo => {
            // The input's axes are the output's last ones.
            let src = ins[0].shape.clone();
            let lead = shape.rank() - src.rank();
            gather_by(ins[0], shape, |o, i| {
                for a in 0..src.rank() {
                    i[a] = if src.0[a] == 1 { 0 } else { o[lead + a] };
                }
            })
        }
        Op::Slice { start, step } => gather_by(ins[0], shape, |o, i| {
            for a in 0..o.len() {
                i[a] = (start[a] + o[a] as i64 * step[a]) as usize;
            }
        }),
        Op::Concat { axis } => {
            let mut oi = vec![0; shape.rank()];
            (0..n)
                .map(|f| {
                    unravel(f, shape.dims(), &mut oi);
                    let mut pos = oi[*axis];
                    for t in ins {
                        let len = t.shape.0[*axis];
                        if pos < len {
                            let mut ii = oi.clone();
                            ii[*axis] = pos;
                            return t.data[ravel(&ii, t.shape.dims())];
                        }
                        pos -= len;
                    }
                    unreachable!("concat index within the total length")
                })
                .collect()
        }
        Op::Reduce { op, axes } => reduce(*op, axes, ins[0], dtype, shape),
        Op::ArgReduce { op, axis } => arg_reduce(*op, *axis, ins[0], shape),
        Op::MatMul => matmul(ins[0], ins[1], dtype, shape),
        Op::Take { axis } => take(*axis, ins[0], ins[1], shape)?,
        Op::TopK { k, indices } => top_k(*k, *indices, ins[0]),
        Op::ScatterAdd { axis } => scatter_add(*axis, ins[0], ins[1], dtype, shape)?,
        Op::StopGradient => ins[0].data.clone(),
    })
}

fn reduce(op: ReduceOp, axes: &[usize], a: &Tensor, dtype: DType, out: &Shape) -> Vec<Scalar> {
    let float = dtype.is_float();
    // Accumulators: f64 for floats (exact enough to be the oracle), wrapping i64 for ints.
    let init = match op {
        ReduceOp::Sum => Scalar::Int(0),
        ReduceOp::Prod => Scalar::Int(1),
        ReduceOp::Max | ReduceOp::Min => Scalar::Bool(false), // replaced by the first element
    };
    let mut acc = vec![init; out.numel()];
    let mut first = vec![true; out.numel()];
    let mut idx = vec![0; a.shape.rank()];
    for (f, &x) in a.data.iter().enumerate() {
        unravel(f, a.shape.dims(), &mut idx);
        for &ax in axes {
            idx[ax] = 0;
        }
        let o = ravel(&idx, out.dims());
        let cur = acc[o];
        acc[o] = match op {
            ReduceOp::Sum if float => Scalar::Float(cur.as_f64() + x.as_f64()),
            ReduceOp::Sum => Scalar::Int(cur.as_i64().wrapping_add(x.as_i64())),
            ReduceOp::Prod if float => Scalar::Float(cur.as_f64() * x.as_f64()),
            ReduceOp::Prod => Scalar::Int(cur.as_i64().wrapping_mul(x.as_i64())),
            ReduceOp::Max | ReduceOp::Min if first[o] => x,
            ReduceOp::Max => {
                binary(kiln_ir::BinaryOp::Maximum, dtype, cur, x).expect("max cannot fail")
            }
            ReduceOp::Min => {
                binary(kiln_ir::BinaryOp::Minimum, dtype, cur, x).expect("min cannot fail")
            }
        };
        first[o] = false;
    }
    acc.into_iter().map(|s| s.cast(dtype)).collect()
}

fn arg_reduce(op: ArgReduceOp, axis: usize, a: &Tensor, out: &Shape) -> Vec<Scalar> {
    let len = a.shape.0[axis];
    let mut oi = vec![0; out.rank()];
    (0..out.numel())
        .map(|f| {
            unravel(f, out.dims(), &mut oi);
            let mut best = 0usize;
            let mut best_v = None::<Scalar>;
            let mut ii = oi.clone();
            for j in 0..len {
                ii[axis] = j;
                let v = a.data[ravel(&ii, a.shape.dims())];
                let better = match best_v {
                    None => true,
                    Some(b) if is_nan(b) => false,
                    Some(_) if is_nan(v) => true,
                    Some(b) => match op {
                        ArgReduceOp::ArgMax => v.as_f64() > b.as_f64() || (int_gt(v, b)),
                        ArgReduceOp::ArgMin => v.as_f64() < b.as_f64() || (int_gt(b, v)),
                    },
                };
                if better {
                    best = j;
                    best_v = Some(v);
                }
            }
            Scalar::Int(best as i64)
        })
        .collect()
}

fn is_nan(s: Scalar) -> bool {
    matches!(s, Scalar::Float(x) if x.is_nan())
}

/// Exact comparison for large integers that `f64` would round together.
fn int_gt(a: Scalar, b: Scalar) -> bool {
    match (a, b) {
        (Scalar::Int(x), Scalar::Int(y)) => x > y,
        _ => false,
    }
}

fn matmul(a: &Tensor, b: &Tensor, dtype: DType, out: &Shape) -> Vec<Scalar> {
    let r = a.shape.rank();
    let (m, k, nn) = (a.shape.0[r - 2], a.shape.0[r - 1], b.shape.0[r - 1]);
    let batch: usize = a.shape.0[..r - 2].iter().product();
    let mut res = Vec::with_capacity(out.numel());
    for bt in 0..batch {
        for i in 0..m {
            for j in 0..nn {
                let mut accf = 0.0f64;
                let mut acci = 0i64;
                for p in 0..k {
                    let x = a.data[bt * m * k + i * k + p];
                    let y = b.data[bt * k * nn + p * nn + j];
                    if dtype.is_float() {
                        accf += x.as_f64() * y.as_f64();
                    } else {
                        acci = acci.wrapping_add(x.as_i64().wrapping_mul(y.as_i64()));
                    }
                }
                let v = if dtype.is_float() {
                    Scalar::Float(accf)
                } else {
                    Scalar::Int(acci)
                };
                res.push(v.cast(dtype));
            }
        }
    }
    res
}

fn take(axis: usize, a: &Tensor, idx: &Tensor, out: &Shape) -> Result<Vec<Scalar>> {
    let size = a.shape.0[axis];
    let ir = idx.shape.rank();
    let mut oi = vec![0; out.rank()];
    let mut ii = vec![0; a.shape.rank()];
    let mut res = Vec::with_capacity(out.numel());
    for f in 0..out.numel() {
        unravel(f, out.dims(), &mut oi);
        let pos = ravel(&oi[axis..axis + ir], idx.shape.dims());
        let raw = idx.data[pos].as_i64();
        let j = if raw < 0 { raw + size as i64 } else { raw };
        if j < 0 || j >= size as i64 {
            return Err(Error::IndexOutOfRange {
                op: "take",
                index: raw,
                axis,
                size,
            });
        }
        ii[..axis].copy_from_slice(&oi[..axis]);
        ii[axis] = j as usize;
        ii[axis + 1..].copy_from_slice(&oi[axis + ir..]);
        res.push(a.data[ravel(&ii, a.shape.dims())]);
    }
    Ok(res)
}

fn top_k(k: usize, indices: bool, a: &Tensor) -> Vec<Scalar> {
    let len = *a.shape.0.last().expect("rank >= 1");
    let rows: usize = a.shape.0[..a.shape.rank() - 1].iter().product();
    let mut res = Vec::with_capacity(rows * k);
    for r in 0..rows {
        let row = &a.data[r * len..(r + 1) * len];
        let mut order: Vec<usize> = (0..len).collect();
        // Descending by value, NaN first (largest), ties by lower index (stable sort).
        order.sort_by(|&i, &j| {
            let (x, y) = (row[i], row[j]);
            match (is_nan(x), is_nan(y)) {
                (true, true) => std::cmp::Ordering::Equal,
                (true, false) => std::cmp::Ordering::Less,
                (false, true) => std::cmp::Ordering::Greater,
                _ => match (x, y) {
                    (Scalar::Int(p), Scalar::Int(q)) => q.cmp(&p),
                    _ => y.as_f64().partial_cmp(&x.as_f64()).expect("no NaN here"),
                },
            }
        });
        for &i in &order[..k] {
            res.push(if indices {
                Scalar::Int(i as i64)
            } else {
                row[i]
            });
        }
    }
    res
}

fn scatter_add(
    axis: usize,
    upd: &Tensor,
    idx: &Tensor,
    dtype: DType,
    out: &Shape,
) -> Result<Vec<Scalar>> {
    let size = out.0[axis];
    let ir = idx.shape.rank();
    let mut acc: Vec<Scalar> = vec![Scalar::Int(0).cast(dtype); out.numel()];
    let mut ui = vec![0; upd.shape.rank()];
    let mut oi = vec![0; out.rank()];
    for (f, &u) in upd.data.iter().enumerate() {
        unravel(f, upd.shape.dims(), &mut ui);
        let raw = idx.data[ravel(&ui[axis..axis + ir], idx.shape.dims())].as_i64();
        let j = if raw < 0 { raw + size as i64 } else { raw };
        if j < 0 || j >= size as i64 {
            return Err(Error::IndexOutOfRange {
                op: "scatter_add",
                index: raw,
                axis,
                size,
            });
        }
        oi[..axis].copy_from_slice(&ui[..axis]);
        oi[axis] = j as usize;
        oi[axis + 1..].copy_from_slice(&ui[axis + ir..]);
        let o = ravel(&oi, out.dims());
        acc[o] = binary(kiln_ir::BinaryOp::Add, dtype, acc[o], u)?.cast(dtype);
    }
    Ok(acc)
}
