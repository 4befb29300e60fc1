//! The real g2p-en model (fetched by `scripts/fetch-data.sh` into `data/`; these tests skip
//! with a message when it is absent): known outputs from the issue, and the model's errors.

mod common;

use kiln_beam::{BeamSearch, G2p, SearchConfig};
use std::path::PathBuf;

fn checkpoint() -> Option<PathBuf> {
    common::data_file("g2p_en/checkpoint20.npz")
}

fn config(beam: usize) -> SearchConfig {
    // g2p-en's own decoder runs at most 20 steps
    SearchConfig {
        beam,
        bos: G2p::BOS,
        eos: G2p::EOS,
        unk: Some(G2p::UNK),
        max_length_factor: 20.0,
        ..Default::default()
    }
}

fn phonemes(words: &[usize]) -> String {
    words
        .iter()
        .filter(|&&w| w != G2p::EOS)
        .map(|&w| G2p::phoneme(w))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn known_outputs() {
    let Some(path) = checkpoint() else { return };
    let src = vec![G2p::encode_word("activationist")];
    let mut greedy = BeamSearch::new(vec![Box::new(G2p::load(&path).unwrap())], config(1));
    let h = greedy.decode(&src).unwrap().remove(0);
    assert_eq!(
        phonemes(&h.best().unwrap().hyp.words()),
        "AE2 K T IH0 V EY1 SH AH0 N IH0 S T"
    );
    let mut beam4 = BeamSearch::new(vec![Box::new(G2p::load(&path).unwrap())], config(4));
    let h = beam4.decode(&src).unwrap().remove(0);
    let best = h.best().unwrap();
    assert_eq!(
        phonemes(&best.hyp.words()),
        "AE2 K T AH0 V EY1 SH AH0 N AH0 S T"
    );
    assert!(
        (best.hyp.cost - (-1.794)).abs() < 1e-3,
        "log-prob {}",
        best.hyp.cost
    );
}

#[test]
fn batched_words_decode_like_single_words() {
    let Some(path) = checkpoint() else { return };
    let words = [
        "cat",
        "through",
        "kiln",
        "zebra",
        "a",
        "onomatopoeia",
        "rust",
    ];
    let srcs: Vec<Vec<usize>> = words.iter().map(|w| G2p::encode_word(w)).collect();
    let mut bs = BeamSearch::new(vec![Box::new(G2p::load(&path).unwrap())], config(4));
    let batched: Vec<String> = bs
        .decode(&srcs)
        .unwrap()
        .iter()
        .map(|h| phonemes(&h.best().unwrap().hyp.words()))
        .collect();
    for (w, b) in words.iter().zip(&batched) {
        let single = bs.decode(&[G2p::encode_word(w)]).unwrap().remove(0);
        assert_eq!(&phonemes(&single.best().unwrap().hyp.words()), b, "{w}");
    }
    assert_eq!(batched[0], "K AE1 T");
}

#[test]
fn a_corrupt_checkpoint_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("kiln-g2p-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("bad.npz");
    std::fs::write(&p, b"not a zip").unwrap();
    let e = G2p::load(&p).err().unwrap().to_string();
    assert!(e.contains("bad.npz") && e.contains("zip"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn matches_the_numpy_reference() {
    // tests/fixtures/g2p_numpy.json: greedy and beam-4 outputs of a numpy implementation of
    // the same model and search (tests/fixtures/gen_g2p_fixtures.py)
    let Some(path) = checkpoint() else { return };
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/g2p_numpy.json"
    ))
    .unwrap();
    let fixture: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() >= 30);
    let words: Vec<&str> = cases.iter().map(|c| c["word"].as_str().unwrap()).collect();
    let srcs: Vec<Vec<usize>> = words.iter().map(|w| G2p::encode_word(w)).collect();
    let ids = |v: &serde_json::Value| -> Vec<usize> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect()
    };
    let mut greedy = BeamSearch::new(vec![Box::new(G2p::load(&path).unwrap())], config(1));
    let mut beam4 = BeamSearch::new(vec![Box::new(G2p::load(&path).unwrap())], config(4));
    let g = greedy.decode(&srcs).unwrap();
    let b = beam4.decode(&srcs).unwrap();
    for (k, c) in cases.iter().enumerate() {
        assert_eq!(
            g[k].best().unwrap().hyp.words(),
            ids(&c["greedy"]),
            "greedy {}",
            words[k]
        );
        let best = b[k].best().unwrap();
        assert_eq!(best.hyp.words(), ids(&c["beam4"]), "beam 4 {}", words[k]);
        let want = c["beam4_logprob"].as_f64().unwrap();
        assert!(
            (best.hyp.cost - want).abs() < 1e-4 * (1.0 + want.abs()),
            "{}: {} vs {want}",
            words[k],
            best.hyp.cost
        );
    }
}
