//! `cost`: the command that prices a stage's plans (`[cost]` for every
//! stage, `[stage.cost]` for one, which replaces the top level's there).
//! Read from the base branch only, like `[policy]` and hooks: a pull request
//! cannot change how its own cost is reckoned, nor dodge
//! `[policy] max_monthly_increase` with a command that prices it at nothing
//! (the files it runs are the merge commit's, like every command's).

use super::check::{parse_duration, ConfigError, Template};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The component name of each stage's cost member (`cost@<stage>`): no
/// component of a repository's may have it where a cost command is set.
pub(crate) const COST_COMPONENT: &str = "cost";
/// How long a cost command may run when it does not say.
const DEFAULT_COST_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// Placeholders a cost command may use.
const COST_PLACEHOLDERS: &[&str] = &["members_file", "cost_file", "stage", "root"];

/// `cost` as written.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCost {
    pub(crate) command: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) timeout: Option<String>,
}

/// A validated cost command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CostCommand {
    pub(crate) command: Vec<String>,
    pub(crate) timeout: Duration,
}

/// Every stage's cost command: its own, else the top level's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CostCommands {
    top: Option<CostCommand>,
    stages: Vec<(String, CostCommand)>,
}

impl CostCommands {
    pub(crate) fn at(&self, stage: &str) -> Option<&CostCommand> {
        self.stages
            .iter()
            .find(|(s, _)| s == stage)
            .map(|(_, c)| c)
            .or(self.top.as_ref())
    }

    pub(crate) fn any(&self) -> bool {
        self.top.is_some() || !self.stages.is_empty()
    }
}

/// Checks the top level's cost command and each stage's (`stages`: name and
/// its `cost` as written), and that no component takes the cost member's name.
pub(crate) fn validate(
    top: Option<&RawCost>,
    stages: &[(String, Option<&RawCost>)],
    components: &[String],
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<CostCommands, ConfigError> {
    let top = top.map(|raw| validate_one(raw, "cost", err)).transpose()?;
    let mut per_stage = Vec::new();
    for (i, (stage, raw)) in stages.iter().enumerate() {
        if let Some(raw) = raw {
            let at = format!("stage[{i}] ({stage}).cost");
            per_stage.push((stage.clone(), validate_one(raw, &at, err)?));
        }
    }
    let commands = CostCommands {
        top,
        stages: per_stage,
    };
    if commands.any() {
        if let Some(i) = components.iter().position(|c| c == COST_COMPONENT) {
            return Err(err(
                format!("component[{i}].name"),
                format!("`{COST_COMPONENT}` is the name of each stage's cost member (`{COST_COMPONENT}@<stage>`) where a cost command is set"),
                "rename the component",
            ));
        }
    }
    Ok(commands)
}

fn validate_one(
    raw: &RawCost,
    at: &str,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<CostCommand, ConfigError> {
    let field = |f: &str| format!("{at}.{f}");
    let template = Template {
        what: Some("a cost command"),
        allowed: COST_PLACEHOLDERS,
        example: "[\"./ci/cost.sh\", \"{members_file}\", \"{cost_file}\"]",
        also: "",
        needs: Some((
            "cost_file",
            "the command is not told where to write its figures",
            "pass `{cost_file}`: the command writes Infracost's JSON there",
        )),
    };
    template
        .check(&raw.command)
        .map_err(|(problem, fix)| err(field("command"), problem, &fix))?;
    let timeout = match &raw.timeout {
        Some(t) => parse_duration(t).map_err(|p| {
            err(
                field("timeout"),
                p,
                "use a number and a unit: ms, s, m, h, d",
            )
        })?,
        None => DEFAULT_COST_TIMEOUT,
    };
    Ok(CostCommand {
        command: raw.command.clone(),
        timeout,
    })
}
