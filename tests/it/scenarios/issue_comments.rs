//! Comments on an issue that is not a pull request: the bot is told only
//! of those with an `/apply` line, on both forges, and one on an issue that
//! is none of its drift issues changes nothing and says nothing.

use crate::support::bot::Bot;
use wavegate::model::JobKind;

#[tokio::test]
async fn only_an_apply_comment_on_an_issue_reaches_the_bot() {
    let bot = Bot::start().await;
    for repo in [bot.github_repo(), bot.forgejo_repo()] {
        let opened = bot
            .forge
            .open_issue(&repo, "dev-alice", "Something is off", "");
        let issue = bot.issue(&repo, opened.number);
        let commands_before = bot.jobs_of(JobKind::Comment).await.len();

        let plain = issue.comment_as("rev-bob", "Looking into it.\n/plan").await;
        assert_eq!(bot.jobs_of(JobKind::Comment).await.len(), commands_before);
        assert!(issue.reactions(plain).is_empty());
        assert!(issue.replies().is_empty());

        let apply = issue
            .comment_as("rev-bob", "/apply sha256:0123456789ab")
            .await;
        let taken = bot.jobs_of(JobKind::Comment).await;
        assert_eq!(taken.len(), commands_before + 1);
        assert_eq!(
            taken.last().unwrap().outcome.as_deref(),
            Some("a comment on an issue that is no drift issue of wavegate's")
        );
        assert!(issue.reactions(apply).is_empty());
        assert!(issue.replies().is_empty());
        assert!(issue.is_open());
        assert_eq!(
            (issue.state().author.as_str(), issue.body()),
            ("dev-alice", String::new())
        );
    }
    bot.assert_conformant();
}
