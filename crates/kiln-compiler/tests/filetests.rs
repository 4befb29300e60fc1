//! File tests: small graphs compiled, and the text form ([`kiln_compiler::text`]) of what
//! the passes made of them — the graph before and after the rewrites and the plan after
//! fusion, row groups and the memory plan — compared with the expected text in
//! `tests/snapshots/` (insta snapshots: `cargo insta review`, or `INSTA_UPDATE=always`,
//! writes new ones; CI fails on any difference).
//! Each snapshot was read and checked by hand when it was written; each test also asserts
//! the property it is about, so a wrong snapshot cannot be blessed silently.
//! The verifier runs after every pass (debug builds).
//!
//! Cases: rewrites (IEEE-safe identities, movement folding, dead code), CSE, each fusion
//! rule (elementwise chains, broadcasts, reductions with prologues, side outputs, matmul
//! epilogues, views through movement ops, the materialisation thresholds, the non-
//! elementwise kernels, virtual sources, the scalar prelude, the input limit), the memory
//! plan (buffer reuse, in-place writes, releases, donations, unread outputs) and row groups.
//!
//! Depends on kiln-compiler's public API, `kiln-ir`'s builders and `insta`.

use kiln_compiler::{compile_for, Compiled, KernelKind, OutputRef, Target};
use kiln_ir::build::{self, SliceArg};
use kiln_ir::{
    ArgReduceOp, BinaryOp, DType, Distribution, HostData, LazyExpr, NodeRef, ReduceOp, Scalar,
    Shape, UnaryOp,
};

// ---------------------------------------------------------------------------------------
// Helpers

fn input(shape: &[usize]) -> NodeRef {
    let n: usize = shape.iter().product();
    build::data(HostData::from(vec![0.5f32; n]), Shape::from(shape)).unwrap()
}

fn ints(shape: &[usize], value: i64) -> NodeRef {
    let n: usize = shape.iter().product();
    build::data(HostData::from(vec![value; n]), Shape::from(shape)).unwrap()
}

fn bin(op: BinaryOp, a: &NodeRef, b: &NodeRef) -> NodeRef {
    build::binary(op, a, b).unwrap()
}

fn un(op: UnaryOp, a: &NodeRef) -> NodeRef {
    build::unary(op, a).unwrap()
}

fn sc(op: BinaryOp, a: &NodeRef, v: f64) -> NodeRef {
    build::binary_scalar(op, a, Scalar::Float(v), false).unwrap()
}

fn sum(a: &NodeRef, axes: &[isize], keepdims: bool) -> NodeRef {
    build::reduce(ReduceOp::Sum, a, Some(axes), keepdims).unwrap()
}

/// No side outputs, no row groups, no donations.
fn plain() -> Target {
    Target::default()
}

/// The CPU backend's choices: side outputs and row groups.
fn cpu() -> Target {
    Target {
        reduce_side_outputs: true,
        row_groups: true,
        ..Target::default()
    }
}

fn compiled(roots: &[&NodeRef], target: Target) -> Compiled {
    compile_for(&LazyExpr::from_roots(roots), target).unwrap()
}

/// The text the snapshot holds: the graph before and after the passes, and the plan.
fn text(c: &Compiled) -> String {
    format!(
        "--- source\n{}--- optimised\n{}--- plan\n{}",
        c.source, c.graph, c.plan
    )
}

fn kinds(c: &Compiled) -> Vec<&'static str> {
    c.plan.kernels.values().map(|k| k.kind.name()).collect()
}

/// How many `exp` instructions each kernel's program holds.
fn exps_per_kernel(c: &Compiled) -> Vec<usize> {
    c.plan
        .kernels
        .values()
        .map(|k| match &k.kind {
            KernelKind::Reduce { program, .. } | KernelKind::Elementwise { program } => program
                .insts
                .values()
                .filter(|i| matches!(i.op, kiln_compiler::InstOp::Unary(UnaryOp::Exp, _)))
                .count(),
            _ => 0,
        })
        .collect()
}

