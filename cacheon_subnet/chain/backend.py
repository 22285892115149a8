"""The one chain protocol miners and validators talk to, and the values it returns.

Two backends implement it: `LocalChain` (one SQLite file, for tests and the demo) and
`BittensorChain` (the real SDK). Everything above this layer sees only these types, so the
demo and mainnet run the same validator code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from cacheon_subnet.errors import CacheonError

# Refusals that the same call cannot turn into a success by waiting: retrying them only burns
# fees and rate-limit windows (a missing validator permit was once retried 36 times in 12 passes).
DEFINITIVE_REASONS = frozenset(
    {
        "not_registered",
        "no_validator_permit",
        "version_key",
        "wallet",
        "wallet_mismatch",
        "usage",
        "hotkey",
        "netuid",
        "subnet_missing",
        "commitment_empty",
        "commitment_too_large",
        "commitment_type",
        "reveal_delay",
        "owner_unregistered",
        "schema",
        "encoding",
        "space_limit",
    }
)
# Subtensor error names (bittensor SDK ChainError.name) with the same meaning.
DEFINITIVE_SDK_NAMES = frozenset(
    {
        "NeuronNoValidatorPermit",
        "HotKeyNotRegisteredInSubNet",
        "HotKeyNotRegisteredInNetwork",
        "NotEnoughStakeToSetWeights",
        "SubNetworkDoesNotExist",
        "IncorrectWeightVersionKey",
        "WeightVecLengthIsLow",
        "UidsLengthExceedUidsInSubNet",
        "UidVecContainInvalidOne",
        "DuplicateUids",
        "InvalidUid",
        "CommitRevealEnabled",
        "NonAssociatedColdKey",
    }
)


class ChainError(CacheonError):
    """The chain refused or failed a call. `reason` is a stable id for the rule that failed."""

    def __init__(self, message: str, reason: str = "chain") -> None:
        self.reason = reason
        super().__init__(message)

    @property
    def definitive(self) -> bool:
        """True when retrying the same call cannot succeed (see `classify`)."""
        return classify(self) == "definitive"


def classify(exc: BaseException) -> str:
    """ "wait" (rate limited: the chain's normal not-yet), "definitive" (refused for a reason a
    retry cannot fix: stop and say so) or "transient" (unreachable, timeouts, unknown: back off)."""
    if isinstance(exc, RateLimited):
        return "wait"
    if isinstance(exc, ChainUnavailable) or not isinstance(exc, ChainError):
        return "transient"
    reason = exc.reason
    if reason in DEFINITIVE_REASONS or reason.startswith("weights_"):
        return "definitive"
    if reason.startswith("sdk:") and reason[4:] in DEFINITIVE_SDK_NAMES:
        return "definitive"
    return "transient"


class RateLimited(ChainError):
    """Weights set again before WeightsSetRateLimit blocks passed (chain: SettingWeightsTooFast)."""

    def __init__(self, message: str, retry_in_blocks: int | None = None) -> None:
        self.retry_in_blocks = retry_in_blocks
        super().__init__(message, "rate_limited")


class VersionKeyTooLow(ChainError):
    """version_key below the subnet's WeightsVersionKey: the chain drops such weights."""

    def __init__(self, message: str, sent: int | None = None, required: int | None = None) -> None:
        self.sent = sent
        self.required = required
        super().__init__(message, "version_key")


class NotRegistered(ChainError):
    """The hotkey has no uid on the subnet."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "not_registered")


class ChainUnavailable(ChainError):
    """The chain could not be reached or opened (retry later; not the caller's fault)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "unavailable")


@dataclass(frozen=True)
class Neuron:
    uid: int
    hotkey: str
    coldkey: str
    stake: float
    validator_permit: bool
    axon: str | None = None  # the served endpoint "ip:port" ("[v6]:port"), None when nothing is served


@dataclass(frozen=True)
class Metagraph:
    """A subnet's neurons at one block, ordered by uid."""

    netuid: int
    block: int
    neurons: tuple[Neuron, ...]
    _index: Mapping[str, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {n.hotkey: n.uid for n in self.neurons})

    @property
    def hotkeys(self) -> tuple[str, ...]:
        return tuple(n.hotkey for n in self.neurons)

    def uid_of(self, hotkey: str) -> int | None:
        return self._index.get(hotkey)

    def by_uid(self, uid: int) -> Neuron:
        for n in self.neurons:
            if n.uid == uid:
                return n
        raise KeyError(f"no uid {uid} on netuid {self.netuid} ({len(self.neurons)} neurons)")


@dataclass(frozen=True)
class Commitment:
    """A revealed commitment. `commit_block` orders submissions (earlier wins ties)."""

    hotkey: str
    uid: int
    commit_block: int
    reveal_block: int
    data: str


@dataclass(frozen=True)
class WeightsReceipt:
    """What the chain accepted: `weights` are the stored values as row fractions."""

    block: int
    version_key: int
    uids: tuple[int, ...]
    weights: tuple[float, ...]


@runtime_checkable
class ChainBackend(Protocol):
    def current_block(self) -> int: ...

    def metagraph(self, netuid: int) -> Metagraph: ...

    def revealed_commitments(self, netuid: int) -> list[Commitment]: ...

    def commit(self, hotkey: str, netuid: int, data: str, reveal_after_blocks: int) -> int: ...

    def weights_version_key(self, netuid: int) -> int: ...

    def weights_rate_limit(self, netuid: int) -> int: ...

    def last_weights_block(self, netuid: int, hotkey: str) -> int | None: ...

    def set_weights(
        self,
        hotkey: str,
        netuid: int,
        uids: Sequence[int],
        weights: Sequence[float],
        version_key: int,
    ) -> WeightsReceipt: ...

    def get_weights(self, netuid: int, hotkey: str) -> dict[int, float]: ...

    def owner_uid(self, netuid: int) -> int: ...

    def serve_axon(self, hotkey: str, netuid: int, ip: str, port: int, protocol: int = 4, version: int = 1) -> None:
        """Publish hotkey's endpoint (the chain's axon info; Neuron.axon reads it back)."""
        ...
