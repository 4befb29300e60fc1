//! Shapes, numpy broadcasting and axis normalisation, and relative shapes ([`Dim`],
//! [`SymShape`]: sizes as symbols, as the graph-cache key sees them).
//!
//! Depends on [`crate::error`] and [`crate::dtype`] (for the dtype a size error names).

use crate::dtype::DType;
use crate::error::{Error, Result};
use smallvec::SmallVec;
use std::fmt;

/// The most elements one array may have: `isize::MAX / 8`, so that its bytes, for any
/// dtype (at most 8 bytes an element), fit in an `isize`, Rust's bound on one allocation.
///
/// ```
/// assert_eq!(kiln_ir::MAX_ELEMENTS, (1 << 60) - 1);
/// ```
pub const MAX_ELEMENTS: usize = isize::MAX as usize / 8;

/// The dimensions of an array, outermost first. Rank 0 is a scalar.
///
/// ```
/// use kiln_ir::Shape;
/// let s = Shape::from(&[2, 3][..]);
/// assert_eq!(s.numel(), 6);
/// assert_eq!(s.to_string(), "(2, 3)");
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub SmallVec<[usize; 4]>);

impl Shape {
    /// The rank-0 shape `()`.
    ///
    /// ```
    /// assert_eq!(kiln_ir::Shape::scalar().rank(), 0);
    /// ```
    pub fn scalar() -> Shape {
        Shape(SmallVec::new())
    }

    /// The number of dimensions.
    ///
    /// ```
    /// assert_eq!(kiln_ir::Shape::from(&[4, 5][..]).rank(), 2);
    /// ```
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// The number of elements (1 for rank 0, 0 if any dimension is 0). A product past
    /// `usize::MAX` saturates there instead of wrapping, so it never equals a real count
    /// (every node's shape has at most [`MAX_ELEMENTS`], checked when it is built).
    ///
    /// ```
    /// use kiln_ir::Shape;
    /// assert_eq!(Shape::from(&[4, 0][..]).numel(), 0);
    /// assert_eq!(Shape::from(&[1 << 40, 1 << 30][..]).numel(), usize::MAX);
    /// assert_eq!(Shape::from(&[1 << 40, 1 << 30, 0][..]).numel(), 0);
    /// ```
    pub fn numel(&self) -> usize {
        self.0.iter().fold(1usize, |n, &d| n.saturating_mul(d))
    }

    /// Checks that an array of this shape and `dtype` can exist: at most [`MAX_ELEMENTS`]
    /// elements, so its bytes fit in an `isize` whatever its dtype. `op` is the operation
    /// named in the error.
    ///
    /// ```
    /// use kiln_ir::{DType, Error, Shape};
    /// assert!(Shape::from([1 << 20, 1 << 10]).check_size("zeros", DType::F32).is_ok());
    /// let e = Shape::from([1 << 40, 1 << 30]).check_size("zeros", DType::F32).unwrap_err();
    /// assert!(matches!(e, Error::TooLarge { op: "zeros", .. }));
    /// assert!(e.to_string().contains("1180591620717411303424 elements"), "{e}");
    /// ```
    pub fn check_size(&self, op: &'static str, dtype: DType) -> Result<()> {
        if self.numel() <= MAX_ELEMENTS {
            return Ok(());
        }
        let exact = self
            .0
            .iter()
            .try_fold(1u128, |n, &d| n.checked_mul(d as u128));
        Err(Error::TooLarge {
            op,
            shape: self.clone(),
            dtype,
            elements: match exact {
                Some(n) => n.to_string(),
                None => "more than 2^128".into(),
            },
        })
    }

    /// The dimensions as a slice.
    ///
    /// ```
    /// assert_eq!(kiln_ir::Shape::from(&[4, 5][..]).dims(), &[4, 5]);
    /// ```
    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    /// Row-major (C order) element strides.
    ///
    /// ```
    /// assert_eq!(kiln_ir::Shape::from(&[2, 3, 4][..]).strides(), vec![12, 4, 1]);
    /// ```
    pub fn strides(&self) -> Vec<usize> {
        let mut s = vec![0; self.rank()];
        let mut acc = 1;
        for i in (0..self.rank()).rev() {
            s[i] = acc;
            acc *= self.0[i];
        }
        s
    }

