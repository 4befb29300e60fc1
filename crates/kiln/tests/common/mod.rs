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

/// The wgpu feature an adapter needs to compute with `dtype` (`SHADER_F64`, `SHADER_INT64`),
/// for skip messages; `None` for the dtypes every adapter has.
#[allow(dead_code)]
pub fn wgpu_feature(dtype: kiln::DType) -> Option<&'static str> {
    match dtype {
        kiln::DType::F64 => Some("SHADER_F64"),
        kiln::DType::I64 => Some("SHADER_INT64"),
        _ => None,
    }
}

/// The dtype `device` lacks that `err` reports: `Some` only for an
/// [`kiln::Error::UnsupportedDType`] of a dtype that [`kiln::Device::supports`] says the
/// device does not compute with. Any other error (a value error, an unsupported dtype the
/// device *does* have, a wrong result) is `None`: the caller must treat it as a failure.
#[allow(dead_code)]
pub fn lacked_dtype(device: kiln::Device, err: &kiln::Error) -> Option<kiln::DType> {
    match err {
        kiln::Error::UnsupportedDType { dtype, .. } if !device.supports(*dtype) => Some(*dtype),
        _ => None,
    }
}

/// Counts the cases a suite skipped because the device lacks a dtype, and says so.
#[allow(dead_code)]
#[derive(Default)]
pub struct DTypeSkips(std::collections::BTreeMap<kiln::DType, usize>);

#[allow(dead_code)]
impl DTypeSkips {
    /// Records one case skipped for `dtype`.
    pub fn add(&mut self, dtype: kiln::DType) {
        *self.0.entry(dtype).or_default() += 1;
    }

    /// Cases skipped in all.
    pub fn total(&self) -> usize {
        self.0.values().sum()
    }

    /// Prints one line, e.g. `random DAGs on wgpu: skipped 37 of 200 cases: the adapter
    /// lacks SHADER_F64 (f64: 30 cases), SHADER_INT64 (i64: 7 cases)`; nothing when none.
    pub fn report(&self, what: &str, device: kiln::Device, of: usize) {
        if self.0.is_empty() {
            return;
        }
        let why: Vec<String> = self
            .0
            .iter()
            .map(|(d, n)| format!("{} ({d}: {n} cases)", wgpu_feature(*d).unwrap_or("?")))
            .collect();
        eprintln!(
            "{what} on {device}: skipped {} of {of} cases: the adapter lacks {}",
            self.total(),
            why.join(", ")
        );
    }
}

/// Asserts `got` equals `want` within `tol` relative (plus `tol` absolute), naming `what`.
#[allow(dead_code)]
pub fn close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, want {w} (tolerance {tol})"
        );
    }
}

/// The parameters of the small MLP (64-32-10) the GPU training tests step, made on the host
/// (the same numbers whichever device trains) and placed on `device`.
#[allow(dead_code)]
pub fn mlp_init(device: kiln::Device) -> Vec<kiln::Array> {
    let p = [
        kiln::Array::uniform(&[64, 32], -0.2, 0.2, 1, kiln::DType::F32).unwrap(),
        kiln::Array::zeros(&[32], kiln::DType::F32),
        kiln::Array::uniform(&[32, 10], -0.2, 0.2, 2, kiln::DType::F32).unwrap(),
        kiln::Array::zeros(&[10], kiln::DType::F32),
    ];
    // Made on the host (the same numbers whichever device trains), then placed.
    p.iter()
        .map(|a| a.to_host().unwrap().to_device(device).unwrap())
        .collect()
}

/// Batch `step` of `batch` examples for [`mlp_init`]'s model: inputs and one-hot labels, on
/// the host.
#[allow(dead_code)]
pub fn mlp_batch(step: u64, batch: usize) -> (kiln::Array, kiln::Array) {
    let x = kiln::Array::uniform(&[batch, 64], -1.0, 1.0, 100 + step, kiln::DType::F32)
        .unwrap()
        .to_host()
        .unwrap();
    let labels: Vec<i64> = (0..batch as i64)
        .map(|i| (i * 3 + step as i64) % 10)
        .collect();
    let y = kiln::Array::from_vec(labels, &[batch])
        .unwrap()
        .one_hot(10, kiln::DType::F32)
        .to_host()
        .unwrap();
    (x, y)
}
