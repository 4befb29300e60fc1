//! The backend-neutral [`Plan`]: kernels over numbered buffer slots, with every size given as
//! a relative shape ([`Dim`]) so one plan serves every binding of its graph-cache key.
//!
//! This is the contract between the compiler and the backends. A backend executes a plan's
//! kernels in order; the compiler guarantees the invariants written on each type. Depends on
//! `kiln-ir` only.

use kiln_ir::{
    define_id, resolve_shape, ArgReduceOp, Axes, BinaryOp, DType, Dim, Distribution, Id, IdVec,
    ParamId, ReduceOp, Shape, SymShape, UnaryOp,
};
use smallvec::SmallVec;

define_id! {
    /// A slot of a [`Plan`]: a value one kernel writes ([`Plan::slots`]).
    pub struct SlotId = "s";
}

define_id! {
    /// A buffer of a [`Plan`]: memory hosting slots ([`Plan::buffers`]).
    pub struct BufferId = "b";
}

define_id! {
    /// A kernel of a [`Plan`], numbered in execution order ([`Plan::kernels`]).
    pub struct KernelId = "k";
}

define_id! {
    /// An instruction of a [`Program`], and the value it defines.
    pub struct RegId = "v";
}

define_id! {
    /// An input of a [`Kernel`] ([`Kernel::inputs`]).
    pub struct InputId = "in";
}

/// Where a kernel input's elements come from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// Input data `Bindings::params[i]`, contiguous, read-only.
    Param(ParamId),
    /// Plan slot `i` (a value a previous kernel wrote), contiguous.
    Slot(SlotId),
    /// Virtual: element at linear index `l` of the view's base shape is the coordinate along
    /// `axis` of `l` (row-major), in the input's dtype.
    Iota {
        /// The axis.
        axis: usize,
    },
    /// Virtual: element at linear index `l` of the base shape is
    /// `kiln_ir::random::{uniform, uniform_f32, normal}(seeds[seed], l)` in the input's dtype
    /// (`uniform_f32` for an f32 uniform stream, as the reference evaluator does).
    Random {
        /// The distribution.
        dist: Distribution,
        /// Index into `Bindings::seeds`.
        seed: u32,
    },
}

/// One movement step of a [`View`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ViewOp {
    /// New shape over the same elements. The compiler emits it only where it is a pure
    /// stride computation: the view is contiguous at that point, or only size-1 dimensions
    /// are inserted or removed.
    Reshape(SymShape),
    /// Output axis `i` is axis `perm[i]`.
    Permute(Axes),
    /// Size-1 dimensions repeated to the given shape (same rank): stride 0.
    Broadcast(SymShape),
    /// Per axis: element `j` is element `start + j * step`; the result has `shape`.
    Slice {
        /// First index per axis.
        start: SmallVec<[i64; 4]>,
        /// Step per axis.
        step: SmallVec<[i64; 4]>,
        /// Resulting shape.
        shape: SymShape,
    },
}

/// A strided window onto a source: the source's contiguous `base` shape, then movement ops.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct View {
    /// The source's own shape (row-major, contiguous).
    pub base: SymShape,
    /// Movement ops applied in order.
    pub ops: SmallVec<[ViewOp; 2]>,
}

/// A view resolved for concrete sizes: element at multi-index `i` is at linear position
/// `offset + Σ i[k] * strides[k]` of the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Strided {
    /// The view's shape.
    pub shape: Shape,
    /// Element strides (0 for broadcast dimensions; may be negative).
    pub strides: SmallVec<[isize; 4]>,
    /// Element offset of index `[0, ..., 0]`.
    pub offset: isize,
}

impl Strided {
    /// A contiguous row-major view of `shape`.
    ///
    /// ```
    /// let s = kiln_compiler::Strided::contiguous(kiln_ir::Shape::from([2, 3]));
    /// assert_eq!(&s.strides[..], &[3, 1]);
    /// ```
    pub fn contiguous(shape: Shape) -> Strided {
        // Computed in place (no temporary `Vec`: this runs for every view of every launch).
        let dims = shape.dims();
        let mut strides: SmallVec<[isize; 4]> = SmallVec::from_elem(0, dims.len());
        let mut acc = 1isize;
        for (s, &d) in strides.iter_mut().zip(dims).rev() {
            *s = acc;
            acc = acc.wrapping_mul(d as isize);
        }
        Strided {
            shape,
            strides,
            offset: 0,
        }
    }

