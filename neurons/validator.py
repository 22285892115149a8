#!/usr/bin/env python3
"""Cacheon validator neuron: parse flags, run the loop (cacheon_subnet.validator does the work).

    python neurons/validator.py --netuid N --subtensor.network NET --wallet.name W --wallet.hotkey H \
        --chain local|bittensor --arena configs/arena/<name>.toml [--state-dir DIR] \
        [--local-chain PATH] [--once] [--dry-run] [--interval S] [--allow-cpu-timing]
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from cacheon_subnet.validator.commands import main
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from cacheon_subnet.validator.commands import main

def _demo(argv: list[str]) -> int:
    """`--chain local --demo`: the whole loop on an embedded chain (same as `cacheon demo`).
    DIR is wiped only if cacheon created it (its .cacheon-owned marker); anything else is refused."""
    from cacheon_subnet.demo import run_demo
    from cacheon_subnet.owned_dir import NotOwnedError, mark_owned, wipe_owned

    state = Path(argv[argv.index("--state-dir") + 1] if "--state-dir" in argv else ".cacheon/demo")
    try:
        wipe_owned(state)
    except NotOwnedError as exc:
        print(f"error: --state-dir {exc}", file=sys.stderr)
        return 2
    mark_owned(state)
    try:
        return run_demo(state)
    finally:
        if state.is_dir():
            mark_owned(state)  # run_demo recreates the dir it was given: it stays ours


if __name__ == "__main__":
    if "--demo" in sys.argv[1:]:
        sys.exit(_demo(sys.argv[1:]))
    sys.exit(main())
