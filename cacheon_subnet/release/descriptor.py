"""The release descriptor (`cacheon.release/3`): what a release binds, as one canonical document.

Why canonical bytes: the owner signs them, the wheel's package name is derived from their digest,
and the serving runtime reads them back; one byte form (sorted keys, no spaces, no NaN, read back
through the strict records codec and re-encoded to the same bytes) leaves nothing to argue about.
Sealed file paths are relative to the release package, so the name can follow from the digest.
This module sits beside the serving runtime (seams layer): it imports no validator, chain or sandbox.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass

from cacheon_subnet.errors import UsageError
from cacheon_subnet.pins import SGLANG_KERNEL_PIN, SGLANG_PIN, TORCH_PIN, TRITON_PIN
from cacheon_subnet.records.codec import RecordError, from_json, to_json
from seams.table import HOOK_TARGETS, PLUGIN_GROUP, SEAM_ADAPTERS

SCHEMA = "cacheon.release/3"  # /2: the cacheon-subnet version (the METADATA pin); /3: serial and issue time (rollback guard)
PREFIX = "cacheon_release_"
DESCRIPTOR_FILE = "release.json"
SIGNATURE_FILE = "release.sig"
TREE_DIR = "tree"
STOCK = "stock"  # what serves every call the policy does not route: SGLang's own kernel
RELEASE_VERSION = "1"  # the wheel's version: the name already follows from the content
MAX_DESCRIPTOR_BYTES = 4 << 20  # 8192 sealed files at ~200 bytes each, with room
MAX_SERIAL = (1 << 53) - 1  # exact in every JSON reader
MAX_ISSUED = 253402300799  # 9999-12-31T23:59:59Z: verify prints the date; one past it crashed verify (red team s21)


@dataclass(frozen=True)
class RuntimePins:
    """The exact runtime the release was built for (cacheon_subnet/pins.py at build time)."""

    sglang: str
    torch: str
    triton: str
    sglang_kernel: str


@dataclass(frozen=True)
class Stamp:
    """A release's place in its owner's sequence (serial) and its build time (issued, UTC seconds)."""

    serial: int
    issued: int

    @staticmethod
    def now(serial: int | None = None) -> Stamp:
        """SOURCE_DATE_EPOCH when set (reproducible builds), else the clock; the serial defaults to
        the same seconds, so an owner's later build has a higher serial unless they number them."""
        raw = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
        if raw and not raw.isdigit():
            raise UsageError(f"SOURCE_DATE_EPOCH={raw!r}: expected UTC seconds (decimal digits)")
        issued = int(raw) if raw else int(time.time())
        return Stamp(issued if serial is None else serial, issued)


def pinned_runtime() -> RuntimePins:
    return RuntimePins(SGLANG_PIN, TORCH_PIN, TRITON_PIN, SGLANG_KERNEL_PIN)


@dataclass(frozen=True)
class ReleaseCrown:
    """One crowned slot. Speedups are None for a release built from bundles nobody measured."""

    slot: str
    bundle_digest: str
    contribution_id: str
    arena_id: str
    measured_speedup: float | None
    speedup_vs_stock: float | None


@dataclass(frozen=True)
class DimRule:
    """A manifest dim constraint: a call outside it goes to stock."""

    dim: str
    min: int | None
    max: int | None
    multiple_of: int | None
    one_of: tuple[int, ...]


@dataclass(frozen=True)
class Route:
    """Calls of `slot` in `dtypes` whose dims satisfy every rule go to this kernel."""

    slot: str
    variant: str
    bundle_digest: str
    dtypes: tuple[str, ...]
    constraints: tuple[DimRule, ...]


@dataclass(frozen=True)
class EngineSetting:
    """An engine setting a crowned slot needs to take effect at all: SGLang must call the chokepoint
    the seam routes (seams/table.py). `server_arg` is the ServerArgs field (`--attention-backend`)."""

    slot: str
    server_arg: str
    value: str
    why: str

    @property
    def flag(self) -> str:
        return f"--{self.server_arg.replace('_', '-')} {self.value}"

    def line(self) -> str:
        """The one line `release verify` and the runtime say."""
        return f"serving: {self.slot} takes effect only with {self.flag} ({self.why})"


