"""Prune: the archive cache (bundles/<digest>.tar.gz) keeps only what a stage may still read.

Why: the fetch stage wrote every committed archive and nothing removed one, so a miner inside the
intake rate limit could fill the validator's disk with 64 MiB archives of worthless bundles (red
team 2026-12-05: one hotkey, 8 commits, 510 MiB; ~5 GiB a day a hotkey, est.), and a full disk
fails honest fetches and the state DB's writes. An archive stays while its contribution is in
the intake (queued to verified: screen, verify and the arena read it), while any of its evidence
is unsettled (settlement may re-measure it), and while it holds a crown (the incumbent of every
head-to-head, a pin bump's re-measure, `cacheon release build`). Everything else is gone after
the pass that settled it; a contribution sent back to the intake later is fetched again
(stages/items.Archives.bundle). The sweep runs in the loop's thread after settle, so no stage of
this pass reads what it removes, and a kill -9 mid-sweep leaves only archives it would remove
again.
"""

from __future__ import annotations

from pathlib import Path

from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.fetch import ARCHIVE_SUFFIX
from cacheon_subnet.validator.stages.passstate import PassState
from cacheon_subnet.validator.stages.ports import Log
from cacheon_subnet.validator.state import StateDB


class PruneStage:
    name = "prune"

    def __init__(self, db: StateDB, cache_dir: Path, log: Log) -> None:
        self.db, self.cache_dir, self.log = db, cache_dir, log

    def run(self, ps: PassState) -> None:
        """Every pass: one indexed query and a listing of the cache (what it keeps is the intake,
        the unsettled and the crowns, so the listing stays short)."""
        if not self.cache_dir.is_dir():
            return
        keep = ledger.archives_in_use(self.db)
        removed, freed = 0, 0
        for path in self.cache_dir.glob(f"*{ARCHIVE_SUFFIX}"):
            if path.name[: -len(ARCHIVE_SUFFIX)] in keep:
                continue
            try:
                size = path.stat().st_size
                path.unlink()
            except FileNotFoundError:
                continue
            removed, freed = removed + 1, freed + size
        if removed:
            self.log.info("cache.pruned", archives=removed, freed_mib=round(freed / (1 << 20), 1), kept=len(keep))
