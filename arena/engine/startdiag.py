"""Where an engine start's time goes, as the driver (arena/engine/child.py) sees it.

ADVISORY ONLY. The driver runs as the same uid as the scheduler ranks that import contribution
code, and everything measured here (cache dir contents, /proc of its descendants) is something
those ranks can shape. So nothing here is ever read by a verdict: it travels in the "started"
record's "diag" field (and a one-line summary in the engine log) for a human who asks why a
start took 80 s instead of 35 s. Bounded in size and cheap: a few directory walks before and
after the start, and one /proc scan every SAMPLE_S while Engine() is being constructed.

What it answers:
  caches   -- files in each private JIT cache (and HOME, TMPDIR) before and after the start:
              `new` files are what was compiled despite the seeds, `changed` are same-named files
              rewritten (a rebuild the host's new-files-only copy-back never sees), `top` names
              the first path components that got them (a tvm-ffi build dir, a Triton hash dir,
              FlashInfer's .cache/flashinfer, a HOME subdir such as .nv that no seed covers);
  tools    -- compiler processes seen among the driver's descendants (nvcc, ptxas, ninja, cc1plus,
              gcc ...): how many, for about how long, first and last seen (seconds after start);
  procs    -- the descendants' CPU seconds by name (the scheduler, the detokenizer) against the
              start's wall time: CPU-bound (compiling, importing) or waiting (locks, GPU, sockets);
  env_seen -- cache variables of a descendant (the scheduler rank) that differ from the driver's:
              a cache dir that does not reach the process that compiles;
  status   -- this process's seccomp mode and speculation mitigations (a seccomp filter turns SSBD
              on under `spec_store_bypass_disable=seccomp`, slowing every CPU-bound phase), CPUs.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from typing import Any

from arena.engine.home import CACHE_KEYS

SAMPLE_S = 0.5
MAX_FILES = 50_000  # per watched dir: a walk never costs more than this
TOP = 8
WATCHED = CACHE_KEYS + ("HOME", "TMPDIR")  # every seeded cache (arena.engine.home.JIT_CACHES), and two no seed covers
# variables a compiling process reads; a descendant that sees another value than the driver is reported
ENV_KEYS = WATCHED + (
    "CUDA_CACHE_PATH",
    "SGLANG_CACHE_DIR",
    "SGLANG_DG_CACHE_DIR",
    "TRITON_HOME",
    "CUDA_MODULE_LOADING",
    "TORCHINDUCTOR_COMPILE_THREADS",
    "MAX_JOBS",
)
TOOLS = frozenset(
    (
        "nvcc",
        "cicc",
        "ptxas",
        "fatbinary",
        "nvlink",
        "cudafe++",
        "ninja",
        "cc1plus",
        "cc1",
        "gcc",
        "g++",
        "c++",
        "cc",
        "ld",
        "collect2",
        "as",
        "ldconfig",
        "nvidia-smi",
    )
)
STATUS_KEYS = ("Seccomp", "NoNewPrivs", "Speculation_Store_Bypass", "SpeculationIndirectBranch", "Cpus_allowed_list")


def snapshot(root: str | None) -> dict[str, tuple[int, int]] | None:
    """relative path -> (size, mtime ns) of every regular file under root (None: no such dir)."""
    if not root or not os.path.isdir(root):
        return None
    out: dict[str, tuple[int, int]] = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not os.path.islink(os.path.join(d, x))]
        for f in files:
            p = os.path.join(d, f)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
            if len(out) >= MAX_FILES:
                return out
    return out


def _top(paths: list[str]) -> dict[str, int]:
    """Counts by the first path component (two for a dot-dir like .cache/x or .nv/x)."""

    def head(p: str) -> str:
        parts = p.split(os.sep)
        n = 2 if parts[0].startswith(".") and len(parts) > 2 else 1
        return os.sep.join(parts[:n])[:120]

    return dict(Counter(head(p) for p in paths).most_common(TOP))


def diff(before: dict[str, tuple[int, int]] | None, after: dict[str, tuple[int, int]] | None) -> dict[str, Any]:
    b, a = before or {}, after or {}
    new = [p for p in a if p not in b]
    changed = [p for p in a if p in b and a[p] != b[p]]
    out: dict[str, Any] = {
        "before": len(b),
        "after": len(a),
        "new": len(new),
        "changed": len(changed),
        "removed": sum(1 for p in b if p not in a),
        "new_bytes": sum(a[p][0] for p in new),
    }
    if before is None and after is None:
        out["missing"] = True
    if len(a) >= MAX_FILES or len(b) >= MAX_FILES:
        out["truncated"] = True
    if new:
        out["top_new"] = _top(new)
    if changed:
        out["top_changed"] = _top(changed)
    return out


def read_status(pid: int | str = "self") -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    got = dict(ln.split(":", 1) for ln in lines if ":" in ln)
    return {k: got[k].strip()[:80] for k in STATUS_KEYS if k in got}


def _stat(pid: str) -> tuple[str, int, float] | None:
    """(comm, ppid, cpu seconds) from /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    lp, rp = raw.find("("), raw.rfind(")")
    fields = raw[rp + 2 :].split()
    try:
        return raw[lp + 1 : rp], int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS
    except (IndexError, ValueError):
        return None


