//! One function per plan kernel kind, each turning a kernel and its launch into
//! `Dispatch`es: WGSL text (structure only), the `kmeta` words and `f64` scalars of this
//! launch, the bindings, and the workgroup count.
//!
//! Index spaces map to threads as follows: elementwise, take and concat run one thread per
//! output element; scatter-add one workgroup per output row (threads over the row, the
//! indices listed once per row); reductions one workgroup (256 threads, shared-memory tree)
//! per output and chunk of 4,096 reduced elements, with further passes over the partials
//! (the first pass also stores the prologue's side outputs, each position once); arg
//! reductions one workgroup per output; top-k one thread per row; matmul 16×16 threads per
//! 64×64 output tile (4×4 per thread in registers; 128×128 and 8×8 for large products) with
//! 16×TILE operand slices in workgroup memory (`a`'s transposed), held as vectors of four so
//! that a thread reads four of its rows or columns per load; a fused row group one workgroup per
//! row, its kernels in order with barriers between them.
//!
//! Depends on [`crate::codegen`], `kiln-compiler`'s plan types.

use crate::codegen::{emit_program, from_storage, identity_view, sty, to_storage, vty, Bind, Gen};
use crate::device::Capabilities;
use kiln_compiler::{Input, InputId, Kernel, KernelKind, Launch, Program, Source, Strided};
use kiln_ir::{resolve_shape, ArgReduceOp, DType, Dim, Distribution, Id, ReduceOp, Result};
use std::fmt::Write;

/// Threads per workgroup of the one-dimensional kernels.
pub(crate) const WG: u64 = 256;
/// Reduced elements per workgroup and pass.
const CHUNK: usize = 4096;

/// One compute dispatch.
pub(crate) struct Dispatch {
    pub source: String,
    pub binds: Vec<Bind>,
    pub meta: Vec<u32>,
    pub f64s: Vec<f64>,
    pub status: bool,
    /// Workgroups in total (folded into a 2-D grid by the launcher), or an explicit grid.
    pub groups: u64,
    pub grid: Option<[u32; 3]>,
}

/// The dispatches of one kernel launch, plus the scratch buffers they share.
pub(crate) struct Work {
    pub dispatches: Vec<Dispatch>,
    /// Scratch buffers (`Bind::Extra(i)`): dtype and length.
    pub extras: Vec<(DType, usize)>,
    /// Axis and size reported by an index check.
    pub index_check: (usize, usize),
}

impl Work {
    fn one(d: Dispatch) -> Work {
        Work {
            dispatches: vec![d],
            extras: Vec::new(),
            index_check: (0, 0),
        }
    }
}

/// How each kernel input is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum In {
    /// From its own buffer (`a{x}`).
    Buffer,
    /// From output `j`, written in place (same contiguous layout as the output).
    Output(usize),
    /// Iota or random: computed.
    Virtual,
}

fn finish(mut g: Gen<'_>, body: &str, groups: u64, grid: Option<[u32; 3]>) -> Dispatch {
    let source = g.finish(body);
    Dispatch {
        source,
        binds: g.bindings(),
        meta: std::mem::take(&mut g.meta),
        f64s: std::mem::take(&mut g.f64s),
        status: g.status,
        groups,
        grid,
    }
}

const MAIN_1D: &str = "@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
";

/// The expression of input `x`'s element at view coordinates `coords` (or at the linear
/// position `lin` when the view is the identity of `space`).
#[allow(clippy::too_many_arguments)]
fn load(
    g: &mut Gen<'_>,
    out: &mut String,
    kernel: &Kernel,
    launch: &Launch<'_>,
    how: &[In],
    x: usize,
    coords: &[String],
    lin: Option<&str>,
) -> Result<String> {
    let input: &Input = &kernel.inputs.as_slice()[x];
    let view: &Strided = &launch.views[x];
    let d = input.dtype;
    g.check(d)?;
    let index = match lin {
        Some(l) => l.to_string(),
        None => g.offset(view, coords)?,
    };
    Ok(match how[x] {
        In::Buffer => {
            g.input(x, d);
            from_storage(d, &format!("a{x}[{index}]"))
        }
        In::Output(j) => from_storage(d, &format!("o{j}[{index}]")),
        In::Virtual => {
            let name = format!("kvirt{x}_{}", out.len());
            let _ = writeln!(out, "    let {name}l = {index};");
            match input.source {
                Source::Iota { axis } => {
                    let base = resolve_shape(&input.view.base, launch.dims);
                    let stride: usize = base.dims()[axis + 1..].iter().product::<usize>().max(1);
                    let s = g.size(stride)?;
                    let c = if axis == 0 {
                        format!("({name}l / {s})")
                    } else {
                        let n = g.size(base.dims()[axis].max(1))?;
                        format!("(({name}l / {s}) % {n})")
                    };
                    match d {
                        DType::Bool => format!("({c} != 0u)"),
                        DType::I64 => {
                            g.need("ext", "u32");
                            format!("k_u2l({c})")
                        }
                        _ => format!("{}({c})", vty(d)),
                    }
                }
                Source::Random { dist, seed } => {
                    let seed = *launch.seeds.get(seed as usize).ok_or_else(|| {
                        crate::internal(format!("random input without seed {seed}"))
                    })?;
                    g.need("philox", "u32");
                    let lo = g.word(seed as u32);
                    let hi = g.word((seed >> 32) as u32);
                    let b = format!("{name}b");
                    let _ = writeln!(out, "    let {b} = k_philox({name}l, 0u, {lo}, {hi});");
                    random_value(g, dist, d, &b)?
                }
                _ => return Err(crate::internal("a buffer input passed as virtual".into())),
            }
        }
    })
}

fn random_value(g: &mut Gen<'_>, dist: Distribution, d: DType, b: &str) -> Result<String> {
    let unit53 = |hi: &str, lo: &str| {
        format!("(f64({b}.{hi}) * 2.3283064365386963e-10lf + f64({b}.{lo} >> 11u) * 1.1102230246251565e-16lf)")
    };
    Ok(match (dist, d) {
        (Distribution::Uniform, DType::F32) => format!("k_uniform_f32({b})"),
        (Distribution::Normal, DType::F32) if !g.caps.f64 => {
            // No f64 on this adapter: the same Box–Muller transform in f32.
            g.need("log", "f32");
            g.need("sincos", "f32");
            format!(
                "(sqrt(-2.0 * k_log_f32(1.0 - f32({b}.x >> 8u) * (1.0 / 16777216.0))) * k_cos_f32(6.283185307179586 * f32({b}.z >> 8u) * (1.0 / 16777216.0)))"
            )
        }
        (Distribution::Uniform, _) => {
            g.check(DType::F64)?;
            format!("{}({})", vty(d), unit53("x", "y"))
        }
        (Distribution::Normal, _) => {
            g.check(DType::F64)?;
            g.need("log", "f64");
            g.need("sincos", "f64");
            format!(
                "{}(sqrt(-2.0lf * k_log_f64(1.0lf - {})) * k_cos_f64(6.283185307179586lf * {}))",
                vty(d),
                unit53("x", "y"),
                unit53("z", "w")
            )
        }
    })
}

/// The space's coordinates of the linear index `i` (only when some input needs them).
fn space_coords(
    g: &mut Gen<'_>,
    out: &mut String,
    kernel: &Kernel,
    space: &[usize],
    lin: &str,
    prefix: &str,
) -> Result<Vec<String>> {
    g.coords(out, lin, &kernel.space, space, prefix)
}

/// Elementwise: one thread per position of the space.
pub(crate) fn elementwise(
    caps: &Capabilities,
    kernel: &Kernel,
    program: &Program,
    launch: &Launch<'_>,
    how: &[In],
    out_dtypes: &[DType],
) -> Result<Work> {
    let mut g = Gen::new(caps, "wgpu elementwise kernel");
    let n = launch.space.numel();
    let mut body = String::from(MAIN_1D);
    body.push_str("    let i = (wg.y * nwg.x + wg.x) * 256u + li;\n");
    let nn = g.size(n)?;
    let _ = writeln!(body, "    if (i >= {nn}) {{ return; }}");
    for (j, &d) in out_dtypes.iter().enumerate() {
        g.check(d)?;
        g.output(j, d);
    }
    let needs_coords = kernel.inputs.values().zip(how).any(|(inp, h)| match h {
        In::Buffer => !identity_view(&inp.view, &kernel.space),
        In::Virtual => true,
        In::Output(_) => false,
    });
    let coords = if needs_coords {
        space_coords(&mut g, &mut body, kernel, launch.space.dims(), "i", "c")?
    } else {
        Vec::new()
    };
    let mut loader = |g: &mut Gen<'_>, out: &mut String, x: InputId| {
        let x = x.index();
        let lin = match how[x] {
            In::Output(_) => Some("i"),
            In::Buffer if identity_view(&kernel.inputs.as_slice()[x].view, &kernel.space) => {
                Some("i")
            }
            _ => None,
        };
        load(g, out, kernel, launch, how, x, &coords, lin)
    };
    let results = emit_program(
        &mut g,
        &mut body,
        program,
        launch.scalars,
        None,
        "",
        &mut loader,
    )?;
    for (j, r) in results.iter().enumerate() {
        let _ = writeln!(body, "    o{j}[i] = {};", to_storage(out_dtypes[j], r));
    }
    body.push_str("}\n");
    Ok(Work::one(finish(
        g,
        &body,
        n.div_ceil(WG as usize) as u64,
        None,
    )))
}

