//! Row groups (a reduction over rows and the kernels that read its result row by row, run
//! block of rows by block of rows): every case must equal the reference interpreter, on
//! shapes where the CPU backend cuts the rows into blocks run in parallel (uneven last
//! block), on one block, and on no rows — and its plan must contain a row group (so the
//! test cannot pass by not using the feature).

use kiln::{Array, DType};
use kiln_ir::{HostData, Scalar};

fn input(shape: &[usize], dtype: DType, salt: u64) -> Array {
    let n: usize = shape.iter().product();
    // Deterministic, irregular values in [-3, 3).
    let v: Vec<f64> = (0..n as u64)
        .map(|i| ((i + salt).wrapping_mul(2_654_435_761) % 6000) as f64 / 1000.0 - 3.0)
        .collect();
    Array::from_vec(v, shape).expect("shape").cast(dtype)
}

fn close(got: &HostData, want: &HostData, tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for i in 0..got.len() {
        let (Scalar::Float(g), Scalar::Float(w)) = (got.get(i), want.get(i)) else {
            panic!("{what}: float outputs expected");
        };
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: element {i}: {g} vs reference {w}"
        );
    }
}

/// Evaluates `ys` and compares them with the reference interpreter; asserts that the plan
/// has a row group of at least `min_kernels` kernels.
fn check(ys: &[&Array], dtype: DType, min_kernels: usize, what: &str) {
    let want = kiln_reference::evaluate(&kiln::lower(ys)).expect("reference");
    let report = kiln::inspect(ys).expect("compiles").report;
    let grouped = report
        .kernels
        .iter()
        .filter(|k| k.row_group == Some(0))
        .count();
    assert!(
        grouped >= min_kernels,
        "{what}: {grouped} kernels in the first row group, expected {min_kernels}: {report:?}"
    );
    kiln::eval(ys).expect("evaluates");
    let tol = if dtype == DType::F32 { 2e-5 } else { 1e-12 };
    for (k, y) in ys.iter().enumerate() {
        close(
            &kiln::lower(&[y]).params[kiln_ir::ParamId::from_u32(0)]
                .to_host()
                .expect("host data"),
            &want[k],
            tol,
            &format!("{what}, output {k}"),
        );
    }
}

const SHAPES: [&[usize]; 6] = [
    &[600, 300],   // blocks of rows in parallel, uneven last block
    &[1000, 77],   // short rows: large blocks
    &[90, 30, 50], // rank 3: rows are the leading axis
    &[2, 40_000],  // two long rows: one block
    &[3, 5],       // small: one block
    &[0, 7],       // no rows
];

#[test]
fn softmax_and_log_softmax_by_row_blocks_equal_the_reference() {
    for dtype in [DType::F32, DType::F64] {
        for shape in SHAPES {
            let x = input(shape, dtype, 1);
            // No rows (a literal size 0): nothing to group, still evaluated.
            let min = if shape[0] == 0 { 0 } else { 3 };
            let y = x.softmax(-1);
            check(&[&y], dtype, min, &format!("softmax {shape:?} {dtype}"));
            let y = x.log_softmax(-1);
            check(&[&y], dtype, min, &format!("log_softmax {shape:?} {dtype}"));
        }
    }
}

/// Layer normalisation: two chained row reductions (the variance reads the mean), and
/// parameters broadcast along the rows (read in place at every block).
#[test]
fn layer_norm_by_row_blocks_equals_the_reference() {
    for dtype in [DType::F32, DType::F64] {
        for shape in [&[600usize, 300][..], &[513, 200], &[3, 5]] {
            let x = input(shape, dtype, 2);
            let cols = shape[1];
            let g = input(&[cols], dtype, 3);
            let b = input(&[cols], dtype, 4);
            let mean = x.mean(Some(&[-1]), true);
            let d = &x - &mean;
            let var = (&d * &d).mean(Some(&[-1]), true);
            let y = &d / (var + 1e-5).sqrt() * &g + &b;
            check(
                &[&y, &mean],
                dtype,
                3,
                &format!("layer norm {shape:?} {dtype}"),
            );
        }
    }
}

/// A group that reads a slot written before it both row by row and column by column (a
/// column maximum): the last kernel must not overwrite that slot in place, because blocks
/// running later (or on another thread) still read whole columns of it.
#[test]
fn a_slot_read_across_rows_is_not_overwritten_inside_a_group() {
    for n in [384usize, 40] {
        let a = input(&[n, n], DType::F32, 5);
        let b = input(&[n, n], DType::F32, 6);
        let t = a.matmul(&b);
        let rows = t.max(Some(&[1]), true);
        let cols = t.transpose().max(Some(&[1]), true);
        let y = (&t - &rows) * 0.5 - &cols;
        check(&[&y], DType::F32, 2, &format!("column reads {n}"));
    }
}

/// A kernel that reads what the group wrote from other rows (a transposed read) does not
/// join the group: the result is still right.
#[test]
fn a_later_kernel_reading_other_rows_ends_the_group() {
    for n in [300usize, 7] {
        let x = input(&[n, n], DType::F32, 7);
        let s = x.softmax(-1);
        let y = &s + &s.transpose();
        let want = kiln_reference::evaluate(&kiln::lower(&[&y])).expect("reference");
        let report = kiln::inspect(&[&y]).expect("compiles").report;
        let last = report.kernels.last().expect("kernels");
        assert_eq!(last.row_group, None, "{report:?}");
        kiln::eval(&[&y]).expect("evaluates");
        close(
            &kiln::lower(&[&y]).params[kiln_ir::ParamId::from_u32(0)]
                .to_host()
                .expect("host data"),
            &want[0],
            2e-5,
            "transposed read",
        );
    }
}

/// The memory plan's side of the contract: inside a group no buffer passes from one slot to
/// another (blocks of rows run in any order, so a slot of another shape would overlap rows
/// another block still reads), except a kernel writing in place over what it reads at the
/// same positions.
#[test]
fn no_buffer_is_reused_inside_a_group() {
    let x = input(&[600, 300], DType::F32, 8);
    // softmax, a row sum of it (the softmax dies there), then a [rows, 1] value `v` that
    // could take the dead softmax's buffer (it cannot write in place: `w` is an output and
    // `m` is read later)
    let m = x.max(Some(&[-1]), true);
    let w = (x.softmax(-1) * 2.0).sum(Some(&[-1]), true);
    let v = &w * &m + 1.0;
    let u = (&x * &v + &m).sum(Some(&[-1]), true);
    let target = kiln_compiler::Target {
        row_groups: true,
        reduce_side_outputs: true,
        ..kiln_compiler::Target::default()
    };
    let c = kiln_compiler::compile_for(&kiln::lower(&[&w, &u]), target).expect("compiles");
    let plan = &c.plan;
    assert!(!plan.groups.is_empty());
    for g in &plan.groups {
        let mut owner = Vec::new(); // (buffer, first slot written in it)
        for kernel in g.kernels().map(|k| &plan.kernels[k]) {
            for &s in &kernel.outputs {
                let b = plan.slots[s].buffer;
                if let Some(&(_, first)) = owner.iter().find(|(ob, _)| *ob == b) {
                    let in_place = kernel
                        .inputs
                        .values()
                        .any(|i| i.source == kiln_compiler::Source::Slot(first));
                    assert!(
                        in_place,
                        "slot {s} reuses the buffer of slot {first}: {plan:?}"
                    );
                } else {
                    owner.push((b, s));
                }
            }
        }
    }
    check(&[&w, &u], DType::F32, 4, "reuse");
}
