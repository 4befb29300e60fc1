//! The [`Backend`] trait every device implements, and [`run`], the backend-neutral loop that
//! executes a [`Plan`]: evaluate the scalar prelude, upload inputs, allocate buffers when first
//! written, launch kernels in order, release buffers after their last use, download outputs.
//!
//! Depends on [`crate::plan`], `kiln-ir` and `kiln-reference` (the prelude's scalar
//! arithmetic is the oracle's).

use crate::plan::{InstOp, Kernel, OutputRef, Plan, Program, Source, Strided};
use kiln_ir::{resolve_shape, Bindings, DType, HostData, Result, Scalar, Shape};

/// How a kernel reads one input.
#[derive(Debug)]
pub enum Arg<'a, B> {
    /// From this buffer (a parameter or an earlier kernel's output).
    Buffer(&'a B),
    /// From the kernel's own output `j`, which is written in place over this input: the
    /// compiler guarantees the input is read with the output's own contiguous layout, so
    /// element `i` is read before element `i` is written.
    Output(usize),
    /// A virtual source (`Iota`, `Random`): no buffer.
    Virtual,
}

/// The concrete sizes and values of one kernel launch.
#[derive(Debug)]
pub struct Launch<'a> {
    /// The kernel's index space, resolved.
    pub space: Shape,
    /// Each input's view, resolved (same order as `Kernel::inputs`).
    pub views: Vec<Strided>,
    /// The scalar table: `Bindings::scalars` followed by the prelude's results.
    pub scalars: &'a [Scalar],
    /// The random seeds.
    pub seeds: &'a [u64],
    /// The symbol values (`Bindings::dims`): resolve any relative shape of the plan, e.g. an
    /// `Iota`/`Random` input's base shape, with `kiln_ir::resolve_shape(shape, dims)`.
    pub dims: &'a [usize],
}

