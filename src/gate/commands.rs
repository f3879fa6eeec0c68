//! The comment-command grammar (docs/approvals-and-applying.md): which lines of a comment are
//! commands and what they say. Only a line a reader sees as a command counts
//! — text in code, quotes, list items, HTML comments and HTML quote or code
//! elements never does — so quoting someone's `/approve` approves nothing.
//! The comment is read as CommonMark, as the forge renders it
//! ([`rendered`] says exactly which lines count). Every command is declared
//! once in [`COMMANDS`], and `/help` is written from that table. Pure, and
//! one pass over the body.

mod rendered;

use crate::model::{Digest, MemberId, PlanTarget, DIGEST_HEX_DIGITS, DIGEST_PREFIX};

const MIN_PREFIX_HEX_DIGITS: usize = 12;
/// Damerau–Levenshtein distance within which an unknown `/word` is taken for
/// a typo of ours; names of four letters or fewer allow one edit only, so
/// other bots' short words (`/hold`, `/lgtm`) are left alone.
const TYPO_DISTANCE: usize = 2;
const SHORT_NAME: usize = 4;
/// Any `/word` starting with this is addressed to us, known or not.
const BOT_WORD: &str = "wavegate";

/// The most targets one `/plan` may name.
const MAX_PLAN_TARGETS: usize = 20;

/// What `/approve` names: nothing (the newest report's digest), a full digest, or a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DigestRef {
    Full(Digest),
    /// Lowercase hex, 12..=63 digits, without `sha256:`.
    Prefix(String),
}

impl DigestRef {
    /// Whether `digest` (`sha256:<64 hex>`) is the one this reference names.
    pub(crate) fn matches(&self, digest: &Digest) -> bool {
        match self {
            Self::Full(full) => full == digest,
            Self::Prefix(prefix) => digest.hex().starts_with(prefix.as_str()),
        }
    }

    /// The reference as a reviewer would write it: always with `sha256:`.
    pub(crate) fn as_text(&self) -> String {
        match self {
            Self::Full(full) => full.to_string(),
            Self::Prefix(prefix) => format!("{DIGEST_PREFIX}{prefix}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Approve {
        stage: Option<String>,
        /// One dependency wave (1-based) of the stage, for a stage gated
        /// wave by wave; only with `stage`.
        wave: Option<u32>,
        digest: Option<DigestRef>,
    },
    /// Plan again: everything (`only` empty), or only the members named,
    /// the rest kept from the plan of the same commit.
    Plan {
        only: Vec<PlanTarget>,
    },
    Retry,
    Revoke,
    Override {
        member: String,
        reason: String,
    },
    Help,
}

impl Command {
    #[cfg(test)]
    /// The command's name as declared in [`COMMANDS`].
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Approve { .. } => "approve",
            Self::Plan { .. } => "plan",
            Self::Retry => "retry",
            Self::Revoke => "revoke",
            Self::Override { .. } => "override",
            Self::Help => "help",
        }
    }
}

/// A line that looked like a command but could not be read, with what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandError {
    /// 1-based.
    pub(crate) line: usize,
    /// The line as written, without surrounding whitespace.
    pub(crate) text: String,
    pub(crate) problem: String,
    pub(crate) fix: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Commands {
    /// In the order they were written.
    pub commands: Vec<Command>,
    /// `/words` that look meant for us but are not commands, as written (e.g. `/aprove`).
    pub(crate) unknown: Vec<String>,
    pub(crate) errors: Vec<CommandError>,
}

/// The table every command is declared in once: name, usage, one-line description.
pub(crate) struct CommandSpec {
    pub(crate) name: &'static str,
    pub(crate) usage: &'static str,
    pub(crate) summary: &'static str,
}

pub(crate) const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "approve",
        usage: "/approve [stage [wave <k>]] [digest]",
        summary:
            "approve the newest plan, for every stage or only the one named (or one wave of a \
                  stage approved wave by wave); give the report's digest (`sha256:…`, or its \
                  first 12 or more hex digits) to approve exactly the plan you read",
    },
    CommandSpec {
        name: "plan",
        usage: "/plan [targets]",
        summary: "plan this pull request again now: everything, or only the targets named \
                  (`app`, `app@prod`, `-d <dir>`, `-w <workspace>`) and what reads them, the \
                  rest kept from the plan of the same commit",
    },
    CommandSpec {
        name: "retry",
        usage: "/retry",
        summary: "resume an apply that failed or was stopped",
    },
    CommandSpec {
        name: "revoke",
        usage: "/revoke",
        summary: "withdraw your approval of this pull request",
    },
    CommandSpec {
        name: "override",
        usage: "/override <member> <reason>",
        summary: "let a plan the policy denied through for one member (`component@stage`), \
                  saying why; for the policy's overriders only",
    },
    CommandSpec {
        name: "help",
        usage: "/help",
        summary: "show this list",
    },
];

/// The reply to `/help` and to an unknown command: generated from [`COMMANDS`].
pub(crate) fn help_text() -> String {
    let mut text = String::from(
        "wavegate commands: write each at the start of its own line, \
         outside code blocks and quotes.\n\n",
    );
    for spec in COMMANDS {
        text.push_str(&format!("- `{}` — {}\n", spec.usage, spec.summary));
    }
    text
}

/// Every command, unknown `/word` and unreadable command line in `body`, in order.
pub fn parse(body: &str) -> Commands {
    let mut found = Commands::default();
    for line in rendered::command_lines(body) {
        read_command_line(line.line, line.source, &line.text, &mut found);
    }
    found
}

fn read_command_line(line_number: usize, line: &str, command_text: &str, found: &mut Commands) {
    let after_slash = &command_text[1..];
    let word_end = after_slash
        .find(char::is_whitespace)
        .unwrap_or(after_slash.len());
    let word = &after_slash[..word_end];
    if word.is_empty() {
        return;
    }
    let arguments = after_slash[word_end..].trim();
    match COMMANDS
        .iter()
        .find(|spec| spec.name.eq_ignore_ascii_case(word))
    {
        Some(spec) => match read_arguments(spec, arguments) {
            Ok(command) => found.commands.push(command),
            Err(Unreadable { problem, fix }) => found.errors.push(CommandError {
                line: line_number,
                text: line.trim().to_owned(),
                problem,
                fix,
            }),
        },
        None if looks_meant_for_us(word) => found.unknown.push(format!("/{word}")),
        None => {}
    }
}

