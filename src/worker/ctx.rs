//! One job's context: the store, the forge client, the repository and pull
//! request the job is for, the workspace, and the worker's settings. The
//! handlers are methods on it, so they never pass the repository and pull
//! request around; what every handler needs (the base branch's rules at a
//! commit, fetching a commit, publishing the report and check) lives here.

use super::{BaseRulesCache, WorkerOptions};
use crate::config::{BaseRules, CONFIG_FILE};
use crate::forge::client::ForgeClient;
use crate::forge::types::CheckReport;
use crate::forge::RepoRef;
use crate::git::{self, Workspace};
use crate::model::{CommitSha, Digest, PrNumber};
use crate::plan::runner::Cancel;
use crate::sandbox::Sandbox;
use crate::store::{PrReport, ReportStatus, Store};
use anyhow::{Context, Result};
use std::sync::Arc;
use tokio::sync::Notify;

/// What one job's handlers work with; borrowed from its worker for the job.
pub(super) struct JobCtx<'a> {
    pub(super) store: &'a Store,
    pub(super) workspace: &'a Workspace,
    /// Where every plan, apply and outputs command runs.
    pub(super) sandbox: &'a Arc<Sandbox>,
    pub(super) options: &'a WorkerOptions,
    /// Stops the job's commands when it is given up.
    pub(super) cancel: &'a Cancel,
    /// Wakes a worker when this job enqueued another.
    pub(super) wake: &'a Notify,
    base_rules: &'a BaseRulesCache,
    pub(super) client: &'a ForgeClient,
    /// The repository and pull request the job is for.
    pub(super) repo: &'a RepoRef,
    pub(super) pr: PrNumber,
}

impl<'a> JobCtx<'a> {
    pub(super) fn new(
        worker: &'a super::Worker,
        client: &'a ForgeClient,
        repo: &'a RepoRef,
        pr: PrNumber,
    ) -> Self {
        Self {
            store: &worker.store,
            workspace: &worker.workspace,
            sandbox: &worker.sandbox,
            options: &worker.options,
            cancel: &worker.cancel,
            wake: &worker.wake,
            base_rules: &worker.base_rules,
            client,
            repo,
            pr,
        }
    }
}

impl JobCtx<'_> {
    /// What the operator's central configuration imposes on this
    /// repository's `wavegate.toml`.
    pub(super) fn imposed(&self) -> crate::config::operator::Imposed {
        self.options.operator.for_repo(&self.repo.id.full_name)
    }

    /// The base branch's rules at `base`, read from the mirror once; an
    /// error (retried with the job) when git cannot read it, never a guess.
    pub(super) async fn base_rules(&self, base: &CommitSha) -> Result<Arc<BaseRules>> {
        let key = (self.repo.id.clone(), base.clone());
        let cached = self
            .base_rules
            .0
            .lock()
            .expect("base rules lock poisoned")
            .get(&key)
            .cloned();
        if let Some(rules) = cached {
            return Ok(rules);
        }
        let mirror = self.workspace.mirror_path(&self.repo.id);
        let commit = base.clone();
        let text = git::off_runtime(move || git::read_file(&mirror, commit.as_str(), CONFIG_FILE))
            .await
            .with_context(|| {
                format!(
                    "reading the base branch's {CONFIG_FILE} at {}",
                    base.short()
                )
            })?;
        let rules = Arc::new(BaseRules::imposed(text.as_deref(), &self.imposed()));
        let mut cache = self.base_rules.0.lock().expect("base rules lock poisoned");
        if cache.len() >= BaseRulesCache::KEPT {
            cache.clear();
        }
        cache.insert(key, Arc::clone(&rules));
        Ok(rules)
    }

    /// The report comment (its body is the check's summary), the check on
    /// the head, and what the store remembers of both.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn publish(
        &self,
        (pr, head): (PrNumber, &CommitSha),
        check_id: Option<u64>,
        report: CheckReport,
        digest: Option<Digest>,
        status: ReportStatus,
    ) -> Result<()> {
        let known = self.store.pr(&self.repo.id, pr).await?;
        let comment_id = self
            .client
            .upsert_report(
                self.repo,
                pr,
                known.as_ref().and_then(|r| r.report_comment_id),
                crate::report::REPORT_MARKER,
                &report.summary,
            )
            .await?;
        let check_id = check_id.or_else(|| known_check(known.as_ref(), head));
        let check_id = self
            .client
            .publish_check(self.repo, head, check_id, &report)
            .await?;
        self.store
            .set_pr_report(
                &self.repo.id,
                pr,
                PrReport {
                    head_sha: head.clone(),
                    digest,
                    comment_id: Some(comment_id),
                    check_id,
                    status: Some(status),
                },
            )
            .await
    }

    pub(super) async fn fetch_commit(&self, commit: &CommitSha) -> Result<()> {
        let auth = self.client.git_auth_header(self.repo).await?;
        self.workspace
            .fetch(&crate::git::FetchRequest {
                repo: &self.repo.id,
                sources: vec![(&self.repo.clone_url, commit)],
                auth: auth.as_ref(),
            })
            .await?;
        Ok(())
    }
}

/// The check already posted on this head, to be updated rather than repeated.
pub(super) fn known_check(known: Option<&crate::store::PrRecord>, head: &CommitSha) -> Option<u64> {
    known
        .filter(|r| r.report_head.as_ref() == Some(head))
        .and_then(|r| r.check_id)
}
