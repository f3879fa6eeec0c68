//! What a job works with, in small parts each with one role: the
//! repository on its forge ([`Forge`]), its git mirror and the base
//! branch's rules read from it ([`Mirror`]), the job queue ([`Queue`]) and
//! where commands run ([`Runner`]). A handler's signature names the parts it
//! touches; [`JobCtx`] only carries them to a job's entry point.

use super::{BaseRulesCache, WorkerOptions};
use crate::config::operator::{Imposed, OperatorConfig};
use crate::config::{BaseRules, RepoConfig, CONFIG_FILE};
use crate::forge::client::ForgeClient;
use crate::forge::RepoRef;
use crate::git::{self, Workspace};
use crate::jobs::Task;
use crate::model::{CommitSha, PrNumber, RepoId, UnixMs};
use crate::plan::engine::PlanOptions;
use crate::plan::live::{Console, Hub, Owner};
use crate::plan::runner::Cancel;
use crate::sandbox::Sandbox;
use crate::store::Store;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::Notify;

/// The repository a job is for, on its forge.
#[derive(Clone, Copy)]
pub(super) struct Forge<'a> {
    pub(super) client: &'a ForgeClient,
    pub(super) repo: &'a RepoRef,
    /// Where this server shows its pages, when it does (a check links its
    /// pull request's page).
    pub(super) pages: Option<&'a str>,
}

impl Forge<'_> {
    /// The page of pull request `pr`, when this server shows its pages.
    pub(super) fn pull_page(&self, pr: PrNumber) -> Option<String> {
        super::pull_page_url(self.pages, &self.repo.id, pr)
    }

    /// The line under a comment that links pull request `pr`'s page at
    /// `section` (`run`, `ledger`), when this server shows its pages.
    pub(super) fn page_line(&self, pr: PrNumber, section: &str) -> Option<String> {
        self.pull_page(pr).map(|page| {
            format!("<sub>[On wavegate]({page}#{section}): the run by stage and wave, its gates, the ledger and each command's output, live.</sub>")
        })
    }

    /// Replies `body` on pull request `pr`, with the line that links its
    /// page at `section`.
    pub(super) async fn reply_linked(
        &self,
        pr: PrNumber,
        body: &str,
        section: &str,
    ) -> Result<u64> {
        let body = match self.page_line(pr, section) {
            Some(line) => format!("{body}\n\n{line}"),
            None => body.to_owned(),
        };
        self.client.reply(self.repo, pr, &body).await
    }
}

/// The repository's git mirror on this machine: commits fetched into it,
/// and the base branch's rules read from it once per commit.
#[derive(Clone, Copy)]
pub(super) struct Mirror<'a> {
    forge: Forge<'a>,
    workspace: &'a Workspace,
    rules: &'a BaseRulesCache,
    operator: &'a OperatorConfig,
}

impl Mirror<'_> {
    pub(super) fn path(&self) -> PathBuf {
        self.workspace.mirror_path(&self.forge.repo.id)
    }

    /// What the operator's central configuration imposes on this
    /// repository's `wavegate.toml`.
    pub(super) fn imposed(&self) -> Imposed {
        self.operator.for_repo(&self.forge.repo.id.full_name)
    }

    /// The base branch's rules at `base`, read from the mirror once; an
    /// error (retried with the job) when git cannot read it, never a guess.
    pub(super) async fn base_rules(&self, base: &CommitSha) -> Result<Arc<BaseRules>> {
        let key = (self.forge.repo.id.clone(), base.clone());
        let cached = self
            .rules
            .0
            .lock()
            .expect("base rules lock poisoned")
            .get(&key)
            .cloned();
        if let Some(rules) = cached {
            return Ok(rules);
        }
        let text = self.read_config(base).await.with_context(|| {
            format!(
                "reading the base branch's {CONFIG_FILE} at {}",
                base.short()
            )
        })?;
        let rules = Arc::new(BaseRules::imposed(text.as_deref(), &self.imposed()));
        let mut cache = self.rules.0.lock().expect("base rules lock poisoned");
        if cache.len() >= BaseRulesCache::KEPT {
            cache.clear();
        }
        cache.insert(key, Arc::clone(&rules));
        Ok(rules)
    }

    /// The config at `commit`: `None` when it has none or it does not parse;
    /// an error when git could not read it.
    pub(super) async fn config_at(&self, commit: &CommitSha) -> Result<Option<RepoConfig>> {
        let text = self
            .read_config(commit)
            .await
            .with_context(|| format!("reading {CONFIG_FILE} at {}", commit.short()))?;
        Ok(text.and_then(|t| RepoConfig::parse_with(CONFIG_FILE, &t, &self.imposed()).ok()))
    }

    /// `wavegate.toml` at `commit`, read by git off the runtime so webhook
    /// intake never waits behind it.
    async fn read_config(&self, commit: &CommitSha) -> Result<Option<String>> {
        let mirror = self.path();
        let at = commit.clone();
        git::off_runtime(move || git::read_file(&mirror, at.as_str(), CONFIG_FILE)).await
    }

    /// Fetches `commit` from the repository (with the forge's credentials).
    pub(super) async fn fetch(&self, commit: &CommitSha) -> Result<()> {
        let auth = self.forge.client.git_auth_header(self.forge.repo).await?;
        self.workspace
            .fetch(&git::FetchRequest {
                repo: &self.forge.repo.id,
                sources: vec![(&self.forge.repo.clone_url, commit)],
                auth: auth.as_ref(),
            })
            .await?;
        Ok(())
    }

    /// Fetches `branch` and answers the commit it points at.
    pub(super) async fn fetch_branch(&self, branch: &str) -> Result<CommitSha> {
        let auth = self.forge.client.git_auth_header(self.forge.repo).await?;
        self.workspace
            .fetch_branch(
                &self.forge.repo.id,
                &self.forge.repo.clone_url,
                branch,
                auth.as_ref(),
            )
            .await
    }
}

