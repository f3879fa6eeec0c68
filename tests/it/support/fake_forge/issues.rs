//! Issues that are not pull requests: what a test does (open one by hand,
//! read them), the two writes the bot makes (open, edit title, body or
//! state), written once, and the JSON each forge answers in
//! (`issue_json`). Issues and pull requests share one sequence of numbers,
//! and the fake numbers issues from 1001 up, past the pull requests tests
//! number themselves. What differs is the forges' own: GitHub caps a body
//! at 65,536 characters and answers an edit 200, Forgejo 201.

use super::*;

/// The first number the fake gives an issue.
const FIRST_ISSUE: u64 = 1001;

/// A repository's routes about issues: `POST issues` and `PATCH issues/{n}`.
pub(super) fn route(state: &mut State, call: &Call, path: &[&str]) -> Option<Answer> {
    let answer = match (call.req.method, path) {
        ("POST", ["issues"]) => open(state, call),
        ("PATCH", ["issues", segment]) => edit(state, call, segment),
        _ => return None,
    };
    Some(answer)
}

/// The caller opens an issue with `title` and `body`.
fn open(state: &mut State, call: &Call) -> Answer {
    let title = call.req.required_str("title")?;
    let body = call.req.body_str("body").unwrap_or_default().to_owned();
    within_limits(call.forge, &title, &body)?;
    state.user_id(call.login);
    let (id, now) = (state.id(), state.now());
    let repo = state.repo_at(call.forge, call.full_name);
    let issue = FakeIssue {
        number: repo.next_number(),
        id,
        title,
        body,
        author: call.login.to_owned(),
        open: true,
        created_at: now,
        updated_at: now,
    };
    repo.issues.push(issue.clone());
    Ok(answer(201, issue_json(state, call, &issue)))
}

/// The caller changes the issue's title, body and state, each if given.
fn edit(state: &mut State, call: &Call, segment: &str) -> Answer {
    let number = number(segment)?;
    let title = call.req.body_str("title");
    let body = call.req.body_str("body");
    let open = match call.req.body_str("state") {
        None => None,
        Some("open") => Some(true),
        Some("closed") => Some(false),
        Some(other) => {
            return Err(unprocessable(format!(
                "state `{other}` is not open or closed"
            )))
        }
    };
    within_limits(
        call.forge,
        title.unwrap_or("unchanged"),
        body.unwrap_or_default(),
    )?;
    let now = state.now();
    let issue = state
        .repo_at(call.forge, call.full_name)
        .issues
        .iter_mut()
        .find(|i| i.number == number)
        .ok_or_else(not_found)?;
    if let Some(title) = title {
        issue.title = title.to_owned();
    }
    if let Some(body) = body {
        issue.body = body.to_owned();
    }
    if let Some(open) = open {
        issue.open = open;
    }
    issue.updated_at = now;
    let issue = issue.clone();
    let status = match call.forge {
        ForgeKind::GitHub => 200,
        ForgeKind::Forgejo => 201,
    };
    Ok(answer(status, issue_json(state, call, &issue)))
}

/// Both forges refuse an empty title; GitHub a body over 65,536 characters.
fn within_limits(forge: ForgeKind, title: &str, body: &str) -> Result<(), Response> {
    if title.trim().is_empty() {
        return Err(unprocessable("title can't be blank".into()));
    }
    if forge == ForgeKind::GitHub && body.chars().count() > 65_536 {
        return Err(unprocessable(
            "body is too long (maximum is 65536 characters)".into(),
        ));
    }
    Ok(())
}

