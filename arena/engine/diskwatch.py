"""A bound on what an engine writes to the host's disk while it runs.

Why: the sandbox's own scratch, /tmp and /dev/shm are size- and inode-bounded tmpfs, but an
engine also writes host directories: its receipts/answers dir (kept in the verdict's workdir for
the record) and its private copies of the JIT caches (on disk: they can be gigabytes). Nothing
bounded those. A contribution whose kernel filled them could fill the validator's disk: every
later verdict, and the state DB's writes, would fail until an operator cleaned up, and the
receipts dir outlives the run. So the host walks those dirs while the engine runs and stops it
when they grow past `growth_bytes` or `max_files` over what the host put there, when the dirs
that outlive the run (the receipts dir) hold more than `kept_bytes` / `kept_files` (one verdict's
leftovers add up over many), or when the filesystem's free space falls below `reserve_bytes`
(whoever filled it: the operator hears why).

What the walk counts (red team: each of these hid writes from the first version): every entry's
allocated blocks, directories' own too (an ext4 directory keeps the blocks of entries made and
removed); through directory fds at any path length (os.walk skipped a subtree below PATH_MAX
silently, and died of RecursionError on a chain 1,000 deep, which killed the watch); a tree
deeper than MAX_DEPTH is itself a breach; and files the engine's processes unlinked but still
hold open or mapped on those filesystems (/proc/<pid>/fd, /proc/<pid>/map_files), which no walk
sees. Not seen: a file whose only reference is an fd in flight in a unix socket (SCM_RIGHTS);
the free-space reserve bounds it, and it is freed when the engine stops (docs/security.md).
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from cacheon_subnet.env import DISK_RESERVE_MIB, ENGINE_DISK_GIB, ENGINE_KEPT_MIB
from cacheon_subnet.sandbox.fsview import TreeTooDeep, walk_fds

GIB, MIB = 1 << 30, 1 << 20
MAX_DEPTH = 64  # JIT caches nest ~8 deep (FlashInfer's); a deeper tree is a breach, never skipped
MAX_HELD_SCAN = 1 << 20  # fds (+ deleted files mapped) of the engine's processes one sample may look at (honest: ~10k)
YOUNG_S, YOUNG_INTERVAL_S = 10.0, 0.2  # an engine's first seconds are sampled this often (DiskWatch.run)


@dataclass(frozen=True)
class DiskLimits:
    growth_bytes: int = 16 * GIB  # what one engine may add to its host-visible dirs (JIT builds: ~1 GiB)
    max_files: int = 200_000  # entries it may add (inodes of the host's filesystem)
    reserve_bytes: int = GIB  # free space the host keeps for its state DB, logs and results
    # what it may leave in the dirs that outlive the run (its receipts/answers dir: honest ones hold
    # a few MiB of answer logs and receipts)
    kept_bytes: int = 256 * MIB
    kept_files: int = 4096

    @classmethod
    def from_env(cls) -> DiskLimits:
        """CACHEON_ENGINE_DISK_GIB / CACHEON_ENGINE_KEPT_MIB / CACHEON_DISK_RESERVE_MIB override the
        defaults (operators)."""
        d = cls()
        gib, kept, mib = ENGINE_DISK_GIB.get(), ENGINE_KEPT_MIB.get(), DISK_RESERVE_MIB.get()
        return cls(
            growth_bytes=int(gib * GIB) if gib is not None else d.growth_bytes,
            max_files=d.max_files,
            reserve_bytes=int(mib * MIB) if mib is not None else d.reserve_bytes,
            kept_bytes=int(kept * MIB) if kept is not None else d.kept_bytes,
            kept_files=d.kept_files,
        )

    def unbounded(self) -> DiskLimits:
        """An engine without contribution code (it writes the checkpoint): only the reserve holds."""
        big = 1 << 62
        return DiskLimits(big, big, self.reserve_bytes, big, big)


def usage(roots: Iterable[Path], max_entries: int | None = None) -> tuple[int, int]:
    """(bytes, entries) under `roots`: allocated blocks of every entry, directories' own included
    (sparse files count as what they take), each inode once; links not followed (walk_fds: any
    path length and depth up to MAX_DEPTH, else TreeTooDeep). Stops counting past `max_entries`."""
    total = entries = 0
    seen: set[tuple[int, int]] = set()
    for root in roots:
        for _, name, st in walk_fds(root, MAX_DEPTH):
            if name is not None:
                entries += 1
                if max_entries is not None and entries > max_entries:
                    return total, entries
            if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:  # hard links: one inode, counted once
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
            total += max(st.st_blocks * 512, 0)
    return total, entries


def held_unlinked(pids: Iterable[int], devices: set[int], limit: int = MAX_HELD_SCAN) -> tuple[int, int]:
    """(bytes, entries looked at) of regular files on `devices` that processes `pids` hold open or
    mapped after unlinking them (no walk sees those blocks; they are freed when the holder dies).
    Stops looking past `limit` entries."""
    total = looked = 0
    seen: set[tuple[int, int]] = set()
    devs = {(os.major(d), os.minor(d)) for d in devices}
    for pid in pids:
        paths = []
        try:
            with os.scandir(f"/proc/{pid}/fd") as it:
                paths += [f"/proc/{pid}/fd/{e.name}" for e in it]
        except OSError:  # gone
            continue
        try:  # mappings: only those of a deleted file on a watched filesystem (a CUDA process maps thousands)
            with open(f"/proc/{pid}/maps", "rb") as f:
                for line in f:
                    parts = line.split(None, 5)
                    if len(parts) == 6 and parts[5].rstrip().endswith(b"(deleted)") and parts[4] != b"0":
                        major, _, minor = parts[3].partition(b":")
                        if (int(major, 16), int(minor, 16)) in devs:
                            paths.append(f"/proc/{pid}/map_files/{parts[0].decode()}")
        except (OSError, ValueError):
            pass
        for p in paths:
            looked += 1
            if looked > limit:
                return total, looked
            try:
                st = os.stat(p)  # the magic link: the open (or mapped) file itself
            except OSError:  # closed meanwhile, or map_files without CAP_SYS_ADMIN
                continue
            if st.st_nlink or not stat.S_ISREG(st.st_mode) or st.st_dev not in devices:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += max(st.st_blocks * 512, 0)
    return total, looked


class DiskWatch(threading.Thread):
    """Samples the dirs every `interval_s`; `breach` says why the engine must stop (None: fine).
    `kept`: those of `roots` that outlive the run. `members`, set once the engine runs: its live
    processes (sandbox.members), whose unlinked-but-open files count as its writes."""

    def __init__(
        self, roots: list[Path], limits: DiskLimits, interval_s: float = 1.0, kept: Iterable[str | Path] = ()
    ) -> None:
        super().__init__(daemon=True, name="arena-diskwatch")
        keep = {os.path.abspath(p) for p in kept}
        roots = [Path(r) for r in roots if os.path.isdir(r)]
        self.kept = [r for r in roots if os.path.abspath(r) in keep]
        self.other = [r for r in roots if os.path.abspath(r) not in keep]
        self.roots = self.kept + self.other
        self.devices = {os.stat(r).st_dev for r in self.roots}
        self.limits, self.interval_s = limits, interval_s
        self.members: Callable[[], Iterable[int]] | None = None
        self.base_kept, self.base_other = usage(self.kept), usage(self.other)
        self.base = (self.base_kept[0] + self.base_other[0], self.base_kept[1] + self.base_other[1])
        self.breach: tuple[str, str] | None = None  # (kind, why): "growth" or "reserve"
        self.peak = (0, 0)
        self._halt = threading.Event()

    def check(self) -> tuple[str, str] | None:
        lim = self.limits
        try:
            kept = usage(self.kept, self.base_kept[1] + min(lim.kept_files, lim.max_files))
            other = usage(self.other, self.base_other[1] + lim.max_files)
        except TreeTooDeep:
            return "growth", (
                f"the engine nested directories deeper than {MAX_DEPTH} levels in its host-visible "
                "dirs (receipts, JIT caches): more than the host walks"
            )
        held, looked = held_unlinked(self.members(), self.devices) if self.members else (0, 0)
        if looked > MAX_HELD_SCAN:
            return "growth", (
                f"the engine's processes hold more than {MAX_HELD_SCAN} open files and mappings: more "
                "than the host checks for unlinked files on its disk"
            )
        grown = (kept[0] + other[0] + held - self.base[0], kept[1] + other[1] - self.base[1])
        kept_grown = (kept[0] - self.base_kept[0], kept[1] - self.base_kept[1])
        self.peak = (max(self.peak[0], grown[0]), max(self.peak[1], grown[1]))
        if grown[0] > lim.growth_bytes:
            return "growth", (
                f"the engine wrote {grown[0] / GIB:.2f} GiB into its host-visible dirs (receipts, JIT "
                f"caches; {held / GIB:.2f} GiB of it in files it unlinked and holds open), over the "
                f"{lim.growth_bytes / GIB:.2f} GiB an engine may add"
            )
        if grown[1] > lim.max_files:
            return (
                "growth",
                f"the engine made {grown[1]} files in its host-visible dirs, over the {lim.max_files} it may add",
            )
        if kept_grown[0] > lim.kept_bytes or kept_grown[1] > lim.kept_files:
            return "growth", (
                f"the engine left {kept_grown[0] / MIB:.1f} MiB in {kept_grown[1]} entries in its receipts "
                f"dir, which outlives the run, over the {lim.kept_bytes / MIB:.0f} MiB / {lim.kept_files} "
                f"entries it may keep ({ENGINE_KEPT_MIB.name})"
            )
        if self.roots:
            free = shutil.disk_usage(self.roots[0]).free
            if free < lim.reserve_bytes:
                return "reserve", (
                    f"the host's disk has {free / MIB:.0f} MiB free, under the "
                    f"{lim.reserve_bytes >> 20} MiB reserve ({DISK_RESERVE_MIB.name})"
                )
        return None

    def run(self) -> None:
        """Every `interval_s`, and every YOUNG_INTERVAL_S for the first YOUNG_S: a short-lived engine
        (a fake one on a loaded CI box lived ~1-2 s) that unlinked a ballast at import otherwise ended,
        freeing it, between two samples, and its breach was never seen."""
        born = time.monotonic()
        while not self._halt.wait(
            self.interval_s if time.monotonic() - born > YOUNG_S else min(self.interval_s, YOUNG_INTERVAL_S)
        ):
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
