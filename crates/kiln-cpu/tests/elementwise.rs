//! Elementwise kernels against the reference: fused programs, every kind of strided view,
//! in-place aliasing, virtual sources, integer errors, empty spaces.

mod common;

use common::*;
use kiln_compiler::KernelKind;
use kiln_compiler::{InputId, RegId};
use kiln_ir::build::{self, SliceArg};
use kiln_ir::{BinaryOp, DType, Distribution, Error, HostData, Id, Scalar, Shape, UnaryOp};

fn ew(program: kiln_compiler::Program) -> KernelKind {
    KernelKind::Elementwise { program }
}

#[test]
fn fused_program_with_two_results() {
    // z = exp(x) * y + 0.5; w = where(x < y, cast_i32(x * 10), -1)
    let dims = [37, 61]; // crosses block boundaries
    let n = 37 * 61;
    let (xd, yd) = (f32s(n, 1), f32s(n, 2));
    let mut pb = Pb::new();
    let half = pb.scalar(Scalar::Float(0.5));
    let ten = pb.scalar(Scalar::Float(10.0));
    let m1 = pb.scalar(Scalar::Int(-1));
    let xi = pb.param(xd.clone(), &dims, &[]);
    let yi = pb.param(yd.clone(), &dims, &[]);
    let mut p = P::new();
    let x = p.load(0, DType::F32);
    let y = p.load(1, DType::F32);
    let e = p.un(UnaryOp::Exp, x);
    let ey = p.bin(BinaryOp::Mul, e, y);
    let h = p.scalar(half, DType::F32);
    let z = p.bin(BinaryOp::Add, ey, h);
    let lt = p.bin(BinaryOp::Lt, x, y);
    let t = p.scalar(ten, DType::F32);
    let xt = p.bin(BinaryOp::Mul, x, t);
    let xi32 = p.cast(xt, DType::I32);
    let neg = p.scalar(m1, DType::I32);
    let w = p.wh(lt, xi32, neg);
    let outs = pb.kernel(
        ew(p.done(&[z, w])),
        &dims,
        vec![xi, yi],
        &[(DType::F32, &dims), (DType::I32, &dims)],
    );
    pb.output(outs[0]);
    pb.output(outs[1]);

    let (xn, yn) = (node(xd, &dims), node(yd, &dims));
    let e = build::unary(UnaryOp::Exp, &xn).unwrap();
    let ey = build::binary(BinaryOp::Mul, &e, &yn).unwrap();
    let z = build::binary_scalar(BinaryOp::Add, &ey, Scalar::Float(0.5), false).unwrap();
    let lt = build::binary(BinaryOp::Lt, &xn, &yn).unwrap();
    let xt = build::binary_scalar(BinaryOp::Mul, &xn, Scalar::Float(10.0), false).unwrap();
    let xi32 = build::cast(&xt, DType::I32);
    let w = build::where_(&lt, &xi32, &build::scalar(Scalar::Int(-1), DType::I32)).unwrap();
    // exp is within 1 ulp (vmath), and `exp(x) * y + 0.5` cancels near zero: absolute
    // tolerance of a few ulp of 0.5.
    check_abs(pb, &[&z, &w], 1e-6, 1e-6);
}

#[test]
fn every_binary_and_unary_op_in_every_dtype() {
    let n = 1500;
    for dt in [DType::F32, DType::F64, DType::I32, DType::I64] {
        let (a, b) = match dt {
            DType::F32 => (f32s(n, 3), f32s(n, 4)),
            DType::F64 => (f64s(n, 3), f64s(n, 4)),
            DType::I32 => (i32s(n, 3, 50), i32s(n, 4, 9)),
            _ => (i64s(n, 3, 1 << 40), i64s(n, 4, 9)),
        };
        for op in kiln_ir::BinaryOp::ALL {
            if op == BinaryOp::Div && dt.is_int() {
                continue;
            }
            // Integer ops that fail on zero / negative operands get positive divisors.
            let b = if dt.is_int()
                && matches!(op, BinaryOp::FloorDiv | BinaryOp::Rem | BinaryOp::Pow)
            {
                HostData::from_scalars(dt, (0..n).map(|i| Scalar::Int((i % 7 + 1) as i64)))
            } else {
                b.clone()
            };
            let mut pb = Pb::new();
            let ai = pb.param(a.clone(), &[n], &[]);
            let bi = pb.param(b.clone(), &[n], &[]);
            let mut p = P::new();
            let x = p.load(0, dt);
            let y = p.load(1, dt);
            let (x, y) = if op.is_predicate() && !op.is_comparison() {
                (p.cast(x, DType::Bool), p.cast(y, DType::Bool))
            } else {
                (x, y)
            };
            let r = p.bin(op, x, y);
            let rdt = p.insts[r].dtype;
            let o = pb.kernel(ew(p.done(&[r])), &[n], vec![ai, bi], &[(rdt, &[n])]);
            pb.output(o[0]);
            let want = build::binary(op, &node(a.clone(), &[n]), &node(b, &[n])).unwrap();
            check(pb, &[&want], 2e-6);
        }
        for op in kiln_ir::UnaryOp::ALL {
            if dt.is_int() && op.is_float_valued() {
                continue;
            }
            let mut pb = Pb::new();
            let ai = pb.param(a.clone(), &[n], &[]);
            let mut p = P::new();
            let x = p.load(0, dt);
            let x = if op == UnaryOp::LogicalNot {
                p.cast(x, DType::Bool)
            } else {
                x
            };
            let r = p.un(op, x);
            let rdt = p.insts[r].dtype;
            let o = pb.kernel(ew(p.done(&[r])), &[n], vec![ai], &[(rdt, &[n])]);
            pb.output(o[0]);
            let want = build::unary(op, &node(a.clone(), &[n])).unwrap();
            check(pb, &[&want], 2e-6);
        }
    }
}

