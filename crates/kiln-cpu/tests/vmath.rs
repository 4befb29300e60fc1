//! The vectorised math of `kiln_cpu::vmath` against an `f64` reference (`std`'s `f64`
//! functions rounded to `f32`), over a sweep of the whole `f32` range (every 509th bit
//! pattern, both signs: normals, subnormals, ±0, ±inf, NaN) plus special values, at every
//! ISA level this machine can run. The bounds are those documented in `vmath`'s module docs.
//!
//! One test function: it switches the process-wide ISA level, so nothing else runs in this
//! binary.

use kiln_cpu::{detected_isa, set_isa, vmath, Isa};
use kiln_ir::UnaryOp;

/// The ISA level is process-wide: tests that set it run one at a time, so each runs its
/// kernels at the level it asked for.
static LEVEL_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn lock_level() -> std::sync::MutexGuard<'static, ()> {
    LEVEL_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Error of `got` in units of the spacing of `f32` at `want` (subnormal spacing below the
/// normal range); 0 for equal values (NaN equal to NaN, infinities equal only to themselves).
fn ulps(got: f32, want: f64) -> f64 {
    let w = want as f32;
    if w.is_nan() || got.is_nan() {
        return if w.is_nan() && got.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    if w.is_infinite() || got.is_infinite() {
        // An overflow threshold: accept the finite neighbour of inf within 1 ulp.
        if w == got {
            return 0.0;
        }
        let fin = if w.is_infinite() { got } else { w };
        return if (fin.abs() == f32::MAX) && w.signum() == got.signum() {
            1.0
        } else {
            f64::INFINITY
        };
    }
    let a = want.abs().max(f32::MIN_POSITIVE as f64);
    let spacing = 2f64.powi(a.log2().floor() as i32 - 23);
    (got as f64 - want).abs() / spacing
}

fn inputs() -> Vec<f32> {
    // Every 509th bit pattern; every 5003rd under qemu-user (`KILN_EMULATED`, `.ci/run`'s
    // aarch64 step), where the full sweep takes minutes.
    let stride: u32 = if std::env::var_os("KILN_EMULATED").is_some() {
        5003
    } else {
        509
    };
    let mut v: Vec<f32> = (0..=u32::MAX / stride)
        .map(|i| f32::from_bits(i.wrapping_mul(stride)))
        .collect();
    v.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        1e-45,
        -1e-45,
        f32::MAX,
        f32::MIN,
        88.72,
        88.73,
        -87.3,
        -103.9,
        -104.0,
        0.625,
        -0.625,
        std::f32::consts::PI,
        -std::f32::consts::FRAC_PI_2,
        1.0,
        -1.0,
        131_071.9,
        131_072.0,
    ]);
    v
}

