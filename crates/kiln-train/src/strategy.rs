//! Distribution strategies: [`Strategy::OneDevice`] (one graph per step: forward, backward
//! and update in one evaluation) and [`Strategy::Mirrored`] (replicas on threads over one
//! set of parameters), with the values and collectives they use: [`PerReplica`],
//! [`Mirrored`], [`ReduceOp`], [`Strategy::reduce`] and [`Strategy::batch_reduce`].
//!
//! **Results do not depend on the number of replicas.** A global batch is cut into
//! micro-batches of a fixed size; each micro-batch's loss is weighted by its share of the
//! examples and differentiated on its own; the replicas take contiguous runs of
//! micro-batches; and the gradients are summed over **a fixed binary tree over the
//! micro-batch index** (pairs `(0,1), (2,3), ...`, then pairs of those, an odd one carried),
//! so 1, 2 or 4 replicas add the same numbers in the same order and write byte-identical
//! checkpoints.
//! The sums run over one flat host buffer per dtype holding every gradient (one pass per
//! level, not one call per tensor).
//!
//! Depends on kiln's public API, `crate::batch`, `crate::error`.

use crate::error::panic_message;
use crate::{micro_batch_lens, Batch, Error, Result};
use kiln::{Array, DType};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// How an estimator runs a training step.
///
/// ```
/// use kiln_train::Strategy;
/// let s = Strategy::mirrored(2, 16)?;
/// assert_eq!(s.replicas(), 2);
/// assert_eq!(s.micro_batch_lens(40), vec![16, 16, 8]);
/// assert!(Strategy::mirrored(0, 16).is_err());
/// # Ok::<(), kiln_train::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    /// One graph per step on the calling thread.
    #[default]
    OneDevice,
    /// `replicas` threads over one set of parameters; each global batch cut into
    /// micro-batches of `micro_batch_size` examples (the last may be shorter).
    Mirrored {
        /// The number of replica threads.
        replicas: usize,
        /// Examples per micro-batch: fix it, and any replica count gives the same bytes.
        micro_batch_size: usize,
    },
    /// One replica per MPI process (feature `mpi`; start MPI with
    /// [`multiprocess::init`](crate::multiprocess::init) and run under `mpiexec`): every
    /// process reads the same global batches and runs its contiguous run of micro-batches;
    /// the gradients travel by MPI and are summed over the same fixed tree, so `-np N`
    /// writes the bytes of `Mirrored { replicas: N }`. Only rank 0 writes checkpoints and
    /// logs.
    #[cfg(feature = "mpi")]
    MultiProcess {
        /// Examples per micro-batch.
        micro_batch_size: usize,
    },
}

/// How [`Strategy::reduce`] combines values.
///
/// ```
/// assert_ne!(kiln_train::ReduceOp::Sum, kiln_train::ReduceOp::Mean);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// The sum.
    Sum,
    /// The sum divided by the number of values.
    Mean,
}

/// One value per micro-batch (in micro-batch order), computed by the replicas.
///
/// ```
/// let v = kiln_train::PerReplica::new(vec![1, 2, 3]);
/// assert_eq!(v.values(), &[1, 2, 3]);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct PerReplica<T> {
    values: Vec<T>,
}

impl<T> PerReplica<T> {
    /// Wraps values in micro-batch order.
    ///
    /// ```
    /// let v = kiln_train::PerReplica::new(vec!["a", "b"]);
    /// assert_eq!(v.len(), 2);
    /// ```
    pub fn new(values: Vec<T>) -> PerReplica<T> {
        PerReplica { values }
    }

    /// The values, in micro-batch order.
    ///
    /// ```
    /// let v = kiln_train::PerReplica::new(vec![1.0, 2.0]);
    /// assert_eq!(v.values().iter().sum::<f64>(), 3.0);
    /// ```
    pub fn values(&self) -> &[T] {
        &self.values
    }

    /// The values, owned.
    ///
    /// ```
    /// assert_eq!(kiln_train::PerReplica::new(vec![1, 2]).into_values(), vec![1, 2]);
    /// ```
    pub fn into_values(self) -> Vec<T> {
        self.values
    }