    /// Whether the view is the contiguous row-major layout of its shape at offset 0
    /// (size-1 dimensions may have any stride).
    ///
    /// ```
    /// use kiln_compiler::Strided;
    /// assert!(Strided::contiguous(kiln_ir::Shape::from([4, 5])).is_contiguous());
    /// ```
    pub fn is_contiguous(&self) -> bool {
        if self.offset != 0 {
            return false;
        }
        let mut acc = 1isize;
        for k in (0..self.shape.rank()).rev() {
            let d = self.shape.0[k];
            if d != 1 && self.strides[k] != acc {
                return false;
            }
            acc *= d as isize;
        }
        true
    }
}

impl View {
    /// The identity view of a contiguous source of `shape`.
    ///
    /// ```
    /// use kiln_ir::Dim;
    /// let v = kiln_compiler::View::identity([Dim::Sym(0)].into_iter().collect());
    /// assert!(v.ops.is_empty());
    /// ```
    pub fn identity(base: SymShape) -> View {
        View {
            base,
            ops: SmallVec::new(),
        }
    }

    /// The view's resulting relative shape.
    ///
    /// ```
    /// use kiln_ir::Dim;
    /// let v = kiln_compiler::View::identity([Dim::Sym(0), Dim::Const(1)].into_iter().collect());
    /// assert_eq!(v.shape().len(), 2);
    /// ```
    pub fn shape(&self) -> SymShape {
        let mut s = self.base.clone();
        for op in &self.ops {
            s = match op {
                ViewOp::Reshape(t) | ViewOp::Broadcast(t) | ViewOp::Slice { shape: t, .. } => {
                    t.clone()
                }
                ViewOp::Permute(p) => p.iter().map(|&a| s[a]).collect(),
            };
        }
        s
    }

    /// Resolves the view for the symbol values `dims`.
    ///
    /// ```
    /// use kiln_compiler::{View, ViewOp};
    /// use kiln_ir::Dim;
    /// let mut v = View::identity([Dim::Sym(0), Dim::Sym(1)].into_iter().collect());
    /// v.ops.push(ViewOp::Permute([1, 0].into_iter().collect()));
    /// let r = v.resolve(&[2, 3]);
    /// assert_eq!(r.shape.dims(), &[3, 2]);
    /// assert_eq!(&r.strides[..], &[1, 3]);
    /// ```
    pub fn resolve(&self, dims: &[usize]) -> Strided {
        let mut v = Strided::contiguous(resolve_shape(&self.base, dims));
        for op in &self.ops {
            match op {
                ViewOp::Reshape(t) => {
                    let target = resolve_shape(t, dims);
                    v = if v.is_contiguous() {
                        Strided {
                            offset: v.offset,
                            ..Strided::contiguous(target)
                        }
                    } else {
                        // Only size-1 dimensions differ: keep the strides of the others.
                        let kept: Vec<isize> = v
                            .shape
                            .dims()
                            .iter()
                            .zip(&v.strides)
                            .filter(|(d, _)| **d != 1)
                            .map(|(_, s)| *s)
                            .collect();
                        let mut it = kept.into_iter();
                        let strides = target
                            .dims()
                            .iter()
                            .map(|&d| if d == 1 { 0 } else { it.next().unwrap_or(0) })
                            .collect();
                        Strided {
                            shape: target,
                            strides,
                            offset: v.offset,
                        }
                    };
                }
                ViewOp::Permute(p) => {
                    v = Strided {
                        shape: kiln_ir::Shape(p.iter().map(|&a| v.shape.0[a]).collect()),
                        strides: p.iter().map(|&a| v.strides[a]).collect(),
                        offset: v.offset,
                    };
                }
                ViewOp::Broadcast(t) => {
                    let target = resolve_shape(t, dims);
                    let strides = (0..target.rank())
                        .map(|k| {
                            if v.shape.0[k] == 1 && target.0[k] != 1 {
                                0
                            } else {
                                v.strides[k]
                            }
                        })
                        .collect();
                    v = Strided {
                        shape: target,
                        strides,
                        offset: v.offset,
                    };
                }
                ViewOp::Slice { start, step, shape } => {
                    let target = resolve_shape(shape, dims);
                    let mut offset = v.offset;
                    let mut strides = SmallVec::new();
                    for k in 0..target.rank() {
                        if target.0[k] > 0 {
                            offset += start[k] as isize * v.strides[k];
                        }
                        strides.push(v.strides[k] * step[k] as isize);
                    }
                    v = Strided {
                        shape: target,
                        strides,
                        offset,
                    };
                }
            }
        }
        if v.shape.numel() == 0 {
            v.offset = 0; // an empty view reads nothing: keep its offset inside any buffer
        }
        v
    }
}

