//! The approvals part of the report: who approved which digest and when,
//! what is still required, approvals that stand for an earlier plan, and
//! the repository's ledger head as it was (published where the database
//! cannot rewrite it, so a ledger rewritten or cut short since is caught).
//! It follows the report as planned, between markers, and is rendered anew
//! whenever the ledger moves, without planning again.

use crate::gate::counting::{Counted, Elsewhere, Evaluation, Given};
use crate::gate::ledger::LedgerHead;
use crate::model::{Digest, UnixMs};
use std::fmt::Write as _;

pub(crate) const START: &str = "<!-- wavegate:approvals -->";
pub(crate) const END: &str = "<!-- /wavegate:approvals -->";

/// Characters kept free for the section below the report as planned.
pub(crate) const ROOM: usize = 4_000;

/// Where the gate stands for the report's digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Standing {
    /// What the ledger's facts add up to.
    pub(crate) counted: Counted,
    /// The pull request edits `[policy]`: say it counts only after merge.
    pub(crate) policy_changed: bool,
    /// The repository's newest ledger fact when the section was written.
    pub(crate) ledger_head: Option<LedgerHead>,
    /// `[policy] approval_ttl`: each approval shows when it expires.
    pub(crate) ttl: Option<std::time::Duration>,
}

impl Standing {
    /// A plan nobody approved yet, needing `required` approvals.
    pub(crate) fn unapproved(required: u32, policy_changed: bool) -> Self {
        Self {
            counted: Counted {
                evaluation: Evaluation::Waiting {
                    have: Vec::new(),
                    count: 0,
                    required: required as usize,
                },
                approved_at: Vec::new(),
                elsewhere: Vec::new(),
                expired: Vec::new(),
            },
            policy_changed,
            ledger_head: None,
            ttl: None,
        }
    }

    pub(crate) fn satisfied(&self) -> bool {
        matches!(self.counted.evaluation, Evaluation::Satisfied { .. })
    }

    /// The check's one-line title.
    pub(crate) fn title(&self, digest: &Digest) -> String {
        let short = digest.short();
        match &self.counted.evaluation {
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
            Evaluation::Mismatch(_) => {
                format!("Approval is for an earlier plan; approve {short}")
            }
        }
    }
}

/// The digest an approval was given for, and where when that was another
/// head (or base) than the plan shown.
fn shown(approval: &Elsewhere) -> String {
    let digest = &approval.digest;
    match &approval.given {
        Given::Judged => format!("`{digest}`"),
        Given::Earlier { head, .. } => format!(
            "`{digest}` at `{}`",
            head.as_ref().map_or("?", |head| head.short())
        ),
    }
}

fn when(at: UnixMs) -> String {
    chrono::DateTime::from_timestamp_millis(at.millis())
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|| at.millis().to_string())
}

/// The comment as posted: the report as planned, then the approvals section
/// (appended after it, so nothing a plan prints can stand in for it), then
/// why approvals are refused, if they are.
pub(crate) fn appended(
    report: &str,
    standing: &Standing,
    digest: &Digest,
    refused: Option<&str>,
) -> String {
    let mut body = format!("{}\n\n{}", report.trim_end(), render(standing, digest));
    if let Some(why) = refused {
        let _ = writeln!(body, "**Approvals are refused:** {why}");
    }
    body
}

