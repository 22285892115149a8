"""The pinned CUDA toolchain the lane compiles with, and its identity.

Why pinned wheels, not whatever nvcc is on PATH: the toolchain is part of every artifact's
identity (a different nvcc emits different code), so the lane uses exactly the PyPI packages of
cacheon_subnet/pins.py NATIVE_PINS, found through their installed metadata, and refuses to run
with any other version. The host compiler (the system g++) only preprocesses for nvcc, even for
device-only output; its version is recorded too. CUTLASS/CuTe headers are optional.
"""

from __future__ import annotations

import functools
import importlib.metadata as md
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cacheon_subnet.pins import CUDA_NVCC_PIN, CUTLASS_PIN, NATIVE_PINS
from native.diag import NativeError

INSTALL_HINT = "install the compile lane's toolchain: `pip install -e '.[native]'` (or `make install`)"


class ToolchainMissing(NativeError):
    """No pinned toolchain on this host: what is missing and how to install it."""


@dataclass(frozen=True)
class ToolchainId:
    """What an artifact was built with (part of its cache key and its descriptor)."""

    nvcc: str  # "13.0.88", from `nvcc --version`
    nvcc_build: str  # "cuda_13.0.r13.0/compiler.36424714_0"
    host_cxx: str  # "g++ (Debian 12.2.0-14+deb12u1) 12.2.0"
    packages: tuple[str, ...]  # "nvidia-cuda-nvcc==13.0.88", ... (and nvidia-cutlass when present)


@dataclass(frozen=True)
class Toolchain:
    root: Path  # the wheels' nvidia/cu13 tree
    nvcc: Path
    ptxas: Path
    host_cxx: Path
    cuda_include: Path
    cutlass_include: Path | None
    system_include: tuple[Path, ...]  # the host compiler's own search list (`g++ -E -v`)
    identity: ToolchainId

    def header_roots(self) -> tuple[Path, ...]:
        """Every validator-owned dir a compile may read a header from (the bundle's own come on top)."""
        return (self.cuda_include, *((self.cutlass_include,) if self.cutlass_include else ()), *self.system_include)


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _run(argv: list[str]) -> str:
    """A trusted host tool's output (no bundle input: versions and search lists only)."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        raise ToolchainMissing(f"cannot run {argv[0]}: {e}") from None
    return r.stdout + r.stderr


@functools.lru_cache(maxsize=1)
def locate() -> Toolchain:
    """The pinned toolchain, checked; ToolchainMissing says what to install."""
    wrong = {d: (v, _version(d)) for d, v in NATIVE_PINS.items() if _version(d) != v}
    if wrong:
        listed = ", ".join(f"{d} {got or 'not installed'} (pin {want})" for d, (want, got) in sorted(wrong.items()))
        raise ToolchainMissing(f"the CUDA compile lane needs its pinned toolchain: {listed}; {INSTALL_HINT}")
    root = Path(str(md.distribution("nvidia-cuda-nvcc").locate_file("nvidia/cu13"))).resolve()
    need = {p: root / p for p in ("bin/nvcc", "bin/ptxas", "nvvm/bin/cicc", "include/cuda_runtime.h")}
    missing = [str(p) for p in need.values() if not p.is_file()]
    if missing:
        raise ToolchainMissing(f"the pinned CUDA wheels are incomplete (missing {', '.join(missing)}); {INSTALL_HINT}")
    cxx = shutil.which("g++")
    if not cxx:
        raise ToolchainMissing("nvcc needs the system C++ compiler to preprocess: apt-get install g++")
    text = _run([str(need["bin/nvcc"]), "--version"])
    release = re.search(r"\bV(\d+\.\d+\.\d+)\b", text)
    build = re.search(r"^Build (\S+)$", text, re.M)
    if not release or release[1] != CUDA_NVCC_PIN:
        raise ToolchainMissing(f"nvcc reports {release[1] if release else text[:200]!r}, pin {CUDA_NVCC_PIN}")
    cutlass = None
    packages = [f"{d}=={v}" for d, v in sorted(NATIVE_PINS.items())]
    if _version("nvidia-cutlass") == CUTLASS_PIN:
        inc = Path(str(md.distribution("nvidia-cutlass").locate_file("cutlass_library/source/include"))).resolve()
        if (inc / "cute" / "tensor.hpp").is_file():
            cutlass = inc
            packages.append(f"nvidia-cutlass=={CUTLASS_PIN}")
    host = _run([cxx, "--version"]).splitlines()[0].strip()
    ident = ToolchainId(release[1], build[1] if build else "", host, tuple(packages))
    return Toolchain(
        root, need["bin/nvcc"], need["bin/ptxas"], Path(cxx), root / "include", cutlass, _search_list(cxx), ident
    )


def _search_list(cxx: str) -> tuple[Path, ...]:
    """The host compiler's `#include <...>` dirs for C++ (what nvcc's preprocessing pass reads)."""
    text = _run([cxx, "-x", "c++", "-std=c++17", "-E", "-v", os.devnull, "-o", os.devnull])
    m = re.search(r"#include <\.\.\.> search starts here:\n(.*?)\nEnd of search list", text, re.S)
    if not m:
        raise ToolchainMissing(f"cannot read {cxx}'s include search list: {text[-300:]!r}")
    return tuple(Path(p.strip()).resolve() for p in m[1].splitlines() if p.strip())
