//! The binaries as a user runs them: `kiln-parse` reads CoNLL-U on stdin with the committed
//! Turkish model and writes valid CoNLL-U whose non-predicted columns, comments and blank
//! lines are byte-identical to the input; bad arguments and a missing model are errors
//! naming the problem (exit status 1, nothing on stdout); `kiln-dragnn-train` trains a tiny
//! spec for a few steps on a fixture and writes a model that `kiln-parse` then loads, and
//! trains another with that model as its teacher (`--teacher`; a missing one is an error).
//!
//! Depends on the binaries (`CARGO_BIN_EXE_*`) and kiln-dragnn's document module.

use std::io::Write;
use std::process::{Command, Stdio};

use kiln_dragnn::document::{read_conllu, Column};

const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/turkish");

fn run(bin: &str, args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    // A binary that fails on its arguments exits without reading stdin: a broken pipe here
    // is expected then.
    if let Err(e) = child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
    {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
    }
    let out = child.wait_with_output().expect("the binary finishes");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).expect("utf-8 stdout"),
        String::from_utf8(out.stderr).expect("utf-8 stderr"),
    )
}

const INPUT: &str = "# sent_id = a\n\
# text = Kitabı okudum.\n\
1\tKitabı\tkitap\t_\t_\t_\t_\t_\t_\t_\n\
2\tokudum\toku\t_\t_\tTense=Past\t_\t_\t_\tSpaceAfter=No\n\
3\t.\t.\t_\t_\t_\t_\t_\t_\t_\n\
\n\
# sent_id = b\n\
1\tEv\tev\t_\t_\t_\t_\t_\t_\t_\n\
2\tgüzel\tgüzel\t_\t_\t_\t_\t_\t_\t_\n\
\n";

#[test]
fn kiln_parse_fills_the_predicted_columns_and_keeps_the_rest() {
    let (code, out, err) = run(
        env!("CARGO_BIN_EXE_kiln-parse"),
        &["--model", MODEL, "--stats"],
        INPUT,
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("sentences/s"), "{err}");
    let (a, b) = (read_conllu(INPUT).unwrap(), read_conllu(&out).unwrap());
    assert_eq!(a.len(), b.len());
    // every line that is not a word line is byte-identical, in order
    let other = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.split('\t').count() != 10)
            .map(str::to_string)
            .collect()
    };
    assert_eq!(other(INPUT), other(&out));
    for (x, y) in a.iter().zip(&b) {
        for i in 0..x.len() {
            for c in [
                Column::Id,
                Column::Form,
                Column::Lemma,
                Column::Xpos,
                Column::Feats,
                Column::Deps,
                Column::Misc,
            ] {
                assert_eq!(x.field(i, c), y.field(i, c), "{c}");
            }
            for c in [Column::Upos, Column::Head, Column::Deprel] {
                assert_ne!(y.field(i, c), "_", "{c} is predicted");
            }
        }
    }
}

#[test]
fn kiln_parse_reports_bad_arguments_and_a_missing_model() {
    let (code, out, err) = run(
        env!("CARGO_BIN_EXE_kiln-parse"),
        &["--model", "/nonexistent/model"],
        INPUT,
    );
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(err.starts_with("kiln-parse: /nonexistent/model"), "{err}");
    let (code, _, err) = run(
        env!("CARGO_BIN_EXE_kiln-parse"),
        &["--model", MODEL, "--beam", "0"],
        INPUT,
    );
    assert_eq!(code, 1);
    assert!(err.contains("--beam"), "{err}");
    let (code, out, err) = run(
        env!("CARGO_BIN_EXE_kiln-parse"),
        &["--model", MODEL],
        "1\tx\n",
    );
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(err.contains("input"), "{err}");
}

