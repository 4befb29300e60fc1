//! Saving and loading parameters in the safetensors format (readable by PyTorch, JAX and the
//! Hugging Face tooling).
//! Loading assigns nothing unless every parameter fits; saving checks names and evaluates
//! every value before it writes, into a temporary file renamed over the target.
//! Depends on the crate root and the `safetensors` crate.

use crate::{describe, Error, Parameter, Result};
use kiln::{Array, DType};
use safetensors::{tensor::TensorView, Dtype, SafeTensors};

fn to_st(d: DType) -> Dtype {
    match d {
        DType::Bool => Dtype::BOOL,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
    }
}

fn bytes_of(a: &Array) -> Result<Vec<u8>> {
    Ok(match a.dtype() {
        DType::Bool => a.to_vec::<bool>()?.into_iter().map(u8::from).collect(),
        DType::I32 => a
            .to_vec::<i32>()?
            .into_iter()
            .flat_map(i32::to_le_bytes)
            .collect(),
        DType::I64 => a
            .to_vec::<i64>()?
            .into_iter()
            .flat_map(i64::to_le_bytes)
            .collect(),
        DType::F32 => a
            .to_vec::<f32>()?
            .into_iter()
            .flat_map(f32::to_le_bytes)
            .collect(),
        DType::F64 => a
            .to_vec::<f64>()?
            .into_iter()
            .flat_map(f64::to_le_bytes)
            .collect(),
    })
}

fn from_bytes(d: DType, b: &[u8], shape: &[usize]) -> Result<Array> {
    fn chunks<const N: usize, T>(b: &[u8], f: fn([u8; N]) -> T) -> Vec<T> {
        b.chunks_exact(N)
            .map(|c| f(c.try_into().expect("exact chunk")))
            .collect()
    }
    Ok(match d {
        DType::Bool => Array::from_vec(b.iter().map(|&x| x != 0).collect::<Vec<bool>>(), shape)?,
        DType::I32 => Array::from_vec(chunks(b, i32::from_le_bytes), shape)?,
        DType::I64 => Array::from_vec(chunks(b, i64::from_le_bytes), shape)?,
        DType::F32 => Array::from_vec(chunks(b, f32::from_le_bytes), shape)?,
        DType::F64 => Array::from_vec(chunks(b, f64::from_le_bytes), shape)?,
    })
}

