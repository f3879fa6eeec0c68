//! What work an event causes: the pure decision the webhook intake records
//! together with the delivery, and the job payload the worker reads back.

use crate::forge::listing::ListedReview;
use crate::forge::{Event, PrAction, PullRequest, RepoRef, ReviewState};
use crate::model::{CommitSha, JobKind, PrNumber, RepoId, StageName, UnixMs, User};
use crate::notify::Notice;
use crate::store::{NewJob, Once, OnceSource, PrHead};
use serde::{Deserialize, Serialize};

/// Attempts before a job is dead-lettered with its last error.
pub(crate) const MAX_ATTEMPTS: u32 = 5;

/// A job's payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "task", rename_all = "kebab-case")]
pub enum Task {
    /// Plan the pull request at the head the event named.
    Plan { repo: RepoRef, pr: PullRequest },
    /// Plan the pull request at whatever its head is now (a re-run was
    /// asked for): everything, or only what `only` names.
    Replan {
        repo: RepoRef,
        pr: PrNumber,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        only: Vec<crate::model::PlanTarget>,
    },
    /// Read a new comment for commands.
    Comment {
        repo: RepoRef,
        pr: PrNumber,
        comment_id: u64,
        author: User,
        body: String,
        written_at: Option<UnixMs>,
    },
    /// A merged pull request: start its apply run (once) and drive it.
    Merged {
        repo: RepoRef,
        pr: PullRequest,
        merge_sha: CommitSha,
    },
    /// Drive the pull request's apply run on (an approval, an override, a
    /// released lock or `/retry` let it go further).
    Apply { repo: RepoRef, pr: PrNumber },
    /// A review that may approve or revoke (`policy.review_approvals`).
    Review {
        repo: RepoRef,
        pr: PrNumber,
        review_id: u64,
        author: User,
        state: ReviewState,
        commit: Option<CommitSha>,
        /// When it was submitted (unix ms), when known: an approving review
        /// counts only at a run's gate that waited before it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        submitted_at: Option<UnixMs>,
    },
    /// Tell a `[notify]` target (by its name in the server's variables)
    /// of a run's news; a queue of its own, so a slow receiver holds no run up.
    Notify {
        repo: RepoRef,
        pr: PrNumber,
        target: String,
        notice: Box<Notice>,
    },
    /// Read the default branch's drift schedule into the store.
    DriftScan { repo: RepoRef },
    /// Plan one stage of the default branch's head against what is
    /// deployed, and tell its drift in issues.
    Drift { repo: RepoRef, stage: StageName },
}

impl Task {
    pub(crate) fn kind(&self) -> JobKind {
        match self {
            Task::Plan { .. } => JobKind::Plan,
            Task::Replan { .. } => JobKind::Replan,
            Task::Comment { .. } => JobKind::Comment,
            Task::Review { .. } => JobKind::Review,
            Task::Merged { .. } => JobKind::Merged,
            Task::Apply { .. } => JobKind::Apply,
            Task::Notify { .. } => JobKind::Notify,
            Task::DriftScan { .. } | Task::Drift { .. } => JobKind::Drift,
        }
    }

    pub(crate) fn repo(&self) -> &RepoRef {
        match self {
            Task::Plan { repo, .. }
            | Task::Replan { repo, .. }
            | Task::Comment { repo, .. }
            | Task::Review { repo, .. }
            | Task::Merged { repo, .. }
            | Task::Apply { repo, .. }
            | Task::Notify { repo, .. }
            | Task::DriftScan { repo }
            | Task::Drift { repo, .. } => repo,
        }
    }

    /// The pull request the task is for; `PrNumber(0)` for a repository's
    /// drift jobs, which are for none.
    pub(crate) fn pr_number(&self) -> PrNumber {
        match self {
            Task::DriftScan { .. } | Task::Drift { .. } => PrNumber(0),
            Task::Plan { pr, .. } | Task::Merged { pr, .. } => pr.number,
            Task::Replan { pr, .. }
            | Task::Comment { pr, .. }
            | Task::Review { pr, .. }
            | Task::Apply { pr, .. }
            | Task::Notify { pr, .. } => *pr,
        }
    }

    pub fn into_job(self) -> NewJob {
        NewJob {
            kind: self.kind(),
            queue_key: match &self {
                Task::Notify { repo, target, .. } => format!("notify:{}:{target}", repo.id),
                Task::DriftScan { repo } | Task::Drift { repo, .. } => {
                    format!("drift:{}", repo.id)
                }
                _ => queue_key(&self.repo().id, self.pr_number()),
            },
            payload: serde_json::to_value(&self).expect("a task always serialises"),
            max_attempts: MAX_ATTEMPTS,
            once: self.once(),
        }
    }

