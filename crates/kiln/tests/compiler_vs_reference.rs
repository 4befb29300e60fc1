//! Random expression DAGs — random shapes with size-0 and size-1 dimensions, broadcasting,
//! every dtype, shared subexpressions, several outputs — evaluated through the compiler and
//! the CPU backend must equal the reference interpreter (the independent oracle), including
//! *which* graphs fail at evaluation. On a device that lacks a dtype (wgpu without
//! `SHADER_F64`/`SHADER_INT64`, e.g. llvmpipe's GL) the graphs are generated from the dtypes
//! it has, and a case that still reaches a missing dtype is skipped and counted, never passed.

mod common;

use kiln::{Array, BinaryOp, DType, ReduceOp, UnaryOp};
use kiln_ir::{HostData, Scalar};
use proptest::prelude::*;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

/// The dtypes graphs are generated from: all of them for the CPU, those a wgpu adapter
/// computes with for wgpu. For a device with every dtype, generation is unchanged (the same
/// seed gives the same graph as before this restriction existed).
#[derive(Clone)]
struct Dtypes(Vec<DType>);

impl Dtypes {
    fn all() -> Dtypes {
        Dtypes(DType::ALL.to_vec())
    }
    fn of(device: kiln::Device) -> Dtypes {
        Dtypes(
            DType::ALL
                .into_iter()
                .filter(|&d| device.supports(d))
                .collect(),
        )
    }
    fn has(&self, d: DType) -> bool {
        self.0.contains(&d)
    }
    /// Whether `x` and everything its graph computes are of these dtypes. Graphs of 32-bit
    /// values can compute in 64 bits inside: `bool_array > 0` compares as i64 and
    /// `i32_array < 0.5` as f64 (numpy's promotion of Python scalars).
    fn admits(&self, x: &Array) -> bool {
        self.has(x.dtype())
            && (self.0.len() == DType::ALL.len()
                || kiln::lower(&[x])
                    .graph
                    .nodes
                    .values()
                    .all(|n| self.has(n.dtype)))
    }
    /// `ds` without the dtypes left out (keeping repeats, which weight the choice).
    fn filter(&self, ds: &[DType]) -> Vec<DType> {
        ds.iter().copied().filter(|&d| self.has(d)).collect()
    }
}

fn random_input(r: &mut Rng, base: &[usize], dt: &Dtypes) -> Array {
    let drop = r.below(base.len() + 1);
    let shape: Vec<usize> = base[drop..]
        .iter()
        .map(|&d| if r.chance(0.3) { 1 } else { d })
        .collect();
    let n: usize = shape.iter().product();
    let dtype = r.pick(&dt.filter(&[
        DType::F32,
        DType::F64,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::Bool,
    ]));
    let float = |r: &mut Rng| {
        if r.chance(0.03) {
            r.pick(&[f64::NAN, f64::INFINITY, f64::NEG_INFINITY])
        } else {
            (r.below(6001) as f64 - 3000.0) / 1000.0
        }
    };
    match dtype {
        DType::F32 => Array::from_vec((0..n).map(|_| float(r) as f32).collect(), &shape),
        DType::F64 => Array::from_vec((0..n).map(|_| float(r)).collect(), &shape),
        DType::I32 => Array::from_vec((0..n).map(|_| r.below(11) as i32 - 5).collect(), &shape),
        DType::I64 => Array::from_vec((0..n).map(|_| r.below(11) as i64 - 5).collect(), &shape),
        DType::Bool => Array::from_vec((0..n).map(|_| r.chance(0.5)).collect(), &shape),
    }
    .unwrap()
}

const UNARY: [UnaryOp; 21] = UnaryOp::ALL;
const BINARY: [BinaryOp; 17] = BinaryOp::ALL;

