"""activate_scheduler in process, on its failure paths: a contribution that fails while the tree is
being loaded leaves nothing half-installed (registry disabled and emptied, load_failed receipts),
strict mode re-raises, and activation runs once per process."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
from seam_harness import bundle_files, make_bundle

from cacheon_subnet.bundle.archive import bundle_from_files
from cacheon_subnet.bundle.engine_tree import build_tree
from seams import activate, controls
from seams.dispatch import Registry
from seams.receipts import read_receipts
from seams.table import seam_environment

NORM_SLOTS = ("norm.fused_add_rmsnorm", "norm.rmsnorm")


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """Fresh per-process activation state; sys.path / sys.modules restored afterwards."""
    monkeypatch.setattr(activate, "_state", {})
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for name in [m for m in sys.modules if m.startswith("cacheon_c_")]:
        del sys.modules[name]


def _env(tmp_path: Path, strict: bool) -> dict[str, str]:
    salt = uuid.uuid4().hex  # custom-op names derive from digests and must be new in this process
    good = make_bundle(NORM_SLOTS, salt=salt + "good")
    files = bundle_files(["rope.neox"], salt=salt + "bad")
    files["kernel.py"] += b"\nraise ImportError('this kernel needs a library the rank does not have')\n"
    bad = bundle_from_files(files)
    tree = build_tree(tmp_path / "tree", [(good, good.manifest.ops), (bad, bad.manifest.ops)], scan_policy=False)
    assert [o.slot for o in tree.ops] == [*NORM_SLOTS, "rope.neox"]  # the failing op loads last
    (tmp_path / "receipts").mkdir()
    return {
        **seam_environment(("norm", "rope")),
        "CACHEON_ENGINE_TREE": str(tree.root),
        "CACHEON_ENGINE_TREE_DIGEST": tree.digest,
        "CACHEON_RECEIPT_DIR": str(tmp_path / "receipts"),
        "CACHEON_SEAM_STRICT": "1" if strict else "0",
    }


def _load_failed(tmp_path: Path) -> None:
    [rec] = read_receipts(tmp_path / "receipts")
    assert (rec["role"], rec["rank"]) == ("scheduler", 3)
    assert set(rec["slots"]) == {*NORM_SLOTS, "rope.neox"}
    assert all(c["load_failed"] == 1 and c["active"] == 0 for c in rec["slots"].values())
    assert any("ImportError" in e for e in rec["errors"])


def test_failure_midway_leaves_nothing_installed(tmp_path: Path, isolated: None) -> None:
    env = _env(tmp_path, strict=False)
    reg = Registry()
    assert activate.activate_scheduler(3, reg, env) is False
    assert not reg.enabled and reg.candidates == {}, "candidates registered before the failure survived"
    _load_failed(tmp_path)
    first = reg.receipts
    assert activate.activate_scheduler(3, reg, env) is False  # once per process: no second attempt
    assert reg.receipts is first and not reg.enabled
    assert read_receipts(tmp_path / "receipts")[0]["slots"]["norm.rmsnorm"]["load_failed"] == 1


def test_strict_failure_midway_raises(tmp_path: Path, isolated: None) -> None:
    env = _env(tmp_path, strict=True)
    reg = Registry()
    with pytest.raises(ImportError, match="needs a library"):
        activate.activate_scheduler(3, reg, env)
    assert not reg.enabled and reg.candidates == {}
    _load_failed(tmp_path)


def test_no_gate_is_pass_through(tmp_path: Path, isolated: None) -> None:
    reg = Registry()
    assert activate.activate_scheduler(0, reg, {**seam_environment(()), "CACHEON_RECEIPT_DIR": str(tmp_path)}) is False
    assert reg.receipts is None and list(tmp_path.iterdir()) == []
    for stale in ("true", "yes", "01", " 1"):  # only the exact value the host writes arms a gate
        assert activate.selected_adapters({"CACHEON_SEAM_NORM": stale}) == ()


def test_collective_load_failure_stops_even_in_serving_mode(tmp_path: Path, isolated: None) -> None:
    """All-or-none: a rank that cannot load a collective candidate must not run stock while its
    peers run the candidate's communication."""
    files = bundle_files(["collective.all_reduce"], salt=uuid.uuid4().hex)
    files["kernel.py"] += b"\nraise ImportError('no NCCL symbols on this rank')\n"
    bad = bundle_from_files(files)
    tree = build_tree(tmp_path / "tree", [(bad, bad.manifest.ops)], scan_policy=False)
    (tmp_path / "receipts").mkdir()
    env = {
        **seam_environment(("collective_all_reduce",)),
        "CACHEON_ENGINE_TREE": str(tree.root),
        "CACHEON_ENGINE_TREE_DIGEST": tree.digest,
        "CACHEON_RECEIPT_DIR": str(tmp_path / "receipts"),
        "CACHEON_SEAM_STRICT": "0",
    }
    reg = Registry()
    with pytest.raises(ImportError, match="no NCCL symbols"):
        activate.activate_scheduler(1, reg, env)
    assert not reg.enabled


