//! Builders: numpy semantics (promotion, weak scalars, broadcasting, negative axes, `-1` in
//! reshape, slicing rules) lowered to the explicit primitive ops of [`Op`].
//!
//! Every builder infers the result's dtype and shape *now* and reports a bad shape, axis or
//! dtype as an [`Error`] naming the op, both shapes and a fix; nothing is computed. The
//! returned nodes satisfy [`Op::check`]. Depends on every other module of the crate but
//! `LazyExpr`.

use crate::data::HostData;
use crate::dtype::{DType, Kind, Scalar};
use crate::error::{Error, Result};
use crate::node::{Node, NodeRef};
use crate::op::{ArgReduceOp, Axes, BinaryOp, Distribution, Op, ReduceOp, UnaryOp};
use crate::shape::Shape;
use smallvec::{smallvec, SmallVec};
use std::borrow::Cow;

/// One entry of a slicing specification (see `kiln::s!`).
///
/// ```
/// use kiln_ir::build::SliceArg;
/// let full = SliceArg::range(None, None, 1);
/// let rev = SliceArg::range(None, None, -1);
/// assert_ne!(full, rev);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SliceArg {
    /// `start:stop:step` with Python's rules (negative counts from the end, out-of-range
    /// bounds are clamped, `None` means "from the beginning/to the end" for the step's sign).
    Range {
        /// First index (inclusive).
        start: Option<isize>,
        /// Last index (exclusive).
        stop: Option<isize>,
        /// Step, non-zero.
        step: isize,
    },
    /// A single index: the axis disappears. Must be in `-n..n`.
    Index(isize),
    /// Inserts a new axis of size 1 (numpy's `None`/`np.newaxis`).
    NewAxis,
}

impl SliceArg {
    /// `start:stop:step`.
    ///
    /// ```
    /// let a = kiln_ir::build::SliceArg::range(Some(1), None, 2);
    /// assert!(matches!(a, kiln_ir::build::SliceArg::Range { step: 2, .. }));
    /// ```
    pub fn range(start: Option<isize>, stop: Option<isize>, step: isize) -> SliceArg {
        SliceArg::Range { start, stop, step }
    }
}

/// A new node whose shape may be larger than its operands' (a broadcast, a product, a
/// gather, a new leaf): its size is checked against [`crate::MAX_ELEMENTS`], so no shape
/// anywhere after it can overflow `usize`.
fn mk(op: Op, dtype: DType, shape: Shape, inputs: &[&NodeRef]) -> Result<NodeRef> {
    shape.check_size(op.name(), dtype)?;
    Ok(mk_within(op, dtype, shape, inputs))
}

/// A new node no larger than one of its operands (or rank 0): its size needs no check.
fn mk_within(op: Op, dtype: DType, shape: Shape, inputs: &[&NodeRef]) -> NodeRef {
    debug_assert!(shape.numel() <= crate::MAX_ELEMENTS);
    let inputs: SmallVec<[NodeRef; 2]> = inputs.iter().map(|n| (*n).clone()).collect();
    debug_assert!(
        {
            let ins: Vec<(DType, &Shape)> = inputs.iter().map(|n| (n.dtype(), n.shape())).collect();
            op.check(&ins, dtype, &shape)
                .map_err(|e| panic!("builder broke {op}: {e}"))
                .is_ok()
        },
        "invariant"
    );
    Node::new(op, dtype, shape, inputs)
}

/// A leaf holding `data` with `shape`.
///
/// ```
/// use kiln_ir::{build, HostData, Shape};
/// assert!(build::data(HostData::from(vec![1.0f32; 6]), Shape::from([2, 3])).is_ok());
/// assert!(build::data(HostData::from(vec![1.0f32; 5]), Shape::from([2, 3])).is_err());
/// ```
pub fn data(data: HostData, shape: Shape) -> Result<NodeRef> {
    shape.check_size("from_vec", data.dtype())?;
    if data.len() != shape.numel() {
        return Err(Error::DataLength {
            op: "from_vec",
            len: data.len(),
            expected: shape.numel(),
            shape,
        });
    }
    Ok(Node::with_value(data, shape))
}

/// A rank-0 node holding `value` converted to `dtype`.
///
/// ```
/// use kiln_ir::{build, Scalar, DType};
/// let s = build::scalar(Scalar::Float(2.5), DType::F32);
/// assert_eq!(s.shape().rank(), 0);
/// ```
pub fn scalar(value: Scalar, dtype: DType) -> NodeRef {
    mk_within(Op::Scalar(value.cast(dtype)), dtype, Shape::scalar(), &[])
}

/// `value` broadcast to `shape` (numpy's `full`).
///
/// ```
/// use kiln_ir::{build, Scalar, DType, Shape};
/// let z = build::full(Shape::from([2, 2]), Scalar::Int(0), DType::F32).unwrap();
/// assert_eq!(z.shape().dims(), &[2, 2]);
/// assert!(build::full(Shape::from([1 << 40, 1 << 30]), Scalar::Int(0), DType::F32).is_err());
/// ```
pub fn full(shape: Shape, value: Scalar, dtype: DType) -> Result<NodeRef> {
    let s = scalar(value, dtype);
    broadcast_to(&s, &shape)
}

