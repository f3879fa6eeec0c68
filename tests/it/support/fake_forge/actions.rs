//! Workflow dispatches and runs (GitHub Actions, Forgejo Actions): what a
//! test does to them (list a repository's dispatches, set a run's status,
//! be told of each dispatch as it happens: where a fake runner listens),
//! the three calls the bot makes, written once, and each forge's JSON.
//!
//! The workflow is read from the repository's own git (its clone URL, a
//! `file://` path): GitHub dispatches a file in `.github/workflows/` that
//! is on the default branch (404 otherwise), reads it at the ref asked for
//! (422 for no such ref) and refuses one without a `workflow_dispatch`
//! trigger or given inputs it does not declare (422; plain substring checks
//! of the file's text). Forgejo reads it at the ref from the first of
//! `.forgejo/workflows`, `.gitea/workflows` and `.github/workflows` that
//! exists (404 otherwise) and, as Forgejo does, dispatches it whatever its
//! `on:` says. Each forge answers the run only when asked to
//! (`return_run_details`, 200; `return_run_info`, 201), else 204. A cancel
//! ends a run at once: GitHub answers 202 (409 for a run already
//! completed), Forgejo 204 either way. Forgejo keeps the repository's
//! Actions secrets, set by whoever administers it, for its runs to read.
//!
//! A run has one job, the workflow's first, whose steps are the forge's
//! `Set up job`, the workflow's and its `Complete job`, and which ends as
//! the run does; a runner hands in what its step printed, and which step
//! ended how ([`RunsHandle::step_ended`]). That is the job's log: Forgejo
//! answers it as text (206 from its end for a `Range: bytes=-n`), GitHub
//! with a 302 to a download on another host (`localhost` for `127.0.0.1`),
//! not an API path, where each download is recorded apart.

use super::*;
use std::process::Command;

/// A repository's routes about Actions, the same paths on both forges.
pub(super) fn route(state: &mut State, call: &Call, path: &[&str]) -> Option<Answer> {
    let answer = match (call.req.method, path) {
        ("POST", ["actions", "workflows", file, "dispatches"]) => dispatch(state, call, file),
        ("GET", ["actions", "runs", id]) => get(state, call, id),
        ("GET", ["actions", "runs", id, "jobs"]) => jobs(state, call, id),
        ("GET", ["actions", "jobs", id]) => job(state, call, id),
        ("GET", ["actions", "jobs", id, "logs"]) => log(state, call, id),
        ("POST", ["actions", "runs", id, "cancel"]) => cancel(state, call, id),
        ("PUT", ["actions", "secrets", name]) if call.forge == ForgeKind::Forgejo => {
            set_secret(state, call, name)
        }
        _ => return None,
    };
    Some(answer)
}

