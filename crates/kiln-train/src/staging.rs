//! [`StagingArea`]: a bounded, closable queue between two pipeline stages (TF's
//! `StagingArea`), so input preparation on one thread overlaps the compiled step on another.
//! `put` blocks while it is full, `get` while it is empty; both report the time they spent
//! waiting, which says which side is the bottleneck.
//!
//! Depends on `std` and `crate::error`.

use crate::{Error, Result};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// A bounded queue shared by its clones (see the module docs).
///
/// ```
/// use kiln_train::StagingArea;
/// let area = StagingArea::new(2)?;
/// let producer = {
///     let area = area.clone();
///     std::thread::spawn(move || {
///         for i in 0..5 {
///             area.put(i).unwrap(); // blocks while two are waiting
///         }
///         area.close();
///     })
/// };
/// let got: Vec<i32> = std::iter::from_fn(|| area.get()).collect();
/// producer.join().unwrap();
/// assert_eq!(got, vec![0, 1, 2, 3, 4]);
/// assert_eq!(area.stats().gets, 5);
/// # Ok::<(), kiln_train::Error>(())
/// ```
#[derive(Debug)]
pub struct StagingArea<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for StagingArea<T> {
    fn clone(&self) -> Self {
        StagingArea {
            shared: self.shared.clone(),
        }
    }
}

#[derive(Debug)]
struct Shared<T> {
    capacity: usize,
    queue: Mutex<Queue<T>>,
    not_empty: Condvar,
    not_full: Condvar,
}

#[derive(Debug)]
struct Queue<T> {
    items: VecDeque<T>,
    closed: bool,
    stats: StagingStats,
}

/// What a [`StagingArea`] has seen: items through each end and the time spent waiting there.
///
/// ```
/// let s = kiln_train::StagingStats::default();
/// assert_eq!((s.puts, s.gets), (0, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StagingStats {
    /// Items put.
    pub puts: u64,
    /// Time `put` spent waiting for room (the consumer is the bottleneck).
    pub put_wait: Duration,
    /// Items taken.
    pub gets: u64,
    /// Time `get` spent waiting for an item (the producer is the bottleneck).
    pub get_wait: Duration,
}

/// What [`StagingArea::get_timeout`] found.
///
/// ```
/// use kiln_train::{Got, StagingArea};
/// use std::time::Duration;
/// let area = StagingArea::new(1)?;
/// area.put(3).unwrap();
/// assert_eq!(area.get_timeout(Duration::from_millis(1)), Got::Item(3));
/// area.close();
/// assert_eq!(area.get_timeout(Duration::from_millis(1)), Got::Closed);
/// # Ok::<(), kiln_train::Error>(())
/// ```
#[derive(Debug, PartialEq, Eq)]
pub enum Got<T> {
    /// The next item.
    Item(T),
    /// The area is closed and empty: no item will come.
    Closed,
    /// No item came within the timeout.
    TimedOut,
}

/// The error of a `put` into a closed area; it hands the item back.
///
/// ```
/// let area = kiln_train::StagingArea::new(1)?;
/// area.close();
/// assert_eq!(area.put(7).unwrap_err().0, 7);
/// # Ok::<(), kiln_train::Error>(())
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct Closed<T>(pub T);

impl<T> std::fmt::Display for Closed<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StagingArea::put: the area is closed; its consumer has gone")
    }
}

impl<T: std::fmt::Debug> std::error::Error for Closed<T> {}

