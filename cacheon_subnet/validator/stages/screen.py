"""Screen (fetched -> screened/failed): the static screen (validator/screen.py: known slots, the
policy scan in its bounded child), then copies settled from an earlier commit's verdict
(validator/copies.py) so a copy costs no verify or GPU time."""

from __future__ import annotations

from cacheon_subnet.validator.background import pinned
from cacheon_subnet.validator.copies import settle_copy
from cacheon_subnet.validator.screen import static_screen
from cacheon_subnet.validator.stages.items import Archives, Items
from cacheon_subnet.validator.stages.passstate import PassState
from cacheon_subnet.validator.stages.ports import Log
from cacheon_subnet.validator.state import Contribution, StateDB


class ScreenStage:
    name = "screen"

    def __init__(
        self,
        db: StateDB,
        items: Items,
        archives: Archives,
        log: Log,
        *,
        cpus: frozenset[int] | None = None,
        max_items: int = 16,
    ) -> None:
        self.db, self.items, self.archives, self.log = db, items, archives, log
        self.cpus, self.max_items = cpus, max_items

    def run(self, ps: PassState) -> None:
        with pinned(self.cpus):  # the static scan's child too: never on the arena's cores
            for c in self.db.due("fetched")[: self.max_items]:
                with self.items.guard(ps, c, "screen"):
                    self._one(ps, c)

    def _one(self, ps: PassState, c: Contribution) -> None:
        bundle = self.archives.bundle(c)
        if bundle is None:
            return
        result = static_screen(bundle)
        if not result.passed:
            self.db.transition(c.id, "failed", "screen: " + "; ".join(result.reasons)[:2000])
            self.log.info("screen.failed", contribution=c.id, reasons=list(result.reasons)[:5])
            return
        with self.db.tx() as con:  # a copy of a judged contribution costs no verify or GPU time
            copy = settle_copy(self.db, con, c, bundle)
            if copy is None or copy.contribution_id != c.id:
                self.db.move(con, c.id, "screened", "static screen clean")
        if copy is not None:
            self.log.info("screen.copy", contribution=copy.contribution_id, outcome=copy.outcome, reason=copy.reason[:300])
        if copy is not None and copy.contribution_id == c.id:
            return
        ps.advanced("screened")
        self.log.info("screen.ok", contribution=c.id, ops=result.detail.get("ops"))
