"""A bound on what an engine writes to the host's disk while it runs.

Why: the sandbox's own scratch, /tmp and /dev/shm are size- and inode-bounded tmpfs, but an
engine also writes host directories: its receipts/answers dir (kept in the verdict's workdir for
the record) and its private copies of the JIT caches (on disk: they can be gigabytes). Nothing
bounded those. A contribution whose kernel filled them could fill the validator's disk: every
later verdict, and the state DB's writes, would fail until an operator cleaned up, and the
receipts dir outlives the run. So the host walks those dirs while the engine runs and stops it
when they grow past `growth_bytes` or `max_files` over what the host put there, or when the
filesystem's free space falls below `reserve_bytes` (whoever filled it: the operator hears why).
"""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

GIB = 1 << 30


@dataclass(frozen=True)
class DiskLimits:
    growth_bytes: int = 16 * GIB  # what one engine may add to its host-visible dirs (JIT builds: ~1 GiB)
    max_files: int = 200_000  # entries it may add (inodes of the host's filesystem)
    reserve_bytes: int = GIB  # free space the host keeps for its state DB, logs and results

    @classmethod
    def from_env(cls) -> DiskLimits:
        """CACHEON_ENGINE_DISK_GIB / CACHEON_DISK_RESERVE_MIB override the defaults (operators)."""
        d = cls()
        gib = os.environ.get("CACHEON_ENGINE_DISK_GIB")
        mib = os.environ.get("CACHEON_DISK_RESERVE_MIB")
        return cls(growth_bytes=int(float(gib) * GIB) if gib else d.growth_bytes, max_files=d.max_files,
                   reserve_bytes=int(float(mib) * (1 << 20)) if mib else d.reserve_bytes)


def usage(roots: list[Path]) -> tuple[int, int]:
    """(bytes, entries) under `roots`, links not followed; allocated blocks, so sparse files count
    as what they take."""
    total = files = 0

    def fail(e: OSError) -> None:  # a dir that vanished is fine; one we cannot read (PATH_MAX...) is not
        if not isinstance(e, FileNotFoundError):
            raise e

    for root in roots:
        for d, dirs, names in os.walk(root, onerror=fail):
            files += len(dirs) + len(names)
            for n in names:
                try:
                    st = os.lstat(os.path.join(d, n))
                except FileNotFoundError:
                    continue
                total += max(st.st_blocks * 512, 0)
    return total, files


class DiskWatch(threading.Thread):
    """Samples the dirs every `interval_s`; `breach` says why the engine must stop (None: fine)."""

    def __init__(self, roots: list[Path], limits: DiskLimits, interval_s: float = 1.0) -> None:
        super().__init__(daemon=True, name="arena-diskwatch")
        self.roots = [Path(r) for r in roots if os.path.isdir(r)]
        self.limits, self.interval_s = limits, interval_s
        self.base = usage(self.roots)
        self.breach: tuple[str, str] | None = None  # (kind, why): "growth" or "reserve"
        self.peak = (0, 0)
        self._halt = threading.Event()

    def check(self) -> tuple[str, str] | None:
        try:
            now = usage(self.roots)
        except OSError as e:  # fail closed: what cannot be measured (a path past PATH_MAX) is not bounded
            return "growth", f"the engine's host-visible dirs cannot be measured ({e.__class__.__name__}: {e})"
        grown = (now[0] - self.base[0], now[1] - self.base[1])
        self.peak = (max(self.peak[0], grown[0]), max(self.peak[1], grown[1]))
        lim = self.limits
        if grown[0] > lim.growth_bytes:
            return "growth", (f"the engine wrote {grown[0] / GIB:.2f} GiB into its host-visible dirs (receipts, JIT "
                              f"caches), over the {lim.growth_bytes / GIB:.2f} GiB an engine may add")
        if grown[1] > lim.max_files:
            return "growth", f"the engine made {grown[1]} files in its host-visible dirs, over the {lim.max_files} it may add"
        if self.roots:
            free = shutil.disk_usage(self.roots[0]).free
            if free < lim.reserve_bytes:
                return "reserve", (f"the host's disk has {free / (1 << 20):.0f} MiB free, under the "
                                   f"{lim.reserve_bytes >> 20} MiB reserve (CACHEON_DISK_RESERVE_MIB)")
        return None

    def run(self) -> None:
        while not self._halt.wait(self.interval_s):
            try:
                why = self.check()
            except OSError:
                continue
            if why:
                self.breach = why
                return

    def stop(self) -> tuple[str, str] | None:
        """Stop sampling; one last look (a burst since the last sample). Returns the breach."""
        self._halt.set()
        if self.is_alive():
            self.join(timeout=30)
        if self.breach is None:
            try:
                self.breach = self.check()
            except OSError:
                pass
        return self.breach
