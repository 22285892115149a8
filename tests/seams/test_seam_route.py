"""Route swaps in a resident engine (seams/route.py): flip, recapture, acknowledge; a failed
swap disables the registry so nothing half-installed is measured."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import seam_harness as h

from cacheon_subnet.slots import get_slot
from seams.dispatch import Registry, run
from seams.receipts import Receipts, read_receipts
from seams.route import RPC_METHOD, attach, set_route

SLOT = "norm.rmsnorm"


def registry(tmp_path):
    reg = Registry()
    reg.receipts = Receipts(str(tmp_path), "scheduler", 0)
    h.register_candidate(get_slot(SLOT), h.reference_kernel(SLOT), reg)
    reg.enabled = True
    return reg


class Runner:
    """Captures like CudaGraphRunner: one forward through the seam per capture."""

    def __init__(self, reg, fail=False):
        self.reg, self.fail, self.captures = reg, fail, 0
        self.graph_runner = object()
        self.piecewise_cuda_graph_runner = None

    def init_device_graphs(self):
        if self.fail:
            raise RuntimeError("capture failed: out of memory")
        inputs, params = h.slot_inputs(SLOT)
        run(SLOT, {"x": inputs["x"], "weight": inputs["weight"]}, params, self.reg)
        self.captures += 1
        self.graph_runner = object()


def test_swap_flips_route_recaptures_and_acknowledges(tmp_path):
    reg = registry(tmp_path)
    runner = Runner(reg)
    a1 = set_route(runner, "stock", 1, reg)
    assert reg.route == "stock" and a1["fired_during_capture"] == {SLOT: 0} and a1["graphs"] == ["decode"]
    a2 = set_route(runner, "candidate", 2, reg)
    assert reg.route == "candidate" and a2["fired_during_capture"][SLOT] == 1 and runner.captures == 2
    (rec,) = read_receipts(tmp_path)
    assert [(r["epoch"], r["route"]) for r in rec["routes"]] == [(1, "stock"), (2, "candidate")]


def test_stock_route_dispatches_nothing(tmp_path):
    reg = registry(tmp_path)
    reg.route = "stock"
    inputs, params = h.slot_inputs(SLOT)
    assert run(SLOT, {"x": inputs["x"], "weight": inputs["weight"]}, params, reg) is None
    reg.route = "candidate"
    assert run(SLOT, {"x": inputs["x"], "weight": inputs["weight"]}, params, reg) is not None


def test_failed_swap_disables_registry_records_and_raises(tmp_path):
    reg = registry(tmp_path)
    with pytest.raises(RuntimeError, match="out of memory"):
        set_route(Runner(reg, fail=True), "stock", 1, reg)
    assert reg.enabled is False and not reg.candidates
    (rec,) = read_receipts(tmp_path)
    assert any("swap to stock (epoch 1) failed" in e for e in rec["errors"])
    with pytest.raises(RuntimeError, match="registry is disabled"):
        set_route(Runner(reg), "candidate", 2, reg)


def test_bad_route_is_rejected(tmp_path):
    reg = registry(tmp_path)
    with pytest.raises(ValueError, match="route 'fast'"):
        set_route(Runner(reg), "fast", 1, reg)
    assert reg.enabled and reg.route == "candidate"


def test_attach_gives_the_scheduler_the_rpc_method(tmp_path):
    reg = registry(tmp_path)
    sched = SimpleNamespace(tp_worker=SimpleNamespace(model_runner=Runner(reg)))
    attach(sched, reg, rank=0, directory=str(tmp_path))
    getattr(sched, RPC_METHOD)(route="stock", epoch=7, nonce="a" * 32)
    assert reg.route == "stock"
    assert json.loads(next(tmp_path.glob("receipt-*.json")).read_text())["routes"][0]["epoch"] == 7
    # the acknowledgement the host reads: one answer line echoing the nonce, counts around the swap
    (ans,) = [json.loads(x) for x in (tmp_path / "answers-0.jsonl").read_text().splitlines()]
    assert ans["nonce"] == "a" * 32 and ans["kind"] == "route" and ans["ack"]["epoch"] == 7
    fired = [c.get(SLOT, {}).get("fired", 0) for c in (ans["counts_before"], ans["counts"])]
    assert fired[0] == fired[1] and ans["ack"]["fired_during_capture"] == {SLOT: 0}  # stock recapture: no call
    assert set(ans["static_before"]) == set(ans["static"]) >= {"tampered", "watched"}  # both watches (evidence.tampering)
    with pytest.raises(ValueError, match="nonce"):
        getattr(sched, RPC_METHOD)(route="candidate", epoch=8, nonce="route-8")


def test_incumbent_route_runs_only_the_crowned_kernel(tmp_path):
    """Head-to-head: B windows run the incumbent, C windows the challenger, counted apart."""
    reg = Registry()
    reg.receipts = Receipts(str(tmp_path), "scheduler", 0)
    calls: list = []
    spec = get_slot(SLOT)
    inc = h.register_candidate(
        spec, lambda **kw: (calls.append("incumbent"), h.reference_kernel(SLOT)(**kw))[1], reg, variant="inc2", add=False
    )
    ch = h.register_candidate(
        spec, lambda **kw: (calls.append("challenger"), h.reference_kernel(SLOT)(**kw))[1], reg, variant="ch", add=False
    )
    from dataclasses import replace

    reg.add(spec, replace(inc, role="incumbent"))
    reg.add(spec, ch)
    assert [c.role for c in reg.candidates[SLOT]] == ["challenger", "incumbent"]
    reg.enabled = True
    inputs, params = h.slot_inputs(SLOT)
    args = {"x": inputs["x"], "weight": inputs["weight"]}
    for route, want in (("candidate", "challenger"), ("incumbent", "incumbent"), ("stock", None)):
        reg.route = route
        calls.clear()
        got = run(SLOT, args, params, reg)
        assert (calls[-1] if calls else None) == want and (got is None) == (want is None), route


def test_tree_keeps_roles_and_rejects_unknown(tmp_path):
    import json

    from cacheon_subnet.bundle.engine_tree import TREE_FILE, build_tree, open_tree
    from cacheon_subnet.errors import BundleError

    ch, inc = h.make_bundle([SLOT], salt="ch"), h.make_bundle([SLOT], salt="inc")
    tree = build_tree(tmp_path / "t", [(ch, ch.manifest.ops)], incumbents=[(inc, inc.manifest.ops)], scan_policy=False)
    assert [(o.role, o.digest) for o in tree.ops] == [("challenger", ch.digest), ("incumbent", inc.digest)]
    doc = json.loads((tree.root / TREE_FILE).read_text())
    doc["ops"][1]["role"] = "king"
    data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    (tmp_path / "t").chmod(0o755)
    (tree.root / TREE_FILE).chmod(0o644)
    (tree.root / TREE_FILE).write_bytes(data)
    import hashlib

    with pytest.raises(BundleError, match="unknown role 'king'"):
        open_tree(tree.root, hashlib.sha256(data).hexdigest())


# --- the pristine route (seam-overhead benchmark): hooks out, SGLang's own functions back ---


class Layer:
    """Binds its forward at construction, like SGLang's CustomOp (_forward_method)."""

    def forward_cuda(self, x):
        return ("stock", x)

    def __init__(self):
        self._forward_method = self.forward_cuda


