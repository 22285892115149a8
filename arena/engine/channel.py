"""The host's side of the driver's record pipe: nonces in, validated records out.

Why: a step record decides a verdict (its window's throughput, its clock, its outputs), and the
engine's scheduler ranks import the bundle. So records travel only over a pipe the host created
for this engine (arena/engine/host.py), and each carries a nonce the host drew for it and sent only to
the driver (over another pipe): a step's record its step's nonce, every other record the next
lifecycle nonce. The host accepts a record only with the expected nonce in the expected order,
for the step it belongs to. Forging (FAIL) and faults (NO_DECISION) are kept apart:
  forging: a complete line that is not JSON, a missing or unknown nonce, a nonce used twice, a
    record out of order or for the wrong step, anything after the final record, RPC answers that
    do not echo the nonces the host issued for the step, a record that is not what its kind says
    (arena/engine/protocol.py: a field unknown, missing, mistyped, non-finite or oversized), the
    driver's own "forgery" error;
  fault: the stream ends early (crash, kill, timeout) or its last line is cut short.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from arena.engine import protocol as P

LIFECYCLE = 12  # checkpoint, started, snapshot, outputs_ready, sample, done/error: ample
TERMINAL = (P.Done, P.Error)
LIFECYCLE_KINDS = (P.Checkpoint, P.Started, P.Snapshot, P.OutputsReady, P.Sample, *TERMINAL)
# steps whose record carries nonce-bound rank answers (install/remove/state: arena/engine/resident_timed.py)
RPC_STEPS = (P.StepOp.GENERATE, P.StepOp.ROUTE, P.StepOp.INSTALL, P.StepOp.REMOVE, P.StepOp.STATE)


def nonce() -> str:
    return secrets.token_hex(16)


def seal(job: dict[str, Any], answers: bool) -> dict[str, Any]:
    """The job with the host's fresh nonces: one per step, one per RPC, the lifecycle list."""
    steps = []
    for s in job["steps"]:
        s = dict(s, nonce=nonce())
        if answers and s["op"] in RPC_STEPS:
            s["rpc"] = [nonce() for _ in range(2 if s["op"] == "generate" else 1)]
        if s.get("gate"):  # the host's go/stop after this step must echo it (arena/verdict/sequential.py)
            s["gate_nonce"] = nonce()
        steps.append(s)
    out = dict(job, steps=steps, lifecycle_nonces=[nonce() for _ in range(LIFECYCLE)], sample_nonce=nonce())
    if answers:
        out["start_rpc"] = nonce()
    return out


# The longest line the driver ever writes is an outputs record (tokens of a window's prompts):
# kilobytes. The host stops reading a stream at this, so one line cannot take its memory.
MAX_RECORD_BYTES = 64 << 20


