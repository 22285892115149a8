"""BittensorChain against a fake client (no network): error mapping, commit, weights, reads."""

from __future__ import annotations

import types
from typing import Any

import pytest

from cacheon_subnet.chain import (
    BittensorChain,
    ChainBackend,
    ChainError,
    ChainUnavailable,
    NotRegistered,
    RateLimited,
    VersionKeyTooLow,
    make_backend,
)
from cacheon_subnet.chain.bittensor_backend import commitment_info, scale_str

bt = pytest.importorskip("bittensor")

ME = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY"


class FakeClient:
    """The slice of bt.Subtensor that BittensorChain touches."""

    def __init__(self) -> None:
        self.block = 1000
        self.storage = {
            "WeightsVersionKey": 29,
            "WeightsSetRateLimit": 100,
            "LastUpdate": [0, 900, 0],
            "SubnetOwnerHotkey": "owner",
        }
        self.uids = {ME: 1, "owner": 0}
        self.executed: list[Any] = []
        self.submitted: list[tuple] = []
        self.composed: list[Any] = []
        self.result = bt.ExtrinsicResult(success=True, extrinsic_id="1234-0002")
        self.reject_flat = False
        self.commitments: dict[str, Any] = {}
        self.subnets = types.SimpleNamespace(metagraph=self._metagraph, commitments=lambda netuid: self.commitments)
        self.weights = types.SimpleNamespace(weights=lambda netuid: {1: {2: 0.25, 3: 0.75}})

    def _metagraph(self, netuid, commitments=True):
        if netuid != 1:
            return None
        bal = types.SimpleNamespace(tao=12.5)
        n = types.SimpleNamespace(
            uid=0, hotkey="owner", coldkey="ck", validator_permit=True, total_stake=bal, axon="203.0.113.7:8090"
        )
        return types.SimpleNamespace(block=self.block, neurons=[n])

    def query(self, item, params):
        if item.name == "Uids":
            return self.uids.get(params[1])
        return self.storage[item.name]

    def block_time(self):
        return 12.0

    def compose(self, call):
        self.composed.append(call)
        if self.reject_flat and not isinstance(call.params["info"]["fields"][0], list):
            raise ValueError("cannot encode CommitmentInfo")

    def execute(self, intent, wallet):
        self.executed.append(intent)
        return self.result

    def submit_call(self, call, wallet, signer="coldkey"):
        self.submitted.append((call, signer))
        return self.result


@pytest.fixture
def fake() -> FakeClient:
    return FakeClient()


@pytest.fixture
def chain(fake: FakeClient) -> BittensorChain:
    wallet = types.SimpleNamespace(hotkey=types.SimpleNamespace(ss58_address=ME))
    return BittensorChain("test", client=fake, wallet=wallet)


def test_protocol_and_factory(chain: BittensorChain) -> None:
    assert isinstance(chain, ChainBackend)
    lazy = make_backend("bittensor", network="test", wallet_name="w", wallet_hotkey="h")
    assert isinstance(lazy, BittensorChain) and lazy._client is None  # nothing connected yet


@pytest.mark.parametrize(
    "exc, kind",
    [
        (bt.ChainError("bad key", name="IncorrectWeightVersionKey"), VersionKeyTooLow),
        (bt.ChainError("Retry in ~7 blocks (~84s).", code=bt.ErrorCode.RATE_LIMITED), RateLimited),
        (bt.ChainError("too fast", name="SettingWeightsTooFast"), RateLimited),
        (bt.ChainError("who?", name="HotKeyNotRegisteredInSubNet"), NotRegistered),
        (bt.RpcConnectionError("socket closed"), ChainUnavailable),
        (ConnectionRefusedError("refused"), ChainUnavailable),
        (bt.ChainError("other", name="SomethingElse"), ChainError),
        (bt.BittensorError("sdk"), ChainError),
    ],
)
def test_sdk_errors_map_to_ours(chain: BittensorChain, exc, kind) -> None:
    mapped = chain.translate(exc)
    assert type(mapped) is kind
    if kind is RateLimited and "Retry" in str(exc):
        assert mapped.retry_in_blocks == 7


