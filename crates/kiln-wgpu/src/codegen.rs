//! WGSL generation shared by every kernel kind: the `Gen` builder (bindings, the `kmeta`
//! word table that carries sizes, strides and scalars so one shader serves every size, the
//! helper functions used), index arithmetic over strided views, and the translation of a
//! plan [`Program`] into WGSL statements.
//!
//! A shader's text depends only on the kernel's structure (ops, dtypes, ranks, which
//! dimensions are structurally 1); everything size- or value-dependent is read from
//! `kmeta`. The pipeline cache keys on the text. Depends on `kiln-compiler`'s plan types and
//! [`crate::wgsl_math`].

use crate::device::Capabilities;
use crate::wgsl_math;
use kiln_compiler::{InputId, InstOp, Program, RegId, Strided};
use kiln_ir::{BinaryOp, DType, Dim, Error, Id, Result, Scalar, SymShape, UnaryOp};
use std::fmt::Write;

/// The WGSL value type of `dtype`.
pub(crate) fn vty(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "bool",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::F32 => "f32",
        DType::F64 => "f64",
    }
}

/// The WGSL storage type of `dtype` (`bool` is stored as `u32`).
pub(crate) fn sty(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "u32",
        d => vty(d),
    }
}

/// A storage value `e` of `dtype` as a value.
pub(crate) fn from_storage(dtype: DType, e: &str) -> String {
    match dtype {
        DType::Bool => format!("({e} != 0u)"),
        _ => e.to_string(),
    }
}

/// A value `e` of `dtype` as a storage value.
pub(crate) fn to_storage(dtype: DType, e: &str) -> String {
    match dtype {
        DType::Bool => format!("select(0u, 1u, {e})"),
        _ => e.to_string(),
    }
}

/// What a binding slot holds, in binding order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bind {
    /// Kernel input `x` (a buffer).
    Input(usize),
    /// Kernel output `j`.
    Output(usize),
    /// The `f64` scalar table.
    F64s,
    /// The status block of a fallible kernel.
    Status,
    /// An extra buffer of the dispatch (partials of a multi-pass reduction), by index.
    Extra(usize),
}

/// A shader under construction plus the per-launch data it reads.
pub(crate) struct Gen<'c> {
    pub caps: &'c Capabilities,
    /// The kernel's name, for error messages.
    pub op: &'static str,
    pub meta: Vec<u32>,
    pub f64s: Vec<f64>,
    helpers: Vec<String>,
    helper_text: String,
    pub status: bool,
    binds: Vec<(Bind, String)>,
    /// Extra declarations (workgroup arrays).
    pub globals: String,
}

