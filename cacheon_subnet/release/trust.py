"""What this host has verified before, per owner: the rollback guard of `cacheon release verify`.

Why: a signature says who made a release, not that it is the newest. Anyone holding an older file
the owner signed (a mirror, a cache, an attacker who wants a crown that was later retired back in
service) can hand it to an operator, and its signature still verifies. TUF answers this with state
on the client: remember the newest version trusted, refuse anything older. This file is that
state: per owner, the highest serial verified here and the descriptor that carried it. The first
release a host sees is trusted on first use; `--min-serial N` (from the owner's announcement)
closes that gap. A file this module cannot read is an error, never an empty start (fail closed).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cacheon_subnet.errors import UsageError
from cacheon_subnet.records.codec import RecordError, from_json, to_json

SCHEMA = "cacheon.release-trust/1"
MAX_BYTES = 1 << 20  # ~4000 owners; a host trusts one or two
MAX_OWNERS = 1024


@dataclass(frozen=True)
class Seen:
    """The newest release of one owner this host verified."""

    owner: str  # SS58
    serial: int
    descriptor: str  # SHA-256 of the descriptor's bytes
    name: str  # the release package (cacheon_release_<digest12>)
    verified_at: str  # UTC, ISO 8601


@dataclass(frozen=True)
class TrustFile:
    schema: str
    owners: tuple[Seen, ...]


@dataclass(frozen=True)
class Candidate:
    """The release being verified, as the guard needs it."""

    owner: str
    serial: int
    descriptor: str
    name: str


def load(path: Path) -> dict[str, Seen]:
    """owner -> Seen; {} when the file does not exist. Unreadable or malformed: UsageError naming it."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise UsageError(f"{path}: cannot read the release trust file ({e.strerror})") from None
    if len(data) > MAX_BYTES:
        raise UsageError(f"{path}: more than {MAX_BYTES} bytes; not a release trust file")
    try:
        doc = from_json(TrustFile, json.loads(data))
    except (ValueError, RecursionError, RecordError) as e:
        raise UsageError(f"{path}: not a release trust file ({type(e).__name__}: {str(e)[:200]})") from None
    if doc.schema != SCHEMA:
        raise UsageError(f"{path}: schema {doc.schema!r}, expected {SCHEMA!r}")
    owners = {s.owner: s for s in doc.owners}
    if len(owners) != len(doc.owners) or len(owners) > MAX_OWNERS:
        raise UsageError(f"{path}: owners: duplicate entries or more than {MAX_OWNERS}")
    return owners


def problem(seen: Seen | None, c: Candidate, min_serial: int = 0, allow_rollback: bool = False) -> str | None:
    """Why `c` must be refused given what this host verified before (None: it may be trusted)."""
    if c.serial < min_serial:
        return f"serial {c.serial} is below --min-serial {min_serial}: an older release than the one you asked for"
    if seen is None:
        return None
    if c.serial == seen.serial and c.descriptor != seen.descriptor:
        return (
            f"serial {c.serial} was verified here before as another release ({seen.name}, {seen.verified_at}): "
            f"the owner signed two releases under one serial, or its key signs what it should not"
        )
    if c.serial < seen.serial and not allow_rollback:
        return (
            f"serial {c.serial} is older than serial {seen.serial} ({seen.name}), verified here from this owner on "
            f"{seen.verified_at}: a replayed older release; pass --allow-rollback to install it on purpose"
        )
    return None


def note(seen: Seen | None, c: Candidate) -> str:
    """The one line verify prints about the sequence."""
    if seen is None:
        return f"serial {c.serial}: the first release of this owner verified here (trusted on first use)"
    if c.serial < seen.serial:
        return f"serial {c.serial}: older than serial {seen.serial} verified here; accepted (--allow-rollback)"
    if c.serial == seen.serial:
        return f"serial {c.serial}: verified here before ({seen.verified_at})"
    return f"serial {c.serial}: newer than serial {seen.serial} verified here ({seen.name})"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def record(path: Path, c: Candidate) -> None:
    """Remember `c` when it is the newest of its owner here. Under a lock, re-read, then an atomic
    replace with fsyncs: a kill at any point leaves the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path):
        owners = load(path)
        old = owners.get(c.owner)
        if old is not None and old.serial >= c.serial:
            return
        when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        owners[c.owner] = Seen(c.owner, c.serial, c.descriptor, c.name, when)
        if len(owners) > MAX_OWNERS:
            raise UsageError(f"{path}: more than {MAX_OWNERS} owners; remove the ones you no longer trust")
        body = to_json(TrustFile(SCHEMA, tuple(sorted(owners.values(), key=lambda s: s.owner))))
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(body, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
