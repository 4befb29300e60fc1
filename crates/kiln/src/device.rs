//! Device choice: [`Device`] (the CPU, or a GPU through wgpu with the `wgpu` feature), the
//! process-wide default ([`default_device`], [`set_default_device`], `KILN_DEVICE=cpu|wgpu`)
//! and per-evaluation placement ([`eval_on`]).
//!
//! **Where values live.** An evaluation runs wholly on one device, and its results stay
//! there: on the GPU an evaluated array is *resident* ([`Array::device`]), and a later
//! evaluation on the GPU reads it in place, never uploading it again. Host data (arrays
//! made from vectors, or evaluated on the CPU) is uploaded when a GPU evaluation reads it.
//! `to_vec`, `item`, printing and the other readers download a resident value once and keep
//! the host copy beside it. [`Array::to_device`] and [`Array::to_host`] move a value
//! explicitly. An input resident on another device than the evaluation's is moved through
//! the host, with a `tracing` event at target `kiln::transfer` (DEBUG) naming both devices
//! and the bytes, or refused with an error under strict placement
//! ([`set_strict_placement`], `KILN_STRICT_PLACEMENT=1`). [`Device::transfers`] counts the
//! bytes moved. So a training loop on the GPU uploads its parameters once, then only each
//! batch, and downloads only what it reads (the loss).
//!
//! Depends on [`crate::engines`], `kiln-compiler` (run options) and `tracing`
//! (the `kiln::device` warning).

use kiln_ir::{DType, Error, Node, Result};
use std::sync::atomic::{AtomicU8, Ordering};

use crate::Array;

/// Where evaluations run.
///
/// ```
/// assert_eq!(kiln::Device::Cpu.name(), "cpu");
/// assert_eq!("wgpu".parse::<kiln::Device>().unwrap(), kiln::Device::Wgpu);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// The host CPU (SIMD kernels on all cores). Always available.
    Cpu,
    /// A GPU through wgpu (Vulkan, Metal, DX12 or GL, chosen by `WGPU_BACKEND`). Needs the
    /// `wgpu` feature of `kiln` and an adapter.
    Wgpu,
}

impl Device {
    /// The device's name (`"cpu"`, `"wgpu"`).
    ///
    /// ```
    /// assert_eq!(kiln::Device::Wgpu.name(), "wgpu");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Wgpu => "wgpu",
        }
    }

    /// Whether evaluations can run on this device here (for wgpu: the feature is on and an
    /// adapter opened; the first call opens it).
    ///
    /// ```
    /// assert!(kiln::Device::Cpu.is_available());
    /// if !kiln::Device::Wgpu.is_available() {
    ///     eprintln!("no GPU: {}", kiln::Device::Wgpu.describe());
    /// }
    /// ```
    pub fn is_available(self) -> bool {
        match self {
            Device::Cpu => true,
            #[cfg(feature = "wgpu")]
            Device::Wgpu => crate::engines::wgpu_engine().is_ok(),
            #[cfg(not(feature = "wgpu"))]
            Device::Wgpu => false,
        }
    }

    /// Whether evaluations on this device can compute with `dtype` here. The CPU computes
    /// with every dtype. A wgpu adapter computes with `f64` only if it has wgpu's
    /// `SHADER_F64` feature and with `i64` only if it has `SHADER_INT64` (software GL
    /// (llvmpipe) has neither; lavapipe's Vulkan has both); evaluating a graph with such a
    /// dtype on an adapter without the feature fails with [`Error::UnsupportedDType`] naming
    /// it. An unavailable device supports no dtype. For wgpu, the first call opens the adapter.
    ///
    /// ```
    /// use kiln::{DType, Device};
    /// assert!(DType::ALL.iter().all(|&d| Device::Cpu.supports(d)));
    /// // Pick the widest float the device computes with.
    /// let dev = Device::Wgpu;
    /// let float = if dev.supports(DType::F64) { DType::F64 } else { DType::F32 };
    /// if dev.is_available() {
    ///     assert!(dev.supports(float));
    /// }
    /// ```
    pub fn supports(self, dtype: DType) -> bool {
        match self {
            Device::Cpu => true,
            #[cfg(feature = "wgpu")]
            Device::Wgpu => match crate::engines::wgpu_engine() {
                Ok(e) => {
                    let c = e.backend().capabilities();
                    match dtype {
                        DType::F64 => c.f64,
                        DType::I64 => c.i64,
                        DType::Bool | DType::I32 | DType::F32 => true,
                    }
                }
                Err(_) => false,
            },
            #[cfg(not(feature = "wgpu"))]
            Device::Wgpu => {
                let _ = dtype;
                false
            }
        }
    }

    /// A line describing the device: the adapter and its features, or why it is unavailable.
    ///
    /// ```
    /// assert!(kiln::Device::Cpu.describe().starts_with("cpu"));
    /// ```
    pub fn describe(self) -> String {
        match self {
            Device::Cpu => format!(
                "cpu ({} threads)",
                std::thread::available_parallelism().map_or(1, |n| n.get())
            ),
            #[cfg(feature = "wgpu")]
            Device::Wgpu => match crate::engines::wgpu_engine() {
                Ok(e) => {
                    let c = e.backend().capabilities();
                    format!("wgpu: {} (f64: {}, i64: {})", c.adapter, c.f64, c.i64)
                }
                Err(e) => e.to_string(),
            },
            #[cfg(not(feature = "wgpu"))]
            Device::Wgpu => "wgpu: kiln was built without its `wgpu` feature".into(),
        }
    }
}

