//! Webhook bodies built from the forges' real published examples
//! (`../shared/fixtures`), with the repository, pull request, issue, sha,
//! user and installation fields patched to the fake forge's state, and the signatures
//! each forge puts on them.

use super::fake_forge::{FakeIssue, FakePr, RepoHandle};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use std::path::PathBuf;

pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures")
}

fn fixture(relative: &str) -> Value {
    let path = fixtures_dir().join(relative);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading fixture {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("fixture {relative}: {e}"))
}

/// Sets `pointer` (`/a/b/c`) to `value`, creating missing objects on the way.
fn put(document: &mut Value, pointer: &str, value: Value) {
    let mut target = document;
    let keys: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    let (last, parents) = keys.split_last().expect("a JSON pointer");
    for key in parents {
        if !target.get(*key).is_some_and(Value::is_object) {
            target[*key] = json!({});
        }
        target = &mut target[*key];
    }
    target[*last] = value;
}

fn owner_and_name(repo: &RepoHandle) -> (String, String) {
    let (owner, name) = repo.full_name.split_once('/').expect("owner/name");
    (owner.to_owned(), name.to_owned())
}

/// Test users get stable ids derived from their login.
fn user_id(login: &str) -> u64 {
    login
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
        % 1_000_000
        + 1
}

fn patch_github_repo(document: &mut Value, pointer: &str, repo: &RepoHandle) {
    let (owner, name) = owner_and_name(repo);
    put(document, &format!("{pointer}/id"), json!(repo.id));
    put(document, &format!("{pointer}/name"), json!(name));
    put(
        document,
        &format!("{pointer}/full_name"),
        json!(repo.full_name),
    );
    put(
        document,
        &format!("{pointer}/clone_url"),
        json!(repo.clone_url),
    );
    put(document, &format!("{pointer}/owner/login"), json!(owner));
}

fn patch_github_user(document: &mut Value, pointer: &str, login: &str) {
    put(document, &format!("{pointer}/login"), json!(login));
    put(document, &format!("{pointer}/id"), json!(user_id(login)));
    let kind = if login.ends_with("[bot]") {
        "Bot"
    } else {
        "User"
    };
    put(document, &format!("{pointer}/type"), json!(kind));
}

fn patch_github_installation(document: &mut Value, repo: &RepoHandle) {
    match repo.installation {
        Some(id) => put(
            document,
            "/installation",
            json!({ "id": id, "node_id": "fake" }),
        ),
        None => {
            document.as_object_mut().unwrap().remove("installation");
        }
    }
}

/// A `pull_request` delivery: `(X-GitHub-Event, body)`. `action`: opened,
/// reopened, synchronize, closed (merged as the fake's PR says), edited.
pub fn github_pull_request(action: &str, repo: &RepoHandle, pr: &FakePr) -> (String, Vec<u8>) {
    let source = match action {
        "synchronize" => "github/webhooks/pull_request/synchronize.payload.json",
        "closed" => "github/webhooks/pull_request/closed.payload.json",
        _ => "github/webhooks/pull_request/opened.payload.json",
    };
    let mut d = fixture(source);
    put(&mut d, "/action", json!(action));
    put(&mut d, "/number", json!(pr.number));
    put(&mut d, "/pull_request/number", json!(pr.number));
    put(&mut d, "/pull_request/id", json!(pr.id));
    put(&mut d, "/pull_request/title", json!(pr.title));
    put(
        &mut d,
        "/pull_request/state",
        json!(if pr.open { "open" } else { "closed" }),
    );
    put(&mut d, "/pull_request/merged", json!(pr.merged));
    put(
        &mut d,
        "/pull_request/merge_commit_sha",
        json!(pr.merge_sha),
    );
    put(
        &mut d,
        "/pull_request/merged_at",
        json!(pr.merged.then(now)),
    );
    patch_github_user(&mut d, "/pull_request/user", &pr.author);
    for (side, r, sha) in [
        ("head", &pr.head_ref, &pr.head_sha),
        ("base", &pr.base_ref, &pr.base_sha),
    ] {
        put(&mut d, &format!("/pull_request/{side}/ref"), json!(r));
        put(&mut d, &format!("/pull_request/{side}/sha"), json!(sha));
        let (owner, _) = owner_and_name(repo);
        put(
            &mut d,
            &format!("/pull_request/{side}/label"),
            json!(format!("{owner}:{r}")),
        );
        patch_github_repo(&mut d, &format!("/pull_request/{side}/repo"), repo);
    }
    if action == "synchronize" {
        let before = pr
            .previous_head_sha
            .clone()
            .unwrap_or_else(|| pr.base_sha.clone());
        put(&mut d, "/before", json!(before));
        put(&mut d, "/after", json!(pr.head_sha));
    }
    patch_github_repo(&mut d, "/repository", repo);
    patch_github_user(&mut d, "/sender", &pr.author);
    patch_github_installation(&mut d, repo);
    ("pull_request".into(), serde_json::to_vec(&d).unwrap())
}

