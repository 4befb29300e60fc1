//! The graph cache: compiled plans by structural [`Key`], bounded (LRU), thread-safe and
//! observable.
//!
//! A lookup hashes nothing itself: the key arrives with its precomputed hash from the trace.
//! Each key compiles at most once even when several threads miss on it together (the others
//! wait for the first). Every miss is classified by comparing the new key's layers with the
//! cached ones: a new structure (ops or wiring), a new scalar class (a scalar became exactly
//! 0 or 1), a new dtype, a new rank, or a new size pattern (a dimension became 0 or 1, or two
//! dimensions became equal or unequal).
//!
//! Each compile is a `tracing` event at target `kiln::compile` (level DEBUG; fields `key`,
//! `reason`, `ms`, `kernels`). Setting `KILN_LOG_COMPILES=1` raises it to INFO, and where no
//! `tracing` subscriber records it (none installed, or one filtering it out) prints it to
//! stderr instead, with its reason and time. Depends on `kiln-ir`, [`crate::plan`] and
//! `tracing`.

use crate::compile::Compiled;
use kiln_ir::Key;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Why a lookup missed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MissReason {
    /// No cached graph has these ops and wiring.
    NewStructure,
    /// Same ops, but a scalar changed class (became exactly 0, -0.0 or 1, or stopped being).
    NewScalarClass,
    /// Same ops and scalars, new dtypes.
    NewDType,
    /// Same ops and dtypes, new ranks.
    NewRank,
    /// Same ops, dtypes and ranks; a size the plan depends on changed (a dimension became or
    /// stopped being 0 or 1, or dimensions became equal or unequal).
    NewSize,
}

/// One compile, as recorded by the cache.
#[derive(Clone, Debug, PartialEq)]
pub struct MissRecord {
    /// Why it was needed.
    pub reason: MissReason,
    /// The key's hash.
    pub key: u64,
    /// How long compiling took.
    pub compile_time: Duration,
}

/// Counters of a [`GraphCache`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CacheStats {
    /// Lookups that found a plan.
    pub hits: u64,
    /// Lookups that compiled.
    pub misses: u64,
    /// Plans dropped to stay within the capacity.
    pub evictions: u64,
    /// Plans currently cached.
    pub entries: usize,
    /// The capacity.
    pub capacity: usize,
    /// Total time spent compiling.
    pub compile_time: Duration,
    /// The most recent misses (up to 256), oldest first.
    pub recent_misses: Vec<MissRecord>,
}

struct Entry {
    plan: Arc<Cell>,
    layers: [u64; 4],
    last_used: u64,
}

type Cell = OnceLock<kiln_ir::Result<Arc<Compiled>>>;

struct Inner {
    map: hashbrown::HashMap<Key, Entry>,
    tick: u64,
    stats: CacheStats,
}

/// A thread-safe LRU map from structural keys to compiled plans.
///
/// ```
/// let cache = kiln_compiler::GraphCache::new(16);
/// assert_eq!(cache.stats().capacity, 16);
/// ```
pub struct GraphCache {
    inner: Mutex<Inner>,
    log: bool,
}

const RECENT: usize = 256;