/// Host↔device transfer counters of a device (see [`Device::transfers`]).
///
/// ```
/// let t = kiln::Device::Cpu.transfers();
/// assert_eq!(t, kiln::Transfers::default()); // the CPU moves nothing
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    /// Bytes copied from the host to the device (`bool` counts 4 bytes on wgpu).
    pub uploaded_bytes: u64,
    /// Host-to-device copies.
    pub uploads: u64,
    /// Bytes copied from the device to the host.
    pub downloaded_bytes: u64,
    /// Device-to-host copies.
    pub downloads: u64,
}

impl std::ops::Sub for Transfers {
    type Output = Transfers;
    /// The transfers between two readings (`after - before`).
    fn sub(self, before: Transfers) -> Transfers {
        Transfers {
            uploaded_bytes: self.uploaded_bytes - before.uploaded_bytes,
            uploads: self.uploads - before.uploads,
            downloaded_bytes: self.downloaded_bytes - before.downloaded_bytes,
            downloads: self.downloads - before.downloads,
        }
    }
}

/// Memory a device holds for kiln (see [`Device::memory`]).
///
/// ```
/// let m = kiln::Device::Cpu.memory();
/// assert_eq!(m.live_bytes, 0); // host memory is not counted here
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceMemory {
    /// Bytes of buffers in use: resident values and the running evaluation's buffers.
    pub live_bytes: u64,
    /// Bytes of released buffers kept for reuse.
    pub pooled_bytes: u64,
    /// Results written over a donated array's storage ([`crate::eval_donating`]) since the
    /// device was opened.
    pub donated: u64,
}

impl Device {
    /// Waits until the device has finished the work submitted to it (GPU evaluations return
    /// once their work is queued). A no-op on the CPU. For timing; reading a value waits by
    /// itself.
    ///
    /// ```
    /// kiln::Device::Cpu.synchronize();
    /// ```
    pub fn synchronize(self) {
        match self {
            Device::Cpu => {}
            #[cfg(feature = "wgpu")]
            Device::Wgpu => {
                if let Ok(e) = crate::engines::wgpu_engine() {
                    e.backend().synchronize();
                }
            }
            #[cfg(not(feature = "wgpu"))]
            Device::Wgpu => {}
        }
    }

    /// Bytes moved between the host and this device since the process opened it.
    ///
    /// ```
    /// use kiln::{Array, Device};
    /// if Device::Wgpu.is_available() {
    ///     let before = Device::Wgpu.transfers();
    ///     let x = Array::from_vec(vec![1.0f32; 256], &[256])?.to_device(Device::Wgpu)?;
    ///     let moved = Device::Wgpu.transfers() - before;
    ///     assert_eq!(moved.uploaded_bytes, 1024);
    ///     let _ = x;
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn transfers(self) -> Transfers {
        match self {
            Device::Cpu => Transfers::default(),
            #[cfg(feature = "wgpu")]
            Device::Wgpu => match crate::engines::wgpu_engine() {
                Ok(e) => {
                    let t = e.backend().transfer_stats();
                    Transfers {
                        uploaded_bytes: t.uploaded_bytes,
                        uploads: t.uploads,
                        downloaded_bytes: t.downloaded_bytes,
                        downloads: t.downloads,
                    }
                }
                Err(_) => Transfers::default(),
            },
            #[cfg(not(feature = "wgpu"))]
            Device::Wgpu => Transfers::default(),
        }
    }

