"""Red team 2026-12-01: a collective kernel verified at its slot's world sizes (2) ran at any
TP size the arena was configured with (1, 2, 4 or 8).

`cacheon verify` checks `collective.*` ops at the slot's declared `world_sizes` only, but the seam
routed every group with world_size > 1 and the arena never compared its `tp_size` with them. A
kernel that hard-codes a pairwise exchange (rank ^ 1: exact at 2 ranks, a partial sum or a hang
at 4 or 8) passed verify and then ran, unverified, in a tp_size = 4 arena. At tp_size = 1 the
seam never routes, so the challenger was charged with missing receipts (its FAIL for the
validator's configuration). Now the arena refuses such a pairing before any engine starts
(NO_DECISION naming both sizes) and the adapters route only groups of a verified world size
(uniform across the group, so all-or-none still holds)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "arena"))

from arena_harness import small_config  # noqa: E402

from arena.run import RunOptions, qualify  # noqa: E402
from cacheon_subnet.bundle import bundle_from_files  # noqa: E402
from cacheon_subnet.slots import get_slot  # noqa: E402
from seams.adapters import collective  # noqa: E402

EXAMPLE = REPO / "examples" / "collective.all_reduce"


def _bundle() -> Any:
    files = {p.name: p.read_bytes() for p in EXAMPLE.iterdir() if p.is_file()}
    return bundle_from_files(files, source="<collective world test>")


@pytest.mark.parametrize("tp", [1, 4, 8])
def test_arena_refuses_a_tp_size_verify_never_checked(tp: int, tmp_path: Path) -> None:
    cfg = small_config()
    cfg = replace(cfg, engine=replace(cfg.engine, tp_size=tp))
    bundle = _bundle()
    opts = RunOptions(
        workdir=tmp_path / "work",
        checkpoint_root=tmp_path / "ckpt",
        engine_factory="tests.arena.no_such_module:NeverStarted",
    )
    got = qualify(cfg, bundle, bundle.manifest.ops[0], opts)
    assert got["verdict"] == "NO_DECISION", got
    assert f"tp_size {tp}" in got["reason"] and "(2,)" in got["reason"], got["reason"]


@pytest.mark.parametrize("world", [3, 4, 8])
def test_adapter_routes_only_verified_world_sizes(world: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collective, "DEVICES", ("cpu",))
    monkeypatch.setattr("seams.adapters.collective.run", lambda *a, **k: pytest.fail(f"routed a world of {world}"))
    coord = SimpleNamespace(
        unique_name="tp:0",
        world_size=world,
        device_group=None,
        pynccl_comm=None,
        hpu_communicator=None,
        xpu_communicator=None,
        npu_communicator=None,
    )
    calls: list[Any] = []
    assert collective._all_reduce_around(lambda *a: calls.append(a) or "stock", coord, torch.ones(3, 8)) == "stock"
    monkeypatch.setitem(collective._state, "ps", SimpleNamespace(get_attn_tp_group=lambda: coord))
    x = torch.ones(4, 8)
    got = collective._ar_rmsnorm_around(
        lambda *a, **k: calls.append(a) or "stock", input_tensor=x, residual=x, weight=torch.ones(8)
    )
    assert got == "stock" and len(calls) == 2


def test_verified_world_size_still_routes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collective, "DEVICES", ("cpu",))
    out = torch.full((3, 8), 7.0)
    monkeypatch.setattr("seams.adapters.collective.run", lambda *a, **k: {"out": out})
    world = get_slot("collective.all_reduce").world_sizes[0]
    coord = SimpleNamespace(
        unique_name="tp:0",
        world_size=world,
        device_group=None,
        pynccl_comm=None,
        hpu_communicator=None,
        xpu_communicator=None,
        npu_communicator=None,
    )
    assert collective._all_reduce_around(lambda *a: pytest.fail("stock"), coord, torch.ones(3, 8)) is out
