//! What a queued job does, as the store keeps it and the metrics label it:
//! one spelling for each, read back strictly.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobKind {
    /// Plan a pull request at the head an event named.
    Plan,
    /// Plan it again at whatever its head is now (`/plan`, a re-run).
    Replan,
    /// Read a comment for commands.
    Comment,
    /// Read a review.
    Review,
    /// A merge: start its apply run.
    Merged,
    /// Drive an apply run.
    Apply,
    /// Deliver one notification.
    Notify,
    /// Read a repository's drift schedule, or check a stage for drift.
    Drift,
}

impl JobKind {
    pub const ALL: [JobKind; 8] = [
        JobKind::Plan,
        JobKind::Replan,
        JobKind::Comment,
        JobKind::Review,
        JobKind::Merged,
        JobKind::Apply,
        JobKind::Notify,
        JobKind::Drift,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Plan => "plan",
            JobKind::Replan => "replan",
            JobKind::Comment => "comment",
            JobKind::Review => "review",
            JobKind::Merged => "merged",
            JobKind::Apply => "apply",
            JobKind::Notify => "notify",
            JobKind::Drift => "drift",
        }
    }
}

impl fmt::Display for JobKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kind of job this version does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a kind of job wavegate knows")]
pub struct UnknownJobKind(pub String);

impl FromStr for JobKind {
    type Err = UnknownJobKind;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        JobKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
            .ok_or_else(|| UnknownJobKind(text.to_owned()))
    }
}

impl serde::Serialize for JobKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_reads_back_as_it_is_written_and_nothing_else_reads() {
        for kind in JobKind::ALL {
            assert_eq!(kind.as_str().parse::<JobKind>(), Ok(kind));
        }
        assert_eq!(
            "replay".parse::<JobKind>(),
            Err(UnknownJobKind("replay".into()))
        );
        assert_eq!(
            UnknownJobKind("replay".into()).to_string(),
            "`replay` is not a kind of job wavegate knows"
        );
    }
}
