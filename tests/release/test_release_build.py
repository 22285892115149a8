"""`cacheon release build`: the wheel's layout, its descriptor, determinism, and what it refuses."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path

import pytest

from cacheon_subnet.bundle.archive import pack
from cacheon_subnet.cli import main
from cacheon_subnet.errors import BundleError, UsageError
from cacheon_subnet.pins import SGLANG_PIN, TORCH_PIN, TRITON_PIN
from cacheon_subnet.release.build import build_release, from_bundles, from_state
from cacheon_subnet.release.descriptor import canonical, package_name, parse, seam_table_digest
from cacheon_subnet.release.wheel import parse_record, read_wheel, record_hash
from cacheon_subnet.validator.state import StateDB
from tests.release.fixtures import EXAMPLE, REPO, built  # noqa: F401 - fixture


def _descriptor(wheel: Path) -> tuple[str, bytes]:
    members = read_wheel(wheel)
    (path,) = [p for p in members if p.endswith("/release.json")]
    return path.split("/")[0], members[path]


def test_wheel_layout_and_descriptor(built: Path) -> None:
    members = read_wheel(built)
    pkg, data = _descriptor(built)
    desc = parse(data)
    assert pkg == package_name(data) and built.name == f"{pkg}-1-py3-none-any.whl"
    assert (desc.runtime.sglang, desc.runtime.torch, desc.runtime.triton) == (SGLANG_PIN, TORCH_PIN, TRITON_PIN)
    assert desc.seam_table == seam_table_digest() and desc.native == ()
    assert [c.slot for c in desc.crowns] == ["attention.decode"] and desc.crowns[0].measured_speedup is None
    assert desc.policy.bindings == ("attention",) and desc.policy.fallback == "stock"
    assert {r.dtypes for r in desc.policy.routes} == {("bfloat16", "float16")}
    for f in desc.files:  # every sealed file is in the wheel with that digest
        assert hashlib.sha256(members[f"{pkg}/{f.path}"]).hexdigest() == f.sha256
    assert hashlib.sha256(members[f"{pkg}/tree/tree.json"]).hexdigest() == desc.tree_digest
    assert members[f"{pkg}-1.dist-info/entry_points.txt"] == f"[sglang.srt.plugins]\n{pkg} = {pkg}:load\n".encode()
    rows = parse_record(members[f"{pkg}-1.dist-info/RECORD"], "RECORD")
    assert set(rows) == set(members)
    assert all(rows[p] == (record_hash(d), str(len(d))) for p, d in members.items() if not p.endswith("RECORD"))


def test_build_is_deterministic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SOURCE_DATE_EPOCH fixes the stamp (serial and issue time): anyone rebuilds the owner's bytes."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1765000000")
    a, _ = build_release(from_bundles([str(EXAMPLE)]), tmp_path / "a")
    b, _ = build_release(from_bundles([str(EXAMPLE)]), tmp_path / "b")
    assert a.name == b.name and a.read_bytes() == b.read_bytes()


def test_descriptor_reencodes_to_its_bytes(built: Path) -> None:
    _, data = _descriptor(built)
    assert canonical(parse(data)) == data
    loose = json.dumps(json.loads(data), indent=1).encode()  # same content, other bytes
    with pytest.raises(ValueError, match="canonical"):
        parse(loose)


def _state(tmp_path: Path, speedup: float = 1.3354) -> Path:
    state = tmp_path / "state"
    StateDB(state).close()
    bundle = pack(EXAMPLE, tmp_path / "b.tar.gz")
    (state / "bundles").mkdir()
    (state / "bundles" / f"{bundle.digest}.tar.gz").write_bytes((tmp_path / "b.tar.gz").read_bytes())
    con = sqlite3.connect(state / "validator.sqlite")
    now = time.time()
    con.execute(
        "INSERT INTO contributions(id, hotkey, commit_block, digest, state, created_at, updated_at) VALUES (?,?,?,?,?,?,?)",
        ("cid-1", "hk", 10, bundle.digest, "qualified", now, now),
    )
    con.execute(
        "INSERT INTO crowns(target, hotkey, contribution_id, commit_block, crowned_block, measured_speedup,"
        " speedup_vs_stock, arena_id, updated_at) VALUES (?,?,?,?,?,?,?,?,?)",
        ("attention.decode", "hk", "cid-1", 10, 20, speedup, speedup, "arena-x", now),
    )
    con.commit()
    con.close()
    return state


def test_from_state_carries_the_crown(tmp_path: Path) -> None:
    (sel,) = from_state(_state(tmp_path))
    assert (sel.crown.slot, sel.crown.contribution_id, sel.crown.arena_id) == ("attention.decode", "cid-1", "arena-x")
    assert sel.crown.measured_speedup == pytest.approx(1.3354)
    assert main(["release", "build", "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "o")]) == 0


def test_from_state_refuses_a_crown_whose_bundle_is_not_cached(tmp_path: Path) -> None:
    state = _state(tmp_path)
    for p in (state / "bundles").iterdir():
        p.unlink()
    with pytest.raises(UsageError, match="not cached here"):
        from_state(state)


def test_refuses_a_bundle_failing_the_policy_scan(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="policy"):
        build_release(from_bundles([str(REPO / "examples" / "controls" / "policy_violation")]), tmp_path)


def test_refuses_two_bundles_for_one_slot(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="one bundle per slot"):
        from_bundles([str(EXAMPLE), str(REPO / "examples" / "attention.decode-onepass")])


def test_cli_build_needs_exactly_one_source(tmp_path: Path) -> None:
    assert main(["release", "build", "--out", str(tmp_path)]) == 2
