//! Reading PyTorch checkpoints (`torch.save` files, the zip format of PyTorch ≥ 1.6) into
//! named tensors that convert to [`kiln::Array`].
//!
//! A checkpoint is a zip (read with `crate::archive`) holding `PREFIX/data.pkl`, a pickle
//! (read with [`crate::pickle`]) of the saved object, and one member `PREFIX/data/KEY` per
//! storage, which the pickle names through persistent ids `("storage", torch.FloatStorage,
//! KEY, location, numel)`. Every tensor in the pickle is a call
//! `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, …)`; [`read_pth`] rebuilds
//! it from its storage honouring the element offset and the strides (a non-contiguous view is
//! copied into C order), in the archive's byte order (`PREFIX/byteorder`, little-endian when
//! absent). It walks dicts, `collections.OrderedDict`s, lists and tuples, so nested state
//! dicts (`{"model": state_dict, "optimizer": …}`) come out with dotted names
//! (`model.encoder.weight`); non-tensor values (a learning rate, a loss) are skipped.
//!
//! Reading is bounded by what the file holds. A view is copied out of its storage, so views
//! that overlap (many tensors viewing one storage, or a zero stride making one stored
//! element many) could materialise far more than the file stores: the bytes that all views
//! read from their storages (elements × storage element size) may total at most
//! `VIEW_FACTOR` (4) times the bytes of the storages read, plus `VIEW_SLACK` (4 MiB),
//! checked before anything is reserved. A checkpoint's views normally cover their storage at
//! most once (a state dict's tensors, or twice for tied weights); only a `torch.save` of an
//! expanded or overlapping view (`x.expand(…)`, `x.as_strided(…)`) goes past that, and it is
//! an [`Error::Format`] naming the tensor that suggests saving `.contiguous()` or `.clone()`
//! of it instead. The slack lets small expanded buffers through; it is kept at the 4 MiB a
//! reader may reserve beyond what its input can encode, so a tiny file cannot ask for more.
//! Dotted names are built in one buffer as the walk goes (memory linear in the depth), a
//! name may be at most `MAX_NAME` (64 KiB) long, and the names of all tensors together at
//! most 8 times the size of `data.pkl` plus 1 MiB.
//!
//! dtypes: kiln has `bool`, `i32`, `i64`, `f32` and `f64`; `float16` and `bfloat16` tensors
//! are widened to `f32`, `int8`, `uint8` and `int16` to `i32`, exactly. Complex, quantised and
//! sparse tensors, and the legacy (pre-1.6, non-zip) format, are [`Error::Unsupported`]
//! naming the tensor; a malformed checkpoint is an [`Error::Format`] naming the file and the
//! tensor or member, and a malformed `data.pkl` an [`Error::Pickle`].
//!
//! Depends on the crate root (`crate::Ctx`, [`crate::Error`]), kiln's public API,
//! `crate::archive`, [`crate::pickle`] and `half`.

use crate::archive::Archive;
use crate::pickle::{self, Value};
use crate::{Ctx, Error, Result};
use kiln::{Array, DType};
use std::collections::{BTreeMap, HashMap};

/// The bytes all views of a checkpoint may read from their storages: this many times the
/// bytes of the storages (plus [`VIEW_SLACK`]); see the module docs.
const VIEW_FACTOR: usize = 4;

/// The bytes views may read beyond [`VIEW_FACTOR`] times their storages.
const VIEW_SLACK: usize = 4 << 20;

/// The longest dotted name a tensor may have, in bytes.
const MAX_NAME: usize = 64 << 10;

/// The elements of a [`Tensor`], in C order.
///
/// ```
/// let d = kiln_io::TensorData::I64(vec![1, 2]);
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
    /// assert_eq!(kiln_io::TensorData::Bool(vec![]).len(), 0);
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
    /// assert!(kiln_io::TensorData::F32(vec![]).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A tensor read from a checkpoint: its kiln dtype, shape and C-order data, and the dtype it
