//! Tests of `kiln_dragnn::features`: the FML parser on every channel of the committed master
//! specs and on the Chen & Manning parser set of the reference (20 words, 20 tags, 12
//! labels); the extractor against features computed by hand from the trees of
//! `fixtures/features.conllu` at parser states reached by explicit arc-standard actions
//! (word, tag and label of the input, the stack, children, siblings and heads); link
//! features; `last-action`; `prefix`/`suffix`; `char-ngram` (several features per slot);
//! the word shapes of `token {digit hyphen
//! punctuation-amount quote}` on `fixtures/features-shape.conllu` (one sentence written for
//! these tests: quotes, a hyphen, digits, capitals); hostile templates give errors, not
//! panics.
//!
//! Expected ids are written from the term maps of the three sentences of
//! `features.conllu`, derived by hand (ids by descending count, then byte order):
//! - words (W = 16): `.`=0 `,`=1 Bill=2 Ev=3 Sue=4 Vamos=5 a=6 and=7 coffee=8 dedi=9
//!   deyim=10 el=11 likes=12 mar=13 nos=14 tea=15; unknown 16, `<OUTSIDE>` 17, `<ROOT>` 18;
//! - tags (T = 8): NOUN=0 VERB=1 PUNCT=2 PROPN=3 ADP=4 CCONJ=5 DET=6 PRON=7; unknown 8,
//!   `<OUTSIDE>` 9, `<ROOT>` 10;
//! - labels (L = 13): root=0 obj=1 p=2 case=3 cc=4 ccomp=5 conj=6 det=7 ig=8 nsubj=9 obl=10
//!   orphan=11 punct=12; unknown 13, `<OUTSIDE>` 14, `<ROOT>` 15 (also an unattached token).
//!
//! Arc-standard actions: SHIFT 0, LEFT_ARC(l) 1+2l, RIGHT_ARC(l) 2+2l.
//!
//! Depends on kiln-dragnn's public API (`document`, `term_map`, `spec`, `transition`,
//! `features`) and `proptest`.

use std::path::PathBuf;
use std::sync::Arc;

use kiln_dragnn::document::{read_conllu, Sentence};
use kiln_dragnn::features::chen_manning::{fml as cm_fml, LABEL_LOCATORS, LOCATORS as CM_LOCATORS};
use kiln_dragnn::features::parse::{parse_fml, parse_templates};
use kiln_dragnn::features::template::{Feature, TokenValue};
use kiln_dragnn::features::{
    fixed_channel, fixed_channel_with_actions, link_channel, FeatureError, FixedChannel,
    FixedFeatures, LinkChannel,
};
use kiln_dragnn::spec::{fml_templates, FixedFeatureChannel, LinkedFeatureChannel, MasterSpec};
use kiln_dragnn::term_map::{TermMapOptions, TermMaps};
use kiln_dragnn::transition::{create, ParserState, NO_PARAMS};
use proptest::prelude::*;

const FIXTURE: &str = include_str!("fixtures/features.conllu");
const SHAPES: &str = include_str!("fixtures/features-shape.conllu");

fn doc() -> Vec<Sentence> {
    read_conllu(FIXTURE).unwrap()
}

fn maps_of(sentences: &[Sentence]) -> TermMaps {
    TermMaps::build(sentences, &TermMapOptions::default())
}

fn fixed_spec(name: &str, fml: &str) -> FixedFeatureChannel {
    FixedFeatureChannel {
        name: Some(name.into()),
        fml: Some(fml.into()),
        ..Default::default()
    }
}

fn link_spec(name: &str, fml: &str) -> LinkedFeatureChannel {
    LinkedFeatureChannel {
        name: Some(name.into()),
        fml: Some(fml.into()),
        ..Default::default()
    }
}

fn fixed(fml: &str, maps: &TermMaps) -> Box<dyn FixedFeatures> {
    fixed_channel(&fixed_spec("test", fml), maps).unwrap_or_else(|e| panic!("{fml}: {e}"))
}

/// The state of `sentence` after the arc-standard `actions` (each must be allowed).
fn arc_standard(sentence: &Sentence, maps: &TermMaps, actions: &[usize]) -> ParserState {
    let sys = create("arc-standard", NO_PARAMS).unwrap();
    let mut s = sys.initial_state(Arc::new(sentence.clone()), maps);
    for &a in actions {
        sys.perform(&mut s, a).unwrap();
    }
    s
}

/// The ids of `channel` for `state`, one per slot (`None`: no feature); at most one per slot.
fn ids(channel: &dyn FixedFeatures, state: &ParserState) -> Vec<Option<i64>> {
    let mut out = Vec::new();
    channel.extract(state, &mut out);
    let mut ids = vec![None; channel.size()];
    for f in out {
        assert_eq!(f.weight, 1.0);
        assert!(ids[f.slot].is_none(), "two features in slot {}", f.slot);
        ids[f.slot] = Some(f.id);
    }
    ids
}

/// The ids of a channel whose every slot gives a feature.
fn all_ids(channel: &dyn FixedFeatures, state: &ParserState) -> Vec<i64> {
    ids(channel, state)
        .into_iter()
        .map(|id| id.expect("every slot gives a feature"))
        .collect()
}

// ---------------------------------------------------------------------------------------
// The Chen & Manning set of the reference

struct Cm {
    words: Box<dyn FixedFeatures>,
    tags: Box<dyn FixedFeatures>,
    labels: Box<dyn FixedFeatures>,
}

fn cm(maps: &TermMaps) -> Cm {
    Cm {
        words: fixed(&cm_fml(&CM_LOCATORS, "word"), maps),
        tags: fixed(&cm_fml(&CM_LOCATORS, "tag"), maps),
        labels: fixed(&cm_fml(LABEL_LOCATORS, "label"), maps),
    }
}

