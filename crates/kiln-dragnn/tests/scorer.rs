//! The scorer against hand-computed counts: a small treebank with one error of each kind,
//! gold against itself, every head wrong, grouped scoring, tokenization mismatches, and the
//! Turkish treebank's dev part when `scripts/fetch-data.sh` has fetched it.

use std::path::PathBuf;

use kiln_dragnn::document::{
    read_conllu, read_conllu_file, read_turkish_treebank, split, Column, Sentence,
};
use kiln_dragnn::scorer::{score, score_grouped, Counts, Score, ScoreError};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Four gold sentences; 15 words, 4 of them punctuation (gold UPOS `PUNCT`).
const GOLD: &str = "\
# sent_id = h1
1\tAli\tali\tPROPN\tNNP\t_\t2\tnsubj\t_\t_
2\tgeldi\tgel\tVERB\tVB\t_\t0\troot\t_\t_
3\t.\t.\tPUNCT\t.\t_\t2\tpunct\t_\t_

# sent_id = h2
1\tBen\tben\tPRON\tPRP\t_\t3\tnsubj\t_\t_
2\tkitabı\tkitap\tNOUN\tNN\t_\t3\tobj\t_\t_
3\tokudum\toku\tVERB\tVB\t_\t0\troot\t_\t_
4\t,\t,\tPUNCT\t,\t_\t3\tpunct\t_\t_
5\tsonra\tsonra\tADV\tRB\t_\t6\tadvmod\t_\t_
6\tuyudum\tuyu\tVERB\tVB\t_\t3\tconj\t_\t_
7\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = h3
1\tEvin\tev\tNOUN\tNN\t_\t2\tnmod:poss\t_\t_
2\tkapısı\tkapı\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\taçık\taçık\tADJ\tJJ\t_\t0\troot\t_\t_

# sent_id = h4
1\tEvet\tevet\tINTJ\tUH\t_\t0\troot\t_\t_
2\t.\t.\tPUNCT\t.\t_\t1\tpunct\t_\t_
";

/// The gold with deliberate errors (marked `<-`); the last sentence is all right.
const SYSTEM: &str = "\
# sent_id = h1
1\tAli\tali\tPROPN\tNNP\t_\t3\tnsubj\t_\t_
2\tgeldi\tgel\tVERB\tVB\t_\t0\troot\t_\t_
3\t.\t.\tPUNCT\t.\t_\t2\tpunct\t_\t_

# sent_id = h2
1\tBen\tben\tPRON\tPRP\t_\t3\tnsubj\t_\t_
2\tkitabı\tkitap\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tokudum\toku\tVERB\tVB\t_\t0\troot\t_\t_
4\t,\t,\tPUNCT\t,\t_\t6\tpunct\t_\t_
5\tsonra\tsonra\tADJ\tRB\t_\t6\tadvmod\t_\t_
6\tuyudum\tuyu\tVERB\tVBD\t_\t3\tconj\t_\t_
7\t.\t.\tSYM\t.\t_\t3\tpunct\t_\t_

# sent_id = h3
1\tEvin\tev\tNOUN\tNN\t_\t2\tnmod\t_\t_
2\tkapısı\tkapı\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\taçık\taçık\tADJ\tJJ\t_\t_\troot\t_\t_

# sent_id = h4
1\tEvet\tevet\tINTJ\tUH\t_\t0\troot\t_\t_
2\t.\t.\tPUNCT\t.\t_\t1\tpunct\t_\t_
";

