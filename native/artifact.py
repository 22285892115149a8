"""The lane's output: a sealed, content-addressed artifact dir, and the cache that finds it.

    <cache>/artifacts/<digest>/descriptor.json   the Descriptor (records codec: strict JSON)
    <cache>/artifacts/<digest>/unit0.cubin ...   one cubin per translation unit
    <cache>/keys/<key>                           the digest built for that key

digest = bundle/digest.py's content digest over the dir's files, so the name proves the content:
an artifact is re-digested at every load and one that differs is a miss, rebuilt, never used.
key = sha256 over (the op's sources digest, its kernel declaration, the toolchain identity, the
arch, the lane's flags): what the compile's result depends on. Why both: the launcher (issue 32,
part 2) names an artifact by its digest; the compile lane finds one by what it was built from.
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

from cacheon_subnet.bundle.cuda import ParamType
from cacheon_subnet.bundle.digest import content_digest
from cacheon_subnet.records import codec
from native.toolchain import ToolchainId

DESCRIPTOR_SCHEMA = "cacheon.native/1"
DESCRIPTOR = "descriptor.json"
MAX_ARTIFACT_FILES = 64


@dataclass(frozen=True)
class KernelEntry:
    symbol: str  # the extern "C" name: what the launcher looks up in the cubin
    params: tuple[ParamType, ...]  # as declared, checked against the PTX
    ptx_params: tuple[str, ...]  # as compiled: "b64", "b32", "f32", "f64"
    unit: str  # the translation unit that defines it (bundle path)
    cubin: str  # its cubin, a file of this artifact


@dataclass(frozen=True)
class UnitRecord:
    source: str  # bundle path of the translation unit
    cubin: str
    cubin_sha256: str
    commands: tuple[tuple[str, ...], ...]  # nvcc, then ptxas; paths as $CUDA, $CXX, $CUTLASS, $OUT
    reads: tuple[str, ...]  # the bundle files its preprocessing read


@dataclass(frozen=True)
class Descriptor:
    schema: str
    slot: str
    variant: str
    arch: str
    sources_digest: str  # content digest of the op's sources (bundle paths -> bytes)
    key: str  # the cache key it was built for
    toolchain: ToolchainId
    units: tuple[UnitRecord, ...]
    kernels: tuple[KernelEntry, ...]


@dataclass(frozen=True)
class Artifact:
    path: Path
    digest: str
    descriptor: Descriptor
    cached: bool  # found in the cache rather than built by this call

    def cubin(self, kernel: str) -> bytes:
        entry = next(k for k in self.descriptor.kernels if k.symbol == kernel)
        return (self.path / entry.cubin).read_bytes()


def cache_key(sources_digest: str, kernels: object, toolchain: ToolchainId, arch: str, flags: tuple[str, ...]) -> str:
    doc = {
        "sources": sources_digest,
        "kernels": kernels,
        "toolchain": codec.to_json(toolchain),
        "arch": arch,
        "flags": list(flags),
        "schema": DESCRIPTOR_SCHEMA,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


class Cache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def get(self, key: str) -> Artifact | None:
        """The sealed artifact built for `key`, re-digested; None when absent or not what it says."""
        try:
            digest = (self.root / "keys" / key).read_text().strip()
        except OSError:
            return None
        return load(self.root / "artifacts" / digest, cached=True) if _hex64(digest) else None

    def put(self, key: str, files: Mapping[str, bytes]) -> Artifact:
        """Seal `files` as an artifact (files 0444, dir 0555, moved into place whole) and record `key`."""
        digest = content_digest(files)
        arts, keys = self.root / "artifacts", self.root / "keys"
        arts.mkdir(parents=True, exist_ok=True)
        keys.mkdir(parents=True, exist_ok=True)
        final = arts / digest
        if load(final, cached=True) is None:
            if final.exists():
                _remove(final)
            tmp = Path(tempfile.mkdtemp(prefix=".seal-", dir=arts))
            for name, data in sorted(files.items()):
                (tmp / name).write_bytes(data)
                (tmp / name).chmod(0o444)
            tmp.chmod(0o555)
            try:
                os.rename(tmp, final)
            except OSError:  # another build sealed the same content first
                _remove(tmp)
        fd, tmpkey = tempfile.mkstemp(prefix=".key-", dir=keys)
        with os.fdopen(fd, "w") as f:
            f.write(digest + "\n")
        os.replace(tmpkey, keys / key)
        art = load(final, cached=False)
        if art is None:
            raise OSError(f"{final}: the artifact just sealed does not read back")
        return art


def load(path: Path, cached: bool) -> Artifact | None:
    """The artifact at `path` when its files digest to its name and its descriptor reads strictly."""
    try:
        names = sorted(os.listdir(path))
        if len(names) > MAX_ARTIFACT_FILES or DESCRIPTOR not in names:
            return None
        files = {n: (path / n).read_bytes() for n in names if (path / n).is_file() and not (path / n).is_symlink()}
    except OSError:
        return None
    if len(files) != len(names) or content_digest(files) != path.name:
        return None
    try:
        desc = codec.loads(Descriptor, files[DESCRIPTOR])
    except codec.RecordError:
        return None
    for u in desc.units:
        if u.cubin not in files or hashlib.sha256(files[u.cubin]).hexdigest() != u.cubin_sha256:
            return None
    return Artifact(path, path.name, desc, cached)


def _hex64(s: str) -> bool:
    return len(s) == 64 and all(c in "0123456789abcdef" for c in s)


def _remove(path: Path) -> None:
    for d, _, fs in os.walk(path):
        os.chmod(d, 0o755)
        for f in fs:
            os.chmod(os.path.join(d, f), 0o644)
    shutil.rmtree(path, ignore_errors=True)
