//! kiln-train's benchmarks (issue 30), one JSON line per measurement, each with the CPU
//! model and the thread count:
//!
//! - `overlap`: a training step (W7's MLP, 784-512-10, batch 256, Adam) fed by an input
//!   stage of about the same cost, unstaged (`prefetch 0`: the stage runs on the training
//!   thread) against staged (`prefetch 2`: a producer thread and a `StagingArea`); and the
//!   same with an input stage that waits (a sleep as long as the step, as I/O would) and
//!   with a cheap one. Runs alternate; medians of the per-step times; the two
//!   runs' final parameters must be identical.
//! - `mirrored`: examples per second of W7's MLP with one device, 1 mirrored replica and 2
//!   mirrored replicas (micro-batches of 64).
//! - `reduce`: `Strategy::batch_reduce` of two micro-batches' 16 MiB of f32 gradients (8
//!   tensors), in GB/s of gradient reduced.
//! - `mpi` (feature `mpi`, under `mpiexec -np 2`): MPI's own allreduce of 16 MiB of f32
//!   against kiln-train's fixed-order `all_reduce_tree` and against an all-gather of whole
//!   buffers folded on every rank.
//!
//! Usage: `cargo run --release -p kiln-benches --bin train -- [overlap|mirrored|reduce|all]`,
//! `mpiexec -np 2 target/release/train mpi` (built with `--features mpi`).
//!
//! Depends on kiln-train's and kiln's public APIs, `kiln_benches::cpu_model`, `serde_json`
//! and, with `mpi`, the `mpi` crate.

use kiln::Array;
use kiln_train::demo::Mlp;
use kiln_train::{Dataset, Estimator, PerReplica, ReduceOp, RunConfig, Strategy, Until};
use serde_json::json;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn threads() -> String {
    std::env::var("KILN_NUM_THREADS").unwrap_or_else(|_| "default".into())
}

fn emit(mut v: serde_json::Value) {
    v["cpu"] = json!(kiln_benches::cpu_model());
    v["kiln_num_threads"] = json!(threads());
    println!("{v}");
}

/// W7's MLP with Adam.
fn w7() -> Mlp {
    Mlp::new(&[784, 512, 10])
}

/// Batch `i` of W7's input: 256 × 784 features and labels, from a cheap hash of the index;
/// `work` extra rounds of arithmetic per feature make the stage as costly as wanted.
fn make_batch(i: usize, work: u32) -> (Array, Array) {
    let n = 256 * 784;
    let mut x = Vec::with_capacity(n);
    let mut h = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for _ in 0..n {
        h ^= h << 13;
        h ^= h >> 7;
        h ^= h << 17;
        let mut v = (h >> 40) as f32 / (1u64 << 24) as f32;
        for _ in 0..work {
            v = (v * 1.000_1 + 0.3).fract();
        }
        x.push(v);
    }
    let y: Vec<i64> = (0..256).map(|k| ((i * 7 + k) % 10) as i64).collect();
    (
        Array::from_vec(x, &[256, 784]).expect("features"),
        Array::from_vec(y, &[256]).expect("labels"),
    )
}

/// Trains `steps` steps on the input with `prefetch`; returns seconds per step (after a
/// warm-up of 3 steps), the final parameters and the training thread's wait for input per
/// step.
fn timed_run(
    input: &Dataset<(Array, Array)>,
    prefetch: usize,
    steps: u64,
) -> (f64, Vec<Vec<f32>>, f64) {
    let config = RunConfig::new().seed(1).prefetch(prefetch).progress(false);
    let mut est = Estimator::new(w7(), config).expect("estimator");
    est.train(input, Until::Steps(3), &mut []).expect("warm-up");
    let start = Instant::now();
    let report = est
        .train(input, Until::Steps(steps), &mut [])
        .expect("train");
    let per_step = start.elapsed().as_secs_f64() / steps as f64;
    let wait = report.input_wait.as_secs_f64() / steps as f64;
    let params = est
        .variables()
        .parameters()
        .iter()
        .map(|p| p.value().to_vec::<f32>().expect("values"))
        .collect();
    (per_step, params, wait)
}

