"""The OS as the second wall (issue 14, item 3; classes 2, 3, 7, 8): attack scripts from
tests/adversarial/oswall/ run INSIDE sandbox.launch, as if every static check had been bypassed.
Each attempt prints `RESULT <label> BLOCKED|ESCAPED`; every one must be BLOCKED, and the host
checks the effect itself (files absent, victims alive, no survivor). Controls in weak mode
(CACHEON_SANDBOX=weak: same uid, no view, no seccomp) show the same scripts do detect escapes."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from cacheon_subnet import sandbox

HERE = Path(__file__).resolve().parent / "oswall"
REPO = HERE.parent.parent.parent
POLICY = sandbox.SandboxPolicy(wall_timeout_s=60, cpu_seconds=60)


def run_attack(
    script: str, ctx: dict, tmp_path: Path, policy: sandbox.SandboxPolicy = POLICY, timeout: float = 90
) -> tuple[dict[str, tuple[str, str]], str]:
    proc = sandbox.launch([sys.executable, str(HERE / script), json.dumps(ctx)], scratch=tmp_path / "work", policy=policy)
    if "victim_uid" in ctx:  # the same-uid neighbour test is only meaningful with the very same uid
        assert proc.cacheon_uid == ctx["victim_uid"], (proc.cacheon_uid, ctx["victim_uid"])
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        sandbox.stop(proc)
    text = out.decode(errors="replace")
    results = {}
    for line in text.splitlines():
        if line.startswith("RESULT "):
            _, label, status, *detail = line.split(" ", 3)
            results[label] = (status, " ".join(detail))
    return results, text


def assert_blocked(results: dict[str, tuple[str, str]], text: str, labels: set[str]) -> None:
    assert labels <= set(results), f"missing results {labels - set(results)}: {text[-1500:]}"
    escaped = {k: v for k, v in results.items() if v[0] != "BLOCKED"}
    assert not escaped, f"escaped: {escaped}"


@pytest.fixture
def host(tmp_path):
    """The host's secrets and services: a 0600 wallet and a 0644 state DB outside the view, a
    secret under /root, a TCP and an abstract-unix listener, and two victim processes: one of
    root and one of the sandbox's own uid outside the sandbox (a same-uid neighbour)."""
    outside = tmp_path / "validator"
    outside.mkdir()
    wallet = outside / "hotkey.json"
    wallet.write_text('{"secretSeed": "0xdeadbeef"}')
    wallet.chmod(0o600)
    db = outside / "validator.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE crowns (hotkey TEXT, slot TEXT)")
    con.commit()
    con.close()
    db.chmod(0o644)
    outside.chmod(0o755)  # even world-readable: the dir is not in the view
    root_secret = Path(f"/root/cacheon-oswall-{uuid.uuid4().hex[:8]}.json")
    root_secret.write_text("root secret")
    root_secret.chmod(0o644)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    abstract = f"cacheon-oswall-{uuid.uuid4().hex[:8]}"
    usrv = socket.socket(socket.AF_UNIX)
    usrv.bind("\0" + abstract)
    usrv.listen(4)
    uid = sandbox.wall_config().uid
    victims = [
        subprocess.Popen(["sleep", "300"]),
        subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "300"]),
    ]
    ctx = {
        "secrets": [str(wallet), str(db), str(root_secret)],
        "state_db": str(db),
        "port": srv.getsockname()[1],
        "abstract": abstract,
        "marker": f"cacheon-oswall-{uuid.uuid4().hex[:8]}",
        "repo": str(REPO),
        "ro_dir": str(HERE),
    }
    try:
        yield ctx, victims, db
    finally:
        for v in victims:
            v.kill()
            v.wait()
        srv.close()
        usrv.close()
        root_secret.unlink(missing_ok=True)


def proc_state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()[0]


def test_secrets_are_out_of_view(host, tmp_path):
    ctx, _, _ = host
    res, text = run_attack("read_secrets.py", ctx, tmp_path)
    assert_blocked(res, text, {"shadow", "secret0", "secret1", "secret2", "root_home", "var_lib"})


def test_state_db_cannot_be_written(host, tmp_path):
    ctx, _, db = host
    res, text = run_attack("write_state_db.py", ctx, tmp_path)
    assert_blocked(res, text, {"state_db_write"})
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM crowns").fetchone()[0] == 0


