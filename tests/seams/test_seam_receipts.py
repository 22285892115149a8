"""Receipts -> coverage: only exactly the expected scheduler ranks, each with every slot active,
fired and completed and nothing else, is ok; every other shape names its problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seams.receipts import Receipts, coverage, read_receipts

SLOTS = ("norm.fused_add_rmsnorm", "norm.rmsnorm")
GOOD = ("active", "fired", "completed")


def _write(directory: Path, role: str, rank: int, kinds: dict[str, tuple[str, ...]]) -> None:
    r = Receipts(str(directory), role, rank)
    for slot, ks in kinds.items():
        for k in ks:
            r.note(slot, k, "boom" if k in ("load_failed", "fallback") else None)
    r.flush()


def _engine(directory: Path, ranks: tuple[int, ...] = (0, 1), **per_rank: dict[str, tuple[str, ...]]) -> list[dict]:
    """A receipt file per rank (Receipts names files by pid: one dir per rank, then merged)."""
    out = []
    for rank in ranks:
        d = directory / f"r{rank}"
        d.mkdir()
        _write(d, "scheduler", rank, per_rank.get(f"r{rank}", {s: GOOD for s in SLOTS}))
        out += read_receipts(d)
    return out


def test_all_ranks_fired_and_completed_is_ok(tmp_path: Path) -> None:
    receipts = _engine(tmp_path)
    cov = coverage(receipts, SLOTS, [0, 1])
    assert cov.ok and cov.problems == ()
    assert set(cov.per_rank) == {0, 1} and all(cov.per_rank[r][s]["completed"] == 1 for r in (0, 1) for s in SLOTS)
    assert coverage(receipts, SLOTS, [1, 0, 1]).ok  # expected ranks as a set


def test_receipt_files_roundtrip(tmp_path: Path) -> None:
    r = Receipts(str(tmp_path), "scheduler", 3, flush_every_s=3600)
    for _ in range(5):
        r.note("norm.rmsnorm", "fired")
    r.flush()
    [doc] = read_receipts(tmp_path)
    assert (doc["role"], doc["rank"], doc["slots"]["norm.rmsnorm"]["fired"]) == ("scheduler", 3, 5)
    assert [p.name for p in tmp_path.iterdir()] == [f"receipt-scheduler-3-{doc['pid']}.json"]  # no temp left


def _problems(receipts: list[dict], slots=SLOTS, ranks=(0, 1)) -> tuple[str, ...]:  # noqa: ANN001
    cov = coverage(receipts, slots, ranks)
    assert not cov.ok
    return cov.problems


def test_missing_rank(tmp_path: Path) -> None:
    assert _problems(_engine(tmp_path, ranks=(0,))) == ("rank 1: no receipt (scheduler never activated)",)


def test_extra_rank(tmp_path: Path) -> None:
    assert _problems(_engine(tmp_path, ranks=(0, 1, 2))) == ("unexpected rank 2 reported",)


@pytest.mark.parametrize("role", ["driver", "detokenizer", "tokenizer"])
def test_receipt_from_another_role(tmp_path: Path, role: str) -> None:
    receipts = _engine(tmp_path)
    (tmp_path / "x").mkdir()
    _write(tmp_path / "x", role, 0, {s: GOOD for s in SLOTS})
    problems = _problems(receipts + read_receipts(tmp_path / "x"))
    assert len(problems) == 1 and problems[0].startswith(f"receipt from role '{role}'")
    assert "candidate code outside a scheduler rank" in problems[0]


def test_rank_reported_twice(tmp_path: Path) -> None:
    receipts = _engine(tmp_path)
    twin = dict(receipts[0], pid=receipts[0]["pid"] + 1)
    assert _problems(receipts + [twin]) == ("rank 0 reported twice (pids differ): ambiguous coverage",)


def test_fallback(tmp_path: Path) -> None:
    receipts = _engine(tmp_path, r1={"norm.rmsnorm": (*GOOD, "fallback"), "norm.fused_add_rmsnorm": GOOD})
    assert _problems(receipts) == (
        "rank 1: error recorded: norm.rmsnorm fallback: boom",
        "rank 1 norm.rmsnorm: 1 'fallback'",
    )


def test_load_failed(tmp_path: Path) -> None:
    receipts = _engine(tmp_path, r0={s: ("load_failed",) for s in SLOTS})
    problems = _problems(receipts)
    for s in SLOTS:
        assert f"rank 0 {s}: 1 'load_failed'" in problems and f"rank 0: error recorded: {s} load_failed: boom" in problems
        assert all(f"rank 0 {s}: no '{k}' receipt" in problems for k in GOOD)
    assert not any(p.startswith("rank 1") for p in problems)


@pytest.mark.parametrize(
    "kinds, missing",
    [
        (("active",), ("fired", "completed")),  # loaded, but the chokepoint was never reached
        (("active", "fired"), ("completed",)),  # reached, never completed
        (("fired", "completed"), ("active",)),
    ],
)
def test_slot_not_exercised(tmp_path: Path, kinds: tuple[str, ...], missing: tuple[str, ...]) -> None:
    receipts = _engine(tmp_path, r1={"norm.rmsnorm": kinds, "norm.fused_add_rmsnorm": GOOD})
    assert _problems(receipts) == tuple(f"rank 1 norm.rmsnorm: no '{k}' receipt" for k in missing)


def test_slots_and_ranks_may_be_one_shot_iterables(tmp_path: Path) -> None:
    receipts = _engine(tmp_path, r1={"norm.rmsnorm": ("active",), "norm.fused_add_rmsnorm": GOOD})
    cov = coverage(iter(receipts), (s for s in SLOTS), iter([0, 1]))
    assert not cov.ok and "rank 1 norm.rmsnorm: no 'fired' receipt" in cov.problems


def test_slot_absent_from_receipt(tmp_path: Path) -> None:
    receipts = _engine(tmp_path)
    problems = _problems(receipts, slots=(*SLOTS, "rope.neox"))
    assert problems == tuple(f"rank {r} rope.neox: no '{k}' receipt" for r in (0, 1) for k in GOOD)


def test_unreadable_receipt_is_a_problem(tmp_path: Path) -> None:
    receipts = _engine(tmp_path)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "receipt-scheduler-1-99.json").write_text("{not json")
    problems = _problems(receipts + read_receipts(tmp_path / "bad"))
    assert len(problems) == 1 and problems[0].startswith("receipt from role 'unreadable'")


def test_strict_failure_recorded_after_a_success(tmp_path: Path) -> None:
    """A candidate that completed once and then failed in strict mode (the engine raised) has
    active/fired/completed counts, but its receipt carries the failure: not coverage."""
    d = tmp_path / "r0"
    d.mkdir()
    r = Receipts(str(d), "scheduler", 0)
    for s in SLOTS:
        for k in GOOD:
            r.note(s, k)
    r.note("norm.rmsnorm", "fired")
    r.error("norm.rmsnorm", "SeamError('output out changed identity/layout')")
    receipts = read_receipts(d)
    assert receipts[0]["errors"]
    problems = _problems(receipts, ranks=(0,))
    assert any("norm.rmsnorm" in p and "changed identity" in p for p in problems), problems


@pytest.mark.parametrize("slots, ranks", [((), (0, 1)), (SLOTS, ())])
def test_nothing_to_cover_is_not_ok(tmp_path: Path, slots: tuple[str, ...], ranks: tuple[int, ...]) -> None:
    """Fail closed: an empty slot list or rank list must not make any receipt set pass."""
    receipts = _engine(tmp_path) if ranks else []
    cov = coverage(receipts, slots, ranks)
    assert not cov.ok and cov.problems


def test_receipt_json_is_sorted_and_atomic(tmp_path: Path) -> None:
    _write(tmp_path, "scheduler", 0, {"norm.rmsnorm": GOOD})
    [path] = list(tmp_path.glob("receipt-*.json"))
    doc = json.loads(path.read_text())
    assert set(doc) == {"role", "rank", "pid", "time", "slots", "errors", "routes", "declines"}
    assert not list(tmp_path.glob("*.tmp"))


def test_last_counts_of_a_burst_reach_the_file(tmp_path):
    """Graph capture ends with a burst of calls and no later note: the file must converge."""
    import time

    from seams.receipts import Receipts, read_receipts

    r = Receipts(str(tmp_path), "scheduler", 0, flush_every_s=0.2)
    for _ in range(50):
        r.note("norm.rmsnorm", "fired")
        r.note("norm.rmsnorm", "completed")
    time.sleep(0.8)
    (doc,) = read_receipts(tmp_path)
    assert doc["slots"]["norm.rmsnorm"]["fired"] == 50 and doc["slots"]["norm.rmsnorm"]["completed"] == 50


@pytest.mark.slow
def test_concurrent_flushes_never_collide(tmp_path):
    """The daemon flusher and the calling thread share one file: no lost rename, no exception."""
    import threading

    from seams.receipts import Receipts, read_receipts

    r = Receipts(str(tmp_path), "scheduler", 0, flush_every_s=0.0)
    errors = []

    def hammer():
        try:
            for _ in range(300):
                r.note("norm.rmsnorm", "fired")
                r.flush()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    r.flush()
    assert errors == [] and read_receipts(tmp_path)[0]["slots"]["norm.rmsnorm"]["fired"] == 1200
