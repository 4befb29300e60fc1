//! A reader for Python's pickle format, protocols 2 to 5: the subset that PyTorch checkpoints
//! (`data.pkl` inside a `.pth` zip) and pickled Python objects such as vocabularies use.
//!
//! Nothing is executed and no class is imported: a pickle is a small stack program, and
//! [`loads`] runs it into a [`Value`] tree in which a global (`GLOBAL`, `STACK_GLOBAL`) stays a
//! [`Value::Global`] name and a call (`REDUCE`, `NEWOBJ`, `NEWOBJ_EX`) stays an [`Object`]
//! recording what was called with which arguments, plus whatever `BUILD`, `APPENDS` and
//! `SETITEMS` then did to it. The caller interprets those (as [`crate::read_pth`] does for
//! `torch._utils._rebuild_tensor_v2` and `collections.OrderedDict`). Persistent ids
//! (`BINPERSID`, torch's storages) stay [`Value::PersistentId`].
//!
//! Shared references (`BINPUT`/`BINGET`, `MEMOIZE`) are honoured: a container that is
//! memoised and then filled is seen filled wherever it is fetched from the memo. The result is
//! a tree, so a shared object appears once per reference; a self-referencing structure, and
//! one whose shared references would expand it past 8 times its pickled size (a "billion
//! laughs"), are errors. Since one shared value may be a big string, the bytes of the
//! strings, bytes, big ints and global names the tree holds (a copy per reference) are
//! bounded too, by 8 times the pickle's size plus 1 MiB: a 64 KiB string referenced 50,000
//! times is an error naming the opcode and offset that pushed it, not 3 GB. Protocol 0/1
//! text opcodes (`INT`, `STRING`, `PUT`, `INST`, …), extension codes (`EXT1/2/4`) and
//! out-of-band buffers (`NEXT_BUFFER`) are errors naming the opcode and its offset, as is
//! any byte that is not an opcode. Nothing here panics on malformed input.
//!
//! Lives in kiln-io beside its main user, [`crate::read_pth`]; kiln-beam reads cn2en's pickled
//! vocabularies with it too.
//!
//! Depends only on `std` and `thiserror`.
//!
//! ```
//! use kiln_io::pickle::{loads, Value};
//! // pickle.dumps({"a": [1, 2.5, None]}, protocol=2)
//! let bytes = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01]q\x02(K\x01G@\x04\x00\x00\x00\x00\x00\x00Nes.";
//! let v = loads(bytes)?;
//! assert_eq!(
//!     v.get("a"),
//!     Some(&Value::List(vec![Value::Int(1), Value::Float(2.5), Value::None]))
//! );
//! # Ok::<(), kiln_io::pickle::PickleError>(())
//! ```

use std::collections::HashMap;

/// A value decoded from a pickle.
///
/// ```
/// use kiln_io::pickle::Value;
/// let v = Value::Dict(vec![(Value::Str("n".into()), Value::Int(3))]);
/// assert_eq!(v.get("n").and_then(Value::as_int), Some(3));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An `int` that fits 64 bits.
    Int(i64),
    /// A larger `int`: little-endian two's-complement bytes, as `LONG1`/`LONG4` store them.
    BigInt(Vec<u8>),
    /// A `float`.
    Float(f64),
    /// A `str` (and a Python 2 `str` whose bytes are ASCII).
    Str(String),
    /// `bytes`, `bytearray`, or a Python 2 `str` that is not ASCII.
    Bytes(Vec<u8>),
    /// A `list`.
    List(Vec<Value>),
    /// A `tuple`.
    Tuple(Vec<Value>),
    /// A `dict`, in insertion order.
    Dict(Vec<(Value, Value)>),
    /// A `set`, in pickled order.
    Set(Vec<Value>),
    /// A `frozenset`, in pickled order.
    FrozenSet(Vec<Value>),
    /// A global name (a class or function), not imported.
    Global {
        /// The module, e.g. `collections`.
        module: String,
        /// The qualified name, e.g. `OrderedDict`.
        name: String,
    },
    /// The result of calling something (`REDUCE`, `NEWOBJ`, `NEWOBJ_EX`).
    Object(Box<Object>),
    /// A persistent id (`BINPERSID`): a reference to data stored outside the pickle.
    PersistentId(Box<Value>),
}