    /// The number of values.
    ///
    /// ```
    /// let s = kiln_train::Strategy::mirrored(2, 1)?;
    /// assert_eq!(s.run(3, Ok)?.len(), 3); // one per micro-batch
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are none.
    ///
    /// ```
    /// assert!(kiln_train::PerReplica::<u8>::new(vec![]).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// A value every replica sees the same of (parameters, hyperparameters); an update runs
/// once and every replica sees its result.
///
/// ```
/// let mut lr = kiln_train::Mirrored::new(0.1f64);
/// lr.update(|v| Ok(v / 2.0))?;
/// assert_eq!(*lr.get(), 0.05);
/// # Ok::<(), kiln_train::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Mirrored<T> {
    value: Arc<T>,
}

impl<T> Mirrored<T> {
    /// Wraps a value.
    ///
    /// ```
    /// let m = kiln_train::Mirrored::new(vec![1, 2]);
    /// assert_eq!(m.get().len(), 2);
    /// ```
    pub fn new(value: T) -> Mirrored<T> {
        Mirrored {
            value: Arc::new(value),
        }
    }

    /// The value.
    ///
    /// ```
    /// assert_eq!(*kiln_train::Mirrored::new(3).get(), 3);
    /// ```
    pub fn get(&self) -> &T {
        &self.value
    }

    /// Replaces the value by `f` of it, once for all replicas; on error nothing changes.
    ///
    /// ```
    /// let mut m = kiln_train::Mirrored::new(1);
    /// assert!(m.update(|_| Err(kiln_train::Error::invalid("doc", "refused"))).is_err());
    /// assert_eq!(*m.get(), 1);
    /// ```
    pub fn update(&mut self, f: impl FnOnce(&T) -> Result<T>) -> Result<()> {
        self.value = Arc::new(f(&self.value)?);
        Ok(())
    }

    /// A handle per replica (all the same value).
    ///
    /// ```
    /// let m = kiln_train::Mirrored::new(String::from("shared"));
    /// let handles = m.per_replica(3);
    /// assert_eq!(handles.len(), 3);
    /// assert!(std::sync::Arc::ptr_eq(&handles.values()[0], &handles.values()[2])); // one value
    /// ```
    pub fn per_replica(&self, replicas: usize) -> PerReplica<Arc<T>> {
        PerReplica::new(vec![self.value.clone(); replicas])
    }
}

impl Strategy {
    /// Mirrored replicas with a fixed micro-batch size (both at least 1).
    ///
    /// ```
    /// use kiln_train::Strategy;
    /// let s = Strategy::mirrored(4, 8)?;
    /// assert_eq!(s, Strategy::Mirrored { replicas: 4, micro_batch_size: 8 });
    /// assert!(Strategy::mirrored(4, 0).is_err());
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn mirrored(replicas: usize, micro_batch_size: usize) -> Result<Strategy> {
        if replicas == 0 || micro_batch_size == 0 {
            return Err(Error::invalid(
                "Strategy::mirrored",
                format!(
                    "{replicas} replicas with micro-batches of {micro_batch_size}: pass at least \
                     1 of each"
                ),
            ));
        }
        Ok(Strategy::Mirrored {
            replicas,
            micro_batch_size,
        })
    }

