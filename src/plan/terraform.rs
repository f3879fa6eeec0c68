//! The Terraform/OpenTofu adapters (docs/plan-files.md, docs/terraform.md):
//! [`adapt_terraform`] turns the output of
//! `terraform show -json PLANFILE` (or `tofu show -json PLANFILE`) into a plan
//! file; [`adapt_terraform_outputs`] turns `terraform output -json` into the
//! flat outputs file apply and outputs commands write, and
//! [`is_wrapped_outputs`] recognises the wrapped form when it is written
//! there unflattened; [`adapt_terraform_vars`] turns an inputs file into a
//! `.tfvars.json`. docs/terraform.md shows the scripts that use them.
//!
//! What it produces is checked by [`MemberPlan::parse`](super::planfile::MemberPlan::parse)
//! like any other plan command's file. Values, sensitive ones included, stay
//! in `after` and `outputs.known` because the digest must bind them; the
//! summary goes into a pull request comment, so it names sensitive attributes
//! and outputs but never shows their values.
//!
//! A resource whose whole planned value is unknown (`after_unknown: true`)
//! gets `after: null` and no unknown paths: the plan-file grammar marks parts
//! of a value, and there is no part to name.

use super::path::ValuePath;
use super::planfile::{kind_of, Action};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};

const PIPE_A_PLAN: &str = "pipe the output of `terraform show -json PLANFILE`";
const LONGEST_SHOWN_OUTPUT: usize = 200;

/// Why a `terraform show -json` document cannot become a plan file, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum AdaptError {
    #[error("the input is not JSON ({0}); {PIPE_A_PLAN}")]
    NotJson(String),
    #[error("the input is {found}, not the JSON object terraform prints; {PIPE_A_PLAN}")]
    NotAnObject { found: &'static str },
    #[error("the input is a Terraform state, not a plan (`terraform show -json` without a PLANFILE prints the state); run `terraform plan -out=PLANFILE` and pass the output of `terraform show -json PLANFILE`")]
    StateNotPlan,
    #[error("the input has no `resource_changes`, `output_changes` or `planned_values`, so it is not a plan; {PIPE_A_PLAN}")]
    NotAPlan,
    #[error(
        "terraform reported the plan as errored; fix the errors terraform printed and plan again"
    )]
    Errored,
    #[error("the plan JSON has format_version {0}, but wavegate reads format 1.x; plan with a Terraform or OpenTofu release that writes format 1.x, or upgrade wavegate")]
    UnsupportedFormat(String),
    #[error("the input does not have the shape of `terraform show -json` output ({0}); {PIPE_A_PLAN}, unmodified")]
    Shape(String),
    #[error("{address}: terraform plans the actions {actions:?}, which wavegate does not understand; plan this change without the adapter or upgrade wavegate")]
    UnsupportedActions {
        address: String,
        actions: Vec<String>,
    },
}

#[derive(Deserialize)]
struct ShowJson {
    format_version: Option<String>,
    resource_changes: Option<Vec<ResourceChange>>,
    output_changes: Option<BTreeMap<String, Change>>,
    resource_drift: Option<Vec<ResourceChange>>,
}

#[derive(Deserialize)]
struct ResourceChange {
    address: String,
    deposed: Option<String>,
    previous_address: Option<String>,
    change: Change,
}

impl ResourceChange {
    fn unique_address(&self) -> String {
        match &self.deposed {
            Some(key) => format!("{} (deposed {key})", self.address),
            None => self.address.clone(),
        }
    }
}

#[derive(Deserialize)]
struct Change {
    actions: Vec<String>,
    #[serde(default)]
    before: Value,
    #[serde(default)]
    after: Value,
    #[serde(default)]
    after_unknown: Value,
    #[serde(default)]
    before_sensitive: Value,
    #[serde(default)]
    after_sensitive: Value,
    replace_paths: Option<Vec<Vec<Value>>>,
    importing: Option<Value>,
}

/// Terraform's action lists, before they are folded into [`Action`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Planned {
    NoOp,
    Create,
    Read,
    Update,
    Delete,
    DeleteThenCreate,
    CreateThenDelete,
    Forget,
    CreateThenForget,
}

impl Planned {
    fn from_actions(actions: &[String]) -> Option<Self> {
        let actions: Vec<&str> = actions.iter().map(String::as_str).collect();
        Some(match actions.as_slice() {
            ["no-op"] => Self::NoOp,
            ["create"] => Self::Create,
            ["read"] => Self::Read,
            ["update"] => Self::Update,
            ["delete"] => Self::Delete,
            ["delete", "create"] => Self::DeleteThenCreate,
            ["create", "delete"] => Self::CreateThenDelete,
            ["forget"] => Self::Forget,
            ["create", "forget"] => Self::CreateThenForget,
            _ => return None,
        })
    }

