//! The [`Backend`] trait every device implements, and [`run`], the backend-neutral loop that
//! executes a [`Plan`]: evaluate the scalar prelude, upload inputs, allocate buffers when first
//! written, launch kernels in order (a row group's kernels with one call), release buffers
//! after their last use, download outputs — or, on a backend that keeps results
//! ([`Backend::keeps_results`], [`RunOptions::keep`]), hand them out as resident values.
//! A parameter resident on this backend is read in place (never uploaded again); one
//! resident on another device is moved through the host with a `tracing` event at
//! [`TRANSFER_TARGET`], or refused under [`RunOptions::strict`].
//!
//! Depends on [`crate::plan`], `kiln-ir` (the prelude's scalar arithmetic is
//! `kiln_ir::scalar_ops`, the oracle's own definitions) and `tracing`.

use crate::plan::RowGroup;
use crate::plan::{
    BufferId, InstOp, Kernel, KernelId, OutputRef, Plan, Program, RegId, SlotId, Source, Strided,
};
use kiln_ir::{
    resolve_shape, Bindings, DType, DeviceData, HostData, Id, IdVec, ParamId, Result, Scalar,
    Shape, Value,
};
use smallvec::SmallVec;

/// How a kernel reads one input.
#[derive(Debug)]
pub enum Arg<'a, B> {
    /// From this buffer (a parameter or an earlier kernel's output).
    Buffer(&'a B),
    /// From the kernel's own output `j`, which is written in place over this input: the
    /// compiler guarantees the input is read with the output's own contiguous layout, so
    /// element `i` is read before element `i` is written. Elementwise kernels, and (for a
    /// donated parameter) a matmul's epilogue inputs.
    Output(usize),
    /// A virtual source (`Iota`, `Random`): no buffer.
    Virtual,
}

/// How a kernel of a row group reads one input ([`Backend::launch_group`]).
#[derive(Debug)]
pub enum GroupArg<'a, B> {
    /// From this buffer, written before the group (or a parameter).
    Buffer(&'a B),
    /// From the group's buffer `i`, written by an earlier kernel of the group — or by this
    /// kernel itself (in place) when `i` is among its outputs.
    Group(usize),
    /// A virtual source (`Iota`, `Random`): no buffer.
    Virtual,
}

