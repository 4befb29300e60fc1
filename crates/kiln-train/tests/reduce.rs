//! Integration tests of the mirrored strategy's collectives and replica runner: `tree_sum`
//! adds in the documented fixed tree (checked bit for bit against hand-written trees and an
//! independent recursive reference, and shown to differ from a left-to-right sum),
//! `Strategy::batch_reduce`/`reduce` on mixed f32/f64 arrays equal per-position reference
//! trees and reject mismatched inputs, `Strategy::run` keeps micro-batch order and runs each
//! replica's contiguous run on its own thread with panics turned into `Error::Replica`, and
//! `Strategy::distribute`/`assignment`/`micro_batch_lens` cut batches consistently.

mod common;
use common::within;

use kiln::{Array, DType};
use kiln_train::{micro_batch_lens, tree_sum, Error, PerReplica, ReduceOp, Strategy};
use proptest::prelude::{prop_assert_eq, proptest, ProptestConfig};
use std::collections::BTreeMap;
use std::ops::Add;
use std::sync::Mutex;
use std::thread::ThreadId;

// ---------------------------------------------------------------------------------------
// references
// ---------------------------------------------------------------------------------------

fn add<T: Copy + Add<Output = T>>(a: &[T], b: &[T]) -> Vec<T> {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| *x + *y).collect()
}

/// The documented tree written out by hand for 1..=9 buffers: pairs (0,1), (2,3), ..., then
/// pairs of those, an odd last one carried up.
fn hand_tree<T: Copy + Add<Output = T>>(b: &[Vec<T>]) -> Vec<T> {
    let s = |i: usize, j: usize| add(&b[i], &b[j]);
    match b.len() {
        1 => b[0].clone(),
        2 => s(0, 1),
        3 => add(&s(0, 1), &b[2]),
        4 => add(&s(0, 1), &s(2, 3)),
        5 => add(&add(&s(0, 1), &s(2, 3)), &b[4]),
        6 => add(&add(&s(0, 1), &s(2, 3)), &s(4, 5)),
        7 => add(&add(&s(0, 1), &s(2, 3)), &add(&s(4, 5), &b[6])),
        8 => add(&add(&s(0, 1), &s(2, 3)), &add(&s(4, 5), &s(6, 7))),
        9 => add(
            &add(&add(&s(0, 1), &s(2, 3)), &add(&s(4, 5), &s(6, 7))),
            &b[8],
        ),
        n => panic!("no hand-written tree for {n} buffers"),
    }
}

/// The same tree for any count, built top-down: the left subtree takes the largest power of
/// two below the count (the blocks of the bottom-up pairing are aligned to powers of two).
fn recursive_tree<T: Copy + Add<Output = T>>(b: &[Vec<T>]) -> Vec<T> {
    match b.len() {
        0 => Vec::new(),
        1 => b[0].clone(),
        n => {
            let mut half = 1;
            while half * 2 < n {
                half *= 2;
            }
            add(&recursive_tree(&b[..half]), &recursive_tree(&b[half..]))
        }
    }
}

fn left_to_right(b: &[Vec<f32>]) -> Vec<f32> {
    let mut acc = b[0].clone();
    for x in &b[1..] {
        acc = add(&acc, x);
    }
    acc
}

