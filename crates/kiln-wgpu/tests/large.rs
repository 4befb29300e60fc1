//! Arrays larger than the adapter's largest storage binding (128 MiB on lavapipe and
//! llvmpipe): a 300 MiB elementwise pass (with a broadcast row and an in-kernel iota), a
//! row reduction, a sum and a max over all elements, a matmul, a batched matmul, top-k and
//! a concatenation, a gather from a 300 MiB table, a gather into a 300 MiB result, a
//! scatter-add into one and a scatter-add of 300 MiB of updates, each checked against
//! plain Rust; and a kernel that cannot be cut into blocks (a gather along the last axis of
//! a 300 MiB table) reports the limit instead of failing inside wgpu.
//! Skipped (with a message) without an adapter, or when the adapter's binding limit is
//! above 300 MiB (nothing to split then).
//!
//! Depends on `kiln-wgpu`, `kiln-compiler` and `kiln-ir`.

use kiln_compiler::Engine;
use kiln_ir::{build, BinaryOp, DType, HostData, NodeRef, ReduceOp, Scalar, Shape};
use kiln_wgpu::WgpuBackend;

const BYTES: usize = 300 << 20;

fn engine() -> Option<Engine<WgpuBackend>> {
    match WgpuBackend::new() {
        Ok(b) if b.capabilities().max_binding_bytes < BYTES as u64 => Some(Engine::new(b, 16)),
        Ok(b) => {
            eprintln!(
                "large buffers: skipped: {} binds up to {} bytes",
                b.capabilities().adapter,
                b.capabilities().max_binding_bytes
            );
            None
        }
        Err(e) => {
            if std::env::var("KILN_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("KILN_REQUIRE_GPU=1 but no wgpu adapter: {e}");
            }
            eprintln!("large buffers: skipped: {e}");
            None
        }
    }
}

/// `n` f32 values, small integers and halves (exact in every sum below).
fn values(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 37 + 11) % 97) as f32 * 0.5 - 24.0)
        .collect()
}

fn data(v: Vec<f32>, shape: &[usize]) -> NodeRef {
    build::data(HostData::from(v), Shape::from(shape.to_vec())).unwrap()
}

fn f32s(h: &HostData) -> &[f32] {
    match h {
        HostData::F32(v) => v,
        other => panic!("expected f32, got {:?}", other.dtype()),
    }
}

#[test]
fn a_300_mib_elementwise_pass_with_a_broadcast_row_and_an_iota() {
    let Some(e) = engine() else { return };
    let cols = 64;
    let rows = BYTES / 4 / cols;
    let xv = values(rows * cols);
    let x = data(xv.clone(), &[rows, cols]);
    let rowv: Vec<f32> = (0..cols).map(|j| j as f32).collect();
    let row = data(rowv.clone(), &[cols]);
    let two_x = build::binary_scalar(BinaryOp::Mul, &x, Scalar::Float(2.0), false).unwrap();
    let y = build::binary(BinaryOp::Add, &two_x, &row).unwrap();
    let i = build::iota(Shape::from([rows, cols]), 0, DType::F32).unwrap();
    let y = build::binary(BinaryOp::Sub, &y, &i).unwrap();
    let got = e.evaluate(&[&y]).unwrap();
    let got = f32s(&got[0]);
    assert_eq!(got.len(), rows * cols);
    for r in 0..rows {
        for c in 0..cols {
            let want = xv[r * cols + c] * 2.0 + rowv[c] - r as f32;
            let g = got[r * cols + c];
            assert!(g == want, "[{r}, {c}]: {g} vs {want}");
        }
    }
}

