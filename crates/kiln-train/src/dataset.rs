//! [`Dataset`]: an input pipeline (tf.data's) built from stages — sources
//! ([`Dataset::from_slices`], [`Dataset::from_fn`], [`Dataset::from_generator`]), `map`
//! (serial, or on worker threads with the output order independent of their number),
//! `shuffle(seed)` (a permutation that is a pure function of the seed and the epoch),
//! `shard`, `batch`, `repeat`, `take` and `prefetch` (a producer thread feeding a
//! [`StagingArea`]).
//!
//! **Every iterator can say where it is** ([`DatasetIter::cursor`], a small JSON value) and
//! a dataset can be opened at a cursor ([`Dataset::iter_from`]), so a resumed run sees
//! exactly the elements an uninterrupted one would.
//! Stages that read ahead (parallel map, prefetch) keep the upstream cursor taken after each
//! element they pulled, and report the one of the last element they delivered.
//!
//! Random-access stages (the slice and function sources, and map, shard and shuffle over
//! them) jump to a cursor directly; sequential ones (generators, batch, repeat) replay or
//! skip: a generator re-runs its iterator and skips what was consumed, and a shuffle over a
//! sequential stage re-reads its epoch.
//!
//! The shuffle's permutation uses its own SplitMix64 stream, a few lines, rather than the
//! `rand` crate: the order must stay the same across crate versions, which `rand`'s
//! generators do not promise.
//!
//! Depends on `crate::staging`, `crate::error`, `crate::model` (seed mixing) and
//! serde_json.

use crate::error::panic_message;
use crate::model::derive_seed;
use crate::{Error, Result, StagingArea};
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

/// Where an iterator is: opaque, serialisable, and only meaningful for the dataset that
/// made it.
///
/// ```
/// use kiln_train::Dataset;
/// let ds = Dataset::from_slices(vec![1, 2, 3, 4]);
/// let mut it = ds.iter();
/// it.next();
/// let at = it.cursor();
/// let text = at.to_string();
/// let resumed: Vec<i32> = ds.iter_from(&text.parse()?)?.collect::<Result<_, _>>()?;
/// assert_eq!(resumed, vec![2, 3, 4]);
/// # Ok::<(), kiln_train::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Cursor(Value);

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for Cursor {
    type Err = Error;

    fn from_str(s: &str) -> Result<Cursor> {
        serde_json::from_str(s).map(Cursor).map_err(|e| {
            Error::invalid(
                "Cursor::from_str",
                format!("{s:?} is not a cursor (JSON): {e}"),
            )
        })
    }
}

/// One stage of a pipeline, as a description that opens iterators.
trait Node<T>: Send + Sync {
    /// An iterator over `epoch`'s elements, at `state` (from [`Stage::state`]) or the start.
    fn open(self: Arc<Self>, epoch: u64, state: Option<&Value>) -> Result<Box<dyn Stage<T>>>;
    /// The number of elements in one pass, where known.
    fn len(&self) -> Option<usize>;
    /// Element `i` of `epoch`, for random-access stages (`None` for sequential ones).
    fn get(&self, epoch: u64, i: usize) -> Option<Result<T>>;
    /// Whether [`Node::get`] works.
    fn random_access(&self) -> bool;
}

/// An open iterator of a stage.
trait Stage<T>: Send {
    fn next(&mut self) -> Option<Result<T>>;
    /// Where it is: enough for [`Node::open`] to continue from here.
    fn state(&self) -> Value;
}

fn bad_state(kind: &str, state: &Value) -> Error {
    Error::invalid(
        "Dataset::iter_from",
        format!(
            "the cursor part {state} does not fit this dataset's {kind} stage: a cursor only \
             resumes the dataset that made it (built with the same stages)"
        ),
    )
}

/// The field `key` of a stage's state, checked to be of stage `kind`.
fn field<'a>(kind: &str, state: &'a Value, key: &str) -> Result<&'a Value> {
    if state.get("stage").and_then(Value::as_str) != Some(kind) {
        return Err(bad_state(kind, state));
    }
    state.get(key).ok_or_else(|| bad_state(kind, state))
}

fn field_u64(kind: &str, state: &Value, key: &str) -> Result<u64> {
    field(kind, state, key)?
        .as_u64()
        .ok_or_else(|| bad_state(kind, state))
}

/// An input pipeline: a cheap handle (clones share the stages) describing how to produce
/// elements; [`Dataset::iter`] runs it.
///
/// ```
/// use kiln_train::Dataset;
/// let batches: Vec<Vec<u32>> = Dataset::from_fn(10, |i| i as u32)
///     .shard(2, 0)?            // 0, 2, 4, 6, 8
///     .map(|x| x * 10)
///     .batch(2)?
///     .iter()
///     .collect::<Result<_, _>>()?;
/// assert_eq!(batches, vec![vec![0, 20], vec![40, 60], vec![80]]);
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub struct Dataset<T> {
    node: Arc<dyn Node<T>>,
}

