//! Comments on pull requests and issues, and their reactions: what a test
//! does (write, edit, delete), the routes the bot uses (a repository's
//! comments, a pull request's or issue's, writing, editing, reacting), each
//! written once, and the JSON each forge answers in (`comment_json`). What
//! differs is the forges' own: GitHub pages a pull request's comments and
//! sorts a repository's, caps a body at 65,536 characters and knows eight
//! reactions; each refuses an edit by another user in its own words.

use super::*;

/// A repository's routes about comments.
pub(super) fn route(state: &mut State, call: &Call, path: &[&str]) -> Option<Answer> {
    let answer = match (call.req.method, path) {
        ("GET", ["issues", "comments"]) => list_in_repo(state, call),
        ("GET", ["issues", pr, "comments"]) => list_on_pr(state, call, pr),
        ("POST", ["issues", pr, "comments"]) => create(state, call, pr),
        ("PATCH", ["issues", "comments", id]) => edit(state, call, id),
        ("POST", ["issues", "comments", id, "reactions"]) => react(state, call, id),
        _ => return None,
    };
    Some(answer)
}

/// Whether `c` was updated at or after `since` (ISO 8601, as both forges read it).
fn updated_since(c: &FakeComment, since: Option<&String>) -> bool {
    since.is_none_or(|since| rfc3339(c.updated_at) >= *since)
}

/// The repository's comments updated since `since`, oldest first (GitHub:
/// by update time if `sort=updated`, newest first if `direction=desc`).
fn list_in_repo(state: &mut State, call: &Call) -> Answer {
    let since = since_filter(call.req)?;
    let mut listed: Vec<FakeComment> = state
        .repo_at(call.forge, call.full_name)
        .comments
        .iter()
        .filter(|c| updated_since(c, since.as_ref()))
        .cloned()
        .collect();
    if call.forge == ForgeKind::GitHub {
        let asked =
            |name: &str, value: &str| call.req.query.get(name).map(String::as_str) == Some(value);
        if asked("sort", "updated") {
            listed.sort_by_key(|c| (c.updated_at, c.id));
        }
        if asked("direction", "desc") {
            listed.reverse();
        }
    }
    one_page(state, call.req, call.forge, &listed, |state, c| {
        comment_json(state, call.forge, call.full_name, c)
    })
}

/// PR or issue `pr`'s comments updated since `since`, oldest first:
/// GitHub pages them and answers 404 for a number it does not have;
/// Forgejo answers them all.
fn list_on_pr(state: &mut State, call: &Call, pr: &str) -> Answer {
    let pr = number(pr)?;
    let since = since_filter(call.req)?;
    let repo = state.repo_at(call.forge, call.full_name);
    if call.forge == ForgeKind::GitHub && !repo.has_number(pr) {
        return Err(not_found());
    }
    let listed: Vec<FakeComment> = repo
        .comments
        .iter()
        .filter(|c| c.pr == pr && updated_since(c, since.as_ref()))
        .cloned()
        .collect();
    let render =
        |state: &mut State, c: &FakeComment| comment_json(state, call.forge, call.full_name, c);
    match call.forge {
        ForgeKind::GitHub => one_page(state, call.req, call.forge, &listed, render),
        ForgeKind::Forgejo => {
            let all = listed.iter().map(|c| render(state, c)).collect();
            Ok(answer(200, Value::Array(all)))
        }
    }
}

/// The caller comments on PR or issue `pr` (404 without either).
fn create(state: &mut State, call: &Call, pr: &str) -> Answer {
    let pr = number(pr)?;
    let body = call.req.required_str("body")?;
    if call.forge == ForgeKind::GitHub && body.chars().count() > 65_536 {
        return Err(unprocessable(
            "body is too long (maximum is 65536 characters)".into(),
        ));
    }
    let (id, now) = (state.id(), state.now());
    let repo = state.repo_at(call.forge, call.full_name);
    if !repo.has_number(pr) {
        return Err(not_found());
    }
    let comment = FakeComment {
        id,
        pr,
        body,
        author: call.login.to_owned(),
        author_is_bot: call.login.ends_with("[bot]"),
        created_at: now,
        updated_at: now,
    };
    repo.comments.push(comment.clone());
    Ok(answer(
        201,
        comment_json(state, call.forge, call.full_name, &comment),
    ))
}

/// The caller replaces comment `id`'s body; only its author may.
fn edit(state: &mut State, call: &Call, id: &str) -> Answer {
    let id = number(id)?;
    let body = call.req.required_str("body")?;
    let now = state.now();
    let comment = state
        .repo_at(call.forge, call.full_name)
        .comments
        .iter_mut()
        .find(|c| c.id == id)
        .ok_or_else(not_found)?;
    if comment.author != call.login {
        return Err(forbidden(match call.forge {
            ForgeKind::GitHub => "Resource not accessible by integration",
            ForgeKind::Forgejo => "user should be the comment poster",
        }));
    }
    comment.body = body;
    comment.updated_at = now;
    let comment = comment.clone();
    Ok(answer(
        200,
        comment_json(state, call.forge, call.full_name, &comment),
    ))
}

/// The reactions GitHub knows.
const GITHUB_REACTIONS: [&str; 8] = [
    "+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes",
];

