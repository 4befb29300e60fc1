//! The wgpu backend's own contracts, checked against the reference evaluator: pipeline reuse
//! across sizes and scalar values, the buffer pool returning to its level, many threads on
//! one device, value errors raised inside kernels, grids beyond 65,535 workgroups,
//! multi-pass reductions, tiled matmul edges. Skipped (with a message) without an adapter,
//! unless `KILN_REQUIRE_GPU=1`; a test that needs f64 or i64 is skipped (with a message naming
//! the missing feature) on an adapter without it, e.g. llvmpipe's GL.

use kiln_compiler::Engine;
use kiln_ir::{build, BinaryOp, DType, Error, HostData, NodeRef, ReduceOp, Scalar, Shape, UnaryOp};
use kiln_wgpu::WgpuBackend;

fn engine() -> Option<Engine<WgpuBackend>> {
    match WgpuBackend::new() {
        Ok(b) => Some(Engine::new(b, 64)),
        Err(e) => {
            if std::env::var("KILN_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("KILN_REQUIRE_GPU=1 but no wgpu adapter: {e}");
            }
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// Whether `e`'s adapter computes with every dtype of `dtypes`; if not, prints which feature
/// it lacks and why `test` is skipped.
fn has_dtypes(e: &Engine<WgpuBackend>, dtypes: &[DType], test: &str) -> bool {
    let caps = e.backend().capabilities();
    let missing: Vec<&str> = dtypes
        .iter()
        .filter_map(|d| match d {
            DType::F64 if !caps.f64 => Some("SHADER_F64 (f64)"),
            DType::I64 if !caps.i64 => Some("SHADER_INT64 (i64)"),
            _ => None,
        })
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "{test}: skipped: the adapter {} lacks {}",
            caps.adapter,
            missing.join(", ")
        );
    }
    missing.is_empty()
}

fn f32s(v: Vec<f32>) -> NodeRef {
    let n = v.len();
    build::data(HostData::from(v), Shape::from([n])).unwrap()
}

fn reference(roots: &[&NodeRef]) -> kiln_ir::Result<Vec<HostData>> {
    kiln_reference::evaluate(&kiln_ir::LazyExpr::from_roots(roots))
}

fn assert_close(got: &HostData, want: &HostData, rtol: f64) {
    assert_eq!(got.len(), want.len());
    for i in 0..got.len() {
        let (g, w) = (got.get(i).as_f64(), want.get(i).as_f64());
        assert!(
            (g - w).abs() <= rtol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan()),
            "element {i}: {g} vs {w}"
        );
    }
}

/// `exp(x * s) + 1` for a new size and scalar each time.
fn scaled(n: usize, s: f64) -> NodeRef {
    let x = f32s((0..n).map(|i| (i % 7) as f32 * 0.1).collect());
    let y = build::binary_scalar(BinaryOp::Mul, &x, Scalar::Float(s), false).unwrap();
    let e = build::unary(UnaryOp::Exp, &y).unwrap();
    build::binary_scalar(BinaryOp::Add, &e, Scalar::Float(1.0), false).unwrap()
}

#[test]
fn pipelines_are_reused_across_sizes_and_scalars() {
    let Some(e) = engine() else { return };
    let y = scaled(10, 0.5);
    let first = e.evaluate(&[&y]).unwrap();
    assert_close(&first[0], &reference(&[&y]).unwrap()[0], 1e-6);
    let compiled = e.backend().pipeline_stats().misses;
    assert!(compiled >= 1);
    for (k, n) in [3usize, 1000, 70_000, 17].into_iter().enumerate() {
        let y = scaled(n, 0.25 * k as f64 + 0.3);
        let got = e.evaluate(&[&y]).unwrap();
        assert_close(&got[0], &reference(&[&y]).unwrap()[0], 1e-6);
    }
    let s = e.backend().pipeline_stats();
    assert_eq!(
        s.misses, compiled,
        "a new size or scalar must not compile a pipeline"
    );
    assert!(s.hits >= 4);
}

