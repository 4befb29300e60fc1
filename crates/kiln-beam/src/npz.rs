//! Reading numpy `.npz` archives (a zip of `.npy` files), as the g2p-en checkpoint ships.
//! The zip layer is [`crate::zip`] (stored and deflated members, so both `numpy.savez` and
//! `numpy.savez_compressed` files read). Little-endian `f4`, `f8`, `i4`, `i8` and `b1` arrays,
//! C order.

use crate::zip::ZipArchive;
use crate::{Error, Result};
use kiln::Array;
use std::collections::BTreeMap;

fn bad(path: &str, message: impl Into<String>) -> Error {
    Error::Invalid {
        op: "read_npz",
        message: format!("{path}: {}", message.into()),
    }
}

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(i..i + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?))
}

/// Parses one `.npy` buffer into an array.
fn npy(path: &str, name: &str, b: &[u8]) -> Result<Array> {
    let err = |m: &str| bad(path, format!("{name}: {m}"));
    if b.get(..6) != Some(b"\x93NUMPY") {
        return Err(err("not a .npy array"));
    }
    let (hlen, hstart) = match b.get(6).copied().ok_or_else(|| err("truncated"))? {
        1 => (u16_at(b, 8).ok_or_else(|| err("truncated"))? as usize, 10),
        _ => (u32_at(b, 8).ok_or_else(|| err("truncated"))? as usize, 12),
    };
    let header = std::str::from_utf8(
        b.get(hstart..hstart + hlen)
            .ok_or_else(|| err("truncated header"))?,
    )
    .map_err(|_| err("header is not text"))?;
    let value = |key: &str| -> Option<&str> {
        let i = header.find(&format!("'{key}'"))? + key.len() + 2;
        let rest = header[i..].trim_start().strip_prefix(':')?.trim_start();
        Some(rest)
    };
    let descr = value("descr")
        .and_then(|r| r.strip_prefix('\''))
        .and_then(|r| r.split('\'').next())
        .ok_or_else(|| err("no descr"))?;
    if value("fortran_order").is_some_and(|r| r.starts_with("True")) {
        return Err(err(
            "Fortran-order arrays are not supported; save with np.ascontiguousarray",
        ));
    }
    let shape_txt = value("shape")
        .and_then(|r| r.strip_prefix('('))
        .and_then(|r| r.split(')').next())
        .ok_or_else(|| err("no shape"))?;
    let shape: Vec<usize> = shape_txt
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| err("bad shape")))
        .collect::<Result<_>>()?;
    let data = &b[hstart + hlen..];
    let n: usize = shape.iter().product();
    fn le<const N: usize, T>(d: &[u8], n: usize, f: fn([u8; N]) -> T) -> Option<Vec<T>> {
        let d = d.get(..n * N)?;
        Some(
            d.chunks_exact(N)
                .map(|c| f(c.try_into().expect("chunk")))
                .collect(),
        )
    }
    let short = || err("data shorter than its shape");
    Ok(match descr {
        "<f4" => Array::from_vec(le(data, n, f32::from_le_bytes).ok_or_else(short)?, &shape)?,
        "<f8" => Array::from_vec(le(data, n, f64::from_le_bytes).ok_or_else(short)?, &shape)?,
        "<i4" => Array::from_vec(le(data, n, i32::from_le_bytes).ok_or_else(short)?, &shape)?,
        "<i8" => Array::from_vec(le(data, n, i64::from_le_bytes).ok_or_else(short)?, &shape)?,
        "|b1" => Array::from_vec(
            data.get(..n)
                .ok_or_else(short)?
                .iter()
                .map(|&x| x != 0)
                .collect::<Vec<bool>>(),
            &shape,
        )?,
        other => {
            return Err(err(&format!(
                "dtype {other} is not supported (f4, f8, i4, i8, b1 are)"
            )))
        }
    })
}

/// Reads every array of a `.npz` file, by name (without the `.npy` suffix).
///
/// ```
/// let e = kiln_beam::read_npz("/nonexistent.npz").unwrap_err();
/// assert!(e.to_string().contains("/nonexistent.npz"));
/// ```
pub fn read_npz(path: impl AsRef<std::path::Path>) -> Result<BTreeMap<String, Array>> {
    let shown = path.as_ref().display().to_string();
    let bytes = std::fs::read(path.as_ref()).map_err(|e| bad(&shown, e.to_string()))?;
    let mut out = BTreeMap::new();
    let zip = ZipArchive::parse("read_npz", &shown, &bytes)?;
    for m in &zip.members {
        let key = m.name.strip_suffix(".npy").unwrap_or(&m.name).to_string();
        let data = zip.read(m)?;
        out.insert(key.clone(), npy(&shown, &key, &data)?);
    }
    Ok(out)
}
