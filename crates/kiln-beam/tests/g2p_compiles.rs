//! Decoding 1,000 words of varying length compiles a small, fixed number of graphs (its own
//! process, so the cache counters see only this). Skips when the g2p-en model is absent.

mod common;

use kiln_beam::{decode_parallel, BeamSearch, G2p, SearchConfig};

#[test]
fn a_thousand_words_compile_a_bounded_number_of_graphs() {
    let Some(p) = common::data_file("g2p_en/checkpoint20.npz") else {
        return;
    };
    // 1,000 pseudo-words of 1 to 14 letters
    let mut x = 12345u64;
    let words: Vec<Vec<usize>> = (0..1000)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = 1 + (x >> 60) as usize % 14;
            let w: String = (0..len)
                .map(|k| (b'a' + ((x >> (k * 4)) % 26) as u8) as char)
                .collect();
            G2p::encode_word(&w)
        })
        .collect();
    let cfg = SearchConfig {
        beam: 4,
        bos: G2p::BOS,
        eos: G2p::EOS,
        unk: Some(G2p::UNK),
        max_length_factor: 2.0,
        ..Default::default()
    };
    let make = || Ok(BeamSearch::new(vec![Box::new(G2p::load(&p)?)], cfg.clone()));
    let before = kiln::cache_stats().misses;
    let out = decode_parallel(&words, &make, 16, 1).unwrap();
    let compiles = kiln::cache_stats().misses - before;
    assert_eq!(out.len(), 1000);
    assert!(out.iter().all(|h| h.best().is_some()));
    // Per batch shape: the encoder step, the begin state and the decoder step, plus the
    // weight transposes at load. Every mini-batch has 16 sentences except the last (8): two
    // batch shapes. Beams shrinking and words of new lengths never add a graph.
    assert!(
        compiles <= 8,
        "compiles for 1,000 words: {compiles} ({:?})",
        kiln::cache_stats()
            .recent_misses
            .iter()
            .map(|m| m.reason)
            .collect::<Vec<_>>()
    );
    eprintln!("compiles for 1,000 words: {compiles}");
}