struct Unreadable {
    problem: String,
    fix: String,
}

fn unreadable(problem: impl Into<String>, fix: impl Into<String>) -> Unreadable {
    Unreadable {
        problem: problem.into(),
        fix: fix.into(),
    }
}

fn read_arguments(spec: &CommandSpec, arguments: &str) -> Result<Command, Unreadable> {
    match spec.name {
        "approve" => read_approve(arguments),
        "plan" => read_plan(arguments),
        "retry" => without_arguments(spec, arguments, Command::Retry),
        "revoke" => without_arguments(spec, arguments, Command::Revoke),
        "override" => read_override(arguments),
        "help" => without_arguments(spec, arguments, Command::Help),
        other => Err(unreadable(
            format!("`/{other}` is declared but wavegate cannot read it yet"),
            "write `/help` for the commands that work",
        )),
    }
}

fn without_arguments(
    spec: &CommandSpec,
    arguments: &str,
    command: Command,
) -> Result<Command, Unreadable> {
    if arguments.is_empty() {
        Ok(command)
    } else {
        Err(unreadable(
            format!("`/{}` takes nothing after it", spec.name),
            format!("write `{}` alone on its line", spec.usage),
        ))
    }
}

fn read_plan(arguments: &str) -> Result<Command, Unreadable> {
    const FIX: &str = "write `/plan` for everything, or name what to plan again: \
        `/plan app`, `/plan app@prod`, `/plan -d envs/prod/app`, `/plan -w prod`";
    let words: Vec<&str> = arguments.split_whitespace().collect();
    let mut only = Vec::new();
    let mut at = 0;
    while at < words.len() {
        let word = words[at];
        at += 1;
        let target = match word {
            "-d" | "-w" | "-p" => {
                let Some(value) = words.get(at) else {
                    return Err(unreadable(format!("`{word}` needs a value after it"), FIX));
                };
                at += 1;
                let plain = |what: &str| {
                    let ok = !value.is_empty()
                        && !value.starts_with('-')
                        && value
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-_./{}".contains(&b))
                        && !value.split('/').any(|s| s == "..");
                    if ok {
                        Ok((*value).to_owned())
                    } else {
                        Err(unreadable(format!("`{value}` is not {what}"), FIX))
                    }
                };
                match word {
                    "-d" => PlanTarget::Dir(plain("a directory")?.trim_end_matches('/').to_owned()),
                    "-w" => PlanTarget::Workspace(plain("a workspace")?),
                    _ => PlanTarget::Component(plain("a component")?),
                }
            }
            flag if flag.starts_with('-') => {
                return Err(unreadable(
                    format!("`{flag}` is not a flag of `/plan`"),
                    FIX,
                ))
            }
            member if member.contains('@') => match member.parse::<MemberId>() {
                Ok(id) => PlanTarget::Member(id),
                Err(_) => {
                    return Err(unreadable(
                        format!("`{member}` is not a member (`component@stage`)"),
                        FIX,
                    ))
                }
            },
            name => {
                let well_formed = name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
                if !well_formed {
                    return Err(unreadable(format!("`{name}` is not a component"), FIX));
                }
                PlanTarget::Component(name.to_owned())
            }
        };
        only.push(target);
        if only.len() > MAX_PLAN_TARGETS {
            return Err(unreadable(
                format!("`/plan` names more than {MAX_PLAN_TARGETS} targets"),
                "write `/plan` alone to plan everything again",
            ));
        }
    }
    let mut once = Vec::with_capacity(only.len());
    for target in only {
        if !once.contains(&target) {
            once.push(target);
        }
    }
    Ok(Command::Plan { only: once })
}

fn read_approve(arguments: &str) -> Result<Command, Unreadable> {
    let words: Vec<&str> = arguments.split_whitespace().take(5).collect();
    match words[..] {
        [] => Ok(Command::Approve {
            stage: None,
            wave: None,
            digest: None,
        }),
        [first, second, ref after @ ..]
            if second.eq_ignore_ascii_case("wave") && !is_digest_like(first) =>
        {
            read_approve_wave(first, after)
        }
        [only] if is_digest_like(only) => Ok(Command::Approve {
            stage: None,
            wave: None,
            digest: Some(read_digest(only, None)?),
        }),
        [only] => Ok(Command::Approve {
            stage: Some(read_stage(only)?),
            wave: None,
            digest: None,
        }),
        [first, _] if is_digest_like(first) => Err(unreadable(
            format!("nothing may follow the digest `{first}`"),
            "put the stage first: `/approve <stage> <digest>`, or write `/approve <digest>` alone",
        )),
        [first, second] => {
            let stage = read_stage(first)?;
            if !is_digest_like(second) && read_digest_after_trimming(second).is_none() {
                return Err(unreadable(
                    format!("`{second}` is not a digest"),
                    format!(
                        "after the stage give the report's digest: \
                         `/approve {stage} sha256:<64 hex digits, or the first 12 or more>`"
                    ),
                ));
            }
            Ok(Command::Approve {
                digest: Some(read_digest(second, Some(&stage))?),
                stage: Some(stage),
                wave: None,
            })
        }
        _ => Err(unreadable(
            "`/approve` takes at most a stage and a digest",
            "write `/approve`, `/approve <digest>`, `/approve <stage>` or `/approve <stage> <digest>` \
             (`/approve <stage> wave <k> <digest>` for one wave of a stage approved wave by wave)",
        )),
    }
}

