//! `[terraform]`: a Terraform or OpenTofu repository with no scripts of its
//! own (docs/terraform.md). The section stands for one discovering
//! component, `terraform`, whose units are the repository's root modules
//! and whose commands are wavegate's own (`wavegate terraform plan`,
//! `apply`, `outputs`: src/plan/terraform_run.rs).
//!
//! [`discover_roots`] reads the `.tf` files of the commit planned: a
//! directory whose files declare a backend (or that `[[terraform.root]]`
//! lists) is a root; the local modules it calls (`source = "../modules/x"`)
//! become its paths, the roots whose state it reads
//! (`terraform_remote_state` with a literal local path or backend key) its
//! dependencies, and its stages come from `stages` and `stage_dirs`. It is
//! pure over the files it is given, so that the discovery, `config check`
//! and the tests read a tree the same way; the digests bind what it found
//! like any discovery's units.

use super::check::{join_path as join, ConfigError};
use super::discover::Unit;
use super::glob::Pattern;
use super::quiet::RawQuiet;
use super::raw::{RawComponent, RawRepoConfig, RawRoot, RawTerraform, StagesBy};
use std::collections::{BTreeMap, BTreeSet};

/// The discovering component `[terraform]` stands for.
pub(crate) const COMPONENT: &str = "terraform";

/// The most `.tf` files one discovery reads.
pub const MAX_TF_FILES: usize = 20_000;

fn config_error(field: &str, problem: String, fix: &str) -> ConfigError {
    ConfigError {
        file: super::CONFIG_FILE.into(),
        field: field.into(),
        problem,
        fix: fix.into(),
    }
}

/// `raw` with the component `[terraform]` stands for added, its section
/// checked. A file without the section is returned as it is.
pub(crate) fn desugar(raw: &mut RawRepoConfig) -> Result<(), ConfigError> {
    let Some(terraform) = &raw.terraform else {
        return Ok(());
    };
    if raw.components.iter().any(|c| c.name == COMPONENT) {
        return Err(config_error(
            "component.name",
            format!("a component is named `{COMPONENT}`, the name `[terraform]` gives the root modules it finds"),
            "rename that component",
        ));
    }
    let binary = terraform.binary.as_deref().unwrap_or("terraform");
    if !(matches!(binary, "terraform" | "tofu") || binary.starts_with('/')) {
        return Err(config_error(
            "terraform.binary",
            format!("`{binary}` is neither `terraform`, `tofu` nor an absolute path"),
            "write `terraform` or `tofu` (found on the commands' PATH), or the absolute path of the program",
        ));
    }
    if let Some(pattern) = &terraform.stage_dirs {
        StageDirs::new(pattern).map_err(|problem| {
            config_error(
                "terraform.stage_dirs",
                problem,
                "write a directory pattern with `{stage}` as one whole segment, e.g. `envs/{stage}`",
            )
        })?;
    }
    for (i, text) in terraform.ignore.iter().enumerate() {
        Pattern::new(text).map_err(|problem| {
            config_error(
                &format!("terraform.ignore[{i}]"),
                problem,
                "write a directory pattern relative to the repository root, e.g. `examples/**`",
            )
        })?;
    }
    let mut dirs = BTreeSet::new();
    for (i, root) in terraform.roots.iter().enumerate() {
        let dir = clean(&root.dir);
        if dir.is_empty() || dir.starts_with('/') || dir.split('/').any(|s| s == "..") {
            return Err(config_error(
                &format!("terraform.root[{i}].dir"),
                format!("`{}` is not a directory of the repository", root.dir),
                "write the root module's directory relative to the repository root, e.g. `infra/app`",
            ));
        }
        if !dirs.insert(dir) {
            return Err(config_error(
                &format!("terraform.root[{i}].dir"),
                format!("`{}` is listed twice", root.dir),
                "keep one `[[terraform.root]]` per directory",
            ));
        }
    }
    let mut common = vec![
        "--binary".to_owned(),
        binary.to_owned(),
        "--stage".into(),
        "{stage}".into(),
        "--dir".into(),
        "{dir}".into(),
    ];
    if let Some(pattern) = &terraform.stage_dirs {
        // Filled in per member: the command tells a directory per stage
        // from a workspace per stage by whether its dir is under it.
        common.extend(["--stage-dir".to_owned(), pattern.clone()]);
    }
    let command = |words: &[&str]| -> Vec<String> {
        let mut argv: Vec<String> = ["wavegate", "terraform"]
            .iter()
            .chain(words)
            .map(|w| (*w).to_owned())
            .collect();
        argv.extend(common.iter().cloned());
        argv
    };
    raw.components.push(RawComponent {
        name: COMPONENT.into(),
        dir: String::new(),
        discover: Some(
            [
                "wavegate",
                "terraform",
                "discover",
                "{units_file}",
                "--root",
                "{root}",
            ]
            .map(str::to_owned)
            .to_vec(),
        ),
        paths: None,
        depends_on: Vec::new(),
        inputs: BTreeMap::new(),
        stages: None,
        plan: Some(command(&["plan", "{plan_file}", "{inputs_file}"])),
        apply: Some(command(&["apply", "{plan_file}", "{outputs_file}"])),
        outputs: Some(command(&["outputs", "{outputs_file}"])),
        timeout: None,
        kind: None,
        group: None,
        quiet: Some(RawQuiet::Set("terraform".into())),
        shared: Vec::new(),
    });
    Ok(())
}