/// One kernel of a row group, resolved for launch ([`Backend::launch_group`]).
#[derive(Debug)]
pub struct GroupKernel<'a, B> {
    /// The kernel.
    pub kernel: &'a Kernel,
    /// Its sizes and views for the whole space (all rows).
    pub launch: Launch<'a>,
    /// Its inputs.
    pub inputs: Vec<GroupArg<'a, B>>,
    /// The group buffer each output goes to.
    pub outputs: smallvec::SmallVec<[usize; 2]>,
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
    /// Nothing of the plan reads this kernel's outputs after it ([`Plan::unread_outputs`]):
    /// the backend may write them with non-temporal stores when they are large.
    pub unread_outputs: bool,
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
    /// Whether this backend executes row groups ([`Backend::launch_group`], see
    /// [`crate::group::RowGroup`]). Default: no.
    fn row_groups(&self) -> bool {
        false
    }
    /// Runs the kernels of a row group over `rows` rows (in any order of rows, with the
    /// results of running them one by one). `buffers` are the buffers the group writes
    /// (`lens[i]` elements of buffer `i` are written, `lens[i] / rows` per row). Called only
    /// when [`Backend::row_groups`] says so. Default: an error.
    fn launch_group(
        &self,
        rows: usize,
        kernels: &[GroupKernel<'_, Self::Buffer>],
        buffers: &mut [Self::Buffer],
        lens: &[usize],
    ) -> Result<()> {
        let _ = (rows, kernels, buffers, lens);
        Err(kiln_ir::Error::InvalidArgument {
            op: "launch_group",
            message: format!("the {} backend does not execute row groups", self.name()),
            hint: "compile for a target without row groups".into(),
        })
    }
    /// Whether results may stay on this device after an evaluation ([`Backend::keep`],
    /// [`Backend::resident`]). Default: no (results are downloaded).
    fn keeps_results(&self) -> bool {
        false
    }
    /// Wraps a result buffer (`len` elements of `dtype`) as a resident value that outlives
    /// the evaluation; the backend takes the storage back when its last handle drops.
    /// Called only when [`Backend::keeps_results`] says so. Default: an error.
    fn keep(&self, buffer: Self::Buffer, dtype: DType, len: usize) -> Result<DeviceData> {
        let _ = (dtype, len);
        self.release(buffer);
        Err(kiln_ir::Error::InvalidArgument {
            op: "keep",
            message: format!("the {} backend does not keep results", self.name()),
            hint: "download the results instead".into(),
        })
    }
    /// The buffer inside `value` if this backend made it (a kernel reads it in place),
    /// `None` for a value resident elsewhere. Default: `None`.
    fn resident<'a>(&self, value: &'a DeviceData) -> Option<&'a Self::Buffer> {
        let _ = value;
        None
    }
    /// Whether [`Backend::donate`] can hand out storage: plans compiled for this backend then
    /// leave room for donations (see `Target::donations`). Default: no.
    fn donates(&self) -> bool {
        false
    }
    /// Takes the storage of `value`, a resident value of this backend that nothing will read
    /// again (see [`RunOptions::donate`]), as a buffer to write a result over: `value`'s own
    /// handle then reads as an error and no longer returns the storage when dropped.
    /// `None` when this backend did not make it or does not donate. Default: `None`.
    fn donate(&self, value: &DeviceData) -> Option<Self::Buffer> {
        let _ = value;
        None
    }
    /// Waits for the launches so far to finish and returns the value error (an index out of
    /// range, an integer division by zero) that any kernel behind the buffers `live` raised.
    /// A run calls it before it writes over its first donated parameter when its plan has
    /// fallible kernels ([`Plan::settle`]), so that a failing evaluation leaves every donor
    /// as it was. A backend whose kernels report value errors as they run needs nothing
    /// here. Default: `Ok(())`.
    fn settle(&self, live: &[&Self::Buffer]) -> Result<()> {
        let _ = live;
        Ok(())
    }
    /// Called once at the end of every run (after its results are downloaded or kept, and
    /// on error): a backend that records launches submits them here. Default: nothing.
    fn finish(&self) {}
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
/// use kiln_compiler::{Inst, InstOp, Program, RegId};
/// use kiln_ir::{BinaryOp, DType, Id, IdVec, Scalar};
/// let mut insts = IdVec::new();
/// let a = insts.push(Inst { op: InstOp::Scalar(0), dtype: DType::F64 });
/// let b = insts.push(Inst { op: InstOp::Scalar(1), dtype: DType::F64 });
/// let c = insts.push(Inst { op: InstOp::Binary(BinaryOp::Mul, a, b), dtype: DType::F64 });
/// let p = Program { insts, results: [c].into_iter().collect() };
/// let mut table = vec![Scalar::Float(0.5), Scalar::Float(4.0)];
/// kiln_compiler::eval_prelude(&p, &mut table).unwrap();
/// assert_eq!(table[2], Scalar::Float(2.0));
/// ```
pub fn eval_prelude(prelude: &Program, table: &mut Vec<Scalar>) -> Result<()> {
    let mut vals: IdVec<RegId, Scalar> = IdVec::with_capacity(prelude.insts.len());
    for inst in prelude.insts.values() {
        let ty = |i: RegId| prelude.insts[i].dtype;
        let v = match inst.op {
            InstOp::Scalar(i) => table[i as usize].cast(inst.dtype),
            InstOp::Unary(op, x) => kiln_ir::scalar_ops::unary(op, ty(x), vals[x]).cast(inst.dtype),
            InstOp::Binary(op, a, b) => {
                kiln_ir::scalar_ops::binary(op, ty(a), vals[a], vals[b])?.cast(inst.dtype)
            }
            InstOp::Where(c, a, b) => {
                if vals[c].as_bool() {
                    vals[a]
                } else {
                    vals[b]
                }
            }
            InstOp::Cast(x) => vals[x].cast(inst.dtype),
            InstOp::Load(_) | InstOp::Acc => unreachable!("the prelude reads only scalars"),
        };
        vals.push(v);
    }
    table.extend(prelude.results.iter().map(|&r| vals[r]));
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
/// let plan = Plan { outputs: vec![OutputRef::Param(kiln_ir::Id::new(0))], ..Plan::default() };
/// let b = kiln_ir::Bindings { params: vec![HostData::from(vec![1.0f32, 2.0]).into()].into(), ..Default::default() };
/// assert_eq!(run(&Host, &plan, &b).unwrap()[0].len(), 2);
/// ```
pub fn run<B: Backend>(backend: &B, plan: &Plan, bindings: &Bindings) -> Result<Vec<HostData>> {
    run_with(backend, plan, bindings, RunOptions::default())?
        .iter()
        .map(Value::to_host)
        .collect()
}

/// The `tracing` target of the event a value moved between devices raises (level DEBUG).
pub const TRANSFER_TARGET: &str = "kiln::transfer";

/// How [`run_with`] places values.
///
/// ```
/// let o = kiln_compiler::RunOptions::default();
/// assert!(!o.keep && !o.strict);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions<'a> {
    /// Leave the results on the device (on a backend that [keeps results](Backend::keeps_results)).
    pub keep: bool,
    /// Refuse an input resident on another device (an error naming both devices) instead
    /// of moving it through the host.
    pub strict: bool,
    /// Resident values the caller proved no one reads after this run (`kiln_ir::donatable`):
    /// where the plan has a [`crate::Donation`] for a parameter bound to one of them, and no
    /// handle on it exists but the donor node's and this run's bindings, the run asks the
    /// backend for its storage ([`Backend::donate`]) and writes the result over it.
    /// A donated value reads as an error afterwards (its storage holds the result); if the
    /// run fails after a donation, the donor is lost the same way.
    pub donate: &'a [&'a DeviceData],
}

