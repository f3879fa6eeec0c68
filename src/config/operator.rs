//! The operator's central configuration (`WAVEGATE_REPOS_CONFIG`, what
//! Atlantis' `repos.yaml` is): per pattern of repositories, defaults for
//! `wavegate.toml` keys, keys a repository may not set otherwise, and hooks
//! every repository runs whatever its own file says.
//!
//! ```toml
//! [[repos]]
//! match = ["acme/*"]
//! locked = ["policy.required", "policy.overriders"]
//! [repos.defaults.policy]
//! required = 2
//! [[repos.hooks.before.apply]]
//! name = "change-window"
//! command = ["/usr/local/bin/change-window", "{members_file}"]
//! ```
//!
//! The first entry that matches a repository applies. It is merged into the
//! repository's file as TOML before the file is read ([`Imposed::merge`]),
//! so every reader of a `wavegate.toml` (the base's gates and hooks, the
//! head's plan) sees the same result, and the report says which settings
//! came from the operator.

use super::check::ConfigError;
use super::glob::Pattern;
pub use super::raw::FromOperator;
use serde::Deserialize;
use std::path::Path;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOperatorFile {
    #[serde(default)]
    repos: Vec<RawEntry>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    /// `owner/name` patterns, `*` within a segment (`acme/*`, `*/infra-*`).
    #[serde(rename = "match")]
    matches: Vec<String>,
    /// `wavegate.toml` keys, written as in the file, for a repository that
    /// does not set them.
    #[serde(default)]
    defaults: toml::Table,
    /// Dotted keys (`policy.required`, `stage.profile`) a repository may
    /// not set to anything but the operator's default (not at all, when
    /// the operator gives none).
    #[serde(default)]
    locked: Vec<String>,
    /// Hooks every matched repository runs, after its own.
    #[serde(default)]
    hooks: Option<toml::Table>,
}

/// The operator's file, read and checked.
#[derive(Debug, Clone, Default)]
pub struct OperatorConfig {
    /// Where it was read from, for messages.
    file: String,
    entries: Vec<RawEntry>,
}

/// What the operator imposes on one repository (nothing, by default).
#[derive(Debug, Clone, Default)]
pub struct Imposed {
    /// `WAVEGATE_REPOS_CONFIG (FILE), entry `acme/*``: where it came from.
    source: String,
    entry: Option<RawEntry>,
}

/// The top-level keys of `wavegate.toml` a locked key may start with.
const TOP_LEVEL_KEYS: &[&str] = &[
    "ignore",
    "defaults",
    "stage",
    "component",
    "group",
    "policy",
    "branches",
    "notify",
    "apply_concurrency",
    "hooks",
    "cost",
    "terraform",
];

/// Locking a key locks what stands in for it where the file allows:
/// `policy.required` and each `[[stage]]`'s `required`; `stage.profile`
/// and the stage's `[[stage.jobs]]`, which pick profiles for members.
fn locked_with(key: &str) -> Vec<String> {
    let mut keys = vec![key.to_owned()];
    match key {
        "policy.approvers" | "policy.required" | "policy.review_approvals" => {
            keys.push(key.replacen("policy.", "stage.", 1));
        }
        "stage.profile" => keys.push("stage.jobs".into()),
        _ => {}
    }
    keys
}

fn operator_error(file: &str, problem: String, fix: &str) -> anyhow::Error {
    anyhow::anyhow!("WAVEGATE_REPOS_CONFIG ({file}): {problem}; fix: {fix}")
}

