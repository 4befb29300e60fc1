//! Hostile values: NaN, ±inf, ±0 and subnormal constants, huge and empty shapes, extreme
//! slice steps and indices. None may hang, panic, abort or give a silently wrong value:
//! each case gives numpy's value (computed here with plain Rust IEEE arithmetic) or a clear
//! error naming the call. Every evaluation runs under a deadline, so a regression to a hang
//! fails instead of stalling the suite.

use kiln::{s, Array, DType, Error, SliceArg};
use proptest::prelude::*;
use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on its own thread and fails if it does not finish within a minute.
fn within_deadline<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(v) => v,
        Err(_) => panic!("{what}: no result within 60 s (a hang)"),
    }
}

/// Equal as numpy's `assert_array_equal`: NaN equals NaN, and ±0 are told apart.
fn same(got: &[f64], want: &[f64]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g.is_nan() && w.is_nan()) || g.to_bits() == w.to_bits())
}

const HOSTILE: [f64; 10] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    0.0,
    -0.0,
    5e-324, // the smallest subnormal
    -2.2250738585072014e-308,
    f64::MAX,
    f64::MIN_POSITIVE,
    1.0,
];

#[test]
fn nan_constants_evaluate_instead_of_hanging() {
    within_deadline("NaN constants", || {
        let x = Array::from_vec(vec![1.0f64, -2.0, 3.0], &[3]).unwrap();
        assert!((&x * f64::NAN)
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .all(|v| v.is_nan()));
        let full = Array::full(&[3], f64::NAN, DType::F64)
            .to_vec::<f64>()
            .unwrap();
        assert!(full.iter().all(|v| v.is_nan()));
        assert!(Array::scalar(f64::NAN).item::<f64>().unwrap().is_nan());
        let m = x.gt(0.0);
        let masked = kiln::where_(&m, f64::NAN, &x)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        assert!(same(&masked, &[f64::NAN, -2.0, f64::NAN]));
        // the same expression twice with NaN (a graph-cache hit) and once with a number
        for s in [f64::NAN, f64::NAN, 2.0] {
            let y = (&x * s + 1.0).to_vec::<f64>().unwrap();
            let want: Vec<f64> = [1.0, -2.0, 3.0].iter().map(|v| v * s + 1.0).collect();
            assert!(same(&y, &want), "{y:?} vs {want:?}");
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Elementwise arithmetic, comparisons, `where`, `clip` and reductions with hostile
    /// constants and data agree with IEEE arithmetic done in plain Rust.
    #[test]
    fn hostile_scalars_match_ieee_arithmetic(
        data in prop::collection::vec(prop::sample::select(HOSTILE.to_vec()), 1..8),
        s in prop::sample::select(HOSTILE.to_vec()),
        t in prop::sample::select(HOSTILE.to_vec()),
    ) {
        let (got, want) = within_deadline("hostile scalars", move || {
            let x = Array::from_vec(data.clone(), &[data.len()]).unwrap();
            let y = kiln::where_(&x.lt(s), t, &(&x * s - t)).unwrap();
            let got = y.to_vec::<f64>().unwrap();
            let want: Vec<f64> =
                data.iter().map(|&v| if v < s { t } else { v * s - t }).collect();
            let f = Array::full(&[2], s, DType::F64).to_vec::<f64>().unwrap();
            assert!(same(&f, &[s, s]));
            (got, want)
        });
        prop_assert!(same(&got, &want), "{:?} vs {:?}", got, want);
    }

    /// Slices with any step and bounds give Python's `list[start:stop:step]`.
    #[test]
    fn extreme_slice_steps_match_python(
        n in 0usize..6,
        start in prop::option::of(prop::sample::select(vec![isize::MIN, -7, -1, 0, 1, 3, isize::MAX])),
        stop in prop::option::of(prop::sample::select(vec![isize::MIN, -7, -1, 0, 1, 3, isize::MAX])),
        step in prop::sample::select(vec![isize::MIN, isize::MIN + 1, -3, -1, 1, 2, isize::MAX - 1, isize::MAX]),
    ) {
        let data: Vec<i64> = (0..n as i64).collect();
        let a = Array::from_vec(data.clone(), &[n]).unwrap();
        let got = a.slice(&[SliceArg::range(start, stop, step)]).to_vec::<i64>().unwrap();
        prop_assert_eq!(got, python_slice(&data, start, stop, step));
    }
}

/// Python's `list[start:stop:step]`, written from the language reference (i128: no
/// overflow for any bound or step).
fn python_slice(v: &[i64], start: Option<isize>, stop: Option<isize>, step: isize) -> Vec<i64> {
    let n = v.len() as i128;
    let step = step as i128;
    let clamp = |x: Option<isize>, default: i128, lo: i128, hi: i128| match x {
        None => default,
        Some(x) => {
            let x = x as i128;
            let x = if x < 0 { x + n } else { x };
            x.clamp(lo, hi)
        }
    };
    let mut out = Vec::new();
    if step > 0 {
        let (mut i, e) = (clamp(start, 0, 0, n), clamp(stop, n, 0, n));
        while i < e {
            out.push(v[i as usize]);
            i += step;
        }
    } else {
        let (mut i, e) = (clamp(start, n - 1, -1, n - 1), clamp(stop, -1, -1, n - 1));
        while i > e {
            out.push(v[i as usize]);
            i += step;
        }
    }
    out
}

#[test]
fn extreme_steps_take_one_element() {
    let a = Array::from_vec(vec![1i64, 2, 3], &[3]).unwrap();
    assert_eq!(a.slice(s![..;isize::MAX]).to_vec::<i64>().unwrap(), vec![1]);
    assert_eq!(a.slice(s![..;isize::MIN]).to_vec::<i64>().unwrap(), vec![3]);
}

#[test]
fn sizes_past_usize_are_errors_not_wraps() {
    let e = Array::try_zeros(&[1 << 40, 1 << 30], DType::F32).unwrap_err();
    assert!(matches!(e, Error::TooLarge { op: "zeros", .. }), "{e}");
    let e = Array::from_vec(Vec::<f32>::new(), &[1 << 40, 1 << 30]).unwrap_err();
    assert!(matches!(e, Error::TooLarge { op: "from_vec", .. }), "{e}");
    let big = Array::full(&[1 << 59], 0i32, DType::Bool);
    let e = Array::try_concat(&[&big, &big, &big], 0).unwrap_err();
    assert!(matches!(e, Error::TooLarge { op: "concat", .. }), "{e}");
    let e = Array::try_concat(&[&big; 40], 0).unwrap_err();
    assert!(e.to_string().contains("concat"), "{e}");
    let e = Array::try_zeros(&[usize::MAX / 2, 4], DType::F64).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e}");
    let ids = Array::from_vec(vec![0i64, 1], &[2]).unwrap();
    let e = ids.try_one_hot(usize::MAX, DType::F32).unwrap_err();
    assert!(matches!(e, Error::TooLarge { op: "one_hot", .. }), "{e}");
    let e = Array::uniform(&[1 << 62], 0.0, 1.0, 0, DType::F32).unwrap_err();
    assert!(matches!(e, Error::TooLarge { op: "uniform", .. }), "{e}");
    // a broadcast of two valid operands whose result is too large
    let col = Array::full(&[1 << 40, 1], 1.0, DType::F32);
    let row = Array::full(&[1, 1 << 40], 1.0, DType::F32);
    let e = col.try_add(&row).unwrap_err();
    assert!(matches!(e, Error::TooLarge { op: "add", .. }), "{e}");
    let e = col.try_matmul(&row).unwrap_err();
    assert!(matches!(e, Error::TooLarge { op: "matmul", .. }), "{e}");
    // empty shapes with huge dimensions are fine: they hold nothing
    let empty = Array::zeros(&[0, usize::MAX], DType::F64);
    assert_eq!(empty.size(), 0);
    assert_eq!(empty.to_vec::<f64>().unwrap(), Vec::<f64>::new());
}

#[test]
fn an_allocation_larger_than_the_machine_is_an_error() {
    // 256 TiB of f64: the shape is valid, but it is more than x86-64's 128 TiB of user
    // address space, so the allocator refuses it under any overcommit policy
    let a = Array::zeros(&[1 << 45], DType::F64);
    let e = within_deadline("256 TiB", move || (&a + 1.0).to_vec::<f64>().unwrap_err());
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
    assert!(e.to_string().contains("281474976710656 bytes"), "{e}");
    // the engine is still usable afterwards
    let ok = Array::from_vec(vec![1.0f32, 2.0], &[2]).unwrap() + 1.0;
    assert_eq!(ok.to_vec::<f32>().unwrap(), vec![2.0, 3.0]);
}

#[test]
fn printing_a_huge_array_evaluates_only_its_edges() {
    // 8 TiB of f64 is never allocated: the summary reads 3 items at each end
    // (numpy: str(np.ones(2**40)) would print the same, had it the memory)
    let a = Array::ones(&[1 << 40], DType::F64);
    let shown = within_deadline("print", move || a.to_string());
    assert_eq!(shown, "[1. 1. 1. ... 1. 1. 1.]");
    let b = Array::zeros(&[1 << 20, 1 << 20], DType::I32);
    let shown = within_deadline("print", move || b.to_string());
    assert_eq!(
        shown,
        "[[0 0 0 ... 0 0 0]\n [0 0 0 ... 0 0 0]\n [0 0 0 ... 0 0 0]\n ...\n [0 0 0 ... 0 0 0]\n [0 0 0 ... 0 0 0]\n [0 0 0 ... 0 0 0]]"
    );
}

#[test]
fn slices_of_computed_values_compute_only_what_they_select() {
    // x * 0.5 over 2^40 positions: the edges computed, never the whole (8 TiB)
    let x = Array::arange(0.0, (1u64 << 40) as f64, 1.0, DType::F64).unwrap() * 0.5;
    let head = x.slice(s![..3]);
    let tail = x.slice(s![-3..]);
    let both = Array::concat(&[&head, &tail], 0);
    let report = kiln::inspect(&[&both]).unwrap().report;
    assert!(report.bytes_written < 1024, "{report:?}");
    let last = ((1u64 << 40) - 1) as f64 * 0.5;
    assert_eq!(
        both.to_vec::<f64>().unwrap(),
        vec![0.0, 0.5, 1.0, last - 1.0, last - 0.5, last]
    );
    let shown = within_deadline("print", move || x.to_string());
    assert!(
        shown.starts_with("[0.00000000e+00 5.00000000e-01 1.00000000e+00 ...")
            && shown.ends_with("5.49755814e+11]"),
        "{shown}"
    );
}

#[test]
fn integers_that_do_not_fit_are_errors() {
    let e = Array::try_full(&[2], 10_000_000_000i64, DType::I32).unwrap_err();
    assert!(matches!(e, Error::ScalarOverflow { op: "full", .. }), "{e}");
    assert_eq!(
        Array::full(&[2], -2_147_483_648i64, DType::I32)
            .to_vec::<i32>()
            .unwrap(),
        vec![i32::MIN; 2]
    );
}

#[test]
fn random_parameters_are_checked() {
    for (mean, std) in [(0.0, -1.0), (f64::NAN, 1.0), (0.0, f64::INFINITY)] {
        let e = Array::normal(&[3], mean, std, 0, DType::F64).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { op: "normal", .. }),
            "{e}"
        );
    }
    let e = Array::uniform(&[3], 0.0, f64::INFINITY, 0, DType::F64).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "uniform", .. }),
        "{e}"
    );
    let e = Array::uniform(&[3], 0.0, 1.0, 0, DType::I32).unwrap_err();
    assert!(
        matches!(e, Error::UnsupportedDType { op: "uniform", .. }),
        "{e}"
    );
    // std = 0 is allowed (numpy too): every value is the mean
    let z = Array::normal(&[4], 2.5, 0.0, 1, DType::F64).unwrap();
    assert_eq!(z.to_vec::<f64>().unwrap(), vec![2.5; 4]);
}

