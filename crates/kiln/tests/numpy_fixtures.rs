//! kiln against numpy: golden results for every op and dtype.
//!
//! `fixtures/numpy_ops.json` is written by `fixtures/gen_numpy_fixtures.py` (run
//! `python3 crates/kiln/tests/fixtures/gen_numpy_fixtures.py` to regenerate it; the generator's
//! docstring describes the format). Floats are parsed with serde_json's `float_roundtrip`
//! feature (enabled in this crate's dev-dependencies): the default parser can be off by an ulp. Each case names an op, its inputs (arrays or weak
//! scalars) and arguments, and either numpy's outputs or the stage at which kiln must reject
//! it (`"build"`: the `try_` method returns `Err`; `"eval"`: it builds, evaluation fails).
//!
//! Every case is run through the public [`kiln::Array`] API (the `try_` methods) and all
//! failures are collected, so one run reports every mismatch; a panic inside kiln is a
//! failure of that case, not of the run.
//!
//! # Comparison
//! dtype and shape must match exactly; bool and integer values exactly. Float values:
//! NaN must meet NaN, infinities must match exactly, finite values within
//! `atol + rtol * |expected|` of numpy's, with per-op tolerances (see [`tolerance`]):
//! * exact (`rtol = 0`) for everything numpy and kiln both compute correctly rounded: movement,
//!   casts, comparisons, `where`/`clip`, `neg abs sign floor ceil round relu square recip
//!   sqrt`, `+ - * /` (kiln's reference computes `f32` ops in `f64` and rounds once, which
//!   gives the correctly rounded `f32` result for these), `maximum minimum`, `floor_div rem`,
//!   `max min`, indexing ops. Here the sign of a zero must match too, except for
//!   `maximum minimum clip relu max min`: numpy's SIMD loops return either zero for
//!   `maximum(0.0, -0.0)`.
//! * transcendental functions (`exp log log1p expm1 rsqrt sin cos tanh sigmoid pow`): numpy
//!   uses its own SIMD `f32`/`f64` implementations (documented up to ~4 ulp, depending on the
//!   CPU), kiln the `f64` libm rounded to the dtype: `f32` rtol 1e-6 (≈8 ulp), `f64` rtol
//!   1e-14 (≈45 ulp). Observed on x86-64 with AVX-512: at most 2 ulp.
//! * accumulations (`sum mean prod matmul dot`): kiln's reference accumulates in `f64`,
//!   numpy in the dtype (pairwise for sums), so `f32` results differ in the last bits:
//!   `f32` rtol 1e-5 / atol 1e-5, `f64` rtol 1e-12 / atol 1e-12 (inputs are O(1)-O(10);
//!   observed at most 3e-6 relative for `f32`, 5e-15 for `f64`).
//! * `logsumexp softmax log_softmax`: scipy's formulas evaluated in `f64` by the generator,
//!   kiln's in the dtype: `f32` rtol 2e-6 / atol 2e-6, `f64` rtol 1e-12 / atol 1e-13.
//! * `arange linspace`: numpy fills `start + i * delta` in the dtype, kiln computes in `f64`
//!   and rounds once: `f32` rtol 2e-7 (≈1 ulp) / atol 1e-7, `f64` rtol 1e-15 / atol 1e-15.

mod common;

use kiln::{Array, DType, Device, Operand, Scalar, SliceArg};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};

const FIXTURES: &str = include_str!("fixtures/numpy_ops.json");