#[test]
fn kiln_dragnn_train_writes_a_model_kiln_parse_loads() {
    let dir = std::env::temp_dir().join(format!("kiln-dragnn-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/features.conllu"
    );
    let spec = dir.join("spec.textproto");
    std::fs::write(
        &spec,
        r#"component {
  name: "tagger"
  transition_system { registered_name: "tagger" }
  fixed_feature { name: "words" fml: "input(-1).word input.word input(1).word" embedding_dim: 8 }
  fixed_feature { name: "ngrams" fml: "input.char-ngram(use_terminators=true)" embedding_dim: 4 }
  network_unit { registered_name: "FeedForwardNetwork" parameters { key: "hidden_layer_sizes" value: "8" } }
  backend { registered_name: "SyntaxNetComponent" }
}
component {
  name: "parser"
  transition_system { registered_name: "arc-standard" }
  fixed_feature { name: "words" fml: "input.word stack.word stack(1).word" embedding_dim: 8 }
  fixed_feature { name: "tags" fml: "input.tag stack.tag stack(1).tag" embedding_dim: 4 }
  network_unit { registered_name: "FeedForwardNetwork" parameters { key: "hidden_layer_sizes" value: "8" } }
  backend { registered_name: "SyntaxNetComponent" }
}
"#,
    )
    .unwrap();
    // the training file: the fixture and a non-projective tree (1 → 3 and 2 → 4 cross),
    // which training lifts to a projective one
    let train = dir.join("train.conllu");
    let mut text = std::fs::read_to_string(data).unwrap();
    text.push_str(
        "1\tBen\t_\tPRON\t_\t_\t0\troot\t_\t_\n2\tsen\t_\tPRON\t_\t_\t1\tdep\t_\t_\n\
         3\tsiz\t_\tPRON\t_\t_\t1\tdep\t_\t_\n4\tonlar\t_\tPRON\t_\t_\t2\tdep\t_\t_\n\n",
    );
    std::fs::write(&train, text).unwrap();
    let out = dir.join("model");
    // kiln-dragnn-train on the spec and files, writing to `out`, with `more` arguments.
    let train_to = |out: &std::path::Path, more: &[&str]| {
        let mut args = vec![
            "--spec",
            spec.to_str().unwrap(),
            "--train",
            train.to_str().unwrap(),
            "--dev",
            data,
            "--out",
            out.to_str().unwrap(),
            "--batch-size",
            "2",
        ];
        args.extend_from_slice(more);
        run(env!("CARGO_BIN_EXE_kiln-dragnn-train"), &args, "")
    };
    let (code, _, err) = train_to(&out, &["--steps", "4", "--report-every", "2"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("model saved"), "{err}");
    assert!(
        err.contains("projectivized the training set: 1 of 4 trees lifted"),
        "{err}"
    );
    let log = std::fs::read_to_string(out.join("train.jsonl")).unwrap();
    let events: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(events.iter().filter(|e| e["event"] == "step").count(), 4);
    assert_eq!(events.iter().filter(|e| e["event"] == "eval").count(), 2);
    let input = std::fs::read_to_string(data).unwrap();
    let (code, parsed, err) = run(
        env!("CARGO_BIN_EXE_kiln-parse"),
        &["--model", out.to_str().unwrap()],
        &input,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        read_conllu(&parsed).unwrap().len(),
        read_conllu(&input).unwrap().len()
    );
    // The model as the teacher of another run (distillation), and a teacher that is not
    // there.
    let student = dir.join("student");
    let train_with = |teacher: &str| {
        train_to(
            &student,
            &[
                "--steps",
                "2",
                "--teacher",
                teacher,
                "--distillation-weight",
                "0.25",
            ],
        )
    };
    let (code, _, err) = train_with(out.to_str().unwrap());
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("distilling from 1 teacher(s), weight 0.25"),
        "{err}"
    );
    assert!(student.join("params.safetensors").exists());
    let missing = dir.join("no-such-model");
    let (code, _, err) = train_with(missing.to_str().unwrap());
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--teacher") && err.contains("no-such-model"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
