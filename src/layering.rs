//! Which way imports go (DESIGN §11), checked on the source: `model` imports
//! nothing of the crate; the domain (`plan`, `gate`, `apply`, `report`) and
//! `config` never import an edge (`forge`, `store`, `server`, `worker`);
//! `forge` never imports the domain. A `use` that breaks a rule fails here,
//! naming the file and the line.

use std::path::{Path, PathBuf};

const EDGES: &[&str] = &["forge", "store", "server", "worker"];
const DOMAIN: &[&str] = &["plan", "gate", "apply", "report"];

/// What each module may not import.
fn forbidden(module: &str) -> Vec<&'static str> {
    let everything = [EDGES, DOMAIN, &["config", "sandbox", "metrics"]].concat();
    match module {
        "model" => everything,
        "plan" | "gate" | "apply" | "report" | "config" => EDGES.to_vec(),
        "forge" => DOMAIN.to_vec(),
        _ => Vec::new(),
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// The lines of `text` that name `crate::<module>`, comments aside.
fn imports_of<'a>(text: &'a str, module: &str) -> Vec<(usize, &'a str)> {
    let needle = format!("crate::{module}");
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .filter(|(_, line)| {
            line.match_indices(&needle).any(|(at, _)| {
                let after = line[at + needle.len()..].chars().next();
                !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
        })
        .map(|(n, line)| (n + 1, line))
        .collect()
}

#[test]
fn imports_go_the_way_the_layout_says() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for module in [
        "model", "plan", "gate", "apply", "report", "config", "forge",
    ] {
        for file in files_under(&src.join(module)) {
            let text = std::fs::read_to_string(&file).unwrap();
            for other in forbidden(module) {
                for (line, code) in imports_of(&text, other) {
                    broken.push(format!(
                        "{}:{line}: {module} imports {other}: {}",
                        file.strip_prefix(&src).unwrap().display(),
                        code.trim()
                    ));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "imports against DESIGN §11:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_check_sees_an_import_and_not_a_longer_name() {
    let text = "use crate::forge::types::Comment;\n// use crate::store::Store;\nlet x = crate::forged::y;\n";
    assert_eq!(imports_of(text, "forge").len(), 1);
    assert!(imports_of(text, "store").is_empty());
}
