//! Gradients against central finite differences in f64, for every differentiable op, over
//! shapes that broadcast. The loss is `Σ f(inputs) * w` with fixed random weights `w`, so every
//! output element's gradient is checked separately.

use kiln::{s, Array, DType};

struct Rng(u64);
impl Rng {
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        lo + (hi - lo) * ((self.0 >> 11) as f64 / (1u64 << 53) as f64)
    }
}

fn arr(r: &mut Rng, shape: &[usize], lo: f64, hi: f64) -> Array {
    let n: usize = shape.iter().product();
    Array::from_vec((0..n).map(|_| r.uniform(lo, hi)).collect(), shape).unwrap()
}

fn loss_of(y: &Array, w: &[f64]) -> Array {
    let wa = Array::from_vec(w.to_vec(), y.shape()).unwrap();
    (y * &wa).sum(None, false)
}

/// Checks `grad(Σ f(x) * w)` against central differences for every element of every input.
fn check(name: &str, inputs: Vec<Array>, f: impl Fn(&[Array]) -> Array) {
    let mut r = Rng(0x5eed ^ name.len() as u64);
    let y = f(&inputs);
    let w: Vec<f64> = (0..y.size()).map(|_| r.uniform(0.5, 1.5)).collect();
    let loss = loss_of(&y, &w);
    let refs: Vec<&Array> = inputs.iter().collect();
    let grads = kiln::grad(&loss, &refs).unwrap();
    let h = 1e-6;
    for (k, x) in inputs.iter().enumerate() {
        let g = grads[k].to_vec::<f64>().unwrap();
        let base = x.to_vec::<f64>().unwrap();
        for e in 0..base.len() {
            let eval_at = |v: f64| {
                let mut d = base.clone();
                d[e] = v;
                let mut xs = inputs.clone();
                xs[k] = Array::from_vec(d, x.shape()).unwrap();
                loss_of(&f(&xs), &w).item::<f64>().unwrap()
            };
            let fd = (eval_at(base[e] + h) - eval_at(base[e] - h)) / (2.0 * h);
            let tol = 1e-5 * (1.0 + fd.abs());
            assert!(
                (g[e] - fd).abs() <= tol,
                "{name}: d/d input{k}[{e}]: autodiff {} vs finite difference {fd}",
                g[e]
            );
        }
    }
}

#[test]
fn unary_ops() {
    let mut r = Rng(1);
    let pos = |r: &mut Rng| arr(r, &[2, 3], 0.2, 2.0);
    let any = |r: &mut Rng| arr(r, &[2, 3], -2.0, 2.0);
    check("neg", vec![any(&mut r)], |x| x[0].neg());
    check("abs", vec![pos(&mut r)], |x| (&x[0] * -1.0).abs());
    check("exp", vec![any(&mut r)], |x| x[0].exp());
    check("log", vec![pos(&mut r)], |x| x[0].log());
    check("log1p", vec![pos(&mut r)], |x| x[0].log1p());
    check("expm1", vec![any(&mut r)], |x| x[0].expm1());
    check("sqrt", vec![pos(&mut r)], |x| x[0].sqrt());
    check("rsqrt", vec![pos(&mut r)], |x| x[0].rsqrt());
    check("square", vec![any(&mut r)], |x| x[0].square());
    check("recip", vec![pos(&mut r)], |x| x[0].recip());
    check("sin", vec![any(&mut r)], |x| x[0].sin());
    check("cos", vec![any(&mut r)], |x| x[0].cos());
    check("tanh", vec![any(&mut r)], |x| x[0].tanh());
    check("sigmoid", vec![any(&mut r)], |x| x[0].sigmoid());
    check(
        "relu",
        vec![Array::from_vec(vec![-1.5, -0.2, 0.3, 1.1, 2.0, -0.7], &[2, 3]).unwrap()],
        |x| x[0].relu(),
    );
}

#[test]
fn binary_ops_with_broadcasting() {
    let mut r = Rng(2);
    let shapes: [(&[usize], &[usize]); 3] = [(&[2, 3], &[3]), (&[2, 1], &[1, 3]), (&[], &[2, 2])];
    for (sa, sb) in shapes {
        let a = arr(&mut r, sa, 0.5, 2.0);
        let b = arr(&mut r, sb, 0.5, 2.0);
        check("add", vec![a.clone(), b.clone()], |x| &x[0] + &x[1]);
        check("sub", vec![a.clone(), b.clone()], |x| &x[0] - &x[1]);
        check("mul", vec![a.clone(), b.clone()], |x| &x[0] * &x[1]);
        check("div", vec![a.clone(), b.clone()], |x| &x[0] / &x[1]);
        check("pow", vec![a.clone(), b.clone()], |x| x[0].pow(&x[1]));
        check("maximum", vec![a.clone(), &b + 0.013], |x| {
            x[0].maximum(&x[1])
        });
        check("minimum", vec![a.clone(), &b + 0.013], |x| {
            x[0].minimum(&x[1])
        });
    }
    let a = Array::from_vec(vec![5.3, -4.1, 7.7, 2.2], &[4]).unwrap();
    let b = Array::from_vec(vec![2.0, 3.0, -2.5, 0.9], &[4]).unwrap();
    check("rem", vec![a, b], |x| x[0].rem(&x[1]));
    // scalars on either side
    let a = arr(&mut r, &[3], 0.5, 2.0);
    check("scalar ops", vec![a], |x| {
        (2.5 - &x[0]) * 3.0 / (&x[0] + 1.0)
    });
}