impl<'c> Gen<'c> {
    pub fn new(caps: &'c Capabilities, op: &'static str) -> Gen<'c> {
        Gen {
            caps,
            op,
            meta: Vec::new(),
            f64s: Vec::new(),
            helpers: Vec::new(),
            helper_text: String::new(),
            status: false,
            binds: Vec::new(),
            globals: String::new(),
        }
    }

    /// Fails unless the adapter can compute with `dtype`.
    pub fn check(&self, dtype: DType) -> Result<()> {
        let missing = match dtype {
            DType::F64 if !self.caps.f64 => Some("SHADER_F64"),
            DType::I64 if !self.caps.i64 => Some("SHADER_INT64"),
            _ => None,
        };
        match missing {
            None => Ok(()),
            Some(feature) => Err(Error::UnsupportedDType {
                op: self.op,
                dtype,
                hint: format!(
                    "the wgpu adapter {} lacks the {feature} feature: cast to a 32-bit dtype \
                     first, or evaluate on the CPU (`kiln::Device::Cpu`)",
                    self.caps.adapter
                ),
            }),
        }
    }

    /// Appends a meta word; returns its WGSL expression (`u32`).
    pub fn word(&mut self, w: u32) -> String {
        self.meta.push(w);
        format!("kmeta[{}]", self.meta.len() - 1)
    }

    /// Appends a size (must fit `u32`).
    pub fn size(&mut self, n: usize) -> Result<String> {
        let w = u32::try_from(n).map_err(|_| {
            crate::too_large(self.op, format!("a size of {n} elements exceeds u32"))
        })?;
        Ok(self.word(w))
    }

    /// Appends a signed offset or stride; returns its WGSL expression (`i32`).
    pub fn signed(&mut self, v: isize) -> Result<String> {
        let w = i32::try_from(v).map_err(|_| {
            crate::too_large(self.op, format!("an offset or stride of {v} exceeds i32"))
        })?;
        Ok(format!("bitcast<i32>({})", self.word(w as u32)))
    }

    /// Makes helper `name` (and what it calls) available for `ty`.
    pub fn need(&mut self, name: &str, ty: &str) {
        let key = format!("{name}:{ty}");
        if self.helpers.contains(&key) {
            return;
        }
        for d in wgsl_math::deps(name) {
            self.need(d, ty);
        }
        if name == "status" || name == "idivmod" || name == "ipow" {
            self.status = true;
        }
        self.helpers.push(key);
        self.helper_text
            .push_str(&wgsl_math::helper(name, ty, self.caps.i64));
    }

    /// Declares binding `b` as `decl` (e.g. `var<storage, read> a0: array<f32>`).
    pub fn bind(&mut self, b: Bind, decl: String) {
        if !self.binds.iter().any(|(x, _)| *x == b) {
            self.binds.push((b, decl));
        }
    }

    /// The bindings in order.
    pub fn bindings(&self) -> Vec<Bind> {
        self.binds.iter().map(|(b, _)| *b).collect()
    }

    /// The complete shader: bindings, helpers, globals, then `body`.
    pub fn finish(&mut self, body: &str) -> String {
        if !self.f64s.is_empty() {
            self.bind(Bind::F64s, "var<storage, read> ksf: array<f64>".into());
        }
        if self.status {
            self.bind(
                Bind::Status,
                "var<storage, read_write> kstatus: array<atomic<u32>>".into(),
            );
        }
        let mut s = String::new();
        // The meta table always exists (binding 0).
        let _ = writeln!(
            s,
            "@group(0) @binding(0) var<storage, read> kmeta: array<u32>;"
        );
        for (i, (_, decl)) in self.binds.iter().enumerate() {
            let _ = writeln!(s, "@group(0) @binding({}) {decl};", i + 1);
        }
        s.push_str(&self.globals);
        s.push_str(&self.helper_text);
        s.push_str(body);
        s
    }

    /// Declares input `x` of `dtype` (read-only storage `a{x}`).
    pub fn input(&mut self, x: usize, dtype: DType) {
        self.bind(
            Bind::Input(x),
            format!("var<storage, read> a{x}: array<{}>", sty(dtype)),
        );
    }

    /// Declares output `j` of `dtype` (`o{j}`).
    pub fn output(&mut self, j: usize, dtype: DType) {
        self.bind(
            Bind::Output(j),
            format!("var<storage, read_write> o{j}: array<{}>", sty(dtype)),
        );
    }

    /// `let` statements decomposing the linear index `lin` over `dims` (row-major) into
    /// coordinate variables `{prefix}{k}`; dimensions structurally 1 get the literal `0u`.
    /// Returns the coordinate expressions.
    pub fn coords(
        &mut self,
        out: &mut String,
        lin: &str,
        sym: &[Dim],
        dims: &[usize],
        prefix: &str,
    ) -> Result<Vec<String>> {
        let mut names = vec![String::from("0u"); dims.len()];
        let live: Vec<usize> = (0..dims.len())
            .filter(|&k| sym[k] != Dim::Const(1))
            .collect();
        let _ = writeln!(out, "    var {prefix}rem = {lin};");
        for (n, &k) in live.iter().enumerate().rev() {
            let name = format!("{prefix}{k}");
            if n == 0 {
                let _ = writeln!(out, "    let {name} = {prefix}rem;");
            } else {
                let d = self.size(dims[k])?;
                let _ = writeln!(out, "    let {name} = {prefix}rem % {d};");
                let _ = writeln!(out, "    {prefix}rem = {prefix}rem / {d};");
            }
            names[k] = name;
        }
        Ok(names)
    }

    /// The `u32` element index of a view at coordinates `coords` (one per view dimension;
    /// `"0u"` coordinates contribute nothing).
    pub fn offset(&mut self, view: &Strided, coords: &[String]) -> Result<String> {
        let mut e = self.signed(view.offset)?;
        for (k, c) in coords.iter().enumerate() {
            if c == "0u" {
                continue;
            }
            let s = self.signed(view.strides[k])?;
            e = format!("{e} + bitcast<i32>({c}) * {s}");
        }
        Ok(format!("u32({e})"))
    }

    /// A scalar of the launch's table as a WGSL expression of `dtype`.
    pub fn scalar(&mut self, value: Scalar, dtype: DType) -> Result<String> {
        self.check(dtype)?;
        let v = value.cast(dtype);
        Ok(match dtype {
            DType::Bool => format!("({} != 0u)", self.word(v.as_bool() as u32)),
            DType::I32 => format!("bitcast<i32>({})", self.word(v.as_i64() as i32 as u32)),
            DType::F32 => format!("bitcast<f32>({})", self.word((v.as_f64() as f32).to_bits())),
            DType::I64 => {
                let i = v.as_i64();
                let lo = self.word(i as u32);
                let hi = self.word((i >> 32) as u32);
                self.need("ext", "u32");
                format!("((k_i2l(bitcast<i32>({hi})) << 32u) | k_u2l({lo}))")
            }
            DType::F64 => {
                self.f64s.push(v.as_f64());
                format!("ksf[{}]", self.f64s.len() - 1)
            }
        })
    }
}

