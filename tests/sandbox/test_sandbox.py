"""Each sandbox layer on its own: kill, network, dedicated uid, view, seccomp, rlimits, env, guard, fail closed."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cacheon_subnet import sandbox

POLICY = sandbox.SandboxPolicy(wall_timeout_s=30)
REPO = Path(__file__).resolve().parents[2]


def run_child(tmp_path: Path, code: str, policy: sandbox.SandboxPolicy = POLICY, timeout: float = 60) -> tuple[int, str]:
    scratch = tmp_path / "work"
    proc = sandbox.launch([sys.executable, "-c", textwrap.dedent(code)], scratch=scratch, policy=policy)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        sandbox.stop(proc)
    return proc.returncode, out.decode()


def guarded(tmp_path: Path, body: str) -> str:
    """Run `body` as bundle code (module in a bundle root) under the audit guard."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "mod.py").write_text("def run():\n" + textwrap.indent(textwrap.dedent(body), "    "))
    code = f"""
        import os, sys
        from cacheon_subnet.guard import install_guard
        install_guard({str(bundle)!r}, [os.environ["CACHEON_SANDBOX_SCRATCH"]])
        sys.path.insert(0, {str(bundle)!r})
        import mod
        try:
            mod.run()
            print("ALLOWED")
        except PermissionError as e:
            print("REFUSED", e)
    """
    _, out = run_child(tmp_path, code, sandbox.SandboxPolicy(wall_timeout_s=30, ro_paths=(str(bundle),)))
    return out


def test_timeout_kills_whole_process_group(tmp_path):
    scratch = tmp_path / "w"
    proc = sandbox.launch(
        [sys.executable, "-c", "import subprocess,time; subprocess.Popen(['sleep','300']); time.sleep(300)"],
        scratch=scratch,
        policy=POLICY,
    )
    time.sleep(1.0)
    pgid = os.getpgid(proc.pid)
    assert pgid == proc.pid  # own process group (setsid)
    sandbox.stop(proc)
    time.sleep(0.2)
    ps = subprocess.run(["ps", "-o", "stat=", "-g", str(pgid)], capture_output=True, text=True, check=False).stdout.split()
    assert proc.returncode is not None and [s for s in ps if not s.startswith("Z")] == []


def test_network_namespace_blocks_connections(tmp_path):
    iso = sandbox.probe_isolation(POLICY)
    if not iso.network_namespace:
        pytest.skip("this platform allows no network namespace; the audit guard is the remaining layer")
    code = """
        import socket
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect(("1.1.1.1", 53)); print("CONNECTED")
        except OSError as e:
            print("BLOCKED", e.errno)
        print(open("/proc/net/dev").read().count(":"))
    """
    _, out = run_child(tmp_path, code)
    assert "BLOCKED" in out
    assert out.strip().splitlines()[-1] == "1"  # only the loopback interface exists


LOOPBACK_PROBE = """
    import socket
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
    try:
        socket.create_connection(srv.getsockname(), timeout=2); print("LOOPBACK")
    except OSError as e:
        print("NO-LOOPBACK", e.errno)
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=2); print("OUTSIDE")
    except OSError as e:
        print("BLOCKED", e.errno)
"""


def test_engine_namespace_has_loopback_but_no_outside(tmp_path):
    """Engines rendezvous on 127.0.0.1 (SGLang's dist init): loopback up, nothing else; the
    loopback is the sandbox's own (a service the host listens on is not reachable)."""
    import socket

    host_srv = socket.socket()
    host_srv.bind(("127.0.0.1", 0))
    host_srv.listen(1)
    port = host_srv.getsockname()[1]
    probe = (
        LOOPBACK_PROBE
        + f"""
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=2); print("HOST-SERVICE")
    except OSError as e:
        print("HOST-HIDDEN", e.errno)
"""
    )
    try:
        _, out = run_child(tmp_path, probe, sandbox.SandboxPolicy(loopback=True))
    finally:
        host_srv.close()
    assert "LOOPBACK" in out.split() and "BLOCKED" in out and "OUTSIDE" not in out
    assert "HOST-HIDDEN" in out and "HOST-SERVICE" not in out, out


