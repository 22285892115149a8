"""What the web process reads: a copy of the parts of the state DB the page shows, replaced
atomically, in a directory the web uid can read and never write.

Why a copy: the web process runs as its own uid (supervisor.py), which must never reach the
state dir (0700, with the run lock beside it) nor the wallet. It cannot open the live DB either:
a WAL database needs its -shm file writable to be read consistently, and `immutable` over a live
WAL would show stale or torn pages. So the validator copies the tables the page reads (only
their shown columns, and of an evidence row's detail only its plot figures, records.BoardFigures) inside one read
transaction (a consistent view; WAL readers never block the writer), into a rollback-journal
file, fsyncs nothing (it is a cache, rebuilt at start), then renames it over the last one. A
reader opens it `immutable=1`: no locks, no journal, and a request in flight keeps the old inode.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from cacheon_subnet.records import NO_FIGURES, BoardFigures, RecordError, board_json, board_of, read_detail
from cacheon_subnet.validator.state import DB_NAME, TARGETS_KEY, StateDB
from cacheon_subnet.validator.web.stages import stages_of

SNAPSHOT = "leaderboard.sqlite"
COLUMNS = {
    "contributions": (
        "id",
        "hotkey",
        "uid",
        "commit_block",
        "reveal_block",
        "url",
        "digest",
        "state",
        "rule",
        "reason",
        "duplicate_of",
        "superseded_by",
        "updated_at",
    ),
    "evidence": (
        "id",
        "contribution_id",
        "target",
        "round",
        "verdict",
        "quality_ok",
        "speedup",
        "speedup_vs_stock",
        "noise",
        "arena_id",
        "label",
        "evaluated_block",
        "incumbent_id",
        "reason",
        "detail",
        "settled",
        "outcome",
        "outcome_reason",
        "created_at",
    ),
    "crowns": (
        "target",
        "hotkey",
        "contribution_id",
        "commit_block",
        "crowned_block",
        "measured_speedup",
        "speedup_vs_stock",
        "arena_id",
        "updated_at",
    ),
    "transitions": ("id", "contribution_id", "from_state", "to_state", "reason", "at"),
    "schema_version": ("version", "applied_at"),
}
KV_KEYS = ("last_sync_block", "last_sync_at", TARGETS_KEY)
DETAIL_KEYS = tuple(BoardFigures.__dataclass_fields__)  # what stages.stages_of reads
INDEXES = (
    "CREATE INDEX c_order ON contributions(commit_block, id)",
    "CREATE INDEX c_hotkey ON contributions(hotkey, commit_block)",
    "CREATE INDEX c_state ON contributions(state, commit_block)",
    "CREATE INDEX e_contribution ON evidence(contribution_id, id)",
    "CREATE INDEX e_crown ON evidence(contribution_id, target, id)",
    "CREATE INDEX t_contribution ON transitions(contribution_id, id)",
)


def signature(state_dir: Path) -> tuple[int, ...] | None:
    """Changes whenever the state DB does (its file or its WAL); None while there is none."""
    out: list[int] = []
    for name in (DB_NAME, DB_NAME + "-wal"):
        try:
            st = os.stat(Path(state_dir) / name)
        except FileNotFoundError:
            if name == DB_NAME:
                return None
            continue
        out += [st.st_mtime_ns, st.st_size, st.st_ino]
    return tuple(out)


def _figures(text: Any) -> tuple[str, int]:
    """A row's plot figures (records.BoardFigures), decoded from its detail here, once, and
    whether they hold a timed stage to plot (`has_windows`, what a list page shows): the web
    process reads only these. A detail that does not decode has none to show (the web process,
    reading the state dir itself, logs why)."""
    try:
        figures = board_of(read_detail(text))
    except RecordError:
        figures = NO_FIGURES
    return board_json(figures), int(bool(stages_of(figures)))


def write(state_dir: Path, out_dir: Path) -> Path | None:
    """Copy what the page shows from `state_dir` into `out_dir`/SNAPSHOT; None when there is no
    state DB yet. Raises StateError (a schema this code does not read) or sqlite3.Error."""
    if signature(state_dir) is None:
        return None
    out_dir = Path(out_dir)
    tmp = out_dir / f".{SNAPSHOT}.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    src = StateDB(state_dir, readonly=True)
    dst = sqlite3.connect(tmp, isolation_level=None)
    try:
        dst.execute("PRAGMA journal_mode=OFF")
        dst.execute("PRAGMA synchronous=OFF")
        dst.execute("BEGIN")
        src.con.execute("BEGIN")  # one read transaction: every table from the same commit
        try:
            for table, cols in COLUMNS.items():
                _copy(src.con, dst, table, cols)
            dst.execute("CREATE TABLE kv(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            marks = ",".join("?" * len(KV_KEYS))
            dst.executemany(
                "INSERT INTO kv VALUES (?, ?)",
                [tuple(r) for r in src.con.execute(f"SELECT key, value FROM kv WHERE key IN ({marks})", KV_KEYS)],
            )
        finally:
            src.con.execute("ROLLBACK")
        for stmt in INDEXES:
            dst.execute(stmt)
        dst.execute("COMMIT")
    except BaseException:
        dst.close()
        tmp.unlink(missing_ok=True)
        raise
    finally:
        src.close()
    dst.close()
    os.chmod(tmp, 0o644)
    final = out_dir / SNAPSHOT
    os.replace(tmp, final)
    return final


def _copy(src: sqlite3.Connection, dst: sqlite3.Connection, table: str, cols: tuple[str, ...]) -> None:
    """One table's shown columns; an evidence row's detail becomes its figures, plus `has_windows`."""
    derived = ("has_windows",) if "detail" in cols else ()
    dst.execute(f"CREATE TABLE {table}({', '.join(cols + derived)})")
    have = {r[1] for r in src.execute(f"PRAGMA table_info({table})")}
    picked = ", ".join(c if c in have else "NULL" for c in cols)
    insert = f"INSERT INTO {table} VALUES ({', '.join('?' * len(cols + derived))})"
    detail = cols.index("detail") if derived else -1
    cur = src.execute(f"SELECT {picked} FROM {table}")
    while rows := cur.fetchmany(1000):
        if detail >= 0:
            rows = [_shown(r, detail) for r in rows]
        dst.executemany(insert, rows)


def _shown(row: tuple[Any, ...], detail: int) -> tuple[Any, ...]:
    """An evidence row with its detail replaced by its figures, and `has_windows` appended."""
    figures, plotted = _figures(row[detail])
    return (*row[:detail], figures, *row[detail + 1 :], plotted)