struct Case {
    op: UnaryOp,
    reference: fn(f64) -> f64,
    max_ulps: f64,
    /// Inputs the function is defined on (others are compared as NaN/inf only).
    name: &'static str,
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn check(level: Isa, xs: &[f32]) {
    let cases = [
        Case {
            op: UnaryOp::Exp,
            reference: f64::exp,
            max_ulps: 2.0,
            name: "exp",
        },
        Case {
            op: UnaryOp::Log,
            reference: f64::ln,
            max_ulps: 2.0,
            name: "log",
        },
        Case {
            op: UnaryOp::Tanh,
            reference: f64::tanh,
            max_ulps: 3.0,
            name: "tanh",
        },
        Case {
            op: UnaryOp::Sigmoid,
            reference: sigmoid,
            max_ulps: 3.0,
            name: "sigmoid",
        },
        Case {
            op: UnaryOp::Sin,
            reference: f64::sin,
            max_ulps: 1.0,
            name: "sin",
        },
        Case {
            op: UnaryOp::Cos,
            reference: f64::cos,
            max_ulps: 1.0,
            name: "cos",
        },
    ];
    let mut out = vec![0.0f32; xs.len()];
    for c in &cases {
        assert!(
            vmath::unary_f32(c.op, xs, &mut out),
            "{} has a lane kernel",
            c.name
        );
        let mut worst = (0.0f64, 0.0f32, 0.0f32, 0.0f64);
        for (&x, &g) in xs.iter().zip(&out) {
            let want = (c.reference)(x as f64);
            let e = ulps(g, want);
            if e > worst.0 {
                worst = (e, x, g, want);
            }
            // Sign of zero results must match (tanh(-0) = -0, sin(-0) = -0, ...).
            if want == 0.0 && (want as f32) == 0.0 && g == 0.0 {
                assert_eq!(
                    g.is_sign_negative(),
                    (want as f32).is_sign_negative(),
                    "{} at {level:?}: sign of zero for {x:e}",
                    c.name
                );
            }
        }
        let (e, x, g, w) = worst;
        assert!(
            e <= c.max_ulps,
            "{} at {level:?}: {e:.2} ulp at x = {x:e} ({:#x}): got {g:e}, want {w:e}",
            c.name,
            x.to_bits()
        );
        eprintln!("{} at {level:?}: max {e:.3} ulp (at x = {x:e})", c.name);
    }
}

#[test]
fn vectorised_math_meets_its_error_bounds_at_every_isa_level() {
    let _level = lock_level();
    let xs = inputs();
    for level in Isa::ALL {
        if level > detected_isa() {
            continue;
        }
        // `scalar` runs the lane kernels at the baseline too (the kernels dispatch on
        // the level; the caller decides whether to use them).
        assert_eq!(set_isa(level), level);
        check(level, &xs);
    }
}

#[test]
fn branch_free_select_is_exact_at_every_isa_level() {
    let _level = lock_level();
    // Every bit pattern kept (NaN payloads, -0.0, subnormals, extremes), lengths around the
    // vector widths (tails), and the shortest of the four slices bounding the work.
    let f32s = [
        0.0f32,
        -0.0,
        1.5,
        f32::from_bits(0x7fc0_1234),
        f32::from_bits(0xffa0_0001),
        f32::MIN_POSITIVE / 4.0,
        f32::INFINITY,
        f32::MIN,
    ];
    let f64s = [
        0.0f64,
        -0.0,
        -2.5,
        f64::from_bits(0x7ff8_0000_dead_beef),
        f64::MIN_POSITIVE / 8.0,
        f64::NEG_INFINITY,
    ];
    for level in Isa::ALL {
        if level > detected_isa() {
            continue;
        }
        assert_eq!(set_isa(level), level);
        for n in [0usize, 1, 7, 15, 16, 17, 33, 64, 100] {
            let c: Vec<bool> = (0..n).map(|i| (i * 7 + n) % 3 == 0).collect();
            let pick = |i: usize, c: bool| if c { i } else { i + 3 };
            let a32: Vec<f32> = (0..n).map(|i| f32s[i % f32s.len()]).collect();
            let b32: Vec<f32> = (0..n).map(|i| f32s[(i + 3) % f32s.len()]).collect();
            let mut o = vec![9.0f32; n + 2];
            vmath::select_f32(&c, &a32, &b32, &mut o);
            for i in 0..n {
                let want = f32s[pick(i, c[i]) % f32s.len()].to_bits();
                assert_eq!(o[i].to_bits(), want, "f32 at {level:?}, n {n}, i {i}");
            }
            assert_eq!(
                &o[n..],
                &[9.0, 9.0],
                "f32 at {level:?}: wrote past the inputs"
            );
            let a64: Vec<f64> = (0..n).map(|i| f64s[i % f64s.len()]).collect();
            let b64: Vec<f64> = (0..n).map(|i| f64s[(i + 3) % f64s.len()]).collect();
            let mut o = vec![0.0f64; n];
            vmath::select_f64(&c, &a64, &b64, &mut o);
            for i in 0..n {
                let want = f64s[pick(i, c[i]) % f64s.len()].to_bits();
                assert_eq!(o[i].to_bits(), want, "f64 at {level:?}, n {n}, i {i}");
            }
            let ai: Vec<i32> = (0..n as i32).map(|i| i32::MIN + i).collect();
            let bi: Vec<i32> = (0..n as i32).map(|i| -i).collect();
            let mut o = vec![0i32; n];
            vmath::select_i32(&c, &ai, &bi, &mut o);
            let want: Vec<i32> = (0..n).map(|i| if c[i] { ai[i] } else { bi[i] }).collect();
            assert_eq!(o, want, "i32 at {level:?}");
            let al: Vec<i64> = (0..n as i64).map(|i| i64::MAX - i).collect();
            let bl: Vec<i64> = (0..n as i64).map(|i| i << 40).collect();
            let mut o = vec![0i64; n];
            vmath::select_i64(&c, &al, &bl, &mut o);
            let want: Vec<i64> = (0..n).map(|i| if c[i] { al[i] } else { bl[i] }).collect();
            assert_eq!(o, want, "i64 at {level:?}");
        }
    }
}

/// A left fold with the reference evaluator's rule: a strictly better value or any NaN
/// replaces the running extremum.
fn fold_extremum(xs: &[f64], max: bool) -> f64 {
    let mut m = if max {
        f64::NEG_INFINITY
    } else {
        f64::INFINITY
    };
    for &x in xs {
        if (max && x > m) || (!max && x < m) || x.is_nan() {
            m = x;
        }
    }
    m
}

#[test]
fn vectorised_extrema_equal_a_left_fold_at_every_isa_level() {
    let _level = lock_level();
    // Lengths around the lane counts (8 to 64 per level and type: tails), the extremum in
    // every lane position, ±inf, subnormals and NaN payloads (the last NaN is returned, as
    // the fold would), alone in the first lane set or also in the tail.
    let specials = [f64::INFINITY, f64::NEG_INFINITY, 1e-310, -3.5];
    for level in Isa::ALL {
        if level > detected_isa() {
            continue;
        }
        assert_eq!(set_isa(level), level);
        for n in [
            0usize, 1, 2, 3, 7, 8, 9, 10, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129,
            1000,
        ] {
            for case in 0..7usize {
                let mut xs: Vec<f64> = (0..n)
                    .map(|i| ((i * 7919 + case * 31) % 1009) as f64 / 17.0 - 30.0)
                    .collect();
                if n > 0 && case >= 1 && case <= specials.len() {
                    xs[(case * 13) % n] = specials[case - 1];
                }
                if n > 2 && case == 5 {
                    xs[n / 3] = f64::from_bits(0x7ff8_0000_0000_0001);
                    xs[n - 2] = f64::from_bits(0x7ff8_0000_0000_0002);
                }
                if n > 0 && case == 6 {
                    // One NaN, in the first lane set (not in the tail).
                    xs[0] = f64::from_bits(0x7ff8_0000_0000_0003);
                }
                for max in [true, false] {
                    let want = fold_extremum(&xs, max);
                    let got = vmath::extremum_f64(&xs, max);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "f64 {level:?} n {n} case {case} max {max}"
                    );
                    let x32: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
                    let w32: Vec<f64> = x32.iter().map(|&x| x as f64).collect();
                    let want = fold_extremum(&w32, max) as f32;
                    let got = vmath::extremum_f32(&x32, max);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "f32 {level:?} n {n} case {case} max {max}"
                    );
                }
            }
        }
    }
}

