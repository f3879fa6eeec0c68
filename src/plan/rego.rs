//! `[[policy.rego]]`: the team's Rego policies (the OPA language conftest
//! runs) judge each member's plan in-process. Every message the policy's
//! rule gives becomes one of the plan's `denied.rules`, so the plan applies
//! only under `/override` by the base's overriders, exactly as a plan
//! command's own denial does, and the digest binds it. The policies and
//! their settings are read from the base commit: a pull request cannot
//! change what judges it.
//!
//! The input is `{"member", "component", "stage", "plan"}`, `plan` being the
//! member's plan as wavegate read it (`entries` with `address`, `action`,
//! `before`, `after`; `outputs`; `destructive`);
//! docs/configuration.md#rego-policies has an example.

use super::planfile::MemberPlan;
use crate::config::glob::Pattern;
use crate::config::repo::RawRego;
use serde_json::json;
use std::time::Duration;

/// The rule asked when `query` is not set.
pub(crate) const DEFAULT_QUERY: &str = "data.wavegate.deny";

/// How long one policy may take to judge one plan.
const EVALUATION_LIMIT: Duration = Duration::from_secs(10);

/// How long the check that a policy's rule exists may take.
const PROBE_LIMIT: Duration = Duration::from_millis(100);

fn timer(limit: Duration) -> regorus::utils::limits::ExecutionTimerConfig {
    regorus::utils::limits::ExecutionTimerConfig {
        limit,
        check_interval: std::num::NonZeroU32::new(1000).expect("not zero"),
    }
}

/// The most messages one policy may deny one plan with.
const MAX_MESSAGES: usize = 100;

/// One `[[policy.rego]]` entry, its files read.
#[derive(Debug, Clone)]
struct PolicySet {
    /// Each file's path, at the base commit.
    files: Vec<String>,
    /// The files compiled, once: each judgement runs on a copy.
    engine: regorus::Engine,
    query: String,
    stages: Option<Vec<String>>,
    limit: Duration,
}

/// The base's Rego policies.
#[derive(Debug, Clone, Default)]
pub struct RegoPolicies {
    sets: Vec<PolicySet>,
    /// Why the base's policies cannot judge at all: every plan is denied.
    unable: Option<String>,
}

impl RegoPolicies {
    /// The policies `raw` names, read by `read` (a path at the base commit
    /// to its text) from the files `listed` there, each checked to compile.
    pub(crate) fn load(
        raw: &[RawRego],
        listed: &[String],
        read: impl Fn(&str) -> Result<String, String>,
    ) -> Result<Self, String> {
        let mut sets = Vec::new();
        for (i, entry) in raw.iter().enumerate() {
            let mut files = Vec::new();
            for text in &entry.files {
                let pattern =
                    Pattern::new(text).map_err(|e| format!("`policy.rego[{i}].files`: {e}"))?;
                for path in listed.iter().filter(|p| pattern.matches(p)) {
                    files.push((path.clone(), read(path)?));
                }
            }
            if files.is_empty() {
                return Err(format!(
                    "`policy.rego[{i}].files` ({}) matches no file at the base commit, so no plan would be judged; fix the patterns, or commit the policies to the base branch first",
                    entry.files.join(", ")
                ));
            }
            files.sort();
            files.dedup();
            let set = PolicySet {
                engine: compiled(&files)?,
                files: files.into_iter().map(|(path, _)| path).collect(),
                query: entry.query.clone().unwrap_or_else(|| DEFAULT_QUERY.into()),
                stages: entry.stages.clone(),
                limit: EVALUATION_LIMIT,
            };
            // A rule the policies do not declare is a mistake, not a pass.
            // (Asked with no input, and briefly: only whether it exists counts.)
            let mut probe = set.engine.clone();
            probe.set_execution_timer_config(timer(PROBE_LIMIT));
            if let Err(e) = probe.eval_rule(set.query.clone()) {
                if e.to_string().contains("not a valid rule path") {
                    return Err(format!(
                        "`policy.rego[{i}].query` is `{}`, which no rule in {} declares; name the rule whose messages deny a plan (`deny` in `package wavegate` is `data.wavegate.deny`, the default)",
                        set.query,
                        set.names()
                    ));
                }
            }
            sets.push(set);
        }
        Ok(Self { sets, unable: None })
    }

    #[cfg(test)]
    fn limited_to(mut self, limit: Duration) -> Self {
        for set in &mut self.sets {
            set.limit = limit;
        }
        self
    }

    /// One set of policies, `files` as `(path, text)`, asked for
    /// [`DEFAULT_QUERY`]: what the benchmarks judge with.
    pub fn of_files(files: Vec<(String, String)>) -> Result<Self, String> {
        let listed: Vec<String> = files.iter().map(|(p, _)| p.clone()).collect();
        let raw = RawRego {
            files: listed.clone(),
            query: None,
            stages: None,
        };
        Self::load(&[raw], &listed, |path| {
            Ok(files
                .iter()
                .find(|(p, _)| p == path)
                .map(|(_, t)| t.clone())
                .unwrap_or_default())
        })
    }

