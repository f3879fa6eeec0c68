//! The plan file a plan command writes (docs/plan-files.md): parsing, validation and
//! the normalised member plan whose digest a reviewer approves.
//!
//! A plan command is someone else's program, so everything it writes is
//! checked here and every defect becomes a [`PlanFileError`] that says what
//! to fix. The digest is computed by wavegate, never taken from the file.
//!
//! Plan files run to many megabytes, and every plan reads one per member
//! (issue 12), so validation makes no copies it does not keep: entries are
//! sorted and checked for repeated addresses through a list of indices, and
//! a path that is a plain key is kept as written, which is its normal form.
//! Each entry's `after` and `before` are read straight into their canonical
//! text ([`CanonicalJson`]) with no tree built: where the file has it
//! canonical already, a span of the file's one copy, shared by every entry.
//! The digest is streamed into SHA-256 ([`DigestWriter`]), never rendered.
//! A file as most plan commands write it is read by hand in one pass
//! ([`read`]); any other by serde_json, which defines the format and names
//! its defects.

use super::path::ValuePath;
use crate::model::canonical::{CanonicalJson, DigestWriter, NumberForm};
use crate::model::{Digest, MemberId, Untrusted};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

mod read;

/// Larger plan files are refused rather than read into memory.
pub const MAX_PLAN_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// What one entry of a plan does to its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    Create,
    Update,
    Delete,
    Replace,
    Read,
    NoOp,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
            Action::Replace => "replace",
            Action::Read => "read",
            Action::NoOp => "no-op",
        }
    }

    pub fn is_destructive(self) -> bool {
        matches!(self, Action::Delete | Action::Replace)
    }

    /// Whether applying it changes the address (a `no-op` or `read` does not).
    pub fn changes(self) -> bool {
        !matches!(self, Action::NoOp | Action::Read)
    }
}

/// One resource change, normalised: paths parsed and sorted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Written by the plan command: shown only through [`Untrusted`]'s renderings.
    pub address: Untrusted,
    pub action: Action,
    /// What the address becomes, as canonical text: plans run to many
    /// megabytes, and only coverage and the report look inside.
    #[serde(default)]
    pub after: CanonicalJson,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sensitive: Vec<String>,
    /// The address as it is now, when the plan command says (to show what moves).
    #[serde(default, skip_serializing_if = "CanonicalJson::is_null")]
    pub before: CanonicalJson,
    /// For a `replace`: the paths whose change forces it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forced_by: Vec<String>,
}

impl Entry {
    pub fn unknown_paths(&self) -> Vec<ValuePath> {
        parse_paths(&self.unknown)
    }

    pub fn sensitive_paths(&self) -> Vec<ValuePath> {
        parse_paths(&self.sensitive)
    }

    /// How many bytes of its plan file the entry's values hold as spans of it.
    pub(crate) fn bytes_in_file(&self) -> usize {
        self.after.bytes_in_file() + self.before.bytes_in_file()
    }
}

fn parse_paths(texts: &[String]) -> Vec<ValuePath> {
    texts
        .iter()
        .filter_map(|t| ValuePath::parse(t).ok())
        .collect()
}

/// A member's outputs as its plan knows them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    #[serde(default)]
    pub known: Map<String, Value>,
    /// Output names (or paths inside one) that are known only after apply.
    #[serde(default)]
    pub unknown: Vec<String>,
    /// Output names whose values are secret: bound by the digest, never shown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sensitive: Vec<String>,
}

impl Outputs {
    pub fn unknown_paths(&self) -> Vec<ValuePath> {
        parse_paths(&self.unknown)
    }

    /// Whether the plan says anything of output `name`, known or not.
    pub fn mentions(&self, name: &str) -> bool {
        let root = ValuePath::root().child_key(name);
        self.known.contains_key(name) || self.unknown_paths().iter().any(|p| p.starts_with(&root))
    }

    /// Whether output `name` can be read now: known and no part of it unknown.
    pub fn fully_known(&self, name: &str) -> Option<&Value> {
        let root = ValuePath::root().child_key(name);
        let partly_unknown = self.unknown_paths().iter().any(|p| p.starts_with(&root));
        self.known.get(name).filter(|_| !partly_unknown)
    }
}

/// Change counts shown in the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub create: u32,
    pub update: u32,
    pub delete: u32,
    pub replace: u32,
}

/// The plan file exactly as a plan command may write it, each entry's
/// `after` and `before` as its reader left them (`V`): a span serde_json
/// found, or canonical text [`read`] made.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, bound(deserialize = "V: Deserialize<'de>"))]
struct RawPlanFile<V> {
    #[serde(default)]
    summary: String,
    #[serde(default)]
    entries: Vec<RawEntry<V>>,
    #[serde(default)]
    outputs: Outputs,
    destructive: Option<bool>,
    denied: Option<Denied>,
    /// Whether the plan changes nothing. Absent with no entries: the plan is opaque.
    empty: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, bound(deserialize = "V: Deserialize<'de>"))]