/// A kernel input: a source read through a view.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Input {
    /// Where the elements live.
    pub source: Source,
    /// Their dtype.
    pub dtype: DType,
    /// How the kernel indexes them (see [`KernelKind`] for the index space of each kind).
    pub view: View,
}

/// One instruction of a [`Program`]; instruction `i` defines value `i`.
#[derive(Clone, Debug, PartialEq)]
pub enum InstOp {
    /// The element of kernel input `i` at the current position.
    Load(InputId),
    /// Entry `i` of the run-time scalar table (`Bindings::scalars`, then the prelude's
    /// results), converted to the instruction's dtype.
    Scalar(u32),
    /// The accumulated value (matmul epilogues only).
    Acc,
    /// Elementwise unary op of value `x`.
    Unary(UnaryOp, RegId),
    /// Elementwise binary op of values `a` and `b` (equal dtypes).
    Binary(BinaryOp, RegId, RegId),
    /// `c ? a : b` (c is bool).
    Where(RegId, RegId, RegId),
    /// Conversion of value `x` to the instruction's dtype (rules of `kiln_ir::Op::Cast`).
    Cast(RegId),
}

/// An instruction with its result dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct Inst {
    /// The operation.
    pub op: InstOp,
    /// The result's dtype.
    pub dtype: DType,
}

/// A straight-line elementwise program. Semantics per op are those of
/// `kiln_ir::scalar_ops::{unary, binary}` (the oracle's): ops compute at the dtype's precision.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Program {
    /// Instructions in order; operands refer to earlier instructions.
    pub insts: IdVec<RegId, Inst>,
    /// The values the program produces, by result position.
    pub results: SmallVec<[RegId; 1]>,
}