def test_network_allowed_when_not_isolated_control(tmp_path):
    # Control for the test above: without isolation the same child sees the host's interfaces.
    _, out = run_child(
        tmp_path, "print(open('/proc/net/dev').read().count(':'))", sandbox.SandboxPolicy(isolate_network=False)
    )
    _, out_iso = run_child(tmp_path, "print(open('/proc/net/dev').read().count(':'))", POLICY)
    if sandbox.probe_isolation(POLICY).network_namespace:
        assert int(out.strip()) >= int(out_iso.strip())


def test_environment_is_scrubbed(tmp_path, monkeypatch):
    monkeypatch.setenv("WALLET_PASSWORD", "hunter2")
    _, out = run_child(tmp_path, "import os; print(os.environ.get('WALLET_PASSWORD'), os.environ['HOME'])")
    assert "hunter2" not in out and str(tmp_path / "work") in out


def test_file_size_limit(tmp_path):
    code = """
        import os
        try:
            with open("big.bin", "wb") as f:
                f.write(b"x" * (4 << 20))
            print("WROTE")
        except OSError as e:
            print("LIMITED", e.errno)
    """
    _, out = run_child(tmp_path, code, sandbox.SandboxPolicy(file_bytes=1 << 20))
    assert "LIMITED" in out


def test_address_space_limit(tmp_path):
    code = """
        try:
            b = bytearray(2 << 30); print("ALLOCATED")
        except MemoryError:
            print("LIMITED")
    """
    _, out = run_child(tmp_path, code, sandbox.SandboxPolicy(address_space_bytes=1 << 30))
    assert "LIMITED" in out


def test_cpu_limit(tmp_path):
    rc, _ = run_child(tmp_path, "while True: pass", sandbox.SandboxPolicy(cpu_seconds=1), timeout=30)
    assert rc != 0  # SIGXCPU / SIGKILL


def test_child_runs_as_a_dedicated_uid(tmp_path):
    _, out = run_child(tmp_path, "import os; print(os.getuid(), os.getgid(), os.getgroups())")
    uid, gid = map(int, out.split()[:2])
    cfg = sandbox.wall_config()
    assert cfg.uid <= uid < cfg.uid + cfg.count and gid - cfg.gid == uid - cfg.uid and "[]" in out
    assert not {0, sandbox.NOBODY, os.getuid()} & set(range(cfg.uid, cfg.uid + cfg.count))


