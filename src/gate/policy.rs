//! Who may approve, and which digest a `/approve` binds. Both decisions are
//! pure: the worker asks the forge for permissions and team memberships and
//! the store for the current report, then asks here.
//!
//! The policy always comes from the base branch, so a pull request cannot
//! loosen the rules it is judged by.

use super::commands::DigestRef;
use crate::config::repo::Policy;
use crate::model::{Digest, UnixMs};
use std::fmt;
use std::time::Duration;

/// The person behind a command or review, as far as the policy cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate<'a> {
    pub(crate) login: &'a str,
    pub(crate) is_bot: bool,
    /// Forge permission on the repository is at least `write`.
    pub(crate) can_write: bool,
    /// `approvers` entries of the form `team:<slug>` this person belongs to.
    pub(crate) teams: &'a [String],
}

/// Why someone may not approve, said so they know what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotAllowed {
    Bot,
    NoWriteAccess,
    NotAnApprover {
        approvers: Vec<String>,
    },
    OwnPullRequest,
    /// They pushed the head being approved: treated like its author.
    PushedTheHead,
}

impl fmt::Display for NotAllowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotAllowed::Bot => f.write_str("bot accounts never approve"),
            NotAllowed::NoWriteAccess => f.write_str(
                "approving needs write access to this repository; ask a maintainer to approve, or to give you write access",
            ),
            NotAllowed::NotAnApprover { approvers } => write!(
                f,
                "`approvers` on the base branch (`[policy]`, or this stage's own) lists {}, and you are not among them; ask one of them to approve",
                approvers
                    .iter()
                    .map(|a| format!("`{a}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            NotAllowed::OwnPullRequest => f.write_str(
                "the author of a pull request cannot approve it (`[policy] allow_self_approval` is not `true` on the base branch); ask a reviewer",
            ),
            NotAllowed::PushedTheHead => f.write_str(
                "you pushed this pull request's current head, so you are treated like its author and cannot approve it (`[policy] allow_pusher_approval` is not `true` on the base branch); ask a reviewer who did not push to it",
            ),
        }
    }
}

/// The `team:<slug>` entries of `approvers`: the teams the worker must ask about.
pub(crate) fn approver_teams(policy: &Policy) -> Vec<String> {
    teams_in(&policy.approvers)
}

/// The `team:<slug>` entries of `policy.overriders`.
pub(crate) fn overrider_teams(policy: &Policy) -> Vec<String> {
    teams_in(&policy.overriders)
}

fn teams_in(listed: &[String]) -> Vec<String> {
    listed
        .iter()
        .filter_map(|a| a.strip_prefix("team:"))
        .map(str::to_owned)
        .collect()
}

/// Whether `who` (with `who.teams` the overrider teams they are in) may let
/// a plan the policy denied through. Nobody may when the list is empty.
pub(crate) fn may_override(policy: &Policy, who: &Candidate<'_>) -> Result<(), String> {
    if who.is_bot || !who.can_write {
        return Err(
            "an override needs write access to the repository, and never comes from a bot".into(),
        );
    }
    let listed = policy
        .overriders
        .iter()
        .any(|entry| match entry.strip_prefix("team:") {
            Some(team) => who.teams.iter().any(|t| t.eq_ignore_ascii_case(team)),
            None => entry.eq_ignore_ascii_case(who.login),
        });
    match (policy.overriders.is_empty(), listed) {
        (true, _) => Err("nobody may override a policy denial here: the base branch's `policy.overriders` is empty".into()),
        (false, false) => Err(format!(
            "only those in the base branch's `policy.overriders` ({}) may override a policy denial",
            policy.overriders.join(", ")
        )),
        (false, true) => Ok(()),
    }
}

/// Who wrote the pull request and who pushed the head being approved (when
/// wavegate heard it: a push event's sender).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Authors<'a> {
    pub(crate) author: &'a str,
    pub(crate) pusher: Option<&'a str>,
}

/// Whether `who` may approve a pull request by `authors`. Whoever pushed its
/// current head is treated like its author (GitHub's "approval of the most
/// recent push"), unless `allow_pusher_approval`.
pub(crate) fn may_approve(
    policy: &Policy,
    authors: Authors<'_>,
    who: &Candidate<'_>,
) -> Result<(), NotAllowed> {
    let author = authors.author;
    may_still_approve(policy, who)?;
    if !policy.allow_self_approval && author.eq_ignore_ascii_case(who.login) {
        return Err(NotAllowed::OwnPullRequest);
    }
    let pushed = authors
        .pusher
        .is_some_and(|p| p.eq_ignore_ascii_case(who.login));
    if pushed && !policy.allow_self_approval && !policy.allow_pusher_approval {
        return Err(NotAllowed::PushedTheHead);
    }
    Ok(())
}