/// Every op the fixtures must cover (a dropped op fails `fixtures_cover_every_op`).
const REQUIRED_OPS: &[&str] = &[
    // creation
    "zeros",
    "ones",
    "full",
    "arange",
    "linspace",
    "eye",
    // unary
    "neg",
    "abs",
    "sign",
    "exp",
    "log",
    "log1p",
    "expm1",
    "sqrt",
    "rsqrt",
    "square",
    "recip",
    "sin",
    "cos",
    "tanh",
    "sigmoid",
    "relu",
    "floor",
    "ceil",
    "round",
    "isnan",
    "logical_not",
    // binary
    "add",
    "sub",
    "mul",
    "div",
    "floor_div",
    "rem",
    "pow",
    "maximum",
    "minimum",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    // elementwise others
    "where",
    "clip",
    "cast",
    // movement
    "reshape",
    "transpose",
    "permute",
    "expand_dims",
    "squeeze",
    "broadcast_to",
    "slice",
    "concat",
    "stack",
    // reductions
    "sum",
    "mean",
    "prod",
    "max",
    "min",
    "argmax",
    "argmin",
    "logsumexp",
    "softmax",
    "log_softmax",
    // linear algebra and indexing
    "matmul",
    "dot",
    "take",
    "scatter_add",
    "one_hot",
    "top_k",
];

const DTYPES: [DType; 5] = [DType::Bool, DType::I32, DType::I64, DType::F32, DType::F64];

// ---------------------------------------------------------------------------------------
// fixture data

#[derive(Clone, Debug, PartialEq)]
enum Values {
    Bool(Vec<bool>),
    Int(Vec<i64>),
    Float(Vec<f64>),
}

#[derive(Clone, Debug)]
struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    values: Values,
}

#[derive(Clone)]
enum Input {
    Array(Array),
    Weak(Scalar),
}

impl Input {
    fn operand(&self) -> Operand {
        match self {
            Input::Array(a) => Operand::Array(a.clone()),
            Input::Weak(s) => Operand::Scalar(*s),
        }
    }
}

fn parse_f64(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().expect("a float"),
        Value::String(s) => match s.as_str() {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            other => panic!("bad float {other:?}"),
        },
        other => panic!("bad float {other}"),
    }
}

fn parse_dtype(v: &Value) -> DType {
    let s = v.as_str().expect("a dtype name");
    let d = DType::parse(s).unwrap_or_else(|| panic!("unknown dtype {s}"));
    assert_eq!(d.numpy_name(), s, "dtype names are numpy's");
    d
}

fn parse_tensor(v: &Value) -> Tensor {
    let dtype = parse_dtype(&v["dtype"]);
    let shape: Vec<usize> = v["shape"]
        .as_array()
        .expect("a shape")
        .iter()
        .map(|d| d.as_u64().expect("a dimension") as usize)
        .collect();
    let data = v["data"].as_array().expect("data");
    let values = match dtype {
        DType::Bool => Values::Bool(data.iter().map(|x| x.as_bool().expect("a bool")).collect()),
        DType::I32 | DType::I64 => {
            Values::Int(data.iter().map(|x| x.as_i64().expect("an int")).collect())
        }
        // f32 data is written as the shortest decimal that rounds to the value.
        DType::F32 => Values::Float(
            data.iter()
                .map(|x| f64::from(parse_f64(x) as f32))
                .collect(),
        ),
        DType::F64 => Values::Float(data.iter().map(parse_f64).collect()),
    };
    Tensor {
        dtype,
        shape,
        values,
    }
}

fn to_array(t: &Tensor) -> Array {
    let r = match (&t.values, t.dtype) {
        (Values::Bool(v), _) => Array::from_vec(v.clone(), &t.shape),
        (Values::Int(v), DType::I32) => Array::from_vec(
            v.iter()
                .map(|&x| i32::try_from(x).expect("int32 data in range"))
                .collect(),
            &t.shape,
        ),
        (Values::Int(v), _) => Array::from_vec(v.clone(), &t.shape),
        (Values::Float(v), DType::F32) => {
            Array::from_vec(v.iter().map(|&x| x as f32).collect(), &t.shape)
        }
        (Values::Float(v), _) => Array::from_vec(v.clone(), &t.shape),
    };
    r.expect("fixture data matches its shape")
}

fn parse_weak(v: &Value) -> Scalar {
    let value = &v["value"];
    match v["weak"].as_str().expect("a weak kind") {
        "bool" => Scalar::Bool(value.as_bool().expect("a bool")),
        "int" => Scalar::Int(value.as_i64().expect("an int that fits i64")),
        "float" => Scalar::Float(parse_f64(value)),
        k => panic!("unknown weak kind {k}"),
    }
}

