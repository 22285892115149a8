"""Host-clocked CPU timing: the clock, the inputs and the judgement live outside the contribution.

The CPU arena used to time inside the worker (the contribution's own process), where a kernel
that skipped every other call, or a patched timer, decided its own verdict. Here:

* Each side (baseline B/B', candidate C) is its own sandboxed worker, same launch, same IPC.
* The host owns one shared-memory arena per side (a memfd passed over the worker socket).
  While a side is frozen (SIGSTOP on its process group; every task confirmed stopped) the host
  writes K fresh inputs (generated from a secret seed) into it and poisons every output.
* The clocks are the host's: t0, SIGCONT + a tiny "run" frame, the worker's tiny reply, SIGSTOP,
  confirmation that the leader stopped, t1 (wall), and the kernel's CPU clock of the side's
  process read while it is frozen. The charge is that CPU time (all threads, live or exited:
  threads in parallel buy nothing; a shared box's time-slicing barely moves it); the wall time
  must tell the same story (cpu/case.py fails a side that waits off-CPU far more than B). A
  side may not start, lose or reap processes while timed. Nothing the worker says is read
  but "ok".
* Every call of every batch (warm-up included) is judged against the fp32 reference the host
  computes outside the clock: skipping, replaying or memoising any call is a wrong output, FAIL.
* The side not being timed is frozen, so it cannot run (spin, thrash caches) during the other's
  batch; its CPU clock is read around every batch and any movement is a FAIL.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from cacheon_subnet.slots.spec import ShapeCase, SlotSpec, dtype_name, dtype_of
from cacheon_subnet.verify import judge, wire
from cacheon_subnet.verify import protocol as P
from cacheon_subnet.verify.client import WorkerClient
from cacheon_subnet.verify.protocol import View  # an argument inside its call's mapping (offset: from its base)
from cacheon_subnet.verify.report import Failure

ALIGN = 64
PAGE = mmap.PAGESIZE  # each call's region is mapped on its own in the worker
REFERENCE = "@reference"  # the target a baseline worker runs: the slot's fp32 reference
FROZEN_CPU_SLACK_NS = 200_000  # a frozen side's clock may not move (SIGSTOP'd tasks do not run)


class TimingFailure(Exception):
    """A verdict-ending failure with its reason (wrong output, worker error, frozen side ran)."""

    def __init__(self, reason: str, side: str = "candidate") -> None:
        super().__init__(reason)
        self.reason = reason
        self.side = side  # "baseline": the validator's own side broke; "box": contended (no verdict on the miner)


@dataclass(frozen=True)
class Layout:
    """Where call i's arguments live: base i * call_bytes, then per-arg views (inputs keep the
    generator's storage sharing: q/k views into one qkv buffer stay views)."""

    calls: int
    call_bytes: int
    storages: tuple[tuple[int, int], ...]  # (offset, nbytes) of each input storage within a call
    views: Mapping[str, View]
    storage_of: Mapping[str, int]  # input arg -> index into storages
    written: tuple[str, ...]

    @property
    def size(self) -> int:
        return self.calls * self.call_bytes

    def call_views(self) -> dict[str, View]:
        """Offsets within one call's own mapping (the worker maps each call separately)."""
        return dict(self.views)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_layout(spec: SlotSpec, case: ShapeCase, act: torch.dtype, sample: Mapping[str, torch.Tensor], calls: int) -> Layout:
    views: dict[str, View] = {}
    storages: list[tuple[int, int]] = []
    index: dict[int, int] = {}
    storage_of: dict[str, int] = {}
    pos = 0
    for a in spec.args:
        if a.role in ("in", "inout"):
            t = sample[a.name]
            st = t.untyped_storage()
            if st.data_ptr() not in index:
                index[st.data_ptr()] = len(storages)
                storages.append((pos, st.nbytes()))
                pos = _align(pos + st.nbytes())
            sidx = index[st.data_ptr()]
            storage_of[a.name] = sidx
            off = storages[sidx][0] + t.storage_offset() * t.element_size()
            views[a.name] = View(off, tuple(t.shape), tuple(t.stride()), dtype_name(t.dtype))
    for a in spec.args:
        if a.role in ("out", "scratch"):
            shape = a.concrete_shape(case.dims)
            dt = a.torch_dtype(act)
            n = 1
            for s in shape:
                n *= s
            stride = tuple(int(x) for x in torch.empty(shape, dtype=dt, device="meta").stride())
            views[a.name] = View(pos, tuple(shape), stride, dtype_name(dt))
            pos = _align(pos + n * torch.empty(0, dtype=dt).element_size())
    return Layout(
        calls,
        (pos + PAGE - 1) // PAGE * PAGE,
        tuple(storages),
        views,
        storage_of,
        tuple(a.name for a in spec.args if a.written),
    )


