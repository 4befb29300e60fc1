//! # kiln-wgpu
//!
//! The GPU backend: [`WgpuBackend`] implements [`kiln_compiler::Backend`] with WGSL compute
//! shaders generated from the plan's fused kernels and run through `wgpu` (Vulkan, Metal,
//! DX12, GL).
//!
//! * **Code generation** ([`codegen`], [`kernels`]): one shader per kernel *structure* —
//!   sizes, strides, offsets and scalar values travel in a small per-launch word table
//!   (`kmeta`), so a new batch size or learning rate reuses the compiled pipeline, as the
//!   graph cache reuses plans. Pipelines are cached by their WGSL text ([`PipelineStats`]).
//!   Each launch's generated WGSL, word tables (uploaded once) and pipelines are cached per
//!   kernel and launch; so are the bind groups of its last few launches, reused when the
//!   same buffers are bound again (`KILN_WGPU_BINDS=0` turns that off, for A/B timings).
//! * **Row groups** (a softmax, a layer norm): one dispatch per group, a workgroup per row
//!   running the group's kernels in order with barriers between them
//!   (`kernels::row_group`), summing each row in the plain reduction's order; rows longer
//!   than 4,096 only where there are at least 1,024 of them (else a workgroup per row would
//!   leave a GPU idle); otherwise kernel by kernel (`KILN_WGPU_ROW_GROUPS=0`: always).
//! * **Donation**: a resident value the caller donated and nothing else reads becomes the
//!   buffer a result is written into (`Backend::donate`; an in-place optimizer step).
//! * **Buffers** ([`GpuBuffer`]) come from a pool by size class (bounded in bytes,
//!   [`PoolStats`]); `bool` is stored as `u32`. The compiler's in-place writes never bind one
//!   buffer twice: an elementwise kernel reads an aliased input through its own output
//!   binding, other kernels get a copy.
//! * **Submission** is asynchronous: `launch` records and submits work without waiting; only
//!   `download` (the user asking for values) maps memory and waits. Value errors raised inside
//!   kernels (an index out of range, integer division by zero) are written to per-launch
//!   status words that each result buffer carries forward and that `download` reads, so the
//!   same `kiln_ir::Error` as on the CPU surfaces without a synchronisation per kernel.
//! * **Limits**: more than 65,535 workgroups fold into a 2-D grid. A kernel touching a buffer
//!   larger than the adapter's largest storage binding runs as several launches over blocks
//!   of its leading dimension, each binding the windows it reads and writes (elementwise,
//!   reductions — partial results folded together where the block dimension is reduced —,
//!   matmuls by batches or rows, gathers into a big result, top-k by rows, concatenations
//!   along another dimension; along that one, a concatenation is buffer copies; a matmul
//!   whose right operand is big, without an epilogue, by blocks of its summed dimension). A gather from a big table and a
//!   scatter-add into a big result run one launch per block of the indexed dimension, each
//!   handling only the indices that fall in its block; a scatter-add of big updates runs
//!   one launch per block of index positions, adding partial results; blocks too short to
//!   start on an aligned output offset write their own outputs, copied into place.
//!   [`WgpuBackend::with_binding_limit`] lowers the limit (the tests run every kind of
//!   block on small arrays). A kernel binding more
//!   storage buffers than the adapter allows, a big buffer in a kernel that cannot be cut
//!   so, a buffer over the adapter's largest buffer, or `f64`/`i64` without
//!   `SHADER_F64`/`SHADER_INT64` is a clear error naming the op and the limit.
//! * **Resident values** ([`Resident`]): results kept on the device between evaluations,
//!   read in place by later launches, downloaded on demand; [`TransferStats`] counts the
//!   bytes each way. Launches of one evaluation are recorded into one submission.
//!
//! Semantics are the oracle's (`kiln-reference`) with the per-op tolerances documented in
//! [`wgsl_math`].
//!
//! Diagnostics are `tracing` events at target `kiln::wgpu` (level TRACE): each new shader
//! (`source`) and each download's status words. `KILN_WGPU_DUMP=1` raises them to INFO and,
//! where no subscriber records them, prints them to stderr.
//!
//! Depends on `kiln-ir`, `kiln-compiler`, `wgpu`, `pollster`, `tracing`.
//!
//! ```no_run
//! # // Needs a GPU adapter (or Mesa's software Vulkan driver).
//! use kiln_compiler::Engine;
//! use kiln_ir::{build, HostData, Shape};
//! let gpu = kiln_wgpu::WgpuBackend::new()?;
//! let engine = Engine::new(gpu, 64);
//! let x = build::data(HostData::from(vec![1.0f32, 2.0, 3.0]), Shape::from([3]))?;
//! let y = build::unary(kiln_ir::UnaryOp::Exp, &x)?;
//! let out = engine.evaluate(&[&y])?;
//! assert_eq!(out[0].len(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

mod buffer;
pub mod codegen;
mod device;
pub mod kernels;
pub mod wgsl_math;

pub use buffer::{GpuBuffer, PoolStats};
pub use device::{Capabilities, InitError};

use buffer::{elem_bytes, Check, Pool, STATUS_WORDS};
use codegen::Bind;
use kernels::{Dispatch, In, Work};
use kiln_compiler::{Arg, Backend, Kernel, KernelKind, Launch};
use kiln_ir::{DType, Error, HostData, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The `tracing` target of this crate's diagnostics.
const TARGET: &str = "kiln::wgpu";

/// Whether `KILN_WGPU_DUMP` is set: each new shader and each download's status words are
/// `tracing` events at [`TARGET`] raised from TRACE to INFO, written to stderr where no
/// subscriber records them.
fn dump() -> bool {
    std::env::var_os("KILN_WGPU_DUMP").is_some()
}

/// Default bound of the buffer pool: 1 GiB.
pub const DEFAULT_POOL_BYTES: u64 = 1 << 30;

pub(crate) fn internal(message: String) -> Error {
    Error::InvalidArgument {
        op: "wgpu backend",
        message,
        hint: "this is a bug in kiln (the plan broke a backend contract); please report it".into(),
    }
}

pub(crate) fn too_large(op: &'static str, message: String) -> Error {
    Error::InvalidArgument {
        op,
        message,
        hint: "the wgpu adapter's limits are exceeded: split the array, or evaluate on the CPU"
            .into(),
    }
}

/// Pipeline-cache counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PipelineStats {
    /// Launches that found their pipeline compiled.
    pub hits: u64,
    /// Pipelines compiled.
    pub misses: u64,
    /// Pipelines held.
    pub entries: usize,
    /// Bind groups made.
    pub bind_groups_made: u64,
    /// Bind groups reused from the launch before (the same buffers bound again).
    pub bind_groups_reused: u64,
    /// Row groups run as one dispatch (the others ran kernel by kernel).
    pub fused_groups: u64,
}

/// The wgpu backend: one device and queue, a pipeline cache and a buffer pool.
///
/// ```no_run
/// # // Needs a GPU adapter.
/// let gpu = kiln_wgpu::WgpuBackend::new()?;
/// println!("running on {}", gpu.capabilities().adapter);
/// # Ok::<(), kiln_wgpu::InitError>(())
/// ```
pub struct WgpuBackend {
    core: Arc<Core>,
    pipelines: Mutex<hashbrown::HashMap<String, wgpu::ComputePipeline>>,
    launches: Mutex<LaunchCache>,
    /// Fused row groups' generated work, by the address of the group's first kernel.
    groups: Mutex<hashbrown::HashMap<usize, Vec<CachedGroup>>>,
    /// Whether row groups run fused (`KILN_WGPU_ROW_GROUPS=0`: kernel by kernel).
    row_groups: bool,
    /// The pool's `freed` count at the last sweep of cached bind groups.
    swept: AtomicU64,
    /// Whether bind groups are reused (`KILN_WGPU_BINDS=0` makes one per launch, for A/B
    /// timings).
    reuse_binds: bool,
    hits: AtomicU64,
    misses: AtomicU64,
    binds_made: AtomicU64,
    binds_reused: AtomicU64,
    fused_groups: AtomicU64,
}

/// What resident values share with the backend: the device and queue, the pool their
/// storage returns to, and the transfer counters.
pub(crate) struct Core {
    gpu: device::Gpu,
    pool: Pool,
    /// Work recorded but not yet submitted, and the buffers released meanwhile (they go
    /// back to the pool once that work is submitted: a later `write_buffer` into a reused
    /// buffer would otherwise land before the recorded work that reads it).
    pending: Mutex<Pending>,
    /// Whether launches are recorded into one submission per evaluation
    /// (`KILN_WGPU_BATCH=0` submits each launch by itself).
    batch: bool,
    /// Where downloads land (kiln's CPU buffer pool), if set: plain vectors otherwise.
    host_pool: std::sync::OnceLock<&'static dyn kiln_ir::HostPool>,
    uploaded: AtomicU64,
    uploads: AtomicU64,
    downloaded: AtomicU64,
    downloads: AtomicU64,
}

/// Recorded, unsubmitted work (see [`Core::pending`]).
#[derive(Default)]
pub(crate) struct Pending {
    enc: Option<wgpu::CommandEncoder>,
    /// The compute pass the launches record into, open until a copy or the submission
    /// needs the encoder (one pass for a run of dispatches: wgpu orders the dispatches of a
    /// pass and makes each one's writes visible to the next, as it does across passes).
    pass: Option<wgpu::ComputePass<'static>>,
    release: Vec<wgpu::Buffer>,
}

/// Host↔device transfer counters of a [`WgpuBackend`] (bytes as the device stores them:
/// `bool` counts 4 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// Bytes copied from the host to the device.
    pub uploaded_bytes: u64,
    /// Host-to-device copies.
    pub uploads: u64,
    /// Bytes copied from the device to the host (values only, not status words).
    pub downloaded_bytes: u64,
    /// Device-to-host copies.
    pub downloads: u64,
}

impl std::fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuBackend")
            .field("adapter", &self.core.gpu.caps.adapter)
            .finish()
    }
}

impl WgpuBackend {
    /// Opens the adapter the environment selects (`WGPU_BACKEND=vulkan|gl|metal|dx12`,
    /// `WGPU_POWER_PREF=high|low`).
    ///
    /// ```no_run
    /// # // Needs a GPU adapter.
    /// match kiln_wgpu::WgpuBackend::new() {
    ///     Ok(gpu) => println!("{}", gpu.capabilities().adapter),
    ///     Err(e) => eprintln!("no GPU: {e}"),
    /// }
    /// ```
    pub fn new() -> std::result::Result<WgpuBackend, InitError> {
        Ok(WgpuBackend::on(device::open()?))
    }

    /// Opens the adapter as [`WgpuBackend::new`] does, but binds at most `bytes` (a multiple
    /// of 4, at least twice the adapter's binding alignment) per storage binding, so that
    /// arrays larger than that run in blocks as arrays over the adapter's own limit do:
    /// the blocking paths can then be tested on small arrays, and a device can be kept under
    /// a driver's smaller limit.
    ///
    /// ```no_run
    /// # // Needs a GPU adapter.
    /// let gpu = kiln_wgpu::WgpuBackend::with_binding_limit(1 << 16).unwrap();
    /// assert!(gpu.capabilities().max_binding_bytes <= 1 << 16);
    /// ```
    pub fn with_binding_limit(bytes: u64) -> std::result::Result<WgpuBackend, InitError> {
        let mut gpu = device::open()?;
        let floor = 2 * gpu.caps.binding_alignment;
        gpu.caps.max_binding_bytes = gpu.caps.max_binding_bytes.min((bytes / 4 * 4).max(floor));
        Ok(WgpuBackend::on(gpu))
    }