    /// Comments and review states run once whichever path finds them first.
    /// A review without its id (Forgejo's webhook names none: 0) has no
    /// key here; its job finds it on the forge ([`webhook_review`]) and
    /// checks and records it there.
    fn once(&self) -> Option<Once> {
        let (repo, pr, source) = match self {
            Task::Comment {
                repo,
                pr,
                comment_id,
                ..
            } => (repo, pr, OnceSource::Comment(*comment_id)),
            Task::Review {
                repo,
                pr,
                review_id,
                state,
                ..
            } if *review_id != 0 => (repo, pr, OnceSource::Review(*review_id, *state)),
            Task::Notify {
                repo,
                pr,
                target,
                notice,
            } => (repo, pr, OnceSource::Notify(notice.once_key(target))),
            _ => return None,
        };
        Some(Once {
            repo: repo.id.clone(),
            pr: *pr,
            source,
        })
    }
}

/// The review a webhook without a review id (Forgejo's) was about, among
/// the pull request's listed reviews: the newest by `author` in `state`,
/// given at `commit` when the webhook named one.
pub(crate) fn webhook_review<'a>(
    listed: &'a [ListedReview],
    author: &User,
    state: ReviewState,
    commit: Option<&CommitSha>,
) -> Option<&'a ListedReview> {
    listed
        .iter()
        .filter(|review| {
            review.author.login == author.login
                && review.state == state
                && commit.is_none_or(|commit| review.commit.as_ref() == Some(commit))
        })
        .max_by_key(|review| (review.submitted_at, review.id))
}

/// Jobs with one key run one at a time: one pull request's jobs, in order.
pub(crate) fn queue_key(repo: &RepoId, pr: PrNumber) -> String {
    format!("{}{}", queue_key_prefix(repo), pr.0)
}

/// What the queue keys of every pull request of `repo` start with.
pub(crate) fn queue_key_prefix(repo: &RepoId) -> String {
    format!("{}:{}#", repo.forge, repo.full_name)
}

/// What an event means for the store: the job it causes, if any, and the
/// pull request's new head, if it names one.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Consequence {
    pub(crate) task: Option<Task>,
    pub(crate) head: Option<PrHead>,
}

