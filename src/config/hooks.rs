//! Hooks: a team's own commands around each stage's plan, gate and apply
//! (`[[hooks.<before|after>.<moment>]]` at the top level, for every stage,
//! and `[[stage.hooks.…]]` for one). What is written here is read from the
//! base branch only, like `[policy]`: a pull request cannot add or drop a
//! hook, or change its command line or `on_failure`, around its own apply
//! (the files it runs are the merge commit's, like every command's). The
//! commands run in the sandbox like any repository command.

use super::check::{parse_duration, placeholders, ConfigError, Template};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

/// How long a hook may run when it does not say.
const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// Placeholders a hook's command may use.
const HOOK_PLACEHOLDERS: &[&str] = &["members_file", "member", "plan_file", "stage", "root"];

/// `hooks` as written: `before.{plan,apply}` and `after.{plan,gate,apply}`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHooks {
    #[serde(default)]
    pub(crate) before: RawBefore,
    #[serde(default)]
    pub(crate) after: RawAfter,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBefore {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) plan: Vec<RawHook>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) apply: Vec<RawHook>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAfter {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) plan: Vec<RawHook>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) gate: Vec<RawHook>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) apply: Vec<RawHook>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHook {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    pub(crate) command: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) on_failure: Option<OnFailure>,
    #[serde(default)]
    pub(crate) per_member: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) timeout: Option<String>,
}

/// When in a stage a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(crate) enum Moment {
    /// Before anything of the stage is planned in a job.
    #[serde(rename = "before.plan")]
    BeforePlan,
    /// Once the stage's plans are made, before its gate decides.
    #[serde(rename = "after.plan")]
    AfterPlan,
    /// Once the stage's gate has decided, whatever it decided.
    #[serde(rename = "after.gate")]
    AfterGate,
    /// Before each wave's applies start, with the plans they apply.
    #[serde(rename = "before.apply")]
    BeforeApply,
    /// After each wave's applies ended, with the members that applied.
    #[serde(rename = "after.apply")]
    AfterApply,
}

impl Moment {
    pub(crate) const ALL: [Moment; 5] = [
        Moment::BeforePlan,
        Moment::AfterPlan,
        Moment::AfterGate,
        Moment::BeforeApply,
        Moment::AfterApply,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Moment::BeforePlan => "before.plan",
            Moment::AfterPlan => "after.plan",
            Moment::AfterGate => "after.gate",
            Moment::BeforeApply => "before.apply",
            Moment::AfterApply => "after.apply",
        }
    }

    /// Whether a hook here may hold the stage (`on_failure = "approve"`, or
    /// a hold on another gate): not once the gate decided or the wave applied.
    pub(crate) fn may_hold(self) -> Option<&'static str> {
        match self {
            Moment::AfterGate => Some("the gate has already decided"),
            Moment::AfterApply => Some("nothing is left to hold"),
            _ => None,
        }
    }

    fn of(self, raw: &RawHooks) -> &[RawHook] {
        match self {
            Moment::BeforePlan => &raw.before.plan,
            Moment::AfterPlan => &raw.after.plan,
            Moment::AfterGate => &raw.after.gate,
            Moment::BeforeApply => &raw.before.apply,
            Moment::AfterApply => &raw.after.apply,
        }
    }
}

impl fmt::Display for Moment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a failing hook does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OnFailure {
    /// Nothing more of the stage goes on; the run fails (`/retry` runs it again).
    #[default]
    Fail,
    /// The failure waits for `/approve` of the hook's gate.
    Approve,
}

/// A validated hook.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Hook {
    /// Unique in the file: its gate is `pr-<n>-hook-<name>`.
    pub(crate) name: String,
    pub(crate) moment: Moment,
    pub(crate) command: Vec<String>,
    pub(crate) on_failure: OnFailure,
    /// One call per member, with `{member}` and `{plan_file}`.
    pub(crate) per_member: bool,
    pub(crate) timeout: Duration,
}

/// Every hook of a file: the top level's, then each stage's.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Hooks {
    top: Vec<Hook>,
    stages: Vec<(String, Vec<Hook>)>,
}

impl Hooks {
    /// The hooks at `moment` of `stage`: the top level's first, in file order.
    pub(crate) fn at(&self, stage: &str, moment: Moment) -> Vec<Hook> {
        let own = self
            .stages
            .iter()
            .filter(|(s, _)| s == stage)
            .flat_map(|(_, hooks)| hooks);
        self.top
            .iter()
            .chain(own)
            .filter(|h| h.moment == moment)
            .cloned()
            .collect()
    }
}

