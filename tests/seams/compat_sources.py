"""Real SGLang source trees for the canary tests, fetched once and cached under .cacheon/.

Why real releases: the canary's job is to notice upstream drift, so its tests read the actual
published code, not a hand-made imitation. Both trees hold only `*.py` (all the static check reads):
  * sglang/: the cp312 manylinux wheel of a release via `pip download --no-deps --only-binary`
    (~12 MB each), unzipped (sglang/**/*.py + the dist-info METADATA);
  * sgl_kernel/: the sglang-kernel wheel is ~320 MB (CUDA .so files), so we read just its
    `sgl_kernel/**/*.py` members with HTTP range requests (zip central directory + the members'
    bytes, about 1 MB); each member is checked against the wheel's RECORD sha256 (and CRC).
A `.complete` marker makes a cache entry valid; later sessions need no network. FETCHED.log in
the cache records what was downloaded, from where, how many bytes, how long.

The session fixtures live here, not in a conftest.py (other tests import the root conftest by
name); test modules import the fixtures they use. No network and nothing cached: the fixtures
FAIL (CI must not go green without the evidence), unless CACHEON_OFFLINE=1 turns that into a
skip that says why.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest

from seams.compat_source import find_defs

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cacheon" / "sglang-src"
PYPI_JSON = os.environ.get("CACHEON_PYPI_JSON", "https://pypi.org/pypi")
WHEEL_FLAGS = ("--python-version", "3.12", "--platform", "manylinux_2_34_x86_64", "--implementation", "cp")
KERNEL_PLATFORM = "manylinux2014_x86_64"
OTHER_RELEASE = "0.5.13"  # the release just before the pin: a real wheel, same seams, other identity


class FetchError(RuntimeError):
    """The network (or PyPI) could not provide a source tree."""


def _log(line: str) -> None:
    with open(CACHE / "FETCHED.log", "a", encoding="utf-8") as f:
        f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {line}\n")


def _finish(tmp: Path, dest: Path) -> Path:
    (tmp / ".complete").write_text("ok\n")
    try:
        tmp.rename(dest)
    except OSError:  # a concurrent session finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def sglang_release(version: str) -> Path:
    """Directory holding sglang/ (*.py) and the dist-info of sglang==version."""
    dest = CACHE / f"sglang-{version}"
    if (dest / ".complete").is_file():
        return dest
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        *WHEEL_FLAGS,
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(wheels),
        f"sglang=={version}",
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as e:
        raise FetchError(f"pip download sglang=={version} timed out") from e
    found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if proc.returncode != 0 or not found:
        raise FetchError(f"pip download sglang=={version} failed (rc {proc.returncode}): {proc.stderr[-600:]}")
    _log(
        f"sglang=={version}: pip download {found[0].name} ({found[0].stat().st_size / 1e6:.1f} MB, "
        f"{time.monotonic() - started:.1f} s)"
    )
    tmp = Path(tempfile.mkdtemp(prefix=f".sglang-{version}-", dir=CACHE))
    with zipfile.ZipFile(found[0]) as zf:
        for name in zf.namelist():
            if (name.startswith("sglang/") and name.endswith(".py")) or name.endswith(".dist-info/METADATA"):
                zf.extract(name, tmp)
    return _finish(tmp, dest)


class RangeFile(io.RawIOBase):
    """Seekable read-only view of a remote file through HTTP Range requests (256 KiB blocks, cached)."""

    def __init__(self, url: str, size: int, timeout: float = 60.0, block: int = 1 << 18) -> None:
        super().__init__()
        self.url, self.size, self.timeout, self.block = url, size, timeout, block
        self.pos, self.fetched = 0, 0
        self._blocks: dict[int, bytes] = {}

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.pos = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence] + offset
        return self.pos

    def _get(self, index: int) -> bytes:
        if index not in self._blocks:
            lo, hi = index * self.block, min(self.size, (index + 1) * self.block) - 1
            req = urllib.request.Request(self.url, headers={"Range": f"bytes={lo}-{hi}"})
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                data = resp.read()
                if resp.status != 206 or len(data) != hi - lo + 1:
                    raise FetchError(f"{self.url}: range request answered {resp.status} with {len(data)} bytes")
            self._blocks[index] = data
            self.fetched += len(data)
        return self._blocks[index]

    def readinto(self, buf) -> int:  # type: ignore[no-untyped-def]
        n = max(0, min(len(buf), self.size - self.pos))
        done = 0
        while done < n:
            block = self._get((self.pos + done) // self.block)
            start = (self.pos + done) % self.block
            chunk = block[start : start + n - done]
            buf[done : done + len(chunk)] = chunk
            done += len(chunk)
        self.pos += n
        return n


def _kernel_wheel(version: str) -> tuple[str, int, str]:
    url = f"{PYPI_JSON}/sglang-kernel/json"  # project JSON: the per-version endpoint is not mirrored everywhere
    with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310
        files = json.load(resp)["releases"].get(version, [])
    for f in files:
        if f["filename"].endswith(f"{KERNEL_PLATFORM}.whl"):
            return urljoin(url, f["url"]), int(f["size"]), f["filename"]
    raise FetchError(f"sglang-kernel {version}: no {KERNEL_PLATFORM} wheel on PyPI")


def kernel_python(version: str) -> Path:
    """Directory holding sgl_kernel/ (*.py only) of sglang-kernel==version, read by range requests."""
    dest = CACHE / f"sgl_kernel-{version}"
    if (dest / ".complete").is_file():
        return dest
    CACHE.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        url, size, filename = _kernel_wheel(version)
        remote = RangeFile(url, size)
        with zipfile.ZipFile(io.BufferedReader(remote, buffer_size=1 << 16)) as zf:
            record_name = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
            record = {row.split(",")[0]: row.split(",")[1] for row in zf.read(record_name).decode().splitlines() if row}
            tmp = Path(tempfile.mkdtemp(prefix=f".sgl_kernel-{version}-", dir=CACHE))
            for name in zf.namelist():
                if name.startswith("sgl_kernel/") and name.endswith(".py"):
                    data = zf.read(name)  # CRC-checked by zipfile
                    digest = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                    if record.get(name) != digest:
                        raise FetchError(f"{filename}:{name} does not match its RECORD hash")
                    (tmp / name).parent.mkdir(parents=True, exist_ok=True)
                    (tmp / name).write_bytes(data)
    except (OSError, ValueError, KeyError, StopIteration, zipfile.BadZipFile) as e:
        raise FetchError(f"sglang-kernel=={version} (range read) failed: {type(e).__name__}: {e}") from e
    _log(
        f"sglang-kernel=={version}: {url} ({size / 1e6:.0f} MB wheel): {remote.fetched / 1e6:.2f} MB "
        f"fetched by range requests, {time.monotonic() - started:.1f} s"
    )
    return _finish(tmp, dest)


def compose(root: Path, *packages: Path) -> Path:
    """A tree at `root` whose top-level packages are symlinks into cache entries (cheap, read-only)."""
    root.mkdir(parents=True, exist_ok=True)
    for pkg in packages:
        (root / pkg.name).symlink_to(pkg, target_is_directory=True)
    return root


MUTANT_MARK = ".mutant-root"


def mutable_copy(src: Path, dest: Path) -> Path:
    """A copy of `src` made of links; the edit helpers below turn just the touched path private."""
    dest.mkdir(parents=True)
    (dest / MUTANT_MARK).touch()
    for child in src.iterdir():
        (dest / child.name).symlink_to(child.resolve(), target_is_directory=child.is_dir())
    return dest


def _rewrite(path: Path, lines: list[str]) -> None:
    """Write `path` privately: expand linked directories on the way down, never touching the cache."""
    root = next((a for a in path.parents if (a / MUTANT_MARK).is_file()), None)
    if root is None:
        raise AssertionError(f"{path} is not inside a mutable_copy() tree")
    cur = root
    for part in path.relative_to(root).parts[:-1]:
        cur = cur / part
        if cur.is_symlink():
            target = cur.resolve()
            cur.unlink()
            cur.mkdir()
            for child in target.iterdir():
                (cur / child.name).symlink_to(child, target_is_directory=child.is_dir())
    if path.is_symlink():
        path.unlink()
    path.write_text("".join(lines), encoding="utf-8")


def _definition(path: Path, symbol: str) -> tuple[list[str], ast.FunctionDef | ast.AsyncFunctionDef]:
    text = path.read_text(encoding="utf-8")
    defs, why = find_defs(ast.parse(text), symbol)
    if not defs:
        raise AssertionError(f"{path}: {why}")
    return text.splitlines(keepends=True), defs[0]


def rename_param(path: Path, symbol: str, old: str, new: str) -> None:
    """Rename one parameter of `symbol` in place (exactly at its AST position)."""
    lines, fn = _definition(path, symbol)
    a = fn.args
    arg = next(x for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg == old)
    line = lines[arg.lineno - 1]
    assert line[arg.col_offset :].startswith(old)
    lines[arg.lineno - 1] = line[: arg.col_offset] + new + line[arg.col_offset + len(old) :]
    _rewrite(path, lines)


def replace_signature(path: Path, symbol: str, params: str) -> None:
    """Replace the whole parameter list of `symbol` (e.g. to add a required parameter)."""
    lines, fn = _definition(path, symbol)
    indent = lines[fn.lineno - 1][: fn.col_offset]
    head = f"{indent}{'async ' if isinstance(fn, ast.AsyncFunctionDef) else ''}def {fn.name}({params}):\n"
    _rewrite(path, lines[: fn.lineno - 1] + [head] + lines[fn.body[0].lineno - 1 :])


def delete_def(path: Path, symbol: str) -> None:
    """Remove `symbol`'s definition (decorators included) from the file."""
    lines, fn = _definition(path, symbol)
    start = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
    _rewrite(path, lines[: start - 1] + lines[fn.end_lineno :])  # type: ignore[operator]


