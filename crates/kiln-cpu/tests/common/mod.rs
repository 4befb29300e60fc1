//! A small harness for the backend tests: build `Plan`s by hand with concrete sizes (turned
//! into relative shapes here), run them on the CPU backend with `kiln_compiler::run`, and
//! compare with `kiln_reference::evaluate` of the equivalent `LazyExpr` (the oracle).
#![allow(dead_code)]

use kiln_compiler::{
    BufferDesc, BufferId, Input, InputId, Inst, InstOp, Kernel, KernelId, KernelKind, OutputRef,
    Plan, Program, RegId, Slot, SlotId, Source, View, ViewOp,
};
use kiln_ir::{
    build, BinaryOp, Bindings, DType, Dim, Distribution, HostData, Id, IdVec, LazyExpr, NodeRef,
    Result, Scalar, Shape, SymShape, UnaryOp,
};
use smallvec::SmallVec;

/// A view in concrete sizes.
#[derive(Clone, Debug)]
pub enum VOp {
    Reshape(Vec<usize>),
    Permute(Vec<usize>),
    Broadcast(Vec<usize>),
    Slice(Vec<i64>, Vec<i64>, Vec<usize>),
}

/// Plan builder.
#[derive(Default)]
pub struct Pb {
    pub plan: Plan,
    pub bindings: Bindings,
    slot_dims: Vec<Vec<usize>>,
}

impl Pb {
    pub fn new() -> Pb {
        Pb::default()
    }

    /// The relative form of a concrete shape (sizes other than 0 and 1 become symbols).
    pub fn s(&mut self, dims: &[usize]) -> SymShape {
        dims.iter()
            .map(|&d| {
                if d <= 1 {
                    Dim::Const(d)
                } else {
                    let syms = &mut self.bindings.dims;
                    match syms.iter().position(|&v| v == d) {
                        Some(p) => Dim::Sym(p as u32),
                        None => {
                            syms.push(d);
                            Dim::Sym(syms.len() as u32 - 1)
                        }
                    }
                }
            })
            .collect()
    }

    pub fn view(&mut self, base: &[usize], ops: &[VOp]) -> View {
        let mut v = View::identity(self.s(base));
        for op in ops {
            v.ops.push(match op {
                VOp::Reshape(t) => ViewOp::Reshape(self.s(t)),
                VOp::Permute(p) => ViewOp::Permute(p.iter().copied().collect()),
                VOp::Broadcast(t) => ViewOp::Broadcast(self.s(t)),
                VOp::Slice(a, b, t) => ViewOp::Slice {
                    start: a.iter().copied().collect(),
                    step: b.iter().copied().collect(),
                    shape: self.s(t),
                },
            });
        }
        v
    }

    pub fn scalar(&mut self, v: Scalar) -> u32 {
        self.bindings.scalars.push(v);
        self.bindings.scalars.len() as u32 - 1
    }

    /// An input reading parameter data of shape `base` through `ops`.
    pub fn param(&mut self, data: HostData, base: &[usize], ops: &[VOp]) -> Input {
        assert_eq!(data.len(), base.iter().product::<usize>());
        let dtype = data.dtype();
        let p = self.bindings.params.push(data.into());
        Input {
            source: Source::Param(p),
            dtype,
            view: self.view(base, ops),
        }
    }

    /// An input reading slot `s` through `ops`.
    pub fn slot(&mut self, s: SlotId, ops: &[VOp]) -> Input {
        let base = self.slot_dims[s.index()].clone();
        let dtype = self.plan.slots[s].dtype;
        Input {
            source: Source::Slot(s),
            dtype,
            view: self.view(&base, ops),
        }
    }

    pub fn iota(&mut self, axis: usize, dtype: DType, base: &[usize], ops: &[VOp]) -> Input {
        Input {
            source: Source::Iota { axis },
            dtype,
            view: self.view(base, ops),
        }
    }

    pub fn random(
        &mut self,
        dist: Distribution,
        seed: u64,
        dtype: DType,
        base: &[usize],
        ops: &[VOp],
    ) -> Input {
        self.bindings.seeds.push(seed);
        let seed = self.bindings.seeds.len() as u32 - 1;
        Input {
            source: Source::Random { dist, seed },
            dtype,
            view: self.view(base, ops),
        }
    }