/// The caller dispatches the workflow `file` on the body's `ref`.
fn dispatch(state: &mut State, call: &Call, file: &str) -> Answer {
    let body = call.req.required_body()?;
    let git_ref = match call.req.body_str("ref") {
        Some(r) if !r.is_empty() => r.to_owned(),
        _ => {
            return Err(match call.forge {
                ForgeKind::GitHub => refused("Invalid request.\n\n\"ref\" wasn't supplied."),
                ForgeKind::Forgejo => answer(400, json!({ "message": "ref is empty" })),
            })
        }
    };
    let inputs = read_inputs(body)?;
    let repo = state.repo_at(call.forge, call.full_name);
    let (handle, default_branch) = (repo.handle.clone(), repo.default_branch.clone());
    let git = Git::of(&handle.clone_url);
    let (workflow_path, text, head_sha) = match call.forge {
        ForgeKind::GitHub => {
            let path = format!(".github/workflows/{file}");
            git.show(&default_branch, &path).ok_or_else(not_found)?;
            let sha = git
                .commit(&git_ref)
                .ok_or_else(|| refused(&format!("No ref found for: {git_ref}")))?;
            let text = git
                .show(&sha, &path)
                .filter(|text| text.contains("workflow_dispatch"))
                .ok_or_else(|| refused("Workflow does not have 'workflow_dispatch' trigger"))?;
            let unexpected: Vec<&String> = inputs
                .keys()
                .filter(|name| !text.contains(&format!("{name}:")))
                .collect();
            if !unexpected.is_empty() {
                return Err(refused(&format!(
                    "Unexpected inputs provided: {unexpected:?}"
                )));
            }
            (path, text, sha)
        }
        ForgeKind::Forgejo => {
            let sha = git.commit(&git_ref).ok_or_else(not_found)?;
            let dir = [
                ".forgejo/workflows",
                ".gitea/workflows",
                ".github/workflows",
            ]
            .into_iter()
            .find(|dir| git.has_tree(&sha, dir))
            .ok_or_else(not_found)?;
            let path = format!("{dir}/{file}");
            let text = git.show(&sha, &path).ok_or_else(not_found)?;
            (path, text, sha)
        }
    };
    let (id, job_id, now) = (state.id(), state.id(), state.now());
    let base_url = state.base_url.clone();
    let repo = state.repo_at(call.forge, call.full_name);
    let run_number = repo.runs.len() as u64 + 1;
    let page = match call.forge {
        ForgeKind::GitHub => id,
        ForgeKind::Forgejo => run_number,
    };
    let run = FakeRun {
        id,
        run_number,
        html_url: format!("{base_url}/{}/actions/runs/{page}", handle.full_name),
        repo: handle,
        workflow: file.to_owned(),
        workflow_path,
        git_ref,
        head_sha,
        inputs,
        actor: call.login.to_owned(),
        status: "queued".into(),
        conclusion: None,
        created_at: now,
        updated_at: now,
        job: FakeJob {
            id: job_id,
            name: job_names(&text).into_iter().next().unwrap_or_default(),
            steps: std::iter::once("Set up job".to_owned())
                .chain(step_names(&text))
                .chain(std::iter::once("Complete job".to_owned()))
                .map(|name| FakeStep {
                    name,
                    status: "queued".into(),
                    conclusion: None,
                })
                .collect(),
            log: String::new(),
        },
    };
    repo.runs.push(run.clone());
    // Nobody listening is no failure: a test need not subscribe.
    let _ = state.dispatched.send(run.clone());
    let asked = |field: &str| body.get(field) == Some(&Value::Bool(true));
    match call.forge {
        ForgeKind::GitHub if asked("return_run_details") => Ok(answer(
            200,
            json!({
                "workflow_run_id": run.id,
                "run_url": format!("{base_url}/repos/{}/actions/runs/{}", call.full_name, run.id),
                "html_url": run.html_url,
            }),
        )),
        ForgeKind::Forgejo if asked("return_run_info") => Ok(answer(
            201,
            json!({ "id": run.id, "run_number": run.run_number, "jobs": job_names(&text) }),
        )),
        _ => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

/// GitHub's 422 for a dispatch it will not make, its reason the message.
fn refused(why: &str) -> Response {
    answer(
        422,
        json!({
            "message": why,
            "documentation_url": "https://docs.github.com/rest/actions/workflows#create-a-workflow-dispatch-event",
        }),
    )
}

/// The body's `inputs`: an object of strings, or none.
fn read_inputs(body: &Value) -> Result<BTreeMap<String, String>, Response> {
    let Some(inputs) = body.get("inputs") else {
        return Ok(BTreeMap::new());
    };
    let object = inputs
        .as_object()
        .ok_or_else(|| unprocessable("inputs is not an object".into()))?;
    if object.len() > 25 {
        return Err(unprocessable(format!(
            "{} inputs; the maximum is 25",
            object.len()
        )));
    }
    object
        .iter()
        .map(|(name, value)| match value.as_str() {
            Some(text) => Ok((name.clone(), text.to_owned())),
            None => Err(unprocessable(format!("input {name} is not a string"))),
        })
        .collect()
}

/// The names of the workflow's jobs: the keys under `jobs:`, two spaces in.
fn job_names(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|line| line.trim_end() != "jobs:")
        .skip(1)
        .take_while(|line| line.is_empty() || line.starts_with(' '))
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.trim().strip_suffix(':').map(str::to_owned))
        .collect()
}

