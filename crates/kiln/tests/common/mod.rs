//! Helpers shared by the integration tests: whether the wgpu suites run here.

/// Whether a wgpu adapter is available. Without one the caller skips (printing why), unless
/// `KILN_REQUIRE_GPU=1` is set, in which case this panics: CI on a GPU machine must not pass
/// by skipping.
#[allow(dead_code)] // not every test file runs wgpu suites
pub fn wgpu_or_skip(what: &str) -> bool {
    if kiln::Device::Wgpu.is_available() {
        eprintln!("{what}: running on {}", kiln::Device::Wgpu.describe());
        return true;
    }
    let why = kiln::Device::Wgpu.describe();
    if std::env::var("KILN_REQUIRE_GPU").is_ok_and(|v| v == "1") {
        panic!("{what}: KILN_REQUIRE_GPU=1 but the wgpu device is unavailable: {why}");
    }
    eprintln!("{what}: skipped on wgpu: {why}");
    false
}
