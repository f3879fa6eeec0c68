//! The PR comment: a warning naming every address deleted or replaced, waves,
//! every member with its counts and short digest, every component not running
//! with its reason, each priced stage's cost against the base's,
//! indeterminate files, per member the entries its digest
//! binds (with the plan command's own summary under its own label), and the
//! full digest with the `/approve` line to copy.
//!
//! It always fits a forge comment: the plan commands' summaries are shortened
//! first, then the entries of members that destroy nothing, and the entries
//! of destructive members last; every cut is said, and the digest never cut.

use super::{entries, reason_text, COMMENT_LIMIT, REPORT_MARKER};
use crate::config::repo::{GatePolicy, CONFIG_FILE};
use crate::model::untrusted::{
    self, cell_code, cell_message, code, fenced, fenced_in, message, Lines,
};
use crate::model::{Money, Untrusted};
use crate::plan::changeset::MemberStatus;
use crate::plan::cost::StageCost;
use crate::plan::outcome::{InputSource, MemberOutcome, PlannedChange};
use crate::plan::planfile::MemberPlan;
use crate::plan::preview::{Approvers, BaseConfig, StagePreview};
use crate::plan::tail::OutputTail;
use serde_json::Value;
use std::fmt::Write as _;

#[cfg(test)]
/// Renders the report within `COMMENT_LIMIT` characters.
pub(crate) fn render(change: &PlannedChange) -> String {
    render_within(change, COMMENT_LIMIT, None)
}

/// Renders the report as planned, leaving room for the approvals section
/// the bot appends below it ([`super::approvals::appended`]).
/// `docs` is where the server serves its docs, for the report's links.
pub(crate) fn render_for_comment(change: &PlannedChange, docs: Option<&str>) -> String {
    render_within(change, COMMENT_LIMIT - super::approvals::ROOM, docs)
}

/// The comment the bot posts for a plan nobody approved yet, approvals
/// section included: what `wavegate plan --markdown` prints.
pub fn as_posted(change: &PlannedChange) -> String {
    let report = render_for_comment(change, None);
    if change.members.is_empty() {
        return report;
    }
    let preview = &change.preview;
    let standing = super::approvals::Standing::unapproved(
        preview.pull_request.required,
        preview.edits_policy(),
    );
    let refused = match &preview.base_config {
        BaseConfig::Invalid(problem) => Some(format!(
            "approvals are refused until the base branch's {CONFIG_FILE} reads again: {problem}"
        )),
        _ => None,
    };
    super::approvals::appended(
        &report,
        &standing,
        &change.change_set.digest,
        refused.as_deref(),
    )
}

/// Renders within `limit` characters; shortening is visible, never silent.
pub(crate) fn render_within(change: &PlannedChange, limit: usize, docs: Option<&str>) -> String {
    let head = header(change);
    let tail = approve_block(change, docs);
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
    } else if change.members.is_empty() && !change.derivation.indeterminate.is_empty() {
        let n = change.derivation.indeterminate.len();
        format!(
            "⚠️ **Nothing planned, but {n} changed file{} no component claims** (listed below): if {} infrastructure, a component's `dir` or `paths` should claim {}",
            plural(n),
            if n == 1 { "it is" } else { "they are" },
            if n == 1 { "it" } else { "them" }
        )
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
    let _ = writeln!(out, "{line} · {}\n", change.fan_out_line());
    let _ = writeln!(
        out,
        "Base `{}` → head `{}`\n",
        &change.base[..12.min(change.base.len())],
        &change.head[..12.min(change.head.len())]
    );
    out.push_str(&destructive_warning(change));
    out
}

/// Addresses listed in the destructive warning before it says how many more.
const MOST_LISTED_DESTRUCTIVE: usize = 100;

/// A warning naming every address the change deletes or replaces, and every
/// destructive plan that cannot say which, before anything else.
fn destructive_warning(change: &PlannedChange) -> String {
    let plans = change
        .members
        .iter()
        .filter(|m| m.status == MemberStatus::Planned)
        .filter_map(|m| m.plan.as_ref().filter(|p| p.destructive).map(|p| (m, p)));
    let mut lines = Vec::new();
    let (mut addresses, mut listed) = (0, 0);
    for (m, plan) in plans {
        let all: Vec<String> = plan
            .destructive_entries()
            .map(|e| format!("{} ({})", e.address.code(), e.action.as_str()))
            .collect();
        addresses += all.len();
        let line = if all.is_empty() && plan.opaque {
            "its plan lists no resources (opaque), so what it deletes cannot be shown".to_owned()
        } else if all.is_empty() {
            "its plan command marks it destructive".to_owned()
        } else {
            let room = MOST_LISTED_DESTRUCTIVE.saturating_sub(listed);
            listed += all.len().min(room);
            let mut named: Vec<String> = all.iter().take(room).cloned().collect();
            if all.len() > room {
                named.push(format!("and {} more", all.len() - room));
            }
            named.join(", ")
        };
        lines.push(format!("> - `{}`: {line}", m.member));
    }
    if lines.is_empty() {
        return String::new();
    }
    let counted = match addresses {
        0 => String::new(),
        1 => " (1 address deleted or replaced)".to_owned(),
        n => format!(" ({n} addresses deleted or replaced)"),
    };
    let mut out = format!(
        "> ⚠️ **Destructive changes in {} member{}**{counted}; their plans are open below.\n>\n",
        lines.len(),
        plural(lines.len()),
    );
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
    if listed < addresses {
        let _ = writeln!(
            out,
            ">\n> _{} of {addresses} addresses listed: this comment has a size limit; the JSON report (`wavegate plan --json`) lists them all._",
            listed
        );
    }
    out.push('\n');
    out
}

fn tables(change: &PlannedChange, _rows: usize) -> String {
    tables_with_rows(change, change.members.len())
}