/// A call recorded by the unpickler: `callable(*args, **kwargs)` (`REDUCE`) or
/// `cls.__new__(cls, *args, **kwargs)` (`NEWOBJ`, `NEWOBJ_EX`), then `__setstate__(state)`
/// (`BUILD`), then appends and item assignments made on the result.
///
/// ```
/// use kiln_io::pickle::{loads, Value};
/// // pickle.dumps(collections.OrderedDict(a=1), protocol=2)
/// let v = loads(b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01X\x01\x00\x00\x00aq\x02K\x01s.")?;
/// let Value::Object(o) = &v else { panic!() };
/// assert!(o.callable.is_global("collections", "OrderedDict"));
/// assert_eq!(o.entries, vec![(Value::Str("a".into()), Value::Int(1))]);
/// assert_eq!(v.get("a"), Some(&Value::Int(1)));
/// # Ok::<(), kiln_io::pickle::PickleError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// What was called: usually a [`Value::Global`].
    pub callable: Value,
    /// The positional arguments.
    pub args: Vec<Value>,
    /// The keyword arguments (`NEWOBJ_EX` only).
    pub kwargs: Vec<(Value, Value)>,
    /// The state given by `BUILD`, if any (for a plain class: its `__dict__`).
    pub state: Option<Value>,
    /// Items appended to the object (`APPEND`, `APPENDS`): list subclasses.
    pub items: Vec<Value>,
    /// Items assigned to the object (`SETITEM`, `SETITEMS`): dict subclasses such as
    /// `collections.OrderedDict`.
    pub entries: Vec<(Value, Value)>,
}