    /// Policies that cannot judge, for `why`: every plan is denied until
    /// a change fixes them (or an overrider lets a plan through).
    pub(crate) fn unable(why: &str) -> Self {
        Self {
            sets: Vec::new(),
            unable: Some(format!(
                "rego-unavailable: the base branch's Rego policies cannot judge this plan ({why}); fix them in a pull request"
            )),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.sets.is_empty() && self.unable.is_none()
    }

    /// The messages the policies deny `plan` with; an error when a policy
    /// cannot be evaluated (the member fails to plan, saying why).
    pub fn judge(&self, plan: &MemberPlan) -> Result<Vec<String>, String> {
        let (component, stage) = (plan.member.component(), plan.member.stage());
        let input = json!({
            "member": plan.member.to_string(),
            "component": component,
            "stage": stage,
            "plan": plan,
        });
        let mut denied: Vec<String> = self.unable.iter().cloned().collect();
        for set in &self.sets {
            if set
                .stages
                .as_ref()
                .is_some_and(|stages| !stages.iter().any(|s| s == stage))
            {
                continue;
            }
            denied.extend(set.judge(&input)?);
        }
        Ok(denied)
    }
}

/// `config check`: the Rego policies `config` names, read from the
/// checkout at `root` (whose files are `files`), each compiled and its rule
/// found. How many files were read.
pub fn check_in(
    config: &crate::config::RepoConfig,
    root: &std::path::Path,
    files: &[String],
) -> Result<usize, String> {
    let policies = RegoPolicies::load(&config.policy.rego, files, |path| {
        std::fs::read_to_string(root.join(path)).map_err(|e| format!("cannot read {path}: {e}"))
    })?;
    Ok(policies.sets.iter().map(|s| s.files.len()).sum())
}

/// `files` (`(path, text)`) compiled into one engine.
fn compiled(files: &[(String, String)]) -> Result<regorus::Engine, String> {
    let mut engine = regorus::Engine::new();
    for (path, text) in files {
        engine
            .add_policy(path.clone(), text.clone())
            .map_err(|e| format!("the Rego policy {path} does not compile: {e}"))?;
    }
    Ok(engine)
}

impl PolicySet {
    fn names(&self) -> String {
        self.files.join(", ")
    }