/// Checks the top level's hooks and each stage's (`stages`: name and
/// hooks as written) and names each.
pub(crate) fn validate(
    top: Option<&RawHooks>,
    stages: &[(String, Option<&RawHooks>)],
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<Hooks, ConfigError> {
    let mut names = BTreeSet::new();
    let top = match top {
        Some(raw) => validate_one(raw, "hooks", None, &mut names, err)?,
        None => Vec::new(),
    };
    let mut per_stage = Vec::new();
    for (i, (stage, raw)) in stages.iter().enumerate() {
        if let Some(raw) = raw {
            let at = format!("stage[{i}] ({stage}).hooks");
            per_stage.push((
                stage.clone(),
                validate_one(raw, &at, Some(stage), &mut names, err)?,
            ));
        }
    }
    Ok(Hooks {
        top,
        stages: per_stage,
    })
}

fn validate_one(
    raw: &RawHooks,
    at: &str,
    stage: Option<&str>,
    names: &mut BTreeSet<String>,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<Vec<Hook>, ConfigError> {
    let mut hooks = Vec::new();
    for moment in Moment::ALL {
        for (i, hook) in moment.of(raw).iter().enumerate() {
            let field = |f: &str| format!("{at}.{moment}[{i}].{f}");
            let name = match &hook.name {
                Some(name) => {
                    check_hook_name(name).map_err(|p| {
                        err(
                            field("name"),
                            p,
                            "use lowercase letters, digits and `-`, at most 48, e.g. `change-window`",
                        )
                    })?;
                    name.clone()
                }
                None => {
                    let moment = moment.as_str().replace('.', "-");
                    match stage {
                        Some(stage) => format!("{stage}-{moment}-{}", i + 1),
                        None => format!("{moment}-{}", i + 1),
                    }
                }
            };
            if !names.insert(name.clone()) {
                return Err(err(
                    field("name"),
                    format!("hook `{name}` is defined twice"),
                    "give each hook a distinct `name`: its gate is named after it",
                ));
            }
            let on_failure = hook.on_failure.unwrap_or_default();
            if on_failure == OnFailure::Approve {
                if let Some(why) = moment.may_hold() {
                    return Err(err(
                        field("on_failure"),
                        format!("`approve` cannot be used at {moment}: {why}"),
                        "use `on_failure = \"fail\"` here, or move the hook to before.plan, after.plan or before.apply",
                    ));
                }
            }
            check_hook_command(&hook.command, moment, hook.per_member)
                .map_err(|(p, fix)| err(field("command"), p, &fix))?;
            let timeout = match &hook.timeout {
                Some(t) => parse_duration(t).map_err(|p| {
                    err(
                        field("timeout"),
                        p,
                        "use a number and a unit: ms, s, m, h, d",
                    )
                })?,
                None => DEFAULT_HOOK_TIMEOUT,
            };
            hooks.push(Hook {
                name,
                moment,
                command: hook.command.clone(),
                on_failure,
                per_member: hook.per_member,
                timeout,
            });
        }
    }
    Ok(hooks)
}

/// A hook's or a hold's gate name: it becomes part of `pr-<n>-hook-<name>`.
pub(crate) fn check_hook_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!("`{name}` is not a hook name"))
    }
}

fn check_hook_command(
    argv: &[String],
    moment: Moment,
    per_member: bool,
) -> Result<(), (String, String)> {
    let template = Template {
        what: Some("a hook"),
        allowed: HOOK_PLACEHOLDERS,
        example: "[\"./ci/check.sh\", \"{members_file}\"]",
        also: "",
        needs: None,
    };
    template.check(argv)?;
    for name in argv.iter().flat_map(|arg| placeholders(arg)) {
        if matches!(name, "member" | "plan_file") && !per_member {
            return Err((
                format!("`{{{name}}}` names one member, and the hook runs once for them all"),
                "set `per_member = true` (one call per member), or read every member from `{members_file}`".into(),
            ));
        }
        if name == "plan_file" && moment == Moment::BeforePlan {
            return Err((
                "`{plan_file}` at before.plan: nothing is planned yet".into(),
                "move the hook to after.plan or before.apply, or drop `{plan_file}`".into(),
            ));
        }
    }
    Ok(())
}