fn tables_with_rows(change: &PlannedChange, rows: usize) -> String {
    let mut out = after_merge(change, rows);
    if !change.members.is_empty() {
        let _ = writeln!(out, "### Members\n");
        let _ = writeln!(
            out,
            "| member | selected because | status | create | update | delete | replace | plan digest |"
        );
        let _ = writeln!(out, "|---|---|---|--:|--:|--:|--:|---|");
        for m in change.members.iter().take(rows) {
            let _ = writeln!(out, "{}", member_row(m, &why_selected(change, m)));
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
    out.push_str(&groups_section(change));
    out.push_str(&cost_section(change, rows));
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
        let _ = writeln!(out, "> ℹ️ {}\n", message(note));
    }
    out
}

/// The waves grouped by stage, each stage with its gate as the base reads it
/// and what that means here, who may approve, and the pull request's own
/// edits to those settings (which count only after merge).
fn after_merge(change: &PlannedChange, rows: usize) -> String {
    let waves = &change.derivation.waves;
    let p = &change.preview;
    if waves.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    let _ = writeln!(out, "### After merge\n");
    let base = &p.base[..12.min(p.base.len())];
    let _ = match &p.base_config {
        BaseConfig::Read => writeln!(
            out,
            "Gates and approvers as the base branch sets them (`wavegate.toml` at `{base}`): a pull request cannot change its own.\n"
        ),
        BaseConfig::Absent => writeln!(
            out,
            "The base branch (`{base}`) has no `wavegate.toml`, so every stage's gate reads as `always`, the strictest, and anyone with write access may approve.\n"
        ),
        BaseConfig::Invalid(problem) => writeln!(
            out,
            "The base branch's `wavegate.toml` (at `{base}`) does not parse, so every stage's gate reads as `always` and approvals are refused until it is fixed there: {problem}\n"
        ),
    };
    let mut listed = 0;
    let wave_names = crate::model::WaveName::of_each(waves);
    'stages: for stage in &p.stages {
        let _ = writeln!(
            out,
            "**{}** — {}\n",
            stage.name,
            stage_meaning(change, stage)
        );
        for &i in &stage.waves {
            if listed >= rows {
                let _ = writeln!(
                    out,
                    "\n_{} more waves are not listed: this comment has a size limit._",
                    waves.len() - i
                );
                break 'stages;
            }
            listed += waves[i].len();
            let names: Vec<String> = waves[i].iter().map(|m| format!("`{m}`")).collect();
            let gated = match &wave_names[i] {
                name if stage.per_wave && stage.gate == GatePolicy::Always => format!(
                    " (its own gate: `{}`)",
                    crate::model::approve_stage_words(
                        stage.name.as_str(),
                        u32::try_from(name.number).ok()
                    )
                ),
                _ => String::new(),
            };
            let _ = writeln!(out, "- {}: {}{gated}", wave_names[i], names.join(", "));
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "**Who may approve this pull request:** {}.\n",
        approvers_text(&p.pull_request)
    );
    if !p.edits.is_empty() {
        let _ = writeln!(
            out,
            "> ℹ️ This pull request edits {}. That counts only after merge: this pull request and its own apply run are judged by the base's settings shown here.\n",
            p.edits.join("; ")
        );
    }
    out
}

/// A stage's gate as read at the base and what it does with this change.
pub(crate) fn stage_meaning(change: &PlannedChange, stage: &StagePreview) -> String {
    let read = if stage.gate_at_base {
        "read at the base"
    } else {
        "not set at the base, so the strictest"
    };
    let plans: Vec<(&str, &MemberPlan)> = change
        .members
        .iter()
        .filter(|m| m.stage == stage.name && m.status == MemberStatus::Planned)
        .filter_map(|m| m.plan.as_ref().map(|p| (m.member.as_str(), p)))
        .collect();
    let all_planned = plans.len()
        == change
            .members
            .iter()
            .filter(|m| m.stage == stage.name)
            .count();
    let approve = if stage.per_wave {
        format!(
            "waits after merge for an approval of each of its waves in turn (`/approve {} wave <k>`), each of that wave's own plans",
            stage.name
        )
    } else {
        format!("waits for `/approve {}` after merge", stage.name)
    };
    let meaning = match stage.gate {
        GatePolicy::Never => "applies under this pull request's approval".to_owned(),
        GatePolicy::Always if all_planned && plans.iter().all(|(_, p)| p.is_empty()) => {
            "skipped: nothing in this stage changes".to_owned()
        }
        GatePolicy::Always => approve,
        GatePolicy::OnDestructive => {
            let destructive: Vec<String> = plans
                .iter()
                .filter(|(_, p)| p.destructive)
                .map(|(m, _)| format!("`{m}`"))
                .collect();
            if destructive.is_empty() {
                "applies under this pull request's approval, unless a plan at merge deletes or replaces something (none planned here does)".to_owned()
            } else {
                format!("{approve}: {} deletes or replaces", destructive.join(", "))
            }
        }
    };
    let mut text = format!("gate `{}` ({read}): {meaning}", stage.gate);
    if stage.gate != GatePolicy::Never {
        if stage.own_approvers {
            let _ = write!(
                text,
                "; approvers (this stage's own): {}",
                approvers_text(&stage.approvers)
            );
        } else {
            text.push_str("; approvers as for the pull request");
        }
        if let Some(timeout) = &stage.timeout {
            let _ = write!(text, "; the wait expires after {timeout}");
        }
    }
    text
}

/// Who may approve, in one line: logins or teams, how many, and the
/// author's, the pusher's and reviews' part.
pub(crate) fn approvers_text(a: &Approvers) -> String {
    let mut parts = vec![if a.approvers.is_empty() {
        "anyone with write access".to_owned()
    } else {
        a.approvers
            .iter()
            .map(|who| code(who))
            .collect::<Vec<_>>()
            .join(", ")
    }];
    parts.push(format!(
        "{} approval{} needed",
        a.required,
        if a.required == 1 { "" } else { "s" }
    ));
    parts.push(
        match (a.author_may, a.pusher_may) {
            (true, _) => "the author may approve",
            (false, true) => "not the author (whoever pushed the head may)",
            (false, false) => "not the author, nor whoever pushed the head",
        }
        .to_owned(),
    );
    if a.reviews_count {
        parts.push("approving reviews count".to_owned());
    }
    if let Some(ttl) = &a.ttl {
        parts.push(format!("approvals expire after {ttl}"));
    }
    parts.join(" · ")
}

/// Why the fan-out selected `m`, for its row: the changed file that
/// selected its component (in this stage), its `wavegate.toml` entry, or
/// the upstream member it is downstream of.
fn why_selected(change: &PlannedChange, m: &MemberOutcome) -> String {
    let Some(why) = change.derivation.selected.get(m.component.as_str()) else {
        return "—".to_owned();
    };
    let own_stage = format!(" ({})", m.stage);
    let why = why
        .split("; ")
        .find_map(|part| part.strip_suffix(own_stage.as_str()))
        .unwrap_or(why);
    if let Some(upstream) = why.strip_prefix("downstream of ") {
        return format!("downstream of {}", cell_code(upstream));
    }
    if why.ends_with("entry changed") {
        return cell_message(why);
    }
    match why.strip_suffix(" changed") {
        Some(path) => format!("{} changed", cell_code(path)),
        None => cell_message(why),
    }
}

fn member_row(m: &MemberOutcome, why: &str) -> String {
    let status = match m.status {
        MemberStatus::Planned if m.plan.as_ref().is_some_and(|p| p.is_empty()) => {
            "no changes".to_owned()
        }
        MemberStatus::Planned if m.plan.as_ref().is_some_and(|p| p.opaque && p.destructive) => {
            "planned (opaque) ⚠️ destructive".to_owned()
        }
        MemberStatus::Planned if m.plan.as_ref().is_some_and(|p| p.destructive) => {
            "planned ⚠️ destructive".to_owned()
        }
        MemberStatus::Planned if m.plan.as_ref().is_some_and(|p| p.opaque) => {
            "planned (opaque)".to_owned()
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
                p.plan_digest.short()
            )
        }
        None => "— | — | — | — | —".to_owned(),
    };
    format!("| `{}` | {why} | {status} | {cells} |", m.member)
}