#[test]
fn vectorised_comparisons_and_compare_selects_follow_ieee_at_every_isa_level() {
    let _level = lock_level();
    use kiln_ir::BinaryOp::{self, *};
    // NaN unordered, -0.0 == 0.0, infinities ordered; lengths around the vector widths.
    let fs = [
        0.0f64,
        -0.0,
        1.5,
        -1.5,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e-310,
    ];
    let want = |op: BinaryOp, a: f64, b: f64| match op {
        Eq => a == b,
        Ne => a != b,
        Lt => a < b,
        Le => a <= b,
        Gt => a > b,
        _ => a >= b,
    };
    for level in Isa::ALL {
        if level > detected_isa() {
            continue;
        }
        assert_eq!(set_isa(level), level);
        for n in [0usize, 1, 15, 16, 17, 64, 67] {
            let x: Vec<f64> = (0..n).map(|i| fs[i % fs.len()]).collect();
            let y: Vec<f64> = (0..n)
                .map(|i| fs[(i / fs.len() + i * 3) % fs.len()])
                .collect();
            let xi: Vec<i64> = (0..n as i64)
                .map(|i| {
                    if i % 2 == 1 {
                        i64::MIN + (i * 7) % 5
                    } else {
                        (i * 7) % 5 - 2
                    }
                })
                .collect();
            let yi: Vec<i64> = (0..n as i64).map(|i| (i * 3) % 5 - 2).collect();
            let (x32, y32): (Vec<f32>, Vec<f32>) = (
                x.iter().map(|&v| v as f32).collect(),
                y.iter().map(|&v| v as f32).collect(),
            );
            let (x3, y3): (Vec<i32>, Vec<i32>) = (
                xi.iter().map(|&v| (v % 1000) as i32).collect(),
                yi.iter().map(|&v| v as i32).collect(),
            );
            // The expected mask from the operands widened to f64 (exact for these values).
            let expect =
                |op: BinaryOp,
                 a: &mut dyn Iterator<Item = f64>,
                 b: &mut dyn Iterator<Item = f64>|
                 -> Vec<bool> { a.zip(b).map(|(a, b)| want(op, a, b)).collect() };
            // Branches for the fused compare-select: distinct bit patterns (signed zeros,
            // a NaN payload) that must come through unchanged.
            let a: Vec<f64> = (0..n)
                .map(|i| [-0.0, f64::from_bits(0x7ff8_0000_0000_0abc), i as f64][i % 3])
                .collect();
            let b: Vec<f64> = (0..n)
                .map(|i| [0.0, -(i as f64) - 1.0, f64::NEG_INFINITY][i % 3])
                .collect();
            let (a32, b32): (Vec<f32>, Vec<f32>) = (
                a.iter().map(|&v| v as f32).collect(),
                b.iter().map(|&v| v as f32).collect(),
            );
            for op in [Eq, Ne, Lt, Le, Gt, Ge] {
                let mut o = vec![false; n];
                assert!(vmath::compare_f64(op, &x, &y, &mut o));
                let e = expect(op, &mut x.iter().copied(), &mut y.iter().copied());
                assert_eq!(o, e, "f64 {op:?} at {level:?}, n {n}");
                let mut s = vec![7.0f64; n];
                assert!(vmath::compare_select_f64(op, &x, &y, &a, &b, &mut s));
                for i in 0..n {
                    let w = if e[i] { a[i] } else { b[i] };
                    assert_eq!(
                        s[i].to_bits(),
                        w.to_bits(),
                        "f64 select {op:?} at {level:?}, n {n}, i {i}"
                    );
                }
                assert!(vmath::compare_f32(op, &x32, &y32, &mut o));
                let e = expect(
                    op,
                    &mut x32.iter().map(|&v| v as f64),
                    &mut y32.iter().map(|&v| v as f64),
                );
                assert_eq!(o, e, "f32 {op:?} at {level:?}, n {n}");
                let mut s = vec![7.0f32; n];
                assert!(vmath::compare_select_f32(
                    op, &x32, &y32, &a32, &b32, &mut s
                ));
                for i in 0..n {
                    let w = if e[i] { a32[i] } else { b32[i] };
                    assert_eq!(
                        s[i].to_bits(),
                        w.to_bits(),
                        "f32 select {op:?} at {level:?}, n {n}, i {i}"
                    );
                }
                assert!(vmath::compare_i64(op, &xi, &yi, &mut o));
                let e = expect(
                    op,
                    &mut xi.iter().map(|&v| v as f64),
                    &mut yi.iter().map(|&v| v as f64),
                );
                assert_eq!(o, e, "i64 {op:?} at {level:?}, n {n}");
                assert!(vmath::compare_i32(op, &x3, &y3, &mut o));
                let e = expect(
                    op,
                    &mut x3.iter().map(|&v| v as f64),
                    &mut y3.iter().map(|&v| v as f64),
                );
                assert_eq!(o, e, "i32 {op:?} at {level:?}, n {n}");
            }
            let mut o = vec![true; n];
            assert!(
                !vmath::compare_f32(Add, &[], &[], &mut o),
                "Add is not a comparison"
            );
            let mut s = vec![1.0f32; n];
            assert!(!vmath::compare_select_f32(
                Add, &x32, &y32, &a32, &b32, &mut s
            ));
            assert!(
                s.iter().all(|&v| v == 1.0),
                "nothing written for a non-comparison"
            );
        }
    }
}

