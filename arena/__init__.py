"""The GPU arena: qualify one contribution end to end inside a real SGLang 0.5.13.post1 engine.

Entry points: `qualifier_from_config(path)` (the validator's `--arena configs/arena/<name>.toml`)
and `cacheon arena run --config ... --bundle ...` (arena/commands.py); both run arena/run.py.
Names resolve lazily (PEP 562): importing `arena` to register its CLI verbs must not load torch
(every `cacheon` call paid ~3 s for it).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arena.config import ArenaConfig, ArenaConfigError, load_config
    from arena.qualifier import GpuQualifier

_LAZY = {
    "ArenaConfig": "arena.config",
    "ArenaConfigError": "arena.config",
    "load_config": "arena.config",
    "GpuQualifier": "arena.qualifier",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'arena' has no attribute {name!r}")


def qualifier_from_config(path: str | Path, preflight: bool = True) -> GpuQualifier:
    """The validator's `--arena <gpu config>`. Fails at start-up (ArenaConfigError for a bad
    config, ArenaUnavailable without SGLang or a GPU) rather than on every contribution."""
    from arena.config import load_config
    from arena.qualifier import GpuQualifier

    cfg = load_config(path)
    if preflight:
        from arena.run import preflight as check

        check()
    return GpuQualifier(cfg)


__all__ = ["ArenaConfig", "ArenaConfigError", "GpuQualifier", "load_config", "qualifier_from_config"]
