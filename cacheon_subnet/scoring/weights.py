"""From settled crowns to the weight vector a validator publishes: a pure function.

Policy, and why:

* Equal share per target. Every target in the catalog owns ``1 / len(targets)`` of the
  miner emission, so a hard target (attention) is not drowned by an easy one, and the
  subnet's payout does not shift when a miner floods one target with submissions.
* Burn to the owner uid. An uncrowned target's share, and the share of a crown whose
  holder is no longer registered (its hotkey has no uid), goes to ``owner_uid``. Paying
  it to other miners would reward them for work they did not do; on Bittensor, weight on
  the owner uid is the accepted way to not emit.
* Improvement credit, linear and saturating. ``improvement_ppm = (speedup_vs_stock - 1) *
  1e6``; the holder gets ``min(1, improvement_ppm / full_credit_ppm)`` of the share
  (``full_credit_ppm`` per target can be overridden, because a small op cannot move
  end-to-end throughput as much as attention can). Linear keeps the incentive honest:
  every extra ppm is worth the same until full credit, so at the default (50,000 ppm, i.e.
  +5 % end-to-end, a large win for one kernel) a 0.1 % win earns 1/50 of the share and a
  20 % win the whole of it; the minimum crown (+0.75 %) earns 15 %. Saturation bounds what
  a measurement outlier can earn (the share, no more). speedup_vs_stock is the
  chained ratio, which is what the holder's kernel delivers on its own (C replaces only
  this target's kernel in the incumbent stack).
* Age decay ``h / (h + age)`` with ``h = half_life_blocks`` and ``age = block -
  crowned_block``: half the credit after one half-life, a quarter after three. The decayed
  remainder burns too, so a stale crown does not earn forever and dethroning it (which
  resets age to 0) is always worth it. The default, 100,800 blocks (14 days at 12 s), is
  long compared with one evaluation (hours), short compared with a season.
* Determinism: targets are de-duplicated and sorted, sums use ``math.fsum`` (exactly
  rounded, so independent of order), and the result is keyed by uid in ascending order;
  the same crowns give the same vector on every validator regardless of input order.
  Crowns for targets not in ``targets`` (retired) earn nothing.

``to_u16`` converts to the chain's vector like the SDK does: max-upscale to 65535, round
to nearest, drop zeros, uids ascending.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cacheon_subnet.scoring.settle import Crown, ScoringError

U16_MAX = 65535
BLOCKS_PER_DAY = 7200  # 12 s blocks


@dataclass(frozen=True)
class WeightPolicy:
    """How crowns turn into shares: age half-life and the improvement that earns full credit."""

    half_life_blocks: int = 14 * BLOCKS_PER_DAY
    full_credit_ppm: int = 50_000  # +5 % end-to-end vs stock earns the whole target share
    target_full_credit_ppm: tuple[tuple[str, int], ...] = ()  # per-target overrides

    def __post_init__(self) -> None:
        if not (isinstance(self.half_life_blocks, int) and self.half_life_blocks > 0):
            raise ScoringError(f"WeightPolicy.half_life_blocks: must be an int > 0, got {self.half_life_blocks!r}")
        for target, ppm in ((None, self.full_credit_ppm), *self.target_full_credit_ppm):
            if not (isinstance(ppm, int) and ppm > 0):
                where = f"[{target!r}]" if target else ""
                raise ScoringError(f"WeightPolicy.full_credit_ppm{where}: must be an int > 0, got {ppm!r}")
        names = [t for t, _ in self.target_full_credit_ppm]
        if len(names) != len(set(names)):
            raise ScoringError("WeightPolicy.target_full_credit_ppm: a target is listed twice")

    def full_credit_for(self, target: str) -> int:
        for name, ppm in self.target_full_credit_ppm:
            if name == target:
                return ppm
        return self.full_credit_ppm

    def credit(self, target: str, speedup_vs_stock: float) -> float:
        """Fraction of the target share the improvement earns, in [0, 1]."""
        ppm = (speedup_vs_stock - 1.0) * 1e6
        if not ppm > 0:
            return 0.0
        return min(1.0, ppm / self.full_credit_for(target))

    def decay(self, age: int) -> float:
        """h / (h + age): 1 when fresh, 1/2 after one half-life."""
        return self.half_life_blocks / (self.half_life_blocks + age)


@dataclass(frozen=True)
class TargetPayout:
    """One line of the explanation: what a target paid, to whom, and what burned."""

    target: str
    uid: int | None  # holder uid, None when uncrowned or unregistered
    hotkey: str | None
    share: float
    credit: float
    decay: float
    paid: float
    burned: float
    reason: str


def payout_table(
    crowns: Sequence[Crown], targets: Sequence[str], hotkey_to_uid: Mapping[str, int], block: int, policy: WeightPolicy
) -> tuple[TargetPayout, ...]:
    """Per-target breakdown (sorted by target) behind compute_weights; handy for logs and audits."""
    names = sorted(set(targets))
    by_target: dict[str, Crown] = {}
    for c in crowns:
        if c.target in by_target:
            raise ScoringError(f"Crown.target: two crowns for {c.target!r}")
        if c.crowned_block > block:
            raise ScoringError(f"Crown.crowned_block: {c.target!r} crowned at {c.crowned_block}, after {block}")
        by_target[c.target] = c
    if not names:
        return ()
    share = 1.0 / len(names)
    lines: list[TargetPayout] = []
    for target in names:
        crown = by_target.get(target)
        if crown is None:
            lines.append(TargetPayout(target, None, None, share, 0.0, 0.0, 0.0, share, "uncrowned: share burns"))
            continue
        uid = hotkey_to_uid.get(crown.hotkey)
        if uid is None:
            lines.append(
                TargetPayout(
                    target,
                    None,
                    crown.hotkey,
                    share,
                    0.0,
                    0.0,
                    0.0,
                    share,
                    f"holder {crown.hotkey} not registered: share burns",
                )
            )
            continue
        age = block - crown.crowned_block
        credit = policy.credit(target, crown.speedup_vs_stock)
        decay = policy.decay(age)
        paid = share * credit * decay
        lines.append(
            TargetPayout(
                target,
                uid,
                crown.hotkey,
                share,
                credit,
                decay,
                paid,
                share - paid,
                f"speedup_vs_stock {crown.speedup_vs_stock:.4f} -> credit {credit:.4f} "
                f"(full at {policy.full_credit_for(target)} ppm), age {age} blocks -> decay {decay:.4f}",
            )
        )
    return tuple(lines)


def compute_weights(
    crowns: Sequence[Crown],
    targets: Sequence[str],
    hotkey_to_uid: Mapping[str, int],
    owner_uid: int,
    block: int,
    policy: WeightPolicy,
) -> dict[int, float]:
    """The normalised weight per uid (non-negative, sums to 1, uids ascending); the rest burns to owner_uid."""
    if not (isinstance(owner_uid, int) and 0 <= owner_uid <= U16_MAX):
        raise ScoringError(f"owner_uid: must be an int in 0..{U16_MAX}, got {owner_uid!r}")
    lines = payout_table(crowns, targets, hotkey_to_uid, block, policy)
    paid: dict[int, list[float]] = {}
    for line in lines:
        if line.uid is not None and line.paid > 0:
            paid.setdefault(line.uid, []).append(line.paid)
    weights = {uid: math.fsum(parts) for uid, parts in paid.items()}
    burn = max(0.0, 1.0 - math.fsum(weights.values()))
    weights[owner_uid] = weights.get(owner_uid, 0.0) + burn
    total = math.fsum(weights.values())
    return {uid: weights[uid] / total for uid in sorted(weights) if weights[uid] > 0}


def to_u16(weights: Mapping[int, float]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(uids, values) for set_weights: max-upscaled to 65535, rounded, zeros dropped, uids ascending."""
    for uid, w in weights.items():
        if not (isinstance(uid, int) and 0 <= uid <= U16_MAX):
            raise ScoringError(f"to_u16: uid {uid!r} not in 0..{U16_MAX}")
        if not (math.isfinite(w) and w >= 0):
            raise ScoringError(f"to_u16: weight of uid {uid} must be finite and >= 0, got {w!r}")
    top = max(weights.values(), default=0.0)
    if top == 0:
        raise ScoringError("to_u16: all weights are zero; the chain would reject an empty vector")
    uids: list[int] = []
    values: list[int] = []
    for uid in sorted(weights):
        value = round(weights[uid] / top * U16_MAX)
        if value:
            uids.append(uid)
            values.append(value)
    return tuple(uids), tuple(values)
