//! The attention encoder-decoder: its loss and greedy decoding (with every step's attention)
//! against a numpy implementation of the architecture (tests/fixtures/gen_attention_fixtures.py),
//! its gradients against finite differences, a task with a known alignment that it must learn,
//! and load errors that name the tensor.

use kiln::{Array, DType};
use kiln_beam::{AlignmentKind, AttentionConfig, AttentionModel, BeamSearch, Scorer, SearchConfig};
use kiln_optim::{Adam, Optimizer, Parameter};

fn fixture_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn ids(v: &serde_json::Value) -> Vec<Vec<usize>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as usize)
                .collect()
        })
        .collect()
}

#[test]
fn loss_and_greedy_decoding_match_the_numpy_reference() {
    let dir = fixture_dir();
    let text = std::fs::read_to_string(dir.join("attention_numpy.json")).unwrap();
    let fx: serde_json::Value = serde_json::from_str(&text).unwrap();
    let model = AttentionModel::load(dir.join("attention_tiny.safetensors")).unwrap();
    let (bos, eos) = (
        fx["bos"].as_u64().unwrap() as usize,
        fx["eos"].as_u64().unwrap() as usize,
    );
    let (src, tgt) = (ids(&fx["src"]), ids(&fx["tgt"]));
    // the batch is padded (sources of 2..7 tokens, targets of 0..6): the masks must make
    // each sentence's loss independent of the others
    let loss = model.loss_with_bos(&src, &tgt, bos, eos).unwrap();
    let want = fx["loss"].as_f64().unwrap();
    let got = loss.item::<f32>().unwrap() as f64;
    assert!(
        (got - want).abs() < 1e-5 * want.abs(),
        "loss {got} vs numpy {want}"
    );

    // greedy decoding of all sentences in one padded batch equals numpy's one at a time
    let config = SearchConfig {
        beam: 1,
        bos,
        eos,
        unk: None,
        max_length_factor: 3.0,
        ..Default::default()
    };
    let mut search = BeamSearch::new(vec![Box::new(model.scorer().unwrap())], config);
    let hist = search.decode(&src).unwrap();
    for (i, (h, want)) in hist
        .iter()
        .zip(fx["greedy"].as_array().unwrap())
        .enumerate()
    {
        let best = &h.best().unwrap().hyp;
        let words: Vec<usize> = want["words"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(best.words(), words, "sentence {i}");
        let cost = want["cost"].as_f64().unwrap();
        assert!(
            (best.cost - cost).abs() < 1e-4,
            "sentence {i}: cost {} vs {cost}",
            best.cost
        );
        let rows = best.attentions();
        let want_rows = want["attention"].as_array().unwrap();
        assert_eq!(rows.len(), want_rows.len(), "sentence {i}: attention rows");
        for (t, (r, w)) in rows.iter().zip(want_rows).enumerate() {
            let w: Vec<f64> = w
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            assert_eq!(
                r.len(),
                src[i].len(),
                "sentence {i} step {t}: one weight per token"
            );
            for (a, b) in r.iter().zip(&w) {
                assert!(
                    (*a as f64 - b).abs() < 1e-5,
                    "sentence {i} step {t}: {r:?} vs {w:?}"
                );
            }
        }
    }
}

fn tiny(dtype: DType, seed: u64) -> AttentionModel {
    let cfg = AttentionConfig {
        src_vocab: 7,
        tgt_vocab: 6,
        emb: 3,
        enc_hidden: 2,
        dec_hidden: 3,
        att_hidden: 2,
        out_hidden: 3,
    };
    AttentionModel::init(cfg, seed, dtype).unwrap()
}

#[test]
fn gradients_match_central_differences() {
    let model = tiny(DType::F64, 3);
    // give the biases non-zero values so their gradients are exercised away from 0
    for (i, p) in model.parameters().iter().enumerate() {
        let v = p.value().to_vec::<f64>().unwrap();
        let v: Vec<f64> = v
            .iter()
            .enumerate()
            .map(|(j, x)| x + 0.1 * (((i * 7 + j * 3) % 5) as f64 - 2.0))
            .collect();
        p.assign(Array::from_vec(v, p.shape()).unwrap()).unwrap();
    }
    let src = vec![vec![3, 4, 5, 2], vec![6, 2], vec![5, 5, 3, 4, 2]];
    let tgt = vec![vec![3, 4], vec![5, 3, 4, 4], vec![]];
    let loss = |m: &AttentionModel| {
        m.loss_with_bos(&src, &tgt, 1, 2)
            .unwrap()
            .item::<f64>()
            .unwrap()
    };
    let values: Vec<Array> = model.parameters().iter().map(Parameter::value).collect();
    let wrt: Vec<&Array> = values.iter().collect();
    let l = model.loss_with_bos(&src, &tgt, 1, 2).unwrap();
    let grads = kiln::grad(&l, &wrt).unwrap();
    let mut checked = 0;
    for (p, g) in model.parameters().iter().zip(&grads) {
        let g = g.to_vec::<f64>().unwrap();
        let base = p.value();
        let v = base.to_vec::<f64>().unwrap();
        // three entries of every parameter: first, middle, last
        for j in [0, v.len() / 2, v.len() - 1] {
            let eps = 1e-6;
            let mut plus = v.clone();
            plus[j] += eps;
            p.assign(Array::from_vec(plus, p.shape()).unwrap()).unwrap();
            let lp = loss(&model);
            let mut minus = v.clone();
            minus[j] -= eps;
            p.assign(Array::from_vec(minus, p.shape()).unwrap())
                .unwrap();
            let lm = loss(&model);
            p.assign(base.clone()).unwrap();
            let fd = (lp - lm) / (2.0 * eps);
            assert!(
                (fd - g[j]).abs() <= 1e-6 + 1e-5 * fd.abs(),
                "{}[{j}]: autodiff {} vs central difference {fd}",
                p.name(),
                g[j]
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 3 * model.parameters().len());
}

/// Reversing a sequence has a known alignment: target word `t` comes from source position
/// `len − 1 − t`. A model that learned the task attends there.
#[test]
fn learns_to_reverse_and_its_alignment_is_the_reversal() {
    let cfg = AttentionConfig {
        src_vocab: 10,
        tgt_vocab: 10,
        emb: 16,
        enc_hidden: 16,
        dec_hidden: 32,
        att_hidden: 16,
        out_hidden: 16,
    };
    let (bos, eos) = (1, 2);
    let model = AttentionModel::init(cfg, 11, DType::F32).unwrap();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut sample =
        |len: usize| -> Vec<usize> { (0..len).map(|_| 3 + (next() % 7) as usize).collect() };
    let params: Vec<&Parameter> = model.parameters().iter().collect();
    let mut opt = Adam::new(0.01);
    for step in 0..400 {
        let len = 3 + step % 3; // three graph shapes, each compiled once
        let words: Vec<Vec<usize>> = (0..32).map(|_| sample(len)).collect();
        let src: Vec<Vec<usize>> = words
            .iter()
            .map(|w| [w.as_slice(), &[eos]].concat())
            .collect();
        let tgt: Vec<Vec<usize>> = words
            .iter()
            .map(|w| w.iter().rev().copied().collect())
            .collect();
        let loss = model.loss_with_bos(&src, &tgt, bos, eos).unwrap();
        let values: Vec<Array> = params.iter().map(|p| p.value()).collect();
        let wrt: Vec<&Array> = values.iter().collect();
        let grads = kiln::grad(&loss, &wrt).unwrap();
        opt.step(&params, &grads, &[&loss]).unwrap();
    }
    let test: Vec<Vec<usize>> = (0..60).map(|i| sample(3 + i % 3)).collect();
    let src: Vec<Vec<usize>> = test
        .iter()
        .map(|w| [w.as_slice(), &[eos]].concat())
        .collect();
    let config = SearchConfig {
        beam: 1,
        bos,
        eos,
        unk: None,
        ..Default::default()
    };
    let scorer = model.scorer().unwrap();
    assert_eq!(scorer.vocab_size(), 10);
    let mut search = BeamSearch::new(vec![Box::new(scorer)], config);
    let hist = search.decode(&src).unwrap();
    let (mut exact, mut aligned, mut positions) = (0, 0, 0);
    for (w, h) in test.iter().zip(&hist) {
        let best = &h.best().unwrap().hyp;
        let reversed: Vec<usize> = w.iter().rev().copied().chain([eos]).collect();
        exact += usize::from(best.words() == reversed);
        let hard = best.alignment(AlignmentKind::Hard, w.len() + 1, eos);
        for pair in hard.split_whitespace() {
            let (s, t) = pair.split_once('-').unwrap();
            let (s, t): (usize, usize) = (s.parse().unwrap(), t.parse().unwrap());
            positions += 1;
            aligned += usize::from(t < w.len() && s == w.len() - 1 - t);
        }
    }
    eprintln!("reverse: {exact}/60 exact, {aligned}/{positions} aligned");
    assert!(exact >= 54, "{exact}/60 reversed exactly");
    assert!(
        aligned * 10 >= positions * 9,
        "{aligned}/{positions} target words aligned to their source position"
    );
}

#[test]
fn load_errors_name_the_tensor_and_both_shapes() {
    let dir = std::env::temp_dir().join(format!("kiln-att-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = tiny(DType::F32, 1);
    // a checkpoint whose att.v has the wrong shape
    let bad: Vec<Parameter> = model
        .parameters()
        .iter()
        .map(|p| {
            if p.name() == "att.v" {
                Parameter::new("att.v", Array::zeros(&[3], DType::F32))
            } else {
                Parameter::new(p.name(), p.value())
            }
        })
        .collect();
    let path = dir.join("bad.safetensors");
    kiln_optim::save_safetensors(&path, &bad.iter().collect::<Vec<_>>()).unwrap();
    let e = AttentionModel::load(&path).err().unwrap().to_string();
    assert!(
        e.contains("att.v") && e.contains("[2, 1]") && e.contains("[3]"),
        "{e}"
    );
    // a checkpoint without att.b
    let missing: Vec<&Parameter> = model
        .parameters()
        .iter()
        .filter(|p| p.name() != "att.b")
        .collect();
    kiln_optim::save_safetensors(&path, &missing).unwrap();
    let e = AttentionModel::load(&path).err().unwrap().to_string();
    assert!(e.contains("no tensor named att.b"), "{e}");
    // a round trip keeps the weights
    model.save(&path).unwrap();
    let back = AttentionModel::load(&path).unwrap();
    assert_eq!(back.config(), model.config());
    for (a, b) in back.parameters().iter().zip(model.parameters()) {
        assert_eq!(
            a.value().to_vec::<f32>().unwrap(),
            b.value().to_vec::<f32>().unwrap()
        );
    }
    // ids outside the vocabulary are an error, not a panic
    let e = model
        .loss(&[vec![99]], &[vec![1]], 2)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("id 99") && e.contains("vocabulary of 7"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The GNMT ranking (Wu et al. 2016 §7): `log P / lp + cp` with `lp = ((5 + |Y|) / 6)^α` and
/// `cp = β Σ_source log(min(Σ_target attention, 1))`, recomputed here from each finished
/// hypothesis' cost, length and attention rows.
#[test]
fn gnmt_scores_follow_the_paper_formula_over_each_sentence_own_source() {
    let dir = fixture_dir();
    let model = AttentionModel::load(dir.join("attention_tiny.safetensors")).unwrap();
    let (alpha, beta) = (0.6, 0.3);
    let config = SearchConfig {
        beam: 3,
        bos: 1,
        eos: 2,
        unk: None,
        gnmt: Some(kiln_beam::Gnmt { alpha, beta }),
        ..Default::default()
    };
    let src = vec![vec![3, 4, 5, 6, 2], vec![7, 2], vec![8, 3, 3, 5, 4, 6, 2]];
    let mut search = BeamSearch::new(vec![Box::new(model.scorer().unwrap())], config);
    let hist = search.decode(&src).unwrap();
    for (i, h) in hist.iter().enumerate() {
        assert!(!h.is_empty());
        let mut last = f64::INFINITY;
        for f in h.nbest(10) {
            let rows = f.hyp.attentions();
            assert_eq!(rows.len(), f.hyp.length);
            let lp = ((5.0 + f.hyp.length as f64) / 6.0).powf(alpha);
            let cp: f64 = (0..src[i].len())
                .map(|j| {
                    let covered: f64 = rows.iter().map(|r| r[j] as f64).sum();
                    covered.min(1.0).ln()
                })
                .sum::<f64>()
                * beta;
            let want = f.hyp.cost / lp + cp;
            assert!(
                (f.score - want).abs() < 1e-9,
                "sentence {i}: {} vs {want}",
                f.score
            );
            assert!(f.score <= last, "n-best sorted by score");
            last = f.score;
        }
    }
}