// The errors, word by word (P: punctuation by gold UPOS; U X H L: UPOS, XPOS, head, label):
//   h1 w1 Ali       H wrong (3 for 2), label right
//   h2 w2 kitabı    L wrong (nsubj for obj), head right
//   h2 w4 ,      P  H wrong (6 for 3)
//   h2 w5 sonra     U wrong (ADJ for ADV)
//   h2 w6 uyudum    X wrong (VBD for VB)
//   h2 w7 .      P  U wrong (SYM for PUNCT): still punctuation, since the gold UPOS decides
//   h3 w1 Evin      L wrong in its subtype only (nmod for nmod:poss)
//   h3 w3 açık      H wrong (`_`: a missing head is wrong, not an error)
// The other 7 words are right in every respect.
//
// All 15 words:
//   UPOS 15 - 2 (h2w5, h2w7) = 13; XPOS 15 - 1 (h2w6) = 14
//   heads 15 - 3 (h1w1, h2w4, h3w3) = 12; labels 15 - 2 (h2w2, h3w1) = 13
//   labeled 15 - 5 (h1w1, h2w2, h2w4, h3w1, h3w3) = 10
//   complete heads: h4 only = 1; complete labeled: h4 only = 1 (of 4 sentences)
// Without the 4 punctuation words (h1w3, h2w4, h2w7, h4w2), 11 words:
//   UPOS 11 - 1 (h2w5) = 10; XPOS 11 - 1 (h2w6) = 10
//   heads 11 - 2 (h1w1, h3w3) = 9; labels 11 - 2 (h2w2, h3w1) = 9
//   labeled 11 - 4 (h1w1, h2w2, h3w1, h3w3) = 7
//   complete heads: h2 (its only wrong head is the comma's) and h4 = 2; complete labeled: h4 = 1
const EXPECTED_ALL: Counts = Counts {
    words: 15,
    upos: 13,
    xpos: 14,
    heads: 12,
    labels: 13,
    labeled: 10,
    sentences: 4,
    complete_heads: 1,
    complete_labeled: 1,
};
const EXPECTED_NO_PUNCT: Counts = Counts {
    words: 11,
    upos: 10,
    xpos: 10,
    heads: 9,
    labels: 9,
    labeled: 7,
    sentences: 4,
    complete_heads: 2,
    complete_labeled: 1,
};

fn assert_close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() < 1e-9,
        "{what}: got {got}, expected {want}"
    );
}

fn hand_made() -> Result<(Vec<Sentence>, Vec<Sentence>), Box<dyn std::error::Error>> {
    Ok((read_conllu(GOLD)?, read_conllu(SYSTEM)?))
}

#[test]
fn hand_made_counts_and_percentages() -> TestResult {
    let (gold, system) = hand_made()?;
    let s = score(&gold, &system)?;
    assert_eq!(s.all, EXPECTED_ALL);
    assert_eq!(s.no_punct, EXPECTED_NO_PUNCT);

    assert_close(s.all.upos_pct(), 100.0 * 13.0 / 15.0, "UPOS");
    assert_close(s.all.xpos_pct(), 100.0 * 14.0 / 15.0, "XPOS");
    assert_close(s.all.uas_pct(), 80.0, "UAS");
    assert_close(s.all.las_pct(), 100.0 * 10.0 / 15.0, "LAS");
    assert_close(s.all.la_pct(), 100.0 * 13.0 / 15.0, "LA");
    assert_close(s.all.uas_exact_pct(), 25.0, "UAS exact");
    assert_close(s.all.las_exact_pct(), 25.0, "LAS exact");
    assert_close(s.no_punct.upos_pct(), 100.0 * 10.0 / 11.0, "UPOS no punct");
    assert_close(s.no_punct.xpos_pct(), 100.0 * 10.0 / 11.0, "XPOS no punct");
    assert_close(s.no_punct.uas_pct(), 100.0 * 9.0 / 11.0, "UAS no punct");
    assert_close(s.no_punct.las_pct(), 100.0 * 7.0 / 11.0, "LAS no punct");
    assert_close(s.no_punct.la_pct(), 100.0 * 9.0 / 11.0, "LA no punct");
    assert_close(s.no_punct.uas_exact_pct(), 50.0, "UAS exact no punct");
    assert_close(s.no_punct.las_exact_pct(), 25.0, "LAS exact no punct");

    // 13/15 = 86.67, 14/15 = 93.33, 12/15 = 80.00, 10/15 = 66.67, 9/11 = 81.82, 7/11 = 63.64
    assert_eq!(
        s.to_string(),
        "UPOS 86.67  XPOS 93.33  UAS 80.00  LAS 66.67  \
         (15 words; without punctuation: UAS 81.82  LAS 63.64)"
    );
    Ok(())
}

#[test]
fn sentence_by_sentence_sums_to_the_whole() -> TestResult {
    let (gold, system) = hand_made()?;
    let mut sum = Score::default();
    for (g, s) in gold.iter().zip(&system) {
        sum += score(std::slice::from_ref(g), std::slice::from_ref(s))?;
    }
    assert_eq!(sum, score(&gold, &system)?);
    // h1 alone: 3 words, Ali's head wrong; 2 words without the full stop
    let h1 = score(&gold[..1], &system[..1])?;
    assert_eq!((h1.all.words, h1.all.heads, h1.all.labeled), (3, 2, 2));
    assert_eq!((h1.no_punct.words, h1.no_punct.heads), (2, 1));
    Ok(())
}