/// `value` broadcast to the shape and dtype of an existing node (no size check needed:
/// that node's shape was checked when it was built).
///
/// ```
/// use kiln_ir::{build, HostData, Scalar, Shape};
/// let a = build::data(HostData::from(vec![1.0f32; 6]), Shape::from([2, 3])).unwrap();
/// let z = build::full_like(&a, Scalar::Float(0.0));
/// assert_eq!((z.shape().dims(), z.dtype()), (&[2usize, 3][..], a.dtype()));
/// ```
pub fn full_like(like: &NodeRef, value: Scalar) -> NodeRef {
    let s = scalar(value, like.dtype());
    mk_within(Op::BroadcastTo, like.dtype(), like.shape().clone(), &[&s])
}

/// The index along `axis` of every element of `shape`, as `dtype`.
///
/// ```
/// use kiln_ir::{build, DType, Shape};
/// let i = build::iota(Shape::from([3, 4]), 1, DType::I64).unwrap();
/// assert_eq!(i.shape().dims(), &[3, 4]);
/// ```
pub fn iota(shape: Shape, axis: isize, dtype: DType) -> Result<NodeRef> {
    let axis = Shape::normalize_axis("iota", axis, shape.rank())?;
    if dtype == DType::Bool {
        return Err(Error::UnsupportedDType {
            op: "iota",
            dtype,
            hint: "use an integer or float dtype".into(),
        });
    }
    mk(Op::Iota { axis }, dtype, shape, &[])
}

/// Random numbers of a float `dtype` from a counter-based generator.
///
/// ```
/// use kiln_ir::{build, DType, Distribution, Shape};
/// let r = build::random(Shape::from([4]), DType::F32, Distribution::Normal, 7).unwrap();
/// assert_eq!(r.dtype(), DType::F32);
/// ```
pub fn random(shape: Shape, dtype: DType, dist: Distribution, seed: u64) -> Result<NodeRef> {
    if !dtype.is_float() {
        return Err(Error::UnsupportedDType {
            op: "random",
            dtype,
            hint: "random numbers are generated as f32 or f64; cast the result".into(),
        });
    }
    mk(Op::Random { dist, seed }, dtype, shape, &[])
}

/// Conversion to `dtype` (no node if it already has it). See [`Op::Cast`] for the rules.
///
/// ```
/// use kiln_ir::{build, DType, Scalar};
/// let s = build::scalar(Scalar::Float(1.5), DType::F64);
/// assert_eq!(build::cast(&s, DType::I32).dtype(), DType::I32);
/// ```
pub fn cast(a: &NodeRef, dtype: DType) -> NodeRef {
    if a.dtype() == dtype {
        return a.clone();
    }
    mk_within(Op::Cast, dtype, a.shape().clone(), &[a])
}

/// An elementwise unary op. Float-valued ops (`exp`, `sqrt`, ...) cast integers to `f64`;
/// `floor`/`ceil`/`round` of an integer array and `floor`/`ceil` of a `bool` array return it
/// unchanged (as numpy); other `bool` operands are accepted only by `logical_not` and `isnan`.
///
/// ```
/// use kiln_ir::{build, DType, HostData, Shape, UnaryOp};
/// let a = build::data(HostData::from(vec![1i32, 4]), Shape::from([2])).unwrap();
/// assert_eq!(build::unary(UnaryOp::Sqrt, &a).unwrap().dtype(), DType::F64);
/// assert_eq!(build::unary(UnaryOp::Abs, &a).unwrap().dtype(), DType::I32);
/// ```
pub fn unary(op: UnaryOp, a: &NodeRef) -> Result<NodeRef> {
    let d = a.dtype();
    if op == UnaryOp::LogicalNot {
        let b = cast(a, DType::Bool);
        return Ok(mk_within(
            Op::Unary(op),
            DType::Bool,
            a.shape().clone(),
            &[&b],
        ));
    }
    if op == UnaryOp::IsNan {
        return Ok(mk_within(
            Op::Unary(op),
            DType::Bool,
            a.shape().clone(),
            &[a],
        ));
    }
    let rounding = matches!(op, UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round);
    if (d.is_int() && rounding)
        || (d == DType::Bool && matches!(op, UnaryOp::Floor | UnaryOp::Ceil))
    {
        return Ok(a.clone());
    }
    if d == DType::Bool {
        return Err(Error::UnsupportedDType {
            op: op.name(),
            dtype: d,
            hint: "cast the bool array to an integer or float dtype first (`.cast(DType::F32)`)"
                .into(),
        });
    }
    let a = if op.is_float_valued() {
        cast(a, d.to_float())
    } else {
        a.clone()
    };
    Ok(mk_within(
        Op::Unary(op),
        a.dtype(),
        a.shape().clone(),
        &[&a],
    ))
}

/// Broadcasts `a` to `target` (numpy's `broadcast_to`): prepends size-1 axes as needed.
///
/// ```
/// use kiln_ir::{build, Scalar, DType, Shape};
/// let s = build::scalar(Scalar::Int(1), DType::I32);
/// assert_eq!(build::broadcast_to(&s, &Shape::from([2, 3])).unwrap().shape().dims(), &[2, 3]);
/// ```
pub fn broadcast_to(a: &NodeRef, target: &Shape) -> Result<NodeRef> {
    if a.shape() == target {
        return Ok(a.clone());
    }
    if !a.shape().broadcasts_to(target) {
        return Err(Error::ShapeMismatch {
            op: "broadcast_to",
            lhs: a.shape().clone(),
            rhs: target.clone(),
            hint:
                "each dimension of the array must equal the target's or be 1 (aligned at the right)"
                    .into(),
        });
    }
    let mut padded = Shape(smallvec![1; target.rank() - a.rank_of()]);
    padded.0.extend_from_slice(a.shape().dims());
    if &padded == target {
        return Ok(reshape_to(a, padded));
    }
    // One node, the missing leading axes included (no `Reshape` before it): a bias or a
    // scalar broadcast in a loop costs one node to build, trace and drop, not two.
    mk(Op::BroadcastTo, a.dtype(), target.clone(), &[a])
}

