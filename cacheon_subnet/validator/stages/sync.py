"""Sync: read the chain (block, metagraph, revealed commitments) and take new commitments in
(validator/intake.py). The one stage whose failure (ChainDown) stops qualifying and settling
for the pass; fetch, screen and verify still run on what the DB already holds."""

from __future__ import annotations

import time

from cacheon_subnet.netpolicy import UrlPolicy
from cacheon_subnet.validator.intake import IntakePolicy, intake
from cacheon_subnet.validator.stages.passstate import PassState
from cacheon_subnet.validator.stages.ports import ChainReader, Log
from cacheon_subnet.validator.state import StateDB


class SyncStage:
    name = "sync"

    def __init__(
        self, db: StateDB, chain: ChainReader, netuid: int, policy: IntakePolicy, urls: UrlPolicy, log: Log
    ) -> None:
        self.db, self.chain, self.netuid, self.policy, self.urls, self.log = db, chain, netuid, policy, urls, log

    def run(self, ps: PassState) -> None:
        block = self.chain.current_block()
        ps.block = block
        mg = self.chain.metagraph(self.netuid)
        commitments = self.chain.revealed_commitments(self.netuid)
        events = intake(self.db, commitments, self.policy, block, self.urls)
        for e in events:
            self.log.info("intake." + e.outcome, contribution=e.contribution_id, hotkey=e.hotkey, reason=e.reason[:300])
        ps.intake = len(events)
        with self.db.tx() as con:
            self.db.put("last_sync_block", block, con)
            self.db.put("metagraph_neurons", len(mg.neurons), con)
            self.db.put("last_sync_at", time.time(), con)