/// What a kernel computes. The *index space* of a kernel is its `space` shape.
#[derive(Clone, Debug, PartialEq)]
pub enum KernelKind {
    /// For every position of `space`, evaluates `program` (inputs viewed over `space`) and
    /// writes result `j` to output `j` (contiguous, shape `space`).
    Elementwise {
        /// The fused program.
        program: Program,
    },
    /// Evaluates `program` over `space` (inputs viewed over `space`) and reduces result 0
    /// over `axes` into output 0: `space` with `axes` set to 1, contiguous. Sums and products
    /// of floats should accumulate at least as accurately as pairwise summation; integers
    /// wrap; `max`/`min` propagate NaN. Results `j ≥ 1` (*side outputs*, only for a
    /// [`crate::Target`] with `reduce_side_outputs`) are stored elementwise into output `j`
    /// (contiguous, shape `space`); the compiler emits them only where `axes` are a trailing
    /// run of the space's axes or do not contain its last axis.
    Reduce {
        /// The prologue producing the values to reduce.
        program: Program,
        /// The reduction.
        op: ReduceOp,
        /// Reduced axes of `space`.
        axes: Axes,
    },
    /// Like `Reduce`, but output 0 (`i64`) holds the index along `axis` of the first maximum
    /// or minimum (NaN counts as the extremum).
    ArgReduce {
        /// The prologue.
        program: Program,
        /// The reduction.
        op: ArgReduceOp,
        /// The axis.
        axis: usize,
    },
    /// `inputs[0]` is `a` viewed as `[.., m, k]`, `inputs[1]` is `b` viewed as `[.., k, n]`
    /// (equal batch dimensions), `space` is the output `[.., m, n]`. Without an epilogue,
    /// output 0 is the product; with one, the epilogue runs over `space` with `Acc` the
    /// product and `Load(i)` reading `inputs[i]` (i ≥ 2) viewed over `space`, and output 0
    /// is its result 0. Floats accumulate at least at their own precision.
    MatMul {
        /// Fused elementwise consumers of the product.
        epilogue: Option<Program>,
    },
    /// Gather: `inputs[0]` is the table (viewed over its own shape), `inputs[1]` the integer
    /// indices (viewed over their own shape); output 0 has shape `space`. An index outside
    /// `-n..n` is `kiln_ir::Error::IndexOutOfRange`.
    Take {
        /// The axis of the table.
        axis: usize,
    },
    /// Scatter-add, the adjoint of `Take`: `inputs[0]` are the updates, `inputs[1]` the
    /// integer indices (both viewed over their own shapes); output 0 (shape `space`) is zero
    /// except that each update is added at its index along `axis`; repeated indices
    /// accumulate. An index outside `-n..n` is `kiln_ir::Error::IndexOutOfRange`.
    ScatterAdd {
        /// The axis of the output.
        axis: usize,
    },
    /// Top-k along the last axis of `inputs[0]` (viewed over its own shape), descending, ties
    /// to the lower index, NaN largest. `indices[j]` says whether output `j` receives the
    /// `i64` indices (true) or the values (false). `space` is the output shape.
    TopK {
        /// How many.
        k: usize,
        /// Per output: indices (true) or values (false).
        indices: SmallVec<[bool; 2]>,
    },
    /// Concatenation of all inputs (each viewed over its own shape) along `axis` into output
    /// 0 of shape `space`.
    Concat {
        /// The axis.
        axis: usize,
    },
}

impl KernelKind {
    /// The kind's name: `"elementwise"`, `"reduce"`, `"argreduce"`, `"matmul"`,
    /// `"matmul+epilogue"`, `"take"`, `"scatter_add"`, `"top_k"` or `"concat"` (the inspector's
    /// [`crate::KernelReport::kind`]).
    ///
    /// ```
    /// assert_eq!(kiln_compiler::KernelKind::MatMul { epilogue: None }.name(), "matmul");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            KernelKind::Elementwise { .. } => "elementwise",
            KernelKind::Reduce { .. } => "reduce",
            KernelKind::ArgReduce { .. } => "argreduce",
            KernelKind::MatMul { epilogue: None } => "matmul",
            KernelKind::MatMul { epilogue: Some(_) } => "matmul+epilogue",
            KernelKind::Take { .. } => "take",
            KernelKind::ScatterAdd { .. } => "scatter_add",
            KernelKind::TopK { .. } => "top_k",
            KernelKind::Concat { .. } => "concat",
        }
    }
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// What it computes.
    pub kind: KernelKind,
    /// Its index space (see [`KernelKind`]).
    pub space: SymShape,
    /// Its inputs.
    pub inputs: IdVec<InputId, Input>,
    /// The slots it writes, in result order.
    pub outputs: SmallVec<[SlotId; 1]>,
}

/// A value a kernel writes: contiguous, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Slot {
    /// Element type.
    pub dtype: DType,
    /// Relative shape.
    pub shape: SymShape,
    /// The buffer holding it (see [`Plan::buffers`]).
    pub buffer: BufferId,
}

/// A memory buffer of the plan: it hosts slots whose lifetimes do not overlap (or one slot
/// written in place over another that dies at that kernel). All its slots share its dtype;
/// its length is the largest of theirs for the bound sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct BufferDesc {
    /// Element type.
    pub dtype: DType,
    /// The slots it hosts.
    pub slots: Vec<SlotId>,
    /// True if it holds a plan output (handed to the caller, never reused).
    pub output: bool,
    /// The kernel after which the buffer is no longer read (for early release).
    pub last_use: KernelId,
}