fn bits32(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn bits64(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A small deterministic generator of values of very different magnitudes, so the order of
/// additions shows in the rounding.
struct Lcg(u64);

impl Lcg {
    fn next_u64(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 11
    }

    fn f64(&mut self) -> f64 {
        let unit = self.next_u64() as f64 / (1u64 << 53) as f64 - 0.5;
        let scale = [1e-3, 0.1, 1.0, 7.0, 1e3, 1e6][(self.next_u64() % 6) as usize];
        unit * scale
    }

    fn f32(&mut self) -> f32 {
        self.f64() as f32
    }
}

#[test]
fn the_two_references_agree() {
    let mut rng = Lcg(1);
    for n in 1..=9 {
        let b: Vec<Vec<f32>> = (0..n)
            .map(|_| (0..5).map(|_| rng.f32()).collect())
            .collect();
        assert_eq!(
            bits32(&hand_tree(&b)),
            bits32(&recursive_tree(&b)),
            "{n} buffers"
        );
    }
}

// ---------------------------------------------------------------------------------------
// tree_sum
// ---------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// `tree_sum` is the hand-written tree, bit for bit, on random f32 data.
    #[test]
    fn tree_sum_is_the_documented_tree(
        n in 1usize..=9,
        len in 0usize..8,
        seed in 0u64..u64::MAX,
    ) {
        let mut rng = Lcg(seed);
        let b: Vec<Vec<f32>> = (0..n).map(|_| (0..len).map(|_| rng.f32()).collect()).collect();
        let got = tree_sum(b.clone());
        prop_assert_eq!(bits32(&got), bits32(&hand_tree(&b)));
        prop_assert_eq!(bits32(&got), bits32(&recursive_tree(&b)));
    }

    /// Beyond nine buffers, against the recursive reference (f64).
    #[test]
    fn tree_sum_matches_the_recursive_reference(n in 1usize..=40, seed in 0u64..u64::MAX) {
        let mut rng = Lcg(seed);
        let b: Vec<Vec<f64>> = (0..n).map(|_| (0..3).map(|_| rng.f64()).collect()).collect();
        prop_assert_eq!(bits64(&tree_sum(b.clone())), bits64(&recursive_tree(&b)));
    }
}

#[test]
fn tree_sum_is_not_a_left_to_right_sum() {
    // hand-computed in f32: 1e8 + 1 rounds to 1e8 (the spacing there is 8), so
    // left to right: ((1e8 + 1) + -1e8) + 1 = 1, the tree: (1e8 + 1) + (-1e8 + 1) = 0
    let b = vec![vec![1e8f32], vec![1.0], vec![-1e8], vec![1.0]];
    assert_eq!(left_to_right(&b), vec![1.0]);
    assert_eq!(tree_sum(b.clone()), vec![0.0]);
    assert_eq!(hand_tree(&b), vec![0.0]);
    // and on ordinary random data the two orders differ somewhere
    let mut rng = Lcg(7);
    let mut differing = 0;
    for _ in 0..200 {
        let n = 3 + (rng.next_u64() % 7) as usize;
        let b: Vec<Vec<f32>> = (0..n)
            .map(|_| (0..4).map(|_| rng.f32()).collect())
            .collect();
        let tree = tree_sum(b.clone());
        if bits32(&tree) != bits32(&left_to_right(&b)) {
            differing += 1;
        }
        assert_eq!(bits32(&tree), bits32(&hand_tree(&b)));
    }
    assert!(
        differing > 0,
        "no random case where the order of addition shows"
    );
}

#[test]
fn tree_sum_edge_cases() {
    assert_eq!(tree_sum(Vec::<Vec<f32>>::new()), Vec::<f32>::new());
    assert_eq!(tree_sum(vec![vec![1.5f32, -2.0]]), vec![1.5, -2.0]);
    // integers add exactly: any tree gives the plain sum
    let b: Vec<Vec<i64>> = (0..9).map(|i| vec![i, 10 * i, -i * i]).collect();
    assert_eq!(tree_sum(b), vec![36, 360, -204]);
}

// ---------------------------------------------------------------------------------------
// batch_reduce and reduce
// ---------------------------------------------------------------------------------------

/// The dtypes and shapes of one micro-batch's list of arrays.
fn layout() -> Vec<(DType, Vec<usize>)> {
    vec![
        (DType::F32, vec![2, 3]),
        (DType::F64, vec![4]),
        (DType::F32, vec![]),
        (DType::F64, vec![1, 2, 2]),
        (DType::F32, vec![5]),
        (DType::F64, vec![]),
        (DType::F32, vec![0]),
    ]
}

fn array_of(dtype: DType, shape: &[usize], rng: &mut Lcg) -> Array {
    let size: usize = shape.iter().product();
    let a = match dtype {
        DType::F32 => Array::from_vec((0..size).map(|_| rng.f32()).collect::<Vec<_>>(), shape),
        DType::F64 => Array::from_vec((0..size).map(|_| rng.f64()).collect::<Vec<_>>(), shape),
        other => panic!("no float data for {other:?}"),
    };
    a.unwrap_or_else(|e| panic!("from_vec {dtype:?} {shape:?}: {e}"))
}

fn micro_batches(n: usize, seed: u64) -> Vec<Vec<Array>> {
    let mut rng = Lcg(seed);
    (0..n)
        .map(|_| {
            layout()
                .iter()
                .map(|(d, s)| array_of(*d, s, &mut rng))
                .collect()
        })
        .collect()
}

/// Position `k`'s reduction, from each micro-batch's `to_vec` and the reference tree.
fn reference_f32(items: &[Vec<Array>], k: usize, op: ReduceOp) -> Vec<f32> {
    let bufs: Vec<Vec<f32>> = items
        .iter()
        .map(|it| it[k].to_vec::<f32>().expect("an f32 array"))
        .collect();
    let sum = recursive_tree(&bufs);
    match op {
        ReduceOp::Sum => sum,
        ReduceOp::Mean => sum.iter().map(|s| s / items.len() as f32).collect(),
    }
}

fn reference_f64(items: &[Vec<Array>], k: usize, op: ReduceOp) -> Vec<f64> {
    let bufs: Vec<Vec<f64>> = items
        .iter()
        .map(|it| it[k].to_vec::<f64>().expect("an f64 array"))
        .collect();
    let sum = recursive_tree(&bufs);
    match op {
        ReduceOp::Sum => sum,
        ReduceOp::Mean => sum.iter().map(|s| s / items.len() as f64).collect(),
    }
}

/// An f32 or f64 array's elements as bits.
fn array_bits(a: &Array) -> Vec<u64> {
    match a.dtype() {
        DType::F32 => a
            .to_vec::<f32>()
            .expect("f32")
            .iter()
            .map(|x| u64::from(x.to_bits()))
            .collect(),
        _ => bits64(&a.to_vec::<f64>().expect("f64")),
    }
}

fn strategies() -> Vec<Strategy> {
    let mut s = vec![Strategy::OneDevice];
    for (r, m) in [(1, 1), (2, 3), (4, 1)] {
        s.push(Strategy::mirrored(r, m).expect("a valid strategy"));
    }
    s
}

#[test]
fn batch_reduce_equals_per_position_reference_trees() {
    for n in 1..=9 {
        for seed in [1u64, 2, 3] {
            let items = micro_batches(n, seed * 100 + n as u64);
            let per = PerReplica::new(items.clone());
            for op in [ReduceOp::Sum, ReduceOp::Mean] {
                let mut first: Option<Vec<Array>> = None;
                for s in strategies() {
                    let out = s
                        .batch_reduce(op, &per)
                        .unwrap_or_else(|e| panic!("{s:?} {op:?} of {n}: {e}"));
                    assert_eq!(out.len(), layout().len());
                    for (k, ((dtype, shape), got)) in layout().iter().zip(&out).enumerate() {
                        let what = format!("{s:?} {op:?} of {n} micro-batches, array {k}");
                        assert_eq!(got.dtype(), *dtype, "{what}");
                        assert_eq!(got.shape(), shape.as_slice(), "{what}");
                        match dtype {
                            DType::F32 => assert_eq!(
                                bits32(&got.to_vec::<f32>().expect("f32")),
                                bits32(&reference_f32(&items, k, op)),
                                "{what}"
                            ),
                            _ => assert_eq!(
                                bits64(&got.to_vec::<f64>().expect("f64")),
                                bits64(&reference_f64(&items, k, op)),
                                "{what}"
                            ),
                        }
                    }
                    // the same bytes whatever the strategy
                    match &first {
                        None => first = Some(out),
                        Some(f) => {
                            for (a, b) in f.iter().zip(&out) {
                                assert_eq!(array_bits(a), array_bits(b), "{s:?} {op:?} of {n}");
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn batch_reduce_of_empty_lists_is_empty() {
    let per = PerReplica::new(vec![Vec::<Array>::new(), Vec::new()]);
    let out = Strategy::OneDevice
        .batch_reduce(ReduceOp::Sum, &per)
        .expect("nothing to reduce at each position");
    assert!(out.is_empty());
}

#[test]
fn reduce_is_the_tree_over_single_values() {
    let values = [0.1f32, 0.2, 0.3, 1e7, -1e7, 0.7, 3.0];
    let per = PerReplica::new(values.iter().map(|v| Array::scalar(*v)).collect::<Vec<_>>());
    let b: Vec<Vec<f32>> = values.iter().map(|v| vec![*v]).collect();
    let s = Strategy::mirrored(2, 1).expect("strategy");
    let sum = s.reduce(ReduceOp::Sum, &per).expect("reduce");
    assert_eq!(
        sum.item::<f32>().expect("f32").to_bits(),
        hand_tree(&b)[0].to_bits()
    );
    let mean = s.reduce(ReduceOp::Mean, &per).expect("reduce");
    assert_eq!(
        mean.item::<f32>().expect("f32").to_bits(),
        (hand_tree(&b)[0] / 7.0).to_bits()
    );
    // hand-checked small case
    let two = PerReplica::new(vec![Array::scalar(1.0f64), Array::scalar(4.0f64)]);
    let m = Strategy::OneDevice
        .reduce(ReduceOp::Mean, &two)
        .expect("reduce");
    assert_eq!(m.item::<f64>().expect("f64"), 2.5);
    assert!(Strategy::OneDevice
        .reduce(ReduceOp::Sum, &PerReplica::new(Vec::new()))
        .is_err());
}

fn expect_batch_reduce_error(what: &str, items: Vec<Vec<Array>>) {
    match Strategy::OneDevice.batch_reduce(ReduceOp::Sum, &PerReplica::new(items)) {
        Err(e) => assert!(
            matches!(&e, Error::Invalid { op, .. } if *op == "Strategy::batch_reduce"),
            "{what}: {e:?}"
        ),
        Ok(out) => panic!("{what}: reduced to {} arrays", out.len()),
    }
}

#[test]
fn batch_reduce_rejects_mismatches() {
    let good = || micro_batches(3, 5);
    let f32s = |shape: &[usize]| {
        Array::from_vec(vec![1.0f32; shape.iter().product()], shape).expect("from_vec")
    };
    let mut items = good();
    items[2][0] = f32s(&[3, 2]); // position 0 is [2, 3] elsewhere
    expect_batch_reduce_error("a mismatched shape", items);
    let mut items = good();
    items[1][0] = Array::from_vec(vec![0.0f64; 6], &[2, 3]).expect("from_vec");
    expect_batch_reduce_error("a mismatched dtype", items);
    let mut items = good();
    items[1].pop();
    expect_batch_reduce_error("a shorter list", items);
    let mut items = good();
    items[2].push(f32s(&[1]));
    expect_batch_reduce_error("a longer list", items);
    expect_batch_reduce_error("no micro-batches", Vec::new());
    let ints = |v: i32| vec![Array::from_vec(vec![v; 4], &[4]).expect("from_vec")];
    expect_batch_reduce_error("integer arrays", vec![ints(1), ints(2)]);
}

// ---------------------------------------------------------------------------------------
// assignment, run
// ---------------------------------------------------------------------------------------

#[test]
fn assignment_hand_cases() {
    let s = |r: usize| Strategy::mirrored(r, 1).expect("strategy");
    assert_eq!(s(2).assignment(5), vec![0..3, 3..5]);
    assert_eq!(s(3).assignment(7), vec![0..3, 3..5, 5..7]);
    assert_eq!(s(4).assignment(2), vec![0..1, 1..2, 2..2, 2..2]);
    assert_eq!(s(3).assignment(0), vec![0..0, 0..0, 0..0]);
    assert_eq!(s(1).assignment(9), vec![0..9]);
    assert_eq!(Strategy::OneDevice.assignment(4), vec![0..4]);
}

#[test]
fn assignment_covers_every_micro_batch_contiguously() {
    for r in 1..=6 {
        let s = Strategy::mirrored(r, 1).expect("strategy");
        for m in 0..=20 {
            let runs = s.assignment(m);
            assert_eq!(runs.len(), r);
            let mut at = 0;
            for run in &runs {
                assert_eq!(run.start, at, "{r} replicas, {m} micro-batches: {runs:?}");
                at = run.end;
            }
            assert_eq!(at, m, "{runs:?}");
            let lens: Vec<usize> = runs.iter().map(|x| x.len()).collect();
            assert!(
                lens.windows(2).all(|w| w[0] >= w[1]),
                "first take more: {lens:?}"
            );
            assert!(lens[0] - lens[r - 1] <= 1, "as even as can be: {lens:?}");
        }
    }
}

#[test]
fn run_keeps_order_and_gives_each_replica_its_own_thread() {
    within("Strategy::run", 60, || {
        let caller = std::thread::current().id();
        for r in 1..=4 {
            let s = Strategy::mirrored(r, 1).expect("strategy");
            for m in 0..=9 {
                let seen: Mutex<Vec<(usize, ThreadId)>> = Mutex::new(Vec::new());
                let out = s
                    .run(m, |i| {
                        seen.lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((i, std::thread::current().id()));
                        Ok(i * i + 1)
                    })
                    .unwrap_or_else(|e| panic!("{r} replicas, {m} micro-batches: {e}"));
                let want: Vec<usize> = (0..m).map(|i| i * i + 1).collect();
                assert_eq!(out.values(), want.as_slice(), "{r} replicas, {m}");
                assert_eq!(out.len(), m);
                let seen: BTreeMap<usize, ThreadId> = seen
                    .into_inner()
                    .unwrap_or_else(|p| p.into_inner())
                    .into_iter()
                    .collect();
                assert_eq!(seen.len(), m, "each micro-batch runs once");
                let mut threads = Vec::new();
                for (replica, run) in s.assignment(m).into_iter().enumerate() {
                    let ids: Vec<ThreadId> = run.clone().map(|i| seen[&i]).collect();
                    let Some(&first) = ids.first() else { continue };
                    assert!(
                        ids.iter().all(|&t| t == first),
                        "replica {replica}'s items ran on several threads"
                    );
                    if replica == 0 {
                        assert_eq!(first, caller, "replica 0 runs on the calling thread");
                    }
                    assert!(
                        !threads.contains(&first),
                        "{r} replicas, {m}: replica {replica} shares a thread with another"
                    );
                    threads.push(first);
                }
            }
        }
        // one device: everything on the calling thread
        let ids = Mutex::new(Vec::new());
        let out = Strategy::OneDevice
            .run(5, |i| {
                ids.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(std::thread::current().id());
                Ok(i)
            })
            .expect("run");
        assert_eq!(out.into_values(), vec![0, 1, 2, 3, 4]);
        let ids = ids.into_inner().unwrap_or_else(|p| p.into_inner());
        assert!(ids.iter().all(|&t| t == caller));
    });
}

#[test]
fn a_panic_in_a_replica_is_a_replica_error() {
    let results = within("panicking replica", 60, || {
        let s = Strategy::mirrored(3, 1).expect("strategy");
        // 7 micro-batches over 3 replicas: 0..3, 3..5, 5..7
        let at = |bad: usize| {
            s.run(7, |i| {
                if i == bad {
                    panic!("replica boom at {i}");
                }
                Ok(i)
            })
        };
        [at(5), at(0), at(3)].map(|r| r.map(PerReplica::into_values))
    });
    for (r, (bad, replica)) in results.into_iter().zip([(5, 2), (0, 0), (3, 1)]) {
        match r {
            Err(Error::Replica {
                replica: got,
                message,
            }) => {
                assert_eq!(got, replica, "a panic at {bad}");
                assert!(
                    message.contains(&format!("replica boom at {bad}")),
                    "{message}"
                );
            }
            other => panic!("a panic at {bad}: {other:?}"),
        }
    }
    // an error (not a panic) comes back as it is
    let s = Strategy::mirrored(2, 1).expect("strategy");
    let r = s.run(4, |i| {
        if i == 3 {
            Err(Error::invalid("my step", "bad input"))
        } else {
            Ok(i)
        }
    });
    assert!(
        matches!(&r, Err(Error::Invalid { op, .. }) if *op == "my step"),
        "{r:?}"
    );
}

// ---------------------------------------------------------------------------------------
// distribute, micro_batch_lens
// ---------------------------------------------------------------------------------------

/// Hand reference: parts of `size`, the last one shorter.
fn hand_lens(n: usize, size: usize) -> Vec<usize> {
    let mut lens = Vec::new();
    let mut left = n;
    while left > 0 {
        let l = left.min(size);
        lens.push(l);
        left -= l;
    }
    lens
}

#[test]
fn micro_batch_lens_hand_cases() {
    assert_eq!(micro_batch_lens(10, 4), vec![4, 4, 2]);
    assert_eq!(micro_batch_lens(8, 4), vec![4, 4]);
    assert_eq!(micro_batch_lens(3, 4), vec![3]);
    assert_eq!(micro_batch_lens(0, 4), Vec::<usize>::new());
    for n in 0..=30 {
        for size in 1..=7 {
            assert_eq!(
                micro_batch_lens(n, size),
                hand_lens(n, size),
                "{n} by {size}"
            );
        }
    }
    assert_eq!(Strategy::OneDevice.micro_batch_lens(13), vec![13]);
    let s = Strategy::mirrored(3, 4).expect("strategy");
    assert_eq!(s.micro_batch_lens(13), vec![4, 4, 4, 1]);
}

#[test]
fn distribute_splits_features_and_labels_consistently() {
    for size in 1..=4 {
        for replicas in [1, 2, 3] {
            let s = Strategy::mirrored(replicas, size).expect("strategy");
            for n in 1..=9usize {
                let x = Array::from_vec((0..n * 3).map(|v| v as f32).collect::<Vec<_>>(), &[n, 3])
                    .expect("from_vec");
                let y: Vec<u32> = (0..n as u32).map(|i| i * 10).collect();
                let parts = s
                    .distribute(&(x, y.clone()))
                    .unwrap_or_else(|e| panic!("{n} examples by {size}: {e}"));
                let lens = hand_lens(n, size);
                assert_eq!(parts.len(), lens.len(), "{n} by {size}");
                let mut rows = Vec::new();
                let mut labels = Vec::new();
                for ((px, py), len) in parts.iter().zip(&lens) {
                    assert_eq!(px.shape(), &[*len, 3]);
                    assert_eq!(px.dtype(), DType::F32);
                    assert_eq!(py.len(), *len);
                    let data = px.to_vec::<f32>().expect("f32");
                    for (row, label) in data.chunks(3).zip(py) {
                        // row i is [3i, 3i+1, 3i+2] and its label 10i
                        assert_eq!(row[0] as u32 / 3 * 10, *label, "a row and its label split");
                    }
                    rows.extend(data);
                    labels.extend(py.iter().copied());
                }
                assert_eq!(rows, (0..n * 3).map(|v| v as f32).collect::<Vec<_>>());
                assert_eq!(labels, y);
            }
        }
    }
    // one device: one part of everything
    let x = Array::from_vec(vec![1i64, 2, 3, 4], &[2, 2]).expect("from_vec");
    let parts = Strategy::OneDevice
        .distribute(&(x, vec![5u8, 6]))
        .expect("distribute");
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].0.to_vec::<i64>().expect("i64"), vec![1, 2, 3, 4]);
    assert_eq!(parts[0].0.dtype(), DType::I64);
    assert_eq!(parts[0].1, vec![5, 6]);
}

#[test]
fn distribute_rejects_what_it_cannot_split() {
    let s = Strategy::mirrored(2, 2).expect("strategy");
    let x = Array::from_vec(vec![0.0f32; 9], &[3, 3]).expect("from_vec");
    assert!(
        s.distribute(&(x, vec![1u32, 2, 3, 4])).is_err(),
        "features of 3 examples with labels of 4"
    );
    assert!(s.distribute(&Vec::<u32>::new()).is_err(), "an empty batch");
    assert!(s.distribute(&()).is_err(), "no batch axis");
    assert!(s.distribute(&Array::scalar(1.0f32)).is_err(), "a 0-d array");
}

#[test]
fn mirrored_needs_replicas_and_a_micro_batch_size() {
    for (r, m) in [(0, 1), (1, 0), (0, 0)] {
        match Strategy::mirrored(r, m) {
            Err(e) => assert!(e.to_string().contains("Strategy::mirrored"), "{e}"),
            Ok(s) => panic!("mirrored({r}, {m}) gave {s:?}"),
        }
    }
}