impl Value {
    /// The Python type's name, for messages (`"dict"`, `"list"`, `"object"`, …).
    ///
    /// ```
    /// assert_eq!(kiln_io::pickle::Value::Int(1).type_name(), "int");
    /// ```
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(_) => "dict",
            Value::Set(_) => "set",
            Value::FrozenSet(_) => "frozenset",
            Value::Global { .. } => "global",
            Value::Object(_) => "object",
            Value::PersistentId(_) => "persistent id",
        }
    }

    /// The string, if this is a `str`.
    ///
    /// ```
    /// assert_eq!(kiln_io::pickle::Value::Str("x".into()).as_str(), Some("x"));
    /// ```
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if this is an `int` that fits 64 bits (or a `bool`, as in Python).
    ///
    /// ```
    /// assert_eq!(kiln_io::pickle::Value::Bool(true).as_int(), Some(1));
    /// ```
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }

    /// The number as `f64`, if this is a `float` or an `int`.
    ///
    /// ```
    /// assert_eq!(kiln_io::pickle::Value::Int(2).as_f64(), Some(2.0));
    /// ```
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    /// The elements, if this is a `list` or a `tuple`.
    ///
    /// ```
    /// use kiln_io::pickle::Value;
    /// assert_eq!(Value::Tuple(vec![Value::None]).as_seq().map(|s| s.len()), Some(1));
    /// ```
    pub fn as_seq(&self) -> Option<&[Value]> {
        match self {
            Value::List(v) | Value::Tuple(v) => Some(v),
            _ => None,
        }
    }

    /// The key/value pairs, if this is a `dict`, or the items assigned to an object (an
    /// `OrderedDict`, say; empty for an object that got none).
    ///
    /// ```
    /// use kiln_io::pickle::Value;
    /// assert_eq!(Value::Dict(vec![]).entries().map(|e| e.len()), Some(0));
    /// assert!(Value::Int(0).entries().is_none());
    /// ```
    pub fn entries(&self) -> Option<&[(Value, Value)]> {
        match self {
            Value::Dict(e) => Some(e),
            Value::Object(o) => Some(&o.entries),
            _ => None,
        }
    }

    /// Looks up a string key: an item of a `dict` (or of an object's assigned items), else an
    /// attribute of an object (a key of the `dict` its `BUILD` state holds).
    ///
    /// ```
    /// use kiln_io::pickle::Value;
    /// let d = Value::Dict(vec![(Value::Str("k".into()), Value::None)]);
    /// assert_eq!(d.get("k"), Some(&Value::None));
    /// assert_eq!(d.get("z"), None);
    /// ```
    pub fn get(&self, key: &str) -> Option<&Value> {
        let find = |e: &'_ [(Value, Value)]| -> Option<usize> {
            e.iter().position(|(k, _)| k.as_str() == Some(key))
        };
        match self {
            Value::Dict(e) => find(e).map(|i| &e[i].1),
            Value::Object(o) => {
                if let Some(i) = find(&o.entries) {
                    return Some(&o.entries[i].1);
                }
                match &o.state {
                    Some(s @ Value::Dict(_)) => s.get(key),
                    // (dict state, slot state), as `object.__reduce_ex__` writes for slots
                    Some(Value::Tuple(t)) => t.iter().find_map(|s| s.get(key)),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// Whether this is the global `module.name`.
    ///
    /// ```
    /// use kiln_io::pickle::Value;
    /// let g = Value::Global { module: "torch".into(), name: "FloatStorage".into() };
    /// assert!(g.is_global("torch", "FloatStorage"));
    /// ```
    pub fn is_global(&self, module: &str, name: &str) -> bool {
        matches!(self, Value::Global { module: m, name: n } if m == module && n == name)
    }
}

/// Why a pickle could not be read. Offsets are byte offsets of the opcode in the input.
///
/// ```
/// use kiln_io::pickle::{loads, PickleError};
/// let e = loads(b"\x80\x02\xff.").unwrap_err();
/// assert_eq!(e, PickleError::UnknownOpcode { opcode: 0xff, offset: 2 });
/// assert!(e.to_string().contains("0xff") && e.to_string().contains("offset 2"));
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PickleError {
    /// A byte that is no pickle opcode.
    #[error("pickle: unknown opcode 0x{opcode:02x} at offset {offset}")]
    UnknownOpcode {
        /// The byte.
        opcode: u8,
        /// Where it is.
        offset: usize,
    },
    /// An opcode this reader deliberately does not implement.
    #[error("pickle: opcode {name} (0x{opcode:02x}) at offset {offset} is not supported: {why}")]
    Unsupported {
        /// The opcode's name in Python's `pickletools`.
        name: &'static str,
        /// The byte.
        opcode: u8,
        /// Where it is.
        offset: usize,
        /// Why, and what to do instead.
        why: &'static str,
    },
    /// A protocol newer than 5.
    #[error("pickle: protocol {version} at offset {offset} is not supported (2 to 5 are)")]
    Protocol {
        /// The protocol number.
        version: u8,
        /// Where the `PROTO` opcode is.
        offset: usize,
    },
    /// The input ends inside an opcode's argument.
    #[error("pickle: truncated: {name} at offset {offset} needs {needed} bytes of argument, {available} are left")]
    Truncated {
        /// The opcode's name.
        name: &'static str,
        /// Where it is.
        offset: usize,
        /// The bytes it needs.
        needed: u64,
        /// The bytes left.
        available: usize,
    },
    /// The input ends without a `STOP` opcode.
    #[error("pickle: truncated: the data ends at offset {offset} without a STOP opcode")]
    NoStop {
        /// The length of the input.
        offset: usize,
    },
    /// An opcode whose operands are wrong: an empty stack, no mark, a missing memo entry, a
    /// string that is not UTF-8, an append to something that is no list, …
    #[error("pickle: {name} at offset {offset}: {message}")]
    Malformed {
        /// The opcode's name.
        name: &'static str,
        /// Where it is.
        offset: usize,
        /// What is wrong.
        message: String,
    },
    /// The decoded structure cannot be a tree: it refers to itself, nests too deeply, or
    /// expands past the size limit through shared references.
    #[error("pickle: {0}")]
    Structure(String),
}

/// Reads one pickle from the start of `data`; bytes after its `STOP` are ignored, as Python's
/// `pickle.loads` does.
///
/// ```
/// // pickle.dumps((1, "x"), protocol=4)
/// let v = kiln_io::pickle::loads(b"\x80\x04\x95\x09\x00\x00\x00\x00\x00\x00\x00K\x01\x8c\x01x\x94\x86\x94.")?;
/// assert_eq!(v.as_seq().map(|s| s.len()), Some(2));
/// # Ok::<(), kiln_io::pickle::PickleError>(())
/// ```
pub fn loads(data: &[u8]) -> Result<Value, PickleError> {
    loads_prefix(data).map(|(v, _)| v)
}

/// Reads one pickle from the start of `data` and returns it with the number of bytes it took
/// (up to and including its `STOP`), for streams of several pickles.
///
/// ```
/// // pickle.dumps(None, protocol=2) twice
/// let (v, used) = kiln_io::pickle::loads_prefix(b"\x80\x02N.\x80\x02N.")?;
/// assert_eq!((v, used), (kiln_io::pickle::Value::None, 4));
/// # Ok::<(), kiln_io::pickle::PickleError>(())
/// ```
pub fn loads_prefix(data: &[u8]) -> Result<(Value, usize), PickleError> {
    let mut m = Machine {
        data,
        pos: 0,
        at: 0,
        name: "",
        arena: Vec::new(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        origins: Vec::new(),
    };
    let root = m.run()?;
    let byte_budget = m.pos.saturating_mul(8).saturating_add(1 << 20);
    let mut b = Builder {
        arena: &m.arena,
        origins: &m.origins,
        data: m.data,
        visiting: vec![false; m.arena.len()],
        // a tree may repeat shared values, but not without bound: a few references to a big
        // table are fine, a "billion laughs" of nested shared lists is an error
        budget: m.arena.len().saturating_mul(8).max(1 << 20),
        // nor may it repeat one big string without bound: the strings, bytes, big ints and
        // global names the tree holds (each reference a copy) count their bytes too
        byte_budget,
        byte_limit: byte_budget,
    };
    Ok((b.build(root, 0)?, m.pos))
}

/// A node in the unpickler's arena; children are arena indices, so a memoised container that
/// is filled later is seen filled wherever it is referenced.
#[derive(Debug)]
enum Node {
    Leaf(Value),
    List(Vec<usize>),
    Tuple(Vec<usize>),
    Dict(Vec<(usize, usize)>),
    Set(Vec<usize>),
    FrozenSet(Vec<usize>),
    Object {
        callable: usize,
        args: usize,
        kwargs: Option<usize>,
        state: Option<usize>,
        items: Vec<usize>,
        entries: Vec<(usize, usize)>,
    },
    PersId(usize),
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    /// The offset of the opcode being run, and its name, for errors.
    at: usize,
    name: &'static str,
    arena: Vec<Node>,
    stack: Vec<usize>,
    marks: Vec<usize>,
    memo: HashMap<u64, usize>,
    /// The offset of the opcode that made each arena node (parallel to `arena`), so that the
    /// [`Builder`] can name where an over-shared string was pushed.
    origins: Vec<usize>,
}

/// Opcodes by byte: name, and whether this reader runs it.
fn opcode_name(op: u8) -> Option<&'static str> {
    Some(match op {
        b'(' => "MARK",
        b'.' => "STOP",
        b'0' => "POP",
        b'1' => "POP_MARK",
        b'2' => "DUP",
        b'F' => "FLOAT",
        b'I' => "INT",
        b'J' => "BININT",
        b'K' => "BININT1",
        b'L' => "LONG",
        b'M' => "BININT2",
        b'N' => "NONE",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        b'R' => "REDUCE",
        b'S' => "STRING",
        b'T' => "BINSTRING",
        b'U' => "SHORT_BINSTRING",
        b'V' => "UNICODE",
        b'X' => "BINUNICODE",
        b'a' => "APPEND",
        b'b' => "BUILD",
        b'c' => "GLOBAL",
        b'd' => "DICT",
        b'}' => "EMPTY_DICT",
        b'e' => "APPENDS",
        b'g' => "GET",
        b'h' => "BINGET",
        b'i' => "INST",
        b'j' => "LONG_BINGET",
        b'l' => "LIST",
        b']' => "EMPTY_LIST",
        b'o' => "OBJ",
        b'p' => "PUT",
        b'q' => "BINPUT",
        b'r' => "LONG_BINPUT",
        b's' => "SETITEM",
        b't' => "TUPLE",
        b')' => "EMPTY_TUPLE",
        b'u' => "SETITEMS",
        b'G' => "BINFLOAT",
        0x80 => "PROTO",
        0x81 => "NEWOBJ",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        0x85 => "TUPLE1",
        0x86 => "TUPLE2",
        0x87 => "TUPLE3",
        0x88 => "NEWTRUE",
        0x89 => "NEWFALSE",
        0x8a => "LONG1",
        0x8b => "LONG4",
        b'B' => "BINBYTES",
        b'C' => "SHORT_BINBYTES",
        0x8c => "SHORT_BINUNICODE",
        0x8d => "BINUNICODE8",
        0x8e => "BINBYTES8",
        0x8f => "EMPTY_SET",
        0x90 => "ADDITEMS",
        0x91 => "FROZENSET",
        0x92 => "NEWOBJ_EX",
        0x93 => "STACK_GLOBAL",
        0x94 => "MEMOIZE",
        0x95 => "FRAME",
        0x96 => "BYTEARRAY8",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => return None,
    })
}

impl<'a> Machine<'a> {
    fn malformed(&self, message: impl Into<String>) -> PickleError {
        PickleError::Malformed {
            name: self.name,
            offset: self.at,
            message: message.into(),
        }
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], PickleError> {
        let left = self.data.len() - self.pos;
        if n > left as u64 {
            return Err(PickleError::Truncated {
                name: self.name,
                offset: self.at,
                needed: n,
                available: left,
            });
        }
        let s = &self.data[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], PickleError> {
        let s = self.take(N as u64)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, PickleError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, PickleError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A text line ending in `\n` (without it), as `GLOBAL` has.
    fn line(&mut self) -> Result<&'a str, PickleError> {
        let rest = &self.data[self.pos..];
        let n = rest
            .iter()
            .position(|&c| c == b'\n')
            .ok_or(PickleError::Truncated {
                name: self.name,
                offset: self.at,
                needed: rest.len() as u64 + 1,
                available: rest.len(),
            })?;
        self.pos += n + 1;
        std::str::from_utf8(&rest[..n]).map_err(|_| self.malformed("the name is not UTF-8"))
    }

    fn node(&mut self, n: Node) -> usize {
        self.arena.push(n);
        self.origins.push(self.at);
        self.arena.len() - 1
    }

    fn push(&mut self, n: Node) {
        let i = self.node(n);
        self.stack.push(i);
    }

    fn pop(&mut self) -> Result<usize, PickleError> {
        // the stack above the last mark is all that an opcode may pop
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.malformed("the stack is empty"));
        }
        self.stack
            .pop()
            .ok_or_else(|| self.malformed("the stack is empty"))
    }

    fn top(&self) -> Result<usize, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.malformed("the stack is empty"));
        }
        self.stack
            .last()
            .copied()
            .ok_or_else(|| self.malformed("the stack is empty"))
    }

    fn pop_mark(&mut self) -> Result<Vec<usize>, PickleError> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| self.malformed("no MARK to pop to"))?;
        Ok(self.stack.split_off(m))
    }

    fn leaf(&self, i: usize) -> Option<&Value> {
        match self.arena.get(i) {
            Some(Node::Leaf(v)) => Some(v),
            _ => None,
        }
    }

    fn text(&self, bytes: &[u8]) -> Result<Value, PickleError> {
        String::from_utf8(bytes.to_vec())
            .map(Value::Str)
            .map_err(|_| self.malformed("the string is not valid UTF-8"))
    }

    fn memo_get(&mut self, key: u64) -> Result<(), PickleError> {
        let i = *self
            .memo
            .get(&key)
            .ok_or_else(|| self.malformed(format!("memo entry {key} was never stored")))?;
        self.stack.push(i);
        Ok(())
    }

    fn memo_put(&mut self, key: u64) -> Result<(), PickleError> {
        let i = self.top()?;
        self.memo.insert(key, i);
        Ok(())
    }

    fn int_bytes(bytes: &[u8]) -> Value {
        // little-endian two's complement
        if bytes.len() <= 8 {
            let fill = if bytes.last().is_some_and(|&b| b & 0x80 != 0) {
                0xff
            } else {
                0
            };
            let mut a = [fill; 8];
            a[..bytes.len()].copy_from_slice(bytes);
            Value::Int(i64::from_le_bytes(a))
        } else {
            // shortest form: fits i64 when the high bytes are only sign extension
            let sign = if bytes.last().is_some_and(|&b| b & 0x80 != 0) {
                0xff
            } else {
                0
            };
            let fits =
                bytes[8..].iter().all(|&b| b == sign) && (bytes[7] & 0x80 != 0) == (sign != 0);
            if fits {
                Value::Int(i64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8])))
            } else {
                Value::BigInt(bytes.to_vec())
            }
        }
    }

    fn unsupported(&self, op: u8, why: &'static str) -> PickleError {
        PickleError::Unsupported {
            name: self.name,
            opcode: op,
            offset: self.at,
            why,
        }
    }

    /// Runs the program to its `STOP`; returns the arena index of the result.
    fn run(&mut self) -> Result<usize, PickleError> {
        loop {
            self.at = self.pos;
            let Some(&op) = self.data.get(self.pos) else {
                return Err(PickleError::NoStop { offset: self.pos });
            };
            self.pos += 1;
            self.name = opcode_name(op).ok_or(PickleError::UnknownOpcode {
                opcode: op,
                offset: self.at,
            })?;
            match op {
                0x80 => {
                    let v = self.u8()?;
                    if v > 5 {
                        return Err(PickleError::Protocol {
                            version: v,
                            offset: self.at,
                        });
                    }
                }
                0x95 => {
                    // FRAME: a length hint; the framed opcodes follow inline
                    let n = self.u64()?;
                    if n > (self.data.len() - self.pos) as u64 {
                        return Err(PickleError::Truncated {
                            name: self.name,
                            offset: self.at,
                            needed: n,
                            available: self.data.len() - self.pos,
                        });
                    }
                }
                b'.' => {
                    // (values left under the result are ignored, as Python does)
                    return self.pop();
                }
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    if self.stack.len() > self.marks.last().copied().unwrap_or(0) {
                        self.pop()?;
                    } else {
                        self.pop_mark()?;
                    }
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let t = self.top()?;
                    self.stack.push(t);
                }
                b'N' => self.push(Node::Leaf(Value::None)),
                0x88 => self.push(Node::Leaf(Value::Bool(true))),
                0x89 => self.push(Node::Leaf(Value::Bool(false))),
                b'J' => {
                    let v = i32::from_le_bytes(self.array()?);
                    self.push(Node::Leaf(Value::Int(i64::from(v))));
                }
                b'K' => {
                    let v = self.u8()?;
                    self.push(Node::Leaf(Value::Int(i64::from(v))));
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.array()?);
                    self.push(Node::Leaf(Value::Int(i64::from(v))));
                }
                0x8a | 0x8b => {
                    let n = if op == 0x8a {
                        u64::from(self.u8()?)
                    } else {
                        let n = i32::from_le_bytes(self.array()?);
                        u64::try_from(n)
                            .map_err(|_| self.malformed("negative byte count for LONG4"))?
                    };
                    let b = self.take(n)?;
                    self.push(Node::Leaf(Self::int_bytes(b)));
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.array()?);
                    self.push(Node::Leaf(Value::Float(v)));
                }
                0x8c | b'X' | 0x8d => {
                    let n = match op {
                        0x8c => u64::from(self.u8()?),
                        b'X' => u64::from(self.u32()?),
                        _ => self.u64()?,
                    };
                    let b = self.take(n)?;
                    let v = self.text(b)?;
                    self.push(Node::Leaf(v));
                }
                b'C' | b'B' | 0x8e | 0x96 => {
                    let n = match op {
                        b'C' => u64::from(self.u8()?),
                        b'B' => u64::from(self.u32()?),
                        _ => self.u64()?,
                    };
                    let b = self.take(n)?;
                    self.push(Node::Leaf(Value::Bytes(b.to_vec())));
                }
                b'U' | b'T' => {
                    // Python 2 str: text when ASCII, bytes otherwise
                    let n = if op == b'U' {
                        u64::from(self.u8()?)
                    } else {
                        let n = i32::from_le_bytes(self.array()?);
                        u64::try_from(n)
                            .map_err(|_| self.malformed("negative byte count for BINSTRING"))?
                    };
                    let b = self.take(n)?;
                    let v = if b.is_ascii() {
                        self.text(b)?
                    } else {
                        Value::Bytes(b.to_vec())
                    };
                    self.push(Node::Leaf(v));
                }
                b']' => self.push(Node::List(vec![])),
                b')' => self.push(Node::Tuple(vec![])),
                b'}' => self.push(Node::Dict(vec![])),
                0x8f => self.push(Node::Set(vec![])),
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push(Node::List(items));
                }
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Node::Tuple(items));
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    self.push(Node::Tuple(items));
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    if items.len() % 2 != 0 {
                        return Err(self.malformed("an odd number of items for a dict"));
                    }
                    let pairs = items.chunks_exact(2).map(|c| (c[0], c[1])).collect();
                    self.push(Node::Dict(pairs));
                }
                0x91 => {
                    let items = self.pop_mark()?;
                    self.push(Node::FrozenSet(items));
                }
                b'a' | b'e' => {
                    let items = if op == b'a' {
                        vec![self.pop()?]
                    } else {
                        self.pop_mark()?
                    };
                    let target = self.top()?;
                    let kind = self.kind(target);
                    match self.arena.get_mut(target) {
                        Some(Node::List(v)) | Some(Node::Object { items: v, .. }) => {
                            v.extend(items)
                        }
                        _ => {
                            return Err(
                                self.malformed(format!("cannot append to a {kind}"))
                            )
                        }
                    }
                }
                b's' | b'u' => {
                    let items = if op == b's' {
                        let v = self.pop()?;
                        let k = self.pop()?;
                        vec![k, v]
                    } else {
                        self.pop_mark()?
                    };
                    if items.len() % 2 != 0 {
                        return Err(self.malformed("an odd number of items for SETITEMS"));
                    }
                    let target = self.top()?;
                    let kind = self.kind(target);
                    let pairs = items.chunks_exact(2).map(|c| (c[0], c[1]));
                    match self.arena.get_mut(target) {
                        Some(Node::Dict(e)) | Some(Node::Object { entries: e, .. }) => {
                            e.extend(pairs)
                        }
                        _ => {
                            return Err(self.malformed(format!(
                                "cannot assign items to a {kind}"
                            )))
                        }
                    }
                }
                0x90 => {
                    let items = self.pop_mark()?;
                    let target = self.top()?;
                    let kind = self.kind(target);
                    match self.arena.get_mut(target) {
                        Some(Node::Set(v)) => v.extend(items),
                        _ => return Err(self.malformed(format!("cannot add items to a {kind}"))),
                    }
                }
                b'c' => {
                    let module = self.line()?.to_string();
                    let name = self.line()?.to_string();
                    self.push(Node::Leaf(Value::Global { module, name }));
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Some(Value::Str(module)), Some(Value::Str(name))) =
                        (self.leaf(module), self.leaf(name))
                    else {
                        return Err(self.malformed("module and name must be strings"));
                    };
                    let g = Value::Global {
                        module: module.clone(),
                        name: name.clone(),
                    };
                    self.push(Node::Leaf(g));
                }
                b'R' | 0x81 => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    if !matches!(self.arena.get(args), Some(Node::Tuple(_))) {
                        return Err(self.malformed(format!(
                            "the arguments must be a tuple, not a {}",
                            self.kind(args)
                        )));
                    }
                    self.push(Node::Object {
                        callable,
                        args,
                        kwargs: None,
                        state: None,
                        items: vec![],
                        entries: vec![],
                    });
                }
                0x92 => {
                    let kwargs = self.pop()?;
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    if !matches!(self.arena.get(args), Some(Node::Tuple(_)))
                        || !matches!(self.arena.get(kwargs), Some(Node::Dict(_)))
                    {
                        return Err(self.malformed("the arguments must be a tuple and a dict"));
                    }
                    self.push(Node::Object {
                        callable,
                        args,
                        kwargs: Some(kwargs),
                        state: None,
                        items: vec![],
                        entries: vec![],
                    });
                }
                b'b' => {
                    let st = self.pop()?;
                    let target = self.top()?;
                    let kind = self.kind(target);
                    match self.arena.get_mut(target) {
                        Some(Node::Object { state, .. }) => *state = Some(st),
                        _ => return Err(self.malformed(format!("cannot set the state of a {kind}"))),
                    }
                }
                b'Q' => {
                    let pid = self.pop()?;
                    self.push(Node::PersId(pid));
                }
                b'q' => {
                    let k = self.u8()?;
                    self.memo_put(u64::from(k))?;
                }
                b'r' => {
                    let k = self.u32()?;
                    self.memo_put(u64::from(k))?;
                }
                0x94 => {
                    let k = self.memo.len() as u64;
                    self.memo_put(k)?;
                }
                b'h' => {
                    let k = self.u8()?;
                    self.memo_get(u64::from(k))?;
                }
                b'j' => {
                    let k = self.u32()?;
                    self.memo_get(u64::from(k))?;
                }
                0x82..=0x84 => {
                    return Err(self.unsupported(
                        op,
                        "extension codes need Python's copyreg registry",
                    ))
                }
                0x97 | 0x98 => {
                    return Err(self.unsupported(
                        op,
                        "out-of-band buffers (pickle protocol 5 `buffers=`) are not stored in the pickle",
                    ))
                }
                _ => {
                    return Err(self.unsupported(
                        op,
                        "protocol 0/1 text opcodes are not read; re-save with protocol 2 or later",
                    ))
                }
            }
        }
    }

    fn kind(&self, i: usize) -> &'static str {
        match self.arena.get(i) {
            Some(Node::Leaf(v)) => v.type_name(),
            Some(Node::List(_)) => "list",
            Some(Node::Tuple(_)) => "tuple",
            Some(Node::Dict(_)) => "dict",
            Some(Node::Set(_)) => "set",
            Some(Node::FrozenSet(_)) => "frozenset",
            Some(Node::Object { .. }) => "object",
            Some(Node::PersId(_)) => "persistent id",
            None => "nothing",
        }
    }
}

