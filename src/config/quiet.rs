//! `quiet`: the lines of a successful plan command's output that the report
//! leaves out of "What the plan command printed" (`[defaults]` or a
//! component's own). A tool's chatter — `terraform init`, state refreshes,
//! advice to apply a plan file the job removes — would otherwise fill the
//! few lines a report shows. A failed plan always shows everything, and the
//! server's log keeps every line.
//!
//! Written as a built-in set (`quiet = "terraform"`, the same for
//! `"tofu"`) or as line patterns (`quiet = ["Switched to workspace", "*:
//! Refreshing state..."]`): a line is quiet when, without its leading
//! spaces, it starts with a pattern, or contains what follows a leading `*`.

use serde::{Deserialize, Serialize};

/// `quiet` as written.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub(crate) enum RawQuiet {
    /// A built-in set: `"terraform"` or `"tofu"`.
    Set(String),
    /// Line patterns of the repository's own.
    Patterns(Vec<String>),
}

/// What Terraform and OpenTofu print around a plan that a reviewer does
/// not need: `init`, workspace selection, state refresh and locking, and
/// the advice that follows `plan -out`.
const TERRAFORM: &[&str] = &[
    "Initializing the backend",
    "Initializing provider plugins",
    "Initializing modules",
    "Initializing HCP Terraform",
    "Initializing OpenTofu",
    "- Finding ",
    "- Installing ",
    "- Installed ",
    "- Using previously-installed ",
    "- Reusing previous version of ",
    "- terraform.io/builtin/",
    "Partner and community providers are signed",
    "If you'd like to know more about provider signing",
    "https://www.terraform.io/docs/cli/plugins/signing.html",
    "Terraform has created a lock file",
    "OpenTofu has created a lock file",
    "selections it made above. Include this file",
    "so that Terraform can guarantee to make the same selections",
    "so that OpenTofu can guarantee to make the same selections",
    "you run \"terraform init\" in the future.",
    "you run \"tofu init\" in the future.",
    "Terraform has been successfully initialized",
    "OpenTofu has been successfully initialized",
    "You may now begin working with",
    "any changes that are required for your infrastructure",
    "should now work.",
    "If you ever set or change modules or backend configuration",
    "rerun this command to reinitialize your working directory",
    "commands will detect it and remind you to do so if necessary.",
    "Switched to workspace",
    "Created and switched to workspace",
    "You're now on a new, empty workspace",
    "Acquiring state lock",
    "Releasing state lock",
    "*: Refreshing state...",
    "*: Reading...",
    "*: Read complete after",
    "Saved the plan to:",
    "To perform exactly these actions, run the following command to apply:",
    "terraform apply \"",
    "tofu apply \"",
    "Note: You didn't use the -out option",
];

impl RawQuiet {
    /// The patterns it stands for, or what is wrong and how to write it.
    pub(crate) fn patterns(&self) -> Result<Vec<String>, (String, &'static str)> {
        match self {
            RawQuiet::Set(name) if name == "terraform" || name == "tofu" => {
                Ok(TERRAFORM.iter().map(|p| (*p).to_owned()).collect())
            }
            RawQuiet::Set(name) => Err((
                format!("`{name}` is not a built-in set"),
                "write `quiet = \"terraform\"` (or \"tofu\"), or a list of line patterns like `quiet = [\"Switched to workspace\"]`",
            )),
            RawQuiet::Patterns(patterns) => {
                if let Some(blank) = patterns
                    .iter()
                    .find(|p| p.trim().is_empty() || p.trim() == "*")
                {
                    return Err((
                        format!("`{blank}` would quiet every line"),
                        "give each pattern some text: a line's start, or `*text` for text anywhere in it",
                    ));
                }
                Ok(patterns.clone())
            }
        }
    }
}

