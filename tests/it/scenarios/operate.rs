//! An operator's actions on the queue page and the API, over the real
//! binary: a lock left behind by a run whose job died is released by a
//! repository admin, recorded in the ledger, and the run queued behind it
//! goes on; the dead job is retried the same way. Nobody logged in, a
//! reader, and a form without the session's CSRF token are refused.

use crate::support::bot::*;
use crate::support::login::*;
use crate::support::pr::*;
use serde_json::Value;
use wavegate::model::ForgeKind;

const QUEUE: &str = "/repos/github/acme/infra/queue";
const RELEASE: &str = "/repos/github/acme/infra/locks/app@dev/release";
const API_RELEASE: &str = "/api/v1/repos/github/acme/infra/locks/app@dev/release";

/// What a server restored after a crash could hold: run `pr`'s lock of
/// app@dev still taken, and the job that drove the run dead. Answers that
/// job's id.
pub(crate) async fn leave_a_stale_lock(bot: &Bot, pr: u64) -> i64 {
    use sqlx::Connection as _;
    let mut db = sqlx::SqliteConnection::connect(&bot.database_url())
        .await
        .unwrap();
    let run: i64 = sqlx::query_scalar("SELECT id FROM apply_runs WHERE number = $1")
        .bind(i64::try_from(pr).unwrap())
        .fetch_one(&mut db)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO member_locks (forge, repo, member, run_id, acquired_at)
         VALUES ('github', 'acme/infra', 'app@dev', $1, $2)",
    )
    .bind(run)
    .bind(
        i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap(),
    )
    .execute(&mut db)
    .await
    .unwrap();
    let job: i64 = sqlx::query_scalar("SELECT MAX(id) FROM jobs WHERE queue_key = $1")
        .bind(format!("github:acme/infra#{pr}"))
        .fetch_one(&mut db)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE jobs SET status = 'dead', last_error = 'its lease ran out 5 times' WHERE id = $1",
    )
    .bind(job)
    .execute(&mut db)
    .await
    .unwrap();
    job
}

/// POST `path` on the API as `visitor` (their session cookie), with `csrf`
/// in the header the API reads it from.
async fn api_post(bot: &Bot, visitor: &Visitor<'_>, path: &str, csrf: &str) -> (u16, Value) {
    let session = visitor.cookie("wavegate_session").unwrap_or_default();
    let answer = bot
        .http
        .post(bot.url(path))
        .header("cookie", format!("wavegate_session={session}"))
        .header("x-wavegate-csrf", csrf)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap())
}

