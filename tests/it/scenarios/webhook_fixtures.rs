//! Real webhook payloads published by GitHub and Forgejo/Gitea
//! (`../shared/fixtures/`), delivered with the headers the fixtures README
//! lists, become the events wavegate acts on — or are ignored where the README
//! says so; and payloads that lost their shape fail with the field named.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use std::path::{Path, PathBuf};
use wavegate::forge::events::{parse_forgejo, parse_github, ParseError, Parsed};
use wavegate::forge::webhook::{dedupe_target, dedupe_target_of, read_headers};
use wavegate::forge::{Event, PrAction, PullRequest, RepoRef, ReviewState};
use wavegate::model::{CommitSha, ForgeKind, PrNumber, RepoId, UnixMs, User};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures")
}

fn fixture(relative: &str) -> Vec<u8> {
    let path = fixtures().join(relative);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every fixture, with the event headers the README table lists for it.
const DELIVERIES: &[(&str, &[(&str, &str)])] = &[
    (
        "github/webhooks/pull_request/opened.payload.json",
        &[("X-GitHub-Event", "pull_request")],
    ),
    (
        "github/webhooks/pull_request/opened.with-null-body.json",
        &[("X-GitHub-Event", "pull_request")],
    ),
    (
        "github/webhooks/pull_request/synchronize.payload.json",
        &[("X-GitHub-Event", "pull_request")],
    ),
    (
        "github/webhooks/pull_request/closed.payload.json",
        &[("X-GitHub-Event", "pull_request")],
    ),
    (
        "github/webhooks/issue_comment/created.payload.json",
        &[("X-GitHub-Event", "issue_comment")],
    ),
    (
        "github/webhooks/issue_comment/created.with-installation.payload.json",
        &[("X-GitHub-Event", "issue_comment")],
    ),
    (
        "github/webhooks/issue_comment/edited.payload.json",
        &[("X-GitHub-Event", "issue_comment")],
    ),
    (
        "github/webhooks/pull_request_review/submitted.payload.json",
        &[("X-GitHub-Event", "pull_request_review")],
    ),
    (
        "github/webhooks/installation/created.payload.json",
        &[("X-GitHub-Event", "installation")],
    ),
    (
        "github/webhooks/ping/with-app_id.payload.json",
        &[("X-GitHub-Event", "ping")],
    ),
    (
        "github/webhooks/check_run/rerequested.payload.json",
        &[("X-GitHub-Event", "check_run")],
    ),
    (
        "forgejo/webhooks/forgejo-pull_request-opened.json",
        &[
            ("X-Forgejo-Event", "pull_request"),
            ("X-Forgejo-Event-Type", "pull_request"),
        ],
    ),
    (
        "forgejo/webhooks/forgejo-pull_request-synchronized.json",
        &[
            ("X-Forgejo-Event", "pull_request"),
            ("X-Forgejo-Event-Type", "pull_request_sync"),
        ],
    ),
    (
        "forgejo/webhooks/forgejo-pull_request-merged.json",
        &[
            ("X-Forgejo-Event", "pull_request"),
            ("X-Forgejo-Event-Type", "pull_request"),
        ],
    ),
    (
        "forgejo/webhooks/gitea-pull_request_comment.json",
        &[
            ("X-Gitea-Event", "issue_comment"),
            ("X-Gitea-Event-Type", "pull_request_comment"),
        ],
    ),
    (
        "forgejo/webhooks/gitea-issue_comment-on-issue.json",
        &[
            ("X-Gitea-Event", "issue_comment"),
            ("X-Gitea-Event-Type", "issue_comment"),
        ],
    ),
    (
        "forgejo/webhooks/gitea-pull_request_review_approved.json",
        &[
            ("X-Gitea-Event", "pull_request_approved"),
            ("X-Gitea-Event-Type", "pull_request_review_approved"),
        ],
    ),
];

fn forge_of(relative: &str) -> ForgeKind {
    if relative.starts_with("forgejo/") {
        ForgeKind::Forgejo
    } else {
        ForgeKind::GitHub
    }
}

/// Sends `body` through header reading and the parser, as the server would.
fn deliver_body(relative: &str, body: &[u8]) -> Result<Parsed, ParseError> {
    let (_, event_headers) = DELIVERIES
        .iter()
        .find(|(path, _)| *path == relative)
        .unwrap_or_else(|| panic!("{relative} is not in the README table"));
    let forge = forge_of(relative);
    let mut headers = HeaderMap::new();
    let delivery_header = match forge {
        ForgeKind::GitHub => "X-GitHub-Delivery",
        ForgeKind::Forgejo => "X-Forgejo-Delivery",
    };
    let delivery = (delivery_header, "72d3162e-cc78-11e3-81ab-4c9367dc0958");
    for (name, value) in event_headers.iter().chain([&delivery]) {
        headers.insert(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_static(value),
        );
    }
    let delivery = read_headers(forge, &headers).unwrap();
    match forge {
        ForgeKind::GitHub => parse_github(&delivery.event_type, body),
        ForgeKind::Forgejo => parse_forgejo(&delivery.event_type, body),
    }
}

fn deliver(relative: &str) -> Parsed {
    deliver_body(relative, &fixture(relative))
        .unwrap_or_else(|e| panic!("{relative} did not parse: {e}"))
}

fn event_of(relative: &str) -> Event {
    match deliver(relative) {
        Parsed::Event(event) => *event,
        Parsed::Ignored(why) => panic!("{relative} was ignored: {why}"),
    }
}

fn ignored_reason(relative: &str) -> String {
    match deliver(relative) {
        Parsed::Ignored(why) => why,
        Parsed::Event(event) => panic!("{relative} should be ignored, became {event:?}"),
    }
}

fn pull_request_of(relative: &str) -> (RepoRef, PullRequest, PrAction) {
    match event_of(relative) {
        Event::PullRequest {
            repo, pr, action, ..
        } => (repo, pr, action),
        other => panic!("{relative} should be a pull request event, became {other:?}"),
    }
}

fn sha(text: &str) -> CommitSha {
    CommitSha::parse(text).unwrap()
}

fn human(id: u64, login: &str) -> User {
    User {
        id,
        login: login.to_owned(),
        is_bot: false,
    }
}

fn files_under(dir: &Path, found: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, found);
        } else {
            let relative = path.strip_prefix(fixtures()).unwrap();
            found.push(relative.to_string_lossy().into_owned());
        }
    }
}

