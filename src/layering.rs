//! Which way imports go (DESIGN §11), checked on the source: `model` imports
//! nothing of the crate; the domain (`plan`, `gate`, `apply`, `report`) and
//! `config` never import an edge (`forge`, `store`, `server`, `worker`), nor
//! `git` (but the plan engine's workbench); `forge` never imports the
//! domain or `git`; `server` (routes only) never imports `worker`, `plan`,
//! `apply` or the composition root `app`. A path that breaks a rule fails here,
//! naming the file and the line.

use std::path::{Path, PathBuf};

const EDGES: &[&str] = &["forge", "store", "server", "worker"];
const DOMAIN: &[&str] = &["plan", "gate", "apply", "report"];

/// What each module may not import.
fn forbidden(module: &str) -> Vec<&'static str> {
    match module {
        "model" => [
            EDGES,
            DOMAIN,
            &["config", "sandbox", "metrics", "jobs", "git"],
        ]
        .concat(),
        // The plan engine's workbench still reads the trees it plans
        // through `git` itself; the pure domain never does.
        "plan" => EDGES.to_vec(),
        "gate" | "apply" | "report" | "config" => [EDGES, &["git"]].concat(),
        "forge" => [DOMAIN, &["git"]].concat(),
        // Routes only verify, record and enqueue; `app` starts the workers.
        "server" => vec!["worker", "plan", "apply", "app"],
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

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The crate's top-level modules `text` names, with the line: `crate::m`
/// anywhere, each head of a `crate::{m, n::x}` group (across lines), and
/// `super::…` paths that climb to the crate root from a file `depth`
/// modules deep (`src/plan/mod.rs`: 1, `src/plan/fanout.rs`: 2). Line
/// comments are skipped.
fn modules_named(text: &str, depth: usize) -> Vec<(usize, String)> {
    let code: String = text
        .lines()
        .map(|line| {
            if line.trim_start().starts_with("//") {
                ""
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut named = Vec::new();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let boundary = !code[..at].ends_with(is_ident);
        let root = if !boundary {
            None
        } else if let Some(after) = rest.strip_prefix("crate::") {
            Some(after)
        } else if rest.starts_with("super::") {
            let mut after = rest;
            let mut climbed = 0;
            while let Some(next) = after.strip_prefix("super::") {
                after = next;
                climbed += 1;
            }
            (climbed == depth).then_some(after)
        } else {
            None
        };
        let Some(after) = root else {
            at += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let heads: Vec<String> = match after.strip_prefix('{') {
            Some(group) => {
                let mut level = 0;
                let mut items = vec![String::new()];
                for c in group.chars() {
                    match c {
                        '}' if level == 0 => break,
                        '{' => level += 1,
                        '}' => level -= 1,
                        ',' if level == 0 => items.push(String::new()),
                        _ if level == 0 => items.last_mut().unwrap().push(c),
                        _ => {}
                    }
                }
                items
                    .iter()
                    .map(|item| item.trim().chars().take_while(|c| is_ident(*c)).collect())
                    .collect()
            }
            None => vec![after.chars().take_while(|c| is_ident(*c)).collect()],
        };
        let line = line_of(at);
        named.extend(
            heads
                .into_iter()
                .filter(|h| !h.is_empty())
                .map(|h| (line, h)),
        );
        at += rest.len() - after.len();
    }
    named
}

/// How many `super::` climb from `file` (under `src/`) to the crate root.
fn depth_of(file: &Path) -> usize {
    let parts = file.components().count();
    if file.file_name().is_some_and(|n| n == "mod.rs") {
        parts - 1
    } else {
        parts
    }
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
            let relative = file.strip_prefix(&src).unwrap();
            for (line, named) in modules_named(&text, depth_of(relative)) {
                if forbidden(module).contains(&named.as_str()) {
                    broken.push(format!(
                        "{}:{line}: {module} imports {named}",
                        relative.display()
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
fn the_check_sees_every_way_of_naming_a_module_and_not_a_longer_name() {
    let text = "use crate::forge::types::Comment;\n\
                // use crate::store::Store;\n\
                let x = crate::forged::y;\n\
                use crate::{\n    model::Digest,\n    worker::{a, b},\n};\n\
                use super::super::server;\n\
                use super::sibling;\n";
    let named = modules_named(text, 2);
    let names: Vec<&str> = named.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names, ["forge", "forged", "model", "worker", "server"]);
    assert_eq!(named[2].0, 4, "a group's heads are on the line it starts");
    assert_eq!(depth_of(Path::new("plan/mod.rs")), 1);
    assert_eq!(depth_of(Path::new("plan/fanout.rs")), 2);
}
