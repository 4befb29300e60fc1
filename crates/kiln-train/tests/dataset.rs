//! Integration tests of `Dataset` input pipelines: sharding covers every element once per
//! epoch, the shuffle is a pure function of (seed, epoch) and the same over random-access and
//! sequential upstreams, `map_workers` keeps the serial order and turns panics into errors,
//! batch/take/repeat lengths, and — most of all — that a cursor taken after any element,
//! written out and parsed back, resumes exactly the uninterrupted iteration (checked against a
//! plain-Rust model of the pipeline).

mod common;
use common::within;

use kiln_train::{Cursor, Dataset, Error};
use proptest::prelude::*;
use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------

/// Every element of one iteration, failing the test on an error element.
fn all<T: Send + 'static>(ds: &Dataset<T>) -> Vec<T> {
    ds.iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|e| panic!("element {i} is an error: {e}")))
        .collect()
}

/// The map function used throughout: distinguishable from the index.
fn f(i: usize) -> u64 {
    i as u64 * 10 + 1
}

/// SplitMix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An independent re-implementation of the documented shuffle: Fisher–Yates over a
/// SplitMix64 stream seeded from (seed, epoch). It pins the order, which the crate promises
/// to keep the same across versions.
fn ref_perm(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut state = mix(mix(seed) ^ epoch.wrapping_add(GOLDEN));
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        state = state.wrapping_add(GOLDEN);
        let r = mix(state);
        let j = ((u128::from(r) * (i as u128 + 1)) >> 64) as usize;
        p.swap(i, j);
    }
    p
}

fn sorted<T: Ord + Clone>(v: &[T]) -> Vec<T> {
    let mut v = v.to_vec();
    v.sort();
    v
}

/// The iteration of `ds` and the cursor (as text) after each of its `k` first elements.
fn iterate_with_cursors<T: Send + 'static>(ds: &Dataset<T>) -> (Vec<T>, Vec<String>) {
    let mut it = ds.iter();
    let mut cursors = vec![it.cursor().to_string()];
    let mut items = Vec::new();
    while let Some(r) = it.next() {
        let k = items.len();
        items.push(r.unwrap_or_else(|e| panic!("element {k} is an error: {e}")));
        cursors.push(it.cursor().to_string());
    }
    // the cursor of an exhausted iterator resumes nothing
    let end = it.cursor().to_string();
    assert!(it.next().is_none(), "an iterator went on after its end");
    assert!(
        resume(ds, &end).is_empty(),
        "the cursor {end} of an exhausted iterator resumed elements"
    );
    (items, cursors)
}

/// Resumes `ds` from the cursor text `text`, collecting the rest.
fn resume<T: Send + 'static>(ds: &Dataset<T>, text: &str) -> Vec<T> {
    let cursor: Cursor = text
        .parse()
        .unwrap_or_else(|e| panic!("a cursor's own text {text} does not parse: {e}"));
    ds.iter_from(&cursor)
        .unwrap_or_else(|e| panic!("iter_from({text}) failed: {e}"))
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|e| panic!("resumed element {i} is an error: {e}")))
        .collect()
}

/// For every position `k` of the full iteration: the cursor after `k` elements, written out
/// and parsed back, resumes exactly the rest. Returns the full iteration.
fn check_resume_everywhere<T>(name: &str, ds: &Dataset<T>) -> Vec<T>
where
    T: PartialEq + Debug + Send + 'static,
{
    let (full, cursors) = iterate_with_cursors(ds);
    assert_eq!(cursors.len(), full.len() + 1);
    for (k, text) in cursors.iter().enumerate() {
        let rest = resume(ds, text);
        assert_eq!(
            rest.as_slice(),
            &full[k..],
            "{name}: resuming after {k} of {} elements from cursor {text}",
            full.len()
        );
    }
    full
}

// ---------------------------------------------------------------------------------------
// the reference model itself
// ---------------------------------------------------------------------------------------

#[test]
fn reference_permutation_is_a_permutation() {
    for n in 0..40 {
        for seed in [0, 1, 7, u64::MAX] {
            assert_eq!(sorted(&ref_perm(n, seed, 3)), (0..n).collect::<Vec<_>>());
        }
    }
}

// ---------------------------------------------------------------------------------------
// sharding
// ---------------------------------------------------------------------------------------

/// Sources whose one pass is some order of `0..n`.
fn sources(n: usize) -> Vec<(&'static str, Dataset<usize>)> {
    vec![
        ("from_fn", Dataset::from_fn(n, |i| i)),
        ("from_generator", Dataset::from_generator(move || 0..n)),
        ("from_fn.shuffle", Dataset::from_fn(n, |i| i).shuffle(11)),
        (
            "from_generator.shuffle",
            Dataset::from_generator(move || 0..n).shuffle(11),
        ),
        (
            "from_fn.map_workers",
            Dataset::from_fn(n, |i| i)
                .map_workers(2, |i| i)
                .expect("map_workers(2)"),
        ),
    ]
}

