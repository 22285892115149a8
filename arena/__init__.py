"""The GPU arena: qualify one contribution end to end inside a real SGLang 0.5.13.post1 engine.

Entry points: `qualifier_from_config(path)` (the validator's `--arena configs/arena/<name>.toml`)
and `cacheon arena run --config ... --bundle ...` (arena/commands.py); both run arena/run.py.
"""

from __future__ import annotations

from pathlib import Path

from arena.config import ArenaConfig, ArenaConfigError, load_config
from arena.qualifier import GpuQualifier


def qualifier_from_config(path: str | Path, preflight: bool = True) -> GpuQualifier:
    """The validator's `--arena <gpu config>`. Fails at start-up (ArenaConfigError for a bad
    config, ArenaUnavailable without SGLang or a GPU) rather than on every contribution."""
    cfg = load_config(path)
    if preflight:
        from arena.run import preflight as check

        check()
    return GpuQualifier(cfg)


__all__ = ["ArenaConfig", "ArenaConfigError", "GpuQualifier", "load_config", "qualifier_from_config"]