impl GraphCache {
    /// A cache holding at most `capacity` plans (at least 1).
    ///
    /// ```
    /// let c = kiln_compiler::GraphCache::new(0);
    /// assert_eq!(c.stats().capacity, 1);
    /// ```
    pub fn new(capacity: usize) -> GraphCache {
        GraphCache {
            inner: Mutex::new(Inner {
                map: hashbrown::HashMap::new(),
                tick: 0,
                stats: CacheStats {
                    capacity: capacity.max(1),
                    ..Default::default()
                },
            }),
            log: std::env::var("KILN_LOG_COMPILES").is_ok_and(|v| !v.is_empty() && v != "0"),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The counters.
    ///
    /// ```
    /// assert_eq!(kiln_compiler::GraphCache::new(4).stats().hits, 0);
    /// ```
    pub fn stats(&self) -> CacheStats {
        let g = self.lock();
        let mut s = g.stats.clone();
        s.entries = g.map.len();
        s
    }

    /// Changes the capacity, evicting least-recently-used plans if needed.
    ///
    /// ```
    /// let c = kiln_compiler::GraphCache::new(4);
    /// c.set_capacity(2);
    /// assert_eq!(c.stats().capacity, 2);
    /// ```
    pub fn set_capacity(&self, capacity: usize) {
        let mut g = self.lock();
        g.stats.capacity = capacity.max(1);
        evict(&mut g);
    }

    /// Drops every plan and resets the counters.
    ///
    /// ```
    /// let c = kiln_compiler::GraphCache::new(4);
    /// c.clear();
    /// assert_eq!(c.stats().entries, 0);
    /// ```
    pub fn clear(&self) {
        let mut g = self.lock();
        g.map.clear();
        let cap = g.stats.capacity;
        g.stats = CacheStats {
            capacity: cap,
            ..Default::default()
        };
    }

    /// The plan for `key` if it is cached and compiled (counts a hit); `None` otherwise
    /// (counts nothing).
    ///
    /// ```
    /// # use kiln_ir::{build, trace, HostData, Shape};
    /// let a = build::data(HostData::from(vec![1i32]), Shape::from([1])).unwrap();
    /// let c = kiln_compiler::GraphCache::new(4);
    /// assert!(c.get(&trace(&[&a], false).key).is_none());
    /// ```
    pub fn get(&self, key: &Key) -> Option<Arc<Compiled>> {
        let mut g = self.lock();
        g.tick += 1;
        let tick = g.tick;
        let e = g.map.get_mut(key)?;
        e.last_used = tick;
        let p = e.plan.get()?.clone().ok()?;
        g.stats.hits += 1;
        Some(p)
    }

    /// The plan for `key`, compiling it with `compile` on a miss. `layers` are the key's
    /// coarser fingerprints (see [`kiln_ir::Key::layers`]) used to classify a miss.
    pub fn get_or_compile(
        &self,
        key: &Key,
        compile: impl FnOnce() -> kiln_ir::Result<Compiled>,
    ) -> kiln_ir::Result<Arc<Compiled>> {
        let layers = key.layers();
        let (cell, reason) = {
            let mut g = self.lock();
            g.tick += 1;
            let tick = g.tick;
            if let Some(e) = g.map.get_mut(key) {
                e.last_used = tick;
                let cell = e.plan.clone();
                if let Some(p) = cell.get() {
                    g.stats.hits += 1;
                    return p.clone();
                }
                (cell, None)
            } else {
                let reason = classify(&g, &layers);
                let cell = Arc::new(OnceLock::new());
                g.map.insert(
                    key.clone(),
                    Entry {
                        plan: cell.clone(),
                        layers,
                        last_used: tick,
                    },
                );
                evict(&mut g);
                (cell, Some(reason))
            }
        };
        match reason {
            None => {
                // Another thread is compiling this key: wait for it (a hit).
                let p = wait(&cell);
                self.lock().stats.hits += 1;
                p
            }
            Some(reason) => {
                // If `compile` panics, waiting threads get an error and the key is dropped,
                // so a later lookup compiles again instead of waiting forever.
                struct Abandon<'a> {
                    cache: &'a GraphCache,
                    key: &'a Key,
                    cell: &'a Cell,
                    armed: bool,
                }
                impl Drop for Abandon<'_> {
                    fn drop(&mut self) {
                        if self.armed {
                            let _ = self.cell.set(Err(kiln_ir::Error::Verifier {
                                node: 0,
                                op: "compile".into(),
                                message: "the compiler panicked on this graph".into(),
                            }));
                            self.cache.lock().map.remove(self.key);
                        }
                    }
                }
                let mut guard = Abandon {
                    cache: self,
                    key,
                    cell: &cell,
                    armed: true,
                };
                let start = std::time::Instant::now();
                let result = compile();
                guard.armed = false;
                drop(guard);
                let compiled = match result {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = cell.set(Err(e.clone()));
                        self.lock().map.remove(key);
                        return Err(e);
                    }
                };
                let t = start.elapsed();
                let p = Arc::new(compiled);
                let _ = cell.set(Ok(p.clone()));
                log_compile(self.log, key.hash(), reason, t, p.plan.kernels.len());
                let mut g = self.lock();
                g.stats.misses += 1;
                g.stats.compile_time += t;
                if g.stats.recent_misses.len() == RECENT {
                    g.stats.recent_misses.remove(0);
                }
                g.stats.recent_misses.push(MissRecord {
                    reason,
                    key: key.hash(),
                    compile_time: t,
                });
                Ok(p)
            }
        }
    }
}

/// Records one compile: a `tracing` event at target `kiln::compile` (DEBUG; INFO with
/// `KILN_LOG_COMPILES`, `log`). With `KILN_LOG_COMPILES` set and no subscriber recording the
/// event (none installed, or one filtering it out), the line goes to stderr instead, so the
/// switch works without a subscriber.
fn log_compile(log: bool, key: u64, reason: MissReason, t: Duration, kernels: usize) {
    const TARGET: &str = "kiln::compile";
    let key = format!("{key:016x}");
    let ms = t.as_secs_f64() * 1e3;
    if !log {
        tracing::debug!(target: TARGET, %key, ?reason, ms, kernels, "compiled graph");
    } else if tracing::enabled!(target: TARGET, tracing::Level::INFO) {
        tracing::info!(target: TARGET, %key, ?reason, ms, kernels, "compiled graph");
    } else {
        eprintln!("kiln: compiled graph {key} ({reason:?}) in {ms:.3} ms: {kernels} kernels");
    }
}

fn wait(cell: &Cell) -> kiln_ir::Result<Arc<Compiled>> {
    loop {
        if let Some(p) = cell.get() {
            return p.clone();
        }
        std::thread::yield_now();
    }
}

fn classify(g: &Inner, layers: &[u64; 4]) -> MissReason {
    let has = |l: usize| g.map.values().any(|e| e.layers[..=l] == layers[..=l]);
    if !has(0) {
        MissReason::NewStructure
    } else if !has(1) {
        MissReason::NewScalarClass
    } else if !has(2) {
        MissReason::NewDType
    } else if !has(3) {
        MissReason::NewRank
    } else {
        MissReason::NewSize
    }
}

fn evict(g: &mut Inner) {
    while g.map.len() > g.stats.capacity {
        let victim = g
            .map
            .iter()
            .filter(|(_, e)| e.plan.get().is_some())
            .min_by_key(|(_, e)| e.last_used)
            .map(|(k, _)| k.clone());
        match victim {
            Some(k) => {
                g.map.remove(&k);
                g.stats.evictions += 1;
            }
            None => break,
        }
    }
}