fn clean(dir: &str) -> String {
    dir.trim_start_matches("./")
        .trim_end_matches('/')
        .to_owned()
}

/// `stage_dirs`: the segments before and after `{stage}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StageDirs {
    before: Vec<String>,
    after: Vec<String>,
}

impl StageDirs {
    pub(crate) fn new(pattern: &str) -> Result<Self, String> {
        let cleaned = clean(pattern);
        let parts: Vec<&str> = cleaned.split('/').collect();
        let at: Vec<usize> = parts
            .iter()
            .enumerate()
            .filter(|(_, s)| s.contains("{stage}"))
            .map(|(i, _)| i)
            .collect();
        match at.as_slice() {
            [i] if parts[*i] == "{stage}" => {}
            [] => return Err(format!("`{pattern}` has no `{{stage}}` segment")),
            _ => {
                return Err(format!(
                    "`{pattern}` must have `{{stage}}` once, as a whole segment"
                ))
            }
        }
        if parts.iter().any(|s| {
            s.is_empty()
                || *s == "."
                || *s == ".."
                || s.contains(['*', '{', '}']) && *s != "{stage}"
        }) {
            return Err(format!(
                "`{pattern}` may hold only plain directory names besides `{{stage}}`"
            ));
        }
        let i = at[0];
        Ok(Self {
            before: parts[..i].iter().map(|s| (*s).to_owned()).collect(),
            after: parts[i + 1..].iter().map(|s| (*s).to_owned()).collect(),
        })
    }

    /// The stage segment of `dir` and `dir` with it written `{stage}`,
    /// when `dir` is under the pattern.
    pub(crate) fn split(&self, dir: &str) -> Option<(String, String)> {
        let parts: Vec<&str> = dir.split('/').collect();
        let n = self.before.len();
        let after = parts.get(n + 1..n + 1 + self.after.len())?;
        if !parts[..n]
            .iter()
            .copied()
            .eq(self.before.iter().map(String::as_str))
            || !after
                .iter()
                .copied()
                .eq(self.after.iter().map(String::as_str))
        {
            return None;
        }
        let stage = parts[n].to_owned();
        let mut template = parts;
        template[n] = "{stage}";
        Some((stage, template.join("/")))
    }
}

/// The files of a commit that a discovery reads: every `.tf` file's text,
/// and the paths of the other files (a root's `<stage>.tfvars`).
#[derive(Debug, Clone, Default)]
pub struct TfTree {
    pub tf: BTreeMap<String, String>,
    pub files: BTreeSet<String>,
}

/// A backend, or the backend a `terraform_remote_state` reads: its type and
/// the attributes written as plain strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Backend {
    pub(crate) kind: String,
    pub(crate) attrs: BTreeMap<String, String>,
}

/// What one directory's `.tf` files say.
#[derive(Debug, Default)]
struct DirFacts {
    backend: Option<Backend>,
    /// Each local module call: the file, and the module's directory.
    modules: Vec<(String, String)>,
    /// Each `terraform_remote_state`: the file, and the state it reads.
    remote_states: Vec<(String, Backend)>,
}

fn literal(expr: &hcl::Expression) -> Option<&str> {
    match expr {
        hcl::Expression::String(s) => Some(s),
        _ => None,
    }
}

fn literal_attrs(body: &hcl::Body) -> BTreeMap<String, String> {
    body.attributes()
        .filter_map(|a| Some((a.key().to_owned(), literal(a.expr())?.to_owned())))
        .collect()
}

