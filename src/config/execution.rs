//! Where a stage's commands run, as `wavegate.toml` chooses it: the
//! operator's execution profile by name (`[[stage]] profile`, one for all
//! commands or one for plans and one for applies), job groups that give
//! some of the stage's members a profile of their own (`[[stage.jobs]]`),
//! and non-secret `variables`. The names are checked here; what a profile
//! holds is the server's (`sandbox::profile`), and which file's choice
//! counts (the base branch's) is the engine's.

use super::check::ConfigError;
use super::glob::Pattern;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `profile = "prod"` or `profile = { plan = "prod-read", apply = "prod-write" }`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub(crate) enum RawProfileChoice {
    One(String),
    Split(SplitProfile),
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct SplitProfile {
    plan: String,
    apply: String,
}

/// `[[stage.jobs]]`: members of the stage that run with a profile of their own.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawJobGroup {
    pub(crate) name: String,
    /// Component names or patterns: `*` within a `/`-separated segment, `**` across.
    pub(crate) members: Vec<String>,
    pub(crate) profile: RawProfileChoice,
}

/// The profiles one member's commands run with: `plan` for everything but
/// the apply command (plans, outputs, hooks, costs, discoveries), `apply`
/// for the apply command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProfileChoice {
    pub(crate) plan: String,
    pub(crate) apply: String,
}

impl ProfileChoice {
    pub(crate) fn default_profile() -> Self {
        let name = crate::sandbox::profile::DEFAULT_PROFILE.to_owned();
        Self {
            plan: name.clone(),
            apply: name,
        }
    }

    fn of(raw: &RawProfileChoice) -> Self {
        match raw {
            RawProfileChoice::One(name) => Self {
                plan: name.clone(),
                apply: name.clone(),
            },
            RawProfileChoice::Split(split) => Self {
                plan: split.plan.clone(),
                apply: split.apply.clone(),
            },
        }
    }

    /// Both names, once each.
    pub(crate) fn names(&self) -> Vec<&str> {
        let mut names = vec![self.plan.as_str()];
        if self.apply != self.plan {
            names.push(&self.apply);
        }
        names
    }
}

/// A checked job group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobGroup {
    pub(crate) name: String,
    pub(crate) members: Vec<Pattern>,
    pub(crate) profile: ProfileChoice,
}

/// A stage's execution: its profile, its job groups, its variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StageExecution {
    pub(crate) profile: ProfileChoice,
    pub(crate) jobs: Vec<JobGroup>,
    /// Literals every command of the stage gets, in file order.
    pub(crate) variables: Vec<(String, String)>,
}

impl Default for StageExecution {
    fn default() -> Self {
        Self {
            profile: ProfileChoice::default_profile(),
            jobs: Vec::new(),
            variables: Vec::new(),
        }
    }
}

impl StageExecution {
    /// The profiles `component`'s commands run with in this stage: its job
    /// group's, else the stage's.
    pub(crate) fn choice_for(&self, component: &str) -> &ProfileChoice {
        self.jobs
            .iter()
            .find(|group| group.members.iter().any(|p| p.matches(component)))
            .map_or(&self.profile, |group| &group.profile)
    }

    /// Every profile name the stage uses, with the field that names it.
    pub(crate) fn named(&self, stage_field: &str) -> Vec<(String, &str)> {
        let mut named: Vec<(String, &str)> = self
            .profile
            .names()
            .into_iter()
            .map(|n| (format!("{stage_field}.profile"), n))
            .collect();
        for (i, group) in self.jobs.iter().enumerate() {
            for name in group.profile.names() {
                named.push((
                    format!("{stage_field}.jobs[{i}] ({}).profile", group.name),
                    name,
                ));
            }
        }
        named
    }
}

