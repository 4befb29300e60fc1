//! Fusion: decides which values are materialised and turns everything else into fused
//! kernel programs and strided views, producing the kernels of a [`Plan`].
//!
//! **Policy.** A value is materialised (gets a slot) when it is a requested output, the
//! result of a non-elementwise op (reduce, argreduce, matmul, take, scatter_add, top_k,
//! concat), an operand that such an op must read through a view (through a slice of a
//! computed value: the sliced operand itself, so only what is read is computed), the input
//! of a permute or size-changing reshape (which then read it in place as a strided view),
//! a non-contiguous view that a reshape merges dimensions of, or an *expensive* elementwise
//! subtree (cost ≥ [`EXPENSIVE`], transcendental ops counting 8 and arithmetic 1) that has
//! several users other than reductions (which recompute it in their prologue rather than pay
//! a write and a read of the array), or an elementwise subtree of more than one operation
//! (cost ≥ [`BROADCAST_COST`]) that is broadcast. Everything else is recomputed inside its users' kernels:
//! elementwise trees and broadcasts fuse into one pass, slices of them compute only the
//! elements they select; elementwise producers fuse into
//! reductions as a prologue; the elementwise consumers of a matmul that only they read fuse
//! into it as an epilogue. Values that are the same for every element (scalars and
//! arithmetic on them) are computed once per run on the host (the plan's prelude).
//!
//! Depends on [`crate::plan`], [`crate::rewrite`], [`crate::target`] and `kiln-ir`.

use crate::plan::{
    Input, InputId, Inst, InstOp, Kernel, KernelId, KernelKind, OutputRef, Plan, Program, RegId,
    SlotId, Source, View, ViewOp,
};
use crate::rewrite::unit_reshape;
use crate::target::Target;
use kiln_ir::{ExprNode, Graph, Id, IdVec, NodeId, Op, UnaryOp};
use smallvec::SmallVec;

/// Subtree cost at which an elementwise value with several users is materialised.
pub const EXPENSIVE: u32 = 8;

/// Subtree cost at which an elementwise value that is broadcast is materialised (computed
/// once per element of the small side instead of once per element of the broadcast).
pub const BROADCAST_COST: u32 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Source,
    Uniform,
    Elementwise,
    Movement,
    Kernel,
}

fn op_cost(op: &Op) -> u32 {
    use kiln_ir::BinaryOp as B;
    match op {
        Op::Unary(
            UnaryOp::Exp
            | UnaryOp::Log
            | UnaryOp::Log1p
            | UnaryOp::Expm1
            | UnaryOp::Sin
            | UnaryOp::Cos
            | UnaryOp::Tanh
            | UnaryOp::Sigmoid
            | UnaryOp::Sqrt
            | UnaryOp::Rsqrt,
        )
        | Op::Binary(B::Pow) => 8,
        Op::Binary(B::Div | B::FloorDiv | B::Rem) => 2,
        _ => 1,
    }
}

/// The value under a chain of reshapes.
fn strip_reshapes(g: &Graph, mut i: NodeId) -> NodeId {
    while g.nodes[i].op == Op::Reshape {
        i = g.nodes[i].inputs[0];
    }
    i
}

fn view_op(n: &ExprNode) -> ViewOp {
    match &n.op {
        Op::Reshape => ViewOp::Reshape(n.sym.clone()),
        Op::Permute(p) => ViewOp::Permute(p.clone()),
        Op::BroadcastTo => ViewOp::Broadcast(n.sym.clone()),
        Op::Slice { start, step } => ViewOp::Slice {
            start: start.clone(),
            step: step.clone(),
            shape: n.sym.clone(),
        },
        other => unreachable!("{other} is not a movement op"),
    }
}

/// The result of fusion.
#[derive(Clone, Debug)]
pub struct Fused {
    /// The plan, without its memory plan (slots have buffer 0 until [`crate::memory`] runs).
    pub plan: Plan,
    /// For each graph node, the kernel that computes it (first one, if recomputed).
    pub cluster: IdVec<NodeId, Option<KernelId>>,
}

struct Builder<'g> {
    g: &'g Graph,
    class: IdVec<NodeId, Class>,
    mat: IdVec<NodeId, bool>,
    /// Per node: the reduction that stores it as a side output (pass D).
    side_of: IdVec<NodeId, Option<NodeId>>,
    slot_of: IdVec<NodeId, Option<SlotId>>,
    prelude_of: IdVec<NodeId, Option<RegId>>,
    /// Prelude register → its position in `plan.prelude.results`.
    result_of: hashbrown::HashMap<RegId, u32>,
    n_scalars: u32,
    plan: Plan,
    cluster: IdVec<NodeId, Option<KernelId>>,
}

