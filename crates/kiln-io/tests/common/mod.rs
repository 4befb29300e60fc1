//! Helpers shared by kiln-io's integration tests (each declares `mod common;`): the fixture
//! directory and per-test temporary directories here; in [`fixtures`], the manifest of
//! `tests/fixtures/io` and bit-exact comparison of arrays and errors against it; in
//! [`samples`], deterministic arrays that start with each dtype's extremes; in [`bytes`],
//! hand-built files (`.npy`, safetensors, zip archives) for inputs kiln's writers never make.
//!
//! Every test binary compiles all of it but uses only a part, so the submodules allow dead
//! code.
//!
//! Depends on `kiln_io`, kiln's public API and `serde_json`.

use std::path::{Path, PathBuf};

#[allow(dead_code)]
pub mod bytes;
#[allow(dead_code)]
pub mod fixtures;
#[allow(dead_code)]
pub mod samples;

/// `tests/fixtures/io`: the files numpy, torch and the `safetensors` package wrote (by
/// `gen_io_fixtures.py`), their `manifest.json`, and the Python checker of kiln's files.
pub fn fixture_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/io"))
}

/// A directory for one test, `<test binary>-<tag>-<pid>` under Cargo's temporary directory
/// for integration tests, created if need be.
pub fn temp_dir(tag: &str) -> PathBuf {
    let name = format!("{}-{tag}-{}", env!("CARGO_CRATE_NAME"), std::process::id());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
