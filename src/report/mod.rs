//! Reports of a planned change: the JSON report (for machines and the future
//! check run), the markdown PR comment, and the terminal text of `wavegate plan`.
//!
//! Renderers only format what the engine computed; none derives anything.

pub(crate) mod apply;
pub(crate) mod approvals;
pub(crate) mod drift;
pub(crate) mod entries;
#[cfg(test)]
mod inert;
pub mod json;
pub mod markdown;
pub(crate) mod refusal;
pub(crate) mod reply;
pub mod text;

use crate::plan::fanout::{SkipReason, Skipped};
use crate::plan::planfile::Counts;

/// Longest comment a forge accepts (GitHub's limit; Forgejo's is larger).
pub(crate) const COMMENT_LIMIT: usize = 65_536;

/// The hidden marker that finds the report comment again.
pub const REPORT_MARKER: &str = "<!-- wavegate:report -->";

pub(crate) fn reason_text(skip: &Skipped) -> String {
    match (&skip.reason, &skip.blocked_by) {
        (SkipReason::Blocked, Some(by)) => format!("blocked by {by}"),
        (SkipReason::Blocked, None) => "blocked".into(),
        (SkipReason::Unaffected, _) => "unaffected".into(),
        (SkipReason::NotInStage, _) => "not in the requested stage".into(),
    }
}

pub(crate) fn counts_text(c: &Counts) -> String {
    entries::counts_text(c)
}
