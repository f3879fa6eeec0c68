//! What a sweep lists a repository by, one page at a time, asked for
//! conditionally: its open pull requests, the comments written on its
//! issues and pull requests since a time, and one pull request's reviews. A page the forge answers 304 (the
//! `ETag` it gave last time still holds) costs GitHub's rate limit nothing,
//! so a quiet repository is swept for free; what the forge says of the
//! budget left comes with every answer and paces the sweep.

use super::retry::Reply;
use super::types::Comment;
use super::{PrState, PullRequest, ReviewState};
use crate::model::{CommitSha, PrNumber, UnixMs, User};
use reqwest::header::HeaderMap;
use serde::de::DeserializeOwned;

/// One page of a listing asked for with the `ETag` of the last answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Page<T> {
    /// 304: the page is as it was when that `ETag` was given.
    NotModified,
    Fresh {
        items: Vec<T>,
        etag: Option<String>,
        /// Another page follows (a `rel="next"` link, or a full page).
        more: bool,
    },
}

/// An open pull request as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedPull {
    pub(crate) pr: PullRequest,
    pub(crate) state: PrState,
    /// When it last changed (unix ms, the forge's clock).
    pub(crate) updated_at: Option<UnixMs>,
}

/// A comment from a repository's listing, with the issue or pull request
/// it was written on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedComment {
    pub(crate) pr: PrNumber,
    pub(crate) comment: Comment,
}

/// A submitted review of a pull request, as its listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedReview {
    pub id: u64,
    pub author: User,
    /// Given by this bot's own account (Forgejo: the token's user).
    pub(crate) ours: bool,
    /// Dismissed, whatever it was before, once it was dismissed.
    pub state: ReviewState,
    /// The commit it was given at.
    pub commit: Option<CommitSha>,
    /// When it was submitted (unix ms, the forge's clock).
    pub submitted_at: Option<UnixMs>,
}

/// A listed review's state in our terms, from the forge's word (GitHub
/// `APPROVED`, `CHANGES_REQUESTED`, `COMMENTED`, `DISMISSED`; Forgejo
/// `APPROVED`, `REQUEST_CHANGES`, `COMMENT` and a `dismissed` flag). None:
/// not a submitted review (`PENDING`, Forgejo's `REQUEST_REVIEW`) or a word
/// we do not know.
pub(crate) fn review_state(word: &str, dismissed: bool) -> Option<ReviewState> {
    let state = match word.to_ascii_uppercase().as_str() {
        "APPROVED" => ReviewState::Approved,
        "CHANGES_REQUESTED" | "REQUEST_CHANGES" => ReviewState::ChangesRequested,
        "COMMENTED" | "COMMENT" => ReviewState::Commented,
        "DISMISSED" => ReviewState::Dismissed,
        _ => return None,
    };
    Some(if dismissed {
        ReviewState::Dismissed
    } else {
        state
    })
}

/// The request budget as the forge's last answer stated it (GitHub's
/// `x-ratelimit-*` headers; Forgejo sends none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RateBudget {
    pub(crate) limit: u64,
    pub(crate) remaining: u64,
    /// When the window resets (unix s).
    pub(crate) reset_at: i64,
}

impl RateBudget {
    /// Read from an answer's headers; None when the forge stated no limit.
    pub(crate) fn from_headers(headers: &HeaderMap) -> Option<Self> {
        let number = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<i64>().ok();
        Some(Self {
            limit: u64::try_from(number("x-ratelimit-limit")?).ok()?,
            remaining: u64::try_from(number("x-ratelimit-remaining")?).ok()?,
            reset_at: number("x-ratelimit-reset").unwrap_or(0),
        })
    }

    /// Whether a sweep allowed `share` (0–1] of the budget may still spend:
    /// the rest, `limit × (1 − share)`, is kept for the jobs. A window that
    /// has reset by `now` (unix s) is whole again.
    pub(crate) fn sweep_may_spend(&self, share: f64, now: i64) -> bool {
        if self.reset_at > 0 && now >= self.reset_at {
            return true;
        }
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let spendable = (self.limit as f64 * share.clamp(0.0, 1.0)).round() as u64;
        self.remaining > self.limit.saturating_sub(spendable)
    }
}

/// One page of a listing from the forge's answer to `call`: a 304 is
/// [`Page::NotModified`]; otherwise its items through `convert` (`None`
/// leaves one out), its `ETag`, and whether another page follows (a next
/// link, or a full page of `page_size`).
pub(super) fn read_page<W: DeserializeOwned, T>(
    reply: Reply,
    call: &str,
    page_size: usize,
    convert: impl FnMut(W) -> anyhow::Result<Option<T>>,
) -> anyhow::Result<Page<T>> {
    if reply.status == 304 {
        return Ok(Page::NotModified);
    }
    let reply = reply.success(call)?;
    let etag = etag(&reply.headers);
    let linked = has_next_link(&reply.headers);
    let batch: Vec<W> = reply.json(call)?;
    let full = batch.len() >= page_size;
    let items = batch
        .into_iter()
        .map(convert)
        .filter_map(Result::transpose)
        .collect::<anyhow::Result<Vec<T>>>()?;
    Ok(Page::Fresh {
        items,
        etag,
        more: linked || full,
    })
}

