//! Element types, scalar values and numpy's type-promotion rules (NEP 50).
//!
//! Depends on nothing else in the crate but [`crate::error`].

use std::fmt;

/// The element type of an array.
///
/// ```
/// use kiln_ir::DType;
/// assert_eq!(DType::F32.size_bytes(), 4);
/// assert!(DType::I64.is_int());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// `bool`, one byte per element.
    Bool,
    /// `i32`.
    I32,
    /// `i64`.
    I64,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
}

/// The kind of a dtype: the coarse category used by the promotion rules.
///
/// ```
/// use kiln_ir::{DType, Kind};
/// assert_eq!(DType::I32.kind(), Kind::Int);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Booleans.
    Bool,
    /// Signed integers.
    Int,
    /// Floating point.
    Float,
}

impl DType {
    /// Every dtype, in promotion order.
    pub const ALL: [DType; 5] = [DType::Bool, DType::I32, DType::I64, DType::F32, DType::F64];

    /// Bytes per element.
    ///
    /// ```
    /// assert_eq!(kiln_ir::DType::F64.size_bytes(), 8);
    /// ```
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool => 1,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// The kind (bool, int or float).
    ///
    /// ```
    /// assert_eq!(kiln_ir::DType::F32.kind(), kiln_ir::Kind::Float);
    /// ```
    pub fn kind(self) -> Kind {
        match self {
            DType::Bool => Kind::Bool,
            DType::I32 | DType::I64 => Kind::Int,
            DType::F32 | DType::F64 => Kind::Float,
        }
    }

    /// True for `f32` and `f64`.
    ///
    /// ```
    /// assert!(kiln_ir::DType::F32.is_float());
    /// ```
    pub fn is_float(self) -> bool {
        self.kind() == Kind::Float
    }

    /// True for `i32` and `i64`.
    ///
    /// ```
    /// assert!(!kiln_ir::DType::F32.is_int());
    /// ```
    pub fn is_int(self) -> bool {
        self.kind() == Kind::Int
    }

    /// The numpy name of the dtype (`"float32"`, ...).
    ///
    /// ```
    /// assert_eq!(kiln_ir::DType::I64.numpy_name(), "int64");
    /// ```
    pub fn numpy_name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    /// Parses a numpy dtype name (`"float32"`, `"f32"`, `"bool"`, ...).
    ///
    /// ```
    /// assert_eq!(kiln_ir::DType::parse("float32"), Some(kiln_ir::DType::F32));
    /// ```
    pub fn parse(name: &str) -> Option<DType> {
        Some(match name {
            "bool" => DType::Bool,
            "int32" | "i32" => DType::I32,
            "int64" | "i64" => DType::I64,
            "float32" | "f32" => DType::F32,
            "float64" | "f64" => DType::F64,
            _ => return None,
        })
    }

    /// The float type that float-valued functions (`exp`, `sqrt`, true division, `mean`) of
    /// this dtype produce: floats keep their width, integers and bools give `f64` (as numpy
    /// does for `int32`/`int64`).
    ///
    /// ```
    /// use kiln_ir::DType;
    /// assert_eq!(DType::F32.to_float(), DType::F32);
    /// assert_eq!(DType::I32.to_float(), DType::F64);
    /// ```
    pub fn to_float(self) -> DType {
        match self {
            DType::F32 => DType::F32,
            _ => DType::F64,
        }
    }