#[test]
fn the_buffer_pool_returns_to_its_level_after_1000_evaluations() {
    let Some(e) = engine() else { return };
    let run = |i: usize| {
        let a = f32s(vec![i as f32; 256]);
        let b = build::unary(UnaryOp::Tanh, &a).unwrap();
        let c = build::reduce(ReduceOp::Sum, &b, None, false).unwrap();
        let d = build::binary(BinaryOp::Mul, &b, &b).unwrap();
        e.evaluate(&[&c, &d]).unwrap();
    };
    run(0);
    let start = e.backend().pool_stats();
    for i in 0..1000 {
        run(i);
    }
    let end = e.backend().pool_stats();
    assert_eq!(end.live, start.live, "buffers leaked: {start:?} -> {end:?}");
    assert!(end.pooled <= end.limit);
    assert!(
        end.created - start.created <= 4,
        "the pool should serve repeated evaluations: {start:?} -> {end:?}"
    );
}

#[test]
fn threads_share_one_device() {
    let Some(e) = engine() else { return };
    std::thread::scope(|s| {
        for t in 0..8 {
            let e = &e;
            s.spawn(move || {
                for i in 0..25 {
                    let y = scaled(100 + t * 37 + i, 0.1 * t as f64);
                    let got = e.evaluate(&[&y]).unwrap();
                    assert_close(&got[0], &reference(&[&y]).unwrap()[0], 1e-6);
                }
            });
        }
    });
}

#[test]
fn value_errors_raised_in_kernels_surface_as_on_the_cpu() {
    let Some(e) = engine() else { return };
    let table = f32s(vec![1.0, 2.0, 3.0]);
    let idx = build::data(HostData::from(vec![0i32, 5, 1]), Shape::from([3])).unwrap();
    let t = build::take(&table, &idx, 0).unwrap();
    let y = build::unary(UnaryOp::Neg, &t).unwrap(); // the error flows through a later kernel
    match e.evaluate(&[&y]) {
        Err(Error::IndexOutOfRange {
            index: 5, size: 3, ..
        }) => {}
        other => panic!("expected IndexOutOfRange, got {other:?}"),
    }
    // integer division by zero, in i32 and (where the adapter has it) i64
    let i32_div = (HostData::from(vec![7i32, 8]), HostData::from(vec![1i32, 0]));
    let i64_div = (HostData::from(vec![7i64, 8]), HostData::from(vec![1i64, 0]));
    let mut divs = vec![i32_div];
    if has_dtypes(&e, &[DType::I64], "value errors in i64 kernels") {
        divs.push(i64_div);
    }
    for (a, z) in divs {
        let d = a.dtype();
        let a = build::data(a, Shape::from([2])).unwrap();
        let z = build::data(z, Shape::from([2])).unwrap();
        let q = build::binary(BinaryOp::FloorDiv, &a, &z).unwrap();
        match e.evaluate(&[&q]) {
            Err(Error::DivisionByZero { dividend: 8, .. }) => {}
            other => panic!("{d}: expected DivisionByZero, got {other:?}"),
        }
    }
    // The device is fine afterwards.
    let idx = build::data(HostData::from(vec![-1i32, 0]), Shape::from([2])).unwrap();
    let t = build::take(&table, &idx, 0).unwrap();
    assert_close(
        &e.evaluate(&[&t]).unwrap()[0],
        &HostData::from(vec![3.0f32, 1.0]),
        0.0,
    );
}

#[test]
fn grids_beyond_65535_workgroups_fold_into_two_dimensions() {
    let Some(e) = engine() else { return };
    let n = 65_535 * 256 + 1000;
    let x = build::iota(Shape::from([n]), 0, DType::I32).unwrap();
    let y = build::binary_scalar(BinaryOp::Add, &x, Scalar::Int(1), false).unwrap();
    let got = e.evaluate(&[&y]).unwrap();
    assert_eq!(got[0].len(), n);
    for i in [0, 1, 65_535 * 256 - 1, 65_535 * 256, n - 1] {
        assert_eq!(got[0].get(i), Scalar::Int(i as i64 + 1), "element {i}");
    }
}

