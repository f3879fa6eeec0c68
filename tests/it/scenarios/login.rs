//! Logging in to the pages with the forge: nobody logged in is sent to log
//! in; someone who can read the repository on the forge sees its pages,
//! someone who cannot (or who logged in with the other forge) is refused;
//! a login this browser did not start, a session cookie changed by hand, a
//! form without the session's CSRF token are refused.

use crate::support::bot::*;
use crate::support::login::*;
use crate::support::pr::*;
use serde_json::Value;
use wavegate::model::ForgeKind;

const PAGE: &str = "/repos/github/acme/infra/pulls/1";
const API: &str = "/api/v1/repos/github/acme/infra/pulls/1";

async fn bot_with_logins() -> Bot {
    let bot = Bot::start_with(&LOGIN_ENV).await;
    bot.register_login_clients();
    bot
}

#[tokio::test]
async fn a_reader_logs_in_with_github_and_sees_the_pull_request_an_outsider_cannot() {
    let bot = bot_with_logins().await;
    let pr = planned_pr(&bot, 1).await;
    bot.forge.set_permission(&pr.repo, "erin", "read");

    // Nobody logged in: the page sends them to log in, the API says so.
    let mut nobody = Visitor::new(&bot);
    let seen = nobody.get(PAGE).await;
    assert_eq!(seen.status, 303);
    assert_eq!(
        seen.location.as_deref(),
        Some("/login?next=/repos/github/acme/infra/pulls/1")
    );
    let api = nobody.get(API).await;
    assert_eq!(api.status, 401);
    assert!(api.body.contains("log in with the forge"), "{}", api.body);
    let login = nobody
        .get("/login?next=/repos/github/acme/infra/pulls/1")
        .await;
    assert!(login.body.contains("Log in with GitHub"), "{}", login.body);
    assert!(login.body.contains("Log in with Forgejo"), "{}", login.body);
    assert!(
        login
            .body
            .contains("/login/github?next=/repos/github/acme/infra/pulls/1"),
        "{}",
        login.body
    );

    // erin reads the repository on GitHub: she logs in and sees #1.
    let mut erin = Visitor::new(&bot);
    assert_eq!(erin.log_in(ForgeKind::GitHub, "erin").await, "/repos");
    assert_eq!(bot.forge.logged_in(), [(ForgeKind::GitHub, "erin".into())]);
    let page = erin.get(PAGE).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("Logged in as <strong>erin</strong>"),
        "{}",
        page.body
    );
    let api = erin.get(API).await;
    assert_eq!(api.status, 200, "{}", api.body);
    let pull: Value = serde_json::from_str(&api.body).unwrap();
    assert_eq!(pull["number"], 1);
    let repos: Value = serde_json::from_str(&erin.get("/api/v1/repos").await.body).unwrap();
    assert_eq!(repos[0]["name"], "acme/infra");

    // sam cannot read it: refused, and no repository is listed to him.
    let mut sam = Visitor::logged_in(&bot, ForgeKind::GitHub, "stranger-sam").await;
    let page = sam.get(PAGE).await;
    assert_eq!(page.status, 403);
    assert!(
        page.body.contains("stranger-sam has no read access to"),
        "{}",
        page.body
    );
    assert_eq!(sam.get(API).await.status, 403);
    let repos: Value = serde_json::from_str(&sam.get("/api/v1/repos").await.body).unwrap();
    assert_eq!(repos, serde_json::json!([]));

    // Whether wavegate knows a repository is not told to him either.
    let unknown = sam.get("/repos/github/acme/secret-plans/pulls/1").await;
    assert_eq!(unknown.status, 403, "{}", unknown.body);
    assert_eq!(
        Visitor::new(&bot)
            .get("/repos/github/acme/secret-plans")
            .await
            .status,
        303,
        "nobody is sent to log in, known or not"
    );

    // A Forgejo login is no one on GitHub, whatever its name.
    let mut erin_on_forgejo = Visitor::logged_in(&bot, ForgeKind::Forgejo, "erin").await;
    assert_eq!(erin_on_forgejo.get(PAGE).await.status, 403);
}

#[tokio::test]
async fn a_forgejo_collaborator_logs_in_with_forgejo_and_sees_the_pull_request() {
    let bot = bot_with_logins().await;
    let _pr = planned_pr_on_forgejo(&bot, 2).await;
    let mut bob = Visitor::logged_in(&bot, ForgeKind::Forgejo, "rev-bob").await;
    let page = bob.get("/repos/forgejo/acme/infra/pulls/2").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("rev-bob"), "{}", page.body);
    let mut sam = Visitor::logged_in(&bot, ForgeKind::Forgejo, "stranger-sam").await;
    assert_eq!(
        sam.get("/repos/forgejo/acme/infra/pulls/2").await.status,
        403
    );
}

