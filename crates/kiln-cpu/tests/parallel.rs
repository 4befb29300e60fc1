//! Every kernel path at sizes that take the parallel paths (contiguous, strided, broadcast,
//! in-place, full and row reductions, value errors), at every ISA level this machine can run
//! and on 1 and 2 threads: each agrees with the reference evaluator, and results are
//! bit-identical for any thread count.
//!
//! One test function: it switches the process-wide ISA level (`kiln_cpu::set_isa`), so
//! nothing else runs in this binary.

mod common;

use common::*;
use kiln_compiler::{KernelKind, Program};
use kiln_ir::{build, BinaryOp, DType, HostData, NodeRef, ReduceOp, Result, Scalar, UnaryOp};

struct Case {
    name: &'static str,
    build: fn() -> (Pb, Vec<NodeRef>),
    rtol: f64,
    atol: f64,
}

fn ew(p: Program) -> KernelKind {
    KernelKind::Elementwise { program: p }
}

const N: usize = 300_001; // > 4 parallel chunks, not a multiple of the block

/// `exp(-x*x)*sin(x) + tanh(x)`, `sigmoid(x) * log(|y| + 1)`, contiguous inputs.
fn transcendental() -> (Pb, Vec<NodeRef>) {
    let (xd, yd) = (f32s(N, 1), f32s(N, 2));
    let mut pb = Pb::new();
    let one = pb.scalar(Scalar::Float(1.0));
    let xi = pb.param(xd.clone(), &[N], &[]);
    let yi = pb.param(yd.clone(), &[N], &[]);
    let mut p = P::new();
    let x = p.load(0, DType::F32);
    let y = p.load(1, DType::F32);
    let xx = p.bin(BinaryOp::Mul, x, x);
    let nxx = p.un(UnaryOp::Neg, xx);
    let e = p.un(UnaryOp::Exp, nxx);
    let s = p.un(UnaryOp::Sin, x);
    let es = p.bin(BinaryOp::Mul, e, s);
    let t = p.un(UnaryOp::Tanh, x);
    let r0 = p.bin(BinaryOp::Add, es, t);
    let sg = p.un(UnaryOp::Sigmoid, x);
    let ay = p.un(UnaryOp::Abs, y);
    let c1 = p.scalar(one, DType::F32);
    let ay1 = p.bin(BinaryOp::Add, ay, c1);
    let l = p.un(UnaryOp::Log, ay1);
    let c = p.un(UnaryOp::Cos, y);
    let lc = p.bin(BinaryOp::Mul, l, c);
    let r1 = p.bin(BinaryOp::Mul, sg, lc);
    let outs = pb.kernel(
        ew(p.done(&[r0, r1])),
        &[N],
        vec![xi, yi],
        &[(DType::F32, &[N]), (DType::F32, &[N])],
    );
    pb.output(outs[0]);
    pb.output(outs[1]);
    let (xn, yn) = (node(xd, &[N]), node(yd, &[N]));
    let u = |op, a: &NodeRef| build::unary(op, a).unwrap();
    let b = |op, a: &NodeRef, c: &NodeRef| build::binary(op, a, c).unwrap();
    let w0 = b(
        BinaryOp::Add,
        &b(
            BinaryOp::Mul,
            &u(UnaryOp::Exp, &u(UnaryOp::Neg, &b(BinaryOp::Mul, &xn, &xn))),
            &u(UnaryOp::Sin, &xn),
        ),
        &u(UnaryOp::Tanh, &xn),
    );
    let ay1 = build::binary_scalar(
        BinaryOp::Add,
        &u(UnaryOp::Abs, &yn),
        Scalar::Float(1.0),
        false,
    )
    .unwrap();
    let w1 = b(
        BinaryOp::Mul,
        &u(UnaryOp::Sigmoid, &xn),
        &b(BinaryOp::Mul, &u(UnaryOp::Log, &ay1), &u(UnaryOp::Cos, &yn)),
    );
    (pb, vec![w0, w1])
}

