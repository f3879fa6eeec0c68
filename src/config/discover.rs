//! Discovered members: a component that declares `discover = [argv]`
//! instead of a `dir` is a template. At plan time (in the sandbox, on the
//! commit planned) its command writes the units it found to `{units_file}`
//! (`[{name, dir, depends_on, paths, stages}]`; Terragrunt's `find --json`
//! spelling, `path` and `dependencies`, reads too), and each unit becomes a
//! component of its own with the template's commands, inputs and
//! dependencies, validated like a declared one: names unique, every
//! dependency known, no cycle.

use super::check::{parse_duration, ConfigError, Template};
use super::raw::{RawComponent, RawRepoConfig};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Placeholders a discover command may use.
const DISCOVER_PLACEHOLDERS: &[&str] = &["units_file", "component", "root"];

/// The most units one discovery may report.
pub(crate) const MAX_UNITS: usize = 20_000;

/// The most a units file may hold.
pub(crate) const MAX_UNITS_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// A component whose members are found at plan time.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Discoverer {
    pub(crate) name: String,
    pub(crate) command: Vec<String>,
    /// The component's `timeout`, else `[defaults]`'s.
    pub(crate) timeout: Duration,
    /// The component's `stages`: every stage when unset.
    pub(crate) stages: Option<Vec<String>>,
}

/// One unit a discovery found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unit {
    pub(crate) name: String,
    pub(crate) dir: String,
    pub(crate) depends_on: Vec<String>,
    pub(crate) paths: Option<Vec<String>>,
    pub(crate) stages: Option<Vec<String>>,
    /// The `[[group]]` it plans and applies with, when the discovery says
    /// (else its discovering component's).
    pub(crate) group: Option<String>,
    /// Upstream outputs it reads (`name = "component.output"`), besides its
    /// discovering component's `inputs`.
    pub(crate) inputs: Option<BTreeMap<String, String>>,
}

impl Unit {
    /// What the digests bind of it: it found this unit, with these
    /// dependencies, paths and stages.
    pub(crate) fn bound(&self, by: &str) -> Value {
        let mut bound = json!({
            "by": by,
            "dir": self.dir,
            "depends_on": self.depends_on,
            "paths": self.paths,
            "stages": self.stages,
        });
        // Only when it says: every unit found without one binds as before.
        if let Some(group) = &self.group {
            bound["group"] = json!(group);
        }
        if let Some(inputs) = &self.inputs {
            bound["inputs"] = json!(inputs);
        }
        bound
    }
}

#[derive(Deserialize)]
struct RawUnit {
    #[serde(default)]
    name: Option<String>,
    #[serde(default, alias = "path")]
    dir: Option<String>,
    #[serde(default, alias = "dependencies")]
    depends_on: Vec<String>,
    #[serde(default)]
    paths: Option<Vec<String>>,
    #[serde(default)]
    stages: Option<Vec<String>>,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    inputs: Option<BTreeMap<String, String>>,
}

fn clean_dir(dir: &str) -> String {
    dir.trim_start_matches("./")
        .trim_end_matches('/')
        .to_owned()
}

