"""Qualifiers for the Ray tests, in a module Ray's workers can import (not a test module)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from validator_fakes import FakeQualifier


@dataclass(frozen=True)
class DiesOnceQualifier(FakeQualifier):
    """The first attempt of every bundle writes its worker's pid and hangs (the test SIGKILLs
    that worker mid-job); any later attempt finishes. Counts attempts per bundle in marker_dir."""

    marker_dir: str = ""

    def qualify(self, bundle, op, incumbent):
        d = Path(self.marker_dir)
        n = len(list(d.glob(f"{bundle.digest[:12]}-*")))
        (d / f"{bundle.digest[:12]}-{n}").write_text(str(os.getpid()))
        if n == 0 and (d / "kill-first").exists():
            time.sleep(120)  # killed here
        return super().qualify(bundle, op, incumbent)
