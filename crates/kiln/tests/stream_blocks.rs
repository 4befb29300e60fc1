//! Short blocks over long streams: an elementwise kernel with two or more contiguous sources
//! of at least 32 MiB runs in blocks of `Tuning::stream_block` positions (shorter than the
//! interpreter's 1,024) with prefetch hints, whatever the CPU's vendor once the environment
//! asks for them. Its results must equal the reference interpreter's, with a length that
//! leaves a partial last block on every thread, for f32 and f64 sources.
//!
//! One test in this file: it sets the environment before anything reads the tuning.

use kiln::{Array, DType};
use kiln_ir::Scalar;

fn float(s: Scalar) -> f64 {
    match s {
        Scalar::Float(x) => x,
        other => panic!("a float kernel produced {other:?}"),
    }
}

#[test]
fn short_blocks_over_long_streams_equal_the_reference() {
    // The only test here, so no other thread reads the environment or the tuning yet.
    std::env::set_var("KILN_STREAM_BLOCK", "256");
    std::env::set_var("KILN_PREFETCH", "l2");
    let tuning = kiln_cpu::tuning();
    assert_eq!(
        (tuning.stream_block, tuning.prefetch),
        (256, kiln_cpu::Prefetch::L2),
        "the environment did not reach the tuning"
    );
    // 9 Mi + 77 positions: 36 MiB per f32 source, so all four are hinted streams.
    let n = (9 << 20) + 77;
    for dtype in [DType::F32, DType::F64] {
        let input = |seed: u64| Array::uniform(&[n], -2.0, 2.0, seed, dtype).expect("float dtype");
        let (a, b, c, d) = (input(1), input(2), input(3), input(4));
        for x in [&a, &b, &c, &d] {
            x.eval().expect("evaluates");
        }
        let y = (&(&(&a * &b) + &c) * &d) - &a;
        let want = kiln_reference::evaluate(&kiln::lower(&[&y])).expect("reference");
        y.eval().expect("evaluates");
        // An evaluated array lowers to its buffer.
        let got = &kiln::lower(&[&y]).params[kiln_ir::ParamId::from_u32(0)]
            .to_host()
            .expect("host data");
        assert_eq!((got.len(), want[0].len()), (n, n), "{dtype:?}");
        for i in 0..n {
            let (g, w) = (float(got.get(i)), float(want[0].get(i)));
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "{dtype:?}: element {i} is {g}, the reference says {w}"
            );
        }
    }
}
