//! An operator's actions on a repository's locks and jobs, from the queue
//! page's forms and from the JSON API: release a stale member lock, retry a
//! dead job. Each asks [`access::may_operate`] who acts, decides with
//! [`stale`], writes the change and its signed ledger fact together, then
//! resumes the runs that waited for the lock or wakes the workers for the
//! job. A form (field `csrf`) is answered 303 back to the queue page; the
//! API takes the CSRF token from the `X-Wavegate-Csrf` header and answers
//! JSON. A refusal says why, in the page's words or as `{"error": …}`.

use super::stale::{self, Holder};
use super::{access, known, repo_at, ApiProblem, PageProblem, Problem, WebState};
use crate::apply::apply_in_flight;
use crate::gate::ledger::{Actor, FactData, FactDigest, FactKind, NewFact, Source};
use crate::jobs::{queue_key, queue_key_prefix, Task};
use crate::model::{GateId, MemberId, RepoId};
use crate::store::JobId;
use access::{Operator, Visitor};
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Redirect;
use axum::{Form, Json};
use serde::{Deserialize, Serialize};

/// The header an API call carries its session's CSRF token in.
pub(crate) const CSRF_HEADER: &str = "x-wavegate-csrf";

#[derive(Debug, Deserialize)]
pub(crate) struct ActionForm {
    csrf: String,
}

/// A lock let go of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Released {
    pub(crate) member: String,
    pub(crate) run: i64,
    pub(crate) pr: u64,
    /// Why it was stale, as the ledger fact says.
    pub(crate) reason: String,
    /// The ledger fact's seq.
    pub(crate) fact: i64,
    /// The pull requests whose runs waited for a lock, resumed.
    pub(crate) resumed: Vec<u64>,
}

/// A dead job queued again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Retried {
    pub(crate) job: i64,
    pub(crate) pr: u64,
    /// The ledger fact's seq.
    pub(crate) fact: i64,
}

type RepoPath = (String, String, String);

fn by(operator: &Operator) -> Actor {
    Actor {
        id: 0,
        login: operator.login.clone(),
    }
}

async fn release(
    state: &WebState,
    visitor: &Visitor,
    (path, member): (&RepoPath, &str),
    csrf: &str,
) -> Result<Released, Problem> {
    let repo = repo_at(path)?;
    let operator = access::may_operate(state, visitor, &repo, csrf).await?;
    let repo = known(&state.store, repo).await?;
    let store = &state.store;
    let no_lock = || Problem::NotFound(format!("no run holds a lock of {member} in {repo}"));
    let member: MemberId = member.parse().map_err(|_| no_lock())?;
    let lock = store
        .member_locks(&repo)
        .await?
        .into_iter()
        .find(|lock| lock.member == member.as_str())
        .ok_or_else(no_lock)?;
    let run = store
        .apply_run(&repo, lock.pr)
        .await?
        .filter(|run| run.id == lock.run_id)
        .ok_or_else(no_lock)?;
    let key = queue_key(&repo, lock.pr);
    let jobs = store.unfinished_jobs_of(&key).await?;
    let holder = Holder {
        run: run.id,
        pr: run.pr,
        status: run.status,
        jobs: &jobs,
        in_flight: apply_in_flight(&run.record, store.now()),
    };
    let why = stale::may_release(&holder).map_err(|e| Problem::Conflict(e.to_string()))?;
    let fact = NewFact {
        repo: repo.ledger_key(),
        gate: GateId::Pr(run.pr),
        kind: FactKind::LockReleased,
        digest: (&run.digest).into(),
        actor: by(&operator),
        at: store.now(),
        source: Source::Operator,
        data: FactData {
            run: Some(run.id),
            merge: Some(run.merge_sha.clone()),
            member: Some(member.clone()),
            reason: Some(why.to_string()),
            ..FactData::default()
        },
    };
    let Some((fact, waiting)) = store
        .release_member_lock((&repo, &member), (run.id, &key), fact)
        .await?
    else {
        return Err(Problem::Conflict(format!(
            "the lock of {member} changed meanwhile (a job of {} was queued or started, or the lock was let go of); reload the page",
            run.pr
        )));
    };
    tracing::info!(repo = %repo, %member, run = run.id, operator = %operator.login, reason = %why, "an operator released a member lock");
    let mut resumed = Vec::new();
    for waiting in waiting {
        let task = Task::Apply {
            repo: waiting.repo.clone(),
            pr: waiting.pr,
        };
        store.enqueue(task.into_job()).await?;
        state.wake.notify_one();
        resumed.push(waiting.pr.0);
    }
    Ok(Released {
        member: member.to_string(),
        run: run.id,
        pr: run.pr.0,
        reason: why.to_string(),
        fact: fact.seq,
        resumed,
    })
}

