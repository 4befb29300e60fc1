//! Saving and loading parameters in the safetensors format (readable by PyTorch, JAX and the
//! Hugging Face tooling). Depends on the crate root and the `safetensors` crate.

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
/// # Ok::<(), kiln_optim::Error>(())
/// ```
pub fn save_safetensors(path: impl AsRef<std::path::Path>, params: &[&Parameter]) -> Result<()> {
    let path = path.as_ref();
    let values: Vec<Array> = params.iter().map(|p| p.value()).collect();
    let refs: Vec<&Array> = values.iter().collect();
    kiln::eval(&refs)?;
    let data: Vec<Vec<u8>> = values.iter().map(bytes_of).collect::<Result<_>>()?;
    let views: Vec<(String, TensorView<'_>)> = params
        .iter()
        .zip(&data)
        .map(|(p, b)| {
            TensorView::new(to_st(p.dtype()), p.shape().to_vec(), b)
                .map(|v| (p.name().to_string(), v))
                .map_err(|e| Error::Format {
                    path: path.display().to_string(),
                    message: e.to_string(),
                })
        })
        .collect::<Result<_>>()?;
    let bytes = safetensors::serialize(views, &None).map_err(|e| Error::Format {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    std::fs::write(path, bytes).map_err(|source| Error::Io {
        op: "save_safetensors",
        path: path.display().to_string(),
        source,
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
    let (shown, bytes) = read_file("read_safetensors", path.as_ref())?;
    let st = parse(&shown, &bytes)?;
    let mut out = Vec::new();
    for (name, t) in st.iter() {
        let dtype = from_st(t.dtype()).ok_or_else(|| Error::Format {
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
fn parse<'a>(shown: &str, bytes: &'a [u8]) -> Result<SafeTensors<'a>> {
    SafeTensors::deserialize(bytes).map_err(|e| Error::Format {
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
    let (shown, bytes) = read_file("load_safetensors", path.as_ref())?;
    let st = parse(&shown, &bytes)?;
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
                op: "load_safetensors",
                name: p.name().to_string(),
                expected: describe(p.dtype(), p.shape()),
                found: format!("{:?} {:?}", t.dtype(), t.shape()),
                hint: format!("the checkpoint {shown} was saved for a different model"),
            });
        }
        loaded.push(from_bytes(p.dtype(), t.data(), t.shape())?);
    }
    for (p, v) in params.iter().zip(loaded) {
        p.assign(v)?;
    }
    Ok(())
}