    /// numpy broadcasting of two shapes: align at the right; each pair of dimensions must be
    /// equal or one of them 1.
    ///
    /// ```
    /// use kiln_ir::Shape;
    /// let a = Shape::from(&[4, 1, 3][..]);
    /// let b = Shape::from(&[5, 1][..]);
    /// assert_eq!(Shape::broadcast("add", &a, &b).unwrap().dims(), &[4, 5, 3]);
    /// assert!(Shape::broadcast("add", &a, &Shape::from(&[2][..])).is_err());
    /// ```
    pub fn broadcast(op: &'static str, a: &Shape, b: &Shape) -> Result<Shape> {
        let rank = a.rank().max(b.rank());
        let mut out = SmallVec::with_capacity(rank);
        for i in 0..rank {
            let da = dim_from_right(a, rank - 1 - i);
            let db = dim_from_right(b, rank - 1 - i);
            let d = match (da, db) {
                (x, y) if x == y => x,
                (1, y) => y,
                (x, 1) => x,
                _ => {
                    return Err(Error::ShapeMismatch {
                        op,
                        lhs: a.clone(),
                        rhs: b.clone(),
                        hint: format!(
                            "dimension {i} (counting from the left of the broadcast result) \
                             is {da} in one operand and {db} in the other; numpy broadcasting \
                             needs them equal or one of them 1 (reshape or expand_dims one operand)"
                        ),
                    })
                }
            };
            out.push(d);
        }
        Ok(Shape(out))
    }

    /// Whether `self` can be broadcast to `target` (numpy's `broadcast_to` rule).
    ///
    /// ```
    /// use kiln_ir::Shape;
    /// assert!(Shape::from(&[3, 1][..]).broadcasts_to(&Shape::from(&[2, 3, 4][..])));
    /// assert!(!Shape::from(&[3][..]).broadcasts_to(&Shape::from(&[4][..])));
    /// ```
    pub fn broadcasts_to(&self, target: &Shape) -> bool {
        if self.rank() > target.rank() {
            return false;
        }
        let off = target.rank() - self.rank();
        self.0
            .iter()
            .zip(&target.0[off..])
            .all(|(&s, &t)| s == t || s == 1)
    }

    /// Normalises a possibly negative axis against `rank`.
    ///
    /// ```
    /// use kiln_ir::Shape;
    /// assert_eq!(Shape::normalize_axis("sum", -1, 3).unwrap(), 2);
    /// assert!(Shape::normalize_axis("sum", 3, 3).is_err());
    /// ```
    pub fn normalize_axis(op: &'static str, axis: isize, rank: usize) -> Result<usize> {
        let r = rank as isize;
        if axis >= r || axis < -r {
            return Err(Error::InvalidAxis { op, axis, rank });
        }
        Ok(if axis < 0 {
            (axis + r) as usize
        } else {
            axis as usize
        })
    }

    /// Normalises a list of axes, sorted, rejecting duplicates.
    ///
    /// ```
    /// use kiln_ir::Shape;
    /// assert_eq!(Shape::normalize_axes("sum", &[-1, 0], 3).unwrap(), vec![0, 2]);
    /// assert!(Shape::normalize_axes("sum", &[1, -2], 3).is_err());
    /// ```
    pub fn normalize_axes(op: &'static str, axes: &[isize], rank: usize) -> Result<Vec<usize>> {
        let mut out = Vec::with_capacity(axes.len());
        for &a in axes {
            let n = Shape::normalize_axis(op, a, rank)?;
            if out.contains(&n) {
                return Err(Error::InvalidArgument {
                    op,
                    message: format!("axis {a} appears more than once in {axes:?}"),
                    hint: "list each axis once".into(),
                });
            }
            out.push(n);
        }
        out.sort_unstable();
        Ok(out)
    }
}

fn dim_from_right(s: &Shape, i: usize) -> usize {
    if i < s.rank() {
        s.0[s.rank() - 1 - i]
    } else {
        1
    }
}

impl From<&[usize]> for Shape {
    fn from(d: &[usize]) -> Shape {
        Shape(SmallVec::from_slice(d))
    }
}

impl From<Vec<usize>> for Shape {
    fn from(d: Vec<usize>) -> Shape {
        Shape(SmallVec::from_vec(d))
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(d: [usize; N]) -> Shape {
        Shape(SmallVec::from_slice(&d))
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Formats like numpy: `(2, 3)`, `(5,)`, `()`.
impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{d}")?;
        }
        if self.rank() == 1 {
            write!(f, ",")?;
        }
        write!(f, ")")
    }
}