/// Whether `line` is one `patterns` quiet (read without colour and other
/// terminal escapes, as the report shows it).
fn is_quiet(line: &str, patterns: &[String]) -> bool {
    let line = crate::model::untrusted::clean(line, crate::model::untrusted::Lines::Fold);
    let line = line.trim_start();
    patterns.iter().any(|p| match p.strip_prefix('*') {
        Some(anywhere) => line.contains(anywhere),
        None => line.starts_with(p.as_str()),
    })
}

/// `output` without the lines `patterns` quiet, with runs of blank lines
/// that leaves folded into one and a last line saying how many were left
/// out; `output` itself when none are.
pub(crate) fn quieted(output: &str, patterns: &[String]) -> String {
    if patterns.is_empty() {
        return output.to_owned();
    }
    let mut kept: Vec<&str> = Vec::new();
    let mut left_out = 0;
    for line in output.lines() {
        if is_quiet(line, patterns) {
            left_out += 1;
        } else if !(line.trim().is_empty() && kept.last().is_none_or(|last| last.trim().is_empty()))
        {
            kept.push(line);
        }
    }
    if left_out == 0 {
        return output.to_owned();
    }
    while kept.last().is_some_and(|l| l.trim().is_empty()) {
        kept.pop();
    }
    kept.push("");
    let note = format!(
        "({left_out} line{} quiet under `quiet` in wavegate.toml left out; the server's log has them)",
        if left_out == 1 { "" } else { "s" }
    );
    let mut out = kept.join("\n");
    out.push('\n');
    out.push_str(&note);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const INIT_AND_PLAN: &str = "\
Initializing the backend...

Initializing provider plugins...
- terraform.io/builtin/terraform is built in to Terraform

Terraform has been successfully initialized!
aws_vpc.main: Refreshing state... [id=vpc-1]

Terraform will perform the following actions:
  + terraform_data.app will be created
Plan: 1 to add, 0 to change, 0 to destroy.

Saved the plan to: /tmp/job/tfplan

To perform exactly these actions, run the following command to apply:
    terraform apply \"/tmp/job/tfplan\"
";

    #[test]
    fn the_terraform_set_leaves_init_refresh_and_the_apply_advice_out() {
        let patterns = RawQuiet::Set("terraform".into()).patterns().unwrap();
        assert_eq!(
            quieted(INIT_AND_PLAN, &patterns),
            "Terraform will perform the following actions:\n  + terraform_data.app will be created\nPlan: 1 to add, 0 to change, 0 to destroy.\n\n(8 lines quiet under `quiet` in wavegate.toml left out; the server's log has them)"
        );
    }

    #[test]
    fn own_patterns_match_a_lines_start_or_with_a_star_anywhere() {
        let patterns = RawQuiet::Patterns(vec!["Plan:".into(), "*will be created".into()])
            .patterns()
            .unwrap();
        let shown = quieted("keep\n  + x will be created\nPlan: 1 to add", &patterns);
        assert!(shown.starts_with("keep\n\n(2 lines quiet"), "{shown}");
        assert_eq!(quieted("nothing quiet", &patterns), "nothing quiet");
        assert_eq!(quieted("x", &[]), "x");
    }

    #[test]
    fn coloured_output_is_quieted_as_the_report_shows_it() {
        let patterns = RawQuiet::Set("terraform".into()).patterns().unwrap();
        let shown = quieted(
            "\u{1b}[1mInitializing the backend...\u{1b}[0m\nPlan: 1 to add",
            &patterns,
        );
        assert!(
            shown.starts_with("Plan: 1 to add\n\n(1 line quiet"),
            "{shown}"
        );
    }

    #[test]
    fn an_unknown_set_or_an_empty_pattern_says_how_to_write_it() {
        let (problem, fix) = RawQuiet::Set("pulumi".into()).patterns().unwrap_err();
        assert_eq!(problem, "`pulumi` is not a built-in set");
        assert!(fix.contains("quiet = \"terraform\""));
        assert!(RawQuiet::Patterns(vec![" ".into()]).patterns().is_err());
        assert!(RawQuiet::Patterns(vec!["*".into()]).patterns().is_err());
    }
}
