"""Scheduler-rank activation: the only code path that loads contribution code.

Called from the AROUND hook on `Scheduler.__init__` (see plugin.py), i.e. only in a process
positively identified as a scheduler rank, before the model is built (layers bind their
forward at construction). The driver and every other child never reach this.

Reads the fixed launch environment the host wrote:
  CACHEON_SEAM_<BINDING>=0|1     which adapters to arm (closed vocabulary, seams/table.py)
  CACHEON_ENGINE_TREE            sealed engine tree root (read-only)
  CACHEON_ENGINE_TREE_DIGEST     its expected digest
  CACHEON_RECEIPT_DIR            where receipts go
  CACHEON_SEAM_STRICT=1|0        strict (qualification, default) or serving fallback
  CACHEON_FORWARD_CLOCK=1         time the forward passes on the GPU (seams/forward_clock.py, set
                                  up after Scheduler.__init__ by seams/plugin.py)
  CACHEON_STOCK_AS_CANDIDATE, CACHEON_HANDICAP, CACHEON_SLOWDOWN   the arena's controls (seams/controls.py); the
                                  sandbox drops any ambient CACHEON_* variable, so only the host sets them
  CACHEON_RESIDENT=1              a timed engine kept across contributions: hooks armed, nothing
                                  installed; contributions come and go by RPC (seams/resident.py)
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

from cacheon_subnet.bundle.engine_tree import NATIVE_DIR, TreeOp, open_tree
from cacheon_subnet.bundle.jitkeys import salt_kernel_keys
from cacheon_subnet.env import ENGINE_TREE, ENGINE_TREE_DIGEST, RECEIPT_DIR, RESIDENT, SEAM_STRICT
from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.custom_op import register_slot_op
from cacheon_subnet.slots.spec import dtype_of
from native import runtime as native_runtime
from native.launcher import Launches
from seams.controls import handicap, register_handicap, register_slowdown, register_stock_controls, slowdown, stock_controls
from seams.dispatch import REGISTRY, Candidate, Registry, guarded, receipt_key
from seams.receipts import Receipts
from seams.table import SEAM_ADAPTERS, SeamAdapter

_state: dict[str, object] = {}
RESIDENT_ENV = RESIDENT.name  # a timed engine kept across contributions (seams/resident.py)


def selected_adapters(environ: dict[str, str] | None = None) -> tuple[SeamAdapter, ...]:
    env = os.environ if environ is None else environ
    return tuple(a for a in SEAM_ADAPTERS if env.get(a.env_gate) == "1")


def adapter_hooks(adapter: SeamAdapter) -> dict:
    mod, _, fn = adapter.install.partition(":")
    hooks = getattr(importlib.import_module(mod), fn)()
    if set(hooks) != set(adapter.patch_points):
        raise RuntimeError(f"adapter {adapter.binding}: hooks {sorted(hooks)} != table patch points {adapter.patch_points}")
    return hooks


def register_candidates(
    env: dict[str, str],
    slots: list[str],
    registry: Registry,
    suffix: str = "",
    wrap: Callable[[Callable[..., None]], Callable[..., None]] | None = None,
    native_driver: Launches | None = None,
) -> tuple[str, ...]:
    """Register what the launch environment names (a sealed tree's ops, or a host-set control) as
    candidates; returns the sealed packages imported. `suffix` makes custom-op namespaces unique
    per install and `wrap` stands between torch's dispatcher and the body (a resident timed
    engine installs and removes contributions: seams/resident.py). A CUDA op's body runs each call
    in the launcher's scope over the artifact the tree sealed (`native_driver`: a test's recorder;
    default the real driver on a GPU, a refusal without one)."""
    controls, slow_baseline, slow_candidate = stock_controls(env), handicap(env), slowdown(env)
    if controls:
        register_stock_controls(controls, slots, registry)
    if slow_baseline:
        register_handicap(slow_baseline, slots, registry)
    if slow_candidate:
        register_slowdown(slow_candidate, slots, registry)
    ops: tuple[TreeOp, ...] = ()
    if env.get(ENGINE_TREE.name) or not (controls or slow_baseline or slow_candidate):
        tree = open_tree(Path(env[ENGINE_TREE.name]), env[ENGINE_TREE_DIGEST.name])
        if str(tree.root) not in sys.path:
            sys.path.insert(0, str(tree.root))
        ops = tree.ops
    packages: list[str] = []
    for op in ops:
        if op.slot not in slots:
            continue
        spec = get_slot(op.slot)
        fn = getattr(importlib.import_module(op.qualified_module), op.attr)
        if op.native:  # launches only inside each call's scope, only of this artifact's kernels
            art = native_runtime.open_sealed(tree.root / NATIVE_DIR, op.native)
            fn = native_runtime.wrap(fn, art, native_driver or _rank_driver())
        salt_kernel_keys(op.package)  # before any launch: no Triton cache key shared with another kernel
        packages.append(op.package)
        stock = None
        if not registry.strict:
            from seams.stock import stock_kernel

            stock = stock_kernel(op.slot)[0]
        body = guarded(spec, fn, registry, stock, op.role)
        call = register_slot_op(
            spec, wrap(body) if wrap else body, f"cacheon_{op.digest[:16]}{suffix}", op.variant.replace("-", "_")
        )
        registry.add(
            spec,
            Candidate(op.slot, op.variant, op.package, tuple(dtype_of(d) for d in op.dtypes), op.constraints, call, op.role),
        )
    return tuple(dict.fromkeys(packages))


def _rank_driver() -> Launches:
    import torch

    return native_runtime.driver_for(torch.device("cuda" if torch.cuda.is_available() else "cpu"))


def note_active(registry: Registry, slots: list[str]) -> None:
    """Every registered candidate of the armed slots says it is active (none: fail closed)."""
    active = [c for s in slots for c in registry.candidates.get(s, [])]
    if not active:
        raise RuntimeError(f"no candidate in the engine tree for the selected slots {slots}")
    for c in active:
        registry.receipts.note(receipt_key(c.slot, c.role), "active")


def activate_scheduler(tp_rank: int, registry: Registry = REGISTRY, environ: dict[str, str] | None = None) -> bool:
    """Load the sealed tree, register candidates as custom ops, install the selected adapters,
    enable the registry. Idempotent per process. Returns True when candidates are active."""
    if _state.get("done"):
        return bool(registry.enabled)
    _state["done"] = True
    env = dict(os.environ if environ is None else environ)
    adapters = selected_adapters(env)
    if not adapters:
        return False  # a pristine (T) or candidate-free engine: pure pass-through
    receipts = Receipts(env.get(RECEIPT_DIR.name), "scheduler", tp_rank)
    registry.receipts = receipts
    registry.strict = SEAM_STRICT.get(env)
    slots = sorted({s for a in adapters for s in a.slots})
    try:
        sys.dont_write_bytecode = True  # nothing but the sealed sources is ever imported from the tree
        if env.get(RESIDENT_ENV) != "1":  # a resident timed engine starts empty (seams/resident.py)
            register_candidates(env, slots, registry)
        from seams.hooks import install_hooks

        hooks: dict = {}
        for a in adapters:
            hooks.update(adapter_hooks(a))
        install_hooks(hooks)
        if env.get(RESIDENT_ENV) == "1":
            registry.route = "stock"  # nothing installed yet: every routed call is stock's
            registry.enabled = True
            return True
        note_active(registry, slots)
        registry.enabled = True
        return True
    except Exception as e:  # noqa: BLE001
        registry.disable()
        for s in slots:
            receipts.note(s, "load_failed", repr(e))
        if registry.strict or any(get_slot(s).collective for s in slots):
            # collectives are all-or-none: a rank on stock while its peers run the candidate's
            # communication would deadlock or corrupt, so even serving mode stops the engine
            raise
        return False
