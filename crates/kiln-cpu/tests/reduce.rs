//! Reduce and ArgReduce kernels against the reference.

mod common;

use common::*;
use kiln_compiler::{KernelKind, Program};
use kiln_ir::{build, ArgReduceOp, BinaryOp, DType, HostData, ReduceOp, Scalar, Shape, UnaryOp};

fn reduce_case(
    op: ReduceOp,
    data: HostData,
    dims: &[usize],
    axes: &[usize],
    ops: &[VOp],
    rtol: f64,
) {
    let dt = data.dtype();
    // The builders sum/prod bool and i32 in i64: the prologue casts, as the compiler would.
    let acc_dt = match (op, dt) {
        (ReduceOp::Sum | ReduceOp::Prod, DType::Bool | DType::I32) => DType::I64,
        (_, d) => d,
    };
    let mut pb = Pb::new();
    let input = pb.param(data.clone(), dims, ops);
    // The space is the viewed shape.
    let mut n = node(data, dims);
    for o in ops {
        n = match o {
            VOp::Permute(p) => {
                build::permute(&n, &p.iter().map(|&a| a as isize).collect::<Vec<_>>()).unwrap()
            }
            VOp::Reshape(t) => {
                build::reshape(&n, &t.iter().map(|&a| a as isize).collect::<Vec<_>>()).unwrap()
            }
            VOp::Broadcast(t) => build::broadcast_to(&n, &Shape::from(t.clone())).unwrap(),
            VOp::Slice(..) => unreachable!("not used here"),
        };
    }
    let space: Vec<usize> = n.shape().dims().to_vec();
    let mut p = P::new();
    let x = p.load(0, dt);
    let x = if acc_dt != dt { p.cast(x, acc_dt) } else { x };
    let mut kept = space.clone();
    for &a in axes {
        kept[a] = 1;
    }
    let kind = KernelKind::Reduce {
        program: p.done(&[x]),
        op,
        axes: axes.iter().copied().collect(),
    };
    let o = pb.kernel(kind, &space, vec![input], &[(acc_dt, &kept)]);
    pb.output(o[0]);
    let ax: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
    let want = build::reduce(op, &n, Some(&ax), true).unwrap();
    check(pb, &[&want], rtol);
}

#[test]
fn every_reduction_over_every_axis_set() {
    let dims = [4, 5, 6];
    let n = 120;
    let axis_sets: &[&[usize]] = &[&[], &[0], &[1], &[2], &[0, 1], &[0, 2], &[1, 2], &[0, 1, 2]];
    for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min] {
        for data in [
            f32s(n, 1),
            f64s(n, 2),
            i32s(n, 3, 9),
            i64s(n, 4, 1 << 50),
            bools(n, 5),
        ] {
            for &axes in axis_sets {
                let rtol = if data.dtype() == DType::F32 {
                    1e-6
                } else {
                    1e-12
                };
                reduce_case(op, data.clone(), &dims, axes, &[], rtol);
            }
        }
    }
}

#[test]
fn reductions_of_permuted_and_broadcast_views() {
    let d = f64s(60, 6);
    for axes in [&[0usize][..], &[1], &[2], &[0, 2]] {
        reduce_case(
            ReduceOp::Sum,
            d.clone(),
            &[3, 4, 5],
            axes,
            &[VOp::Permute(vec![2, 0, 1])],
            1e-12,
        );
        reduce_case(
            ReduceOp::Max,
            d.clone(),
            &[3, 4, 5],
            axes,
            &[VOp::Permute(vec![1, 2, 0])],
            0.0,
        );
    }
    let b = f32s(4, 7);
    for axes in [&[0usize][..], &[1], &[0, 1]] {
        reduce_case(
            ReduceOp::Sum,
            b.clone(),
            &[1, 4],
            axes,
            &[VOp::Broadcast(vec![2000, 4])],
            1e-6,
        );
    }
}

