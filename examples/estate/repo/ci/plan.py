#!/usr/bin/env python3
"""plan.py COMPONENT STAGE PLAN_FILE [INPUTS_FILE]

Plans one member of the simulated estate: diffs the desired resources of the
component in the working directory (resources.json, outputs.json; see
estate.py) against its state in $ESTATE_DIR/<stage>/<component>.json and
writes the plan file wavegate reads (docs/plan-files.md). INPUTS_FILE is
{"known": {...}, "unknown": [...]}; an input it does not know is unknown.

Test hooks, files in the component directory:
  .hang          sleep forever, in a child process that keeps stdout open
                 (only killing the whole process group ends it)
  .fail-plan     print its contents to stderr and exit 1
  .garbage-plan  write "not json" as the plan file and exit 0
  .hang-once     sleep (10 minutes at most) while $ESTATE_DIR/hang-once exists
                 when the plan starts (a test removes it once the first plan
                 hangs, so later plans go through)
  .pause         wait (10 minutes at most) while $ESTATE_DIR/pause exists,
                 then plan as usual (a test removes it to let the plan end)

Test hooks for one member, without a commit: $ESTATE_DIR/<stage>/<component>.deny,
each non-empty line the name of a policy rule the plan breaks; the plan file
then carries "denied": {"rules": [...]}. $ESTATE_DIR/<stage>/<component>.fail-plan
fails the plan as .fail-plan does.

A plan only reads the estate: wavegate runs it in a sandbox where
$ESTATE_DIR is read-only (WAVEGATE_SANDBOX_APPLY_WRITE), so every line it
has to say goes to its output, "estate: planning <member> (...)" first.
"""

import sys

sys.dont_write_bytecode = True  # keep the worktree clean of __pycache__

import json
import os
import subprocess
import time

import estate

SYMBOLS = {"create": "+", "update": "~", "replace": "-/+", "delete": "-"}


def run_hooks(component, stage, plan_file):
    if os.path.exists(".hang"):
        estate.say(".hang exists: sleeping until killed")
        subprocess.run([sys.executable, "-c", "import time; time.sleep(3600)"])
        while True:
            time.sleep(3600)
    if os.path.exists(".hang-once"):
        marker = os.path.join(estate.estate_dir(), "hang-once")
        if os.path.exists(marker):
            estate.say(".hang-once: sleeping until killed")
            time.sleep(600)
    if os.path.exists(".pause"):
        marker = os.path.join(estate.estate_dir(), "pause")
        if os.path.exists(marker):
            estate.say(".pause: waiting while $ESTATE_DIR/pause exists")
            deadline = time.monotonic() + 600
            while os.path.exists(marker) and time.monotonic() < deadline:
                time.sleep(0.05)
    estate.fail_hook(".fail-plan",
                     os.path.join(estate.estate_dir(), stage, f"{component}.fail-plan"))
    if os.path.exists(".garbage-plan"):
        with open(plan_file, "w", encoding="utf-8") as f:
            f.write("not json")
        sys.exit(0)


def denied_rules(stage, component):
    """The policy rules $ESTATE_DIR/<stage>/<component>.deny names, one a line."""
    path = os.path.join(estate.estate_dir(), stage, f"{component}.deny")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def read_inputs(path):
    """The inputs known now; anything else a resource reads is unknown."""
    if not path or not os.path.exists(path):
        return {}
    doc = estate.read_json(path, "inputs file")
    if not isinstance(doc, dict):
        estate.die(f"inputs file {path} must be an object {{\"known\": {{...}}, \"unknown\": [...]}}")
    known = dict(doc.get("known") or {})
    for name in doc.get("unknown") or []:
        known.pop(name, None)
    return known


MISSING = object()


def plan_entry(address, res, current, stage, inputs):
    """Plans one address. Returns (entry, unknown attrs, [(attr, before, after, forces)]).
    res is None when the address is no longer desired; current when not deployed."""
    if res is None:
        entry = {"address": address, "action": "delete", "before": current, "after": None, "unknown": []}
        return entry, set(), []
    desired, unknown, unknown_attrs = {}, [], set()
    for attr, value in res.attrs.items():
        seen = len(unknown)
        desired[attr] = estate.resolve(value, estate.child_path("", attr), stage, inputs, unknown)
        if len(unknown) > seen:
            unknown_attrs.add(attr)
    changed = []
    if current is None:
        action = "create"
    else:
        deployed = {k: v for k, v in current.items() if k not in res.computed}
        changed = sorted(k for k in set(desired) | set(deployed)
                         if k in unknown_attrs or desired.get(k, MISSING) != deployed.get(k, MISSING))
        if not changed:
            return {"address": address, "action": "no-op", "after": current, "unknown": []}, set(), []
        action = "replace" if res.force_new & set(changed) else "update"
    after = dict(desired)
    for attr in res.computed:
        if action == "update" and current.get(attr) is not None:
            after[attr] = current[attr]
        else:
            after[attr] = None
            unknown.append(estate.child_path("", attr))
            unknown_attrs.add(attr)
    diff = [(attr, current.get(attr),
             "(known after apply)" if attr in unknown_attrs else show(after.get(attr)),
             attr in res.force_new) for attr in changed]
    entry = {"address": address, "action": action, "after": after, "unknown": sorted(set(unknown))}
    if current is not None:
        entry["before"] = current
    if action == "replace":
        entry["forced_by"] = sorted(res.force_new & set(changed))
    return entry, unknown_attrs, diff


