//! Take, TopK and Concat kernels against the reference.

mod common;

use common::*;
use kiln_compiler::KernelKind;
use kiln_ir::{build, DType, Error, HostData, Shape};

fn take_case(
    table: HostData,
    tdims: &[usize],
    tops: &[VOp],
    idx: HostData,
    idims: &[usize],
    axis: usize,
) {
    let mut pb = Pb::new();
    let t = pb.param(table.clone(), tdims, tops);
    let i = pb.param(idx.clone(), idims, &[]);
    let mut tn = node(table.clone(), tdims);
    for o in tops {
        tn = match o {
            VOp::Permute(p) => {
                build::permute(&tn, &p.iter().map(|&a| a as isize).collect::<Vec<_>>()).unwrap()
            }
            _ => unreachable!(),
        };
    }
    let want = build::take(&tn, &node(idx, idims), axis as isize).unwrap();
    let space: Vec<usize> = want.shape().dims().to_vec();
    let o = pb.kernel(
        KernelKind::Take { axis },
        &space,
        vec![t, i],
        &[(table.dtype(), &space)],
    );
    pb.output(o[0]);
    check(pb, &[&want], 0.0);
}

#[test]
fn take_along_each_axis_with_negative_indices() {
    let table = f32s(60, 1);
    let idx = HostData::from(vec![3i64, -1, 0, 2, -4, 3]);
    for axis in 0..3 {
        take_case(
            table.clone(),
            &[4, 5, 3],
            &[],
            idx.clone(),
            &[2, 3],
            axis.min(2),
        );
    }
    take_case(
        table.clone(),
        &[4, 5, 3],
        &[],
        HostData::from(vec![1i32, -3, 2]),
        &[3],
        2,
    );
    // A permuted (strided) table, i64 data, a rank-0 index.
    take_case(
        i64s(60, 2, 1000),
        &[4, 5, 3],
        &[VOp::Permute(vec![2, 0, 1])],
        HostData::from(vec![-2i64]),
        &[],
        1,
    );
    // Embedding lookup: many rows.
    take_case(
        f64s(1000 * 8, 3),
        &[1000, 8],
        &[],
        i64s(500, 4, 999).abs(),
        &[500],
        0,
    );
}

trait Abs {
    fn abs(self) -> HostData;
}
impl Abs for HostData {
    fn abs(self) -> HostData {
        HostData::from(
            (0..self.len())
                .map(|i| self.get(i).as_i64().abs())
                .collect::<Vec<_>>(),
        )
    }
}

#[test]
fn take_out_of_range_is_an_error_like_the_reference() {
    let table = f32s(12, 5);
    let mut pb = Pb::new();
    let t = pb.param(table.clone(), &[4, 3], &[]);
    let i = pb.param(HostData::from(vec![1i64, 4, -5]), &[3], &[]);
    let o = pb.kernel(
        KernelKind::Take { axis: 0 },
        &[3, 3],
        vec![t, i],
        &[(DType::F32, &[3, 3])],
    );
    pb.output(o[0]);
    let err = pb.run().unwrap_err();
    assert_eq!(
        err,
        Error::IndexOutOfRange {
            op: "take",
            index: 4,
            axis: 0,
            size: 4
        }
    );
    take_case(
        table.clone(),
        &[4, 3],
        &[],
        HostData::from(vec![0i32, -5]),
        &[2],
        0,
    );
    take_case(
        table,
        &[4, 3],
        &[],
        HostData::from(vec![3i64, 2, 7]),
        &[3],
        1,
    );
}

#[test]
fn take_with_an_empty_output_checks_nothing() {
    let mut pb = Pb::new();
    let t = pb.param(HostData::from(Vec::<f32>::new()), &[0, 3], &[]);
    let i = pb.param(HostData::from(vec![99i64]), &[1], &[]);
    let o = pb.kernel(
        KernelKind::Take { axis: 1 },
        &[0, 1],
        vec![t, i],
        &[(DType::F32, &[0, 1])],
    );
    pb.output(o[0]);
    let want = build::take(
        &node(HostData::from(Vec::<f32>::new()), &[0, 3]),
        &node(HostData::from(vec![99i64]), &[1]),
        1,
    )
    .unwrap();
    let out = pb.run().unwrap();
    assert_close(&out, &reference(&[&want]).unwrap(), 0.0);
}

fn top_k_case(data: HostData, dims: &[usize], k: usize, ops: &[VOp]) {
    let mut pb = Pb::new();
    let a = pb.param(data.clone(), dims, ops);
    let mut an = node(data.clone(), dims);
    for o in ops {
        if let VOp::Permute(p) = o {
            an = build::permute(&an, &p.iter().map(|&a| a as isize).collect::<Vec<_>>()).unwrap();
        }
    }
    let (v, i) = build::top_k(&an, k).unwrap();
    let space: Vec<usize> = v.shape().dims().to_vec();
    let kind = KernelKind::TopK {
        k,
        indices: [false, true].into_iter().collect(),
    };
    let o = pb.kernel(
        kind,
        &space,
        vec![a],
        &[(data.dtype(), &space), (DType::I64, &space)],
    );
    pb.output(o[0]);
    pb.output(o[1]);
    check(pb, &[&v, &i], 0.0);
}