#[test]
fn max_and_min_propagate_nan() {
    let mut v = vec![1.0f64, 5.0, -3.0, 2.0, 7.0, 0.5, -1.0, 4.0];
    v[2] = f64::NAN;
    for op in [ReduceOp::Max, ReduceOp::Min] {
        for axes in [&[0usize][..], &[1], &[0, 1]] {
            reduce_case(op, HostData::from(v.clone()), &[2, 4], axes, &[], 0.0);
            let f: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            reduce_case(op, HostData::from(f), &[2, 4], axes, &[], 0.0);
        }
    }
}

#[test]
fn integer_sums_and_products_wrap() {
    let big = HostData::from(vec![i64::MAX, 5, i64::MAX, -3, 1 << 62, 3]);
    reduce_case(ReduceOp::Sum, big.clone(), &[2, 3], &[1], &[], 0.0);
    reduce_case(ReduceOp::Prod, big.clone(), &[2, 3], &[0, 1], &[], 0.0);
    let i = HostData::from(vec![i32::MAX, i32::MAX, i32::MIN, 7]);
    reduce_case(ReduceOp::Sum, i.clone(), &[4], &[0], &[], 0.0);
    reduce_case(ReduceOp::Prod, i, &[4], &[0], &[], 0.0);
}

#[test]
fn reduction_of_a_fused_prologue() {
    // sum over axis 1 of (x * x + 1) as f64, from an f32 input.
    let dims = [3, 700];
    let xd = f32s(2100, 8);
    let mut pb = Pb::new();
    let one = pb.scalar(Scalar::Float(1.0));
    let input = pb.param(xd.clone(), &dims, &[]);
    let mut p = P::new();
    let x = p.load(0, DType::F32);
    let xx = p.bin(BinaryOp::Mul, x, x);
    let c = p.scalar(one, DType::F32);
    let s = p.bin(BinaryOp::Add, xx, c);
    let s64 = p.cast(s, DType::F64);
    let kind = KernelKind::Reduce {
        program: p.done(&[s64]),
        op: ReduceOp::Sum,
        axes: [1].into_iter().collect(),
    };
    let o = pb.kernel(kind, &dims, vec![input], &[(DType::F64, &[3, 1])]);
    pb.output(o[0]);
    let xn = node(xd, &dims);
    let xx = build::binary(BinaryOp::Mul, &xn, &xn).unwrap();
    let s = build::binary_scalar(BinaryOp::Add, &xx, Scalar::Float(1.0), false).unwrap();
    let want = build::reduce(
        ReduceOp::Sum,
        &build::cast(&s, DType::F64),
        Some(&[1]),
        true,
    )
    .unwrap();
    check(pb, &[&want], 1e-12);
}

/// The sum of 1e6 f32 values: at least as accurate as pairwise summation.
#[test]
fn f32_sum_of_a_million_elements_is_accurate() {
    let n = 1_000_000;
    // Positive values with a large common offset: naive f32 accumulation loses digits.
    let v: Vec<f32> = floats(n, 9)
        .into_iter()
        .map(|x| 1000.0 + x as f32 * 0.01)
        .collect();
    let exact: f64 = v.iter().map(|&x| x as f64).sum();
    for dims in [vec![n], vec![1000, 1000]] {
        let axes: Vec<usize> = (0..dims.len()).collect();
        let mut pb = Pb::new();
        let input = pb.param(HostData::from(v.clone()), &dims, &[]);
        let kind = KernelKind::Reduce {
            program: load_only(DType::F32),
            op: ReduceOp::Sum,
            axes: axes.iter().copied().collect(),
        };
        let ones = vec![1; dims.len()];
        let o = pb.kernel(kind, &dims, vec![input], &[(DType::F32, &ones)]);
        pb.output(o[0]);
        let got = pb.run().unwrap()[0].get(0).as_f64();
        let rel = (got - exact).abs() / exact;
        assert!(
            rel <= 1e-6,
            "{dims:?}: sum {got} vs {exact} (relative error {rel:e})"
        );
    }
    // Along the outer axis (accumulators updated row by row).
    let mut pb = Pb::new();
    let input = pb.param(HostData::from(v.clone()), &[250_000, 4], &[]);
    let kind = KernelKind::Reduce {
        program: load_only(DType::F32),
        op: ReduceOp::Sum,
        axes: [0].into_iter().collect(),
    };
    let o = pb.kernel(kind, &[250_000, 4], vec![input], &[(DType::F32, &[1, 4])]);
    pb.output(o[0]);
    let got = pb.run().unwrap();
    for j in 0..4 {
        let exact: f64 = v.iter().skip(j).step_by(4).map(|&x| x as f64).sum();
        let g = got[0].get(j).as_f64();
        assert!(
            (g - exact).abs() / exact <= 1e-6,
            "column {j}: {g} vs {exact}"
        );
    }
}