struct RawEntry<V> {
    address: String,
    action: Action,
    /// Made canonical text in [`MemberPlan::from_raw`].
    #[serde(default)]
    after: Option<V>,
    #[serde(default)]
    unknown: Vec<String>,
    #[serde(default)]
    sensitive: Vec<String>,
    #[serde(default)]
    before: Option<V>,
    #[serde(default)]
    forced_by: Vec<String>,
}

/// An entry's `after` or `before` as a reader left it.
trait EntryValue {
    fn into_canonical(self, file: &Arc<String>) -> Result<CanonicalJson, serde_json::Error>;
}

/// serde_json's span of the file, made canonical text here.
impl EntryValue for &RawValue {
    fn into_canonical(self, file: &Arc<String>) -> Result<CanonicalJson, serde_json::Error> {
        CanonicalJson::from_raw_in(file, self)
    }
}

/// Made canonical text by [`read`] already.
impl EntryValue for CanonicalJson {
    fn into_canonical(self, _: &Arc<String>) -> Result<CanonicalJson, serde_json::Error> {
        Ok(self)
    }
}

/// Policy rules a plan reports as broken; the plan cannot apply unless overridden.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Denied {
    pub rules: Vec<String>,
}

/// A plan file that is not one, with what the plan command must change.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlanFileError {
    #[error("the plan command exited 0 but wrote no plan file at {path}; it must write the plan JSON to the {{plan_file}} argument")]
    Missing { path: String },
    #[error(
        "the plan file is empty; the plan command must write a JSON object (docs/plan-files.md)"
    )]
    Empty,
    #[error("the plan file is not valid JSON ({0}); the plan command must write one JSON object")]
    NotJson(String),
    #[error("the plan file does not match the plan-file format: {0}")]
    Shape(String),
    #[error("the plan file is invalid: {0}")]
    Invalid(String),
}

/// One member's plan, normalised and digested.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberPlan {
    pub member: MemberId,
    /// Written by the plan command: shown only through [`Untrusted`]'s renderings.
    pub summary: Untrusted,
    pub entries: Vec<Entry>,
    pub outputs: Outputs,
    pub destructive: bool,
    /// The policy rules the plan command says it breaks, as it names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied: Vec<Untrusted>,
    /// The plan lists no resources and does not say it is empty (a migration
    /// tool, a script): its summary is bound, its apply always runs, and only
    /// its exact digest covers it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub opaque: bool,
    /// The group it was planned with, whose digest this plan's binds: one
    /// approval binds the group's composition and every mate's plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) group: Option<GroupBinding>,
    pub plan_digest: Digest,
}

/// The group a member was planned with (`[[group]]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GroupBinding {
    pub(crate) name: String,
    /// Every member planned in the call, sorted.
    pub(crate) members: Vec<MemberId>,
    /// [`GroupBinding::digest_of`] over the members' own plans.
    pub(crate) digest: Digest,
}

impl GroupBinding {
    /// The group's digest: its name and each member's plan digest as
    /// planned on its own (`(member, digest)`, sorted by member).
    pub(crate) fn digest_of(name: &str, members: &[(MemberId, Digest)]) -> Digest {
        let listed: Vec<serde_json::Value> = members
            .iter()
            .map(|(member, digest)| serde_json::json!({"member": member, "planDigest": digest}))
            .collect();
        crate::model::canonical::digest_value(&serde_json::json!({
            "group": name,
            "members": listed,
        }))
    }
}

