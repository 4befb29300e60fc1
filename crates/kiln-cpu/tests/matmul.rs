//! MatMul kernels against the reference: dtypes, batch broadcasting (stride 0), transposed
//! and reversed views, epilogues, empty dimensions.

mod common;

use common::*;
use kiln_compiler::{Input, KernelKind, Program};
use kiln_ir::build::{self, SliceArg};
use kiln_ir::{BinaryOp, DType, HostData, NodeRef, Scalar, Shape, UnaryOp};

/// One operand: data of shape `base` viewed through `ops` as `[.., rows, cols]`, and the
/// same view built for the reference.
struct Op {
    data: HostData,
    base: Vec<usize>,
    ops: Vec<VOp>,
}

impl Op {
    fn plain(data: HostData, shape: &[usize]) -> Op {
        Op {
            data,
            base: shape.to_vec(),
            ops: vec![],
        }
    }
    fn input(&self, pb: &mut Pb) -> Input {
        pb.param(self.data.clone(), &self.base, &self.ops)
    }
    fn node(&self) -> NodeRef {
        let mut n = node(self.data.clone(), &self.base);
        for o in &self.ops {
            n = match o {
                VOp::Permute(p) => {
                    build::permute(&n, &p.iter().map(|&a| a as isize).collect::<Vec<_>>()).unwrap()
                }
                VOp::Reshape(t) => {
                    build::reshape(&n, &t.iter().map(|&a| a as isize).collect::<Vec<_>>()).unwrap()
                }
                VOp::Broadcast(t) => build::broadcast_to(&n, &Shape::from(t.clone())).unwrap(),
                VOp::Slice(start, step, shape) => {
                    let args: Vec<SliceArg> = start
                        .iter()
                        .zip(step)
                        .zip(shape)
                        .map(|((&a, &s), &len)| {
                            let stop = a + s * len as i64;
                            SliceArg::range(
                                Some(a as isize),
                                (stop >= 0).then_some(stop as isize),
                                s as isize,
                            )
                        })
                        .collect();
                    build::slice(&n, &args).unwrap()
                }
            };
        }
        n
    }
}

fn matmul_case(a: Op, b: Op, epilogue: Option<(Program, Vec<Op>, NodeRef)>, rtol: f64) {
    let (an, bn) = (a.node(), b.node());
    let want = build::matmul(&an, &bn).unwrap();
    let space: Vec<usize> = want.shape().dims().to_vec();
    let dt = want.dtype();
    let mut pb = Pb::new();
    let mut inputs = vec![a.input(&mut pb), b.input(&mut pb)];
    let (program, want) = match epilogue {
        None => (None, want),
        Some((p, extra, w)) => {
            inputs.extend(extra.iter().map(|o| o.input(&mut pb)));
            (Some(p), w)
        }
    };
    let out_dt = want.dtype();
    let o = pb.kernel(
        KernelKind::MatMul { epilogue: program },
        &space,
        inputs,
        &[(out_dt, &space)],
    );
    pb.output(o[0]);
    // Float products with cancellation: an absolute tolerance for terms of size O(1).
    let atol = match dt {
        DType::F32 => 1e-5,
        DType::F64 => 1e-12,
        _ => 0.0,
    };
    check_abs(pb, &[&want], rtol, atol);
}

#[test]
fn plain_products_in_every_dtype() {
    for (m, k, n) in [(3, 4, 5), (1, 7, 1), (17, 33, 9), (64, 70, 66)] {
        matmul_case(
            Op::plain(f32s(m * k, 1), &[m, k]),
            Op::plain(f32s(k * n, 2), &[k, n]),
            None,
            1e-5,
        );
        matmul_case(
            Op::plain(f64s(m * k, 1), &[m, k]),
            Op::plain(f64s(k * n, 2), &[k, n]),
            None,
            1e-12,
        );
        matmul_case(
            Op::plain(i32s(m * k, 3, 1 << 20), &[m, k]),
            Op::plain(i32s(k * n, 4, 1 << 20), &[k, n]),
            None,
            0.0,
        );
        matmul_case(
            Op::plain(i64s(m * k, 3, 1 << 40), &[m, k]),
            Op::plain(i64s(k * n, 4, 1 << 40), &[k, n]),
            None,
            0.0,
        );
    }
}