pub(crate) fn consequence(event: &Event) -> Consequence {
    match event {
        Event::PullRequest {
            repo,
            pr,
            action,
            sender,
        } => {
            let open = !matches!(action, PrAction::Closed { .. });
            // Who pushed the head is known from a push only (an opened pull
            // request's head is its author's, whom the policy treats so anyway).
            let pusher = match action {
                PrAction::Pushed => sender.clone(),
                _ => None,
            };
            let head = Some(PrHead {
                repo: repo.id.clone(),
                pr: pr.number,
                head_sha: pr.head_sha.clone(),
                base_ref: pr.base_ref.clone(),
                open,
                pusher,
            });
            let task = match action {
                PrAction::Opened
                | PrAction::Reopened
                | PrAction::Pushed
                | PrAction::BaseChanged => Some(Task::Plan {
                    repo: repo.clone(),
                    pr: pr.clone(),
                }),
                PrAction::Closed {
                    merged: true,
                    merge_sha: Some(merge_sha),
                } => Some(Task::Merged {
                    repo: repo.clone(),
                    pr: pr.clone(),
                    merge_sha: merge_sha.clone(),
                }),
                PrAction::Closed { .. } => None,
            };
            Consequence { task, head }
        }
        Event::CheckRunRerequested { repo, prs, .. } => Consequence {
            task: prs.first().map(|pr| Task::Replan {
                repo: repo.clone(),
                pr: *pr,
                only: Vec::new(),
            }),
            head: None,
        },
        // A bot's comment is never a command (its own reports included).
        Event::Comment { author, .. } if author.is_bot => Consequence::default(),
        Event::Comment {
            repo,
            pr,
            comment_id,
            author,
            body,
            written_at,
        } => Consequence {
            task: Some(Task::Comment {
                repo: repo.clone(),
                pr: *pr,
                comment_id: *comment_id,
                author: author.clone(),
                body: body.clone(),
                written_at: *written_at,
            }),
            head: None,
        },
        Event::Review {
            repo,
            pr,
            review_id,
            author,
            state: state @ (ReviewState::Approved | ReviewState::Dismissed),
            commit,
            submitted_at,
        } => Consequence {
            task: Some(Task::Review {
                repo: repo.clone(),
                pr: *pr,
                review_id: *review_id,
                author: author.clone(),
                state: *state,
                commit: commit.clone(),
                submitted_at: *submitted_at,
            }),
            head: None,
        },
        Event::Review { .. } | Event::Installation { .. } | Event::Ping => Consequence::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::time::in_tests::unix;
    use crate::model::{CommitSha, ForgeKind, User};

    fn repo() -> RepoRef {
        RepoRef {
            id: RepoId::new(ForgeKind::GitHub, "acme/infra"),
            forge_id: 1,
            clone_url: "file:///tmp/infra".into(),
            installation: Some(9),
        }
    }

    fn pr(head: char) -> PullRequest {
        PullRequest {
            number: PrNumber(42),
            title: "t".into(),
            author: User {
                id: 1,
                login: "dev".into(),
                is_bot: false,
            },
            head_sha: CommitSha::parse(&head.to_string().repeat(40)).unwrap(),
            head_ref: "feature".into(),
            base_ref: "main".into(),
            base_sha: CommitSha::parse(&"b".repeat(40)).unwrap(),
            from_fork: false,
            head_clone_url: None,
        }
    }

    #[test]
    fn opening_and_pushing_plan_and_move_the_head() {
        for action in [
            PrAction::Opened,
            PrAction::Reopened,
            PrAction::Pushed,
            PrAction::BaseChanged,
        ] {
            let c = consequence(&Event::PullRequest {
                repo: repo(),
                pr: pr('a'),
                action: action.clone(),
                sender: None,
            });
            let job = c.task.expect("a plan").into_job();
            assert_eq!(
                (job.kind.as_str(), job.queue_key.as_str()),
                ("plan", "github:acme/infra#42")
            );
            let head = c.head.expect("a head");
            assert!(head.open, "{action:?}");
            assert_eq!(head.head_sha.as_str(), "a".repeat(40));
        }
    }

    #[test]
    fn closing_plans_nothing_and_marks_the_pr_closed() {
        let c = consequence(&Event::PullRequest {
            repo: repo(),
            pr: pr('a'),
            action: PrAction::Closed {
                merged: false,
                merge_sha: None,
            },
            sender: None,
        });
        assert_eq!(c.task, None);
        assert!(!c.head.unwrap().open);
    }

    #[test]
    fn a_merge_starts_an_apply_run_in_the_pull_requests_queue() {
        let merge = CommitSha::parse(&"d".repeat(40)).unwrap();
        let c = consequence(&Event::PullRequest {
            repo: repo(),
            pr: pr('a'),
            action: PrAction::Closed {
                merged: true,
                merge_sha: Some(merge.clone()),
            },
            sender: None,
        });
        let task = c.task.expect("an apply run");
        assert_eq!(
            task,
            Task::Merged {
                repo: repo(),
                pr: pr('a'),
                merge_sha: merge
            }
        );
        let job = task.into_job();
        assert_eq!(
            (job.kind.as_str(), job.queue_key.as_str()),
            ("merged", "github:acme/infra#42")
        );
        assert!(!c.head.unwrap().open);
    }

    #[test]
    fn a_rerequested_check_replans_the_pr_at_its_current_head() {
        let c = consequence(&Event::CheckRunRerequested {
            repo: repo(),
            head_sha: CommitSha::parse(&"c".repeat(40)).unwrap(),
            prs: vec![PrNumber(42)],
        });
        assert_eq!(
            c.task,
            Some(Task::Replan {
                repo: repo(),
                pr: PrNumber(42),
                only: Vec::new(),
            })
        );
        assert_eq!(c.head, None);
    }

    #[test]
    fn pings_and_installations_cause_no_work() {
        assert_eq!(consequence(&Event::Ping), Consequence::default());
    }

    fn listed(id: u64, login: &str, state: ReviewState, head: char, at: UnixMs) -> ListedReview {
        ListedReview {
            id,
            author: User {
                id: 7,
                login: login.into(),
                is_bot: false,
            },
            ours: false,
            state,
            commit: Some(CommitSha::parse(&head.to_string().repeat(40)).unwrap()),
            submitted_at: Some(at),
        }
    }

    #[test]
    fn a_review_webhook_without_an_id_is_matched_to_the_newest_such_review() {
        let bob = User {
            id: 7,
            login: "rev-bob".into(),
            is_bot: false,
        };
        let head = CommitSha::parse(&"a".repeat(40)).unwrap();
        let reviews = [
            listed(3, "rev-bob", ReviewState::Approved, 'a', unix(1_000)),
            listed(4, "rev-bob", ReviewState::Approved, 'a', unix(2_000)),
            listed(5, "rev-bob", ReviewState::Approved, 'c', unix(3_000)),
            listed(6, "rev-carol", ReviewState::Approved, 'a', unix(4_000)),
            listed(7, "rev-bob", ReviewState::Commented, 'a', unix(5_000)),
        ];
        let found = webhook_review(&reviews, &bob, ReviewState::Approved, Some(&head));
        assert_eq!(found.map(|r| r.id), Some(4));
        let found = webhook_review(&reviews, &bob, ReviewState::Dismissed, Some(&head));
        assert_eq!(found, None);
    }

    #[test]
    fn a_review_without_an_id_has_no_once_key_and_one_with_an_id_has() {
        let review = |review_id| Task::Review {
            repo: repo(),
            pr: PrNumber(42),
            review_id,
            author: User {
                id: 7,
                login: "rev-bob".into(),
                is_bot: false,
            },
            state: ReviewState::Approved,
            commit: None,
            submitted_at: None,
        };
        assert_eq!(review(0).into_job().once, None);
        assert_eq!(
            review(9).into_job().once.map(|o| o.source),
            Some(OnceSource::Review(9, ReviewState::Approved))
        );
    }

    #[test]
    fn a_task_survives_the_round_trip_through_the_queue() {
        let task = Task::Plan {
            repo: repo(),
            pr: pr('d'),
        };
        let job = task.clone().into_job();
        let back: Task = serde_json::from_value(job.payload).unwrap();
        assert_eq!(back, task);
    }
}
