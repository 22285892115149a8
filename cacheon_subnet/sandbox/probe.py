"""`cacheon doctor`: run a probe child under the real wall and report each layer in force.

The probe (PROBE_CODE, stdlib only) runs inside the sandbox and reports what it sees; the host
compares with its own view (uid, namespaces) and decides which required layer holds.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cacheon_subnet.env import HOME, SANDBOX_SCRATCH
from cacheon_subnet.errors import SandboxError
from cacheon_subnet.sandbox.policy import SandboxPolicy

NAMESPACES = ("pid", "net", "mnt", "user", "ipc", "uts")

PROBE_CODE = textwrap.dedent(r"""
    import ctypes, json, os, resource, socket, sys
    arg = json.loads(sys.argv[1])
    out = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "pid": os.getpid()}
    st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
    out["no_new_privs"] = st.get("NoNewPrivs", "").strip()
    out["seccomp"] = st.get("Seccomp", "").strip()
    out["cap_eff"] = st.get("CapEff", "").strip()
    out["ns"] = {n: os.readlink(f"/proc/self/ns/{n}") for n in arg["ns"]}
    out["rlimits"] = {n: list(resource.getrlimit(getattr(resource, "RLIMIT_" + n))) for n in
                      ("NPROC", "AS", "CPU", "FSIZE", "NOFILE", "CORE")}
    def readable(p):
        try:
            with open(p, "rb") as f:
                f.read(1)
            return True
        except OSError:
            try:
                os.listdir(p); return True
            except OSError:
                return False
    out["readable"] = {p: readable(p) for p in arg["secret"]}
    def writable(d):
        try:
            fn = os.path.join(d, ".cacheon-probe-%d" % os.getpid())
            open(fn, "w").close(); os.unlink(fn); return True
        except OSError:
            return False
    out["writable"] = {p: writable(p) for p in arg["ro"]}
    out["scratch_writable"] = writable(os.environ.get(arg["scratch_var"], "/nonexistent"))
    libc = ctypes.CDLL(None, use_errno=True)
    out["unshare_user"] = libc.unshare(0x10000000) == 0
    out["ptrace_traceme"] = libc.ptrace(0, 0, None, None) == 0
    try:
        os.kill(arg["host_pid"], 0); out["host_pid_signal"] = True
    except OSError:
        out["host_pid_signal"] = False
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=1).close(); out["outside_net"] = True
    except OSError:
        out["outside_net"] = False
    out["interfaces"] = [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
    out["gpu_devices"] = sorted(p for p in os.listdir("/dev") if p.startswith("nvidia"))
    out["fds"] = sorted(int(x) for x in os.listdir("/proc/self/fd"))
    out["inodes"] = {p: os.statvfs(p).f_files for p in (os.environ.get(arg["scratch_var"], "/tmp"), "/tmp", "/dev/shm")}
    print("CACHEON-PROBE " + json.dumps(out), flush=True)
""")


@dataclass(frozen=True)
class Layer:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Isolation:
    """What the platform let us apply (kept for callers; `layers` has the full picture)."""

    network_namespace: bool
    dropped_to_uid: int | None
    layers: tuple[Layer, ...] = ()

    @property
    def ok(self) -> bool:
        return bool(self.layers) and all(layer.ok for layer in self.layers)


def _secret_paths(extra: list[str]) -> list[str]:
    home = os.path.expanduser("~")
    # the validator's default state root ($CACHEON_HOME/validator, validator/startup.py)
    state_root = os.path.join(HOME.get(), "validator")
    return ["/etc/shadow", "/root", os.path.join(home, ".bittensor"), state_root, *extra]


def run_probe(policy: SandboxPolicy, secret: list[str] | None = None) -> tuple[dict[str, Any], float]:
    """Launch the probe under `policy`; returns what it saw and the start-to-exit time (s)."""
    from cacheon_subnet import sandbox

    arg = {
        "ns": list(NAMESPACES),
        "secret": _secret_paths(secret or []),
        "host_pid": os.getpid(),
        "ro": ["/", "/usr", "/etc", str(Path(__file__).resolve().parent)],
        "scratch_var": SANDBOX_SCRATCH.name,
    }
    with tempfile.TemporaryDirectory(prefix="cacheon-probe-") as tmp:
        t0 = time.perf_counter()
        proc = sandbox.launch([sys.executable, "-c", PROBE_CODE, json.dumps(arg)], scratch=Path(tmp) / "work", policy=policy)
        try:
            out, _ = proc.communicate(timeout=60)
        finally:
            sandbox.stop(proc)
        wall = time.perf_counter() - t0
    text = out.decode(errors="replace")
    for line in text.splitlines():
        if line.startswith("CACHEON-PROBE "):
            return json.loads(line[len("CACHEON-PROBE ") :]), wall
    raise SandboxError(f"sandbox probe printed no report (rc {proc.returncode}): {text[-800:]!r}")


def layers(seen: dict[str, Any], policy: SandboxPolicy, want_gpu: bool) -> tuple[Layer, ...]:
    """Which required layer holds, from the probe's report and the host's own view."""
    from cacheon_subnet.sandbox.policy import wall_config

    cfg = wall_config()
    uid = cfg.uid
    host_ns = {n: os.readlink(f"/proc/self/ns/{n}") for n in NAMESPACES}
    fresh = [n for n in NAMESPACES if seen["ns"][n] != host_ns[n]]
    r = seen["rlimits"]
    out = [
        Layer(
            "uid",
            uid <= seen["uid"] < uid + cfg.count and seen["gid"] != 0 and seen["uid"] != os.getuid() and not seen["groups"],
            f"uid {seen['uid']} gid {seen['gid']} groups {seen['groups']} (dedicated range {uid}..{uid + cfg.count - 1}, "
            f"host uid {os.getuid()})",
        ),
        Layer("no_new_privs", seen["no_new_privs"] == "1", f"NoNewPrivs {seen['no_new_privs']}"),
        Layer("capabilities", int(seen["cap_eff"] or "0", 16) == 0, f"CapEff {seen['cap_eff']}"),
        Layer(
            "seccomp",
            seen["seccomp"] == "2" and not seen["unshare_user"] and not seen["ptrace_traceme"],
            f"Seccomp mode {seen['seccomp']} (2 = filter); unshare(USER) "
            f"{'ALLOWED' if seen['unshare_user'] else 'refused'}; ptrace {'ALLOWED' if seen['ptrace_traceme'] else 'refused'}",
        ),
        Layer(
            "namespaces",
            set(fresh) == set(NAMESPACES),
            "fresh: "
            + ", ".join(fresh)
            + ("; shared: " + ", ".join(n for n in NAMESPACES if n not in fresh) if len(fresh) < len(NAMESPACES) else ""),
        ),
        Layer(
            "network",
            not seen["outside_net"] and set(seen["interfaces"]) <= {"lo"},
            f"interfaces {seen['interfaces']}; outside {'REACHABLE' if seen['outside_net'] else 'unreachable'}",
        ),
        Layer(
            "host_pids",
            not seen["host_pid_signal"],
            f"host pid {os.getpid()} "
            f"{'SIGNALLABLE' if seen['host_pid_signal'] else 'not visible'}; child sees itself as pid {seen['pid']}",
        ),
        Layer(
            "rlimits",
            r["NPROC"][0] == policy.max_processes
            and r["CORE"][0] == 0
            and r["FSIZE"][0] == policy.file_bytes
            and (policy.cpu_seconds is None or r["CPU"][0] == policy.cpu_seconds)
            and (policy.address_space_bytes is None or r["AS"][0] == policy.address_space_bytes),
            " ".join(f"{k}={v[0]}" for k, v in r.items()),
        ),
        Layer(
            "secrets_unreadable",
            not any(seen["readable"].values()),
            ", ".join(f"{p}: {'READABLE' if v else 'hidden'}" for p, v in seen["readable"].items()),
        ),
        Layer(
            "read_only_view",
            not any(seen["writable"].values()) and seen["scratch_writable"],
            ", ".join(f"{p}: {'WRITABLE' if v else 'ro'}" for p, v in seen["writable"].items())
            + f"; scratch {'writable' if seen['scratch_writable'] else 'NOT WRITABLE'}",
        ),
        Layer("inherited_fds", set(seen["fds"]) <= {0, 1, 2, 3}, f"open fds {seen['fds']}"),
        Layer(
            "tmpfs_inodes",
            all(0 < n <= policy.inodes for n in seen["inodes"].values()),
            f"inodes {seen['inodes']} (bound {policy.inodes}; above it: the host could not mount the bounded tmpfs, "
            "see the launch's warning)",
        ),
    ]
    if want_gpu:
        out.append(Layer("gpu_devices", any(d[6:].isdigit() for d in seen["gpu_devices"]), f"/dev: {seen['gpu_devices']}"))
    return tuple(out)


def probe_isolation(policy: SandboxPolicy | None = None, want_gpu: bool = False) -> Isolation:
    policy = policy or SandboxPolicy()
    seen, _ = run_probe(policy)
    ls = layers(seen, policy, want_gpu)
    return Isolation(
        network_namespace=not seen["outside_net"] and set(seen["interfaces"]) <= {"lo"},
        dropped_to_uid=seen["uid"] if seen["uid"] != os.getuid() else None,
        layers=ls,
    )


def doctor(as_json: bool, gpu: bool) -> int:
    """Print every layer; exit 0 only when each required layer holds."""
    from cacheon_subnet.sandbox.policy import weak_requested

    policy = SandboxPolicy(gpu=gpu, cpu_seconds=60, address_space_bytes=None if gpu else 8 << 30)
    report: dict[str, Any] = {"weak": weak_requested(policy)}
    try:
        seen, wall = run_probe(policy)
        ls = layers(seen, policy, gpu)
        report.update(
            ok=all(x.ok for x in ls) and not report["weak"],
            startup_ms=round(wall * 1000, 1),
            layers=[x.__dict__ for x in ls],
            seen=seen,
        )
    except SandboxError as e:
        report.update(ok=False, error=str(e), layers=[])
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        if report["weak"]:
            print(f"WEAK MODE in force: {report['weak']}")
        if "error" in report:
            print(f"FAIL  wall: {report['error']}")
        for x in report["layers"]:
            print(f"{'ok  ' if x['ok'] else 'FAIL'}  {x['name']:<19} {x['detail']}")
        if "startup_ms" in report:
            print(f"probe child start-to-exit: {report['startup_ms']} ms")
        print("isolation: " + ("ALL REQUIRED LAYERS HOLD" if report["ok"] else "NOT ESTABLISHED"))
    return 0 if report["ok"] else 1