/// Where a plan output comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum OutputRef {
    /// A slot (contiguous, exactly the output's shape).
    Slot(SlotId),
    /// An input, returned unchanged.
    Param(ParamId),
}

/// The compiled form of a graph: kernels in execution order over slots and buffers.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Plan {
    /// Host-side scalar folding evaluated before the kernels: its results extend the scalar
    /// table after `Bindings::scalars`. Only `Scalar`, `Unary`, `Binary`, `Where`, `Cast`.
    pub prelude: Program,
    /// The kernels, in order.
    pub kernels: IdVec<KernelId, Kernel>,
    /// The slots.
    pub slots: IdVec<SlotId, Slot>,
    /// The buffers.
    pub buffers: IdVec<BufferId, BufferDesc>,
    /// The outputs, in request order.
    pub outputs: Vec<OutputRef>,
    /// Row groups, in kernel order and disjoint ([`RowGroup`]): only for a
    /// [`crate::Target`] with `row_groups`.
    pub groups: Vec<RowGroup>,
    /// Per kernel (empty: none): true when every slot the kernel writes is a plan output that
    /// no later kernel reads, so a backend may write it past its caches (non-temporal
    /// stores): nothing of this plan reads it back soon. Set by the memory plan.
    pub unread_outputs: IdVec<KernelId, bool>,
    /// Per kernel (empty: none): the buffers, not plan outputs, whose last use it is, to be
    /// released after it runs. Set by the memory plan (from `BufferDesc::last_use`), so
    /// running a plan does not scan every buffer after every kernel.
    pub releases: IdVec<KernelId, SmallVec<[BufferId; 2]>>,
    /// Where a donated parameter may become a buffer (see [`Donation`]). Set by the memory
    /// plan.
    pub donations: Vec<Donation>,
    /// Whether a run must confirm that no kernel before its first donation raised a value
    /// error before it writes over a donated parameter (`Backend::settle`): the plan has
    /// fallible kernels, all of them before every donation. Set by the memory plan.
    pub settle: bool,
}

/// A place where a run may write over a parameter instead of allocating: kernel `kernel`
/// creates buffer `buffer` as its output `output` and is the last reader of parameter
/// `param`, which it reads only at the output's own positions (an elementwise kernel, or a
/// matmul's epilogue, through the output's contiguous layout). A run that was handed the parameter's storage (a donation, see
/// `RunOptions::donate`) uses it as that buffer and reads the parameter through the output.
///
/// A donation comes after every fallible kernel of its plan (`Take`, `ScatterAdd`, programs
/// with an integer `//`, `%` or power), and a run confirms that none of them raised a value
/// error before it takes the first one ([`Plan::settle`]): an error reported after the
/// write could not leave the donor as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Donation {
    /// The parameter.
    pub param: ParamId,
    /// The kernel.
    pub kernel: KernelId,
    /// The buffer it creates.
    pub buffer: BufferId,
    /// The position, in the kernel's outputs, of the output writing that buffer.
    pub output: usize,
}

impl Plan {
    /// The concrete shape of slot `s` for the symbol values `dims`.
    ///
    /// ```
    /// let p = kiln_compiler::Plan::default();
    /// assert!(p.kernels.is_empty());
    /// ```
    pub fn slot_shape(&self, s: SlotId, dims: &[usize]) -> Shape {
        resolve_shape(&self.slots[s].shape, dims)
    }
}

/// Helper for building relative shapes in tests and docs.
///
/// ```
/// let s = kiln_compiler::plan::sym(&[Some(0), None]);
/// assert_eq!(s[1], kiln_ir::Dim::Const(1));
/// ```
pub fn sym(dims: &[Option<u32>]) -> SymShape {
    dims.iter()
        .map(|d| d.map_or(Dim::Const(1), Dim::Sym))
        .collect()
}