    /// Forgetting destroys nothing, so a forget is a no-op for the
    /// infrastructure and create-then-forget is a create.
    fn action(self) -> Action {
        match self {
            Self::NoOp | Self::Forget => Action::NoOp,
            Self::Create | Self::CreateThenForget => Action::Create,
            Self::Read => Action::Read,
            Self::Update => Action::Update,
            Self::Delete => Action::Delete,
            Self::DeleteThenCreate | Self::CreateThenDelete => Action::Replace,
        }
    }

    fn symbol(self) -> &'static str {
        match self {
            Self::NoOp => "=",
            Self::Create => "+",
            Self::Read => "<=",
            Self::Update => "~",
            Self::Delete => "-",
            Self::DeleteThenCreate => "-/+",
            Self::CreateThenDelete => "+/-",
            Self::Forget => ".",
            Self::CreateThenForget => "+/.",
        }
    }
}

/// One resource change as the plan file and the summary need it.
struct ResourcePlan {
    address: String,
    planned: Planned,
    entry: Value,
    summary_line: Option<String>,
}

impl ResourcePlan {
    fn from_change(resource: ResourceChange) -> Result<Self, AdaptError> {
        let address = resource.unique_address();
        let change = &resource.change;
        let planned = Planned::from_actions(&change.actions).ok_or_else(|| {
            AdaptError::UnsupportedActions {
                address: address.clone(),
                actions: change.actions.clone(),
            }
        })?;
        let after = match change.after_unknown {
            Value::Bool(true) => Value::Null,
            _ => change.after.clone(),
        };
        let action = planned.action();
        // What the address is now, so the report can show `old → new`; a
        // no-op would only repeat its `after`.
        let before = match action {
            Action::Update | Action::Replace | Action::Delete => change.before.clone(),
            _ => Value::Null,
        };
        let mut sensitive = sensitive_paths(&change.after_sensitive, &after);
        if !before.is_null() {
            sensitive.extend(sensitive_paths(&change.before_sensitive, &before));
        }
        let mut entry = json!({
            "address": address,
            "action": action.as_str(),
            "unknown": path_texts(marked_paths(&change.after_unknown, &ValuePath::root())),
            "sensitive": path_texts(sensitive),
            "after": after,
        });
        if !before.is_null() {
            entry["before"] = before;
        }
        if action == Action::Replace {
            entry["forced_by"] = json!(replace_paths(change));
        }
        let summary_line = summary_line(
            &address,
            planned,
            change,
            resource.previous_address.as_deref(),
        );
        Ok(Self {
            address,
            planned,
            entry,
            summary_line,
        })
    }
}

/// Paths whose mark is `true` in a Terraform mark structure
/// (`after_unknown`, `after_sensitive`), which mirrors the value it marks.
fn marked_paths(marks: &Value, at: &ValuePath) -> Vec<ValuePath> {
    match marks {
        Value::Bool(true) => vec![at.clone()],
        Value::Object(fields) => fields
            .iter()
            .flat_map(|(key, mark)| marked_paths(mark, &at.child_key(key)))
            .collect(),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .flat_map(|(index, mark)| marked_paths(mark, &at.child_index(index)))
            .collect(),
        _ => Vec::new(),
    }
}

/// A resource marked sensitive as a whole has every attribute sensitive.
fn sensitive_paths(after_sensitive: &Value, after: &Value) -> Vec<ValuePath> {
    if after_sensitive != &Value::Bool(true) {
        return marked_paths(after_sensitive, &ValuePath::root());
    }
    after
        .as_object()
        .map(|fields| {
            fields
                .keys()
                .map(|k| ValuePath::root().child_key(k))
                .collect()
        })
        .unwrap_or_default()
}

fn path_texts(paths: Vec<ValuePath>) -> Vec<String> {
    let texts: BTreeSet<String> = paths
        .iter()
        .filter(|p| *p != &ValuePath::root())
        .map(ValuePath::to_string)
        .collect();
    texts.into_iter().collect()
}

fn has_mark(marks: Option<&Value>) -> bool {
    match marks {
        Some(Value::Bool(true)) => true,
        Some(Value::Object(fields)) => fields.values().any(|m| has_mark(Some(m))),
        Some(Value::Array(items)) => items.iter().any(|m| has_mark(Some(m))),
        _ => false,
    }
}

