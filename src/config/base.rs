//! What the base branch decides, read once from its `wavegate.toml`: the
//! approval policy, each stage's gate, approvers and timeout, and whether a
//! fork's code may be planned. Code in a pull request never decides these;
//! the target it merges into does.
//!
//! "Missing or broken means strictest" lives here, once: a base without the
//! file has the default policy, but one whose file does not read refuses
//! approvals until it reads again; a stage the base does not describe (or
//! cannot) is gated `always`; forks are allowed only by a base that says so.

use super::cost::CostCommand;
use super::hooks::{Hook, Moment};
use super::raw::{GatePolicy, GateScope, Notify, Policy, RawRepoConfig};
use super::repo::{
    apply_concurrency_of, gate_of, gate_scope_of, stage_policy, stage_timeout, RepoConfig,
};
use super::CONFIG_FILE;
use crate::model::StageName;
use std::time::Duration;

/// The base branch's rules, as read from its config at one commit.
#[derive(Debug, Clone)]
pub(crate) struct BaseRules {
    /// The config as written, when it parses as TOML of the right shape
    /// (what stage gates read; a base whose config does not validate
    /// still names its gates).
    raw: Option<RawRepoConfig>,
    /// The validated config: `Ok(None)` when the base has none, `Err` with
    /// why when it does not read.
    config: Result<Option<RepoConfig>, String>,
    /// A base with no config of its own still has what the operator's
    /// central configuration imposes: its policy and its hooks.
    operator: Option<(Policy, super::hooks::Hooks)>,
}

impl BaseRules {
    /// The rules of a base whose `wavegate.toml` is `text` (`None`: it has none).
    #[cfg(test)]
    pub(crate) fn from_file(text: Option<&str>) -> Self {
        Self::imposed(text, &super::operator::Imposed::default())
    }

    /// The rules of a base whose `wavegate.toml` is `text`, with what the
    /// operator imposes on the repository merged in.
    pub(crate) fn imposed(text: Option<&str>, imposed: &super::operator::Imposed) -> Self {
        let Some(text) = text else {
            // No file: nothing of the repository's own, and all of the operator's.
            let operator = (!imposed.is_empty()).then(|| {
                let raw = RepoConfig::parse_raw_with(CONFIG_FILE, "", imposed).ok()?;
                let err = |field: String, problem: String, fix: &str| super::check::ConfigError {
                    file: CONFIG_FILE.into(),
                    field,
                    problem,
                    fix: fix.into(),
                };
                let hooks = super::hooks::validate(raw.hooks.as_ref(), &[], &err).ok()?;
                Some((raw.policy.clone().unwrap_or_default(), hooks))
            });
            return BaseRules {
                raw: None,
                config: Ok(None),
                // (Checked at start: the operator's settings read alone.)
                operator: operator.flatten(),
            };
        };
        BaseRules {
            operator: None,
            raw: RepoConfig::parse_raw_with(CONFIG_FILE, text, imposed).ok(),
            config: RepoConfig::parse_with(CONFIG_FILE, text, imposed)
                .map(Some)
                .map_err(|e| e.to_string()),
        }
    }

    /// The approval policy: the default when the base has no config; a
    /// refusal to say on the pull request when its config does not read
    /// (a broken file never means the loosest policy).
    pub(crate) fn policy(&self) -> Result<Policy, String> {
        match &self.config {
            Ok(None) => Ok(self
                .operator
                .as_ref()
                .map(|(policy, _)| policy.clone())
                .unwrap_or_default()),
            Ok(Some(config)) => Ok(config.policy.clone()),
            Err(e) => Err(format!(
                "approvals are refused until the base branch's {CONFIG_FILE} reads again: {e}"
            )),
        }
    }

    /// Whether a fork's code may be planned: only when the base says so.
    pub(crate) fn allows_forks(&self) -> bool {
        matches!(&self.config, Ok(Some(config)) if config.policy.allow_forks)
    }

    /// `branches` as the file writes it, when these are the default
    /// branch's rules (`None`: it names none, so merges into the default
    /// branch apply); a file that does not read names none and says why (a
    /// broken file never widens where changes apply).
    pub(crate) fn apply_branches(&self) -> Result<Option<Vec<String>>, String> {
        match &self.config {
            Ok(config) => Ok(config.as_ref().and_then(|c| c.branches.clone())),
            Err(e) => Err(e.clone()),
        }
    }