/// Whether a view reads its source contiguously in the order of `space` by structure alone
/// (no movement ops, the base shape is the space): its index is the linear position.
pub(crate) fn identity_view(view: &kiln_compiler::View, space: &SymShape) -> bool {
    view.ops.is_empty() && &view.base == space
}

/// Emits `program` as `let` statements; `load(g, out, x)` gives the expression of input
/// `x`'s element at the current position. Returns the value expression of each result.
pub(crate) fn emit_program(
    g: &mut Gen<'_>,
    out: &mut String,
    program: &Program,
    scalars: &[Scalar],
    acc: Option<&str>,
    prefix: &str,
    load: &mut dyn FnMut(&mut Gen<'_>, &mut String, InputId) -> Result<String>,
) -> Result<Vec<String>> {
    let ty = |i: RegId| program.insts[i].dtype;
    let v = |i: RegId| format!("{prefix}v{}", i.index());
    for (i, inst) in program.insts.iter() {
        g.check(inst.dtype)?;
        let d = inst.dtype;
        let e = match inst.op {
            InstOp::Load(x) => load(g, out, x)?,
            InstOp::Scalar(s) => {
                let value = *scalars.get(s as usize).ok_or_else(|| {
                    crate::internal(format!("scalar {s} missing from the launch"))
                })?;
                g.scalar(value, d)?
            }
            InstOp::Acc => acc
                .ok_or_else(|| crate::internal("Acc outside a matmul epilogue".into()))?
                .to_string(),
            InstOp::Unary(op, x) => unary(g, op, ty(x), &v(x)),
            InstOp::Binary(op, a, b) => binary(g, op, ty(a), &v(a), &v(b)),
            InstOp::Where(c, a, b) => format!("select({}, {}, {})", v(b), v(a), v(c)),
            InstOp::Cast(x) => cast(g, ty(x), d, &v(x)),
        };
        let _ = writeln!(out, "    let {}: {} = {e};", v(i), vty(d));
    }
    Ok(program.results.iter().map(|&r| v(r)).collect())
}

/// `T(c)` for a numeric literal in the WGSL type of `d`.
fn lit(d: DType, c: &str) -> String {
    format!("{}({c})", vty(d))
}

fn unary(g: &mut Gen<'_>, op: UnaryOp, d: DType, x: &str) -> String {
    use UnaryOp::*;
    let t = vty(d);
    match op {
        LogicalNot => match d {
            DType::Bool => format!("!{x}"),
            _ => format!("({x} == {})", lit(d, "0")),
        },
        IsNan => match d {
            DType::F32 | DType::F64 => {
                g.need("consts", t);
                format!("k_isnan_{t}({x})")
            }
            _ => "false".into(),
        },
        _ if d.is_float() => {
            let call = |g: &mut Gen<'_>, helper: &str, f: &str| {
                g.need(helper, t);
                format!("k_{f}_{t}({x})")
            };
            match op {
                Neg => format!("-{x}"),
                Abs => format!("abs({x})"),
                Sign => {
                    let (z, one) = (lit(d, "0.0"), lit(d, "1.0"));
                    format!(
                        "select(select(select({x}, {z}, {x} == {z}), -{one}, {x} < {z}), {one}, {x} > {z})"
                    )
                }
                Exp => call(g, "exp", "exp"),
                Log => call(g, "log", "log"),
                Log1p => call(g, "log1p", "log1p"),
                Expm1 => call(g, "expm1", "expm1"),
                Sqrt => call(g, "sqrt", "sqrt"),
                Rsqrt => {
                    g.need("sqrt", t);
                    format!("({} / k_sqrt_{t}({x}))", lit(d, "1.0"))
                }
                Square => format!("({x} * {x})"),
                Recip => format!("({} / {x})", lit(d, "1.0")),
                Sin => call(g, "sincos", "sin"),
                Cos => call(g, "sincos", "cos"),
                Tanh => call(g, "tanh", "tanh"),
                Sigmoid => {
                    g.need("exp", t);
                    let one = lit(d, "1.0");
                    format!("({one} / ({one} + k_exp_{t}(-{x})))")
                }
                Relu => {
                    g.need("consts", t);
                    format!(
                        "select({}, {x}, {x} > {} || k_isnan_{t}({x}))",
                        lit(d, "0.0"),
                        lit(d, "0.0")
                    )
                }
                Floor => format!("floor({x})"),
                Ceil => format!("ceil({x})"),
                Round => format!("round({x})"),
                IsNan | LogicalNot => unreachable!(),
            }
        }
        _ => {
            // Integers (wrapping, as the oracle's i64 arithmetic truncated to the width).
            let z = lit(d, "0");
            match op {
                Neg => format!("({z} - {x})"),
                Abs => format!("select({x}, {z} - {x}, {x} < {z})"),
                Sign => format!(
                    "select(select({z}, {}, {x} < {z}), {}, {x} > {z})",
                    lit(d, "-1"),
                    lit(d, "1")
                ),
                Square => format!("({x} * {x})"),
                Relu => format!("max({x}, {z})"),
                // an integer is its own floor, ceiling and rounding
                Floor | Ceil | Round => x.to_string(),
                // every op listed (no catch-all): a new op does not compile until it is here
                Exp | Log | Log1p | Expm1 | Sqrt | Rsqrt | Recip | Sin | Cos | Tanh | Sigmoid => {
                    unreachable!("{op:?} of an integer: the builders cast it to float first")
                }
                IsNan | LogicalNot => unreachable!("predicates are generated above"),
            }
        }
    }
}

