//! Buffers and the buffer pool.
//!
//! A [`CpuBuffer`] is either an owned typed `Vec` (what kernels write) or a shared handle on
//! caller data (what `upload` returns, without copying). Released owned buffers go to a
//! [`BufferPool`]: size-bucketed free lists per dtype, bounded in total bytes, so repeated
//! runs of a plan reuse warm pages instead of faulting in fresh ones. The pool is also the
//! [`Recycle`] home of downloaded outputs: the storage of an evaluated result comes back to
//! it when the user drops the last handle on the result.
//!
//! Depends on [`crate::typed`] and `kiln-ir`.

use crate::typed::{TSlice, TSliceMut, TypedVec, ALIGN_BYTES};
use kiln_ir::{DType, Error, HostData, HostVec, Recycle, Result};
use std::sync::Mutex;

/// A CPU buffer: owned storage, or caller data shared without a copy.
#[derive(Debug)]
pub enum CpuBuffer {
    /// Storage owned by the backend (from [`BufferPool::take`]).
    Owned(TypedVec),
    /// Host data shared with the caller (read-only).
    Shared(HostData),
}

impl CpuBuffer {
    /// The dtype.
    pub fn dtype(&self) -> DType {
        match self {
            CpuBuffer::Owned(v) => v.dtype(),
            CpuBuffer::Shared(d) => d.dtype(),
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            CpuBuffer::Owned(v) => v.len(),
            CpuBuffer::Shared(d) => d.len(),
        }
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements.
    pub fn as_slice(&self) -> TSlice<'_> {
        match self {
            CpuBuffer::Owned(v) => v.as_slice(),
            CpuBuffer::Shared(d) => TSlice::of_host(d),
        }
    }

    /// The elements, mutably; shared data is copied into owned storage first (kernels only
    /// write buffers they allocated, so this copy does not happen in a well-formed plan).
    pub fn as_mut_slice(&mut self) -> TSliceMut<'_> {
        if let CpuBuffer::Shared(d) = self {
            *self = CpuBuffer::Owned(TypedVec::from_slice(TSlice::of_host(d)));
        }
        match self {
            CpuBuffer::Owned(v) => v.as_mut_slice(),
            CpuBuffer::Shared(_) => unreachable!("made owned above"),
        }
    }
}

/// Number of size classes (class `c` holds capacities in `2^c..2^(c+1)` elements).
const CLASSES: usize = usize::BITS as usize;

/// Default bound on the bytes held by a pool.
pub const DEFAULT_POOL_BYTES: usize = 512 << 20;

/// Bound on the vectors a pool holds per dtype and size class.
/// An allocation scans its class's list, so the list must stay short however many small
/// vectors a long run releases (a list once grew to millions of vectors of a size no request
/// could reuse, and every allocation scanned it all: ever slower evaluations).
const MAX_PER_CLASS: usize = 64;

/// A pooled vector and when it was released.
#[derive(Debug)]
struct Pooled {
    /// The pool's release count when it came in (smallest: least recently released).
    stamp: u64,
    v: TypedVec,
}

#[derive(Debug)]
struct PoolInner {
    /// Free vectors per dtype (in `DType::ALL` order) and size class.
    free: [[Vec<Pooled>; CLASSES]; 5],
    /// Vectors released so far (the next stamp).
    clock: u64,
    /// Bytes of capacity held.
    bytes: usize,
    /// Bound on `bytes`.
    limit: usize,
    /// Allocations served from the pool.
    hits: u64,
    /// Allocations that needed fresh memory.
    misses: u64,
}

/// Counters of a [`BufferPool`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes of capacity currently held.
    pub bytes: usize,
    /// Bound on `bytes`.
    pub limit: usize,
    /// Vectors currently held.
    pub buffers: usize,
    /// Allocations served from the pool.
    pub hits: u64,
    /// Allocations that needed fresh memory.
    pub misses: u64,
}

