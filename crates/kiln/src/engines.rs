//! The engines, one per device, opened on first use: the CPU's always, the wgpu one when the
//! `wgpu` feature is on and an adapter opens (else the reason it did not, as an error).
//! Both the evaluation ([`crate::eval`]) and the device queries ([`crate::device`]) reach
//! them here.
//!
//! Depends on `kiln-compiler` (the engine), `kiln-cpu`, (feature `wgpu`) `kiln-wgpu`, and
//! `kiln-ir`'s errors.

use kiln_compiler::Engine;
use kiln_cpu::CpuBackend;
use kiln_ir::Error;
use std::sync::OnceLock;

/// The default bound of the graph cache (plans).
pub const DEFAULT_CACHE_CAPACITY: usize = kiln_compiler::DEFAULT_CAPACITY;

fn capacity() -> usize {
    std::env::var("KILN_CACHE_CAPACITY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CACHE_CAPACITY)
}

#[allow(clippy::default_constructed_unit_structs)] // the backend may gain state (a pool)
pub(crate) fn cpu_engine() -> &'static Engine<CpuBackend> {
    static ENGINE: OnceLock<Engine<CpuBackend>> = OnceLock::new();
    ENGINE.get_or_init(|| Engine::new(CpuBackend::default(), capacity()))
}

/// The wgpu engine, opened on first use (`Err` with the reason when no adapter exists or the
/// `wgpu` feature is off).
#[cfg(feature = "wgpu")]
pub(crate) fn wgpu_engine() -> kiln_ir::Result<&'static Engine<kiln_wgpu::WgpuBackend>> {
    static ENGINE: OnceLock<std::result::Result<Engine<kiln_wgpu::WgpuBackend>, String>> =
        OnceLock::new();
    ENGINE
        .get_or_init(|| {
            kiln_wgpu::WgpuBackend::new()
                .map(|b| {
                    // Downloads land in the CPU's buffer pool and go back there when dropped.
                    b.set_host_pool(CpuBackend::pool());
                    Engine::new(b, capacity())
                })
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| unavailable(e.clone()))
}

/// The error of an evaluation on a wgpu device that cannot be had, with the `reason`.
pub(crate) fn unavailable(reason: String) -> Error {
    Error::InvalidArgument {
        op: "wgpu device",
        message: format!("the wgpu device is unavailable: {reason}"),
        hint: "build kiln with `features = [\"wgpu\"]` and install a GPU driver (or Mesa's software Vulkan driver), or use the CPU: unset KILN_DEVICE or call kiln::set_default_device(kiln::Device::Cpu)".into(),
    }
}
