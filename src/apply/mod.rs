//! Apply runs (docs/approvals-and-applying.md): the attempt record a run keeps in the
//! store, and the pure decisions that drive it — where each member stands,
//! what a failure blocks, whether a stage waits at its gate, and whether a
//! fresh plan is covered by something a person approved. The worker runs
//! the commands and writes the record before and after each one.

pub(crate) mod branches;
pub(crate) mod effect;
pub(crate) mod hooks;
pub(crate) mod machine;
pub(crate) mod run;
pub(crate) mod stage;

use crate::config::repo::{Component, GatePolicy};
use crate::model::{Digest, GateId, MemberId, PrNumber, StageName, UnixMs};
use crate::plan::changeset::ChangeSet;
use crate::plan::coverage::{coverage, Coverage, FreshPlan};
use crate::plan::preview::Approvers;
use crate::plan::tail::OutputTail;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// How often an apply command may answer `replan` for one member in a row.
pub(crate) const MAX_REPLANS: u32 = 10;

/// Where one member of a run stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub(crate) enum MemberState {
    NotStarted,
    /// Its apply command started and was not seen to finish: after a crash
    /// it is planned again before anything else happens to it, once that
    /// command cannot be running any more.
    Applying {
        plan_digest: Digest,
        /// Where and until when the command may run (absent in records of
        /// wavegate before 0.2: such a command is taken as gone).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<CommandAttempt>,
    },
    Applied {
        plan_digest: Digest,
        outputs: Map<String, Value>,
        /// How it came to count as applied when no command ran for it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    Failed {
        error: String,
    },
    Blocked {
        by: MemberId,
    },
    /// Its wave stopped before applying (a gate, a lock, a denial).
    Waiting {
        reason: String,
    },
    /// Another run or tool holds its target: a wait on that holder, tried
    /// again at `retry_at` (ms), later each time it is still held.
    Held {
        holder: String,
        /// How many applies in a row were answered `held`.
        #[serde(default)]
        tries: u32,
        #[serde(default)]
        retry_at: UnixMs,
    },
    /// Its apply ended it without applying, on purpose: not a failure.
    StoodDown {
        reason: String,
    },
    /// Its group's apply failed before it reached the member: nothing was
    /// done to it, and what depends on it cannot go on.
    NotReached {
        reason: String,
    },
    /// In the approved change set, but the merge commit does not touch it.
    Unaffected,
}

/// Where an apply command was started, and by when it is dead for sure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CommandAttempt {
    /// The host that started it (`sandbox::process::host_id`).
    pub(crate) host: String,
    /// Milliseconds since the epoch.
    pub(crate) started_at: UnixMs,
    /// Past this (ms) the command is gone whatever became of its server: the
    /// sandbox kills it itself at its timeout plus a grace.
    pub(crate) deadline: UnixMs,
    /// The started process, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) process: Option<crate::sandbox::process::ProcessId>,
    /// The server that starts it. Every command dies with the server that
    /// started it (`PR_SET_PDEATHSIG`), so before its own process is known,
    /// a gone server says the command is gone too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) server: Option<crate::sandbox::process::ProcessId>,
}

/// Whether an earlier apply command of a member caught `applying` can still
/// be running: only once it cannot is the member planned (and maybe applied)
/// again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EarlierAttempt {
    Gone,
    /// Look again at `until` (ms).
    MayRun {
        until: UnixMs,
    },
}

/// The host an attempt names when its command runs on the forge's CI
/// (`executor = "actions"`): no host id (`boot/pid-namespace`) is written
/// so, so from every bot only the attempt's deadline says it is over.
pub(crate) const ELSEWHERE: &str = "forge-ci";

/// How often a process seen alive on this host is looked at again.
pub(crate) const RECHECK_ALIVE: std::time::Duration = std::time::Duration::from_secs(2);

/// Decides about an earlier attempt. On the host that started it, the
/// process itself is looked at, or before it was known the server that
/// started it (`alive`: whether that is still there); from anywhere else, or
/// without either to look at, only its deadline tells.
pub(crate) fn earlier_attempt(
    attempt: Option<&CommandAttempt>,
    here: &str,
    now: UnixMs,
    alive: Option<bool>,
) -> EarlierAttempt {
    let Some(attempt) = attempt else {
        return EarlierAttempt::Gone;
    };
    if now >= attempt.deadline {
        return EarlierAttempt::Gone;
    }
    let known = attempt.process.is_some() || attempt.server.is_some();
    match (attempt.host == here, known, alive) {
        (true, true, Some(false)) => EarlierAttempt::Gone,
        (true, true, Some(true)) => EarlierAttempt::MayRun {
            until: (now + RECHECK_ALIVE).min(attempt.deadline),
        },
        _ => EarlierAttempt::MayRun {
            until: attempt.deadline,
        },
    }
}

/// The first of `record`'s members whose apply command may still be
/// running, and until when, as [`earlier_attempt`] decides it from this
/// host (whose own processes it looks at).
pub(crate) fn apply_in_flight(record: &AttemptRecord, now: UnixMs) -> Option<(MemberId, UnixMs)> {
    use crate::sandbox::process;
    let here = process::host_id();
    record
        .members
        .iter()
        .filter_map(|(member, state)| {
            let MemberState::Applying { attempt, .. } = state else {
                return None;
            };
            let alive = attempt
                .as_ref()
                .filter(|attempt| attempt.host == here)
                .and_then(|attempt| attempt.process.as_ref().or(attempt.server.as_ref()))
                .map(process::is_alive);
            match earlier_attempt(attempt.as_ref(), &here, now, alive) {
                EarlierAttempt::Gone => None,
                EarlierAttempt::MayRun { until } => Some((member.clone(), until)),
            }
        })
        .min_by_key(|(_, until)| *until)
}

impl MemberState {
    pub(crate) fn is_applied(&self) -> bool {
        matches!(self, MemberState::Applied { .. })
    }

    /// Stopped for good in this attempt: its downstream cannot go on.
    pub(crate) fn stops_downstream(&self) -> bool {
        matches!(
            self,
            MemberState::Failed { .. }
                | MemberState::Blocked { .. }
                | MemberState::Held { .. }
                | MemberState::StoodDown { .. }
                | MemberState::NotReached { .. }
        )
    }

