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
//! - `W1`, `W6`: end-to-end times on the current CPU backend.
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
            s.elapsed().as_secs_f64()
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
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
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

#[allow(clippy::default_constructed_unit_structs)] // the backend may gain state (a pool)
fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
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

    // W1 end to end at 1M.
    {
        let n = 1 << 20;
        let mk = |seed| Array::uniform(&[n], -1.0, 1.0, seed, DType::F32).expect("float dtype");
        let (a, b, c, d) = (mk(1), mk(2), mk(3), mk(4));
        kiln::eval(&[&a, &b, &c, &d]).expect("inputs evaluate");
        let (med, lo, hi) = time(if quick { 3 } else { 21 }, || {
            ((&a * &b + &c) * &d - &a).eval().expect("W1 evaluates");
        });
        json(&[
            ("workload", s("W1")),
            ("n", n.to_string()),
            ("median_ms", format!("{:.3}", med * 1e3)),
            ("min_ms", format!("{:.3}", lo * 1e3)),
            ("max_ms", format!("{:.3}", hi * 1e3)),
            (
                "gb_per_s",
                format!("{:.3}", 5.0 * 4.0 * n as f64 / med / 1e9),
            ),
        ]);
    }

    // W6: y = x @ w + b, 64x64, many iterations (the graph-cache hit path end to end).
    {
        let iters = if quick { 1000 } else { 10_000 };
        let w = Array::normal(&[64, 64], 0.0, 0.1, 3, DType::F32).expect("float");
        let b = Array::normal(&[64], 0.0, 0.1, 4, DType::F32).expect("float");
        kiln::eval(&[&w, &b]).expect("evaluates");
        let xs: Vec<Array> = (0..8)
            .map(|i| Array::normal(&[64, 64], 0.0, 1.0, 10 + i, DType::F32).unwrap())
            .collect();
        for x in &xs {
            x.eval().unwrap();
        }
        let run = || {
            let start = Instant::now();
            for i in 0..iters {
                let y = xs[i % xs.len()].matmul(&w) + &b;
                y.eval().expect("evaluates");
            }
            start.elapsed().as_secs_f64() / iters as f64
        };
        let per: Vec<f64> = (0..if quick { 1 } else { 5 }).map(|_| run()).collect();
        json(&[
            ("workload", s("W6")),
            ("iterations", iters.to_string()),
            ("median_us_per_iter", format!("{:.2}", median(per) * 1e6)),
        ]);
    }
}
