//! Which way imports go, checked on the source for every top-level module
//! of the crate: each may import only the modules its entry in [`ALLOWED`]
//! lists, and the graph of what they import has no cycle. From the bottom:
//! the vocabulary (`model`, `metrics`); the sandbox; `config`; `git`; the
//! domain (`gate`, `plan`, then `apply`, then `report`), which never imports
//! an edge; the edges (`forge`, `store`, `notify`, `dispatch`, `jobs`,
//! `server`), where `forge` never imports the domain and `server` (routes
//! only) never imports `worker`, `plan`, `apply` or `app`; then `worker` and
//! the composition root `app`.
//!
//! Inside each top-level module, no files import each other round either.
//! A file is the module it declares (`store/sql.rs` is `store::sql`,
//! `plan/engine/group.rs` is `plan::engine::group`, `plan/mod.rs` is
//! `plan`) and imports the file that defines what a path it names leads
//! to: `crate::store::sql::x`, `super::sql::x`, `self::…`, a child's
//! `sql::x`, each item of a group across lines, followed through `use`s
//! and re-exports (`super::Store` is `sql.rs` when `store/mod.rs` re-exports
//! `sql::Store`). A parent file (`mod.rs`, or `engine.rs` beside `engine/`)
//! is the interface of its subtree and sits above it: what it names in its
//! own subtree does not count. Everything else does: a file naming a
//! sibling, a cousin, or an item its parent defines itself (`super::JobId`).
//! Items two files share go to a file of their own, or to the lower one.
//!
//! Test code (a `tests.rs`, or a file's trailing `#[cfg(test)] mod tests`)
//! may import anything. A path that breaks a rule fails here, naming the
//! file and the line; a cycle is named whole.

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
    ("store", &["model", "gate", "plan", "apply", "forge"]),
    ("notify", &["model", "config", "apply", "report", "forge"]),
    // Jobs handed to the forge's CI: recorded, dispatched and waited for
    // through the store and the forge; run on the runner in the sandbox.
    (
        "dispatch",
        &[
            "model", "sandbox", "config", "git", "plan", "forge", "store",
        ],
    ),
    ("jobs", &["model", "forge", "store", "notify"]),
    // Routes only verify, record and enqueue; `app` starts the workers.
    (
        "server",
        &[
            "model", "metrics", "sandbox", "forge", "store", "jobs", "dispatch",
        ],
    ),
    // The pages read every record to show it; an operator's action
    // changes a lock or a job through the store and records it.
    (
        "web",
        &[
            "model", "config", "gate", "plan", "apply", "report", "forge", "store", "jobs",
        ],
    ),
    (
        "worker",
        &[
            "model", "metrics", "sandbox", "config", "git", "gate", "plan", "apply", "report",
            "forge", "store", "notify", "jobs", "dispatch",
        ],
    ),
    // The CLI's client of a server's JSON API: it speaks HTTP only.
    ("remote", &["model"]),
    (
        "app",
        &[
            "model", "metrics", "sandbox", "config", "git", "gate", "plan", "forge", "store",
            "server", "web", "worker", "dispatch",
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

/// A path a file names, from the crate root: `super::sql::Store` in
/// `store/intake.rs` is `store::sql::Store`.
#[derive(Debug)]
struct Named {
    line: usize,
    path: Vec<String>,
    /// The name a `use` declaration binds it to in the file (after `as`).
    imported_as: Option<String>,
}

/// The paths a use tree (or a plain path) at the start of `text` spells
/// below `prefix`, each with the name it ends in; and how far it reaches.
/// `self` in a group is the prefix itself, a glob ends in `*`.
fn use_tree(text: &str, prefix: Vec<String>, leaves: &mut Vec<(Vec<String>, String)>) -> usize {
    let skip_space = |at: usize| at + (text[at..].len() - text[at..].trim_start().len());
    let mut path = prefix;
    let mut at = 0;
    loop {
        let rest = &text[at..];
        if rest.starts_with('{') {
            at += 1;
            loop {
                at = skip_space(at);
                if text[at..].starts_with('}') || text[at..].is_empty() {
                    return (at + 1).min(text.len());
                }
                at += use_tree(&text[at..], path.clone(), leaves);
                at = skip_space(at);
                match text[at..].chars().next() {
                    Some(',') => at += 1,
                    Some('}') => return at + 1,
                    _ => return at,
                }
            }
        }
        if rest.starts_with('*') {
            path.push("*".into());
            leaves.push((path, "*".into()));
            return at + 1;
        }
        let ident: String = rest.chars().take_while(|c| is_ident(*c)).collect();
        at += ident.len();
        if !ident.is_empty() && ident != "self" {
            path.push(ident.clone());
        }
        if !ident.is_empty() && text[at..].starts_with("::") {
            at += 2;
            continue;
        }
        let mut name = path.last().cloned().unwrap_or_default();
        let after = skip_space(at);
        if let Some(alias) = text[after..].strip_prefix("as ") {
            let alias = alias.trim_start();
            let renamed: String = alias.chars().take_while(|c| is_ident(*c)).collect();
            if !renamed.is_empty() {
                at = text.len() - alias.len() + renamed.len();
                name = renamed;
            }
        }
        leaves.push((path, name));
        return at;
    }
}

/// The paths `text`, the code of the file that is module `at`, names
/// through `crate::`, `super::`, `self::` or one of its `children`
/// (`sql::Store` in `store/mod.rs`), groups `{a, b::{c}}` across lines
/// included. `super::` climbing past the root leaves the crate. Line
/// comments are skipped.
fn paths_named(text: &str, at: &[String], children: &BTreeSet<String>) -> Vec<Named> {
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
    let inline = modules_by_line(&code, at);
    let mut named = Vec::new();
    let mut pos = 0;
    while pos < code.len() {
        let rest = &code[pos..];
        let boundary = !code[..pos].ends_with(|c: char| is_ident(c) || c == ':');
        let child = || {
            let head: String = rest.chars().take_while(|c| is_ident(*c)).collect();
            (children.contains(&head) && rest[head.len()..].starts_with("::")).then_some(rest)
        };
        let root = if !boundary {
            None
        } else if let Some(after) = rest.strip_prefix("crate::") {
            Some((Vec::new(), after))
        } else if let Some(after) = rest.strip_prefix("self::") {
            Some((inline[line_of(pos) - 1].clone(), after))
        } else if rest.starts_with("super::") {
            let mut after = rest;
            let mut climbed = 0;
            while let Some(next) = after.strip_prefix("super::") {
                after = next;
                climbed += 1;
            }
            let inside = &inline[line_of(pos) - 1];
            inside
                .len()
                .checked_sub(climbed)
                .map(|kept| (inside[..kept].to_vec(), after))
        } else {
            child().map(|after| (at.to_vec(), after))
        };
        let Some((base, after)) = root else {
            pos += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let before: Vec<&str> = code[..pos]
            .rsplit('\n')
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        let declared = before.last() == Some(&"use");
        let mut leaves = Vec::new();
        let reach = use_tree(after, base, &mut leaves);
        let line = line_of(pos);
        named.extend(leaves.into_iter().map(|(path, name)| Named {
            line,
            path,
            imported_as: declared.then_some(name),
        }));
        pos += rest.len() - after.len() + reach.max(1);
    }
    named
}

/// The module each line of `code` is in, from the file's module `at`: the
/// lines of an inline `mod name {`, closed as rustfmt writes it by a `}` at
/// its indentation, are in `at::name`.
fn modules_by_line(code: &str, at: &[String]) -> Vec<Vec<String>> {
    let mut open: Vec<(String, Vec<String>)> = vec![(String::new(), at.to_vec())];
    code.lines()
        .map(|line| {
            let (closing, module) = open.last().cloned().unwrap_or_default();
            let words: Vec<&str> = line.split_whitespace().collect();
            let opened = match words.as_slice() {
                [.., "mod", name, "{"] if is_ident_word(name) => Some(name.to_string()),
                _ => None,
            };
            if open.len() > 1 && line == closing {
                open.pop();
            } else if let Some(name) = opened {
                let indent = &line[..line.len() - line.trim_start().len()];
                open.push((format!("{indent}}}"), [module.clone(), vec![name]].concat()));
            }
            module
        })
        .collect()
}

fn is_ident_word(word: &str) -> bool {
    !word.is_empty() && word.chars().all(is_ident)
}

/// The crate's top-level modules `text` names, with the line, from the
/// file that is module `at`: `crate::m` anywhere, each head of a
/// `crate::{m, n::x}` group, and `super::` paths that climb to the root.
fn modules_named(text: &str, at: &[String]) -> Vec<(usize, String)> {
    let mut heads: Vec<(usize, String)> = paths_named(text, at, &BTreeSet::new())
        .into_iter()
        .filter_map(|n| Some((n.line, n.path.into_iter().next()?)))
        .collect();
    heads.dedup();
    heads
}

/// The module a file under `src/` is: `store/sql.rs` is `store::sql`,
/// `plan/mod.rs` is `plan`, `plan/engine/group.rs` is `plan::engine::group`.
fn module_of(file: &Path) -> Vec<String> {
    let mut path: Vec<String> = file
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    path
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

/// What imports what: a module (or file) and the ones it names.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// A cycle in `graph`, as the modules around it (the first repeated last).
fn cycle_in(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        at: &str,
        graph: &Graph,
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

/// Which files of one top-level module (`files` as [`code_of`] gives them)
/// import which, and the first line where each names the other. What
/// counts is in the module's doc.
fn file_graph(files: &[(PathBuf, String)]) -> (Graph, BTreeMap<(String, String), usize>) {
    let modules: BTreeMap<Vec<String>, &PathBuf> = files
        .iter()
        .map(|(file, _)| (module_of(file), file))
        .collect();
    let named: BTreeMap<Vec<String>, Vec<Named>> = files
        .iter()
        .map(|(file, code)| {
            let module = module_of(file);
            let children: BTreeSet<String> = modules
                .keys()
                .filter(|m| m.len() == module.len() + 1 && m.starts_with(&module))
                .filter_map(|m| m.last().cloned())
                .collect();
            let named = paths_named(code, &module, &children);
            (module, named)
        })
        .collect();
    let imports: BTreeMap<&Vec<String>, BTreeMap<&str, &Vec<String>>> = named
        .iter()
        .map(|(module, named)| {
            let bound = named
                .iter()
                .filter_map(|n| Some((n.imported_as.as_deref()?, &n.path)))
                .filter(|(name, _)| !matches!(*name, "*" | "_"));
            (module, bound.collect())
        })
        .collect();
    let file_of = |path: &Vec<String>| {
        let mut path = path.clone();
        for _ in 0..modules.len() {
            let file = (1..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| modules.contains_key(p))?;
            let item = path.get(file.len()).map(String::as_str);
            match item.and_then(|item| imports[&file].get(item)) {
                Some(&bound) => path = [bound, &path[file.len() + 1..]].concat(),
                None => return Some(file),
            }
        }
        None
    };
    let mut graph = Graph::new();
    let mut lines = BTreeMap::new();
    for (module, named) in &named {
        let from = modules[module].display().to_string();
        for n in named {
            let Some(target) = file_of(&n.path) else {
                continue;
            };
            if target.starts_with(module) {
                continue;
            }
            let to = modules[&target].display().to_string();
            lines.entry((from.clone(), to.clone())).or_insert(n.line);
            graph.entry(from.clone()).or_default().insert(to);
        }
    }
    (graph, lines)
}

/// A cycle among the files of one top-level module, named whole: each file
/// with the line where it names the next, the first repeated last.
fn file_cycle_in(files: &[(PathBuf, String)]) -> Option<String> {
    let (graph, lines) = file_graph(files);
    let cycle = cycle_in(&graph)?;
    let mut hops: Vec<String> = cycle
        .windows(2)
        .map(|hop| format!("{}:{}", hop[0], lines[&(hop[0].clone(), hop[1].clone())]))
        .collect();
    hops.extend(cycle.last().cloned());
    Some(hops.join(" → "))
}

#[test]
fn every_module_imports_only_what_its_layer_allows_and_nothing_goes_round() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = top_level_modules(&src);
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut broken = Vec::new();
    let mut graph = Graph::new();
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
            for (line, named) in modules_named(&code, &module_of(&file)) {
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

#[test]
fn no_files_of_a_module_import_each_other_round() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let cycles: Vec<String> = top_level_modules(&src)
        .iter()
        .filter(|m| !NOT_CHECKED.contains(&m.as_str()))
        .filter_map(|module| file_cycle_in(&code_of(&src, module)))
        .collect();
    assert!(
        cycles.is_empty(),
        "files that import each other round, each with the line where it names the next \
         (src/layering.rs):\n{}",
        cycles.join("\n")
    );
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
    let layering: Graph = ALLOWED
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
    let named = modules_named(text, &["plan".into(), "fanout".into()]);
    let names: Vec<&str> = named.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(
        names,
        ["forge", "forged", "model", "worker", "server", "plan"]
    );
    assert_eq!(named[2].0, 4, "a group's heads are on the line it starts");
    let inline = "mod erased {\n    use super::super::model;\n}\n";
    assert_eq!(
        modules_named(inline, &["config".into(), "repo".into()]),
        [(2, "config".to_owned())],
        "`super` in an inline module climbs from it"
    );
    assert_eq!(module_of(Path::new("plan/mod.rs")), ["plan"]);
    assert_eq!(
        module_of(Path::new("plan/engine/group.rs")),
        ["plan", "engine", "group"]
    );
}

fn sources(files: &[(&str, &str)]) -> Vec<(PathBuf, String)> {
    files
        .iter()
        .map(|(file, code)| (PathBuf::from(file), code.to_string()))
        .collect()
}

#[test]
fn files_that_import_each_other_round_are_named_whole_through_re_exports() {
    let store = sources(&[
        (
            "store/mod.rs",
            "mod intake;\nmod sql;\npub use sql::Store;\n",
        ),
        (
            "store/sql.rs",
            "pub struct Store;\npub(super) const UPSERT: &str = \"\";\n\
             fn open() {\n    super::intake::spawn_writer();\n}\n",
        ),
        (
            "store/intake.rs",
            "use super::{\n    sql::UPSERT,\n};\npub(super) fn spawn_writer() {}\n",
        ),
    ]);
    assert_eq!(
        file_cycle_in(&store).as_deref(),
        Some("store/intake.rs:1 → store/sql.rs:4 → store/intake.rs")
    );
    let mut through_the_parent = store;
    through_the_parent[2].1 =
        "fn f(_: &crate::store::Store) {}\npub(super) fn spawn_writer() {}\n".into();
    assert_eq!(
        file_cycle_in(&through_the_parent).as_deref(),
        Some("store/intake.rs:1 → store/sql.rs:4 → store/intake.rs"),
        "`crate::store::Store` is sql.rs's, re-exported"
    );
}

#[test]
fn a_parent_above_its_children_and_its_items_they_share_are_no_cycle() {
    let store = sources(&[
        (
            "store/mod.rs",
            "mod db;\nmod intake;\nmod sql;\npub use sql::Store;\n\
             pub(crate) struct JobId;\nfn start() {\n    sql::open();\n}\n",
        ),
        ("store/db.rs", "pub(super) fn to_i64() {}\n"),
        (
            "store/sql.rs",
            "use super::db::to_i64;\nuse super::JobId;\npub struct Store;\n\
             fn open() {\n    super::intake::spawn_writer();\n}\n",
        ),
        (
            "store/intake.rs",
            "use crate::store::{db, JobId};\npub(super) fn spawn_writer() {}\n",
        ),
    ]);
    let (graph, _) = file_graph(&store);
    let imports = |file: &str| graph.get(file).cloned().unwrap_or_default();
    assert_eq!(imports("store/mod.rs"), BTreeSet::new());
    assert_eq!(
        imports("store/sql.rs"),
        BTreeSet::from(["store/db.rs", "store/intake.rs", "store/mod.rs"].map(String::from))
    );
    assert_eq!(
        imports("store/intake.rs"),
        BTreeSet::from(["store/db.rs", "store/mod.rs"].map(String::from))
    );
    assert_eq!(file_cycle_in(&store), None);
    let engine = sources(&[
        ("plan/mod.rs", "pub mod engine;\npub mod outcome;\n"),
        (
            "plan/engine.rs",
            "mod group;\npub(crate) use super::outcome::Planned;\n\
             pub(crate) struct Options;\nfn plan() {\n    group::run();\n}\n",
        ),
        (
            "plan/engine/group.rs",
            "use super::{Options, Planned};\npub(super) fn run() {}\n",
        ),
        ("plan/outcome.rs", "pub(crate) struct Planned;\n"),
    ]);
    assert_eq!(file_cycle_in(&engine), None);
    let mut outcome_names_the_engine = engine;
    outcome_names_the_engine[3].1 = "pub(crate) struct Planned(super::engine::Options);\n".into();
    assert_eq!(
        file_cycle_in(&outcome_names_the_engine).as_deref(),
        Some("plan/engine.rs:2 → plan/outcome.rs:1 → plan/engine.rs"),
        "a parent file's own items count like any file's"
    );
}
