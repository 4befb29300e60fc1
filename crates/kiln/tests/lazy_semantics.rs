//! Laziness: nothing is computed while building, results are cached and shared by clones,
//! evaluated arrays drop their history, random streams do not depend on how they are
//! evaluated, and arrays cross threads.

use kiln::{Array, DType};

#[test]
fn building_does_not_evaluate_and_clones_share_the_value() {
    let a = Array::from_vec(vec![1.0f64, 2.0, 3.0], &[3]).unwrap();
    let b = (&a * 2.0).exp();
    let c = b.clone();
    assert!(!b.is_evaluated() && !c.is_evaluated());
    assert_eq!(b.shape(), &[3]);
    b.eval().unwrap();
    assert!(c.is_evaluated(), "clones share the evaluated value");
    let g = kiln::lower(&[&c]);
    assert_eq!(
        g.graph.nodes.len(),
        1,
        "an evaluated array lowers to a single parameter"
    );
}

#[test]
fn a_training_style_loop_holds_constant_history() {
    let g = Array::from_vec(vec![0.5f32; 16], &[16]).unwrap();
    let mut w = Array::zeros(&[16], DType::F32);
    for _ in 0..2_000 {
        w = &w - &(&g * 0.1);
        w.eval().unwrap();
    }
    assert_eq!(kiln::lower(&[&w]).graph.nodes.len(), 1);
    let v = w.to_vec::<f32>().unwrap();
    // 2000 steps of -0.05 each, accumulated in f32
    let mut want = 0.0f32;
    for _ in 0..2_000 {
        want -= 0.5f32 * 0.1f32;
    }
    assert!(v.iter().all(|&x| x == want), "{} vs {want}", v[0]);
}

#[test]
fn random_streams_are_independent_of_evaluation_grouping() {
    let r = || Array::uniform(&[257], -1.0, 1.0, 99, DType::F32).unwrap();
    let alone = r().to_vec::<f32>().unwrap();
    let inside = r();
    let other = (&inside * 2.0).sum(None, false);
    kiln::eval(&[&other, &inside]).unwrap();
    assert_eq!(inside.to_vec::<f32>().unwrap(), alone);
    // a slice of a larger stream is not a different stream: element i depends on (seed, i)
    let big = Array::uniform(&[1000], -1.0, 1.0, 99, DType::F32).unwrap();
    assert_eq!(&big.to_vec::<f32>().unwrap()[..257], &alone[..]);
    let n = Array::normal(&[4], 0.0, 1.0, 5, DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let m = Array::normal(&[4], 0.0, 1.0, 6, DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert_ne!(n, m, "different seeds give different streams");
}

#[test]
fn arrays_cross_threads() {
    let a = Array::arange(0.0, 100.0, 1.0, DType::F64).unwrap();
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let a = a.clone();
            std::thread::spawn(move || (&a * t as f64).sum(None, false).item::<f64>().unwrap())
        })
        .collect();
    for (t, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), 4950.0 * t as f64);
    }
}

#[test]
fn structural_hash_ignores_values_but_not_structure() {
    let h = |x: Vec<f32>, s: f64| {
        let a = Array::from_vec(x, &[2]).unwrap();
        kiln::lower(&[&(&a * s).exp()]).structural_hash()
    };
    assert_eq!(h(vec![1.0, 2.0], 0.5), h(vec![7.0, -1.0], 3.0));
    let a = Array::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let other = kiln::lower(&[&(&a * 0.5).sin()]).structural_hash();
    assert_ne!(h(vec![1.0, 2.0], 0.5), other);
}
