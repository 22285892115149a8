"""Red team, arena state: policy-clean bundles (tests/adversarial/arena_clean/, each passes the
static allowlist and goes through the product path, no bypass) that leave values behind in the
engine's shared tensors. A slot's `in` argument that is not graph-dynamic (a norm gain, the RoPE
cos/sin cache, expert weights) is engine state every other kernel reads; a kernel that writes into
it reaches B, B′ and a rival it shares the engine with, without ever being called there."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "arena"))

import arena_harness as h  # noqa: E402

from arena.run import RunOptions, qualify  # noqa: E402
from cacheon_subnet.bundle import load_bundle  # noqa: E402
from cacheon_subnet.policy.scan import scan_source  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "arena_clean"


@pytest.fixture
def env(tmp_path, monkeypatch):
    h.runtime_env(tmp_path, monkeypatch)
    return tmp_path


def _opts(env: Path) -> RunOptions:
    return RunOptions(
        workdir=env / "work",
        checkpoint_root=env / "ckpt",
        engine_factory="tests.arena.fake_engine:FakeEngine",
        grade_always=True,
    )


def test_corpus_is_policy_clean():
    for kernel in CORPUS.glob("*/*.py"):
        assert scan_source(kernel.read_text(), kernel.name) == [], kernel


@pytest.mark.slow
def test_incumbent_poisoning_the_shared_weight_cannot_fail_an_honest_challenger(env):
    """The crowned kernel flips the sign of the model's norm gain in place after each of its calls
    (and decodes it back for itself): its B windows are right, the honest challenger's C windows
    compute with the poisoned gain and fail quality. That would keep the crown forever. The
    watch on static inputs names the write and the route that made it: never the challenger's
    FAIL."""
    ch, inc = h.torch_bundle("honest"), load_bundle(CORPUS / "poison_shared_weight")
    r = qualify(
        h.small_config(prompts=6, output=6, cycles=2, max_noise=0.5),
        ch,
        ch.manifest.ops[0],
        _opts(env),
        incumbent=(inc, inc.manifest.ops[0]),
    )
    assert r["verdict"] == "NO_DECISION", r["reason"]
    assert "static input" in r["reason"] and "norm.rmsnorm:weight" in r["reason"], r["reason"]
    assert "incumbent" in r["reason"], r["reason"]


@pytest.mark.slow
def test_challenger_poisoning_the_baselines_weight_is_a_fail(env):
    """The same bundle as the challenger: its own outputs are right, but stock B and B′ read the
    poisoned gain (the quality anchor is wrecked, or, with a gentler poison, loosened)."""
    b = load_bundle(CORPUS / "poison_shared_weight")
    r = qualify(h.small_config(prompts=6, output=6, cycles=2, max_noise=0.5), b, b.manifest.ops[0], _opts(env))
    assert r["verdict"] == "FAIL", r["reason"]
    assert r["reason"].startswith("execution evidence:") and "static input norm.rmsnorm:weight" in r["reason"], r["reason"]


@pytest.mark.slow
def test_honest_head_to_head_reports_no_tampering(env):
    ch, inc = h.torch_bundle("ch"), h.torch_bundle("inc")
    r = qualify(
        h.small_config(prompts=6, output=6, cycles=2, max_noise=0.5),
        ch,
        ch.manifest.ops[0],
        _opts(env),
        incumbent=(inc, inc.manifest.ops[0]),
    )
    assert "static input" not in r["reason"], r["reason"]
    assert r["quality"]["verdict"] == "PASS", r["reason"]


def test_watch_copies_first_sight_defers_under_capture_and_caps_bytes(monkeypatch):
    import torch

    import seams.integrity as integ
    from cacheon_subnet.slots import get_slot

    spec = get_slot("norm.rmsnorm")
    w = torch.ones(8)
    x = torch.ones(2, 8)
    watch = integ.StaticInputs(max_bytes=64)
    monkeypatch.setattr(integ, "_capturing", lambda: True)
    watch.watch(spec, {"x": x, "weight": w})  # x is graph-dynamic: the call's data, never watched
    assert watch.report() == {"watched": 1, "tampered": [], "unwatched": []}  # the copy is made here
    monkeypatch.setattr(integ, "_capturing", lambda: False)
    w.mul_(-1)
    x.mul_(2)
    assert watch.report()["tampered"] == ["norm.rmsnorm:weight"]
    watch.watch(spec, {"x": x, "weight": torch.ones(16)})  # 32 + 64 bytes > 64: not watched, said so
    assert watch.report()["unwatched"] == ["norm.rmsnorm:weight"]


def test_tampering_is_charged_to_the_route_that_ran():
    from arena.verdict.evidence import tampering

    def ans(kind, tampered, fired=0, inc=0, route=None):
        a = {
            "kind": kind,
            "counts": {"norm.rmsnorm": {"fired": fired}, "norm.rmsnorm@incumbent": {"fired": inc}},
            "static": {"tampered": tampered, "unwatched": []},
        }
        if route:
            a["ack"] = {"route": route}
        return {"0": a}

    recs = [
        {"step": "s", "answers": {"start": ans("clock", [])}},
        {"step": "r1", "answers": {"route": ans("route", [], route="incumbent")}},
        {"step": "w1", "answers": {"before": ans("clock", []), "after": ans("clock", ["n:weight"], inc=3)}},
    ]
    mine, theirs = tampering(recs, "norm.rmsnorm")
    assert mine == [] and len(theirs) == 1 and "incumbent" in theirs[0] and "n:weight" in theirs[0]
    recs[1]["answers"]["route"]["0"]["ack"]["route"] = "candidate"
    recs[2]["answers"]["after"]["0"]["counts"]["norm.rmsnorm"]["fired"] = 2
    mine, theirs = tampering(recs, "norm.rmsnorm")
    assert theirs == [] and len(mine) == 1 and "challenger" in mine[0]


def test_a_change_made_before_a_swap_is_charged_to_the_route_swapped_out():
    """Red team 2026-12-02: a route answer's one watch ran after the swap, so whatever the old route
    wrote since the last clock answer was charged to the route swapped IN: a challenger writing just
    before a swap to the incumbent got the incumbent blamed (and retired, validator/blame.py). Each
    route answer now carries the watch taken before the swap (static_before)."""
    from arena.verdict.evidence import tampering

    def ans(kind, tampered, fired=0, inc=0, route=None, before=None):
        a = {
            "kind": kind,
            "counts": {"norm.rmsnorm": {"fired": fired}, "norm.rmsnorm@incumbent": {"fired": inc}},
            "static": {"tampered": tampered, "unwatched": []},
        }
        if route:
            a["ack"] = {"route": route}
            a["counts_before"] = a["counts"]
        if before is not None:
            a["static_before"] = {"tampered": before, "unwatched": []}
        return {"0": a}

    start = {"step": "s", "answers": {"start": ans("clock", [])}}
    # the challenger ran (route candidate), wrote, then the host swapped to the incumbent
    recs = [
        start,
        {"step": "r1", "answers": {"route": ans("route", ["n:weight"], fired=4, route="incumbent", before=["n:weight"])}},
    ]
    mine, theirs = tampering(recs, "norm.rmsnorm")
    assert theirs == [] and len(mine) == 1 and "challenger" in mine[0] and "(before)" in mine[0], (mine, theirs)
    # seen only after the swap: the new route's warm-up wrote it
    recs = [start, {"step": "r1", "answers": {"route": ans("route", ["n:weight"], inc=2, route="incumbent", before=[])}}]
    mine, theirs = tampering(recs, "norm.rmsnorm")
    assert mine == [] and len(theirs) == 1 and "incumbent" in theirs[0]
    # a route answer without the before-watch is not one seams/route.py wrote: never the incumbent's
    recs = [start, {"step": "r1", "answers": {"route": ans("route", ["n:weight"], inc=2, route="incumbent")}}]
    mine, theirs = tampering(recs, "norm.rmsnorm")
    assert theirs == [] and len(mine) == 1