fn identity(op: ReduceOp, d: DType) -> &'static str {
    match (op, d) {
        (ReduceOp::Sum, DType::Bool) => "0u",
        (ReduceOp::Sum, _) => "0",
        (ReduceOp::Prod, DType::Bool) => "1u",
        (ReduceOp::Prod, _) => "1",
        (ReduceOp::Max, DType::Bool) => "0u",
        (ReduceOp::Min, DType::Bool) => "1u",
        (ReduceOp::Max, DType::I32) => "(-2147483647 - 1)",
        (ReduceOp::Min, DType::I32) => "2147483647",
        (ReduceOp::Max, DType::I64) => "(-9223372036854775807li - 1li)",
        (ReduceOp::Min, DType::I64) => "9223372036854775807li",
        (ReduceOp::Max, DType::F32) => "-k_inf_f32()",
        (ReduceOp::Min, DType::F32) => "k_inf_f32()",
        (ReduceOp::Max, DType::F64) => "-k_inf_f64()",
        (ReduceOp::Min, DType::F64) => "k_inf_f64()",
    }
}

/// `combine(a, b)` of storage values.
fn combine(g: &mut Gen<'_>, op: ReduceOp, d: DType, a: &str, b: &str) -> String {
    match op {
        ReduceOp::Sum => format!("({a} + {b})"),
        ReduceOp::Prod => format!("({a} * {b})"),
        ReduceOp::Max | ReduceOp::Min => {
            let f = if op == ReduceOp::Max { "max" } else { "min" };
            if d.is_float() {
                let t = vty(d);
                g.need("consts", t);
                format!("select({f}({a}, {b}), {a} + {b}, k_isnan_{t}({a}) || k_isnan_{t}({b}))")
            } else {
                format!("{f}({a}, {b})")
            }
        }
    }
}

/// Splits the space's axes into kept and reduced.
fn split_axes(rank: usize, reduced: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let kept = (0..rank).filter(|a| !reduced.contains(a)).collect();
    (kept, reduced.to_vec())
}

/// Emits the coordinates of output `o` (kept axes) and reduced position `r` as one list over
/// the space's axes.
#[allow(clippy::too_many_arguments)]
fn reduce_coords(
    g: &mut Gen<'_>,
    out: &mut String,
    kernel: &Kernel,
    space: &[usize],
    kept: &[usize],
    red: &[usize],
    kept_names: &mut Vec<String>,
    phase: u8,
) -> Result<Vec<String>> {
    let sub = |axes: &[usize]| -> (Vec<Dim>, Vec<usize>) {
        (
            axes.iter().map(|&a| kernel.space[a]).collect(),
            axes.iter().map(|&a| space[a]).collect(),
        )
    };
    if phase == 0 {
        let (s, d) = sub(kept);
        *kept_names = g.coords(out, "o", &s, &d, "ck")?;
        return Ok(Vec::new());
    }
    let (s, d) = sub(red);
    let rn = g.coords(out, "r", &s, &d, "cr")?;
    let mut all = vec![String::from("0u"); space.len()];
    for (n, &a) in kept.iter().enumerate() {
        all[a] = kept_names[n].clone();
    }
    for (n, &a) in red.iter().enumerate() {
        all[a] = rn[n].clone();
    }
    Ok(all)
}

/// Inside a reduction loop over `r`: the reduced coordinates and the prologue's value at
/// them (as a storage value of `dtype`). The prologue's further results (side outputs, see
/// `kiln_compiler::Target::reduce_side_outputs`) are stored at their position of the space
/// in outputs `1..` (each position is visited once, by the first pass).
#[allow(clippy::too_many_arguments)]
fn prologue_value(
    g: &mut Gen<'_>,
    body: &mut String,
    kernel: &Kernel,
    launch: &Launch<'_>,
    how: &[In],
    program: &Program,
    (kept, red, kept_names): (&[usize], &[usize], &mut Vec<String>),
    dtype: DType,
) -> Result<String> {
    let space = launch.space.dims();
    let coords = reduce_coords(g, body, kernel, space, kept, red, kept_names, 1)?;
    let mut loader = |g: &mut Gen<'_>, out: &mut String, x: InputId| {
        load(g, out, kernel, launch, how, x.index(), &coords, None)
    };
    let res = emit_program(g, body, program, launch.scalars, None, "", &mut loader)?;
    if res.len() > 1 {
        // The position's row-major index in the space.
        let mut flat = coords.first().cloned().unwrap_or_else(|| "0u".into());
        for (d, c) in coords.iter().enumerate().skip(1) {
            let n = g.size(space[d])?;
            flat = format!("({flat}) * {n} + {c}");
        }
        let _ = writeln!(body, "    let kpos = {flat};");
        for (j, v) in res.iter().enumerate().skip(1) {
            let dj = program.insts[program.results[j]].dtype;
            g.output(j, dj);
            let _ = writeln!(body, "    o{j}[kpos] = {};", to_storage(dj, v));
        }
    }
    Ok(to_storage(dtype, &res[0]))
}

/// Sum/prod/max/min over axes: a workgroup per (output, chunk), tree in shared memory, and
/// further passes over the partials while there is more than one chunk.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce(
    caps: &Capabilities,
    kernel: &Kernel,
    program: &Program,
    op: ReduceOp,
    axes: &[usize],
    launch: &Launch<'_>,
    how: &[In],
    out_dtype: DType,
) -> Result<Work> {
    let space = launch.space.dims();
    let (kept, red) = split_axes(space.len(), axes);
    let n_out: usize = kept.iter().map(|&a| space[a]).product();
    let r_len: usize = red.iter().map(|&a| space[a]).product();
    if r_len <= SERIAL_MAX {
        return reduce_serial(
            caps,
            kernel,
            program,
            op,
            (&kept, &red),
            launch,
            how,
            out_dtype,
        );
    }
    let chunks = r_len.div_ceil(CHUNK).max(1);
    let mut work = Work {
        dispatches: Vec::new(),
        extras: Vec::new(),
        index_check: (0, 0),
    };
    // Pass 1: the prologue over the space.
    let mut g = Gen::new(caps, "wgpu reduce kernel");
    g.check(out_dtype)?;
    let st = sty(out_dtype);
    let _ = writeln!(g.globals, "var<workgroup> ksh: array<{st}, 256>;");
    let mut body = String::from(MAIN_1D);
    let nout = g.size(n_out)?;
    let rl = g.size(r_len)?;
    let gch = g.size(chunks)?;
    chunk_split(&mut body, &gch);
    let _ = writeln!(body, "    let kact = o < {nout};");
    let id = identity(op, out_dtype);
    let _ = writeln!(body, "    var acc: {st} = {st}({id});");
    let _ = writeln!(body, "    if (kact) {{");
    let mut kept_names = Vec::new();
    reduce_coords(
        &mut g,
        &mut body,
        kernel,
        space,
        &kept,
        &red,
        &mut kept_names,
        0,
    )?;
    chunk_loop(&mut body, &rl);
    let v = prologue_value(
        &mut g,
        &mut body,
        kernel,
        launch,
        how,
        program,
        (&kept, &red, &mut kept_names),
        out_dtype,
    )?;
    let c = combine(&mut g, op, out_dtype, "acc", &v);
    let _ = writeln!(body, "    acc = {c};");
    body.push_str("    }\n    }\n");
    tree_tail(&mut g, &mut body, op, out_dtype, "o * {G} + gi", chunks > 1)?;
    let target = if chunks > 1 {
        work.extras.push((out_dtype, n_out * chunks));
        g.bind(
            Bind::Extra(0),
            format!("var<storage, read_write> kpart0: array<{st}>"),
        );
        "kpart0"
    } else {
        g.output(0, out_dtype);
        "o0"
    };
    let body = body.replace("{OUT}", target).replace("{G}", &gch);
    let groups = (n_out * chunks) as u64;
    work.dispatches.push(finish(g, &body, groups, None));
    // Further passes over contiguous [n_out, len] partials.
    let mut len = chunks;
    let mut src = 0usize;
    while len > 1 {
        let next = len.div_ceil(CHUNK);
        let mut g = Gen::new(caps, "wgpu reduce kernel");
        let _ = writeln!(g.globals, "var<workgroup> ksh: array<{st}, 256>;");
        g.bind(
            Bind::Extra(src),
            format!("var<storage, read> kpart{src}: array<{st}>"),
        );
        let target = if next > 1 {
            work.extras.push((out_dtype, n_out * next));
            let t = work.extras.len() - 1;
            g.bind(
                Bind::Extra(t),
                format!("var<storage, read_write> kpart{t}: array<{st}>"),
            );
            format!("kpart{t}")
        } else {
            g.output(0, out_dtype);
            "o0".to_string()
        };
        let mut body = String::from(MAIN_1D);
        let nout = g.size(n_out)?;
        let l = g.size(len)?;
        let gch = g.size(next)?;
        chunk_split(&mut body, &gch);
        let _ = writeln!(body, "    let kact = o < {nout};");
        let _ = writeln!(body, "    var acc: {st} = {st}({id});");
        let _ = writeln!(body, "    if (kact) {{");
        chunk_loop(&mut body, &l);
        let c = combine(
            &mut g,
            op,
            out_dtype,
            "acc",
            &format!("kpart{src}[o * {l} + r]"),
        );
        let _ = writeln!(body, "    acc = {c};");
        body.push_str("    }\n    }\n");
        tree_tail(&mut g, &mut body, op, out_dtype, "o * {G} + gi", next > 1)?;
        let body = body.replace("{OUT}", &target).replace("{G}", &gch);
        work.dispatches
            .push(finish(g, &body, (n_out * next) as u64, None));
        src = work.extras.len() - 1;
        len = next;
    }
    Ok(work)
}

