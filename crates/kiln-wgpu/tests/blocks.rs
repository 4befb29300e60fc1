//! Kernels over arrays larger than one storage binding, on small arrays: a backend bound to
//! at most 4 KiB per binding (`WgpuBackend::with_binding_limit`) runs random elementwise
//! kernels, reductions over each axis, arg-reductions, matmuls (plain, batched, and with a
//! right operand over the limit), gathers
//! from big tables and into big results, scatter-adds into big results and of big updates,
//! top-k, concatenations and a row softmax in blocks, each result against the reference
//! evaluator.
//! Skipped (with a message) without an adapter, unless `KILN_REQUIRE_GPU=1`.
//! `KILN_BLOCK_CASES` sets the number of cases (default 32).
//!
//! Depends on `kiln-wgpu`, `kiln-compiler`, `kiln-ir`, `kiln-reference` and `proptest`.

use kiln_compiler::Engine;
use kiln_ir::{build, ArgReduceOp, BinaryOp, DType, HostData, NodeRef, ReduceOp, Scalar, Shape};
use kiln_wgpu::WgpuBackend;
use proptest::prelude::*;

const LIMIT: u64 = 4096;

fn engine() -> Option<&'static Engine<WgpuBackend>> {
    static ENGINE: std::sync::OnceLock<Option<Engine<WgpuBackend>>> = std::sync::OnceLock::new();
    ENGINE
        .get_or_init(|| match WgpuBackend::with_binding_limit(LIMIT) {
            Ok(b) => Some(Engine::new(b, 64)),
            Err(e) => {
                if std::env::var("KILN_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                    panic!("KILN_REQUIRE_GPU=1 but no wgpu adapter: {e}");
                }
                eprintln!("blocks: skipped: {e}");
                None
            }
        })
        .as_ref()
}

/// `shape`'s worth of small halves (exact in any f32 sum below 2^23).
fn data(shape: &[usize], salt: u64) -> NodeRef {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n as u64)
        .map(|i| (((i + salt) * 2654435761) % 61) as f32 * 0.5 - 15.0)
        .collect();
    build::data(HostData::from(v), Shape::from(shape.to_vec())).unwrap()
}

fn indices(count: usize, n: usize, salt: u64) -> NodeRef {
    let v: Vec<i32> = (0..count)
        .map(|i| {
            let j = ((i as u64 + salt) * 7919) as usize % n;
            if i % 3 == 0 {
                j as i32 - n as i32
            } else {
                j as i32
            }
        })
        .collect();
    build::data(HostData::from(v), Shape::from([count])).unwrap()
}

/// The graphs of one case (every one reads or writes more than `LIMIT` bytes).
fn graphs(case: &Case) -> Vec<(&'static str, NodeRef)> {
    let (r, c, s) = (case.rows, case.cols, case.salt);
    let x = data(&[r, c], s);
    let row = data(&[c], s + 1);
    let mut out = Vec::new();
    let y = build::binary(BinaryOp::Add, &x, &row).unwrap();
    let y = build::binary_scalar(BinaryOp::Mul, &y, Scalar::Float(2.0), false).unwrap();
    let i = build::iota(Shape::from([r, c]), 0, DType::F32).unwrap();
    out.push(("elementwise", build::binary(BinaryOp::Sub, &y, &i).unwrap()));
    for axis in [0isize, 1] {
        out.push((
            "sum",
            build::reduce(ReduceOp::Sum, &x, Some(&[axis]), false).unwrap(),
        ));
        out.push((
            "max",
            build::reduce(ReduceOp::Max, &x, Some(&[axis]), false).unwrap(),
        ));
    }
    out.push((
        "sum of all",
        build::reduce(ReduceOp::Sum, &x, None, false).unwrap(),
    ));
    out.push((
        "argmax",
        build::arg_reduce(ArgReduceOp::ArgMax, &x, Some(1), false).unwrap(),
    ));
    let w = data(&[c, case.n], s + 2);
    out.push(("matmul", build::matmul(&x, &w).unwrap()));
    // Each batch's matrices fit half a binding (one batch matrix over the limit is refused).
    let (b, m) = (case.batch, case.m.min(LIMIT as usize / 8 / c).max(1));
    let xa = data(&[b, m, c], s + 3);
    let wa = data(&[b, c, case.n], s + 4);
    out.push(("batched matmul", build::matmul(&xa, &wa).unwrap()));
    // A right operand over the limit (an output projection onto many classes): cut by `k`.
    let wide = data(&[r, 30], s + 8);
    out.push((
        "matmul by k",
        build::matmul(&data(&[2, r], s + 9), &wide).unwrap(),
    ));
    out.push((
        "take from a big table",
        build::take(&x, &indices(case.n, r, s), 0).unwrap(),
    ));
    let small = data(&[case.n, c], s + 5);
    let many = indices(r, case.n, s);
    out.push((
        "take into a big result",
        build::take(&small, &many, 0).unwrap(),
    ));
    let upd = data(&[case.n, c], s + 6);
    out.push((
        "scatter-add into a big result",
        build::scatter_add(&upd, &indices(case.n, r, s + 1), 0, Shape::from([r, c])).unwrap(),
    ));
    out.push((
        "scatter-add of big updates",
        build::scatter_add(&x, &many, 0, Shape::from([case.n, c])).unwrap(),
    ));
    let k = case.n.min(c);
    let (vals, idx) = build::top_k(&x, k).unwrap();
    out.push(("top-k values", vals));
    out.push(("top-k indices", idx));
    let col = data(&[r, 1], s + 7);
    let xc = build::binary(BinaryOp::Mul, &x, &col).unwrap();
    out.push(("times a column", xc));
    out.push(("concat", build::concat(&[x.clone(), x.clone()], 1).unwrap()));
    out.push((
        "concat along the cut dimension",
        build::concat(&[x.clone(), small.clone(), x.clone()], 0).unwrap(),
    ));
    // A row softmax: a row group whose buffers are over the limit runs kernel by kernel.
    let m = build::reduce(ReduceOp::Max, &x, Some(&[1]), true).unwrap();
    let d = build::binary(
        BinaryOp::Sub,
        &x,
        &build::broadcast_to(&m, x.shape()).unwrap(),
    )
    .unwrap();
    let ex = build::unary(kiln_ir::UnaryOp::Exp, &d).unwrap();
    let sum = build::reduce(ReduceOp::Sum, &ex, Some(&[1]), true).unwrap();
    let sm = build::binary(
        BinaryOp::Div,
        &ex,
        &build::broadcast_to(&sum, x.shape()).unwrap(),
    );
    out.push(("softmax", sm.unwrap()));
    out
}

