//! kiln's benchmark binary: runs each workload several times and prints one JSON object per
//! line with the median and the spread.
//!
//! Measured now: the front-end cost of *building* and *lowering* an expression (node creation
//! with shape/dtype inference, `LazyExpr` construction, structural hash) for chains of 10,
//! 100 and 1,000 nodes — the part of every loop iteration that the graph cache cannot skip —
//! and the end-to-end time of W1 `(a*b + c)*d - a` on the current CPU backend, which still
//! runs the reference interpreter (so it is a baseline, not a goal).
//!
//! Usage: `cargo run --release -p kiln-benches [-- --quick]`.

use kiln::{Array, DType};
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

fn chain(x: &Array, nodes: usize) -> Array {
    let mut y = x.clone();
    for i in 0..nodes {
        y = match i % 3 {
            0 => &y * 1.0001,
            1 => y.tanh(),
            _ => &y + x,
        };
    }
    y
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let reps = if quick { 5 } else { 31 };
    let x = Array::from_vec(vec![0.5f32; 64 * 64], &[64, 64]).expect("shape matches");

    for nodes in [10usize, 100, 1000] {
        let (med, lo, hi) = time(reps, || {
            let y = chain(&x, nodes);
            let g = kiln::lower(&[&y]);
            std::hint::black_box(g.structural_hash());
        });
        println!(
            "{{\"workload\":\"build+lower+hash\",\"nodes\":{nodes},\"median_us\":{:.2},\"min_us\":{:.2},\"max_us\":{:.2},\"us_per_node\":{:.3}}}",
            med * 1e6,
            lo * 1e6,
            hi * 1e6,
            med * 1e6 / nodes as f64
        );
    }

    let n = if quick { 1 << 14 } else { 1 << 18 };
    let mk = |seed| Array::uniform(&[n], -1.0, 1.0, seed, DType::F32).expect("float dtype");
    let (a, b, c, d) = (mk(1), mk(2), mk(3), mk(4));
    kiln::eval(&[&a, &b, &c, &d]).expect("inputs evaluate");
    let (med, lo, hi) = time(if quick { 3 } else { 7 }, || {
        let y = (&a * &b + &c) * &d - &a;
        y.eval().expect("W1 evaluates");
    });
    let bytes = 5.0 * 4.0 * n as f64;
    println!(
        "{{\"workload\":\"W1\",\"backend\":\"cpu (reference interpreter)\",\"n\":{n},\"median_ms\":{:.3},\"min_ms\":{:.3},\"max_ms\":{:.3},\"gb_per_s\":{:.3}}}",
        med * 1e3,
        lo * 1e3,
        hi * 1e3,
        bytes / med / 1e9
    );
}
