//! Multi-process training over MPI (feature `mpi`): [`init`] starts MPI and installs a
//! panic hook that ends the whole job, and the collectives [`Strategy::MultiProcess`]
//! uses — broadcast of the initial parameters from rank 0 and an all-gather of gradient
//! buffers — each with a deadline.
//!
//! **MPI carries the bytes; kiln fixes the order of the sums.** MPI's own allreduce adds in
//! an order that depends on the library, its algorithm and the message size, so ranks
//! all-gather their gradient buffers (each rank's run of micro-batches already summed over
//! its subtree of the fixed tree, when the run is one) and every rank folds them in the tree
//! order itself. `mpiexec -np 4` therefore writes the bytes 4 in-process replicas write.
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
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes.
    pub fn size(&self) -> usize {
        self.size
    }
}

/// Starts MPI (all threads may call it) and installs a panic hook that, after the usual
/// report, aborts the whole job (`MPI_Abort` with code 101): a rank that panics never
/// leaves the others waiting. Run the program with `mpiexec -np N`; run alone, it is a job
/// of one process.
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
        SimpleCommunicator::world().abort(101);
    }));
    Ok(Mpi {
        _universe: universe,
        rank,
        size,
    })
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
                    eprintln!(
                        "kiln-train: rank {}: {what} did not complete within {limit:?} \
                         (KILN_MPI_DEADLINE_SECS); another rank has stopped or hangs: aborting \
                         the job",
                        world.rank()
                    );
                    world.abort(124);
                }
                req = pending;
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }
}

/// Every rank's `mine` (all of one length), in rank order.
pub(crate) fn all_gather<T: Equivalence + Copy + Default>(mine: &[T]) -> Result<Vec<T>> {
    let world = world("all_gather")?;
    let mut all = vec![T::default(); mine.len() * world.size() as usize];
    ::mpi::request::scope(|scope| {
        let req = world.immediate_all_gather_into(scope, mine, &mut all[..]);
        wait(&world, req, "an all-gather of gradients");
    });
    Ok(all)
}

/// Rank 0's `buf` on every rank.
pub(crate) fn broadcast<T: Equivalence>(buf: &mut [T]) -> Result<()> {
    let world = world("broadcast")?;
    let root = world.process_at_rank(0);
    ::mpi::request::scope(|scope| {
        let req = root.immediate_broadcast_into(scope, buf);
        wait(&world, req, "the broadcast of the initial parameters");
    });
    Ok(())
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