/// Decides materialisation and builds the kernels of `g` (already optimised).
///
/// `n_scalars` is the length of the run-time scalar table (`Bindings::scalars`).
pub fn fuse(g: &Graph, n_scalars: u32) -> Fused {
    fuse_for(g, n_scalars, Target::default())
}

/// [`fuse`] for a backend whose kernels read at most `max_inputs` arrays (a GPU's binding
/// limit): fused elementwise trees that would read more are split by materialising their
/// largest subtrees (pass C, `limit_inputs`). `usize::MAX`: no limit.
pub fn fuse_with_limit(g: &Graph, n_scalars: u32, max_inputs: usize) -> Fused {
    fuse_for(
        g,
        n_scalars,
        Target {
            max_kernel_inputs: max_inputs,
            ..Target::default()
        },
    )
}

/// [`fuse`] for a backend with the capabilities `target` (input limit, reduction side
/// outputs; see [`Target`]).
pub fn fuse_for(g: &Graph, n_scalars: u32, target: Target) -> Fused {
    let max_inputs = target.max_kernel_inputs;
    let n = g.nodes.len();
    let mut class = IdVec::filled(Class::Source, n);
    for (i, node) in g.nodes.iter() {
        let uniform_inputs =
            !node.inputs.is_empty() && node.inputs.iter().all(|&j| class[j] == Class::Uniform);
        class[i] = match &node.op {
            Op::Param(_) | Op::Data | Op::Iota { .. } | Op::Random { .. } => Class::Source,
            Op::Scalar(_) => Class::Uniform,
            Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast if uniform_inputs => Class::Uniform,
            Op::Reshape | Op::BroadcastTo if uniform_inputs => Class::Uniform,
            Op::Unary(_) | Op::Binary(_) | Op::Where | Op::Cast => Class::Elementwise,
            Op::Reshape | Op::Permute(_) | Op::BroadcastTo | Op::Slice { .. } => Class::Movement,
            _ => Class::Kernel,
        };
    }
    let mut mat = IdVec::filled(false, n);
    for &o in &g.outputs {
        // A reshaped output shares its data with the value under the reshapes, unless that
        // value is a non-contiguous view.
        let base = strip_reshapes(g, o);
        match class[base] {
            _ if matches!(g.nodes[base].op, Op::Param(_)) => {}
            Class::Movement => mat[o] = true,
            _ => mat[base] = true,
        }
    }
    for i in g.nodes.keys() {
        if class[i] == Class::Kernel {
            mat[i] = true;
        }
    }
    // Pass A (structural): operands that must be read through views; movement over computed
    // values; reshapes of non-contiguous views.
    let mut contiguous = IdVec::filled(true, n);
    let computed = |class: &IdVec<NodeId, Class>, mat: &IdVec<NodeId, bool>, j: NodeId| {
        matches!(class[j], Class::Elementwise | Class::Uniform) && !mat[j]
    };
    for (i, node) in g.nodes.iter() {
        match (&node.op, class[i]) {
            (
                Op::MatMul
                | Op::Take { .. }
                | Op::ScatterAdd { .. }
                | Op::TopK { .. }
                | Op::Concat { .. },
                _,
            ) => {
                for &j in &node.inputs {
                    // walk down through movement ops to the value the view starts from
                    let mut k = j;
                    let mut sliced = false;
                    while class[k] == Class::Movement && !mat[k] {
                        sliced |= matches!(g.nodes[k].op, Op::Slice { .. });
                        k = g.nodes[k].inputs[0];
                    }
                    // A uniform value is filled at the operand's own shape when the kernel
                    // is built (`view_input`): never at the size of what the view selects
                    // from (a slice of a huge broadcast). A computed value read through a
                    // slice is computed where the slice reads it (the operand itself is
                    // materialised), not everywhere.
                    if computed(&class, &mat, k) && class[k] != Class::Uniform {
                        if sliced {
                            mat[j] = true;
                        } else {
                            mat[k] = true;
                        }
                    }
                }
            }
            (_, Class::Movement) => {
                let j = node.inputs[0];
                let src_computed = computed(&class, &mat, j) && class[j] == Class::Elementwise;
                let unit =
                    matches!(node.op, Op::Reshape) && unit_reshape(&g.nodes[j].sym, &node.sym);
                match node.op {
                    Op::Reshape if unit => contiguous[i] = contiguous[j] || src_computed,
                    Op::Reshape => {
                        if src_computed || !contiguous[j] {
                            mat[j] = true;
                        }
                        contiguous[i] = true;
                    }
                    Op::BroadcastTo => contiguous[i] = false,
                    Op::Permute(_) => {
                        if src_computed {
                            mat[j] = true;
                        }
                        contiguous[i] = false;
                    }
                    // a slice of a computed value computes it only where it reads (views
                    // pass through elementwise programs); pass B still materialises an
                    // expensive value with several readers
                    Op::Slice { .. } => contiguous[i] = false,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    // Pass B (cost): expensive subtrees with several users or under a broadcast.
    // Uses by reductions do not count: a reduction reads its operand once anyway, so
    // recomputing an expensive value in its prologue saves a write and a read of the array.
    // A node reading the same value twice (`e + e`) is one use: its kernel computes the
    // value once.
    let mut uses = IdVec::filled(0u32, n);
    for node in g.nodes.values() {
        if !matches!(node.op, Op::Reduce { .. } | Op::ArgReduce { .. }) {
            for (k, &j) in node.inputs.iter().enumerate() {
                if !node.inputs[..k].contains(&j) {
                    uses[j] += 1;
                }
            }
        }
    }
    for &o in &g.outputs {
        uses[o] += 1;
    }
    let mut broadcast_user = IdVec::filled(false, n);
    for node in g.nodes.values() {
        if node.op == Op::BroadcastTo {
            broadcast_user[node.inputs[0]] = true;
        }
    }
    let mut cost = IdVec::filled(0u32, n);
    for (i, node) in g.nodes.iter() {
        if class[i] != Class::Elementwise {
            continue;
        }
        cost[i] = op_cost(&node.op)
            + node
                .inputs
                .iter()
                .map(|&j| {
                    if class[j] == Class::Elementwise && !mat[j] {
                        cost[j]
                    } else {
                        0
                    }
                })
                .sum::<u32>();
        // A broadcast user repeats the subtree for every copy of each element: anything more
        // than one operation is cheaper computed once, before the broadcast.
        let repeated = broadcast_user[i] && cost[i] >= BROADCAST_COST;
        if !mat[i] && ((cost[i] >= EXPENSIVE && uses[i] > 1) || repeated) {
            mat[i] = true;
        }
    }
    if max_inputs != usize::MAX {
        limit_inputs(g, &class, &mut mat, max_inputs);
    }
    let side_of = if target.reduce_side_outputs {
        side_outputs(g, &class, &mut mat, &cost)
    } else {
        IdVec::filled(None, n)
    };
    let mut b = Builder {
        g,
        class,
        mat,
        side_of,
        slot_of: IdVec::filled(None, n),
        prelude_of: IdVec::filled(None, n),
        result_of: hashbrown::HashMap::new(),
        n_scalars,
        plan: Plan::default(),
        cluster: IdVec::filled(None, n),
    };
    b.build();
    Fused {
        plan: b.plan,
        cluster: b.cluster,
    }
}

/// Pass D (side outputs): an expensive elementwise value (cost ≥ [`EXPENSIVE`]) that a
/// reduction reads directly as its operand and that later kernels also read is stored by the
/// reduction (a second prologue result) instead of being computed again by each of them:
/// softmax's `exp(x - max)` is computed once, by the sum. Only where every other user comes
/// after the reduction in node order (so the value is written before it is read) and the
/// reduced axes are a trailing run of the space or exclude its last axis (the side output is
/// then stored in the order the reduction visits positions). Returns, per node, the
/// reduction that stores it; those nodes are marked materialised.
fn side_outputs(
    g: &Graph,
    class: &IdVec<NodeId, Class>,
    mat: &mut IdVec<NodeId, bool>,
    cost: &IdVec<NodeId, u32>,
) -> IdVec<NodeId, Option<NodeId>> {
    let n = g.nodes.len();
    let mut side_of = IdVec::filled(None, n);
    // Per node: the nodes reading it (graph outputs are materialised already).
    let mut users: IdVec<NodeId, SmallVec<[NodeId; 4]>> = IdVec::filled(SmallVec::new(), n);
    for (i, node) in g.nodes.iter() {
        for &j in &node.inputs {
            // users are pushed in node order: a repeated operand repeats the last entry
            if users[j].last() != Some(&i) {
                users[j].push(i);
            }
        }
    }
    for (r, node) in g.nodes.iter() {
        let Op::Reduce { axes, .. } = &node.op else {
            continue;
        };
        let v = node.inputs[0];
        let rank = g.nodes[v].sym.len();
        let trailing = axes
            .iter()
            .enumerate()
            .all(|(k, &a)| a == rank - axes.len() + k);
        let keeps_last = rank > 0 && !axes.contains(&(rank - 1));
        let others: SmallVec<[NodeId; 4]> = users[v].iter().copied().filter(|&u| u != r).collect();
        if class[v] == Class::Elementwise
            && !mat[v]
            && side_of[v].is_none()
            && cost[v] >= EXPENSIVE
            && (trailing || keeps_last)
            && !others.is_empty()
            && others.iter().all(|&u| u > r)
        {
            side_of[v] = Some(r);
            mat[v] = true;
        }
    }
    side_of
}

/// Pass C (binding limit): bounds the arrays a fused kernel reads. Every elementwise tree
/// that fusion would compute in one kernel reads its *leaves*: materialised values, sources
/// and the views over them (each view counted once per distinct node: an upper bound on the
/// kernel's deduplicated inputs). Walking in topological order, a node whose leaves exceed
/// the bound materialises its operand subtree with the most leaves until it fits; that
/// subtree becomes one kernel input, and its own kernel was already bounded when it was
/// visited. The bound leaves two inputs for a matmul whose epilogue the tree may become.
fn limit_inputs(
    g: &Graph,
    class: &IdVec<NodeId, Class>,
    mat: &mut IdVec<NodeId, bool>,
    max_inputs: usize,
) {
    let bound = max_inputs.saturating_sub(2).max(3);
    let n = g.nodes.len();
    // for a node a fused tree reads: the leaves it contributes
    let mut leaves: IdVec<NodeId, Vec<NodeId>> = IdVec::filled(Vec::new(), n);
    let fused_through = |mat: &IdVec<NodeId, bool>, j: NodeId| -> Option<NodeId> {
        // an unmaterialised elementwise value, or a view fused through to one
        let mut k = j;
        loop {
            match class[k] {
                Class::Elementwise if !mat[k] => return Some(k),
                Class::Movement if !mat[k] => k = g.nodes[k].inputs[0],
                _ => return None,
            }
        }
    };
    let union = |sets: &[&[NodeId]]| -> Vec<NodeId> {
        let mut u: Vec<NodeId> = sets.iter().flat_map(|s| s.iter().copied()).collect();
        u.sort_unstable();
        u.dedup();
        u
    };
    for i in g.nodes.keys() {
        if class[i] != Class::Elementwise {
            continue;
        }
        loop {
            let parts: Vec<(NodeId, Vec<NodeId>)> = g.nodes[i]
                .inputs
                .iter()
                .map(|&j| match (class[j], fused_through(mat, j)) {
                    (Class::Uniform, _) => (j, Vec::new()),
                    (_, Some(k)) => (k, leaves[k].clone()),
                    _ => (j, vec![j]),
                })
                .collect();
            let all = union(&parts.iter().map(|(_, l)| l.as_slice()).collect::<Vec<_>>());
            if all.len() <= bound {
                leaves[i] = all;
                break;
            }
            // materialise the operand tree that reads the most; it then counts as one input
            let widest = parts
                .iter()
                .filter(|(k, l)| l.len() > 1 && class[*k] == Class::Elementwise && !mat[*k])
                .max_by_key(|(_, l)| l.len())
                .map(|(k, _)| *k);
            match widest {
                Some(k) => mat[k] = true,
                None => {
                    // every operand is already a single input (at most 3: `where`)
                    leaves[i] = all;
                    break;
                }
            }
        }
    }
}

struct ProgramBuilder {
    program: Program,
    inputs: IdVec<InputId, Input>,
    /// Each input's id (a fused chain may read many distinct arrays).
    input_index: hashbrown::HashMap<Input, InputId>,
    memo: hashbrown::HashMap<(NodeId, Vec<ViewOp>), RegId>,
    fused: Vec<NodeId>,
}

impl ProgramBuilder {
    fn new() -> Self {
        ProgramBuilder {
            program: Program::default(),
            inputs: IdVec::new(),
            input_index: hashbrown::HashMap::new(),
            memo: hashbrown::HashMap::new(),
            fused: Vec::new(),
        }
    }

    fn push(&mut self, op: InstOp, dtype: kiln_ir::DType) -> RegId {
        self.program.insts.push(Inst { op, dtype })
    }

    fn load(&mut self, source: Source, node: &ExprNode, ops: &[ViewOp]) -> RegId {
        let input = Input {
            source,
            dtype: node.dtype,
            view: View {
                base: node.sym.clone(),
                ops: ops.iter().cloned().collect(),
            },
        };
        let inputs = &mut self.inputs;
        let idx = *self
            .input_index
            .entry(input.clone())
            .or_insert_with(|| inputs.push(input));
        self.push(InstOp::Load(idx), node.dtype)
    }
}

impl Builder<'_> {
    /// The prelude register of uniform node `i`, emitting it and its operands first (an
    /// explicit work list: a chain of scalar arithmetic may be as long as the user wrote it).
    fn prelude(&mut self, i: NodeId) -> RegId {
        // (node, operands pushed): a node is emitted when it is popped the second time
        let mut stack: Vec<(NodeId, bool)> = vec![(i, false)];
        while let Some((j, expanded)) = stack.pop() {
            if self.prelude_of[j].is_some() {
                continue;
            }
            let node = &self.g.nodes[j];
            let v = match &node.op {
                Op::Scalar(_) => {
                    let s = node.binding.expect("scalars have bindings");
                    self.plan.prelude.insts.push(Inst {
                        op: InstOp::Scalar(s),
                        dtype: node.dtype,
                    })
                }
                Op::Reshape | Op::BroadcastTo => match self.prelude_of[node.inputs[0]] {
                    Some(v) => v,
                    None => {
                        stack.push((j, true));
                        stack.push((node.inputs[0], false));
                        continue;
                    }
                },
                op => {
                    if !expanded {
                        stack.push((j, true));
                        stack.extend(node.inputs.iter().rev().map(|&k| (k, false)));
                        continue;
                    }
                    let ins: SmallVec<[RegId; 3]> = node
                        .inputs
                        .iter()
                        .map(|&k| self.prelude_of[k].expect("operands emitted first"))
                        .collect();
                    let iop = match op {
                        Op::Unary(u) => InstOp::Unary(*u, ins[0]),
                        Op::Binary(b) => InstOp::Binary(*b, ins[0], ins[1]),
                        Op::Where => InstOp::Where(ins[0], ins[1], ins[2]),
                        Op::Cast => InstOp::Cast(ins[0]),
                        other => unreachable!("{other} is not uniform"),
                    };
                    self.plan.prelude.insts.push(Inst {
                        op: iop,
                        dtype: node.dtype,
                    })
                }
            };
            self.prelude_of[j] = Some(v);
        }
        self.prelude_of[i].expect("emitted above")
    }

    /// The scalar-table index of uniform node `i` (a prelude result).
    fn scalar_index(&mut self, i: NodeId) -> u32 {
        let v = self.prelude(i);
        let node = &self.g.nodes[i];
        if let (Op::Scalar(_), Some(b)) = (&node.op, node.binding) {
            return b;
        }
        let results = &mut self.plan.prelude.results;
        let pos = *self.result_of.entry(v).or_insert_with(|| {
            results.push(v);
            results.len() as u32 - 1
        });
        self.n_scalars + pos
    }

    /// Emits node `i` into `pb`, reading it through the pending view ops `ops`. The walk
    /// keeps its own work list (a fused chain is as deep as the user's expression), visiting
    /// operands in order, so instructions come out as a depth-first recursion would emit them.
    fn emit(
        &mut self,
        pb: &mut ProgramBuilder,
        i: NodeId,
        root: Option<NodeId>,
        ops: &[ViewOp],
    ) -> RegId {
        enum Task {
            /// Emit node `.0` read through views `.1`, leaving its register on `vals`.
            Visit(NodeId, Vec<ViewOp>),
            /// The register on top of `vals` is also the value of this memo key.
            Alias((NodeId, Vec<ViewOp>)),
            /// Pop the operands' registers of node `.1` and emit it under memo key `.0`.
            Apply((NodeId, Vec<ViewOp>), NodeId),
        }
        let mut vals: Vec<RegId> = Vec::new();
        let mut tasks = vec![Task::Visit(i, ops.to_vec())];
        while let Some(task) = tasks.pop() {
            let (i, ops) = match task {
                Task::Visit(i, ops) => (i, ops),
                Task::Alias(key) => {
                    let v = *vals.last().expect("the aliased value was emitted");
                    pb.memo.insert(key, v);
                    continue;
                }
                Task::Apply(key, i) => {
                    let node = &self.g.nodes[i];
                    let ins = vals.split_off(vals.len() - node.inputs.len());
                    let iop = match &node.op {
                        Op::Unary(u) => InstOp::Unary(*u, ins[0]),
                        Op::Binary(b) => InstOp::Binary(*b, ins[0], ins[1]),
                        Op::Where => InstOp::Where(ins[0], ins[1], ins[2]),
                        Op::Cast => InstOp::Cast(ins[0]),
                        other => unreachable!("{other} cannot be fused"),
                    };
                    let v = pb.push(iop, node.dtype);
                    pb.memo.insert(key, v);
                    vals.push(v);
                    continue;
                }
            };
            if let Some(&v) = pb.memo.get(&(i, ops.clone())) {
                vals.push(v);
                continue;
            }
            let node = &self.g.nodes[i];
            let v = if Some(i) != root && self.mat[i] && self.slot_of[i].is_some() {
                let slot = self.slot_of[i].expect("checked");
                pb.load(Source::Slot(slot), node, &ops)
            } else if self.class[i] == Class::Uniform {
                let s = self.scalar_index(i);
                pb.push(InstOp::Scalar(s), node.dtype)
            } else if Some(i) != root && self.mat[i] {
                unreachable!("materialised values are computed before their users")
            } else {
                match &node.op {
                    Op::Param(p) => pb.load(Source::Param(*p), node, &ops),
                    Op::Iota { axis } => pb.load(Source::Iota { axis: *axis }, node, &ops),
                    Op::Random { dist, .. } => pb.load(
                        Source::Random {
                            dist: *dist,
                            seed: node.binding.expect("seeds are bound"),
                        },
                        node,
                        &ops,
                    ),
                    Op::Reshape | Op::Permute(_) | Op::BroadcastTo | Op::Slice { .. } => {
                        let mut inner: Vec<ViewOp> = vec![view_op(node)];
                        inner.extend(ops.iter().cloned());
                        tasks.push(Task::Alias((i, ops)));
                        tasks.push(Task::Visit(node.inputs[0], inner));
                        continue;
                    }
                    _ => {
                        pb.fused.push(i);
                        tasks.push(Task::Apply((i, ops.clone()), i));
                        for &j in node.inputs.iter().rev() {
                            tasks.push(Task::Visit(j, ops.clone()));
                        }
                        continue;
                    }
                }
            };
            pb.memo.insert((i, ops), v);
            vals.push(v);
        }
        debug_assert_eq!(vals.len(), 1);
        vals[0]
    }

    /// A view input for an operand of a non-elementwise kernel (walks movement ops down to a
    /// source or slot).
    fn view_input(&mut self, i: NodeId) -> Input {
        let mut pb = ProgramBuilder::new();
        let v = self.emit(&mut pb, i, None, &[]);
        match pb.program.insts[v].op {
            InstOp::Load(k) => pb.inputs.into_vec().swap_remove(k.index()),
            InstOp::Scalar(_) => {
                // a uniform operand: materialise it through a tiny fill kernel
                let node = &self.g.nodes[i];
                let slot = self.new_kernel_fill(i);
                Input {
                    source: Source::Slot(slot),
                    dtype: node.dtype,
                    view: View::identity(node.sym.clone()),
                }
            }
            _ => unreachable!("operands of view-reading kernels are materialised"),
        }
    }

    fn new_slot(&mut self, i: NodeId) -> SlotId {
        let node = &self.g.nodes[i];
        let s = self.plan.slots.push(crate::plan::Slot {
            dtype: node.dtype,
            shape: node.sym.clone(),
            buffer: Default::default(),
        });
        self.slot_of[i] = Some(s);
        s
    }

    fn new_kernel_fill(&mut self, i: NodeId) -> SlotId {
        let mut pb = ProgramBuilder::new();
        let v = self.emit(&mut pb, i, Some(i), &[]);
        pb.program.results.push(v);
        let node = &self.g.nodes[i];
        let slot = self.new_slot(i);
        self.push_kernel(
            Kernel {
                kind: KernelKind::Elementwise {
                    program: pb.program,
                },
                space: node.sym.clone(),
                inputs: pb.inputs,
                outputs: [slot].into_iter().collect(),
            },
            &[i],
        );
        slot
    }

    fn push_kernel(&mut self, k: Kernel, nodes: &[NodeId]) {
        let idx = self.plan.kernels.push(k);
        for &n in nodes {
            if self.cluster[n].is_none() {
                self.cluster[n] = Some(idx);
            }
        }
    }

    fn build(&mut self) {
        let g = self.g;
        for i in g.nodes.keys() {
            if !self.mat[i] || self.slot_of[i].is_some() || self.side_of[i].is_some() {
                continue;
            }
            let node = &g.nodes[i];
            match &node.op {
                Op::Reduce { .. } | Op::ArgReduce { .. } => {
                    // the reduced operand's producers fuse in as a prologue
                    let mut pb = ProgramBuilder::new();
                    let operand = node.inputs[0];
                    let side = self.side_of[operand] == Some(i);
                    // a side output is computed here (as the emit root), not loaded
                    let root = side.then_some(operand);
                    let v = self.emit(&mut pb, operand, root, &[]);
                    pb.program.results.push(v);
                    if side {
                        pb.program.results.push(v); // stored over the space as output 1
                    }
                    let kind = match &node.op {
                        Op::Reduce { op, axes } => KernelKind::Reduce {
                            program: pb.program,
                            op: *op,
                            axes: axes.clone(),
                        },
                        Op::ArgReduce { op, axis } => KernelKind::ArgReduce {
                            program: pb.program,
                            op: *op,
                            axis: *axis,
                        },
                        _ => unreachable!(),
                    };
                    let space = g.nodes[operand].sym.clone();
                    let mut outputs: SmallVec<[SlotId; 1]> =
                        [self.new_slot(i)].into_iter().collect();
                    if side {
                        outputs.push(self.new_slot(operand));
                    }
                    let mut fused = pb.fused;
                    fused.push(i);
                    self.push_kernel(
                        Kernel {
                            kind,
                            space,
                            inputs: pb.inputs,
                            outputs,
                        },
                        &fused,
                    );
                }
                Op::MatMul | Op::Take { .. } | Op::ScatterAdd { .. } | Op::Concat { .. } => {
                    let inputs: IdVec<InputId, Input> = node
                        .inputs
                        .clone()
                        .iter()
                        .map(|&j| self.view_input(j))
                        .collect();
                    let kind = match &node.op {
                        Op::MatMul => KernelKind::MatMul { epilogue: None },
                        Op::Take { axis } => KernelKind::Take { axis: *axis },
                        Op::ScatterAdd { axis } => KernelKind::ScatterAdd { axis: *axis },
                        Op::Concat { axis } => KernelKind::Concat { axis: *axis },
                        _ => unreachable!(),
                    };
                    let slot = self.new_slot(i);
                    self.push_kernel(
                        Kernel {
                            kind,
                            space: node.sym.clone(),
                            inputs,
                            outputs: [slot].into_iter().collect(),
                        },
                        &[i],
                    );
                }
                Op::TopK { k, .. } => {
                    // One kernel for every materialised top_k of the same operand and k.
                    let input = self.view_input(node.inputs[0]);
                    let mut members: Vec<NodeId> = vec![i];
                    for (j, o) in g.nodes.iter().skip(i.index() + 1) {
                        if self.mat[j]
                            && o.inputs == node.inputs
                            && matches!(o.op, Op::TopK { k: k2, .. } if k2 == *k)
                        {
                            members.push(j);
                        }
                    }
                    let flags: SmallVec<[bool; 2]> = members
                        .iter()
                        .map(|&m| matches!(g.nodes[m].op, Op::TopK { indices: true, .. }))
                        .collect();
                    let outputs: SmallVec<[SlotId; 1]> =
                        members.iter().map(|&m| self.new_slot(m)).collect();
                    self.push_kernel(
                        Kernel {
                            kind: KernelKind::TopK {
                                k: *k,
                                indices: flags,
                            },
                            space: node.sym.clone(),
                            inputs: IdVec::from_vec(vec![input]),
                            outputs,
                        },
                        &members,
                    );
                }
                _ => {
                    // an elementwise group (or a copy of a view, a fill of a uniform value)
                    let mut pb = ProgramBuilder::new();
                    let v = self.emit(&mut pb, i, Some(i), &[]);
                    pb.program.results.push(v);
                    let slot = self.new_slot(i);
                    let mut fused = pb.fused.clone();
                    fused.push(i);
                    self.push_kernel(
                        Kernel {
                            kind: KernelKind::Elementwise {
                                program: pb.program,
                            },
                            space: node.sym.clone(),
                            inputs: pb.inputs,
                            outputs: [slot].into_iter().collect(),
                        },
                        &fused,
                    );
                }
            }
        }
        self.plan.outputs = g
            .outputs
            .iter()
            .map(|&o| {
                let base = strip_reshapes(g, o);
                match (self.slot_of[o], self.slot_of[base]) {
                    (Some(s), _) | (None, Some(s)) => OutputRef::Slot(s),
                    (None, None) => match g.nodes[base].op {
                        Op::Param(p) => OutputRef::Param(p),
                        _ => unreachable!("outputs are materialised or parameters"),
                    },
                }
            })
            .collect();
        self.fuse_epilogues();
    }

    /// Folds an elementwise kernel into the matmul whose product only it reads, as the
    /// matmul's epilogue.
    fn fuse_epilogues(&mut self) {
        let plan = &mut self.plan;
        let mut is_output = IdVec::filled(false, plan.slots.len());
        for o in &plan.outputs {
            if let OutputRef::Slot(s) = o {
                is_output[*s] = true;
            }
        }
        // The kernels reading each slot, listed once per kernel. Computed once: a merge moves
        // a matmul's inputs (written before it) into a later kernel, so it never changes the
        // readers of a later matmul's output, the only lists read after it.
        let mut readers: IdVec<SlotId, Vec<KernelId>> = IdVec::filled(Vec::new(), plan.slots.len());
        for (r, kernel) in plan.kernels.iter() {
            for i in kernel.inputs.values() {
                if let Source::Slot(s) = i.source {
                    if readers[s].last() != Some(&r) {
                        readers[s].push(r);
                    }
                }
            }
        }
        // Merged matmuls: their consumer's index (the kernel list is compacted at the end).
        let mut merged_into: IdVec<KernelId, Option<KernelId>> =
            IdVec::filled(None, plan.kernels.len());
        for k in plan.kernels.keys() {
            let KernelKind::MatMul { epilogue: None } = plan.kernels[k].kind else {
                continue;
            };
            let mm_slot = plan.kernels[k].outputs[0];
            if is_output[mm_slot] {
                continue;
            }
            let [r] = readers[mm_slot][..] else {
                continue;
            };
            let consumer = &plan.kernels[r];
            let reads: Vec<InputId> = consumer
                .inputs
                .iter()
                .filter(|(_, input)| input.source == Source::Slot(mm_slot))
                .map(|(x, _)| x)
                .collect();
            let ok = matches!(consumer.kind, KernelKind::Elementwise { .. })
                && consumer.outputs.len() == 1
                && reads.len() == 1
                && consumer.space == plan.kernels[k].space
                && consumer.inputs[reads[0]]
                    .view
                    .ops
                    .iter()
                    .all(|o| matches!(o, ViewOp::Reshape(t) if *t == consumer.space));
            if !ok {
                continue;
            }
            // The merged kernel takes the consumer's place: the consumer may read slots
            // written after the matmul.
            let consumer = plan.kernels[r].clone();
            let KernelKind::Elementwise { program } = consumer.kind else {
                unreachable!()
            };
            let acc_input = reads[0];
            let mut inputs = plan.kernels[k].inputs.clone();
            // consumer input → merged input (none for the product, read as `Acc`)
            let map: IdVec<InputId, Option<InputId>> = consumer
                .inputs
                .iter()
                .map(|(x, inp)| (x != acc_input).then(|| inputs.push(inp.clone())))
                .collect();
            let insts = program
                .insts
                .into_vec()
                .into_iter()
                .map(|inst| match inst.op {
                    InstOp::Load(x) if x == acc_input => Inst {
                        op: InstOp::Acc,
                        dtype: inst.dtype,
                    },
                    InstOp::Load(x) => Inst {
                        op: InstOp::Load(map[x].expect("only the product has no input")),
                        dtype: inst.dtype,
                    },
                    _ => inst,
                })
                .collect();
            let merged = Kernel {
                kind: KernelKind::MatMul {
                    epilogue: Some(Program {
                        insts,
                        results: program.results,
                    }),
                },
                space: consumer.space.clone(),
                inputs,
                outputs: consumer.outputs.clone(),
            };
            plan.kernels[r] = merged;
            merged_into[k] = Some(r);
        }
        if merged_into.values().all(Option::is_none) {
            return;
        }
        // Compact: a merged matmul's nodes belong to its consumer's kernel.
        let mut new_index = IdVec::filled(KernelId::new(0), plan.kernels.len());
        let mut next = 0;
        for (k, m) in merged_into.iter() {
            if m.is_none() {
                new_index[k] = KernelId::new(next);
                next += 1;
            }
        }
        for (k, m) in merged_into.iter() {
            if let Some(r) = m {
                new_index[k] = new_index[*r];
            }
        }
        plan.kernels = std::mem::take(&mut plan.kernels)
            .into_vec()
            .into_iter()
            .zip(merged_into.values())
            .filter(|(_, m)| m.is_none())
            .map(|(kernel, _)| kernel)
            .collect();
        for x in self.cluster.values_mut().flatten() {
            *x = new_index[*x];
        }
    }
}
