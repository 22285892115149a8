"""Every message between the verify host and its sandboxed worker (one frozen dataclass per `type`).

Why one module: the worker imports the contribution, so each frame it sends is hostile input.
`WORKER.decode` is the host's check of that pipe (unknown type, unknown or missing field, wrong
type, non-finite number, oversized string, list or map: a `ProtocolError` naming the message and
the field); `HOST.decode` is the worker's reading of the host's requests. Framing (bounded frames,
tensors, sealed memfds) stays in wire.py and shm.py; tensors travel beside these headers, never in
them. The judge (judge.py) reads a call's reply as the decoded `Result` (judge.Reply): only what
decoded reaches a check.

Host -> worker: load, call, graph, bench, timed_setup, timed_run, exit.
Worker -> host: loaded (to load), result (call, graph: echoes the request's nonce), bench,
timed_ready, timed_done, progress (bench's stock warm-up, before a reply), error (a request the
worker could not read).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

from cacheon_subnet.msgcodec import Family, absent, bound
from cacheon_subnet.verify.wire import WireError

T = TypeVar("T")
Scalar = int | float | bool | str  # a kernel's scalar params (eps, topk, renormalize)
NONCE_CHARS = 64  # the host's nonces are 32 hex digits
ERROR_CHARS = 4096  # the worker sends the last 1500 characters of a traceback
NAME_CHARS = 256  # op keys, slots, modules, dtypes


class ProtocolError(WireError):
    """A message that is not what its type says; a WireError, so every reader of the pipe that
    handles a malformed frame handles it. `kind` is the message type, `field` the field."""

    def __init__(self, kind: str, field: str, detail: str) -> None:
        self.kind, self.field, self.detail = kind, field, detail
        super().__init__(f"{kind} message, field {field}: {detail}")


class CallMode(StrEnum):
    EAGER = "eager"
    COMPILE = "compile"  # torch.compile(fullgraph=True) of the custom-op dispatch path


class Reason(StrEnum):
    """Why the worker says a request failed (judge.WORKER_REASONS are those a result may give)."""

    EXCEPTION = "exception"
    HOST_SYNC = "host_sync"
    GRAPH_CAPTURE = "graph_capture"
    GRAPH_REPLAY = "graph_replay"
    IMPORT_ERROR = "import_error"
    ENTRY_MISSING = "entry_missing"
    SETUP = "setup"


# -- host -> worker -------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadOp:
    key: str = field(metadata=bound(NAME_CHARS))
    slot: str = field(metadata=bound(NAME_CHARS))
    module: str = field(metadata=bound(NAME_CHARS))
    attr: str = field(metadata=bound(NAME_CHARS))


@dataclass(frozen=True)
class Load:
    TAG: ClassVar[str] = "load"
    ops: tuple[LoadOp, ...]


@dataclass(frozen=True)
class Alloc:
    """An out or scratch argument the worker allocates: poison 0 (NaN), 1 (-31337) or 2 (noise)."""

    dtype: str = field(metadata=bound(NAME_CHARS))
    shape: tuple[int, ...] = field(metadata=bound(16))
    poison: int
    noise_seed: int | None = absent()


@dataclass(frozen=True)
class Call:
    TAG: ClassVar[str] = "call"
    op: str = field(metadata=bound(NAME_CHARS))
    params: Mapping[str, Scalar] = field(metadata=bound(64))
    alloc: Mapping[str, Alloc] = field(metadata=bound(64))
    watch_sync: bool
    mode: CallMode
    nonce: str = field(metadata=bound(NONCE_CHARS))


@dataclass(frozen=True)
class Graph:
    """Capture one call in a CUDA graph; replay it `replays` times (tensors r<i>.<arg>)."""

    TAG: ClassVar[str] = "graph"
    op: str = field(metadata=bound(NAME_CHARS))
    params: Mapping[str, Scalar] = field(metadata=bound(64))
    alloc: Mapping[str, Alloc] = field(metadata=bound(64))
    replays: int
    nonce: str = field(metadata=bound(NONCE_CHARS))


@dataclass(frozen=True)
class BenchCase:
    """slots.spec.ShapeCase.to_json()."""

    label: str = field(metadata=bound(NAME_CHARS))
    profile: str = field(metadata=bound(NAME_CHARS))
    dims: Mapping[str, int] = field(metadata=bound(64))
    params: Mapping[str, Scalar] = field(metadata=bound(64))
    constants: Mapping[str, float] | None = absent(64)


@dataclass(frozen=True)
class Bench:
    TAG: ClassVar[str] = "bench"
    op: str = field(metadata=bound(NAME_CHARS))
    case: BenchCase
    dtype: str = field(metadata=bound(NAME_CHARS))
    seed: int
    budget_s: float
    target_rel_err: float
    stock: bool
    bprime: bool | None = absent()
    min_iters: int | None = absent()


@dataclass(frozen=True)
class View:
    """One argument of a timed call inside its own mapping (arena/cpu/host_timing.py View)."""

    offset: int
    shape: tuple[int, ...] = field(metadata=bound(16))
    stride: tuple[int, ...] = field(metadata=bound(16))
    dtype: str = field(metadata=bound(NAME_CHARS))


@dataclass(frozen=True)
class TimedSetup:
    """The host's memfd follows this frame: `calls` argument sets of `call_bytes` each."""

    TAG: ClassVar[str] = "timed_setup"
    op: str = field(metadata=bound(NAME_CHARS))  # a loaded op, or "@reference" (the slot's reference kernel)
    slot: str = field(metadata=bound(NAME_CHARS))
    call_bytes: int
    calls: tuple[Mapping[str, View], ...] = field(metadata=bound(4096))
    params: Mapping[str, Scalar] = field(metadata=bound(64))