    /// numpy's promotion of two *strong* (array) dtypes.
    ///
    /// `i32`/`i64` with `f32` gives `f64`, as in numpy.
    ///
    /// ```
    /// use kiln_ir::DType;
    /// assert_eq!(DType::promote(DType::I32, DType::F32), DType::F64);
    /// assert_eq!(DType::promote(DType::Bool, DType::I32), DType::I32);
    /// ```
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        match (a, b) {
            (x, y) if x == y => x,
            (Bool, x) | (x, Bool) => x,
            (I32, I64) | (I64, I32) => I64,
            (F32, F64) | (F64, F32) => F64,
            (I32 | I64, F32) | (F32, I32 | I64) => F64,
            (I32 | I64, F64) | (F64, I32 | I64) => F64,
            _ => unreachable!("all pairs covered"),
        }
    }

    /// numpy's (NEP 50) promotion of an array dtype with a *weak* scalar of the given kind: a
    /// Rust literal in `x * 2.0` does not widen an `f32` array, an integer literal does not
    /// widen an `i32` array; a float literal with an integer array gives `f64`, an integer
    /// literal with a bool array gives `i64`.
    ///
    /// ```
    /// use kiln_ir::{DType, Kind};
    /// assert_eq!(DType::promote_weak(DType::F32, Kind::Float), DType::F32);
    /// assert_eq!(DType::promote_weak(DType::I32, Kind::Int), DType::I32);
    /// assert_eq!(DType::promote_weak(DType::I32, Kind::Float), DType::F64);
    /// ```
    pub fn promote_weak(array: DType, scalar: Kind) -> DType {
        if scalar <= array.kind() {
            array
        } else {
            Scalar::default_dtype(scalar)
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.numpy_name())
    }
}

/// A scalar value, stored at full width. Its dtype comes from the node that holds it.
///
/// **Equality and hashing are structural: floats compare by bit pattern.** A NaN equals a
/// NaN with the same bits and `0.0 != -0.0`, so a graph holding a NaN constant compares
/// equal to itself (rewrites reach their fixed point, caches find their entries). Use
/// [`Scalar::as_f64`] for numeric comparison.
///
/// ```
/// use kiln_ir::{Scalar, Kind};
/// assert_eq!(Scalar::Float(2.5).kind(), Kind::Float);
/// assert_eq!(Scalar::Int(3).as_f64(), 3.0);
/// assert_eq!(Scalar::Float(f64::NAN), Scalar::Float(f64::NAN));
/// assert_ne!(Scalar::Float(0.0), Scalar::Float(-0.0));
/// ```
#[derive(Clone, Copy, Debug)]
pub enum Scalar {
    /// A boolean.
    Bool(bool),
    /// An integer (any width up to 64 bits).
    Int(i64),
    /// A float (any width up to 64 bits).
    Float(f64),
}

impl PartialEq for Scalar {
    fn eq(&self, other: &Self) -> bool {
        match (*self, *other) {
            (Scalar::Bool(a), Scalar::Bool(b)) => a == b,
            (Scalar::Int(a), Scalar::Int(b)) => a == b,
            (Scalar::Float(a), Scalar::Float(b)) => a.to_bits() == b.to_bits(),
            _ => false,
        }
    }
}

impl Eq for Scalar {}

impl std::hash::Hash for Scalar {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match *self {
            Scalar::Bool(b) => b.hash(state),
            Scalar::Int(i) => i.hash(state),
            Scalar::Float(x) => x.to_bits().hash(state),
        }
    }
}

impl Scalar {
    /// The kind of the value.
    ///
    /// ```
    /// assert_eq!(kiln_ir::Scalar::Bool(true).kind(), kiln_ir::Kind::Bool);
    /// ```
    pub fn kind(self) -> Kind {
        match self {
            Scalar::Bool(_) => Kind::Bool,
            Scalar::Int(_) => Kind::Int,
            Scalar::Float(_) => Kind::Float,
        }
    }

    /// The dtype numpy gives a lone Python scalar of this kind (`bool`, `int64`, `float64`).
    ///
    /// ```
    /// use kiln_ir::{Scalar, Kind, DType};
    /// assert_eq!(Scalar::default_dtype(Kind::Float), DType::F64);
    /// ```
    pub fn default_dtype(kind: Kind) -> DType {
        match kind {
            Kind::Bool => DType::Bool,
            Kind::Int => DType::I64,
            Kind::Float => DType::F64,
        }
    }