/// Reductions over at most this many elements per output run one thread per output (a
/// serial loop) instead of a workgroup per output: rows of a few elements (a softmax over 10
/// classes, a bias gradient over a small batch) would otherwise keep 256 threads, a barrier
/// tree and a shared-memory array busy for a handful of additions.
const SERIAL_MAX: usize = 64;

/// The serial form of [`reduce`]: thread `o` folds output `o`'s elements in order.
#[allow(clippy::too_many_arguments)]
fn reduce_serial(
    caps: &Capabilities,
    kernel: &Kernel,
    program: &Program,
    op: ReduceOp,
    (kept, red): (&[usize], &[usize]),
    launch: &Launch<'_>,
    how: &[In],
    out_dtype: DType,
) -> Result<Work> {
    let space = launch.space.dims();
    let n_out: usize = kept.iter().map(|&a| space[a]).product();
    let r_len: usize = red.iter().map(|&a| space[a]).product();
    let mut g = Gen::new(caps, "wgpu reduce kernel");
    g.check(out_dtype)?;
    let st = sty(out_dtype);
    let mut body = String::from(MAIN_1D);
    let nout = g.size(n_out)?;
    let rl = g.size(r_len)?;
    let _ = writeln!(body, "    let o = (wg.y * nwg.x + wg.x) * {WG}u + li;");
    let _ = writeln!(body, "    if (o >= {nout}) {{ return; }}");
    let mut kept_names = Vec::new();
    reduce_coords(
        &mut g,
        &mut body,
        kernel,
        space,
        kept,
        red,
        &mut kept_names,
        0,
    )?;
    let id = identity(op, out_dtype);
    let _ = writeln!(body, "    var acc: {st} = {st}({id});");
    let _ = writeln!(body, "    for (var r = 0u; r < {rl}; r = r + 1u) {{");
    let v = prologue_value(
        &mut g,
        &mut body,
        kernel,
        launch,
        how,
        program,
        (kept, red, &mut kept_names),
        out_dtype,
    )?;
    let c = combine(&mut g, op, out_dtype, "acc", &v);
    let _ = writeln!(body, "    acc = {c};");
    body.push_str("    }\n");
    g.output(0, out_dtype);
    let _ = writeln!(body, "    o0[o] = acc;");
    body.push_str("}\n");
    let groups = (n_out as u64).div_ceil(WG).max(1);
    Ok(Work::one(finish(g, &body, groups, None)))
}

/// Workgroup `wid` of a chunked pass works on output `o`, chunk `gi` (of `gch` per output).
fn chunk_split(body: &mut String, gch: &str) {
    let _ = writeln!(body, "    let wid = wg.y * nwg.x + wg.x;");
    let _ = writeln!(body, "    let o = wid / {gch};");
    let _ = writeln!(body, "    let gi = wid % {gch};");
}

/// The loop of a chunked pass: thread `li` visits positions `r` of chunk `gi` of a row of
/// `len`, 256 apart (the loop body and its closing brace follow).
fn chunk_loop(body: &mut String, len: &str) {
    let _ = writeln!(body, "    let rend = min((gi + 1u) * {CHUNK}u, {len});");
    let _ = writeln!(
        body,
        "    for (var r = gi * {CHUNK}u + li; r < rend; r = r + 256u) {{"
    );
}

/// The shared-memory tree and the store of `acc` (to `{OUT}` at `index`, or at `o`).
fn tree_tail(
    g: &mut Gen<'_>,
    body: &mut String,
    op: ReduceOp,
    d: DType,
    index: &str,
    partial: bool,
) -> Result<()> {
    let c = combine(g, op, d, "ksh[li]", "ksh[li + s]");
    let _ = writeln!(body, "    ksh[li] = acc;");
    let _ = writeln!(body, "    workgroupBarrier();");
    let _ = writeln!(body, "    for (var s = 128u; s > 0u; s = s >> 1u) {{");
    let _ = writeln!(body, "        if (li < s) {{ ksh[li] = {c}; }}");
    let _ = writeln!(body, "        workgroupBarrier();");
    let _ = writeln!(body, "    }}");
    let at = if partial { index } else { "o" };
    let _ = writeln!(
        body,
        "    if (kact && li == 0u) {{ {{OUT}}[{at}] = ksh[0]; }}"
    );
    body.push_str("}\n");
    Ok(())
}