@pytest.mark.parametrize("victim", [0, 1], ids=["root-victim", "same-uid-victim"])
def test_host_processes_are_invisible(host, tmp_path, victim, monkeypatch):
    ctx, victims, _ = host
    ctx = dict(ctx, host_pid=victims[victim].pid)
    if victim == 1:
        ctx["victim_uid"] = sandbox.wall_config().uid
        # Private uid leases: the attacker must get the victim's very uid even while other
        # sandboxes on this host (a parallel run) hold leases of the range.
        monkeypatch.setenv("CACHEON_SANDBOX_LOCKS", str(tmp_path / "locks"))
    for script, labels in (
        ("procfs_host.py", {"host_environ", "host_mem", "proc_scan", "parent_environ"}),
        ("ptrace_vm.py", {"ptrace_host", "ptrace_child", "process_vm_readv_host", "process_vm_readv_child"}),
        ("signal_host.py", {"sigstop_host", "sigkill_host", "sigkill_parent"}),
    ):
        res, text = run_attack(script, ctx, tmp_path)
        assert_blocked(res, text, labels)
    time.sleep(0.2)
    assert victims[victim].poll() is None and proc_state(victims[victim].pid) in ("S", "R")


def test_namespaces_cannot_be_entered_or_made(host, tmp_path):
    ctx, victims, _ = host
    ctx = dict(ctx, host_pid=victims[0].pid)
    res, text = run_attack("namespaces_thread.py", ctx, tmp_path)
    assert_blocked(
        res,
        text,
        {
            "setns_host_thread",
            "setns_init_thread",
            "unshare_user_thread",
            "unshare_net_thread",
            "unshare_mnt_thread",
            "unshare_pid_thread",
            "clone_newuser",
            "mount_tmpfs",
        },
    )
    assert "Operation not permitted" in res["unshare_user_thread"][1]  # seccomp's EPERM, not a missing file


def test_host_services_are_unreachable(host, tmp_path):
    ctx, _, _ = host
    res, text = run_attack("network.py", ctx, tmp_path, sandbox.SandboxPolicy(loopback=True, cpu_seconds=60))
    assert_blocked(res, text, {"host_tcp_loopback", "host_abstract_unix", "outside", "interfaces"})


def test_nothing_lands_on_the_host_filesystem(host, tmp_path):
    ctx, _, _ = host
    res, text = run_attack("host_tmp.py", ctx, tmp_path)
    assert_blocked(
        res,
        text,
        {
            "write_tmp",
            "write_dev_shm",
            "write_repo",
            "write_ro_dir",
            "write_root",
            "write_usr",
            "fd_escape",
            "proc_sys_write",
            "io_uring",
            "keyctl",
        },
    )
    for d in ("/tmp", "/dev/shm", str(REPO), str(HERE), "/"):
        assert not (Path(d) / ctx["marker"]).exists(), d


def test_setuid_binaries_grant_nothing(host, tmp_path):
    ctx, _, _ = host
    res, text = run_attack("setuid_exec.py", ctx, tmp_path)
    assert_blocked(res, text, {"setuid_mount", "setuid_su", "own_setuid_file"})


def test_setsid_double_fork_survivor_dies_with_the_run(host, tmp_path):
    ctx, _, _ = host
    proc = sandbox.launch(
        [sys.executable, str(HERE / "survivor.py"), json.dumps(ctx)], scratch=tmp_path / "w", policy=POLICY
    )
    lines: list[str] = []
    reader = threading.Thread(target=read_lines, args=(proc, lines), daemon=True)
    reader.start()
    deadline = time.monotonic() + 90  # a loaded 2-core CI box: generous, it ends as soon as the line comes
    while time.monotonic() < deadline and proc.poll() is None and not any("survivor_spawned" in x for x in lines):
        time.sleep(0.1)
    started = any("survivor_spawned" in x for x in lines) and _with_marker(ctx["marker"])
    if not started:
        sandbox.stop(proc)
        reader.join(5)
    assert started, f"the survivor never started (the test would prove nothing); rc={proc.poll()} output={lines[-20:]}"
    sandbox.stop(proc)
    assert _with_marker(ctx["marker"]) == []


def read_lines(proc, lines: list[str]) -> None:
    """Everything the sandboxed script prints, as it comes, so a launch that failed says why."""
    for raw in proc.stdout:
        lines.append(raw.decode(errors="replace").rstrip())


def _with_marker(marker: str) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{p}/cmdline").read_bytes() and proc_state(int(p)) not in "ZX":
                    out.append(int(p))
            except OSError:
                pass
    return out


def test_fork_bomb_is_bounded(host, tmp_path):
    ctx, _, _ = host
    res, text = run_attack("fork_bomb.py", ctx, tmp_path, sandbox.SandboxPolicy(max_processes=64, cpu_seconds=60))
    assert_blocked(res, text, {"fork_bomb"})
    count = int(text.split("COUNT ")[1].split()[0])
    assert count < 64, count


def test_memory_balloon_is_bounded(host, tmp_path):
    ctx, _, _ = host
    res, text = run_attack("balloon.py", ctx, tmp_path, sandbox.SandboxPolicy(address_space_bytes=1 << 30, cpu_seconds=60))
    assert_blocked(res, text, {"memory_balloon"})
    assert "MemoryError" in res["memory_balloon"][1]


