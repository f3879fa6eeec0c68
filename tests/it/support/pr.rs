//! `PrHandle`: one pull request of one repository in one `Bot`, so that a
//! scenario reads like the pull request's conversation:
//! `pr.comment_as("rev-bob", "/approve")`, `pr.report()`, `pr.plan_check()`,
//! `pr.last_reply()`. Every action is delivered to the bot as the forge
//! would (GitHub or Forgejo, whichever the repository is on) and waits until
//! the bot settled.

use crate::support;
use crate::support::bot::{digest_in, Bot};
use crate::support::common::MergeMethod;
use crate::support::fake_forge::{FakePr, FORGEJO_BOT_LOGIN};
use crate::support::RepoHandle;
use wavegate::store::PrRecord;

/// The marker the report comment carries.
const REPORT_MARKER: &str = "<!-- wavegate:report -->";

/// A check of the bot on a commit, as the forge shows it: GitHub's check run
/// (its conclusion, or its status while it has none) or Forgejo's commit
/// status, and its title (GitHub's output title, Forgejo's description).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub state: String,
    pub title: String,
    /// Where it links (GitHub's `details_url`, Forgejo's `target_url`).
    pub link: Option<String>,
}

/// One pull request of one repository in one bot.
pub struct PrHandle<'bot> {
    pub bot: &'bot Bot,
    pub repo: RepoHandle,
    pub number: u64,
    /// The branch its head is (the branch `push` moved it to last).
    pub branch: String,
}

impl Bot {
    /// The handle of PR `number` of `repo`, which the fake forge knows.
    pub fn pr(&self, repo: &RepoHandle, number: u64) -> PrHandle<'_> {
        let branch = self.forge.pr(repo, number).head_ref;
        PrHandle {
            bot: self,
            repo: repo.clone(),
            number,
            branch,
        }
    }

    /// dev-alice opens PR `number` from `branch` onto main; the bot is told
    /// (GitHub or Forgejo) and settles.
    pub async fn opened(&self, repo: &RepoHandle, number: u64, branch: &str) -> PrHandle<'_> {
        self.opened_onto(repo, number, branch, "main").await
    }

    /// dev-alice opens PR `number` from `branch` onto `base`; the bot is told
    /// (GitHub or Forgejo) and settles.
    pub async fn opened_onto(
        &self,
        repo: &RepoHandle,
        number: u64,
        branch: &str,
        base: &str,
    ) -> PrHandle<'_> {
        let pr = self.forge.open_pr(
            repo,
            number,
            &self.rev(branch),
            &self.rev(base),
            branch,
            base,
            "dev-alice",
        );
        let delivery = if repo.installation.is_some() {
            support::github_pull_request("opened", repo, &pr)
        } else {
            support::forgejo_pull_request("opened", repo, &pr)
        };
        self.tell(repo, delivery).await;
        self.pr(repo, number)
    }

    /// dev-alice opens PR `number` from `branch` onto main; the bot is told
    /// and not waited for.
    pub async fn opened_unsettled(
        &self,
        repo: &RepoHandle,
        number: u64,
        branch: &str,
    ) -> PrHandle<'_> {
        let pr = self.forge.open_pr(
            repo,
            number,
            &self.rev(branch),
            &self.rev("main"),
            branch,
            "main",
            "dev-alice",
        );
        let delivery = if repo.installation.is_some() {
            support::github_pull_request("opened", repo, &pr)
        } else {
            support::forgejo_pull_request("opened", repo, &pr)
        };
        self.tell_unsettled(repo, delivery).await;
        self.pr(repo, number)
    }

    /// Delivers `delivery` as `repo`'s forge would, asserts it was
    /// accepted, and settles.
    pub async fn tell(&self, repo: &RepoHandle, delivery: (String, Vec<u8>)) {
        self.tell_unsettled(repo, delivery).await;
        self.settle().await;
    }

    /// Delivers `delivery` as `repo`'s forge would and asserts it was
    /// accepted, without waiting for the bot to settle.
    pub async fn tell_unsettled(&self, repo: &RepoHandle, delivery: (String, Vec<u8>)) {
        let (status, answer) = if repo.installation.is_some() {
            self.deliver_github(delivery).await
        } else {
            self.deliver_forgejo(delivery).await
        };
        assert_eq!(status, 202, "{answer}");
    }
}