/// had in PyTorch.
///
/// ```
/// use kiln_io::{Tensor, TensorData};
/// let t = Tensor { shape: vec![2], data: TensorData::F32(vec![1.0, 2.0]), torch_dtype: "float32" };
/// assert_eq!(t.dtype(), kiln::DType::F32);
/// let a = t.to_array()?;
/// assert_eq!(a.to_vec::<f32>()?, vec![1.0, 2.0]);
/// # Ok::<(), kiln_io::Error>(())
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
    /// use kiln_io::{Tensor, TensorData};
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
    /// use kiln_io::{Tensor, TensorData};
    /// let t = Tensor { shape: vec![1, 2], data: TensorData::I64(vec![3, 4]), torch_dtype: "int64" };
    /// assert_eq!(t.to_array()?.shape(), &[1, 2]);
    /// # Ok::<(), kiln_io::Error>(())
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
    /// use kiln_io::{Tensor, TensorData};
    /// let t = Tensor { shape: vec![2], data: TensorData::Bool(vec![true, false]), torch_dtype: "bool" };
    /// let a = kiln::Array::try_from(t)?;
    /// assert_eq!(a.dtype(), kiln::DType::Bool);
    /// # Ok::<(), kiln_io::Error>(())
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
    half::f16::from_bits(h).to_f32()
}

/// bfloat16 → single, exactly.
fn bf16_to_f32(h: u16) -> f32 {
    half::bf16::from_bits(h).to_f32()
}

/// Reads every tensor of a PyTorch checkpoint, by dotted name.
///
/// ```
/// let e = kiln_io::read_pth("/nonexistent.pth").unwrap_err();
/// assert!(e.to_string().contains("/nonexistent.pth"));
/// ```
///
/// With the committed fixture (`tests/fixtures/pth/views.pth`, written by `torch.save`):
///
/// ```
/// let t = kiln_io::read_pth(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pth/views.pth"))?;
/// let w = &t["model.strided"]; // torch.arange(24.).reshape(4, 6)[1:, 1::2].t()
/// assert_eq!(w.shape, vec![3, 3]);
/// assert_eq!(w.to_array()?.to_vec::<f32>()?, vec![7., 13., 19., 9., 15., 21., 11., 17., 23.]);
/// # Ok::<(), kiln_io::Error>(())
/// ```
pub fn read_pth(path: impl AsRef<std::path::Path>) -> Result<BTreeMap<String, Tensor>> {
    let shown = path.as_ref().display().to_string();
    let cx = Ctx::new("read_pth", &shown);
    let bytes = std::fs::read(path.as_ref()).map_err(|e| cx.io(e))?;
    parse(&cx, &bytes)
}

/// Reads a `torch.save` checkpoint held in memory (see [`read_pth`]).
///
/// ```
/// let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pth/views.pth")).unwrap();
/// let t = kiln_io::pth_from_bytes(&bytes)?;
/// assert!(t.contains_key("model.strided"));
/// assert!(kiln_io::pth_from_bytes(&bytes[..100]).is_err()); // truncated
/// # Ok::<(), kiln_io::Error>(())
/// ```
pub fn pth_from_bytes(bytes: &[u8]) -> Result<BTreeMap<String, Tensor>> {
    parse(&Ctx::new("pth_from_bytes", "<bytes>"), bytes)
}

fn parse(cx: &Ctx<'_>, bytes: &[u8]) -> Result<BTreeMap<String, Tensor>> {
    if bytes.first() == Some(&0x80) {
        return Err(cx.unsupported(
            "this is the legacy torch.save format (before PyTorch 1.6), which is not read",
            "re-save it with a current torch.save",
        ));
    }
    let mut zip = Archive::parse(cx, bytes)?;
    let names = zip.names(cx)?;
    let pkl = names
        .iter()
        .filter(|n| n.ends_with("data.pkl"))
        .min_by_key(|n| n.len())
        .ok_or_else(|| cx.format("a zip without data.pkl is no PyTorch checkpoint"))?
        .clone();
    let prefix = pkl.strip_suffix("data.pkl").unwrap_or("").to_string();
    let byteorder = format!("{prefix}byteorder");
    let big_endian = if zip.contains(&byteorder) {
        match &*zip.read(cx, &byteorder)? {
            b"little" => false,
            b"big" => true,
            other => {
                return Err(cx.at(&byteorder).format(format!(
                    "unknown byte order {:?}",
                    String::from_utf8_lossy(other)
                )))
            }
        }
    } else {
        false
    };
    let pkl_bytes = zip.read(cx, &pkl)?;
    let root = pickle::loads(&pkl_bytes).map_err(|source| Error::Pickle {
        path: format!("{} ({pkl})", cx.path),
        source,
    })?;
    let mut r = Reader {
        cx,
        zip,
        prefix,
        big_endian,
        storages: HashMap::new(),
        out: BTreeMap::new(),
        stored: 0,
        viewed: 0,
        names_left: pkl_bytes.len().saturating_mul(8).saturating_add(1 << 20),
    };
    drop(pkl_bytes);
    let mut name = String::new();
    r.walk(&root, &mut name)?;
    Ok(r.out)
}

