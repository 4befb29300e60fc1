//! Beam search against independent references: exhaustive search when the beam covers the
//! space, greedy decoding at beam 1, batched = one sentence at a time = multithreaded, and the
//! number of compiles.

use kiln_beam::{
    decode_parallel, nbest_lines, BeamSearch, History, MiniBatch, Scorer, SearchConfig, TableScorer,
};

const V: usize = 4; // 0 = BOS, 1 = EOS, 2 = UNK, 3 = a word... plus more below
const EOS: usize = 1;

fn log_softmax(x: &[f64]) -> Vec<f64> {
    let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = x.iter().map(|v| (v - m).exp()).sum();
    x.iter().map(|v| v - m - s.ln()).collect()
}

/// Host-side log-probabilities of the table model, in f64, written independently of kiln.
fn host_lp(m: &TableScorer, vocab: usize, prev: usize, src: &[usize]) -> Vec<f64> {
    let bias = m.source_bias(src);
    let row: Vec<f64> = (0..vocab)
        .map(|w| m.table()[prev * vocab + w] + bias[w])
        .collect();
    log_softmax(&row)
}

/// Every complete output of length ≤ max_len (ending in EOS, or forced at max_len), scored.
fn exhaustive(
    m: &TableScorer,
    vocab: usize,
    src: &[usize],
    cfg: &SearchConfig,
) -> Vec<(f64, Vec<usize>)> {
    let max_len = ((cfg.max_length_factor * src.len() as f64).ceil() as usize).max(1);
    let mut out = Vec::new();
    let mut stack = vec![(vec![], 0.0f64, cfg.bos)];
    while let Some((words, cost, prev)) = stack.pop() {
        let lp = host_lp(m, vocab, prev, src);
        for (w, &l) in lp.iter().enumerate() {
            if Some(w) == cfg.unk && !cfg.allow_unk {
                continue;
            }
            let mut ws: Vec<usize> = words.clone();
            ws.push(w);
            let c = cost + l;
            if w == EOS || ws.len() >= max_len {
                out.push((cfg.score(c, ws.len(), &[]), ws));
            } else {
                stack.push((ws, c, w));
            }
        }
    }
    out.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap());
    out
}

fn search(vocab: usize, seed: u64, cfg: SearchConfig) -> (BeamSearch, TableScorer) {
    let m = TableScorer::random(vocab, seed);
    (BeamSearch::new(vec![Box::new(m.clone())], cfg), m)
}

#[test]
fn beam_covering_the_space_equals_exhaustive_search() {
    for (seed, normalize, wp) in [(1u64, 0.0, 0.0), (2, 1.0, 0.0), (3, 0.6, 0.3)] {
        let vocab = V + 1;
        let cfg = SearchConfig {
            beam: 64, // ≥ (vocab - 2)^(max_len - 1): every live prefix fits
            normalize,
            word_penalty: wp,
            max_length_factor: 2.0,
            unk: Some(2),
            eos: EOS,
            ..Default::default()
        };
        let (mut bs, m) = search(vocab, seed, cfg.clone());
        let srcs = vec![vec![3, 4], vec![4], vec![3]];
        let hist = bs.decode(&srcs).unwrap();
        for (src, h) in srcs.iter().zip(&hist) {
            let ex = exhaustive(&m, vocab, src, &cfg);
            let best = h.best().unwrap();
            assert_eq!(best.hyp.words(), ex[0].1, "seed {seed} src {src:?}");
            assert!((best.score - ex[0].0).abs() < 1e-9);
            // the n-best list is the exhaustive ranking's head
            for (f, e) in h.nbest(5).iter().zip(&ex) {
                assert_eq!(f.hyp.words(), e.1);
            }
            assert!(
                h.best().unwrap().hyp.words().iter().all(|&w| w != 2),
                "UNK suppressed"
            );
        }
    }
}