#[test]
fn the_term_maps_are_the_ones_the_expectations_assume() {
    let maps = maps_of(&doc());
    let words = [
        ".", ",", "Bill", "Ev", "Sue", "Vamos", "a", "and", "coffee", "dedi", "deyim", "el",
        "likes", "mar", "nos", "tea",
    ];
    assert_eq!(maps.words.terms().collect::<Vec<_>>(), words);
    let tags = [
        "NOUN", "VERB", "PUNCT", "PROPN", "ADP", "CCONJ", "DET", "PRON",
    ];
    assert_eq!(maps.tags.terms().collect::<Vec<_>>(), tags);
    let labels = [
        "root", "obj", "p", "case", "cc", "ccomp", "conj", "det", "ig", "nsubj", "obl", "orphan",
        "punct",
    ];
    assert_eq!(maps.labels.terms().collect::<Vec<_>>(), labels);
}

#[test]
fn chen_manning_set_parses_and_sizes() {
    let maps = maps_of(&doc());
    for (feature, locators, size, vocabulary) in [
        ("word", &CM_LOCATORS[..], 20, 16 + 3),
        ("tag", &CM_LOCATORS[..], 20, 8 + 3),
        ("label", LABEL_LOCATORS, 12, 13 + 3),
    ] {
        let fml = cm_fml(locators, feature);
        let nodes = parse_fml(&fml).unwrap();
        assert_eq!(nodes.len(), size);
        let templates = parse_templates(&fml).unwrap();
        let texts: Vec<String> = templates.iter().map(|t| t.to_string()).collect();
        assert_eq!(texts, fml_templates(&fml).unwrap());
        let mut spec = fixed_spec(feature, &fml);
        spec.size = Some(size as i32);
        let channel = fixed_channel(&spec, &maps).unwrap();
        assert_eq!(channel.size(), size);
        assert_eq!(channel.vocabulary_size(), vocabulary, "{feature}");
    }
}

#[test]
fn english_state_after_eight_actions() {
    // Sue ← likes → coffee, likes → Bill, and ← Bill → tea; tokens 0 Sue 1 likes 2 coffee
    // 3 and 4 Bill 5 tea. SHIFT SHIFT LEFT_ARC(nsubj) SHIFT RIGHT_ARC(obj) SHIFT SHIFT
    // LEFT_ARC(cc): stack [root, likes, Bill], input at tea; heads so far
    // Sue→likes, coffee→likes, and→Bill.
    let doc = doc();
    let maps = maps_of(&doc);
    let s = arc_standard(&doc[1], &maps, &[0, 0, 19, 0, 4, 0, 0, 9]);
    assert_eq!(s.stack_slice(), [-1, 1, 4]);
    assert_eq!(s.heads(), [1, -1, 1, 4, -1, -1]);
    let cm = cm(&maps);
    #[rustfmt::skip]
    let words = [
        15, 17, 17, 17,  // tea, nothing after it
        2, 12, 18, 17,   // Bill, likes, <ROOT>, below the bottom
        17, 17,          // Bill has no right child
        7, 17,           // Bill's left child is and; and has no right sibling (tea is unattached)
        8, 4,            // likes's rightmost child coffee, and its left sibling Sue
        4, 8,            // likes's leftmost child Sue, and its right sibling coffee
        17, 17, 17, 17,  // and has no child; coffee and Sue have none
    ];
    assert_eq!(all_ids(&*cm.words, &s), words);
    #[rustfmt::skip]
    let tags = [
        0, 9, 9, 9,      // NOUN
        3, 1, 10, 9,     // PROPN VERB <ROOT>
        9, 9, 5, 9,      // CCONJ
        0, 3, 3, 0,      // NOUN PROPN PROPN NOUN
        9, 9, 9, 9,
    ];
    assert_eq!(all_ids(&*cm.tags, &s), tags);
    #[rustfmt::skip]
    let labels = [
        14, 14, 4, 14,   // and: cc
        1, 9, 9, 1,      // coffee: obj, Sue: nsubj
        14, 14, 14, 14,
    ];
    assert_eq!(all_ids(&*cm.labels, &s), labels);

    let action = fixed("last-action", &maps);
    assert_eq!(all_ids(&*action, &s), [9 + 1]); // LEFT_ARC(cc) = 9
    assert_eq!(action.vocabulary_size(), 1 + 2 * 13 + 1);
    let links = link_channel(&link_spec(
        "tagger",
        "input.focus stack.focus stack(1).focus",
    ))
    .unwrap();
    assert_eq!(links.extract(&s), [5, 4, 1]);
    let labels_here = fixed(
        "stack.label stack(1).label stack(2).label stack(3).label",
        &maps,
    );
    // Bill and likes are unattached: <ROOT>; the root itself: <ROOT>; nothing: <OUTSIDE>.
    assert_eq!(all_ids(&*labels_here, &s), [15, 15, 15, 14]);
}

#[test]
fn english_initial_state() {
    // Stack [root], input at Sue, no arcs. Every head is -1, so (as in SyntaxNet) the
    // root's rightmost child is the last token, tea, and its left sibling is Bill.
    let doc = doc();
    let maps = maps_of(&doc);
    let s = arc_standard(&doc[1], &maps, &[]);
    let cm = cm(&maps);
    #[rustfmt::skip]
    let words = [
        4, 12, 8, 7,     // Sue likes coffee and
        18, 17, 17, 17,  // <ROOT>, nothing below it
        15, 2,           // stack.child(1) = tea, its left sibling Bill
        17, 17,          // the root has no leftmost child
        17, 17, 17, 17,  // no stack(1)
        17, 17, 17, 17,  // tea has no child
    ];
    assert_eq!(all_ids(&*cm.words, &s), words);
    assert_eq!(
        all_ids(&*cm.labels, &s),
        [15, 15, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14]
    );
    assert_eq!(all_ids(&*fixed("last-action", &maps), &s), [0]);
    let links = link_channel(&link_spec(
        "tagger",
        "input.focus stack.focus stack(1).focus",
    ))
    .unwrap();
    assert_eq!(links.extract(&s), [0, -1, -1]);
    let s = arc_standard(&doc[1], &maps, &[0]);
    assert_eq!(links.extract(&s), [1, 0, -1]);
    assert_eq!(all_ids(&*fixed("last-action", &maps), &s), [1]);
}