/// The job queue, and the workers it wakes.
#[derive(Clone, Copy)]
pub(super) struct Queue<'a> {
    store: &'a Store,
    wake: &'a Notify,
}

impl Queue<'_> {
    pub(super) async fn enqueue(&self, task: Task) -> Result<()> {
        self.store.enqueue(task.into_job()).await?;
        self.wake.notify_one();
        Ok(())
    }

    /// Enqueues `task` unless a job of its once-key was enqueued before.
    pub(super) async fn enqueue_once(&self, task: Task) -> Result<()> {
        if self.store.enqueue_once(task.into_job()).await?.is_some() {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// Enqueues `task` to run no earlier than `at` (unix ms).
    pub(super) async fn enqueue_at(&self, task: Task, at: UnixMs) -> Result<()> {
        self.store.enqueue_at(task.into_job(), at).await?;
        Ok(())
    }
}

/// Where a job's commands run, and how.
#[derive(Clone, Copy)]
pub(super) struct Runner<'a> {
    pub(super) sandbox: &'a Arc<Sandbox>,
    /// Stops the job's commands when it is given up.
    cancel: &'a Cancel,
    pub(super) options: &'a WorkerOptions,
    /// The commands running here, for their watchers.
    hub: &'a Hub,
    /// Where the commands' output is kept.
    store: &'a Store,
}

impl Runner<'_> {
    /// Where the commands of `repo`'s pull request `pr` (of its apply run
    /// `run`, when one) are shown live and kept.
    pub(super) fn console(&self, repo: &RepoId, pr: PrNumber, run: Option<i64>) -> Console {
        let owner = Owner {
            repo: repo.clone(),
            pr,
            run,
        };
        Console::new(self.hub.clone(), Arc::new(self.store.clone()), owner)
    }

    /// How the plan engine plans `head` against `base` in `mirror`.
    pub(super) fn plan_options(
        &self,
        mirror: &Mirror<'_>,
        (base, head): (&CommitSha, &CommitSha),
    ) -> PlanOptions {
        let mut options = PlanOptions::new(
            mirror.path(),
            base.as_str(),
            head.as_str(),
            Arc::clone(self.sandbox),
        );
        options.cancel = self.cancel.clone();
        options.repository = Some(mirror.forge.repo.id.full_name.clone());
        options.imposed = Arc::new(mirror.imposed());
        options.concurrency = self.options.plan_concurrency;
        options.heartbeat = self.options.heartbeat;
        options.remote = Some(Arc::new(crate::dispatch::actions::ActionsExecutor {
            store: self.store.clone(),
            client: mirror.forge.client.clone(),
            repo: mirror.forge.repo.clone(),
            reachable: self.options.jobs_url.is_some(),
            run_keys: self.options.run_keys.clone(),
        }));
        options
    }
}

/// The parts of one job, carried to its entry point; borrowed from its
/// worker for the job.
pub(super) struct JobCtx<'a> {
    pub(super) store: &'a Store,
    pub(super) forge: Forge<'a>,
    pub(super) mirror: Mirror<'a>,
    pub(super) queue: Queue<'a>,
    pub(super) runner: Runner<'a>,
    /// The pull request the job is for.
    pub(super) pr: PrNumber,
}

impl<'a> JobCtx<'a> {
    pub(super) fn new(
        worker: &'a super::Worker,
        client: &'a ForgeClient,
        repo: &'a RepoRef,
        pr: PrNumber,
    ) -> Self {
        let forge = Forge {
            client,
            repo,
            pages: worker.options.pages_url.as_deref(),
        };
        Self {
            store: &worker.store,
            forge,
            mirror: Mirror {
                forge,
                workspace: &worker.workspace,
                rules: &worker.base_rules,
                operator: &worker.options.operator,
            },
            queue: Queue {
                store: &worker.store,
                wake: &worker.wake,
            },
            runner: Runner {
                sandbox: &worker.sandbox,
                cancel: &worker.cancel,
                options: &worker.options,
                hub: &worker.console,
                store: &worker.store,
            },
            pr,
        }
    }
}
