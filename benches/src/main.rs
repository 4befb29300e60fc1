//! kiln's benchmark binary: runs each workload several times and prints one JSON object per
//! line with the median and the spread.
//!
//! - `build`: building an expression chain of N graph nodes (the user's own per-iteration
//!   cost, with shape inference).
//! - `cache_hit`: trace + key + cache lookup of an already compiled N-node graph (the
//!   graph-cache hit path; binding happens in `run`).
//! - `compile`: compiling a fresh 1,000-node graph (passes, fusion, memory plan).
//! - `W1_memory`: peak bytes of the W1 plan `(a*b + c)*d - a` at 64M elements against
//!   inputs + output, from the inspector and from the process high-water mark.
//! - `W1`, `W6`: end-to-end times on the current CPU backend. W1's loop drops each result
//!   before the next, so its output storage comes back to the buffer pool (`"output":
//!   "recycled"`); `W1_kept` keeps every result alive, so each call writes fresh pages
//!   (`"output":"kept"`), as `triad_fresh` does against `triad_reused`.
//!
//! Usage: `cargo run --release -p kiln-benches [-- --quick]`.

use kiln::{Array, DType};
use kiln_compiler::{compile, Engine};
use kiln_cpu::CpuBackend;
use kiln_ir::{LazyExpr, NodeRef};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("finite timings"));
    v[v.len() / 2]
}

fn time<F: FnMut()>(reps: usize, mut f: F) -> (f64, f64, f64) {
    f(); // warm-up
    let t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            f();
            let e = s.elapsed().as_secs_f64();
            if std::env::var_os("REPS").is_some() {
                eprint!("{:.2} ", e * 1e3);
            }
            e
        })
        .collect();
    let lo = t.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = t.iter().copied().fold(0.0, f64::max);
    (median(t), lo, hi)
}

/// A chain of exactly `nodes` graph nodes over `x` (unary ops and same-shape adds: one node
/// each, no implicit broadcasts or casts).
fn chain(x: &Array, nodes: usize) -> Array {
    let mut y = x.clone();
    for i in 0..nodes {
        y = if i % 2 == 0 { y.tanh() } else { &y + x };
    }
    y
}

fn json(fields: &[(&str, String)]) {
    let mut body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    // Where `kiln::eval` ran (`KILN_DEVICE=wgpu` with the `wgpu` feature runs W1-W7 on the GPU).
    body.push(format!("\"device\":\"{}\"", kiln::default_device()));
    println!("{{{}}}", body.join(","));
}

fn s(x: &str) -> String {
    format!("\"{x}\"")
}

fn vm_hwm_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The build flavour: `native` when compiled with AVX2 enabled at compile time (e.g.
/// `RUSTFLAGS="-C target-cpu=native"`), else `default`.
fn flavour() -> &'static str {
    if cfg!(target_feature = "avx2") {
        "native"
    } else {
        "default"
    }
}

/// One timing line: median over `reps` runs (after a warm-up), with GB/s or GFLOP/s.
fn report(workload: &str, size: &str, reps: usize, bytes: f64, flops: f64, f: impl FnMut()) {
    report_with(workload, size, reps, bytes, flops, None, f)
}

/// [`report`] with an `"output"` field saying what happens to each call's output storage:
/// `recycled` (dropped before the next call: it comes back from the buffer pool), `kept`
/// (held by the caller: every call writes fresh pages), `reused` or `fresh` (triad).
fn report_with(
    workload: &str,
    size: &str,
    reps: usize,
    bytes: f64,
    flops: f64,
    output: Option<&str>,
    f: impl FnMut(),
) {
    let (med, lo, hi) = time(reps, f);
    let mut fields = vec![
        ("workload", s(workload)),
        ("size", s(size)),
        ("build", s(flavour())),
        ("isa", s(kiln_cpu::isa().name())),
        ("median_ms", format!("{:.4}", med * 1e3)),
        ("min_ms", format!("{:.4}", lo * 1e3)),
        ("max_ms", format!("{:.4}", hi * 1e3)),
    ];
    if let Some(o) = output {
        fields.push(("output", s(o)));
    }
    if bytes > 0.0 {
        fields.push(("gb_per_s", format!("{:.2}", bytes / med / 1e9)));
    }
    if flops > 0.0 {
        fields.push(("gflop_per_s", format!("{:.2}", flops / med / 1e9)));
    }
    json(&fields);
}

