//! Whether an operator may release a member's lock or retry a job, decided
//! over what the store and this host say, with nothing read here: each rule
//! is tested alone, and the handlers only gather the facts.
//!
//! A lock is stale when nothing can be applying its member under it, so
//! releasing it can never let a member be applied twice at once: no apply
//! command of the holder run may still be running (its process, looked at
//! on the host that started it, or else its deadline), and no job of the
//! holder's pull request is queued or running (a job drives the run, and
//! it lets go of its locks itself when its wave stops). What is left is a
//! run that ended, or one whose job is dead or gone. Only a dead job is
//! retried: a queued or running one is already on its way.

use crate::apply::RunStatus;
use crate::model::{MemberId, PrNumber, UnixMs};
use crate::store::{Job, JobId, JobStatus};
use std::fmt;

/// The run holding a member's lock, as it stands now.
#[derive(Debug, Clone)]
pub(crate) struct Holder<'a> {
    pub(crate) run: i64,
    pub(crate) pr: PrNumber,
    pub(crate) status: RunStatus,
    /// The unfinished jobs (queued, running, dead) of its pull request.
    pub(crate) jobs: &'a [Job],
    /// A member of the run whose apply command may still be running, and
    /// until when ([`crate::apply::apply_in_flight`]).
    pub(crate) in_flight: Option<(MemberId, UnixMs)>,
}

/// Why a lock may be released: what the ledger records as its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stale {
    /// The run applied, failed or ended: it holds nothing any more.
    RunOver { run: i64, status: RunStatus },
    /// The job that drove the run gave up.
    JobDead { run: i64, job: JobId },
    /// No job of the run's pull request is queued, running or dead.
    NoJob { run: i64 },
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stale::RunOver { run, status } => write!(f, "run {run} is {}", status.as_str()),
            Stale::JobDead { run, job } => write!(f, "job {job}, which drove run {run}, is dead"),
            Stale::NoJob { run } => write!(f, "no job drives run {run}"),
        }
    }
}

/// Why a lock may not be released now, in the page's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NotStale {
    #[error("{member}'s apply command in run {run} may still be running (until {until} at the latest): the lock stays until it cannot be")]
    Applying {
        run: i64,
        member: MemberId,
        until: UnixMs,
    },
    #[error("job {job} is running run {run} of {pr} now; it lets go of its locks itself when its wave stops")]
    JobRunning { run: i64, pr: PrNumber, job: JobId },
    #[error(
        "job {job} is queued to carry run {run} of {pr} on; it takes or lets go of the lock itself"
    )]
    JobQueued { run: i64, pr: PrNumber, job: JobId },
}

/// Whether the lock `holder` holds is stale (see the module doc).
pub(crate) fn may_release(holder: &Holder<'_>) -> Result<Stale, NotStale> {
    let run = holder.run;
    if let Some((member, until)) = &holder.in_flight {
        return Err(NotStale::Applying {
            run,
            member: member.clone(),
            until: *until,
        });
    }
    let with = |status| holder.jobs.iter().find(|job| job.status == status);
    if let Some(job) = with(JobStatus::Running) {
        return Err(NotStale::JobRunning {
            run,
            pr: holder.pr,
            job: job.id,
        });
    }
    if let Some(job) = with(JobStatus::Queued) {
        return Err(NotStale::JobQueued {
            run,
            pr: holder.pr,
            job: job.id,
        });
    }
    if matches!(
        holder.status,
        RunStatus::Applied | RunStatus::Failed | RunStatus::Ended
    ) {
        return Ok(Stale::RunOver {
            run,
            status: holder.status,
        });
    }
    Ok(match with(JobStatus::Dead) {
        Some(job) => Stale::JobDead { run, job: job.id },
        None => Stale::NoJob { run },
    })
}

/// Why a job may not be retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job {job} is {status}: only a dead job is retried (a queued or running one is on its way, a finished one is done)")]
pub(crate) struct NotDead {
    pub(crate) job: JobId,
    pub(crate) status: JobStatus,
}

