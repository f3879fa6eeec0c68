#!/usr/bin/env python3
"""Writes wavegate-sandbox.json, the seccomp profile deploy/ gives the
wavegate container, from the container engines' default profile.

    python3 make-seccomp-profile.py default.json > wavegate-sandbox.json

default.json is moby's default profile (github.com/moby/profiles, seccomp/
default.json, Apache-2.0; containerd's RuntimeDefault is built from the same
rules). The result is that profile as it applies to a container with no
capabilities (wavegate drops them all), flattened into the OCI runtime-spec
form that runc, crun, containerd and CRI-O read from a file (they ignore
moby's `includes`/`excludes`, so a rule gated on a capability must not be
copied as-is), for x86-64 and arm64, plus the system calls bubblewrap and
pasta need and the default refuses without CAP_SYS_ADMIN:

  clone, unshare  create the sandbox's user, pid, mount, ipc, uts and network
                  namespaces (the default allows clone only without namespace
                  flags, and unshare not at all);
  mount, umount2, pivot_root
                  build the sandbox's root, its /proc and /tmp inside its own
                  mount namespace (a user namespace's root can mount only
                  there);
  setns           join the sandbox's network namespace to add routes (wavegate)
                  and to attach pasta (WAVEGATE_SANDBOX_NETWORK=egress);
  sethostname     name the sandbox's own uts namespace.

Everything else the default refuses stays refused (bpf, perf_event_open,
module loading, the new mount API, open_by_handle_at, clone3, ...). Tested with runc, bubblewrap 0.8 and
passt 2023-03 (Debian bookworm): docs/deployment.md, "The sandbox in a container".
"""

import json
import sys

# What bubblewrap and pasta need beyond the default (see above).
SANDBOX_SYSCALLS = ["clone", "unshare", "mount", "umount2", "pivot_root", "setns", "sethostname"]
ARCHES = ("SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64")
ARCH_NAMES = {"amd64", "x32", "x86", "arm64", "arm"}


def flatten(default: dict, sandbox: bool = True) -> dict:
    """The default for a container without capabilities; with `sandbox`,
    plus SANDBOX_SYSCALLS."""
    architectures = []
    for a in default["archMap"]:
        if a["architecture"] in ARCHES:
            architectures += [a["architecture"], *a.get("subArchitectures", [])]
    rules = []
    for rule in default["syscalls"]:
        includes, excludes = rule.get("includes") or {}, rule.get("excludes") or {}
        if includes.get("caps"):
            continue  # needs a capability the container does not have
        if includes.get("arches") and not set(includes["arches"]) & ARCH_NAMES:
            continue  # another architecture's rule
        if excludes.get("arches") and set(excludes["arches"]) >= ARCH_NAMES:
            continue
        names = [n for n in rule["names"] if not (sandbox and n == "clone" and rule.get("args"))]
        if not names:
            continue  # clone, flags filtered: replaced by the plain rule below
        out = {"names": names, "action": rule["action"]}
        if rule.get("args"):
            out["args"] = rule["args"]
        if "errnoRet" in rule:
            out["errnoRet"] = rule["errnoRet"]
        rules.append(out)
    if sandbox:
        rules.append({"names": SANDBOX_SYSCALLS, "action": "SCMP_ACT_ALLOW"})
    return {
        "defaultAction": default["defaultAction"],
        "defaultErrnoRet": default.get("defaultErrnoRet", 1),
        "architectures": architectures,
        "syscalls": rules,
    }


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        json.dump(flatten(json.load(f)), sys.stdout, indent=2)
    sys.stdout.write("\n")
