"""What this host has verified before, per owner: the rollback guard of `cacheon release verify`.

Why: a signature says who made a release, not that it is the newest. Anyone holding an older file
the owner signed (a mirror, a cache, an attacker who wants a crown that was later retired back in
service) can hand it to an operator, and its signature still verifies. TUF answers this with state
on the client: remember the newest version trusted, refuse anything older. This file is that
state: per owner, the highest serial verified here and the descriptor that carried it. The first
release a host sees is trusted on first use; `--min-serial N` (from the owner's announcement)
closes that gap. A file this module cannot read is an error, never an empty start (fail closed).

Why the file is handled warily (red team s21): whoever can write its directory (a shared
CACHEON_RELEASE_TRUST) must not make verify write another file through a planted symlink, or hang
it on a FIFO; and two verifies at once must not both pass on one first read, so the guard's check
is made again under the lock, on what the file says when the verdict is written.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cacheon_subnet.errors import UsageError
from cacheon_subnet.records.codec import RecordError, from_json, to_json
from cacheon_subnet.release.descriptor import MAX_SERIAL
from cacheon_subnet.release.sign import owner_key

SCHEMA = "cacheon.release-trust/1"
MAX_BYTES = 1 << 20  # ~4000 owners; a host trusts one or two
MAX_OWNERS = 1024


@dataclass(frozen=True)
class Seen:
    """The newest release of one owner this host verified."""

    owner: str  # SS58, format 42 (sign.owner_key): one key, one history
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
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens, then is refused
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise UsageError(f"{path}: cannot read the release trust file ({e.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"{path}: not a regular file; not a release trust file")
        with open(fd, "rb", closefd=False) as f:
            data = f.read(MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise UsageError(f"{path}: more than {MAX_BYTES} bytes; not a release trust file")
    try:
        doc = from_json(TrustFile, json.loads(data))
    except (ValueError, RecursionError, RecordError) as e:
        raise UsageError(f"{path}: not a release trust file ({type(e).__name__}: {str(e)[:200]})") from None
    if doc.schema != SCHEMA:
        raise UsageError(f"{path}: schema {doc.schema!r}, expected {SCHEMA!r}")
    for s in doc.owners:
        if not 1 <= s.serial <= MAX_SERIAL or _canonical(s.owner) != s.owner:
            raise UsageError(
                f"{path}: owners: {s.owner!r}, serial {s.serial}: an owner is an SS58 address in format 42, "
                f"a serial in [1, {MAX_SERIAL}]"
            )
    owners = {s.owner: s for s in doc.owners}
    if len(owners) != len(doc.owners) or len(owners) > MAX_OWNERS:
        raise UsageError(f"{path}: owners: duplicate entries or more than {MAX_OWNERS}")
    return owners


def _canonical(owner: str) -> str | None:
    try:
        return owner_key(owner)
    except ValueError:
        return None


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
    """An exclusive lock on `path`.lock, never through a symlink planted there."""
    lock = path.with_name(path.name + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"{lock}: not a regular file; remove it")
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def record(path: Path, c: Candidate, allow_rollback: bool = False) -> str | None:
    """Remember `c` when it is the newest of its owner here; returns the guard's problem with `c`
    when the file, re-read under the lock, now has one (a verify that raced this one recorded a
    newer release since the first look). An atomic replace of a fresh temp file (O_EXCL, a random
    name, 0600) with fsyncs: a kill at any point leaves the old file or the new one. A file that
    cannot be written: UsageError naming it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path):
            owners = load(path)
            old = owners.get(c.owner)
            late = problem(old, c, 0, allow_rollback)
            if late or (old is not None and old.serial >= c.serial):
                return late
            _write(path, owners | {c.owner: Seen(c.owner, c.serial, c.descriptor, c.name, _now())})
    except OSError as e:
        where = e.filename or path
        raise UsageError(f"{where}: cannot write the release trust file {path} ({e.strerror})") from None
    return None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write(path: Path, owners: dict[str, Seen]) -> None:
    if len(owners) > MAX_OWNERS:
        raise UsageError(f"{path}: more than {MAX_OWNERS} owners; remove the ones you no longer trust")
    body = to_json(TrustFile(SCHEMA, tuple(sorted(owners.values(), key=lambda s: s.owner))))
    fd, tmp = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with open(fd, "w", encoding="utf-8") as f:
            json.dump(body, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
