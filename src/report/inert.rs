//! The report's structure does not depend on what a pull request writes.
//!
//! Every field a pull request controls (addresses, attribute paths and
//! values, output names and values, summaries, what commands printed,
//! failures, policy rule names, input names, references and reasons,
//! unclaimed file paths, a cost's currency and error) is filled with random
//! strings built from known attack pieces, the comment is rendered as the
//! bot posts it and parsed by a CommonMark parser (with GitHub's tables,
//! strikethrough, task lists, footnotes and math), and its block structure
//! — headings, HTML, code blocks, links, tables, lists, and
//! mentions, references and URLs outside code — must equal the structure
//! of the same comment with every such string replaced by a plain name.
//! The bot's markers must occur exactly once.

use super::approvals::{END, START};
use super::markdown::as_posted;
use super::markdown::tests::{change, planned_with};
use super::REPORT_MARKER;
use crate::plan::changeset::MemberStatus;
use crate::plan::cost::StageCost;
use crate::plan::outcome::{InputSource, PlannedChange, ResolvedInput};
use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};
use serde_json::json;

/// Pieces the random strings are made of: each breaks some rendering that
/// does not handle it.
const PIECES: &[&str] = &[
    "\n",
    "\n\n",
    "\r",
    "`",
    "``",
    "```",
    "~~~",
    "<!-- wavegate:report -->",
    "<!-- /wavegate:approvals -->",
    "<!--",
    "-->",
    "## wavegate plan",
    "### Approve",
    "# ",
    "@acme/platform-team",
    "@erin",
    "#12",
    "https://evil.example/x",
    "www.evil.example",
    "[click](https://evil.example)",
    "![img](https://evil.example/i.png)",
    "<https://evil.example>",
    "<details open>",
    "</details>",
    "<summary>",
    "</summary>",
    "<b>",
    "<img src=x onerror=alert(1)>",
    "|",
    " | ",
    "*",
    "**bold**",
    "_",
    "\\",
    "> ",
    "- ",
    "1. ",
    "---",
    "===",
    "    ",
    "\t",
    "$x$",
    "$$",
    "[^1]",
    "[ ] ",
    "\u{1b}[31m",
    "\u{1b}]8;;https://evil.example\u{7}",
    "\u{202e}",
    "\u{0}",
    "&amp;",
    "&#64;",
    "/approve sha256:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    "no changes",
    "aws_s3_bucket.logs",
    "é",
    " ",
    "x",
];

/// The breakouts measured on the old rendering, as a pull request would
/// write them (issue 36).
const ATTACKS: &[&str] = &[
    "aws_s3_bucket.logs\n\n@acme/platform-team\n<!-- wavegate:report -->\n## wavegate plan\n\n### Approve\n\n```\n/approve sha256:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff\n```\n",
    "x` @acme/platform-team `/approve sha256:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff` ```\n",
    "name`\n/approve sha256:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff\n`",
    // Found in review: a quoted part's `|` ending a table cell, a marker
    // behind a character the cleaning removes, a mention after a letter
    // that is not ASCII, a list marker after spaces.
    "`@erin [x](https://evil.example) |` no changes | 0 | 0 |",
    "<\u{0}!-- wavegate:report -->",
    "é@erin ops@evil.example !12 GH-12",
    "  - x",
];

/// A small deterministic generator (the test must replay what failed).
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A string of up to eight pieces, or one of the known attacks.
    fn string(&mut self) -> String {
        if self.below(6) == 0 {
            return ATTACKS[self.below(ATTACKS.len())].to_owned();
        }
        (0..self.below(9))
            .map(|_| PIECES[self.below(PIECES.len())])
            .collect()
    }
}

/// How many strings the fixture takes.
const FIELDS: usize = 32;