    /// Who hears of the runs of pull requests into this base (none when it
    /// has no readable config).
    pub(crate) fn notify(&self) -> Option<&Notify> {
        match &self.config {
            Ok(Some(config)) => config.notify.as_ref(),
            _ => None,
        }
    }

    /// The drift schedule, when these are the default branch's rules (none
    /// when it has no readable config: a broken file checks nothing).
    pub(crate) fn drift(&self) -> Option<&super::drift::DriftRules> {
        match &self.config {
            Ok(Some(config)) => Some(&config.drift),
            _ => None,
        }
    }

    /// The base's stages, in order (none when it has no readable config).
    pub(crate) fn stages(&self) -> Vec<StageName> {
        match &self.config {
            Ok(Some(config)) => config.stages.iter().map(|s| s.name.clone()).collect(),
            _ => Vec::new(),
        }
    }

    /// The config as written, for what reads it raw (stage gates, the
    /// components a change to the file touches).
    pub(crate) fn raw(&self) -> Option<&RawRepoConfig> {
        self.raw.as_ref()
    }

    /// A stage's gate: `always` unless the base says otherwise.
    pub(crate) fn gate(&self, stage: &str) -> GatePolicy {
        gate_of(self.raw(), stage)
    }

    /// What one approval at a stage's gate covers: the stage, unless the
    /// base says one wave at a time.
    pub(crate) fn gate_scope(&self, stage: &str) -> GateScope {
        gate_scope_of(self.raw(), stage)
    }

    /// The policy a stage's gate and its rounds are judged by: `policy`
    /// with the stage's own approvers, `required` and `review_approvals`.
    pub(crate) fn stage_policy(&self, policy: &Policy, stage: &str) -> Policy {
        stage_policy(self.raw(), policy, stage)
    }

    /// How many members of one of a stage's waves apply at once: the
    /// stage's `apply_concurrency`, else the top level's, else 4.
    pub(crate) fn apply_concurrency(&self, stage: &str) -> usize {
        apply_concurrency_of(self.raw(), stage)
    }

    /// How long a stage's gate waits (`None`: until approved).
    pub(crate) fn stage_timeout(&self, stage: &str) -> Option<Duration> {
        stage_timeout(self.raw(), stage)
    }