#[test]
fn a_16m_sum_is_within_1e6_of_f64_through_several_passes() {
    let Some(e) = engine() else { return };
    let n = 1 << 24;
    let x = build::random(
        Shape::from([n]),
        DType::F32,
        kiln_ir::Distribution::Uniform,
        7,
    )
    .unwrap();
    let s = build::reduce(ReduceOp::Sum, &x, None, false).unwrap();
    let xs = e.evaluate(&[&x]).unwrap();
    let exact: f64 = (0..n).map(|i| xs[0].get(i).as_f64()).sum();
    let got = e.evaluate(&[&s]).unwrap()[0].get(0).as_f64();
    assert!(((got - exact) / exact).abs() < 1e-6, "{got} vs {exact}");
}

#[test]
fn matmul_tiles_edges_batches_views_and_epilogues_match_the_reference() {
    let Some(e) = engine() else { return };
    let mat = |shape: &[usize], seed: u64| {
        build::random(
            Shape::from(shape.to_vec()),
            DType::F32,
            kiln_ir::Distribution::Normal,
            seed,
        )
        .unwrap()
    };
    for (a, b) in [
        (vec![1, 1], vec![1, 1]),
        (vec![3, 5], vec![5, 7]),
        (vec![65, 129], vec![129, 33]),
        (vec![130, 40], vec![40, 260]),
        // 256 products: the 128×128-tile kernel (all edge).
        (vec![256, 3, 5], vec![256, 5, 7]),
        (vec![2, 3, 17, 19], vec![2, 3, 19, 5]),
        (vec![4, 0], vec![0, 3]),
    ] {
        let (x, w) = (mat(&a, 1), mat(&b, 2));
        let y = build::matmul(&x, &w).unwrap();
        let got = e.evaluate(&[&y]).unwrap();
        // f32 accumulation over up to 129 terms, in the GPU's order.
        assert_close(&got[0], &reference(&[&y]).unwrap()[0], 1e-4);
    }
    // Operands read from buffers, each stored as it is used or transposed (the loads then
    // run along `k` or along the tile), at both tile sizes (256 products take 128-wide
    // tiles), with edges in every dimension.
    let stored = |shape: &[usize], seed: u64, transposed: bool| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n as u64)
            .map(|i| (((i + seed * 7919) * 2654435761) % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        let r = shape.len();
        let mut dims = shape.to_vec();
        if transposed {
            dims.swap(r - 2, r - 1);
        }
        let x = build::data(HostData::from(v), Shape::from(dims)).unwrap();
        if transposed {
            let mut perm: Vec<isize> = (0..r as isize).collect();
            perm.swap(r - 2, r - 1);
            build::permute(&x, &perm).unwrap()
        } else {
            x
        }
    };
    for (a, b) in [
        (vec![150usize, 37], vec![37usize, 70]),
        (vec![256, 20, 19], vec![256, 19, 21]),
    ] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let y = build::matmul(&stored(&a, 6, ta), &stored(&b, 7, tb)).unwrap();
            let got = e.evaluate(&[&y]).unwrap();
            assert_close(&got[0], &reference(&[&y]).unwrap()[0], 1e-4);
        }
    }
    // A transposed (strided) operand and a fused relu(x @ w + b) epilogue.
    let x = mat(&[40, 70], 3);
    let wt = mat(&[30, 70], 4);
    let w = build::permute(&wt, &[1, 0]).unwrap();
    let bias = mat(&[30], 5);
    let xw = build::matmul(&x, &w).unwrap();
    let bb = build::broadcast_to(&bias, xw.shape()).unwrap();
    let z = build::binary(BinaryOp::Add, &xw, &bb).unwrap();
    let y = build::unary(UnaryOp::Relu, &z).unwrap();
    let got = e.evaluate(&[&y]).unwrap();
    assert_close(&got[0], &reference(&[&y]).unwrap()[0], 1e-4);
}

