//! `[policy] digest_over = "changing"` on the base: the set digests leave
//! out members whose plan changes nothing, so such a member moving does not
//! move the digest an approval names (a plan of the same head again, a
//! member planned on the merge commit), and the report says which members
//! the digest binds.

use crate::support::bot::*;
use crate::support::redact::redact;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_digest_over_changing_a_no_op_member_moving_keeps_the_approval() {
    let bot = Bot::start().await;
    bot.edit_base_config("required = 1", "required = 1\ndigest_over = \"changing\"");
    // The change also touches the network's directory: it plans, and changes nothing.
    bot.example.branch(
        "touch-network",
        "change",
        &[("infra/network/OWNERS", Some("network-team\n"))],
    );
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    bot.forge.set_permission(&repo, "dev-alice", "write");
    let pr = bot.opened(&repo, 61, "touch-network").await;
    let approve = pr.section("Approve");
    insta::assert_snapshot!(redact(&approve.lines().take(3).collect::<Vec<_>>().join("\n")), @r#"
    ### Approve

    Change-set digest: it binds every member above that changes something (the base's `digest_over = "changing"` leaves out `database@dev`, `database@prod`, `network@dev`, `network@prod`, whose plans change nothing): each one's status, its plan (entries, outputs, policy denials; the summary only of an opaque plan) and the input values it read. Not bound: summaries of other plans and what the commands printed (see `docs/plan-files.md`, "Digests").
    "#);
    let digest = pr.digest();
    pr.comment_as("rev-bob", "/approve").await;
    assert_eq!(pr.plan_check().state, "success");

    // The deployed network moves where its plans change nothing (a computed
    // attribute), and `/plan` plans the same head again.
    for stage in ["dev", "prod"] {
        bot.drift(stage, "network", "aws_vpc.main", "arn", json!("arn:moved"));
    }
    pr.comment_as("dev-alice", "/plan").await;
    assert_eq!(pr.digest(), digest, "the digest did not move");
    assert_eq!(
        pr.plan_check().state,
        "success",
        "the approval still counts: {}",
        pr.approvals_section()
    );

    pr.merge().await;
    let section = pr.apply_section();
    assert!(
        section.contains("| dev | 1 | `network@dev` | applied (nothing to change) |"),
        "{section}"
    );
    assert!(
        bot.applies_run().contains(&"app@dev".to_owned()),
        "{section}"
    );
}
