"""A real checkpoint the operator names (`[model] path`): its content digest, per-file manifest,
and the verified copy the engines load.

digest = "sha256:" + SHA-256 over the files sorted by UTF-8 relative path, each fed as
    u64be(len(path)) || path || u64be(size) || sha256(file)   (32 raw bytes)
— the bundle digest's canonical form (cacheon_subnet/bundle/digest.py) with each file's own
SHA-256 in place of its bytes, so a per-file manifest {path: size, sha256} recomputes it and names
the file that differs. Every regular file under the directory counts (a symlink counts as the
file it points to, inside or outside; a dangling one is an error): what SGLang may read is what
the digest covers.

The engines never read the operator's directory: the host copies it into the arena home while
hashing what it copies (`install`), so what was checked is what is loaded (no window between a
check and a later read), and the copy is readable by the sandbox uid and read-only to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cacheon_subnet.errors import CacheonError

MANIFEST_SCHEMA = "cacheon.model-manifest/1"
STAMP = ".cacheon_model.json"  # in the installed copy only (never part of the digest)
_BLOCK = 1 << 22


class CheckpointMismatch(CacheonError):
    """The checkpoint on disk is not the one the arena config declares (names the file)."""


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative, "/"-separated
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    files: tuple[FileEntry, ...]  # sorted by UTF-8 path
    # the checkpoint's config.json text, checked against its entry: verify/bench read the model's
    # shapes from the manifest alone, on a machine without the weights (a miner's)
    config_json: str | None = None

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for f in self.files:
            p = f.path.encode("utf-8")
            h.update(len(p).to_bytes(8, "big") + p + f.size.to_bytes(8, "big") + bytes.fromhex(f.sha256))
        return "sha256:" + h.hexdigest()

    def by_path(self) -> dict[str, FileEntry]:
        return {f.path: f for f in self.files}

    def to_json(self) -> dict:
        doc = {
            "schema": MANIFEST_SCHEMA,
            "digest": self.digest,
            "files": {f.path: {"size": f.size, "sha256": f.sha256} for f in self.files},
        }
        if self.config_json is not None:
            doc["config_json"] = self.config_json
        return doc


def manifest_of(entries: Mapping[str, tuple[int, str]] | list[FileEntry], config_json: str | None = None) -> Manifest:
    items = entries if isinstance(entries, list) else [FileEntry(p, s, h) for p, (s, h) in entries.items()]
    return Manifest(tuple(sorted(items, key=lambda f: f.path.encode("utf-8"))), config_json)


def _files(root: Path) -> list[tuple[str, Path]]:
    if not root.is_dir():
        raise CheckpointMismatch(f"{root}: no such checkpoint directory")
    out = []
    for d, dirs, names in os.walk(root):
        dirs.sort()
        for n in sorted(names):
            full = Path(d) / n
            rel = full.relative_to(root).as_posix()
            if rel == STAMP:
                continue
            if not full.is_file():  # follows symlinks: a dangling one or a fifo is refused
                raise CheckpointMismatch(f"{root}: {rel} is not a regular file (dangling link or special file)")
            out.append((rel, full))
    if not out:
        raise CheckpointMismatch(f"{root}: the checkpoint directory is empty")
    return out


def _hash_file(path: Path, copy_to: Path | None = None) -> tuple[int, str]:
    h, n = hashlib.sha256(), 0
    with path.open("rb") as f, copy_to.open("wb") if copy_to else open(os.devnull, "wb") as out:
        for block in iter(lambda: f.read(_BLOCK), b""):
            h.update(block)
            n += len(block)
            if copy_to:
                out.write(block)
    return n, h.hexdigest()


def scan(root: str | Path) -> Manifest:
    """Hash every file of the checkpoint directory (the operator's `cacheon arena digest`)."""
    root = Path(root)
    files = _files(root)
    entries = [FileEntry(rel, *_hash_file(full)) for rel, full in files]
    cj = next((full for rel, full in files if rel == "config.json"), None)
    text = cj.read_bytes().decode("utf-8", errors="replace") if cj is not None and cj.stat().st_size < 1 << 20 else None
    m = manifest_of(entries, text)
    if text is not None and hashlib.sha256(text.encode()).hexdigest() != m.by_path()["config.json"].sha256:
        m = manifest_of(entries)  # changed while hashed, or not UTF-8: keep no copy rather than a wrong one
    return m


def load_manifest(path: str | Path) -> Manifest:
    """A manifest file written by `cacheon arena digest`; its own digest field must agree with
    its entries (a hand-edited manifest is refused)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
        files = doc["files"]
        cj = doc.get("config_json")
        m = manifest_of(
            {str(p): (int(v["size"]), str(v["sha256"])) for p, v in files.items()}, cj if isinstance(cj, str) else None
        )
        bad = [f.path for f in m.files if len(f.sha256) != 64 or any(c not in "0123456789abcdef" for c in f.sha256)]
    except FileNotFoundError:
        raise CheckpointMismatch(f"{path}: no such manifest (write it with `cacheon arena digest`)") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointMismatch(f"{path}: not a {MANIFEST_SCHEMA} manifest ({type(e).__name__}: {e})") from None
    if doc.get("schema") != MANIFEST_SCHEMA:
        raise CheckpointMismatch(f"{path}: schema {doc.get('schema')!r} != {MANIFEST_SCHEMA!r}")
    if bad:
        raise CheckpointMismatch(f"{path}: {bad[0]}: sha256 is not 64 lowercase hex digits")
    if doc.get("digest") != m.digest:
        raise CheckpointMismatch(f"{path}: its digest {doc.get('digest')!r} is not the digest of its files ({m.digest})")
    entry = m.by_path().get("config.json")
    if m.config_json is not None and (entry is None or hashlib.sha256(m.config_json.encode()).hexdigest() != entry.sha256):
        raise CheckpointMismatch(f"{path}: its config_json is not the config.json its files list")
    return m


def write_manifest(m: Manifest, path: str | Path) -> None:
    Path(path).write_text(json.dumps(m.to_json(), indent=1, sort_keys=True) + "\n")


def differences(want: Manifest, got: Manifest) -> list[str]:
    """Each file that differs, by name: missing, unexpected, other size, other content."""
    a, b = want.by_path(), got.by_path()
    out = [f"{p}: missing" for p in sorted(a.keys() - b.keys())]
    out += [f"{p}: not in the declared checkpoint" for p in sorted(b.keys() - a.keys())]
    for p in sorted(a.keys() & b.keys()):
        if a[p].size != b[p].size:
            out.append(f"{p}: {b[p].size} bytes, declared {a[p].size}")
        elif a[p].sha256 != b[p].sha256:
            out.append(f"{p}: sha256 {b[p].sha256[:16]}…, declared {a[p].sha256[:16]}…")
    return out


def refuse(root: Path, digest: str, got: Manifest, want: Manifest | None) -> CheckpointMismatch:
    if want is not None:
        diff = differences(want, got)
        return CheckpointMismatch(
            f"{root}: checkpoint digest {got.digest} != declared {digest}: "
            + "; ".join(diff[:8])
            + (f" (+{len(diff) - 8} more)" if len(diff) > 8 else "")
        )
    return CheckpointMismatch(
        f"{root}: checkpoint digest {got.digest} != declared {digest} (no manifest declared, "
        f"so the file cannot be named: [model] manifest = <`cacheon arena digest` output>)"
    )


def check(root: str | Path, digest: str, want: Manifest | None = None) -> Manifest:
    """Hash the directory; raise CheckpointMismatch naming the differing file unless it is `digest`."""
    got = scan(root)
    if got.digest != digest:
        raise refuse(Path(root), digest, got, want)
    return got


def install(src: str | Path, dst: str | Path, digest: str, want: Manifest | None = None) -> Path:
    """Copy the checkpoint into `dst` (the arena home), hashing what is copied; refuse it (naming the
    file) unless it is `digest`. An existing `dst` is re-hashed, never trusted on its stamp."""
    src, dst = Path(src), Path(dst)
    if dst.exists():
        got = scan(dst)
        if got.digest != digest:
            raise refuse(dst, digest, got, want)
        return dst
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.tmp-", dir=dst.parent))
    try:
        entries = []
        for rel, full in _files(src):
            out = tmp / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            entries.append(FileEntry(rel, *_hash_file(full, out)))
            os.chmod(out, 0o444)
        got = manifest_of(entries)
        if got.digest != digest:
            raise refuse(src, digest, got, want)
        (tmp / STAMP).write_text(json.dumps({"source": str(src), **got.to_json()}, indent=1) + "\n")
        for d, _, _ in os.walk(tmp):
            os.chmod(d, 0o755)  # the sandbox uid reads it; nobody but the operator writes it
        try:
            os.rename(tmp, dst)
        except OSError:  # another arena of this host installed it first (two GPUs): re-hashed, never trusted
            if not dst.is_dir():
                raise
            raced = scan(dst)
            if raced.digest != digest:
                raise refuse(dst, digest, raced, want) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dst
