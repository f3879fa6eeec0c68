//! The pages as HTML: plain, server-rendered, with one small script that
//! streams a running command's output (the page works without it). maud
//! escapes every splice, so a command's output, a login or a report's text
//! is shown as the text it is; nothing here marks a string as markup.

use super::view::{
    CommandView, FactView, LedgerView, PullView, PullsView, QueueView, RepoView, RunView,
    ServerView,
};
use crate::store::PullState;
use maud::{html, Markup, DOCTYPE};

/// The style sheet every page links (served at `/assets/wavegate.css`).
pub(crate) const STYLE: &str = "\
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:72rem;padding:1rem 1.5rem;color:#1b1f24}\
a{color:#0a58ca}nav{margin-bottom:1rem}nav a{margin-right:.75rem}\
table{border-collapse:collapse;width:100%;margin:.5rem 0 1.5rem}\
th,td{border-bottom:1px solid #d0d7de;padding:.3rem .5rem;text-align:left;vertical-align:top}\
pre{background:#f6f8fa;border:1px solid #d0d7de;padding:.6rem;overflow-x:auto;white-space:pre-wrap;max-height:32rem}\
code,pre{font:13px/1.4 ui-monospace,monospace}\
.state{font-weight:600}.waiting{color:#9a6700}.applying{color:#0969da}.failed{color:#cf222e}.done{color:#1a7f37}\
.muted{color:#57606a}.who{float:right;margin:0}.forges{list-style:none;padding:0}.forges li{margin:.5rem 0}.button{display:inline-block;padding:.4rem .8rem;border:1px solid #d0d7de;border-radius:6px;background:#f6f8fa;text-decoration:none}.who button{margin-left:.5rem}.warn{color:#cf222e;font-weight:600}";

/// Who is looking, as the top of every page shows it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Nav<'a> {
    /// Logged in as this login, with this session's CSRF token.
    pub(crate) user: Option<(&'a str, &'a str)>,
    /// Whether anyone can log in here.
    pub(crate) can_log_in: bool,
}

fn page(nav: &Nav, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · wavegate" }
                link rel="stylesheet" href="/assets/wavegate.css";
            }
            body {
                nav {
                    a href="/repos" { "Repositories" } a href="/server" { "Server" }
                    @if let Some((login, csrf)) = nav.user {
                        form class="who" method="post" action="/logout" {
                            span class="muted" { "Logged in as " strong { (login) } }
                            input type="hidden" name="csrf" value=(csrf);
                            button type="submit" { "Log out" }
                        }
                    } @else if nav.can_log_in {
                        a class="who" href="/login" { "Log in" }
                    }
                }
                (body)
            }
        }
    }
}

fn state_badge(state: Option<&str>) -> Markup {
    match state {
        Some(state) => html! { span class={ "state " (state) } { (state) } },
        None => html! { span class="muted" { "—" } },
    }
}

pub(crate) fn repos(nav: &Nav, repos: &[RepoView]) -> Markup {
    page(
        nav,
        "Repositories",
        html! {
            h1 { "Repositories" }
            @if repos.is_empty() {
                p class="muted" { "No repository has sent wavegate an event yet." }
            } @else {
                table {
                    thead { tr { th { "Forge" } th { "Repository" } } }
                    tbody {
                        @for repo in repos {
                            tr {
                                td { (repo.forge) }
                                td { a href=(repo.page) { (repo.name) } }
                            }
                        }
                    }
                }
            }
        },
    )
}