_TICKS = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def _environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    pairs = (kv.split(b"=", 1) for kv in raw.split(b"\0") if b"=" in kv)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


class ProcSampler(threading.Thread):
    """Scans /proc every SAMPLE_S for descendants of `root`: compiler tools (count, time seen) and
    the CPU seconds of every other descendant, by name; the environment of the first ones."""

    def __init__(self, root: int | None = None, interval: float = SAMPLE_S) -> None:
        super().__init__(daemon=True, name="start-diag")
        self.root, self.interval = root or os.getpid(), interval
        self.t0 = time.monotonic()
        self._halt = threading.Event()
        self.tools: dict[str, dict[str, Any]] = {}
        self._tool_pids: dict[str, set[int]] = {}
        self.cpu: dict[int, tuple[str, float]] = {}  # pid -> (name, cpu s at last sight)
        self.env_seen: dict[str, dict[str, str]] = {}  # descendant name -> differing cache variables
        self._env_checked: set[int] = set()
        self.scans = 0

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            self.scan()

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(timeout=5)
        self.scan()  # the last picture: CPU of every descendant still alive now

    def scan(self) -> None:
        self.scans += 1
        now = round(time.monotonic() - self.t0, 1)
        try:
            pids = [p for p in os.listdir("/proc") if p.isdigit()]
        except OSError:
            return
        info: dict[int, tuple[str, int, float]] = {}
        for p in pids:
            s = _stat(p)
            if s:
                info[int(p)] = s
        mine = {self.root}
        grew = True
        while grew:  # descendants: follow ppid links until nothing new joins
            grew = False
            for pid, (_, ppid, _) in info.items():
                if ppid in mine and pid not in mine:
                    mine.add(pid)
                    grew = True
        mine.discard(self.root)
        for pid in mine:
            name, _, cpu = info[pid]
            if name in TOOLS:
                t = self.tools.setdefault(name, {"procs": 0, "seen_s": 0.0, "first_s": now, "last_s": now})
                seen = self._tool_pids.setdefault(name, set())
                if pid not in seen:
                    seen.add(pid)
                    t["procs"] += 1
                t["seen_s"] = round(t["seen_s"] + self.interval, 1)
                t["last_s"] = now
            else:
                self.cpu[pid] = (name, cpu)
                if pid not in self._env_checked and len(self._env_checked) < 16:
                    self._env_checked.add(pid)
                    self._check_env(pid, name)

    def _check_env(self, pid: int, name: str) -> None:
        env = _environ(pid)
        if not env:
            return
        odd = {k: env.get(k, "<unset>")[:200] for k in ENV_KEYS if env.get(k) != os.environ.get(k)}
        if odd and name not in self.env_seen:
            self.env_seen[name[:40]] = odd

    def summary(self) -> dict[str, Any]:
        by_name: dict[str, float] = {}  # CPU seconds: a Counter holds ints
        for name, cpu in self.cpu.values():
            by_name[name[:40]] = by_name.get(name[:40], 0.0) + cpu
        return {
            "tools": dict(sorted(self.tools.items())),
            "procs": {k: round(v, 1) for k, v in sorted(by_name.items(), key=lambda kv: kv[1], reverse=True)[:TOP]},
            "env_seen": self.env_seen,
            "scans": self.scans,
        }