/// Argmax/argmin along one axis: a workgroup per output with (value, index) pairs in shared
/// memory, or a thread per output for rows of at most [`SERIAL_MAX`]; NaN is the extremum;
/// ties and NaNs go to the lower index.
#[allow(clippy::too_many_arguments)]
pub(crate) fn arg_reduce(
    caps: &Capabilities,
    kernel: &Kernel,
    program: &Program,
    op: ArgReduceOp,
    axis: usize,
    launch: &Launch<'_>,
    how: &[In],
) -> Result<Work> {
    let space = launch.space.dims();
    let (kept, red) = split_axes(space.len(), &[axis]);
    let n_out: usize = kept.iter().map(|&a| space[a]).product();
    let mut g = Gen::new(caps, "wgpu argreduce kernel");
    g.check(DType::I64)?;
    g.need("ext", "u32");
    let vd = program.insts[program.results[0]].dtype;
    g.check(vd)?;
    let st = sty(vd);
    // short rows: a thread per output (see SERIAL_MAX); long rows: a workgroup per output
    let serial = space[axis] <= SERIAL_MAX;
    // long rows: a workgroup per (output, CHUNK positions), then passes over the partial
    // (value, index) pairs, as for sums (one workgroup per row would leave the GPU idle)
    let chunks = if serial {
        1
    } else {
        space[axis].div_ceil(CHUNK).max(1)
    };
    if !serial {
        let _ = writeln!(g.globals, "var<workgroup> kshv: array<{st}, 256>;");
        let _ = writeln!(g.globals, "var<workgroup> kshi: array<u32, 256>;");
    }
    emit_better(&mut g, op, vd);
    let mut body = String::from(MAIN_1D);
    let nout = g.size(n_out)?;
    let rl = g.size(space[axis])?;
    let gch = g.size(chunks)?;
    if serial {
        let _ = writeln!(body, "    let o = (wg.y * nwg.x + wg.x) * {WG}u + li;");
    } else {
        chunk_split(&mut body, &gch);
    }
    let _ = writeln!(body, "    let kact = o < {nout};");
    let _ = writeln!(body, "    var bv: {st};");
    let _ = writeln!(body, "    var bi = 0xffffffffu;");
    let _ = writeln!(body, "    if (kact) {{");
    let mut kept_names = Vec::new();
    reduce_coords(
        &mut g,
        &mut body,
        kernel,
        space,
        &kept,
        &red,
        &mut kept_names,
        0,
    )?;
    if serial {
        let _ = writeln!(body, "    for (var r = 0u; r < {rl}; r = r + 1u) {{");
    } else {
        chunk_loop(&mut body, &rl);
    }
    let v = prologue_value(
        &mut g,
        &mut body,
        kernel,
        launch,
        how,
        program,
        (&kept, &red, &mut kept_names),
        vd,
    )?;
    let _ = writeln!(body, "    let v = {v};");
    let _ = writeln!(
        body,
        "    if (k_better(bv, bi, v, r)) {{ bv = v; bi = r; }}"
    );
    body.push_str("    }\n    }\n");
    if serial {
        body.push_str(
            "    if (kact) { o0[o] = select(k_u2l(bi), 0li, bi == 0xffffffffu); }
}
",
        );
    } else {
        arg_tree_tail(&mut body);
    }
    let mut work = Work {
        dispatches: Vec::new(),
        extras: Vec::new(),
        index_check: (0, 0),
    };
    if chunks > 1 {
        work.extras.push((vd, n_out * chunks));
        work.extras.push((DType::I32, n_out * chunks));
        g.bind(
            Bind::Extra(0),
            format!("var<storage, read_write> kpv0: array<{st}>"),
        );
        g.bind(
            Bind::Extra(1),
            "var<storage, read_write> kpi0: array<u32>".to_string(),
        );
        let body = body.replace(
            "{STORE}",
            &format!("kpv0[o * {gch} + gi] = kshv[0]; kpi0[o * {gch} + gi] = kshi[0];"),
        );
        work.dispatches
            .push(finish(g, &body, (n_out * chunks) as u64, None));
        arg_passes(caps, &mut work, n_out, chunks, op, vd)?;
        return Ok(work);
    }
    let body = body.replace(
        "{STORE}",
        "o0[o] = select(k_u2l(kshi[0]), 0li, kshi[0] == 0xffffffffu);",
    );
    g.output(0, DType::I64);
    let groups = if serial {
        (n_out as u64).div_ceil(WG).max(1)
    } else {
        n_out as u64
    };
    work.dispatches.push(finish(g, &body, groups, None));
    Ok(work)
}

/// `k_better(av, ai, bv, bi)`: whether the pair (bv, bi) beats (av, ai) for `op`. An index of
/// `0xffffffff` marks an empty pair. b beats a: a empty; or b NaN and a not; or neither NaN and
/// b strictly better; or equal (or both NaN) and b earlier.
fn emit_better(g: &mut Gen<'_>, op: ArgReduceOp, vd: DType) {
    let st = sty(vd);
    let nan = |x: &str| -> String {
        if vd.is_float() {
            format!("k_isnan_{}({x})", vty(vd))
        } else {
            "false".into()
        }
    };
    if vd.is_float() {
        g.need("consts", vty(vd));
    }
    let cmp = if op == ArgReduceOp::ArgMax { ">" } else { "<" };
    let _ = writeln!(
        g.globals,
        "fn k_better(av: {st}, ai: u32, bv: {st}, bi: u32) -> bool {{
    if (bi == 0xffffffffu) {{ return false; }}
    if (ai == 0xffffffffu) {{ return true; }}
    let an = {an};
    let bn = {bn};
    if (an && !bn) {{ return false; }}
    if (bn && !an) {{ return true; }}
    if (an) {{ return bi < ai; }}
    if (bv {cmp} av) {{ return true; }}
    return bv == av && bi < ai;
}}",
        an = nan("av"),
        bn = nan("bv"),
    );
}

/// The shared-memory tree over (value, index) pairs; thread 0 then runs `{STORE}`.
fn arg_tree_tail(body: &mut String) {
    body.push_str(
        "    kshv[li] = bv;
    kshi[li] = bi;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (li < s && k_better(kshv[li], kshi[li], kshv[li + s], kshi[li + s])) {
            kshv[li] = kshv[li + s];
            kshi[li] = kshi[li + s];
        }
        workgroupBarrier();
    }
    if (kact && li == 0u) { {STORE} }
}
",
    );
}

/// Passes over `len` partial (value, index) pairs per output (in the last two scratch buffers
/// of `work`) until one per output is left, which the last pass writes as the i64 result.
fn arg_passes(
    caps: &Capabilities,
    work: &mut Work,
    n_out: usize,
    mut len: usize,
    op: ArgReduceOp,
    vd: DType,
) -> Result<()> {
    let st = sty(vd);
    let mut src = work.extras.len() - 2;
    while len > 1 {
        let next = len.div_ceil(CHUNK);
        let mut g = Gen::new(caps, "wgpu argreduce kernel");
        g.need("ext", "u32");
        emit_better(&mut g, op, vd);
        let _ = writeln!(g.globals, "var<workgroup> kshv: array<{st}, 256>;");
        let _ = writeln!(g.globals, "var<workgroup> kshi: array<u32, 256>;");
        g.bind(
            Bind::Extra(src),
            format!("var<storage, read> kpv{src}: array<{st}>"),
        );
        g.bind(
            Bind::Extra(src + 1),
            format!("var<storage, read> kpi{src}: array<u32>"),
        );
        let mut body = String::from(MAIN_1D);
        let nout = g.size(n_out)?;
        let l = g.size(len)?;
        let gch = g.size(next)?;
        chunk_split(&mut body, &gch);
        let _ = writeln!(body, "    let kact = o < {nout};");
        let _ = writeln!(body, "    var bv: {st};");
        let _ = writeln!(body, "    var bi = 0xffffffffu;");
        let _ = writeln!(body, "    if (kact) {{");
        chunk_loop(&mut body, &l);
        let _ = writeln!(
            body,
            "    let v = kpv{src}[o * {l} + r];\n    let vi = kpi{src}[o * {l} + r];"
        );
        let _ = writeln!(
            body,
            "    if (k_better(bv, bi, v, vi)) {{ bv = v; bi = vi; }}"
        );
        body.push_str("    }\n    }\n");
        arg_tree_tail(&mut body);
        let store = if next > 1 {
            work.extras.push((vd, n_out * next));
            work.extras.push((DType::I32, n_out * next));
            let t = work.extras.len() - 2;
            g.bind(
                Bind::Extra(t),
                format!("var<storage, read_write> kpv{t}: array<{st}>"),
            );
            g.bind(
                Bind::Extra(t + 1),
                format!("var<storage, read_write> kpi{t}: array<u32>"),
            );
            format!("kpv{t}[o * {gch} + gi] = kshv[0]; kpi{t}[o * {gch} + gi] = kshi[0];")
        } else {
            g.output(0, DType::I64);
            "o0[o] = select(k_u2l(kshi[0]), 0li, kshi[0] == 0xffffffffu);".to_string()
        };
        let body = body.replace("{STORE}", &store);
        work.dispatches
            .push(finish(g, &body, (n_out * next) as u64, None));
        src = work.extras.len() - 2;
        len = next;
    }
    Ok(())
}

/// Rows (and columns) of the output each matmul thread computes: 8 (128×128 tiles) for a
/// product with at least 256 such tiles, where the larger tiles' reuse pays (on an H200:
/// 2048³ 13.1 against 10.8 TFLOP/s), else 4 (64×64 tiles: more workgroups for the smaller
/// products; 1024³ 6.1 against 3.7). Only two pipelines per matmul structure follow.
/// `KILN_WGPU_MATMUL_TILE=64|128` forces one (read once).
fn matmul_micro_tile(m: usize, n: usize, batch: usize) -> usize {
    static FORCED: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let forced = *FORCED.get_or_init(|| match std::env::var("KILN_WGPU_MATMUL_TILE").as_deref() {
        Ok("128") => Some(8),
        Ok("64") => Some(4),
        _ => None,
    });
    forced.unwrap_or_else(|| {
        let tiles = m
            .div_ceil(128)
            .saturating_mul(n.div_ceil(128))
            .saturating_mul(batch);
        if tiles >= 256 {
            8
        } else {
            4
        }
    })
}

