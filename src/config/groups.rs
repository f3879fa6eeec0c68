//! `[[group]]`: components planned with one call and applied with one call
//! (Terragrunt's `run-all`, a Helmfile, any tool that wants a stack whole).
//!
//! A group's components sit in one wave of each stage they run in, so a
//! group whose components a dependency path leaves and re-enters (`a` →
//! `x` → `b`, `x` outside) cannot: it is kept, and its components plan and
//! apply one by one, with that path as the reason the report gives. Read
//! from the head like components and commands: grouping changes how a
//! change is planned, never who may let it through.

use super::check::{parse_duration, ConfigError, Template};
use super::raw::{RawComponent, RawGroup};
use crate::model::{DependencyGraph, MemberId, StageName};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Placeholders a group's command may use.
pub(crate) const GROUP_PLACEHOLDERS: &[&str] = &["members_file", "group", "stage", "root"];

/// A validated group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    pub(crate) name: String,
    /// Its components, in the file's order.
    pub(crate) components: Vec<String>,
    pub(crate) plan: Vec<String>,
    pub(crate) apply: Option<Vec<String>>,
    pub(crate) timeout: Duration,
    /// Why its components cannot sit in one wave; then each plans and
    /// applies on its own.
    pub(crate) apart: Option<String>,
}

/// How a list of members plans or applies: groups of two or more mates of
/// one stage with one call each, the rest one by one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Batch<'g> {
    Alone(MemberId),
    Group {
        group: &'g Group,
        stage: StageName,
        /// Sorted.
        members: Vec<MemberId>,
    },
}

/// A component of a group that does not plan with its mates here, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Fallback {
    pub(crate) group: String,
    pub(crate) member: MemberId,
    pub(crate) why: String,
}

/// The groups of a config, and which group each component is in.
#[derive(Debug, Clone, Default)]
pub(crate) struct Groups {
    pub(crate) all: Vec<Group>,
    of: BTreeMap<String, usize>,
}

impl Groups {
    pub(crate) fn of(&self, component: &str) -> Option<&Group> {
        self.of.get(component).map(|&i| &self.all[i])
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// `members` as they plan or apply, in their order (a group where its
    /// first member is): mates of one stage with one call where two or more
    /// of them are here and their group can sit in one wave.
    pub(crate) fn batches<'g>(&'g self, members: &[MemberId]) -> Vec<Batch<'g>> {
        if self.all.is_empty() {
            return members.iter().cloned().map(Batch::Alone).collect();
        }
        let mut mates: BTreeMap<(usize, StageName), Vec<MemberId>> = BTreeMap::new();
        for member in members {
            if let Some((group, stage)) = self.placed(member) {
                mates
                    .entry((group, stage))
                    .or_default()
                    .push(member.clone());
            }
        }
        let mut batches = Vec::new();
        let mut done = BTreeSet::new();
        for member in members {
            let key = self.placed(member);
            match key.and_then(|k| mates.get(&k).filter(|m| m.len() > 1).map(|m| (k, m))) {
                Some(((group, stage), here)) => {
                    if done.insert((group, stage.clone())) {
                        let mut members = here.clone();
                        members.sort();
                        members.dedup();
                        batches.push(Batch::Group {
                            group: &self.all[group],
                            stage,
                            members,
                        });
                    }
                }
                None => batches.push(Batch::Alone(member.clone())),
            }
        }
        batches
    }

    /// Members of groups among `members` (all of one stage) that plan on
    /// their own, with why: their group cannot sit in one wave, or it is
    /// the only one of its group here.
    pub(crate) fn fallbacks(&self, members: &[MemberId]) -> Vec<Fallback> {
        let mut here: BTreeMap<usize, Vec<&MemberId>> = BTreeMap::new();
        for member in members {
            if let Some(&group) = self.of.get(member.component()) {
                here.entry(group).or_default().push(member);
            }
        }
        let mut fallbacks = Vec::new();
        for (group, members) in here {
            let group = &self.all[group];
            let why = match (&group.apart, members.as_slice()) {
                (Some(apart), _) => apart.clone(),
                (None, [only]) => format!(
                    "no other component of group `{}` is in this change in {}",
                    group.name,
                    only.stage()
                ),
                (None, _) => continue,
            };
            fallbacks.extend(members.into_iter().map(|m| Fallback {
                group: group.name.clone(),
                member: m.clone(),
                why: why.clone(),
            }));
        }
        fallbacks
    }

    /// Whether `a` and `b` plan and apply with one call of their group
    /// (mates of one stage, in a group that can sit in one wave).
    pub(crate) fn together(&self, a: &MemberId, b: &MemberId) -> bool {
        self.placed(a).is_some_and(|at| self.placed(b) == Some(at))
    }

    /// The group and stage `member` plans with, if its group can sit in one wave.
    fn placed(&self, member: &MemberId) -> Option<(usize, StageName)> {
        let &group = self.of.get(member.component())?;
        self.all[group]
            .apart
            .is_none()
            .then(|| (group, StageName::new(member.stage())))
    }
}

