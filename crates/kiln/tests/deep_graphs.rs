//! Deep graphs: every walk over a user-sized graph (build, trace, rewrite, fuse, memory plan,
//! inspect, DOT, autodiff, drop) keeps its own work list and is linear in the graph's size,
//! so a chain of a million operations evaluates — on a thread with a 2 MiB stack too.
//! Values and gradients are checked against plain Rust loops over the same arithmetic.

use kiln::{s, Array, DType};

/// Runs `f` on a new thread with a 2 MiB stack (the size of a default spawned thread).
fn on_small_stack<F: FnOnce() + Send + 'static>(f: F) {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .expect("spawn")
        .join()
        .expect("the deep-graph walk panicked or overflowed its stack");
}

fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "got {got:?}, want {want:?}"
        );
    }
}

#[test]
fn a_million_node_chain_evaluates_inspects_differentiates_and_drops() {
    on_small_stack(|| {
        // y = (((x * a) + 1) * a + 1) ...: 500,000 steps of two operations each
        const STEPS: usize = 500_000;
        let a = 1.0 + 1e-7;
        let x0 = [0.0f64, 1.0, -2.0];
        let x = Array::from_vec(x0.to_vec(), &[3]).unwrap();
        let mut y = x.clone();
        for _ in 0..STEPS {
            y = &(&y * a) + 1.0;
        }
        // inspect compiles without evaluating
        let report = kiln::inspect(&[&y]).unwrap().report;
        assert_eq!(report.kernels.len(), 1, "one fused elementwise kernel");
        let g = &kiln::grad(&y.sum(None, false), &[&x]).unwrap()[0];
        kiln::eval(&[&y, g]).unwrap();
        // the same arithmetic in plain Rust
        let want: Vec<f64> = x0
            .iter()
            .map(|&v| (0..STEPS).fold(v, |y, _| y * a + 1.0))
            .collect();
        close(&y.to_vec::<f64>().unwrap(), &want, 1e-12);
        let slope = (0..STEPS).fold(1.0f64, |d, _| d * a);
        close(&g.to_vec::<f64>().unwrap(), &[slope; 3], 1e-12);
        // an unevaluated chain of the same depth drops without recursion
        let mut z = x.clone();
        for _ in 0..2 * STEPS {
            z = z.exp();
        }
        drop(z);
    });
}

/// One step of the mixed chain and its reference, on plain vectors.
#[derive(Clone, Copy, Debug)]
enum Step {
    AddRow,
    Scale,
    SubMax,
    MatMul,
    Reverse,
    Permute,
}

const STEPS: [Step; 6] = [
    Step::AddRow,
    Step::Scale,
    Step::SubMax,
    Step::MatMul,
    Step::Reverse,
    Step::Permute,
];
const ROW: [f64; 3] = [0.0, 0.1, 0.3];
const MIX: [[f64; 3]; 3] = [[0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.25, 0.25, 0.5]];

fn argmax(v: &[f64]) -> usize {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b })
}

/// Forward pass in plain Rust, keeping every step's input for the backward pass.
fn reference(x: &[f64], n: usize) -> (Vec<f64>, Vec<f64>) {
    let steps: Vec<Step> = (0..n).map(|i| STEPS[i % STEPS.len()]).collect();
    reference_of(x, &steps)
}

/// [`reference`] for any sequence of steps.
fn reference_of(x: &[f64], steps: &[Step]) -> (Vec<f64>, Vec<f64>) {
    let n = steps.len();
    let mut inputs: Vec<Vec<f64>> = Vec::with_capacity(n);
    let mut y = x.to_vec();
    for &step in steps {
        inputs.push(y.clone());
        y = match step {
            Step::AddRow => (0..3).map(|j| y[j] + ROW[j]).collect(),
            Step::Scale => y.iter().map(|v| v * 0.75).collect(),
            Step::SubMax => {
                let m = y[argmax(&y)];
                y.iter().map(|v| v - m).collect()
            }
            Step::MatMul => (0..3)
                .map(|j| (0..3).map(|k| y[k] * MIX[k][j]).sum())
                .collect(),
            Step::Reverse | Step::Permute => y.iter().rev().copied().collect(),
        };
    }
    // reverse mode by hand: the gradient of sum(y) with respect to x
    let mut g = vec![1.0f64; 3];
    for i in (0..n).rev() {
        g = match steps[i] {
            Step::AddRow => g,
            Step::Scale => g.iter().map(|v| v * 0.75).collect(),
            Step::SubMax => {
                let total: f64 = g.iter().sum();
                let am = argmax(&inputs[i]);
                (0..3)
                    .map(|j| g[j] - if j == am { total } else { 0.0 })
                    .collect()
            }
            Step::MatMul => (0..3)
                .map(|k| (0..3).map(|j| MIX[k][j] * g[j]).sum())
                .collect(),
            Step::Reverse | Step::Permute => g.iter().rev().copied().collect(),
        };
    }
    (y, g)
}

