//! A group's members planned with one call and applied with one call
//! (`[[group]]`, docs/configuration.md#groups).
//!
//! The call gets `{members_file}`: every member with its directory and its
//! own plan, inputs, outputs and carry files, all under the group's job
//! directory (the one place the sandbox lets it write). It writes one plan
//! file per member; each member's plan then binds the group's digest, so an
//! approval binds the composition and every mate's plan. A group that fails
//! to plan fails each of its members with the group's error. At apply, each
//! member's outputs file says what became of it: its outputs (applied), or
//! `{"outcome": "failed"}` / `{"outcome": "not-started"}`.

use super::{
    read_carry, read_plan_file, resolve_dir, ApplyOutcome, ApplyRun, CommandKind, InputSource,
    MemberOutcome, MemberStatus, ResolvedInput, Where, Workbench, CARRY_FILE, INPUTS_FILE,
    MEMBERS_FILE, OUTPUTS_FILE, PLAN_FILE,
};
use crate::config::groups::Group;
use crate::config::repo::Input;
use crate::model::{Digest, DigestOver, MemberId, StageName};
use crate::plan::executor::{Control, Files, Finished, Job, JobName};
use crate::plan::planfile::{GroupBinding, MemberPlan};
use crate::plan::runner::SpawnError;
use crate::sandbox::process::ProcessId;
use serde_json::{json, Value};
use std::collections::HashMap;

/// A member's read of a mate it plans with: the group computes it. Its
/// value is filled in once the mate's plan is read, when that plan knows it.
pub(super) fn read_of_mate(input: &Input, upstream: &str, group: &str) -> ResolvedInput {
    ResolvedInput {
        reference: format!("{}.{}", input.upstream, input.output),
        upstream: upstream.to_owned(),
        source: InputSource::Group,
        value: None,
        why: Some(format!(
            "{upstream} is planned with it in group `{group}`, whose apply computes {}",
            input.output
        )),
        sensitive: false,
    }
}

/// A group's plan call, ready to run.
pub(super) struct GroupCall {
    group: Group,
    stage: StageName,
    /// Each member, its files under the group's files directory in a
    /// directory named as the member.
    members: Vec<MemberOutcome>,
    pub(super) job: Job,
}

/// A group call's job name: `:` is in no member's name, so it is no
/// member's job.
fn call_name(what: &str, group: &str, stage: &str) -> JobName {
    JobName::new(what, &format!("group:{group}@{stage}"))
}

impl Workbench {
    /// The call that plans `members` of `group` in `stage` (their outcomes
    /// taken from `waiting`, inputs resolved), or `None` when it cannot be
    /// made: then each member that was waiting fails with why.
    pub(super) fn prepare_group(
        &mut self,
        group: &Group,
        stage: &str,
        members: &[MemberId],
        waiting: &mut HashMap<MemberId, MemberOutcome>,
    ) -> Option<GroupCall> {
        let mut outcomes = Vec::new();
        let mut missing = None;
        for member in members {
            self.forget_files(member);
            match waiting.remove(member.as_str()) {
                Some(outcome) => outcomes.push(outcome),
                None => missing = missing.or(Some(member)),
            }
        }
        let why = match missing {
            Some(member) => Err(format!(
                "{member} is blocked, so the group cannot plan its members together"
            )),
            None => self.group_files(group, stage, CommandKind::Plan, &outcomes),
        };
        match why {
            Ok(job) => Some(GroupCall {
                group: group.clone(),
                stage: StageName::new(stage),
                members: outcomes,
                job,
            }),
            Err(why) => {
                for mut outcome in outcomes {
                    outcome.status = MemberStatus::PlanFailed;
                    outcome.error = Some(format!("group `{}` was not planned: {why}", group.name));
                    self.outcomes.insert(outcome.member.clone(), outcome);
                }
                None
            }
        }
    }

