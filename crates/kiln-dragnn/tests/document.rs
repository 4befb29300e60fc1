//! CoNLL-U reading and writing: byte-for-byte round trips (the committed fixture and its
//! variants; both Turkish treebank files when `scripts/fetch-data.sh` has fetched them),
//! typed accessors and setters, errors with line numbers on hostile input, and the
//! treebank split.

use std::path::PathBuf;

use kiln_dragnn::document::{
    read_conllu, read_conllu_file, read_turkish_treebank, split, write_conllu, write_conllu_file,
    Column, DocumentError, Line, RowId, Sentence,
};

const FIXTURE: &str = include_str!("fixtures/features.conllu");

/// The Turkish treebank directory, or `None` after saying why the test skips; with
/// `CI=true` a missing treebank fails the test instead.
fn treebank_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("KILN_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data")))
        .join("turkish-treebanks");
    if dir.join("web.conllu").exists() && dir.join("wiki.conllu").exists() {
        return Some(dir);
    }
    let msg = format!(
        "{} has no web.conllu/wiki.conllu (run scripts/fetch-data.sh)",
        dir.display()
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true and {msg}");
    }
    eprintln!("skipping: {msg}");
    None
}

fn roundtrip(text: &str) -> Vec<Sentence> {
    let doc = read_conllu(text).unwrap_or_else(|e| panic!("{e}"));
    let back = write_conllu(&doc);
    assert!(
        back == text,
        "round trip differs:\n--- in\n{text:?}\n--- out\n{back:?}"
    );
    let concat: String = doc.iter().map(Sentence::to_conllu).collect();
    assert_eq!(concat, text, "per-sentence to_conllu differs");
    doc
}

#[test]
fn fixture_round_trips_byte_for_byte() {
    let doc = roundtrip(FIXTURE);
    assert_eq!(doc.len(), 3);
    assert_eq!(
        doc.iter().map(Sentence::len).collect::<Vec<_>>(),
        [6, 6, 5],
        "words only: no multiword or empty-node rows"
    );
    assert_eq!(doc[0].lines().count(), 11);
    assert_eq!(doc[1].lines().count(), 9);
    assert_eq!(
        doc[0].comments().collect::<Vec<_>>(),
        [
            "# newdoc id = kiln-fixture",
            "# sent_id = es-1",
            "# text = Vámonos al mar."
        ]
    );
    assert_eq!(
        doc.iter()
            .map(|s| s.blank_lines_after())
            .collect::<Vec<_>>(),
        [1, 1, 1]
    );
    assert!(doc.iter().all(|s| s.ends_with_newline() && !s.crlf()));
}

