//! numpy's `.npy` format: one array, a small header (a Python dict literal with `descr`,
//! `fortran_order` and `shape`) and the raw elements.
//!
//! Reading checks everything before it allocates: the header's length is bounded
//! ([`MAX_HEADER`]), its nesting (3 levels) is bounded and escapes refused before the
//! literal parser sees it (that parser's time grows steeply with nesting), the shape's
//! element count and byte size are computed with overflow checks, and the data must be
//! exactly that many bytes. The elements are then read with one `read` into the buffer the
//! array owns (converted only where byte order or widening requires it). A Fortran-order
//! file is read as its storage, a row-major array of the reversed shape, and handed out as
//! the transposed view of it, so no element is copied.
//!
//! The element types come from the `npyz` crate's [`npyz::TypeStr`] (numpy's type strings,
//! `<f4`, `|b1`, `>i8`) and the header dict from `py_literal` (the Python literal parser
//! `npyz` uses). `npyz`'s own readers are not used: they decode element by element, and on a
//! 256 MiB `float32` file took 0.38–0.44 s against 0.14–0.17 s for one read into the typed
//! buffer and 0.44–0.58 s for `numpy.load` (AMD EPYC Zen 4, 2 cores, page cache warm); its
//! header reader also allocates the declared header length before reading and multiplies
//! the shape without overflow checks. Writing is the format's 64-byte-aligned header
//! followed by the elements in one write.
//!
//! Depends on the crate root, `crate::elements`, kiln's public API, `npyz` and `py_literal`.

use crate::elements::{self, FileType};
use crate::{Ctx, Result};
use kiln::Array;
use npyz::{Endianness, TypeChar, TypeStr};
use std::io::{Read, Write};
use std::path::Path;

/// The longest header accepted, in bytes (numpy writes a few hundred for any array kiln can
/// read; its own reader refuses more than 10,000 unless told otherwise).
pub const MAX_HEADER: usize = 1 << 16;

const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Reads the array in the `.npy` file at `path` (see the [crate docs](crate) for the dtypes
/// and how narrower ones are widened).
///
/// ```
/// let path = std::env::temp_dir().join(format!("kiln-read-npy-{}.npy", std::process::id()));
/// let a = kiln::Array::from_vec(vec![1i64, -2, 3], &[3])?;
/// kiln_io::write_npy(&path, &a)?;
/// assert_eq!(kiln_io::read_npy(&path)?.to_vec::<i64>()?, vec![1, -2, 3]);
/// # Ok::<(), kiln_io::Error>(())
/// ```
pub fn read_npy(path: impl AsRef<Path>) -> Result<Array> {
    let path = path.as_ref();
    let shown = path.display().to_string();
    let cx = Ctx::new("read_npy", &shown);
    let file = std::fs::File::open(path).map_err(|e| cx.io(e))?;
    let len = file.metadata().map_err(|e| cx.io(e))?.len();
    parse(
        &cx,
        &mut std::io::BufReader::with_capacity(1 << 16, file),
        len,
    )
}

/// Reads a `.npy` file held in memory.
///
/// ```
/// let a = kiln::Array::from_vec(vec![true, false], &[2])?;
/// let bytes = kiln_io::npy_to_bytes(&a)?;
/// assert_eq!(kiln_io::npy_from_bytes(&bytes)?.to_vec::<bool>()?, vec![true, false]);
/// assert!(kiln_io::npy_from_bytes(&bytes[..bytes.len() - 1]).is_err()); // truncated
/// # Ok::<(), kiln_io::Error>(())
/// ```
pub fn npy_from_bytes(bytes: &[u8]) -> Result<Array> {
    parse(
        &Ctx::new("npy_from_bytes", "<bytes>"),
        &mut &bytes[..],
        bytes.len() as u64,
    )
}

/// Parses a `.npy` stream of `len` bytes in all.
pub(crate) fn parse(cx: &Ctx<'_>, r: &mut impl Read, len: u64) -> Result<Array> {
    let (header, header_len) = read_header(cx, r)?;
    let (ty, big, fortran, shape) = interpret(cx, &header)?;
    let n = elements::numel(cx, &shape)?;
    let bytes = elements::byte_len(cx, n, ty)?;
    let expected = (header_len as u64).saturating_add(bytes as u64);
    if len != expected {
        return Err(cx.format(format!(
            "the header declares {bytes} data bytes ({} elements of shape {shape:?}), the file \
             holds {}",
            n,
            len.saturating_sub(header_len as u64)
        )));
    }
    if fortran && shape.len() > 1 {
        let reversed: Vec<usize> = shape.iter().rev().copied().collect();
        let axes: Vec<isize> = (0..shape.len() as isize).rev().collect();
        Ok(elements::read_array(cx, r, ty, big, &reversed)?.try_permute(&axes)?)
    } else {
        elements::read_array(cx, r, ty, big, &shape)
    }
}

/// The header text and the total length of preamble and header.
fn read_header(cx: &Ctx<'_>, r: &mut impl Read) -> Result<(String, usize)> {
    let eof = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => cx.format("truncated header"),
        _ => cx.io(e),
    };
    let mut pre = [0u8; 8];
    r.read_exact(&mut pre).map_err(eof)?;
    if &pre[..6] != MAGIC {
        return Err(cx.format("not a .npy file (no \\x93NUMPY magic)"));
    }
    let (major, minor) = (pre[6], pre[7]);
    let (hlen, pre_len) = match major {
        1 => {
            let mut b = [0u8; 2];
            r.read_exact(&mut b).map_err(eof)?;
            (u16::from_le_bytes(b) as usize, 10)
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            r.read_exact(&mut b).map_err(eof)?;
            (u32::from_le_bytes(b) as usize, 12)
        }
        _ => {
            return Err(cx.unsupported(
                format!("format version {major}.{minor}"),
                "versions 1.0, 2.0 and 3.0 are read; re-save with numpy.save",
            ))
        }
    };
    if hlen > MAX_HEADER {
        return Err(cx.format(format!(
            "a header of {hlen} bytes (at most {MAX_HEADER} are read)"
        )));
    }
    let mut text = vec![0u8; hlen];
    r.read_exact(&mut text).map_err(eof)?;
    let text = match major {
        3 => String::from_utf8(text).map_err(|_| cx.format("header is not UTF-8"))?,
        _ => {
            if !text.is_ascii() {
                return Err(cx.format("header is not ASCII (format 1.0/2.0)"));
            }
            String::from_utf8(text).expect("ASCII")
        }
    };
    Ok((text, pre_len + hlen))
}