/// The line a reviewer reads for one resource; `None` when nothing about it changes.
fn summary_line(
    address: &str,
    planned: Planned,
    change: &Change,
    previous_address: Option<&str>,
) -> Option<String> {
    let mut details = Vec::new();
    match planned {
        Planned::NoOp => {}
        Planned::Update => match changed_attributes(change).join(", ") {
            names if names.is_empty() => details.push("update".to_owned()),
            names => details.push(format!("update: {names}")),
        },
        Planned::DeleteThenCreate | Planned::CreateThenDelete => {
            let mut replace = "replace".to_owned();
            if planned == Planned::CreateThenDelete {
                replace.push_str(", create before destroy");
            }
            let forced_by = replace_paths(change).join(", ");
            if !forced_by.is_empty() {
                replace.push_str(&format!(", forced by {forced_by}"));
            }
            details.push(replace);
        }
        Planned::Forget => details.push("forget: removed from state, not destroyed".to_owned()),
        Planned::CreateThenForget => {
            details.push("create; the previous object is forgotten, not destroyed".to_owned())
        }
        other => details.push(other.action().as_str().to_owned()),
    }
    if let Some(previous) = previous_address.filter(|p| *p != address) {
        details.push(format!("moved from {previous}"));
    }
    if change.importing.as_ref().is_some_and(|i| !i.is_null()) {
        details.push("import".to_owned());
    }
    if details.is_empty() {
        return None;
    }
    Some(format!(
        "{} {address} ({})",
        planned.symbol(),
        details.join("; ")
    ))
}

/// Top-level attributes whose value, knownness or sensitivity changes; names only.
fn changed_attributes(change: &Change) -> Vec<String> {
    let names: BTreeSet<&String> = [&change.before, &change.after, &change.after_unknown]
        .into_iter()
        .filter_map(Value::as_object)
        .flat_map(|fields| fields.keys())
        .collect();
    names
        .into_iter()
        .filter(|name| {
            let value = |v: &'_ Value| v.get(*name).cloned().unwrap_or(Value::Null);
            let marked = |marks: &'_ Value| has_mark(marks.get(*name));
            value(&change.before) != value(&change.after)
                || marked(&change.after_unknown)
                || marked(&change.before_sensitive) != marked(&change.after_sensitive)
        })
        .map(|name| ValuePath::root().child_key(name).to_string())
        .collect()
}

fn replace_paths(change: &Change) -> Vec<String> {
    let steps_to_path = |steps: &Vec<Value>| {
        steps
            .iter()
            .try_fold(ValuePath::root(), |path, step| match step {
                Value::String(key) => Some(path.child_key(key)),
                Value::Number(n) => n
                    .as_u64()
                    .and_then(|i| usize::try_from(i).ok())
                    .map(|i| path.child_index(i)),
                _ => None,
            })
    };
    let paths = change
        .replace_paths
        .iter()
        .flatten()
        .filter_map(steps_to_path)
        .collect();
    path_texts(paths)
}

/// Outputs as the plan file binds them, with their summary lines.
#[derive(Default)]
struct OutputsPlan {
    known: Map<String, Value>,
    unknown: Vec<String>,
    sensitive: Vec<String>,
    summary_lines: Vec<String>,
}

impl OutputsPlan {
    fn from_changes(changes: BTreeMap<String, Change>) -> Self {
        let mut outputs = Self::default();
        for (name, change) in changes {
            let path = ValuePath::root().child_key(&name);
            let deleted = change.actions == ["delete"];
            let wholly_unknown = change.after_unknown == Value::Bool(true);
            let unknown = path_texts(marked_paths(&change.after_unknown, &path));
            let shown = if deleted {
                "(removed)".to_owned()
            } else if has_mark(Some(&change.after_sensitive)) {
                "(sensitive)".to_owned()
            } else if wholly_unknown {
                "(known after apply)".to_owned()
            } else if !unknown.is_empty() {
                "(partly known after apply)".to_owned()
            } else {
                shown_value(&change.after)
            };
            if change.actions != ["no-op"] {
                outputs
                    .summary_lines
                    .push(format!("output {path} = {shown}"));
            }
            if !deleted {
                if has_mark(Some(&change.after_sensitive)) {
                    outputs.sensitive.push(name.clone());
                }
                outputs.unknown.extend(unknown);
                if !wholly_unknown {
                    outputs.known.insert(name, change.after);
                }
            }
        }
        outputs
    }

    fn plan_file_value(&self) -> Value {
        json!({"known": self.known, "unknown": self.unknown, "sensitive": self.sensitive})
    }
}