    /// The number of replicas (1 for one device).
    ///
    /// ```
    /// use kiln_train::Strategy;
    /// assert_eq!(Strategy::OneDevice.replicas(), 1);
    /// assert_eq!(Strategy::mirrored(3, 4)?.replicas(), 3);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn replicas(&self) -> usize {
        match self {
            Strategy::OneDevice => 1,
            Strategy::Mirrored { replicas, .. } => *replicas,
            #[cfg(feature = "mpi")]
            Strategy::MultiProcess { .. } => crate::multiprocess::rank_and_size().1,
        }
    }

    /// This process's replica: its MPI rank under [`Strategy::MultiProcess`], else 0.
    ///
    /// ```
    /// // mirrored replicas are threads of this one process
    /// assert_eq!(kiln_train::Strategy::mirrored(4, 8)?.rank(), 0);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn rank(&self) -> usize {
        match self {
            #[cfg(feature = "mpi")]
            Strategy::MultiProcess { .. } => crate::multiprocess::rank_and_size().0,
            _ => 0,
        }
    }

    /// Whether this process writes checkpoints and logs (rank 0).
    ///
    /// ```
    /// assert!(kiln_train::Strategy::OneDevice.is_chief());
    /// ```
    pub fn is_chief(&self) -> bool {
        self.rank() == 0
    }

    /// The micro-batch lengths of a global batch of `len` examples (one device: one
    /// micro-batch of all).
    ///
    /// ```
    /// use kiln_train::Strategy;
    /// assert_eq!(Strategy::OneDevice.micro_batch_lens(10), vec![10]);
    /// assert_eq!(Strategy::mirrored(3, 4)?.micro_batch_lens(10), vec![4, 4, 2]);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn micro_batch_lens(&self, len: usize) -> Vec<usize> {
        match self {
            Strategy::OneDevice => vec![len],
            Strategy::Mirrored {
                micro_batch_size, ..
            } => micro_batch_lens(len, *micro_batch_size),
            #[cfg(feature = "mpi")]
            Strategy::MultiProcess { micro_batch_size } => micro_batch_lens(len, *micro_batch_size),
        }
    }

    /// Cuts a global batch into its micro-batches (dataset distribution: replica `r` gets
    /// the contiguous run [`Strategy::assignment`] gives it).
    ///
    /// ```
    /// let s = kiln_train::Strategy::mirrored(2, 2)?;
    /// let parts = s.distribute(&vec![1, 2, 3, 4, 5])?;
    /// assert_eq!(parts, vec![vec![1, 2], vec![3, 4], vec![5]]);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn distribute<B: Batch>(&self, batch: &B) -> Result<Vec<B>> {
        let Some(len) = batch.batch_len() else {
            // parts that disagree on their length have none: let the split say which
            batch.split(&[])?;
            return Err(Error::invalid(
                "Strategy::distribute",
                "the batch has no batch axis (it is all `()`): give features a leading axis",
            ));
        };
        if len == 0 {
            return Err(Error::invalid(
                "Strategy::distribute",
                "an empty batch: every batch needs at least one example",
            ));
        }
        batch.split(&self.micro_batch_lens(len))
    }

    /// The micro-batches each replica runs: contiguous, as even as can be (the first
    /// replicas take one more).
    ///
    /// ```
    /// let s = kiln_train::Strategy::mirrored(2, 1)?;
    /// assert_eq!(s.assignment(5), vec![0..3, 3..5]);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn assignment(&self, micro_batches: usize) -> Vec<std::ops::Range<usize>> {
        let r = self.replicas();
        let (base, extra) = (micro_batches / r, micro_batches % r);
        let mut at = 0;
        (0..r)
            .map(|i| {
                let n = base + usize::from(i < extra);
                let range = at..at + n;
                at += n;
                range
            })
            .collect()
    }

    /// Runs `f(i)` for micro-batches `0..micro_batches`, each replica its contiguous run on
    /// its own thread (replica 0 on the calling thread); the results in micro-batch order.
    /// A panic in a replica is an [`Error::Replica`]; the first error wins.
    ///
    /// ```
    /// let s = kiln_train::Strategy::mirrored(3, 1)?;
    /// let squares = s.run(5, |i| Ok(i * i))?;
    /// assert_eq!(squares.values(), &[0, 1, 4, 9, 16]);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn run<T: Send>(
        &self,
        micro_batches: usize,
        f: impl Fn(usize) -> Result<T> + Sync,
    ) -> Result<PerReplica<T>> {
        let runs = self.assignment(micro_batches);
        let replica = |r: usize, range: std::ops::Range<usize>| -> Result<Vec<T>> {
            catch_unwind(AssertUnwindSafe(|| {
                range.map(&f).collect::<Result<Vec<T>>>()
            }))
            .unwrap_or_else(|p| {
                Err(Error::Replica {
                    replica: r,
                    message: panic_message(p.as_ref()),
                })
            })
        };
        let results: Vec<Result<Vec<T>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = runs
                .iter()
                .enumerate()
                .skip(1)
                .filter(|(_, range)| !range.is_empty())
                .map(|(r, range)| {
                    let range = range.clone();
                    let replica = &replica;
                    scope.spawn(move || replica(r, range))
                })
                .collect();
            let mut out = vec![replica(0, runs[0].clone())];
            for (h, (r, _)) in handles.into_iter().zip(
                runs.iter()
                    .enumerate()
                    .skip(1)
                    .filter(|(_, range)| !range.is_empty()),
            ) {
                out.push(h.join().unwrap_or_else(|p| {
                    Err(Error::Replica {
                        replica: r,
                        message: panic_message(p.as_ref()),
                    })
                }));
            }
            out
        });
        let mut values = Vec::with_capacity(micro_batches);
        for r in results {
            values.extend(r?);
        }
        Ok(PerReplica::new(values))
    }

    /// Combines one array per micro-batch (all of one dtype and shape) over the fixed tree.
    ///
    /// ```
    /// use kiln_train::{PerReplica, ReduceOp, Strategy};
    /// let v = PerReplica::new(vec![kiln::Array::scalar(1.0f32), kiln::Array::scalar(3.0f32)]);
    /// let s = Strategy::mirrored(2, 1)?;
    /// assert_eq!(s.reduce(ReduceOp::Mean, &v)?.item::<f32>()?, 2.0);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn reduce(&self, op: ReduceOp, values: &PerReplica<Array>) -> Result<Array> {
        let per: Vec<Vec<Array>> = values.values.iter().map(|a| vec![a.clone()]).collect();
        let mut out = self.batch_reduce(op, &PerReplica::new(per))?;
        out.pop().ok_or_else(|| {
            Error::invalid("Strategy::reduce", "no values to reduce: pass at least one")
        })
    }

    /// Combines, for every position `k`, the `k`-th arrays of all micro-batches over the
    /// fixed tree, through one flat buffer per dtype (one pass per tree level for all of
    /// them). Float arrays only; position `k` must have one dtype and shape throughout.
    ///
    /// ```
    /// use kiln_train::{PerReplica, ReduceOp, Strategy};
    /// let g = |a: f64, b: f64| vec![kiln::Array::scalar(a), kiln::Array::from_vec(vec![b, b], &[2]).unwrap()];
    /// let s = Strategy::OneDevice;
    /// let sum = s.batch_reduce(ReduceOp::Sum, &PerReplica::new(vec![g(1.0, 2.0), g(3.0, 4.0)]))?;
    /// assert_eq!(sum[1].to_vec::<f64>()?, vec![6.0, 6.0]);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn batch_reduce(
        &self,
        op: ReduceOp,
        values: &PerReplica<Vec<Array>>,
    ) -> Result<Vec<Array>> {
        batch_reduce(op, &values.values)
    }
}