@dataclass
class RecordStream:
    """Validates the driver's records as they arrive; `forgery` names the first violation."""

    job: dict[str, Any]
    ranks: tuple[int, ...] = ()
    records: list[dict[str, Any]] = field(default_factory=list)
    forgery: str | None = None
    truncated: bool = False
    _step: int = 0
    stopped_after: int | None = None  # the host told the driver to stop after this step (sequential test)
    _life: int = 0
    _seen: set[str] = field(default_factory=set)
    _ended: bool = False

    def __post_init__(self) -> None:
        self._steps = {s["nonce"]: i for i, s in enumerate(self.job["steps"])}
        self._lifes = {n: i for i, n in enumerate(self.job["lifecycle_nonces"])}
        self._rpcs = {n for s in self.job["steps"] for n in s.get("rpc", [])} | {self.job.get("sample_nonce")}
        self._rpcs |= {s["gate_nonce"] for s in self.job["steps"] if s.get("gate_nonce")}
        if self.job.get("start_rpc"):
            self._rpcs.add(self.job["start_rpc"])

    def stop(self) -> None:
        """The host stopped the run after the last accepted step: any later step record is forging,
        but for the post-condition steps ("post": a resident timed engine's), which run next."""
        self.stopped_after = self._step - 1
        post = [i for i, s in enumerate(self.job["steps"]) if i >= self._step and s.get("post")]
        self._step = post[0] if post else self._step

    def oversized(self, size: int) -> None:
        """A line longer than any record the driver writes: the host stops reading (forging)."""
        self._forged(f"a record line over {MAX_RECORD_BYTES >> 20} MiB ({size} bytes without a newline)")

    def _forged(self, why: str) -> None:
        if self.forgery is None:
            self.forgery = why

    def feed(self, line: bytes) -> dict[str, Any] | None:
        """One complete line; returns the record if accepted."""
        if self.forgery:
            return None
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):  # nested past the parser's depth: not a driver's record
            self._forged(f"record {len(self.records) + 1} is not JSON: {line[:80]!r}")
            return None
        if not isinstance(rec, dict):
            self._forged(f"record {len(self.records) + 1} is not an object: {line[:80]!r}")
            return None
        why = self._check(rec)
        if why:
            self._forged(
                f"{why} (record {len(self.records) + 1}, op {str(rec.get('op'))[:20]!r}, step {str(rec.get('step'))[:40]!r})"
            )
            return None
        self.records.append(rec)
        return rec

    def _check(self, rec: dict[str, Any]) -> str | None:
        n = rec.get("nonce")
        if self._ended:
            return "a record after the final one"
        if not isinstance(n, str) or not n:
            return "a record without a nonce"
        if n in self._seen:
            return f"nonce {n[:8]}… used twice (a duplicated record)"
        if n in self._rpcs:
            return f"nonce {n[:8]}… is an RPC nonce, not a record's"
        if n not in self._steps and n not in self._lifes:
            return f"unknown nonce {n[:12]!r} (not issued by the host)"
        try:
            typed = P.read_record(rec)  # every field of its kind, typed and bounded (arena/engine/protocol.py)
        except P.ProtocolError as e:
            return str(e)
        if n in self._steps:
            i = self._steps[n]
            if self.stopped_after is not None and i > self.stopped_after and not self.job["steps"][i].get("post"):
                return f"the record of step {i} after the host stopped the run at step {self.stopped_after}"
            if i != self._step:
                return f"the record of step {i} arrived where step {self._step} was due (out of order)"
            step = self.job["steps"][i]
            if typed.TAG != step["op"] or typed.step != step.get("tag", step["op"]):
                return f"nonce of step {i} ({step.get('tag')}) on a record for {rec.get('step')!r}"
            why = self._answers(getattr(typed, "answers", None), step)
            if why:
                return why
            self._step += 1
        else:
            if self._lifes[n] != self._life:
                return f"lifecycle record {self._lifes[n]} arrived where {self._life} was due (out of order)"
            if not isinstance(typed, LIFECYCLE_KINDS):
                return f"a {str(rec.get('op'))[:20]!r} record carrying a lifecycle nonce"
            if isinstance(typed, P.Snapshot):
                why = self._echo((typed.answers or {}).get("start"), self.job.get("start_rpc"), "start")
                if why:
                    return why
            self._life += 1
        self._seen.add(n)
        if isinstance(typed, TERMINAL):
            self._ended = True
        if isinstance(typed, P.Error) and typed.kind == P.ErrorKind.FORGERY:
            self._forged("the driver caught forging: " + str(typed.error)[:600])
        return None

    def _answers(self, answers: P.Answers | None, step: dict[str, Any]) -> str | None:
        rpc = step.get("rpc")
        if not rpc:
            return "RPC answers on a step the host sent no RPC nonce for" if answers else None
        ans = answers or {}
        names = ("before", "after") if step["op"] == "generate" else (step["op"],)
        for name, want in zip(names, rpc):
            why = self._echo(ans.get(name), want, f"{step.get('tag')}/{name}")
            if why:
                return why
        return None

    def _echo(self, by_rank: Any, want: str | None, what: str) -> str | None:
        if not self.ranks:
            return None
        if not isinstance(by_rank, dict) or sorted(by_rank) != sorted(str(r) for r in self.ranks):
            return (
                f"answers to {what} from ranks {sorted(by_rank) if isinstance(by_rank, dict) else by_rank}, "
                f"expected {list(self.ranks)}"
            )
        for r, a in by_rank.items():
            if not isinstance(a, dict) or a.get("nonce") != want:
                return f"rank {r}'s answer to {what} does not echo the host's nonce"
        return None

    def finish(self, tail: bytes) -> None:
        """End of stream: a cut-short last line is a fault (a kill mid-write), not forging."""
        self.truncated = bool(tail.strip())
