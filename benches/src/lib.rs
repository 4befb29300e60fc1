//! What the benchmark binaries share: the CPU model they record with every figure.
//!
//! Depends on the standard library only.

/// The CPU model from `/proc/cpuinfo` (`model name`), or the architecture where there is
/// none.
///
/// ```
/// assert!(!kiln_benches::cpu_model().is_empty());
/// ```
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}
