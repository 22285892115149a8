"""Every message between the arena host and its engine driver (arena/engine/child.py).

Why one module: a contribution runs inside the engine's scheduler ranks, and what they make
(rank answers, token ids, logprobs, clock readings) reaches the host inside the driver's records.
`RECORDS.decode` is the host's check of the record pipe (arena/engine/channel.py runs it on every
record whose nonce and place it accepted): an unknown op, an unknown field, a wrong type (a bool
is not an int), a non-finite figure where the driver only writes finite ones, an oversized string
or list is a `ProtocolError`, a ForgeryError naming the record and the field (the candidate's
FAIL, as any record the driver did not write). The driver reads the host's control lines with
`read_gate`, `read_sample` and `read_next` (anything else on its job pipe is forging too). The
wire stays JSON lines, byte for byte as before: the driver writes its records as dicts, and
verdicts read them as such (EngineRun.records).

Job pipe (host -> driver): the sealed job (arena/engine/channel.py `seal`), one JSON line; its
steps are
  {"op": "generate", "tag", "nonce", "rpc": [before, after], "prompts": {...}, "max_new_tokens",
   "top_k", "keep": bool}  -- every generate step reaches the engine in the same form; "keep"
   (driver-only) keeps its outputs for the host's after-the-fact quality sample
  {"op": "route", "route", "epoch", "tag", "nonce", "rpc": [n]}      -> Engine.collective_rpc
  {"op": "teacher", "tag", "nonce", "sequences": [{"key", "prompt", "cont"}], "top_k"}
  {"op": "install", "env", "rpc": [n]} / {"op": "remove"} / {"op": "state"}   a resident timed engine
      (arena/engine/resident_timed.py, seams/resident.py): a contribution in and out of the ranks, and
      what is left of it; {"op": "canary", "prompts", "max_new_tokens", "top_k"}: fixed prompts on
      the stock route, every output returned. A step with "post" runs even after a gate's stop.
Then, as the run asks for them: `GateAnswer` after a step with "gate" ({"nonce": <its gate nonce>,
"go": bool}; on false no further step runs), `SampleRequest` after the "outputs_ready" record
({"sample": {tag: [keys]}, "nonce": <sample nonce>}: record "sample" returns exactly those), and,
for a job with "serve" (arena/engine/resident.py), `ServeLine` after "done" ({"nonce": <serve>,
"job": {...}}: the next job in the same engine, or {"nonce": <serve>, "stop": true}).

Record pipe (driver -> host): one JSON line per record, `op` naming its kind; every record carries
"nonce" (its step's, or the next lifecycle nonce) and "t", a step's record also "step" (its tag).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

from cacheon_subnet import msgcodec
from cacheon_subnet.msgcodec import Document, Family, Json, Reading, absent, bound
from seams.answers import ForgeryError

T = TypeVar("T")
NONCE_CHARS = 64  # the host's nonces are 32 hex digits
NAME_CHARS = 256  # tags, routes, ops


class ProtocolError(ForgeryError):
    """A message that is not what its kind says: forging, as any record the driver did not write.
    `kind` names the record or line, `field` the field."""

    def __init__(self, kind: str, field: str, detail: str) -> None:
        self.kind, self.field, self.detail = kind, field, detail
        super().__init__(f"{kind} message, field {field}: {detail}")


class StepOp(StrEnum):
    GENERATE = "generate"
    ROUTE = "route"
    TEACHER = "teacher"
    INSTALL = "install"
    REMOVE = "remove"
    STATE = "state"
    CANARY = "canary"


class ErrorKind(StrEnum):
    """Why a run ended in an error record (arena/verdict/outcome.py maps each to a verdict)."""

    ABI = "abi"
    EVIDENCE = "evidence"
    FORGERY = "forgery"
    ARENA_GAP = "arena-gap"
    ENGINE = "engine"
    HARDEN = "harden"
    CANARY = "canary"  # added by the host (arena/engine/resident.py), never sent


Answers = Mapping[str, Mapping[str, Json]]  # rpc name -> rank -> its answer (seams/answers.py)
Pairs = tuple[tuple[Reading, ...], ...]  # [token id, logprob] per position


# -- records (driver -> host) ----------------------------------------------------------------


@dataclass(frozen=True)
class Output:
    """What quality grading needs of one output (`compact`)."""

    cont: tuple[int, ...]
    logprobs: Pairs | None = absent()
    top: tuple[Pairs, ...] | None = absent()


@dataclass(frozen=True)
class KeptSequence:
    key: int
    prompt: tuple[int, ...]
    cont: tuple[int, ...]
    logprobs: Pairs | None = absent()
    top: tuple[Pairs, ...] | None = absent()


@dataclass(frozen=True)
class Graded:
    key: int | str  # a canary's keys are "canary-<i>"
    tokens: Pairs
    top: tuple[Pairs, ...]


@dataclass(frozen=True)
class Record:
    """What every record carries: its nonce (required), its time and, for a step, its tag."""

    TAG: ClassVar[str] = ""
    nonce: str = field(metadata=bound(NONCE_CHARS))
    t: float | None = absent()
    step: str | None = absent(NAME_CHARS)


@dataclass(frozen=True)
class Checkpoint(Record):
    TAG: ClassVar[str] = "checkpoint"
    path: str | None = absent()
    recipe_digest: str | None = absent(NAME_CHARS)
    n_params: int | None = absent()
    s: float | None = absent()


@dataclass(frozen=True)
class Started(Record):
    TAG: ClassVar[str] = "started"
    s: float | None = absent()
    pid: int | None = absent()
    visible_devices: str | None = absent(NAME_CHARS)
    diag: Json | None = absent()  # advisory (arena/engine/startdiag.py): no verdict reads it


@dataclass(frozen=True)
class Snapshot(Record):
    TAG: ClassVar[str] = "snapshot"
    answers: Answers | None = absent()


@dataclass(frozen=True)
class Generate(Record):
    TAG: ClassVar[str] = "generate"
    tag: str | None = absent(NAME_CHARS)
    s: float | None = absent()
    out_tokens: int | None = absent()
    at: float | None = absent()
    in_tokens: int | None = absent()
    output_tokens_per_s: float | None = absent()
    total_tokens_per_s: float | None = absent()
    answers: Answers | None = absent()
    # the forward clock (child.clock_metrics), or why a window has none
    gpu_s: float | None = absent()
    forwards: float | None = absent()
    gpu_tokens_per_s: float | None = absent()
    decode_gpu_s: float | None = absent()
    decodes: float | None = absent()
    decode_gpu_tokens_per_s: float | None = absent()
    extend_gpu_s: float | None = absent()
    extend_gpu_tokens_per_s: float | None = absent()
    clock_error: str | None = absent()
    kept: int | None = absent()
    sequences: tuple[KeptSequence, ...] | None = absent()  # a script's inline outputs, never graded


@dataclass(frozen=True)
class Route(Record):
    TAG: ClassVar[str] = "route"
    route: str | None = absent(NAME_CHARS)
    epoch: int | None = absent()
    s: float | None = absent()
    answers: Answers | None = absent()


@dataclass(frozen=True)
class Teacher(Record):
    TAG: ClassVar[str] = "teacher"
    tag: str | None = absent(NAME_CHARS)
    s: float | None = absent()
    graded: tuple[Graded, ...] | None = absent()


@dataclass(frozen=True)
class Install(Record):
    TAG: ClassVar[str] = "install"
    s: float | None = absent()
    answers: Answers | None = absent()


@dataclass(frozen=True)
class Remove(Record):
    TAG: ClassVar[str] = "remove"
    s: float | None = absent()
    answers: Answers | None = absent()


@dataclass(frozen=True)
class State(Record):
    TAG: ClassVar[str] = "state"
    s: float | None = absent()
    answers: Answers | None = absent()


@dataclass(frozen=True)
class Canary(Record):
    TAG: ClassVar[str] = "canary"
    s: float | None = absent()
    outputs: tuple[Output, ...] | None = absent()


@dataclass(frozen=True)
class OutputsReady(Record):
    TAG: ClassVar[str] = "outputs_ready"
    kept: Mapping[str, int] | None = absent()


@dataclass(frozen=True)
class Sample(Record):
    TAG: ClassVar[str] = "sample"
    sequences: Mapping[str, tuple[KeptSequence, ...]] | None = absent()


@dataclass(frozen=True)
class Done(Record):
    TAG: ClassVar[str] = "done"


@dataclass(frozen=True)
class Error(Record):
    TAG: ClassVar[str] = "error"
    kind: ErrorKind | None = absent()
    error: str | None = absent(8192)
    trace: str | None = absent(8192)


RECORDS = Family(
    "op",
    (
        Checkpoint,
        Started,
        Snapshot,
        Generate,
        Route,
        Teacher,
        Install,
        Remove,
        State,
        Canary,
        OutputsReady,
        Sample,
        Done,
        Error,
    ),
    ProtocolError,
)


def read_record(rec: object) -> Record:
    """The driver's record `rec` (parsed JSON) as its typed kind; ProtocolError when it is not one."""
    out: Record = RECORDS.decode(rec)
    return out