#[test]
fn shards_partition_every_pass() {
    for n_items in [0usize, 1, 2, 5, 7, 23] {
        for (name, src) in sources(n_items) {
            let pass = all(&src);
            assert_eq!(
                sorted(&pass),
                (0..n_items).collect::<Vec<_>>(),
                "{name}({n_items}): one pass is a permutation of the source"
            );
            if !name.contains("shuffle") {
                assert_eq!(pass, (0..n_items).collect::<Vec<_>>(), "{name}: in order");
            }
            for n in 1..=5usize {
                let mut seen = vec![0u32; n_items];
                for index in 0..n {
                    let shard = src.clone().shard(n, index).expect("a valid shard");
                    let got = all(&shard);
                    let want: Vec<usize> = pass.iter().copied().skip(index).step_by(n).collect();
                    assert_eq!(got, want, "{name}({n_items}).shard({n}, {index})");
                    // hand count: the positions index, index + n, ... below n_items
                    let count = (n_items + n - 1 - index) / n;
                    assert_eq!(got.len(), count, "{name}({n_items}).shard({n}, {index})");
                    if src.len().is_some() {
                        assert_eq!(shard.len(), Some(count), "{name}.shard({n},{index}).len()");
                    }
                    for x in got {
                        seen[x] += 1;
                    }
                }
                assert!(
                    seen.iter().all(|&c| c == 1),
                    "{name}({n_items}) in {n} shards: counts {seen:?}"
                );
            }
        }
    }
}

