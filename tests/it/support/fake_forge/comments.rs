//! Pull request comments and their reactions, written once on the shared
//! state: what listing, writing, editing and reacting do. Each forge's
//! handler (`github_repo`, `forgejo_repo`) reads its own request shape
//! (GitHub's `per_page`, Forgejo's `limit`), calls these, and renders the
//! result in its own JSON (`github_comment`, `forgejo_comment`) and words.

use super::{not_found, rfc3339, FakeComment, FakeReaction, Repo, State};
use axum::response::Response;
use wavegate::model::ForgeKind;

/// Why an edit was refused.
pub(super) enum EditRefused {
    NotFound,
    /// Only the comment's author may edit it.
    NotTheAuthor,
}

fn repo<'s>(state: &'s mut State, forge: ForgeKind, full_name: &str) -> &'s mut Repo {
    state
        .repo_mut(forge, full_name)
        .unwrap_or_else(|| panic!("{full_name} is not registered with the fake"))
}

/// Whether `c` was updated at or after `since` (ISO 8601, as both forges read it).
pub(super) fn updated_since(c: &FakeComment, since: Option<&String>) -> bool {
    since.is_none_or(|since| rfc3339(c.updated_at) >= *since)
}

/// The repository's comments updated since `since`, oldest first, or by
/// update time (`by_updated`), newest first if `descending`.
pub(super) fn list_in_repo(
    state: &mut State,
    forge: ForgeKind,
    full_name: &str,
    since: Option<&String>,
    by_updated: bool,
    descending: bool,
) -> Vec<FakeComment> {
    let mut listed: Vec<FakeComment> = repo(state, forge, full_name)
        .comments
        .iter()
        .filter(|c| updated_since(c, since))
        .cloned()
        .collect();
    if by_updated {
        listed.sort_by_key(|c| (c.updated_at, c.id));
    }
    if descending {
        listed.reverse();
    }
    listed
}

/// PR `pr`'s comments updated since `since`, oldest first; `Err` (404)
/// when the fake has no such pull request and `must_exist`.
pub(super) fn list_on_pr(
    state: &mut State,
    forge: ForgeKind,
    full_name: &str,
    pr: u64,
    since: Option<&String>,
    must_exist: bool,
) -> Result<Vec<FakeComment>, Response> {
    let repo = repo(state, forge, full_name);
    if must_exist && !repo.prs.iter().any(|p| p.number == pr) {
        return Err(not_found());
    }
    Ok(repo
        .comments
        .iter()
        .filter(|c| c.pr == pr && updated_since(c, since))
        .cloned()
        .collect())
}

/// `author` comments `body` on PR `pr`; `Err` (404) without such a pull request.
pub(super) fn create(
    state: &mut State,
    forge: ForgeKind,
    full_name: &str,
    pr: u64,
    (author, author_is_bot): (&str, bool),
    body: String,
) -> Result<FakeComment, Response> {
    let id = state.id();
    let now = state.now();
    let repo = repo(state, forge, full_name);
    if !repo.prs.iter().any(|p| p.number == pr) {
        return Err(not_found());
    }
    let comment = FakeComment {
        id,
        pr,
        body,
        author: author.to_owned(),
        author_is_bot,
        created_at: now,
        updated_at: now,
    };
    repo.comments.push(comment.clone());
    Ok(comment)
}

/// `editor` replaces comment `id`'s body.
pub(super) fn edit(
    state: &mut State,
    forge: ForgeKind,
    full_name: &str,
    id: u64,
    editor: &str,
    body: String,
) -> Result<FakeComment, EditRefused> {
    let now = state.now();
    let comment = repo(state, forge, full_name)
        .comments
        .iter_mut()
        .find(|c| c.id == id)
        .ok_or(EditRefused::NotFound)?;
    if comment.author != editor {
        return Err(EditRefused::NotTheAuthor);
    }
    comment.body = body;
    comment.updated_at = now;
    Ok(comment.clone())
}

/// `user` reacts `content` to comment `id`, once: whether the reaction is
/// new (`Err` (404) without such a comment).
pub(super) fn react(
    state: &mut State,
    forge: ForgeKind,
    full_name: &str,
    id: u64,
    user: &str,
    content: &str,
) -> Result<bool, Response> {
    let repo = repo(state, forge, full_name);
    if !repo.comments.iter().any(|c| c.id == id) {
        return Err(not_found());
    }
    let exists = repo
        .reactions
        .iter()
        .any(|r| r.comment_id == id && r.content == content && r.user == user);
    if !exists {
        repo.reactions.push(FakeReaction {
            comment_id: id,
            content: content.to_owned(),
            user: user.to_owned(),
        });
    }
    Ok(!exists)
}