/// The state of one [`read_pth`]: the archive, the storages read so far, the tensors built.
struct Reader<'c, 'a> {
    cx: &'c Ctx<'c>,
    zip: Archive<'a>,
    prefix: String,
    big_endian: bool,
    storages: HashMap<String, Vec<u8>>,
    out: BTreeMap<String, Tensor>,
    /// The bytes of the storages read so far.
    stored: usize,
    /// The bytes the views built so far read from their storages.
    viewed: usize,
    /// How many more bytes the names of the tensors may take.
    names_left: usize,
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

impl Reader<'_, '_> {
    /// An [`Error::Format`] naming tensor `name`.
    fn err(&self, name: &str, message: impl std::fmt::Display) -> Error {
        self.cx.at(name).format(message.to_string())
    }

    /// An [`Error::Unsupported`] naming tensor `name`.
    fn unsupported(&self, name: &str, message: impl std::fmt::Display, hint: &str) -> Error {
        self.cx.at(name).unsupported(message.to_string(), hint)
    }

    /// Walks `v`, whose dotted name is `name`: each level pushes its key onto the one buffer,
    /// walks below, and truncates it again.
    fn walk(&mut self, v: &Value, name: &mut String) -> Result<()> {
        if rebuild_fn(v).is_some() {
            let t = self.tensor(v, name)?;
            if name.len() > self.names_left {
                return Err(self.err(
                    &shorten(name),
                    "the tensors' names take more than 8 times the size of data.pkl (plus 1 MiB)",
                ));
            }
            self.names_left -= name.len();
            if self.out.insert(name.clone(), t).is_some() {
                return Err(self.err(name, "two tensors have this name"));
            }
            return Ok(());
        }
        match v {
            Value::Dict(entries) => self.walk_entries(entries, name),
            Value::Object(o) => self.walk_entries(&o.entries, name),
            Value::List(items) | Value::Tuple(items) => {
                for (i, x) in items.iter().enumerate() {
                    self.walk_below(x, name, &i.to_string())?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn walk_entries(&mut self, entries: &[(Value, Value)], name: &mut String) -> Result<()> {
        for (k, x) in entries {
            match k {
                Value::Str(s) => self.walk_below(x, name, s)?,
                Value::Int(i) => self.walk_below(x, name, &i.to_string())?,
                _ => continue,
            }
        }
        Ok(())
    }

    /// Walks `v` under `key`, `name` extended by it for the while.
    fn walk_below(&mut self, v: &Value, name: &mut String, key: &str) -> Result<()> {
        let len = name.len();
        let dot = usize::from(len > 0);
        if len + dot + key.len() > MAX_NAME {
            return Err(self.err(
                &shorten(name),
                format!("a name below this one is longer than {MAX_NAME} bytes"),
            ));
        }
        if dot == 1 {
            name.push('.');
        }
        name.push_str(key);
        let r = self.walk(v, name);
        name.truncate(len);
        r
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
            other => Err(self.unsupported(
                name,
                format!("torch._utils.{other} (a sparse, quantised, meta or subclass tensor) is not supported"),
                "save dense tensors (tensor.to_dense(), tensor.dequantize())",
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
            self.unsupported(
                name,
                format!("storage type {elem_name} is not supported (float32/64/16, bfloat16, int64/32/16/8, uint8 and bool are)"),
                "convert the tensor to one of those dtypes before saving",
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
            if !self.zip.contains(&member) {
                return Err(self.err(
                    name,
                    format!("its storage {member} is missing from the archive"),
                ));
            }
            let data = self.zip.read(self.cx, &member)?;
            self.stored = self.stored.saturating_add(data.len());
            self.storages.insert(key.clone(), data);
        }
        let bytes: &[u8] = self.storages.get(&key).map(Vec::as_slice).unwrap_or(&[]);
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
        // Views are copied: bound what all of them read from their storages (before
        // reserving anything), so that overlapping views or zero strides cannot make a small
        // file materialise gigabytes.
        let viewed = numel
            .checked_mul(esize)
            .and_then(|n| n.checked_add(self.viewed))
            .unwrap_or(usize::MAX);
        let most = self
            .stored
            .saturating_mul(VIEW_FACTOR)
            .saturating_add(VIEW_SLACK);
        if viewed > most {
            return Err(self.err(
                name,
                format!(
                    "size {size:?} with stride {stride:?} reads {numel} {} elements of storage {key} (which holds {len}): the views of this checkpoint would read {viewed} bytes from storages of {} bytes, more than the {most} ({VIEW_FACTOR} times their size plus 4 MiB) allocated for them. This is an expanded or overlapping view; save tensor.contiguous() or tensor.clone() of it instead",
                    elem.torch_name(),
                    self.stored
                ),
            ));
        }
        self.viewed = viewed;
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
        // zero strides make a tensor larger than its storage: reserve fallibly
        let cx = self.cx.at(name);
        macro_rules! read {
            ($t:ty, $n:literal, $f:expr) => {{
                let mut v = Vec::new();
                v.try_reserve_exact(numel).map_err(|_| {
                    cx.format(format!("size {size:?} is more than can be allocated"))
                })?;
                v.extend(index.map(|i| {
                    let a = get::<$n>(bytes, i);
                    $f(if be {
                        <$t>::from_be_bytes(a)
                    } else {
                        <$t>::from_le_bytes(a)
                    })
                }));
                v
            }};
        }
        let data = match elem {
            Elem::F32 => TensorData::F32(read!(f32, 4, |x| x)),
            Elem::F64 => TensorData::F64(read!(f64, 8, |x| x)),
            Elem::I64 => TensorData::I64(read!(i64, 8, |x| x)),
            Elem::I32 => TensorData::I32(read!(i32, 4, |x| x)),
            Elem::F16 => TensorData::F32(read!(u16, 2, f16_to_f32)),
            Elem::BF16 => TensorData::F32(read!(u16, 2, bf16_to_f32)),
            Elem::I16 => TensorData::I32(read!(i16, 2, i32::from)),
            Elem::I8 => TensorData::I32(read!(i8, 1, i32::from)),
            Elem::U8 => TensorData::I32(read!(u8, 1, i32::from)),
            Elem::Bool => TensorData::Bool(read!(u8, 1, |b| b != 0)),
        };
        Ok(Tensor {
            shape: size.to_vec(),
            data,
            torch_dtype: elem.torch_name(),
        })
    }
}

/// The start of a long name (for an error message about it).
fn shorten(name: &str) -> String {
    if name.len() <= 200 {
        return name.to_string();
    }
    let mut end = 200;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &name[..end])
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
    use std::io::Write;

    #[test]
    fn half_precision_widens_exactly() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        assert!(f16_to_f32(0x7e00).is_nan());
        assert_eq!(f16_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(bf16_to_f32(0xc040), -3.0);
    }

    #[test]
    fn strided_indices_walk_in_c_order() {
        let i: Vec<usize> = StridedIndex::new(7, &[3, 3], &[1, 12]).collect();
        assert_eq!(i, [7, 19, 31, 8, 20, 32, 9, 21, 33]);
        let i: Vec<usize> = StridedIndex::new(0, &[2, 0, 3], &[0, 3, 1]).collect();
        assert!(i.is_empty());
    }

    /// A pickle int (`LONG1`, 8 bytes).
    fn int(v: i64) -> Vec<u8> {
        let mut b = vec![0x8a, 8];
        b.extend(v.to_le_bytes());
        b
    }

    fn text(s: &str) -> Vec<u8> {
        let mut b = vec![b'X'];
        b.extend((s.len() as u32).to_le_bytes());
        b.extend(s.as_bytes());
        b
    }

    fn tuple(v: &[i64]) -> Vec<u8> {
        let mut b = vec![b'('];
        for &x in v {
            b.extend(int(x));
        }
        b.push(b't');
        b
    }

    /// `data.pkl` of `{"w": _rebuild_tensor_v2(storage, offset, size, stride, False,
    /// OrderedDict())}` with the storage `("storage", torch.CLASS, "0", "cpu", numel)`, opcode
    /// by opcode as torch writes it (protocol 2).
    fn tensor_pickle(
        class: &str,
        numel: i64,
        offset: i64,
        size: &[i64],
        stride: &[i64],
    ) -> Vec<u8> {
        let mut b = b"\x80\x02}(".to_vec();
        b.extend(text("w"));
        b.extend(b"ctorch._utils\n_rebuild_tensor_v2\n((");
        b.extend(text("storage"));
        b.extend(format!("ctorch\n{class}\n").as_bytes());
        b.extend(text("0"));
        b.extend(text("cpu"));
        b.extend(int(numel));
        b.extend(b"tQ");
        b.extend(int(offset));
        b.extend(tuple(size));
        b.extend(tuple(stride));
        b.extend(b"\x89ccollections\nOrderedDict\n)RtRu.");
        b
    }

    /// A checkpoint of `members` under `archive/`, written with the `zip` crate.
    fn checkpoint(members: &[(&str, &[u8])], deflate: bool) -> Vec<u8> {
        let method = if deflate {
            zip::CompressionMethod::Deflated
        } else {
            zip::CompressionMethod::Stored
        };
        let options = zip::write::SimpleFileOptions::default().compression_method(method);
        let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        for (name, bytes) in members {
            z.start_file(format!("archive/{name}"), options).unwrap();
            z.write_all(bytes).unwrap();
        }
        z.finish().unwrap().into_inner()
    }

    fn read(bytes: &[u8]) -> Result<BTreeMap<String, Tensor>> {
        parse(&Ctx::new("read_pth", "test.pth"), bytes)
    }

    #[test]
    fn a_built_checkpoint_reads_back_in_either_byte_order() {
        let pkl = tensor_pickle("FloatStorage", 6, 1, &[2, 2], &[1, 2]);
        for (order, deflate) in [("little", false), ("big", true)] {
            let storage: Vec<u8> = (0..6)
                .flat_map(|i| {
                    let x = i as f32;
                    if order == "big" {
                        x.to_be_bytes()
                    } else {
                        x.to_le_bytes()
                    }
                })
                .collect();
            let b = checkpoint(
                &[
                    ("data.pkl", &pkl),
                    ("byteorder", order.as_bytes()),
                    ("data/0", &storage),
                ],
                deflate,
            );
            let t = read(&b).unwrap();
            assert_eq!(t["w"].shape, [2, 2]);
            // offset 1, stride (1, 2): [[1, 3], [2, 4]]
            assert_eq!(
                t["w"].data,
                TensorData::F32(vec![1., 3., 2., 4.]),
                "{order}"
            );
        }
        // an unknown byte order names the member
        let b = checkpoint(
            &[
                ("data.pkl", &pkl),
                ("byteorder", b"middle"),
                ("data/0", &[0; 24]),
            ],
            false,
        );
        let e = read(&b).unwrap_err().to_string();
        assert!(
            e.contains("archive/byteorder") && e.contains("middle"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_operation_the_file_and_the_tensor() {
        // a storage missing from the archive
        let pkl = tensor_pickle("FloatStorage", 6, 0, &[6], &[1]);
        let e = read(&checkpoint(&[("data.pkl", &pkl)], false)).unwrap_err();
        assert!(
            matches!(e, Error::Format { op: "read_pth", ref path, item: Some(ref t), .. } if path == "test.pth" && t == "w"),
            "{e:?}"
        );
        assert!(e.to_string().contains("archive/data/0"), "{e}");
        // a dtype kiln has no room for
        let pkl = tensor_pickle("ComplexFloatStorage", 1, 0, &[1], &[1]);
        let e = read(&checkpoint(
            &[("data.pkl", &pkl), ("data/0", &[0; 8])],
            false,
        ))
        .unwrap_err();
        assert!(
            matches!(e, Error::Unsupported { op: "read_pth", item: Some(ref t), .. } if t == "w"),
            "{e:?}"
        );
        // a corrupt data.pkl is a pickle error naming the member
        let e = read(&checkpoint(&[("data.pkl", b"\x80\x02}(\xff")], false)).unwrap_err();
        assert!(
            matches!(e, Error::Pickle { ref path, .. } if path.contains("test.pth") && path.contains("archive/data.pkl")),
            "{e:?}"
        );
        // no data.pkl
        let e = read(&checkpoint(&[("x", b"")], false))
            .unwrap_err()
            .to_string();
        assert!(e.contains("data.pkl"), "{e}");
        // the legacy format
        let e = read(b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.").unwrap_err();
        assert!(
            matches!(e, Error::Unsupported { .. }) && e.to_string().contains("legacy"),
            "{e}"
        );
    }

    #[test]
    fn zero_strides_past_memory_are_an_error_not_an_abort() {
        // one float expanded to 2^62 elements: reaches only element 0 of its storage
        let pkl = tensor_pickle("FloatStorage", 1, 0, &[1 << 62], &[0]);
        let b = checkpoint(&[("data.pkl", &pkl), ("data/0", &[0; 4])], false);
        let e = read(&b).unwrap_err().to_string();
        assert!(e.contains("w") && e.contains("allocated"), "{e}");
        // and size and stride of different ranks, negative and overflowing values
        for (size, stride) in [
            (&[2, 2][..], &[1][..]),
            (&[-1], &[1]),
            (&[i64::MAX, 2], &[1, i64::MAX]),
        ] {
            let pkl = tensor_pickle("FloatStorage", 1, 0, size, stride);
            let b = checkpoint(&[("data.pkl", &pkl), ("data/0", &[0; 4])], false);
            let e = read(&b).unwrap_err().to_string();
            assert!(e.contains("test.pth: w:"), "{e}");
        }
    }

    fn deflate(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    /// A member for [`build_zip`]: name, compression method, declared size, bytes as stored,
    /// and the bytes whose CRC-32 the headers carry.
    type RawMember<'a> = (&'a str, u16, u32, &'a [u8], &'a [u8]);

    /// A zip archive of `members`, written byte by byte so that it can lie.
    fn build_zip(members: &[RawMember<'_>]) -> Vec<u8> {
        let (mut b, mut central) = (Vec::new(), Vec::new());
        for &(name, method, size, raw, contents) in members {
            let mut crc = flate2::Crc::new();
            crc.update(contents);
            let crc = crc.sum();
            let local = b.len() as u32;
            let common = |h: &mut Vec<u8>| {
                for v in [20u16, 0, method, 0, 0] {
                    h.extend(v.to_le_bytes());
                }
                for v in [crc, raw.len() as u32, size] {
                    h.extend(v.to_le_bytes());
                }
                h.extend((name.len() as u16).to_le_bytes());
                h.extend(0u16.to_le_bytes());
            };
            b.extend(0x0403_4b50u32.to_le_bytes());
            common(&mut b);
            b.extend(name.as_bytes());
            b.extend(raw);
            central.extend(0x0201_4b50u32.to_le_bytes());
            central.extend(20u16.to_le_bytes());
            common(&mut central);
            central.extend([0u8; 10]); // comment length, disk, internal and external attributes
            central.extend(local.to_le_bytes());
            central.extend(name.as_bytes());
        }
        let cd_at = b.len() as u32;
        b.extend(&central);
        b.extend(0x0605_4b50u32.to_le_bytes());
        b.extend([0u8; 4]);
        b.extend((members.len() as u16).to_le_bytes());
        b.extend((members.len() as u16).to_le_bytes());
        b.extend((central.len() as u32).to_le_bytes());
        b.extend(cd_at.to_le_bytes());
        b.extend(0u16.to_le_bytes());
        b
    }

    #[test]
    fn a_deflate_bomb_storage_is_an_error_naming_the_member() {
        // 100 MB of zeros in about 100 kB, declared as 24 bytes
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..100 {
            e.write_all(&zeros).unwrap();
        }
        let bomb = e.finish().unwrap();
        assert!(bomb.len() < 1 << 20, "{} bytes", bomb.len());
        let pkl = tensor_pickle("FloatStorage", 6, 0, &[6], &[1]);
        let b = build_zip(&[
            ("archive/data.pkl", 0, pkl.len() as u32, &pkl, &pkl),
            ("archive/data/0", 8, 24, &bomb, &[0; 24]),
        ]);
        let e = read(&b).unwrap_err().to_string();
        assert!(
            e.contains("test.pth") && e.contains("archive/data/0"),
            "{e}"
        );
        // a declared size past what deflate can make is refused before inflating
        let raw = deflate(&[0; 100]);
        let b = build_zip(&[
            ("archive/data.pkl", 0, pkl.len() as u32, &pkl, &pkl),
            ("archive/data/0", 8, u32::MAX - 1, &raw, &[0; 100]),
        ]);
        let e = read(&b).unwrap_err().to_string();
        assert!(
            e.contains("archive/data/0") && e.contains("declares"),
            "{e}"
        );
        // declared shorter or longer than the contents: errors either way
        for declared in [99, 101] {
            let b = build_zip(&[
                ("archive/data.pkl", 0, pkl.len() as u32, &pkl, &pkl),
                ("archive/data/0", 8, declared, &raw, &[0; 100]),
            ]);
            let e = read(&b).unwrap_err().to_string();
            assert!(e.contains("archive/data/0"), "{e}");
        }
        // and told the truth, it reads
        let b = build_zip(&[
            ("archive/data.pkl", 0, pkl.len() as u32, &pkl, &pkl),
            ("archive/data/0", 8, 100, &raw, &[0; 100]),
        ]);
        assert_eq!(read(&b).unwrap()["w"].data, TensorData::F32(vec![0.0; 6]));
    }

    /// Zips built by Python's `zipfile` (`a.txt` stored, `b.txt` deflated; with and without
    /// zip64 records; `tests/fixtures/gen_pickle_fixtures.py`), read as [`read_pth`] reads its
    /// archive.
    #[test]
    fn the_archive_reads_python_zips_with_and_without_zip64() {
        let cx = Ctx::new("test", "sample.zip");
        for b in [
            &include_bytes!("../tests/fixtures/zip/stored_and_deflated.zip")[..],
            &include_bytes!("../tests/fixtures/zip/zip64.zip")[..],
        ] {
            let mut z = Archive::parse(&cx, b).unwrap();
            assert_eq!(z.names(&cx).unwrap(), ["a.txt", "b.txt"]);
            assert_eq!(z.read(&cx, "a.txt").unwrap(), b"hello");
            assert_eq!(z.read(&cx, "b.txt").unwrap(), b"hello hello hello");
        }
    }

    #[test]
    fn corrupt_or_truncated_archives_are_errors_not_panics() {
        let cx = Ctx::new("test", "sample.zip");
        let sample = include_bytes!("../tests/fixtures/zip/stored_and_deflated.zip");
        let mut b = sample.to_vec();
        let at = b.windows(5).position(|w| w == b"hello").unwrap();
        b[at] = b'j';
        let mut z = Archive::parse(&cx, &b).unwrap();
        let e = z.read(&cx, "a.txt").unwrap_err().to_string();
        assert!(
            e.contains("a.txt") && e.to_lowercase().contains("checksum"),
            "{e}"
        );
        for n in 0..sample.len() {
            if let Ok(mut z) = Archive::parse(&cx, &sample[..n]) {
                for name in z.names(&cx).unwrap_or_default() {
                    let _ = z.read(&cx, &name);
                }
            }
        }
    }
}
