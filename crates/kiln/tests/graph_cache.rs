//! The graph cache through the public API. One test function runs the checks in sequence so
//! the process-wide counters are not disturbed by parallel tests (each test file is its own
//! process).

use kiln::{Array, MissReason};

fn misses() -> u64 {
    kiln::cache_stats().misses
}

fn last_reason() -> MissReason {
    kiln::cache_stats()
        .recent_misses
        .last()
        .expect("a miss was recorded")
        .reason
}

fn step(x: &Array, w: &Array, lr: f64) -> Array {
    ((x * w).tanh() * lr + 1.0).sum(Some(&[-1]), false)
}

fn new_values_do_not_recompile() {
    let before = misses();
    for i in 0..1000 {
        let x = Array::from_vec(vec![i as f32 * 0.001; 8 * 16], &[8, 16]).unwrap();
        let w = Array::from_vec(vec![0.5f32; 16], &[16]).unwrap();
        // a new scalar value every step (never exactly 0 or 1: those are keyed, see below)
        let lr = 0.1 + i as f64 * 1e-4;
        let y = step(&x, &w, lr);
        let got = y.to_vec::<f32>().unwrap();
        let want = 16.0 * (((i as f32 * 0.001 * 0.5).tanh()) * lr as f32 + 1.0);
        assert!(
            (got[0] - want).abs() <= 1e-4 * want.abs(),
            "{} vs {want}",
            got[0]
        );
    }
    assert_eq!(
        misses() - before,
        1,
        "1000 iterations with new data and scalars compile once"
    );
}

fn shrinking_batch_recompiles_only_where_sizes_matter() {
    // Plans are keyed on relative sizes: 0 and 1 are literal (they change broadcasting and
    // emptiness), other sizes are symbols. So a batch shrinking from 12 to 2 reuses the plan
    // compiled for 12, and batch 1 compiles once more. (A batch equal to another dimension,
    // 16 here, would also compile once: equal sizes share a symbol.)
    let before = misses();
    let w = Array::from_vec((0..16).map(|i| i as f32 / 16.0).collect(), &[16]).unwrap();
    for batch in (1..=12).rev() {
        let x = Array::from_vec(
            (0..batch * 16).map(|i| i as f32 * 0.01).collect(),
            &[batch, 16],
        )
        .unwrap();
        // (a structure of its own: the one above has already been compiled for batch 8)
        let y = ((&x * &w).sigmoid() * 0.5 + 1.0).sum(Some(&[-1]), false);
        let got = y.to_vec::<f32>().unwrap();
        for (r, g) in got.iter().enumerate() {
            let sig = |v: f32| 1.0 / (1.0 + (-v).exp());
            let want: f32 = (0..16)
                .map(|c| sig((r * 16 + c) as f32 * 0.01 * (c as f32 / 16.0)) * 0.5 + 1.0)
                .sum();
            assert!(
                (g - want).abs() <= 1e-4 * want.abs(),
                "batch {batch} row {r}: {g} vs {want}"
            );
        }
        let expected = if batch == 1 { 2 } else { 1 };
        assert_eq!(misses() - before, expected, "batch {batch}");
        if batch == 1 {
            // A size of 1 is literal in the key (it changes what broadcasts), so a batch of 1
            // compiles again; the expression's nodes are the same (the product broadcasts
            // its operands itself), so the miss is a new size, not a new structure.
            assert_eq!(last_reason(), MissReason::NewSize);
        }
    }
}

fn miss_reasons_are_explained() {
    let a = Array::from_vec(vec![1.0f32; 6], &[2, 3]).unwrap();
    // elementwise only: a reduction's axes are attributes, so a new rank would also be a new
    // structure there
    let f = |x: &Array| (x * 3.0).exp();
    f(&a).eval().unwrap();
    f(&Array::from_vec(vec![1.0f64; 6], &[2, 3]).unwrap())
        .eval()
        .unwrap();
    assert_eq!(last_reason(), MissReason::NewDType);
    f(&Array::from_vec(vec![1.0f32; 6], &[6]).unwrap())
        .eval()
        .unwrap();
    assert_eq!(last_reason(), MissReason::NewRank);
    (&a * 1.0).exp().eval().unwrap();
    assert_eq!(
        last_reason(),
        MissReason::NewScalarClass,
        "x * 1 simplifies, so the scalar's class is keyed"
    );
    (&a * 3.0).sin().eval().unwrap();
    assert_eq!(last_reason(), MissReason::NewStructure);
}

fn threads_share_the_cache_consistently() {
    let before = kiln::cache_stats();
    let handles: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..50 {
                    let v = (t * 100 + i) as f64;
                    let x = Array::from_vec(vec![v; 4], &[4]).unwrap();
                    // the same structure in every thread
                    let shared = (&x * 2.0 + 1.0).sum(None, false).item::<f64>().unwrap();
                    assert_eq!(shared, 4.0 * (2.0 * v + 1.0));
                    // a structure only this thread builds (t + 1 chained adds)
                    let mut y = x.clone();
                    for _ in 0..=t {
                        y = &y + 1.0;
                    }
                    let own = y.max(None, false).item::<f64>().unwrap();
                    assert_eq!(own, v + (t + 1) as f64);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let after = kiln::cache_stats();
    let (hits, misses) = (after.hits - before.hits, after.misses - before.misses);
    assert_eq!(
        hits + misses,
        8 * 50 * 2,
        "every evaluation is a hit or a miss"
    );
    assert_eq!(
        misses, 9,
        "one shared structure and eight thread-specific ones compile once each"
    );
}

fn eviction_at_the_bound() {
    kiln::set_cache_capacity(4);
    let before = kiln::cache_stats();
    let x = Array::from_vec(vec![0.25f64; 3], &[3]).unwrap();
    let chain = |k: usize| {
        let mut y = x.clone();
        for _ in 0..k {
            y = y.sin();
        }
        y.sum(None, false)
    };
    for k in 1..=6 {
        chain(k).eval().unwrap();
    }
    let s = kiln::cache_stats();
    assert_eq!(s.entries, 4);
    assert!(s.evictions - before.evictions >= 2);
    let m = s.misses;
    chain(1).eval().unwrap(); // the least recently used was evicted
    assert_eq!(kiln::cache_stats().misses, m + 1);
    chain(6).eval().unwrap(); // the most recent is still there
    assert_eq!(kiln::cache_stats().misses, m + 1);
    kiln::set_cache_capacity(kiln::DEFAULT_CACHE_CAPACITY);
}

#[test]
fn graph_cache() {
    new_values_do_not_recompile();
    shrinking_batch_recompiles_only_where_sizes_matter();
    miss_reasons_are_explained();
    threads_share_the_cache_consistently();
    eviction_at_the_bound();
}
