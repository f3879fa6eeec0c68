//! What a member's plan digest binds, as a reviewer reads it: one line per
//! address that changes (`+` create, `~` update, `-` delete, `-/+` replace
//! with what forces it) and, under it, each attribute that moves as
//! `path: old → new`. Sensitive values are bound but shown as `(sensitive)`;
//! values known only after apply say so.
//!
//! The markdown comment and the terminal report both render from here, so a
//! change is named and counted one way everywhere.

use crate::plan::path::ValuePath;
use crate::plan::planfile::{Action, Counts, Entry, MemberPlan};
use serde_json::Value;
use std::collections::BTreeMap;

/// Longest value shown in full; longer ones are cut visibly.
const LONGEST_VALUE: usize = 200;
const INDENT: &str = "      ";

/// The sign of an action, as the diff lines and counts write it.
pub(crate) fn symbol(action: Action) -> &'static str {
    match action {
        Action::Create => "+",
        Action::Update => "~",
        Action::Delete => "-",
        Action::Replace => "-/+",
        Action::Read => "<=",
        Action::NoOp => "=",
    }
}

/// `+1 ~0 -0 -/+2`: creates, updates, deletes, replaces, each counted once.
pub(crate) fn counts_text(c: &Counts) -> String {
    format!(
        "{}{} {}{} {}{} {}{}",
        symbol(Action::Create),
        c.create,
        symbol(Action::Update),
        c.update,
        symbol(Action::Delete),
        c.delete,
        symbol(Action::Replace),
        c.replace
    )
}

/// The lines of every entry that changes its address, in address order, and
/// one closing line counting the addresses that do not change.
pub(crate) fn diff_lines(plan: &MemberPlan) -> Vec<String> {
    let mut lines = Vec::new();
    for entry in plan.entries.iter().filter(|e| e.action.changes()) {
        lines.extend(entry_lines(entry));
    }
    let unchanged = plan.entries.iter().filter(|e| !e.action.changes()).count();
    if unchanged > 0 {
        lines.push(format!(
            "  ({unchanged} address{} unchanged)",
            if unchanged == 1 { "" } else { "es" }
        ));
    }
    lines
}

/// One entry: its heading line and one line per attribute that moves.
pub(crate) fn entry_lines(entry: &Entry) -> Vec<String> {
    let heading = match entry.action {
        Action::Replace if !entry.forced_by.is_empty() => format!(
            "{} {} (replace; forced by {})",
            symbol(entry.action),
            entry.address.as_str(),
            entry.forced_by.join(", ")
        ),
        action => format!(
            "{} {} ({})",
            symbol(action),
            entry.address.as_str(),
            action.as_str()
        ),
    };
    let mut lines = vec![heading];
    if entry.action == Action::Delete {
        return lines;
    }
    let unknown = entry.unknown_paths();
    let sensitive = entry.sensitive_paths();
    let marks = Marks {
        unknown: &unknown,
        sensitive: &sensitive,
    };
    if entry.after.is_null() && unknown.is_empty() {
        lines.push(format!("{INDENT}(every value known after apply)"));
        return lines;
    }
    let after = marks.leaves(&entry.after.to_value());
    let forced = |path: &ValuePath| {
        entry
            .forced_by
            .iter()
            .filter_map(|p| ValuePath::parse(p).ok())
            .any(|f| path.starts_with(&f) || f.starts_with(path))
    };
    let note = |path: &ValuePath| {
        if forced(path) {
            "  # forces replacement"
        } else {
            ""
        }
    };
    let has_before = !entry.before.is_null() && entry.action != Action::Create;
    if !has_before {
        // Nothing to compare with: every bound value is what the reviewer approves.
        for (path, leaf) in &after {
            lines.push(format!(
                "{INDENT}{}: {leaf}{}",
                shown_path(path),
                note(path)
            ));
        }
        return lines;
    }
    let before = Marks {
        unknown: &[],
        sensitive: &sensitive,
    }
    .leaves(&entry.before.to_value());
    let mut paths: Vec<&ValuePath> = before.keys().chain(after.keys()).collect();
    paths.sort();
    paths.dedup();
    // A value known only after apply, as Terraform shows it: each old
    // leaf under it becomes `old → (known after apply)`, never a deletion,
    // and the unknown parent itself adds no `(none) →` line.
    let unknown_after: Vec<&ValuePath> = after
        .iter()
        .filter(|(_, leaf)| **leaf == Leaf::Unknown)
        .map(|(path, _)| path)
        .collect();
    let strictly_under = |path: &ValuePath, parent: &ValuePath| {
        path.0.len() > parent.0.len() && path.starts_with(parent)
    };
    let unknown = Leaf::Unknown;
    for path in paths {
        let (old, mut new) = (before.get(path), after.get(path));
        if new.is_none() && unknown_after.iter().any(|u| strictly_under(path, u)) {
            new = Some(&unknown);
        }
        if old.is_none() && new == Some(&unknown) && before.keys().any(|b| strictly_under(b, path))
        {
            continue;
        }
        let moves = match (old, new) {
            (_, Some(Leaf::Unknown)) => true,
            (Some(a), Some(b)) => a.raw() != b.raw(),
            _ => true,
        };
        if moves {
            lines.push(format!(
                "{INDENT}{}: {} → {}{}",
                shown_path(path),
                old.map_or("(none)".to_owned(), ToString::to_string),
                new.map_or("(none)".to_owned(), ToString::to_string),
                note(path)
            ));
        }
    }
    lines
}