#[test]
fn where_clip_and_casts() {
    let mut r = Rng(3);
    let a = arr(&mut r, &[2, 3], -2.0, 2.0);
    let b = arr(&mut r, &[3], -2.0, 2.0);
    let c = Array::from_vec(vec![true, false, true, false, false, true], &[2, 3]).unwrap();
    check("where", vec![a.clone(), b], move |x| {
        Array::where_(&c, &x[0], &x[1])
    });
    let v = Array::from_vec(vec![-1.7, -0.3, 0.2, 0.6, 1.4, 2.5], &[6]).unwrap();
    check("clip", vec![v], |x| x[0].clip(-1.0, 1.0));
    // casts between floats pass gradients through (f32 rounding is checked loosely below)
    let x = Array::from_vec(vec![0.5f64, 1.5], &[2]).unwrap();
    let g = kiln::grad(&x.cast(DType::F32).sum(None, false), &[&x]).unwrap();
    assert_eq!(g[0].to_vec::<f64>().unwrap(), vec![1.0, 1.0]);
    // stop_gradient: d/dx (x * sg(x)) = sg(x) = x, not the 2x a finite difference sees
    let g = kiln::grad(&(&a * &a.stop_gradient()).sum(None, false), &[&a]).unwrap();
    assert_eq!(g[0].to_vec::<f64>().unwrap(), a.to_vec::<f64>().unwrap());
}

#[test]
fn movement_ops() {
    let mut r = Rng(4);
    let a = arr(&mut r, &[2, 3, 4], -1.0, 1.0);
    check("reshape", vec![a.clone()], |x| x[0].reshape(&[4, -1]).exp());
    check("transpose", vec![a.clone()], |x| x[0].transpose().sin());
    check("permute", vec![a.clone()], |x| {
        x[0].permute(&[1, 2, 0]).tanh()
    });
    check("expand_squeeze", vec![a.clone()], |x| {
        x[0].expand_dims(1).squeeze(None).square()
    });
    check("broadcast_to", vec![arr(&mut r, &[3, 1], -1.0, 1.0)], |x| {
        x[0].broadcast_to(&[2, 3, 4]).sin()
    });
    check("slice", vec![a.clone()], |x| {
        x[0].slice(s![1.., ..;2, -3..;-1]).exp()
    });
    check("slice index", vec![a.clone()], |x| {
        x[0].slice(s![-1, 1, ..]).square()
    });
    let b = arr(&mut r, &[2, 2, 4], -1.0, 1.0);
    check("concat", vec![a.clone(), b], |x| {
        Array::concat(&[&x[0], &x[1]], 1).sin()
    });
    let c = arr(&mut r, &[2, 3, 4], -1.0, 1.0);
    check("stack", vec![a, c], |x| {
        Array::stack(&[&x[0], &x[1]], -1).tanh()
    });
}

#[test]
fn reductions_and_softmax() {
    let mut r = Rng(5);
    let a = arr(&mut r, &[3, 4], -2.0, 2.0);
    check("sum", vec![a.clone()], |x| {
        x[0].sum(Some(&[0]), false).square()
    });
    check("sum keepdims", vec![a.clone()], |x| {
        (&x[0] * &x[0].sum(Some(&[-1]), true)).sin()
    });
    check("mean", vec![a.clone()], |x| {
        x[0].mean(Some(&[1]), true).exp()
    });
    check("prod", vec![arr(&mut r, &[3, 4], 0.5, 1.5)], |x| {
        x[0].prod(Some(&[1]), false)
    });
    check("max", vec![a.clone()], |x| x[0].max(Some(&[1]), false));
    check("min all", vec![a.clone()], |x| x[0].min(None, true));
    check("logsumexp", vec![a.clone()], |x| {
        x[0].logsumexp(Some(&[-1]), false)
    });
    check("softmax", vec![a.clone()], |x| x[0].softmax(-1));
    check("log_softmax", vec![a.clone()], |x| x[0].log_softmax(0));
    // ties in max share the gradient equally (as jax.numpy)
    let t = Array::from_vec(vec![1.0f64, 3.0, 3.0], &[3]).unwrap();
    let g = kiln::grad(&t.max(None, false), &[&t]).unwrap();
    assert_eq!(g[0].to_vec::<f64>().unwrap(), vec![0.0, 0.5, 0.5]);
    let g = kiln::grad(&t.maximum(3.0).sum(None, false), &[&t]).unwrap();
    assert_eq!(g[0].to_vec::<f64>().unwrap(), vec![0.0, 0.5, 0.5]);
}