trait RankOf {
    fn rank_of(&self) -> usize;
}
impl RankOf for NodeRef {
    fn rank_of(&self) -> usize {
        self.shape().rank()
    }
}

/// `a` cast to `dtype`, borrowed when it already is.
fn cast_ref(a: &NodeRef, dtype: DType) -> Cow<'_, NodeRef> {
    if a.dtype() == dtype {
        Cow::Borrowed(a)
    } else {
        Cow::Owned(cast(a, dtype))
    }
}

/// `a` cast to `dtype` and broadcast to `shape`, borrowed when it already is both (no handle
/// cloned and dropped: two atomic operations each, a tenth of building a node).
fn conform<'a>(a: &'a NodeRef, dtype: DType, shape: &Shape) -> Result<Cow<'a, NodeRef>> {
    if a.dtype() == dtype && a.shape() == shape {
        return Ok(Cow::Borrowed(a));
    }
    Ok(Cow::Owned(broadcast_to(&cast(a, dtype), shape)?))
}

fn reshape_to(a: &NodeRef, shape: Shape) -> NodeRef {
    if a.shape() == &shape {
        return a.clone();
    }
    mk_within(Op::Reshape, a.dtype(), shape, &[a])
}

/// The result dtype and the op actually computed for `op` on operands promoted to `dt`.
fn binary_plan(op: BinaryOp, dt: DType, lhs: &Shape, rhs: &Shape) -> Result<(DType, BinaryOp)> {
    use BinaryOp::*;
    let bool_err = |hint: &str| Error::UnsupportedDType {
        op: op.name(),
        dtype: DType::Bool,
        hint: hint.into(),
    };
    let _ = (lhs, rhs);
    Ok(match op {
        Add | Maximum if dt == DType::Bool => (DType::Bool, LogicalOr),
        Mul | Minimum if dt == DType::Bool => (DType::Bool, LogicalAnd),
        Sub if dt == DType::Bool => {
            return Err(bool_err("boolean subtract is not supported (as in numpy): use `ne` (logical xor) or cast to an integer dtype"))
        }
        FloorDiv | Rem | Pow if dt == DType::Bool => {
            return Err(bool_err("cast the bool operands to an integer dtype first"))
        }
        Div => (dt.to_float(), Div),
        LogicalAnd | LogicalOr => (DType::Bool, op),
        _ => (dt, op),
    })
}

/// An elementwise binary op of two arrays with numpy promotion and broadcasting.
///
/// Integer `div` is true division (result `f64`, as numpy's `/`); `floor_divide` and
/// `remainder` round toward negative infinity; bool `add`/`mul`/`maximum`/`minimum` are
/// logical or/and, bool `sub` is an error (as in numpy).
///
/// ```
/// use kiln_ir::{build, BinaryOp, HostData, Shape};
/// let a = build::data(HostData::from(vec![1.0f32; 6]), Shape::from([2, 3])).unwrap();
/// let b = build::data(HostData::from(vec![1.0f32; 3]), Shape::from([3])).unwrap();
/// assert_eq!(build::binary(BinaryOp::Add, &a, &b).unwrap().shape().dims(), &[2, 3]);
/// let c = build::data(HostData::from(vec![1.0f32; 2]), Shape::from([2])).unwrap();
/// let err = build::binary(BinaryOp::Add, &a, &c).unwrap_err().to_string();
/// assert!(err.contains("(2, 3)") && err.contains("(2,)"));
/// ```
pub fn binary(op: BinaryOp, a: &NodeRef, b: &NodeRef) -> Result<NodeRef> {
    let dt = DType::promote(a.dtype(), b.dtype());
    binary_in(op, a, b, dt)
}

fn binary_in(op: BinaryOp, a: &NodeRef, b: &NodeRef, dt: DType) -> Result<NodeRef> {
    let shape = Shape::broadcast(op.name(), a.shape(), b.shape())?;
    let (compute, op) = binary_plan(op, dt, a.shape(), b.shape())?;
    let (ca, cb) = if matches!(op, BinaryOp::LogicalAnd | BinaryOp::LogicalOr) {
        (DType::Bool, DType::Bool)
    } else {
        (compute, compute)
    };
    // Operands keep their shapes: the node broadcasts them (one node, not a broadcast
    // node per operand; `LazyExpr::from_trace` makes it explicit for the compiler).
    let a = cast_ref(a, ca);
    let b = cast_ref(b, cb);
    let out = if op.is_predicate() {
        DType::Bool
    } else {
        compute
    };
    mk(Op::Binary(op), out, shape, &[&a, &b])
}