/// Checks `[[group]]` entries and each component's `group` against the
/// components (`declared`, after any discovery; `discovering`, the
/// components that stand for the units they find, with the group each
/// names), and finds each group that cannot sit in one wave.
pub(crate) fn validate(
    raw: &[RawGroup],
    declared: &[RawComponent],
    discovering: &BTreeMap<&str, Option<&str>>,
    graph: &DependencyGraph<'_>,
    default_timeout: Duration,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<Groups, ConfigError> {
    let mut all: Vec<Group> = Vec::new();
    let mut listed_in: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, g) in raw.iter().enumerate() {
        let at = |f: &str| format!("group[{i}] ({}).{f}", g.name);
        super::check::check_name(&g.name, &format!("group[{i}].name"), err)?;
        if all.iter().any(|x| x.name == g.name) {
            return Err(err(
                format!("group[{i}].name"),
                format!("group `{}` is defined twice", g.name),
                "give each group a distinct name",
            ));
        }
        check_command(&g.plan, &at("plan"), err)?;
        if let Some(apply) = &g.apply {
            check_command(apply, &at("apply"), err)?;
        }
        let timeout = match &g.timeout {
            Some(t) => parse_duration(t)
                .map_err(|p| err(at("timeout"), p, "use a number and a unit: ms, s, m, h, d"))?,
            None => default_timeout,
        };
        for (j, name) in g.components.iter().enumerate() {
            if discovering.contains_key(name.as_str()) {
                continue;
            }
            if !declared.iter().any(|c| &c.name == name) {
                let known: Vec<&str> = declared.iter().map(|c| c.name.as_str()).collect();
                return Err(err(
                    at(&format!("components[{j}]")),
                    format!("unknown component `{name}`"),
                    &format!("name one of: {}", known.join(", ")),
                ));
            }
            if let Some(&other) = listed_in.get(name.as_str()) {
                return Err(err(
                    at(&format!("components[{j}]")),
                    format!(
                        "component `{name}` is in group `{}` and group `{}`",
                        raw[other].name, g.name
                    ),
                    "put each component in one group at most",
                ));
            }
            listed_in.insert(name, i);
        }
        all.push(Group {
            name: g.name.clone(),
            components: Vec::new(),
            plan: g.plan.clone(),
            apply: g.apply.clone(),
            timeout,
            apart: None,
        });
    }
    let mut of = BTreeMap::new();
    for (i, c) in declared.iter().enumerate() {
        let listed = listed_in.get(c.name.as_str()).copied();
        let named = match &c.group {
            Some(name) => Some(all.iter().position(|g| &g.name == name).ok_or_else(|| {
                err(
                    format!("component[{i}] ({}).group", c.name),
                    format!("there is no [[group]] named `{name}`"),
                    &format!("add a [[group]] with `name = \"{name}\"` and its `plan` and `apply` commands, or remove `group`"),
                )
            })?),
            None => None,
        };
        if let (Some(listed), Some(named)) = (listed, named) {
            if listed != named {
                return Err(err(
                    format!("component[{i}] ({}).group", c.name),
                    format!(
                        "says group `{}`, but group `{}` lists it",
                        all[named].name, all[listed].name
                    ),
                    "put each component in one group at most",
                ));
            }
        }
        if let Some(group) = listed.or(named) {
            all[group].components.push(c.name.clone());
            of.insert(c.name.clone(), group);
        }
    }
    for (i, group) in all.iter_mut().enumerate() {
        let stands_for_units = raw[i]
            .components
            .iter()
            .any(|c| discovering.contains_key(c.as_str()))
            || discovering
                .values()
                .any(|g| *g == Some(group.name.as_str()))
            // The units a discovery finds may name it.
            || (raw[i].components.is_empty() && !discovering.is_empty());
        if group.components.is_empty() && !stands_for_units {
            return Err(err(
                format!("group[{i}] ({})", group.name),
                "has no components".into(),
                "list them in `components`, or set `group` on each component",
            ));
        }
        let members: BTreeSet<usize> = group
            .components
            .iter()
            .filter_map(|c| graph.index_of(c))
            .collect();
        group.apart = graph.path_outside(&members).map(|path| {
            let names: Vec<&str> = path.iter().map(|&j| graph.name(j)).collect();
            format!(
                "`{}` depends on `{}` through {}, outside group `{}`, so they cannot sit in one wave",
                names[names.len() - 1],
                names[0],
                names[1..names.len() - 1]
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(" → "),
                group.name
            )
        });
    }
    Ok(Groups { all, of })
}