#[test]
fn f64_sums_are_compensated() {
    // 1 + 1e-16 repeated: naive summation returns exactly 1.
    let mut v = vec![1e-16f64; 100_001];
    v[0] = 1.0;
    let mut pb = Pb::new();
    let input = pb.param(HostData::from(v), &[100_001], &[]);
    let kind = KernelKind::Reduce {
        program: load_only(DType::F64),
        op: ReduceOp::Sum,
        axes: [0].into_iter().collect(),
    };
    let o = pb.kernel(kind, &[100_001], vec![input], &[(DType::F64, &[1])]);
    pb.output(o[0]);
    let got = pb.run().unwrap()[0].get(0).as_f64();
    assert!((got - (1.0 + 1e-11)).abs() < 1e-15, "{got}");
}

#[test]
fn reductions_over_empty_axes_give_the_identity() {
    for op in [ReduceOp::Sum, ReduceOp::Prod] {
        reduce_case(
            op,
            HostData::from(Vec::<f32>::new()),
            &[0, 3],
            &[0],
            &[],
            0.0,
        );
        reduce_case(
            op,
            HostData::from(Vec::<i64>::new()),
            &[2, 0],
            &[1],
            &[],
            0.0,
        );
        reduce_case(
            op,
            HostData::from(Vec::<f64>::new()),
            &[3, 0],
            &[0],
            &[],
            0.0,
        );
    }
}

fn arg_case(
    op: ArgReduceOp,
    data: HostData,
    dims: &[usize],
    axis: usize,
    program: Option<Program>,
) {
    let dt = data.dtype();
    let mut pb = Pb::new();
    let input = pb.param(data.clone(), dims, &[]);
    let mut kept = dims.to_vec();
    kept[axis] = 1;
    let kind = KernelKind::ArgReduce {
        program: program.unwrap_or_else(|| load_only(dt)),
        op,
        axis,
    };
    let o = pb.kernel(kind, dims, vec![input], &[(DType::I64, &kept)]);
    pb.output(o[0]);
    let want = build::arg_reduce(op, &node(data, dims), Some(axis as isize), true).unwrap();
    check(pb, &[&want], 0.0);
}

