"""An embedded chain in one SQLite file: the demo's and the tests' stand-in for subtensor.

Miners, validators and the demo driver share one file (see `_store` for the transaction and
crash-safety rules). Blocks advance with wall time from a genesis stored in the file plus a
manual offset (`advance`), so every process agrees on the block without a block producer.

Rules copied from subtensor: WeightsVersionKey (send >= it), WeightsSetRateLimit counted from
LastUpdate (which registration sets, as `append_neuron` does), max-upscaled u16 weights,
validator permit (owner and self-weight exempt), one commitment per hotkey (a newer one drops
a still-sealed older one), <= 1024 B per commitment, <= 3100 B per hotkey per tempo epoch
(each commit costs at least 100 B).
"""

from __future__ import annotations

import ipaddress
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cacheon_subnet.chain._store import AXONS, Store, init_file, read_meta
from cacheon_subnet.chain.backend import (
    ChainError,
    Commitment,
    Metagraph,
    Neuron,
    RateLimited,
    VersionKeyTooLow,
    WeightsReceipt,
)
from cacheon_subnet.netpolicy import LOCAL, UrlPolicy

DEFAULT_SECONDS_PER_BLOCK = 12.0
DEFAULT_TEMPO = 360
DEFAULT_WEIGHTS_RATE_LIMIT = 100
DEFAULT_MAX_UIDS = 256
MAX_COMMITMENT_BYTES = 1024
MAX_SPACE_PER_EPOCH = 3100
MIN_USED_SPACE = 100
U16_MAX = 65535

WeightsMatrix = tuple[tuple[str, ...], tuple[float, ...], tuple[tuple[float, ...], ...]]


def quantize(weights: Sequence[float]) -> list[int]:
    """Max-upscale to u16 as the SDK and chain do (the largest weight becomes 65535)."""
    top = max(weights, default=0.0)
    if top <= 0:
        return [0 for _ in weights]
    return [int(round(w / top * U16_MAX)) for w in weights]