#[test]
fn results_serialize_as_json() -> TestResult {
    let (gold, system) = hand_made()?;
    let report = score_grouped(&gold, &system, &["a", "b", "a", "b"])?;
    let json: serde_json::Value = serde_json::to_value(&report)?;
    assert_eq!(json["total"]["all"]["words"], 15);
    assert_eq!(json["total"]["no_punct"]["labeled"], 7);
    // group b is h2 and h4: 7 + 2 words
    assert_eq!(json["groups"]["b"]["all"]["words"], 9);
    Ok(())
}

/// Gold against itself: every metric 100.
fn assert_perfect(c: &Counts, what: &str) {
    assert!(c.words > 0, "{what}: no words");
    for (name, v) in [
        ("UPOS", c.upos_pct()),
        ("XPOS", c.xpos_pct()),
        ("UAS", c.uas_pct()),
        ("LAS", c.las_pct()),
        ("LA", c.la_pct()),
        ("UAS exact", c.uas_exact_pct()),
        ("LAS exact", c.las_exact_pct()),
    ] {
        assert_eq!(v, 100.0, "{what}: {name}");
    }
}

/// A copy of `gold` where every word's head differs from the gold one: the root becomes
/// another word (or `_` in a one-word sentence), any other head becomes the root.
fn every_head_wrong(gold: &[Sentence]) -> Result<Vec<Sentence>, Box<dyn std::error::Error>> {
    let mut out = gold.to_vec();
    for s in &mut out {
        for i in 0..s.len() {
            let wrong = match s.head(i) {
                Some(-1) if s.len() == 1 => None,
                Some(-1) => Some(if i == 0 { 1 } else { 0 }),
                _ => Some(-1),
            };
            s.set_head(i, wrong)?;
        }
    }
    Ok(out)
}

#[test]
fn gold_against_itself_and_every_head_wrong() -> TestResult {
    let (gold, _) = hand_made()?;
    let s = score(&gold, &gold)?;
    assert_perfect(&s.all, "all");
    assert_perfect(&s.no_punct, "no punct");
    assert_eq!((s.all.words, s.no_punct.words), (15, 11));

    let wrong = every_head_wrong(&gold)?;
    let s = score(&gold, &wrong)?;
    assert_eq!(
        (s.all.heads, s.all.labeled, s.all.complete_heads),
        (0, 0, 0)
    );
    assert_eq!(s.all.uas_pct(), 0.0);
    assert_eq!(s.all.las_pct(), 0.0);
    assert_eq!(s.no_punct.uas_pct(), 0.0);
    // tags and labels are untouched
    assert_eq!(s.all.upos_pct(), 100.0);
    assert_eq!(s.all.la_pct(), 100.0);
    Ok(())
}

#[test]
fn empty_input_scores_nan() -> TestResult {
    let s = score(&[], &[])?;
    assert_eq!(s, Score::default());
    assert!(s.all.uas_pct().is_nan() && s.no_punct.las_exact_pct().is_nan());
    // a sentence of punctuation only: no words without punctuation, but one sentence
    let gold = read_conllu("1\t.\t.\tPUNCT\t.\t_\t0\troot\t_\t_\n")?;
    let s = score(&gold, &gold)?;
    assert_eq!((s.no_punct.words, s.no_punct.sentences), (0, 1));
    assert!(s.no_punct.uas_pct().is_nan());
    assert_eq!(s.no_punct.uas_exact_pct(), 100.0);
    Ok(())
}

/// Every field of a [`Counts`], in declaration order.
fn fields(c: &Counts) -> [usize; 9] {
    [
        c.words,
        c.upos,
        c.xpos,
        c.heads,
        c.labels,
        c.labeled,
        c.sentences,
        c.complete_heads,
        c.complete_labeled,
    ]
}

