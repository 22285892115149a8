"""What the engine driver may unpickle: data, never code (installed by arena/engine/child.py).

Why: the driver never imports contribution code, but it holds the host's nonces and the record
pipe, and it *receives* from processes that do. SGLang's Engine keeps its TokenizerManager in
the driver's process and reads the scheduler ranks' (and the detokenizer's) messages with ZMQ
`recv_pyobj` (pickle); the CPU fake engine reads its scheduler's replies from a multiprocessing
Pipe (pickle too). A scheduler rank running Python past the allowlist sent a pickle whose load
ran code in the driver, which then rewrote every window's numbers with the right nonces: a
kernel 30 % slower than stock was crowned at C/B 1.5000, confirmed in a fresh engine (red team
2026-12-04, `tests/adversarial/arena/driver_pickle`).

So every unpickle in the driver (`pickle.loads` / `load` / `Unpickler`, which pyzmq and SGLang
call at use time, and multiprocessing's `ForkingPickler.loads`) resolves globals from an
allowlist only: plain builtin containers and numbers, `array.array`, and classes *defined in*
SGLang's IPC message modules (io_struct, the finish reasons, sampling params, request time
stats). No numpy: SGLang's scheduler turns every tensor into Python lists (`.tolist()`) before
it sends, and numpy's own reconstructors are gadgets (red team 2026-12-04, round 2: a BUILD on
`numpy.dtype` cleared an object dtype's flags and `scalar()` then read raw bytes as a PyObject*
that REDUCE called; `ndarray(shape, "O", buffer=raw)` did the same; protocol 4's dotted names
walked from a `numpy.dtypes` helper to FunctionType and CodeType, a function built of data). Functions are
never resolved (pickle's REDUCE would call them), nor anything imported into those modules.
A refusal raises `pickle.UnpicklingError` and is remembered in `refused`: the driver then ends
its run whatever SGLang made of the exception: forging (FAIL) when what was refused lies outside
SGLang, numpy and torch (builtins such as eval, os, subprocess, ...: `forged`), which no message of
the engine's names; anything refused inside those packages (a message class this list does not
name yet, a torch tensor, or a function there) still runs nothing, and ends the run NO_DECISION,
naming it, so an honest run never FAILs for a message type the list missed.
"""

from __future__ import annotations

import enum
import io
import pickle
import sys
from typing import Any

SAFE_BUILTINS = frozenset(
    {
        "dict",
        "list",
        "tuple",
        "set",
        "frozenset",
        "bytearray",
        "bytes",
        "str",
        "int",
        "float",
        "complex",
        "bool",
        "slice",
        "range",
        "object",
    }
)
SAFE_GLOBALS = frozenset(
    {
        ("collections", "OrderedDict"),
        ("collections", "deque"),
        ("collections", "Counter"),
        ("collections", "defaultdict"),
        ("copyreg", "_reconstructor"),
        # SGLang 0.5.13.post1 runs with skip_tokenizer_init: the scheduler sends BatchTokenIDOutput to
        # the driver itself, whose decode_ids / output_ids are `array.array`s (read in its io_struct)
        ("array", "array"),
        ("array", "_array_reconstructor"),
        ("http", "HTTPStatus"),  # FINISH_ABORT's status_code
    }
)
# SGLang modules whose own classes are the messages a scheduler / detokenizer sends the driver
SGLANG_MESSAGE_MODULES = (
    "sglang.srt.managers.io_struct",
    "sglang.srt.sampling.sampling_params",
    # BatchTokenIDOutput.time_stats: a list of SchedulerReqTimeStats
    "sglang.srt.observability.req_time_stats",
)
SGLANG_FINISH_MODULE = "sglang.srt.managers.schedule_batch"  # FINISH_* reasons only


class AllowlistGap(RuntimeError):
    """A name of SGLang, torch or numpy the allowlist lacks: the arena's defect, not the miner's."""


refused: list[str] = []  # every global refused in this process (the driver reads it)
forged: list[str] = []  # those of them that are code: a forging attempt


def allowed(module: str, name: str, obj: Any) -> bool:
    if module == "builtins":
        return name in SAFE_BUILTINS
    if (module, name) in SAFE_GLOBALS:
        return True
    own_class = isinstance(obj, type) and getattr(obj, "__module__", None) == module
    if module in SGLANG_MESSAGE_MODULES:
        return own_class
    if module == SGLANG_FINISH_MODULE:
        return own_class and name.startswith("FINISH")
    return False


def _enum_member(cls: Any, name: Any) -> Any:
    """Stands in for `builtins.getattr`, which Python 3.11+ pickles enum members with (HTTPStatus):
    only a member of an enum class the allowlist passed. The real getattr reaches `__init__`,
    `__globals__` and from there every module: never."""
    if isinstance(cls, enum.EnumMeta) and isinstance(name, str) and name in cls.__members__:
        return cls.__members__[name]
    what = f"getattr({getattr(cls, '__name__', type(cls).__name__)!s:.80}, {name!r:.80})"
    refused.append(what)
    forged.append(what)
    raise pickle.UnpicklingError(f"engine driver: refused to unpickle {what} (only enum members)")


class DataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("builtins", "getattr"):
            return _enum_member
        if not name.isidentifier() or not all(p.isidentifier() for p in module.split(".")):
            # protocol 4 walks a dotted name, before any check could see what it reached: from a
            # numpy.dtypes helper to FunctionType and CodeType, a function built of data (red team)
            what = f"{module[:80]}.{name[:80]}"
            refused.append(what)
            forged.append(what)
            raise pickle.UnpicklingError(f"engine driver: refused to unpickle {what} (a dotted or odd name)")
        obj = None  # no import on a peer's word: other than the fixed names, only modules already loaded
        if (
            module == "builtins"
            or (module, name) in SAFE_GLOBALS
            or (module.startswith(("numpy", "sglang.", "torch")) and module in sys.modules)
        ):
            try:
                obj = super().find_class(module, name)
            except (AttributeError, ImportError, ModuleNotFoundError):
                obj = None
        if obj is None or not allowed(module, name, obj):
            what = f"{module[:80]}.{name[:80]}"
            refused.append(what)
            if not module.startswith(("sglang.", "numpy", "torch")):  # no message of the engine's names these
                forged.append(what)
            raise pickle.UnpicklingError(
                f"engine driver: refused to unpickle {what} (data only: a process that runs contribution code sent it)"
            )
        return obj


def loads(
    data: Any, /, *, fix_imports: bool = True, encoding: str = "ASCII", errors: str = "strict", buffers: Any = None
) -> Any:
    return DataUnpickler(
        io.BytesIO(bytes(data)), fix_imports=fix_imports, encoding=encoding, errors=errors, buffers=buffers
    ).load()


def load(
    file: Any, *, fix_imports: bool = True, encoding: str = "ASCII", errors: str = "strict", buffers: Any = None
) -> Any:
    return DataUnpickler(file, fix_imports=fix_imports, encoding=encoding, errors=errors, buffers=buffers).load()


def install() -> None:
    """In the driver, before the engine (or anything that unpickles) is imported."""
    # the guard replaces pickle's own names on purpose: every later unpickler in the driver is ours
    pickle.loads, pickle.load, pickle.Unpickler = loads, load, DataUnpickler  # type: ignore[misc]
    import multiprocessing.reduction as reduction

    reduction.ForkingPickler.loads = staticmethod(loads)
