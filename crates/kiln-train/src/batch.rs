//! [`Batch`]: what a training input element must be so a strategy can cut it into
//! micro-batches — a number of examples along a leading axis, and a split into consecutive
//! parts.
//!
//! Implemented for [`kiln::Array`] (its first axis; each part a fresh host array, so every
//! micro-batch is an input of the same shape class and shares one compiled plan), `Vec<T>`,
//! `()`, tuples of up to four batches and `BTreeMap<String, B>`.
//!
//! Depends on kiln's public API and `crate::error`.

use crate::{Error, Result};
use kiln::{Array, DType};
use std::collections::BTreeMap;

/// A batch of examples that can be cut into consecutive parts along its leading axis.
///
/// ```
/// use kiln_train::Batch;
/// let x = kiln::Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
/// let y = vec![10u8, 20, 30];
/// let parts = (x, y).split(&[2, 1])?;
/// assert_eq!(parts[1].0.to_vec::<f32>()?, vec![5.0, 6.0]);
/// assert_eq!(parts[1].1, vec![30]);
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub trait Batch: Sized + Send + 'static {
    /// The number of examples, or `None` for a value without a batch axis (`()`).
    ///
    /// ```
    /// use kiln_train::Batch;
    /// assert_eq!(vec![1, 2, 3].batch_len(), Some(3));
    /// assert_eq!(kiln::Array::zeros(&[5, 2], kiln::DType::F32).batch_len(), Some(5));
    /// assert_eq!(().batch_len(), None);
    /// ```
    fn batch_len(&self) -> Option<usize>;

    /// Consecutive parts of `lens[0]`, `lens[1]`, ... examples; the lengths sum to
    /// [`Batch::batch_len`].
    ///
    /// ```
    /// use kiln_train::Batch;
    /// let parts = Batch::split(&vec!['a', 'b', 'c', 'd', 'e'], &[2, 3])?;
    /// assert_eq!(parts, vec![vec!['a', 'b'], vec!['c', 'd', 'e']]);
    /// assert!(Batch::split(&vec![1, 2], &[1]).is_err()); // the parts must sum to the batch
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    fn split(&self, lens: &[usize]) -> Result<Vec<Self>>;
}

fn check_lens(what: &str, len: usize, lens: &[usize]) -> Result<()> {
    let total: usize = lens.iter().sum();
    if total != len {
        return Err(Error::invalid(
            "Batch::split",
            format!(
                "{what} holds {len} examples, but the parts {lens:?} sum to {total}: pass part \
                 lengths that sum to the batch length"
            ),
        ));
    }
    Ok(())
}

impl Batch for Array {
    fn batch_len(&self) -> Option<usize> {
        self.shape().first().copied()
    }

    fn split(&self, lens: &[usize]) -> Result<Vec<Array>> {
        let Some(&len) = self.shape().first() else {
            return Err(Error::invalid(
                "Batch::split",
                "a 0-d array has no batch axis to split: give each example a leading axis \
                 (reshape to [1])",
            ));
        };
        check_lens(&format!("an array of shape {:?}", self.shape()), len, lens)?;
        let row: usize = self.shape()[1..].iter().product();
        fn cut<T: kiln::Element>(a: &Array, row: usize, lens: &[usize]) -> Result<Vec<Array>> {
            let data = a.to_vec::<T>()?;
            let mut out = Vec::with_capacity(lens.len());
            let mut at = 0;
            for &n in lens {
                let mut shape = a.shape().to_vec();
                shape[0] = n;
                out.push(Array::from_vec(
                    data[at * row..(at + n) * row].to_vec(),
                    &shape,
                )?);
                at += n;
            }
            Ok(out)
        }
        match self.dtype() {
            DType::F32 => cut::<f32>(self, row, lens),
            DType::F64 => cut::<f64>(self, row, lens),
            DType::I32 => cut::<i32>(self, row, lens),
            DType::I64 => cut::<i64>(self, row, lens),
            DType::Bool => cut::<bool>(self, row, lens),
        }
    }
}

impl<T: Clone + Send + 'static> Batch for Vec<T> {
    fn batch_len(&self) -> Option<usize> {
        Some(self.len())
    }

    fn split(&self, lens: &[usize]) -> Result<Vec<Vec<T>>> {
        check_lens("a Vec", self.len(), lens)?;
        let mut at = 0;
        Ok(lens
            .iter()
            .map(|&n| {
                let part = self[at..at + n].to_vec();
                at += n;
                part
            })
            .collect())
    }
}

impl Batch for () {
    fn batch_len(&self) -> Option<usize> {
        None
    }

    fn split(&self, lens: &[usize]) -> Result<Vec<()>> {
        Ok(vec![(); lens.len()])
    }
}

impl<B: Batch> Batch for BTreeMap<String, B> {
    fn batch_len(&self) -> Option<usize> {
        self.values().find_map(Batch::batch_len)
    }

    fn split(&self, lens: &[usize]) -> Result<Vec<Self>> {
        let mut out: Vec<Self> = (0..lens.len()).map(|_| BTreeMap::new()).collect();
        for (name, value) in self {
            for (o, part) in out.iter_mut().zip(value.split(lens)?) {
                o.insert(name.clone(), part);
            }
        }
        Ok(out)
    }
}

/// The common length of the parts of a tuple, or an error naming the two that disagree.
fn common_len(lens: &[Option<usize>]) -> Result<Option<usize>> {
    let mut found: Option<(usize, usize)> = None;
    for (i, l) in lens.iter().enumerate() {
        if let Some(l) = *l {
            match found {
                Some((j, m)) if m != l => {
                    return Err(Error::invalid(
                        "Batch::split",
                        format!(
                            "the tuple's item {j} holds {m} examples but item {i} holds {l}: \
                             features and labels must hold the same examples"
                        ),
                    ))
                }
                None => found = Some((i, l)),
                _ => {}
            }
        }
    }
    Ok(found.map(|(_, l)| l))
}

macro_rules! tuple_batch {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: Batch),+> Batch for ($($name,)+) {
            fn batch_len(&self) -> Option<usize> {
                common_len(&[$(self.$idx.batch_len()),+]).ok().flatten()
            }

            fn split(&self, lens: &[usize]) -> Result<Vec<Self>> {
                common_len(&[$(self.$idx.batch_len()),+])?;
                #[allow(non_snake_case)]
                let ($(mut $name,)+) = ($(self.$idx.split(lens)?.into_iter(),)+);
                let mut out = Vec::with_capacity(lens.len());
                for _ in lens {
                    out.push(($(match $name.next() {
                        Some(v) => v,
                        None => {
                            return Err(Error::invalid(
                                "Batch::split",
                                "a part's split returned fewer parts than asked for",
                            ))
                        }
                    },)+));
                }
                Ok(out)
            }
        }
    };
}

tuple_batch!(A 0);
tuple_batch!(A 0, B 1);
tuple_batch!(A 0, B 1, C 2);
tuple_batch!(A 0, B 1, C 2, D 3);

/// `len` examples cut into parts of `size` (the last one shorter when `size` does not divide
/// `len`): the micro-batch lengths of a batch.
///
/// ```
/// assert_eq!(kiln_train::micro_batch_lens(10, 4), vec![4, 4, 2]);
/// assert_eq!(kiln_train::micro_batch_lens(0, 4), Vec::<usize>::new());
/// ```
pub fn micro_batch_lens(len: usize, size: usize) -> Vec<usize> {
    let size = size.max(1);
    let mut out = vec![size; len / size];
    if !len.is_multiple_of(size) {
        out.push(len % size);
    }
    out
}