/// A binary op between an array and a *weak* Rust scalar (NEP 50): `f32_array * 2.0` stays
/// `f32`, `i32_array + 1` stays `i32`. `scalar_on_left` puts the scalar first (`2.0 - x`).
/// An integer scalar that does not fit the array's integer dtype is an error, except in a
/// comparison, which is then computed exactly (as numpy 2).
///
/// ```
/// use kiln_ir::{build, BinaryOp, DType, HostData, Scalar, Shape};
/// let a = build::data(HostData::from(vec![1.0f32, 2.0]), Shape::from([2])).unwrap();
/// let y = build::binary_scalar(BinaryOp::Mul, &a, Scalar::Float(2.0), false).unwrap();
/// assert_eq!(y.dtype(), DType::F32);
/// ```
pub fn binary_scalar(
    op: BinaryOp,
    a: &NodeRef,
    value: Scalar,
    scalar_on_left: bool,
) -> Result<NodeRef> {
    let mut dt = DType::promote_weak(a.dtype(), value.kind());
    if value.kind() == Kind::Int && !value.fits(dt) {
        if !op.is_comparison() {
            return Err(Error::ScalarOverflow {
                op: op.name(),
                value: value.to_string(),
                dtype: dt,
            });
        }
        // numpy 2 compares an out-of-range Python int exactly (`i32_array < 2**40` is all
        // true): compare in `i64`, which holds both operands.
        dt = DType::I64;
    }
    let s = scalar(value, dt);
    if scalar_on_left {
        binary_in(op, &s, a, dt)
    } else {
        binary_in(op, a, &s, dt)
    }
}

/// `where(cond, a, b)`: elements of `a` where `cond` is true (non-zero), else of `b`; all
/// three broadcast together, `a` and `b` promote.
///
/// ```
/// use kiln_ir::{build, HostData, Shape};
/// let c = build::data(HostData::from(vec![true, false]), Shape::from([2])).unwrap();
/// let a = build::data(HostData::from(vec![1.0f64]), Shape::from([1])).unwrap();
/// let b = build::data(HostData::from(vec![0i32, 5]), Shape::from([2])).unwrap();
/// assert_eq!(build::where_(&c, &a, &b).unwrap().shape().dims(), &[2]);
/// ```
pub fn where_(cond: &NodeRef, a: &NodeRef, b: &NodeRef) -> Result<NodeRef> {
    let ab = Shape::broadcast("where", a.shape(), b.shape())?;
    let shape = Shape::broadcast("where", cond.shape(), &ab)?;
    let dt = DType::promote(a.dtype(), b.dtype());
    let c = conform(cond, DType::Bool, &shape)?;
    let a = conform(a, dt, &shape)?;
    let b = conform(b, dt, &shape)?;
    mk(Op::Where, dt, shape, &[&c, &a, &b])
}

/// Reshape with numpy's rules: at most one `-1`, inferred from the element count.
///
/// ```
/// use kiln_ir::{build, HostData, Shape};
/// let a = build::data(HostData::from(vec![0i64; 12]), Shape::from([3, 4])).unwrap();
/// assert_eq!(build::reshape(&a, &[2, -1]).unwrap().shape().dims(), &[2, 6]);
/// assert!(build::reshape(&a, &[5, -1]).is_err());
/// ```
pub fn reshape(a: &NodeRef, dims: &[isize]) -> Result<NodeRef> {
    let err = |hint: String| Error::InvalidReshape {
        op: "reshape",
        from: a.shape().clone(),
        to: format!("{dims:?}"),
        hint,
    };
    let mut infer = None;
    let mut known: usize = 1;
    let mut out: SmallVec<[usize; 4]> = SmallVec::with_capacity(dims.len());
    for (i, &d) in dims.iter().enumerate() {
        if d == -1 {
            if infer.replace(i).is_some() {
                return Err(err("only one dimension can be -1".into()));
            }
            out.push(0);
        } else if d < 0 {
            return Err(err(format!(
                "dimension {d} is negative; only -1 (infer) is allowed"
            )));
        } else {
            known = known.saturating_mul(d as usize);
            out.push(d as usize);
        }
    }
    let numel = a.shape().numel();
    if let Some(i) = infer {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(err(format!(
                "the other dimensions multiply to {known}, which does not divide {numel}"
            )));
        }
        out[i] = numel / known;
    } else if known != numel {
        return Err(err(format!(
            "the new shape has {known} elements; it needs {numel}"
        )));
    }
    Ok(reshape_to(a, Shape(out)))
}

/// Axis permutation (numpy's `transpose(axes)`); negative axes allowed.
///
/// ```
/// use kiln_ir::{build, HostData, Shape};
/// let a = build::data(HostData::from(vec![0f32; 6]), Shape::from([1, 2, 3])).unwrap();
/// assert_eq!(build::permute(&a, &[2, 0, 1]).unwrap().shape().dims(), &[3, 1, 2]);
/// assert!(build::permute(&a, &[0, 0, 1]).is_err());
/// ```
pub fn permute(a: &NodeRef, axes: &[isize]) -> Result<NodeRef> {
    let r = a.shape().rank();
    if axes.len() != r {
        return Err(Error::InvalidArgument {
            op: "permute",
            message: format!(
                "{} axes given for an array of shape {}",
                axes.len(),
                a.shape()
            ),
            hint: format!("give a permutation of 0..{r}"),
        });
    }
    let mut perm: Axes = SmallVec::new();
    for &ax in axes {
        let n = Shape::normalize_axis("permute", ax, r)?;
        if perm.contains(&n) {
            return Err(Error::InvalidArgument {
                op: "permute",
                message: format!("axes {axes:?} repeat axis {ax}"),
                hint: format!("give a permutation of 0..{r}"),
            });
        }
        perm.push(n);
    }
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(a.clone());
    }
    let shape = Shape(perm.iter().map(|&p| a.shape().0[p]).collect());
    Ok(mk_within(Op::Permute(perm), a.dtype(), shape, &[a]))
}