/// The groups planned with one call (members, wave, the digest their
/// plans bind, an error), the reads between mates, and the members of
/// groups that planned on their own, with why.
fn groups_section(change: &PlannedChange) -> String {
    let d = &change.derivation;
    let mut out = String::new();
    if d.groups.is_empty() && d.fallbacks.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "### Groups
"
    );
    let mut notes = Vec::new();
    if !d.groups.is_empty() {
        let _ = writeln!(
            out,
            "Each group's members in a stage are planned with one call and applied with one call, in one wave; each member's plan digest binds the group's digest.\n"
        );
        let _ = writeln!(out, "| group | stage | wave | members | group digest |");
        let _ = writeln!(out, "|---|---|--:|---|---|");
        for g in &d.groups {
            let members: Vec<String> = g.members.iter().map(|m| format!("`{m}`")).collect();
            let digest = change
                .group_digest(g)
                .map_or_else(|| "—".to_owned(), |d| format!("`{}`", d.short()));
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | {digest} |",
                g.group,
                g.stage,
                g.wave,
                members.join(", ")
            );
            if let Some(error) = change.group_outcomes(g).find_map(|m| m.error.as_deref()) {
                notes.push(format!(
                    "❌ in {}, {} (so did each of its members)",
                    g.stage,
                    message(crate::apply::failure_summary(error))
                ));
                continue;
            }
            for m in change.group_outcomes(g) {
                let member = &m.member;
                for (name, input) in &m.inputs {
                    if input.source != InputSource::Group {
                        continue;
                    }
                    notes.push(match (&input.value, input.sensitive) {
                        (Some(_), true) => format!(
                            "`{member}` input {} reads its mate's {}: (sensitive), as the mate's plan says",
                            code(name),
                            code(&input.reference)
                        ),
                        (Some(value), false) => format!(
                            "`{member}` input {} reads its mate's {}: {}, as the mate's plan says",
                            code(name),
                            code(&input.reference),
                            code(&short_value(value))
                        ),
                        (None, _) => format!(
                            "`{member}` input {} reads its mate's {}, which the group's apply computes (the mate's plan does not know it): approving this plan does not fix its value",
                            code(name),
                            code(&input.reference)
                        ),
                    });
                }
            }
        }
        out.push('\n');
    }
    for note in notes {
        let _ = writeln!(out, "- {note}");
    }
    if !d.fallbacks.is_empty() {
        if !d.groups.is_empty() {
            out.push('\n');
        }
        let _ = writeln!(out, "Planned on their own, though in a group:\n");
        for f in &d.fallbacks {
            let _ = writeln!(
                out,
                "- `{}` (group `{}`): {}",
                f.member,
                f.group,
                message(&f.why)
            );
        }
    }
    out.push('\n');
    out
}

fn member_notes(m: &MemberOutcome) -> Vec<String> {
    let mut notes = Vec::new();
    for (name, input) in &m.inputs {
        match input.source {
            InputSource::Unknown => notes.push(format!(
                "`{}` input {} ← {} is unknown: {}",
                m.member,
                code(name),
                code(&input.reference),
                message(input.why.as_deref().unwrap_or("no source knows it"))
            )),
            InputSource::Seeded => notes.push(format!(
                "`{}` input {} ← {} was seeded",
                m.member,
                code(name),
                code(&input.reference)
            )),
            InputSource::Build => notes.push(format!(
                "`{}` input {} ← {} is a build input: {}; approving this plan does not fix its value",
                m.member,
                code(name),
                code(&format!("build:{}", input.reference)),
                message(input.why.as_deref().unwrap_or("the build publishes it when it applies"))
            )),
            _ => {}
        }
    }
    if let Some(plan) = &m.plan {
        if !plan.denied.is_empty() {
            let rules: Vec<String> = plan.denied.iter().map(Untrusted::code).collect();
            notes.push(format!(
                "`{}` is denied by policy rules: {}",
                m.member,
                rules.join(", ")
            ));
        }
    }
    notes
}

/// One member's collapsible section, in parts that shorten separately.
struct Detail {
    title: String,
    /// Destructive members are open by default and keep their entries first.
    destructive: bool,
    /// What the digest binds: one line per entry line (see [`entries`]).
    bound: Vec<String>,
    /// Inputs, outputs and what kind of plan it is: short, never cut.
    facts: String,
    /// The plan command's own text, or a failure with its output.
    text: String,
    text_label: &'static str,
    /// The end of what a successful plan command printed; the first thing
    /// left out when the comment runs short.
    printed: Option<OutputTail>,
}

const SUMMARY_NOT_BOUND: &str =
    "Summary written by the plan command (**not bound by the digest**):";
const SUMMARY_BOUND: &str =
    "Summary written by the plan command (**bound by the digest**: this plan lists no resources):";
const FAILURE: &str = "Why it failed:";