/// A parameter's buffer for one run: uploaded for it, or a resident value read in place.
enum ParamBuf<'a, B> {
    Owned(B),
    Borrowed(&'a B),
}

impl<B> ParamBuf<'_, B> {
    fn get(&self) -> &B {
        match self {
            ParamBuf::Owned(b) => b,
            ParamBuf::Borrowed(b) => b,
        }
    }
}

/// The buffer a kernel reads parameter `value` from (see [`RunOptions`]).
fn bind<'a, B: Backend>(
    backend: &B,
    value: &'a Value,
    strict: bool,
) -> Result<ParamBuf<'a, B::Buffer>> {
    if let Some(b) = value.device().and_then(|d| backend.resident(d)) {
        return Ok(ParamBuf::Borrowed(b));
    }
    if let Some(h) = value.host() {
        return Ok(ParamBuf::Owned(backend.upload(h)?));
    }
    let d = value.device().expect("a Value holds host or device data");
    if strict {
        return Err(kiln_ir::Error::InvalidArgument {
            op: "eval",
            message: format!(
                "an input of {} {} elements is resident on {}, but the evaluation runs on {} and strict placement is on",
                d.len(),
                d.dtype(),
                d.device(),
                backend.name()
            ),
            hint: format!(
                "move it first (Array::to_device / Array::to_host), evaluate on {}, or turn strict placement off",
                d.device()
            ),
        });
    }
    tracing::debug!(
        target: TRANSFER_TARGET,
        from = d.device(),
        to = backend.name(),
        bytes = d.bytes(),
        "moving a resident input between devices"
    );
    Ok(ParamBuf::Owned(backend.upload(&d.download()?)?))
}