/// Slicing with numpy's rules for `start:stop:step`, integer indices and new axes; axes not
/// mentioned are taken whole.
///
/// ```
/// use kiln_ir::{build, build::SliceArg, HostData, Shape};
/// let a = build::data(HostData::from(vec![0f32; 12]), Shape::from([3, 4])).unwrap();
/// let s = build::slice(&a, &[SliceArg::Index(-1), SliceArg::range(None, None, -2)]).unwrap();
/// assert_eq!(s.shape().dims(), &[2]);
/// assert!(build::slice(&a, &[SliceArg::Index(3)]).is_err());
/// ```
pub fn slice(a: &NodeRef, args: &[SliceArg]) -> Result<NodeRef> {
    let shape = a.shape();
    let consuming = args
        .iter()
        .filter(|s| !matches!(s, SliceArg::NewAxis))
        .count();
    if consuming > shape.rank() {
        return Err(Error::InvalidArgument {
            op: "slice",
            message: format!("{consuming} indices given for an array of shape {shape}"),
            hint: "give at most one index or range per dimension".into(),
        });
    }
    let mut start: SmallVec<[i64; 4]> = SmallVec::new();
    let mut step: SmallVec<[i64; 4]> = SmallVec::new();
    let mut sliced: SmallVec<[usize; 4]> = SmallVec::new();
    let mut out: SmallVec<[usize; 4]> = SmallVec::new();
    let mut axis = 0;
    for arg in args.iter().copied().chain(std::iter::repeat_n(
        SliceArg::range(None, None, 1),
        shape.rank() - consuming,
    )) {
        match arg {
            SliceArg::NewAxis => out.push(1),
            SliceArg::Index(i) => {
                let n = shape.0[axis] as isize;
                if i >= n || i < -n {
                    return Err(Error::IndexOutOfRange {
                        op: "slice",
                        index: i as i64,
                        axis,
                        size: n as usize,
                    });
                }
                let i = if i < 0 { i + n } else { i };
                start.push(i as i64);
                step.push(1);
                sliced.push(1);
                axis += 1;
            }
            SliceArg::Range {
                start: b,
                stop: e,
                step: st,
            } => {
                if st == 0 {
                    return Err(Error::InvalidArgument {
                        op: "slice",
                        message: format!("step is zero on axis {axis}"),
                        hint: "use a non-zero step (negative steps go backwards)".into(),
                    });
                }
                let n = shape.0[axis] as i64;
                let (b, len) = slice_bounds(n, b, e, st as i64);
                start.push(b);
                // With at most one element the step is never applied: storing 1 keeps every
                // later stride product in range (`a[::isize::MIN]`); with two or more it is
                // below the axis' size.
                step.push(if len <= 1 { 1 } else { st as i64 });
                sliced.push(len);
                out.push(len);
                axis += 1;
            }
        }
    }
    let identity = sliced
        .iter()
        .zip(shape.dims())
        .zip(&step)
        .all(|((l, n), s)| l == n && *s == 1);
    let s = if identity {
        a.clone()
    } else {
        // Windows of length 0 start at 0 so the verifier's bounds check is trivial.
        for (b, l) in start.iter_mut().zip(&sliced) {
            if *l == 0 {
                *b = 0;
            }
        }
        mk_within(Op::Slice { start, step }, a.dtype(), Shape(sliced), &[a])
    };
    Ok(reshape_to(&s, Shape(out)))
}

/// Python's `slice.indices` followed by the length computation: returns `(first, len)`.
fn slice_bounds(n: i64, start: Option<isize>, stop: Option<isize>, step: i64) -> (i64, usize) {
    let norm = |v: isize, lo: i64, hi: i64| -> i64 {
        let v = v as i64;
        let v = if v < 0 { v + n } else { v };
        v.clamp(lo, hi)
    };
    let (b, e) = if step > 0 {
        (
            start.map_or(0, |v| norm(v, 0, n)),
            stop.map_or(n, |v| norm(v, 0, n)),
        )
    } else {
        (
            start.map_or(n - 1, |v| norm(v, -1, n - 1)),
            stop.map_or(-1, |v| norm(v, -1, n - 1)),
        )
    };
    // in i128: a step of i64::MAX or i64::MIN must not overflow the rounding
    let (b128, e128, step) = (b as i128, e as i128, step as i128);
    let len = if step > 0 {
        if e128 > b128 {
            (e128 - b128 + step - 1) / step
        } else {
            0
        }
    } else if b128 > e128 {
        (b128 - e128 - step - 1) / -step
    } else {
        0
    };
    (b, len as usize)
}

