//! Notifications of apply runs: which of a run's news a `[notify]` target
//! hears of (a gate waiting, a plan refused as moved, denied or held, the
//! run applied or failed; never a stand-down), what a notice says, the key
//! that makes it one delivery whatever retries or replicas do, and how it
//! is written for each format and signed. Pure; the worker enqueues each
//! notice as a job of its own (`Task::Notify`) and delivers it off the run.

use crate::apply::run::News;
use crate::apply::{AttemptRecord, Wait};
use crate::config::repo::NotifyEvent;
use crate::forge::RepoRef;
use crate::model::{CommitSha, Digest, ForgeKind, GateId, MemberId, PrNumber};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The header a JSON delivery's signature travels in, as GitHub's
/// `X-Hub-Signature-256`: `sha256=<hex HMAC-SHA256 of the body>`.
pub(crate) const SIGNATURE_HEADER: &str = "x-wavegate-signature-256";

/// One notification, as a JSON target receives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    pub(crate) event: NotifyEvent,
    /// `moved`, `denied` or `held`, for `refused`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) refused: Option<String>,
    pub(crate) forge: ForgeKind,
    pub(crate) repository: String,
    pub(crate) pull_request: PrNumber,
    /// The pull request's page.
    pub(crate) url: String,
    /// Its page on wavegate (its run by stage and wave, the ledger's
    /// facts), when the server shows its pages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) page: Option<String>,
    /// The apply run; none for drift.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) run: Option<i64>,
    /// `new` or `changed`, for `drift`: `pull_request` is then the drift
    /// issue's number, `url` its page, `merge_commit` the default
    /// branch's commit that was checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) drift: Option<String>,
    /// How often `/retry` started the run over before this.
    pub(crate) retries: u32,
    pub(crate) merge_commit: CommitSha,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) gate: Option<GateId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) digest: Option<Digest>,
    /// The line to comment on the pull request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) approve: Option<String>,
    /// Who may approve (empty: anyone with write access), for a gate that waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) approvers: Option<Vec<String>>,
    /// The members the event is about.
    pub(crate) members: Vec<String>,
    /// What the pull request was told, word for word (Markdown).
    pub(crate) text: String,
}

/// The run a notice is about.
pub(crate) struct RunContext<'a> {
    pub(crate) repo: &'a RepoRef,
    pub(crate) pr: PrNumber,
    pub(crate) run: i64,
    pub(crate) merge_sha: &'a CommitSha,
    pub(crate) record: &'a AttemptRecord,
    /// The pull request's page on this server, when it shows its pages.
    pub(crate) page: Option<&'a str>,
}

/// The events a piece of news is, with the wait each is about: a failure
/// with a new wait is two. Waits that end by themselves (a lock, an earlier
/// apply) and a stand-down are none.
pub(crate) fn events_of(news: &News) -> Vec<(NotifyEvent, Option<&Wait>)> {
    let wait = |w: &'_ Wait| -> Option<NotifyEvent> {
        match w {
            Wait::PrApproval { .. } | Wait::Stage { .. } | Wait::Hook { .. } => {
                Some(NotifyEvent::Waiting)
            }
            Wait::Round { .. } | Wait::Override { .. } | Wait::Holder { .. } => {
                Some(NotifyEvent::Refused)
            }
            Wait::Lock { .. } | Wait::EarlierAttempt { .. } => None,
        }
    };
    match news {
        News::Waits(w) => wait(w).map(|e| (e, Some(w))).into_iter().collect(),
        News::Failed { meanwhile } => std::iter::once((NotifyEvent::Failed, None))
            .chain(
                meanwhile
                    .as_ref()
                    .and_then(|w| wait(w).map(|e| (e, Some(w)))),
            )
            .collect(),
        News::Applied => vec![(NotifyEvent::Applied, None)],
        News::CannotGoOn(_) | News::GaveUp { .. } => vec![(NotifyEvent::Failed, None)],
        News::Ended => Vec::new(),
    }
}