/// A `synchronize` delivery whose sender, who pushed the new head, is `pusher`.
pub fn github_pushed_by(repo: &RepoHandle, pr: &FakePr, pusher: &str) -> (String, Vec<u8>) {
    let (event, body) = github_pull_request("synchronize", repo, pr);
    let mut d: Value = serde_json::from_slice(&body).unwrap();
    patch_github_user(&mut d, "/sender", pusher);
    (event, serde_json::to_vec(&d).unwrap())
}

/// A Forgejo `synchronized` delivery whose sender, who pushed, is `pusher`.
pub fn forgejo_pushed_by(repo: &RepoHandle, pr: &FakePr, pusher: &str) -> (String, Vec<u8>) {
    let (event, body) = forgejo_pull_request("synchronized", repo, pr);
    let mut d: Value = serde_json::from_slice(&body).unwrap();
    patch_forgejo_user(&mut d, "/sender", pusher);
    (event, serde_json::to_vec(&d).unwrap())
}

/// An `issue_comment` delivery (`created`) on pull request `pr`.
pub fn github_comment(
    repo: &RepoHandle,
    pr: u64,
    comment_id: u64,
    author: &str,
    body: &str,
) -> (String, Vec<u8>) {
    let mut d = fixture("github/webhooks/issue_comment/created.with-installation.payload.json");
    put(&mut d, "/action", json!("created"));
    put(&mut d, "/issue/number", json!(pr));
    put(
        &mut d,
        "/issue/pull_request",
        json!({
            "url": format!("https://api.github.com/repos/{}/pulls/{pr}", repo.full_name),
            "html_url": format!("https://github.com/{}/pull/{pr}", repo.full_name),
            "diff_url": format!("https://github.com/{}/pull/{pr}.diff", repo.full_name),
            "patch_url": format!("https://github.com/{}/pull/{pr}.patch", repo.full_name),
        }),
    );
    put(&mut d, "/comment/id", json!(comment_id));
    put(&mut d, "/comment/body", json!(body));
    put(&mut d, "/comment/created_at", json!(now()));
    patch_github_user(&mut d, "/comment/user", author);
    patch_github_repo(&mut d, "/repository", repo);
    patch_github_user(&mut d, "/sender", author);
    patch_github_installation(&mut d, repo);
    ("issue_comment".into(), serde_json::to_vec(&d).unwrap())
}

/// An `issue_comment` delivery (`created`) on `issue`, which is not a
/// pull request (its `issue` has no `pull_request`).
pub fn github_issue_comment(
    repo: &RepoHandle,
    issue: &FakeIssue,
    comment_id: u64,
    author: &str,
    body: &str,
) -> (String, Vec<u8>) {
    let mut d = fixture("github/webhooks/issue_comment/created.with-installation.payload.json");
    let (full_name, n) = (&repo.full_name, issue.number);
    put(&mut d, "/action", json!("created"));
    d["issue"].as_object_mut().unwrap().remove("pull_request");
    put(&mut d, "/issue/id", json!(issue.id));
    put(&mut d, "/issue/number", json!(n));
    put(&mut d, "/issue/title", json!(issue.title));
    put(&mut d, "/issue/body", json!(issue.body));
    put(
        &mut d,
        "/issue/state",
        json!(if issue.open { "open" } else { "closed" }),
    );
    put(
        &mut d,
        "/issue/url",
        json!(format!(
            "https://api.github.com/repos/{full_name}/issues/{n}"
        )),
    );
    put(
        &mut d,
        "/issue/html_url",
        json!(format!("https://github.com/{full_name}/issues/{n}")),
    );
    patch_github_user(&mut d, "/issue/user", &issue.author);
    put(&mut d, "/comment/id", json!(comment_id));
    put(&mut d, "/comment/body", json!(body));
    put(&mut d, "/comment/created_at", json!(now()));
    put(
        &mut d,
        "/comment/issue_url",
        json!(format!(
            "https://api.github.com/repos/{full_name}/issues/{n}"
        )),
    );
    patch_github_user(&mut d, "/comment/user", author);
    patch_github_repo(&mut d, "/repository", repo);
    patch_github_user(&mut d, "/sender", author);
    patch_github_installation(&mut d, repo);
    ("issue_comment".into(), serde_json::to_vec(&d).unwrap())
}