    /// The hooks at `moment` of `stage`, the top level's first. Only a base
    /// whose config reads has any: a run whose base does not read is
    /// refused before any hook would run.
    pub(crate) fn hooks(&self, stage: &str, moment: Moment) -> Vec<Hook> {
        match &self.config {
            Ok(Some(config)) => config.hooks.at(stage, moment),
            Ok(None) => self
                .operator
                .as_ref()
                .map(|(_, hooks)| hooks.at(stage, moment))
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    /// The command that prices `stage`'s plans: its own, else the top
    /// level's; none where the base has no readable config.
    pub(crate) fn cost(&self, stage: &str) -> Option<&CostCommand> {
        match &self.config {
            Ok(Some(config)) => config.cost.at(stage),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::hooks::OnFailure;
    use super::*;

    const GATED: &str = r#"
[policy]
approvers = ["@erin"]
allow_forks = true

[[stage]]
name = "dev"
gate = "never"

[[stage]]
name = "prod"
timeout = "2h"

[[component]]
name = "app"
dir = "app"
stages = ["dev", "prod"]
plan = ["./plan"]
"#;

    #[test]
    fn a_base_that_says_so_sets_each_rule() {
        let rules = BaseRules::from_file(Some(GATED));
        assert_eq!(rules.policy().unwrap().approvers, ["@erin"]);
        assert!(rules.allows_forks());
        assert_eq!(rules.stages(), ["dev", "prod"]);
        assert_eq!(rules.gate("dev"), GatePolicy::Never);
        assert_eq!(rules.gate("prod"), GatePolicy::Always);
        assert_eq!(rules.stage_timeout("prod"), Some(Duration::from_secs(7200)));
    }

    #[test]
    fn a_wave_applies_four_members_at_once_unless_the_base_or_its_stage_says_otherwise() {
        assert_eq!(BaseRules::from_file(None).apply_concurrency("prod"), 4);
        assert_eq!(
            BaseRules::from_file(Some(GATED)).apply_concurrency("prod"),
            4
        );
        let set = format!("apply_concurrency = 8\n{GATED}").replace(
            "name = \"prod\"\n",
            "name = \"prod\"\napply_concurrency = 1\n",
        );
        let rules = BaseRules::from_file(Some(&set));
        assert_eq!(rules.apply_concurrency("dev"), 8, "the top level's");
        assert_eq!(rules.apply_concurrency("prod"), 1, "the stage's own");

        for (bad, expected) in [
            ("apply_concurrency = 0\n", "`apply_concurrency`: is 0"),
            ("apply_concurrency = 65\n", "`apply_concurrency`: is 65"),
        ] {
            let e = RepoConfig::parse(CONFIG_FILE, &format!("{bad}{GATED}")).unwrap_err();
            assert!(e.to_string().contains(expected), "{e}");
            assert!(e.to_string().contains("fix: "), "{e}");
        }
        let e = RepoConfig::parse(
            CONFIG_FILE,
            &set.replace("apply_concurrency = 1", "apply_concurrency = 0"),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("`stage[1] (prod).apply_concurrency`: is 0"),
            "{e}"
        );
    }

    #[test]
    fn hooks_come_from_the_base_the_top_levels_first_and_a_hook_that_cannot_hold_is_refused() {
        let hooked = format!(
            "{GATED}
[[stage.hooks.before.apply]]
name = \"change-window\"
command = [\"./hooks/window.sh\", \"{{members_file}}\"]
on_failure = \"approve\"

[[hooks.before.apply]]
command = [\"./hooks/lint.sh\", \"{{member}}\", \"{{plan_file}}\"]
per_member = true
timeout = \"90s\"
"
        );
        let rules = BaseRules::from_file(Some(&hooked));
        let prod: Vec<(String, OnFailure, bool)> = rules
            .hooks("prod", Moment::BeforeApply)
            .into_iter()
            .map(|h| (h.name, h.on_failure, h.per_member))
            .collect();
        assert_eq!(
            prod,
            [
                ("before-apply-1".to_owned(), OnFailure::Fail, true),
                ("change-window".to_owned(), OnFailure::Approve, false),
            ]
        );
        assert_eq!(rules.hooks("dev", Moment::BeforeApply).len(), 1);
        assert_eq!(
            rules.hooks("dev", Moment::BeforeApply)[0].timeout,
            Duration::from_secs(90)
        );
        assert!(rules.hooks("prod", Moment::AfterApply).is_empty());
        assert!(BaseRules::from_file(None)
            .hooks("prod", Moment::BeforePlan)
            .is_empty());

        for (hook, expected) in [
            (
                "[[hooks.after.apply]]\ncommand = [\"x\"]\non_failure = \"approve\"\n",
                "`hooks.after.apply[0].on_failure`: `approve` cannot be used at after.apply: nothing is left to hold",
            ),
            (
                "[[hooks.after.gate]]\ncommand = [\"x\"]\non_failure = \"approve\"\n",
                "`approve` cannot be used at after.gate: the gate has already decided",
            ),
            (
                "[[hooks.after.plan]]\ncommand = [\"x\", \"{member}\"]\n",
                "`{member}` names one member, and the hook runs once for them all",
            ),
            (
                "[[hooks.before.plan]]\ncommand = [\"x\", \"{plan_file}\"]\nper_member = true\n",
                "nothing is planned yet",
            ),
            (
                "[[hooks.before.plan]]\ncommand = [\"x\", \"{inputs_file}\"]\n",
                "unknown placeholder `{inputs_file}` in a hook",
            ),
            ("[[hooks.before.plan]]\ncommand = []\n", "the command is empty"),
            (
                "[[hooks.before.plan]]\nname = \"Window\"\ncommand = [\"x\"]\n",
                "`Window` is not a hook name",
            ),
            (
                "[[hooks.before.plan]]\nname = \"w\"\ncommand = [\"x\"]\n[[hooks.after.plan]]\nname = \"w\"\ncommand = [\"y\"]\n",
                "hook `w` is defined twice",
            ),
            (
                "[[hooks.during.plan]]\ncommand = [\"x\"]\n",
                "unknown field `during`",
            ),
        ] {
            let e = RepoConfig::parse(CONFIG_FILE, &format!("{hook}{GATED}")).unwrap_err();
            assert!(e.to_string().contains(expected), "{hook}: {e}");
            assert!(e.to_string().contains("fix: "), "{e}");
        }
    }

    #[test]
    fn a_base_without_a_config_has_the_default_policy_and_the_strictest_gates() {
        let rules = BaseRules::from_file(None);
        assert_eq!(rules.policy().unwrap(), Policy::default());
        assert!(!rules.allows_forks());
        assert!(rules.stages().is_empty());
        assert_eq!(rules.gate("prod"), GatePolicy::Always);
    }

    #[test]
    fn a_default_branch_config_may_list_the_branches_whose_merges_apply() {
        assert_eq!(BaseRules::from_file(None).apply_branches(), Ok(None));
        assert_eq!(BaseRules::from_file(Some(GATED)).apply_branches(), Ok(None));
        let listed = format!("branches = [\"main\", \"release/2026\"]\n{GATED}");
        assert_eq!(
            BaseRules::from_file(Some(&listed)).apply_branches(),
            Ok(Some(vec!["main".into(), "release/2026".into()]))
        );
        let broken = format!("branches = [\"main\"]\n{GATED}\n[[stage]]\nname = \"dev\"\n");
        let why = BaseRules::from_file(Some(&broken))
            .apply_branches()
            .unwrap_err();
        assert!(why.contains("stage `dev` is defined twice"), "{why}");
    }

    #[test]
    fn a_base_whose_config_does_not_read_refuses_approvals_and_forks() {
        let rules = BaseRules::from_file(Some("[policy\nnot toml"));
        let refusal = rules.policy().unwrap_err();
        assert!(
            refusal.starts_with(
                "approvals are refused until the base branch's wavegate.toml reads again:"
            ),
            "{refusal}"
        );
        assert!(!rules.allows_forks());
        assert_eq!(rules.gate("dev"), GatePolicy::Always);
    }

    #[test]
    fn a_base_that_parses_but_does_not_validate_still_names_its_gates() {
        let invalid = GATED.replace("plan = [\"./plan\"]", "plan = []");
        let rules = BaseRules::from_file(Some(&invalid));
        assert!(rules.policy().is_err());
        assert_eq!(rules.gate("dev"), GatePolicy::Never);
    }

    #[test]
    fn the_cost_command_is_the_bases_the_stages_own_replacing_the_top_levels() {
        let with = |extra: &str| format!("{extra}\n{GATED}");
        let top = "[cost]\ncommand = [\"./ci/cost.sh\", \"{members_file}\", \"{cost_file}\"]\n";
        let text = with(top).replace(
            "name = \"prod\"\n",
            "name = \"prod\"\ncost = { command = [\"infracost-wrap\", \"{cost_file}\"], timeout = \"2m\" }\n",
        );
        let rules = BaseRules::from_file(Some(&text));
        assert_eq!(rules.cost("dev").unwrap().command[0], "./ci/cost.sh");
        let prod = rules.cost("prod").unwrap();
        assert_eq!(
            (prod.command[0].as_str(), prod.timeout),
            ("infracost-wrap", Duration::from_secs(120))
        );
        assert!(BaseRules::from_file(Some(GATED)).cost("prod").is_none());
        assert!(BaseRules::from_file(None).cost("prod").is_none());

        let capped = with("[policy]\nmax_monthly_increase = \"500\"\n").replacen(
            "[policy]\napprovers",
            "approvers",
            1,
        );
        let policy = BaseRules::from_file(Some(&capped)).policy().unwrap();
        assert_eq!(
            policy
                .max_monthly_increase
                .map(|m| m.to_string())
                .as_deref(),
            Some("500.00")
        );

        for (text, expected) in [
            (
                with("[cost]\ncommand = [\"./cost\"]\n"),
                "`cost.command`: the command is not told where to write its figures",
            ),
            (
                with("[cost]\ncommand = [\"./cost\", \"{plan_file}\", \"{cost_file}\"]\n"),
                "unknown placeholder `{plan_file}` in a cost command",
            ),
            (with("[cost]\ncommand = []\n"), "the command is empty"),
            (
                with("[cost]\ncommand = [\"./c\", \"{cost_file}\"]\ntimeout = \"soon\"\n"),
                "`cost.timeout`",
            ),
            (
                with(top)
                    .replace("name = \"app\"", "name = \"cost\"")
                    .replace("dir = \"app\"", "dir = \"cost\""),
                "`cost` is the name of each stage's cost member",
            ),
            (
                capped.replace("\"500\"", "\"lots\""),
                "`lots` is not an amount",
            ),
            (
                capped.replace("\"500\"", "\"-1\""),
                "`policy.max_monthly_increase`: is below zero",
            ),
        ] {
            let e = RepoConfig::parse(CONFIG_FILE, &text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(expected), "{expected}: {e}");
        }
    }
}