/// The notice of `event` (about `wait`, if any); `text` is what the pull
/// request was told, `approvers` who may approve the wait's gate.
pub(crate) fn notice(
    ctx: &RunContext<'_>,
    (event, wait): (NotifyEvent, Option<&Wait>),
    text: &str,
    approvers: Option<Vec<String>>,
) -> Notice {
    let record = ctx.record;
    let members = match wait {
        Some(wait) => record.members_of_wait(wait).map_or_else(
            || every_member(record),
            |members| members.iter().map(MemberId::to_string).collect(),
        ),
        None if event == NotifyEvent::Failed => {
            crate::apply::run::failed(record).into_iter().collect()
        }
        None => every_member(record),
    };
    let (gate, digest) = match wait {
        Some(
            Wait::PrApproval { gate, digest }
            | Wait::Stage { gate, digest, .. }
            | Wait::Round { gate, digest, .. }
            | Wait::Override { gate, digest, .. }
            | Wait::Hook { gate, digest, .. },
        ) => (Some(gate), Some(digest)),
        _ => (None, None),
    };
    let refused = match wait {
        Some(Wait::Round { .. }) => Some("moved"),
        Some(Wait::Override { .. }) => Some("denied"),
        Some(Wait::Holder { .. }) => Some("held"),
        _ => None,
    };
    Notice {
        event,
        refused: refused.map(str::to_owned),
        forge: ctx.repo.id.forge,
        repository: ctx.repo.id.full_name.clone(),
        pull_request: ctx.pr,
        url: pull_request_url(ctx.repo, ctx.pr),
        page: ctx.page.map(str::to_owned),
        run: Some(ctx.run),
        drift: None,
        retries: record.retries,
        merge_commit: ctx.merge_sha.clone(),
        gate: gate.cloned(),
        digest: digest.cloned(),
        approve: wait.and_then(crate::report::apply::line_to_copy),
        approvers: approvers.filter(|_| wait.is_some_and(Wait::needs_a_person)),
        members,
        text: text.to_owned(),
    }
}

impl Notice {
    /// What makes it one delivery to `target`: the run and how often it was
    /// retried, the event and what it is about (the gate and digest waited
    /// on; a failure's words), the same however often a job says it again;
    /// `commands_seen` keys it `notify:<key>`.
    pub(crate) fn once_key(&self, target: &str) -> String {
        let about = match (&self.gate, &self.digest) {
            (Some(gate), Some(digest)) => format!("{gate}:{digest}"),
            _ => {
                let said = Sha256::digest(format!("{:?}{}", self.members, self.text));
                hex::encode(&said[..8])
            }
        };
        match self.run {
            Some(run) => format!(
                "{target}:run-{run}.{}:{}:{about}",
                self.retries,
                self.event.as_str()
            ),
            None => format!("{target}:drift-{}:{about}", self.pull_request.0),
        }
    }

    /// The one line a chat shows.
    fn headline(&self) -> String {
        let what = match (self.event, self.refused.as_deref()) {
            (NotifyEvent::Waiting, _) => "waits for an approval".to_owned(),
            (NotifyEvent::Refused, Some(why)) => format!("was refused ({why})"),
            (NotifyEvent::Refused, None) => "was refused".to_owned(),
            (NotifyEvent::Applied, _) => "applied".to_owned(),
            (NotifyEvent::Failed, _) => "failed".to_owned(),
            (NotifyEvent::Drift, _) => {
                return format!(
                    "wavegate: {} drift in {} ({})",
                    self.drift.as_deref().unwrap_or("new"),
                    self.repository,
                    self.members.join(", ")
                )
            }
        };
        format!(
            "wavegate: the apply of {}{} {what}",
            self.repository, self.pull_request
        )
    }

    /// The body a target of `format` receives.
    pub(crate) fn body(&self, format: crate::config::settings::NotifyFormat) -> String {
        use crate::config::settings::NotifyFormat;
        match format {
            NotifyFormat::Json => serde_json::to_string(self).expect("a notice serialises"),
            NotifyFormat::Slack => {
                let mut text =
                    format!("*{}* <{}|open the pull request>", self.headline(), self.url);
                if let Some(page) = &self.page {
                    text.push_str(&format!(" · <{page}|its run on wavegate>"));
                }
                if let Some(line) = &self.approve {
                    text.push_str(&format!("\n```{line}```"));
                }
                if let Some(approvers) = &self.approvers {
                    text.push_str(&format!(
                        "\nWho may approve: {}",
                        if approvers.is_empty() {
                            "anyone with write access".to_owned()
                        } else {
                            approvers.join(", ")
                        }
                    ));
                }
                serde_json::json!({ "text": text }).to_string()
            }
        }
    }
}