impl<T> Clone for Dataset<T> {
    fn clone(&self) -> Self {
        Dataset {
            node: self.node.clone(),
        }
    }
}

impl<T> std::fmt::Debug for Dataset<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset")
            .field("len", &self.node.len())
            .field("random_access", &self.node.random_access())
            .finish()
    }
}

/// An iterator over a dataset's elements; each is a `Result` (a pipeline stage may fail).
///
/// ```
/// let mut it = kiln_train::Dataset::from_fn(3, |i| i * 10).iter();
/// assert_eq!(it.next().transpose()?, Some(0));
/// assert_eq!(it.collect::<Result<Vec<_>, _>>()?, vec![10, 20]);
/// # Ok::<(), kiln_train::Error>(())
/// ```
pub struct DatasetIter<T> {
    stage: Box<dyn Stage<T>>,
}

impl<T> DatasetIter<T> {
    /// Where the iterator is: [`Dataset::iter_from`] continues from here.
    ///
    /// ```
    /// let ds = kiln_train::Dataset::from_fn(4, |i| i).batch(2)?;
    /// let mut it = ds.iter();
    /// it.next();
    /// let rest: Vec<Vec<usize>> = ds.iter_from(&it.cursor())?.collect::<Result<_, _>>()?;
    /// assert_eq!(rest, vec![vec![2, 3]]);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn cursor(&self) -> Cursor {
        Cursor(self.stage.state())
    }
}

impl<T> Iterator for DatasetIter<T> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        self.stage.next()
    }
}