#[test]
fn strided_views_permute_broadcast_slice_reshape() {
    // out[i, j] = t[j, i] + b[0, j] + s[5 - 2i, 3 - j] + r[i*4 + j]   over space [3, 4]
    let space = [3, 4];
    let (td, bd, sd, rd) = (f64s(12, 5), f64s(4, 6), f64s(24, 7), f64s(12, 8));
    let mut pb = Pb::new();
    let t = pb.param(td.clone(), &[4, 3], &[VOp::Permute(vec![1, 0])]);
    let b = pb.param(bd.clone(), &[1, 4], &[VOp::Broadcast(vec![3, 4])]);
    let s = pb.param(
        sd.clone(),
        &[6, 4],
        &[VOp::Slice(vec![5, 3], vec![-2, -1], vec![3, 4])],
    );
    let r = pb.param(rd.clone(), &[12], &[VOp::Reshape(vec![3, 4])]);
    let mut p = P::new();
    let v: Vec<_> = (0..4).map(|i| p.load(i, DType::F64)).collect();
    let a1 = p.bin(BinaryOp::Add, v[0], v[1]);
    let a2 = p.bin(BinaryOp::Add, a1, v[2]);
    let a3 = p.bin(BinaryOp::Add, a2, v[3]);
    let o = pb.kernel(
        ew(p.done(&[a3])),
        &space,
        vec![t, b, s, r],
        &[(DType::F64, &space)],
    );
    pb.output(o[0]);

    let tn = build::permute(&node(td, &[4, 3]), &[1, 0]).unwrap();
    let bn = build::broadcast_to(&node(bd, &[1, 4]), &Shape::from(space)).unwrap();
    let sn = build::slice(
        &node(sd, &[6, 4]),
        &[
            SliceArg::range(Some(5), None, -2),
            SliceArg::range(Some(3), None, -1),
        ],
    )
    .unwrap();
    let rn = build::reshape(&node(rd, &[12]), &[3, 4]).unwrap();
    let a1 = build::binary(BinaryOp::Add, &tn, &bn).unwrap();
    let a2 = build::binary(BinaryOp::Add, &a1, &sn).unwrap();
    let a3 = build::binary(BinaryOp::Add, &a2, &rn).unwrap();
    check(pb, &[&a3], 0.0);
}

#[test]
fn rank_three_views_with_inner_broadcast_and_scalar_input() {
    // out = a.permute(2, 0, 1) * c  with c a rank-0 parameter broadcast to the space
    let space = [5, 2, 3];
    let ad = f32s(30, 9);
    let cd = HostData::from(vec![3.0f32]);
    let mut pb = Pb::new();
    let a = pb.param(ad.clone(), &[2, 3, 5], &[VOp::Permute(vec![2, 0, 1])]);
    let c = pb.param(
        cd.clone(),
        &[],
        &[VOp::Reshape(vec![1, 1, 1]), VOp::Broadcast(space.to_vec())],
    );
    let mut p = P::new();
    let x = p.load(0, DType::F32);
    let y = p.load(1, DType::F32);
    let r = p.bin(BinaryOp::Mul, x, y);
    let o = pb.kernel(
        ew(p.done(&[r])),
        &space,
        vec![a, c],
        &[(DType::F32, &space)],
    );
    pb.output(o[0]);
    let an = build::permute(&node(ad, &[2, 3, 5]), &[2, 0, 1]).unwrap();
    let want = build::binary(BinaryOp::Mul, &an, &node(cd, &[])).unwrap();
    check(pb, &[&want], 0.0);
}

#[test]
fn in_place_over_a_dead_input_across_blocks() {
    // k0: s0 = x * 2 (buffer 0); k1: s1 = s0 + y written over s0's buffer (Arg::Output);
    // k2: s2 = -s1 over the same buffer again.
    let n = 5000;
    let (xd, yd) = (f32s(n, 10), f32s(n, 11));
    let mut pb = Pb::new();
    let two = pb.scalar(Scalar::Float(2.0));
    let x = pb.param(xd.clone(), &[n], &[]);
    let mut p = P::new();
    let l = p.load(0, DType::F32);
    let t = p.scalar(two, DType::F32);
    let r = p.bin(BinaryOp::Mul, l, t);
    let s0 = pb.kernel(ew(p.done(&[r])), &[n], vec![x], &[(DType::F32, &[n])])[0];
    let s0i = pb.slot(s0, &[]);
    let y = pb.param(yd.clone(), &[n], &[]);
    let mut p = P::new();
    let a = p.load(0, DType::F32);
    let b = p.load(1, DType::F32);
    let r = p.bin(BinaryOp::Add, a, b);
    let s1 = pb.kernel_over(ew(p.done(&[r])), &[n], vec![s0i, y], (DType::F32, &[n]), s0);
    let s1i = pb.slot(s1, &[]);
    let mut p = P::new();
    let a = p.load(0, DType::F32);
    let r = p.un(UnaryOp::Neg, a);
    let s2 = pb.kernel_over(ew(p.done(&[r])), &[n], vec![s1i], (DType::F32, &[n]), s1);
    pb.output(s2);

    let xn =
        build::binary_scalar(BinaryOp::Mul, &node(xd, &[n]), Scalar::Float(2.0), false).unwrap();
    let s = build::binary(BinaryOp::Add, &xn, &node(yd, &[n])).unwrap();
    let want = build::unary(UnaryOp::Neg, &s).unwrap();
    check(pb, &[&want], 0.0);
}

