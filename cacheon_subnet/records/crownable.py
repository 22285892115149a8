"""Each slot's smallest crownable gain per arena (issue 34 item 3), as typed records read from
configs/crownable.toml.

Why a data file: the figure comes from stock-vs-stock runs on a GPU and the consensus simulation
over them, not from code; bench, the leaderboard page and the API all show the same line. A slot
with no stock-vs-stock run in its arena reads "not measured": an estimate would be a number a
miner cannot trust.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from cacheon_subnet.errors import CacheonError

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "configs" / "crownable.toml"
NOT_MEASURED = "not measured"


class CrownableError(CacheonError, ValueError):
    """configs/crownable.toml is malformed: which entry, which field, why."""


@dataclass(frozen=True)
class Crownable:
    """One (arena, slot): the bar, the measured noise and the smallest gain that clears it."""

    arena: str
    arena_id: str
    slot: str
    metric: str
    bar: float
    noise: float
    half_gain: float  # half the validators crown a true gain this large
    smallest_gain: float  # every validator crowns it in >= 99 % of rounds
    runs: int
    measured_in: str
    method: str

    def line(self) -> str:
        return (
            f"smallest crownable gain {self.smallest_gain - 1:+.2%} end to end ({self.arena}, {self.slot}; bar "
            f"{self.bar:.4f} at noise {self.noise:.2%}; half the validators crown {self.half_gain - 1:+.2%}; "
            f"{self.runs} stock-vs-stock runs)"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "measured": True,
            "arena_id": self.arena_id,
            "bar": self.bar,
            "noise": self.noise,
            "half_gain": self.half_gain,
            "smallest_gain": self.smallest_gain,
            "runs": self.runs,
            "measured_in": self.measured_in,
        }


_FLOATS = ("bar", "noise", "half_gain", "smallest_gain")
_STRS = ("arena", "arena_id", "slot", "metric", "measured_in", "method")


def _entry(where: str, raw: object) -> Crownable:
    if not isinstance(raw, dict):
        raise CrownableError(f"{where}: must be a table")
    for k in _STRS:
        if not isinstance(raw.get(k), str) or not raw[k]:
            raise CrownableError(f"{where}: `{k}` must be a non-empty string")
    for k in _FLOATS:
        v = raw.get(k)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            raise CrownableError(f"{where}: `{k}` must be a finite number >= 0, got {v!r}")
    if not 1 <= raw["bar"] <= raw["half_gain"] <= raw["smallest_gain"]:
        raise CrownableError(f"{where}: needs 1 <= bar <= half_gain <= smallest_gain")
    if not isinstance(raw.get("runs"), int) or raw["runs"] < 1:
        raise CrownableError(f"{where}: `runs` must be an int >= 1 (a figure needs a stock-vs-stock run)")
    return Crownable(**{k: raw[k] for k in (*_STRS, *_FLOATS, "runs")})


def load(path: str | Path = DEFAULT_PATH) -> dict[tuple[str, str], Crownable]:
    """Every measured (arena name, slot)."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise CrownableError(f"{path}: cannot read ({e})") from None
    if doc.get("schema") != 1:
        raise CrownableError(f"{path}: `schema` must be 1")
    out: dict[tuple[str, str], Crownable] = {}
    for i, raw in enumerate(doc.get("measured") or []):
        c = _entry(f"{path} [[measured]] #{i + 1}", raw)
        if (c.arena, c.slot) in out:
            raise CrownableError(f"{path} [[measured]] #{i + 1}: ({c.arena}, {c.slot}) listed twice")
        out[(c.arena, c.slot)] = c
    return out


def lookup(arena: str, slot: str, table: dict[tuple[str, str], Crownable] | None = None) -> Crownable | None:
    return (load() if table is None else table).get((arena, slot))


def line(arena: str, slot: str, table: dict[tuple[str, str], Crownable] | None = None) -> str:
    """The one line bench, the page and the API show."""
    c = lookup(arena, slot, table)
    return c.line() if c else f"smallest crownable gain: {NOT_MEASURED} ({arena}, {slot}: no stock-vs-stock run)"


def slot_doc(slot: str, table: dict[tuple[str, str], Crownable] | None = None) -> dict[str, object]:
    """What /api/crowns carries for one slot: every arena that measured it, or "not measured"."""
    rows = sorted((c for (_, s), c in (load() if table is None else table).items() if s == slot), key=lambda c: c.arena)
    if not rows:
        return {"measured": False, "lines": [f"smallest crownable gain: {NOT_MEASURED} (no stock-vs-stock run)"]}
    return {
        "measured": True,
        "lines": [c.line() for c in rows],
        "arenas": {c.arena: c.to_json() for c in rows},
    }
