//! The safetensors format: an 8-byte little-endian header length, a JSON header naming each
//! tensor's dtype, shape and byte range (plus an optional `__metadata__` map of strings), and
//! the tensors' bytes.
//!
//! [`read_safetensors`] maps the file into memory (`memmap2`) and hands out arrays that read
//! the mapped bytes themselves wherever the element type is a kiln dtype and the bytes are
//! aligned for it (what every writer following the format's 8-byte header padding produces
//! for tensors sorted by alignment, as the `safetensors` crate and Python package write
//! them): nothing is copied, and a tensor never read is never paged in. Other tensors
//! (`f16`, `bf16` and narrow integers, widened; `bool`, checked) are converted from the
//! mapping. [`safetensors_from_bytes`] reads a buffer in memory (copying the tensors).
//!
//! The header is checked here before the `safetensors` crate parses it, so that each error
//! names its tensor: duplicate names (which a JSON map would silently merge), unknown dtypes,
//! shapes whose size overflows, byte ranges that do not match the shape, overlap, leave gaps
//! or run past the file. Writing uses the crate's header types and its layout (tensors
//! sorted by descending alignment, then name; the header padded to 8 bytes; its keys sorted,
//! so equal input gives equal bytes) and streams
//! each tensor's bytes into a temporary file that is flushed and renamed over the target.
//!
//! Depends on the crate root, `crate::elements`, kiln's public API, `safetensors`,
//! `memmap2`, `bytemuck` and `serde_json`.

use crate::elements::{self, FileType};
use crate::{Ctx, Result};
use kiln::{Array, DType, Element, Foreign, Shared};
use safetensors::tensor::TensorInfo;
use safetensors::Dtype;
use std::collections::BTreeMap;
use std::io::Write;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

/// The longest header accepted, in bytes (the `safetensors` crate's own limit).
pub const MAX_HEADER: usize = 100_000_000;

/// The tensors of a safetensors file, in the order of their bytes in the file, and its
/// metadata.
///
/// ```
/// let path = std::env::temp_dir().join(format!("kiln-st-doc-{}.safetensors", std::process::id()));
/// let w = kiln::Array::ones(&[2, 2], kiln::DType::F32);
/// kiln_io::write_safetensors(&path, &[("w", &w)], &[("step", "40")])?;
/// let file = kiln_io::read_safetensors(&path)?;
/// assert_eq!(file.names().collect::<Vec<_>>(), ["w"]);
/// assert_eq!(file.metadata()["step"], "40");
/// assert_eq!(file["w"].to_vec::<f32>()?, vec![1.0; 4]);
/// # Ok::<(), kiln_io::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct SafeTensors {
    tensors: Vec<(String, Array)>,
    metadata: BTreeMap<String, String>,
}

impl SafeTensors {
    /// The tensor named `name`.
    pub fn get(&self, name: &str) -> Option<&Array> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    /// The tensors' names, in file order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|(n, _)| n.as_str())
    }

    /// The named tensors, in file order.
    pub fn tensors(&self) -> &[(String, Array)] {
        &self.tensors
    }

    /// The named tensors, moved out.
    pub fn into_tensors(self) -> Vec<(String, Array)> {
        self.tensors
    }

    /// The `__metadata__` map (empty when the file has none).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// True when the file holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}

impl std::ops::Index<&str> for SafeTensors {
    type Output = Array;
    /// The tensor named `name`; panics if there is none (use [`SafeTensors::get`]).
    fn index(&self, name: &str) -> &Array {
        match self.get(name) {
            Some(a) => a,
            None => panic!("no tensor named '{name}'"),
        }
    }
}

/// Reads the safetensors file at `path` through a memory map (see the [module docs](self)):
/// arrays of the file's own dtypes read the mapped bytes without a copy.
///
/// The mapping is private and read-only. As with any memory-mapped file, the file must not
/// be truncated or rewritten in place by another process while arrays read from it are alive
/// (writers that replace the file by renaming, as [`write_safetensors`] and the `safetensors`
/// package do, are safe).
///
/// ```
/// let path = std::env::temp_dir().join(format!("kiln-st-read-{}.safetensors", std::process::id()));
/// std::fs::write(&path, b"not a safetensors file").unwrap();
/// let e = kiln_io::read_safetensors(&path).unwrap_err();
/// assert!(e.to_string().contains("read_safetensors"), "{e}");
/// ```
pub fn read_safetensors(path: impl AsRef<Path>) -> Result<SafeTensors> {
    let path = path.as_ref();
    let shown = path.display().to_string();
    let cx = Ctx::new("read_safetensors", &shown);
    let file = std::fs::File::open(path).map_err(|e| cx.io(e))?;
    let len = file.metadata().map_err(|e| cx.io(e))?.len();
    if len < 8 {
        return Err(cx.format(format!(
            "{len} bytes, shorter than the 8-byte header length"
        )));
    }
    // SAFETY: the map is private and read-only, and kiln never writes through it. The one
    // hazard of a file mapping is another process truncating or rewriting the file while it
    // is mapped (a read could then fault or see new bytes); that is the documented contract
    // of this function, as of every memory-mapped reader (numpy's `mmap_mode`, the
    // `safetensors` package).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| cx.io(e))?;
    let map = Arc::new(map);
    parse(&cx, &map[..], Some(&map))
}

