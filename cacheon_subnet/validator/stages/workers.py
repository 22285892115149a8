"""The background side of a validator: screens and the arena in their own threads, pinned to
their own cores (validator/background.py), and whose turn the GPU is.

Why decided here, once: what the Validator was handed (a plain qualifier, or a pool of arenas
from --arena-gpus / --arena-workers; a wake event or none) fixes how the loop runs for its whole
life. `start_workers` reads it through the runtime-checkable Protocols of ports.py; the stages
get the typed result and never look again."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from cacheon_subnet.records import Qualifier
from cacheon_subnet.validator.background import CpuSplit, ScreenPool, split_cpus
from cacheon_subnet.validator.dispatch import BackgroundArena
from cacheon_subnet.validator.screen import Screener
from cacheon_subnet.validator.stages.ports import ArenaPool, InFlight, Wakes


@dataclass(frozen=True)
class Workers:
    """`pool`: where qualify jobs go (our own BackgroundArena or a pool handed in); None: the
    arena runs in the loop's thread. `polled`: a pool handed in that never sets `wake` (Ray)."""

    wake: threading.Event
    cpus: CpuSplit
    screens: ScreenPool | None = None
    pool: ArenaPool | None = None
    own_pool: BackgroundArena | None = None
    polled: bool = False

    def in_flight(self) -> int:
        return _count(self.screens) + _count(self.pool)

    def own_in_flight(self) -> int:
        """What a draining pass waits for: its own screens and arena, not a pool handed in
        (--arena-gpus / --arena-workers passes never waited for those)."""
        return _count(self.screens) + _count(self.own_pool)


def _count(jobs: InFlight | None) -> int:
    return len(jobs.in_flight()) if jobs is not None else 0


def screen_worker_count(requested: int | None, cpus: CpuSplit, cpu_screen: bool) -> int:
    """Screens at once: what the operator asked, else one per core pinned to screening (each CPU
    screen is one single-threaded sandboxed worker; on the H100 host of session 21 five verifies
    ran one after another, 366 s, while 4 of its 16 cores were the screen's). A GPU screen takes
    turns with the arena, and an unsplit host (under 4 cores) has no cores to spare: one."""
    if requested is not None:
        return requested
    return len(cpus.screen) if cpu_screen and cpus.screen else 1


def start_workers(
    qualifier: Qualifier | ArenaPool,
    screener: Screener,
    *,
    overlap: bool | None,
    screen_device: str,
    screen_workers: int | None,
    screen_cpu_share: float,
) -> Workers:
    """Screens and the arena in background threads, pinned to their own cores, unless the
    qualifier times on this host's CPU (a CPU screen beside it would be in its windows).
    A pool handed in (--arena-gpus / --arena-workers) is used as it is."""
    pool = qualifier if isinstance(qualifier, ArenaPool) else None
    if overlap is None:
        overlap = not qualifier.label.startswith("cpu-timing")
    given = qualifier.wake if isinstance(qualifier, Wakes) else None
    wake = given or threading.Event()
    # a GPU screen never runs beside the arena (the GPU turn), so it keeps every core for its draws
    cpu_screen = not screen_device.startswith("cuda")
    cpus = split_cpus(screen_cpu_share if overlap and cpu_screen else 0)
    if not overlap:
        return Workers(wake, cpus, pool=pool, polled=pool is not None and given is None)
    screens = ScreenPool(screener, screen_worker_count(screen_workers, cpus, cpu_screen), cpus.screen, wake)
    own = None
    if pool is None:
        pool = own = BackgroundArena(qualifier, cpus.arena, wake)
    return Workers(wake, cpus, screens, pool, own, polled=own is None and given is None)


@dataclass(frozen=True)
class GpuTurn:
    """A screen on a GPU and an arena job never run at once (the arena's timed windows would
    feel the screen): the arena waits while GPU screens run, and the screens while it judges.
    A CPU screen never touches the GPU (no device nodes in its sandbox): no turn to take."""

    gpu_screens: bool
    screens: InFlight | None = None
    arena: InFlight | None = None

    def arena_busy(self) -> bool:
        return self.gpu_screens and self.arena is not None and bool(self.arena.in_flight())

    def screens_busy(self) -> bool:
        return self.gpu_screens and self.screens is not None and bool(self.screens.in_flight())