fn op_names(c: &Compiled) -> Vec<&'static str> {
    c.graph.nodes.values().map(|n| n.op.name()).collect()
}

macro_rules! check {
    ($name:literal, $c:expr) => {
        insta::assert_snapshot!($name, text(&$c));
    };
}

// ---------------------------------------------------------------------------------------
// Rewrites

#[test]
fn rewrite_identities_fold() {
    let a = input(&[4]);
    let y = sc(
        BinaryOp::Add,
        &sc(
            BinaryOp::Sub,
            &sc(BinaryOp::Div, &sc(BinaryOp::Mul, &a, 1.0), 1.0),
            0.0,
        ),
        -0.0,
    );
    let c = compiled(&[&y], plain());
    assert_eq!(op_names(&c), ["param"]);
    assert_eq!(
        c.plan.outputs,
        [OutputRef::Param(kiln_ir::ParamId::from_u32(0))]
    );
    check!("rewrite_identities_fold", c);
}

#[test]
fn rewrite_float_plus_zero_is_kept() {
    let a = input(&[4]);
    let c = compiled(&[&sc(BinaryOp::Add, &a, 0.0)], plain());
    assert!(op_names(&c).contains(&"add"));
    check!("rewrite_float_plus_zero_is_kept", c);
}

#[test]
fn rewrite_x_minus_x_is_kept() {
    let a = input(&[4]);
    let c = compiled(&[&bin(BinaryOp::Sub, &a, &a)], plain());
    assert!(op_names(&c).contains(&"subtract"));
    check!("rewrite_x_minus_x_is_kept", c);
}

#[test]
fn rewrite_integer_plus_zero_folds() {
    let i = ints(&[4], 3);
    let y = build::binary_scalar(BinaryOp::Add, &i, Scalar::Int(0), false).unwrap();
    let c = compiled(&[&y], plain());
    assert_eq!(op_names(&c), ["param"]);
    check!("rewrite_integer_plus_zero_folds", c);
}

#[test]
fn rewrite_double_negation_folds() {
    let a = input(&[4]);
    let y = un(UnaryOp::Exp, &un(UnaryOp::Neg, &un(UnaryOp::Neg, &a)));
    let c = compiled(&[&y], plain());
    assert_eq!(op_names(&c), ["param", "exp"]);
    check!("rewrite_double_negation_folds", c);
}

#[test]
fn rewrite_where_of_equal_branches_folds() {
    let a = input(&[4]);
    let cond = build::data(
        HostData::from(vec![true, false, true, false]),
        Shape::from([4]),
    )
    .unwrap();
    let y = un(UnaryOp::Exp, &build::where_(&cond, &a, &a).unwrap());
    let c = compiled(&[&y], plain());
    assert!(!op_names(&c).contains(&"where"));
    check!("rewrite_where_of_equal_branches_folds", c);
}

#[test]
fn rewrite_lossless_cast_round_trip_folds_and_lossy_stays() {
    let a = input(&[4]);
    let round = build::cast(&build::cast(&a, DType::F64), DType::F32);
    let lossy = build::cast(&build::cast(&a, DType::I32), DType::F32);
    let y = bin(BinaryOp::Add, &un(UnaryOp::Exp, &round), &lossy);
    let c = compiled(&[&y], plain());
    let casts = op_names(&c).iter().filter(|n| **n == "cast").count();
    assert_eq!(casts, 2, "only the lossy round trip keeps its casts");
    check!("rewrite_lossless_cast_round_trip_folds_and_lossy_stays", c);
}

#[test]
fn rewrite_reshape_chain_folds() {
    let a = input(&[2, 3, 4]);
    let r = build::reshape(
        &build::reshape(&build::reshape(&a, &[6, 4]).unwrap(), &[24]).unwrap(),
        &[4, 6],
    )
    .unwrap();
    let c = compiled(&[&un(UnaryOp::Exp, &r)], plain());
    assert_eq!(op_names(&c).iter().filter(|n| **n == "reshape").count(), 1);
    check!("rewrite_reshape_chain_folds", c);
}