# Per slot, what the engine must run for the crowned kernel to be called. attention.decode routes
# the triton backend's decode_attention_fwd; SGLang's default decode attention on Hopper is FA3,
# which never calls it: without the flag the release loads, and the crown serves nothing.
ENGINE_NEEDS: dict[str, tuple[EngineSetting, ...]] = {
    "attention.decode": (
        EngineSetting(
            "attention.decode",
            "attention_backend",
            "triton",
            "the crown replaces the triton backend's decode_attention_fwd; "
            "SGLang's default decode attention on Hopper is FA3, which never calls it",
        ),
    ),
}


def engine_settings(slots: tuple[str, ...] | list[str]) -> tuple[EngineSetting, ...]:
    """What the engine must run for these crowned slots, in slot order (empty: any settings)."""
    return tuple(e for slot in sorted(set(slots)) for e in ENGINE_NEEDS.get(slot, ()))


@dataclass(frozen=True)
class ServingPolicy:
    routes: tuple[Route, ...]
    bindings: tuple[str, ...]  # the seam bindings armed (seams/table.py); every other seam stays off
    fallback: str  # "stock": what serves an unrouted call, and a routed call whose kernel fails
    engine: tuple[EngineSetting, ...] = ()  # settings a crowned slot needs to take effect (ENGINE_NEEDS)


@dataclass(frozen=True)
class SealedFile:
    path: str  # relative to the release package
    sha256: str
    size: int


@dataclass(frozen=True)
class NativeArtifact:
    op: str  # "slot/variant"
    digest: str


@dataclass(frozen=True)
class Descriptor:
    schema: str
    serial: int  # grows with each release of one owner: `verify` refuses one older than it has verified
    issued: int  # when it was built, UTC seconds (SOURCE_DATE_EPOCH when set: builds stay reproducible)
    runtime: RuntimePins
    cacheon_subnet: str  # the cacheon-subnet version that built it: the wheel's METADATA requires it
    seam_table: str  # seam_table_digest() of the cacheon that built it
    tree_digest: str  # the sealed engine tree's digest (bundle/engine_tree.py)
    crowns: tuple[ReleaseCrown, ...]
    policy: ServingPolicy
    native: tuple[NativeArtifact, ...]  # empty until CUDA crowns are released
    files: tuple[SealedFile, ...]


def seam_table_digest() -> str:
    """SHA-256 of the seam table every row of which the release routes through: a runtime whose
    table differs would route (or patch) otherwise than the arena that measured the crowns."""
    doc = {
        "adapters": [asdict(a) for a in SEAM_ADAPTERS],
        "plugin_group": PLUGIN_GROUP,
        "hook_targets": sorted(HOOK_TARGETS),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def canonical(desc: Descriptor) -> bytes:
    return json.dumps(to_json(desc), sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def descriptor_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def package_name(data: bytes) -> str:
    """The release's import package (and distribution) name follows from its descriptor's bytes."""
    return PREFIX + descriptor_digest(data)[:12]


def summary(desc: Descriptor) -> str:
    """The wheel METADATA's Summary line (verify rebuilds METADATA from the descriptor)."""
    return "Cacheon engine release: " + ", ".join(c.slot for c in desc.crowns)


def requirements(desc: Descriptor) -> tuple[str, ...]:
    """The wheel METADATA's Requires-Dist lines: exactly these, so pip fetches nothing unsigned."""
    return (f"cacheon-subnet=={desc.cacheon_subnet}", f"sglang=={desc.runtime.sglang}")


def parse(data: bytes) -> Descriptor:
    """Strict read: the schema, every field's type, and the bytes must be the canonical form."""
    if len(data) > MAX_DESCRIPTOR_BYTES:
        raise RecordError(f"{DESCRIPTOR_FILE}: {len(data)} bytes, more than {MAX_DESCRIPTOR_BYTES}")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # '[' * 10**5: RecursionError
        raise RecordError(f"{DESCRIPTOR_FILE}: not JSON ({type(e).__name__}: {str(e)[:160]})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise RecordError(f"{DESCRIPTOR_FILE}: schema {got!r}, expected {SCHEMA!r}")
    desc = from_json(Descriptor, doc)
    for field, lowest, highest in (("serial", 1, MAX_SERIAL), ("issued", 0, MAX_ISSUED)):
        value = getattr(desc, field)
        if not lowest <= value <= highest:
            raise RecordError(f"{DESCRIPTOR_FILE}: {field} {value} outside [{lowest}, {highest}]")
    if canonical(desc) != data:
        raise RecordError(
            f"{DESCRIPTOR_FILE}: not in canonical form (sorted keys, no spaces): the signed bytes are ambiguous"
        )
    return desc