impl<T: Send + 'static> Dataset<T> {
    fn new(node: impl Node<T> + 'static) -> Dataset<T> {
        Dataset {
            node: Arc::new(node),
        }
    }

    /// The elements of `items`, in order (random access: cursors jump).
    ///
    /// ```
    /// let ds = kiln_train::Dataset::from_slices(vec!["a", "b", "c"]);
    /// assert_eq!(ds.len(), Some(3));
    /// assert_eq!(ds.iter().collect::<Result<Vec<_>, _>>()?, vec!["a", "b", "c"]);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn from_slices(items: Vec<T>) -> Dataset<T>
    where
        T: Clone + Sync,
    {
        let items: Arc<[T]> = items.into();
        let len = items.len();
        Dataset::from_fn(len, move |i| items[i].clone())
    }

    /// `f(0)`, ..., `f(len - 1)` (random access).
    ///
    /// ```
    /// let v: Vec<usize> = kiln_train::Dataset::from_fn(3, |i| i * i).iter().collect::<Result<_, _>>()?;
    /// assert_eq!(v, vec![0, 1, 4]);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn from_fn(len: usize, f: impl Fn(usize) -> T + Send + Sync + 'static) -> Dataset<T> {
        Dataset::new(FromFn { len, f })
    }

    /// The elements of the iterator `make()` returns (each epoch calls it again; resuming
    /// calls it and skips what was consumed).
    ///
    /// ```
    /// let ds = kiln_train::Dataset::from_generator(|| (0..4).map(|i| i * 2));
    /// let v: Vec<i32> = ds.iter().collect::<Result<_, _>>()?;
    /// assert_eq!(v, vec![0, 2, 4, 6]);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn from_generator<I>(make: impl Fn() -> I + Send + Sync + 'static) -> Dataset<T>
    where
        I: Iterator<Item = T> + Send + 'static,
    {
        Dataset::new(Generator {
            make: Box::new(move || Box::new(make())),
        })
    }

    /// `f` of each element, on the calling thread.
    ///
    /// ```
    /// let ds = kiln_train::Dataset::from_fn(3, |i| i).map(|i| format!("#{i}"));
    /// let v: Vec<String> = ds.iter().collect::<Result<_, _>>()?;
    /// assert_eq!(v, ["#0", "#1", "#2"]);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn map<U: Send + 'static>(self, f: impl Fn(T) -> U + Send + Sync + 'static) -> Dataset<U> {
        Dataset::new(Map {
            up: self.node,
            f: Arc::new(move |t| Ok(f(t))),
        })
    }

    /// `f` of each element, on the calling thread; an error of `f` is that element's error.
    ///
    /// ```
    /// let ds = kiln_train::Dataset::from_fn(3, |i| i).try_map(|i| {
    ///     if i == 1 { Err(kiln_train::Error::invalid("parse", "bad record")) } else { Ok(i) }
    /// });
    /// let v: Vec<_> = ds.iter().map(|r| r.is_ok()).collect();
    /// assert_eq!(v, vec![true, false, true]);
    /// ```
    pub fn try_map<U: Send + 'static>(
        self,
        f: impl Fn(T) -> Result<U> + Send + Sync + 'static,
    ) -> Dataset<U> {
        Dataset::new(Map {
            up: self.node,
            f: Arc::new(f),
        })
    }

    /// `f` of each element, on `workers` threads; the output order is the input order
    /// whatever the number of workers. At most `2 × workers` elements are in flight.
    /// A panic in `f` becomes an [`Error::Pipeline`] at that element.
    ///
    /// ```
    /// let ds = kiln_train::Dataset::from_fn(50, |i| i as u64);
    /// let one: Vec<u64> = ds.clone().map_workers(1, |x| x * x)?.iter().collect::<Result<_, _>>()?;
    /// let four: Vec<u64> = ds.map_workers(4, |x| x * x)?.iter().collect::<Result<_, _>>()?;
    /// assert_eq!(one, four);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn map_workers<U: Send + 'static>(
        self,
        workers: usize,
        f: impl Fn(T) -> U + Send + Sync + 'static,
    ) -> Result<Dataset<U>> {
        if workers == 0 {
            return Err(Error::invalid(
                "Dataset::map_workers",
                "0 workers could map nothing: pass at least 1",
            ));
        }
        Ok(Dataset::new(ParallelMap {
            up: self.node,
            f: Arc::new(f),
            workers,
        }))
    }

    /// Each epoch's elements in a random order: a permutation that is a pure function of
    /// `seed` and the epoch (a `repeat` after it counts the epochs), so two runs — or a run
    /// and its resumption — see the same order. Over a sequential stage it holds one
    /// epoch in memory.
    ///
    /// ```
    /// let ds = kiln_train::Dataset::from_fn(5, |i| i).shuffle(42).repeat(Some(2));
    /// let v: Vec<usize> = ds.iter().collect::<Result<_, _>>()?;
    /// let mut first = v[..5].to_vec();
    /// first.sort();
    /// assert_eq!(first, vec![0, 1, 2, 3, 4]);
    /// assert_eq!(v, ds.iter().collect::<Result<Vec<_>, _>>()?); // the same every time
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn shuffle(self, seed: u64) -> Dataset<T> {
        Dataset::new(Shuffle {
            up: self.node,
            seed,
            perm: Mutex::new(None),
        })
    }

    /// Every `n`-th element from the `index`-th: shard `index` of `n`. The `n` shards of a
    /// pass hold each of its elements exactly once.
    ///
    /// ```
    /// let ds = kiln_train::Dataset::from_fn(5, |i| i);
    /// let a: Vec<usize> = ds.clone().shard(2, 0)?.iter().collect::<Result<_, _>>()?;
    /// let b: Vec<usize> = ds.clone().shard(2, 1)?.iter().collect::<Result<_, _>>()?;
    /// assert_eq!((a, b), (vec![0, 2, 4], vec![1, 3]));
    /// assert!(ds.shard(2, 2).is_err());
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn shard(self, n: usize, index: usize) -> Result<Dataset<T>> {
        if n == 0 || index >= n {
            return Err(Error::invalid(
                "Dataset::shard",
                format!("shard {index} of {n}: pass n ≥ 1 and an index below n"),
            ));
        }
        Ok(Dataset::new(Shard {
            up: self.node,
            n,
            index,
        }))
    }

    /// Groups of `size` consecutive elements; the last group of a pass may be shorter (see
    /// [`Dataset::batch_exact`]).
    ///
    /// ```
    /// let ds = kiln_train::Dataset::from_fn(5, |i| i).batch(2)?;
    /// let v: Vec<Vec<usize>> = ds.iter().collect::<Result<_, _>>()?;
    /// assert_eq!(v, vec![vec![0, 1], vec![2, 3], vec![4]]);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn batch(self, size: usize) -> Result<Dataset<Vec<T>>> {
        self.batch_impl(size, false)
    }

    /// Groups of exactly `size` consecutive elements; a shorter last group is dropped.
    ///
    /// ```
    /// let ds = kiln_train::Dataset::from_fn(5, |i| i).batch_exact(2)?;
    /// assert_eq!(ds.iter().count(), 2);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn batch_exact(self, size: usize) -> Result<Dataset<Vec<T>>> {
        self.batch_impl(size, true)
    }

    fn batch_impl(self, size: usize, exact: bool) -> Result<Dataset<Vec<T>>> {
        if size == 0 {
            return Err(Error::invalid(
                "Dataset::batch",
                "a batch of 0 elements: pass at least 1",
            ));
        }
        Ok(Dataset::new(BatchNode {
            up: self.node,
            size,
            exact,
        }))
    }

    /// The elements `count` times over (`None`: forever), each pass a new epoch (a
    /// `shuffle` before it reshuffles). A dataset with no elements ends at once.
    ///
    /// ```
    /// let ds = kiln_train::Dataset::from_fn(2, |i| i).repeat(Some(3));
    /// assert_eq!(ds.len(), Some(6));
    /// let v: Vec<usize> = ds.iter().collect::<Result<_, _>>()?;
    /// assert_eq!(v, vec![0, 1, 0, 1, 0, 1]);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn repeat(self, count: Option<u64>) -> Dataset<T> {
        Dataset::new(Repeat {
            up: self.node,
            count,
        })
    }

    /// The first `n` elements.
    ///
    /// ```
    /// let ds = kiln_train::Dataset::from_fn(10, |i| i).repeat(None).take(12);
    /// assert_eq!(ds.iter().count(), 12);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn take(self, n: u64) -> Dataset<T> {
        Dataset::new(Take { up: self.node, n })
    }

    /// Elements prepared ahead on a producer thread, up to `n` waiting, through a
    /// [`StagingArea`]: the stages before it overlap with the work after it.
    /// A panic in an earlier stage becomes an [`Error::Pipeline`].
    ///
    /// ```
    /// let ds = kiln_train::Dataset::from_fn(100, |i| i as u64).map(|x| x * 2).prefetch(4)?;
    /// let v: Vec<u64> = ds.iter().collect::<Result<_, _>>()?;
    /// assert_eq!((v.len(), v[99]), (100, 198));
    /// assert!(kiln_train::Dataset::from_fn(1, |i| i).prefetch(0).is_err());
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn prefetch(self, n: usize) -> Result<Dataset<T>> {
        if n == 0 {
            return Err(Error::invalid(
                "Dataset::prefetch",
                "prefetching 0 elements: pass at least 1",
            ));
        }
        Ok(Dataset::new(Prefetch { up: self.node, n }))
    }

    /// The number of elements in one pass, where the stages know it (`None` after a
    /// generator or an endless `repeat`).
    ///
    /// ```
    /// let ds = kiln_train::Dataset::from_fn(10, |i| i).batch(4)?;
    /// assert_eq!(ds.len(), Some(3));
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn len(&self) -> Option<usize> {
        self.node.len()
    }

    /// Whether one pass is known to be empty.
    ///
    /// ```
    /// use kiln_train::Dataset;
    /// assert!(Dataset::from_slices(Vec::<u8>::new()).is_empty());
    /// assert!(!Dataset::from_generator(|| 0..0).is_empty()); // a generator's length is unknown
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }

    /// An iterator from the start.
    ///
    /// ```
    /// let ds = kiln_train::Dataset::from_fn(4, |i| i);
    /// let total: usize = ds.iter().map(|r| r.unwrap()).sum();
    /// assert_eq!(total, 6);
    /// assert_eq!(ds.iter().count(), 4); // every call starts over
    /// ```
    pub fn iter(&self) -> DatasetIter<T> {
        match self.node.clone().open(0, None) {
            Ok(stage) => DatasetIter { stage },
            // opening at the start only fails for a state: cannot happen, but an error
            // element is the honest report if it does
            Err(e) => DatasetIter {
                stage: Box::new(Failed(Some(e))),
            },
        }
    }

    /// An iterator continuing from `cursor` (from [`DatasetIter::cursor`] of an iterator
    /// over this dataset).
    ///
    /// ```
    /// let ds = kiln_train::Dataset::from_fn(6, |i| i).shuffle(7);
    /// let mut it = ds.iter();
    /// let first: Vec<usize> = it.by_ref().take(2).collect::<Result<_, _>>()?;
    /// let rest: Vec<usize> = ds.iter_from(&it.cursor())?.collect::<Result<_, _>>()?;
    /// let all: Vec<usize> = ds.iter().collect::<Result<_, _>>()?;
    /// assert_eq!([first, rest].concat(), all);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn iter_from(&self, cursor: &Cursor) -> Result<DatasetIter<T>> {
        Ok(DatasetIter {
            stage: self.node.clone().open(0, Some(&cursor.0))?,
        })
    }
}