/// `/approve <stage> wave <k> [digest]`: `after` is what follows `wave`.
fn read_approve_wave(stage: &str, after: &[&str]) -> Result<Command, Unreadable> {
    let stage = read_stage(stage)?;
    let Some(number) = after.first() else {
        return Err(unreadable(
            "`wave` needs the wave's number",
            format!("write `/approve {stage} wave <k>`, with k as the report numbers the stage's waves (1, 2, …)"),
        ));
    };
    let canonical = !number.starts_with('0') && number.bytes().all(|b| b.is_ascii_digit());
    let Some(wave) = number.parse::<u32>().ok().filter(|_| canonical) else {
        return Err(unreadable(
            format!("`{number}` is not a wave's number"),
            format!("write `/approve {stage} wave <k>`, with k as the report numbers the stage's waves (1, 2, …)"),
        ));
    };
    let approve = format!("{stage} wave {wave}");
    let digest = match after[1..] {
        [] => None,
        [word] if is_digest_like(word) || read_digest_after_trimming(word).is_some() => {
            Some(read_digest(word, Some(&approve))?)
        }
        [word] => {
            return Err(unreadable(
                format!("`{word}` is not a digest"),
                format!(
                    "after the wave give the report's digest: \
                     `/approve {approve} sha256:<64 hex digits, or the first 12 or more>`"
                ),
            ))
        }
        _ => {
            return Err(unreadable(
                "`/approve` takes at most a stage, one of its waves and a digest",
                format!("write `/approve {approve}` or `/approve {approve} <digest>`"),
            ))
        }
    };
    Ok(Command::Approve {
        stage: Some(stage),
        wave: Some(wave),
        digest,
    })
}

/// `sha256:` anything, or 12 or more hex digits: the reviewer meant a digest.
fn is_digest_like(word: &str) -> bool {
    starts_with_digest_prefix(word)
        || (word.len() >= MIN_PREFIX_HEX_DIGITS && word.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn read_digest(word: &str, stage: Option<&str>) -> Result<DigestRef, Unreadable> {
    let approve = match stage {
        Some(stage) => format!("/approve {stage}"),
        None => "/approve".to_owned(),
    };
    let hex = strip_digest_prefix(word);
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(match read_digest_after_trimming(word) {
            Some(digest) => unreadable(
                format!("`{word}` has something after the digest"),
                format!("write the digest alone: `{approve} {}`", digest.as_text()),
            ),
            None => unreadable(
                format!("`{word}` is not a digest: only hex digits 0-9 and a-f follow `sha256:`"),
                format!("copy the digest from the plan report: `{approve} sha256:<64 hex digits>`"),
            ),
        });
    }
    digest_from_hex(hex).map_err(|problem| {
        unreadable(
            problem,
            format!(
                "copy the digest from the plan report, whole or its first 12 or more hex digits: \
                 `{approve} sha256:<hex digits>`"
            ),
        )
    })
}

/// `/apply <digest>`, the one command of a drift issue: the digest its
/// first `/apply` line names, or what is wrong with it; `None` when no
/// line is an `/apply`.
pub(crate) fn drift_apply(body: &str) -> Option<Result<DigestRef, String>> {
    // Read as the other commands are: not in code, a quote or a comment.
    let lines = rendered::command_lines(body);
    let line = lines.iter().map(|l| l.text.trim()).find(|line| {
        line.strip_prefix("/apply")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace))
    })?;
    let fix = "copy the line the issue shows: `/apply sha256:<hex digits>`";
    let Some(word) = line["/apply".len()..].split_whitespace().next() else {
        return Some(Err(format!("`/apply` names no digest; {fix}")));
    };
    let hex = strip_digest_prefix(word);
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Some(Err(format!(
            "{} is not a digest; {fix}",
            crate::model::untrusted::code(word)
        )));
    }
    Some(digest_from_hex(hex).map_err(|problem| format!("{problem}; {fix}")))
}

/// The digest a word would be without trailing punctuation (`sha256:abc….` → `sha256:abc…`).
fn read_digest_after_trimming(word: &str) -> Option<DigestRef> {
    let trimmed = word.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed.len() == word.len() || !is_digest_like(trimmed) {
        return None;
    }
    let hex = strip_digest_prefix(trimmed);
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    digest_from_hex(hex).ok()
}

fn digest_from_hex(hex: &str) -> Result<DigestRef, String> {
    let hex = hex.to_ascii_lowercase();
    match hex.len() {
        DIGEST_HEX_DIGITS => Ok(DigestRef::Full(
            format!("{DIGEST_PREFIX}{hex}")
                .parse()
                .expect("64 lowercase hex digits"),
        )),
        n if n < MIN_PREFIX_HEX_DIGITS => Err(format!(
            "a digest prefix needs at least {MIN_PREFIX_HEX_DIGITS} hex digits; `{hex}` has {n}"
        )),
        n if n > DIGEST_HEX_DIGITS => Err(format!(
            "a sha256 digest has {DIGEST_HEX_DIGITS} hex digits; this one has {n}"
        )),
        _ => Ok(DigestRef::Prefix(hex)),
    }
}

fn starts_with_digest_prefix(word: &str) -> bool {
    word.get(..DIGEST_PREFIX.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(DIGEST_PREFIX))
}

fn strip_digest_prefix(word: &str) -> &str {
    if starts_with_digest_prefix(word) {
        &word[DIGEST_PREFIX.len()..]
    } else {
        word
    }
}

/// A stage as `/approve` accepts it: a name as `wavegate.toml` allows one
/// (letters, digits, `-`, `_`, `.`), starting with a letter or digit.
fn read_stage(word: &str) -> Result<String, Unreadable> {
    if let Some(digest) = read_digest_after_trimming(word) {
        return Err(unreadable(
            format!("`{word}` has something after the digest"),
            format!("write the digest alone: `/approve {}`", digest.as_text()),
        ));
    }
    let mut bytes = word.bytes();
    let well_formed = bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if well_formed {
        return Ok(word.to_owned());
    }
    Err(match read_digest_after_trimming(word) {
        Some(digest) => unreadable(
            format!("`{word}` has something after the digest"),
            format!("write the digest alone: `/approve {}`", digest.as_text()),
        ),
        None => unreadable(
            format!("`{word}` is neither a stage nor a digest"),
            "a stage is letters, digits, `-`, `_` and `.` (e.g. `/approve prod`); \
             a digest is `sha256:` and its hex digits (e.g. `/approve sha256:<hex digits>`)",
        ),
    })
}