/// Concatenation along `axis`; dtypes promote; all other dimensions must agree.
///
/// ```
/// use kiln_ir::{build, HostData, Shape};
/// let a = build::data(HostData::from(vec![0f32; 6]), Shape::from([2, 3])).unwrap();
/// let b = build::data(HostData::from(vec![0f32; 3]), Shape::from([1, 3])).unwrap();
/// assert_eq!(build::concat(&[a.clone(), b.clone()], 0).unwrap().shape().dims(), &[3, 3]);
/// assert!(build::concat(&[a, b], 1).is_err());
/// ```
pub fn concat(parts: &[NodeRef], axis: isize) -> Result<NodeRef> {
    let Some(first) = parts.first() else {
        return Err(Error::InvalidArgument {
            op: "concat",
            message: "no arrays given".into(),
            hint: "pass at least one array".into(),
        });
    };
    let rank = first.shape().rank();
    if rank == 0 {
        return Err(Error::InvalidArgument {
            op: "concat",
            message: "zero-dimensional arrays cannot be concatenated".into(),
            hint: "use stack, or expand_dims first".into(),
        });
    }
    let ax = Shape::normalize_axis("concat", axis, rank)?;
    let mut dt = first.dtype();
    let mut total = 0;
    for p in parts {
        let ok = p.shape().rank() == rank
            && (0..rank).all(|i| i == ax || p.shape().0[i] == first.shape().0[i]);
        if !ok {
            return Err(Error::ShapeMismatch {
                op: "concat",
                lhs: first.shape().clone(),
                rhs: p.shape().clone(),
                hint: format!("all arrays must have the same rank and equal dimensions except along axis {ax}"),
            });
        }
        dt = DType::promote(dt, p.dtype());
        total = add_dims("concat", total, p.shape().0[ax])?;
    }
    if parts.len() == 1 {
        return Ok(first.clone());
    }
    let cast_parts: Vec<NodeRef> = parts.iter().map(|p| cast(p, dt)).collect();
    let refs: Vec<&NodeRef> = cast_parts.iter().collect();
    let mut shape = first.shape().clone();
    shape.0[ax] = total;
    mk(Op::Concat { axis: ax }, dt, shape, &refs)
}

/// `a + b` for the sum of two dimensions, an error naming `op` past `usize` (each is a
/// real dimension, the sum may still overflow: `concat` of two `[1 << 63]` arrays).
fn add_dims(op: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_add(b).ok_or_else(|| Error::InvalidArgument {
        op,
        message: format!(
            "the sizes along the axis add up to {} ({a} + {b}), more than an array may have",
            a as u128 + b as u128
        ),
        hint: "use smaller arrays".into(),
    })
}

fn drop_axes(shape: &Shape, axes: &[usize]) -> Shape {
    Shape(
        shape
            .0
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, &d)| d)
            .collect(),
    )
}

/// A reduction over `axes` (`None`: all axes), with numpy's dtypes: `sum`/`prod` of bool and
/// `i32` give `i64`; `max`/`min` keep the dtype and need a non-empty reduced axis.
///
/// ```
/// use kiln_ir::{build, HostData, ReduceOp, Shape};
/// let a = build::data(HostData::from(vec![0f32; 6]), Shape::from([2, 3])).unwrap();
/// assert_eq!(build::reduce(ReduceOp::Sum, &a, Some(&[-1]), false).unwrap().shape().dims(), &[2]);
/// assert_eq!(build::reduce(ReduceOp::Max, &a, None, true).unwrap().shape().dims(), &[1, 1]);
/// ```
pub fn reduce(
    op: ReduceOp,
    a: &NodeRef,
    axes: Option<&[isize]>,
    keepdims: bool,
) -> Result<NodeRef> {
    let rank = a.shape().rank();
    let axes: Vec<usize> = match axes {
        Some(ax) => Shape::normalize_axes(op.name(), ax, rank)?,
        None => (0..rank).collect(),
    };
    if matches!(op, ReduceOp::Max | ReduceOp::Min) {
        if let Some(&z) = axes.iter().find(|&&x| a.shape().0[x] == 0) {
            return Err(Error::InvalidArgument {
                op: op.name(),
                message: format!(
                    "axis {z} of shape {} has size zero and {} has no identity",
                    a.shape(),
                    op.name()
                ),
                hint: "reduce a non-empty axis, or use `where`/`concat` to supply an initial value"
                    .into(),
            });
        }
    }
    let dt = match (op, a.dtype()) {
        (ReduceOp::Sum | ReduceOp::Prod, DType::Bool | DType::I32) => DType::I64,
        (_, d) => d,
    };
    let a = cast(a, dt);
    let mut kept = a.shape().clone();
    for &x in &axes {
        kept.0[x] = 1;
    }
    let r = mk_within(
        Op::Reduce {
            op,
            axes: axes.iter().copied().collect(),
        },
        dt,
        kept,
        &[&a],
    );
    Ok(if keepdims {
        r
    } else {
        reshape_to(&r, drop_axes(a.shape(), &axes))
    })
}

