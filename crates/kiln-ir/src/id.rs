//! Typed indices and the vectors indexed by them: [`Id`], [`define_id!`](crate::define_id)
//! and [`IdVec`].
//!
//! Every table of the IR and the plan (nodes, parameters, slots, buffers, kernels, registers)
//! is an [`IdVec`] indexed by its own id type, so that a slot number cannot index the buffers
//! and a node number cannot name a kernel: mixing them does not compile.
//! This is cranelift's `PrimaryMap`/`SecondaryMap` idea in the 150 lines kiln needs: the
//! `cranelift-entity` crate itself requires a newer Rust than the workspace's `rust-version`.
//! An [`IdVec`] has no `Deref` to a slice, on purpose: a plain `usize` cannot index it.
//!
//! Depends on nothing else in the crate.

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

/// A typed index: a `u32` newtype made by [`define_id!`](crate::define_id).
///
/// ```
/// use kiln_ir::{Id, NodeId};
/// let n = NodeId::new(3);
/// assert_eq!(n.index(), 3);
/// assert_eq!(n.to_string(), "%3");
/// ```
pub trait Id: Copy + Eq + Ord + Hash + fmt::Debug {
    /// The id of position `index`.
    ///
    /// Panics past `u32::MAX`: no table of a graph or a plan comes near it (a node takes
    /// more than 100 bytes, so that many would need 400 GiB).
    fn new(index: usize) -> Self;

    /// The position this id names.
    fn index(self) -> usize;
}

/// Defines a typed index: a `Copy` newtype over `u32` implementing [`Id`], printed as its
/// prefix followed by the number (`%3` for a node, `s2` for a slot): the names of the IR's
/// and the plan's text forms.
///
/// ```
/// kiln_ir::define_id! {
///     /// A row of some table.
///     pub struct RowId = "row";
/// }
/// use kiln_ir::Id;
/// assert_eq!(format!("{:?}", RowId::new(7)), "row7");
/// ```
#[macro_export]
macro_rules! define_id {
    ($(#[$meta:meta])* $vis:vis struct $name:ident = $prefix:literal;) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        $vis struct $name(u32);

        impl $crate::Id for $name {
            #[inline]
            fn new(index: usize) -> Self {
                match u32::try_from(index) {
                    Ok(i) => $name(i),
                    Err(_) => panic!(concat!("more than u32::MAX ids of ", stringify!($name))),
                }
            }
            #[inline]
            fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl $name {
            /// The id numbered `raw`.
            #[inline]
            pub const fn from_u32(raw: u32) -> Self {
                $name(raw)
            }

            /// Its number.
            #[inline]
            pub const fn as_u32(self) -> u32 {
                self.0
            }
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

define_id! {
    /// A node of a [`crate::Graph`].
    pub struct NodeId = "%";
}

define_id! {
    /// A parameter: input data bound to a graph ([`crate::Op::Param`], `Bindings::params`).
    pub struct ParamId = "param";
}

/// A vector indexed by the id type `K`: the table that owns the values (`push` hands out the
/// next id) or a dense side table over another table's ids ([`IdVec::filled`]).
///
/// ```
/// use kiln_ir::{IdVec, NodeId};
/// let mut names: IdVec<NodeId, &str> = IdVec::new();
/// let a = names.push("a");
/// let b = names.push("b");
/// assert_eq!(names[b], "b");
/// let mut uses: IdVec<NodeId, u32> = IdVec::filled(0, names.len());
/// uses[a] += 2;
/// assert_eq!(uses.iter().map(|(k, &u)| (k.to_string(), u)).collect::<Vec<_>>(),
///            [("%0".to_string(), 2), ("%1".to_string(), 0)]);
/// ```
///
/// Another id type, or a plain number, does not index it:
///
/// ```compile_fail
/// use kiln_ir::{Id, IdVec, NodeId, ParamId};
/// let v: IdVec<NodeId, i32> = IdVec::from_vec(vec![1, 2]);
/// let _ = v[ParamId::new(0)];
/// ```
///
/// ```compile_fail
/// use kiln_ir::{IdVec, NodeId};
/// let v: IdVec<NodeId, i32> = IdVec::from_vec(vec![1, 2]);
/// let _ = v[0usize];
/// ```
pub struct IdVec<K, V> {
    raw: Vec<V>,
    key: PhantomData<fn(K) -> K>,
}

impl<K: Id, V> IdVec<K, V> {
    /// An empty vector.
    pub const fn new() -> Self {
        IdVec {
            raw: Vec::new(),
            key: PhantomData,
        }
    }

    /// An empty vector with room for `n` values.
    pub fn with_capacity(n: usize) -> Self {
        IdVec::from_vec(Vec::with_capacity(n))
    }

    /// The values of `raw`, the first with id 0.
    pub fn from_vec(raw: Vec<V>) -> Self {
        IdVec {
            raw,
            key: PhantomData,
        }
    }

    /// `len` copies of `value`: a side table over the ids of another table.
    pub fn filled(value: V, len: usize) -> Self
    where
        V: Clone,
    {
        IdVec::from_vec(vec![value; len])
    }

    /// Appends `value` and returns its id.
    #[inline]
    pub fn push(&mut self, value: V) -> K {
        let k = K::new(self.raw.len());
        self.raw.push(value);
        k
    }

    /// The id the next [`IdVec::push`] returns.
    pub fn next_key(&self) -> K {
        K::new(self.raw.len())
    }

    /// Removes every value.
    pub fn clear(&mut self) {
        self.raw.clear()
    }

    /// The number of values.
    #[inline]
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether there are none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The value of `k`, if in range.
    #[inline]
    pub fn get(&self, k: K) -> Option<&V> {
        self.raw.get(k.index())
    }

    /// The value of `k`, mutably, if in range.
    #[inline]
    pub fn get_mut(&mut self, k: K) -> Option<&mut V> {
        self.raw.get_mut(k.index())
    }

    /// Whether `k` is in range.
    #[inline]
    pub fn contains(&self, k: K) -> bool {
        k.index() < self.raw.len()
    }

    /// Every id, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = K> + ExactSizeIterator + use<K, V> {
        (0..self.raw.len()).map(K::new)
    }

    /// Every value, in id order.
    pub fn values(&self) -> std::slice::Iter<'_, V> {
        self.raw.iter()
    }

    /// Every value, mutably, in id order.
    pub fn values_mut(&mut self) -> std::slice::IterMut<'_, V> {
        self.raw.iter_mut()
    }

    /// Every `(id, value)`, in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (K, &V)> + ExactSizeIterator {
        self.raw.iter().enumerate().map(|(i, v)| (K::new(i), v))
    }

    /// Every `(id, value)`, mutably, in order.
    pub fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = (K, &mut V)> + ExactSizeIterator {
        self.raw.iter_mut().enumerate().map(|(i, v)| (K::new(i), v))
    }

    /// The last id and value.
    pub fn last(&self) -> Option<(K, &V)> {
        let n = self.raw.len().checked_sub(1)?;
        Some((K::new(n), &self.raw[n]))
    }

    /// The values as a slice, the value of id `i` at position `i` (for code that hands them
    /// on whole, such as a list of buffers to a backend).
    pub fn as_slice(&self) -> &[V] {
        &self.raw
    }

    /// The values as a `Vec`, the value of id `i` at position `i`.
    pub fn into_vec(self) -> Vec<V> {
        self.raw
    }
}

impl<K: Id, V> Default for IdVec<K, V> {
    fn default() -> Self {
        IdVec::new()
    }
}

impl<K, V: Clone> Clone for IdVec<K, V> {
    fn clone(&self) -> Self {
        IdVec {
            raw: self.raw.clone(),
            key: PhantomData,
        }
    }
}

impl<K, V: PartialEq> PartialEq for IdVec<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl<K, V: Eq> Eq for IdVec<K, V> {}

impl<K, V: Hash> Hash for IdVec<K, V> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.raw.hash(state)
    }
}