/// The section, markers included.
pub(crate) fn render(standing: &Standing, digest: &Digest) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{START}");
    let _ = writeln!(out, "### Approvals\n");
    let (by, count, required) = match &standing.counted.evaluation {
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
        Evaluation::Mismatch(_) => (Vec::new(), 0, 0),
    };
    for actor in &by {
        let at = standing
            .counted
            .approved_at
            .iter()
            .find(|(login, _)| *login == actor.login)
            .map(|(_, at)| when(*at))
            .unwrap_or_default();
        let expires = standing
            .counted
            .approved_at
            .iter()
            .find(|(login, _)| *login == actor.login)
            .and_then(|(_, at)| standing.ttl.map(|ttl| *at + ttl))
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
    match &standing.counted.evaluation {
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
        Evaluation::Mismatch(approved) => {
            let _ = writeln!(
                out,
                "**Waiting for approval of this plan.** @{} approved {}, an earlier plan; an approval binds one plan, so this one needs its own.",
                approved.by.login,
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
    if !standing.counted.elsewhere.is_empty() {
        let _ = writeln!(
            out,
            "\nFor an earlier plan (kept in the ledger, no longer counting):"
        );
        for stale in &standing.counted.elsewhere {
            let _ = writeln!(
                out,
                "- @{} approved {} ({})",
                stale.by.login,
                shown(stale),
                when(stale.at)
            );
        }
    }
    if !standing.counted.expired.is_empty() {
        let _ = writeln!(
            out,
            "\nExpired (`[policy] approval_ttl`; kept in the ledger, no longer counting — approve again):"
        );
        for expired in &standing.counted.expired {
            let end = expired.at + standing.ttl.unwrap_or_default();
            let _ = writeln!(
                out,
                "- @{} approved {} ({}; expired: {})",
                expired.by.login,
                shown(expired),
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
    use crate::gate::ledger::Actor;
    use crate::model::time::in_tests::unix;

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D0: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn actor(login: &str) -> Actor {
        Actor {
            id: 7,
            login: login.into(),
        }
    }

    fn approval(login: &str, digest: &str, given: Given, at: UnixMs) -> Elsewhere {
        Elsewhere {
            by: actor(login),
            digest: digest.parse().unwrap(),
            given,
            at,
        }
    }

    fn earlier(head: char) -> Given {
        Given::Earlier {
            head: Some(crate::model::CommitSha::parse(&head.to_string().repeat(40)).unwrap()),
            base: None,
        }
    }

    #[test]
    fn the_section_says_who_approved_what_is_missing_and_what_is_stale() {
        let standing = Standing {
            counted: Counted {
                evaluation: Evaluation::Waiting {
                    have: vec![actor("bob")],
                    count: 1,
                    required: 2,
                },
                approved_at: vec![("bob".into(), unix(1_764_460_800_000))],
                elsewhere: vec![
                    approval("carol", D0, Given::Judged, unix(1_764_457_200_000)),
                    approval("dave", D1, earlier('c'), unix(1_764_457_260_000)),
                ],
                expired: Vec::new(),
            },
            policy_changed: false,
            ledger_head: Some(LedgerHead {
                seq: 12,
                hash: D2.parse().unwrap(),
            }),
            ttl: None,
        };
        insta::assert_snapshot!(render(&standing, &D1.parse().unwrap()), @r"
        <!-- wavegate:approvals -->
        ### Approvals

        - ✅ @bob approved `sha256:1111111111111111111111111111111111111111111111111111111111111111` (2025-11-30 00:00 UTC)

        **Waiting for 1 more approval** (1 of 2).

        For an earlier plan (kept in the ledger, no longer counting):
        - @carol approved `sha256:0000000000000000000000000000000000000000000000000000000000000000` (2025-11-29 23:00 UTC)
        - @dave approved `sha256:1111111111111111111111111111111111111111111111111111111111111111` at `cccccccccccc` (2025-11-29 23:01 UTC)

        Gate ledger head when this was written: seq 12, `sha256:2222222222222222222222222222222222222222222222222222222222222222`.
        <!-- /wavegate:approvals -->
        ");
        assert!(!standing.satisfied());
        assert!(standing
            .title(&D1.parse().unwrap())
            .starts_with("1 of 2 approvals"));
    }

    #[test]
    fn with_a_ttl_each_approval_says_when_it_expires_and_expired_ones_are_listed() {
        let standing = Standing {
            counted: Counted {
                evaluation: Evaluation::Waiting {
                    have: vec![actor("bob")],
                    count: 1,
                    required: 2,
                },
                approved_at: vec![("bob".into(), unix(1_764_460_800_000))],
                elsewhere: Vec::new(),
                expired: vec![approval(
                    "carol",
                    D1,
                    Given::Judged,
                    unix(1_764_450_000_000),
                )],
            },
            policy_changed: false,
            ledger_head: None,
            ttl: Some(std::time::Duration::from_secs(3600)),
        };
        insta::assert_snapshot!(render(&standing, &D1.parse().unwrap()), @r"
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