/// Batched matmul with an optional fused epilogue.
pub(crate) fn matmul(
    caps: &Capabilities,
    kernel: &Kernel,
    epilogue: Option<&Program>,
    launch: &Launch<'_>,
    how: &[In],
    out_dtype: DType,
) -> Result<Work> {
    let mut g = Gen::new(caps, "wgpu matmul kernel");
    let space = launch.space.dims();
    let r = space.len();
    let (m, n) = (space[r - 2], space[r - 1]);
    let (va, vb) = (&launch.views[0], &launch.views[1]);
    let k = va.shape.dims()[va.shape.rank() - 1];
    let ad = kernel.inputs.as_slice()[0].dtype;
    g.check(ad)?;
    g.check(out_dtype)?;
    let t = vty(ad);
    let batch: usize = space[..r - 2].iter().product();
    if batch > caps.max_groups_per_dim as usize {
        return Err(crate::too_large(
            "matmul",
            format!(
                "{batch} batch matrices exceed the adapter's {} workgroups per dimension",
                caps.max_groups_per_dim
            ),
        ));
    }
    g.output(0, out_dtype);
    // Each workgroup computes a TILE×TILE block of the output with 16×16 threads, each
    // thread an R×R micro-tile held in named registers (no dynamically indexed private
    // arrays: GPU compilers put those in local memory); K advances in slices of 16 staged
    // through workgroup memory.
    let r_ = matmul_micro_tile(m, n, batch);
    let tile = 16 * r_;
    let per = tile * 16 / 256; // elements of each staged slice a thread loads
                               // Both staged slices hold four values per element, so that a thread reads four rows of
                               // `a` (or columns of `b`) with one load: `kta` is `a`'s slice transposed (step-major).
    let quads = tile / 4;
    // Each step's row of a staged slice is padded by one vector, so that threads storing
    // consecutive steps of one row or column hit different banks.
    let qs = quads + 1;
    let _ = writeln!(
        g.globals,
        "var<workgroup> kta: array<vec4<{t}>, {}>;",
        qs * 16
    );
    let _ = writeln!(
        g.globals,
        "var<workgroup> ktb: array<vec4<{t}>, {}>;",
        qs * 16
    );
    let mut body = String::from(
        "@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
",
    );
    let (mm, nn, kk) = (g.size(m)?, g.size(n)?, g.size(k)?);
    // Batch coordinates and the operands' batch offsets.
    let bsym: Vec<Dim> = kernel.space[..r - 2].to_vec();
    let bc = g.coords(&mut body, "wg.z", &bsym, &space[..r - 2], "cb")?;
    let batch_off = |g: &mut Gen<'_>, v: &Strided| -> Result<String> {
        let mut e = g.signed(v.offset)?;
        for (i, c) in bc.iter().enumerate() {
            if c != "0u" {
                let s = g.signed(v.strides[i])?;
                e = format!("{e} + bitcast<i32>({c}) * {s}");
            }
        }
        Ok(e)
    };
    let ra = va.shape.rank();
    let rb = vb.shape.rank();
    let aoff = batch_off(&mut g, va)?;
    let boff = batch_off(&mut g, vb)?;
    // Consecutive threads load consecutive addresses: along `k` where an operand's rows
    // (`a`) or columns (`b`) are contiguous in `k` (a row-major `a`, a transposed `b`), else
    // along the tile (a row-major `b`, a transposed `a`).
    let a_along_k = va.strides[ra - 1] == 1 && va.strides[ra - 2] != 1;
    let b_along_k = vb.strides[rb - 2] == 1 && vb.strides[rb - 1] != 1;
    let (am, ak) = (g.signed(va.strides[ra - 2])?, g.signed(va.strides[ra - 1])?);
    let (bk, bn) = (g.signed(vb.strides[rb - 2])?, g.signed(vb.strides[rb - 1])?);
    // Buffer operands index from a per-batch base; virtual ones (iota, random) are computed.
    let operand = |g: &mut Gen<'_>, x: usize, r: &str, c: &str, direct: String| -> Result<String> {
        if how[x] != In::Virtual {
            if let In::Buffer = how[x] {
                g.input(x, ad);
            }
            return Ok(direct);
        }
        let mut coords = bc.clone();
        coords.push(r.into());
        coords.push(c.into());
        let mut stmts = String::new();
        let e = load(g, &mut stmts, kernel, launch, how, x, &coords, None)?;
        Ok(format!(
            "{{\n{stmts}                va_{x} = {e};\n            }}"
        ))
    };
    let a_direct = from_storage(
        ad,
        &format!("a0[u32(abase + bitcast<i32>(gr) * {am} + bitcast<i32>(gc) * {ak})]"),
    );
    let b_direct = from_storage(
        ad,
        &format!("a1[u32(bbase + bitcast<i32>(hr) * {bk} + bitcast<i32>(hc) * {bn})]"),
    );
    let a = operand(&mut g, 0, "gr", "gc", a_direct)?;
    let b = operand(&mut g, 1, "hr", "hc", b_direct)?;
    let assign = |x: usize, v: &str, e: String| {
        if e.starts_with('{') {
            e.replace(&format!("va_{x}"), v)
        } else {
            format!("{{ {v} = {e}; }}")
        }
    };
    let (a, b) = (assign(0, "va", a), assign(1, "vb", b));
    let _ = writeln!(body, "    let abase = {aoff};");
    let _ = writeln!(body, "    let bbase = {boff};");
    let _ = writeln!(body, "    let row0 = wg.y * {tile}u;");
    let _ = writeln!(body, "    let col0 = wg.x * {tile}u;");
    let _ = writeln!(body, "    let tid = lid.y * 16u + lid.x;");
    for p in 0..r_ {
        for q in 0..r_ {
            let _ = writeln!(body, "    var c{p}_{q} = {t}(0);");
        }
    }
    let _ = writeln!(body, "    for (var k0 = 0u; k0 < {kk}; k0 = k0 + 16u) {{");
    // Stage A[row0..+TILE, k0..+16] and B[k0..+16, col0..+TILE], `per` elements per thread.
    let (ar, ac) = if a_along_k {
        ("e / 16u".to_string(), "e % 16u".to_string())
    } else {
        (format!("e % {tile}u"), format!("e / {tile}u"))
    };
    let (br, bcn) = if b_along_k {
        ("e % 16u".to_string(), "e / 16u".to_string())
    } else {
        (format!("e / {tile}u"), format!("e % {tile}u"))
    };
    let _ = writeln!(
        body,
        "        for (var q = 0u; q < {per}u; q = q + 1u) {{
            let e = tid + q * 256u;
            let ar = {ar};
            let ac = {ac};
            let gr = row0 + ar;
            let gc = k0 + ac;
            var va = {t}(0);
            if (gr < {mm} && gc < {kk}) {a}
            kta[ac * {qs}u + ar / 4u][ar % 4u] = va;
            let br = {br};
            let bcn = {bcn};
            let hr = k0 + br;
            let hc = col0 + bcn;
            var vb = {t}(0);
            if (hr < {kk} && hc < {nn}) {b}
            ktb[br * {qs}u + bcn / 4u][bcn % 4u] = vb;
        }}
        workgroupBarrier();
        for (var kq = 0u; kq < 16u; kq = kq + 1u) {{"
    );
    // Micro-tile row `p` is row `64·(p / 4) + 4·lid.y + p % 4` of the tile, column `q`
    // column `64·(q / 4) + 4·lid.x + q % 4`: a thread reads its rows and columns four at a
    // time, and neighbouring threads read neighbouring groups of four.
    const LANE: [&str; 4] = ["x", "y", "z", "w"];
    for s in 0..r_ / 4 {
        let _ = writeln!(
            body,
            "            let fa{s} = kta[kq * {qs}u + lid.y + {}u];",
            16 * s
        );
        let _ = writeln!(
            body,
            "            let fb{s} = ktb[kq * {qs}u + lid.x + {}u];",
            16 * s
        );
    }
    for p in 0..r_ {
        for q in 0..r_ {
            let _ = writeln!(
                body,
                "            c{p}_{q} = c{p}_{q} + fa{}.{} * fb{}.{};",
                p / 4,
                LANE[p % 4],
                q / 4,
                LANE[q % 4]
            );
        }
    }
    body.push_str("        }\n        workgroupBarrier();\n    }\n");
    // The epilogue once, pasted into each micro-tile element's store.
    let mut epi = String::new();
    let value = match epilogue {
        None => "accv".to_string(),
        Some(p) => {
            let mut coords: Vec<String> = bc.clone();
            coords.push("row".into());
            coords.push("col".into());
            let mut loader = |g: &mut Gen<'_>, out: &mut String, x: InputId| {
                load(g, out, kernel, launch, how, x.index(), &coords, None)
            };
            let res = emit_program(
                &mut g,
                &mut epi,
                p,
                launch.scalars,
                Some("accv"),
                "e",
                &mut loader,
            )?;
            res[0].clone()
        }
    };
    for p in 0..r_ {
        for q in 0..r_ {
            let _ = writeln!(
                body,
                "    {{
    let row = row0 + lid.y * 4u + {}u;
    let col = col0 + lid.x * 4u + {}u;
    if (row < {mm} && col < {nn}) {{
    let accv = c{p}_{q};
    let oi = (wg.z * {mm} + row) * {nn} + col;
{epi}    o0[oi] = {};
    }}
    }}",
                64 * (p / 4) + p % 4,
                64 * (q / 4) + q % 4,
                to_storage(out_dtype, &value)
            );
        }
    }
    body.push_str("}\n");
    let grid = [
        n.div_ceil(tile) as u32,
        m.div_ceil(tile) as u32,
        batch as u32,
    ];
    if grid[0] > caps.max_groups_per_dim || grid[1] > caps.max_groups_per_dim {
        return Err(crate::too_large(
            "matmul",
            format!(
                "a {m}x{n} output needs more than {} tiles per dimension",
                caps.max_groups_per_dim
            ),
        ));
    }
    Ok(Work::one(finish(g, &body, 0, Some(grid))))
}