#[test]
fn grouped_scores_sum_to_the_total() -> TestResult {
    let (gold, system) = hand_made()?;
    let report = score_grouped(&gold, &system, &["web", "wiki", "web", "blog"])?;
    assert_eq!(report.total, score(&gold, &system)?);
    assert_eq!(
        report.groups.keys().map(String::as_str).collect::<Vec<_>>(),
        ["blog", "web", "wiki"]
    );
    let (mut sum_all, mut sum_no_punct) = ([0usize; 9], [0usize; 9]);
    for g in report.groups.values() {
        for (acc, v) in sum_all.iter_mut().zip(fields(&g.all)) {
            *acc += v;
        }
        for (acc, v) in sum_no_punct.iter_mut().zip(fields(&g.no_punct)) {
            *acc += v;
        }
    }
    assert_eq!(sum_all, fields(&report.total.all));
    assert_eq!(sum_no_punct, fields(&report.total.no_punct));
    // web = h1 + h3: 6 words; heads wrong: Ali, açık; labels wrong: Evin
    let web = report.groups["web"].all;
    assert_eq!(
        (web.words, web.heads, web.labels, web.labeled),
        (6, 4, 5, 3)
    );
    // blog = h4: all right
    assert_eq!(report.groups["blog"].all.las_pct(), 100.0);
    // wiki = h2: 7 words, 2 of them punctuation (the comma and the full stop)
    assert_eq!(
        (
            report.groups["wiki"].all.words,
            report.groups["wiki"].no_punct.words
        ),
        (7, 5)
    );
    // owned names work too
    let owned: Vec<String> = ["a", "a", "a", "a"].map(String::from).to_vec();
    assert_eq!(
        score_grouped(&gold, &system, &owned)?.groups["a"],
        report.total
    );
    Ok(())
}

#[test]
fn grouped_scoring_errors() -> TestResult {
    let (gold, system) = hand_made()?;
    let err = score_grouped(&gold, &system, &["web", "wiki"]).unwrap_err();
    assert!(matches!(
        err,
        ScoreError::GroupCount {
            groups: 2,
            sentences: 4
        }
    ));
    assert_eq!(
        err.to_string(),
        "2 group names for 4 sentences (give one per sentence)"
    );
    let err = score_grouped(&gold, &system[..3], &["a"; 4]).unwrap_err();
    assert!(matches!(
        err,
        ScoreError::SentenceCount { gold: 4, system: 3 }
    ));
    Ok(())
}

#[test]
fn mismatched_tokenization_is_an_error() -> TestResult {
    let (gold, mut system) = hand_made()?;

    // sentence count
    let err = score(&gold, &system[1..]).unwrap_err();
    assert!(matches!(
        err,
        ScoreError::SentenceCount { gold: 4, system: 3 }
    ));
    assert_eq!(err.to_string(), "gold has 4 sentences, system has 3");

    // word count: h2 without its comma (IDs renumbered, heads of 5..7 shifted)
    let mut short = system.clone();
    short[1] = read_conllu(
        "# sent_id = h2\n\
         1\tBen\tben\tPRON\tPRP\t_\t3\tnsubj\t_\t_\n\
         2\tkitabı\tkitap\tNOUN\tNN\t_\t3\tobj\t_\t_\n\
         3\tokudum\toku\tVERB\tVB\t_\t0\troot\t_\t_\n\
         4\tsonra\tsonra\tADV\tRB\t_\t5\tadvmod\t_\t_\n\
         5\tuyudum\tuyu\tVERB\tVB\t_\t3\tconj\t_\t_\n\
         6\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_\n",
    )?
    .remove(0);
    let err = score(&gold, &short).unwrap_err();
    match &err {
        ScoreError::WordCount {
            sentence,
            sent_id,
            gold,
            system,
        } => {
            assert_eq!((*sentence, sent_id.as_deref()), (1, Some("h2")));
            assert_eq!((*gold, *system), (7, 6));
        }
        other => panic!("expected WordCount, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "sentence 1 (sent_id = h2): gold has 7 words, system has 6 \
         (scoring needs gold tokenization)"
    );
    // grouped scoring reports it too
    assert!(matches!(
        score_grouped(&gold, &short, &["x"; 4]),
        Err(ScoreError::WordCount { sentence: 1, .. })
    ));

    // form: h3's second word spelled differently
    system[2].set_field(1, Column::Form, "kapisi")?;
    let err = score(&gold, &system).unwrap_err();
    match &err {
        ScoreError::Form {
            sentence,
            sent_id,
            word,
            gold,
            system,
        } => {
            assert_eq!((*sentence, sent_id.as_deref(), *word), (2, Some("h3"), 1));
            assert_eq!((gold.as_str(), system.as_str()), ("kapısı", "kapisi"));
        }
        other => panic!("expected Form, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "sentence 2 (sent_id = h3), word 1 (ID 2): gold FORM `kapısı`, system FORM `kapisi` \
         (scoring needs gold tokenization)"
    );

    // without a sent_id the message names the index only
    let g = read_conllu("1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n")?;
    let s = read_conllu("1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n2\tb\t_\tX\t_\t_\t1\tdep\t_\t_\n")?;
    let err = score(&g, &s).unwrap_err();
    assert!(matches!(
        err,
        ScoreError::WordCount {
            sentence: 0,
            sent_id: None,
            gold: 1,
            system: 2
        }
    ));
    assert_eq!(
        err.to_string(),
        "sentence 0: gold has 1 words, system has 2 (scoring needs gold tokenization)"
    );
    Ok(())
}

/// The Turkish treebank directory, or `None` after saying why the test skips.
fn treebank_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../data/turkish-treebanks"
    ));
    if dir.join("web.conllu").exists() && dir.join("wiki.conllu").exists() {
        Some(dir)
    } else {
        eprintln!(
            "skipping: {} has no web.conllu/wiki.conllu (run scripts/fetch-data.sh)",
            dir.display()
        );
        None
    }
}