#[test]
fn f64_transcendentals_are_accurate_over_their_range() {
    let Some(e) = engine() else { return };
    if !has_dtypes(&e, &[DType::F64], "f64 transcendentals") {
        return;
    }
    let xs: Vec<f64> = (-400..=400)
        .map(|i| i as f64 * 0.37)
        .chain([
            0.0,
            -0.0,
            1e-300,
            5e-324,
            1e-8,
            -1e-8,
            700.0,
            -740.0,
            1e5,
            f64::NAN,
            f64::INFINITY,
            -f64::INFINITY,
        ])
        .collect();
    let n = xs.len();
    let x = build::data(HostData::from(xs.clone()), Shape::from([n])).unwrap();
    for op in [
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Log1p,
        UnaryOp::Expm1,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
    ] {
        let y = build::unary(op, &x).unwrap();
        let got = &e.evaluate(&[&y]).unwrap()[0];
        for (i, &v) in xs.iter().enumerate() {
            let want = kiln_reference::unary(op, DType::F64, Scalar::Float(v)).as_f64();
            let g = got.get(i).as_f64();
            let ok = (g.is_nan() && want.is_nan())
                || g == want
                || (g - want).abs() <= 1e-14 * want.abs().max(1e-300);
            assert!(ok, "{op:?}({v:e}) = {g:e}, want {want:e}");
        }
    }
}

#[test]
fn gathers_from_generated_tables_and_top_k_match_the_reference() {
    let Some(e) = engine() else { return };
    let table = build::iota(Shape::from([5, 3]), 0, DType::F32).unwrap();
    let idx = build::data(HostData::from(vec![4i32, 0, -1, 2]), Shape::from([4])).unwrap();
    let t = build::take(&table, &idx, 0).unwrap();
    let r = build::random(
        Shape::from([3, 40]),
        DType::F32,
        kiln_ir::Distribution::Normal,
        9,
    )
    .unwrap();
    let (v, i) = build::top_k(&r, 5).unwrap();
    let c = build::concat(&[table.clone(), t.clone()], 0).unwrap();
    // top_k's indices are i64
    let roots = if has_dtypes(&e, &[DType::I64], "top_k indices") {
        vec![&t, &v, &i, &c]
    } else {
        vec![&t, &v, &c]
    };
    let got = e.evaluate(&roots).unwrap();
    let want = reference(&roots).unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert_close(g, w, 1e-6);
    }
}

/// Argmax/argmin over long rows run in several passes over (value, index) partials: the
/// extremum, ties (the lowest index wins, also across chunk and pass boundaries) and NaN
/// (the first NaN wins) against a plain loop; short rows take the thread-per-output form.
#[test]
fn argmax_and_argmin_over_long_and_short_rows_match_a_plain_loop() {
    let Some(e) = engine() else { return };
    // the indices are i64: without them, the documented error (not a panic or a wrong value)
    if !has_dtypes(&e, &[DType::I64], "argmax/argmin") {
        let x = f32s(vec![1.0, 3.0, 2.0]);
        let y = build::arg_reduce(kiln_ir::ArgReduceOp::ArgMax, &x, Some(0), false).unwrap();
        match e.evaluate(&[&y]) {
            Err(Error::UnsupportedDType {
                dtype: DType::I64, ..
            }) => {}
            other => {
                panic!("argmax without SHADER_INT64: expected UnsupportedDType, got {other:?}")
            }
        }
        return;
    }
    // (rows, row length): one 10M row (two passes), rows across the 4,096 chunk, short rows
    for (rows, len) in [(1usize, 10_000_000usize), (3, 20_000), (5, 4_097), (7, 40)] {
        for case in 0..3 {
            let mut v: Vec<f32> = (0..rows * len)
                .map(|i| ((i * 7919) % 1000) as f32 * 0.001 - 0.5)
                .collect();
            for r in 0..rows {
                let row = &mut v[r * len..(r + 1) * len];
                match case {
                    // equal extrema late in the row and in a later chunk: the first must win
                    0 => {
                        row[len - 1] = 2.0;
                        row[len / 2 + r] = 2.0;
                        row[len - 2] = -2.0;
                        row[len / 3] = -2.0;
                    }
                    // NaN after a larger value: NaN is the extremum
                    1 => {
                        row[1] = 3.0;
                        row[len - 3] = f32::NAN;
                        row[len - 1] = f32::NAN;
                    }
                    _ => {}
                }
            }
            let x = build::data(HostData::from(v.clone()), Shape::from([rows, len])).unwrap();
            for op in [kiln_ir::ArgReduceOp::ArgMax, kiln_ir::ArgReduceOp::ArgMin] {
                let y = build::arg_reduce(op, &x, Some(1), false).unwrap();
                let got = e.evaluate(&[&y]).unwrap();
                for r in 0..rows {
                    let row = &v[r * len..(r + 1) * len];
                    let mut best = 0usize;
                    for (i, &a) in row.iter().enumerate() {
                        let b = row[best];
                        let better = if b.is_nan() {
                            false
                        } else if a.is_nan() {
                            true
                        } else if op == kiln_ir::ArgReduceOp::ArgMax {
                            a > b
                        } else {
                            a < b
                        };
                        if better {
                            best = i;
                        }
                    }
                    assert_eq!(
                        got[0].get(r).as_f64() as usize,
                        best,
                        "{op:?} of row {r} of [{rows}, {len}], case {case}"
                    );
                }
            }
        }
    }
}

