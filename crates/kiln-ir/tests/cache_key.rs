//! The graph-cache key ([`kiln_ir::trace`]): two graphs that differ in any attribute of any
//! op get different keys, and graphs that differ only in values (a scalar within its key
//! class, a random seed, input data) share one.
//!
//! The nodes are built directly ([`Node::new`], not the checked builders, which may fold an
//! op away), so each pair differs in the attribute alone: same operands, dtype and shape.

use kiln_ir::{
    trace, ArgReduceOp, Axes, BinaryOp, DType, Distribution, HostData, Inputs, Key, Node, NodeRef,
    Op, ReduceOp, Scalar, Shape, UnaryOp,
};
use smallvec::smallvec;

fn key(n: &NodeRef) -> Key {
    trace(&[n], false).key
}

fn data(values: Vec<f32>, dims: &[usize]) -> NodeRef {
    Node::with_value(HostData::from(values), Shape::from(dims.to_vec()))
}

/// `op` over `inputs`, of dtype `F32` and shape `[3, 3]`.
fn node(op: Op, inputs: &[NodeRef]) -> NodeRef {
    Node::new(
        op,
        DType::F32,
        Shape::from([3, 3]),
        inputs.iter().cloned().collect::<Inputs>(),
    )
}

/// For each attribute of `op`, a copy of `op` with that attribute changed (none for ops
/// without attributes). The match names every field, so a new op or attribute does not
/// compile until it has a case here.
fn variants(op: &Op) -> Vec<Op> {
    let other_reduce = |op: ReduceOp| {
        if op == ReduceOp::Sum {
            ReduceOp::Max
        } else {
            ReduceOp::Sum
        }
    };
    let other_arg = |op: ArgReduceOp| {
        if op == ArgReduceOp::ArgMax {
            ArgReduceOp::ArgMin
        } else {
            ArgReduceOp::ArgMax
        }
    };
    match op {
        // values, not attributes
        Op::Param(_) | Op::Data | Op::Scalar(_) => vec![],
        Op::Iota { axis } => vec![Op::Iota { axis: 1 - axis }],
        Op::Random { dist, seed } => vec![Op::Random {
            dist: match dist {
                Distribution::Uniform => Distribution::Normal,
                Distribution::Normal => Distribution::Uniform,
            },
            seed: *seed,
        }],
        Op::Unary(u) => vec![Op::Unary(if *u == UnaryOp::Exp {
            UnaryOp::Log
        } else {
            UnaryOp::Exp
        })],
        Op::Binary(b) => vec![Op::Binary(if *b == BinaryOp::Add {
            BinaryOp::Sub
        } else {
            BinaryOp::Add
        })],
        Op::Where | Op::Cast | Op::Reshape | Op::BroadcastTo | Op::MatMul | Op::StopGradient => {
            vec![]
        }
        Op::Permute(p) => vec![Op::Permute(p.iter().rev().copied().collect())],
        Op::Slice { start, step } => vec![
            Op::Slice {
                start: start.iter().map(|s| s + 1).collect(),
                step: step.clone(),
            },
            Op::Slice {
                start: start.clone(),
                step: step.iter().map(|s| -s).collect(),
            },
        ],
        Op::Concat { axis } => vec![Op::Concat { axis: 1 - axis }],
        Op::Reduce { op, axes } => vec![
            Op::Reduce {
                op: other_reduce(*op),
                axes: axes.clone(),
            },
            Op::Reduce {
                op: *op,
                axes: axes.iter().map(|a| 1 - a).collect(),
            },
        ],
        Op::ArgReduce { op, axis } => vec![
            Op::ArgReduce {
                op: other_arg(*op),
                axis: *axis,
            },
            Op::ArgReduce {
                op: *op,
                axis: 1 - axis,
            },
        ],
        Op::Take { axis } => vec![Op::Take { axis: 1 - axis }],
        Op::TopK { k, indices } => vec![
            Op::TopK {
                k: k + 1,
                indices: *indices,
            },
            Op::TopK {
                k: *k,
                indices: !indices,
            },
        ],
        Op::ScatterAdd { axis } => vec![Op::ScatterAdd { axis: 1 - axis }],
    }
}