/// A drift issue's news, as a notice.
pub(crate) struct DriftContext<'a> {
    pub(crate) repo: &'a RepoRef,
    pub(crate) issue: PrNumber,
    pub(crate) commit: &'a CommitSha,
    pub(crate) digest: &'a Digest,
    pub(crate) members: Vec<String>,
    /// The drift was seen before, and moved.
    pub(crate) changed: bool,
    pub(crate) page: Option<&'a str>,
}

/// The notice of new or changed drift; `text` what the issue was told.
pub(crate) fn drift_notice(ctx: &DriftContext<'_>, text: &str) -> Notice {
    Notice {
        event: NotifyEvent::Drift,
        refused: None,
        forge: ctx.repo.id.forge,
        repository: ctx.repo.id.full_name.clone(),
        pull_request: ctx.issue,
        url: issue_url(ctx.repo, ctx.issue),
        page: ctx.page.map(str::to_owned),
        run: None,
        drift: Some(if ctx.changed { "changed" } else { "new" }.to_owned()),
        retries: 0,
        merge_commit: ctx.commit.clone(),
        gate: None,
        digest: Some(ctx.digest.clone()),
        approve: Some(format!("/apply {}", ctx.digest)),
        approvers: None,
        members: ctx.members.clone(),
        text: text.to_owned(),
    }
}