/// A device that can execute plan kernels.
///
/// Buffers are typed: a buffer is allocated for one dtype and a length in elements. `launch`
/// writes every element of each output slot (`outputs[j]` holds at least the slot's element
/// count; only that prefix is meaningful). Value errors (a bad `take` index, integer division
/// by zero) are returned as `kiln_ir::Error`, never panics; after an error the run is
/// abandoned and every buffer released.
pub trait Backend: Send + Sync {
    /// The device's buffer type.
    type Buffer: Send + Sync;
    /// A short name (`"cpu"`, `"wgpu"`).
    fn name(&self) -> &'static str;
    /// A buffer of `len` elements of `dtype` (contents unspecified). May come from a pool.
    fn allocate(&self, dtype: DType, len: usize) -> Result<Self::Buffer>;
    /// Hands a buffer back (to a pool, or freed).
    fn release(&self, buffer: Self::Buffer);
    /// Makes host data available to kernels (zero-copy where the device can read host memory).
    fn upload(&self, data: &HostData) -> Result<Self::Buffer>;
    /// The first `len` elements of a buffer as host data (consumes the buffer; zero-copy
    /// where possible).
    fn download(&self, buffer: Self::Buffer, dtype: DType, len: usize) -> Result<HostData>;
    /// The most arrays one kernel may read (a GPU's storage-buffer binding limit, less the
    /// bindings a kernel needs besides its inputs); the compiler splits fused groups to fit.
    /// Default: no limit.
    fn max_kernel_inputs(&self) -> usize {
        usize::MAX
    }
    /// Whether this backend's reductions store side outputs (prologue results `j ≥ 1` of a
    /// `KernelKind::Reduce`, see [`crate::Target::reduce_side_outputs`]). Default: no.
    fn reduce_side_outputs(&self) -> bool {
        false
    }
    /// Runs one kernel.
    fn launch(
        &self,
        kernel: &Kernel,
        launch: &Launch<'_>,
        inputs: &[Arg<'_, Self::Buffer>],
        outputs: &mut [Self::Buffer],
    ) -> Result<()>;
}

/// Evaluates a scalar-only program on the host (the plan prelude), appending its results to
/// `table`.
///
/// ```
/// use kiln_compiler::{Inst, InstOp, Program};
/// use kiln_ir::{BinaryOp, DType, Scalar};
/// let p = Program {
///     insts: vec![
///         Inst { op: InstOp::Scalar(0), dtype: DType::F64 },
///         Inst { op: InstOp::Scalar(1), dtype: DType::F64 },
///         Inst { op: InstOp::Binary(BinaryOp::Mul, 0, 1), dtype: DType::F64 },
///     ],
///     results: [2].into_iter().collect(),
/// };
/// let mut table = vec![Scalar::Float(0.5), Scalar::Float(4.0)];
/// kiln_compiler::eval_prelude(&p, &mut table).unwrap();
/// assert_eq!(table[2], Scalar::Float(2.0));
/// ```
pub fn eval_prelude(prelude: &Program, table: &mut Vec<Scalar>) -> Result<()> {
    let mut vals: Vec<Scalar> = Vec::with_capacity(prelude.insts.len());
    for inst in &prelude.insts {
        let ty = |i: u32| prelude.insts[i as usize].dtype;
        let v = match inst.op {
            InstOp::Scalar(i) => table[i as usize].cast(inst.dtype),
            InstOp::Unary(op, x) => {
                kiln_reference::unary(op, ty(x), vals[x as usize]).cast(inst.dtype)
            }
            InstOp::Binary(op, a, b) => {
                kiln_reference::binary(op, ty(a), vals[a as usize], vals[b as usize])?
                    .cast(inst.dtype)
            }
            InstOp::Where(c, a, b) => {
                if vals[c as usize].as_bool() {
                    vals[a as usize]
                } else {
                    vals[b as usize]
                }
            }
            InstOp::Cast(x) => vals[x as usize].cast(inst.dtype),
            InstOp::Load(_) | InstOp::Acc => unreachable!("the prelude reads only scalars"),
        };
        vals.push(v);
    }
    table.extend(prelude.results.iter().map(|&r| vals[r as usize]));
    Ok(())
}

/// Executes `plan` with `bindings` on `backend`; returns one value per plan output.
///
/// See [`crate::Engine`] for the usual entry point (cache + compile + run).
///
/// ```
/// use kiln_compiler::{Arg, Backend, Kernel, Launch};
/// use kiln_ir::{DType, HostData, Result};
/// // A host "device" that only passes data through (it runs no kernels).
/// struct Host;
/// impl Backend for Host {
///     type Buffer = HostData;
///     fn name(&self) -> &'static str { "host" }
///     fn allocate(&self, dtype: DType, _: usize) -> Result<HostData> {
///         Err(kiln_ir::Error::InvalidArgument { op: "allocate", message: format!("no {dtype} buffers"), hint: "use a real backend".into() })
///     }
///     fn release(&self, _: HostData) {}
///     fn upload(&self, d: &HostData) -> Result<HostData> { Ok(d.clone()) }
///     fn download(&self, b: HostData, _: DType, _: usize) -> Result<HostData> { Ok(b) }
///     fn launch(&self, _: &Kernel, _: &Launch<'_>, _: &[Arg<'_, HostData>], _: &mut [HostData]) -> Result<()> {
///         Err(kiln_ir::Error::InvalidArgument { op: "launch", message: "no kernels".into(), hint: "use a real backend".into() })
///     }
/// }
/// use kiln_compiler::{run, OutputRef, Plan};
/// let plan = Plan { outputs: vec![OutputRef::Param(0)], ..Plan::default() };
/// let b = kiln_ir::Bindings { params: vec![HostData::from(vec![1.0f32, 2.0])], ..Default::default() };
/// assert_eq!(run(&Host, &plan, &b).unwrap()[0].len(), 2);
/// ```
pub fn run<B: Backend>(backend: &B, plan: &Plan, bindings: &Bindings) -> Result<Vec<HostData>> {
    let mut scalars = bindings.scalars.clone();
    eval_prelude(&plan.prelude, &mut scalars)?;
    let dims = &bindings.dims;
    let mut params: Vec<Option<B::Buffer>> = (0..bindings.params.len()).map(|_| None).collect();
    let mut bufs: Vec<Option<B::Buffer>> = (0..plan.buffers.len()).map(|_| None).collect();
    let result = run_kernels(backend, plan, bindings, &scalars, &mut params, &mut bufs);
    let out = result.and_then(|()| {
        let mut out: Vec<HostData> = Vec::with_capacity(plan.outputs.len());
        let mut done: Vec<(u32, usize)> = Vec::new();
        for o in &plan.outputs {
            match o {
                OutputRef::Param(p) => out.push(bindings.params[*p as usize].clone()),
                OutputRef::Slot(s) => {
                    if let Some(&(_, k)) = done.iter().find(|(d, _)| d == s) {
                        let v = out[k].clone();
                        out.push(v);
                        continue;
                    }
                    let slot = &plan.slots[*s as usize];
                    let b = bufs[slot.buffer as usize]
                        .take()
                        .expect("output buffer was written");
                    let len = resolve_shape(&slot.shape, dims).numel();
                    done.push((*s, out.len()));
                    out.push(backend.download(b, slot.dtype, len)?);
                }
            }
        }
        Ok(out)
    });
    for b in bufs.into_iter().flatten() {
        backend.release(b);
    }
    for b in params.into_iter().flatten() {
        backend.release(b);
    }
    out
}

fn run_kernels<B: Backend>(
    backend: &B,
    plan: &Plan,
    bindings: &Bindings,
    scalars: &[Scalar],
    params: &mut [Option<B::Buffer>],
    bufs: &mut [Option<B::Buffer>],
) -> Result<()> {
    let dims = &bindings.dims;
    for (ki, kernel) in plan.kernels.iter().enumerate() {
        // Upload the parameters this kernel reads.
        for input in &kernel.inputs {
            if let Source::Param(p) = input.source {
                if params[p as usize].is_none() {
                    params[p as usize] = Some(backend.upload(&bindings.params[p as usize])?);
                }
            }
        }
        // Take (or allocate) the output buffers.
        let out_bufs: Vec<u32> = kernel
            .outputs
            .iter()
            .map(|&s| plan.slots[s as usize].buffer)
            .collect();
        let mut outs: Vec<B::Buffer> = Vec::with_capacity(out_bufs.len());
        for &b in &out_bufs {
            let desc = &plan.buffers[b as usize];
            let buf = match bufs[b as usize].take() {
                Some(buf) => buf,
                None => {
                    let len = desc
                        .slots
                        .iter()
                        .map(|&s| plan.slot_shape(s, dims).numel())
                        .max()
                        .unwrap_or(0);
                    backend.allocate(desc.dtype, len)?
                }
            };
            outs.push(buf);
        }
        let views: Vec<Strided> = kernel.inputs.iter().map(|i| i.view.resolve(dims)).collect();
        let launch = Launch {
            space: resolve_shape(&kernel.space, dims),
            views,
            scalars,
            seeds: &bindings.seeds,
            dims,
        };
        let result = {
            let args: Vec<Arg<'_, B::Buffer>> = kernel
                .inputs
                .iter()
                .map(|i| match i.source {
                    Source::Param(p) => {
                        Arg::Buffer(params[p as usize].as_ref().expect("uploaded above"))
                    }
                    Source::Slot(s) => {
                        let b = plan.slots[s as usize].buffer;
                        match out_bufs.iter().position(|&o| o == b) {
                            Some(j) => Arg::Output(j),
                            None => Arg::Buffer(
                                bufs[b as usize]
                                    .as_ref()
                                    .expect("slot written by an earlier kernel"),
                            ),
                        }
                    }
                    Source::Iota { .. } | Source::Random { .. } => Arg::Virtual,
                })
                .collect();
            backend.launch(kernel, &launch, &args, &mut outs)
        };
        for (&b, buf) in out_bufs.iter().zip(outs) {
            bufs[b as usize] = Some(buf);
        }
        result?;
        // Release buffers whose last reader was this kernel.
        for (b, desc) in plan.buffers.iter().enumerate() {
            if !desc.output && desc.last_use == ki {
                if let Some(buf) = bufs[b].take() {
                    backend.release(buf);
                }
            }
        }
    }
    Ok(())
}
