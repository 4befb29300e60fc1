//! The cn2en model. The real one (fetched by `scripts/fetch-data.sh` into `data/cn2en`; those
//! tests skip with a message when it is absent): the issue's known greedy outputs and the
//! package's own PyTorch code as the reference (`tests/fixtures/cn2en_torch.json`). A tiny
//! model of the same architecture and files (`tests/fixtures/cn2en_tiny`, always present):
//! the reference again, batching, threads, and a mismatched checkpoint. Both fixtures come
//! from `tests/fixtures/gen_cn2en_fixtures.py`.

mod common;
use common::translate_cli;

use kiln_beam::{decode_parallel, BeamSearch, Cn2En, SearchConfig};
use std::path::PathBuf;

fn model_dir() -> Option<PathBuf> {
    let pth = common::data_file("cn2en/model.pth")?;
    pth.parent().map(PathBuf::from)
}

fn tiny_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cn2en_tiny"
    ))
}

fn cases(path: PathBuf) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(&path).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["cases"].as_array().unwrap().clone()
}

/// Greedy like `model.py`: beam 1, stopping only at EOS (or 1,000 words).
fn greedy_config() -> SearchConfig {
    SearchConfig {
        max_length_factor: 1000.0,
        ..Cn2En::config(1)
    }
}

