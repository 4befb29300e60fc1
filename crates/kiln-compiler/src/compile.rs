//! The compile pipeline: the [`LazyExpr`]'s graph → rewrites → fusion → row groups → memory
//! plan → [`Compiled`], the verifier after each pass in debug builds. Depends on every other
//! module of the crate.

use crate::fuse;
use crate::memory;
use crate::plan::{KernelId, Plan};
use crate::rewrite;
use crate::target::Target;
use kiln_ir::{Graph, Id, IdVec, LazyExpr, NodeId, Result};

/// A compiled graph: the plan, plus what the inspector needs to draw it.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The executable plan.
    pub plan: Plan,
    /// The graph before the passes.
    pub source: Graph,
    /// The graph after the passes.
    pub graph: Graph,
    /// For each node of `graph`, the kernel computing it.
    pub cluster: IdVec<NodeId, Option<KernelId>>,
}

impl Compiled {
    /// DOT of the graph before the passes.
    ///
    /// ```
    /// # use kiln_ir::{build, HostData, LazyExpr, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f32; 3]), Shape::from([3])).unwrap();
    /// let y = build::unary(UnaryOp::Exp, &a).unwrap();
    /// let c = kiln_compiler::compile(&LazyExpr::from_roots(&[&y])).unwrap();
    /// assert!(c.dot_before().contains("exp"));
    /// ```
    pub fn dot_before(&self) -> String {
        self.source.to_dot()
    }

    /// DOT of the graph after the passes, each kernel's nodes drawn as a cluster.
    ///
    /// ```
    /// # use kiln_ir::{build, HostData, LazyExpr, Shape, UnaryOp};
    /// let a = build::data(HostData::from(vec![1.0f32; 3]), Shape::from([3])).unwrap();
    /// let y = build::unary(UnaryOp::Exp, &a).unwrap();
    /// let c = kiln_compiler::compile(&LazyExpr::from_roots(&[&y])).unwrap();
    /// assert!(c.dot_after().contains("cluster_0"));
    /// ```
    pub fn dot_after(&self) -> String {
        self.graph.to_dot_clustered(&self.cluster)
    }
}

/// Compiles a lowered expression.
///
/// ```
/// use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Shape};
/// let a = build::data(HostData::from(vec![1.0f32; 8]), Shape::from([8])).unwrap();
/// let y = build::binary(BinaryOp::Mul, &a, &a).unwrap();
/// let y = build::binary(BinaryOp::Add, &y, &a).unwrap();
/// let c = kiln_compiler::compile(&LazyExpr::from_roots(&[&y])).unwrap();
/// assert_eq!(c.plan.kernels.len(), 1); // one fused pass
/// ```
pub fn compile(expr: &LazyExpr) -> Result<Compiled> {
    compile_with_limit(expr, usize::MAX)
}

/// [`compile`] for a backend whose kernels may read at most `max_kernel_inputs` arrays
/// ([`crate::Backend::max_kernel_inputs`]): fused groups that would read more are split.
///
/// ```
/// use kiln_ir::{build, BinaryOp, HostData, LazyExpr, Shape};
/// // a sum of 12 different arrays: one fused kernel reading 12 inputs ...
/// let xs: Vec<_> = (0..12)
///     .map(|i| build::data(HostData::from(vec![i as f32; 4]), Shape::from([4])).unwrap())
///     .collect();
/// let mut y = xs[0].clone();
/// for x in &xs[1..] {
///     y = build::binary(BinaryOp::Add, &y, x).unwrap();
/// }
/// let e = LazyExpr::from_roots(&[&y]);
/// assert_eq!(kiln_compiler::compile(&e).unwrap().plan.kernels.len(), 1);
/// // ... or kernels of at most 6 inputs each
/// let c = kiln_compiler::compile_with_limit(&e, 6).unwrap();
/// assert!(c.plan.kernels.len() > 1);
/// assert!(c.plan.kernels.values().all(|k| k.inputs.len() <= 6));
/// ```
pub fn compile_with_limit(expr: &LazyExpr, max_kernel_inputs: usize) -> Result<Compiled> {
    compile_for(
        expr,
        Target {
            max_kernel_inputs,
            ..Target::default()
        },
    )
}