/// A stage that yields one error.
struct Failed(Option<Error>);

impl<T> Stage<T> for Failed {
    fn next(&mut self) -> Option<Result<T>> {
        self.0.take().map(Err)
    }

    fn state(&self) -> Value {
        Value::Null
    }
}

/// The iterator of a random-access stage: an index.
struct Indexed<T> {
    node: Arc<dyn Node<T>>,
    epoch: u64,
    pos: usize,
    len: usize,
}

impl<T> Stage<T> for Indexed<T> {
    fn next(&mut self) -> Option<Result<T>> {
        if self.pos >= self.len {
            return None;
        }
        let item = self.node.get(self.epoch, self.pos);
        self.pos += 1;
        item
    }

    fn state(&self) -> Value {
        json!({"stage": "index", "pos": self.pos})
    }
}

fn open_indexed<T: Send + 'static>(
    node: Arc<dyn Node<T>>,
    epoch: u64,
    state: Option<&Value>,
) -> Result<Box<dyn Stage<T>>> {
    let len = node.len().unwrap_or(0);
    let pos = match state {
        None => 0,
        Some(s) => {
            let p = field_u64("index", s, "pos")? as usize;
            if p > len {
                return Err(bad_state("index", s));
            }
            p
        }
    };
    Ok(Box::new(Indexed {
        node,
        epoch,
        pos,
        len,
    }))
}

struct FromFn<F> {
    len: usize,
    f: F,
}

impl<T: Send + 'static, F: Fn(usize) -> T + Send + Sync + 'static> Node<T> for FromFn<F> {
    fn open(self: Arc<Self>, epoch: u64, state: Option<&Value>) -> Result<Box<dyn Stage<T>>> {
        open_indexed(self, epoch, state)
    }

    fn len(&self) -> Option<usize> {
        Some(self.len)
    }