fn patch_forgejo_repo(document: &mut Value, pointer: &str, repo: &RepoHandle) {
    let (owner, name) = owner_and_name(repo);
    put(document, &format!("{pointer}/id"), json!(repo.id));
    put(document, &format!("{pointer}/name"), json!(name));
    put(
        document,
        &format!("{pointer}/full_name"),
        json!(repo.full_name),
    );
    put(
        document,
        &format!("{pointer}/clone_url"),
        json!(repo.clone_url),
    );
    put(document, &format!("{pointer}/owner/login"), json!(owner));
    put(document, &format!("{pointer}/owner/username"), json!(owner));
}

fn patch_forgejo_user(document: &mut Value, pointer: &str, login: &str) {
    put(document, &format!("{pointer}/login"), json!(login));
    put(document, &format!("{pointer}/username"), json!(login));
    put(document, &format!("{pointer}/id"), json!(user_id(login)));
}

/// A Forgejo `pull_request` delivery: `(X-Forgejo-Event-Type, body)`.
/// `action`: opened, reopened, synchronized, closed (merged as the fake's PR says).
pub fn forgejo_pull_request(action: &str, repo: &RepoHandle, pr: &FakePr) -> (String, Vec<u8>) {
    let (source, event_type) = match action {
        "synchronized" => (
            "forgejo/webhooks/forgejo-pull_request-synchronized.json",
            "pull_request_sync",
        ),
        "closed" => (
            "forgejo/webhooks/forgejo-pull_request-merged.json",
            "pull_request",
        ),
        _ => (
            "forgejo/webhooks/forgejo-pull_request-opened.json",
            "pull_request",
        ),
    };
    let mut d = fixture(source);
    put(&mut d, "/action", json!(action));
    put(&mut d, "/number", json!(pr.number));
    put(&mut d, "/pull_request/number", json!(pr.number));
    put(&mut d, "/pull_request/id", json!(pr.id));
    put(&mut d, "/pull_request/title", json!(pr.title));
    put(
        &mut d,
        "/pull_request/state",
        json!(if pr.open { "open" } else { "closed" }),
    );
    put(&mut d, "/pull_request/merged", json!(pr.merged));
    put(
        &mut d,
        "/pull_request/merge_commit_sha",
        json!(pr.merge_sha),
    );
    put(
        &mut d,
        "/pull_request/merged_at",
        json!(pr.merged.then(now)),
    );
    patch_forgejo_user(&mut d, "/pull_request/user", &pr.author);
    for (side, r, sha) in [
        ("head", &pr.head_ref, &pr.head_sha),
        ("base", &pr.base_ref, &pr.base_sha),
    ] {
        put(&mut d, &format!("/pull_request/{side}/ref"), json!(r));
        put(&mut d, &format!("/pull_request/{side}/label"), json!(r));
        put(&mut d, &format!("/pull_request/{side}/sha"), json!(sha));
        put(
            &mut d,
            &format!("/pull_request/{side}/repo_id"),
            json!(repo.id),
        );
        patch_forgejo_repo(&mut d, &format!("/pull_request/{side}/repo"), repo);
    }
    patch_forgejo_repo(&mut d, "/repository", repo);
    patch_forgejo_user(&mut d, "/sender", &pr.author);
    (event_type.into(), serde_json::to_vec(&d).unwrap())
}

/// A comment on a Forgejo pull request: `(X-Forgejo-Event-Type, body)`.
pub fn forgejo_comment(
    repo: &RepoHandle,
    pr: u64,
    comment_id: u64,
    author: &str,
    body: &str,
) -> (String, Vec<u8>) {
    let mut d = fixture("forgejo/webhooks/gitea-pull_request_comment.json");
    put(&mut d, "/action", json!("created"));
    put(&mut d, "/is_pull", json!(true));
    put(&mut d, "/issue/number", json!(pr));
    put(&mut d, "/comment/id", json!(comment_id));
    put(&mut d, "/comment/body", json!(body));
    put(&mut d, "/comment/created_at", json!(now()));
    patch_forgejo_user(&mut d, "/comment/user", author);
    patch_forgejo_repo(&mut d, "/repository", repo);
    patch_forgejo_user(&mut d, "/sender", author);
    (
        "pull_request_comment".into(),
        serde_json::to_vec(&d).unwrap(),
    )
}

