"""Swap the candidate route inside a resident engine (the arena's B / C / B′ windows).

Restarted engines drift by up to 10 % (../shared/device/README.md), so the arena times stock and
candidate inside one engine and swaps the route between windows. The host reaches every
scheduler rank through `Engine.collective_rpc("cacheon_route", route=..., epoch=...)` (released
Engine API: the scheduler runs it between batches, then barriers all ranks).

CUDA graphs bake in whatever kernels ran at capture, so a swap sets `Registry.route` and
recaptures: decode graphs with `ModelRunner.init_device_graphs()` (SGLang does the same after
`update_weights_from_disk`) and, when the engine has them, piecewise graphs with
`ModelRunner.init_piecewise_cuda_graphs()`. Both are internal calls, listed in docs/seams.md.

Acknowledgement: each RPC carries a fresh nonce from the host; each rank answers with one line in
its nonce-bound answer log (seams/answers.py): (epoch, route, how many candidate calls fired while
recapturing) and its receipt counts before and after the swap. The host requires every rank to
acknowledge every epoch with the nonce it sent, with fired > 0 after a swap to the candidate and
== 0 after a swap to stock; otherwise the run is invalid. (The receipt file keeps a copy of the
acknowledgements for diagnosis; no verdict reads it.) A failed swap
disables the registry (nothing half-installed is measured) and re-raises, so collective_rpc fails.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Any

from cacheon_subnet.env import RECEIPT_DIR
from seams.dispatch import REGISTRY, Registry, receipt_key

ROUTES = ("candidate", "incumbent", "stock", "pristine")
# "pristine": every hook taken out (SGLang's own functions back in place) — the seam-overhead
# benchmark times it against "stock" (hooks in, every call routed to stock) in one engine.
RPC_METHOD = "cacheon_route"


def _fired(registry: Registry) -> dict[str, int]:
    receipts = registry.receipts
    if receipts is None:
        return {}
    keys = set(receipts.counts) | {receipt_key(c.slot, c.role) for cs in registry.candidates.values() for c in cs}
    return {k: receipts.counts[k]["fired"] if k in receipts.counts else 0 for k in sorted(keys)}


def _declined(registry: Registry) -> dict[str, dict[str, int]]:
    receipts = registry.receipts
    declines = getattr(receipts, "declines", None) or {}
    with getattr(receipts, "_lock", None) or contextlib.nullcontext():
        return {k: dict(v) for k, v in declines.items()}


def _delta_declines(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    out = {}
    for key, reasons in after.items():
        d = {r: n - before.get(key, {}).get(r, 0) for r, n in reasons.items()}
        d = {r: n for r, n in d.items() if n > 0}
        if d:
            out[key] = d
    return out


def recapture(model_runner: Any) -> list[str]:
    """Recapture every graph set the engine was started with; returns what was recaptured."""
    import torch

    done = []
    had_decode = getattr(model_runner, "graph_runner", None) is not None
    had_piecewise = getattr(model_runner, "piecewise_cuda_graph_runner", None) is not None
    model_runner.graph_runner = None
    if had_piecewise:
        model_runner.piecewise_cuda_graph_runner = None
    # No torch.cuda.empty_cache(): handing the cached blocks back to the driver made the first
    # windows after a swap re-allocate (cudaMalloc synchronises) and dip 13–40 % (H200 run 1).
    gc.collect()
    if had_decode:
        model_runner.init_device_graphs()
        done.append("decode")
    if had_piecewise:
        model_runner.init_piecewise_cuda_graphs()
        done.append("piecewise")
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        # capture leaves many young Python objects: collect them now, at the idle point, and
        # freeze the survivors, so no full collection lands inside a timed window
        gc.collect()
        gc.freeze()
    return done


def set_route(model_runner: Any, route: str, epoch: int, registry: Registry = REGISTRY) -> dict[str, Any]:
    """Flip the route and recapture; acknowledge in the receipts. Raises on any failure."""
    if route not in ROUTES:
        raise ValueError(f"route {route!r}: expected one of {ROUTES}")
    if not registry.enabled:
        raise RuntimeError("route swap on a scheduler whose registry is disabled (load failed or an earlier swap failed)")
    before = _fired(registry)
    declined_before = _declined(registry)
    try:
        from seams import hooks

        if route == "pristine":
            model: Any = getattr(model_runner, "model", None)  # the engine's torch module, if any
            restored = hooks.detach(model.modules() if hasattr(model, "modules") else ())
            if not hooks.detached():
                raise RuntimeError("pristine route: no hooked binding found to restore")
            registry.route = "stock"
        else:
            restored = -hooks.reattach()
            registry.route = route
        graphs = recapture(model_runner)
    except Exception as e:
        registry.disable()
        if registry.receipts is not None:
            registry.receipts.error(f"route@{route}", f"swap to {route} (epoch {epoch}) failed: {e!r}")
        raise
    after = _fired(registry)
    delta = {slot: after.get(slot, 0) - before.get(slot, 0) for slot in sorted(set(after) | set(before))}
    ack = {
        "epoch": int(epoch),
        "route": route,
        "graphs": graphs,
        "fired_during_capture": delta,
        "hooks_restored": restored,  # > 0: bindings put back to SGLang's own; < 0: hooks re-applied
        # routed calls at capture the candidate did not take, by reason (seams/receipts.py)
        "declined_during_capture": _delta_declines(declined_before, _declined(registry)),
    }
    if registry.receipts is not None:
        registry.receipts.ack_route(ack)
    return ack


def attach(scheduler: Any, registry: Registry = REGISTRY, rank: int = 0, directory: str | None = None) -> None:
    """Give the scheduler the RPC method the host calls (only where candidates are active)."""
    import os

    from seams.answers import check_nonce, snapshot
    from seams.forward_clock import answer_log

    log = answer_log(directory if directory is not None else os.environ.get(RECEIPT_DIR.name), rank)

    def cacheon_route(route: str, epoch: int, nonce: str) -> None:
        check_nonce(nonce)
        before = snapshot(registry.receipts)  # what the OLD route left: its static-input changes are its own
        ack = set_route(scheduler.tp_worker.model_runner, route, epoch, registry)
        log.answer(
            nonce,
            "route",
            {
                "ack": ack,
                "counts_before": before["counts"],
                "static_before": before["static"],
                **snapshot(registry.receipts),
            },
        )

    setattr(scheduler, RPC_METHOD, cacheon_route)
