//! Device choice: [`Device`] (the CPU, or a GPU through wgpu with the `wgpu` feature), the
//! process-wide default ([`default_device`], [`set_default_device`], `KILN_DEVICE=cpu|wgpu`)
//! and per-evaluation placement ([`eval_on`]).
//!
//! **Where values live.** An evaluation runs wholly on one device: its inputs (arrays made
//! from host data, or evaluated earlier) are uploaded at its start and the values it returns
//! are downloaded at its end, into host memory, where every evaluated array keeps its value.
//! Inside one evaluation nothing crosses between host and device; every intermediate stays
//! on the device. So put the work of a step into one evaluation ([`crate::eval`] of all the
//! arrays it needs) to keep transfers to one upload of the inputs and one download of the
//! results. (Keeping values resident on the GPU *between* evaluations is not implemented
//! yet.)
//!
//! Depends on [`crate::eval`] (the engines) and `tracing` (the `kiln::device` warning).

use kiln_ir::{DType, Error, Result};
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
            Device::Wgpu => crate::eval::wgpu_engine().is_ok(),
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
            Device::Wgpu => match crate::eval::wgpu_engine() {
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
            Device::Wgpu => match crate::eval::wgpu_engine() {
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

pub(crate) fn unavailable(reason: String) -> Error {
    Error::InvalidArgument {
        op: "wgpu device",
        message: format!("the wgpu device is unavailable: {reason}"),
        hint: "build kiln with `features = [\"wgpu\"]` and install a GPU driver (or Mesa's software Vulkan driver), or use the CPU: unset KILN_DEVICE or call kiln::set_default_device(kiln::Device::Cpu)".into(),
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
        return Err(unavailable(device.describe()));
    }
    DEFAULT.store(code(device), Ordering::Relaxed);
    Ok(())
}

/// Evaluates `arrays` together on `device` (whatever the default): one upload of their
/// inputs, one download of their values.
///
/// ```
/// use kiln::{Array, Device};
/// let x = Array::from_vec(vec![1.0f32, 4.0, 9.0], &[3])?;
/// let y = x.sqrt();
/// kiln::eval_on(Device::Cpu, &[&y])?;
/// assert_eq!(y.to_vec::<f32>()?, vec![1.0, 2.0, 3.0]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn eval_on(device: Device, arrays: &[&Array]) -> Result<()> {
    crate::eval::eval_with(device, arrays)
}