    pub fn new_slot(&mut self, dtype: DType, dims: &[usize], buffer: Option<BufferId>) -> SlotId {
        let shape = self.s(dims);
        let s = self.plan.slots.next_key();
        let buffer = buffer.unwrap_or_else(|| {
            self.plan.buffers.push(BufferDesc {
                dtype,
                slots: vec![],
                output: false,
                last_use: KernelId::new(0),
            })
        });
        self.plan.buffers[buffer].slots.push(s);
        self.plan.slots.push(Slot {
            dtype,
            shape,
            buffer,
        });
        self.slot_dims.push(dims.to_vec());
        s
    }

    /// Adds a kernel writing fresh slots of the given dtypes and shapes.
    pub fn kernel(
        &mut self,
        kind: KernelKind,
        space: &[usize],
        inputs: Vec<Input>,
        outs: &[(DType, &[usize])],
    ) -> Vec<SlotId> {
        let slots: Vec<SlotId> = outs
            .iter()
            .map(|(d, s)| self.new_slot(*d, s, None))
            .collect();
        let space = self.s(space);
        self.plan.kernels.push(Kernel {
            kind,
            space,
            inputs: inputs.into(),
            outputs: slots.iter().copied().collect(),
        });
        slots
    }

    /// Adds a kernel writing one slot in the buffer of slot `over` (in place).
    pub fn kernel_over(
        &mut self,
        kind: KernelKind,
        space: &[usize],
        inputs: Vec<Input>,
        out: (DType, &[usize]),
        over: SlotId,
    ) -> SlotId {
        let b = self.plan.slots[over].buffer;
        let s = self.new_slot(out.0, out.1, Some(b));
        let space = self.s(space);
        self.plan.kernels.push(Kernel {
            kind,
            space,
            inputs: inputs.into(),
            outputs: [s].into_iter().collect(),
        });
        s
    }

    pub fn output(&mut self, s: SlotId) {
        self.plan.outputs.push(OutputRef::Slot(s));
    }

    /// Finishes the buffer descriptions and runs the plan on the CPU backend.
    pub fn run(mut self) -> Result<Vec<HostData>> {
        for (b, desc) in self.plan.buffers.iter_mut() {
            let mut last = KernelId::new(0);
            for (ki, k) in self.plan.kernels.iter() {
                let reads = k
                    .inputs
                    .values()
                    .any(|i| matches!(i.source, Source::Slot(s) if self.plan.slots[s].buffer == b));
                let writes = k.outputs.iter().any(|&s| self.plan.slots[s].buffer == b);
                if reads || writes {
                    last = ki;
                }
            }
            desc.last_use = last;
            desc.output = self
                .plan
                .outputs
                .iter()
                .any(|o| matches!(o, OutputRef::Slot(s) if self.plan.slots[*s].buffer == b));
        }
        kiln_compiler::run(kiln_cpu::cpu(), &self.plan, &self.bindings)
    }
}

/// Program builder.
#[derive(Default)]
pub struct P {
    pub insts: IdVec<RegId, Inst>,
}

impl P {
    pub fn new() -> P {
        P::default()
    }
    fn push(&mut self, op: InstOp, dtype: DType) -> RegId {
        self.insts.push(Inst { op, dtype })
    }
    pub fn load(&mut self, i: usize, dt: DType) -> RegId {
        self.push(InstOp::Load(InputId::new(i)), dt)
    }
    pub fn scalar(&mut self, i: u32, dt: DType) -> RegId {
        self.push(InstOp::Scalar(i), dt)
    }
    pub fn acc(&mut self, dt: DType) -> RegId {
        self.push(InstOp::Acc, dt)
    }
    pub fn un(&mut self, op: UnaryOp, x: RegId) -> RegId {
        let d = self.insts[x].dtype;
        self.push(
            InstOp::Unary(op, x),
            if op.is_predicate() { DType::Bool } else { d },
        )
    }
    pub fn bin(&mut self, op: BinaryOp, a: RegId, b: RegId) -> RegId {
        let d = self.insts[a].dtype;
        self.push(
            InstOp::Binary(op, a, b),
            if op.is_predicate() { DType::Bool } else { d },
        )
    }
    pub fn wh(&mut self, c: RegId, a: RegId, b: RegId) -> RegId {
        let d = self.insts[a].dtype;
        self.push(InstOp::Where(c, a, b), d)
    }
    pub fn cast(&mut self, x: RegId, dt: DType) -> RegId {
        self.push(InstOp::Cast(x), dt)
    }
    pub fn done(self, results: &[RegId]) -> Program {
        Program {
            insts: self.insts,
            results: results.iter().copied().collect::<SmallVec<[RegId; 1]>>(),
        }
    }
}

