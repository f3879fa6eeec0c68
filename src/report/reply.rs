//! What the bot says when a pull request cannot be planned for a reason on
//! the repository's side (a broken `wavegate.toml`, a fork the policy does not
//! allow, a commit that cannot be fetched): what happened and what to do.
//!
//! Each is written into the report comment itself, so the next good plan
//! replaces it, and the check carries the same words.

use super::REPORT_MARKER;
use crate::config::ConfigError;
use crate::model::untrusted::{code, fenced, message};

/// A reply: its comment body and the check's one-line title.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) title: String,
    pub(crate) body: String,
}

fn compose(title: &str, what: &str, fix: &str) -> Reply {
    Reply {
        title: title.to_owned(),
        body: format!("{REPORT_MARKER}\n## wavegate plan\n\n❌ **{title}**\n\n{what}\n\n**What to do:** {fix}\n"),
    }
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// The head's `wavegate.toml` is missing or invalid.
pub(crate) fn config_error(error: &ConfigError, head: &str) -> Reply {
    let place = if error.field.is_empty() {
        code(&error.file)
    } else {
        format!("{}, field {}", code(&error.file), code(&error.field))
    };
    compose(
        &format!("{} cannot be read", error.file),
        &format!(
            "At `{}`, {place}: {}.\n\nNothing was planned, so there is nothing to approve yet.",
            short(head),
            message(&error.problem)
        ),
        &format!(
            "{}. Push the fix to this branch and wavegate plans again.",
            message(&capitalise(&error.fix))
        ),
    )
}

/// The pull request comes from a fork and the base branch's policy does not allow that.
pub(crate) fn fork_refused(fork: &str, base_ref: &str) -> Reply {
    compose(
        "Pull requests from forks are not planned here",
        &format!(
            "This pull request comes from {}. Planning runs the repository's plan commands on the pull request's code, and `policy.allow_forks` is not `true` in `wavegate.toml` on `{base_ref}`, so wavegate did not run anything.",
            code(fork)
        ),
        "push the branch to this repository and open the pull request from there, or ask a maintainer to set `allow_forks = true` under `[policy]` on the base branch if running forks' code is acceptable.",
    )
}

/// The server's sandbox cannot run commands, so nothing was planned.
pub(crate) fn sandbox_unavailable(problem: &str) -> Reply {
    compose(
        "wavegate's sandbox is unavailable on its server",
        &format!(
            "Plan commands are code from the pull request, and this server runs them only in its sandbox, which cannot start: {}. Nothing was run.",
            message(problem)
        ),
        "the server's operator fixes the sandbox (or sets `WAVEGATE_SANDBOX=none` knowingly) and restarts wavegate; then comment `/plan`.",
    )
}

/// The plan could not be computed from the repository as it is (a revision
/// that does not resolve, a stage that does not exist).
pub(crate) fn plan_refused(problem: &str, head: &str) -> Reply {
    compose(
        "This pull request cannot be planned",
        &format!("At `{}`: {}.", short(head), message(problem)),
        "fix the repository so the change can be planned and push again; comment `/plan` to try again without a push.",
    )
}

/// The job gave up after retries on an error on wavegate's side.
pub(crate) fn gave_up(attempts: u32, error: &str) -> Reply {
    const SHOWN: usize = 2000;
    let shown: String = error.chars().take(SHOWN).collect();
    let error = if shown.len() < error.len() {
        format!("{shown} … (cut; the whole error is in wavegate's log)")
    } else {
        shown
    };
    compose(
        "wavegate could not plan this pull request",
        &format!(
            "It tried {attempts} times; the last error was:\n\n{}",
            fenced(&error, "")
        ),
        "this is usually temporary (the forge or the network); push again or re-run the `wavegate/plan` check. If it persists, the operator will find the job in wavegate's dead-letter list.",
    )
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_config_says_where_and_how_to_fix_it() {
        let error = ConfigError {
            file: "wavegate.toml".into(),
            field: "components.app.depends_on".into(),
            problem: "`db` is not a component".into(),
            fix: "name a component declared in this file, or remove it".into(),
        };
        let reply = config_error(&error, &"a".repeat(40));
        assert_eq!(reply.title, "wavegate.toml cannot be read");
        insta::assert_snapshot!(reply.body, @r"
        <!-- wavegate:report -->
        ## wavegate plan

        ❌ **wavegate.toml cannot be read**

        At `aaaaaaaaaaaa`, `wavegate.toml`, field `components.app.depends_on`: `db` is not a component.

        Nothing was planned, so there is nothing to approve yet.

        **What to do:** Name a component declared in this file, or remove it. Push the fix to this branch and wavegate plans again.
        ");
    }

    #[test]
    fn a_fork_refusal_names_the_fork_and_the_policy() {
        let reply = fork_refused("mallory/infra", "main");
        insta::assert_snapshot!(reply.body, @r"
        <!-- wavegate:report -->
        ## wavegate plan

        ❌ **Pull requests from forks are not planned here**

        This pull request comes from `mallory/infra`. Planning runs the repository's plan commands on the pull request's code, and `policy.allow_forks` is not `true` in `wavegate.toml` on `main`, so wavegate did not run anything.

        **What to do:** push the branch to this repository and open the pull request from there, or ask a maintainer to set `allow_forks = true` under `[policy]` on the base branch if running forks' code is acceptable.
        ");
    }

    #[test]
    fn giving_up_quotes_the_error_without_breaking_the_code_block() {
        let reply = gave_up(5, "git fetch failed\n```oops");
        assert!(reply.body.contains("It tried 5 times"));
        assert!(
            reply
                .body
                .contains("````\ngit fetch failed\n```oops\n````\n"),
            "{}",
            reply.body
        );
    }
}