#[test]
fn scatter_add_rows_match_the_reference_and_report_bad_indices() {
    let Some(e) = engine() else { return };
    // Host data (not a random node: that would test each adapter's `log`/`cos` too).
    let normal = |shape: &[usize], seed: u64| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|i| ((i as u64 * 2654435761 + seed * 97) % 1000) as f32 / 250.0 - 2.0)
            .collect();
        build::data(HostData::from(v), Shape::from(shape.to_vec())).unwrap()
    };
    // i32 indices: every adapter has them (GL has no i64).
    let ids = |v: Vec<i32>, shape: &[usize]| {
        build::data(HostData::from(v), Shape::from(shape.to_vec())).unwrap()
    };
    // (output shape, axis, indices and their shape): an embedding gradient with repeats and
    // negative indices; more than 256 positions (several index slices) and a row wider than
    // 256 (several column blocks); a 2-D index array into a middle axis; an empty index list.
    type Case = (Vec<usize>, isize, Vec<i32>, Vec<usize>);
    let cases: Vec<Case> = vec![
        (vec![7, 5], 0, vec![0, 3, 3, -1, 6, 0, 2], vec![7]),
        (
            vec![50, 300],
            0,
            (0..600).map(|i| i * 7919 % 50).collect(),
            vec![600],
        ),
        (vec![3, 4, 6], 1, vec![1, 3, 1, 0, -4, 2], vec![2, 3]),
        (vec![4, 3], 0, vec![], vec![0]),
    ];
    for (k, (shape, axis, idx, ishape)) in cases.into_iter().enumerate() {
        let ax = if axis < 0 {
            shape.len() as isize + axis
        } else {
            axis
        } as usize;
        let mut ushape: Vec<usize> = shape[..ax].to_vec();
        ushape.extend_from_slice(&ishape);
        ushape.extend_from_slice(&shape[ax + 1..]);
        let upd = normal(&ushape, 10 + k as u64);
        let y = build::scatter_add(&upd, &ids(idx, &ishape), axis, Shape::from(shape)).unwrap();
        let got = e.evaluate(&[&y]).unwrap();
        assert_close(&got[0], &reference(&[&y]).unwrap()[0], 1e-5);
    }
    let upd = normal(&[3, 2], 1);
    let y = build::scatter_add(&upd, &ids(vec![0, 9, 1], &[3]), 0, Shape::from([4, 2])).unwrap();
    let err = e.evaluate(&[&y]).unwrap_err().to_string();
    assert!(err.contains("scatter_add") && err.contains('9'), "{err}");
}

#[test]
fn a_repeated_launch_is_generated_once_and_a_changed_one_again() {
    let Some(e) = engine() else { return };
    let run = |n: usize, s: f64| -> Vec<f64> {
        let y = scaled(n, s);
        let got = e.evaluate(&[&y]).unwrap();
        assert_close(&got[0], &reference(&[&y]).unwrap()[0], 1e-5);
        (0..got[0].len()).map(|i| got[0].get(i).as_f64()).collect()
    };
    let first = run(1000, 0.5);
    let before = e.backend().pipeline_stats();
    // The same sizes and scalar: the cached launch, the same numbers.
    assert_eq!(run(1000, 0.5), first);
    let after = e.backend().pipeline_stats();
    assert_eq!(after.misses, before.misses);
    assert!(after.hits > before.hits);
    // A new scalar and a new size are new launches (checked against the reference above),
    // and the first one again still gives its own numbers.
    assert_ne!(run(1000, 0.25), first);
    run(777, 0.5);
    assert_eq!(run(1000, 0.5), first);
}