#[test]
fn english_final_state() {
    // All twelve actions: ... SHIFT RIGHT_ARC(orphan) RIGHT_ARC(conj) RIGHT_ARC(root).
    // Stack [root], input consumed, heads Sue→likes coffee→likes and→Bill Bill→likes
    // tea→Bill, likes→root.
    let doc = doc();
    let maps = maps_of(&doc);
    let s = arc_standard(&doc[1], &maps, &[0, 0, 19, 0, 4, 0, 0, 9, 0, 24, 14, 2]);
    assert!(create("arc-standard", NO_PARAMS).unwrap().is_final(&s));
    assert_eq!(s.heads(), [1, -1, 1, 4, 1, 4]);
    let cm = cm(&maps);
    #[rustfmt::skip]
    let words = [
        17, 17, 17, 17,
        18, 17, 17, 17,
        12, 17,          // the root's rightmost child likes; nothing left of it with head -1
        17, 17,
        17, 17, 17, 17,
        2, 17,           // stack.child(2) = likes's rightmost child Bill
        17, 17,
    ];
    assert_eq!(all_ids(&*cm.words, &s), words);
    assert_eq!(
        all_ids(&*cm.labels, &s),
        [0, 14, 14, 14, 14, 14, 14, 14, 6, 14, 14, 14] // likes: root; Bill: conj
    );
    assert_eq!(all_ids(&*fixed("last-action", &maps), &s), [2 + 1]);
    let links = link_channel(&link_spec(
        "tagger",
        "input.focus stack.focus stack(1).focus",
    ))
    .unwrap();
    assert_eq!(links.extract(&s), [-1, -1, -1]);
}

/// Spanish: 0 Vamos 1 nos 2 a 3 el 4 mar 5 `.`; SHIFT SHIFT RIGHT_ARC(obj) SHIFT SHIFT
/// SHIFT LEFT_ARC(det): stack [root, Vamos, a, mar], input at `.`, heads nos→Vamos,
/// el→mar.
fn spanish_state(maps: &TermMaps) -> ParserState {
    let s = arc_standard(&doc()[0], maps, &[0, 0, 4, 0, 0, 0, 15]);
    assert_eq!(s.stack_slice(), [-1, 0, 2, 4]);
    assert_eq!(s.heads(), [-1, 0, -1, 4, -1, -1]);
    s
}

#[test]
fn spanish_heads_children_and_labels() {
    let maps = maps_of(&doc());
    let s = spanish_state(&maps);
    let heads = fixed(
        "stack.head(1).word stack.head.word stack.child(-1).head(1).word \
         stack.child(-1).head(2).word stack(1).head(1).word input.head(1).word \
         stack(3).head(1).word stack(4).head(1).word stack(2).child(1).word \
         stack(2).child(1).head(1).word",
        &maps,
    );
    #[rustfmt::skip]
    let expected = [
        18,  // mar is unattached: its head is the root
        13,  // a bare `head` is head(0), the identity (SyntaxNet's default argument): mar
        13,  // el's head: mar
        18,  // el → mar → root
        18,  // a is unattached
        18,  // `.` is unattached
        18,  // the root's head is the root
        17,  // no stack(4)
        14,  // Vamos's rightmost child: nos
        5,   // nos's head: Vamos
    ];
    assert_eq!(all_ids(&*heads, &s), expected);
    let labels = fixed(
        "stack(2).child(1).label stack.child(-1).label stack.label stack(3).label stack(4).label",
        &maps,
    );
    assert_eq!(all_ids(&*labels, &s), [1, 7, 15, 15, 14]); // obj, det, <ROOT> x2, <OUTSIDE>
    assert_eq!(all_ids(&*fixed("last-action", &maps), &s), [15 + 1]);
    let links = link_channel(&link_spec(
        "l",
        "input.focus stack.focus stack(1).focus stack(3).focus stack.child(-1).focus input(1).focus",
    ))
    .unwrap();
    assert_eq!(links.extract(&s), [5, 4, 2, -1, 3, -1]);
}