#[test]
fn row_sums_of_a_300_mib_matrix() {
    let Some(e) = engine() else { return };
    let cols = 256;
    let rows = BYTES / 4 / cols;
    let xv = values(rows * cols);
    let x = data(xv.clone(), &[rows, cols]);
    let s = build::reduce(ReduceOp::Sum, &x, Some(&[1]), false).unwrap();
    let got = e.evaluate(&[&s]).unwrap();
    let got = f32s(&got[0]);
    assert_eq!(got.len(), rows);
    for r in 0..rows {
        let want: f64 = xv[r * cols..(r + 1) * cols].iter().map(|&v| v as f64).sum();
        assert!(
            (got[r] as f64 - want).abs() <= 1e-3,
            "row {r}: {} vs {want}",
            got[r]
        );
    }
}

#[test]
fn a_matmul_with_a_300_mib_left_operand_and_a_150_mib_result() {
    let Some(e) = engine() else { return };
    let (k, n) = (16, 8);
    let m = BYTES / 4 / k;
    let av = values(m * k);
    let bv: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 - 2.0).collect();
    let y = build::matmul(&data(av.clone(), &[m, k]), &data(bv.clone(), &[k, n])).unwrap();
    let got = e.evaluate(&[&y]).unwrap();
    let got = f32s(&got[0]);
    assert_eq!(got.len(), m * n);
    for i in 0..m {
        for j in 0..n {
            let want: f32 = (0..k).map(|t| av[i * k + t] * bv[t * n + j]).sum();
            assert!(
                got[i * n + j] == want,
                "[{i}, {j}]: {} vs {want}",
                got[i * n + j]
            );
        }
    }
}

#[test]
fn sum_and_max_over_all_of_a_300_mib_array() {
    let Some(e) = engine() else { return };
    let n = BYTES / 4;
    let xv = values(n);
    let x = data(xv.clone(), &[n]);
    let s = build::reduce(ReduceOp::Sum, &x, None, false).unwrap();
    let m = build::reduce(ReduceOp::Max, &x, None, false).unwrap();
    let got = e.evaluate(&[&s, &m]).unwrap();
    let want: f64 = xv.iter().map(|&v| v as f64).sum();
    let scale: f64 = xv.iter().map(|&v| v.abs() as f64).sum();
    let sum = f32s(&got[0])[0] as f64;
    // f32 partial sums in the GPU's order against an exact sum.
    assert!((sum - want).abs() <= 1e-6 * scale, "{sum} vs {want}");
    let max = xv.iter().copied().fold(f32::MIN, f32::max);
    assert_eq!(f32s(&got[1])[0], max);
}

/// Indices spread over every block of an `n`-long axis, each block hit several times,
/// negatives (counted from the end) and repeats included.
fn spread_indices(count: usize, n: usize) -> Vec<i32> {
    (0..count)
        .map(|i| {
            let j = (i * 7_919 + 13) % n;
            if i % 5 == 0 {
                j as i32 - n as i32
            } else {
                j as i32
            }
        })
        .collect()
}

/// `got` holds the rows of `table` (`rows` × `cols`) that `indices` name, in order.
fn check_gathered(got: &[f32], table: &[f32], indices: &[i32], rows: usize, cols: usize) {
    for (p, &j) in indices.iter().enumerate() {
        let r = if j < 0 { j + rows as i32 } else { j } as usize;
        let (g, w) = (
            &got[p * cols..(p + 1) * cols],
            &table[r * cols..(r + 1) * cols],
        );
        if let Some(c) = (0..cols).find(|&c| g[c] != w[c]) {
            panic!("position {p}, index {j}, column {c}: {} vs {}", g[c], w[c]);
        }
    }
}

#[test]
fn a_gather_from_a_300_mib_table() {
    let Some(e) = engine() else { return };
    let cols = 1024;
    let rows = BYTES / 4 / cols;
    let tv = values(rows * cols);
    let table = data(tv.clone(), &[rows, cols]);
    let iv = spread_indices(4096, rows);
    let idx = build::data(HostData::from(iv.clone()), Shape::from([4096])).unwrap();
    let g = build::take(&table, &idx, 0).unwrap();
    let got = e.evaluate(&[&g]).unwrap();
    let got = f32s(&got[0]);
    assert_eq!(got.len(), 4096 * cols);
    check_gathered(got, &tv, &iv, rows, cols);
    // An index past the end is reported against the whole table, not a block of it.
    let bad = build::data(HostData::from(vec![3i32, rows as i32]), Shape::from([2])).unwrap();
    let err = e
        .evaluate(&[&build::take(&table, &bad, 0).unwrap()])
        .unwrap_err()
        .to_string();
    assert!(err.contains(&rows.to_string()), "{err}");
}