fn check_command(
    argv: &[String],
    field: &str,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    let template = Template {
        what: Some("a group's command"),
        allowed: GROUP_PLACEHOLDERS,
        example: "[\"./ci/stack.sh\", \"plan\", \"{members_file}\"]",
        also: " (each member's own files are listed in the members file)",
        needs: Some((
            "members_file",
            "the command is not told which members it runs for",
            "pass `{members_file}`: it lists each member with its directory and files",
        )),
    };
    template
        .check(argv)
        .map_err(|(problem, fix)| err(field.into(), problem, &fix))
}

#[cfg(test)]
mod tests {
    use crate::config::RepoConfig;
    use crate::model::MemberId;

    const GROUPED: &str = r#"
[defaults]
plan = ["./plan", "{component}", "{plan_file}"]
[[stage]]
name = "dev"
[[stage]]
name = "prod"
[[group]]
name = "stack"
components = ["vpc", "app"]
plan = ["./stack", "plan", "{members_file}"]
apply = ["./stack", "apply", "{members_file}"]
[[component]]
name = "vpc"
dir = "live/vpc"
[[component]]
name = "app"
dir = "live/app"
depends_on = ["vpc"]
inputs = { vpc_id = "vpc.vpc_id" }
[[component]]
name = "dns"
dir = "live/dns"
group = "stack"
stages = ["prod"]
"#;

    fn parse(text: &str) -> Result<RepoConfig, String> {
        RepoConfig::parse("wavegate.toml", text).map_err(|e| e.to_string())
    }

    fn names(members: &[&str]) -> Vec<MemberId> {
        members.iter().map(|m| m.parse().unwrap()).collect()
    }

    #[test]
    fn a_group_is_its_listed_components_and_those_that_name_it() {
        let config = parse(GROUPED).unwrap();
        let group = config.groups.of("dns").unwrap();
        assert_eq!(group.components, ["vpc", "app", "dns"]);
        assert_eq!(group.apart, None);
        assert!(config.groups.of("missing").is_none());
    }