fn binary(g: &mut Gen<'_>, op: BinaryOp, d: DType, a: &str, b: &str) -> String {
    use BinaryOp::*;
    let t = vty(d);
    let as_bool = |x: &str| match d {
        DType::Bool => x.to_string(),
        _ => format!("!({x} == {})", lit(d, "0")),
    };
    match op {
        LogicalAnd => return format!("({} && {})", as_bool(a), as_bool(b)),
        LogicalOr => return format!("({} || {})", as_bool(a), as_bool(b)),
        Eq => return format!("({a} == {b})"),
        Ne => return format!("!({a} == {b})"),
        Lt | Le | Gt | Ge => {
            let sym = match op {
                Lt => "<",
                Le => "<=",
                Gt => ">",
                _ => ">=",
            };
            return match d {
                DType::Bool => format!("(u32({a}) {sym} u32({b}))"),
                _ => format!("({a} {sym} {b})"),
            };
        }
        _ => {}
    }
    if d == DType::Bool {
        // every op listed (no catch-all): a new op does not compile until it is here
        return match op {
            Maximum => format!("({a} || {b})"),
            Minimum => format!("({a} && {b})"),
            Add | Sub | Mul | Div | FloorDiv | Rem | Pow => {
                unreachable!("bool {op:?}: the builders give bools only comparisons, logic, maximum and minimum")
            }
            Eq | Ne | Lt | Le | Gt | Ge | LogicalAnd | LogicalOr => {
                unreachable!("comparisons and logic handled above")
            }
        };
    }
    if d.is_float() {
        return match op {
            Add => format!("({a} + {b})"),
            Sub => format!("({a} - {b})"),
            Mul => format!("({a} * {b})"),
            Div => format!("({a} / {b})"),
            FloorDiv => {
                g.need("fdivmod", t);
                format!("k_ffloordiv_{t}({a}, {b})")
            }
            Rem => {
                g.need("fdivmod", t);
                format!("k_frem_{t}({a}, {b})")
            }
            Pow => {
                g.need("pow", t);
                format!("k_pow_{t}({a}, {b})")
            }
            Maximum | Minimum => {
                g.need("consts", t);
                let f = if op == Maximum { "max" } else { "min" };
                format!("select({f}({a}, {b}), {a} + {b}, k_isnan_{t}({a}) || k_isnan_{t}({b}))")
            }
            Eq | Ne | Lt | Le | Gt | Ge | LogicalAnd | LogicalOr => {
                unreachable!("comparisons and logic handled above")
            }
        };
    }
    match op {
        Add => format!("({a} + {b})"),
        Sub => format!("({a} - {b})"),
        Mul => format!("({a} * {b})"),
        FloorDiv => {
            g.need("idivmod", t);
            format!("k_ifloordiv_{t}({a}, {b})")
        }
        Rem => {
            g.need("idivmod", t);
            format!("k_irem_{t}({a}, {b})")
        }
        Pow => {
            g.need("ipow", t);
            format!("k_ipow_{t}({a}, {b})")
        }
        Maximum => format!("max({a}, {b})"),
        Minimum => format!("min({a}, {b})"),
        // integer Div is lowered to float by the builders; kept for a hand-built graph
        Div => format!("({a} / {b})"),
        Eq | Ne | Lt | Le | Gt | Ge | LogicalAnd | LogicalOr => {
            unreachable!("comparisons and logic handled above")
        }
    }
}

fn cast(g: &mut Gen<'_>, from: DType, to: DType, x: &str) -> String {
    if from == to {
        return x.to_string();
    }
    let (ft, tt) = (vty(from), vty(to));
    match (from, to) {
        (_, DType::Bool) => format!("!({x} == {})", lit(from, "0")),
        (DType::Bool, _) => format!("select({}, {}, {x})", lit(to, "0"), lit(to, "1")),
        (f, DType::I32) if f.is_float() => {
            g.need("f2i32", ft);
            format!("k_f2i32_{ft}({x})")
        }
        (f, DType::I64) if f.is_float() => {
            g.need("f2i64", ft);
            format!("k_f2i64_{ft}({x})")
        }
        (DType::I32, DType::I64) => {
            g.need("ext", "u32");
            format!("k_i2l({x})")
        }
        _ => format!("{tt}({x})"),
    }
}