fn parse_input(v: &Value, shared: &[Value]) -> Input {
    if let Some(i) = v.get("ref") {
        return parse_input(&shared[i.as_u64().expect("an index") as usize], shared);
    }
    if v.get("weak").is_some() {
        Input::Weak(parse_weak(v))
    } else {
        Input::Array(to_array(&parse_tensor(v)))
    }
}

// ---------------------------------------------------------------------------------------
// argument helpers

struct Args<'a>(&'a Value);

impl Args<'_> {
    fn get(&self, key: &str) -> &Value {
        self.0
            .get(key)
            .unwrap_or_else(|| panic!("missing argument {key:?}"))
    }
    fn f64(&self, key: &str) -> f64 {
        parse_f64(self.get(key))
    }
    fn usize(&self, key: &str) -> usize {
        self.get(key).as_u64().expect("a non-negative integer") as usize
    }
    fn isize(&self, key: &str) -> isize {
        self.get(key).as_i64().expect("an integer") as isize
    }
    fn bool(&self, key: &str) -> bool {
        self.get(key).as_bool().expect("a bool")
    }
    fn dtype(&self, key: &str) -> DType {
        parse_dtype(self.get(key))
    }
    fn usizes(&self, key: &str) -> Vec<usize> {
        self.get(key)
            .as_array()
            .expect("a list")
            .iter()
            .map(|d| d.as_u64().expect("a dimension") as usize)
            .collect()
    }
    fn isizes(&self, key: &str) -> Vec<isize> {
        let v = self.get(key);
        v.as_array()
            .unwrap_or_else(|| panic!("{key} is not a list: {v}"))
            .iter()
            .map(|d| d.as_i64().expect("an integer") as isize)
            .collect()
    }
    /// `null` → `None`, a list → `Some(list)`.
    fn opt_isizes(&self, key: &str) -> Option<Vec<isize>> {
        if self.get(key).is_null() {
            None
        } else {
            Some(self.isizes(key))
        }
    }
    fn opt_isize(&self, key: &str) -> Option<isize> {
        let v = self.get(key);
        v.as_i64().map(|x| x as isize)
    }
    fn opt_usize(&self, key: &str) -> Option<usize> {
        self.get(key).as_u64().map(|x| x as usize)
    }
    fn slice_spec(&self) -> Vec<SliceArg> {
        let opt = |v: &Value| v.as_i64().map(|x| x as isize);
        self.get("spec")
            .as_array()
            .expect("a slice spec")
            .iter()
            .map(|s| {
                if let Some(r) = s.get("range") {
                    SliceArg::range(
                        opt(&r[0]),
                        opt(&r[1]),
                        r[2].as_i64().expect("a step") as isize,
                    )
                } else if let Some(i) = s.get("index") {
                    SliceArg::Index(i.as_i64().expect("an index") as isize)
                } else {
                    SliceArg::NewAxis
                }
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------
// dispatch

fn binary_op(op: &str) -> kiln::BinaryOp {
    use kiln::BinaryOp::*;
    match op {
        "add" => Add,
        "sub" => Sub,
        "mul" => Mul,
        "div" => Div,
        "floor_div" => FloorDiv,
        "rem" => Rem,
        "pow" => Pow,
        "maximum" => Maximum,
        "minimum" => Minimum,
        "eq" => Eq,
        "ne" => Ne,
        "lt" => Lt,
        "le" => Le,
        "gt" => Gt,
        "ge" => Ge,
        "logical_and" => LogicalAnd,
        "logical_or" => LogicalOr,
        _ => panic!("not a binary op: {op}"),
    }
}

/// `a op rhs` through the named `try_` method.
fn named_binary(op: &str, a: &Array, rhs: Operand) -> kiln::Result<Array> {
    match op {
        "add" => a.try_add(rhs),
        "sub" => a.try_sub(rhs),
        "mul" => a.try_mul(rhs),
        "div" => a.try_div(rhs),
        "floor_div" => a.try_floor_div(rhs),
        "rem" => a.try_rem(rhs),
        "pow" => a.try_pow(rhs),
        "maximum" => a.try_maximum(rhs),
        "minimum" => a.try_minimum(rhs),
        "eq" => a.try_eq(rhs),
        "ne" => a.try_ne(rhs),
        "lt" => a.try_lt(rhs),
        "le" => a.try_le(rhs),
        "gt" => a.try_gt(rhs),
        "ge" => a.try_ge(rhs),
        "logical_and" => a.try_logical_and(rhs),
        "logical_or" => a.try_logical_or(rhs),
        _ => panic!("not a binary op: {op}"),
    }
}

fn unary(op: &str, a: &Array) -> Option<kiln::Result<Array>> {
    Some(match op {
        "neg" => a.try_neg(),
        "abs" => a.try_abs(),
        "sign" => a.try_sign(),
        "exp" => a.try_exp(),
        "log" => a.try_log(),
        "log1p" => a.try_log1p(),
        "expm1" => a.try_expm1(),
        "sqrt" => a.try_sqrt(),
        "rsqrt" => a.try_rsqrt(),
        "square" => a.try_square(),
        "recip" => a.try_recip(),
        "sin" => a.try_sin(),
        "cos" => a.try_cos(),
        "tanh" => a.try_tanh(),
        "sigmoid" => a.try_sigmoid(),
        "relu" => a.try_relu(),
        "floor" => a.try_floor(),
        "ceil" => a.try_ceil(),
        "round" => a.try_round(),
        "isnan" => a.try_isnan(),
        "logical_not" => a.try_logical_not(),
        _ => return None,
    })
}

/// Builds the case's outputs (nothing is evaluated yet).
fn build(op: &str, inputs: &[Input], args: &Args) -> kiln::Result<Vec<Array>> {
    let arr = |i: usize| -> &Array {
        match &inputs[i] {
            Input::Array(a) => a,
            Input::Weak(_) => panic!("input {i} of {op} must be an array"),
        }
    };
    let one = |r: kiln::Result<Array>| r.map(|a| vec![a]);
    if let Some(Input::Array(a)) = inputs.first() {
        if let Some(r) = unary(op, a) {
            return one(r);
        }
    }
    match op {
        "zeros" => Ok(vec![Array::zeros(
            &args.usizes("shape"),
            args.dtype("dtype"),
        )]),
        "ones" => Ok(vec![Array::ones(
            &args.usizes("shape"),
            args.dtype("dtype"),
        )]),
        "full" => Ok(vec![Array::full(
            &args.usizes("shape"),
            parse_weak(args.get("value")),
            args.dtype("dtype"),
        )]),
        "arange" => one(Array::arange(
            args.f64("start"),
            args.f64("stop"),
            args.f64("step"),
            args.dtype("dtype"),
        )),
        "linspace" => one(Array::linspace(
            args.f64("start"),
            args.f64("stop"),
            args.usize("num"),
            args.dtype("dtype"),
        )),
        "eye" => Ok(vec![Array::eye(
            args.usize("n"),
            args.opt_usize("m"),
            args.dtype("dtype"),
        )]),
        "add" | "sub" | "mul" | "div" | "floor_div" | "rem" | "pow" | "maximum" | "minimum"
        | "eq" | "ne" | "lt" | "le" | "gt" | "ge" | "logical_and" | "logical_or" => {
            one(match (&inputs[0], &inputs[1]) {
                (Input::Array(a), rhs) => named_binary(op, a, rhs.operand()),
                (Input::Weak(s), Input::Array(b)) => {
                    b.try_binary_rev(binary_op(op), Operand::Scalar(*s))
                }
                (Input::Weak(_), Input::Weak(_)) => panic!("two weak scalars"),
            })
        }
        "where" => one(Array::try_where(
            arr(0),
            inputs[1].operand(),
            inputs[2].operand(),
        )),
        "clip" => one(arr(0).try_clip(inputs[1].operand(), inputs[2].operand())),
        "cast" => Ok(vec![arr(0).cast(args.dtype("dtype"))]),
        "reshape" => one(arr(0).try_reshape(&args.isizes("shape"))),
        "flatten" => Ok(vec![arr(0).flatten()]),
        "transpose" => Ok(vec![arr(0).transpose()]),
        "permute" => one(arr(0).try_permute(&args.isizes("axes"))),
        "swapaxes" => one(arr(0).try_swapaxes(args.isize("a"), args.isize("b"))),
        "expand_dims" => one(arr(0).try_expand_dims(args.isize("axis"))),
        "squeeze" => one(arr(0).try_squeeze(args.opt_isizes("axes").as_deref())),
        "broadcast_to" => one(arr(0).try_broadcast_to(&args.usizes("shape"))),
        "slice" => one(arr(0).try_slice(&args.slice_spec())),
        "concat" | "stack" => {
            let parts: Vec<&Array> = (0..inputs.len()).map(arr).collect();
            let axis = args.isize("axis");
            one(if op == "concat" {
                Array::try_concat(&parts, axis)
            } else {
                Array::try_stack(&parts, axis)
            })
        }
        "sum" | "mean" | "prod" | "max" | "min" | "logsumexp" => {
            let axes = args.opt_isizes("axes");
            let (axes, kd) = (axes.as_deref(), args.bool("keepdims"));
            let a = arr(0);
            one(match op {
                "sum" => a.try_sum(axes, kd),
                "mean" => a.try_mean(axes, kd),
                "prod" => a.try_prod(axes, kd),
                "max" => a.try_max(axes, kd),
                "min" => a.try_min(axes, kd),
                _ => a.try_logsumexp(axes, kd),
            })
        }
        "argmax" => one(arr(0).try_argmax(args.opt_isize("axis"), args.bool("keepdims"))),
        "argmin" => one(arr(0).try_argmin(args.opt_isize("axis"), args.bool("keepdims"))),
        "softmax" => one(arr(0).try_softmax(args.isize("axis"))),
        "log_softmax" => one(arr(0).try_log_softmax(args.isize("axis"))),
        "matmul" => one(arr(0).try_matmul(arr(1))),
        "dot" => one(arr(0).try_dot(arr(1))),
        "take" => one(arr(0).try_take(arr(1), args.isize("axis"))),
        "scatter_add" => {
            one(arr(0).try_scatter_add(arr(1), args.isize("axis"), &args.usizes("shape")))
        }
        "one_hot" => one(arr(0).try_one_hot(args.usize("depth"), args.dtype("dtype"))),
        "top_k" => arr(0).try_top_k(args.usize("k")).map(|(v, i)| vec![v, i]),
        _ => panic!("unknown op {op:?} in the fixtures"),
    }
}

// ---------------------------------------------------------------------------------------
// comparison

#[derive(Clone, Copy, Debug)]
struct Tol {
    rtol: f64,
    atol: f64,
    /// Whether `-0.0` and `0.0` must match.
    signed_zero: bool,
}

/// The float tolerance for `op`'s results of `dtype` (see the module docs for the reasons).
fn tolerance(op: &str, dtype: DType) -> Tol {
    let f32_ = dtype == DType::F32;
    let (rtol, atol, signed_zero) = match op {
        "exp" | "log" | "log1p" | "expm1" | "rsqrt" | "sin" | "cos" | "tanh" | "sigmoid"
        | "pow" => {
            if f32_ {
                (1e-6, 0.0, true)
            } else {
                (1e-14, 0.0, true)
            }
        }
        "sum" | "mean" | "prod" | "matmul" | "dot" => {
            if f32_ {
                (1e-5, 1e-5, false)
            } else {
                (1e-12, 1e-12, false)
            }
        }
        "logsumexp" | "softmax" | "log_softmax" => {
            if f32_ {
                (2e-6, 2e-6, false)
            } else {
                (1e-12, 1e-13, false)
            }
        }
        "arange" | "linspace" => {
            if f32_ {
                (2e-7, 1e-7, false)
            } else {
                (1e-15, 1e-15, false)
            }
        }
        // numpy's SIMD loops return either zero for max(0.0, -0.0): the sign is unspecified.
        "maximum" | "minimum" | "clip" | "relu" | "max" | "min" => (0.0, 0.0, false),
        _ => (0.0, 0.0, true),
    };
    Tol {
        rtol,
        atol,
        signed_zero,
    }
}

fn read(a: &Array) -> kiln::Result<Values> {
    Ok(match a.dtype() {
        DType::Bool => Values::Bool(a.to_vec::<bool>()?),
        DType::I32 => Values::Int(a.to_vec::<i32>()?.into_iter().map(i64::from).collect()),
        DType::I64 => Values::Int(a.to_vec::<i64>()?),
        DType::F32 => Values::Float(a.to_vec::<f32>()?.into_iter().map(f64::from).collect()),
        DType::F64 => Values::Float(a.to_vec::<f64>()?),
    })
}

fn float_matches(actual: f64, expected: f64, tol: Tol) -> bool {
    if expected.is_nan() || actual.is_nan() {
        return expected.is_nan() && actual.is_nan();
    }
    if expected.is_infinite() || actual.is_infinite() {
        return expected == actual;
    }
    if tol.signed_zero
        && expected == 0.0
        && actual == 0.0
        && expected.is_sign_negative() != actual.is_sign_negative()
    {
        return false;
    }
    (actual - expected).abs() <= tol.atol + tol.rtol * expected.abs()
}

/// Compares one output; returns a description of the mismatch.
fn compare(op: &str, actual: &Array, expected: &Tensor) -> Option<String> {
    if actual.dtype() != expected.dtype {
        return Some(format!(
            "dtype {} (numpy: {})",
            actual.dtype(),
            expected.dtype
        ));
    }
    if actual.shape() != expected.shape.as_slice() {
        return Some(format!(
            "shape {:?} (numpy: {:?})",
            actual.shape(),
            expected.shape
        ));
    }
    let values = match read(actual) {
        Ok(v) => v,
        Err(e) => return Some(format!("reading the result failed: {e}")),
    };
    let tol = tolerance(op, expected.dtype);
    let bad: Vec<String> = match (&values, &expected.values) {
        (Values::Float(a), Values::Float(e)) => a
            .iter()
            .zip(e)
            .enumerate()
            .filter(|(_, (x, y))| !float_matches(**x, **y, tol))
            .map(|(i, (x, y))| format!("[{i}] {x:?} vs {y:?}"))
            .collect(),
        (a, e) if a == e => vec![],
        (a, e) => vec![format!("{a:?} vs numpy {e:?}")],
    };
    if bad.is_empty() {
        None
    } else {
        let n = bad.len();
        let shown: Vec<String> = bad.into_iter().take(6).collect();
        Some(format!(
            "{n} value(s) differ (kiln vs numpy, {tol:?}): {}",
            shown.join(", ")
        ))
    }
}

// ---------------------------------------------------------------------------------------
// running

struct Fixtures {
    cases: Vec<Value>,
    shared: Vec<Value>,
}

fn fixtures() -> Fixtures {
    let doc: Value = serde_json::from_str(FIXTURES).expect("numpy_ops.json is valid JSON");
    Fixtures {
        cases: doc["cases"].as_array().expect("cases").clone(),
        shared: doc["shared"].as_array().cloned().unwrap_or_default(),
    }
}

/// How a case that kiln did not fail went.
enum Outcome {
    /// Checked against numpy.
    Passed,
    /// Not checked: evaluating it on the device failed with
    /// [`kiln::Error::UnsupportedDType`] for this dtype, which the device lacks (a wgpu
    /// adapter without `SHADER_F64`/`SHADER_INT64`; see `common::lacked_dtype`).
    Lacks(DType),
}

/// Runs one case on `device`; `Err` describes how kiln failed it.
fn run_case(case: &Value, shared: &[Value], device: Device) -> Result<Outcome, String> {
    let op = case["op"].as_str().expect("an op name");
    let empty = Value::Object(Default::default());
    let args = Args(case.get("args").unwrap_or(&empty));
    let inputs: Vec<Input> = case["inputs"]
        .as_array()
        .expect("inputs")
        .iter()
        .map(|v| parse_input(v, shared))
        .collect();
    let built = build(op, &inputs, &args);
    if let Some(stage) = case.get("error") {
        let stage = stage.as_str().expect("an error stage");
        return match (stage, built) {
            ("build", Err(_)) => Ok(Outcome::Passed),
            ("build", Ok(outs)) => {
                let refs: Vec<&Array> = outs.iter().collect();
                Err(match kiln::eval_on(device, &refs) {
                    Err(e) => format!("expected a build error; got an evaluation error: {e}"),
                    Ok(()) => "expected a build error; kiln accepted the case".to_string(),
                })
            }
            ("eval", Err(e)) => Err(format!(
                "expected an evaluation error; got a build error: {e}"
            )),
            ("eval", Ok(outs)) => {
                let refs: Vec<&Array> = outs.iter().collect();
                match kiln::eval_on(device, &refs) {
                    Err(e) => Ok(match common::lacked_dtype(device, &e) {
                        Some(d) => Outcome::Lacks(d),
                        None => Outcome::Passed,
                    }),
                    Ok(()) => Err("expected an evaluation error; kiln evaluated it".into()),
                }
            }
            (s, _) => panic!("unknown error stage {s}"),
        };
    }
    let outs = built.map_err(|e| format!("build error: {e}"))?;
    let refs: Vec<&Array> = outs.iter().collect();
    if let Err(e) = kiln::eval_on(device, &refs) {
        return match common::lacked_dtype(device, &e) {
            Some(d) => Ok(Outcome::Lacks(d)),
            None => Err(format!("evaluation error: {e}")),
        };
    }
    let expected: Vec<Tensor> = case["expected"]
        .as_array()
        .expect("expected outputs")
        .iter()
        .map(parse_tensor)
        .collect();
    if expected.len() != outs.len() {
        return Err(format!(
            "{} outputs, numpy has {}",
            outs.len(),
            expected.len()
        ));
    }
    let problems: Vec<String> = outs
        .iter()
        .zip(&expected)
        .enumerate()
        .filter_map(|(i, (a, e))| compare(op, a, e).map(|m| format!("output {i}: {m}")))
        .collect();
    if problems.is_empty() {
        Ok(Outcome::Passed)
    } else {
        Err(problems.join("; "))
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic)".to_string()
    }
}

#[test]
fn kiln_matches_numpy() {
    run_suite(Device::Cpu);
}

/// The same cases on the GPU backend (skipped with a message when no adapter exists, unless
/// `KILN_REQUIRE_GPU=1`).
#[cfg(feature = "wgpu")]
#[test]
fn kiln_matches_numpy_on_wgpu() {
    if common::wgpu_or_skip("numpy fixtures") {
        run_suite(Device::Wgpu);
    }
}

/// Cases a device does not run, with the reason (documented in `kiln_wgpu::wgsl_math`).
fn skipped(device: Device, name: &str) -> Option<&'static str> {
    let trig = name.starts_with("unary/sin/") || name.starts_with("unary/cos/");
    (device == Device::Wgpu && trig && name.ends_with("/specials"))
        .then_some("sin/cos of |x| > 1e5: wgpu reduces arguments with three-part Cody-Waite only")
}

fn run_suite(device: Device) {
    let fx = fixtures();
    // Panics inside kiln are reported as failures of their case: keep the default hook quiet
    // on this test's thread so the summary below is readable.
    let this = std::thread::current().name().map(str::to_owned);
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name().map(str::to_owned) != this {
            prev(info);
        }
    }));
    let mut failures = Vec::new();
    let mut skips: BTreeMap<String, usize> = BTreeMap::new();
    let mut lacks = common::DTypeSkips::default();
    let mut per_op: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for case in &fx.cases {
        let name = case["name"].as_str().expect("a case name");
        let op = case["op"].as_str().expect("an op").to_string();
        if let Some(why) = skipped(device, name) {
            *skips.entry(why.to_string()).or_default() += 1;
            continue;
        }
        let r = catch_unwind(AssertUnwindSafe(|| run_case(case, &fx.shared, device)))
            .unwrap_or_else(|p| Err(format!("panicked: {}", panic_message(&*p))));
        let e = per_op.entry(op).or_default();
        e.0 += 1;
        match r {
            Ok(Outcome::Passed) => {}
            // An adapter without f64/i64 support reports it; that is the documented outcome.
            Ok(Outcome::Lacks(d)) => lacks.add(d),
            Err(msg) => {
                e.1 += 1;
                let note = case
                    .get("note")
                    .and_then(Value::as_str)
                    .map(|n| format!(" [note: {n}]"))
                    .unwrap_or_default();
                failures.push(format!("{name}: {msg}{note}"));
            }
        }
    }
    let _ = std::panic::take_hook(); // back to the default hook
    for (why, n) in &skips {
        eprintln!("numpy fixtures on {device}: skipped {n} case(s): {why}");
    }
    lacks.report("numpy fixtures", device, fx.cases.len());
    let failing_ops: Vec<String> = per_op
        .iter()
        .filter(|(_, (_, f))| *f > 0)
        .map(|(op, (n, f))| format!("{op} {f}/{n}"))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} numpy fixture cases failed on {device} (by op: {}):\n{}",
        failures.len(),
        fx.cases.len(),
        failing_ops.join(", "),
        failures.join("\n")
    );
}