#[test]
fn every_webhook_fixture_is_delivered_by_these_tests() {
    let mut found = Vec::new();
    files_under(&fixtures().join("github/webhooks"), &mut found);
    files_under(&fixtures().join("forgejo/webhooks"), &mut found);
    found.sort();
    let mut listed: Vec<String> = DELIVERIES.iter().map(|(p, _)| p.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed);
    for (relative, _) in DELIVERIES {
        deliver(relative);
    }
}

const CODERTOCAT_HEAD: &str = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";

fn hello_world_app_repo() -> RepoRef {
    RepoRef {
        id: RepoId::new(ForgeKind::GitHub, "Codertocat/Hello-World"),
        forge_id: 186853002,
        clone_url: "https://github.com/Codertocat/Hello-World.git".into(),
        installation: Some(1),
    }
}

fn codertocat_pr() -> PullRequest {
    PullRequest {
        number: PrNumber(2),
        title: "Update the README with new information.".into(),
        author: human(21031067, "Codertocat"),
        head_sha: sha(CODERTOCAT_HEAD),
        head_ref: "changes".into(),
        base_ref: "master".into(),
        base_sha: sha("f95f852bd8fca8fcc58a9a2d6c842781e32a215e"),
        from_fork: false,
        head_clone_url: None,
    }
}

#[test]
fn github_opened_pull_request_is_planned_from_its_head() {
    let (repo, pr, action) = pull_request_of("github/webhooks/pull_request/opened.payload.json");
    assert_eq!(repo, hello_world_app_repo());
    assert_eq!(pr, codertocat_pr());
    assert_eq!(action, PrAction::Opened);
}