#[derive(Clone, Debug)]
struct Case {
    rows: usize,
    cols: usize,
    n: usize,
    batch: usize,
    m: usize,
    salt: u64,
}

fn arb_case() -> impl Strategy<Value = Case> {
    // Rows of up to 40 f32 (160 bytes, well under the limit), 40 to 400 of them.
    (
        40usize..400,
        1usize..41,
        1usize..20,
        2usize..40,
        1usize..30,
        0u64..1000,
    )
        .prop_map(|(rows, cols, n, batch, m, salt)| Case {
            rows,
            cols,
            n,
            batch,
            m,
            salt,
        })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("KILN_BLOCK_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(32),
        ..ProptestConfig::default()
    })]

    #[test]
    fn kernels_over_the_binding_limit_equal_the_reference(case in arb_case()) {
        let Some(e) = engine() else { return Ok(()) };
        for (what, g) in graphs(&case) {
            let want = kiln_reference::evaluate(&kiln_ir::LazyExpr::from_roots(&[&g])).unwrap();
            let got = match e.evaluate(&[&g]) {
                Ok(got) => got,
                // An adapter without 64-bit integers (llvmpipe's GL): arg-reductions and
                // top-k's indices are refused before anything runs.
                Err(kiln_ir::Error::UnsupportedDType { .. }) if !e.backend().capabilities().i64 => {
                    continue
                }
                Err(err) => return Err(TestCaseError::fail(format!("{what} of {case:?}: {err}"))),
            };
            prop_assert_eq!(got[0].len(), want[0].len(), "{} of {:?}", what, case);
            // Halves: sums and products are exact in any order; `exp` is not.
            let tol = if what == "softmax" { 1e-5 } else { 0.0 };
            for j in 0..got[0].len() {
                let (a, b) = (got[0].get(j).as_f64(), want[0].get(j).as_f64());
                prop_assert!(
                    (a - b).abs() <= tol * b.abs().max(1e-30),
                    "{} of {:?}, element {}: {} vs {}", what, case, j, a, b
                );
            }
        }
    }
}

/// Empty index lists against tables and results over the limit, and indices far out of
/// range, as the reference evaluates them (empty results, zero sums, errors).
#[test]
fn empty_and_out_of_range_indices_over_the_binding_limit() {
    let Some(e) = engine() else { return };
    let (rows, cols) = (300, 8);
    let table = data(&[rows, cols], 3);
    let none = build::data(HostData::from(Vec::<i32>::new()), Shape::from([0])).unwrap();
    let empty_upd = build::data(HostData::from(Vec::<f32>::new()), Shape::from([0, cols])).unwrap();
    let graphs = [
        build::take(&table, &none, 0).unwrap(),
        build::scatter_add(&empty_upd, &none, 0, Shape::from([rows, cols])).unwrap(),
    ];
    for g in &graphs {
        let want = kiln_reference::evaluate(&kiln_ir::LazyExpr::from_roots(&[g])).unwrap();
        let got = e.evaluate(&[g]).unwrap();
        assert_eq!(got[0].len(), want[0].len());
        for j in 0..got[0].len() {
            assert_eq!(
                got[0].get(j).as_f64(),
                want[0].get(j).as_f64(),
                "element {j}"
            );
        }
    }
    for bad in [i32::MAX, i32::MIN, rows as i32, -(rows as i32) - 1] {
        let idx = build::data(HostData::from(vec![0, bad]), Shape::from([2])).unwrap();
        let upd = data(&[2, cols], 4);
        for g in [
            build::take(&table, &idx, 0).unwrap(),
            build::scatter_add(&upd, &idx, 0, Shape::from([rows, cols])).unwrap(),
        ] {
            let err = e.evaluate(&[&g]).unwrap_err();
            assert!(
                matches!(err, kiln_ir::Error::IndexOutOfRange { .. }),
                "index {bad}: {err}"
            );
        }
    }
}