impl MemberPlan {
    /// Reads and validates the plan file a command wrote for `member`.
    pub fn read(member: &MemberId, path: &Path) -> Result<Self, PlanFileError> {
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.len() > MAX_PLAN_FILE_BYTES {
                return Err(PlanFileError::Invalid(format!(
                    "the plan file is {} bytes; wavegate reads plan files of up to {MAX_PLAN_FILE_BYTES} bytes (256 MiB): split the component",
                    meta.len()
                )));
            }
        }
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(PlanFileError::Missing {
                    path: path.display().to_string(),
                })
            }
            Err(e) => {
                return Err(PlanFileError::Invalid(format!(
                    "cannot read {}: {e}",
                    path.display()
                )))
            }
        };
        Self::parse_owned(member, bytes)
    }

    /// Validates plan-file bytes for `member`.
    pub fn parse(member: &MemberId, bytes: &[u8]) -> Result<Self, PlanFileError> {
        Self::parse_owned(member, bytes.to_vec())
    }

    /// [`Self::parse`] of bytes it may keep: the file's text is kept whole,
    /// once, as it was read, and each entry's `after` and `before` that the
    /// file has canonical already is a span of it.
    pub fn parse_owned(member: &MemberId, bytes: Vec<u8>) -> Result<Self, PlanFileError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(PlanFileError::Empty);
        }
        let file = match String::from_utf8(bytes) {
            Ok(text) => Arc::new(text),
            // The error serde_json gives for such bytes, as before.
            Err(e) => {
                let bytes = e.as_bytes();
                return Err(
                    match serde_json::from_slice::<RawPlanFile<&RawValue>>(bytes) {
                        Err(e) => parse_error(bytes, e),
                        Ok(_) => PlanFileError::NotJson("the file is not UTF-8".to_owned()),
                    },
                );
            }
        };
        if let Some(raw) = read::plan_file(&file) {
            return Self::from_raw(member, raw, &file);
        }
        Self::parse_by_serde(member, &file)
    }

    /// The file read by serde_json, which defines what a plan file is and
    /// names what is wrong with one: [`read`] leaves every file it is not
    /// sure of to this.
    fn parse_by_serde(member: &MemberId, file: &Arc<String>) -> Result<Self, PlanFileError> {
        let raw: RawPlanFile<&RawValue> =
            serde_json::from_str(file).map_err(|e| parse_error(file.as_bytes(), e))?;
        Self::from_raw(member, raw, file)
    }

    fn from_raw<V: EntryValue>(
        member: &MemberId,
        raw: RawPlanFile<V>,
        file: &Arc<String>,
    ) -> Result<Self, PlanFileError> {
        // Entries are sorted by address through (address, index) pairs (an
        // entry is large to move, and a pair compares without reaching into
        // it), and that order finds a repeated address without a set of copies. A repeat is rare: then the entries are checked again
        // in file order, so that the first defect in the file is the one named.
        let mut keyed: Vec<(&str, usize)> = raw
            .entries
            .iter()
            .map(|e| e.address.as_str())
            .zip(0..)
            .collect();
        keyed.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let repeats = keyed.windows(2).any(|w| w[0].0 == w[1].0);
        let order: Vec<usize> = keyed.into_iter().map(|(_, i)| i).collect();
        let mut seen = BTreeSet::new();
        let mut entries = Vec::with_capacity(raw.entries.len());
        for (i, e) in raw.entries.into_iter().enumerate() {
            if e.address.trim().is_empty() {
                return Err(PlanFileError::Invalid(format!(
                    "entries[{i}].address is empty"
                )));
            }
            if repeats && !seen.insert(e.address.clone()) {
                return Err(PlanFileError::Invalid(format!(
                    "entries[{i}]: address `{}` appears twice; each address is planned once",
                    e.address
                )));
            }
            if !e.forced_by.is_empty() && e.action != Action::Replace {
                return Err(PlanFileError::Invalid(format!(
                    "entries[{i}].forced_by: `{}` is a {}, and only a `replace` is forced; remove forced_by or make the action `replace`",
                    e.address,
                    e.action.as_str()
                )));
            }
            let value = |read: Option<V>, field: &str| {
                read.map_or(Ok(CanonicalJson::null()), |read| {
                    read.into_canonical(file).map_err(|error| {
                        PlanFileError::NotJson(format!("entries[{i}].{field}: {error}"))
                    })
                })
            };
            entries.push(Some(Entry {
                unknown: normalise_paths(e.unknown, || format!("entries[{i}].unknown"))?,
                sensitive: normalise_paths(e.sensitive, || format!("entries[{i}].sensitive"))?,
                forced_by: normalise_paths(e.forced_by, || format!("entries[{i}].forced_by"))?,
                after: value(e.after, "after")?,
                before: value(e.before, "before")?,
                address: e.address.into(),
                action: e.action,
            }));
        }
        // A plan keeps its file only while most of the file is its values:
        // a file that had to be rewritten (pretty-printed, say) would
        // otherwise be held whole for a few values it had canonical.
        let in_file: usize = entries.iter().flatten().map(Entry::bytes_in_file).sum();
        if in_file < file.len() / 2 {
            for e in entries.iter_mut().flatten() {
                e.after.detach();
                e.before.detach();
            }
        }
        // Addresses are unique here, so this is the order a sort by address gives.
        let entries: Vec<Entry> = order
            .into_iter()
            .map(|i| entries[i].take().expect("each index once"))
            .collect();
        let lists_no_change = !entries.iter().any(|e| e.action.changes());
        if raw.empty == Some(true) {
            if let Some(e) = entries.iter().find(|e| e.action.changes()) {
                return Err(PlanFileError::Invalid(format!(
                    "`empty` is true but `{}` is a {}; an empty plan lists only `no-op` and `read` entries: remove `empty` or that entry",
                    e.address.as_str(),
                    e.action.as_str()
                )));
            }
        }
        // Entries that change nothing describe the plan only when the file
        // says it is empty, or when there is at least one of them to show.
        let opaque = lists_no_change
            && match raw.empty {
                Some(empty) => !empty,
                None => entries.is_empty(),
            };
        let mut sensitive = raw.outputs.sensitive;
        sensitive.sort();
        sensitive.dedup();
        let outputs = Outputs {
            unknown: normalise_paths(raw.outputs.unknown, || "outputs.unknown".to_owned())?,
            known: raw.outputs.known,
            sensitive,
        };
        // What an opaque plan does cannot be seen, so it is destructive
        // unless its file says otherwise.
        let destructive = raw
            .destructive
            .unwrap_or_else(|| opaque || entries.iter().any(|e| e.action.is_destructive()));
        let mut denied = raw.denied.map(|d| d.rules).unwrap_or_default();
        denied.sort();
        denied.dedup();
        let mut plan = MemberPlan {
            member: member.clone(),
            summary: raw.summary.into(),
            entries,
            outputs,
            destructive,
            denied: denied.into_iter().map(Untrusted::from).collect(),
            opaque,
            group: None,
            // Computed from the rest just below.
            plan_digest: Digest::repeated('0'),
        };
        plan.plan_digest = plan.compute_digest();
        Ok(plan)
    }

    /// Adds `rules` to those the plan breaks (the base's Rego policies'
    /// messages) and digests it again: the digest binds every denial.
    pub(crate) fn deny(&mut self, rules: Vec<String>) {
        if rules.is_empty() {
            return;
        }
        self.denied.extend(rules.into_iter().map(Untrusted::from));
        self.denied.sort();
        self.denied.dedup();
        self.plan_digest = self.compute_digest();
    }

    /// The digest over what the plan binds: member, entries, outputs,
    /// destructiveness and denials. The summary is prose and is bound only
    /// when the plan is opaque (then it is all a reviewer has to go by).
    /// Numbers as RFC 8785 writes them (what new change sets use).
    pub fn compute_digest(&self) -> Digest {
        self.compute_digest_with(NumberForm::Ecmascript)
    }

    /// The digest with numbers written as `numbers` says: a plan stored in a
    /// change set is verified with the rule of that set's version.
    pub fn compute_digest_with(&self, numbers: NumberForm) -> Digest {
        // Written key by key in canonical order (RFC 8785 sorts keys), straight
        // into the hash: plans can be large, and this is the hot path.
        let mut w = DigestWriter::with_numbers(numbers);
        w.raw("{").key("denied").strings(&self.denied);
        w.raw(",")
            .key("destructive")
            .raw(if self.destructive { "true" } else { "false" });
        w.raw(",").key("entries").raw("[");
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                w.raw(",");
            }
            w.raw("{").key("action").string(e.action.as_str());
            w.raw(",").key("address").string(e.address.as_str());
            w.raw(",").key("after").canonical(&e.after);
            if !e.before.is_null() {
                w.raw(",").key("before").canonical(&e.before);
            }
            if !e.forced_by.is_empty() {
                w.raw(",").key("forced_by").strings(&e.forced_by);
            }
            if !e.sensitive.is_empty() {
                w.raw(",").key("sensitive").strings(&e.sensitive);
            }
            if !e.unknown.is_empty() {
                w.raw(",").key("unknown").strings(&e.unknown);
            }
            w.raw("}");
        }
        w.raw("]");
        if let Some(group) = &self.group {
            w.raw(",")
                .key("group")
                .raw("{")
                .key("digest")
                .string(group.digest.as_str());
            w.raw(",").key("members").strings(&group.members);
            w.raw(",").key("name").string(&group.name).raw("}");
        }
        w.raw(",").key("member").string(self.member.as_str());
        if self.opaque {
            w.raw(",").key("opaque").raw("true");
        }
        w.raw(",")
            .key("outputs")
            .raw("{")
            .key("known")
            .object(&self.outputs.known);
        if !self.outputs.sensitive.is_empty() {
            w.raw(",").key("sensitive").strings(&self.outputs.sensitive);
        }
        w.raw(",")
            .key("unknown")
            .strings(&self.outputs.unknown)
            .raw("}");
        if self.opaque {
            w.raw(",").key("summary").string(self.summary.as_str());
        }
        w.raw("}");
        w.finish()
    }

    /// Whether the stored digest still matches the content (a document read
    /// back is re-verified), for a plan digested with RFC 8785 numbers.
    pub fn verify(&self) -> Result<(), String> {
        self.verify_with(NumberForm::Ecmascript)
    }

    /// [`Self::verify`] for a plan digested with `numbers` (the rule of the
    /// change set it is stored in).
    pub fn verify_with(&self, numbers: NumberForm) -> Result<(), String> {
        let actual = self.compute_digest_with(numbers);
        if actual == self.plan_digest {
            Ok(())
        } else {
            Err(format!(
                "plan of {} carries digest {} but its content digests to {actual}; the record was altered",
                self.member, self.plan_digest
            ))
        }
    }

    pub fn counts(&self) -> Counts {
        let mut counts = Counts::default();
        for e in &self.entries {
            match e.action {
                Action::Create => counts.create += 1,
                Action::Update => counts.update += 1,
                Action::Delete => counts.delete += 1,
                Action::Replace => counts.replace += 1,
                Action::Read | Action::NoOp => {}
            }
        }
        counts
    }

    /// A plan is empty when it is not opaque and lists nothing but `no-op`s
    /// and reads: its apply has nothing to do.
    pub fn is_empty(&self) -> bool {
        !self.opaque && !self.entries.iter().any(|e| e.action.changes())
    }

    /// The names of the rules it says it breaks, as the override gate
    /// records them (rendered as code wherever they are shown).
    pub(crate) fn denied_rules(&self) -> Vec<String> {
        self.denied.iter().map(|r| r.as_str().to_owned()).collect()
    }

    /// Every address the plan deletes or replaces, in address order.
    pub fn destructive_entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.action.is_destructive())
    }
}