#[test]
fn transposed_and_reversed_views() {
    let (m, k, n) = (6, 5, 7);
    // a^T given as [k, m] permuted; b given as [n, k] permuted.
    let at = Op {
        data: f32s(m * k, 5),
        base: vec![k, m],
        ops: vec![VOp::Permute(vec![1, 0])],
    };
    let bt = Op {
        data: f32s(k * n, 6),
        base: vec![n, k],
        ops: vec![VOp::Permute(vec![1, 0])],
    };
    matmul_case(at, bt, None, 1e-5);
    // Reversed rows of a (negative row stride) and every other column of b reversed.
    let ar = Op {
        data: f64s(m * k, 7),
        base: vec![m, k],
        ops: vec![VOp::Slice(vec![5, 0], vec![-1, 1], vec![m, k])],
    };
    let br = Op {
        data: f64s(k * 2 * n, 8),
        base: vec![k, 2 * n],
        ops: vec![VOp::Slice(
            vec![0, 2 * n as i64 - 1],
            vec![1, -2],
            vec![k, n],
        )],
    };
    matmul_case(ar, br, None, 1e-12);
    // Integer operands through the same views.
    let ai = Op {
        data: i64s(m * k, 9, 100),
        base: vec![k, m],
        ops: vec![VOp::Permute(vec![1, 0])],
    };
    let bi = Op {
        data: i64s(k * n, 10, 100),
        base: vec![k, n],
        ops: vec![VOp::Slice(vec![4, 0], vec![-1, 1], vec![k, n])],
    };
    matmul_case(ai, bi, None, 0.0);
}

#[test]
fn batched_with_broadcast_batch_dims() {
    let (bt, m, k, n) = (4, 3, 5, 2);
    // a: [4, 3, 5]; b: [1, 5, 2] broadcast to [4, 5, 2] (batch stride 0).
    let a = Op::plain(f32s(bt * m * k, 11), &[bt, m, k]);
    let b = Op {
        data: f32s(k * n, 12),
        base: vec![1, k, n],
        ops: vec![VOp::Broadcast(vec![bt, k, n])],
    };
    matmul_case(a, b, None, 1e-5);
    // Two batch dims, a broadcast along the first, b along the second, b transposed.
    let a = Op {
        data: f64s(3 * m * k, 13),
        base: vec![1, 3, m, k],
        ops: vec![VOp::Broadcast(vec![2, 3, m, k])],
    };
    let b = Op {
        data: f64s(2 * k * n, 14),
        base: vec![2, 1, n, k],
        ops: vec![
            VOp::Permute(vec![0, 1, 3, 2]),
            VOp::Broadcast(vec![2, 3, k, n]),
        ],
    };
    matmul_case(a, b, None, 1e-12);
    let a = Op::plain(i32s(bt * m * k, 15, 1000), &[bt, m, k]);
    let b = Op {
        data: i32s(k * n, 16, 1000),
        base: vec![1, k, n],
        ops: vec![VOp::Broadcast(vec![bt, k, n])],
    };
    matmul_case(a, b, None, 0.0);
}

#[test]
fn epilogue_with_bias_relu_and_cast() {
    // out = f64(relu(a @ b + bias)) with bias [n] broadcast over [m, n].
    let (m, k, n) = (40, 30, 50);
    let (a, b) = (
        Op::plain(f32s(m * k, 17), &[m, k]),
        Op::plain(f32s(k * n, 18), &[k, n]),
    );
    let bias = Op {
        data: f32s(n, 19),
        base: vec![n],
        ops: vec![VOp::Reshape(vec![1, n]), VOp::Broadcast(vec![m, n])],
    };
    let mut p = P::new();
    let acc = p.acc(DType::F32);
    let bi = p.load(2, DType::F32);
    let s = p.bin(BinaryOp::Add, acc, bi);
    let r = p.un(UnaryOp::Relu, s);
    let c = p.cast(r, DType::F64);
    let mm = build::matmul(&a.node(), &b.node()).unwrap();
    let s = build::binary(BinaryOp::Add, &mm, &bias.node()).unwrap();
    let want = build::cast(&build::unary(UnaryOp::Relu, &s).unwrap(), DType::F64);
    matmul_case(a, b, Some((p.done(&[c]), vec![bias], want)), 1e-5);
}

#[test]
fn epilogue_written_in_place_over_its_addend() {
    // c = a @ b + c, the output reusing c's buffer (the addend is read in place).
    let (m, k, n) = (20, 8, 70);
    let (ad, bd, cd) = (f64s(m * k, 20), f64s(k * n, 21), f64s(m * n, 22));
    let mut pb = Pb::new();
    let ci = pb.param(cd.clone(), &[m, n], &[]);
    let c0 = pb.kernel(
        KernelKind::Elementwise {
            program: load_only(DType::F64),
        },
        &[m, n],
        vec![ci],
        &[(DType::F64, &[m, n])],
    )[0];
    let inputs = vec![
        pb.param(ad.clone(), &[m, k], &[]),
        pb.param(bd.clone(), &[k, n], &[]),
        pb.slot(c0, &[]),
    ];
    let mut p = P::new();
    let acc = p.acc(DType::F64);
    let c = p.load(2, DType::F64);
    let s = p.bin(BinaryOp::Add, acc, c);
    let out = pb.kernel_over(
        KernelKind::MatMul {
            epilogue: Some(p.done(&[s])),
        },
        &[m, n],
        inputs,
        (DType::F64, &[m, n]),
        c0,
    );
    pb.output(out);
    let mm = build::matmul(&node(ad, &[m, k]), &node(bd, &[k, n])).unwrap();
    let want = build::binary(BinaryOp::Add, &mm, &node(cd, &[m, n])).unwrap();
    check(pb, &[&want], 1e-12);
}