/// Element type, big-endian, Fortran order and shape from the header dict.
fn interpret(cx: &Ctx<'_>, text: &str) -> Result<(FileType, bool, bool, Vec<usize>)> {
    use py_literal::Value;
    // An array's header is a dict holding a shape tuple: two levels. Escapes appear only in
    // the field names of structured dtypes, which kiln does not read.
    if nesting(text) > 3 {
        return Err(cx.format("header nested more than 3 deep (not an array header)"));
    }
    if text.contains('\\') {
        return Err(cx.format("header holds a backslash escape (not an array header)"));
    }
    let dict = match text.trim().parse::<Value>() {
        Ok(Value::Dict(d)) => d,
        Ok(_) => return Err(cx.format("header is not a Python dict")),
        Err(e) => return Err(cx.format(format!("header is not a Python literal ({e})"))),
    };
    let get = |key: &str| {
        let mut found = dict
            .iter()
            .filter(|(k, _)| matches!(k, Value::String(s) if s == key));
        match (found.next(), found.next()) {
            (Some((_, v)), None) => Ok(v),
            (None, _) => Err(cx.format(format!("header has no '{key}'"))),
            (Some(_), Some(_)) => Err(cx.format(format!("header has '{key}' twice"))),
        }
    };
    let fortran = match get("fortran_order")? {
        Value::Boolean(b) => *b,
        _ => return Err(cx.format("'fortran_order' is not True or False")),
    };
    let shape = match get("shape")? {
        Value::Tuple(dims) | Value::List(dims) => dims
            .iter()
            .map(|d| match d {
                Value::Integer(i) => i
                    .to_string()
                    .parse::<usize>()
                    .map_err(|_| cx.format(format!("dimension {i} is negative or too large"))),
                _ => Err(cx.format("a dimension of 'shape' is not an integer")),
            })
            .collect::<Result<Vec<usize>>>()?,
        _ => return Err(cx.format("'shape' is not a tuple")),
    };
    let descr = match get("descr")? {
        Value::String(s) => s,
        Value::List(_) => {
            return Err(cx.unsupported(
                "a structured (record) dtype",
                "save each field as its own array",
            ))
        }
        _ => return Err(cx.format("'descr' is not a type string")),
    };
    let (ty, big) = file_type(cx, descr)?;
    Ok((ty, big, fortran, shape))
}

/// The deepest nesting of brackets, counting every bracket, quoted or not (an array's
/// header has none inside its strings), so the literal parser, whose time grows steeply
/// with nesting, never sees a deep input.
fn nesting(text: &str) -> usize {
    let (mut depth, mut most) = (0usize, 0usize);
    for c in text.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                most = most.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    most
}