/// One step on a kiln array.
fn apply(y: &Array, step: Step, row: &Array, mix: &Array) -> Array {
    match step {
        Step::AddRow => y + row,
        Step::Scale => y * 0.75,
        Step::SubMax => y - &y.max(None, true),
        Step::MatMul => y.reshape(&[1, 3]).matmul(mix).reshape(&[3]),
        Step::Reverse => y.slice(s![..;-1]),
        Step::Permute => y
            .reshape(&[3, 1])
            .transpose()
            .reshape(&[3])
            .slice(s![..;-1]),
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 6, ..Default::default() })]

    /// Random deep chains of the mixed steps, on a 2 MiB stack, equal the plain-Rust
    /// forward and backward passes.
    #[test]
    fn random_deep_chains(steps in proptest::collection::vec(
        proptest::sample::select(STEPS.to_vec()), 2_000..20_000)) {
        let x0 = [1.5f64, -0.5, 0.25];
        let (want_y, want_g) = reference_of(&x0, &steps);
        let (tx, rx) = std::sync::mpsc::channel();
        on_small_stack(move || {
            let x = Array::from_vec(x0.to_vec(), &[3]).unwrap();
            let row = Array::from_vec(ROW.to_vec(), &[3]).unwrap();
            let mix = Array::from_vec(MIX.concat(), &[3, 3]).unwrap();
            let mut y = x.clone();
            for &step in &steps {
                y = apply(&y, step, &row, &mix);
            }
            let g = kiln::grad(&y.sum(None, false), &[&x]).unwrap().remove(0);
            kiln::eval(&[&y, &g]).unwrap();
            tx.send((y.to_vec::<f64>().unwrap(), g.to_vec::<f64>().unwrap())).unwrap();
        });
        let (got_y, got_g) = rx.recv().unwrap();
        close(&got_y, &want_y, 1e-9);
        close(&got_g, &want_g, 1e-9);
    }
}

#[test]
fn a_hundred_thousand_mixed_steps_on_a_2_mib_stack() {
    on_small_stack(|| {
        const N: usize = 100_000;
        let x0 = [0.5f64, -1.0, 2.0];
        let x = Array::from_vec(x0.to_vec(), &[3]).unwrap();
        let row = Array::from_vec(ROW.to_vec(), &[3]).unwrap();
        let mix = Array::from_vec(MIX.concat(), &[3, 3]).unwrap();
        let mut y = x.clone();
        for i in 0..N {
            y = apply(&y, STEPS[i % STEPS.len()], &row, &mix);
        }
        assert_eq!(y.dtype(), DType::F64);
        let (want_y, want_g) = reference(&x0, N);
        let inspection = kiln::inspect(&[&y]).unwrap();
        assert!(inspection.report.kernels.len() >= N / STEPS.len());
        assert!(!inspection.dot_after.is_empty());
        assert!(!kiln::lower(&[&y]).to_dot().is_empty());
        let g = kiln::grad(&y.sum(None, false), &[&x]).unwrap().remove(0);
        close(&y.to_vec::<f64>().unwrap(), &want_y, 1e-9);
        close(&g.to_vec::<f64>().unwrap(), &want_g, 1e-9);
        drop((y, g));
    });
}

#[test]
fn a_long_scalar_only_chain_runs_in_the_prelude() {
    on_small_stack(|| {
        let mut y = Array::scalar(0.25f64);
        for _ in 0..100_000 {
            y = (&y * 0.5).sin() + 0.5;
        }
        let want = (0..100_000).fold(0.25f64, |y, _| (y * 0.5).sin() + 0.5);
        close(&[y.item::<f64>().unwrap()], &[want], 1e-12);
    });
}
