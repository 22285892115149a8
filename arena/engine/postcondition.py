"""What must hold after every contribution a resident timed engine ran, before it runs another
(issue 30 item 4; docs/arena.md "Resident timed engine").

Why: the next contribution's verdict is measured in this engine. So after each one the host
requires, from nonce-bound answers of every rank and from its own view of the engine's processes
and dirs:
  - the stock canary window (fixed prompts, after the removal): greedy tokens, logprobs and top-k
    equal to the engine's first canary, bit for bit;
  - a SHA-256 of every parameter and buffer equal to the engine's first reading, per rank;
  - nothing of any contribution left in the rank: no sealed module in sys.modules, no object of
    one alive (weak references taken at install, after a full collection), no thread running its
    code, no path entry or open file into the trees, an empty registry on the stock route;
  - nothing of the contribution left on the host's side of the wall: no engine process holding a
    file of its answers dir or tree open, nothing but the expected entries in the answers root and
    the trees dir; the JIT cache files its job added are deleted (Triton keys are salted by
    package, cacheon_subnet/bundle/jitkeys.py, so those files could never be picked by another
    contribution's kernel; deleting them bounds what stays on disk).
Any difference restarts the engine, and the verdict in flight becomes NO_DECISION (arena/run.py):
never a FAIL charged to the next contribution.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

POST_TAGS = ("post-remove", "post-canary", "post-state")
CANARY_SALT = 999331  # the canary's prompts: never a window's (arena/jobs.py seeds)
CANARY_PROMPTS = 8


@dataclass(frozen=True)
class PostCondition:
    """The outcome of the checks after one contribution (ok: the engine may run the next one)."""

    ok: bool
    reasons: tuple[str, ...] = ()
    job: int = 0  # the engine's contribution count (1: its first)
    reused: bool = False  # an earlier contribution ran in this engine
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons[:4])

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "reasons": list(self.reasons),
            "job": self.job,
            "reused": self.reused,
            "detail": dict(self.detail),
        }


def canary_step(cfg: Any) -> dict[str, Any]:
    """Fixed prompts on the stock route, the same every time (so the same for every engine of the arena)."""
    from arena.jobs import prompt_spec

    w = cfg.workload
    return {
        "op": "canary",
        "tag": "post-canary",
        "post": True,
        "top_k": max(1, cfg.quality.top_k),
        "max_new_tokens": w.output_len,
        "prompts": prompt_spec(cfg, w.seed + CANARY_SALT, min(CANARY_PROMPTS, w.prompts_per_window), w.input_len),
    }


def post_steps(cfg: Any) -> list[dict[str, Any]]:
    """After a contribution: take it out, the canary, the state (digest and leftovers)."""
    return [
        {"op": "remove", "tag": "post-remove", "post": True},
        canary_step(cfg),
        {"op": "state", "tag": "post-state", "post": True},
    ]


def _answers(run: Any, tag: str, name: str) -> dict[str, Any] | None:
    try:
        return dict((run.step(tag).get("answers") or {}).get(name) or {})
    except KeyError:
        return None


def reading(run: Any) -> dict[str, Any] | None:
    """(canary outputs, per-rank digest) of a run that ended with the post steps; None if missing."""
    state = _answers(run, "post-state", "state")
    try:
        canary = run.step("post-canary").get("outputs")
    except KeyError:
        return None
    if not state or canary is None:
        return None
    return {"canary": canary, "digest": {r: a.get("digest") for r, a in state.items()}}


LEFT_EMPTY = ("modules", "alive", "frames", "sys_path", "fds")


def _sample(v: Any) -> Any:
    """The first few of a reported list; anything else (a key the rank left out: None) as it is."""
    return list(v)[:4] if isinstance(v, (list, tuple)) else v


def leftovers(rank: str, left: Any, where: str) -> list[str]:
    """What a rank says is left of any contribution (all empty, the registry empty on stock)."""
    if not isinstance(left, dict):
        return [f"rank {rank}: no leftovers report after {where}"]
    out = [
        f"rank {rank}: {k} of a contribution still there after {where}: {_sample(left.get(k))}"
        for k in LEFT_EMPTY
        if left.get(k) != []
    ]
    reg = left.get("registry") or {}
    if reg.get("candidates") != 0 or reg.get("route") != "stock" or reg.get("enabled") is not True:
        out.append(f"rank {rank}: the registry after {where} is {reg} (expected enabled, route stock, no candidate)")
    if left.get("watched") != 0 or left.get("installed") is not False:
        out.append(f"rank {rank}: the static-input watch or the install is not cleared after {where}")
    return out


def check(run: Any, reference: Mapping[str, Any], ranks: Iterable[int]) -> list[str]:
    """Why the engine may not run another contribution after `run` (empty: it may)."""
    now = reading(run)
    if now is None:
        return ["the post-condition steps did not all report (remove, canary, state)"]
    why: list[str] = []
    if now["canary"] != reference["canary"]:
        first = next((i for i, (a, b) in enumerate(zip(now["canary"], reference["canary"])) if a != b), None)
        why.append(
            f"the stock canary window differs from the engine's first canary (sequence {first}): the engine's outputs moved"
        )
    for r in sorted(str(x) for x in ranks):
        if not now["digest"].get(r) or now["digest"].get(r) != reference["digest"].get(r):
            why.append(f"rank {r}: the weights and buffers digest differs from the engine's first reading")
        for tag, name in (("post-remove", "remove"), ("post-state", "state")):
            ans = (_answers(run, tag, name) or {}).get(r)
            why += leftovers(r, (ans or {}).get("left"), name)
    return why


def open_under(pids: Iterable[int], roots: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Files under `roots` that the engine's processes hold open (read by the host in /proc)."""
    prefixes = [os.fspath(r).rstrip(os.sep) for r in roots]
    out = []
    for pid in pids:
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in names:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if any(target == p or target.startswith(p + os.sep) for p in prefixes):
                out.append(f"pid {pid} fd {fd}: {target}")
    return out


def files_of(dirs: Mapping[str, str]) -> set[str]:
    """Every regular file (and link) under the cache dirs, as absolute paths; links never followed."""
    out: set[str] = set()
    for d in dirs.values():
        for root, subdirs, files in os.walk(d):
            out.update(os.path.join(root, f) for f in files)
            out.update(os.path.join(root, s) for s in subdirs if os.path.islink(os.path.join(root, s)))
    return out


def sweep(dirs: Mapping[str, str], before: set[str]) -> tuple[int, set[str]]:
    """Delete what a job added to the engine's private JIT caches; returns (deleted, files now)."""
    now = files_of(dirs)
    gone = 0
    for p in sorted(now - before):
        try:
            os.unlink(p)
            gone += 1
        except OSError:
            continue
    return gone, now & before


def listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every entry under `root` with its size and mtime (links not followed): what a dir holds."""
    out: dict[str, tuple[int, int]] = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


def unexpected(root: Path, expected: Iterable[str]) -> list[str]:
    """Entries of a host-owned dir the engine's view holds that the host did not put there."""
    try:
        names = sorted(os.listdir(root))
    except OSError as e:
        return [f"{root}: {e.strerror}"]
    return [n for n in names if n not in set(expected)]
