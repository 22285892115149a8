"""SQLite plumbing for LocalChain: schema, connections, transactions and the block clock.

Every write is one `BEGIN IMMEDIATE` transaction, so a read-check-write (rate limit, space
quota, next uid) is atomic across processes; WAL + synchronous=FULL means a process killed
with SIGKILL leaves the last committed state, never half a write.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cacheon_subnet.chain.backend import ChainError, ChainUnavailable, NotRegistered

SCHEMA_VERSION = 1

# Served endpoints (subtensor's Axons map). Added after schema 1 shipped, so it is created on
# first use in older files too (serve_axon) and read as empty where it is absent.
AXONS = (
    "CREATE TABLE IF NOT EXISTS axons(netuid INTEGER NOT NULL, hotkey TEXT NOT NULL,"
    " ip TEXT NOT NULL, port INTEGER NOT NULL, protocol INTEGER NOT NULL, version INTEGER NOT NULL,"
    " block INTEGER NOT NULL, PRIMARY KEY(netuid, hotkey))"
)

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS subnets(netuid INTEGER PRIMARY KEY, tempo INTEGER NOT NULL,"
    " owner_hotkey TEXT NOT NULL, weights_version_key INTEGER NOT NULL,"
    " weights_rate_limit INTEGER NOT NULL, max_uids INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS neurons(netuid INTEGER NOT NULL, uid INTEGER NOT NULL,"
    " hotkey TEXT NOT NULL, coldkey TEXT NOT NULL, stake REAL NOT NULL,"
    " validator_permit INTEGER NOT NULL, registered_block INTEGER NOT NULL,"
    " last_update INTEGER NOT NULL, PRIMARY KEY(netuid, uid), UNIQUE(netuid, hotkey))",
    "CREATE TABLE IF NOT EXISTS commitments(id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " netuid INTEGER NOT NULL, hotkey TEXT NOT NULL, commit_block INTEGER NOT NULL,"
    " reveal_block INTEGER NOT NULL, data TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS commitments_by_hotkey ON commitments(netuid, hotkey, id)",
    "CREATE TABLE IF NOT EXISTS space_used(netuid INTEGER NOT NULL, hotkey TEXT NOT NULL,"
    " epoch INTEGER NOT NULL, used INTEGER NOT NULL, PRIMARY KEY(netuid, hotkey))",
    "CREATE TABLE IF NOT EXISTS weights(netuid INTEGER NOT NULL, setter_uid INTEGER NOT NULL,"
    " uid INTEGER NOT NULL, value INTEGER NOT NULL, PRIMARY KEY(netuid, setter_uid, uid))",
    AXONS,
)


def connect(path: Path) -> sqlite3.Connection:
    """Autocommit connection (we issue BEGIN/COMMIT ourselves) with a 30 s busy wait."""
    try:
        con = sqlite3.connect(str(path), timeout=30.0, isolation_level=None, check_same_thread=False)
        con.row_factory = sqlite3.Row
        con.execute("PRAGMA busy_timeout=30000")
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=FULL")
    except sqlite3.DatabaseError as exc:
        raise ChainUnavailable(f"{path}: cannot open SQLite database ({exc})") from exc
    return con


@contextmanager
def transaction(con: sqlite3.Connection, write: bool, where: Path) -> Iterator[sqlite3.Connection]:
    try:
        con.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    except sqlite3.OperationalError as exc:
        raise ChainUnavailable(f"{where}: cannot start a transaction ({exc})") from exc
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def init_file(path: Path, default_netuid: int, seconds_per_block: float, exist_ok: bool) -> None:
    """Create the schema and genesis row; a second creator (another process) sees `exists`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    con = connect(path)
    try:
        with transaction(con, True, path):
            for stmt in SCHEMA:
                con.execute(stmt)
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
            if meta and not exist_ok:
                raise ChainError(f"{path}: a chain already exists here (exist_ok=False)", "exists")
            if not meta:
                rows = {
                    "schema": str(SCHEMA_VERSION),
                    "genesis": repr(time.time()),
                    "seconds_per_block": repr(float(seconds_per_block)),
                    "offset": "0",
                    "default_netuid": str(int(default_netuid)),
                }
                con.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", rows.items())
    finally:
        con.close()


def read_meta(path: Path) -> dict[str, str]:
    if not path.is_file():
        raise ChainUnavailable(
            f"{path}: no local chain file (create it with `cacheon chain local create --local-chain {path}`)"
        )
    try:
        con = connect(path)
        try:
            meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise ChainUnavailable(f"{path}: not a local chain database ({exc})") from exc
    if meta.get("schema") != str(SCHEMA_VERSION):
        raise ChainUnavailable(f"{path}: schema {meta.get('schema')!r}, this code reads schema {SCHEMA_VERSION}")
    return meta


class Store:
    """One process's handle on the chain file (re-opened after fork), plus shared lookups."""

    def __init__(self, path: Path, genesis: float, seconds_per_block: float, default_netuid: int):
        self.path = path
        self.genesis = genesis
        self.seconds_per_block = seconds_per_block
        self.default_netuid = default_netuid
        self._lock = threading.RLock()
        self._con: sqlite3.Connection | None = None
        self._pid = -1

    def close(self) -> None:
        with self._lock:
            if self._con is not None and self._pid == os.getpid():
                self._con.close()
            self._con = None

    @contextmanager
    def _tx(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        with self._lock:
            # A forked child must never reuse its parent's SQLite handle.
            if self._con is None or self._pid != os.getpid():
                self._con = connect(self.path)
                self._pid = os.getpid()
            with transaction(self._con, write, self.path) as con:
                yield con

    def _block(self, con: sqlite3.Connection) -> int:
        """Manual offset plus whole wall-clock blocks since genesis (none if spb <= 0)."""
        offset = int(con.execute("SELECT value FROM meta WHERE key='offset'").fetchone()[0])
        if self.seconds_per_block <= 0:
            return offset
        return offset + int(max(0.0, time.time() - self.genesis) // self.seconds_per_block)

    def _subnet(self, con: sqlite3.Connection, netuid: int) -> sqlite3.Row:
        row = con.execute("SELECT * FROM subnets WHERE netuid=?", (netuid,)).fetchone()
        if row is None:
            raise ChainError(f"netuid {netuid} does not exist on {self.path.name}", "subnet_missing")
        return row

    def _subnet_exists(self, netuid: int) -> bool:
        with self._tx() as con:
            row = con.execute("SELECT 1 FROM subnets WHERE netuid=?", (netuid,)).fetchone()
            return row is not None

    def _neuron(self, con: sqlite3.Connection, netuid: int, hotkey: str) -> sqlite3.Row:
        row = con.execute("SELECT * FROM neurons WHERE netuid=? AND hotkey=?", (netuid, hotkey)).fetchone()
        if row is None:
            raise NotRegistered(f"hotkey {hotkey!r} is not registered on netuid {netuid}")
        return row

    def _net(self, netuid: int | None) -> int:
        return self.default_netuid if netuid is None else int(netuid)
