//! What `wavegate config check` finds in a checkout besides the config's
//! own mistakes: each member the config expands to, with its directory and
//! wave; directories that do not exist (every plan of them would fail);
//! and files no component claims and no `ignore` covers, a change to which
//! would plan nothing. Pure: the caller lists the checkout's files.

use super::fanout::{derive, FanOutInput};
use crate::config::glob::Pattern;
use crate::config::repo::RepoConfig;
use crate::model::{MemberId, StageName, WaveName};
use std::collections::BTreeSet;

/// One member as the config expands it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SurveyedMember {
    pub member: MemberId,
    pub stage: StageName,
    pub dir: String,
    /// Its wave among its stage's, from 1, when everything changes.
    pub wave: usize,
    /// For a root module `[terraform]` found: the workspace it runs in.
    pub workspace: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Survey {
    /// Every member, stages in order, each stage's waves in order.
    pub members: Vec<SurveyedMember>,
    /// `(member, dir)` whose directory is not in the checkout.
    pub missing_dirs: Vec<(MemberId, String)>,
    /// Files no component claims (by `paths`, or as a file its commands
    /// run or read) and no `ignore` pattern covers, sorted.
    pub unclaimed: Vec<String>,
}

/// Surveys `config` against `files`, the checkout's files relative to its root.
pub fn survey(config: &RepoConfig, files: &[String]) -> Survey {
    let everything: BTreeSet<String> = config.components.iter().map(|c| c.name.clone()).collect();
    let all = derive(&FanOutInput {
        config,
        changed_paths: &[],
        config_changed: &everything,
        stage: None,
    })
    .expect("no stage filter, so no unknown stage");
    let names = WaveName::of_each(&all.waves);
    let mut members = Vec::new();
    for (wave, name) in all.waves.iter().zip(&names) {
        for member in wave {
            let component = config
                .component(member.component())
                .expect("the derivation's members are the config's");
            members.push(SurveyedMember {
                member: member.clone(),
                stage: StageName::new(member.stage()),
                dir: component.dir_in(member.stage()),
                wave: name.number,
                workspace: config.terraform_workspace(component, member.stage()),
            });
        }
    }
    let dirs: BTreeSet<&str> = files
        .iter()
        .flat_map(|f| f.match_indices('/').map(move |(i, _)| &f[..i]))
        .collect();
    let missing_dirs = members
        .iter()
        .filter(|m| !m.dir.is_empty() && !dirs.contains(m.dir.as_str()))
        .map(|m| (m.member.clone(), m.dir.clone()))
        .collect();
    let unclaimed = derive(&FanOutInput {
        config,
        changed_paths: files,
        config_changed: &BTreeSet::new(),
        stage: None,
    })
    .expect("no stage filter, so no unknown stage")
    .indeterminate;
    // The Rego policies judge plans (from the base branch); they are no
    // member's to plan.
    let policies: Vec<Pattern> = config
        .policy
        .rego
        .iter()
        .flat_map(|r| &r.files)
        .filter_map(|p| Pattern::new(p).ok())
        .collect();
    let unclaimed = unclaimed
        .into_iter()
        .filter(|f| !policies.iter().any(|p| p.matches(f)))
        .collect();
    Survey {
        members,
        missing_dirs,
        unclaimed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
ignore = ["**/*.md"]
[defaults]
plan = ["{root}/ci/plan.sh", "{plan_file}"]
[[stage]]
name = "dev"
[[stage]]
name = "prod"
[[component]]
name = "network"
dir = "envs/{stage}/network"
[[component]]
name = "app"
dir = "envs/{stage}/app"
depends_on = ["network"]
"#;

    #[test]
    fn a_checkout_is_surveyed_for_its_members_missing_dirs_and_unclaimed_files() {
        let config = RepoConfig::parse("wavegate.toml", CONFIG).unwrap();
        let files: Vec<String> = [
            "wavegate.toml",
            "README.md",
            "ci/plan.sh",
            "ci/lib.sh",
            "Makefile",
            "envs/dev/network/main.tf",
            "envs/dev/app/main.tf",
            "envs/prod/network/main.tf",
        ]
        .iter()
        .map(|f| (*f).to_owned())
        .collect();
        let s = survey(&config, &files);
        let listed: Vec<(String, &str, usize)> = s
            .members
            .iter()
            .map(|m| (m.member.to_string(), m.dir.as_str(), m.wave))
            .collect();
        assert_eq!(
            listed,
            [
                ("network@dev".to_owned(), "envs/dev/network", 1),
                ("app@dev".to_owned(), "envs/dev/app", 2),
                ("network@prod".to_owned(), "envs/prod/network", 1),
                ("app@prod".to_owned(), "envs/prod/app", 2),
            ]
        );
        assert_eq!(
            s.missing_dirs,
            [("app@prod".parse().unwrap(), "envs/prod/app".to_owned())]
        );
        assert_eq!(s.unclaimed, ["Makefile", "ci/lib.sh"]);
    }

    #[test]
    fn the_rego_policies_the_config_names_are_not_unclaimed() {
        let text = format!("{CONFIG}[[policy.rego]]\nfiles = [\"policy/*.rego\"]\n");
        let config = RepoConfig::parse("wavegate.toml", &text).unwrap();
        let files = ["policy/terraform.rego".to_owned(), "Makefile".to_owned()];
        assert_eq!(survey(&config, &files).unclaimed, ["Makefile"]);
    }
}
