//! The bot's checks on a commit, each forge's own resource: GitHub's check
//! runs (created, then updated; their JSON and the fields a create or
//! update may set, checked as GitHub checks them) and Forgejo's commit
//! statuses (created anew for each change, a description of at most 140
//! characters).

use super::*;

/// A repository's routes about checks: GitHub's `POST check-runs` and
/// `PATCH check-runs/{id}`, Forgejo's `POST statuses/{sha}`.
pub(super) fn route(state: &mut State, call: &Call, path: &[&str]) -> Option<Answer> {
    let answer = match (call.forge, call.req.method, path) {
        (ForgeKind::GitHub, "POST", ["check-runs"]) => create_check_run(state, call),
        (ForgeKind::GitHub, "PATCH", ["check-runs", id]) => update_check_run(state, call, id),
        (ForgeKind::Forgejo, "POST", ["statuses", sha]) => create_status(state, call, sha),
        _ => return None,
    };
    Some(answer)
}

fn create_check_run(state: &mut State, call: &Call) -> Answer {
    let body = call.req.required_body()?;
    let (Some(name), Some(head_sha)) = (call.req.body_str("name"), call.req.body_str("head_sha"))
    else {
        return Err(unprocessable("name and head_sha are required".into()));
    };
    let mut run = FakeCheckRun {
        id: state.id(),
        head_sha: head_sha.to_owned(),
        name: name.to_owned(),
        status: "queued".into(),
        conclusion: None,
        output: json!({ "title": null, "summary": null, "text": null }),
        details_url: None,
    };
    apply_check_fields(&mut run, body)?;
    let repo = state.repo_at(ForgeKind::GitHub, call.full_name);
    repo.check_runs.push(run.clone());
    Ok(answer(201, check_run_json(call.full_name, &run)))
}

fn update_check_run(state: &mut State, call: &Call, id: &str) -> Answer {
    let id = number(id)?;
    let body = call.req.required_body()?;
    let run = state
        .repo_at(ForgeKind::GitHub, call.full_name)
        .check_runs
        .iter_mut()
        .find(|r| r.id == id)
        .ok_or_else(not_found)?;
    let mut updated = run.clone();
    apply_check_fields(&mut updated, body)?;
    *run = updated.clone();
    Ok(answer(200, check_run_json(call.full_name, &updated)))
}

/// The states a Forgejo commit status may be in.
const STATUS_STATES: [&str; 6] = [
    "pending", "success", "error", "failure", "warning", "skipped",
];

fn create_status(state: &mut State, call: &Call, sha: &str) -> Answer {
    let state_word = call.req.body_str("state").unwrap_or_default().to_owned();
    if !STATUS_STATES.contains(&state_word.as_str()) {
        return Err(unprocessable(format!(
            "state `{state_word}` is not a commit status state"
        )));
    }
    let description = call
        .req
        .body_str("description")
        .unwrap_or_default()
        .to_owned();
    if description.chars().count() > 140 {
        return Err(unprocessable(format!(
            "description is {} characters; the maximum is 140",
            description.chars().count()
        )));
    }
    let status = FakeStatus {
        id: state.id(),
        sha: sha.to_owned(),
        state: state_word,
        context: call.req.body_str("context").unwrap_or_default().to_owned(),
        description,
        target_url: call.req.body_str("target_url").map(str::to_owned),
    };
    let creator = people::user_json(state, call.forge, call.login);
    let now = rfc3339(state.now());
    state
        .repo_at(ForgeKind::Forgejo, call.full_name)
        .statuses
        .push(status.clone());
    Ok(answer(
        201,
        json!({
            "id": status.id,
            "status": status.state,
            "context": status.context,
            "description": status.description,
            "target_url": status.target_url.clone().unwrap_or_default(),
            "url": "",
            "creator": creator,
            "created_at": now,
            "updated_at": now,
        }),
    ))
}

fn check_run_json(full_name: &str, run: &FakeCheckRun) -> Value {
    json!({
        "id": run.id,
        "head_sha": run.head_sha,
        "node_id": format!("CR_{}", run.id),
        "external_id": "",
        "url": format!("https://api.github.com/repos/{full_name}/check-runs/{}", run.id),
        "html_url": format!("https://github.com/{full_name}/runs/{}", run.id),
        "details_url": run.details_url,
        "status": run.status,
        "conclusion": run.conclusion,
        "started_at": "2026-01-01T00:00:00Z",
        "completed_at": if run.conclusion.is_some() { json!("2026-01-01T00:00:00Z") } else { Value::Null },
        "output": run.output,
        "name": run.name,
        "check_suite": { "id": 1 },
        "app": { "id": APP_ID, "slug": APP_SLUG },
        "pull_requests": [],
    })
}

const CONCLUSIONS: [&str; 8] = [
    "action_required",
    "cancelled",
    "failure",
    "neutral",
    "success",
    "skipped",
    "stale",
    "timed_out",
];

/// Applies status/conclusion/output/details_url from a check-run body, as GitHub validates them.
fn apply_check_fields(run: &mut FakeCheckRun, body: &Value) -> Result<(), Response> {
    if let Some(name) = body.get("name").and_then(Value::as_str) {
        run.name = name.to_owned();
    }
    if let Some(url) = body.get("details_url").and_then(Value::as_str) {
        run.details_url = Some(url.to_owned());
    }
    if let Some(status) = body.get("status").and_then(Value::as_str) {
        if !["queued", "in_progress", "completed"].contains(&status) {
            return Err(unprocessable(format!("status `{status}` is not allowed")));
        }
        run.status = status.to_owned();
        if status != "completed" {
            run.conclusion = None;
        }
    }
    if let Some(conclusion) = body.get("conclusion").and_then(Value::as_str) {
        if !CONCLUSIONS.contains(&conclusion) {
            return Err(unprocessable(format!(
                "conclusion `{conclusion}` is not allowed"
            )));
        }
        run.status = "completed".into();
        run.conclusion = Some(conclusion.to_owned());
    } else if run.status == "completed" && run.conclusion.is_none() {
        return Err(unprocessable(
            "conclusion is required when status is completed".into(),
        ));
    }
    if let Some(output) = body.get("output") {
        for field in ["title", "summary"] {
            if output.get(field).and_then(Value::as_str).is_none() {
                return Err(unprocessable(format!("output.{field} is required")));
            }
        }
        for field in ["summary", "text"] {
            let length = output
                .get(field)
                .and_then(Value::as_str)
                .map_or(0, |t| t.chars().count());
            if length > 65_535 {
                return Err(unprocessable(format!(
                    "output.{field} is too long ({length} characters; maximum 65535)"
                )));
            }
        }
        run.output = output.clone();
    }
    Ok(())
}

impl FakeForge {
    /// The check runs on `sha` (GitHub), oldest first.
    pub fn check_runs(&self, repo: &RepoHandle, sha: &str) -> Vec<FakeCheckRun> {
        self.listed(repo, |r| &r.check_runs, |c| c.head_sha == sha)
    }

    /// The commit statuses on `sha` (Forgejo), oldest first.
    pub fn statuses(&self, repo: &RepoHandle, sha: &str) -> Vec<FakeStatus> {
        self.listed(repo, |r| &r.statuses, |c| c.sha == sha)
    }
}