#[test]
fn operand_aliased_with_the_output_is_read_before_it_is_overwritten() {
    // s0 = x (square), then s1 = s0 @ y written over s0's buffer.
    let n = 24;
    let (xd, yd) = (f32s(n * n, 23), f32s(n * n, 24));
    let mut pb = Pb::new();
    let xi = pb.param(xd.clone(), &[n, n], &[]);
    let s0 = pb.kernel(
        KernelKind::Elementwise {
            program: load_only(DType::F32),
        },
        &[n, n],
        vec![xi],
        &[(DType::F32, &[n, n])],
    )[0];
    let inputs = vec![pb.slot(s0, &[]), pb.param(yd.clone(), &[n, n], &[])];
    let out = pb.kernel_over(
        KernelKind::MatMul { epilogue: None },
        &[n, n],
        inputs,
        (DType::F32, &[n, n]),
        s0,
    );
    pb.output(out);
    let want = build::matmul(&node(xd, &[n, n]), &node(yd, &[n, n])).unwrap();
    check(pb, &[&want], 1e-5);
}

#[test]
fn empty_dimensions() {
    // k = 0: zeros; m = 0 or n = 0: empty output.
    matmul_case(
        Op::plain(HostData::from(Vec::<f32>::new()), &[3, 0]),
        Op::plain(HostData::from(Vec::<f32>::new()), &[0, 4]),
        None,
        0.0,
    );
    matmul_case(
        Op::plain(HostData::from(Vec::<i64>::new()), &[3, 0]),
        Op::plain(HostData::from(Vec::<i64>::new()), &[0, 2]),
        None,
        0.0,
    );
    matmul_case(
        Op::plain(HostData::from(Vec::<f64>::new()), &[0, 3]),
        Op::plain(f64s(6, 1), &[3, 2]),
        None,
        0.0,
    );
    let b = Op {
        data: f64s(6, 1),
        base: vec![1, 3, 2],
        ops: vec![VOp::Broadcast(vec![2, 3, 2])],
    };
    matmul_case(
        Op::plain(HostData::from(Vec::<f64>::new()), &[2, 0, 3]),
        b,
        None,
        0.0,
    );
}

#[test]
fn bool_product_is_or_of_ands() {
    // The builders lower bool matmul to i64; the kernel also accepts bool directly.
    let (ad, bd) = (bools(12, 25), bools(20, 26));
    let mut pb = Pb::new();
    let inputs = vec![
        pb.param(ad.clone(), &[3, 4], &[]),
        pb.param(bd.clone(), &[4, 5], &[]),
    ];
    let o = pb.kernel(
        KernelKind::MatMul { epilogue: None },
        &[3, 5],
        inputs,
        &[(DType::Bool, &[3, 5])],
    );
    pb.output(o[0]);
    let want = build::matmul(&node(ad, &[3, 4]), &node(bd, &[4, 5])).unwrap();
    assert_eq!(want.dtype(), DType::Bool);
    check(pb, &[&want], 0.0);
}

#[test]
fn scalar_in_an_epilogue() {
    let (m, k, n) = (2, 3, 4);
    let (a, b) = (
        Op::plain(f64s(m * k, 27), &[m, k]),
        Op::plain(f64s(k * n, 28), &[k, n]),
    );
    let mut pb = Pb::new();
    let sc = pb.scalar(Scalar::Float(0.25));
    let inputs = vec![a.input(&mut pb), b.input(&mut pb)];
    let mut p = P::new();
    let acc = p.acc(DType::F64);
    let s = p.scalar(sc, DType::F64);
    let r = p.bin(BinaryOp::Mul, acc, s);
    let o = pb.kernel(
        KernelKind::MatMul {
            epilogue: Some(p.done(&[r])),
        },
        &[m, n],
        inputs,
        &[(DType::F64, &[m, n])],
    );
    pb.output(o[0]);
    let want = build::binary_scalar(
        BinaryOp::Mul,
        &build::matmul(&a.node(), &b.node()).unwrap(),
        Scalar::Float(0.25),
        false,
    )
    .unwrap();
    check(pb, &[&want], 1e-12);
}
