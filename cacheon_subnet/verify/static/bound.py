"""The static scan and the copy identity of a bundle, run in a child with fail-closed budgets.

Why: both parse hostile source with `ast` before anything else has judged it, and used to run in
the validator's own process with no bound: a policy-clean 3000-def bundle held the (serial)
screening stage for 337 s, one at the 512 KiB source cap for ~45 min (quadratic paths, now
linear: docs/benchmarks.md, session 13). A budget makes that bound hold whatever the next slow
shape is, and a parser crash (RecursionError, MemoryError) ends the child, never the pass.

How: verify/static/child.py behind the sandbox wall (its own uid, namespaces, seccomp; ~60 ms to start)
under RLIMIT_CPU, RLIMIT_AS and a wall deadline the host enforces. A child over budget or dead
is a P022 finding naming the budget, what was used and the file it was at: the bundle FAILs
`policy` and the screen stage moves on. A host that cannot start the wall at this moment (every
sandbox uid leased, a namespace refused: the child's first frame, written before it reads the
bundle, never came) runs the same child without it, still bounded, and logs `static.unwalled`:
the scan executes no bundle code, and failing the bundle or the pass for our own trouble would
be worse; when no child starts at all, SandboxError. Results are cached by bundle digest, so the
validator's screen, copy check and verify read one child per bundle (`cacheon verify` and
`pack` run it too).
"""

from __future__ import annotations

import os
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from cacheon_subnet import sandbox
from cacheon_subnet.bundle import Bundle, Scratch
from cacheon_subnet.errors import SandboxError
from cacheon_subnet.policy import scan as policy
from cacheon_subnet.verify.static import protocol as P

SCAN_CPU_S = 20
"""CPU seconds for the scan and the identity together (RLIMIT_CPU of the child). Measured on the
2-core CPU box (docs/benchmarks.md, session 13, `scripts/scan_scaling.py`): every bundle in
examples/ takes at most 0.16 s, the child's start included; the worst shapes at the 512 KiB cap
(`scripts/scan_shapes.py`) at most 7.4 s (binop_exprs, the densest AST per byte), the others
under 4.2 s. 20 s leaves ~2.7x over the worst for a slower or busier validator CPU and bounds
what one commit can hold the serial screening stage for (~45 min at the cap before)."""

SCAN_WALL_S = 60.0
"""Wall seconds from launch to answer, the host's deadline. Three times the CPU budget: on a
loaded host (arena engines, a concurrent verify; this box at load 3) the worst shape's wall was
up to 2.2x its CPU, and a host's load must not fail a bundle."""

SCAN_MEMORY_BYTES = 2 << 30
"""Address space of the child (RLIMIT_AS). Parsing costs ~500 bytes per source byte: the worst
512 KiB shape peaks at 285 MiB of address space with scan and identity sharing the parsed trees;
2 GiB is 7x that, and keeps a ballooning parse from reaching the validator's memory."""

MAX_ANSWER_BYTES = 64 << 20  # the child's stdout: findings of a 512 KiB bundle stay far below (~10 MiB)
CACHE_SIZE = 64  # bundles remembered by digest (a pass screens at most max_items_per_pass, 16)


@dataclass(frozen=True)
class ScanBudget:
    cpu_s: int = SCAN_CPU_S
    wall_s: float = SCAN_WALL_S
    memory_bytes: int = SCAN_MEMORY_BYTES


@dataclass(frozen=True)
class StaticResult:
    """What the child answered. findings: str(Finding) lines, a budget breach or crash included
    (rule P022); norm_id: the normalized identity, when asked for and the scan found nothing."""

    findings: tuple[str, ...]
    norm_id: str | None = None
    identity_done: bool = False
    cpu_s: float = 0.0
    wall_s: float = 0.0
    breach: str | None = None  # the P022 message, when the child ran out of a budget or died

    @property
    def passed(self) -> bool:
        return not self.findings


_CACHE: OrderedDict[str, StaticResult] = OrderedDict()
_LOCK = threading.Lock()


def forget() -> None:
    """Drop every remembered result (tests)."""
    with _LOCK:
        _CACHE.clear()


def static_check(
    bundle: Bundle, *, identity: bool = False, budget: ScanBudget | None = None, walled: bool = True
) -> StaticResult:
    """The policy findings of `bundle` (and its normalized identity when `identity`), computed in
    a bounded child, or remembered from an earlier call for the same digest. walled=False: a
    plain child with the same rlimits (`cacheon pack` on a miner's machine, which may have no
    sandbox)."""
    with _LOCK:
        hit = _CACHE.get(bundle.digest)
        if hit is not None and (hit.identity_done or hit.findings or not identity):
            _CACHE.move_to_end(bundle.digest)
            return hit
    budget = budget or ScanBudget()
    big = policy.oversized(bundle.files)  # refused before any parse: nothing to bound
    result = StaticResult((str(big),)) if big is not None else _bounded(bundle, identity, budget, walled)
    if result.breach is None and budget == ScanBudget():  # a breach may be the host's load: judged again if asked
        with _LOCK:
            _CACHE[bundle.digest] = result
            while len(_CACHE) > CACHE_SIZE:
                _CACHE.popitem(last=False)
    return result