#[test]
fn fused_arithmetic_pairs_equal_two_separate_ops_at_every_isa_level() {
    let _level = lock_level();
    use kiln_ir::BinaryOp::{self, *};
    fn op<T>(o: BinaryOp, a: T, b: T) -> T
    where
        T: std::ops::Add<Output = T>
            + std::ops::Sub<Output = T>
            + std::ops::Mul<Output = T>
            + std::ops::Div<Output = T>,
    {
        match o {
            Add => a + b,
            Sub => a - b,
            Mul => a * b,
            _ => a / b,
        }
    }
    let specials = [
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        0.0,
        -0.0,
        1e-310,
        -3e-39,
        1e30,
        -1e300,
    ];
    let col = |seed: usize, n: usize| -> Vec<f64> {
        (0..n)
            .map(|i| {
                if (i + seed).is_multiple_of(5) {
                    specials[(i / 5 + seed) % specials.len()]
                } else {
                    ((i * 7919 + seed * 104_729) % 2003) as f64 / 97.0 - 10.0
                }
            })
            .collect()
    };
    let ops = [Add, Sub, Mul, Div];
    for level in Isa::ALL {
        if level > detected_isa() {
            continue;
        }
        assert_eq!(set_isa(level), level);
        for n in [0usize, 1, 7, 16, 33, 100, 1031] {
            let (x, y, z) = (col(1, n), col(2, n), col(3, n));
            let (x32, y32, z32): (Vec<f32>, Vec<f32>, Vec<f32>) = (
                x.iter().map(|&v| v as f32).collect(),
                y.iter().map(|&v| v as f32).collect(),
                z.iter().map(|&v| v as f32).collect(),
            );
            for first in ops {
                for second in ops {
                    for left in [true, false] {
                        let mut o = vec![0.0f64; n];
                        assert!(vmath::binary2_f64(first, second, left, &x, &y, &z, &mut o));
                        let mut o32 = vec![0.0f32; n];
                        assert!(vmath::binary2_f32(
                            first, second, left, &x32, &y32, &z32, &mut o32
                        ));
                        for i in 0..n {
                            let t = op(first, x[i], y[i]);
                            let w = if left {
                                op(second, t, z[i])
                            } else {
                                op(second, z[i], t)
                            };
                            let t32 = op(first, x32[i], y32[i]);
                            let w32 = if left {
                                op(second, t32, z32[i])
                            } else {
                                op(second, z32[i], t32)
                            };
                            let what = format!("{level:?} {first:?} {second:?} {left} n {n} i {i}");
                            assert!(
                                o[i].to_bits() == w.to_bits() || (o[i].is_nan() && w.is_nan()),
                                "f64 {what}: {} vs {w}",
                                o[i]
                            );
                            assert!(
                                o32[i].to_bits() == w32.to_bits()
                                    || (o32[i].is_nan() && w32.is_nan()),
                                "f32 {what}: {} vs {w32}",
                                o32[i]
                            );
                        }
                    }
                }
            }
        }
        // Not a fusable pair.
        assert!(!vmath::binary2_f32(
            Maximum,
            Add,
            true,
            &[],
            &[],
            &[],
            &mut []
        ));
    }
}