/// A thread-safe pool of released typed vectors, bucketed by dtype and power-of-two
/// capacity class, holding at most `limit` bytes (a released vector that does not fit
/// frees the least recently released ones; one larger than `limit` is freed) and at most
/// 64 vectors per dtype and class (the least recently released of the class makes room), so
/// that finding a vector is a scan of a short list.
/// An allocation of `len` elements reuses a vector of capacity `need..=2*need`, `need`
/// being `len` plus the room that aligns the elements ([`ALIGN_BYTES`]), so a downloaded
/// output carries at most twice that. Released vectors are scratch buffers and, through
/// [`Recycle`], the storage of downloaded outputs whose last handle was dropped.
///
/// ```
/// use kiln_cpu::BufferPool;
/// use kiln_ir::DType;
/// let pool = BufferPool::new(1 << 20);
/// let v = pool.take(DType::F32, 1000);
/// assert_eq!(v.len(), 1000);
/// pool.put(v);
/// let w = pool.take(DType::F32, 900); // reuses the same storage
/// assert_eq!((w.len(), pool.stats().hits), (900, 1));
/// ```
#[derive(Debug)]
pub struct BufferPool {
    inner: Mutex<PoolInner>,
}

fn dtype_index(d: DType) -> usize {
    match d {
        DType::Bool => 0,
        DType::I32 => 1,
        DType::I64 => 2,
        DType::F32 => 3,
        DType::F64 => 4,
    }
}

fn class_of(cap: usize) -> usize {
    (usize::BITS - 1 - cap.max(1).leading_zeros()) as usize
}