#[tokio::test]
async fn a_login_this_browser_did_not_start_a_changed_cookie_and_a_form_without_its_token_are_refused(
) {
    let bot = bot_with_logins().await;
    let pr = planned_pr(&bot, 1).await;
    bot.forge.set_permission(&pr.repo, "erin", "read");

    // A login link made in someone else's browser does not log this one in.
    let mut victim = Visitor::new(&bot);
    let mut attacker = Visitor::new(&bot);
    let callback = attacker.authorise(ForgeKind::GitHub, "stranger-sam").await;
    let seen = victim.get(&callback).await;
    assert_eq!(seen.status, 400);
    assert!(
        seen.body.contains("not the one this browser started"),
        "{}",
        seen.body
    );
    assert!(victim.cookie("wavegate_session").is_none());

    // The forge's refusal is said as such.
    let denied = victim
        .get("/login/github/callback?error=access_denied&state=x")
        .await;
    assert_eq!(denied.status, 403);
    assert!(denied.body.contains("access_denied"), "{}", denied.body);

    // A session cookie changed by hand is no session.
    let mut erin = Visitor::logged_in(&bot, ForgeKind::GitHub, "erin").await;
    let sealed = erin.cookie("wavegate_session").unwrap().to_owned();
    let (payload, tag) = sealed.split_once('.').unwrap();
    let mut forged = payload.to_owned();
    forged.replace_range(..1, if payload.starts_with('e') { "f" } else { "e" });
    let mut mallory = Visitor::new(&bot);
    mallory.set_cookie("wavegate_session", &format!("{forged}.{tag}"));
    assert_eq!(mallory.get(PAGE).await.status, 303);

    // Logging out takes the session's token; then the page asks for a login again.
    let refused = erin
        .post_form("/logout", &[("csrf", "not-the-token")])
        .await;
    assert_eq!(refused.status, 403);
    assert_eq!(erin.get(PAGE).await.status, 200);
    let csrf = erin.csrf();
    let out = erin.post_form("/logout", &[("csrf", &csrf)]).await;
    assert_eq!(out.status, 303);
    assert!(erin.cookie("wavegate_session").is_none());
    assert_eq!(erin.get(PAGE).await.status, 303);
}

#[tokio::test]
async fn with_the_pages_open_anyone_reads_and_a_login_still_works() {
    let mut env = LOGIN_ENV.to_vec();
    env.push(("WAVEGATE_PUBLIC_PAGES", "on"));
    let bot = Bot::start_with(&env).await;
    bot.register_login_clients();
    let _pr = planned_pr(&bot, 1).await;
    let mut anyone = Visitor::new(&bot);
    let page = anyone.get(PAGE).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains(r#"href="/login""#), "{}", page.body);
    let mut carol = Visitor::logged_in(&bot, ForgeKind::GitHub, "rev-carol").await;
    assert!(carol.get(PAGE).await.body.contains("Logged in as"));
    // Open pages show a visitor who logged in with the other forge what
    // they show anyone.
    let mut stranger = Visitor::logged_in(&bot, ForgeKind::Forgejo, "stranger-sam").await;
    assert_eq!(stranger.get(PAGE).await.status, 200);
}

/// `wavegate api-token …` on the bot's database.
fn api_token(bot: &Bot, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .arg("api-token")
        .args(args)
        .args(["--database", &bot.database_url()])
        .env_remove("WAVEGATE_DATABASE_URL")
        .output()
        .expect("the wavegate binary runs")
}

async fn api_get(bot: &Bot, path: &str, token: &str) -> (u16, String) {
    let answer = bot
        .http
        .get(bot.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (answer.status().as_u16(), answer.text().await.unwrap())
}

#[tokio::test]
async fn an_integration_reads_the_api_with_a_token_that_names_its_repository_until_it_is_revoked() {
    let bot = bot_with_logins().await;
    let _github = planned_pr(&bot, 1).await;
    let _forgejo = planned_pr_on_forgejo(&bot, 2).await;

    let made = api_token(
        &bot,
        &["create", "dashboards", "--repo", "github:acme/infra"],
    );
    assert!(made.status.success(), "{made:?}");
    let token = String::from_utf8(made.stdout).unwrap().trim().to_owned();
    assert!(token.starts_with("wgt_"), "{token}");
    let said = String::from_utf8(made.stderr).unwrap();
    assert!(said.contains("reading github:acme/infra"), "{said}");

    // It reads the repository it names, and nothing else.
    let (status, body) = api_get(&bot, API, &token).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = api_get(&bot, "/api/v1/repos", &token).await;
    assert_eq!(status, 200);
    let repos: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(repos.as_array().unwrap().len(), 1, "{repos}");
    let (status, body) = api_get(&bot, "/api/v1/repos/forgejo/acme/infra/pulls/2", &token).await;
    assert_eq!(status, 403);
    assert!(
        body.contains("the API token dashboards may not read forgejo:acme/infra"),
        "{body}"
    );

    // A token that is not one is refused, not taken for a visitor.
    let (status, body) = api_get(&bot, API, "wgt_not-a-token").await;
    assert_eq!(status, 401);
    assert!(body.contains("not one this server knows"), "{body}");

    // The name is taken once; the list names each token and what it reads.
    let again = api_token(&bot, &["create", "dashboards"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr)
        .contains("there is a token named dashboards already"));
    let listed = api_token(&bot, &["list"]);
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(
        listed.starts_with("dashboards\tgithub:acme/infra\tmade "),
        "{listed}"
    );

    // Revoked, it is refused from the next request on.
    assert!(api_token(&bot, &["revoke", "dashboards"]).status.success());
    assert_eq!(api_get(&bot, API, &token).await.0, 401);
    let unknown = api_token(&bot, &["revoke", "dashboards"]);
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("there is no API token named dashboards")
    );
}
