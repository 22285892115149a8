"""The process test_restart.py kills: a validator on a LocalChain with fast fakes.

    restart_worker.py CHAIN_DB STATE_DIR MIN_BLOCK

Runs passes until the work is done (idle, weights verified and unchanged, chain block >=
MIN_BLOCK so every sealed commitment has revealed), then prints "done" and exits 0. The chain
is frozen (seconds_per_block = 0); this process is its block producer: one block per pass,
so block numbers do not depend on wall time.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

from validator_fakes import NETUID, VALIDATOR, FakeQualifier, fake_screener  # noqa: E402

from cacheon_subnet.chain import LocalChain  # noqa: E402
from cacheon_subnet.validator import ledger  # noqa: E402
from cacheon_subnet.validator.loop import Validator, ValidatorConfig  # noqa: E402
from cacheon_subnet.validator.publish import PublishPolicy  # noqa: E402

TARGETS = ("activation.silu_and_mul", "norm.rmsnorm", "rope.neox", "attention.decode")


def main() -> int:
    chain_path, state_dir, min_block = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    chain = LocalChain.open(chain_path)
    config = ValidatorConfig(
        netuid=NETUID,
        hotkey=VALIDATOR,
        state_dir=state_dir,
        interval_s=0.0,
        targets=TARGETS,
        retry_base_s=0.05,
        retry_max_s=0.2,
        chain_backoff_base_s=0.05,
        publish=PublishPolicy(interval_blocks=10**6),
    )
    validator = Validator(config, chain, FakeQualifier(delay_s=0.05), screener=fake_screener(0.05))
    print("ready", flush=True)
    for _ in range(500):
        summary = validator.run_once()
        last = ledger.last_weights(validator.db)
        if (
            summary.idle
            and summary.weights == "unchanged"
            and last is not None
            and last.state == "verified"
            and chain.current_block() >= min_block
        ):
            print("done", flush=True)
            return 0
        chain.advance(1)
        time.sleep(0.02)
    print("no convergence after 500 passes", flush=True)
    return 3


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # skip interpreter teardown (torch makes it slow); the DB is committed
