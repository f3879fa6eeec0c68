//! The PR comment: waves, every member with its counts and short digest,
//! every component not running with its reason, indeterminate files, the full
//! digest with the `/approve` line to copy, and per-member plan summaries.
//!
//! It always fits a forge comment: summaries are shortened (with a note
//! saying so) before anything else, and the digest is never cut.

use super::{counts_text, reason_text, COMMENT_LIMIT, REPORT_MARKER};
use crate::plan::canonical::short_digest;
use crate::plan::changeset::MemberStatus;
use crate::plan::engine::{InputSource, MemberOutcome, PlannedChange};
use std::fmt::Write as _;

/// Renders the report within `COMMENT_LIMIT` characters.
pub fn render(change: &PlannedChange) -> String {
    render_within(change, COMMENT_LIMIT)
}

/// Renders within `limit` characters; shortening is visible, never silent.
pub fn render_within(change: &PlannedChange, limit: usize) -> String {
    let head = header(change);
    let tail = approve_block(change);
    let fixed = head.chars().count() + tail.chars().count();
    let mut budget = limit.saturating_sub(fixed);

    let mut tables = tables(change, usize::MAX);
    if tables.chars().count() > budget {
        // Thousands of members: keep as many table rows as fit and say how many are not shown.
        let mut rows = change.members.len();
        while rows > 0 && tables.chars().count() > budget {
            rows /= 2;
            tables = tables_with_rows(change, rows);
        }
    }
    budget = budget.saturating_sub(tables.chars().count());
    let details = details(change, budget);
    format!("{head}{tables}{details}{tail}")
}

fn header(change: &PlannedChange) -> String {
    let mut out = String::new();
    let count = |s: MemberStatus| change.members.iter().filter(|m| m.status == s).count();
    let (planned, failed, blocked) = (
        count(MemberStatus::Planned),
        count(MemberStatus::PlanFailed),
        count(MemberStatus::Blocked),
    );
    let _ = writeln!(out, "{REPORT_MARKER}");
    let _ = writeln!(out, "## wavegate plan\n");
    let verdict = if failed > 0 {
        format!("❌ **{failed} member{} failed to plan**", plural(failed))
    } else if change.members.is_empty() {
        "**Nothing to plan**".to_owned()
    } else {
        format!("✅ **{planned} member{} planned**", plural(planned))
    };
    let mut line = verdict;
    if failed > 0 {
        let _ = write!(line, " · {planned} planned");
    }
    if blocked > 0 {
        let _ = write!(line, " · {blocked} blocked");
    }
    let d = &change.derivation;
    let unaffected = change
        .skipped
        .iter()
        .filter(|s| s.reason == crate::plan::fanout::SkipReason::Unaffected)
        .count();
    let _ = writeln!(
        out,
        "{line} · fan-out: {} selected, {unaffected} unaffected, {} indeterminate\n",
        d.selected.len(),
        d.indeterminate.len()
    );
    let _ = writeln!(
        out,
        "Base `{}` → head `{}`\n",
        &change.base[..12.min(change.base.len())],
        &change.head[..12.min(change.head.len())]
    );
    out
}

fn tables(change: &PlannedChange, _rows: usize) -> String {
    tables_with_rows(change, change.members.len())
}