impl Plan {
    /// Checks the plan's invariants (run after the memory plan in debug builds): every input
    /// view of an elementwise or reduce kernel has the kernel's index space as its shape,
    /// every program operand precedes its user, each slot is written once before it is read
    /// and lives in a buffer of its dtype, and every output is written.
    ///
    /// ```
    /// assert!(kiln_compiler::Plan::default().verify().is_ok());
    /// ```
    pub fn verify(&self) -> Result<(), String> {
        self.check(true)
    }

    /// [`Plan::verify`] without the buffers, for a plan before its memory plan (after fusion,
    /// the reordering of parameter updates and the row groups, in debug builds), whose slots
    /// have no buffers yet.
    ///
    /// ```
    /// use kiln_ir::{build, HostData, LazyExpr, Shape, UnaryOp};
    /// let x = build::data(HostData::from(vec![1.0f32; 4]), Shape::from([4])).unwrap();
    /// let y = build::unary(UnaryOp::Exp, &x).unwrap();
    /// let c = kiln_compiler::compile(&LazyExpr::from_roots(&[&y])).unwrap();
    /// let mut before = c.plan.clone();
    /// before.buffers.clear(); // as fusion leaves it
    /// assert!(before.verify_structure().is_ok() && before.verify().is_err());
    /// ```
    pub fn verify_structure(&self) -> Result<(), String> {
        self.check(false)
    }

    /// The checks of [`Plan::verify`]; the slots' buffers only when `buffers`.
    fn check(&self, buffers: bool) -> Result<(), String> {
        let mut written = IdVec::filled(false, self.slots.len());
        for (k, kernel) in self.kernels.iter() {
            let fail = |m: String| Err(format!("kernel {}: {m}", k.index()));
            let program = match &kernel.kind {
                KernelKind::Elementwise { program }
                | KernelKind::Reduce { program, .. }
                | KernelKind::ArgReduce { program, .. } => Some(program),
                KernelKind::MatMul { epilogue } => epilogue.as_ref(),
                _ => None,
            };
            if let Some(p) = program {
                for (i, inst) in p.insts.iter() {
                    if let InstOp::Load(x) = inst.op {
                        if !kernel.inputs.contains(x) {
                            return fail(format!("load of missing input {}", x.index()));
                        }
                    }
                    if inst.op.operands().iter().any(|&o| o >= i) {
                        return fail(format!("instruction {} reads a later value", i.index()));
                    }
                }
                if p.results.iter().any(|&r| !p.insts.contains(r)) {
                    return fail("a result is not an instruction of the program".into());
                }
                let over_space = !matches!(kernel.kind, KernelKind::MatMul { .. });
                for (x, input) in kernel.inputs.iter() {
                    let in_program = over_space || x.index() >= 2;
                    if in_program && input.view.shape() != kernel.space {
                        return fail(format!(
                            "input {} view shape differs from the index space",
                            x.index()
                        ));
                    }
                }
            }
            for input in kernel.inputs.values() {
                if let Source::Slot(s) = input.source {
                    if !written.get(s).copied().unwrap_or(false) {
                        return fail(format!("slot {} read before it is written", s.index()));
                    }
                    if self.slots[s].dtype != input.dtype {
                        return fail(format!("slot {} read with the wrong dtype", s.index()));
                    }
                }
            }
            if let KernelKind::Reduce { program, .. } = &kernel.kind {
                if program.results.len() != kernel.outputs.len() {
                    return fail(format!(
                        "a reduction of {} results writes {} outputs",
                        program.results.len(),
                        kernel.outputs.len()
                    ));
                }
            }
            for &s in &kernel.outputs {
                let slot = self
                    .slots
                    .get(s)
                    .ok_or_else(|| format!("kernel {}: missing slot {}", k.index(), s.index()))?;
                if written[s] {
                    return fail(format!("slot {} written twice", s.index()));
                }
                written[s] = true;
                if !buffers {
                    continue;
                }
                let b = self
                    .buffers
                    .get(slot.buffer)
                    .ok_or_else(|| format!("slot {} has no buffer", s.index()))?;
                if b.dtype != slot.dtype {
                    return fail(format!("slot {} in a buffer of another dtype", s.index()));
                }
            }
        }
        for o in &self.outputs {
            if let OutputRef::Slot(s) = o {
                if !written.get(*s).copied().unwrap_or(false) {
                    return Err(format!("output slot {} is never written", s.index()));
                }
            }
        }
        self.verify_unread()?;
        self.verify_groups()
    }