#[test]
fn prefixes_and_suffixes() {
    // Affix tables from the word map in id order. Prefixes of 2 characters: Bi=0 Ev=1 Su=2
    // Va=3 an=4 co=5 de=6 el=7 li=8 ma=9 no=10 te=11 (A = 12). Suffixes of 3: ill=0 Sue=1
    // mos=2 and=3 fee=4 edi=5 yim=6 kes=7 mar=8 nos=9 tea=10 (A = 11).
    let maps = maps_of(&doc());
    let s = spanish_state(&maps);
    let at = [
        "input", "stack", "stack(1)", "stack(2)", "stack(3)", "input(1)",
    ];
    let prefix = fixed(&cm_fml(&at, "prefix(length=2)"), &maps);
    assert_eq!(prefix.vocabulary_size(), 12 + 3);
    // `.` is too short (unknown), mar, a too short, Vamos, <ROOT>, <OUTSIDE>
    assert_eq!(all_ids(&*prefix, &s), [12, 9, 12, 3, 14, 13]);
    let suffix = fixed(&cm_fml(&at, "suffix(length=3)"), &maps);
    assert_eq!(suffix.vocabulary_size(), 11 + 3);
    assert_eq!(all_ids(&*suffix, &s), [11, 8, 11, 2, 13, 12]);
    // Inside `token` there is no <ROOT>: the root is <OUTSIDE>.
    let token = fixed(
        "stack(3).token.prefix(length=2) stack.token.prefix(length=2)",
        &maps,
    );
    assert_eq!(token.vocabulary_size(), 12 + 2);
    assert_eq!(all_ids(&*token, &s), [13, 9]);
    // Affixes count characters, not bytes.
    let tr =
        read_conllu("1\tgüzel\t_\tADJ\t_\t_\t0\troot\t_\t_\n2\tgüç\t_\tNOUN\t_\t_\t1\tdep\t_\t_")
            .unwrap();
    let tr_maps = maps_of(&tr);
    let s = ParserState::new(Arc::new(tr[0].clone()), &tr_maps);
    let ch = fixed(
        "input.prefix(length=2) input.suffix(length=4) input(1).prefix(length=2) input(1).suffix(length=4)",
        &tr_maps,
    );
    // words: güzel=0 güç=1 (byte order); prefixes: gü=0; suffixes of 4: üzel=0 (güç is short)
    assert_eq!(all_ids(&*ch, &s), [0, 0, 0, 1]);
}

/// Every feature of each slot, in extraction order.
fn multi_ids(channel: &dyn FixedFeatures, state: &ParserState) -> Vec<Vec<i64>> {
    let mut out = Vec::new();
    channel.extract(state, &mut out);
    let mut ids = vec![Vec::new(); channel.size()];
    for f in out {
        assert_eq!(f.weight, 1.0);
        ids[f.slot].push(f.id);
    }
    ids
}

#[test]
fn char_ngrams_give_one_feature_per_known_ngram() {
    // Words by count: ev (2) = 0, eve (1) = 1. Their n-grams of up to 3 characters in word
    // order, by start then length: ev → e ev v; eve → e ev eve v ve e. The table, by first
    // appearance: e=0 ev=1 v=2 eve=3 ve=4 (A = 5): unknown 5, <OUTSIDE> 6, <ROOT> 7.
    let train = read_conllu(
        "1\tev\t_\tNOUN\t_\t_\t0\troot\t_\t_\n\n\
         1\tev\t_\tNOUN\t_\t_\t2\tobj\t_\t_\n2\teve\t_\tNOUN\t_\t_\t0\troot\t_\t_\n",
    )
    .unwrap();
    let maps = maps_of(&train);
    let test = read_conllu(
        "1\teve\t_\t_\t_\t_\t_\t_\t_\t_\n2\txe\t_\t_\t_\t_\t_\t_\t_\t_\n\
         3\tzz\t_\t_\t_\t_\t_\t_\t_\t_\n",
    )
    .unwrap();
    let s = arc_standard(&test[0], &maps, &[]);
    let channel = fixed(
        "input.char-ngram input(1).char-ngram input(2).char-ngram stack.char-ngram \
         input(3).char-ngram input(-1).token.char-ngram",
        &maps,
    );
    assert_eq!(channel.vocabulary_size(), 5 + 3);
    assert_eq!(
        multi_ids(&*channel, &s),
        [
            vec![0, 1, 3, 2, 4, 0], // eve: e ev eve v ve e
            vec![0],                // xe: only e is known
            vec![5],                // zz: none known, the unknown id
            vec![7],                // the root on the stack
            vec![6],                // past the end
            vec![6],                // inside `token` the root is <OUTSIDE>
        ]
    );
    // the parameters change the n-grams and so the table: terminators and bigrams at most
    // give ^ ^e e ev v v$ $ (ev) and then ve e$ (eve): A = 9
    let t = fixed(
        "input.char-ngram(max_char_ngram_length=2,use_terminators=true)",
        &maps,
    );
    assert_eq!(t.vocabulary_size(), 9 + 3);
    // eve: ^ ^e e ev v ve e e$ $
    assert_eq!(multi_ids(&*t, &s), [vec![0, 1, 2, 3, 4, 7, 2, 8, 6]]);
    // bad parameters are errors naming them
    for (fml, needle) in [
        (
            "input.char-ngram(max_char_ngram_length=0)",
            "max_char_ngram_length=0",
        ),
        (
            "input.char-ngram(use_terminators=yes)",
            "use_terminators=yes",
        ),
        ("input.char-ngram(length=2)", "length"),
        ("input.char-ngram(2)", "positional"),
    ] {
        let e = fixed_channel(&fixed_spec("c", fml), &maps).unwrap_err();
        assert!(e.to_string().contains(needle), "{fml}: {e}");
    }
}