#[test]
fn widening_accumulation_is_exact_at_every_isa_level() {
    let _level = lock_level();
    // Each f32 widens exactly to f64 and each sum is one f64 addition: the vector loop must
    // give the scalar loop's bits, for lengths around the lane counts, with the shorter of
    // the two slices deciding how many are added.
    for level in Isa::ALL {
        if level > detected_isa() {
            continue;
        }
        assert_eq!(set_isa(level), level);
        for n in [0usize, 1, 7, 8, 15, 16, 17, 33, 100, 1000] {
            let mut xs: Vec<f32> = (0..n)
                .map(|i| ((i * 7919) % 1009) as f32 / 7.0 - 70.0 + 1e-3 * i as f32)
                .collect();
            for (i, x) in [f32::INFINITY, 1e-40, f32::MIN_POSITIVE]
                .into_iter()
                .enumerate()
            {
                if let Some(slot) = xs.get_mut(i * 5) {
                    *slot = x;
                }
            }
            let start: Vec<f64> = (0..n + 2).map(|i| (i as f64).sqrt() * 1e7).collect();
            let mut want = start.clone();
            for (a, &x) in want.iter_mut().zip(&xs) {
                *a += x as f64;
            }
            let mut got = start.clone();
            vmath::accumulate_f32(&mut got, &xs);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{level:?} n {n}");
        }
    }
}

/// The slice kernels of exp, sigmoid and tanh take a faster scaling by 2ⁿ where results are
/// normal and patch the other elements: they must equal, bit for bit, the scalar formulas
/// built on `exp_f32` (tanh: `1 − 2/(e^{2|x|}+1)` above 0.625), over a sweep of bit patterns
/// and the edges of the fast range (±86, ±88, ±10, 0.625), at every ISA level.
#[test]
fn exp_sigmoid_tanh_slices_equal_their_exp_formulas_at_every_isa_level() {
    let _level = lock_level();
    use kiln_ir::UnaryOp::{Exp, Sigmoid, Tanh};
    let mut xs: Vec<f32> = (0..u32::MAX / 4099)
        .map(|i| f32::from_bits(i * 4099))
        .collect();
    for edge in [86.0f32, 88.0, 10.0, 20.0, 0.625, 87.5, 104.0, 89.0] {
        let mut v = edge;
        for _ in 0..40 {
            xs.extend([v, -v]);
            v = f32::from_bits(v.to_bits() + 1);
        }
        let mut v = edge;
        for _ in 0..40 {
            v = f32::from_bits(v.to_bits() - 1);
            xs.extend([v, -v]);
        }
    }
    xs.extend([
        0.0,
        -0.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e-45,
        -1e-45,
    ]);
    let same = |g: f32, w: f32| g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
    for level in Isa::ALL {
        if level > detected_isa() {
            continue;
        }
        assert_eq!(set_isa(level), level);
        let mut o = vec![0.0f32; xs.len()];
        for op in [Exp, Sigmoid, Tanh] {
            assert!(vmath::unary_f32(op, &xs, &mut o));
            for (&x, &g) in xs.iter().zip(&o) {
                // The formulas at this level's FMA setting (the x86-64 baseline has none;
                // aarch64's NEON baseline has it).
                let w = if level >= Isa::Avx2 || kiln_cpu::BASE_FMA {
                    formula::<true>(op, x)
                } else {
                    formula::<false>(op, x)
                };
                assert!(
                    same(g, w),
                    "{op:?}({x:e}) at {level:?}: {g:e}, formula {w:e}"
                );
            }
        }
    }

    fn formula<const F: bool>(op: kiln_ir::UnaryOp, x: f32) -> f32 {
        let exp = vmath::exp_f32::<F>;
        match op {
            Exp => exp(x),
            Sigmoid => {
                let e = exp(-x.abs());
                let s = 1.0 / (1.0 + e);
                if x >= 0.0 {
                    s
                } else {
                    e * s
                }
            }
            _ => {
                if x.is_nan() || x.abs() < 0.625 {
                    vmath::tanh_f32::<F>(x)
                } else {
                    (1.0 - 2.0 / (exp(x.abs() * 2.0) + 1.0)).copysign(x)
                }
            }
        }
    }
}