#[test]
fn github_pull_request_with_a_null_body_still_opens() {
    let (repo, pr, action) =
        pull_request_of("github/webhooks/pull_request/opened.with-null-body.json");
    assert_eq!(repo, hello_world_app_repo());
    assert_eq!(pr, codertocat_pr());
    assert_eq!(action, PrAction::Opened);
}

#[test]
fn github_synchronize_is_a_push() {
    let (_, pr, action) = pull_request_of("github/webhooks/pull_request/synchronize.payload.json");
    assert_eq!(pr.head_sha, sha(CODERTOCAT_HEAD));
    assert_eq!(action, PrAction::Pushed);
}

#[test]
fn github_closed_without_merge_has_no_merge_sha_even_though_the_payload_has_a_test_merge() {
    let relative = "github/webhooks/pull_request/closed.payload.json";
    let payload: Value = serde_json::from_slice(&fixture(relative)).unwrap();
    assert!(payload["pull_request"]["merge_commit_sha"].is_string());
    let (_, pr, action) = pull_request_of(relative);
    assert_eq!(pr.number, PrNumber(2));
    assert_eq!(
        action,
        PrAction::Closed {
            merged: false,
            merge_sha: None
        }
    );
}

#[test]
fn github_merged_pull_request_carries_the_merge_commit() {
    let relative = "github/webhooks/pull_request/closed.payload.json";
    let mut payload: Value = serde_json::from_slice(&fixture(relative)).unwrap();
    payload["pull_request"]["merged"] = Value::Bool(true);
    let body = serde_json::to_vec(&payload).unwrap();
    let Parsed::Event(event) = deliver_body(relative, &body).unwrap() else {
        panic!("a merge was ignored")
    };
    let Event::PullRequest { action, .. } = *event else {
        panic!("not a pull request event: {event:?}")
    };
    assert_eq!(
        action,
        PrAction::Closed {
            merged: true,
            merge_sha: Some(sha("c4295bd74fb0f4fda03689c3df3f2803b658fd85"))
        }
    );
}

#[test]
fn github_comments_on_issues_are_ignored() {
    for relative in [
        "github/webhooks/issue_comment/created.payload.json",
        "github/webhooks/issue_comment/created.with-installation.payload.json",
    ] {
        assert_eq!(
            ignored_reason(relative),
            "comment on an issue, not a pull request"
        );
    }
}

/// `relative`'s delivery with the comment saying `text` instead.
fn with_comment(relative: &str, text: &str) -> Parsed {
    let mut payload: Value = serde_json::from_slice(&fixture(relative)).unwrap();
    payload["comment"]["body"] = serde_json::json!(text);
    deliver_body(relative, &serde_json::to_vec(&payload).unwrap())
        .unwrap_or_else(|e| panic!("{relative} did not parse: {e}"))
}

#[test]
fn github_apply_on_an_issue_is_a_command_candidate() {
    let relative = "github/webhooks/issue_comment/created.with-installation.payload.json";
    let text = "Checked the console: this is ours.\n  /apply sha256:0123abcd";
    let Parsed::Event(event) = with_comment(relative, text) else {
        panic!("an /apply on an issue was ignored")
    };
    assert_eq!(
        *event,
        Event::Comment {
            repo: hello_world_app_repo(),
            pr: PrNumber(1),
            comment_id: 492700400,
            author: human(21031067, "Codertocat"),
            body: text.into(),
            // 2019-05-15T15:20:21Z
            written_at: Some(UnixMs::from_millis(1_557_933_621_000)),
        }
    );
}

#[test]
fn github_comments_on_issues_without_a_drift_issue_command_are_ignored() {
    let relative = "github/webhooks/issue_comment/created.payload.json";
    for text in ["> /apply sha256:0123abcd", "Shall I /apply it?", "/plan"] {
        assert_eq!(
            with_comment(relative, text),
            Parsed::Ignored("comment on an issue, not a pull request".into()),
            "{text}"
        );
    }
}

#[test]
fn github_edited_comment_never_approves() {
    assert_eq!(
        ignored_reason("github/webhooks/issue_comment/edited.payload.json"),
        "an edited comment is never a command"
    );
}