def _install_fake_hook(monkeypatch):
    import sys
    import types

    from seams import hooks

    original = Layer.__dict__["forward_cuda"]

    def wrapped(self, x):
        return ("seam", x)

    wrapped.__wrapped__ = original
    monkeypatch.setattr(Layer, "forward_cuda", wrapped)
    copy = types.ModuleType("cacheon_test_copy")
    copy.forward_cuda = wrapped  # a by-value copy HookRegistry propagated
    monkeypatch.setitem(sys.modules, copy.__name__, copy)
    monkeypatch.setattr(hooks, "INSTALLED", {"x:Layer.forward_cuda": (original, wrapped)})
    monkeypatch.setattr(hooks, "_DETACHED", [])
    monkeypatch.setattr(hooks, "pkgutil", types.SimpleNamespace(resolve_name=lambda path: Layer))
    return original, wrapped, copy


def test_pristine_route_takes_every_hook_out_and_stock_puts_them_back(tmp_path, monkeypatch):
    original, wrapped, copy = _install_fake_hook(monkeypatch)
    layer = Layer()  # constructed with the hook in place: holds a bound wrapper
    assert layer._forward_method(1) == ("seam", 1)
    reg = registry(tmp_path)
    runner = Runner(reg)
    runner.model = type("M", (), {"modules": lambda self: [layer]})()
    ack = set_route(runner, "pristine", 1, reg)
    assert ack["hooks_restored"] == 3 and ack["fired_during_capture"] == {SLOT: 0} and reg.route == "stock"
    assert Layer.__dict__["forward_cuda"] is original and copy.forward_cuda is original
    assert layer._forward_method(1) == ("stock", 1)
    ack = set_route(runner, "stock", 2, reg)
    assert ack["hooks_restored"] == -3
    assert Layer.__dict__["forward_cuda"] is wrapped and copy.forward_cuda is wrapped
    assert layer._forward_method(1) == ("seam", 1)
    ack = set_route(runner, "candidate", 3, reg)
    assert ack["hooks_restored"] == 0 and ack["fired_during_capture"][SLOT] == 1


def test_pristine_route_with_nothing_to_restore_fails_and_disables(tmp_path, monkeypatch):
    from seams import hooks

    monkeypatch.setattr(hooks, "INSTALLED", {})
    monkeypatch.setattr(hooks, "_DETACHED", [])
    reg = registry(tmp_path)
    with pytest.raises(RuntimeError, match="no hooked binding"):
        set_route(Runner(reg), "pristine", 1, reg)
    assert reg.enabled is False