/// Whether `job` may be queued again: only once it gave up.
pub(crate) fn may_retry(job: &Job) -> Result<(), NotDead> {
    match job.status {
        JobStatus::Dead => Ok(()),
        status => Err(NotDead {
            job: job.id,
            status,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobKind;

    fn job(id: i64, status: JobStatus) -> Job {
        Job {
            id: JobId(id),
            kind: JobKind::Apply,
            queue_key: "github:acme/infra#7".into(),
            payload: serde_json::Value::Null,
            status,
            attempts: 5,
            max_attempts: 5,
            run_after: UnixMs::from_millis(0),
            lease_owner: None,
            lease_until: None,
            last_error: None,
            outcome: None,
            created_at: UnixMs::from_millis(0),
            updated_at: UnixMs::from_millis(0),
        }
    }

    fn holder(status: RunStatus, jobs: &[Job]) -> Holder<'_> {
        Holder {
            run: 3,
            pr: PrNumber(7),
            status,
            jobs,
            in_flight: None,
        }
    }

    #[test]
    fn a_lock_is_kept_while_an_apply_command_of_its_run_may_still_run() {
        let dead = [job(12, JobStatus::Dead)];
        let mut failed = holder(RunStatus::Failed, &dead);
        failed.in_flight = Some(("app@prod".parse().unwrap(), UnixMs::from_millis(60_000)));
        assert_eq!(
            may_release(&failed),
            Err(NotStale::Applying {
                run: 3,
                member: "app@prod".parse().unwrap(),
                until: UnixMs::from_millis(60_000)
            })
        );
    }

    #[test]
    fn a_lock_is_kept_while_a_job_drives_its_run() {
        let running = [job(12, JobStatus::Dead), job(13, JobStatus::Running)];
        assert_eq!(
            may_release(&holder(RunStatus::Running, &running)),
            Err(NotStale::JobRunning {
                run: 3,
                pr: PrNumber(7),
                job: JobId(13)
            })
        );
    }

    #[test]
    fn a_lock_is_kept_while_a_job_is_queued_to_carry_its_run_on() {
        let queued = [job(13, JobStatus::Queued)];
        let refused = may_release(&holder(RunStatus::Failed, &queued)).unwrap_err();
        assert_eq!(
            refused,
            NotStale::JobQueued {
                run: 3,
                pr: PrNumber(7),
                job: JobId(13)
            }
        );
        assert_eq!(
            refused.to_string(),
            "job 13 is queued to carry run 3 of #7 on; it takes or lets go of the lock itself"
        );
    }

    #[test]
    fn a_lock_of_a_run_that_is_over_is_stale() {
        for status in [RunStatus::Applied, RunStatus::Failed, RunStatus::Ended] {
            assert_eq!(
                may_release(&holder(status, &[])),
                Ok(Stale::RunOver { run: 3, status })
            );
        }
        assert_eq!(
            Stale::RunOver {
                run: 3,
                status: RunStatus::Failed
            }
            .to_string(),
            "run 3 is failed"
        );
    }

    #[test]
    fn a_lock_of_a_run_whose_job_is_dead_is_stale() {
        let dead = [job(12, JobStatus::Dead)];
        let stale = may_release(&holder(RunStatus::Running, &dead)).unwrap();
        assert_eq!(
            stale,
            Stale::JobDead {
                run: 3,
                job: JobId(12)
            }
        );
        assert_eq!(stale.to_string(), "job 12, which drove run 3, is dead");
    }

    #[test]
    fn a_lock_of_a_run_no_job_drives_is_stale() {
        assert_eq!(
            may_release(&holder(RunStatus::Waiting, &[])),
            Ok(Stale::NoJob { run: 3 })
        );
    }

    #[test]
    fn only_a_dead_job_is_retried() {
        assert_eq!(may_retry(&job(12, JobStatus::Dead)), Ok(()));
        for status in [
            JobStatus::Queued,
            JobStatus::Running,
            JobStatus::Done,
            JobStatus::Skipped,
        ] {
            assert_eq!(
                may_retry(&job(12, status)),
                Err(NotDead {
                    job: JobId(12),
                    status
                })
            );
        }
        assert_eq!(
            may_retry(&job(12, JobStatus::Running)).unwrap_err().to_string(),
            "job 12 is running: only a dead job is retried (a queued or running one is on its way, a finished one is done)"
        );
    }
}