/// A GitHub PR from `change` onto main, planned, with `rev-bob`,
/// `rev-carol` and the author allowed to write and `outsider-mallory` to
/// read.
pub async fn planned_pr(bot: &Bot, number: u64) -> PrHandle<'_> {
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    bot.forge.set_permission(&repo, "rev-carol", "write");
    bot.forge.set_permission(&repo, "dev-alice", "write");
    bot.forge.set_permission(&repo, "outsider-mallory", "read");
    bot.opened(&repo, number, "change").await
}

/// A Forgejo PR from `change` onto main, planned, with `rev-bob` allowed to
/// write.
pub async fn planned_pr_on_forgejo(bot: &Bot, number: u64) -> PrHandle<'_> {
    let repo = bot.forgejo_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    bot.opened(&repo, number, "change").await
}

/// `planned_pr`, approved by `rev-bob`.
pub async fn approved_pr(bot: &Bot, number: u64) -> PrHandle<'_> {
    let pr = planned_pr(bot, number).await;
    pr.comment_as("rev-bob", "/approve").await;
    pr
}

/// A PR of `repo` from `branch` onto main, planned, with `rev-bob` allowed
/// to write and approving it.
pub async fn approved_pr_on<'a>(
    bot: &'a Bot,
    repo: &RepoHandle,
    number: u64,
    branch: &str,
) -> PrHandle<'a> {
    bot.forge.set_permission(repo, "rev-bob", "write");
    let pr = bot.opened(repo, number, branch).await;
    pr.comment_as("rev-bob", "/approve").await;
    pr
}

