//! numpy reads what kiln writes: kiln writes `.npy` files (every dtype, empty and rank-0
//! shapes), `.npz` archives (`write_npz` and `write_npz_compressed`) and a safetensors file
//! with metadata into a temporary directory, with a manifest of the exact bit patterns they
//! hold; `tests/fixtures/io/check_kiln_files.py` then loads them with `numpy.load` and with
//! its own safetensors reader (struct + json + `numpy.frombuffer`, independent of the
//! `safetensors` package and of kiln) and fails on any difference.
//!
//! Needs `python3` with numpy: without it the test prints a note and passes, unless the
//! environment variable `CI` is `true`, where it fails asking for python3-numpy.
//!
//! Depends on `kiln_io`, kiln's public API, `serde_json`, the shared helpers in `common` and a
//! `python3` with numpy.

mod common;

use common::samples::{DTYPES, F32_SPECIALS, F64_SPECIALS};
use common::{fixture_dir, temp_dir};
use kiln::{Array, DType};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether `python3` can import numpy; otherwise skips (or fails on CI) with a message.
fn python_with_numpy() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        let msg = "python3 with numpy is not available (install python3-numpy, e.g. \
                   `apt-get install python3-numpy` or `pip install numpy`)";
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{msg}: CI must run this test");
        }
        eprintln!("skipping numpy_reads_kiln: {msg}");
    }
    ok
}

/// A deterministic array whose first elements are the dtype's extremes.
fn sample(dtype: DType, shape: &[usize], salt: u64) -> Array {
    let n: usize = shape.iter().product();
    let mix = |i: usize| (i as u64 + salt).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt;
    match dtype {
        DType::Bool => {
            Array::from_vec((0..n).map(|i| mix(i) >> 63 == 1).collect::<Vec<_>>(), shape)
        }
        DType::I32 => {
            let special = [i32::MIN, -1, 0, 1, i32::MAX];
            let v = (0..n).map(|i| special.get(i).copied().unwrap_or((mix(i) >> 32) as i32));
            Array::from_vec(v.collect::<Vec<_>>(), shape)
        }
        DType::I64 => {
            let special = [i64::MIN, -1, 0, 1, i64::MAX, (1 << 53) + 1];
            let v = (0..n).map(|i| special.get(i).copied().unwrap_or(mix(i) as i64));
            Array::from_vec(v.collect::<Vec<_>>(), shape)
        }
        DType::F32 => {
            let v = (0..n).map(|i| {
                f32::from_bits(
                    F32_SPECIALS
                        .get(i)
                        .copied()
                        .unwrap_or((mix(i) >> 32) as u32),
                )
            });
            Array::from_vec(v.collect::<Vec<_>>(), shape)
        }
        DType::F64 => {
            let v = (0..n).map(|i| f64::from_bits(F64_SPECIALS.get(i).copied().unwrap_or(mix(i))));
            Array::from_vec(v.collect::<Vec<_>>(), shape)
        }
    }
    .unwrap()
}

/// The manifest entry of an array (see `gen_io_fixtures.py`): kiln dtype, shape, values as
/// JSON booleans, integers or hex bit patterns, and the numpy type string it must be stored as.
fn describe(name: &str, a: &Array) -> Value {
    let (dtype, stored, values): (&str, &str, Vec<Value>) = match a.dtype() {
        DType::Bool => (
            "bool",
            "|b1",
            a.to_vec::<bool>()
                .unwrap()
                .into_iter()
                .map(Value::from)
                .collect(),
        ),
        DType::I32 => (
            "int32",
            "<i4",
            a.to_vec::<i32>()
                .unwrap()
                .into_iter()
                .map(Value::from)
                .collect(),
        ),
        DType::I64 => (
            "int64",
            "<i8",
            a.to_vec::<i64>()
                .unwrap()
                .into_iter()
                .map(Value::from)
                .collect(),
        ),
        DType::F32 => (
            "float32",
            "<f4",
            a.to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|x| Value::from(format!("{:#010x}", x.to_bits())))
                .collect(),
        ),
        DType::F64 => (
            "float64",
            "<f8",
            a.to_vec::<f64>()
                .unwrap()
                .iter()
                .map(|x| Value::from(format!("{:#018x}", x.to_bits())))
                .collect(),
        ),
    };
    json!({"name": name, "dtype": dtype, "stored": stored, "shape": a.shape(), "fortran": false, "values": values})
}

const SHAPES: &[&[usize]] = &[&[], &[0], &[3, 0, 2], &[1], &[14], &[2, 7], &[2, 3, 4]];

