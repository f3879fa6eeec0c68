//! A pull request cannot forge the report (issue 36). Its plan script
//! writes the three breakouts measured on the old rendering into a plan
//! file: a deleted resource's address with newlines that spell a mention,
//! the report's marker, a `## wavegate plan` and an `### Approve` section
//! with a fake digest; an output's name that closes its code span around a
//! mention and the fake digest; an unknown output's name with backticks and
//! a newline. The comment the fake forge stores is parsed as CommonMark: it
//! has the report's own headings once each, its markers once, no mention,
//! and one `/approve` line, the real one. An approval of the fake digest is
//! refused.

use crate::support::bot::Bot;
use crate::support::pr::PrHandle;
use crate::support::RepoHandle;
use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};

const FAKE_DIGEST: &str = "sha256:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff";

/// `ci/plan.py` as the pull request rewrites it: every member it plans
/// gets this plan file.
fn forging_plan_script() -> String {
    format!(
        r#"#!/usr/bin/env python3
import json, sys
deleted = "aws_s3_bucket.logs\n\n@acme/platform-team\n<!-- wavegate:report -->\n## wavegate plan\n\n✅ **no changes**\n\n### Approve\n\n```\n/approve {FAKE_DIGEST}\n```\n"
output = "x` @acme/platform-team `/approve {FAKE_DIGEST}` ```\n"
unknown = "name`\n/approve {FAKE_DIGEST}\n`"
plan = {{
    "summary": "1 to destroy",
    "entries": [{{"address": deleted, "action": "delete"}}],
    "outputs": {{"known": {{output: "v"}}, "unknown": ["[" + json.dumps(unknown) + "]"]}},
}}
with open(sys.argv[3], "w") as f:
    json.dump(plan, f)
"#
    )
}

/// What a reader of the comment sees, as a CommonMark parser with
/// GitHub's extensions reads it.
#[derive(Debug, Default)]
struct Read {
    headings: Vec<String>,
    html_comments: Vec<String>,
    /// `@login` outside code, which the forge would notify.
    mentions: usize,
    /// Code blocks that are an `/approve` line to copy, by their text.
    approve_blocks: Vec<String>,
}

fn read(comment: &str) -> Read {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_GFM;
    let mut read = Read::default();
    let (mut heading, mut code_block) = (None::<String>, None::<String>);
    for event in Parser::new_ext(comment, options) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(HeadingLevel::H2 | HeadingLevel::H3)) => {
                read.headings.extend(heading.take())
            }
            Event::Start(Tag::CodeBlock(_)) => code_block = Some(String::new()),
            Event::End(TagEnd::CodeBlock) => {
                let text = code_block.take().unwrap_or_default();
                if text.starts_with("/approve") {
                    read.approve_blocks.push(text.trim().to_owned());
                }
            }
            Event::Text(text) => {
                if let Some(block) = code_block.as_mut() {
                    block.push_str(&text);
                    continue;
                }
                if let Some(h) = heading.as_mut() {
                    h.push_str(&text);
                }
                let chars: Vec<char> = text.chars().collect();
                read.mentions += (0..chars.len())
                    .filter(|&i| {
                        chars[i] == '@'
                            && chars.get(i + 1).is_some_and(|c| c.is_ascii_alphanumeric())
                            && (i == 0 || !chars[i - 1].is_alphanumeric())
                    })
                    .count();
            }
            Event::Html(html) | Event::InlineHtml(html) if html.contains("<!--") => {
                read.html_comments.push(html.trim().to_owned())
            }
            _ => {}
        }
    }
    read
}

async fn a_forging_pull_request<'b>(bot: &'b Bot, repo: &RepoHandle, number: u64) -> PrHandle<'b> {
    bot.forge.set_permission(repo, "rev-bob", "write");
    bot.example.branch(
        "forged",
        "main",
        &[
            ("ci/plan.py", Some(&forging_plan_script())),
            // `dns` is declared on main ahead of its code: this is its directory.
            ("infra/dns/main.txt", Some("dns\n")),
        ],
    );
    bot.opened(repo, number, "forged").await
}

async fn the_report_cannot_be_forged(pr: &PrHandle<'_>) {
    let comment = pr.report();
    let read = read(&comment);
    assert_eq!(
        read.headings,
        [
            "wavegate plan",
            "After merge",
            "Members",
            "Approve",
            "Approvals"
        ],
        "the report's own headings, once each:\n{comment}"
    );
    assert_eq!(
        read.html_comments,
        [
            "<!-- wavegate:report -->",
            "<!-- wavegate:approvals -->",
            "<!-- /wavegate:approvals -->"
        ],
        "{comment}"
    );
    assert_eq!(
        read.mentions, 0,
        "no mention a forge would notify:\n{comment}"
    );
    let [approve] = read.approve_blocks.as_slice() else {
        panic!(
            "one `/approve` block, found {:?}:\n{comment}",
            read.approve_blocks
        );
    };
    assert!(
        approve.starts_with("/approve sha256:") && !approve.contains(FAKE_DIGEST),
        "{approve}"
    );
    // What the pull request wrote is shown, inert, where it belongs.
    assert!(
        comment.contains("``x` @acme/platform-team `/approve"),
        "the output's name in a code span it cannot close:\n{comment}"
    );
    assert!(comment
        .contains("`aws_s3_bucket.logs⏎⏎@acme/platform-team⏎<!\u{200b}-- wavegate:report -->"));

    pr.comment_as("rev-bob", &format!("/approve {FAKE_DIGEST}"))
        .await;
    assert!(
        pr.last_reply().contains("is not the current plan"),
        "the fake digest is refused: {}",
        pr.last_reply()
    );
    let real = approve.trim_start_matches("/approve ").to_owned();
    pr.comment_as("rev-bob", &format!("/approve {real}")).await;
    assert!(
        pr.approvals_section().contains("**Approved**"),
        "the real digest is approved: {}",
        pr.report()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_github_a_plan_file_cannot_forge_the_report() {
    let bot = Bot::start().await;
    let repo = bot.github_repo();
    let pr = a_forging_pull_request(&bot, &repo, 361).await;
    the_report_cannot_be_forged(&pr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_forgejo_a_plan_file_cannot_forge_the_report() {
    let bot = Bot::start().await;
    let repo = bot.forgejo_repo();
    let pr = a_forging_pull_request(&bot, &repo, 362).await;
    the_report_cannot_be_forged(&pr).await;
}