    fn on(gpu: device::Gpu) -> WgpuBackend {
        WgpuBackend {
            core: Arc::new(Core {
                gpu,
                pool: Pool::new(DEFAULT_POOL_BYTES),
                pending: Mutex::new(Pending::default()),
                batch: std::env::var("KILN_WGPU_BATCH").map_or(true, |v| v != "0"),
                host_pool: std::sync::OnceLock::new(),
                uploaded: AtomicU64::new(0),
                uploads: AtomicU64::new(0),
                downloaded: AtomicU64::new(0),
                downloads: AtomicU64::new(0),
            }),
            pipelines: Mutex::new(hashbrown::HashMap::new()),
            launches: Mutex::new(LaunchCache::default()),
            groups: Mutex::new(hashbrown::HashMap::new()),
            row_groups: std::env::var("KILN_WGPU_ROW_GROUPS").map_or(true, |v| v != "0"),
            swept: AtomicU64::new(0),
            reuse_binds: std::env::var("KILN_WGPU_BINDS").map_or(true, |v| v != "0"),
            hits: AtomicU64::new(0),
            binds_made: AtomicU64::new(0),
            fused_groups: AtomicU64::new(0),
            binds_reused: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// What the device supports.
    ///
    /// ```no_run
    /// # // Needs a GPU adapter.
    /// let gpu = kiln_wgpu::WgpuBackend::new().unwrap();
    /// assert!(gpu.capabilities().max_bindings >= 4);
    /// ```
    pub fn capabilities(&self) -> &Capabilities {
        &self.core.gpu.caps
    }

    /// Pipeline-cache counters.
    ///
    /// ```no_run
    /// # // Needs a GPU adapter.
    /// let gpu = kiln_wgpu::WgpuBackend::new().unwrap();
    /// assert_eq!(gpu.pipeline_stats().entries, 0);
    /// ```
    pub fn pipeline_stats(&self) -> PipelineStats {
        PipelineStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: self
                .pipelines
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .len(),
            bind_groups_made: self.binds_made.load(Ordering::Relaxed),
            bind_groups_reused: self.binds_reused.load(Ordering::Relaxed),
            fused_groups: self.fused_groups.load(Ordering::Relaxed),
        }
    }

    /// Host↔device transfer counters since the backend was opened.
    ///
    /// ```no_run
    /// # // Needs a GPU adapter.
    /// let gpu = kiln_wgpu::WgpuBackend::new().unwrap();
    /// assert_eq!(gpu.transfer_stats().uploaded_bytes, 0);
    /// ```
    pub fn transfer_stats(&self) -> TransferStats {
        let c = &self.core;
        TransferStats {
            uploaded_bytes: c.uploaded.load(Ordering::Relaxed),
            uploads: c.uploads.load(Ordering::Relaxed),
            downloaded_bytes: c.downloaded.load(Ordering::Relaxed),
            downloads: c.downloads.load(Ordering::Relaxed),
        }
    }

    /// Buffer-pool figures.
    ///
    /// ```no_run
    /// # // Needs a GPU adapter.
    /// let gpu = kiln_wgpu::WgpuBackend::new().unwrap();
    /// assert_eq!(gpu.pool_stats().live, 0);
    /// ```
    pub fn pool_stats(&self) -> PoolStats {
        self.core.pool.stats()
    }

    /// Sets the bound of the buffer pool (bytes); released buffers beyond it are freed.
    ///
    /// ```no_run
    /// # // Needs a GPU adapter.
    /// let gpu = kiln_wgpu::WgpuBackend::new().unwrap();
    /// gpu.set_pool_limit(0); // no pooling
    /// ```
    pub fn set_pool_limit(&self, bytes: u64) {
        self.core.pool.set_limit(bytes)
    }

    /// Waits until the device has finished all submitted work.
    ///
    /// ```no_run
    /// # // Needs a GPU adapter.
    /// kiln_wgpu::WgpuBackend::new().unwrap().synchronize();
    /// ```
    pub fn synchronize(&self) {
        let _ = self
            .core
            .gpu
            .device
            .poll(wgpu::PollType::wait_indefinitely());
    }

    /// Has downloads land in `pool`'s storage (they go back to it when their last handle
    /// drops, so a loop that reads results reuses warm pages). Set once; later calls are
    /// ignored.
    ///
    /// ```no_run
    /// # // Needs a GPU adapter.
    /// static POOL: kiln_cpu_like::Pool = kiln_cpu_like::Pool;
    /// # mod kiln_cpu_like {
    /// #     use kiln_ir::{DType, HostPool, HostVec, Recycle};
    /// #     #[derive(Debug)] pub struct Pool;
    /// #     impl Recycle for Pool { fn recycle(&self, _: HostVec) {} }
    /// #     impl HostPool for Pool {
    /// #         fn take_host(&self, _: DType, len: usize) -> (HostVec, usize) { (HostVec::from(vec![0.0f32; len]), 0) }
    /// #     }
    /// # }
    /// let gpu = kiln_wgpu::WgpuBackend::new().unwrap();
    /// gpu.set_host_pool(&POOL);
    /// ```
    pub fn set_host_pool(&self, pool: &'static dyn kiln_ir::HostPool) {
        let _ = self.core.host_pool.set(pool);
    }

    /// Uploads host data into a resident value (the storage returns to the pool when its
    /// last handle drops).
    ///
    /// ```no_run
    /// # // Needs a GPU adapter.
    /// use kiln_ir::HostData;
    /// let gpu = kiln_wgpu::WgpuBackend::new().unwrap();
    /// let d = gpu.upload_resident(&HostData::from(vec![1.0f32, 2.0]))?;
    /// assert_eq!(d.download()?.len(), 2);
    /// # Ok::<(), kiln_ir::Error>(())
    /// ```
    pub fn upload_resident(&self, data: &HostData) -> Result<kiln_ir::DeviceData> {
        let b = <Self as Backend>::upload(self, data)?;
        Ok(kiln_ir::DeviceData::new(Resident {
            core: self.core.clone(),
            buffer: Some(b),
            donated: AtomicBool::new(false),
        }))
    }

    fn pipeline(&self, source: &str) -> Result<wgpu::ComputePipeline> {
        if let Some(p) = self
            .pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(source)
        {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(p.clone());
        }
        if !dump() {
            tracing::trace!(target: TARGET, source, "new pipeline");
        } else if tracing::enabled!(target: TARGET, tracing::Level::INFO) {
            tracing::info!(target: TARGET, source, "new pipeline");
        } else {
            eprintln!("kiln-wgpu: new pipeline\n{source}");
        }
        let device = &self.core.gpu.device;
        // Validation errors (WGSL) and internal ones (the driver's own compiler refusing the
        // translated shader) both become this launch's error, never a later panic.
        let internal_scope = device.push_error_scope(wgpu::ErrorFilter::Internal);
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("kiln kernel"),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("kiln kernel"),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        // A pipeline the driver could not build may only say so when its layout is asked
        // for: ask inside the scopes.
        let _ = pipeline.get_bind_group_layout(0);
        let validation = pollster::block_on(scope.pop());
        let driver = pollster::block_on(internal_scope.pop());
        if let Some(e) = validation.or(driver) {
            return Err(internal(format!(
                "the generated WGSL failed to compile: {e}\n{source}"
            )));
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        self.pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(source.to_string(), pipeline.clone());
        Ok(pipeline)
    }

    fn new_buffer(&self, dtype: DType, len: usize) -> Result<GpuBuffer> {
        let bytes = elem_bytes(dtype) * len as u64;
        let caps = &self.core.gpu.caps;
        // The pool rounds up to a size class: the class must fit too.
        if buffer::size_class(bytes) > caps.max_buffer_bytes {
            return Err(too_large(
                "wgpu allocate",
                format!(
                    "a buffer of {len} {dtype} elements ({bytes} bytes) exceeds the adapter's largest buffer ({} bytes)",
                    caps.max_buffer_bytes
                ),
            ));
        }
        Ok(GpuBuffer {
            buf: self.core.pool.take(&self.core.gpu.device, bytes),
            dtype,
            len,
            checks: Vec::new(),
        })
    }

    /// Runs the dispatches of one kernel; `bufs` resolves each binding.
    fn submit(
        &self,
        work: &[&Dispatch],
        groups: &[wgpu::BindGroup],
        pipelines: &[wgpu::ComputePipeline],
        pre: &[(&wgpu::Buffer, &wgpu::Buffer, u64)],
    ) {
        let device = &self.core.gpu.device;
        let mut guard = self.core.pending.lock().unwrap_or_else(|e| e.into_inner());
        let pending = &mut *guard;
        if !pre.is_empty() {
            pending.pass = None; // ends the pass: copies go to the encoder
        }
        let enc = pending.enc.get_or_insert_with(|| {
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("kiln launches"),
            })
        });
        for (src, dst, bytes) in pre {
            enc.copy_buffer_to_buffer(src, 0, dst, 0, *bytes);
        }
        for ((d, bg), p) in work.iter().zip(groups).zip(pipelines) {
            let grid = d.grid.unwrap_or_else(|| {
                let maxd = self.core.gpu.caps.max_groups_per_dim as u64;
                let x = d.groups.min(maxd);
                let y = d.groups.div_ceil(x.max(1));
                [x as u32, y as u32, 1]
            });
            if grid.contains(&0) {
                continue;
            }
            let pass = pending.pass.get_or_insert_with(|| {
                enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: None,
                    timestamp_writes: None,
                })
                .forget_lifetime()
            });
            pass.set_pipeline(p);
            pass.set_bind_group(0, bg, &[]);
            pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
        }
        drop(guard);
        if !self.core.batch {
            self.core.flush();
        }
    }
}

impl Backend for WgpuBackend {
    type Buffer = GpuBuffer;