def edit(path: Path, old: str, new: str) -> None:
    """Replace the first `old` (which must occur) in a file."""
    text = path.read_text(encoding="utf-8")
    if old not in text:
        raise AssertionError(f"{path}: mutation anchor not found: {old!r}")
    _rewrite(path, [text.replace(old, new, 1)])


# -- session fixtures (import them into the test module that uses them) --------------------------
def _fetch(what: str, fn: Callable[[str], Path], version: str) -> Path:
    try:
        return fn(version)
    except FetchError as e:
        if os.environ.get("CACHEON_OFFLINE") == "1":
            pytest.skip(f"CACHEON_OFFLINE=1 and {what} is not cached in {CACHE}: {e}")
        pytest.fail(
            f"could not fetch {what} ({e}). These tests need the network once (then {CACHE} "
            f"serves them); set CACHEON_OFFLINE=1 to skip them instead.",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def pinned_sglang() -> Path:
    from cacheon_subnet.pins import SGLANG_PIN

    return _fetch(f"sglang=={SGLANG_PIN}", sglang_release, SGLANG_PIN) / "sglang"


@pytest.fixture(scope="session")
def pinned_kernel() -> Path:
    from cacheon_subnet.pins import SGLANG_KERNEL_PIN

    return _fetch(f"sglang-kernel=={SGLANG_KERNEL_PIN} (sgl_kernel/*.py)", kernel_python, SGLANG_KERNEL_PIN) / "sgl_kernel"


@pytest.fixture(scope="session")
def pinned_tree(tmp_path_factory: Any, pinned_sglang: Path, pinned_kernel: Path) -> Path:
    """sglang 0.5.13.post1 + sgl_kernel 0.4.3 (python files), as the engine image pins them."""
    return compose(tmp_path_factory.mktemp("pinned"), pinned_sglang, pinned_kernel)


@pytest.fixture(scope="session")
def pinned_tree_no_kernel(tmp_path_factory: Any, pinned_sglang: Path) -> Path:
    return compose(tmp_path_factory.mktemp("pinned-no-kernel"), pinned_sglang)


@pytest.fixture(scope="session")
def other_tree(tmp_path_factory: Any, pinned_kernel: Path) -> Path:
    sglang = _fetch(f"sglang=={OTHER_RELEASE}", sglang_release, OTHER_RELEASE) / "sglang"
    return compose(tmp_path_factory.mktemp("other"), sglang, pinned_kernel)