#[test]
fn top_k_descending_ties_low_index_nan_largest() {
    let mut f: Vec<f64> = floats(60, 6)
        .into_iter()
        .map(|x| (x * 2.0).round())
        .collect();
    f[3] = f64::NAN;
    f[4] = f64::NAN;
    f[40] = f64::NAN;
    for k in [0, 1, 3, 10] {
        top_k_case(HostData::from(f.clone()), &[6, 10], k, &[]);
        top_k_case(
            HostData::from(f.iter().map(|&x| x as f32).collect::<Vec<_>>()),
            &[6, 10],
            k,
            &[],
        );
        top_k_case(i64s(60, 7, 4), &[6, 10], k, &[]);
        top_k_case(i32s(60, 8, 4), &[2, 3, 10], k, &[]);
    }
    top_k_case(
        HostData::from(f.clone()),
        &[10, 6],
        6,
        &[VOp::Permute(vec![1, 0])],
    );
    top_k_case(bools(60, 9), &[6, 10], 4, &[]);
    // Indices only.
    let mut pb = Pb::new();
    let a = pb.param(f32s(50, 10), &[50], &[]);
    let o = pb.kernel(
        KernelKind::TopK {
            k: 5,
            indices: [true].into_iter().collect(),
        },
        &[5],
        vec![a],
        &[(DType::I64, &[5])],
    );
    pb.output(o[0]);
    let (_, i) = build::top_k(&node(f32s(50, 10), &[50]), 5).unwrap();
    check(pb, &[&i], 0.0);
}

#[test]
fn concat_along_each_axis_with_strided_parts() {
    for axis in 0..3 {
        let shapes: Vec<Vec<usize>> = [2usize, 0, 3, 1]
            .iter()
            .map(|&l| {
                let mut s = vec![4, 5, 6];
                s[axis] = l;
                s
            })
            .collect();
        let mut pb = Pb::new();
        let mut nodes = Vec::new();
        let mut inputs = Vec::new();
        for (i, s) in shapes.iter().enumerate() {
            let n: usize = s.iter().product();
            let d = f64s(n, 20 + i as u64);
            if i == 2 {
                // Stored transposed: base is the reversed shape, viewed through a permute.
                let base: Vec<usize> = s.iter().rev().copied().collect();
                inputs.push(pb.param(d.clone(), &base, &[VOp::Permute(vec![2, 1, 0])]));
                nodes.push(build::permute(&node(d, &base), &[2, 1, 0]).unwrap());
            } else {
                inputs.push(pb.param(d.clone(), s, &[]));
                nodes.push(node(d, s));
            }
        }
        let want = build::concat(&nodes, axis as isize).unwrap();
        let space: Vec<usize> = want.shape().dims().to_vec();
        let o = pb.kernel(
            KernelKind::Concat { axis },
            &space,
            inputs,
            &[(DType::F64, &space)],
        );
        pb.output(o[0]);
        check(pb, &[&want], 0.0);
    }
}

#[test]
fn concat_of_virtual_sources() {
    let mut pb = Pb::new();
    let a = pb.iota(0, DType::I64, &[3], &[]);
    let b = pb.iota(
        0,
        DType::I64,
        &[4],
        &[VOp::Slice(vec![3], vec![-1], vec![4])],
    );
    let o = pb.kernel(
        KernelKind::Concat { axis: 0 },
        &[7],
        vec![a, b],
        &[(DType::I64, &[7])],
    );
    pb.output(o[0]);
    let an = build::iota(Shape::from([3]), 0, DType::I64).unwrap();
    let bn = build::slice(
        &build::iota(Shape::from([4]), 0, DType::I64).unwrap(),
        &[build::SliceArg::range(None, None, -1)],
    )
    .unwrap();
    check(pb, &[&build::concat(&[an, bn], 0).unwrap()], 0.0);
}

fn scatter_case(
    upd: HostData,
    udims: &[usize],
    idx: HostData,
    idims: &[usize],
    axis: usize,
    out: &[usize],
) {
    let mut pb = Pb::new();
    let u = pb.param(upd.clone(), udims, &[]);
    let i = pb.param(idx.clone(), idims, &[]);
    let o = pb.kernel(
        KernelKind::ScatterAdd { axis },
        out,
        vec![u, i],
        &[(upd.dtype(), out)],
    );
    pb.output(o[0]);
    let want = build::scatter_add(
        &node(upd, udims),
        &node(idx, idims),
        axis as isize,
        Shape::from(out.to_vec()),
    )
    .unwrap();
    check(pb, &[&want], 1e-12);
}

#[test]
fn scatter_add_accumulates_repeated_indices() {
    let idx = HostData::from(vec![0i64, 2, -4, 1, 2]);
    scatter_case(f64s(5 * 3, 40), &[5, 3], idx.clone(), &[5], 0, &[4, 3]);
    scatter_case(i64s(2 * 5, 41, 100), &[2, 5], idx.clone(), &[5], 1, &[2, 4]);
    scatter_case(
        f32s(2 * 5 * 2, 42),
        &[2, 5, 2],
        HostData::from(vec![3i32, 0, 0, -1, 1]),
        &[5],
        1,
        &[2, 4, 2],
    );
    // Out of range: the same error as the reference.
    scatter_case(
        f64s(3, 43),
        &[3],
        HostData::from(vec![0i64, 4, 1]),
        &[3],
        0,
        &[4],
    );
}