/// `argmax`/`argmin` along `axis` (`None`: of the flattened array), as `i64`; ties and NaN
/// give the first index, as in numpy.
///
/// ```
/// use kiln_ir::{build, ArgReduceOp, HostData, Shape};
/// let a = build::data(HostData::from(vec![0f32; 6]), Shape::from([2, 3])).unwrap();
/// assert_eq!(build::arg_reduce(ArgReduceOp::ArgMax, &a, Some(1), false).unwrap().shape().dims(), &[2]);
/// assert_eq!(build::arg_reduce(ArgReduceOp::ArgMax, &a, None, false).unwrap().shape().rank(), 0);
/// ```
pub fn arg_reduce(
    op: ArgReduceOp,
    a: &NodeRef,
    axis: Option<isize>,
    keepdims: bool,
) -> Result<NodeRef> {
    let (src, ax, out_shape) = match axis {
        None => {
            let flat = reshape_to(a, Shape::from([a.shape().numel()]));
            let out = if keepdims {
                Shape(smallvec![1; a.shape().rank()])
            } else {
                Shape::scalar()
            };
            (flat, 0, out)
        }
        Some(ax) => {
            let ax = Shape::normalize_axis(op.name(), ax, a.shape().rank())?;
            let mut kept = a.shape().clone();
            kept.0[ax] = 1;
            let out = if keepdims {
                kept
            } else {
                drop_axes(a.shape(), &[ax])
            };
            (a.clone(), ax, out)
        }
    };
    if src.shape().0[ax] == 0 {
        return Err(Error::InvalidArgument {
            op: op.name(),
            message: format!(
                "attempt to get {} of an empty sequence (shape {})",
                op.name(),
                a.shape()
            ),
            hint: "the reduced axis must have at least one element".into(),
        });
    }
    let mut kept = src.shape().clone();
    kept.0[ax] = 1;
    let r = mk_within(Op::ArgReduce { op, axis: ax }, DType::I64, kept, &[&src]);
    Ok(reshape_to(&r, out_shape))
}

/// Matrix product with numpy's `matmul` semantics: 1-D operands are promoted to matrices
/// (and the added axis removed), batch dimensions broadcast. Two `bool` operands give a
/// `bool` result (or of ands), as numpy.
///
/// ```
/// use kiln_ir::{build, HostData, Shape};
/// let a = build::data(HostData::from(vec![0f32; 24]), Shape::from([2, 3, 4])).unwrap();
/// let b = build::data(HostData::from(vec![0f32; 4]), Shape::from([4])).unwrap();
/// assert_eq!(build::matmul(&a, &b).unwrap().shape().dims(), &[2, 3]);
/// let err = build::matmul(&b, &a).unwrap_err().to_string();
/// assert!(err.contains("(4,)") && err.contains("(2, 3, 4)"));
/// ```
pub fn matmul(a: &NodeRef, b: &NodeRef) -> Result<NodeRef> {
    let (sa, sb) = (a.shape(), b.shape());
    let mismatch = |hint: String| Error::ShapeMismatch {
        op: "matmul",
        lhs: sa.clone(),
        rhs: sb.clone(),
        hint,
    };
    if sa.rank() == 0 || sb.rank() == 0 {
        return Err(mismatch(
            "matmul needs operands of rank at least 1; use `mul` for scalars".into(),
        ));
    }
    let dt = DType::promote(a.dtype(), b.dtype());
    if dt == DType::Bool {
        // numpy: the logical or of ands. Count the true products in i64, test for non-zero.
        let r = matmul(&cast(a, DType::I64), &cast(b, DType::I64))?;
        return Ok(cast(&r, DType::Bool));
    }
    let a2: Cow<'_, NodeRef> = if sa.rank() == 1 {
        Cow::Owned(reshape_to(a, Shape::from([1, sa.0[0]])))
    } else {
        Cow::Borrowed(a)
    };
    let b2: Cow<'_, NodeRef> = if sb.rank() == 1 {
        Cow::Owned(reshape_to(b, Shape::from([sb.0[0], 1])))
    } else {
        Cow::Borrowed(b)
    };
    let (ra, rb) = (a2.shape().rank(), b2.shape().rank());
    let (m, k) = (a2.shape().0[ra - 2], a2.shape().0[ra - 1]);
    let (k2, n) = (b2.shape().0[rb - 2], b2.shape().0[rb - 1]);
    if k != k2 {
        return Err(mismatch(format!(
            "the contracted dimensions differ ({k} vs {k2}): the last axis of the left operand must equal the \
             second-to-last of the right (transpose one operand?)"
        )));
    }
    let batch_a = Shape::from(&a2.shape().0[..ra - 2]);
    let batch_b = Shape::from(&b2.shape().0[..rb - 2]);
    let batch = Shape::broadcast("matmul", &batch_a, &batch_b).map_err(|_| {
        mismatch(format!(
            "the batch dimensions {batch_a} and {batch_b} do not broadcast"
        ))
    })?;
    let with = |tail: [usize; 2]| {
        let mut s = batch.clone();
        s.0.extend_from_slice(&tail);
        s
    };
    let a3 = conform(&a2, dt, &with([m, k]))?;
    let b3 = conform(&b2, dt, &with([k, n]))?;
    let r = mk(Op::MatMul, dt, with([m, n]), &[&a3, &b3])?;
    let mut out = batch.clone();
    if sa.rank() > 1 {
        out.0.push(m);
    }
    if sb.rank() > 1 {
        out.0.push(n);
    }
    Ok(reshape_to(&r, out))
}