class Arena:
    """The host's view of one side's shared memory (memfd, mapped on both ends)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.fd = os.memfd_create("cacheon-timing", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, max(layout.size, 1))
        # the worker gets this fd: sealed, it can neither shrink the file under the host's mapping
        # (the host's next read of an output was a SIGBUS that killed the validator, red team
        # 2026-12-04) nor grow it
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.map = mmap.mmap(self.fd, max(layout.size, 1))
        self.bytes = torch.frombuffer(self.map, dtype=torch.uint8)

    def tensor(self, i: int, name: str) -> torch.Tensor:
        v = self.layout.views[name]
        dt = dtype_of(v.dtype)
        base = i * self.layout.call_bytes + v.offset
        return torch.empty(0, dtype=dt).set_(self.bytes.untyped_storage(), base // dt.itemsize, v.shape, v.stride)

    def write_inputs(self, i: int, inputs: Mapping[str, torch.Tensor], spec: SlotSpec) -> None:
        """Copy call i's inputs in (byte-exact, views preserved) and poison its outputs/scratch."""
        lay = self.layout
        base = i * lay.call_bytes
        done: set[int] = set()
        for name, sidx in lay.storage_of.items():
            t = inputs[name]
            v = lay.views[name]
            off, nbytes = lay.storages[sidx]
            st = t.untyped_storage()
            if (tuple(t.shape), tuple(t.stride()), dtype_name(t.dtype)) != (
                v.shape,
                v.stride,
                v.dtype,
            ) or st.nbytes() != nbytes:
                raise TimingFailure(f"input generator changed layout of {name} between calls")
            if sidx not in done:
                raw = torch.empty(0, dtype=torch.uint8).set_(st)
                self.bytes[base + off : base + off + nbytes].copy_(raw)
                done.add(sidx)
        for a in spec.args:
            if a.role in ("out", "scratch"):
                t = self.tensor(i, a.name)
                t.fill_(float("nan") if t.is_floating_point() else judge.POISON_INT[0])

    def close(self) -> None:
        del self.bytes
        self.map.close()
        os.close(self.fd)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _proc_stats():  # noqa: ANN202 - yields (pid, the /proc/<pid>/stat fields after the name)
    """Every live process's stat fields (state, ppid, pgrp, ...), skipping those that vanish."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = _read(f"/proc/{entry}/stat")
        except OSError:
            continue
        yield int(entry), stat[stat.rindex(")") + 2 :].split()


def _group_tasks(pgid: int) -> tuple[dict[int, list[str]], list[int]]:
    """Members of process group `pgid` -> state of each of their tasks (threads); and the
    children of members that left the group (setsid): those would run unfrozen, off the clock."""
    out: dict[int, list[str]] = {}
    parents: dict[int, int] = {}
    for pid, fields in _proc_stats():
        if int(fields[2]) != pgid:
            parents[pid] = int(fields[1])
            continue
        out[pid] = _task_states(pid) or [fields[0]]
    return out, sorted(p for p, pp in parents.items() if pp in out)


def _task_states(pid: int | str) -> list[str]:
    """The state letter of every task (thread) of `pid`; [] when it is gone."""
    try:
        return [(s := _read(f"/proc/{pid}/task/{tid}/stat"))[s.rindex(")") + 2] for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _pid_ns(pid: int | str) -> int:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return -1


def _ns_tasks(ns: int) -> dict[int, list[str]]:
    """Every process of pid namespace `ns` (the sandbox's: nothing in it can leave it) -> the
    state of each of its tasks."""
    out: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _pid_ns(entry) == ns and (states := _task_states(entry)):
            out[int(entry)] = states
    return out


def _sandbox_ns(leader: int) -> int | None:
    """The pid namespace of the sandbox under `leader` (the launcher's pid, in ours), or None
    when the child shares ours (weak mode: the process group is then the unit)."""
    own = _pid_ns("self")
    for pid, fields in _proc_stats():
        if int(fields[1]) == leader and _pid_ns(pid) not in (-1, own):
            return _pid_ns(pid)
    return None


def _children_ticks(pid: int) -> int:
    """cutime + cstime of `pid`: CPU of children it has reaped (a fork it hid from our scans)."""
    try:
        s = _read(f"/proc/{pid}/stat")
    except OSError:
        return -1
    f = s[s.rindex(")") + 2 :].split()
    return int(f[13]) + int(f[14])


def _cpu_ns(pid: int) -> int:
    """The kernel's CPU clock of a whole process (all its threads, live and exited)."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | 2)  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
    except OSError:
        return -1


class Side:
    """One sandboxed worker the host times: frozen except while its own batch runs."""

    def __init__(self, name: str, client: WorkerClient, arena: Arena, target: str) -> None:
        self.name = name
        self.client = client
        self.arena = arena
        self.target = target
        proc: subprocess.Popen[bytes] | None = client.proc
        if proc is None:
            raise RuntimeError(f"{name}: timing a worker that was never started")
        self.pgid = proc.pid  # the worker called setsid: its pid is its group
        # behind the sandbox wall the unit is the child's own pid namespace: every process of it
        # (a setsid or double-forked one too) is frozen, scanned and charged
        self.ns = _sandbox_ns(self.pgid)
        self.members: dict[int, int] = {}  # pid -> CPU ns at the last freeze
        self.children = 0  # the leader's reaped children's CPU (clock ticks): must never move
        self.frozen = False

    def _sock(self) -> socket.socket:
        """The worker's socket, looked up each time (the client owns it)."""
        if self.client.sock is None:
            raise RuntimeError(f"{self.name}: the worker's socket is closed")
        return self.client.sock

    def setup(self, spec: SlotSpec, params: Mapping[str, Any], timeout_s: float, target: str | None = None) -> None:
        """Map this side's arena in its worker for `target` (default: the side's own). A second
        target shares the arena: the candidate's worker also runs the reference (case.py says why)."""
        lay = self.arena.layout
        calls = tuple(lay.call_views() for _ in range(lay.calls))
        msg = P.TimedSetup(target or self.target, spec.id, lay.call_bytes, calls, dict(params))
        if self.frozen:  # a second target: the worker must run to map it
            self.thaw()
        sock = self._sock()
        fd = sock.fileno()
        wire.send(fd, P.request(msg), None, time.monotonic() + timeout_s)
        socket.send_fds(sock, [b"M"], [self.arena.fd])
        raw, _ = wire.recv(fd, deadline=time.monotonic() + timeout_s)
        ready = self._reply(raw, P.TimedReady, "timing setup")
        if not ready.ok:
            raise TimingFailure(f"{self.name}: timing setup failed: {ready.reason}: {(ready.error or '')[-300:]}", self.name)
        self.freeze()
        self.snapshot()

    def _signal(self, sig: int) -> None:
        if self.ns is None:
            os.killpg(self.pgid, sig)
            return
        for pid in _ns_tasks(self.ns):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def _tasks(self) -> tuple[dict[int, list[str]], list[int]]:
        return (_ns_tasks(self.ns), []) if self.ns is not None else _group_tasks(self.pgid)

    def freeze(self) -> None:
        self._signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while self.ns is None and _state(self.pgid) not in ("T", "t", "Z", "X", ""):
            if time.monotonic() > deadline:
                raise TimingFailure(f"{self.name}: worker did not stop on SIGSTOP", self.name)
        self.frozen = True

    def thaw(self) -> None:
        self.frozen = False
        self._signal(signal.SIGCONT)

    def snapshot(self) -> int:
        """Confirm every task of every member is stopped; record CPU clocks. Returns the CPU ns
        the group used since the previous snapshot. Fails closed when the group changed: a
        process appeared or vanished, or reaped children (their CPU is not on our clocks)."""
        deadline = time.monotonic() + 2
        while True:
            tasks, escaped = self._tasks()
            if escaped:
                for pid in escaped:  # a group kill would miss them: end them here, by pid
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                raise TimingFailure(
                    f"{self.name}: worker process(es) {escaped} left its process group "
                    "(setsid): they would run unfrozen and off its clock",
                    self.name,
                )
            running = {p: s for p, s in tasks.items() if any(x not in ("T", "t", "Z", "X") for x in s)}
            if not running:
                break
            if time.monotonic() > deadline:
                raise TimingFailure(f"{self.name}: worker processes {sorted(running)} kept running while frozen", self.name)
            time.sleep(0.001)
        if self.members and set(tasks) != set(self.members):
            raise TimingFailure(
                f"{self.name}: worker started or lost processes during timing "
                f"({sorted(self.members)} -> {sorted(tasks)}); the CPU arena times one process",
                self.name,
            )
        children = sum(_children_ticks(p) for p in tasks) if self.ns is not None else _children_ticks(self.pgid)
        if self.members and children != self.children:
            raise TimingFailure(
                f"{self.name}: worker ran child processes during timing (their CPU is off its clock)", self.name
            )
        now = {p: _cpu_ns(p) for p in tasks}
        used = sum(max(0, c - self.members.get(p, 0)) for p, c in now.items() if c >= 0)
        self.members = now
        self.children = children
        return used

    def idle_cpu(self) -> int:
        """CPU ns the frozen side's known members used since the last reading (must be 0: they
        were all confirmed stopped, and only their own batch thaws them). No /proc scan: a
        stopped group cannot start processes; the full snapshot runs at its own batches."""
        now = {p: _cpu_ns(p) for p in self.members}
        used = sum(max(0, c - self.members[p]) for p, c in now.items() if c >= 0)
        self.members = {p: c if c >= 0 else self.members[p] for p, c in now.items()}
        return used

    def run_batch(self, calls: int, timeout_s: float, target: str | None = None) -> tuple[int, int]:
        """One timed batch: (wall ns, CPU ns) on the host's clock and the kernel's accounting."""
        fd = self._sock().fileno()
        deadline = time.monotonic() + timeout_s
        t0 = time.perf_counter_ns()
        self.thaw()
        wire.send(fd, P.request(P.TimedRun(calls, target or self.target)), None, deadline)
        raw, _ = wire.recv(fd, max_bytes=1 << 16, deadline=deadline)
        self.freeze()
        t1 = time.perf_counter_ns()
        cpu = self.snapshot()
        done = self._reply(raw, P.TimedDone, "timed run")
        if not done.ok:
            raise TimingFailure(f"{self.name}: timed run failed: {done.reason}: {(done.error or '')[-300:]}", self.name)
        return t1 - t0, cpu

    def _reply(self, raw: object, kind: type[P.T], what: str) -> P.T:
        """The side's reply through the pipe's strict decoder (verify/protocol.py): a malformed one
        ends the verdict charged to this side, as any broken reply of its worker does."""
        try:
            return P.read_reply(raw, kind)
        except P.ProtocolError as e:
            raise TimingFailure(f"{self.name}: {what} reply refused: {e}"[:600], self.name) from None

    def release(self) -> None:
        """Thaw (so the worker can take the next case or exit) and unmap the host's side."""
        try:
            if self.frozen:
                self.thaw()
        except ProcessLookupError:
            pass
        self.arena.close()


def _state(pid: int) -> str:
    try:
        s = _read(f"/proc/{pid}/stat")
    except OSError:
        return ""
    return s[s.rindex(")") + 2]


SAMPLE = 4096  # elements per written output checked on every call (full check: one call per batch)


def judge_call(
    spec: SlotSpec,
    act: str,
    arena: Arena,
    i: int,
    inputs: Mapping[str, torch.Tensor],
    ref: Mapping[str, torch.Tensor],
    full: bool,
    gen: torch.Generator,
) -> Failure | None:
    """Call i's outputs (read from the frozen side's memory) against the host's reference.

    `full`: the verify judgement (every element, inputs untouched). Otherwise: finiteness
    (poison left by a skipped call is NaN) and the slot's element-wise tolerance on SAMPLE
    positions drawn from the host's secret generator after the batch ran.
    A stale, replayed or memoised output differs almost everywhere: one call in any batch
    that is not freshly computed fails with overwhelming probability."""
    got = {name: arena.tensor(i, name) for name in arena.layout.written}
    if full or spec.canonicalize is not None:
        got = {k: v.clone() for k, v in got.items()}
        for a in spec.by_role("in"):
            if not judge.same_bits(arena.tensor(i, a.name), inputs[a.name]):
                return Failure("input_mutated", f"{a.name} changed but the slot declares it read-only")
        return judge.check_outputs(spec, act, {**inputs, **got}, ref)
    for name, expected in ref.items():
        flat_o, flat_r = got[name].reshape(-1), expected.reshape(-1)
        idx = torch.randint(0, max(1, flat_o.numel()), (min(SAMPLE, flat_o.numel()),), generator=gen)
        o, r = flat_o[idx], flat_r[idx]
        if o.is_floating_point() and not bool(torch.isfinite(o).all()):
            return Failure("nan_inf", f"{name}: NaN/Inf at sampled positions (poison left by a call that did not write?)")
        tol = spec.tolerance(name, act)
        if tol.exact or not r.is_floating_point():
            bad = int((o.to(torch.int64) != r.to(torch.int64)).sum())
        else:
            o64, r64 = o.to(torch.float64), r.to(torch.float64)
            bad = int(((o64 - r64).abs() > tol.atol + tol.rtol * r64.abs()).sum())
        allowed = (1.0 - tol.min_matched) * len(idx)
        if bad > allowed + 4.0 * (allowed**0.5) + (1 if allowed else 0):
            return Failure(
                "mismatch",
                f"{name}: {bad} of {len(idx)} sampled elements outside tolerance (atol {tol.atol}, rtol {tol.rtol})",
            )
    return None
