"""Validators that agree (issue 34 item 4): recorded H200 windows through the real judge, settlement,
weights and Yuma, for N honest validators on different cards.

Why a simulation: one lent H200 cannot show what N validators on N cards decide about one
contribution. The recorded stock-vs-stock windows (configs/consensus/h200-stock-windows.json,
extracted from docs/results by scripts/consensus_sim.py) carry everything a card's measurement
adds to a ratio: within-engine drift, dips, role bias, box-to-box noise. Each simulated run of a
validator draws one recorded engine run, bootstraps its B C C B′ cycles (a fresh engine of that
box) and multiplies the C windows by the contribution's true gain on that validator's card;
nothing else is invented. The verdict is then the product's own code path: arena.verdict.speed.judge
on the arena's [speed] policy, a PASS re-measured in a confirmation engine (confirm_cycles cycles,
another draw), the row settled by cacheon_subnet.scoring.settle_target, the crowns turned into a
weight row by compute_weights/to_u16, and the rows of every validator run through yuma_epochs.

Cards: each validator's card runs at 0.85-0.95 of a reference card (5-15 % apart in absolute
speed), which scales every window alike. `kernel_skew` > 0 also lets the slot's kernel run up to
that fraction faster or slower than the rest of the step on a card, so a kernel with share f of
the step gains slightly differently on each card (a sensitivity knob: no measured figure). Not modelled: the wall-clock and prefill guards (the
fixture carries the decode-step clock only), quality (every contribution here is faithful).
"""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from arena.config_sections import SpeedSection
from arena.verdict.speed import UNCONFIRMED, SpeedVerdict, Window, judge
from cacheon_subnet.errors import CacheonError
from cacheon_subnet.scoring.settle import Evidence, SpeedPolicy, Verdict, settle_target
from cacheon_subnet.scoring.weights import WeightPolicy, compute_weights, to_u16
from cacheon_subnet.scoring.yuma import yuma_epochs

SCHEMA = "cacheon.h200-windows/1"
ROLES = ("B", "C", "B'")
OWNER_UID = 0
EPOCHS = 20


class FixtureError(CacheonError, ValueError):
    """The recorded-windows fixture is malformed: which file, which run, which field."""


Cycle = dict[str, tuple[float, ...]]  # role -> window values, normalised by the run's stock median


@dataclass(frozen=True)
class RecordedRun:
    """One engine's stock-vs-stock windows on the verdict clock, as recorded on the H200."""

    source: str  # docs/results file and run name
    cycles: tuple[Cycle, ...]


@dataclass(frozen=True)
class ArenaWindows:
    arena: str  # the arena's name (configs/arena/*.toml `name`)
    config: str  # the config whose [speed] policy judged them
    slot: str  # the slot whose stock kernel ran as C
    metric: str
    runs: tuple[RecordedRun, ...]


def _cycles(where: str, raw: object) -> tuple[Cycle, ...]:
    if not isinstance(raw, list) or not raw:
        raise FixtureError(f"{where}: `cycles` must be a non-empty list")
    out: list[Cycle] = []
    for i, c in enumerate(raw):
        if not isinstance(c, dict) or any(not isinstance(c.get(r), list) or not c[r] for r in ROLES):
            raise FixtureError(f"{where} cycle {i}: needs non-empty lists for {ROLES}")
        vals = {r: tuple(float(v) for v in c[r]) for r in ROLES}
        if not all(v > 0 for vs in vals.values() for v in vs):
            raise FixtureError(f"{where} cycle {i}: window values must be positive")
        out.append(vals)
    stock = statistics.median(v for c in out for r in ("B", "B'") for v in c[r])
    return tuple({r: tuple(v / stock for v in c[r]) for r in ROLES} for c in out)


