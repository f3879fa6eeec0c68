//! Which way imports go, checked on the source for every top-level module
//! of the crate: each may import only the modules its entry in [`ALLOWED`]
//! lists, and the graph of what they import has no cycle. From the bottom:
//! the vocabulary (`model`, `metrics`); the sandbox; `config`; `git`; the
//! domain (`gate`, `plan`, then `apply`, then `report`), which never imports
//! an edge; the edges (`forge`, `store`, `notify`, `jobs`, `server`), where
//! `forge` never imports the domain and `server` (routes only) never
//! imports `worker`, `plan`, `apply` or `app`; then `worker` and the
//! composition root `app`. Test code (a `tests.rs`, or a file's trailing
//! `#[cfg(test)] mod tests`) may import anything. A path that breaks a rule
//! fails here, naming the file and the line; a cycle is named whole.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What each top-level module may import. A module missing here fails the
/// check: a new one takes its place in the order deliberately.
const ALLOWED: &[(&str, &[&str])] = &[
    ("model", &[]),
    ("metrics", &[]),
    ("sandbox", &["model"]),
    ("config", &["model", "sandbox"]),
    ("git", &["model", "config"]),
    ("gate", &["model", "config"]),
    // The plan engine's workbench reads the trees it plans through `git`
    // and runs its commands in the sandbox.
    ("plan", &["model", "metrics", "sandbox", "config", "git"]),
    ("apply", &["model", "sandbox", "config", "gate", "plan"]),
    ("report", &["model", "config", "gate", "plan", "apply"]),
    ("forge", &["model", "metrics", "config"]),
    ("store", &["model", "gate", "apply", "forge"]),
    ("notify", &["model", "config", "apply", "report", "forge"]),
    ("jobs", &["model", "forge", "store", "notify"]),
    // Routes only verify, record and enqueue; `app` starts the workers.
    (
        "server",
        &["model", "metrics", "sandbox", "forge", "store", "jobs"],
    ),
    (
        "worker",
        &[
            "model", "metrics", "sandbox", "config", "git", "gate", "plan", "apply", "report",
            "forge", "store", "notify", "jobs",
        ],
    ),
    (
        "app",
        &[
            "model", "metrics", "sandbox", "config", "git", "gate", "plan", "forge", "store",
            "server", "worker",
        ],
    ),
];

/// The checks themselves.
const NOT_CHECKED: &[&str] = &["layering"];

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

/// The crate's top-level modules: `src/<m>/` and `src/<m>.rs`.
fn top_level_modules(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            let name = path.file_stem()?.to_str()?.to_owned();
            let module = path.is_dir() || path.extension().is_some_and(|x| x == "rs");
            (module && name != "lib" && name != "main").then_some(name)
        })
        .collect()
}

/// A module's files, without test code: `tests.rs` files are left out and
/// a file's trailing `#[cfg(test)] mod tests` is cut off.
fn code_of(src: &Path, module: &str) -> Vec<(PathBuf, String)> {
    let mut files = if src.join(module).is_dir() {
        files_under(&src.join(module))
    } else {
        vec![src.join(format!("{module}.rs"))]
    };
    files.retain(|f| f.file_name().is_some_and(|n| n != "tests.rs"));
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).unwrap();
            let code = match text.find("#[cfg(test)]\nmod tests") {
                Some(end) => text[..end].to_owned(),
                None => text,
            };
            (file.strip_prefix(src).unwrap().to_owned(), code)
        })
        .collect()
}

/// A cycle in `graph`, as the modules around it (the first repeated last).
fn cycle_in(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        at: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|m| m == at) {
            let mut cycle = path[start..].to_vec();
            cycle.push(at.to_owned());
            return Some(cycle);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_owned());
        for next in graph.get(at).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(at.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn every_module_imports_only_what_its_layer_allows_and_nothing_goes_round() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = top_level_modules(&src);
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut broken = Vec::new();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for module in modules
        .iter()
        .filter(|m| !NOT_CHECKED.contains(&m.as_str()))
    {
        let Some(may) = allowed.get(module.as_str()) else {
            broken.push(format!(
                "src/{module}: a module the layering does not place; add it to ALLOWED"
            ));
            continue;
        };
        for (file, code) in code_of(&src, module) {
            for (line, named) in modules_named(&code, depth_of(&file)) {
                if named == *module || !modules.contains(&named) {
                    continue;
                }
                graph
                    .entry(module.clone())
                    .or_default()
                    .insert(named.clone());
                if !may.contains(&named.as_str()) {
                    broken.push(format!(
                        "{}:{line}: {module} imports {named}",
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "imports against the layering (src/layering.rs):\n{}",
        broken.join("\n")
    );
    assert_eq!(cycle_in(&graph), None, "modules import each other round");
}

/// The parts of `plan` that run processes (git, the sandbox): the pure
/// domain reads what they produce (`plan::outcome`), never them.
const RUNS_PROCESSES: &[&str] = &["plan::engine", "plan::executor", "plan::runner"];

#[test]
fn the_pure_domain_never_imports_what_runs_processes() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for module in ["gate", "apply", "report"] {
        for (file, code) in code_of(&src, module) {
            for (i, line) in code.lines().enumerate() {
                let line = line.trim_start();
                if line.starts_with("//") {
                    continue;
                }
                for part in RUNS_PROCESSES.iter().filter(|p| line.contains(*p)) {
                    broken.push(format!(
                        "{}:{}: {module} imports {part}",
                        file.display(),
                        i + 1
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_layering_itself_has_no_cycle_and_a_cycle_is_named_whole() {
    let layering: BTreeMap<String, BTreeSet<String>> = ALLOWED
        .iter()
        .map(|(m, may)| (m.to_string(), may.iter().map(|s| s.to_string()).collect()))
        .collect();
    assert_eq!(cycle_in(&layering), None);
    // `config` importing `apply` (as it did through `HELD_RETRY`) closes
    // config → … → apply → config.
    let mut with_a_cycle = layering;
    with_a_cycle
        .get_mut("config")
        .unwrap()
        .insert("apply".into());
    let cycle = cycle_in(&with_a_cycle).expect("a cycle");
    assert_eq!(cycle.first(), cycle.last());
    assert!(
        cycle.contains(&"config".to_owned()) && cycle.contains(&"apply".to_owned()),
        "{cycle:?}"
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
