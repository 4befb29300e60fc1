//! Inspector assertions: what the compiler fuses, allocates and reads for the expressions the
//! design names (design.md §4). No execution: plans only.

use kiln_compiler::{compile, inspect, Report};
use kiln_ir::{
    build, trace, BinaryOp, DType, HostData, LazyExpr, NodeRef, ReduceOp, Shape, UnaryOp,
};

fn input(shape: &[usize]) -> NodeRef {
    let n: usize = shape.iter().product();
    build::data(HostData::from(vec![0.5f32; n]), Shape::from(shape)).unwrap()
}

fn report(roots: &[&NodeRef]) -> (Report, kiln_compiler::Compiled) {
    let t = trace(roots, true);
    let b = t.bindings.clone();
    let c = compile(&LazyExpr::from_trace(t)).unwrap();
    (inspect::report(&c, &b), c)
}

fn bin(op: BinaryOp, a: &NodeRef, b: &NodeRef) -> NodeRef {
    build::binary(op, a, b).unwrap()
}

#[test]
fn w1_is_one_kernel_one_allocation() {
    let n = 1 << 16;
    let (a, b, c, d) = (input(&[n]), input(&[n]), input(&[n]), input(&[n]));
    let y = bin(
        BinaryOp::Sub,
        &bin(
            BinaryOp::Mul,
            &bin(BinaryOp::Add, &bin(BinaryOp::Mul, &a, &b), &c),
            &d,
        ),
        &a,
    );
    let (r, _) = report(&[&y]);
    assert_eq!(r.kernels.len(), 1, "{r:?}");
    assert_eq!(r.allocations, 1);
    assert_eq!(r.peak_bytes, 4 * n);
    assert_eq!(r.bytes_read, 4 * 4 * n, "each input read once");
    assert_eq!(r.bytes_written, 4 * n, "output written once");
    assert_eq!(r.kernels[0].fused_nodes, 4);
}

#[test]
fn sum_of_product_has_no_temporary() {
    let n = 1 << 16;
    let (a, b) = (input(&[n]), input(&[n]));
    let s = build::reduce(ReduceOp::Sum, &bin(BinaryOp::Mul, &a, &b), None, false).unwrap();
    let (r, _) = report(&[&s]);
    assert_eq!(r.kernels.len(), 1, "{r:?}");
    assert_eq!(r.kernels[0].kind, "reduce");
    assert_eq!(r.peak_bytes, 4, "only the scalar result is allocated");
}

#[test]
fn relu_of_matmul_plus_bias_is_one_kernel() {
    let (x, w, b) = (input(&[64, 32]), input(&[32, 16]), input(&[16]));
    let y = build::unary(
        UnaryOp::Relu,
        &bin(BinaryOp::Add, &build::matmul(&x, &w).unwrap(), &b),
    )
    .unwrap();
    let (r, _) = report(&[&y]);
    assert_eq!(r.kernels.len(), 1, "{r:?}");
    assert_eq!(r.kernels[0].kind, "matmul+epilogue");
    assert_eq!(r.allocations, 1);
}

#[test]
fn row_softmax_is_at_most_three_passes() {
    let (rows, cols) = (256, 1024);
    let x = input(&[rows, cols]);
    // softmax as kiln's front end writes it
    let m = build::reduce(ReduceOp::Max, &x, Some(&[-1]), true).unwrap();
    let e = build::unary(UnaryOp::Exp, &bin(BinaryOp::Sub, &x, &m)).unwrap();
    let s = build::reduce(ReduceOp::Sum, &e, Some(&[-1]), true).unwrap();
    let y = bin(BinaryOp::Div, &e, &s);
    let (r, c) = report(&[&y]);
    assert!(r.kernels.len() <= 3, "{r:?}\n{:#?}", c.plan.kernels);
    let n = rows * cols * 4;
    assert!(
        r.bytes_read <= 3 * n + 4 * rows * 4,
        "at most three passes over x: {r:?}"
    );
    assert!(
        r.bytes_written <= n + 2 * rows * 4,
        "no N-sized temporary: {r:?}"
    );
}