#[test]
fn sum_f32_follows_its_documented_association_at_every_isa_level() {
    let _level = lock_level();
    // sum_f32 keeps 32 f64 lane partials (element i goes to lane i % 32 while whole sets of 32
    // remain), combines them pairwise (lane k += lane k + w for w = 16, 8, 4, 2, 1), then adds
    // the remainder in order. A scalar model of exactly that must agree bit for bit at every
    // ISA level, and the result must be within 1e-12 relative of a plain f64 sum.
    fn model(xs: &[f32]) -> f64 {
        let whole = xs.len() / 32 * 32;
        let mut p = [0.0f64; 32];
        for (i, &x) in xs[..whole].iter().enumerate() {
            p[i % 32] += x as f64;
        }
        let mut w = 32;
        while w > 1 {
            w /= 2;
            for k in 0..w {
                p[k] += p[k + w];
            }
        }
        xs[whole..].iter().fold(p[0], |s, &x| s + x as f64)
    }
    for level in Isa::ALL {
        if level > detected_isa() {
            continue;
        }
        assert_eq!(set_isa(level), level);
        for n in [0usize, 1, 15, 31, 32, 33, 63, 64, 65, 100, 1024, 4103] {
            // Exponents spread over 2^-40..2^40, so f64 additions round and the order shows.
            let xs: Vec<f32> = (0..n)
                .map(|i| {
                    let m = ((i * 7919) % 1009) as f32 + 0.5;
                    m * 2f32.powi((i * 31 % 81) as i32 - 40)
                })
                .collect();
            let got = vmath::sum_f32(&xs);
            let want = model(&xs);
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{level:?} n {n}: {got} vs {want}"
            );
            let plain: f64 = xs.iter().map(|&x| x as f64).sum();
            assert!(
                (got - plain).abs() <= 1e-12 * plain.abs(),
                "{level:?} n {n}: {got} vs {plain}"
            );
        }
    }
}

#[test]
fn fused_dot_equals_the_sum_of_rounded_products_at_every_isa_level() {
    let _level = lock_level();
    // dot_f32(x, y) must give sum_f32 of the f32 products bit for bit (same lanes, same
    // association), with infinities, NaN, products that overflow or underflow, and lengths
    // around the lane counts; the shorter slice decides the length.
    for level in Isa::ALL {
        if level > detected_isa() {
            continue;
        }
        assert_eq!(set_isa(level), level);
        for n in [
            0usize, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1024, 1037,
        ] {
            for case in 0..4usize {
                let mut xs: Vec<f32> = (0..n)
                    .map(|i| ((i * 7919 + case * 13) % 1009) as f32 / 50.0 - 10.0)
                    .collect();
                let mut ys: Vec<f32> = (0..n)
                    .map(|i| ((i * 104_729 + case) % 997) as f32 / 30.0 - 16.0)
                    .collect();
                if n > 20 {
                    match case {
                        1 => {
                            xs[3] = 3e38;
                            ys[3] = 10.0; // overflows to inf
                            xs[n - 1] = 1e-30;
                            ys[n - 1] = 1e-20; // underflows to a subnormal or 0
                        }
                        2 => {
                            xs[7] = f32::INFINITY;
                            ys[9] = f32::NEG_INFINITY;
                        }
                        3 => xs[n / 2] = f32::NAN,
                        _ => {}
                    }
                }
                let products: Vec<f32> = xs.iter().zip(&ys).map(|(x, y)| x * y).collect();
                let want = vmath::sum_f32(&products);
                let got = vmath::dot_f32(&xs, &ys);
                assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "{level:?} n {n} case {case}: {got} vs {want}"
                );
                let longer: Vec<f32> = ys.iter().copied().chain([5.0, 6.0]).collect();
                let got = vmath::dot_f32(&xs, &longer);
                assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()));
            }
        }
    }
}