/// The report of a change whose every pull-request field is `field(i)`.
/// Field `i` always starts with its placeholder `x{i:02}`, so what sorts,
/// what is blank and what is one line is the same in both renderings.
fn report(field: &dyn Fn(usize) -> String) -> PlannedChange {
    let f = |i: usize| format!("x{i:02}{}", field(i));
    let mut app = planned_with(
        "app@prod",
        json!({
            "summary": f(0),
            "entries": [
                {"address": f(1), "action": "delete"},
                {"address": f(2), "action": "replace", "forced_by": ["engine"],
                 "before": {"engine": f(4), f(3): "a"}, "after": {"engine": "v", f(3): "b"}},
                {"address": f(5), "action": "update", "unknown": ["output"],
                 "before": {"output": {"cidr": f(7)}, "k": "old"},
                 "after": {"output": null, "k": f(6)}},
                {"address": f(8), "action": "create", "after": {"x": f(9)}},
            ],
            "outputs": {
                "known": {f(10): f(11), f(12): {"nested": f(13)}},
                "unknown": [format!("[{}]", serde_json::to_string(&f(14)).unwrap())],
            },
            "denied": {"rules": [f(15)]},
        }),
    );
    app.output = f(16);
    app.inputs.insert(
        f(19),
        ResolvedInput {
            reference: f(20),
            upstream: "network@prod".into(),
            source: InputSource::Unknown,
            value: None,
            why: Some(f(21)),
            sensitive: false,
        },
    );
    app.inputs.insert(
        f(22),
        ResolvedInput {
            reference: f(23),
            upstream: "network@prod".into(),
            source: InputSource::Build,
            value: None,
            why: Some(f(24)),
            sensitive: false,
        },
    );
    let mut db = planned_with("db@prod", json!({"summary": "s"}));
    db.status = MemberStatus::PlanFailed;
    db.plan = None;
    db.error = Some(f(17));
    db.output = f(18);
    let mut web = planned_with(
        "web@prod",
        json!({"summary": f(25), "entries": [
            {"address": f(26), "action": "create", "after": {f(27): f(28)}},
        ]}),
    );
    web.output = f(29);
    let mut planned = change(vec![app, db, web], vec![], vec![f(30), f(31)]);
    planned.notes.push(f(30));
    // Why each was selected, as the fan-out words it: a changed path, the
    // component's entry, an upstream.
    let selected = &mut planned.derivation.selected;
    selected.insert("app".into(), format!("{} changed (prod)", f(3)));
    selected.insert("db".into(), format!("{} entry changed", f(10)));
    selected.insert("web".into(), f(27));
    let mut cost = StageCost::priced("prod", Default::default(), None);
    cost.currency = f(28);
    planned.change_set.costs.push(cost);
    let mut failed = StageCost::priced("dev", Default::default(), None);
    failed.error = Some(format!("{}\n{}", f(29), f(31)));
    planned.change_set.costs.push(failed);
    planned
}

/// The comment's structure as a CommonMark parser with GitHub's extensions
/// reads it: every element but the words of text, the words of HTML (the
/// bot's own) and, outside code, each mention, reference and URL a forge
/// would link.
fn structure(markdown: &str) -> Vec<String> {
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_MATH
        | Options::ENABLE_GFM;
    let mut out = Vec::new();
    let mut in_code_block = false;
    for (event, at) in Parser::new_ext(markdown, options).into_offset_iter() {
        if let Event::Start(Tag::TableHead | Tag::TableRow) = &event {
            // The parser drops cells beyond the header's: count them here.
            out.push(pipes_of_row(&markdown[at.clone()]));
        }
        match event {
            Event::Start(Tag::CodeBlock(kind)) => {
                in_code_block = true;
                out.push(match kind {
                    CodeBlockKind::Fenced(info) => format!("code block {info}"),
                    CodeBlockKind::Indented => "indented code block".to_owned(),
                });
            }
            Event::End(TagEnd::CodeBlock) => {
                in_code_block = false;
                out.push("/code block".to_owned());
            }
            Event::Start(tag) => out.push(format!("{tag:?}")),
            Event::End(tag) => out.push(format!("/{tag:?}")),
            // The bot's own HTML: its tags and comments, not its words.
            Event::Html(html) | Event::InlineHtml(html) => {
                out.push(format!("html {}", tags(&html)))
            }
            // A code span is inert wherever it stands (what it may swallow
            // of the bot's own text shows as that text missing).
            Event::Code(_) => {}
            Event::InlineMath(_) | Event::DisplayMath(_) => out.push("math".to_owned()),
            Event::Text(text) if !in_code_block => out.extend(linked(&text)),
            Event::Text(_) => {}
            other => out.push(format!("{other:?}")),
        }
    }
    out
}

