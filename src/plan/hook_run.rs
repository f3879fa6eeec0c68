//! What running one call of a hook gives back: which call it is, how it
//! ended and the hold it asked for. The plan engine runs the call and
//! fills these in; the apply rules (`apply::hooks`) judge them.

use crate::config::hooks::Moment;
use crate::model::{Digest, MemberId, StageName};
use crate::plan::tail::OutputTail;
use serde::{Deserialize, Serialize};

/// The exit status with which a hook holds the stage on another gate,
/// having written `{gate, digest, members}` to the file in `WAVEGATE_HOLD`.
pub(crate) const HOLD_EXIT: i32 = 3;

/// Which call of a hook: at a moment of a stage, for one member or all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HookCall {
    pub(crate) stage: StageName,
    pub(crate) moment: Moment,
    pub(crate) name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) member: Option<MemberId>,
}

impl HookCall {
    /// How the report and the run's errors name it.
    pub(crate) fn label(&self) -> String {
        let member = self
            .member
            .as_ref()
            .map(|m| format!(" for {m}"))
            .unwrap_or_default();
        format!("the {} hook `{}`{member}", self.moment, self.name)
    }
}

/// What a hook asked to be held on (`WAVEGATE_HOLD`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HoldRequest {
    pub(crate) gate: String,
    pub(crate) digest: Digest,
    pub(crate) members: Vec<MemberId>,
}

/// A hold file as written, before its members are read as members.
#[derive(Deserialize)]
#[serde(rename = "HoldRequest", deny_unknown_fields)]
struct HoldFile {
    gate: String,
    digest: Digest,
    #[serde(default)]
    members: Vec<String>,
}

/// How one call of a hook's command ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HookRan {
    /// `Some(status)` when it exited; `None` when it was killed, timed out
    /// or could not start (`described` says which).
    pub(crate) exit: Option<i32>,
    /// One line saying how it ended.
    pub(crate) described: String,
    /// What it wrote to `WAVEGATE_HOLD`, read when it exited 3.
    pub(crate) hold: Option<Result<HoldRequest, String>>,
    pub(crate) printed: Option<OutputTail>,
}

/// Reads a hold file's text.
pub(crate) fn read_hold(text: &str) -> Result<HoldRequest, String> {
    let file: HoldFile = serde_json::from_str(text).map_err(|e| format!("does not read: {e}"))?;
    crate::config::hooks::check_hook_name(&file.gate).map_err(|e| {
        format!("names a gate wavegate cannot use: {e} (lowercase letters, digits and `-`)")
    })?;
    let members = file
        .members
        .iter()
        .map(|member| {
            member
                .parse::<MemberId>()
                .map_err(|e| format!("lists `{member}`, which is not a member: {e}"))
        })
        .collect::<Result<_, _>>()?;
    Ok(HoldRequest {
        gate: file.gate,
        digest: file.digest,
        members,
    })
}