#[test]
fn github_comment_on_a_pull_request_is_a_command_candidate() {
    let relative = "github/webhooks/issue_comment/created.with-installation.payload.json";
    let mut payload: Value = serde_json::from_slice(&fixture(relative)).unwrap();
    payload["issue"]["pull_request"] = serde_json::json!({
        "url": "https://api.github.com/repos/Codertocat/Hello-World/pulls/1"
    });
    let body = serde_json::to_vec(&payload).unwrap();
    let Parsed::Event(event) = deliver_body(relative, &body).unwrap() else {
        panic!("a comment on a pull request was ignored")
    };
    assert_eq!(
        *event,
        Event::Comment {
            repo: hello_world_app_repo(),
            pr: PrNumber(1),
            comment_id: 492700400,
            author: human(21031067, "Codertocat"),
            body: "You are totally right! I'll get this fixed right away.".into(),
            // 2019-05-15T15:20:21Z
            written_at: Some(UnixMs::from_millis(1_557_933_621_000)),
        }
    );
}

#[test]
fn github_submitted_review_is_bound_to_its_commit() {
    let event = event_of("github/webhooks/pull_request_review/submitted.payload.json");
    assert_eq!(
        event,
        Event::Review {
            repo: hello_world_app_repo(),
            pr: PrNumber(2),
            review_id: 237895671,
            author: human(21031067, "Codertocat"),
            state: ReviewState::Commented,
            commit: Some(sha(CODERTOCAT_HEAD)),
            submitted_at: Some(UnixMs::from_millis(1_557_933_638_000)),
        }
    );
}

#[test]
fn github_installation_created() {
    assert_eq!(
        event_of("github/webhooks/installation/created.payload.json"),
        Event::Installation {
            installation: 957387,
            account: "Codertocat".into(),
            created: true,
        }
    );
}

#[test]
fn github_ping() {
    assert_eq!(
        event_of("github/webhooks/ping/with-app_id.payload.json"),
        Event::Ping
    );
}

#[test]
fn github_check_run_rerequested_names_the_head_commit() {
    assert_eq!(
        event_of("github/webhooks/check_run/rerequested.payload.json"),
        Event::CheckRunRerequested {
            repo: RepoRef {
                id: RepoId::new(ForgeKind::GitHub, "github/hello-world"),
                forge_id: 526,
                clone_url: "http://github.com/github/hello-world.git".into(),
                installation: Some(1),
            },
            head_sha: sha("d6fde92930d4715a2b49857d24b940956b26d2d3"),
            prs: vec![],
        }
    );
}

#[test]
fn forgejo_opened_pull_request_without_head_repository_counts_as_a_fork() {
    let (repo, pr, action) = pull_request_of("forgejo/webhooks/forgejo-pull_request-opened.json");
    assert_eq!(
        repo,
        RepoRef {
            id: RepoId::new(ForgeKind::Forgejo, "gordon/hello-world"),
            forge_id: 35129377,
            clone_url: "https://forgejo.golang.org/gordon/hello-world.git".into(),
            installation: None,
        }
    );
    assert_eq!(
        pr,
        PullRequest {
            number: PrNumber(1),
            title: "Update the README with new information".into(),
            author: human(1, "gordon"),
            head_sha: sha("0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"),
            head_ref: "feature/changes".into(),
            base_ref: "main".into(),
            base_sha: sha("9353195a19e45482665306e466c832c46560532d"),
            from_fork: true,
            head_clone_url: None,
        }
    );
    assert_eq!(action, PrAction::Opened);
}

#[test]
fn forgejo_synchronized_is_a_push_from_the_same_repository() {
    let (repo, pr, action) =
        pull_request_of("forgejo/webhooks/forgejo-pull_request-synchronized.json");
    assert_eq!(
        repo.id,
        RepoId::new(ForgeKind::Forgejo, "Test-CI/multi-line-secrets")
    );
    assert_eq!(repo.forge_id, 6);
    assert_eq!(pr.number, PrNumber(2));
    assert_eq!(pr.head_sha, sha("788ed8d02d3b7fcfcf6386dbcbca696aa1d4dc25"));
    assert_eq!(pr.author, human(1, "test"));
    assert!(!pr.from_fork);
    assert_eq!(action, PrAction::Pushed);
}

