//! Notifications: the notices of a run's news enqueued once per target
//! (`Task::Notify`, keyed so a retried job or another replica says nothing
//! twice), and each one's delivery — signed when it is JSON, through the
//! one retry wrapper, in a queue of its own so a slow or broken receiver
//! never holds a run up. A failed delivery is a log line and a metric.

use crate::apply::run::News;
use crate::apply::Wait;
use crate::config::settings::{NotifyFormat, NotifyTargets};
use crate::forge::retry::{send_with_retry, Failure, Reply, RetryPolicy};
use crate::jobs::Task;
use crate::notify::{self, Notice, RunContext, SIGNATURE_HEADER};
use crate::store::{ApplyRunRecord, JobOutcome};
use crate::worker::ctx::{Mirror, Queue};
use anyhow::{anyhow, Result};

/// Enqueues, once per target the run's base names, a notice of each
/// event `news` is; `said` is what the pull request was told, `page` the
/// pull request's page when this server shows its pages.
pub(super) async fn notify_of(
    (queue, mirror): (Queue<'_>, &Mirror<'_>),
    (run, page): (&ApplyRunRecord, Option<&str>),
    news: &News,
    said: &str,
) -> Result<()> {
    let rules = mirror.base_rules(&run.base_sha).await?;
    let Some(wanted) = rules.notify() else {
        return Ok(());
    };
    let ctx = RunContext {
        repo: &run.repo,
        pr: run.pr,
        run: run.id,
        merge_sha: &run.merge_sha,
        record: &run.record,
        page,
    };
    let policy = rules.policy().ok();
    for event in notify::events_of(news) {
        if !wanted.events.contains(&event.0) {
            continue;
        }
        let approvers = match (event.1, &policy) {
            (Some(Wait::Stage { stage, .. } | Wait::Hook { stage, .. }), Some(policy)) => {
                Some(rules.stage_policy(policy, stage.as_str()).approvers)
            }
            (Some(Wait::Round { round, .. }), Some(policy)) => run
                .record
                .rounds
                .iter()
                .find(|r| r.number == *round)
                .map(|r| rules.stage_policy(policy, r.stage.as_str()).approvers),
            (Some(Wait::Override { .. }), Some(policy)) => Some(policy.overriders.clone()),
            (Some(_), Some(policy)) => Some(policy.approvers.clone()),
            _ => None,
        };
        let notice = notify::notice(&ctx, event, said, approvers);
        for target in &wanted.to {
            let task = Task::Notify {
                repo: run.repo.clone(),
                pr: run.pr,
                target: crate::config::repo::notify_env_name(target),
                notice: Box::new(notice.clone()),
            };
            queue.enqueue_once(task).await?;
        }
    }
    Ok(())
}

/// Enqueues, once per target the default branch names, the notice of new
/// or changed drift on `issue` (checked at `commit`); `said` is what the
/// issue was told.
pub(super) async fn notify_of_drift(
    job: &crate::worker::ctx::JobCtx<'_>,
    (issue, commit): (&crate::store::DriftIssue, &crate::model::CommitSha),
    members: &[crate::model::MemberId],
    said: &str,
    changed: bool,
) -> Result<()> {
    let rules = job.mirror.base_rules(commit).await?;
    let Some(wanted) = rules.notify() else {
        return Ok(());
    };
    if !wanted
        .events
        .contains(&crate::config::repo::NotifyEvent::Drift)
    {
        return Ok(());
    }
    let Some(digest) = issue.digest() else {
        return Ok(());
    };
    let page = job.forge.pull_page(issue.number);
    let ctx = notify::DriftContext {
        repo: job.forge.repo,
        issue: issue.number,
        commit,
        digest,
        members: members.iter().map(ToString::to_string).collect(),
        changed,
        page: page.as_deref(),
    };
    let notice = notify::drift_notice(&ctx, said);
    for target in &wanted.to {
        let task = Task::Notify {
            repo: job.forge.repo.clone(),
            pr: issue.number,
            target: crate::config::repo::notify_env_name(target),
            notice: Box::new(notice.clone()),
        };
        job.queue.enqueue_once(task).await?;
    }
    Ok(())
}

/// Delivers one notice to `target`, as this server defines it among
/// `targets`; an error retries the job later.
pub(in crate::worker) async fn deliver_notice(
    targets: &NotifyTargets,
    target: &str,
    notice: &Notice,
) -> Result<JobOutcome> {
    let event = notice.event.as_str();
    let Some(defined) = targets.get(target) else {
        tracing::warn!(target, event, pr = notice.pull_request.0,
                "{} names notify target `{target}`, which this server does not define (WAVEGATE_NOTIFY_{target}_URL): not delivered",
                notice.repository);
        count(target, "undefined");
        return Ok(JobOutcome::Skipped(format!(
            "no notify target {target} on this server"
        )));
    };
    let body = notice.body(defined.format);
    let signature = match (&defined.key, defined.format) {
        (Some(key), NotifyFormat::Json) => Some(notify::signature(key.expose(), body.as_bytes())),
        _ => None,
    };
    let http = reqwest::Client::new();
    let call = format!("POST notify target {target}");
    let sent = send_with_retry(&RetryPolicy::default(), &call, || async {
        let mut request = http
            .post(defined.url.expose())
            .header("content-type", "application/json")
            .header(
                "user-agent",
                concat!("wavegate/", env!("CARGO_PKG_VERSION")),
            )
            .header("x-wavegate-event", event)
            .body(body.clone());
        if let Some(signature) = &signature {
            request = request.header(SIGNATURE_HEADER, signature);
        }
        let response = request
            .send()
            .await
            .map_err(|e| Failure::transient(anyhow!("{}", e.without_url())))?;
        Ok(Reply {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.text().await.unwrap_or_default(),
        })
    })
    .await;
    match sent {
        Ok(reply) if reply.status < 300 => {
            count(target, "delivered");
            tracing::info!(
                target,
                event,
                pr = notice.pull_request.0,
                "notified {target} that {}#{} {event}",
                notice.repository,
                notice.pull_request.0
            );
            Ok(JobOutcome::Done)
        }
        Ok(reply) => {
            count(target, "failed");
            Err(anyhow!(
                "notify target {target} answered {} to a `{event}` notice; it is tried again later",
                reply.status
            ))
        }
        Err(e) => {
            count(target, "failed");
            Err(e.context(format!(
                "notifying {target} of a `{event}` notice; it is tried again later"
            )))
        }
    }
}

fn count(target: &str, outcome: &str) {
    crate::metrics::global()
        .notifications
        .get_or_create(&crate::metrics::NotificationLabels {
            outcome: outcome.to_owned(),
            target: target.to_owned(),
        })
        .inc();
}