/// The file type and byte order of a numpy type string.
fn file_type(cx: &Ctx<'_>, descr: &str) -> Result<(FileType, bool)> {
    let bad = || {
        cx.format(format!(
            "'{}' is not a numpy type string",
            descr.escape_debug()
        ))
    };
    if !descr.is_ascii() || descr.len() > 32 {
        return Err(bad());
    }
    let ts: TypeStr = descr.parse().map_err(|_| bad())?;
    let big = match ts.endianness() {
        Endianness::Big => true,
        Endianness::Little => false,
        _ => cfg!(target_endian = "big"),
    };
    let ty = match (ts.type_char(), ts.size_field()) {
        (TypeChar::Bool, 1) => FileType::Bool,
        (TypeChar::Int, 1) => FileType::I8,
        (TypeChar::Int, 2) => FileType::I16,
        (TypeChar::Int, 4) => FileType::I32,
        (TypeChar::Int, 8) => FileType::I64,
        (TypeChar::Uint, 1) => FileType::U8,
        (TypeChar::Uint, 2) => FileType::U16,
        (TypeChar::Uint, 4) => FileType::U32,
        (TypeChar::Uint, 8) => FileType::U64,
        (TypeChar::Float, 2) => FileType::F16,
        (TypeChar::Float, 4) => FileType::F32,
        (TypeChar::Float, 8) => FileType::F64,
        _ => {
            return Err(cx.unsupported(
                format!("dtype '{descr}'"),
                "kiln holds bool, integers and float16/32/64 (widened to its five dtypes); \
                 convert with numpy's astype first",
            ))
        }
    };
    Ok((ty, big))
}

/// The `descr` kiln writes for a dtype (always little-endian, on any machine).
fn descr(ty: FileType) -> &'static str {
    match ty {
        FileType::Bool => "|b1",
        FileType::I32 => "<i4",
        FileType::I64 => "<i8",
        FileType::F32 => "<f4",
        FileType::F64 => "<f8",
        _ => unreachable!("kiln writes only its own dtypes"),
    }
}

/// Writes `a` (evaluated first) to `path` as a `.npy` file numpy reads with `numpy.load`,
/// atomically (a temporary file, flushed and renamed: an existing file stays intact until
/// the new one is complete).
///
/// ```
/// let path = std::env::temp_dir().join(format!("kiln-write-npy-{}.npy", std::process::id()));
/// let a = kiln::Array::eye(3, None, kiln::DType::F64);
/// kiln_io::write_npy(&path, &a)?;
/// assert_eq!(kiln_io::read_npy(&path)?.to_vec::<f64>()?, a.to_vec::<f64>()?);
/// # Ok::<(), kiln_io::Error>(())
/// ```
pub fn write_npy(path: impl AsRef<Path>, a: &Array) -> Result<()> {
    let path = path.as_ref();
    let shown = path.display().to_string();
    let cx = Ctx::new("write_npy", &shown);
    a.eval()?;
    crate::write_atomic(&cx, path, |w| write_to(&cx, w, a))
}

/// The bytes of a `.npy` file holding `a`.
///
/// ```
/// let bytes = kiln_io::npy_to_bytes(&kiln::Array::zeros(&[2, 2], kiln::DType::I32))?;
/// assert_eq!(&bytes[..6], b"\x93NUMPY");
/// assert_eq!(bytes.len(), 128 + 16); // a 128-byte header, then 4 elements of 4 bytes
/// # Ok::<(), kiln_io::Error>(())
/// ```
pub fn npy_to_bytes(a: &Array) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    write_to(&Ctx::new("npy_to_bytes", "<bytes>"), &mut out, a)?;
    Ok(out)
}

/// Writes header and elements of `a` to `w`.
pub(crate) fn write_to(cx: &Ctx<'_>, w: &mut impl Write, a: &Array) -> Result<()> {
    let shape = match a.shape() {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        descr(FileType::of(a.dtype()))
    );
    // Version 1.0 unless the header needs more than a u16 length; the total of preamble,
    // header and its final newline is a multiple of 64 (numpy's alignment).
    let (version, pre) = if dict.len() + 1 + 10 <= u16::MAX as usize {
        (1u8, 10)
    } else {
        (2, 12)
    };
    let padded = (pre + dict.len() + 1).div_ceil(64) * 64;
    let hlen = padded - pre;
    let mut head = Vec::with_capacity(padded);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&[version, 0]);
    match version {
        1 => head.extend_from_slice(&(hlen as u16).to_le_bytes()),
        _ => head.extend_from_slice(&(hlen as u32).to_le_bytes()),
    }
    head.extend_from_slice(dict.as_bytes());
    head.resize(padded - 1, b' ');
    head.push(b'\n');
    w.write_all(&head).map_err(|e| cx.io(e))?;
    elements::with_le_bytes(a, |b| w.write_all(b).map_err(|e| cx.io(e)))
}
