//! Reviews, written once on the shared state (a pull request's, in the
//! order they were submitted) and rendered per forge (`review_json`).

use super::*;

/// A pull request's reviews, oldest first; 404 when there is no such pull request.
pub(super) fn reviews_of(
    state: &mut State,
    forge: ForgeKind,
    full_name: &str,
    pr: u64,
) -> Result<Vec<FakeReview>, Response> {
    let repo = state.repo_mut(forge, full_name).unwrap();
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
    Ok(reviews)
}

/// A review as each forge lists it: GitHub says `DISMISSED` once it was
/// dismissed; Forgejo keeps the state (in its own words) and sets `dismissed`.
pub(super) fn review_json(
    state: &mut State,
    full_name: &str,
    r: &FakeReview,
    github: bool,
) -> Value {
    let user_id = state.user_id(&r.author);
    let html_url = format!(
        "https://forge.example/{full_name}/pull/{}#pullrequestreview-{}",
        r.pr, r.id
    );
    let pull_request_url = format!("https://forge.example/{full_name}/pull/{}", r.pr);
    if github {
        let word = if r.dismissed {
            "DISMISSED"
        } else {
            r.state.as_str()
        };
        return json!({
            "id": r.id,
            "node_id": format!("PRR_{}", r.id),
            "user": github_user(&r.author, user_id, r.author.ends_with("[bot]")),
            "body": "",
            "state": word,
            "commit_id": r.commit,
            "html_url": html_url,
            "pull_request_url": pull_request_url,
            "_links": { "html": { "href": html_url }, "pull_request": { "href": pull_request_url } },
            "author_association": "COLLABORATOR",
            "submitted_at": rfc3339(r.submitted_at),
        });
    }
    let word = match r.state.as_str() {
        "CHANGES_REQUESTED" => "REQUEST_CHANGES",
        "COMMENTED" => "COMMENT",
        other => other,
    };
    json!({
        "id": r.id,
        "user": forgejo_user(&r.author, user_id),
        "body": "",
        "state": word,
        "commit_id": r.commit,
        "dismissed": r.dismissed,
        "official": true,
        "stale": false,
        "comments_count": 0,
        "html_url": html_url,
        "pull_request_url": pull_request_url,
        "submitted_at": rfc3339(r.submitted_at),
        "updated_at": rfc3339(r.submitted_at),
    })
}