    fn name(&self) -> &'static str {
        "wgpu"
    }

    /// The adapter's storage buffers per shader stage, less what a kernel binds besides its
    /// inputs: the metadata table, up to two outputs (top-k), the f64 scalar table and the
    /// status word.
    fn max_kernel_inputs(&self) -> usize {
        (self.capabilities().max_bindings as usize).saturating_sub(5)
    }

    /// Reductions store their prologue's further results (softmax's `exp(x - max)`, computed
    /// once by the sum and divided in place after).
    fn reduce_side_outputs(&self) -> bool {
        true
    }

    /// Row groups (a softmax or layer norm) run as one dispatch, a workgroup per row, when
    /// their reductions are short enough to keep the plain reduction's accuracy; otherwise
    /// kernel by kernel.
    fn row_groups(&self) -> bool {
        self.row_groups
    }

    fn launch_group(
        &self,
        rows: usize,
        kernels: &[kiln_compiler::GroupKernel<'_, GpuBuffer>],
        buffers: &mut [GpuBuffer],
        lens: &[usize],
    ) -> Result<()> {
        let _ = lens;
        if self.group_fits(rows, kernels, buffers) {
            self.fused_groups.fetch_add(1, Ordering::Relaxed);
            return self.launch_fused_group(rows, kernels, buffers);
        }
        self.launch_group_by_kernel(kernels, buffers)
    }

    fn allocate(&self, dtype: DType, len: usize) -> Result<GpuBuffer> {
        self.new_buffer(dtype, len)
    }

    fn release(&self, buffer: GpuBuffer) {
        self.core.recycle(buffer.buf);
    }

    /// Submits the evaluation's recorded launches.
    fn finish(&self) {
        self.core.flush();
    }

    /// Reads the status words of every unverified check behind `live` in one round trip.
    fn settle(&self, live: &[&GpuBuffer]) -> Result<()> {
        let mut checks: Vec<Arc<Check>> = Vec::new();
        for c in live.iter().flat_map(|b| &b.checks) {
            if !c.verified.load(Ordering::Relaxed) && !checks.iter().any(|x| Arc::ptr_eq(x, c)) {
                checks.push(c.clone());
            }
        }
        match (checks.is_empty(), live.first()) {
            (false, Some(b)) => self
                .core
                .read_checked(&checks, &b.buf, b.dtype, 0)
                .map(|_| ()),
            _ => Ok(()),
        }
    }

    fn upload(&self, data: &HostData) -> Result<GpuBuffer> {
        let b = self.new_buffer(data.dtype(), data.len())?;
        if !data.is_empty() {
            let bytes = buffer::host_bytes(data);
            self.core.gpu.queue.write_buffer(&b.buf, 0, &bytes);
            self.core
                .uploaded
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            self.core.uploads.fetch_add(1, Ordering::Relaxed);
        }
        Ok(b)
    }

    fn download(&self, buffer: GpuBuffer, dtype: DType, len: usize) -> Result<HostData> {
        let result = self.core.read_back(&buffer, dtype, len);
        self.release(buffer);
        result
    }

    fn keeps_results(&self) -> bool {
        true
    }

    fn keep(&self, buffer: GpuBuffer, dtype: DType, len: usize) -> Result<kiln_ir::DeviceData> {
        if buffer.dtype != dtype || buffer.len < len {
            let e = internal(format!(
                "keeping {len} {dtype} elements of a buffer of {} {}",
                buffer.len, buffer.dtype
            ));
            self.release(buffer);
            return Err(e);
        }
        // Value errors surface at the evaluation, as on the CPU: a result whose lineage holds
        // unread status words waits for them (only plans with fallible kernels pay this).
        if buffer
            .checks
            .iter()
            .any(|c| !c.verified.load(Ordering::Relaxed))
        {
            if let Err(e) = self.core.read_back(&buffer, dtype, 0) {
                self.release(buffer);
                return Err(e);
            }
        }
        let mut buffer = buffer;
        buffer.len = len;
        Ok(kiln_ir::DeviceData::new(Resident {
            core: self.core.clone(),
            buffer: Some(buffer),
            donated: AtomicBool::new(false),
        }))
    }

    fn resident<'a>(&self, value: &'a kiln_ir::DeviceData) -> Option<&'a GpuBuffer> {
        let r = value.buffer().as_any().downcast_ref::<Resident>()?;
        if !Arc::ptr_eq(&r.core, &self.core) || r.donated.load(Ordering::Acquire) {
            return None; // another backend's device, or storage given away
        }
        r.buffer.as_ref()
    }

    fn donates(&self) -> bool {
        true
    }

    /// The storage of a resident value of this device (the caller proved it unread from
    /// now on); the value's handle then reads as an error.
    fn donate(&self, value: &kiln_ir::DeviceData) -> Option<GpuBuffer> {
        let r = value.buffer().as_any().downcast_ref::<Resident>()?;
        if !Arc::ptr_eq(&r.core, &self.core) {
            return None;
        }
        let b = r.buffer.as_ref()?;
        if r.donated.swap(true, Ordering::AcqRel) {
            return None; // already given away
        }
        self.core.pool.donated.fetch_add(1, Ordering::Relaxed);
        Some(GpuBuffer {
            buf: b.buf.clone(),
            dtype: b.dtype,
            len: b.len,
            checks: b.checks.clone(),
        })
    }

    fn launch(
        &self,
        kernel: &Kernel,
        launch: &Launch<'_>,
        inputs: &[Arg<'_, GpuBuffer>],
        outputs: &mut [GpuBuffer],
    ) -> Result<()> {
        let limit = self.core.gpu.caps.max_binding_bytes;
        let big = |b: &GpuBuffer| elem_bytes(b.dtype) * b.len as u64 > limit;
        if outputs.iter().any(big) || inputs.iter().any(|a| matches!(a, Arg::Buffer(b) if big(b))) {
            match kernel.kind {
                KernelKind::Take { .. } if matches!(inputs.first(), Some(Arg::Buffer(b)) if big(b)) =>
                {
                    return self.launch_index_blocks(kernel, launch, inputs, outputs);
                }
                KernelKind::ScatterAdd { .. } if outputs.first().is_some_and(big) => {
                    return self.launch_index_blocks(kernel, launch, inputs, outputs);
                }
                KernelKind::ScatterAdd { axis } => {
                    return self.launch_update_blocks(axis, kernel, launch, inputs, outputs);
                }
                _ => {}
            }
            return self.launch_pieces(kernel, launch, inputs, outputs);
        }
        self.launch_one(kernel, launch, inputs, outputs, &Windows::default())
    }
}

impl WgpuBackend {
    /// One launch of `kernel`, binding the windows `windows` names (whole buffers otherwise).
    fn launch_one(
        &self,
        kernel: &Kernel,
        launch: &Launch<'_>,
        inputs: &[Arg<'_, GpuBuffer>],
        outputs: &mut [GpuBuffer],
        windows: &Windows,
    ) -> Result<()> {
        let caps = &self.core.gpu.caps;
        let elementwise = matches!(kernel.kind, KernelKind::Elementwise { .. });
        let computes_virtual = matches!(
            kernel.kind,
            KernelKind::Elementwise { .. }
                | KernelKind::Reduce { .. }
                | KernelKind::ArgReduce { .. }
                | KernelKind::MatMul { .. }
        );
        // Inputs written in place: elementwise kernels and a whole matmul's epilogue read
        // them through the output binding (each output element is read, then written, by one
        // thread); other kinds read a copy taken first.
        let mut copies: Vec<(usize, GpuBuffer)> = Vec::new();
        let how: Vec<In> = inputs
            .iter()
            .enumerate()
            .map(|(x, a)| match a {
                Arg::Buffer(_) => Ok(In::Buffer),
                Arg::Virtual if computes_virtual => Ok(In::Virtual),
                Arg::Virtual => {
                    // Gather-like kernels read buffers only: materialise the generator's base.
                    let buf = self.materialise(kernel, launch, x)?;
                    copies.push((x, buf));
                    Ok(In::Buffer)
                }
                Arg::Output(j) if elementwise => Ok(In::Output(*j)),
                Arg::Output(j) if epilogue_in_place(kernel, x, windows) => Ok(In::Output(*j)),
                Arg::Output(j) => {
                    let src = &outputs[*j];
                    let copy = self.new_buffer(src.dtype, src.len)?;
                    copies.push((x, copy));
                    let _ = j;
                    Ok(In::Buffer)
                }
            })
            .collect::<Result<_>>()?;
        let out_dtypes: Vec<DType> = outputs.iter().map(|o| o.dtype).collect();
        let result = self.launch_inner(
            kernel,
            launch,
            inputs,
            outputs,
            &how,
            &out_dtypes,
            &copies,
            caps,
            windows,
        );
        for (_, c) in copies {
            self.core.recycle(c.buf);
        }
        result
    }
}

/// What generating one launch gives: the dispatches, the dtype a value error names, and
/// the input each dispatch binds as input 0 (concat).
pub(crate) struct Generated {
    work: kernels::Work,
    error_dtype: Option<DType>,
    remap: Vec<Option<usize>>,
    /// The dispatches' pipelines, compiled (or found in the pipeline cache) on first use.
    pipelines: std::sync::OnceLock<Vec<wgpu::ComputePipeline>>,
    /// The dispatches' word and `f64` tables, uploaded on first use: they depend only on
    /// what the launch cache compares.
    tables: std::sync::OnceLock<Tables>,
    /// The bind groups of the last few launches ([`BIND_SETS`], most recent first) and the
    /// bindings they were made for, reused by a launch that binds the same buffers (a
    /// loop's steady state, where the pool hands out the same buffers again, often
    /// alternating between two). Emptied whenever the pool frees a buffer, so a cached bind
    /// group never keeps storage alive that the pool let go.
    binds: Mutex<Vec<CachedBinds>>,
}

/// The per-dispatch constant tables of a cached launch (see [`Generated::tables`]).
struct Tables {
    metas: Vec<wgpu::Buffer>,
    f64s: Vec<Option<wgpu::Buffer>>,
}

/// Bind-group sets kept per cached launch.
const BIND_SETS: usize = 4;

/// One binding: the buffer, its offset and its size.
type BindSpec = (wgpu::Buffer, u64, u64);

/// Bind groups made for the bindings `specs` (one list per dispatch).
struct CachedBinds {
    specs: Vec<Vec<BindSpec>>,
    groups: Vec<wgpu::BindGroup>,
}

/// A cached launch: everything generation reads, and what it gave.
struct CachedLaunch {
    kernel: Kernel,
    how: Vec<In>,
    out_dtypes: Vec<DType>,
    space: Vec<usize>,
    views: Vec<kiln_compiler::Strided>,
    scalars: Vec<kiln_ir::Scalar>,
    seeds: Vec<u64>,
    dims: Vec<usize>,
    unread: bool,
    block: Option<kernels::IndexBlock>,
    generated: Arc<Generated>,
}

/// Cached launches by the kernel's address (entries compared in full on lookup).
#[derive(Default)]
struct LaunchCache {
    map: hashbrown::HashMap<usize, Vec<CachedLaunch>>,
    entries: usize,
}

/// A fused row group's generated work and everything its generation read.
struct CachedGroup {
    kernels: Vec<Kernel>,
    spaces: Vec<Vec<usize>>,
    views: Vec<kiln_compiler::Strided>,
    how: Vec<In>,
    out_dtypes: Vec<DType>,
    outputs: Vec<Vec<usize>>,
    scalars: Vec<kiln_ir::Scalar>,
    seeds: Vec<u64>,
    dims: Vec<usize>,
    rows: usize,
    generated: Arc<Generated>,
}

/// Fused row groups cached before that cache is emptied and starts again.
const GROUP_CACHE_ENTRIES: usize = 1024;

/// Launches cached before the cache is emptied and starts again.
const LAUNCH_CACHE_ENTRIES: usize = 4096;

/// The byte ranges a launch binds instead of whole buffers (see [`WgpuBackend::launch_pieces`]):
/// `(offset, size)` per input and per output, `None` for the whole buffer.
#[derive(Default)]
struct Windows {
    inputs: Vec<Option<(u64, u64)>>,
    outputs: Vec<Option<(u64, u64)>>,
    /// The block of a gather's table or a scatter-add's result this launch holds (see
    /// [`WgpuBackend::launch_index_blocks`]).
    block: Option<kernels::IndexBlock>,
}

impl Windows {
    /// Whether every buffer is bound whole (not one block of a split launch).
    fn is_whole(&self) -> bool {
        self.inputs.iter().chain(&self.outputs).all(Option::is_none)
    }
}

/// The offset and size of a storage binding of `buf`: the window, or the whole buffer up to
/// the binding limit (a pooled buffer may be larger than the value it holds).
fn binding_window(buf: &wgpu::Buffer, window: Option<(u64, u64)>, limit: u64) -> (u64, u64) {
    let (offset, size) = window.unwrap_or((0, buf.size().min(limit / 4 * 4)));
    (offset, size.max(4))
}

/// A bind group of `pipeline`'s layout over the bindings `specs`, in binding order.
fn bind_group(
    device: &wgpu::Device,
    pipeline: &wgpu::ComputePipeline,
    specs: &[BindSpec],
) -> wgpu::BindGroup {
    let entries: Vec<wgpu::BindGroupEntry<'_>> = specs
        .iter()
        .enumerate()
        .map(|(i, (buffer, offset, size))| wgpu::BindGroupEntry {
            binding: i as u32,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer,
                offset: *offset,
                size: std::num::NonZeroU64::new(*size),
            }),
        })
        .collect();
    device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &entries,
    })
}

/// The error for a kernel over the binding limit `limit` that cannot run in blocks.
fn over_limit(why: &str, limit: u64) -> Error {
    too_large(
        "wgpu kernel",
        format!("{why}; a buffer exceeds the adapter's largest storage binding ({limit} bytes)"),
    )
}

/// The largest of `n`, `n / 2`, `n / 4`, … (or 0) that `fits`.
fn halve_until(mut n: usize, fits: impl Fn(usize) -> bool) -> usize {
    while n > 0 && !fits(n) {
        n /= 2;
    }
    n
}