@dataclass(frozen=True)
class TimedRun:
    """One batch of `n` calls of the target `op` set up earlier (a worker may hold several: the
    candidate's op and the in-process reference the CPU arena guards its ratio with)."""

    TAG: ClassVar[str] = "timed_run"
    n: int
    op: str = field(metadata=bound(NAME_CHARS))


@dataclass(frozen=True)
class Exit:
    TAG: ClassVar[str] = "exit"


# -- worker -> host -------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadResult:
    ok: bool
    reason: Reason | None = absent()
    error: str | None = absent(ERROR_CHARS)


@dataclass(frozen=True)
class Loaded:
    TAG: ClassVar[str] = "loaded"
    results: Mapping[str, LoadResult] = field(metadata=bound(1024))
    env: Mapping[str, str | bool] | None = absent(64)  # informational: no verdict reads it


@dataclass(frozen=True)
class Result:
    """One call or graph trial. Its flags can only fail a trial (judge.check_reply); a pass is
    decided on the tensors the host reads back."""

    TAG: ClassVar[str] = "result"
    ok: bool
    nonce: str = field(metadata=bound(NONCE_CHARS))
    reason: Reason | None = absent()
    error: str | None = absent(ERROR_CHARS)
    returned: str | None = absent(NAME_CHARS)
    host_sync: tuple[str, ...] | None = absent()
    aliases: tuple[str, ...] | None = absent(1024)
    digests: Mapping[str, str] | None = absent(1024)  # large read-only inputs, by digest
    worker_s: Mapping[str, float] | None = absent(16)  # informational: summed into the timing log
    final_digests: Mapping[str, str] | None = absent(1024)  # graph: read-only inputs after the last replay


@dataclass(frozen=True)
class SideTiming:
    """One side's figures (bench_timing._stats)."""

    median_us: float
    mean_us: float
    rel_stderr: float
    min_us: float
    n: int


# bench_timing reads each side on this clock on a GPU: the call captured in a CUDA graph, replayed.
GRAPH_CLOCK = "CUDA-graph replay"


@dataclass(frozen=True)
class BenchReply:
    TAG: ClassVar[str] = "bench"
    ok: bool
    reason: Reason | None = absent()
    error: str | None = absent(ERROR_CHARS)
    timings: Mapping[str, SideTiming] | None = absent(8)  # "candidate", "baseline" (bench_timing.time_pair)
    baseline: str | None = absent(ERROR_CHARS)
    hbm_gbps: float | None = absent()
    clock: str | None = absent(ERROR_CHARS)  # bench_timing.GRAPH_CLOCK, or why the sides ran eager


@dataclass(frozen=True)
class TimedReady:
    TAG: ClassVar[str] = "timed_ready"
    ok: bool
    reason: Reason | None = absent()
    error: str | None = absent(ERROR_CHARS)


@dataclass(frozen=True)
class TimedDone:
    TAG: ClassVar[str] = "timed_done"
    ok: bool
    reason: Reason | None = absent()
    error: str | None = absent(ERROR_CHARS)


@dataclass(frozen=True)
class Progress:
    TAG: ClassVar[str] = "progress"
    phase: str = field(metadata=bound(NAME_CHARS))
    done: int
    total: int


@dataclass(frozen=True)
class Error:
    TAG: ClassVar[str] = "error"
    error: str = field(metadata=bound(ERROR_CHARS))


HostMessage = Load | Call | Graph | Bench | TimedSetup | TimedRun | Exit
WorkerMessage = Loaded | Result | BenchReply | TimedReady | TimedDone | Progress | Error
HOST = Family("type", (Load, Call, Graph, Bench, TimedSetup, TimedRun, Exit), ProtocolError)
WORKER = Family("type", (Loaded, Result, BenchReply, TimedReady, TimedDone, Progress, Error), ProtocolError)


def request(msg: HostMessage) -> dict[str, Any]:
    """The wire dict of a host request."""
    return HOST.encode(msg)


def reply(msg: WorkerMessage) -> dict[str, Any]:
    """The wire dict of a worker reply."""
    return WORKER.encode(msg)


def read_reply(doc: object, *expect: type[T]) -> T:
    """The worker's reply `doc` as one of `expect`; ProtocolError when it is anything else."""
    return WORKER.decode(doc, *expect)


def load_request(ops: Any) -> Load:
    """A load of bundle.OpEntry-like ops (key, slot, module, attr)."""
    return Load(tuple(LoadOp(o.key, o.slot, o.module, o.attr) for o in ops))