/// What is wrong with a file serde_json could not read as a plan file.
fn parse_error(bytes: &[u8], e: serde_json::Error) -> PlanFileError {
    match e.classify() {
        serde_json::error::Category::Data => match serde_json::from_slice::<Value>(bytes) {
            Ok(v) if !v.is_object() => PlanFileError::Shape(format!(
                "the top level must be an object, found {}",
                kind_of(&v)
            )),
            _ => PlanFileError::Shape(e.to_string()),
        },
        _ => PlanFileError::NotJson(e.to_string()),
    }
}

/// Paths in their normal spelling, sorted and deduplicated. A plain key
/// (`id`, `user_data`) is its own normal spelling and needs no parse; most
/// paths in a plan are one. `field` names the list in an error.
fn normalise_paths(
    mut paths: Vec<String>,
    field: impl Fn() -> String,
) -> Result<Vec<String>, PlanFileError> {
    // In place: a plan has such a list on most entries.
    for path in &mut paths {
        if !path.is_empty()
            && path
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            continue;
        }
        let parsed = ValuePath::parse(path)
            .map_err(|e| PlanFileError::Invalid(format!("{}: {e}", field())))?;
        *path = parsed.to_string();
    }
    paths.sort();
    paths.dedup();
    Ok(paths)
}

pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> Result<MemberPlan, PlanFileError> {
        MemberPlan::parse(&"app@dev".into(), text.as_bytes())
    }

    /// Found by the plan_file fuzzer (10-minute run): an unknown path made of
    /// a two-byte character panicked while the plan was read; it is refused.
    #[test]
    fn an_unknown_path_of_a_character_of_several_bytes_is_refused_not_a_panic() {
        let text = r#"{"summary": "s", "entries": [{"address": "a.b", "action": "update",
            "before": {"id": "vpc-1"}, "after": {"id": null}, "unknown": ["ښ"]}]}"#;
        let error = parse(text).unwrap_err().to_string();
        assert!(error.contains("unexpected `ښ` at 0"), "{error}");
    }

    fn held_in_file(plan: &MemberPlan) -> usize {
        plan.entries.iter().map(Entry::bytes_in_file).sum()
    }

    #[test]
    fn a_plan_keeps_its_file_only_while_the_file_is_mostly_its_values() {
        let entry = |i: usize| {
            json!({"address": format!("r.n{i}"), "action": "create",
                   "after": {"id": null, "tags": {"team": "infra"}, "user_data": "x".repeat(200)}})
        };
        let entries: Vec<Value> = (0..20).map(entry).collect();
        let plan_json = json!({"summary": "s", "entries": entries});

        // serde_json writes every value canonical, and the values are most
        // of the file: the plan holds them as spans of it.
        let compact = parse(&plan_json.to_string()).unwrap();
        assert!(held_in_file(&compact) > 0);

        // Pretty-printed, only `{}`-like scraps would be canonical as written:
        // the plan keeps its own copies and lets the file go.
        let mut pretty = serde_json::to_string_pretty(&plan_json).unwrap();
        pretty = pretty.replace(
            r#""action": "create","#,
            r#""action": "create", "before": {},"#,
        );
        let rewritten = parse(&pretty).unwrap();
        assert_eq!(held_in_file(&rewritten), 0);
        assert_eq!(rewritten.entries[0].after, compact.entries[0].after);
        assert_eq!(rewritten.entries[0].before.as_str(), "{}");
    }

    #[test]
    fn an_after_nested_too_deep_to_read_back_is_refused() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let text = format!(
            r#"{{"entries": [{{"address": "a.b", "action": "create", "after": {deep}}}]}}"#
        );
        let error = parse(&text).unwrap_err();
        assert!(
            matches!(&error, PlanFileError::NotJson(m) if m.starts_with("entries[0].after: recursion limit")),
            "{error}"
        );
    }

    const VALID: &str = r#"{
        "summary": "one update",
        "entries": [
            {"address": "b.two", "action": "no-op"},
            {"address": "a.one", "action": "update", "after": {"cidr": "10.0.0.0/16", "id": null}, "unknown": ["id"]}
        ],
        "outputs": {"known": {"vpc_id": "vpc-1"}, "unknown": ["subnet_ids"]}
    }"#;

    #[test]
    fn a_valid_plan_is_normalised() {
        let plan = parse(VALID).unwrap();
        assert_eq!(plan.entries[0].address, "a.one");
        assert!(!plan.destructive);
        assert!(!plan.is_empty());
        assert_eq!(
            plan.counts(),
            Counts {
                update: 1,
                ..Counts::default()
            }
        );
        assert!(plan.verify().is_ok());
    }

    #[test]
    fn entry_order_does_not_move_the_digest_but_content_does() {
        let a = parse(VALID).unwrap();
        let reordered = VALID
            .replace("b.two", "TMP")
            .replace("a.one", "b.two")
            .replace("TMP", "a.one");
        assert_ne!(reordered, VALID);
        let swapped = r#"{"entries": [
            {"address": "a.one", "action": "update", "after": {"id": null, "cidr": "10.0.0.0/16"}, "unknown": ["id"]},
            {"address": "b.two", "action": "no-op"}],
            "outputs": {"unknown": ["subnet_ids"], "known": {"vpc_id": "vpc-1"}}, "summary": "other words"}"#;
        assert_eq!(parse(swapped).unwrap().plan_digest, a.plan_digest);
        let moved = VALID.replace("10.0.0.0/16", "10.1.0.0/16");
        assert_ne!(parse(&moved).unwrap().plan_digest, a.plan_digest);
        let other_member = MemberPlan::parse(&"app@prod".into(), VALID.as_bytes()).unwrap();
        assert_ne!(other_member.plan_digest, a.plan_digest);
    }

    #[test]
    fn the_streamed_digest_is_the_digest_of_the_canonical_document() {
        for text in [
            VALID,
            r#"{"entries": [{"address": "x", "action": "delete", "sensitive": ["a"]}], "denied": {"rules": ["r"]},
                "outputs": {"known": {"pw": "s3cret"}, "sensitive": ["pw"]}}"#,
            r#"{"entries": [{"address": "x", "action": "create", "after": {"big": 9007199254740993, "f": 1e21}}],
                "outputs": {"known": {"id": -9223372036854775808}}}"#,
            r#"{"entries": [{"address": "db", "action": "replace", "before": {"v": "13"}, "after": {"v": "15"},
                "forced_by": ["v"]}]}"#,
            r#"{"summary": "3 migrations to run", "outputs": {"known": {"schema": 42}}}"#,
        ] {
            let plan = parse(text).unwrap();
            let mut document = json!({
                "member": plan.member,
                "entries": plan.entries,
                "outputs": plan.outputs,
                "destructive": plan.destructive,
                "denied": plan.denied,
            });
            if plan.opaque {
                document["opaque"] = json!(true);
                document["summary"] = json!(plan.summary);
            }
            assert_eq!(
                plan.plan_digest,
                crate::model::canonical::digest_value(&document)
            );
            assert_eq!(
                plan.compute_digest_with(NumberForm::Version1),
                crate::model::canonical::digest_value_with(&document, NumberForm::Version1)
            );
            // Planned with a group, it binds the group too.
            let mut grouped = plan.clone();
            let mates = vec![
                (plan.member.clone(), plan.plan_digest.clone()),
                ("z@dev".into(), Digest::repeated('1')),
            ];
            grouped.group = Some(GroupBinding {
                name: "stack".into(),
                members: mates.iter().map(|(m, _)| m.clone()).collect(),
                digest: GroupBinding::digest_of("stack", &mates),
            });
            document["group"] = json!(grouped.group);
            assert_eq!(
                grouped.compute_digest(),
                crate::model::canonical::digest_value(&document)
            );
            assert_ne!(grouped.compute_digest(), plan.plan_digest);
        }
    }

    /// Digests are stored in the ledger and approvals are bound to them, so
    /// the bytes they hash may never move. These were computed by the writer
    /// before it was optimised; a change to any of them is a bug.
    #[test]
    fn digests_of_a_rich_plan_are_pinned() {
        let rich = r#"{
            "summary": "ignored prose",
            "entries": [
                {"address": "module.z[\"ключ\"].aws_instance.x", "action": "update",
                 "before": {"tags": {"Name": "old", "": "empty key"}, "n": -0.0, "list": []},
                 "after": {"tags": {"Name": "new \"quoted\" \\ back\tslash\n", "b": {}, "a": [1, 2.5, -3]},
                           "n": 1e21, "small": 1e-7, "tiny": 5e-324, "max": 1.7976931348623157e308,
                           "third": 0.3333333333333333, "big": 9007199254740993, "huge": 18446744073709551615,
                           "neg": -9223372036854775808, "exp": 123456789012345678901234,
                           "tie": 1424953923781206.25, "ctl": "\u0000\u0001\u001f\u007f\u0080",
                           "uni": "é € 😀 \ufb33 \u2028", "\ud83d\ude00": 1, "\ufb33": 2, "\u20ac": 3,
                           "\r": 4, "1": 5, "A": 6, "a": 7, "é": 8, "z": [null, true, false, {"y": [[]]}]},
                 "unknown": ["after.id", "tags[\"x y\"]", "after.id"], "sensitive": ["tags.Name"]},
                {"address": "a.db", "action": "replace", "before": {"v": "13"}, "after": {"v": "15"},
                 "forced_by": ["v", "engine"]},
                {"address": "b.gone", "action": "delete", "after": null},
                {"address": "c.read", "action": "read", "after": {"id": "r-1"}},
                {"address": "d.same", "action": "no-op"},
                {"address": "e.new", "action": "create", "after": {"ports": [22, 80, 443], "ratio": 0.1}}
            ],
            "outputs": {"known": {"vpc_id": "vpc-1", "zeta": {"nested": [1, "two", 3.0]}, "pw": "s3cret", "ünï": true},
                        "unknown": ["subnet_ids", "zeta.later"], "sensitive": ["pw", "pw"]},
            "destructive": true,
            "denied": {"rules": ["no-public-buckets", "change-window", "no-public-buckets"]}
        }"#;
        let plan = parse(rich).unwrap();
        assert_eq!(
            plan.plan_digest,
            "sha256:99840273d4719e7ac02bc98c22128e7565aa63af03c5839856aa51abf02ea434"
        );
        assert_eq!(
            plan.compute_digest_with(NumberForm::Version1),
            "sha256:6f76f525642949c6a17a12f4c94e19883515b560fd13a2b2691bf1ffc6013b4c"
        );
        let opaque = parse(
            r#"{"summary": "3 migrations \"to\" run ✓", "outputs": {"known": {"schema": 42}}}"#,
        )
        .unwrap();
        assert!(opaque.opaque);
        assert_eq!(
            opaque.plan_digest,
            "sha256:01dfc6d54b5a3ca07936fea3f49c21bb3d44ce276ba9f3f1dcd51fece9049af0"
        );
    }

    #[test]
    fn destructive_defaults_from_deletes_and_replaces() {
        let plan = parse(r#"{"entries": [{"address": "x", "action": "replace"}]}"#).unwrap();
        assert!(plan.destructive);
        let plan =
            parse(r#"{"entries": [{"address": "x", "action": "delete"}], "destructive": false}"#)
                .unwrap();
        assert!(!plan.destructive, "an explicit value wins");
        assert!(
            parse(r#"{"entries": [{"address": "x", "action": "no-op"}]}"#)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn defects_are_named() {
        assert_eq!(parse("  ").unwrap_err(), PlanFileError::Empty);
        assert!(matches!(
            parse("{nope").unwrap_err(),
            PlanFileError::NotJson(_)
        ));
        let e = parse("[1]").unwrap_err().to_string();
        assert!(
            e.contains("top level must be an object, found an array"),
            "{e}"
        );
        let e = parse(r#"{"entries": [{"address": "x", "action": "destroy"}]}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown variant `destroy`") && e.contains("no-op"),
            "{e}"
        );
        let e = parse(r#"{"entries": [{"address": 7, "action": "create"}]}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("invalid type: integer `7`, expected a string"),
            "{e}"
        );
        let e = parse(r#"{"entries": [], "digest": "sha256:00"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `digest`"), "{e}");
        let e = parse(r#"{"entries": [{"address": "x", "action": "create"}, {"address": "x", "action": "create"}]}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("appears twice"), "{e}");
        let e = parse(r#"{"entries": [{"address": "x", "action": "create", "unknown": ["a["]}]}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("entries[0].unknown") && e.contains("never closed"),
            "{e}"
        );
    }

    #[test]
    fn a_plan_that_lists_nothing_and_does_not_say_it_is_empty_is_opaque() {
        let opaque = parse(r#"{"summary": "3 migrations to run"}"#).unwrap();
        assert!(opaque.opaque && !opaque.is_empty(), "its apply must run");
        assert!(opaque.destructive, "what it does cannot be seen");
        let other = parse(r#"{"summary": "4 migrations to run"}"#).unwrap();
        assert_ne!(
            opaque.plan_digest, other.plan_digest,
            "an opaque plan's summary is all there is to approve, so it is bound"
        );
        let said_safe =
            parse(r#"{"summary": "3 migrations to run", "destructive": false}"#).unwrap();
        assert!(said_safe.opaque && !said_safe.destructive);

        let empty = parse(r#"{"summary": "nothing to do", "empty": true}"#).unwrap();
        assert!(!empty.opaque && empty.is_empty() && !empty.destructive);
        let reworded = parse(r#"{"summary": "all in sync", "empty": true}"#).unwrap();
        assert_eq!(
            empty.plan_digest, reworded.plan_digest,
            "the prose of a plan that lists its entries is not bound"
        );

        let listed_no_ops = parse(r#"{"entries": [{"address": "x", "action": "no-op"}]}"#).unwrap();
        assert!(!listed_no_ops.opaque && listed_no_ops.is_empty());
        let not_empty_after_all =
            parse(r#"{"entries": [{"address": "x", "action": "no-op"}], "empty": false}"#).unwrap();
        assert!(
            not_empty_after_all.opaque,
            "entries that change nothing do not describe a plan that says it changes something"
        );
        let e = parse(r#"{"entries": [{"address": "x", "action": "delete"}], "empty": true}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`empty` is true but `x` is a delete"), "{e}");
    }

    #[test]
    fn before_and_what_forces_a_replacement_are_bound() {
        let text = r#"{"entries": [{"address": "db", "action": "replace", "before": {"v": "13"},
            "after": {"v": "15"}, "forced_by": ["v"]}]}"#;
        let plan = parse(text).unwrap();
        assert_eq!(plan.entries[0].forced_by, vec!["v".to_owned()]);
        let other_before = parse(&text.replace(r#""13""#, r#""14""#)).unwrap();
        assert_ne!(plan.plan_digest, other_before.plan_digest);
        let not_forced = parse(&text.replace(r#", "forced_by": ["v"]"#, "")).unwrap();
        assert_ne!(plan.plan_digest, not_forced.plan_digest);
        let without_before =
            parse(r#"{"entries": [{"address": "x", "action": "create"}]}"#).unwrap();
        let with_null_before =
            parse(r#"{"entries": [{"address": "x", "action": "create", "before": null}]}"#)
                .unwrap();
        assert_eq!(
            without_before.plan_digest, with_null_before.plan_digest,
            "plans written before `before` existed keep their digests"
        );
        let e = parse(r#"{"entries": [{"address": "x", "action": "update", "forced_by": ["a"]}]}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("only a `replace` is forced"), "{e}");
    }

    #[test]
    fn no_input_makes_it_panic() {
        // Every prefix of a valid file, and every single-byte corruption of it.
        let valid = VALID.as_bytes();
        for end in 0..valid.len() {
            let _ = parse(std::str::from_utf8(&valid[..end]).unwrap_or(""));
        }
        for i in 0..valid.len() {
            for b in [b'"', b'{', b']', b'0', b'\\', 0xff] {
                let mut bytes = valid.to_vec();
                bytes[i] = b;
                let _ = MemberPlan::parse(&"app@dev".into(), &bytes);
            }
        }
        for odd in [
            "null",
            "1e400",
            r#"{"entries": null}"#,
            r#"{"entries": [{"address": "x", "action": "create", "unknown": [""]}]}"#,
        ] {
            let _ = parse(odd);
        }
    }

    #[test]
    fn a_missing_file_says_where_it_was_expected() {
        let e =
            MemberPlan::read(&"app@dev".into(), Path::new("/nonexistent/plan.json")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/plan.json"));
    }

    #[test]
    fn tampering_is_detected_on_verify() {
        let mut plan = parse(VALID).unwrap();
        plan.entries[0].action = Action::Delete;
        assert!(plan.verify().unwrap_err().contains("altered"));
    }

    #[test]
    fn partly_unknown_outputs_are_not_fully_known() {
        let outputs = Outputs {
            known: serde_json::from_str(r#"{"a": 1, "b": [1, null]}"#).unwrap(),
            unknown: vec!["b[1]".into(), "c".into()],
            sensitive: vec![],
        };
        assert_eq!(outputs.fully_known("a"), Some(&serde_json::json!(1)));
        assert_eq!(outputs.fully_known("b"), None);
        assert_eq!(outputs.fully_known("c"), None);
    }
}
