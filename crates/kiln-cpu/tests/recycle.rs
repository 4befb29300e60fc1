//! Output recycling: the storage of an evaluated result goes back to the process-wide pool
//! when the last handle on it is dropped, the next evaluation of that size reuses it, and a
//! result that is still held is never handed out again.
//!
//! The pool is process-wide, so the tests of this file (their own test binary) run one at a
//! time and compare pool counters before and after. Sizes stay below 64K positions so the
//! kernels run on one thread and every scratch register comes back before `evaluate` returns.

use kiln_compiler::Engine;
use kiln_cpu::CpuBackend;
use kiln_ir::{build, BinaryOp, HostData, NodeRef, Shape, Shared};
use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn engine() -> Engine<CpuBackend> {
    Engine::new(CpuBackend, 16)
}

fn inputs<T: Copy>(n: usize, f: impl Fn(usize, usize) -> T) -> [Vec<T>; 4] {
    std::array::from_fn(|k| (0..n).map(|i| f(k, i)).collect())
}

/// `(a*b + c)*d - a` (W1) over the four inputs.
fn w1(x: &[HostData; 4], n: usize) -> NodeRef {
    let d: Vec<NodeRef> = x
        .iter()
        .map(|h| build::data(h.clone(), Shape::from([n])).unwrap())
        .collect();
    let ab = build::binary(BinaryOp::Mul, &d[0], &d[1]).unwrap();
    let abc = build::binary(BinaryOp::Add, &ab, &d[2]).unwrap();
    let abcd = build::binary(BinaryOp::Mul, &abc, &d[3]).unwrap();
    build::binary(BinaryOp::Sub, &abcd, &d[0]).unwrap()
}

/// W1 over `i32` with wrapping arithmetic, by a plain loop.
fn w1_i32(x: &[Vec<i32>; 4]) -> Vec<i32> {
    (0..x[0].len())
        .map(|i| {
            let (a, b, c, d) = (x[0][i], x[1][i], x[2][i], x[3][i]);
            a.wrapping_mul(b)
                .wrapping_add(c)
                .wrapping_mul(d)
                .wrapping_sub(a)
        })
        .collect()
}

fn i32s(d: &HostData) -> &Shared<i32> {
    match d {
        HostData::I32(v) => v,
        other => panic!("expected i32 data, got {:?}", other.dtype()),
    }
}

fn host(x: &[Vec<i32>; 4]) -> [HostData; 4] {
    std::array::from_fn(|k| HostData::from(x[k].clone()))
}

#[test]
fn a_dropped_output_returns_to_the_pool_and_is_reused() {
    let _g = serial();
    let pool = CpuBackend::pool();
    let n = 60_001;
    let x = inputs(n, |k, i| {
        (i as i32).wrapping_mul(7919 + k as i32) - 1000 * k as i32
    });
    let want = w1_i32(&x);
    let hx = host(&x);
    let y = w1(&hx, n);
    let e = engine();

    let out = e.evaluate(&[&y]).unwrap();
    let first = i32s(&out[0]);
    assert_eq!(&first[..], &want[..]);
    let (ptr, len) = (first.as_ptr(), first.len());
    assert!(matches!(first, Shared::Recycled(_)), "{first:?}");

    let before = pool.stats();
    drop(out);
    let after = pool.stats();
    assert_eq!(after.buffers, before.buffers + 1, "{before:?} -> {after:?}");
    // The whole capacity comes back (a fresh vector of `n`: capacity `n`).
    assert!(
        after.bytes - before.bytes >= 4 * n && after.bytes - before.bytes <= 8 * n,
        "{before:?} -> {after:?}"
    );

    // The same evaluation again: its output is the recycled storage (a pool hit, no miss).
    let out = e.evaluate(&[&y]).unwrap();
    let again = pool.stats();
    let second = i32s(&out[0]);
    assert_eq!((second.as_ptr(), second.len()), (ptr, len));
    assert!(again.hits > after.hits, "{after:?} -> {again:?}");
    assert_eq!(again.misses, after.misses, "{after:?} -> {again:?}");
    assert_eq!(again.bytes, before.bytes, "{before:?} / {again:?}");
    assert_eq!(&second[..], &want[..], "recycled storage, fresh values");
}

#[test]
fn a_held_result_is_never_handed_out_again() {
    let _g = serial();
    let n = 50_000;
    let e = engine();
    let x = inputs(n, |k, i| (i as i32 % 1000) - 17 * k as i32);
    let want = w1_i32(&x);
    let y = w1(&host(&x), n);
    let held = e.evaluate(&[&y]).unwrap().remove(0);
    let held_clone = held.clone();
    drop(held); // a clone still holds the storage: nothing goes back

    // Other evaluations of the same size and dtype, each result dropped before the next
    // (they recycle among themselves), while `held_clone` lives.
    for round in 0..4 {
        let z = inputs(n, |k, i| {
            (i as i32).wrapping_mul(31) + round * 100 + k as i32
        });
        let zwant = w1_i32(&z);
        let out = e.evaluate(&[&w1(&host(&z), n)]).unwrap();
        let got = i32s(&out[0]);
        assert_ne!(got.as_ptr(), i32s(&held_clone).as_ptr(), "round {round}");
        assert_eq!(&got[..], &zwant[..], "round {round}");
    }
    assert_eq!(
        &i32s(&held_clone)[..],
        &want[..],
        "the held result is intact"
    );
}

#[test]
fn into_vec_takes_the_storage_away_from_the_pool() {
    let _g = serial();
    let pool = CpuBackend::pool();
    let n = 40_000;
    let x = inputs(n, |k, i| (i as i32) ^ (k as i32 * 0x55));
    let want = w1_i32(&x);
    let out = engine().evaluate(&[&w1(&host(&x), n)]).unwrap();
    let HostData::I32(shared) = out.into_iter().next().unwrap() else {
        panic!("i32 output");
    };
    let ptr = shared.as_ptr();
    let before = pool.stats();
    assert_eq!(ptr as usize % 64, 0, "pool storage starts on a cache line");
    let v = shared.into_vec();
    // The same allocation (not a copy), the elements shifted over the alignment padding
    // to the front of it.
    let shift = (ptr as usize).wrapping_sub(v.as_ptr() as usize);
    assert!(
        shift < 64,
        "moved out, not copied (shifted by {shift} bytes)"
    );
    assert_eq!(v, want);
    drop(v);
    assert_eq!(
        pool.stats().bytes,
        before.bytes,
        "the user's Vec does not go home"
    );
}

#[test]
fn the_pool_bound_still_applies_to_recycled_outputs() {
    let _g = serial();
    let pool = CpuBackend::pool();
    let n = 30_000;
    let x = inputs(n, |k, i| i as i32 + k as i32);
    let y = w1(&host(&x), n);
    let e = engine();
    e.evaluate(&[&y]).unwrap(); // compile and warm the registers
    pool.set_limit(0);
    let out = e.evaluate(&[&y]).unwrap();
    drop(out);
    let st = pool.stats();
    pool.set_limit(kiln_cpu::DEFAULT_POOL_BYTES);
    assert_eq!((st.bytes, st.buffers), (0, 0), "{st:?}");
}
