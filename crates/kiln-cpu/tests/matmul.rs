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

/// An epilogue over the product `a`, one addend `l` (input 2) and the scalar `s`.
#[derive(Clone, Copy, Debug)]
enum Form {
    // affine: run inside the GEMM as C = α·A@B + β·L (matrixmultiply's or the small GEMM's)
    APlusL,
    LPlusA,
    LMinusAs,
    AsMinusL,
    SaPlusL,
    NegAPlusL,
    As,
    AMinusL,
    // an affine part, then more run over the GEMM's output in place
    ReluAPlusL,
    SquareOfAPlusL,
    WhereAPlusLGtS,
    // not affine in one GEMM call: the general epilogue
    APlusLTimesA,
    ATimesL,
    APlusLPlusL,
    AssTwice,
    APlusS,
}

impl Form {
    const ALL: [Form; 16] = [
        Form::ReluAPlusL,
        Form::SquareOfAPlusL,
        Form::WhereAPlusLGtS,
        Form::APlusLTimesA,
        Form::APlusL,
        Form::LPlusA,
        Form::LMinusAs,
        Form::AsMinusL,
        Form::SaPlusL,
        Form::NegAPlusL,
        Form::As,
        Form::AMinusL,
        Form::ATimesL,
        Form::APlusLPlusL,
        Form::AssTwice,
        Form::APlusS,
    ];

    /// The epilogue program (scalar table entry `sc`).
    fn program(self, dt: DType, sc: u32) -> Program {
        use BinaryOp::*;
        let mut p = P::new();
        let a = p.acc(dt);
        let l = p.load(2, dt);
        let s = p.scalar(sc, dt);
        let r = match self {
            Form::APlusL => p.bin(Add, a, l),
            Form::LPlusA => p.bin(Add, l, a),
            Form::LMinusAs => {
                let t = p.bin(Mul, a, s);
                p.bin(Sub, l, t)
            }
            Form::AsMinusL => {
                let t = p.bin(Mul, a, s);
                p.bin(Sub, t, l)
            }
            Form::SaPlusL => {
                let t = p.bin(Mul, s, a);
                p.bin(Add, t, l)
            }
            Form::NegAPlusL => {
                let t = p.un(UnaryOp::Neg, a);
                p.bin(Add, t, l)
            }
            Form::As => p.bin(Mul, a, s),
            Form::AMinusL => p.bin(Sub, a, l),
            Form::ReluAPlusL => {
                let t = p.bin(Add, a, l);
                p.un(UnaryOp::Relu, t)
            }
            Form::SquareOfAPlusL => {
                let t = p.bin(Add, a, l);
                p.bin(Mul, t, t)
            }
            Form::WhereAPlusLGtS => {
                let t = p.bin(Add, a, l);
                let c = p.bin(Gt, t, s);
                p.wh(c, t, s)
            }
            Form::APlusLTimesA => {
                let t = p.bin(Add, a, l);
                p.bin(Mul, t, a)
            }
            Form::ATimesL => p.bin(Mul, a, l),
            Form::APlusLPlusL => {
                let t = p.bin(Add, a, l);
                p.bin(Add, t, l)
            }
            Form::AssTwice => {
                let t = p.bin(Mul, a, s);
                p.bin(Mul, t, s)
            }
            Form::APlusS => p.bin(Add, a, s),
        };
        p.done(&[r])
    }

    /// The same expression for the reference evaluator.
    fn node(self, a: &NodeRef, l: &NodeRef, s: f64) -> NodeRef {
        use BinaryOp::*;
        let bin = |op, x: &NodeRef, y: &NodeRef| build::binary(op, x, y).unwrap();
        let sc = |op, x: &NodeRef, rev: bool| {
            build::binary_scalar(op, x, Scalar::Float(s), rev).unwrap()
        };
        match self {
            Form::APlusL => bin(Add, a, l),
            Form::LPlusA => bin(Add, l, a),
            Form::LMinusAs => bin(Sub, l, &sc(Mul, a, false)),
            Form::AsMinusL => bin(Sub, &sc(Mul, a, false), l),
            Form::SaPlusL => bin(Add, &sc(Mul, a, true), l),
            Form::NegAPlusL => bin(Add, &build::unary(UnaryOp::Neg, a).unwrap(), l),
            Form::As => sc(Mul, a, false),
            Form::AMinusL => bin(Sub, a, l),
            Form::ReluAPlusL => build::unary(UnaryOp::Relu, &bin(Add, a, l)).unwrap(),
            Form::SquareOfAPlusL => {
                let t = bin(Add, a, l);
                bin(Mul, &t, &t)
            }
            Form::WhereAPlusLGtS => {
                let t = bin(Add, a, l);
                let s = build::scalar(Scalar::Float(s), t.dtype());
                let c = build::binary(Gt, &t, &s).unwrap();
                build::where_(&c, &t, &s).unwrap()
            }
            Form::APlusLTimesA => bin(Mul, &bin(Add, a, l), a),
            Form::ATimesL => bin(Mul, a, l),
            Form::APlusLPlusL => bin(Add, &bin(Add, a, l), l),
            Form::AssTwice => sc(Mul, &sc(Mul, a, false), false),
            Form::APlusS => sc(Add, a, false),
        }
    }
}