/// `a.T + row + col` over [700, 600] (strided and broadcast views), f64 and f32.
fn strided_broadcast() -> (Pb, Vec<NodeRef>) {
    let (r, c) = (700, 600);
    let ad = f64s(r * c, 3);
    let rowd = f64s(c, 4);
    let cold = f64s(r, 5);
    let mut pb = Pb::new();
    let a = pb.param(ad.clone(), &[c, r], &[VOp::Permute(vec![1, 0])]);
    let row = pb.param(
        rowd.clone(),
        &[c],
        &[VOp::Reshape(vec![1, c]), VOp::Broadcast(vec![r, c])],
    );
    let col = pb.param(cold.clone(), &[r, 1], &[VOp::Broadcast(vec![r, c])]);
    let mut p = P::new();
    let x = p.load(0, DType::F64);
    let y = p.load(1, DType::F64);
    let z = p.load(2, DType::F64);
    let s = p.bin(BinaryOp::Add, x, y);
    let s = p.bin(BinaryOp::Add, s, z);
    let m = p.bin(BinaryOp::Maximum, s, x);
    let o = pb.kernel(
        ew(p.done(&[m])),
        &[r, c],
        vec![a, row, col],
        &[(DType::F64, &[r, c])],
    );
    pb.output(o[0]);
    let an = build::permute(&node(ad, &[c, r]), &[1, 0]).unwrap();
    let rown = build::broadcast_to(
        &build::reshape(&node(rowd, &[c]), &[1, c as isize]).unwrap(),
        &kiln_ir::Shape::from([r, c]),
    )
    .unwrap();
    let coln = build::broadcast_to(&node(cold, &[r, 1]), &kiln_ir::Shape::from([r, c])).unwrap();
    let s = build::binary(
        BinaryOp::Add,
        &build::binary(BinaryOp::Add, &an, &rown).unwrap(),
        &coln,
    )
    .unwrap();
    (pb, vec![build::binary(BinaryOp::Maximum, &s, &an).unwrap()])
}

/// Two kernels: `t = x * 2`, then `t + y` written in place over `t`.
fn in_place() -> (Pb, Vec<NodeRef>) {
    let (xd, yd) = (f32s(N, 6), f32s(N, 7));
    let mut pb = Pb::new();
    let two = pb.scalar(Scalar::Float(2.0));
    let xi = pb.param(xd.clone(), &[N], &[]);
    let mut p = P::new();
    let x = p.load(0, DType::F32);
    let c = p.scalar(two, DType::F32);
    let t = p.bin(BinaryOp::Mul, x, c);
    let s0 = pb.kernel(ew(p.done(&[t])), &[N], vec![xi], &[(DType::F32, &[N])])[0];
    let ti = pb.slot(s0, &[]);
    let yi = pb.param(yd.clone(), &[N], &[]);
    let mut p = P::new();
    let t = p.load(0, DType::F32);
    let y = p.load(1, DType::F32);
    let s = p.bin(BinaryOp::Add, t, y);
    let s1 = pb.kernel_over(ew(p.done(&[s])), &[N], vec![ti, yi], (DType::F32, &[N]), s0);
    pb.output(s1);
    let t =
        build::binary_scalar(BinaryOp::Mul, &node(xd, &[N]), Scalar::Float(2.0), false).unwrap();
    (
        pb,
        vec![build::binary(BinaryOp::Add, &t, &node(yd, &[N])).unwrap()],
    )
}

fn reduction(
    op: ReduceOp,
    data: HostData,
    dims: &[usize],
    axes: &[usize],
    square: bool,
) -> (Pb, Vec<NodeRef>) {
    let dt = data.dtype();
    let mut pb = Pb::new();
    let input = pb.param(data.clone(), dims, &[]);
    let mut p = P::new();
    let x = p.load(0, dt);
    let x = if square {
        p.bin(BinaryOp::Mul, x, x)
    } else {
        x
    };
    let mut kept = dims.to_vec();
    for &a in axes {
        kept[a] = 1;
    }
    let kind = KernelKind::Reduce {
        program: p.done(&[x]),
        op,
        axes: axes.iter().copied().collect(),
    };
    let o = pb.kernel(kind, dims, vec![input], &[(dt, &kept)]);
    pb.output(o[0]);
    let n = node(data, dims);
    let n = if square {
        build::binary(BinaryOp::Mul, &n, &n).unwrap()
    } else {
        n
    };
    let ax: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
    (pb, vec![build::reduce(op, &n, Some(&ax), true).unwrap()])
}

fn with_nan(n: usize, seed: u64, at: usize) -> HostData {
    let mut v: Vec<f32> = match f32s(n, seed) {
        HostData::F32(v) => v.to_vec(),
        _ => unreachable!(),
    };
    v[at] = f32::NAN;
    HostData::from(v)
}