/// An issue as the caller's forge answers it.
fn issue_json(state: &mut State, call: &Call, issue: &FakeIssue) -> Value {
    let user = people::user_json(state, call.forge, &issue.author);
    let (full_name, n) = (call.full_name, issue.number);
    let closed_at = (!issue.open).then(|| rfc3339(issue.updated_at));
    let state_word = if issue.open { "open" } else { "closed" };
    match call.forge {
        ForgeKind::GitHub => json!({
            "id": issue.id,
            "node_id": format!("I_{}", issue.id),
            "url": format!("https://api.github.com/repos/{full_name}/issues/{n}"),
            "repository_url": format!("https://api.github.com/repos/{full_name}"),
            "labels_url": format!("https://api.github.com/repos/{full_name}/issues/{n}/labels{{/name}}"),
            "comments_url": format!("https://api.github.com/repos/{full_name}/issues/{n}/comments"),
            "events_url": format!("https://api.github.com/repos/{full_name}/issues/{n}/events"),
            "html_url": format!("https://github.com/{full_name}/issues/{n}"),
            "number": n,
            "state": state_word,
            "title": issue.title,
            "body": issue.body,
            "user": user,
            "labels": [],
            "assignee": null,
            "assignees": [],
            "milestone": null,
            "locked": false,
            "comments": 0,
            "author_association": "NONE",
            "created_at": rfc3339(issue.created_at),
            "updated_at": rfc3339(issue.updated_at),
            "closed_at": closed_at,
        }),
        ForgeKind::Forgejo => json!({
            "id": issue.id,
            "url": format!("https://forge.example/api/v1/repos/{full_name}/issues/{n}"),
            "html_url": format!("https://forge.example/{full_name}/issues/{n}"),
            "number": n,
            "user": user,
            "original_author": "",
            "original_author_id": 0,
            "title": issue.title,
            "body": issue.body,
            "ref": "",
            "assets": [],
            "labels": [],
            "milestone": null,
            "assignee": null,
            "assignees": null,
            "state": state_word,
            "is_locked": false,
            "comments": 0,
            "created_at": rfc3339(issue.created_at),
            "updated_at": rfc3339(issue.updated_at),
            "closed_at": closed_at,
            "due_date": null,
            "pull_request": null,
        }),
    }
}

impl Repo {
    /// The number the next issue gets: past every issue's and pull
    /// request's, and 1001 at least.
    fn next_number(&self) -> u64 {
        let taken = self.issues.iter().map(|i| i.number);
        let taken = taken.chain(self.prs.iter().map(|p| p.number));
        taken
            .max()
            .map_or(FIRST_ISSUE, |n| (n + 1).max(FIRST_ISSUE))
    }

    /// Whether `number` is an issue's (not a pull request's).
    pub(super) fn is_issue(&self, number: u64) -> bool {
        self.issues.iter().any(|i| i.number == number)
    }

    /// Whether `number` is a pull request's or an issue's.
    pub(super) fn has_number(&self, number: u64) -> bool {
        self.is_issue(number) || self.prs.iter().any(|p| p.number == number)
    }
}

impl FakeForge {
    /// `author` opens an issue (not through the API, with no webhook).
    pub fn open_issue(
        &self,
        repo: &RepoHandle,
        author: &str,
        title: &str,
        body: &str,
    ) -> FakeIssue {
        self.with(|s| {
            s.user_id(author);
            let (id, now) = (s.id(), s.now());
            let repo = s.repo_of(repo);
            let issue = FakeIssue {
                number: repo.next_number(),
                id,
                title: title.to_owned(),
                body: body.to_owned(),
                author: author.to_owned(),
                open: true,
                created_at: now,
                updated_at: now,
            };
            repo.issues.push(issue.clone());
            issue
        })
    }

    /// The repository's issues (not its pull requests), oldest first.
    pub fn issues(&self, repo: &RepoHandle) -> Vec<FakeIssue> {
        self.listed(repo, |r| &r.issues, |_| true)
    }

    /// Issue `number` as the fake holds it now.
    pub fn issue(&self, repo: &RepoHandle, number: u64) -> FakeIssue {
        self.issues(repo)
            .into_iter()
            .find(|i| i.number == number)
            .unwrap_or_else(|| panic!("no issue #{number} in {}", repo.full_name))
    }
}