    /// `unread_outputs`: empty or one flag per kernel; a flagged kernel writes only plan
    /// outputs that no later kernel reads.
    fn verify_unread(&self) -> Result<(), String> {
        if self.unread_outputs.is_empty() {
            return Ok(());
        }
        if self.unread_outputs.len() != self.kernels.len() {
            return Err(format!(
                "{} unread-output flags for {} kernels",
                self.unread_outputs.len(),
                self.kernels.len()
            ));
        }
        for (k, kernel) in self.kernels.iter() {
            if !self.unread_outputs[k] {
                continue;
            }
            for &s in &kernel.outputs {
                let output = self.outputs.contains(&OutputRef::Slot(s));
                let read_later = self
                    .kernels
                    .values()
                    .skip(k.index() + 1)
                    .any(|l| l.inputs.values().any(|i| i.source == Source::Slot(s)));
                if !output || read_later {
                    return Err(format!(
                        "kernel {} is marked as writing unread outputs, but slot {} is {}",
                        k.index(),
                        s.index(),
                        if output {
                            "read later"
                        } else {
                            "not a plan output"
                        }
                    ));
                }
            }
        }
        Ok(())
    }

    /// The invariants of [`RowGroup`] that the plan alone shows.
    fn verify_groups(&self) -> Result<(), String> {
        let mut next = KernelId::new(0);
        for (g, group) in self.groups.iter().enumerate() {
            let fail = |m: String| Err(format!("row group {g}: {m}"));
            if group.start < next
                || group.end <= group.start
                || group.end.index() > self.kernels.len()
            {
                return fail(format!("kernels {}..{}", group.start, group.end));
            }
            next = group.end;
            let kernels: Vec<&Kernel> = group.kernels().map(|k| &self.kernels[k]).collect();
            let written: Vec<SlotId> = kernels.iter().flat_map(|k| k.outputs.clone()).collect();
            for kernel in kernels {
                let fits = kernel.space.len() >= 2
                    && kernel.space[0] == group.rows
                    && match &kernel.kind {
                        KernelKind::Elementwise { .. } => true,
                        KernelKind::Reduce { axes, .. } => !axes.contains(&0),
                        _ => false,
                    };
                if !fits {
                    return fail(format!("kernel over {:?} cannot join", kernel.space));
                }
                for input in kernel.inputs.values() {
                    let inner = matches!(input.source, Source::Slot(s) if written.contains(&s));
                    if inner && !row_aligned(&input.view, group.rows) {
                        return fail(format!("{:?} is not read row by row", input.source));
                    }
                }
            }
        }
        Ok(())
    }
}

impl InstOp {
    /// The values the instruction reads (none for `Load`, `Scalar` and `Acc`).
    ///
    /// ```
    /// use kiln_compiler::{plan::RegId, InstOp};
    /// use kiln_ir::{BinaryOp, Id};
    /// let (a, b) = (RegId::new(0), RegId::new(1));
    /// assert_eq!(&InstOp::Binary(BinaryOp::Add, a, b).operands()[..], &[a, b]);
    /// ```
    pub fn operands(&self) -> SmallVec<[RegId; 3]> {
        match *self {
            InstOp::Unary(_, x) | InstOp::Cast(x) => [x].into_iter().collect(),
            InstOp::Binary(_, a, b) => [a, b].into_iter().collect(),
            InstOp::Where(c, a, b) => [c, a, b].into_iter().collect(),
            InstOp::Load(_) | InstOp::Scalar(_) | InstOp::Acc => SmallVec::new(),
        }
    }
}