#[test]
fn rewrite_permute_of_permute_composes() {
    let a = input(&[2, 3, 4]);
    let p = build::permute(&build::permute(&a, &[1, 2, 0]).unwrap(), &[2, 0, 1]).unwrap();
    let c = compiled(&[&un(UnaryOp::Exp, &p)], plain());
    assert!(
        !op_names(&c).contains(&"permute"),
        "the two permutations cancel"
    );
    check!("rewrite_permute_of_permute_composes", c);
}

#[test]
fn rewrite_dead_values_are_dropped() {
    // `where(a > 0, e, e)` is `e`: the comparison it no longer reads is dropped.
    let a = input(&[4]);
    let e = un(UnaryOp::Exp, &a);
    let cond = build::binary_scalar(BinaryOp::Gt, &a, Scalar::Float(0.0), false).unwrap();
    let y = build::where_(&cond, &e, &e).unwrap();
    let c = compiled(&[&y], plain());
    assert!(c.source.nodes.len() > c.graph.nodes.len());
    assert_eq!(op_names(&c), ["param", "exp"]);
    check!("rewrite_dead_values_are_dropped", c);
}

// ---------------------------------------------------------------------------------------
// Common subexpressions

#[test]
fn cse_merges_equal_subtrees() {
    let a = input(&[4]);
    let y = bin(BinaryOp::Add, &un(UnaryOp::Exp, &a), &un(UnaryOp::Exp, &a));
    let c = compiled(&[&y], plain());
    assert_eq!(op_names(&c), ["param", "exp", "add"]);
    // `e + e` reads `e` twice in one node: one use, so one kernel computes `e` once.
    assert_eq!(kinds(&c), ["elementwise"]);
    check!("cse_merges_equal_subtrees", c);
}

#[test]
fn cse_keeps_scalars_that_are_separate_inputs() {
    let a = input(&[4]);
    let y = bin(
        BinaryOp::Add,
        &sc(BinaryOp::Mul, &a, 2.0),
        &sc(BinaryOp::Mul, &a, 2.0),
    );
    let c = compiled(&[&y], plain());
    assert_eq!(op_names(&c).iter().filter(|n| **n == "scalar").count(), 2);
    check!("cse_keeps_scalars_that_are_separate_inputs", c);
}

#[test]
fn cse_merges_equal_reductions() {
    let a = input(&[8, 4]);
    let y = bin(BinaryOp::Mul, &sum(&a, &[1], false), &sum(&a, &[1], false));
    let c = compiled(&[&y], plain());
    assert_eq!(kinds(&c), ["reduce", "elementwise"]);
    check!("cse_merges_equal_reductions", c);
}

#[test]
fn cse_keeps_reductions_over_other_axes_apart() {
    let a = input(&[4, 4]);
    let y = bin(BinaryOp::Add, &sum(&a, &[0], false), &sum(&a, &[1], false));
    let c = compiled(&[&y], plain());
    assert_eq!(kinds(&c), ["reduce", "reduce", "elementwise"]);
    check!("cse_keeps_reductions_over_other_axes_apart", c);
}

// ---------------------------------------------------------------------------------------
// Fusion

#[test]
fn fuse_elementwise_chain_is_one_kernel() {
    let (a, b, c, d) = (input(&[64]), input(&[64]), input(&[64]), input(&[64]));
    let y = bin(
        BinaryOp::Sub,
        &bin(
            BinaryOp::Mul,
            &bin(BinaryOp::Add, &bin(BinaryOp::Mul, &a, &b), &c),
            &d,
        ),
        &a,
    );
    let c = compiled(&[&y], plain());
    assert_eq!(kinds(&c), ["elementwise"]);
    check!("fuse_elementwise_chain_is_one_kernel", c);
}

#[test]
fn fuse_row_broadcast_is_read_through_a_view() {
    let (x, b) = (input(&[8, 4]), input(&[4]));
    let c = compiled(&[&bin(BinaryOp::Add, &x, &b)], plain());
    assert_eq!(kinds(&c), ["elementwise"]);
    check!("fuse_row_broadcast_is_read_through_a_view", c);
}

