#!/usr/bin/env python3
"""group.py plan|apply MEMBERS_FILE

Plans or applies a group's members with one call, as `terragrunt run-all`
does a stack: MEMBERS_FILE lists each member with its directory and files
(docs/configuration.md#groups). Members run in dependency order, and a
member that reads a group-mate's output gets it from the mate itself: at
plan time from the mate's plan (where the plan knows it), at apply time from
what the mate just applied (the member is planned again with it first).

plan: runs plan.py for each member; a member that fails fails the call.
apply: runs apply.py for each member; at the first that fails, its outputs
file says `failed` with what it printed, every member after it says
`not-started`, and the call exits 1.
"""

import sys

sys.dont_write_bytecode = True  # keep the worktree clean of __pycache__

import json
import os
import subprocess
import tomllib

import estate

CI = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(CI)


def components():
    with open(os.path.join(ROOT, "wavegate.toml"), "rb") as f:
        config = tomllib.load(f)
    return {c["name"]: c for c in config.get("component", [])}


def mate_reads(entry, by_component, declared):
    """(input name, mate member, output) for each output of a mate it reads."""
    component = declared.get(entry["component"], {})
    reads = []
    for name, reference in sorted((component.get("inputs") or {}).items()):
        upstream, _, output = reference.partition(".")
        mate = by_component.get(upstream)
        if mate is not None:
            reads.append((name, mate["member"], output))
    return reads


def in_order(members, declared):
    """Members with every mate they depend on before them."""
    by_component = {m["component"]: m for m in members}
    done, ordered = set(), []

    def visit(member, seen=()):
        if member["member"] in done:
            return
        if member["member"] in seen:
            estate.die(f"group members depend on each other in a cycle: {member['member']}")
        for dep in declared.get(member["component"], {}).get("depends_on", []):
            if dep in by_component:
                visit(by_component[dep], seen + (member["member"],))
        done.add(member["member"])
        ordered.append(member)

    for member in members:
        visit(member)
    return ordered, by_component


def inputs_with(entry, reads, values, path):
    """Writes the member's inputs, its mates' values filled in, to `path`."""
    doc = estate.read_json(entry["inputsFile"], "inputs file")
    known, unknown = dict(doc.get("known") or {}), list(doc.get("unknown") or [])
    for name, mate, output in reads:
        if output in values.get(mate, {}):
            known[name] = values[mate][output]
            unknown = [u for u in unknown if u != name]
    estate.write_json(path, {"known": known, "unknown": unknown})
    return path


def run(script, entry, args):
    return subprocess.run([sys.executable, os.path.join(CI, script), *args],
                          cwd=entry["path"], capture_output=True, text=True)


def passed_on(result):
    sys.stdout.write(result.stdout)
    sys.stdout.flush()
    sys.stderr.write(result.stderr)
    sys.stderr.flush()


def plan(members, declared):
    ordered, by_component = in_order(members, declared)
    planned = {}
    for entry in ordered:
        reads = mate_reads(entry, by_component, declared)
        inputs = inputs_with(entry, reads, planned,
                             os.path.join(os.path.dirname(entry["planFile"]), "group-inputs.json"))
        result = run("plan.py", entry, [entry["component"], entry["stage"], entry["planFile"], inputs])
        passed_on(result)
        if result.returncode != 0:
            estate.die(f"the group's plan stopped at {entry['member']}")
        plan_doc = estate.read_json(entry["planFile"], "plan file")
        planned[entry["member"]] = (plan_doc.get("outputs") or {}).get("known") or {}


def apply(members, declared):
    ordered, by_component = in_order(members, declared)
    applied = {}
    for i, entry in enumerate(ordered):
        reads = mate_reads(entry, by_component, declared)
        plan_file = entry["planFile"]
        if reads:
            here = os.path.dirname(entry["planFile"])
            inputs = inputs_with(entry, reads, applied, os.path.join(here, "group-inputs.json"))
            plan_file = os.path.join(here, "group-plan.json")
            result = run("plan.py", entry, [entry["component"], entry["stage"], plan_file, inputs])
            passed_on(result)
        else:
            result = None
        if result is None or result.returncode == 0:
            result = run("apply.py", entry, [entry["component"], entry["stage"], plan_file,
                                             entry["outputsFile"], entry["carryFile"]])
            passed_on(result)
        if result.returncode != 0:
            said = (result.stderr or result.stdout).strip().splitlines()
            estate.write_json(entry["outputsFile"], {
                "outcome": "failed",
                "error": said[-1] if said else f"exit {result.returncode}",
            })
            for later in ordered[i + 1:]:
                estate.write_json(later["outputsFile"], {"outcome": "not-started"})
            estate.die(f"the group's apply stopped at {entry['member']}")
        applied[entry["member"]] = estate.read_json(entry["outputsFile"], "outputs file")


def main(argv):
    if len(argv) != 3 or argv[1] not in ("plan", "apply"):
        estate.die("usage: group.py plan|apply MEMBERS_FILE", code=2)
    doc = estate.read_json(argv[2], "members file")
    estate.say(f"{argv[1]} group {doc['group']}@{doc['stage']}: "
               + ", ".join(m["member"] for m in doc["members"]))
    (plan if argv[1] == "plan" else apply)(doc["members"], components())


if __name__ == "__main__":
    main(sys.argv)