fn checker() -> PathBuf {
    fixture_dir().join("check_kiln_files.py")
}

/// Runs the checker on `dir/manifest.json`; panics with its output unless it passes.
fn run_checker(dir: &Path) {
    let out = Command::new("python3")
        .arg(checker())
        .arg(dir.join("manifest.json"))
        .output()
        .expect("running python3");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "check_kiln_files.py failed:\n{text}");
    eprintln!("{}", text.trim());
}

#[test]
fn numpy_reads_every_file_kiln_writes() {
    if !python_with_numpy() {
        return;
    }
    let dir = temp_dir("files");
    let mut files = Vec::new();
    let mut named: Vec<(String, Array)> = Vec::new();
    for (d, dtype) in DTYPES.into_iter().enumerate() {
        for (s, shape) in SHAPES.iter().enumerate() {
            let a = sample(dtype, shape, (d * 16 + s) as u64);
            let file = format!("{dtype:?}_{s}.npy");
            kiln_io::write_npy(dir.join(&file), &a).unwrap();
            files.push(
                json!({"file": file, "format": "npy", "error": null, "arrays": [describe("", &a)]}),
            );
            named.push((format!("{dtype:?}_{s}"), a));
        }
        // A transposed view and a lazy result: written in C order.
        let t = sample(dtype, &[3, 5], d as u64).transpose();
        let file = format!("{dtype:?}_transposed.npy");
        kiln_io::write_npy(dir.join(&file), &t).unwrap();
        files.push(
            json!({"file": file, "format": "npy", "error": null, "arrays": [describe("", &t)]}),
        );
    }
    let lazy = &sample(DType::F64, &[4, 4], 3) * 0.5;
    kiln_io::write_npy(dir.join("lazy.npy"), &lazy).unwrap();
    files.push(json!({"file": "lazy.npy", "format": "npy", "error": null, "arrays": [describe("", &lazy)]}));

    named.push(("layer.0.weight".into(), sample(DType::F32, &[2, 3], 77)));
    let refs: Vec<(&str, &Array)> = named.iter().map(|(n, a)| (n.as_str(), a)).collect();
    let arrays: Vec<Value> = named.iter().map(|(n, a)| describe(n, a)).collect();
    kiln_io::write_npz(dir.join("stored.npz"), &refs).unwrap();
    kiln_io::write_npz_compressed(dir.join("compressed.npz"), &refs).unwrap();
    for file in ["stored.npz", "compressed.npz"] {
        files.push(json!({"file": file, "format": "npz", "error": null, "arrays": arrays}));
    }
    let metadata = [
        ("format", "pt"),
        ("step", "40"),
        ("note", "ünïcode ✓ \"q\""),
    ];
    kiln_io::write_safetensors(dir.join("all.safetensors"), &refs, &metadata).unwrap();
    let meta: serde_json::Map<String, Value> = metadata
        .iter()
        .map(|(k, v)| (k.to_string(), Value::from(*v)))
        .collect();
    files.push(json!({"file": "all.safetensors", "format": "safetensors", "error": null, "metadata": meta, "arrays": arrays}));
    let one = sample(DType::I32, &[3], 5);
    std::fs::write(
        dir.join("bytes.safetensors"),
        kiln_io::safetensors_to_bytes(&[("x", &one)], &[]).unwrap(),
    )
    .unwrap();
    files.push(json!({"file": "bytes.safetensors", "format": "safetensors", "error": null, "metadata": {}, "arrays": [describe("x", &one)]}));

    let manifest = json!({ "files": files });
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec_pretty(&manifest).unwrap(),
    )
    .unwrap();
    run_checker(&dir);
}

/// The checker is not vacuous: one wrong bit in the manifest makes it fail.
#[test]
fn the_checker_catches_a_wrong_bit() {
    if !python_with_numpy() {
        return;
    }
    let dir = temp_dir("checker");
    let a = sample(DType::F32, &[14], 0);
    kiln_io::write_npy(dir.join("a.npy"), &a).unwrap();
    let mut spec = describe("", &a);
    spec["values"][9] = Value::from("0x7fc12344"); // the file holds 0x7fc12345
    let manifest =
        json!({"files": [{"file": "a.npy", "format": "npy", "error": null, "arrays": [spec]}]});
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec(&manifest).unwrap(),
    )
    .unwrap();
    let out = Command::new("python3")
        .arg(checker())
        .arg(dir.join("manifest.json"))
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the checker accepted a wrong bit pattern"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("0x7fc12344"));
}