class _NoStart(Exception):
    """The child never began (no first frame, which it writes before reading any of the bundle):
    the host's trouble (the wall could not start, no memory to fork), never the bundle's."""


def _bounded(bundle: Bundle, identity: bool, budget: ScanBudget, walled: bool) -> StaticResult:
    """One child; behind the wall first when asked, else (or when the wall does not start) a
    plain child under the same rlimits, logged. Raises SandboxError when no child starts at all."""
    if walled:
        try:
            return _run(bundle, identity, budget, True)
        except (SandboxError, _NoStart) as exc:
            from cacheon_subnet.log import get_logger

            get_logger("static").warning("static.unwalled", reason=str(exc)[:500])
    try:
        return _run(bundle, identity, budget, False)
    except _NoStart as exc:
        raise SandboxError(f"the static scan's child did not start: {exc}") from None


def _payload(bundle: Bundle, identity: bool) -> bytes:
    from cacheon_subnet.bundle.identity.normalize import compiled_sources, other_files

    py = sorted(p for p in bundle.files if p.endswith(".py"))
    manifest = bundle.files.get("manifest.toml") if identity else None
    head = P.Head(
        paths=tuple(sorted(bundle.files)),
        py=tuple(P.PyFile(p, len(bundle.files[p])) for p in py),
        manifest=None if manifest is None else len(manifest),
        identity=identity,
        other=other_files(bundle.files, compiled_sources(bundle)) if identity else {},
        cuda=tuple(sorted(bundle.manifest.cuda_modules(bundle.files))),
    )
    return b"".join([P.head_line(head), *(bundle.files[p] for p in py), manifest or b""])


def _policy(budget: ScanBudget) -> sandbox.SandboxPolicy:
    return sandbox.SandboxPolicy(
        wall_timeout_s=budget.wall_s,
        cpu_seconds=budget.cpu_s,
        address_space_bytes=budget.memory_bytes,
        file_bytes=1 << 20,
        open_files=64,
        max_processes=16,
        scratch_bytes=4 << 20,
        tmp_bytes=4 << 20,
        inodes=1024,
    )


def _argv(fd: int) -> list[str]:
    return [sys.executable, "-W", "ignore", "-m", "cacheon_subnet.verify.static.child", "--fd", str(fd)]


def _run(bundle: Bundle, identity: bool, budget: ScanBudget, walled: bool) -> StaticResult:
    scratch = Scratch("cacheon-scan-")
    try:
        with tempfile.TemporaryFile() as f:
            f.write(_payload(bundle, identity))
            f.flush()
            fd = os.open(f"/proc/self/fd/{f.fileno()}", os.O_RDONLY | os.O_CLOEXEC)  # the child cannot write it
            try:
                t0 = time.monotonic()
                proc = _launch(fd, scratch.path / "work", budget, walled)
            finally:
                os.close(fd)
            try:
                out, why = _read(proc, t0 + budget.wall_s)
                rc = _reap(proc, t0 + budget.wall_s if why is None else 0.0)
                if rc is None:  # past the deadline (or its answer is over the cap): killed, then reaped
                    why = why or "wall"
                    _kill(proc)
                    rc = _reap(proc, time.monotonic() + 5.0)
            finally:
                _end(proc, walled)
            wall = time.monotonic() - t0
    finally:
        scratch.cleanup()
    frames, refused, text = _frames(out)
    if not frames and refused is None:
        raise _NoStart(
            f"{'walled' if walled else 'plain'} child, exit {rc}{_signame(rc)} after {wall:.1f} s"
            f"{': ' + text if text else ''}"
        )
    return _judge(bundle, identity, budget, frames, refused, text, why, rc, wall)


def _launch(fd: int, work: Path, budget: ScanBudget, walled: bool) -> subprocess.Popen[bytes]:
    if walled:
        return sandbox.launch(_argv(fd), scratch=work, policy=_policy(budget), pass_fds=[fd])
    limits = [
        (resource.RLIMIT_CPU, budget.cpu_s),
        (resource.RLIMIT_AS, budget.memory_bytes),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_FSIZE, 1 << 20),
    ]

    def pre() -> None:
        for res, val in limits:
            _, hard = resource.getrlimit(res)
            val = val if hard == resource.RLIM_INFINITY else min(val, hard)
            resource.setrlimit(res, (val, val))

    here = str(Path(__file__).resolve().parents[3])
    env = {
        **os.environ,
        "PYTHONPATH": here + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    work.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        _argv(fd),
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        pass_fds=[fd],
        start_new_session=True,
        preexec_fn=pre,
    )  # noqa: PLW1509 - rlimits before exec; no bundle code runs there
    return proc