/// Reads a safetensors file held in memory (the tensors are copied out of `bytes`).
///
/// ```
/// let w = kiln::Array::from_vec(vec![1i32, 2, 3], &[3])?;
/// let bytes = kiln_io::safetensors_to_bytes(&[("w", &w)], &[])?;
/// let file = kiln_io::safetensors_from_bytes(&bytes)?;
/// assert_eq!(file["w"].to_vec::<i32>()?, vec![1, 2, 3]);
/// # Ok::<(), kiln_io::Error>(())
/// ```
pub fn safetensors_from_bytes(bytes: &[u8]) -> Result<SafeTensors> {
    parse(&Ctx::new("safetensors_from_bytes", "<bytes>"), bytes, None)
}

/// One tensor's header entry, before validation.
struct Entry {
    name: String,
    info: TensorInfo,
}

/// The header's entries in file order, with duplicate names refused.
fn header_entries(cx: &Ctx<'_>, json: &[u8]) -> Result<(Vec<Entry>, BTreeMap<String, String>)> {
    use serde::de::{Deserializer, MapAccess, Visitor};
    struct Header(Vec<(String, serde_json::Value)>);
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Header;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> std::result::Result<Header, A::Error> {
            let mut v = Vec::new();
            while let Some((k, x)) = m.next_entry::<String, serde_json::Value>()? {
                v.push((k, x));
            }
            Ok(Header(v))
        }
    }
    let mut de = serde_json::Deserializer::from_slice(json);
    let header = de
        .deserialize_map(V)
        .and_then(|h| de.end().map(|()| h))
        .map_err(|e| cx.format(format!("the header is not a JSON object ({e})")))?;
    let mut seen = std::collections::HashSet::new();
    let mut entries = Vec::new();
    let mut metadata = BTreeMap::new();
    for (name, value) in header.0 {
        if !seen.insert(name.clone()) {
            return Err(cx.at(&name).format("named twice in the header"));
        }
        if name == "__metadata__" {
            metadata = serde_json::from_value(value)
                .map_err(|e| cx.format(format!("__metadata__ is not a map of strings ({e})")))?;
            continue;
        }
        let info: TensorInfo = serde_json::from_value(value)
            .map_err(|e| cx.at(&name).format(format!("not a tensor entry ({e})")))?;
        entries.push(Entry { name, info });
    }
    Ok((entries, metadata))
}

/// Parses a whole file (`map` is the memory map `bytes` lies in, for zero-copy arrays).
fn parse(cx: &Ctx<'_>, bytes: &[u8], map: Option<&Arc<memmap2::Mmap>>) -> Result<SafeTensors> {
    let n = match bytes.get(..8) {
        Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
        None => return Err(cx.format("shorter than the 8-byte header length")),
    };
    if n > MAX_HEADER as u64 {
        return Err(cx.format(format!(
            "a header of {n} bytes (at most {MAX_HEADER} are read)"
        )));
    }
    let start = 8 + n as usize;
    let json = bytes.get(8..start).ok_or_else(|| {
        cx.format(format!(
            "truncated: the header declares {n} bytes, the file holds {}",
            bytes.len() - 8
        ))
    })?;
    let (mut entries, metadata) = header_entries(cx, json)?;
    entries.sort_by_key(|e| e.info.data_offsets);
    let data = &bytes[start..];
    let mut end = 0usize;
    let mut tensors = Vec::with_capacity(entries.len());
    for e in &entries {
        let cx = cx.at(&e.name);
        let ty = file_type(&cx, e.info.dtype)?;
        let count = elements::numel(&cx, &e.info.shape)?;
        let len = elements::byte_len(&cx, count, ty)?;
        let (lo, hi) = e.info.data_offsets;
        if lo != end {
            return Err(cx.format(format!(
                "its bytes start at offset {lo}, where the previous tensor ended at {end} \
                 (tensors must be contiguous)"
            )));
        }
        if hi.checked_sub(lo) != Some(len) {
            return Err(cx.format(format!(
                "byte range {lo}..{hi} for shape {:?} of {:?}, which needs {len} bytes",
                e.info.shape, e.info.dtype
            )));
        }
        if hi > data.len() {
            return Err(cx.format(format!(
                "truncated: its bytes end at {hi}, the data section holds {}",
                data.len()
            )));
        }
        end = hi;
        tensors.push((
            e.name.clone(),
            array(&cx, ty, &data[lo..hi], &e.info.shape, map)?,
        ));
    }
    if end != data.len() {
        return Err(cx.format(format!("{} bytes after the last tensor", data.len() - end)));
    }
    Ok(SafeTensors { tensors, metadata })
}