    #[test]
    fn mates_of_one_stage_batch_together_and_a_lone_mate_plans_alone() {
        let config = parse(GROUPED).unwrap();
        let batches = config
            .groups
            .batches(&names(&["vpc@dev", "app@dev", "vpc@prod", "x@prod"]));
        let shown: Vec<String> = batches
            .iter()
            .map(|b| match b {
                super::Batch::Alone(m) => m.to_string(),
                super::Batch::Group {
                    group,
                    stage,
                    members,
                } => format!(
                    "{}@{stage}: {}",
                    group.name,
                    members
                        .iter()
                        .map(MemberId::as_str)
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            })
            .collect();
        assert_eq!(shown, ["stack@dev: app@dev vpc@dev", "vpc@prod", "x@prod"]);
        let fallbacks = config.groups.fallbacks(&names(&["vpc@prod"]));
        assert_eq!(
            fallbacks[0].why,
            "no other component of group `stack` is in this change in prod"
        );
        assert!(config
            .groups
            .fallbacks(&names(&["vpc@dev", "app@dev"]))
            .is_empty());
    }

    #[test]
    fn a_group_a_dependency_leaves_and_reenters_plans_apart() {
        let text = GROUPED
            .replace(
                "depends_on = [\"vpc\"]\ninputs = { vpc_id = \"vpc.vpc_id\" }",
                "depends_on = [\"db\"]",
            )
            .replace(
                "[[component]]\nname = \"dns\"",
                "[[component]]\nname = \"db\"\ndir = \"live/db\"\ndepends_on = [\"vpc\"]\n[[component]]\nname = \"dns\"",
            );
        let config = parse(&text).unwrap();
        let group = config.groups.of("app").unwrap();
        assert_eq!(
            group.apart.as_deref(),
            Some("`app` depends on `vpc` through `db`, outside group `stack`, so they cannot sit in one wave")
        );
        let batches = config.groups.batches(&names(&["vpc@dev", "app@dev"]));
        assert!(batches.iter().all(|b| matches!(b, super::Batch::Alone(_))));
        assert_eq!(
            config
                .groups
                .fallbacks(&names(&["vpc@dev", "app@dev"]))
                .len(),
            2
        );
    }

    #[test]
    fn a_change_to_a_groups_entry_touches_each_of_its_components() {
        let base = RepoConfig::parse_raw("wavegate.toml", GROUPED).unwrap();
        let head = parse(&GROUPED.replace(
            "\"plan\", \"{members_file}\"",
            "\"plan\", \"-v\", \"{members_file}\"",
        ))
        .unwrap();
        let changed = crate::config::repo::config_changed_components(Some(&base), &head);
        assert_eq!(
            changed.into_iter().collect::<Vec<_>>(),
            ["app", "dns", "vpc"]
        );
        let same = parse(GROUPED).unwrap();
        assert!(crate::config::repo::config_changed_components(Some(&base), &same).is_empty());
    }

    #[test]
    fn a_group_a_discovering_component_names_stands_for_its_units() {
        let text = r#"
[defaults]
plan = ["./plan", "{component}", "{plan_file}"]
[[stage]]
name = "dev"
[[group]]
name = "live"
plan = ["./stack", "{members_file}"]
[[component]]
name = "live"
discover = ["./units", "{units_file}"]
group = "live"
"#;
        let config = parse(text).unwrap();
        assert_eq!(config.groups.all.len(), 1);
    }

    #[test]
    fn group_mistakes_name_the_field_and_the_fix() {
        let cases = [
            (
                GROUPED.replace("components = [\"vpc\", \"app\"]", "components = [\"vpc\", \"nope\"]"),
                "`group[0] (stack).components[1]`: unknown component `nope`",
            ),
            (
                GROUPED.replace("group = \"stack\"", "group = \"other\""),
                "`component[2] (dns).group`: there is no [[group]] named `other`",
            ),
            (
                GROUPED.replace("[\"./stack\", \"plan\", \"{members_file}\"]", "[\"./stack\", \"plan\"]"),
                "`group[0] (stack).plan`: the command is not told which members it runs for",
            ),
            (
                GROUPED.replace("\"apply\", \"{members_file}\"", "\"apply\", \"{plan_file}\", \"{members_file}\""),
                "`group[0] (stack).apply`: unknown placeholder `{plan_file}` in a group's command",
            ),
            (
                format!("{GROUPED}\n[[group]]\nname = \"stack\"\nplan = [\"x\", \"{{members_file}}\"]\n"),
                "`group[1].name`: group `stack` is defined twice",
            ),
            (
                format!("{GROUPED}\n[[group]]\nname = \"other\"\ncomponents = [\"vpc\"]\nplan = [\"x\", \"{{members_file}}\"]\n"),
                "`group[1] (other).components[0]`: component `vpc` is in group `stack` and group `other`",
            ),
            (
                format!("{GROUPED}\n[[group]]\nname = \"empty\"\nplan = [\"x\", \"{{members_file}}\"]\n"),
                "`group[1] (empty)`: has no components",
            ),
        ];
        for (text, expected) in cases {
            let error = parse(&text).unwrap_err();
            assert!(error.contains(expected), "{error}\nexpected: {expected}");
            assert!(error.contains("fix:"), "{error}");
        }
    }
}