/// The element range `(lo, hi)` that view `v` reaches when its dimension `dim` (if any)
/// holds positions `base..base + n`.
fn view_span(
    v: &kiln_compiler::Strided,
    dim: Option<usize>,
    base: usize,
    n: usize,
) -> (isize, isize) {
    let mut lo = v.offset + dim.map_or(0, |d| base as isize * v.strides[d]);
    let mut hi = lo;
    for (d, (&len, &st)) in v.shape.dims().iter().zip(&v.strides).enumerate() {
        let len = if Some(d) == dim { n } else { len };
        let reach = (len.max(1) as isize - 1) * st;
        if reach < 0 {
            lo += reach;
        } else {
            hi += reach;
        }
    }
    (lo, hi)
}

/// Whether every buffer input's view, over `n` positions of its cut dimension `cut(x)`,
/// fits one binding once its window's start is aligned down.
fn inputs_fit(
    launch: &Launch<'_>,
    inputs: &[Arg<'_, GpuBuffer>],
    cut: &dyn Fn(usize) -> Option<usize>,
    n: usize,
    limit: u64,
    align: u64,
) -> bool {
    inputs.iter().enumerate().all(|(x, a)| match a {
        Arg::Buffer(b) => {
            let (lo, hi) = view_span(&launch.views[x], cut(x), 0, n);
            ((hi - lo + 1) as u64) * elem_bytes(b.dtype) + align <= limit
        }
        _ => true,
    })
}

/// The views and input windows of one block: positions `base..base + n` of each input's cut
/// dimension `cut(x)` (inputs without one are bound whole); a buffer input is bound as the
/// window its view reaches there, its start aligned down, and its view re-based to it.
fn cut_inputs(
    launch: &Launch<'_>,
    inputs: &[Arg<'_, GpuBuffer>],
    cut: &dyn Fn(usize) -> Option<usize>,
    base: usize,
    n: usize,
    align: u64,
) -> (Vec<kiln_compiler::Strided>, Vec<Option<(u64, u64)>>) {
    let mut views = launch.views.clone();
    let mut windows = Vec::with_capacity(inputs.len());
    for (x, a) in inputs.iter().enumerate() {
        let Some(d) = cut(x) else {
            windows.push(None);
            continue;
        };
        let (lo, hi) = view_span(&launch.views[x], Some(d), base, n);
        let v = &mut views[x];
        v.offset += base as isize * v.strides[d];
        let mut dims = v.shape.dims().to_vec();
        dims[d] = n;
        v.shape = kiln_ir::Shape::from(dims);
        match a {
            Arg::Buffer(b) => {
                let eb = elem_bytes(b.dtype);
                let start = (lo.max(0) as u64 * eb) / align * align;
                let end = ((hi + 1).max(0) as u64 * eb).div_ceil(4) * 4;
                v.offset -= (start / eb) as isize;
                windows.push(Some((start, (end - start).max(4))));
            }
            // Read through an output's binding (in place), or computed: no window.
            _ => windows.push(None),
        }
    }
    (views, windows)
}

/// `launch` over another space and views (one block of it).
fn relaunch<'a>(
    launch: &Launch<'a>,
    space: Vec<usize>,
    views: Vec<kiln_compiler::Strided>,
) -> Launch<'a> {
    Launch {
        space: kiln_ir::Shape::from(space),
        views,
        scalars: launch.scalars,
        seeds: launch.seeds,
        dims: launch.dims,
        unread_outputs: launch.unread_outputs,
    }
}

/// The status checks of a kernel run as several launches, given to its outputs at the end.
#[derive(Default)]
struct Lineage(Vec<Arc<Check>>);

impl Lineage {
    /// Adds the checks `buffer` carries.
    fn keep(&mut self, buffer: &GpuBuffer) {
        for c in &buffer.checks {
            if !self.0.iter().any(|x| Arc::ptr_eq(x, c)) {
                self.0.push(c.clone());
            }
        }
    }

    /// Sets every output's checks to the kept ones.
    fn give(self, outputs: &mut [GpuBuffer]) {
        for o in outputs.iter_mut() {
            o.checks = self.0.clone();
        }
    }
}

