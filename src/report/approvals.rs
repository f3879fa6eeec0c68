//! The approvals part of the report: who approved which digest and when,
//! what is still required, approvals that stand for an earlier plan, and
//! the repository's ledger head as it was (published where the database
//! cannot rewrite it, so a ledger rewritten or cut short since is caught).
//! It follows the report as planned, between markers, and is rendered anew
//! whenever the ledger moves, without planning again.

use crate::gate::ledger::{Actor, Evaluation, LedgerHead};
use std::fmt::Write as _;

pub const START: &str = "<!-- wavegate:approvals -->";
pub const END: &str = "<!-- /wavegate:approvals -->";

/// Characters kept free for the section below the report as planned.
pub const ROOM: usize = 4_000;

/// One approval that no longer counts because the plan moved on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    pub by: Actor,
    pub digest: String,
    pub at: i64,
}

/// Where the gate stands for the report's digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    pub evaluation: Evaluation,
    /// When each counted approver approved (unix ms), by login.
    pub approved_at: Vec<(String, i64)>,
    pub stale: Vec<Stale>,
    /// The pull request edits `[policy]`: say it counts only after merge.
    pub policy_changed: bool,
    /// The repository's newest ledger fact when the section was written.
    pub ledger_head: Option<LedgerHead>,
    /// `[policy] approval_ttl` (ms): each approval shows when it expires.
    pub ttl_ms: Option<i64>,
    /// Approvals of this digest that expired (`at` is when they were given).
    pub expired: Vec<Stale>,
}

impl Standing {
    /// A plan nobody approved yet, needing `required` approvals.
    pub fn unapproved(required: u32, policy_changed: bool) -> Self {
        Self {
            evaluation: Evaluation::Waiting {
                have: Vec::new(),
                count: 0,
                required: required as usize,
            },
            approved_at: Vec::new(),
            stale: Vec::new(),
            policy_changed,
            ledger_head: None,
            ttl_ms: None,
            expired: Vec::new(),
        }
    }

    pub fn satisfied(&self) -> bool {
        matches!(self.evaluation, Evaluation::Satisfied { .. })
    }