/// A kernel with two results, the first written in place over an input that only the
/// second reads: the first result's step comes before that input's load, so it must not
/// be stored straight into the output (the load would then read the new values).
#[test]
fn a_result_computed_before_an_in_place_load_is_not_stored_early() {
    let n = 3000; // crosses blocks
    let (xd, yd) = (f32s(n, 12), f32s(n, 13));
    let mut pb = Pb::new();
    let x = pb.param(xd.clone(), &[n], &[]);
    let mut p = P::new();
    let l = p.load(0, DType::F32);
    let r = p.un(UnaryOp::Neg, l);
    let t = pb.kernel(ew(p.done(&[r])), &[n], vec![x], &[(DType::F32, &[n])])[0];
    let ti = pb.slot(t, &[]);
    let y = pb.param(yd.clone(), &[n], &[]);
    // r0 = y + y (in place over t), r1 = t * t
    let mut p = P::new();
    let a = p.load(0, DType::F32);
    let r0 = p.bin(BinaryOp::Add, a, a);
    let b = p.load(1, DType::F32);
    let r1 = p.bin(BinaryOp::Mul, b, b);
    let s0 = pb.kernel_over(
        ew(p.done(&[r0, r1])),
        &[n],
        vec![y, ti],
        (DType::F32, &[n]),
        t,
    );
    let s1 = pb.new_slot(DType::F32, &[n], None);
    pb.plan.kernels[kiln_compiler::KernelId::new(1)]
        .outputs
        .push(s1);
    pb.output(s0);
    pb.output(s1);

    let yn = node(yd, &[n]);
    let want0 = build::binary(BinaryOp::Add, &yn, &yn).unwrap();
    let tn = build::unary(UnaryOp::Neg, &node(xd, &[n])).unwrap();
    let want1 = build::binary(BinaryOp::Mul, &tn, &tn).unwrap();
    check(pb, &[&want0, &want1], 0.0);
}

/// A per-row broadcast value (`[r, 1]` viewed as `[r, c]`) is one value over a block that
/// lies inside a row: the interpreter then loads it once and runs `+ - * /` against it
/// without a filled register, and repeats it over the block for every other use (a `where`,
/// a unary op, a fused pair, a result). Rows longer than a block, rows that blocks straddle,
/// and rows shorter than the vectors; f32 and f64.
#[test]
fn per_row_broadcast_values_as_uniform_operands() {
    for dtype in [DType::F32, DType::F64] {
        for (rows, cols) in [(3usize, 2500usize), (5, 1000), (700, 3), (2, 1024)] {
            let dims = [rows, cols];
            let (xd, md) = (f32s(rows * cols, 14), f32s(rows, 15));
            let (xd, md) = if dtype == DType::F64 {
                (to_f64(&xd), to_f64(&md))
            } else {
                (xd, md)
            };
            let mut pb = Pb::new();
            let x = pb.param(xd.clone(), &dims, &[]);
            let m = pb.param(md.clone(), &[rows, 1], &[VOp::Broadcast(dims.to_vec())]);
            let mut p = P::new();
            let lx = p.load(0, dtype);
            let lm = p.load(1, dtype);
            let mut results = Vec::new();
            for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
                results.push(p.bin(op, lx, lm));
                results.push(p.bin(op, lm, lx));
            }
            let gt = p.bin(BinaryOp::Gt, lx, lm);
            results.push(p.wh(gt, lm, lx));
            results.push(p.un(UnaryOp::Neg, lm));
            let xm = p.bin(BinaryOp::Mul, lx, lm);
            results.push(p.bin(BinaryOp::Add, xm, lm)); // a fused pair reading m twice
            results.push(lm);
            let outs: Vec<(DType, &[usize])> = results.iter().map(|_| (dtype, &dims[..])).collect();
            let slots = pb.kernel(ew(p.done(&results)), &dims, vec![x, m], &outs);
            for s in slots {
                pb.output(s);
            }

            let xn = node(xd, &dims);
            let mn = build::broadcast_to(&node(md, &[rows, 1]), &Shape::from(dims)).unwrap();
            let mut want = Vec::new();
            for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
                want.push(build::binary(op, &xn, &mn).unwrap());
                want.push(build::binary(op, &mn, &xn).unwrap());
            }
            let gt = build::binary(BinaryOp::Gt, &xn, &mn).unwrap();
            want.push(build::where_(&gt, &mn, &xn).unwrap());
            want.push(build::unary(UnaryOp::Neg, &mn).unwrap());
            let xm = build::binary(BinaryOp::Mul, &xn, &mn).unwrap();
            want.push(build::binary(BinaryOp::Add, &xm, &mn).unwrap());
            want.push(mn.clone());

            let roots: Vec<&kiln_ir::NodeRef> = want.iter().collect();
            check(pb, &roots, 0.0);
        }
    }
}

