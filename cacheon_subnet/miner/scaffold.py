"""`cacheon miner init --slot ID DIR`: start from the faithful example bundle for the slot.

The examples/ tree is the single source of faithful kernels (CI verifies every one of them),
so a scaffold always passes `cacheon verify` before the miner changes a line.
"""

from __future__ import annotations

import re
import shutil
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


def examples_root() -> Path:
    env = EXAMPLES.get()
    root = Path(env) if env else Path(__file__).resolve().parents[2] / "examples"
    if not root.is_dir():
        raise CacheonError(f"example bundles not found at {root} (set {EXAMPLES.name} or use a source checkout)")
    return root


def scaffold(slot_id: str, dest: Path, force: bool = False) -> Path:
    spec = get_slot(slot_id)
    src = examples_root() / slot_id
    if not (src / "manifest.toml").is_file():
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
    (dest / "README.md").write_text(_README.format(name=name, key=spec.key, signature=spec.signature()))
    load_bundle(dest)  # the scaffold must itself be a valid bundle
    return dest