/// Turns the arena into a [`Value`] tree.
struct Builder<'a> {
    arena: &'a [Node],
    /// The offset of the opcode that made each arena node.
    origins: &'a [usize],
    /// The pickle, to name the opcode at an origin.
    data: &'a [u8],
    visiting: Vec<bool>,
    /// How many more values the tree may have.
    budget: usize,
    /// How many more bytes of strings, bytes, big ints and global names the tree may hold
    /// (each reference to a memoised one is a copy).
    byte_budget: usize,
    /// The whole byte budget: 8 times the pickle's size plus 1 MiB.
    byte_limit: usize,
}

/// The heap bytes a leaf value holds (and a clone of it copies).
fn leaf_bytes(v: &Value) -> usize {
    match v {
        Value::Str(s) => s.len(),
        Value::Bytes(b) | Value::BigInt(b) => b.len(),
        Value::Global { module, name } => module.len() + name.len(),
        _ => 0,
    }
}

impl Builder<'_> {
    fn build(&mut self, i: usize, depth: usize) -> Result<Value, PickleError> {
        if depth > 500 {
            return Err(PickleError::Structure(
                "the structure nests more than 500 levels deep".into(),
            ));
        }
        if self.budget == 0 {
            return Err(PickleError::Structure(
                "shared references expand the structure to more than 8 times its pickled size (or a million values)".into(),
            ));
        }
        self.budget -= 1;
        let node = self
            .arena
            .get(i)
            .ok_or_else(|| PickleError::Structure("a dangling reference".into()))?;
        if let Node::Leaf(v) = node {
            let n = leaf_bytes(v);
            if n > self.byte_budget {
                let offset = self.origins.get(i).copied().unwrap_or(0);
                let op = self
                    .data
                    .get(offset)
                    .and_then(|&b| opcode_name(b))
                    .unwrap_or("an opcode");
                return Err(PickleError::Structure(format!(
                    "shared references expand the strings and bytes past {} bytes (8 times the pickle's size plus 1 MiB): the {n}-byte {} pushed by {op} at offset {offset} is copied once per reference",
                    self.byte_limit,
                    v.type_name()
                )));
            }
            self.byte_budget -= n;
            return Ok(v.clone());
        }
        if self.visiting[i] {
            return Err(PickleError::Structure(
                "the structure contains itself (a recursive reference), which a tree cannot hold"
                    .into(),
            ));
        }
        self.visiting[i] = true;
        let d = depth + 1;
        let seq = |b: &mut Self, v: &[usize]| -> Result<Vec<Value>, PickleError> {
            v.iter().map(|&c| b.build(c, d)).collect()
        };
        let pairs =
            |b: &mut Self, v: &[(usize, usize)]| -> Result<Vec<(Value, Value)>, PickleError> {
                v.iter()
                    .map(|&(k, x)| Ok((b.build(k, d)?, b.build(x, d)?)))
                    .collect()
            };
        let out = match node {
            Node::Leaf(v) => v.clone(),
            Node::List(v) => Value::List(seq(self, v)?),
            Node::Tuple(v) => Value::Tuple(seq(self, v)?),
            Node::Set(v) => Value::Set(seq(self, v)?),
            Node::FrozenSet(v) => Value::FrozenSet(seq(self, v)?),
            Node::Dict(v) => Value::Dict(pairs(self, v)?),
            Node::PersId(p) => Value::PersistentId(Box::new(self.build(*p, d)?)),
            Node::Object {
                callable,
                args,
                kwargs,
                state,
                items,
                entries,
            } => {
                let args = match self.build(*args, d)? {
                    Value::Tuple(a) => a,
                    other => vec![other],
                };
                let kwargs = match kwargs {
                    Some(k) => match self.build(*k, d)? {
                        Value::Dict(e) => e,
                        _ => vec![],
                    },
                    None => vec![],
                };
                Value::Object(Box::new(Object {
                    callable: self.build(*callable, d)?,
                    args,
                    kwargs,
                    state: match state {
                        Some(s) => Some(self.build(*s, d)?),
                        None => None,
                    },
                    items: seq(self, items)?,
                    entries: pairs(self, entries)?,
                }))
            }
        };
        self.visiting[i] = false;
        Ok(out)
    }
}
