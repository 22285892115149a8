"""Every message between the static check's host (bound.py) and its child (child.py).

Why one module: the child parses hostile source with `ast` and walks what it built, so a parser
bug that input can reach runs in the child, and what the child writes back is read as hostile
too. `read_frame` is the host's check of that pipe: an unknown frame kind, an unknown or missing
field, a wrong type (a bool is not a number), a non-finite number, an oversized string or list,
nesting too deep for `json` or a line that is not JSON is a `FrameError` naming the frame and
the field; bound.py turns it into a P022 finding (fail closed), never a crash or a lenient read.

Host -> child: the file at --fd: one JSON line, a `Head`, then the .py bytes in the order of
`Head.py`, then the manifest's (`Head.manifest` bytes). Child -> host: stdout, one frame a line,
`FRAME` + a JSON object whose "frame" names its kind (every frame carries "cpu", the child's CPU
seconds so far): `At` as each step starts (the first, "starting", before the payload is read),
`Findings`, then with the identity asked and no finding `Identity`, then `Done`; a Python
exception is a `Crash`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from cacheon_subnet import msgcodec
from cacheon_subnet.msgcodec import Family, bound

FRAME = "#cacheon-static "
STEP_CHARS = 256  # "starting", "computing the normalized identity", the scan's step names
PATH_CHARS = 1024  # a member path (bundle/limits.py: 255 characters)
CRASH_CHARS = 1024  # the child sends "Type: " + 300 characters of the message
ID_CHARS = 128  # "norm-" + 64 hex digits


class FrameError(ValueError):
    """A frame or payload that is not what its kind says; `kind` is the frame, `field` the field."""

    def __init__(self, kind: str, field: str, detail: str) -> None:
        self.kind, self.field, self.detail = kind, field, detail
        super().__init__(f"{kind} frame, field {field}: {detail}")


# -- host -> child --------------------------------------------------------------------------


@dataclass(frozen=True)
class PyFile:
    path: str = field(metadata=bound(PATH_CHARS))
    size: int


@dataclass(frozen=True)
class Head:
    """What the child checks: every member's path, the Python members' sizes (their bytes follow
    in this order), the manifest's size (None: no identity asked), the other members' sha256."""

    paths: tuple[str, ...]
    py: tuple[PyFile, ...]
    manifest: int | None
    identity: bool
    other: Mapping[str, str]
    cuda: tuple[str, ...] = ()  # the CUDA ops' entry modules: the only ones that may import native


# -- child -> host --------------------------------------------------------------------------


@dataclass(frozen=True)
class At:
    TAG: ClassVar[str] = "at"
    step: str = field(metadata=bound(STEP_CHARS))
    path: str = field(metadata=bound(PATH_CHARS))
    cpu: float = 0.0


@dataclass(frozen=True)
class Findings:
    TAG: ClassVar[str] = "findings"
    findings: tuple[str, ...]  # str(policy Finding) lines, within the codec's bounds
    cpu: float = 0.0


@dataclass(frozen=True)
class Identity:
    """The normalized identity; None when the sources do not parse (the key is always there)."""

    TAG: ClassVar[str] = "identity"
    identity: str | None = field(metadata=bound(ID_CHARS))
    cpu: float = 0.0


@dataclass(frozen=True)
class Done:
    TAG: ClassVar[str] = "done"
    cpu: float = 0.0


@dataclass(frozen=True)
class Crash:
    TAG: ClassVar[str] = "crash"
    crash: str = field(metadata=bound(CRASH_CHARS))
    cpu: float = 0.0


Frame = At | Findings | Identity | Done | Crash
FRAMES = Family("frame", (At, Findings, Identity, Done, Crash), FrameError)


def frame_line(frame: Frame) -> str:
    """One frame as the child writes it (a line, without its newline)."""
    return FRAME + json.dumps(FRAMES.encode(frame))


def read_frame(text: bytes) -> Frame:
    """The frame after `FRAME` on one line of the child's stdout; FrameError when it is not one."""
    try:
        doc: Any = json.loads(text)
    except (ValueError, RecursionError) as e:  # nesting deeper than json's recursion limit: RecursionError
        raise FrameError("?", "-", f"not a JSON object ({type(e).__name__})") from None
    out: Frame = FRAMES.decode(doc)
    return out


def head_line(head: Head) -> bytes:
    """The payload's first line, as the host writes it."""
    return json.dumps(msgcodec.encode(head, FrameError)).encode() + b"\n"


def read_head(line: bytes) -> Head:
    """The payload's first line, as the child reads it (the host wrote it: a FrameError is a bug)."""
    return msgcodec.decode(Head, json.loads(line), FrameError, "head")