/// One matmul kernel over `shape` computing `form(a @ b, l, s)`, and the same expression
/// for the reference evaluator.
fn form_plan(
    form: Form,
    dt: DType,
    (a, b, l): (&Op, &Op, &Op),
    s: f64,
    shape: &[usize],
) -> (Pb, NodeRef) {
    let mm = build::matmul(&a.node(), &b.node()).unwrap();
    let want = form.node(&mm, &l.node(), s);
    let mut pb = Pb::new();
    let sc = pb.scalar(Scalar::Float(s));
    let inputs = vec![a.input(&mut pb), b.input(&mut pb), l.input(&mut pb)];
    let o = pb.kernel(
        KernelKind::MatMul {
            epilogue: Some(form.program(dt, sc)),
        },
        shape,
        inputs,
        &[(dt, shape)],
    );
    pb.output(o[0]);
    (pb, want)
}

#[test]
fn affine_epilogues_equal_the_reference() {
    // Every form, f32 and f64, with the addend as a broadcast bias row, a full matrix, a
    // transposed view (copied into the output first) and the first columns of a wider array
    // (the others read in place by the GEMM's stores), over a product above the small-GEMM
    // bounds (k·n = 4224 > 64·64: the affine ones run inside matrixmultiply's
    // C = α·A@B + β·C, or at AVX-512 in the blocked form from 128 columns and 64 steps) and
    // below them, batched, with a leftover row and a column tail (inside the small GEMM's
    // store), and with one column.
    let mut seed = 100;
    for &(batch, m, k, n) in &[
        (1, 176, 24, 176),
        (1, 130, 70, 130),
        (1, 48, 40, 48),
        (1, 45, 33, 70),
        (2, 40, 33, 40),
        (1, 4, 3, 4),
        (2, 5, 7, 1),
    ] {
        for dt in [DType::F32, DType::F64] {
            for form in Form::ALL {
                for addend in 0..4 {
                    if addend == 2 && m != n {
                        continue;
                    }
                    seed += 10;
                    let data = |len: usize, sd: u64| match dt {
                        DType::F32 => f32s(len, sd),
                        _ => f64s(len, sd),
                    };
                    let (a, b) = (
                        Op::plain(data(batch * m * k, seed), &[batch, m, k]),
                        Op::plain(data(batch * k * n, seed + 1), &[batch, k, n]),
                    );
                    let l = match addend {
                        0 => Op {
                            data: data(n, seed + 2),
                            base: vec![n],
                            ops: vec![
                                VOp::Reshape(vec![1, 1, n]),
                                VOp::Broadcast(vec![batch, m, n]),
                            ],
                        },
                        1 => Op::plain(data(batch * m * n, seed + 2), &[batch, m, n]),
                        // m == n: the transpose of a [batch, n, m] array
                        2 => Op {
                            data: data(batch * m * n, seed + 2),
                            base: vec![batch, n, m],
                            ops: vec![VOp::Permute(vec![0, 2, 1])],
                        },
                        _ => Op {
                            data: data(batch * m * (n + 3), seed + 2),
                            base: vec![batch, m, n + 3],
                            ops: vec![VOp::Slice(vec![0, 0, 1], vec![1, 1, 1], vec![batch, m, n])],
                        },
                    };
                    let (pb, want) = form_plan(form, dt, (&a, &b, &l), -0.37, &[batch, m, n]);
                    let (rtol, atol) = if dt == DType::F32 {
                        (1e-5, 1e-5)
                    } else {
                        (1e-12, 1e-12)
                    };
                    let got = pb.run().unwrap();
                    let w = reference(&[&want]).unwrap();
                    eprintln!("{form:?} {dt} addend {addend} {batch}x{m}x{k}x{n}");
                    assert_close_abs(&got, &w, rtol, atol);
                }
            }
        }
    }
}