fn ids(v: &serde_json::Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

/// Checks a model against reference cases: tokens, words, log-probabilities; batched and
/// one sentence at a time.
fn check_against(model: &Cn2En, cases: &[serde_json::Value]) {
    let src: Vec<Vec<usize>> = cases
        .iter()
        .map(|c| model.encode_sentence(c["source"].as_str().unwrap()))
        .collect();
    for (c, s) in cases.iter().zip(&src) {
        assert_eq!(s, &ids(&c["source_ids"]), "tokens of {}", c["source"]);
    }
    let mut search = BeamSearch::new(vec![Box::new(model.clone())], greedy_config());
    let batched = search.decode(&src).unwrap();
    for ((c, s), h) in cases.iter().zip(&src).zip(&batched) {
        let best = h.best().unwrap();
        let words = best.hyp.words();
        let mut want = ids(&c["output_ids"]);
        want.push(Cn2En::EOS);
        assert_eq!(words, want, "{}", c["source"]);
        assert_eq!(model.detokenize(&words), c["output"].as_str().unwrap());
        let lp = c["log_prob"].as_f64().unwrap();
        assert!(
            (best.hyp.cost - lp).abs() < 1e-3,
            "{}: log-prob {} vs torch {lp}",
            c["source"],
            best.hyp.cost
        );
        let single = search.decode(std::slice::from_ref(s)).unwrap();
        assert_eq!(
            single[0].best().unwrap().hyp.words(),
            words,
            "{}",
            c["source"]
        );
    }
}

#[test]
fn tokens_follow_model_py() {
    assert_eq!(
        Cn2En::tokenize(" 我不知道。 "),
        ["我", "不", "知", "道", "。"]
    );
    // runs of a-z, ' and " stay together; everything else stands alone; lower-cased
    assert_eq!(
        Cn2En::tokenize("Tom's 3 cats，好!"),
        ["tom's", "3", "cats", "，", "好", "!"]
    );
    assert!(Cn2En::tokenize("   ").is_empty());
}

#[test]
fn tiny_model_matches_torch() {
    let model = Cn2En::load(tiny_dir()).unwrap();
    let cases = cases(tiny_dir().join("expected.json"));
    assert!(cases.len() >= 8);
    check_against(&model, &cases);
    assert_eq!(
        model.translate(&["我不知道。", "tom知道。"], 1).unwrap(),
        ["i don't know .", "tom knows ."]
    );
    // beam 4 finds a hypothesis at least as good as greedy's
    let src = vec![model.encode_sentence("道")];
    let g = BeamSearch::new(vec![Box::new(model.clone())], greedy_config())
        .decode(&src)
        .unwrap();
    let b = BeamSearch::new(
        vec![Box::new(model.clone())],
        SearchConfig {
            beam: 4,
            ..greedy_config()
        },
    )
    .decode(&src)
    .unwrap();
    assert!(b[0].best().unwrap().hyp.cost >= g[0].best().unwrap().hyp.cost - 1e-9);
}

#[test]
fn threads_and_mini_batches_keep_input_order() {
    let model = Cn2En::load(tiny_dir()).unwrap();
    let lines = [
        "我不知道。",
        "tom",
        "我知道。",
        "道道道道",
        "tom不知道。",
        "",
        "知",
    ];
    let src: Vec<Vec<usize>> = lines.iter().map(|l| model.encode_sentence(l)).collect();
    let make = || {
        Ok(BeamSearch::new(
            vec![Box::new(model.clone())],
            Cn2En::config(3),
        ))
    };
    let one_by_one: Vec<Vec<usize>> = src
        .iter()
        .map(|s| {
            make().unwrap().decode(std::slice::from_ref(s)).unwrap()[0]
                .best()
                .unwrap()
                .hyp
                .words()
        })
        .collect();
    let parallel = decode_parallel(&src, &make, 2, 2).unwrap();
    let parallel: Vec<Vec<usize>> = parallel
        .iter()
        .map(|h| h.best().unwrap().hyp.words())
        .collect();
    assert_eq!(parallel, one_by_one);
}

#[test]
fn a_mismatched_checkpoint_names_the_tensor_and_both_shapes() {
    let e = Cn2En::load(tiny_dir().join("bad"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("decoder.gru.weight_hh_l0")
            && e.contains("[24, 8]")
            && e.contains("[24, 7]")
            && e.contains("model.pth"),
        "{e}"
    );
    let e = Cn2En::load(tiny_dir().join("absent"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("input_lang.pkl"), "{e}");
}

#[test]
fn known_greedy_outputs() {
    let Some(dir) = model_dir() else { return };
    let m = Cn2En::load(&dir).unwrap();
    let out = m.translate(&["我不知道。", "他是我的朋友。"], 1).unwrap();
    assert_eq!(out, ["i don't know .", "he's my friend ."]);
}

#[test]
fn real_model_matches_torch() {
    let Some(dir) = model_dir() else { return };
    let model = Cn2En::load(&dir).unwrap();
    let cases = cases(PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cn2en_torch.json"
    )));
    assert!(cases.len() >= 30);
    check_against(&model, &cases);
}

#[test]
fn the_cli_translates_with_cn2en() {
    let spec = format!("cn2en:{}", tiny_dir().display());
    let input = "我不知道。\n\ntom知道。\n\u{1F980}\n".as_bytes();
    let (out, err, code) = translate_cli(
        &[
            "--model",
            &spec,
            "-b",
            "1",
            "--threads",
            "2",
            "--mini-batch",
            "1",
        ],
        input,
    );
    assert_eq!(code, 0, "{err}");
    // an empty line stays empty; a line of unknown characters is decoded from EOS alone,
    // as model.py does
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["i don't know .", "", "tom knows .", "i know ."]
    );
    let (out, _, code) = translate_cli(
        &["--model", &spec, "-b", "2", "--n-best"],
        "我知道。\n".as_bytes(),
    );
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .next()
            .unwrap()
            .starts_with("0 ||| i know . ||| F0= "),
        "{out}"
    );
    // an ensemble of the same model decodes like the model
    let (out, err, code) = translate_cli(
        &[
            "--model",
            &spec,
            "--model",
            &spec,
            "--weights",
            "0.5,0.5",
            "-b",
            "1",
        ],
        "tom不知道。\n".as_bytes(),
    );
    assert_eq!((out.trim(), code), ("tom doesn't know .", 0), "{err}");
    // a mismatched checkpoint fails before reading input, naming the tensor
    let bad = format!("cn2en:{}", tiny_dir().join("bad").display());
    let (_, err, code) = translate_cli(&["--model", &bad], b"x\n");
    assert_eq!(code, 1);
    assert!(err.contains("decoder.gru.weight_hh_l0"), "{err}");
    let (_, err, code) = translate_cli(&["--model", "nmt:x"], b"");
    assert_eq!(code, 2);
    assert!(err.contains("cn2en:DIR"), "{err}");
}

#[test]
fn the_cli_translates_the_issue_sentences() {
    let Some(dir) = model_dir() else { return };
    let spec = format!("cn2en:{}", dir.display());
    let (out, err, code) = translate_cli(
        &["--model", &spec, "-b", "1"],
        "我不知道。\n他是我的朋友。\n".as_bytes(),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["i don't know .", "he's my friend ."]
    );
}