/// Integer floor division with zeros in the divisor: the error names the first zero.
fn int_div_error() -> (Pb, Vec<NodeRef>) {
    let xd = i64s(N, 8, 1000);
    let mut yv: Vec<i64> = (0..N as i64).map(|i| 1 + i % 7).collect();
    yv[200_000] = 0;
    yv[250_000] = 0;
    let yd = HostData::from(yv);
    let mut pb = Pb::new();
    let xi = pb.param(xd.clone(), &[N], &[]);
    let yi = pb.param(yd.clone(), &[N], &[]);
    let mut p = P::new();
    let x = p.load(0, DType::I64);
    let y = p.load(1, DType::I64);
    let q = p.bin(BinaryOp::FloorDiv, x, y);
    let o = pb.kernel(ew(p.done(&[q])), &[N], vec![xi, yi], &[(DType::I64, &[N])]);
    pb.output(o[0]);
    let want = build::binary(BinaryOp::FloorDiv, &node(xd, &[N]), &node(yd, &[N])).unwrap();
    (pb, vec![want])
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "transcendental",
            build: transcendental,
            rtol: 1e-5,
            atol: 1e-6,
        },
        Case {
            name: "strided_broadcast",
            build: strided_broadcast,
            rtol: 1e-12,
            atol: 0.0,
        },
        Case {
            name: "in_place",
            build: in_place,
            rtol: 1e-7,
            atol: 0.0,
        },
        Case {
            name: "sum_all_squares",
            build: || reduction(ReduceOp::Sum, f32s(1 << 20, 9), &[1 << 20], &[0], true),
            rtol: 1e-6,
            atol: 0.0,
        },
        Case {
            name: "row_sums",
            build: || {
                reduction(
                    ReduceOp::Sum,
                    f32s(600 * 1000, 10),
                    &[600, 1000],
                    &[1],
                    false,
                )
            },
            rtol: 1e-5,
            atol: 1e-5,
        },
        Case {
            name: "column_sums_f64",
            build: || {
                reduction(
                    ReduceOp::Sum,
                    f64s(1000 * 300, 11),
                    &[1000, 300],
                    &[0],
                    false,
                )
            },
            rtol: 1e-12,
            atol: 1e-12,
        },
        // Leading (or middle) axes reduced, the last kept: pieces of the positions fold into
        // partial accumulators merged in piece order, so 1 and 2 threads agree bit for bit.
        Case {
            name: "column_sums_of_squares_f32",
            build: || reduction(ReduceOp::Sum, f32s(700 * 520, 14), &[700, 520], &[0], true),
            rtol: 1e-5,
            atol: 1e-5,
        },
        Case {
            name: "middle_axis_sums",
            build: || {
                reduction(
                    ReduceOp::Sum,
                    f32s(40 * 300 * 50, 15),
                    &[40, 300, 50],
                    &[1],
                    false,
                )
            },
            rtol: 1e-5,
            atol: 1e-5,
        },
        Case {
            name: "column_max_with_nan",
            build: || {
                reduction(
                    ReduceOp::Max,
                    with_nan(600 * 300, 16, 9_001),
                    &[600, 300],
                    &[0],
                    false,
                )
            },
            rtol: 0.0,
            atol: 0.0,
        },
        Case {
            name: "column_min_f64",
            build: || reduction(ReduceOp::Min, f64s(500 * 300, 17), &[500, 300], &[0], false),
            rtol: 0.0,
            atol: 0.0,
        },
        Case {
            name: "row_max_with_nan",
            build: || {
                reduction(
                    ReduceOp::Max,
                    with_nan(300 * 1000, 12, 4567),
                    &[300, 1000],
                    &[1],
                    false,
                )
            },
            rtol: 0.0,
            atol: 0.0,
        },
        Case {
            name: "max_all_with_nan",
            build: || {
                reduction(
                    ReduceOp::Max,
                    with_nan(1 << 19, 13, 300_000),
                    &[1 << 19],
                    &[0],
                    false,
                )
            },
            rtol: 0.0,
            atol: 0.0,
        },
        Case {
            name: "int_div_error",
            build: int_div_error,
            rtol: 0.0,
            atol: 0.0,
        },
    ]
}

fn run_on(threads: usize, case: &Case) -> (Result<Vec<HostData>>, Vec<NodeRef>) {
    let team = kiln_cpu::Team::new(threads);
    let (pb, want) = (case.build)();
    (team.install(|| pb.run()), want)
}

fn bits(d: &[HostData]) -> Vec<Vec<u64>> {
    d.iter()
        .map(|h| {
            (0..h.len())
                .map(|i| match h.get(i) {
                    Scalar::Float(x) => x.to_bits(),
                    Scalar::Int(x) => x as u64,
                    Scalar::Bool(b) => b as u64,
                })
                .collect()
        })
        .collect()
}

#[test]
fn every_path_at_every_isa_level_and_thread_count() {
    for level in kiln_cpu::Isa::ALL {
        if level > kiln_cpu::detected_isa() {
            continue;
        }
        assert_eq!(kiln_cpu::set_isa(level), level);
        for case in cases() {
            let (one, want) = run_on(1, &case);
            let (two, _) = run_on(2, &case);
            let roots: Vec<&NodeRef> = want.iter().collect();
            let reference = reference(&roots);
            match (&one, &two, &reference) {
                (Ok(a), Ok(b), Ok(w)) => {
                    assert_eq!(
                        bits(a),
                        bits(b),
                        "{} at {level:?}: 1 vs 2 threads",
                        case.name
                    );
                    assert_close_abs(a, w, case.rtol, case.atol);
                }
                (Err(a), Err(b), Err(w)) => {
                    assert_eq!(a, w, "{} at {level:?}", case.name);
                    assert_eq!(b, w, "{} at {level:?}", case.name);
                }
                _ => panic!(
                    "{} at {level:?}: {:?} / {:?} vs reference {:?}",
                    case.name,
                    one.as_ref().err(),
                    two.as_ref().err(),
                    reference.as_ref().err()
                ),
            }
        }
    }
}
