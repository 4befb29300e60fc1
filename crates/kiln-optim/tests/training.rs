//! Training with kiln: optimizer updates against hand-written references, a training loop that
//! compiles its step once, checkpoints, and an MLP that learns the scikit-learn digits
//! (tests/data/digits.csv.gz, BSD-3-Clause, see tests/data/COPYING.scikit-learn).

use kiln::{Array, DType};
use kiln_optim::{
    clip_by_global_norm, load_safetensors, save_safetensors, Adam, Error, Optimizer, Parameter, Sgd,
};
use std::io::Read;

fn quadratic_grad(w: &Parameter) -> (Array, Vec<Array>) {
    // loss = Σ (w - 3)² ; grad = 2 (w - 3)
    let d = &w.value() - 3.0;
    let loss = (&d * &d).sum(None, false);
    let g = kiln::grad(&loss, &[&w.value()]).unwrap();
    (loss, g)
}

#[test]
fn adam_and_adamw_match_a_hand_written_reference() {
    for wd in [0.0, 0.01] {
        let w = Parameter::new("w", Array::from_vec(vec![0.5f64, -1.0], &[2]).unwrap());
        let mut adam = Adam::new(0.05).weight_decay(wd);
        let (mut rw, mut m, mut v) = ([0.5f64, -1.0], [0.0f64; 2], [0.0f64; 2]);
        for t in 1..=25 {
            let (loss, g) = quadratic_grad(&w);
            adam.step(&[&w], &g, &[&loss]).unwrap();
            for k in 0..2 {
                let gk = 2.0 * (rw[k] - 3.0);
                m[k] = 0.9 * m[k] + 0.1 * gk;
                v[k] = 0.999 * v[k] + 0.001 * gk * gk;
                let mh = m[k] / (1.0 - 0.9f64.powi(t));
                let vh = v[k] / (1.0 - 0.999f64.powi(t));
                rw[k] -= 0.05 * wd * rw[k];
                rw[k] -= 0.05 * mh / (vh.sqrt() + 1e-8);
            }
        }
        for (a, b) in w.value().to_vec::<f64>().unwrap().iter().zip(&rw) {
            assert!((a - b).abs() < 1e-9, "wd {wd}: {a} vs {b}");
        }
    }
}

#[test]
fn sgd_momentum_and_nesterov_match_a_hand_written_reference() {
    for nesterov in [false, true] {
        let w = Parameter::new("w", Array::from_vec(vec![0.0f64], &[1]).unwrap());
        let mut sgd = Sgd::new(0.1)
            .momentum(0.9)
            .nesterov(nesterov)
            .weight_decay(0.01);
        let (mut rw, mut b) = (0.0f64, 0.0f64);
        for t in 0..20 {
            let (loss, g) = quadratic_grad(&w);
            sgd.step(&[&w], &g, &[&loss]).unwrap();
            let g = 2.0 * (rw - 3.0) + 0.01 * rw;
            b = if t == 0 { g } else { 0.9 * b + g };
            rw -= 0.1 * if nesterov { g + 0.9 * b } else { b };
        }
        assert!(
            (w.value().item::<f64>().unwrap() - rw).abs() < 1e-12,
            "nesterov {nesterov}"
        );
    }
}

#[test]
fn clipping_bounds_the_global_norm() {
    let g = vec![
        Array::from_vec(vec![30.0f32, 40.0], &[2]).unwrap(),
        Array::from_vec(vec![0.0f32], &[1]).unwrap(),
    ];
    let (c, n) = clip_by_global_norm(&g, 5.0).unwrap();
    assert!((n.item::<f32>().unwrap() - 50.0).abs() < 1e-4);
    let c0 = c[0].to_vec::<f32>().unwrap();
    assert!((c0[0] - 3.0).abs() < 1e-4 && (c0[1] - 4.0).abs() < 1e-4);
    let (c, _) = clip_by_global_norm(&g, 100.0).unwrap();
    assert_eq!(c[0].to_vec::<f32>().unwrap(), vec![30.0, 40.0]);
}

