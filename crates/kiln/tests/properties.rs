//! Property tests: algebraic identities of the front end, slicing against a naive model of
//! Python's slice rules, and "evaluating several outputs at once equals evaluating each
//! alone" on random expression DAGs with shared subexpressions.

use kiln::{s, Array, DType, SliceArg};
use proptest::prelude::*;

fn arr(data: Vec<f64>, shape: &[usize]) -> Array {
    Array::from_vec(data, shape).unwrap()
}

/// numpy's spelling of a shape: `(2, 3)`, `(4,)`, `()`.
fn np_shape(s: &[usize]) -> String {
    match s {
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            s.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn vals(a: &Array) -> Vec<f64> {
    a.to_vec::<f64>().unwrap()
}

/// A shape of rank 0..=3 with dims 0..=4 and matching finite data.
fn shaped() -> impl Strategy<Value = (Vec<usize>, Vec<f64>)> {
    prop::collection::vec(0usize..5, 0..4).prop_flat_map(|shape| {
        let n: usize = shape.iter().product();
        (Just(shape), prop::collection::vec(-100.0f64..100.0, n))
    })
}

/// Python's `slice(start, stop, step).indices(n)` then `range(...)`, written independently of
/// kiln's implementation.
fn python_slice(n: i64, start: Option<i64>, stop: Option<i64>, step: i64) -> Vec<i64> {
    let (lo, hi) = if step > 0 { (0, n) } else { (-1, n - 1) };
    let fix = |v: i64| {
        let v = if v < 0 { v + n } else { v };
        v.clamp(lo, hi)
    };
    let b = start.map(fix).unwrap_or(if step > 0 { 0 } else { n - 1 });
    let e = stop.map(fix).unwrap_or(if step > 0 { n } else { -1 });
    let mut out = vec![];
    let mut i = b;
    while (step > 0 && i < e) || (step < 0 && i > e) {
        out.push(i);
        i += step;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn add_and_mul_commute_with_broadcasting((sa, da) in shaped(), (sb, db) in shaped()) {
        let (a, b) = (arr(da, &sa), arr(db, &sb));
        match a.try_add(&b) {
            Ok(ab) => {
                prop_assert_eq!(vals(&ab), vals(&(&b + &a)));
                prop_assert_eq!(vals(&(&a * &b)), vals(&(&b * &a)));
            }
            Err(e) => {
                // the error names both shapes
                let msg = e.to_string();
                prop_assert!(msg.contains(&np_shape(&sa)) && msg.contains(&np_shape(&sb)), "{}", msg);
                prop_assert!(b.try_add(&a).is_err());
            }
        }
    }

    #[test]
    fn identities_hold((shape, data) in shaped()) {
        let a = arr(data.clone(), &shape);
        prop_assert_eq!(vals(&(&a * 1.0)), data.clone());
        prop_assert_eq!(vals(&(&a + 0.0)), data.clone());
        prop_assert_eq!(vals(&(-(-&a))), data.clone());
        prop_assert_eq!(vals(&a.transpose().transpose()), data.clone());
        prop_assert_eq!(vals(&a.flatten().reshape(&shape.iter().map(|&d| d as isize).collect::<Vec<_>>())), data.clone());
        // (a - b) + b is a up to rounding
        let b = &a * 0.37 + 1.5;
        for (x, y) in vals(&(&(&a - &b) + &b)).iter().zip(&data) {
            prop_assert!((x - y).abs() <= 1e-12 * y.abs().max(1.0));
        }
        // where(c, a, b) == where(!c, b, a)
        let c = a.gt(0.0);
        prop_assert_eq!(vals(&Array::where_(&c, &a, &b)), vals(&Array::where_(&!&c, &b, &a)));
        if !data.is_empty() {
            let m = a.max(None, false).item::<f64>().unwrap();
            prop_assert!(data.iter().all(|&x| x <= m) && data.contains(&m));
            let l = a.logsumexp(None, false).item::<f64>().unwrap();
            prop_assert!(l >= m - 1e-12);
            let idx = a.argmax(None, false).item::<i64>().unwrap() as usize;
            prop_assert_eq!(data[idx], m);
        }
    }

    #[test]
    fn sums_over_axes_compose((shape, data) in shaped().prop_filter("rank 2+", |(s, _)| s.len() >= 2)) {
        let a = arr(data, &shape);
        let both = a.sum(Some(&[0, 1]), false);
        let one_by_one = a.sum(Some(&[1]), false).sum(Some(&[0]), false);
        for (x, y) in vals(&both).iter().zip(vals(&one_by_one)) {
            prop_assert!((x - y).abs() <= 1e-9 * (1.0 + x.abs()));
        }
        if shape[shape.len() - 1] > 0 {
            for p in vals(&a.softmax(-1).sum(Some(&[-1]), false)) {
                prop_assert!((p - 1.0).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn integer_matmul_is_associative(m in 0usize..4, k in 0usize..4, n in 0usize..4, p in 0usize..4, seed in any::<u64>()) {
        let mk = |r: usize, c: usize, s: u64| {
            let v: Vec<i64> = (0..r * c).map(|i| ((i as u64 * 2654435761 + s) % 7) as i64 - 3).collect();
            Array::from_vec(v, &[r, c]).unwrap()
        };
        let (a, b, c) = (mk(m, k, seed), mk(k, n, seed / 3), mk(n, p, seed / 7));
        prop_assert_eq!(a.matmul(&b).matmul(&c).to_vec::<i64>().unwrap(), a.matmul(&b.matmul(&c)).to_vec::<i64>().unwrap());
    }

    #[test]
    fn slicing_matches_python_rules(n in 0usize..9, start in prop::option::of(-12i64..12), stop in prop::option::of(-12i64..12),
                                    step in prop::sample::select(vec![-3i64, -2, -1, 1, 2, 3])) {
        let a = Array::arange(0.0, n as f64, 1.0, DType::I64).unwrap();
        let sl = a.slice(&[SliceArg::range(start.map(|v| v as isize), stop.map(|v| v as isize), step as isize)]);
        prop_assert_eq!(sl.to_vec::<i64>().unwrap(), python_slice(n as i64, start, stop, step));
    }

    #[test]
    fn concat_then_slice_recovers_parts((shape, data) in shaped().prop_filter("rank 1+", |(s, _)| !s.is_empty())) {
        let a = arr(data.clone(), &shape);
        let b = &a * 2.0;
        let c = Array::concat(&[&a, &b], 0);
        let n = shape[0] as isize;
        prop_assert_eq!(vals(&c.slice(s![..n])), data);
        prop_assert_eq!(vals(&c.slice(s![n..])), vals(&b));
    }

    #[test]
    fn joint_evaluation_equals_separate(ops in prop::collection::vec((0u8..8, any::<prop::sample::Index>(), any::<prop::sample::Index>()), 1..12),
                                        outs in prop::collection::vec(any::<prop::sample::Index>(), 1..4)) {
        // Build the same random DAG twice: evaluate all chosen outputs together on one copy,
        // each output alone on fresh copies, and compare.
        let build = || {
            let x = arr((0..12).map(|i| i as f64 * 0.25 - 1.0).collect(), &[3, 4]);
            let y = arr(vec![0.5, -1.0, 2.0, 0.0], &[4]);
            let mut nodes = vec![x, y];
            for (op, i, j) in &ops {
                let a = nodes[i.index(nodes.len())].clone();
                let b = nodes[j.index(nodes.len())].clone();
                let r = match op {
                    0 => &a + &b,
                    1 => &a * &b,
                    2 => a.tanh(),
                    3 => a.maximum(&b),
                    4 => a.sum(Some(&[-1]), true),
                    5 => a.exp().minimum(10.0),
                    6 => Array::where_(&a.gt(&b), &a, &b),
                    _ => a.softmax(-1),
                };
                nodes.push(r);
            }
            nodes
        };
        let together = build();
        let picked: Vec<&Array> = outs.iter().map(|o| &together[o.index(together.len())]).collect();
        kiln::eval(&picked).unwrap();
        for o in &outs {
            let fresh = build();
            let k = o.index(fresh.len());
            let x = vals(&together[k]);
            let y = vals(&fresh[k]);
            prop_assert_eq!(x.len(), y.len());
            for (p, q) in x.iter().zip(&y) {
                prop_assert!(p == q || (p.is_nan() && q.is_nan()), "{} vs {}", p, q);
            }
        }
    }
}