/// Writes the parameters' current values to `path` (tensor names are parameter names).
///
/// Nothing is written unless every value evaluates and every name is fit for a safetensors
/// key: distinct, not empty and not `__metadata__` (the format's reserved key).
/// The file is written next to `path` under a temporary name and renamed over it, so a
/// failure never leaves a partial file, and an existing checkpoint stays intact until the new
/// one is complete.
///
/// ```
/// use kiln_optim::{load_safetensors, save_safetensors, Parameter};
/// let dir = std::env::temp_dir().join(format!("kiln-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("w.safetensors");
/// let w = Parameter::new("w", kiln::Array::from_vec(vec![1.5f32, -2.0], &[2])?);
/// save_safetensors(&path, &[&w])?;
/// let fresh = Parameter::new("w", kiln::Array::zeros(&[2], kiln::DType::F32));
/// load_safetensors(&path, &[&fresh])?;
/// assert_eq!(fresh.value().to_vec::<f32>()?, vec![1.5, -2.0]);
/// let twin = Parameter::new("w", kiln::Array::zeros(&[2], kiln::DType::F32));
/// assert!(save_safetensors(&path, &[&w, &twin]).is_err()); // two tensors named "w"
/// # Ok::<(), kiln_optim::Error>(())
/// ```
pub fn save_safetensors(path: impl AsRef<std::path::Path>, params: &[&Parameter]) -> Result<()> {
    const OP: &str = "save_safetensors";
    let path = path.as_ref();
    let shown = path.display().to_string();
    check_names(OP, &shown, params)?;
    let values: Vec<Array> = params.iter().map(|p| p.value()).collect();
    let refs: Vec<&Array> = values.iter().collect();
    if let Err(source) = kiln::eval(&refs) {
        let labelled: Vec<(String, &Array)> = params
            .iter()
            .zip(&values)
            .map(|(p, v)| (format!("the value of parameter {:?}", p.name()), v))
            .collect();
        return Err(Error::Eval {
            op: OP,
            what: crate::failing(&labelled)
                .unwrap_or_else(|| format!("the values of {} parameters", params.len())),
            unchanged: format!("nothing was written to {shown}"),
            source: Box::new(source),
        });
    }
    let data: Vec<Vec<u8>> = values.iter().map(bytes_of).collect::<Result<_>>()?;
    let views: Vec<(String, TensorView<'_>)> = params
        .iter()
        .zip(&data)
        .map(|(p, b)| {
            TensorView::new(to_st(p.dtype()), p.shape().to_vec(), b)
                .map(|v| (p.name().to_string(), v))
                .map_err(|e| Error::Invalid {
                    op: OP,
                    message: format!(
                        "cannot encode parameter {:?} ({}) for {shown}: {e}; nothing was written",
                        p.name(),
                        describe(p.dtype(), p.shape())
                    ),
                })
        })
        .collect::<Result<_>>()?;
    let bytes = safetensors::serialize(views, &None).map_err(|e| Error::Invalid {
        op: OP,
        message: format!("cannot encode the checkpoint {shown}: {e}; nothing was written"),
    })?;
    write_whole(OP, path, &bytes)
}

/// Checks that every name can be a safetensors key: distinct (the format holds one tensor
/// per name, and the `safetensors` crate panics on a repeat), not empty, not `__metadata__`.
fn check_names(op: &'static str, shown: &str, params: &[&Parameter]) -> Result<()> {
    let mut seen: std::collections::HashMap<&str, usize> =
        std::collections::HashMap::with_capacity(params.len());
    for (i, p) in params.iter().enumerate() {
        let name = p.name();
        let unusable = match name {
            "" => Some("an empty name identifies no tensor"),
            "__metadata__" => Some("safetensors reserves it for the file's metadata"),
            _ => None,
        };
        if let Some(why) = unusable {
            return Err(Error::Invalid {
                op,
                message: format!(
                    "parameter #{i} ({}) is named {name:?}, which cannot be a tensor name \
                     ({why}): rename it; nothing was written to {shown}",
                    describe(p.dtype(), p.shape())
                ),
            });
        }
        if let Some(first) = seen.insert(name, i) {
            return Err(Error::Duplicate {
                op,
                name: name.to_string(),
                first,
                second: i,
                context: format!(
                    " ({shown} would hold only one of them, so nothing was written to it)"
                ),
            });
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` whole or not at all: into a temporary file in the same directory,
/// flushed, then renamed over `path` (a rename within one directory is atomic on POSIX
/// systems). On error the temporary file is removed.
fn write_whole(op: &'static str, path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let shown = path.display().to_string();
    let Some(file_name) = path.file_name() else {
        return Err(Error::Invalid {
            op,
            message: format!(
                "{shown:?} names no file: pass a path that ends in a file name, such as \
                 model.safetensors"
            ),
        });
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(
        ".{}-{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = dir.join(tmp_name);
    let io = |source| Error::Io {
        op,
        path: shown.clone(),
        source,
    };
    // create_new: never truncate a file this call did not create
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(io)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    drop(file);
    written
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|source| {
            let _ = std::fs::remove_file(&tmp);
            io(source)
        })
}

/// Reads every tensor of a safetensors file, in the file's order (for loaders that infer a
/// model's sizes from its tensors before creating its parameters). Tensors of dtypes kiln
/// lacks (f16, bf16, u8, …) are an error naming the tensor.
///
/// ```
/// use kiln_optim::{read_safetensors, save_safetensors, Parameter};
/// let path = std::env::temp_dir().join(format!("kiln-doc-read-{}.safetensors", std::process::id()));
/// let w = Parameter::new("w", kiln::Array::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?);
/// save_safetensors(&path, &[&w])?;
/// let all = read_safetensors(&path)?;
/// assert_eq!(all[0].0, "w");
/// assert_eq!(all[0].1.to_vec::<f32>()?, vec![1.0, 2.0, 3.0]);
/// # Ok::<(), kiln_optim::Error>(())
/// ```
pub fn read_safetensors(path: impl AsRef<std::path::Path>) -> Result<Vec<(String, Array)>> {
    const OP: &str = "read_safetensors";
    let (shown, bytes) = read_file(OP, path.as_ref())?;
    let st = parse(OP, &shown, &bytes)?;
    let mut out = Vec::new();
    for (name, t) in st.iter() {
        let dtype = from_st(t.dtype()).ok_or_else(|| Error::Format {
            op: OP,
            path: shown.clone(),
            message: format!(
                "tensor {name:?} has dtype {:?}; kiln reads bool, i32, i64, f32 and f64",
                t.dtype()
            ),
        })?;
        out.push((name.to_string(), from_bytes(dtype, t.data(), t.shape())?));
    }
    // `iter` follows the header's (hashed) order; the file's data offsets give its real order.
    let offsets: std::collections::HashMap<String, usize> = st
        .iter()
        .map(|(n, t)| (n.to_string(), t.data().as_ptr() as usize))
        .collect();
    out.sort_by_key(|(n, _)| offsets.get(n).copied().unwrap_or(usize::MAX));
    Ok(out)
}

/// A file's bytes and its path as shown in messages.
fn read_file(op: &'static str, path: &std::path::Path) -> Result<(String, Vec<u8>)> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        op,
        path: shown.clone(),
        source,
    })?;
    Ok((shown, bytes))
}

/// The safetensors header and tensor views of `bytes`.
fn parse<'a>(op: &'static str, shown: &str, bytes: &'a [u8]) -> Result<SafeTensors<'a>> {
    SafeTensors::deserialize(bytes).map_err(|e| Error::Format {
        op,
        path: shown.to_string(),
        message: e.to_string(),
    })
}

fn from_st(d: Dtype) -> Option<DType> {
    match d {
        Dtype::BOOL => Some(DType::Bool),
        Dtype::I32 => Some(DType::I32),
        Dtype::I64 => Some(DType::I64),
        Dtype::F32 => Some(DType::F32),
        Dtype::F64 => Some(DType::F64),
        _ => None,
    }
}

/// Reads `path` and assigns every parameter the tensor of its name. Nothing is assigned
/// unless every parameter is found with the right dtype and shape.
///
/// ```
/// let p = kiln_optim::Parameter::new("w", kiln::Array::zeros(&[2], kiln::DType::F32));
/// let e = kiln_optim::load_safetensors("/nonexistent.safetensors", &[&p]).unwrap_err();
/// assert!(e.to_string().contains("/nonexistent.safetensors"));
/// ```
pub fn load_safetensors(path: impl AsRef<std::path::Path>, params: &[&Parameter]) -> Result<()> {
    const OP: &str = "load_safetensors";
    let (shown, bytes) = read_file(OP, path.as_ref())?;
    let st = parse(OP, &shown, &bytes)?;
    let mut loaded = Vec::with_capacity(params.len());
    for p in params {
        let t = st.tensor(p.name()).map_err(|_| Error::Missing {
            path: shown.clone(),
            name: p.name().to_string(),
            available: {
                let mut n: Vec<String> = st.names().into_iter().cloned().collect();
                n.sort();
                n
            },
        })?;
        let dtype = from_st(t.dtype());
        if dtype != Some(p.dtype()) || t.shape() != p.shape() {
            return Err(Error::Mismatch {
                op: OP,
                name: p.name().to_string(),
                expected: describe(p.dtype(), p.shape()),
                found: format!("{:?} {:?}", t.dtype(), t.shape()),
                hint: format!("the checkpoint {shown} was saved for a different model"),
            });
        }
        loaded.push(from_bytes(p.dtype(), t.data(), t.shape())?);
    }
    // the commit: every dtype and shape was checked above, so nothing below can fail
    for (p, v) in params.iter().zip(loaded) {
        p.replace(v);
    }
    Ok(())
}
