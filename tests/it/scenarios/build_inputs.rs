//! Build inputs: a component reads an artifact a build in the same change
//! publishes (`inputs = { image = "build:image.digest" }`). The plan a
//! person approves lists it as a build input, never an unknown one, and
//! leaves its value to the build; at apply the member reads what the build
//! published, and nothing waits or opens a round for it.

use crate::support::bot::*;

/// A branch on main adding the build `image` (kind build; its digest is
/// known once it applies) and `web`, which runs that image.
fn branch_with_build(bot: &Bot, name: &str, reference: &str) {
    let config = bot.example.read("main", "wavegate.toml").replace(
        "[policy]",
        &format!(
            "[[component]]\nname = \"image\"\nkind = \"build\"\ndir = \"build/image\"\nstages = [\"dev\"]\n\n\
             [[component]]\nname = \"web\"\ndir = \"infra/web\"\ndepends_on = [\"image\"]\ninputs = {{ image = \"{reference}\" }}\nstages = [\"dev\"]\n\n[policy]"
        ),
    );
    bot.example.branch(
        name,
        "main",
        &[
            ("wavegate.toml", Some(&config)),
            (
                "build/image/resources.json",
                Some(r#"{"aws_ecr_image.web": {"repository": "web", "tag": "v2", "_computed": ["digest"]}}"#),
            ),
            (
                "build/image/outputs.json",
                Some(r#"{"digest": "aws_ecr_image.web.digest"}"#),
            ),
            (
                "infra/web/resources.json",
                Some(r#"{"aws_ecs_service.web": {"name": "web-${stage}", "image": "${input.image}"}}"#),
            ),
            ("infra/web/outputs.json", Some("{}")),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_input_is_left_to_the_build_and_read_from_what_it_published() {
    let bot = Bot::start().await;
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    branch_with_build(&bot, "image", "build:image.digest");
    let pr = bot.opened(&repo, 91, "image").await;
    let report = pr.report();
    assert!(
        report.contains("- `web@dev` input `image` ← `build:image.digest` is a build input: the build image@dev publishes it when it applies; its own plan binds it; approving this plan does not fix its value"),
        "{report}"
    );
    assert!(
        !report.contains("`web@dev` input `image` ← `image.digest` is unknown"),
        "{report}"
    );
    pr.comment_as("rev-bob", "/approve").await;

    pr.merge().await;
    assert_eq!(bot.applies_run(), ["image@dev", "web@dev"]);
    let section = pr.apply_section();
    assert_eq!(pr.apply_check().state, "success", "{section}");
    assert!(
        !section.contains("- Round "),
        "no round for a build input: {section}"
    );
    let deployed = bot.deployed("dev", "web");
    let published = bot.deployed("dev", "image");
    assert_eq!(
        deployed["aws_ecs_service.web"]["image"], published["aws_ecr_image.web"]["digest"],
        "web runs the image the build published"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_read_as_a_plain_input_is_unknown_and_filled_in_by_a_round() {
    let bot = Bot::start().await;
    let repo = bot.github_repo();
    bot.forge.set_permission(&repo, "rev-bob", "write");
    branch_with_build(&bot, "plain", "image.digest");
    let pr = bot.opened(&repo, 92, "plain").await;
    assert!(
        pr.report()
            .contains("- `web@dev` input `image` ← `image.digest` is unknown: image@dev knows digest only after it applies"),
        "{}",
        pr.report()
    );
    pr.comment_as("rev-bob", "/approve").await;
    pr.merge().await;
    assert_eq!(bot.applies_run(), ["image@dev", "web@dev"]);
    assert!(
        pr.apply_section().contains("(filled in `web@dev.image`)"),
        "{}",
        pr.apply_section()
    );
}