fn uniform(shape: &[usize], seed: u64) -> Array {
    let a = Array::uniform(shape, -1.0, 1.0, seed, DType::F32).expect("float dtype");
    a.eval().expect("evaluates");
    a
}

/// W1's four inputs of `n` elements.
fn w1_inputs(n: usize) -> (Array, Array, Array, Array) {
    (
        uniform(&[n], 1),
        uniform(&[n], 2),
        uniform(&[n], 3),
        uniform(&[n], 4),
    )
}

fn reps_for(bytes: f64, quick: bool) -> usize {
    let r = if bytes > 1e9 {
        7
    } else if bytes > 1e8 {
        11
    } else {
        21
    };
    if quick {
        3
    } else {
        r
    }
}

fn wanted(only: &Option<Vec<String>>, w: &str) -> bool {
    only.as_ref().is_none_or(|o| o.iter().any(|x| x == w))
}

/// W1–W7 (design.md §6): end-to-end `eval` times of fresh expressions (each call builds the
/// expression, hits the graph cache, runs the plan and hands the output to the caller, who
/// drops it before the next call: its storage goes back to the buffer pool and the next
/// call's output comes from there; `W1_kept` keeps every output instead).
fn workloads(quick: bool, only: &Option<Vec<String>>) {
    let mega = 1usize << 20;
    if wanted(only, "W1") {
        for n in [mega, 16 * mega, 64 * mega] {
            let (a, b, c, d) = w1_inputs(n);
            let bytes = 5.0 * 4.0 * n as f64;
            report_with(
                "W1",
                &format!("{}M", n / mega),
                reps_for(bytes, quick),
                bytes,
                0.0,
                Some("recycled"),
                || {
                    ((&a * &b + &c) * &d - &a).eval().expect("W1");
                },
            );
        }
    }
    if wanted(only, "W1_kept") {
        // The same W1 with every result kept alive until the end of the timing (the user
        // holds them): no output storage comes back, so each call writes fresh pages.
        for n in [16 * mega, 64 * mega] {
            let (a, b, c, d) = w1_inputs(n);
            let bytes = 5.0 * 4.0 * n as f64;
            let mut kept: Vec<Array> = Vec::new();
            report_with(
                "W1_kept",
                &format!("{}M", n / mega),
                reps_for(bytes, quick),
                bytes,
                0.0,
                Some("kept"),
                || {
                    let y = (&a * &b + &c) * &d - &a;
                    y.eval().expect("W1");
                    kept.push(y);
                },
            );
        }
    }
    if wanted(only, "W1_pool") {
        // Buffer reuse: a two-kernel W1 (a reduction splits the chain) whose 64 MiB
        // intermediate, and whose output once dropped, come back from the pool, versus the
        // same with the pool off (limit 0: every buffer fresh).
        let n = 16 * mega;
        let (a, b, c, d) = (
            uniform(&[n], 1),
            uniform(&[n], 2),
            uniform(&[n], 3),
            uniform(&[n], 4),
        );
        let bytes = 5.0 * 4.0 * n as f64;
        // Two kernels (a reduction splits the chain): the intermediate comes from the pool.
        let two_kernels = || {
            let t = (&a * &b + &c) * &d - &a;
            let m = t.max(None, true);
            (&t - &m).eval().expect("W1 two kernels");
        };
        let hits0 = kiln_cpu::CpuBackend::pool().stats();
        report(
            "W1_two_kernels_pool",
            "16M",
            reps_for(bytes, quick),
            bytes,
            0.0,
            two_kernels,
        );
        let hits1 = kiln_cpu::CpuBackend::pool().stats();
        json(&[
            ("workload", s("pool_stats")),
            ("hits", (hits1.hits - hits0.hits).to_string()),
            ("misses", (hits1.misses - hits0.misses).to_string()),
        ]);
        kiln_cpu::CpuBackend::pool().set_limit(0);
        report(
            "W1_two_kernels_nopool",
            "16M",
            reps_for(bytes, quick),
            bytes,
            0.0,
            two_kernels,
        );
        kiln_cpu::CpuBackend::pool().set_limit(kiln_cpu::DEFAULT_POOL_BYTES);
    }
    if wanted(only, "triad") {
        // STREAM-style triad a = b + 3c over 64M f32 on all cores (rayon, 64K-element chunks):
        // into a reused output (the memory-bandwidth limit) and into a fresh vector each call
        // (what a fresh output page costs).
        use rayon::prelude::*;
        let n = 64 * mega;
        let b: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
        let c: Vec<f32> = (0..n).map(|i| (i % 777) as f32).collect();
        let mut a = vec![0.0f32; n];
        let triad = |a: &mut [f32]| {
            a.par_chunks_mut(1 << 16)
                .zip(b.par_chunks(1 << 16).zip(c.par_chunks(1 << 16)))
                .for_each(|(a, (b, c))| {
                    for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
                        *a = b + 3.0 * c;
                    }
                })
        };
        let bytes = 12.0 * n as f64;
        report_with(
            "triad_reused",
            "64M",
            reps_for(bytes, quick),
            bytes,
            0.0,
            Some("reused"),
            || {
                triad(&mut a);
                std::hint::black_box(&a);
            },
        );
        report_with(
            "triad_fresh",
            "64M",
            reps_for(bytes, quick),
            bytes,
            0.0,
            Some("fresh"),
            || {
                let mut a = vec![0.0f32; n];
                triad(&mut a);
                std::hint::black_box(&a);
            },
        );
    }
    if wanted(only, "W2") {
        let n = 16 * mega;
        let x = uniform(&[n], 5);
        let x = (&x * 4.0f32).eval_into();
        let bytes = 2.0 * 4.0 * n as f64;
        report("W2", "16M", reps_for(bytes, quick), bytes, 0.0, || {
            ((-(&x * &x)).exp() * x.sin() + x.tanh())
                .eval()
                .expect("W2");
        });
    }
    if wanted(only, "W3") {
        let m = 4096;
        let a = uniform(&[m, m], 6);
        let row = uniform(&[m], 7);
        let col = uniform(&[m, 1], 8);
        let bytes = 2.0 * 4.0 * (m * m) as f64;
        report(
            "W3",
            "4096x4096",
            reps_for(bytes, quick),
            bytes,
            0.0,
            || {
                (&a + &row + &col).eval().expect("W3");
            },
        );
    }
    if wanted(only, "W4") {
        let n = 16 * mega;
        let (a, b) = (uniform(&[n], 9), uniform(&[n], 10));
        let bytes = 2.0 * 4.0 * n as f64;
        report(
            "W4_sum_ab",
            "16M",
            reps_for(bytes, quick),
            bytes,
            0.0,
            || {
                (&a * &b).sum(None, false).eval().expect("W4 sum");
            },
        );
        let m = uniform(&[4096, 4096], 11);
        let bytes = 4.0 * (4096 * 4096) as f64;
        report(
            "W4_row_sums",
            "4096x4096",
            reps_for(bytes, quick),
            bytes,
            0.0,
            || {
                m.sum(Some(&[-1]), false).eval().expect("W4 rows");
            },
        );
        let s = uniform(&[4096, 1024], 12);
        let bytes = 2.0 * 4.0 * (4096 * 1024) as f64;
        report(
            "W4_softmax_rows",
            "4096x1024",
            reps_for(bytes, quick),
            bytes,
            0.0,
            || {
                s.softmax(-1).eval().expect("W4 softmax");
            },
        );
    }
    if wanted(only, "W5") {
        for n in [1024usize, 2048] {
            let (a, b) = (uniform(&[n, n], 13), uniform(&[n, n], 14));
            let flops = 2.0 * (n * n * n) as f64;
            report(
                "W5_sgemm",
                &format!("{n}^3"),
                if quick { 3 } else { 11 },
                0.0,
                flops,
                || {
                    a.matmul(&b).eval().expect("W5");
                },
            );
        }
        let n = 1024;
        let (x, w, bias) = (
            uniform(&[n, n], 15),
            uniform(&[n, n], 16),
            uniform(&[n], 17),
        );
        let flops = 2.0 * (n * n * n) as f64;
        report(
            "W5_relu_xw_b",
            "1024^2",
            if quick { 3 } else { 11 },
            0.0,
            flops,
            || {
                (x.matmul(&w) + &bias).relu().eval().expect("W5 relu");
            },
        );
    }
    if wanted(only, "W6") {
        let iters = if quick { 1000 } else { 10_000 };
        let w = uniform(&[64, 64], 18);
        let b = uniform(&[64], 19);
        let x = uniform(&[64, 64], 20);
        let per: Vec<f64> = (0..if quick { 3 } else { 7 })
            .map(|_| {
                let start = Instant::now();
                for _ in 0..iters {
                    (x.matmul(&w) + &b).eval().expect("W6");
                }
                start.elapsed().as_secs_f64() / iters as f64
            })
            .collect();
        let med = median(per);
        json(&[
            ("workload", s("W6")),
            ("size", s("64x64x10000")),
            ("build", s(flavour())),
            ("isa", s(kiln_cpu::isa().name())),
            ("median_ms", format!("{:.6}", med * 1e3)),
            ("us_per_iter", format!("{:.3}", med * 1e6)),
            (
                "gflop_per_s",
                format!("{:.2}", 2.0 * 64f64.powi(3) / med / 1e9),
            ),
        ]);
    }
    if wanted(only, "W7") {
        let batch = 256;
        let x = uniform(&[batch, 784], 21);
        let labels: Vec<i64> = (0..batch as i64).map(|i| (i * 7) % 10).collect();
        let y = Array::from_vec(labels, &[batch])
            .expect("shape")
            .one_hot(10, DType::F32);
        y.eval().expect("labels");
        let w1 = (uniform(&[784, 512], 22) * 0.05f32).eval_into();
        let b1 = Array::zeros(&[512], DType::F32);
        let w2 = (uniform(&[512, 10], 23) * 0.05f32).eval_into();
        let b2 = Array::zeros(&[10], DType::F32);
        kiln::eval(&[&b1, &b2]).expect("params");
        let mut params = vec![w1, b1, w2, b2];
        let flops = 3.0 * 2.0 * (batch * (784 * 512 + 512 * 10)) as f64;
        report(
            "W7_mlp_step",
            "784-512-10 b256",
            // Many steps: both kiln and jax have slow phases of several consecutive steps
            // here, which a median of 21 can land in.
            if quick { 3 } else { 101 },
            0.0,
            flops,
            || {
                let (w1, b1, w2, b2) = (&params[0], &params[1], &params[2], &params[3]);
                let h = (x.matmul(w1) + b1).relu();
                let logits = h.matmul(w2) + b2;
                let loss = -(logits.log_softmax(-1) * &y).sum(None, false) / batch as f32;
                let g = kiln::grad(&loss, &[w1, b1, w2, b2]).expect("grad");
                let new: Vec<Array> = params
                    .iter()
                    .zip(&g)
                    .map(|(p, g)| p - &(g * 0.01f32))
                    .collect();
                let refs: Vec<&Array> = new.iter().chain([&loss]).collect();
                kiln::eval(&refs).expect("W7");
                params = new;
            },
        );
    }
}