#[test]
fn a_loop_rebinds_the_same_buffers_with_its_cached_bind_groups() {
    let Some(e) = engine() else { return };
    // A resident loop: `x <- tanh(x * w) + b` over the same sizes, each step's buffers from
    // the pool. After warming up, steps reuse the bind groups of the step before, and the
    // values still follow the reference step by step.
    let n = 512;
    let data = |s: f32| {
        let v: Vec<f32> = (0..n)
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0 + s)
            .collect();
        build::data(HostData::from(v), Shape::from([n])).unwrap()
    };
    let (w, b) = (data(0.1), data(-0.2));
    let mut x = data(0.0);
    let mut reused = 0;
    for step in 0..12 {
        let xw = build::binary(BinaryOp::Mul, &x, &w).unwrap();
        let t = build::unary(UnaryOp::Tanh, &xw).unwrap();
        let y = build::binary(BinaryOp::Add, &t, &b).unwrap();
        let before = e.backend().pipeline_stats();
        let got = e.evaluate(&[&y]).unwrap();
        let after = e.backend().pipeline_stats();
        assert_close(&got[0], &reference(&[&y]).unwrap()[0], 1e-5);
        if step >= 4 {
            reused += after.bind_groups_reused - before.bind_groups_reused;
        }
        x = build::data(got.into_iter().next().unwrap(), Shape::from([n])).unwrap();
    }
    // Each step uploads x (a pooled buffer, the same after a few steps) and writes y into
    // another; the last 8 steps find their bind group at least half the time.
    assert!(
        reused >= 4,
        "bind groups reused in the last 8 steps: {reused}"
    );
}

#[test]
fn softmax_stores_exp_once_from_its_sum_on_every_reduction_path() {
    let Some(e) = engine() else { return };
    // Serial rows (10 elements), one chunk per row (1,000), and rows over several chunks
    // (10,000): the sum writes `exp(x - max)` as a side output, divided in place after.
    for shape in [[64usize, 10], [30, 1000], [3, 10000]] {
        let n = shape[0] * shape[1];
        let v: Vec<f32> = (0..n)
            .map(|i| ((i as u64 * 2654435761) % 6000) as f32 / 1000.0 - 3.0)
            .collect();
        let x = build::data(HostData::from(v), Shape::from(shape)).unwrap();
        let m = build::reduce(ReduceOp::Max, &x, Some(&[1]), true).unwrap();
        let mb = build::broadcast_to(&m, x.shape()).unwrap();
        let d = build::binary(BinaryOp::Sub, &x, &mb).unwrap();
        let ex = build::unary(UnaryOp::Exp, &d).unwrap();
        let s = build::reduce(ReduceOp::Sum, &ex, Some(&[1]), true).unwrap();
        let sb = build::broadcast_to(&s, x.shape()).unwrap();
        let y = build::binary(BinaryOp::Div, &ex, &sb).unwrap();
        let (_, compiled) = e.inspect(&[&y]).unwrap();
        assert!(
            compiled.plan.kernels.values().any(|k| matches!(
                k.kind,
                kiln_compiler::KernelKind::Reduce { .. }
            ) && k.outputs.len() == 2),
            "{shape:?}: no reduction with a side output in the plan"
        );
        let got = e.evaluate(&[&y]).unwrap();
        assert_close(&got[0], &reference(&[&y]).unwrap()[0], 1e-5);
    }
}

