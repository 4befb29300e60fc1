//! Reading numpy `.npz` archives (a zip of `.npy` files), as the g2p-en checkpoint ships.
//! Stored (uncompressed) members are read directly; compressed members are reported as an
//! error naming the member. Little-endian `f4`, `f8`, `i4`, `i8` and `b1` arrays, C order.

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

/// The members of a zip archive: name → stored bytes.
fn zip_members<'a>(path: &str, b: &'a [u8]) -> Result<Vec<(String, &'a [u8])>> {
    // end of central directory: the last "PK\x05\x06"
    let eocd = (0..b.len().saturating_sub(21))
        .rev()
        .find(|&i| u32_at(b, i) == Some(0x0605_4b50));
    let eocd = eocd.ok_or_else(|| {
        bad(
            path,
            "not a zip archive (no end-of-central-directory record)",
        )
    })?;
    let count = u16_at(b, eocd + 10).ok_or_else(|| bad(path, "truncated"))? as usize;
    let mut at = u32_at(b, eocd + 16).ok_or_else(|| bad(path, "truncated"))? as usize;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let field = |off: usize| {
            u32_at(b, at + off).ok_or_else(|| bad(path, "truncated central directory"))
        };
        if field(0)? != 0x0201_4b50 {
            return Err(bad(path, "corrupt central directory"));
        }
        let method = u16_at(b, at + 10).ok_or_else(|| bad(path, "truncated"))?;
        let size = field(20)? as usize;
        let name_len = u16_at(b, at + 28).ok_or_else(|| bad(path, "truncated"))? as usize;
        let extra_len = u16_at(b, at + 30).ok_or_else(|| bad(path, "truncated"))? as usize;
        let comment_len = u16_at(b, at + 32).ok_or_else(|| bad(path, "truncated"))? as usize;
        let local = field(42)? as usize;
        let name = String::from_utf8_lossy(
            b.get(at + 46..at + 46 + name_len)
                .ok_or_else(|| bad(path, "truncated"))?,
        )
        .into_owned();
        if method != 0 {
            return Err(bad(path, format!("member {name} is compressed (method {method}); save it with numpy.savez, not savez_compressed")));
        }
        let lname =
            u16_at(b, local + 26).ok_or_else(|| bad(path, "truncated local header"))? as usize;
        let lextra =
            u16_at(b, local + 28).ok_or_else(|| bad(path, "truncated local header"))? as usize;
        let start = local + 30 + lname + lextra;
        let data = b
            .get(start..start + size)
            .ok_or_else(|| bad(path, format!("member {name} runs past the end")))?;
        out.push((name, data));
        at += 46 + name_len + extra_len + comment_len;
    }
    Ok(out)
}

/// Parses one `.npy` buffer into an array.
fn npy(path: &str, name: &str, b: &[u8]) -> Result<Array> {
    let err = |m: &str| bad(path, format!("{name}: {m}"));
    if b.get(..6) != Some(b"\x93NUMPY") {
        return Err(err("not a .npy array"));
    }
    let (hlen, hstart) = match b[6] {
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
    for (name, data) in zip_members(&shown, &bytes)? {
        let key = name.strip_suffix(".npy").unwrap_or(&name).to_string();
        out.insert(key.clone(), npy(&shown, &key, data)?);
    }
    Ok(out)
}