/// Reads an integer index element of input 1 at coordinates `coords` as `i32`-range `i64`
/// arithmetic; returns the statement prefix and the normalised-index variable name. Out of
/// range indices raise `code` and read element 0.
#[allow(clippy::too_many_arguments)]
fn index_value(
    g: &mut Gen<'_>,
    body: &mut String,
    launch: &Launch<'_>,
    idx_dtype: DType,
    coords: &[String],
    size: &str,
    code: u32,
    name: &str,
) -> Result<()> {
    g.check(idx_dtype)?;
    g.input(1, idx_dtype);
    let off = g.offset(&launch.views[1], coords)?;
    let t = vty(idx_dtype);
    g.need("status", "u32");
    g.need("words", t);
    let sizev = if idx_dtype == DType::I64 {
        g.need("ext", "u32");
        format!("k_u2l({size})")
    } else {
        format!("i32({size})")
    };
    let _ = writeln!(body, "    let {name}raw = a1[{off}];");
    let _ = writeln!(body, "    var {name}v = {name}raw;");
    let _ = writeln!(
        body,
        "    if ({name}v < {t}(0)) {{ {name}v = {name}v + {sizev}; }}"
    );
    let _ = writeln!(body, "    var {name} = 0u;");
    let _ = writeln!(
        body,
        "    if ({name}v < {t}(0) || {name}v >= {sizev}) {{ k_fail({code}u, k_words_{t}({name}raw)); }} else {{ {name} = u32({name}v); }}"
    );
    Ok(())
}

/// The block of the indexed dimension that one launch of a gather or scatter-add holds,
/// when the indexed buffer (a gather's table, a scatter-add's result) is larger than one
/// storage binding: positions `base..base + len` of the dimension's `full` extent. The
/// launch's view of that buffer covers only the block; indices are checked against `full`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IndexBlock {
    pub base: usize,
    pub len: usize,
    pub full: usize,
}

/// Gather along `axis`: one thread per output element. With a `block` of the table, a
/// thread writes only if its index falls in the block (another launch holds the rest).
pub(crate) fn take(
    caps: &Capabilities,
    kernel: &Kernel,
    axis: usize,
    launch: &Launch<'_>,
    out_dtype: DType,
    block: Option<IndexBlock>,
) -> Result<Work> {
    let mut g = Gen::new(caps, "take");
    let n = launch.space.numel();
    let (tv, iv) = (&launch.views[0], &launch.views[1]);
    let ri = iv.shape.rank();
    let size = block.map_or(tv.shape.dims()[axis], |b| b.full);
    let mut body = String::from(MAIN_1D);
    body.push_str("    let i = (wg.y * nwg.x + wg.x) * 256u + li;\n");
    let nn = g.size(n)?;
    let _ = writeln!(body, "    if (i >= {nn}) {{ return; }}");
    let c = space_coords(&mut g, &mut body, kernel, launch.space.dims(), "i", "c")?;
    let sz = g.size(size)?;
    index_value(
        &mut g,
        &mut body,
        launch,
        kernel.inputs.as_slice()[1].dtype,
        &c[axis..axis + ri],
        &sz,
        4,
        "j",
    )?;
    let mut tc: Vec<String> = c[..axis].to_vec();
    match block {
        Some(b) => {
            let (base, len) = (g.size(b.base)?, g.size(b.len)?);
            let _ = writeln!(
                body,
                "    if (j < {base} || j - {base} >= {len}) {{ return; }}"
            );
            tc.push(format!("(j - {base})"));
        }
        None => tc.push("j".into()),
    }
    tc.extend_from_slice(&c[axis + ri..]);
    g.check(out_dtype)?;
    g.input(0, out_dtype);
    g.output(0, out_dtype);
    let off = g.offset(tv, &tc)?;
    let _ = writeln!(body, "    o0[i] = a0[{off}];");
    body.push_str("}\n");
    let mut w = Work::one(finish(g, &body, n.div_ceil(WG as usize) as u64, None));
    w.index_check = (axis, size);
    Ok(w)
}

/// Scatter-add along `axis`: one workgroup per output row (the coordinates up to and
/// including `axis`), its threads over the positions after `axis` (an embedding row's
/// columns). The workgroup reads the indices once per 256-wide slice, in order, and lists the
/// positions that hit its row; each thread then adds just those updates, in ascending
/// position order (the order the reference sums in), so the result is deterministic and the
/// work is one index read per row and slice, not one per output element. An index out of
/// range raises status code 5. With a `block` of the result, the launch's rows are that
/// block's positions along `axis`.
pub(crate) fn scatter_add(
    caps: &Capabilities,
    kernel: &Kernel,
    axis: usize,
    launch: &Launch<'_>,
    out_dtype: DType,
    block: Option<IndexBlock>,
) -> Result<Work> {
    let mut g = Gen::new(caps, "scatter_add");
    let space = launch.space.dims();
    let (uv, iv) = (&launch.views[0], &launch.views[1]);
    let size = block.map_or(space[axis], |b| b.full);
    let rows: usize = space[..=axis].iter().product();
    let inner: usize = space[axis + 1..].iter().product();
    let p_len = iv.shape.numel();
    let t = vty(out_dtype);
    g.check(out_dtype)?;
    let _ = writeln!(g.globals, "var<workgroup> kflag: array<u32, 256>;");
    let _ = writeln!(g.globals, "var<workgroup> kmatch: array<u32, 256>;");
    let _ = writeln!(g.globals, "var<workgroup> kcnt: u32;");
    let mut body = String::from(MAIN_1D);
    body.push_str(
        "    let row = wg.y * nwg.x + wg.x;
",
    );
    let (nrows, ninner, pl, sz) = (g.size(rows)?, g.size(inner)?, g.size(p_len)?, g.size(size)?);
    // `row` is the same for the whole workgroup: the early return keeps barriers uniform.
    let _ = writeln!(body, "    if (row >= {nrows}) {{ return; }}");
    match block {
        Some(b) => {
            let (base, len) = (g.size(b.base)?, g.size(b.len)?);
            let _ = writeln!(body, "    let jrow = row % {len} + {base};");
        }
        None => {
            let _ = writeln!(body, "    let jrow = row % {sz};");
        }
    }
    let _ = writeln!(
        body,
        "    for (var q0 = 0u; q0 < {ninner}; q0 = q0 + 256u) {{"
    );
    let _ = writeln!(body, "    let q = q0 + li;");
    let _ = writeln!(body, "    var acc = {t}(0);");
    let _ = writeln!(body, "    for (var p0 = 0u; p0 < {pl}; p0 = p0 + 256u) {{");
    let _ = writeln!(body, "    let p = p0 + li;");
    let _ = writeln!(body, "    var hit = 0u;");
    let _ = writeln!(body, "    if (p < {pl}) {{");
    let isym: Vec<Dim> = kernel.inputs.as_slice()[1].view.shape().to_vec();
    let pc = g.coords(&mut body, "p", &isym, iv.shape.dims(), "cp")?;
    index_value(
        &mut g,
        &mut body,
        launch,
        kernel.inputs.as_slice()[1].dtype,
        &pc,
        &sz,
        5,
        "j",
    )?;
    body.push_str(
        "    if (j == jrow) { hit = 1u; }
    }
",
    );
    // An inclusive prefix sum of the hits (Hillis–Steele, 8 steps) gives each hit its place
    // in the list, in position order.
    body.push_str(
        "    kflag[li] = hit;
    workgroupBarrier();
    for (var o = 1u; o < 256u; o = o * 2u) {
        var v = 0u;
        if (li >= o) { v = kflag[li - o]; }
        workgroupBarrier();
        kflag[li] = kflag[li] + v;
        workgroupBarrier();
    }
    if (hit == 1u) { kmatch[kflag[li] - 1u] = p; }
    if (li == 255u) { kcnt = kflag[255]; }
    workgroupBarrier();
    let cnt = kcnt;
",
    );
    let _ = writeln!(body, "    if (q < {ninner}) {{");
    let _ = writeln!(body, "    let i = row * {ninner} + q;");
    let c = space_coords(&mut g, &mut body, kernel, space, "i", "c")?;
    body.push_str(
        "    for (var m = 0u; m < cnt; m = m + 1u) {
    let pm = kmatch[m];
",
    );
    let qc = g.coords(&mut body, "pm", &isym, iv.shape.dims(), "cq")?;
    let mut uc: Vec<String> = c[..axis].to_vec();
    uc.extend_from_slice(&qc);
    uc.extend_from_slice(&c[axis + 1..]);
    g.input(0, out_dtype);
    let off = g.offset(uv, &uc)?;
    let _ = writeln!(body, "    acc = acc + a0[{off}];");
    body.push_str(
        "    }
    }
    workgroupBarrier();
    }
