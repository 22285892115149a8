"""Verify and qualify, interleaved in one stage: what a screen verifies goes to a free arena at
once. A draining pass (run_once) waits on the wake event until none of its own screens and arena
jobs is in flight; a run_forever pass does not wait.

Why qualify runs twice a round: first, so a GPU arena has priority over a GPU screen; then for
what verify just passed. A chain outage stops only qualifying (it needs the block): verify goes
on, as it did when it was a stage of its own, and the ChainDown is raised at the end."""

from __future__ import annotations

from cacheon_subnet import lifecycle
from cacheon_subnet.validator.chainguard import ChainDown
from cacheon_subnet.validator.stages.passstate import PassState
from cacheon_subnet.validator.stages.ports import Stage
from cacheon_subnet.validator.stages.verify import VerifyStage
from cacheon_subnet.validator.stages.workers import Workers


class Pipeline:
    name = "pipeline"

    def __init__(self, verify: VerifyStage, judge: Stage, workers: Workers, busy_poll_s: float) -> None:
        self.verify, self.judge, self.workers, self.busy_poll_s = verify, judge, workers, busy_poll_s

    def run(self, ps: PassState) -> None:
        down: list[ChainDown] = []
        while True:
            self.verify.collect(ps)
            self._judge(ps, down)  # first: a GPU arena has priority over a GPU screen
            self.verify.run(ps)
            self._judge(ps, down)  # what verify just passed
            if not ps.drain or not self.workers.own_in_flight() or lifecycle.SHUTDOWN.is_set():
                break
            self.workers.wake.wait(self.busy_poll_s)
            self.workers.wake.clear()
        if down:
            raise down[0]

    def _judge(self, ps: PassState, down: list[ChainDown]) -> None:
        try:
            self.judge.run(ps)
        except ChainDown as exc:
            down.append(exc)