/// A random op over `nodes`; `None` when the op does not apply, fails to build, or makes a
/// dtype outside `dt`.
fn random_op(r: &mut Rng, nodes: &[Array], dt: &Dtypes) -> Option<Array> {
    let a = &nodes[r.below(nodes.len())];
    let b = &nodes[r.below(nodes.len())];
    let axis = |r: &mut Rng, a: &Array| {
        if a.ndim() == 0 {
            0
        } else {
            r.below(a.ndim()) as isize - r.below(2) as isize * a.ndim() as isize
        }
    };
    let out = match r.below(16) {
        0 | 1 => a.try_unary(r.pick(&UNARY)),
        2 | 3 => a.try_binary(r.pick(&BINARY), b),
        4 => {
            let s = match r.below(3) {
                0 => Scalar::Float((r.below(7) as f64 - 3.0) * 0.5),
                1 => Scalar::Int(r.below(7) as i64 - 3),
                _ => Scalar::Bool(r.chance(0.5)),
            };
            let op = r.pick(&BINARY);
            if r.chance(0.5) {
                a.try_binary(op, kiln::Operand::Scalar(s))
            } else {
                a.try_binary_rev(op, kiln::Operand::Scalar(s))
            }
        }
        5 => Array::try_where(&a.gt(0), b, a),
        6 => {
            let to = r.pick(&dt.0);
            if a.dtype().is_float() && to.is_int() {
                // Float→int casts of NaN/inf saturate (documented); sums of saturated values
                // then cancel catastrophically and depend on summation order. Keep casts finite.
                Array::try_where(&a.isnan(), 0.0, a.clip(-1e6, 1e6)).map(|x| x.cast(to))
            } else {
                Ok(a.cast(to))
            }
        }
        7 => {
            let op = r.pick(&[ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min]);
            let axes: Vec<isize> = (0..a.ndim() as isize).filter(|_| r.chance(0.5)).collect();
            let keep = r.chance(0.5);
            let res = if r.chance(0.3) { Err(()) } else { Ok(()) };
            let axes_opt = if res.is_err() { None } else { Some(&axes[..]) };
            match op {
                ReduceOp::Sum => a.try_sum(axes_opt, keep),
                ReduceOp::Prod => a.try_prod(axes_opt, keep),
                ReduceOp::Max => a.try_max(axes_opt, keep),
                ReduceOp::Min => a.try_min(axes_opt, keep),
            }
        }
        // argmax/argmin make i64
        8 if dt.has(DType::I64) => {
            let ax = if r.chance(0.3) {
                None
            } else {
                Some(axis(r, a))
            };
            if r.chance(0.5) {
                a.try_argmax(ax, r.chance(0.5))
            } else {
                a.try_argmin(ax, r.chance(0.5))
            }
        }
        9 => match r.below(5) {
            0 => Ok(a.transpose()),
            1 => a.try_reshape(&[-1]),
            2 => a.try_expand_dims(0),
            3 if a.ndim() > 0 => a.try_slice(&[kiln::SliceArg::range(
                None,
                None,
                -(1 + r.below(2) as isize),
            )]),
            _ => a.try_broadcast_to(&[&[2usize][..], a.shape()].concat()),
        },
        10 => a.try_matmul(b),
        11 if a.ndim() > 0 => Array::try_concat(&[a, &a.cast(b.dtype())], 0),
        12 if a.ndim() > 0 && a.shape()[0] > 0 => {
            let n = a.shape()[0] as i64;
            let ids: Vec<i64> = (0..r.below(4))
                .map(|_| r.below(2 * n as usize) as i64 - n)
                .collect();
            let k = ids.len();
            // i32 indices where i64 is missing (take reads either)
            let ids = if dt.has(DType::I64) {
                Array::from_vec(ids, &[k])
            } else {
                Array::from_vec(ids.into_iter().map(|i| i as i32).collect(), &[k])
            };
            a.try_take(&ids.unwrap(), 0)
        }
        13 if a.ndim() > 0 && a.shape()[a.ndim() - 1] > 0 => {
            let k = 1 + r.below(a.shape()[a.ndim() - 1]);
            // the indices are i64
            a.try_top_k(k).map(|(v, i)| {
                if !dt.has(DType::I64) || r.chance(0.5) {
                    v
                } else {
                    i
                }
            })
        }
        14 if a.ndim() > 0 => a.try_softmax(-1),
        15 => a.try_mean(None, r.chance(0.5)),
        _ => a.try_neg(),
    };
    out.ok().filter(|x| dt.admits(x))
}