/// Time spent in the input stage, and its calls (to see its cost while training runs).
static STAGE_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static STAGE_CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn overlap() {
    let steps = 40;
    // calibrate: a step with prebuilt input, and one unit of input work
    let prebuilt: Vec<(Array, Array)> = (0..8).map(|i| make_batch(i, 0)).collect();
    let cheap = Dataset::from_slices(prebuilt).repeat(None);
    let (step, _, _) = timed_run(&cheap, 0, 20);
    let cost = |work: u32| {
        median(
            (0..5)
                .map(|i| {
                    let t = Instant::now();
                    std::hint::black_box(make_batch(i, work));
                    t.elapsed().as_secs_f64()
                })
                .collect(),
        )
    };
    let (base, eight) = (cost(0), cost(8));
    let per_unit = ((eight - base) / 8.0).max(1e-9);
    let guess = (((step - base) / per_unit).round() as u32).max(1);
    // a second pass corrects the linear guess by the cost it actually has
    let work = ((f64::from(guess) * step / cost(guess)).round() as u32).max(1);
    let t = Instant::now();
    let _ = make_batch(1, work);
    let input_cost = t.elapsed().as_secs_f64();
    for (case, input) in [
        (
            "equal-cost input",
            Dataset::from_fn(10_000, move |i| {
                let t = Instant::now();
                let b = make_batch(i, work);
                let ns = t.elapsed().as_nanos() as u64;
                STAGE_NS.fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
                STAGE_CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                b
            }),
        ),
        (
            "waiting input (a sleep as long as the step: I/O)",
            Dataset::from_slices((0..8).map(|i| make_batch(i, 0)).collect::<Vec<_>>())
                .repeat(None)
                .map(move |b| {
                    std::thread::sleep(std::time::Duration::from_secs_f64(step));
                    b
                }),
        ),
        ("cheap input", cheap.clone()),
    ] {
        let (mut unstaged, mut staged, mut waits) = (Vec::new(), Vec::new(), Vec::new());
        let mut stage_while = Vec::new();
        let mut identical = true;
        for _ in 0..3 {
            let (u, pu, _) = timed_run(&input, 0, steps);
            STAGE_NS.store(0, std::sync::atomic::Ordering::Relaxed);
            STAGE_CALLS.store(0, std::sync::atomic::Ordering::Relaxed);
            let (s, ps, w) = timed_run(&input, 2, steps);
            let calls = STAGE_CALLS
                .load(std::sync::atomic::Ordering::Relaxed)
                .max(1);
            stage_while.push(
                STAGE_NS.load(std::sync::atomic::Ordering::Relaxed) as f64 / calls as f64 / 1e6,
            );
            identical &= pu == ps;
            unstaged.push(u);
            staged.push(s);
            waits.push(w);
        }
        let (u, s) = (median(unstaged), median(staged));
        emit(json!({
            "bench": "overlap",
            "case": case,
            "step_ms_prebuilt_input": step * 1e3,
            "input_stage_ms": match case {
                "cheap input" => 0.0,
                "equal-cost input" => input_cost * 1e3,
                _ => step * 1e3,
            },
            "unstaged_step_ms": u * 1e3,
            "staged_step_ms": s * 1e3,
            "staged_over_unstaged": s / u,
            "staged_input_wait_ms": median(waits) * 1e3,
            "input_stage_ms_while_staged": median(stage_while),
            "identical_parameters": identical,
            "steps": steps,
            "runs": 3,
        }));
    }
}

fn mirrored() {
    let prebuilt: Vec<(Array, Array)> = (0..8).map(|i| make_batch(i, 0)).collect();
    let input = Dataset::from_slices(prebuilt).repeat(None);
    let strategies = [
        ("one device", Strategy::OneDevice),
        (
            "mirrored 1 replica",
            Strategy::mirrored(1, 64).expect("strategy"),
        ),
        (
            "mirrored 2 replicas",
            Strategy::mirrored(2, 64).expect("strategy"),
        ),
    ];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); strategies.len()];
    for _ in 0..5 {
        for (k, (_, s)) in strategies.iter().enumerate() {
            let config = RunConfig::new().seed(1).strategy(s.clone()).progress(false);
            let mut est = Estimator::new(w7(), config).expect("estimator");
            est.train(&input, Until::Steps(3), &mut [])
                .expect("warm-up");
            let start = Instant::now();
            est.train(&input, Until::Steps(30), &mut []).expect("train");
            rates[k].push(30.0 * 256.0 / start.elapsed().as_secs_f64());
        }
    }
    let base = median(rates[1].clone());
    for ((name, _), r) in strategies.iter().zip(rates) {
        let m = median(r);
        emit(json!({
            "bench": "mirrored",
            "model": "W7 MLP 784-512-10, batch 256, Adam",
            "strategy": name,
            "examples_per_s": m,
            "over_one_replica": m / base,
            "runs": 5,
        }));
    }
}

