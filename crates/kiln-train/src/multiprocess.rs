//! Multi-process training over MPI (feature `mpi`): [`init`] starts MPI and installs a
//! panic hook that ends the whole job, and the collectives [`Strategy::MultiProcess`]
//! uses — broadcast of the initial parameters from rank 0, a fixed-order allreduce
//! ([`all_reduce_tree`]) and an all-gather of gradient buffers — each with a deadline.
//!
//! **MPI carries the bytes; kiln fixes the order of the sums.** MPI's own allreduce adds in
//! an order that depends on the library, its algorithm and the message size, so each rank
//! sums its run of micro-batches over its subtree of the fixed tree and [`all_reduce_tree`]
//! folds the ranks' sums over the top of the tree in kiln-train's code (when the runs are
//! not one level of the tree, every micro-batch's buffers are all-gathered and folded). `mpiexec -np 4` therefore writes the bytes 4 in-process replicas write.
//!
//! **No input hangs the job.** A panic on any thread of any rank calls `MPI_Abort`, and a
//! collective that has not completed by its deadline (`KILN_MPI_DEADLINE_SECS`, default
//! 600) aborts the job with exit code 124.
//!
//! Depends on the `mpi` crate (rsmpi, over the system's MPI) and `crate::error`,
//! `crate::strategy`.
//!
//! [`Strategy::MultiProcess`]: crate::Strategy::MultiProcess

use crate::{Error, Result};
use ::mpi::datatype::Equivalence;
use ::mpi::request::{Request, Scope};
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::*;
use std::time::{Duration, Instant};

/// A running MPI environment: keep it alive until the end of `main` (dropping it
/// finalizes MPI).
///
/// ```no_run
/// let mpi = kiln_train::multiprocess::init()?;
/// println!("rank {} of {}", mpi.rank(), mpi.size());
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub struct Mpi {
    _universe: ::mpi::environment::Universe,
    rank: usize,
    size: usize,
}

impl std::fmt::Debug for Mpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mpi")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish()
    }
}

impl Mpi {
    /// This process's rank.
    ///
    /// ```no_run
    /// let mpi = kiln_train::multiprocess::init()?;
    /// if mpi.rank() == 0 {
    ///     println!("rank 0 writes the logs");
    /// }
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes.
    ///
    /// ```no_run
    /// let mpi = kiln_train::multiprocess::init()?; // `mpiexec -np 4`: a size of 4
    /// assert!(mpi.rank() < mpi.size());
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn size(&self) -> usize {
        self.size
    }
}

/// Starts MPI (all threads may call it) and installs a panic hook that, after the usual
/// report, aborts the whole job (`MPI_Abort` with code 101): a rank that panics never
/// leaves the others waiting. Run the program with `mpiexec -np N`; run alone, it is a job
/// of one process.
///
/// ```no_run
/// use kiln_train::{demo, Estimator, RunConfig, Strategy, Until};
/// let _mpi = kiln_train::multiprocess::init()?; // at the start of main, kept to its end
/// let input = demo::training_input(demo::synthetic_classification(64, 2, 2, 0.1, 0)?, 16, 0)?;
/// let config = RunConfig::new().strategy(Strategy::MultiProcess { micro_batch_size: 4 });
/// let mut est = Estimator::new(demo::Mlp::new(&[2, 2]), config)?;
/// est.train(&input, Until::Steps(10), &mut [])?; // every rank runs its share of each batch
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub fn init() -> Result<Mpi> {
    let Some((universe, _level)) = ::mpi::initialize_with_threading(::mpi::Threading::Multiple)
    else {
        return Err(Error::Collective {
            op: "multiprocess::init",
            message: "MPI is already initialized in this process: call init once, at the start \
                      of main, and keep what it returns"
                .into(),
        });
    };
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        eprintln!("kiln-train: rank {rank} panicked; aborting the MPI job");
        abort_after_output(101);
    }));
    Ok(Mpi {
        _universe: universe,
        rank,
        size,
    })
}

/// How long a rank waits between writing why it aborts and calling `MPI_Abort`.
///
/// The process manager (MPICH's hydra) forwards a rank's stderr through a pipe and handles
/// the abort through a socket, in whichever order its poll loop sees them: a line written
/// just before `MPI_Abort` can be lost when the abort is handled first (seen once in CI).
const OUTPUT_GRACE: Duration = Duration::from_millis(500);

/// Ends the whole job with `code` after giving the process manager [`OUTPUT_GRACE`] to
/// forward what this rank has written.
fn abort_after_output(code: i32) -> ! {
    std::thread::sleep(OUTPUT_GRACE);
    SimpleCommunicator::world().abort(code)
}

/// The world communicator, if MPI is running.
pub(crate) fn world(op: &'static str) -> Result<SimpleCommunicator> {
    if !::mpi::environment::is_initialized() || ::mpi::environment::is_finalized() {
        return Err(Error::Collective {
            op,
            message: "MPI is not running: call kiln_train::multiprocess::init() at the start of \
                      main (and keep what it returns) before training with \
                      Strategy::MultiProcess"
                .into(),
        });
    }
    Ok(SimpleCommunicator::world())
}

/// This process's rank and the number of processes (0 of 1 without MPI).
pub(crate) fn rank_and_size() -> (usize, usize) {
    match world("rank") {
        Ok(w) => (w.rank() as usize, w.size() as usize),
        Err(_) => (0, 1),
    }
}