#[test]
fn forgejo_merged_pull_request_carries_the_merge_commit() {
    let (repo, pr, action) = pull_request_of("forgejo/webhooks/forgejo-pull_request-merged.json");
    assert_eq!(
        repo.id,
        RepoId::new(ForgeKind::Forgejo, "anbraten/test-repo")
    );
    assert_eq!(pr.number, PrNumber(1));
    assert_eq!(pr.head_sha, sha("d555a5dd07f4d0148a58d4686ec381502ae6a2d4"));
    assert!(!pr.from_fork);
    assert_eq!(
        action,
        PrAction::Closed {
            merged: true,
            merge_sha: Some(sha("f2440f050054df0f8ecabcace648f1683509064c"))
        }
    );
}

#[test]
fn gitea_comment_on_a_pull_request_is_a_command_candidate() {
    assert_eq!(
        event_of("forgejo/webhooks/gitea-pull_request_comment.json"),
        Event::Comment {
            repo: RepoRef {
                id: RepoId::new(ForgeKind::Forgejo, "example/example"),
                forge_id: 1,
                clone_url: "http://localhost:3000/example/example.git".into(),
                installation: None,
            },
            pr: PrNumber(2),
            comment_id: 6,
            author: human(1, "example"),
            body: "example".into(),
            // 2022-03-09T16:31:34+09:00
            written_at: Some(UnixMs::from_millis(1_646_811_094_000)),
        }
    );
}

#[test]
fn gitea_comment_on_an_issue_is_ignored() {
    assert_eq!(
        ignored_reason("forgejo/webhooks/gitea-issue_comment-on-issue.json"),
        "comment on an issue, not a pull request"
    );
}

#[test]
fn gitea_apply_on_an_issue_is_a_command_candidate() {
    let relative = "forgejo/webhooks/gitea-issue_comment-on-issue.json";
    let Parsed::Event(event) = with_comment(relative, "/apply sha256:0123abcd") else {
        panic!("an /apply on an issue was ignored")
    };
    assert_eq!(
        *event,
        Event::Comment {
            repo: RepoRef {
                id: RepoId::new(ForgeKind::Forgejo, "example/example"),
                forge_id: 1,
                clone_url: "http://localhost:3000/example/example.git".into(),
                installation: None,
            },
            pr: PrNumber(1),
            comment_id: 2,
            author: human(1, "example"),
            body: "/apply sha256:0123abcd".into(),
            // 2022-03-09T16:20:44+09:00
            written_at: Some(UnixMs::from_millis(1_646_810_444_000)),
        }
    );
    assert_eq!(
        with_comment(relative, "> /apply sha256:0123abcd"),
        Parsed::Ignored("comment on an issue, not a pull request".into())
    );
}

#[test]
fn gitea_approval_is_by_the_sender_on_the_head_commit() {
    assert_eq!(
        event_of("forgejo/webhooks/gitea-pull_request_review_approved.json"),
        Event::Review {
            repo: RepoRef {
                id: RepoId::new(ForgeKind::Forgejo, "a_nice_user/hello_world_ci"),
                forge_id: 1234,
                clone_url: "https://gitea.com/a_nice_user/hello_world_ci.git".into(),
                installation: None,
            },
            pr: PrNumber(7),
            review_id: 0,
            author: human(349, "a_nice_user"),
            state: ReviewState::Approved,
            commit: Some(sha("07977177c2cd7d46bad37b8472a9d50e7acb9d1f")),
            submitted_at: None,
        }
    );
}

#[test]
fn redeliveries_are_deduplicated_per_installation_or_repository() {
    let target = |relative: &str| dedupe_target(forge_of(relative), &fixture(relative));
    assert_eq!(
        target("github/webhooks/installation/created.payload.json"),
        "installation:957387"
    );
    assert_eq!(
        target("github/webhooks/issue_comment/created.payload.json"),
        "repo:186853002"
    );
    assert_eq!(
        target("forgejo/webhooks/forgejo-pull_request-merged.json"),
        "repo:46534"
    );
}