#[test]
fn arg_reductions_take_the_first_extremum_and_nan() {
    let dims = [3, 4, 5];
    for op in [ArgReduceOp::ArgMax, ArgReduceOp::ArgMin] {
        for axis in 0..3 {
            // Few distinct values: many ties.
            arg_case(op, i32s(60, 10, 2), &dims, axis, None);
            arg_case(op, i64s(60, 11, 1 << 60), &dims, axis, None);
            arg_case(op, bools(60, 12), &dims, axis, None);
            let mut f: Vec<f64> = floats(60, 13)
                .into_iter()
                .map(|x| (x * 2.0).round())
                .collect();
            f[7] = f64::NAN;
            f[31] = f64::NAN;
            f[32] = f64::NAN;
            arg_case(op, HostData::from(f.clone()), &dims, axis, None);
            let f32v: Vec<f32> = f.iter().map(|&x| x as f32).collect();
            arg_case(op, HostData::from(f32v), &dims, axis, None);
        }
    }
    // Long axis (runs cross blocks) with a prologue.
    let d = f32s(3 * 2500, 14);
    let mut p = P::new();
    let x = p.load(0, DType::F32);
    let a = p.un(UnaryOp::Abs, x);
    arg_case(ArgReduceOp::ArgMax, d.clone(), &[3, 2500], 1, None);
    arg_case(ArgReduceOp::ArgMin, d.clone(), &[2500, 3], 0, None);
    let mut pb = Pb::new();
    let input = pb.param(d.clone(), &[3, 2500], &[]);
    let kind = KernelKind::ArgReduce {
        program: p.done(&[a]),
        op: ArgReduceOp::ArgMax,
        axis: 1,
    };
    let o = pb.kernel(kind, &[3, 2500], vec![input], &[(DType::I64, &[3, 1])]);
    pb.output(o[0]);
    let abs = build::unary(UnaryOp::Abs, &node(d, &[3, 2500])).unwrap();
    check(
        pb,
        &[&build::arg_reduce(ArgReduceOp::ArgMax, &abs, Some(1), true).unwrap()],
        0.0,
    );
}

/// `sum(a * b)` over `axes` of `dims` as one reduction kernel; with `unfused` the prologue is
/// `a * (b * 1)`, the same products (multiplying by one is exact) through the interpreter
/// instead of the fused dot path.
/// Full sums (serial and over parallel chunks), row sums (one run per output, parallel
/// rows), column sums and middle axes (strided runs): the shapes of the fast-path tests.
const REDUCE_SHAPES: &[(&[usize], &[usize])] = &[
    (&[1000], &[0]),
    (&[(1 << 17) + 37], &[0]),
    (&[3, 700], &[1]),
    (&[40, 5000], &[1]),
    (&[700, 3], &[0]),
    (&[6, 50, 7], &[1]),
    (&[4, 30, 600], &[1, 2]),
];

/// `dims` with the reduced `axes` kept as 1.
fn kept_dims(dims: &[usize], axes: &[usize]) -> Vec<usize> {
    let mut kept = dims.to_vec();
    for &ax in axes {
        kept[ax] = 1;
    }
    kept
}

fn sum_of_products(
    a: &HostData,
    b: &HostData,
    dims: &[usize],
    axes: &[usize],
    unfused: bool,
) -> HostData {
    let mut pb = Pb::new();
    let one = pb.scalar(Scalar::Float(1.0));
    let inputs = vec![
        pb.param(a.clone(), dims, &[]),
        pb.param(b.clone(), dims, &[]),
    ];
    let mut p = P::new();
    let x = p.load(0, DType::F32);
    let mut y = p.load(1, DType::F32);
    if unfused {
        let c = p.scalar(one, DType::F32);
        y = p.bin(BinaryOp::Mul, y, c);
    }
    let r = p.bin(BinaryOp::Mul, x, y);
    let kept = kept_dims(dims, axes);
    let kind = KernelKind::Reduce {
        program: p.done(&[r]),
        op: ReduceOp::Sum,
        axes: axes.iter().copied().collect(),
    };
    let o = pb.kernel(kind, dims, inputs, &[(DType::F32, &kept)]);
    pb.output(o[0]);
    pb.run().unwrap().remove(0)
}