/// The deadline of one collective.
fn deadline() -> Duration {
    let secs = std::env::var("KILN_MPI_DEADLINE_SECS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(600.0);
    Duration::from_secs_f64(secs)
}

/// Waits for `req` until the deadline, then aborts the job (an incomplete request may not
/// be dropped).
fn wait<'a, D: ?Sized, S: Scope<'a>>(
    world: &SimpleCommunicator,
    mut req: Request<'a, D, S>,
    what: &str,
) {
    let limit = deadline();
    let start = Instant::now();
    loop {
        match req.test() {
            Ok(_) => return,
            Err(pending) => {
                if start.elapsed() >= limit {
                    // one write, so the line is not interleaved with other ranks' output
                    let line = format!(
                        "kiln-train: rank {}: {what} did not complete within {limit:?} \
                         (KILN_MPI_DEADLINE_SECS); another rank has stopped or hangs: aborting \
                         the job\n",
                        world.rank()
                    );
                    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
                    abort_after_output(124);
                }
                req = pending;
                // MPI moves a large message only while it is called: poll eagerly at first
                // (yielding, so oversubscribed ranks let the others run), then back off
                if start.elapsed() < Duration::from_millis(50) {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        }
    }
}

/// Every rank's `mine` (all ranks pass one length), in rank order, on every rank; aborts
/// the job past the deadline.
///
/// ```no_run
/// let _mpi = kiln_train::multiprocess::init()?;
/// let all = kiln_train::multiprocess::all_gather(&[1.0f32, 2.0])?;
/// assert_eq!(all.len() % 2, 0);
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub fn all_gather<T: Equivalence + Copy + Default>(mine: &[T]) -> Result<Vec<T>> {
    let world = world("all_gather")?;
    let mut all = vec![T::default(); mine.len() * world.size() as usize];
    ::mpi::request::scope(|scope| {
        let req = world.immediate_all_gather_into(scope, mine, &mut all[..]);
        wait(&world, req, "an all-gather of gradients");
    });
    Ok(all)
}

/// Rank 0's `buf` on every rank (all ranks pass one length); aborts the job past the
/// deadline.
///
/// ```no_run
/// let _mpi = kiln_train::multiprocess::init()?;
/// let mut v = vec![0.0f64; 3];
/// kiln_train::multiprocess::broadcast(&mut v)?;
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub fn broadcast<T: Equivalence>(buf: &mut [T]) -> Result<()> {
    let world = world("broadcast")?;
    let root = world.process_at_rank(0);
    ::mpi::request::scope(|scope| {
        let req = root.immediate_broadcast_into(scope, buf);
        wait(&world, req, "the broadcast of the initial parameters");
    });
    Ok(())
}

/// The elementwise sum of every rank's `mine` (all ranks pass one length), each element
/// summed over the ranks in the fixed tree order (pairs of ranks `(0,1), (2,3), ...`, then
/// pairs of those), the same on every rank whatever MPI's algorithms.
///
/// A reduce-scatter and an all-gather, both by kiln-train: an all-to-all gives rank `r`
/// chunk `r` of every rank's buffer, rank `r` folds it over the tree, and an all-gather
/// gives everyone every folded chunk. Each rank sends and receives about twice its buffer,
/// as a ring allreduce does.
///
/// ```no_run
/// let mpi = kiln_train::multiprocess::init()?;
/// let sum = kiln_train::multiprocess::all_reduce_tree(&[1.0f32, 2.0])?;
/// assert_eq!(sum, vec![mpi.size() as f32, 2.0 * mpi.size() as f32]);
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub fn all_reduce_tree<T>(mine: &[T]) -> Result<Vec<T>>
where
    T: Equivalence + Copy + Default + std::ops::Add<Output = T> + std::ops::AddAssign,
{
    let world = world("all_reduce_tree")?;
    let ranks = world.size() as usize;
    let n = mine.len();
    if ranks == 1 {
        return Ok(mine.to_vec());
    }
    let chunk = n.div_ceil(ranks);
    let mut send = Vec::with_capacity(chunk * ranks);
    send.extend_from_slice(mine);
    send.resize(chunk * ranks, T::default());
    let mut parts = vec![T::default(); chunk * ranks];
    ::mpi::request::scope(|scope| {
        let req = world.immediate_all_to_all_into(scope, &send[..], &mut parts[..]);
        wait(&world, req, "the all-to-all of a tree allreduce");
    });
    drop(send);
    let slices: Vec<&[T]> = parts.chunks(chunk).collect();
    let folded = crate::tree_sum_slices(&slices);
    drop(parts);
    let mut all = all_gather(&folded)?;
    all.truncate(n);
    Ok(all)
}

/// The length every rank contributes, checked equal on all ranks (a rank whose model built
/// other gradients would otherwise corrupt the gather).
pub(crate) fn agree_on(len: usize, what: &str) -> Result<()> {
    let all = all_gather(&[len as u64])?;
    if all.iter().any(|&l| l != len as u64) {
        return Err(Error::Collective {
            op: "MultiProcess",
            message: format!(
                "the ranks disagree on {what}: {all:?}; every rank must build the same model"
            ),
        });
    }
    Ok(())
}