/// `x / s` with `s` uniform takes a reciprocal and corrects each quotient (Markstein) where
/// the operands are in range: every quotient must still be the correctly rounded division,
/// for dividends over the whole exponent range (zeros, subnormals, the range edges, NaN, ±∞)
/// and divisors with awkward significands, inside and just outside the divisor range.
#[test]
fn uniform_division_is_correctly_rounded_at_every_isa_level() {
    let _level = lock_level();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut x32: Vec<f32> = (0..20_000).map(|_| f32::from_bits(next() as u32)).collect();
    let mut x64: Vec<f64> = (0..20_000).map(|_| f64::from_bits(next())).collect();
    // Dividends near the range edges (2^±100, 2^±900) and inside it, both signs.
    for k in 0..4000 {
        let e = [-101, -100, -99, 99, 100, 101, 0, -1][k % 8];
        let m = 1.0 + (next() % 1_000_000) as f64 / 1e6;
        let sign = if k % 3 == 0 { -1.0 } else { 1.0 };
        x32.push((sign * m * 2f64.powi(e)) as f32);
        let e = [-901, -900, -899, 899, 900, 901, 3, -7][k % 8];
        x64.push(sign * m * 2f64.powi(e));
    }
    x32.extend([
        0.0,
        -0.0,
        f32::NAN,
        f32::INFINITY,
        -f32::INFINITY,
        1e-45,
        f32::MAX,
    ]);
    x64.extend([
        0.0,
        -0.0,
        f64::NAN,
        f64::INFINITY,
        -f64::INFINITY,
        5e-324,
        f64::MAX,
    ]);
    let divisors = [
        1.0f64,
        3.0,
        7.0,
        0.1,
        -5.5,
        1023.7,
        1.0 - f64::EPSILON,
        f32::from_bits(0x3fff_ffff) as f64,
        f32::from_bits(0x3f80_0001) as f64,
        2f64.powi(24),
        2f64.powi(-24),
        2f64.powi(24) * 1.5,
        2f64.powi(-25),
        2f64.powi(53),
        2f64.powi(-53),
        2f64.powi(54),
        12_345.678,
    ];
    for level in Isa::ALL {
        if level > detected_isa() {
            continue;
        }
        assert_eq!(set_isa(level), level);
        for &s in &divisors {
            let mut o = vec![0.0f32; x32.len()];
            assert!(vmath::binary_uniform_f32(
                kiln_ir::BinaryOp::Div,
                false,
                &x32,
                s as f32,
                &mut o
            ));
            for (a, g) in x32.iter().zip(&o) {
                let w = a / s as f32;
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "f32 {a:e} / {s:e} at {level:?}: {g:e}, division gives {w:e}"
                );
            }
            let mut o = vec![0.0f64; x64.len()];
            assert!(vmath::binary_uniform_f64(
                kiln_ir::BinaryOp::Div,
                false,
                &x64,
                s,
                &mut o
            ));
            for (a, g) in x64.iter().zip(&o) {
                let w = a / s;
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "f64 {a:e} / {s:e} at {level:?}: {g:e}, division gives {w:e}"
                );
            }
        }
    }
}

/// `binary_uniform_*` (an operand that is one value over the run) rounds every element as
/// the plain IEEE operation does, on either side, for special values and lengths around the
/// vector widths, and writes nothing past its inputs.
#[test]
fn uniform_operand_ops_are_ieee_at_every_isa_level() {
    let _level = lock_level();
    use kiln_ir::BinaryOp::{self, *};
    let vals = [
        0.0f64,
        -0.0,
        1.5,
        -3.25,
        1e-310,
        f64::MAX,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        0.1,
    ];
    let ieee = |op: BinaryOp, a: f64, b: f64| match op {
        Add => a + b,
        Sub => a - b,
        Mul => a * b,
        _ => a / b,
    };
    let same = |g: f64, w: f64| g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
    for level in Isa::ALL {
        if level > detected_isa() {
            continue;
        }
        assert_eq!(set_isa(level), level);
        for op in [Add, Sub, Mul, Div] {
            for left in [false, true] {
                for &s in &vals {
                    for n in [0usize, 1, 7, 16, 17, 100] {
                        let x: Vec<f64> = (0..n).map(|i| vals[(i * 3 + n) % vals.len()]).collect();
                        let mut o = vec![7.0f64; n + 1];
                        assert!(vmath::binary_uniform_f64(op, left, &x, s, &mut o[..n]));
                        let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
                        let mut o32 = vec![7.0f32; n + 1];
                        assert!(vmath::binary_uniform_f32(
                            op,
                            left,
                            &x32,
                            s as f32,
                            &mut o32[..n]
                        ));
                        for i in 0..n {
                            let (a, b) = if left { (s, x[i]) } else { (x[i], s) };
                            let w = ieee(op, a, b);
                            assert!(
                                same(o[i], w),
                                "f64 {op:?} left {left} at {level:?}: {a} {b}"
                            );
                            let (a, b) = if left {
                                (s as f32, x32[i])
                            } else {
                                (x32[i], s as f32)
                            };
                            let w = ieee(op, a as f64, b as f64) as f32;
                            assert!(
                                same(o32[i] as f64, w as f64),
                                "f32 {op:?} left {left} at {level:?}: {a} {b}"
                            );
                        }
                        assert_eq!(o[n], 7.0);
                        assert_eq!(o32[n], 7.0);
                        // In place: the same bits.
                        let mut p = x.clone();
                        assert!(vmath::binary_uniform_in_place_f64(op, left, &mut p, s));
                        let mut p32 = x32.clone();
                        assert!(vmath::binary_uniform_in_place_f32(
                            op, left, &mut p32, s as f32
                        ));
                        for i in 0..n {
                            assert!(same(p[i], o[i]), "f64 in place {op:?} {left} {level:?}");
                            assert!(
                                same(p32[i] as f64, o32[i] as f64),
                                "f32 in place {op:?} {left} {level:?} at {i}: {} vs {}",
                                p32[i],
                                o32[i]
                            );
                        }
                    }
                }
            }
        }
        assert!(!vmath::binary_uniform_f32(
            Maximum,
            false,
            &[1.0],
            2.0,
            &mut [0.0]
        ));
        assert!(!vmath::binary_uniform_in_place_f32(
            Maximum,
            false,
            &mut [1.0],
            2.0
        ));
    }
}