/// Reads a units file: a JSON list of units. A unit without a `name` is
/// named after its `dir`, `/` written `.` (`live/prod/vpc` → `live.prod.vpc`);
/// a dependency may name a unit by its name or its dir.
pub(crate) fn read_units(bytes: &[u8]) -> Result<Vec<Unit>, String> {
    const SHAPE: &str = "write a JSON list of units, e.g. [{\"name\": \"vpc\", \"dir\": \"live/prod/vpc\", \"depends_on\": []}]";
    let raw: Vec<RawUnit> = serde_json::from_slice(bytes)
        .map_err(|e| format!("the units file does not read ({e}); {SHAPE}"))?;
    if raw.len() > MAX_UNITS {
        return Err(format!(
            "the units file lists {} units, more than the {MAX_UNITS} wavegate plans in one change",
            raw.len()
        ));
    }
    let mut units = Vec::with_capacity(raw.len());
    for (i, unit) in raw.into_iter().enumerate() {
        let Some(dir) = unit.dir.as_deref().map(clean_dir).filter(|d| !d.is_empty()) else {
            return Err(format!("unit {i} has no `dir`; {SHAPE}"));
        };
        let name = unit.name.unwrap_or_else(|| dir.replace('/', "."));
        units.push(Unit {
            name,
            dir,
            depends_on: unit.depends_on,
            paths: unit.paths,
            stages: unit.stages,
            group: unit.group,
            inputs: unit.inputs,
        });
    }
    let by_dir: BTreeMap<String, String> = units
        .iter()
        .map(|u| (u.dir.clone(), u.name.clone()))
        .collect();
    let names: BTreeSet<String> = units.iter().map(|u| u.name.clone()).collect();
    for unit in &mut units {
        for dependency in &mut unit.depends_on {
            if !names.contains(dependency.as_str()) {
                if let Some(name) = by_dir.get(&clean_dir(dependency)) {
                    *dependency = name.clone();
                }
            }
        }
        unit.depends_on.sort();
        unit.depends_on.dedup();
    }
    units.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(units)
}