#[test]
fn the_dedupe_target_read_off_an_event_is_the_one_probed_from_its_body() {
    let mut events = 0;
    for (relative, _) in DELIVERIES {
        let Parsed::Event(event) = deliver(relative) else {
            continue;
        };
        let (forge, body) = (forge_of(relative), fixture(relative));
        assert_eq!(
            dedupe_target_of(forge, &event, &body),
            dedupe_target(forge, &body),
            "{relative}"
        );
        events += 1;
    }
    assert!(events >= 8, "only {events} fixtures became events");
}

fn problem_with(relative: &str, edit: impl FnOnce(&mut Value)) -> ParseError {
    let mut payload: Value = serde_json::from_slice(&fixture(relative)).unwrap();
    edit(&mut payload);
    let body = serde_json::to_vec(&payload).unwrap();
    deliver_body(relative, &body).expect_err("the damaged payload parsed")
}

const GITHUB_OPENED: &str = "github/webhooks/pull_request/opened.payload.json";

#[test]
fn truncated_json_is_refused_as_invalid() {
    let body = fixture(GITHUB_OPENED);
    let err = deliver_body(GITHUB_OPENED, &body[..body.len() / 2]).unwrap_err();
    assert_eq!(err.event, "pull_request");
    assert!(err.problem.starts_with("not valid JSON: EOF"), "{err}");
}

#[test]
fn a_missing_head_sha_is_named_by_its_path() {
    let err = problem_with(GITHUB_OPENED, |p| {
        p["pull_request"]["head"]
            .as_object_mut()
            .unwrap()
            .remove("sha");
    });
    assert_eq!(
        err.to_string(),
        "pull_request payload is malformed: pull_request.head.sha is missing"
    );
}

#[test]
fn a_head_sha_that_is_not_a_commit_is_refused() {
    let err = problem_with(GITHUB_OPENED, |p| {
        p["pull_request"]["head"]["sha"] = "main".into();
    });
    assert_eq!(
        err.problem,
        "pull_request.head.sha: `main` is not a full commit sha"
    );
}

#[test]
fn a_number_of_the_wrong_type_is_named_by_its_path() {
    let err = problem_with(GITHUB_OPENED, |p| {
        p["pull_request"]["number"] = "two".into();
    });
    assert!(
        err.problem
            .starts_with("pull_request.number: invalid type: string"),
        "{err}"
    );
}

#[test]
fn a_null_comment_body_is_named_by_its_path() {
    let err = problem_with("forgejo/webhooks/gitea-pull_request_comment.json", |p| {
        p["comment"]["body"] = Value::Null
    });
    assert!(
        err.problem.starts_with("comment.body: invalid type: null"),
        "{err}"
    );
}

#[test]
fn a_merge_without_its_merge_commit_is_refused() {
    let err = problem_with("forgejo/webhooks/forgejo-pull_request-merged.json", |p| {
        p["pull_request"]["merge_commit_sha"] = Value::Null;
    });
    assert_eq!(err.problem, "pull_request.merge_commit_sha is missing");
}

#[test]
fn a_forgejo_pull_request_without_any_number_is_refused() {
    let err = problem_with("forgejo/webhooks/forgejo-pull_request-opened.json", |p| {
        p.as_object_mut().unwrap().remove("number");
    });
    assert_eq!(err.problem, "number is missing");
}

#[test]
fn a_check_run_pull_request_of_the_wrong_shape_is_named_by_its_index() {
    let err = problem_with("github/webhooks/check_run/rerequested.payload.json", |p| {
        p["check_run"]["pull_requests"] = serde_json::json!([{"number": -1}]);
    });
    assert!(
        err.problem
            .starts_with("check_run.pull_requests[0].number: invalid value"),
        "{err}"
    );
}

#[test]
fn a_review_in_an_unknown_state_is_refused() {
    let err = problem_with(
        "github/webhooks/pull_request_review/submitted.payload.json",
        |p| p["review"]["state"] = "pending".into(),
    );
    assert!(err.problem.contains("review.state `pending`"), "{err}");
}