fn shown_value(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(LONGEST_SHOWN_OUTPUT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

fn summarise(
    resources: &[ResourcePlan],
    outputs: &OutputsPlan,
    drifted: &BTreeSet<String>,
) -> String {
    let mut lines: Vec<String> = resources
        .iter()
        .filter_map(|r| r.summary_line.clone())
        .collect();
    if lines.is_empty() && outputs.summary_lines.is_empty() {
        lines.push("No changes.".to_owned());
    } else {
        let count = |action: Action| {
            resources
                .iter()
                .filter(|r| r.planned.action() == action)
                .count()
        };
        lines.push(format!(
            "{} to add, {} to change, {} to destroy, {} to replace.",
            count(Action::Create),
            count(Action::Update),
            count(Action::Delete),
            count(Action::Replace)
        ));
        lines.extend(outputs.summary_lines.iter().cloned());
    }
    lines.extend(drifted.iter().map(|address| format!("drift: {address}")));
    lines.join("\n")
}

fn read_show_json(show_json: &[u8]) -> Result<ShowJson, AdaptError> {
    let document: Value =
        serde_json::from_slice(show_json).map_err(|e| AdaptError::NotJson(e.to_string()))?;
    let Value::Object(fields) = &document else {
        return Err(AdaptError::NotAnObject {
            found: kind_of(&document),
        });
    };
    if fields.get("errored") == Some(&Value::Bool(true)) {
        return Err(AdaptError::Errored);
    }
    let present = |key: &str| fields.get(key).is_some_and(|v| !v.is_null());
    if !["resource_changes", "output_changes", "planned_values"]
        .into_iter()
        .any(present)
    {
        return Err(if present("values") {
            AdaptError::StateNotPlan
        } else {
            AdaptError::NotAPlan
        });
    }
    let parsed: ShowJson =
        serde_json::from_value(document).map_err(|e| AdaptError::Shape(e.to_string()))?;
    match parsed.format_version.as_deref() {
        Some(version) if version.split('.').next() != Some("1") => {
            Err(AdaptError::UnsupportedFormat(version.to_owned()))
        }
        _ => Ok(parsed),
    }
}

/// Turns `terraform show -json PLANFILE` output into a plan-file object
/// (`summary`, `empty`, `entries` with `before` and `forced_by`, `outputs`) for [`MemberPlan::parse`](super::planfile::MemberPlan::parse).
pub fn adapt_terraform(show_json: &[u8]) -> Result<Value, AdaptError> {
    let document = read_show_json(show_json)?;
    let mut resources = document
        .resource_changes
        .unwrap_or_default()
        .into_iter()
        .map(ResourcePlan::from_change)
        .collect::<Result<Vec<_>, _>>()?;
    resources.sort_by(|a, b| a.address.cmp(&b.address));
    let outputs = OutputsPlan::from_changes(document.output_changes.unwrap_or_default());
    let drifted: BTreeSet<String> = document
        .resource_drift
        .unwrap_or_default()
        .iter()
        .filter(|d| d.change.actions != ["no-op"])
        .map(ResourceChange::unique_address)
        .collect();
    let empty = !resources.iter().any(|r| r.planned.action().changes());
    Ok(json!({
        "empty": empty,
        "summary": summarise(&resources, &outputs, &drifted),
        "entries": resources.into_iter().map(|r| r.entry).collect::<Vec<_>>(),
        "outputs": outputs.plan_file_value(),
    }))
}

/// What to write in place of `terraform output -json` in an outputs file.
pub(crate) const WRAPPED_OUTPUTS_FIX: &str = "pipe `terraform output -json` through `wavegate adapt terraform-outputs`, which writes the flat `{\"name\": value}` form";

/// The keys `terraform output -json` wraps every output's value in.
const OUTPUT_WRAPPER_KEYS: [&str; 3] = ["sensitive", "type", "value"];

fn is_output_wrapper(value: &Value) -> bool {
    value.as_object().is_some_and(|fields| {
        fields.len() == OUTPUT_WRAPPER_KEYS.len()
            && OUTPUT_WRAPPER_KEYS.iter().all(|k| fields.contains_key(*k))
    })
}

/// Whether an outputs file holds `terraform output -json` as it prints it
/// (every value an object with exactly `value`, `type` and `sensitive`)
/// rather than the flat form: read as outputs, every downstream input would
/// get the wrapper instead of the value.
pub(crate) fn is_wrapped_outputs(outputs: &Map<String, Value>) -> bool {
    !outputs.is_empty() && outputs.values().all(is_output_wrapper)
}

/// Why `terraform output -json` cannot be flattened, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum OutputsAdaptError {
    #[error("the input is not JSON ({0}); pipe the output of `terraform output -json`")]
    NotJson(String),
    #[error("the input is {found}, not the JSON object `terraform output -json` prints; pipe `terraform output -json` without an output NAME (with a NAME it prints the bare value)")]
    NotAnObject { found: &'static str },
    #[error("output `{name}` is not wrapped as `terraform output -json` wraps every output (an object with exactly `value`, `type` and `sensitive`); pipe the unmodified output of `terraform output -json` (all outputs, no NAME), or write a flat outputs file yourself")]
    NotWrapped { name: String },
}

/// `terraform output -json` flattened to the outputs-file form.
#[derive(Debug, Clone, PartialEq)]
pub struct FlatOutputs {
    /// `{"name": value}`, what an outputs file holds.
    pub outputs: Map<String, Value>,
    /// Sensitive outputs left out (sorted): the outputs file cannot mark a
    /// value sensitive, and the report shows an input read from it.
    pub left_out: Vec<String>,
}

/// Turns `terraform output -json` (`{"x": {"value": …, "type": …,
/// "sensitive": …}}`) into the flat `{"x": …}` an outputs file holds.
/// Sensitive outputs are left out unless `keep_sensitive`: the outputs file
/// has no way to mark a value sensitive, and a downstream's input read from
/// it is shown in the report.
pub fn adapt_terraform_outputs(
    output_json: &[u8],
    keep_sensitive: bool,
) -> Result<FlatOutputs, OutputsAdaptError> {
    let document: Value = serde_json::from_slice(output_json)
        .map_err(|e| OutputsAdaptError::NotJson(e.to_string()))?;
    let Value::Object(wrapped) = document else {
        return Err(OutputsAdaptError::NotAnObject {
            found: kind_of(&document),
        });
    };
    let mut flat = FlatOutputs {
        outputs: Map::new(),
        left_out: Vec::new(),
    };
    for (name, wrapper) in wrapped {
        // `type` is absent from the output of Terraform before 0.15.
        let fits = wrapper.as_object().is_some_and(|fields| {
            fields.contains_key("value")
                && fields
                    .keys()
                    .all(|k| OUTPUT_WRAPPER_KEYS.contains(&k.as_str()))
        });
        if !fits {
            return Err(OutputsAdaptError::NotWrapped { name });
        }
        let sensitive = wrapper.get("sensitive") == Some(&Value::Bool(true));
        if sensitive && !keep_sensitive {
            flat.left_out.push(name);
            continue;
        }
        let Value::Object(mut fields) = wrapper else {
            unreachable!("checked above")
        };
        let value = fields.remove("value").expect("checked above");
        flat.outputs.insert(name, value);
    }
    flat.left_out.sort();
    Ok(flat)
}

/// Why an inputs file cannot become a `.tfvars.json`, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum VarsAdaptError {
    #[error("the input is not JSON ({0}); pass the file wavegate wrote at {{inputs_file}}")]
    NotJson(String),
    #[error("the input is not an inputs file ({0}); pass the file wavegate wrote at {{inputs_file}}, `{{\"known\": {{…}}, \"unknown\": […]}}`")]
    Shape(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InputsFile {
    known: Map<String, Value>,
    #[serde(default)]
    unknown: Vec<String>,
}

/// Turns wavegate's `{inputs_file}` into a `.tfvars.json` of its known
/// inputs (`-var-file=`), and names the unknown ones: Terraform cannot plan
/// with an unknown variable, so such a variable keeps its `default` (or
/// Terraform refuses to plan without it).
pub fn adapt_terraform_vars(
    inputs: &[u8],
) -> Result<(Map<String, Value>, Vec<String>), VarsAdaptError> {
    let document: Value =
        serde_json::from_slice(inputs).map_err(|e| VarsAdaptError::NotJson(e.to_string()))?;
    let file: InputsFile =
        serde_json::from_value(document).map_err(|e| VarsAdaptError::Shape(e.to_string()))?;
    let mut unknown = file.unknown;
    unknown.sort();
    unknown.dedup();
    Ok((file.known, unknown))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::planfile::MemberPlan;
    use std::path::{Path, PathBuf};

    fn fixtures_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .map(|dir| dir.join("shared/fixtures/terraform/show-json"))
            .find(|dir| dir.is_dir())
            .expect("shared/fixtures/terraform/show-json next to the crate or above it")
    }

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(fixtures_dir().join(name)).unwrap()
    }

    fn adapt(name: &str) -> Value {
        adapt_terraform(&fixture(name)).unwrap()
    }

    fn plan(name: &str) -> MemberPlan {
        MemberPlan::parse(&"x@y".into(), &serde_json::to_vec(&adapt(name)).unwrap()).unwrap()
    }

    #[test]
    fn every_fixture_adapts_to_a_valid_plan_file_or_a_named_error() {
        let mut names: Vec<String> = std::fs::read_dir(fixtures_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .collect();
        names.sort();
        assert!(names.len() >= 12, "fixtures went missing: {names:?}");
        for name in names {
            let adapted = adapt_terraform(&fixture(&name));
            if name == "plan-error.json" {
                assert!(
                    matches!(adapted, Err(AdaptError::Errored)),
                    "{name}: {adapted:?}"
                );
                continue;
            }
            let adapted = adapted.unwrap_or_else(|e| panic!("{name}: {e}"));
            let bytes = serde_json::to_vec(&adapted).unwrap();
            if let Err(e) = MemberPlan::parse(&"x@y".into(), &bytes) {
                panic!("{name}: {e}\n{adapted:#}");
            }
        }
    }

    #[test]
    fn a_forced_replacement_is_destructive_and_its_new_id_unknown() {
        let plan = plan("requires-replace.json");
        assert_eq!(plan.entries.len(), 1);
        let entry = &plan.entries[0];
        assert_eq!(entry.action, Action::Replace);
        assert_eq!(entry.unknown, vec!["id"]);
        assert_eq!(entry.after.to_value(), json!({"ami": "force-replace"}));
        assert_eq!(
            entry.before.to_value(),
            json!({"ami": "bar", "id": "placeholder"})
        );
        assert_eq!(entry.forced_by, vec!["ami"]);
        assert!(plan.destructive);
        assert!(
            plan.summary
                .as_str()
                .contains("-/+ test_instance.test (replace, forced by ami)"),
            "{}",
            plan.summary.as_str()
        );
    }

    #[test]
    fn an_update_and_a_delete_carry_what_the_address_is_now() {
        let plan = plan("basic-delete.json");
        let by_address = |a: &str| plan.entries.iter().find(|e| e.address == a).unwrap();
        assert_eq!(
            by_address("test_instance.test").before.to_value()["ami"],
            "foo"
        );
        assert_eq!(
            by_address("test_instance.test").after.to_value()["ami"],
            "bar"
        );
        assert_eq!(
            by_address("test_instance.test-delete").before.to_value()["ami"],
            "foo"
        );
        assert!(!plan.is_empty() && !plan.opaque);
        let unchanged = self::plan("basic-update.json");
        assert!(
            unchanged.entries.iter().all(|e| e.before.is_null()),
            "a no-op would only repeat its after"
        );
        assert!(unchanged.is_empty() && !unchanged.opaque);
    }

    #[test]
    fn a_plan_without_resources_says_it_is_empty_rather_than_opaque() {
        let document =
            json!({"format_version": "1.2", "resource_changes": [], "output_changes": {}});
        let plan = MemberPlan::parse(
            &"app@dev".into(),
            adapt_terraform(document.to_string().as_bytes())
                .unwrap()
                .to_string()
                .as_bytes(),
        )
        .unwrap();
        assert!(plan.is_empty() && !plan.opaque);
    }

    #[test]
    fn sensitive_values_are_bound_but_never_summarised() {
        let plan = plan("sensitive-values.json");
        let entry = &plan.entries[0];
        assert_eq!(entry.after.to_value()["ami"], "boop");
        assert!(entry.sensitive.contains(&"ami".to_owned()));
        assert_eq!(plan.outputs.known["test"], "boop");
        assert_eq!(plan.outputs.sensitive, vec!["test"]);
        assert!(
            !plan.summary.as_str().contains("boop"),
            "{}",
            plan.summary.as_str()
        );
        assert!(
            plan.summary.as_str().contains("output test = (sensitive)"),
            "{}",
            plan.summary.as_str()
        );
    }

    #[test]
    fn partly_unknown_outputs_keep_their_known_part() {
        let plan = plan("unknown-output.json");
        assert_eq!(plan.outputs.known["foo"], "hello");
        assert_eq!(plan.outputs.known["bar"], json!(["hello", null, "world"]));
        assert!(plan.outputs.unknown.contains(&"bar[1]".to_owned()));
        assert!(plan.outputs.unknown.contains(&"baz.time".to_owned()));
        assert_eq!(plan.outputs.fully_known("foo"), Some(&json!("hello")));
        assert_eq!(plan.outputs.fully_known("baz"), None);
        assert!(plan
            .summary
            .as_str()
            .contains("output bar = (partly known after apply)"));
        assert!(plan.summary.as_str().contains("output foo = \"hello\""));
    }

    #[test]
    fn a_removed_resource_is_deleted() {
        let plan = plan("basic-delete.json");
        let deleted: Vec<&str> = plan
            .entries
            .iter()
            .filter(|e| e.action == Action::Delete)
            .map(|e| e.address.as_str())
            .collect();
        assert_eq!(deleted, ["test_instance.test-delete"]);
        assert!(plan.entries[1].after.is_null());
        assert!(plan.destructive);
        assert!(plan
            .summary
            .as_str()
            .contains("- test_instance.test-delete (delete)"));
        assert!(plan
            .summary
            .as_str()
            .contains("~ test_instance.test (update: ami)"));
    }

    #[test]
    fn moves_and_drift_are_mentioned_but_drift_is_no_entry() {
        let moved = plan("moved.json").summary.into_string();
        assert!(
            moved.contains("~ test_instance.baz (update: ami; moved from test_instance.foo)"),
            "{moved}"
        );
        let drift = plan("drift.json");
        assert_eq!(drift.entries.len(), 2);
        assert!(
            drift
                .summary
                .as_str()
                .ends_with("drift: test_instance.should_refresh"),
            "{}",
            drift.summary.as_str()
        );
    }

    #[test]
    fn a_plan_without_changes_says_so() {
        let plan = plan("basic-update.json");
        assert!(plan.is_empty());
        assert_eq!(plan.summary, "No changes.");
    }

    #[test]
    fn the_same_input_gives_the_same_bytes() {
        for name in [
            "multi-resource-update.json",
            "unknown-output.json",
            "modules.json",
        ] {
            let first = serde_json::to_vec(&adapt(name)).unwrap();
            let second = serde_json::to_vec(&adapt(name)).unwrap();
            assert_eq!(first, second, "{name}");
        }
    }

    #[test]
    fn the_summary_reads_like_a_plan() {
        let summary = plan("multi-resource-update.json").summary.into_string();
        insta::assert_snapshot!(summary, @r"
        = test_instance.test[0] (moved from test_instance.test)
        + test_instance.test[1] (create)
        1 to add, 0 to change, 0 to destroy, 0 to replace.
        ");
    }

    #[test]
    fn inputs_that_are_not_plans_say_what_to_pass() {
        let e = adapt_terraform(b"Error: no plan file").unwrap_err();
        assert!(matches!(e, AdaptError::NotJson(_)), "{e:?}");
        assert!(
            e.to_string().contains("terraform show -json PLANFILE"),
            "{e}"
        );

        let e = adapt_terraform(b"[1, 2]").unwrap_err();
        assert!(e.to_string().starts_with("the input is an array"), "{e}");

        let state = br#"{"format_version": "1.0", "terraform_version": "1.9.0",
            "values": {"root_module": {"resources": []}}}"#;
        let e = adapt_terraform(state).unwrap_err();
        assert!(matches!(e, AdaptError::StateNotPlan), "{e:?}");
        assert!(
            e.to_string().contains("terraform plan -out=PLANFILE"),
            "{e}"
        );

        let e = adapt_terraform(br#"{"format_version": "1.0"}"#).unwrap_err();
        assert!(matches!(e, AdaptError::NotAPlan), "{e:?}");

        let e = adapt_terraform(br#"{"format_version": "2.0", "planned_values": {}}"#).unwrap_err();
        assert!(matches!(e, AdaptError::UnsupportedFormat(_)), "{e:?}");

        let e = adapt_terraform(br#"{"resource_changes": [{"address": 1}]}"#).unwrap_err();
        assert!(matches!(e, AdaptError::Shape(_)), "{e:?}");
    }

    fn one_change(change: Value) -> Result<Value, AdaptError> {
        let mut resource = json!({"address": "test_instance.a", "change": change});
        if let Some(deposed) = resource["change"]
            .as_object_mut()
            .and_then(|c| c.remove("deposed"))
        {
            resource["deposed"] = deposed;
        }
        adapt_terraform(&serde_json::to_vec(&json!({"resource_changes": [resource]})).unwrap())
    }

    #[test]
    fn unsupported_actions_name_the_address() {
        let e = one_change(json!({"actions": ["update", "delete"]})).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("test_instance.a:") && text.contains(r#"["update", "delete"]"#),
            "{text}"
        );
    }

    #[test]
    fn a_forget_destroys_nothing_but_is_mentioned() {
        let v = one_change(json!({"actions": ["forget"], "before": {"id": "i-1"}})).unwrap();
        assert_eq!(v["entries"][0]["action"], "no-op");
        assert_eq!(v["summary"], ". test_instance.a (forget: removed from state, not destroyed)\n0 to add, 0 to change, 0 to destroy, 0 to replace.");
    }

    #[test]
    fn deposed_objects_keep_unique_addresses() {
        let v = one_change(json!({"actions": ["delete"], "deposed": "00000001"})).unwrap();
        assert_eq!(
            v["entries"][0]["address"],
            "test_instance.a (deposed 00000001)"
        );
    }

    #[test]
    fn a_wholly_unknown_value_has_no_paths_and_odd_keys_are_quoted() {
        let v =
            one_change(json!({"actions": ["read"], "after": null, "after_unknown": true})).unwrap();
        assert_eq!(v["entries"][0]["unknown"], json!([]));
        assert_eq!(v["entries"][0]["after"], Value::Null);
        let v = one_change(json!({
            "actions": ["update"],
            "before": {"tags": {"k8s.io/role": "a"}, "ports": [1]},
            "after": {"tags": {"k8s.io/role": "b"}, "ports": [1, null]},
            "after_unknown": {"ports": [false, true]},
            "after_sensitive": {"tags": {"k8s.io/role": true}},
        }))
        .unwrap();
        assert_eq!(v["entries"][0]["unknown"], json!(["ports[1]"]));
        assert_eq!(
            v["entries"][0]["sensitive"],
            json!([r#"tags["k8s.io/role"]"#])
        );
        assert!(v["summary"]
            .as_str()
            .unwrap()
            .starts_with("~ test_instance.a (update: ports, tags)"));
    }

    #[test]
    fn output_json_is_flattened_and_sensitive_outputs_are_left_out_unless_kept() {
        let printed = br#"{
            "db_password": {"sensitive": true, "type": "string", "value": "s3cret"},
            "subnets": {"sensitive": false, "type": ["list", "string"], "value": ["a", "b"]},
            "vpc_id": {"sensitive": false, "type": "string", "value": "vpc-1"}
        }"#;
        let flat = adapt_terraform_outputs(printed, false).unwrap();
        assert_eq!(
            Value::Object(flat.outputs),
            json!({"subnets": ["a", "b"], "vpc_id": "vpc-1"})
        );
        assert_eq!(flat.left_out, ["db_password"]);
        let kept = adapt_terraform_outputs(printed, true).unwrap();
        assert_eq!(kept.outputs["db_password"], "s3cret");
        assert!(kept.left_out.is_empty());
        // Terraform before 0.15 printed no `type`; no outputs print `{}`.
        let old = adapt_terraform_outputs(br#"{"a": {"sensitive": false, "value": 1}}"#, false);
        assert_eq!(old.unwrap().outputs["a"], 1);
        assert!(adapt_terraform_outputs(b"{}", false)
            .unwrap()
            .outputs
            .is_empty());
    }

    #[test]
    fn what_is_not_output_json_says_what_to_pipe() {
        let e = adapt_terraform_outputs(b"\"vpc-1\"", false).unwrap_err();
        assert!(e.to_string().contains("without an output NAME"), "{e}");
        let e = adapt_terraform_outputs(br#"{"vpc_id": "vpc-1"}"#, false).unwrap_err();
        assert!(
            e.to_string().starts_with("output `vpc_id` is not wrapped"),
            "{e}"
        );
        let e = adapt_terraform_outputs(b"Error: no state", false).unwrap_err();
        assert!(matches!(e, OutputsAdaptError::NotJson(_)), "{e:?}");
    }

    #[test]
    fn only_output_json_as_printed_counts_as_wrapped() {
        let map = |v: Value| v.as_object().unwrap().clone();
        let wrapper = json!({"value": "vpc-1", "type": "string", "sensitive": false});
        assert!(is_wrapped_outputs(&map(
            json!({"vpc_id": wrapper, "n": {"sensitive": true, "type": "number", "value": 1}})
        )));
        assert!(!is_wrapped_outputs(&map(json!({}))), "no outputs is flat");
        assert!(
            !is_wrapped_outputs(&map(json!({"vpc_id": wrapper, "region": "eu-west-1"}))),
            "one flat value: a flat file whose output happens to be such an object"
        );
        assert!(!is_wrapped_outputs(&map(
            json!({"cfg": {"value": 1, "type": "t", "sensitive": false, "extra": 2}})
        )));
        let adapted = adapt_terraform_outputs(
            serde_json::to_string(&json!({"vpc_id": wrapper}))
                .unwrap()
                .as_bytes(),
            false,
        )
        .unwrap();
        assert!(!is_wrapped_outputs(&adapted.outputs));
        assert!(WRAPPED_OUTPUTS_FIX.contains("wavegate adapt terraform-outputs"));
    }

    #[test]
    fn an_inputs_file_becomes_tfvars_of_its_known_inputs() {
        let (vars, unknown) = adapt_terraform_vars(
            br#"{"known": {"vpc_id": "vpc-1", "sizes": [1, 2]}, "unknown": ["hostname", "a"]}"#,
        )
        .unwrap();
        assert_eq!(
            Value::Object(vars),
            json!({"vpc_id": "vpc-1", "sizes": [1, 2]})
        );
        assert_eq!(unknown, ["a", "hostname"]);
        let e = adapt_terraform_vars(br#"{"vpc_id": "vpc-1"}"#).unwrap_err();
        assert!(e.to_string().contains("{inputs_file}"), "{e}");
        assert!(adapt_terraform_vars(b"nope").is_err());
    }
}