#[test]
fn fuse_expensive_value_with_two_users_is_materialised() {
    let a = input(&[64]);
    let e = un(UnaryOp::Exp, &un(UnaryOp::Tanh, &a));
    let y1 = sc(BinaryOp::Mul, &e, 2.0);
    let y2 = sc(BinaryOp::Add, &e, 3.0);
    let c = compiled(&[&y1, &y2], plain());
    assert_eq!(kinds(&c), ["elementwise", "elementwise", "elementwise"]);
    check!("fuse_expensive_value_with_two_users_is_materialised", c);
}

#[test]
fn fuse_cheap_value_with_two_users_is_recomputed() {
    let a = input(&[64]);
    let e = sc(BinaryOp::Mul, &a, 2.0);
    let y1 = un(UnaryOp::Exp, &e);
    let y2 = un(UnaryOp::Log, &e);
    let c = compiled(&[&y1, &y2], plain());
    // Each output's kernel computes `a * 2` itself: no slot holds it.
    assert_eq!(kinds(&c), ["elementwise", "elementwise"]);
    assert_eq!(c.plan.slots.len(), 2, "only the two outputs are stored");
    check!("fuse_cheap_value_with_two_users_is_recomputed", c);
}

#[test]
fn fuse_reduction_takes_its_producer_as_prologue() {
    let (a, b) = (input(&[64]), input(&[64]));
    let c = compiled(&[&sum(&bin(BinaryOp::Mul, &a, &b), &[0], false)], plain());
    assert_eq!(kinds(&c), ["reduce"]);
    check!("fuse_reduction_takes_its_producer_as_prologue", c);
}

#[test]
fn fuse_row_softmax_without_side_outputs() {
    let x = input(&[8, 16]);
    let m = build::reduce(ReduceOp::Max, &x, Some(&[-1]), true).unwrap();
    let e = un(UnaryOp::Exp, &bin(BinaryOp::Sub, &x, &m));
    let y = bin(BinaryOp::Div, &e, &sum(&e, &[-1], true));
    let c = compiled(&[&y], plain());
    assert!(kinds(&c).len() <= 3);
    check!("fuse_row_softmax_without_side_outputs", c);
}

#[test]
fn fuse_row_softmax_with_side_outputs() {
    let x = input(&[8, 16]);
    let m = build::reduce(ReduceOp::Max, &x, Some(&[-1]), true).unwrap();
    let e = un(UnaryOp::Exp, &bin(BinaryOp::Sub, &x, &m));
    let y = bin(BinaryOp::Div, &e, &sum(&e, &[-1], true));
    let c = compiled(&[&y], cpu());
    let side = c
        .plan
        .kernels
        .values()
        .any(|k| matches!(k.kind, KernelKind::Reduce { .. }) && k.outputs.len() == 2);
    assert!(side, "the sum stores exp(x - max) as a side output");
    check!("fuse_row_softmax_with_side_outputs", c);
}

#[test]
fn fuse_matmul_takes_bias_and_relu_as_epilogue() {
    let (x, w, b) = (input(&[16, 8]), input(&[8, 4]), input(&[4]));
    let y = un(
        UnaryOp::Relu,
        &bin(BinaryOp::Add, &build::matmul(&x, &w).unwrap(), &b),
    );
    let c = compiled(&[&y], plain());
    assert_eq!(kinds(&c), ["matmul+epilogue"]);
    check!("fuse_matmul_takes_bias_and_relu_as_epilogue", c);
}

#[test]
fn fuse_matmul_read_elsewhere_has_no_epilogue() {
    let (x, w) = (input(&[16, 8]), input(&[8, 4]));
    let p = build::matmul(&x, &w).unwrap();
    let y = un(UnaryOp::Relu, &p);
    let c = compiled(&[&y, &p], plain());
    assert_eq!(kinds(&c)[0], "matmul");
    check!("fuse_matmul_read_elsewhere_has_no_epilogue", c);
}