    /// The group's call (`kind`: plan or apply) as a job: its members file,
    /// and each member's own files in a directory named as the member.
    fn group_files(
        &self,
        group: &Group,
        stage: &str,
        kind: CommandKind,
        outcomes: &[MemberOutcome],
    ) -> Result<Job, String> {
        let what = kind.as_str();
        let template = match kind {
            CommandKind::Plan => Some(&group.plan),
            _ => group.apply.as_ref(),
        };
        let template = template.ok_or_else(|| {
            format!(
                "group `{}` has no {what} command; set `{what}` on its [[group]] entry",
                group.name
            )
        })?;
        let name = call_name(what, &group.name, stage);
        let layout = self.executor.layout(&name);
        let root = layout.root.clone();
        let mut files = Files::default();
        let mut listed = Vec::new();
        for outcome in outcomes {
            let component = self
                .config
                .component(&outcome.component)
                .ok_or_else(|| format!("{} is not a component", outcome.component))?;
            let dir = component.dir_in(stage);
            let path = resolve_dir((&root, &self.files_root()), component, &dir)?;
            let mut write = |file: &str, bytes: Vec<u8>| {
                files.insert(format!("{}/{file}", outcome.member), bytes);
            };
            let carried = self
                .carried
                .get(outcome.member.as_str())
                .cloned()
                .unwrap_or_default();
            write(
                CARRY_FILE,
                serde_json::to_vec_pretty(&carried).expect("a JSON object serialises"),
            );
            let inputs =
                json!({"known": outcome.known_inputs(), "unknown": outcome.unknown_to_the_plan()});
            write(
                INPUTS_FILE,
                serde_json::to_vec_pretty(&inputs).expect("inputs serialise"),
            );
            if kind == CommandKind::Apply {
                write(PLAN_FILE, self.kept_plan(&outcome.member)?);
            }
            let own = layout.files.join(outcome.member.as_str());
            let file = |name: &str| own.join(name).display().to_string();
            let mut entry = json!({
                "member": outcome.member,
                "component": outcome.component,
                "stage": stage,
                "dir": dir,
                "path": path.display().to_string(),
                "planFile": file(PLAN_FILE),
                "inputsFile": file(INPUTS_FILE),
                "carryFile": file(CARRY_FILE),
            });
            if kind == CommandKind::Apply {
                entry["outputsFile"] = json!(file(OUTPUTS_FILE));
            }
            listed.push(entry);
        }
        let document = json!({"group": group.name, "stage": stage, "members": listed});
        files.insert(
            MEMBERS_FILE,
            serde_json::to_vec_pretty(&document).expect("JSON serialises"),
        );
        let members_file = layout.files.join(MEMBERS_FILE).display().to_string();
        let root_text = root.display().to_string();
        let argv: Vec<String> = template
            .iter()
            .map(|arg| {
                arg.replace("{members_file}", &members_file)
                    .replace("{group}", &group.name)
                    .replace("{stage}", stage)
                    .replace("{root}", &root_text)
            })
            .collect();
        let env = vec![
            ("WAVEGATE_GROUP".to_owned(), group.name.clone()),
            ("WAVEGATE_STAGE".to_owned(), stage.to_owned()),
            ("WAVEGATE_MEMBERS_FILE".to_owned(), members_file),
        ];
        let label = format!("[{what}] group {}@{stage}", group.name);
        // One call runs with one profile: its first member's.
        let first = outcomes.first().map(|o| o.component.as_str());
        let at = Where {
            stage: Some(stage),
            component: first,
        };
        let timeout = self.bounded(group.timeout, |base| base.of_group(&group.name));
        let job = self.job((kind, at), (name, label), (argv, root, env), files, timeout)?;
        // Its first member named the profile; the call is of them all.
        Ok(Job {
            member: None,
            ..job
        })
    }

