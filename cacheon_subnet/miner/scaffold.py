"""`cacheon miner init --slot ID [--lang triton|cuda] DIR`: start from the example bundle for the slot.

The examples/ tree is the single source of faithful kernels (CI verifies every one of them),
so a scaffold always passes `cacheon verify` before the miner changes a line. `--lang cuda` copies
examples/cuda/<slot>/: CUDA C++ kernels plus the Python wrapper that launches them through the
validator's launcher (`native.launch`); its kernels compile and check (`cacheon native build`,
`cacheon verify`) on any box, its trials run on a GPU validator.
"""

from __future__ import annotations

import re
import shutil
from enum import StrEnum
from pathlib import Path

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.env import EXAMPLES
from cacheon_subnet.errors import CacheonError, UsageError
from cacheon_subnet.slots import get_slot

_README = """# {name}

Bundle for slot `{key}` (`cacheon slots` shows its contract).

    {signature}

Loop: edit the kernel, then

    cacheon verify . --device cpu      # correctness, writes, aliasing, determinism, policy
    cacheon verify . --device cuda     # + CUDA graph capture/replay and torch.compile
    cacheon bench . --device cuda      # speed vs stock SGLang per workload shape
    cacheon pack . -o bundle.tar.gz    # deterministic archive + digest to publish

Sources follow the static allowlist policy v2 (manifest schema `cacheon.bundle/2`): imports of
torch, triton, triton.language as tl, math and torch.distributed as dist (plus relative imports
of this bundle's own definitions); a module holds constants and functions; functions use their
arguments, allowlisted attributes and builtins. `cacheon verify` names every refused line.
"""


_CUDA_README = """# {name}

CUDA bundle for slot `{key}` (`cacheon slots` shows its contract).

    {signature}

The kernels are `extern "C" __global__` functions in kernels/*.cu, each declared with its
parameter types in manifest.toml `[ops.cuda.kernels]`; rmsnorm.py is the op's entry. It launches
them through the validator's launcher, the one call CUDA wrappers may make:

    native.launch("rmsnorm_bf16", grid=(T,), block=(256,), args=(out, x, weight, H, sx, so, eps))

`args` follow the declared parameter types: a tensor of this call (or `native.scratch(shape,
dtype)`) for each ptr, a Python int for i32/u32/i64/u64, a float for f32/f64. Grid and block are
within CUDA's limits (block <= 1024 threads, grid.y/z <= 65535), `shared_mem=` (dynamic shared
memory) <= 227 KiB on sm_90. Each wrong argument is refused by name before anything runs.

    cacheon native build .             # compile behind the sandbox wall: nvcc 13.0, sm_90a, file:line errors
    cacheon verify .                   # + the static checks; exit 3: the CUDA trials need a GPU validator
    cacheon pack . -o bundle.tar.gz    # deterministic archive + digest to publish

Rules (README "CUDA kernels"): sources are .cu/.cuh files listed in `[ops.cuda] sources`;
`#include` only those (by their path from the bundle root) or toolchain headers (<cuda_bf16.h>,
<cute/tensor.hpp>); `#pragma` only once / unroll / nounroll; the compiler flags are the validator's.
"""


class Lang(StrEnum):
    """What a scaffold's kernels are written in."""

    TRITON = "triton"
    CUDA = "cuda"


def examples_root() -> Path:
    env = EXAMPLES.get()
    root = Path(env) if env else Path(__file__).resolve().parents[2] / "examples"
    if not root.is_dir():
        raise CacheonError(f"example bundles not found at {root} (set {EXAMPLES.name} or use a source checkout)")
    return root


def scaffold(slot_id: str, dest: Path, force: bool = False, lang: Lang = Lang.TRITON) -> Path:
    spec = get_slot(slot_id)
    src = examples_root() / slot_id if lang is Lang.TRITON else examples_root() / "cuda" / slot_id
    if not (src / "manifest.toml").is_file():
        if lang is Lang.CUDA:
            have = sorted(p.parent.name for p in (examples_root() / "cuda").glob("*/manifest.toml"))
            raise UsageError(f"no CUDA scaffold for slot {slot_id} yet (--lang cuda has: {', '.join(have) or 'none'})")
        raise CacheonError(f"no example bundle for {slot_id} at {src}")
    if dest.exists() and any(dest.iterdir()) and not force:
        raise UsageError(f"{dest} exists and is not empty (use --force to overwrite)")
    if dest.exists() and force:
        shutil.rmtree(dest)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for p in dest.rglob("*"):
        if p.is_file():
            p.chmod(0o644)
    name = re.sub(r"[^a-z0-9-]+", "-", dest.resolve().name.lower()).strip("-") or "my-bundle"
    manifest = dest / "manifest.toml"
    text = manifest.read_text()
    text = re.sub(r'(?m)^name = ".*"$', f'name = "{name}"', text, count=1)
    manifest.write_text(text)
    readme = _README if lang is Lang.TRITON else _CUDA_README
    (dest / "README.md").write_text(readme.format(name=name, key=spec.key, signature=spec.signature()))
    load_bundle(dest)  # the scaffold must itself be a valid bundle
    return dest