/// Two micro-batches' gradients: 16 MiB of f32 each, in 8 tensors.
fn gradients() -> PerReplica<Vec<Array>> {
    let per = 4 * 1024 * 1024 / 8;
    PerReplica::new(
        (0..2)
            .map(|m| {
                (0..8)
                    .map(|k| {
                        let v: Vec<f32> =
                            (0..per).map(|i| ((i + k + m) % 97) as f32 * 0.01).collect();
                        Array::from_vec(v, &[per]).expect("gradient")
                    })
                    .collect()
            })
            .collect(),
    )
}

fn reduce() {
    let grads = gradients();
    let strategy = Strategy::mirrored(2, 1).expect("strategy");
    let (mut views, mut copied) = (Vec::new(), Vec::new());
    for _ in 0..11 {
        let start = Instant::now();
        let out = strategy
            .batch_reduce(ReduceOp::Sum, &grads)
            .expect("reduce");
        views.push(start.elapsed().as_secs_f64());
        let refs: Vec<&Array> = out.iter().collect();
        kiln::eval(&refs).expect("evaluate the views");
        copied.push(start.elapsed().as_secs_f64());
    }
    for (what, t) in [
        ("Strategy::batch_reduce, 2 micro-batches x 16 MiB f32 (8 tensors): the sum, results as views", median(views)),
        ("the same, then each result evaluated into its own buffer", median(copied)),
    ] {
        emit(json!({
            "bench": "reduce",
            "what": what,
            "ms": t * 1e3,
            "gb_per_s": 16.0 * 1024.0 * 1024.0 / t / 1e9,
            "runs": 11,
        }));
    }
}

#[cfg(feature = "mpi")]
fn mpi_reduce() {
    use mpi::collective::SystemOperation;
    use mpi::traits::*;
    let guard = kiln_train::multiprocess::init().expect("MPI");
    let world = mpi::topology::SimpleCommunicator::world();
    let n = 4 * 1024 * 1024;
    let mine: Vec<f32> = (0..n)
        .map(|i| ((i + guard.rank()) % 97) as f32 * 0.01)
        .collect();
    let mut sum = vec![0.0f32; n];
    let (mut native, mut ours, mut gathered) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..11 {
        world.barrier();
        let start = Instant::now();
        world.all_reduce_into(&mine[..], &mut sum[..], SystemOperation::sum());
        native.push(start.elapsed().as_secs_f64());
        world.barrier();
        let start = Instant::now();
        let sum_ours = kiln_train::multiprocess::all_reduce_tree(&mine).expect("allreduce");
        ours.push(start.elapsed().as_secs_f64());
        world.barrier();
        let start = Instant::now();
        let all = kiln_train::multiprocess::all_gather(&mine).expect("gather");
        let parts: Vec<&[f32]> = all.chunks(n).collect();
        let folded = kiln_train::tree_sum_slices(&parts);
        gathered.push(start.elapsed().as_secs_f64());
        assert!(folded == sum_ours, "the two fixed-order paths disagree");
    }
    if guard.rank() == 0 {
        for (what, t) in [
            ("MPI_Allreduce (sum), 16 MiB f32", median(native)),
            (
                "kiln-train all_reduce_tree (all-to-all, tree fold, all-gather), 16 MiB f32",
                median(ours),
            ),
            (
                "all-gather of whole buffers + tree fold, 16 MiB f32",
                median(gathered),
            ),
        ] {
            emit(json!({
                "bench": "mpi-reduce",
                "what": what,
                "ranks": guard.size(),
                "ms": t * 1e3,
                "gb_per_s": 16.0 * 1024.0 * 1024.0 / t / 1e9,
                "runs": 11,
            }));
        }
    }
}

fn main() {
    let section = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let start = Instant::now();
    match section.as_str() {
        "overlap" => overlap(),
        "mirrored" => mirrored(),
        "reduce" => reduce(),
        #[cfg(feature = "mpi")]
        "mpi" => mpi_reduce(),
        "all" => {
            reduce();
            mirrored();
            overlap();
        }
        other => {
            eprintln!("train: unknown section {other:?}: overlap, mirrored, reduce, all (or mpi with --features mpi)");
            std::process::exit(2);
        }
    }
    eprintln!(
        "train: {section} took {:.1} s",
        start.elapsed().as_secs_f64()
    );
}
