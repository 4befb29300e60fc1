//! Bad input: every error names the op, the shapes/dtypes involved and a fix; shape and axis
//! errors are raised when the expression is built; evaluation errors leave state intact.

use kiln::{s, Array, DType, Error};

fn f32s(shape: &[usize]) -> Array {
    Array::zeros(shape, DType::F32)
}

#[test]
fn shape_mismatch_names_op_and_both_shapes() {
    let e = f32s(&[2, 3]).try_add(f32s(&[4])).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "add", .. }));
    let m = e.to_string();
    assert!(
        m.contains("add") && m.contains("(2, 3)") && m.contains("(4,)"),
        "{m}"
    );

    let m = f32s(&[2, 3])
        .try_matmul(&f32s(&[4, 5]))
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("matmul")
            && m.contains("(2, 3)")
            && m.contains("(4, 5)")
            && m.contains("transpose"),
        "{m}"
    );

    let m = f32s(&[5, 2, 3])
        .try_matmul(&f32s(&[4, 3, 2]))
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("batch") && m.contains("(5,)") && m.contains("(4,)"),
        "{m}"
    );

    let m = Array::try_concat(&[&f32s(&[2, 3]), &f32s(&[2, 4])], 0)
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("concat") && m.contains("(2, 3)") && m.contains("(2, 4)"),
        "{m}"
    );

    let m = Array::try_where(&f32s(&[3]).gt(0.0), f32s(&[2]), 0.0)
        .unwrap_err()
        .to_string();
    assert!(m.contains("where"), "{m}");
}

#[test]
fn reshape_and_axis_errors_are_found_at_build_time() {
    let a = f32s(&[2, 6]);
    let m = a.try_reshape(&[5, -1]).unwrap_err().to_string();
    assert!(
        m.contains("reshape") && m.contains("(2, 6)") && m.contains("12"),
        "{m}"
    );
    assert!(a
        .try_reshape(&[-1, -1])
        .unwrap_err()
        .to_string()
        .contains("only one"));

    let e = a.try_sum(Some(&[2]), false).unwrap_err();
    assert_eq!(
        e,
        Error::InvalidAxis {
            op: "sum",
            axis: 2,
            rank: 2
        }
    );
    assert!(e.to_string().contains("-2..2"));
    assert!(a.try_softmax(-3).is_err());
    assert!(a.try_argmax(Some(5), false).is_err());
    assert!(a.try_expand_dims(4).is_err());
    assert!(a.try_permute(&[0, 0]).is_err());
    assert!(a
        .try_squeeze(Some(&[0]))
        .unwrap_err()
        .to_string()
        .contains("size 2"));
    assert!(a
        .try_slice(s![2])
        .unwrap_err()
        .to_string()
        .contains("out of bounds"));
    assert!(a
        .try_slice(s![.., ..;0])
        .unwrap_err()
        .to_string()
        .contains("step"));
    assert!(a.try_slice(s![0, 0, 0]).is_err());
    let m = f32s(&[0, 3])
        .try_max(Some(&[0]), false)
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("max") && m.contains("(0, 3)") && m.contains("identity"),
        "{m}"
    );
    assert!(f32s(&[0]).try_argmax(None, false).is_err());
    assert!(f32s(&[2, 3])
        .try_top_k(4)
        .unwrap_err()
        .to_string()
        .contains("k = 4"));
}

#[test]
fn dtype_errors_name_the_dtypes() {
    let b = Array::from_vec(vec![true, false], &[2]).unwrap();
    let m = b.try_exp().unwrap_err().to_string();
    assert!(
        m.contains("exp") && m.contains("bool") && m.contains("cast"),
        "{m}"
    );
    assert!(b.try_sub(&b).unwrap_err().to_string().contains("subtract"));
    let m = f32s(&[2]).to_vec::<f64>().unwrap_err().to_string();
    assert!(
        m.contains("float32") && m.contains("float64") && m.contains("cast"),
        "{m}"
    );
    let ids = Array::from_vec(vec![0.0f32], &[1]).unwrap();
    assert!(f32s(&[3])
        .try_take(&ids, 0)
        .unwrap_err()
        .to_string()
        .contains("indices must be"));
    let i32s = Array::from_vec(vec![1i32], &[1]).unwrap();
    let m = i32s.try_add(1i64 << 40).unwrap_err().to_string();
    assert!(m.contains("1099511627776") && m.contains("int32"), "{m}");
    assert!(Array::from_vec(vec![1.0f32; 5], &[2, 3])
        .unwrap_err()
        .to_string()
        .contains("(2, 3)"));
}