fn file_type(cx: &Ctx<'_>, d: Dtype) -> Result<FileType> {
    Ok(match d {
        Dtype::BOOL => FileType::Bool,
        Dtype::U8 => FileType::U8,
        Dtype::I8 => FileType::I8,
        Dtype::I16 => FileType::I16,
        Dtype::U16 => FileType::U16,
        Dtype::F16 => FileType::F16,
        Dtype::BF16 => FileType::BF16,
        Dtype::I32 => FileType::I32,
        Dtype::U32 => FileType::U32,
        Dtype::F32 => FileType::F32,
        Dtype::F64 => FileType::F64,
        Dtype::I64 => FileType::I64,
        Dtype::U64 => FileType::U64,
        other => {
            return Err(cx.unsupported(
                format!("dtype {other:?}"),
                "kiln reads bool, integers, F16, BF16, F32 and F64; convert the tensor first",
            ))
        }
    })
}

/// Mapped bytes read as elements of `T` (aligned and of the machine's byte order: checked
/// when made).
#[derive(Debug)]
struct Mapped<T> {
    map: Arc<memmap2::Mmap>,
    start: usize,
    end: usize,
    of: PhantomData<fn() -> T>,
}

impl<T: bytemuck::Pod + Send + Sync + std::fmt::Debug> Foreign<T> for Mapped<T> {
    fn elements(&self) -> &[T] {
        bytemuck::cast_slice(&self.map[self.start..self.end])
    }
}

/// The array of one tensor: the mapped bytes themselves when they can be, else converted.
fn array(
    cx: &Ctx<'_>,
    ty: FileType,
    bytes: &[u8],
    shape: &[usize],
    map: Option<&Arc<memmap2::Mmap>>,
) -> Result<Array> {
    fn mapped<T: Element + bytemuck::Pod>(
        map: &Arc<memmap2::Mmap>,
        bytes: &[u8],
        shape: &[usize],
    ) -> Option<Result<Array>> {
        bytemuck::try_cast_slice::<u8, T>(bytes).ok()?;
        let start = bytes.as_ptr() as usize - map.as_ptr() as usize;
        let m = Mapped::<T> {
            map: map.clone(),
            start,
            end: start + bytes.len(),
            of: PhantomData,
        };
        Some(Array::from_shared(Shared::Foreign(Arc::new(m)), shape).map_err(Into::into))
    }
    if let (Some(map), true) = (map, cfg!(target_endian = "little")) {
        let direct = match ty {
            FileType::I32 => mapped::<i32>(map, bytes, shape),
            FileType::I64 => mapped::<i64>(map, bytes, shape),
            FileType::F32 => mapped::<f32>(map, bytes, shape),
            FileType::F64 => mapped::<f64>(map, bytes, shape),
            _ => None,
        };
        if let Some(a) = direct {
            return a;
        }
    }
    let mut r = bytes;
    elements::read_array(cx, &mut r, ty, false, shape)
}

/// Writes named arrays (evaluated first) and a metadata map of strings to `path` in the
/// safetensors format, atomically (a temporary file next to `path`, flushed to disk and
/// renamed over it).
///
/// Names must be distinct, not empty and not `__metadata__` (the format's reserved key).
///
/// ```
/// let path = std::env::temp_dir().join(format!("kiln-st-write-{}.safetensors", std::process::id()));
/// let a = kiln::Array::from_vec(vec![true, false], &[2])?;
/// kiln_io::write_safetensors(&path, &[("mask", &a)], &[])?;
/// assert!(kiln_io::write_safetensors(&path, &[("", &a)], &[]).is_err());
/// assert_eq!(kiln_io::read_safetensors(&path)?["mask"].to_vec::<bool>()?, vec![true, false]);
/// # Ok::<(), kiln_io::Error>(())
/// ```
pub fn write_safetensors(
    path: impl AsRef<Path>,
    tensors: &[(&str, &Array)],
    metadata: &[(&str, &str)],
) -> Result<()> {
    let path = path.as_ref();
    let shown = path.display().to_string();
    let cx = Ctx::new("write_safetensors", &shown);
    let (header, order) = prepare(&cx, tensors, metadata)?;
    crate::write_atomic(&cx, path, |w| write_body(&cx, w, &header, &order))
}

