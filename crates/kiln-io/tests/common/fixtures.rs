//! The manifest of `tests/fixtures/io` (`manifest.json`, written by `gen_io_fixtures.py`:
//! each file's format, its arrays' dtypes, shapes and values as exact bit patterns, or the
//! error reading it must give) and the checks of what kiln read against it, bit for bit, so
//! the comparison trusts nothing of kiln's.
//!
//! Depends on `kiln_io`, kiln's public API and `serde_json`.

use super::fixture_dir;
use kiln::{Array, DType};
use kiln_io::Error;
use serde_json::Value;

/// The manifest's entries of `format` (`npy`, `npz`, `safetensors`).
pub fn manifest(format: &str) -> Vec<Value> {
    let path = fixture_dir().join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let m: Value = serde_json::from_str(&text).unwrap();
    m["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["format"] == format)
        .cloned()
        .collect()
}

/// The kiln dtype of the manifest's dtype name.
pub fn dtype_named(name: &str) -> DType {
    match name {
        "bool" => DType::Bool,
        "int32" => DType::I32,
        "int64" => DType::I64,
        "float32" => DType::F32,
        "float64" => DType::F64,
        other => panic!("manifest dtype {other}"),
    }
}

/// Every element as a bit pattern (bools 0/1), so NaN payloads and -0.0 compare exactly.
pub fn bits(a: &Array) -> Vec<u64> {
    match a.dtype() {
        DType::Bool => a
            .to_vec::<bool>()
            .unwrap()
            .into_iter()
            .map(u64::from)
            .collect(),
        DType::I32 => a
            .to_vec::<i32>()
            .unwrap()
            .into_iter()
            .map(|x| x as u32 as u64)
            .collect(),
        DType::I64 => a
            .to_vec::<i64>()
            .unwrap()
            .into_iter()
            .map(|x| x as u64)
            .collect(),
        DType::F32 => a
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(|x| x.to_bits() as u64)
            .collect(),
        DType::F64 => a
            .to_vec::<f64>()
            .unwrap()
            .into_iter()
            .map(f64::to_bits)
            .collect(),
    }
}

/// The manifest's values of the array `spec` (JSON booleans, integers, or hex bit patterns
/// of floats) as the bit patterns [`bits`] gives.
pub fn spec_bits(spec: &Value) -> Vec<u64> {
    let dtype = dtype_named(spec["dtype"].as_str().unwrap());
    spec["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| match dtype {
            DType::Bool => u64::from(v.as_bool().unwrap()),
            DType::I32 => v.as_i64().unwrap() as i32 as u32 as u64,
            DType::I64 => v.as_i64().unwrap() as u64,
            DType::F32 | DType::F64 => {
                let hex = v
                    .as_str()
                    .unwrap_or_else(|| panic!("{v} is not a hex string"));
                u64::from_str_radix(hex.trim_start_matches("0x"), 16).unwrap()
            }
        })
        .collect()
}

/// Checks `a` against the manifest's array `spec`: dtype, shape, and every element bit for
/// bit (in C order).
pub fn check_array(at: &str, a: &Array, spec: &Value) {
    assert_eq!(
        a.dtype(),
        dtype_named(spec["dtype"].as_str().unwrap()),
        "{at}: dtype"
    );
    let shape: Vec<usize> = spec["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(a.shape(), &shape[..], "{at}: shape");
    let (got, want) = (bits(a), spec_bits(spec));
    assert_eq!(got.len(), want.len(), "{at}: element count");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g, w,
            "{at}: element {i} (C order) has bits {g:#x}, the file holds {w:#x}"
        );
    }
}

/// Checks that `got` has the dtype, the shape and the bits of `want`.
pub fn check_same_array(at: &str, got: &Array, want: &Array) {
    assert_eq!(
        (got.dtype(), got.shape()),
        (want.dtype(), want.shape()),
        "{at}"
    );
    assert_eq!(bits(got), bits(want), "{at}");
}

/// The variant name of an error, as the manifest's `error` gives it.
pub fn variant(e: &Error) -> &'static str {
    match e {
        Error::Kiln(_) => "Kiln",
        Error::Io { .. } => "Io",
        Error::Format { .. } => "Format",
        Error::Unsupported { .. } => "Unsupported",
        Error::Pickle { .. } => "Pickle",
        _ => "other",
    }
}

/// Checks the failure the manifest's `entry` expects: its variant, the operation `op` and the
/// file `path` named in the message, and every string of the entry's `contains`.
pub fn check_error(at: &str, e: &Error, entry: &Value, op: &str, path: &str) {
    let shown = e.to_string();
    assert_eq!(
        variant(e),
        entry["error"].as_str().unwrap(),
        "{at}: {shown}"
    );
    assert!(
        shown.contains(op),
        "{at}: the message does not name {op}: {shown}"
    );
    assert!(
        shown.contains(path),
        "{at}: the message does not name {path}: {shown}"
    );
    for s in entry["contains"].as_array().unwrap() {
        let s = s.as_str().unwrap();
        assert!(
            shown.contains(s),
            "{at}: the message does not contain {s:?}: {shown}"
        );
    }
}