impl PrHandle<'_> {
    fn on_github(&self) -> bool {
        self.repo.installation.is_some()
    }

    /// The pull request as the fake forge holds it now.
    pub fn state(&self) -> FakePr {
        self.bot.forge.pr(&self.repo, self.number)
    }

    /// Its head commit now.
    pub fn head(&self) -> String {
        self.state().head_sha
    }

    /// `login` comments `body`; the bot is told and settles. The comment's id.
    pub async fn comment_as(&self, login: &str, body: &str) -> u64 {
        let id = self
            .bot
            .forge
            .add_comment(&self.repo, self.number, login, body);
        let delivery = if self.on_github() {
            support::github_comment(&self.repo, self.number, id, login, body)
        } else {
            support::forgejo_comment(&self.repo, self.number, id, login, body)
        };
        self.bot.tell(&self.repo, delivery).await;
        id
    }

    /// `login` comments `body` and the bot is told, without waiting for it to
    /// settle (a wait the test makes itself follows). The comment's id.
    pub async fn comment_unsettled(&self, login: &str, body: &str) -> u64 {
        let id = self
            .bot
            .forge
            .add_comment(&self.repo, self.number, login, body);
        let (status, answer) = if self.on_github() {
            let delivery = support::github_comment(&self.repo, self.number, id, login, body);
            self.bot.deliver_github(delivery).await
        } else {
            let delivery = support::forgejo_comment(&self.repo, self.number, id, login, body);
            self.bot.deliver_forgejo(delivery).await
        };
        assert_eq!(status, 202, "{answer}");
        id
    }

    /// `login` comments `body` on the forge, and its webhook is lost: the
    /// bot is not told. The comment's id.
    pub fn comment_unheard(&self, login: &str, body: &str) -> u64 {
        self.bot
            .forge
            .add_comment(&self.repo, self.number, login, body)
    }

    /// `login` submits a review in `state` (`APPROVED`, `CHANGES_REQUESTED`,
    /// `COMMENTED`) on the head, and its webhook is lost. The review's id.
    pub fn review_unheard(&self, login: &str, state: &str) -> u64 {
        self.bot
            .forge
            .add_review(&self.repo, self.number, login, state)
    }

    /// The reactions on comment `comment`, in the order they were made.
    pub fn reactions(&self, comment: u64) -> Vec<String> {
        self.bot.reactions(&self.repo, comment)
    }

    /// The author pushes `branch` onto the pull request, and its webhook is
    /// lost: only the forge knows the new head.
    pub fn push_unheard(&mut self, branch: &str) -> FakePr {
        let pushed = self
            .bot
            .forge
            .push(&self.repo, self.number, &self.bot.rev(branch));
        self.branch = branch.to_owned();
        pushed
    }

    /// The author pushes `branch` onto the pull request; the bot is told and settles.
    pub async fn push(&mut self, branch: &str) -> FakePr {
        let pushed = self.push_unheard(branch);
        let delivery = if self.on_github() {
            support::github_pull_request("synchronize", &self.repo, &pushed)
        } else {
            support::forgejo_pull_request("synchronized", &self.repo, &pushed)
        };
        self.bot.tell(&self.repo, delivery).await;
        pushed
    }

    /// `pusher` pushes `branch` onto the pull request; the bot is told and settles.
    pub async fn push_as(&mut self, branch: &str, pusher: &str) -> FakePr {
        let pushed = self.push_unheard(branch);
        let delivery = if self.on_github() {
            support::github_pushed_by(&self.repo, &pushed, pusher)
        } else {
            support::forgejo_pushed_by(&self.repo, &pushed, pusher)
        };
        self.bot.tell(&self.repo, delivery).await;
        pushed
    }

    /// Merges it (a merge commit) into main; the bot is told and settles.
    pub async fn merge(&self) -> FakePr {
        self.merge_by(MergeMethod::MergeCommit).await
    }

    /// Lands it on main by `method`; the bot is told and settles.
    pub async fn merge_by(&self, method: MergeMethod) -> FakePr {
        let merged = self.merge_unheard(method);
        self.bot.tell(&self.repo, self.closed(&merged)).await;
        merged
    }

    /// Merges it (a merge commit) into main and tells the bot, without
    /// waiting for it to settle (a wait the test makes itself follows).
    pub async fn merge_unsettled(&self) -> FakePr {
        let merged = self.merge_unheard(MergeMethod::MergeCommit);
        self.bot
            .tell_unsettled(&self.repo, self.closed(&merged))
            .await;
        merged
    }

    /// Merges its branch into `base` (a merge commit); the bot is told and settles.
    pub async fn merge_into(&self, base: &str) -> FakePr {
        let message = format!("Merge pull request #{} from {}", self.number, self.branch);
        let sha = self.bot.example.merge_into(base, &self.branch, &message);
        let merged = self.bot.forge.merge(&self.repo, self.number, &sha);
        self.bot.tell(&self.repo, self.closed(&merged)).await;
        merged
    }

    /// Lands it on main by `method` and marks it merged in the forge; the bot
    /// is not told (see `closed`).
    pub fn merge_unheard(&self, method: MergeMethod) -> FakePr {
        self.bot
            .merge_as(method, &self.repo, self.number, &self.branch)
    }

    /// The `closed` delivery of `merged`, as its forge sends it.
    pub fn closed(&self, merged: &FakePr) -> (String, Vec<u8>) {
        if self.on_github() {
            support::github_pull_request("closed", &self.repo, merged)
        } else {
            support::forgejo_pull_request("closed", &self.repo, merged)
        }
    }

    /// The report comment's body (there must be exactly one).
    pub fn report(&self) -> String {
        self.bot.report(&self.repo, self.number).body
    }

    /// The report comment's id.
    pub fn report_id(&self) -> u64 {
        self.bot.report(&self.repo, self.number).id
    }

    /// The digest the report asks to approve.
    pub fn digest(&self) -> String {
        digest_in(&self.report())
    }

    /// The report's section under `### {heading}`, up to the next heading
    /// or the first plan's details.
    pub fn section(&self, heading: &str) -> String {
        section(&self.report(), heading)
            .unwrap_or_else(|| panic!("no `### {heading}` in the report:\n{}", self.report()))
    }

    /// The report's `### Approvals` section.
    pub fn approvals_section(&self) -> String {
        self.section("Approvals")
    }

    /// The report's apply section (`## Apply on merge commit …`), up to the
    /// plan report.
    pub fn apply_section(&self) -> String {
        let report = self.report();
        let start = report
            .find("## Apply on merge commit")
            .unwrap_or_else(|| panic!("no apply section in the report:\n{report}"));
        let rest = &report[start..];
        let end = rest.find("\n## wavegate plan").unwrap_or(rest.len());
        rest[..end].trim_end().to_owned()
    }

    /// The apply section without what each member's apply printed (its
    /// `<details>` "What … printed" blocks): the run's own account.
    pub fn apply_summary(&self) -> String {
        let mut section = self.apply_section();
        while let Some(start) = section.find("\n\n<details><summary>What ") {
            let end = section[start..]
                .find("</details>")
                .map_or(section.len(), |e| start + e + "</details>".len());
            section.replace_range(start..end, "");
        }
        section
    }

    /// The apply section's heading (the run's state) and its table of
    /// members (each member's state).
    pub fn apply_table(&self) -> String {
        let section = self.apply_section();
        let mut lines = section.lines();
        let heading = lines.next().unwrap_or_default();
        let table: Vec<&str> = lines.filter(|l| l.starts_with('|')).collect();
        format!("{heading}\n\n{}", table.join("\n"))
    }

    /// Waits for the bot to reply with `text` (the work goes on without the
    /// test waiting on it); the first such reply.
    pub async fn until_a_reply_says(&self, text: &str) -> String {
        self.bot
            .until(
                &format!("a reply on #{} says {text:?}", self.number),
                || async { self.replies().into_iter().find(|r| r.contains(text)) },
            )
            .await
    }

    /// The bot's replies (its comments other than the report), oldest first.
    pub fn replies(&self) -> Vec<String> {
        self.bot
            .forge
            .comments(&self.repo, self.number)
            .into_iter()
            .filter(|c| c.author_is_bot || c.author == FORGEJO_BOT_LOGIN)
            .filter(|c| !c.body.contains(REPORT_MARKER))
            .map(|c| c.body)
            .collect()
    }

    /// The bot's replies that say `text`, oldest first.
    pub fn replies_saying(&self, text: &str) -> Vec<String> {
        let mut replies = self.replies();
        replies.retain(|r| r.contains(text));
        replies
    }

    /// The bot's newest reply (there must be one).
    pub fn last_reply(&self) -> String {
        self.replies().pop().expect("a reply")
    }

    /// The `wavegate/plan` check on the head.
    pub fn plan_check(&self) -> Check {
        self.check_on(&self.head(), "wavegate/plan")
    }

    /// The `wavegate/apply` check on the merge commit.
    pub fn apply_check(&self) -> Check {
        let merged = self.state();
        let sha = merged.merge_sha.as_deref().expect("merged");
        self.check_on(sha, "wavegate/apply")
    }

    /// The newest check named `name` on `sha`.
    pub fn check_on(&self, sha: &str, name: &str) -> Check {
        if self.on_github() {
            let run = self
                .bot
                .check_runs_named(&self.repo, sha, name)
                .pop()
                .unwrap_or_else(|| panic!("a {name} check on {sha}"));
            Check {
                state: run.conclusion.unwrap_or(run.status),
                title: run.output["title"].as_str().unwrap_or_default().to_owned(),
                link: run.details_url,
            }
        } else {
            let status = self
                .bot
                .statuses_named(&self.repo, sha, name)
                .pop()
                .unwrap_or_else(|| panic!("a {name} status on {sha}"));
            Check {
                state: status.state,
                title: status.description,
                link: status.target_url.filter(|url| !url.is_empty()),
            }
        }
    }

    /// The state of the `wavegate/plan` check on the head.
    pub fn plan_state(&self) -> String {
        self.plan_check().state
    }

    /// Waits until the plan check on the head is `state` (the bot took
    /// something up without being told), then settles.
    pub async fn until_checked(&self, what: &str, state: &str) {
        self.bot
            .until(what, || async {
                (self.plan_state() == state).then_some(())
            })
            .await;
        self.bot.settle().await;
    }

    /// Waits until comment `id` has a reaction (the bot took it up without
    /// being told), then settles.
    pub async fn until_reacted(&self, what: &str, id: u64) {
        self.bot
            .until(what, || async {
                (!self.reactions(id).is_empty()).then_some(())
            })
            .await;
        self.bot.settle().await;
    }

    /// What the store keeps of it.
    pub async fn record(&self) -> PrRecord {
        self.bot
            .store()
            .await
            .pr(
                &self.repo.repo_ref().id,
                wavegate::model::PrNumber(self.number),
            )
            .await
            .unwrap()
            .expect("the store knows the pull request")
    }
}

/// The digest a reply asks to approve (the last word of its last `/approve` line).
pub fn asked_digest(reply: &str) -> String {
    let line = reply
        .lines()
        .rfind(|l| l.starts_with("/approve"))
        .unwrap_or_else(|| panic!("no /approve line in {reply}"));
    line.rsplit(' ').next().unwrap().to_owned()
}

/// The part of `report` under `### {heading}`, up to the next `##`/`###`
/// heading or `<details>`, trimmed.
pub fn section(report: &str, heading: &str) -> Option<String> {
    let start = report.find(&format!("### {heading}\n"))?;
    let rest = &report[start..];
    let end = rest[4..]
        .find("\n### ")
        .into_iter()
        .chain(rest[4..].find("\n## "))
        .chain(rest[4..].find("\n<details"))
        .min()
        .map_or(rest.len(), |e| e + 4);
    Some(rest[..end].trim_end().to_owned())
}
