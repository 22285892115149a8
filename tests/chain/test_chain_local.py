"""LocalChain: blocks, registration, timelocked commitments, weights rules, persistence."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from cacheon_subnet.chain import (
    ChainBackend,
    ChainError,
    ChainUnavailable,
    LocalChain,
    NotRegistered,
    RateLimited,
    VersionKeyTooLow,
    make_backend,
)
from cacheon_subnet.chain.local import MAX_SPACE_PER_EPOCH, quantize

NET = 7


@pytest.fixture
def chain(tmp_path: Path) -> LocalChain:
    """Frozen clock (blocks move only by advance), rate limit 100, netuid 7."""
    c = LocalChain.create(tmp_path / "chain.db", netuid=NET, seconds_per_block=0, tempo=360)
    yield c
    c.close()


def test_implements_protocol(chain: LocalChain) -> None:
    assert isinstance(chain, ChainBackend)


def test_blocks_advance_manually_and_never_back(chain: LocalChain) -> None:
    assert chain.current_block() == 0
    assert chain.advance(5) == 5
    assert chain.current_block() == 5
    with pytest.raises(ChainError) as err:
        chain.advance(-1)
    assert err.value.reason == "advance"


def test_blocks_advance_with_wall_time(tmp_path: Path) -> None:
    c = LocalChain.create(tmp_path / "w.db", seconds_per_block=0.05)
    time.sleep(0.16)
    b = c.current_block()
    assert b >= 3
    assert c.advance(10) >= b + 10


def test_registration_assigns_uids_and_metagraph(chain: LocalChain) -> None:
    assert chain.owner_uid(NET) == 0
    assert chain.register("v1", "cold-v", stake=1000.0, validator_permit=True) == 1
    assert chain.register("m1", "cold-m") == 2
    assert chain.register("m1", "cold-m") == 2  # idempotent for the same coldkey
    with pytest.raises(ChainError) as err:
        chain.register("m1", "someone-else")
    assert err.value.reason == "already_registered"
    chain.set_stake("m1", 5.0, validator_permit=True)
    mg = chain.metagraph(NET)
    assert mg.netuid == NET and mg.block == 0
    assert mg.hotkeys == ("owner", "v1", "m1")
    assert mg.uid_of("v1") == 1 and mg.uid_of("nobody") is None
    assert mg.by_uid(2).stake == 5.0 and mg.by_uid(2).validator_permit
    assert mg.by_uid(1).coldkey == "cold-v"
    with pytest.raises(KeyError):
        mg.by_uid(9)
    with pytest.raises(ChainError) as err:
        chain.metagraph(99)
    assert err.value.reason == "subnet_missing"


def test_subnet_full(chain: LocalChain) -> None:
    chain.add_subnet(3, owner_hotkey="o3", max_uids=2)
    assert chain.register("a", netuid=3) == 1
    with pytest.raises(ChainError) as err:
        chain.register("b", netuid=3)
    assert err.value.reason == "subnet_full"


def test_commitment_invisible_until_reveal_then_has_commit_block(chain: LocalChain) -> None:
    chain.register("m1", "c")
    chain.advance(3)
    assert chain.commit("m1", NET, "payload-1", reveal_after_blocks=10) == 3
    assert chain.revealed_commitments(NET) == []
    chain.advance(9)
    assert chain.revealed_commitments(NET) == []
    chain.advance(1)
    [c] = chain.revealed_commitments(NET)
    assert (c.hotkey, c.uid, c.commit_block, c.reveal_block) == ("m1", 1, 3, 13)
    assert c.data == "payload-1"


def test_commitments_ordered_by_commit_block(chain: LocalChain) -> None:
    for hk in ("a", "b"):
        chain.register(hk, "c")
    chain.commit("b", NET, "first", 5)
    chain.advance(1)
    chain.commit("a", NET, "second", 1)
    chain.advance(10)
    assert [c.hotkey for c in chain.revealed_commitments(NET)] == ["b", "a"]


def test_newer_commitment_replaces_older_once_revealed(chain: LocalChain) -> None:
    chain.register("m1", "c")
    chain.commit("m1", NET, "A", 2)
    chain.advance(2)
    assert [c.data for c in chain.revealed_commitments(NET)] == ["A"]
    chain.commit("m1", NET, "B", 5)  # sealed: A stays visible
    chain.advance(4)
    assert [c.data for c in chain.revealed_commitments(NET)] == ["A"]
    chain.advance(1)
    [c] = chain.revealed_commitments(NET)
    assert (c.data, c.commit_block, c.reveal_block) == ("B", 2, 7)


def test_sealed_commitment_replaced_before_reveal_never_reveals(chain: LocalChain) -> None:
    chain.register("m1", "c")
    chain.commit("m1", NET, "A", 3)  # would reveal at 3
    chain.advance(1)
    chain.commit("m1", NET, "B", 10)  # replaces A while A is sealed (one per hotkey)
    chain.advance(5)
    assert chain.revealed_commitments(NET) == []
    chain.advance(10)
    assert [c.data for c in chain.revealed_commitments(NET)] == ["B"]


def test_commitment_size_limits(chain: LocalChain) -> None:
    chain.register("m1", "c")
    chain.commit("m1", NET, "x" * 1024, 1)
    for bad, reason in (("x" * 1025, "commitment_too_large"), ("é" * 513, "commitment_too_large"), ("", "commitment_empty")):
        with pytest.raises(ChainError) as err:
            chain.commit("m1", NET, bad, 1)
        assert err.value.reason == reason
    with pytest.raises(ChainError) as err:
        chain.commit("m1", NET, "ok", 0)
    assert err.value.reason == "reveal_delay"
    with pytest.raises(NotRegistered):
        chain.commit("stranger", NET, "x", 1)


def test_space_per_hotkey_per_epoch(chain: LocalChain) -> None:
    chain.register("m1", "c")
    chain.register("m2", "c")
    chain.commit("m1", NET, "x" * 1024, 1)
    chain.commit("m1", NET, "x" * 1024, 1)
    chain.commit("m1", NET, "x" * 1024, 1)  # 3072 of 3100 used
    with pytest.raises(ChainError) as err:
        chain.commit("m1", NET, "tiny", 1)  # costs the 100-byte minimum
    assert err.value.reason == "space_limit" and str(MAX_SPACE_PER_EPOCH) in str(err.value)
    chain.commit("m2", NET, "tiny", 1)  # quota is per hotkey
    chain.advance(361)  # next tempo epoch resets the quota
    chain.commit("m1", NET, "x" * 1024, 1)


def test_small_commitments_cost_the_minimum(chain: LocalChain) -> None:
    chain.register("m1", "c")
    for _ in range(31):
        chain.commit("m1", NET, "a", 1)
    with pytest.raises(ChainError):
        chain.commit("m1", NET, "a", 1)


def _validator(chain: LocalChain, at_block: int = 5) -> None:
    chain.advance(at_block - chain.current_block())
    chain.register("v1", "cv", 1000.0, True)
    for hk in ("m1", "m2", "m3"):
        chain.register(hk, "cm")


def test_rate_limit_counts_from_registration_and_last_set(chain: LocalChain) -> None:
    _validator(chain, at_block=5)
    assert chain.weights_rate_limit(NET) == 100
    assert chain.last_weights_block(NET, "v1") == 5  # LastUpdate starts at registration
    with pytest.raises(RateLimited) as err:
        chain.set_weights("v1", NET, [2, 3], [1.0, 1.0], 0)
    assert err.value.retry_in_blocks == 100
    chain.advance(99)
    with pytest.raises(RateLimited) as err:
        chain.set_weights("v1", NET, [2, 3], [1.0, 1.0], 0)
    assert err.value.retry_in_blocks == 1
    chain.advance(1)
    receipt = chain.set_weights("v1", NET, [2, 3], [1.0, 1.0], 0)
    assert receipt.block == 105 and chain.last_weights_block(NET, "v1") == 105
    with pytest.raises(RateLimited):
        chain.set_weights("v1", NET, [2], [1.0], 0)
    chain.set_hyperparams(NET, weights_rate_limit=0)
    chain.set_weights("v1", NET, [2], [1.0], 0)


def test_rate_limit_per_subnet(chain: LocalChain) -> None:
    chain.add_subnet(4, owner_hotkey="o4", weights_rate_limit=3)
    chain.advance(1)
    chain.register("v", "c", 1.0, True, netuid=4)
    assert chain.weights_rate_limit(4) == 3
    chain.advance(3)
    chain.set_weights("v", 4, [0], [1.0], 0)


def test_version_key_enforced_like_the_chain(chain: LocalChain) -> None:
    _validator(chain, at_block=0)  # registered at block 0: LastUpdate 0 = never, no wait
    chain.set_hyperparams(NET, weights_version_key=29)
    assert chain.weights_version_key(NET) == 29
    with pytest.raises(VersionKeyTooLow) as err:
        chain.set_weights("v1", NET, [2], [1.0], 1)
    assert (err.value.sent, err.value.required) == (1, 29)
    assert chain.get_weights(NET, "v1") == {}  # nothing was stored
    chain.set_hyperparams(NET, weights_rate_limit=0)
    assert chain.set_weights("v1", NET, [2], [1.0], 29).version_key == 29
    assert chain.set_weights("v1", NET, [3], [1.0], 30).version_key == 30


def test_weights_read_back_and_quantization(chain: LocalChain) -> None:
    _validator(chain, at_block=0)
    receipt = chain.set_weights("v1", NET, [3, 1, 2], [0.5, 0.0, 0.25], 0)
    assert receipt.uids == (3, 2)  # zeros dropped, as the chain stores them
    assert math.isclose(sum(receipt.weights), 1.0)
    back = chain.get_weights(NET, "v1")
    assert back == dict(zip(receipt.uids, receipt.weights, strict=True))
    assert math.isclose(back[3], 2 / 3, rel_tol=1e-4)
    assert quantize([0.5, 0.25]) == [65535, 32768]
    with pytest.raises(NotRegistered):
        chain.get_weights(NET, "stranger")


@pytest.mark.parametrize(
    "uids, weights, reason",
    [
        ([1, 2], [1.0], "weights_length"),
        ([2, 2], [1.0, 1.0], "weights_duplicate_uid"),
        ([2, 9], [1.0, 1.0], "weights_invalid_uid"),
        ([2], [-1.0], "weights_invalid_value"),
        ([2], [float("nan")], "weights_invalid_value"),
        ([2, 3], [0.0, 0.0], "weights_all_zero"),
    ],
)
def test_bad_weights_rejected(chain: LocalChain, uids, weights, reason) -> None:
    _validator(chain, at_block=0)
    with pytest.raises(ChainError) as err:
        chain.set_weights("v1", NET, uids, weights, 0)
    assert err.value.reason == reason


def test_validator_permit_with_owner_and_self_exceptions(chain: LocalChain) -> None:
    _validator(chain, at_block=0)
    chain.set_hyperparams(NET, weights_rate_limit=0)
    with pytest.raises(ChainError) as err:
        chain.set_weights("m1", NET, [3], [1.0], 0)
    assert err.value.reason == "no_validator_permit"
    chain.set_weights("m1", NET, [2], [1.0], 0)  # self weight
    chain.set_weights("owner", NET, [2, 3], [1.0, 1.0], 0)  # owner, no permit
    with pytest.raises(NotRegistered):
        chain.set_weights("stranger", NET, [2], [1.0], 0)


def test_weights_matrix_for_yuma(chain: LocalChain) -> None:
    _validator(chain, at_block=0)
    chain.register("v2", "cv2", 500.0, True)  # permit, no weights yet: zero row
    chain.set_weights("v1", NET, [2, 3], [3.0, 1.0], 0)
    hotkeys, stakes, matrix = chain.weights_matrix(NET)
    assert hotkeys == ("v1", "v2") and stakes == (1000.0, 500.0)
    assert len(matrix[0]) == 6 and matrix[1] == (0.0,) * 6
    assert math.isclose(matrix[0][2], 0.75, rel_tol=1e-4) and matrix[0][0] == 0.0


def test_persistence_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    c = LocalChain.create(path, netuid=2, seconds_per_block=0, weights_rate_limit=7)
    c.register("v", "c", 10.0, True)
    c.commit("v", 2, "hello", 1)
    c.advance(4)
    c.set_weights("v", 2, [0, 1], [1.0, 1.0], 0)
    c.close()
    d = LocalChain.open(path)
    assert d.default_netuid == 2 and d.current_block() == 4
    assert d.weights_rate_limit(2) == 7
    assert [x.data for x in d.revealed_commitments(2)] == ["hello"]
    assert set(d.get_weights(2, "v")) == {0, 1}
    assert d.metagraph(2).hotkeys == ("owner", "v")
    with pytest.raises(ChainError) as err:
        LocalChain.create(path)
    assert err.value.reason == "exists"
    assert LocalChain.create(path, netuid=2, exist_ok=True).current_block() == 4
    assert isinstance(make_backend("local", path=path), LocalChain)


def test_open_rejects_missing_and_foreign_files(tmp_path: Path) -> None:
    with pytest.raises(ChainUnavailable):
        LocalChain.open(tmp_path / "none.db")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(ChainUnavailable):
        LocalChain.open(junk)
    with pytest.raises(ChainError):
        make_backend("local")
    with pytest.raises(ChainError):
        make_backend("quantum")
