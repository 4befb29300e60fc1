//! Exact resume and crash safety, with real processes: 100 uninterrupted steps write the
//! bytes of 40 steps, a new process and 60 more (mid-epoch, Adam, a decaying learning rate,
//! dropout); a run killed with SIGKILL at random moments, or aborted between writing a
//! checkpoint's temporary file and renaming it, restarts to the same final bytes, and the
//! newest checkpoint is never truncated.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_kiln-train-mlp");

fn scratch(name: &str) -> PathBuf {
    common::scratch("resume", name)
}

/// The common arguments: 1,000 examples in batches of 64 (15 per epoch, so step 40 is
/// mid-epoch), dropout, a learning rate decaying every 10 steps.
fn command(dir: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(["--examples", "1000", "--batch", "64", "--dropout", "0.2"])
        .args(["--decay", "0.8", "--decay-steps", "10", "--keep-max", "3"])
        .arg("--model-dir")
        .arg(dir)
        .args(extra);
    c
}

fn run(dir: &Path, extra: &[&str]) -> Output {
    let out = command(dir, extra).output().expect("start kiln-train-mlp");
    assert!(
        out.status.success(),
        "kiln-train-mlp {extra:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn final_bytes(dir: &Path, step: u64) -> Vec<u8> {
    std::fs::read(kiln_train::checkpoint_path(dir, step)).expect("the final checkpoint")
}

#[test]
fn forty_then_sixty_in_a_new_process_is_a_hundred_byte_for_byte() {
    for replicas in ["0", "2"] {
        let whole = scratch(&format!("whole-{replicas}"));
        run(
            &whole,
            &[
                "--steps",
                "100",
                "--save-every",
                "100",
                "--replicas",
                replicas,
            ],
        );
        let split = scratch(&format!("split-{replicas}"));
        run(
            &split,
            &[
                "--steps",
                "40",
                "--save-every",
                "40",
                "--replicas",
                replicas,
            ],
        );
        let resumed = run(
            &split,
            &[
                "--steps",
                "60",
                "--save-every",
                "100",
                "--replicas",
                replicas,
            ],
        );
        let line = String::from_utf8_lossy(&resumed.stdout);
        assert!(line.contains("\"global_step\":100"), "{line}");
        assert!(
            final_bytes(&whole, 100) == final_bytes(&split, 100),
            "replicas {replicas}: the resumed run's checkpoint differs"
        );
        // the test can fail: a run that restarts its input from the start differs
        let restarted = scratch(&format!("restart-{replicas}"));
        run(
            &restarted,
            &[
                "--steps",
                "40",
                "--save-every",
                "40",
                "--replicas",
                replicas,
            ],
        );
        strip_cursor(&kiln_train::checkpoint_path(&restarted, 40));
        run(
            &restarted,
            &[
                "--steps",
                "60",
                "--save-every",
                "100",
                "--replicas",
                replicas,
            ],
        );
        assert!(final_bytes(&whole, 100) != final_bytes(&restarted, 100));
        for d in [whole, split, restarted] {
            std::fs::remove_dir_all(d).ok();
        }
    }
}

/// Rewrites a checkpoint without its input cursor (so the resumed run starts its input
/// over).
fn strip_cursor(path: &Path) {
    let file = kiln_io::read_safetensors(path).expect("read");
    let meta: Vec<(String, String)> = file
        .metadata()
        .iter()
        .filter(|(k, _)| k.as_str() != "kiln_train/input")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert!(
        meta.len() < file.metadata().len(),
        "no cursor in the checkpoint"
    );
    let tensors: Vec<(&str, &kiln::Array)> = file
        .tensors()
        .iter()
        .map(|(n, a)| (n.as_str(), a))
        .collect();
    let meta: Vec<(&str, &str)> = meta.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    kiln_io::write_safetensors(path, &tensors, &meta).expect("write");
}

/// Every listed checkpoint in `dir` reads back whole.
fn newest_is_whole(dir: &Path) -> Option<u64> {
    let all = kiln_train::list_checkpoints(dir).expect("list");
    let (step, path) = all.last()?;
    let ckpt = kiln_train::read_checkpoint(path)
        .unwrap_or_else(|e| panic!("the newest checkpoint {} is damaged: {e}", path.display()));
    assert_eq!(ckpt.global_step, *step);
    Some(*step)
}

#[test]
fn sigkill_at_random_moments_then_restart_reaches_the_same_bytes() {
    let reference = scratch("kill-ref");
    run(&reference, &["--max-steps", "400", "--save-every", "1"]);
    let expected = final_bytes(&reference, 400);
    std::fs::remove_dir_all(&reference).ok();
    // moments spread over the run (a seeded generator: the same moments every time)
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let dir = scratch("kill");
    let mut kills = 0;
    let mut resumed_from = Vec::new();
    for _ in 0..8 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let delay = Duration::from_millis(20 + state % 200);
        let mut child = command(&dir, &["--max-steps", "400", "--save-every", "1"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start");
        let start = Instant::now();
        while start.elapsed() < delay {
            if child.try_wait().expect("wait").is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if child.try_wait().expect("wait").is_none() {
            child.kill().expect("SIGKILL");
            kills += 1;
        }
        let _ = child.wait();
        resumed_from.push(newest_is_whole(&dir));
    }
    run(&dir, &["--max-steps", "400", "--save-every", "1"]);
    let mut distinct = resumed_from.clone();
    distinct.dedup();
    assert!(
        kills >= 3 && distinct.len() >= 3,
        "too few kills mid-run: {kills} kills, newest checkpoints {resumed_from:?}"
    );
    assert!(
        final_bytes(&dir, 400) == expected,
        "after {kills} kills (newest checkpoints {resumed_from:?}) the final bytes differ"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_crash_between_the_temporary_file_and_the_rename_leaves_the_previous_checkpoint() {
    let reference = scratch("fault-ref");
    run(&reference, &["--max-steps", "60", "--save-every", "5"]);
    let expected = final_bytes(&reference, 60);
    std::fs::remove_dir_all(&reference).ok();
    let dir = scratch("fault");
    let out = command(&dir, &["--max-steps", "60", "--save-every", "5"])
        .env("KILN_TRAIN_FAULT", "before_rename:35")
        .output()
        .expect("start");
    assert!(
        !out.status.success(),
        "the injected fault did not stop the run"
    );
    // the temporary file is there, complete but not renamed; the newest is step 30's
    assert!(dir.join(".ckpt-35.safetensors.tmp").exists());
    assert_eq!(newest_is_whole(&dir), Some(30));
    run(&dir, &["--max-steps", "60", "--save-every", "5"]);
    assert!(
        !dir.join(".ckpt-35.safetensors.tmp").exists(),
        "the temporary file was left"
    );
    assert!(final_bytes(&dir, 60) == expected);
    // keep_max 3: only the newest three remain
    let steps: Vec<u64> = kiln_train::list_checkpoints(&dir)
        .expect("list")
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(steps, vec![50, 55, 60]);
    std::fs::remove_dir_all(&dir).ok();
}