/// The discovering components of `raw`, checked: a command instead of a
/// `dir`, known placeholders, and no declared component depending on one
/// (its units are only known at plan time).
pub(crate) fn discoverers(
    raw: &RawRepoConfig,
    default_timeout: Duration,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<Vec<Discoverer>, ConfigError> {
    let mut found = Vec::new();
    let mut names = BTreeSet::new();
    for (i, c) in raw.components.iter().enumerate() {
        if !names.insert(c.name.as_str()) {
            return Err(err(
                format!("component[{i}].name"),
                format!("component `{}` is defined twice", c.name),
                "give each component a distinct name",
            ));
        }
    }
    for (i, c) in raw.components.iter().enumerate() {
        let at = |f: &str| format!("component[{i}] ({}).{f}", c.name);
        let Some(command) = &c.discover else {
            if c.dir.is_empty() {
                return Err(err(
                    at("dir"),
                    "the component has no `dir`".into(),
                    "set `dir` to where its commands run, or `discover` to a command that finds its units",
                ));
            }
            continue;
        };
        if !c.dir.is_empty() {
            return Err(err(
                at("discover"),
                "the component sets both `dir` and `discover`".into(),
                "drop `dir`: each unit it discovers has its own",
            ));
        }
        if c.paths.is_some() {
            return Err(err(
                at("paths"),
                "a discovering component selects its units by their own paths".into(),
                "drop `paths`, and report `paths` per unit (default: the unit's `<dir>/**`)",
            ));
        }
        let template = Template {
            what: Some("a discover command"),
            allowed: DISCOVER_PLACEHOLDERS,
            example: "[\"./ci/units.sh\", \"{units_file}\"]",
            also: "",
            needs: Some((
                "units_file",
                "the command is not told where to write the units it finds",
                "pass `{units_file}`: the command writes its list of units there",
            )),
        };
        template
            .check(command)
            .map_err(|(problem, fix)| err(at("discover"), problem, &fix))?;
        let timeout = match &c.timeout {
            Some(t) => parse_duration(t)
                .map_err(|p| err(at("timeout"), p, "use a number and a unit: ms, s, m, h, d"))?,
            None => default_timeout,
        };
        found.push(Discoverer {
            name: c.name.clone(),
            command: command.clone(),
            timeout,
            stages: c.stages.clone(),
        });
    }
    for (i, c) in raw.components.iter().enumerate() {
        if let Some(d) = c
            .depends_on
            .iter()
            .find(|d| found.iter().any(|f| &f.name == *d))
        {
            return Err(err(
                format!("component[{i}] ({}).depends_on", c.name),
                format!(
                    "`{d}` discovers its units at plan time, so nothing can depend on it by name"
                ),
                "depend on a declared component, or let the discovery report the dependency",
            ));
        }
    }
    Ok(found)
}

/// `raw` with each discovering component replaced, where it stood, by the
/// units it found (`found`, by discoverer): the file each unit would be had
/// it been written out.
pub(crate) fn expand(
    raw: &RawRepoConfig,
    found: &BTreeMap<String, Vec<Unit>>,
) -> Result<RawRepoConfig, String> {
    let mut expanded = raw.clone();
    expanded.components.clear();
    for c in &raw.components {
        if c.discover.is_none() {
            expanded.components.push(c.clone());
            continue;
        }
        let units = found.get(&c.name).map(Vec::as_slice).unwrap_or_default();
        for unit in units {
            if let (Some(own), Some(template)) = (&unit.stages, &c.stages) {
                if let Some(stage) = own.iter().find(|s| !template.contains(s)) {
                    return Err(format!(
                        "unit `{}` runs in stage `{stage}`, which `{}` does not list in `stages`",
                        unit.name, c.name
                    ));
                }
            }
            let mut depends_on = c.depends_on.clone();
            depends_on.extend(unit.depends_on.iter().cloned());
            let mut inputs = c.inputs.clone();
            inputs.extend(unit.inputs.clone().unwrap_or_default());
            expanded.components.push(RawComponent {
                name: unit.name.clone(),
                dir: unit.dir.clone(),
                paths: unit.paths.clone(),
                depends_on,
                inputs,
                stages: unit.stages.clone().or_else(|| c.stages.clone()),
                group: unit.group.clone().or_else(|| c.group.clone()),
                discover: None,
                ..c.clone()
            });
        }
        // A group that lists the discovering component lists its units
        // (those that do not name a group of their own).
        for group in &mut expanded.groups {
            if let Some(at) = group.components.iter().position(|g| g == &c.name) {
                let names: Vec<String> = units
                    .iter()
                    .filter(|u| u.group.as_ref().is_none_or(|own| own == &group.name))
                    .map(|u| u.name.clone())
                    .collect();
                group.components.splice(at..=at, names);
            }
        }
    }
    // A group that stood only for units a discovery did not find this time
    // has no components: it plans nothing, and is no mistake.
    let named: BTreeSet<&str> = expanded
        .components
        .iter()
        .filter_map(|c| c.group.as_deref())
        .collect();
    let stood_for_units = |group: &str| {
        raw.groups
            .iter()
            .find(|g| g.name == group)
            .is_some_and(|g| {
                g.components.is_empty()
                    || g.components.iter().any(|c| {
                        raw.components
                            .iter()
                            .any(|r| &r.name == c && r.discover.is_some())
                    })
            })
            || raw
                .components
                .iter()
                .any(|c| c.discover.is_some() && c.group.as_deref() == Some(group))
    };
    let empty: Vec<String> = expanded
        .groups
        .iter()
        .filter(|g| {
            g.components.is_empty() && !named.contains(g.name.as_str()) && stood_for_units(&g.name)
        })
        .map(|g| g.name.clone())
        .collect();
    expanded.groups.retain(|g| !empty.contains(&g.name));
    Ok(expanded)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::repo::{config_changed_components, RepoConfig};
    use crate::config::CONFIG_FILE;

    const DISCOVERING: &str = r#"
[defaults]
plan = ["./plan", "{component}", "{plan_file}"]
[[stage]]
name = "dev"
[[stage]]
name = "prod"
[[component]]
name = "network"
dir = "infra/network"
[[component]]
name = "live"
discover = ["./ci/units.sh", "{units_file}"]
depends_on = ["network"]
inputs = { vpc_id = "network.vpc_id" }
timeout = "5m"
"#;

    #[test]
    fn a_group_that_lists_a_discovering_component_lists_its_units_but_those_naming_their_own() {
        let text = format!(
            "{DISCOVERING}\n[[group]]\nname = \"live\"\ncomponents = [\"live\"]\nplan = [\"./stack\", \"{{members_file}}\"]\n\
             [[group]]\nname = \"edge\"\nplan = [\"./stack\", \"{{members_file}}\"]\n"
        );
        let config = RepoConfig::parse(CONFIG_FILE, &text).unwrap();
        let mut cdn = unit("cdn", "live/cdn", &[]);
        cdn.group = Some("edge".into());
        let found = BTreeMap::from([(
            "live".to_owned(),
            vec![
                unit("vpc", "live/vpc", &[]),
                unit("app", "live/app", &["vpc"]),
                cdn,
            ],
        )]);
        let expanded = config.with_units(CONFIG_FILE, &found).unwrap();
        assert_eq!(
            expanded.groups.of("app").unwrap().components,
            ["vpc", "app"]
        );
        assert_eq!(expanded.groups.of("cdn").unwrap().name, "edge");

        // Found nothing this time: the group that stood for the units is no mistake.
        let none = BTreeMap::from([("live".to_owned(), vec![])]);
        let expanded = config.with_units(CONFIG_FILE, &none);
        assert!(expanded.is_ok(), "{:?}", expanded.err());
    }

    fn unit(name: &str, dir: &str, depends_on: &[&str]) -> Unit {
        Unit {
            name: name.into(),
            dir: dir.into(),
            depends_on: depends_on.iter().map(|d| (*d).to_owned()).collect(),
            paths: None,
            stages: None,
            group: None,
            inputs: None,
        }
    }

    fn found(units: Vec<Unit>) -> BTreeMap<String, Vec<Unit>> {
        [("live".to_owned(), units)].into()
    }

    #[test]
    fn each_unit_becomes_a_component_with_the_templates_commands_inputs_and_dependencies() {
        let config = RepoConfig::parse(CONFIG_FILE, DISCOVERING).unwrap();
        assert_eq!(config.discoverers.len(), 1);
        assert_eq!(config.discoverers[0].timeout, Duration::from_secs(300));
        assert_eq!(config.components.len(), 1, "the template is no component");
        let expanded = config
            .with_units(
                CONFIG_FILE,
                &found(vec![
                    unit("db", "live/db", &[]),
                    unit("app", "live/app", &["db"]),
                ]),
            )
            .unwrap();
        assert!(expanded.discoverers.is_empty());
        let app = expanded.component("app").unwrap();
        assert_eq!(app.dir, "live/app");
        assert_eq!(app.depends_on, ["network", "db"]);
        assert_eq!(app.inputs[0].upstream, "network");
        assert_eq!(app.plan[0], "./plan");
        assert_eq!(app.stages, ["dev", "prod"]);
        assert_eq!(
            app.discovered.as_ref().unwrap()["by"],
            "live",
            "its finding is kept for the digests"
        );
        assert_eq!(expanded.raw.components.len(), 2, "the file as written");

        // A changed template changes every unit it found.
        let base = RepoConfig::parse_raw(CONFIG_FILE, DISCOVERING).unwrap();
        let head = RepoConfig::parse(CONFIG_FILE, &DISCOVERING.replace("5m", "6m"))
            .unwrap()
            .with_units(CONFIG_FILE, &found(vec![unit("db", "live/db", &[])]))
            .unwrap();
        assert!(config_changed_components(Some(&base), &head).contains("db"));
    }

    #[test]
    fn units_are_validated_like_declared_components() {
        let config = RepoConfig::parse(CONFIG_FILE, DISCOVERING).unwrap();
        for (units, expected) in [
            (
                vec![unit("network", "live/net", &[])],
                "component `network` is defined twice",
            ),
            (
                vec![unit("a", "live/a", &["b"]), unit("b", "live/b", &["a"])],
                "dependency cycle",
            ),
            (
                vec![unit("a", "live/a", &["nowhere"])],
                "unknown component `nowhere`",
            ),
            (
                vec![unit("a b", "live/a", &[])],
                "`a b` is not a valid name",
            ),
            (vec![unit("a", "../elsewhere", &[])], "dir"),
        ] {
            let e = config
                .with_units(CONFIG_FILE, &found(units))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("the units discovered do not make a valid config"),
                "{e}"
            );
            assert!(e.contains(expected), "{expected}: {e}");
        }
        let mut elsewhere = unit("a", "live/a", &[]);
        elsewhere.stages = Some(vec!["qa".into()]);
        let e = RepoConfig::parse(
            CONFIG_FILE,
            &DISCOVERING.replace("timeout = \"5m\"", "stages = [\"dev\"]"),
        )
        .unwrap()
        .with_units(CONFIG_FILE, &found(vec![elsewhere]))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("runs in stage `qa`, which `live` does not list"),
            "{e}"
        );
    }

    #[test]
    fn a_discovering_component_is_checked_as_written() {
        for (from, to, expected) in [
            (
                "discover = [",
                "dir = \"x\"\ndiscover = [",
                "sets both `dir` and `discover`",
            ),
            (
                "discover = [\"./ci/units.sh\", \"{units_file}\"]",
                "",
                "has no `dir`",
            ),
            (
                "\"{units_file}\"",
                "\"out.json\"",
                "not told where to write the units",
            ),
            (
                "\"{units_file}\"",
                "\"{plan_file}\"",
                "unknown placeholder `{plan_file}` in a discover command",
            ),
            (
                "depends_on = [\"network\"]",
                "depends_on = [\"network\"]\npaths = [\"live/**\"]",
                "selects its units by their own paths",
            ),
        ] {
            let text = DISCOVERING.replace(from, to);
            let e = RepoConfig::parse(CONFIG_FILE, &text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(expected), "{expected}: {e}");
        }
        // Checked as one of its units would be, before anything is found.
        for (from, to, expected) in [
            (
                "name = \"live\"",
                "name = \"network\"",
                "component `network` is defined twice",
            ),
            (
                "name = \"live\"",
                "name = \"li ve\"",
                "`li ve` is not a valid name",
            ),
            (
                "vpc_id = \"network.vpc_id\"",
                "vpc_id = \"nowhere.vpc_id\"",
                "unknown component `nowhere`",
            ),
            (
                "timeout = \"5m\"",
                "stages = [\"qa\"]",
                "unknown stage `qa`",
            ),
        ] {
            let text = DISCOVERING.replace(from, to);
            let e = RepoConfig::parse(CONFIG_FILE, &text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(expected), "{expected}: {e}");
        }
        let text = format!("{DISCOVERING}\n[[component]]\nname = \"app\"\ndir = \"app\"\ndepends_on = [\"live\"]\n");
        let e = RepoConfig::parse(CONFIG_FILE, &text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`live` discovers its units at plan time"), "{e}");
    }

    #[test]
    fn units_read_in_our_spelling_or_terragrunts_named_after_their_dir() {
        let units = read_units(
            br#"[
                {"type": "unit", "path": "live/prod/app", "dependencies": ["live/prod/vpc", "./live/prod/db/"]},
                {"name": "db", "dir": "live/prod/db", "depends_on": ["live.prod.vpc"], "stages": ["prod"]},
                {"path": "live/prod/vpc/", "paths": ["live/prod/vpc/**", "modules/vpc/**"]}
            ]"#,
        )
        .unwrap();
        let names: Vec<&str> = units.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["db", "live.prod.app", "live.prod.vpc"]);
        assert_eq!(units[1].depends_on, ["db", "live.prod.vpc"], "by dir");
        assert_eq!(units[0].depends_on, ["live.prod.vpc"], "by name");
        assert_eq!(units[2].dir, "live/prod/vpc");
        assert_eq!(units[0].stages.as_deref(), Some(&["prod".to_owned()][..]));

        for (text, expected) in [
            (&b"{}"[..], "the units file does not read"),
            (br#"[{"name": "x"}]"#, "unit 0 has no `dir`"),
        ] {
            let e = read_units(text).unwrap_err();
            assert!(e.contains(expected), "{e}");
        }
    }
}