#[test]
fn tokens_shapes_give_four_features_per_token() {
    let shapes = read_conllu(SHAPES).unwrap();
    let maps = maps_of(&shapes);
    let spec = fixed_spec(
        "other",
        "input.token {digit hyphen punctuation-amount quote }",
    );
    let channel = fixed_channel(&spec, &maps).unwrap();
    assert_eq!(channel.size(), 4);
    // digit 3 values, hyphen 2, punctuation-amount 3, quote 4, each + <OUTSIDE>: max 5, the
    // vocabulary size of the UD Hungarian spec's channel.
    assert_eq!(channel.vocabulary_size(), 5);
    #[rustfmt::skip]
    let expected = [
        [0, 0, 2, 1],  // "           all punctuation, an open quote (the first ")
        [0, 1, 1, 0],  // Well-known  hyphen, some punctuation
        [1, 0, 1, 0],  // 3.5         some digits, some punctuation
        [0, 0, 0, 0],  // km
        [0, 0, 2, 2],  // "           the second ": a close quote
        [0, 0, 2, 1],  // ``          open
        [0, 0, 0, 0],  // NASA
        [0, 0, 2, 2],  // ''          close
        [2, 0, 0, 0],  // 1999        all digits
    ];
    let mut s = ParserState::new(Arc::new(shapes[0].clone()), &maps);
    for (i, want) in expected.iter().enumerate() {
        s.advance(i as i32);
        let mut out = Vec::new();
        channel.extract(&s, &mut out);
        assert_eq!(out.len(), 4);
        assert_eq!(out.iter().map(|f| f.slot).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(
            out.iter().map(|f| f.id).collect::<Vec<_>>(),
            want,
            "token {i}"
        );
    }
    // Past the end, and the root (input(-1) at the start), are <OUTSIDE> inside `token`.
    s.advance(9);
    assert_eq!(all_ids(&*channel, &s), [3, 2, 3, 4]);
    let root = fixed(
        "input(-1).token {digit hyphen punctuation-amount quote}",
        &maps,
    );
    s.advance(0);
    assert_eq!(all_ids(&*root, &s), [3, 2, 3, 4]);
    // As parser features they have a <ROOT> value after <OUTSIDE>.
    let parser = fixed(
        "input(-1).digit input(-1).quote input(20).digit input(20).quote",
        &maps,
    );
    assert_eq!(parser.vocabulary_size(), 4 + 2);
    assert_eq!(all_ids(&*parser, &s), [4, 5, 3, 4]);
}

#[test]
fn capitalization() {
    let shapes = read_conllu(SHAPES).unwrap();
    let maps = maps_of(&shapes);
    let channel = fixed("input.capitalization input(-1).capitalization", &maps);
    assert_eq!(channel.vocabulary_size(), 5 + 2);
    let mut s = ParserState::new(Arc::new(shapes[0].clone()), &maps);
    let mut got = Vec::new();
    for i in [0, 1, 3, 6, 8, 9] {
        s.advance(i);
        got.push(all_ids(&*channel, &s));
    }
    // input and input(-1) (the token before) at `"`, Well-known, km, NASA, 1999 and past
    // the end: non-alphabetic 4, capitalized 2, lowercase 0, uppercase 1; the root (6) before
    // the first token, <OUTSIDE> (5) past the end.
    assert_eq!(got, [[4, 6], [2, 4], [0, 4], [1, 4], [4, 4], [5, 4]]);
    let doc = doc();
    let s = ParserState::new(Arc::new(doc[1].clone()), &maps_of(&doc));
    let initial = fixed(
        "input.capitalization input(1).capitalization",
        &maps_of(&doc),
    );
    assert_eq!(all_ids(&*initial, &s), [3, 0]); // Sue sentence-initial, likes lowercase
}

#[test]
fn unknown_words_and_tags_known_word_and_pred_tag() {
    let doc = doc();
    let en = maps_of(&doc[1..2]); // words Bill=0 Sue=1 and=2 coffee=3 likes=4 tea=5
    let s = ParserState::new(Arc::new(doc[0].clone()), &en); // Spanish, English maps
    let channel = fixed(
        "input.word input.known-word input.tag input(1).tag input(-1).known-word input(9).known-word",
        &en,
    );
    // tags NOUN=0 PROPN=1 CCONJ=2 VERB=3: Vamos VERB, nos PRON unknown (4)
    assert_eq!(
        ids(&*channel, &s),
        [Some(6), None, Some(3), Some(4), Some(6), None]
    );
    assert_eq!(channel.vocabulary_size(), 6 + 3);

    let maps = maps_of(&doc);
    let known = fixed(
        "input.known-word stack.known-word stack(3).known-word stack(4).known-word",
        &maps,
    );
    let s = spanish_state(&maps);
    assert_eq!(ids(&*known, &s), [Some(0), Some(13), Some(16), None]);

    let tagger = create("tagger", NO_PARAMS).unwrap();
    let mut s = tagger.initial_state(Arc::new(doc[0].clone()), &maps);
    let pred = fixed(
        "input.pred-tag stack.pred-tag stack(1).pred-tag stack(2).pred-tag input(-3).pred-tag",
        &maps,
    );
    assert_eq!(ids(&*pred, &s), [None; 5]);
    tagger.perform(&mut s, 1).unwrap(); // Vamos: VERB
    tagger.perform(&mut s, 7).unwrap(); // nos: PRON
    assert_eq!(ids(&*pred, &s), [None, Some(7), Some(1), None, None]);
    assert_eq!(pred.vocabulary_size(), 8 + 3);
}

#[test]
fn focus_and_gold_head_as_fixed_features() {
    let maps = maps_of(&doc());
    let s = spanish_state(&maps);
    let channel = fixed(
        "input.focus stack.focus stack(3).focus input.gold-head stack(3).gold-head stack(1).gold-head",
        &maps,
    );
    // `.` is token 5, mar 4, the root none; gold heads: `.` → Vamos 0, a → mar 4
    assert_eq!(
        ids(&*channel, &s),
        [Some(5), Some(4), None, Some(0), None, Some(4)]
    );
}

#[test]
fn extraction_appends_and_ids_stay_below_the_vocabulary() {
    let doc = doc();
    let maps = maps_of(&doc);
    let sys = create("arc-standard", NO_PARAMS).unwrap();
    let num_actions = sys.num_actions(&maps);
    let channels: Vec<Box<dyn FixedFeatures>> = [
        cm_fml(&CM_LOCATORS, "word"),
        cm_fml(&CM_LOCATORS, "tag"),
        cm_fml(&CM_LOCATORS[8..], "label"),
        cm_fml(
            &CM_LOCATORS,
            "token {word tag label digit quote capitalization}",
        ),
        cm_fml(&CM_LOCATORS, "prefix(length=3)"),
        cm_fml(&CM_LOCATORS, "char"),
        "last-action".to_owned(),
    ]
    .iter()
    .map(|fml| fixed_channel_with_actions(&fixed_spec("c", fml), &maps, num_actions).unwrap())
    .collect();
    for sentence in &doc {
        let mut s = sys.initial_state(Arc::new(sentence.clone()), &maps);
        loop {
            for c in &channels {
                let mut out = vec![kiln_dragnn::features::FixedFeature {
                    slot: 99,
                    id: -7,
                    weight: 0.5,
                }];
                c.extract(&s, &mut out);
                assert_eq!(out[0].slot, 99, "extract appends");
                for f in &out[1..] {
                    assert!(f.slot < c.size());
                    assert!(
                        (0..c.vocabulary_size() as i64).contains(&f.id),
                        "{c:?}: id {} in slot {}",
                        f.id,
                        f.slot
                    );
                }
            }
            if sys.is_final(&s) {
                break;
            }
            let a = sys.oracle(&s)[0];
            sys.perform(&mut s, a).unwrap();
        }
    }
}

// ---------------------------------------------------------------------------------------
// The committed master specs

fn spec_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/specs")
        .join(name)
}

