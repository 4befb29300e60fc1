//! Reductions that store their prologue value for later kernels (softmax's `exp(x - max)`,
//! computed once by the sum): the compiled plans must equal the reference interpreter on
//! every reduction path of the CPU backend — serial, rows split over threads, a full
//! reduction split into chunks, and a reduction over a leading axis — and the plan must
//! actually contain such a reduction (so the test cannot pass by not using the feature).

use kiln::{Array, DType};
use kiln_ir::{HostData, Scalar};

fn input(shape: &[usize], dtype: DType) -> Array {
    let n: usize = shape.iter().product();
    // Deterministic, irregular values in [-3, 3).
    let v: Vec<f64> = (0..n)
        .map(|i| ((i as u64).wrapping_mul(2_654_435_761) % 6000) as f64 / 1000.0 - 3.0)
        .collect();
    Array::from_vec(v, shape).expect("shape").cast(dtype)
}

fn close(got: &HostData, want: &HostData, tol: f64) {
    assert_eq!(got.len(), want.len());
    assert_eq!(got.dtype(), want.dtype());
    for i in 0..got.len() {
        let (Scalar::Float(g), Scalar::Float(w)) = (got.get(i), want.get(i)) else {
            panic!("float outputs expected");
        };
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: {g} vs reference {w}"
        );
    }
}

/// `e / sum(e)` with `e = exp(x / 2 - 1)` over `axes`, and the sum itself.
fn check(shape: &[usize], axes: &[isize], dtype: DType) {
    let x = input(shape, dtype);
    let e = (&x * 0.5 - 1.0).exp();
    let s = e.sum(Some(axes), true);
    let y = &e / &s;
    let want = kiln_reference::evaluate(&kiln::lower(&[&y, &s])).expect("reference");
    // The sum stores `e` for the division: one reduction writes more than its output.
    let report = kiln::inspect(&[&y, &s]).expect("compiles").report;
    let reduce = report
        .kernels
        .iter()
        .find(|k| k.kind == "reduce")
        .expect("a reduction kernel");
    let elem = if dtype == DType::F32 { 4 } else { 8 };
    let n: usize = shape.iter().product();
    assert!(
        reduce.bytes_written >= n * elem,
        "{shape:?} over {axes:?}: the reduction wrote {} bytes, no side output",
        reduce.bytes_written
    );
    assert!(
        !report
            .kernels
            .iter()
            .any(|k| k.kind == "elementwise" && k.fused_nodes > 1),
        "{shape:?}: the division recomputes e"
    );
    kiln::eval(&[&y, &s]).expect("evaluates");
    let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
    close(
        &kiln::lower(&[&y]).params[kiln_ir::ParamId::from_u32(0)]
            .to_host()
            .expect("host data"),
        &want[0],
        tol,
    );
    close(
        &kiln::lower(&[&s]).params[kiln_ir::ParamId::from_u32(0)]
            .to_host()
            .expect("host data"),
        &want[1],
        tol,
    );
}

#[test]
fn side_outputs_equal_the_reference_on_every_reduction_path() {
    for dtype in [DType::F32, DType::F64] {
        check(&[3, 5], &[-1], dtype); // serial rows
        check(&[300, 301], &[-1], dtype); // rows over threads (≥ 64K positions)
        check(&[4, 70, 301], &[1, 2], dtype); // trailing axes over threads
        check(&[70_001], &[0], dtype); // a full reduction in chunks, uneven tail
        check(&[257, 300], &[0], dtype); // a leading axis: the last one is kept
        check(&[0, 7], &[-1], dtype); // empty
    }
}
