#!/usr/bin/env python3
"""apply.py COMPONENT STAGE PLAN_FILE OUTPUTS_FILE [CARRY_FILE]

Applies a plan written by plan.py to the simulated estate: updates
$ESTATE_DIR/<stage>/<component>.json (assigning computed attributes such as
`id` deterministically), then writes every output of the component to
OUTPUTS_FILE as {"name": value} and appends one line to
$ESTATE_DIR/apply-log.jsonl (so tests can see that nothing applied twice).

A plan that no longer fits the state (it creates what exists, changes what
does not), or that still holds a value from an input unknown when it was
planned, is not applied:
OUTPUTS_FILE gets {"outcome": "replan"} and the exit code is 0.

Test hooks: `.fail-apply` in the component directory or
$ESTATE_DIR/<stage>/<component>.fail-apply makes it print that file to stderr
and exit 1 before anything changes (delete the second one, then /retry).
`.slow-apply` in the component directory holds a number of seconds the apply
sleeps before it changes anything (a long apply, as a real one is).
Files in $ESTATE_DIR/<stage>/ for one member, without a commit:
  <component>.pause-apply    while it exists, pause: `before` (or empty) before
                             anything changes, `after` once the state, the
                             apply-log line and OUTPUTS_FILE are written. The
                             paused process writes its pid to
                             <component>.paused (removed when it goes on);
                             remove the pause file to go on, or kill the pid.
                             Gives up after 10 minutes (exit 1).
  <component>.apply-outcome  a JSON object, or a list of them used one per
                             apply: written to OUTPUTS_FILE as the outcome
                             (e.g. {"outcome": "held", "holder": "run 7"}),
                             nothing changes, exit 0. Consumed when used.
  <component>.carry-apply    a JSON object the apply carries for the member's
                             later commands: written to OUTPUTS_FILE as
                             {"carry": ...} before anything else (so a failing
                             apply leaves it too). Consumed when used.
What an earlier apply carried (CARRY_FILE, `{}` when nothing) is printed.
"""

import sys

sys.dont_write_bytecode = True  # keep the worktree clean of __pycache__

import json
import os
import time

import estate

ACTIONS = ("create", "update", "replace", "delete", "read", "no-op")


def read_plan(path):
    plan = estate.read_json(path, "plan file")
    entries = plan.get("entries") if isinstance(plan, dict) else None
    if not isinstance(entries, list):
        estate.die(f"plan file {path} has no `entries` list; was it written by plan.py?")
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not isinstance(e.get("address"), str) \
                or e.get("action") not in ACTIONS:
            estate.die(f"plan file {path}: entries[{i}] needs an `address` and an `action` "
                       f"(one of {', '.join(ACTIONS)})")
        if e["action"] in ("create", "update", "replace") and not isinstance(e.get("after"), dict):
            estate.die(f"plan file {path}: entries[{i}] ({e['address']}) has no `after` object")
    return entries


def apply_entries(entries, state, resources, component, stage):
    """The new state, or (None, problems) when the plan does not fit the state."""
    new, problems = dict(state), []
    for e in entries:
        address, action = e["address"], e["action"]
        exists = address in state
        if action == "create" and exists:
            problems.append(f"{address} is planned as `create` but already exists")
        if action in ("update", "replace", "delete", "no-op") and not exists:
            problems.append(f"{address} is planned as `{action}` but is not deployed")
        if action == "delete":
            new.pop(address, None)
        if action not in ("create", "update", "replace"):
            continue
        computed = resources[address].computed if address in resources else ["id"]
        attrs = dict(e["after"])
        for path in e.get("unknown") or []:
            attr = next((c for c in computed if estate.child_path("", c) == path), None)
            if attr is None:
                problems.append(f"{address}: `{path}` was unknown when planned (an input was "
                                "not known yet)")
            else:
                attrs[attr] = estate.computed_value(stage, component, address, attr)
        new[address] = attrs
    return (None, problems) if problems else (new, [])


def pause(root, stage, component, point):
    """Waits while the member's .pause-apply file asks to pause at `point`."""
    hook = os.path.join(root, stage, f"{component}.pause-apply")
    try:
        with open(hook, encoding="utf-8") as f:
            wanted = f.read().strip() or "before"
    except FileNotFoundError:
        return
    if wanted not in ("before", "after"):
        estate.die(f"{hook} says {wanted!r}; write `before`, `after` or nothing")
    if wanted != point:
        return
    paused = os.path.join(root, stage, f"{component}.paused")
    tmp = f"{paused}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(str(os.getpid()))
    os.replace(tmp, paused)
    estate.say(f"paused {point} applying until {hook} is removed")
    deadline = time.monotonic() + 600
    try:
        while os.path.exists(hook):
            if time.monotonic() > deadline:
                estate.die(f"still paused after 10 minutes; giving up (remove {hook})")
            time.sleep(0.05)
    finally:
        os.remove(paused)
    estate.say("going on")