#[test]
fn fixture_rows_keep_ids_features_and_misc() {
    let doc = read_conllu(FIXTURE).unwrap();
    let ids: Vec<RowId> = doc[0]
        .lines()
        .filter_map(|l| match l {
            Line::Row(r) => Some(r.id()),
            Line::Comment(_) => None,
        })
        .collect();
    assert_eq!(
        ids,
        [
            RowId::Range(1, 2),
            RowId::Word(1),
            RowId::Word(2),
            RowId::Range(3, 4),
            RowId::Word(3),
            RowId::Word(4),
            RowId::Word(5),
            RowId::Word(6)
        ]
    );
    let ellipsis = &doc[1];
    let empty: Vec<_> = ellipsis
        .lines()
        .filter_map(|l| match l {
            Line::Row(r) if matches!(r.id(), RowId::Empty(..)) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(empty.len(), 1);
    assert_eq!(empty[0].id(), RowId::Empty(5, 1));
    assert_eq!(empty[0].field(Column::Deps), "2:conj");
    assert_eq!(empty[0].field(Column::Misc), "CopyOf=2");
    // word indices skip the empty node: word 5 (from 0) is "tea"
    assert_eq!(ellipsis.form(5), "tea");
    assert_eq!(ellipsis.head(5), Some(4));

    let tr = &doc[2];
    assert_eq!(
        tr.word(1).unwrap().feats(),
        [
            ("PersonNumber", "A3sg"),
            ("Copula", "PresCop"),
            ("PersonNumber", "V1sg"),
            ("Proper", "False")
        ]
    );
    assert_eq!(tr.heads(), [1, 3, 3, -1, 3]);
    assert_eq!(
        (tr.upos(1), tr.xpos(1), tr.deprel(0), tr.lemma(1)),
        ("VERB", "NOMP", "ig", "_")
    );
    for s in &doc {
        assert_eq!(
            Some(s.surface_text().as_str()),
            s.text(),
            "{:?}",
            s.sent_id()
        );
    }
}

#[test]
fn line_endings_blank_lines_and_final_newline_variants_round_trip() {
    let body = FIXTURE.trim_end_matches('\n');
    // no final newline, no trailing blank line (as the Turkish treebank's files end)
    roundtrip(body);
    // final newline without a trailing blank line
    roundtrip(&format!("{body}\n"));
    // several blank lines between and after sentences, and before the first
    let spaced = format!("\n\n{}\n\n\n", body.replace("\n\n", "\n\n\n\n"));
    let doc = roundtrip(&spaced);
    assert_eq!(doc.len(), 3);
    assert_eq!(doc[0].blank_lines_after(), 3);
    assert_eq!(doc[2].blank_lines_after(), 2);
    // CRLF throughout, with and without a final line ending
    let crlf = FIXTURE.replace('\n', "\r\n");
    let doc = roundtrip(&crlf);
    assert!(doc.iter().all(Sentence::crlf));
    roundtrip(crlf.trim_end_matches("\r\n"));
    // one file may hold sentences with different line endings
    let first_crlf = FIXTURE.replacen('\n', "\r\n", 12);
    let doc = roundtrip(&first_crlf);
    assert_eq!(
        doc.iter().map(Sentence::crlf).collect::<Vec<_>>(),
        [true, false, false]
    );
    // a comment between rows stays where it was
    let mid = "1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n# between\n2\tb\t_\t_\t_\t_\t1\tdep\t_\t_\n";
    let doc = roundtrip(mid);
    assert_eq!(doc[0].comments().collect::<Vec<_>>(), ["# between"]);
    // nothing, and blank lines only
    assert!(roundtrip("").is_empty());
    let blank = read_conllu("\n\n\n").unwrap();
    assert!(blank.is_empty());
    assert_eq!(
        write_conllu(&blank),
        "",
        "a document of blank lines writes as empty"
    );
}

#[test]
fn writing_keeps_sentences_apart_whatever_their_order() {
    let body = FIXTURE.trim_end_matches('\n');
    let doc = read_conllu(body).unwrap();
    // the last sentence (read without a final newline or blank line) written first
    let reordered = vec![doc[2].clone(), doc[0].clone(), doc[1].clone()];
    let text = write_conllu(&reordered);
    let back = read_conllu(&text).unwrap();
    assert_eq!(back.len(), 3);
    for (a, b) in back.iter().zip(&reordered) {
        assert_eq!(a.lines().collect::<Vec<_>>(), b.lines().collect::<Vec<_>>());
    }
}

#[test]
fn setters_change_only_their_column() {
    let mut doc = read_conllu(FIXTURE).unwrap();
    let s = &mut doc[2];
    s.set_head(2, Some(0)).unwrap();
    s.set_deprel(2, "punct").unwrap();
    s.set_upos(0, "PROPN").unwrap();
    s.set_xpos(0, "NNP").unwrap();
    s.set_head(4, None).unwrap();
    assert_eq!(s.heads(), [1, 3, 0, -1, -1]);
    assert_eq!(s.head(4), None);
    let out = write_conllu(&doc);
    let changed: Vec<(&str, &str)> = FIXTURE
        .lines()
        .zip(out.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert_eq!(
        changed,
        [
            (
                "1\tEv\tev\tNOUN\tNN\tPersonNumber=A3sg|Possessive=Pnon|Case=Loc|Proper=False\t2\tig\t_\tSpaceAfter=No",
                "1\tEv\tev\tPROPN\tNNP\tPersonNumber=A3sg|Possessive=Pnon|Case=Loc|Proper=False\t2\tig\t_\tSpaceAfter=No"
            ),
            (
                "3\t,\t,\tPUNCT\t.\tProper=False\t4\tp\t_\t_",
                "3\t,\t,\tPUNCT\t.\tProper=False\t1\tpunct\t_\t_"
            ),
            (
                "5\t.\t.\tPUNCT\t.\tProper=False\t4\tp\t_\t_",
                "5\t.\t.\tPUNCT\t.\tProper=False\t_\tp\t_\t_"
            ),
        ]
    );
    assert_eq!(
        read_conllu(&out).unwrap(),
        doc,
        "what is written reads back"
    );
    // refused values leave the sentence alone
    let before = doc[2].clone();
    let s = &mut doc[2];
    assert!(matches!(
        s.set_head(0, Some(0)),
        Err(DocumentError::BadValue { .. })
    ));
    assert!(s.set_head(0, Some(5)).is_err());
    assert!(s.set_head(0, Some(-2)).is_err());
    assert!(s.set_head(0, Some(i32::MAX)).is_err());
    assert!(s.set_deprel(0, "").is_err());
    assert!(s.set_deprel(0, "a\nb").is_err());
    assert!(s.set_field(0, Column::Id, "9").is_err());
    assert!(s.set_field(0, Column::Head, "-1").is_err());
    assert!(matches!(
        s.set_deprel(5, "x"),
        Err(DocumentError::TokenIndex { index: 5, len: 5 })
    ));
    assert_eq!(doc[2], before);
}

/// The error of reading `text`, as a string.
fn error_of(text: &str) -> String {
    match read_conllu(text) {
        Ok(doc) => panic!("read {} sentences from {text:?}", doc.len()),
        Err(e) => e.to_string(),
    }
}

const ROW1: &str = "1\ta\t_\t_\t_\t_\t0\troot\t_\t_";

#[test]
fn errors_name_the_line_and_the_problem() {
    // wrong column counts, counted from line 1 across sentences and comments
    let nine = "2\tb\t_\t_\t_\t_\t1\tdep\t_";
    assert_eq!(
        error_of(&format!("# c\n{ROW1}\n\n{ROW1}\n{nine}\n")),
        "line 5: expected 10 tab-separated columns, found 9"
    );
    assert_eq!(
        error_of(&format!("{ROW1}\t_\n")),
        "line 1: expected 10 tab-separated columns, found 11"
    );
    assert_eq!(
        error_of("1 a _ _ _ _ 0 root _ _\n"),
        "line 1: expected 10 tab-separated columns, found 1"
    );
    assert_eq!(
        error_of(&ROW1.replace("root", "")),
        "line 1: column DEPREL is empty (write `_` for no value)"
    );
    // IDs
    assert!(
        error_of(&ROW1.replacen('1', "0", 1)).starts_with("line 1: bad ID `0`: not a word index")
    );
    assert!(error_of(&ROW1.replacen('1', "x", 1)).starts_with("line 1: bad ID `x`"));
    assert_eq!(
        error_of(&format!("{ROW1}\n3\tb\t_\t_\t_\t_\t1\tdep\t_\t_")),
        "line 2: bad ID `3`: expected word ID 2"
    );
    assert!(
        error_of(&format!("2-3\tab\t_\t_\t_\t_\t_\t_\t_\t_\n{ROW1}"))
            .starts_with("line 1: bad ID `2-3`: a multiword range must start at the next word, 1")
    );
    assert_eq!(
        error_of(&format!("{ROW1}\n1-2\tab\t_\t_\t_\t_\t_\t_\t_\t_\n")),
        "line 2: bad ID `1-2`: a multiword range must start at the next word, 2, and not end before it"
    );
    assert_eq!(
        error_of(&format!("1-3\tab\t_\t_\t_\t_\t_\t_\t_\t_\n{ROW1}\n")),
        "line 1: bad ID `1-3`: the range ends past the sentence's last word, 1"
    );
    assert!(
        error_of(&format!("{ROW1}\n2.1\tx\t_\t_\t_\t_\t_\t_\t_\t_\n")).starts_with(
            "line 2: bad ID `2.1`: an empty node follows the word it is numbered after"
        )
    );
    assert!(
        error_of(&format!("{ROW1}\n1.0\tx\t_\t_\t_\t_\t_\t_\t_\t_\n"))
            .starts_with("line 2: bad ID `1.0`")
    );
    // heads: past the end, negative, huge, not a number, the word itself
    let with_head = |h: &str| format!("{ROW1}\n2\tb\t_\t_\t_\t_\t{h}\tdep\t_\t_\n");
    assert_eq!(
        error_of(&with_head("3")),
        "line 2: bad HEAD `3` of word 2: not `_` or a word index 0..=2"
    );
    assert_eq!(
        error_of(&with_head("-1")),
        "line 2: bad HEAD `-1` of word 2: not `_` or a word index 0..=2"
    );
    assert!(
        error_of(&with_head("99999999999999999999999999")).starts_with("line 2: bad HEAD `9999")
    );
    assert!(error_of(&with_head("18446744073709551617")).starts_with("line 2: bad HEAD"));
    assert!(error_of(&with_head("+1")).starts_with("line 2: bad HEAD `+1`"));
    assert!(error_of(&with_head(" 1")).starts_with("line 2: bad HEAD ` 1`"));
    assert_eq!(
        error_of(&with_head("2")),
        "line 2: bad HEAD `2` of word 2: a word cannot be its own head"
    );
    // the head is checked against the whole sentence, and the error names the row's line
    assert_eq!(
        error_of("# c\n1\ta\t_\t_\t_\t_\t3\tdep\t_\t_\n2\tb\t_\t_\t_\t_\t0\troot\t_\t_\n"),
        "line 2: bad HEAD `3` of word 1: not `_` or a word index 0..=2"
    );
    // mixed line endings inside one sentence
    assert_eq!(
        error_of(&format!("# c\r\n{ROW1}\n")),
        "line 2: its line ending differs from the rest of its sentence (mixed `\\n` and `\\r\\n`)"
    );
    assert!(matches!(
        read_conllu(&format!("{ROW1}\r\n\n")),
        Err(DocumentError::MixedLineEndings { line: 2 })
    ));
}

#[test]
fn hostile_input_fails_cleanly_or_reads() {
    // a very wide line: an error, not a blow-up
    let wide = "_\t".repeat(100_000);
    assert_eq!(
        error_of(&wide),
        "line 1: expected 10 tab-separated columns, found 100001"
    );
    // a long (1 MiB) but well-formed form reads and round-trips
    let long_form = "ş".repeat(1 << 19);
    let text = format!("1\t{long_form}\t_\t_\t_\t_\t0\troot\t_\t_\n");
    let doc = roundtrip(&text);
    assert_eq!(doc[0].form(0).len(), 1 << 20);
    // many one-word sentences
    let many = format!("{ROW1}\n\n").repeat(20_000);
    assert_eq!(roundtrip(&many).len(), 20_000);
    // control characters and a lone CR inside columns are kept as they are
    roundtrip("1\ta\u{1}b\t_\t_\t_\t_\t0\troot\t_\tx\ry\n");
    // a comment-only sentence is a sentence without words
    let doc = roundtrip("# only a comment\n");
    assert!(doc[0].is_empty());
    // invalid UTF-8 in a file names the line
    let dir = std::env::temp_dir().join(format!("kiln-dragnn-doc-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.conllu");
    let mut bytes = format!("{ROW1}\n\n{ROW1}\n").into_bytes();
    bytes.extend_from_slice(b"2\t\xc3\x28\t_\t_\t_\t_\t1\tdep\t_\t_\n");
    std::fs::write(&path, &bytes).unwrap();
    let err = read_conllu_file(&path).unwrap_err();
    assert!(
        matches!(err, DocumentError::NotUtf8 { line: 4, .. }),
        "{err}"
    );
    // a parse error in a file names the file and the line
    std::fs::write(&path, format!("{ROW1}\n\n1\tb\n")).unwrap();
    let err = read_conllu_file(&path).unwrap_err().to_string();
    assert!(
        err.ends_with("bad.conllu: line 3: expected 10 tab-separated columns, found 2"),
        "{err}"
    );
    assert!(matches!(
        read_conllu_file(dir.join("absent.conllu")),
        Err(DocumentError::Io { .. })
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn treebank_files_round_trip_byte_for_byte() {
    let Some(dir) = treebank_dir() else { return };
    let mut total = (0, 0);
    for (file, sentences) in [("web.conllu", 2541), ("wiki.conllu", 2310)] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let doc = read_conllu(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(doc.len(), sentences, "{file}");
        assert!(
            write_conllu(&doc) == text,
            "{file} does not round-trip byte for byte"
        );
        let tokens: usize = doc.iter().map(Sentence::len).sum();
        let text_mismatch = doc
            .iter()
            .filter(|s| s.text() != Some(s.surface_text().as_str()))
            .count();
        eprintln!(
            "{file}: {} sentences, {tokens} tokens, {} bytes; the `# text` comment differs from \
             the text rebuilt from FORM and SpaceAfter=No in {text_mismatch} sentences",
            doc.len(),
            text.len()
        );
        assert_eq!(
            text_mismatch, 0,
            "{file}: surface_text() differs from `# text`"
        );
        total.0 += doc.len();
        total.1 += tokens;
        // through a file too
        let path = std::env::temp_dir().join(format!("kiln-dragnn-{}-{file}", std::process::id()));
        write_conllu_file(&path, &doc).unwrap();
        assert!(std::fs::read(&path).unwrap() == text.as_bytes());
        assert_eq!(read_conllu_file(&path).unwrap(), doc);
        std::fs::remove_file(&path).unwrap();
    }
    assert_eq!(total, (4851, 81_370));
}

#[test]
fn treebank_split_has_the_documented_sizes() {
    let Some(dir) = treebank_dir() else { return };
    let parts = read_turkish_treebank(&dir).unwrap();
    let tokens = |v: &[Sentence]| v.iter().map(Sentence::len).sum::<usize>();
    let sizes = [
        (parts.train.len(), tokens(&parts.train)),
        (parts.dev.len(), tokens(&parts.dev)),
        (parts.test.len(), tokens(&parts.test)),
    ];
    eprintln!("train/dev/test (sentences, tokens): {sizes:?}");
    assert_eq!(sizes, [(3881, 64_707), (485, 8_638), (485, 8_025)]);
    // web first, then wiki, each split in file order
    let web = read_conllu_file(dir.join("web.conllu")).unwrap();
    let web_parts = split(web.clone());
    assert_eq!(parts.train[..web_parts.train.len()], web_parts.train[..]);
    assert_eq!(parts.test[0], web[9]);
    assert_eq!(parts.dev[0], web[8]);
    assert_eq!(parts.train[8], web[10]);
}