    fn get(&self, _epoch: u64, i: usize) -> Option<Result<T>> {
        (i < self.len).then(|| Ok((self.f)(i)))
    }

    fn random_access(&self) -> bool {
        true
    }
}

type MakeIter<T> = Box<dyn Fn() -> Box<dyn Iterator<Item = T> + Send> + Send + Sync>;

struct Generator<T> {
    make: MakeIter<T>,
}

struct GeneratorStage<T> {
    iter: Box<dyn Iterator<Item = T> + Send>,
    pos: u64,
}

impl<T> Stage<T> for GeneratorStage<T> {
    fn next(&mut self) -> Option<Result<T>> {
        let item = self.iter.next()?;
        self.pos += 1;
        Some(Ok(item))
    }

    fn state(&self) -> Value {
        json!({"stage": "generator", "pos": self.pos})
    }
}

impl<T: Send + 'static> Node<T> for Generator<T> {
    fn open(self: Arc<Self>, _epoch: u64, state: Option<&Value>) -> Result<Box<dyn Stage<T>>> {
        let mut stage = GeneratorStage {
            iter: (self.make)(),
            pos: 0,
        };
        if let Some(s) = state {
            let pos = field_u64("generator", s, "pos")?;
            while stage.pos < pos {
                if stage.iter.next().is_none() {
                    return Err(Error::invalid(
                        "Dataset::iter_from",
                        format!(
                            "the cursor is at element {pos} of a generator that now ends after \
                             {}: the generator must yield the same elements every time",
                            stage.pos
                        ),
                    ));
                }
                stage.pos += 1;
            }
        }
        Ok(Box::new(stage))
    }

    fn len(&self) -> Option<usize> {
        None
    }

    fn get(&self, _epoch: u64, _i: usize) -> Option<Result<T>> {
        None
    }

    fn random_access(&self) -> bool {
        false
    }
}

type MapFn<T, U> = Arc<dyn Fn(T) -> Result<U> + Send + Sync>;

struct Map<T, U> {
    up: Arc<dyn Node<T>>,
    f: MapFn<T, U>,
}

struct MapStage<T, U> {
    up: Box<dyn Stage<T>>,
    f: MapFn<T, U>,
}

impl<T, U> Stage<U> for MapStage<T, U> {
    fn next(&mut self) -> Option<Result<U>> {
        Some(self.up.next()?.and_then(|t| (self.f)(t)))
    }

    fn state(&self) -> Value {
        self.up.state()
    }
}

impl<T: Send + 'static, U: Send + 'static> Node<U> for Map<T, U> {
    fn open(self: Arc<Self>, epoch: u64, state: Option<&Value>) -> Result<Box<dyn Stage<U>>> {
        if self.up.random_access() {
            return open_indexed(self, epoch, state);
        }
        Ok(Box::new(MapStage {
            up: self.up.clone().open(epoch, state)?,
            f: self.f.clone(),
        }))
    }

    fn len(&self) -> Option<usize> {
        self.up.len()
    }

    fn get(&self, epoch: u64, i: usize) -> Option<Result<U>> {
        Some(self.up.get(epoch, i)?.and_then(|t| (self.f)(t)))
    }

    fn random_access(&self) -> bool {
        self.up.random_access()
    }
}

struct ParallelMap<T, U> {
    up: Arc<dyn Node<T>>,
    f: Arc<dyn Fn(T) -> U + Send + Sync>,
    workers: usize,
}

type Job<T> = (u64, T);
type Done<U> = (u64, Result<U>);

struct ParallelMapStage<T, U> {
    up: Box<dyn Stage<T>>,
    jobs: Option<Sender<Job<T>>>,
    done: Receiver<Done<U>>,
    threads: Vec<JoinHandle<()>>,
    limit: usize,
    /// Elements pulled from upstream, and the next to deliver.
    pulled: u64,
    delivered: u64,
    upstream_done: bool,
    /// Finished elements waiting for their turn.
    ready: BTreeMap<u64, Result<U>>,
    /// The upstream state after each pulled, undelivered element.
    states: VecDeque<(u64, Value)>,
    /// The upstream state as of the last delivered element.
    at: Value,
}

impl<T: Send + 'static, U: Send + 'static> Node<U> for ParallelMap<T, U> {
    fn open(self: Arc<Self>, epoch: u64, state: Option<&Value>) -> Result<Box<dyn Stage<U>>> {
        let up = self.up.clone().open(epoch, state)?;
        let at = up.state();
        let (jobs, job_rx) = channel::<Job<T>>();
        let (done_tx, done) = channel::<Done<U>>();
        let job_rx = Arc::new(Mutex::new(job_rx));
        let threads = (0..self.workers)
            .map(|_| {
                let job_rx = job_rx.clone();
                let done_tx = done_tx.clone();
                let f = self.f.clone();
                std::thread::spawn(move || loop {
                    let job = job_rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    let Ok((k, t)) = job else { return };
                    let r = catch_unwind(AssertUnwindSafe(|| f(t))).map_err(|p| Error::Pipeline {
                        op: "Dataset::map_workers",
                        message: format!(
                            "the map function panicked at element {k}: {}",
                            panic_message(p.as_ref())
                        ),
                    });
                    if done_tx.send((k, r)).is_err() {
                        return;
                    }
                })
            })
            .collect();
        Ok(Box::new(ParallelMapStage {
            up,
            jobs: Some(jobs),
            done,
            threads,
            limit: 2 * self.workers,
            pulled: 0,
            delivered: 0,
            upstream_done: false,
            ready: BTreeMap::new(),
            states: VecDeque::new(),
            at,
        }))
    }

