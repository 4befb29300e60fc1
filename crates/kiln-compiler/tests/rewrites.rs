//! The rewrite passes, checked on the optimised graph and on the plan.

use kiln_compiler::{compile, rewrite, Graph};
use kiln_ir::{
    build, trace, BinaryOp, DType, HostData, LazyExpr, NodeRef, Op, Scalar, Shape, UnaryOp,
};

fn input(shape: &[usize]) -> NodeRef {
    let n: usize = shape.iter().product();
    build::data(HostData::from(vec![0.5f64; n]), Shape::from(shape)).unwrap()
}

fn optimised(roots: &[&NodeRef]) -> Graph {
    rewrite::optimize(&LazyExpr::from_roots(roots).graph).0
}

fn ops(g: &Graph) -> Vec<String> {
    g.nodes.values().map(|n| n.op.name().to_string()).collect()
}

#[test]
fn cse_merges_equal_structure_but_not_equal_values() {
    let a = input(&[4]);
    let e1 = build::unary(UnaryOp::Exp, &a).unwrap();
    let e2 = build::unary(UnaryOp::Exp, &a).unwrap();
    let y = build::binary(BinaryOp::Add, &e1, &e2).unwrap();
    assert_eq!(ops(&optimised(&[&y])), ["param", "exp", "add"]);
    // two scalars with the same value stay two parameters (values are run-time inputs)
    let s1 = build::binary_scalar(BinaryOp::Mul, &a, Scalar::Float(2.0), false).unwrap();
    let s2 = build::binary_scalar(BinaryOp::Mul, &a, Scalar::Float(2.0), false).unwrap();
    let y = build::binary(BinaryOp::Add, &s1, &s2).unwrap();
    let g = optimised(&[&y]);
    assert_eq!(
        g.nodes
            .values()
            .filter(|n| matches!(n.op, Op::Scalar(_)))
            .count(),
        2
    );
}

#[test]
fn ieee_safe_identities_only() {
    let a = input(&[4]);
    let one = build::binary_scalar(BinaryOp::Mul, &a, Scalar::Float(1.0), false).unwrap();
    let div = build::binary_scalar(BinaryOp::Div, &one, Scalar::Float(1.0), false).unwrap();
    let sub = build::binary_scalar(BinaryOp::Sub, &div, Scalar::Float(0.0), false).unwrap();
    let add = build::binary_scalar(BinaryOp::Add, &sub, Scalar::Float(-0.0), false).unwrap();
    assert_eq!(ops(&optimised(&[&add])), ["param"]);
    // x + 0.0 is not x for x = -0.0; x - x is not 0 for NaN or inf
    let plus0 = build::binary_scalar(BinaryOp::Add, &a, Scalar::Float(0.0), false).unwrap();
    assert!(ops(&optimised(&[&plus0])).contains(&"add".to_string()));
    let xmx = build::binary(BinaryOp::Sub, &a, &a).unwrap();
    assert!(ops(&optimised(&[&xmx])).contains(&"subtract".to_string()));
    // integer x + 0 is x
    let i = build::data(HostData::from(vec![3i32; 4]), Shape::from([4])).unwrap();
    let i0 = build::binary_scalar(BinaryOp::Add, &i, Scalar::Int(0), false).unwrap();
    assert_eq!(ops(&optimised(&[&i0])), ["param"]);
    // neg(neg(x)), where(c, x, x), lossless cast round trips
    let nn = build::unary(UnaryOp::Neg, &build::unary(UnaryOp::Neg, &a).unwrap()).unwrap();
    assert_eq!(ops(&optimised(&[&nn])), ["param"]);
    let c = build::binary_scalar(BinaryOp::Gt, &a, Scalar::Float(0.0), false).unwrap();
    let w = build::where_(&c, &a, &a).unwrap();
    assert_eq!(ops(&optimised(&[&w])), ["param"]);
    let rt = build::cast(&build::cast(&i, DType::I64), DType::I32);
    assert_eq!(ops(&optimised(&[&rt])), ["param"]);
    let lossy = build::cast(&build::cast(&a, DType::F32), DType::F64);
    assert_eq!(
        ops(&optimised(&[&lossy])),
        ["param", "cast", "cast"],
        "f64→f32→f64 rounds: kept"
    );
}

#[test]
fn movement_chains_fold() {
    let a = input(&[2, 3, 4]);
    let t = build::permute(&build::permute(&a, &[2, 0, 1]).unwrap(), &[1, 2, 0]).unwrap();
    assert_eq!(
        ops(&optimised(&[&t])),
        ["param"],
        "the two permutations compose to the identity"
    );
    let r = build::reshape(&build::reshape(&a, &[6, 4]).unwrap(), &[24]).unwrap();
    assert_eq!(ops(&optimised(&[&r])), ["param", "reshape"]);
    let s1 = build::slice(&a, &[build::SliceArg::range(None, None, -1)]).unwrap();
    let s2 = build::slice(&s1, &[build::SliceArg::range(None, None, -1)]).unwrap();
    let g = optimised(&[&s2]);
    assert_eq!(ops(&g), ["param", "slice"]);
    assert_eq!(
        g.nodes[kiln_ir::NodeId::from_u32(1)].op,
        Op::Slice {
            start: [0, 0, 0].into_iter().collect(),
            step: [1, 1, 1].into_iter().collect()
        }
    );
}

#[test]
fn dead_nodes_are_removed_and_scalar_arithmetic_is_folded_into_the_prelude() {
    let a = input(&[8]);
    let s = build::scalar(Scalar::Float(3.0), DType::F64);
    let k = build::binary(
        BinaryOp::Mul,
        &s,
        &build::scalar(Scalar::Float(0.5), DType::F64),
    )
    .unwrap();
    let k = build::unary(UnaryOp::Exp, &k).unwrap();
    let y = build::binary(BinaryOp::Mul, &a, &k).unwrap();
    let t = trace(&[&y], true);
    let c = compile(&LazyExpr::from_trace(t)).unwrap();
    assert_eq!(c.plan.kernels.len(), 1);
    assert_eq!(
        c.plan.prelude.insts.len(),
        4,
        "exp(3.0 * 0.5) computed once per run on the host"
    );
    let kiln_compiler::KernelKind::Elementwise { program } =
        &c.plan.kernels[kiln_compiler::KernelId::from_u32(0)].kind
    else {
        panic!()
    };
    assert_eq!(program.insts.len(), 3, "load, scalar, mul");
}
