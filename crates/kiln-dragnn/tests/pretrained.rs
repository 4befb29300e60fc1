//! The committed Turkish tagger → parser (`models/turkish/`): it loads, parses input whose
//! predicted columns are `_` into valid CoNLL-U that keeps every other column, and (when
//! `data/turkish-treebanks/` holds the treebank) scores on the test part as recorded in the
//! model's README, within a small margin, against the gold treebank.
//!
//! Depends on kiln-dragnn's model, document and scorer modules.

use std::path::PathBuf;

use kiln_dragnn::document::{read_conllu, read_conllu_file, split, Column, Sentence};
use kiln_dragnn::model::infer::{parse, InferOptions};
use kiln_dragnn::model::MasterModel;
use kiln_dragnn::scorer::score;

fn model_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/models/turkish"))
}

fn treebank_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../data/turkish-treebanks"
    ))
}

/// The sentence with UPOS, XPOS, FEATS, HEAD and DEPREL set to `_`.
fn blank(s: &Sentence) -> Sentence {
    let mut s = s.clone();
    for i in 0..s.len() {
        for c in [
            Column::Upos,
            Column::Xpos,
            Column::Feats,
            Column::Head,
            Column::Deprel,
        ] {
            s.set_field(i, c, "_").expect("a blank field is valid");
        }
    }
    s
}

#[test]
fn the_committed_model_parses_blank_input_into_valid_trees() {
    let model = MasterModel::load(model_dir()).expect("the committed model loads");
    let input = read_conllu(
        "# sent_id = t1\n\
         # text = Kitabı okudum.\n\
         1\tKitabı\tkitap\t_\t_\t_\t_\t_\t_\t_\n\
         2\tokudum\toku\t_\t_\t_\t_\t_\t_\tSpaceAfter=No\n\
         3\t.\t.\t_\t_\t_\t_\t_\t_\t_\n\n\
         1\tAçık\taçık\t_\t_\t_\t_\t_\t_\tSpaceAfter=No\n\
         2\tla\t_\t_\t_\t_\t_\t_\t_\tSpaceAfter=No\n\
         3\tnma\t_\t_\t_\t_\t_\t_\t_\tSpaceAfter=No\n\
         4\tyan\t_\t_\t_\t_\t_\t_\t_\t_\n\
         5\tsorular\tsoru\t_\t_\t_\t_\t_\t_\t_\n",
    )
    .unwrap();
    let out = parse(&model, &input, &InferOptions::default()).unwrap();
    assert_eq!(out.len(), input.len());
    for (a, b) in input.iter().zip(&out) {
        assert_eq!(
            a.comments().collect::<Vec<_>>(),
            b.comments().collect::<Vec<_>>()
        );
        assert_eq!(a.len(), b.len());
        let mut roots = 0;
        for i in 0..a.len() {
            for c in [
                Column::Id,
                Column::Form,
                Column::Lemma,
                Column::Feats,
                Column::Deps,
                Column::Misc,
            ] {
                assert_eq!(a.field(i, c), b.field(i, c), "{c} of word {i}");
            }
            assert_ne!(b.upos(i), "_");
            assert_ne!(b.deprel(i), "_");
            let head: usize = b.field(i, Column::Head).parse().expect("a numeric HEAD");
            assert!(head <= b.len() && head != i + 1);
            roots += usize::from(head == 0);
            // following heads from any word reaches the root without a cycle
            let mut at = i + 1;
            for _ in 0..=b.len() {
                if at == 0 {
                    break;
                }
                at = b.field(at - 1, Column::Head).parse().unwrap();
            }
            assert_eq!(at, 0, "word {i} is on a cycle");
        }
        assert_eq!(roots, 1);
    }
}

/// The test-part scores recorded in `models/turkish/README.md`, less a margin for
/// floating-point differences between machines (a changed model or a regression in
/// features, network or inference fails this).
const MIN_UPOS: f64 = 95.6;
const MIN_UAS: f64 = 87.2;
const MIN_LAS: f64 = 81.6;

#[test]
fn the_committed_model_scores_as_recorded_on_the_test_part() {
    let dir = treebank_dir();
    if !dir.join("web.conllu").exists() {
        assert!(
            std::env::var("CI").is_err(),
            "CI must have the treebank: run scripts/fetch-data.sh"
        );
        eprintln!(
            "skipped: no treebank in {} (scripts/fetch-data.sh)",
            dir.display()
        );
        return;
    }
    let model = MasterModel::load(model_dir()).unwrap();
    let mut gold = Vec::new();
    for file in ["web.conllu", "wiki.conllu"] {
        gold.extend(split(read_conllu_file(dir.join(file)).unwrap()).test);
    }
    let input: Vec<Sentence> = gold.iter().map(blank).collect();
    let out = parse(&model, &input, &InferOptions::default()).unwrap();
    let s = score(&gold, &out).unwrap();
    eprintln!("test: {s}");
    assert!(s.all.upos_pct() >= MIN_UPOS, "{s}");
    assert!(s.all.uas_pct() >= MIN_UAS, "{s}");
    assert!(s.all.las_pct() >= MIN_LAS, "{s}");
}
