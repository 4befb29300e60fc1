//! Reading PyTorch checkpoints (`torch.save` files, the zip format of PyTorch ≥ 1.6) into
//! named tensors that convert to [`kiln::Array`].
//!
//! A checkpoint is a zip (read with [`crate::zip`]) holding `PREFIX/data.pkl`, a pickle (read
//! with [`crate::pickle`]) of the saved object, and one member `PREFIX/data/KEY` per storage,
//! which the pickle names through persistent ids `("storage", torch.FloatStorage, KEY,
//! location, numel)`. Every tensor in the pickle is a call
//! `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, …)`; [`read_pth`] rebuilds
//! it from its storage honouring the element offset and the strides (a non-contiguous view is
//! copied into C order), in the archive's byte order (`PREFIX/byteorder`, little-endian when
//! absent). It walks dicts, `collections.OrderedDict`s, lists and tuples, so nested state
//! dicts (`{"model": state_dict, "optimizer": …}`) come out with dotted names
//! (`model.encoder.weight`); non-tensor values (a learning rate, a loss) are skipped.
//!
//! dtypes: kiln has `bool`, `i32`, `i64`, `f32` and `f64`; `float16` and `bfloat16` tensors
//! are widened to `f32`, `int8`, `uint8` and `int16` to `i32`, exactly. Complex, quantised and
//! sparse tensors, and the legacy (pre-1.6, non-zip) format, are errors naming the tensor.
//! Depends on `kiln` (public API), [`crate::zip`] and [`crate::pickle`].

use crate::pickle::{self, Value};
use crate::zip::ZipArchive;
use crate::{Error, Result};
use kiln::{Array, DType};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

/// The elements of a [`Tensor`], in C order.
///
/// ```
/// let d = kiln_beam::TensorData::I64(vec![1, 2]);
/// assert_eq!(d.len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    /// `float32` (and `float16`/`bfloat16`, widened).
    F32(Vec<f32>),
    /// `float64`.
    F64(Vec<f64>),
    /// `int32` (and `int16`/`int8`/`uint8`, widened).
    I32(Vec<i32>),
    /// `int64`.
    I64(Vec<i64>),
    /// `bool`.
    Bool(Vec<bool>),
}

impl TensorData {
    /// The number of elements.
    ///
    /// ```
    /// assert_eq!(kiln_beam::TensorData::Bool(vec![]).len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        match self {
            TensorData::F32(v) => v.len(),
            TensorData::F64(v) => v.len(),
            TensorData::I32(v) => v.len(),
            TensorData::I64(v) => v.len(),
            TensorData::Bool(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    ///
    /// ```
    /// assert!(kiln_beam::TensorData::F32(vec![]).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A tensor read from a checkpoint: its kiln dtype, shape and C-order data, and the dtype it
/// had in PyTorch.
///
/// ```
/// use kiln_beam::{Tensor, TensorData};
/// let t = Tensor { shape: vec![2], data: TensorData::F32(vec![1.0, 2.0]), torch_dtype: "float32" };
/// assert_eq!(t.dtype(), kiln::DType::F32);
/// let a = t.to_array()?;
/// assert_eq!(a.to_vec::<f32>()?, vec![1.0, 2.0]);
/// # Ok::<(), kiln_beam::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// The shape (empty for a 0-d tensor).
    pub shape: Vec<usize>,
    /// The elements, C order.
    pub data: TensorData,
    /// The PyTorch dtype it was saved with (`"float32"`, `"float16"`, `"int64"`, …).
    pub torch_dtype: &'static str,
}

impl Tensor {
    /// The kiln dtype of [`Tensor::data`].
    ///
    /// ```
    /// use kiln_beam::{Tensor, TensorData};
    /// let t = Tensor { shape: vec![], data: TensorData::I32(vec![7]), torch_dtype: "uint8" };
    /// assert_eq!(t.dtype(), kiln::DType::I32);
    /// ```
    pub fn dtype(&self) -> DType {
        match self.data {
            TensorData::F32(_) => DType::F32,
            TensorData::F64(_) => DType::F64,
            TensorData::I32(_) => DType::I32,
            TensorData::I64(_) => DType::I64,
            TensorData::Bool(_) => DType::Bool,
        }
    }