/// What may change between an approval and its use: the approver is no
/// bot, may write, and is listed in `approvers` (by login or team). An
/// apply run asks this again of every approval it uses.
pub(crate) fn may_still_approve(policy: &Policy, who: &Candidate<'_>) -> Result<(), NotAllowed> {
    if who.is_bot {
        return Err(NotAllowed::Bot);
    }
    if !who.can_write {
        return Err(NotAllowed::NoWriteAccess);
    }
    if !policy.approvers.is_empty() {
        let listed = policy
            .approvers
            .iter()
            .any(|entry| match entry.strip_prefix("team:") {
                Some(team) => who.teams.iter().any(|t| t.eq_ignore_ascii_case(team)),
                None => entry.eq_ignore_ascii_case(who.login),
            });
        if !listed {
            return Err(NotAllowed::NotAnApprover {
                approvers: policy.approvers.clone(),
            });
        }
    }
    Ok(())
}

/// Why an approval given earlier no longer counts when a run uses it, said
/// to whoever reads the run (not to the approver, as a refusal is).
pub(crate) fn lapsed_reason(why: &NotAllowed) -> String {
    match why {
        NotAllowed::Bot => "a bot account never approves".into(),
        NotAllowed::NoWriteAccess => "they no longer have write access to the repository".into(),
        NotAllowed::NotAnApprover { approvers } => format!(
            "they are no longer among the approvers ({})",
            approvers.join(", ")
        ),
        NotAllowed::OwnPullRequest => "they wrote the pull request".into(),
        NotAllowed::PushedTheHead => "they pushed the merged head".into(),
    }
}

/// When an approval given at `at` (unix ms) expires under a ttl (`None`: never).
pub(crate) fn expires_at(at: UnixMs, ttl: Option<Duration>) -> Option<UnixMs> {
    ttl.map(|ttl| at + ttl)
}

/// Whether an approval given at `at` has expired by `now`.
pub(crate) fn expired(at: UnixMs, ttl: Option<Duration>, now: UnixMs) -> bool {
    expires_at(at, ttl).is_some_and(|end| now >= end)
}

/// What the bot last reported on the pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReportSeen<'a> {
    /// The head the report is for.
    pub(crate) head: &'a str,
    /// Its change-set digest; `None` when nothing could be planned.
    pub(crate) digest: Option<&'a Digest>,
    /// When it was posted (unix ms, wavegate's clock).
    pub(crate) posted_at: UnixMs,
}

/// Why an `/approve` binds nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unbound {
    NoReport,
    NothingToApprove,
    Replanning {
        head: String,
    },
    ReportNewerThanComment {
        head: String,
        digest: Digest,
    },
    NotCurrent {
        named: String,
        current: Digest,
    },
    /// The comment carries no time, so which report it saw is unknown.
    Undated {
        digest: Digest,
    },
}

impl fmt::Display for Unbound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unbound::NoReport => f.write_str(
                "there is no plan to approve yet; wait for wavegate's report on this pull request",
            ),
            Unbound::NothingToApprove => f.write_str(
                "the last report has nothing to approve: it planned nothing (no component claims the changed files) or could not plan (it says why), and no approval is needed for it; approve the next report that has a digest",
            ),
            Unbound::Replanning { head } => write!(
                f,
                "a new plan is being made for `{}`; approve it once it is posted",
                &head[..head.len().min(12)]
            ),
            Unbound::ReportNewerThanComment { head, digest } => write!(
                f,
                "a new plan for `{}` was being made when you wrote your comment, so it is not clear which plan you meant; it is posted now with the digest `{digest}`: review it and approve with `/approve {digest}`",
                &head[..head.len().min(12)]
            ),
            Unbound::Undated { digest } => write!(
                f,
                "the forge did not say when your comment was written, so it is not clear which report you saw; name the plan: `/approve {digest}`"
            ),
            Unbound::NotCurrent { named, current } => write!(
                f,
                "`{named}` is not the current plan; the current digest is `{current}`: review the report and approve it with `/approve {current}`"
            ),
        }
    }
}