    /// The value as `f64` (`true` is 1).
    ///
    /// ```
    /// assert_eq!(kiln_ir::Scalar::Bool(true).as_f64(), 1.0);
    /// ```
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as u8 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(x) => x,
        }
    }

    /// The value as `i64`; floats are truncated toward zero and saturate (NaN gives 0).
    ///
    /// ```
    /// assert_eq!(kiln_ir::Scalar::Float(-2.7).as_i64(), -2);
    /// ```
    pub fn as_i64(self) -> i64 {
        match self {
            Scalar::Bool(b) => b as i64,
            Scalar::Int(i) => i,
            Scalar::Float(x) => x as i64,
        }
    }

    /// Truthiness: non-zero is true (NaN is true, as in numpy).
    ///
    /// ```
    /// assert!(kiln_ir::Scalar::Float(f64::NAN).as_bool());
    /// ```
    pub fn as_bool(self) -> bool {
        match self {
            Scalar::Bool(b) => b,
            Scalar::Int(i) => i != 0,
            Scalar::Float(x) => x != 0.0,
        }
    }

    /// The value converted to `dtype` with kiln's cast rules (see [`crate::Op::Cast`]).
    ///
    /// ```
    /// use kiln_ir::{Scalar, DType};
    /// assert_eq!(Scalar::Float(3.9).cast(DType::I32), Scalar::Int(3));
    /// assert_eq!(Scalar::Int(300).cast(DType::Bool), Scalar::Bool(true));
    /// ```
    pub fn cast(self, dtype: DType) -> Scalar {
        match dtype {
            DType::Bool => Scalar::Bool(self.as_bool()),
            DType::I32 => Scalar::Int(match self {
                Scalar::Float(x) => x as i32 as i64,
                other => other.as_i64() as i32 as i64,
            }),
            DType::I64 => Scalar::Int(self.as_i64()),
            // Integers round to f32 directly: through f64 they could be rounded twice.
            DType::F32 => Scalar::Float(match self {
                Scalar::Int(i) => i as f32 as f64,
                other => other.as_f64() as f32 as f64,
            }),
            DType::F64 => Scalar::Float(self.as_f64()),
        }
    }

    /// Whether the value can be represented in `dtype` without overflow (numpy 2 raises
    /// `OverflowError` for `int32_array + 2**40`; kiln reports [`crate::Error::ScalarOverflow`]).
    ///
    /// ```
    /// use kiln_ir::{Scalar, DType};
    /// assert!(!Scalar::Int(1 << 40).fits(DType::I32));
    /// assert!(Scalar::Int(7).fits(DType::I32));
    /// ```
    pub fn fits(self, dtype: DType) -> bool {
        match (self, dtype) {
            (Scalar::Int(i), DType::I32) => i32::try_from(i).is_ok(),
            _ => true,
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_is_symmetric_and_idempotent() {
        for a in DType::ALL {
            assert_eq!(DType::promote(a, a), a);
            for b in DType::ALL {
                assert_eq!(DType::promote(a, b), DType::promote(b, a));
            }
        }
    }

    #[test]
    fn weak_scalars_follow_nep50() {
        assert_eq!(DType::promote_weak(DType::Bool, Kind::Int), DType::I64);
        assert_eq!(DType::promote_weak(DType::Bool, Kind::Float), DType::F64);
        assert_eq!(DType::promote_weak(DType::I64, Kind::Bool), DType::I64);
        assert_eq!(DType::promote_weak(DType::F64, Kind::Int), DType::F64);
    }
}

macro_rules! scalar_from {
    ($($t:ty => $v:expr),*) => {$(
        impl From<$t> for Scalar {
            fn from(x: $t) -> Scalar {
                #[allow(clippy::redundant_closure_call)]
                ($v)(x)
            }
        }
    )*};
}
scalar_from!(f32 => |x: f32| Scalar::Float(x as f64), f64 => Scalar::Float,
             i32 => |x: i32| Scalar::Int(x as i64), i64 => Scalar::Int, bool => Scalar::Bool);