    /// A kiln array with this tensor's shape and a copy of its data.
    ///
    /// ```
    /// use kiln_beam::{Tensor, TensorData};
    /// let t = Tensor { shape: vec![1, 2], data: TensorData::I64(vec![3, 4]), torch_dtype: "int64" };
    /// assert_eq!(t.to_array()?.shape(), &[1, 2]);
    /// # Ok::<(), kiln_beam::Error>(())
    /// ```
    pub fn to_array(&self) -> Result<Array> {
        self.clone().try_into()
    }
}

impl TryFrom<Tensor> for Array {
    type Error = Error;

    /// Moves the tensor's data into a kiln array.
    ///
    /// ```
    /// use kiln_beam::{Tensor, TensorData};
    /// let t = Tensor { shape: vec![2], data: TensorData::Bool(vec![true, false]), torch_dtype: "bool" };
    /// let a = kiln::Array::try_from(t)?;
    /// assert_eq!(a.dtype(), kiln::DType::Bool);
    /// # Ok::<(), kiln_beam::Error>(())
    /// ```
    fn try_from(t: Tensor) -> Result<Array> {
        let s = &t.shape;
        Ok(match t.data {
            TensorData::F32(v) => Array::from_vec(v, s)?,
            TensorData::F64(v) => Array::from_vec(v, s)?,
            TensorData::I32(v) => Array::from_vec(v, s)?,
            TensorData::I64(v) => Array::from_vec(v, s)?,
            TensorData::Bool(v) => Array::from_vec(v, s)?,
        })
    }
}

/// The element types a storage can hold.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Elem {
    F32,
    F64,
    F16,
    BF16,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
}

impl Elem {
    /// From a typed storage class (`torch.FloatStorage`) or a dtype (`torch.float32`).
    fn from_name(name: &str) -> Option<Elem> {
        Some(match name {
            "FloatStorage" | "float32" | "float" => Elem::F32,
            "DoubleStorage" | "float64" | "double" => Elem::F64,
            "HalfStorage" | "float16" | "half" => Elem::F16,
            "BFloat16Storage" | "bfloat16" => Elem::BF16,
            "LongStorage" | "int64" | "long" => Elem::I64,
            "IntStorage" | "int32" | "int" => Elem::I32,
            "ShortStorage" | "int16" | "short" => Elem::I16,
            "CharStorage" | "int8" => Elem::I8,
            "ByteStorage" | "uint8" => Elem::U8,
            "BoolStorage" | "bool" => Elem::Bool,
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Elem::F64 | Elem::I64 => 8,
            Elem::F32 | Elem::I32 => 4,
            Elem::F16 | Elem::BF16 | Elem::I16 => 2,
            Elem::I8 | Elem::U8 | Elem::Bool => 1,
        }
    }

    fn torch_name(self) -> &'static str {
        match self {
            Elem::F32 => "float32",
            Elem::F64 => "float64",
            Elem::F16 => "float16",
            Elem::BF16 => "bfloat16",
            Elem::I64 => "int64",
            Elem::I32 => "int32",
            Elem::I16 => "int16",
            Elem::I8 => "int8",
            Elem::U8 => "uint8",
            Elem::Bool => "bool",
        }
    }
}

/// IEEE half → single, exactly (subnormals, infinities and NaNs included).
fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // subnormal: m · 2^-24
            let v = m as f32 * f32::from_bits(0x3380_0000);
            return if sign != 0 { -v } else { v };
        }
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// Reads every tensor of a PyTorch checkpoint, by dotted name.
///
/// ```
/// let e = kiln_beam::read_pth("/nonexistent.pth").unwrap_err();
/// assert!(e.to_string().contains("/nonexistent.pth"));
/// ```
///
/// With the committed fixture (`tests/fixtures/pth/views.pth`, written by `torch.save`):
///
/// ```
/// let t = kiln_beam::read_pth(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pth/views.pth"))?;
/// let w = &t["model.strided"]; // torch.arange(24.).reshape(4, 6)[1:, 1::2].t()
/// assert_eq!(w.shape, vec![3, 3]);
/// assert_eq!(w.to_array()?.to_vec::<f32>()?, vec![7., 13., 19., 9., 15., 21., 11., 17., 23.]);
/// # Ok::<(), kiln_beam::Error>(())
/// ```
pub fn read_pth(path: impl AsRef<std::path::Path>) -> Result<BTreeMap<String, Tensor>> {
    let shown = path.as_ref().display().to_string();
    let bytes = std::fs::read(path.as_ref()).map_err(|e| bad(&shown, e.to_string()))?;
    parse(&shown, &bytes)
}

