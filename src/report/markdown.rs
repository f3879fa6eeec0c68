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
        for (i, wave) in change.derivation.waves.iter().enumerate() {
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
    let c = m.plan.as_ref().map(|p| p.counts()).unwrap_or_default();
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
    let digest = m.plan.as_ref().map_or("—".to_owned(), |p| {
        format!("`{}`", short_digest(&p.plan_digest))
    });
    format!(
        "| `{}` | {status} | {} | {} | {} | {} | {digest} |",
        m.member, c.create, c.update, c.delete, c.replace
    )
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
    if bodies.is_empty() {
        return String::new();
    }
    let frame = |title: &str, body: &str| {
        let fence = fence_for(body);
        format!("<details><summary>{title}</summary>\n\n{fence}\n{body}\n{fence}\n\n</details>\n\n")
    };
    let full: String = bodies.iter().map(|(t, b)| frame(t, b)).collect();
    if full.chars().count() <= budget {
        return full;
    }
    // Give every member an equal share; a member that needs less leaves the rest to others.
    let overhead: usize = bodies
        .iter()
        .map(|(t, _)| frame(t, "").chars().count() + 120)
        .sum();
    let mut available = budget.saturating_sub(overhead);
    let mut sizes: Vec<(usize, usize)> = bodies
        .iter()
        .enumerate()
        .map(|(i, (_, b))| (b.chars().count(), i))
        .collect();
    sizes.sort();
    let mut allowed = vec![0usize; bodies.len()];
    let mut left = bodies.len();
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
            out.push_str(&frame(title, body));
            continue;
        }
        let cut: String = body.chars().take(keep).collect();
        let cut = match cut.rfind('\n') {
            Some(nl) if nl > 0 => cut[..nl].to_owned(),
            _ => cut,
        };
        let fence = fence_for(&cut);
        let _ = write!(
            out,
            "<details><summary>{title}</summary>\n\n{fence}\n{cut}\n{fence}\n\n_Summary shortened to fit the comment size limit: {} of {total} characters shown. The full plan is in `wavegate plan` output and the JSON report._\n\n</details>\n\n",
            cut.chars().count()
        );
    }
    out
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
    out
}

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
