//! `kiln-translate` end to end on the g2p-en model (skips when the model is absent).

mod common;
use common::translate_cli;

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
