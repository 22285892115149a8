"""SGLang plugin entry point (group `sglang.srt.plugins`), loaded by `load_plugins()` in the
Engine driver and at the start of every spawned scheduler (`run_scheduler_process`).

It only registers an AROUND hook on `Scheduler.__init__` through SGLang's released
HookRegistry. The hook runs in exactly the processes that construct a Scheduler — the scheduler
ranks — and activates the seam there before the model is built. The driver (which holds the
host's timer in the arena) never constructs a Scheduler, so it never imports contribution code;
the detokenizer does not even load plugins. With no seam gate set the plugin does nothing.

Remaining internal hook (no released per-role callback exists in 0.5.13.post1):
  sglang.srt.managers.scheduler.Scheduler.__init__ (AROUND) — positive scheduler identification.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from seams.table import HOOK_TARGETS


def _scheduler_init(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    from seams.activate import activate_scheduler

    tp_rank = kwargs.get("tp_rank", args[4] if len(args) > 4 else 0)
    active = activate_scheduler(int(tp_rank))
    result = original(*args, **kwargs)
    if active and args:
        from seams import forward_clock
        from seams.route import attach

        # the scheduler instance: Engine.collective_rpc("cacheon_route"/"cacheon_clock") reaches it;
        # both answer in the rank's nonce-bound answer log (seams/answers.py)
        attach(args[0], rank=int(tp_rank))
        forward_clock.attach(args[0], int(tp_rank))  # + the runner's device_timer, if asked
        from seams import resident

        resident.attach(args[0], int(tp_rank))  # install/remove/state: a timed engine kept across contributions
    return result


def load() -> None:
    from seams.activate import selected_adapters

    if not selected_adapters():
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    target = next(t for t in HOOK_TARGETS if t.endswith("Scheduler.__init__")).replace(":", ".")
    HookRegistry.register(target, _scheduler_init, HookType.AROUND)
