//! Tidy: every Rust source file of the workspace opens with a module doc (`//!`) saying what
//! lives there, and every library or binary source file's doc says what it depends on
//! ("Depends on ..."), no crate has a cycle of module imports, and each crate depends only on
//! the crates the "Layers" table of `docs/ARCHITECTURE.md` allows, so the code map stays true
//! without anyone checking by hand.

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

/// A crate's module path of a source file under `src` (`lib.rs` and `main.rs` are the root,
/// `""`; `a/mod.rs` is `a`; `a/b.rs` is `a::b`).
fn module_path(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// The module paths a file's code names through `crate::`, `super::` or `self::` (comments,
/// doc comments and the unit tests left out), each as written: `a::b::Item`, or several
/// from one `{...}`.
fn named_paths(text: &str, module: &str) -> Vec<String> {
    let mut out = Vec::new();
    let parent = match module.rfind("::") {
        Some(i) => module[..i].to_string(),
        None => String::new(),
    };
    // a file's unit tests (conventionally last) may use any module
    for line in text.lines().take_while(|l| l.trim() != "#[cfg(test)]") {
        let code = line.split("//").next().unwrap_or("");
        for (prefix, base) in [
            ("crate::", String::new()),
            ("super::", parent.clone()),
            ("self::", module.to_string()),
        ] {
            let mut rest = code;
            while let Some(i) = rest.find(prefix) {
                // `crate::` inside a longer identifier (`kiln_crate::`) is not the keyword
                let before = rest[..i].chars().last();
                rest = &rest[i + prefix.len()..];
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let join = |p: &str| {
                    if base.is_empty() {
                        p.to_string()
                    } else {
                        format!("{base}::{p}")
                    }
                };
                if let Some(group) = rest.strip_prefix('{') {
                    let end = group.find('}').unwrap_or(group.len());
                    for item in group[..end].split(',') {
                        let item = item.trim();
                        if !item.is_empty() {
                            out.push(join(item));
                        }
                    }
                } else {
                    let end = rest
                        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                        .unwrap_or(rest.len());
                    out.push(join(rest[..end].trim_end_matches(':')));
                }
            }
        }
    }
    out
}

/// Within each crate, the modules' uses of each other form no cycle: a module never
/// depends, directly or through others, on a module that depends on it. Uses of the crate
/// root (its re-exports) and of a module's own ancestors or descendants do not count: a
/// parent declares and re-exports its children.
#[test]
fn no_crate_has_a_cycle_of_module_imports() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut srcs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    srcs.push(root.join("benches/src"));
    let mut cycles = Vec::new();
    for src in &srcs {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        let modules: Vec<String> = files.iter().map(|f| module_path(src, f)).collect();
        let is_within = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}::"));
        // edges: module index -> module indices it uses
        let mut edges: Vec<Vec<usize>> = vec![Vec::new(); modules.len()];
        for (i, f) in files.iter().enumerate() {
            let text = std::fs::read_to_string(f).unwrap();
            for path in named_paths(&text, &modules[i]) {
                // the longest module that is a prefix of the path
                let target = modules
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| !m.is_empty() && is_within(&path, m))
                    .max_by_key(|(_, m)| m.len())
                    .map(|(j, _)| j);
                let Some(j) = target else { continue };
                let (a, b) = (&modules[i], &modules[j]);
                let related = is_within(a, b) || is_within(b, a);
                if !related && !a.is_empty() && !edges[i].contains(&j) {
                    edges[i].push(j);
                }
            }
        }
        // depth-first search for a back edge
        let mut state = vec![0u8; modules.len()]; // 0 new, 1 on the stack, 2 done
        let mut stack: Vec<usize> = Vec::new();
        fn visit(
            v: usize,
            edges: &[Vec<usize>],
            state: &mut [u8],
            stack: &mut Vec<usize>,
            found: &mut Vec<Vec<usize>>,
        ) {
            state[v] = 1;
            stack.push(v);
            for &w in &edges[v] {
                match state[w] {
                    0 => visit(w, edges, state, stack, found),
                    1 => {
                        let at = stack.iter().position(|&x| x == w).unwrap_or(0);
                        found.push(stack[at..].to_vec());
                    }
                    _ => {}
                }
            }
            stack.pop();
            state[v] = 2;
        }
        let mut found = Vec::new();
        for v in 0..modules.len() {
            if state[v] == 0 {
                visit(v, &edges, &mut state, &mut stack, &mut found);
            }
        }
        let rel = src.strip_prefix(&root).unwrap_or(src).display().to_string();
        for c in found {
            let names: Vec<&str> = c.iter().map(|&i| modules[i].as_str()).collect();
            cycles.push(format!("{rel}: {} -> {}", names.join(" -> "), names[0]));
        }
    }
    assert!(
        cycles.is_empty(),
        "module import cycles:\n{}",
        cycles.join("\n")
    );
}

/// The crates' runtime dependencies on each other, from `cargo metadata`.
fn workspace_dependencies(root: &Path) -> Vec<(String, Vec<String>)> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let names: Vec<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null()) // normal, not dev or build
                .map(|d| d["name"].as_str().unwrap().to_string())
                .filter(|d| names.contains(d))
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

/// The "Layers" table of `docs/ARCHITECTURE.md`: each crate and the crates it may depend on.
fn layers_of_the_map(root: &Path) -> Vec<(String, Vec<String>)> {
    let map = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let section = map
        .split("\n## ")
        .find(|s| s.starts_with("Layers"))
        .expect("docs/ARCHITECTURE.md has a \"## Layers\" section");
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').collect();
            let name = ticked(cells[1]).remove(0);
            let allowed = if cells[2].contains("every crate above") {
                Vec::new() // checked below: everything listed before it
            } else {
                ticked(cells[2])
            };
            (name, allowed)
        })
        .collect()
}

/// Every workspace crate has a row in the map's "Layers" table, and depends at run time only
/// on the crates its row allows, so the map cannot drift from the manifests.
#[test]
fn crate_dependencies_follow_the_layers_of_the_map() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let layers = layers_of_the_map(&root);
    let actual = workspace_dependencies(&root);
    assert!(actual.len() >= 10, "found {} crates", actual.len());
    let mut wrong = Vec::new();
    for (name, deps) in &actual {
        let Some(row) = layers.iter().position(|(n, _)| n == name) else {
            wrong.push(format!(
                "{name}: no row in the Layers table of docs/ARCHITECTURE.md"
            ));
            continue;
        };
        let allowed: Vec<String> = if layers[row].1.is_empty() && name == "kiln-benches" {
            layers[..row]
                .iter()
                .map(|(n, _)| n.clone())
                .filter(|n| n != "kiln-reference")
                .collect()
        } else {
            layers[row].1.clone()
        };
        for d in deps {
            if !allowed.contains(d) {
                wrong.push(format!(
                    "{name} depends on {d}, which its row of the Layers table does not allow"
                ));
            }
        }
    }
    for (name, _) in &layers {
        if !actual.iter().any(|(n, _)| n == name) {
            wrong.push(format!(
                "the Layers table names {name}, which is not a crate"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