#[test]
fn evaluation_errors_name_the_value_and_leave_state_intact() {
    let table = Array::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
    let ids = Array::from_vec(vec![0i64, 7], &[2]).unwrap();
    let g = table.take(&ids, 0);
    let e = g.eval().unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "take",
            index: 7,
            axis: 0,
            size: 3
        }
    );
    assert!(e.to_string().contains("index 7") && e.to_string().contains("size 3"));
    assert!(!g.is_evaluated());
    // the inputs are untouched and other work still evaluates
    assert_eq!((&table * 2.0).to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0]);
    // a joint evaluation that fails stores nothing
    let ok = &table + 1.0;
    assert!(kiln::eval(&[&ok, &g]).is_err());
    assert!(!ok.is_evaluated());
    ok.eval().unwrap();

    let a = Array::from_vec(vec![7i32, -7], &[2]).unwrap();
    let z = Array::from_vec(vec![2i32, 0], &[2]).unwrap();
    let m = a.rem(&z).eval().unwrap_err().to_string();
    assert!(
        m.contains("remainder") && m.contains("-7") && m.contains("zero"),
        "{m}"
    );
    let m = a.pow(-1).eval().unwrap_err().to_string();
    assert!(m.contains("negative"), "{m}");
}

#[test]
#[should_panic(expected = "(2, 3) and (4,)")]
fn operators_panic_with_the_message() {
    let _ = f32s(&[2, 3]) + f32s(&[4]);
}

#[test]
fn where_rejects_a_scalar_that_does_not_fit() {
    let a = Array::from_vec(vec![1i32, 2], &[2]).unwrap();
    let m = Array::try_where(&a.gt(1), &a, 1i64 << 40)
        .unwrap_err()
        .to_string();
    assert!(m.contains("where") && m.contains("int32"), "{m}");
}

/// Operations written with others (`mean` with `sum`, `softmax` with `max`, ...) name the
/// call the user made, for every out-of-range axis.
mod composite_ops_name_the_users_call {
    use kiln::{Array, DType, Error};
    use proptest::prelude::*;
    use std::sync::Arc;

    fn op_of(r: kiln::Result<Array>) -> String {
        r.expect_err("a bad call must fail").op().to_string()
    }

    #[test]
    fn regressions() {
        let a = Array::zeros(&[2, 3], DType::F32);
        assert_eq!(op_of(a.try_mean(Some(&[5]), false)), "mean");
        assert_eq!(op_of(a.try_softmax(4)), "softmax");
        assert_eq!(op_of(a.try_log_softmax(-3)), "log_softmax");
        assert_eq!(op_of(a.try_logsumexp(Some(&[2]), true)), "logsumexp");
        assert_eq!(op_of(a.try_dot(&Array::zeros(&[4, 5], DType::F32))), "dot");
        assert_eq!(
            op_of(a.try_clip(Array::zeros(&[4], DType::F32), 1.0)),
            "clip"
        );
        let data: Arc<[f32]> = Arc::from(vec![1.0f32; 5]);
        let e = Array::from_arc(data, &[2, 3]).unwrap_err();
        assert!(matches!(e, Error::DataLength { op: "from_arc", .. }), "{e}");
        let e = Array::uniform(&[2], 0.0, 1.0, 0, DType::I64).unwrap_err();
        assert_eq!(e.op(), "uniform");
        let e = a.at::<f32>(&[2, 0]).unwrap_err();
        assert!(matches!(e, Error::IndexOutOfRange { op: "at", .. }), "{e}");
        let e = a.at::<f64>(&[0, 0]).unwrap_err();
        assert!(matches!(e, Error::DTypeMismatch { op: "at", .. }), "{e}");
        let ids = Array::from_vec(vec![0i64], &[1]).unwrap();
        assert_eq!(op_of(ids.try_one_hot(usize::MAX, DType::F32)), "one_hot");
    }

    proptest! {
        #[test]
        fn any_bad_axis(bad in prop_oneof![3isize..i64::MAX as isize, isize::MIN..-3]) {
            let a = Array::zeros(&[2, 3, 4], DType::F64);
            prop_assert_eq!(op_of(a.try_mean(Some(&[bad]), false)), "mean");
            prop_assert_eq!(op_of(a.try_softmax(bad)), "softmax");
            prop_assert_eq!(op_of(a.try_log_softmax(bad)), "log_softmax");
            prop_assert_eq!(op_of(a.try_logsumexp(Some(&[bad]), false)), "logsumexp");
            prop_assert_eq!(op_of(a.try_sum(Some(&[bad]), false)), "sum");
        }
    }
}
