#!/usr/bin/env python3
"""Runs bubblewrap the way wavegate does inside a container set up the way
deploy/ describes (uid 10001, no capabilities, no-new-privileges, read-only
root), under runc, with each seccomp profile and /proc setting, and checks
what docs/deployment.md says: Docker's default seccomp refuses the sandbox, a
masked /proc refuses its fresh /proc, and wavegate-sandbox.json with an
unmasked /proc (with or without a user namespace of the container's own)
lets bubblewrap, pasta (given /dev/net/tun) and `ip route` through setns work.
It exercises the kernel, runc and the profile; Docker and Kubernetes
themselves are not involved (docs/deployment.md lists what was not run).

Needs root, runc, bwrap, pasta, ip and /usr/bin/python3 on a merged-/usr
host (Debian: apt-get install runc bubblewrap passt iproute2), and the
engines' default profile as moby's default.json for the first case:

    sudo python3 deploy/security/try-sandbox.py [moby-default.json]

Exit status 0 when every case behaves as documented.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROFILE = HERE / "wavegate-sandbox.json"

# Inside the container: a sandbox like wavegate's, pasta attached to it, an
# unreachable route added through setns; prints what happened.
PROBE = textwrap.dedent('''
    import ctypes, fcntl, json, os, subprocess, sys
    libc = ctypes.CDLL(None, use_errno=True)
    r, w = os.pipe()
    bw = subprocess.Popen(["bwrap", "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
        "--unshare-uts", "--hostname", "sandbox", "--die-with-parent", "--cap-drop", "ALL",
        "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin", "--ro-bind", "/etc", "/etc",
        "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev", "--tmpfs", "/tmp",
        "--info-fd", str(w),
        "--", "sh", "-c", "sleep 1; echo pids=$(ls /proc | grep -c '^[0-9]'); ip route"],
        pass_fds=[w], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    os.close(w)
    info = ""
    while "}" not in info:
        chunk = os.read(r, 4096).decode()
        if not chunk:
            break
        info += chunk
    if "}" not in info:
        print("BWRAP-FAILED", bw.communicate()[0].strip())
        sys.exit(0)
    pid = json.loads(info[: info.index("}") + 1])["child-pid"]
    net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    user = fcntl.ioctl(net, 0xb701)  # NS_GET_USERNS: the user namespace owning it
    pasta = subprocess.run(["pasta", "--quiet", "--config-net", "-t", "none", "-u", "none", "-T", "none",
        "-U", "none", "--userns", f"/proc/self/fd/{user}", "--netns", f"/proc/self/fd/{net}"],
        pass_fds=[user, net], capture_output=True, text=True)
    print("PASTA", "ok" if pasta.returncode == 0 else "failed")
    def enter():
        if libc.setns(user, 0x10000000) or libc.setns(net, 0x40000000):
            raise OSError(ctypes.get_errno(), "setns")
    try:
        route = subprocess.run(["ip", "route", "add", "unreachable", "169.254.0.0/16"], preexec_fn=enter, pass_fds=[user, net])
        print("ROUTE", "ok" if route.returncode == 0 else "failed")
    except subprocess.SubprocessError:
        print("ROUTE failed")
    out = bw.communicate()[0]
    print("BWRAP", "ok" if bw.returncode == 0 and "pids=" in out else "failed", " ".join(out.split()))
''')


def container(bundle: Path, rootfs: Path, seccomp: dict | None, masked: bool, userns: bool, tun: bool) -> dict:
    subprocess.run(["runc", "spec", "--bundle", str(bundle)], check=True)
    spec = json.loads((bundle / "config.json").read_text())
    spec["root"] = {"path": str(rootfs), "readonly": True}
    p = spec["process"]
    p.update(terminal=False, cwd="/tmp", noNewPrivileges=True, user={"uid": 10001, "gid": 10001},
             args=["/usr/bin/python3", "/probe/probe.py"],
             env=["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/home/wavegate"])
    p["capabilities"] = {k: [] for k in ("bounding", "effective", "permitted", "inheritable", "ambient")}
    tmpfs = ["nosuid", "nodev", "mode=1777", "uid=10001", "gid=10001"]
    spec["mounts"] += [
        {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]},
        {"destination": "/etc", "type": "bind", "source": "/etc", "options": ["rbind", "ro"]},
        {"destination": "/probe", "type": "bind", "source": str(bundle / "probe"), "options": ["rbind", "ro"]},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": tmpfs},
        {"destination": "/home/wavegate", "type": "tmpfs", "source": "tmpfs", "options": tmpfs},
    ]
    linux = spec["linux"]
    # The host's network, as a pod or a container has one: pasta needs a route out.
    linux["namespaces"] = [n for n in linux["namespaces"] if n["type"] != "network"]
    if not masked:
        linux["maskedPaths"], linux["readonlyPaths"] = [], []
    if seccomp is not None:
        linux["seccomp"] = seccomp
    if userns:
        linux["namespaces"].append({"type": "user"})
        linux["uidMappings"] = linux["gidMappings"] = [{"containerID": 0, "hostID": 100000, "size": 65536}]
        for m in spec["mounts"]:
            if m["destination"] == "/sys":
                m.update(type="bind", source="/sys", options=["rbind", "nosuid", "noexec", "nodev", "ro"])
        spec["mounts"] = [m for m in spec["mounts"] if m["destination"] != "/sys/fs/cgroup"]
    if tun:
        linux.setdefault("devices", []).append({"path": "/dev/net/tun", "type": "c", "major": 10, "minor": 200, "fileMode": 0o666, "uid": 0, "gid": 0})
        linux.setdefault("resources", {}).setdefault("devices", []).append({"allow": True, "type": "c", "major": 10, "minor": 200, "access": "rwm"})
    return spec


def run(seccomp: dict | None, masked: bool, userns: bool, tun: bool) -> str:
    with tempfile.TemporaryDirectory(prefix="wavegate-try-") as tmp:
        bundle, rootfs = Path(tmp), Path(tmp) / "rootfs"
        for d in ("usr", "etc", "proc", "sys", "dev", "tmp", "home/wavegate", "probe", "run"):
            (rootfs / d).mkdir(parents=True)
        for link in ("bin", "sbin", "lib", "lib64"):
            (rootfs / link).symlink_to(f"usr/{link}")
        (bundle / "probe").mkdir()
        (bundle / "probe" / "probe.py").write_text(PROBE)
        os.chmod(bundle, 0o755)
        (bundle / "config.json").write_text(json.dumps(container(bundle, rootfs, seccomp, masked, userns, tun)))
        res = subprocess.run(["runc", "run", "--bundle", str(bundle), f"wavegate-try-{os.getpid()}"],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        return (res.stdout + res.stderr).strip()


def main() -> int:
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("runc", "bwrap", "pasta", "ip")) or not Path("/usr/bin/python3").exists():
        print("skip: needs root, runc, bwrap, pasta, ip and /usr/bin/python3")
        return 0
    sys.dont_write_bytecode = True
    sys.path.insert(0, str(HERE))
    profile = json.loads(PROFILE.read_text())
    cases = []
    if len(sys.argv) > 1:
        flatten = __import__("make-seccomp-profile").flatten
        default = flatten(json.loads(Path(sys.argv[1]).read_text()), sandbox=False)
        cases.append(("the engines' default seccomp", default, False, True, True, "No permissions to create new namespace"))
    cases += [
        ("wavegate-sandbox.json, masked /proc", profile, True, True, True, "Can't mount proc"),
        # In a user namespace runc binds the host's /dev/net/tun (often 0600
        # root on hosts without udev), so pasta is tried in the next case.
        ("wavegate-sandbox.json, unmasked /proc, pod user namespace", profile, False, True, False, "ROUTE ok|BWRAP ok"),
        ("wavegate-sandbox.json, unmasked /proc, host users (Docker), tun", profile, False, False, True, "PASTA ok|ROUTE ok|BWRAP ok"),
        ("wavegate-sandbox.json, unmasked /proc, no tun", profile, False, False, False, "PASTA failed|ROUTE ok|BWRAP ok"),
    ]
    failed = 0
    for label, seccomp, masked, userns, tun, expect in cases:
        out = run(seccomp, masked, userns, tun)
        good = all(e in out for e in expect.split("|"))
        failed += not good
        print(f"{'ok  ' if good else 'FAIL'}  {label}: {' / '.join(l for l in out.splitlines() if l.strip())[:300]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