/// Evaluates and returns the array (for setup expressions).
trait EvalInto {
    fn eval_into(self) -> Array;
}
impl EvalInto for Array {
    fn eval_into(self) -> Array {
        self.eval().expect("evaluates");
        self
    }
}

#[allow(clippy::default_constructed_unit_structs)] // the backend may gain state (a pool)
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    // `--only W1,W2,...`: just those workloads (W1..W7, W1_kept, W1_pool, triad), none of the
    // compiler ones.
    let only: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(|l| l.split(',').map(str::to_owned).collect());
    if only.is_some() {
        workloads(quick, &only);
        return;
    }
    let reps = if quick { 5 } else { 101 };
    let x = Array::from_vec(vec![0.5f32; 64], &[64]).expect("shape matches");
    let engine = Engine::new(CpuBackend::default(), 64);

    for nodes in [10usize, 100, 1000] {
        let (med, lo, hi) = time(reps, || {
            std::hint::black_box(chain(&x, nodes));
        });
        json(&[
            ("workload", s("build")),
            ("nodes", nodes.to_string()),
            ("median_us", format!("{:.2}", med * 1e6)),
            ("min_us", format!("{:.2}", lo * 1e6)),
            ("max_us", format!("{:.2}", hi * 1e6)),
        ]);
        let y = chain(&x, nodes);
        let roots: [&NodeRef; 1] = [y.node()];
        engine.evaluate(&roots).expect("evaluates"); // compile once
        let (med, lo, hi) = time(reps, || {
            std::hint::black_box(engine.prepare(&roots).expect("cached"));
        });
        json(&[
            ("workload", s("cache_hit")),
            ("nodes", nodes.to_string()),
            ("median_us", format!("{:.2}", med * 1e6)),
            ("min_us", format!("{:.2}", lo * 1e6)),
            ("max_us", format!("{:.2}", hi * 1e6)),
            ("goal_us_at_100", "10".into()),
        ]);
    }

    {
        let y = chain(&x, 1000);
        let (med, lo, hi) = time(if quick { 3 } else { 21 }, || {
            let e = LazyExpr::from_roots(&[y.node()]);
            std::hint::black_box(compile(&e).expect("compiles"));
        });
        json(&[
            ("workload", s("compile")),
            ("nodes", "1000".into()),
            ("median_ms", format!("{:.3}", med * 1e3)),
            ("min_ms", format!("{:.3}", lo * 1e3)),
            ("max_ms", format!("{:.3}", hi * 1e3)),
            ("goal_ms", "20".into()),
        ]);
    }

    // W1 peak memory at 64M elements (16M with --quick).
    {
        let n = if quick { 1 << 24 } else { 1 << 26 };
        let mk = |seed| Array::uniform(&[n], -1.0, 1.0, seed, DType::F32).expect("float dtype");
        let (a, b, c, d) = (mk(1), mk(2), mk(3), mk(4));
        kiln::eval(&[&a, &b, &c, &d]).expect("inputs evaluate");
        let y = (&a * &b + &c) * &d - &a;
        let plan = kiln::inspect(&[&y]).expect("compiles").report;
        let io = 5 * 4 * n;
        let hwm_before = vm_hwm_bytes();
        let start = Instant::now();
        y.eval().expect("W1 evaluates");
        let secs = start.elapsed().as_secs_f64();
        let hwm_after = vm_hwm_bytes();
        let extra = match (hwm_before, hwm_after) {
            (Some(b), Some(a)) => (a.saturating_sub(b)).to_string(),
            _ => "null".into(),
        };
        json(&[
            ("workload", s("W1_memory")),
            ("n", n.to_string()),
            ("kernels", plan.kernels.len().to_string()),
            ("allocations", plan.allocations.to_string()),
            ("plan_peak_bytes", plan.peak_bytes.to_string()),
            ("inputs_plus_output_bytes", io.to_string()),
            (
                "ratio_inputs_plus_peak_to_inputs_plus_output",
                format!("{:.4}", (4 * 4 * n + plan.peak_bytes) as f64 / io as f64),
            ),
            ("process_hwm_growth_bytes", extra),
            ("output_bytes", (4 * n).to_string()),
            ("eval_ms", format!("{:.1}", secs * 1e3)),
        ]);
    }

    workloads(quick, &None);
}
