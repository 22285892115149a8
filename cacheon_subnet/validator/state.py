"""The validator's durable state: one SQLite file that survives kill -9 and restarts.

Why SQLite + WAL + synchronous=FULL: every stage of the loop ends in exactly one
transaction, so a process killed at any instant leaves either the state before the stage or
the state after it, never half of one. Every stage reads its work from here, so restarting
simply resumes (a contribution stuck in `fetched` is screened again; nothing is lost).

The intake states are one table (TRANSITIONS); everything else derives from it:

    queued -> fetched -> screened -> verified -> qualified
        \\________\\__________\\___________\\----> failed       (the contribution's fault)
                                             \\-> no_decision  (we could not judge / superseded)

`screened` = the static screen passed (manifest slots known, policy scan clean);
`verified` = sandboxed verify_bundle PASSED; `qualified` = every op measured (evidence rows).
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cacheon_subnet.errors import CacheonError
from cacheon_subnet.records import ContributionState as S

DB_NAME = "validator.sqlite"
TARGETS_KEY = "targets"  # kv: the slots this validator judges (JSON list), for the leaderboard
ACTIVE: tuple[S, ...] = (S.QUEUED, S.FETCHED, S.SCREENED, S.VERIFIED)
TERMINAL: tuple[S, ...] = (S.QUALIFIED, S.FAILED, S.NO_DECISION)
STATES = ACTIVE + TERMINAL
TRANSITIONS: Mapping[S, frozenset[S]] = {
    S.QUEUED: frozenset({S.FETCHED, S.FAILED, S.NO_DECISION}),
    S.FETCHED: frozenset({S.SCREENED, S.QUEUED, S.FAILED, S.NO_DECISION}),  # queued: cache lost
    S.SCREENED: frozenset({S.VERIFIED, S.QUEUED, S.FAILED, S.NO_DECISION}),
    S.VERIFIED: frozenset({S.QUALIFIED, S.QUEUED, S.FAILED, S.NO_DECISION}),
    S.QUALIFIED: frozenset({S.VERIFIED, S.SCREENED, S.FAILED}),  # re-measure (screened: re-verify first); duplicate
    S.NO_DECISION: frozenset({S.FAILED}),  # a superseded one found to be a duplicate
    S.FAILED: frozenset(),
}
# Intake rules that reject or retire a contribution (column `rule`); NULL = accepted.
RULES = ("malformed", "rate_limited", "duplicate", "superseded")

_CONTRIBUTIONS = (
    "CREATE TABLE contributions(id TEXT PRIMARY KEY, hotkey TEXT NOT NULL, uid INTEGER,"
    " commit_block INTEGER NOT NULL, reveal_block INTEGER, url TEXT, digest TEXT,"
    " state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', rule TEXT,"
    " attempts INTEGER NOT NULL DEFAULT 0, next_try_at REAL NOT NULL DEFAULT 0,"
    " todo TEXT NOT NULL DEFAULT '[]', remeasures INTEGER"
    " NOT NULL DEFAULT 0, duplicate_of TEXT, superseded_by TEXT, seen_block INTEGER,"
    " detail TEXT NOT NULL DEFAULT '{}', created_at REAL NOT NULL, updated_at REAL NOT NULL)",
    "CREATE INDEX contributions_state ON contributions(state, commit_block, id)",
    "CREATE INDEX contributions_digest ON contributions(digest)",
    "CREATE INDEX contributions_hotkey ON contributions(hotkey, commit_block)",
    "CREATE TABLE transitions(id INTEGER PRIMARY KEY AUTOINCREMENT, contribution_id TEXT NOT NULL,"
    " from_state TEXT, to_state TEXT NOT NULL, reason TEXT NOT NULL, at REAL NOT NULL)",
)
_EVIDENCE = (
    "CREATE TABLE evidence(id INTEGER PRIMARY KEY AUTOINCREMENT, contribution_id TEXT NOT NULL,"
    " target TEXT NOT NULL, round INTEGER NOT NULL, verdict TEXT NOT NULL,"
    " quality_ok INTEGER NOT NULL, speedup REAL NOT NULL, speedup_vs_stock REAL NOT NULL,"
    " noise REAL NOT NULL, arena_id TEXT NOT NULL, label TEXT NOT NULL,"
    " evaluated_block INTEGER NOT NULL, incumbent_id TEXT, reason TEXT NOT NULL,"
    " detail TEXT NOT NULL DEFAULT '{}', settled INTEGER NOT NULL DEFAULT 0,"
    " settlement_id INTEGER, outcome TEXT, outcome_reason TEXT, created_at REAL NOT NULL,"
    " UNIQUE(contribution_id, target, round))",
    "CREATE INDEX evidence_unsettled ON evidence(settled, target)",
    "CREATE TABLE settlements(id INTEGER PRIMARY KEY AUTOINCREMENT, target TEXT NOT NULL,"
    " block INTEGER NOT NULL, incumbent_id TEXT, crown_id TEXT, evidence_count INTEGER NOT NULL,"
    " at REAL NOT NULL)",
    "CREATE TABLE crowns(target TEXT PRIMARY KEY, hotkey TEXT NOT NULL, contribution_id TEXT"
    " NOT NULL, commit_block INTEGER NOT NULL, crowned_block INTEGER NOT NULL,"
    " measured_speedup REAL NOT NULL, speedup_vs_stock REAL NOT NULL, arena_id TEXT NOT NULL,"
    " settlement_id INTEGER, updated_at REAL NOT NULL)",
    "CREATE TABLE crown_history(id INTEGER PRIMARY KEY AUTOINCREMENT, target TEXT NOT NULL,"
    " hotkey TEXT NOT NULL, contribution_id TEXT NOT NULL, commit_block INTEGER NOT NULL,"
    " crowned_block INTEGER NOT NULL, measured_speedup REAL NOT NULL, speedup_vs_stock REAL"
    " NOT NULL, arena_id TEXT NOT NULL, settlement_id INTEGER, reason TEXT NOT NULL,"
    " at REAL NOT NULL)",
)
_CHAIN = (
    "CREATE TABLE weights(id INTEGER PRIMARY KEY AUTOINCREMENT, state TEXT NOT NULL,"
    " created_block INTEGER NOT NULL, block INTEGER, version_key INTEGER NOT NULL,"
    " uids TEXT NOT NULL, vals TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,"
    " reason TEXT NOT NULL DEFAULT '', readback TEXT, created_at REAL NOT NULL,"
    " updated_at REAL NOT NULL)",
    "CREATE TABLE chain_errors(id INTEGER PRIMARY KEY AUTOINCREMENT, op TEXT NOT NULL,"
    " error_type TEXT NOT NULL, message TEXT NOT NULL, at REAL NOT NULL)",
    "CREATE TABLE kv(key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
# 2: the normalized identity of what a bundle runs (cacheon_subnet/bundle/identity/normalize.py), set at
# screening; a later commit with the same identity is a copy settled from the earlier verdict
_NORM_ID = (
    "ALTER TABLE contributions ADD COLUMN norm_id TEXT",
    "CREATE INDEX contributions_norm_id ON contributions(norm_id)",
)
# 3: a crown measured in another arena (a pin bump) is re-measured against the new stock before it
# is kept or retired (validator/bumps.py); one row per re-measure, at most one open per target
_PIN_BUMPS = (
    "CREATE TABLE pin_bumps(id INTEGER PRIMARY KEY AUTOINCREMENT, target TEXT NOT NULL,"
    " contribution_id TEXT NOT NULL, hotkey TEXT NOT NULL, old_arena TEXT NOT NULL,"
    " new_arena TEXT NOT NULL, old_pins TEXT, new_pins TEXT NOT NULL, state TEXT NOT NULL,"
    " tries INTEGER NOT NULL DEFAULT 0, speedup REAL, reason TEXT NOT NULL DEFAULT '',"
    " opened_at REAL NOT NULL, closed_at REAL)",
    "CREATE UNIQUE INDEX pin_bumps_open ON pin_bumps(target) WHERE state='open'",
)
# Append-only: migration N brings a DB from version N-1 to N. Never edit a shipped entry.
MIGRATIONS: tuple[tuple[str, ...], ...] = (_CONTRIBUTIONS + _EVIDENCE + _CHAIN, _NORM_ID, _PIN_BUMPS)
SCHEMA_VERSION = len(MIGRATIONS)


class StateError(CacheonError):
    """The state DB refused an operation (bad transition, unknown id, newer schema)."""


@dataclass(frozen=True)
class Contribution:
    """One row of `contributions` (id = hotkey-bound digest, or `malformed:<hash>`)."""

    id: str
    hotkey: str
    uid: int | None
    commit_block: int
    reveal_block: int | None
    url: str | None
    digest: str | None
    state: S
    reason: str
    rule: str | None
    attempts: int
    next_try_at: float
    todo: tuple[str, ...]
    remeasures: int
    duplicate_of: str | None
    superseded_by: str | None
    seen_block: int | None
    detail: dict[str, Any]
    norm_id: str | None = None  # normalized identity (set once screened; NULL before schema 2)

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Contribution:
        return cls(
            row["id"],
            row["hotkey"],
            row["uid"],
            row["commit_block"],
            row["reveal_block"],
            row["url"],
            row["digest"],
            S(row["state"]),
            row["reason"],
            row["rule"],
            row["attempts"],
            row["next_try_at"],
            tuple(json.loads(row["todo"])),
            row["remeasures"],
            row["duplicate_of"],
            row["superseded_by"],
            row["seen_block"],
            json.loads(row["detail"]),
            row["norm_id"] if "norm_id" in row.keys() else None,
        )


def acquire_run_lock(state_dir: Path) -> int:
    """One running validator per state dir (two would publish twice). flock, so a process
    killed with SIGKILL releases it with its file descriptors. Returns the fd to keep open."""
    private_dir(state_dir)
    fd = os.open(state_dir / "validator.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StateError(f"{state_dir}: another validator process is running on this state dir") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


def private_dir(d: Path) -> None:
    """The state dir is the validator's alone (0700): no other uid (the sandbox's) may list or read it."""
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)


def private_db(path: Path) -> None:
    """DB, WAL and SHM files 0600 (SQLite gives its -wal/-shm the main file's mode)."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if p.exists():
            os.chmod(p, 0o600)


def connect(path: Path) -> sqlite3.Connection:
    private_db(path)
    con = sqlite3.connect(str(path), timeout=30.0, isolation_level=None, check_same_thread=False)
    con.row_factory = sqlite3.Row
    con.execute("PRAGMA busy_timeout=30000")
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("PRAGMA foreign_keys=ON")
    return con


class StateDB:
    """Handle on <state_dir>/validator.sqlite. Use `tx()` for every write."""

    def __init__(self, state_dir: str | Path, *, readonly: bool = False) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / DB_NAME
        self._lock = threading.RLock()
        if readonly:
            if not self.path.is_file():
                raise StateError(f"{self.path}: no validator state here (run the validator first)")
            self.con = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode=ro",
                uri=True,
                timeout=30.0,
                isolation_level=None,
                check_same_thread=False,
            )
            self.con.row_factory = sqlite3.Row
            self._check_version(migrate=False)
            return
        private_dir(self.dir)
        self.con = connect(self.path)
        self._check_version(migrate=True)

    def close(self) -> None:
        self.con.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE ... COMMIT, ROLLBACK on any exception)."""
        with self._lock:
            self.con.execute("BEGIN IMMEDIATE")
            try:
                yield self.con
            except BaseException:
                self.con.execute("ROLLBACK")
                raise
            self.con.execute("COMMIT")

    def _check_version(self, migrate: bool) -> None:
        have = self.schema_version()
        if have > SCHEMA_VERSION:
            raise StateError(
                f"{self.path}: schema version {have} is newer than this code ({SCHEMA_VERSION}); upgrade cacheon-subnet"
            )
        if have < SCHEMA_VERSION and not migrate:
            raise StateError(f"{self.path}: schema version {have} < {SCHEMA_VERSION}; start the validator once to migrate")
        for version in range(have + 1, SCHEMA_VERSION + 1):
            with self.tx() as con:
                con.execute(
                    "CREATE TABLE IF NOT EXISTS schema_version(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
                )
                if con.execute("SELECT 1 FROM schema_version WHERE version=?", (version,)).fetchone():
                    continue  # another process migrated between our check and BEGIN
                for stmt in MIGRATIONS[version - 1]:
                    con.execute(stmt)
                con.execute("INSERT INTO schema_version VALUES (?, ?)", (version, time.time()))

    def schema_version(self) -> int:
        exists = self.con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_version'").fetchone()
        if not exists:
            return 0
        row = self.con.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    # -- kv and the chain error log ---------------------------------------------------------

    def get(self, key: str, default: str | None = None) -> str | None:
        row = self.con.execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    def put(self, key: str, value: object, con: sqlite3.Connection | None = None) -> None:
        if con is None:
            with self.tx() as c:
                self.put(key, value, c)
            return
        con.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, str(value)))

    def log_chain_error(self, op: str, exc: BaseException) -> None:
        with self.tx() as con:
            con.execute(
                "INSERT INTO chain_errors(op, error_type, message, at) VALUES (?, ?, ?, ?)",
                (op, type(exc).__name__, str(exc)[:2000], time.time()),
            )

    # -- contributions ----------------------------------------------------------------------

    def contribution(self, cid: str, con: sqlite3.Connection | None = None) -> Contribution:
        row = (con or self.con).execute("SELECT * FROM contributions WHERE id=?", (cid,)).fetchone()
        if row is None:
            raise StateError(f"no contribution {cid!r}")
        return Contribution.from_row(row)

    def find(self, cid: str) -> Contribution | None:
        row = self.con.execute("SELECT * FROM contributions WHERE id=?", (cid,)).fetchone()
        return Contribution.from_row(row) if row else None

    def contributions(self, states: tuple[str, ...] = STATES) -> list[Contribution]:
        marks = ",".join("?" * len(states))
        rows = self.con.execute(
            f"SELECT * FROM contributions WHERE state IN ({marks}) ORDER BY commit_block, id", states
        ).fetchall()
        return [Contribution.from_row(r) for r in rows]

    def due(self, state: str, now: float | None = None) -> list[Contribution]:
        """Contributions in `state` whose backoff has expired, oldest commit first."""
        now = time.time() if now is None else now
        rows = self.con.execute(
            "SELECT * FROM contributions WHERE state=? AND next_try_at<=? ORDER BY commit_block, id", (state, now)
        ).fetchall()
        return [Contribution.from_row(r) for r in rows]

    def counts(self) -> dict[str, int]:
        rows = self.con.execute("SELECT state, COUNT(*) FROM contributions GROUP BY state")
        got = {r[0]: int(r[1]) for r in rows}
        return {s: got.get(s, 0) for s in STATES}

    def insert(
        self,
        con: sqlite3.Connection,
        *,
        cid: str,
        hotkey: str,
        uid: int | None,
        commit_block: int,
        reveal_block: int | None,
        url: str | None,
        digest: str | None,
        state: str,
        reason: str = "",
        rule: str | None = None,
        seen_block: int | None = None,
        **extra: Any,
    ) -> None:
        if state not in STATES or (rule is not None and rule not in RULES):
            raise StateError(f"insert {cid}: bad state {state!r} or rule {rule!r}")
        now = time.time()
        con.execute(
            "INSERT INTO contributions(id, hotkey, uid, commit_block, reveal_block, url, digest,"
            " state, reason, rule, seen_block, created_at, updated_at) VALUES"
            " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (cid, hotkey, uid, commit_block, reveal_block, url, digest, state, reason, rule, seen_block, now, now),
        )
        if extra:
            self.update(con, cid, extra)
        con.execute(
            "INSERT INTO transitions(contribution_id, from_state, to_state, reason, at) VALUES (?, NULL, ?, ?, ?)",
            (cid, state, reason or "intake", now),
        )

    def move(self, con: sqlite3.Connection, cid: str, to: str, reason: str = "", **fields: Any) -> Contribution:
        """Transition inside the caller's transaction; attempts/backoff reset unless given."""
        cur = self.contribution(cid, con)
        if to not in TRANSITIONS.get(cur.state, frozenset()):
            raise StateError(
                f"{cid}: transition {cur.state} -> {to} is not allowed (allowed: {sorted(TRANSITIONS[cur.state])})"
            )
        fields.setdefault("attempts", 0)
        fields.setdefault("next_try_at", 0.0)
        self.update(con, cid, {"state": to, "reason": reason, **fields})
        con.execute(
            "INSERT INTO transitions(contribution_id, from_state, to_state, reason, at) VALUES (?, ?, ?, ?, ?)",
            (cid, cur.state, to, reason, time.time()),
        )
        return self.contribution(cid, con)

    def transition(self, cid: str, to: str, reason: str = "", **fields: Any) -> Contribution:
        """One transition, one transaction."""
        with self.tx() as con:
            return self.move(con, cid, to, reason, **fields)

    def retry_later(self, cid: str, reason: str, delay_s: float) -> Contribution:
        """Count a transient failure and back off; the state does not change."""
        with self.tx() as con:
            cur = self.contribution(cid, con)
            self.update(con, cid, {"attempts": cur.attempts + 1, "reason": reason, "next_try_at": time.time() + delay_s})
            return self.contribution(cid, con)

    def update(self, con: sqlite3.Connection, cid: str, fields: Mapping[str, Any]) -> None:
        """Set columns of one row inside the caller's transaction (no state check: use move)."""
        allowed = {
            "state",
            "reason",
            "rule",
            "attempts",
            "next_try_at",
            "todo",
            "remeasures",
            "duplicate_of",
            "superseded_by",
            "detail",
            "uid",
            "url",
            "norm_id",
        }
        bad = set(fields) - allowed
        if bad:
            raise StateError(f"{cid}: cannot set {sorted(bad)}")
        values = {
            k: (json.dumps(list(v)) if k == "todo" else json.dumps(v, sort_keys=True) if k == "detail" else v)
            for k, v in fields.items()
        }
        values["updated_at"] = time.time()
        sets = ", ".join(f"{k}=?" for k in values)
        cur = con.execute(f"UPDATE contributions SET {sets} WHERE id=?", (*values.values(), cid))
        if cur.rowcount != 1:
            raise StateError(f"no contribution {cid!r}")