    pub(crate) fn label(&self) -> String {
        match self {
            MemberState::NotStarted => "not started".into(),
            MemberState::Applying { .. } => "applying".into(),
            MemberState::Applied { note: None, .. } => "applied".into(),
            MemberState::Applied { note: Some(n), .. } => format!("applied ({n})"),
            MemberState::Failed { error } => format!("failed: {}", failure_summary(error)),
            MemberState::Blocked { by } => format!("blocked by {by}"),
            MemberState::Waiting { reason } => format!("waiting: {reason}"),
            MemberState::Held { holder, .. } => format!("held by {holder}; tried again by itself"),
            MemberState::StoodDown { reason } => format!("stood down: {reason}"),
            MemberState::NotReached { reason } => format!("not started: {reason}"),
            MemberState::Unaffected => {
                "not applied: approved, but the merge does not change it against the target before it".into()
            }
        }
    }
}

/// The first line of a failure, without the `; last output:` that
/// introduces the command's output on the lines after it (shown apart).
pub(crate) fn failure_summary(error: &str) -> &str {
    let first = error.lines().next().unwrap_or("");
    first.strip_suffix("; last output:").unwrap_or(first)
}

/// The run as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum RunStatus {
    Running,
    /// Stopped at a gate, a lock, a denial or a holder; resumes by itself.
    Waiting,
    /// A member failed (whatever else waits); `/retry` resumes.
    Failed,
    Applied,
    /// Nothing failed and nothing waits, but a member stood down: the run
    /// applied what it could and ends there.
    Ended,
}

impl RunStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Failed => "failed",
            RunStatus::Applied => "applied",
            RunStatus::Ended => "ended",
        }
    }

    /// Nothing more happens to the run by itself or by an approval.
    pub(crate) fn is_final(self) -> bool {
        matches!(self, RunStatus::Applied | RunStatus::Ended)
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        [
            RunStatus::Running,
            RunStatus::Waiting,
            RunStatus::Failed,
            RunStatus::Applied,
            RunStatus::Ended,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

/// What a waiting run waits for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "for", rename_all = "kebab-case")]
pub(crate) enum Wait {
    /// Merged without a standing approval of the pull request's digest.
    PrApproval { gate: GateId, digest: Digest },
    /// A stage whose gate asks for its own approval of its set digest.
    Stage {
        stage: StageName,
        gate: GateId,
        digest: Digest,
    },
    /// Fresh plans the approvals in hand do not cover.
    Round {
        round: u32,
        gate: GateId,
        digest: Digest,
    },
    /// A plan the policy denied, until an overrider lets it through; `also`
    /// lists the other denied plans of the same wave (one wait for all).
    Override {
        member: MemberId,
        gate: GateId,
        digest: Digest,
        rules: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        also: Vec<Denial>,
    },
    /// Another run is applying some of this wave's members.
    Lock { member: MemberId, pr: PrNumber },
    /// Another run or tool holds `member`'s target (its apply said `held`);
    /// tried again at `until` (ms).
    Holder {
        member: MemberId,
        holder: String,
        until: UnixMs,
    },
    /// An apply of `member` whose server stopped may still be running; the
    /// run looks again at `until` (ms) and never applies it twice.
    EarlierAttempt { member: MemberId, until: UnixMs },
    /// A hook of `stage` waits at `gate` for an approval of `digest`: its
    /// own failure's, or (`hold`) the gate it asked to hold the stage on.
    Hook {
        stage: StageName,
        moment: crate::config::hooks::Moment,
        hook: String,
        gate: GateId,
        digest: Digest,
        #[serde(default)]
        members: Vec<MemberId>,
        #[serde(default)]
        hold: bool,
    },
}

/// One plan the policy denied: which member, its plan digest, the rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Denial {
    pub(crate) member: MemberId,
    pub(crate) digest: Digest,
    pub(crate) rules: Vec<String>,
}

impl Wait {
    /// Every denial an `Override` wait waits on, the first one first.
    pub(crate) fn denials(&self) -> Vec<Denial> {
        match self {
            Wait::Override {
                member,
                digest,
                rules,
                also,
                ..
            } => std::iter::once(Denial {
                member: member.clone(),
                digest: digest.clone(),
                rules: rules.clone(),
            })
            .chain(also.iter().cloned())
            .collect(),
            _ => Vec::new(),
        }
    }

    /// Whether this wait is news after `previous` (and said so on the pull
    /// request): looking again for the same earlier apply is the same wait.
    pub(crate) fn is_new_since(&self, previous: Option<&Wait>) -> bool {
        match (self, previous) {
            (
                Wait::EarlierAttempt { member, .. },
                Some(Wait::EarlierAttempt { member: before, .. }),
            )
            | (Wait::Holder { member, .. }, Some(Wait::Holder { member: before, .. })) => {
                member != before
            }
            // Fewer of the same denials (one was overridden) is not news.
            (Wait::Override { .. }, Some(before @ Wait::Override { .. })) => {
                let said = before.denials();
                self.denials().iter().any(|d| !said.contains(d))
            }
            (wait, previous) => Some(wait) != previous,
        }
    }

    /// Whether a person has to act (approve, override); the others end by
    /// themselves (a lock let go, a holder let go, an earlier apply ended).
    pub(crate) fn needs_a_person(&self) -> bool {
        matches!(
            self,
            Wait::PrApproval { .. }
                | Wait::Stage { .. }
                | Wait::Round { .. }
                | Wait::Override { .. }
                | Wait::Hook { .. }
        )
    }
}

/// A stage that asked for its own approval: the set it showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StageGate {
    pub(crate) gate: GateId,
    pub(crate) change_set: ChangeSet,
    /// Who approved it; empty while it waits.
    #[serde(default)]
    pub(crate) approved_by: Vec<String>,
    /// While it waits: the newest approval of another digest at its gate
    /// (an earlier set of this stage), shown like the pull request's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mismatch: Option<Mismatch>,
    /// When the gate opened (unix ms): approvals given before it do not count.
    #[serde(default)]
    pub(crate) opened_at: UnixMs,
    /// When its wait expires (the base's `[[stage]] timeout`), if ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) expires_at: Option<UnixMs>,
    /// Nobody approved it in time: its members failed; `/retry` opens a fresh gate.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) expired: bool,
    /// Who may approve it, as the base's policy for the stage says (none on
    /// a gate recorded before the run kept it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) approvers: Option<Approvers>,
    /// How its plans compare with the ones reviewed in the pull request:
    /// why each that the approved change set does not cover moved (empty:
    /// every plan is the one reviewed; none on a gate recorded before the
    /// run compared them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) unlike_reviewed: Option<Vec<String>>,
}

