//! The real GitHub and Forgejo clients against the fake forge over HTTP:
//! the report comment, the plan check, issues, token caching and refresh,
//! retries, rate limits, the manifest flow — and every request they sent checked
//! against the forges' API descriptions.

use crate::support;
use base64::Engine;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::fake_forge::{self, FakeForge};
use support::{conformance_violations, RecordedRequest, RepoHandle};
use wavegate::config::settings::Secret;
use wavegate::forge::client::{convert_manifest, ForgeClient};
use wavegate::forge::forgejo::ForgejoClient;
use wavegate::forge::github::GitHubClient;
use wavegate::forge::retry::RetryPolicy;
use wavegate::forge::types::{
    CheckReport, CheckState, IssueEdit, IssueState, Permission, Reaction,
};
use wavegate::model::{CommitSha, PrNumber};
use wavegate::report::REPORT_MARKER;

const HEAD: &str = "1111111111111111111111111111111111111111";
const BASE: &str = "2222222222222222222222222222222222222222";
const PR: PrNumber = PrNumber(7);
const INSTALLATION: u64 = 77;

type Sleeps = Arc<Mutex<Vec<Duration>>>;

/// The default policy, except that sleeps are recorded instead of slept.
fn recording_policy() -> (RetryPolicy, Sleeps) {
    let sleeps: Sleeps = Arc::new(Mutex::new(Vec::new()));
    let log = sleeps.clone();
    let policy = RetryPolicy {
        sleep: Arc::new(move |d| {
            log.lock().unwrap().push(d);
            Box::pin(async {})
        }),
        ..RetryPolicy::default()
    };
    (policy, sleeps)
}

struct GitHub {
    forge: FakeForge,
    repo: RepoHandle,
    client: ForgeClient,
    sleeps: Sleeps,
}

async fn github_with_clone_url(clone_url: &str) -> GitHub {
    let forge = FakeForge::start().await;
    let repo = forge.add_github_repo("octo-org/infra", clone_url, INSTALLATION);
    forge.open_pr(&repo, PR.0, HEAD, BASE, "feature", "main", "alice");
    let (policy, sleeps) = recording_policy();
    let client = GitHubClient::new(
        forge.url(),
        fake_forge::APP_ID,
        &fake_forge::app_private_key(),
        policy,
    )
    .unwrap();
    GitHub {
        forge,
        repo,
        client: ForgeClient::GitHub(Arc::new(client)),
        sleeps,
    }
}

async fn github() -> GitHub {
    github_with_clone_url("file:///nonexistent/infra.git").await
}

struct Forgejo {
    forge: FakeForge,
    repo: RepoHandle,
    client: ForgeClient,
}

async fn forgejo() -> Forgejo {
    let forge = FakeForge::start().await;
    let repo = forge.add_forgejo_repo(
        "infra-team/infra",
        "https://forgejo.example/infra-team/infra.git",
    );
    forge.open_pr(&repo, PR.0, HEAD, BASE, "feature", "main", "bob");
    let (policy, _) = recording_policy();
    let client = ForgejoClient::new(
        forge.url(),
        Secret::new(fake_forge::FORGEJO_BOT_TOKEN),
        policy,
    )
    .unwrap();
    Forgejo {
        forge,
        repo,
        client: ForgeClient::Forgejo(Arc::new(client)),
    }
}

fn report(text: &str) -> String {
    format!("{REPORT_MARKER}\n## wavegate plan\n{text}")
}

fn head() -> CommitSha {
    CommitSha::parse(HEAD).unwrap()
}

fn check(state: CheckState, title: &str) -> CheckReport {
    CheckReport {
        name: wavegate::forge::types::CHECK_NAME,
        state,
        title: title.into(),
        summary: format!("summary for {title}"),
        details_url: None,
    }
}

fn assert_conformant(requests: &[RecordedRequest]) {
    let violations = conformance_violations(requests);
    assert!(violations.is_empty(), "{violations:#?}");
}

#[tokio::test]
async fn github_report_is_created_once_then_edited_in_place() {
    let gh = github().await;
    let repo = gh.repo.repo_ref();

    let first = gh
        .client
        .upsert_report(&repo, PR, None, REPORT_MARKER, &report("v1"))
        .await
        .unwrap();
    let second = gh
        .client
        .upsert_report(&repo, PR, Some(first), REPORT_MARKER, &report("v2"))
        .await
        .unwrap();

    assert_eq!(first, second);
    let comments = gh.forge.comments(&gh.repo, PR.0);
    assert_eq!(comments.len(), 1);
    assert_eq!(comments[0].body, report("v2"));
    assert_eq!(comments[0].author, fake_forge::GITHUB_BOT_LOGIN);
    assert!(gh.forge.requests().iter().any(|r| r.method == "PATCH"
        && r.path == format!("/repos/octo-org/infra/issues/comments/{first}")));
    assert_conformant(&gh.forge.requests());
}