fn bad(path: &str, message: impl Into<String>) -> Error {
    Error::Invalid {
        op: "read_pth",
        message: format!("{path}: {}", message.into()),
    }
}

fn parse(shown: &str, bytes: &[u8]) -> Result<BTreeMap<String, Tensor>> {
    if bytes.first() == Some(&0x80) {
        return Err(bad(
            shown,
            "this is the legacy torch.save format (before PyTorch 1.6), which is not read; \
             re-save it with a current torch.save",
        ));
    }
    let zip = ZipArchive::parse("read_pth", shown, bytes)?;
    let pkl = zip
        .members
        .iter()
        .filter(|m| m.name.ends_with("data.pkl"))
        .min_by_key(|m| m.name.len())
        .ok_or_else(|| bad(shown, "a zip without data.pkl is no PyTorch checkpoint"))?;
    let prefix = pkl.name.strip_suffix("data.pkl").unwrap_or("").to_string();
    let big_endian = match zip.find(&format!("{prefix}byteorder")) {
        Some(m) => match &*zip.read(m)? {
            b"little" => false,
            b"big" => true,
            other => {
                return Err(bad(
                    shown,
                    format!("unknown byte order {:?}", String::from_utf8_lossy(other)),
                ))
            }
        },
        None => false,
    };
    let root = pickle::loads(&zip.read(pkl)?).map_err(|source| Error::Pickle {
        path: format!("{shown} ({})", pkl.name),
        source,
    })?;
    let mut ctx = Ctx {
        shown,
        zip: &zip,
        prefix,
        big_endian,
        storages: HashMap::new(),
        out: BTreeMap::new(),
    };
    ctx.walk(&root, "")?;
    Ok(ctx.out)
}

struct Ctx<'z, 'a> {
    shown: &'z str,
    zip: &'z ZipArchive<'a>,
    prefix: String,
    big_endian: bool,
    storages: HashMap<String, Cow<'a, [u8]>>,
    out: BTreeMap<String, Tensor>,
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// The `torch._utils` function an object was rebuilt with, if any.
fn rebuild_fn(v: &Value) -> Option<(&str, &[Value])> {
    match v {
        Value::Object(o) => match &o.callable {
            Value::Global { module, name } if module == "torch._utils" => {
                Some((name.as_str(), o.args.as_slice()))
            }
            _ => None,
        },
        _ => None,
    }
}

impl Ctx<'_, '_> {
    fn err(&self, name: &str, message: impl std::fmt::Display) -> Error {
        bad(self.shown, format!("tensor {name}: {message}"))
    }