fn close(x: f64, y: f64, tol: f64) -> bool {
    if x.is_nan() || y.is_nan() {
        return x.is_nan() && y.is_nan();
    }
    if x.is_infinite() || y.is_infinite() {
        return x == y;
    }
    (x - y).abs() <= tol * (1.0 + x.abs().max(y.abs()))
}

/// `f32_inside`: the graph computes in f32 somewhere, so f64 outputs inherit f32 rounding
/// (the backend computes f32 functions in f32, the reference in f64 rounded to f32: they may
/// differ by an ulp or two before the cast).
fn same(got: &HostData, want: &HostData, f32_inside: bool) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.len() != want.len() {
        return Err(format!(
            "dtype/len {:?}/{} vs {:?}/{}",
            got.dtype(),
            got.len(),
            want.dtype(),
            want.len()
        ));
    }
    let tol = match got.dtype() {
        DType::F32 => 1e-4,
        DType::F64 if f32_inside => 1e-4,
        DType::F64 => 1e-9,
        _ => 0.0,
    };
    for i in 0..got.len() {
        let (g, w) = (got.get(i), want.get(i));
        let ok = match (g, w) {
            (Scalar::Float(a), Scalar::Float(b)) => close(a, b, tol),
            _ => g == w,
        };
        if !ok {
            return Err(format!("element {i}: {g:?} vs {w:?}"));
        }
    }
    Ok(())
}

/// How one random graph went.
enum Outcome {
    /// Checked: the compiled values (or the failure) equal the reference's.
    Checked,
    /// Not checked: the device reported [`kiln::Error::UnsupportedDType`] for this dtype,
    /// which it lacks (see `common::lacked_dtype`).
    Lacks(DType),
}

/// Builds the graph of `seed` from the dtypes of `dt` and compares its evaluation on
/// `device` with the reference.
fn check(seed: u64, device: kiln::Device, dt: &Dtypes) -> Result<Outcome, String> {
    let mut r = Rng(seed);
    let rank = r.below(4);
    let base: Vec<usize> = (0..rank)
        .map(|_| {
            if r.chance(0.05) {
                0
            } else {
                r.pick(&[1, 2, 3, 5])
            }
        })
        .collect();
    let mut nodes: Vec<Array> = (0..2 + r.below(3))
        .map(|_| random_input(&mut r, &base, dt))
        .collect();
    let n_in = nodes.len();
    for _ in 0..4 + r.below(10) {
        if let Some(x) = random_op(&mut r, &nodes, dt) {
            nodes.push(x);
        }
    }
    let outs: Vec<&Array> = (0..1 + r.below(3))
        .map(|_| {
            &nodes[n_in.min(nodes.len() - 1) + r.below(nodes.len() - n_in.min(nodes.len() - 1))]
        })
        .collect();
    let expr = kiln::lower(&outs);
    let want = kiln_reference::evaluate(&expr);
    let plan = kiln::inspect(&outs)
        .map(|i| i.dot_after)
        .unwrap_or_default();
    if std::env::var("KILN_SEED").is_ok() {
        eprintln!(
            "params: {:?}\noutputs: {:?}",
            expr.params, expr.graph.outputs
        );
    }
    let got = kiln::eval_on(device, &outs);
    if let Err(e) = &got {
        if let Some(d) = common::lacked_dtype(device, e) {
            return Ok(Outcome::Lacks(d));
        }
    }
    match (want, got) {
        (Err(_), Err(_)) => Ok(Outcome::Checked),
        (Ok(w), Ok(())) => {
            for (k, (o, w)) in outs.iter().zip(&w).enumerate() {
                let g = kiln::lower(&[o]).params[kiln_ir::ParamId::from_u32(0)]
                    .to_host()
                    .map_err(|e| format!("download: {e}"))?;
                let f32_inside = expr.graph.nodes.values().any(|n| n.dtype == DType::F32);
                same(&g, w, f32_inside).map_err(|e| {
                    format!(
                        "output {k} (shape {:?}): {e}\n{}\ncompiled:\n{plan}",
                        o.shape(),
                        expr.to_dot()
                    )
                })?;
            }
            Ok(Outcome::Checked)
        }
        (w, g) => Err(format!(
            "reference {:?} but compiled {:?}\n{}",
            w.err(),
            g.err(),
            expr.to_dot()
        )),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("KILN_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(400)
    ))]

    #[test]
    fn compiled_equals_reference(seed in any::<u64>()) {
        if let Err(e) = check(seed, kiln::Device::Cpu, &Dtypes::all()) {
            prop_assert!(false, "seed {seed}: {e}");
        }
    }
}

