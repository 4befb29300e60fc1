//! The thread team that runs the kernels' parallel loops: the calling thread plus
//! `threads − 1` helper threads that keep spinning for a while after their last job
//! ([`Team::spin`]) before they sleep.
//!
//! Why not a work-stealing pool: on a virtual machine, waking a sleeping thread costs tens of
//! microseconds on both sides. A loop handed to a sleeping `rayon` pool from outside it paid
//! that twice per loop: its workers started late and the caller, asleep while they ran,
//! resumed late (measured with a timer around each block; docs/performance.md, "Figures
//! behind the CPU kernels' choices"). Here the caller takes part in its own loop (it claims items like the
//! helpers, so a late helper delays nothing), helpers that ran a job recently are spinning
//! and claim items within a microsecond, and the caller waits for the last item by
//! spinning, not sleeping.
//!
//! One loop runs on a team at a time: a loop started while the team is busy (by another
//! thread, or nested inside an item) runs on its calling thread alone. Items are claimed
//! one at a time from a shared counter, so how many each thread runs depends on timing;
//! callers cut their items by the shape only, so results do not depend on it.
//!
//! Depends on `std` only.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a helper keeps spinning after its last job before it sleeps, unless
/// `KILN_SPIN_US` says otherwise. Long enough to stay awake across the serial stretches of
/// a training step and between steps; a sleeping helper costs the next loop one wake-up.
pub const DEFAULT_SPIN: Duration = Duration::from_millis(1);

/// A team of threads for parallel loops (see the module docs). The process-wide team has
/// `KILN_NUM_THREADS` threads (default: the cores this process may use) and is what kernels
/// use unless a team is [installed](Team::install) on the calling thread.
///
/// ```
/// let team = kiln_cpu::Team::new(3);
/// assert_eq!(team.threads(), 3);
/// let threads = team.install(kiln_cpu::Team::current_threads);
/// assert_eq!(threads, 3);
/// ```
#[derive(Debug)]
pub struct Team {
    inner: Arc<Inner>,
    helpers: Vec<JoinHandle<()>>,
}

/// What the team's threads share.
#[derive(Debug)]
struct Inner {
    threads: usize,
    spin: Duration,
    /// Held (true) by the thread whose loop is running.
    busy: AtomicBool,
    /// Bumped for each job published in `slot`.
    epoch: AtomicU64,
    slot: Mutex<Option<Arc<Job>>>,
    /// Helpers asleep on `wake` (they check `epoch` under `sleep` before waiting).
    sleepers: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
    stop: AtomicBool,
    /// When (nanoseconds after [`clock`]'s start) a loop last found the team busy.
    contended: AtomicU64,
}

/// One parallel loop as the helpers see it.
struct Job {
    /// The loop body; each thread that joins calls it once and it claims items until none
    /// are left. Its lifetime is erased: it is only called by a thread that joined the job
    /// while it was open, and [`Inner::run`] does not return (so the closure stays alive)
    /// until the job is closed and no helper is inside it.
    work: *const (dyn Fn() + Sync + 'static),
    /// The number of helpers inside `work`, plus [`CLOSED`] once no more may join.
    state: AtomicUsize,
    /// The first panic of a helper inside `work`, re-raised on the calling thread.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

// SAFETY: `work` points to a `Fn + Sync` closure, which may be called from any thread; the
// pointer is only dereferenced under the join protocol that keeps the closure alive (see
// `Job::work`). The other fields are `Send + Sync`.
unsafe impl Send for Job {}
// SAFETY: as above; shared access only calls the `Sync` closure and touches atomics/mutexes.
unsafe impl Sync for Job {}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// The bit of [`Job::state`] that says no helper may join any more.
const CLOSED: usize = 1 << (usize::BITS - 1);

thread_local! {
    /// The team installed on this thread ([`Team::install`]).
    static CURRENT: RefCell<Option<Arc<Inner>>> = const { RefCell::new(None) };
    /// True while this thread runs a loop's items: loops nested inside run serially.
    static IN_LOOP: Cell<bool> = const { Cell::new(false) };
}

/// The process-wide team.
static GLOBAL: OnceLock<Team> = OnceLock::new();

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks; recover the data if something did.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Team {
    /// A team of `threads` threads (at least one): the caller of each loop and
    /// `threads − 1` helpers started now, spinning for `KILN_SPIN_US` (default
    /// [`DEFAULT_SPIN`]) after each job.
    pub fn new(threads: usize) -> Team {
        Team::with_spin(threads, env_spin())
    }

    /// A team whose helpers spin for `spin` after each job before they sleep.
    ///
    /// ```
    /// use std::time::Duration;
    /// let team = kiln_cpu::Team::with_spin(2, Duration::ZERO); // helpers sleep at once
    /// assert_eq!(team.spin(), Duration::ZERO);
    /// ```
    pub fn with_spin(threads: usize, spin: Duration) -> Team {
        let threads = threads.max(1);
        let inner = Arc::new(Inner {
            threads,
            spin,
            busy: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            slot: Mutex::new(None),
            sleepers: AtomicUsize::new(0),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            contended: AtomicU64::new(0),
        });
        let helpers = (1..threads)
            .map(|i| {
                let inner = Arc::clone(&inner);
                std::thread::Builder::new()
                    .name(format!("kiln-{i}"))
                    .spawn(move || helper(&inner))
                    .expect("kiln: cannot start a helper thread")
            })
            .collect();
        Team { inner, helpers }
    }

    /// The number of threads, the callers' included.
    pub fn threads(&self) -> usize {
        self.inner.threads
    }

    /// How long helpers spin after a job.
    pub fn spin(&self) -> Duration {
        self.inner.spin
    }

    /// Runs `f` on this thread with this team serving the kernels' parallel loops (the
    /// process-wide team serves them otherwise); the previous team is restored afterwards,
    /// also when `f` panics.
    ///
    /// ```
    /// let one = kiln_cpu::Team::new(1);
    /// assert_eq!(one.install(kiln_cpu::Team::current_threads), 1);
    /// ```
    pub fn install<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<Arc<Inner>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let prev = self.0.take();
                CURRENT.with(|c| *c.borrow_mut() = prev);
            }
        }
        let prev = CURRENT.with(|c| c.borrow_mut().replace(Arc::clone(&self.inner)));
        let _restore = Restore(prev);
        f()
    }

    /// The number of threads of the team that serves this thread's loops.
    pub fn current_threads() -> usize {
        with_current(|t| t.threads)
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        {
            let _g = lock(&self.inner.sleep);
            self.inner.wake.notify_all();
        }
        for h in self.helpers.drain(..) {
            // A helper only ends by returning (its jobs' panics are caught).
            let _ = h.join();
        }
    }
}

