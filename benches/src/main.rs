//! kiln's benchmark binary: runs each workload several times and prints one JSON object per line with the median and the spread.
//!
//! - `build`: building an expression chain of N graph nodes (the user's own per-iteration cost, with shape inference).
//! - `cache_hit`: trace + key + cache lookup of an already compiled N-node graph (the graph-cache hit path; binding happens in `run`).
//! - `compile`: compiling a fresh 1,000-node graph (passes, fusion, memory plan).
//! - `W1_memory`: peak bytes of the W1 plan `(a*b + c)*d - a` at 64M elements against inputs + output, from the inspector and from the process high-water mark.
//! - `W1`, `W6`: end-to-end times on the current CPU backend.
//!   W1's loop drops each result before the next, so its output storage comes back to the buffer pool (`"output":"recycled"`).
//!   `W1_kept` keeps every result alive, so each call writes fresh pages (`"output":"kept"`), as `triad_fresh` does against `triad_reused`.
//!
//! Options are parsed with `clap` into [`Cli`] (`--help` lists them).
//! Each line is a `#[derive(Serialize)]` record ([`Timing`], [`W6Timing`], [`PoolStats`], [`NodesTiming`], [`CompileTiming`], [`W1Memory`]) printed by [`emit`] with `serde_json`, which adds the device `kiln::eval` ran on (and writes a NaN or infinite number as `null`, so every line is valid JSON).
//! `REPS=1` also shows each repetition's time (ms) on stderr, when stderr is a terminal.
//!
//! Usage: `cargo run --release -p kiln-benches -- [--quick] [--only W1,W2,...]`.
//!
//! Depends on kiln's public API, on `kiln-ir`, `kiln-compiler` and `kiln-cpu` for the compiler workloads, and on `clap` and `serde_json`.

use clap::{Parser, ValueEnum};
use kiln::{Array, DType};
use kiln_compiler::{compile, Engine};
use kiln_cpu::CpuBackend;
use kiln_ir::{LazyExpr, NodeRef};
use serde::Serialize;
use std::io::IsTerminal;
use std::time::Instant;

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "kiln-bench",
    version,
    about = "Times kiln's workloads and prints one JSON object per measurement."
)]
struct Cli {
    /// Smoke run: 3 to 5 repetitions per measurement, W6 at 1,000 iterations and W1_memory at 16M elements.
    #[arg(long)]
    quick: bool,
    /// Run just these workloads (comma-separated), none of the compiler ones.
    #[arg(long, value_name = "W1,W2,...", value_delimiter = ',')]
    only: Option<Vec<Workload>>,
}

/// A workload `--only` can name.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    /// `(a*b + c)*d - a` at 1M, 16M and 64M elements, each result dropped before the next call.
    #[value(name = "W1")]
    W1,
    /// W1 at 16M and 64M with every result kept alive.
    #[value(name = "W1_kept")]
    W1Kept,
    /// A two-kernel W1 with the buffer pool on and off.
    #[value(name = "W1_pool")]
    W1Pool,
    /// STREAM-style triad into a reused and into a fresh output.
    #[value(name = "triad")]
    Triad,
    /// `exp(-x*x) * sin(x) + tanh(x)` at 16M elements.
    #[value(name = "W2")]
    W2,
    /// Row and column broadcast adds at 4096x4096.
    #[value(name = "W3")]
    W3,
    /// Reductions: `sum(a*b)`, row sums and row softmax.
    #[value(name = "W4")]
    W4,
    /// Matrix products: sgemm at 1024 and 2048, `relu(x @ w + b)`.
    #[value(name = "W5")]
    W5,
    /// Small `x @ w + b` at 64x64, many calls (per-call overhead).
    #[value(name = "W6")]
    W6,
    /// One training step of a 784-512-10 MLP at batch 256.
    #[value(name = "W7")]
    W7,
    /// The gradient of an embedding lookup: 2,048 rows of a 30,000×256 table (a scatter-add).
    #[value(name = "embed_grad")]
    EmbedGrad,
}

