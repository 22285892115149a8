"""Weights from crowns: equal target shares, improvement credit, age decay, burns, u16."""

from __future__ import annotations

import math
import random

import pytest

from cacheon_subnet.scoring import Crown, ScoringError, WeightPolicy, compute_weights, payout_table, to_u16

OWNER = 0
TARGETS = ("norm.rmsnorm", "activation.silu_and_mul")
UIDS = {"hk-a": 1, "hk-b": 2, "hk-c": 3}
POLICY = WeightPolicy(half_life_blocks=1_000, full_credit_ppm=50_000)
BLOCK = 10_000


def crown(target: str, hotkey: str, vs_stock: float, crowned: int = BLOCK) -> Crown:
    return Crown(
        target=target,
        hotkey=hotkey,
        contribution_id=f"{target}:{hotkey}",
        commit_block=crowned - 10,
        crowned_block=crowned,
        measured_speedup=vs_stock,
        speedup_vs_stock=vs_stock,
        arena_id="a",
    )


def weights(crowns, targets=TARGETS, uids=UIDS, block=BLOCK, policy=POLICY):
    return compute_weights(crowns, targets, uids, OWNER, block, policy)


def test_weights_are_non_negative_and_sum_to_one():
    cases = [
        [],
        [crown(TARGETS[0], "hk-a", 1.02)],
        [crown(TARGETS[0], "hk-a", 1.30, crowned=BLOCK - 5_000), crown(TARGETS[1], "hk-b", 1.01)],
        [crown(TARGETS[0], "hk-a", 1.30), crown(TARGETS[1], "hk-a", 1.30)],
    ]
    for crowns in cases:
        w = weights(crowns)
        assert all(v >= 0 for v in w.values())
        assert math.isclose(sum(w.values()), 1.0, rel_tol=0, abs_tol=1e-12)


def test_full_credit_fresh_crown_takes_its_whole_share():
    w = weights([crown(TARGETS[0], "hk-a", 1.05)])  # exactly full credit at 50,000 ppm
    assert w == pytest.approx({OWNER: 0.5, 1: 0.5})


def test_nothing_crowned_burns_everything_to_the_owner():
    assert weights([]) == {OWNER: 1.0}
    assert weights([crown("retired.op", "hk-a", 1.5)]) == {OWNER: 1.0}  # crowns outside targets earn nothing
    assert weights([], targets=()) == {OWNER: 1.0}


def test_the_decayed_part_burns():
    # age == half-life: the holder keeps half its share, the rest burns
    w = weights([crown(TARGETS[0], "hk-a", 1.05, crowned=BLOCK - 1_000)])
    assert w == pytest.approx({OWNER: 0.75, 1: 0.25})
    w = weights([crown(TARGETS[0], "hk-a", 1.05, crowned=BLOCK - 3_000)])
    assert w[1] == pytest.approx(0.5 * 1_000 / 4_000)
    # decay is monotone: an older crown never earns more
    ages = [0, 10, 100, 1_000, 10_000, 100_000]
    paid = [weights([crown(TARGETS[0], "hk-a", 1.05, crowned=BLOCK - a)], block=BLOCK)[1] for a in ages[:3]]
    paid += [weights([crown(TARGETS[0], "hk-a", 1.05, crowned=0)], block=a)[1] for a in ages[3:]]
    assert paid == sorted(paid, reverse=True) and paid[0] > paid[-1]


def test_unregistered_holder_burns():
    w = weights([crown(TARGETS[0], "hk-gone", 1.10), crown(TARGETS[1], "hk-b", 1.05)])
    assert w == pytest.approx({OWNER: 0.5, 2: 0.5})
    assert "not registered" in payout_table([crown(TARGETS[0], "hk-gone", 1.1)], TARGETS, UIDS, BLOCK, POLICY)[1].reason


def test_payout_is_monotone_in_improvement_and_saturates():
    speedups = [1.0, 1.001, 1.0075, 1.01, 1.02, 1.04, 1.05, 1.10, 1.20]
    paid = [weights([crown(TARGETS[0], "hk-a", s)]).get(1, 0.0) for s in speedups]
    assert paid == sorted(paid)
    assert paid[0] == 0.0  # no improvement, no pay
    assert paid[1] < paid[2] < paid[3] < paid[4] < paid[5] < paid[6]  # strictly increasing below saturation
    assert paid[6] == paid[7] == paid[8] == pytest.approx(0.5)  # saturated at full credit
    # a crown slower than stock (e.g. re-based into a new arena) earns nothing, never a negative weight
    assert weights([crown(TARGETS[0], "hk-a", 0.97)]) == {OWNER: 1.0}
    lines = payout_table([crown(TARGETS[0], "hk-a", 0.97)], TARGETS, UIDS, BLOCK, POLICY)
    (line,) = [x for x in lines if x.target == TARGETS[0]]
    assert line.credit == 0.0 and line.paid == 0.0 and line.burned == pytest.approx(0.5)
    # a 0.1 % win earns 1/50 of a 20 % win at the default full credit (5 %)
    default = WeightPolicy()
    small = compute_weights([crown(TARGETS[0], "hk-a", 1.001)], TARGETS, UIDS, OWNER, BLOCK, default)[1]
    big = compute_weights([crown(TARGETS[0], "hk-a", 1.20)], TARGETS, UIDS, OWNER, BLOCK, default)[1]
    assert small / big == pytest.approx(1 / 50)