fn object_literals(expr: &hcl::Expression) -> BTreeMap<String, String> {
    let hcl::Expression::Object(object) = expr else {
        return BTreeMap::new();
    };
    object
        .iter()
        .filter_map(|(key, value)| {
            let key = match key {
                hcl::ObjectKey::Identifier(id) => id.as_str().to_owned(),
                hcl::ObjectKey::Expression(e) => literal(e)?.to_owned(),
                _ => return None,
            };
            Some((key, literal(value)?.to_owned()))
        })
        .collect()
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

fn parse(path: &str, text: &str) -> Result<hcl::Body, String> {
    hcl::parse(text).map_err(|e| {
        format!("{path} does not parse as HCL ({e}); fix the file, or add its directory to `[terraform] ignore`")
    })
}

/// Each backend (or `cloud` block) a file's `terraform` blocks declare.
fn backends(body: &hcl::Body) -> impl Iterator<Item = Backend> + '_ {
    body.blocks()
        .filter(|b| b.identifier() == "terraform")
        .flat_map(|b| b.body().blocks())
        .filter_map(|inner| {
            let kind = match inner.identifier() {
                "backend" => inner.labels().first().map_or("", |l| l.as_str()),
                "cloud" => "cloud",
                _ => return None,
            };
            Some(Backend {
                kind: kind.to_owned(),
                attrs: literal_attrs(inner.body()),
            })
        })
}

fn set_backend(facts: &mut DirFacts, backend: Backend, path: &str) -> Result<(), String> {
    if facts.backend.is_some() {
        return Err(format!(
            "{path}: a second backend for the directory `{}`; Terraform allows one per root module",
            parent(path)
        ));
    }
    facts.backend = Some(backend);
    Ok(())
}