/// Gather along `axis` with integer `indices` of any shape (numpy's `take`, the embedding
/// lookup). Indices are checked at evaluation: `-n..n` is valid.
///
/// ```
/// use kiln_ir::{build, HostData, Shape};
/// let table = build::data(HostData::from(vec![0f32; 20]), Shape::from([10, 2])).unwrap();
/// let ids = build::data(HostData::from(vec![3i64, 3, 9]), Shape::from([3])).unwrap();
/// assert_eq!(build::take(&table, &ids, 0).unwrap().shape().dims(), &[3, 2]);
/// ```
pub fn take(a: &NodeRef, indices: &NodeRef, axis: isize) -> Result<NodeRef> {
    if !indices.dtype().is_int() {
        return Err(Error::UnsupportedDType {
            op: "take",
            dtype: indices.dtype(),
            hint: "indices must be i32 or i64; cast them first".into(),
        });
    }
    let ax = Shape::normalize_axis("take", axis, a.shape().rank())?;
    let mut shape: SmallVec<[usize; 4]> = SmallVec::from_slice(&a.shape().0[..ax]);
    shape.extend_from_slice(indices.shape().dims());
    shape.extend_from_slice(&a.shape().0[ax + 1..]);
    if a.shape().0[ax] == 0 && indices.shape().numel() > 0 {
        return Err(Error::InvalidArgument {
            op: "take",
            message: format!("cannot take from an empty axis {ax} of shape {}", a.shape()),
            hint: "the indexed axis must be non-empty".into(),
        });
    }
    mk(
        Op::Take { axis: ax },
        a.dtype(),
        Shape(shape),
        &[a, indices],
    )
}

/// The `k` largest elements along the last axis and their `i64` indices, in descending
/// order; ties go to the lower index, NaN counts as the largest value.
///
/// ```
/// use kiln_ir::{build, HostData, Shape};
/// let a = build::data(HostData::from(vec![0f32; 10]), Shape::from([2, 5])).unwrap();
/// let (v, i) = build::top_k(&a, 3).unwrap();
/// assert_eq!(v.shape().dims(), &[2, 3]);
/// assert!(build::top_k(&a, 6).is_err());
/// ```
pub fn top_k(a: &NodeRef, k: usize) -> Result<(NodeRef, NodeRef)> {
    let s = a.shape();
    if s.rank() == 0 || k > s.0[s.rank() - 1] {
        return Err(Error::InvalidArgument {
            op: "top_k",
            message: format!(
                "k = {k} but the last axis of shape {s} has {} elements",
                s.0.last().copied().unwrap_or(0)
            ),
            hint: "choose k no larger than the last dimension".into(),
        });
    }
    let mut out = s.clone();
    let r = out.rank();
    out.0[r - 1] = k;
    let v = mk_within(Op::TopK { k, indices: false }, a.dtype(), out.clone(), &[a]);
    let i = mk_within(Op::TopK { k, indices: true }, DType::I64, out, &[a]);
    Ok((v, i))
}

/// Scatter-add (the adjoint of [`take`]): a `shape` array of zeros with `updates` added at
/// `indices` along `axis`; repeated indices accumulate. `updates` must have shape
/// `shape[..axis] + indices.shape + shape[axis+1..]`.
///
/// ```
/// use kiln_ir::{build, HostData, Shape};
/// let u = build::data(HostData::from(vec![1.0f32; 6]), Shape::from([3, 2])).unwrap();
/// let i = build::data(HostData::from(vec![0i64, 2, 0]), Shape::from([3])).unwrap();
/// let s = build::scatter_add(&u, &i, 0, Shape::from([4, 2])).unwrap();
/// assert_eq!(s.shape().dims(), &[4, 2]);
/// assert!(build::scatter_add(&u, &i, 1, Shape::from([4, 2])).is_err());
/// ```
pub fn scatter_add(
    updates: &NodeRef,
    indices: &NodeRef,
    axis: isize,
    shape: Shape,
) -> Result<NodeRef> {
    if !indices.dtype().is_int() {
        return Err(Error::UnsupportedDType {
            op: "scatter_add",
            dtype: indices.dtype(),
            hint: "indices must be i32 or i64; cast them first".into(),
        });
    }
    if updates.dtype() == DType::Bool {
        return Err(Error::UnsupportedDType {
            op: "scatter_add",
            dtype: DType::Bool,
            hint: "scatter-add accumulates numbers; cast the updates first".into(),
        });
    }
    let ax = Shape::normalize_axis("scatter_add", axis, shape.rank())?;
    let mut want: SmallVec<[usize; 4]> = SmallVec::from_slice(&shape.0[..ax]);
    want.extend_from_slice(indices.shape().dims());
    want.extend_from_slice(&shape.0[ax + 1..]);
    if updates.shape().dims() != &want[..] {
        return Err(Error::ShapeMismatch {
            op: "scatter_add",
            lhs: updates.shape().clone(),
            rhs: Shape(want),
            hint: format!("updates must have the target's shape with axis {ax} replaced by the indices' shape"),
        });
    }
    mk(
        Op::ScatterAdd { axis: ax },
        updates.dtype(),
        shape,
        &[updates, indices],
    )
}

/// Identity that blocks gradients.
///
/// ```
/// use kiln_ir::{build, HostData, Shape};
/// let a = build::data(HostData::from(vec![1.0f64]), Shape::from([1])).unwrap();
/// assert_eq!(build::stop_gradient(&a).op().name(), "stop_gradient");
/// ```
pub fn stop_gradient(a: &NodeRef) -> NodeRef {
    mk_within(Op::StopGradient, a.dtype(), a.shape().clone(), &[a])
}
