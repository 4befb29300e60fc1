//! The text form of a [`Plan`]: one line per kernel, kernel input, instruction, slot and
//! buffer, in id order, with nothing that changes between runs (no addresses, no hash-map
//! order). The graph's own text form is `kiln_ir::Graph`'s `Display`, in the same notation.
//! File tests (`crates/kiln-compiler/tests/filetests.rs`) compare what the passes made of a
//! graph with the expected text in `tests/snapshots/`.
//!
//! The notation, by example (`#` starts an explanation, not part of the text):
//!
//! ```text
//! %2 = multiply %0 %1 : float32 [d0, d1] (2x3)   # node: op, operands, dtype, relative shape, sizes
//! k0 elementwise [d0, d1] -> s0                   # kernel: kind, index space, slots written
//!   in1 = param 1 : float32 [d1] . reshape [1, d1] . broadcast [d0, d1]   # input: source, dtype, view
//!   v0 = load in0 : float32                       # a program instruction (`t3`: scalar table entry)
//!   results v2                                    # the program's results
//! s0 : float32 [d0, d1] in b0                     # a slot and its buffer
//! b0 : float32 slots s0 s3 last k4                # a buffer: its slots, its last reader (`end`)
//! group k1 k2 k3 rows d0                          # a row group
//! ```
//!
//! Sizes are relative ([`kiln_ir::Dim`]): `d3` is symbol 3 of the binding, `0` and `1` are
//! literal.
//!
//! Depends on [`crate::plan`] and `kiln-ir`.

use std::fmt::{self, Write};

use crate::plan::{InstOp, KernelKind, OutputRef, Plan, Program, Source, View, ViewOp};
use kiln_ir::{sym_text, Id, SymShape};

/// `[d0, 1, d2]`.
fn shape(s: &SymShape) -> String {
    sym_text(s)
}

/// A list of numbers as `[a, b]`.
fn list<T: fmt::Display>(xs: &[T]) -> String {
    let parts: Vec<String> = xs.iter().map(ToString::to_string).collect();
    format!("[{}]", parts.join(", "))
}

fn view(v: &View) -> String {
    let mut out = shape(&v.base);
    for op in &v.ops {
        match op {
            ViewOp::Reshape(s) => write!(out, " . reshape {}", shape(s)),
            ViewOp::Permute(p) => write!(out, " . permute {}", list(p)),
            ViewOp::Broadcast(s) => write!(out, " . broadcast {}", shape(s)),
            ViewOp::Slice {
                start,
                step,
                shape: s,
            } => write!(
                out,
                " . slice start={} step={} {}",
                list(start),
                list(step),
                shape(s)
            ),
        }
        .expect("writing to a String");
    }
    out
}

fn source(s: &Source) -> String {
    match s {
        Source::Param(p) => format!("param {}", p.index()),
        Source::Slot(s) => s.to_string(),
        Source::Iota { axis } => format!("iota axis={axis}"),
        Source::Random { dist, seed } => format!("random {dist:?} seed={seed}"),
    }
}

/// Writes `program`'s instructions (values `v0`, `v1`, …) and results, each line indented
/// by `indent`; scalar-table entries are `t3`, kernel inputs `in2`.
fn program(f: &mut fmt::Formatter<'_>, p: &Program, indent: &str) -> fmt::Result {
    for (i, inst) in p.insts.iter() {
        let op = match &inst.op {
            InstOp::Load(s) => format!("load {s}"),
            InstOp::Scalar(s) => format!("scalar t{s}"),
            InstOp::Acc => "acc".to_string(),
            InstOp::Unary(op, x) => format!("{} {x}", op.name()),
            InstOp::Binary(op, a, b) => format!("{} {a} {b}", op.name()),
            InstOp::Where(c, a, b) => format!("where {c} {a} {b}"),
            InstOp::Cast(x) => format!("cast {x}"),
        };
        writeln!(f, "{indent}{i} = {op} : {}", inst.dtype)?;
    }
    let results: Vec<String> = p.results.iter().map(ToString::to_string).collect();
    writeln!(f, "{indent}results {}", results.join(" "))
}