const SPECS: &[&str] = &[
    "simple_tagger.textproto",
    "simple_parser.textproto",
    "tagger_parser.textproto",
    "en_parser.textproto",
    "ud_hungarian.master-spec",
    "simple_tagger.json",
    "tagger_parser.json",
];

#[test]
fn every_channel_of_the_committed_specs() {
    let maps = maps_of(&doc());
    let mut fixed_seen = 0;
    let mut linked_seen = 0;
    for name in SPECS {
        let spec = MasterSpec::from_file(spec_fixture(name)).unwrap_or_else(|e| panic!("{e}"));
        for component in &spec.component {
            for ch in &component.fixed_feature {
                fixed_seen += 1;
                let templates = parse_templates(ch.fml()).unwrap();
                assert_eq!(templates.len(), fml_templates(ch.fml()).unwrap().len());
                if let Some(size) = ch.size {
                    assert_eq!(templates.len(), size as usize, "{name}: {}", ch.fml());
                }
                match fixed_channel(ch, &maps) {
                    Ok(c) => {
                        assert_eq!(c.size(), templates.len());
                        assert_eq!(c.name(), ch.name());
                        if ch.name() == "other" {
                            // Computed as DRAGNN's tools computed the spec's value.
                            assert_eq!(c.vocabulary_size() as i32, ch.vocabulary_size());
                        }
                    }
                    Err(e) => {
                        assert!(
                            ch.fml().contains("char-ngram") || ch.fml().contains("char-input"),
                            "{name}: {e}"
                        );
                        assert!(matches!(e, FeatureError::Unsupported { .. }), "{e}");
                    }
                }
            }
            for ch in &component.linked_feature {
                linked_seen += 1;
                let templates = parse_templates(ch.fml()).unwrap();
                if let Some(size) = ch.size {
                    assert_eq!(templates.len(), size as usize, "{name}: {}", ch.fml());
                }
                match link_channel(ch) {
                    Ok(c) => assert_eq!(c.size(), templates.len()),
                    Err(e) => {
                        assert!(ch.fml().contains("char-focus"), "{name}: {e}");
                        assert!(matches!(e, FeatureError::Unsupported { .. }), "{e}");
                    }
                }
            }
        }
    }
    assert!(
        fixed_seen >= 15 && linked_seen >= 15,
        "{fixed_seen} {linked_seen}"
    );
}

// ---------------------------------------------------------------------------------------
// Hostile templates

fn fixed_err(fml: &str) -> FeatureError {
    let maps = maps_of(&doc());
    match fixed_channel(&fixed_spec("hostile", fml), &maps) {
        Ok(c) => panic!("{fml:?} gave {c:?}"),
        Err(e) => {
            let text = e.to_string();
            assert!(text.starts_with("channel hostile: "), "{text}");
            e
        }
    }
}

#[test]
fn syntax_errors() {
    for fml in [
        "",
        "   ",
        "input.token {digit",
        "input.token digit}",
        "input.token {}",
        "input(1.word",
        "input).word",
        "{",
        "}",
        "input..word",
        ".word",
        "input.word.",
        "input(1,2).word",
        "input(2147483648).word",
        "input(-2147483649).word",
        "input(1.5).word",
        "input(\"x).word",
        "input.word # comment",
        "input.word=3",
        "input:.word",
    ] {
        let e = fixed_err(fml);
        assert!(matches!(e, FeatureError::Parse { .. }), "{fml:?}: {e}");
    }
    let deep = "input.".to_owned() + &"child(1).".repeat(100) + "word";
    assert!(matches!(fixed_err(&deep), FeatureError::Parse { .. }));
    let deep = "input.token ".to_owned() + &"{ offset(1) ".repeat(10_000);
    assert!(matches!(fixed_err(&deep), FeatureError::Parse { .. }));
    let e = fixed_err("input.token {digit");
    assert_eq!(
        e.to_string(),
        "channel hostile: feature template 'input.token {digit': at byte 12: a '{' without its '}'"
    );
}