/// Unary ops of a per-row broadcast value stay uniform over a block (computed on one
/// element): `x * (1 / m)`, a chain `x + exp(-m)`, a bool `isnan(m)` selecting, `sqrt(|m|)`
/// read by a comparison and a `where` (which repeat it over the block), and one stored as a
/// result; rows longer than a block, straddled by blocks, and shorter than the vectors.
#[test]
fn unary_ops_of_per_row_values_stay_uniform() {
    for (rows, cols) in [(3usize, 2500usize), (5, 1000), (700, 3), (2, 1024)] {
        let dims = [rows, cols];
        let xd = f32s(rows * cols, 17);
        let md = HostData::from(
            (0..rows)
                .map(|r| [2.5f32, -0.75, f32::NAN, 0.0, f32::INFINITY][r % 5])
                .collect::<Vec<f32>>(),
        );
        let mut pb = Pb::new();
        let x = pb.param(xd.clone(), &dims, &[]);
        let m = pb.param(md.clone(), &[rows, 1], &[VOp::Broadcast(dims.to_vec())]);
        let mut p = P::new();
        let lx = p.load(0, DType::F32);
        let lm = p.load(1, DType::F32);
        let rm = p.un(UnaryOp::Recip, lm);
        let r0 = p.bin(BinaryOp::Mul, lx, rm);
        let nm = p.un(UnaryOp::Neg, lm);
        let em = p.un(UnaryOp::Exp, nm);
        let r1 = p.bin(BinaryOp::Add, lx, em);
        let nan = p.un(UnaryOp::IsNan, lm);
        let r2 = p.wh(nan, lx, lm);
        let am = p.un(UnaryOp::Abs, lm);
        let sm = p.un(UnaryOp::Sqrt, am);
        let gs = p.bin(BinaryOp::Gt, lx, sm);
        let r3 = p.wh(gs, sm, lx);
        let r4 = p.un(UnaryOp::Square, lm);
        let results = [r0, r1, r2, r3, r4];
        let outs: Vec<(DType, &[usize])> =
            results.iter().map(|_| (DType::F32, &dims[..])).collect();
        let slots = pb.kernel(ew(p.done(&results)), &dims, vec![x, m], &outs);
        for s in slots {
            pb.output(s);
        }
        let xn = node(xd, &dims);
        let mn = build::broadcast_to(&node(md, &[rows, 1]), &Shape::from(dims)).unwrap();
        let un = |op, v: &kiln_ir::NodeRef| build::unary(op, v).unwrap();
        let bin = |op, a: &kiln_ir::NodeRef, b: &kiln_ir::NodeRef| build::binary(op, a, b).unwrap();
        let em = un(UnaryOp::Exp, &un(UnaryOp::Neg, &mn));
        let sm = un(UnaryOp::Sqrt, &un(UnaryOp::Abs, &mn));
        let want = [
            bin(BinaryOp::Mul, &xn, &un(UnaryOp::Recip, &mn)),
            bin(BinaryOp::Add, &xn, &em),
            build::where_(&un(UnaryOp::IsNan, &mn), &xn, &mn).unwrap(),
            build::where_(&bin(BinaryOp::Gt, &xn, &sm), &sm, &xn).unwrap(),
            un(UnaryOp::Square, &mn),
        ];
        let roots: Vec<&kiln_ir::NodeRef> = want.iter().collect();
        // exp within a few ulp (vmath), `x + exp(-m)` cancelling near 0: a few ulp of 1
        // absolute; the other results exact.
        check_abs(pb, &roots, 1e-6, 1e-6);
    }
}

/// A unary op of a `+ - *` with a per-row broadcast operand (`exp(x - m)` of a softmax) runs
/// as one pass in blocks where the operand is uniform, and as two passes in the others
/// (rows that blocks straddle): either way it equals, bit for bit, the same program with the
/// intermediate kept as a second result (which is never fused), and the reference
/// evaluator within the math functions' error. `m` holds ±inf and NaN rows too.
#[test]
fn unary_of_a_uniform_operand_op_equals_its_two_passes() {
    use UnaryOp::*;
    for (rows, cols) in [
        (3usize, 2500usize),
        (5, 1000),
        (700, 3),
        (4, 1024),
        (6, 300),
    ] {
        let dims = [rows, cols];
        let xd = f32s(rows * cols, 16);
        let mut mv: Vec<f32> = (0..rows).map(|r| (r as f32 - 2.0) * 1.25).collect();
        if rows >= 4 {
            mv[1] = f32::INFINITY;
            mv[2] = f32::NEG_INFINITY;
            mv[3] = f32::NAN;
        }
        let md = HostData::from(mv);
        for u in [Exp, Log, Tanh, Sigmoid] {
            for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul] {
                for left in [false, true] {
                    let run = |keep: bool| {
                        let mut pb = Pb::new();
                        let x = pb.param(xd.clone(), &dims, &[]);
                        let m = pb.param(md.clone(), &[rows, 1], &[VOp::Broadcast(dims.to_vec())]);
                        let mut p = P::new();
                        let lx = p.load(0, DType::F32);
                        let lm = p.load(1, DType::F32);
                        let t = if left {
                            p.bin(op, lm, lx)
                        } else {
                            p.bin(op, lx, lm)
                        };
                        let y = p.un(u, t);
                        let results = if keep { vec![y, t] } else { vec![y] };
                        let outs: Vec<(DType, &[usize])> =
                            results.iter().map(|_| (DType::F32, &dims[..])).collect();
                        let slots = pb.kernel(ew(p.done(&results)), &dims, vec![x, m], &outs);
                        pb.output(slots[0]);
                        pb.run().expect("runs").remove(0)
                    };
                    let (one, two) = (run(false), run(true));
                    for i in 0..one.len() {
                        let (Scalar::Float(a), Scalar::Float(b)) = (one.get(i), two.get(i)) else {
                            panic!("f32 results");
                        };
                        assert!(
                            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                            "{u:?} of {op:?} (left {left}), {rows}x{cols}, element {i}: one pass {a}, two passes {b}"
                        );
                    }
                    let xn = node(xd.clone(), &dims);
                    let mn = build::broadcast_to(&node(md.clone(), &[rows, 1]), &Shape::from(dims))
                        .unwrap();
                    let t = if left {
                        build::binary(op, &mn, &xn)
                    } else {
                        build::binary(op, &xn, &mn)
                    }
                    .unwrap();
                    let want = reference(&[&build::unary(u, &t).unwrap()]).expect("reference");
                    // exp/tanh/sigmoid/log of f32 within a few ulp (vmath's bounds); log
                    // near 1 cancels: an absolute tolerance too.
                    assert_close_abs(&[one], &want, 1e-6, 1e-7);
                }
            }
        }
    }
}

fn to_f64(d: &HostData) -> HostData {
    HostData::from(
        (0..d.len())
            .map(|i| d.get(i).as_f64())
            .collect::<Vec<f64>>(),
    )
}

