//! Device buffers: [`GpuBuffer`] (a typed wgpu storage buffer plus the error checks its value
//! depends on), the [`Pool`] that recycles released buffers by size class, and the byte
//! conversions of upload and download (`bool` lives as `u32` on the device).
//!
//! Depends on `wgpu`, `kiln-ir`, `bytemuck` (the host's bytes viewed as device bytes).

use kiln_ir::{DType, Error, HostData};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes per element on the device (`bool` is stored as `u32`).
pub(crate) fn elem_bytes(dtype: DType) -> u64 {
    match dtype {
        DType::Bool | DType::I32 | DType::F32 => 4,
        DType::I64 | DType::F64 => 8,
    }
}

/// A status word block one fallible kernel launch may write (see [`Check`]).
pub(crate) const STATUS_WORDS: u64 = 8;

/// What a fallible launch reports through its status buffer: word 0 is an error code (0 =
/// fine), words 1–2 the offending value (i64, little-endian halves).
#[derive(Debug)]
pub(crate) struct Check {
    pub buf: wgpu::Buffer,
    /// Set once a download read these words as fine: results computed later need not
    /// carry the check (a long chain of resident values keeps a short lineage).
    pub verified: std::sync::atomic::AtomicBool,
    /// The op a code-1/2 error names (division) or the indexed op.
    pub dtype: DType,
    /// Axis and size of an index check.
    pub axis: usize,
    pub size: usize,
}

impl Check {
    /// The error for the status words, if any.
    pub fn error(&self, words: &[u32]) -> Option<Error> {
        let value = (words[1] as u64 | ((words[2] as u64) << 32)) as i64;
        let value2 = (words[3] as u64 | ((words[4] as u64) << 32)) as i64;
        match words[0] {
            0 => None,
            1 => Some(Error::DivisionByZero {
                op: "floor_divide",
                dividend: value,
                dtype: self.dtype,
            }),
            2 => Some(Error::DivisionByZero {
                op: "remainder",
                dividend: value,
                dtype: self.dtype,
            }),
            3 => Some(Error::NegativeIntegerPower {
                op: "power",
                base: value,
                exponent: value2,
            }),
            4 => Some(Error::IndexOutOfRange {
                op: "take",
                index: value,
                axis: self.axis,
                size: self.size,
            }),
            5 => Some(Error::IndexOutOfRange {
                op: "scatter_add",
                index: value,
                axis: self.axis,
                size: self.size,
            }),
            c => Some(crate::internal(format!("unknown status code {c}"))),
        }
    }
}

/// A typed buffer on the device.
///
/// Its contents are only meaningful after the launches recorded for it have run; `checks`
/// are the status blocks of every fallible launch its value depends on, read when the value
/// is downloaded (so an error surfaces without a synchronisation per launch).
#[derive(Debug)]
pub struct GpuBuffer {
    pub(crate) buf: wgpu::Buffer,
    pub(crate) dtype: DType,
    pub(crate) len: usize,
    pub(crate) checks: Vec<Arc<Check>>,
}

impl GpuBuffer {
    /// The element type.
    ///
    /// ```no_run
    /// # // Needs a GPU adapter.
    /// use kiln_compiler::Backend;
    /// let gpu = kiln_wgpu::WgpuBackend::new().unwrap();
    /// let b = gpu.allocate(kiln_ir::DType::F32, 4).unwrap();
    /// assert_eq!(b.dtype(), kiln_ir::DType::F32);
    /// ```
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The length in elements.
    ///
    /// ```no_run
    /// # // Needs a GPU adapter.
    /// use kiln_compiler::Backend;
    /// let gpu = kiln_wgpu::WgpuBackend::new().unwrap();
    /// assert_eq!(gpu.allocate(kiln_ir::DType::I32, 3).unwrap().len(), 3);
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no elements.
    ///
    /// ```no_run
    /// # // Needs a GPU adapter.
    /// use kiln_compiler::Backend;
    /// let gpu = kiln_wgpu::WgpuBackend::new().unwrap();
    /// assert!(gpu.allocate(kiln_ir::DType::I32, 0).unwrap().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Pool figures (bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes of buffers handed out and not yet released or downloaded.
    pub live: u64,
    /// Bytes of released buffers kept for reuse.
    pub pooled: u64,
    /// The bound on `pooled`.
    pub limit: u64,
    /// Allocations served from the pool.
    pub reused: u64,
    /// Allocations that created a buffer.
    pub created: u64,
    /// Results written over a donated input's storage instead of a new buffer.
    pub donated: u64,
}

/// Released buffers by size class, bounded in bytes; buffers over the bound are freed.
///
/// Reuse is safe without waiting for the GPU: every use goes through the one queue, which
/// orders a later launch after the earlier ones that touched the same buffer.
pub(crate) struct Pool {
    free: Mutex<hashbrown::HashMap<u64, Vec<wgpu::Buffer>>>,
    pooled: AtomicU64,
    live: AtomicU64,
    limit: AtomicU64,
    reused: AtomicU64,
    created: AtomicU64,
    pub(crate) donated: AtomicU64,
    /// Buffers freed (not kept for reuse) so far, and clears: cached bind groups made
    /// before a change here may name storage the pool let go.
    freed: AtomicU64,
}