impl OperatorConfig {
    /// Reads `WAVEGATE_REPOS_CONFIG`'s file: every entry's patterns, keys,
    /// defaults and hooks checked, so a mistake stops the server at start.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            operator_error(
                &file,
                format!("cannot read it ({e})"),
                "point WAVEGATE_REPOS_CONFIG at the operator's file",
            )
        })?;
        Self::parse(&file, &text)
    }

    pub(crate) fn parse(file: &str, text: &str) -> anyhow::Result<Self> {
        let raw: RawOperatorFile = toml::from_str(text).map_err(|e| {
            operator_error(file, e.message().trim().to_owned(), "write `[[repos]]` entries with `match`, and `defaults`, `locked` or `hooks` (docs/operations.md)")
        })?;
        for (i, entry) in raw.repos.iter().enumerate() {
            if entry.matches.is_empty() {
                return Err(operator_error(
                    file,
                    format!("repos[{i}].match is empty"),
                    "name the repositories, e.g. `match = [\"acme/*\"]`",
                ));
            }
            for pattern in &entry.matches {
                if pattern.split('/').count() != 2 || pattern.contains("**") {
                    return Err(operator_error(
                        file,
                        format!("repos[{i}].match: `{pattern}` is not `owner/name`"),
                        "write `owner/name`, with `*` within a segment, e.g. `acme/*`",
                    ));
                }
            }
            for key in &entry.locked {
                let top = key.split('.').next().unwrap_or_default();
                if key.split('.').any(str::is_empty) || !TOP_LEVEL_KEYS.contains(&top) {
                    return Err(operator_error(
                        file,
                        format!("repos[{i}].locked: `{key}` is not a key of wavegate.toml"),
                        "write a dotted key of wavegate.toml, e.g. `policy.required` or `stage.profile`",
                    ));
                }
            }
            // What a repository's plans are (its stages, components, root
            // modules) is its own; the sandbox's discovery reads the file alone.
            for key in ["stage", "component", "group", "terraform"] {
                if entry.defaults.contains_key(key) {
                    return Err(operator_error(
                        file,
                        format!("repos[{i}].defaults.{key}: the operator may not give a repository its `{key}`"),
                        "give defaults for `policy`, `hooks`, `notify`, `cost` and the like; lock `stage.gate` or `stage.profile` instead of writing stages",
                    ));
                }
            }
            // Defaults and hooks must read as a wavegate.toml would.
            let imposed = Imposed {
                source: String::new(),
                entry: Some(entry.clone()),
            };
            let merged = imposed
                .merge(toml::Table::new())
                .map_err(|e| operator_error(file, format!("repos[{i}]: {}", e.problem), &e.fix))?;
            super::raw::RawRepoConfig::deserialize(toml::Value::Table(merged.0)).map_err(|e| {
                operator_error(
                    file,
                    format!("repos[{i}].defaults or hooks do not read as wavegate.toml: {e}"),
                    "use only the keys of the wavegate.toml reference (docs/configuration.md)",
                )
            })?;
        }
        Ok(Self {
            file: file.to_owned(),
            entries: raw.repos,
        })
    }

    /// What the first entry matching `repository` (`owner/name`) imposes.
    pub fn for_repo(&self, repository: &str) -> Imposed {
        let found = self
            .entries
            .iter()
            .find(|e| e.matches.iter().any(|p| segment_match(p, repository)));
        match found {
            Some(entry) => Imposed {
                source: format!(
                    "WAVEGATE_REPOS_CONFIG ({}), entry `{}`",
                    self.file,
                    entry.matches.join("`, `")
                ),
                entry: Some(entry.clone()),
            },
            None => Imposed::default(),
        }
    }
}

/// Whether `owner/name` matches `pattern`, `*` standing for any run of
/// characters within one segment, case aside (as the forges name
/// repositories).
fn segment_match(pattern: &str, repository: &str) -> bool {
    Pattern::new(&pattern.to_ascii_lowercase())
        .is_ok_and(|p| p.matches(&repository.to_ascii_lowercase()))
}

fn lookup<'t>(table: &'t toml::Table, path: &[&str]) -> Option<&'t toml::Value> {
    let (first, rest) = path.split_first()?;
    let value = table.get(*first)?;
    if rest.is_empty() {
        return Some(value);
    }
    value.as_table().and_then(|t| lookup(t, rest))
}