/// [`compile`] for a backend with the capabilities `target`.
///
/// ```
/// use kiln_compiler::{compile_for, KernelKind, Target};
/// use kiln_ir::{build, HostData, LazyExpr, ReduceOp, Shape, UnaryOp, BinaryOp};
/// // e = exp(x); e / sum(e): with side outputs the reduction also stores `e`.
/// let x = build::data(HostData::from(vec![1.0f32; 6]), Shape::from([2, 3])).unwrap();
/// let e = build::unary(UnaryOp::Exp, &x).unwrap();
/// let s = build::reduce(ReduceOp::Sum, &e, Some(&[1]), true).unwrap();
/// let s = build::broadcast_to(&s, &Shape::from([2, 3])).unwrap();
/// let y = build::binary(BinaryOp::Div, &e, &s).unwrap();
/// let t = Target { reduce_side_outputs: true, ..Target::default() };
/// let c = compile_for(&LazyExpr::from_roots(&[&y]), t).unwrap();
/// let r = c.plan.kernels.values().find(|k| matches!(k.kind, KernelKind::Reduce { .. })).unwrap();
/// assert_eq!(r.outputs.len(), 2);
/// ```
pub fn compile_for(expr: &LazyExpr, target: Target) -> Result<Compiled> {
    // In debug builds the verifier runs after every pass: the graph as lowered and after the
    // rewrites, the plan after fusion, after the reordering of parameter updates, after the
    // row groups and after the memory plan.
    let source: Graph = expr.graph.clone();
    #[cfg(debug_assertions)]
    source.verify()?;
    let (graph, _) = rewrite::optimize(&source);
    #[cfg(debug_assertions)]
    graph.verify()?;
    let fused = fuse::fuse_for(&graph, expr.bindings.scalars.len() as u32, target);
    let mut plan = fused.plan;
    let mut cluster = fused.cluster;
    #[cfg(debug_assertions)]
    verify_plan(&plan, "fusion", false)?;
    if target.donations {
        let order = memory::sink_updates(&mut plan);
        let mut position = vec![0usize; order.len()];
        for (new, &old) in order.iter().enumerate() {
            position[old] = new;
        }
        for c in cluster.values_mut().flatten() {
            *c = KernelId::new(position[c.index()]);
        }
        #[cfg(debug_assertions)]
        verify_plan(&plan, "the reordering of parameter updates", false)?;
    }
    if target.row_groups {
        plan.groups = crate::group::row_groups(&plan);
        if target.donations {
            // A parameter update stays out of row groups: it may write in place.
            let ks = memory::donation_kernels(&plan);
            plan.groups.retain(|g| !ks.iter().any(|&k| g.contains(k)));
        }
        #[cfg(debug_assertions)]
        verify_plan(&plan, "the row groups", false)?;
    }
    memory::plan_memory(&mut plan, &expr.bindings.dims, target.donations);
    #[cfg(debug_assertions)]
    verify_plan(&plan, "the memory plan", true)?;
    Ok(Compiled {
        plan,
        source,
        graph,
        cluster,
    })
}

/// The plan verifier after the pass `after`, as an error naming the pass (the buffers checked
/// only once the memory plan has made them).
#[cfg(debug_assertions)]
fn verify_plan(plan: &Plan, after: &str, buffers: bool) -> Result<()> {
    let checked = if buffers {
        plan.verify()
    } else {
        plan.verify_structure()
    };
    checked.map_err(|message| kiln_ir::Error::Verifier {
        node: 0,
        op: format!("plan after {after}"),
        message,
    })
}