/// The size class of a request: powers of two and 1.5× powers of two, at least 256 bytes.
pub(crate) fn size_class(bytes: u64) -> u64 {
    let b = bytes.max(256);
    let p = b.next_power_of_two();
    let mid = p / 4 * 3;
    if b <= mid {
        mid
    } else {
        p
    }
}

impl Pool {
    pub fn new(limit: u64) -> Pool {
        Pool {
            free: Mutex::new(hashbrown::HashMap::new()),
            pooled: AtomicU64::new(0),
            live: AtomicU64::new(0),
            limit: AtomicU64::new(limit),
            reused: AtomicU64::new(0),
            created: AtomicU64::new(0),
            donated: AtomicU64::new(0),
            freed: AtomicU64::new(0),
        }
    }

    /// A storage buffer of at least `bytes` bytes.
    pub fn take(&self, device: &wgpu::Device, bytes: u64) -> wgpu::Buffer {
        let class = size_class(bytes);
        self.live.fetch_add(class, Ordering::Relaxed);
        let hit = self
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&class)
            .and_then(|v| v.pop());
        if let Some(b) = hit {
            self.pooled.fetch_sub(class, Ordering::Relaxed);
            self.reused.fetch_add(1, Ordering::Relaxed);
            return b;
        }
        self.created.fetch_add(1, Ordering::Relaxed);
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("kiln"),
            size: class,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// Hands a buffer back.
    pub fn put(&self, buf: wgpu::Buffer) {
        let class = buf.size();
        self.live.fetch_sub(class, Ordering::Relaxed);
        if self.pooled.load(Ordering::Relaxed) + class > self.limit.load(Ordering::Relaxed) {
            self.freed.fetch_add(1, Ordering::Relaxed);
            return; // dropped: freed once the GPU is done with it
        }
        self.pooled.fetch_add(class, Ordering::Relaxed);
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(class)
            .or_default()
            .push(buf);
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            live: self.live.load(Ordering::Relaxed),
            pooled: self.pooled.load(Ordering::Relaxed),
            limit: self.limit.load(Ordering::Relaxed),
            reused: self.reused.load(Ordering::Relaxed),
            created: self.created.load(Ordering::Relaxed),
            donated: self.donated.load(Ordering::Relaxed),
        }
    }

    pub fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Relaxed);
        if self.pooled.load(Ordering::Relaxed) > limit {
            self.clear();
        }
    }

    /// Buffers freed so far (see [`Pool::freed`]).
    pub fn freed(&self) -> u64 {
        self.freed.load(Ordering::Relaxed)
    }

    pub fn clear(&self) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        self.freed.fetch_add(1, Ordering::Relaxed);
        free.clear();
        self.pooled.store(0, Ordering::Relaxed);
    }
}

/// The little-endian device bytes of host data (`bool` widened to `u32`): the host's own
/// bytes where they already are (a little-endian host), else a converted copy.
pub(crate) fn host_bytes(data: &HostData) -> std::borrow::Cow<'_, [u8]> {
    #[cfg(target_endian = "little")]
    match data {
        HostData::I32(v) => return std::borrow::Cow::Borrowed(bytemuck::cast_slice(&v[..])),
        HostData::I64(v) => return std::borrow::Cow::Borrowed(bytemuck::cast_slice(&v[..])),
        HostData::F32(v) => return std::borrow::Cow::Borrowed(bytemuck::cast_slice(&v[..])),
        HostData::F64(v) => return std::borrow::Cow::Borrowed(bytemuck::cast_slice(&v[..])),
        HostData::Bool(_) => {}
    }
    std::borrow::Cow::Owned(converted_bytes(data))
}

/// [`host_bytes`] element by element.
fn converted_bytes(data: &HostData) -> Vec<u8> {
    fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        let mut out = Vec::with_capacity(v.len() * N);
        for &x in v {
            out.extend_from_slice(&f(x));
        }
        out
    }
    match data {
        HostData::Bool(v) => le(v, |b: bool| (b as u32).to_le_bytes()),
        HostData::I32(v) => le(v, i32::to_le_bytes),
        HostData::I64(v) => le(v, i64::to_le_bytes),
        HostData::F32(v) => le(v, f32::to_le_bytes),
        HostData::F64(v) => le(v, f64::to_le_bytes),
    }
}