/// Runs `plan` as [`run`] does, placing values as `options` say: results stay on the device
/// with [`RunOptions::keep`] (on a backend that keeps results), else they are downloaded.
///
/// ```
/// # use kiln_compiler::{Arg, Backend, Kernel, Launch};
/// # use kiln_ir::{DType, HostData, Result};
/// # struct Host;
/// # impl Backend for Host {
/// #     type Buffer = HostData;
/// #     fn name(&self) -> &'static str { "host" }
/// #     fn allocate(&self, dtype: DType, _: usize) -> Result<HostData> { unimplemented!() }
/// #     fn release(&self, _: HostData) {}
/// #     fn upload(&self, d: &HostData) -> Result<HostData> { Ok(d.clone()) }
/// #     fn download(&self, b: HostData, _: DType, _: usize) -> Result<HostData> { Ok(b) }
/// #     fn launch(&self, _: &Kernel, _: &Launch<'_>, _: &[Arg<'_, HostData>], _: &mut [HostData]) -> Result<()> { unimplemented!() }
/// # }
/// use kiln_compiler::{run_with, OutputRef, Plan, RunOptions};
/// let plan = Plan { outputs: vec![OutputRef::Param(kiln_ir::Id::new(0))], ..Plan::default() };
/// let b = kiln_ir::Bindings { params: vec![HostData::from(vec![1.0f32]).into()].into(), ..Default::default() };
/// let out = run_with(&Host, &plan, &b, RunOptions { keep: true, strict: true, ..Default::default() })?;
/// assert!(out[0].host().is_some()); // this backend keeps nothing on a device
/// # Ok::<(), kiln_ir::Error>(())
/// ```
pub fn run_with<B: Backend>(
    backend: &B,
    plan: &Plan,
    bindings: &Bindings,
    options: RunOptions,
) -> Result<Vec<Value>> {
    let mut scalars = bindings.scalars.clone();
    eval_prelude(&plan.prelude, &mut scalars)?;
    let dims = &bindings.dims;
    let keep = options.keep && backend.keeps_results();
    // Inline lists: a small plan's run allocates only its results.
    let mut params: SmallVec<[Option<ParamBuf<'_, B::Buffer>>; 8]> =
        (0..bindings.params.len()).map(|_| None).collect();
    let mut bufs: SmallVec<[Option<B::Buffer>; 8]> =
        (0..plan.buffers.len()).map(|_| None).collect();
    let result = run_kernels(
        backend,
        plan,
        bindings,
        &scalars,
        options,
        &mut params,
        &mut bufs,
    );
    let out = result.and_then(|()| {
        let mut out: Vec<Value> = Vec::with_capacity(plan.outputs.len());
        let mut done: SmallVec<[(SlotId, usize); 4]> = SmallVec::new();
        for o in &plan.outputs {
            match o {
                OutputRef::Param(p) => out.push(bindings.params[*p].clone()),
                OutputRef::Slot(s) => {
                    if let Some(&(_, k)) = done.iter().find(|(d, _)| d == s) {
                        let v = out[k].clone();
                        out.push(v);
                        continue;
                    }
                    let slot = &plan.slots[*s];
                    let b = bufs[slot.buffer.index()]
                        .take()
                        .expect("output buffer was written");
                    let len = resolve_shape(&slot.shape, dims).numel();
                    done.push((*s, out.len()));
                    out.push(if keep {
                        Value::from(backend.keep(b, slot.dtype, len)?)
                    } else {
                        Value::from(backend.download(b, slot.dtype, len)?)
                    });
                }
            }
        }
        Ok(out)
    });
    for b in bufs.into_iter().flatten() {
        backend.release(b);
    }
    for b in params.into_iter().flatten() {
        if let ParamBuf::Owned(b) = b {
            backend.release(b);
        }
    }
    backend.finish();
    out
}

/// The value bound to `donation`'s parameter, if the caller donated it, it fits the buffer,
/// and no handle on it exists but the donor node's and `bindings`'.
fn donor<'a>(
    plan: &Plan,
    bindings: &'a Bindings,
    options: RunOptions<'_>,
    donation: &crate::plan::Donation,
) -> Option<&'a DeviceData> {
    let d = bindings.params.get(donation.param)?.device()?;
    let desc = &plan.buffers[donation.buffer];
    let len = desc
        .slots
        .iter()
        .map(|&s| plan.slot_shape(s, &bindings.dims).numel())
        .max()
        .unwrap_or(0);
    let ok = options.donate.iter().any(|x| x.same(d))
        && d.handles() == 2
        && d.dtype() == desc.dtype
        && d.len() >= len;
    ok.then_some(d)
}

