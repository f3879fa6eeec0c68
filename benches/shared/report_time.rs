//! What the benches that time a pull request's report share: from the
//! `opened` delivery to the report with its digest on the fake forge.

use crate::support::bot::Bot;
use crate::support::{self, RepoHandle};
use std::time::{Duration, Instant};

/// Opens PR #`number` from `branch` on GitHub and answers how long from
/// its `opened` delivery until its report, with its digest, was posted;
/// fails after `within` with the server's log.
pub async fn time_to_report(
    bot: &Bot,
    repo: &RepoHandle,
    number: u64,
    branch: &str,
    within: Duration,
) -> Duration {
    let pr = bot.open_pr(repo, number, branch);
    let started = Instant::now();
    let (status, answer) = bot
        .deliver_github(support::github_pull_request("opened", repo, &pr))
        .await;
    assert_eq!(status, 202, "{answer}");
    loop {
        let posted = bot
            .forge
            .comments(repo, number)
            .iter()
            .any(|c| c.body.contains("<!-- wavegate:report -->") && c.body.contains("sha256:"));
        if posted {
            let took = started.elapsed();
            bot.settle().await;
            return took;
        }
        assert!(
            started.elapsed() < within,
            "no report with a digest; server log:\n{}",
            bot.log()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
