#!/usr/bin/env python3
"""Cacheon validator neuron: parse flags, run the loop (cacheon_subnet.validator does the work).

    python neurons/validator.py --netuid N --subtensor.network NET --wallet.name W --wallet.hotkey H \
        --chain local|bittensor --arena configs/arena/<name>.toml [--state-dir DIR] \
        [--local-chain PATH] [--once] [--dry-run] [--interval S] [--allow-cpu-timing]
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
