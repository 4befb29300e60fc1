//! Tidy: every Rust source file of the workspace opens with a module doc (`//!`) saying what
//! lives there, and every library or binary source file's doc says what it depends on
//! ("Depends on ..."), so the code map stays true without anyone checking by hand.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The leading `//!` block of a file.
fn module_doc(text: &str) -> String {
    text.lines()
        .take_while(|l| l.starts_with("//!"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_source_file_has_a_module_doc_naming_its_dependencies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    rust_files(&root.join("benches"), &mut files);
    rust_files(&root.join("examples"), &mut files);
    assert!(
        files.len() > 50,
        "found only {} files under {}",
        files.len(),
        root.display()
    );
    let mut missing = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let doc = module_doc(&text);
        let rel = f.strip_prefix(&root).unwrap_or(f).display().to_string();
        let in_src = rel.contains("/src/");
        if doc.is_empty() {
            missing.push(format!("{rel}: no module doc (`//!` on the first line)"));
        } else if in_src && !doc.contains("Depends on") {
            missing.push(format!(
                "{rel}: the module doc does not say what it depends on (\"Depends on ...\")"
            ));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