/// The bytes of a safetensors file holding `tensors` and `metadata` (see
/// [`write_safetensors`]).
///
/// ```
/// let b = kiln_io::safetensors_to_bytes(&[("x", &kiln::Array::zeros(&[3], kiln::DType::F64))], &[])?;
/// let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
/// assert_eq!(b.len(), 8 + n + 24);
/// # Ok::<(), kiln_io::Error>(())
/// ```
pub fn safetensors_to_bytes(
    tensors: &[(&str, &Array)],
    metadata: &[(&str, &str)],
) -> Result<Vec<u8>> {
    let cx = Ctx::new("safetensors_to_bytes", "<bytes>");
    let (header, order) = prepare(&cx, tensors, metadata)?;
    let mut out = Vec::new();
    write_body(&cx, &mut out, &header, &order)?;
    Ok(out)
}

/// Checks names, evaluates, and builds the padded header; returns it with the arrays in
/// the order their bytes follow it.
fn prepare<'a>(
    cx: &Ctx<'_>,
    tensors: &[(&'a str, &'a Array)],
    metadata: &[(&str, &str)],
) -> Result<(Vec<u8>, Vec<&'a Array>)> {
    let mut seen = std::collections::HashSet::new();
    for (name, _) in tensors {
        let problem = if name.is_empty() {
            Some("an empty name")
        } else if *name == "__metadata__" {
            Some("the reserved name __metadata__")
        } else if !seen.insert(*name) {
            Some("a name given twice")
        } else {
            None
        };
        if let Some(p) = problem {
            return Err(cx
                .at(name)
                .unsupported(p, "give every tensor a distinct, non-empty name"));
        }
    }
    let mut meta_seen = std::collections::HashSet::new();
    for (k, _) in metadata {
        if !meta_seen.insert(*k) {
            return Err(cx.unsupported(
                format!("metadata key '{k}' given twice"),
                "give each metadata key once",
            ));
        }
    }
    let arrays: Vec<&Array> = tensors.iter().map(|(_, a)| *a).collect();
    kiln::eval(&arrays)?;
    let mut sorted: Vec<(&str, &Array)> = tensors.to_vec();
    sorted.sort_by(|(ln, la), (rn, ra)| {
        st_dtype(ra.dtype())
            .cmp(&st_dtype(la.dtype()))
            .then(ln.cmp(rn))
    });
    let mut offset = 0usize;
    let mut infos = Vec::with_capacity(sorted.len());
    for (name, a) in &sorted {
        let len = a.size() * a.dtype().size_bytes();
        infos.push((
            name.to_string(),
            TensorInfo {
                dtype: st_dtype(a.dtype()),
                shape: a.shape().to_vec(),
                data_offsets: (offset, offset + len),
            },
        ));
        offset += len;
    }
    // The header is a JSON object with sorted keys (`serde_json::Map` is ordered), so equal
    // input writes equal bytes.
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        let meta: BTreeMap<&str, &str> = metadata.iter().copied().collect();
        header.insert("__metadata__".into(), serde_json::json!(meta));
    }
    for (name, info) in infos {
        let entry = serde_json::to_value(&info).map_err(|e| {
            cx.at(&name)
                .format(format!("cannot build the header ({e})"))
        })?;
        header.insert(name, entry);
    }
    let mut padded = serde_json::to_vec(&header)
        .map_err(|e| cx.format(format!("cannot build the header ({e})")))?;
    padded.resize(padded.len().next_multiple_of(8), b' ');
    Ok((padded, sorted.into_iter().map(|(_, a)| a).collect()))
}

fn write_body(cx: &Ctx<'_>, w: &mut impl Write, header: &[u8], order: &[&Array]) -> Result<()> {
    w.write_all(&(header.len() as u64).to_le_bytes())
        .and_then(|()| w.write_all(header))
        .map_err(|e| cx.io(e))?;
    for a in order {
        elements::with_le_bytes(a, |b| w.write_all(b).map_err(|e| cx.io(e)))?;
    }
    Ok(())
}

fn st_dtype(d: DType) -> Dtype {
    match d {
        DType::Bool => Dtype::BOOL,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
    }
}
