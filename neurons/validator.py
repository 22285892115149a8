#!/usr/bin/env python3
"""Cacheon validator neuron: parse flags, run the loop (cacheon_subnet.validator does the work).

    python neurons/validator.py --netuid N --subtensor.network NET --wallet.name W --wallet.hotkey H \
        --chain local|bittensor --state-dir DIR --arena cpu|configs/arena/<name>.toml \
        [--local-chain PATH] [--once] [--interval S]
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
    """`--chain local --demo`: the whole loop on an embedded chain (same as `cacheon demo`)."""
    from cacheon_subnet.demo import run_demo

    state = argv[argv.index("--state-dir") + 1] if "--state-dir" in argv else ".cacheon/demo"
    return run_demo(Path(state))


if __name__ == "__main__":
    if "--demo" in sys.argv[1:]:
        sys.exit(_demo(sys.argv[1:]))
    sys.exit(main())