/// The names GitHub gives the steps under the first `steps:`: a step's
/// `name`, else `Run ` and what it uses or runs.
fn step_names(text: &str) -> Vec<String> {
    let mut lines = text
        .lines()
        .skip_while(|line| line.trim_end() != "    steps:");
    lines.next();
    lines
        .take_while(|line| line.is_empty() || line.starts_with("      "))
        .filter_map(|line| line.strip_prefix("      - "))
        .filter_map(|step| {
            let (key, value) = step.split_once(": ")?;
            match key {
                "name" => Some(value.trim().to_owned()),
                "uses" | "run" => Some(format!("Run {}", value.trim())),
                _ => None,
            }
        })
        .collect()
}

fn run_mut<'s>(state: &'s mut State, call: &Call, id: &str) -> Result<&'s mut FakeRun, Response> {
    let id = number(id)?;
    state
        .repo_at(call.forge, call.full_name)
        .runs
        .iter_mut()
        .find(|r| r.id == id)
        .ok_or_else(not_found)
}

fn get(state: &mut State, call: &Call, id: &str) -> Answer {
    let run = run_mut(state, call, id)?.clone();
    Ok(answer(200, run_json(state, &run)))
}

fn jobs(state: &mut State, call: &Call, id: &str) -> Answer {
    let run = run_mut(state, call, id)?.clone();
    let base = state.base_url.clone();
    Ok(match call.forge {
        ForgeKind::GitHub => answer(
            200,
            json!({ "total_count": 1, "jobs": [job_json(&base, &run)] }),
        ),
        ForgeKind::Forgejo => {
            let mut listed = job_json(&base, &run);
            listed.as_object_mut().unwrap().remove("steps");
            answer(200, json!([listed]))
        }
    })
}

/// The run whose job `id` is.
fn run_of_job(state: &mut State, call: &Call, id: &str) -> Result<FakeRun, Response> {
    let id = number(id)?;
    state
        .repo_at(call.forge, call.full_name)
        .runs
        .iter()
        .find(|r| r.job.id == id)
        .cloned()
        .ok_or_else(not_found)
}

fn job(state: &mut State, call: &Call, id: &str) -> Answer {
    let run = run_of_job(state, call, id)?;
    Ok(answer(200, job_json(&state.base_url, &run)))
}

/// Forgejo: the log, from its end for a `Range: bytes=-n`. GitHub: where
/// to download it, on another host.
fn log(state: &mut State, call: &Call, id: &str) -> Answer {
    let run = run_of_job(state, call, id)?;
    let log = run.job.log;
    match call.forge {
        ForgeKind::GitHub => {
            let other_host = state.base_url.replace("127.0.0.1", "localhost");
            let location = format!(
                "{other_host}/_downloads/logs/{}/{}?urlSigningMethod=HMACV1&urlSignature=sig-{}",
                call.full_name, run.job.id, run.job.id
            );
            Ok((StatusCode::FOUND, [("location", location)]).into_response())
        }
        ForgeKind::Forgejo => {
            let suffix = call
                .req
                .headers
                .get("range")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("bytes=-"))
                .and_then(|n| n.parse::<usize>().ok());
            match suffix {
                Some(_) if log.is_empty() => Err(StatusCode::RANGE_NOT_SATISFIABLE.into_response()),
                Some(n) if n < log.len() => {
                    let start = log.len() - n;
                    let range = format!("bytes {start}-{}/{}", log.len() - 1, log.len());
                    Ok((
                        StatusCode::PARTIAL_CONTENT,
                        [
                            ("content-type", "text/plain; charset=utf-8".to_owned()),
                            ("content-range", range),
                        ],
                        log.into_bytes()[start..].to_vec(),
                    )
                        .into_response())
                }
                _ => Ok(([("content-type", "text/plain; charset=utf-8")], log).into_response()),
            }
        }
    }
}