    /// The check's one-line title.
    pub fn title(&self, digest: &str) -> String {
        let short = crate::model::canonical::short_digest(digest);
        match &self.evaluation {
            Evaluation::Satisfied { by, .. } => format!(
                "Approved by {} ({short})",
                by.iter()
                    .map(|a| a.login.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Evaluation::Waiting {
                count, required, ..
            } => {
                format!("{count} of {required} approvals ({short})")
            }
            Evaluation::Mismatch { .. } => {
                format!("Approval is for an earlier plan; approve {short}")
            }
        }
    }
}

/// A digest as the gate read it: `sha256:…`, or `sha256:… (at <head>)` for
/// an approval given at another head; shown as the digest and where.
fn shown(digest: &str) -> String {
    match digest.split_once(" (at ") {
        Some((digest, head)) => format!("`{digest}` at `{}`", head.trim_end_matches(')')),
        None => format!("`{digest}`"),
    }
}

fn when(at: i64) -> String {
    chrono::DateTime::from_timestamp_millis(at)
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|| at.to_string())
}

/// The comment as posted: the report as planned, then the approvals section
/// (appended after it, so nothing a plan prints can stand in for it), then
/// why approvals are refused, if they are.
pub fn appended(report: &str, standing: &Standing, digest: &str, refused: Option<&str>) -> String {
    let mut body = format!("{}\n\n{}", report.trim_end(), render(standing, digest));
    if let Some(why) = refused {
        let _ = writeln!(body, "**Approvals are refused:** {why}");
    }
    body
}

/// The section, markers included.
pub fn render(standing: &Standing, digest: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{START}");
    let _ = writeln!(out, "### Approvals\n");
    let (by, count, required) = match &standing.evaluation {
        Evaluation::Satisfied {
            by,
            count,
            required,
        }
        | Evaluation::Waiting {
            have: by,
            count,
            required,
        } => (by.clone(), *count, *required),
        Evaluation::Mismatch { .. } => (Vec::new(), 0, 0),
    };
    for actor in &by {
        let at = standing
            .approved_at
            .iter()
            .find(|(login, _)| *login == actor.login)
            .map(|(_, at)| when(*at))
            .unwrap_or_default();
        let expires = standing
            .approved_at
            .iter()
            .find(|(login, _)| *login == actor.login)
            .and_then(|(_, at)| standing.ttl_ms.map(|ttl| at.saturating_add(ttl)))
            .map(|end| format!(", expires: {}", when(end)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "- ✅ @{} approved `{digest}` ({at}{expires})",
            actor.login
        );
    }
    if !by.is_empty() {
        out.push('\n');
    }
    match &standing.evaluation {
        Evaluation::Satisfied { .. } => {
            let _ = writeln!(out, "**Approved** ({count} of {required} required).");
        }
        Evaluation::Waiting { .. } => {
            let missing = required - count;
            let _ = writeln!(
                out,
                "**Waiting for {missing} more approval{}** ({count} of {required}).",
                if missing == 1 { "" } else { "s" }
            );
        }
        Evaluation::Mismatch { approved, by } => {
            let _ = writeln!(
                out,
                "**Waiting for approval of this plan.** @{} approved {}, an earlier plan; an approval binds one plan, so this one needs its own.",
                by.login,
                shown(approved)
            );
        }
    }
    if standing.policy_changed {
        let _ = writeln!(
            out,
            "\nThis pull request changes `[policy]`. It is judged by the base branch's policy; the new policy takes effect after merge."
        );
    }
    if !standing.stale.is_empty() {
        let _ = writeln!(
            out,
            "\nFor an earlier plan (kept in the ledger, no longer counting):"
        );
        for stale in &standing.stale {
            let _ = writeln!(
                out,
                "- @{} approved {} ({})",
                stale.by.login,
                shown(&stale.digest),
                when(stale.at)
            );
        }
    }
    if !standing.expired.is_empty() {
        let _ = writeln!(
            out,
            "\nExpired (`[policy] approval_ttl`; kept in the ledger, no longer counting — approve again):"
        );
        for expired in &standing.expired {
            let end = expired.at.saturating_add(standing.ttl_ms.unwrap_or(0));
            let _ = writeln!(
                out,
                "- @{} approved {} ({}; expired: {})",
                expired.by.login,
                shown(&expired.digest),
                when(expired.at),
                when(end)
            );
        }
    }
    if let Some(head) = &standing.ledger_head {
        let _ = writeln!(
            out,
            "\nGate ledger head when this was written: seq {}, `{}`.",
            head.seq, head.hash
        );
    }
    let _ = writeln!(out, "{END}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D0: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn actor(login: &str) -> Actor {
        Actor {
            id: 7,
            login: login.into(),
        }
    }

    #[test]
    fn the_section_says_who_approved_what_is_missing_and_what_is_stale() {
        let standing = Standing {
            evaluation: Evaluation::Waiting {
                have: vec![actor("bob")],
                count: 1,
                required: 2,
            },
            approved_at: vec![("bob".into(), 1_764_460_800_000)],
            stale: vec![Stale {
                by: actor("carol"),
                digest: D0.into(),
                at: 1_764_457_200_000,
            }],
            policy_changed: false,
            ledger_head: Some(LedgerHead {
                seq: 12,
                hash: D2.into(),
            }),
            ttl_ms: None,
            expired: Vec::new(),
        };
        insta::assert_snapshot!(render(&standing, D1), @r"
        <!-- wavegate:approvals -->
        ### Approvals

        - ✅ @bob approved `sha256:1111111111111111111111111111111111111111111111111111111111111111` (2025-11-30 00:00 UTC)

        **Waiting for 1 more approval** (1 of 2).

        For an earlier plan (kept in the ledger, no longer counting):
        - @carol approved `sha256:0000000000000000000000000000000000000000000000000000000000000000` (2025-11-29 23:00 UTC)

        Gate ledger head when this was written: seq 12, `sha256:2222222222222222222222222222222222222222222222222222222222222222`.
        <!-- /wavegate:approvals -->
        ");
        assert!(!standing.satisfied());
        assert!(standing.title(D1).starts_with("1 of 2 approvals"));
    }

    #[test]
    fn with_a_ttl_each_approval_says_when_it_expires_and_expired_ones_are_listed() {
        let standing = Standing {
            evaluation: Evaluation::Waiting {
                have: vec![actor("bob")],
                count: 1,
                required: 2,
            },
            approved_at: vec![("bob".into(), 1_764_460_800_000)],
            stale: Vec::new(),
            policy_changed: false,
            ledger_head: None,
            ttl_ms: Some(3_600_000),
            expired: vec![Stale {
                by: actor("carol"),
                digest: D1.into(),
                at: 1_764_450_000_000,
            }],
        };
        insta::assert_snapshot!(render(&standing, D1), @r"
        <!-- wavegate:approvals -->
        ### Approvals

        - ✅ @bob approved `sha256:1111111111111111111111111111111111111111111111111111111111111111` (2025-11-30 00:00 UTC, expires: 2025-11-30 01:00 UTC)

        **Waiting for 1 more approval** (1 of 2).

        Expired (`[policy] approval_ttl`; kept in the ledger, no longer counting — approve again):
        - @carol approved `sha256:1111111111111111111111111111111111111111111111111111111111111111` (2025-11-29 21:00 UTC; expired: 2025-11-29 22:00 UTC)
        <!-- /wavegate:approvals -->
        ");
    }
}