/// The `ETag` of an answer, to send back as `If-None-Match`.
pub(crate) fn etag(headers: &HeaderMap) -> Option<String> {
    Some(headers.get("etag")?.to_str().ok()?.to_owned())
}

/// Whether a `Link` header names a next page.
pub(crate) fn has_next_link(headers: &HeaderMap) -> bool {
    headers
        .get_all("link")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|link| link.contains("rel=\"next\"")))
}

/// The issue or pull request number at the end of a comment's
/// `issue_url` or `pull_request_url` (`…/issues/5`, `…/pulls/5`).
pub(crate) fn number_from_url(url: &str) -> Option<PrNumber> {
    let (rest, last) = url.trim_end_matches('/').rsplit_once('/')?;
    if !(rest.ends_with("/issues") || rest.ends_with("/pulls") || rest.ends_with("/pull")) {
        return None;
    }
    last.parse().ok().filter(|n| *n > 0).map(PrNumber)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn the_budget_is_read_from_githubs_headers_and_absent_without_them() {
        let budget = RateBudget::from_headers(&headers(&[
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "4321"),
            ("x-ratelimit-reset", "1700000000"),
        ]));
        assert_eq!(
            budget,
            Some(RateBudget {
                limit: 5000,
                remaining: 4321,
                reset_at: 1_700_000_000
            })
        );
        assert_eq!(RateBudget::from_headers(&headers(&[])), None);
        assert_eq!(
            RateBudget::from_headers(&headers(&[
                ("x-ratelimit-limit", "5000"),
                ("x-ratelimit-remaining", "many")
            ])),
            None
        );
    }

    #[test]
    fn a_sweep_spends_only_its_share_and_the_rest_is_kept_for_jobs() {
        let budget = |remaining| RateBudget {
            limit: 5000,
            remaining,
            reset_at: 2_000,
        };
        assert!(budget(2501).sweep_may_spend(0.5, 1_000));
        assert!(!budget(2500).sweep_may_spend(0.5, 1_000));
        assert!(budget(1001).sweep_may_spend(0.8, 1_000));
        assert!(!budget(1000).sweep_may_spend(0.8, 1_000));
        // Once the window has reset, the whole budget is back.
        assert!(budget(0).sweep_may_spend(0.5, 2_000));
    }

    #[test]
    fn a_next_link_is_found_among_others() {
        let link = r#"<https://api.github.com/x?page=1>; rel="prev", <https://api.github.com/x?page=3>; rel="next""#;
        assert!(has_next_link(&headers(&[("link", link)])));
        let last = r#"<https://api.github.com/x?page=1>; rel="first""#;
        assert!(!has_next_link(&headers(&[("link", last)])));
        assert!(!has_next_link(&headers(&[])));
    }

    #[test]
    fn review_states_are_read_from_either_forges_words() {
        assert_eq!(review_state("APPROVED", false), Some(ReviewState::Approved));
        assert_eq!(
            review_state("CHANGES_REQUESTED", false),
            Some(ReviewState::ChangesRequested)
        );
        assert_eq!(
            review_state("REQUEST_CHANGES", false),
            Some(ReviewState::ChangesRequested)
        );
        assert_eq!(review_state("COMMENT", false), Some(ReviewState::Commented));
        assert_eq!(
            review_state("DISMISSED", false),
            Some(ReviewState::Dismissed)
        );
        // Forgejo keeps the state a dismissed review had, and flags it.
        assert_eq!(review_state("APPROVED", true), Some(ReviewState::Dismissed));
        assert_eq!(review_state("PENDING", false), None);
        assert_eq!(review_state("REQUEST_REVIEW", false), None);
    }

    #[test]
    fn a_comments_number_is_read_from_either_forges_url() {
        assert_eq!(
            number_from_url("https://api.github.com/repos/acme/infra/issues/12"),
            Some(PrNumber(12))
        );
        assert_eq!(
            number_from_url("https://forge.example/acme/infra/pulls/7"),
            Some(PrNumber(7))
        );
        assert_eq!(number_from_url(""), None);
        assert_eq!(number_from_url("https://x/acme/infra/commits/7"), None);
        assert_eq!(number_from_url("https://x/acme/infra/issues/zero"), None);
    }
}