/// One JSON line: a record and the device `kiln::eval` ran on.
#[derive(Serialize)]
struct Line<'a, T> {
    #[serde(flatten)]
    record: &'a T,
    /// Where `kiln::eval` ran (`KILN_DEVICE=wgpu` with the `wgpu` feature runs W1-W7 on the GPU).
    device: String,
    /// The GPU adapter, when `device` is `wgpu`.
    #[serde(skip_serializing_if = "Option::is_none")]
    adapter: Option<String>,
}

/// Prints `record` as one JSON line, with the device added.
fn emit<T: Serialize>(record: &T) {
    let device = kiln::default_device();
    let line = Line {
        record,
        device: device.to_string(),
        adapter: (device == kiln::Device::Wgpu).then(|| device.describe()),
    };
    let text = serde_json::to_string(&line).expect("a record of strings and numbers serializes");
    println!("{text}");
}

/// `x` rounded to `decimals` decimal places (the precision a line reports).
fn round(x: f64, decimals: i32) -> f64 {
    let p = 10f64.powi(decimals);
    (x * p).round() / p
}

/// A timing line of a W workload (see [`report_with`]).
#[derive(Serialize)]
struct Timing<'a> {
    workload: &'a str,
    size: &'a str,
    build: &'static str,
    isa: &'static str,
    /// The prefetch policy in force (`kiln_cpu::tuning()`): cache level / blocks ahead.
    prefetch: String,
    /// The cache sizes the blocks were derived from (`kiln_cpu::tuning().blocks`), L1d/L2.
    caches: String,
    /// Which GEMM forms products take (`kiln_cpu::tuning().gemm_broadcast_avx512`):
    /// `broadcast` (every product with contiguous rows of its left operand takes the
    /// broadcast form at AVX-512) or `sized` (the form follows the product's size).
    gemm: &'static str,
    median_ms: f64,
    min_ms: f64,
    max_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gb_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gflop_per_s: Option<f64>,
}

/// W6's line: the median time of one call over many calls.
#[derive(Serialize)]
struct W6Timing {
    workload: &'static str,
    size: &'static str,
    build: &'static str,
    isa: &'static str,
    /// As in [`Timing`].
    prefetch: String,
    /// As in [`Timing`].
    caches: String,
    /// As in [`Timing`].
    gemm: &'static str,
    median_ms: f64,
    us_per_iter: f64,
    gflop_per_s: f64,
}

/// The buffer pool's hits and misses during `W1_two_kernels_pool`.
#[derive(Serialize)]
struct PoolStats {
    workload: &'static str,
    hits: u64,
    misses: u64,
}

/// A `build` or `cache_hit` line (µs).
#[derive(Serialize)]
struct NodesTiming {
    workload: &'static str,
    nodes: usize,
    median_us: f64,
    min_us: f64,
    max_us: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    goal_us_at_100: Option<u32>,
}

/// The `compile` line (ms).
#[derive(Serialize)]
struct CompileTiming {
    workload: &'static str,
    nodes: usize,
    median_ms: f64,
    min_ms: f64,
    max_ms: f64,
    goal_ms: u32,
}

/// W1's peak memory against inputs + output.
#[derive(Serialize)]
struct W1Memory {
    workload: &'static str,
    n: usize,
    kernels: usize,
    allocations: usize,
    plan_peak_bytes: usize,
    inputs_plus_output_bytes: usize,
    ratio_inputs_plus_peak_to_inputs_plus_output: f64,
    /// `null` where `/proc/self/status` has no `VmHWM`.
    process_hwm_growth_bytes: Option<usize>,
    output_bytes: usize,
    eval_ms: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("finite timings"));
    v[v.len() / 2]
}

