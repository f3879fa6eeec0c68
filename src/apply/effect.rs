//! What the apply machine (`machine.rs`) and a run's transitions outside
//! its waves (`run.rs`) hand the worker: the effects it carries out in
//! order, the news the pull request is told, the gate a run waits at, and
//! whether a run goes on past a wave.

use super::Wait;
use crate::config::hooks::Moment;
use crate::model::{Digest, GateId, MemberId, UnixMs};
use serde_json::{Map, Value};

/// What the worker does, in the order given. The ones that ask something
/// (`Lock`, `Plan`, `Replan`) come last in their list, and only while no
/// apply runs; the answer is the next observation. `Apply` asks nothing at
/// once: its command's `Started` and `Ended` come when they happen,
/// interleaved with the wave's other applies.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Effect {
    /// Save the run's record as it stands.
    Save,
    /// Show the run in the pull request's report and the merge commit's check (saves too).
    Publish,
    /// Lock these members for the run: answered `Locked` or `LockHeld`.
    Lock(Vec<MemberId>),
    /// Plan these members on the merge commit: answered `Planned`.
    Plan(Vec<MemberId>),
    /// Start the member's apply command: `Started`, then `Ended`, come later.
    Apply(MemberId),
    /// Start the apply call of a group's members (mates of one stage): a
    /// `Started` for each, then an `Ended` for each, come later.
    ApplyGroup(Vec<MemberId>),
    /// Plan the member again after its apply asked to: answered `Replanned`.
    Replan(MemberId),
    /// Run the stage's hooks at `moment` for these members: answered `Hooked`.
    Hooks {
        moment: Moment,
        members: Vec<MemberId>,
    },
    /// Plan these waves' members on the merge commit, wave by wave, to show a
    /// stage's set at its gate: answered `StageObservation::Previewed`.
    Preview(Vec<Vec<MemberId>>),
    /// Run the stage's cost command on these members' plans: answered
    /// `StageObservation::Priced`.
    Price(Vec<MemberId>),
    /// Who approved `digest` at `gate` in this run, whenever they did (an
    /// approval of exactly this set given before the gate opened counts):
    /// answered `StageObservation::Counted`.
    CountApprovals { gate: GateId, digest: Digest },
    /// Record the member's outputs as the deployed estate's.
    RecordDeployed {
        member: MemberId,
        outputs: Map<String, Value>,
    },
    /// Later plans in this job read these outputs of the member.
    ReadOutputs {
        member: MemberId,
        outputs: Map<String, Value>,
    },
    /// The member's later commands in this job get this in `{carry_file}`.
    Carry {
        member: MemberId,
        carry: Map<String, Value>,
    },
    /// Append a `spent` fact: the override of `digest` lets nothing through again.
    SpendOverride { member: MemberId, digest: Digest },
    /// Queue a job of this run for `at` (unix ms).
    ResumeAt(UnixMs),
    /// Let go of the run's member locks (and resume the runs queued behind them).
    Unlock,
    /// Append the `pending` fact of a gate the run now waits at (once per digest).
    RecordPending(Pending),
    /// Append a `spent` fact: the approval of `digest` at `gate` lets nothing through again.
    SpendApproval { gate: GateId, digest: Digest },
    /// Queue a job of this run now if `member`'s lock is free (or its own).
    ResumeIfUnlocked(MemberId),
    /// Tell the pull request.
    Say(News),
    /// The wave is over for this job.
    Done(Step),
}

/// What the pull request is told about its run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum News {
    /// Members failed that had not before; `meanwhile`: a wait that is new too.
    Failed { meanwhile: Option<Wait> },
    /// Every member the merge changes is deployed.
    Applied,
    /// Nothing failed or waits, but a member stood down.
    Ended,
    /// The run waits, and did not before (or waits for something else now).
    Waits(Wait),
    /// The run cannot go on (a broken config, a tampered record, the
    /// sandbox): why, and what to do.
    CannotGoOn(String),
    /// Its job failed `attempts` times, the last with `error`.
    GaveUp { attempts: u32, error: String },
}

/// A gate the run waits at for a person, for its `pending` fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pending {
    pub(crate) gate: GateId,
    pub(crate) digest: Digest,
    pub(crate) members: Vec<MemberId>,
    pub(crate) description: String,
}

/// Whether the run goes on past a wave, or stops there (it waits or failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Continue,
    Stop,
}
