//! The apply run's section of the report: stage, wave and state of every
//! member, what the run waits for with the line to copy, the rounds and
//! their coverage; and the check's title. Edited in place as the run moves.

use crate::apply::branches::NotApplied;
use crate::apply::hooks::HookState;
use crate::apply::run::News;
use crate::apply::{AttemptRecord, MemberState, RunStatus, Wait};
use crate::config::CONFIG_FILE;
use crate::model::untrusted::{cell_message, code, fenced, message};
use crate::model::{CommitSha, Digest, GateId, MemberId};
use crate::plan::changeset::ChangeSet;
use crate::plan::tail::OutputTail;

/// Where the run stands, as the report shows it.
pub(crate) struct RunView<'a> {
    pub(crate) merge_sha: &'a str,
    pub(crate) status: RunStatus,
    pub(crate) record: &'a AttemptRecord,
}

/// The check's title.
pub(crate) fn title(view: &RunView<'_>) -> String {
    let count = |f: fn(&MemberState) -> bool| view.record.members.values().filter(|s| f(s)).count();
    match (view.status, &view.record.wait) {
        (RunStatus::Applied, _) => format!("Applied {} members", count(MemberState::is_applied)),
        (RunStatus::Ended, _) => format!(
            "Ended: {} applied, {} stood down",
            count(MemberState::is_applied),
            count(|s| matches!(s, MemberState::StoodDown { .. }))
        ),
        (RunStatus::Failed, wait) => format!(
            "Apply failed: {} applied, {} failed{}; /retry resumes{}",
            count(MemberState::is_applied),
            count(|s| matches!(s, MemberState::Failed { .. })),
            crate::apply::hooks::failed_after_apply(view.record)
                .map(|h| format!(", the after.apply hook `{}` failed", h.call.name))
                .unwrap_or_default(),
            wait.as_ref()
                .map(|w| format!(" (also waiting: {})", waiting_for(w)))
                .unwrap_or_default()
        ),
        (_, Some(wait)) => format!("Waiting: {}", waiting_for(wait)),
        (_, None) => match &view.record.at {
            Some((stage, wave)) => format!(
                "Applying {}…",
                crate::model::WaveName {
                    stage: stage.as_str(),
                    number: *wave
                }
            ),
            None => "Applying…".into(),
        },
    }
}

/// A stage gate as the record keeps it (`prod`, `prod wave 2`), titled:
/// "Stage **prod**", "Stage **prod**, wave 2".
fn titled(key: &str) -> String {
    match key.split_once(" wave ") {
        Some((stage, wave)) => format!("Stage **{stage}**, wave {wave}"),
        None => format!("Stage **{key}**"),
    }
}