/// Median, min and max seconds of `reps` runs of `f` after a warm-up; with `REPS` set and
/// stderr a terminal, each run's milliseconds are shown there as they come.
fn time<F: FnMut()>(reps: usize, mut f: F) -> (f64, f64, f64) {
    let show = std::env::var_os("REPS").is_some() && std::io::stderr().is_terminal();
    // A GPU evaluation returns once its work is queued: each timed call waits for it.
    let device = kiln::default_device();
    f(); // warm-up
    device.synchronize();
    let t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            f();
            device.synchronize();
            let e = s.elapsed().as_secs_f64();
            if show {
                eprint!("{:.2} ", e * 1e3);
            }
            e
        })
        .collect();
    if show {
        eprintln!();
    }
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

/// The cache sizes the blocks follow, e.g. `32K/1024K`.
fn caches() -> String {
    let b = kiln_cpu::tuning().blocks;
    format!("{}K/{}K", b.l1d_bytes >> 10, b.l2_bytes >> 10)
}

/// Which GEMM forms products take: `broadcast` or `sized` (see [`Timing`]).
fn gemm() -> &'static str {
    if kiln_cpu::tuning().gemm_broadcast_avx512 {
        "broadcast"
    } else {
        "sized"
    }
}

/// The prefetch policy, e.g. `l2/2` (L2 hints two blocks ahead).
fn prefetch() -> String {
    let t = kiln_cpu::tuning();
    format!("{}/{}", t.prefetch.name(), t.prefetch_ahead)
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
    emit(&Timing {
        workload,
        size,
        build: flavour(),
        isa: kiln_cpu::isa().name(),
        prefetch: prefetch(),
        caches: caches(),
        gemm: gemm(),
        median_ms: round(med * 1e3, 4),
        min_ms: round(lo * 1e3, 4),
        max_ms: round(hi * 1e3, 4),
        output,
        gb_per_s: (bytes > 0.0).then(|| round(bytes / med / 1e9, 2)),
        gflop_per_s: (flops > 0.0).then(|| round(flops / med / 1e9, 2)),
    });
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

/// Whether `w` runs: every workload without `--only`, else those it names.
fn wanted(only: Option<&[Workload]>, w: Workload) -> bool {
    only.is_none_or(|o| o.contains(&w))
}

/// W1–W7 (design.md §6): end-to-end `eval` times of fresh expressions (each call builds the
/// expression, hits the graph cache, runs the plan and hands the output to the caller, who
/// drops it before the next call: its storage goes back to the buffer pool and the next
/// call's output comes from there; `W1_kept` keeps every output instead).
/// With `KILN_DEVICE=wgpu` the inputs are made on the GPU and stay resident there (as a
/// user's would), each result stays resident too, and each timed call waits for the GPU;
/// W7 reads its loss every step.
fn workloads(quick: bool, only: Option<&[Workload]>) {
    let mega = 1usize << 20;
    if wanted(only, Workload::W1) {
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
    if wanted(only, Workload::W1Kept) {
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
    if wanted(only, Workload::W1Pool) {
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
        emit(&PoolStats {
            workload: "pool_stats",
            hits: hits1.hits - hits0.hits,
            misses: hits1.misses - hits0.misses,
        });
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
    if wanted(only, Workload::Triad) {
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
    if wanted(only, Workload::W2) {
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
    if wanted(only, Workload::W3) {
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
    if wanted(only, Workload::W4) {
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
        // Rows of 1,024 and rows of 16,384 (longer than one GPU reduction chunk).
        for (rows, cols, salt) in [(4096usize, 1024usize, 12u64), (1024, 16384, 21)] {
            let s = uniform(&[rows, cols], salt);
            let bytes = 2.0 * 4.0 * (rows * cols) as f64;
            report(
                "W4_softmax_rows",
                &format!("{rows}x{cols}"),
                reps_for(bytes, quick),
                bytes,
                0.0,
                || {
                    s.softmax(-1).eval().expect("W4 softmax");
                },
            );
        }
    }
    if wanted(only, Workload::W5) {
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
    if wanted(only, Workload::W6) {
        let iters = if quick { 1000 } else { 10_000 };
        let w = uniform(&[64, 64], 18);
        let b = uniform(&[64], 19);
        let x = uniform(&[64, 64], 20);
        let device = kiln::default_device();
        // On a GPU, three ways: each call waited for (`W6`, as the CPU's calls are), calls
        // queued back to back with one wait at the end (`W6_pipelined`: the host's own cost
        // per call when the GPU keeps up), and the wait alone (`W6_sync`).
        let modes: &[(&'static str, u8)] = if device == kiln::Device::Wgpu {
            &[("W6", 0), ("W6_pipelined", 1), ("W6_sync", 2)]
        } else {
            &[("W6", 0)]
        };
        for &(name, mode) in modes {
            let per: Vec<f64> = (0..if quick { 3 } else { 7 })
                .map(|_| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        if mode != 2 {
                            (x.matmul(&w) + &b).eval().expect("W6");
                        }
                        if mode != 1 {
                            device.synchronize(); // a no-op on the CPU
                        }
                    }
                    device.synchronize();
                    start.elapsed().as_secs_f64() / iters as f64
                })
                .collect();
            let med = median(per);
            emit(&W6Timing {
                workload: name,
                size: "64x64x10000",
                build: flavour(),
                isa: kiln_cpu::isa().name(),
                prefetch: prefetch(),
                caches: caches(),
                gemm: gemm(),
                median_ms: round(med * 1e3, 6),
                us_per_iter: round(med * 1e6, 3),
                gflop_per_s: round(2.0 * 64f64.powi(3) / med / 1e9, 2),
            });
        }
    }
    if wanted(only, Workload::EmbedGrad) {
        let (vocab, dim, n) = (30_000usize, 256usize, 2048usize);
        let emb = uniform(&[vocab, dim], 31);
        let ids: Vec<i32> = (0..n as i32).map(|i| i * 7919 % vocab as i32).collect();
        let idx = Array::from_vec(ids, &[n])
            .expect("shape")
            .to_device(kiln::default_device())
            .expect("placed");
        let upstream = uniform(&[n, dim], 32);
        let bytes = 4.0 * (vocab * dim + n * dim) as f64;
        report(
            "embed_grad",
            "30000x256 <- 2048",
            reps_for(bytes, quick),
            bytes,
            0.0,
            || {
                let loss = (emb.take(&idx, 0) * &upstream).sum(None, false);
                let g = kiln::grad(&loss, &[&emb]).expect("grad");
                g[0].eval().expect("embed_grad");
            },
        );
    }
    if wanted(only, Workload::W7) {
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
        // The same step evaluated plainly, and donating the old parameters (written over in
        // place on a GPU; the same as `eval` on the CPU).
        for (name, in_place) in [("W7_mlp_step", false), ("W7_in_place", true)] {
            report(
                name,
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
                    drop(g);
                    let refs: Vec<&Array> = new.iter().chain([&loss]).collect();
                    if in_place {
                        let donors: Vec<&Array> = params.iter().collect();
                        kiln::eval_donating(&refs, &donors).expect("W7");
                    } else {
                        kiln::eval(&refs).expect("W7");
                    }
                    // Read the loss, as a training loop does (on a GPU: only it comes down).
                    std::hint::black_box(loss.item::<f32>().expect("W7 loss"));
                    params = new;
                },
            );
        }
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
    let cli = Cli::parse();
    let quick = cli.quick;
    if let Some(only) = &cli.only {
        workloads(quick, Some(only));
        return;
    }
    let reps = if quick { 5 } else { 101 };
    let x = Array::from_vec(vec![0.5f32; 64], &[64]).expect("shape matches");
    let engine = Engine::new(CpuBackend::default(), 64);

    for nodes in [10usize, 100, 1000] {
        let (med, lo, hi) = time(reps, || {
            std::hint::black_box(chain(&x, nodes));
        });
        emit(&NodesTiming {
            workload: "build",
            nodes,
            median_us: round(med * 1e6, 2),
            min_us: round(lo * 1e6, 2),
            max_us: round(hi * 1e6, 2),
            goal_us_at_100: None,
        });
        let y = chain(&x, nodes);
        let roots: [&NodeRef; 1] = [y.node()];
        engine.evaluate(&roots).expect("evaluates"); // compile once
        let (med, lo, hi) = time(reps, || {
            std::hint::black_box(engine.prepare(&roots).expect("cached"));
        });
        emit(&NodesTiming {
            workload: "cache_hit",
            nodes,
            median_us: round(med * 1e6, 2),
            min_us: round(lo * 1e6, 2),
            max_us: round(hi * 1e6, 2),
            goal_us_at_100: Some(10),
        });
    }

    {
        let y = chain(&x, 1000);
        let (med, lo, hi) = time(if quick { 3 } else { 21 }, || {
            let e = LazyExpr::from_roots(&[y.node()]);
            std::hint::black_box(compile(&e).expect("compiles"));
        });
        emit(&CompileTiming {
            workload: "compile",
            nodes: 1000,
            median_ms: round(med * 1e3, 3),
            min_ms: round(lo * 1e3, 3),
            max_ms: round(hi * 1e3, 3),
            goal_ms: 20,
        });
    }

    // Deep graphs: a fresh chain of N nodes built, traced, compiled and run (every walk is
    // iterative and linear; issue 25), once per repetition on an empty cache.
    for &nodes in if quick {
        &[100_000usize][..]
    } else {
        &[100_000, 1_000_000][..]
    } {
        let (med, lo, hi) = time(3, || {
            kiln::clear_cache();
            let y = chain(&x, nodes);
            y.eval().expect("a deep chain evaluates");
            std::hint::black_box(y);
        });
        emit(&CompileTiming {
            workload: "deep_chain_first_eval",
            nodes,
            median_ms: round(med * 1e3, 3),
            min_ms: round(lo * 1e3, 3),
            max_ms: round(hi * 1e3, 3),
            goal_ms: (nodes / 1000) as u32 * 10,
        });
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
            (Some(b), Some(a)) => Some(a.saturating_sub(b)),
            _ => None,
        };
        emit(&W1Memory {
            workload: "W1_memory",
            n,
            kernels: plan.kernels.len(),
            allocations: plan.allocations,
            plan_peak_bytes: plan.peak_bytes,
            inputs_plus_output_bytes: io,
            ratio_inputs_plus_peak_to_inputs_plus_output: round(
                (4 * 4 * n + plan.peak_bytes) as f64 / io as f64,
                4,
            ),
            process_hwm_growth_bytes: extra,
            output_bytes: 4 * n,
            eval_ms: round(secs * 1e3, 1),
        });
    }

    workloads(quick, None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn documented_invocations_parse() {
        // benches/peers/peers.py, benches/README.md, docs/performance.md
        let cli = Cli::try_parse_from([
            "kiln-bench",
            "--only",
            "triad,W1,W2,W3,W4,W5,W6,W7",
            "--quick",
        ])
        .unwrap();
        assert!(cli.quick);
        assert_eq!(cli.only.as_ref().map(Vec::len), Some(8));
        let cli = Cli::try_parse_from(["kiln-bench", "--only", "triad,W1_kept,W1_pool"]).unwrap();
        let only = cli.only.unwrap();
        assert!(wanted(Some(&only), Workload::W1Kept));
        assert!(!wanted(Some(&only), Workload::W1));
        assert!(wanted(None, Workload::W7));
    }

    #[test]
    fn unknown_workloads_are_usage_errors() {
        for bad in [
            &["--only", "W8"][..],
            &["--only", ""],
            &["--only", "w1"],
            &["--bogus"],
        ] {
            let e = Cli::try_parse_from(std::iter::once("kiln-bench").chain(bad.iter().copied()))
                .unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}");
        }
    }
}
