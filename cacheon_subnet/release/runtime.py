"""Serving time: a release wheel's plugin, run by SGLang's `load_plugins()` in every process.

Why this shape: the arena routes a crowned slot through seams/ (the SEAM_ADAPTERS table, the
scheduler-rank gate, the sealed engine tree); a release must route the same way or it serves
something nobody measured. So `load_release` only builds the launch environment the arena host
would have written (the crowned bindings' gates, the release's sealed tree and its digest, serving
mode: a failing kernel falls back to stock) and hands it to seams.activate.activate_scheduler from
an AROUND hook on Scheduler.__init__, in exactly the scheduler ranks. It never touches os.environ,
so the project's own `cacheon` plugin stays off beside it (unless the environment itself arms it:
then the release stays off, as it does beside a second installed release; activation runs once a
process, so two activators would leave which one serves to entry-point order).

Never a crash: on any runtime other than the pinned one (SGLang, torch, Triton, sglang-kernel), a
seam table other than the one released, a competing activator, or anything unreadable, it logs one
warning line and returns; SGLang's stock kernels serve. No validator,
chain or sandbox is imported here (tests/release/test_runtime.py imports it with those blocked).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, entry_points, version
from pathlib import Path
from types import MappingProxyType
from typing import Any

from cacheon_subnet.env import ENGINE_TREE, ENGINE_TREE_DIGEST, RECEIPT_DIR, SEAM_STRICT
from cacheon_subnet.release.descriptor import (
    DESCRIPTOR_FILE,
    PREFIX,
    TREE_DIR,
    EngineSetting,
    RuntimePins,
    package_name,
    parse,
    seam_table_digest,
)
from seams.entry import PLUGIN_NAME
from seams.table import HOOK_TARGETS, PLUGIN_GROUP, SEAM_ADAPTERS, seam_environment

log = logging.getLogger("cacheon.release")


def installed_version(dist: str) -> str | None:
    """The installed distribution's version, None when absent (tests replace this to fake one)."""
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def public(v: str) -> str:
    return v.split("+", 1)[0]  # torch 2.11.0+cu130 is torch 2.11.0 built for CUDA 13.0


def pin_problems(pins: RuntimePins) -> tuple[list[str], list[str]]:
    """(matches, mismatches) of the installed runtime against a release's pins, one line each.
    The plugin refuses on any mismatch, as verify does: a kernel measured under torch/Triton X is
    not the kernel under Y (it checked SGLang only until red team session 20)."""
    ok, bad = [], []
    for dist, want in (
        ("sglang", pins.sglang),
        ("torch", pins.torch),
        ("triton", pins.triton),
        ("sglang-kernel", pins.sglang_kernel),
    ):
        have = installed_version(dist)
        if have is None:
            bad.append(f"{dist} not installed, the release pins {want}")
        elif public(have) != want:
            bad.append(f"{dist} {have} installed, the release pins {want}")
        else:
            ok.append(f"{dist} {have} (pinned {want})")
    return ok, bad


def _loaded_plugins() -> list[str]:
    """The plugin names SGLang's load_plugins() would run here (its SGLANG_PLUGINS filter applied)."""
    allowed = {x.strip() for x in os.environ.get("SGLANG_PLUGINS", "").split(",") if x.strip()}
    return [ep.name for ep in entry_points(group=PLUGIN_GROUP) if not allowed or ep.name in allowed]


def other_releases(name: str) -> list[str]:
    """Other releases SGLang would load beside `name`."""
    return sorted({n for n in _loaded_plugins() if n.startswith(PREFIX) and n != name})


def competing(name: str) -> str | None:
    """Why another plugin would activate the same scheduler ranks, or None. seams.activate runs once
    per process: the outermost Scheduler.__init__ hook (entry-point order: directory order) wins and
    the other's activation is a silent no-op (red team session 20)."""
    others = other_releases(name)
    if others:
        return (
            f"{len(others) + 1} cacheon releases installed ({', '.join(sorted([name, *others]))}): one engine "
            "serves one release; pip uninstall all but one"
        )
    armed = [a.env_gate for a in SEAM_ADAPTERS if os.environ.get(a.env_gate) == "1"]
    if armed and PLUGIN_NAME in _loaded_plugins():
        return (
            f"the environment arms cacheon's own seam plugin ({', '.join(f'{g}=1' for g in armed)}), which would "
            "activate the same ranks from the environment: unset it"
        )
    return None


