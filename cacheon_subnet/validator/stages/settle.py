"""Settle and publish: the two stages after the arena. Settle turns qualified evidence into
crowns (validator/ledger.py, scoring/settle.py), one target at a time so one bad target never
stops the others or the weights; publish sends the weights the crowns imply
(validator/publish.Publisher)."""

from __future__ import annotations

from cacheon_subnet.scoring.settle import ScoringError, SpeedPolicy
from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.publish import Publisher
from cacheon_subnet.validator.stages.passstate import PassState
from cacheon_subnet.validator.stages.ports import BlockClock, Log
from cacheon_subnet.validator.state import StateDB


class SettleStage:
    name = "settle"

    def __init__(
        self,
        db: StateDB,
        chain: BlockClock,
        speed: SpeedPolicy,
        log: Log,
        *,
        hold_blocks: int = 300,
        max_remeasure: int = 1,
    ) -> None:
        self.db, self.chain, self.speed, self.log = db, chain, speed, log
        self.hold_blocks, self.max_remeasure = hold_blocks, max_remeasure

    def run(self, ps: PassState) -> None:
        targets = ledger.unsettled_targets(self.db)
        if not targets:
            return
        block = self.chain.current_block()
        for target in targets:
            self._target(ps, target, block)

    def _target(self, ps: PassState, target: str, block: int) -> None:
        try:
            out = ledger.settle(
                self.db, target, self.speed, block, hold_blocks=self.hold_blocks, max_remeasure=self.max_remeasure
            )
        except ScoringError as exc:  # rolled back; one bad target must not stop the others or weights
            self.log.error("settle.error", target=target, error=str(exc)[:500])
            return
        if out is None:
            return
        if isinstance(out, list):
            self.log.info("settle.held", target=target, waiting_for=out[:5])
            return
        ps.settled.append(target)
        for d in out.decisions:
            self.log.info(
                "settle.decision", target=target, contribution=d.contribution_id, outcome=d.outcome, reason=d.reason[:300]
            )
        if out.changed and out.crown is not None:
            ps.crowns.append(target)
            self.log.info(
                "settle.crown",
                target=target,
                contribution=out.crown.contribution_id,
                hotkey=out.crown.hotkey,
                speedup_vs_stock=round(out.crown.speedup_vs_stock, 4),
                block=out.block,
            )
        for cid in out.remeasure:
            self.log.info("settle.remeasure", target=target, contribution=cid)


class PublishStage:
    """`publisher` is replaceable (a test sets another policy on a running validator)."""

    name = "publish"

    def __init__(self, publisher: Publisher, log: Log) -> None:
        self.publisher, self.log = publisher, log

    def run(self, ps: PassState) -> None:
        result = self.publisher.step()
        ps.weights, ps.weights_detail = result.action, result.detail
        self.log.info("weights." + result.action, weights_id=result.weights_id, detail=result.detail[:300])