#[test]
fn fuse_batched_matmul() {
    let (a, b) = (input(&[3, 4, 5]), input(&[3, 5, 2]));
    let c = compiled(&[&build::matmul(&a, &b).unwrap()], plain());
    assert_eq!(kinds(&c), ["matmul"]);
    check!("fuse_batched_matmul", c);
}

#[test]
fn fuse_mean_of_a_row_broadcast_back_is_materialised() {
    // layer norm's `x - mean(x)`: the mean (a division, cost 2) is broadcast, so it is
    // computed once per row, not once per element.
    let x = input(&[8, 16]);
    let m = sc(BinaryOp::Div, &sum(&x, &[-1], true), 16.0);
    let y = bin(BinaryOp::Sub, &x, &m);
    let c = compiled(&[&y], plain());
    assert_eq!(kinds(&c), ["reduce", "elementwise", "elementwise"]);
    check!("fuse_mean_of_a_row_broadcast_back_is_materialised", c);
}

#[test]
fn fuse_cheap_row_value_broadcast_back_is_recomputed() {
    let x = input(&[8, 16]);
    let m = sc(BinaryOp::Mul, &sum(&x, &[-1], true), 0.0625);
    let y = bin(BinaryOp::Sub, &x, &m);
    let c = compiled(&[&y], plain());
    assert_eq!(kinds(&c), ["reduce", "elementwise"]);
    check!("fuse_cheap_row_value_broadcast_back_is_recomputed", c);
}

#[test]
fn fuse_transpose_reads_in_place() {
    let a = input(&[4, 6]);
    let y = un(UnaryOp::Exp, &build::permute(&a, &[1, 0]).unwrap());
    let c = compiled(&[&y], plain());
    assert_eq!(kinds(&c), ["elementwise"]);
    check!("fuse_transpose_reads_in_place", c);
}

#[test]
fn fuse_slice_of_a_computed_value_computes_only_the_slice() {
    let a = input(&[8, 8]);
    let e = un(UnaryOp::Exp, &a);
    let s = build::slice(
        &e,
        &[
            SliceArg::range(Some(2), Some(6), 1),
            SliceArg::range(None, None, 2),
        ],
    )
    .unwrap();
    let c = compiled(&[&s], plain());
    assert_eq!(kinds(&c), ["elementwise"]);
    check!("fuse_slice_of_a_computed_value_computes_only_the_slice", c);
}

#[test]
fn fuse_reshape_of_a_transpose_materialises_it() {
    let a = input(&[4, 6]);
    let t = un(UnaryOp::Exp, &build::permute(&a, &[1, 0]).unwrap());
    let r = build::reshape(&t, &[24]).unwrap();
    let c = compiled(&[&un(UnaryOp::Log, &r)], plain());
    assert_eq!(kinds(&c).len(), 2);
    check!("fuse_reshape_of_a_transpose_materialises_it", c);
}

#[test]
fn fuse_concat_is_its_own_kernel() {
    let (a, b) = (input(&[2, 3]), input(&[4, 3]));
    let y = build::concat(&[un(UnaryOp::Exp, &a), b], 0).unwrap();
    let c = compiled(&[&y], plain());
    assert!(kinds(&c).contains(&"concat"));
    check!("fuse_concat_is_its_own_kernel", c);
}

#[test]
fn fuse_take_gathers_rows() {
    let (t, i) = (input(&[10, 4]), ints(&[3], 2));
    let y = un(UnaryOp::Exp, &build::take(&t, &i, 0).unwrap());
    let c = compiled(&[&y], plain());
    assert_eq!(kinds(&c), ["take", "elementwise"]);
    check!("fuse_take_gathers_rows", c);
}

#[test]
fn fuse_scatter_add_is_its_own_kernel() {
    let (u, i) = (input(&[3, 4]), ints(&[3], 1));
    let y = build::scatter_add(&u, &i, 0, Shape::from([5, 4])).unwrap();
    let c = compiled(&[&y], plain());
    assert_eq!(kinds(&c), ["scatter_add"]);
    check!("fuse_scatter_add_is_its_own_kernel", c);
}