/// One dimension of a relative shape: a literal 0 or 1, or a size symbol.
///
/// ```
/// use kiln_ir::Dim;
/// assert_eq!(Dim::Sym(0).resolve(&[12]), 12);
/// assert_eq!(Dim::Const(1).resolve(&[12]), 1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A literal size (0 or 1).
    Const(usize),
    /// Symbol `i`, bound to `Bindings::dims[i]`.
    Sym(u32),
}

/// `d3` for symbol 3, the number for a literal: the notation of the IR's and the plan's text
/// forms.
///
/// ```
/// assert_eq!(format!("{} {}", kiln_ir::Dim::Sym(3), kiln_ir::Dim::Const(1)), "d3 1");
/// ```
impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Const(c) => write!(f, "{c}"),
            Dim::Sym(i) => write!(f, "d{i}"),
        }
    }
}

/// A relative shape as text: `[d0, 1, d2]`.
///
/// ```
/// use kiln_ir::{sym_text, Dim};
/// assert_eq!(sym_text(&[Dim::Sym(0), Dim::Const(1)]), "[d0, 1]");
/// ```
pub fn sym_text(shape: &[Dim]) -> String {
    let dims: Vec<String> = shape.iter().map(ToString::to_string).collect();
    format!("[{}]", dims.join(", "))
}

impl Dim {
    /// The concrete size under the symbol values `dims`.
    ///
    /// ```
    /// assert_eq!(kiln_ir::Dim::Sym(1).resolve(&[3, 5]), 5);
    /// ```
    pub fn resolve(self, dims: &[usize]) -> usize {
        match self {
            Dim::Const(c) => c,
            Dim::Sym(s) => dims[s as usize],
        }
    }

    pub(crate) fn code(self) -> u64 {
        match self {
            Dim::Const(c) => c as u64,
            Dim::Sym(s) => 2 + s as u64,
        }
    }
}

/// A shape in relative form.
pub type SymShape = SmallVec<[Dim; 4]>;

/// Resolves a relative shape to a concrete one.
///
/// ```
/// use kiln_ir::{Dim, resolve_shape};
/// let s = resolve_shape(&[Dim::Sym(0), Dim::Const(1)], &[7]);
/// assert_eq!(s.dims(), &[7, 1]);
/// ```
pub fn resolve_shape(shape: &[Dim], dims: &[usize]) -> Shape {
    Shape(shape.iter().map(|d| d.resolve(dims)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive_broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
        let n = a.len().max(b.len());
        let pa: Vec<usize> = vec![1; n - a.len()]
            .into_iter()
            .chain(a.iter().copied())
            .collect();
        let pb: Vec<usize> = vec![1; n - b.len()]
            .into_iter()
            .chain(b.iter().copied())
            .collect();
        pa.iter()
            .zip(&pb)
            .map(|(&x, &y)| {
                if x == y || y == 1 {
                    Some(x)
                } else if x == 1 {
                    Some(y)
                } else {
                    None
                }
            })
            .collect()
    }

    proptest! {
        #[test]
        fn broadcast_matches_naive_rule(a in prop::collection::vec(0usize..4, 0..5),
                                        b in prop::collection::vec(0usize..4, 0..5)) {
            let got = Shape::broadcast("add", &Shape::from(a.clone()), &Shape::from(b.clone()));
            match naive_broadcast(&a, &b) {
                Some(want) => {
                    let got = got.unwrap();
                    prop_assert_eq!(got.dims(), &want[..]);
                    // both operands broadcast to the result
                    prop_assert!(Shape::from(a.clone()).broadcasts_to(&got));
                    prop_assert!(Shape::from(b.clone()).broadcasts_to(&got));
                    // commutative
                    let rev = Shape::broadcast("add", &Shape::from(b), &Shape::from(a)).unwrap();
                    prop_assert_eq!(rev, got);
                }
                None => prop_assert!(got.is_err()),
            }
        }
    }

    #[test]
    fn display_matches_numpy() {
        assert_eq!(Shape::scalar().to_string(), "()");
        assert_eq!(Shape::from([5]).to_string(), "(5,)");
    }
}
