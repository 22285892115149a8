"""ChainBackend on the real chain through bittensor SDK 11.3.0 (blocking `bt.Subtensor`).

The SDK is imported on first use, so the package imports without it. Every SDK name used here
goes through compat.sdk / compat.invoke / compat.field, which only accept what compat.SURFACE
lists; `cacheon chain-compat` checks that list against the installed SDK.

Chain facts this relies on: commitments are timelocked (drand) and revealed by the chain; the
chain drops a fully revealed commitment's storage entry, losing its commit block. The commit
block reported is then the reveal block, a pure function of chain state: never earlier than
the truth, the same on every validator, and no copier can beat it (nobody reads a commitment
before its reveal). A sealed block seen by an earlier poll is never lent to a later reveal:
a commit made and revealed between two polls would inherit a placeholder's block (red team). Weights go through bt.SetWeights, which picks
plain or commit-reveal weights; on commit-reveal subnets get_weights shows them after reveal.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from cacheon_subnet.chain.backend import (
    ChainError,
    ChainUnavailable,
    Commitment,
    Metagraph,
    Neuron,
    NotRegistered,
    RateLimited,
    VersionKeyTooLow,
    WeightsReceipt,
)
from cacheon_subnet.chain.compat import PIN, field, invoke, resolve, sdk, sdk_call
from cacheon_subnet.chain.local import MAX_COMMITMENT_BYTES, quantize
from cacheon_subnet.netpolicy import LOCAL, STRICT, UrlPolicy

_RETRY = re.compile(r"Retry in ~(\d+) blocks")


def install_sdk_hooks(bittensor: Any) -> None:
    """chain/sdk_hooks.py: the SDK's per-entry commitment decoders, wrapped so one undecodable
    entry fails only its own row (the two names are in compat.SURFACE)."""
    from cacheon_subnet.chain import sdk_hooks

    sdk_hooks.install(
        resolve(bittensor, "metagraph"),
        sdk(bittensor, "metagraph._revealed_entry"),
        sdk(bittensor, "metagraph._decode_fields"),
    )


def scale_str(data: str) -> bytes:
    """SCALE `String`: compact length + UTF-8. The chain stores the decrypted bytes and SDK
    readers strip this prefix (as the classic SDK's encrypt_commitment wrote it)."""
    raw = data.encode("utf-8")
    n = len(raw)
    if n < 1 << 6:
        prefix = bytes([n << 2])
    elif n < 1 << 14:
        prefix = ((n << 2) | 1).to_bytes(2, "little")
    else:
        prefix = ((n << 2) | 2).to_bytes(4, "little")
    return prefix + raw


def commitment_info(encrypted: bytes, reveal_round: int, nested: bool) -> dict[str, Any]:
    """CommitmentInfo with one TimelockEncrypted field. The classic SDK wrapped `fields` in an
    extra list (BoundedVec as a 1-tuple); v11 decodes it flat. `commit` tries flat first."""
    entry = [{"TimelockEncrypted": {"encrypted": encrypted, "reveal_round": int(reveal_round)}}]
    return {"fields": [entry] if nested else entry}


def _axon(value: Any) -> str | None:
    """MetagraphNeuron.axon is "ip:port" or None; anything else reads as not served."""
    return value if isinstance(value, str) and value else None


class BittensorChain:
    """One network + one wallet (its hotkey signs commitments and weights)."""

    def __init__(
        self,
        network: str = "finney",
        wallet_name: str = "default",
        wallet_hotkey: str = "default",
        wallet_path: str | None = None,
        *,
        client: Any = None,
        wallet: Any = None,
        sdk_module: Any = None,
    ) -> None:
        self.network = network
        self._wallet_args = {"name": wallet_name, "hotkey": wallet_hotkey}
        if wallet_path is not None:
            self._wallet_args["path"] = wallet_path
        self._bt = sdk_module
        self._client = client
        self._wallet = wallet

    # -- lazy SDK, client and wallet ---------------------------------------------------------

    @property
    def bt(self) -> Any:
        if self._bt is None:
            try:
                import bittensor
            except ImportError as exc:
                raise ChainUnavailable(f"bittensor SDK not importable ({exc}); pip install bittensor=={PIN}") from exc
            from cacheon_subnet import log

            log.adopt("bittensor")  # the SDK installs its own handlers: route it through structlog
            install_sdk_hooks(bittensor)  # one undecodable commitment costs its own row, not the subnet's read
            self._bt = bittensor
        return self._bt

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = sdk_call(self.bt, "Subtensor", network=self.network)
        return self._client

    @property
    def wallet(self) -> Any:
        if self._wallet is None:
            self._wallet = sdk_call(self.bt, "Wallet", **self._wallet_args)
        return self._wallet

    @property
    def hotkey(self) -> str:
        """ss58 of the wallet's hotkey (loads the keyfile on first use)."""
        try:
            return str(field(field(self.wallet, "Wallet.hotkey"), "Keypair.ss58_address"))
        except Exception as exc:  # missing, unreadable or locked keyfile (KeyfileError)
            raise ChainError(f"cannot load wallet {self._wallet_args}: {exc}", "wallet") from exc

    def _own(self, hotkey: str) -> None:
        if hotkey != self.hotkey:
            raise ChainError(
                f"hotkey {hotkey!r} is not this wallet's hotkey {self.hotkey!r}; "
                "the SDK can only sign with the loaded wallet",
                "wallet_mismatch",
            )

    # -- error mapping -----------------------------------------------------------------------

    def translate(self, exc: BaseException) -> ChainError | None:
        """Our ChainError for an SDK/transport exception; None for anything else (a bug)."""
        bt = self.bt
        if isinstance(exc, ChainError):
            return exc
        if isinstance(exc, (sdk(bt, "RpcConnectionError"), sdk(bt, "ConnectionNotReady"), ConnectionError, TimeoutError)):
            return ChainUnavailable(f"chain {self.network!r} unreachable: {exc}")
        if isinstance(exc, sdk(bt, "ChainError")):
            name, code = field(exc, "ChainError.name"), field(exc, "ChainError.code")
            if name == "IncorrectWeightVersionKey":
                return VersionKeyTooLow(f"chain rejected the weights version key: {exc}")
            if code == sdk(bt, "ErrorCode.RATE_LIMITED"):
                m = _RETRY.search(str(exc))
                return RateLimited(f"rate limited: {exc}", int(m.group(1)) if m else None)
            if code == sdk(bt, "ErrorCode.NOT_REGISTERED"):
                return NotRegistered(f"not registered: {exc}")
            return ChainError(
                f"chain error {name or getattr(code, 'value', code)}: {exc}", f"sdk:{name or getattr(code, 'value', code)}"
            )
        if isinstance(exc, sdk(bt, "BittensorError")):
            return ChainError(f"bittensor SDK error: {exc}", "sdk")
        return None

    @contextmanager
    def _sdk_errors(self) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            mapped = self.translate(exc)
            if mapped is None or mapped is exc:
                raise
            raise mapped from exc

    def _query(self, item: str, params: list[Any]) -> Any:
        return invoke(self.client, "client.query", sdk(self.bt, item), params)

    def _uid(self, netuid: int, hotkey: str) -> int | None:
        uid = self._query("storage.Uids", [netuid, hotkey])
        return None if uid is None else int(uid)

    @staticmethod
    def _block_of(result: Any) -> int | None:
        ext = field(result, "ExtrinsicResult.extrinsic_id")  # "<block>-<index>"
        return int(str(ext).split("-")[0]) if ext else None

    # -- ChainBackend ------------------------------------------------------------------------

    def url_policy(self) -> UrlPolicy:
        """Loopback fetch URLs only on a `local` subtensor (a dev node); public https otherwise."""
        return LOCAL if self.network == "local" else STRICT

    def current_block(self) -> int:
        with self._sdk_errors():
            return int(field(self.client, "client.block"))

    def metagraph(self, netuid: int) -> Metagraph:
        with self._sdk_errors():
            subnets = field(self.client, "client.subnets")
            mg = invoke(subnets, "subnets.metagraph", netuid, commitments=False)
            if mg is None:
                raise ChainError(f"netuid {netuid} does not exist on {self.network}", "subnet_missing")
            neurons = tuple(
                Neuron(
                    uid=int(field(n, "MetagraphNeuron.uid")),
                    hotkey=str(field(n, "MetagraphNeuron.hotkey")),
                    coldkey=str(field(n, "MetagraphNeuron.coldkey")),
                    stake=float(field(field(n, "MetagraphNeuron.total_stake"), "Balance.tao")),
                    validator_permit=bool(field(n, "MetagraphNeuron.validator_permit")),
                    axon=_axon(field(n, "MetagraphNeuron.axon")),
                )
                for n in field(mg, "Metagraph.neurons")
            )
            return Metagraph(netuid=netuid, block=int(field(mg, "Metagraph.block")), neurons=neurons)

    def revealed_commitments(self, netuid: int) -> list[Commitment]:
        with self._sdk_errors():
            subnets = field(self.client, "client.subnets")
            entries = invoke(subnets, "subnets.commitments", netuid)
        out = []
        for hotkey, c in entries.items():
            block = int(field(c, "NeuronCommitment.block"))
            live = bool(field(c, "NeuronCommitment.fields"))  # storage entry still there
            history = sorted((int(rb), str(text)) for rb, text in field(c, "NeuronCommitment.revealed"))
            uid = field(c, "NeuronCommitment.uid")
            if not history or uid is None:
                continue
            reveal_block, text = history[-1]
            # Live with a reveal at or after its block: that block is the hotkey's latest
            # commit, so the revealed text was committed there or earlier (never later).
            # Otherwise the entry is gone or newer: only the reveal block is known.
            commit_block = block if live and reveal_block >= block else reveal_block
            out.append(Commitment(str(hotkey), int(uid), commit_block, reveal_block, text))
        return sorted(out, key=lambda c: (c.commit_block, c.uid))

    def commit(self, hotkey: str, netuid: int, data: str, reveal_after_blocks: int) -> int:
        size = len(data.encode("utf-8"))
        if not 0 < size <= MAX_COMMITMENT_BYTES:
            raise ChainError(
                f"commit: data is {size} bytes; must be 1..{MAX_COMMITMENT_BYTES}",
                "commitment_too_large" if size else "commitment_empty",
            )
        if int(reveal_after_blocks) < 1:
            raise ChainError(f"commit: reveal_after_blocks={reveal_after_blocks}; must be >= 1", "reveal_delay")
        self._own(hotkey)
        bt, client = self.bt, self.client
        with self._sdk_errors():
            seconds = float(reveal_after_blocks) * float(invoke(client, "client.block_time"))
            sealed = sdk_call(bt, "timelock.encrypt", scale_str(data), reveal_in=seconds)
            encrypted = bytes(field(sealed, "Timelocked.encrypted"))
            if len(encrypted) > MAX_COMMITMENT_BYTES:
                raise ChainError(
                    f"commit: ciphertext is {len(encrypted)} bytes; the chain holds at most {MAX_COMMITMENT_BYTES}",
                    "commitment_too_large",
                )
            round_ = int(field(sealed, "Timelocked.reveal_round"))
            call, errors = None, []
            for nested in (False, True):
                candidate = sdk_call(
                    bt, "calls.set_commitment", netuid=netuid, info=commitment_info(encrypted, round_, nested)
                )
                try:
                    invoke(client, "client.compose", candidate)  # encodes only; nothing sent
                except Exception as exc:  # an encoding error tries the other shape
                    if self.translate(exc) is not None and not isinstance(exc, ValueError):
                        raise  # transport/chain trouble, not the shape
                    errors.append(f"{'nested' if nested else 'flat'}: {exc}")
                    continue
                call = candidate
                break
            if call is None:
                raise ChainError(
                    "commit: the runtime encodes neither CommitmentInfo shape (" + "; ".join(errors) + ")", "encoding"
                )
            result = invoke(client, "client.submit_call", call, self.wallet, signer="hotkey")
            invoke(result, "ExtrinsicResult.raise_for_failure")
            block = self._block_of(result)
            return block if block is not None else self.current_block()

    def weights_version_key(self, netuid: int) -> int:
        with self._sdk_errors():
            return int(self._query("storage.WeightsVersionKey", [netuid]) or 0)

    def weights_rate_limit(self, netuid: int) -> int:
        with self._sdk_errors():
            return int(self._query("storage.WeightsSetRateLimit", [netuid]) or 0)

    def last_weights_block(self, netuid: int, hotkey: str) -> int | None:
        """LastUpdate of the hotkey's uid (weights, or registration); None if 0/unregistered."""
        with self._sdk_errors():
            uid = self._uid(netuid, hotkey)
            if uid is None:
                return None
            last = self._query("storage.LastUpdate", [netuid]) or []
        value = int(last[uid]) if uid < len(last) else 0
        return value or None

    def set_weights(
        self, hotkey: str, netuid: int, uids: Sequence[int], weights: Sequence[float], version_key: int
    ) -> WeightsReceipt:
        if len(uids) != len(weights):
            raise ChainError(f"set_weights: {len(uids)} uids but {len(weights)} weights", "weights_length")
        self._own(hotkey)
        required = self.weights_version_key(netuid)
        if int(version_key) < required:  # the chain would drop them; say so before sending
            raise VersionKeyTooLow(
                f"set_weights: version_key {version_key} < WeightsVersionKey {required} on netuid {netuid}",
                sent=int(version_key),
                required=required,
            )
        with self._sdk_errors():
            intent = sdk_call(
                self.bt,
                "SetWeights",
                netuid=netuid,
                uids=[int(u) for u in uids],
                weights=[float(w) for w in weights],
                version_key=int(version_key),
            )
            result = invoke(self.client, "client.execute", intent, self.wallet)
            invoke(result, "ExtrinsicResult.raise_for_failure")
            block = self._block_of(result)
        stored = quantize([float(w) for w in weights])
        pairs = [(int(u), v) for u, v in zip(uids, stored, strict=True) if v]
        total = sum(v for _, v in pairs) or 1
        return WeightsReceipt(
            block=block if block is not None else self.current_block(),
            version_key=int(version_key),
            uids=tuple(u for u, _ in pairs),
            weights=tuple(v / total for _, v in pairs),
        )

    def get_weights(self, netuid: int, hotkey: str) -> dict[int, float]:
        with self._sdk_errors():
            uid = self._uid(netuid, hotkey)
            if uid is None:
                raise NotRegistered(f"hotkey {hotkey!r} is not registered on netuid {netuid}")
            rows = invoke(field(self.client, "client.weights"), "weights.weights", netuid)
        return {int(k): float(v) for k, v in (rows.get(uid) or {}).items()}

    def serve_axon(self, hotkey: str, netuid: int, ip: str, port: int, protocol: int = 4, version: int = 1) -> None:
        """The SDK's ServeAxon intent (chain data only; v11 has no axon server): signed by the
        hotkey, which must be registered; the chain's ServingRateLimit applies."""
        self._own(hotkey)
        with self._sdk_errors():
            intent = sdk_call(
                self.bt, "ServeAxon", netuid=netuid, ip=str(ip), port=int(port), protocol=int(protocol), version=int(version)
            )
            result = invoke(self.client, "client.execute", intent, self.wallet)
            invoke(result, "ExtrinsicResult.raise_for_failure")

    def owner_uid(self, netuid: int) -> int:
        with self._sdk_errors():
            owner = self._query("storage.SubnetOwnerHotkey", [netuid])
            uid = self._uid(netuid, str(owner)) if owner else None
        if uid is None:
            raise ChainError(f"netuid {netuid}: owner hotkey {owner!r} holds no uid", "owner_unregistered")
        return uid