def load_windows(path: str | Path) -> dict[str, ArenaWindows]:
    """The fixture, per arena name; values normalised so each run's stock median is 1."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise FixtureError(f"{path}: cannot read the windows fixture ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise FixtureError(f"{path}: schema must be {SCHEMA!r}")
    out = {}
    for name, a in (doc.get("arenas") or {}).items():
        where = f"{path} arena {name!r}"
        try:
            runs = tuple(RecordedRun(r["source"], _cycles(f"{where} run {r['source']!r}", r["cycles"])) for r in a["runs"])
            out[name] = ArenaWindows(name, a["config"], a["slot"], doc["metric"], runs)
        except (KeyError, TypeError) as e:
            raise FixtureError(f"{where}: missing field {e}") from None
        if len(runs) < 2:
            raise FixtureError(f"{where}: at least 2 recorded runs are needed to draw from")
    if not out:
        raise FixtureError(f"{path}: no arenas")
    return out


@dataclass(frozen=True)
class Card:
    """A validator's H200 relative to the reference card: throughput factors on the slot's kernel
    and on the rest of the step (independent: a card can be slower in HBM than in compute)."""

    kernel: float
    rest: float

    def gain(self, true_gain: float, share: float) -> float:
        """The contribution's gain on this card, given its gain and the kernel's step share on the
        reference card (the kernel saves the same fraction of its own time everywhere)."""
        saved = (1 - 1 / true_gain) / share  # fraction of the kernel's time the contribution saves
        before = share / self.kernel + (1 - share) / self.rest
        after = share * (1 - saved) / self.kernel + (1 - share) / self.rest
        return before / after


@dataclass(frozen=True)
class Contribution:
    name: str
    gain: float  # true end-to-end gain on the reference card (1.0: no faster than stock)


@dataclass(frozen=True)
class SimConfig:
    speed: SpeedSection  # the arena's verdict policy (configs/arena/*.toml [speed])
    settle: SpeedPolicy = field(default_factory=SpeedPolicy)  # the validator's settlement bar
    weights: WeightPolicy = field(default_factory=WeightPolicy)
    validators: int = 8
    cycles: int = 8  # the arena's [workload] cycles
    kernel_share: float = 0.11  # the slot's share of the decode step (MoE fused experts: 11 %)
    card_spread: tuple[float, float] = (0.85, 0.95)  # cards 5-15 % apart in absolute speed
    kernel_skew: float = 0.0  # how far the kernel's speed on a card may differ from the rest's
    stakes: tuple[float, ...] = ()  # empty: equal stakes
    remeasures: int = 2  # a NO_DECISION is measured again this often (ValidatorConfig.max_remeasure)
    # False: the judge's NO_DECISION for a ratio in [1 + margin, noise-raised bar) is read as the
    # FAIL it was before 2026-12-05 (the before/after comparison and the test's control)
    band: bool = True


@dataclass(frozen=True)
class Judged:
    verdict: Verdict
    ratio: float
    noise: float
    remeasures: int = 0  # arena runs spent after the first (each a GPU verdict: engine, maybe confirmation)


def _run(rng: random.Random, arena: ArenaWindows, cycles: int, gain: float, speed: float) -> list[tuple[Window, float]]:
    """One simulated engine: a recorded run, its cycles bootstrapped, C scaled by the gain."""
    rec = rng.choice(arena.runs)
    samples: list[tuple[Window, float]] = []
    for c in range(cycles):
        cyc = rng.choice(rec.cycles)
        for role in ROLES:
            for v in cyc[role]:
                value = v * speed * (gain if role == "C" else 1.0)
                samples.append((Window(len(samples), c, role), value))
    return samples


def _verdict(v: SpeedVerdict, cfg: SimConfig) -> Verdict:
    if not cfg.band and v.verdict == "NO_DECISION" and v.reason.startswith(UNCONFIRMED):
        return Verdict.FAIL  # the rule before the band: under the noise-raised bar is FAIL
    return Verdict(v.verdict)


def _once(rng: random.Random, arena: ArenaWindows, cfg: SimConfig, gain: float, speed: float) -> Judged:
    first: SpeedVerdict = judge(_run(rng, arena, cfg.cycles, gain, speed), cfg.speed)
    verdict = _verdict(first, cfg)
    if verdict == Verdict.PASS and cfg.speed.confirm_cycles:
        # arena/run.py: a confirmation that is not PASS (FAIL, or NO_DECISION in the band) makes
        # the whole run NO_DECISION "not confirmed"
        again = judge(_run(rng, arena, cfg.speed.confirm_cycles, gain, speed), cfg.speed)
        if again.verdict != "PASS":
            verdict = Verdict.NO_DECISION
    return Judged(verdict, first.ratio, first.noise)


def measure(rng: random.Random, arena: ArenaWindows, cfg: SimConfig, gain: float, card: Card) -> Judged:
    """What one validator's arena decides: judge, a PASS confirmed in a fresh engine, and a
    NO_DECISION measured again up to `remeasures` times (the ledger's max_remeasure)."""
    speed = card.rest  # absolute speed: every window scales (the ratio does not)
    j = _once(rng, arena, cfg, gain, speed)
    for n in range(1, cfg.remeasures + 1):
        if j.verdict != Verdict.NO_DECISION:
            break
        j = replace(_once(rng, arena, cfg, gain, speed), remeasures=n)
    return j


@dataclass(frozen=True)
class Row:
    """One contribution over every round: how the honest validators agreed and what Yuma paid."""

    name: str
    gain: float
    crown_rate: float  # share of validator-rounds that crowned it
    unanimous: float  # share of rounds in which every validator decided alike (all crown or none)
    paid: float  # mean Yuma incentive to its miner, as a share of its target's share
    paid_if_all: float  # what it is paid when every validator crowns it (same units; nan if never)
    min_trust: float  # mean over rounds of the lowest validator trust
    remeasures: float = 0.0  # arena runs spent on re-measures per 100 validator measurements of it
    undecided: float = 0.0  # share of validator-rounds still NO_DECISION after every re-measure


@dataclass(frozen=True)
class Report:
    rows: tuple[Row, ...]
    rounds: int
    all_agree: float  # share of rounds in which every contribution was decided alike by all


def _cards(rng: random.Random, cfg: SimConfig) -> list[Card]:
    lo, hi = cfg.card_spread
    out = []
    for _ in range(cfg.validators):
        speed = rng.uniform(lo, hi)
        out.append(Card(speed * (1 + rng.uniform(-cfg.kernel_skew, cfg.kernel_skew)), speed))
    return out


def simulate(arena: ArenaWindows, contributions: Sequence[Contribution], cfg: SimConfig, rounds: int, seed: int) -> Report:
    """`rounds` rounds: every validator (its own card) measures and settles every contribution,
    each in its own target; every validator publishes compute_weights -> to_u16; Yuma pays."""
    rng = random.Random(seed)
    names = [c.name for c in contributions]
    uid = {c.name: i + 1 for i, c in enumerate(contributions)}  # uid 0 burns
    stakes = list(cfg.stakes) or [1.0] * cfg.validators
    if len(stakes) != cfg.validators:
        raise ValueError(f"SimConfig.stakes: {len(stakes)} stakes for {cfg.validators} validators")
    crowned = {n: 0 for n in names}
    spent = {n: 0 for n in names}
    undecided = {n: 0 for n in names}
    unanimous = {n: 0 for n in names}
    paid: dict[str, list[float]] = {n: [] for n in names}
    paid_all: dict[str, list[float]] = {n: [] for n in names}
    trust: list[float] = []
    agree = 0
    share = 1.0 / len(contributions)
    for r in range(rounds):
        cards = _cards(rng, cfg)
        rows = np.zeros((cfg.validators, len(contributions) + 1))
        outcomes: dict[str, list[bool]] = {n: [] for n in names}
        for v, card in enumerate(cards):
            crowns = []
            for c in contributions:
                j = measure(rng, arena, cfg, card.gain(c.gain, cfg.kernel_share), card)
                spent[c.name] += j.remeasures
                undecided[c.name] += j.verdict == Verdict.NO_DECISION
                e = Evidence(c.name, c.name, c.name, 1, j.verdict, True, j.ratio, j.noise, arena.arena, 10 + r, None)
                s = settle_target(c.name, None, [e], cfg.settle, 20 + r)
                outcomes[c.name].append(s.crown is not None)
                if s.crown is not None:
                    crowns.append(s.crown)
            w = compute_weights(crowns, names, uid, OWNER_UID, 20 + r, cfg.weights)
            ids, values = to_u16(w)
            rows[v, list(ids)] = values
        result = yuma_epochs(rows, stakes, EPOCHS)
        trust.append(float(result.validator_trust.min()))
        every = True
        for n in names:
            got = outcomes[n]
            crowned[n] += sum(got)
            same = all(got) or not any(got)
            unanimous[n] += same
            every &= same
            p = float(result.incentive[uid[n]]) / share
            paid[n].append(p)
            if all(got):
                paid_all[n].append(p)
        agree += every
    out = tuple(
        Row(
            c.name,
            c.gain,
            crowned[c.name] / (rounds * cfg.validators),
            unanimous[c.name] / rounds,
            statistics.fmean(paid[c.name]),
            statistics.fmean(paid_all[c.name]) if paid_all[c.name] else float("nan"),
            statistics.fmean(trust),
            100 * spent[c.name] / (rounds * cfg.validators),
            undecided[c.name] / (rounds * cfg.validators),
        )
        for c in contributions
    )
    return Report(out, rounds, agree / rounds)


def ratio_sigma(arena: ArenaWindows, cfg: SimConfig, draws: int, seed: int) -> float:
    """The spread (SD) of one validator's measured C/B at no gain, across engines and cards: the
    σ that 'bar ± 2σ' is counted in."""
    rng = random.Random(seed)
    ratios = [judge(_run(rng, arena, cfg.cycles, 1.0, 1.0), cfg.speed).ratio for _ in range(draws)]
    return statistics.stdev(ratios)
