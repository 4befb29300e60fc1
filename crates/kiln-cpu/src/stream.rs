//! Non-temporal writes: a kernel's large outputs that nothing of the plan reads back are
//! written past the caches (`vmovntdq`), which saves the read-for-ownership of every
//! destination line and leaves the inputs in cache.
//!
//! [`Writer`] holds the outputs while it writes and issues the store fence when it is
//! dropped, so no other code can see an output before the streamed stores are ordered.
//! Depends on `simd` (the ISA level), `tune` (whether AVX2 streams) and `typed`.

use crate::typed::{copy_cast, TSlice, TSliceMut};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// See [`set_stream_min_bytes`].
static MIN_BYTES: AtomicUsize = AtomicUsize::new(DEFAULT_STREAM_MIN_BYTES);
/// See [`streamed_bytes`].
static STREAMED: AtomicU64 = AtomicU64::new(0);

/// The default of [`set_stream_min_bytes`]: 48 MiB. A chain `x = x * 0.5 + 1` evaluated
/// step by step (each step reading the last one's output) ran slower with streamed outputs
/// at 16 and 32 MiB per array (1.3 → 1.9 ms, 3.5 → 4.2 ms: the next step read from memory
/// what it had found in cache) and faster at 48 and 64 MiB (7.1 → 6.3 ms, 9.7 → 7.8 ms).
pub const DEFAULT_STREAM_MIN_BYTES: usize = 48 << 20;

/// Sets the size from which an elementwise kernel's outputs (all of them together), when
/// nothing of the plan reads them back, are written with non-temporal stores at AVX-512;
/// returns the previous value. A tuning and test switch; results do not change.
///
/// ```
/// let before = kiln_cpu::set_stream_min_bytes(0);
/// kiln_cpu::set_stream_min_bytes(before);
/// assert_eq!(before, kiln_cpu::DEFAULT_STREAM_MIN_BYTES);
/// ```
pub fn set_stream_min_bytes(bytes: usize) -> usize {
    MIN_BYTES.swap(bytes, Ordering::Relaxed)
}

/// The current [`set_stream_min_bytes`] value.
pub fn stream_min_bytes() -> usize {
    MIN_BYTES.load(Ordering::Relaxed)
}

/// Bytes written with non-temporal stores since the process started (all threads).
///
/// ```
/// let _ = kiln_cpu::streamed_bytes();
/// ```
pub fn streamed_bytes() -> u64 {
    STREAMED.load(Ordering::Relaxed)
}

/// Writes blocks of results into a kernel's outputs, streaming them at AVX-512, and at AVX2
/// where [`crate::Tuning::stream_avx2`] says so (a plain copy otherwise).
pub struct Writer<'o, 'a> {
    outs: &'o mut [TSliceMut<'a>],
    streams: bool,
    bytes: u64,
}

impl<'o, 'a> Writer<'o, 'a> {
    /// A writer over `outs`; `stream` asks for non-temporal stores.
    pub fn new(outs: &'o mut [TSliceMut<'a>], stream: bool) -> Self {
        let streams = stream && cfg!(all(target_arch = "x86_64", not(miri))) && streaming_level();
        Writer {
            outs,
            streams,
            bytes: 0,
        }
    }

    /// Copies `src` into `outs[j]` at `at..at + src.len()`, converting the dtype if needed.
    pub fn put(&mut self, j: usize, at: usize, src: TSlice<'_>) {
        let dst = self.outs[j].range(at, at + src.len());
        if self.streams && src.dtype() == dst.dtype() && src.dtype() != kiln_ir::DType::Bool {
            self.bytes += (src.len() * src.dtype().size_bytes()) as u64;
        }
        match (src, dst) {
            (TSlice::F32(s), TSliceMut::F32(d)) if self.streams => copy(s, d),
            (TSlice::F64(s), TSliceMut::F64(d)) if self.streams => copy(s, d),
            (TSlice::I32(s), TSliceMut::I32(d)) if self.streams => copy(s, d),
            (TSlice::I64(s), TSliceMut::I64(d)) if self.streams => copy(s, d),
            (src, dst) => copy_cast(src, dst),
        }
    }
}

impl Drop for Writer<'_, '_> {
    fn drop(&mut self) {
        STREAMED.fetch_add(self.bytes, Ordering::Relaxed);
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        if self.streams {
            // Orders the streamed stores before anything after the writer (a `Release` store
            // handing the outputs to another thread would not order them).
            // SAFETY: `sfence` is SSE, part of the x86_64 baseline.
            unsafe { std::arch::x86_64::_mm_sfence() };
        }
    }
}

fn avx512() -> bool {
    crate::simd::isa() >= crate::simd::Isa::Avx512
}

fn avx2() -> bool {
    crate::simd::isa() >= crate::simd::Isa::Avx2
}

/// Whether the current level streams: AVX-512, or AVX2 where the tuning asks for it.
fn streaming_level() -> bool {
    avx512() || (avx2() && crate::tune::tuning().stream_avx2)
}

/// `dst.copy_from_slice(src)` with non-temporal stores over `dst`'s aligned middle (64-byte
/// stores at AVX-512, 32-byte ones at AVX2). Only called by a [`Writer`] that streams, which
/// fences on drop.
fn copy<T: Copy>(src: &[T], dst: &mut [T]) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let size = std::mem::size_of::<T>();
        if size > 0 && 32 % size == 0 && src.len() == dst.len() {
            if avx512() {
                // SAFETY: `avx512()` checked that the CPU has AVX-512F.
                unsafe { copy_avx512(src, dst) };
                return;
            }
            if avx2() {
                // SAFETY: `avx2()` checked that the CPU has AVX2 (and so AVX).
                unsafe { copy_avx2(src, dst) };
                return;
            }
        }
    }
    dst.copy_from_slice(src);
}

