#!/usr/bin/env python3
"""Cacheon validator neuron: parse flags, run the loop (cacheon_subnet.validator does the work).

    python neurons/validator.py --netuid N --subtensor.network NET --wallet.name W --wallet.hotkey H \
        --chain local|bittensor --state-dir DIR --arena cpu|configs/arena/<name>.toml \
        [--local-chain PATH] [--once] [--interval S]
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script from a checkout: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
try:
    from cacheon_subnet import log as _log  # noqa: F401 - structlog: the dependency a bare python lacks first
    from cacheon_subnet.validator.commands import main
except ImportError as _exc:  # another interpreter than the checkout's .venv (e.g. no structlog)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _bootstrap import reexec_or_explain

    reexec_or_explain(_exc, sys.argv[0], sys.argv[1:])


def _demo(argv: list[str]) -> int:
    """`--chain local --demo`: the whole loop on an embedded chain (same as `cacheon demo`)."""
    from cacheon_subnet.demo import run_demo

    state = argv[argv.index("--state-dir") + 1] if "--state-dir" in argv else ".cacheon/demo"
    return run_demo(Path(state))


if __name__ == "__main__":
    if "--demo" in sys.argv[1:]:
        sys.exit(_demo(sys.argv[1:]))
    sys.exit(main())