#[test]
fn shards_partition_each_epoch_of_a_repeat() {
    let n_items = 13;
    for (name, src) in sources(n_items) {
        let epochs = 3u64;
        let whole = all(&src.clone().repeat(Some(epochs)));
        assert_eq!(whole.len(), n_items * epochs as usize);
        for n in 1..=5usize {
            let mut shard_items: Vec<Vec<usize>> = Vec::new();
            for index in 0..n {
                let s = all(&src
                    .clone()
                    .shard(n, index)
                    .expect("a valid shard")
                    .repeat(Some(epochs)));
                shard_items.push(s);
            }
            for e in 0..epochs as usize {
                let pass = &whole[e * n_items..(e + 1) * n_items];
                assert_eq!(
                    sorted(pass),
                    (0..n_items).collect::<Vec<_>>(),
                    "{name} epoch {e}"
                );
                let mut seen = vec![0u32; n_items];
                for (index, items) in shard_items.iter().enumerate() {
                    let per_epoch = (n_items + n - 1 - index) / n;
                    let got = &items[e * per_epoch..(e + 1) * per_epoch];
                    let want: Vec<usize> = pass.iter().copied().skip(index).step_by(n).collect();
                    assert_eq!(got, want.as_slice(), "{name} shard({n},{index}) epoch {e}");
                    for &x in got {
                        seen[x] += 1;
                    }
                }
                assert!(seen.iter().all(|&c| c == 1), "{name} epoch {e}: {seen:?}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// shuffle
// ---------------------------------------------------------------------------------------

#[test]
fn shuffle_epochs_are_permutations_and_pure_functions_of_seed_and_epoch() {
    let n = 20;
    let epochs = 5u64;
    let ds = Dataset::from_fn(n, |i| i).shuffle(42).repeat(Some(epochs));
    let v = all(&ds);
    assert_eq!(v.len(), n * epochs as usize);
    let per_epoch: Vec<Vec<usize>> = v.chunks(n).map(<[usize]>::to_vec).collect();
    for (e, p) in per_epoch.iter().enumerate() {
        assert_eq!(sorted(p), (0..n).collect::<Vec<_>>(), "epoch {e}");
        assert_ne!(p, &(0..n).collect::<Vec<_>>(), "epoch {e} is not shuffled");
        assert_eq!(
            p,
            &ref_perm(n, 42, e as u64),
            "epoch {e} against the reference"
        );
    }
    // different epochs differ (20! orders: a collision would be a bug)
    for a in 0..per_epoch.len() {
        for b in a + 1..per_epoch.len() {
            assert_ne!(per_epoch[a], per_epoch[b], "epochs {a} and {b}");
        }
    }
    // the same every time, through a second iterator and a freshly built dataset
    assert_eq!(all(&ds), v);
    let rebuilt = Dataset::from_fn(n, |i| i).shuffle(42).repeat(Some(epochs));
    assert_eq!(all(&rebuilt), v);
    // a pure function of the epoch: a shorter or longer repeat shares the common epochs
    let two = all(&Dataset::from_fn(n, |i| i).shuffle(42).repeat(Some(2)));
    assert_eq!(two.as_slice(), &v[..2 * n]);
    let eight = all(&Dataset::from_fn(n, |i| i).shuffle(42).repeat(Some(8)));
    assert_eq!(&eight[..v.len()], v.as_slice());
    // a bare shuffle is epoch 0
    assert_eq!(all(&Dataset::from_fn(n, |i| i).shuffle(42)), per_epoch[0]);
}

#[test]
fn shuffle_seeds_give_different_orders() {
    let n = 20;
    let orders: Vec<Vec<usize>> = (0..20u64)
        .map(|seed| all(&Dataset::from_fn(n, |i| i).shuffle(seed)))
        .collect();
    for (s, o) in orders.iter().enumerate() {
        assert_eq!(o, &ref_perm(n, s as u64, 0), "seed {s}");
    }
    for a in 0..orders.len() {
        for b in a + 1..orders.len() {
            assert_ne!(
                orders[a], orders[b],
                "seeds {a} and {b} give the same order"
            );
        }
    }
}

#[test]
fn shuffle_is_close_to_uniform() {
    // all 6 orders of 3 elements over 3000 seeds: each expected 500 times (σ ≈ 20)
    let mut counts = std::collections::BTreeMap::new();
    for seed in 0..3000u64 {
        *counts
            .entry(all(&Dataset::from_fn(3, |i| i).shuffle(seed)))
            .or_insert(0u32) += 1;
    }
    assert_eq!(counts.len(), 6, "{counts:?}");
    assert!(
        counts.values().all(|&c| (380..=620).contains(&c)),
        "{counts:?}"
    );
    // the first position of 10 elements over 3000 seeds: each element about 300 times
    let mut first = [0u32; 10];
    for seed in 0..3000u64 {
        first[all(&Dataset::from_fn(10, |i| i).shuffle(seed))[0]] += 1;
    }
    assert!(first.iter().all(|&c| (220..=380).contains(&c)), "{first:?}");
}

#[test]
fn shuffle_order_is_the_same_over_random_access_and_sequential_upstreams() {
    for n in 0..=30usize {
        for seed in [0u64, 1, 7, 12345, u64::MAX] {
            let random = Dataset::from_fn(n, |i| i).shuffle(seed).repeat(Some(3));
            let sequential = Dataset::from_generator(move || 0..n)
                .shuffle(seed)
                .repeat(Some(3));
            // a map before the shuffle keeps random access; map_workers makes it sequential
            let mapped = Dataset::from_fn(n, |i| i)
                .map_workers(2, |i| i)
                .expect("map_workers(2)")
                .shuffle(seed)
                .repeat(Some(3));
            let r = all(&random);
            let want: Vec<usize> = (0..3).flat_map(|e| ref_perm(n, seed, e)).collect();
            assert_eq!(r, want, "from_fn({n}).shuffle({seed})");
            assert_eq!(all(&sequential), r, "from_generator({n}).shuffle({seed})");
            assert_eq!(all(&mapped), r, "map_workers({n}).shuffle({seed})");
        }
    }
}

// ---------------------------------------------------------------------------------------
// map_workers
// ---------------------------------------------------------------------------------------

/// A map function whose run time varies by element, so workers finish out of order.
fn jittery(i: usize) -> u64 {
    std::thread::sleep(Duration::from_micros(((i * 37) % 11) as u64 * 150));
    f(i)
}

#[test]
fn map_workers_keeps_the_serial_order() {
    within("map_workers order", 60, || {
        let n = 60;
        let want: Vec<u64> = (0..n).map(f).collect();
        let serial = all(&Dataset::from_fn(n, |i| i).map(f));
        assert_eq!(serial, want);
        for workers in [1usize, 2, 3, 8] {
            let par = Dataset::from_fn(n, |i| i)
                .map_workers(workers, jittery)
                .expect("map_workers");
            assert_eq!(all(&par), want, "{workers} workers over from_fn");
            assert_eq!(par.len(), Some(n));
            let gen = Dataset::from_generator(move || 0..n)
                .map_workers(workers, jittery)
                .expect("map_workers");
            assert_eq!(all(&gen), want, "{workers} workers over a generator");
            let shuffled = Dataset::from_fn(n, |i| i)
                .shuffle(5)
                .map_workers(workers, jittery)
                .expect("map_workers");
            let want_shuffled: Vec<u64> = ref_perm(n, 5, 0).into_iter().map(f).collect();
            assert_eq!(
                all(&shuffled),
                want_shuffled,
                "{workers} workers after a shuffle"
            );
        }
    });
}

fn is_pipeline_error(e: &Error, needle: &str) -> bool {
    matches!(e, Error::Pipeline { message, .. } if message.contains(needle))
}

#[test]
fn a_panicking_map_worker_gives_an_error_at_that_element() {
    let got: Vec<Result<usize, Error>> = within("panicking map_workers", 30, || {
        let ds = Dataset::from_fn(10, |i| i)
            .map_workers(3, |i| {
                if i == 4 {
                    panic!("boom at element four");
                }
                i
            })
            .expect("map_workers(3)");
        ds.iter().collect()
    });
    assert_eq!(got.len(), 10, "{got:?}");
    for (i, r) in got.iter().enumerate() {
        match r {
            Err(e) if i == 4 => assert!(
                is_pipeline_error(e, "boom at element four"),
                "element 4: {e:?}"
            ),
            Ok(v) if i != 4 => assert_eq!(*v, i),
            other => panic!("element {i}: {other:?}"),
        }
    }
}

#[test]
fn a_panic_before_a_prefetch_gives_an_error_and_ends() {
    let got: Vec<Result<usize, Error>> = within("panicking map before prefetch", 30, || {
        let ds = Dataset::from_fn(10, |i| i)
            .map(|i| {
                if i == 4 {
                    panic!("boom before the prefetch");
                }
                i
            })
            .prefetch(2)
            .expect("prefetch(2)");
        ds.iter().collect()
    });
    assert_eq!(got.len(), 5, "{got:?}");
    for (i, r) in got.iter().take(4).enumerate() {
        assert!(matches!(r, Ok(v) if *v == i), "element {i}: {r:?}");
    }
    match &got[4] {
        Err(e) => assert!(is_pipeline_error(e, "boom before the prefetch"), "{e:?}"),
        Ok(v) => panic!("element 4 should be an error, got {v}"),
    }
}

#[test]
fn dropping_iterators_mid_way_does_not_hang() {
    within("drop map_workers mid-way", 30, || {
        let slow = Dataset::from_fn(1000, |i| i)
            .map_workers(4, |i| {
                std::thread::sleep(Duration::from_millis(2));
                i
            })
            .expect("map_workers(4)");
        let mut it = slow.iter();
        for want in 0..3 {
            assert!(matches!(it.next(), Some(Ok(v)) if v == want));
        }
        drop(it);
    });
    within("drop endless map_workers mid-way", 30, || {
        let endless = Dataset::from_fn(10, |i| i)
            .repeat(None)
            .map_workers(3, |i| i)
            .expect("map_workers(3)");
        let first: Vec<usize> = endless
            .iter()
            .take(25)
            .map(|r| r.expect("element"))
            .collect();
        let want: Vec<usize> = (0..25).map(|i| i % 10).collect();
        assert_eq!(first, want);
    });
    within("drop endless prefetch mid-way", 30, || {
        let endless = Dataset::from_fn(10, |i| i)
            .repeat(None)
            .prefetch(2)
            .expect("prefetch(2)");
        let first: Vec<usize> = endless
            .iter()
            .take(25)
            .map(|r| r.expect("element"))
            .collect();
        let want: Vec<usize> = (0..25).map(|i| i % 10).collect();
        assert_eq!(first, want);
        // never read at all
        drop(endless.iter());
    });
    within("drop prefetch over map_workers mid-way", 30, || {
        let ds = Dataset::from_fn(10, |i| i)
            .repeat(None)
            .map_workers(2, |i| i)
            .expect("map_workers(2)")
            .prefetch(3)
            .expect("prefetch(3)");
        let mut it = ds.iter();
        assert!(matches!(it.next(), Some(Ok(0))));
        drop(it);
    });
}

// ---------------------------------------------------------------------------------------
// batch, len, take, repeat
// ---------------------------------------------------------------------------------------

#[test]
fn batch_lengths_and_remainders() {
    for n in 0..=13usize {
        for size in 1..=5usize {
            // hand reference: full groups, then the remainder
            let mut lens = vec![size; n / size];
            let exact_lens = lens.clone();
            if n % size != 0 {
                lens.push(n % size);
            }
            for generator in [false, true] {
                let src = if generator {
                    Dataset::from_generator(move || 0..n)
                } else {
                    Dataset::from_fn(n, |i| i)
                };
                let b = src.clone().batch(size).expect("batch");
                let got = all(&b);
                assert_eq!(
                    got.iter().map(Vec::len).collect::<Vec<_>>(),
                    lens,
                    "batch({size}) of {n} (generator: {generator})"
                );
                assert_eq!(got.concat(), (0..n).collect::<Vec<_>>());
                let e = src.batch_exact(size).expect("batch_exact");
                let got = all(&e);
                assert_eq!(
                    got.iter().map(Vec::len).collect::<Vec<_>>(),
                    exact_lens,
                    "batch_exact({size}) of {n} (generator: {generator})"
                );
                assert_eq!(got.concat(), (0..size * (n / size)).collect::<Vec<_>>());
                if generator {
                    assert_eq!((b.len(), e.len()), (None, None));
                } else {
                    assert_eq!(b.len(), Some(lens.len()), "batch({size}).len() of {n}");
                    assert_eq!(e.len(), Some(exact_lens.len()), "batch_exact({size}).len()");
                }
            }
        }
    }
}

/// `(len(), the number of elements one iteration gives)`.
type LenCount = (Option<usize>, usize);

/// A pipeline's batches.
type Batches = Vec<Vec<u64>>;

/// A dataset's [`LenCount`], counting under a deadline.
fn len_and_count<T: Send + 'static>(ds: &Dataset<T>) -> LenCount {
    (
        ds.len(),
        within("count", 30, {
            let ds = ds.clone();
            move || ds.iter().count()
        }),
    )
}

#[test]
fn len_matches_hand_counts() {
    let ten = || Dataset::from_fn(10, |i| i);
    let gen = || Dataset::from_generator(|| 0..10usize);
    let cases: Vec<(&str, LenCount, LenCount)> = vec![
        ("from_fn(10)", len_and_count(&ten()), (Some(10), 10)),
        ("from_generator(10)", len_and_count(&gen()), (None, 10)),
        (
            "from_fn(0)",
            len_and_count(&Dataset::from_fn(0, |i| i)),
            (Some(0), 0),
        ),
        ("shuffle", len_and_count(&ten().shuffle(3)), (Some(10), 10)),
        ("map", len_and_count(&ten().map(f)), (Some(10), 10)),
        (
            "map_workers",
            len_and_count(&ten().map_workers(3, f).expect("map_workers")),
            (Some(10), 10),
        ),
        (
            "prefetch",
            len_and_count(&ten().prefetch(2).expect("prefetch")),
            (Some(10), 10),
        ),
        (
            "batch(4)",
            len_and_count(&ten().batch(4).expect("batch")),
            (Some(3), 3),
        ),
        (
            "batch_exact(4)",
            len_and_count(&ten().batch_exact(4).expect("batch_exact")),
            (Some(2), 2),
        ),
        (
            "shard(3,0)",
            len_and_count(&ten().shard(3, 0).expect("shard")),
            (Some(4), 4),
        ),
        (
            "shard(3,1)",
            len_and_count(&ten().shard(3, 1).expect("shard")),
            (Some(3), 3),
        ),
        (
            "shard(3,2)",
            len_and_count(&ten().shard(3, 2).expect("shard")),
            (Some(3), 3),
        ),
        (
            "shard(20,15)",
            len_and_count(&ten().shard(20, 15).expect("shard")),
            (Some(0), 0),
        ),
        (
            "generator.shard(3,0)",
            len_and_count(&gen().shard(3, 0).expect("shard")),
            (None, 4),
        ),
        ("take(4)", len_and_count(&ten().take(4)), (Some(4), 4)),
        ("take(40)", len_and_count(&ten().take(40)), (Some(10), 10)),
        ("take(0)", len_and_count(&ten().take(0)), (Some(0), 0)),
        (
            "generator.take(4)",
            len_and_count(&gen().take(4)),
            (None, 4),
        ),
        (
            "repeat(Some(3))",
            len_and_count(&ten().repeat(Some(3))),
            (Some(30), 30),
        ),
        (
            "repeat(Some(0))",
            len_and_count(&ten().repeat(Some(0))),
            (Some(0), 0),
        ),
        (
            "repeat(Some(1))",
            len_and_count(&ten().repeat(Some(1))),
            (Some(10), 10),
        ),
        (
            "generator.repeat(Some(3))",
            len_and_count(&gen().repeat(Some(3))),
            (None, 30),
        ),
        (
            "empty.repeat(None)",
            len_and_count(&Dataset::from_fn(0, |i| i).repeat(None)),
            (Some(0), 0),
        ),
        (
            "repeat(Some(2)).batch(3)",
            len_and_count(&ten().repeat(Some(2)).batch(3).expect("batch")),
            (Some(7), 7),
        ),
        (
            "batch(3).repeat(Some(2))",
            len_and_count(&ten().batch(3).expect("batch").repeat(Some(2))),
            (Some(8), 8),
        ),
    ];
    for (name, got, want) in cases {
        assert_eq!(got, want, "{name}: (len(), count)");
    }
    assert!(Dataset::from_fn(0, |i| i).is_empty());
    assert!(!ten().is_empty());
    assert!(
        !gen().is_empty(),
        "a generator's length is unknown, not empty"
    );
    assert_eq!(ten().repeat(None).len(), None, "an endless repeat");
}

#[test]
fn take_and_repeat_counts() {
    for n in 0..=6usize {
        for k in 0..=4u64 {
            let r = all(&Dataset::from_fn(n, |i| i).repeat(Some(k)));
            let want: Vec<usize> = (0..k).flat_map(|_| 0..n).collect();
            assert_eq!(r, want, "from_fn({n}).repeat(Some({k}))");
            let g = all(&Dataset::from_generator(move || 0..n).repeat(Some(k)));
            assert_eq!(g, want, "from_generator({n}).repeat(Some({k}))");
        }
        for t in 0..=9u64 {
            let got = all(&Dataset::from_fn(n, |i| i).take(t));
            let want: Vec<usize> = (0..n.min(t as usize)).collect();
            assert_eq!(got, want, "from_fn({n}).take({t})");
            if n > 0 {
                let endless = within("take of an endless repeat", 30, move || {
                    all(&Dataset::from_fn(n, |i| i).repeat(None).take(t))
                });
                let want: Vec<usize> = (0..t as usize).map(|i| i % n).collect();
                assert_eq!(endless, want, "from_fn({n}).repeat(None).take({t})");
            }
        }
    }
}

#[test]
fn endless_repeat_of_an_empty_pass_ends() {
    let empties: Vec<(&str, Dataset<usize>)> = vec![
        ("from_fn(0)", Dataset::from_fn(0, |i| i)),
        (
            "from_generator(empty)",
            Dataset::from_generator(|| 0..0usize),
        ),
        (
            "batch_exact(4) of 3",
            Dataset::from_fn(3, |i| i)
                .batch_exact(4)
                .expect("batch_exact")
                .map(|b| b.len()),
        ),
        (
            "shard(2,1) of 1",
            Dataset::from_fn(1, |i| i).shard(2, 1).expect("shard"),
        ),
        ("take(0)", Dataset::from_fn(5, |i| i).take(0)),
        ("shuffled empty", Dataset::from_fn(0, |i| i).shuffle(3)),
        (
            "map_workers + prefetch of empty",
            Dataset::from_fn(0, |i| i)
                .map_workers(2, |i| i)
                .expect("map_workers")
                .prefetch(1)
                .expect("prefetch"),
        ),
    ];
    for (name, ds) in empties {
        let n = within(name, 20, move || {
            let endless = ds.repeat(None);
            let plain = endless.iter().count();
            let workers = endless
                .clone()
                .map_workers(2, |i| i)
                .expect("map_workers")
                .iter()
                .count();
            let prefetched = endless.prefetch(2).expect("prefetch").iter().count();
            (plain, workers, prefetched)
        });
        assert_eq!(n, (0, 0, 0), "{name}.repeat(None)");
    }
}

#[test]
fn endless_repeat_stops_at_the_first_empty_pass() {
    // a generator that yields 0..3 the first time it is called and nothing after
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let ds = Dataset::from_generator(move || {
        let first = c.fetch_add(1, Ordering::SeqCst) == 0;
        0..if first { 3usize } else { 0 }
    })
    .repeat(None);
    let got = within("repeat over a drying generator", 20, move || all(&ds));
    assert_eq!(got, vec![0, 1, 2]);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

// ---------------------------------------------------------------------------------------
// cursors
// ---------------------------------------------------------------------------------------

/// The reference of `from_fn(23).shuffle(7).<stage>.map(f).batch(4).repeat(Some(3))` where
/// `select` picks each epoch's elements from the shuffled pass.
fn reference_batches(select: impl Fn(Vec<usize>) -> Vec<usize>) -> Vec<Vec<u64>> {
    (0..3)
        .flat_map(|e| {
            let mapped: Vec<u64> = select(ref_perm(23, 7, e)).into_iter().map(f).collect();
            mapped.chunks(4).map(<[u64]>::to_vec).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn cursor_resumes_the_main_pipeline_and_its_variants_at_every_position() {
    within("cursor resume", 120, || {
        let base = || Dataset::from_fn(23, |i| i).shuffle(7);
        let want = reference_batches(|p| p);
        let pipelines: Vec<(&str, Dataset<Vec<u64>>, Batches)> = vec![
            (
                "map.batch.repeat",
                base().map(f).batch(4).expect("batch").repeat(Some(3)),
                want.clone(),
            ),
            (
                "map_workers(3).batch.repeat",
                base()
                    .map_workers(3, f)
                    .expect("map_workers")
                    .batch(4)
                    .expect("batch")
                    .repeat(Some(3)),
                want.clone(),
            ),
            (
                "map.batch.prefetch(2).repeat",
                base()
                    .map(f)
                    .batch(4)
                    .expect("batch")
                    .prefetch(2)
                    .expect("prefetch")
                    .repeat(Some(3)),
                want.clone(),
            ),
            (
                "map.batch.repeat.prefetch(2)",
                base()
                    .map(f)
                    .batch(4)
                    .expect("batch")
                    .repeat(Some(3))
                    .prefetch(2)
                    .expect("prefetch"),
                want.clone(),
            ),
            (
                "map_workers(3).prefetch(2).batch.repeat.prefetch(2)",
                base()
                    .map_workers(3, f)
                    .expect("map_workers")
                    .prefetch(2)
                    .expect("prefetch")
                    .batch(4)
                    .expect("batch")
                    .repeat(Some(3))
                    .prefetch(2)
                    .expect("prefetch"),
                want.clone(),
            ),
            (
                "from_generator.shuffle.map.batch.repeat",
                Dataset::from_generator(|| 0..23usize)
                    .shuffle(7)
                    .map(f)
                    .batch(4)
                    .expect("batch")
                    .repeat(Some(3)),
                want.clone(),
            ),
            (
                "from_generator.shuffle.map_workers(3).batch.repeat",
                Dataset::from_generator(|| 0..23usize)
                    .shuffle(7)
                    .map_workers(3, f)
                    .expect("map_workers")
                    .batch(4)
                    .expect("batch")
                    .repeat(Some(3)),
                want.clone(),
            ),
            (
                "shard(2,1).map.batch.repeat",
                base()
                    .shard(2, 1)
                    .expect("shard")
                    .map(f)
                    .batch(4)
                    .expect("batch")
                    .repeat(Some(3)),
                reference_batches(|p| p.into_iter().skip(1).step_by(2).collect()),
            ),
            (
                "from_generator.shuffle.shard(2,1).map_workers(3).batch.repeat",
                Dataset::from_generator(|| 0..23usize)
                    .shuffle(7)
                    .shard(2, 1)
                    .expect("shard")
                    .map_workers(3, f)
                    .expect("map_workers")
                    .batch(4)
                    .expect("batch")
                    .repeat(Some(3)),
                reference_batches(|p| p.into_iter().skip(1).step_by(2).collect()),
            ),
            (
                "take(10).map.batch.repeat",
                base()
                    .take(10)
                    .map(f)
                    .batch(4)
                    .expect("batch")
                    .repeat(Some(3)),
                reference_batches(|p| p.into_iter().take(10).collect()),
            ),
            (
                "map.batch.repeat.take(11)",
                base()
                    .map(f)
                    .batch(4)
                    .expect("batch")
                    .repeat(Some(3))
                    .take(11),
                want[..11].to_vec(),
            ),
            (
                "map.batch_exact.repeat",
                base()
                    .map(f)
                    .batch_exact(4)
                    .expect("batch_exact")
                    .repeat(Some(3)),
                want.iter().filter(|b| b.len() == 4).cloned().collect(),
            ),
            (
                "repeat.map.batch (batches across epochs)",
                base().repeat(Some(3)).map(f).batch(4).expect("batch"),
                (0..3)
                    .flat_map(|e| ref_perm(23, 7, e))
                    .map(f)
                    .collect::<Vec<_>>()
                    .chunks(4)
                    .map(<[u64]>::to_vec)
                    .collect(),
            ),
            (
                "repeat(None).map_workers(3).take(50).batch",
                base()
                    .repeat(None)
                    .map_workers(3, f)
                    .expect("map_workers")
                    .take(50)
                    .batch(4)
                    .expect("batch"),
                (0..3)
                    .flat_map(|e| ref_perm(23, 7, e))
                    .take(50)
                    .map(f)
                    .collect::<Vec<_>>()
                    .chunks(4)
                    .map(<[u64]>::to_vec)
                    .collect(),
            ),
        ];
        for (name, ds, want) in pipelines {
            let full = check_resume_everywhere(name, &ds);
            assert_eq!(full, want, "{name}: the uninterrupted iteration");
        }
    });
}

#[test]
fn cursor_resumes_unbatched_and_sequentially_shuffled_pipelines() {
    within("cursor resume (elements)", 120, || {
        // a shuffle over a sequential stage (a repeat), then a shard over a sequential stage
        let ds = Dataset::from_fn(9, |i| i)
            .repeat(Some(2))
            .shuffle(3)
            .shard(3, 2)
            .expect("shard")
            .map(f);
        let full = check_resume_everywhere("repeat.shuffle.shard.map", &ds);
        let mut twice: Vec<usize> = (0..9).chain(0..9).collect();
        twice = ref_perm(18, 3, 0).into_iter().map(|i| twice[i]).collect();
        let want: Vec<u64> = twice.into_iter().skip(2).step_by(3).map(f).collect();
        assert_eq!(full, want);
        // nested repeats and a prefetch between them
        let ds = Dataset::from_generator(|| 0..5usize)
            .shuffle(1)
            .repeat(Some(2))
            .prefetch(1)
            .expect("prefetch")
            .repeat(Some(2));
        let full = check_resume_everywhere("gen.shuffle.repeat.prefetch.repeat", &ds);
        assert_eq!(full.len(), 20);
        for chunk in full.chunks(5) {
            assert_eq!(sorted(chunk), vec![0, 1, 2, 3, 4]);
        }
    });
}

#[test]
fn cursor_text_round_trips() {
    let ds = Dataset::from_fn(23, |i| i)
        .shuffle(7)
        .map(f)
        .batch(4)
        .expect("batch")
        .repeat(Some(3));
    let mut it = ds.iter();
    for _ in 0..8 {
        it.next();
        let c = it.cursor();
        let back: Cursor = c.to_string().parse().expect("a cursor's text parses");
        assert_eq!(back, c);
    }
}

#[test]
fn a_cursor_for_another_structure_is_an_error_not_a_panic() {
    let taken = |ds: &Dataset<usize>, k: usize| -> Cursor {
        let mut it = ds.iter();
        for _ in 0..k {
            it.next();
        }
        it.cursor()
    };
    let ten = || Dataset::from_fn(10, |i| i);
    let gen = |n: usize| Dataset::from_generator(move || 0..n);
    let batched = ten().batch(2).expect("batch").map(|b| b.len());
    let repeated = ten().repeat(Some(2));
    let taken5 = ten().take(5);
    let sharded_gen = gen(10).shard(2, 0).expect("shard");
    let gen_shuffled = gen(10).shuffle(1);
    let datasets: Vec<(&str, Dataset<usize>)> = vec![
        ("from_fn", ten()),
        ("generator", gen(10)),
        ("batch", batched),
        ("repeat", repeated),
        ("take", taken5),
        ("generator.shard", sharded_gen),
        ("generator.shuffle", gen_shuffled),
    ];
    let cursors: Vec<(&str, Cursor)> = datasets
        .iter()
        .map(|(name, ds)| (*name, taken(ds, 2)))
        .collect();
    for (i, (from, cursor)) in cursors.iter().enumerate() {
        for (j, (to, ds)) in datasets.iter().enumerate() {
            if i == j {
                continue;
            }
            // batch's and take's cursors wrap the same inner state a from_fn would take, and
            // from_fn / generator / shuffle cursors differ only by stage kind: all must fail
            let r = ds.iter_from(cursor);
            assert!(
                r.is_err(),
                "a {from} cursor {cursor} opened a {to} dataset instead of failing"
            );
        }
    }
    // the same structure but a shorter source
    let at8 = taken(&ten(), 8);
    assert!(Dataset::from_fn(5, |i| i).iter_from(&at8).is_err());
    let at8 = taken(&gen(10), 8);
    match gen(5).iter_from(&at8) {
        Err(Error::Invalid { op, .. }) => assert_eq!(op, "Dataset::iter_from"),
        Err(e) => panic!("unexpected error kind: {e:?}"),
        Ok(_) => panic!("a generator that now ends early resumed past its end"),
    }
    // valid JSON that is no cursor of these datasets
    for text in [
        "null",
        "42",
        "\"index\"",
        "[]",
        "{}",
        r#"{"stage":"index"}"#,
        r#"{"stage":"index","pos":-1}"#,
        r#"{"stage":"index","pos":"3"}"#,
        r#"{"stage":"index","pos":11}"#,
        r#"{"stage":"repeat","epoch":0,"yielded":"yes","up":{"stage":"index","pos":0}}"#,
        r#"{"stage":"take","left":3}"#,
    ] {
        let c: Cursor = text.parse().expect("valid JSON parses as a cursor");
        for (name, ds) in &datasets {
            assert!(ds.iter_from(&c).is_err(), "{text} opened {name}");
        }
        let pre = ten().prefetch(2).expect("prefetch");
        assert!(pre.iter_from(&c).is_err(), "{text} opened a prefetch");
        let par = ten().map_workers(2, |i| i).expect("map_workers");
        assert!(par.iter_from(&c).is_err(), "{text} opened a map_workers");
    }
}

#[test]
fn a_take_cursor_cannot_exceed_the_take() {
    let long = Dataset::from_fn(100, |i| i).take(50);
    let mut it = long.iter();
    it.next();
    it.next();
    let cursor = it.cursor();
    let short = Dataset::from_fn(100, |i| i).take(5);
    match short.iter_from(&cursor) {
        Err(_) => {}
        Ok(rest) => {
            let n = rest.count();
            assert!(
                n <= 5,
                "take(5) resumed {n} elements from a take(50) cursor"
            );
        }
    }
}

#[test]
fn garbage_does_not_parse_as_a_cursor() {
    for text in ["", "not json", "{", "{\"stage\":", "[1, 2", "nul", "}{"] {
        match text.parse::<Cursor>() {
            Err(Error::Invalid { op, .. }) => assert_eq!(op, "Cursor::from_str", "{text:?}"),
            Err(e) => panic!("{text:?}: unexpected error kind {e:?}"),
            Ok(c) => panic!("{text:?} parsed as the cursor {c}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// argument errors
// ---------------------------------------------------------------------------------------

fn expect_invalid<T>(what: &str, r: Result<Dataset<T>, Error>, op: &str) {
    match r {
        Err(e) => {
            assert!(
                matches!(&e, Error::Invalid { op: o, .. } if *o == op),
                "{what}: {e:?}"
            );
            assert!(
                e.to_string().contains(op),
                "{what}: the message {e} does not name {op}"
            );
        }
        Ok(_) => panic!("{what} was accepted"),
    }
}

#[test]
fn bad_arguments_name_their_operation() {
    let ten = || Dataset::from_fn(10, |i| i);
    expect_invalid("shard(0, 0)", ten().shard(0, 0), "Dataset::shard");
    expect_invalid("shard(2, 2)", ten().shard(2, 2), "Dataset::shard");
    expect_invalid("shard(1, 5)", ten().shard(1, 5), "Dataset::shard");
    expect_invalid("batch(0)", ten().batch(0), "Dataset::batch");
    expect_invalid("batch_exact(0)", ten().batch_exact(0), "Dataset::batch");
    expect_invalid(
        "map_workers(0, ..)",
        ten().map_workers(0, |i| i),
        "Dataset::map_workers",
    );
    expect_invalid("prefetch(0)", ten().prefetch(0), "Dataset::prefetch");
}

// ---------------------------------------------------------------------------------------
// random pipelines against a plain-Rust model
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Recipe {
    n: usize,
    generator: bool,
    shuffle: Option<u64>,
    shard: Option<(usize, usize)>,
    /// 0: a serial `map`.
    workers: usize,
    take_inner: Option<u64>,
    /// `(size, exact)`; `None` wraps each element in a one-element vector.
    batch: Option<(usize, bool)>,
    prefetch_inner: Option<usize>,
    /// `None`: forever (then `take_outer` is `Some`).
    repeat: Option<u64>,
    prefetch_outer: Option<usize>,
    take_outer: Option<u64>,
}

fn build(r: &Recipe) -> Dataset<Vec<u64>> {
    let n = r.n;
    let mut ds: Dataset<usize> = if r.generator {
        Dataset::from_generator(move || 0..n)
    } else {
        Dataset::from_fn(n, |i| i)
    };
    if let Some(s) = r.shuffle {
        ds = ds.shuffle(s);
    }
    if let Some((k, i)) = r.shard {
        ds = ds.shard(k, i).expect("shard");
    }
    let mut ds: Dataset<u64> = if r.workers == 0 {
        ds.map(f)
    } else {
        ds.map_workers(r.workers, f).expect("map_workers")
    };
    if let Some(t) = r.take_inner {
        ds = ds.take(t);
    }
    let mut ds: Dataset<Vec<u64>> = match r.batch {
        None => ds.map(|x| vec![x]),
        Some((s, false)) => ds.batch(s).expect("batch"),
        Some((s, true)) => ds.batch_exact(s).expect("batch_exact"),
    };
    if let Some(p) = r.prefetch_inner {
        ds = ds.prefetch(p).expect("prefetch");
    }
    ds = ds.repeat(r.repeat);
    if let Some(p) = r.prefetch_outer {
        ds = ds.prefetch(p).expect("prefetch");
    }
    if let Some(t) = r.take_outer {
        ds = ds.take(t);
    }
    ds
}

/// What `build(r)` must yield, computed with plain vectors.
fn model(r: &Recipe) -> Vec<Vec<u64>> {
    let epoch = |e: u64| -> Vec<Vec<u64>> {
        let mut v: Vec<usize> = (0..r.n).collect();
        if let Some(s) = r.shuffle {
            v = ref_perm(r.n, s, e).into_iter().map(|i| v[i]).collect();
        }
        if let Some((k, i)) = r.shard {
            v = v.into_iter().skip(i).step_by(k).collect();
        }
        let mut m: Vec<u64> = v.into_iter().map(f).collect();
        if let Some(t) = r.take_inner {
            m.truncate(t as usize);
        }
        match r.batch {
            None => m.into_iter().map(|x| vec![x]).collect(),
            Some((s, exact)) => m
                .chunks(s)
                .filter(|c| !exact || c.len() == s)
                .map(<[u64]>::to_vec)
                .collect(),
        }
    };
    let mut out = Vec::new();
    match r.repeat {
        Some(c) => (0..c).for_each(|e| out.extend(epoch(e))),
        None => {
            let limit = r.take_outer.unwrap_or(0) as usize;
            for e in 0.. {
                let pass = epoch(e);
                if pass.is_empty() || out.len() >= limit {
                    break;
                }
                out.extend(pass);
            }
        }
    }
    if let Some(t) = r.take_outer {
        out.truncate(t as usize);
    }
    out
}

fn recipe() -> impl Strategy<Value = Recipe> {
    (
        (0usize..=20, any::<bool>(), proptest::option::of(0u64..1000)),
        proptest::option::of((1usize..=3).prop_flat_map(|k| (Just(k), 0..k))),
        0usize..=3,
        proptest::option::of(0u64..25),
        proptest::option::of((1usize..=5, any::<bool>())),
        proptest::option::of(1usize..=3),
        proptest::option::of(0u64..=3),
        proptest::option::of(1usize..=3),
        proptest::option::of(0u64..40),
    )
        .prop_map(
            |(
                (n, generator, shuffle),
                shard,
                workers,
                take_inner,
                batch,
                prefetch_inner,
                repeat,
                prefetch_outer,
                take_outer,
            )| {
                Recipe {
                    n,
                    generator,
                    shuffle,
                    shard,
                    workers,
                    take_inner,
                    batch,
                    prefetch_inner,
                    // an endless repeat needs a take after it
                    repeat: if take_outer.is_none() {
                        Some(repeat.unwrap_or(2))
                    } else {
                        repeat
                    },
                    prefetch_outer,
                    take_outer,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random pipelines: the uninterrupted iteration equals the model, a cursor taken at
    /// every position resumes the model's rest, and a cursor taken from a resumed iterator
    /// resumes again.
    #[test]
    fn random_pipelines_resume_exactly(
        r in recipe(),
        at in any::<proptest::sample::Index>(),
        then in 0usize..6,
    ) {
        let (full, want, chained) = within("random pipeline", 60, {
            let r = r.clone();
            move || {
                let ds = build(&r);
                let want = model(&r);
                let full = check_resume_everywhere(&format!("{r:?}"), &ds);
                // resume at k, go on j more, take that cursor and resume again
                let (_, cursors) = iterate_with_cursors(&ds);
                let k = at.index(cursors.len());
                let cursor: Cursor = cursors[k].parse().expect("cursor text parses");
                let mut it = ds.iter_from(&cursor).expect("iter_from");
                let mut steps = 0;
                while steps < then && it.next().is_some() {
                    steps += 1;
                }
                let again = resume(&ds, &it.cursor().to_string());
                (full, want, (k + steps, again))
            }
        });
        prop_assert_eq!(&full, &want, "{:?}", r);
        let (at, again) = chained;
        prop_assert_eq!(again.as_slice(), &want[at..], "chained resume at {}", at);
    }
}
