//! The `Backend` surface: zero-copy upload/download, the pool, multi-kernel plans, and plan
//! contract violations reported as errors.

mod common;

use common::*;
use kiln_compiler::{Backend, KernelKind, OutputRef};
use kiln_cpu::{cpu, CpuBackend, CpuBuffer};
use kiln_ir::{build, BinaryOp, DType, HostData, Id, ReduceOp, Scalar, Shared, UnaryOp};

fn ptr(d: &HostData) -> *const u8 {
    match d {
        HostData::F32(v) => v.as_ptr() as *const u8,
        HostData::I64(v) => v.as_ptr() as *const u8,
        HostData::Bool(v) => v.as_ptr() as *const u8,
        HostData::I32(v) => v.as_ptr() as *const u8,
        HostData::F64(v) => v.as_ptr() as *const u8,
    }
}

#[test]
fn upload_shares_and_download_moves() {
    let data = HostData::from(vec![1.0f32, 2.0, 3.0]);
    let up = cpu().upload(&data).unwrap();
    assert!(matches!(&up, CpuBuffer::Shared(d) if ptr(d) == ptr(&data)));
    // Downloading shared data of the same length hands the same storage back.
    let back = cpu().download(up, DType::F32, 3).unwrap();
    assert_eq!(ptr(&back), ptr(&data));

    // An owned buffer of exactly `len` moves into the result; a longer one is truncated ...
    let mut b = cpu().allocate(DType::I64, 5).unwrap();
    let p = match &mut b {
        CpuBuffer::Owned(v) => v.typed_mut::<i64>().as_ptr() as *const u8,
        _ => unreachable!(),
    };
    let d = cpu().download(b, DType::I64, 4).unwrap();
    assert_eq!((ptr(&d), d.len()), (p, 4));
    // ... as recycled data homed at the pool (see tests/recycle.rs).
    assert!(matches!(d, HostData::I64(Shared::Recycled(_))));
    assert!(cpu()
        .download(cpu().allocate(DType::I64, 2).unwrap(), DType::F32, 2)
        .is_err());
}

#[test]
fn released_buffers_are_reused() {
    // A size no other test allocates (the pool is process-wide).
    let len = 777_777;
    let b = CpuBackend.allocate(DType::Bool, len).unwrap();
    let p = b.as_slice();
    let addr = match p {
        kiln_cpu::TSlice::Bool(s) => s.as_ptr(),
        _ => unreachable!(),
    };
    CpuBackend.release(b);
    let again = CpuBackend.allocate(DType::Bool, len - 5).unwrap();
    match again.as_slice() {
        kiln_cpu::TSlice::Bool(s) => {
            assert_eq!(s.as_ptr(), addr);
            assert_eq!(s.len(), len - 5);
        }
        _ => unreachable!(),
    }
    CpuBackend.release(again);
    let st = CpuBackend::pool().stats();
    assert!(st.bytes <= st.limit && st.hits >= 1, "{st:?}");
}

#[test]
fn a_chain_of_kernels_with_released_intermediates() {
    // t = exp(x) (slot 0); s = sum(t, axis 1) (slot 1); y = t / s (slot 2, reads both).
    // Repeated so the intermediates come from the pool the second time.
    let dims = [50, 40];
    let xd = f32s(2000, 30);
    for _ in 0..3 {
        let mut pb = Pb::new();
        let x = pb.param(xd.clone(), &dims, &[]);
        let mut p = P::new();
        let l = p.load(0, DType::F32);
        let e = p.un(UnaryOp::Exp, l);
        let t = pb.kernel(
            KernelKind::Elementwise {
                program: p.done(&[e]),
            },
            &dims,
            vec![x],
            &[(DType::F32, &dims)],
        )[0];
        let ti = pb.slot(t, &[]);
        let kind = KernelKind::Reduce {
            program: load_only(DType::F32),
            op: ReduceOp::Sum,
            axes: [1].into_iter().collect(),
        };
        let s = pb.kernel(kind, &dims, vec![ti], &[(DType::F32, &[50, 1])])[0];
        let t2 = pb.slot(t, &[]);
        let s2 = pb.slot(s, &[VOp::Broadcast(dims.to_vec())]);
        let mut p = P::new();
        let a = p.load(0, DType::F32);
        let b = p.load(1, DType::F32);
        let q = p.bin(BinaryOp::Div, a, b);
        let y = pb.kernel(
            KernelKind::Elementwise {
                program: p.done(&[q]),
            },
            &dims,
            vec![t2, s2],
            &[(DType::F32, &dims)],
        )[0];
        pb.output(y);
        pb.output(s);
        pb.plan
            .outputs
            .push(OutputRef::Param(kiln_ir::ParamId::new(0)));

        let xn = node(xd.clone(), &dims);
        let e = build::unary(UnaryOp::Exp, &xn).unwrap();
        let s = build::reduce(ReduceOp::Sum, &e, Some(&[1]), true).unwrap();
        let y = build::binary(BinaryOp::Div, &e, &s).unwrap();
        check(pb, &[&y, &s, &xn], 1e-6);
    }
}

#[test]
fn contract_violations_are_errors_not_panics() {
    // A view reaching past its buffer.
    let mut pb = Pb::new();
    let x = pb.param(HostData::from(vec![1.0f32; 4]), &[4], &[]);
    let mut bad = x.clone();
    bad.view.base = pb.s(&[8]);
    let o = pb.kernel(
        KernelKind::Elementwise {
            program: load_only(DType::F32),
        },
        &[8],
        vec![bad],
        &[(DType::F32, &[8])],
    );
    pb.output(o[0]);
    assert!(pb.run().unwrap_err().to_string().contains("bug in kiln"));
    // A program reading a value it has not defined yet.
    let mut pb = Pb::new();
    let x = pb.param(HostData::from(vec![1.0f32; 4]), &[4], &[]);
    let mut p = P::new();
    p.insts.push(kiln_compiler::Inst {
        op: kiln_compiler::InstOp::Unary(UnaryOp::Neg, kiln_compiler::RegId::new(0)),
        dtype: DType::F32,
    });
    let o = pb.kernel(
        KernelKind::Elementwise {
            program: p.done(&[kiln_compiler::RegId::new(0)]),
        },
        &[4],
        vec![x],
        &[(DType::F32, &[4])],
    );
    pb.output(o[0]);
    assert!(pb.run().is_err());
}

#[test]
fn many_threads_run_plans_concurrently() {
    std::thread::scope(|s| {
        for t in 0..4u64 {
            s.spawn(move || {
                for i in 0..20u64 {
                    let n = 3000 + (i as usize % 5) * 100;
                    let xd = f64s(n, t * 100 + i);
                    let mut pb = Pb::new();
                    let c = pb.scalar(Scalar::Float(1.5));
                    let x = pb.param(xd.clone(), &[n], &[]);
                    let mut p = P::new();
                    let l = p.load(0, DType::F64);
                    let k = p.scalar(c, DType::F64);
                    let m = p.bin(BinaryOp::Mul, l, k);
                    let o = pb.kernel(
                        KernelKind::Elementwise {
                            program: p.done(&[m]),
                        },
                        &[n],
                        vec![x],
                        &[(DType::F64, &[n])],
                    );
                    pb.output(o[0]);
                    let want = build::binary_scalar(
                        BinaryOp::Mul,
                        &node(xd, &[n]),
                        Scalar::Float(1.5),
                        false,
                    )
                    .unwrap();
                    check(pb, &[&want], 0.0);
                }
            });
        }
    });
}