#[test]
fn a_fused_long_row_sums_in_the_plain_reductions_order() {
    let Some(e) = engine() else { return };
    // Rows of three 4,096-element chunks and a bit, enough rows to fuse.
    let (rows, n) = (1024usize, 3 * 4096 + 100);
    let v: Vec<f32> = (0..(rows * n) as u64)
        .map(|i| ((i * 2654435761) % 7919) as f32 / 997.0 - 4.0)
        .collect();
    let x = build::data(HostData::from(v), Shape::from([rows, n])).unwrap();
    let m = build::reduce(ReduceOp::Max, &x, Some(&[1]), true).unwrap();
    let d = build::binary(
        BinaryOp::Sub,
        &x,
        &build::broadcast_to(&m, x.shape()).unwrap(),
    )
    .unwrap();
    let ex = build::unary(UnaryOp::Exp, &d).unwrap();
    let s = build::reduce(ReduceOp::Sum, &ex, Some(&[1]), true).unwrap();
    let y = build::binary(
        BinaryOp::Div,
        &ex,
        &build::broadcast_to(&s, x.shape()).unwrap(),
    )
    .unwrap();
    let before = e.backend().pipeline_stats().fused_groups;
    let got = e.evaluate(&[&y, &s, &m]).unwrap();
    assert!(e.backend().pipeline_stats().fused_groups > before, "fused");
    assert_close(&got[0], &reference(&[&y]).unwrap()[0], 1e-5);
    // The same sum as one plain reduction (two passes: chunks, then their partials), its
    // maxima given as data so that nothing groups it.
    let mh = build::data(got[2].clone(), Shape::from([rows, 1])).unwrap();
    let d2 = build::binary(
        BinaryOp::Sub,
        &x,
        &build::broadcast_to(&mh, x.shape()).unwrap(),
    )
    .unwrap();
    let s2 = build::reduce(
        ReduceOp::Sum,
        &build::unary(UnaryOp::Exp, &d2).unwrap(),
        Some(&[1]),
        true,
    )
    .unwrap();
    let plain = e.evaluate(&[&s2]).unwrap();
    for r in 0..rows {
        let (a, b) = (got[1].get(r).as_f64(), plain[0].get(r).as_f64());
        assert!(
            a.to_bits() == b.to_bits(),
            "row {r}: fused {a} vs plain {b}"
        );
    }
}

#[test]
fn row_groups_run_as_one_dispatch_per_row_and_match_the_reference() {
    let Some(e) = engine() else { return };
    let data = |shape: &[usize], salt: u64| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n as u64)
            .map(|i| (((i + salt) * 2654435761) % 7000) as f32 / 1000.0 - 3.5)
            .collect();
        build::data(HostData::from(v), Shape::from(shape)).unwrap()
    };
    let softmax = |x: &kiln_ir::NodeRef, axis: isize| {
        let m = build::reduce(ReduceOp::Max, x, Some(&[axis]), true).unwrap();
        let mb = build::broadcast_to(&m, x.shape()).unwrap();
        let d = build::binary(BinaryOp::Sub, x, &mb).unwrap();
        let ex = build::unary(UnaryOp::Exp, &d).unwrap();
        let s = build::reduce(ReduceOp::Sum, &ex, Some(&[axis]), true).unwrap();
        let sb = build::broadcast_to(&s, x.shape()).unwrap();
        build::binary(BinaryOp::Div, &ex, &sb).unwrap()
    };
    // Whole-row reductions (short and long rows, rows of several 4,096-element chunks), a
    // reduction keeping part of the row (axis 2 of [rows, 7, 9]), and a few rows too long
    // to fuse (run kernel by kernel: a workgroup per row would leave a GPU idle).
    for (shape, axis, fused) in [
        (vec![64usize, 10], 1isize, true),
        (vec![33, 1000], 1, true),
        (vec![300, 4096], 1, true),
        (vec![40, 7, 9], 2, true),
        (vec![1024, 9000], 1, true),
        (vec![4, 20000], 1, false),
    ] {
        let x = data(&shape, shape.len() as u64);
        let y = softmax(&x, axis);
        let (_, compiled) = e.inspect(&[&y]).unwrap();
        assert!(!compiled.plan.groups.is_empty(), "{shape:?}: a row group");
        let before = e.backend().pipeline_stats().fused_groups;
        let got = e.evaluate(&[&y]).unwrap();
        assert_close(&got[0], &reference(&[&y]).unwrap()[0], 1e-5);
        let ran = e.backend().pipeline_stats().fused_groups - before;
        assert_eq!(ran > 0, fused, "{shape:?}: fused {ran} groups");
    }
}