@dataclass(frozen=True)
class Plan:
    """What a scheduler rank activates: the release's name and its fixed launch environment."""

    name: str
    environ: Mapping[str, str]
    slots: tuple[str, ...]
    engine: tuple[EngineSetting, ...] = ()  # settings a crowned slot needs to take effect


# a ServerArgs field that overrides another for the part a crown replaces (decode attention)
_OVERRIDES = {"attention_backend": "decode_attention_backend"}


def unmet(engine: tuple[EngineSetting, ...], server_args: Any) -> list[str]:
    """The settings this engine does not run, one warning each (the crown loads but is never called)."""
    out = []
    for e in engine:
        over = _OVERRIDES.get(e.server_arg)
        have = (getattr(server_args, over, None) if over else None) or getattr(server_args, e.server_arg, None)
        if have != e.value:
            out.append(f"{e.slot} needs {e.flag}, this engine runs {e.server_arg}={have!r}: that crown is not in effect")
    return out


def plan(pkg_dir: Path) -> Plan | str:
    """The activation plan for the release installed at `pkg_dir`, or why it must stay off."""
    data = (pkg_dir / DESCRIPTOR_FILE).read_bytes()
    desc = parse(data)
    name = package_name(data)
    if pkg_dir.name != name:
        return f"package {pkg_dir.name} does not match its descriptor (expected {name})"
    _, bad = pin_problems(desc.runtime)
    if bad:
        return "; ".join(bad)
    if desc.seam_table != seam_table_digest():
        return "the installed cacheon-subnet's seam table differs from the one the release was built with"
    clash = competing(name)
    if clash:
        return clash
    env = seam_environment(desc.policy.bindings)
    env[ENGINE_TREE.name] = str(pkg_dir / TREE_DIR)
    env[ENGINE_TREE_DIGEST.name] = desc.tree_digest
    env[SEAM_STRICT.name] = "0"  # serving: a kernel that fails its call falls back to stock
    receipts = os.environ.get(RECEIPT_DIR.name)
    if receipts:  # the operator asked for per-rank receipts (how many calls each kernel served)
        env[RECEIPT_DIR.name] = receipts
    return Plan(name, MappingProxyType(env), tuple(r.slot for r in desc.policy.routes), desc.policy.engine)


def scheduler_hook(p: Plan, activate: Callable[..., bool] | None = None) -> Callable[..., Any]:
    """The AROUND hook on Scheduler.__init__: activate the release's kernels in this rank, then
    build the scheduler (and the model: layers bind their forward at construction)."""

    def cacheon_release_scheduler_init(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        tp_rank = int(kwargs.get("tp_rank", args[4] if len(args) > 4 else 0))
        try:
            server_args = kwargs.get("server_args", args[1] if len(args) > 1 else None)
            for line in unmet(p.engine, server_args) if tp_rank == 0 and server_args is not None else ():
                log.warning("cacheon release %s: %s", p.name, line)
            if activate is None:
                from seams.activate import activate_scheduler

                run: Callable[..., bool] = activate_scheduler
            else:
                run = activate
            if not run(tp_rank, environ=dict(p.environ)):
                log.warning("cacheon release %s: rank %d activated nothing; stock kernels serve", p.name, tp_rank)
        except Exception as e:  # noqa: BLE001 - serving never crashes on the release's account
            log.warning(
                "cacheon release %s: rank %d not activated (%s: %s); stock kernels serve",
                p.name,
                tp_rank,
                type(e).__name__,
                e,
            )
        return original(*args, **kwargs)

    return cacheon_release_scheduler_init


def register(p: Plan) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    target = next(t for t in HOOK_TARGETS if t.endswith("Scheduler.__init__")).replace(":", ".")
    HookRegistry.register(target, scheduler_hook(p), HookType.AROUND)


def load_release(pkg_dir: Path) -> bool:
    """The release plugin's body. True when its hook is registered; False (one warning) when not."""
    try:
        p = plan(pkg_dir)
        if isinstance(p, str):
            log.warning("cacheon release %s not activated: %s; SGLang's stock kernels serve", pkg_dir.name, p)
            return False
        register(p)
    except Exception as e:  # noqa: BLE001 - a broken release must leave a working stock engine
        log.warning(
            "cacheon release %s not activated (%s: %s); SGLang's stock kernels serve", pkg_dir.name, type(e).__name__, e
        )
        return False
    log.info("cacheon release %s: routing %s in every scheduler rank", p.name, ", ".join(p.slots))
    for need in p.engine:
        log.info("cacheon release %s: %s", p.name, need.line())
    return True