/// The digest an `/approve` binds: the one named (which must be the current
/// report's), or for a plain `/approve` the current report's — provided it
/// was posted before the comment was written and no newer head is being
/// planned. `head_now` is the pull request's head as wavegate last heard it.
pub(crate) fn bind<'a>(
    named: Option<&DigestRef>,
    report: Option<&ReportSeen<'a>>,
    head_now: &str,
    comment_written_at: Option<UnixMs>,
) -> Result<&'a Digest, Unbound> {
    let report = report.ok_or(Unbound::NoReport)?;
    if report.head != head_now {
        return Err(Unbound::Replanning {
            head: head_now.to_owned(),
        });
    }
    let current = report.digest.ok_or(Unbound::NothingToApprove)?;
    match named {
        Some(named) if named.matches(current) => Ok(current),
        Some(named) => Err(Unbound::NotCurrent {
            named: named.as_text(),
            current: current.clone(),
        }),
        // Forges date comments to the second: a comment from the second the
        // report was posted in is taken to have seen it.
        None => match comment_written_at {
            Some(written) if written + Duration::from_secs(1) <= report.posted_at => {
                Err(Unbound::ReportNewerThanComment {
                    head: report.head.to_owned(),
                    digest: current.clone(),
                })
            }
            Some(_) => Ok(current),
            None => Err(Unbound::Undated {
                digest: current.clone(),
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::time::in_tests::{millis, unix};

    fn policy(approvers: &[&str], self_ok: bool) -> Policy {
        Policy {
            approvers: approvers.iter().map(|s| s.to_string()).collect(),
            allow_self_approval: self_ok,
            ..Policy::default()
        }
    }

    fn by(author: &str) -> Authors<'_> {
        Authors {
            author,
            pusher: None,
        }
    }

    #[test]
    fn whoever_pushed_the_head_is_treated_like_its_author() {
        let pushed = Authors {
            author: "alice",
            pusher: Some("Bob"),
        };
        let strict = policy(&[], false);
        assert_eq!(
            may_approve(&strict, pushed, &writer("bob", &[])),
            Err(NotAllowed::PushedTheHead)
        );
        assert!(NotAllowed::PushedTheHead
            .to_string()
            .contains("allow_pusher_approval"));
        assert_eq!(may_approve(&strict, pushed, &writer("carol", &[])), Ok(()));
        let pusher_ok = Policy {
            allow_pusher_approval: true,
            ..strict.clone()
        };
        assert_eq!(may_approve(&pusher_ok, pushed, &writer("bob", &[])), Ok(()));
        // Like the author: whoever may approve their own pull request may
        // approve what they pushed.
        assert_eq!(
            may_approve(&policy(&[], true), pushed, &writer("bob", &[])),
            Ok(())
        );
        // Nobody heard of a push: nobody is held to it.
        assert_eq!(
            may_approve(&strict, by("alice"), &writer("bob", &[])),
            Ok(())
        );
    }

    fn writer<'a>(login: &'a str, teams: &'a [String]) -> Candidate<'a> {
        Candidate {
            login,
            is_bot: false,
            can_write: true,
            teams,
        }
    }

    #[test]
    fn only_listed_overriders_may_let_a_denied_plan_through() {
        let mut policy = Policy::default();
        let teams = vec!["security".to_owned()];
        assert!(may_override(&policy, &writer("carol", &[]))
            .unwrap_err()
            .contains("is empty"));
        policy.overriders = vec!["carol".into(), "team:security".into()];
        assert_eq!(may_override(&policy, &writer("Carol", &[])), Ok(()));
        assert_eq!(may_override(&policy, &writer("dave", &teams)), Ok(()));
        assert!(may_override(&policy, &writer("erin", &[]))
            .unwrap_err()
            .contains("carol, team:security"));
        assert_eq!(overrider_teams(&policy), ["security"]);
    }

    #[test]
    fn an_outsider_a_bot_and_the_author_are_refused_with_the_reason() {
        let open = policy(&[], false);
        let outsider = Candidate {
            can_write: false,
            ..writer("mallory", &[])
        };
        assert_eq!(
            may_approve(&open, by("alice"), &outsider),
            Err(NotAllowed::NoWriteAccess)
        );
        let bot = Candidate {
            is_bot: true,
            ..writer("renovate[bot]", &[])
        };
        assert_eq!(may_approve(&open, by("alice"), &bot), Err(NotAllowed::Bot));
        assert_eq!(
            may_approve(&open, by("alice"), &writer("Alice", &[])),
            Err(NotAllowed::OwnPullRequest)
        );
        assert_eq!(
            may_approve(&policy(&[], true), by("alice"), &writer("alice", &[])),
            Ok(())
        );
        assert_eq!(may_approve(&open, by("alice"), &writer("bob", &[])), Ok(()));
    }

    #[test]
    fn an_approver_who_lost_write_access_or_left_the_team_no_longer_counts() {
        let listed = policy(&["team:platform"], false);
        let platform = vec!["platform".to_owned()];
        assert_eq!(
            may_still_approve(&listed, &writer("dave", &platform)),
            Ok(())
        );
        let left = may_still_approve(&listed, &writer("dave", &[])).unwrap_err();
        assert_eq!(
            lapsed_reason(&left),
            "they are no longer among the approvers (team:platform)"
        );
        let read_only = Candidate {
            can_write: false,
            ..writer("dave", &platform)
        };
        let lost = may_still_approve(&listed, &read_only).unwrap_err();
        assert_eq!(lost, NotAllowed::NoWriteAccess);
        assert!(lapsed_reason(&lost).contains("no longer have write access"));
    }

    #[test]
    fn approvers_are_listed_by_login_or_team() {
        let listed = policy(&["carol", "team:platform"], false);
        let platform = vec!["platform".to_owned()];
        assert_eq!(
            may_approve(&listed, by("alice"), &writer("Carol", &[])),
            Ok(())
        );
        assert_eq!(
            may_approve(&listed, by("alice"), &writer("dave", &platform)),
            Ok(())
        );
        let refused = may_approve(&listed, by("alice"), &writer("bob", &[])).unwrap_err();
        assert!(refused.to_string().contains("`team:platform`"), "{refused}");
        assert_eq!(approver_teams(&listed), vec!["platform".to_owned()]);
    }

    #[test]
    fn an_approval_expires_its_ttl_after_it_was_given() {
        assert_eq!(
            expires_at(unix(1_000), Some(millis(2_000))),
            Some(unix(3_000))
        );
        assert!(!expired(unix(1_000), Some(millis(2_000)), unix(2_999)));
        assert!(expired(unix(1_000), Some(millis(2_000)), unix(3_000)));
        assert!(!expired(unix(1_000), None, UnixMs::MAX), "no ttl: never");
    }

    fn report<'a>(head: &'a str, digest: Option<&'a Digest>, at: UnixMs) -> ReportSeen<'a> {
        ReportSeen {
            head,
            digest,
            posted_at: at,
        }
    }

    #[test]
    fn a_plain_approve_binds_the_report_posted_before_the_comment() {
        let d1 = Digest::repeated('1');
        let seen = report("h1", Some(&d1), unix(100));
        assert_eq!(bind(None, Some(&seen), "h1", Some(unix(150))), Ok(&d1));
        assert_eq!(
            bind(None, Some(&seen), "h1", Some(unix(0))),
            Ok(&d1),
            "the same second"
        );
        assert_eq!(
            bind(None, Some(&seen), "h1", Some(unix(-1000))),
            Err(Unbound::ReportNewerThanComment {
                head: "h1".into(),
                digest: d1.clone()
            })
        );
        assert_eq!(
            bind(None, Some(&seen), "h2", Some(unix(150))),
            Err(Unbound::Replanning { head: "h2".into() })
        );
        assert_eq!(
            bind(None, None, "h1", Some(unix(150))),
            Err(Unbound::NoReport)
        );
        assert_eq!(
            bind(None, Some(&report("h1", None, unix(100))), "h1", None),
            Err(Unbound::NothingToApprove)
        );
        assert_eq!(
            bind(None, Some(&seen), "h1", None),
            Err(Unbound::Undated { digest: d1.clone() }),
            "an undated comment must name the digest"
        );
    }

    #[test]
    fn a_named_digest_must_be_the_current_one() {
        let (d1, d2) = (Digest::repeated('1'), Digest::repeated('2'));
        let seen = report("h1", Some(&d1), unix(100));
        let prefix = DigestRef::Prefix("111111111111".into());
        assert_eq!(
            bind(Some(&prefix), Some(&seen), "h1", Some(unix(50))),
            Ok(&d1)
        );
        let stale = DigestRef::Full(d2.clone());
        let refused = bind(Some(&stale), Some(&seen), "h1", Some(unix(150))).unwrap_err();
        assert_eq!(
            refused,
            Unbound::NotCurrent {
                named: d2.to_string(),
                current: d1.clone()
            }
        );
        assert!(refused.to_string().contains(&format!("/approve {d1}")));
    }
}
