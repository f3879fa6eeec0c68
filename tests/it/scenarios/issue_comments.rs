//! Comments on an issue that is not a pull request: the bot is told only
//! of those with an `/apply` line, on both forges, and answers on the issue.

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

        let plain = issue.comment_as("rev-bob", "Looking into it.\n/help").await;
        assert_eq!(bot.jobs_of(JobKind::Comment).await.len(), commands_before);
        assert!(issue.reactions(plain).is_empty());
        assert!(issue.replies().is_empty());

        // `/help` beside it, so that the bot says something on the issue
        // whatever it makes of `/apply` there.
        let apply = issue
            .comment_as("rev-bob", "/apply sha256:0123\n/help")
            .await;
        assert_eq!(
            bot.jobs_of(JobKind::Comment).await.len(),
            commands_before + 1
        );
        let help = issue.until_a_reply_says("/approve").await;
        assert_eq!(issue.last_reply(), help);
        assert!(issue.reactions(apply).contains(&"eyes".to_owned()));
        assert!(issue.is_open());
        assert_eq!(
            (issue.state().author.as_str(), issue.body()),
            ("dev-alice", String::new())
        );
    }
    bot.assert_conformant();
}
