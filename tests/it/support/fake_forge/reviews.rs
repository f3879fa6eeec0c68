//! Reviews: what a test does (submit, dismiss), the one read the bot makes
//! (a pull request's reviews in the order they were submitted, paged),
//! written once, and the JSON each forge lists them in (`review_json`).

use super::*;

/// A repository's routes about reviews: `GET pulls/{n}/reviews`.
pub(super) fn route(state: &mut State, call: &Call, path: &[&str]) -> Option<Answer> {
    match (call.req.method, path) {
        ("GET", ["pulls", pr, "reviews"]) => Some(list(state, call, pr)),
        _ => None,
    }
}

/// A pull request's reviews, oldest first; 404 when there is no such pull request.
fn list(state: &mut State, call: &Call, pr: &str) -> Answer {
    let pr = number(pr)?;
    let repo = state.repo_at(call.forge, call.full_name);
    if !repo.prs.iter().any(|p| p.number == pr) {
        return Err(not_found());
    }
    let mut reviews: Vec<FakeReview> = repo
        .reviews
        .iter()
        .filter(|r| r.pr == pr)
        .cloned()
        .collect();
    reviews.sort_by_key(|r| (r.submitted_at, r.id));
    one_page(state, call.req, call.forge, &reviews, |state, r| {
        review_json(state, call.forge, call.full_name, r)
    })
}

/// A review as each forge lists it: GitHub says `DISMISSED` once it was
/// dismissed; Forgejo keeps the state (in its own words) and sets `dismissed`.
fn review_json(state: &mut State, forge: ForgeKind, full_name: &str, r: &FakeReview) -> Value {
    let user = people::user_json(state, forge, &r.author);
    let html_url = format!(
        "https://forge.example/{full_name}/pull/{}#pullrequestreview-{}",
        r.pr, r.id
    );
    let pull_request_url = format!("https://forge.example/{full_name}/pull/{}", r.pr);
    match forge {
        ForgeKind::GitHub => json!({
            "id": r.id,
            "node_id": format!("PRR_{}", r.id),
            "user": user,
            "body": "",
            "state": if r.dismissed { "DISMISSED" } else { r.state.as_str() },
            "commit_id": r.commit,
            "html_url": html_url,
            "pull_request_url": pull_request_url,
            "_links": { "html": { "href": html_url }, "pull_request": { "href": pull_request_url } },
            "author_association": "COLLABORATOR",
            "submitted_at": rfc3339(r.submitted_at),
        }),
        ForgeKind::Forgejo => json!({
            "id": r.id,
            "user": user,
            "body": "",
            "state": match r.state.as_str() {
                "CHANGES_REQUESTED" => "REQUEST_CHANGES",
                "COMMENTED" => "COMMENT",
                other => other,
            },
            "commit_id": r.commit,
            "dismissed": r.dismissed,
            "official": true,
            "stale": false,
            "comments_count": 0,
            "html_url": html_url,
            "pull_request_url": pull_request_url,
            "submitted_at": rfc3339(r.submitted_at),
            "updated_at": rfc3339(r.submitted_at),
        }),
    }
}

impl FakeForge {
    /// `author` submits a review in `state` (GitHub's word: `APPROVED`,
    /// `CHANGES_REQUESTED`, `COMMENTED`) on the PR's current head, not
    /// through the API and with no webhook; as on both forges, the pull
    /// request's `updated_at` moves. Returns the review's id.
    pub fn add_review(&self, repo: &RepoHandle, pr: u64, author: &str, state: &str) -> u64 {
        assert!(
            ["APPROVED", "CHANGES_REQUESTED", "COMMENTED"].contains(&state),
            "a review is submitted as APPROVED, CHANGES_REQUESTED or COMMENTED, not {state}"
        );
        let commit = self.pr(repo, pr).head_sha;
        self.update_pr(repo, pr, |p, now| p.updated_at = now);
        self.with(|s| {
            s.user_id(author);
            let id = s.id();
            let now = s.now();
            s.repo_of(repo).reviews.push(FakeReview {
                id,
                pr,
                author: author.to_owned(),
                state: state.to_owned(),
                commit,
                submitted_at: now,
                dismissed: false,
            });
            id
        })
    }

    /// A maintainer dismisses review `id` (no webhook); the pull request's
    /// `updated_at` moves.
    pub fn dismiss_review(&self, repo: &RepoHandle, id: u64) {
        let pr = self.with(|s| {
            let review = s
                .repo_of(repo)
                .reviews
                .iter_mut()
                .find(|r| r.id == id)
                .expect("a review to dismiss");
            review.dismissed = true;
            review.pr
        });
        self.update_pr(repo, pr, |p, now| p.updated_at = now);
    }
}