/// One of every op, with its operand count.
fn every_op() -> Vec<(Op, usize)> {
    let axes: Axes = smallvec![0];
    vec![
        (Op::Param(kiln_ir::ParamId::from_u32(0)), 0),
        (Op::Data, 0),
        (Op::Scalar(Scalar::Float(2.0)), 0),
        (Op::Iota { axis: 0 }, 0),
        (
            Op::Random {
                dist: Distribution::Uniform,
                seed: 7,
            },
            0,
        ),
        (Op::Unary(UnaryOp::Exp), 1),
        (Op::Binary(BinaryOp::Add), 2),
        (Op::Where, 3),
        (Op::Cast, 1),
        (Op::Reshape, 1),
        (Op::Permute(smallvec![0, 1]), 1),
        (Op::BroadcastTo, 1),
        (
            Op::Slice {
                start: smallvec![0, 0],
                step: smallvec![1, 1],
            },
            1,
        ),
        (Op::Concat { axis: 0 }, 2),
        (
            Op::Reduce {
                op: ReduceOp::Sum,
                axes,
            },
            1,
        ),
        (
            Op::ArgReduce {
                op: ArgReduceOp::ArgMax,
                axis: 0,
            },
            1,
        ),
        (Op::MatMul, 2),
        (Op::Take { axis: 0 }, 2),
        (Op::ScatterAdd { axis: 0 }, 2),
        (Op::StopGradient, 1),
        (
            Op::TopK {
                k: 1,
                indices: false,
            },
            1,
        ),
    ]
}

#[test]
fn graphs_differing_in_any_attribute_of_any_op_get_different_keys() {
    let operands: Vec<NodeRef> = (0..3).map(|i| data(vec![i as f32; 9], &[3, 3])).collect();
    let mut names = std::collections::HashSet::new();
    let mut changed = 0;
    for (op, arity) in every_op() {
        assert!(names.insert(op.name()), "{} listed twice", op.name());
        let ins = &operands[..arity];
        let base = key(&node(op.clone(), ins));
        for other in variants(&op) {
            assert_ne!(other, op);
            assert_ne!(
                key(&node(other.clone(), ins)),
                base,
                "{op:?} and {other:?} share a key"
            );
            changed += 1;
        }
    }
    // every op once (the list above; `variants` makes a new op fail to compile)
    assert_eq!(names.len(), 21);
    assert_eq!(changed, 16);
}

#[test]
fn graphs_differing_only_in_values_share_a_key() {
    let a = data(vec![1.0; 9], &[3, 3]);
    let b = data(vec![2.0; 9], &[3, 3]);
    let add = |x: &NodeRef, y: &NodeRef| node(Op::Binary(BinaryOp::Add), &[x.clone(), y.clone()]);
    // input data
    assert_eq!(key(&add(&a, &a)), key(&add(&b, &b)));
    // a scalar within its class (neither 0, -0.0 nor 1), but not across classes
    let s = |v: f64| {
        Node::new(
            Op::Scalar(Scalar::Float(v)),
            DType::F32,
            Shape::from([]),
            Inputs::new(),
        )
    };
    let times = |v: f64| node(Op::Binary(BinaryOp::Mul), &[a.clone(), s(v)]);
    assert_eq!(key(&times(2.5)), key(&times(-7.0)));
    assert_ne!(key(&times(2.5)), key(&times(1.0)));
    assert_ne!(key(&times(0.0)), key(&times(-0.0)));
    // a random stream's seed
    let r = |seed: u64| {
        node(
            Op::Random {
                dist: Distribution::Normal,
                seed,
            },
            &[],
        )
    };
    assert_eq!(key(&r(1)), key(&r(2)));
    // but the same input twice is not two inputs
    assert_ne!(key(&add(&a, &a)), key(&add(&a, &b)));
}
