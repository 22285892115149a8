"""Qualifiers for the Ray tests, in a module Ray's workers can import (not a test module)."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, replace
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
        tmp = d / f".{bundle.digest[:12]}-{n}.tmp"  # atomic: the test reads the pid as soon as the name exists
        tmp.write_text(str(os.getpid()))  # (CI 2026-12-03 read an empty marker: int('') and a hung worker)
        os.replace(tmp, d / f"{bundle.digest[:12]}-{n}")
        if n == 0 and (d / "kill-first").exists():
            time.sleep(120)  # killed here
        return super().qualify(bundle, op, incumbent)


REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class FakeEngineArena:
    """The real arena (host, driver, seams, verdicts) on the fake engine, bound to a device.
    runtime: the stand-in SGLang's root (arena_harness.runtime_env), put on the engines' path by
    the worker itself (a Ray worker does not inherit the test's environment)."""

    root: str
    runtime: str = ""
    devices: str | None = None
    marker_dir: str = ""  # set: the first attempt of a bundle marks its pid (the Ray test kills it)
    arena_id: str = "fake-engine-arena"
    label: str = "fake-engine"

    def on_devices(self, d: str) -> FakeEngineArena:
        return replace(self, devices=d)

    def qualify(self, bundle, op, incumbent):
        sys.path.insert(0, str(REPO / "tests" / "arena"))
        import arena_harness as h

        from arena.qualifier import to_qualify_result
        from arena.run import RunOptions, run_arena

        if self.runtime:
            os.environ["PYTHONPATH"] = os.pathsep.join([self.runtime, os.environ.get("PYTHONPATH", "")])
            os.environ["TRITON_INTERPRET"] = "1"
        work = Path(self.root) / f"gpu{self.devices}-{bundle.digest[:8]}"
        if self.marker_dir:
            d = Path(self.marker_dir)
            n = len(list(d.glob(f"{bundle.digest[:12]}-*")))
            (d / f"{bundle.digest[:12]}-{n}").write_text(f"{os.getpid()} {work}-{n}")
            work = Path(f"{work}-{n}")
        opts = RunOptions(
            workdir=work,
            checkpoint_root=Path(self.root) / "ckpt",
            engine_factory="tests.arena.fake_engine:FakeEngine",
            devices=self.devices,
        )
        return to_qualify_result(run_arena(h.small_config(), bundle, op, opts), op, incumbent, self.arena_id, self.label)
