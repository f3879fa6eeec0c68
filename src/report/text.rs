//! The terminal report of `wavegate plan`, written to stderr.

use super::{counts_text, entries, reason_text};
use crate::model::MemberId;
use crate::plan::changeset::MemberStatus;
use crate::plan::outcome::{InputSource, PlannedChange};
use std::fmt::Write as _;

pub fn render(change: &PlannedChange) -> String {
    let mut out = String::new();
    let d = &change.derivation;
    let _ = writeln!(out, "{}", change.fan_out_line());
    if d.waves.is_empty() {
        let _ = writeln!(out, "  nothing to run");
    }
    for (name, wave) in crate::model::WaveName::of_each(&d.waves)
        .iter()
        .zip(&d.waves)
    {
        let _ = writeln!(out, "  {name}: {}", wave.join(", "));
    }
    for g in &d.groups {
        let digest = change
            .group_digest(g)
            .map_or_else(|| "not planned".into(), ToString::to_string);
        let _ = writeln!(
            out,
            "  group {} in {}: {} planned and applied with one call; group digest {digest}",
            g.group,
            g.stage,
            g.members.join(", ")
        );
    }
    for f in &d.fallbacks {
        let _ = writeln!(
            out,
            "  not grouped: {} (group {}): {}",
            f.member, f.group, f.why
        );
    }
    for stage in &change.preview.stages {
        let _ = writeln!(
            out,
            "  after merge, {}: {}",
            stage.name,
            super::markdown::stage_meaning(change, stage)
        );
    }
    for (component, why) in &d.selected {
        let _ = writeln!(out, "  selected {component}: {why}");
    }
    if !change.skipped.is_empty() {
        let _ = writeln!(out, "  not running ({}):", change.skipped.len());
        let width = change
            .skipped
            .iter()
            .map(|s| {
                s.member
                    .as_ref()
                    .map_or(&s.component[..], MemberId::as_str)
                    .len()
            })
            .max()
            .unwrap_or(0);
        for s in &change.skipped {
            let who = s.member.as_ref().map_or(&s.component[..], MemberId::as_str);
            let _ = writeln!(out, "    {who:width$}  {}", reason_text(s));
        }
    }
    if !d.indeterminate.is_empty() {
        let _ = writeln!(
            out,
            "  indeterminate (no component claims these, no ignore pattern covers them): {}",
            d.indeterminate.join(", ")
        );
    }
    if !change.seeded.is_empty() {
        let _ = writeln!(
            out,
            "  seeded outputs, taken on trust: {}",
            change.seeded.join(", ")
        );
    }
    for note in &change.notes {
        let _ = writeln!(out, "  note: {note}");
    }
    if change.unsandboxed {
        let _ = writeln!(
            out,
            "  note: commands ran without a sandbox (--no-sandbox or WAVEGATE_SANDBOX=none)"
        );
    }
    if !change.members.is_empty() {
        let _ = writeln!(out, "members:");
    }
    let width = change
        .members
        .iter()
        .map(|m| m.member.as_str().len())
        .max()
        .unwrap_or(0);
    for m in &change.members {
        match (&m.status, &m.plan) {
            (MemberStatus::Planned, Some(plan)) => {
                let flag = match (plan.destructive, plan.opaque, plan.is_empty()) {
                    (true, true, _) => "  destructive, opaque (lists no resources)",
                    (true, false, _) => "  destructive",
                    (false, true, _) => "  opaque (lists no resources)",
                    (false, false, true) => "  no changes",
                    (false, false, false) => "",
                };
                let _ = writeln!(
                    out,
                    "  {:width$}  planned  {}  {}{flag}",
                    m.member,
                    counts_text(&plan.counts()),
                    plan.plan_digest
                );
                for line in entries::diff_lines(plan) {
                    let _ = writeln!(out, "      {line}");
                }
            }
            (MemberStatus::Blocked, _) => {
                let _ = writeln!(
                    out,
                    "  {:width$}  blocked by {}",
                    m.member,
                    m.blocked_by.as_deref().unwrap_or("?")
                );
            }
            _ => {
                let error = m.error.as_deref().unwrap_or("failed");
                let _ = writeln!(
                    out,
                    "  {:width$}  PLAN FAILED: {}",
                    m.member,
                    error.replace('\n', "\n      ")
                );
            }
        }
        for (name, input) in &m.inputs {
            if input.source == InputSource::Unknown {
                let _ = writeln!(
                    out,
                    "      unknown input {name} <- {}: {}",
                    input.reference,
                    input.why.as_deref().unwrap_or("")
                );
            }
        }
    }
    if change.members.is_empty() {
        let unclaimed = d.indeterminate.len();
        if unclaimed > 0 {
            let _ = writeln!(
                out,
                "nothing planned, but {unclaimed} changed file(s) no component claims: if they are infrastructure, a component's `dir` or `paths` should claim them"
            );
        } else {
            let _ = writeln!(out, "nothing to plan");
        }
        return out;
    }
    let _ = writeln!(out, "plan: {}", change.change_set.digest);
    let _ = writeln!(out, "approve: /approve {}", change.change_set.digest);
    out
}