/// A download of a job's log where GitHub's redirect points (not an API
/// path, so not checked as one): recorded apart, the log in full.
pub(super) fn download(
    shared: &Shared,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Option<Response> {
    let rest = uri.path().strip_prefix("/_downloads/logs/")?;
    let mut state = shared.lock().unwrap();
    // Recorded as any request is, then kept apart from the API's.
    record(&mut state, method, uri, headers, None);
    let recorded = state.requests.pop().expect("just recorded");
    state.log_downloads.push(recorded);
    if let Some(failure) = take_failure(&mut state, method.as_str(), uri.path()) {
        return Some(failure);
    }
    let job = rest
        .rsplit_once('/')
        .and_then(|(full_name, job)| Some((full_name, job.parse::<u64>().ok()?)));
    let log = job.and_then(|(full_name, job)| {
        let repo = state.repo_mut(ForgeKind::GitHub, full_name)?;
        let run = repo.runs.iter().find(|r| r.job.id == job)?;
        Some(run.job.log.clone())
    });
    Some(match log {
        Some(log) => ([("content-type", "text/plain; charset=utf-8")], log).into_response(),
        None => not_found(),
    })
}

/// A run's job as its repository's forge answers it.
fn job_json(base: &str, run: &FakeRun) -> Value {
    let (job, repo) = (&run.job, &run.repo);
    let full_name = &repo.full_name;
    match repo.forge {
        ForgeKind::GitHub => {
            let started = rfc3339(run.created_at);
            let completed = (run.status == "completed").then(|| rfc3339(run.updated_at));
            let steps: Vec<Value> = job
                .steps
                .iter()
                .enumerate()
                .map(|(number, step)| {
                    json!({
                        "name": step.name,
                        "status": step.status,
                        "conclusion": step.conclusion,
                        "number": number + 1,
                    })
                })
                .collect();
            json!({
                "id": job.id,
                "run_id": run.id,
                "run_url": format!("{base}/repos/{full_name}/actions/runs/{}", run.id),
                "run_attempt": 1,
                "node_id": format!("CR_{}", job.id),
                "head_sha": run.head_sha,
                "url": format!("{base}/repos/{full_name}/actions/jobs/{}", job.id),
                "html_url": format!("{}/job/{}", run.html_url, job.id),
                "status": run.status,
                "conclusion": run.conclusion,
                "created_at": started,
                "started_at": started,
                "completed_at": completed,
                "name": job.name,
                "steps": steps,
                "check_run_url": format!("{base}/repos/{full_name}/check-runs/{}", job.id),
                "labels": [],
                "runner_id": null,
                "runner_name": null,
                "runner_group_id": null,
                "runner_group_name": null,
                "workflow_name": run.workflow,
                "head_branch": run.git_ref,
            })
        }
        ForgeKind::Forgejo => {
            let steps: Vec<Value> = job
                .steps
                .iter()
                .enumerate()
                .map(|(number, step)| {
                    let status = forgejo_status_of(&step.status, step.conclusion.as_deref());
                    json!({ "name": step.name, "number": number, "status": status })
                })
                .collect();
            json!({
                "id": job.id,
                "run_id": run.id,
                "repo_id": repo.id,
                "owner_id": 1,
                "name": job.name,
                "needs": [],
                "runs_on": [],
                "task_id": job.id,
                "attempt": 1,
                "handle": format!("job-{}", job.id),
                "status": forgejo_status(run),
                "html_url": format!("{}/jobs/0", run.html_url),
                "steps": steps,
            })
        }
    }
}

/// Cancels a run not completed yet.
fn cancel(state: &mut State, call: &Call, id: &str) -> Answer {
    let now = state.now();
    let run = run_mut(state, call, id)?;
    let completed = run.status == "completed";
    if !completed {
        run.status = "completed".into();
        run.conclusion = Some("cancelled".into());
        run.updated_at = now;
    }
    match call.forge {
        ForgeKind::GitHub if completed => Err(answer(
            409,
            json!({ "message": "Cannot cancel a workflow run that is completed." }),
        )),
        ForgeKind::GitHub => Ok(answer(202, json!({}))),
        ForgeKind::Forgejo => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

/// Forgejo sets the repository's Actions secret `name` for whoever
/// administers the repository: 201 created, 204 replaced.
fn set_secret(state: &mut State, call: &Call, name: &str) -> Answer {
    if !state.forgejo_bot_admin {
        return Err(forbidden("user should be the owner of the repo"));
    }
    let data = call.req.required_str("data")?;
    let repo = state.repo_at(call.forge, call.full_name);
    match repo.secrets.insert(name.to_uppercase(), data) {
        None => Ok(StatusCode::CREATED.into_response()),
        Some(_) => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

/// Forgejo's one word for a run's status and conclusion.
fn forgejo_status(run: &FakeRun) -> &'static str {
    forgejo_status_of(&run.status, run.conclusion.as_deref())
}

/// Forgejo's one word for GitHub's status and conclusion.
fn forgejo_status_of(status: &str, conclusion: Option<&str>) -> &'static str {
    match (status, conclusion) {
        ("in_progress", _) => "running",
        ("completed", Some("success")) => "success",
        ("completed", Some("cancelled")) => "cancelled",
        ("completed", Some("skipped")) => "skipped",
        ("completed", _) => "failure",
        _ => "waiting",
    }
}

/// A run as its repository's forge answers `GET …/actions/runs/{id}`.
fn run_json(state: &mut State, run: &FakeRun) -> Value {
    let repo = &run.repo;
    let actor = people::user_json(state, repo.forge, &run.actor);
    let base = &state.base_url;
    let (full_name, id) = (&repo.full_name, run.id);
    let owner = full_name.split('/').next().unwrap_or_default();
    let name = full_name.split('/').nth(1).unwrap_or_default();
    let repository = json!({
        "id": repo.id,
        "name": name,
        "full_name": full_name,
        "owner": { "login": owner, "id": 1 },
        "html_url": format!("{base}/{full_name}"),
        "clone_url": repo.clone_url,
        "private": false,
        "fork": false,
    });
    match repo.forge {
        ForgeKind::GitHub => {
            let api = format!("{base}/repos/{full_name}/actions");
            json!({
                "id": id,
                "name": run.workflow,
                "node_id": format!("WFR_{id}"),
                "check_suite_id": id,
                "head_branch": run.git_ref,
                "head_sha": run.head_sha,
                "path": run.workflow_path,
                "display_title": run.workflow,
                "run_number": run.run_number,
                "run_attempt": 1,
                "event": "workflow_dispatch",
                "status": run.status,
                "conclusion": run.conclusion,
                "workflow_id": 1,
                "url": format!("{api}/runs/{id}"),
                "html_url": run.html_url,
                "created_at": rfc3339(run.created_at),
                "updated_at": rfc3339(run.updated_at),
                "run_started_at": rfc3339(run.created_at),
                "actor": actor,
                "triggering_actor": actor,
                "jobs_url": format!("{api}/runs/{id}/jobs"),
                "logs_url": format!("{api}/runs/{id}/logs"),
                "check_suite_url": format!("{base}/repos/{full_name}/check-suites/{id}"),
                "artifacts_url": format!("{api}/runs/{id}/artifacts"),
                "cancel_url": format!("{api}/runs/{id}/cancel"),
                "rerun_url": format!("{api}/runs/{id}/rerun"),
                "workflow_url": format!("{api}/workflows/{}", run.workflow),
                "pull_requests": [],
                "head_commit": null,
                "repository": repository,
                "head_repository": repository,
            })
        }
        ForgeKind::Forgejo => {
            let status = forgejo_status(run);
            let done = !matches!(status, "waiting" | "running");
            let payload =
                json!({ "inputs": run.inputs, "ref": run.git_ref, "workflow": run.workflow_path });
            json!({
                "id": id,
                "index_in_repo": run.run_number,
                "title": run.workflow,
                "status": status,
                "html_url": run.html_url,
                "workflow_id": run.workflow,
                "prettyref": run.git_ref,
                "commit_sha": run.head_sha,
                "event": "workflow_dispatch",
                "trigger_event": "workflow_dispatch",
                "event_payload": payload.to_string(),
                "is_fork_pull_request": false,
                "need_approval": false,
                "approved_by": 0,
                "is_ref_deleted": false,
                "ScheduleID": 0,
                "created": rfc3339(run.created_at),
                "updated": rfc3339(run.updated_at),
                "started": rfc3339(run.created_at),
                "stopped": if done { rfc3339(run.updated_at) } else { "0001-01-01T00:00:00Z".into() },
                "duration": 0,
                "trigger_user": actor,
                "repository": repository,
            })
        }
    }
}

/// A repository's git, read where its clone URL points (a `file://` URL or
/// a path); any other URL holds nothing.
struct Git(Option<String>);

impl Git {
    fn of(clone_url: &str) -> Self {
        let path = clone_url.strip_prefix("file://").unwrap_or(clone_url);
        Self(path.starts_with('/').then(|| path.to_owned()))
    }

    fn run(&self, args: &[&str]) -> Option<String> {
        let dir = self.0.as_ref()?;
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The commit `rev` (a branch name, a sha) names.
    fn commit(&self, rev: &str) -> Option<String> {
        let spec = format!("{rev}^{{commit}}");
        let sha = self.run(&[
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &spec,
        ])?;
        Some(sha.trim().to_owned())
    }

    /// The file `path` at `rev`.
    fn show(&self, rev: &str, path: &str) -> Option<String> {
        self.run(&["cat-file", "blob", &format!("{rev}:{path}")])
    }

    /// Whether `dir` is a directory at `rev`.
    fn has_tree(&self, rev: &str, dir: &str) -> bool {
        self.run(&["cat-file", "-t", &format!("{rev}:{dir}")])
            .is_some_and(|kind| kind.trim() == "tree")
    }
}

impl FakeForge {
    /// Every workflow run dispatched on the repository, oldest first, with
    /// the inputs it was given and where it stands.
    pub fn dispatches(&self, repo: &RepoHandle) -> Vec<FakeRun> {
        self.listed(repo, |r| &r.runs, |_| true)
    }

    /// Run `id` of the repository as the fake holds it now.
    pub fn run(&self, repo: &RepoHandle, id: u64) -> FakeRun {
        self.dispatches(repo)
            .into_iter()
            .find(|r| r.id == id)
            .unwrap_or_else(|| panic!("no run {id} in {}", repo.full_name))
    }

    /// The run moves on (as a runner would move it), in GitHub's words:
    /// `queued`, `in_progress`, or `completed` with a conclusion
    /// (`success`, `failure`, `cancelled`, `timed_out`, …). Forgejo
    /// answers them in its own.
    pub fn set_run_status(
        &self,
        repo: &RepoHandle,
        id: u64,
        status: &str,
        conclusion: Option<&str>,
    ) {
        self.with(|s| {
            let now = s.now();
            let run = s
                .repo_of(repo)
                .runs
                .iter_mut()
                .find(|r| r.id == id)
                .unwrap_or_else(|| panic!("no run {id} in {}", repo.full_name));
            run.status = status.to_owned();
            run.conclusion = conclusion.map(str::to_owned);
            run.updated_at = now;
        })
    }

    /// The repository's Actions secret `name` (Forgejo), as set.
    pub fn actions_secret(&self, repo: &RepoHandle, name: &str) -> Option<String> {
        self.runs().secret(repo, name)
    }

    /// Each download of a job's log where GitHub's redirect pointed, with
    /// the headers it came with, oldest first.
    pub fn log_downloads(&self) -> Vec<RecordedRequest> {
        self.with(|s| s.log_downloads.clone())
    }

    /// Told of each workflow run dispatched from now on, on any repository
    /// of either forge, as it is dispatched.
    pub fn subscribe_dispatches(&self) -> tokio::sync::broadcast::Receiver<FakeRun> {
        self.with(|s| s.dispatched.subscribe())
    }

    /// What a fake runner, on a task of its own, moves runs with.
    pub fn runs(&self) -> RunsHandle {
        RunsHandle {
            state: Arc::clone(&self.state),
        }
    }
}

/// A fake forge's runs, as a runner updates them.
#[derive(Clone)]
pub struct RunsHandle {
    state: Arc<Mutex<State>>,
}

impl RunsHandle {
    /// The run's status (GitHub's words) and, once completed, conclusion.
    pub fn set(&self, repo: &RepoHandle, id: u64, status: &str, conclusion: Option<&str>) {
        let mut s = self.state.lock().unwrap();
        let now = s.now();
        if let Some(run) = s.repo_of(repo).runs.iter_mut().find(|r| r.id == id) {
            run.status = status.to_owned();
            run.conclusion = conclusion.map(str::to_owned);
            run.updated_at = now;
        }
    }

    /// The run's job got as far as `step` (a step's name, or the last
    /// step), which ended `conclusion` (GitHub's word), having printed
    /// `log`: the steps before it succeeded, and after it the rest
    /// succeeded too or, when it did not succeed, were skipped.
    pub fn step_ended(&self, repo: &RepoHandle, id: u64, step: &str, conclusion: &str, log: &str) {
        let mut s = self.state.lock().unwrap();
        let Some(run) = s.repo_of(repo).runs.iter_mut().find(|r| r.id == id) else {
            return;
        };
        let job = &mut run.job;
        let at = job
            .steps
            .iter()
            .position(|s| s.name == step)
            .unwrap_or(job.steps.len().saturating_sub(1));
        for (index, each) in job.steps.iter_mut().enumerate() {
            let word = match index.cmp(&at) {
                std::cmp::Ordering::Less => "success",
                std::cmp::Ordering::Equal => conclusion,
                std::cmp::Ordering::Greater if conclusion == "success" => "success",
                std::cmp::Ordering::Greater => "skipped",
            };
            each.status = "completed".into();
            each.conclusion = Some(word.to_owned());
        }
        job.log = log.to_owned();
    }

    /// The repository's Actions secret `name`, as a run reads it.
    pub fn secret(&self, repo: &RepoHandle, name: &str) -> Option<String> {
        let mut s = self.state.lock().unwrap();
        s.repo_of(repo).secrets.get(name).cloned()
    }

    /// The run's status now.
    pub fn status(&self, repo: &RepoHandle, id: u64) -> Option<String> {
        let mut s = self.state.lock().unwrap();
        s.repo_of(repo)
            .runs
            .iter()
            .find(|r| r.id == id)
            .map(|r| r.status.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jobs_are_the_keys_under_jobs() {
        let text = "on: workflow_dispatch\njobs:\n  plan:\n    runs-on: x\n    steps:\n      - run: a\n\n  apply:\n    runs-on: y\nenv:\n  A: b\n";
        assert_eq!(job_names(text), ["plan", "apply"]);
    }

    #[test]
    fn the_steps_are_named_as_github_names_them() {
        let text = "jobs:\n  job:\n    runs-on: x\n    steps:\n      - uses: actions/checkout@v4\n        with:\n          ref: x\n      - name: wavegate job run\n        run: wavegate job run\n      - run: make\nenv:\n  A: b\n";
        assert_eq!(
            step_names(text),
            ["Run actions/checkout@v4", "wavegate job run", "Run make"]
        );
    }
}
