//! Element types as files store them, and their conversion to and from kiln's five dtypes:
//! reading a file's elements (any byte order, narrower types widened) straight into the typed
//! buffer an [`Array`] will own, and an array's elements as little-endian bytes for writing.
//!
//! Depends on the crate root (`crate::Ctx`), kiln's public API and `bytemuck` / `half`.

use crate::{Ctx, Result};
use kiln::{Array, DType, Element};
use std::io::Read;

/// An element type a file may hold, before widening to a kiln dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FileType {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    BF16,
    F32,
    F64,
}

impl FileType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            FileType::Bool | FileType::I8 | FileType::U8 => 1,
            FileType::I16 | FileType::U16 | FileType::F16 | FileType::BF16 => 2,
            FileType::I32 | FileType::U32 | FileType::F32 => 4,
            FileType::I64 | FileType::U64 | FileType::F64 => 8,
        }
    }

    /// The file type kiln writes for a dtype.
    pub fn of(dtype: DType) -> FileType {
        match dtype {
            DType::Bool => FileType::Bool,
            DType::I32 => FileType::I32,
            DType::I64 => FileType::I64,
            DType::F32 => FileType::F32,
            DType::F64 => FileType::F64,
        }
    }
}

/// `n` elements of `ty`, byte order `big_endian`, from `r` into an array of `shape`. The
/// elements are read straight into the buffer the array will own when the file's type is a
/// kiln dtype in the machine's byte order; otherwise the bytes are converted.
pub(crate) fn read_array(
    cx: &Ctx<'_>,
    r: &mut impl Read,
    ty: FileType,
    big_endian: bool,
    shape: &[usize],
) -> Result<Array> {
    let n = numel(cx, shape)?;
    let swap = big_endian != cfg!(target_endian = "big") && ty.size() > 1;
    let a = match ty {
        FileType::I32 if !swap => Array::from_vec(read_pod::<i32>(cx, r, n)?, shape)?,
        FileType::I64 if !swap => Array::from_vec(read_pod::<i64>(cx, r, n)?, shape)?,
        FileType::F32 if !swap => Array::from_vec(read_pod::<f32>(cx, r, n)?, shape)?,
        FileType::F64 if !swap => Array::from_vec(read_pod::<f64>(cx, r, n)?, shape)?,
        _ => {
            let mut raw = read_pod::<u8>(cx, r, n * ty.size())?;
            if swap {
                raw.chunks_exact_mut(ty.size()).for_each(<[u8]>::reverse);
            }
            convert(cx, ty, &raw, shape)?
        }
    };
    Ok(a)
}

/// Elements of `ty` in the machine's byte order, converted to an array of `shape`.
pub(crate) fn convert(cx: &Ctx<'_>, ty: FileType, raw: &[u8], shape: &[usize]) -> Result<Array> {
    fn map<const N: usize, T>(raw: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
        raw.chunks_exact(N)
            .map(|c| f(c.try_into().expect("chunk of N bytes")))
            .collect()
    }
    let a = match ty {
        FileType::Bool => {
            if let Some(i) = raw.iter().position(|&b| b > 1) {
                return Err(cx.format(format!(
                    "boolean element {i} is the byte {}, not 0 or 1",
                    raw[i]
                )));
            }
            Array::from_vec(raw.iter().map(|&b| b == 1).collect::<Vec<bool>>(), shape)?
        }
        FileType::I8 => Array::from_vec(map(raw, |b: [u8; 1]| i8::from_ne_bytes(b) as i32), shape)?,
        FileType::U8 => Array::from_vec(map(raw, |b: [u8; 1]| b[0] as i32), shape)?,
        FileType::I16 => Array::from_vec(map(raw, |b| i16::from_ne_bytes(b) as i32), shape)?,
        FileType::U16 => Array::from_vec(map(raw, |b| u16::from_ne_bytes(b) as i32), shape)?,
        FileType::I32 => Array::from_vec(map(raw, i32::from_ne_bytes), shape)?,
        FileType::U32 => Array::from_vec(map(raw, |b| u32::from_ne_bytes(b) as i64), shape)?,
        FileType::I64 => Array::from_vec(map(raw, i64::from_ne_bytes), shape)?,
        FileType::U64 => {
            let v: Vec<u64> = map(raw, u64::from_ne_bytes);
            if let Some(i) = v.iter().position(|&x| x > i64::MAX as u64) {
                return Err(cx.unsupported(
                    format!(
                        "uint64 element {i} is {}, past int64 (kiln has no unsigned dtype)",
                        v[i]
                    ),
                    "store it as float64, or as int64 if the values fit",
                ));
            }
            Array::from_vec(v.into_iter().map(|x| x as i64).collect::<Vec<i64>>(), shape)?
        }
        FileType::F16 => {
            Array::from_vec(map(raw, |b| half::f16::from_ne_bytes(b).to_f32()), shape)?
        }
        FileType::BF16 => {
            Array::from_vec(map(raw, |b| half::bf16::from_ne_bytes(b).to_f32()), shape)?
        }
        FileType::F32 => Array::from_vec(map(raw, f32::from_ne_bytes), shape)?,
        FileType::F64 => Array::from_vec(map(raw, f64::from_ne_bytes), shape)?,
    };
    Ok(a)
}