    /// What a group's plan call came to: every member planned, each plan
    /// binding the group's digest (and a member's reads of its mates known
    /// where the mate's plan knows them); or every member failed with the
    /// group's error.
    pub(super) fn settle_group(&mut self, call: GroupCall, result: Result<Finished, SpawnError>) {
        let GroupCall {
            group,
            stage,
            members,
            job,
        } = call;
        let ran_on = match &result {
            Ok(finished) => finished.ran_on.clone(),
            Err(e) => e.ran_on(),
        };
        let (output, left, mut error) = match result {
            Err(e) => (String::new(), Files::default(), Some(e.to_string())),
            Ok(Finished { outcome: run, .. }) if !run.succeeded() => {
                let error = run.failure("the group's plan command");
                (run.output, Files::default(), Some(error))
            }
            Ok(Finished {
                outcome: run,
                files: Err(why),
                ..
            }) => (
                run.output,
                Files::default(),
                Some(format!("the group's plan command: {why}")),
            ),
            Ok(Finished {
                outcome: run,
                files: Ok(left),
                ..
            }) => (run.output, left, None),
        };
        let written = self.executor.layout(&job.name).files;
        let mut plans = Vec::new();
        if error.is_none() {
            for outcome in &members {
                let own = left.under(outcome.member.as_str());
                let read = read_plan_file(
                    &outcome.member,
                    &own,
                    &written.join(outcome.member.as_str()),
                )
                .map_err(|e| format!("the plan of {}: {e}", outcome.member))
                .and_then(|plan| {
                    self.keep_files(&outcome.member, &own)?;
                    self.judged(plan)
                });
                match read {
                    Ok(plan) => plans.push(plan),
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
        }
        if let Some(error) = error {
            tracing::warn!(target: "wavegate::plan", "group {}@{stage} failed to plan: {error}", group.name);
            for mut outcome in members {
                outcome.status = MemberStatus::PlanFailed;
                outcome.error = Some(format!("group `{}` failed to plan: {error}", group.name));
                outcome.output = output.clone();
                outcome.ran_on = ran_on.clone();
                self.outcomes.insert(outcome.member.clone(), outcome);
            }
            return;
        }
        let binding = binding_of(&group.name, &plans, self.digest_over);
        for plan in &mut plans {
            plan.group = Some(binding.clone());
            plan.plan_digest = plan.compute_digest();
        }
        let by_member: HashMap<MemberId, &MemberPlan> =
            plans.iter().map(|p| (p.member.clone(), p)).collect();
        let mut settled = Vec::new();
        for mut outcome in members {
            for input in outcome.inputs.values_mut() {
                if input.source != InputSource::Group {
                    continue;
                }
                let output = input
                    .reference
                    .split_once('.')
                    .map_or("", |(_, output)| output);
                let Some(mate) = by_member.get(input.upstream.as_str()) else {
                    continue;
                };
                if let Some(value) = mate.outputs.fully_known(output) {
                    input.value = Some(value.clone());
                    input.sensitive = mate.outputs.sensitive.iter().any(|s| s == output);
                    input.why = None;
                }
            }
            outcome.plan = by_member.get(&outcome.member).map(|p| (*p).clone());
            let quiet = self
                .config
                .component(&outcome.component)
                .map_or(&[][..], |c| &c.quiet[..]);
            outcome.output = crate::config::quiet::quieted(&output, quiet);
            outcome.ran_on = ran_on.clone();
            settled.push(outcome);
        }
        for outcome in settled {
            self.outcomes.insert(outcome.member.clone(), outcome);
        }
    }

    /// The longest a group's apply call may live.
    pub(crate) fn group_lifetime(&self, component: &str) -> Option<std::time::Duration> {
        let group = self.config.groups.of(component)?;
        Some(group.timeout + self.options.sandbox.deadline_grace())
    }

    /// Applies `members` (mates of one group and stage, each planned here)
    /// with the group's apply call; `started` hears its process. What
    /// became of each member, in `members`' order.
    pub(crate) async fn apply_group(
        &self,
        members: &[MemberId],
        started: Option<tokio::sync::mpsc::UnboundedSender<ProcessId>>,
    ) -> Vec<(MemberId, ApplyRun)> {
        let failed_on = |why: String, ran_on: Option<String>| {
            members
                .iter()
                .map(|m| {
                    let run = ApplyRun {
                        outcome: ApplyOutcome::Failed(why.clone()),
                        output: String::new(),
                        carry: None,
                        ran_on: ran_on.clone(),
                    };
                    (m.clone(), run)
                })
                .collect()
        };
        let failed_all = |why: String| failed_on(why, None);
        let Some(first) = members.first().cloned() else {
            return failed_all("a group apply of no members".into());
        };
        let stage = first.stage().to_string();
        let Some(group) = self.config.groups.of(first.component()).cloned() else {
            return failed_all(format!(
                "{} is in no group of the merge commit's config",
                first
            ));
        };
        let mut outcomes = Vec::new();
        for member in members {
            match self.outcomes.get(member.as_str()) {
                Some(outcome) => outcomes.push(outcome.clone()),
                None => return failed_all(format!("{member} was not planned here")),
            }
        }
        let job = match self.group_files(&group, &stage, CommandKind::Apply, &outcomes) {
            Ok(job) => job,
            Err(why) => return failed_all(why),
        };
        let Finished {
            outcome: run,
            files,
            ran_on,
        } = match self
            .executor
            .run(&job, Control { started, tap: None })
            .await
        {
            Ok(finished) => finished,
            Err(e) => return failed_on(e.to_string(), e.ran_on()),
        };
        let left = match files {
            Ok(left) => left,
            Err(why) if run.succeeded() => {
                return failed_on(format!("the group's apply command: {why}"), ran_on)
            }
            Err(_) => Files::default(),
        };
        let error = (!run.succeeded()).then(|| run.failure("the group's apply command"));
        members
            .iter()
            .map(|member| {
                let own = left.under(member.as_str());
                let outcome = read_group_outcome(&own, &group.name, error.as_deref());
                let run = ApplyRun {
                    outcome,
                    output: run.output.clone(),
                    carry: read_carry(&own),
                    ran_on: ran_on.clone(),
                };
                (member.clone(), run)
            })
            .collect()
    }
}

/// The group binding each of `plans` gets: the group's members and digest
/// over their own plans. Under `digest_over = "changing"` a member whose
/// plan changes nothing is left out of both, as the set digests leave it
/// out: its moving does not move its mates' digests.
fn binding_of(name: &str, plans: &[MemberPlan], over: DigestOver) -> GroupBinding {
    let own: Vec<(MemberId, Digest)> = plans
        .iter()
        .filter(|p| over.is_all() || !p.is_empty())
        .map(|p| (p.member.clone(), p.plan_digest.clone()))
        .collect();
    GroupBinding {
        name: name.to_owned(),
        members: own.iter().map(|(m, _)| m.clone()).collect(),
        digest: GroupBinding::digest_of(name, &own),
    }
}

/// What a group's apply call wrote for one member (`failed`: why the call
/// as a whole failed, when it did). Its outputs: applied, whatever the
/// call's exit (it got that far). `{"outcome": "not-started"}`: the call
/// never reached it. `{"outcome": "failed"}`, or nothing written after the
/// call failed: failed.
fn read_group_outcome(files: &Files, group: &str, failed: Option<&str>) -> ApplyOutcome {
    let map = super::outputs_object(files).ok();
    let said = |key: &str| {
        map.as_ref()
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    match said("outcome").as_deref() {
        Some("not-started") => ApplyOutcome::NotReached(said("reason").unwrap_or_else(|| {
            format!(
                "group `{group}`'s apply did not reach it{}",
                failed.map(|_| " before it failed").unwrap_or_default()
            )
        })),
        Some("failed") => ApplyOutcome::Failed(
            said("error")
                .or_else(|| failed.map(str::to_owned))
                .unwrap_or_else(|| format!("group `{group}`'s apply says it failed")),
        ),
        Some(other @ ("replan" | "held" | "stood-down")) => ApplyOutcome::Failed(format!(
            "group `{group}`'s apply wrote outcome `{other}`; a group's apply says of each member its outputs (applied), `failed` or `not-started`"
        )),
        _ if map.is_none() && failed.is_some() => {
            ApplyOutcome::Failed(failed.unwrap_or_default().to_owned())
        }
        _ => super::read_apply_outcome(files),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(member: &str, text: &str) -> MemberPlan {
        MemberPlan::parse(&member.into(), text.as_bytes()).unwrap()
    }

    #[test]
    fn under_digest_over_changing_a_no_op_mate_is_left_out_of_the_groups_digest() {
        let app = plan(
            "app@dev",
            r#"{"entries": [{"address": "a.b", "action": "create", "after": {}}]}"#,
        );
        let idle = plan("vpc@dev", r#"{"entries": [], "empty": true}"#);
        let drifted = plan(
            "vpc@dev",
            r#"{"entries": [{"address": "v.c", "action": "no-op", "after": {"arn": "x"}}], "empty": true}"#,
        );
        let all = binding_of("stack", &[app.clone(), idle.clone()], DigestOver::All);
        assert_eq!(all.members, ["app@dev", "vpc@dev"]);
        assert_ne!(
            all.digest,
            binding_of("stack", &[app.clone(), drifted.clone()], DigestOver::All).digest,
            "every mate is bound"
        );
        let changing = binding_of("stack", &[app.clone(), idle], DigestOver::Changing);
        assert_eq!(changing.members, ["app@dev"]);
        assert_eq!(
            changing,
            binding_of("stack", &[app, drifted], DigestOver::Changing),
            "a no-op mate moving moves nothing"
        );
    }
}