/// The addresses a plan deletes or replaces, each as `address (action)`.
pub(crate) fn destructive_addresses(plan: &MemberPlan) -> Vec<String> {
    plan.destructive_entries()
        .map(|e| format!("{} ({})", e.address.as_str(), e.action.as_str()))
        .collect()
}

/// The member's headline counts, or what stands in for them when the plan
/// lists no resources.
pub(crate) fn plan_headline(plan: &MemberPlan) -> String {
    let mut text = if plan.opaque {
        "opaque (lists no resources)".to_owned()
    } else {
        counts_text(&plan.counts())
    };
    if plan.destructive {
        text.push_str(" ⚠️ destructive");
    } else if plan.is_empty() {
        text.push_str(" — no changes");
    }
    text
}

/// A value at one path as it may be shown.
#[derive(Debug, Clone, PartialEq)]
enum Leaf {
    Known(Value),
    Sensitive(Value),
    Unknown,
}

impl Leaf {
    fn raw(&self) -> Option<&Value> {
        match self {
            Leaf::Known(v) | Leaf::Sensitive(v) => Some(v),
            Leaf::Unknown => None,
        }
    }
}

impl std::fmt::Display for Leaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Leaf::Known(v) => {
                let text = v.to_string();
                match text.char_indices().nth(LONGEST_VALUE) {
                    Some((cut, _)) => write!(
                        f,
                        "{}… ({} more characters)",
                        &text[..cut],
                        text[cut..].chars().count()
                    ),
                    None => f.write_str(&text),
                }
            }
            Leaf::Sensitive(_) => f.write_str("(sensitive)"),
            Leaf::Unknown => f.write_str("(known after apply)"),
        }
    }
}

struct Marks<'a> {
    unknown: &'a [ValuePath],
    sensitive: &'a [ValuePath],
}

impl Marks<'_> {
    /// Every leaf of `value` by path; a marked path is one leaf, whatever is under it.
    fn leaves(&self, value: &Value) -> BTreeMap<ValuePath, Leaf> {
        let mut out = BTreeMap::new();
        self.walk(value, &ValuePath::root(), &mut out);
        for path in self.unknown {
            if !out.keys().any(|p| p.starts_with(path)) {
                out.insert(path.clone(), Leaf::Unknown);
            }
        }
        out
    }

    fn walk(&self, value: &Value, at: &ValuePath, out: &mut BTreeMap<ValuePath, Leaf>) {
        let marked = |marks: &[ValuePath]| marks.iter().any(|m| at.starts_with(m));
        if marked(self.unknown) {
            out.insert(at.clone(), Leaf::Unknown);
            return;
        }
        if marked(self.sensitive) {
            out.insert(at.clone(), Leaf::Sensitive(value.clone()));
            return;
        }
        match value {
            Value::Object(fields) if !fields.is_empty() => {
                for (key, v) in fields {
                    self.walk(v, &at.child_key(key), out);
                }
            }
            Value::Array(items) if !items.is_empty() => {
                for (i, v) in items.iter().enumerate() {
                    self.walk(v, &at.child_index(i), out);
                }
            }
            // A null attribute of a resource says nothing a reviewer needs.
            Value::Null if !at.0.is_empty() => {}
            _ => {
                out.insert(at.clone(), Leaf::Known(value.clone()));
            }
        }
    }
}

