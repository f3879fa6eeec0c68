//! `IssueHandle`: one issue (not a pull request) of one repository in one
//! `Bot`, as `PrHandle` is for a pull request, so that a scenario reads
//! like the issue's conversation: `issue.comment_as("rev-bob", "/apply …")`,
//! `issue.last_reply()`, `issue.is_open()`. A comment is delivered to the
//! bot as the forge would (GitHub or Forgejo, whichever the repository is
//! on) and waits until the bot settled.

use crate::support;
use crate::support::bot::Bot;
use crate::support::fake_forge::{FakeIssue, FORGEJO_BOT_LOGIN};
use crate::support::RepoHandle;

/// One issue of one repository in one bot.
pub struct IssueHandle<'bot> {
    pub bot: &'bot Bot,
    pub repo: RepoHandle,
    pub number: u64,
}

impl Bot {
    /// The handle of issue `number` of `repo`, which the fake forge knows.
    pub fn issue(&self, repo: &RepoHandle, number: u64) -> IssueHandle<'_> {
        self.forge.issue(repo, number);
        IssueHandle {
            bot: self,
            repo: repo.clone(),
            number,
        }
    }
}

impl IssueHandle<'_> {
    /// The issue as the fake forge holds it now.
    pub fn state(&self) -> FakeIssue {
        self.bot.forge.issue(&self.repo, self.number)
    }

    pub fn body(&self) -> String {
        self.state().body
    }

    pub fn is_open(&self) -> bool {
        self.state().open
    }

    /// `login` comments `body`; the bot is told and settles. The comment's id.
    pub async fn comment_as(&self, login: &str, body: &str) -> u64 {
        let id = self
            .bot
            .forge
            .add_comment(&self.repo, self.number, login, body);
        let issue = self.state();
        let delivery = if self.repo.installation.is_some() {
            support::github_issue_comment(&self.repo, &issue, id, login, body)
        } else {
            support::forgejo_issue_comment(&self.repo, &issue, id, login, body)
        };
        self.bot.tell(&self.repo, delivery).await;
        id
    }

    /// `login` comments `body` on the forge, and its webhook is lost: the
    /// bot is not told. The comment's id.
    pub fn comment_unheard(&self, login: &str, body: &str) -> u64 {
        self.bot
            .forge
            .add_comment(&self.repo, self.number, login, body)
    }

    /// The bot's comments on the issue, oldest first.
    pub fn replies(&self) -> Vec<String> {
        self.bot
            .forge
            .comments(&self.repo, self.number)
            .into_iter()
            .filter(|c| c.author_is_bot || c.author == FORGEJO_BOT_LOGIN)
            .map(|c| c.body)
            .collect()
    }

    /// The bot's newest comment on the issue (there must be one).
    pub fn last_reply(&self) -> String {
        self.replies().pop().expect("a reply")
    }

    /// Waits for the bot to reply with `text`; the first such reply.
    pub async fn until_a_reply_says(&self, text: &str) -> String {
        self.bot
            .until(
                &format!("a reply on issue #{} says {text:?}", self.number),
                || async { self.replies().into_iter().find(|r| r.contains(text)) },
            )
            .await
    }

    /// The reactions on comment `comment`, in the order they were made.
    pub fn reactions(&self, comment: u64) -> Vec<String> {
        self.bot.reactions(&self.repo, comment)
    }
}