#[test]
fn fuse_top_k_writes_values_and_indices() {
    let a = input(&[4, 10]);
    let (v, i) = build::top_k(&a, 3).unwrap();
    let c = compiled(&[&v, &i], plain());
    assert!(kinds(&c).contains(&"top_k"));
    check!("fuse_top_k_writes_values_and_indices", c);
}

#[test]
fn fuse_argmax_takes_a_prologue() {
    let a = input(&[4, 10]);
    let y = build::arg_reduce(ArgReduceOp::ArgMax, &un(UnaryOp::Abs, &a), Some(1), false).unwrap();
    let c = compiled(&[&y], plain());
    assert_eq!(kinds(&c), ["argreduce"]);
    check!("fuse_argmax_takes_a_prologue", c);
}

#[test]
fn fuse_iota_and_random_are_virtual_sources() {
    let i = build::iota(Shape::from([4, 5]), 1, DType::F32).unwrap();
    let r = build::random(Shape::from([4, 5]), DType::F32, Distribution::Uniform, 7).unwrap();
    let c = compiled(&[&bin(BinaryOp::Add, &i, &r)], plain());
    assert_eq!(kinds(&c), ["elementwise"]);
    check!("fuse_iota_and_random_are_virtual_sources", c);
}

#[test]
fn fuse_scalar_arithmetic_runs_in_the_prelude() {
    let a = input(&[8]);
    let s = build::scalar(Scalar::Float(3.0), DType::F32);
    let t = build::binary_scalar(BinaryOp::Mul, &s, Scalar::Float(2.0), false).unwrap();
    let y = bin(BinaryOp::Add, &a, &un(UnaryOp::Exp, &t));
    let c = compiled(&[&y], plain());
    assert!(
        !c.plan.prelude.insts.is_empty(),
        "exp(3 * 2) is computed on the host"
    );
    check!("fuse_scalar_arithmetic_runs_in_the_prelude", c);
}

#[test]
fn fuse_splits_kernels_over_the_input_limit() {
    let xs: Vec<NodeRef> = (0..6).map(|_| input(&[16])).collect();
    let mut y = xs[0].clone();
    for x in &xs[1..] {
        y = bin(BinaryOp::Add, &y, x);
    }
    let t = Target {
        max_kernel_inputs: 3,
        ..Target::default()
    };
    let c = compiled(&[&y], t);
    assert!(c.plan.kernels.values().all(|k| k.inputs.len() <= 3));
    assert!(c.plan.kernels.len() >= 3);
    check!("fuse_splits_kernels_over_the_input_limit", c);
}

#[test]
fn fuse_output_that_is_an_input_needs_no_kernel() {
    let a = input(&[4]);
    let c = compiled(&[&a, &un(UnaryOp::Exp, &a)], plain());
    assert_eq!(
        c.plan.outputs[0],
        OutputRef::Param(kiln_ir::ParamId::from_u32(0))
    );
    check!("fuse_output_that_is_an_input_needs_no_kernel", c);
}

#[test]
fn fuse_repeated_output_is_written_once() {
    let a = input(&[4]);
    let e = un(UnaryOp::Exp, &a);
    let c = compiled(&[&e, &e], plain());
    assert_eq!(c.plan.kernels.len(), 1);
    assert_eq!(c.plan.outputs[0], c.plan.outputs[1]);
    check!("fuse_repeated_output_is_written_once", c);
}

// ---------------------------------------------------------------------------------------
// The memory plan

#[test]
fn fuse_chain_of_reductions_recomputes_each_prologue() {
    // `x = exp(x - sum(x))` four times, for a target without side outputs: each reduction
    // recomputes the chain before it in its prologue rather than read a stored `x`
    // (quadratic in the chain's length; the policy in `fuse.rs` stores only expensive
    // values read by several non-reductions). With side outputs, the next test, it is linear.
    let mut x = input(&[16, 16]);
    for _ in 0..4 {
        let s = sum(&x, &[1], true);
        x = un(UnaryOp::Exp, &bin(BinaryOp::Sub, &x, &s));
    }
    let c = compiled(&[&x], plain());
    assert_eq!(
        kinds(&c),
        ["reduce", "reduce", "reduce", "reduce", "elementwise"]
    );
    assert_eq!(exps_per_kernel(&c), [0, 1, 2, 3, 4]);
    check!("fuse_chain_of_reductions_recomputes_each_prologue", c);
}