/// `$name`: [`copy`]'s non-temporal path for `$bytes`-byte vectors (`$feat`).
#[cfg(all(target_arch = "x86_64", not(miri)))]
macro_rules! stream_copy {
    ($name:ident, $feat:literal, $bytes:literal, $vec:ident, $load:ident, $store:ident) => {
        #[target_feature(enable = $feat)]
        fn $name<T: Copy>(src: &[T], dst: &mut [T]) {
            use std::arch::x86_64::{$load, $store, $vec};
            let lanes = $bytes / std::mem::size_of::<T>();
            let head = dst.as_ptr().align_offset($bytes).min(dst.len());
            dst[..head].copy_from_slice(&src[..head]);
            let lines = (dst.len() - head) / lanes;
            let s = src[head..].as_ptr().cast::<$vec>();
            let d = dst[head..].as_mut_ptr().cast::<$vec>();
            for i in 0..lines {
                // SAFETY: vector `i` covers elements `head + i·lanes .. head + (i + 1)·lanes`,
                // inside both slices (`lines` whole vectors fit after `head`; the lengths are
                // equal). `d` is `$bytes`-byte aligned (`head` was chosen so), as the
                // streaming store requires; the load is unaligned. `T` is `Copy`, so any
                // bytes written are a valid `T` copied from `src`.
                unsafe { $store(d.add(i), $load(s.add(i))) };
            }
            let tail = head + lines * lanes;
            dst[tail..].copy_from_slice(&src[tail..]);
        }
    };
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
stream_copy!(
    copy_avx2,
    "avx",
    32,
    __m256i,
    _mm256_loadu_si256,
    _mm256_stream_si256
);
#[cfg(all(target_arch = "x86_64", not(miri)))]
stream_copy!(
    copy_avx512,
    "avx512f",
    64,
    __m512i,
    _mm512_loadu_si512,
    _mm512_stream_si512
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_copies_equal_plain_copies_at_every_alignment_and_length() {
        // The non-temporal path at AVX-512 (where detected; a plain copy elsewhere and under
        // Miri): every start offset within a cache line and lengths around whole lines.
        let src: Vec<f32> = (0..300).map(|i| i as f32 * 1.5 - 7.0).collect();
        let src64: Vec<i64> = (0..300).map(|i| i * 1_000_003 - 5).collect();
        for off in 0..17 {
            for len in [0usize, 1, 15, 16, 17, 31, 32, 33, 64, 100, 250] {
                let mut dst = vec![0.0f32; 300];
                copy(&src[off..off + len], &mut dst[off..off + len]);
                let mut want = vec![0.0f32; 300];
                want[off..off + len].copy_from_slice(&src[off..off + len]);
                assert_eq!(dst, want, "f32 offset {off} length {len}");
                let mut dst = vec![0i64; 300];
                copy(&src64[off..off + len], &mut dst[off..off + len]);
                let mut want = vec![0i64; 300];
                want[off..off + len].copy_from_slice(&src64[off..off + len]);
                assert_eq!(dst, want, "i64 offset {off} length {len}");
            }
        }
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        if avx2() {
            // The 32-byte path directly, whatever level `copy` picked above.
            for off in 0..9 {
                for len in [0usize, 1, 7, 8, 9, 15, 16, 17, 64, 100, 250] {
                    let mut dst = vec![0.0f32; 300];
                    // SAFETY: `avx2()` checked that the CPU has AVX2.
                    unsafe { copy_avx2(&src[off..off + len], &mut dst[off..off + len]) };
                    let mut want = vec![0.0f32; 300];
                    want[off..off + len].copy_from_slice(&src[off..off + len]);
                    assert_eq!(dst, want, "32-byte f32 offset {off} length {len}");
                    let mut dst = vec![0i64; 300];
                    // SAFETY: as above.
                    unsafe { copy_avx2(&src64[off..off + len], &mut dst[off..off + len]) };
                    let mut want = vec![0i64; 300];
                    want[off..off + len].copy_from_slice(&src64[off..off + len]);
                    assert_eq!(dst, want, "32-byte i64 offset {off} length {len}");
                }
            }
        }
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        unsafe {
            // SAFETY: SSE is part of the x86_64 baseline.
            std::arch::x86_64::_mm_sfence()
        };
    }

    #[test]
    fn a_writer_converts_dtypes_and_counts_streamed_bytes() {
        let mut a = vec![0.0f64; 40];
        let mut b = vec![0i32; 40];
        let before = streamed_bytes();
        {
            let mut outs = [TSliceMut::F64(&mut a), TSliceMut::I32(&mut b)];
            let mut w = Writer::new(&mut outs, true);
            let xs: Vec<f64> = (0..20).map(|i| i as f64 / 3.0).collect();
            let ks: Vec<f32> = (0..20).map(|i| i as f32 * 2.5).collect();
            w.put(0, 20, TSlice::F64(&xs));
            w.put(1, 3, TSlice::F32(&ks));
        }
        assert_eq!(a[19], 0.0);
        assert_eq!(a[21], 1.0 / 3.0);
        assert_eq!(b[3..6], [0, 2, 5]);
        if cfg!(all(target_arch = "x86_64", not(miri))) && streaming_level() {
            assert!(streamed_bytes() >= before + 160);
        }
    }
}