#[test]
fn creation_with_hostile_sizes_and_bounds() {
    let e = Array::try_eye(usize::MAX, None, DType::F32).unwrap_err();
    assert!(matches!(e, Error::TooLarge { op: "eye", .. }), "{e}");
    let e = Array::arange(0.0, 1e30, 1.0, DType::F64).unwrap_err();
    assert!(matches!(e, Error::TooLarge { op: "arange", .. }), "{e}");
    let e = Array::arange(1e19, 1e19 + 4096.0, 1024.0, DType::I64).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "arange", .. }),
        "{e}"
    );
    let e = Array::linspace(0.0, 1.0, usize::MAX, DType::F32).unwrap_err();
    assert!(matches!(e, Error::TooLarge { op: "linspace", .. }), "{e}");
    for bad in [f64::NAN, f64::INFINITY] {
        assert!(Array::arange(0.0, bad, 1.0, DType::F64).is_err());
        assert!(Array::linspace(bad, 1.0, 3, DType::F64).is_err());
    }
}

/// Dimensions from empty to far past `usize`.
fn hostile_dim() -> impl Strategy<Value = usize> {
    prop::sample::select(vec![
        0,
        1,
        2,
        7,
        1 << 20,
        1 << 31,
        1 << 40,
        1 << 59,
        1 << 62,
        usize::MAX / 2,
        usize::MAX,
    ])
}

