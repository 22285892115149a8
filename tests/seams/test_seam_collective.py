"""Collective seam rows: the static canary on real releases, the adapters on a real two-rank gloo
group (routing, returned shapes, equality with the slot reference), stock-only cases, and the
all-or-none rule: a failure after routing raises on every rank, never falls back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from compat_sources import delete_def, mutable_copy, other_tree, pinned_kernel, pinned_sglang, pinned_tree, rename_param  # noqa: F401
from seam_harness import HERE, REPO

from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.compare import compare
from seams.activate import adapter_hooks
from seams.adapters import collective
from seams.compat import FAIL, OK, _judge, op_schema_params, static_check
from seams.dispatch import Registry, SeamError, guarded
from seams.stock import stock_kernel
from seams.table import by_binding

PARALLEL_STATE = "sglang/srt/distributed/parallel_state.py"
FUSION = "sglang/srt/layers/flashinfer_comm_fusion.py"
ROWS = {
    "collective_all_reduce": ("collective.all_reduce", "GroupCoordinator.all_reduce"),
    "collective_ar_rmsnorm": ("collective.ar_residual_rmsnorm", "flashinfer_allreduce_residual_rmsnorm"),
}


def _rows(tree: Path) -> dict[str, Any]:
    return {r.name: r for r in static_check(tree).rows if r.name in ROWS}


# ---- table and canary -------------------------------------------------------------------------
def test_rows_and_hooks() -> None:
    for binding, (slot, symbol) in ROWS.items():
        row = by_binding(binding)
        assert row.slots == (slot,) and row.symbol == symbol and row.patch_points == (row.target,)
        assert set(adapter_hooks(row)) == set(row.patch_points)
        assert row.env_gate == f"CACHEON_SEAM_{binding.upper()}"


def test_static_canary_ok_on_pinned_and_previous_release(pinned_tree: Path, other_tree: Path) -> None:
    for tree in (pinned_tree, other_tree):
        rows = _rows(tree)
        assert {n: r.status for n, r in rows.items()} == {n: OK for n in ROWS}, rows
    assert rows["collective_all_reduce"].detail == "GroupCoordinator.all_reduce(self, input_)"
    assert rows["collective_ar_rmsnorm"].detail.startswith(
        "flashinfer_allreduce_residual_rmsnorm(input_tensor, residual, weight, eps=, max_token_num="
    )


def test_static_canary_names_broken_collective_rows(tmp_path: Path, pinned_tree: Path) -> None:
    mutant = mutable_copy(pinned_tree, tmp_path / "mutant")
    rename_param(mutant / PARALLEL_STATE, "GroupCoordinator.all_reduce", "input_", "tensor")
    delete_def(mutant / FUSION, "flashinfer_allreduce_residual_rmsnorm")
    rows = _rows(mutant)
    assert (
        rows["collective_all_reduce"].status == FAIL
        and "renamed 'input_' -> 'tensor'" in rows["collective_all_reduce"].detail
    )
    assert rows["collective_ar_rmsnorm"].status == FAIL and "not defined" in rows["collective_ar_rmsnorm"].detail


def test_runtime_canary_reads_custom_op_schemas() -> None:
    """At runtime the fusion entry is `torch.ops.sglang.<name>` (register_custom_op), whose Python
    signature is (*args, **kwargs); the canary reads the op schema instead."""
    row = by_binding("collective_ar_rmsnorm")
    ns = f"cacheon_canary_{os.getpid()}"

    def define(name: str, first: str) -> Any:
        lib = torch.library.Library(ns, "FRAGMENT")
        lib.define(
            f"{name}(Tensor {first}, Tensor residual, Tensor weight, float eps=1e-06, int max_token_num=2048, "
            "bool? use_oneshot=None, bool trigger_completion_at_end=False, bool fp32_acc=False, "
            "bool use_attn_tp_group=True) -> (Tensor, Tensor)"
        )
        _libs.append(lib)
        return getattr(getattr(torch.ops, ns), name)

    good = op_schema_params(define("ok", "input_tensor"))
    assert good is not None and _judge(row.symbol, good, (row.params, False))[0] == OK
    bad = op_schema_params(define("renamed", "input"))
    status, detail = _judge(row.symbol, bad, (row.params, False))
    assert status == FAIL and "renamed 'input_tensor' -> 'input'" in detail
    assert op_schema_params(len) is None


_libs: list[Any] = []


# ---- strictness, stock-only cases --------------------------------------------------------------
@pytest.mark.parametrize("slot", [s for s, _ in ROWS.values()])
def test_collectives_are_strict_even_in_serving_mode(slot: str) -> None:
    assert stock_kernel(slot)[0] is None, "a stock binding would give guarded() a fallback to take"
    spec = get_slot(slot)

    def boom(**kw: Any) -> None:
        raise RuntimeError("candidate failed")

    body = guarded(spec, boom, Registry(enabled=True, strict=False), stock_kernel(slot)[0])
    with pytest.raises(SeamError, match="strict"):
        body(**{a.name: torch.zeros(2, 2) for a in spec.args}, group=None)


class _Original:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        self.calls.append((args, kwargs))
        return "stock"


def _coord(**kw: Any) -> SimpleNamespace:
    base = dict(
        unique_name="tp:0",
        world_size=2,
        device_group=None,
        pynccl_comm=None,
        hpu_communicator=None,
        xpu_communicator=None,
        npu_communicator=None,
    )
    return SimpleNamespace(**{**base, **kw})


@pytest.mark.parametrize("case", ["world of one", "cpu tensor", "3-D", "hpu communicator", "symmetric memory"])
def test_all_reduce_stock_only_cases(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.ones(3, 8)
    coord = _coord()
    if case != "cpu tensor":
        monkeypatch.setattr(collective, "DEVICES", ("cpu",))
    if case == "world of one":
        coord.world_size = 1
    elif case == "3-D":
        x = x.view(1, 3, 8)
    elif case == "hpu communicator":
        coord.hpu_communicator = SimpleNamespace(disabled=False)
    elif case == "symmetric memory":
        coord.pynccl_comm, coord.is_symmetric_memory_enabled = object(), lambda: True
    monkeypatch.setattr("seams.adapters.collective.run", lambda *a, **k: pytest.fail("routed a stock-only call"))
    orig = _Original()
    assert collective._all_reduce_around(orig, coord, x) == "stock" and orig.calls == [((coord, x), {})]


@pytest.mark.parametrize("case", ["no parallel_state", "too many tokens", "world of one"])
def test_ar_rmsnorm_stock_only_cases(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collective, "DEVICES", ("cpu",))
    coord = _coord(world_size=1 if case == "world of one" else 2)
    ps = None if case == "no parallel_state" else SimpleNamespace(get_attn_tp_group=lambda: coord)
    monkeypatch.setitem(collective._state, "ps", ps)
    monkeypatch.setattr("seams.adapters.collective.run", lambda *a, **k: pytest.fail("routed a stock-only call"))
    x, r, w = torch.ones(4, 8), torch.ones(4, 8), torch.ones(8)
    orig = _Original()
    got = collective._ar_rmsnorm_around(
        orig, input_tensor=x, residual=r, weight=w, eps=1e-5, max_token_num=2 if case == "too many tokens" else 2048
    )
    assert got == "stock" and len(orig.calls) == 1
    assert orig.calls[0][1] == dict(
        eps=1e-5,
        max_token_num=2 if case == "too many tokens" else 2048,
        use_oneshot=None,
        trigger_completion_at_end=False,
        fp32_acc=False,
        use_attn_tp_group=True,
    )


# ---- two real ranks ----------------------------------------------------------------------------
@pytest.mark.slow
def test_two_rank_gloo_route_and_all_or_none(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEON_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(REPO), str(HERE)]),
        TRITON_INTERPRET="1",
        OMP_NUM_THREADS="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    rdv = tmp_path / "rendezvous"
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "collective_child.py"), str(r), "2", str(rdv), str(tmp_path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "RESULT ok" in out, err[-3000:]
    saved = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    ar, fused = get_slot("collective.all_reduce"), get_slot("collective.ar_residual_rmsnorm")
    ar_ref = ar.rank_reference([{"x": s["x"]} for s in saved], {})
    fused_ref = fused.rank_reference([{k: s[k] for k in ("x", "residual", "weight")} for s in saved], {"eps": 1e-6})
    for r, s in enumerate(saved):
        meta = s["meta"]
        assert meta["original_calls"] == 0, f"rank {r} fell back to SGLang's original"
        for slot in (ar.id, fused.id):
            c = meta["counts"][slot]
            assert (c["fired"], c["completed"], c.get("fallback", 0)) == (1, 1, 0), (r, slot, c)
        assert torch.equal(s["x_after"], s["x"]), "the adapter's input was modified"
        assert compare(s["out"], ar_ref[r]["out"], ar.tolerance("out", "bfloat16")).ok
        for name in ("norm_out", "residual_out"):
            assert compare(s[name], fused_ref[r][name], fused.tolerance(name, "bfloat16")).ok, (r, name)
        assert meta["raised"].startswith("SeamError"), f"rank {r} did not abort: {meta['raised']!r}"
    for name in ("out", "norm_out", "residual_out"):
        assert torch.equal(saved[0][name], saved[1][name]), f"{name} differs between ranks"
