"""Make `python neurons/<x>.py` work with whatever `python` the user typed.

The dependencies live in the checkout's .venv (`make install`). Started by another interpreter
(say the system python3, which has no structlog), a neuron re-executes itself under
.venv/bin/python when that exists, else it stops with what to run instead of a traceback.
Standard library only (cacheon_subnet.env is too): this runs before anything else can be imported.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from cacheon_subnet.env import NEURON_REEXEC

GUARD = NEURON_REEXEC.name  # set on the re-exec so a broken .venv cannot loop


def reexec_or_explain(
    exc: ImportError, script: str, argv: Sequence[str], repo: Path = Path(__file__).resolve().parent.parent
) -> NoReturn:
    venv = repo / ".venv"
    py = venv / "bin" / "python"
    inside = Path(sys.prefix).resolve() == venv.resolve()
    if py.is_file() and not inside and not NEURON_REEXEC.get():
        os.environ[GUARD] = "1"
        os.execv(str(py), [str(py), script, *argv])
    missing = getattr(exc, "name", None) or str(exc)
    if py.is_file():
        how = f"{py} is there but cannot import it either: rerun `make install` in {repo}"
    else:
        how = f"no {venv} yet: run `make install` in {repo}, then `.venv/bin/python {script} ...`"
    sys.stderr.write(
        f"{script}: cannot import {missing!r} with {sys.executable} ({how}; "
        "or `source .venv/bin/activate` and run it again)\n"
    )
    raise SystemExit(2)
