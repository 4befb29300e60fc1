//! Helpers shared by kiln-beam's integration tests (each test crate uses some of them).
#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Runs `kiln-translate` with `args`, feeding `input` on stdin: (stdout, stderr, exit code).
pub fn translate_cli(args: &[&str], input: &[u8]) -> (String, String, i32) {
    run_cli(env!("CARGO_BIN_EXE_kiln-translate"), args, input)
}

/// Runs the program `exe` with `args`, feeding `input` on stdin: (stdout, stderr, exit code).
pub fn run_cli(exe: &str, args: &[&str], input: &[u8]) -> (String, String, i32) {
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // from another thread: the program writes output while it reads, and both pipes are finite
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // a child that fails early (a bad model) may exit before reading its input
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
        out.status.code().unwrap_or(-1),
    )
}

/// A file fetched by `scripts/fetch-data.sh` (under `$KILN_DATA_DIR`, default `data/` at the
/// workspace root), or `None` after printing why the test skips.
pub fn data_file(rel: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("KILN_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data")));
    let p = dir.join(rel);
    if p.exists() {
        Some(p)
    } else {
        eprintln!(
            "skipping: {} is absent (run scripts/fetch-data.sh)",
            p.display()
        );
        None
    }
}