    /// The device memory kiln holds: buffers in use (resident values included) and pooled.
    ///
    /// ```
    /// let m = kiln::Device::Wgpu.memory(); // zeros when no GPU was opened
    /// assert!(m.live_bytes + m.pooled_bytes < u64::MAX);
    /// ```
    pub fn memory(self) -> DeviceMemory {
        match self {
            Device::Cpu => DeviceMemory::default(),
            #[cfg(feature = "wgpu")]
            Device::Wgpu => match crate::engines::wgpu_engine() {
                Ok(e) => {
                    let p = e.backend().pool_stats();
                    DeviceMemory {
                        live_bytes: p.live,
                        pooled_bytes: p.pooled,
                        donated: p.donated,
                    }
                }
                Err(_) => DeviceMemory::default(),
            },
            #[cfg(not(feature = "wgpu"))]
            Device::Wgpu => DeviceMemory::default(),
        }
    }
}

/// 0: not read yet; 1: off; 2: on.
static STRICT: AtomicU8 = AtomicU8::new(0);

/// Whether strict placement is on: an evaluation refuses an input resident on another
/// device instead of moving it. Set by [`set_strict_placement`], else by
/// `KILN_STRICT_PLACEMENT=1`; off by default.
///
/// ```
/// kiln::set_strict_placement(false);
/// assert!(!kiln::strict_placement());
/// ```
pub fn strict_placement() -> bool {
    match STRICT.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let on = std::env::var("KILN_STRICT_PLACEMENT").is_ok_and(|v| v == "1");
            let _ = STRICT.compare_exchange(
                0,
                if on { 2 } else { 1 },
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            strict_placement()
        }
    }
}

/// Turns strict placement on or off (see [`strict_placement`]).
///
/// ```
/// use kiln::{Array, Device};
/// if Device::Wgpu.is_available() {
///     let g = Array::from_vec(vec![1.0f32, 2.0], &[2])?.to_device(Device::Wgpu)?;
///     kiln::set_strict_placement(true);
///     // Evaluating on the CPU would have to download `g`: refused.
///     assert!(kiln::eval_on(Device::Cpu, &[&(&g * 2.0)]).is_err());
///     kiln::set_strict_placement(false);
/// }
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn set_strict_placement(on: bool) {
    STRICT.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

impl Array {
    /// Where the value lives: `Some(Device::Wgpu)` for a value resident on the GPU (whether
    /// or not a host copy was downloaded too), `Some(Device::Cpu)` for host data, `None`
    /// before evaluation.
    ///
    /// ```
    /// use kiln::{Array, Device};
    /// let x = Array::from_vec(vec![1.0f32], &[1])?;
    /// assert_eq!(x.device(), Some(Device::Cpu));
    /// assert_eq!((&x + 1.0).device(), None);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn device(&self) -> Option<Device> {
        if self.node.resident().is_some() {
            Some(Device::Wgpu)
        } else if self.node.value().is_some() {
            Some(Device::Cpu)
        } else {
            None
        }
    }

    /// The value on `device`: evaluates (on the default device), then copies it there
    /// unless it is there already (then the result shares it). A GPU copy is resident:
    /// evaluations on the GPU read it without uploading it again.
    ///
    /// ```
    /// use kiln::{Array, Device};
    /// let w = Array::from_vec(vec![1.0f32, 2.0], &[2])?;
    /// if Device::Wgpu.is_available() {
    ///     let w = w.to_device(Device::Wgpu)?; // uploaded once
    ///     assert_eq!(w.device(), Some(Device::Wgpu));
    ///     let y = &w * 3.0;
    ///     kiln::eval_on(Device::Wgpu, &[&y])?; // reads `w` in place; `y` stays on the GPU
    ///     assert_eq!(y.to_vec::<f32>()?, vec![3.0, 6.0]); // downloads
    /// }
    /// assert_eq!(w.to_device(Device::Cpu)?.device(), Some(Device::Cpu));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn to_device(&self, device: Device) -> Result<Array> {
        match device {
            Device::Cpu => self.to_host(),
            Device::Wgpu => {
                self.eval()?;
                if self.node.resident().is_some() {
                    return Ok(self.clone());
                }
                let host = self.data()?;
                #[cfg(feature = "wgpu")]
                {
                    let d = crate::engines::wgpu_engine()?
                        .backend()
                        .upload_resident(&host)?;
                    Ok(Array::from_node(Node::with_resident(
                        d,
                        self.node.shape().clone(),
                    )))
                }
                #[cfg(not(feature = "wgpu"))]
                {
                    let _ = (host, Node::with_resident);
                    Err(crate::engines::unavailable(
                        "kiln was built without its `wgpu` feature".into(),
                    ))
                }
            }
        }
    }

    /// The value in host memory: evaluates, then downloads a resident value (a new array;
    /// the resident one is unchanged). An array already on the host is returned as is
    /// (sharing its data).
    ///
    /// ```
    /// let x = kiln::Array::from_vec(vec![2i32, 3], &[2])?;
    /// let h = (&x * 2).to_host()?;
    /// assert_eq!(h.device(), Some(kiln::Device::Cpu));
    /// assert_eq!(h.to_vec::<i32>()?, vec![4, 6]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn to_host(&self) -> Result<Array> {
        self.eval()?;
        if self.node.resident().is_none() {
            return Ok(self.clone());
        }
        let host = self.data()?;
        Ok(Array::from_node(Node::with_value(
            host,
            self.node.shape().clone(),
        )))
    }
}