def test_bugs_are_not_masked(chain: BittensorChain) -> None:
    assert chain.translate(KeyError("x")) is None


def test_reads(chain: BittensorChain, fake: FakeClient) -> None:
    assert chain.current_block() == 1000
    mg = chain.metagraph(1)
    assert mg.block == 1000 and mg.neurons[0].stake == 12.5 and mg.uid_of("owner") == 0
    assert mg.neurons[0].axon == "203.0.113.7:8090"
    with pytest.raises(ChainError):
        chain.metagraph(2)
    assert chain.weights_version_key(1) == 29 and chain.weights_rate_limit(1) == 100
    assert chain.last_weights_block(1, ME) == 900
    assert chain.last_weights_block(1, "owner") is None  # LastUpdate 0
    assert chain.last_weights_block(1, "stranger") is None
    assert chain.get_weights(1, ME) == {2: 0.25, 3: 0.75}
    with pytest.raises(NotRegistered):
        chain.get_weights(1, "stranger")
    assert chain.owner_uid(1) == 0


def test_set_weights_version_key_checked_before_sending(chain: BittensorChain, fake: FakeClient) -> None:
    with pytest.raises(VersionKeyTooLow) as err:
        chain.set_weights(ME, 1, [2, 3], [1.0, 3.0], 1)
    assert (err.value.sent, err.value.required) == (1, 29)
    assert fake.executed == []
    receipt = chain.set_weights(ME, 1, [2, 3], [1.0, 3.0], 29)
    intent = fake.executed[0]
    assert isinstance(intent, bt.SetWeights) and intent.version_key == 29
    assert receipt.block == 1234 and receipt.uids == (2, 3)
    assert receipt.weights[1] == pytest.approx(0.75, rel=1e-4)


def test_set_weights_chain_rejection_maps(chain: BittensorChain, fake: FakeClient) -> None:
    fake.result = bt.ExtrinsicResult(
        success=False, message="too fast", error=bt.ChainError("too fast", "SettingWeightsTooFast")
    )
    with pytest.raises(RateLimited):
        chain.set_weights(ME, 1, [2], [1.0], 29)
    with pytest.raises(ChainError) as err:
        chain.set_weights("someone-else", 1, [2], [1.0], 29)
    assert err.value.reason == "wallet_mismatch"


def test_commit_seals_with_timelock_and_signs_with_hotkey(chain: BittensorChain, fake: FakeClient) -> None:
    assert chain.commit(ME, 1, '{"v":1}', reveal_after_blocks=3) == 1234
    call, signer = fake.submitted[0]
    assert signer == "hotkey"
    assert (call.module, call.function) == ("Commitments", "set_commitment")
    assert call.params["netuid"] == 1
    [entry] = call.params["info"]["fields"]
    sealed = entry["TimelockEncrypted"]
    assert isinstance(sealed["encrypted"], bytes) and sealed["reveal_round"] > 0
    with pytest.raises(ChainError) as err:
        chain.commit(ME, 1, "x" * 1025, 3)
    assert err.value.reason == "commitment_too_large"


def test_commit_falls_back_to_nested_fields(chain: BittensorChain, fake: FakeClient) -> None:
    fake.reject_flat = True
    chain.commit(ME, 1, "data", 1)
    call, _ = fake.submitted[0]
    assert isinstance(call.params["info"]["fields"][0], list)
    assert len(fake.composed) == 2


def test_scale_prefix_and_info_shapes() -> None:
    assert scale_str("ab") == bytes([2 << 2]) + b"ab"
    assert scale_str("x" * 100)[:2] == ((100 << 2) | 1).to_bytes(2, "little")
    flat = commitment_info(b"c", 5, nested=False)["fields"]
    assert flat == [{"TimelockEncrypted": {"encrypted": b"c", "reveal_round": 5}}]
    assert commitment_info(b"c", 5, nested=True)["fields"] == [flat]


