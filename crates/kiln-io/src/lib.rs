//! # kiln-io
//!
//! Reading and writing kiln arrays in the formats users hold:
//!
//! | format | read | write | module |
//! |---|---|---|---|
//! | numpy `.npy` | [`read_npy`], [`npy_from_bytes`] | [`write_npy`], [`npy_to_bytes`] | [`npy`] |
//! | numpy `.npz` (`savez`, `savez_compressed`) | [`read_npz`], [`npz_from_bytes`] | [`write_npz`], [`write_npz_compressed`] | [`npz`] |
//! | safetensors | [`read_safetensors`] (memory-mapped), [`safetensors_from_bytes`] | [`write_safetensors`], [`safetensors_to_bytes`] | [`safetensors`] |
//! | PyTorch `torch.save` (`.pth`, `.pt`) | [`read_pth`], [`pth_from_bytes`] | — | [`pth`] |
//! | Python pickles (protocols 2–5) | [`pickle::loads`] | — | [`pickle`] |
//!
//! kiln holds five dtypes (`bool i32 i64 f32 f64`); a file's narrower types are **widened**
//! on read to the nearest one that holds every value exactly: `i1 i2 u1 u2` → `int32`,
//! `u4` → `int64`, `f2` and `bf16` → `float32`; `u8` → `int64` when every value fits (an
//! error naming the first one that does not, otherwise). Writing uses the array's own dtype.
//!
//! ```
//! use kiln::Array;
//! let dir = std::env::temp_dir().join(format!("kiln-io-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let a = Array::arange(0.0, 6.0, 1.0, kiln::DType::F32)?.reshape(&[2, 3]);
//! kiln_io::write_npy(dir.join("a.npy"), &a)?;
//! let b = kiln_io::read_npy(dir.join("a.npy"))?;
//! assert_eq!(b.to_vec::<f32>()?, a.to_vec::<f32>()?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every parser treats its input as hostile: sizes are checked before anything is allocated,
//! every inflate is bounded by the size the archive declares, and every failure is an
//! [`Error`] naming the file (and the tensor or member), never a panic.
//!
//! Depends on kiln's public API and the format crates (`npyz`, `py_literal`, `zip`,
//! `safetensors`, `memmap2`, `half`, `bytemuck`, `serde_json`).

pub mod npy;
pub mod npz;
pub mod pickle;
pub mod pth;
pub mod safetensors;

mod archive;
mod elements;

pub use npy::{npy_from_bytes, npy_to_bytes, read_npy, write_npy};
pub use npz::{npz_from_bytes, read_npz, write_npz, write_npz_compressed};
pub use pth::{pth_from_bytes, read_pth, Tensor, TensorData};
pub use safetensors::{
    read_safetensors, safetensors_from_bytes, safetensors_to_bytes, write_safetensors, SafeTensors,
};

/// Errors of reading and writing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A kiln operation failed (evaluating an array to write it, building one read).
    #[error(transparent)]
    Kiln(#[from] kiln::Error),
    /// The file could not be opened, read or written.
    #[error("{op}: {path}: {source}")]
    Io {
        /// The operation the user called (`read_npy`, ...).
        op: &'static str,
        /// The file.
        path: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The bytes are not a valid file of the format (a bad header, a truncated file, a
    /// duplicate name).
    #[error("{op}: {path}{}: {message}", item.as_ref().map(|t| format!(": {t}")).unwrap_or_default())]
    Format {
        /// The operation the user called.
        op: &'static str,
        /// The file.
        path: String,
        /// The tensor or archive member, where one is at fault.
        item: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// A valid file holding something kiln cannot represent (a complex or string dtype, an
    /// object array), or arguments that cannot be written.
    #[error("{op}: {path}{}: {message}; {hint}", item.as_ref().map(|t| format!(": {t}")).unwrap_or_default())]
    Unsupported {
        /// The operation the user called.
        op: &'static str,
        /// The file.
        path: String,
        /// The tensor or archive member.
        item: Option<String>,
        /// What cannot be represented.
        message: String,
        /// What to do instead.
        hint: String,
    },
    /// A pickle (a PyTorch checkpoint's `data.pkl`, a pickled vocabulary) that cannot be read.
    #[error("{path}: {source}")]
    Pickle {
        /// The file (and the member of the archive, for a checkpoint).
        path: String,
        /// What is wrong, with the opcode and its offset.
        source: pickle::PickleError,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where a failure happened: the operation, the file, and the member or tensor.
#[derive(Clone, Debug)]
pub(crate) struct Ctx<'a> {
    pub op: &'static str,
    pub path: &'a str,
    pub item: Option<&'a str>,
}

impl<'a> Ctx<'a> {
    pub fn new(op: &'static str, path: &'a str) -> Ctx<'a> {
        Ctx {
            op,
            path,
            item: None,
        }
    }

    /// The same context, at `item`.
    pub fn at(&self, item: &'a str) -> Ctx<'a> {
        Ctx {
            item: Some(item),
            ..self.clone()
        }
    }

    /// A [`Error::Format`] here.
    pub fn format(&self, message: impl Into<String>) -> Error {
        Error::Format {
            op: self.op,
            path: self.path.to_string(),
            item: self.item.map(str::to_string),
            message: message.into(),
        }
    }

    /// A [`Error::Unsupported`] here.
    pub fn unsupported(&self, message: impl Into<String>, hint: impl Into<String>) -> Error {
        Error::Unsupported {
            op: self.op,
            path: self.path.to_string(),
            item: self.item.map(str::to_string),
            message: message.into(),
            hint: hint.into(),
        }
    }

    /// A [`Error::Io`] here.
    pub fn io(&self, source: std::io::Error) -> Error {
        Error::Io {
            op: self.op,
            path: self.path.to_string(),
            source,
        }
    }
}

/// Writes `path` atomically: `write` fills a temporary file next to it, which is flushed to
/// disk (`fsync`) and renamed over `path`, so a failure never leaves a partial file and an
/// existing file stays intact until the new one is complete.
pub(crate) fn write_atomic(
    cx: &Ctx<'_>,
    path: &std::path::Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> Result<()>,
) -> Result<()> {
    use std::io::Write;
    let name = path
        .file_name()
        .ok_or_else(|| cx.unsupported("not a file name", "give the path of a file"))?;
    // A name of its own per call (process id and a counter), created exclusively: two saves
    // of one path at once, from threads or processes, never share a temporary file.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp-{}-{call}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| cx.io(e))?;
    let result = (|| {
        let mut w = std::io::BufWriter::new(file);
        write(&mut w)?;
        w.flush().map_err(|e| cx.io(e))?;
        let file = w.into_inner().map_err(|e| cx.io(e.into_error()))?;
        file.sync_all().map_err(|e| cx.io(e))?;
        std::fs::rename(&tmp, path).map_err(|e| cx.io(e))?;
        // The rename itself reaches the disk with the directory (best effort: not every
        // platform can open a directory).
        if let Some(dir) = path.parent().and_then(|d| std::fs::File::open(d).ok()) {
            let _ = dir.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