fn tables_with_rows(change: &PlannedChange, rows: usize) -> String {
    let mut out = String::new();
    if !change.derivation.waves.is_empty() {
        let _ = writeln!(out, "### Waves\n");
        let mut listed = 0;
        for (i, wave) in change.derivation.waves.iter().enumerate() {
            if listed >= rows {
                let _ = writeln!(
                    out,
                    "\n_{} more waves are not listed: this comment has a size limit._",
                    change.derivation.waves.len() - i
                );
                break;
            }
            listed += wave.len();
            let names: Vec<String> = wave.iter().map(|m| format!("`{m}`")).collect();
            let _ = writeln!(out, "{}. {}", i + 1, names.join(", "));
        }
        out.push('\n');
    }
    if !change.members.is_empty() {
        let _ = writeln!(out, "### Members\n");
        let _ = writeln!(
            out,
            "| member | status | create | update | delete | replace | plan digest |"
        );
        let _ = writeln!(out, "|---|---|--:|--:|--:|--:|---|");
        for m in change.members.iter().take(rows) {
            let _ = writeln!(out, "{}", member_row(m));
        }
        if rows < change.members.len() {
            let _ = writeln!(
                out,
                "\n_{} more members are not listed: this comment has a size limit. The JSON report (`wavegate plan --json`) lists every member; the digest below binds them all._",
                change.members.len() - rows
            );
        }
        out.push('\n');
        let notes: Vec<String> = change
            .members
            .iter()
            .take(rows)
            .flat_map(member_notes)
            .collect();
        if !notes.is_empty() {
            for n in notes {
                let _ = writeln!(out, "- {n}");
            }
            out.push('\n');
        }
    }
    if !change.skipped.is_empty() {
        let _ = writeln!(out, "### Not running\n");
        let _ = writeln!(out, "| component | reason |");
        let _ = writeln!(out, "|---|---|");
        for s in &change.skipped {
            let who = match &s.member {
                Some(m) => format!("`{m}`"),
                None => format!("`{}`", s.component),
            };
            let _ = writeln!(out, "| {who} | {} |", reason_text(s));
        }
        out.push('\n');
    }
    if !change.derivation.indeterminate.is_empty() {
        let paths: Vec<String> = change
            .derivation
            .indeterminate
            .iter()
            .map(|p| code(p))
            .collect();
        let _ = writeln!(
            out,
            "**Indeterminate** — no component claims these changed files and no ignore pattern covers them, so nothing was planned for them: {}\n",
            paths.join(", ")
        );
    }
    if !change.seeded.is_empty() {
        let names: Vec<String> = change.seeded.iter().map(|m| format!("`{m}`")).collect();
        let _ = writeln!(
            out,
            "**Seeded outputs** (taken on trust from the caller): {}\n",
            names.join(", ")
        );
    }
    for note in &change.notes {
        let _ = writeln!(out, "> ℹ️ {note}\n");
    }
    out
}

fn member_row(m: &MemberOutcome) -> String {
    let status = match m.status {
        MemberStatus::Planned if m.plan.as_ref().is_some_and(|p| p.is_empty()) => {
            "no changes".to_owned()
        }
        MemberStatus::Planned if m.plan.as_ref().is_some_and(|p| p.destructive) => {
            "planned ⚠️ destructive".to_owned()
        }
        MemberStatus::Planned => "planned".to_owned(),
        MemberStatus::PlanFailed => "❌ plan failed".to_owned(),
        MemberStatus::Blocked => format!("blocked by `{}`", m.blocked_by.as_deref().unwrap_or("?")),
    };
    let cells = match &m.plan {
        Some(p) => {
            let c = p.counts();
            format!(
                "{} | {} | {} | {} | `{}`",
                c.create,
                c.update,
                c.delete,
                c.replace,
                short_digest(&p.plan_digest)
            )
        }
        None => "— | — | — | — | —".to_owned(),
    };
    format!("| `{}` | {status} | {cells} |", m.member)
}

fn member_notes(m: &MemberOutcome) -> Vec<String> {
    let mut notes = Vec::new();
    for (name, input) in &m.inputs {
        match input.source {
            InputSource::Unknown => notes.push(format!(
                "`{}` input `{name}` ← `{}` is unknown: {}",
                m.member,
                input.reference,
                input.why.as_deref().unwrap_or("no source knows it")
            )),
            InputSource::Seeded => notes.push(format!(
                "`{}` input `{name}` ← `{}` was seeded",
                m.member, input.reference
            )),
            _ => {}
        }
    }
    if let Some(plan) = &m.plan {
        if !plan.denied.is_empty() {
            notes.push(format!(
                "`{}` is denied by policy rules: {}",
                m.member,
                plan.denied.join(", ")
            ));
        }
    }
    notes
}