def plan_outputs(outputs, entries, unknown_attrs):
    """Outputs as the plan knows them: known where every part is known now."""
    known, unknown = {}, []
    for name, (address, attr) in sorted(outputs.items()):
        entry = entries.get(address)
        if entry is None or entry["action"] == "delete":
            estate.die(f"outputs.json: `{name}` reads {address}, which resources.json does not declare")
        if attr not in entry["after"]:
            estate.die(f"outputs.json: `{name}` reads {address}.{attr}, an attribute {address} does not have")
        if attr in unknown_attrs[address]:
            unknown.append(name)
        else:
            known[name] = entry["after"][attr]
    return {"known": known, "unknown": unknown}


def referenced_inputs(value):
    """Names of the inputs a desired value reads through ${input.NAME}."""
    if isinstance(value, dict):
        return {r for v in value.values() for r in referenced_inputs(v)}
    if isinstance(value, list):
        return {r for v in value for r in referenced_inputs(v)}
    if isinstance(value, str):
        return {m.group(1)[len("input."):] for m in estate.REFERENCE.finditer(value)
                if m.group(1).startswith("input.")}
    return set()


def show(value):
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def summarise(title, entries, diffs, outputs, missing_inputs):
    """Terraform-style text for the report, and its one-line headline."""
    lines, counts = [title, ""], {"create": 0, "update": 0, "replace": 0, "delete": 0}
    for entry in entries:
        action = entry["action"]
        if action == "no-op":
            continue
        counts[action] += 1
        lines.append(f"{SYMBOLS[action]:>3} {entry['address']} ({action})")
        for attr, before, after, forces in diffs[entry["address"]]:
            note = "  # forces replacement" if forces else ""
            lines.append(f"      {attr}: {show(before)} -> {after}{note}")
    if sum(counts.values()) == 0:
        headline = "No changes. The estate matches the configuration."
    else:
        # Counted as wavegate counts: a replacement is one replace, not an add and a destroy.
        headline = (f"Plan: {counts['create']} to add, {counts['update']} to change, "
                    f"{counts['delete']} to destroy, {counts['replace']} to replace.")
        lines.append("")
    lines.append(headline)
    if outputs["unknown"]:
        lines.append("Outputs known after apply: " + ", ".join(outputs["unknown"]))
    if missing_inputs:
        lines.append("Inputs not known yet: " + ", ".join(missing_inputs))
    return "\n".join(lines), headline


def main(argv):
    if len(argv) not in (4, 5):
        estate.die("usage: plan.py COMPONENT STAGE PLAN_FILE [INPUTS_FILE]", code=2)
    component, stage, plan_file = argv[1:4]
    inputs_file = argv[4] if len(argv) == 5 else None
    run_hooks(component, stage, plan_file)
    who = estate.member(component, stage)

    inputs = read_inputs(inputs_file)
    resources = estate.load_resources(stage)
    outputs = estate.load_outputs()
    state = estate.load_state(stage, component)
    estate.say(f"planning {who} ({len(resources)} desired, {len(state)} deployed)")
    missing = sorted({name for res in resources.values()
                      for name in referenced_inputs(res.attrs)} - set(inputs))
    if missing:
        estate.say("inputs not known yet: " + ", ".join(missing))

    entries, unknown_attrs, diffs = {}, {}, {}
    for address in sorted(set(resources) | set(state)):
        entries[address], unknown_attrs[address], diffs[address] = plan_entry(
            address, resources.get(address), state.get(address), stage, inputs)

    ordered = [entries[a] for a in sorted(entries)]
    planned_outputs = plan_outputs(outputs, entries, unknown_attrs)
    summary, headline = summarise(f"Estate plan for {who}", ordered, diffs,
                                  planned_outputs, missing)
    plan = {
        "summary": summary,
        "entries": ordered,
        "outputs": planned_outputs,
        "destructive": any(e["action"] in ("delete", "replace") for e in ordered),
        "empty": all(e["action"] == "no-op" for e in ordered),
    }
    rules = denied_rules(stage, component)
    if rules:
        estate.say("denied by policy: " + ", ".join(rules))
        plan["denied"] = {"rules": rules}
    estate.write_json(plan_file, plan)
    estate.say(headline)


if __name__ == "__main__":
    main(sys.argv)
