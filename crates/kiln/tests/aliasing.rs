//! Regression tests for the memory plan's aliasing: an in-place write never overwrites an
//! input that is read later, an input the user passed, or a value the user holds.

use kiln::{Array, DType};

fn close(a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{x} vs {y}");
    }
}

#[test]
fn a_value_read_by_a_later_kernel_is_not_overwritten() {
    let v: Vec<f64> = (0..64).map(|i| i as f64 * 0.1).collect();
    let a = Array::from_vec(v.clone(), &[8, 8]).unwrap();
    let t = a.exp(); // expensive, two users: materialised
    let u = (&t + 1.0).transpose().tanh(); // reads t early
    let w = &t * 2.0; // reads t later
    kiln::eval(&[&u, &w]).unwrap();
    let te: Vec<f64> = v.iter().map(|x| x.exp()).collect();
    close(
        &w.to_vec::<f64>().unwrap(),
        &te.iter().map(|x| x * 2.0).collect::<Vec<_>>(),
    );
    let mut ue = vec![0.0; 64];
    for r in 0..8 {
        for c in 0..8 {
            ue[c * 8 + r] = (te[r * 8 + c] + 1.0).tanh();
        }
    }
    close(&u.to_vec::<f64>().unwrap(), &ue);
}

#[test]
fn inputs_and_held_values_are_never_written() {
    let v: Vec<f32> = (0..1000).map(|i| i as f32 * 0.01).collect();
    let a = Array::from_vec(v.clone(), &[1000]).unwrap();
    let held = a.sin();
    held.eval().unwrap(); // the user holds an evaluated value
    let before = held.to_vec::<f32>().unwrap();
    // a long chain over `a` and `held`, with many intermediates that die
    let mut x = &a + &held;
    for i in 0..6 {
        x = (x.transpose().exp() * 0.5).permute(&[0]) + i as f64;
        x = x.tanh() - &held;
    }
    x.eval().unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), v, "inputs are untouched");
    assert_eq!(
        held.to_vec::<f32>().unwrap(),
        before,
        "held values are untouched"
    );
    // the same computation on the host
    let mut h: Vec<f32> = v.iter().zip(&before).map(|(a, s)| a + s).collect();
    for i in 0..6 {
        for (k, y) in h.iter_mut().enumerate() {
            *y = ((*y).exp() * 0.5 + i as f32).tanh() - before[k];
        }
    }
    let got = x.to_vec::<f32>().unwrap();
    for (g, w) in got.iter().zip(&h) {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{g} vs {w}");
    }
}

#[test]
fn a_shared_input_buffer_is_not_aliased_with_an_output() {
    use std::sync::Arc;
    let data: Arc<[f64]> = Arc::from(vec![1.0, 2.0, 3.0]);
    let a = Array::from_arc(data.clone(), &[3]).unwrap();
    let y = (&a * 2.0).exp();
    let _ = y.to_vec::<f64>().unwrap();
    assert_eq!(&data[..], &[1.0, 2.0, 3.0]);
    let z = Array::zeros(&[3], DType::F64);
    assert_eq!(z.to_vec::<f64>().unwrap(), vec![0.0; 3]);
}