    fn len(&self) -> Option<usize> {
        self.up.len()
    }

    fn get(&self, _epoch: u64, _i: usize) -> Option<Result<U>> {
        None
    }

    fn random_access(&self) -> bool {
        false
    }
}

impl<T: Send, U: Send> Stage<U> for ParallelMapStage<T, U> {
    fn next(&mut self) -> Option<Result<U>> {
        while !self.upstream_done && (self.pulled - self.delivered) < self.limit as u64 {
            match self.up.next() {
                None => self.upstream_done = true,
                Some(item) => {
                    let k = self.pulled;
                    self.pulled += 1;
                    self.states.push_back((k, self.up.state()));
                    match item {
                        Ok(t) => {
                            let sent = self.jobs.as_ref().map(|j| j.send((k, t)));
                            if !matches!(sent, Some(Ok(()))) {
                                self.ready.insert(
                                    k,
                                    Err(Error::Pipeline {
                                        op: "Dataset::map_workers",
                                        message: "the map's worker threads have gone".into(),
                                    }),
                                );
                            }
                        }
                        Err(e) => {
                            self.ready.insert(k, Err(e));
                        }
                    }
                }
            }
        }
        if self.delivered == self.pulled {
            return None;
        }
        let want = self.delivered;
        let item = loop {
            if let Some(r) = self.ready.remove(&want) {
                break r;
            }
            match self.done.recv() {
                Ok((k, r)) => {
                    self.ready.insert(k, r);
                }
                Err(_) => {
                    break Err(Error::Pipeline {
                        op: "Dataset::map_workers",
                        message: "the map's worker threads have gone".into(),
                    })
                }
            }
        };
        self.delivered += 1;
        if let Some((k, s)) = self.states.pop_front() {
            debug_assert_eq!(k, want);
            self.at = s;
        }
        Some(item)
    }

    fn state(&self) -> Value {
        self.at.clone()
    }
}

impl<T, U> Drop for ParallelMapStage<T, U> {
    fn drop(&mut self) {
        self.jobs = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

struct Shuffle<T> {
    up: Arc<dyn Node<T>>,
    seed: u64,
    /// The last epoch's permutation (random-access upstream).
    perm: Mutex<Option<(u64, Arc<Vec<usize>>)>>,
}

/// A permutation of `0..n`, a pure function of `seed` and `epoch` (Fisher–Yates over a
/// SplitMix64 stream).
fn permutation(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut state = derive_seed(seed, &[epoch]);
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = ((u128::from(next()) * (i as u128 + 1)) >> 64) as usize;
        p.swap(i, j);
    }
    p
}

impl<T> Shuffle<T> {
    fn perm(&self, epoch: u64, n: usize) -> Arc<Vec<usize>> {
        let mut slot = self.perm.lock().unwrap_or_else(PoisonError::into_inner);
        match &*slot {
            Some((e, p)) if *e == epoch && p.len() == n => p.clone(),
            _ => {
                let p = Arc::new(permutation(n, self.seed, epoch));
                *slot = Some((epoch, p.clone()));
                p
            }
        }
    }
}

/// A shuffle over a sequential stage: one epoch held in memory.
struct Buffered<T> {
    items: Vec<Option<T>>,
    order: Vec<usize>,
    pos: usize,
}

impl<T: Send> Stage<T> for Buffered<T> {
    fn next(&mut self) -> Option<Result<T>> {
        let i = *self.order.get(self.pos)?;
        self.pos += 1;
        self.items[i].take().map(Ok)
    }

    fn state(&self) -> Value {
        json!({"stage": "shuffle", "pos": self.pos})
    }
}

impl<T: Send + 'static> Node<T> for Shuffle<T> {
    fn open(self: Arc<Self>, epoch: u64, state: Option<&Value>) -> Result<Box<dyn Stage<T>>> {
        if self.up.random_access() {
            return open_indexed(self, epoch, state);
        }
        let pos = match state {
            None => 0,
            Some(s) => field_u64("shuffle", s, "pos")? as usize,
        };
        let mut items = Vec::new();
        let mut up = self.up.clone().open(epoch, None)?;
        while let Some(item) = up.next() {
            items.push(Some(item?));
        }
        if pos > items.len() {
            return Err(bad_state("shuffle", state.unwrap_or(&Value::Null)));
        }
        let order = permutation(items.len(), self.seed, epoch);
        Ok(Box::new(Buffered { items, order, pos }))
    }

