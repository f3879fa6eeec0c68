//! How a pull request's head is written, the same by the store's queries
//! (`sql.rs`) and by both intake writers (`intake.rs`, `intake_file.rs`).

use super::db::to_i64;
use super::PrHead;
use crate::model::UnixMs;
use anyhow::Result;

/// What a head's upsert sets, the pusher kept when the head names none.
pub(super) const UPSERT_PR_HEAD: &str = "ON CONFLICT (forge, repo, number) DO UPDATE
         SET head_sha = excluded.head_sha, base_ref = excluded.base_ref,
             is_open = excluded.is_open, updated_at = excluded.updated_at,
             pusher_head = COALESCE(excluded.pusher_head, pull_requests.pusher_head),
             pusher_id = COALESCE(excluded.pusher_id, pull_requests.pusher_id),
             pusher_login = COALESCE(excluded.pusher_login, pull_requests.pusher_login)";

/// Where the sweep starts reading a pull request's comments when the bot
/// first hears of it (the upsert keeps it after): a minute before, for the
/// forge's clock. Comments from before were the webhooks' (or of a pull
/// request the bot never heard of), and are not run by the sweep.
pub(super) fn first_comments_mark(now: UnixMs) -> UnixMs {
    now - std::time::Duration::from_secs(60)
}

/// The pusher columns of a head: all three, or none.
pub(super) fn pusher_columns(
    head: &PrHead,
) -> Result<(Option<String>, Option<i64>, Option<String>)> {
    Ok(match &head.pusher {
        Some(user) => (
            Some(head.head_sha.as_str().to_owned()),
            Some(to_i64(user.id, "pusher id")?),
            Some(user.login.clone()),
        ),
        None => (None, None, None),
    })
}