/// The thread count from `KILN_NUM_THREADS`, else the cores this process may use.
fn env_threads() -> usize {
    std::env::var("KILN_NUM_THREADS")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The spin time from `KILN_SPIN_US` (microseconds), else [`DEFAULT_SPIN`].
fn env_spin() -> Duration {
    std::env::var("KILN_SPIN_US")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(DEFAULT_SPIN, Duration::from_micros)
}

/// Calls `f` with the team serving this thread.
fn with_current<R>(f: impl FnOnce(&Inner) -> R) -> R {
    let installed = CURRENT.with(|c| c.borrow().clone());
    match installed {
        Some(inner) => f(&inner),
        None => f(&GLOBAL.get_or_init(|| Team::new(env_threads())).inner),
    }
}

/// Runs `work` on this thread and on every helper of the serving team that joins in time:
/// `work` must claim its items from shared state until none are left (each thread calls it
/// once; a thread that finds nothing left returns at once). Returns false, without calling
/// `work`, when the loop should run serially instead: the team has one thread, is busy
/// with another loop, or this thread is inside a loop's item. A panic inside `work` on any
/// thread is re-raised here after every thread has left `work`.
pub(crate) fn broadcast(work: &(dyn Fn() + Sync)) -> bool {
    if IN_LOOP.with(Cell::get) {
        return false;
    }
    with_current(|team| team.run(work))
}

impl Inner {
    /// See [`broadcast`].
    fn run(&self, work: &(dyn Fn() + Sync)) -> bool {
        if self.threads < 2 {
            return false;
        }
        if self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            // Other threads evaluate at the same time: they keep the cores busy, and
            // helpers spinning beside them would only slow them down.
            self.contended.store(clock().max(1), Ordering::Relaxed);
            return false;
        }
        // SAFETY: only the lifetime of the trait object is changed (same pointer, same
        // vtable). The erased pointer is dereferenced only by helpers that joined the job
        // while it was open (`Job::enter`), and `Leave` below does not let this function
        // return or unwind until the job is closed and every helper has left `work`; `work`
        // outlives this call.
        let erased: *const (dyn Fn() + Sync + 'static) = unsafe {
            std::mem::transmute::<*const (dyn Fn() + Sync + '_), *const (dyn Fn() + Sync + 'static)>(
                work,
            )
        };
        let job = Arc::new(Job {
            work: erased,
            state: AtomicUsize::new(0),
            panic: Mutex::new(None),
        });
        *lock(&self.slot) = Some(Arc::clone(&job));
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = lock(&self.sleep);
            self.wake.notify_all();
        }

        /// Closes the job, waits for the helpers inside it, and frees the team, also
        /// when `work` panics on this thread.
        struct Leave<'a>(&'a Inner, &'a Job);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                let Leave(team, job) = *self;
                job.state.fetch_or(CLOSED, Ordering::SeqCst);
                let mut spins = 0u32;
                while job.state.load(Ordering::Acquire) != CLOSED {
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(1024) {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
                *lock(&team.slot) = None;
                IN_LOOP.with(|f| f.set(false));
                team.busy.store(false, Ordering::Release);
            }
        }
        {
            let _leave = Leave(self, &job);
            IN_LOOP.with(|f| f.set(true));
            work();
        }
        let helper_panic = lock(&job.panic).take();
        if let Some(p) = helper_panic {
            panic::resume_unwind(p);
        }
        true
    }
}