class StartDiag:
    """Before/after pictures around one engine start; `phase()` marks named phases' seconds."""

    def __init__(self, sample: bool = True) -> None:
        self.t0 = time.perf_counter()
        self.phases: dict[str, float] = {}
        self.dirs = {k: os.environ.get(k) for k in WATCHED}
        self.before = {k: snapshot(d) for k, d in self.dirs.items()}
        self.cpu0 = os.times()
        self.load0 = _loadavg()
        self.sampler = ProcSampler() if sample else None
        if self.sampler:
            self.sampler.start()
        self._mark = time.perf_counter()

    def phase(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = round(now - self._mark, 2)
        self._mark = now

    def finish(self) -> dict[str, Any]:
        """The advisory breakdown (never raises: a diagnostic must not fail a start)."""
        try:
            return self._finish()
        except Exception as e:  # noqa: BLE001
            return {"advisory": True, "error": f"{type(e).__name__}: {e}"[:300]}

    def _finish(self) -> dict[str, Any]:
        wall = time.perf_counter() - self.t0
        samp: dict[str, Any] = {}
        if self.sampler:
            self.sampler.stop()
            samp = self.sampler.summary()
        cpu = os.times()
        out: dict[str, Any] = {
            "advisory": True,
            "wall_s": round(wall, 2),
            "phases": self.phases,
            "driver_cpu_s": round(cpu.user + cpu.system - self.cpu0.user - self.cpu0.system, 2),
            "caches": {k: {"path": (d or "")[:200], **diff(self.before[k], snapshot(d))} for k, d in self.dirs.items()},
            "status": read_status(),
            "cpus": os.cpu_count(),
            "load": [self.load0, _loadavg()],
        }
        try:
            out["affinity"] = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            pass
        out.update(samp)
        return out


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def one_line(diag: dict[str, Any]) -> str:
    """The engine log's summary of a diag (the log comes back even when the records do not)."""
    caches = ", ".join(
        f"{k}: +{c.get('new', 0)} new ~{c.get('changed', 0)} changed of {c.get('before', 0)}"
        for k, c in (diag.get("caches") or {}).items()
    )
    tools = ", ".join(f"{k} x{t['procs']} ~{t['seen_s']} s" for k, t in (diag.get("tools") or {}).items()) or "none"
    return (
        f"cacheon start diag (advisory): wall {diag.get('wall_s')} s, phases {diag.get('phases')}; caches {caches}; "
        f"compilers {tools}; cpu by process {diag.get('procs')}; env differs {diag.get('env_seen') or 'nowhere'}; "
        f"status {diag.get('status')}"
    )


def brief(startup: Any, host_timing: Any = None) -> str:
    """One line for `cacheon arena warm|run`: the host's own step times (trusted), then the
    driver's advisory diag from the "started" record in `startup` (records or their JSON)."""
    parts = []
    h = dict(host_timing or {})
    if h:
        parts.append("host " + ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v} s" for k, v in h.items()))
    started = next((r for r in startup or () if isinstance(r, dict) and r.get("op") == "started"), None)
    d = (started or {}).get("diag")
    if isinstance(d, dict) and "phases" in d:
        ph = ", ".join(f"{k.removesuffix('_s')} {v} s" for k, v in (d.get("phases") or {}).items())
        hot = []
        for k, c in (d.get("caches") or {}).items():
            if isinstance(c, dict) and (c.get("new") or c.get("changed")):
                where = {**(c.get("top_new") or {}), **(c.get("top_changed") or {})}
                hot.append(f"{k} +{c.get('new')}/~{c.get('changed')} ({', '.join(list(where)[:3])})")
        tools = ", ".join(f"{k} x{t['procs']} ~{t['seen_s']} s" for k, t in (d.get("tools") or {}).items())
        parts.append(
            f"driver (advisory) {ph}; written at start: {'; '.join(hot) or 'nothing'}; "
            f"compilers: {tools or 'none'}; cpu s {d.get('procs')}"
        )
    elif isinstance(d, dict):
        parts.append(f"driver diag: {d.get('error')}")
    return " | ".join(parts)