    fn len(&self) -> Option<usize> {
        self.up.len()
    }

    fn get(&self, epoch: u64, i: usize) -> Option<Result<T>> {
        let n = self.up.len()?;
        let p = self.perm(epoch, n);
        self.up.get(epoch, *p.get(i)?)
    }

    fn random_access(&self) -> bool {
        self.up.random_access()
    }
}

struct Shard<T> {
    up: Arc<dyn Node<T>>,
    n: usize,
    index: usize,
}

struct ShardStage<T> {
    up: Box<dyn Stage<T>>,
    n: usize,
    index: usize,
    pos: u64,
}

impl<T> Stage<T> for ShardStage<T> {
    fn next(&mut self) -> Option<Result<T>> {
        loop {
            let item = self.up.next()?;
            let k = self.pos;
            self.pos += 1;
            if k % self.n as u64 == self.index as u64 {
                return Some(item);
            }
        }
    }

    fn state(&self) -> Value {
        json!({"stage": "shard", "pos": self.pos, "up": self.up.state()})
    }
}

impl<T: Send + 'static> Node<T> for Shard<T> {
    fn open(self: Arc<Self>, epoch: u64, state: Option<&Value>) -> Result<Box<dyn Stage<T>>> {
        if self.up.random_access() {
            return open_indexed(self, epoch, state);
        }
        let (pos, up) = match state {
            None => (0, None),
            Some(s) => (
                field_u64("shard", s, "pos")?,
                Some(field("shard", s, "up")?),
            ),
        };
        Ok(Box::new(ShardStage {
            up: self.up.clone().open(epoch, up)?,
            n: self.n,
            index: self.index,
            pos,
        }))
    }

    fn len(&self) -> Option<usize> {
        let n = self.up.len()?;
        Some(n / self.n + usize::from(n % self.n > self.index))
    }

    fn get(&self, epoch: u64, i: usize) -> Option<Result<T>> {
        self.up
            .get(epoch, i.checked_mul(self.n)?.checked_add(self.index)?)
    }

    fn random_access(&self) -> bool {
        self.up.random_access()
    }
}

struct BatchNode<T> {
    up: Arc<dyn Node<T>>,
    size: usize,
    exact: bool,
}

struct BatchStage<T> {
    up: Box<dyn Stage<T>>,
    size: usize,
    exact: bool,
}

impl<T> Stage<Vec<T>> for BatchStage<T> {
    fn next(&mut self) -> Option<Result<Vec<T>>> {
        let mut out = Vec::with_capacity(self.size);
        while out.len() < self.size {
            match self.up.next() {
                Some(Ok(t)) => out.push(t),
                Some(Err(e)) => return Some(Err(e)),
                None => break,
            }
        }
        if out.is_empty() || (self.exact && out.len() < self.size) {
            return None;
        }
        Some(Ok(out))
    }

    fn state(&self) -> Value {
        json!({"stage": "batch", "up": self.up.state()})
    }
}

impl<T: Send + 'static> Node<Vec<T>> for BatchNode<T> {
    fn open(self: Arc<Self>, epoch: u64, state: Option<&Value>) -> Result<Box<dyn Stage<Vec<T>>>> {
        let up = match state {
            None => None,
            Some(s) => Some(field("batch", s, "up")?),
        };
        Ok(Box::new(BatchStage {
            up: self.up.clone().open(epoch, up)?,
            size: self.size,
            exact: self.exact,
        }))
    }

    fn len(&self) -> Option<usize> {
        let n = self.up.len()?;
        Some(if self.exact {
            n / self.size
        } else {
            n.div_ceil(self.size)
        })
    }

    fn get(&self, _epoch: u64, _i: usize) -> Option<Result<Vec<T>>> {
        None
    }

    fn random_access(&self) -> bool {
        false
    }
}

struct Repeat<T> {
    up: Arc<dyn Node<T>>,
    count: Option<u64>,
}

struct RepeatStage<T> {
    node: Arc<dyn Node<T>>,
    up: Box<dyn Stage<T>>,
    epoch: u64,
    count: Option<u64>,
    /// Whether the current epoch has yielded anything (an empty epoch ends the repeat).
    yielded: bool,
}

impl<T> Stage<T> for RepeatStage<T> {
    fn next(&mut self) -> Option<Result<T>> {
        loop {
            if self.count.is_some_and(|c| self.epoch >= c) {
                return None;
            }
            if let Some(item) = self.up.next() {
                self.yielded = true;
                return Some(item);
            }
            if !self.yielded {
                // an empty pass: repeating it forever would hang
                self.count = Some(self.epoch);
                return None;
            }
            self.epoch += 1;
            self.yielded = false;
            if self.count.is_some_and(|c| self.epoch >= c) {
                return None;
            }
            match self.node.clone().open(self.epoch, None) {
                Ok(up) => self.up = up,
                Err(e) => return Some(Err(e)),
            }
        }
    }

    fn state(&self) -> Value {
        json!({"stage": "repeat", "epoch": self.epoch, "yielded": self.yielded, "up": self.up.state()})
    }
}