impl StageGate {
    /// The stage the gate belongs to (a stage's gate or one wave's always
    /// names it).
    pub(crate) fn stage(&self) -> Option<&str> {
        match &self.gate {
            GateId::Stage(_, stage) | GateId::Wave(_, stage, _) => Some(stage.as_str()),
            _ => None,
        }
    }
}

#[cfg(test)]
impl StageGate {
    /// A gate `gate` opened on `change_set` at 0, never approved, with no
    /// expiry, approvers or comparison: what a test changes it from.
    pub(crate) fn open_for_test(gate: &str, change_set: ChangeSet) -> Self {
        Self {
            gate: gate.parse().expect("a test's gate is named well"),
            change_set,
            approved_by: Vec::new(),
            mismatch: None,
            opened_at: UnixMs::EPOCH,
            expires_at: None,
            expired: false,
            approvers: None,
            unlike_reviewed: None,
        }
    }
}

/// An approval that stands for another digest than the one a gate waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Mismatch {
    pub(crate) by: String,
    pub(crate) digest: Digest,
}

/// A re-plan checked against the approvals: covered (it only filled in what
/// was unknown) or waiting for its own approval at `gate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Round {
    pub(crate) number: u32,
    pub(crate) gate: GateId,
    pub(crate) stage: StageName,
    pub(crate) change_set: ChangeSet,
    /// Why each member was not covered; empty for a covered round.
    pub(crate) reasons: Vec<String>,
    /// Inputs that were unknown when approved and are known now.
    #[serde(default)]
    pub(crate) filled: Vec<String>,
    #[serde(default)]
    pub(crate) approved_by: Vec<String>,
    /// While it waits: the newest approval of another digest at its gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mismatch: Option<Mismatch>,
}

impl Round {
    pub(crate) fn covered(&self) -> bool {
        self.reasons.is_empty()
    }
}

/// Everything a run completed, and where it stopped: the resume point,
/// written before and after every apply command.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct AttemptRecord {
    /// Who approved the pull request's digest; empty until someone did.
    pub(crate) pr_approved_by: Vec<String>,
    pub(crate) members: BTreeMap<MemberId, MemberState>,
    pub(crate) stages: BTreeMap<String, StageGate>,
    pub(crate) rounds: Vec<Round>,
    /// Overrides that counted, by member: the plan digest they let through.
    pub(crate) overrides: BTreeMap<MemberId, Digest>,
    /// How many times in a row each member's apply asked to plan again.
    pub(crate) replans: BTreeMap<MemberId, u32>,
    pub(crate) wait: Option<Wait>,
    /// When `wait` was posted (unix ms): an `/approve` written earlier did not see it.
    pub(crate) wait_posted_at: UnixMs,
    /// Where the run is (stage, 1-based wave), for the report.
    pub(crate) at: Option<(StageName, usize)>,
    /// Each stage's waves on the merge commit, in order, for the report.
    pub(crate) layout: Vec<(StageName, Vec<Vec<MemberId>>)>,
    /// Stages whose `always` gate was skipped: their plans change nothing.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub(crate) gates_skipped: BTreeSet<String>,
    /// Approvals the run would have used that no longer count, as the last
    /// job found them (checked again whenever the run goes on).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) lapsed: Vec<Lapsed>,
    /// The end of what each member's latest apply command printed.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) printed: BTreeMap<MemberId, OutputTail>,
    /// The forge's page of the CI run each member's latest apply ran in,
    /// for those whose apply ran on the forge's CI.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) ran_on: BTreeMap<MemberId, String>,
    /// What each member's applies carried (`{"carry": …}`), for its later
    /// commands' `{carry_file}`: kept across crashes and `/retry`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) carried: BTreeMap<MemberId, Map<String, Value>>,
    /// How often `/retry` started the run over: news after a retry is news
    /// again (its notifications are keyed by it).
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) retries: u32,
    /// Each hook call's latest outcome, in the order they ran.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) hooks: Vec<hooks::HookRecord>,
    /// Members that applied and whose stage's `after.apply` hooks have not
    /// passed for them yet: the wave is not done until they do.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub(crate) after_apply_due: BTreeSet<MemberId>,
    /// Each priced stage's cost that let it through (approved and allowed
    /// or overridden), by stage: it is not priced again in the run, where
    /// later jobs see only what is left of the stage.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) costs_passed: BTreeMap<String, Digest>,
    /// The members each previewed stage's gate, cost and `after.plan`
    /// hooks were decided over (those that planned on the merge commit): a
    /// member outside it (one that failed to plan, retried) makes the
    /// stage decide afresh before it applies.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) stage_decided: BTreeMap<String, BTreeSet<MemberId>>,
    /// The approvals (gate and digest) the run has spent, each as soon as
    /// what it let through had applied: spent once, and still counted as
    /// given for the rest of this run.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(crate) spent: BTreeSet<(GateId, Digest)>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// An approval a run found no longer counting: who, at which gate, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Lapsed {
    pub(crate) gate: GateId,
    pub(crate) by: String,
    pub(crate) why: String,
}

impl AttemptRecord {
    /// The members a wait is about, as the record holds them: a stage's
    /// set, a round's, the denied plans, the member held or caught
    /// applying or queued; `None` for the pull request's own approval,
    /// whose set the caller has.
    pub(crate) fn members_of_wait(&self, wait: &Wait) -> Option<Vec<MemberId>> {
        let names = |set: &ChangeSet| set.members.iter().map(|m| m.member.clone()).collect();
        Some(match wait {
            Wait::PrApproval { .. } => return None,
            Wait::Stage { gate, .. } => self
                .stage_gate(gate)
                .map(|g| names(&g.change_set))
                .unwrap_or_default(),
            Wait::Round { round, .. } => self
                .rounds
                .iter()
                .find(|r| r.number == *round)
                .map(|r| names(&r.change_set))
                .unwrap_or_default(),
            Wait::Override { .. } => wait.denials().into_iter().map(|d| d.member).collect(),
            Wait::Hook { members, .. } => members.clone(),
            Wait::Lock { member, .. }
            | Wait::Holder { member, .. }
            | Wait::EarlierAttempt { member, .. } => vec![member.clone()],
        })
    }

