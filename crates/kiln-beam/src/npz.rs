//! Reading numpy `.npz` archives (a zip of `.npy` files), as the g2p-en checkpoint ships.
//! The zip layer is [`crate::zip`] (stored and deflated members, so both `numpy.savez` and
//! `numpy.savez_compressed` files read). Little-endian `f4`, `f8`, `i4`, `i8` and `b1` arrays,
//! C order.
//!
//! A header's shape is checked before anything is allocated: its element count and byte size are computed with overflow checks, and the data must be exactly that many bytes.
//!
//! Depends on `crate::zip` and kiln's public API.

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
    let item = match descr {
        "<f4" | "<i4" => 4,
        "<f8" | "<i8" => 8,
        "|b1" => 1,
        other => {
            return Err(err(&format!(
                "dtype {other} is not supported (f4, f8, i4, i8, b1 are)"
            )))
        }
    };
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|n| n.checked_mul(item).is_some())
        .ok_or_else(|| {
            err(&format!(
                "shape {shape:?} of {descr} is too large to address"
            ))
        })?;
    let data = &b[hstart + hlen..];
    if data.len() != n * item {
        return Err(err(&format!(
            "data has {} bytes but shape {shape:?} of {descr} needs {}",
            data.len(),
            n * item
        )));
    }
    fn le<const N: usize, T>(d: &[u8], f: fn([u8; N]) -> T) -> Vec<T> {
        d.chunks_exact(N)
            .map(|c| {
                let mut a = [0; N];
                a.copy_from_slice(c);
                f(a)
            })
            .collect()
    }
    Ok(match descr {
        "<f4" => Array::from_vec(le(data, f32::from_le_bytes), &shape)?,
        "<f8" => Array::from_vec(le(data, f64::from_le_bytes), &shape)?,
        "<i4" => Array::from_vec(le(data, i32::from_le_bytes), &shape)?,
        "<i8" => Array::from_vec(le(data, i64::from_le_bytes), &shape)?,
        _ => Array::from_vec(data.iter().map(|&x| x != 0).collect::<Vec<bool>>(), &shape)?,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A version-1 `.npy` buffer with `header` and `data`.
    fn npy_bytes(header: &str, data: &[u8]) -> Vec<u8> {
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend((header.len() as u16).to_le_bytes());
        b.extend(header.as_bytes());
        b.extend(data);
        b
    }

    fn header(descr: &str, shape: &str) -> String {
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({shape}), }}")
    }

    #[test]
    fn reads_a_small_array() {
        let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let a = npy("t.npz", "w", &npy_bytes(&header("<f4", "2, 3"), &data)).unwrap();
        assert_eq!(a.shape(), [2, 3]);
        assert_eq!(a.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    }

    #[test]
    fn overflowing_shapes_are_errors_not_panics() {
        for (descr, shape) in [
            ("<f4", "1099511627776, 1099511627776"),
            ("<f8", "4611686018427387904, 4"),
            ("<f8", "2305843009213693952,"),
            ("|b1", "18446744073709551615, 2"),
        ] {
            let e = npy("t.npz", "w", &npy_bytes(&header(descr, shape), &[0; 8]))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("t.npz") && e.contains("w:") && e.contains("too large"),
                "{e}"
            );
        }
    }

    #[test]
    fn data_of_the_wrong_length_is_an_error() {
        for len in [20, 28] {
            let e = npy(
                "t.npz",
                "w",
                &npy_bytes(&header("<f4", "2, 3"), &vec![0; len]),
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.contains(&format!("has {len} bytes")) && e.contains("needs 24"),
                "{e}"
            );
        }
    }

    #[test]
    fn an_npz_with_a_huge_shape_is_an_error_naming_the_file_and_array() {
        let member = npy_bytes(&header("<f4", "1099511627776, 1099511627776"), &[]);
        let zip = crate::zip::build_zip(&[("huge.npy", 0, member.len() as u32, &member)], &member);
        let path = std::env::temp_dir().join(format!("kiln-beam-huge-{}.npz", std::process::id()));
        std::fs::write(&path, zip).unwrap();
        let e = read_npz(&path).unwrap_err().to_string();
        std::fs::remove_file(&path).unwrap();
        assert!(
            e.contains(&path.display().to_string())
                && e.contains("huge: shape")
                && e.contains("too large"),
            "{e}"
        );
    }
}