/// A program that loads input 0 (of `dt`) and returns it.
pub fn load_only(dt: DType) -> Program {
    let mut p = P::new();
    let x = p.load(0, dt);
    p.done(&[x])
}

// ----- the oracle side -----

pub fn node(d: HostData, shape: &[usize]) -> NodeRef {
    build::data(d, Shape::from(shape)).unwrap()
}

pub fn reference(roots: &[&NodeRef]) -> Result<Vec<HostData>> {
    kiln_reference::evaluate(&LazyExpr::from_roots(roots))
}

// ----- data -----

/// Deterministic pseudo-random numbers in `[-2, 2)`.
pub fn floats(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
        })
        .collect()
}

pub fn f32s(n: usize, seed: u64) -> HostData {
    HostData::from(
        floats(n, seed)
            .into_iter()
            .map(|x| x as f32)
            .collect::<Vec<_>>(),
    )
}

pub fn f64s(n: usize, seed: u64) -> HostData {
    HostData::from(floats(n, seed))
}

pub fn i64s(n: usize, seed: u64, range: i64) -> HostData {
    HostData::from(
        floats(n, seed)
            .into_iter()
            .map(|x| (x / 2.0 * range as f64).round() as i64)
            .collect::<Vec<_>>(),
    )
}

pub fn i32s(n: usize, seed: u64, range: i64) -> HostData {
    HostData::from(
        floats(n, seed)
            .into_iter()
            .map(|x| (x / 2.0 * range as f64).round() as i32)
            .collect::<Vec<_>>(),
    )
}

pub fn bools(n: usize, seed: u64) -> HostData {
    HostData::from(
        floats(n, seed)
            .into_iter()
            .map(|x| x > 0.3)
            .collect::<Vec<_>>(),
    )
}

// ----- comparison -----

/// Asserts equal dtypes, lengths and values (floats within `rtol`, NaN equal to NaN).
pub fn assert_close(got: &[HostData], want: &[HostData], rtol: f64) {
    assert_close_abs(got, want, rtol, 0.0)
}

/// [`assert_close`] with an absolute tolerance `atol` added (for results with cancellation).
pub fn assert_close_abs(got: &[HostData], want: &[HostData], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "number of outputs");
    for (o, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.dtype(), w.dtype(), "output {o} dtype");
        assert_eq!(g.len(), w.len(), "output {o} length");
        for i in 0..g.len() {
            let (a, b) = (g.get(i), w.get(i));
            let ok = match (a, b) {
                (Scalar::Float(x), Scalar::Float(y)) => {
                    x == y
                        || (x.is_nan() && y.is_nan())
                        || (x - y).abs() <= rtol * y.abs().max(1e-30) + atol
                }
                _ => a == b,
            };
            assert!(ok, "output {o} element {i}: got {a:?}, want {b:?}");
        }
    }
}

/// Asserts that the plan's outputs match the reference exactly (ints) or to `rtol` (floats).
pub fn check(pb: Pb, roots: &[&NodeRef], rtol: f64) {
    check_abs(pb, roots, rtol, 0.0)
}

/// [`check`] with an absolute tolerance too.
pub fn check_abs(pb: Pb, roots: &[&NodeRef], rtol: f64, atol: f64) {
    let got = pb.run();
    let want = reference(roots);
    match (got, want) {
        (Ok(g), Ok(w)) => assert_close_abs(&g, &w, rtol, atol),
        (g, w) => assert_eq!(g.map(|_| ()), w.map(|_| ()), "error results differ"),
    }
}