    /// The run's members, stage by stage and wave by wave.
    pub(crate) fn members_in_order(&self) -> Vec<&str> {
        self.layout
            .iter()
            .flat_map(|(_, waves)| waves.iter().flatten().map(MemberId::as_str))
            .collect()
    }

    /// A member's state, by its name or its id.
    pub(crate) fn state(&self, member: impl AsRef<str>) -> MemberState {
        self.members
            .get(member.as_ref())
            .cloned()
            .unwrap_or(MemberState::NotStarted)
    }

    pub(crate) fn set(&mut self, member: &MemberId, state: MemberState) {
        self.members.insert(member.clone(), state);
    }

    /// The outputs every applied member left, for its downstreams to read.
    pub(crate) fn applied_outputs(&self) -> impl Iterator<Item = (&MemberId, &Map<String, Value>)> {
        self.members.iter().filter_map(|(m, s)| match s {
            MemberState::Applied { outputs, .. } => Some((m, outputs)),
            _ => None,
        })
    }

    /// What stood down for `member` in this run, if anything: it, or
    /// what blocked it, stood down.
    pub(crate) fn stood_down_root(&self, member: &MemberId) -> Option<MemberId> {
        let mut at = member.clone();
        for _ in 0..=self.members.len() {
            match self.members.get(&at)? {
                MemberState::StoodDown { .. } => return Some(at),
                MemberState::Blocked { by } if *by != at => at = by.clone(),
                _ => return None,
            }
        }
        None
    }

    /// A stand-down ends its member's subtree for the run (seeds 003: the
    /// waves after a stood-down job do not run for it): a member of
    /// `stage` whose component stood down in an earlier stage stands down
    /// too, and one whose upstream stood down is blocked by it.
    pub(crate) fn stand_down_after(
        &mut self,
        stage: &str,
        waves: &[Vec<MemberId>],
        upstreams: &BTreeMap<MemberId, Vec<MemberId>>,
    ) {
        let earlier: Vec<StageName> = self
            .layout
            .iter()
            .map(|(s, _)| s.clone())
            .take_while(|s| s != stage)
            .collect();
        for member in waves.iter().flatten() {
            let state = self.state(member);
            // One caught applying keeps its attempt: whether it may still
            // run is the wave's to find out.
            let settled = state.is_applied()
                || state == MemberState::Unaffected
                || state.stops_downstream()
                || matches!(state, MemberState::Applying { .. });
            if settled {
                continue;
            }
            let before = earlier
                .iter()
                .find_map(|s| self.stood_down_root(&MemberId::of(member.component(), s.as_str())));
            if let Some(root) = before {
                let reason = format!("with {root}, which a newer push deploys");
                self.set(member, MemberState::StoodDown { reason });
                continue;
            }
            let upstream = upstreams
                .get(member)
                .into_iter()
                .flatten()
                .find_map(|u| self.stood_down_root(u));
            if let Some(by) = upstream {
                self.set(member, MemberState::Blocked { by });
            }
        }
    }

    /// A member's state, or for a blocked one the state of what blocked it.
    pub(crate) fn root_state(&self, member: impl AsRef<str>) -> MemberState {
        let member = member.as_ref();
        let mut state = self.state(member);
        for _ in 0..self.members.len() {
            match &state {
                MemberState::Blocked { by } if by != member => state = self.state(by),
                _ => break,
            }
        }
        state
    }

    /// The next round's number: round 1 is the pull request's own plan.
    pub(crate) fn next_round(&self) -> u32 {
        self.rounds.iter().map(|r| r.number).max().unwrap_or(1) + 1
    }

    /// `/retry`: members that failed, were held, stood down or were blocked
    /// start over (planned again and checked for coverage first); applied
    /// ones stay applied. Returns whether anything was reset.
    pub(crate) fn reset_for_retry(&mut self) -> bool {
        let mut reset = false;
        // An expired stage gate opens afresh when the run reaches it again.
        self.stages.retain(|_, gate| !gate.expired);
        let mut again = BTreeSet::new();
        for (member, state) in self.members.iter_mut() {
            if state.stops_downstream() || matches!(state, MemberState::Waiting { .. }) {
                *state = MemberState::NotStarted;
                again.insert(member.clone());
                reset = true;
            }
        }
        // A spent approval lets nothing through again: one whose set holds a
        // member that starts over is read from the ledger anew (where it is
        // spent), so that member needs a new approval.
        let read_again: Vec<(GateId, Digest)> = self
            .gate_sets()
            .filter(|(_, set, _)| set.members.iter().any(|m| again.contains(&m.member)))
            .map(|(gate, set, _)| (gate.clone(), set.digest.clone()))
            .collect();
        self.spent.retain(|spent| !read_again.contains(spent));
        self.replans.clear();
        let hooks = self.hooks.len();
        self.hooks
            .retain(|h| !matches!(h.state, hooks::HookState::Failed { .. }));
        reset |= hooks != self.hooks.len();
        self.retries += 1;
        reset
    }

    /// Records a round of `stage`: covered (no `reasons`; `filled` says what
    /// became known), or waiting at its own gate for an approval of `set`'s
    /// digest. A round with the digest of one recorded is that round again.
    pub(crate) fn open_round(
        &mut self,
        (pr, stage): (PrNumber, &str),
        set: ChangeSet,
        reasons: Vec<String>,
        filled: Vec<String>,
    ) {
        let waits = !reasons.is_empty();
        let digest = set.digest.clone();
        let number = match self.rounds.iter().find(|r| r.change_set.digest == digest) {
            Some(known) => known.number,
            None => {
                let number = self.next_round();
                self.rounds.push(Round {
                    number,
                    gate: GateId::Round(pr, number),
                    stage: StageName::new(stage),
                    change_set: set,
                    reasons,
                    filled,
                    approved_by: Vec::new(),
                    mismatch: None,
                });
                number
            }
        };
        if waits {
            self.wait = Some(Wait::Round {
                round: number,
                gate: GateId::Round(pr, number),
                digest,
            });
        }
    }