/// Per-member collapsible sections, shortened to fit `budget` characters.
fn details(change: &PlannedChange, budget: usize) -> String {
    let bodies: Vec<(String, String)> = change
        .members
        .iter()
        .filter(|m| m.status != MemberStatus::Blocked)
        .map(|m| (detail_title(m), detail_body(m)))
        .collect();
    let full: String = bodies.iter().map(|(t, b)| framed(t, b, None)).collect();
    if full.chars().count() <= budget {
        return full;
    }
    // Each shown member needs its frame, the shortening note and a few lines of summary.
    const LEAST_BODY: usize = 200;
    let least = |(title, body): &(String, String)| {
        framed(title, "", Some(body.chars().count()))
            .chars()
            .count()
            + LEAST_BODY.min(body.chars().count())
    };
    let omitted_note = |n: usize| {
        format!("_Plan summaries of {n} more members are not shown: this comment has a size limit. `wavegate plan` prints them all._\n\n")
    };
    let mut shown = 0;
    let mut needed = 0;
    for item in &bodies {
        let more = needed + least(item);
        if more + omitted_note(bodies.len()).len() > budget {
            break;
        }
        needed = more;
        shown += 1;
    }
    let overhead: usize = bodies[..shown]
        .iter()
        .map(|(t, b)| framed(t, "", Some(b.chars().count())).chars().count())
        .sum();
    let mut available = budget.saturating_sub(overhead + omitted_note(bodies.len()).len());
    // Equal shares; a member that needs less than its share leaves the rest to others.
    let mut sizes: Vec<(usize, usize)> = bodies[..shown]
        .iter()
        .enumerate()
        .map(|(i, (_, b))| (b.chars().count(), i))
        .collect();
    sizes.sort();
    let mut allowed = vec![0usize; shown];
    let mut left = shown;
    for (size, i) in sizes {
        let share = available / left.max(1);
        allowed[i] = size.min(share);
        available -= allowed[i];
        left -= 1;
    }
    let mut out = String::new();
    for ((title, body), keep) in bodies.iter().zip(allowed) {
        let total = body.chars().count();
        if keep >= total {
            out.push_str(&framed(title, body, None));
            continue;
        }
        let cut: String = body.chars().take(keep).collect();
        let cut = match cut.rfind('\n') {
            Some(nl) if nl > 0 => cut[..nl].to_owned(),
            _ => cut,
        };
        out.push_str(&framed(title, &cut, Some(total)));
    }
    if shown < bodies.len() {
        out.push_str(&omitted_note(bodies.len() - shown));
    }
    out
}

/// A collapsible section; `cut_from` is the full length when `body` was shortened.
fn framed(title: &str, body: &str, cut_from: Option<usize>) -> String {
    let fence = fence_for(body);
    let note = match cut_from {
        Some(total) => format!(
            "_Summary shortened to fit the comment size limit: {} of {total} characters shown. The full plan is in `wavegate plan` output and the JSON report._\n\n",
            body.chars().count()
        ),
        None => String::new(),
    };
    format!(
        "<details><summary>{title}</summary>\n\n{fence}\n{body}\n{fence}\n\n{note}</details>\n\n"
    )
}

fn detail_title(m: &MemberOutcome) -> String {
    match (&m.status, &m.plan) {
        (MemberStatus::Planned, Some(plan)) => {
            format!(
                "<code>{}</code> — {}",
                m.member,
                counts_text(&plan.counts())
            )
        }
        _ => format!("<code>{}</code> — plan failed", m.member),
    }
}