#[test]
fn fused_sums_of_products_equal_the_two_pass_sums() {
    // Full sums (serial and over parallel chunks), row sums (one run per output, parallel
    // rows), column sums and a middle axis (strided runs: the fused path must fall back),
    // with an overflowing product and a NaN in some cases: bit-identical to the interpreter's
    // two passes, and close to the reference.
    let shapes = REDUCE_SHAPES;
    for (case, &(dims, axes)) in shapes.iter().enumerate() {
        let n: usize = dims.iter().product();
        let mut av: Vec<f32> = floats(n, 40 + case as u64)
            .iter()
            .map(|&x| x as f32)
            .collect();
        let bv: Vec<f32> = floats(n, 80 + case as u64)
            .iter()
            .map(|&x| x as f32)
            .collect();
        if case % 3 == 1 {
            av[n / 3] = 3e38;
        }
        if case == 5 {
            av[17] = f32::NAN;
        }
        let (a, b) = (HostData::from(av), HostData::from(bv));
        let fused = sum_of_products(&a, &b, dims, axes, false);
        let two_pass = sum_of_products(&a, &b, dims, axes, true);
        let bits = |h: &HostData| match h {
            HostData::F32(v) => v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(bits(&fused), bits(&two_pass), "{dims:?} over {axes:?}");
        let ax: Vec<isize> = axes.iter().map(|&x| x as isize).collect();
        let prod = build::binary(BinaryOp::Mul, &node(a, dims), &node(b, dims)).unwrap();
        let want = build::reduce(ReduceOp::Sum, &prod, Some(&ax), true).unwrap();
        assert_close_abs(&[fused], &reference(&[&want]).unwrap(), 1e-5, 1e-5);
    }
}

/// A reduction of one input, unchanged (`Load` only), or of `x * 1` (the interpreter's
/// path: the same values computed into a register).
fn reduce_of(
    x: &HostData,
    dims: &[usize],
    axes: &[usize],
    op: ReduceOp,
    via_interp: bool,
) -> HostData {
    let dt = x.dtype();
    let mut pb = Pb::new();
    let one = pb.scalar(if dt.is_float() {
        Scalar::Float(1.0)
    } else {
        Scalar::Int(1)
    });
    let inputs = vec![pb.param(x.clone(), dims, &[])];
    let mut p = P::new();
    let mut v = p.load(0, dt);
    if via_interp {
        let c = p.scalar(one, dt);
        v = p.bin(BinaryOp::Mul, v, c);
    }
    let kept = kept_dims(dims, axes);
    let kind = KernelKind::Reduce {
        program: p.done(&[v]),
        op,
        axes: axes.iter().copied().collect(),
    };
    let o = pb.kernel(kind, dims, inputs, &[(dt, &kept)]);
    pb.output(o[0]);
    pb.run().unwrap().remove(0)
}

#[test]
fn reductions_of_an_unchanged_input_equal_the_interpreter_path() {
    // The reduction folds an unchanged contiguous input straight from its memory, block by
    // block: bit-identical to the interpreter handing the same blocks over, for every op,
    // f32/f64/i64, full/row/column/middle-axis reductions (serial and parallel), and close to
    // the reference.
    let shapes = &REDUCE_SHAPES[..6];
    for (case, &(dims, axes)) in shapes.iter().enumerate() {
        let n: usize = dims.iter().product();
        let mut xf: Vec<f32> = floats(n, 7 + case as u64)
            .iter()
            .map(|&x| x as f32)
            .collect();
        if case == 5 {
            xf[17] = f32::NAN;
        }
        for x in [
            HostData::from(xf),
            f64s(n, 9 + case as u64),
            i64s(n, 11, 1000),
        ] {
            for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
                let plain = reduce_of(&x, dims, axes, op, false);
                let interp = reduce_of(&x, dims, axes, op, true);
                let bits = |h: &HostData| -> Vec<u64> {
                    (0..h.len())
                        .map(|i| match h.get(i) {
                            Scalar::Float(v) => v.to_bits(),
                            Scalar::Int(v) => v as u64,
                            Scalar::Bool(b) => b as u64,
                        })
                        .collect()
                };
                assert_eq!(
                    bits(&plain),
                    bits(&interp),
                    "{op:?} {dims:?} over {axes:?} {:?}",
                    x.dtype()
                );
                let ax: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
                let want = build::reduce(op, &node(x.clone(), dims), Some(&ax), true).unwrap();
                assert_close_abs(&[plain], &reference(&[&want]).unwrap(), 1e-5, 1e-5);
            }
        }
    }
}
