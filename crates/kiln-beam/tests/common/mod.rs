//! Helpers shared by kiln-beam's integration tests.

use std::io::Write;
use std::process::{Command, Stdio};

/// Runs `kiln-translate` with `args`, feeding `input` on stdin: (stdout, stderr, exit code).
pub fn translate_cli(args: &[&str], input: &[u8]) -> (String, String, i32) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln-translate"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // a child that fails early (a bad model) may exit before reading its input
    let _ = child.stdin.take().unwrap().write_all(input);
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
        out.status.code().unwrap_or(-1),
    )
}