async fn retry(
    state: &WebState,
    visitor: &Visitor,
    (path, id): (&RepoPath, i64),
    csrf: &str,
) -> Result<Retried, Problem> {
    let repo = repo_at(path)?;
    let operator = access::may_operate(state, visitor, &repo, csrf).await?;
    let repo = known(&state.store, repo).await?;
    let store = &state.store;
    let id = JobId(id);
    let job = store
        .job(id)
        .await?
        .filter(|job| job.queue_key.starts_with(&queue_key_prefix(&repo)))
        .ok_or_else(|| Problem::NotFound(format!("{repo} has no job {id}")))?;
    stale::may_retry(&job).map_err(|e| Problem::Conflict(e.to_string()))?;
    let task: Task = serde_json::from_value(job.payload.clone())
        .map_err(|e| anyhow::anyhow!("job {id} has a payload wavegate cannot read: {e}"))?;
    let pr = task.pr_number();
    let fact = NewFact {
        repo: repo.ledger_key(),
        gate: GateId::Pr(pr),
        kind: FactKind::JobRetried,
        digest: digest_of(state, &repo, pr).await?,
        actor: by(&operator),
        at: store.now(),
        source: Source::Operator,
        data: FactData {
            job: Some(id.0),
            reason: Some(format!("{} job {id} of {pr} was dead", job.kind)),
            ..FactData::default()
        },
    };
    let Some(fact) = store.retry_dead_job(id, fact).await? else {
        return Err(Problem::Conflict(format!(
            "job {id} is no longer dead; reload the page"
        )));
    };
    state.wake.notify_one();
    tracing::info!(repo = %repo, job = id.0, operator = %operator.login, "an operator queued a dead job again");
    Ok(Retried {
        job: id.0,
        pr: pr.0,
        fact: fact.seq,
    })
}

/// What a retried job's fact is about: the digest its pull request's run
/// applies, else the one its report last showed, else none in particular.
async fn digest_of(
    state: &WebState,
    repo: &RepoId,
    pr: crate::model::PrNumber,
) -> Result<FactDigest, Problem> {
    if let Some(run) = state.store.apply_run(repo, pr).await? {
        return Ok(run.digest.into());
    }
    Ok(match state.store.pr(repo, pr).await? {
        Some(record) => record
            .report_digest
            .map_or(FactDigest::Any, FactDigest::from),
        None => FactDigest::Any,
    })
}

/// A form's CSRF token, or none (then the action is refused as not from
/// the visitor's session).
fn form_csrf(form: Result<Form<ActionForm>, FormRejection>) -> String {
    form.map(|Form(form)| form.csrf).unwrap_or_default()
}

fn header_csrf(headers: &HeaderMap) -> String {
    headers
        .get(CSRF_HEADER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// Back to the queue page; a visitor sent to log in comes back there too
/// (not to the form's address, which only takes a POST).
fn to_queue(path: &RepoPath) -> String {
    let (forge, owner, name) = path;
    format!("/repos/{forge}/{owner}/{name}/queue")
}

fn on_page(path: &RepoPath, problem: Problem) -> PageProblem {
    match problem {
        Problem::LogIn { why, .. } => PageProblem(Problem::LogIn {
            why,
            next: to_queue(path),
        }),
        problem => PageProblem(problem),
    }
}

pub(crate) async fn release_form(
    State(state): State<WebState>,
    visitor: Visitor,
    Path((forge, owner, name, member)): Path<(String, String, String, String)>,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Result<Redirect, PageProblem> {
    let path = (forge, owner, name);
    release(&state, &visitor, (&path, &member), &form_csrf(form))
        .await
        .map_err(|problem| on_page(&path, problem))?;
    Ok(Redirect::to(&to_queue(&path)))
}

pub(crate) async fn retry_form(
    State(state): State<WebState>,
    visitor: Visitor,
    Path((forge, owner, name, id)): Path<(String, String, String, i64)>,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Result<Redirect, PageProblem> {
    let path = (forge, owner, name);
    retry(&state, &visitor, (&path, id), &form_csrf(form))
        .await
        .map_err(|problem| on_page(&path, problem))?;
    Ok(Redirect::to(&to_queue(&path)))
}

pub(crate) async fn release_api(
    State(state): State<WebState>,
    visitor: Visitor,
    Path((forge, owner, name, member)): Path<(String, String, String, String)>,
    headers: HeaderMap,
) -> Result<Json<Released>, ApiProblem> {
    let path = (forge, owner, name);
    let released = release(&state, &visitor, (&path, &member), &header_csrf(&headers)).await?;
    Ok(Json(released))
}

pub(crate) async fn retry_api(
    State(state): State<WebState>,
    visitor: Visitor,
    Path((forge, owner, name, id)): Path<(String, String, String, i64)>,
    headers: HeaderMap,
) -> Result<Json<Retried>, ApiProblem> {
    let path = (forge, owner, name);
    let retried = retry(&state, &visitor, (&path, id), &header_csrf(&headers)).await?;
    Ok(Json(retried))
}
