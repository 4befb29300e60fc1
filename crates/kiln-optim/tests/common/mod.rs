//! Helpers shared by kiln-optim's checkpoint tests (`checkpoint_writes.rs`, `resume.rs`;
//! each declares `mod common;`): a fresh scratch directory per test, and the names a
//! directory holds, to show what a save left behind.
//!
//! Depends on nothing but std.

use std::path::{Path, PathBuf};

/// A fresh, empty directory for one test: `kiln-optim-<test binary>-<test>-<pid>` under the
/// system's temporary directory.
pub fn scratch(test: &str) -> PathBuf {
    let name = format!(
        "kiln-optim-{}-{test}-{}",
        env!("CARGO_CRATE_NAME"),
        std::process::id()
    );
    let dir = std::env::temp_dir().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The names in `dir`, sorted.
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
