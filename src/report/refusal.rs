//! Why a comment command was not carried out, in the words the reply uses:
//! each refusal says what stands in the way and what to write instead. The
//! worker decides which refusal applies; this is the one place it is worded.

use crate::gate::commands;
use crate::gate::policy::{NotAllowed, Unbound};
use crate::model::untrusted::{code, message};
use crate::model::{Digest, GateId, StageName, UnixMs};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A command that did not parse: its text, what is wrong, the fix.
    Malformed {
        text: String,
        problem: String,
        fix: String,
    },
    /// A `/word` that is no command.
    Unknown {
        word: String,
    },
    /// `/plan` on a closed pull request.
    ClosedNothingToPlan,
    /// The comment names no digest the report showed, or the wrong one.
    Unbound(Unbound),
    /// An `/approve` at the apply run's gate that does not bind what it
    /// waits for: why, the stage that waits, and the line to copy.
    RunUnbound {
        why: Unbound,
        stage: Option<StageName>,
        line: String,
    },
    /// The commenter may not approve under the base branch's policy.
    NotAllowed(NotAllowed),
    /// The base branch's config cannot be read, so nothing is approved: why.
    BaseConfig(String),
    /// The forge could not say what the commenter may do.
    PermissionUnknown {
        error: String,
    },
    /// `/approve <stage>` naming no stage of the base branch's config.
    NotAStage {
        stage: String,
        stages: Vec<StageName>,
    },
    /// `/approve <stage> [wave <k>]` before the apply run reached that stage.
    StageNotPlannedYet {
        stage: StageName,
        wave: Option<u32>,
    },
    /// `/approve <stage>` after the stage's gate expired (at, unix ms).
    StageExpired {
        stage: String,
        at: Option<UnixMs>,
    },
    /// `/approve` while the run waits for nothing a person approves.
    RunWaitsForNoApproval,
    /// `/approve <stage> [wave <k>]` while the run waits at another
    /// stage's gate, or another wave's.
    RunWaitsElsewhere {
        gate: GateId,
        waiting: Option<StageName>,
        named: String,
        named_wave: Option<u32>,
        digest: Digest,
    },
    NothingToRevoke,
    NoRunToRetry,
    RetryNeedsWrite,
    NothingLeftToRetry,
    NoPlanToOverride,
    /// `/override` of a member whose current plan no policy denied.
    NotDenied {
        member: String,
    },
    /// `/override` naming something that is not `component@stage`.
    NotAMember(String),
    /// The commenter may not override under the base branch's policy.
    NotOverrider(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed { text, problem, fix } => write!(
                f,
                "{}: {}; {}",
                code(text.trim()),
                message(problem),
                message(fix)
            ),
            Self::Unknown { word } => write!(
                f,
                "{} is not a wavegate command.\n\n{}",
                code(word),
                commands::help_text()
            ),
            Self::ClosedNothingToPlan => f.write_str(
                "the pull request is closed: there is nothing to plan. After a merge, the apply run plans on the merge commit by itself",
            ),
            Self::Unbound(why) => write!(f, "{why}"),
            Self::RunUnbound { why, stage, line } => {
                let waits = stage
                    .as_ref()
                    .map_or_else(|| "the apply run".to_owned(), |s| format!("stage {s}"));
                match why {
                    Unbound::ReportNewerThanComment { digest, .. } => write!(
                        f,
                        "what {waits} waits for was posted after you wrote your comment (now `{digest}`), so it is not clear which you meant: review it in the run's section and approve with `{line}`"
                    ),
                    Unbound::Undated { .. } => write!(
                        f,
                        "the forge did not say when your comment was written, so it is not clear which plans of {waits} you saw; name them: `{line}`"
                    ),
                    Unbound::NotCurrent { named, current } => write!(
                        f,
                        "{} is not what {waits} waits for (`{current}`): review the run's section and approve with `{line}`",
                        code(named)
                    ),
                    other => write!(f, "{other}"),
                }
            }
            Self::NotAllowed(why) => write!(f, "{why}"),
            Self::BaseConfig(why) | Self::NotAMember(why) | Self::NotOverrider(why) => {
                f.write_str(&message(why))
            }
            Self::PermissionUnknown { error } => {
                write!(f, "wavegate could not check your permission: {error}")
            }
            Self::NotAStage { stage, stages } => write!(
                f,
                "{} is not a stage of this repository (stages: {}); write `/approve` for the whole change, or `/approve <stage>`",
                code(stage),
                stages
                    .iter()
                    .map(StageName::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Self::StageNotPlannedYet { stage, wave } => write!(
                f,
                "{} approves {}'s own plans, which the apply run posts here when it reaches {} after merge; there is no such plan to approve now. Approve the change itself with `/approve`",
                code(&crate::model::approve_stage_words(stage.as_str(), *wave)),
                stage_or_wave(stage.as_str(), *wave),
                if wave.is_some() { "that wave" } else { "that stage" }
            ),
            Self::StageExpired { stage, at } => write!(
                f,
                "stage {stage}'s gate expired{} with no approval (its `timeout` on the base branch), so its members did not apply; `/retry` opens a fresh gate for it, which you can then approve",
                at.map(|at| format!(" at {at}"))
                    .unwrap_or_default()
            ),
            Self::RunWaitsForNoApproval => f.write_str("the apply run waits for no approval"),
            Self::RunWaitsElsewhere {
                gate,
                waiting,
                named,
                named_wave,
                digest,
            } => {
                let at = match gate {
                    GateId::Wave(_, stage, wave) => format!("stage {stage}'s wave {wave}"),
                    _ => format!("stage {}", waiting.as_ref().map_or("?", StageName::as_str)),
                };
                let approve = match gate {
                    GateId::Stage(..) | GateId::Wave(..) => gate.approve_words(),
                    _ => format!("/approve {}", waiting.as_ref().map_or("", StageName::as_str)),
                };
                write!(
                    f,
                    "the apply run waits at `{gate}` ({at}), not at {}; write `{approve} {digest}`",
                    stage_or_wave(named, *named_wave),
                )
            }
            Self::NothingToRevoke => f.write_str(
                "there is no standing approval for you to revoke; an approval can be revoked by whoever gave it, or by a repository admin",
            ),
            Self::NoRunToRetry => f.write_str(
                "there is no apply run to retry: applies start after the pull request is merged",
            ),
            Self::RetryNeedsWrite => f.write_str("`/retry` needs write access to the repository"),
            Self::NothingLeftToRetry => f.write_str(
                "the apply run already applied every member; there is nothing to retry",
            ),
            Self::NoPlanToOverride => f.write_str(
                "there is no current plan of this pull request to override a denial of; comment `/plan` first",
            ),
            Self::NotDenied { member } => write!(
                f,
                "the policy did not deny a plan of {} in this pull request's current plan; `/override` lets exactly such a plan through",
                code(member)
            ),
        }
    }
}