def test_memory_outside_every_mapping_is_refused_where_the_address_space_is_the_bound(host, tmp_path):
    """memfds (RLIMIT_FSIZE each, 1024 fds) and detached SysV segments (no rlimit) held 1.5 GiB
    apiece under a 1 GiB RLIMIT_AS (red team 2026-12-04): host RAM no limit of the child bounds."""
    ctx, _, _ = host
    res, text = run_attack(
        "shm_balloon.py", ctx, tmp_path, sandbox.SandboxPolicy(address_space_bytes=1 << 30, cpu_seconds=60)
    )
    assert_blocked(res, text, {"memfd_balloon", "sysv_balloon"})
    assert all("Operation not permitted" in res[k][1] for k in ("memfd_balloon", "sysv_balloon")), res


def test_a_cpu_child_keeps_the_cores_it_was_started_on(host, tmp_path):
    """A CPU screen beside a timed arena is pinned to the screening cores (validator/background.py);
    past wall 1 it could widen its own affinity back onto the arena's cores: refused (EPERM)."""
    ctx, _, _ = host
    res, text = run_attack(
        "escape_pinning.py", ctx, tmp_path, sandbox.SandboxPolicy(address_space_bytes=1 << 30, cpu_seconds=60)
    )
    assert_blocked(res, text, {"set_own_affinity", "set_thread_affinity"})
    assert all("Operation not permitted" in res[k][1] for k in ("set_own_affinity", "set_thread_affinity")), res


def test_scratch_tmp_and_shm_are_bounded(host, tmp_path):
    ctx, _, _ = host
    policy = sandbox.SandboxPolicy(scratch_bytes=32 << 20, tmp_bytes=16 << 20, cpu_seconds=60)
    res, text = run_attack("disk_fill.py", ctx, tmp_path, policy)
    assert_blocked(res, text, {"disk_fill_scratch", "disk_fill_tmp", "disk_fill_shm"})
    sizes = {line.split()[1]: int(line.split()[2]) for line in text.splitlines() if line.startswith("BYTES ")}
    assert sizes["scratch"] <= 32 << 20 and sizes["tmp"] <= 16 << 20 and sizes["shm"] <= 16 << 20, sizes
    assert all("errno 28" in res[k][1] for k in res), res  # ENOSPC: the tmpfs is full, not a per-file limit


GUARD_ATTACKS = [
    "cc_symlink",
    "cc_symlink_on_path",
    "thread_os_system",
    "thread_timer_subprocess",
    "thread_ctypes",
    "thread_gc",
    "thread_putenv",
    "map_os_system",
]


@pytest.mark.parametrize("kind", GUARD_ATTACKS)
def test_guard_refuses_laundered_calls(tmp_path, kind):
    ctx = {"bundle_root": str(HERE / "guard_bundle"), "kind": kind}
    res, text = run_attack("guard_runner.py", ctx, tmp_path)
    assert_blocked(res, text, {kind})
    assert "PWNED" not in text and "cacheon sandbox refused" in res[kind][1], text[-800:]


# -- controls: the same scripts see the escapes when the wall is not there ----------------------


def test_control_weak_mode_reads_and_signals(host, tmp_path, monkeypatch, capfd):
    ctx, victims, _ = host
    monkeypatch.setenv("CACHEON_SANDBOX", "weak")
    res, _ = run_attack("read_secrets.py", ctx, tmp_path)
    assert res["shadow"][0] == "ESCAPED" and res["secret0"][0] == "ESCAPED"  # root, full view
    res, _ = run_attack("procfs_host.py", dict(ctx, host_pid=victims[0].pid), tmp_path)
    assert res["host_environ"][0] == "ESCAPED"
    assert "WEAK MODE" in capfd.readouterr().err


def test_control_guard_without_arming_lets_a_thread_spawn(tmp_path):
    """The bundle-imported state is what arms the guard: the same attack, called before any
    bundle file is opened, is not refused (so the test above is testing the arming)."""
    code = f"""
import os, sys, threading
from cacheon_subnet import guard
guard.install_guard({str(HERE / "guard_bundle")!r}, [os.environ["CACHEON_SANDBOX_SCRATCH"]])
t = threading.Thread(target=os.system, args=("echo UNARMED-SPAWN",)); t.start(); t.join()
"""
    proc = sandbox.launch([sys.executable, "-c", code], scratch=tmp_path / "w", policy=POLICY)
    out, _ = proc.communicate(timeout=60)
    sandbox.stop(proc)
    assert b"UNARMED-SPAWN" in out


