//! numpy's `.npz` archives: a zip of `.npy` members, stored (`numpy.savez`) or deflated
//! (`numpy.savez_compressed`). The archive layer is `crate::archive` (every inflate
//! bounded); each member is parsed by [`crate::npy`].
//!
//! Depends on the crate root, `crate::archive`, [`crate::npy`] and kiln's public API.

use crate::archive::{Archive, ArchiveWriter};
use crate::{npy, Ctx, Result};
use kiln::Array;
use std::collections::BTreeMap;
use std::path::Path;

/// Reads every array of the `.npz` archive at `path`, by name (a member `w.npy` is the
/// array `w`, as `numpy.load(path)["w"]`).
///
/// ```
/// let path = std::env::temp_dir().join(format!("kiln-read-npz-{}.npz", std::process::id()));
/// let w = kiln::Array::ones(&[2, 3], kiln::DType::F32);
/// let ids = kiln::Array::from_vec(vec![4i64, 2], &[2])?;
/// kiln_io::write_npz(&path, &[("w", &w), ("ids", &ids)])?;
/// let arrays = kiln_io::read_npz(&path)?;
/// assert_eq!(arrays["w"].shape(), &[2, 3]);
/// assert_eq!(arrays["ids"].to_vec::<i64>()?, vec![4, 2]);
/// # Ok::<(), kiln_io::Error>(())
/// ```
pub fn read_npz(path: impl AsRef<Path>) -> Result<BTreeMap<String, Array>> {
    let path = path.as_ref();
    let shown = path.display().to_string();
    let cx = Ctx::new("read_npz", &shown);
    let bytes = std::fs::read(path).map_err(|e| cx.io(e))?;
    npz_from_bytes_in(&cx, &bytes)
}

/// Reads an `.npz` archive held in memory (see [`read_npz`]).
///
/// ```
/// assert!(kiln_io::npz_from_bytes(b"PK\x05\x06 not really").is_err());
/// ```
pub fn npz_from_bytes(bytes: &[u8]) -> Result<BTreeMap<String, Array>> {
    npz_from_bytes_in(&Ctx::new("npz_from_bytes", "<bytes>"), bytes)
}

fn npz_from_bytes_in(cx: &Ctx<'_>, bytes: &[u8]) -> Result<BTreeMap<String, Array>> {
    let mut zip = Archive::parse(cx, bytes)?;
    let mut out = BTreeMap::new();
    for member in zip.names(cx)? {
        let data = zip.read(cx, &member)?;
        let key = member.strip_suffix(".npy").unwrap_or(&member).to_string();
        let array = npy::parse(&cx.at(&member), &mut &data[..], data.len() as u64)?;
        if out.insert(key.clone(), array).is_some() {
            return Err(cx
                .at(&member)
                .format(format!("a second array named '{key}'")));
        }
    }
    Ok(out)
}

/// Writes named arrays to `path` as an `.npz` archive of stored members, as `numpy.savez`
/// does (`numpy.load(path)[name]` reads each back), atomically.
///
/// Names must be distinct and not empty; each array is evaluated first.
///
/// ```
/// let path = std::env::temp_dir().join(format!("kiln-write-npz-{}.npz", std::process::id()));
/// let a = kiln::Array::arange(0.0, 3.0, 1.0, kiln::DType::F64)?;
/// kiln_io::write_npz(&path, &[("a", &a)])?;
/// assert!(kiln_io::write_npz(&path, &[("a", &a), ("a", &a)]).is_err()); // names repeat
/// # Ok::<(), kiln_io::Error>(())
/// ```
pub fn write_npz(path: impl AsRef<Path>, arrays: &[(&str, &Array)]) -> Result<()> {
    write(
        Ctx::new("write_npz", &path.as_ref().display().to_string()),
        path.as_ref(),
        arrays,
        false,
    )
}

/// [`write_npz`] with deflated members, as `numpy.savez_compressed` writes.
///
/// ```
/// let path = std::env::temp_dir().join(format!("kiln-write-npzc-{}.npz", std::process::id()));
/// let z = kiln::Array::zeros(&[1000], kiln::DType::F32);
/// kiln_io::write_npz_compressed(&path, &[("z", &z)])?;
/// assert!(std::fs::metadata(&path).unwrap().len() < 1000);
/// # Ok::<(), kiln_io::Error>(())
/// ```
pub fn write_npz_compressed(path: impl AsRef<Path>, arrays: &[(&str, &Array)]) -> Result<()> {
    let shown = path.as_ref().display().to_string();
    write(
        Ctx::new("write_npz_compressed", &shown),
        path.as_ref(),
        arrays,
        true,
    )
}

fn write(cx: Ctx<'_>, path: &Path, arrays: &[(&str, &Array)], compress: bool) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for (name, _) in arrays {
        if name.is_empty() || !seen.insert(*name) {
            return Err(cx.at(name).unsupported(
                if name.is_empty() {
                    "an empty name"
                } else {
                    "a name given twice"
                },
                "give every array a distinct, non-empty name",
            ));
        }
    }
    let values: Vec<&Array> = arrays.iter().map(|(_, a)| *a).collect();
    kiln::eval(&values)?;
    crate::write_atomic(&cx, path, |w| {
        let mut zip = ArchiveWriter::new(w, compress);
        for (name, a) in arrays {
            let bytes = npy::npy_to_bytes(a)?;
            zip.add(&cx, &format!("{name}.npy"), &bytes)?;
        }
        zip.finish(&cx)?;
        Ok(())
    })
}