fn run_kernels<'a, B: Backend>(
    backend: &B,
    plan: &Plan,
    bindings: &'a Bindings,
    scalars: &[Scalar],
    options: RunOptions<'_>,
    params: &mut [Option<ParamBuf<'a, B::Buffer>>],
    bufs: &mut [Option<B::Buffer>],
) -> Result<()> {
    let dims = &bindings.dims;
    let strict = options.strict;
    let mut groups = plan.groups.iter().peekable();
    let mut donations = plan.donations.iter().peekable();
    // Per parameter: the output of the current kernel it is read through (a donation).
    let mut through: SmallVec<[(ParamId, usize); 2]> = SmallVec::new();
    let mut settled = false;
    let mut ki = KernelId::new(0);
    while ki.index() < plan.kernels.len() {
        if let Some(g) = groups.next_if(|g| g.start == ki) {
            run_group(backend, plan, bindings, scalars, strict, params, bufs, g)?;
            for k in g.kernels() {
                release_dead(backend, plan, bufs, k);
            }
            ki = g.end;
            continue;
        }
        let kernel = &plan.kernels[ki];
        // Upload the parameters this kernel reads.
        for input in kernel.inputs.values() {
            if let Source::Param(p) = input.source {
                if params[p.index()].is_none() {
                    params[p.index()] = Some(bind(backend, &bindings.params[p], strict)?);
                }
            }
        }
        // A donated parameter's storage becomes the output it is read through (after the
        // binding above: the donated value no longer binds).
        through.clear();
        if !options.donate.is_empty() {
            while let Some(d) = donations.next_if(|d| d.kernel <= ki) {
                if d.kernel != ki || bufs[d.buffer.index()].is_some() {
                    continue;
                }
                let Some(value) = donor(plan, bindings, options, d) else {
                    continue;
                };
                if plan.settle && !settled {
                    // Every fallible kernel ran before this one: their errors first.
                    let live: Vec<&B::Buffer> = bufs
                        .iter()
                        .flatten()
                        .chain(params.iter().flatten().map(|p| p.get()))
                        .collect();
                    backend.settle(&live)?;
                    settled = true;
                }
                if let Some(buf) = backend.donate(value) {
                    bufs[d.buffer.index()] = Some(buf);
                    through.push((d.param, d.output));
                }
            }
        }
        // Take (or allocate) the output buffers.
        let out_bufs: SmallVec<[BufferId; 2]> = kernel
            .outputs
            .iter()
            .map(|&s| plan.slots[s].buffer)
            .collect();
        let mut outs: SmallVec<[B::Buffer; 2]> = SmallVec::with_capacity(out_bufs.len());
        for &b in &out_bufs {
            let desc = &plan.buffers[b];
            let buf = match bufs[b.index()].take() {
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
        let views: Vec<Strided> = kernel
            .inputs
            .values()
            .map(|i| i.view.resolve(dims))
            .collect();
        let launch = Launch {
            space: resolve_shape(&kernel.space, dims),
            views,
            scalars,
            seeds: &bindings.seeds,
            dims,
            unread_outputs: plan.unread_outputs.get(ki).copied().unwrap_or(false),
        };
        let result = {
            let args: SmallVec<[Arg<'_, B::Buffer>; 4]> = kernel
                .inputs
                .values()
                .map(|i| match i.source {
                    Source::Param(p) => match through.iter().find(|(q, _)| *q == p) {
                        Some(&(_, j)) => Arg::Output(j),
                        None => Arg::Buffer(params[p.index()].as_ref().expect("bound above").get()),
                    },
                    Source::Slot(s) => {
                        let b = plan.slots[s].buffer;
                        match out_bufs.iter().position(|&o| o == b) {
                            Some(j) => Arg::Output(j),
                            None => Arg::Buffer(
                                bufs[b.index()]
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
            bufs[b.index()] = Some(buf);
        }
        result?;
        release_dead(backend, plan, bufs, ki);
        ki = KernelId::new(ki.index() + 1);
    }
    Ok(())
}

/// Releases the buffers whose last reader was kernel `ki`.
fn release_dead<B: Backend>(
    backend: &B,
    plan: &Plan,
    bufs: &mut [Option<B::Buffer>],
    ki: KernelId,
) {
    for &b in plan.releases.get(ki).into_iter().flatten() {
        if let Some(buf) = bufs[b.index()].take() {
            backend.release(buf);
        }
    }
}

/// Runs the kernels of row group `g` with one [`Backend::launch_group`].
#[allow(clippy::too_many_arguments)]
fn run_group<'a, B: Backend>(
    backend: &B,
    plan: &Plan,
    bindings: &'a Bindings,
    scalars: &[Scalar],
    strict: bool,
    params: &mut [Option<ParamBuf<'a, B::Buffer>>],
    bufs: &mut [Option<B::Buffer>],
    g: &RowGroup,
) -> Result<()> {
    let dims = &bindings.dims;
    let kernels: SmallVec<[&Kernel; 8]> = g.kernels().map(|k| &plan.kernels[k]).collect();
    // The buffers the group writes, in first-write order, with their written lengths.
    let mut owned: Vec<BufferId> = Vec::new();
    let mut lens: Vec<usize> = Vec::new();
    for kernel in &kernels {
        for input in kernel.inputs.values() {
            if let Source::Param(p) = input.source {
                if params[p.index()].is_none() {
                    params[p.index()] = Some(bind(backend, &bindings.params[p], strict)?);
                }
            }
        }
        for &s in &kernel.outputs {
            let b = plan.slots[s].buffer;
            let len = plan.slot_shape(s, dims).numel();
            match owned.iter().position(|&o| o == b) {
                Some(i) => lens[i] = lens[i].max(len),
                None => {
                    owned.push(b);
                    lens.push(len);
                }
            }
        }
    }
    let mut taken: Vec<B::Buffer> = Vec::with_capacity(owned.len());
    for &b in &owned {
        let buf = match bufs[b.index()].take() {
            Some(buf) => Ok(buf),
            None => {
                let desc = &plan.buffers[b];
                let len = desc
                    .slots
                    .iter()
                    .map(|&s| plan.slot_shape(s, dims).numel())
                    .max()
                    .unwrap_or(0);
                backend.allocate(desc.dtype, len)
            }
        };
        match buf {
            Ok(buf) => taken.push(buf),
            Err(e) => {
                for (&b, buf) in owned.iter().zip(taken) {
                    bufs[b.index()] = Some(buf);
                }
                return Err(e);
            }
        }
    }
    let result = {
        let (params, bufs) = (&*params, &*bufs);
        let launches: Vec<GroupKernel<'_, B::Buffer>> = kernels
            .iter()
            .map(|kernel| GroupKernel {
                kernel,
                launch: Launch {
                    space: resolve_shape(&kernel.space, dims),
                    views: kernel
                        .inputs
                        .values()
                        .map(|i| i.view.resolve(dims))
                        .collect(),
                    scalars,
                    seeds: &bindings.seeds,
                    dims,
                    unread_outputs: false,
                },
                inputs: kernel
                    .inputs
                    .values()
                    .map(|i| match i.source {
                        Source::Param(p) => {
                            GroupArg::Buffer(params[p.index()].as_ref().expect("bound above").get())
                        }
                        Source::Slot(s) => {
                            let b = plan.slots[s].buffer;
                            match owned.iter().position(|&o| o == b) {
                                Some(i) => GroupArg::Group(i),
                                None => GroupArg::Buffer(
                                    bufs[b.index()]
                                        .as_ref()
                                        .expect("slot written by an earlier kernel"),
                                ),
                            }
                        }
                        Source::Iota { .. } | Source::Random { .. } => GroupArg::Virtual,
                    })
                    .collect(),
                outputs: kernel
                    .outputs
                    .iter()
                    .map(|&s| {
                        let b = plan.slots[s].buffer;
                        owned.iter().position(|&o| o == b).expect("listed above")
                    })
                    .collect(),
            })
            .collect();
        let rows = match g.rows {
            kiln_ir::Dim::Const(c) => c,
            kiln_ir::Dim::Sym(s) => dims[s as usize],
        };
        backend.launch_group(rows, &launches, &mut taken, &lens)
    };
    for (&b, buf) in owned.iter().zip(taken) {
        bufs[b.index()] = Some(buf);
    }
    result
}