#[test]
fn unknown_features_bad_arguments_and_unsupported() {
    for (fml, feature) in [
        ("input.wrod", "wrod"),
        ("word", "word"),
        ("stack.input.word", "input"),
        ("input.token.focus", "focus"),
        ("input.token.pred-tag", "pred-tag"),
        ("input.token.child(1).word", "child"),
        ("focus", "focus"),
        ("input.wörd", "wörd"),
    ] {
        match fixed_err(fml) {
            FeatureError::UnknownFeature {
                feature: f,
                template,
                ..
            } => {
                assert_eq!(f, feature, "{fml}");
                assert_eq!(template, fml);
            }
            e => panic!("{fml}: {e}"),
        }
    }
    for fml in [
        "input.prefix",
        "input.prefix(length=0)",
        "input.prefix(length=x)",
        "input.prefix(length=-2)",
        "input.prefix(3)",
        "input.prefix(length=3,width=2)",
        "input(k=1).word",
        "input.word(3)",
        "input.word(min-freq=2)",
        "input.capitalization(utf8=maybe)",
        "input",
        "stack.child(1)",
        "input.token",
        "input.word.tag",
        "last-action.word",
        "last-action(x=1)",
    ] {
        assert!(
            matches!(fixed_err(fml), FeatureError::BadArgument { .. }),
            "{fml}"
        );
    }
    for fml in [
        "char-input.text-char",
        "last-action(1)",
        "input.lcword",
        "sentence.word",
    ] {
        assert!(
            matches!(fixed_err(fml), FeatureError::Unsupported { .. }),
            "{fml}"
        );
    }
    let e = fixed_err("input.word stack.wrod");
    assert_eq!(
        e.to_string(),
        "channel hostile: feature template 'stack.wrod': unknown feature `wrod` here (expected \
         word, known-word, lemma, char, tag, pred-tag, label, digit, hyphen, capitalization, \
         punctuation-amount, quote, space-after, prefix, suffix, char-ngram, focus, gold-head, token, \
         or a hop head, child, sibling)"
    );
}

#[test]
fn size_mismatch_and_link_errors() {
    let maps = maps_of(&doc());
    let mut spec = fixed_spec("words", "input.word stack.word");
    spec.size = Some(3);
    let e = fixed_channel(&spec, &maps).unwrap_err();
    assert_eq!(
        e,
        FeatureError::SizeMismatch {
            channel: "words".into(),
            fml: "input.word stack.word".into(),
            size: 3,
            templates: 2,
        }
    );
    spec.size = Some(2);
    assert!(fixed_channel(&spec, &maps).is_ok());
    let mut spec = fixed_spec(
        "other",
        "input.token {digit hyphen punctuation-amount quote }",
    );
    spec.size = Some(1);
    assert!(matches!(
        fixed_channel(&spec, &maps),
        Err(FeatureError::SizeMismatch { templates: 4, .. })
    ));

    for (fml, unsupported) in [
        ("input.word", false),
        ("last-action", false),
        ("stack.token.word", false),
        ("input.gold-head", false),
        ("input.last-char-focus", true),
        ("input.first-char-focus", true),
    ] {
        let e = link_channel(&link_spec("link", fml)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("channel link: feature template '"),
            "{e}"
        );
        assert_eq!(
            matches!(e, FeatureError::Unsupported { .. }),
            unsupported,
            "{fml}: {e}"
        );
    }
    let mut spec = link_spec("rnn", "stack.focus stack(1).focus");
    spec.size = Some(1);
    assert!(matches!(
        link_channel(&spec),
        Err(FeatureError::SizeMismatch {
            size: 1,
            templates: 2,
            ..
        })
    ));
    let ok = LinkChannel::new(&link_spec(
        "l",
        "stack.child(1).sibling(-1).focus input(3).focus",
    ))
    .unwrap();
    assert_eq!(
        ok.templates().collect::<Vec<_>>(),
        ["stack.child(1).sibling(-1).focus", "input(3).focus"]
    );
}