fn read_override(arguments: &str) -> Result<Command, Unreadable> {
    let (member, reason) = arguments
        .split_once(char::is_whitespace)
        .unwrap_or((arguments, ""));
    let reason = reason.trim();
    if member.is_empty() {
        return Err(unreadable(
            "`/override` needs a member and a reason",
            "write `/override <component@stage> <reason>`, e.g. `/override app@prod the outage fix`",
        ));
    }
    if !is_member_name(member) {
        return Err(unreadable(
            format!("`{member}` is not a member: members are written `component@stage`"),
            format!(
                "write `/override <component@stage> {}`",
                if reason.is_empty() {
                    "<reason>"
                } else {
                    reason
                }
            ),
        ));
    }
    if reason.is_empty() {
        return Err(unreadable(
            "an override needs a reason",
            format!("say why after the member: `/override {member} <reason>`"),
        ));
    }
    Ok(Command::Override {
        member: member.to_owned(),
        reason: reason.to_owned(),
    })
}

/// `component@stage`, each part a name as the repo config allows it.
fn is_member_name(word: &str) -> bool {
    let is_name = |part: &str| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    word.parse::<MemberId>()
        .is_ok_and(|member| is_name(member.component()) && is_name(member.stage()))
}

fn looks_meant_for_us(word: &str) -> bool {
    let word = word.to_lowercase();
    word.starts_with(BOT_WORD)
        || COMMANDS
            .iter()
            .any(|spec| within_typo_distance(&word, spec.name))
}