def _nc(block: int, revealed: list, live: bool, uid: int | None = 2):
    return types.SimpleNamespace(
        uid=uid, block=block, encrypted=True, revealed=revealed, fields=[{"TimelockEncrypted": {}}] if live else []
    )


def test_revealed_commitments_report_a_commit_block_never_earlier_than_truth(
    chain: BittensorChain, fake: FakeClient
) -> None:
    fake.commitments = {"m": _nc(500, [], live=True)}  # sealed, seen at its commit block
    assert chain.revealed_commitments(1) == []
    fake.commitments = {"m": _nc(530, [(530, "payload")], live=False)}  # entry dropped
    [c] = chain.revealed_commitments(1)
    # The sealed sighting at 500 is not lent to the reveal (see the placeholder test below).
    assert (c.commit_block, c.reveal_block, c.data, c.uid) == (530, 530, "payload", 2)
    fake.commitments = {"m": _nc(600, [(530, "payload")], live=True)}  # newer one sealed
    [c] = chain.revealed_commitments(1)
    assert (c.commit_block, c.data) == (530, "payload")
    fresh = BittensorChain("test", client=fake, wallet=chain.wallet)  # never saw it sealed
    fake.commitments = {"m": _nc(530, [(530, "payload")], live=False), "gone": _nc(530, [(530, "x")], live=False, uid=None)}
    [c] = fresh.revealed_commitments(1)
    assert c.commit_block == 530  # falls back to the reveal block: never earlier than truth
    fake.commitments = {"m": _nc(520, [(530, "payload")], live=True)}  # live and revealed
    assert fresh.revealed_commitments(1)[0].commit_block == 520


def test_serve_axon_goes_through_the_sdk_intent_signed_by_our_hotkey(chain: BittensorChain, fake: FakeClient) -> None:
    chain.serve_axon(ME, 1, "203.0.113.7", 8090, protocol=4, version=1)
    [intent] = fake.executed
    assert isinstance(intent, bt.ServeAxon)
    assert (intent.netuid, intent.ip, intent.port, intent.protocol, intent.version) == (1, "203.0.113.7", 8090, 4, 1)
    with pytest.raises(ChainError, match="not this wallet"):
        chain.serve_axon("someone-else", 1, "203.0.113.7", 8090)
    fake.result = bt.ExtrinsicResult(success=False, message="ServingRateLimitExceeded")
    with pytest.raises(ChainError):
        chain.serve_axon(ME, 1, "203.0.113.7", 8091)


def test_a_sealed_placeholder_never_lends_its_block_to_a_later_unseen_commit(
    chain: BittensorChain, fake: FakeClient
) -> None:
    """Red team: seal a placeholder at block 100 (long reveal, the validator sees it sealed),
    then, after a rival reveals content X at 210, commit a copy of X at 300 with a 1-block
    reveal between two validator polls. The validator never sees block 300 sealed; the copy
    used to be reported as committed at 100 and took priority over the original (200)."""
    fake.commitments = {"m": _nc(100, [], live=True)}  # placeholder, sealed, seen
    assert chain.revealed_commitments(1) == []
    fake.commitments = {"m": _nc(301, [(301, "copy of X")], live=False)}  # 300 -> 301, unseen
    [c] = chain.revealed_commitments(1)
    assert c.commit_block >= 300, "a commit block earlier than the truth buys copy priority"
    assert c.commit_block == c.reveal_block == 301


def test_commit_blocks_are_a_function_of_chain_state_not_of_poll_timing(fake: FakeClient) -> None:
    """Two validators, one that polled during the sealed phase and one that did not (restart,
    slow pass), must report the same commit block, or their crowns differ."""
    wallet = types.SimpleNamespace(hotkey=types.SimpleNamespace(ss58_address=ME))
    watcher = BittensorChain("test", client=fake, wallet=wallet)
    fake.commitments = {"m": _nc(500, [], live=True)}
    watcher.revealed_commitments(1)
    fake.commitments = {"m": _nc(530, [(530, "payload")], live=False)}
    late = BittensorChain("test", client=fake, wallet=wallet)
    assert watcher.revealed_commitments(1) == late.revealed_commitments(1)