impl std::str::FromStr for Device {
    type Err = Error;

    fn from_str(s: &str) -> Result<Device> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(Device::Cpu),
            "wgpu" | "gpu" => Ok(Device::Wgpu),
            other => Err(Error::InvalidArgument {
                op: "device",
                message: format!("unknown device {other:?}"),
                hint: "use \"cpu\" or \"wgpu\"".into(),
            }),
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// 0: not read yet; 1: cpu; 2: wgpu.
static DEFAULT: AtomicU8 = AtomicU8::new(0);

/// The device evaluations run on unless told otherwise: set by [`set_default_device`], else
/// by `KILN_DEVICE` (`cpu` or `wgpu`; an unknown value is ignored and reported once, as a
/// `tracing` warning at target `kiln::device`, or on stderr where no subscriber records it),
/// else the CPU.
///
/// ```
/// let d = kiln::default_device();
/// assert!(d == kiln::Device::Cpu || d == kiln::Device::Wgpu);
/// ```
pub fn default_device() -> Device {
    match DEFAULT.load(Ordering::Relaxed) {
        1 => Device::Cpu,
        2 => Device::Wgpu,
        _ => {
            let d = match std::env::var("KILN_DEVICE") {
                Ok(v) if !v.is_empty() => v.parse().unwrap_or_else(|e| {
                    const TARGET: &str = "kiln::device";
                    if tracing::enabled!(target: TARGET, tracing::Level::WARN) {
                        tracing::warn!(target: TARGET, "ignoring KILN_DEVICE: {e}");
                    } else {
                        eprintln!("kiln: ignoring KILN_DEVICE: {e}");
                    }
                    Device::Cpu
                }),
                _ => Device::Cpu,
            };
            let _ = DEFAULT.compare_exchange(0, code(d), Ordering::Relaxed, Ordering::Relaxed);
            default_device()
        }
    }
}

fn code(d: Device) -> u8 {
    match d {
        Device::Cpu => 1,
        Device::Wgpu => 2,
    }
}

/// Sets the process-wide default device. Fails (leaving the default unchanged) when the
/// device is unavailable, with the reason.
///
/// ```
/// kiln::set_default_device(kiln::Device::Cpu)?;
/// assert_eq!(kiln::default_device(), kiln::Device::Cpu);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn set_default_device(device: Device) -> Result<()> {
    if !device.is_available() {
        return Err(crate::engines::unavailable(device.describe()));
    }
    DEFAULT.store(code(device), Ordering::Relaxed);
    Ok(())
}
