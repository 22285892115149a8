"""A tiny importable stand-in for the SGLang runtime, generated from seams/table.py.

Why: runtime_check() imports the installed sglang, which needs CUDA-only dependencies this CPU
test host does not have. The stand-in has exactly what the canary inspects (each row's symbol
with the table's parameters, consumer imports for patch points, the plugin/hook API), so the
runtime path is exercised end to end in a subprocess; tests then mutate single modules.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from cacheon_subnet.pins import SGLANG_PIN
from seams.table import PLUGIN_GROUP, SEAM_ADAPTERS

REPO = Path(__file__).resolve().parents[2]

HOOK_REGISTRY = """import enum


class HookType(enum.Enum):
    BEFORE = "before"
    AFTER = "after"
    AROUND = "around"
    REPLACE = "replace"


def _propagate_patch(original, wrapped, source_module):
    return 0


class HookRegistry:
    @classmethod
    def register(cls, target, hook, hook_type=HookType.AFTER, *, source=None):
        pass

    @classmethod
    def apply_hooks(cls):
        for target in ():
            cls._apply_target(target, [])

    @classmethod
    def _apply_target(cls, target, hooks):
        _propagate_patch(None, None, None)
"""
PLUGINS = f"""from sglang.srt.plugins.hook_registry import HookRegistry

GENERAL_PLUGINS_GROUP = {PLUGIN_GROUP!r}


def load_plugins():
    HookRegistry.apply_hooks()
"""
SCHEDULER = """from sglang.srt.plugins import load_plugins


class Scheduler:
    def __init__(self, server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank=None):
        pass


def run_scheduler_process(server_args, port_args, gpu_id, tp_rank):
    load_plugins()
"""
MODEL_RUNNER = """import contextlib


class ModelRunner:
    device_timer = None

    def forward_extend(self, forward_batch):
        ctx = self.device_timer.wrap(metadata={"category": "extend"}) if self.device_timer else contextlib.nullcontext()
        with ctx:
            pass
"""
CUDA_GRAPH_RUNNER = """import contextlib


class CudaGraphRunner:
    def replay(self, forward_batch):
        timer = self.model_runner.device_timer
        with timer.wrap(metadata={"category": "decode"}) if timer else contextlib.nullcontext():
            self.graphs[self.bs].replay()
"""


def modules(version: str = SGLANG_PIN, kernel: bool = True) -> dict[str, str]:
    """module name -> source text of the stand-in."""
    text: dict[str, list[str]] = defaultdict(list)
    methods: dict[tuple[str, str], list[str]] = defaultdict(list)
    text["sglang"].append(f"__version__ = {version!r}\n")
    for a in SEAM_ADAPTERS:
        if not kernel and a.module.split(".")[0] == "sgl_kernel":
            continue
        owner, _, name = a.symbol.rpartition(".")
        if owner:
            methods[(a.module, owner)].append(f"    def {name}({', '.join(a.params)}):\n        pass\n")
        else:
            text[a.module].append(f"def {name}({', '.join(a.params)}):\n    pass\n")
        for point in a.patch_points:
            mod, attr = point.split(":")
            if mod != a.module and "." not in attr:
                text[mod].insert(0, f"from {a.module} import {attr}\n")
    for (mod, owner), defs in methods.items():
        text[mod].append(f"class {owner}:\n" + "\n".join(defs))
    if kernel:
        text.setdefault("sgl_kernel", [])
    text["sglang.srt.plugins.hook_registry"].append(HOOK_REGISTRY)
    text["sglang.srt.plugins"].append(PLUGINS)
    text["sglang.srt.managers.scheduler"].append(SCHEDULER)
    text["sglang.srt.model_executor.model_runner"].append(MODEL_RUNNER)
    text["sglang.srt.model_executor.cuda_graph_runner"].append(CUDA_GRAPH_RUNNER)
    return {m: "\n\n".join(parts) for m, parts in text.items()}


def write(root: Path, sources: dict[str, str]) -> Path:
    """Write modules as files (a module that is a prefix of another becomes a package)."""
    names = set(sources)
    for mod in list(names):  # every parent package exists
        parts = mod.split(".")
        names.update(".".join(parts[:i]) for i in range(1, len(parts)))
    for mod in sorted(names):
        is_pkg = any(other.startswith(mod + ".") for other in names)
        path = root.joinpath(*mod.split("."), "__init__.py") if is_pkg else root.joinpath(*mod.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(sources.get(mod, ""), encoding="utf-8")
    return root


def run(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run `python argv...` with the stand-in first on sys.path (a fresh interpreter per check)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(REPO)]))
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