#[test]
fn iota_and_random_sources_through_views() {
    let mut pb = Pb::new();
    // iota along axis 1 of [3, 5] as i64; iota along axis 0 of [5, 3] permuted to [3, 5] as f32;
    // uniform f32, uniform f64, normal f32 over [3, 5] with a reversed slice of a [6, 5] base.
    let space = [3, 5];
    let inputs = vec![
        pb.iota(1, DType::I64, &space, &[]),
        pb.iota(0, DType::F32, &[5, 3], &[VOp::Permute(vec![1, 0])]),
        pb.random(Distribution::Uniform, 7, DType::F32, &space, &[]),
        pb.random(Distribution::Uniform, 8, DType::F64, &space, &[]),
        pb.random(
            Distribution::Normal,
            9,
            DType::F32,
            &[6, 5],
            &[VOp::Slice(vec![5, 0], vec![-2, 1], vec![3, 5])],
        ),
        pb.iota(
            2,
            DType::I32,
            &[2, 3, 5],
            &[
                VOp::Slice(vec![1, 0, 0], vec![1, 1, 1], vec![1, 3, 5]),
                VOp::Reshape(vec![3, 5]),
            ],
        ),
    ];
    let dts = [
        DType::I64,
        DType::F32,
        DType::F32,
        DType::F64,
        DType::F32,
        DType::I32,
    ];
    let mut p = P::new();
    let loads: Vec<RegId> = dts.iter().enumerate().map(|(i, &d)| p.load(i, d)).collect();
    let outs: Vec<(DType, &[usize])> = dts.iter().map(|&d| (d, &space[..])).collect();
    let o = pb.kernel(ew(p.done(&loads)), &space, inputs, &outs);
    for s in o {
        pb.output(s);
    }

    let sh = Shape::from(space);
    let w0 = build::iota(sh.clone(), 1, DType::I64).unwrap();
    let w1 = build::permute(
        &build::iota(Shape::from([5, 3]), 0, DType::F32).unwrap(),
        &[1, 0],
    )
    .unwrap();
    let w2 = build::random(sh.clone(), DType::F32, Distribution::Uniform, 7).unwrap();
    let w3 = build::random(sh.clone(), DType::F64, Distribution::Uniform, 8).unwrap();
    let w4 = build::slice(
        &build::random(Shape::from([6, 5]), DType::F32, Distribution::Normal, 9).unwrap(),
        &[SliceArg::range(Some(5), None, -2)],
    )
    .unwrap();
    let w5 = build::reshape(
        &build::slice(
            &build::iota(Shape::from([2, 3, 5]), 2, DType::I32).unwrap(),
            &[SliceArg::range(Some(1), None, 1)],
        )
        .unwrap(),
        &[3, 5],
    )
    .unwrap();
    check(pb, &[&w0, &w1, &w2, &w3, &w4, &w5], 0.0);
}

#[test]
fn iota_whose_base_sizes_appear_nowhere_else() {
    // iota([4, 6], axis 0)[:, ::2] and iota([5, 6, 4], axis 1)[::2, ::3] permuted: the sizes
    // 5 and 6 are in no resolved shape of the launch, only in the strides of the views.
    let mut pb = Pb::new();
    let a = pb.iota(
        0,
        DType::I64,
        &[4, 6],
        &[VOp::Slice(vec![0, 0], vec![1, 2], vec![4, 3])],
    );
    let b = pb.iota(
        1,
        DType::I32,
        &[5, 6, 4],
        &[
            VOp::Slice(vec![0, 1, 0], vec![2, 3, 1], vec![3, 2, 4]),
            VOp::Permute(vec![2, 0, 1]),
        ],
    );
    let mut p = P::new();
    let x = p.load(0, DType::I64);
    let o = pb.kernel(ew(p.done(&[x])), &[4, 3], vec![a], &[(DType::I64, &[4, 3])]);
    pb.output(o[0]);
    let mut p = P::new();
    let y = p.load(0, DType::I32);
    let o = pb.kernel(
        ew(p.done(&[y])),
        &[4, 3, 2],
        vec![b],
        &[(DType::I32, &[4, 3, 2])],
    );
    pb.output(o[0]);
    let wa = build::slice(
        &build::iota(Shape::from([4, 6]), 0, DType::I64).unwrap(),
        &[
            SliceArg::range(None, None, 1),
            SliceArg::range(None, None, 2),
        ],
    )
    .unwrap();
    let wb = build::slice(
        &build::iota(Shape::from([5, 6, 4]), 1, DType::I32).unwrap(),
        &[
            SliceArg::range(None, None, 2),
            SliceArg::range(Some(1), None, 3),
        ],
    )
    .unwrap();
    let wb = build::permute(&wb, &[2, 0, 1]).unwrap();
    check(pb, &[&wa, &wb], 0.0);
}

fn int_error_case(op: BinaryOp, dt: DType, a: Vec<i64>, b: Vec<i64>) {
    let n = a.len();
    let ad = HostData::from_scalars(dt, a.into_iter().map(Scalar::Int));
    let bd = HostData::from_scalars(dt, b.into_iter().map(Scalar::Int));
    let mut pb = Pb::new();
    let ai = pb.param(ad.clone(), &[n], &[]);
    let bi = pb.param(bd.clone(), &[n], &[]);
    let mut p = P::new();
    let x = p.load(0, dt);
    let y = p.load(1, dt);
    let r = p.bin(op, x, y);
    let o = pb.kernel(ew(p.done(&[r])), &[n], vec![ai, bi], &[(dt, &[n])]);
    pb.output(o[0]);
    let got = pb.run();
    let want = reference(&[&build::binary(op, &node(ad, &[n]), &node(bd, &[n])).unwrap()]);
    assert!(want.is_err(), "the reference fails");
    assert_eq!(got.map(|_| ()), want.map(|_| ()));
}