impl Inner {
    /// Whether a loop found the team busy within the last [`CONTENDED_WINDOW`].
    fn recently_contended(&self) -> bool {
        let at = self.contended.load(Ordering::Relaxed);
        at != 0 && clock().saturating_sub(at) < CONTENDED_WINDOW.as_nanos() as u64
    }
}

/// How long after a loop found the team busy helpers go to sleep at once instead of
/// spinning (the caller's threads are then the ones keeping the cores busy: two `kiln-beam`
/// decoding threads on two cores decoded 25–35 % fewer words per second beside a helper
/// spinning 1 ms after each loop).
const CONTENDED_WINDOW: Duration = Duration::from_millis(100);

/// Nanoseconds since the first call (a monotonic clock the threads share).
fn clock() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

impl Job {
    /// Joins the job if it is still open.
    fn enter(&self) -> bool {
        let mut v = self.state.load(Ordering::Acquire);
        loop {
            if v & CLOSED != 0 {
                return false;
            }
            match self
                .state
                .compare_exchange_weak(v, v + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => v = now,
            }
        }
    }

    /// A helper's part: joins, runs `work`, records a panic, leaves.
    fn help(&self) {
        if !self.enter() {
            return;
        }
        IN_LOOP.with(|f| f.set(true));
        // SAFETY: this thread joined while the job was open, so the caller of `Inner::run`
        // is still waiting in `Leave` (it waits for `state` to drop to `CLOSED`, which
        // cannot happen before the `fetch_sub` below) and the closure is alive.
        let work = unsafe { &*self.work };
        if let Err(p) = panic::catch_unwind(AssertUnwindSafe(work)) {
            lock(&self.panic).get_or_insert(p);
        }
        IN_LOOP.with(|f| f.set(false));
        self.state.fetch_sub(1, Ordering::Release);
    }
}

/// A helper thread: runs each published job, spins for `spin` after the last one, then
/// sleeps until the next is published.
fn helper(team: &Inner) {
    let mut seen = team.epoch.load(Ordering::SeqCst);
    let mut idle_since = Instant::now();
    loop {
        let now = team.epoch.load(Ordering::Acquire);
        if now != seen {
            seen = now;
            let job = lock(&team.slot).clone();
            if let Some(job) = job {
                job.help();
            }
            idle_since = Instant::now();
            continue;
        }
        if team.stop.load(Ordering::Acquire) {
            return;
        }
        if idle_since.elapsed() < team.spin && !team.recently_contended() {
            for _ in 0..16 {
                std::hint::spin_loop();
            }
            continue;
        }
        let mut g = lock(&team.sleep);
        team.sleepers.fetch_add(1, Ordering::SeqCst);
        while team.epoch.load(Ordering::SeqCst) == seen && !team.stop.load(Ordering::SeqCst) {
            g = team.wake.wait(g).unwrap_or_else(PoisonError::into_inner);
        }
        team.sleepers.fetch_sub(1, Ordering::SeqCst);
        drop(g);
        idle_since = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    /// A loop that finds the team busy runs on its caller and marks the team contended
    /// (its helpers then sleep instead of spinning); an uncontended team is not marked.
    #[test]
    fn a_busy_team_runs_the_second_loop_serially_and_marks_contention() {
        let team = Team::with_spin(2, Duration::from_secs(1));
        let inside = Barrier::new(2);
        let done = Barrier::new(2);
        assert!(!team.inner.recently_contended());
        std::thread::scope(|s| {
            s.spawn(|| {
                let ran = team.install(|| {
                    broadcast(&|| {
                        // Only the caller's part waits (a helper may join and return).
                        if std::thread::current()
                            .name()
                            .is_none_or(|n| !n.starts_with("kiln-"))
                        {
                            inside.wait();
                            done.wait();
                        }
                    })
                });
                assert!(ran, "the first loop runs on the team");
            });
            inside.wait();
            let ran = team.install(|| broadcast(&|| {}));
            assert!(!ran, "the team is busy: the second loop runs on its caller");
            assert!(team.inner.recently_contended());
            done.wait();
        });
    }
}
