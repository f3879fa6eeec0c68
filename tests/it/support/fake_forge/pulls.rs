//! Pull requests: what a test does to them (open, push, merge, close), the
//! two reads the bot makes (a repository's list and one pull request),
//! written once, and the JSON each forge answers them in (`pull_json`).

use super::*;

/// A repository's routes about pull requests: `GET pulls` (`state` open
/// unless asked, oldest first) and `GET pulls/{n}`.
pub(super) fn route(state: &mut State, call: &Call, path: &[&str]) -> Option<Answer> {
    match (call.req.method, path) {
        ("GET", ["pulls"]) => Some(list(state, call)),
        ("GET", ["pulls", pr]) => Some(get(state, call, pr)),
        _ => None,
    }
}

fn list(state: &mut State, call: &Call) -> Answer {
    let repo = state.repo_at(call.forge, call.full_name);
    let handle = repo.handle.clone();
    let listed = listed(repo, call.req.query.get("state").map(String::as_str))?;
    one_page(state, call.req, call.forge, &listed, |state, pr| {
        pull_json(state, &handle, pr)
    })
}

fn get(state: &mut State, call: &Call, pr: &str) -> Answer {
    let pr = number(pr)?;
    let repo = state.repo_at(call.forge, call.full_name);
    let handle = repo.handle.clone();
    let pr = repo
        .prs
        .iter()
        .find(|p| p.number == pr)
        .cloned()
        .ok_or_else(not_found)?;
    Ok(answer(200, pull_json(state, &handle, &pr)))
}

/// The repository's pull requests in `state` (`open` unless said), oldest first.
fn listed(repo: &Repo, state: Option<&str>) -> Result<Vec<FakePr>, Response> {
    let keep = match state.unwrap_or("open") {
        "open" => |p: &FakePr| p.open,
        "closed" => |p: &FakePr| !p.open,
        "all" => |_: &FakePr| true,
        other => {
            return Err(unprocessable(format!(
                "state `{other}` is not open, closed or all"
            )))
        }
    };
    let mut prs: Vec<FakePr> = repo.prs.iter().filter(|p| keep(p)).cloned().collect();
    prs.sort_by_key(|p| p.number);
    Ok(prs)
}

/// A pull request as `repo`'s forge answers `GET …/pulls/{n}` (the fields
/// clients read, and then some).
fn pull_json(state: &mut State, repo: &RepoHandle, pr: &FakePr) -> Value {
    let owner = repo.full_name.split('/').next().unwrap_or_default();
    let name = repo.full_name.split('/').nth(1).unwrap_or_default();
    let repo_json = json!({
        "id": repo.id,
        "name": name,
        "full_name": repo.full_name,
        "owner": { "login": owner, "id": 1 },
        "clone_url": repo.clone_url,
        "private": false,
        "fork": false,
    });
    let branch = |r: &str, sha: &str| json!({ "label": format!("{owner}:{r}"), "ref": r, "sha": sha, "repo": repo_json, "repo_id": repo.id });
    json!({
        "id": pr.id,
        "number": pr.number,
        "title": pr.title,
        "body": null,
        "state": if pr.open { "open" } else { "closed" },
        "user": people::user_json(state, repo.forge, &pr.author),
        "head": branch(&pr.head_ref, &pr.head_sha),
        "base": branch(&pr.base_ref, &pr.base_sha),
        "merged": pr.merged,
        "merge_commit_sha": pr.merge_sha,
        "updated_at": rfc3339(pr.updated_at),
        "draft": false,
        "html_url": format!("https://forge.example/{}/pull/{}", repo.full_name, pr.number),
    })
}

impl FakeForge {
    /// Opens PR #`number` from `head_ref` at `head_sha` onto `base_ref` at
    /// `base_sha`, by `author`, not through the API and with no webhook.
    /// Panics when an issue holds `number`.
    #[allow(clippy::too_many_arguments)]
    pub fn open_pr(
        &self,
        repo: &RepoHandle,
        number: u64,
        head_sha: &str,
        base_sha: &str,
        head_ref: &str,
        base_ref: &str,
        author: &str,
    ) -> FakePr {
        self.with(|s| {
            assert!(
                !s.repo_of(repo).is_issue(number),
                "PR #{number} of {}: issue #{number} holds that number (issues and pull requests share one sequence)",
                repo.full_name
            );
            s.user_id(author);
            let id = s.id();
            let pr = FakePr {
                number,
                id,
                title: format!("Change #{number}"),
                head_sha: head_sha.to_owned(),
                previous_head_sha: None,
                base_sha: base_sha.to_owned(),
                head_ref: head_ref.to_owned(),
                base_ref: base_ref.to_owned(),
                author: author.to_owned(),
                open: true,
                merged: false,
                merge_sha: None,
                updated_at: s.now(),
            };
            s.repo_of(repo).prs.push(pr.clone());
            pr
        })
    }

    /// New commits on the PR's head branch.
    pub fn push(&self, repo: &RepoHandle, pr: u64, new_head: &str) -> FakePr {
        self.update_pr(repo, pr, |p, now| {
            p.previous_head_sha = Some(std::mem::replace(&mut p.head_sha, new_head.to_owned()));
            p.updated_at = now;
        })
    }

    /// Marks the PR merged, `merge_sha` its merge commit.
    pub fn merge(&self, repo: &RepoHandle, pr: u64, merge_sha: &str) -> FakePr {
        self.update_pr(repo, pr, |p, now| {
            p.open = false;
            p.merged = true;
            p.merge_sha = Some(merge_sha.to_owned());
            p.updated_at = now;
        })
    }

    /// Closes the PR without merging it.
    pub fn close(&self, repo: &RepoHandle, pr: u64) -> FakePr {
        self.update_pr(repo, pr, |p, now| {
            p.open = false;
            p.updated_at = now;
        })
    }

    /// Changes PR `pr` (given the forge's clock now).
    pub(super) fn update_pr(
        &self,
        repo: &RepoHandle,
        pr: u64,
        change: impl FnOnce(&mut FakePr, SystemTime),
    ) -> FakePr {
        self.with(|s| {
            let now = s.now();
            let found = s
                .repo_of(repo)
                .prs
                .iter_mut()
                .find(|p| p.number == pr)
                .unwrap_or_else(|| panic!("no PR #{pr} in {}", repo.full_name));
            change(found, now);
            found.clone()
        })
    }

    /// The PR as the fake holds it now.
    pub fn pr(&self, repo: &RepoHandle, pr: u64) -> FakePr {
        self.update_pr(repo, pr, |_, _| {})
    }
}