#[test]
fn integer_errors_name_the_op_and_operand() {
    let mut b = vec![3i64; 3000];
    b[2500] = 0;
    let a: Vec<i64> = (0..3000).map(|i| i - 1000).collect();
    for dt in [DType::I32, DType::I64] {
        int_error_case(BinaryOp::FloorDiv, dt, a.clone(), b.clone());
        int_error_case(BinaryOp::Rem, dt, a.clone(), b.clone());
        let mut e = vec![2i64; 3000];
        e[1700] = -3;
        int_error_case(BinaryOp::Pow, dt, a.clone(), e);
    }
    // The error value itself.
    let mut pb = Pb::new();
    let ai = pb.param(HostData::from(vec![7i64, -9]), &[2], &[]);
    let bi = pb.param(HostData::from(vec![2i64, 0]), &[2], &[]);
    let mut p = P::new();
    let x = p.load(0, DType::I64);
    let y = p.load(1, DType::I64);
    let r = p.bin(BinaryOp::FloorDiv, x, y);
    let o = pb.kernel(ew(p.done(&[r])), &[2], vec![ai, bi], &[(DType::I64, &[2])]);
    pb.output(o[0]);
    assert_eq!(
        pb.run().unwrap_err(),
        Error::DivisionByZero {
            op: "floor_divide",
            dividend: -9,
            dtype: DType::I64
        }
    );
}

#[test]
fn integer_edge_values_wrap_like_the_reference() {
    let vals = [i32::MIN as i64, -7, -1, 0, 1, 7, i32::MAX as i64];
    let n = vals.len() * vals.len();
    let a: Vec<i64> = (0..n).map(|i| vals[i / vals.len()]).collect();
    let b: Vec<i64> = (0..n).map(|i| vals[i % vals.len()]).collect();
    for op in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
    ] {
        for dt in [DType::I32, DType::I64] {
            let ad = HostData::from_scalars(dt, a.iter().map(|&v| Scalar::Int(v)));
            let bd = HostData::from_scalars(dt, b.iter().map(|&v| Scalar::Int(v)));
            let mut pb = Pb::new();
            let ai = pb.param(ad.clone(), &[n], &[]);
            let bi = pb.param(bd.clone(), &[n], &[]);
            let mut p = P::new();
            let x = p.load(0, dt);
            let y = p.load(1, dt);
            let r = p.bin(op, x, y);
            let o = pb.kernel(ew(p.done(&[r])), &[n], vec![ai, bi], &[(dt, &[n])]);
            pb.output(o[0]);
            check(
                pb,
                &[&build::binary(op, &node(ad, &[n]), &node(bd, &[n])).unwrap()],
                0.0,
            );
        }
    }
}

#[test]
fn casts_between_every_dtype() {
    let specials = [
        f64::NAN,
        -0.0,
        0.0,
        0.7,
        -2.9,
        3e9,
        -3e9,
        1e19,
        f64::INFINITY,
        -1.0,
        1.0,
    ];
    for from in DType::ALL {
        let data = HostData::from_scalars(from, specials.iter().map(|&x| Scalar::Float(x)));
        let n = data.len();
        for to in DType::ALL {
            let mut pb = Pb::new();
            let ai = pb.param(data.clone(), &[n], &[]);
            let mut p = P::new();
            let x = p.load(0, from);
            let c = p.cast(x, to);
            let o = pb.kernel(ew(p.done(&[c])), &[n], vec![ai], &[(to, &[n])]);
            pb.output(o[0]);
            check(pb, &[&build::cast(&node(data.clone(), &[n]), to)], 0.0);
        }
    }
}

#[test]
fn declared_dtype_differing_from_the_op_is_converted() {
    // A load declared i64 of an i32 input, and a comparison declared f32: each value is
    // converted to its instruction's dtype.
    let n = 10;
    let ad = i32s(n, 12, 100);
    let mut pb = Pb::new();
    let ai = pb.param(ad.clone(), &[n], &[]);
    let mut p = P::new();
    p.insts.push(kiln_compiler::Inst {
        op: kiln_compiler::InstOp::Load(InputId::new(0)),
        dtype: DType::I64,
    });
    let z = p.scalar(pb.scalar(Scalar::Int(0)), DType::I64);
    p.insts.push(kiln_compiler::Inst {
        op: kiln_compiler::InstOp::Binary(BinaryOp::Gt, RegId::new(0), z),
        dtype: DType::F32,
    });
    let o = pb.kernel(
        ew(p.done(&[RegId::new(0), RegId::new(2)])),
        &[n],
        vec![ai],
        &[(DType::I64, &[n]), (DType::F32, &[n])],
    );
    pb.output(o[0]);
    pb.output(o[1]);
    let an = build::cast(&node(ad, &[n]), DType::I64);
    let gt = build::cast(
        &build::binary_scalar(BinaryOp::Gt, &an, Scalar::Int(0), false).unwrap(),
        DType::F32,
    );
    check(pb, &[&an, &gt], 0.0);
}

#[test]
fn empty_spaces_write_nothing_and_succeed() {
    let mut pb = Pb::new();
    let ai = pb.param(HostData::from(Vec::<i64>::new()), &[0, 3], &[]);
    let bi = pb.param(
        HostData::from(vec![0i64; 3]),
        &[1, 3],
        &[VOp::Broadcast(vec![0, 3])],
    );
    let mut p = P::new();
    let x = p.load(0, DType::I64);
    let y = p.load(1, DType::I64);
    let r = p.bin(BinaryOp::FloorDiv, x, y); // would fail on any element
    let o = pb.kernel(
        ew(p.done(&[r])),
        &[0, 3],
        vec![ai, bi],
        &[(DType::I64, &[0, 3])],
    );
    pb.output(o[0]);
    let out = pb.run().unwrap();
    assert_eq!((out[0].len(), out[0].dtype()), (0, DType::I64));
}