class LocalChain(Store):
    """ChainBackend over one SQLite file. Build with `create` or `open`, not the constructor."""

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        netuid: int = 1,
        *,
        owner_hotkey: str = "owner",
        owner_coldkey: str = "owner-cold",
        tempo: int = DEFAULT_TEMPO,
        weights_version_key: int = 0,
        weights_rate_limit: int = DEFAULT_WEIGHTS_RATE_LIMIT,
        seconds_per_block: float = DEFAULT_SECONDS_PER_BLOCK,
        exist_ok: bool = False,
    ) -> LocalChain:
        """A new chain file with one subnet whose owner holds uid 0 (as on chain).

        seconds_per_block <= 0 freezes wall-clock advance (blocks move only via `advance`).
        """
        p = Path(path)
        init_file(p, netuid, seconds_per_block, exist_ok)
        chain = cls.open(p)
        if not chain._subnet_exists(netuid):
            try:
                chain.add_subnet(
                    netuid,
                    owner_hotkey=owner_hotkey,
                    owner_coldkey=owner_coldkey,
                    tempo=tempo,
                    weights_version_key=weights_version_key,
                    weights_rate_limit=weights_rate_limit,
                )
            except ChainError as exc:  # another process created it between our two calls
                if exc.reason != "subnet_exists":
                    raise
        return chain

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> LocalChain:
        p = Path(path)
        meta = read_meta(p)
        return cls(p, float(meta["genesis"]), float(meta["seconds_per_block"]), int(meta["default_netuid"]))

    # -- admin (what sudo / the subnet owner / registration do on chain) ----------------------

    def advance(self, n: int = 1) -> int:
        """Move the chain forward n blocks; returns the new block."""
        if n < 0:
            raise ChainError(f"advance: n={n}; blocks never go back", "advance")
        with self._tx(write=True) as con:
            con.execute("UPDATE meta SET value = CAST(value AS INTEGER) + ? WHERE key='offset'", (n,))
            return self._block(con)

    def add_subnet(
        self,
        netuid: int,
        *,
        owner_hotkey: str,
        owner_coldkey: str = "owner-cold",
        tempo: int = DEFAULT_TEMPO,
        weights_version_key: int = 0,
        weights_rate_limit: int = DEFAULT_WEIGHTS_RATE_LIMIT,
        max_uids: int = DEFAULT_MAX_UIDS,
    ) -> None:
        """Register a subnet; its owner hotkey takes uid 0."""
        for name, value in (
            ("tempo", tempo),
            ("weights_version_key", weights_version_key),
            ("weights_rate_limit", weights_rate_limit),
            ("max_uids", max_uids),
        ):
            if int(value) < 0:
                raise ChainError(f"add_subnet: {name}={value} must be >= 0", "hyperparam")
        with self._tx(write=True) as con:
            if con.execute("SELECT 1 FROM subnets WHERE netuid=?", (netuid,)).fetchone():
                raise ChainError(f"netuid {netuid} already exists", "subnet_exists")
            con.execute(
                "INSERT INTO subnets VALUES (?, ?, ?, ?, ?, ?)",
                (netuid, tempo, owner_hotkey, weights_version_key, weights_rate_limit, max_uids),
            )
            block = self._block(con)
            con.execute(
                "INSERT INTO neurons VALUES (?, 0, ?, ?, 0.0, 0, ?, ?)",
                (netuid, owner_hotkey, owner_coldkey, block, block),
            )

    def set_hyperparams(
        self,
        netuid: int | None = None,
        *,
        tempo: int | None = None,
        weights_version_key: int | None = None,
        weights_rate_limit: int | None = None,
    ) -> None:
        """Owner/sudo hyperparameter changes (e.g. raising WeightsVersionKey)."""
        net = self._net(netuid)
        changes = {
            k: v
            for k, v in (
                ("tempo", tempo),
                ("weights_version_key", weights_version_key),
                ("weights_rate_limit", weights_rate_limit),
            )
            if v is not None
        }
        for name, value in changes.items():
            if int(value) < 0:
                raise ChainError(f"set_hyperparams: {name}={value} must be >= 0", "hyperparam")
        with self._tx(write=True) as con:
            self._subnet(con, net)
            for name, value in changes.items():
                con.execute(f"UPDATE subnets SET {name}=? WHERE netuid=?", (int(value), net))

    def register(
        self,
        hotkey: str,
        coldkey: str = "",
        stake: float = 0.0,
        validator_permit: bool = False,
        *,
        netuid: int | None = None,
    ) -> int:
        """Give hotkey the next uid. Re-registering with the same coldkey returns the same uid."""
        net = self._net(netuid)
        if not hotkey:
            raise ChainError("register: hotkey must be non-empty", "hotkey")
        with self._tx(write=True) as con:
            subnet = self._subnet(con, net)
            row = con.execute("SELECT uid, coldkey FROM neurons WHERE netuid=? AND hotkey=?", (net, hotkey)).fetchone()
            if row is not None:
                if row["coldkey"] != coldkey:
                    raise ChainError(
                        f"hotkey {hotkey!r} is already registered on netuid {net} under coldkey {row['coldkey']!r}",
                        "already_registered",
                    )
                return int(row["uid"])
            n = con.execute("SELECT COUNT(*) FROM neurons WHERE netuid=?", (net,)).fetchone()[0]
            if n >= subnet["max_uids"]:
                raise ChainError(f"netuid {net} is full ({n}/{subnet['max_uids']} uids)", "subnet_full")
            block = self._block(con)
            con.execute(
                "INSERT INTO neurons VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (net, n, hotkey, coldkey, float(stake), int(bool(validator_permit)), block, block),
            )
            return int(n)

    def set_stake(
        self, hotkey: str, stake: float, *, validator_permit: bool | None = None, netuid: int | None = None
    ) -> None:
        """Change stake (and optionally the validator permit) of a registered hotkey."""
        net = self._net(netuid)
        with self._tx(write=True) as con:
            self._neuron(con, net, hotkey)
            con.execute("UPDATE neurons SET stake=? WHERE netuid=? AND hotkey=?", (float(stake), net, hotkey))
            if validator_permit is not None:
                con.execute(
                    "UPDATE neurons SET validator_permit=? WHERE netuid=? AND hotkey=?",
                    (int(bool(validator_permit)), net, hotkey),
                )

    # -- ChainBackend ------------------------------------------------------------------------

    def url_policy(self) -> UrlPolicy:
        """A local chain: miners may serve over loopback (the demo does)."""
        return LOCAL

    def current_block(self) -> int:
        with self._tx() as con:
            return self._block(con)

    def metagraph(self, netuid: int) -> Metagraph:
        with self._tx() as con:
            self._subnet(con, netuid)
            rows = con.execute(
                "SELECT uid, hotkey, coldkey, stake, validator_permit FROM neurons WHERE netuid=? ORDER BY uid", (netuid,)
            ).fetchall()
            block = self._block(con)
            axons = self._axons(con, netuid)
        neurons = tuple(Neuron(int(r[0]), r[1], r[2], float(r[3]), bool(r[4]), axons.get(r[1])) for r in rows)
        return Metagraph(netuid=netuid, block=block, neurons=neurons)

    def revealed_commitments(self, netuid: int) -> list[Commitment]:
        """The latest revealed commitment of each registered hotkey, oldest commit first."""
        with self._tx() as con:
            self._subnet(con, netuid)
            block = self._block(con)
            rows = con.execute(
                "SELECT c.hotkey, n.uid, c.commit_block, c.reveal_block, CAST(c.data AS BLOB)"
                " FROM commitments c JOIN neurons n ON n.netuid=c.netuid AND n.hotkey=c.hotkey"
                " WHERE c.netuid=? AND c.id = (SELECT c2.id FROM commitments c2"
                "   WHERE c2.netuid=c.netuid AND c2.hotkey=c.hotkey AND c2.reveal_block<=?"
                "   ORDER BY c2.id DESC LIMIT 1)"
                " ORDER BY c.commit_block, n.uid",
                (netuid, block),
            ).fetchall()
        # Bytes, decoded per row: one undecodable row must not fail the query for every miner.
        # surrogateescape keeps the bad bytes visible, and parse() rejects them ("encoding").
        return [
            Commitment(r[0], int(r[1]), int(r[2]), int(r[3]), bytes(r[4]).decode("utf-8", "surrogateescape")) for r in rows
        ]

    def commit(self, hotkey: str, netuid: int, data: str, reveal_after_blocks: int) -> int:
        """Timelocked commitment: invisible until commit_block + reveal_after_blocks."""
        if not isinstance(data, str):
            raise ChainError(f"commit: data must be str, got {type(data).__name__}", "commitment_type")
        size = len(data.encode("utf-8"))
        if size == 0:
            raise ChainError("commit: data is empty", "commitment_empty")
        if size > MAX_COMMITMENT_BYTES:
            raise ChainError(
                f"commit: data is {size} bytes; a timelocked commitment holds at most {MAX_COMMITMENT_BYTES}",
                "commitment_too_large",
            )
        if int(reveal_after_blocks) < 1:
            raise ChainError(f"commit: reveal_after_blocks={reveal_after_blocks}; must be >= 1", "reveal_delay")
        with self._tx(write=True) as con:
            subnet = self._subnet(con, netuid)
            self._neuron(con, netuid, hotkey)
            block = self._block(con)
            epoch = (block + netuid + 1) // (int(subnet["tempo"]) + 1)
            row = con.execute("SELECT epoch, used FROM space_used WHERE netuid=? AND hotkey=?", (netuid, hotkey)).fetchone()
            used = int(row["used"]) if row is not None and int(row["epoch"]) == epoch else 0
            need = max(MIN_USED_SPACE, size)
            if used + need > MAX_SPACE_PER_EPOCH:
                raise ChainError(
                    f"commit: hotkey {hotkey!r} used {used} of {MAX_SPACE_PER_EPOCH} bytes this "
                    f"epoch; this commitment needs {need} (SpaceLimitExceeded)",
                    "space_limit",
                )
            con.execute("INSERT OR REPLACE INTO space_used VALUES (?, ?, ?, ?)", (netuid, hotkey, epoch, used + need))
            # One commitment per hotkey: a still-sealed older one never reveals; of the revealed
            # ones only the newest stays visible until this one reveals.
            con.execute("DELETE FROM commitments WHERE netuid=? AND hotkey=? AND reveal_block>?", (netuid, hotkey, block))
            con.execute(
                "DELETE FROM commitments WHERE netuid=? AND hotkey=? AND id NOT IN (SELECT id"
                " FROM commitments WHERE netuid=? AND hotkey=? ORDER BY id DESC LIMIT 1)",
                (netuid, hotkey, netuid, hotkey),
            )
            con.execute(
                "INSERT INTO commitments(netuid, hotkey, commit_block, reveal_block, data) VALUES (?, ?, ?, ?, ?)",
                (netuid, hotkey, block, block + int(reveal_after_blocks), data),
            )
            return block

    def weights_version_key(self, netuid: int) -> int:
        with self._tx() as con:
            return int(self._subnet(con, netuid)["weights_version_key"])

    def weights_rate_limit(self, netuid: int) -> int:
        with self._tx() as con:
            return int(self._subnet(con, netuid)["weights_rate_limit"])

    def tempo(self, netuid: int) -> int:
        with self._tx() as con:
            return int(self._subnet(con, netuid)["tempo"])

    def last_weights_block(self, netuid: int, hotkey: str) -> int | None:
        """LastUpdate: the block the rate limit counts from (last weights, else registration)."""
        with self._tx() as con:
            self._subnet(con, netuid)
            row = con.execute("SELECT last_update FROM neurons WHERE netuid=? AND hotkey=?", (netuid, hotkey)).fetchone()
        if row is None or int(row[0]) == 0:
            return None
        return int(row[0])

    def set_weights(
        self,
        hotkey: str,
        netuid: int,
        uids: Sequence[int],
        weights: Sequence[float],
        version_key: int,
    ) -> WeightsReceipt:
        uids = [int(u) for u in uids]
        floats = [float(w) for w in weights]
        if len(uids) != len(floats):
            raise ChainError(f"set_weights: {len(uids)} uids but {len(floats)} weights", "weights_length")
        if len(set(uids)) != len(uids):
            raise ChainError("set_weights: duplicate uids", "weights_duplicate_uid")
        bad = [w for w in floats if not math.isfinite(w) or w < 0]
        if bad:
            raise ChainError(f"set_weights: weights must be finite and >= 0, got {bad[:3]}", "weights_invalid_value")
        with self._tx(write=True) as con:
            subnet = self._subnet(con, netuid)
            me = self._neuron(con, netuid, hotkey)
            required = int(subnet["weights_version_key"])
            if int(version_key) < required:
                raise VersionKeyTooLow(
                    f"set_weights: version_key {version_key} < WeightsVersionKey {required} on "
                    f"netuid {netuid} (IncorrectWeightVersionKey)",
                    sent=int(version_key),
                    required=required,
                )
            n = con.execute("SELECT COUNT(*) FROM neurons WHERE netuid=?", (netuid,)).fetchone()[0]
            invalid = [u for u in uids if not 0 <= u < n]
            if invalid:
                raise ChainError(
                    f"set_weights: uids {invalid[:5]} do not exist (netuid {netuid} has {n})", "weights_invalid_uid"
                )
            own_uid = int(me["uid"])
            is_owner = hotkey == subnet["owner_hotkey"]
            if not me["validator_permit"] and not is_owner and uids != [own_uid]:
                raise ChainError(
                    f"set_weights: hotkey {hotkey!r} (uid {own_uid}) holds no validator permit (NeuronNoValidatorPermit)",
                    "no_validator_permit",
                )
            block = self._block(con)
            last, limit = int(me["last_update"]), int(subnet["weights_rate_limit"])
            if last != 0 and block - last < limit:
                wait = limit - (block - last)
                raise RateLimited(
                    f"set_weights: uid {own_uid} last updated at block {last}; rate limit is "
                    f"{limit} blocks, now {block}: retry in {wait} blocks (SettingWeightsTooFast)",
                    retry_in_blocks=wait,
                )
            pairs = [(u, v) for u, v in zip(uids, quantize(floats), strict=True) if v > 0]
            if not pairs:
                raise ChainError("set_weights: all weights are zero", "weights_all_zero")
            con.execute("DELETE FROM weights WHERE netuid=? AND setter_uid=?", (netuid, own_uid))
            con.executemany("INSERT INTO weights VALUES (?, ?, ?, ?)", [(netuid, own_uid, u, v) for u, v in pairs])
            con.execute("UPDATE neurons SET last_update=? WHERE netuid=? AND uid=?", (block, netuid, own_uid))
        total = sum(v for _, v in pairs)
        return WeightsReceipt(
            block=block,
            version_key=int(version_key),
            uids=tuple(u for u, _ in pairs),
            weights=tuple(v / total for _, v in pairs),
        )

    def get_weights(self, netuid: int, hotkey: str) -> dict[int, float]:
        """The hotkey's stored weight row as fractions summing to 1 ({} if never set)."""
        with self._tx() as con:
            self._subnet(con, netuid)
            me = self._neuron(con, netuid, hotkey)
            rows = con.execute(
                "SELECT uid, value FROM weights WHERE netuid=? AND setter_uid=? ORDER BY uid", (netuid, int(me["uid"]))
            ).fetchall()
        total = sum(int(v) for _, v in rows)
        return {int(u): int(v) / total for u, v in rows} if total else {}

    def owner_uid(self, netuid: int) -> int:
        with self._tx() as con:
            owner = self._subnet(con, netuid)["owner_hotkey"]
            return int(self._neuron(con, netuid, owner)["uid"])

    def serve_axon(self, hotkey: str, netuid: int, ip: str, port: int, protocol: int = 4, version: int = 1) -> None:
        """subtensor's serve_axon: the chain stores an IP (as an integer) and a port, so a host
        name cannot be announced; the hotkey must be registered. No serving rate limit here."""
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            raise ChainError(
                f"serve_axon: {ip!r} is not an IPv4/IPv6 address (the chain stores an IP, not a host name)", "axon_ip"
            ) from None
        if not 0 < int(port) < 65536:
            raise ChainError(f"serve_axon: port {port} is not in 1..65535", "axon_port")
        with self._tx(write=True) as con:
            self._subnet(con, netuid)
            self._neuron(con, netuid, hotkey)
            con.execute(AXONS)
            con.execute(
                "INSERT OR REPLACE INTO axons VALUES (?, ?, ?, ?, ?, ?, ?)",
                (netuid, hotkey, str(addr), int(port), int(protocol), int(version), self._block(con)),
            )

    @staticmethod
    def _axons(con: Any, netuid: int) -> dict[str, str]:
        """hotkey -> "ip:port" ("[v6]:port", as the SDK's MetagraphNeuron.axon writes it)."""
        if not con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='axons'").fetchone():
            return {}
        rows = con.execute("SELECT hotkey, ip, port FROM axons WHERE netuid=?", (netuid,)).fetchall()
        return {r[0]: (f"[{r[1]}]:{r[2]}" if ":" in r[1] else f"{r[1]}:{r[2]}") for r in rows}

    def weights_matrix(self, netuid: int) -> WeightsMatrix:
        """(validator hotkeys, their stakes, row-normalised weights over all uids) for Yuma.

        Rows: every neuron with a validator permit or a stored weight row, in uid order.
        """
        with self._tx() as con:
            self._subnet(con, netuid)
            neurons = con.execute(
                "SELECT uid, hotkey, stake, validator_permit FROM neurons WHERE netuid=? ORDER BY uid", (netuid,)
            ).fetchall()
            stored = con.execute("SELECT setter_uid, uid, value FROM weights WHERE netuid=?", (netuid,)).fetchall()
        n = len(neurons)
        rows: dict[int, list[float]] = {}
        for setter, uid, value in stored:
            rows.setdefault(int(setter), [0.0] * n)[int(uid)] = float(value)
        hotkeys, stakes, matrix = [], [], []
        for uid, hotkey, stake, permit in neurons:
            if not permit and uid not in rows:
                continue
            row = rows.get(uid, [0.0] * n)
            total = sum(row)
            hotkeys.append(hotkey)
            stakes.append(float(stake))
            matrix.append(tuple(v / total for v in row) if total else tuple(row))
        return tuple(hotkeys), tuple(stakes), tuple(matrix)