#[test]
fn fuse_chain_of_reductions_stores_side_outputs() {
    // The same chain for the CPU's target: each reduction stores the `x` it folds as a side
    // output, which the next kernel reads, so every kernel computes one `exp`.
    let mut x = input(&[16, 16]);
    for _ in 0..4 {
        let s = sum(&x, &[1], true);
        x = un(UnaryOp::Exp, &bin(BinaryOp::Sub, &x, &s));
    }
    let c = compiled(&[&x], cpu());
    let exps = exps_per_kernel(&c);
    assert_eq!(exps, [0, 1, 1, 1, 1]);
    check!("fuse_chain_of_reductions_stores_side_outputs", c);
}

#[test]
fn memory_chain_reuses_dead_buffers() {
    // exp(x·x)·x …: each product is read only by the next, so buffers are shared.
    let x = input(&[8, 8]);
    let mut y = x.clone();
    for _ in 0..5 {
        y = un(UnaryOp::Exp, &build::matmul(&y, &x).unwrap());
    }
    let c = compiled(&[&y], plain());
    assert_eq!(c.plan.kernels.len(), 5);
    assert!(
        c.plan.buffers.len() < c.plan.slots.len(),
        "buffers are shared"
    );
    check!("memory_chain_reuses_dead_buffers", c);
}

#[test]
fn memory_elementwise_writes_over_its_dying_input_read_in_place() {
    // exp(take(t, i)): the take's output dies at the exp, which reads it position for
    // position, so the exp writes over it.
    let (t, i) = (input(&[10, 4]), ints(&[3], 2));
    let y = un(UnaryOp::Exp, &build::take(&t, &i, 0).unwrap());
    let c = compiled(&[&y], plain());
    assert_eq!(
        c.plan.slots[kiln_compiler::SlotId::from_u32(0)].buffer,
        c.plan.slots[kiln_compiler::SlotId::from_u32(1)].buffer
    );
    check!(
        "memory_elementwise_writes_over_its_dying_input_read_in_place",
        c
    );
}

#[test]
fn memory_no_write_over_an_input_read_through_a_permute_or_reshape() {
    // exp(exp(a)ᵀ) reads its input transposed, tanh(3 · ·) reads its input reshaped: neither
    // writes over what it reads (a permuted read would overwrite elements not yet read;
    // the reshape is conservative), so three buffers.
    let a = input(&[4, 4]);
    let t = un(
        UnaryOp::Exp,
        &build::permute(&un(UnaryOp::Exp, &a), &[1, 0]).unwrap(),
    );
    let u = build::reshape(&t, &[16]).unwrap();
    let y = un(UnaryOp::Tanh, &sc(BinaryOp::Mul, &u, 3.0));
    let c = compiled(&[&y], plain());
    assert_eq!(c.plan.buffers.len(), 3);
    check!(
        "memory_no_write_over_an_input_read_through_a_permute_or_reshape",
        c
    );
}

#[test]
fn memory_releases_after_last_reader() {
    let x = input(&[8, 8]);
    let m = build::matmul(&x, &x).unwrap();
    let n = build::matmul(&m, &x).unwrap();
    let y = build::matmul(&n, &x).unwrap();
    let c = compiled(&[&y], plain());
    assert!(c.plan.releases.values().any(|r| !r.is_empty()));
    check!("memory_releases_after_last_reader", c);
}

#[test]
fn memory_parameter_update_may_take_the_old_storage() {
    // w - 0.1 * g: the update is the last reader of `w`, so a donated `w` can hold it.
    let (w, g) = (input(&[16]), input(&[16]));
    let y = bin(BinaryOp::Sub, &w, &sc(BinaryOp::Mul, &g, 0.1));
    let t = Target {
        donations: true,
        ..Target::default()
    };
    let c = compiled(&[&y], t);
    assert!(!c.plan.donations.is_empty());
    check!("memory_parameter_update_may_take_the_old_storage", c);
}