/// See [`Strategy::batch_reduce`].
pub(crate) fn batch_reduce(op: ReduceOp, items: &[Vec<Array>]) -> Result<Vec<Array>> {
    const OP: &str = "Strategy::batch_reduce";
    let Some(first) = items.first() else {
        return Err(Error::invalid(OP, "no values to reduce: pass at least one"));
    };
    let layout = Layout::of(OP, first)?;
    for (i, item) in items.iter().enumerate() {
        layout.check(OP, i, item)?;
    }
    let lists: Vec<&[Array]> = items.iter().map(Vec::as_slice).collect();
    let n = items.len();
    let mut sum = layout.tree_sum(&lists)?;
    if op == ReduceOp::Mean {
        sum.f32.iter_mut().for_each(|x| *x /= n as f32);
        sum.f64.iter_mut().for_each(|x| *x /= n as f64);
    }
    layout.views(sum)
}

/// Float arrays laid out in one flat buffer per dtype.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Flat {
    pub(crate) f32: Vec<f32>,
    pub(crate) f64: Vec<f64>,
}

/// Where each array of a list lives in a [`Flat`]: its dtype, offset and shape.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    entries: Vec<(DType, usize, Vec<usize>)>,
    pub(crate) len32: usize,
    pub(crate) len64: usize,
}