impl<K, V: fmt::Debug> fmt::Debug for IdVec<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.raw.fmt(f)
    }
}

impl<K: Id, V> Index<K> for IdVec<K, V> {
    type Output = V;
    #[inline]
    fn index(&self, k: K) -> &V {
        &self.raw[k.index()]
    }
}

impl<K: Id, V> IndexMut<K> for IdVec<K, V> {
    #[inline]
    fn index_mut(&mut self, k: K) -> &mut V {
        &mut self.raw[k.index()]
    }
}

impl<K: Id, V> FromIterator<V> for IdVec<K, V> {
    fn from_iter<I: IntoIterator<Item = V>>(iter: I) -> Self {
        IdVec::from_vec(iter.into_iter().collect())
    }
}

impl<K: Id, V> Extend<V> for IdVec<K, V> {
    fn extend<I: IntoIterator<Item = V>>(&mut self, iter: I) {
        self.raw.extend(iter)
    }
}

impl<K: Id, V> From<Vec<V>> for IdVec<K, V> {
    fn from(raw: Vec<V>) -> Self {
        IdVec::from_vec(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_index_their_own_vector_only() {
        let mut v: IdVec<NodeId, i32> = IdVec::new();
        let a = v.push(10);
        let b = v.push(20);
        assert_eq!((a.index(), b.index()), (0, 1));
        assert_eq!(v[b], 20);
        assert_eq!(v.get(NodeId::new(2)), None);
        assert_eq!(v.next_key(), NodeId::new(2));
        assert_eq!(v.keys().rev().collect::<Vec<_>>(), [b, a]);
        assert_eq!(v.last(), Some((b, &20)));
        assert_eq!(ParamId::new(4).to_string(), "param4");
    }

    #[test]
    #[should_panic(expected = "more than u32::MAX ids")]
    fn an_id_past_u32_panics_instead_of_wrapping() {
        let _ = NodeId::new(u32::MAX as usize + 1);
    }
}