    fn walk(&mut self, v: &Value, name: &str) -> Result<()> {
        if rebuild_fn(v).is_some() {
            let t = self.tensor(v, name)?;
            if self.out.insert(name.to_string(), t).is_some() {
                return Err(self.err(name, "two tensors have this name"));
            }
            return Ok(());
        }
        match v {
            Value::Dict(entries) => self.walk_entries(entries, name),
            Value::Object(o) => self.walk_entries(&o.entries, name),
            Value::List(items) | Value::Tuple(items) => {
                for (i, x) in items.iter().enumerate() {
                    self.walk(x, &join(name, &i.to_string()))?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn walk_entries(&mut self, entries: &[(Value, Value)], name: &str) -> Result<()> {
        for (k, x) in entries {
            let key = match k {
                Value::Str(s) => s.clone(),
                Value::Int(i) => i.to_string(),
                _ => continue,
            };
            self.walk(x, &join(name, &key))?;
        }
        Ok(())
    }

    fn tensor(&mut self, v: &Value, name: &str) -> Result<Tensor> {
        let Some((func, args)) = rebuild_fn(v) else {
            return Err(self.err(name, "not a tensor"));
        };
        let int = |i: usize, what: &str| -> Result<i64> {
            args.get(i)
                .and_then(Value::as_int)
                .ok_or_else(|| self.err(name, format!("{func}: {what} is not an integer")))
        };
        let ints = |i: usize, what: &str| -> Result<Vec<usize>> {
            let seq = args
                .get(i)
                .and_then(Value::as_seq)
                .ok_or_else(|| self.err(name, format!("{func}: {what} is not a tuple")))?;
            seq.iter()
                .map(|x| {
                    x.as_int()
                        .and_then(|i| usize::try_from(i).ok())
                        .ok_or_else(|| {
                            self.err(
                                name,
                                format!("{func}: {what} {seq:?} must be non-negative integers"),
                            )
                        })
                })
                .collect()
        };
        match func {
            "_rebuild_tensor" | "_rebuild_tensor_v2" | "_rebuild_tensor_v3" => {
                let offset = usize::try_from(int(1, "the storage offset")?)
                    .map_err(|_| self.err(name, "negative storage offset"))?;
                let size = ints(2, "the size")?;
                let stride = ints(3, "the stride")?;
                let dtype = if func == "_rebuild_tensor_v3" {
                    match args.get(6) {
                        Some(Value::Global { name: d, .. }) => Some(d.as_str()),
                        _ => return Err(self.err(name, "_rebuild_tensor_v3 without a dtype")),
                    }
                } else {
                    None
                };
                let storage = args
                    .first()
                    .ok_or_else(|| self.err(name, format!("{func} without a storage")))?;
                self.rebuild(name, storage, dtype, offset, &size, &stride)
            }
            "_rebuild_parameter" | "_rebuild_parameter_with_state" => {
                let inner = args
                    .first()
                    .ok_or_else(|| self.err(name, format!("{func} without its tensor")))?;
                self.tensor(inner, name)
            }
            other => Err(self.err(
                name,
                format!("torch._utils.{other} (a sparse, quantised, meta or subclass tensor) is not supported; save dense tensors"),
            )),
        }
    }

    fn rebuild(
        &mut self,
        name: &str,
        storage: &Value,
        dtype: Option<&str>,
        offset: usize,
        size: &[usize],
        stride: &[usize],
    ) -> Result<Tensor> {
        // ("storage", storage class, key, location, numel)
        let pid = match storage {
            Value::PersistentId(p) => p.as_seq(),
            _ => None,
        };
        let Some([kind, class, key, _location, ..]) = pid else {
            return Err(self.err(
                name,
                format!("the storage is a {}, not a persistent id (\"storage\", class, key, location, size)", storage.type_name()),
            ));
        };
        if kind.as_str() != Some("storage") {
            return Err(self.err(name, format!("unknown persistent id kind {kind:?}")));
        }
        let Value::Global { name: class, .. } = class else {
            return Err(self.err(name, "the storage class is not a global name"));
        };
        let elem_name = dtype.unwrap_or(class);
        let elem = Elem::from_name(elem_name).ok_or_else(|| {
            self.err(
                name,
                format!("storage type {elem_name} is not supported (float32/64/16, bfloat16, int64/32/16/8, uint8 and bool are)"),
            )
        })?;
        let key = key
            .as_str()
            .map(str::to_string)
            .or_else(|| key.as_int().map(|i| i.to_string()))
            .ok_or_else(|| self.err(name, "the storage key is not a string"))?;
        if size.len() != stride.len() {
            return Err(self.err(
                name,
                format!("size {size:?} and stride {stride:?} differ in rank"),
            ));
        }
        if !self.storages.contains_key(&key) {
            let member = format!("{}data/{key}", self.prefix);
            let m = self.zip.find(&member).ok_or_else(|| {
                self.err(
                    name,
                    format!("its storage {member} is missing from the archive"),
                )
            })?;
            let data = self.zip.read(m)?;
            self.storages.insert(key.clone(), data);
        }
        let bytes: &[u8] = self.storages.get(&key).map(|c| &**c).unwrap_or(&[]);
        let esize = elem.size();
        let len = bytes.len() / esize;
        let numel = size
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| self.err(name, format!("size {size:?} overflows")))?;
        if numel > 0 {
            let last = size
                .iter()
                .zip(stride)
                .try_fold(offset, |a, (&d, &s)| a.checked_add((d - 1).checked_mul(s)?))
                .ok_or_else(|| self.err(name, "offset and strides overflow"))?;
            if last >= len {
                return Err(self.err(
                    name,
                    format!(
                        "offset {offset}, size {size:?} and stride {stride:?} reach element {last} of storage {key}, which holds {len} {} elements: the file is truncated or corrupt",
                        elem.torch_name()
                    ),
                ));
            }
        }
        // element indices in C order
        let contiguous = {
            let mut expect = 1usize;
            let mut ok = true;
            for (&d, &s) in size.iter().zip(stride).rev() {
                if d != 1 && s != expect {
                    ok = false;
                }
                expect = expect.saturating_mul(d);
            }
            ok
        };
        let index: Box<dyn Iterator<Item = usize>> = if contiguous || numel == 0 {
            Box::new(offset..offset + numel)
        } else {
            Box::new(StridedIndex::new(offset, size, stride))
        };
        let be = self.big_endian;
        fn get<const N: usize>(b: &[u8], i: usize) -> [u8; N] {
            let mut a = [0u8; N];
            if let Some(s) = b.get(i * N..i * N + N) {
                a.copy_from_slice(s);
            }
            a
        }
        macro_rules! read {
            ($t:ty, $n:literal) => {
                index
                    .map(|i| {
                        let a = get::<$n>(bytes, i);
                        if be {
                            <$t>::from_be_bytes(a)
                        } else {
                            <$t>::from_le_bytes(a)
                        }
                    })
                    .collect::<Vec<$t>>()
            };
        }
        let data = match elem {
            Elem::F32 => TensorData::F32(read!(f32, 4)),
            Elem::F64 => TensorData::F64(read!(f64, 8)),
            Elem::I64 => TensorData::I64(read!(i64, 8)),
            Elem::I32 => TensorData::I32(read!(i32, 4)),
            Elem::F16 => TensorData::F32(read!(u16, 2).into_iter().map(f16_to_f32).collect()),
            Elem::BF16 => TensorData::F32(
                read!(u16, 2)
                    .into_iter()
                    .map(|h| f32::from_bits(u32::from(h) << 16))
                    .collect(),
            ),
            Elem::I16 => TensorData::I32(read!(i16, 2).into_iter().map(i32::from).collect()),
            Elem::I8 => TensorData::I32(read!(i8, 1).into_iter().map(i32::from).collect()),
            Elem::U8 => TensorData::I32(read!(u8, 1).into_iter().map(i32::from).collect()),
            Elem::Bool => TensorData::Bool(read!(u8, 1).into_iter().map(|b| b != 0).collect()),
        };
        Ok(Tensor {
            shape: size.to_vec(),
            data,
            torch_dtype: elem.torch_name(),
        })
    }
}

/// Storage indices of a strided view, in C order.
struct StridedIndex {
    size: Vec<usize>,
    stride: Vec<usize>,
    counter: Vec<usize>,
    at: usize,
    left: usize,
}

impl StridedIndex {
    fn new(offset: usize, size: &[usize], stride: &[usize]) -> StridedIndex {
        StridedIndex {
            size: size.to_vec(),
            stride: stride.to_vec(),
            counter: vec![0; size.len()],
            at: offset,
            left: size.iter().product(),
        }
    }
}

impl Iterator for StridedIndex {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let out = self.at;
        // advance the counter, last axis fastest
        for d in (0..self.size.len()).rev() {
            self.counter[d] += 1;
            self.at += self.stride[d];
            if self.counter[d] < self.size[d] {
                break;
            }
            self.at -= self.stride[d] * self.size[d];
            self.counter[d] = 0;
        }
        Some(out)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_precision_widens_exactly() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        assert!(f16_to_f32(0x7e00).is_nan());
        assert_eq!(f16_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn strided_indices_walk_in_c_order() {
        let i: Vec<usize> = StridedIndex::new(7, &[3, 3], &[1, 12]).collect();
        assert_eq!(i, [7, 19, 31, 8, 20, 32, 9, 21, 33]);
        let i: Vec<usize> = StridedIndex::new(0, &[2, 0, 3], &[0, 3, 1]).collect();
        assert!(i.is_empty());
    }
}
