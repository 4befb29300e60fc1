//! The kernels' parallel loops, run on the thread [`Team`](crate::Team) serving the calling
//! thread. The items are claimed in contiguous runs (shrinking towards the end) by the
//! team's threads, the caller among them; with one thread (or a busy team, or inside another loop's item) they run on the
//! calling thread in order. The items are the same either way (cut by the shape, never by
//! the thread count), so results do not depend on the path.
//!
//! Depends on [`crate::team`].

use crate::team;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// `f(state, i, items[i])` for every item, the results in item order; each thread that
/// takes part makes its `state` with `init` before its first item.
pub fn map_init<T: Send, S, R: Send>(
    items: Vec<T>,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, usize, T) -> R + Sync,
) -> Vec<R> {
    if items.len() < 2 {
        return serial(items, init, f);
    }
    let n = items.len();
    let slots: Vec<Mutex<Option<T>>> = items.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let results: Vec<Mutex<Option<R>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let parts = 2 * crate::Team::current_threads();
    let work = || {
        let mut state = None;
        while let Some(run) = claim(&next, n, parts) {
            for i in run {
                let item = slots[i]
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                if let Some(item) = item {
                    let s = state.get_or_insert_with(&init);
                    let r = f(s, i, item);
                    *results[i].lock().unwrap_or_else(PoisonError::into_inner) = Some(r);
                }
            }
        }
    };
    if !team::broadcast(&work) {
        work();
    }
    results
        .into_iter()
        .map(|r| {
            r.into_inner()
                .unwrap_or_else(PoisonError::into_inner)
                .expect("kiln: a parallel loop left an item unrun")
        })
        .collect()
}

/// The next run of items from `next` on: `1/parts` of those left (at least one), so each
/// thread works through long contiguous runs first (a thread's next item is usually the
/// one after its last: what the kernels' prefetching and the hardware's assume) and the
/// runs shrink towards the end, where they balance the threads' finishing times.
fn claim(next: &AtomicUsize, n: usize, parts: usize) -> Option<std::ops::Range<usize>> {
    let mut at = next.load(Ordering::Relaxed);
    loop {
        if at >= n {
            return None;
        }
        let end = at + ((n - at) / parts).max(1);
        match next.compare_exchange_weak(at, end, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Some(at..end),
            Err(now) => at = now,
        }
    }
}

/// The items in order on the calling thread.
fn serial<T, S, R>(
    items: Vec<T>,
    init: impl Fn() -> S,
    f: impl Fn(&mut S, usize, T) -> R,
) -> Vec<R> {
    let mut state = None;
    items
        .into_iter()
        .enumerate()
        .map(|(i, t)| f(state.get_or_insert_with(&init), i, t))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Team;
    use std::time::Duration;

    /// Every item runs once, results in item order, for one to three threads (helpers
    /// spinning or asleep) and any item count; one thread makes one state and runs the items
    /// in order on the caller.
    #[test]
    fn every_item_once_in_order() {
        for threads in [1, 2, 3] {
            for spin in [Duration::ZERO, Duration::from_millis(1)] {
                let team = Team::with_spin(threads, spin);
                for n in [0usize, 1, 2, 7, 100] {
                    let inits = AtomicUsize::new(0);
                    let order = Mutex::new(Vec::new());
                    let got = team.install(|| {
                        map_init(
                            (0..n).collect(),
                            || inits.fetch_add(1, Ordering::Relaxed),
                            |_, i, x| {
                                assert_eq!(i, x);
                                order.lock().unwrap().push(i);
                                x * x
                            },
                        )
                    });
                    assert_eq!(got, (0..n).map(|x| x * x).collect::<Vec<_>>());
                    let mut order = order.into_inner().unwrap();
                    if threads == 1 {
                        assert!(inits.load(Ordering::Relaxed) <= 1);
                        assert_eq!(order, (0..n).collect::<Vec<_>>());
                    }
                    assert!(inits.load(Ordering::Relaxed) <= threads);
                    order.sort_unstable();
                    assert_eq!(order, (0..n).collect::<Vec<_>>());
                }
            }
        }
    }

    /// A loop inside an item runs serially (on the item's thread) and completes.
    #[test]
    fn nested_loops_complete() {
        let team = Team::with_spin(2, Duration::from_micros(200));
        let got = team.install(|| {
            map_init(
                (0..6usize).collect(),
                || (),
                |_, _, x| {
                    map_init((0..x).collect(), || (), |_, _, y: usize| y)
                        .iter()
                        .sum::<usize>()
                },
            )
        });
        assert_eq!(got, vec![0, 0, 1, 3, 6, 10]);
    }

    /// A panic in an item reaches the caller, and the team runs the next loop normally.
    #[test]
    fn a_panic_reaches_the_caller_and_the_team_recovers() {
        let team = Team::with_spin(3, Duration::from_micros(200));
        for bad in [0usize, 5, 9] {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                team.install(|| {
                    map_init(
                        (0..10usize).collect(),
                        || (),
                        |_, i, x| {
                            if i == bad {
                                panic!("item {i}");
                            }
                            x
                        },
                    )
                })
            }));
            assert!(r.is_err());
            let ok = team.install(|| map_init((0..10usize).collect(), || (), |_, _, x| x + 1));
            assert_eq!(ok, (1..11).collect::<Vec<_>>());
        }
    }

    /// Loops started from several threads at once on one team all complete with their own
    /// results (one runs on the team, the others serially).
    #[test]
    fn concurrent_callers_share_a_team() {
        let team = Team::with_spin(2, Duration::from_micros(100));
        std::thread::scope(|s| {
            for t in 0..4usize {
                let team = &team;
                s.spawn(move || {
                    for _ in 0..20 {
                        let got = team
                            .install(|| map_init((0..50usize).collect(), || (), |_, _, x| x * t));
                        assert_eq!(got, (0..50).map(|x| x * t).collect::<Vec<_>>());
                    }
                });
            }
        });
    }
}