pub(crate) fn pulls(nav: &Nav, view: &PullsView) -> Markup {
    let repo = &view.repo;
    page(
        nav,
        &repo.name,
        html! {
            h1 { (repo.name) }
            p {
                "Show: "
                @if view.state.is_none() { strong { "all" } } @else { a href=(repo.page) { "all" } }
                @for state in PullState::ALL {
                    " · "
                    @if view.state == Some(state.as_str()) {
                        strong { (state.as_str()) }
                    } @else {
                        a href={ (repo.page) "?state=" (state.as_str()) } { (state.as_str()) }
                    }
                }
                " · " a href={ (repo.page) "/ledger" } { "ledger" }
                " · " a href={ (repo.page) "/queue" } { "locks and queue" }
                " · " a href=(repo.api) { "JSON" }
            }
            @if view.pulls.is_empty() {
                p class="muted" { "No pull request here." }
            } @else {
                table {
                    thead {
                        tr { th { "Pull request" } th { "State" } th { "Report" } th { "Run" } th { "Head" } th { "Updated" } }
                    }
                    tbody {
                        @for pull in &view.pulls {
                            tr {
                                td {
                                    a href=(pull.page) { "#" (pull.number) }
                                    @if !pull.open { " " span class="muted" { "(closed)" } }
                                }
                                td { (state_badge(pull.state)) }
                                td { (pull.report.unwrap_or("—")) }
                                td {
                                    @match &pull.run {
                                        Some(run) => { "run " (run.id) ": " (run.status) }
                                        None => span class="muted" { "none" },
                                    }
                                }
                                td { code { (short(&pull.head)) } }
                                td { (pull.updated_at) }
                            }
                        }
                    }
                }
            }
            @if let Some(next) = &view.next {
                p { a href={ (repo.page) (next) } { "Older pull requests →" } }
            }
        },
    )
}

pub(crate) fn pull(nav: &Nav, view: &PullView) -> Markup {
    let repo = &view.repo;
    let title = format!("{} #{}", repo.name, view.number);
    page(
        nav,
        &title,
        html! {
            p { a href=(repo.page) { (repo.name) } }
            h1 { "Pull request #" (view.number) " " (state_badge(view.state)) }
            table {
                tbody {
                    tr { th { "Head" } td { code { (view.head) } } }
                    tr { th { "Base" } td { (view.base_ref) } }
                    tr { th { "Open" } td { @if view.open { "yes" } @else { "no" } } }
                    tr { th { "Report" } td { (view.report_status.unwrap_or("—")) } }
                    tr { th { "Digest" } td { code { (view.digest.as_deref().unwrap_or("—")) } } }
                }
            }
            @if let Some(run) = &view.run { (run_section(run)) }
            h2 id="ledger" { "Approvals and other facts in the ledger" }
            (facts_table(&view.facts))
            h2 id="report" { "Report" }
            @match &view.report {
                Some(report) => pre { (report) },
                None => p class="muted" { "Not planned yet." },
            }
            h2 { "Commands" }
            (commands_section(&view.commands))
        },
    )
}

/// Each command with its kept output; a running one's `<pre>` names its
/// stream, and the script streams the rest of its lines in.
fn commands_section(commands: &[CommandView]) -> Markup {
    let running = commands.iter().any(|c| c.state == "running");
    html! {
        @if commands.is_empty() {
            p class="muted" { "None run yet." }
        }
        @for command in commands {
            @let id = format!("command-{}", command.id);
            @let class = match (command.state, command.succeeded) {
                ("running", _) => "state applying",
                (_, Some(true)) => "state done",
                _ => "state failed",
            };
            details id=(id) open[command.succeeded != Some(true)] {
                summary {
                    code { (command.label) } " "
                    span id=(format!("{id}-output-status")) class=(class) { (command.description) }
                    " " span class="muted" { "started " (command.started_at) }
                    " " a href=(command.api) { "JSON" }
                }
                pre id=(format!("{id}-output"))
                    data-live=[(command.state == "running").then_some(&command.live)]
                    data-after=[(command.state == "running").then(|| command.lines())] {
                    (command.output.as_deref().unwrap_or(""))
                }
                @if command.truncated {
                    p class="muted" { "Its output went past the cap: the cut is marked, and its last lines follow it." }
                }
            }
        }
        @if running {
            script src="/assets/live.js" defer {}
        }
    }
}

fn facts_table(facts: &[FactView]) -> Markup {
    html! {
        @if facts.is_empty() {
            p class="muted" { "None yet." }
        } @else {
            table {
                thead { tr { th { "Seq" } th { "Gate" } th { "Fact" } th { "By" } th { "At" } th { "Digest" } } }
                tbody {
                    @for fact in facts {
                        tr {
                            td { (fact.seq) }
                            td { (fact.gate) }
                            td {
                                (fact.kind)
                                @if !fact.counts {
                                    " " span class="warn" { "not signed by this server: counts for nothing" }
                                }
                            }
                            td { (fact.by) }
                            td { (fact.at) }
                            td { code { (short_digest(&fact.digest)) } }
                        }
                    }
                }
            }
        }
    }
}

