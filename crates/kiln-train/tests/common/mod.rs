//! What the integration tests share: a guard against hangs and scratch directories.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::Duration;

/// Runs `f` on its own thread and fails the test if it has not finished after `secs`
/// seconds (a hang), instead of hanging the test run.
pub fn within<R: Send + 'static>(
    what: &str,
    secs: u64,
    f: impl FnOnce() -> R + Send + 'static,
) -> R {
    let (tx, rx) = channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(r) => {
            let _ = handle.join();
            r
        }
        Err(RecvTimeoutError::Timeout) => panic!("{what}: still running after {secs} s (hang)"),
        Err(RecvTimeoutError::Disconnected) => match handle.join() {
            Err(payload) => std::panic::resume_unwind(payload),
            Ok(()) => panic!("{what}: the worker thread ended without a result"),
        },
    }
}

/// A fresh, empty scratch directory path for test `suite`'s case `name` (not created).
pub fn scratch(suite: &str, name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("kiln-train-{suite}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}