#[test]
fn affine_epilogue_in_place_over_its_addend() {
    // w = w - s * (a @ b) with the output in w's buffer (an SGD step): the addend is already
    // in C, so the GEMM accumulates onto it; and the same with the addend transposed (read
    // through a snapshot, since the output overwrites it). Every other form too: those whose
    // epilogue reads the addend after the product is written (`(a + l) + l`) must not
    // compute the product over it first. One shape for matrixmultiply, one for the small GEMM.
    let cases = Form::ALL
        .into_iter()
        .flat_map(|f| [(f, false), (f, true)])
        .flat_map(|c| [(c, (176, 24, 176)), (c, (48, 40, 48))]);
    for ((form, transposed), (m, k, n)) in cases {
        let (ad, bd, wd) = (f32s(m * k, 30), f32s(k * n, 31), f32s(m * n, 32));
        let mut pb = Pb::new();
        let sc = pb.scalar(Scalar::Float(0.01));
        let wi = pb.param(wd.clone(), &[m, n], &[]);
        let w0 = pb.kernel(
            KernelKind::Elementwise {
                program: load_only(DType::F32),
            },
            &[m, n],
            vec![wi],
            &[(DType::F32, &[m, n])],
        )[0];
        let view = if transposed {
            vec![VOp::Permute(vec![1, 0])]
        } else {
            vec![]
        };
        let inputs = vec![
            pb.param(ad.clone(), &[m, k], &[]),
            pb.param(bd.clone(), &[k, n], &[]),
            pb.slot(w0, &view),
        ];
        let out = pb.kernel_over(
            KernelKind::MatMul {
                epilogue: Some(form.program(DType::F32, sc)),
            },
            &[m, n],
            inputs,
            (DType::F32, &[m, n]),
            w0,
        );
        pb.output(out);
        let mut wn = node(wd, &[m, n]);
        if transposed {
            wn = build::permute(&wn, &[1, 0]).unwrap();
        }
        let mm = build::matmul(&node(ad, &[m, k]), &node(bd, &[k, n])).unwrap();
        let want = form.node(&mm, &wn, 0.01);
        eprintln!("{form:?} transposed {transposed} {m}x{k}x{n}");
        check_abs(pb, &[&want], 1e-5, 1e-5);
    }
}

#[test]
fn products_split_over_threads_equal_the_reference() {
    // Above the parallel bound the rows are split into one `matrixmultiply` call per thread
    // (uneven blocks here: 130 rows over 3 threads), plain and with every epilogue form (the
    // addend prefilled into each block's rows, the rest run over them), through a transposed
    // left operand, batched.
    let team = kiln_cpu::Team::new(3);
    team.install(|| {
        let (batch, m, k, n) = (2, 130, 150, 120);
        for dt in [DType::F32, DType::F64] {
            let data = |len: usize, sd: u64| match dt {
                DType::F32 => f32s(len, sd),
                _ => f64s(len, sd),
            };
            let a = Op {
                data: data(batch * k * m, 60),
                base: vec![batch, k, m],
                ops: vec![VOp::Permute(vec![0, 2, 1])],
            };
            let b = Op::plain(data(batch * k * n, 61), &[batch, k, n]);
            // f32: sums of 150 products, then squared by one form (twice the relative error).
            let rtol = if dt == DType::F32 { 5e-5 } else { 1e-12 };
            matmul_case(
                Op {
                    data: a.data.clone(),
                    base: a.base.clone(),
                    ops: a.ops.clone(),
                },
                Op::plain(b.data.clone(), &[batch, k, n]),
                None,
                rtol,
            );
            // Every form: the affine part in the GEMM, the rest (or the whole epilogue) over
            // each thread's block of rows as soon as it is computed.
            for form in Form::ALL {
                let l = Op::plain(data(batch * m * n, 62), &[batch, m, n]);
                let (pb, want) = form_plan(form, dt, (&a, &b, &l), 0.5, &[batch, m, n]);
                eprintln!("{form:?} {dt}");
                check_abs(pb, &[&want], rtol, rtol);
            }
        }
        // Products of the small GEMM's forms split too when their stores make them long
        // enough: few steps (the broadcast form), few columns with rows read in place (dot
        // products), few columns with a transposed left operand (the transposed form),
        // with a bias row read in place and the rest of every epilogue form.
        for (m, k, n, transposed) in [
            (130, 10, 520, false),
            (260, 520, 10, false),
            (520, 260, 10, true),
        ] {
            let a = if transposed {
                Op {
                    data: f32s(k * m, 70),
                    base: vec![k, m],
                    ops: vec![VOp::Permute(vec![1, 0])],
                }
            } else {
                Op::plain(f32s(m * k, 70), &[m, k])
            };
            let b = Op::plain(f32s(k * n, 71), &[k, n]);
            let l = Op {
                data: f32s(n, 72),
                base: vec![n],
                ops: vec![VOp::Reshape(vec![1, n]), VOp::Broadcast(vec![m, n])],
            };
            for form in Form::ALL {
                let (pb, want) = form_plan(form, DType::F32, (&a, &b, &l), -0.25, &[m, n]);
                eprintln!("{form:?} small {m}x{k}x{n} transposed {transposed}");
                check_abs(pb, &[&want], 1e-4, 1e-4);
            }
        }
    });
}
