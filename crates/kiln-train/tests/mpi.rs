//! Multi-process training under `mpiexec` (MPICH): `-np 2` and `-np 4` (oversubscribed on
//! two cores) write the bytes of 2 and 4 in-process replicas — with MPICH's allreduce,
//! all-gather and all-to-all algorithms forced to other choices too, and when the ranks' runs of
//! micro-batches are not one level of the tree — a one-process job equals one replica, and
//! a rank that panics at step 10 ends the job, non-zero, within 5 s, and a rank that hangs
//! ends it at the collectives' deadline.
//!
//! Skips with a message when kiln-train is built without its `mpi` feature or `mpiexec` is
//! absent, unless `KILN_REQUIRE_MPI=1`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_kiln-train-mlp");

/// `mpiexec`, or `None` (after saying why) when these tests cannot run here.
fn mpiexec() -> Option<&'static str> {
    let required = std::env::var("KILN_REQUIRE_MPI").is_ok_and(|v| v == "1");
    let skip = |why: &str| {
        assert!(!required, "KILN_REQUIRE_MPI=1, but {why}");
        eprintln!("skipped: {why} (set KILN_REQUIRE_MPI=1 to make this an error)");
        None
    };
    if !cfg!(feature = "mpi") {
        return skip("kiln-train was built without its `mpi` feature (--features kiln-train/mpi)");
    }
    for exe in ["mpiexec.mpich", "mpiexec"] {
        if Command::new(exe)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(exe);
        }
    }
    skip("no mpiexec on PATH (Debian: apt-get install mpich libmpich-dev)")
}

fn scratch(name: &str) -> PathBuf {
    common::scratch("mpi", name)
}

/// The training arguments: `batch` examples per step in micro-batches of 16, dropout, 30
/// steps, a checkpoint at the end.
fn args(batch: &str, dir: &Path) -> Vec<String> {
    let mut a: Vec<String> = ["--steps", "30", "--save-every", "30", "--micro-batch", "16"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend([
        "--batch".into(),
        batch.into(),
        "--dropout".into(),
        "0.2".into(),
    ]);
    a.extend(["--model-dir".into(), dir.display().to_string()]);
    a
}

fn checked(mut c: Command, what: &str) -> std::process::Output {
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The final checkpoint of `replicas` in-process replicas.
fn in_process(replicas: usize, batch: &str) -> Vec<u8> {
    let dir = scratch(&format!("in-{replicas}-{batch}"));
    let mut c = Command::new(BIN);
    c.args(args(batch, &dir))
        .args(["--replicas", &replicas.to_string()]);
    checked(c, "in-process replicas");
    let bytes = std::fs::read(dir.join("ckpt-30.safetensors")).expect("checkpoint");
    std::fs::remove_dir_all(&dir).ok();
    bytes
}

/// The final checkpoint of an `mpiexec -np N` job, with extra environment variables.
fn job(exe: &str, np: usize, batch: &str, env: &[(&str, &str)]) -> Vec<u8> {
    let dir = scratch(&format!("np{np}-{batch}-{}", env.len()));
    let mut c = Command::new(exe);
    c.env("MPIEXEC_TIMEOUT", "120")
        .args(["-np", &np.to_string(), BIN, "--mpi"])
        .args(args(batch, &dir));
    for (k, v) in env {
        c.env(k, v);
    }
    let out = checked(c, &format!("mpiexec -np {np} {env:?}"));
    let lines = String::from_utf8_lossy(&out.stdout);
    assert_eq!(lines.lines().count(), np, "one line per rank: {lines}");
    let bytes = std::fs::read(dir.join("ckpt-30.safetensors")).expect("checkpoint");
    std::fs::remove_dir_all(&dir).ok();
    bytes
}

#[test]
fn two_and_four_processes_write_the_bytes_of_two_and_four_replicas() {
    let Some(exe) = mpiexec() else { return };
    for np in [2, 4] {
        let want = in_process(np, "64");
        assert!(
            job(exe, np, "64", &[]) == want,
            "-np {np} differs from {np} replicas"
        );
        for (var, alg) in [
            ("MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM", "recursive_doubling"),
            (
                "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM",
                "reduce_scatter_allgather",
            ),
            ("MPIR_CVAR_IALLGATHER_INTRA_ALGORITHM", "sched_ring"),
            ("MPIR_CVAR_IALLGATHER_INTRA_ALGORITHM", "sched_brucks"),
            ("MPIR_CVAR_IALLTOALL_INTRA_ALGORITHM", "sched_pairwise"),
            ("MPIR_CVAR_IALLTOALL_INTRA_ALGORITHM", "sched_brucks"),
        ] {
            assert!(
                job(exe, np, "64", &[(var, alg)]) == want,
                "-np {np} with {var}={alg} differs from {np} replicas"
            );
        }
    }
    // 6 micro-batches on 4 ranks: runs of 2, 2, 1, 1 are not one level of the tree, so every
    // micro-batch's gradients travel; still the same bytes
    assert!(job(exe, 4, "96", &[]) == in_process(4, "96"));
}

#[test]
fn a_one_process_job_is_one_replica() {
    if mpiexec().is_none() {
        return;
    }
    let dir = scratch("singleton");
    let mut c = Command::new(BIN);
    c.args(args("64", &dir)).arg("--mpi");
    checked(c, "a singleton MPI run");
    let bytes = std::fs::read(dir.join("ckpt-30.safetensors")).expect("checkpoint");
    std::fs::remove_dir_all(&dir).ok();
    assert!(bytes == in_process(1, "64"));
}

/// A 2-rank job with an injected fault (`--panic-at` or `--stall-at`); how long it took,
/// mpiexec's exit code (hydra passes on the code given to `MPI_Abort`) and a report of its
/// status and output, after checking it failed.
fn faulty_job(exe: &str, fault: &[&str], env: &[(&str, &str)]) -> (Duration, Option<i32>, String) {
    let dir = scratch(&format!("fault-{}", fault.join("")));
    let start = Instant::now();
    let mut c = Command::new(exe);
    c.env("MPIEXEC_TIMEOUT", "60")
        .args(["-np", "2", BIN, "--mpi", "--steps", "1000"])
        .args(fault)
        .arg("--model-dir")
        .arg(&dir);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("start mpiexec");
    let took = start.elapsed();
    std::fs::remove_dir_all(&dir).ok();
    let report = format!(
        "mpiexec ended with {:?} after {took:?}\n--- stdout:\n{}\n--- stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "the job succeeded: {report}");
    (took, out.status.code(), report)
}

#[test]
fn a_rank_that_panics_ends_the_job_non_zero_within_five_seconds() {
    let Some(exe) = mpiexec() else { return };
    let (took, code, report) = faulty_job(exe, &["--panic-at", "10:1"], &[]);
    assert!(
        took < Duration::from_secs(5),
        "the job took too long: {report}"
    );
    assert_eq!(
        code,
        Some(101),
        "not the panic hook's MPI_Abort code: {report}"
    );
    assert!(report.contains("--panic-at: step 10 on rank 1"), "{report}");
}

#[test]
fn a_rank_that_hangs_ends_the_job_at_the_deadline() {
    let Some(exe) = mpiexec() else { return };
    let (took, code, report) = faulty_job(
        exe,
        &["--stall-at", "5:1"],
        &[("KILN_MPI_DEADLINE_SECS", "2")],
    );
    assert!(
        took < Duration::from_secs(20),
        "the job took too long: {report}"
    );
    assert_eq!(
        code,
        Some(124),
        "not the deadline's MPI_Abort code: {report}"
    );
    assert!(report.contains("did not complete within"), "{report}");
}