#[tokio::test]
async fn a_forgotten_report_is_found_by_its_marker_beyond_the_first_page() {
    let gh = github().await;
    let repo = gh.repo.repo_ref();
    gh.forge.add_comment(
        &gh.repo,
        PR.0,
        "carol",
        &format!("quoting the bot: {REPORT_MARKER}"),
    );
    for i in 0..149 {
        gh.forge
            .add_comment(&gh.repo, PR.0, "carol", &format!("comment {i}"));
    }
    let ours = gh
        .client
        .upsert_report(&repo, PR, None, REPORT_MARKER, &report("v1"))
        .await
        .unwrap();
    for i in 0..60 {
        gh.forge
            .add_comment(&gh.repo, PR.0, "dave", &format!("later {i}"));
    }

    let again = gh
        .client
        .upsert_report(&repo, PR, None, REPORT_MARKER, &report("v2"))
        .await
        .unwrap();

    assert_eq!(
        again, ours,
        "the bot's own comment is edited, not the human's quote"
    );
    let comments = gh.forge.comments(&gh.repo, PR.0);
    assert_eq!(comments.len(), 211);
    assert_eq!(
        comments.iter().find(|c| c.id == ours).unwrap().body,
        report("v2")
    );
    assert!(comments[0].body.starts_with("quoting the bot"));
    let listed_pages: Vec<String> = gh
        .forge
        .requests()
        .iter()
        .filter(|r| r.method == "GET")
        .filter_map(|r| r.query.clone())
        .collect();
    assert!(
        listed_pages.contains(&"page=2&per_page=100".to_owned()),
        "{listed_pages:?}"
    );
    assert!(
        listed_pages.contains(&"page=3&per_page=100".to_owned()),
        "{listed_pages:?}"
    );
    assert_conformant(&gh.forge.requests());
}

#[tokio::test]
async fn a_report_whose_comment_was_deleted_is_posted_anew() {
    let gh = github().await;
    let repo = gh.repo.repo_ref();
    let first = gh
        .client
        .upsert_report(&repo, PR, None, REPORT_MARKER, &report("v1"))
        .await
        .unwrap();
    gh.forge.delete_comment(&gh.repo, first);

    let second = gh
        .client
        .upsert_report(&repo, PR, Some(first), REPORT_MARKER, &report("v2"))
        .await
        .unwrap();

    assert_ne!(first, second);
    let comments = gh.forge.comments(&gh.repo, PR.0);
    assert_eq!(comments.len(), 1);
    assert_eq!(comments[0].id, second);
}

#[tokio::test]
async fn check_run_is_created_then_updated_in_place() {
    let gh = github().await;
    let repo = gh.repo.repo_ref();

    let created = gh
        .client
        .publish_check(
            &repo,
            &head(),
            None,
            &check(CheckState::InProgress, "planning"),
        )
        .await
        .unwrap()
        .expect("GitHub returns the check run id");
    let runs = gh.forge.check_runs(&gh.repo, HEAD);
    assert_eq!(runs.len(), 1);
    assert_eq!(
        (runs[0].status.as_str(), runs[0].conclusion.clone()),
        ("in_progress", None)
    );

    let waiting = gh
        .client
        .publish_check(
            &repo,
            &head(),
            Some(created),
            &check(CheckState::ActionRequired, "awaiting approval"),
        )
        .await
        .unwrap();
    let approved = gh
        .client
        .publish_check(
            &repo,
            &head(),
            Some(created),
            &check(CheckState::Success, "approved"),
        )
        .await
        .unwrap();

    assert_eq!((waiting, approved), (Some(created), Some(created)));
    let runs = gh.forge.check_runs(&gh.repo, HEAD);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].name, "wavegate/plan");
    assert_eq!(runs[0].status, "completed");
    assert_eq!(runs[0].conclusion.as_deref(), Some("success"));
    assert_eq!(runs[0].output["title"], "approved");
    assert_conformant(&gh.forge.requests());
}

#[tokio::test]
async fn an_oversized_check_summary_is_cut_visibly_and_accepted() {
    let gh = github().await;
    let mut report = check(CheckState::Failure, "plan failed");
    report.summary = "x".repeat(70_000);

    gh.client
        .publish_check(&gh.repo.repo_ref(), &head(), None, &report)
        .await
        .unwrap();

    let summary = gh.forge.check_runs(&gh.repo, HEAD)[0].output["summary"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(summary.chars().count(), 65_535);
    assert!(summary.contains("truncated"));
}

#[tokio::test]
async fn one_installation_token_serves_many_calls() {
    let gh = github().await;
    let repo = gh.repo.repo_ref();
    for _ in 0..3 {
        gh.client.reply(&repo, PR, "hello").await.unwrap();
    }
    gh.client.pull_request(&repo, PR).await.unwrap();
    gh.client.git_auth_header(&repo).await.unwrap();

    assert_eq!(gh.forge.token_requests(), 1);
}

#[tokio::test]
async fn concurrent_first_calls_share_one_token_request() {
    let gh = github().await;
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let (client, repo) = (gh.client.clone(), gh.repo.repo_ref());
        calls.spawn(async move { client.pull_request(&repo, PR).await });
    }
    for result in calls.join_all().await {
        result.unwrap();
    }
    assert_eq!(gh.forge.token_requests(), 1);
}

#[tokio::test]
async fn tokens_about_to_expire_are_refreshed_before_use() {
    let gh = github().await;
    let repo = gh.repo.repo_ref();
    gh.forge.set_token_lifetime(Duration::from_secs(20));

    for _ in 0..3 {
        gh.client.pull_request(&repo, PR).await.unwrap();
    }

    assert_eq!(
        gh.forge.token_requests(),
        3,
        "a token with under 30 s left is never used"
    );
}