/// A comment on a Forgejo issue that is not a pull request:
/// `(X-Forgejo-Event-Type, body)`, `issue_comment` with `is_pull: false`.
pub fn forgejo_issue_comment(
    repo: &RepoHandle,
    issue: &FakeIssue,
    comment_id: u64,
    author: &str,
    body: &str,
) -> (String, Vec<u8>) {
    let mut d = fixture("forgejo/webhooks/gitea-issue_comment-on-issue.json");
    let (full_name, n) = (&repo.full_name, issue.number);
    put(&mut d, "/action", json!("created"));
    put(&mut d, "/is_pull", json!(false));
    put(&mut d, "/issue/id", json!(issue.id));
    put(&mut d, "/issue/number", json!(n));
    put(&mut d, "/issue/title", json!(issue.title));
    put(&mut d, "/issue/body", json!(issue.body));
    put(
        &mut d,
        "/issue/state",
        json!(if issue.open { "open" } else { "closed" }),
    );
    put(
        &mut d,
        "/issue/html_url",
        json!(format!("https://forge.example/{full_name}/issues/{n}")),
    );
    put(&mut d, "/issue/repository/id", json!(repo.id));
    put(&mut d, "/issue/repository/full_name", json!(full_name));
    patch_forgejo_user(&mut d, "/issue/user", &issue.author);
    put(&mut d, "/comment/id", json!(comment_id));
    put(&mut d, "/comment/body", json!(body));
    put(&mut d, "/comment/created_at", json!(now()));
    put(
        &mut d,
        "/comment/issue_url",
        json!(format!("https://forge.example/{full_name}/issues/{n}")),
    );
    patch_forgejo_user(&mut d, "/comment/user", author);
    patch_forgejo_repo(&mut d, "/repository", repo);
    patch_forgejo_user(&mut d, "/sender", author);
    ("issue_comment".into(), serde_json::to_vec(&d).unwrap())
}

fn now() -> String {
    super::fake_forge::rfc3339(std::time::SystemTime::now())
}

/// A `pull_request_review` delivery: `action` submitted (with `state`
/// approved, commented, changes_requested) or dismissed, on `commit`.
pub fn github_review(
    action: &str,
    state: &str,
    repo: &RepoHandle,
    pr: &FakePr,
    review_id: u64,
    author: &str,
    commit: &str,
) -> (String, Vec<u8>) {
    let mut d = fixture("github/webhooks/pull_request_review/submitted.payload.json");
    put(&mut d, "/action", json!(action));
    put(&mut d, "/review/id", json!(review_id));
    put(&mut d, "/review/state", json!(state));
    put(&mut d, "/review/commit_id", json!(commit));
    put(&mut d, "/review/submitted_at", json!(now()));
    patch_github_user(&mut d, "/review/user", author);
    put(&mut d, "/pull_request/number", json!(pr.number));
    put(&mut d, "/pull_request/head/sha", json!(pr.head_sha));
    put(&mut d, "/pull_request/base/sha", json!(pr.base_sha));
    patch_github_repo(&mut d, "/repository", repo);
    patch_github_user(&mut d, "/sender", author);
    patch_github_installation(&mut d, repo);
    (
        "pull_request_review".into(),
        serde_json::to_vec(&d).unwrap(),
    )
}

/// A Forgejo approving review: `(X-Forgejo-Event-Type, body)`, by `author`
/// (Forgejo names the reviewer as the sender) on the PR's current head.
pub fn forgejo_review_approved(repo: &RepoHandle, pr: &FakePr, author: &str) -> (String, Vec<u8>) {
    let mut d = fixture("forgejo/webhooks/gitea-pull_request_review_approved.json");
    put(&mut d, "/action", json!("reviewed"));
    put(&mut d, "/number", json!(pr.number));
    put(&mut d, "/pull_request/number", json!(pr.number));
    put(&mut d, "/pull_request/head/sha", json!(pr.head_sha));
    put(&mut d, "/pull_request/base/sha", json!(pr.base_sha));
    put(&mut d, "/commit_id", json!(pr.head_sha));
    patch_forgejo_repo(&mut d, "/repository", repo);
    patch_forgejo_user(&mut d, "/sender", author);
    (
        "pull_request_review_approved".into(),
        serde_json::to_vec(&d).unwrap(),
    )
}

fn hmac_hex(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// `X-Hub-Signature-256`.
pub fn sign_github(secret: &str, body: &[u8]) -> String {
    format!("sha256={}", hmac_hex(secret, body))
}

/// `X-Forgejo-Signature` / `X-Gitea-Signature`.
pub fn sign_forgejo(secret: &str, body: &[u8]) -> String {
    hmac_hex(secret, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_signature_matches_the_documented_vector() {
        assert_eq!(
            sign_github("It's a Secret to Everybody", b"Hello, World!"),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
    }
}