def test_stock_as_candidate_control(tmp_path: Path, isolated: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The arena's role-bias control: the stock kernel itself in the candidate route, host-set only."""
    from seam_harness import reference_kernel

    import seams.stock as stock

    (tmp_path / "receipts").mkdir()
    env = {
        **seam_environment(("norm",)),
        "CACHEON_RECEIPT_DIR": str(tmp_path / "receipts"),
        "CACHEON_STOCK_AS_CANDIDATE": "rope.neox",
    }
    with pytest.raises(RuntimeError, match="no armed adapter serves this slot"):
        activate.activate_scheduler(0, Registry(), env)
    monkeypatch.setattr(activate, "_state", {})
    monkeypatch.setattr(stock, "stock_kernel", lambda slot: (None, "stock kernel unavailable: no SGLang"))
    with pytest.raises(RuntimeError, match="stock-as-candidate norm.rmsnorm: stock kernel unavailable"):
        activate.activate_scheduler(0, Registry(), dict(env, CACHEON_STOCK_AS_CANDIDATE="norm.rmsnorm"))
    monkeypatch.setattr(stock, "stock_kernel", lambda slot: (reference_kernel(slot), slot))
    reg = Registry()
    controls.register_stock_controls(("norm.rmsnorm",), ["norm.rmsnorm"], reg)
    [cand] = reg.candidates["norm.rmsnorm"]
    assert (cand.variant, cand.package) == ("stock-control", "stock")


def _route_times(reg: Registry, routes: tuple[str, ...]) -> tuple[dict[str, float], dict[str, object]]:
    """Seconds and output of one norm.rmsnorm call through the seam under each route."""
    import time

    from seam_harness import slot_inputs

    from seams.dispatch import run

    inputs, params = slot_inputs("norm.rmsnorm")
    args = {"x": inputs["x"], "weight": inputs["weight"]}
    took, outs = {}, {}
    for route in routes:
        reg.route = route
        t = time.perf_counter()
        outs[route] = run("norm.rmsnorm", args, params, reg)
        took[route] = time.perf_counter() - t
    return took, outs


def test_handicap_control_slows_only_the_baseline_route(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The known-speedup control: the incumbent route runs stock + a fixed spin, the candidate
    route plain stock; malformed values fail closed."""

    from seam_harness import reference_kernel

    import seams.stock as stock

    for bad in ("norm.rmsnorm", "norm.rmsnorm:abc", "norm.rmsnorm:0", ":50", "norm.rmsnorm:1e9"):
        with pytest.raises(RuntimeError, match="CACHEON_HANDICAP"):
            controls.handicap({"CACHEON_HANDICAP": bad})
    assert controls.handicap({}) is None
    assert controls.handicap({"CACHEON_HANDICAP": "norm.rmsnorm:150"}) == ("norm.rmsnorm", 150.0)
    with pytest.raises(RuntimeError, match="no armed adapter"):
        controls.register_handicap(("rope.neox", 10.0), ["norm.rmsnorm"], Registry())
    monkeypatch.setattr(stock, "stock_kernel", lambda slot: (reference_kernel(slot), slot))
    reg = Registry()
    reg.enabled = True
    controls.register_handicap(("norm.rmsnorm", 20_000.0), ["norm.rmsnorm"], reg)
    assert [(c.variant, c.role) for c in reg.candidates["norm.rmsnorm"]] == [
        ("stock-control", "challenger"),
        ("stock-handicap", "incumbent"),
    ]
    took, outs = _route_times(reg, ("incumbent", "candidate"))
    assert all(o is not None for o in outs.values())
    assert took["incumbent"] >= 0.02 > took["candidate"]


def test_slowdown_control_slows_only_the_candidate_route(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The known-loss control (issue 19: how soon a clear loser is decided): the candidate route
    runs stock + a fixed spin, the baseline route plain stock; malformed values fail closed."""

    from seam_harness import reference_kernel

    import seams.stock as stock

    for bad in ("norm.rmsnorm", "norm.rmsnorm:-5", ":50"):
        with pytest.raises(RuntimeError, match="CACHEON_SLOWDOWN"):
            controls.slowdown({"CACHEON_SLOWDOWN": bad})
    assert controls.slowdown({"CACHEON_SLOWDOWN": "norm.rmsnorm:80"}) == ("norm.rmsnorm", 80.0)
    with pytest.raises(RuntimeError, match="no armed adapter"):
        controls.register_slowdown(("rope.neox", 10.0), ["norm.rmsnorm"], Registry())
    monkeypatch.setattr(stock, "stock_kernel", lambda slot: (reference_kernel(slot), slot))
    reg = Registry()
    reg.enabled = True
    controls.register_slowdown(("norm.rmsnorm", 20_000.0), ["norm.rmsnorm"], reg)
    assert [(c.variant, c.role) for c in reg.candidates["norm.rmsnorm"]] == [("stock-slowdown", "challenger")]
    took, outs = _route_times(reg, ("stock", "candidate"))
    assert outs["candidate"] is not None
    assert took["candidate"] >= 0.02 > took["stock"]