impl BufferPool {
    /// An empty pool holding at most `limit` bytes.
    pub const fn new(limit: usize) -> BufferPool {
        BufferPool {
            inner: Mutex::new(PoolInner {
                free: [const { [const { Vec::new() }; CLASSES] }; 5],
                clock: 0,
                bytes: 0,
                limit,
                hits: 0,
                misses: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolInner> {
        // A panic while holding the lock leaves the lists consistent (each operation is a
        // push or a pop), so a poisoned lock is safe to reuse.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A vector of `len` elements of `dtype` (contents unspecified but initialised). A reused
    /// vector is not cleared: only elements beyond its previous length are written (zeros),
    /// so a hit costs no pass over the storage. For the interpreter's registers and scratch:
    /// what the plan's buffers take goes through [`BufferPool::try_take`].
    pub fn take(&self, dtype: DType, len: usize) -> TypedVec {
        self.reuse(dtype, len).unwrap_or_else(|| fresh(dtype, len))
    }

    /// [`BufferPool::take`], or [`Error::OutOfMemory`] when a new vector cannot be allocated
    /// (instead of aborting the process).
    ///
    /// ```
    /// use kiln_cpu::BufferPool;
    /// let pool = BufferPool::new(1 << 20);
    /// assert_eq!(pool.try_take(kiln_ir::DType::F32, 10).unwrap().len(), 10);
    /// assert!(pool.try_take(kiln_ir::DType::F32, 1 << 60).is_err());
    /// ```
    pub fn try_take(&self, dtype: DType, len: usize) -> Result<TypedVec> {
        match self.reuse(dtype, len) {
            Some(v) => Ok(v),
            None => try_fresh(dtype, len),
        }
    }

    fn reuse(&self, dtype: DType, len: usize) -> Option<TypedVec> {
        if len == 0 {
            return None;
        }
        let found = {
            let mut p = self.lock();
            // Room for the padding that aligns the elements (`Aligned::realign`).
            let need = len.saturating_add(ALIGN_BYTES / dtype.size_bytes());
            // capacities `need..=2*need` lie in these two classes
            let c = class_of(need);
            let lists = &mut p.free[dtype_index(dtype)];
            let mut found = None;
            for class in [c, c + 1] {
                if class >= CLASSES {
                    break;
                }
                let list = &mut lists[class];
                if let Some(i) = list.iter().rposition(|e| {
                    e.v.capacity() >= need && e.v.capacity() <= need.saturating_mul(2)
                }) {
                    found = Some(list.swap_remove(i).v);
                    break;
                }
            }
            match &found {
                Some(v) => {
                    p.bytes -= v.capacity() * dtype.size_bytes();
                    p.hits += 1;
                }
                None => p.misses += 1,
            }
            found
        };
        let mut v = found?;
        v.set_len_zeroed(len);
        Some(v)
    }

    /// Hands a vector back. It is kept, making room by freeing the least recently released
    /// vectors if the pool is full (so the pool follows the sizes in use now rather than
    /// those of an earlier phase); a vector larger than the whole bound is freed.
    pub fn put(&self, v: TypedVec) {
        let cap = v.capacity();
        if cap == 0 {
            return;
        }
        let bytes = cap * v.dtype().size_bytes();
        let mut evicted = Vec::new();
        let mut p = self.lock();
        if bytes > p.limit {
            drop(p);
            drop(v); // freed outside the lock
            return;
        }
        let keep = p.limit - bytes;
        p.evict_to(keep, &mut evicted);
        let (d, c) = (dtype_index(v.dtype()), class_of(cap));
        if p.free[d][c].len() >= MAX_PER_CLASS {
            let oldest = p.free[d][c]
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.stamp)
                .map(|(i, _)| i);
            if let Some(i) = oldest {
                let old = p.free[d][c].swap_remove(i).v;
                p.bytes -= old.capacity() * old.dtype().size_bytes();
                evicted.push(old);
            }
        }
        p.clock += 1;
        let stamp = p.clock;
        p.bytes += bytes;
        p.free[d][c].push(Pooled { stamp, v });
        drop(p);
        drop(evicted); // freed outside the lock
    }

    /// Frees every pooled vector.
    pub fn clear(&self) {
        let taken: Vec<Pooled> = {
            let mut p = self.lock();
            p.bytes = 0;
            p.free
                .iter_mut()
                .flat_map(|l| l.iter_mut())
                .flat_map(std::mem::take)
                .collect()
        };
        drop(taken);
    }

    /// Changes the bound (the least recently released vectors beyond it are freed).
    pub fn set_limit(&self, limit: usize) {
        let mut freed = Vec::new();
        {
            let mut p = self.lock();
            p.limit = limit;
            p.evict_to(limit, &mut freed);
        }
        drop(freed);
    }

    /// The pool's counters.
    pub fn stats(&self) -> PoolStats {
        let p = self.lock();
        PoolStats {
            bytes: p.bytes,
            limit: p.limit,
            buffers: p.free.iter().flat_map(|l| l.iter()).map(Vec::len).sum(),
            hits: p.hits,
            misses: p.misses,
        }
    }
}

impl PoolInner {
    /// Moves the least recently released vectors to `out` until at most `target` bytes are
    /// held (a scan of every list per vector: a pool holds tens of vectors, and this runs
    /// only when the pool is full).
    fn evict_to(&mut self, target: usize, out: &mut Vec<TypedVec>) {
        while self.bytes > target {
            let oldest = self
                .free
                .iter()
                .enumerate()
                .flat_map(|(d, l)| l.iter().enumerate().map(move |(c, l)| (d, c, l)))
                .flat_map(|(d, c, l)| l.iter().enumerate().map(move |(i, e)| (e.stamp, d, c, i)))
                .min();
            let Some((_, d, c, i)) = oldest else {
                break;
            };
            let v = self.free[d][c].swap_remove(i).v;
            self.bytes -= v.capacity() * v.dtype().size_bytes();
            out.push(v);
        }
    }
}

/// Output storage comes home: the vector of a downloaded result whose last handle was
/// dropped is [`put`](BufferPool::put) back (kept if the pool has room, else freed).
///
/// ```
/// use kiln_cpu::BufferPool;
/// use kiln_ir::{DType, HostData, HostVec};
/// static POOL: BufferPool = BufferPool::new(1 << 20);
/// let out = HostData::recycled(HostVec::from(vec![0.5f32; 256]), &POOL);
/// assert_eq!(POOL.stats().bytes, 0);
/// drop(out);
/// assert_eq!(POOL.stats().bytes, 1024);
/// // reused for up to 240 elements (16 f32 of room to start them on a cache line)
/// assert_eq!(POOL.take(DType::F32, 240).len(), 240);
/// assert_eq!(POOL.stats().hits, 1);
/// ```
impl Recycle for BufferPool {
    fn recycle(&self, v: HostVec) {
        self.put(v.into());
    }
}

/// Downloads from a device backend land in pooled, cache-line-aligned storage.
///
/// ```
/// use kiln_cpu::BufferPool;
/// use kiln_ir::{DType, HostData, HostPool};
/// static POOL: BufferPool = BufferPool::new(1 << 20);
/// let (v, start) = POOL.take_host(DType::I32, 100);
/// let d = HostData::recycled_from(v, start, &POOL);
/// assert_eq!(d.len(), 100);
/// drop(d);
/// assert!(POOL.stats().bytes >= 400); // back home
/// ```
impl kiln_ir::HostPool for BufferPool {
    fn take_host(&self, dtype: DType, len: usize) -> (HostVec, usize) {
        fn parts<T>(a: crate::typed::Aligned<T>, wrap: fn(Vec<T>) -> HostVec) -> (HostVec, usize)
        where
            T: Copy + Default,
        {
            let (v, lead) = a.into_parts();
            (wrap(v), lead)
        }
        match self.take(dtype, len) {
            TypedVec::Bool(a) => parts(a, HostVec::Bool),
            TypedVec::I32(a) => parts(a, HostVec::I32),
            TypedVec::I64(a) => parts(a, HostVec::I64),
            TypedVec::F32(a) => parts(a, HostVec::F32),
            TypedVec::F64(a) => parts(a, HostVec::F64),
        }
    }
}

/// Fresh allocations of at least this many bytes ask for transparent huge pages.
#[cfg_attr(not(all(target_os = "linux", not(miri))), allow(dead_code))]
pub const HUGE_PAGE_MIN_BYTES: usize = 4 << 20;

/// A fresh zeroed vector. Large ones are advised `MADV_HUGEPAGE` before their first touch: a
/// kernel writing a fresh 64 MiB output then takes 32 page faults instead of 16,384, which is
/// most of the cost of fresh memory (see `docs/performance-log.md`, 2026-11-21).
fn fresh(dtype: DType, len: usize) -> TypedVec {
    let v = TypedVec::zeros(dtype, len);
    advise_huge_pages(&v);
    v
}

fn try_fresh(dtype: DType, len: usize) -> Result<TypedVec> {
    let v = TypedVec::try_zeros(dtype, len).ok_or_else(|| Error::OutOfMemory {
        op: "eval",
        bytes: (len as u64).saturating_mul(dtype.size_bytes() as u64),
        what: format!("a buffer of {len} {dtype} elements"),
    })?;
    advise_huge_pages(&v);
    Ok(v)
}

#[cfg(all(target_os = "linux", not(miri)))]
fn advise_huge_pages(v: &TypedVec) {
    let bytes = v.len() * v.dtype().size_bytes();
    if bytes < HUGE_PAGE_MIN_BYTES {
        return;
    }
    let ptr = crate::typed::with_variant!(v, TypedVec, x => x.as_ptr() as usize);
    const PAGE: usize = 4096;
    let start = (ptr + PAGE - 1) & !(PAGE - 1);
    let end = (ptr + bytes) & !(PAGE - 1);
    if end > start {
        // SAFETY: `madvise` only changes the kernel's paging policy for `[start, end)`, a
        // page-aligned range inside this vector's elements (`ptr..ptr + bytes`), so inside
        // its live allocation; it
        // neither reads nor writes the memory, and MADV_HUGEPAGE preserves its contents. The
        // return value is ignored: the advice is optional (THP may be disabled).
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn advise_huge_pages(_: &TypedVec) {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The address of the first element.
    fn addr(v: &TypedVec) -> usize {
        crate::typed::with_variant!(v, TypedVec, x => x.as_ptr() as usize)
    }

    /// An unpadded vector of exactly `n` elements.
    fn plain(d: DType, n: usize) -> TypedVec {
        let v = crate::typed::with_dtype!(d, T => TypedVec::from(kiln_ir::HostVec::from(vec![T::default(); n])));
        assert_eq!((v.len(), v.capacity()), (n, n));
        v
    }

    #[test]
    fn reuses_by_dtype_and_size() {
        let pool = BufferPool::new(1 << 20);
        let a = pool.take(DType::F64, 100);
        // 8 f64 of padding: room to start the elements on a 64-byte boundary.
        assert_eq!((a.capacity(), addr(&a) % 64), (108, 0));
        pool.put(a);
        assert_eq!(pool.stats().bytes, 864);
        // Other dtype, much smaller or larger: fresh.
        let _ = pool.take(DType::F32, 100);
        let _ = pool.take(DType::F64, 10);
        let _ = pool.take(DType::F64, 1000);
        assert_eq!(pool.stats().hits, 0);
        let b = pool.take(DType::F64, 60);
        assert_eq!((b.len(), b.capacity()), (60, 108));
        assert_eq!(addr(&b) % 64, 0);
        assert_eq!(
            pool.stats(),
            PoolStats {
                bytes: 0,
                limit: 1 << 20,
                buffers: 0,
                hits: 1,
                misses: 4
            }
        );
    }

    #[test]
    fn stays_within_its_limit() {
        let pool = BufferPool::new(1000);
        pool.put(plain(DType::F32, 200)); // 800 bytes
        pool.put(plain(DType::F32, 100)); // 400: the older 800 make room
        assert_eq!((pool.stats().bytes, pool.stats().buffers), (400, 1));
        pool.put(plain(DType::F64, 200)); // 1600 > the bound: freed, nothing evicted
        assert_eq!((pool.stats().bytes, pool.stats().buffers), (400, 1));
        pool.put(plain(DType::I32, 150)); // 600: fits beside
        assert_eq!((pool.stats().bytes, pool.stats().buffers), (1000, 2));
        pool.set_limit(700); // the older (400 bytes) goes
        assert_eq!(pool.stats().bytes, 600);
        // 16 i32 of the 150 are left for the padding
        assert_eq!(pool.take(DType::I32, 134).len(), 134);
        assert_eq!(pool.stats().hits, 1);
        pool.set_limit(100);
        assert_eq!(pool.stats().bytes, 0);
        pool.put(plain(DType::Bool, 50));
        pool.clear();
        assert_eq!(pool.stats().buffers, 0);
    }

    #[test]
    fn a_full_pool_frees_the_least_recently_released() {
        let pool = BufferPool::new(1000);
        pool.put(plain(DType::F32, 75)); // 300 bytes, oldest
        pool.put(plain(DType::I32, 75)); // 300
        pool.put(plain(DType::F64, 25)); // 200
        let a = pool.take(DType::I32, 59); // the I32 vector leaves (16 left for padding) ...
        pool.put(a); // ... and comes back: now the newest
        pool.put(plain(DType::I64, 60)); // 480: 1280 > 1000, frees the F32 only
        let st = pool.stats();
        assert_eq!((st.bytes, st.buffers), (980, 3), "{st:?}");
        let misses = st.misses;
        let _ = pool.take(DType::F32, 59);
        assert_eq!(pool.stats().misses, misses + 1, "the F32 vector was freed");
        for (d, n) in [(DType::I32, 59), (DType::F64, 17), (DType::I64, 52)] {
            let _ = pool.take(d, n);
        }
        assert_eq!(pool.stats().misses, misses + 1, "the others were kept");
    }

    #[test]
    fn reuses_vectors_shorter_than_their_alignment_room() {
        // 8 f32 need 8 + 16 elements of capacity (16 of room to align them): more than twice
        // the length, which once made every such vector unreusable.
        let pool = BufferPool::new(1 << 20);
        for d in DType::ALL {
            for len in [1, 2, 7, 8, 15] {
                let v = pool.take(d, len);
                pool.put(v);
                let hits = pool.stats().hits;
                assert_eq!(pool.take(d, len).len(), len);
                assert_eq!(pool.stats().hits, hits + 1, "{d} {len}");
            }
        }
    }

    #[test]
    fn holds_a_bounded_number_of_vectors_per_class() {
        let pool = BufferPool::new(1 << 30);
        // 1,000 vectors of one class, none of which the next request can reuse
        for _ in 0..1000 {
            pool.put(plain(DType::F32, 40));
        }
        let st = pool.stats();
        assert_eq!((st.buffers, st.bytes), (MAX_PER_CLASS, MAX_PER_CLASS * 160));
        // the newest are kept: one comes back for a request of the same class
        assert_eq!(pool.take(DType::F32, 20).len(), 20);
        assert_eq!(pool.stats().hits, 1);
        // other classes and dtypes have their own room
        pool.put(plain(DType::F64, 40));
        pool.put(plain(DType::F32, 400));
        assert_eq!(pool.stats().buffers, MAX_PER_CLASS + 1);
    }

    #[test]
    fn is_shared_between_threads() {
        let pool = BufferPool::new(1 << 24);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for i in 0..200 {
                        let v = pool.take(DType::I32, 100 + i % 7);
                        assert_eq!(v.len(), 100 + i % 7);
                        pool.put(v);
                    }
                });
            }
        });
        let st = pool.stats();
        // At most one vector per thread and length.
        assert!(st.hits > 700 && st.buffers <= 4 * 7, "{st:?}");
    }
}