def _read(proc: subprocess.Popen[bytes], deadline: float) -> tuple[bytes, str | None]:
    """Everything the child writes until EOF; why it stopped early ("wall", "output") or None."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    buf = bytearray()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(buf), "wall"
            if not sel.select(timeout=min(left, 1.0)):
                continue
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                return bytes(buf), None
            buf += chunk
            if len(buf) > MAX_ANSWER_BYTES:
                return bytes(buf), "output"


def _reap(proc: subprocess.Popen[bytes], deadline: float) -> int | None:
    """Its exit code once it exits by the deadline (polled), else None."""
    while True:
        rc = proc.poll()
        if rc is not None or time.monotonic() >= deadline:
            return rc
        time.sleep(0.005)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to its process group (behind the wall: the outer bwrap, whose death takes the
    child's pid namespace with it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _end(proc: subprocess.Popen[bytes], walled: bool) -> None:
    if walled:
        sandbox.stop(proc, grace_s=0.0)  # every member gone, tmpfs unmounted, uid lease released
    elif proc.poll() is None:
        _kill(proc)
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _frames(out: bytes) -> tuple[list[P.Frame], P.FrameError | None, str]:
    """The child's frames, the first frame line that did not decode (protocol.read_frame: the
    child parsed hostile source, so its lines are read as hostile), and the tail of anything else
    it printed (a fatal error's text)."""
    frames: list[P.Frame] = []
    refused: P.FrameError | None = None
    other = []
    head = P.FRAME.encode()
    for line in out.split(b"\n"):
        if line.startswith(head):
            try:
                frames.append(P.read_frame(line[len(head) :]))
            except P.FrameError as e:
                refused = refused or e
        elif line.strip():
            other.append(line.decode("utf-8", "replace"))
    return frames, refused, " | ".join(other)[-300:]


_KILLED = (-signal.SIGKILL, -signal.SIGXCPU, 128 + signal.SIGKILL, 128 + signal.SIGXCPU)  # direct / via bwrap


def _judge(
    bundle: Bundle,
    identity: bool,
    budget: ScanBudget,
    frames: list[P.Frame],
    refused: P.FrameError | None,
    text: str,
    why: str | None,
    rc: int | None,
    wall: float,
) -> StaticResult:
    """The child's answer, or a P022 finding saying which budget ran out (how much was used, at
    which file), how it died or which frame of it the host refused. Fail closed: anything but a
    complete answer in well-formed frames is a finding."""
    at = [f for f in frames if isinstance(f, P.At)]
    cpu = max((f.cpu for f in frames), default=0.0)
    found = [f.findings for f in frames if isinstance(f, P.Findings)]
    ids = [f.identity for f in frames if isinstance(f, P.Identity)]
    crash = next((f.crash for f in frames if isinstance(f, P.Crash)), None)
    findings = found[0] if len(found) == 1 else None
    nid: str | None | bool = ids[0] if len(ids) == 1 else False
    done = any(isinstance(f, P.Done) for f in frames)
    complete = done and findings is not None and (not identity or findings or nid is not False)
    if refused is None and why is None and rc == 0 and complete:
        assert findings is not None  # complete says so
        return StaticResult(
            tuple(findings), nid if isinstance(nid, str) and nid else None, identity and not findings, cpu, wall
        )
    step, path = (at[-1].step, at[-1].path) if at else ("starting", "")
    what = "the normalized identity" if step.startswith("computing the normalized identity") else "the static scan"
    where = f"while {step}{' ' + path if path else ''}"
    if why == "wall":
        msg = (
            f"{what} ran past its wall budget: no result after {wall:.1f} s (limit {budget.wall_s:g} s; "
            f"{cpu:.1f} s CPU reported) {where}"
        )
    elif why == "output":
        msg = f"{what} answered more than {MAX_ANSWER_BYTES >> 20} MiB {where}"
    elif refused is not None:
        msg = f"{what} sent a frame the host refuses {where}: {str(refused)[:300]}"
    elif crash is not None and crash.startswith("MemoryError"):
        msg = f"{what} ran out of memory (address-space limit {budget.memory_bytes >> 20} MiB) {where}: {crash}"
    elif crash is not None:
        msg = f"{what} crashed {where}: {crash[:300]}"
    elif rc in _KILLED and wall >= budget.cpu_s * 0.9:  # one thread: its CPU time cannot pass its wall time
        msg = (
            f"{what} ran out of its CPU budget: killed at {budget.cpu_s} s CPU (RLIMIT_CPU; {wall:.1f} s wall, "
            f"{cpu:.2f} s CPU when its last step began) {where}; honest bundles take well under a second"
        )
    else:
        msg = f"{what} ended without a result (exit {rc}{_signame(rc)}, {wall:.1f} s) {where}{': ' + text if text else ''}"
    first = min((p for p in bundle.files if p.endswith(".py")), default="manifest.toml")
    finding = str(policy.Finding(path or first, 1, "P022", msg))
    return StaticResult((*(findings or ()), finding), None, False, cpu, wall, msg)


def _signame(rc: int | None) -> str:
    """', SIGSEGV' for a death by signal (negative: a direct child; 128+n: through bwrap)."""
    n = -rc if rc is not None and rc < 0 else (rc - 128 if rc is not None and 128 < rc < 128 + 65 else 0)
    try:
        return f", {signal.Signals(n).name}" if n else ""
    except ValueError:
        return f", signal {n}"