def pairs(items: Any) -> list[list[float | int]]:
    """SGLang logprob tuples (logprob, token_id, text) -> [token_id, logprob]; None stays None."""
    return [[int(t[1]), float(t[0])] for t in (items or []) if t is not None and t[0] is not None]


def compact(o: dict[str, Any], k: int) -> dict[str, Any]:
    """What quality grading needs of one output, nothing more (an `Output`)."""
    s: dict[str, Any] = {"cont": list(o["output_ids"])}
    if k:
        mi = o.get("meta_info", {})
        s["logprobs"] = pairs(mi.get("output_token_logprobs"))
        s["top"] = [pairs(x) for x in mi.get("output_top_logprobs") or []]
    return s


def _positive(x: Any) -> bool:
    """A finite number above zero (not a bool, not NaN or inf, not a string)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _reading(c: Any) -> str:
    if not isinstance(c, dict):
        return repr(c)[:40]
    return ", ".join(f"{k}={str(c.get(k))[:20]}" for k in ("forwards", "gpu_s", "decodes", "decode_gpu_s") if k in c)


def clock_metrics(answers: dict[int, dict[str, Any]], ranks: list[int], n_out: int, n_in: int) -> dict[str, Any]:
    """The forward clock's GPU seconds for a window: the slowest rank bounds a TP step. A rank
    without spans leaves the window without the metric (the judge then lacks it: never a win)."""
    clocks = {r: a.get("clock") if isinstance(a := answers.get(r), dict) else None for r in ranks}
    if any(
        not isinstance(c, dict)
        or not _positive(c.get("forwards"))
        or not _positive(c.get("gpu_s"))
        or any(k in c and not (_positive(c[k]) or c[k] == 0) for k in ("decode_gpu_s", "decodes"))
        for c in clocks.values()
    ):
        # the answers come from the scheduler ranks: NaN, inf, strings, bools are no reading
        return {"clock_error": f"forward clock: ranks {ranks} reported {[(r, _reading(c)) for r, c in clocks.items()]}"}
    cs = [c for c in clocks.values() if isinstance(c, dict)]  # all of them: checked just above
    gpu_s = max(c["gpu_s"] for c in cs)
    out = {"gpu_s": gpu_s, "forwards": max(c["forwards"] for c in cs), "gpu_tokens_per_s": n_out / gpu_s}
    decode_s = max(c.get("decode_gpu_s", 0.0) for c in cs)
    if decode_s > 0 and all(c.get("decodes") for c in cs):  # decode steps (graph replays)
        out.update(decode_gpu_s=decode_s, decodes=max(c["decodes"] for c in cs), decode_gpu_tokens_per_s=n_out / decode_s)
        # the rest of the forward spans: the prefill (eager extend forwards), per prompt token
        extend_s = max(c["gpu_s"] - c.get("decode_gpu_s", 0.0) for c in cs)
        if extend_s > 0 and n_in > 0:
            out.update(extend_gpu_s=extend_s, extend_gpu_tokens_per_s=n_in / extend_s)
    return out


# -- control lines (host -> driver, on the job pipe) ------------------------------------------


@dataclass(frozen=True)
class GateAnswer:
    """The host's go/stop after a gate step (arena/verdict/sequential.py)."""

    nonce: str = field(metadata=bound(NONCE_CHARS))
    go: bool