#[test]
fn rank_zero_space() {
    let mut pb = Pb::new();
    let ai = pb.param(HostData::from(vec![2.5f64]), &[], &[]);
    let k = pb.scalar(Scalar::Float(4.0));
    let mut p = P::new();
    let x = p.load(0, DType::F64);
    let s = p.scalar(k, DType::F64);
    let r = p.bin(BinaryOp::Pow, x, s);
    let o = pb.kernel(ew(p.done(&[r])), &[], vec![ai], &[(DType::F64, &[])]);
    pb.output(o[0]);
    let want = build::binary_scalar(
        BinaryOp::Pow,
        &node(HostData::from(vec![2.5f64]), &[]),
        Scalar::Float(4.0),
        false,
    )
    .unwrap();
    check(pb, &[&want], 0.0);
}

/// `n` random floats with every seventh replaced by a special value: infinities, NaN,
/// signed zeros, subnormals (of f64 and of f32), values whose products overflow, 1.
fn with_specials(n: usize, seed: u64) -> Vec<f64> {
    let specials = [
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        0.0,
        -0.0,
        1e-310,
        -3e-39,
        1e30,
        -1e300,
        1.0,
    ];
    let mut v = floats(n, seed);
    for (i, x) in v.iter_mut().enumerate() {
        if (i as u64 + seed).is_multiple_of(7) {
            *x = specials[(i / 7 + seed as usize) % specials.len()];
        }
    }
    v
}

/// `where(x <cmp> y, a, b)` for every comparison, f32 and f64, where the interpreter runs
/// the comparison inside the `where` (one pass): equal to the reference's comparison then
/// selection, over data with NaN, infinities and signed zeros, with `y` a per-row value
/// (a uniform operand materialised for the fused step), `b` a scalar (a ReLU's gradient
/// `where(h > 0, g, 0)`), on a space large enough for the threaded path; and a condition
/// that is also a result (not fused) next to one that is fused.
#[test]
fn fused_compare_selects_equal_the_reference() {
    let (rows, cols) = (97usize, 700usize);
    let dims = [rows, cols];
    for dt in [DType::F32, DType::F64] {
        let host = |v: Vec<f64>| {
            if dt == DType::F32 {
                HostData::from(v.into_iter().map(|x| x as f32).collect::<Vec<_>>())
            } else {
                HostData::from(v)
            }
        };
        let (xd, yd, ad) = (
            host(with_specials(rows * cols, 4)),
            host(with_specials(rows, 5)),
            host(with_specials(rows * cols, 6)),
        );
        for cmp in BinaryOp::ALL.into_iter().filter(|o| o.is_comparison()) {
            let mut pb = Pb::new();
            let zero = pb.scalar(Scalar::Float(0.0));
            let ins = vec![
                pb.param(xd.clone(), &dims, &[]),
                pb.param(yd.clone(), &[rows, 1], &[VOp::Broadcast(dims.to_vec())]),
                pb.param(ad.clone(), &dims, &[]),
            ];
            let mut p = P::new();
            let (x, y, a) = (p.load(0, dt), p.load(1, dt), p.load(2, dt));
            let z = p.scalar(zero, dt);
            let c = p.bin(cmp, x, y);
            let r1 = p.wh(c, a, z);
            // x <cmp> a is also a result: computed on its own, the where reads its mask.
            let kept = p.bin(cmp, x, a);
            let r2 = p.wh(kept, z, x);
            let outs = pb.kernel(
                ew(p.done(&[r1, r2, kept])),
                &dims,
                ins,
                &[(dt, &dims), (dt, &dims), (DType::Bool, &dims)],
            );
            for o in outs {
                pb.output(o);
            }
            let xn = node(xd.clone(), &dims);
            let yn =
                build::broadcast_to(&node(yd.clone(), &[rows, 1]), &Shape::from(dims)).unwrap();
            let an = node(ad.clone(), &dims);
            let zn =
                build::broadcast_to(&build::scalar(Scalar::Float(0.0), dt), &Shape::from(dims))
                    .unwrap();
            let c = build::binary(cmp, &xn, &yn).unwrap();
            let r1 = build::where_(&c, &an, &zn).unwrap();
            let kept = build::binary(cmp, &xn, &an).unwrap();
            let r2 = build::where_(&kept, &zn, &xn).unwrap();
            check(pb, &[&r1, &r2, &kept], 0.0);
        }
    }
}