",
    );
    g.output(0, out_dtype);
    let _ = writeln!(
        body,
        "    if (q < {ninner}) {{ o0[row * {ninner} + q] = acc; }}"
    );
    body.push_str(
        "    }
}
",
    );
    let mut w = Work::one(finish(g, &body, rows as u64, None));
    w.index_check = (axis, size);
    Ok(w)
}

/// Top-k along the last axis: one thread per row, k selection scans (k is small).
pub(crate) fn top_k(
    caps: &Capabilities,
    kernel: &Kernel,
    k: usize,
    indices: &[bool],
    launch: &Launch<'_>,
) -> Result<Work> {
    let mut g = Gen::new(caps, "top_k");
    let view = &launch.views[0];
    let r = view.shape.rank();
    let n = view.shape.dims()[r - 1];
    let rows: usize = view.shape.dims()[..r - 1].iter().product();
    let d = kernel.inputs.as_slice()[0].dtype;
    g.check(d)?;
    g.input(0, d);
    let st = sty(d);
    let mut body = String::from(MAIN_1D);
    body.push_str("    let row = (wg.y * nwg.x + wg.x) * 256u + li;\n");
    let nr = g.size(rows)?;
    let _ = writeln!(body, "    if (row >= {nr}) {{ return; }}");
    let rsym: Vec<Dim> = kernel.inputs.as_slice()[0].view.shape()[..r - 1].to_vec();
    let mut rc = g.coords(&mut body, "row", &rsym, &view.shape.dims()[..r - 1], "cr")?;
    rc.push("jj".into());
    let nn = g.size(n)?;
    let kk = g.size(k)?;
    let off = g.offset(view, &rc)?;
    let nan = |x: &str| {
        if d.is_float() {
            format!("k_isnan_{}({x})", vty(d))
        } else {
            "false".into()
        }
    };
    if d.is_float() {
        g.need("consts", vty(d));
    }
    // `before(a, b)`: a comes before b in the output order (NaN largest, ties lower index).
    let _ = writeln!(
        g.globals,
        "fn k_before(av: {st}, ai: u32, bv: {st}, bi: u32) -> bool {{
    let an = {an};
    let bn = {bn};
    if (an && !bn) {{ return true; }}
    if (bn && !an) {{ return false; }}
    if (an) {{ return ai < bi; }}
    if (av > bv) {{ return true; }}
    return av == bv && ai < bi;
}}",
        an = nan("av"),
        bn = nan("bv")
    );
    let _ = writeln!(body, "    var pv: {st};");
    let _ = writeln!(body, "    var pi = 0xffffffffu;");
    let _ = writeln!(body, "    for (var t = 0u; t < {kk}; t = t + 1u) {{");
    let _ = writeln!(body, "        var bv: {st};");
    let _ = writeln!(body, "        var bi = 0xffffffffu;");
    let _ = writeln!(
        body,
        "        for (var jj = 0u; jj < {nn}; jj = jj + 1u) {{"
    );
    let _ = writeln!(body, "            let v = a0[{off}];");
    let _ = writeln!(
        body,
        "            if ((pi == 0xffffffffu || k_before(pv, pi, v, jj)) && (bi == 0xffffffffu || k_before(v, jj, bv, bi))) {{ bv = v; bi = jj; }}"
    );
    let _ = writeln!(body, "        }}");
    let _ = writeln!(body, "        pv = bv;");
    let _ = writeln!(body, "        pi = bi;");
    for (j, &is_idx) in indices.iter().enumerate() {
        if is_idx {
            g.check(DType::I64)?;
            g.output(j, DType::I64);
            g.need("ext", "u32");
            let _ = writeln!(body, "        o{j}[row * {kk} + t] = k_u2l(bi);");
        } else {
            g.output(j, d);
            let _ = writeln!(body, "        o{j}[row * {kk} + t] = bv;");
        }
    }
    body.push_str("    }\n}\n");
    Ok(Work::one(finish(
        g,
        &body,
        rows.div_ceil(WG as usize) as u64,
        None,
    )))
}

/// Concatenation: one dispatch per input, each copying its elements into their place.
pub(crate) fn concat(
    caps: &Capabilities,
    kernel: &Kernel,
    axis: usize,
    launch: &Launch<'_>,
    out_dtype: DType,
) -> Result<Vec<(usize, Dispatch)>> {
    let out_strides = launch.space.strides();
    let mut at = 0usize;
    let mut out = Vec::new();
    for (x, view) in launch.views.iter().enumerate() {
        let mut g = Gen::new(caps, "concat");
        g.check(out_dtype)?;
        let n = view.shape.numel();
        let len = view.shape.dims()[axis];
        if n > 0 {
            let mut body = String::from(MAIN_1D);
            body.push_str("    let i = (wg.y * nwg.x + wg.x) * 256u + li;\n");
            let nn = g.size(n)?;
            let _ = writeln!(body, "    if (i >= {nn}) {{ return; }}");
            let sym: Vec<Dim> = kernel.inputs.as_slice()[x].view.shape().to_vec();
            let c = g.coords(&mut body, "i", &sym, view.shape.dims(), "c")?;
            g.input(0, out_dtype);
            g.output(0, out_dtype);
            let off = g.offset(view, &c)?;
            let mut oi = String::from("0u");
            for (k, ck) in c.iter().enumerate() {
                if kernel.space[k] == Dim::Const(1) {
                    continue;
                }
                let s = g.size(out_strides[k])?;
                let ck = if k == axis {
                    let a = g.size(at)?;
                    format!("({ck} + {a})")
                } else {
                    ck.clone()
                };
                oi = format!("{oi} + {ck} * {s}");
            }
            let _ = writeln!(body, "    o0[{oi}] = a0[{off}];");
            body.push_str("}\n");
            out.push((x, finish(g, &body, n.div_ceil(WG as usize) as u64, None)));
        }
        at += len;
    }
    Ok(out)
}

/// One kernel of a fused row group (see [`row_group`]): the kernel, its launch (its own
/// space), where its inputs start in the group's input list, and the group buffer each of
/// its outputs goes to.
pub(crate) struct GroupPart<'a> {
    pub kernel: &'a Kernel,
    pub launch: &'a Launch<'a>,
    pub first_input: usize,
    pub outputs: &'a [usize],
}

/// Reduced elements a thread of a fused row group may sum serially (the plain reduction's
/// per-thread run), so the group accumulates no worse than the kernels launched alone.
pub(crate) const GROUP_SERIAL: usize = CHUNK / WG as usize;

/// The longest row a fused row group's whole-row reduction may cover: rows of up to
/// `CHUNK` chunks, whose plain reduction takes two passes, are summed in that order.
pub(crate) const GROUP_LONGEST_ROW: usize = CHUNK * CHUNK;

/// The fewest rows a group of rows longer than `CHUNK` is fused for: a workgroup per row
/// is then still enough to fill a large GPU (the plain kernels run one per row and chunk).
pub(crate) const GROUP_LONG_ROWS_MIN: usize = 1024;