/// The one reply to a comment some of whose commands were refused.
/// "stage `prod`", or "stage `prod`'s wave 2".
fn stage_or_wave(stage: &str, wave: Option<u32>) -> String {
    match wave {
        Some(wave) => format!("stage {}'s wave {wave}", code(stage)),
        None => format!("stage {}", code(stage)),
    }
}

pub(crate) fn reply(login: &str, refusals: &[Refusal]) -> String {
    let said: Vec<String> = refusals.iter().map(Refusal::to_string).collect();
    format!("@{login}: {}", said.join("\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::time::in_tests::unix;

    #[test]
    fn at_the_run_gate_a_refusal_names_the_stage_and_its_own_line() {
        let digest = Digest::repeated('b');
        let line = format!("/approve prod {digest}");
        let replanned = Refusal::RunUnbound {
            why: Unbound::ReportNewerThanComment {
                head: "c".repeat(40),
                digest: digest.clone(),
            },
            stage: Some("prod".into()),
            line: line.clone(),
        };
        insta::assert_snapshot!(reply("erin", &[replanned]), @"@erin: what stage prod waits for was posted after you wrote your comment (now `sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb`), so it is not clear which you meant: review it in the run's section and approve with `/approve prod sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb`");
    }

    #[test]
    fn one_reply_names_the_commenter_once_and_each_refusal_in_turn() {
        let refusals = [
            Refusal::NotAStage {
                stage: "qa".into(),
                stages: vec!["dev".into(), "prod".into()],
            },
            Refusal::StageExpired {
                stage: "prod".into(),
                at: Some(unix(1_764_460_800_000)),
            },
            Refusal::RunWaitsElsewhere {
                gate: "pr-7-prod".parse().unwrap(),
                waiting: Some("prod".into()),
                named: "dev".into(),
                named_wave: None,
                digest: Digest::repeated('a'),
            },
            Refusal::RunWaitsElsewhere {
                gate: "pr-7-prod-wave-2".parse().unwrap(),
                waiting: Some("prod".into()),
                named: "prod".into(),
                named_wave: Some(3),
                digest: Digest::repeated('a'),
            },
            Refusal::StageNotPlannedYet {
                stage: "prod".into(),
                wave: Some(1),
            },
        ];
        insta::assert_snapshot!(reply("erin", &refusals), @r"
        @erin: `qa` is not a stage of this repository (stages: dev, prod); write `/approve` for the whole change, or `/approve <stage>`

        stage prod's gate expired at 2025-11-30 00:00:00 UTC with no approval (its `timeout` on the base branch), so its members did not apply; `/retry` opens a fresh gate for it, which you can then approve

        the apply run waits at `pr-7-prod` (stage prod), not at stage `dev`; write `/approve prod sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa`

        the apply run waits at `pr-7-prod-wave-2` (stage prod's wave 2), not at stage `prod`'s wave 3; write `/approve prod wave 2 sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa`

        `/approve prod wave 1` approves stage `prod`'s wave 1's own plans, which the apply run posts here when it reaches that wave after merge; there is no such plan to approve now. Approve the change itself with `/approve`
        ");
    }
}