    fn judge(&self, input: &serde_json::Value) -> Result<Vec<String>, String> {
        let mut engine = self.engine.clone();
        engine.set_execution_timer_config(timer(self.limit));
        let input = regorus::Value::from_json_str(&input.to_string())
            .map_err(|e| format!("the plan cannot be given to the Rego policies: {e}"))?;
        engine.set_input(input);
        let result = engine.eval_rule(self.query.clone()).map_err(|e| {
            format!(
                "the Rego policies ({}) could not be evaluated for `{}`: {e}",
                self.names(),
                self.query
            )
        })?;
        let messages = match &result {
            regorus::Value::Undefined => return Ok(Vec::new()),
            regorus::Value::Set(set) => set.iter().cloned().collect::<Vec<_>>(),
            regorus::Value::Array(list) => list.iter().cloned().collect(),
            other => {
                return Err(format!(
                    "`{}` in {} is {other}, not a set of messages; write `deny contains msg if {{ … }}`",
                    self.query,
                    self.names()
                ))
            }
        };
        if messages.len() > MAX_MESSAGES {
            return Err(format!(
                "`{}` in {} gives {} messages for one plan, more than the {MAX_MESSAGES} a report shows",
                self.query,
                self.names(),
                messages.len()
            ));
        }
        messages
            .into_iter()
            .map(|m| match m {
                regorus::Value::String(text) => Ok(text.to_string()),
                other => Err(format!(
                    "`{}` in {} gives {other}, not a message; each must be a string",
                    self.query,
                    self.names()
                )),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MemberId;

    /// The example's policy (examples/terraform-native/repo/policy).
    const EXAMPLE: &str =
        include_str!("../../examples/terraform-native/repo/policy/terraform.rego");

    fn plan(member: &str, entries: serde_json::Value) -> MemberPlan {
        let member: MemberId = member.into();
        MemberPlan::parse(
            &member,
            json!({ "entries": entries }).to_string().as_bytes(),
        )
        .unwrap()
    }

    fn policies(files: &[(&str, &str)], entry: &str) -> Result<RegoPolicies, String> {
        let raw: RawRego = toml::from_str(entry).unwrap();
        let listed: Vec<String> = files.iter().map(|(p, _)| (*p).to_owned()).collect();
        RegoPolicies::load(&[raw], &listed, |path| {
            Ok(files.iter().find(|(p, _)| *p == path).unwrap().1.to_owned())
        })
    }

    fn example() -> RegoPolicies {
        policies(
            &[("policy/terraform.rego", EXAMPLE)],
            "files = [\"policy/*.rego\"]",
        )
        .unwrap()
    }

    const DELETE: &str = "terraform_data.record";

    fn deleting() -> serde_json::Value {
        json!([{"address": DELETE, "action": "delete", "before": {"input": "x"}}])
    }

    #[test]
    fn a_destructive_prod_plan_is_denied_with_the_rules_message_and_dev_is_not() {
        let policies = example();
        assert_eq!(
            policies.judge(&plan("dns@prod", deleting())).unwrap(),
            ["no-prod-destroy: terraform_data.record would be deleted in prod"]
        );
        assert!(policies
            .judge(&plan("dns@dev", deleting()))
            .unwrap()
            .is_empty());
        let public = json!([{"address": "aws_s3_bucket.logs", "action": "create",
                             "after": {"acl": "public-read"}}]);
        assert_eq!(
            policies.judge(&plan("logs@dev", public)).unwrap(),
            ["no-public-buckets: aws_s3_bucket.logs would be public-read"]
        );
        let private = json!([{"address": "aws_s3_bucket.logs", "action": "create",
                              "after": {"acl": "private"}}]);
        assert!(policies
            .judge(&plan("logs@dev", private))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_denial_joins_the_plans_denied_rules_and_moves_its_digest() {
        let mut denied = plan("dns@prod", deleting());
        let before = denied.plan_digest.clone();
        denied.deny(example().judge(&denied).unwrap());
        assert_eq!(
            denied.denied_rules(),
            ["no-prod-destroy: terraform_data.record would be deleted in prod"]
        );
        assert_ne!(denied.plan_digest, before, "the digest binds the denial");
        assert_eq!(denied.plan_digest, denied.compute_digest());
    }

    #[test]
    fn a_policy_limited_to_stages_judges_only_their_plans() {
        let dev_only = policies(
            &[("policy/terraform.rego", EXAMPLE)],
            "files = [\"policy/*.rego\"]\nstages = [\"dev\"]",
        )
        .unwrap();
        assert!(dev_only
            .judge(&plan("dns@prod", deleting()))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_policy_that_is_missing_broken_or_answers_something_else_is_said_plainly() {
        let none =
            policies(&[("other/x.rego", EXAMPLE)], "files = [\"policy/*.rego\"]").unwrap_err();
        assert!(
            none.contains("matches no file at the base commit"),
            "{none}"
        );

        let broken = policies(
            &[(
                "policy/bad.rego",
                "package wavegate\ndeny contains msg if {",
            )],
            "files = [\"policy/*.rego\"]",
        )
        .unwrap_err();
        assert!(
            broken.starts_with("the Rego policy policy/bad.rego does not compile"),
            "{broken}"
        );

        let boolean = policies(
            &[("policy/b.rego", "package wavegate\ndeny := true\n")],
            "files = [\"policy/*.rego\"]",
        )
        .unwrap();
        let said = boolean.judge(&plan("dns@prod", deleting())).unwrap_err();
        assert!(said.contains("not a set of messages"), "{said}");

        let numbers = policies(
            &[(
                "policy/n.rego",
                "package wavegate\ndeny contains 7 if { true }\n",
            )],
            "files = [\"policy/*.rego\"]",
        )
        .unwrap();
        let said = numbers.judge(&plan("dns@prod", deleting())).unwrap_err();
        assert!(said.contains("each must be a string"), "{said}");

        let elsewhere = policies(
            &[("policy/terraform.rego", EXAMPLE)],
            "files = [\"policy/*.rego\"]\nquery = \"data.other.deny\"",
        )
        .unwrap_err();
        assert!(
            elsewhere.contains("which no rule in policy/terraform.rego declares"),
            "{elsewhere}"
        );
    }

    #[test]
    fn policies_the_base_cannot_compile_deny_every_plan_saying_why() {
        let unable = RegoPolicies::unable("the Rego policy policy/x.rego does not compile: …");
        assert!(!unable.is_empty());
        assert_eq!(
            unable.judge(&plan("dns@dev", json!([]))).unwrap(),
            ["rego-unavailable: the base branch's Rego policies cannot judge this plan (the Rego policy policy/x.rego does not compile: …); fix them in a pull request"]
        );
    }

    #[test]
    fn a_policy_that_never_ends_is_stopped() {
        let endless = policies(
            &[(
                "policy/slow.rego",
                "package wavegate\ndeny contains msg if {\n  some i in numbers.range(1, 5000)\n  some j in numbers.range(1, 5000)\n  i + j < 0\n  msg := \"never\"\n}\n",
            )],
            "files = [\"policy/*.rego\"]",
        )
        .unwrap()
        .limited_to(Duration::from_millis(200));
        let said = endless.judge(&plan("dns@prod", deleting())).unwrap_err();
        assert!(said.contains("could not be evaluated"), "{said}");
    }
}
