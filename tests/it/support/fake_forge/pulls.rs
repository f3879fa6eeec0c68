//! Pull requests, written once on the shared state (which are listed, in
//! what order) and rendered per forge (`pull_json`: GitHub's or Forgejo's
//! shape).

use super::*;

/// The repository's pull requests in `state` (`open` unless said), oldest first.
pub(super) fn open_prs(repo: &Repo, state: Option<&str>) -> Result<Vec<FakePr>, Response> {
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

/// A pull request as both forges answer `GET …/pulls/{n}` (the fields clients read, and then some).
pub(super) fn pull_json(repo: &RepoHandle, pr: &FakePr, github: bool) -> Value {
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
    let user = if github {
        github_user(&pr.author, pr.author_id, pr.author.ends_with("[bot]"))
    } else {
        forgejo_user(&pr.author, pr.author_id)
    };
    json!({
        "id": pr.id,
        "number": pr.number,
        "title": pr.title,
        "body": null,
        "state": if pr.open { "open" } else { "closed" },
        "user": user,
        "head": branch(&pr.head_ref, &pr.head_sha),
        "base": branch(&pr.base_ref, &pr.base_sha),
        "merged": pr.merged,
        "merge_commit_sha": pr.merge_sha,
        "updated_at": rfc3339(pr.updated_at),
        "draft": false,
        "html_url": format!("https://forge.example/{}/pull/{}", repo.full_name, pr.number),
    })
}