/// The plan: its prelude, each kernel with its inputs and program, the slots, buffers,
/// row groups, outputs and the memory plan's per-kernel lists.
///
/// ```
/// use kiln_ir::{build, HostData, LazyExpr, Shape, UnaryOp};
/// let a = build::data(HostData::from(vec![1.0f32; 4]), Shape::from([4])).unwrap();
/// let y = build::unary(UnaryOp::Exp, &a).unwrap();
/// let c = kiln_compiler::compile(&LazyExpr::from_roots(&[&y])).unwrap();
/// let text = c.plan.to_string();
/// assert!(text.starts_with("k0 elementwise [d0] -> s0\n  in0 = param 0 : float32 [d0]\n"), "{text}");
/// assert!(text.contains("  v1 = exp v0 : float32\n"), "{text}");
/// ```
impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.prelude.insts.is_empty() {
            writeln!(f, "prelude")?;
            program(f, &self.prelude, "  ")?;
        }
        for (k, kernel) in self.kernels.iter() {
            let kind = match &kernel.kind {
                KernelKind::Elementwise { .. } => "elementwise".to_string(),
                KernelKind::Reduce { op, axes, .. } => {
                    format!("reduce {} axes={}", op.name(), list(axes))
                }
                KernelKind::ArgReduce { op, axis, .. } => format!("{} axis={axis}", op.name()),
                KernelKind::MatMul { epilogue: None } => "matmul".to_string(),
                KernelKind::MatMul { epilogue: Some(_) } => "matmul+epilogue".to_string(),
                KernelKind::Take { axis } => format!("take axis={axis}"),
                KernelKind::ScatterAdd { axis } => format!("scatter_add axis={axis}"),
                KernelKind::TopK { k, indices } => format!("top_k k={k} indices={indices:?}"),
                KernelKind::Concat { axis } => format!("concat axis={axis}"),
            };
            let outs: Vec<String> = kernel.outputs.iter().map(ToString::to_string).collect();
            writeln!(
                f,
                "{k} {kind} {} -> {}",
                shape(&kernel.space),
                outs.join(" ")
            )?;
            for (i, input) in kernel.inputs.iter() {
                writeln!(
                    f,
                    "  {i} = {} : {} {}",
                    source(&input.source),
                    input.dtype,
                    view(&input.view)
                )?;
            }
            match &kernel.kind {
                KernelKind::Elementwise { program: p }
                | KernelKind::Reduce { program: p, .. }
                | KernelKind::ArgReduce { program: p, .. }
                | KernelKind::MatMul { epilogue: Some(p) } => program(f, p, "  ")?,
                KernelKind::MatMul { epilogue: None }
                | KernelKind::Take { .. }
                | KernelKind::ScatterAdd { .. }
                | KernelKind::TopK { .. }
                | KernelKind::Concat { .. } => {}
            }
        }
        for (i, s) in self.slots.iter() {
            writeln!(f, "{i} : {} {} in {}", s.dtype, shape(&s.shape), s.buffer)?;
        }
        for (i, b) in self.buffers.iter() {
            let slots: Vec<String> = b.slots.iter().map(ToString::to_string).collect();
            // A buffer read to the end of the run (an output) has no last kernel.
            let last = if self.kernels.contains(b.last_use) {
                b.last_use.to_string()
            } else {
                "end".to_string()
            };
            writeln!(
                f,
                "{i} : {} slots {} last {last}{}",
                b.dtype,
                slots.join(" "),
                if b.output { " output" } else { "" }
            )?;
        }
        for g in &self.groups {
            let rows = shape(&[g.rows].into_iter().collect());
            let kernels: Vec<String> = g.kernels().map(|k| k.to_string()).collect();
            writeln!(
                f,
                "group {} rows {}",
                kernels.join(" "),
                &rows[1..rows.len() - 1]
            )?;
        }
        for (k, released) in self.releases.iter() {
            if !released.is_empty() {
                let bs: Vec<String> = released.iter().map(ToString::to_string).collect();
                writeln!(f, "release after {k}: {}", bs.join(" "))?;
            }
        }
        let unread: Vec<String> = self
            .unread_outputs
            .iter()
            .filter(|(_, &u)| u)
            .map(|(k, _)| k.to_string())
            .collect();
        if !unread.is_empty() {
            writeln!(f, "unread outputs {}", unread.join(" "))?;
        }
        for d in &self.donations {
            writeln!(
                f,
                "donate param {} -> {} at {} output {}",
                d.param.index(),
                d.buffer,
                d.kernel,
                d.output
            )?;
        }
        let outs: Vec<String> = self
            .outputs
            .iter()
            .map(|o| match o {
                OutputRef::Slot(s) => s.to_string(),
                OutputRef::Param(p) => format!("param {}", p.index()),
            })
            .collect();
        writeln!(f, "outputs {}", outs.join(" "))
    }
}