impl WgpuBackend {
    /// Runs a gather whose table, or a scatter-add whose result, is larger than the
    /// adapter's largest storage binding as one launch per block of the indexed dimension:
    /// each launch binds its block's window of that buffer and handles only the indices in
    /// the block (a gather writes the outputs whose index falls there, a scatter-add sums
    /// into the result rows it holds), checking every index against the whole dimension.
    /// The other buffers are bound whole and must each fit one binding. A scatter-add's
    /// result is cut only where the dimensions before the indexed one are 1 (a block of its
    /// rows is then one window). Anything else is an error naming the limit.
    fn launch_index_blocks(
        &self,
        kernel: &Kernel,
        launch: &Launch<'_>,
        inputs: &[Arg<'_, GpuBuffer>],
        outputs: &mut [GpuBuffer],
    ) -> Result<()> {
        let caps = &self.core.gpu.caps;
        let (limit, align) = (caps.max_binding_bytes, caps.binding_alignment);
        let space = launch.space.dims();
        let bytes = |b: &GpuBuffer| elem_bytes(b.dtype) * b.len as u64;
        let (axis, gather) = match kernel.kind {
            KernelKind::Take { axis } => (axis, true),
            KernelKind::ScatterAdd { axis } => (axis, false),
            _ => {
                return Err(internal(
                    "index blocks of a kernel that does not index".into(),
                ))
            }
        };
        // Everything but the indexed buffer is bound whole.
        let whole_ok =
            inputs.iter().enumerate().all(|(x, a)| {
                (gather && x == 0) || !matches!(a, Arg::Buffer(b) if bytes(b) > limit)
            }) && (!gather || outputs.iter().all(|o| bytes(o) <= limit));
        let what = if gather { "take" } else { "scatter-add" };
        if !whole_ok {
            return Err(over_limit(
                &format!("a {what} over {space:?} whose indexed buffer and another operand are both over the limit"),
                limit,
            ));
        }
        let mut lineage = Lineage::default();
        if gather {
            let full = launch.views[0].shape.dims()[axis];
            let cut = |x: usize| (x == 0).then_some(axis);
            let rows = halve_until(full, |n| inputs_fit(launch, inputs, &cut, n, limit, align));
            if rows == 0 {
                return Err(over_limit(
                    &format!(
                        "one position of dimension {axis} of a take's table {:?} does not fit",
                        launch.views[0].shape.dims()
                    ),
                    limit,
                ));
            }
            let mut base = 0;
            while base < full {
                let n = rows.min(full - base);
                let (views, input_windows) = cut_inputs(launch, inputs, &cut, base, n, align);
                let windows = Windows {
                    inputs: input_windows,
                    outputs: vec![None; outputs.len()],
                    block: Some(kernels::IndexBlock { base, len: n, full }),
                };
                let piece = relaunch(launch, launch.space.dims().to_vec(), views);
                self.launch_one(kernel, &piece, inputs, outputs, &windows)?;
                lineage.keep(&outputs[0]);
                base += n;
            }
        } else {
            let eb = elem_bytes(outputs[0].dtype);
            if space[..axis].iter().any(|&d| d != 1) {
                return Err(over_limit(
                    &format!(
                        "a scatter-add along dimension {axis} of {space:?}: its result can be \
                         cut only along its first dimension longer than 1"
                    ),
                    limit,
                ));
            }
            let full = space[axis];
            let row = space[axis + 1..].iter().product::<usize>() as u64 * eb;
            let step = (align / gcd(align, row.max(1))) as usize;
            let rows = (limit / row.max(1)) as usize / step * step;
            if rows == 0 {
                return Err(over_limit(
                    &format!(
                        "{step} positions of dimension {axis} of a scatter-add's result {space:?} do not fit"
                    ),
                    limit,
                ));
            }
            let mut base = 0;
            while base < full {
                let n = rows.min(full - base);
                let mut dims = space.to_vec();
                dims[axis] = n;
                let windows = Windows {
                    inputs: vec![None; inputs.len()],
                    outputs: vec![Some((base as u64 * row, (n as u64 * row).max(4)))],
                    block: Some(kernels::IndexBlock { base, len: n, full }),
                };
                let piece = relaunch(launch, dims, launch.views.clone());
                self.launch_one(kernel, &piece, inputs, outputs, &windows)?;
                lineage.keep(&outputs[0]);
                base += n;
            }
        }
        lineage.give(outputs);
        Ok(())
    }

    /// Runs a scatter-add whose updates (or indices) are larger than the adapter's largest
    /// storage binding, and whose result fits one, as one launch per block of index
    /// positions (the indices' first dimension longer than 1): the first block sums into the
    /// result, each later one into a partial result added to it. Each result element is
    /// then the sum of its updates in position order within a block, blocks added in order
    /// (a different association than one launch: equal for exact sums, not bit for bit
    /// otherwise). Where a block of one position does not fit, an error names the limit.
    fn launch_update_blocks(
        &self,
        axis: usize,
        kernel: &Kernel,
        launch: &Launch<'_>,
        inputs: &[Arg<'_, GpuBuffer>],
        outputs: &mut [GpuBuffer],
    ) -> Result<()> {
        let caps = &self.core.gpu.caps;
        let (limit, align) = (caps.max_binding_bytes, caps.binding_alignment);
        let iv = &launch.views[1];
        let Some(d0) = iv.shape.dims().iter().position(|&d| d > 1) else {
            return Err(over_limit(
                &format!(
                    "a scatter-add of {} updates with one index position",
                    launch.views[0].shape
                ),
                limit,
            ));
        };
        // The cut dimension of each input's view: the updates' index dimensions follow the
        // result's dimensions before `axis`.
        let cut = |x: usize| [Some(axis + d0), Some(d0)].get(x).copied().flatten();
        let ext = iv.shape.dims()[d0];
        let rows = halve_until(ext, |n| inputs_fit(launch, inputs, &cut, n, limit, align));
        if rows == 0 {
            return Err(over_limit(
                &format!(
                    "one index position of a scatter-add's updates {} does not fit",
                    launch.views[0].shape
                ),
                limit,
            ));
        }
        self.launch_summed_blocks(kernel, launch, inputs, outputs, &cut, ext, rows)
    }

    /// Runs `kernel` once per block of `rows` positions of each input's cut dimension
    /// `cut(x)` (`ext` positions in all), the first block into `outputs`, each later one into
    /// a partial result added to it: the kernel sums over the cut dimension (a scatter-add's
    /// updates, a matmul's `k`). Outputs are bound whole.
    #[allow(clippy::too_many_arguments)]
    fn launch_summed_blocks(
        &self,
        kernel: &Kernel,
        launch: &Launch<'_>,
        inputs: &[Arg<'_, GpuBuffer>],
        outputs: &mut [GpuBuffer],
        cut: &dyn Fn(usize) -> Option<usize>,
        ext: usize,
        rows: usize,
    ) -> Result<()> {
        let align = self.core.gpu.caps.binding_alignment;
        let mut lineage = Lineage::default();
        let mut base = 0;
        while base < ext {
            let n = rows.min(ext - base);
            let (views, input_windows) = cut_inputs(launch, inputs, cut, base, n, align);
            let windows = Windows {
                inputs: input_windows,
                outputs: vec![None; outputs.len()],
                block: None,
            };
            let piece = relaunch(launch, launch.space.dims().to_vec(), views);
            if base == 0 {
                self.launch_one(kernel, &piece, inputs, outputs, &windows)?;
                lineage.keep(&outputs[0]);
            } else {
                let op = kiln_ir::ReduceOp::Sum;
                self.launch_folded(
                    kernel,
                    &piece,
                    inputs,
                    &mut outputs[0],
                    &windows,
                    op,
                    &mut lineage,
                )?;
            }
            base += n;
        }
        lineage.give(outputs);
        Ok(())
    }

    /// Launches `kernel` as `piece` into a new partial result and folds it into `acc` with
    /// `op` (a block of a reduction over the cut dimension, or of a scatter-add's updates).
    #[allow(clippy::too_many_arguments)]
    fn launch_folded(
        &self,
        kernel: &Kernel,
        piece: &Launch<'_>,
        inputs: &[Arg<'_, GpuBuffer>],
        acc: &mut GpuBuffer,
        windows: &Windows,
        op: kiln_ir::ReduceOp,
        lineage: &mut Lineage,
    ) -> Result<()> {
        let mut part = [self.new_buffer(acc.dtype, acc.len)?];
        let run = self
            .launch_one(kernel, piece, inputs, &mut part, windows)
            .and_then(|()| {
                lineage.keep(&part[0]);
                self.fold_into(op, acc, &part[0])
            });
        let [part] = part;
        self.release(part);
        run
    }

    /// Runs a kernel that touches a buffer larger than the adapter's largest storage
    /// binding as several launches, each over a block of consecutive positions of the
    /// kernel's first dimension longer than 1 (its leading dimensions before it are 1): every
    /// buffer is bound as the window that block reads or writes, and the views are shifted
    /// to the block and re-based to their windows. Kernels that can be cut so: elementwise,
    /// reductions (one that reduces the cut dimension reduces each block into a partial
    /// result and folds it into the output with the same operation), arg-reductions that
    /// keep that dimension, matmuls (cut by batches, or by rows of the output when there is
    /// one batch, the right operand then bound whole), gathers (the table or the indices
    /// cut, whichever holds the dimension), top-k by rows, and concatenations along another
    /// dimension. Anything else, or a block of one position that still does not fit (a
    /// broadcast operand over the limit, a transposed one), is an error naming the limit.
    fn launch_pieces(
        &self,
        kernel: &Kernel,
        launch: &Launch<'_>,
        inputs: &[Arg<'_, GpuBuffer>],
        outputs: &mut [GpuBuffer],
    ) -> Result<()> {
        let caps = &self.core.gpu.caps;
        let (limit, align) = (caps.max_binding_bytes, caps.binding_alignment);
        let space = launch.space.dims();
        let r = space.len();
        let first_long = space.iter().position(|&d| d > 1);
        // A reduction over the cut dimension: each block reduces its rows into a partial
        // result, folded into the output with the same operation.
        let folded = match &kernel.kind {
            KernelKind::Reduce { axes, op, .. } => first_long
                .filter(|k| axes.contains(k) && outputs.len() == 1)
                .map(|_| *op),
            _ => None,
        };
        let split = match &kernel.kind {
            KernelKind::Elementwise { .. } => first_long,
            KernelKind::Reduce { .. } => first_long,
            KernelKind::ArgReduce { axis, .. } => first_long.filter(|k| k != axis),
            KernelKind::MatMul { .. } if r >= 2 => first_long.filter(|&k| k <= r - 2),
            KernelKind::Take { .. } => first_long,
            KernelKind::TopK { .. } => first_long.filter(|&k| k + 1 < r),
            KernelKind::Concat { axis } => first_long.filter(|k| k != axis),
            _ => None,
        };
        if let (KernelKind::Concat { axis }, Some(k)) = (&kernel.kind, first_long) {
            if k == *axis {
                return self.concat_by_copies(k, launch, inputs, outputs);
            }
        }
        let Some(k) = split else {
            let kind = match &kernel.kind {
                KernelKind::Elementwise { .. } => "elementwise",
                KernelKind::Reduce { .. } => "reduction",
                KernelKind::ArgReduce { .. } => "arg-reduction",
                KernelKind::MatMul { .. } => "batched matmul",
                KernelKind::Take { .. } => "take",
                KernelKind::ScatterAdd { .. } => "scatter-add",
                KernelKind::TopK { .. } => "top-k",
                KernelKind::Concat { .. } => "concat",
            };
            return Err(over_limit(
                &format!("a {kind} kernel over {space:?} cannot be cut into blocks of rows"),
                limit,
            ));
        };
        let ext = space[k];
        if folded.is_some()
            && outputs
                .iter()
                .any(|o| elem_bytes(o.dtype) * o.len as u64 > limit)
        {
            return Err(over_limit(
                &format!(
                    "a reduction over dimension {k} of {space:?} whose result is itself over the limit"
                ),
                limit,
            ));
        }
        let matmul = matches!(kernel.kind, KernelKind::MatMul { .. });
        let take_axis = match kernel.kind {
            KernelKind::Take { axis } => Some(axis),
            _ => None,
        };
        // The dimension of input x's view that follows the cut dimension, if any. A take's
        // output dimensions are the table's before `axis`, the indices', then the table's
        // after `axis`.
        let vdim = |x: usize| -> Option<usize> {
            let rank = launch.views[x].shape.rank();
            if let Some(a) = take_axis {
                let ri = launch.views[1].shape.rank();
                return match x {
                    0 if k < a => Some(k),
                    0 if k >= a + ri => Some(k + 1 - ri),
                    1 if (a..a + ri).contains(&k) => Some(k - a),
                    _ => None,
                };
            }
            match (matmul && k == r - 2, x) {
                // Rows of the output: rows of `a`, all of `b`.
                (true, 0) => Some(rank - 2),
                (true, 1) => None,
                // Batches, or any other kernel: the same dimension of every full-rank view.
                _ => (rank == r).then_some(k),
            }
        };
        let big = |a: &Arg<'_, GpuBuffer>| matches!(a, Arg::Buffer(b) if elem_bytes(b.dtype) * b.len as u64 > limit);
        if matches!(kernel.kind, KernelKind::MatMul { epilogue: None })
            && vdim(1).is_none()
            && inputs.get(1).is_some_and(big)
        {
            return self.matmul_by_k(kernel, launch, inputs, outputs);
        }
        for (x, a) in inputs.iter().enumerate() {
            if vdim(x).is_none() && big(a) {
                return Err(over_limit(
                    &format!("input {x} is read whole by every block"),
                    limit,
                ));
            }
        }
        // The outputs' elements per position of the cut dimension (a folded reduction writes
        // whole outputs: no windows).
        let out_inner: Vec<u64> = outputs
            .iter()
            .map(|o| match folded {
                Some(_) => 0,
                None => (o.len / ext.max(1)) as u64,
            })
            .collect();
        let fits = |rows: usize| -> bool {
            inputs_fit(launch, inputs, &vdim, rows, limit, align)
                && outputs
                    .iter()
                    .zip(&out_inner)
                    .all(|(o, &n)| n * rows as u64 * elem_bytes(o.dtype) <= limit)
        };
        // Blocks start on binding-aligned output offsets.
        let step = outputs
            .iter()
            .zip(&out_inner)
            .filter(|&(_, &n)| n > 0)
            .map(|(o, &n)| {
                let row = n * elem_bytes(o.dtype);
                (align / gcd(align, row)) as usize
            })
            .max()
            .unwrap_or(1);
        let fitting = halve_until(ext, fits);
        // Blocks too short to start on aligned output offsets write into outputs of their
        // own, copied into place (not where an input is read through an output's binding).
        let staged = fitting < step
            && fitting > 0
            && folded.is_none()
            && !inputs.iter().any(|a| matches!(a, Arg::Output(_)));
        let rows = if staged {
            fitting
        } else {
            fitting / step * step
        };
        if rows == 0 {
            return Err(over_limit(
                &format!(
                    "even one block of {step} positions of dimension {k} of {space:?} does not fit"
                ),
                limit,
            ));
        }
        let mut lineage = Lineage::default();
        let mut r0 = 0;
        while r0 < ext {
            let n = rows.min(ext - r0);
            let mut piece_space = space.to_vec();
            piece_space[k] = n;
            let (views, input_windows) = cut_inputs(launch, inputs, &vdim, r0, n, align);
            let mut windows = Windows {
                inputs: input_windows,
                outputs: Vec::new(),
                block: None,
            };
            if staged {
                let piece = relaunch(launch, piece_space, views);
                let mut parts = outputs
                    .iter()
                    .zip(&out_inner)
                    .map(|(o, &inner)| self.new_buffer(o.dtype, n * inner as usize))
                    .collect::<Result<Vec<GpuBuffer>>>()?;
                windows.outputs = vec![None; parts.len()];
                let run = self.launch_one(kernel, &piece, inputs, &mut parts, &windows);
                if run.is_ok() {
                    lineage.keep(&parts[0]);
                    for ((o, p), &inner) in outputs.iter().zip(&parts).zip(&out_inner) {
                        let bytes = n as u64 * inner * elem_bytes(o.dtype);
                        let at = r0 as u64 * inner * elem_bytes(o.dtype);
                        self.core.copy(&p.buf, 0, &o.buf, at, bytes);
                    }
                }
                for p in parts {
                    self.release(p);
                }
                run?;
                r0 += n;
                continue;
            }
            if folded.is_none() {
                for (o, &inner) in outputs.iter().zip(&out_inner) {
                    let eb = elem_bytes(o.dtype);
                    windows.outputs.push(Some((
                        r0 as u64 * inner * eb,
                        (n as u64 * inner * eb).max(4),
                    )));
                }
            }
            let piece = relaunch(launch, piece_space, views);
            match folded {
                Some(op) if r0 > 0 => self.launch_folded(
                    kernel,
                    &piece,
                    inputs,
                    &mut outputs[0],
                    &windows,
                    op,
                    &mut lineage,
                )?,
                _ => self.launch_one(kernel, &piece, inputs, outputs, &windows)?,
            }
            lineage.keep(&outputs[0]);
            r0 += n;
        }
        lineage.give(outputs);
        Ok(())
    }

    /// A matmul without an epilogue whose right operand is over the binding limit, as one
    /// launch per block of the summed dimension `k` (a row-major right operand's block is one
    /// window), the later blocks' products added to the first's. The output must fit one
    /// binding; a right operand whose block of one `k` does not fit is an error naming the
    /// limit.
    fn matmul_by_k(
        &self,
        kernel: &Kernel,
        launch: &Launch<'_>,
        inputs: &[Arg<'_, GpuBuffer>],
        outputs: &mut [GpuBuffer],
    ) -> Result<()> {
        let caps = &self.core.gpu.caps;
        let (limit, align) = (caps.max_binding_bytes, caps.binding_alignment);
        let space = launch.space.dims();
        let (ra, rb) = (launch.views[0].shape.rank(), launch.views[1].shape.rank());
        let k = launch.views[0].shape.dims()[ra - 1];
        let cut = |x: usize| [Some(ra - 1), Some(rb - 2)].get(x).copied().flatten();
        let out_fits = outputs
            .iter()
            .all(|o| elem_bytes(o.dtype) * o.len as u64 <= limit);
        let rows = halve_until(k, |n| inputs_fit(launch, inputs, &cut, n, limit, align));
        if !out_fits || rows == 0 {
            return Err(over_limit(
                &format!(
                    "a matmul of {space:?} over {k} products whose right operand and result \
                     are over the limit, or whose right operand is too strided to cut by rows"
                ),
                limit,
            ));
        }
        self.launch_summed_blocks(kernel, launch, inputs, outputs, &cut, k, rows)
    }

    /// A concatenation over the binding limit along its first dimension longer than 1, as
    /// buffer copies: each operand, a contiguous view of a buffer, lands in its range of
    /// the output (no binding involved). Another operand is an error naming the limit.
    fn concat_by_copies(
        &self,
        axis: usize,
        launch: &Launch<'_>,
        inputs: &[Arg<'_, GpuBuffer>],
        outputs: &mut [GpuBuffer],
    ) -> Result<()> {
        let limit = self.core.gpu.caps.max_binding_bytes;
        let space = launch.space.dims();
        let eb = elem_bytes(outputs[0].dtype);
        let inner = space[axis + 1..].iter().product::<usize>() as u64;
        let mut at = 0u64;
        let mut lineage = Lineage::default();
        for (x, a) in inputs.iter().enumerate() {
            let v = &launch.views[x];
            let mut from_start = v.clone();
            from_start.offset = 0;
            let b = match a {
                Arg::Buffer(b) if from_start.is_contiguous() && v.offset >= 0 => b,
                _ => {
                    return Err(over_limit(
                        &format!(
                            "a concatenation along dimension {axis} of {space:?} whose operand {x} \
                             is not a contiguous stored array"
                        ),
                        limit,
                    ))
                }
            };
            let len = v.shape.dims()[axis] as u64 * inner;
            self.core.copy(
                &b.buf,
                v.offset as u64 * eb,
                &outputs[0].buf,
                at * eb,
                len * eb,
            );
            lineage.keep(b);
            at += len;
        }
        lineage.give(outputs);
        Ok(())
    }

    /// `acc = op(acc, part)` elementwise over equal-length buffers (a folded reduction).
    fn fold_into(
        &self,
        op: kiln_ir::ReduceOp,
        acc: &mut GpuBuffer,
        part: &GpuBuffer,
    ) -> Result<()> {
        use kiln_compiler::{InputId, Inst, InstOp, Program, RegId, SlotId, Source, Strided, View};
        use kiln_ir::{BinaryOp, Dim, Id, IdVec, ReduceOp};
        let d = acc.dtype;
        if d == DType::Bool {
            return Err(internal("a folded reduction of booleans".into()));
        }
        let bop = match op {
            ReduceOp::Sum => BinaryOp::Add,
            ReduceOp::Prod => BinaryOp::Mul,
            ReduceOp::Max => BinaryOp::Maximum,
            ReduceOp::Min => BinaryOp::Minimum,
        };
        let load = |i: usize| Inst {
            op: InstOp::Load(InputId::new(i)),
            dtype: d,
        };
        let space: kiln_ir::SymShape = [Dim::Sym(0)].into_iter().collect();
        let input = |i: usize| kiln_compiler::Input {
            source: Source::Slot(SlotId::new(i)),
            dtype: d,
            view: View::identity(space.clone()),
        };
        let kernel = Kernel {
            kind: KernelKind::Elementwise {
                program: Program {
                    insts: IdVec::from_vec(vec![
                        load(0),
                        load(1),
                        Inst {
                            op: InstOp::Binary(bop, RegId::new(0), RegId::new(1)),
                            dtype: d,
                        },
                    ]),
                    results: [RegId::new(2)].into_iter().collect(),
                },
            },
            space: space.clone(),
            inputs: IdVec::from_vec(vec![input(0), input(1)]),
            outputs: [SlotId::new(0)].into_iter().collect(),
        };
        let n = acc.len;
        let shape = kiln_ir::Shape::from([n]);
        let dims = [n];
        let l = Launch {
            space: shape.clone(),
            views: vec![
                Strided::contiguous(shape.clone()),
                Strided::contiguous(shape),
            ],
            scalars: &[],
            seeds: &[],
            dims: &dims,
            unread_outputs: false,
        };
        self.launch_one(
            &kernel,
            &l,
            &[Arg::Output(0), Arg::Buffer(part)],
            std::slice::from_mut(acc),
            &Windows::default(),
        )
    }

    /// Writes virtual input `x` (iota, random) over its base shape into a new buffer.
    fn materialise(&self, kernel: &Kernel, launch: &Launch<'_>, x: usize) -> Result<GpuBuffer> {
        use kiln_compiler::{Inst, InstOp, Program, Strided, View};
        use kiln_ir::{Id, IdVec};
        let input = &kernel.inputs.as_slice()[x];
        let base = kiln_ir::resolve_shape(&input.view.base, launch.dims);
        let mut buf = self.new_buffer(input.dtype, base.numel())?;
        let copy = Kernel {
            kind: KernelKind::Elementwise {
                program: Program {
                    insts: IdVec::from_vec(vec![Inst {
                        op: InstOp::Load(kiln_compiler::InputId::new(0)),
                        dtype: input.dtype,
                    }]),
                    results: [kiln_compiler::RegId::new(0)].into_iter().collect(),
                },
            },
            space: input.view.base.clone(),
            inputs: IdVec::from_vec(vec![kiln_compiler::Input {
                source: input.source.clone(),
                dtype: input.dtype,
                view: View::identity(input.view.base.clone()),
            }]),
            outputs: [kiln_compiler::SlotId::new(0)].into_iter().collect(),
        };
        let l = Launch {
            space: base.clone(),
            views: vec![Strided::contiguous(base)],
            scalars: launch.scalars,
            seeds: launch.seeds,
            dims: launch.dims,
            unread_outputs: false,
        };
        match self.launch(&copy, &l, &[Arg::Virtual], std::slice::from_mut(&mut buf)) {
            Ok(()) => Ok(buf),
            Err(e) => {
                self.core.recycle(buf.buf);
                Err(e)
            }
        }
    }

    /// Whether a row group runs fused (see `kernels::row_group`): only elementwise kernels
    /// and reductions that keep the row, a whole-row reduction of at most
    /// `kernels::GROUP_SERIAL` elements per thread (or of rows up to
    /// `kernels::GROUP_LONGEST_ROW` where there are at least `kernels::GROUP_LONG_ROWS_MIN`
    /// rows), a reduction keeping more than the row of at most `GROUP_SERIAL` elements per
    /// output, no buffer over the binding limit, and the bindings within the adapter's.
    fn group_fits(
        &self,
        rows: usize,
        kernels: &[kiln_compiler::GroupKernel<'_, GpuBuffer>],
        buffers: &[GpuBuffer],
    ) -> bool {
        let caps = &self.core.gpu.caps;
        let limit = caps.max_binding_bytes;
        let big = |b: &GpuBuffer| elem_bytes(b.dtype) * b.len as u64 > limit;
        if rows == 0 || u32::try_from(rows).is_err() || buffers.iter().any(big) {
            return false;
        }
        let mut inputs = 0usize;
        for gk in kernels {
            let space = gk.launch.space.dims();
            if space.len() < 2 || space[0] != rows {
                return false;
            }
            match &gk.kernel.kind {
                KernelKind::Elementwise { .. } => {}
                KernelKind::Reduce { axes, .. } => {
                    if axes.contains(&0) {
                        return false;
                    }
                    let (kept, red): (Vec<usize>, Vec<usize>) =
                        (1..space.len()).partition(|a| !axes.contains(a));
                    let out_inner: usize = kept.iter().map(|&a| space[a]).product();
                    let red_n: usize = red.iter().map(|&a| space[a]).product();
                    let fits = if out_inner == 1 {
                        red_n.div_ceil(kernels::WG as usize) <= kernels::GROUP_SERIAL
                            || (red_n <= kernels::GROUP_LONGEST_ROW
                                && rows >= kernels::GROUP_LONG_ROWS_MIN)
                    } else {
                        red_n <= kernels::GROUP_SERIAL
                    };
                    if !fits {
                        return false;
                    }
                }
                _ => return false,
            }
            for a in &gk.inputs {
                match a {
                    kiln_compiler::GroupArg::Buffer(b) => {
                        if big(b) {
                            return false;
                        }
                        inputs += 1;
                    }
                    kiln_compiler::GroupArg::Group(_) | kiln_compiler::GroupArg::Virtual => {}
                }
            }
        }
        // The word table, the f64 table and a status block besides inputs and outputs.
        inputs + buffers.len() + 3 <= caps.max_bindings as usize
    }

    /// A row group as one dispatch (see `kernels::row_group`), its generated work cached
    /// by the group's first kernel and compared in full.
    fn launch_fused_group(
        &self,
        rows: usize,
        kernels: &[kiln_compiler::GroupKernel<'_, GpuBuffer>],
        buffers: &mut [GpuBuffer],
    ) -> Result<()> {
        let caps = &self.core.gpu.caps;
        let launch0 = &kernels[0].launch;
        let mut all_inputs: Vec<kiln_compiler::Input> = Vec::new();
        let mut all_views: Vec<kiln_compiler::Strided> = Vec::new();
        let mut how: Vec<In> = Vec::new();
        let mut args: Vec<Arg<'_, GpuBuffer>> = Vec::new();
        let mut firsts: Vec<usize> = Vec::new();
        for gk in kernels {
            firsts.push(all_inputs.len());
            for (x, a) in gk.inputs.iter().enumerate() {
                all_inputs.push(gk.kernel.inputs.as_slice()[x].clone());
                all_views.push(gk.launch.views[x].clone());
                let (h, arg) = match a {
                    kiln_compiler::GroupArg::Buffer(b) => (In::Buffer, Arg::Buffer(*b)),
                    kiln_compiler::GroupArg::Group(i) => (In::Output(*i), Arg::Output(*i)),
                    kiln_compiler::GroupArg::Virtual => (In::Virtual, Arg::Virtual),
                };
                how.push(h);
                args.push(arg);
            }
        }
        let out_dtypes: Vec<DType> = buffers.iter().map(|b| b.dtype).collect();
        let outputs: Vec<Vec<usize>> = kernels.iter().map(|k| k.outputs.to_vec()).collect();
        let addr = kernels[0].kernel as *const Kernel as usize;
        let hit = |c: &CachedGroup| {
            c.rows == rows
                && c.kernels.len() == kernels.len()
                && c.kernels.iter().zip(kernels).all(|(a, b)| a == b.kernel)
                && c.spaces
                    .iter()
                    .zip(kernels)
                    .all(|(a, b)| a[..] == *b.launch.space.dims())
                && c.views == all_views
                && c.how == how
                && c.out_dtypes == out_dtypes
                && c.outputs == outputs
                && c.scalars == launch0.scalars
                && c.seeds == launch0.seeds
                && c.dims == launch0.dims
        };
        let found = {
            let cache = self.groups.lock().unwrap_or_else(|e| e.into_inner());
            cache
                .get(&addr)
                .and_then(|v| v.iter().find(|c| hit(c)))
                .map(|c| c.generated.clone())
        };
        let generated = match found {
            Some(g) => g,
            None => {
                let all = Kernel {
                    kind: KernelKind::Elementwise {
                        program: kiln_compiler::Program::default(),
                    },
                    space: kernels[0].kernel.space.clone(),
                    inputs: all_inputs.into(),
                    outputs: Default::default(),
                };
                let all_launch = Launch {
                    space: launch0.space.clone(),
                    views: all_views.clone(),
                    scalars: launch0.scalars,
                    seeds: launch0.seeds,
                    dims: launch0.dims,
                    unread_outputs: false,
                };
                let parts: Vec<kernels::GroupPart<'_>> = kernels
                    .iter()
                    .zip(&firsts)
                    .zip(&outputs)
                    .map(|((gk, &first_input), outs)| kernels::GroupPart {
                        kernel: gk.kernel,
                        launch: &gk.launch,
                        first_input,
                        outputs: outs,
                    })
                    .collect();
                let work =
                    kernels::row_group(caps, &parts, &all, &all_launch, &how, &out_dtypes, rows)?;
                let error_dtype = kernels.iter().find_map(|gk| match &gk.kernel.kind {
                    KernelKind::Elementwise { program } | KernelKind::Reduce { program, .. } => {
                        program_int_dtype(program)
                    }
                    _ => None,
                });
                let generated = Arc::new(Generated {
                    work,
                    error_dtype,
                    remap: Vec::new(),
                    pipelines: std::sync::OnceLock::new(),
                    tables: std::sync::OnceLock::new(),
                    binds: Mutex::new(Vec::new()),
                });
                let mut cache = self.groups.lock().unwrap_or_else(|e| e.into_inner());
                if cache.values().map(Vec::len).sum::<usize>() >= GROUP_CACHE_ENTRIES {
                    cache.clear();
                }
                cache.entry(addr).or_default().push(CachedGroup {
                    kernels: kernels.iter().map(|k| k.kernel.clone()).collect(),
                    spaces: kernels
                        .iter()
                        .map(|k| k.launch.space.dims().to_vec())
                        .collect(),
                    views: all_views,
                    how,
                    out_dtypes,
                    outputs,
                    scalars: launch0.scalars.to_vec(),
                    seeds: launch0.seeds.to_vec(),
                    dims: launch0.dims.to_vec(),
                    rows,
                    generated: generated.clone(),
                });
                generated
            }
        };
        self.run_generated(&generated, &args, buffers, &[], caps, &Windows::default())
    }

    /// A row group kernel by kernel (each kernel's outputs moved to the front of `buffers`
    /// while it runs, so it can read the group's other buffers).
    fn launch_group_by_kernel(
        &self,
        kernels: &[kiln_compiler::GroupKernel<'_, GpuBuffer>],
        buffers: &mut [GpuBuffer],
    ) -> Result<()> {
        for gk in kernels {
            // at[i]: where group buffer i now sits.
            let mut at: Vec<usize> = (0..buffers.len()).collect();
            let mut swaps: Vec<(usize, usize)> = Vec::new();
            for (k, &o) in gk.outputs.iter().enumerate() {
                let pos = at[o];
                if pos != k {
                    buffers.swap(k, pos);
                    let moved = at.iter().position(|&p| p == k).unwrap_or(k);
                    at[moved] = pos;
                    at[o] = k;
                    swaps.push((k, pos));
                }
            }
            let n_out = gk.outputs.len();
            let result = {
                let (outs, rest) = buffers.split_at_mut(n_out);
                let args: Vec<Arg<'_, GpuBuffer>> = gk
                    .inputs
                    .iter()
                    .map(|a| match a {
                        kiln_compiler::GroupArg::Buffer(b) => Arg::Buffer(*b),
                        kiln_compiler::GroupArg::Virtual => Arg::Virtual,
                        kiln_compiler::GroupArg::Group(i) => {
                            match gk.outputs.iter().position(|o| o == i) {
                                Some(j) => Arg::Output(j),
                                None => Arg::Buffer(&rest[at[*i] - n_out]),
                            }
                        }
                    })
                    .collect();
                <Self as Backend>::launch(self, gk.kernel, &gk.launch, &args, outs)
            };
            for &(k, pos) in swaps.iter().rev() {
                buffers.swap(k, pos);
            }
            result?;
        }
        Ok(())
    }

    /// Empties every cached launch's bind groups if the pool freed a buffer since the last
    /// sweep (a cached bind group would keep that storage alive).
    fn sweep_binds(&self) {
        let freed = self.core.pool.freed();
        if self.swept.load(Ordering::Relaxed) == freed {
            return;
        }
        let cache = self.launches.lock().unwrap_or_else(|e| e.into_inner());
        for c in cache.map.values().flatten() {
            c.generated
                .binds
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
        }
        drop(cache);
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        for c in groups.values().flatten() {
            c.generated
                .binds
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
        }
        self.swept.store(freed, Ordering::Relaxed);
    }

    /// The generated work of a launch: from the cache when the same kernel ran with the same
    /// launch before (every field compared, so a hit is exactly what generation would give),
    /// else generated now and cached. Generating the WGSL text and its word table is a
    /// sizeable part of a small kernel's host time; a training loop repeats its launches.
    fn generated(
        &self,
        kernel: &Kernel,
        launch: &Launch<'_>,
        how: &[In],
        out_dtypes: &[DType],
        caps: &Capabilities,
        block: Option<kernels::IndexBlock>,
    ) -> Result<Arc<Generated>> {
        let addr = kernel as *const Kernel as usize;
        let hit = |c: &CachedLaunch| {
            c.kernel == *kernel
                && c.how == how
                && c.out_dtypes == out_dtypes
                && c.space == launch.space.dims()
                && c.views == launch.views
                && c.scalars == launch.scalars
                && c.seeds == launch.seeds
                && c.dims == launch.dims
                && c.unread == launch.unread_outputs
                && c.block == block
        };
        {
            let cache = self.launches.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = cache.map.get(&addr).and_then(|v| v.iter().find(|c| hit(c))) {
                return Ok(c.generated.clone());
            }
        }
        let generated = Arc::new(self.generate(kernel, launch, how, out_dtypes, caps, block)?);
        let mut cache = self.launches.lock().unwrap_or_else(|e| e.into_inner());
        if cache.entries >= LAUNCH_CACHE_ENTRIES {
            cache.map.clear();
            cache.entries = 0;
        }
        cache.entries += 1;
        cache.map.entry(addr).or_default().push(CachedLaunch {
            kernel: kernel.clone(),
            how: how.to_vec(),
            out_dtypes: out_dtypes.to_vec(),
            space: launch.space.dims().to_vec(),
            views: launch.views.clone(),
            scalars: launch.scalars.to_vec(),
            seeds: launch.seeds.to_vec(),
            dims: launch.dims.to_vec(),
            unread: launch.unread_outputs,
            block,
            generated: generated.clone(),
        });
        Ok(generated)
    }

    /// Generates the WGSL, word tables and bindings of one launch.
    fn generate(
        &self,
        kernel: &Kernel,
        launch: &Launch<'_>,
        how: &[In],
        out_dtypes: &[DType],
        caps: &Capabilities,
        block: Option<kernels::IndexBlock>,
    ) -> Result<Generated> {
        // Remap input bindings per dispatch (concat binds one input at a time as input 0).
        let mut remap: Vec<Option<usize>> = Vec::new();
        let (work, error_dtype) = match &kernel.kind {
            KernelKind::Elementwise { program } => (
                kernels::elementwise(caps, kernel, program, launch, how, out_dtypes)?,
                program_int_dtype(program),
            ),
            KernelKind::Reduce { program, op, axes } => (
                kernels::reduce(caps, kernel, program, *op, axes, launch, how, out_dtypes[0])?,
                program_int_dtype(program),
            ),
            KernelKind::ArgReduce { program, op, axis } => (
                kernels::arg_reduce(caps, kernel, program, *op, *axis, launch, how)?,
                program_int_dtype(program),
            ),
            KernelKind::MatMul { epilogue } => (
                kernels::matmul(caps, kernel, epilogue.as_ref(), launch, how, out_dtypes[0])?,
                epilogue.as_ref().and_then(program_int_dtype),
            ),
            KernelKind::Take { axis } => (
                kernels::take(caps, kernel, *axis, launch, out_dtypes[0], block)?,
                None,
            ),
            KernelKind::ScatterAdd { axis } => (
                kernels::scatter_add(caps, kernel, *axis, launch, out_dtypes[0], block)?,
                None,
            ),
            KernelKind::TopK { k, indices } => {
                (kernels::top_k(caps, kernel, *k, indices, launch)?, None)
            }
            KernelKind::Concat { axis } => {
                let parts = kernels::concat(caps, kernel, *axis, launch, out_dtypes[0])?;
                let mut w = Work {
                    dispatches: Vec::new(),
                    extras: Vec::new(),
                    index_check: (0, 0),
                };
                for (x, d) in parts {
                    remap.push(Some(x));
                    w.dispatches.push(d);
                }
                (w, None)
            }
        };
        Ok(Generated {
            work,
            error_dtype,
            remap,
            pipelines: std::sync::OnceLock::new(),
            tables: std::sync::OnceLock::new(),
            binds: Mutex::new(Vec::new()),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn launch_inner(
        &self,
        kernel: &Kernel,
        launch: &Launch<'_>,
        inputs: &[Arg<'_, GpuBuffer>],
        outputs: &mut [GpuBuffer],
        how: &[In],
        out_dtypes: &[DType],
        copies: &[(usize, GpuBuffer)],
        caps: &Capabilities,
        windows: &Windows,
    ) -> Result<()> {
        let generated = self.generated(kernel, launch, how, out_dtypes, caps, windows.block)?;
        self.run_generated(&generated, inputs, outputs, copies, caps, windows)
    }

    /// Binds and records the dispatches of generated work (see [`Generated`]).
    fn run_generated(
        &self,
        generated: &Generated,
        inputs: &[Arg<'_, GpuBuffer>],
        outputs: &mut [GpuBuffer],
        copies: &[(usize, GpuBuffer)],
        caps: &Capabilities,
        windows: &Windows,
    ) -> Result<()> {
        let (work, error_dtype, remap) = (&generated.work, generated.error_dtype, &generated.remap);
        let device = &self.core.gpu.device;
        // Per-launch data.
        let status = if work.dispatches.iter().any(|d| d.status) {
            Some(device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("kiln status"),
                size: STATUS_WORDS * 4,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }))
        } else {
            None
        };
        let extras: Vec<GpuBuffer> = work
            .extras
            .iter()
            .map(|&(d, n)| self.new_buffer(d, n))
            .collect::<Result<_>>()?;
        let tables = generated.tables.get_or_init(|| Tables {
            metas: work
                .dispatches
                .iter()
                .map(|d| {
                    let mut bytes: Vec<u8> = d.meta.iter().flat_map(|w| w.to_le_bytes()).collect();
                    if bytes.is_empty() {
                        bytes.extend_from_slice(&[0; 4]);
                    }
                    self.core.constant(&bytes)
                })
                .collect(),
            f64s: work
                .dispatches
                .iter()
                .map(|d| {
                    (!d.f64s.is_empty()).then(|| {
                        let bytes: Vec<u8> = d.f64s.iter().flat_map(|v| v.to_le_bytes()).collect();
                        self.core.constant(&bytes)
                    })
                })
                .collect(),
        });
        let (metas, f64s) = (&tables.metas, &tables.f64s);
        let input_buf = |x: usize| -> Result<&wgpu::Buffer> {
            if let Some((_, c)) = copies.iter().find(|(i, _)| *i == x) {
                return Ok(&c.buf);
            }
            match &inputs[x] {
                Arg::Buffer(b) => Ok(&b.buf),
                _ => Err(internal(format!("input {x} has no buffer"))),
            }
        };
        let mut bound = Vec::with_capacity(work.dispatches.len());
        for (di, d) in work.dispatches.iter().enumerate() {
            if d.binds.len() + 1 > caps.max_bindings as usize {
                return Err(too_large(
                    "wgpu kernel",
                    format!(
                        "a fused kernel needs {} storage buffers but the adapter allows {} per kernel",
                        d.binds.len() + 1,
                        caps.max_bindings
                    ),
                ));
            }
            let mut res: Vec<BindSpec> = vec![(metas[di].clone(), 0, metas[di].size())];
            for b in &d.binds {
                let window = match *b {
                    Bind::Input(x) => {
                        let x = remap.get(di).copied().flatten().unwrap_or(x);
                        windows.inputs.get(x).copied().flatten()
                    }
                    Bind::Output(j) => windows.outputs.get(j).copied().flatten(),
                    _ => None,
                };
                let buf: &wgpu::Buffer = match *b {
                    Bind::Input(x) => {
                        let x = remap.get(di).copied().flatten().unwrap_or(x);
                        input_buf(x)?
                    }
                    Bind::Output(j) => &outputs[j].buf,
                    Bind::F64s => f64s[di]
                        .as_ref()
                        .ok_or_else(|| internal("f64 table missing".into()))?,
                    Bind::Status => status
                        .as_ref()
                        .ok_or_else(|| internal("status missing".into()))?,
                    Bind::Extra(i) => &extras[i].buf,
                };
                let (offset, size) = binding_window(buf, window, caps.max_binding_bytes);
                res.push((buf.clone(), offset, size));
            }
            bound.push((d, res));
        }
        let pre: Vec<(&wgpu::Buffer, &wgpu::Buffer, u64)> = copies
            .iter()
            .filter_map(|(x, c)| {
                let j = match inputs[*x] {
                    Arg::Output(j) => j,
                    _ => return None,
                };
                Some((&outputs[j].buf, &c.buf, elem_bytes(c.dtype) * c.len as u64))
            })
            .collect();
        // Compile first so a shader error is reported, not skipped (once per cached launch).
        let pipes = match generated.pipelines.get() {
            Some(p) => {
                // Reused pipelines (the launch cache's hit is the pipeline cache's too).
                self.hits.fetch_add(p.len() as u64, Ordering::Relaxed);
                p
            }
            None => {
                let p = work
                    .dispatches
                    .iter()
                    .map(|d| self.pipeline(&d.source))
                    .collect::<Result<Vec<_>>>()?;
                generated.pipelines.get_or_init(|| p)
            }
        };
        // Bind groups: the last launch's when it bound the same buffers (never with a
        // status word: that buffer is new at every launch).
        let reuse = status.is_none() && self.reuse_binds;
        let cached: Option<Vec<wgpu::BindGroup>> = if reuse {
            self.sweep_binds();
            let mut binds = generated.binds.lock().unwrap_or_else(|e| e.into_inner());
            let same = |c: &CachedBinds| {
                c.specs.len() == bound.len() && c.specs.iter().zip(&bound).all(|(a, (_, b))| a == b)
            };
            binds.iter().position(same).map(|k| {
                let c = binds.remove(k);
                let g = c.groups.clone();
                binds.insert(0, c);
                g
            })
        } else {
            None
        };
        let groups = match cached {
            Some(g) => {
                self.binds_reused
                    .fetch_add(g.len() as u64, Ordering::Relaxed);
                g
            }
            None => {
                self.binds_made
                    .fetch_add(bound.len() as u64, Ordering::Relaxed);
                let g: Vec<wgpu::BindGroup> = bound
                    .iter()
                    .zip(pipes)
                    .map(|((_, res), p)| bind_group(device, p, res))
                    .collect();
                if reuse {
                    let mut binds = generated.binds.lock().unwrap_or_else(|e| e.into_inner());
                    binds.insert(
                        0,
                        CachedBinds {
                            specs: bound.iter().map(|(_, r)| r.clone()).collect(),
                            groups: g.clone(),
                        },
                    );
                    binds.truncate(BIND_SETS);
                }
                g
            }
        };
        let dispatches: Vec<&Dispatch> = bound.iter().map(|(d, _)| *d).collect();
        drop(bound);
        self.submit(&dispatches, &groups, pipes, &pre);
        for e in extras {
            self.core.recycle(e.buf);
        }
        // Error lineage: every output depends on the inputs' checks and this launch's.
        let mut checks: Vec<Arc<Check>> = Vec::new();
        for a in inputs {
            let from = match a {
                Arg::Buffer(b) => &b.checks,
                // Written in place: the input's value (and its checks) is the output's.
                Arg::Output(j) => &outputs[*j].checks,
                Arg::Virtual => continue,
            };
            for c in from {
                if c.verified.load(Ordering::Relaxed) {
                    continue; // read back without an error already
                }
                if !checks.iter().any(|x| Arc::ptr_eq(x, c)) {
                    checks.push(c.clone());
                }
            }
        }
        if let Some(buf) = status {
            checks.push(Arc::new(Check {
                buf,
                verified: std::sync::atomic::AtomicBool::new(false),
                dtype: error_dtype.unwrap_or(DType::I64),
                axis: work.index_check.0,
                size: work.index_check.1,
            }));
        }
        for o in outputs.iter_mut() {
            o.checks = checks.clone();
        }
        Ok(())
    }
}

impl Core {
    /// Records a copy of `bytes` from offset `from` of `src` to offset `at` of `dst` (after
    /// the launches recorded so far, before later ones; offsets and size multiples of 4).
    fn copy(&self, src: &wgpu::Buffer, from: u64, dst: &wgpu::Buffer, at: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let mut guard = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let pending = &mut *guard;
        pending.pass = None; // ends the pass: copies go to the encoder
        let enc = pending.enc.get_or_insert_with(|| {
            self.gpu
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("kiln launches"),
                })
        });
        enc.copy_buffer_to_buffer(src, from, dst, at, bytes);
        drop(guard);
        if !self.batch {
            self.flush();
        }
    }

    /// Submits the recorded work, then returns the buffers released meanwhile to the pool.
    /// The submission happens under the lock: once another thread sees no recorded work, the
    /// work it would have waited for is on the queue (a readback submitted next runs after it).
    fn flush(&self) {
        let release = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            p.pass = None; // ends the pass before the encoder finishes
            if let Some(enc) = p.enc.take() {
                self.gpu.queue.submit([enc.finish()]);
            }
            std::mem::take(&mut p.release)
        };
        for b in release {
            self.pool.put(b);
        }
    }

    /// Hands a buffer back: to the pool now, or once the recorded work is submitted.
    fn recycle(&self, buf: wgpu::Buffer) {
        {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if p.enc.is_some() {
                p.release.push(buf);
                return;
            }
        }
        self.pool.put(buf);
    }

    /// A storage buffer holding `bytes` for good (a cached launch's word or `f64` table):
    /// written at creation, outside the pool, dropped with the launch cache's entry.
    fn constant(&self, bytes: &[u8]) -> wgpu::Buffer {
        use wgpu::util::DeviceExt;
        self.gpu
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("kiln table"),
                contents: bytes,
                usage: wgpu::BufferUsages::STORAGE,
            })
    }

    /// The first `len` elements of `buffer` (waits for the device; reports the value errors
    /// its lineage raised).
    fn read_back(&self, buffer: &GpuBuffer, dtype: DType, len: usize) -> Result<HostData> {
        if buffer.dtype != dtype || buffer.len < len {
            return Err(internal(format!(
                "download of {len} {dtype} elements from a buffer of {} {}",
                buffer.len, buffer.dtype
            )));
        }
        self.read_checked(&buffer.checks, &buffer.buf, dtype, len)
    }

    /// The first `len` elements of `buf` (none: only the status words) after the status words
    /// of `checks` say no kernel behind them raised a value error, in one round trip (waits
    /// for the device). Checks found fine are marked verified.
    fn read_checked(
        &self,
        checks: &[Arc<Check>],
        buf: &wgpu::Buffer,
        dtype: DType,
        len: usize,
    ) -> Result<HostData> {
        self.flush();
        let device = &self.gpu.device;
        let bytes = elem_bytes(dtype) * len as u64;
        let status_bytes = STATUS_WORDS * 4 * checks.len() as u64;
        let staging = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("kiln readback"),
            size: (bytes + status_bytes).max(4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = device.create_command_encoder(&Default::default());
        for (i, c) in checks.iter().enumerate() {
            enc.copy_buffer_to_buffer(
                &c.buf,
                0,
                &staging,
                i as u64 * STATUS_WORDS * 4,
                STATUS_WORDS * 4,
            );
        }
        if bytes > 0 {
            enc.copy_buffer_to_buffer(buf, 0, &staging, status_bytes, bytes);
        }
        self.gpu.queue.submit([enc.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        let waited = device.poll(wgpu::PollType::wait_indefinitely());
        let mapped = rx.recv().ok().and_then(|r| r.ok());
        let result = match (waited, mapped) {
            (Ok(_), Some(())) => {
                let view = match staging.slice(..).get_mapped_range() {
                    Ok(v) => v,
                    Err(e) => return Err(internal(format!("readback mapping failed: {e}"))),
                };
                let words: Vec<u32> = view[..status_bytes as usize]
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                let n = checks.len();
                if !dump() {
                    tracing::trace!(target: TARGET, checks = n, ?words, "download");
                } else if tracing::enabled!(target: TARGET, tracing::Level::INFO) {
                    tracing::info!(target: TARGET, checks = n, ?words, "download");
                } else {
                    eprintln!("kiln-wgpu: download with {n} checks: {words:?}");
                }
                let err = checks
                    .iter()
                    .enumerate()
                    .find_map(|(i, c)| c.error(&words[i * STATUS_WORDS as usize..]));
                if err.is_none() {
                    // Checked: later results need not carry these checks again.
                    for c in checks {
                        c.verified.store(true, Ordering::Relaxed);
                    }
                    if bytes > 0 {
                        self.downloaded.fetch_add(bytes, Ordering::Relaxed);
                        self.downloads.fetch_add(1, Ordering::Relaxed);
                    }
                }
                match err {
                    Some(e) => Err(e),
                    None => {
                        let b = &view[status_bytes as usize..(status_bytes + bytes) as usize];
                        Ok(match self.host_pool.get() {
                            Some(&pool) if len > 0 => {
                                let (mut v, start) = pool.take_host(dtype, len);
                                buffer::fill_from_bytes(&mut v, start, b, len);
                                HostData::recycled_from(v, start, pool)
                            }
                            _ => buffer::from_bytes(b, dtype, len),
                        })
                    }
                }
            }
            _ => Err(Error::InvalidArgument {
                op: "wgpu download",
                message: "the device was lost or the readback failed".into(),
                hint: "check the driver; rerun with the CPU backend (KILN_DEVICE=cpu)".into(),
            }),
        };
        drop(staging);
        result
    }
}

/// A result kept on the device between evaluations: the [`kiln_ir::DeviceBuffer`] behind
/// kiln's resident arrays. Its storage goes back to the backend's pool when the last handle
/// drops.
pub struct Resident {
    core: Arc<Core>,
    /// `Some` until dropped.
    buffer: Option<GpuBuffer>,
    /// Set once the storage was donated to a run ([`Backend::donate`]): it now belongs to
    /// that run's result, so this handle neither reads it nor hands it back.
    donated: AtomicBool,
}

impl std::fmt::Debug for Resident {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resident")
            .field("adapter", &self.core.gpu.caps.adapter)
            .field("buffer", &self.buffer)
            .finish()
    }
}

impl Drop for Resident {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            if !*self.donated.get_mut() {
                self.core.recycle(b.buf);
            }
        }
    }
}

impl kiln_ir::DeviceBuffer for Resident {
    fn device(&self) -> &'static str {
        "wgpu"
    }
    fn dtype(&self) -> DType {
        self.buffer.as_ref().map_or(DType::F32, |b| b.dtype)
    }
    fn len(&self) -> usize {
        self.buffer.as_ref().map_or(0, |b| b.len)
    }
    fn download(&self) -> Result<HostData> {
        let b = self
            .buffer
            .as_ref()
            .ok_or_else(|| internal("a dropped resident value was read".into()))?;
        if self.donated.load(Ordering::Acquire) {
            return Err(donated_error(b));
        }
        self.core.read_back(b, b.dtype, b.len)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Whether input `x` of `kernel` may be read through the output binding: an epilogue input of
/// a matmul launched whole (one launch over unshifted views).
fn epilogue_in_place(kernel: &Kernel, x: usize, windows: &Windows) -> bool {
    matches!(kernel.kind, KernelKind::MatMul { epilogue: Some(_) }) && x >= 2 && windows.is_whole()
}

/// The error reading a donated value raises.
fn donated_error(b: &GpuBuffer) -> Error {
    Error::InvalidArgument {
        op: "read",
        message: format!(
            "this array ({} {} elements) was donated to an evaluation that wrote its result over it",
            b.len, b.dtype
        ),
        hint: "read the evaluation's result instead, or do not donate an array you read later".into(),
    }
}

/// The integer dtype a program's division/power errors would name.
fn program_int_dtype(p: &kiln_compiler::Program) -> Option<DType> {
    use kiln_compiler::InstOp;
    p.insts.values().find_map(|i| match i.op {
        InstOp::Binary(_, a, _) => {
            let d = p.insts[a].dtype;
            (d == DType::I32 || d == DType::I64).then_some(d)
        }
        _ => None,
    })
}