#[test]
fn a_gather_with_a_300_mib_result() {
    let Some(e) = engine() else { return };
    let (rows, cols) = (1000, 64);
    let count = BYTES / 4 / cols;
    let tv = values(rows * cols);
    let table = data(tv.clone(), &[rows, cols]);
    let iv = spread_indices(count, rows);
    let idx = build::data(HostData::from(iv.clone()), Shape::from([count])).unwrap();
    let g = build::take(&table, &idx, 0).unwrap();
    let got = e.evaluate(&[&g]).unwrap();
    let got = f32s(&got[0]);
    assert_eq!(got.len(), count * cols);
    check_gathered(got, &tv, &iv, rows, cols);
}

#[test]
fn a_scatter_add_into_a_300_mib_result() {
    let Some(e) = engine() else { return };
    let cols = 1024;
    let rows = BYTES / 4 / cols;
    let count = 512;
    let uv = values(count * cols);
    let upd = data(uv.clone(), &[count, cols]);
    // Every fourth index repeats an earlier one, so rows sum several updates.
    let iv: Vec<i32> = spread_indices(count, rows)
        .into_iter()
        .enumerate()
        .map(|(i, j)| {
            if i % 4 == 3 {
                (i as i32 * 31) % rows as i32
            } else {
                j
            }
        })
        .collect();
    let iv: Vec<i32> = iv
        .iter()
        .enumerate()
        .map(|(i, &j)| if i % 4 == 3 && i >= 8 { iv[i - 8] } else { j })
        .collect();
    let idx = build::data(HostData::from(iv.clone()), Shape::from([count])).unwrap();
    let s = build::scatter_add(&upd, &idx, 0, Shape::from([rows, cols])).unwrap();
    let got = e.evaluate(&[&s]).unwrap();
    let got = f32s(&got[0]);
    assert_eq!(got.len(), rows * cols);
    let mut want = vec![0f32; rows * cols];
    for (p, &j) in iv.iter().enumerate() {
        let r = if j < 0 { j + rows as i32 } else { j } as usize;
        for c in 0..cols {
            want[r * cols + c] += uv[p * cols + c];
        }
    }
    let wrong = got.iter().zip(&want).position(|(g, w)| g != w);
    assert!(
        wrong.is_none(),
        "element {wrong:?}: {} vs {}",
        got[wrong.unwrap_or(0)],
        want[wrong.unwrap_or(0)]
    );
}

#[test]
fn a_scatter_add_of_300_mib_of_updates() {
    let Some(e) = engine() else { return };
    let (rows, cols) = (64, 64);
    let count = BYTES / 4 / cols;
    let uv = values(count * cols);
    let upd = data(uv.clone(), &[count, cols]);
    let iv = spread_indices(count, rows);
    let idx = build::data(HostData::from(iv.clone()), Shape::from([count])).unwrap();
    let s = build::scatter_add(&upd, &idx, 0, Shape::from([rows, cols])).unwrap();
    let got = e.evaluate(&[&s]).unwrap();
    let got = f32s(&got[0]);
    // Sums of small integers and halves: exact in f32 in any order.
    let mut want = vec![0f64; rows * cols];
    for (p, &j) in iv.iter().enumerate() {
        let r = if j < 0 { j + rows as i32 } else { j } as usize;
        for c in 0..cols {
            want[r * cols + c] += uv[p * cols + c] as f64;
        }
    }
    for (k, (&g, &w)) in got.iter().zip(&want).enumerate() {
        assert!(g as f64 == w, "element {k}: {g} vs {w}");
    }
    // An index out of range in a later block is still reported.
    let mut bad = iv;
    bad[count - 3] = rows as i32 + 5;
    let idx = build::data(HostData::from(bad), Shape::from([count])).unwrap();
    let s = build::scatter_add(&upd, &idx, 0, Shape::from([rows, cols])).unwrap();
    let err = e.evaluate(&[&s]).unwrap_err().to_string();
    assert!(err.contains(&(rows + 5).to_string()), "{err}");
}

