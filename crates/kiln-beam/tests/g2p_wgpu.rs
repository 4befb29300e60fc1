//! g2p-en decoding on the GPU backend (skipped with a message when kiln has no wgpu adapter,
//! or without the model fetched by `scripts/fetch-data.sh`): with the GPU as the default
//! device the parameters are uploaded once, at load; a decode moves only its own small
//! per-step inputs; and the phonemes and scores are the CPU's.
//!
//! Depends on `kiln-beam`'s public API and kiln's.

mod common;

use kiln::Device;
use kiln_beam::{BeamSearch, G2p, SearchConfig};

fn config(beam: usize) -> SearchConfig {
    SearchConfig {
        beam,
        bos: G2p::BOS,
        eos: G2p::EOS,
        unk: Some(G2p::UNK),
        max_length_factor: 20.0,
        ..Default::default()
    }
}

/// Best hypothesis per word: its phoneme ids and its cost.
fn decode(model: G2p, words: &[&str], beam: usize) -> Vec<(Vec<usize>, f64)> {
    let srcs: Vec<Vec<usize>> = words.iter().map(|w| G2p::encode_word(w)).collect();
    let mut bs = BeamSearch::new(vec![Box::new(model)], config(beam));
    bs.decode(&srcs)
        .unwrap()
        .iter()
        .map(|h| {
            let b = h.best().unwrap();
            (b.hyp.words(), b.hyp.cost)
        })
        .collect()
}

#[test]
fn decoding_on_the_gpu_keeps_the_parameters_resident_and_matches_the_cpu() {
    let Some(path) = common::data_file("g2p_en/checkpoint20.npz") else {
        return;
    };
    if !Device::Wgpu.is_available() {
        eprintln!("g2p on wgpu: skipped: {}", Device::Wgpu.describe());
        return;
    }
    let words = [
        "cat",
        "through",
        "kiln",
        "onomatopoeia",
        "rust",
        "activationist",
    ];
    kiln::set_default_device(Device::Cpu).unwrap();
    let cpu = decode(G2p::load(&path).unwrap(), &words, 4);

    kiln::set_default_device(Device::Wgpu).unwrap();
    let before = Device::Wgpu.transfers();
    let model = G2p::load(&path).unwrap();
    let at_load = Device::Wgpu.transfers() - before;
    let before = Device::Wgpu.transfers();
    let gpu = decode(model, &words, 4);
    let in_decode = Device::Wgpu.transfers() - before;
    kiln::set_default_device(Device::Cpu).unwrap();
    eprintln!(
        "g2p on wgpu: at load {at_load:?}; decoding {} words at beam 4 {in_decode:?}",
        words.len()
    );

    for ((w, (cw, cc)), (gw, gc)) in words.iter().zip(&cpu).zip(&gpu) {
        assert_eq!(cw, gw, "{w}: phonemes");
        assert!(
            (cc - gc).abs() < 1e-4,
            "{w}: cost {gc} on the GPU, {cc} on the CPU"
        );
    }
    // The weights went up once, at load (megabytes); a whole decode moves a small fraction
    // of that: the per-step ids and scores, never a weight.
    assert!(
        at_load.uploaded_bytes > 1 << 20,
        "the parameters were uploaded at load: {at_load:?}"
    );
    assert!(
        in_decode.uploaded_bytes * 8 < at_load.uploaded_bytes,
        "a decode re-uploaded weights: {in_decode:?} against {at_load:?} at load"
    );
}
