//! `/plan app@prod`: which members of a change a targeted plan plans
//! again. The members named (by component, member, directory or workspace,
//! as Atlantis' `plan -p/-d/-w` name projects), and every member of the
//! change downstream of one in its stage, since what they read may move
//! with it; the rest keep their plans from the earlier plan of the same
//! commit. Pure.

use crate::config::repo::RepoConfig;
use crate::model::{MemberId, PlanTarget};
use std::collections::BTreeSet;

/// The plans a targeted `/plan` keeps, and what it names.
#[derive(Debug, Clone, Default)]
pub struct KeptPlans {
    pub(crate) only: Vec<PlanTarget>,
    /// The earlier plan's member plans, each verified with its change set.
    pub(crate) plans: std::collections::HashMap<MemberId, super::planfile::MemberPlan>,
    /// The commit they were planned on: the one planned now.
    pub(crate) commit: String,
}

impl KeptPlans {
    pub(crate) fn new(
        only: Vec<PlanTarget>,
        plans: impl IntoIterator<Item = super::planfile::MemberPlan>,
        commit: &str,
    ) -> Self {
        Self {
            only,
            plans: plans.into_iter().map(|p| (p.member.clone(), p)).collect(),
            commit: commit.to_owned(),
        }
    }
}

/// The members of `members` (a change's, in wave order) that `only` names,
/// with those downstream of them; an error names a target that names no
/// member of the change, and what does.
pub(crate) fn targeted(
    config: &RepoConfig,
    members: &[MemberId],
    only: &[PlanTarget],
) -> Result<BTreeSet<MemberId>, String> {
    let mut named = BTreeSet::new();
    for target in only {
        let matched: Vec<&MemberId> = members
            .iter()
            .filter(|m| match target {
                PlanTarget::Component(name) => m.component() == name,
                PlanTarget::Member(id) => *m == id,
                PlanTarget::Workspace(stage) => m.stage() == stage,
                PlanTarget::Dir(dir) => config
                    .component(m.component())
                    .is_some_and(|c| c.dir_in(m.stage()) == *dir),
            })
            .collect();
        if matched.is_empty() {
            let listed: Vec<String> = members.iter().map(|m| format!("`{m}`")).collect();
            return Err(format!(
                "`/plan {target}` names no member of this change (its members: {}); name one of them, or write `/plan` to plan everything again",
                if listed.is_empty() { "none".to_owned() } else { listed.join(", ") }
            ));
        }
        named.extend(matched.into_iter().cloned());
    }
    // Downstream, in the order the change plans: each member after its upstreams.
    let mut chosen = named;
    for member in members {
        let Some(component) = config.component(member.component()) else {
            continue;
        };
        let reads_chosen = component.depends_on.iter().any(|upstream| {
            chosen
                .iter()
                .any(|c| c.component() == upstream && c.stage() == member.stage())
        });
        if reads_chosen {
            chosen.insert(member.clone());
        }
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
[defaults]
plan = ["./plan", "{plan_file}"]
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
[[component]]
name = "dns"
dir = "dns"
depends_on = ["app"]
"#;

    fn members() -> Vec<MemberId> {
        [
            "network@dev",
            "app@dev",
            "dns@dev",
            "network@prod",
            "app@prod",
            "dns@prod",
        ]
        .iter()
        .map(|m| m.parse().unwrap())
        .collect()
    }

    fn chosen(only: &[PlanTarget]) -> Vec<String> {
        let config = RepoConfig::parse("wavegate.toml", CONFIG).unwrap();
        targeted(&config, &members(), only)
            .unwrap()
            .iter()
            .map(|m| m.to_string())
            .collect()
    }

    #[test]
    fn a_member_named_is_planned_again_with_what_reads_it_in_its_stage() {
        assert_eq!(
            chosen(&[PlanTarget::Member("app@prod".parse().unwrap())]),
            ["app@prod", "dns@prod"]
        );
        assert_eq!(
            chosen(&[PlanTarget::Member("dns@dev".parse().unwrap())]),
            ["dns@dev"]
        );
    }

    #[test]
    fn a_component_a_directory_or_a_workspace_names_its_members() {
        assert_eq!(
            chosen(&[PlanTarget::Component("app".into())]),
            ["app@dev", "app@prod", "dns@dev", "dns@prod"]
        );
        assert_eq!(
            chosen(&[PlanTarget::Dir("envs/prod/network".into())]),
            ["app@prod", "dns@prod", "network@prod"]
        );
        assert_eq!(
            chosen(&[PlanTarget::Workspace("dev".into())]),
            ["app@dev", "dns@dev", "network@dev"]
        );
    }

    #[test]
    fn a_target_that_names_nothing_in_the_change_says_what_does() {
        let config = RepoConfig::parse("wavegate.toml", CONFIG).unwrap();
        let only = [PlanTarget::Member("app@prod".parse().unwrap())];
        let error = targeted(&config, &members()[..3], &only).unwrap_err();
        assert_eq!(
            error,
            "`/plan app@prod` names no member of this change (its members: `network@dev`, `app@dev`, `dns@dev`); name one of them, or write `/plan` to plan everything again"
        );
        let error = targeted(&config, &members(), &[PlanTarget::Dir("dns/x".into())]).unwrap_err();
        assert!(
            error.starts_with("`/plan -d dns/x` names no member"),
            "{error}"
        );
    }
}
