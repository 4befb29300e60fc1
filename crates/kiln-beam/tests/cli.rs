//! `kiln-translate` end to end on the g2p-en model (skips when the model is absent), and the options of both programs: refused values, `--help`, `--version`, the YAML config file, and long inputs (on the attention model that ships in `models/`).

mod common;
use common::{run_cli, translate_cli};
use std::path::{Path, PathBuf};

fn model() -> Option<String> {
    let p = common::data_file("g2p_en/checkpoint20.npz")?;
    Some(format!("g2p:{}", p.display()))
}

#[test]
fn translates_in_input_order_with_bad_lines_as_empty_lines() {
    let Some(m) = model() else { return };
    let input = b"activationist\n\ncat\n\xff\xfe\nthrough\n";
    let (out, err, code) = translate_cli(
        &[
            "--model",
            &m,
            "-b",
            "4",
            "--threads",
            "2",
            "--mini-batch",
            "2",
        ],
        input,
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "AE2 K T AH0 V EY1 SH AH0 N AH0 S T",
            "",
            "K AE1 T",
            "",
            "TH R UW1"
        ]
    );
    assert!(err.contains("line 4: invalid UTF-8"), "{err}");
    assert!(err.contains("5 lines") && err.contains("words/s"), "{err}");
}

#[test]
fn n_best_lists_and_option_errors() {
    let Some(m) = model() else { return };
    let (out, _, code) = translate_cli(&["--model", &m, "-b", "3", "--n-best"], b"cat\n");
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(
        lines[0].starts_with("0 ||| K AE1 T ||| F0= "),
        "{}",
        lines[0]
    );
    let (_, err, code) = translate_cli(&["--model", &m, "--alignment", "sideways"], b"");
    assert_eq!(code, 2);
    assert!(err.contains("--alignment"), "{err}");
    let (_, err, code) = translate_cli(&["--model", "g2p:/nonexistent.npz"], b"cat\n");
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent.npz"), "{err}");
}

/// A model path that does not exist: options that pass their checks fail at loading it (exit 1), so exit 2 shows a refusal before any model is loaded.
const MISSING: &str = "g2p:/nonexistent.npz";

/// The attention model kiln-beam ships, as a `--model` value.
fn shipped() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/g2p-attention.safetensors");
    format!("att:{}", p.display())
}