impl Detail {
    fn of(m: &MemberOutcome) -> Self {
        let Some(plan) = m
            .plan
            .as_ref()
            .filter(|_| m.status == MemberStatus::Planned)
        else {
            return Self {
                title: format!("<code>{}</code> — plan failed", m.member),
                destructive: false,
                bound: Vec::new(),
                facts: String::new(),
                text: untrusted::clean(&failure_text(m), Lines::Keep),
                text_label: FAILURE,
                printed: None,
            };
        };
        let title = format!(
            "<code>{}</code> — {}",
            m.member,
            entries::plan_headline(plan)
        );
        let summary = untrusted::clean(plan.summary.as_str().trim_end(), Lines::Keep);
        Self {
            title,
            destructive: plan.destructive,
            bound: entries::diff_lines(plan)
                .iter()
                .map(|line| untrusted::clean(line, Lines::Fold))
                .collect(),
            facts: member_facts(m, plan),
            text: if summary.trim().is_empty() {
                "(the plan command wrote no summary)".to_owned()
            } else {
                summary
            },
            text_label: if plan.opaque {
                SUMMARY_BOUND
            } else {
                SUMMARY_NOT_BOUND
            },
            printed: OutputTail::of(&untrusted::clean(&m.output, Lines::Keep)),
        }
    }

    fn bound_len(&self) -> usize {
        self.bound.iter().map(|l| l.chars().count() + 1).sum()
    }

    /// The section with the first `keep_lines` bound lines, `keep_chars`
    /// characters of text and, if `with_printed`, what the command printed;
    /// whatever is cut is said.
    fn render(&self, keep_lines: usize, keep_chars: usize, with_printed: bool) -> String {
        let mut out = format!(
            "<details{}><summary>{}</summary>\n\n",
            if self.destructive { " open" } else { "" },
            self.title
        );
        if !self.bound.is_empty() {
            let shown = &self.bound[..keep_lines.min(self.bound.len())];
            let _ = writeln!(out, "{}\n", fenced(&shown.join("\n"), "diff"));
            if shown.len() < self.bound.len() {
                let _ = writeln!(
                    out,
                    "_✂️ Entries shortened to fit the comment size limit: {} of {} lines shown. The digest binds them all; `wavegate plan` and the JSON report show them._\n",
                    shown.len(),
                    self.bound.len()
                );
            }
        }
        out.push_str(&self.facts);
        let total = self.text.chars().count();
        if keep_chars >= total {
            let _ = writeln!(out, "{}\n\n{}\n", self.text_label, fenced(&self.text, ""));
        } else if keep_chars > 0 {
            let cut: String = self.text.chars().take(keep_chars).collect();
            let cut = match cut.rfind('\n') {
                Some(nl) if nl > 0 => cut[..nl].to_owned(),
                _ => cut,
            };
            let _ = writeln!(
                out,
                "{}\n\n{}\n\n_✂️ Shortened to fit the comment size limit: {} of {total} characters shown. `wavegate plan` prints it all._\n",
                self.text_label,
                fenced(&cut, ""),
                cut.chars().count()
            );
        } else {
            let _ = writeln!(
                out,
                "_✂️ {} not shown ({total} characters): this comment has a size limit. `wavegate plan` prints it._\n",
                self.text_label.trim_end_matches(':')
            );
        }
        match &self.printed {
            Some(tail) if with_printed => {
                let _ = writeln!(
                    out,
                    "{}",
                    printed_block("What the plan command printed", tail)
                );
            }
            Some(_) => {
                let _ = writeln!(
                    out,
                    "_✂️ What the plan command printed is not shown: this comment has a size limit. `wavegate plan` prints it._\n"
                );
            }
            None => {}
        }
        out.push_str("</details>\n\n");
        out
    }
}

/// A collapsed block of what a command printed, `summary` its title.
pub(super) fn printed_block(summary: &str, tail: &OutputTail) -> String {
    format!(
        "<details><summary>{summary} ({})</summary>\n\n{}\n\n</details>\n",
        tail.extent(),
        fenced(&tail.text, "text")
    )
}