/// Fills `into` with what `defaults` has and it lacks, table by table;
/// each key filled is noted in `filled`.
fn fill(into: &mut toml::Table, defaults: &toml::Table, at: &str, filled: &mut Vec<String>) {
    for (key, value) in defaults {
        let path = if at.is_empty() {
            key.clone()
        } else {
            format!("{at}.{key}")
        };
        match (into.get_mut(key), value) {
            (None, _) => {
                into.insert(key.clone(), value.clone());
                filled.push(path);
            }
            (Some(toml::Value::Table(own)), toml::Value::Table(theirs)) => {
                fill(own, theirs, &path, filled);
            }
            (Some(_), _) => {}
        }
    }
}

impl Imposed {
    /// Whether the operator imposes anything here.
    pub(crate) fn is_empty(&self) -> bool {
        self.entry.is_none()
    }

    /// The repository's file (`own`, as TOML) with the operator's defaults
    /// under it, its locked keys checked and its hooks added after the
    /// repository's own; and which keys came from the operator.
    pub(crate) fn merge(
        &self,
        mut own: toml::Table,
    ) -> Result<(toml::Table, FromOperator), ConfigError> {
        let mut from = FromOperator {
            source: self.source.clone(),
            keys: Vec::new(),
        };
        let Some(entry) = &self.entry else {
            return Ok((own, from));
        };
        for key in entry.locked.iter().flat_map(|k| locked_with(k)) {
            let key = &key;
            let path: Vec<&str> = key.split('.').collect();
            let theirs = lookup(&entry.defaults, &path);
            // `stage.profile` is each `[[stage]]`'s.
            let own_values: Vec<(String, &toml::Value)> = match own.get(path[0]) {
                Some(toml::Value::Array(items)) if path.len() > 1 => items
                    .iter()
                    .enumerate()
                    .filter_map(|(i, item)| {
                        let value = lookup(item.as_table()?, &path[1..])?;
                        Some((format!("{}[{i}].{}", path[0], path[1..].join(".")), value))
                    })
                    .collect(),
                _ => lookup(&own, &path)
                    .map(|v| vec![(key.clone(), v)])
                    .unwrap_or_default(),
            };
            for (field, value) in own_values {
                if Some(value) != theirs {
                    let (problem, fix) = match theirs {
                        Some(theirs) => (
                            format!("is locked by the operator ({}) to {theirs}", self.source),
                            "remove it from wavegate.toml (the operator's value applies), or ask the operator",
                        ),
                        None => (
                            format!("may not be set in this repository: the operator ({}) locked it", self.source),
                            "remove it from wavegate.toml, or ask the operator",
                        ),
                    };
                    return Err(ConfigError {
                        file: super::CONFIG_FILE.into(),
                        field,
                        problem,
                        fix: fix.into(),
                    });
                }
            }
            if theirs.is_some() && !from.keys.contains(key) {
                from.keys.push(key.clone());
            }
        }
        let mut filled = Vec::new();
        fill(&mut own, &entry.defaults, "", &mut filled);
        for key in filled {
            if !from.keys.contains(&key) {
                from.keys.push(key);
            }
        }
        if let Some(hooks) = &entry.hooks {
            let own_hooks = own
                .entry("hooks")
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let Some(own_hooks) = own_hooks.as_table_mut() else {
                return Err(ConfigError {
                    file: super::CONFIG_FILE.into(),
                    field: "hooks".into(),
                    problem: "is not a table".into(),
                    fix: "write hooks as `[[hooks.before.apply]]` entries".into(),
                });
            };
            for (when, moments) in hooks {
                let Some(moments) = moments.as_table() else {
                    continue;
                };
                for (moment, list) in moments {
                    let Some(list) = list.as_array() else {
                        continue;
                    };
                    let slot = own_hooks
                        .entry(when.clone())
                        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                    if let Some(slot) = slot.as_table_mut() {
                        let entries = slot
                            .entry(moment.clone())
                            .or_insert_with(|| toml::Value::Array(Vec::new()));
                        if let Some(entries) = entries.as_array_mut() {
                            entries.extend(list.iter().cloned());
                            from.keys
                                .push(format!("hooks.{when}.{moment} ({} imposed)", list.len()));
                        }
                    }
                }
            }
        }
        Ok((own, from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RepoConfig;

    const OPERATOR: &str = r#"
[[repos]]
match = ["acme/infra-*"]
locked = ["policy.required", "stage.profile"]
[repos.defaults.policy]
required = 2
overriders = ["team:security"]
[[repos.hooks.before.apply]]
name = "change-window"
command = ["/usr/local/bin/change-window", "{members_file}"]

[[repos]]
match = ["acme/*"]
[repos.defaults.policy]
required = 1
"#;

    const REPO: &str = r#"
[defaults]
plan = ["./plan", "{plan_file}"]
[[stage]]
name = "dev"
[[component]]
name = "app"
dir = "app"
[policy]
overriders = ["sec-sam"]
[[hooks.before.apply]]
name = "own"
command = ["./own-check"]
"#;

    fn operator() -> OperatorConfig {
        OperatorConfig::parse("/etc/wavegate/repos.toml", OPERATOR).unwrap()
    }

    #[test]
    fn the_first_matching_entry_fills_what_the_file_leaves_out_and_adds_its_hooks_after_the_files()
    {
        let imposed = operator().for_repo("acme/infra-prod");
        let config = RepoConfig::parse_with("wavegate.toml", REPO, &imposed).unwrap();
        assert_eq!(config.policy.required, 2, "locked to the operator's");
        assert_eq!(
            config.policy.overriders,
            ["sec-sam"],
            "the file's own wins over a default"
        );
        let hooks: Vec<&str> = config
            .raw
            .hooks
            .as_ref()
            .unwrap()
            .before
            .apply
            .iter()
            .filter_map(|h| h.name.as_deref())
            .collect();
        assert_eq!(
            hooks,
            ["own", "change-window"],
            "the operator's run after the file's own"
        );
        let from = config.from_operator().unwrap();
        assert_eq!(
            from.source,
            "WAVEGATE_REPOS_CONFIG (/etc/wavegate/repos.toml), entry `acme/infra-*`"
        );
        assert_eq!(
            from.keys,
            ["policy.required", "hooks.before.apply (1 imposed)"]
        );

        let other = RepoConfig::parse_with("wavegate.toml", REPO, &operator().for_repo("acme/web"))
            .unwrap();
        assert_eq!(other.policy.required, 1);
        assert_eq!(other.raw.hooks.unwrap().before.apply.len(), 1);
        let none =
            RepoConfig::parse_with("wavegate.toml", REPO, &operator().for_repo("globex/infra"))
                .unwrap();
        assert!(none.from_operator().is_none());
    }

    #[test]
    fn a_locked_key_set_otherwise_is_a_config_error_naming_the_operator() {
        let imposed = operator().for_repo("acme/infra-prod");
        let e = RepoConfig::parse_with(
            "wavegate.toml",
            &REPO.replace("[policy]\n", "[policy]\nrequired = 1\n"),
            &imposed,
        )
        .unwrap_err();
        assert_eq!(e.field, "policy.required");
        assert_eq!(e.problem, "is locked by the operator (WAVEGATE_REPOS_CONFIG (/etc/wavegate/repos.toml), entry `acme/infra-*`) to 2");
        RepoConfig::parse_with(
            "wavegate.toml",
            &REPO.replace("[policy]\n", "[policy]\nrequired = 2\n"),
            &imposed,
        )
        .expect("the operator's own value is no conflict");
        let profiled = REPO.replace(
            "name = \"dev\"\n",
            "name = \"dev\"\nprofile = \"prod-write\"\n",
        );
        let e = RepoConfig::parse_with("wavegate.toml", &profiled, &imposed).unwrap_err();
        assert_eq!(e.field, "stage[0].profile");
        assert!(
            e.problem.starts_with("may not be set in this repository"),
            "{e}"
        );
    }

    #[test]
    fn a_locked_policy_key_cannot_come_back_through_a_stage_and_a_locked_profile_not_through_jobs()
    {
        let imposed = operator().for_repo("acme/infra-prod");
        let per_stage = REPO.replace("name = \"dev\"\n", "name = \"dev\"\nrequired = 1\n");
        let e = RepoConfig::parse_with("wavegate.toml", &per_stage, &imposed).unwrap_err();
        assert_eq!(e.field, "stage[0].required");
        let jobs = REPO.replace(
            "name = \"dev\"\n",
            "name = \"dev\"\n[[stage.jobs]]\nname = \"all\"\nmembers = [\"**\"]\nprofile = \"prod-write\"\n",
        );
        let e = RepoConfig::parse_with("wavegate.toml", &jobs, &imposed).unwrap_err();
        assert_eq!(e.field, "stage[0].jobs");
    }

    #[test]
    fn a_base_with_no_file_still_has_the_operators_policy_and_hooks() {
        let imposed = operator().for_repo("acme/infra-prod");
        let rules = crate::config::BaseRules::imposed(None, &imposed);
        assert_eq!(rules.policy().unwrap().required, 2);
        let hooks = rules.hooks("prod", crate::config::hooks::Moment::BeforeApply);
        assert_eq!(hooks.len(), 1);
        let own = crate::config::BaseRules::imposed(None, &Imposed::default());
        assert_eq!(own.policy().unwrap().required, 1);
    }

    #[test]
    fn an_operator_file_that_does_not_read_stops_the_server_naming_the_entry() {
        let error = |text: &str| {
            OperatorConfig::parse("ops.toml", text)
                .unwrap_err()
                .to_string()
        };
        assert!(error("[[repos]]\nmatch = []\n").contains("repos[0].match is empty"));
        assert!(error("[[repos]]\nmatch = [\"acme\"]\n").contains("`acme` is not `owner/name`"));
        assert!(
            error("[[repos]]\nmatch = [\"a/b\"]\nlocked = [\"policy.\"]\n")
                .contains("`policy.` is not a key")
        );
        let e = error("[[repos]]\nmatch = [\"a/b\"]\n[repos.defaults.policy]\nrequird = 2\n");
        assert!(
            e.contains("repos[0].defaults or hooks do not read as wavegate.toml"),
            "{e}"
        );
        assert!(error("[[repo]]\nmatch = [\"a/b\"]\n")
            .starts_with("WAVEGATE_REPOS_CONFIG (ops.toml): "));
        let e = error("[[repos]]\nmatch = [\"a/b\"]\nlocked = [\"polcy.required\"]\n");
        assert!(
            e.contains("`polcy.required` is not a key of wavegate.toml"),
            "{e}"
        );
        let e = error("[[repos]]\nmatch = [\"a/b\"]\n[[repos.defaults.stage]]\nname = \"dev\"\n");
        assert!(
            e.contains("the operator may not give a repository its `stage`"),
            "{e}"
        );
    }

    #[test]
    fn patterns_match_owner_and_name_segment_by_segment() {
        assert!(segment_match("acme/*", "acme/infra"));
        assert!(segment_match("acme/infra-*", "Acme/infra-prod"));
        assert!(segment_match("*/infra", "globex/infra"));
        assert!(segment_match("acme/*-live", "acme/eu-live"));
        assert!(!segment_match("acme/*", "acme-corp/infra"));
        assert!(!segment_match("acme/infra-*", "acme/web"));
        assert!(!segment_match("acme/*-live", "acme/eu-live-2"));
    }
}
