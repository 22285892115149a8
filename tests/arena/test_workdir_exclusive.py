"""Red team: two runs of one bundle at once on one host never share an arena workdir
(arena/qualifier.py exclusive_workdir)."""

from __future__ import annotations

import threading
from pathlib import Path

import arena_harness as h

import arena.qualifier as aq
from arena import qualifier_from_config
from arena.records import ArenaResult
from cacheon_subnet.bundle import load_bundle

REPO = Path(__file__).resolve().parents[2]


def test_concurrent_runs_of_one_bundle_get_their_own_workdirs(tmp_path, monkeypatch):
    """The workdir was <home>/arena/<id>/<digest>-<slot>-<variant>: two GPUs (or two Ray tasks on
    one worker host) running one digest at once (intake's swap of a later-seen earlier commit; a
    restarted validator re-dispatching while the old run lives) wrote one engine tree, one
    receipts dir and one result.json. Now each run holds a lock on its own dir."""
    monkeypatch.setenv("CACHEON_ARENA_HOME", str(tmp_path / "home"))
    gpu = qualifier_from_config(REPO / "configs" / "arena" / "dense.toml", preflight=False)
    b = load_bundle(REPO / "examples" / "norm.rmsnorm")
    op = b.manifest.ops[0]
    seen: list[Path] = []
    inside, release = threading.Barrier(4), threading.Event()  # three runs + this thread

    def fake_run(cfg, bundle, op_, opts, incumbent=None):
        seen.append(opts.workdir)
        inside.wait(timeout=10)  # all three runs are inside at once
        release.wait(timeout=10)
        return ArenaResult(
            identity=h.identity(str(opts.workdir / "result.json")),
            metric="gpu_tokens_per_s",
            verdict="NO_DECISION",
            reason="fake",
        )

    monkeypatch.setattr(aq, "run_arena", fake_run)
    runs = [threading.Thread(target=gpu.on_devices(d).qualify, args=(b, op, None)) for d in ("0", "1", "2")]
    for t in runs:
        t.start()
    inside.wait(timeout=10)
    release.set()
    for t in runs:
        t.join(timeout=10)
    assert len(seen) == 3 and len(set(seen)) == 3, seen
    assert seen[0].parent == seen[1].parent == seen[2].parent  # siblings under the arena's dir
    # once they are done, the first dir is free again (the lock dies with the run)
    seen.clear()
    inside = threading.Barrier(1)
    gpu.qualify(b, op, None)
    assert seen == [gpu.options(b, op).workdir]