/// Optimal-string-alignment distance (Damerau–Levenshtein with adjacent
/// transpositions) of at most [`TYPO_DISTANCE`]; longer words are rejected
/// by length before any distance is computed.
fn within_typo_distance(word: &str, name: &str) -> bool {
    let name_len = name.chars().count();
    let word_len = word.chars().take(name_len + TYPO_DISTANCE + 1).count();
    if word_len.abs_diff(name_len) > TYPO_DISTANCE {
        return false;
    }
    let allowed = if name_len <= SHORT_NAME {
        1
    } else {
        TYPO_DISTANCE
    };
    strsim::osa_distance(word, name) <= allowed
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX64: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn only_command(body: &str) -> Command {
        let found = parse(body);
        assert!(found.errors.is_empty(), "errors: {:?}", found.errors);
        assert!(found.unknown.is_empty(), "unknown: {:?}", found.unknown);
        assert_eq!(found.commands.len(), 1, "commands: {:?}", found.commands);
        found.commands.into_iter().next().unwrap()
    }

    fn only_error(body: &str) -> CommandError {
        let found = parse(body);
        assert!(found.commands.is_empty(), "commands: {:?}", found.commands);
        assert_eq!(found.errors.len(), 1, "errors: {:?}", found.errors);
        found.errors.into_iter().next().unwrap()
    }

    fn approve(stage: Option<&str>, digest: Option<DigestRef>) -> Command {
        Command::Approve {
            stage: stage.map(str::to_owned),
            wave: None,
            digest,
        }
    }

    fn digest(text: &str) -> Digest {
        text.parse().unwrap()
    }

    fn full() -> DigestRef {
        DigestRef::Full(format!("sha256:{HEX64}").parse().unwrap())
    }

    fn nothing_in(body: &str) {
        assert_eq!(parse(body), Commands::default(), "body: {body:?}");
    }

    #[test]
    fn a_drift_issues_apply_reads_its_digest_whole_or_by_prefix() {
        let full = format!("sha256:{HEX64}");
        assert!(matches!(
            drift_apply(&format!("looks right\n/apply {full}\n")),
            Some(Ok(DigestRef::Full(_)))
        ));
        assert_eq!(
            drift_apply("/apply 0123456789AB"),
            Some(Ok(DigestRef::Prefix("0123456789ab".into())))
        );
        assert!(drift_apply("/apply")
            .unwrap()
            .unwrap_err()
            .contains("names no digest"));
        assert!(drift_apply("/apply now!")
            .unwrap()
            .unwrap_err()
            .contains("is not a digest"));
        assert_eq!(drift_apply("please /apply it\n/applying"), None);
    }

    #[test]
    fn plan_names_members_components_directories_and_workspaces_as_atlantis_does() {
        assert_eq!(
            only_command("/plan app@prod network -d envs/dev/app/ -w dev -p dns app@prod"),
            Command::Plan {
                only: vec![
                    PlanTarget::Member("app@prod".parse().unwrap()),
                    PlanTarget::Component("network".into()),
                    PlanTarget::Dir("envs/dev/app".into()),
                    PlanTarget::Workspace("dev".into()),
                    PlanTarget::Component("dns".into()),
                ]
            }
        );
        assert_eq!(
            only_command("/plan app@prod app@prod"),
            Command::Plan {
                only: vec![PlanTarget::Member("app@prod".parse().unwrap())]
            }
        );
    }

    #[test]
    fn a_plan_target_that_does_not_read_says_how_to_write_one() {
        for (body, problem) in [
            ("/plan -d", "`-d` needs a value after it"),
            ("/plan -d ../etc", "`../etc` is not a directory"),
            ("/plan --all", "`--all` is not a flag of `/plan`"),
            ("/plan app@", "`app@` is not a member (`component@stage`)"),
            ("/plan a$b", "`a$b` is not a component"),
        ] {
            let error = only_error(body);
            assert_eq!(error.problem, problem, "{body}");
            assert!(
                error.fix.contains("`/plan app@prod`"),
                "{body}: {}",
                error.fix
            );
        }
    }

    #[test]
    fn bare_approve_names_the_newest_report() {
        assert_eq!(only_command("/approve"), approve(None, None));
    }

    #[test]
    fn approve_with_a_full_digest() {
        assert_eq!(
            only_command(&format!("/approve sha256:{HEX64}")),
            approve(None, Some(full()))
        );
        assert_eq!(
            only_command(&format!("/approve {HEX64}")),
            approve(None, Some(full()))
        );
    }

    #[test]
    fn an_uppercase_digest_is_normalised_to_lowercase() {
        let shouted = format!("/approve SHA256:{}", HEX64.to_uppercase());
        assert_eq!(only_command(&shouted), approve(None, Some(full())));
    }

    #[test]
    fn approve_with_a_digest_prefix() {
        let prefix = DigestRef::Prefix("0123456789ab".into());
        assert_eq!(
            only_command("/approve sha256:0123456789ab"),
            approve(None, Some(prefix.clone()))
        );
        assert_eq!(
            only_command("/approve 0123456789AB"),
            approve(None, Some(prefix))
        );
        let longest = &HEX64[..63];
        assert_eq!(
            only_command(&format!("/approve {longest}")),
            approve(None, Some(DigestRef::Prefix(longest.into())))
        );
    }

    #[test]
    fn approve_one_stage() {
        assert_eq!(only_command("/approve prod"), approve(Some("prod"), None));
        assert_eq!(
            only_command("/approve eu-west_2"),
            approve(Some("eu-west_2"), None)
        );
    }

    #[test]
    fn approve_one_wave_of_a_stage() {
        let wave = |k, digest| Command::Approve {
            stage: Some("prod".into()),
            wave: Some(k),
            digest,
        };
        assert_eq!(only_command("/approve prod wave 2"), wave(2, None));
        assert_eq!(only_command("/approve prod Wave 12"), wave(12, None));
        assert_eq!(
            only_command(&format!("/approve prod wave 1 sha256:{HEX64}")),
            wave(1, Some(full()))
        );
        for (bad, problem, fix) in [
            (
                "/approve prod wave",
                "needs the wave's number",
                "/approve prod wave <k>",
            ),
            (
                "/approve prod wave two",
                "`two` is not a wave's number",
                "(1, 2, …)",
            ),
            (
                "/approve prod wave 0",
                "`0` is not a wave's number",
                "(1, 2, …)",
            ),
            (
                "/approve prod wave 02",
                "`02` is not a wave's number",
                "(1, 2, …)",
            ),
            (
                "/approve prod wave 2 now",
                "`now` is not a digest",
                "/approve prod wave 2 sha256:",
            ),
            (
                &format!("/approve prod wave 2 sha256:{HEX64} please"),
                "at most a stage, one of its waves and a digest",
                "/approve prod wave 2 <digest>",
            ),
            (
                "/approve prod wave 2 sha256:xyz",
                "is not a digest",
                "/approve prod wave 2 sha256:",
            ),
        ] {
            let error = only_error(bad);
            assert!(error.problem.contains(problem), "{bad}: {error:?}");
            assert!(error.fix.contains(fix), "{bad}: {error:?}");
        }
    }

    #[test]
    fn approve_one_stage_at_a_digest() {
        assert_eq!(
            only_command(&format!("/approve prod sha256:{HEX64}")),
            approve(Some("prod"), Some(full()))
        );
        assert_eq!(
            only_command("/approve prod 0123456789abcdef"),
            approve(
                Some("prod"),
                Some(DigestRef::Prefix("0123456789abcdef".into()))
            )
        );
    }

    #[test]
    fn a_digest_prefix_of_eleven_digits_is_refused_with_the_form_to_use() {
        for body in [
            "/approve sha256:0123456789a",
            "/approve prod sha256:0123456789a",
        ] {
            let error = only_error(body);
            assert!(
                error
                    .problem
                    .contains("a digest prefix needs at least 12 hex digits"),
                "{error:?}"
            );
            assert!(error.fix.contains("sha256:<hex digits>"), "{error:?}");
        }
        assert!(only_error("/approve prod sha256:0123456789a")
            .fix
            .contains("/approve prod "));
    }

    #[test]
    fn eleven_bare_hex_digits_read_as_a_stage_name() {
        assert_eq!(
            only_command("/approve 0123456789a"),
            approve(Some("0123456789a"), None)
        );
    }

    #[test]
    fn a_digest_longer_than_sha256_is_refused() {
        let error = only_error(&format!("/approve sha256:{HEX64}0"));
        assert!(error.problem.contains("64 hex digits"), "{error:?}");
        let error = only_error(&format!("/approve {HEX64}0"));
        assert!(error.problem.contains("64 hex digits"), "{error:?}");
    }

    #[test]
    fn a_digest_with_letters_beyond_f_is_refused() {
        let error = only_error("/approve sha256:0123456789xyz");
        assert!(error.problem.contains("not a digest"), "{error:?}");
    }

    #[test]
    fn a_period_after_the_digest_is_refused_and_the_fix_is_the_exact_command() {
        let error = only_error(&format!("/approve sha256:{HEX64}."));
        assert!(error.problem.contains("after the digest"), "{error:?}");
        assert!(
            error.fix.contains(&format!("`/approve sha256:{HEX64}`")),
            "{error:?}"
        );

        let error = only_error("/approve 0123456789abcdef.");
        assert!(
            error.fix.contains("`/approve sha256:0123456789abcdef`"),
            "{error:?}"
        );

        let error = only_error("/approve prod 0123456789abcdef!");
        assert!(
            error
                .fix
                .contains("`/approve prod sha256:0123456789abcdef`"),
            "{error:?}"
        );
    }

    #[test]
    fn a_stage_outside_the_name_rule_is_refused() {
        for stage in ["-prod", "prod!", "_x", "pr*d"] {
            let error = only_error(&format!("/approve {stage}"));
            assert!(error.problem.contains(stage), "{error:?}");
            assert!(error.fix.contains("/approve prod"), "{error:?}");
        }
    }

    #[test]
    fn a_stage_is_named_as_wavegate_toml_names_it() {
        for stage in ["Prod", "eu.west", "prod-2"] {
            assert_eq!(
                only_command(&format!("/approve {stage}")),
                approve(Some(stage), None)
            );
        }
    }

    #[test]
    fn the_second_approve_argument_must_be_a_digest() {
        let error = only_error("/approve prod staging");
        assert_eq!(error.problem, "`staging` is not a digest");
        assert!(error.fix.contains("/approve prod sha256:"), "{error:?}");
    }

    #[test]
    fn the_digest_comes_after_the_stage() {
        let error = only_error(&format!("/approve sha256:{HEX64} prod"));
        assert!(error.fix.contains("/approve <stage> <digest>"), "{error:?}");
    }

    #[test]
    fn approve_takes_at_most_two_arguments() {
        let error = only_error(&format!("/approve prod sha256:{HEX64} please"));
        assert!(error.problem.contains("at most"), "{error:?}");
    }

    #[test]
    fn an_error_names_the_line_and_its_text() {
        let error = only_error("thanks!\n\n  /approve Pr*d  \n");
        assert_eq!(error.line, 3);
        assert_eq!(error.text, "/approve Pr*d");
    }

    #[test]
    fn commands_without_arguments() {
        assert_eq!(only_command("/plan"), Command::Plan { only: vec![] });
        assert_eq!(only_command("/retry"), Command::Retry);
        assert_eq!(only_command("/revoke"), Command::Revoke);
        assert_eq!(only_command("/help"), Command::Help);
    }

    #[test]
    fn text_after_a_command_without_arguments_is_refused_naming_the_form() {
        for (body, form) in [
            ("/retry prod", "`/retry`"),
            ("/revoke all", "`/revoke`"),
            ("/help me", "`/help`"),
        ] {
            let error = only_error(body);
            assert!(error.fix.contains(form), "{error:?}");
        }
    }

    #[test]
    fn override_names_a_member_and_the_reason_is_the_rest_of_the_line() {
        assert_eq!(
            only_command("/override app@prod   the outage fix, approved by  ops  "),
            Command::Override {
                member: "app@prod".into(),
                reason: "the outage fix, approved by  ops".into(),
            }
        );
    }

    #[test]
    fn override_without_a_reason_is_refused() {
        let error = only_error("/override app@prod");
        assert_eq!(error.problem, "an override needs a reason");
        assert!(
            error.fix.contains("`/override app@prod <reason>`"),
            "{error:?}"
        );
        assert_eq!(
            only_error("/override app@prod   ").problem,
            "an override needs a reason"
        );
    }

    #[test]
    fn override_needs_a_component_at_stage_member() {
        for body in [
            "/override app because",
            "/override @prod because",
            "/override app@ because",
        ] {
            let error = only_error(body);
            assert!(error.problem.contains("component@stage"), "{error:?}");
        }
        assert!(only_error("/override")
            .problem
            .contains("needs a member and a reason"));
    }

    #[test]
    fn the_command_word_is_case_insensitive() {
        assert_eq!(only_command("/Approve"), approve(None, None));
        assert_eq!(only_command("/PLAN"), Command::Plan { only: vec![] });
    }

    #[test]
    fn several_commands_in_one_comment_keep_their_order() {
        let body = "Looks good.\n/approve dev\nand then\n/plan\n/approve prod\n";
        assert_eq!(
            parse(body).commands,
            vec![
                approve(Some("dev"), None),
                Command::Plan { only: vec![] },
                approve(Some("prod"), None)
            ]
        );
    }

    #[test]
    fn a_near_miss_of_a_command_is_unknown_and_other_bots_commands_are_ignored() {
        let found = parse("/approved\n/aprove\n/Pln\n/wavegate-status\n/cc @x\n/assign @y\n/lgtm");
        assert_eq!(
            found.unknown,
            vec!["/approved", "/aprove", "/Pln", "/wavegate-status"]
        );
        assert!(found.commands.is_empty() && found.errors.is_empty());
    }

    #[test]
    fn a_transposition_counts_as_one_edit() {
        assert_eq!(parse("/rtery").unknown, vec!["/rtery"]);
        assert!(within_typo_distance("aprpvoe", "approve"));
        assert!(!within_typo_distance("rerun", "retry"));
    }

    #[test]
    fn only_the_start_of_a_line_holds_a_command() {
        nothing_in("please `/approve` this");
        nothing_in("please /approve");
        nothing_in("- /approve");
        nothing_in("/");
    }

    #[test]
    fn up_to_three_spaces_of_indentation_are_allowed() {
        assert_eq!(only_command("   /approve"), approve(None, None));
        nothing_in("    /approve");
        nothing_in("\t/approve");
        nothing_in("text\n    /approve");
    }

    #[test]
    fn fenced_code_is_not_commands() {
        nothing_in("```\n/approve\n```");
        nothing_in("~~~text\n/approve\n~~~");
        nothing_in("  ```sh\n  /approve\n  ```");
        assert_eq!(
            parse("```\n/approve\n```\n/plan").commands,
            vec![Command::Plan { only: vec![] }]
        );
    }

    #[test]
    fn a_fence_closes_only_with_its_own_marker_at_least_as_long() {
        nothing_in("````\n```\n/approve\n````");
        nothing_in("~~~\n```\n/approve\n~~~");
        nothing_in("```\n``` not a close\n/approve\n```");
        assert_eq!(
            parse("~~~~\n/plan\n~~~~~\n/retry").commands,
            vec![Command::Retry]
        );
    }

    #[test]
    fn an_unclosed_fence_runs_to_the_end() {
        nothing_in("Try:\n```\n/approve\n\n/plan\n");
    }

    #[test]
    fn backticks_with_a_backtick_in_the_info_are_inline_code_not_a_fence() {
        assert_eq!(
            parse("```inline``` text\n/plan").commands,
            vec![Command::Plan { only: vec![] }]
        );
    }

    #[test]
    fn a_fence_in_a_list_item_ends_with_the_item() {
        nothing_in("- ```\n  /approve\n\n  ```");
        nothing_in("1. ```\n   /approve\n   ```");
        assert_eq!(
            parse("- ```\n  /approve\n/plan").commands,
            vec![Command::Plan { only: vec![] }]
        );
    }

    #[test]
    fn a_line_continuing_a_quote_is_part_of_the_quote() {
        assert!(parse("> I would say\n/approve\n").commands.is_empty());
        assert_eq!(
            parse("> I would say\n\n/approve\n").commands,
            vec![approve(None, None)]
        );
    }

    #[test]
    fn quoted_lines_are_not_commands() {
        nothing_in("> /approve");
        nothing_in(">/approve");
        nothing_in("> > /approve");
        nothing_in("   > /approve");
        assert_eq!(
            parse("> /approve\n\n/plan").commands,
            vec![Command::Plan { only: vec![] }]
        );
    }

    #[test]
    fn a_fence_opened_in_a_quote_does_not_hide_the_lines_after_the_quote() {
        // Right after the quote, a line is read as part of it (markdown would
        // end the quote here, but refusing a command is the safe mistake);
        // after a blank line it is a command again.
        assert!(parse("> ```\n> /approve\n/plan").commands.is_empty());
        assert_eq!(
            parse("> ```\n> /approve\n\n/plan").commands,
            vec![Command::Plan { only: vec![] }]
        );
    }

    #[test]
    fn text_inside_an_html_comment_is_not_a_command() {
        nothing_in("<!-- wavegate:report\n/approve\n-->");
        nothing_in("Hello <!--\n/approve\n--> bye");
        assert_eq!(
            parse("<!--\n/approve\n-->\n/plan").commands,
            vec![Command::Plan { only: vec![] }]
        );
        assert_eq!(
            parse("<!-- marker -->\n/plan").commands,
            vec![Command::Plan { only: vec![] }]
        );
        assert_eq!(
            parse("<!-->\n/plan").commands,
            vec![Command::Plan { only: vec![] }]
        );
    }

    #[test]
    fn a_comment_after_a_command_is_not_its_argument() {
        assert_eq!(
            only_command("/approve <!-- from the phone -->"),
            approve(None, None)
        );
        assert_eq!(
            parse("/plan <!--\n/approve\n-->").commands,
            vec![Command::Plan { only: vec![] }]
        );
    }

    #[test]
    fn a_fence_marker_inside_an_html_comment_opens_nothing() {
        assert_eq!(
            parse("<!--\n```\n-->\n/plan").commands,
            vec![Command::Plan { only: vec![] }]
        );
    }

    #[test]
    fn windows_line_endings() {
        let found = parse("Ship it\r\n/approve prod\r\n/override app@prod hotfix\r\n");
        assert_eq!(
            found.commands,
            vec![
                approve(Some("prod"), None),
                Command::Override {
                    member: "app@prod".into(),
                    reason: "hotfix".into()
                }
            ]
        );
    }

    #[test]
    fn a_full_digest_matches_only_itself() {
        let reference = full();
        assert!(reference.matches(&digest(&format!("sha256:{HEX64}"))));
        let other = digest(&format!("sha256:{}0", &HEX64[..63]));
        assert!(!reference.matches(&other));
    }

    #[test]
    fn a_prefix_matches_the_digests_that_start_with_it() {
        let reference = DigestRef::Prefix("0123456789ab".into());
        assert!(reference.matches(&digest(&format!("sha256:{HEX64}"))));
        assert!(!reference.matches(&digest(&format!("sha256:f{}", &HEX64[1..]))));
    }

    #[test]
    fn a_reference_as_text_reads_back_as_itself() {
        for reference in [full(), DigestRef::Prefix("0123456789ab".into())] {
            let body = format!("/approve {}", reference.as_text());
            assert_eq!(only_command(&body), approve(None, Some(reference)));
        }
    }

    #[test]
    fn help_lists_every_command() {
        insta::assert_snapshot!(help_text(), @"
        wavegate commands: write each at the start of its own line, outside code blocks and quotes.

        - `/approve [stage [wave <k>]] [digest]` — approve the newest plan, for every stage or only the one named (or one wave of a stage approved wave by wave); give the report's digest (`sha256:…`, or its first 12 or more hex digits) to approve exactly the plan you read
        - `/plan [targets]` — plan this pull request again now: everything, or only the targets named (`app`, `app@prod`, `-d <dir>`, `-w <workspace>`) and what reads them, the rest kept from the plan of the same commit
        - `/retry` — resume an apply that failed or was stopped
        - `/revoke` — withdraw your approval of this pull request
        - `/override <member> <reason>` — let a plan the policy denied through for one member (`component@stage`), saying why; for the policy's overriders only
        - `/help` — show this list
        ");
    }

    #[test]
    fn help_names_every_declared_command_with_its_summary() {
        let help = help_text();
        for spec in COMMANDS {
            assert!(
                help.contains(&format!("`/{}", spec.name)),
                "{} is missing",
                spec.name
            );
        }
    }

    /// Every usage, with its placeholders filled in and with its optional parts
    /// left out, reads as the command it declares.
    #[test]
    fn every_declared_usage_parses_into_its_command() {
        let samples = [
            ("[stage]", "prod".to_owned()),
            ("[targets]", "app@prod -d envs/prod/app".to_owned()),
            ("[stage [wave <k>]]", "prod wave 2".to_owned()),
            ("[digest]", format!("sha256:{HEX64}")),
            ("<member>", "app@prod".to_owned()),
            ("<reason>", "the outage fix".to_owned()),
        ];
        let fill = |usage: &str| {
            samples
                .iter()
                .fold(usage.to_owned(), |text, (placeholder, sample)| {
                    text.replace(placeholder, sample)
                })
        };
        for spec in COMMANDS {
            let without_optionals = samples
                .iter()
                .filter(|(placeholder, _)| placeholder.starts_with('['))
                .fold(spec.usage.to_owned(), |text, (placeholder, _)| {
                    text.replace(&format!(" {placeholder}"), "")
                });
            let filled = fill(spec.usage);
            let bare = fill(&without_optionals);
            for body in [filled, bare] {
                assert!(
                    !body.contains(['<', '[']),
                    "`{}`: the test has no sample for a placeholder in `{body}`",
                    spec.name
                );
                assert_eq!(only_command(&body).name(), spec.name, "`{body}`");
            }
        }
    }

    #[test]
    fn in_a_long_body_each_fence_hides_the_command_after_it() {
        let unit = "/approve prod\n```\n";
        let units = 65536 / unit.len();
        let found = parse(&unit.repeat(units));
        assert_eq!(found.commands.len(), units.div_ceil(2));
    }

    // Read as CommonMark: HTML elements, CommonMark's own subtleties, and
    // what a reader sees.

    #[test]
    fn an_html_blockquote_is_a_quote() {
        nothing_in("<blockquote>\n/approve\n</blockquote>");
        nothing_in("<blockquote>\n\n/approve\n\n</blockquote>");
        nothing_in("<blockquote><p>\n/approve\n</p></blockquote>");
        nothing_in("Earlier:\n<blockquote>\n\n> /approve\n\n/approve prod\n\n</blockquote>");
        assert_eq!(
            parse("<blockquote>\n\n/approve\n\n</blockquote>\n\n/plan").commands,
            vec![Command::Plan { only: vec![] }]
        );
        assert_eq!(
            parse("<BlockQuote cite=\"x\">\n\n/approve\n\n</blockquote>\n/plan").commands,
            vec![Command::Plan { only: vec![] }],
            "after the closing tag's line, the HTML block's own lines count"
        );
    }

    #[test]
    fn html_pre_and_code_are_code() {
        nothing_in("<pre>\n/approve\n</pre>");
        nothing_in("<pre>\n\n/approve\n\n</pre>");
        nothing_in("<code>/approve</code>");
        nothing_in("<code>\n/approve\n</code>");
        nothing_in("<code>\n\n/approve\n\n</code>");
        nothing_in("See <code>\n/approve\n</code> for how.");
        nothing_in("<pre><code>\n\n/approve\n\n</code></pre>");
        assert_eq!(
            parse("<pre>\n/approve\n</pre>\n\n/plan").commands,
            vec![Command::Plan { only: vec![] }]
        );
    }

    #[test]
    fn other_html_that_shows_code_quotes_or_strikes_out_hides_too() {
        for tag in ["q", "kbd", "samp", "tt", "del", "s", "strike"] {
            nothing_in(&format!("x <{tag}>\n/approve\n</{tag}>"));
        }
        nothing_in("<script>\n\n/approve\n\n</script>");
        nothing_in("<textarea>\n\n/approve\n\n</textarea>");
    }

    #[test]
    fn an_element_left_open_hides_everything_after_it() {
        nothing_in("Here is how: <code>\n\n/approve\n\nand more\n\n/plan");
    }

    #[test]
    fn text_in_details_counts_like_any_text() {
        // A reader sees it once the block is expanded.
        let prod = approve(Some("prod"), None);
        assert_eq!(
            only_command("<details>\n<summary>Notes</summary>\n\n/approve prod\n\n</details>"),
            prod
        );
        assert_eq!(
            only_command("<details>\n<summary>Notes</summary>\n/approve prod\n</details>"),
            prod
        );
        assert_eq!(
            only_command("<details><summary>Plan notes</summary>\n\n<div>\n/approve prod\n</div>\n</details>"),
            prod
        );
        assert_eq!(
            only_command("<div>\nLooks good.\n</div>\n/approve prod"),
            prod
        );
        nothing_in("<details>\n<summary>/approve</summary>\n</details>");
    }

    #[test]
    fn in_an_html_block_more_than_three_spaces_of_indentation_is_not_a_command() {
        nothing_in("<div>\n    /approve\n</div>");
    }

    #[test]
    fn a_comment_in_the_middle_of_a_command_is_left_out() {
        assert_eq!(
            only_command("/approve <!-- no: --> prod"),
            approve(Some("prod"), None)
        );
        assert_eq!(
            only_command("<div>\n/approve <!-- x --> prod\n</div>"),
            approve(Some("prod"), None)
        );
    }

    #[test]
    fn lazy_continuation_lines_belong_to_their_quote() {
        nothing_in("> I'd say\nsomething like\n/approve");
        nothing_in("> > nested\n/approve");
        nothing_in("> a\n>\n/approve");
        nothing_in("> a\n<div>\n/approve\n</div>");
        assert_eq!(
            parse("> a\n>\n\n/approve").commands,
            vec![approve(None, None)]
        );
    }

    #[test]
    fn list_items_are_not_commands() {
        // A list item reads as an entry of a list (a checklist, steps to
        // take), not as something said to the bot: none of its lines counts,
        // the lines markdown folds into it included.
        nothing_in("- /approve");
        nothing_in("* /approve prod");
        nothing_in("1. /approve");
        nothing_in("- [x] /approve");
        nothing_in("- checked dns\n/approve");
        nothing_in("- checked dns\n\n  /approve");
        assert_eq!(
            parse("- checked dns\n\n/approve").commands,
            vec![approve(None, None)]
        );
    }

    #[test]
    fn code_spans_escapes_and_markup_are_not_a_command_word() {
        nothing_in("`/approve`");
        nothing_in("``\n/approve\n``");
        nothing_in("\\/approve");
        nothing_in("&#47;approve");
        nothing_in("**/approve**");
        nothing_in("[/approve](https://example.invalid)");
        nothing_in("![a picture of\n/approve](https://example.invalid/x.png)");
        nothing_in("# /approve");
    }

    #[test]
    fn a_command_underlined_as_a_heading_still_counts() {
        // As it did before markdown was read: `/approve` then a `---` rule.
        assert_eq!(only_command("/approve\n---\nnotes"), approve(None, None));
    }

    #[test]
    fn arguments_are_read_as_written() {
        // The reader sees `prod` in bold; the bot refuses with a reason
        // rather than guess at markup.
        let error = only_error("/approve **prod**");
        assert!(error.problem.contains("`**prod**`"), "{error:?}");
        let error = only_error("/approve <b>prod</b>");
        assert!(error.problem.contains("<b>prod</b>"), "{error:?}");
    }
}