/// The exact element count of `dims`, `None` past `u128`.
fn exact(dims: &[usize]) -> Option<u128> {
    dims.iter()
        .try_fold(1u128, |n, &d| n.checked_mul(d as u128))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Building with any shape either succeeds with exactly the elements the shape has (at
    /// most `MAX_ELEMENTS`) or is a `TooLarge` error naming the call: never a wrapped size.
    #[test]
    fn shapes_never_wrap(a in prop::collection::vec(hostile_dim(), 0..4),
                         b in prop::collection::vec(hostile_dim(), 0..4)) {
        let fits = |dims: &[usize]| exact(dims).is_some_and(|n| n <= kiln::MAX_ELEMENTS as u128);
        match Array::try_zeros(&a, DType::F32) {
            Ok(x) => {
                prop_assert!(fits(&a));
                prop_assert_eq!(Some(x.size() as u128), exact(&a));
            }
            Err(e) => {
                prop_assert!(!fits(&a));
                prop_assert!(matches!(e, Error::TooLarge { op: "zeros", .. }), "{}", e);
            }
        }
        let e = Array::from_vec(Vec::<f32>::new(), &a);
        prop_assert_eq!(e.is_ok(), exact(&a) == Some(0), "{:?}", e.err());
        // a broadcast of two arrays that exist
        if let (Ok(x), Ok(y)) = (Array::try_zeros(&a, DType::F32), Array::try_zeros(&b, DType::F32)) {
            match x.try_add(&y) {
                Ok(z) => {
                    prop_assert!(fits(z.shape()));
                    prop_assert_eq!(Some(z.size() as u128), exact(z.shape()));
                }
                Err(e) => prop_assert!(
                    matches!(e, Error::TooLarge { op: "add", .. } | Error::ShapeMismatch { op: "add", .. }),
                    "{}", e
                ),
            }
            if a.len() == 1 && b.len() == 1 {
                let total = a[0] as u128 + b[0] as u128;
                match Array::try_concat(&[&x, &y], 0) {
                    Ok(z) => prop_assert_eq!(z.size() as u128, total),
                    Err(e) => {
                        prop_assert!(total > kiln::MAX_ELEMENTS as u128);
                        prop_assert_eq!(e.op(), "concat");
                    }
                }
            }
        }
    }

    /// `full` of any integer: an `i32` array holds it exactly or the call is an error.
    #[test]
    fn full_never_wraps_an_integer(v in prop_oneof![any::<i64>(), -3i64..3,
        Just(i32::MAX as i64), Just(i32::MAX as i64 + 1), Just(i32::MIN as i64), Just(i32::MIN as i64 - 1)]) {
        match Array::try_full(&[2], v, DType::I32) {
            Ok(a) => {
                prop_assert!(i32::try_from(v).is_ok());
                prop_assert_eq!(a.to_vec::<i32>().unwrap(), vec![v as i32; 2]);
            }
            Err(e) => {
                prop_assert!(i32::try_from(v).is_err());
                prop_assert!(matches!(e, Error::ScalarOverflow { op: "full", .. }), "{}", e);
            }
        }
        prop_assert_eq!(Array::full(&[1], v, DType::I64).item::<i64>().unwrap(), v);
    }

    /// Printing any shape, however large, shows at most 6 items per axis and computes only
    /// those: as many numbers as `∏ min(d, 6)` (every axis longer than 6 cut to its edges)
    /// when the array has more than 1000 elements, all of them otherwise.
    #[test]
    fn printing_shows_only_the_edges(dims in prop::collection::vec(
        prop::sample::select(vec![0usize, 1, 2, 6, 7, 1000, 1 << 20, 1 << 30]), 1..4)) {
        prop_assume!(exact(&dims).is_some_and(|n| n <= kiln::MAX_ELEMENTS as u128));
        let n = exact(&dims).unwrap();
        let a = Array::ones(&dims, DType::I32);
        let shown = within_deadline("print", move || a.to_string());
        let numbers = shown.matches('1').count() as u128;
        let want: u128 = if n > 1000 {
            dims.iter().map(|&d| d.min(6) as u128).product()
        } else {
            n
        };
        prop_assert_eq!(numbers, want, "{}", shown);
        prop_assert_eq!(shown.contains("..."), n > 1000 && dims.iter().any(|&d| d > 6));
    }
}

proptest! {
    /// `normal` and `uniform` accept exactly numpy's valid parameters (finite; `std ≥ 0`)
    /// and give values from them; anything else is an error naming the call.
    #[test]
    fn random_parameters(a in prop::sample::select(HOSTILE.to_vec()),
                         b in prop::sample::select(HOSTILE.to_vec())) {
        match Array::normal(&[4], a, b, 3, DType::F64) {
            Ok(x) => {
                prop_assert!(a.is_finite() && b.is_finite() && b >= 0.0);
                let v = x.to_vec::<f64>().unwrap();
                prop_assert!(v.iter().all(|y| y.is_finite() || !(a + 40.0 * b).is_finite()));
                if b == 0.0 {
                    prop_assert!(v.iter().all(|&y| y == a));
                }
            }
            Err(e) => {
                prop_assert!(!(a.is_finite() && b.is_finite() && b >= 0.0));
                prop_assert!(matches!(e, Error::InvalidArgument { op: "normal", .. }), "{}", e);
            }
        }
        match Array::uniform(&[4], a, b, 3, DType::F64) {
            Ok(x) => {
                prop_assert!((b - a).is_finite());
                let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                let v = x.to_vec::<f64>().unwrap();
                prop_assert!(v.iter().all(|&y| lo <= y && y <= hi), "{:?} in [{}, {}]", v, lo, hi);
            }
            Err(e) => prop_assert!(matches!(e, Error::InvalidArgument { op: "uniform", .. }), "{}", e),
        }
    }
}