#[test]
fn beam_one_is_greedy() {
    let vocab = 7;
    let cfg = SearchConfig {
        beam: 1,
        max_length_factor: 3.0,
        unk: Some(2),
        eos: EOS,
        ..Default::default()
    };
    let (mut bs, m) = search(vocab, 11, cfg.clone());
    let srcs = vec![vec![3, 5, 6], vec![4, 4]];
    let hist = bs.decode(&srcs).unwrap();
    for (src, h) in srcs.iter().zip(&hist) {
        let max_len = (3.0 * src.len() as f64).ceil() as usize;
        let (mut words, mut prev) = (vec![], 0);
        loop {
            let lp = host_lp(&m, vocab, prev, src);
            let w = (0..vocab)
                .filter(|&w| w != 2)
                .max_by(|&a, &b| lp[a].partial_cmp(&lp[b]).unwrap().then(b.cmp(&a)))
                .unwrap();
            words.push(w);
            prev = w;
            if w == EOS || words.len() >= max_len {
                break;
            }
        }
        assert_eq!(h.best().unwrap().hyp.words(), words);
    }
}

fn bests(h: &[History]) -> Vec<Vec<usize>> {
    h.iter()
        .map(|x| x.best().map(|f| f.hyp.words()).unwrap_or_default())
        .collect()
}

#[test]
fn batched_single_and_threaded_decoding_agree() {
    let vocab = 9;
    let cfg = SearchConfig {
        beam: 4,
        normalize: 1.0,
        max_length_factor: 2.0,
        unk: Some(2),
        eos: EOS,
        ..Default::default()
    };
    let srcs: Vec<Vec<usize>> = (0..13)
        .map(|i| (0..1 + i % 5).map(|j| 3 + (i * 7 + j * 3) % 6).collect())
        .collect();
    let (mut bs, _) = search(vocab, 5, cfg.clone());
    let batched = bests(&bs.decode(&srcs).unwrap());
    let single: Vec<Vec<usize>> = srcs
        .iter()
        .map(|s| bests(&bs.decode(std::slice::from_ref(s)).unwrap()).remove(0))
        .collect();
    assert_eq!(batched, single);
    let make = || {
        Ok(BeamSearch::new(
            vec![Box::new(TableScorer::random(vocab, 5)) as Box<dyn Scorer>],
            cfg.clone(),
        ))
    };
    let threaded = bests(&decode_parallel(&srcs, &make, 3, 2).unwrap());
    assert_eq!(threaded, single, "input order kept");
    // mini-batches cut by source words (7 words: batches of 1 to 3 sentences)
    let by_words = bests(&decode_parallel(&srcs, &make, MiniBatch::Words(7), 2).unwrap());
    assert_eq!(
        by_words, single,
        "input order kept with mini-batches by words"
    );
}

#[test]
fn ensembles_weight_their_scorers_and_report_costs() {
    let vocab = 6;
    let cfg = SearchConfig {
        beam: 3,
        max_length_factor: 2.0,
        eos: EOS,
        ..Default::default()
    };
    let a = TableScorer::random(vocab, 21).named("a", 0.7);
    let b = TableScorer::random(vocab, 22).named("b", 0.3);
    let mut bs = BeamSearch::new(vec![Box::new(a), Box::new(b)], cfg);
    let h = bs.decode(&[vec![3, 4]]).unwrap().remove(0);
    let best = h.best().unwrap();
    let total = 0.7 * best.hyp.costs[0] + 0.3 * best.hyp.costs[1];
    assert!(
        (total - best.hyp.cost).abs() < 1e-9,
        "cost = Σ weight × scorer cost"
    );
    let lines = nbest_lines(7, &h, 2, &["F0", "F1"], |w| format!("w{w}"), None);
    assert!(
        lines[0].starts_with("7 ||| w")
            && lines[0].contains("||| F0= ")
            && lines[0].contains(" F1= "),
        "{}",
        lines[0]
    );
}