/// Checks one stage's `profile`, `jobs` and `variables` (`at` names a
/// field of the stage).
pub(crate) fn check_stage(
    profile: Option<&RawProfileChoice>,
    jobs: Option<&[RawJobGroup]>,
    variables: Option<&BTreeMap<String, String>>,
    at: &dyn Fn(&str) -> String,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<StageExecution, ConfigError> {
    let check_choice = |raw: &RawProfileChoice,
                        field: String|
     -> Result<ProfileChoice, ConfigError> {
        let choice = ProfileChoice::of(raw);
        for name in choice.names() {
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(err(
                    field.clone(),
                    format!("`{name}` is not a profile name"),
                    "name one of the server's execution profiles (letters, digits, `-`, `_`); `wavegate config check` lists them",
                ));
            }
        }
        Ok(choice)
    };
    let profile = match profile {
        Some(raw) => check_choice(raw, at("profile"))?,
        None => ProfileChoice::default_profile(),
    };
    let mut groups: Vec<JobGroup> = Vec::new();
    if let Some(jobs) = jobs {
        if jobs.is_empty() {
            return Err(err(
                at("jobs"),
                "is an empty list".into(),
                "give each job group a `name`, its `members` and a `profile`, or leave `jobs` out",
            ));
        }
        for (i, raw) in jobs.iter().enumerate() {
            let field = |f: &str| at(&format!("jobs[{i}] ({}).{f}", raw.name));
            super::check::check_name(&raw.name, &field("name"), err)?;
            if groups.iter().any(|g| g.name == raw.name) {
                return Err(err(
                    field("name"),
                    format!("names job group `{}` twice", raw.name),
                    "give each job group of the stage a distinct name",
                ));
            }
            if raw.members.is_empty() {
                return Err(err(
                    field("members"),
                    "is an empty list".into(),
                    "list the components the group runs, by name or pattern (`tenant-*`, `live/prod/**`)",
                ));
            }
            let members = raw
                .members
                .iter()
                .enumerate()
                .map(|(j, m)| {
                    Pattern::new(m).map_err(|p| {
                        err(
                            field(&format!("members[{j}]")),
                            p,
                            "write a component name or a pattern: `*` within a segment, `**` across",
                        )
                    })
                })
                .collect::<Result<_, _>>()?;
            groups.push(JobGroup {
                name: raw.name.clone(),
                members,
                profile: check_choice(&raw.profile, field("profile"))?,
            });
        }
    }
    let mut checked = Vec::new();
    for (name, value) in variables.into_iter().flatten() {
        let field = at(&format!("variables.{name}"));
        if !crate::sandbox::profile::is_variable_name(name) {
            return Err(err(
                field,
                format!("`{name}` is not a variable name"),
                "use letters, digits and `_`, not starting with a digit",
            ));
        }
        if crate::sandbox::profile::is_reserved_variable(name) {
            return Err(err(
                field,
                format!("`{name}` is set by wavegate itself"),
                "choose another name (PATH, HOME and WAVEGATE_* are wavegate's)",
            ));
        }
        checked.push((name.clone(), value.clone()));
    }
    Ok(StageExecution {
        profile,
        jobs: groups,
        variables: checked,
    })
}

/// Each member of a stage with job groups is in exactly one of them:
/// `members` are the stage's component names.
pub(crate) fn check_coverage<'a>(
    execution: &StageExecution,
    members: impl Iterator<Item = &'a str>,
    at: &dyn Fn(&str) -> String,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    if execution.jobs.is_empty() {
        return Ok(());
    }
    for member in members {
        let groups: Vec<&str> = execution
            .jobs
            .iter()
            .filter(|g| g.members.iter().any(|p| p.matches(member)))
            .map(|g| g.name.as_str())
            .collect();
        match groups.as_slice() {
            [_] => {}
            [] => {
                return Err(err(
                    at("jobs"),
                    format!("component `{member}` is in no job group"),
                    "add it (or a pattern that matches it) to one group's `members`",
                ))
            }
            [first, second, ..] => {
                return Err(err(
                    at("jobs"),
                    format!("component `{member}` is in job groups `{first}` and `{second}`"),
                    "narrow the groups' `members` so each component is in exactly one",
                ))
            }
        }
    }
    Ok(())
}

