//! GitHub's check runs: their JSON and the fields a create or update may
//! set, checked as GitHub checks them. (Forgejo's counterpart, the commit
//! status, is written in `forgejo_repo`.)

use super::*;

pub(super) fn check_run_json(full_name: &str, run: &FakeCheckRun) -> Value {
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

pub(super) const CONCLUSIONS: [&str; 8] = [
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
pub(super) fn apply_check_fields(run: &mut FakeCheckRun, body: &Value) -> Result<(), Response> {
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