#[test]
fn memory_outputs_nothing_reads_are_marked_unread() {
    let a = input(&[64]);
    let c = compiled(&[&un(UnaryOp::Exp, &a)], plain());
    assert_eq!(c.plan.unread_outputs.as_slice(), [true]);
    check!("memory_outputs_nothing_reads_are_marked_unread", c);
}

// ---------------------------------------------------------------------------------------
// Row groups

#[test]
fn group_row_softmax_is_one_row_group() {
    let x = input(&[64, 32]);
    let m = build::reduce(ReduceOp::Max, &x, Some(&[-1]), true).unwrap();
    let e = un(UnaryOp::Exp, &bin(BinaryOp::Sub, &x, &m));
    let y = bin(BinaryOp::Div, &e, &sum(&e, &[-1], true));
    let c = compiled(&[&y], cpu());
    assert_eq!(c.plan.groups.len(), 1);
    check!("group_row_softmax_is_one_row_group", c);
}

#[test]
fn group_is_not_formed_across_a_transpose() {
    let x = input(&[16, 16]);
    let s = sum(&x, &[-1], true);
    let d = bin(BinaryOp::Sub, &x, &s);
    let t = un(UnaryOp::Exp, &build::permute(&d, &[1, 0]).unwrap());
    let y = sum(&t, &[-1], true);
    let c = compiled(&[&y], cpu());
    for g in &c.plan.groups {
        for k in g.kernels().map(|k| &c.plan.kernels[k]) {
            assert!(k.inputs.values().all(|i| !i
                .view
                .ops
                .iter()
                .any(|o| matches!(o, kiln_compiler::ViewOp::Permute(_)))));
        }
    }
    check!("group_is_not_formed_across_a_transpose", c);
}

#[test]
fn group_layer_normalised_lstm_step() {
    // kiln-dragnn's LayerNormBasicLSTM step: gates = LN(x + h·W) per gate, c' = LN(c·σ(f+1)
    // + σ(i)·tanh(j)), h' = tanh(c')·σ(o).
    let (rows, h) = (8, 4);
    let (x, hp, cp) = (input(&[rows, 4 * h]), input(&[rows, h]), input(&[rows, h]));
    let w = input(&[h, 4 * h]);
    let ln = |v: &NodeRef, n: f64| {
        let m = sc(BinaryOp::Div, &sum(v, &[-1], true), n);
        let d = bin(BinaryOp::Sub, v, &m);
        let var = sc(
            BinaryOp::Div,
            &sum(&un(UnaryOp::Square, &d), &[-1], true),
            n,
        );
        bin(
            BinaryOp::Mul,
            &d,
            &un(UnaryOp::Rsqrt, &sc(BinaryOp::Add, &var, 1e-6)),
        )
    };
    let z = bin(BinaryOp::Add, &x, &build::matmul(&hp, &w).unwrap());
    let z = ln(
        &build::reshape(&z, &[rows as isize, 4, h as isize]).unwrap(),
        h as f64,
    );
    let gate =
        |k: isize| build::slice(&z, &[SliceArg::range(None, None, 1), SliceArg::Index(k)]).unwrap();
    let c1 = bin(
        BinaryOp::Add,
        &bin(
            BinaryOp::Mul,
            &cp,
            &un(UnaryOp::Sigmoid, &sc(BinaryOp::Add, &gate(2), 1.0)),
        ),
        &bin(
            BinaryOp::Mul,
            &un(UnaryOp::Sigmoid, &gate(0)),
            &un(UnaryOp::Tanh, &gate(1)),
        ),
    );
    let c1 = ln(&c1, h as f64);
    let h1 = bin(
        BinaryOp::Mul,
        &un(UnaryOp::Tanh, &c1),
        &un(UnaryOp::Sigmoid, &gate(3)),
    );
    let c = compiled(&[&h1, &c1], cpu());
    assert!(!c.plan.groups.is_empty());
    check!("group_layer_normalised_lstm_step", c);
}