@dataclass(frozen=True)
class SampleRequest:
    """The sequences to grade, named only after every window ran (arena/verdict/grading.py)."""

    sample: Mapping[str, tuple[int, ...]]
    nonce: str = field(metadata=bound(NONCE_CHARS))


@dataclass(frozen=True)
class ServeLine:
    """A resident engine's next job, or its stop, echoing the serve nonce of the job before."""

    nonce: str = field(metadata=bound(NONCE_CHARS))
    job: Document | None = absent()  # the host's own job for its driver (sealed: channel.seal)
    stop: bool | None = absent()


def line(msg: GateAnswer | SampleRequest | ServeLine) -> bytes:
    """One control line as the driver reads it."""
    return (json.dumps(msgcodec.encode(msg, ProtocolError)) + "\n").encode()


def _read(kind: type[T], text: str, what: str, nonce: str | None, stranger: str) -> T:
    """The control line `kind` echoing `nonce`: a line of anyone but the host (`stranger`: no
    nonce, or another) is refused before its form is looked at."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # nested past the parser's depth
        raise ProtocolError(what, "-", f"the job pipe carried a line that is not the host's {what}") from None
    if type(doc) is not dict or doc.get("nonce") != nonce:
        raise ForgeryError(stranger)
    return msgcodec.decode(kind, doc, ProtocolError, what)


def read_gate(text: str, nonce: str | None, tag: str | None) -> bool:
    """go (True) or stop (False), from a line echoing the step's gate nonce."""
    return _read(GateAnswer, text, "go/stop", nonce, f"a go/stop at gate {tag} without the host's gate nonce").go


def read_sample(text: str, nonce: str | None) -> Mapping[str, tuple[int, ...]]:
    """The sample request's {tag: [keys]}, from a line echoing the job's sample nonce."""
    why = "a sample request without the host's nonce arrived on the job pipe"
    return _read(SampleRequest, text, "sample request", nonce, why).sample


def read_next(text: str, serve: str | None) -> dict[str, Any] | None:
    """The next job of a resident engine (None: stop), from a line echoing this job's serve nonce."""
    why = "a next job without the host's serve nonce arrived on the job pipe"
    msg = _read(ServeLine, text, "next job", serve, why)
    return None if msg.stop or not isinstance(msg.job, dict) else msg.job