    /// Each stage gate (a stage's or a wave's) and round of the run: its
    /// gate, its set, and who approved it (none yet: empty).
    pub(crate) fn gate_sets(&self) -> impl Iterator<Item = (&GateId, &ChangeSet, &[String])> {
        let stages = self
            .stages
            .values()
            .map(|g| (&g.gate, &g.change_set, g.approved_by.as_slice()));
        let rounds = self
            .rounds
            .iter()
            .map(|r| (&r.gate, &r.change_set, r.approved_by.as_slice()));
        stages.chain(rounds)
    }

    /// The stage gate (a stage's or a wave's) named `gate`.
    pub(crate) fn stage_gate(&self, gate: &GateId) -> Option<&StageGate> {
        self.stages.get(&gate.stage_gate_key()?)
    }

    /// What a person approved that may cover a fresh plan in `stage`: that
    /// stage's own set when its gate asked for one (or `wave`'s of a stage
    /// approved wave by wave; the pull request's set does not stand in for
    /// it), else the pull request's set; and the
    /// rounds approved in that stage. Each list is empty until approved.
    pub(crate) fn approved_sets<'a>(
        &'a self,
        pr_set: &'a ChangeSet,
        stage: &str,
        wave: Option<u32>,
    ) -> (Vec<&'a ChangeSet>, Vec<&'a ChangeSet>) {
        let mut base = Vec::new();
        match self.stages.get(&crate::model::stage_gate_key(stage, wave)) {
            Some(gate) if !gate.approved_by.is_empty() => base.push(&gate.change_set),
            Some(_) => {}
            None if !self.pr_approved_by.is_empty() => base.push(pr_set),
            None => {}
        }
        let rounds = self
            .rounds
            .iter()
            .filter(|r| r.stage == stage && !r.approved_by.is_empty())
            .map(|r| &r.change_set)
            .collect();
        (base, rounds)
    }
}

/// Whether a fresh plan is covered by any of `approved`; otherwise the
/// reason the first of them (the pull request's) gives.
pub(crate) fn covered_by_any(approved: &[&ChangeSet], fresh: &FreshPlan<'_>) -> Coverage {
    let mut first = None;
    for set in approved {
        match coverage(set, fresh) {
            Coverage::Covered => return Coverage::Covered,
            not => {
                first.get_or_insert(not);
            }
        }
    }
    first.unwrap_or_else(|| {
        Coverage::NotCovered(format!(
            "{}: nothing approved covers it yet",
            fresh.plan.member
        ))
    })
}

/// Whether a stage waits for its own approval before applying anything:
/// never when every one of its plans changes nothing (there is nothing to
/// approve), and under `on-destructive` only when one deletes or replaces.
pub(crate) fn stage_needs_approval(
    gate: GatePolicy,
    any_destructive: bool,
    nothing_changes: bool,
) -> bool {
    if nothing_changes {
        return false;
    }
    match gate {
        GatePolicy::Always => true,
        GatePolicy::OnDestructive => any_destructive,
        GatePolicy::Never => false,
    }
}

/// A component's upstream members in `stage`.
pub(crate) fn upstream_members(component: &Component, stage: &str) -> Vec<MemberId> {
    component
        .depends_on
        .iter()
        .map(|d| MemberId::of(d, stage))
        .collect()
}

/// The member, among a member's `upstreams`, that stopped it: the failed
/// (held, stood-down) upstream itself, or what blocked that upstream.
pub(crate) fn stopped_upstream(upstreams: &[MemberId], record: &AttemptRecord) -> Option<MemberId> {
    upstreams
        .iter()
        .find_map(|upstream| match record.members.get(upstream)? {
            MemberState::Blocked { by } => Some(by.clone()),
            s if s.stops_downstream() => Some(upstream.clone()),
            _ => None,
        })
}

/// The derivation's waves of one stage, in order.
pub(crate) fn stage_waves<'a>(waves: &'a [Vec<MemberId>], stage: &str) -> Vec<&'a [MemberId]> {
    waves
        .iter()
        .filter(|w| w.first().is_some_and(|m| m.stage() == stage))
        .map(Vec::as_slice)
        .collect()
}

/// How a run stands once nothing more can happen in this job. A failure
/// outranks a wait (the wait is still shown and still resumes the rest);
/// a held member is a wait on its holder; a member that stood down ends
/// the run neither applied nor failed.
pub(crate) fn settled_status(record: &AttemptRecord, members: &BTreeSet<MemberId>) -> RunStatus {
    let roots: Vec<MemberState> = members.iter().map(|m| record.root_state(m)).collect();
    if roots
        .iter()
        .any(|s| matches!(s, MemberState::Failed { .. }))
    {
        return RunStatus::Failed;
    }
    if hooks::failed_after_apply(record).is_some() {
        return RunStatus::Failed;
    }
    if record.wait.is_some() || roots.iter().any(|s| matches!(s, MemberState::Held { .. })) {
        return RunStatus::Waiting;
    }
    if roots
        .iter()
        .all(|s| s.is_applied() || *s == MemberState::Unaffected)
    {
        return RunStatus::Applied;
    }
    if roots.iter().all(|s| {
        s.is_applied() || matches!(s, MemberState::Unaffected | MemberState::StoodDown { .. })
    }) {
        return RunStatus::Ended;
    }
    RunStatus::Failed
}

/// Whether a run has anything left to drive: a running or waiting one, or a
/// failed one whose other part still waits (an approval there goes on with
/// it, while what failed waits for `/retry`).
pub(crate) fn run_goes_on(status: RunStatus, record: &AttemptRecord) -> bool {
    match status {
        RunStatus::Running | RunStatus::Waiting => true,
        RunStatus::Failed => record.wait.is_some(),
        RunStatus::Applied | RunStatus::Ended => false,
    }
}

pub(crate) use crate::config::settings::HELD_RETRY;

