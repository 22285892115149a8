"""The answer lines a scheduler rank writes for the host's RPCs (seams/answers.py), one frozen
dataclass per `kind`.

Why: the rank imports the bundle, so a line in its answer log may be contribution code's
writing. `read_answer` is the driver's check of each line it accepts (after its nonce, on which
seams/answers.py decides first): an unknown kind, an unknown or missing field, a wrong type (a
bool is not an int), a non-finite time or duration, an oversized string or list or nesting too
deep is an `AnswerError` naming the kind and the field, which the reader turns into a
ForgeryError (the candidate's FAIL, as any answer the rank's own code did not write). Payloads
the host judges on its own terms stay `Json` (bounded, read as is): the forward clock's reading
(arena/engine/protocol.py clock_metrics turns a NaN or a string into no reading, never a win), a
route's ack and a resident engine's leftovers report.

Every line: {"nonce", "kind", "rank", "pid", "seq", "t", ...its kind's payload}. The receipt
snapshot (answers.snapshot: counts, errors, static, declines) rides on clock, route and install.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from cacheon_subnet.msgcodec import Family, Json, absent, bound

NONCE_CHARS = 64  # the host's nonces are 32 hex digits
NAME_CHARS = 256  # slot, package and input names
MAX_ERRORS = 64  # the receipts keep 20
Counts = Mapping[str, Mapping[str, int]]  # slot -> receipt kind (or decline reason) -> calls


class AnswerError(ValueError):
    """An answer line that is not what its kind says; `kind` is the kind, `field` the field."""

    def __init__(self, kind: str, field: str, detail: str) -> None:
        self.kind, self.field, self.detail = kind, field, detail
        super().__init__(f"{kind} answer, field {field}: {detail}")


@dataclass(frozen=True)
class StaticReport:
    """seams/integrity.py StaticInputs.report(): the engine-state inputs a kernel changed."""

    watched: int
    tampered: tuple[str, ...]
    unwatched: tuple[str, ...]


@dataclass(frozen=True)
class Answer:
    """What every line carries (AnswerLog.answer)."""

    TAG: ClassVar[str] = ""
    nonce: str = field(metadata=bound(NONCE_CHARS))
    rank: int
    pid: int
    seq: int
    t: float


@dataclass(frozen=True)
class Clock(Answer):
    TAG: ClassVar[str] = "clock"
    clock: Json | None = absent()  # seams/forward_clock.py ForwardClock.read(), or null
    counts: Counts | None = absent()
    errors: tuple[str, ...] | None = absent(MAX_ERRORS)
    static: StaticReport | None = absent()
    declines: Counts | None = absent()


@dataclass(frozen=True)
class Route(Answer):
    TAG: ClassVar[str] = "route"
    ack: Json | None = absent()  # seams/route.py set_route
    counts_before: Counts | None = absent()
    static_before: StaticReport | None = absent()
    counts: Counts | None = absent()
    errors: tuple[str, ...] | None = absent(MAX_ERRORS)
    static: StaticReport | None = absent()
    declines: Counts | None = absent()


@dataclass(frozen=True)
class Install(Answer):
    TAG: ClassVar[str] = "install"
    ack: Json | None = absent()
    packages: tuple[str, ...] | None = absent()
    counts: Counts | None = absent()
    errors: tuple[str, ...] | None = absent(MAX_ERRORS)
    static: StaticReport | None = absent()
    declines: Counts | None = absent()


@dataclass(frozen=True)
class Remove(Answer):
    TAG: ClassVar[str] = "remove"
    ack: Json | None = absent()
    purged: tuple[str, ...] | None = absent()
    collected: int | None = absent()
    interpreted: int | None = absent()
    s: float | None = absent()
    left: Json | None = absent()  # seams/resident.py leftovers()
    counts_before: Counts | None = absent()


@dataclass(frozen=True)
class State(Answer):
    TAG: ClassVar[str] = "state"
    digest: str | None = absent(NAME_CHARS)
    tensors: int | None = absent()
    digest_s: float | None = absent()
    left: Json | None = absent()
    installs: int | None = absent()
    cuda_allocated: int | None = absent()


ANSWERS = Family("kind", (Clock, Route, Install, Remove, State), AnswerError)


def read_answer(doc: Any) -> Answer:
    """One parsed answer line as its typed kind; AnswerError when it is not one."""
    out: Answer = ANSWERS.decode(doc)
    return out