/// Host data of `dtype` from `len` elements of device bytes (one bulk copy per value on a
/// little-endian host).
pub(crate) fn from_bytes(bytes: &[u8], dtype: DType, len: usize) -> HostData {
    #[cfg(target_endian = "little")]
    {
        fn bulk<T: bytemuck::Pod>(b: &[u8], len: usize) -> Vec<T> {
            let mut v: Vec<T> = vec![T::zeroed(); len];
            let n = std::mem::size_of_val(&v[..]);
            bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(&b[..n]);
            v
        }
        match dtype {
            DType::I32 => return HostData::from(bulk::<i32>(bytes, len)),
            DType::I64 => return HostData::from(bulk::<i64>(bytes, len)),
            DType::F32 => return HostData::from(bulk::<f32>(bytes, len)),
            DType::F64 => return HostData::from(bulk::<f64>(bytes, len)),
            DType::Bool => {}
        }
    }
    converted_from_bytes(bytes, dtype, len)
}

/// Writes `len` elements of device bytes into `v[start..start + len]` (a vector from a
/// [`kiln_ir::HostPool`]; its length is `start + len`).
pub(crate) fn fill_from_bytes(v: &mut kiln_ir::HostVec, start: usize, bytes: &[u8], len: usize) {
    use kiln_ir::HostVec;
    fn fill<T: Copy, const N: usize>(dst: &mut [T], b: &[u8], f: impl Fn([u8; N]) -> T) {
        for (d, c) in dst.iter_mut().zip(b.chunks_exact(N)) {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            *d = f(a);
        }
    }
    #[cfg(target_endian = "little")]
    fn bulk<T: bytemuck::Pod>(dst: &mut [T], b: &[u8]) {
        let n = std::mem::size_of_val(dst);
        bytemuck::cast_slice_mut::<T, u8>(dst).copy_from_slice(&b[..n]);
    }
    #[cfg(not(target_endian = "little"))]
    fn bulk<T: bytemuck::Pod>(dst: &mut [T], b: &[u8]) {
        let _ = (dst, b);
        unreachable!("big-endian hosts convert element by element");
    }
    let le = cfg!(target_endian = "little");
    match v {
        HostVec::Bool(x) => fill(&mut x[start..start + len], bytes, |a| {
            u32::from_le_bytes(a) != 0
        }),
        HostVec::I32(x) if le => bulk(&mut x[start..start + len], bytes),
        HostVec::I64(x) if le => bulk(&mut x[start..start + len], bytes),
        HostVec::F32(x) if le => bulk(&mut x[start..start + len], bytes),
        HostVec::F64(x) if le => bulk(&mut x[start..start + len], bytes),
        HostVec::I32(x) => fill(&mut x[start..start + len], bytes, i32::from_le_bytes),
        HostVec::I64(x) => fill(&mut x[start..start + len], bytes, i64::from_le_bytes),
        HostVec::F32(x) => fill(&mut x[start..start + len], bytes, f32::from_le_bytes),
        HostVec::F64(x) => fill(&mut x[start..start + len], bytes, f64::from_le_bytes),
    }
}

/// [`from_bytes`] element by element.
fn converted_from_bytes(bytes: &[u8], dtype: DType, len: usize) -> HostData {
    fn read<T, const N: usize>(b: &[u8], len: usize, f: impl Fn([u8; N]) -> T) -> Vec<T> {
        b.chunks_exact(N)
            .take(len)
            .map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c);
                f(a)
            })
            .collect()
    }
    match dtype {
        DType::Bool => HostData::from(read(bytes, len, |a| u32::from_le_bytes(a) != 0)),
        DType::I32 => HostData::from(read(bytes, len, i32::from_le_bytes)),
        DType::I64 => HostData::from(read(bytes, len, i64::from_le_bytes)),
        DType::F32 => HostData::from(read(bytes, len, f32::from_le_bytes)),
        DType::F64 => HostData::from(read(bytes, len, f64::from_le_bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_cover_the_request_with_at_most_a_third_slack() {
        for bytes in [
            0u64,
            1,
            255,
            256,
            257,
            384,
            385,
            1000,
            4096,
            1 << 20,
            (1 << 20) + 1,
        ] {
            let c = size_class(bytes);
            assert!(c >= bytes.max(256), "{bytes} -> {c}");
            assert!(c <= bytes.max(256) * 3 / 2 + 1, "{bytes} -> {c}");
        }
    }

    #[test]
    fn bytes_round_trip_every_dtype() {
        let cases = [
            HostData::from(vec![true, false, true]),
            HostData::from(vec![-1i32, 7, i32::MIN]),
            HostData::from(vec![i64::MAX, -3]),
            HostData::from(vec![1.5f32, f32::NAN, -0.0]),
            HostData::from(vec![f64::INFINITY, 1e-300]),
        ];
        for d in cases {
            let b = host_bytes(&d);
            assert_eq!(b.len() as u64, d.len() as u64 * elem_bytes(d.dtype()));
            let back = from_bytes(&b, d.dtype(), d.len());
            assert_eq!(format!("{back:?}"), format!("{d:?}"));
            // The bulk paths agree with the element-by-element ones.
            assert_eq!(&b[..], &converted_bytes(&d)[..]);
            let slow = converted_from_bytes(&b, d.dtype(), d.len());
            assert_eq!(format!("{slow:?}"), format!("{d:?}"));
        }
    }
}