fn shown_path(path: &ValuePath) -> String {
    if path.0.is_empty() {
        "(value)".into()
    } else {
        path.to_string()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_value_known_only_after_apply_reads_as_terraform_shows_it_not_as_a_deletion() {
        let plan = crate::plan::planfile::MemberPlan::parse(
            &"net@dev".parse().unwrap(),
            br#"{"entries": [{"address": "aws_vpc.main", "action": "update",
                "before": {"output": {"cidr": "10.1.0.0/16", "id": "vpc-1"}, "name": "main"},
                "after": {"output": null, "name": "main"}, "unknown": ["output"]}]}"#,
        )
        .unwrap();
        assert_eq!(
            diff_lines(&plan),
            [
                "~ aws_vpc.main (update)",
                "      output.cidr: \"10.1.0.0/16\" → (known after apply)",
                "      output.id: \"vpc-1\" → (known after apply)",
            ]
        );
    }

    use super::*;

    fn lines(plan_file: &str) -> String {
        let plan = MemberPlan::parse(&"web@prod".into(), plan_file.as_bytes()).unwrap();
        diff_lines(&plan).join("\n")
    }

    #[test]
    fn a_created_load_balancer_shows_every_value_it_binds() {
        insta::assert_snapshot!(lines(r#"{"entries": [
            {"address": "aws_lb.public", "action": "create",
             "after": {"internal": false, "name": "web", "subnets": ["a", "b"], "arn": null, "tags": {}},
             "unknown": ["arn"]}]}"#), @r#"
        + aws_lb.public (create)
              arn: (known after apply)
              internal: false
              name: "web"
              subnets[0]: "a"
              subnets[1]: "b"
              tags: {}
        "#);
    }

    #[test]
    fn an_update_shows_old_and_new_of_what_moves_only() {
        insta::assert_snapshot!(lines(r#"{"entries": [
            {"address": "aws_instance.web", "action": "update",
             "before": {"ami": "ami-1", "size": "small", "tags": {"a": "1"}, "password": "hunter2"},
             "after": {"ami": "ami-2", "size": "small", "tags": {"a": "1", "b": "2"}, "password": "hunter3"},
             "sensitive": ["password"]},
            {"address": "aws_vpc.main", "action": "no-op", "after": {"cidr": "10.0.0.0/16"}}]}"#), @r#"
        ~ aws_instance.web (update)
              ami: "ami-1" → "ami-2"
              password: (sensitive) → (sensitive)
              tags.b: (none) → "2"
          (1 address unchanged)
        "#);
    }

    #[test]
    fn a_replacement_says_what_forces_it_and_a_delete_is_one_line() {
        insta::assert_snapshot!(lines(r#"{"entries": [
            {"address": "aws_db.main", "action": "replace", "forced_by": ["engine_version"],
             "before": {"engine_version": "13", "id": "db-1"},
             "after": {"engine_version": "15", "id": null}, "unknown": ["id"]},
            {"address": "aws_s3_bucket.old", "action": "delete", "before": {"bucket": "old"}}]}"#), @r#"
        -/+ aws_db.main (replace; forced by engine_version)
              engine_version: "13" → "15"  # forces replacement
              id: "db-1" → (known after apply)
        - aws_s3_bucket.old (delete)
        "#);
    }

    #[test]
    fn sensitive_values_never_show_and_long_values_are_cut_visibly() {
        let long = "x".repeat(250);
        let text = lines(&format!(
            r#"{{"entries": [{{"address": "k", "action": "create",
                "after": {{"secret": {{"inner": "s3cret"}}, "policy": "{long}"}}, "sensitive": ["secret"]}}]}}"#
        ));
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("secret: (sensitive)"), "{text}");
        assert!(text.contains("… (52 more characters)"), "{text}");
    }

    #[test]
    fn a_wholly_unknown_value_says_so() {
        assert_eq!(
            lines(r#"{"entries": [{"address": "x", "action": "create"}]}"#),
            "+ x (create)\n      (every value known after apply)"
        );
    }

    #[test]
    fn counts_name_replace_one_way() {
        let c = Counts {
            create: 1,
            update: 2,
            delete: 3,
            replace: 4,
        };
        assert_eq!(counts_text(&c), "+1 ~2 -3 -/+4");
    }
}
