//! Every word a drift issue says (docs/drift.md): its title, its body — the
//! drifted members' plans as a report shows them (inert text, the entries
//! each digest binds, destructive members first), the digest with the
//! `/apply` line to copy, and a failing check's output — and the comments
//! on it when the drift changes, is superseded or is gone.

use super::entries::{destructive_addresses, diff_lines, plan_headline};
use super::COMMENT_LIMIT;
use crate::model::untrusted::{code, fenced, message};
use crate::model::{CommitSha, Digest, DriftSubject, MemberId, PrNumber, UnixMs};
use crate::plan::outcome::MemberOutcome;
use std::fmt::Write as _;

/// The line only a drift issue's body carries.
pub(crate) const DRIFT_MARKER: &str = "<!-- wavegate:drift -->";

/// What one drift issue shows.
pub(crate) struct DriftShown<'a> {
    pub(crate) subject: &'a DriftSubject,
    /// The default branch and the commit of it that was planned.
    pub(crate) branch: &'a str,
    pub(crate) commit: &'a CommitSha,
    /// The drifted members' outcomes, each with its plan.
    pub(crate) drifted: Vec<&'a MemberOutcome>,
    /// The drift's digest, when any member drifted (else the drift shown
    /// before, kept while the check fails: `kept`).
    pub(crate) digest: Option<&'a Digest>,
    /// Members that could not be planned: why, and their outcome's output.
    pub(crate) failed: Vec<(&'a MemberId, &'a str, &'a str)>,
    /// A failing check of a subject whose earlier drift still stands.
    pub(crate) kept: Option<&'a Digest>,
    pub(crate) since: UnixMs,
    pub(crate) checked_at: UnixMs,
}

/// `Drift: net@prod differs from main`, or what a failing check says.
pub(crate) fn title(subject: &DriftSubject, branch: &str, drifted: bool) -> String {
    let what = match subject {
        DriftSubject::Member(member) => format!("`{member}`"),
        DriftSubject::Stage(stage) => format!("stage `{stage}`"),
    };
    if drifted {
        format!("Drift: {what} differs from {branch}")
    } else {
        format!("Drift check failing: {what}")
    }
}

/// The issue's body, within the forge's limit: plans are cut (members that
/// destroy nothing first) before the digest or the failure ever is.
pub(crate) fn body(shown: &DriftShown<'_>) -> String {
    let head = header(shown);
    let tail = format!("{}{}{}", reconcile(shown), failures(shown), footer(shown));
    let room = COMMENT_LIMIT.saturating_sub(head.chars().count() + tail.chars().count());
    format!("{head}{}{tail}", plans(shown, room))
}

fn header(shown: &DriftShown<'_>) -> String {
    let mut out = format!(
        "{DRIFT_MARKER}\n## wavegate drift: {}\n\n",
        code(&shown.subject.to_string())
    );
    let at = format!("`{}` at `{}`", shown.branch, shown.commit.short());
    if !shown.drifted.is_empty() {
        let members: Vec<String> = shown
            .drifted
            .iter()
            .map(|m| format!("`{}`", m.member))
            .collect();
        let _ = writeln!(
            out,
            "What is deployed differs from what {at} says: the plan of {} against the deployed estate is not empty.\n",
            members.join(", ")
        );
    } else if shown.kept.is_some() {
        let _ = writeln!(
            out,
            "The last check of {at} could not plan it (below); the drift found before stands until a check plans it again.\n"
        );
    } else {
        let _ = writeln!(
            out,
            "The drift check of {at} could not plan it (below): whether it drifted is not known.\n"
        );
    }
    if let (DriftSubject::Stage(_), false) = (shown.subject, shown.drifted.is_empty()) {
        for member in &shown.drifted {
            let _ = writeln!(out, "- [ ] `{}`", member.member);
        }
        out.push('\n');
    }
    let destructive: Vec<String> = shown
        .drifted
        .iter()
        .filter_map(|m| m.plan.as_ref().filter(|p| p.destructive).map(|p| (m, p)))
        .map(|(m, p)| {
            let named: Vec<String> = destructive_addresses(p).iter().map(|a| code(a)).collect();
            format!(
                "> - `{}`: {}",
                m.member,
                if named.is_empty() {
                    "its plan command marks it destructive".to_owned()
                } else {
                    named.join(", ")
                }
            )
        })
        .collect();
    if !destructive.is_empty() {
        let _ = writeln!(
            out,
            "> ⚠️ **Reconciling this deletes or replaces**:\n>\n{}\n",
            destructive.join("\n")
        );
    }
    out
}