/// The mates of `[[group]]` `group` in a stage run with one profile: one
/// call plans and applies them all, so their job groups must agree.
pub(crate) fn check_group_profiles<'a>(
    execution: &StageExecution,
    group: &str,
    mut mates: impl Iterator<Item = &'a String>,
    at: &dyn Fn(&str) -> String,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    let Some(first) = mates.next() else {
        return Ok(());
    };
    let choice = execution.choice_for(first);
    for mate in mates {
        if execution.choice_for(mate) != choice {
            return Err(err(
                at("jobs"),
                format!(
                    "components `{first}` and `{mate}` of group `{group}` run with different profiles here, but one call plans and applies the group"
                ),
                "put the group's components in the same job group",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::RepoConfig;
    use crate::sandbox::profile::Profiles;
    use std::path::Path;

    const BASE: &str = r#"
[defaults]
plan = ["./plan.sh", "{component}", "{stage}", "{plan_file}"]
[[stage]]
name = "dev"
gate = "never"
variables = { REGION = "eu-west-1" }
[[stage]]
name = "prod"
profile = { plan = "prod-read", apply = "prod-write" }
STAGE_EXTRA
[[component]]
name = "network"
dir = "network"
[[component]]
name = "tenant-a"
dir = "tenants/a"
[[component]]
name = "tenant-b"
dir = "tenants/b"
"#;

    fn config(extra: &str) -> Result<RepoConfig, String> {
        RepoConfig::parse("wavegate.toml", &BASE.replace("STAGE_EXTRA", extra))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_stage_picks_profiles_for_plans_and_applies_and_a_job_group_its_own() {
        let config = config(
            r#"
[[stage.jobs]]
name = "tenants"
members = ["tenant-*"]
profile = "tenants-prod"
[[stage.jobs]]
name = "core"
members = ["network"]
profile = { plan = "prod-read", apply = "prod-write" }
"#,
        )
        .unwrap();
        let dev = &config.stage("dev").unwrap().execution;
        assert_eq!(dev.choice_for("network").plan, "default");
        assert_eq!(
            dev.variables,
            vec![("REGION".to_owned(), "eu-west-1".to_owned())]
        );
        let prod = &config.stage("prod").unwrap().execution;
        let network = prod.choice_for("network");
        assert_eq!(
            (network.plan.as_str(), network.apply.as_str()),
            ("prod-read", "prod-write")
        );
        let tenant = prod.choice_for("tenant-b");
        assert_eq!(
            (tenant.plan.as_str(), tenant.apply.as_str()),
            ("tenants-prod", "tenants-prod")
        );
    }

    #[test]
    fn every_member_is_in_exactly_one_job_group_and_each_mistake_is_named() {
        let group = |name: &str, members: &str| {
            format!("[[stage.jobs]]\nname = \"{name}\"\nmembers = {members}\nprofile = \"p\"\n")
        };
        for (extra, expected) in [
            (
                group("all", r#"["**"]"#) + &group("tenants", r#"["tenant-*"]"#),
                "`stage[1] (prod).jobs`: component `tenant-a` is in job groups `all` and `tenants`",
            ),
            (
                group("tenants", r#"["tenant-*"]"#),
                "`stage[1] (prod).jobs`: component `network` is in no job group",
            ),
            (
                group("t", r#"["tenant-*"]"#) + &group("t", r#"["network"]"#),
                "names job group `t` twice",
            ),
            (
                group("t", "[]"),
                "`stage[1] (prod).jobs[0] (t).members`: is an empty list",
            ),
            (
                "variables = { PATH = \"/x\" }".to_owned(),
                "`stage[1] (prod).variables.PATH`: `PATH` is set by wavegate itself",
            ),
            (
                "variables = { \"9LIVES\" = \"x\" }".to_owned(),
                "`9LIVES` is not a variable name",
            ),
            ("runner = \"prod\"".to_owned(), "unknown field `runner`"),
        ] {
            let e = config(&extra).unwrap_err();
            assert!(e.contains(expected), "{extra}\n=> {e}");
        }
        let e = RepoConfig::parse(
            "wavegate.toml",
            &BASE.replace("STAGE_EXTRA", "").replace(
                "profile = { plan = \"prod-read\", apply = \"prod-write\" }",
                "profile = \"prod read\"",
            ),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("`stage[1] (prod).profile`: `prod read` is not a profile name"),
            "{e}"
        );
    }

    #[test]
    fn a_groups_components_plan_with_one_profile() {
        let e = config(
            r#"
[[stage.jobs]]
name = "tenants"
members = ["tenant-*"]
profile = "tenants-prod"
[[stage.jobs]]
name = "core"
members = ["network"]
profile = "p"
[[group]]
name = "all"
components = ["network", "tenant-a"]
plan = ["./group-plan.sh", "{members_file}"]
"#,
        )
        .unwrap_err();
        assert!(
            e.contains("components `network` and `tenant-a` of group `all` run with different profiles here"),
            "{e}"
        );
    }

    #[test]
    fn a_profile_the_server_does_not_define_is_a_config_error_naming_those_it_does() {
        let config = config("").unwrap();
        let profiles = Profiles::parse(
            Path::new("/etc/wavegate/profiles.toml"),
            "[profile.prod-read]\n[profile.prod-write]\nrepos = [\"acme/infra\"]\n",
            &|_| None,
        )
        .unwrap();
        // The file's profiles alone: the default comes with loading.
        let e = config
            .check_profiles(&profiles, None)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("wavegate.toml: `stage[0] (dev).profile`: execution profile `default` is not defined on this server (it has `prod-read`, `prod-write`)"), "{e}");
        let e = RepoConfig::parse(
            "wavegate.toml",
            &BASE.replace("STAGE_EXTRA", "").replace(
                "name = \"dev\"\ngate = \"never\"\n",
                "name = \"dev\"\ngate = \"never\"\nprofile = \"prod-read\"\n",
            ),
        )
        .unwrap()
        .check_profiles(&profiles, Some("acme/web"))
        .unwrap_err()
        .to_string();
        assert!(e.contains("`stage[1] (prod).profile`: execution profile `prod-write` is not for this repository (acme/web)"), "{e}");
    }
}