fn detail_body(m: &MemberOutcome) -> String {
    match (&m.status, &m.plan) {
        (MemberStatus::Planned, Some(plan)) if plan.summary.trim().is_empty() => {
            "(the plan command wrote no summary)".into()
        }
        (MemberStatus::Planned, Some(plan)) => plan.summary.trim_end().to_owned(),
        _ => {
            let mut body = m.error.clone().unwrap_or_else(|| "failed".into());
            let tail: Vec<&str> = m.output.lines().rev().take(20).collect();
            if !tail.is_empty() && !body.contains("last output") {
                body.push_str("\n\nlast output:\n");
                body.push_str(&tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
            }
            body
        }
    }
}

fn approve_block(change: &PlannedChange) -> String {
    let digest = &change.change_set.digest;
    let mut out = String::new();
    let _ = writeln!(out, "### Approve\n");
    let _ = writeln!(
        out,
        "Change-set digest (binds every member's plan above):\n"
    );
    let _ = writeln!(out, "```\n{digest}\n```\n");
    if change.any_failed() {
        let _ = writeln!(out, "A member failed to plan: fix it and push, or comment `/plan` to plan again. An approval now would bind the failure too.\n");
    }
    let _ = writeln!(out, "To approve exactly this plan, comment:\n");
    let _ = writeln!(out, "```\n/approve {digest}\n```");
    if change.unsandboxed {
        let _ = writeln!(out, "\n{UNSANDBOXED}");
    }
    out
}

/// The footer of every report whose commands ran without a sandbox.
pub const UNSANDBOXED: &str = "_⚠️ Commands ran without a sandbox: this server is set to `WAVEGATE_SANDBOX=none`, so the pull request's code ran as the bot's own user._";

/// A backtick fence longer than any run of backticks in `body`.
fn fence_for(body: &str) -> String {
    let longest = body.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    "`".repeat(longest.max(2) + 1)
}

/// Inline code that survives backticks and pipes inside the text.
fn code(text: &str) -> String {
    let text = text.replace('|', "\\|");
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let ticks = "`".repeat(longest + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::changeset::{ChangeSet, ChangeSetMember};
    use crate::plan::engine::{MemberOutcome, ResolvedInput};
    use crate::plan::fanout::{Derivation, SkipReason, Skipped};
    use crate::plan::planfile::MemberPlan;
    use std::collections::BTreeMap;

    fn planned(member: &str, summary: &str) -> MemberOutcome {
        let body = serde_json::json!({
            "summary": summary,
            "entries": [{"address": "aws_instance.web", "action": "create", "after": {"size": "small"}}],
        });
        let plan = MemberPlan::parse(member, body.to_string().as_bytes()).unwrap();
        let (component, stage) = member.split_once('@').unwrap();
        MemberOutcome {
            member: member.into(),
            component: component.into(),
            stage: stage.into(),
            status: MemberStatus::Planned,
            plan: Some(plan),
            error: None,
            blocked_by: None,
            inputs: BTreeMap::new(),
            output: String::new(),
        }
    }

    fn change(
        members: Vec<MemberOutcome>,
        skipped: Vec<Skipped>,
        indeterminate: Vec<String>,
    ) -> PlannedChange {
        let set = ChangeSet::new(
            members
                .iter()
                .map(|m| ChangeSetMember {
                    member: m.member.clone(),
                    status: m.status,
                    plan_digest: m.plan.as_ref().map(|p| p.plan_digest.clone()),
                    unknown_inputs: m.unknown_inputs(),
                    inputs: m.known_inputs(),
                    plan: m.plan.clone(),
                })
                .collect(),
        )
        .unwrap();
        let waves = members.iter().map(|m| vec![m.member.clone()]).collect();
        PlannedChange {
            base: "a".repeat(40),
            head: "b".repeat(40),
            derivation: Derivation {
                selected: members
                    .iter()
                    .map(|m| (m.component.clone(), "changed".into()))
                    .collect(),
                members: members.iter().map(|m| m.member.clone()).collect(),
                waves,
                skipped: Vec::new(),
                indeterminate,
                digest: "sha256:0".into(),
            },
            members,
            skipped,
            seeded: vec![],
            notes: vec![],
            unsandboxed: false,
            change_set: set,
        }
    }

    #[test]
    fn a_failed_and_a_blocked_member_read_as_such() {
        let mut failed = planned("app@dev", "");
        failed.status = MemberStatus::PlanFailed;
        failed.plan = None;
        failed.error = Some("the plan command exited with status 1".into());
        failed.output = "Error: quota exceeded".into();
        let mut dns = planned("dns@dev", "");
        dns.status = MemberStatus::Blocked;
        dns.plan = None;
        dns.blocked_by = Some("app@dev".into());
        let mut net = planned("net@dev", "+ aws_vpc.main (create)");
        net.inputs.insert(
            "zone".into(),
            ResolvedInput {
                reference: "dns.zone".into(),
                upstream: "dns@dev".into(),
                source: crate::plan::engine::InputSource::Unknown,
                value: None,
                why: Some("dns@dev knows zone only after it applies".into()),
                sensitive: false,
            },
        );
        let skipped = vec![
            Skipped {
                component: "dns".into(),
                reason: SkipReason::Blocked,
                member: Some("dns@dev".into()),
                blocked_by: Some("app@dev".into()),
            },
            Skipped {
                component: "monitoring".into(),
                reason: SkipReason::Unaffected,
                member: None,
                blocked_by: None,
            },
        ];
        let c = change(
            vec![net, failed, dns],
            skipped,
            vec!["Makefile".into(), "a|b`c".into()],
        );
        let digest = c.change_set.digest.clone();
        let text = render(&c).replace(&digest, "sha256:<digest>");
        insta::assert_snapshot!(text, @r#"
        <!-- wavegate:report -->
        ## wavegate plan

        ❌ **1 member failed to plan** · 1 planned · 1 blocked · fan-out: 3 selected, 1 unaffected, 2 indeterminate

        Base `aaaaaaaaaaaa` → head `bbbbbbbbbbbb`

        ### Waves

        1. `net@dev`
        2. `app@dev`
        3. `dns@dev`

        ### Members

        | member | status | create | update | delete | replace | plan digest |
        |---|---|--:|--:|--:|--:|---|
        | `net@dev` | planned | 1 | 0 | 0 | 0 | `f3e62528b0aa` |
        | `app@dev` | ❌ plan failed | — | — | — | — | — |
        | `dns@dev` | blocked by `app@dev` | — | — | — | — | — |

        - `net@dev` input `zone` ← `dns.zone` is unknown: dns@dev knows zone only after it applies

        ### Not running

        | component | reason |
        |---|---|
        | `dns@dev` | blocked by app@dev |
        | `monitoring` | unaffected |

        **Indeterminate** — no component claims these changed files and no ignore pattern covers them, so nothing was planned for them: `Makefile`, ``a\|b`c``

        <details><summary><code>net@dev</code> — +1 ~0 -0 ±0</summary>

        ```
        + aws_vpc.main (create)
        ```

        </details>

        <details><summary><code>app@dev</code> — plan failed</summary>

        ```
        the plan command exited with status 1

        last output:
        Error: quota exceeded
        ```

        </details>

        ### Approve

        Change-set digest (binds every member's plan above):

        ```
        sha256:<digest>
        ```

        A member failed to plan: fix it and push, or comment `/plan` to plan again. An approval now would bind the failure too.

        To approve exactly this plan, comment:

        ```
        /approve sha256:<digest>
        ```
        "#);
    }

    #[test]
    fn a_report_over_the_comment_limit_shortens_summaries_visibly_and_keeps_the_digest() {
        let huge = "~ resource.changed (update)\n".repeat(4000);
        let members: Vec<MemberOutcome> = (0..8)
            .map(|i| planned(&format!("c{i}@prod"), &huge))
            .collect();
        let c = change(members, vec![], vec![]);
        let text = render(&c);
        assert!(
            text.chars().count() <= COMMENT_LIMIT,
            "{} characters",
            text.chars().count()
        );
        assert_eq!(
            text.matches("Summary shortened to fit the comment size limit")
                .count(),
            8
        );
        assert!(text.contains(&format!("/approve {}", c.change_set.digest)));
        assert_eq!(text.matches("<details>").count(), 8);
        assert_eq!(text.matches("```").count() % 2, 0, "every fence is closed");
    }

    #[test]
    fn thousands_of_members_still_fit_and_say_how_many_are_not_listed() {
        let members: Vec<MemberOutcome> = (0..3000)
            .map(|i| planned(&format!("component-{i:04}@prod"), "x"))
            .collect();
        let c = change(members, vec![], vec![]);
        let text = render(&c);
        assert!(
            text.chars().count() <= COMMENT_LIMIT,
            "{} characters",
            text.chars().count()
        );
        assert!(
            text.contains("more members are not listed"),
            "the cut is said"
        );
        assert!(text.contains(&c.change_set.digest));
    }

    #[test]
    fn a_summary_with_backticks_cannot_break_its_fence() {
        let c = change(
            vec![planned("a@dev", "```\n/approve sha256:evil\n```")],
            vec![],
            vec![],
        );
        let text = render(&c);
        assert!(
            text.contains("````\n```\n/approve sha256:evil\n```\n````"),
            "{text}"
        );
    }
}