impl Layout {
    /// The layout of `arrays` (float only).
    pub(crate) fn of(op: &'static str, arrays: &[Array]) -> Result<Layout> {
        let (mut len32, mut len64) = (0, 0);
        let mut entries = Vec::with_capacity(arrays.len());
        for (k, a) in arrays.iter().enumerate() {
            let at = match a.dtype() {
                DType::F32 => &mut len32,
                DType::F64 => &mut len64,
                other => {
                    return Err(Error::invalid(
                        op,
                        format!("array {k} is {other:?}: only f32 and f64 arrays are reduced"),
                    ))
                }
            };
            entries.push((a.dtype(), *at, a.shape().to_vec()));
            *at += a.size();
        }
        Ok(Layout {
            entries,
            len32,
            len64,
        })
    }

    /// Checks that `item` (micro-batch `i`'s list) has this layout.
    fn check(&self, op: &'static str, i: usize, item: &[Array]) -> Result<()> {
        if item.len() != self.entries.len() {
            return Err(Error::invalid(
                op,
                format!(
                    "micro-batch 0 has {} arrays and micro-batch {i} has {}: every one needs \
                     the same list",
                    self.entries.len(),
                    item.len()
                ),
            ));
        }
        for (k, ((dtype, _, shape), a)) in self.entries.iter().zip(item).enumerate() {
            if *dtype != a.dtype() || shape[..] != *a.shape() {
                return Err(Error::invalid(
                    op,
                    format!(
                        "array {k} is {dtype:?} {shape:?} in micro-batch 0 and {:?} {:?} in \
                         micro-batch {i}: reduce float arrays of one dtype and shape",
                        a.dtype(),
                        a.shape()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The arrays' values in flat buffers (one copy each).
    pub(crate) fn pack(&self, arrays: &[Array]) -> Result<Flat> {
        let mut flat = Flat {
            f32: Vec::with_capacity(self.len32),
            f64: Vec::with_capacity(self.len64),
        };
        for ((dtype, _, _), a) in self.entries.iter().zip(arrays) {
            match dtype {
                DType::F32 => flat.f32.extend_from_slice(&a.to_shared::<f32>()?),
                _ => flat.f64.extend_from_slice(&a.to_shared::<f64>()?),
            }
        }
        Ok(flat)
    }

    /// The arrays back from flat buffers, copied out (each its own buffer).
    #[cfg(feature = "mpi")]
    pub(crate) fn unpack(&self, flat: &Flat) -> Result<Vec<Array>> {
        self.entries
            .iter()
            .map(|(dtype, at, shape)| {
                let n: usize = shape.iter().product();
                Ok(match dtype {
                    DType::F32 => Array::from_vec(flat.f32[*at..at + n].to_vec(), shape)?,
                    _ => Array::from_vec(flat.f64[*at..at + n].to_vec(), shape)?,
                })
            })
            .collect()
    }

    /// The arrays as views into the flat buffers, which become two arrays (no copy): each
    /// is a lazy slice and reshape, read in place by whatever evaluates it (the optimizer's
    /// update reads the reduced gradients straight from the sum).
    pub(crate) fn views(&self, flat: Flat) -> Result<Vec<Array>> {
        let whole32 = Array::from_vec(flat.f32, &[self.len32])?;
        let whole64 = Array::from_vec(flat.f64, &[self.len64])?;
        self.entries
            .iter()
            .map(|(dtype, at, shape)| {
                let n: usize = shape.iter().product();
                let whole = if *dtype == DType::F32 {
                    &whole32
                } else {
                    &whole64
                };
                let part = whole.try_slice(&[kiln::SliceArg::range(
                    Some(*at as isize),
                    Some((at + n) as isize),
                    1,
                )])?;
                let dims: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
                Ok(part.try_reshape(&dims)?)
            })
            .collect()
    }

    /// Two lists' sum, written straight into new flat buffers (the tree's first level fused
    /// with the packing: each input read once).
    fn pack_sum(&self, a: &[Array], b: &[Array]) -> Result<Flat> {
        let mut flat = Flat {
            f32: Vec::with_capacity(self.len32),
            f64: Vec::with_capacity(self.len64),
        };
        for (((dtype, _, _), x), y) in self.entries.iter().zip(a).zip(b) {
            match dtype {
                DType::F32 => {
                    let (x, y) = (x.to_shared::<f32>()?, y.to_shared::<f32>()?);
                    flat.f32.extend(x.iter().zip(y.iter()).map(|(p, q)| p + q));
                }
                _ => {
                    let (x, y) = (x.to_shared::<f64>()?, y.to_shared::<f64>()?);
                    flat.f64.extend(x.iter().zip(y.iter()).map(|(p, q)| p + q));
                }
            }
        }
        Ok(flat)
    }

    /// The sum of micro-batches' lists (each of this layout, evaluated) over the fixed tree,
    /// in flat buffers.
    pub(crate) fn tree_sum(&self, lists: &[&[Array]]) -> Result<Flat> {
        if let [only] = lists {
            return self.pack(only);
        }
        let first: Vec<Flat> = lists
            .chunks(2)
            .map(|pair| match pair {
                [a, b] => self.pack_sum(a, b),
                [a] => self.pack(a),
                _ => unreachable!("chunks of two"),
            })
            .collect::<Result<_>>()?;
        Ok(tree_sum_flat(first))
    }
}

/// The sum of flat buffers over the fixed tree (both dtypes).
pub(crate) fn tree_sum_flat(flats: Vec<Flat>) -> Flat {
    let (f32s, f64s): (Vec<Vec<f32>>, Vec<Vec<f64>>) =
        flats.into_iter().map(|f| (f.f32, f.f64)).unzip();
    Flat {
        f32: tree_sum(f32s),
        f64: tree_sum(f64s),
    }
}

#[cfg(feature = "mpi")]
/// Whether the runs `blocks` (one per replica, in order, covering `0..n`) are the nodes of
/// one level of the fixed tree: then each replica may sum its run first and the tree over
/// the replicas' sums is the tree over all micro-batches.
pub(crate) fn blocks_are_one_level(blocks: &[std::ops::Range<usize>], n: usize) -> bool {
    let Some(first) = blocks.first() else {
        return false;
    };
    let size = first.len().max(1);
    if !size.is_power_of_two() {
        return false;
    }
    blocks
        .iter()
        .enumerate()
        .all(|(r, b)| b.start == r * size && b.end == ((r + 1) * size).min(n) && !b.is_empty())
}

/// The sum of equal-length slices over the fixed tree (see [`tree_sum`]), the first level
/// written straight into new buffers (each slice read once, none copied whole).
///
/// ```
/// let all = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0];
/// assert_eq!(kiln_train::tree_sum_slices(&[&all[..2], &all[2..4], &all[4..]]), vec![9.0, 12.0]);
/// ```
pub fn tree_sum_slices<T: Copy + std::ops::Add<Output = T> + std::ops::AddAssign>(
    parts: &[&[T]],
) -> Vec<T> {
    let first: Vec<Vec<T>> = parts
        .chunks(2)
        .map(|pair| match pair {
            [a, b] => a.iter().zip(b.iter()).map(|(x, y)| *x + *y).collect(),
            [a] => a.to_vec(),
            _ => unreachable!("chunks of two"),
        })
        .collect();
    tree_sum(first)
}

/// The sum of equal-length buffers over the fixed tree: pairs `(0,1), (2,3), ...`, then
/// pairs of those, an odd last one carried up unchanged.
///
/// ```
/// // 0.1 + 0.2 is not 0.2 + 0.1 in every order of a longer sum; the tree fixes the order
/// let s = kiln_train::tree_sum(vec![vec![1.0f32], vec![2.0], vec![3.0]]);
/// assert_eq!(s, vec![6.0]);
/// ```
pub fn tree_sum<T: Copy + std::ops::AddAssign>(mut level: Vec<Vec<T>>) -> Vec<T> {
    while level.len() > 1 {
        let mut next = Vec::with_capacity(level.len().div_ceil(2));
        let mut it = level.into_iter();
        while let Some(mut a) = it.next() {
            if let Some(b) = it.next() {
                for (x, y) in a.iter_mut().zip(&b) {
                    *x += *y;
                }
            }
            next.push(a);
        }
        level = next;
    }
    level.pop().unwrap_or_default()
}
