//! The kernels' parallel loops. With a pool of two or more threads they are `rayon`'s
//! parallel iterators. With one thread (`RAYON_NUM_THREADS=1`) the items run on the calling
//! thread: through the pool, a thread outside it hands the loop to the pool's one worker and
//! sleeps until it is done, and that hand-off cost more than the work of a medium kernel
//! (`g * 2` over 256×512 f32: 109 µs through the one-thread pool, 26 µs on the caller). The
//! items are the same either way (cut by the shape, never by the thread count), so results
//! do not depend on the path.
//!
//! Depends on `rayon` only.

use rayon::prelude::*;

/// `f(state, i, items[i])` for every item, the results in item order; each thread makes its
/// `state` with `init` before its first item (`rayon`'s `map_init`).
pub fn map_init<T: Send, S, R: Send>(
    items: Vec<T>,
    init: impl Fn() -> S + Sync + Send,
    f: impl Fn(&mut S, usize, T) -> R + Sync + Send,
) -> Vec<R> {
    if rayon::current_num_threads() < 2 {
        let mut state = init();
        return items
            .into_iter()
            .enumerate()
            .map(|(i, t)| f(&mut state, i, t))
            .collect();
    }
    items
        .into_par_iter()
        .enumerate()
        .map_init(init, |state, (i, t)| f(state, i, t))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Every item runs once, results in item order, for one to three threads and any item
    /// count; one thread makes one state.
    #[test]
    fn every_item_once_in_order() {
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for n in [0usize, 1, 2, 7, 100] {
                let inits = AtomicUsize::new(0);
                let got = pool.install(|| {
                    map_init(
                        (0..n).collect(),
                        || inits.fetch_add(1, Ordering::Relaxed),
                        |_, i, x| {
                            assert_eq!(i, x);
                            x * x
                        },
                    )
                });
                assert_eq!(got, (0..n).map(|x| x * x).collect::<Vec<_>>());
                if threads == 1 {
                    assert_eq!(inits.load(Ordering::Relaxed), 1);
                }
            }
        }
    }
}