/// The caller reacts to comment `id`, once: 201 when the reaction is new,
/// 200 when it was there (404 without such a comment).
fn react(state: &mut State, call: &Call, id: &str) -> Answer {
    let id = number(id)?;
    let content = call.req.required_str("content")?;
    if call.forge == ForgeKind::GitHub && !GITHUB_REACTIONS.contains(&content.as_str()) {
        return Err(unprocessable(format!(
            "content `{content}` is not a reaction"
        )));
    }
    // GitHub gives a reaction an id of its own; Forgejo's has none.
    let reaction_id = (call.forge == ForgeKind::GitHub).then(|| state.id());
    let user = people::user_json(state, call.forge, call.login);
    let now = state.now();
    let repo = state.repo_at(call.forge, call.full_name);
    if !repo.comments.iter().any(|c| c.id == id) {
        return Err(not_found());
    }
    let exists = repo
        .reactions
        .iter()
        .any(|r| r.comment_id == id && r.content == content && r.user == call.login);
    if !exists {
        repo.reactions.push(FakeReaction {
            comment_id: id,
            content: content.clone(),
            user: call.login.to_owned(),
        });
    }
    let mut shown = json!({ "content": content, "user": user, "created_at": rfc3339(now) });
    if let Some(reaction_id) = reaction_id {
        shown["id"] = json!(reaction_id);
        shown["node_id"] = json!(format!("R_{reaction_id}"));
    }
    Ok(answer(if exists { 200 } else { 201 }, shown))
}

/// A comment as `forge` answers it (Forgejo names a pull request's in
/// `pull_request_url`, an issue's in `issue_url`).
fn comment_json(state: &mut State, forge: ForgeKind, full_name: &str, c: &FakeComment) -> Value {
    let on_issue = state.repo_at(forge, full_name).is_issue(c.pr);
    let user = people::user_json(state, forge, &c.author);
    let page = if on_issue { "issues" } else { "pull" };
    match forge {
        ForgeKind::GitHub => json!({
            "id": c.id,
            "node_id": format!("IC_{}", c.id),
            "url": format!("https://api.github.com/repos/{full_name}/issues/comments/{}", c.id),
            "html_url": format!("https://github.com/{full_name}/{page}/{}#issuecomment-{}", c.pr, c.id),
            "issue_url": format!("https://api.github.com/repos/{full_name}/issues/{}", c.pr),
            "body": c.body,
            "user": user,
            "author_association": if c.author_is_bot { "NONE" } else { "MEMBER" },
            "created_at": rfc3339(c.created_at),
            "updated_at": rfc3339(c.updated_at),
        }),
        ForgeKind::Forgejo => json!({
            "id": c.id,
            "body": c.body,
            "user": user,
            "html_url": format!("https://forge.example/{full_name}/{page}/{}#issuecomment-{}", c.pr, c.id),
            "pull_request_url": if on_issue { String::new() } else { format!("https://forge.example/{full_name}/pulls/{}", c.pr) },
            "issue_url": if on_issue { format!("https://forge.example/{full_name}/issues/{}", c.pr) } else { String::new() },
            "original_author": "",
            "original_author_id": 0,
            "assets": [],
            "created_at": rfc3339(c.created_at),
            "updated_at": rfc3339(c.updated_at),
        }),
    }
}

impl FakeForge {
    /// A comment written by someone (not through the API); returns its id.
    pub fn add_comment(&self, repo: &RepoHandle, pr: u64, author: &str, body: &str) -> u64 {
        self.with(|s| {
            s.user_id(author);
            let (id, now) = (s.id(), s.now());
            s.repo_of(repo).comments.push(FakeComment {
                id,
                pr,
                body: body.to_owned(),
                author: author.to_owned(),
                author_is_bot: author.ends_with("[bot]"),
                created_at: now,
                updated_at: now,
            });
            id
        })
    }

    /// A comment by `author` that said `first` and was edited (a second
    /// later) to say `body`; returns its id.
    pub fn add_edited_comment(
        &self,
        repo: &RepoHandle,
        pr: u64,
        author: &str,
        first: &str,
        body: &str,
    ) -> u64 {
        let id = self.add_comment(repo, pr, author, first);
        self.edit_comment(repo, id, body);
        id
    }

    /// Its author edits comment `id` to say `body` (a second or more after
    /// it was written, as the forges date to the second).
    pub fn edit_comment(&self, repo: &RepoHandle, id: u64, body: &str) {
        self.with(|s| {
            let now = s.now();
            let comment = s
                .repo_of(repo)
                .comments
                .iter_mut()
                .find(|c| c.id == id)
                .expect("a comment to edit");
            comment.body = body.to_owned();
            comment.updated_at = now.max(comment.created_at + Duration::from_secs(1));
        })
    }

    pub fn delete_comment(&self, repo: &RepoHandle, id: u64) {
        self.with(|s| s.repo_of(repo).comments.retain(|c| c.id != id))
    }

    /// PR or issue `pr`'s comments, oldest first.
    pub fn comments(&self, repo: &RepoHandle, pr: u64) -> Vec<FakeComment> {
        self.listed(repo, |r| &r.comments, |c| c.pr == pr)
    }

    /// The reactions on comment `comment_id`, in the order they were made.
    pub fn reactions(&self, repo: &RepoHandle, comment_id: u64) -> Vec<FakeReaction> {
        self.listed(repo, |r| &r.reactions, |r| r.comment_id == comment_id)
    }
}