#[test]
fn turkish_dev_against_itself_and_all_root() -> TestResult {
    let Some(dir) = treebank_dir() else {
        return Ok(());
    };
    let dev = read_turkish_treebank(&dir)?.dev;
    assert!(!dev.is_empty());

    // the reference counts, from the raw columns by a plain loop
    let (mut words, mut root, mut words_np, mut root_np) = (0usize, 0usize, 0usize, 0usize);
    for s in &dev {
        for i in 0..s.len() {
            let is_root = s.field(i, Column::Head) == "0";
            words += 1;
            root += usize::from(is_root);
            if s.field(i, Column::Upos) != "PUNCT" {
                words_np += 1;
                root_np += usize::from(is_root);
            }
        }
    }
    assert!(words_np < words, "the dev part has punctuation");

    let s = score(&dev, &dev)?;
    assert_eq!((s.all.words, s.no_punct.words), (words, words_np));
    assert_perfect(&s.all, "dev all");
    assert_perfect(&s.no_punct, "dev no punct");

    // every head set to the root: HEAD 0, which is `Some(-1)` in SyntaxNet's convention
    // (`set_head(i, Some(0))` would attach word i to the first word)
    let mut all_root = dev.clone();
    for s in &mut all_root {
        for i in 0..s.len() {
            s.set_head(i, Some(-1))?;
            assert_eq!(s.field(i, Column::Head), "0");
        }
    }
    let s = score(&dev, &all_root)?;
    assert_eq!((s.all.heads, s.no_punct.heads), (root, root_np));
    // labels are untouched, so exactly the root-headed words are labeled right
    assert_eq!((s.all.labeled, s.no_punct.labeled), (root, root_np));
    assert_close(
        s.all.uas_pct(),
        100.0 * root as f64 / words as f64,
        "dev UAS all-root",
    );
    assert_close(
        s.no_punct.uas_pct(),
        100.0 * root_np as f64 / words_np as f64,
        "dev UAS all-root no punct",
    );
    assert_eq!(s.all.upos_pct(), 100.0);

    // every head wrong: UAS 0
    let wrong = every_head_wrong(&dev)?;
    assert_eq!(score(&dev, &wrong)?.all.heads, 0);

    // grouped by source file: the dev part holds web's dev sentences, then wiki's
    let web_dev = split(read_conllu_file(dir.join("web.conllu"))?).dev.len();
    let groups: Vec<&str> = (0..dev.len())
        .map(|i| if i < web_dev { "web" } else { "wiki" })
        .collect();
    let report = score_grouped(&dev, &all_root, &groups)?;
    assert_eq!(report.total, s);
    let (web, wiki) = (report.groups["web"].all, report.groups["wiki"].all);
    assert_eq!(web.words + wiki.words, words);
    assert_eq!(web.heads + wiki.heads, root);
    assert_eq!(web.sentences, web_dev);
    eprintln!("dev, every head the root: {report}");
    Ok(())
}