#[test]
fn a_batched_matmul_over_300_mib_of_batches() {
    let Some(e) = engine() else { return };
    let (m, k, n) = (64, 64, 8);
    let batch = BYTES / 4 / (m * k);
    let av = values(batch * m * k);
    let bv: Vec<f32> = (0..batch * k * n).map(|i| (i % 7) as f32 - 3.0).collect();
    let a = data(av.clone(), &[batch, m, k]);
    let b = data(bv.clone(), &[batch, k, n]);
    let y = build::matmul(&a, &b).unwrap();
    let got = e.evaluate(&[&y]).unwrap();
    let got = f32s(&got[0]);
    assert_eq!(got.len(), batch * m * n);
    for q in (0..batch).step_by(97).chain([batch - 1]) {
        for i in 0..m {
            for j in 0..n {
                let want: f32 = (0..k)
                    .map(|t| av[(q * m + i) * k + t] * bv[(q * k + t) * n + j])
                    .sum();
                let g = got[(q * m + i) * n + j];
                assert!(g == want, "[{q}, {i}, {j}]: {g} vs {want}");
            }
        }
    }
}

#[test]
fn top_k_and_concat_over_300_mib() {
    let Some(e) = engine() else { return };
    let cols = 64;
    let rows = BYTES / 4 / cols;
    let xv = values(rows * cols);
    let x = data(xv.clone(), &[rows, cols]);
    let (vals, idx) = build::top_k(&x, 2).unwrap();
    let h = cols / 2;
    let left = data(xv[..rows * h].to_vec(), &[rows, h]);
    let right = data(xv[rows * h..].to_vec(), &[rows, h]);
    let joined = build::concat(&[left, right], 1).unwrap();
    let got = e.evaluate(&[&vals, &idx, &joined]).unwrap();
    let (gv, gj) = (f32s(&got[0]), &got[1]);
    let gj: Vec<i64> = match gj {
        HostData::I64(v) => v.to_vec(),
        HostData::I32(v) => v.iter().map(|&i| i as i64).collect(),
        other => panic!("indices of dtype {:?}", other.dtype()),
    };
    for r in 0..rows {
        let row = &xv[r * cols..(r + 1) * cols];
        // The two largest (a row's 64 values are distinct: 37·i mod 97 over 64 consecutive i).
        let mut order: Vec<usize> = (0..cols).collect();
        order.sort_by(|&p, &q| row[q].total_cmp(&row[p]));
        for t in 0..2 {
            assert_eq!(gv[r * 2 + t], row[order[t]], "row {r}, value {t}");
            assert_eq!(gj[r * 2 + t], order[t] as i64, "row {r}, index {t}");
        }
    }
    let gc = f32s(&got[2]);
    for r in 0..rows {
        for c in 0..cols {
            let want = if c < h {
                xv[r * h + c]
            } else {
                xv[rows * h + r * h + c - h]
            };
            assert!(gc[r * cols + c] == want, "concat [{r}, {c}]");
        }
    }
}

#[test]
fn a_kernel_that_cannot_be_cut_names_the_limit() {
    let Some(e) = engine() else { return };
    // A gather along the last axis of a table with many rows: even one column of it spans
    // the whole table.
    let rows = BYTES / 4 / 64;
    let table = data(values(rows * 64), &[rows, 64]);
    let idx = build::data(HostData::from(vec![0i32, 5, 7]), Shape::from([3])).unwrap();
    let g = build::take(&table, &idx, 1).unwrap();
    let err = e.evaluate(&[&g]).unwrap_err().to_string();
    assert!(err.contains("largest storage binding"), "{err}");
}
