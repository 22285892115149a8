"""`cacheon arena warm` and the default seed caches: a validator that set no JIT cache dirs still
starts later engines warm, and no engine that loaded contribution code ever writes a seed."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import arena_harness as h  # noqa: E402
from fake_engine import FLASHINFER_OPS  # noqa: E402

from arena.engine.home import CACHE_KEYS, seed_caches  # noqa: E402
from arena.engine.warm import warm, warm_steps  # noqa: E402


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.delenv("CACHEON_JIT_SEEDS", raising=False)
    for k in CACHE_KEYS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("CACHEON_ARENA_HOME", str(tmp_path / "arena-home"))
    return tmp_path / "arena-home"


def test_default_seeds_are_validator_owned_and_the_operators_choice_wins(home, monkeypatch, tmp_path):
    seeds = seed_caches()
    assert set(seeds) == set(CACHE_KEYS)
    assert Path(seeds["FLASHINFER_WORKSPACE_BASE"]).name == "flashinfer"  # FlashInfer's JIT workspace: seeded too
    assert all(Path(v).parent.parent == home / "jit" for v in seeds.values())
    assert len({Path(v).parent.name for v in seeds.values()}) == 1  # one generation (pins, layout)
    assert stat.S_IMODE((home / "jit").stat().st_mode) == 0o700  # engines never see it: the host copies
    mine = tmp_path / "my-triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(mine))
    assert seed_caches()["TRITON_CACHE_DIR"] == str(mine)
    monkeypatch.setenv("CACHEON_JIT_SEEDS", "off")
    assert seed_caches() == {}


def test_a_pin_move_or_layout_bump_starts_new_seeds(home, monkeypatch):
    import arena.engine.home as ah

    first = ah.seed_generation()
    monkeypatch.setattr("cacheon_subnet.pins.SGLANG_PIN", "9.9.9")
    moved = ah.seed_generation()
    monkeypatch.setattr(ah, "SEED_LAYOUT", ah.SEED_LAYOUT + 1)
    assert len({first, moved, ah.seed_generation()}) == 3


def test_warm_steps_have_the_timed_windows_form_and_a_teacher_step():
    cfg = h.small_config()
    gen, teach = warm_steps(cfg)
    w = cfg.workload
    assert gen["op"] == "generate" and gen["top_k"] == cfg.quality.top_k and gen["max_new_tokens"] == w.output_len
    assert gen["prompts"]["n"] == w.prompts_per_window and gen["prompts"]["len"] == w.input_len
    assert teach["op"] == "teacher" and teach["sequences"]
    assert all(len(s["prompt"]) == w.input_len and len(s["cont"]) == w.output_len for s in teach["sequences"])
    assert gen["prompts"]["seed"] != warm_steps(cfg)[0]["prompts"]["seed"]  # no verdict's prompts


@pytest.mark.slow
def test_warm_fills_the_seeds_and_a_candidates_engine_never_does(home, tmp_path, monkeypatch):
    h.runtime_env(tmp_path, monkeypatch)
    monkeypatch.setenv("PYTHONPATH", f"{h.REPO}:{__import__('os').environ['PYTHONPATH']}")
    factory = "tests.arena.fake_engine:CompilingEngine"
    res = warm(h.small_config(), tmp_path / "warm", tmp_path / "ckpt", engine_factory=factory)
    assert res.ok, res.error
    triton = Path(res.caches["TRITON_CACHE_DIR"])
    fi = Path(res.caches["FLASHINFER_WORKSPACE_BASE"]) / FLASHINFER_OPS
    assert (triton / "k" / "pristine.cubin").read_bytes() == b"compiled"
    assert (fi / "pristine.cubin").read_bytes() == b"compiled"  # FlashInfer's JIT build: seeded like Triton's
    assert res.files_after - res.files_before == 4 and [s.name for s in res.stages] == ["warm"]
    from arena.engine.jit_copies import JIT_INSIDE

    # the engine saw its cache at the one fixed path, whatever its scratch: path-keyed builds hit
    assert (triton / "k" / "pristine.cubin.path").read_text() == JIT_INSIDE + "/triton"
    assert (fi / "pristine.cubin.path").read_text() == JIT_INSIDE + "/flashinfer"
    again = warm(h.small_config(), tmp_path / "warm2", tmp_path / "ckpt", engine_factory=factory)
    assert again.ok and again.files_after == again.files_before  # nothing new: every file was there
    (triton / "k" / "pristine.cubin").unlink()
    (fi / "pristine.cubin").unlink()
    from arena.run import RunOptions, qualify

    opts = RunOptions(workdir=tmp_path / "work", checkpoint_root=tmp_path / "ckpt", engine_factory=factory)
    bundle = h.torch_bundle("warm")
    r = qualify(h.small_config(), bundle, bundle.manifest.ops[0], opts)
    assert r["stages"]["resident"]["rc"] == 0, r["reason"]
    assert not (triton / "k" / "with-contribution.cubin").exists()  # the candidate's engine wrote nothing back
    assert not (fi / "with-contribution.cubin").exists()  # nor into FlashInfer's seed
    assert (triton / "k" / "pristine.cubin").exists() == ("teacher" in r["stages"])  # T did
    assert (fi / "pristine.cubin").exists() == ("teacher" in r["stages"])


def test_warm_refuses_to_run_with_seeding_off(home, monkeypatch, tmp_path):
    monkeypatch.setenv("CACHEON_JIT_SEEDS", "off")
    res = warm(h.small_config(), tmp_path / "warm", tmp_path / "ckpt", engine_factory="tests.arena.fake_engine:FakeEngine")
    assert not res.ok and "CACHEON_JIT_SEEDS=off" in res.error and not res.stages


@pytest.mark.slow
def test_cli_warm_without_a_gpu_is_a_usage_error(tmp_path):
    import subprocess

    p = subprocess.run(
        [sys.executable, "-m", "cacheon_subnet", "arena", "warm", "--config", str(h.DENSE)],
        capture_output=True,
        text=True,
        cwd=h.REPO,
        timeout=120,
    )
    assert p.returncode == 2 and "cacheon arena warm:" in p.stderr, p.stderr[-800:]


@pytest.mark.slow
def test_maybe_warm_runs_only_on_empty_seeds(home, tmp_path, monkeypatch):
    from arena.engine.warm import maybe_warm

    h.runtime_env(tmp_path, monkeypatch)
    monkeypatch.setenv("PYTHONPATH", f"{h.REPO}:{__import__('os').environ['PYTHONPATH']}")
    factory = "tests.arena.fake_engine:CompilingEngine"
    first = maybe_warm(h.small_config(), engine_factory=factory)
    assert first is not None and first.ok and first.files_after > 0
    assert maybe_warm(h.small_config(), engine_factory=factory) is None  # warm already: no engine started
    monkeypatch.setenv("CACHEON_JIT_SEEDS", "off")
    assert maybe_warm(h.small_config(), engine_factory=factory) is None


def test_validator_start_up_warm_never_stops_the_validator(monkeypatch):
    import arena.engine.warm as aw
    from cacheon_subnet import lifecycle
    from cacheon_subnet.validator.commands import _warm_seeds

    class Log:
        def __init__(self):
            self.events = []

        def info(self, event, **kw):
            self.events.append(event)

        warning = info

    log = Log()
    monkeypatch.setattr(aw, "maybe_warm", lambda cfg: (_ for _ in ()).throw(RuntimeError("no GPU")))
    assert _warm_seeds(object(), log) == "failed" and log.events == ["arena.warm_failed"]
    monkeypatch.setattr(aw, "maybe_warm", lambda cfg: (_ for _ in ()).throw(lifecycle.Interrupted("stop")))
    assert _warm_seeds(object(), log) == "interrupted"
    monkeypatch.setattr(aw, "maybe_warm", lambda cfg: None)
    assert _warm_seeds(object(), log) == "skipped"
