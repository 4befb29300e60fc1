//! The graph cache keeps decoding cheap: with a fixed batch shape, shrinking beams and new
//! source lengths reuse the compiled step (its own process, so the counters see only this).

use kiln_beam::{BeamSearch, SearchConfig, TableScorer};

const EOS: usize = 1;

fn search(vocab: usize, seed: u64, cfg: SearchConfig) -> (BeamSearch, TableScorer) {
    let m = TableScorer::random(vocab, seed);
    (BeamSearch::new(vec![Box::new(m.clone())], cfg), m)
}

#[test]
fn shrinking_beams_do_not_recompile() {
    let vocab = 8;
    let cfg = SearchConfig {
        beam: 4,
        max_length_factor: 3.0,
        eos: EOS,
        ..Default::default()
    };
    let (mut bs, _) = search(vocab, 9, cfg);
    // warm up: one batch shape (3 sentences) compiles its step graphs
    bs.decode(&[vec![3, 4], vec![5], vec![6, 7, 3]]).unwrap();
    let before = kiln::cache_stats().misses;
    for i in 0..30 {
        let srcs: Vec<Vec<usize>> = (0..3)
            .map(|j| (0..2 + (i + j) % 4).map(|k| 3 + (i + j + k) % 5).collect())
            .collect();
        bs.decode(&srcs).unwrap();
    }
    let compiles = kiln::cache_stats().misses - before;
    // batch shape fixed and beams shrinking: the step graph is the same every step
    assert_eq!(compiles, 0, "compiles for 30 more batches: {compiles}");
}