def _held_by_another_run(uid: int) -> bool:
    """A process other than this test's children runs as `uid` (a parallel test took the lease)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                if any(line.startswith("Uid:") and int(line.split()[1]) == uid for line in f):
                    return True
        except OSError:
            continue
    return False


def test_concurrent_children_get_distinct_uids(tmp_path):
    """No shared process budget or file ownership between two children running at once (a
    candidate's fork bomb cannot starve the baseline's engine of processes)."""
    code = "import os, time; print(os.getuid(), flush=True); time.sleep(30)"
    a = sandbox.launch([sys.executable, "-c", code], scratch=tmp_path / "a", policy=POLICY)
    b = sandbox.launch([sys.executable, "-c", code], scratch=tmp_path / "b", policy=POLICY)
    try:
        ua, ub = int(a.stdout.readline()), int(b.stdout.readline())
    finally:
        sandbox.stop(a)
        sandbox.stop(b)
    assert ua != ub and {ua, ub} == {a.cacheon_uid, b.cacheon_uid}
    # leases are returned by stop(): both locks can be taken again (another test's child running
    # at the same time may take one first, so the locks are checked, not the next child's uid)
    import fcntl

    from cacheon_subnet.sandbox.policy import lock_dir

    for u in (ua, ub):
        fd = os.open(os.path.join(lock_dir(), f"uid-{u}.lock"), os.O_RDWR)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                free = True
            except BlockingIOError:
                free = False
        finally:
            os.close(fd)
        assert free or _held_by_another_run(u), f"uid {u} still leased after stop()"


def test_view_hides_host_and_is_read_only(tmp_path):
    secret = tmp_path / "outside" / "wallet.json"
    secret.parent.mkdir()
    secret.write_text("hotkey")
    code = f"""
        import os
        for p in ("/etc/shadow", "/root", {str(secret)!r}, "/var/lib"):
            print(p, os.path.exists(p) and os.access(p, os.R_OK))
        for d in ("/", "/usr", "/etc", {str(REPO)!r}):
            try:
                open(os.path.join(d, "x"), "w"); print("WROTE", d)
            except OSError as e:
                print("RO", d, e.errno)
        open({str(tmp_path / "x")!r}, "w").write("private")  # /tmp inside is the sandbox's own tmpfs
        open(os.path.join(os.environ["CACHEON_SANDBOX_SCRATCH"], "ok"), "w").write("x"); print("SCRATCH-OK")
    """
    _, out = run_child(tmp_path, code)
    assert "True" not in out and "WROTE" not in out and "SCRATCH-OK" in out, out
    assert not (tmp_path / "x").exists()  # nothing the child wrote reaches the host's /tmp


def test_seccomp_refuses_namespaces_and_ptrace(tmp_path):
    code = """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        print("unshare", libc.unshare(0x40000000), ctypes.get_errno())
        print("ptrace", libc.ptrace(0, 0, None, None), ctypes.get_errno())
        print("seccomp", open("/proc/self/status").read().split("Seccomp:")[1].split()[0])
    """
    _, out = run_child(tmp_path, code)
    assert "unshare -1 1" in out and "ptrace -1 1" in out and "seccomp 2" in out, out


def test_fail_closed_without_bwrap(tmp_path, monkeypatch):
    from cacheon_subnet.sandbox import launcher

    launcher.preflight.cache_clear()
    monkeypatch.setenv("CACHEON_BWRAP", str(tmp_path / "no-bwrap"))
    try:
        with pytest.raises(sandbox.SandboxError, match="bwrap.*not found"):
            sandbox.launch([sys.executable, "-c", "pass"], scratch=tmp_path / "w", policy=POLICY)
    finally:
        launcher.preflight.cache_clear()


@pytest.mark.parametrize("uid", ["0", "65534", "12"])
def test_fail_closed_on_a_shared_uid(tmp_path, monkeypatch, uid):
    from cacheon_subnet.sandbox import launcher

    launcher.preflight.cache_clear()
    monkeypatch.setenv("CACHEON_SANDBOX_UID", uid)
    try:
        with pytest.raises(sandbox.SandboxError, match="not a dedicated unprivileged uid"):
            sandbox.launch([sys.executable, "-c", "pass"], scratch=tmp_path / "w", policy=POLICY)
    finally:
        launcher.preflight.cache_clear()


def test_fail_closed_when_not_root(tmp_path, monkeypatch):
    from cacheon_subnet.sandbox import launcher

    launcher.preflight.cache_clear()
    monkeypatch.setattr(launcher.os, "geteuid", lambda: 4242)
    try:
        with pytest.raises(sandbox.SandboxError, match="not root"):
            sandbox.launch([sys.executable, "-c", "pass"], scratch=tmp_path / "w", policy=POLICY)
    finally:
        launcher.preflight.cache_clear()


def test_fail_closed_when_interpreter_unreadable(tmp_path, monkeypatch):
    from cacheon_subnet.sandbox import fsview, launcher

    private = tmp_path / "private-python"
    private.write_text("")
    private.chmod(0o700)
    launcher.preflight.cache_clear()
    monkeypatch.setattr(fsview, "interpreter_files", lambda: [str(private)])
    try:
        with pytest.raises(sandbox.SandboxError, match="cannot read the interpreter"):
            sandbox.launch([sys.executable, "-c", "pass"], scratch=tmp_path / "w", policy=POLICY)
    finally:
        launcher.preflight.cache_clear()


def test_weak_mode_is_loud(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("CACHEON_SANDBOX", "weak")
    _, out = run_child(tmp_path, "import os; print(os.getuid(), os.environ['CACHEON_SANDBOX_MODE'])")
    assert out.split() == [str(os.getuid()), "weak"]
    assert "WEAK MODE" in capfd.readouterr().err


def test_the_miners_own_bench_worker_says_what_weak_means_for_a_miner(tmp_path, monkeypatch, capfd):
    """bench (drop_privileges=False, the miner's own tool) printed the validator-facing "WEAK MODE
    ... NEVER use this on a validator" at a miner; it now says what it means for them. The
    validator-facing line stays for CACHEON_SANDBOX=weak (test_weak_mode_is_loud)."""
    monkeypatch.delenv("CACHEON_SANDBOX", raising=False)
    policy = sandbox.SandboxPolicy(wall_timeout_s=30, drop_privileges=False)
    _, out = run_child(tmp_path, "import os; print(os.getuid())", policy=policy)
    assert out.split() == [str(os.getuid())]
    err = capfd.readouterr().err
    assert "your bundle runs as your own user" in err and "validators run it behind the full wall" in err, err
    assert "WEAK MODE" not in err and "NEVER" not in err
    monkeypatch.setenv("CACHEON_SANDBOX", "weak")  # weak asked for by name: the strong line, even here
    run_child(tmp_path, "pass", policy=policy)
    assert "NEVER use this on a validator" in capfd.readouterr().err


def test_pass_fds_survive_the_wall(tmp_path):
    import socket

    host, child = socket.socketpair()
    code = f"import socket; s = socket.socket(fileno={child.fileno()}); s.sendall(b'hello'); print('SENT')"
    proc = sandbox.launch([sys.executable, "-c", code], scratch=tmp_path / "w", policy=POLICY, pass_fds=[child.fileno()])
    child.close()
    try:
        host.settimeout(30)
        assert host.recv(5) == b"hello"
    finally:
        sandbox.stop(proc)
        host.close()


def test_remove_tree_survives_what_a_child_leaves(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    d = tmp_path / "scratch"
    (d / "sub").mkdir(parents=True)
    os.symlink(victim, d / "link-dir")
    os.symlink(victim / "keep", d / "link-file")
    os.symlink("/nonexistent", d / "dangling")
    os.mkfifo(d / "fifo")
    (d / "sub" / "f").write_text("x")
    (d / "sub").chmod(0o000)
    d.chmod(0o500)
    assert sandbox.remove_tree(d) == []
    assert not d.exists() and (victim / "keep").read_text() == "x"  # links removed, never followed


@pytest.mark.parametrize(
    "body,word",
    [
        ("import subprocess\nsubprocess.run(['true'])", "spawning"),
        ("import os\nos.system('true')", "shell commands"),
        ("import socket\nsocket.socket(socket.AF_INET).connect(('127.0.0.1', 9))", "network"),
        ("import gc\ngc.get_objects()", "gc.get_objects"),
        ("import os\nos.putenv('X', '1')", "os.putenv"),
        ("open('/tmp/cacheon-escape.txt', 'w').write('x')", "outside the scratch dir"),
        ("import ctypes\nctypes.CDLL(None)", "ctypes.dlopen"),
    ],
)
def test_guard_refuses_from_bundle_code(tmp_path, body, word):
    out = guarded(tmp_path, body)
    assert "REFUSED" in out and word in out, out
    assert not Path("/tmp/cacheon-escape.txt").exists()


def test_guard_allows_scratch_writes(tmp_path):
    out = guarded(tmp_path, "import os\nopen(os.path.join(os.environ['CACHEON_SANDBOX_SCRATCH'], 'ok.txt'), 'w').write('x')")
    assert "ALLOWED" in out


def test_guard_refuses_writes_into_bundle(tmp_path):
    out = guarded(tmp_path, "import os\nopen(os.path.join(os.path.dirname(__file__), 'mod.py'), 'a').write('#')")
    assert "REFUSED" in out


def test_view_never_binds_hidden_repo_entries_or_shared_dirs(monkeypatch):
    """A sys.path / PYTHONPATH entry equal to the repo root or /tmp must not widen the view: the
    repo's hidden entries (.git, .cacheon state, .venv) and other runs' temp files stay out."""
    from cacheon_subnet.sandbox import fsview

    monkeypatch.setattr(sys, "path", sys.path + ["/tmp", "/dev/shm", str(REPO)])
    srcs = [b.src for b in fsview.read_binds([str(REPO), "/tmp", "/var/tmp"])]
    venv = os.path.realpath(sys.prefix)  # the interpreter's own prefix (a .venv in the checkout) is needed
    assert not [s for s in srcs if s.startswith(str(REPO) + "/.") and not fsview._under(s, venv)], srcs
    repo_tmp = fsview._under(str(REPO), "/tmp")  # .ci/run never runs from there; a local clone may
    assert not [
        s
        for s in srcs
        if (fsview._under(s, "/tmp") and not (repo_tmp and fsview._under(s, str(REPO)))) or fsview._under(s, "/dev")
    ], srcs
    assert str(REPO / "cacheon_subnet") in srcs


def test_fail_closed_when_user_namespaces_are_unavailable(tmp_path, monkeypatch):
    """A bwrap that cannot create its namespaces (sysctl, AppArmor, a container's seccomp) stops
    every launch with the sysctls to check, instead of running anything weaker."""
    import tempfile

    from cacheon_subnet.sandbox import launcher

    fake_dir = Path(tempfile.mkdtemp(prefix="cacheon-fake-bwrap-", dir="/tmp"))
    fake_dir.chmod(0o755)  # setpriv execs bwrap as the sandbox uid: it must reach it
    fake = fake_dir / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, likely because the kernel "
        "does not allow non-privileged user namespaces.' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    launcher.preflight.cache_clear()
    monkeypatch.setenv("CACHEON_BWRAP", str(fake))
    try:
        with pytest.raises(sandbox.SandboxError, match="User namespaces look unavailable.*max_user_namespaces"):
            sandbox.launch([sys.executable, "-c", "pass"], scratch=tmp_path / "w", policy=POLICY)
    finally:
        launcher.preflight.cache_clear()
        sandbox.remove_tree(fake_dir)


def test_a_state_dir_inside_the_checkout_is_never_in_a_childs_view(tmp_path):
    """The repo is bound read-only into every child; an operator's --state-dir or --wallet.path
    inside it must not be (the validator registers both at start-up: startup.deny_to_children)."""
    import tempfile

    from cacheon_subnet.sandbox import fsview
    from cacheon_subnet.validator import startup

    state = Path(tempfile.mkdtemp(prefix="state-", dir=REPO / "docs"))
    wallet = Path(tempfile.mkdtemp(prefix="wallet-", dir=REPO / "docs"))
    try:

        def bound(p: Path) -> bool:
            srcs = [b.src for b in fsview.read_binds([])]
            return any(fsview._under(str(p), s) for s in srcs)

        assert bound(state) and bound(wallet)  # the control: the checkout's docs/ is in the view
        startup.deny_to_children(state, str(wallet))
        assert not bound(state) and not bound(wallet)
        assert bound(REPO / "docs" / "security.md")  # the rest of that dir still is
    finally:
        fsview._DENIED.clear()
        state.rmdir()
        wallet.rmdir()


def test_what_a_child_leaves_in_a_handed_dir_is_the_hosts_after_stop(tmp_path):
    """A receipts dir (or a JIT copy) stays on host disk after the run: a setuid-to-the-sandbox-uid
    file or a world-writable dir left there must not outlive the child as its uid's. A link the
    child planted is re-owned itself, never its target."""
    import stat

    rw = tmp_path / "rw"
    rw.mkdir()
    target = tmp_path / "target"
    target.write_text("host file")
    os.chown(target, 12345, 12345)
    code = f"""
        import os
        d = {str(rw)!r}
        open(os.path.join(d, "run-me"), "w").write("#!/bin/sh\\n")
        os.chmod(os.path.join(d, "run-me"), 0o6777)
        os.mkdir(os.path.join(d, "sub")); os.chmod(os.path.join(d, "sub"), 0o1777)
        os.symlink({str(target)!r}, os.path.join(d, "sub", "link"))
        print("uid", os.getuid())
    """
    rc, out = run_child(tmp_path, code, sandbox.SandboxPolicy(wall_timeout_s=30, rw_paths=(str(rw),)))
    assert rc == 0 and "uid" in out, out
    assert int(out.split()[-1]) != os.getuid()  # the control: it ran as the sandbox uid
    for p in (rw / "run-me", rw / "sub", rw / "sub" / "link"):
        st = os.lstat(p)
        assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid()), (p, st.st_uid)
        if not stat.S_ISLNK(st.st_mode):
            assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | stat.S_IWOTH), (p, oct(st.st_mode))
    assert os.stat(target).st_uid == 12345  # the link's target was never touched
