//! Streamed outputs (non-temporal stores for large outputs that nothing of the plan reads
//! back): every case must equal the reference interpreter with the size threshold lowered
//! to zero, so that the CPU backend streams small outputs too — serial and parallel spaces,
//! several outputs of different dtypes, an output also read by a later kernel (not
//! streamed), an output computed in place over a dying intermediate — and, where the CPU
//! has AVX-512, bytes must actually have been streamed (so the test cannot pass by not
//! using the path).

use kiln::{Array, DType};
use kiln_ir::{HostData, Scalar};

fn input(n: usize, dtype: DType, salt: u64) -> Array {
    let v: Vec<f64> = (0..n as u64)
        .map(|i| ((i + salt).wrapping_mul(2_654_435_761) % 6000) as f64 / 1000.0 - 3.0)
        .collect();
    Array::from_vec(v, &[n]).expect("shape").cast(dtype)
}

fn value(h: &HostData, i: usize) -> f64 {
    match h.get(i) {
        Scalar::Float(x) => x,
        Scalar::Int(x) => x as f64,
        Scalar::Bool(b) => b as u8 as f64,
    }
}

/// Evaluates `ys` and compares every element with the reference interpreter.
fn check(ys: &[&Array], tol: f64, what: &str) {
    let want = kiln_reference::evaluate(&kiln::lower(ys)).expect("reference");
    kiln::eval(ys).expect("evaluates");
    for (k, y) in ys.iter().enumerate() {
        let got = &kiln::lower(&[y]).params[kiln_ir::ParamId::from_u32(0)]
            .to_host()
            .expect("host data");
        assert_eq!(got.len(), want[k].len(), "{what}, output {k}");
        for i in 0..got.len() {
            let (g, w) = (value(got, i), value(&want[k], i));
            assert!(
                (g - w).abs() <= tol * (1.0 + w.abs()),
                "{what}, output {k}, element {i}: {g} vs reference {w}"
            );
        }
    }
}

fn streams() -> bool {
    cfg!(target_arch = "x86_64")
        && (kiln_cpu::isa() >= kiln_cpu::Isa::Avx512
            || (kiln_cpu::isa() >= kiln_cpu::Isa::Avx2 && kiln_cpu::tuning().stream_avx2))
}

#[test]
fn streamed_outputs_equal_the_reference() {
    kiln_cpu::set_stream_min_bytes(0);
    // Serial (below the parallel threshold), parallel with an uneven last chunk, tiny.
    for n in [5usize, 1000, 3 * 65536 + 77] {
        let before = kiln_cpu::streamed_bytes();
        for dtype in [DType::F32, DType::F64] {
            let (x, y) = (input(n, dtype, 1), input(n, dtype, 2));
            let z = (&x * &y).exp() + 0.5;
            let w = (&x * 10.0).cast(DType::I32);
            let b = x.lt(&y);
            let l = (&x + 3.5).cast(DType::I64);
            check(&[&z, &w, &b, &l], 1e-6, &format!("{dtype:?} n {n}"));
        }
        if streams() {
            // At least the f32 and f64 `z` outputs went out streamed.
            assert!(
                kiln_cpu::streamed_bytes() >= before + 12 * n as u64,
                "n {n}: nothing streamed"
            );
        }
    }
}

#[test]
fn outputs_read_again_and_in_place_outputs_stay_correct() {
    kiln_cpu::set_stream_min_bytes(0);
    let n = 3 * 65536 + 5;
    let x = input(n, DType::F32, 3);
    // `e` is an output and read by the sum afterwards: not streamed, still correct.
    let e = x.exp();
    let s = e.sum(None, false);
    check(&[&e, &s], 1e-5, "output read by a later kernel");
    // `t` dies in the last kernel, whose output may take its buffer in place.
    let t = (&x * 2.0).exp().sum(Some(&[0]), true);
    let u = (&x - &t).tanh() * 3.0;
    check(&[&u], 1e-5, "in place over a dying intermediate");
}