/// How long a held member waits before its apply is tried again (ms):
/// `first`, doubling with every `held` in a row, at most 15 minutes.
pub(crate) fn held_backoff(first: std::time::Duration, tries: u32) -> std::time::Duration {
    const MOST: std::time::Duration = std::time::Duration::from_secs(15 * 60);
    first
        .saturating_mul(1_u32 << tries.saturating_sub(1).min(20))
        .min(MOST)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::ledger::{Actor, Fact, FactData, FactKind, NewFact, Source};
    use crate::model::time::in_tests::unix;
    use crate::plan::changeset::{ChangeSetMember, MemberStatus};
    use crate::plan::planfile::MemberPlan;
    use std::time::Duration;

    /// An override of `digest` for `member` (or its revoke or spend), given by olga.
    pub(super) fn override_fact(member: &str, digest: &Digest, kind: FactKind) -> Fact {
        Fact {
            seq: 1,
            fact: NewFact {
                repo: "github:1".into(),
                gate: "pr-7-override".parse().unwrap(),
                kind,
                digest: digest.into(),
                actor: Actor {
                    id: 11,
                    login: "olga".into(),
                },
                at: unix(999_999),
                source: Source::Comment { id: 1 },
                data: FactData {
                    member: Some(member.parse().unwrap()),
                    ..FactData::default()
                },
            },
            prev: Digest::repeated('0'),
            hash: Digest::repeated('0'),
            sig: None,
        }
    }
    pub(super) fn plan(member: &str, cidr: &str) -> MemberPlan {
        let text = format!(
            r#"{{"summary": "", "entries": [{{"address": "aws_vpc.main", "action": "update", "after": {{"cidr": "{cidr}", "id": null}}, "unknown": ["id"]}}]}}"#
        );
        MemberPlan::parse(&member.into(), text.as_bytes()).unwrap()
    }

    /// A member planned as `plan` on the merge commit.
    pub(super) fn outcome(plan: &MemberPlan) -> crate::plan::outcome::MemberOutcome {
        let id = plan.member.clone();
        crate::plan::outcome::MemberOutcome {
            member: plan.member.clone(),
            component: id.component().to_owned(),
            stage: StageName::new(id.stage()),
            status: MemberStatus::Planned,
            plan: Some(plan.clone()),
            error: None,
            blocked_by: None,
            inputs: BTreeMap::new(),
            output: String::new(),
            discovered: None,
            ran_on: None,
        }
    }

    pub(super) fn set_of(plans: &[&MemberPlan]) -> ChangeSet {
        ChangeSet::new(
            plans
                .iter()
                .map(|p| ChangeSetMember {
                    member: p.member.clone(),
                    status: MemberStatus::Planned,
                    plan_digest: Some(p.plan_digest.clone()),
                    unknown_inputs: vec![],
                    build_inputs: vec![],
                    group_inputs: vec![],
                    discovered: None,
                    inputs: Map::new(),
                    plan: Some((*p).clone()),
                    ran_on: None,
                })
                .collect(),
        )
        .unwrap()
    }

    fn component(name: &str, depends_on: &[&str]) -> Component {
        Component {
            quiet: Vec::new(),
            name: name.into(),
            dir: name.into(),
            paths: vec![],
            stage_paths: vec![],
            files: vec![],
            stage_files: vec![],
            depends_on: depends_on.iter().map(|d| (*d).into()).collect(),
            inputs: vec![],
            stages: vec!["dev".into()],
            plan: vec!["plan".into()],
            apply: None,
            outputs: None,
            timeout: Duration::from_secs(1),
            kind: crate::config::repo::ComponentKind::Infra,
            discovered: None,
        }
    }

    #[test]
    fn a_fresh_plan_is_covered_by_any_approved_set_and_otherwise_names_what_moved() {
        let approved = plan("net@dev", "10.0.0.0/16");
        let drifted = plan("net@dev", "10.9.0.0/16");
        let pr = set_of(&[&approved]);
        let inputs = Map::new();
        let fresh = FreshPlan {
            plan: &drifted,
            inputs: &inputs,
            discovered: None,
            applied: None,
        };
        match covered_by_any(&[&pr], &fresh) {
            Coverage::NotCovered(why) => {
                assert!(why.contains("net@dev") && why.contains("cidr"), "{why}")
            }
            Coverage::Covered => panic!("a moved cidr is not covered"),
        }
        let round = set_of(&[&drifted]);
        assert_eq!(covered_by_any(&[&pr, &round], &fresh), Coverage::Covered);
        assert!(matches!(
            covered_by_any(&[], &fresh),
            Coverage::NotCovered(why) if why.contains("nothing approved")
        ));
    }

    #[test]
    fn the_approved_sets_are_only_those_someone_approved_for_that_stage() {
        let pr = set_of(&[&plan("net@dev", "10.0.0.0/16")]);
        let mut record = AttemptRecord::default();
        let count = |r: &AttemptRecord, stage: &str| {
            let (base, rounds) = r.approved_sets(&pr, stage, None);
            (base.len(), rounds.len())
        };
        assert_eq!(count(&record, "dev"), (0, 0));
        record.pr_approved_by = vec!["bob".into()];
        record.rounds.push(Round {
            number: 2,
            gate: "pr-1-round-2".parse().unwrap(),
            stage: "dev".into(),
            change_set: set_of(&[&plan("net@dev", "10.9.0.0/16")]),
            reasons: vec!["moved".into()],
            filled: vec![],
            approved_by: vec![],
            mismatch: None,
        });
        assert_eq!(count(&record, "dev"), (1, 0));
        record.rounds[0].approved_by = vec!["carol".into()];
        assert_eq!(count(&record, "dev"), (1, 1));
        assert_eq!(
            count(&record, "prod"),
            (1, 0),
            "a round counts in its own stage"
        );
        assert_eq!(record.next_round(), 3);
        // A gated stage is covered by its own set, never by the pull request's.
        record.stages.insert(
            "prod".into(),
            StageGate::open_for_test("pr-1-prod", pr.clone()),
        );
        assert_eq!(count(&record, "prod"), (0, 0));
        record.stages.get_mut("prod").unwrap().approved_by = vec!["carol".into()];
        assert_eq!(count(&record, "prod"), (1, 0));
    }

    #[test]
    fn a_failure_blocks_only_its_own_subtree_and_names_the_root() {
        let mut record = AttemptRecord::default();
        record.set(
            &"network@dev".into(),
            MemberState::Failed {
                error: "exit 1".into(),
            },
        );
        record.set(
            &"database@dev".into(),
            MemberState::Blocked {
                by: "network@dev".into(),
            },
        );
        let app = component("app", &["database"]);
        assert_eq!(
            stopped_upstream(&upstream_members(&app, "dev"), &record),
            Some("network@dev".into())
        );
        let dns = component("dns", &["network"]);
        assert_eq!(
            stopped_upstream(&upstream_members(&dns, "dev"), &record),
            Some("network@dev".into())
        );
        let lone = component("lone", &["other"]);
        record.set(
            &"other@dev".into(),
            MemberState::Applied {
                plan_digest: Digest::repeated('d'),
                outputs: Map::new(),
                note: None,
            },
        );
        assert_eq!(
            stopped_upstream(&upstream_members(&lone, "dev"), &record),
            None
        );
    }

    #[test]
    fn a_stand_down_ends_its_subtree_in_later_stages_for_the_run() {
        let id = |m: &str| MemberId::from(m);
        let prod = vec![vec![id("app@prod"), id("db@prod")], vec![id("dns@prod")]];
        let mut record = AttemptRecord {
            layout: vec![
                ("dev".into(), vec![vec![id("app@dev"), id("db@dev")]]),
                ("prod".into(), prod.clone()),
            ],
            ..AttemptRecord::default()
        };
        record.set(
            &id("app@dev"),
            MemberState::StoodDown {
                reason: "a newer push deploys it".into(),
            },
        );
        record.set(
            &id("db@dev"),
            MemberState::Applied {
                plan_digest: Digest::repeated('d'),
                outputs: Map::new(),
                note: None,
            },
        );
        let upstreams = BTreeMap::from([(id("dns@prod"), vec![id("app@prod")])]);
        record.stand_down_after("prod", &prod, &upstreams);
        assert_eq!(
            record.state("app@prod").label(),
            "stood down: with app@dev, which a newer push deploys"
        );
        assert_eq!(record.state("dns@prod").label(), "blocked by app@prod");
        assert_eq!(
            record.state("db@prod"),
            MemberState::NotStarted,
            "not in its subtree"
        );
        record.set(
            &id("db@prod"),
            MemberState::Applied {
                plan_digest: Digest::repeated('d'),
                outputs: Map::new(),
                note: None,
            },
        );
        let all = record.members.keys().cloned().collect();
        assert_eq!(settled_status(&record, &all), RunStatus::Ended);
    }

    #[test]
    fn retry_starts_over_what_stopped_and_keeps_what_applied() {
        let mut record = AttemptRecord::default();
        let applied = MemberState::Applied {
            plan_digest: Digest::repeated('d'),
            outputs: Map::new(),
            note: None,
        };
        record.set(&"a@dev".into(), applied.clone());
        record.set(&"b@dev".into(), MemberState::Failed { error: "x".into() });
        record.set(&"c@dev".into(), MemberState::Blocked { by: "b@dev".into() });
        record.replans.insert("b@dev".into(), 3);
        assert!(record.reset_for_retry());
        assert_eq!(record.state("a@dev"), applied);
        assert_eq!(record.state("b@dev"), MemberState::NotStarted);
        assert_eq!(record.state("c@dev"), MemberState::NotStarted);
        assert!(record.replans.is_empty());
        assert!(!record.reset_for_retry());
    }

    /// A record saved while members were plain names reads as members and
    /// is written back unchanged: members, waits, blockers, hooks and a
    /// stage's cost member all keep the spelling they were stored with.
    #[test]
    fn a_record_saved_with_members_as_names_reads_and_writes_back_the_same() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let stored = serde_json::json!({
            "members": {
                "app@prod": {"state": "blocked", "by": "network@prod"},
                "network@prod": {"state": "failed", "error": "boom"},
            },
            "overrides": {"cost@prod": digest},
            "wait": {
                "for": "override",
                "member": "cost@prod",
                "gate": "pr-7-override",
                "digest": digest,
                "rules": ["max_monthly_increase"],
            },
            "hooks": [{
                "stage": "prod",
                "moment": "before.apply",
                "name": "migrate",
                "member": "app@prod",
                "state": {"outcome": "passed"},
            }],
            "after_apply_due": ["network@prod"],
        });
        let record: AttemptRecord = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(
            record.state("app@prod"),
            MemberState::Blocked {
                by: MemberId::of("network", "prod")
            }
        );
        assert_eq!(
            record.hooks[0].call.member.as_ref().map(MemberId::stage),
            Some("prod")
        );
        let written = serde_json::to_value(&record).unwrap();
        for field in ["members", "overrides", "wait", "hooks", "after_apply_due"] {
            assert_eq!(written[field], stored[field], "{field}");
        }
    }

    #[test]
    fn a_run_settles_applied_only_when_every_member_applied() {
        let members: BTreeSet<MemberId> = ["a@dev".into(), "b@dev".into()].into();
        let mut record = AttemptRecord::default();
        let applied = MemberState::Applied {
            plan_digest: Digest::repeated('d'),
            outputs: Map::new(),
            note: None,
        };
        record.set(&"a@dev".into(), applied.clone());
        record.set(&"b@dev".into(), MemberState::Unaffected);
        assert_eq!(settled_status(&record, &members), RunStatus::Applied);
        record.set(&"b@dev".into(), MemberState::Failed { error: "x".into() });
        assert_eq!(settled_status(&record, &members), RunStatus::Failed);
        record.wait = Some(Wait::Lock {
            member: "c@dev".into(),
            pr: PrNumber(2),
        });
        assert_eq!(
            settled_status(&record, &members),
            RunStatus::Failed,
            "a failure outranks a wait (which stays in the record, shown)"
        );
        record.set(&"b@dev".into(), MemberState::NotStarted);
        assert_eq!(settled_status(&record, &members), RunStatus::Waiting);
    }

    #[test]
    fn a_held_member_is_a_wait_and_a_stood_down_one_ends_the_run_without_failing() {
        let members: BTreeSet<MemberId> = ["a@dev".into(), "b@dev".into(), "c@dev".into()].into();
        let mut record = AttemptRecord::default();
        record.set(
            &"a@dev".into(),
            MemberState::Applied {
                plan_digest: Digest::repeated('d'),
                outputs: Map::new(),
                note: None,
            },
        );
        record.set(
            &"b@dev".into(),
            MemberState::Held {
                holder: "run 7".into(),
                tries: 1,
                retry_at: unix(5),
            },
        );
        record.set(&"c@dev".into(), MemberState::Blocked { by: "b@dev".into() });
        assert_eq!(settled_status(&record, &members), RunStatus::Waiting);
        assert_eq!(
            record.root_state("c@dev"),
            record.state("b@dev"),
            "blocked by what holds its upstream"
        );

        record.set(
            &"b@dev".into(),
            MemberState::StoodDown {
                reason: "a newer push".into(),
            },
        );
        assert_eq!(settled_status(&record, &members), RunStatus::Ended);
        assert!(RunStatus::Ended.is_final());
        assert!(!run_goes_on(RunStatus::Ended, &record));

        record.set(&"c@dev".into(), MemberState::Failed { error: "x".into() });
        assert_eq!(settled_status(&record, &members), RunStatus::Failed);
        assert!(
            !run_goes_on(RunStatus::Failed, &record),
            "nothing else waits"
        );
        record.wait = Some(Wait::Round {
            round: 2,
            gate: "pr-1-round-2".parse().unwrap(),
            digest: Digest::repeated('1'),
        });
        assert!(
            run_goes_on(RunStatus::Failed, &record),
            "an approval of the other part goes on with it"
        );
    }

    #[test]
    fn a_held_apply_is_tried_again_later_each_time_it_stays_held() {
        let first = std::time::Duration::from_secs(30);
        let minutes = |n: u64| std::time::Duration::from_secs(60 * n);
        assert_eq!(held_backoff(first, 1), first);
        assert_eq!(held_backoff(first, 2), minutes(1));
        assert_eq!(held_backoff(first, 3), minutes(2));
        assert_eq!(held_backoff(first, 10), minutes(15), "at most 15 minutes");
        assert_eq!(held_backoff(first, 200), minutes(15));
    }

    #[test]
    fn stage_gates_follow_the_base_policy_and_skip_when_nothing_changes() {
        use GatePolicy::*;
        assert!(stage_needs_approval(Always, false, false));
        assert!(
            !stage_needs_approval(Always, false, true),
            "nothing to approve"
        );
        assert!(stage_needs_approval(OnDestructive, true, false));
        assert!(!stage_needs_approval(OnDestructive, false, false));
        assert!(!stage_needs_approval(Never, true, false));
    }

    #[test]
    fn the_record_reads_back_what_it_wrote() {
        let mut record = AttemptRecord::default();
        record.set(
            &"a@dev".into(),
            MemberState::Applying {
                plan_digest: Digest::repeated('1'),
                attempt: Some(CommandAttempt {
                    host: "boot/pid:[1]".into(),
                    started_at: unix(1),
                    deadline: unix(2),
                    process: Some(crate::sandbox::process::ProcessId { pid: 7, start: 9 }),
                    server: Some(crate::sandbox::process::ProcessId { pid: 3, start: 2 }),
                }),
            },
        );
        record.wait = Some(Wait::Stage {
            stage: "prod".into(),
            gate: "pr-1-prod".parse().unwrap(),
            digest: Digest::repeated('2'),
        });
        let text = serde_json::to_string(&record).unwrap();
        assert_eq!(
            serde_json::from_str::<AttemptRecord>(&text).unwrap(),
            record
        );
        assert_eq!(
            stage_waves(
                &[
                    vec!["a@dev".parse().unwrap()],
                    vec!["a@prod".parse().unwrap()]
                ],
                "prod"
            )
            .len(),
            1
        );
    }

    fn attempt(host: &str, deadline: UnixMs, process: bool) -> CommandAttempt {
        CommandAttempt {
            host: host.into(),
            started_at: unix(0),
            deadline,
            process: process.then_some(crate::sandbox::process::ProcessId { pid: 42, start: 7 }),
            server: None,
        }
    }

    #[test]
    fn before_its_process_is_known_an_earlier_apply_on_this_host_goes_with_its_server() {
        let here = "boot-a/pid:[1]";
        let saved = CommandAttempt {
            server: Some(crate::sandbox::process::ProcessId { pid: 9, start: 3 }),
            ..attempt(here, unix(100_000), false)
        };
        assert_eq!(
            earlier_attempt(Some(&saved), here, unix(1_000), Some(false)),
            EarlierAttempt::Gone,
            "its server is gone, and took every command it started along"
        );
        assert_eq!(
            earlier_attempt(Some(&saved), here, unix(1_000), Some(true)),
            EarlierAttempt::MayRun {
                until: unix(1_000) + RECHECK_ALIVE
            },
            "its server still runs: it may start it yet"
        );
        let elsewhere = CommandAttempt {
            host: "boot-b/pid:[1]".into(),
            ..saved
        };
        assert_eq!(
            earlier_attempt(Some(&elsewhere), here, unix(1_000), Some(false)),
            EarlierAttempt::MayRun {
                until: unix(100_000)
            },
            "another host's server cannot be looked at"
        );
    }

    #[test]
    fn an_earlier_apply_on_this_host_is_gone_once_its_process_is() {
        let here = "boot-a/pid:[1]";
        let started = attempt(here, unix(100_000), true);
        assert_eq!(
            earlier_attempt(Some(&started), here, unix(1_000), Some(false)),
            EarlierAttempt::Gone
        );
        assert_eq!(
            earlier_attempt(Some(&started), here, unix(1_000), Some(true)),
            EarlierAttempt::MayRun {
                until: unix(1_000) + RECHECK_ALIVE
            },
            "alive: looked at again soon"
        );
        assert_eq!(
            earlier_attempt(Some(&started), here, unix(99_000), Some(true)),
            EarlierAttempt::MayRun {
                until: unix(100_000)
            },
            "never later than its deadline"
        );
    }

    #[test]
    fn an_earlier_apply_elsewhere_or_without_a_known_process_waits_for_its_deadline() {
        let here = "boot-a/pid:[1]";
        for (what, earlier) in [
            (
                "another host",
                attempt("boot-b/pid:[1]", unix(100_000), true),
            ),
            (
                "another pid namespace",
                attempt("boot-a/pid:[2]", unix(100_000), true),
            ),
            (
                "no process recorded yet",
                attempt(here, unix(100_000), false),
            ),
        ] {
            assert_eq!(
                earlier_attempt(Some(&earlier), here, unix(1_000), Some(false)),
                EarlierAttempt::MayRun {
                    until: unix(100_000)
                },
                "{what}"
            );
            assert_eq!(
                earlier_attempt(Some(&earlier), here, unix(100_000), None),
                EarlierAttempt::Gone,
                "{what}: past its deadline"
            );
        }
        assert_eq!(
            earlier_attempt(None, here, unix(0), None),
            EarlierAttempt::Gone,
            "a record from before attempts were kept"
        );
    }
}
