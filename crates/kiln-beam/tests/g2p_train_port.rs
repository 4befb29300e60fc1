//! `kiln-g2p-train` on kiln-train's estimator against the hand-written training loop it
//! replaced (the loop as of commit 89b82e8, unchanged since 1c3af42, kept here as the
//! reference): the same per-epoch train and dev losses and a byte-identical saved model,
//! through several halvings of the learning rate. Skips when cmudict is absent
//! (`scripts/fetch-data.sh` fetches it).

mod common;

use kiln_beam::{phoneme_vocab, read_cmudict, AttentionConfig, AttentionModel, Entry, G2p, Split};
use kiln_optim::{clip_by_global_norm, Adam, Optimizer, Parameter};

type Batch = (Vec<Vec<usize>>, Vec<Vec<usize>>);

fn batches(entries: &[&Entry], size: usize) -> Vec<Batch> {
    let mut sorted: Vec<&Entry> = entries.to_vec();
    sorted.sort_by_key(|e| (e.word.len(), e.phonemes.len(), e.word.clone()));
    sorted
        .chunks(size)
        .map(|c| {
            (
                c.iter().map(|e| G2p::encode_word(&e.word)).collect(),
                c.iter().map(|e| e.phonemes.clone()).collect(),
            )
        })
        .collect()
}

fn shuffle<T>(v: &mut [T], seed: &mut u64) {
    for i in (1..v.len()).rev() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        v.swap(i, (*seed % (i as u64 + 1)) as usize);
    }
}

fn dev_loss(model: &AttentionModel, dev: &[Batch]) -> f64 {
    let (mut total, mut tokens) = (0.0, 0usize);
    for (src, tgt) in dev {
        let n: usize = tgt.iter().map(|t| t.len() + 1).sum();
        let loss = model
            .loss_with_bos(src, tgt, G2p::BOS, G2p::EOS)
            .expect("loss");
        total += loss.item::<f32>().expect("item") as f64 * n as f64;
        tokens += n;
    }
    total / tokens.max(1) as f64
}

fn round(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// The hand-written loop: returns each epoch's (train loss, dev loss, learning rate) and
/// saves the best model to `out`.
#[allow(clippy::too_many_arguments)]
fn reference(
    model: &AttentionModel,
    train: &[&Entry],
    dev: &[&Entry],
    epochs: usize,
    batch: usize,
    lr: f64,
    seed: u64,
    out: &std::path::Path,
) -> Vec<(f64, f64, f64)> {
    let mut train_batches = batches(train, batch);
    let dev_batches = batches(&dev[..dev.len().min(2000)], 256);
    let params: Vec<&Parameter> = model.parameters().iter().collect();
    let mut opt = Adam::new(lr);
    let mut seed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut best = f64::INFINITY;
    let mut best_values: Vec<kiln::Array> = params.iter().map(|p| p.value()).collect();
    let mut lines = Vec::new();
    for _ in 1..=epochs {
        shuffle(&mut train_batches, &mut seed);
        let (mut sum, mut steps) = (0.0f64, 0usize);
        for (src, tgt) in &train_batches {
            let loss = model
                .loss_with_bos(src, tgt, G2p::BOS, G2p::EOS)
                .expect("loss");
            let values: Vec<kiln::Array> = params.iter().map(|p| p.value()).collect();
            let wrt: Vec<&kiln::Array> = values.iter().collect();
            let grads = kiln::grad(&loss, &wrt).expect("grad");
            let (grads, _norm) = clip_by_global_norm(&grads, 5.0).expect("clip");
            opt.step(&params, &grads, &[&loss]).expect("step");
            sum += loss.item::<f32>().expect("item") as f64;
            steps += 1;
        }
        let dev = dev_loss(model, &dev_batches);
        lines.push((
            round(sum / steps.max(1) as f64),
            round(dev),
            opt.learning_rate(),
        ));
        if dev < best {
            best = dev;
            best_values = params.iter().map(|p| p.value()).collect();
            model.save(out).expect("save");
        } else {
            for (p, v) in params.iter().zip(&best_values) {
                p.assign(v.clone()).expect("assign");
            }
            opt.set_learning_rate(opt.learning_rate() / 2.0);
        }
    }
    lines
}

#[test]
fn the_estimator_port_repeats_the_hand_written_loop_bit_for_bit() {
    let Some(dict) = common::data_file("cmudict/cmudict.dict") else {
        eprintln!("skipped: data/cmudict/cmudict.dict is absent (run scripts/fetch-data.sh)");
        return;
    };
    let entries = read_cmudict(&dict).expect("cmudict");
    let part =
        |s: Split| -> Vec<&Entry> { entries.iter().filter(|e| Split::of(&e.word) == s).collect() };
    let (mut train, dev) = (part(Split::Train), part(Split::Dev));
    train.truncate(1200);
    let (epochs, batch, lr, seed) = (8, 64, 0.1, 1);
    let dir = std::env::temp_dir().join(format!("kiln-g2p-port-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let want_file = dir.join("reference.safetensors");
    let cfg = AttentionConfig {
        src_vocab: 29,
        tgt_vocab: phoneme_vocab(),
        emb: 12,
        enc_hidden: 12,
        dec_hidden: 12,
        att_hidden: 12,
        out_hidden: 12,
    };
    let model = AttentionModel::init(cfg, seed, kiln::DType::F32).expect("init");
    let want = reference(&model, &train, &dev, epochs, batch, lr, seed, &want_file);
    // the run must halve the learning rate before its last epoch, or it tests too little
    assert!(want[..epochs - 1].iter().any(|l| l.2 < lr), "{want:?}");
    let got_file = dir.join("port.safetensors");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln-g2p-train"))
        .args([
            "--max-words",
            "1200",
            "--epochs",
            "8",
            "--batch",
            "64",
            "--lr",
            "0.1",
        ])
        .args([
            "--seed",
            "1",
            "--size",
            "12,12,12,12,12",
            "--eval-words",
            "1",
            "--dict",
        ])
        .arg(&dict)
        .arg("--out")
        .arg(&got_file)
        .output()
        .expect("run kiln-g2p-train");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Vec<(f64, f64, f64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("epoch").is_some())
        .map(|v| {
            let f = |k: &str| v[k].as_f64().expect("a number");
            (f("train_loss"), f("dev_loss"), f("lr"))
        })
        .collect();
    assert_eq!(got, want);
    let same = std::fs::read(&got_file).expect("the port's model")
        == std::fs::read(&want_file).expect("the reference model");
    std::fs::remove_dir_all(&dir).ok();
    assert!(same, "the saved models differ");
}
