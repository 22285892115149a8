"""Every CACHEON_* environment variable, declared once: name, type, default, why, who reads it.

Why one module: the names used to be string literals in some thirty files, where a typo would
read a variable nobody sets and quietly take the default. Code names a variable through its declaration
here, both to read it (`JIT_SEEDS.get()`) and to set it into a child's environment
(`{SEAM_STRICT.name: "1"}`); tests/test_env.py refuses a CACHEON_* literal anywhere else in the
product code and keeps the table in docs/operators.md in step with these declarations.

A malformed value raises EnvError naming the variable and the value, unless the declaration is
`lenient`: then it means the default, as the code always did (the table says so). Standard library
only: neurons/_bootstrap.py reads one under whatever interpreter the user typed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar, Generic, TypeVar, cast

T = TypeVar("T")
Environ = Mapping[str, str] | None  # None: os.environ; else a child's environment being built or read


class EnvError(ValueError):
    """A variable holds a value its declaration refuses (a ValueError: what the code raised before)."""


class Reader(Enum):
    HOST = "host"  # the validator, miner or CLI process
    WORKER = "sandboxed worker"  # verify's child behind the sandbox wall
    ENGINE = "engine plugin"  # the SGLang process the arena starts (seams/)


class Kind(Enum):
    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    STR = "str"
    PATH = "path"
    ENUM = "enum"
    LIST = "list"


class Fold(Enum):
    """How a value is normalised before it is compared (each reader's own, kept as it was)."""

    NONE = "none"
    LOWER = "lower"
    STRIP_LOWER = "strip+lower"

    def apply(self, raw: str) -> str:
        if self is Fold.LOWER:
            return raw.lower()
        return raw.strip().lower() if self is Fold.STRIP_LOWER else raw


@dataclass(frozen=True)
class Var(Generic[T]):
    """One variable. `get()` parses it; `.name` is what a child's environment is keyed by."""

    name: str
    default: T
    why: str
    readers: tuple[Reader, ...]
    lenient: bool = False  # a malformed value means the default (documented) instead of EnvError
    blank_unset: bool = True  # an empty value counts as unset (`os.environ.get(X) or default`)
    kind: ClassVar[Kind] = Kind.STR
    checked: ClassVar[bool] = False  # the value is parsed here (a str or path is taken as it is)

    def raw(self, environ: Environ = None) -> str | None:
        value = (os.environ if environ is None else environ).get(self.name)
        return None if value is None or (self.blank_unset and value == "") else value

    def get(self, environ: Environ = None) -> T:
        raw = self.raw(environ)
        if raw is None:
            return self.fallback()
        try:
            return self.parse(raw)
        except ValueError as e:
            if self.lenient:
                return self.fallback()
            raise EnvError(f"{self.name}={raw!r}: {e}") from None

    def fallback(self) -> T:
        return self.default

    def parse(self, raw: str) -> T:
        return cast(T, raw)

    def shown_default(self) -> str:
        return "unset" if self.default is None else f"`{self.default}`"


@dataclass(frozen=True)
class StrVar(Var[T]):
    """Any string, taken as it is (its reader checks it, if anything does)."""


@dataclass(frozen=True)
class PathVar(Var[T]):
    """A path, as the string the code passes on; a default's leading ~ is expanded when read."""

    kind: ClassVar[Kind] = Kind.PATH

    def fallback(self) -> T:
        d = self.default
        return cast(T, os.path.expanduser(d)) if isinstance(d, str) else d


@dataclass(frozen=True)
class IntVar(Var[T]):
    digits: bool = False  # decimal digits only (no sign, no spaces), as `str.isdigit` checks
    kind: ClassVar[Kind] = Kind.INT
    checked: ClassVar[bool] = True

    def parse(self, raw: str) -> T:
        if self.digits and not raw.isdigit():
            raise ValueError("expected decimal digits")
        return cast(T, int(raw))


@dataclass(frozen=True)
class FloatVar(Var[T]):
    kind: ClassVar[Kind] = Kind.FLOAT
    checked: ClassVar[bool] = True

    def parse(self, raw: str) -> T:
        return cast(T, float(raw))


@dataclass(frozen=True)
class BoolVar(Var[bool]):
    true: tuple[str, ...] = ("1",)
    false: tuple[str, ...] = ("0",)
    fold: Fold = Fold.NONE
    kind: ClassVar[Kind] = Kind.BOOL
    checked: ClassVar[bool] = True

    def parse(self, raw: str) -> bool:
        value = self.fold.apply(raw)
        if value in self.true or value in self.false:
            return value in self.true
        raise ValueError(f"expected one of {self.true + self.false}")

    def shown_default(self) -> str:
        said = [f"{k}: {'/'.join(w)}" for k, w in (("on", self.true), ("off", self.false)) if w]
        return f"{'on' if self.default else 'off'} ({'; '.join(said)})"


@dataclass(frozen=True)
class EnumVar(Var[T]):
    choices: tuple[str, ...] = ()
    fold: Fold = Fold.NONE
    kind: ClassVar[Kind] = Kind.ENUM
    checked: ClassVar[bool] = True

    def parse(self, raw: str) -> T:
        value = self.fold.apply(raw)
        if value not in self.choices:
            raise ValueError(f"expected one of {self.choices}")
        return cast(T, value)


@dataclass(frozen=True)
class ListVar(Var[tuple[str, ...]]):
    sep: str = ","
    kind: ClassVar[Kind] = Kind.LIST

    def parse(self, raw: str) -> tuple[str, ...]:
        return tuple(s for s in raw.split(self.sep) if s)

    def shown_default(self) -> str:
        return "empty"


@dataclass(frozen=True)
class Family:
    """A prefix whose members are named by the code (one per field or binding), e.g. CACHEON_WEB_MAX_CONNS."""

    prefix: str
    members: str  # what follows the prefix
    why: str
    readers: tuple[Reader, ...]
    malformed: str = "is an error"  # what a member's malformed value does (the reader parses it)

    def of(self, member: str) -> str:
        return f"{self.prefix}{member.upper()}"


H, W, E = Reader.HOST, Reader.WORKER, Reader.ENGINE  # short for the declarations below

# -- the sandbox wall (cacheon_subnet/sandbox/) -------------------------------------------------
SANDBOX = EnumVar[str](
    "CACHEON_SANDBOX",
    "wall",
    "weak: no OS wall (local chains only; any other value keeps the wall)",
    (H,),
    lenient=True,
    choices=("wall", "weak"),
    fold=Fold.STRIP_LOWER,
)
SANDBOX_UID = IntVar[int]("CACHEON_SANDBOX_UID", 64000, "first uid of the dedicated sandbox range", (H,), blank_unset=False)
SANDBOX_GID = IntVar[int | None]("CACHEON_SANDBOX_GID", None, "its first gid (unset: the uid)", (H,), blank_unset=False)
SANDBOX_UIDS = IntVar[int]("CACHEON_SANDBOX_UIDS", 64, "uids in the range: children at once", (H,), blank_unset=False)
BWRAP = PathVar[str | None]("CACHEON_BWRAP", None, "the bwrap binary (unset: PATH)", (H,))
SETPRIV = PathVar[str | None]("CACHEON_SETPRIV", None, "the setpriv binary (unset: PATH)", (H,))
PRLIMIT = PathVar[str | None]("CACHEON_PRLIMIT", None, "the prlimit binary (unset: PATH)", (H,))
SANDBOX_LOCKS = PathVar[str | None](
    "CACHEON_SANDBOX_LOCKS", None, "uid lease dir (unset: /run/cacheon-sandbox, else /tmp/...)", (H,)
)
SANDBOX_FS = PathVar[str | None](
    "CACHEON_SANDBOX_FS", None, "tmpfs mount dir (unset: /run/cacheon-sandbox-fs, else /tmp/...)", (H,)
)
SANDBOX_DENY = ListVar(
    "CACHEON_SANDBOX_DENY", (), "more paths never bound into a sandbox (os.pathsep-separated)", (H,), sep=os.pathsep
)
SANDBOX_STAGE = PathVar[str | None](
    "CACHEON_SANDBOX_STAGE",
    None,
    "where unreachable read-only inputs are staged (unset: the temp dir)",
    (H,),
    blank_unset=False,
)
SANDBOX_SCRATCH = PathVar[str | None](
    "CACHEON_SANDBOX_SCRATCH",
    None,
    "set by the host: the child's scratch dir (also how a leftover child is known)",
    (H, W),
)
SANDBOX_MODE = EnumVar[str | None](
    "CACHEON_SANDBOX_MODE",
    None,
    "set by the host: wall or weak, what the child runs behind",
    (W,),
    lenient=True,
    choices=("wall", "weak"),
)
SCRATCH = PathVar[str | None]("CACHEON_SCRATCH", None, "base of bundle scratch dirs (unset: the temp dir)", (H,))

# -- logging, progress, state ---------------------------------------------------------------------
LOG_LEVEL = StrVar[str](
    "CACHEON_LOG_LEVEL", "info", "a logging level name (--log-level wins; unknown names mean info)", (H, W)
)
LOG_TO = EnumVar[str](
    "CACHEON_LOG_TO",
    "auto",
    "where the cacheon CLI's log lines go: auto (stderr, unless stdout shares it as one terminal or pipe: "
    "then CACHEON_LOG_FILE), stderr, or file (--log-to wins)",
    (H,),
    choices=("auto", "stderr", "file"),
    fold=Fold.STRIP_LOWER,
)
LOG_FILE = PathVar[str | None](
    "CACHEON_LOG_FILE", None, "the CLI's JSON log lines when not on stderr (unset: $CACHEON_HOME/logs/cacheon.log)", (H,)
)
PROGRESS = EnumVar[str | None](
    "CACHEON_PROGRESS",
    None,
    "0: no progress bars (--quiet sets it); 1: bars off a TTY too (tests, logs)",
    (H,),
    lenient=True,
    choices=("0", "1"),
)
HOME = PathVar[str]("CACHEON_HOME", "~/.cacheon", "validator state root (state dirs under validator/)", (H,))
MINER_STATE = PathVar[str]("CACHEON_MINER_STATE", "~/.cacheon/miner", "the miner's submission records", (H,))
RELEASE_TRUST = PathVar[str](
    "CACHEON_RELEASE_TRUST",
    "~/.cacheon/release-trust.json",
    "what `release verify` verified per owner: the newest serial (its rollback guard; --trust-file wins)",
    (H,),
)
EXAMPLES = PathVar[str | None]("CACHEON_EXAMPLES", None, "example bundles (unset: the checkout's examples/)", (H,))
LOCAL_CHAIN = PathVar[str | None]("CACHEON_LOCAL_CHAIN", None, "default --local-chain: the LocalChain SQLite file", (H,))
NEURON_REEXEC = BoolVar(
    "CACHEON_NEURON_REEXEC",
    False,
    "set on a neuron's re-exec under .venv so a broken venv cannot loop",
    (H,),
    lenient=True,
    true=("1",),
    false=(),
)
VERIFY_DRAW_DEVICE = StrVar[str | None](
    "CACHEON_VERIFY_DRAW_DEVICE", None, "cpu or cuda[:N]: where verify's host draws the large inputs", (H,)
)

# -- the GPU arena's host (arena/) ------------------------------------------------------------------
ARENA_HOME = PathVar[str]("CACHEON_ARENA_HOME", "/var/tmp/cacheon", "arena work: engines, checkpoints, results", (H,))
JIT_SEEDS = BoolVar(
    "CACHEON_JIT_SEEDS",
    True,
    "off: every engine starts cold (the test suite); other values keep seeding",
    (H,),
    lenient=True,
    true=(),
    false=("off", "0", "no", "false"),
    fold=Fold.LOWER,
)
ENGINE_DISK_GIB = FloatVar[float | None](
    "CACHEON_ENGINE_DISK_GIB", None, "disk an engine may grow by (unset: diskwatch's default)", (H,)
)
ENGINE_KEPT_MIB = FloatVar[float | None](
    "CACHEON_ENGINE_KEPT_MIB", None, "what an engine may leave in the dirs that outlive it", (H,)
)
DISK_RESERVE_MIB = FloatVar[float | None](
    "CACHEON_DISK_RESERVE_MIB", None, "free space the host keeps for its state DB and logs", (H,)
)

# -- the engine's launch environment, set by the arena host only (the sandbox drops ambient ones) ---
ENGINE_TREE = PathVar[str | None]("CACHEON_ENGINE_TREE", None, "the sealed engine tree (read-only)", (E, H))
ENGINE_TREE_DIGEST = StrVar[str | None]("CACHEON_ENGINE_TREE_DIGEST", None, "the tree's expected digest", (E,))
RECEIPT_DIR = PathVar[str | None]("CACHEON_RECEIPT_DIR", None, "where receipts and answer logs go", (E, H))
SEAM_STRICT = BoolVar(
    "CACHEON_SEAM_STRICT",
    True,
    "0: a failing kernel falls back to stock (serving); else strict",
    (E,),
    lenient=True,
    true=("1",),
    false=("0",),
)
FORWARD_CLOCK = BoolVar(
    "CACHEON_FORWARD_CLOCK", False, "1: time the forward passes on the GPU (timed engines)", (E,), lenient=True
)
STOCK_AS_CANDIDATE = ListVar("CACHEON_STOCK_AS_CANDIDATE", (), "slot[,slot]: role-bias control", (E,))
HANDICAP = StrVar[str | None](
    "CACHEON_HANDICAP", None, "slot:µs, known-speedup control (malformed: the engine stops, seams/controls.py)", (E,)
)
SLOWDOWN = StrVar[str | None](
    "CACHEON_SLOWDOWN", None, "slot:µs, known-loss control (malformed: the engine stops, seams/controls.py)", (E,)
)
RESIDENT = BoolVar(
    "CACHEON_RESIDENT", False, "1: a timed engine kept across contributions (seams/resident.py)", (E,), lenient=True
)
RESIDENT_TREES = PathVar[str | None](
    "CACHEON_RESIDENT_TREES", None, "the read-only dir each contribution's tree is put in", (E,)
)
RESIDENT_ANSWERS = PathVar[str | None]("CACHEON_RESIDENT_ANSWERS", None, "one answers dir per job", (E,))
SEAM_GATE = Family(
    "CACHEON_SEAM_",
    "<BINDING>",
    "0 or 1 per seam binding (seams/table.py): which adapters to arm",
    (E,),
    malformed="means 0",
)

# -- the servers' bounds (cacheon_subnet/connguard.py Limits) ------------------------------------
WEB = Family("CACHEON_WEB_", "<LIMITS FIELD>", "the leaderboard's connection bounds (docs/leaderboard.md)", (H,))
WEB_MEMORY_MIB = IntVar[int](
    "CACHEON_WEB_MEMORY_MIB",
    1024,
    "the web process's address space (non-digits mean the default)",
    (H,),
    lenient=True,
    digits=True,
)
WEB_RUN_DIR = PathVar[str | None](
    "CACHEON_WEB_RUN_DIR", None, "board snapshot dir (unset: /run/cacheon-web, else /var/tmp/cacheon-web)", (H,)
)
SERVE = Family("CACHEON_SERVE_", "<LIMITS FIELD>", "`cacheon miner serve`'s connection bounds", (H,))

VARS: tuple[Var, ...] = tuple(v for v in tuple(globals().values()) if isinstance(v, Var))
FAMILIES: tuple[Family, ...] = tuple(v for v in tuple(globals().values()) if isinstance(v, Family))


def markdown_table() -> str:
    """The table docs/operators.md carries (tests/test_env.py checks it is this one)."""
    rows = ["| variable | type | default | a malformed value | read by | what |", "|---|---|---|---|---|---|"]
    for v in sorted(VARS, key=lambda v: v.name):
        kind = v.kind.value + (f" {'/'.join(v.choices)}" if isinstance(v, EnumVar) else "")
        bad = ("means the default" if v.lenient else "is an error") if v.checked else "-"
        who = ", ".join(r.value for r in v.readers)
        default = v.shown_default() + ("" if v.blank_unset else "; empty is a value, not unset")
        rows.append(f"| `{v.name}` | {kind} | {default} | {bad} | {who} | {v.why} |")
    for f in sorted(FAMILIES, key=lambda f: f.prefix):
        who = ", ".join(r.value for r in f.readers)
        rows.append(f"| `{f.prefix}{f.members}` | family | per member | {f.malformed} | {who} | {f.why} |")
    return "\n".join(rows)