/// Each drifted member's plan, destructive ones first, within `room`.
fn plans(shown: &DriftShown<'_>, room: usize) -> String {
    let mut members = shown.drifted.clone();
    members.sort_by_key(|m| !m.plan.as_ref().is_some_and(|p| p.destructive));
    let mut out = String::new();
    let mut cut = Vec::new();
    for (i, member) in members.iter().enumerate() {
        let Some(plan) = &member.plan else { continue };
        let heading = format!("### `{}` — {}\n\n", member.member, plan_headline(plan));
        let block = fenced(&diff_lines(plan).join("\n"), "diff");
        let left = members.len() - i;
        // Later members keep room for their headings.
        let reserve = left * 120;
        let whole = heading.chars().count() + block.chars().count() + 2;
        if out.chars().count() + whole + reserve <= room {
            let _ = write!(out, "{heading}{block}\n\n");
        } else {
            out.push_str(&heading);
            cut.push(format!("`{}`", member.member));
        }
    }
    if !cut.is_empty() {
        let _ = writeln!(
            out,
            "_The entries of {} are not shown: an issue has a size limit. The digest below binds them all; `wavegate plan --stage {}` on a checkout of `{}` lists them._\n",
            cut.join(", "),
            shown.subject.stage(),
            shown.commit.short()
        );
    }
    out
}

fn reconcile(shown: &DriftShown<'_>) -> String {
    let Some(digest) = shown.digest.or(shown.kept) else {
        return String::new();
    };
    format!(
        "### Reconcile\n\nTo make what is deployed what `{}` says, someone who may approve stage `{}` comments the line below; wavegate then applies exactly this plan with the stage's apply profile (a plan that moved since waits for a new approval):\n\n```\n/apply {digest}\n```\n\nOr merge a pull request that makes the code say what is deployed: this issue closes by itself once a check finds it clean.\n\n",
        shown.branch,
        shown.subject.stage()
    )
}

fn failures(shown: &DriftShown<'_>) -> String {
    if shown.failed.is_empty() {
        return String::new();
    }
    let mut out = "### Check failing\n\n".to_owned();
    for (member, why, output) in &shown.failed {
        let _ = writeln!(out, "`{member}` could not be planned: {}\n", message(why));
        // The last lines, bounded as a report's are: the issue always fits.
        if let Some(tail) = crate::plan::tail::OutputTail::of(output) {
            let _ = writeln!(
                out,
                "{}",
                super::markdown::printed_block("What it printed", &tail)
            );
        }
    }
    out
}

fn footer(shown: &DriftShown<'_>) -> String {
    format!(
        "<sub>First seen {}; this plan is of {}. wavegate updates this issue when the drift changes and closes it when a check finds none.</sub>\n",
        shown.since, shown.checked_at
    )
}

/// The report an apply run of a drift issue starts from (its run's
/// section goes under it, in a comment of its own): the plan itself is
/// the issue's body.
pub(crate) fn run_report(digest: &Digest) -> String {
    format!(
        "{}\n## wavegate apply of drift\n\nApplying exactly the plan this issue shows, `{digest}`, as `/apply` approved it. Each member is planned again first; a plan that moved waits for a new approval.",
        super::REPORT_MARKER
    )
}

/// Said on the issue when its drift moved.
pub(crate) fn moved(was: Option<&Digest>, now: &Digest) -> String {
    match was {
        Some(was) => format!(
            "The drift changed: the plan is now `{now}` (was `{was}`). An `/apply` of the earlier digest applies nothing; the body above shows the new plan."
        ),
        None => format!("The check plans it again and finds drift: `{now}`, shown above."),
    }
}

/// Said when a check found the subject clean, closing the issue.
pub(crate) fn clean(commit: &CommitSha, applied_by: Option<PrNumber>) -> String {
    match applied_by {
        Some(pr) => format!(
            "No drift any more: {pr} applied it, and the check of `{}` plans nothing. Closing.",
            commit.short()
        ),
        None => format!(
            "No drift any more: the check of `{}` plans nothing. Closing.",
            commit.short()
        ),
    }
}

/// Said when wavegate stops checking what an issue is about.
pub(crate) fn no_longer_checked(subject: &DriftSubject, why: &str) -> String {
    format!(
        "wavegate no longer checks {} for drift: {why}. Closing.",
        code(&subject.to_string())
    )
}

/// Said on an issue whose drift moved after an apply was started from it.
pub(crate) fn superseded(by: PrNumber) -> String {
    format!("The drift changed after an apply was started here; the new drift is told in {by}. Closing.")
}

/// Said when `/apply` names another digest than the drift's.
pub(crate) fn stale_digest(given: &str, now: Option<&Digest>) -> String {
    match now {
        Some(now) => format!(
            "`/apply {given}` was not applied: the drift shown here is now `{now}`. Read the plan above and `/apply` its digest."
        ),
        None => format!(
            "`/apply {given}` was not applied: this issue has no drift to apply (its check fails, or the drift is gone)."
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_title_names_the_subject_and_whether_it_drifted_or_fails() {
        let member = DriftSubject::Member("net@prod".parse().unwrap());
        assert_eq!(
            title(&member, "main", true),
            "Drift: `net@prod` differs from main"
        );
        let stage = DriftSubject::Stage(crate::model::StageName::new("prod"));
        assert_eq!(
            title(&stage, "main", false),
            "Drift check failing: stage `prod`"
        );
    }
}