pub(crate) fn ledger(nav: &Nav, view: &LedgerView) -> Markup {
    let repo = &view.repo;
    page(
        nav,
        &format!("{} ledger", repo.name),
        html! {
            p { a href=(repo.page) { (repo.name) } }
            h1 { "Gate ledger" }
            @if view.verified {
                p { span class="state done" { "Verified" } ": " (view.verification) }
            } @else {
                p { span class="warn" { "Does not verify" } ": " (view.verification) }
            }
            p {
                "Signed with "
                @match &view.key {
                    Some(key) => code { (key) },
                    None => span class="muted" { "no key (this server does not sign)" },
                }
                @if let Some(head) = &view.head {
                    "; head: seq " (head.seq) " " code { (head.hash) }
                }
            }
            (facts_table(&view.facts))
            @if let Some(next) = &view.next {
                p { a href={ (repo.page) "/ledger" (next) } { "Older facts →" } }
            }
        },
    )
}

pub(crate) fn queue(nav: &Nav, view: &QueueView) -> Markup {
    let repo = &view.repo;
    page(
        nav,
        &format!("{} locks and queue", repo.name),
        html! {
            p { a href=(repo.page) { (repo.name) } }
            h1 { "Locks and queue" }
            h2 { "Members locked by an apply run" }
            @if view.locks.is_empty() {
                p class="muted" { "None." }
            } @else {
                table {
                    thead { tr { th { "Member" } th { "Held by" } th { "Since" } @if nav.user.is_some() { th {} } } }
                    tbody {
                        @for lock in &view.locks {
                            tr {
                                td { (lock.member) }
                                td { a href=(lock.page) { "run " (lock.run) " of #" (lock.pr) } }
                                td { (lock.since) }
                                @if let Some((_, csrf)) = nav.user {
                                    td { (action(&format!("{}/locks/{}/release", repo.page, lock.member), csrf, "Release if stale")) }
                                }
                            }
                        }
                    }
                }
            }
            h2 { "Jobs queued, running or dead" }
            @if view.jobs.is_empty() {
                p class="muted" { "None." }
            } @else {
                table {
                    thead { tr { th { "Job" } th { "Kind" } th { "Pull request" } th { "Status" } th { "Attempts" } th { "Not before" } th { "Last attempt" } } }
                    tbody {
                        @for job in &view.jobs {
                            tr {
                                td { (job.id) }
                                td { (job.kind) }
                                td { (job.key) }
                                td { span class={ "state " (if job.status == "dead" { "failed" } else { "waiting" }) } { (job.status) } }
                                td { (job.attempts) " of " (job.max_attempts) }
                                td { (job.run_after) }
                                td {
                                    @if job.failed {
                                        "failed: the server's log says why (job " (job.id) ")"
                                    }
                                    @if let (Some((_, csrf)), "dead") = (nav.user, job.status) {
                                        " " (action(&format!("{}/jobs/{}/retry", repo.page, job.id), csrf, "Retry"))
                                    }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// A button that posts an operator action with the session's CSRF token.
fn action(to: &str, csrf: &str, label: &str) -> Markup {
    html! {
        form method="post" action=(to) {
            input type="hidden" name="csrf" value=(csrf);
            button type="submit" { (label) }
        }
    }
}

pub(crate) fn server(nav: &Nav, view: &ServerView) -> Markup {
    page(
        nav,
        "Server",
        html! {
            h1 { "wavegate " (view.version) }
            table {
                tbody {
                    tr { th { "Sandbox" } td {
                        (view.sandbox)
                        @if let Some(problem) = &view.sandbox_problem {
                            br; span class="warn" { "No command can run: " (problem) }
                        }
                    } }
                    tr { th { "Limits held by" } td { (view.limits_held_by) } }
                    tr { th { "Execution profiles" } td {
                        @for profile in &view.profiles { (profile) br; }
                    } }
                    tr { th { "Workers" } td { (view.workers) " on this replica" } }
                    tr { th { "Forges" } td {
                        @for forge in &view.forges { (forge) br; }
                    } }
                    tr { th { "Public URL" } td { (view.public_url.as_deref().unwrap_or("—")) } }
                }
            }
        },
    )
}

fn run_section(run: &RunView) -> Markup {
    html! {
        h2 id="run" { "Apply run " (run.id) ": " span class={ "state " (run_class(run.status)) } { (run.status) } }
        p {
            "Merge " code { (short(&run.merge_sha)) } ", digest " code { (short_digest(&run.digest)) }
            @if !run.approved_by.is_empty() { ", approved by " (run.approved_by.join(", ")) }
            @if let Some(at) = &run.at { ". At " (at) }
            "."
        }
        @if let Some(waiting) = &run.waiting_for {
            p { strong { "Waiting for " } (waiting) }
        }
        @if let Some(line) = &run.line_to_copy {
            p { "To go on, comment " code { (line) } }
        }
        @for stage in &run.stages {
            h3 { "Stage " (stage.stage) }
            @for (n, wave) in stage.waves.iter().enumerate() {
                table {
                    thead { tr { th { "Wave " (n + 1) } th { "State" } } }
                    tbody {
                        @for member in wave {
                            tr {
                                td { (member.member) }
                                td {
                                    (member.state)
                                    @if let Some(output) = &member.output {
                                        details {
                                            summary { "Output (" (output.extent) ")" }
                                            pre { (output.text) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn run_class(status: &str) -> &'static str {
    match status {
        "running" => "applying",
        "waiting" => "waiting",
        "failed" => "failed",
        _ => "done",
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

fn short_digest(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}

/// `/login`: a button per forge one may log in with.
pub(crate) fn login(nav: &Nav, forges: &[crate::model::ForgeKind], next: &str) -> Markup {
    let next = encode_component(next);
    page(
        nav,
        "Log in",
        html! {
            h1 { "Log in" }
            @if let Some((login, _)) = nav.user {
                p { "You are logged in as " strong { (login) } "." }
            }
            @if forges.is_empty() {
                p { "No one logs in to this server: an operator sets WAVEGATE_GITHUB_CLIENT_ID and WAVEGATE_GITHUB_CLIENT_SECRET (the GitHub App's), or WAVEGATE_FORGEJO_CLIENT_ID and WAVEGATE_FORGEJO_CLIENT_SECRET (an OAuth2 application on Forgejo)." }
            } @else {
                p { "You see the pages of the repositories you can read on the forge." }
                ul class="forges" {
                    @for forge in forges {
                        li { a class="button" href={ "/login/" (forge.as_str()) "?next=" (next) } { "Log in with " (forge_name(*forge)) } }
                    }
                }
            }
        },
    )
}

fn forge_name(forge: crate::model::ForgeKind) -> &'static str {
    match forge {
        crate::model::ForgeKind::GitHub => "GitHub",
        crate::model::ForgeKind::Forgejo => "Forgejo",
    }
}

/// `text` percent-encoded for a query's value.
pub(crate) fn encode_component(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// A page that says what is missing, and what to do.
pub(crate) fn problem(nav: &Nav, title: &str, message: &str) -> Markup {
    page(nav, title, html! { h1 { (title) } p { (message) } })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(id: i64, state: &'static str, succeeded: Option<bool>, output: &str) -> CommandView {
        CommandView {
            id,
            label: "[apply] app@dev".into(),
            kind: "apply".into(),
            run: Some(3),
            state,
            ending: succeeded.map(|ok| if ok { "exited:0" } else { "exited:1" }.into()),
            description: match succeeded {
                None => "running".into(),
                Some(true) => "exited with status 0".into(),
                Some(false) => "exited with status 1".into(),
            },
            succeeded,
            started_at: crate::model::UnixMs::from_millis(1_700_000_000_000),
            finished_at: None,
            truncated: false,
            live: format!("/repos/github/acme/infra/pulls/1/commands/{id}/live"),
            api: format!("/api/v1/repos/github/acme/infra/pulls/1/commands/{id}"),
            output: Some(output.into()),
        }
    }

    #[test]
    fn a_running_command_names_its_stream_and_where_it_goes_on_and_loads_the_script() {
        let commands = [
            command(1, "ended", Some(true), "estate: applied\n"),
            command(
                2,
                "running",
                None,
                "estate: applying <app>\nestate: 1 of 3\n",
            ),
        ];
        insta::assert_snapshot!(
            commands_section(&commands).into_string().replace("</details><details", "</details>\n<details"),
            @r###"
        <details id="command-1"><summary><code>[apply] app@dev</code> <span id="command-1-output-status" class="state done">exited with status 0</span> <span class="muted">started 2023-11-14 22:13:20 UTC</span> <a href="/api/v1/repos/github/acme/infra/pulls/1/commands/1">JSON</a></summary><pre id="command-1-output">estate: applied
        </pre></details>
        <details id="command-2" open><summary><code>[apply] app@dev</code> <span id="command-2-output-status" class="state applying">running</span> <span class="muted">started 2023-11-14 22:13:20 UTC</span> <a href="/api/v1/repos/github/acme/infra/pulls/1/commands/2">JSON</a></summary><pre id="command-2-output" data-live="/repos/github/acme/infra/pulls/1/commands/2/live" data-after="2">estate: applying &lt;app&gt;
        estate: 1 of 3
        </pre></details><script src="/assets/live.js" defer></script>
        "###
        );
    }

    #[test]
    fn with_nothing_running_there_is_no_script() {
        let page = commands_section(&[command(1, "ended", Some(false), "boom\n")]).into_string();
        assert!(!page.contains("<script"), "{page}");
        assert!(!page.contains("data-live"), "{page}");
        assert!(
            page.contains("<details id=\"command-1\" open>"),
            "a failed one is open: {page}"
        );
    }
    use crate::web::view::{MemberView, OutputView, StageView};

    fn queue_view() -> QueueView {
        use crate::web::view::{JobView, LockView};
        let job = |id, status| JobView {
            id,
            kind: "apply".into(),
            status,
            key: "github:acme/infra#6".into(),
            attempts: 5,
            max_attempts: 5,
            run_after: crate::model::UnixMs::from_millis(0),
            failed: true,
        };
        QueueView {
            repo: RepoView::of(&crate::model::RepoId::new(
                crate::model::ForgeKind::GitHub,
                "acme/infra",
            )),
            locks: vec![LockView {
                member: "app@dev".into(),
                run: 1,
                pr: 6,
                since: crate::model::UnixMs::from_millis(0),
                page: "/repos/github/acme/infra/pulls/6".into(),
            }],
            jobs: vec![job(12, "dead"), job(13, "queued")],
        }
    }

    #[test]
    fn the_queue_offers_its_actions_to_someone_logged_in_with_the_sessions_token() {
        let view = queue_view();
        let anyone = queue(&Nav::default(), &view).into_string();
        assert!(!anyone.contains("<form"), "{anyone}");

        let nav = Nav {
            user: Some(("ada", "tok-123")),
            can_log_in: true,
        };
        let page = queue(&nav, &view).into_string();
        assert!(page.contains(r#"<form method="post" action="/repos/github/acme/infra/locks/app@dev/release"><input type="hidden" name="csrf" value="tok-123"><button type="submit">Release if stale</button></form>"#), "{page}");
        assert!(
            page.contains(r#"action="/repos/github/acme/infra/jobs/12/retry""#),
            "{page}"
        );
        assert!(!page.contains("/jobs/13/retry"), "only a dead job: {page}");
    }

    #[test]
    fn what_a_command_printed_or_a_person_wrote_is_shown_as_text_never_as_markup() {
        let hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>";
        let view = PullView {
            repo: RepoView::of(&crate::model::RepoId::new(
                crate::model::ForgeKind::GitHub,
                "acme/infra",
            )),
            number: 7,
            head: "a".repeat(40),
            base_ref: hostile.into(),
            open: true,
            state: Some("waiting"),
            report_status: Some("awaiting-approval"),
            digest: None,
            report: Some(hostile.into()),
            facts: Vec::new(),
            commands: Vec::new(),
            run: Some(RunView {
                id: 1,
                status: "failed",
                merge_sha: "b".repeat(40),
                digest: "sha256:00".into(),
                approved_by: vec![hostile.into()],
                at: None,
                waiting_for: Some(hostile.into()),
                line_to_copy: None,
                stages: vec![StageView {
                    stage: "dev".into(),
                    waves: vec![vec![MemberView {
                        member: "app@dev".into(),
                        state: hostile.into(),
                        output: Some(OutputView {
                            text: hostile.into(),
                            extent: "1 line".into(),
                        }),
                    }]],
                }],
            }),
        };
        let nav = Nav {
            user: Some((hostile, "csrf")),
            can_log_in: true,
        };
        let page = pull(&nav, &view).into_string();
        assert!(!page.contains("<script"), "{page}");
        assert!(!page.contains("<img"), "{page}");
        assert_eq!(
            page.matches("&lt;script&gt;alert(1)&lt;/script&gt;")
                .count(),
            7,
            "each of the six places shows it as text: {page}"
        );
    }
}