#[tokio::test]
async fn a_revoked_token_is_replaced_once_and_the_call_succeeds() {
    let gh = github().await;
    let repo = gh.repo.repo_ref();
    gh.client.reply(&repo, PR, "first").await.unwrap();
    gh.forge.revoke_tokens();

    gh.client.reply(&repo, PR, "second").await.unwrap();

    assert_eq!(gh.forge.token_requests(), 2);
    let bodies: Vec<String> = gh
        .forge
        .comments(&gh.repo, PR.0)
        .into_iter()
        .map(|c| c.body)
        .collect();
    assert_eq!(bodies, vec!["first", "second"]);
    assert!(
        gh.sleeps.lock().unwrap().is_empty(),
        "a 401 is not a retry with backoff"
    );
}

#[tokio::test]
async fn a_bad_gateway_on_an_edit_is_retried() {
    let gh = github().await;
    let repo = gh.repo.repo_ref();
    let id = gh
        .client
        .upsert_report(&repo, PR, None, REPORT_MARKER, &report("one"))
        .await
        .unwrap();
    gh.forge.fail_next(
        "PATCH",
        &format!("/repos/octo-org/infra/issues/comments/{id}"),
        502,
        &[],
    );

    gh.client
        .upsert_report(&repo, PR, Some(id), REPORT_MARKER, &report("two"))
        .await
        .unwrap();

    let comments = gh.forge.comments(&gh.repo, PR.0);
    assert_eq!(comments.len(), 1);
    assert!(comments[0].body.contains("two"));
    assert_eq!(*gh.sleeps.lock().unwrap(), vec![Duration::from_millis(500)]);
}

#[tokio::test]
async fn a_create_that_may_have_happened_is_not_sent_twice() {
    let gh = github().await;
    let repo = gh.repo.repo_ref();
    gh.forge
        .fail_next("POST", "/repos/octo-org/infra/issues/7/comments", 502, &[]);

    let error = gh.client.reply(&repo, PR, "hello").await.unwrap_err();
    assert!(format!("{error:#}").contains("502"), "{error:#}");
    assert!(gh.sleeps.lock().unwrap().is_empty(), "no second POST");

    // The job's retry looks for the report before creating one.
    gh.client
        .upsert_report(&repo, PR, None, REPORT_MARKER, &report("again"))
        .await
        .unwrap();
    assert_eq!(gh.forge.comments(&gh.repo, PR.0).len(), 1);
}