#[test]
fn fixtures_cover_every_op() {
    let fx = fixtures();
    let ops: BTreeSet<&str> = fx
        .cases
        .iter()
        .map(|c| c["op"].as_str().expect("an op"))
        .collect();
    let missing: Vec<&str> = REQUIRED_OPS
        .iter()
        .copied()
        .filter(|op| !ops.contains(op))
        .collect();
    assert!(missing.is_empty(), "no numpy fixture cases for {missing:?}");

    // Every dtype reaches the elementwise ops, the reductions and the casts.
    let mut seen: BTreeMap<&str, BTreeSet<DType>> = BTreeMap::new();
    for c in &fx.cases {
        let op = c["op"].as_str().expect("an op");
        for input in c["inputs"].as_array().expect("inputs") {
            let input = match input.get("ref") {
                Some(i) => &fx.shared[i.as_u64().expect("an index") as usize],
                None => input,
            };
            if let Some(d) = input.get("dtype") {
                seen.entry(op).or_default().insert(parse_dtype(d));
            }
        }
    }
    let every_dtype = [
        "neg",
        "exp",
        "floor",
        "isnan",
        "logical_not",
        "add",
        "sub",
        "div",
        "floor_div",
        "rem",
        "pow",
        "maximum",
        "lt",
        "logical_and",
        "cast",
        "sum",
        "mean",
        "prod",
        "max",
        "argmax",
        "matmul",
    ];
    let mut gaps = Vec::new();
    for op in every_dtype {
        for d in DTYPES {
            if !seen.get(op).is_some_and(|s| s.contains(&d)) {
                gaps.push(format!("{op}/{d}"));
            }
        }
    }
    assert!(gaps.is_empty(), "dtypes not covered: {gaps:?}");

    // Names are unique, so a failure message points at one case.
    let mut names = BTreeSet::new();
    for c in &fx.cases {
        let n = c["name"].as_str().expect("a name");
        assert!(names.insert(n), "duplicate fixture name {n}");
    }
    assert!(
        FIXTURES.len() < 1_000_000,
        "numpy_ops.json should stay small ({} bytes)",
        FIXTURES.len()
    );
}