/// Values of every fused pair of arithmetic ops (`second(first(x, y), z)` and
/// `second(z, first(x, y))`, `+ - * /`, f32 and f64; every ISA level: `tests/vmath.rs`),
/// exactly equal to the reference, over data with infinities, NaN, signed zeros,
/// subnormals and products that overflow; plus a chain of four (two pairs) on a space large
/// enough for the threaded path.
#[test]
fn fused_arithmetic_pairs_round_like_separate_ops() {
    let ops = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];
    let n = 2 * 1024 + 37;
    let data = |seed: u64| with_specials(n, seed);
    {
        for dt in [DType::F32, DType::F64] {
            let host = |seed| {
                let v = data(seed);
                if dt == DType::F32 {
                    HostData::from(v.into_iter().map(|x| x as f32).collect::<Vec<_>>())
                } else {
                    HostData::from(v)
                }
            };
            let (xd, yd, zd) = (host(1), host(2), host(3));
            for first in ops {
                for second in ops {
                    for left in [true, false] {
                        let dims = [n];
                        let mut pb = Pb::new();
                        let ins = vec![
                            pb.param(xd.clone(), &dims, &[]),
                            pb.param(yd.clone(), &dims, &[]),
                            pb.param(zd.clone(), &dims, &[]),
                        ];
                        let mut p = P::new();
                        let (x, y, z) = (p.load(0, dt), p.load(1, dt), p.load(2, dt));
                        let t = p.bin(first, x, y);
                        let r = if left {
                            p.bin(second, t, z)
                        } else {
                            p.bin(second, z, t)
                        };
                        let outs = pb.kernel(ew(p.done(&[r])), &dims, ins, &[(dt, &dims)]);
                        pb.output(outs[0]);
                        let (xn, yn, zn) = (
                            node(xd.clone(), &dims),
                            node(yd.clone(), &dims),
                            node(zd.clone(), &dims),
                        );
                        let t = build::binary(first, &xn, &yn).unwrap();
                        let r = if left {
                            build::binary(second, &t, &zn).unwrap()
                        } else {
                            build::binary(second, &zn, &t).unwrap()
                        };
                        check(pb, &[&r], 0.0);
                    }
                }
            }
        }
    }

    // ((a*b + c)*d - a) over a threaded space.
    let n = 3 * 65536 + 11;
    let dims = [n];
    let ds: Vec<HostData> = (0..4).map(|s| f32s(n, 10 + s)).collect();
    let mut pb = Pb::new();
    let ins: Vec<_> = ds.iter().map(|d| pb.param(d.clone(), &dims, &[])).collect();
    let mut p = P::new();
    let l: Vec<RegId> = (0..4).map(|i| p.load(i, DType::F32)).collect();
    let ab = p.bin(BinaryOp::Mul, l[0], l[1]);
    let abc = p.bin(BinaryOp::Add, ab, l[2]);
    let abcd = p.bin(BinaryOp::Mul, abc, l[3]);
    let r = p.bin(BinaryOp::Sub, abcd, l[0]);
    let outs = pb.kernel(ew(p.done(&[r])), &dims, ins, &[(DType::F32, &dims)]);
    pb.output(outs[0]);
    let nd: Vec<_> = ds.iter().map(|d| node(d.clone(), &dims)).collect();
    let ab = build::binary(BinaryOp::Mul, &nd[0], &nd[1]).unwrap();
    let abc = build::binary(BinaryOp::Add, &ab, &nd[2]).unwrap();
    let abcd = build::binary(BinaryOp::Mul, &abc, &nd[3]).unwrap();
    let r = build::binary(BinaryOp::Sub, &abcd, &nd[0]).unwrap();
    check(pb, &[&r], 0.0);

    // The same chain in the order the compiler emits it (each load just before its first
    // reader, so the pairs skip over loads), with `b` transposed and `c` a broadcast row,
    // both read through registers: `c`'s load runs between the two instructions of the first
    // pair and must not take `b`'s register, which lives until the pair runs.
    let (rows, cols) = (301, 700);
    let dims = [rows, cols];
    let full: Vec<HostData> = (0..3).map(|s| f32s(rows * cols, 20 + s)).collect();
    let row = f32s(cols, 30);
    let bt = f32s(rows * cols, 31);
    let mut pb = Pb::new();
    let ins = vec![
        pb.param(full[0].clone(), &dims, &[]),
        pb.param(bt.clone(), &[cols, rows], &[VOp::Permute(vec![1, 0])]),
        pb.param(
            row.clone(),
            &[cols],
            &[
                VOp::Reshape(vec![1, cols]),
                VOp::Broadcast(vec![rows, cols]),
            ],
        ),
        pb.param(full[2].clone(), &dims, &[]),
    ];
    let mut p = P::new();
    let a = p.load(0, DType::F32);
    let b = p.load(1, DType::F32);
    let ab = p.bin(BinaryOp::Mul, a, b);
    let c = p.load(2, DType::F32);
    let abc = p.bin(BinaryOp::Add, ab, c);
    let d = p.load(3, DType::F32);
    let abcd = p.bin(BinaryOp::Mul, abc, d);
    let r = p.bin(BinaryOp::Sub, abcd, a);
    let outs = pb.kernel(ew(p.done(&[r])), &dims, ins, &[(DType::F32, &dims)]);
    pb.output(outs[0]);
    let (an, dn) = (node(full[0].clone(), &dims), node(full[2].clone(), &dims));
    let bn = build::permute(&node(bt, &[cols, rows]), &[1, 0]).unwrap();
    let cn = build::broadcast_to(&node(row, &[cols]), &Shape::from(dims)).unwrap();
    let ab = build::binary(BinaryOp::Mul, &an, &bn).unwrap();
    let abc = build::binary(BinaryOp::Add, &ab, &cn).unwrap();
    let abcd = build::binary(BinaryOp::Mul, &abc, &dn).unwrap();
    let r = build::binary(BinaryOp::Sub, &abcd, &an).unwrap();
    check(pb, &[&r], 0.0);

    // A pair whose instructions are apart, with an instruction between them that reads one
    // of the first's operands: `(x*y + (-x))*y` as `x, y, *, neg x, +, *`, `x` transposed (in
    // a register, which must live until the pair runs, not only until `neg`; the pair's
    // result goes to a register too, which must not be `x`'s).
    let xt = f32s(rows * cols, 32);
    let yd = f32s(rows * cols, 33);
    let mut pb = Pb::new();
    let ins = vec![
        pb.param(xt.clone(), &[cols, rows], &[VOp::Permute(vec![1, 0])]),
        pb.param(yd.clone(), &dims, &[]),
    ];
    let mut p = P::new();
    let x = p.load(0, DType::F32);
    let y = p.load(1, DType::F32);
    let xy = p.bin(BinaryOp::Mul, x, y);
    let nx = p.un(UnaryOp::Neg, x);
    let s = p.bin(BinaryOp::Add, xy, nx);
    let r = p.bin(BinaryOp::Mul, s, y);
    let outs = pb.kernel(ew(p.done(&[r])), &dims, ins, &[(DType::F32, &dims)]);
    pb.output(outs[0]);
    let (xn, yn) = (
        build::permute(&node(xt, &[cols, rows]), &[1, 0]).unwrap(),
        node(yd, &dims),
    );
    let xy = build::binary(BinaryOp::Mul, &xn, &yn).unwrap();
    let nx = build::unary(UnaryOp::Neg, &xn).unwrap();
    let s = build::binary(BinaryOp::Add, &xy, &nx).unwrap();
    let r = build::binary(BinaryOp::Mul, &s, &yn).unwrap();
    check(pb, &[&r], 0.0);
}