#[tokio::test]
async fn a_failing_token_request_is_retried_too() {
    let gh = github().await;
    gh.forge.fail_next("POST", "/app/installations/", 503, &[]);

    gh.client
        .pull_request(&gh.repo.repo_ref(), PR)
        .await
        .unwrap();

    assert_eq!(gh.forge.token_requests(), 2);
    assert_eq!(gh.sleeps.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn too_many_requests_waits_as_long_as_retry_after_says() {
    let gh = github().await;
    gh.forge.fail_next(
        "GET",
        "/repos/octo-org/infra/pulls/7",
        429,
        &[("retry-after", "3")],
    );

    gh.client
        .pull_request(&gh.repo.repo_ref(), PR)
        .await
        .unwrap();

    assert_eq!(*gh.sleeps.lock().unwrap(), vec![Duration::from_secs(3)]);
}

#[tokio::test]
async fn an_exhausted_rate_limit_resetting_in_an_hour_fails_saying_when() {
    let gh = github().await;
    let reset = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    gh.forge.fail_next(
        "GET",
        "/repos/octo-org/infra/pulls/7",
        403,
        &[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", &reset.to_string()),
        ],
    );

    let error = gh
        .client
        .pull_request(&gh.repo.repo_ref(), PR)
        .await
        .unwrap_err();

    let text = format!("{error:#}");
    assert!(text.contains("GET /repos/octo-org/infra/pulls/7"), "{text}");
    assert!(text.contains("rate limit"), "{text}");
    assert!(text.contains(&reset.to_string()), "{text}");
    assert!(!text.contains("ghs_"), "no token in errors: {text}");
    assert!(gh.sleeps.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_missing_installation_is_looked_up_once_with_the_app_jwt() {
    let gh = github().await;
    let repo = gh.repo.without_installation();

    gh.client.pull_request(&repo, PR).await.unwrap();
    gh.client.pull_request(&repo, PR).await.unwrap();

    let lookups: Vec<RecordedRequest> = gh
        .forge
        .requests()
        .into_iter()
        .filter(|r| r.path == "/repos/octo-org/infra/installation")
        .collect();
    assert_eq!(lookups.len(), 1);
    assert!(lookups[0].headers["authorization"].starts_with("Bearer "));
    assert_conformant(&gh.forge.requests());
}

#[tokio::test]
async fn a_key_that_is_not_the_apps_is_refused_with_the_call_named() {
    let forge = FakeForge::start().await;
    let repo = forge.add_github_repo("octo-org/infra", "file:///x", INSTALLATION);
    forge.open_pr(&repo, PR.0, HEAD, BASE, "feature", "main", "alice");
    let (policy, _) = recording_policy();
    let stranger = Secret::new(include_str!("../support/stranger-key.pem"));
    let client = ForgeClient::GitHub(Arc::new(
        GitHubClient::new(forge.url(), fake_forge::APP_ID, &stranger, policy).unwrap(),
    ));

    let error = client.pull_request(&repo.repo_ref(), PR).await.unwrap_err();

    let text = format!("{error:#}");
    assert!(text.contains("access_tokens"), "{text}");
    assert!(text.contains("401"), "{text}");
}

#[tokio::test]
async fn a_pull_request_reads_back_as_our_type() {
    let gh = github().await;
    gh.forge
        .push(&gh.repo, PR.0, "3333333333333333333333333333333333333333");

    let pr = gh
        .client
        .pull_request(&gh.repo.repo_ref(), PR)
        .await
        .unwrap();

    assert_eq!(pr.number, PR);
    assert_eq!(pr.author.login, "alice");
    assert!(!pr.author.is_bot);
    assert_eq!(
        pr.head_sha.as_str(),
        "3333333333333333333333333333333333333333"
    );
    assert_eq!(pr.base_sha.as_str(), BASE);
    assert_eq!(
        (pr.head_ref.as_str(), pr.base_ref.as_str()),
        ("feature", "main")
    );
    assert!(!pr.from_fork);
}

#[tokio::test]
async fn permissions_and_reactions_on_github() {
    let gh = github().await;
    let repo = gh.repo.repo_ref();
    gh.forge.set_permission(&gh.repo, "carol", "write");
    let comment = gh.forge.add_comment(&gh.repo, PR.0, "carol", "/approve");

    assert_eq!(
        gh.client.permission(&repo, "carol").await.unwrap(),
        Permission::Write
    );
    assert_eq!(
        gh.client.permission(&repo, "mallory").await.unwrap(),
        Permission::None
    );
    gh.client
        .react(&repo, comment, Reaction::Eyes)
        .await
        .unwrap();

    let reactions = gh.forge.reactions(&gh.repo, comment);
    assert_eq!(reactions.len(), 1);
    assert_eq!(reactions[0].content, "eyes");
    assert_conformant(&gh.forge.requests());
}

#[tokio::test]
async fn git_auth_header_for_github_https_is_basic_with_the_installation_token() {
    let gh = github_with_clone_url("https://github.com/octo-org/infra.git").await;

    let header = gh
        .client
        .git_auth_header(&gh.repo.repo_ref())
        .await
        .unwrap()
        .unwrap();

    let encoded = header
        .expose()
        .strip_prefix("Basic ")
        .expect("Basic scheme");
    let decoded = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap(),
    )
    .unwrap();
    let token = decoded
        .strip_prefix("x-access-token:")
        .expect("x-access-token user");
    assert!(token.starts_with("ghs_fake"), "{decoded}");
    assert_eq!(format!("{header:?}"), "Secret(…)");
}

#[tokio::test]
async fn git_auth_header_is_none_for_file_urls() {
    let gh = github().await;
    assert!(gh
        .client
        .git_auth_header(&gh.repo.repo_ref())
        .await
        .unwrap()
        .is_none());
    assert_eq!(gh.forge.token_requests(), 0);
}

#[tokio::test]
async fn convert_manifest_returns_the_new_apps_credentials_once() {
    let forge = FakeForge::start().await;
    let code = forge.manifest_code();

    let credentials = convert_manifest(forge.url(), &code).await.unwrap();

    assert_eq!(credentials.id, fake_forge::APP_ID);
    assert_eq!(credentials.slug, fake_forge::APP_SLUG);
    assert_eq!(
        credentials.pem.expose(),
        fake_forge::app_private_key().expose()
    );
    assert_eq!(
        credentials.webhook_secret.as_ref().map(Secret::expose),
        Some(fake_forge::MANIFEST_WEBHOOK_SECRET)
    );
    let error = convert_manifest(forge.url(), &code).await.unwrap_err();
    assert!(format!("{error:#}").contains("404"), "{error:#}");
    assert_conformant(&forge.requests());
}

#[tokio::test]
async fn forgejo_report_comment_is_created_then_edited() {
    let fj = forgejo().await;
    let repo = fj.repo.repo_ref();
    fj.forge
        .add_comment(&fj.repo, PR.0, "bob", &format!("> {REPORT_MARKER}"));

    let first = fj
        .client
        .upsert_report(&repo, PR, None, REPORT_MARKER, &report("v1"))
        .await
        .unwrap();
    let second = fj
        .client
        .upsert_report(&repo, PR, None, REPORT_MARKER, &report("v2"))
        .await
        .unwrap();

    assert_eq!(first, second);
    let comments = fj.forge.comments(&fj.repo, PR.0);
    assert_eq!(comments.len(), 2);
    assert_eq!(comments[1].author, fake_forge::FORGEJO_BOT_LOGIN);
    assert_eq!(comments[1].body, report("v2"));
    assert!(fj
        .forge
        .requests()
        .iter()
        .all(|r| r.headers["authorization"] == format!("token {}", fake_forge::FORGEJO_BOT_TOKEN)));
    assert_conformant(&fj.forge.requests());
}

#[tokio::test]
async fn forgejo_plan_check_is_a_commit_status_with_a_140_character_description() {
    let fj = forgejo().await;
    let repo = fj.repo.repo_ref();
    let long_title = format!(
        "2 members planned, awaiting approval of sha256:{}",
        "ab".repeat(64)
    );

    let waiting = fj
        .client
        .publish_check(
            &repo,
            &head(),
            None,
            &check(CheckState::ActionRequired, &long_title),
        )
        .await
        .unwrap();
    fj.client
        .publish_check(
            &repo,
            &head(),
            None,
            &check(CheckState::Failure, "plan failed"),
        )
        .await
        .unwrap();

    assert_eq!(waiting, None);
    let statuses = fj.forge.statuses(&fj.repo, HEAD);
    assert_eq!(statuses.len(), 2);
    assert_eq!(statuses[0].state, "pending");
    assert_eq!(statuses[0].context, "wavegate/plan");
    assert_eq!(statuses[0].description.chars().count(), 140);
    assert!(statuses[0].description.starts_with("2 members planned"));
    assert_eq!(
        (statuses[1].state.as_str(), statuses[1].description.as_str()),
        ("failure", "plan failed")
    );
    assert_conformant(&fj.forge.requests());
}

#[tokio::test]
async fn forgejo_pull_request_permission_and_reaction() {
    let fj = forgejo().await;
    let repo = fj.repo.repo_ref();
    fj.forge.set_permission(&fj.repo, "carol", "admin");
    let comment = fj.forge.add_comment(&fj.repo, PR.0, "carol", "/approve");

    let pr = fj.client.pull_request(&repo, PR).await.unwrap();
    assert_eq!(
        (pr.author.login.as_str(), pr.head_sha.as_str()),
        ("bob", HEAD)
    );
    assert_eq!(
        fj.client.permission(&repo, "carol").await.unwrap(),
        Permission::Admin
    );
    fj.client
        .react(&repo, comment, Reaction::PlusOne)
        .await
        .unwrap();
    assert_eq!(fj.forge.reactions(&fj.repo, comment)[0].content, "+1");

    fj.forge.set_forgejo_bot_admin(false);
    let error = fj.client.permission(&repo, "carol").await.unwrap_err();
    let text = format!("{error:#}");
    assert!(text.contains("403") && text.contains("admin"), "{text}");
    assert!(!text.contains(fake_forge::FORGEJO_BOT_TOKEN), "{text}");
    assert_conformant(&fj.forge.requests());
}

#[tokio::test]
async fn git_auth_header_for_forgejo_is_the_token() {
    let fj = forgejo().await;
    let header = fj
        .client
        .git_auth_header(&fj.repo.repo_ref())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        header.expose(),
        format!("token {}", fake_forge::FORGEJO_BOT_TOKEN)
    );
}

#[tokio::test]
async fn every_request_of_a_full_conversation_conforms_to_the_api_descriptions() {
    let gh = github().await;
    let repo = gh.repo.without_installation();
    let id = gh
        .client
        .upsert_report(&repo, PR, None, REPORT_MARKER, &report("v1"))
        .await
        .unwrap();
    gh.client
        .upsert_report(&repo, PR, Some(id), REPORT_MARKER, &report("v2"))
        .await
        .unwrap();
    let check_id = gh
        .client
        .publish_check(
            &repo,
            &head(),
            None,
            &check(CheckState::ActionRequired, "waiting"),
        )
        .await
        .unwrap();
    gh.client
        .publish_check(
            &repo,
            &head(),
            check_id,
            &check(CheckState::Neutral, "nothing to do"),
        )
        .await
        .unwrap();
    gh.client.pull_request(&repo, PR).await.unwrap();
    gh.client.permission(&repo, "alice").await.unwrap();
    gh.client.react(&repo, id, Reaction::Rocket).await.unwrap();

    let requests = gh.forge.requests();
    assert!(requests.len() >= 9, "{requests:#?}");
    assert_conformant(&requests);
}

fn request(method: &str, path: &str, body: Option<serde_json::Value>) -> RecordedRequest {
    RecordedRequest {
        method: method.into(),
        path: path.into(),
        query: None,
        headers: Default::default(),
        body,
    }
}

#[test]
fn deliberately_wrong_requests_are_reported() {
    let wrong = [
        request(
            "POST",
            "/repos/o/r/check-runs",
            Some(serde_json::json!({ "name": "wavegate/plan" })),
        ),
        request(
            "PATCH",
            "/repos/o/r/check-runs/5",
            Some(serde_json::json!({ "conclusion": "approved" })),
        ),
        request(
            "POST",
            "/repos/o/r/issues/comments/5",
            Some(serde_json::json!({ "body": "x" })),
        ),
        request("GET", "/repos/o/r/no-such-thing", None),
        request(
            "POST",
            "/api/v1/repos/o/r/statuses/abc",
            Some(serde_json::json!({ "state": "approved" })),
        ),
        request(
            "PATCH",
            "/api/v1/repos/o/r/issues/comments/5",
            Some(serde_json::json!({ "text": "x" })),
        ),
    ];

    let violations = conformance_violations(&wrong);

    let expect = [
        "POST /repos/o/r/check-runs: body.head_sha is required",
        "PATCH /repos/o/r/check-runs/5: body.conclusion = \"approved\" is not one of",
        "POST /repos/o/r/issues/comments/5: GitHub documents no POST",
        "GET /repos/o/r/no-such-thing: no such path",
        "POST /api/v1/repos/o/r/statuses/abc: body.state = \"approved\" is not one of",
        "PATCH /api/v1/repos/o/r/issues/comments/5: body.body is required",
        "PATCH /api/v1/repos/o/r/issues/comments/5: body.text is not a documented field",
    ];
    for line in expect {
        assert!(
            violations.iter().any(|v| v.starts_with(line)),
            "missing `{line}` in {violations:#?}"
        );
    }
    assert_eq!(violations.len(), expect.len(), "{violations:#?}");
}

#[test]
fn right_requests_are_not_reported() {
    let right = [
        request(
            "POST",
            "/repos/o/r/check-runs",
            Some(
                serde_json::json!({ "name": "n", "head_sha": HEAD, "status": "in_progress", "output": { "title": "t", "summary": "s" } }),
            ),
        ),
        request("GET", "/repos/o/r/issues/7/comments", None),
        request(
            "POST",
            "/api/v1/repos/o/r/statuses/abc",
            Some(serde_json::json!({ "state": "pending", "context": "c" })),
        ),
    ];
    assert_eq!(conformance_violations(&right), Vec::<String>::new());
}

#[test]
fn wrong_actions_requests_are_reported() {
    let many: serde_json::Map<String, serde_json::Value> = (0..26)
        .map(|i| (format!("in{i}"), serde_json::json!("x")))
        .collect();
    let wrong = [
        request(
            "POST",
            "/repos/o/r/actions/workflows/w.yml/dispatches",
            Some(serde_json::json!({ "ref": "main", "inputs": many })),
        ),
        request("GET", "/repos/o/r/actions/runs/abc", None),
        request(
            "POST",
            "/api/v1/repos/o/r/actions/workflows/w.yml/dispatches",
            Some(
                serde_json::json!({ "ref": "main", "inputs": { "n": 5 }, "return_run_details": true }),
            ),
        ),
        request("POST", "/api/v1/repos/o/r/actions/runs/x1/cancel", None),
    ];

    let violations = conformance_violations(&wrong);

    let expect = [
        "POST /repos/o/r/actions/workflows/w.yml/dispatches: body.inputs has 26 fields",
        "GET /repos/o/r/actions/runs/abc: path.run_id should be integer",
        "POST /api/v1/repos/o/r/actions/workflows/w.yml/dispatches: body.inputs.n should be string",
        "POST /api/v1/repos/o/r/actions/workflows/w.yml/dispatches: body.return_run_details is not a documented field",
        "POST /api/v1/repos/o/r/actions/runs/x1/cancel: path.run_id should be integer",
    ];
    for line in expect {
        assert!(
            violations.iter().any(|v| v.starts_with(line)),
            "missing `{line}` in {violations:#?}"
        );
    }
    assert_eq!(violations.len(), expect.len(), "{violations:#?}");
}

#[test]
fn right_actions_requests_are_not_reported() {
    let right = [
        request(
            "POST",
            "/repos/o/r/actions/workflows/w.yml/dispatches",
            Some(
                serde_json::json!({ "ref": "main", "inputs": { "a": "b" }, "return_run_details": true }),
            ),
        ),
        request("GET", "/repos/o/r/actions/runs/12", None),
        request("POST", "/repos/o/r/actions/runs/12/cancel", None),
        request(
            "POST",
            "/api/v1/repos/o/r/actions/workflows/w.yml/dispatches",
            Some(
                serde_json::json!({ "ref": "main", "inputs": { "a": "b" }, "return_run_info": true }),
            ),
        ),
        request("GET", "/api/v1/repos/o/r/actions/runs/12", None),
        request("POST", "/api/v1/repos/o/r/actions/runs/12/cancel", None),
    ];
    assert_eq!(conformance_violations(&right), Vec::<String>::new());
}

#[tokio::test]
async fn webhook_payloads_carry_the_fakes_repository_pull_request_and_installation() {
    let gh = github().await;
    let pushed = gh
        .forge
        .push(&gh.repo, PR.0, "3333333333333333333333333333333333333333");

    let (event, body) = support::github_pull_request("synchronize", &gh.repo, &pushed);
    let payload: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(event, "pull_request");
    assert_eq!(payload["repository"]["full_name"], "octo-org/infra");
    assert_eq!(payload["pull_request"]["number"], PR.0);
    assert_eq!(
        (payload["before"].as_str(), payload["after"].as_str()),
        (Some(HEAD), Some(pushed.head_sha.as_str()))
    );
    assert_eq!(payload["installation"]["id"], INSTALLATION);

    let (event, body) = support::github_comment(&gh.repo, PR.0, 99, "carol", "/approve");
    let payload: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(event, "issue_comment");
    assert!(
        payload["issue"]["pull_request"].is_object(),
        "a comment on a PR, not an issue"
    );
    assert_eq!(
        (
            payload["comment"]["id"].as_u64(),
            payload["comment"]["user"]["login"].as_str()
        ),
        (Some(99), Some("carol"))
    );

    let fj = forgejo().await;
    let pr = fj
        .forge
        .merge(&fj.repo, PR.0, "4444444444444444444444444444444444444444");
    let (event, body) = support::forgejo_pull_request("closed", &fj.repo, &pr);
    let payload: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(event, "pull_request");
    assert_eq!(payload["pull_request"]["merged"], true);
    assert_eq!(
        payload["pull_request"]["merge_commit_sha"],
        "4444444444444444444444444444444444444444"
    );
    assert_eq!(payload["repository"]["full_name"], "infra-team/infra");
    let (event, _) = support::forgejo_comment(&fj.repo, PR.0, 5, "bob", "/approve");
    assert_eq!(event, "pull_request_comment");
    assert_eq!(support::sign_forgejo("s", b"x").len(), 64);
}

/// Both forges list the comments updated since a time, with when each was
/// written and last edited.
#[tokio::test]
async fn comments_since_a_time_carry_when_they_were_written_and_edited() {
    let gh = github().await;
    let fj = forgejo().await;
    for (client, forge, handle) in [
        (&gh.client, &gh.forge, &gh.repo),
        (&fj.client, &fj.forge, &fj.repo),
    ] {
        let repo = handle.repo_ref();
        let plain = forge.add_comment(handle, PR.0, "carol", "/approve");
        let edited = forge.add_edited_comment(handle, PR.0, "bob", "hm", "/approve");

        let all = client.comments_since(&repo, PR, None).await.unwrap();
        assert_eq!(all.len(), 2, "{all:?}");
        let plain = all.iter().find(|c| c.id == plain).unwrap();
        assert!(plain.created_at.is_some());
        assert_eq!(plain.updated_at, plain.created_at);
        let edited = all.iter().find(|c| c.id == edited).unwrap();
        assert!(edited.updated_at > edited.created_at, "{edited:?}");
        assert_eq!(edited.body, "/approve");

        let since = edited.updated_at.unwrap();
        let newer = client.comments_since(&repo, PR, Some(since)).await.unwrap();
        assert_eq!(
            newer.iter().map(|c| c.id).collect::<Vec<_>>(),
            [edited.id],
            "only what was updated at or after {since}"
        );
        assert!(forge
            .requests()
            .iter()
            .any(|r| r.query.as_deref().is_some_and(|q| q.contains("since="))));
        assert_conformant(&forge.requests());
    }
}

/// Both clients read a pull request's reviews a page at a time (GitHub 100,
/// Forgejo 50), each forge's words for states into ours, and a page asked
/// for again with its `ETag` is a 304.
#[tokio::test]
async fn reviews_are_listed_a_page_at_a_time_and_read_as_our_type() {
    use wavegate::forge::listing::{ListedReview, Page};
    use wavegate::forge::ReviewState;

    async fn all_pages(client: &ForgeClient, repo: &RepoHandle) -> (Vec<ListedReview>, u32) {
        let mut listed = Vec::new();
        for page in 1u32.. {
            match client
                .pull_reviews_page(&repo.repo_ref(), PR, page, None)
                .await
                .unwrap()
            {
                Page::Fresh { items, more, .. } => {
                    listed.extend(items);
                    if !more {
                        return (listed, page);
                    }
                }
                Page::NotModified => panic!("asked without an ETag"),
            }
        }
        unreachable!()
    }

    let gh = github().await;
    let fj = forgejo().await;
    for (forge, repo, client, count, pages) in [
        (&gh.forge, &gh.repo, &gh.client, 101, 2),
        (&fj.forge, &fj.repo, &fj.client, 51, 2),
    ] {
        let changes = forge.add_review(repo, PR.0, "carol", "CHANGES_REQUESTED");
        let dismissed = forge.add_review(repo, PR.0, "dave", "APPROVED");
        forge.dismiss_review(repo, dismissed);
        for _ in 2..count {
            forge.add_review(repo, PR.0, "erin", "APPROVED");
        }
        let (listed, read) = all_pages(client, repo).await;
        assert_eq!((listed.len(), read), (count, pages));
        let first = &listed[0];
        assert_eq!(
            (first.id, first.author.login.as_str(), first.state),
            (changes, "carol", ReviewState::ChangesRequested)
        );
        assert_eq!(first.commit, Some(head()));
        assert!(first.submitted_at.is_some());
        assert_eq!(listed[1].state, ReviewState::Dismissed);
        assert_eq!(listed[2].state, ReviewState::Approved);

        let Page::Fresh { etag, .. } = client
            .pull_reviews_page(&repo.repo_ref(), PR, 1, None)
            .await
            .unwrap()
        else {
            panic!("a first answer in full")
        };
        let again = client
            .pull_reviews_page(&repo.repo_ref(), PR, 1, etag.as_deref())
            .await
            .unwrap();
        assert_eq!(again, Page::NotModified);
        assert_conformant(&forge.requests());
    }
}

/// Both clients open an issue (numbered past the pull requests, by the
/// bot), change its title and body, close and reopen it, and comment on
/// it as on a pull request; an edit sends only what it changes.
#[tokio::test]
async fn an_issue_is_opened_edited_closed_reopened_and_commented_on() {
    let gh = github().await;
    let fj = forgejo().await;
    for (client, forge, handle, bot) in [
        (
            &gh.client,
            &gh.forge,
            &gh.repo,
            fake_forge::GITHUB_BOT_LOGIN,
        ),
        (
            &fj.client,
            &fj.forge,
            &fj.repo,
            fake_forge::FORGEJO_BOT_LOGIN,
        ),
    ] {
        let repo = handle.repo_ref();
        let number = client
            .open_issue(&repo, "Drift: prod/app", "first")
            .await
            .unwrap();
        assert_eq!(number, PrNumber(1001));
        let opened = forge.issue(handle, number.0);
        assert_eq!(
            (
                opened.title.as_str(),
                opened.body.as_str(),
                opened.author.as_str(),
                opened.open
            ),
            ("Drift: prod/app", "first", bot, true)
        );

        let retitled = IssueEdit {
            title: Some("Drift: prod/app (changed)"),
            body: Some("second"),
            state: None,
        };
        client.edit_issue(&repo, number, &retitled).await.unwrap();
        let closing = IssueEdit {
            state: Some(IssueState::Closed),
            ..IssueEdit::default()
        };
        client.edit_issue(&repo, number, &closing).await.unwrap();
        let closed = forge.issue(handle, number.0);
        assert_eq!(
            (closed.title.as_str(), closed.body.as_str(), closed.open),
            ("Drift: prod/app (changed)", "second", false)
        );
        let last_edit = forge.requests().pop().unwrap();
        assert_eq!(last_edit.method, "PATCH");
        assert_eq!(
            last_edit.body,
            Some(serde_json::json!({ "state": "closed" }))
        );
        let reopening = IssueEdit {
            state: Some(IssueState::Open),
            ..IssueEdit::default()
        };
        client.edit_issue(&repo, number, &reopening).await.unwrap();
        assert!(forge.issue(handle, number.0).open);

        let said = client.reply(&repo, number, "Drift changed.").await.unwrap();
        let comments = client.comments_since(&repo, number, None).await.unwrap();
        assert_eq!(
            comments
                .iter()
                .map(|c| (c.id, c.body.as_str()))
                .collect::<Vec<_>>(),
            [(said, "Drift changed.")]
        );
        assert!(client
            .comments_since(&repo, PR, None)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(
            client
                .open_issue(&repo, "Drift: prod/db", "")
                .await
                .unwrap(),
            PrNumber(1002)
        );
        assert_eq!(forge.issues(handle).len(), 2);
        assert_conformant(&forge.requests());
    }
}

/// A body longer than GitHub takes is refused by the client, unsent, on
/// both forges.
#[tokio::test]
async fn an_issue_body_over_the_limit_is_refused_unsent() {
    let gh = github().await;
    let fj = forgejo().await;
    let long = "x".repeat(65_537);
    for (client, forge, handle) in [
        (&gh.client, &gh.forge, &gh.repo),
        (&fj.client, &fj.forge, &fj.repo),
    ] {
        let repo = handle.repo_ref();
        let error = client.open_issue(&repo, "Drift", &long).await.unwrap_err();
        assert!(error.to_string().contains("65537 characters"), "{error:#}");
        let edit = IssueEdit {
            body: Some(&long),
            ..IssueEdit::default()
        };
        client
            .edit_issue(&repo, PrNumber(1001), &edit)
            .await
            .unwrap_err();
        assert!(
            !forge.requests().iter().any(|r| r.path.contains("/issues")),
            "{:#?}",
            forge.requests()
        );
        assert!(client.open_issue(&repo, "Drift", &long[1..]).await.is_ok());
    }
}

#[tokio::test]
#[should_panic(expected = "issue #1001 holds that number")]
async fn a_pull_request_cannot_take_an_issues_number() {
    let gh = github().await;
    gh.forge.open_issue(&gh.repo, "alice", "Broken", "");
    gh.forge
        .open_pr(&gh.repo, 1001, HEAD, BASE, "feature", "main", "alice");
}

/// The deliveries of a comment on an issue parse as both forges' real ones
/// do: an `/apply` line makes it a comment event on the issue's number.
#[tokio::test]
async fn issue_comment_payloads_are_comments_on_issues() {
    use wavegate::forge::events::{parse_forgejo, parse_github, Parsed};
    use wavegate::forge::Event;

    let gh = github().await;
    let fj = forgejo().await;
    for (forge, handle) in [(&gh.forge, &gh.repo), (&fj.forge, &fj.repo)] {
        let issue = forge.open_issue(handle, "wavegate", "Drift", "");
        let on_github = handle.installation.is_some();
        let parse = |text: &str| {
            let (event, body) = if on_github {
                support::github_issue_comment(handle, &issue, 5, "carol", text)
            } else {
                support::forgejo_issue_comment(handle, &issue, 5, "carol", text)
            };
            assert_eq!(event, "issue_comment");
            if on_github {
                parse_github(&event, &body).unwrap()
            } else {
                parse_forgejo(&event, &body).unwrap()
            }
        };
        let Parsed::Event(event) = parse("/apply sha256:ab") else {
            panic!("an /apply on an issue was ignored")
        };
        let Event::Comment {
            repo, pr, author, ..
        } = *event
        else {
            panic!("not a comment: {event:?}")
        };
        assert_eq!(repo, handle.repo_ref());
        assert_eq!((pr, author.login.as_str()), (PrNumber(1001), "carol"));
        assert!(matches!(parse("thanks"), Parsed::Ignored(_)));
    }
}