pub(crate) fn waiting_for(wait: &Wait) -> String {
    match wait {
        Wait::PrApproval { .. } => "an approval of the merged plan".into(),
        Wait::Stage { gate, .. } => gate.approve_words(),
        Wait::Round { round, .. } => format!("an approval of round {round}"),
        Wait::Override { member, also, .. } if also.is_empty() => format!("/override {member}"),
        Wait::Override { .. } => format!(
            "/override of {}",
            wait.denials()
                .iter()
                .map(|d| d.member.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Wait::Lock { member, pr } => format!("{member}, which pull request {pr} is applying"),
        Wait::EarlierAttempt { member, until } => format!(
            "an earlier apply of {member} to end (until {} at the latest)",
            until
        ),
        Wait::Holder { member, holder, .. } => format!(
            "{}, which holds {member}",
            crate::model::untrusted::clean(holder, crate::model::untrusted::Lines::Fold)
        ),
        Wait::Hook { gate, .. } => format!("an approval at {gate}"),
    }
}

/// The comment that ends a wait a person ends (the first, when there are
/// several: one `/override` per denied plan).
pub(crate) fn line_to_copy(wait: &Wait) -> Option<String> {
    match wait {
        Wait::PrApproval { digest, .. }
        | Wait::Round { digest, .. }
        | Wait::Hook { digest, .. } => Some(format!("/approve {digest}")),
        Wait::Stage { gate, digest, .. } => Some(format!("{} {digest}", gate.approve_words())),
        Wait::Override { member, .. } => Some(format!("/override {member} <reason>")),
        Wait::Lock { .. } | Wait::Holder { .. } | Wait::EarlierAttempt { .. } => None,
    }
}

/// What a person can do about the wait, with the line to copy.
pub(crate) fn wait_help(wait: &Wait, record: &AttemptRecord) -> String {
    let line = line_to_copy(wait).unwrap_or_default();
    let priced_round = |round: u32| {
        record
            .rounds
            .iter()
            .find(|r| r.number == round)
            .filter(|r| {
                r.reasons
                    .iter()
                    .any(|why| crate::plan::cost::is_cost_reason(why))
            })
    };
    match wait {
        Wait::Round { round, digest, .. } if priced_round(*round).is_some() => {
            let reasons = &priced_round(*round).expect("just found").reasons;
            format!(
                "What the stage costs moved since it was approved, so it is not covered (round {round}, digest `{digest}`): {}. Nothing of the stage was applied. Approving this digest approves its plans at that cost and resumes the run:\n\n```\n{line}\n```\n",
                codes(reasons, "; ")
            )
        }
        Wait::PrApproval { .. } => format!(
            "No approval of the merged plan stands (none was given, or it was revoked): nothing more is applied until it is approved:\n\n```\n{line}\n```\n"
        ),
        Wait::Stage {
            stage,
            gate: gate_id,
            digest,
        } => {
            let gate = record.stage_gate(gate_id);
            let compared = match gate.and_then(|g| g.unlike_reviewed.as_ref()) {
                Some(moved) if moved.is_empty() => {
                    " Each is covered by this pull request's approval: the plan reviewed, or one whose only differences are values it could not know then.".to_owned()
                }
                Some(moved) => format!(
                    " Unlike what was reviewed in this pull request:\n\n{}",
                    moved
                        .iter()
                        .map(|why| format!("- {}", message(why)))
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
                None => String::new(),
            };
            let who = gate
                .and_then(|g| g.approvers.as_ref())
                .map(|a| {
                    format!(
                        "\n**Who may approve:** {}.\n",
                        super::markdown::approvers_text(a)
                    )
                })
                .unwrap_or_default();
            let waits = match gate_id {
                GateId::Wave(_, _, wave) => format!(
                    "Wave {wave} of stage **{stage}** (approved wave by wave) waits for its own approval of its plans on the merge commit"
                ),
                _ => format!(
                    "Stage **{stage}** waits for its own approval of its plans on the merge commit"
                ),
            };
            format!("{waits} (set digest `{digest}`).{compared}\n{who}\n```\n{line}\n```\n")
        }
        Wait::Round { round, digest, .. } => {
            let listed = record.rounds.iter().find(|r| r.number == *round);
            let stage = listed.map_or_else(String::new, |r| format!(" of stage **{}**", r.stage));
            let reasons: String = listed
                .map(|r| r.reasons.iter().map(|why| format!("- {}\n", message(why))).collect())
                .unwrap_or_default();
            format!(
                "These plans{stage} moved since they were approved, so they are not covered (round {round}, digest `{digest}`):\n\n{reasons}\nThey wait, and so does what depends on them; the rest goes on. Approving this digest resumes the run:\n\n```\n{line}\n```\n"
            )
        }
        Wait::Override {
            member,
            digest,
            rules,
            also,
            ..
        } if also.is_empty() && crate::plan::cost::is_cost_denial(member, rules) => {
            let stage = member.stage();
            format!(
                "The policy denied the monthly cost of stage **{stage}** (**{member}**, `{digest}`; {}): it rises by more than `max_monthly_increase`. Nothing of that stage was applied. Someone in `policy.overriders` may let exactly this cost through:\n\n```\n{line}\n```\n",
                codes(rules, ", ")
            )
        }
        Wait::Override { .. } => {
            let denials = wait.denials();
            let plans: Vec<String> = denials
                .iter()
                .map(|d| format!("**{}** (`{}`; {})", d.member, d.digest, codes(&d.rules, ", ")))
                .collect();
            let lines: Vec<String> = denials
                .iter()
                .map(|d| format!("/override {} <reason>", d.member))
                .collect();
            format!(
                "The policy denied the plan{} of {}. Nothing of that wave was applied. Someone in `policy.overriders` may let {} through, each for exactly that plan:\n\n```\n{}\n```\n",
                if denials.len() == 1 { "" } else { "s" },
                plans.join(", "),
                if denials.len() == 1 { "it" } else { "them" },
                lines.join("\n")
            )
        }
        Wait::Lock { member, pr } => format!(
            "Queued: pull request {pr} is applying **{member}**. This run goes on by itself once it lets go, planning again first.\n"
        ),
        Wait::Holder { member, holder, until } => format!(
            "**{member}** is held by {}: its apply found the target in use and changed nothing. wavegate tries again by itself (next at {}, then less often while it stays held); nothing needs doing here.\n",
            message(holder),
            until
        ),
        Wait::EarlierAttempt { member, until } => format!(
            "**{member}** was applying when the server running it stopped, and that apply may still be running elsewhere. wavegate plans it again only once it cannot be (by {} at the latest, when its sandbox ends it), so nothing applies twice. The run goes on by itself.\n",
            until
        ),
        Wait::Hook {
            stage,
            moment,
            hook,
            gate,
            digest,
            hold: true,
            ..
        } => format!(
            "The {moment} hook `{hook}` holds stage **{stage}** on `{gate}` until digest `{digest}` is approved there; nothing more of the stage is planned or applied until then. Approving runs the hook again, told of the approval:\n\n```\n{line}\n```\n"
        ),
        Wait::Hook {
            stage,
            moment,
            hook,
            digest,
            ..
        } => format!(
            "The {moment} hook `{hook}` failed (the run's section of the report shows what it printed), and its `on_failure = \"approve\"` lets a person let stage **{stage}** go on anyway. Approving binds this failure on these plans (digest `{digest}`):\n\n```\n{line}\n```\n"
        ),
    }
}

/// The one reply of a merge that starts no apply run.
pub(crate) fn not_applied(merge: &CommitSha, why: &NotApplied) -> String {
    let listed = |branches: &[String]| {
        branches
            .iter()
            .map(|b| format!("`{b}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match why {
        NotApplied::NotListed {
            base,
            default_branch,
            listed: None,
        } => format!(
            "Merged into `{base}` as {}: nothing is applied. wavegate applies only merges into `{default_branch}`, the default branch ({CONFIG_FILE} there has no `branches` naming others). To apply merges into `{base}` too, add `branches = [\"{default_branch}\", \"{base}\"]` to {CONFIG_FILE} on `{default_branch}`.",
            merge.short(),
        ),
        NotApplied::NotListed {
            base,
            default_branch,
            listed: Some(branches),
        } => format!(
            "Merged into `{base}` as {}: nothing is applied. wavegate applies only merges into {} (`branches` in {CONFIG_FILE} on `{default_branch}`, the default branch{}). To apply merges into `{base}`, add it to `branches` there.",
            merge.short(),
            listed(branches),
            if base == default_branch {
                ", as it stood before this merge: a pull request's own change to `branches` counts from the next merge"
            } else {
                ""
            },
        ),
        NotApplied::Unreadable {
            base,
            default_branch,
            why,
        } => format!(
            "Merged into `{base}` as {}: nothing is applied. {CONFIG_FILE} on `{default_branch}`, the default branch, says where merges apply, and it does not read: {why}\n\nFix it on `{default_branch}`; this merge is not applied then: apply it by hand, or open a pull request that changes it again.",
            merge.short(),
        ),
    }
}

/// What the pull request is told about its run (`crate::apply::run`
/// decides when): `merge` is the merge commit, `base` the target before it.
pub(crate) fn news(
    news: &News,
    merge: &CommitSha,
    base: &CommitSha,
    record: &AttemptRecord,
) -> String {
    let merge = merge.short();
    let help = |wait: &Wait| {
        let lapsed = lapsed_lines(record) + &wait_expiry(record);
        match lapsed.is_empty() {
            true => wait_help(wait, record),
            false => format!("{}\n{lapsed}", wait_help(wait, record)),
        }
    };
    match news {
        News::Failed { meanwhile } => {
            let stopped: Vec<String> = record
                .members
                .iter()
                .filter(|(_, s)| matches!(s, MemberState::Failed { .. }))
                .map(|(m, s)| format!("`{m}` {}", message(&s.label())))
                .collect();
            let hook = crate::apply::hooks::failed_after_apply(record)
                .map(|h| format!("{} failed after its members applied", h.call.label()));
            let stopped = match (stopped.is_empty(), hook) {
                (true, Some(hook)) => hook,
                (true, None) => "a member could not be planned".to_owned(),
                (false, Some(hook)) => format!("{}; {hook}", stopped.join("; ")),
                (false, None) => stopped.join("; "),
            };
            let mut said = format!(
                "The apply on {merge} failed: {stopped}. Members that applied stay applied; `/retry` plans what failed again and applies what the approvals cover."
            );
            if let Some(wait) = meanwhile {
                said.push_str(&format!("\n\nMeanwhile, elsewhere in the run: {}", help(wait)));
            }
            let details = failure_details(record);
            if !details.is_empty() {
                said = format!("{}\n\n{}", said.trim_end(), details.trim_end());
            }
            said
        }
        News::Applied => {
            let untouched: Vec<String> = record
                .members
                .iter()
                .filter(|(_, state)| **state == MemberState::Unaffected)
                .map(|(member, _)| format!("`{member}`"))
                .collect();
            if untouched.is_empty() {
                return format!(
                    "Applied on {merge}: every member of the approved change is deployed."
                );
            }
            format!(
                "Applied on {merge}: every member the merge changes is deployed. Not applied: {}, approved when planned but unchanged by the merge against {} (the target before it), so there was nothing to apply.",
                untouched.join(", "),
                base.short()
            )
        }
        News::Ended => {
            let stood: Vec<String> = record
                .members
                .iter()
                .filter_map(|(m, s)| match s {
                    MemberState::StoodDown { reason } => {
                        Some(format!("`{m}` stood down ({})", message(reason)))
                    }
                    _ => None,
                })
                .collect();
            format!(
                "The apply on {merge} ended: {}, so it and what depends on it were not applied. Everything else the merge changes is deployed.",
                stood.join("; ")
            )
        }
        News::Waits(wait) => help(wait),
        News::CannotGoOn(why_and_fix) => {
            format!("The apply on {merge} cannot go on: {}.", message(why_and_fix))
        }
        News::GaveUp { attempts, error } => format!(
            "The apply on {merge} stopped: its job failed {attempts} times, the last with:\n\n{}\n\nWhat applied stays applied. This is usually the forge or the network; `/retry` resumes the run from its record.",
            fenced(error, "text")
        ),
    }
}

/// The approvals the run found no longer counting, one line each, and
/// what to do; empty when there are none.
pub(crate) fn lapsed_lines(record: &AttemptRecord) -> String {
    if record.lapsed.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    for lapsed in &record.lapsed {
        out.push_str(&format!(
            "- @{}'s approval at `{}` no longer counts: {}\n",
            lapsed.by,
            lapsed.gate,
            message(&lapsed.why)
        ));
    }
    out.push_str("\nAn approval counts only while its approver may still approve; someone who may must approve again.\n\n");
    out
}

/// When the stage wait expires, and what then; empty when it does not.
pub(crate) fn wait_expiry(record: &AttemptRecord) -> String {
    let Some(Wait::Stage { stage, gate, .. }) = &record.wait else {
        return String::new();
    };
    match record.stage_gate(gate).and_then(|g| g.expires_at) {
        Some(at) => format!(
            "This wait expires: {}. Unapproved by then, stage {stage} fails, and `/retry` opens a fresh gate.\n\n",
            at
        ),
        None => String::new(),
    }
}

/// The report's apply section.
#[cfg(test)]
pub(crate) fn render(view: &RunView<'_>) -> String {
    render_within(view, crate::report::COMMENT_LIMIT)
}

/// The run's section in at most about `room` characters: what the applies
/// printed gets what the rest leaves (at most [`PRINTED_BUDGET`]).
pub(crate) fn render_within(view: &RunView<'_>, room: usize) -> String {
    let short = &view.merge_sha[..view.merge_sha.len().min(12)];
    let mut out = format!(
        "## Apply on merge commit `{short}`: {}\n\n",
        view.status.as_str()
    );
    if !view.record.pr_approved_by.is_empty() {
        out.push_str(&format!(
            "Approved by {}.\n\n",
            view.record
                .pr_approved_by
                .iter()
                .map(|l| format!("@{l}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(wait) = &view.record.wait {
        if view.status == RunStatus::Failed {
            out.push_str(&failed_above_wait(view.record));
        }
        out.push_str(&wait_help(wait, view.record));
        out.push('\n');
    }
    out.push_str(&lapsed_lines(view.record));
    let mut rows = Vec::new();
    for (stage, waves) in &view.record.layout {
        for (i, wave) in waves.iter().enumerate() {
            for member in wave {
                rows.push((stage.as_str(), i + 1, member.as_str()));
            }
        }
    }
    let placed: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.2).collect();
    if !rows.is_empty() || !view.record.members.is_empty() {
        out.push_str("| stage | wave | member | state |\n| --- | --- | --- | --- |\n");
        for (stage, wave, member) in &rows {
            let state = view.record.state(member).label();
            out.push_str(&format!(
                "| {stage} | {wave} | `{member}` | {}{} |\n",
                cell(&state),
                run_link(view.record, member)
            ));
        }
        for (member, state) in &view.record.members {
            if !placed.contains(member.as_str()) {
                out.push_str(&format!("| | | `{member}` | {} |\n", cell(&state.label())));
            }
        }
        out.push('\n');
    }
    out.push_str(&failure_details(view.record));
    for key in &view.record.gates_skipped {
        out.push_str(&format!(
            "- {}: its gate was skipped, because its plans on the merge commit change nothing\n",
            titled(key)
        ));
    }
    for (key, gate) in &view.record.stages {
        let who = if let Some(m) = gate
            .mismatch
            .as_ref()
            .filter(|_| gate.approved_by.is_empty())
        {
            format!(
                "waiting; @{} approved `{}`, an earlier set of this stage, which no longer counts",
                m.by, m.digest
            )
        } else if gate.expired {
            format!(
                "expired: {}, with no approval; `/retry` opens a fresh gate",
                gate.expires_at.map(|at| at.to_string()).unwrap_or_default()
            )
        } else if gate.approved_by.is_empty() {
            match gate.expires_at {
                Some(at) => format!("waiting (expires: {})", at),
                None => "waiting".to_owned(),
            }
        } else {
            format!("approved by {}", gate.approved_by.join(", "))
        };
        out.push_str(&format!(
            "- {} gate `{}`: set `{}`, {who}\n",
            titled(key),
            gate.gate,
            gate.change_set.digest
        ));
        out.push_str(&set_lines(&gate.change_set));
    }
    for round in &view.record.rounds {
        let how = if round.covered() {
            let filled = if round.filled.is_empty() {
                String::new()
            } else {
                format!(" (filled in {})", codes(&round.filled, ", "))
            };
            format!("covered by the approval: only what was unknown moved{filled}")
        } else if let Some(m) = round
            .mismatch
            .as_ref()
            .filter(|_| round.approved_by.is_empty())
        {
            format!(
                "not covered, waiting: {}; @{} approved `{}`, an earlier set of this round, which no longer counts",
                codes(&round.reasons, "; "),
                m.by,
                m.digest
            )
        } else if round.approved_by.is_empty() {
            format!("not covered, waiting: {}", codes(&round.reasons, "; "))
        } else {
            format!(
                "not covered ({}), approved by {}",
                codes(&round.reasons, "; "),
                round.approved_by.join(", ")
            )
        };
        out.push_str(&format!(
            "- Round {} ({}, gate `{}`): digest `{}`, {how}\n",
            round.number, round.stage, round.gate, round.change_set.digest
        ));
        out.push_str(&set_lines(&round.change_set));
    }
    for (member, digest) in &view.record.overrides {
        out.push_str(&format!(
            "- `{member}`: the policy denial of `{digest}` was overridden\n"
        ));
    }
    out.push_str(&hook_lines(view.record));
    let left = room.saturating_sub(out.chars().count() + 200);
    let printed = printed_details(view.record, left.min(PRINTED_BUDGET));
    if !printed.is_empty() {
        if !out.ends_with("\n\n") {
            out.push('\n');
        }
        out.push_str(&printed);
    }
    out
}

/// A failed run that still waits elsewhere: what failed, and what waits
/// for it, before the wait (which is about the rest).
fn failed_above_wait(record: &AttemptRecord) -> String {
    let mut out = String::new();
    for (member, state) in &record.members {
        if !matches!(state, MemberState::Failed { .. }) {
            continue;
        }
        let blocked: Vec<String> = record
            .members
            .iter()
            .filter(|(_, s)| matches!(s, MemberState::Blocked { by } if by == member))
            .map(|(m, _)| format!("`{m}`"))
            .collect();
        let held = match blocked.len() {
            0 => String::new(),
            _ => format!("; blocked by it: {}", blocked.join(", ")),
        };
        out.push_str(&format!("- `{member}` {}{held}\n", cell(&state.label())));
    }
    if out.is_empty() {
        return out;
    }
    format!("{out}\n`/retry` plans what failed again. Meanwhile the rest of the run goes on:\n\n")
}

/// Each failed member's whole failure, the command's last output included,
/// in a collapsed block under the table (the table shows its first line).
fn failure_details(record: &AttemptRecord) -> String {
    let mut out = String::new();
    for (member, state) in &record.members {
        let MemberState::Failed { error } = state else {
            continue;
        };
        if error.trim_end().lines().nth(1).is_none() {
            continue;
        }
        out.push_str(&format!(
            "<details><summary>Why <code>{member}</code> failed</summary>\n\n{}\n\n</details>\n\n",
            fenced(error.trim_end(), "text")
        ));
    }
    out
}

/// The most characters of apply output one run section shows: the rest of
/// the comment (and the check, which carries the same text) needs room too.
const PRINTED_BUDGET: usize = 24_000;

/// Each hook call's latest outcome, in the order they ran.
fn hook_lines(record: &AttemptRecord) -> String {
    let mut out = String::new();
    for hook in &record.hooks {
        let call = &hook.call;
        let how = match &hook.state {
            HookState::Passed => "passed".to_owned(),
            HookState::Failed { why } => {
                format!(
                    "failed: {}",
                    message(why.lines().next().unwrap_or_default())
                )
            }
            HookState::Held {
                gate,
                digest,
                hold: true,
            } => format!("holds the stage on `{gate}` until `{digest}` is approved"),
            HookState::Held { gate, digest, .. } => {
                format!("failed; waits at `{gate}` for an approval of `{digest}`")
            }
            HookState::Approved { gate, by, .. } => {
                format!("approved at `{gate}` by {}", by.join(", "))
            }
        };
        let member = call
            .member
            .as_ref()
            .map(|m| format!(", for `{m}`"))
            .unwrap_or_default();
        out.push_str(&format!(
            "- Hook `{}` ({}, stage {}{member}): {how}\n",
            call.name, call.moment, call.stage
        ));
    }
    out
}

/// What each hook call and each member's latest apply printed, each
/// collapsed: the hooks in the order they ran, then the members in the
/// run's order.
fn printed_details(record: &AttemptRecord, budget: usize) -> String {
    let hooks = record.hooks.iter().filter_map(|h| {
        let member = h
            .call
            .member
            .as_ref()
            .map(|m| format!(" for <code>{m}</code>"))
            .unwrap_or_default();
        let title = format!(
            "What the {} hook <code>{}</code>{member} printed",
            h.call.moment, h.call.name
        );
        Some((title, h.printed.as_ref()?))
    });
    let mut seen = std::collections::BTreeSet::new();
    // Members whose applies printed the same (one group call applies
    // several): shown once, for all of them.
    let mut printed: Vec<(Vec<&str>, &OutputTail)> = Vec::new();
    for m in record
        .members_in_order()
        .into_iter()
        .chain(record.printed.keys().map(MemberId::as_str))
        .filter(|m| seen.insert(*m))
    {
        let Some(tail) = record.printed.get(m) else {
            continue;
        };
        match printed.iter_mut().find(|(_, t)| t.text == tail.text) {
            Some((names, _)) => names.push(m),
            None => printed.push((vec![m], tail)),
        }
    }
    let members = printed.into_iter().map(|(names, tail)| {
        let title = match names.as_slice() {
            [one] => format!("What <code>{one}</code>'s apply printed"),
            many => format!(
                "What the applies of {} printed, the same for each",
                many.iter()
                    .map(|m| format!("<code>{m}</code>"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        (title, tail)
    });
    let (mut out, mut used, mut left_out) = (String::new(), 0, 0);
    for (title, tail) in hooks.chain(members) {
        let block = super::markdown::printed_block(&title, tail);
        let size = block.chars().count() + 1;
        if used + size > budget {
            left_out += 1;
            continue;
        }
        used += size;
        out.push_str(&block);
        out.push('\n');
    }
    if left_out > 0 {
        out.push_str(&format!(
            "_✂️ What {left_out} more command{} printed is not shown: this comment has a size limit. The server's log has it all._\n\n",
            if left_out == 1 { "" } else { "s" }
        ));
    }
    out
}

fn set_lines(set: &ChangeSet) -> String {
    set.members
        .iter()
        .map(|m| {
            let c = m.counts();
            format!(
                "  - `{}`: `{}` ({} to create, {} to update, {} to replace, {} to delete)\n",
                m.member,
                m.plan_digest.as_ref().map_or("no plan", Digest::as_str),
                c.create,
                c.update,
                c.replace,
                c.delete
            )
        })
        .chain(set.costs.iter().map(|cost| {
            let figures = match &cost.error {
                Some(_) => "not priced".to_owned(),
                None => format!(
                    "{} {} a month ({} on before{})",
                    cost.total(),
                    message(&cost.currency),
                    cost.increase().signed(),
                    if cost.denied.is_empty() {
                        String::new()
                    } else {
                        format!("; denied: {}", codes(&cost.denied, ", "))
                    }
                ),
            };
            format!("  - `{}`: {figures}, `{}`\n", cost.member, cost.digest)
        }))
        .collect()
}

/// A table cell: the first line of `text`, at most 200 characters, inert
/// (a state's label can quote what a command or plan file said).
/// After a member's state, the CI run its latest apply ran in, when it
/// ran on the forge's CI.
fn run_link(record: &AttemptRecord, member: &str) -> String {
    record
        .ran_on
        .get(member)
        .filter(|url| super::markdown::is_plain_url(url))
        .map(|url| format!(" ([its run]({url}))"))
        .unwrap_or_default()
}

fn cell(text: &str) -> String {
    let first: String = text
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(200)
        .collect();
    cell_message(&first)
}

/// Each of `texts` as a code span, joined by `separator`.
fn codes(texts: &[String], separator: &str) -> String {
    texts
        .iter()
        .map(|t| code(t))
        .collect::<Vec<_>>()
        .join(separator)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tail::OutputTail;
    use serde_json::Map;

    #[test]
    fn what_the_pull_request_is_told_about_its_run() {
        let merge = CommitSha::parse(&"a".repeat(40)).unwrap();
        let base = CommitSha::parse(&"b".repeat(40)).unwrap();
        let mut record = AttemptRecord::default();
        record.set(
            &"app@dev".into(),
            MemberState::Failed {
                error: "the apply command exited with status 1; last output:\nError: creating bucket `logs`: AccessDenied".into(),
            },
        );
        record.set(&"dns@dev".into(), MemberState::Unaffected);
        let lock = Wait::Lock {
            member: "db@dev".into(),
            pr: crate::model::PrNumber(3),
        };
        let failed = News::Failed {
            meanwhile: Some(lock),
        };
        insta::assert_snapshot!(news(&failed, &merge, &base, &record), @r"
        The apply on aaaaaaaaaaaa failed: `app@dev` failed: the apply command exited with status 1. Members that applied stay applied; `/retry` plans what failed again and applies what the approvals cover.

        Meanwhile, elsewhere in the run: Queued: pull request #3 is applying **db@dev**. This run goes on by itself once it lets go, planning again first.

        <details><summary>Why <code>app@dev</code> failed</summary>

        ```text
        the apply command exited with status 1; last output:
        Error: creating bucket `logs`: AccessDenied
        ```

        </details>
        ");
        insta::assert_snapshot!(news(&News::Applied, &merge, &base, &record), @"Applied on aaaaaaaaaaaa: every member the merge changes is deployed. Not applied: `dns@dev`, approved when planned but unchanged by the merge against bbbbbbbbbbbb (the target before it), so there was nothing to apply.");
        let gave_up = News::GaveUp {
            attempts: 4,
            error: "the forge answered 502".into(),
        };
        insta::assert_snapshot!(news(&gave_up, &merge, &base, &record), @r"
        The apply on aaaaaaaaaaaa stopped: its job failed 4 times, the last with:

        ```text
        the forge answered 502
        ```

        What applied stays applied. This is usually the forge or the network; `/retry` resumes the run from its record.
        ");
    }

    fn record() -> AttemptRecord {
        let mut record = AttemptRecord {
            pr_approved_by: vec!["rev-bob".into()],
            ..Default::default()
        };
        record.set(
            &"app@dev".into(),
            MemberState::Applied {
                plan_digest: Digest::repeated('a'),
                outputs: Map::new(),
                note: None,
            },
        );
        record.set(
            &"app@prod".into(),
            MemberState::Waiting {
                reason: "stage prod waits for its approval".into(),
            },
        );
        record.wait = Some(Wait::Stage {
            stage: "prod".into(),
            gate: "pr-7-prod".parse().unwrap(),
            digest: Digest::repeated('b'),
        });
        record
    }

    #[test]
    fn a_stage_gate_says_who_may_approve_and_whether_its_plans_are_the_reviewed_ones() {
        let mut record = record();
        let gate = |unlike_reviewed: Vec<String>| crate::apply::StageGate {
            approvers: Some(crate::plan::preview::Approvers {
                approvers: vec!["team:platform".into()],
                required: 2,
                author_may: false,
                pusher_may: true,
                reviews_count: false,
                ttl: None,
            }),
            unlike_reviewed: Some(unlike_reviewed),
            ..crate::apply::StageGate::open_for_test(
                "pr-7-prod",
                crate::plan::changeset::ChangeSet::new(vec![]).unwrap(),
            )
        };
        record.stages.insert("prod".into(), gate(vec![]));
        let wait = record.wait.clone().unwrap();
        insta::assert_snapshot!(wait_help(&wait, &record), @"
        Stage **prod** waits for its own approval of its plans on the merge commit (set digest `sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb`). Each is covered by this pull request's approval: the plan reviewed, or one whose only differences are values it could not know then.

        **Who may approve:** `team:platform` · 2 approvals needed · not the author (whoever pushed the head may).

        ```
        /approve prod sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
        ```
        ");
        record.stages.insert(
            "prod".into(),
            gate(vec![
                "app@prod: address `aws_lb.app` changed action from create to update".into(),
            ]),
        );
        insta::assert_snapshot!(wait_help(&wait, &record), @"
        Stage **prod** waits for its own approval of its plans on the merge commit (set digest `sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb`). Unlike what was reviewed in this pull request:

        - app@prod: address `aws_lb.app` changed action from create to update

        **Who may approve:** `team:platform` · 2 approvals needed · not the author (whoever pushed the head may).

        ```
        /approve prod sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
        ```
        ");
    }

    #[test]
    fn a_run_waiting_at_a_stage_shows_every_member_and_the_line_to_copy() {
        let mut record = record();
        record.layout = vec![
            ("dev".into(), vec![vec!["app@dev".parse().unwrap()]]),
            (
                "prod".into(),
                vec![
                    vec!["app@prod".parse().unwrap()],
                    vec!["dns@prod".parse().unwrap()],
                ],
            ),
        ];
        let view = RunView {
            merge_sha: "0123456789abcdef0123",
            status: RunStatus::Waiting,
            record: &record,
        };
        insta::assert_snapshot!(render(&view), @"
        ## Apply on merge commit `0123456789ab`: waiting

        Approved by @rev-bob.

        Stage **prod** waits for its own approval of its plans on the merge commit (set digest `sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb`).

        ```
        /approve prod sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
        ```

        | stage | wave | member | state |
        | --- | --- | --- | --- |
        | dev | 1 | `app@dev` | applied |
        | prod | 1 | `app@prod` | waiting: stage prod waits for its approval |
        | prod | 2 | `dns@prod` | not started |
        ");
        assert_eq!(title(&view), "Waiting: /approve prod");
    }

    #[test]
    fn a_failed_run_says_how_many_failed_and_that_retry_resumes_and_still_shows_its_wait() {
        let mut record = record();
        let wait = record.wait.take();
        record.set(
            &"app@prod".into(),
            MemberState::Failed {
                error: "the apply command exited with 1\nmore".into(),
            },
        );
        let view = RunView {
            merge_sha: "0123456789abcdef0123",
            status: RunStatus::Failed,
            record: &record,
        };
        assert_eq!(
            title(&view),
            "Apply failed: 1 applied, 1 failed; /retry resumes"
        );
        let mut waiting = record.clone();
        waiting.wait = wait;
        let failed_and_waiting = RunView {
            record: &waiting,
            ..view
        };
        assert_eq!(
            title(&failed_and_waiting),
            "Apply failed: 1 applied, 1 failed; /retry resumes (also waiting: /approve prod)"
        );
        assert!(render(&failed_and_waiting).contains("/approve prod sha256:bb"));
        assert!(
            render(&view).contains("| | | `app@prod` | failed: the apply command exited with 1 |")
        );
        assert!(
            render(&view).contains("<details><summary>Why <code>app@prod</code> failed</summary>\n\n```text\nthe apply command exited with 1\nmore\n```\n\n</details>\n"),
            "{}",
            render(&view)
        );
    }

    #[test]
    fn what_each_apply_printed_is_shown_collapsed_in_the_runs_order() {
        let mut record = record();
        record.wait = None;
        record.layout = vec![(
            "dev".into(),
            vec![
                vec!["network@dev".parse().unwrap()],
                vec!["app@dev".parse().unwrap()],
            ],
        )];
        let tail = |text: &str| OutputTail::of(text).unwrap();
        record.printed.insert(
            "app@dev".into(),
            tail("Apply complete! Resources: 1 added, 1 changed, 0 destroyed."),
        );
        record.printed.insert(
            "network@dev".into(),
            tail(
                "Refreshing state...\nApply complete! Resources: 0 added, 1 changed, 0 destroyed.",
            ),
        );
        let section = printed_details(&record, PRINTED_BUDGET);
        insta::assert_snapshot!(section, @"
        <details><summary>What <code>network@dev</code>'s apply printed (all 2 lines)</summary>

        ```text
        Refreshing state...
        Apply complete! Resources: 0 added, 1 changed, 0 destroyed.
        ```

        </details>

        <details><summary>What <code>app@dev</code>'s apply printed (1 line)</summary>

        ```text
        Apply complete! Resources: 1 added, 1 changed, 0 destroyed.
        ```

        </details>
        ");
    }

    #[test]
    fn past_the_budget_the_rest_of_the_output_is_said_to_be_left_out() {
        let mut record = record();
        for i in 0..12 {
            let wide: String = (0..30)
                .map(|line| format!("{i:02}{line:03} {}\n", "x".repeat(120)))
                .collect();
            record.printed.insert(
                MemberId::of(&format!("m{i:02}"), "dev"),
                OutputTail::of(&wide).unwrap(),
            );
        }
        let section = printed_details(&record, PRINTED_BUDGET);
        assert!(
            section.chars().count() < PRINTED_BUDGET + 2_000,
            "{}",
            section.len()
        );
        assert_eq!(
            section.matches("<details>").count(),
            6,
            "3,7xx characters each"
        );
        assert!(section.ends_with("_✂️ What 6 more commands printed is not shown: this comment has a size limit. The server's log has it all._\n\n"), "{section}");
    }
}