fn failure_text(m: &MemberOutcome) -> String {
    let mut body = m.error.clone().unwrap_or_else(|| "failed".into());
    let tail: Vec<&str> = m.output.lines().rev().take(20).collect();
    if !tail.is_empty() && !body.contains("last output") {
        body.push_str("\n\nlast output:\n");
        body.push_str(&tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
    }
    body
}

/// The bound facts of a plan besides its entries: what kind of plan it is,
/// the inputs it read and the outputs it promises.
fn member_facts(m: &MemberOutcome, plan: &MemberPlan) -> String {
    let mut out = String::new();
    if plan.opaque {
        let _ = writeln!(
            out,
            "**Opaque plan:** it lists no resources, so wavegate cannot show what it changes. Its summary below is bound by the digest, its apply always runs, and an approval covers only this exact plan{}.\n",
            if plan.destructive {
                "; it counts as destructive unless its plan file says `\"destructive\": false`"
            } else {
                ""
            }
        );
    } else if plan.is_empty() {
        let _ = writeln!(out, "No changes: nothing to apply.\n");
    }
    let inputs: Vec<String> = m
        .inputs
        .iter()
        .map(|(name, input)| {
            let value = match (&input.source, &input.value) {
                (InputSource::Unknown, _) | (_, None) => "(unknown)".to_owned(),
                _ if input.sensitive => "(sensitive)".to_owned(),
                (_, Some(v)) => code(&short_value(v)),
            };
            format!("{} ← {} = {value}", code(name), code(&input.reference))
        })
        .collect();
    if !inputs.is_empty() {
        let _ = writeln!(out, "Inputs: {}\n", inputs.join(", "));
    }
    let outputs = &plan.outputs;
    let mut shown: Vec<String> = outputs
        .known
        .iter()
        .map(|(name, v)| {
            let value = if outputs.sensitive.contains(name) {
                "(sensitive)".to_owned()
            } else if outputs.fully_known(name).is_none() {
                "(partly known after apply)".to_owned()
            } else {
                code(&short_value(v))
            };
            format!("{} = {value}", code(name))
        })
        .collect();
    shown.extend(
        outputs
            .unknown
            .iter()
            .filter(|u| !outputs.known.contains_key(u.as_str()))
            .map(|u| format!("{} = (known after apply)", code(u))),
    );
    if !shown.is_empty() {
        let _ = writeln!(out, "Outputs: {}\n", shown.join(", "));
    }
    if let Some(url) = m.ran_on.as_deref().filter(|url| is_plain_url(url)) {
        let _ = writeln!(out, "Planned on the forge's CI: [its run]({url})\n");
    }
    out
}

/// A URL the forge gave (a run's page) that a Markdown link, in a table
/// cell too, holds as it is.
pub(crate) fn is_plain_url(url: &str) -> bool {
    (url.starts_with("https://") || url.starts_with("http://"))
        && url
            .chars()
            .all(|c| c.is_ascii_graphic() && !"()[]<>\"'`\\|".contains(c))
}

fn short_value(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Per-member collapsible sections within `budget` characters. What is cut
/// first is the plan command's own text, then the entries of members that
/// destroy nothing, and last the entries of destructive members; every cut
/// is said where it happens.
fn details(change: &PlannedChange, budget: usize) -> String {
    let details: Vec<Detail> = change
        .members
        .iter()
        .filter(|m| m.status != MemberStatus::Blocked)
        .map(Detail::of)
        .collect();
    let full: String = details
        .iter()
        .map(|d| d.render(usize::MAX, usize::MAX, true))
        .collect();
    if full.chars().count() <= budget {
        return full;
    }
    let omitted_note = |n: usize| {
        format!("_✂️ Plans of {n} more members are not shown: this comment has a size limit. `wavegate plan` prints them all; the digest binds them all._\n\n")
    };
    // Short of room, what the commands printed goes first.
    let least = |d: &Detail| d.render(0, 0, false).chars().count();
    // Which sections fit at all: destructive members first.
    let mut order: Vec<usize> = (0..details.len()).collect();
    order.sort_by_key(|&i| !details[i].destructive);
    let reserve = omitted_note(details.len()).chars().count();
    let mut shown = vec![false; details.len()];
    let mut used = 0;
    for &i in &order {
        let more = used + least(&details[i]);
        if more + reserve > budget {
            break;
        }
        used = more;
        shown[i] = true;
    }
    let mut available = budget.saturating_sub(used + reserve);
    let mut lines = vec![0usize; details.len()];
    for destructive in [true, false] {
        let wanted: Vec<(usize, usize)> = (0..details.len())
            .filter(|&i| shown[i] && details[i].destructive == destructive)
            .map(|i| (i, details[i].bound_len()))
            .collect();
        for (i, chars) in shares(&wanted, &mut available) {
            lines[i] = lines_within(&details[i].bound, chars);
        }
    }
    let wanted: Vec<(usize, usize)> = (0..details.len())
        .filter(|&i| shown[i])
        .map(|i| (i, details[i].text.chars().count()))
        .collect();
    let text = shares(&wanted, &mut available);
    let mut chars = vec![0usize; details.len()];
    for (i, c) in text {
        chars[i] = c;
    }
    // What the commands printed, where whole ones still fit.
    let mut printed = vec![false; details.len()];
    for (i, d) in details.iter().enumerate() {
        let cost = d
            .render(lines[i], chars[i], true)
            .chars()
            .count()
            .saturating_sub(d.render(lines[i], chars[i], false).chars().count());
        if shown[i] && d.printed.is_some() && cost <= available {
            available -= cost;
            printed[i] = true;
        }
    }
    let mut out = String::new();
    for (i, d) in details.iter().enumerate() {
        if shown[i] {
            out.push_str(&d.render(lines[i], chars[i], printed[i]));
        }
    }
    let hidden = shown.iter().filter(|s| !**s).count();
    if hidden > 0 {
        out.push_str(&omitted_note(hidden));
    }
    out
}

/// Splits `available` characters between `wanted` sizes in equal shares; one
/// that needs less than its share leaves the rest to the others.
fn shares(wanted: &[(usize, usize)], available: &mut usize) -> Vec<(usize, usize)> {
    let mut by_size: Vec<(usize, usize)> = wanted.iter().map(|&(i, size)| (size, i)).collect();
    by_size.sort();
    let mut left = by_size.len();
    let mut out = Vec::with_capacity(left);
    for (size, i) in by_size {
        let share = *available / left.max(1);
        let given = size.min(share);
        *available -= given;
        left -= 1;
        out.push((i, given));
    }
    out
}

/// How many of `lines` (each with its newline) fit in `chars` characters.
fn lines_within(lines: &[String], chars: usize) -> usize {
    let mut used = 0;
    lines
        .iter()
        .take_while(|l| {
            used += l.chars().count() + 1;
            used <= chars
        })
        .count()
}

/// Each priced stage's cost per member, its total and the difference from
/// the base, and what the policy says of it (at most `rows` member rows).
fn cost_section(change: &PlannedChange, rows: usize) -> String {
    let costs = &change.change_set.costs;
    let mut out = String::new();
    if costs.is_empty() {
        return out;
    }
    let _ = writeln!(out, "### Cost\n");
    let _ = writeln!(out, "| member | monthly | before | change |");
    let _ = writeln!(out, "|---|--:|--:|--:|");
    let mut shown = 0;
    let mut notes = Vec::new();
    for cost in costs {
        let unit = |m: Money| {
            if cost.currency.is_empty() {
                m.to_string()
            } else {
                format!("{m} {}", currency_shown(&cost.currency))
            }
        };
        if let Some(error) = &cost.error {
            let _ = writeln!(out, "| **{}** | ❌ not priced | | |", cost.member);
            let (first, rest) = error.split_once('\n').unwrap_or((error, ""));
            let mut note = format!("❌ `{}`: {}", cost.member, message(first));
            if !rest.trim().is_empty() {
                note.push_str("\n\n");
                note.push_str(&fenced_in(rest.trim_end(), "", "  "));
            }
            notes.push(note);
            continue;
        }
        for (member, figures) in &cost.members {
            if shown == rows {
                break;
            }
            shown += 1;
            let _ = writeln!(
                out,
                "| `{member}` | {} | {} | {} |",
                figures.monthly,
                figures.past,
                figures.increase().signed()
            );
        }
        let unpriced: Vec<&str> = change
            .members
            .iter()
            .filter(|m| m.stage == cost.stage && !cost.members.contains_key(m.member.as_str()))
            .map(|m| m.member.as_str())
            .collect();
        for member in unpriced {
            if shown == rows {
                break;
            }
            shown += 1;
            let _ = writeln!(out, "| `{member}` | not priced | | |");
        }
        let _ = writeln!(
            out,
            "| **{}** | **{}** | {} | **{}** |",
            cost.member,
            unit(cost.total()),
            unit(cost.past_total()),
            cost.increase().signed()
        );
        if !cost.denied.is_empty() {
            let max = cost.max_increase.map_or("?".into(), |m| m.to_string());
            notes.push(format!(
                "⛔ `{}` is denied by the policy: the monthly cost rises by {}, more than `max_monthly_increase` ({max}). Someone in `policy.overriders` may let exactly this cost through with `/override {} <reason>`",
                cost.member,
                unit(cost.increase()),
                cost.member
            ));
        }
    }
    if costs.iter().filter(|c| c.error.is_none()).count() > 1 {
        let priced = costs.iter().filter(|c| c.error.is_none());
        let sum = |f: fn(&StageCost) -> Money| priced.clone().map(f).sum::<Money>();
        let _ = writeln!(
            out,
            "| **total** | **{}** | {} | **{}** |",
            sum(StageCost::total),
            sum(StageCost::past_total),
            sum(StageCost::increase).signed()
        );
    }
    let priced: usize = change
        .members
        .iter()
        .filter(|m| {
            costs
                .iter()
                .any(|c| c.stage == m.stage && c.error.is_none())
        })
        .count();
    if shown < priced {
        let _ = writeln!(
            out,
            "\n_{} more priced members are not listed: this comment has a size limit. The JSON report lists every one._",
            priced - shown
        );
    }
    out.push('\n');
    for note in notes {
        let _ = writeln!(out, "- {note}");
    }
    if !out.ends_with("\n\n") {
        out.push('\n');
    }
    out
}

fn approve_block(change: &PlannedChange, docs: Option<&str>) -> String {
    let digest = &change.change_set.digest;
    let mut out = String::new();
    if change.members.is_empty() {
        // Nothing planned: no digest to approve, and none is needed.
        if !change.derivation.indeterminate.is_empty() {
            let _ = writeln!(
                out,
                "### Approve\n\nNothing was planned, so there is nothing to approve and no approval is needed. If the unclaimed files above are infrastructure, claim them with a component's `dir` or `paths` (or cover them with `ignore`) and push: the next report has a digest to approve."
            );
        }
        if change.unsandboxed {
            let _ = writeln!(out, "\n{UNSANDBOXED}");
        }
        return out;
    }
    let _ = writeln!(out, "### Approve\n");
    let set = &change.change_set;
    let left_out: Vec<String> = set
        .members
        .iter()
        .filter(|m| !set.binds(m))
        .map(|m| format!("`{}`", m.member))
        .collect();
    let and_costs = if set.costs.is_empty() {
        ""
    } else {
        ", and each stage's monthly cost"
    };
    let which = if left_out.is_empty() {
        "every member above, those with no changes and those that failed included".to_owned()
    } else {
        format!(
            "every member above that changes something (the base's `digest_over = \"changing\"` leaves out {}, whose plans change nothing)",
            left_out.join(", ")
        )
    };
    let more = match docs {
        Some(url) => format!("[what each digest binds]({url}/plan-files.md#digests)"),
        None => "see `docs/plan-files.md`, \"Digests\"".to_owned(),
    };
    let _ = writeln!(
        out,
        "Change-set digest: it binds {which}: each one's status, its plan (entries, outputs, policy denials; the summary only of an opaque plan) and the input values it read{and_costs}. Not bound: summaries of other plans and what the commands printed ({more}).\n"
    );
    let _ = writeln!(out, "```\n{digest}\n```\n");
    if change.any_failed() {
        let what = if change
            .members
            .iter()
            .any(|m| m.status == MemberStatus::PlanFailed)
        {
            "A member failed to plan"
        } else {
            "A stage's cost could not be had"
        };
        let _ = writeln!(out, "{what}: fix it and push, or comment `/plan` to plan again. An approval now would bind the failure too.\n");
    }
    let _ = writeln!(out, "To approve exactly this plan, comment:\n");
    let _ = writeln!(out, "```\n/approve {digest}\n```");
    if change.unsandboxed {
        let _ = writeln!(out, "\n{UNSANDBOXED}");
    }
    out
}

/// The footer of every report whose commands ran without a sandbox.
pub(crate) const UNSANDBOXED: &str = "_⚠️ Commands ran without a sandbox: this server is set to `WAVEGATE_SANDBOX=none`, so the pull request's code ran as the bot's own user._";

/// A cost file's currency: a code like `USD` as it is, anything else
/// (the file is the pull request's) as a code span.
fn currency_shown(currency: &str) -> String {
    if currency.len() <= 8 && currency.bytes().all(|b| b.is_ascii_alphanumeric()) {
        currency.to_owned()
    } else {
        cell_code(currency)
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::MemberId;
    use crate::plan::changeset::{ChangeSet, ChangeSetMember};
    use crate::plan::fanout::{Derivation, SkipReason, Skipped};
    use crate::plan::outcome::{MemberOutcome, ResolvedInput};
    use crate::plan::planfile::MemberPlan;
    use std::collections::BTreeMap;

    fn planned(member: &str, summary: &str) -> MemberOutcome {
        let body = serde_json::json!({
            "summary": summary,
            "entries": [{"address": "aws_instance.web", "action": "create", "after": {"size": "small"}}],
        });
        let plan = MemberPlan::parse(&member.into(), body.to_string().as_bytes()).unwrap();
        let id: MemberId = member.parse().unwrap();
        MemberOutcome {
            member: member.into(),
            component: id.component().into(),
            stage: id.stage().into(),
            status: MemberStatus::Planned,
            plan: Some(plan),
            error: None,
            blocked_by: None,
            inputs: BTreeMap::new(),
            output: String::new(),
            discovered: None,
            ran_on: None,
        }
    }

    pub(crate) fn change(
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
                    build_inputs: vec![],
                    group_inputs: vec![],
                    discovered: None,
                    inputs: m.known_inputs(),
                    plan: m.plan.clone(),
                    ran_on: None,
                })
                .collect(),
        )
        .unwrap();
        let ids: Vec<MemberId> = members.iter().map(|m| m.member.clone()).collect();
        let waves: Vec<Vec<MemberId>> = ids.iter().map(|m| vec![m.clone()]).collect();
        let waves_again = waves.clone();
        PlannedChange {
            base: "a".repeat(40),
            head: "b".repeat(40),
            derivation: Derivation {
                selected: members
                    .iter()
                    .map(|m| (m.component.clone(), "changed".into()))
                    .collect(),
                members: ids,
                waves,
                skipped: Vec::new(),
                indeterminate,
                groups: Vec::new(),
                fallbacks: Vec::new(),
                digest: crate::model::Digest::repeated('0'),
            },
            members,
            skipped,
            seeded: vec![],
            notes: vec![],
            unsandboxed: false,
            preview: crate::plan::preview::Preview::strictest(&"a".repeat(40), &waves_again),
            change_set: set,
        }
    }

    #[test]
    fn a_report_that_planned_nothing_offers_nothing_to_approve() {
        let c = change(vec![], vec![], vec!["Makefile".into()]);
        let posted = as_posted(&c);
        assert!(!posted.contains("/approve"), "{posted}");
        insta::assert_snapshot!(section_of(&posted, "### Approve"), @"
        ### Approve

        Nothing was planned, so there is nothing to approve and no approval is needed. If the unclaimed files above are infrastructure, claim them with a component's `dir` or `paths` (or cover them with `ignore`) and push: the next report has a digest to approve.
        ");
    }

    fn section_of(report: &str, heading: &str) -> String {
        report[report.find(heading).expect("the heading")..].to_owned()
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
                source: crate::plan::outcome::InputSource::Unknown,
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
        let text = render(&c).replace(digest.as_str(), "sha256:<digest>");
        insta::assert_snapshot!(text, @r#"
        <!-- wavegate:report -->
        ## wavegate plan

        ❌ **1 member failed to plan** · 1 planned · 1 blocked · fan-out: 3 selected, 1 unaffected, 2 indeterminate

        Base `aaaaaaaaaaaa` → head `bbbbbbbbbbbb`

        ### After merge

        Gates and approvers as the base branch sets them (`wavegate.toml` at `aaaaaaaaaaaa`): a pull request cannot change its own.

        **dev** — gate `always` (read at the base): waits for `/approve dev` after merge; approvers as for the pull request

        - dev · wave 1: `net@dev`
        - dev · wave 2: `app@dev`
        - dev · wave 3: `dns@dev`

        **Who may approve this pull request:** anyone with write access · 1 approval needed · not the author, nor whoever pushed the head.

        ### Members

        | member | selected because | status | create | update | delete | replace | plan digest |
        |---|---|---|--:|--:|--:|--:|---|
        | `net@dev` | changed | planned | 1 | 0 | 0 | 0 | `f3e62528b0aa` |
        | `app@dev` | changed | ❌ plan failed | — | — | — | — | — |
        | `dns@dev` | changed | blocked by `app@dev` | — | — | — | — | — |

        - `net@dev` input `zone` ← `dns.zone` is unknown: dns@dev knows zone only after it applies

        ### Not running

        | component | reason |
        |---|---|
        | `dns@dev` | blocked by app@dev |
        | `monitoring` | unaffected |

        **Indeterminate** — no component claims these changed files and no ignore pattern covers them, so nothing was planned for them: `Makefile`, ``a|b`c``

        <details><summary><code>net@dev</code> — +1 ~0 -0 -/+0</summary>

        ```diff
        + aws_instance.web (create)
              size: "small"
        ```

        Inputs: `zone` ← `dns.zone` = (unknown)

        Summary written by the plan command (**not bound by the digest**):

        ```
        + aws_vpc.main (create)
        ```

        </details>

        <details><summary><code>app@dev</code> — plan failed</summary>

        Why it failed:

        ```
        the plan command exited with status 1

        last output:
        Error: quota exceeded
        ```

        </details>

        ### Approve

        Change-set digest: it binds every member above, those with no changes and those that failed included: each one's status, its plan (entries, outputs, policy denials; the summary only of an opaque plan) and the input values it read. Not bound: summaries of other plans and what the commands printed (see `docs/plan-files.md`, "Digests").

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
            text.matches("Shortened to fit the comment size limit")
                .count(),
            8
        );
        assert!(text.contains(&format!("/approve {}", c.change_set.digest)));
        assert_eq!(text.matches("<details>").count(), 8);
        assert_eq!(text.matches("```").count() % 2, 0, "every fence is closed");
    }

    #[test]
    fn what_a_plan_printed_is_shown_collapsed_in_its_section() {
        let mut m = planned("app@dev", "Plan: 1 to add.");
        m.output = "Refreshing state...\n\nPlan: 1 to add, 0 to change, 0 to destroy.\n".into();
        let detail = Detail::of(&m).render(usize::MAX, usize::MAX, true);
        insta::assert_snapshot!(detail, @r#"
        <details><summary><code>app@dev</code> — +1 ~0 -0 -/+0</summary>

        ```diff
        + aws_instance.web (create)
              size: "small"
        ```

        Summary written by the plan command (**not bound by the digest**):

        ```
        Plan: 1 to add.
        ```

        <details><summary>What the plan command printed (all 3 lines)</summary>

        ```text
        Refreshing state...

        Plan: 1 to add, 0 to change, 0 to destroy.
        ```

        </details>

        </details>
        "#);
    }

    #[test]
    fn short_of_room_what_plans_printed_is_left_out_first_and_said_so() {
        let huge = "~ resource.changed (update)\n".repeat(4000);
        let printed: String = (0..30).map(|i| format!("refreshing {i}\n")).collect();
        let members: Vec<MemberOutcome> = (0..8)
            .map(|i| {
                let mut m = planned(&format!("c{i}@prod"), &huge);
                m.output = printed.clone();
                m
            })
            .collect();
        let text = render(&change(members, vec![], vec![]));
        assert!(text.chars().count() <= COMMENT_LIMIT);
        assert_eq!(
            text.matches(
                "What the plan command printed is not shown: this comment has a size limit."
            )
            .count(),
            8,
            "{text}"
        );

        // With room to spare, each is shown whole.
        let members: Vec<MemberOutcome> = (0..8)
            .map(|i| {
                let mut m = planned(&format!("c{i}@prod"), "small");
                m.output = printed.clone();
                m
            })
            .collect();
        let text = render(&change(members, vec![], vec![]));
        assert_eq!(
            text.matches("What the plan command printed (all 30 lines)")
                .count(),
            8
        );
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
        assert!(text.contains(c.change_set.digest.as_str()));
    }

    pub(crate) fn planned_with(member: &str, plan_file: serde_json::Value) -> MemberOutcome {
        let mut m = planned(member, "");
        m.plan = Some(MemberPlan::parse(&member.into(), plan_file.to_string().as_bytes()).unwrap());
        m
    }

    #[test]
    fn the_reviewer_sees_what_the_digest_binds_and_what_it_does_not() {
        let lb = planned_with(
            "web@prod",
            serde_json::json!({
                "summary": "1 to add (trust me, it is internal)",
                "entries": [
                    {"address": "aws_lb.public", "action": "create",
                     "after": {"internal": false, "name": "web", "arn": null}, "unknown": ["arn"]},
                    {"address": "aws_db.main", "action": "replace", "forced_by": ["engine_version"],
                     "before": {"engine_version": "13", "password": "old"},
                     "after": {"engine_version": "15", "password": "new"}, "sensitive": ["password"]},
                ],
                "outputs": {"known": {"lb_dns": "web.example.com"}, "unknown": ["lb_arn"]},
            }),
        );
        let mut migrate = planned_with(
            "schema@prod",
            serde_json::json!({"summary": "run 0042_add_index"}),
        );
        migrate.inputs.insert(
            "db".into(),
            ResolvedInput {
                reference: "db.url".into(),
                upstream: "db@prod".into(),
                source: crate::plan::outcome::InputSource::Recorded,
                value: Some(serde_json::json!("postgres://db")),
                why: None,
                sensitive: false,
            },
        );
        let quiet = planned_with(
            "dns@prod",
            serde_json::json!({"summary": "in sync", "empty": true}),
        );
        let c = change(vec![lb, migrate, quiet], vec![], vec![]);
        let digest = c.change_set.digest.clone();
        let text = render(&c).replace(digest.as_str(), "sha256:<digest>");
        insta::assert_snapshot!(text, @r#"
        <!-- wavegate:report -->
        ## wavegate plan

        ✅ **3 members planned** · fan-out: 3 selected, 0 unaffected, 0 indeterminate

        Base `aaaaaaaaaaaa` → head `bbbbbbbbbbbb`

        > ⚠️ **Destructive changes in 2 members** (1 address deleted or replaced); their plans are open below.
        >
        > - `web@prod`: `aws_db.main` (replace)
        > - `schema@prod`: its plan lists no resources (opaque), so what it deletes cannot be shown

        ### After merge

        Gates and approvers as the base branch sets them (`wavegate.toml` at `aaaaaaaaaaaa`): a pull request cannot change its own.

        **prod** — gate `always` (read at the base): waits for `/approve prod` after merge; approvers as for the pull request

        - prod · wave 1: `web@prod`
        - prod · wave 2: `schema@prod`
        - prod · wave 3: `dns@prod`

        **Who may approve this pull request:** anyone with write access · 1 approval needed · not the author, nor whoever pushed the head.

        ### Members

        | member | selected because | status | create | update | delete | replace | plan digest |
        |---|---|---|--:|--:|--:|--:|---|
        | `web@prod` | changed | planned ⚠️ destructive | 1 | 0 | 0 | 1 | `c6b0f9622a3f` |
        | `schema@prod` | changed | planned (opaque) ⚠️ destructive | 0 | 0 | 0 | 0 | `98d0edfa1dac` |
        | `dns@prod` | changed | no changes | 0 | 0 | 0 | 0 | `f7e8307b7569` |

        <details open><summary><code>web@prod</code> — +1 ~0 -0 -/+1 ⚠️ destructive</summary>

        ```diff
        -/+ aws_db.main (replace; forced by engine_version)
              engine_version: "13" → "15"  # forces replacement
              password: (sensitive) → (sensitive)
        + aws_lb.public (create)
              arn: (known after apply)
              internal: false
              name: "web"
        ```

        Outputs: `lb_dns` = `"web.example.com"`, `lb_arn` = (known after apply)

        Summary written by the plan command (**not bound by the digest**):

        ```
        1 to add (trust me, it is internal)
        ```

        </details>

        <details open><summary><code>schema@prod</code> — opaque (lists no resources) ⚠️ destructive</summary>

        **Opaque plan:** it lists no resources, so wavegate cannot show what it changes. Its summary below is bound by the digest, its apply always runs, and an approval covers only this exact plan; it counts as destructive unless its plan file says `"destructive": false`.

        Inputs: `db` ← `db.url` = `"postgres://db"`

        Summary written by the plan command (**bound by the digest**: this plan lists no resources):

        ```
        run 0042_add_index
        ```

        </details>

        <details><summary><code>dns@prod</code> — +0 ~0 -0 -/+0 — no changes</summary>

        No changes: nothing to apply.

        Summary written by the plan command (**not bound by the digest**):

        ```
        in sync
        ```

        </details>

        ### Approve

        Change-set digest: it binds every member above, those with no changes and those that failed included: each one's status, its plan (entries, outputs, policy denials; the summary only of an opaque plan) and the input values it read. Not bound: summaries of other plans and what the commands printed (see `docs/plan-files.md`, "Digests").

        ```
        sha256:<digest>
        ```

        To approve exactly this plan, comment:

        ```
        /approve sha256:<digest>
        ```
        "#);
    }

    #[test]
    fn shortening_cuts_summaries_then_safe_entries_and_keeps_destructive_entries() {
        let many = |action: &str, n: usize| -> Vec<serde_json::Value> {
            (0..n)
                .map(|i| {
                    serde_json::json!({"address": format!("r.{action}_{i:05}"), "action": action,
                    "before": {"v": 1}, "after": {"v": 2}})
                })
                .collect()
        };
        let destroying = planned_with(
            "db@prod",
            serde_json::json!({"summary": "x\n".repeat(5000), "entries": many("delete", 1500)}),
        );
        let updating = planned_with(
            "app@prod",
            serde_json::json!({"summary": "y\n".repeat(5000), "entries": many("update", 3000)}),
        );
        let c = change(vec![updating, destroying], vec![], vec![]);
        let text = render(&c);
        assert!(
            text.chars().count() <= COMMENT_LIMIT,
            "{} characters",
            text.chars().count()
        );
        for i in 0..1500 {
            assert!(
                text.contains(&format!("- r.delete_{i:05} (delete)")),
                "delete {i} is shown"
            );
        }
        assert!(
            text.contains("_✂️ Entries shortened to fit the comment size limit:"),
            "the updates are cut, visibly"
        );
        assert_eq!(
            text.matches("not shown (9999 characters)").count(),
            2,
            "summaries go first"
        );
        assert!(text.contains("<details open><summary><code>db@prod</code>"));
        assert!(text.contains("/approve sha256:"));
        assert_eq!(text.matches("```").count() % 2, 0, "every fence is closed");
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
