#!/usr/bin/env python3
"""bootstrap.py ROOT

Brings the simulated estate in $ESTATE_DIR to the tree at ROOT (a checkout of
the example repository's `main`), as if every member had been applied
before: for each stage in file order and each component in dependency order
it runs the plan and apply commands of ROOT/wavegate.toml the way wavegate
does (argv templates, cwd = the component's dir, a scrubbed environment),
passing each member the outputs its upstreams just applied as inputs.
Components whose dir does not exist in ROOT (dns, before the change) are
skipped. Needs Python 3.11+ (tomllib).
"""

import sys

sys.dont_write_bytecode = True

import json
import os
import re
import subprocess
import tempfile

try:
    import tomllib
except ModuleNotFoundError:
    sys.exit("bootstrap.py: needs Python 3.11 or newer (tomllib)")


def dependency_order(components):
    """Components with every upstream first; file order otherwise."""
    done, ordered = set(), []
    while len(ordered) < len(components):
        ready = [c for c in components
                 if c["name"] not in done and set(c.get("depends_on", [])) <= done]
        if not ready:
            sys.exit("bootstrap.py: wavegate.toml has a dependency cycle")
        done.add(ready[0]["name"])
        ordered.append(ready[0])
    return ordered


def seconds(text):
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)(ms|s|m|h|d)", text)) or 1800


def run(what, argv, cwd, env, timeout):
    done = subprocess.run(argv, cwd=cwd, env=env, timeout=timeout,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        sys.exit(f"bootstrap.py: {what} exited {done.returncode}")


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: bootstrap.py ROOT   (with ESTATE_DIR exported)")
    root = os.path.abspath(argv[1])
    if not os.environ.get("ESTATE_DIR"):
        sys.exit("bootstrap.py: ESTATE_DIR is not set")
    with open(os.path.join(root, "wavegate.toml"), "rb") as f:
        config = tomllib.load(f)
    defaults = config.get("defaults", {})
    stages = [s["name"] for s in config.get("stage", [])]
    passed = {k: os.environ[k] for k in ["PATH", "HOME", *defaults.get("env", [])]
              if k in os.environ}
    applied = {}  # (component, stage) -> outputs

    with tempfile.TemporaryDirectory(prefix="estate-bootstrap.") as tmp:
        for stage in stages:
            for comp in dependency_order(config.get("component", [])):
                name, cwd = comp["name"], os.path.join(root, comp["dir"])
                who = f"{name}@{stage}"
                if stage not in comp.get("stages", stages):
                    continue
                if not os.path.isdir(cwd):
                    print(f"bootstrap: {who} skipped ({comp['dir']} does not exist yet)")
                    continue
                known, unknown = {}, []
                for input_name, ref in comp.get("inputs", {}).items():
                    upstream, output = ref.split(".", 1)
                    outputs = applied.get((upstream, stage), {})
                    if output in outputs:
                        known[input_name] = outputs[output]
                    else:
                        unknown.append(input_name)
                files = {k: os.path.join(tmp, f"{name}@{stage}.{k}.json")
                         for k in ("plan_file", "outputs_file", "inputs_file", "carry_file")}
                with open(files["inputs_file"], "w") as f:
                    json.dump({"known": known, "unknown": sorted(unknown)}, f)
                with open(files["carry_file"], "w") as f:
                    json.dump({}, f)  # a first apply carries nothing in
                values = {"component": name, "stage": stage, "dir": comp["dir"],
                          "root": root, **files}
                env = {**passed, "WAVEGATE_COMPONENT": name, "WAVEGATE_STAGE": stage,
                       "WAVEGATE_MEMBER": who}
                timeout = seconds(comp.get("timeout", defaults.get("timeout", "30m")))
                for step in ("plan", "apply"):
                    template = comp.get(step, defaults[step])
                    args = [re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), a)
                            for a in template]
                    run(f"{step} of {who}", args, cwd, env, timeout)
                with open(files["plan_file"]) as f:
                    headline = json.load(f)["summary"].splitlines()
                with open(files["outputs_file"]) as f:
                    applied[(name, stage)] = json.load(f)
                plan_line = next((l for l in headline if l.startswith(("Plan:", "No changes"))), "")
                print(f"bootstrap: {who} applied. {plan_line}")


if __name__ == "__main__":
    main(sys.argv)