fn read_tf(path: &str, text: &str, facts: &mut DirFacts) -> Result<(), String> {
    let body = parse(path, text)?;
    let dir = parent(path);
    for backend in backends(&body) {
        set_backend(facts, backend, path)?;
    }
    for block in body.blocks() {
        let label = |i: usize| block.labels().get(i).map(|l| l.as_str());
        match block.identifier() {
            "module" => {
                let source = block
                    .body()
                    .attributes()
                    .find(|a| a.key() == "source")
                    .and_then(|a| literal(a.expr()));
                if let Some(source) = source.filter(|s| s.starts_with("./") || s.starts_with("../"))
                {
                    let module = join(dir, source).ok_or_else(|| {
                        format!(
                            "{path}: module `{}` has source `{source}`, outside the repository",
                            label(0).unwrap_or("")
                        )
                    })?;
                    facts.modules.push((path.to_owned(), module));
                }
            }
            "data" if label(0) == Some("terraform_remote_state") => {
                let attrs = block.body().attributes();
                let mut kind = None;
                let mut config = BTreeMap::new();
                for attr in attrs {
                    match attr.key() {
                        "backend" => kind = literal(attr.expr()),
                        "config" => config = object_literals(attr.expr()),
                        _ => {}
                    }
                }
                if let Some(kind) = kind {
                    facts.remote_states.push((
                        path.to_owned(),
                        Backend {
                            kind: kind.to_owned(),
                            attrs: config,
                        },
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The attributes that name one state of a backend type: two roots (or a
/// root and a `terraform_remote_state`) with equal values read the same
/// state. A type not listed here is matched on every attribute both write.
fn identity_keys(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "s3" | "oss" => &["bucket", "key"],
        "gcs" => &["bucket", "prefix"],
        "azurerm" => &["storage_account_name", "container_name", "key"],
        "consul" => &["path"],
        "http" => &["address"],
        _ => return None,
    })
}

/// Whether a root whose backend is `root` (in `root_dir`) keeps the state
/// a `terraform_remote_state` of `reader_dir` reads.
fn reads_state_of(read: &Backend, reader_dir: &str, root: &Backend, root_dir: &str) -> bool {
    // HCP Terraform's workspaces are named in nested blocks: declare
    // those dependencies instead.
    if read.kind != root.kind || matches!(read.kind.as_str(), "cloud" | "remote") {
        return false;
    }
    if read.kind == "local" {
        let Some(wanted) = read.attrs.get("path").and_then(|p| join(reader_dir, p)) else {
            return false;
        };
        let kept = root
            .attrs
            .get("path")
            .map_or("terraform.tfstate", String::as_str);
        return join(root_dir, kept).is_some_and(|kept| kept == wanted);
    }
    match identity_keys(&read.kind) {
        Some(keys) => keys.iter().all(
            |k| matches!((read.attrs.get(*k), root.attrs.get(*k)), (Some(a), Some(b)) if a == b),
        ),
        None => {
            let shared: Vec<&String> = read
                .attrs
                .keys()
                .filter(|k| root.attrs.contains_key(*k))
                .collect();
            !shared.is_empty() && shared.iter().all(|k| read.attrs[*k] == root.attrs[*k])
        }
    }
}

/// A root module found, before it becomes a unit.
#[derive(Debug)]
struct Root {
    dir: String,
    /// `dir` with its stage segment written `{stage}`, under `stage_dirs`.
    template: String,
    /// Its stage, under `stage_dirs`.
    stage: Option<String>,
}

fn is_ignored(dir: &str, ignore: &[Pattern]) -> bool {
    dir.split('/').any(|s| s.starts_with('.'))
        || ignore
            .iter()
            .any(|p| p.matches(dir) || p.matches(&format!("{dir}/")))
}

/// The name a root's component gets from its directory: its last segment
/// (the stage's left out), longer where two would be alike, in the
/// characters a name may hold.
fn names_for(templates: &[String]) -> Vec<String> {
    let segments: Vec<Vec<String>> = templates
        .iter()
        .map(|t| {
            t.split('/')
                .filter(|s| *s != "{stage}")
                .map(|s| {
                    s.chars()
                        .map(|c| {
                            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                                c
                            } else {
                                '-'
                            }
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    let name = |i: usize, depth: usize| -> String {
        let own = &segments[i];
        let from = own.len().saturating_sub(depth);
        let joined = own[from..].join(".");
        if joined.is_empty() {
            "root".to_owned()
        } else {
            joined
        }
    };
    let mut depth = vec![1usize; templates.len()];
    loop {
        let names: Vec<String> = (0..templates.len()).map(|i| name(i, depth[i])).collect();
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for n in &names {
            *count.entry(n.as_str()).or_default() += 1;
        }
        let mut longer = false;
        for i in 0..templates.len() {
            if count[names[i].as_str()] > 1 && depth[i] < segments[i].len() {
                depth[i] += 1;
                longer = true;
            }
        }
        if !longer {
            return names;
        }
    }
}

/// The root modules of `tree` as units of the component `[terraform]`
/// stands for, with the repository's `stages` (in order). An error names
/// the file or setting and the fix.
pub(crate) fn discover_roots(
    tree: &TfTree,
    terraform: &RawTerraform,
    stages: &[String],
) -> Result<Vec<Unit>, String> {
    if tree.tf.len() > MAX_TF_FILES {
        return Err(format!(
            "the commit has {} .tf files, more than the {MAX_TF_FILES} one discovery reads",
            tree.tf.len()
        ));
    }
    let ignore: Vec<Pattern> = terraform
        .ignore
        .iter()
        .map(|p| Pattern::new(p))
        .collect::<Result<_, _>>()?;
    let stage_dirs = terraform
        .stage_dirs
        .as_deref()
        .map(StageDirs::new)
        .transpose()?;
    let mut facts: BTreeMap<String, DirFacts> = BTreeMap::new();
    for (path, text) in &tree.tf {
        let dir = parent(path);
        if is_ignored(dir, &ignore) {
            continue;
        }
        read_tf(path, text, facts.entry(dir.to_owned()).or_default())?;
    }
    let listed: BTreeMap<String, &RawRoot> =
        terraform.roots.iter().map(|r| (clean(&r.dir), r)).collect();
    let template_of =
        |dir: &str| -> Option<(String, String)> { stage_dirs.as_ref().and_then(|s| s.split(dir)) };
    // A listed directory, or a listed `envs/{stage}/app` for each stage's.
    let listing = |dir: &str| -> Option<&RawRoot> {
        listed.get(dir).copied().or_else(|| {
            let (_, template) = template_of(dir)?;
            listed.get(&template).copied()
        })
    };
    for dir in listed.keys() {
        if !facts.contains_key(dir)
            && !facts
                .keys()
                .any(|d| template_of(d).is_some_and(|(_, t)| &t == dir))
        {
            return Err(format!(
                "`[[terraform.root]] dir = \"{dir}\"` has no .tf file in this commit (or is ignored); list a directory that holds a root module"
            ));
        }
    }
    let mut roots = Vec::new();
    for (dir, found) in &facts {
        if found.backend.is_none() && listing(dir).is_none() {
            continue;
        }
        if dir.is_empty() {
            return Err("the repository root holds a root module; wavegate runs each root in a directory of its own: move it into one (e.g. `infra/`), or ignore the root's files".into());
        }
        let (stage, template) = match template_of(dir) {
            Some((stage, template)) => {
                if !stages.contains(&stage) {
                    return Err(format!(
                        "the root module `{dir}` is under `stage_dirs = \"{}\"`, but there is no stage `{stage}`; add the `[[stage]]`, or add the directory to `[terraform] ignore`",
                        terraform.stage_dirs.as_deref().unwrap_or_default()
                    ));
                }
                (Some(stage), template)
            }
            None => (None, dir.clone()),
        };
        roots.push(Root {
            dir: dir.clone(),
            template,
            stage,
        });
    }
    // One unit per template: a directory per stage is one component.
    let mut templates: Vec<String> = roots.iter().map(|r| r.template.clone()).collect();
    templates.sort();
    templates.dedup();
    let derived = names_for(&templates);
    let mut name_of: BTreeMap<String, String> = BTreeMap::new();
    for (template, derived) in templates.iter().zip(derived) {
        let own = roots
            .iter()
            .filter(|r| &r.template == template)
            .find_map(|r| listing(&r.dir).and_then(|l| l.name.clone()));
        name_of.insert(template.clone(), own.unwrap_or(derived));
    }
    let mut by_name: BTreeMap<&str, &str> = BTreeMap::new();
    for (template, name) in &name_of {
        if let Some(other) = by_name.insert(name, template) {
            return Err(format!(
                "the root modules `{other}` and `{template}` are both named `{name}`; give one a `name` of its own in `[[terraform.root]]`"
            ));
        }
    }
    let template_of_dir: BTreeMap<&str, &str> = roots
        .iter()
        .map(|r| (r.dir.as_str(), r.template.as_str()))
        .collect();
    let resolve = |word: &str| -> Option<String> {
        if name_of.values().any(|n| n == word) {
            return Some(word.to_owned());
        }
        template_of_dir
            .get(clean(word).as_str())
            .map(|t| name_of[*t].clone())
    };

    let mut units = Vec::new();
    for template in &templates {
        let name = &name_of[template];
        let members: Vec<&Root> = roots.iter().filter(|r| &r.template == template).collect();
        // Each entry once, whether it lists a stage's directory or `{stage}`'s.
        let mut listed_here: Vec<&RawRoot> = Vec::new();
        for root in members.iter().filter_map(|r| listing(&r.dir)) {
            if !listed_here.iter().any(|seen| std::ptr::eq(*seen, root)) {
                listed_here.push(root);
            }
        }
        let mut paths = BTreeSet::from([format!("{template}/**")]);
        let mut depends_on = BTreeSet::new();
        for root in &members {
            // Every local module the root calls, and the modules they call.
            let mut queue = vec![root.dir.clone()];
            let mut seen = BTreeSet::new();
            while let Some(dir) = queue.pop() {
                if !seen.insert(dir.clone()) {
                    continue;
                }
                let Some(found) = facts.get(&dir) else {
                    if dir != root.dir {
                        let by = facts
                            .values()
                            .flat_map(|f| &f.modules)
                            .find(|(_, m)| *m == dir)
                            .map_or("", |(file, _)| file.as_str());
                        return Err(format!(
                            "{by}: the module source `{dir}` holds no .tf file in this commit (or is ignored); fix the source, or stop ignoring it"
                        ));
                    }
                    continue;
                };
                if dir != root.dir {
                    paths.insert(format!("{dir}/**"));
                }
                queue.extend(found.modules.iter().map(|(_, m)| m.clone()));
                for (_, read) in &found.remote_states {
                    for other in &roots {
                        let Some(kept) = facts[&other.dir].backend.as_ref() else {
                            continue;
                        };
                        // Terraform reads a relative path from where it
                        // runs: the root's directory, even in a module.
                        if other.template != *template
                            && reads_state_of(read, &root.dir, kept, &other.dir)
                        {
                            depends_on.insert(name_of[&other.template].clone());
                        }
                    }
                }
            }
        }
        let mut inputs = BTreeMap::new();
        let mut own_stages: Option<Vec<String>> = None;
        for root in &listed_here {
            for word in &root.depends_on {
                depends_on.insert(resolve(word).ok_or_else(|| {
                    format!(
                        "`[[terraform.root]] dir = \"{}\"` depends on `{word}`, which is no root module found (by name or directory)",
                        root.dir
                    )
                })?);
            }
            for (input, from) in &root.inputs {
                let (upstream, _) = from.split_once('.').ok_or_else(|| {
                    format!(
                        "`[[terraform.root]] dir = \"{}\"`: input `{input}` = `{from}` is not `component.output`",
                        root.dir
                    )
                })?;
                let upstream = upstream.strip_prefix("build:").unwrap_or(upstream);
                if let Some(found) = resolve(upstream) {
                    depends_on.insert(found);
                }
                inputs.insert(input.clone(), from.clone());
            }
            if let Some(stages) = &root.stages {
                own_stages = Some(stages.clone());
            }
        }
        depends_on.remove(name);
        let stages_here: Option<Vec<String>> = if let Some(own) = own_stages {
            Some(own)
        } else if members.iter().any(|r| r.stage.is_some()) {
            Some(
                stages
                    .iter()
                    .filter(|s| members.iter().any(|r| r.stage.as_ref() == Some(*s)))
                    .cloned()
                    .collect(),
            )
        } else if terraform.stages == StagesBy::VarFile {
            let with_file: Vec<String> = stages
                .iter()
                .filter(|s| tree.files.contains(&format!("{template}/{s}.tfvars")))
                .cloned()
                .collect();
            if with_file.is_empty() {
                return Err(format!(
                    "the root module `{template}` has no `<stage>.tfvars` for any stage ({}), and `stages = \"var-file\"` runs a root only in those it has one for; add one, list its `stages` in `[[terraform.root]]`, or add it to `[terraform] ignore`",
                    stages.join(", ")
                ));
            }
            Some(with_file)
        } else {
            None
        };
        units.push(Unit {
            name: name.clone(),
            dir: template.clone(),
            depends_on: depends_on.into_iter().collect(),
            paths: Some(paths.into_iter().collect()),
            stages: stages_here,
            group: None,
            inputs: (!inputs.is_empty()).then_some(inputs),
        });
    }
    Ok(units)
}

/// The backend the `.tf` files of `tree` declare (its type and plain
/// string attributes), if any: what the commands read of the member's own
/// directory.
pub(crate) fn backend_of(tree: &TfTree) -> Result<Option<Backend>, String> {
    let mut facts = DirFacts::default();
    for (path, text) in &tree.tf {
        for backend in backends(&parse(path, text)?) {
            set_backend(&mut facts, backend, path)?;
        }
    }
    Ok(facts.backend)
}

/// A unit as a units file writes it.
pub(crate) fn unit_json(unit: &Unit) -> serde_json::Value {
    let mut json = serde_json::json!({
        "name": unit.name,
        "dir": unit.dir,
        "depends_on": unit.depends_on,
    });
    if let Some(paths) = &unit.paths {
        json["paths"] = serde_json::json!(paths);
    }
    if let Some(stages) = &unit.stages {
        json["stages"] = serde_json::json!(stages);
    }
    if let Some(inputs) = &unit.inputs {
        json["inputs"] = serde_json::json!(inputs);
    }
    json
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RepoConfig;

    const BACKEND: &str = "terraform {\n  backend \"local\" {}\n}\n";

    fn tree(files: &[(&str, &str)]) -> TfTree {
        let mut tree = TfTree::default();
        for (path, text) in files {
            if path.ends_with(".tf") {
                tree.tf.insert((*path).into(), (*text).into());
            } else {
                tree.files.insert((*path).into());
            }
        }
        tree
    }

    fn settings(toml: &str) -> RawTerraform {
        toml::from_str(toml).unwrap()
    }

    fn stages() -> Vec<String> {
        vec!["dev".into(), "prod".into()]
    }

    fn found(files: &[(&str, &str)], toml: &str) -> Vec<Unit> {
        discover_roots(&tree(files), &settings(toml), &stages()).unwrap()
    }

    fn refused(files: &[(&str, &str)], toml: &str) -> String {
        discover_roots(&tree(files), &settings(toml), &stages()).unwrap_err()
    }

    fn named<'u>(units: &'u [Unit], name: &str) -> &'u Unit {
        units.iter().find(|u| u.name == name).unwrap_or_else(|| {
            panic!(
                "no unit {name} in {:?}",
                units.iter().map(|u| &u.name).collect::<Vec<_>>()
            )
        })
    }

    #[test]
    fn a_directory_whose_files_declare_a_backend_is_a_root_and_a_module_is_not() {
        let units = found(
            &[
                ("infra/network/main.tf", BACKEND),
                ("infra/network/variables.tf", "variable \"cidr\" {}\n"),
                (
                    "modules/vpc/main.tf",
                    "resource \"terraform_data\" \"x\" {}\n",
                ),
                ("README.md", ""),
            ],
            "",
        );
        assert_eq!(units.len(), 1);
        let network = named(&units, "network");
        assert_eq!(network.dir, "infra/network");
        assert_eq!(network.paths, Some(vec!["infra/network/**".to_owned()]));
        assert_eq!(network.stages, None, "a workspace per stage: every stage");
    }

    #[test]
    fn the_local_modules_a_root_calls_and_the_modules_they_call_are_its_paths() {
        let units = found(
            &[
                (
                    "live/app/main.tf",
                    "terraform {\n  backend \"s3\" {\n    bucket = \"b\"\n    key = \"app\"\n  }\n}\nmodule \"svc\" {\n  source = \"../../modules/service\"\n}\nmodule \"remote\" {\n  source = \"hashicorp/consul/aws\"\n}\n",
                ),
                (
                    "modules/service/main.tf",
                    "module \"lb\" {\n  source = \"./lb\"\n}\n",
                ),
                ("modules/service/lb/main.tf", ""),
                ("modules/unused/main.tf", ""),
            ],
            "",
        );
        assert_eq!(
            named(&units, "app").paths,
            Some(vec![
                "live/app/**".to_owned(),
                "modules/service/**".to_owned(),
                "modules/service/lb/**".to_owned(),
            ])
        );
    }

    #[test]
    fn a_root_that_reads_another_roots_state_depends_on_it() {
        let units = found(
            &[
                (
                    "network/main.tf",
                    "terraform {\n  backend \"s3\" {\n    bucket = \"acme-state\"\n    key    = \"network.tfstate\"\n    region = \"eu-west-1\"\n  }\n}\n",
                ),
                (
                    "app/main.tf",
                    "terraform {\n  backend \"s3\" {\n    bucket = \"acme-state\"\n    key    = \"app.tfstate\"\n  }\n}\ndata \"terraform_remote_state\" \"network\" {\n  backend = \"s3\"\n  config = {\n    bucket = \"acme-state\"\n    key    = \"network.tfstate\"\n  }\n}\n",
                ),
                (
                    "legacy/main.tf",
                    "terraform {\n  backend \"local\" {\n    path = \"../state/legacy.tfstate\"\n  }\n}\n",
                ),
                (
                    "dns/main.tf",
                    "terraform {\n  backend \"local\" {}\n}\ndata \"terraform_remote_state\" \"legacy\" {\n  backend = \"local\"\n  config = {\n    path = \"../state/legacy.tfstate\"\n  }\n}\ndata \"terraform_remote_state\" \"elsewhere\" {\n  backend = \"s3\"\n  config = {\n    bucket = \"acme-state\"\n    key    = \"${var.env}/x\"\n  }\n}\n",
                ),
            ],
            "",
        );
        assert_eq!(named(&units, "app").depends_on, ["network"]);
        assert_eq!(named(&units, "dns").depends_on, ["legacy"]);
        assert!(named(&units, "network").depends_on.is_empty());
    }

    #[test]
    fn a_directory_per_stage_is_one_component_in_the_stages_it_has_a_directory_for() {
        let units = found(
            &[
                ("envs/dev/dns/main.tf", BACKEND),
                ("envs/prod/dns/main.tf", BACKEND),
                ("envs/dev/sandbox/main.tf", BACKEND),
                ("infra/network/main.tf", BACKEND),
            ],
            "stage_dirs = \"envs/{stage}\"",
        );
        let dns = named(&units, "dns");
        assert_eq!(dns.dir, "envs/{stage}/dns");
        assert_eq!(dns.stages, Some(vec!["dev".to_owned(), "prod".to_owned()]));
        assert_eq!(dns.paths, Some(vec!["envs/{stage}/dns/**".to_owned()]));
        assert_eq!(
            named(&units, "sandbox").stages,
            Some(vec!["dev".to_owned()])
        );
        assert_eq!(named(&units, "network").stages, None);

        let refused = refused(
            &[("envs/qa/dns/main.tf", BACKEND)],
            "stage_dirs = \"envs/{stage}\"",
        );
        assert!(refused.contains("no stage `qa`"), "{refused}");
    }

    #[test]
    fn by_var_file_a_root_runs_only_in_the_stages_it_has_values_for() {
        let units = found(
            &[
                ("net/main.tf", BACKEND),
                ("net/dev.tfvars", ""),
                ("net/prod.tfvars", ""),
                ("tools/main.tf", BACKEND),
                ("tools/dev.tfvars", ""),
            ],
            "stages = \"var-file\"",
        );
        assert_eq!(
            named(&units, "net").stages,
            Some(vec!["dev".to_owned(), "prod".to_owned()])
        );
        assert_eq!(named(&units, "tools").stages, Some(vec!["dev".to_owned()]));
        let refused = refused(&[("bare/main.tf", BACKEND)], "stages = \"var-file\"");
        assert!(
            refused.contains("has no `<stage>.tfvars` for any stage"),
            "{refused}"
        );
    }

    #[test]
    fn names_come_from_the_last_directory_and_grow_where_two_would_be_alike() {
        let units = found(
            &[
                ("aws/network/main.tf", BACKEND),
                ("gcp/network/main.tf", BACKEND),
                ("gcp/dns zone/main.tf", BACKEND),
            ],
            "",
        );
        let mut names: Vec<&str> = units.iter().map(|u| u.name.as_str()).collect();
        names.sort();
        assert_eq!(names, ["aws.network", "dns-zone", "gcp.network"]);
    }

    #[test]
    fn a_listed_root_needs_no_backend_and_brings_its_name_dependencies_and_inputs() {
        let units = found(
            &[
                ("infra/network/main.tf", BACKEND),
                ("infra/app/main.tf", "variable \"vpc_id\" {}\n"),
                ("envs/dev/web/main.tf", ""),
                ("envs/prod/web/main.tf", ""),
                ("infra/misc/main.tf", ""),
            ],
            r#"
stage_dirs = "envs/{stage}"
[[root]]
dir = "infra/app"
name = "application"
inputs = { vpc_id = "network.vpc_id" }
[[root]]
dir = "envs/{stage}/web"
depends_on = ["infra/app"]
"#,
        );
        assert_eq!(
            units.len(),
            3,
            "infra/misc is neither listed nor has a backend"
        );
        let app = named(&units, "application");
        assert_eq!(app.depends_on, ["network"]);
        assert_eq!(
            app.inputs,
            Some(BTreeMap::from([(
                "vpc_id".to_owned(),
                "network.vpc_id".to_owned()
            )]))
        );
        let web = named(&units, "web");
        assert_eq!(web.depends_on, ["application"]);
        assert_eq!(web.stages, Some(vec!["dev".to_owned(), "prod".to_owned()]));
    }

    #[test]
    fn ignored_and_hidden_directories_are_never_searched() {
        let units = found(
            &[
                ("infra/app/main.tf", BACKEND),
                ("examples/app/main.tf", BACKEND),
                ("infra/app/.terraform/modules/x/main.tf", "not even HCL {"),
            ],
            "ignore = [\"examples/**\"]",
        );
        assert_eq!(units.len(), 1);
        assert_eq!(units[0].name, "app");
    }

    #[test]
    fn what_the_files_get_wrong_is_named_with_the_file_and_the_fix() {
        let broken = refused(&[("infra/app/main.tf", "terraform {\n")], "");
        assert!(
            broken.starts_with("infra/app/main.tf does not parse as HCL"),
            "{broken}"
        );
        assert!(broken.contains("[terraform] ignore"), "{broken}");

        let missing = refused(
            &[("app/main.tf", "terraform {\n  backend \"local\" {}\n}\nmodule \"m\" {\n  source = \"../modules/gone\"\n}\n")],
            "",
        );
        assert!(
            missing.contains("app/main.tf: the module source `modules/gone` holds no .tf file"),
            "{missing}"
        );

        let outside = refused(
            &[(
                "app/main.tf",
                "module \"m\" {\n  source = \"../../elsewhere\"\n}\n",
            )],
            "",
        );
        assert!(outside.contains("outside the repository"), "{outside}");

        let unlisted = refused(
            &[("app/main.tf", BACKEND)],
            "[[root]]\ndir = \"infra/gone\"",
        );
        assert!(
            unlisted.contains("`[[terraform.root]] dir = \"infra/gone\"` has no .tf file"),
            "{unlisted}"
        );

        let twice = refused(
            &[("a/x/main.tf", BACKEND), ("b/y/main.tf", BACKEND)],
            "[[root]]\ndir = \"a/x\"\nname = \"y\"",
        );
        assert!(twice.contains("are both named `y`"), "{twice}");
    }

    #[test]
    fn the_section_stands_for_one_discovering_component_running_wavegates_own_commands() {
        let config = RepoConfig::parse(
            "wavegate.toml",
            "[terraform]\nbinary = \"tofu\"\nstage_dirs = \"envs/{stage}\"\n[[stage]]\nname = \"dev\"\n",
        )
        .unwrap();
        assert_eq!(config.discoverers.len(), 1);
        assert_eq!(config.discoverers[0].name, COMPONENT);
        assert_eq!(
            config.discoverers[0].command,
            [
                "wavegate",
                "terraform",
                "discover",
                "{units_file}",
                "--root",
                "{root}"
            ]
        );
        let plan = config.raw.components[0].plan.as_ref().unwrap().join(" ");
        assert_eq!(
            plan,
            "wavegate terraform plan {plan_file} {inputs_file} --binary tofu --stage {stage} --dir {dir} --stage-dir envs/{stage}"
        );
    }

    #[test]
    fn a_broken_section_is_a_config_error_naming_the_field() {
        let error = |text: &str| {
            RepoConfig::parse(
                "wavegate.toml",
                &format!("{text}\n[[stage]]\nname = \"dev\"\n"),
            )
            .unwrap_err()
        };
        let e = error("[terraform]\nbinary = \"./tf\"");
        assert_eq!(e.field, "terraform.binary");
        let e = error("[terraform]\nstage_dirs = \"envs\"");
        assert_eq!(e.field, "terraform.stage_dirs");
        assert!(e.problem.contains("no `{stage}`"), "{e}");
        let e = error("[terraform]\nstage_dirs = \"envs/{stage}x\"");
        assert_eq!(e.field, "terraform.stage_dirs");
        let e = error("[terraform]\n[[terraform.root]]\ndir = \"../up\"");
        assert_eq!(e.field, "terraform.root[0].dir");
        let e = error("[terraform]\nworkspaces = true");
        assert!(e.problem.contains("unknown field"), "{e}");
        let e =
            error("[terraform]\n[[component]]\nname = \"terraform\"\ndir = \"x\"\nplan = [\"p\"]");
        assert_eq!(e.field, "component.name");
    }
}