/// The element count of `shape`, refused when it overflows or passes kiln's limit.
pub(crate) fn numel(cx: &Ctx<'_>, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| n <= kiln::MAX_ELEMENTS)
        .ok_or_else(|| {
            cx.format(format!(
                "shape {shape:?} holds more elements than kiln can address"
            ))
        })
}

/// The byte count of `n` elements of `ty`, refused when it overflows.
pub(crate) fn byte_len(cx: &Ctx<'_>, n: usize, ty: FileType) -> Result<usize> {
    n.checked_mul(ty.size())
        .ok_or_else(|| cx.format(format!("{n} elements of {} bytes overflow", ty.size())))
}

/// Buffers from this many bytes up are allocated zeroed by the allocator (fresh pages, no
/// zeroing pass) after a fallible probe; smaller ones are reserved fallibly and zeroed.
/// (Probing smaller sizes would move glibc's dynamic mmap threshold, which stops at 32 MiB.)
const LARGE: usize = 64 << 20;

/// Reads exactly `n` elements of `T` (in the machine's byte order) into a new vector.
fn read_pod<T: bytemuck::Pod>(cx: &Ctx<'_>, r: &mut impl Read, n: usize) -> Result<Vec<T>> {
    let refused = || {
        cx.format(format!(
            "{n} elements of {} bytes cannot be allocated",
            std::mem::size_of::<T>()
        ))
    };
    let mut v: Vec<T> = Vec::new();
    if n.saturating_mul(std::mem::size_of::<T>()) >= LARGE {
        v.try_reserve_exact(n).map_err(|_| refused())?;
        drop(v);
        v = bytemuck::zeroed_vec(n);
    } else {
        v.try_reserve_exact(n).map_err(|_| refused())?;
        v.resize(n, T::zeroed());
    }
    r.read_exact(bytemuck::cast_slice_mut(&mut v))
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => cx.format(format!(
                "truncated: fewer than the {} data bytes the header declares",
                n * std::mem::size_of::<T>()
            )),
            _ => cx.io(e),
        })?;
    Ok(v)
}

/// Calls `f` with the array's evaluated elements as little-endian bytes (no copy on a
/// little-endian machine, except `bool`, written as bytes 0 and 1).
pub(crate) fn with_le_bytes<R>(a: &Array, f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R> {
    fn go<T: Element + bytemuck::Pod, R>(
        a: &Array,
        f: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<R> {
        let s = a.to_shared::<T>()?;
        if cfg!(target_endian = "little") {
            f(bytemuck::cast_slice(&s))
        } else {
            let mut b = bytemuck::cast_slice::<T, u8>(&s).to_vec();
            b.chunks_exact_mut(std::mem::size_of::<T>())
                .for_each(<[u8]>::reverse);
            f(&b)
        }
    }
    match a.dtype() {
        DType::Bool => {
            let s = a.to_shared::<bool>()?;
            let b: Vec<u8> = s.iter().map(|&x| u8::from(x)).collect();
            f(&b)
        }
        DType::I32 => go::<i32, R>(a, f),
        DType::I64 => go::<i64, R>(a, f),
        DType::F32 => go::<f32, R>(a, f),
        DType::F64 => go::<f64, R>(a, f),
    }
}