async fn json(visitor: &mut Visitor<'_>, path: &str) -> Value {
    let seen = visitor.get(path).await;
    assert_eq!(seen.status, 200, "{path}: {}", seen.body);
    serde_json::from_str(&seen.body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_pages_open_and_no_login_nobody_may_act_on_the_queue() {
    let bot = Bot::start_with(&[("WAVEGATE_PUBLIC_PAGES", "on")]).await;
    let pr = approved_pr(&bot, 1).await;
    pr.merge().await;
    leave_a_stale_lock(&bot, 1).await;

    let page = bot.http.get(bot.url(QUEUE)).send().await.unwrap();
    let page = page.text().await.unwrap();
    assert!(page.contains("app@dev"), "{page}");
    assert!(!page.contains("Release if stale"), "no button: {page}");

    let answer = bot
        .http
        .post(bot.url(RELEASE))
        .form(&[("csrf", "guessed")])
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 403);
    let body = answer.text().await.unwrap();
    assert!(
        body.contains("log in with the forge to act on github:acme/infra")
            && body.contains("this server offers no login yet"),
        "{body}"
    );
    let answer = bot.http.post(bot.url(API_RELEASE)).send().await.unwrap();
    assert_eq!(answer.status(), 403);
    let error: Value = answer.json().await.unwrap();
    assert!(
        error["error"].as_str().unwrap().contains("log in"),
        "{error}"
    );
    let queue: Value = serde_json::from_str(
        &bot.http
            .get(bot.url("/api/v1/repos/github/acme/infra/queue"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(queue["locks"][0]["member"], "app@dev", "still held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_releases_a_stale_lock_and_the_run_queued_behind_it_goes_on() {
    let bot = Bot::start_with(&LOGIN_ENV).await;
    bot.register_login_clients();
    let first = planned_pr(&bot, 6).await;
    first.comment_as("rev-bob", "/approve").await;
    bot.branch_bigger_app("bigger");
    let second = bot.opened(&first.repo, 7, "bigger").await;
    second.comment_as("rev-bob", "/approve").await;
    bot.forge.set_permission(&first.repo, "ada-admin", "admin");
    bot.forge.set_permission(&first.repo, "erin", "read");

    // #6 applied dev and waits at prod; a crash left its lock of app@dev
    // taken and its job dead. #7 merges and queues behind that lock.
    first.merge().await;
    let dead = leave_a_stale_lock(&bot, 6).await;
    second.merge().await;
    assert!(
        second.last_reply().contains("pull request #6 is applying"),
        "{}",
        second.last_reply()
    );

    // Nobody logged in is sent to log in, and comes back to the queue.
    let mut nobody = Visitor::new(&bot);
    let seen = nobody.post_form(RELEASE, &[("csrf", "x")]).await;
    assert_eq!(seen.status, 303);
    assert_eq!(
        seen.location.as_deref(),
        Some("/login?next=/repos/github/acme/infra/queue")
    );

    // erin may read the repository, not act on it.
    let mut erin = Visitor::logged_in(&bot, ForgeKind::GitHub, "erin").await;
    let page = erin.get(QUEUE).await.body;
    assert!(page.contains("Release if stale"), "{page}");
    let csrf = erin.csrf();
    let seen = erin.post_form(RELEASE, &[("csrf", &csrf)]).await;
    assert_eq!(seen.status, 403);
    assert!(
        seen.body
            .contains("erin may read github:acme/infra but not act on its locks and jobs"),
        "{}",
        seen.body
    );

    // The admin, with a form that is not from her session: refused.
    let mut ada = Visitor::logged_in(&bot, ForgeKind::GitHub, "ada-admin").await;
    let seen = ada.post_form(RELEASE, &[("csrf", "not-hers")]).await;
    assert_eq!(seen.status, 403);
    assert!(
        seen.body.contains("CSRF token does not match"),
        "{}",
        seen.body
    );
    let (status, error) = api_post(&bot, &ada, API_RELEASE, "").await;
    assert_eq!(status, 403, "the API wants the token in X-Wavegate-Csrf");
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("CSRF token does not match"),
        "{error}"
    );
    let queue = json(&mut ada, "/api/v1/repos/github/acme/infra/queue").await;
    assert_eq!(queue["locks"][0]["member"], "app@dev");

    // With her session's token the lock goes, back to the queue page.
    let csrf = ada.csrf();
    let seen = ada.post_form(RELEASE, &[("csrf", &csrf)]).await;
    assert_eq!(seen.status, 303, "{}", seen.body);
    assert_eq!(seen.location.as_deref(), Some(QUEUE));
    bot.settle().await;

    // The ledger records who released what and why, signed and verified.
    let ledger = json(&mut ada, "/api/v1/repos/github/acme/infra/ledger").await;
    assert_eq!(ledger["verified"], true, "{ledger:#}");
    let released = ledger["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|fact| fact["kind"] == "lock_released")
        .unwrap_or_else(|| panic!("{ledger:#}"));
    assert_eq!(released["by"], "ada-admin");
    assert_eq!(released["gate"], "pr-6");
    assert_eq!(released["counts"], true);
    bot.assert_ledger_verifies();

    // #7 went on by itself: it planned again past #6's change and asks
    // for its own approval; nothing holds app@dev any more.
    let pull = json(&mut ada, "/api/v1/repos/github/acme/infra/pulls/7").await;
    let waiting = pull["run"]["waiting_for"].as_str().unwrap_or_default();
    assert!(!waiting.contains("is applying"), "{pull:#}");
    let asked = second.last_reply();
    assert!(
        asked.contains("not covered") || asked.contains("round 2"),
        "{asked}"
    );
    let queue = json(&mut ada, "/api/v1/repos/github/acme/infra/queue").await;
    assert_eq!(queue["locks"], serde_json::json!([]), "{queue:#}");

    // The dead job: erin may not retry it; ada does, through the API.
    let retry = format!("/api/v1/repos/github/acme/infra/jobs/{dead}/retry");
    let (status, error) = api_post(&bot, &erin, &retry, &erin.csrf()).await;
    assert_eq!(status, 403, "{error}");
    let (status, retried) = api_post(&bot, &ada, &retry, &ada.csrf()).await;
    assert_eq!(status, 200, "{retried}");
    assert_eq!(retried["job"], dead);
    assert_eq!(retried["pr"], 6);
    bot.settle().await;
    let queue = json(&mut ada, "/api/v1/repos/github/acme/infra/queue").await;
    assert!(
        queue["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|job| job["id"] != dead),
        "it ran and finished: {queue:#}"
    );
    let (status, again) = api_post(&bot, &ada, &retry, &ada.csrf()).await;
    assert_eq!(status, 409, "{again}");
    assert!(
        again["error"]
            .as_str()
            .unwrap()
            .contains("only a dead job is retried"),
        "{again}"
    );
    let ledger = json(&mut ada, "/api/v1/repos/github/acme/infra/ledger").await;
    assert_eq!(ledger["facts"][0]["kind"], "job_retried", "{ledger:#}");
    assert_eq!(ledger["verified"], true);
}

#[tokio::test]
async fn a_member_of_an_operator_team_releases_a_stale_lock_and_a_writer_outside_it_may_not() {
    let mut env = LOGIN_ENV.to_vec();
    env.push(("WAVEGATE_OPERATOR_TEAMS", "platform"));
    let bot = Bot::start_with(&env).await;
    bot.register_login_clients();
    let pr = approved_pr(&bot, 6).await;
    bot.forge.set_permission(&pr.repo, "tina", "write");
    bot.forge.set_permission(&pr.repo, "wes", "write");
    bot.forge.add_team_member("acme", "platform", "tina");
    pr.merge().await;
    leave_a_stale_lock(&bot, 6).await;

    // wes may write to the repository, but only admins and the team act.
    let mut wes = Visitor::logged_in(&bot, ForgeKind::GitHub, "wes").await;
    let csrf = wes.csrf();
    let seen = wes.post_form(RELEASE, &[("csrf", &csrf)]).await;
    assert_eq!(seen.status, 403);
    assert!(
        seen.body.contains(
            "wes may read github:acme/infra but not act on its locks and jobs: that takes admin on the repository or membership of the team platform"
        ),
        "{}",
        seen.body
    );

    // tina is on the platform team: the lock goes, recorded as hers.
    let mut tina = Visitor::logged_in(&bot, ForgeKind::GitHub, "tina").await;
    let csrf = tina.csrf();
    let seen = tina.post_form(RELEASE, &[("csrf", &csrf)]).await;
    assert_eq!(seen.status, 303, "{}", seen.body);
    bot.settle().await;
    let ledger = json(&mut tina, "/api/v1/repos/github/acme/infra/ledger").await;
    let released: Vec<&Value> = ledger["facts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|fact| fact["kind"] == "lock_released")
        .collect();
    assert_eq!(released.len(), 1, "{ledger:#}");
    assert_eq!(released[0]["by"], "tina");
    bot.assert_ledger_verifies();
}
