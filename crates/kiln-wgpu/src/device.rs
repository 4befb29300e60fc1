//! Opening a wgpu device: adapter choice from the environment (`WGPU_BACKEND`,
//! `WGPU_POWER_PREF`), the optional features kiln uses (`SHADER_F64`,
//! `SHADER_INT64`), and the adapter's own limits (binding counts, buffer sizes).
//!
//! Depends on `wgpu` and `pollster` only.

use thiserror::Error;

/// Why no wgpu device could be opened.
#[derive(Debug, Error)]
pub enum InitError {
    /// No adapter matched (no GPU driver, or `WGPU_BACKEND` names a backend that has none).
    #[error("wgpu: no adapter found (WGPU_BACKEND={backend}): install a Vulkan driver (e.g. Mesa's `mesa-vulkan-drivers libvulkan1` for a software one), or run on the CPU backend")]
    NoAdapter {
        /// The value of `WGPU_BACKEND`, or `unset`.
        backend: String,
    },
    /// The adapter refused to open a device.
    #[error("wgpu: the adapter {adapter} refused to open a device: {source}")]
    Device {
        /// The adapter's name.
        adapter: String,
        /// wgpu's error.
        source: wgpu::RequestDeviceError,
    },
}

/// What the opened device can do.
#[derive(Clone, Debug)]
pub struct Capabilities {
    /// The adapter's name and backend, e.g. `"llvmpipe (LLVM 15.0.6, 256 bits) on Vulkan"`.
    pub adapter: String,
    /// `f64` in shaders (`wgpu::Features::SHADER_F64`).
    pub f64: bool,
    /// `i64` in shaders (`wgpu::Features::SHADER_INT64`).
    pub i64: bool,
    /// Storage buffers one kernel may bind.
    pub max_bindings: u32,
    /// Largest storage binding, bytes (a larger array is bound a window at a time).
    pub max_binding_bytes: u64,
    /// Alignment of a storage binding's offset, bytes.
    pub binding_alignment: u64,
    /// Largest buffer, bytes.
    pub max_buffer_bytes: u64,
    /// Workgroups per dispatch dimension.
    pub max_groups_per_dim: u32,
}

/// An open device with its queue.
pub(crate) struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub caps: Capabilities,
}

pub(crate) fn open() -> Result<Gpu, InitError> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let power = wgpu::PowerPreference::from_env().unwrap_or(wgpu::PowerPreference::HighPerformance);
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: power,
        ..Default::default()
    }))
    .map_err(|_| InitError::NoAdapter {
        backend: std::env::var("WGPU_BACKEND").unwrap_or_else(|_| "unset".into()),
    })?;
    let info = adapter.get_info();
    let wanted = wgpu::Features::SHADER_F64 | wgpu::Features::SHADER_INT64;
    let features = adapter.features() & wanted;
    let limits = adapter.limits();
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("kiln"),
        required_features: features,
        required_limits: limits.clone(),
        ..Default::default()
    }))
    .map_err(|source| InitError::Device {
        adapter: info.name.clone(),
        source,
    })?;
    let caps = Capabilities {
        adapter: format!("{} on {:?}", info.name, info.backend),
        f64: features.contains(wgpu::Features::SHADER_F64),
        i64: features.contains(wgpu::Features::SHADER_INT64),
        max_bindings: limits.max_storage_buffers_per_shader_stage,
        max_binding_bytes: limits.max_storage_buffer_binding_size as u64,
        binding_alignment: limits.min_storage_buffer_offset_alignment.max(4) as u64,
        max_buffer_bytes: limits.max_buffer_size,
        max_groups_per_dim: limits.max_compute_workgroups_per_dimension,
    };
    Ok(Gpu {
        device,
        queue,
        caps,
    })
}
