"""Process roles, end to end in fresh interpreters against a stand-in SGLang runtime.

Every scenario is one process of an engine (seam_child.py), started concurrently by one
module fixture: the driver (plugins load, no Scheduler), scheduler ranks (plugins load, the
AROUND hook on Scheduler.__init__ activates the seam before the model is built), a pristine
engine (no gate), a partial gate set, and trees that must not load (strict / non-strict).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from seam_harness import ALL_SLOTS, finish_child, make_tree, start_child, write_runtime

from seams.receipts import coverage, read_receipts
from seams.table import BINDINGS, seam_environment

pytestmark = pytest.mark.slow

NORM_SLOTS = ("norm.fused_add_rmsnorm", "norm.rmsnorm")
SCHEDULER_INIT = "sglang.srt.managers.scheduler.Scheduler.__init__"


@pytest.fixture(scope="module")
def roles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("roles")
    runtime = write_runtime(base / "runtime")
    # two bundles: norm ops in one, every other slot in the other
    tree = make_tree(base / "tree", [ALL_SLOTS[:2], ALL_SLOTS[2:]])
    elsewhere = make_tree(base / "other-tree", [ALL_SLOTS[:2]])  # a tree the host did not launch with
    packages = {o.slot: o.package for o in tree.ops}

    def env(name: str, bindings: tuple[str, ...], **extra: str) -> dict[str, str]:
        (base / name).mkdir()
        return {
            **seam_environment(bindings),
            "CACHEON_ENGINE_TREE": str(tree.root),
            "CACHEON_ENGINE_TREE_DIGEST": tree.digest,
            "CACHEON_RECEIPT_DIR": str(base / name / "receipts"),
            "CACHEON_TEST_IMPORT_LOG": str(base / name / "imports.log"),
            **extra,
        }

    plan = {
        "off": ("off", env("off", ())),
        "driver": ("driver", env("driver", BINDINGS)),
        "rank0": ("scheduler", env("rank0", BINDINGS, CACHEON_TEST_TP_RANK="0")),
        "rank1": ("scheduler", env("rank1", BINDINGS, CACHEON_TEST_TP_RANK="1")),
        "partial": ("partial", env("partial", ("norm",), CACHEON_TEST_TP_RANK="5")),
        "strict": ("failing", env("strict", ("norm", "activation"), CACHEON_ENGINE_TREE_DIGEST=elsewhere.digest)),
        "lenient": (
            "failing",
            env("lenient", ("norm", "activation"), CACHEON_ENGINE_TREE_DIGEST=elsewhere.digest, CACHEON_SEAM_STRICT="0"),
        ),
        # another plugin already hooked the chokepoint: HookRegistry skips targets it has patched
        "contended": (
            "failing",
            env("contended", ("norm",), CACHEON_TEST_OTHER_PLUGIN_TARGET="sglang.srt.layers.layernorm.RMSNorm.forward_cuda"),
        ),
    }
    for _, e in plan.values():
        Path(e["CACHEON_RECEIPT_DIR"]).mkdir()
    # both scheduler ranks write into one receipt dir, like the ranks of one engine
    plan["rank1"][1]["CACHEON_RECEIPT_DIR"] = plan["rank0"][1]["CACHEON_RECEIPT_DIR"]
    procs = {name: start_child(runtime, scenario, e) for name, (scenario, e) in plan.items()}
    results = {name: finish_child(p) for name, p in procs.items()}
    for name, r in results.items():
        assert "error" not in r, f"{name}: {r['error']}\n{r['_stderr']}"
        assert r["_rc"] == 0, f"{name}: rc {r['_rc']}\n{r['_stderr']}"
        imports = Path(plan[name][1]["CACHEON_TEST_IMPORT_LOG"])
        r["imports_log"] = imports.read_text().splitlines() if imports.exists() else []
        r["receipts"] = read_receipts(plan[name][1]["CACHEON_RECEIPT_DIR"])
    return {"results": results, "packages": packages, "tree": tree}


def _no_candidate_code(r: dict) -> None:
    s = r["state"]
    assert s["import_attempts"] == [] and s["cacheon_modules"] == [], "contribution code was imported"
    assert r["imports_log"] == [], "candidate module body ran"
    assert s["custom_ops"] == [] and s["candidates"] == [] and not s["registry_enabled"]


def test_no_gate_does_nothing(roles: dict) -> None:
    r = roles["results"]["off"]
    s = r["state"]
    _no_candidate_code(r)
    assert s["hook_targets"] == [] and not s["activate_done"], "plugin.load registered hooks without a gate"
    assert not any(s["hooked"].values())
    assert r["receipts"] == []
    assert r["checks"] == {"rmsnorm": [], "fused_add_rmsnorm": []}  # the model still answers, via stock
    assert s["stock_calls"] == ["rmsnorm", "fused_add_rmsnorm"]


def test_driver_never_loads_candidates(roles: dict) -> None:
    r = roles["results"]["driver"]
    s = r["state"]
    _no_candidate_code(r)
    assert s["hook_targets"] == [SCHEDULER_INIT] and r["scheduler_init_hooked"]  # armed, never triggered
    assert not s["activate_done"] and s["receipts_role"] is None
    assert not any(s["hooked"].values()), "adapters installed in the driver"
    assert r["receipts"] == [], "the driver wrote a receipt"
    assert r["checks"] == {"rmsnorm": [], "fused_add_rmsnorm": []}
    assert s["stock_calls"] == ["rmsnorm", "fused_add_rmsnorm"]


@pytest.mark.parametrize("rank", [0, 1])
def test_scheduler_rank_activates_and_routes(roles: dict, rank: int) -> None:
    r = roles["results"][f"rank{rank}"]
    s = r["state"]
    assert s["registry_enabled"] and s["registry_strict"]
    assert s["candidates"] == sorted(ALL_SLOTS)
    assert s["candidate_packages"] == sorted(set(roles["packages"].values()))
    assert len(s["custom_ops"]) == len(ALL_SLOTS) and all("::" in o for o in s["custom_ops"])
    assert s["hooked"] and all(s["hooked"].values()), s["hooked"]
    assert (s["receipts_role"], s["receipts_rank"]) == ("scheduler", rank)
    assert s["hook_targets"][-1] == SCHEDULER_INIT and len(s["hook_targets"]) == 1 + len(BINDINGS)
    # every chokepoint reached through SGLang's own call path (bound layers, by-value imports,
    # captured backend attrs, call-time lookups) ran the candidate and returned what SGLang expects
    assert set(r["checks"]) == {"rmsnorm", "fused_add_rmsnorm", "silu_and_mul", "rope", "decode", "topk", "experts"}
    assert all(p == [] for p in r["checks"].values()), r["checks"]
    assert s["stock_calls"] == [], "stock kernels ran although a candidate was eligible"
    for slot in ALL_SLOTS:
        c = r["counts"][slot]
        assert (c["active"], c["fired"], c["completed"], c["fallback"], c["load_failed"]) == (1, 1, 1, 0, 0), (slot, c)
    assert len(r["imports_log"]) == 2  # each contribution module imported once


def test_scheduler_receipts_cover_both_ranks(roles: dict) -> None:
    receipts = roles["results"]["rank0"]["receipts"]  # the shared receipt dir of the engine
    assert sorted((x["role"], x["rank"]) for x in receipts) == [("scheduler", 0), ("scheduler", 1)]
    for x in receipts:
        assert set(x["slots"]) == set(ALL_SLOTS) and x["errors"] == []
        assert all(x["slots"][s]["active"] == 1 for s in ALL_SLOTS)
    cov = coverage(receipts, ALL_SLOTS, [0, 1])
    assert cov.ok, cov.problems
    assert not coverage(receipts, ALL_SLOTS, [0, 1, 2]).ok
    assert not coverage(receipts, ALL_SLOTS, [0]).ok


def test_only_selected_bindings_load(roles: dict) -> None:
    r = roles["results"]["partial"]
    s = r["state"]
    norm_pkg = roles["packages"]["norm.rmsnorm"]
    assert s["candidates"] == sorted(NORM_SLOTS) and s["registry_enabled"]
    assert s["cacheon_modules"] == [norm_pkg, f"{norm_pkg}.kernel"], "a bundle with no selected op was imported"
    assert len(s["custom_ops"]) == 2
    assert s["hooked"]["sglang.srt.layers.layernorm:RMSNorm.forward_cuda"]
    assert not s["hooked"]["sglang.srt.layers.activation:SiluAndMul.forward_cuda"]
    assert (s["receipts_role"], s["receipts_rank"]) == ("scheduler", 5)  # tp_rank passed by keyword
    assert all(p == [] for p in r["checks"].values()), r["checks"]
    assert s["stock_calls"] == ["silu_and_mul"]  # the unselected chokepoint stays stock
    [rec] = r["receipts"]
    assert (rec["role"], rec["rank"]) == ("scheduler", 5) and set(rec["slots"]) == set(NORM_SLOTS)
    assert coverage(r["receipts"], NORM_SLOTS, [5]).ok


def test_strict_tree_mismatch_stops_the_engine(roles: dict) -> None:
    r = roles["results"]["strict"]
    s = r["state"]
    assert r["raised"] and r["raised"].startswith("BundleError") and "[tree-digest]" in r["raised"], r["raised"]
    _no_candidate_code(r)
    assert not any(s["hooked"].values()), "adapters installed although loading failed"
    assert "checks" not in r and s["stock_calls"] == []  # the Scheduler (and model) were never built
    [rec] = r["receipts"]
    slots = {"norm.rmsnorm", "norm.fused_add_rmsnorm", "activation.silu_and_mul"}
    assert rec["role"] == "scheduler" and set(rec["slots"]) == slots
    assert all(c["load_failed"] == 1 and c["active"] == 0 for c in rec["slots"].values())
    assert rec["errors"] and all("tree-digest" in e for e in rec["errors"])
    problems = coverage(r["receipts"], sorted(slots), [0]).problems
    assert any("'load_failed'" in p for p in problems) and any("no 'active'" in p for p in problems)


def test_lenient_tree_mismatch_serves_stock(roles: dict) -> None:
    r = roles["results"]["lenient"]
    s = r["state"]
    assert r["raised"] is None
    _no_candidate_code(r)
    assert not s["registry_strict"] and not any(s["hooked"].values())
    assert r["checks"] == {"rmsnorm": [], "fused_add_rmsnorm": []}
    assert s["stock_calls"] == ["rmsnorm", "fused_add_rmsnorm"]
    [rec] = r["receipts"]
    assert all(c["load_failed"] == 1 and c["active"] == 0 and c["fired"] == 0 for c in rec["slots"].values())
    assert not coverage(r["receipts"], ["norm.rmsnorm"], [0]).ok


def test_chokepoint_hooked_by_another_plugin_fails_closed(roles: dict) -> None:
    """The released HookRegistry silently skips a target that is already patched; install_hooks
    must notice that the seam is not in place instead of reporting an active candidate."""
    r = roles["results"]["contended"]
    s = r["state"]
    assert r["raised"] == (
        "RuntimeError: seam hook on sglang.srt.layers.layernorm:RMSNorm.forward_cuda was not "
        "applied (HookRegistry logged the reason)"
    ), r["raised"]
    assert not s["registry_enabled"] and s["candidates"] == []
    assert "checks" not in r and s["stock_calls"] == []
    [rec] = r["receipts"]
    assert set(rec["slots"]) == set(NORM_SLOTS)
    assert all(c["load_failed"] == 1 and c["active"] == 0 for c in rec["slots"].values())