#[test]
fn broadcasting_w3_is_one_pass() {
    let n = 512;
    let (a, row, col) = (input(&[n, n]), input(&[n]), input(&[n, 1]));
    let y = bin(BinaryOp::Add, &bin(BinaryOp::Add, &a, &row), &col);
    let (r, _) = report(&[&y]);
    assert_eq!(r.kernels.len(), 1);
    assert_eq!(r.bytes_read, 4 * (n * n + 2 * n));
}

#[test]
fn expensive_shared_values_are_materialised_cheap_ones_recomputed() {
    let a = input(&[1000]);
    let e = build::unary(UnaryOp::Exp, &a).unwrap();
    let y1 = bin(BinaryOp::Add, &e, &a);
    let y2 = bin(BinaryOp::Mul, &e, &a);
    let (r, _) = report(&[&y1, &y2]);
    assert_eq!(r.kernels.len(), 3, "exp computed once: {r:?}");
    let c = bin(BinaryOp::Add, &a, &a);
    let z1 = bin(BinaryOp::Mul, &c, &a);
    let z2 = bin(BinaryOp::Sub, &c, &a);
    let (r, _) = report(&[&z1, &z2]);
    assert_eq!(r.kernels.len(), 2, "a+a recomputed: {r:?}");
}

#[test]
fn transpose_is_read_in_place() {
    let a = input(&[64, 32]);
    let t = build::permute(&a, &[1, 0]).unwrap();
    let y = build::unary(UnaryOp::Exp, &t).unwrap();
    let (r, _) = report(&[&y]);
    assert_eq!(r.kernels.len(), 1, "{r:?}");
    assert_eq!(r.bytes_read, 64 * 32 * 4);
}

#[test]
fn intermediate_buffers_are_reused() {
    // three reductions in a chain: slots die and their buffers are reused
    let a = input(&[128, 128]);
    let mut x = a.clone();
    for _ in 0..4 {
        let p = build::permute(&build::unary(UnaryOp::Tanh, &x).unwrap(), &[1, 0]).unwrap();
        x = build::unary(UnaryOp::Exp, &p).unwrap();
    }
    let (r, c) = report(&[&x]);
    assert!(r.kernels.len() >= 4, "{r:?}");
    assert!(
        r.allocations <= 3,
        "buffers reused: {r:?} {:?}",
        c.plan.buffers
    );
    assert!(r.peak_bytes <= 3 * 128 * 128 * 4);
    let _ = DType::F32;
}

#[test]
fn only_kernels_whose_outputs_nothing_reads_are_marked_unread() {
    // `e = exp(a)` is an output and read by the sum: not unread. The sum's kernel writes the
    // last output: unread. A plan that claims otherwise fails verification.
    let a = input(&[64, 32]);
    let e = build::unary(UnaryOp::Exp, &a).unwrap();
    let s = build::reduce(ReduceOp::Sum, &e, Some(&[1]), false).unwrap();
    let (_, c) = report(&[&e, &s]);
    let plan = &c.plan;
    assert_eq!(plan.unread_outputs.len(), plan.kernels.len());
    let writer_of = |out: usize| {
        let kiln_compiler::OutputRef::Slot(slot) = plan.outputs[out] else {
            panic!("output {out} is not a slot")
        };
        plan.kernels
            .iter()
            .find(|(_, k)| k.outputs.contains(&slot))
            .map(|(id, _)| id)
            .expect("written")
    };
    let (ke, ks) = (writer_of(0), writer_of(1));
    assert_ne!(ke, ks, "{:?}", plan.kernels);
    assert!(!plan.unread_outputs[ke]);
    assert!(plan.unread_outputs[ks]);
    assert_eq!(plan.verify(), Ok(()));
    let mut bad = plan.clone();
    bad.unread_outputs[ke] = true;
    let err = bad.verify().unwrap_err();
    assert!(err.contains("read later"), "{err}");
    let mut bad = plan.clone();
    let mut flags = bad.unread_outputs.into_vec();
    flags.pop();
    bad.unread_outputs = flags.into();
    assert!(bad.verify().is_err());
}