/// The in-place division by a uniform value (its fast form: a reciprocal and a correction,
/// one 256-byte chunk at a time, the chunks holding elements outside its range divided) is
/// the IEEE quotient for dividends spanning every f32 exponent (and the range edges of the
/// fast form), mixed within each chunk, over lengths around the chunk, at every ISA level.
#[test]
fn in_place_uniform_division_is_ieee_for_every_exponent() {
    let _level = lock_level();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let x: Vec<f32> = (0..4099)
        .map(|i| match i % 97 {
            0 => f32::from_bits(1), // the smallest subnormal
            1 => 2f32.powi(100),
            2 => 2f32.powi(-100),
            3 => f32::MAX,
            _ => f32::from_bits((next() as u32) & 0x7fff_ffff | ((i as u32 & 1) << 31)),
        })
        .filter(|v| !v.is_nan())
        .collect();
    let divisors = [
        3.0f32,
        -7.25,
        1e-7,
        2f32.powi(24),
        2f32.powi(-24),
        0.1,
        6.0e5,
    ];
    for level in Isa::ALL {
        if level > detected_isa() {
            continue;
        }
        assert_eq!(set_isa(level), level);
        for &s in &divisors {
            for n in [x.len(), 15, 16, 33, 63, 64, 65, 129] {
                let mut o = x[..n].to_vec();
                assert!(vmath::binary_uniform_in_place_f32(
                    kiln_ir::BinaryOp::Div,
                    false,
                    &mut o,
                    s
                ));
                for i in 0..n {
                    let w = x[i] / s;
                    assert!(
                        o[i].to_bits() == w.to_bits() || (o[i].is_nan() && w.is_nan()),
                        "{level:?}: {} / {s} = {} (want {w})",
                        x[i],
                        o[i]
                    );
                }
            }
        }
    }
}

/// `unary_of_uniform_f32` (`exp(x − s)` and the like in one pass) equals the two passes it
/// replaces, `binary_uniform_f32` then `unary_f32`, bit for bit: special values, every
/// 2¹⁸⁺¹th bit pattern and values near exp's and sigmoid's range edges, both operand sides,
/// lengths around the vector widths, nothing written past the output; false for the ops it
/// does not fuse.
#[test]
fn unary_of_uniform_equals_its_two_passes_at_every_isa_level() {
    let _level = lock_level();
    use kiln_ir::BinaryOp::*;
    use UnaryOp::*;
    let mut xs: Vec<f32> = (0..=u32::MAX / 262_147)
        .map(|i| f32::from_bits(i.wrapping_mul(262_147)))
        .collect();
    xs.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        1e-45,
        88.0,
        88.5,
        -86.0,
        -86.5,
        -104.5,
        3.0,
        -1.5,
    ]);
    let ss = [0.0f32, 3.0, -1.5, 1e30, f32::NAN, f32::INFINITY, 2.5e-39];
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    for level in Isa::ALL {
        if level > detected_isa() {
            continue;
        }
        assert_eq!(set_isa(level), level);
        for u in [Exp, Log, Tanh, Sigmoid] {
            for op in [Add, Sub, Mul] {
                for left in [false, true] {
                    for &s in &ss {
                        for n in [0usize, 1, 7, 8, 9, 33, xs.len()] {
                            let x = &xs[xs.len() - n..];
                            let mut t = vec![0.0f32; n];
                            assert!(vmath::binary_uniform_f32(op, left, x, s, &mut t));
                            let mut want = vec![0.0f32; n];
                            assert!(vmath::unary_f32(u, &t, &mut want));
                            let mut got = vec![7.0f32; n + 1];
                            assert!(vmath::unary_of_uniform_f32(
                                u,
                                op,
                                left,
                                x,
                                s,
                                &mut got[..n]
                            ));
                            for i in 0..n {
                                assert!(
                                    same(got[i], want[i]),
                                    "{u:?} of {op:?} (left {left}) at {level:?}: x {} s {s}: {} vs {}",
                                    x[i],
                                    got[i],
                                    want[i]
                                );
                            }
                            assert_eq!(got[n], 7.0);
                        }
                    }
                }
            }
        }
        let mut o = [0.0f32];
        assert!(!vmath::unary_of_uniform_f32(
            Exp,
            Div,
            false,
            &[1.0],
            2.0,
            &mut o
        ));
        assert!(!vmath::unary_of_uniform_f32(
            Sqrt,
            Sub,
            false,
            &[1.0],
            2.0,
            &mut o
        ));
        assert_eq!(o[0], 0.0);
    }
}