/// Kernels `start..end` of a plan form a row group over `rows` (their common leading space
/// dimension). Invariants (checked by [`crate::Plan::verify`]):
/// - every kernel of the group is `Elementwise` or `Reduce`, its space has rank ≥ 2 and
///   leading dimension `rows`, and a reduction does not reduce axis 0;
/// - every input that reads a slot written inside the group is [`row_aligned`]: row `r` of
///   the kernel's space reads only row `r` of that slot;
/// - the memory plan reuses no buffer inside the group, and a kernel of the group writes in
///   place only over a slot that every kernel of the group reads row-aligned.
///
/// So the rows of a group are independent: a backend may run the group's kernels over any
/// partition of the rows, in any order or in parallel, with the same results.
///
/// ```
/// use kiln_compiler::{compile_for, Target};
/// use kiln_ir::{build, BinaryOp, HostData, Id, LazyExpr, ReduceOp, Shape};
/// // x - max(x, axis=1): a row reduction, then a pass reading its result per row
/// let x = build::data(HostData::from(vec![1.0f32; 8]), Shape::from([2, 4])).unwrap();
/// let m = build::reduce(ReduceOp::Max, &x, Some(&[1]), true).unwrap();
/// let m = build::broadcast_to(&m, &Shape::from([2, 4])).unwrap();
/// let y = build::binary(BinaryOp::Sub, &x, &m).unwrap();
/// let t = Target { row_groups: true, ..Target::default() };
/// let c = compile_for(&LazyExpr::from_roots(&[&y]), t).unwrap();
/// let g = &c.plan.groups[0];
/// assert_eq!((g.start.index(), g.end.index()), (0, 2));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowGroup {
    /// The first kernel.
    pub start: KernelId,
    /// One past the last kernel.
    pub end: KernelId,
    /// The leading dimension every kernel's space shares.
    pub rows: Dim,
}

impl RowGroup {
    /// The group's kernels, in order.
    ///
    /// ```
    /// use kiln_compiler::{plan::KernelId, RowGroup};
    /// use kiln_ir::{Dim, Id};
    /// let g = RowGroup { start: KernelId::new(2), end: KernelId::new(4), rows: Dim::Sym(0) };
    /// assert_eq!(g.kernels().map(|k| k.index()).collect::<Vec<_>>(), [2, 3]);
    /// ```
    pub fn kernels(&self) -> impl DoubleEndedIterator<Item = KernelId> + ExactSizeIterator {
        (self.start.index()..self.end.index()).map(KernelId::new)
    }

    /// Whether kernel `k` belongs to the group.
    ///
    /// ```
    /// use kiln_compiler::{plan::KernelId, RowGroup};
    /// use kiln_ir::{Dim, Id};
    /// let g = RowGroup { start: KernelId::new(2), end: KernelId::new(4), rows: Dim::Sym(0) };
    /// assert!(g.contains(KernelId::new(3)) && !g.contains(KernelId::new(4)));
    /// ```
    pub fn contains(&self, k: KernelId) -> bool {
        self.start <= k && k < self.end
    }
}

/// Whether a view over a kernel's space reads, at row `r` of the space, only row `r` of its
/// contiguous source: the source's leading dimension is `rows` and the view only reshapes
/// and broadcasts without touching that dimension (so the row stride is the source's).
///
/// ```
/// use kiln_compiler::{group::row_aligned, View, ViewOp};
/// use kiln_ir::Dim;
/// let m = View::identity([Dim::Sym(0), Dim::Const(1)].into_iter().collect());
/// let mut b = m.clone();
/// b.ops.push(ViewOp::Broadcast([Dim::Sym(0), Dim::Sym(1)].into_iter().collect()));
/// assert!(row_aligned(&b, Dim::Sym(0)));
/// b.ops.push(ViewOp::Permute([1, 0].into_iter().collect()));
/// assert!(!row_aligned(&b, Dim::Sym(0)));
/// ```
pub fn row_aligned(view: &View, rows: Dim) -> bool {
    matches!(rows, Dim::Sym(_))
        && view.base.first() == Some(&rows)
        && view.ops.iter().all(|op| match op {
            ViewOp::Reshape(s) | ViewOp::Broadcast(s) => s.first() == Some(&rows),
            ViewOp::Permute(_) | ViewOp::Slice { .. } => false,
        })
}