/// `sha256=<hex>`: the HMAC-SHA256 of `body` under `key`.
pub(crate) fn signature(key: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

fn every_member(record: &AttemptRecord) -> Vec<String> {
    record
        .members_in_order()
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// An issue's page, from where the repository is cloned.
fn issue_url(repo: &RepoRef, issue: PrNumber) -> String {
    let base = repo
        .clone_url
        .trim_end_matches('/')
        .trim_end_matches(".git");
    format!("{base}/issues/{}", issue.0)
}

/// The pull request's page, from where the repository is cloned.
fn pull_request_url(repo: &RepoRef, pr: PrNumber) -> String {
    let base = repo
        .clone_url
        .trim_end_matches('/')
        .trim_end_matches(".git");
    match repo.id.forge {
        ForgeKind::GitHub => format!("{base}/pull/{}", pr.0),
        ForgeKind::Forgejo => format!("{base}/pulls/{}", pr.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::MemberState;
    use crate::config::settings::NotifyFormat;
    use crate::model::time::in_tests::unix;
    use crate::model::RepoId;

    fn repo() -> RepoRef {
        RepoRef {
            id: RepoId::new(ForgeKind::GitHub, "acme/infra"),
            forge_id: 1,
            clone_url: "https://github.com/acme/infra.git".into(),
            installation: Some(9),
        }
    }

    fn merge() -> CommitSha {
        CommitSha::parse(&"a".repeat(40)).unwrap()
    }

    fn run_3_of_pr_7<'a>(
        repo: &'a RepoRef,
        merge: &'a CommitSha,
        record: &'a AttemptRecord,
    ) -> RunContext<'a> {
        RunContext {
            repo,
            pr: PrNumber(7),
            run: 3,
            merge_sha: merge,
            record,
            page: None,
        }
    }

    fn stage_wait() -> Wait {
        Wait::Stage {
            stage: "prod".into(),
            gate: "pr-7-prod".parse().unwrap(),
            digest: Digest::repeated('b'),
        }
    }

    #[test]
    fn each_news_is_the_events_a_target_hears_of() {
        let events = |news: &News| -> Vec<NotifyEvent> {
            events_of(news).into_iter().map(|(e, _)| e).collect()
        };
        assert_eq!(events(&News::Waits(stage_wait())), [NotifyEvent::Waiting]);
        let moved = Wait::Round {
            round: 2,
            gate: "pr-7-round-2".parse().unwrap(),
            digest: Digest::repeated('c'),
        };
        assert_eq!(events(&News::Waits(moved)), [NotifyEvent::Refused]);
        let held = Wait::Holder {
            member: "app@dev".into(),
            holder: "run 7".into(),
            until: unix(0),
        };
        assert_eq!(events(&News::Waits(held)), [NotifyEvent::Refused]);
        let lock = Wait::Lock {
            member: "app@dev".into(),
            pr: crate::model::PrNumber(3),
        };
        assert!(events(&News::Waits(lock)).is_empty(), "goes on by itself");
        assert_eq!(
            events(&News::Failed {
                meanwhile: Some(stage_wait())
            }),
            [NotifyEvent::Failed, NotifyEvent::Waiting]
        );
        assert_eq!(events(&News::Applied), [NotifyEvent::Applied]);
        assert_eq!(
            events(&News::CannotGoOn("broken".into())),
            [NotifyEvent::Failed]
        );
        assert!(events(&News::Ended).is_empty(), "nothing for a stand-down");
    }

    #[test]
    fn a_notice_links_the_pull_requests_page_on_wavegate_when_the_server_shows_it() {
        let record = AttemptRecord::default();
        let (repo, merge) = (repo(), merge());
        let page = "https://wavegate.example/repos/github/acme/infra/pulls/7";
        let ctx = RunContext {
            page: Some(page),
            ..run_3_of_pr_7(&repo, &merge, &record)
        };
        let n = notice(&ctx, (NotifyEvent::Applied, None), "Applied", None);
        let json: serde_json::Value = serde_json::from_str(&n.body(NotifyFormat::Json)).unwrap();
        assert_eq!(json["page"], page);
        let slack = n.body(NotifyFormat::Slack);
        assert!(
            slack.contains(&format!(" · <{page}|its run on wavegate>")),
            "{slack}"
        );
        let none = notice(
            &run_3_of_pr_7(&repo, &merge, &record),
            (NotifyEvent::Applied, None),
            "Applied",
            None,
        );
        assert!(!none.body(NotifyFormat::Json).contains("\"page\""));
    }

    #[test]
    fn a_waiting_notice_names_the_gate_the_line_to_copy_and_who_may_approve() {
        let record = AttemptRecord::default();
        let (repo, merge) = (repo(), merge());
        let ctx = run_3_of_pr_7(&repo, &merge, &record);
        let wait = stage_wait();
        let n = notice(
            &ctx,
            (NotifyEvent::Waiting, Some(&wait)),
            "Stage **prod** waits",
            Some(vec!["team:sre".into()]),
        );
        insta::assert_snapshot!(n.body(NotifyFormat::Json), @r#"{"event":"waiting","forge":"github","repository":"acme/infra","pull_request":7,"url":"https://github.com/acme/infra/pull/7","run":3,"retries":0,"merge_commit":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","gate":"pr-7-prod","digest":"sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","approve":"/approve prod sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","approvers":["team:sre"],"members":[],"text":"Stage **prod** waits"}"#);
        insta::assert_snapshot!(n.body(NotifyFormat::Slack), @r#"{"text":"*wavegate: the apply of acme/infra#7 waits for an approval* <https://github.com/acme/infra/pull/7|open the pull request>\n```/approve prod sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb```\nWho may approve: team:sre"}"#);
        assert_eq!(
            n.once_key("INFRA_ALERTS"),
            format!(
                "INFRA_ALERTS:run-3.0:waiting:pr-7-prod:{}",
                Digest::repeated('b')
            )
        );
    }

    #[test]
    fn a_failure_said_again_is_the_same_delivery_and_another_failure_is_not() {
        let mut record = AttemptRecord::default();
        record.set(
            &"app@prod".into(),
            MemberState::Failed {
                error: "quota".into(),
            },
        );
        let (repo, merge) = (repo(), merge());
        let ctx = run_3_of_pr_7(&repo, &merge, &record);
        let failed = |text: &str| notice(&ctx, (NotifyEvent::Failed, None), text, None);
        let first = failed("The apply failed: quota");
        assert_eq!(first.members, ["app@prod"]);
        assert_eq!(first.approvers, None);
        assert_eq!(
            first.once_key("OPS"),
            failed("The apply failed: quota").once_key("OPS")
        );
        assert_ne!(
            first.once_key("OPS"),
            failed("The apply failed: disk full").once_key("OPS")
        );
        assert_ne!(first.once_key("OPS"), first.once_key("CHAT"));
        // The same failure after `/retry` is news again.
        let mut retried = record.clone();
        retried.reset_for_retry();
        let ctx = RunContext {
            record: &retried,
            ..ctx
        };
        let again = notice(
            &ctx,
            (NotifyEvent::Failed, None),
            "The apply failed: quota",
            None,
        );
        assert_ne!(first.once_key("OPS"), again.once_key("OPS"));
    }

    #[test]
    fn the_signature_is_githubs_scheme() {
        // GitHub's documented example: secret "It's a Secret to Everybody",
        // payload "Hello, World!".
        assert_eq!(
            signature("It's a Secret to Everybody", b"Hello, World!"),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
    }
}
