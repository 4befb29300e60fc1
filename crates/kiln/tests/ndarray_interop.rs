//! Moving arrays between kiln and `ndarray` (feature `ndarray`), and `into_vec` /
//! `to_shared`: values against ndarray's own indexing, and no copy where none is promised
//! (checked by comparing buffer addresses).
//!
//! Depends on kiln's public API and `ndarray`.
#![cfg(feature = "ndarray")]

use kiln::{Array, DType};
use ndarray::{Array2, Array3, ArrayD, Axis, ShapeBuilder, Slice};

#[test]
fn standard_layout_moves_in_without_copy() {
    let a = Array2::from_shape_fn((3, 4), |(i, j)| (i * 10 + j) as f32);
    let ptr = a.as_ptr();
    let k = Array::from(a.clone());
    assert_eq!(k.shape(), &[3, 4]);
    assert_eq!(
        k.to_vec::<f32>().unwrap(),
        a.iter().copied().collect::<Vec<_>>()
    );
    let moved = Array::from(a);
    assert_eq!(
        moved.to_shared::<f32>().unwrap().as_ptr(),
        ptr,
        "copied on the way in"
    );
}

#[test]
fn fortran_layout_is_a_transposed_view_of_its_storage() {
    let f = Array3::from_shape_fn((2, 3, 4).f(), |(i, j, l)| (i * 100 + j * 10 + l) as i64);
    let expected: Vec<i64> = f.iter().copied().collect(); // logical row-major order
    let storage = f.as_ptr();
    let k = Array::from(f);
    assert_eq!(k.shape(), &[2, 3, 4]);
    // The graph's one input is the ndarray's storage itself, under a permute.
    let lowered = kiln::lower(&[&k]);
    assert_eq!(lowered.params.len(), 1);
    match lowered.params[kiln_ir::ParamId::from_u32(0)]
        .host()
        .expect("host data")
    {
        kiln_ir::HostData::I64(s) => assert_eq!(s.as_ptr(), storage, "copied on the way in"),
        other => panic!("{other:?}"),
    }
    assert_eq!(k.to_vec::<i64>().unwrap(), expected);
}

#[test]
fn strided_and_offset_arrays_are_read_in_logical_order() {
    let base = Array2::from_shape_fn((5, 6), |(i, j)| (i * 6 + j) as f64);
    // rows 1, 3 and columns 0, 3 (ndarray's `s!` expands to an `allow(unsafe_code)`, which
    // the workspace's `forbid` refuses)
    let every_other = base
        .slice_each_axis(|ax| match ax.axis {
            Axis(0) => Slice::new(1, None, 2),
            _ => Slice::new(0, None, 3),
        })
        .to_owned(); // owned, compact
    let k = Array::from(every_other.clone());
    assert_eq!(
        k.to_vec::<f64>().unwrap(),
        every_other.iter().copied().collect::<Vec<_>>()
    );
    // A view with an offset, made owned by slicing in place.
    let mut tail = base.clone();
    tail.slice_axis_inplace(Axis(0), Slice::from(2..));
    tail.slice_axis_inplace(Axis(1), Slice::from(1..));
    let k = Array::from(tail.clone());
    assert_eq!(k.shape(), &[3, 5]);
    assert_eq!(
        k.to_vec::<f64>().unwrap(),
        tail.iter().copied().collect::<Vec<_>>()
    );
    // Negative strides.
    let mut flipped = base.clone();
    flipped.invert_axis(ndarray::Axis(1));
    let k = Array::from(flipped.clone());
    assert_eq!(
        k.to_vec::<f64>().unwrap(),
        flipped.iter().copied().collect::<Vec<_>>()
    );
}

#[test]
fn every_dtype_and_empty_and_rank0_round_trip() {
    let b = ArrayD::from_shape_vec(vec![2, 2], vec![true, false, false, true]).unwrap();
    assert_eq!(Array::from(b.clone()).to_ndarray::<bool>().unwrap(), b);
    let i = ArrayD::from_shape_vec(vec![3], vec![i32::MIN, 0, i32::MAX]).unwrap();
    assert_eq!(Array::from(i.clone()).into_ndarray::<i32>().unwrap(), i);
    let e = ArrayD::<f32>::zeros(vec![3, 0, 2]);
    let k = Array::from(e.clone());
    assert_eq!(k.shape(), &[3, 0, 2]);
    assert_eq!(k.to_ndarray::<f32>().unwrap(), e);
    let r0 = ArrayD::from_elem(vec![], 2.5f64);
    let k = Array::from(r0.clone());
    assert_eq!(k.shape(), &[] as &[usize]);
    assert_eq!(k.to_ndarray::<f64>().unwrap(), r0);
}

#[test]
fn results_come_back_with_ndarray_semantics() {
    let x = Array2::from_shape_fn((4, 3), |(i, j)| (i as f32 - 1.5) * (j as f32 + 0.5));
    let k = Array::from(x.clone());
    let y = (&k * &k)
        .sum(Some(&[0]), false)
        .into_ndarray::<f32>()
        .unwrap();
    let reference = (&x * &x).sum_axis(ndarray::Axis(0)).into_dyn();
    assert_eq!(y, reference);
}

#[test]
fn wrong_dtype_is_an_error_naming_the_call() {
    let k = Array::zeros(&[2], DType::I64);
    let e = k.to_ndarray::<f32>().unwrap_err();
    assert!(e.to_string().contains("to_vec"), "{e}");
    let e = k.into_vec::<f32>().unwrap_err();
    assert!(e.to_string().contains("into_vec"), "{e}");
}

#[test]
fn into_vec_moves_the_only_handle_and_copies_a_shared_one() {
    let v = vec![1.0f64, 2.0, 3.0];
    let ptr = v.as_ptr();
    let a = Array::from_vec(v, &[3]).unwrap();
    assert_eq!(
        a.to_shared::<f64>().unwrap().as_ptr(),
        ptr,
        "to_shared copied"
    );
    let out = a.into_vec::<f64>().unwrap();
    assert_eq!(out.as_ptr(), ptr, "into_vec copied the only handle's Vec");
    // With a second handle alive, into_vec copies and the other handle is untouched.
    let a = Array::from_vec(vec![4i32, 5], &[2]).unwrap();
    let b = a.clone();
    assert_eq!(a.into_vec::<i32>().unwrap(), vec![4, 5]);
    assert_eq!(b.to_vec::<i32>().unwrap(), vec![4, 5]);
    // An evaluated result moves out too: the same allocation (the backend's buffers start
    // with alignment padding, so the elements move to its front).
    let r = Array::from_vec(vec![1.0f32; 1000], &[1000]).unwrap() * 3.0;
    r.eval().unwrap();
    let ptr = r.to_shared::<f32>().unwrap().as_ptr() as usize;
    let out = r.into_vec::<f32>().unwrap();
    assert_eq!(out, vec![3.0; 1000]);
    let start = out.as_ptr() as usize;
    assert!(
        start <= ptr && ptr - start < 256,
        "a new buffer: {start:#x} vs {ptr:#x}"
    );
}