def test_state_dir_and_db_are_private(tmp_path):
    """The validator's state is readable by root alone (defence in depth behind the view)."""
    from cacheon_subnet.validator.state import StateDB, acquire_run_lock

    d = tmp_path / "state"
    fd = acquire_run_lock(d)
    db = StateDB(d)
    with db.tx() as con:
        con.execute("SELECT 1")
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in d.iterdir()}
    db.close()
    os.close(fd)
    assert oct(d.stat().st_mode & 0o777) == "0o700"
    assert modes and all(m == "0o600" for m in modes.values()), modes


def test_doctor_reports_every_layer(monkeypatch):
    from cacheon_subnet.cli import main

    out = subprocess.run(
        [sys.executable, "-m", "cacheon_subnet.cli", "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )
    doc = json.loads(out.stdout)
    assert out.returncode == 0 and doc["ok"], out.stdout[-2000:]
    assert {x["name"] for x in doc["layers"]} >= {
        "uid",
        "no_new_privs",
        "seccomp",
        "namespaces",
        "network",
        "rlimits",
        "secrets_unreadable",
        "read_only_view",
        "host_pids",
    }
    monkeypatch.setenv("CACHEON_SANDBOX", "weak")  # control: the weak mode never reports a wall
    assert main(["doctor"]) == 1


def test_unnamespaced_socket_families_are_refused(host, tmp_path):
    """The wall's seccomp allows only AF_UNIX/INET/INET6/NETLINK sockets: AF_VSOCK (on a VM it
    reaches the hypervisor's services from any netns) and other families no netns isolates fail
    with seccomp's EPERM, whatever the upper bits of the family argument say."""
    ctx, _, _ = host
    res, text = run_attack("socket_families.py", ctx, tmp_path)
    labels = {"vsock", "vsock_high_bits", "tipc", "can", "bluetooth", "rds", "alg", "packet", "socketpair_tipc"}
    assert_blocked(res, text, labels)
    labels |= {"netlink_audit", "netlink_uevent", "netlink_netfilter", "netlink_crypto"}
    assert_blocked(res, text, labels)
    for label in ("vsock", "vsock_high_bits", "tipc", "socketpair_tipc", "netlink_audit", "netlink_uevent"):
        assert "Operation not permitted" in res[label][1], (label, res[label])  # seccomp, not a missing module
    assert "route netlink opened" in res["netlink_route_allowed"][1], res["netlink_route_allowed"]
    # the namespaced families stay open (SGLang's ranks, NCCL's interface scan)
    res, text = run_attack("network.py", ctx, tmp_path, sandbox.SandboxPolicy(loopback=True, cpu_seconds=60))
    assert "Operation not permitted" not in res["host_tcp_loopback"][1], res["host_tcp_loopback"]


def test_tmpfs_inodes_are_bounded(host, tmp_path):
    """scratch, /tmp and /dev/shm share one host-mounted tmpfs with nr_inodes (sandbox/tmpfs.py):
    bwrap's own tmpfs mounts bound bytes only, and empty files cost inodes (kernel memory), not
    bytes. The host detaches the mount when the run is stopped."""
    ctx, _, _ = host
    policy = sandbox.SandboxPolicy(cpu_seconds=60, inodes=5000)  # each of the three mounts
    res, text = run_attack("inode_flood.py", dict(ctx, per_dir=20000), tmp_path, policy)
    assert_blocked(res, text, {"inode_flood_scratch", "inode_flood_tmp", "inode_flood_shm"})
    assert "errno 28" in res["inode_flood_scratch"][1], res  # ENOSPC: the inode bound, not another error
    assert int(text.split("TOTAL ")[1].split()[0]) <= 3 * 5000, text[-500:]
    assert " fs-" not in Path("/proc/mounts").read_text()  # stop() detached it


def test_a_run_cannot_reach_a_concurrent_run(host, tmp_path):
    """Two sandboxes at once (distinct leased uids, each its own ipc/net/pid namespaces and
    private tmpfs): nothing one leaves under a well-known name is visible to the other."""
    ctx, _, _ = host
    planter = sandbox.launch(
        [sys.executable, str(HERE / "cross_run.py"), json.dumps(dict(ctx, role="plant"))],
        scratch=tmp_path / "a",
        policy=POLICY,
    )
    try:
        line = planter.stdout.readline()
        assert line.startswith(b"PLANTED"), line + planter.stdout.read(2000)
        res, text = run_attack("cross_run.py", dict(ctx, role="seek"), tmp_path)
        assert_blocked(
            res, text, {"sysv_shm", "sysv_msg", "posix_mq", "abstract_socket", "tmp_file", "shm_file", "processes"}
        )
        assert planter.poll() is None  # the planter was alive (and its names held) the whole time
    finally:
        sandbox.stop(planter)
