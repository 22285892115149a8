"""What a pristine engine of one arena really feeds each slot, kept as a fixture per arena
(configs/arena/fixtures/<arena>.json; issue 34 item 1).

Why: on the H200 `cacheon bench` timed the MoE arena's fused experts at 443 µs a stock call while
the arena's own decode profile put the call at ~37 µs: bench timed a workload the arena never
runs. The fixture holds the engine's side of that comparison, small enough to commit: per slot,
the stock kernel's GPU time a call and calls a step in that engine, the slot's share of the decode
step and of prefill, the argument shapes/strides/dtypes/value ranges at the window's size, and the
distributions that change a kernel's time (MoE: tokens per expert; attention: KV lengths).
`cacheon bench --arena` draws from it and checks its stock time against it; the GPU arena's
physical-floor guard (arena/verdict/floor.py) reads the stock time a call from it.

Every figure carries its source (a docs/results file, or the capture that measured it): a number
that was not measured is absent, never estimated.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cacheon_subnet.errors import CacheonError
from cacheon_subnet.records.codec import RecordError, from_json, reading, to_json

SCHEMA = 1
FIXTURES = Path(__file__).resolve().parents[2] / "configs" / "arena" / "fixtures"
STAGES = ("decode", "prefill")


class FixtureError(CacheonError, ValueError):
    """A slot-input fixture that is not what its schema says: which file, which field, why."""


def _positive(v: float, where: str) -> None:
    if not (math.isfinite(v) and v > 0):
        raise FixtureError(f"{where}: must be finite and > 0, got {v!r}")


@dataclass(frozen=True)
class Figure:
    """One measured number and where it was measured (a docs/results file, or a capture run)."""

    value: float
    source: str

    def __post_init__(self) -> None:
        if not self.source.strip():
            raise FixtureError("Figure.source: say where the number is from")


@dataclass(frozen=True)
class StageUse:
    """One slot in one stage of the pristine engine (decode step, or prefill forward)."""

    tokens: int  # the stage's size the figures are at: decode batch, or prefill tokens
    stock_us: Figure | None = reading()  # the stock kernel's GPU time a call in that engine
    calls_per_step: Figure | None = reading()
    share: Figure | None = reading()  # of the stage's summed GPU kernel time

    def __post_init__(self) -> None:
        if self.tokens < 1:
            raise FixtureError(f"StageUse.tokens: must be >= 1, got {self.tokens}")
        for k in ("stock_us", "calls_per_step"):
            f = getattr(self, k)
            if f is not None:
                _positive(f.value, f"StageUse.{k}")
        if self.share is not None and not (0.0 <= self.share.value <= 1.0):
            raise FixtureError(f"StageUse.share: a fraction of the step in [0, 1], got {self.share.value!r}")


@dataclass(frozen=True)
class ArgStats:
    """One argument as the engine passed it (the first sampled call at the window's size)."""

    name: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str
    lo: float | None = reading()
    hi: float | None = reading()
    mean: float | None = reading()
    std: float | None = reading()

    def __post_init__(self) -> None:
        if len(self.shape) != len(self.stride):
            raise FixtureError(f"ArgStats {self.name}: shape {self.shape} and stride {self.stride} differ in rank")


@dataclass(frozen=True)
class Routing:
    """MoE routing at the window's size: tokens each expert received, summed over `calls` calls of
    `tokens` tokens picking `top_k` experts each (what decides how much weight a call reads)."""

    tokens: int
    top_k: int
    calls: int
    tokens_per_expert: tuple[int, ...]
    source: str

    def __post_init__(self) -> None:
        if min(self.tokens, self.top_k, self.calls) < 1 or len(self.tokens_per_expert) < self.top_k:
            raise FixtureError(f"Routing: tokens, top_k, calls >= 1 and >= top_k experts ({self.source})")
        if (
            any(n < 0 for n in self.tokens_per_expert)
            or sum(self.tokens_per_expert) != self.calls * self.tokens * self.top_k
        ):
            raise FixtureError(
                f"Routing.tokens_per_expert: must sum to calls x tokens x top_k = "
                f"{self.calls * self.tokens * self.top_k}, got {sum(self.tokens_per_expert)} ({self.source})"
            )


@dataclass(frozen=True)
class KvLengths:
    """Decode attention's KV length per request, as recorded over `calls` calls at the window's batch."""

    calls: int
    lengths: tuple[int, ...]
    source: str

    def __post_init__(self) -> None:
        if self.calls < 1 or not self.lengths or min(self.lengths) < 1:
            raise FixtureError(f"KvLengths: calls >= 1 and lengths >= 1 ({self.source})")


@dataclass(frozen=True)
class SlotInputs:
    args: tuple[ArgStats, ...]
    decode: StageUse | None = reading()
    prefill: StageUse | None = reading()
    routing: Routing | None = reading()
    kv_lengths: KvLengths | None = reading()

    def stage(self, where: str) -> StageUse | None:
        """The stage a bench row's `where` ("window decode", "arena prefill") names."""
        return self.prefill if where.endswith("prefill") else self.decode if where.endswith("decode") else None


@dataclass(frozen=True)
class ArenaFixture:
    schema: int
    arena: str  # the arena's name (configs/arena/*.toml `name`)
    config: str
    card: str  # the GPU the engine's figures were measured on ("H200"); "" for a CPU dry run
    origin: str  # "captured by scripts/capture_slot_inputs.py ..." or "seeded from docs/results ..."
    slots: Mapping[str, SlotInputs]
    decode_step_us: Figure | None = reading()  # the decode step's GPU kernel time
    prefill_step_us: Figure | None = reading()

    def __post_init__(self) -> None:
        if self.schema != SCHEMA:
            raise FixtureError(f"ArenaFixture.schema: expected {SCHEMA}, got {self.schema}")
        for f in (self.decode_step_us, self.prefill_step_us):
            if f is not None:
                _positive(f.value, "ArenaFixture.*_step_us")

    def slot(self, slot_id: str) -> SlotInputs | None:
        return self.slots.get(slot_id)


def path_for(arena: str, root: Path = FIXTURES) -> Path:
    return root / f"{arena}.json"


def parse(text: str, where: str) -> ArenaFixture:
    try:
        return from_json(ArenaFixture, json.loads(text))
    except (ValueError, RecordError, FixtureError) as e:  # JSONDecodeError is a ValueError
        raise FixtureError(f"{where}: {e}") from None


def load(arena: str, root: Path = FIXTURES) -> ArenaFixture | None:
    """The arena's fixture, or None when it has none (bench then says "synthetic")."""
    path = path_for(arena, root)
    if not arena or not path.is_file():
        return None
    fx = parse(path.read_text(), str(path))
    if fx.arena != arena:
        raise FixtureError(f"{path}: arena {fx.arena!r} in a file named for {arena!r}")
    return fx


def for_card(arena: str, gpu: str, root: Path = FIXTURES) -> ArenaFixture | None:
    """The arena's fixture measured on the card bench runs on (`<arena>.<card>.json`, the card as
    configs/cards.toml names it, found in the device name), or None. Engine times are a card's own:
    the H100 read the MoE call at 40.6 µs where the H200's figures said 36.6, so each card's
    capture checks bench on that card; the plain `<arena>.json` stays what inputs are drawn from."""
    if not arena or not gpu:
        return None
    for path in sorted(root.glob(f"{arena}.*.json")):
        card = path.name[len(arena) + 1 : -len(".json")]
        if card and card.lower() in gpu.lower():
            fx = parse(path.read_text(), str(path))
            if fx.arena != arena or fx.card != card:
                raise FixtureError(f"{path}: arena {fx.arena!r}, card {fx.card!r} in a file named for {arena!r} on {card!r}")
            return fx
    return None


def dump(fx: ArenaFixture) -> str:
    return json.dumps(to_json(fx), indent=1, sort_keys=True, allow_nan=False) + "\n"