#[test]
fn matmul_take_top_k() {
    let mut r = Rng(6);
    check(
        "matmul 2d",
        vec![
            arr(&mut r, &[3, 4], -1.0, 1.0),
            arr(&mut r, &[4, 2], -1.0, 1.0),
        ],
        |x| x[0].matmul(&x[1]),
    );
    check(
        "matmul batched broadcast",
        vec![
            arr(&mut r, &[2, 3, 4], -1.0, 1.0),
            arr(&mut r, &[4, 2], -1.0, 1.0),
        ],
        |x| x[0].matmul(&x[1]),
    );
    check(
        "matmul vectors",
        vec![
            arr(&mut r, &[4], -1.0, 1.0),
            arr(&mut r, &[4, 3], -1.0, 1.0),
        ],
        |x| x[0].matmul(&x[1]),
    );
    check(
        "dot",
        vec![arr(&mut r, &[4], -1.0, 1.0), arr(&mut r, &[4], -1.0, 1.0)],
        |x| x[0].dot(&x[1]),
    );
    let ids = Array::from_vec(vec![2i64, 0, 2, -1], &[2, 2]).unwrap();
    check(
        "take (repeated ids)",
        vec![arr(&mut r, &[4, 3], -1.0, 1.0)],
        move |x| x[0].take(&ids, 0).tanh(),
    );
    let ids1 = Array::from_vec(vec![1i64, 1, 0], &[3]).unwrap();
    check(
        "take axis 1",
        vec![arr(&mut r, &[2, 3], -1.0, 1.0)],
        move |x| x[0].take(&ids1, 1),
    );
    let to = Array::from_vec(vec![2i64, 0, 2, -1], &[4]).unwrap();
    check(
        "scatter_add (repeated indices)",
        vec![arr(&mut r, &[4, 3], -1.0, 1.0)],
        move |x| x[0].scatter_add(&to, 0, &[5, 3]).tanh(),
    );
    let v = Array::from_vec(vec![0.3, -1.2, 2.5, 0.9, 1.7, -0.4, 0.1, 2.2], &[2, 4]).unwrap();
    check("top_k values", vec![v], |x| x[0].top_k(2).0.exp());
}

#[test]
fn second_derivatives() {
    // d²/dx² tanh(x) = -2 tanh(x) (1 - tanh²(x)), checked by finite differences of the gradient
    let x0 = [0.3f64, -0.8, 1.1];
    let x = Array::from_vec(x0.to_vec(), &[3]).unwrap();
    let g = kiln::grad(&x.tanh().sum(None, false), &[&x])
        .unwrap()
        .remove(0);
    let gg = kiln::grad(&g.sum(None, false), &[&x]).unwrap().remove(0);
    for (got, &v) in gg.to_vec::<f64>().unwrap().iter().zip(&x0) {
        let t = v.tanh();
        assert!((got - (-2.0 * t * (1.0 - t * t))).abs() < 1e-12);
    }
    // and through a matmul and softmax
    let mut r = Rng(7);
    let w = arr(&mut r, &[3, 3], -1.0, 1.0);
    check(
        "grad of grad",
        vec![arr(&mut r, &[2, 3], -1.0, 1.0)],
        move |x| {
            let inner = x[0].matmul(&w).softmax(-1).sum(None, false);
            kiln::grad(&inner, &[&x[0]]).unwrap().remove(0)
        },
    );
}

#[test]
fn errors_are_clear() {
    let x = Array::from_vec(vec![1.0f64, 2.0], &[2]).unwrap();
    let m = kiln::grad(&x.exp(), &[&x]).unwrap_err().to_string();
    assert!(
        m.contains("grad") && m.contains("(2,)") && m.contains("sum or mean"),
        "{m}"
    );
    let i = Array::from_vec(vec![1i32, 2], &[2]).unwrap();
    let m = kiln::grad(&i.cast(DType::F64).sum(None, false), &[&i])
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("int32") && m.contains("not differentiable"),
        "{m}"
    );
    // an input the loss does not depend on gets zeros
    let other = Array::from_vec(vec![5.0f64], &[1]).unwrap();
    let g = kiln::grad(&x.sum(None, false), &[&other]).unwrap();
    assert_eq!(g[0].to_vec::<f64>().unwrap(), vec![0.0]);
}