def slow():
    """Sleeps as long as the component directory's .slow-apply says."""
    try:
        with open(".slow-apply", encoding="utf-8") as f:
            seconds = float(f.read().strip() or "1")
    except FileNotFoundError:
        return
    except ValueError:
        estate.die(".slow-apply must hold a number of seconds")
    estate.say(f"taking {seconds:g}s, as .slow-apply asks")
    time.sleep(seconds)


def outcome_hook(root, stage, component, outputs_file, carried_out):
    """Answers with the member's .apply-outcome (consumed) instead of applying."""
    hook = os.path.join(root, stage, f"{component}.apply-outcome")
    if not os.path.exists(hook):
        return
    outcomes = estate.read_json(hook, "apply outcome")
    queue = outcomes if isinstance(outcomes, list) else [outcomes]
    if not queue or not all(isinstance(o, dict) for o in queue):
        estate.die(f"{hook} must hold a JSON object or a non-empty list of them")
    if len(queue) > 1:
        estate.write_json(hook, queue[1:])
    else:
        os.remove(hook)
    estate.say(f"answering with {json.dumps(queue[0], sort_keys=True)} from {hook}; "
               "nothing applied")
    estate.write_json(outputs_file, {**queue[0], **carried_out})
    sys.exit(0)


def carry(root, stage, component, outputs_file, carry_file):
    """Prints what was carried in; carries the member's .carry-apply out."""
    if carry_file:
        carried = estate.read_json(carry_file, "carry file")
        if carried:
            estate.say(f"carried in: {json.dumps(carried, sort_keys=True)}")
    hook = os.path.join(root, stage, f"{component}.carry-apply")
    if os.path.exists(hook):
        out = estate.read_json(hook, "carry")
        os.remove(hook)
        estate.write_json(outputs_file, {"carry": out})
        estate.say(f"carrying out: {json.dumps(out, sort_keys=True)}")
        return {"carry": out}
    return {}


def main(argv):
    if len(argv) not in (5, 6):
        estate.die("usage: apply.py COMPONENT STAGE PLAN_FILE OUTPUTS_FILE [CARRY_FILE]", code=2)
    component, stage, plan_file, outputs_file = argv[1:5]
    root = estate.estate_dir()
    carried_out = carry(root, stage, component, outputs_file, argv[5] if len(argv) == 6 else None)
    pause(root, stage, component, "before")
    slow()
    estate.fail_hook(".fail-apply", os.path.join(root, stage, f"{component}.fail-apply"))
    outcome_hook(root, stage, component, outputs_file, carried_out)
    who = estate.member(component, stage)

    entries = read_plan(plan_file)
    resources = estate.load_resources(stage)
    outputs = estate.load_outputs()
    state = estate.load_state(stage, component)
    estate.say(f"applying {who} ({len(entries)} planned, {len(state)} deployed)")

    new, problems = apply_entries(entries, state, resources, component, stage)
    if problems:
        for p in problems:
            estate.say(f"cannot apply this plan: {p}")
        estate.say("nothing applied; asking wavegate to plan again")
        estate.write_json(outputs_file, {"outcome": "replan", **carried_out})
        return

    values = {}
    for name, (address, attr) in sorted(outputs.items()):
        if attr not in new.get(address, {}):
            estate.die(f"output `{name}` reads {address}.{attr}, which is not deployed "
                       "after this apply; nothing was applied")
        values[name] = new[address][attr]

    counts = {a: sum(e["action"] == a for e in entries)
              for a in ("create", "update", "replace", "delete")}
    for e in entries:
        if e["action"] in counts:
            estate.say(f"{e['action']:>7} {e['address']}")
    estate.save_state(stage, component, new)
    estate.write_json(outputs_file, {**values, **carried_out})
    with open(os.path.join(root, "apply-log.jsonl"), "a", encoding="utf-8") as log:
        log.write(json.dumps({"member": who, **counts}, sort_keys=True) + "\n")
    pause(root, stage, component, "after")
    estate.say(f"applied {who}: {counts['create']} created, {counts['update']} updated, "
               f"{counts['replace']} replaced, {counts['delete']} deleted")


if __name__ == "__main__":
    main(sys.argv)