/// A config file with `text`, unique to `name` and this process.
fn config_file(name: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("kiln-cli-{}-{name}.yml", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

fn train_cli(args: &[&str]) -> (String, String, i32) {
    run_cli(env!("CARGO_BIN_EXE_kiln-g2p-train"), args, b"")
}

#[test]
fn hostile_option_values_are_refused_naming_the_option_before_loading_a_model() {
    for (args, option) in [
        (&["-b", "2.7"][..], "--beam-size"),
        (&["-b", "inf"], "--beam-size"),
        (&["-b", "1e30"], "--beam-size"),
        (&["-b", "0"], "--beam-size"),
        (&["--beam-size", "5000"], "--beam-size"),
        (&["--threads", "5000"], "--threads"),
        (&["--threads", "0"], "--threads"),
        (&["--max-length-factor", "-1"], "--max-length-factor"),
        (&["--max-length-factor", "nan"], "--max-length-factor"),
        (&["--weights", "-1"], "--weights"),
        (&["--weights", "nan"], "--weights"),
        (&["--weights", "1,1"], "--weights"),
        (&["--normalize", "nan"], "--normalize"),
        (&["--word-penalty", "nan"], "--word-penalty"),
        (&["--max-input", "-5"], "--max-input"),
        (&["--mini-batch", "0"], "--mini-batch"),
        (&["--gnmt", "0.2"], "--gnmt"),
        (&["--alignment", "hard"], "--alignment"),
        (&["--alignment", "sideways"], "--alignment"),
    ] {
        let all = [&["--model", MISSING][..], args].concat();
        let (out, err, code) = translate_cli(&all, b"cat\n");
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(option), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
    }
    let (_, err, code) = translate_cli(&["-b", "4"], b"cat\n");
    assert_eq!(code, 2);
    assert!(err.contains("--model"), "{err}");
    // values that pass go on to the model, which is missing
    let (_, err, code) = translate_cli(&["--model", MISSING, "-b", "8", "--threads", "4"], b"");
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent.npz"), "{err}");
}

#[test]
fn version_and_help_go_to_stdout() {
    for exe in [
        env!("CARGO_BIN_EXE_kiln-translate"),
        env!("CARGO_BIN_EXE_kiln-g2p-train"),
    ] {
        let name = Path::new(exe).file_stem().unwrap().to_str().unwrap();
        let (out, err, code) = run_cli(exe, &["--version"], b"");
        assert_eq!((code, err.as_str()), (0, ""));
        assert_eq!(out.trim(), format!("{name} {}", env!("CARGO_PKG_VERSION")));
        for flag in ["--help", "-h"] {
            let (out, err, code) = run_cli(exe, &[flag], b"");
            assert_eq!((code, err.as_str()), (0, ""));
            assert!(out.contains("Usage:") && out.contains("--config"), "{out}");
        }
    }
    let (out, _, _) = translate_cli(&["--help"], b"");
    for option in [
        "--beam-size",
        "--n-best",
        "--max-input",
        "--weights",
        "--threads",
    ] {
        assert!(out.contains(option), "{option}: {out}");
    }
}

#[test]
fn a_config_file_sets_options_and_the_command_line_overrides_them() {
    let f = config_file("bad-beam", &format!("beam-size: 0\nmodels: [{MISSING}]\n"));
    let shown = f.display().to_string();
    let (_, err, code) = translate_cli(&["-c", &shown], b"cat\n");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--beam-size") && err.contains(&shown), "{err}");
    // the command line's beam replaces the file's; the file's model is then loaded
    let (_, err, code) = translate_cli(&["--config", &shown, "-b", "3"], b"cat\n");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("/nonexistent.npz"), "{err}");
    std::fs::remove_file(&f).unwrap();
    let (_, err, code) = translate_cli(&["-c", &shown], b"");
    assert_eq!(code, 2);
    assert!(err.contains(&shown), "{err}");
    let f = config_file("unknown", "beam-size: 3\nbeam-sise: 3\n");
    let shown = f.display().to_string();
    let (_, err, code) = translate_cli(&["-c", &shown, "--model", MISSING], b"");
    std::fs::remove_file(&f).unwrap();
    assert_eq!(code, 2);
    assert!(err.contains("beam-sise") && err.contains(&shown), "{err}");
    // with a real model: the beam of the file, then the command line's (one n-best line each)
    let f = config_file(
        "nbest",
        &format!("beam-size: 5\nn-best: true\nmodels:\n  - {}\n", shipped()),
    );
    let shown = f.display().to_string();
    let (out, err, code) = translate_cli(&["-c", &shown], b"kiln\n");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 5, "{out}");
    let (out, err, code) = translate_cli(&["-c", &shown, "-b", "2"], b"kiln\n");
    std::fs::remove_file(&f).unwrap();
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
}

#[test]
fn two_hundred_thousand_empty_lines_give_as_many_empty_lines() {
    let input = vec![b'\n'; 200_000];
    let (out, err, code) = translate_cli(&["--model", &shipped(), "--threads", "8"], &input);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.len(), 200_000);
    assert!(out.bytes().all(|b| b == b'\n'));
    assert!(err.contains("200000 lines, 0 output words"), "{err}");
}

#[test]
fn g2p_train_refuses_bad_values_before_reading_the_dictionary() {
    for (args, option) in [
        (&["--lr", "nan"][..], "--lr"),
        (&["--lr", "0"], "--lr"),
        (&["--size", "1,2,3"], "--size"),
        (&["--beam", "0"], "--beam"),
        (&["--batch", "0"], "--batch"),
        (&["--epochs", "2.5"], "--epochs"),
    ] {
        let all = [&["--dict", "/nonexistent.dict"][..], args].concat();
        let (_, err, code) = train_cli(&all);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(option), "{args:?}: {err}");
    }
    let f = config_file("train", "dict: /nonexistent.dict\nepochs: 1\n");
    let (_, err, code) = train_cli(&["-c", &f.display().to_string()]);
    std::fs::remove_file(&f).unwrap();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("/nonexistent.dict"), "{err}");
}