/// A table row's cell count as GitHub splits it: on every `|` that no
/// backslash escapes, code spans or not.
fn pipes_of_row(row: &str) -> String {
    let first_line = row.lines().next().unwrap_or("");
    let mut pipes = 0;
    let mut backslashes = 0;
    for c in first_line.chars() {
        match c {
            '\\' => backslashes += 1,
            '|' if backslashes % 2 == 0 => {
                pipes += 1;
                backslashes = 0;
            }
            _ => backslashes = 0,
        }
    }
    format!("row of {pipes} pipes")
}

/// The tags and comments in a piece of HTML, without the text between.
fn tags(html: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for c in html.chars() {
        match c {
            '<' => inside = true,
            '>' if inside => {
                out.push('>');
                inside = false;
                continue;
            }
            _ => {}
        }
        if inside {
            out.push(c);
        }
    }
    out
}

/// What a forge links in `text`: `@login` mentions and emails, `#1`,
/// `!1` and `GH-1` references, URLs.
fn linked(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut found = Vec::new();
    for (i, c) in chars.iter().enumerate() {
        let next = chars.get(i + 1).copied().unwrap_or(' ');
        match c {
            '@' if next.is_ascii_alphanumeric() => {
                let after_word = i > 0 && chars[i - 1].is_ascii_alphanumeric();
                let domain: String = chars[i + 1..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || **c == '.' || **c == '-')
                    .collect();
                // An email's domain has a dot inside it, not only at its end.
                if !after_word || domain.trim_end_matches(['.', '-']).contains('.') {
                    found.push("mention or email".to_owned())
                }
            }
            '#' | '!' if next.is_ascii_digit() => found.push("reference".to_owned()),
            '-' if next.is_ascii_digit() && i >= 2 && chars[i - 2..i] == ['G', 'H'] => {
                found.push("reference".to_owned())
            }
            _ => {}
        }
    }
    found.extend(text.matches("://").map(|_| "url".to_owned()));
    found.extend(
        text.match_indices("www.")
            .filter(|(at, _)| text[at + 4..].starts_with(|c: char| c.is_alphanumeric()))
            .map(|_| "url".to_owned()),
    );
    found
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

/// The check, on one set of strings: `None` when it holds.
fn breaks(strings: &[String]) -> Option<String> {
    let attacked = as_posted(&report(&|i| strings[i].clone()));
    let plain = as_posted(&report(&|_| String::new()));
    // The bot's markers once each, so the same counts in `attacked` are too.
    for marker in [REPORT_MARKER, START, END] {
        assert_eq!(
            count(&plain, marker),
            1,
            "{marker} in the plain report:\n{plain}"
        );
    }
    difference(&attacked, &plain)
}

/// How `attacked` differs from `plain`: a marker counted otherwise, or the
/// first element of their structure that differs; `None` when neither.
fn difference(attacked: &str, plain: &str) -> Option<String> {
    for marker in [REPORT_MARKER, START, END] {
        if count(attacked, marker) != count(plain, marker) {
            return Some(format!(
                "{marker} occurs {} times:\n{attacked}",
                count(attacked, marker)
            ));
        }
    }
    let (got, want) = (structure(attacked), structure(plain));
    if got == want {
        return None;
    }
    let at = got
        .iter()
        .zip(&want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    Some(format!(
        "the structure differs at element {at}: {:?} where the plain text has {:?}\n\n{attacked}",
        got.get(at),
        want.get(at)
    ))
}

#[test]
fn nothing_a_pull_request_writes_changes_the_reports_structure() {
    holds_for_random_strings(0x5eed_1234_abcd_0001, 400, breaks);
}

#[test]
fn the_known_breakouts_leave_the_structure_as_it_was() {
    holds_for_the_known_breakouts(breaks);
}

/// `check` finds nothing for `rounds` sets of random strings from `seed`.
fn holds_for_random_strings(seed: u64, rounds: usize, check: fn(&[String]) -> Option<String>) {
    let mut random = Random(seed);
    for round in 0..rounds {
        let strings: Vec<String> = (0..FIELDS).map(|_| random.string()).collect();
        if let Some(why) = check(&strings) {
            panic!("round {round}, strings {strings:?}: {why}");
        }
    }
}

/// `check` finds nothing with each known breakout in every field.
fn holds_for_the_known_breakouts(check: fn(&[String]) -> Option<String>) {
    for attack in ATTACKS {
        if let Some(why) = check(&vec![(*attack).to_owned(); FIELDS]) {
            panic!("{attack:?}: {why}");
        }
    }
}

#[test]
fn the_structure_check_sees_a_breakout() {
    // The check itself can fail: raw text in a code span breaks it.
    let raw = |text: &str| format!("{REPORT_MARKER}\n\nA `{text}` B\n");
    assert_ne!(
        structure(&raw(ATTACKS[0])),
        structure(&raw("x")),
        "a heading and a marker smuggled through a code span"
    );
    assert_ne!(structure(&raw(ATTACKS[1])), structure(&raw("x")));
    assert_eq!(
        linked("@\u{200b}erin #\u{200b}12 @erin app@prod ops@evil.io"),
        ["mention or email", "mention or email"]
    );
    assert_eq!(linked("GH-12 !3"), ["reference", "reference"]);
    let table = |cell: &str| format!("| a | b |\n|---|---|\n| {cell} | c |\n");
    assert_ne!(
        structure(&table("`x|y`")),
        structure(&table("`xy`")),
        "a `|` in a code span splits a cell, though the parser drops the extra"
    );
    assert_eq!(structure(&table("`x\\|y`")), structure(&table("`xy`")));
}

/// The run's section of the report and what the run tells the pull request,
/// with every field an apply command, a plan file or a hook controls filled
/// with `field(i)` (each starting with its placeholder, as above).
fn run_texts(field: &dyn Fn(usize) -> String) -> Vec<String> {
    use crate::apply::run::News;
    use crate::apply::{AttemptRecord, Lapsed, MemberState, Round, RunStatus, Wait};
    use crate::model::time::in_tests::unix;
    use crate::model::{CommitSha, Digest};
    use crate::plan::changeset::ChangeSet;
    use crate::plan::tail::OutputTail;

    let f = |i: usize| format!("x{i:02}{}", field(i));
    // Multi-line so the failure's details are shown whatever the string.
    let error = |i: usize| format!("{}\nlast output:\n{}", f(i), f(i + 1));
    let mut record = AttemptRecord {
        pr_approved_by: vec!["rev-bob".into()],
        ..Default::default()
    };
    let states = [
        ("app@dev", MemberState::Failed { error: error(0) }),
        ("db@dev", MemberState::Waiting { reason: f(2) }),
        (
            "net@dev",
            MemberState::Held {
                holder: f(3),
                tries: 1,
                retry_at: unix(0),
            },
        ),
        ("web@dev", MemberState::StoodDown { reason: f(4) }),
        ("dns@dev", MemberState::NotReached { reason: f(5) }),
        (
            "cdn@dev",
            MemberState::Applied {
                plan_digest: Digest::repeated('a'),
                outputs: Default::default(),
                note: Some(f(6)),
            },
        ),
    ];
    for (member, state) in states {
        record.set(&member.into(), state);
    }
    record.printed.insert(
        "cdn@dev".into(),
        OutputTail::of(&f(7)).expect("a placeholder is never blank"),
    );
    record.stages.insert(
        "dev".into(),
        crate::apply::StageGate {
            unlike_reviewed: Some(vec![f(18), f(19)]),
            ..crate::apply::StageGate::open_for_test("pr-7-dev", ChangeSet::new(vec![]).unwrap())
        },
    );
    record.lapsed.push(Lapsed {
        gate: "pr-7".parse().unwrap(),
        by: "rev-bob".into(),
        why: f(8),
    });
    let set = ChangeSet::new(vec![]).unwrap();
    record.rounds = vec![
        Round {
            number: 2,
            gate: "pr-7-round-2".parse().unwrap(),
            stage: "dev".into(),
            change_set: set.clone(),
            reasons: vec![f(9), f(10)],
            filled: vec![],
            approved_by: vec![],
            mismatch: None,
        },
        Round {
            number: 3,
            gate: "pr-7-round-3".parse().unwrap(),
            stage: "dev".into(),
            change_set: set,
            reasons: vec![],
            filled: vec![f(11)],
            approved_by: vec![],
            mismatch: None,
        },
    ];
    let merge = CommitSha::parse(&"a".repeat(40)).unwrap();
    let base = CommitSha::parse(&"b".repeat(40)).unwrap();
    let waits = [
        Wait::Stage {
            stage: "dev".into(),
            gate: "pr-7-dev".parse().unwrap(),
            digest: Digest::repeated('e'),
        },
        Wait::Round {
            round: 2,
            gate: "pr-7-round-2".parse().unwrap(),
            digest: Digest::repeated('c'),
        },
        Wait::Holder {
            member: "net@dev".into(),
            holder: f(3),
            until: unix(0),
        },
        Wait::Override {
            member: "app@dev".into(),
            gate: "pr-7-override".parse().unwrap(),
            digest: Digest::repeated('d'),
            rules: vec![f(12)],
            also: Vec::new(),
        },
    ];
    let mut texts = Vec::new();
    for wait in waits {
        record.wait = Some(wait.clone());
        let view = super::apply::RunView {
            merge_sha: merge.as_str(),
            status: RunStatus::Failed,
            record: &record,
        };
        texts.push(super::apply::render_within(&view, super::COMMENT_LIMIT));
        texts.push(super::apply::news(
            &News::Waits(wait),
            &merge,
            &base,
            &record,
        ));
    }
    for news in [
        News::Failed { meanwhile: None },
        News::Ended,
        News::CannotGoOn(f(13)),
        News::GaveUp {
            attempts: 3,
            error: error(14),
        },
    ] {
        texts.push(super::apply::news(&news, &merge, &base, &record));
    }
    texts.push(super::reply::plan_refused(&f(16), &"c".repeat(40)).body);
    texts.push(super::reply::gave_up(2, &error(17)).body);
    texts
}

/// The run check on one set of strings: `None` when it holds.
fn run_breaks(strings: &[String]) -> Option<String> {
    let attacked = run_texts(&|i| strings[i].clone());
    let plain = run_texts(&|_| String::new());
    for (n, (attacked, plain)) in attacked.iter().zip(&plain).enumerate() {
        if let Some(why) = difference(attacked, plain) {
            return Some(format!("text {n}: {why}"));
        }
    }
    None
}

#[test]
fn nothing_an_apply_or_a_plan_writes_changes_the_runs_section_or_replies() {
    holds_for_random_strings(0x5eed_1234_abcd_0002, 300, run_breaks);
    holds_for_the_known_breakouts(run_breaks);
}
