"""The process test_shutdown.py signals: a validator whose arena holds a sandboxed engine stand-in
(a process group with a `sleep 300` grandchild, like SGLang's scheduler) until it is killed.

    shutdown_worker.py CHAIN_DB STATE_DIR MODE      MODE: signals | crash

signals: the real SIGTERM/SIGINT handlers (commands.install_signal_handlers), run_forever.
crash:   prints the engine's pid and waits to be SIGKILLed (the test then restarts).
Once the engine runs it prints "engine <pid>".
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

from validator_fakes import NETUID, VALIDATOR, fake_screener  # noqa: E402

from cacheon_subnet import sandbox  # noqa: E402
from cacheon_subnet.chain import LocalChain  # noqa: E402
from cacheon_subnet.records import QualifyResult  # noqa: E402
from cacheon_subnet.validator.commands import install_signal_handlers  # noqa: E402
from cacheon_subnet.validator.loop import Validator, ValidatorConfig  # noqa: E402

ENGINE = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"


class HoldingQualifier:
    """Starts an 'engine' and waits for it; if it dies under us, reports FAIL (as an arena whose
    engine crashed might): the loop must not record that verdict during a shutdown."""

    arena_id = "holding-arena"
    label = "fake-timing"

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch

    def qualify(self, bundle, op, incumbent):
        proc = sandbox.launch(
            [sys.executable, "-c", ENGINE],
            scratch=self.scratch,
            policy=sandbox.SandboxPolicy(wall_timeout_s=600, cpu_seconds=None),
        )
        print("engine", proc.pid, flush=True)
        try:
            proc.wait()
        finally:
            sandbox.stop(proc)
        return QualifyResult(op.slot, "FAIL", False, 0.0, 0.0, 0.0, self.arena_id, self.label, "engine died")


def main() -> int:
    chain_path, state_dir, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    config = ValidatorConfig(
        netuid=NETUID,
        hotkey=VALIDATOR,
        state_dir=state_dir,
        interval_s=0.2,
        targets=("norm.rmsnorm",),
        retry_base_s=0.0,
        retry_max_s=0.0,
    )
    validator = Validator(
        config, LocalChain.open(chain_path), HoldingQualifier(state_dir.parent / "engine-scratch"), screener=fake_screener()
    )
    stop = threading.Event()
    if mode == "signals":
        install_signal_handlers(stop)
    validator.run_forever(stop)
    validator.close()
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