def test_per_target_full_credit_override():
    policy = WeightPolicy(half_life_blocks=1_000, target_full_credit_ppm=(("activation.silu_and_mul", 10_000),))
    w = weights([crown(TARGETS[0], "hk-a", 1.01), crown(TARGETS[1], "hk-b", 1.01)], policy=policy)
    assert w[2] == pytest.approx(0.5)  # small op: +1 % is full credit
    assert w[1] == pytest.approx(0.5 * 0.2)  # default 50,000 ppm: +1 % is a fifth


def test_one_holder_of_several_targets_and_owner_as_holder_sum():
    w = weights([crown(TARGETS[0], "hk-a", 1.05), crown(TARGETS[1], "hk-a", 1.05)])
    assert w == pytest.approx({1: 1.0})
    w = weights([crown(TARGETS[0], "hk-owner", 1.05)], uids={**UIDS, "hk-owner": OWNER})
    assert w == pytest.approx({OWNER: 1.0})


def test_deterministic_under_input_permutation():
    targets = ["t0", "t1", "t2", "t3", "t4", "t5"]
    uids = {f"hk{i}": i + 1 for i in range(6)}
    crowns = [crown(f"t{i}", f"hk{i % 4}", 1 + 0.013 * (i + 1), crowned=BLOCK - 137 * i) for i in range(5)]
    reference = compute_weights(crowns, targets, uids, OWNER, BLOCK, POLICY)
    rng = random.Random(3)
    for _ in range(30):
        c, t, u = crowns[:], targets[:] + targets[:2], list(uids.items())
        rng.shuffle(c), rng.shuffle(t), rng.shuffle(u)
        got = compute_weights(c, t, dict(u), OWNER, BLOCK, POLICY)
        assert list(got.items()) == list(reference.items())  # same values, bit for bit, same key order
    assert list(reference) == sorted(reference)


def test_malformed_input_raises():
    with pytest.raises(ScoringError, match="two crowns"):
        weights([crown(TARGETS[0], "hk-a", 1.05), crown(TARGETS[0], "hk-b", 1.06)])
    with pytest.raises(ScoringError, match="crowned_block"):
        weights([crown(TARGETS[0], "hk-a", 1.05, crowned=BLOCK + 1)])
    with pytest.raises(ScoringError, match="half_life_blocks"):
        WeightPolicy(half_life_blocks=0)
    with pytest.raises(ScoringError, match="owner_uid"):
        compute_weights([], TARGETS, UIDS, -1, BLOCK, POLICY)


# --- u16 conversion ------------------------------------------------------------------------


def test_to_u16_max_upscales_rounds_and_drops_zeros():
    uids, vals = to_u16({7: 0.25, 0: 0.5, 3: 0.0, 2: 0.25, 9: 1e-9})
    assert uids == (0, 2, 7) and vals == (65535, 32768, 32768)
    assert to_u16({5: 1.0}) == ((5,), (65535,))
    assert to_u16(weights([crown(TARGETS[0], "hk-a", 1.05, crowned=BLOCK - 1_000)])) == ((0, 1), (65535, 21845))


def test_to_u16_is_independent_of_key_order():
    w = {i: (i * 37 % 11) / 10 for i in range(40)}
    shuffled = list(w.items())
    random.Random(1).shuffle(shuffled)
    assert to_u16(dict(shuffled)) == to_u16(w)


def test_to_u16_matches_the_sdk():
    sdk = pytest.importorskip("bittensor.intents.weights")
    w = {0: 0.61, 3: 0.2, 4: 0.1333, 8: 0.05, 9: 0.0067, 12: 0.0}
    uids, vals = sdk.normalize(list(w), list(w.values()))
    assert to_u16(w) == (tuple(uids), tuple(vals))


@pytest.mark.parametrize("bad", [{}, {1: 0.0}, {1: -0.1}, {1: math.nan}, {70_000: 1.0}])
def test_to_u16_rejects_what_the_chain_would(bad):
    with pytest.raises(ScoringError):
        to_u16(bad)