#[test]
fn checkpoints_round_trip_and_report_mismatches() {
    let dir = std::env::temp_dir().join(format!("kiln-optim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.safetensors");
    let w = Parameter::new(
        "layer.w",
        Array::normal(&[3, 2], 0.0, 1.0, 5, DType::F32).unwrap(),
    );
    let b = Parameter::new("layer.b", Array::from_vec(vec![1i64, -2], &[2]).unwrap());
    save_safetensors(&path, &[&w, &b]).unwrap();
    let w2 = Parameter::new("layer.w", Array::zeros(&[3, 2], DType::F32));
    let b2 = Parameter::new("layer.b", Array::zeros(&[2], DType::I64));
    load_safetensors(&path, &[&w2, &b2]).unwrap();
    assert_eq!(
        w2.value().to_vec::<f32>().unwrap(),
        w.value().to_vec::<f32>().unwrap()
    );
    assert_eq!(b2.value().to_vec::<i64>().unwrap(), vec![1, -2]);
    // the file is standard safetensors: check the header by hand
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
    assert!(
        header.contains("\"layer.w\"") && header.contains("\"F32\"") && header.contains("[3,2]"),
        "{header}"
    );
    // a missing tensor and a wrong shape are clear errors, and nothing is assigned
    let missing = Parameter::new("layer.v", Array::zeros(&[3, 2], DType::F32));
    let e = load_safetensors(&path, &[&w2, &missing]).unwrap_err();
    assert!(
        matches!(e, Error::Missing { .. })
            && e.to_string().contains("layer.v")
            && e.to_string().contains("layer.w"),
        "{e}"
    );
    let wrong = Parameter::new("layer.w", Array::zeros(&[2, 3], DType::F32));
    let e = load_safetensors(&path, &[&wrong]).unwrap_err().to_string();
    assert!(
        e.contains("layer.w") && e.contains("[2, 3]") && e.contains("[3, 2]"),
        "{e}"
    );
    assert_eq!(wrong.value().to_vec::<f32>().unwrap(), vec![0.0; 6]);
    std::fs::remove_dir_all(&dir).ok();
}

fn digits() -> (Vec<f32>, Vec<i64>) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/digits.csv.gz");
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for line in text.lines().filter(|l| !l.is_empty()) {
        let v: Vec<f32> = line.split(',').map(|t| t.trim().parse().unwrap()).collect();
        x.extend(v[..64].iter().map(|p| p / 16.0));
        y.push(v[64] as i64);
    }
    (x, y)
}

#[test]
fn an_mlp_learns_the_digits() {
    let (x, y) = digits();
    let n = y.len();
    assert_eq!(n, 1797);
    // deterministic split: every 6th image is held out
    let (mut xtr, mut ytr, mut xte, mut yte) = (vec![], vec![], vec![], vec![]);
    for i in 0..n {
        let (xs, ys) = if i % 6 == 0 {
            (&mut xte, &mut yte)
        } else {
            (&mut xtr, &mut ytr)
        };
        xs.extend_from_slice(&x[i * 64..(i + 1) * 64]);
        ys.push(y[i]);
    }
    let (ntr, nte) = (ytr.len(), yte.len());
    let xtr = Array::from_vec(xtr, &[ntr, 64]).unwrap();
    let ytr = Array::from_vec(ytr, &[ntr]).unwrap();
    let xte = Array::from_vec(xte, &[nte, 64]).unwrap();
    let w1 = Parameter::new(
        "w1",
        Array::normal(&[64, 64], 0.0, (2.0f64 / 64.0).sqrt(), 11, DType::F32).unwrap(),
    );
    let b1 = Parameter::new("b1", Array::zeros(&[64], DType::F32));
    let w2 = Parameter::new(
        "w2",
        Array::normal(&[64, 10], 0.0, (1.0f64 / 64.0).sqrt(), 12, DType::F32).unwrap(),
    );
    let b2 = Parameter::new("b2", Array::zeros(&[10], DType::F32));
    let params = [&w1, &b1, &w2, &b2];
    let forward = |x: &Array| {
        (x.matmul(&w1.value()) + &b1.value())
            .relu()
            .matmul(&w2.value())
            + &b2.value()
    };
    let mut opt = Adam::new(1e-2);
    let batch = 128;
    for epoch in 0..30 {
        for start in (0..ntr).step_by(batch) {
            let end = (start + batch).min(ntr);
            let xb = xtr.slice(kiln::s![start..end]);
            let yb = ytr.slice(kiln::s![start..end]);
            let logits = forward(&xb);
            let onehot = yb.one_hot(10, DType::F32);
            let loss = -(&logits.log_softmax(-1) * &onehot)
                .sum(Some(&[-1]), false)
                .mean(None, false);
            let values: Vec<Array> = params.iter().map(|p| p.value()).collect();
            let refs: Vec<&Array> = values.iter().collect();
            let g = kiln::grad(&loss, &refs).unwrap();
            opt.step(&params, &g, &[&loss]).unwrap();
        }
        let _ = epoch;
    }
    let pred = forward(&xte)
        .argmax(Some(-1), false)
        .to_vec::<i64>()
        .unwrap();
    let correct = pred.iter().zip(&yte).filter(|(a, b)| a == b).count();
    let acc = correct as f64 / nte as f64;
    eprintln!("digits: held-out accuracy {acc:.4} ({correct}/{nte})");
    assert!(acc >= 0.95, "held-out accuracy {acc:.3} ({correct}/{nte})");
}