impl<T: Send + 'static> Node<T> for Repeat<T> {
    fn open(self: Arc<Self>, _epoch: u64, state: Option<&Value>) -> Result<Box<dyn Stage<T>>> {
        let (epoch, yielded, up) = match state {
            None => (0, false, None),
            Some(s) => (
                field_u64("repeat", s, "epoch")?,
                field("repeat", s, "yielded")?
                    .as_bool()
                    .ok_or_else(|| bad_state("repeat", s))?,
                Some(field("repeat", s, "up")?),
            ),
        };
        Ok(Box::new(RepeatStage {
            node: self.up.clone(),
            up: self.up.clone().open(epoch, up)?,
            epoch,
            count: self.count,
            yielded,
        }))
    }

    fn len(&self) -> Option<usize> {
        let n = self.up.len()?;
        if n == 0 {
            return Some(0);
        }
        usize::try_from(self.count?).ok()?.checked_mul(n)
    }

    fn get(&self, _epoch: u64, _i: usize) -> Option<Result<T>> {
        None
    }

    fn random_access(&self) -> bool {
        false
    }
}

struct Take<T> {
    up: Arc<dyn Node<T>>,
    n: u64,
}

struct TakeStage<T> {
    up: Box<dyn Stage<T>>,
    left: u64,
}

impl<T> Stage<T> for TakeStage<T> {
    fn next(&mut self) -> Option<Result<T>> {
        if self.left == 0 {
            return None;
        }
        let item = self.up.next()?;
        self.left -= 1;
        Some(item)
    }

    fn state(&self) -> Value {
        json!({"stage": "take", "left": self.left, "up": self.up.state()})
    }
}

impl<T: Send + 'static> Node<T> for Take<T> {
    fn open(self: Arc<Self>, epoch: u64, state: Option<&Value>) -> Result<Box<dyn Stage<T>>> {
        let (left, up) = match state {
            None => (self.n, None),
            Some(s) => {
                let left = field_u64("take", s, "left")?;
                if left > self.n {
                    return Err(bad_state("take", s));
                }
                (left, Some(field("take", s, "up")?))
            }
        };
        Ok(Box::new(TakeStage {
            up: self.up.clone().open(epoch, up)?,
            left,
        }))
    }

    fn len(&self) -> Option<usize> {
        let n = self.up.len()?;
        Some(n.min(usize::try_from(self.n).unwrap_or(usize::MAX)))
    }

    fn get(&self, _epoch: u64, _i: usize) -> Option<Result<T>> {
        None
    }

    fn random_access(&self) -> bool {
        false
    }
}

struct Prefetch<T> {
    up: Arc<dyn Node<T>>,
    n: usize,
}

/// An element with the upstream state after it.
type Staged<T> = (Result<T>, Value);

struct PrefetchStage<T> {
    area: StagingArea<Staged<T>>,
    thread: Option<JoinHandle<()>>,
    at: Value,
}

impl<T: Send + 'static> Node<T> for Prefetch<T> {
    fn open(self: Arc<Self>, epoch: u64, state: Option<&Value>) -> Result<Box<dyn Stage<T>>> {
        let mut up = self.up.clone().open(epoch, state)?;
        let at = up.state();
        let area = StagingArea::new(self.n)?;
        let producer = area.clone();
        let thread = std::thread::spawn(move || {
            produce(&mut *up, &producer);
            producer.close();
        });
        Ok(Box::new(PrefetchStage {
            area,
            thread: Some(thread),
            at,
        }))
    }

    fn len(&self) -> Option<usize> {
        self.up.len()
    }

    fn get(&self, _epoch: u64, _i: usize) -> Option<Result<T>> {
        None
    }

    fn random_access(&self) -> bool {
        false
    }
}

/// The prefetch producer: pulls `up` into `area` until it ends, fails, or the area closes.
fn produce<T>(up: &mut dyn Stage<T>, area: &StagingArea<Staged<T>>) {
    loop {
        let next = catch_unwind(AssertUnwindSafe(|| up.next()));
        let (item, stop) = match next {
            Ok(None) => return,
            Ok(Some(item)) => (item, false),
            Err(p) => (
                Err(Error::Pipeline {
                    op: "Dataset::prefetch",
                    message: format!(
                        "a stage before the prefetch panicked: {}",
                        panic_message(p.as_ref())
                    ),
                }),
                true,
            ),
        };
        let state = if stop { Value::Null } else { up.state() };
        if area.put((item, state)).is_err() || stop {
            return;
        }
    }
}

impl<T: Send> Stage<T> for PrefetchStage<T> {
    fn next(&mut self) -> Option<Result<T>> {
        let (item, state) = self.area.get()?;
        if !state.is_null() {
            self.at = state;
        }
        Some(item)
    }

    fn state(&self) -> Value {
        self.at.clone()
    }
}

impl<T> Drop for PrefetchStage<T> {
    fn drop(&mut self) {
        self.area.close();
        self.area.clear();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