#[test]
fn huge_arguments_and_deep_chains_extract_without_trouble() {
    let doc = doc();
    let maps = maps_of(&doc);
    let s = arc_standard(&doc[1], &maps, &[0, 0, 19, 0, 4, 0, 0, 9]); // see the English test
    let channel = fixed(
        "input(2147483647).word stack(2147483647).word input(-2147483648).word \
         stack.child(-2147483648).word stack.child(2147483647).word stack.head(2147483647).word \
         stack.sibling(-2147483648).word stack.sibling(2147483647).word stack.head(-2147483648).word \
         input.token.offset(2147483647).offset(2147483647).word",
        &maps,
    );
    assert_eq!(
        all_ids(&*channel, &s),
        [17, 17, 17, 17, 17, 18, 17, 17, 2, 16 + 1]
    );
    // 64 feature functions: the deepest chain the parser takes (one more is an error).
    let deep = "stack(1)".to_owned() + &".child(1).head(1)".repeat(31) + ".word";
    let channel = fixed(&deep, &maps);
    assert_eq!(all_ids(&*channel, &s), [12]); // likes → coffee → likes → ... → likes
    let deeper = "stack(1)".to_owned() + &".child(1).head(1)".repeat(31) + ".head(1).word";
    assert!(fixed_channel(&fixed_spec("deep", &deeper), &maps).is_err());
    // Arcs set by hand into a cycle: head(k) for huge k still answers at once.
    let mut cyc = ParserState::new(Arc::new(doc[1].clone()), &maps);
    cyc.add_arc(0, 1, 0);
    cyc.add_arc(1, 2, 0);
    cyc.add_arc(2, 0, 0);
    cyc.advance(0);
    let channel = fixed("input.head(2147483647).word input.head(3).word", &maps);
    // 2147483647 = 3 * 715827882 + 1: one step from Sue, to likes
    assert_eq!(all_ids(&*channel, &cyc), [12, 4]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any string over FML's characters builds a channel or fails with an error; a channel
    /// that builds extracts ids below its vocabulary (or token indices) without panicking,
    /// and the parser and `fml_templates` agree on the count where both accept the string.
    #[test]
    fn arbitrary_fml_never_panics(fml in "[a-z().{}=:, \"\\-0-9]{0,40}|((input|stack)(\\(-?[0-9]{1,3}\\))?(\\.(head|child|sibling)\\(-?[0-9]\\))*\\.(word|tag|label|quote|digit|prefix\\(length=[0-9]\\)|token \\{ ?(word|tag|hyphen) ?\\}) ?){1,4}") {
        let doc = doc();
        let maps = maps_of(&doc);
        if let (Ok(ours), Ok(theirs)) = (parse_templates(&fml), fml_templates(&fml)) {
            prop_assert_eq!(ours.len(), theirs.len());
        }
        if let Ok(channel) = FixedChannel::new(&fixed_spec("p", &fml), &maps) {
            let states = [
                arc_standard(&doc[1], &maps, &[]),
                arc_standard(&doc[1], &maps, &[0, 0, 19, 0, 4, 0, 0, 9]),
                arc_standard(&doc[1], &maps, &[0, 0, 19, 0, 4, 0, 0, 9, 0, 24, 14, 2]),
            ];
            for s in &states {
                let mut out = Vec::new();
                channel.extract(s, &mut out);
                let numeric = channel.features().any(|f| matches!(
                    f,
                    Feature::Token { value: TokenValue::Focus | TokenValue::GoldHead, .. }
                ));
                for f in &out {
                    prop_assert!(f.slot < channel.size());
                    prop_assert!(f.id >= 0);
                    prop_assert!(numeric || (f.id as usize) < channel.vocabulary_size());
                }
            }
        }
        let _ = link_channel(&link_spec("p", &fml));
    }
}

/// kiln-dragnn's own `lemma` and `space-after`: lemma ids from the lemma map (`_` is a
/// term), the unknown id for an unseen lemma, `<OUTSIDE>`/`<ROOT>` after the base values,
/// and `space-after` 0 exactly where MISC says `SpaceAfter=No`.
#[test]
fn lemma_and_space_after() {
    let train = read_conllu(
        "1\tAçık\taçık\tNOUN\t_\t_\t2\tig\t_\tSpaceAfter=No\n\
         2\tla\t_\tVERB\t_\t_\t0\troot\t_\t_\n\
         3\tev\tev\tNOUN\t_\t_\t2\tobj\t_\t_\n",
    )
    .unwrap();
    let maps = maps_of(&train);
    // counts: açık 1, _ 1, ev 1 -> ties broken by byte order: "_" < "açık" < "ev"
    assert_eq!(maps.lemmas.terms().collect::<Vec<_>>(), ["_", "açık", "ev"]);
    let test = read_conllu(
        "1\tAçık\taçık\tNOUN\t_\t_\t2\tig\t_\tSpaceAfter=No\n\
         2\tla\t_\tVERB\t_\t_\t0\troot\t_\t_\n\
         3\tkapı\tkapı\tNOUN\t_\t_\t2\tobj\t_\t_\n",
    )
    .unwrap();
    let channel = fixed(
        "input.lemma input(1).lemma input(2).lemma input(3).lemma stack.lemma input.space-after input(1).space-after input(3).space-after",
        &maps,
    );
    let state = arc_standard(&test[0], &maps, &[]);
    let unknown = maps.lemmas.len() as i64; // 3
    assert_eq!(
        ids(channel.as_ref(), &state),
        [
            Some(1),           // açık
            Some(0),           // _
            Some(unknown),     // kapı: not in the map
            Some(unknown + 1), // past the end: <OUTSIDE>
            Some(unknown + 2), // empty stack: <ROOT>
            Some(0),           // SpaceAfter=No
            Some(1),
            Some(2), // past the end: <OUTSIDE> of a 2-valued category
        ]
    );
}

/// A state looks its sentence's words and lemmas up once, in the maps it was built with;
/// a channel built over other maps (equal terms, another object) looks them up itself. Both
/// give the same ids at every state of a parse, for every word and lemma template, and a
/// channel over maps with other terms gives that map's ids, not the state's.
#[test]
fn word_and_lemma_ids_do_not_depend_on_which_map_object_holds_the_terms() {
    let sentences = doc();
    let maps = maps_of(&sentences);
    let copy = TermMaps {
        words: kiln_dragnn::term_map::TermMap::from_text(&maps.words.to_text().unwrap(), 0, 0)
            .unwrap(),
        lemmas: kiln_dragnn::term_map::TermMap::from_text(&maps.lemmas.to_text().unwrap(), 0, 0)
            .unwrap(),
        ..maps.clone()
    };
    assert!(!copy.words.is_shared_with(&maps.words) && copy.words == maps.words);
    let fml = "input.word input(1).word stack.word stack(1).word input.lemma stack.lemma stack.child(1).word input.known-word";
    let shared = fixed(fml, &maps);
    let other = fixed(fml, &copy);
    // Maps of the first sentence alone: other ids, and unknown words.
    let small = maps_of(&sentences[..1]);
    let narrow = fixed(fml, &small);
    let sys = create("arc-standard", NO_PARAMS).unwrap();
    for s in &sentences {
        let mut state = sys.initial_state(Arc::new(s.clone()), &maps);
        let mut steps = 0;
        loop {
            assert_eq!(ids(shared.as_ref(), &state), ids(other.as_ref(), &state));
            let own = sys.initial_state(Arc::new(s.clone()), &small);
            if steps == 0 {
                // Built with `small`, the state's cached ids are `small`'s: the same as
                // what a `maps` state gives through the `small` channel.
                assert_eq!(ids(narrow.as_ref(), &own), ids(narrow.as_ref(), &state));
            }
            if sys.is_final(&state) {
                break;
            }
            let a = (0..sys.num_actions(&maps))
                .find(|&a| sys.is_allowed(&state, a))
                .expect("a non-final state allows an action");
            sys.perform(&mut state, a).unwrap();
            steps += 1;
        }
        assert!(steps > 0);
    }
}