/// The same random graphs on the GPU backend (fewer: software drivers compile each new
/// kernel structure slowly); skipped with a message when no adapter exists. Without f64 or
/// i64 (llvmpipe's GL) the graphs use the other dtypes only, inside too; a case whose
/// evaluation still needs a missing one is skipped and counted (and must stay rare).
#[cfg(feature = "wgpu")]
#[test]
fn compiled_equals_reference_on_wgpu() {
    if !common::wgpu_or_skip("random DAGs") {
        return;
    }
    let cases: u64 = std::env::var("KILN_WGPU_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    let device = kiln::Device::Wgpu;
    let dt = Dtypes::of(device);
    let mut skips = common::DTypeSkips::default();
    let mut seeds = Rng(0x5eed_cafe);
    for _ in 0..cases {
        let seed = seeds.next();
        match check(seed, device, &dt) {
            Ok(Outcome::Checked) => {}
            Ok(Outcome::Lacks(d)) => skips.add(d),
            Err(e) => panic!("seed {seed} on wgpu: {e}"),
        }
    }
    skips.report("random DAGs", device, cases as usize);
    // Generating from the dtypes the adapter has keeps the skips rare; many would mean
    // graphs reach a missing dtype some new way (or the backend reports one wrongly).
    assert!(
        skips.total() as u64 * 10 <= cases,
        "random DAGs on wgpu: {} of {cases} cases skipped for missing dtypes",
        skips.total()
    );
}

/// Replays one seed: `KILN_SEED=... cargo test -p kiln --test compiler_vs_reference -- --ignored`.
#[test]
#[ignore]
fn replay_seed() {
    let seed: u64 = std::env::var("KILN_SEED")
        .expect("set KILN_SEED")
        .parse()
        .unwrap();
    let device = std::env::var("KILN_DEVICE")
        .map_or(Ok(kiln::Device::Cpu), |d| d.parse())
        .unwrap();
    match check(seed, device, &Dtypes::of(device)).unwrap() {
        Outcome::Checked => {}
        Outcome::Lacks(d) => eprintln!("seed {seed}: skipped, {device} lacks {d}"),
    }
}

/// The CPU backend claiming a GPU-like limit on the arrays one kernel reads: the compiler must
/// split fused groups to fit (checked at every launch) without changing any result.
struct Limited(kiln_cpu::CpuBackend, usize);

impl kiln_compiler::Backend for Limited {
    type Buffer = <kiln_cpu::CpuBackend as kiln_compiler::Backend>::Buffer;
    fn name(&self) -> &'static str {
        "cpu-limited"
    }
    fn allocate(&self, dtype: DType, len: usize) -> kiln_ir::Result<Self::Buffer> {
        self.0.allocate(dtype, len)
    }
    fn release(&self, buffer: Self::Buffer) {
        self.0.release(buffer)
    }
    fn upload(&self, data: &HostData) -> kiln_ir::Result<Self::Buffer> {
        self.0.upload(data)
    }
    fn download(&self, b: Self::Buffer, dtype: DType, len: usize) -> kiln_ir::Result<HostData> {
        self.0.download(b, dtype, len)
    }
    fn max_kernel_inputs(&self) -> usize {
        self.1
    }
    fn launch(
        &self,
        kernel: &kiln_compiler::Kernel,
        launch: &kiln_compiler::Launch<'_>,
        inputs: &[kiln_compiler::Arg<'_, Self::Buffer>],
        outputs: &mut [Self::Buffer],
    ) -> kiln_ir::Result<()> {
        // concatenation reads each input in its own pass (one per dispatch on the GPU)
        if !matches!(kernel.kind, kiln_compiler::KernelKind::Concat { .. }) {
            assert!(
                kernel.inputs.len() <= self.1,
                "a {:?} kernel reads {} arrays; the limit is {}",
                kernel.kind,
                kernel.inputs.len(),
                self.1
            );
        }
        self.0.launch(kernel, launch, inputs, outputs)
    }
}

/// Arithmetic that keeps fusing: a binary op or `where` over random earlier values, cast to
/// f64 so that dtype changes do not cut the trees.
fn wide_op(r: &mut Rng, nodes: &[Array]) -> Option<Array> {
    let pick = |r: &mut Rng| nodes[r.below(nodes.len())].cast(DType::F64);
    let (a, b) = (pick(r), pick(r));
    match r.below(6) {
        0 => a.try_add(&b).ok(),
        1 => a.try_sub(&b).ok(),
        2 => a.try_mul(&b).ok(),
        3 => a.try_maximum(&b).ok(),
        4 => a.try_tanh().ok()?.try_add(&b).ok(),
        _ => {
            let c = pick(r);
            Array::try_where(&a.try_gt(&b).ok()?, &c, &a).ok()
        }
    }
}

#[test]
fn fused_groups_split_under_an_input_limit_equal_the_reference() {
    let mut seeds = Rng(0x11_4175);
    let mut split = 0;
    for case in 0..300 {
        let seed = seeds.next();
        let mut r = Rng(seed);
        let limit = 4 + r.below(4);
        let engine = kiln_compiler::Engine::new(Limited(kiln_cpu::CpuBackend, limit), 8);
        let base: Vec<usize> = (0..r.below(3)).map(|_| r.pick(&[1, 2, 3])).collect();
        // many inputs and long chains, so fused trees read more arrays than the limit
        let mut nodes: Vec<Array> = (0..6 + r.below(8))
            .map(|_| random_input(&mut r, &base, &Dtypes::all()))
            .collect();
        let n_in = nodes.len();
        for _ in 0..12 + r.below(20) {
            let x = if r.chance(0.2) {
                random_op(&mut r, &nodes, &Dtypes::all())
            } else {
                wide_op(&mut r, &nodes)
            };
            if let Some(x) = x {
                nodes.push(x);
            }
        }
        let outs: Vec<&Array> = nodes[n_in.min(nodes.len() - 1)..]
            .iter()
            .rev()
            .take(2)
            .collect();
        let expr = kiln::lower(&outs);
        let unlimited = kiln_compiler::compile(&expr).unwrap().plan.kernels.len();
        let limited = kiln_compiler::compile_with_limit(&expr, limit)
            .unwrap()
            .plan
            .kernels
            .len();
        split += usize::from(limited > unlimited);
        let want = kiln_reference::evaluate(&expr);
        let roots: Vec<&kiln_ir::NodeRef> = outs.iter().map(|a| a.node()).collect();
        let got = engine.evaluate(&roots);
        match (want, got) {
            (Err(_), Err(_)) => {}
            (Ok(w), Ok(g)) => {
                let f32_inside = expr.graph.nodes.values().any(|n| n.dtype == DType::F32);
                for (k, (g, w)) in g.iter().zip(&w).enumerate() {
                    if let Err(e) = same(g, w, f32_inside) {
                        panic!("case {case} (seed {seed}, limit {limit}) output {k}: {e}");
                    }
                }
            }
            (w, g) => panic!(
                "case {case} (seed {seed}): reference {:?} but compiled {:?}",
                w.err(),
                g.err()
            ),
        }
    }
    // the test must exercise the split, not only graphs that fit anyway
    assert!(split >= 30, "only {split} of 300 graphs needed splitting");
}
