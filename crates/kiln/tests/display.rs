//! `Display` of arrays against numpy 2.x's `str()` (expected strings produced by numpy).

use kiln::{Array, DType};

fn f64s(v: Vec<f64>, shape: &[usize]) -> String {
    Array::from_vec(v, shape).unwrap().to_string()
}

#[test]
fn floats_like_numpy() {
    // str(np.arange(30.) * 1.5)
    let a = Array::arange(0.0, 30.0, 1.0, DType::F64).unwrap() * 1.5;
    assert_eq!(
        a.to_string(),
        "[ 0.   1.5  3.   4.5  6.   7.5  9.  10.5 12.  13.5 15.  16.5 18.  19.5\n 21.  22.5 24.  25.5 27.  28.5 30.  31.5 33.  34.5 36.  37.5 39.  40.5\n 42.  43.5]"
    );
    assert_eq!(f64s(vec![1.5e10, 2.0], &[2]), "[1.5e+10 2.0e+00]");
    assert_eq!(f64s(vec![0.0001, 1.0], &[2]), "[1.e-04 1.e+00]");
    // str(np.sqrt(np.array([[1,2,3],[4,5,6]], np.float32) * 2 + np.array([10,20,30], np.float32)))
    let a = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let row = Array::from_vec(vec![10.0f32, 20.0, 30.0], &[3]).unwrap();
    assert_eq!(
        (&a * 2.0 + &row).sqrt().to_string(),
        "[[3.4641016 4.8989797 6.       ]\n [4.2426405 5.477226  6.4807405]]"
    );
}

#[test]
fn ints_bools_and_scalars() {
    assert_eq!(
        Array::from_vec(vec![true, false], &[2])
            .unwrap()
            .to_string(),
        "[ True False]"
    );
    assert_eq!(Array::scalar(7i32).to_string(), "7");
    assert_eq!(Array::zeros(&[2, 0], DType::I32).to_string(), "[]");
}

#[test]
fn evaluation_errors_are_printed_not_panicked() {
    let a = Array::from_vec(vec![1i64, 2], &[2]).unwrap();
    let s = a.floor_div(0).to_string();
    assert!(s.contains("division by zero"), "{s}");
}

/// Summaries of large arrays against numpy's own strings (`fixtures/print_summary.json`,
/// written by `fixtures/gen_print_fixtures.py`).
#[test]
fn summaries_match_numpy() {
    let fixtures: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/print_summary.json")).unwrap();
    let want = |name: &str| fixtures["cases"][name].as_str().unwrap().to_string();
    let arange = |n: usize, dtype| Array::arange(0.0, n as f64, 1.0, dtype).unwrap();
    assert_eq!(
        arange(1 << 20, DType::F64).to_string(),
        want("arange_2_20_f64")
    );
    assert_eq!(
        Array::ones(&[1 << 20], DType::F32).to_string(),
        want("ones_2_20_f32")
    );
    assert_eq!(
        arange(6000, DType::I64).reshape(&[2000, 3]).to_string(),
        want("arange_6000_i64_2000x3")
    );
    assert_eq!(
        (arange(24000, DType::F64).reshape(&[20, 30, 40]) / 7.0).to_string(),
        want("arange_24000_f64_div7_20x30x40")
    );
    assert_eq!(
        (arange(1001, DType::I64) % 3).eq(0).to_string(),
        want("bool_1001")
    );
}