impl<T> StagingArea<T> {
    /// An empty area holding at most `capacity` items (at least 1).
    ///
    /// ```
    /// let area = kiln_train::StagingArea::<String>::new(4)?;
    /// assert_eq!((area.capacity(), area.size()), (4, 0));
    /// assert!(kiln_train::StagingArea::<String>::new(0).is_err());
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn new(capacity: usize) -> Result<StagingArea<T>> {
        if capacity == 0 {
            return Err(Error::invalid(
                "StagingArea::new",
                "a capacity of 0 could never hold an item: pass at least 1 (2 lets one item \
                 be prepared while another is used)",
            ));
        }
        Ok(StagingArea {
            shared: Arc::new(Shared {
                capacity,
                queue: Mutex::new(Queue {
                    items: VecDeque::with_capacity(capacity),
                    closed: false,
                    stats: StagingStats::default(),
                }),
                not_empty: Condvar::new(),
                not_full: Condvar::new(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Queue<T>> {
        self.shared
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends `item`, waiting while the area is full; a closed area hands it back.
    ///
    /// ```
    /// let area = kiln_train::StagingArea::new(2)?;
    /// area.put("a").unwrap();
    /// area.put("b").unwrap(); // a third put would wait for a get
    /// assert_eq!(area.get(), Some("a"));
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn put(&self, item: T) -> std::result::Result<(), Closed<T>> {
        let start = Instant::now();
        let mut q = self.lock();
        while q.items.len() >= self.shared.capacity && !q.closed {
            q = self
                .shared
                .not_full
                .wait(q)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if q.closed {
            return Err(Closed(item));
        }
        q.items.push_back(item);
        q.stats.puts += 1;
        q.stats.put_wait += start.elapsed();
        drop(q);
        // all: a waiting `peek` for a later index must not take the wake-up of a `get`
        self.shared.not_empty.notify_all();
        Ok(())
    }

    /// Takes the oldest item, waiting while the area is empty; `None` once it is closed and
    /// empty.
    ///
    /// ```
    /// let area = kiln_train::StagingArea::new(2)?;
    /// area.put(1).unwrap();
    /// area.close();
    /// assert_eq!(area.get(), Some(1)); // a closed area still hands out what it holds
    /// assert_eq!(area.get(), None);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn get(&self) -> Option<T> {
        match self.get_deadline(None) {
            Got::Item(t) => Some(t),
            Got::Closed | Got::TimedOut => None,
        }
    }

    /// As [`StagingArea::get`], waiting at most `timeout`.
    ///
    /// ```
    /// let area = kiln_train::StagingArea::<u8>::new(1)?;
    /// let waited = area.get_timeout(std::time::Duration::from_millis(5));
    /// assert_eq!(waited, kiln_train::Got::TimedOut);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn get_timeout(&self, timeout: Duration) -> Got<T> {
        self.get_deadline(Some(Instant::now() + timeout))
    }

    fn get_deadline(&self, deadline: Option<Instant>) -> Got<T> {
        let start = Instant::now();
        let mut q = self.lock();
        loop {
            if let Some(item) = q.items.pop_front() {
                q.stats.gets += 1;
                q.stats.get_wait += start.elapsed();
                drop(q);
                self.shared.not_full.notify_one();
                return Got::Item(item);
            }
            if q.closed {
                q.stats.get_wait += start.elapsed();
                return Got::Closed;
            }
            q = match deadline {
                None => self
                    .shared
                    .not_empty
                    .wait(q)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        q.stats.get_wait += start.elapsed();
                        return Got::TimedOut;
                    }
                    self.shared
                        .not_empty
                        .wait_timeout(q, d - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }

    /// Calls `f` on the item at `index` (0 = the next `get`) without taking it, waiting
    /// until there is one; `None` if the area closes first with fewer items.
    ///
    /// ```
    /// let area = kiln_train::StagingArea::new(3)?;
    /// area.put("a").unwrap();
    /// area.put("b").unwrap();
    /// assert_eq!(area.peek(1, |s| s.len()), Some(1));
    /// area.close();
    /// assert_eq!(area.peek(2, |s| s.len()), None);
    /// assert_eq!(area.size(), 2);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn peek<R>(&self, index: usize, f: impl FnOnce(&T) -> R) -> Option<R> {
        let mut q = self.lock();
        loop {
            if let Some(item) = q.items.get(index) {
                return Some(f(item));
            }
            if q.closed || index >= self.shared.capacity {
                return None;
            }
            q = self
                .shared
                .not_empty
                .wait(q)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The number of items waiting.
    ///
    /// ```
    /// let area = kiln_train::StagingArea::new(3)?;
    /// area.put('x').unwrap();
    /// area.put('y').unwrap();
    /// assert_eq!(area.size(), 2);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn size(&self) -> usize {
        self.lock().items.len()
    }

    /// The most items it holds.
    ///
    /// ```
    /// assert_eq!(kiln_train::StagingArea::<u8>::new(3)?.capacity(), 3);
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.shared.capacity
    }

    /// Drops every waiting item and returns how many there were; blocked `put`s go on.
    ///
    /// ```
    /// let area = kiln_train::StagingArea::new(2)?;
    /// area.put(1).unwrap();
    /// assert_eq!((area.clear(), area.size()), (1, 0));
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn clear(&self) -> usize {
        let n = {
            let mut q = self.lock();
            let n = q.items.len();
            q.items.clear();
            n
        };
        self.shared.not_full.notify_all();
        n
    }

    /// Closes the area: every blocked and later `put` fails (handing its item back), and
    /// `get` returns the waiting items, then `None`.
    ///
    /// ```
    /// let area = kiln_train::StagingArea::new(1)?;
    /// let consumer = {
    ///     let area = area.clone();
    ///     std::thread::spawn(move || area.get()) // waits for an item
    /// };
    /// area.close();
    /// assert_eq!(consumer.join().unwrap(), None::<u8>); // closing wakes it
    /// assert!(area.put(1).is_err());
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn close(&self) {
        self.lock().closed = true;
        self.shared.not_full.notify_all();
        self.shared.not_empty.notify_all();
    }

    /// Whether it is closed.
    ///
    /// ```
    /// let area = kiln_train::StagingArea::<u8>::new(1)?;
    /// assert!(!area.is_closed());
    /// area.clone().close(); // clones share one area
    /// assert!(area.is_closed());
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Items through each end, and the time spent waiting there.
    ///
    /// ```
    /// let area = kiln_train::StagingArea::new(2)?;
    /// area.put(1).unwrap();
    /// area.put(2).unwrap();
    /// area.get();
    /// let s = area.stats();
    /// assert_eq!((s.puts, s.gets), (2, 1));
    /// # Ok::<(), kiln_train::Error>(())
    /// ```
    pub fn stats(&self) -> StagingStats {
        self.lock().stats
    }
}