/// A whole row group in one dispatch: one workgroup per row runs the group's kernels in
/// order over its row, each kernel's writes made visible to the next by a barrier (the rows
/// are independent: `kiln_compiler::RowGroup`). Elementwise kernels stride the row's
/// positions over the workgroup; a reduction of the whole row sums a strided share per
/// thread and a tree in workgroup memory; a reduction keeping more than the row sums each
/// output serially in one thread. `all` holds every part's inputs in order (`load`'s view of
/// the group), `how` how each is read; group buffer `i` is output binding `o{i}` of dtype
/// `out_dtypes[i]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn row_group(
    caps: &Capabilities,
    parts: &[GroupPart<'_>],
    all: &Kernel,
    all_launch: &Launch<'_>,
    how: &[In],
    out_dtypes: &[DType],
    rows: usize,
) -> Result<Work> {
    let mut g = Gen::new(caps, "wgpu row group");
    for (i, &d) in out_dtypes.iter().enumerate() {
        g.check(d)?;
        g.output(i, d);
    }
    let mut body = String::from(MAIN_1D);
    body.push_str("    let row = wg.y * nwg.x + wg.x;\n");
    let nr = g.size(rows)?;
    let _ = writeln!(body, "    if (row >= {nr}) {{ return; }}");
    for part in parts {
        let space = part.launch.space.dims();
        let sym = &part.kernel.space;
        let off = part.first_input;
        body.push_str("    {\n");
        match &part.kernel.kind {
            KernelKind::Elementwise { program } => {
                let inner = space.iter().skip(1).product::<usize>();
                let ni = g.size(inner)?;
                let _ = writeln!(body, "    for (var e = li; e < {ni}; e = e + 256u) {{");
                let _ = writeln!(body, "    let i = row * {ni} + e;");
                let coords = g.coords(&mut body, "i", sym, space, "c")?;
                let mut loader = |g: &mut Gen<'_>, out: &mut String, x: InputId| {
                    load(g, out, all, all_launch, how, off + x.index(), &coords, None)
                };
                let results = emit_program(
                    &mut g,
                    &mut body,
                    program,
                    all_launch.scalars,
                    None,
                    "",
                    &mut loader,
                )?;
                for (j, r) in results.iter().enumerate() {
                    let b = part.outputs[j];
                    let _ = writeln!(body, "    o{b}[i] = {};", to_storage(out_dtypes[b], r));
                }
                body.push_str("    }\n");
            }
            KernelKind::Reduce { program, op, axes } => {
                let (kept, red) = split_axes(space.len(), axes);
                let out_inner: usize = kept.iter().skip(1).map(|&a| space[a]).product();
                let red_n: usize = red.iter().map(|&a| space[a]).product();
                let d = out_dtypes[part.outputs[0]];
                let st = sty(d);
                let id = identity(*op, d);
                let red_sym: Vec<Dim> = red.iter().map(|&a| sym[a]).collect();
                let red_dims: Vec<usize> = red.iter().map(|&a| space[a]).collect();
                let nred = g.size(red_n)?;
                // One position of the reduction: its value, after storing side outputs.
                let value = |g: &mut Gen<'_>,
                             body: &mut String,
                             kept_names: &[String]|
                 -> Result<String> {
                    let rn = g.coords(body, "r", &red_sym, &red_dims, "cr")?;
                    let mut coords = vec![String::from("0u"); space.len()];
                    for (n, &a) in kept.iter().enumerate() {
                        coords[a] = kept_names[n].clone();
                    }
                    for (n, &a) in red.iter().enumerate() {
                        coords[a] = rn[n].clone();
                    }
                    let mut loader = |g: &mut Gen<'_>, out: &mut String, x: InputId| {
                        load(g, out, all, all_launch, how, off + x.index(), &coords, None)
                    };
                    let res =
                        emit_program(g, body, program, all_launch.scalars, None, "", &mut loader)?;
                    if res.len() > 1 {
                        let mut flat = coords[0].clone();
                        for (k, c) in coords.iter().enumerate().skip(1) {
                            let n = g.size(space[k])?;
                            flat = format!("({flat}) * {n} + {c}");
                        }
                        let _ = writeln!(body, "    let kpos = {flat};");
                        for (j, v) in res.iter().enumerate().skip(1) {
                            let b = part.outputs[j];
                            let _ = writeln!(
                                body,
                                "    o{b}[kpos] = {};",
                                to_storage(out_dtypes[b], v)
                            );
                        }
                    }
                    Ok(to_storage(d, &res[0]))
                };
                let o0 = part.outputs[0];
                if out_inner == 1 {
                    // The whole row: strided shares, then a tree.
                    let arr = format!("kgred_{st}");
                    if !g.globals.contains(&format!("var<workgroup> {arr}:")) {
                        let _ = writeln!(g.globals, "var<workgroup> {arr}: array<{st}, 256>;");
                    }
                    let mut kept_names = vec![String::from("0u"); kept.len()];
                    kept_names[0] = "row".into();
                    let tree = combine(
                        &mut g,
                        *op,
                        d,
                        &format!("{arr}[li]"),
                        &format!("{arr}[li + s]"),
                    );
                    let tree = format!(
                        "    {arr}[li] = acc;\n    workgroupBarrier();\n    for (var s = 128u; s > 0u; s = s >> 1u) {{\n    if (li < s) {{ {arr}[li] = {tree}; }}\n    workgroupBarrier();\n    }}\n"
                    );
                    if red_n <= CHUNK {
                        let _ = writeln!(body, "    var acc: {st} = {id};");
                        let _ = writeln!(body, "    for (var r = li; r < {nred}; r = r + 256u) {{");
                        let v = value(&mut g, &mut body, &kept_names)?;
                        let c = combine(&mut g, *op, d, "acc", &v);
                        let _ = writeln!(body, "    acc = {c};\n    }}");
                        body.push_str(&tree);
                    } else {
                        // Longer rows in the plain reduction's order: each CHUNK of the row
                        // strided over the threads and reduced by the tree into a partial;
                        // thread `c % 256` folds partial `c` into its share; a last tree.
                        let _ = writeln!(body, "    var share: {st} = {id};");
                        let _ = writeln!(
                            body,
                            "    for (var c0 = 0u; c0 < {nred}; c0 = c0 + {CHUNK}u) {{"
                        );
                        let _ = writeln!(body, "    let rend = min(c0 + {CHUNK}u, {nred});");
                        let _ = writeln!(body, "    var acc: {st} = {id};");
                        let _ =
                            writeln!(body, "    for (var r = c0 + li; r < rend; r = r + 256u) {{");
                        let v = value(&mut g, &mut body, &kept_names)?;
                        let c = combine(&mut g, *op, d, "acc", &v);
                        let _ = writeln!(body, "    acc = {c};\n    }}");
                        body.push_str(&tree);
                        let c = combine(&mut g, *op, d, "share", &format!("{arr}[0]"));
                        let _ = writeln!(
                            body,
                            "    if (li == (c0 / {CHUNK}u) % 256u) {{ share = {c}; }}\n    workgroupBarrier();\n    }}"
                        );
                        let _ = writeln!(body, "    var acc: {st} = share;");
                        body.push_str(&tree);
                    }
                    let _ = writeln!(body, "    if (li == 0u) {{ o{o0}[row] = {arr}[0]; }}");
                } else {
                    // Several outputs per row: one thread each, serially over the reduction.
                    let kept_sym: Vec<Dim> = kept.iter().map(|&a| sym[a]).collect();
                    let kept_dims: Vec<usize> = kept.iter().map(|&a| space[a]).collect();
                    let no = g.size(out_inner)?;
                    let _ = writeln!(body, "    for (var q = li; q < {no}; q = q + 256u) {{");
                    let _ = writeln!(body, "    let o = row * {no} + q;");
                    let kept_names = g.coords(&mut body, "o", &kept_sym, &kept_dims, "ck")?;
                    let _ = writeln!(body, "    var acc: {st} = {id};");
                    let _ = writeln!(body, "    for (var r = 0u; r < {nred}; r = r + 1u) {{");
                    let v = value(&mut g, &mut body, &kept_names)?;
                    let c = combine(&mut g, *op, d, "acc", &v);
                    let _ = writeln!(body, "    acc = {c};\n    }}");
                    let _ = writeln!(body, "    o{o0}[o] = acc;\n    }}");
                }
            }
            _ => {
                return Err(crate::internal(
                    "a row group holds only elementwise kernels and reductions".into(),
                ))
            }
        }
        body.push_str("    }\n    storageBarrier();\n    workgroupBarrier();\n");
    }
    body.push_str("}\n");
    Ok(Work::one(finish(g, &body, rows as u64, None)))
}
