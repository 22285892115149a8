"""The records' strict JSON: every record round-trips, and every kind of bad input is refused
with an error naming the record and the field (cacheon_subnet/records/codec.py)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import pickle

import pytest
from record_samples import CPU, GPU, LEGACY_CPU, LEGACY_GPU, RESULT, SAMPLES

from cacheon_subnet import records
from cacheon_subnet.records import (
    BoardFigures,
    CpuDetail,
    GpuDetail,
    JobResult,
    QualifyJob,
    QualifyResult,
    RecordError,
    Role,
    SpeedMetric,
    Verdict,
    codec,
    decode_detail,
    detail_json,
    from_json,
    read_detail,
    result_problem,
    to_json,
)


def _json_records() -> set[type]:
    """Every dataclass the package exports except the pickled job records."""
    return {
        v
        for v in vars(records).values()
        if isinstance(v, type) and dataclasses.is_dataclass(v) and v not in (QualifyJob, JobResult)
    }


def test_every_record_round_trips_through_its_json_text():
    assert {type(s) for s in SAMPLES} == _json_records()  # a new record needs a sample here
    for sample in SAMPLES:
        text = json.dumps(to_json(sample), allow_nan=False)  # what crosses: strict JSON, no NaN
        assert from_json(type(sample), json.loads(text)) == sample, type(sample).__name__


def test_a_detail_round_trips_through_what_the_state_db_stores():
    for detail in (GPU, CPU, None):
        assert read_detail(detail_json(detail)) == detail
    assert detail_json(None) == "{}" and read_detail("{}") is None
    assert QualifyResult.from_json(RESULT.to_json()) == RESULT


def test_the_job_records_cross_to_workers_by_pickle():
    from conftest import EXAMPLES

    from cacheon_subnet.bundle import load_bundle
    from cacheon_subnet.scoring.settle import Crown

    b = load_bundle(EXAMPLES / "norm.rmsnorm")
    crown = Crown("norm.rmsnorm", "hk", "cid", 1, 2, 1.1, 1.1, "arena-x")
    job = QualifyJob(
        records.job_key("c", "norm.rmsnorm", 0, 0), "c", "norm.rmsnorm", dict(b.files), b.manifest.ops[0], crown
    )
    done = JobResult(job.key, "c", "norm.rmsnorm", 0, RESULT, None, "gpu 0", 1.5, "cid")
    assert pickle.loads(pickle.dumps(job)) == job and pickle.loads(pickle.dumps(done)) == done


def test_rows_written_before_the_records_still_read():
    """The stored shape is unchanged except two dropped tables: rows the older code wrote (NaN for
    an undetermined figure, the evidence's per_rank and routes, int counters) decode."""
    gpu = read_detail(LEGACY_GPU)
    assert isinstance(gpu, GpuDetail) and gpu.metric is SpeedMetric.DECODE_GPU_TOKENS_PER_S
    assert gpu.confirm is not None and gpu.confirm.speed is not None and gpu.confirm.speed.ratio is None
    assert gpu.evidence is not None and gpu.evidence.ok and gpu.windows is not None
    assert [w.role for w in gpu.windows] == [Role.WARMUP, Role.B_PRIME] and gpu.windows[0].forwards == 70.0
    assert gpu.windows[1].clock_error and gpu.windows[1].at is None  # an absent reading stays absent
    again = json.loads(detail_json(gpu))
    assert "per_rank" not in again["evidence"] and again["confirm"]["speed"]["bar"] is None
    assert set(again) == set(json.loads(LEGACY_GPU))  # same keys at the top
    cpu = read_detail(LEGACY_CPU)
    assert cpu == CPU and json.loads(detail_json(cpu)) == json.loads(LEGACY_CPU)  # the CPU shape is the same


def _doc(record: object) -> dict:
    return copy.deepcopy(to_json(record))


def _bad(mutate, base: object = GPU) -> str:
    doc = _doc(base)
    mutate(doc)
    with pytest.raises(RecordError) as e:
        decode_detail(doc) if isinstance(base, (GpuDetail, CpuDetail)) else from_json(type(base), doc)
    return str(e.value)


def test_unknown_keys_are_refused_at_every_depth():
    assert "unknown key(s) ['seed']" in _bad(lambda d: d.update(seed=1))
    assert "GpuDetail).speed.ratios: unknown key(s) ['ratios']" in _bad(lambda d: d["speed"].update(ratios=[1.0]))
    msg = _bad(lambda d: d["windows"][0].update(cheat=2.0))
    assert "GpuDetail).windows[0].cheat: unknown key(s) ['cheat']" in msg
    assert "unknown key(s) ['B3']" in _bad(lambda d: d["cases"][0]["series_us"].update(B3=[]), CPU)


def test_missing_keys_are_refused():
    assert "missing key 'speedup_basis'" in _bad(lambda d: d.pop("speedup_basis"))
    assert "speed.bar: missing key 'bar'" in _bad(lambda d: d["speed"].pop("bar"))
    assert "missing key 'verdict'" in _bad(lambda d: d.pop("verdict"), RESULT)
    assert "missing key 'role'" in _bad(lambda d: d["windows"][0].pop("role"))


@pytest.mark.parametrize(
    "mutate, where",
    [
        (lambda d: d.update(wall_s="401"), "GpuDetail).wall_s: str"),
        (lambda d: d.update(wall_s=True), "wall_s: bool"),  # a bool is no number
        (lambda d: d["windows"][0].update(index=3.0), "windows[0].index: float"),
        (lambda d: d["evidence"].update(ok=1), "evidence.ok: int"),
        (lambda d: d["evidence"].update(problems="rank 0"), "evidence.problems: str 'rank 0', expected a list"),
        (lambda d: d.update(windows={"0": {}}), "windows: dict {'0': {}}, expected a list"),
        (lambda d: d.update(speedup_basis=None), "speedup_basis: null"),
        (lambda d: d["windows"][0].update(role="D"), "windows[0].role: str 'D', expected one of"),
        (lambda d: d["speed"].update(verdict="MAYBE"), "speed.verdict: str 'MAYBE'"),
        (lambda d: d.update(metric="wall_s"), "metric: str 'wall_s'"),
    ],
)
def test_wrong_types_and_values_are_refused(mutate, where):
    assert where in _bad(mutate)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_number_is_refused_where_a_finite_one_is_required(bad):
    assert "GpuDetail).wall_s" in _bad(lambda d: d.update(wall_s=bad))
    assert "windows[0].s" in _bad(lambda d: d["windows"][0].update(s=bad))
    assert "cases[0].speedup" in _bad(lambda d: d["cases"][0].update(speedup=bad), CPU)
    assert "QualifyResult.noise" in _bad(lambda d: d.update(noise=bad), RESULT)
    if math.isinf(bad):  # NaN in a speed figure is an older row's "undetermined"; inf never is
        assert "speed.ratio" in _bad(lambda d: d["speed"].update(ratio=bad))


def test_a_detail_of_neither_kind_is_refused():
    with pytest.raises(RecordError, match="evidence detail"):
        decode_detail([1, 2])
    with pytest.raises(RecordError, match=r"unknown key\(s\) \['internal'\]"):
        decode_detail({"internal": 1})
    with pytest.raises(RecordError, match="not JSON"):
        read_detail("{not json")


def test_encoding_refuses_what_decoding_would_refuse():
    """A bad record is caught where it is made: NaN, a wrong type, an unknown enum value."""
    for bad in (
        dataclasses.replace(GPU, wall_s=math.nan),
        dataclasses.replace(GPU, speedup_basis=None),
        dataclasses.replace(RESULT, verdict="MAYBE"),
        dataclasses.replace(RESULT, quality_ok=1),
        dataclasses.replace(GPU, windows=[GPU.windows[0]]),  # a list is not the declared tuple
    ):
        with pytest.raises(RecordError):
            to_json(bad)


def test_a_str_enum_keeps_the_stored_strings():
    assert json.dumps(to_json(RESULT)["verdict"]) == '"PASS"' and Verdict.PASS == "PASS"
    assert to_json(dataclasses.replace(RESULT, verdict="FAIL"))["verdict"] == "FAIL"
    assert Role.B_PRIME == "B'" and f"{Role.B_PRIME}" == "B'"


def test_an_unstorable_detail_is_arena_trouble_not_a_crash():
    """result_problem's encode check (the gate): a detail the ledger could not store is refused
    before the transaction that files it. Broken control: without the check this returns None."""
    assert result_problem(RESULT) is None
    bad = dataclasses.replace(RESULT, detail=dataclasses.replace(GPU, wall_s=math.inf))
    assert "cannot be stored" in (result_problem(bad) or "") and "wall_s" in (result_problem(bad) or "")


def test_the_codec_has_no_json_form_for_a_dict_field():
    @dataclasses.dataclass(frozen=True)
    class Loose:
        table: dict

    with pytest.raises(RecordError, match="no JSON form"):
        to_json(Loose({"a": 1}))
    with pytest.raises(RecordError, match="no JSON form"):
        from_json(Loose, {"table": {}})


def test_board_figures_are_the_snapshots_slice():
    assert GPU.board() == BoardFigures(GPU.metric, GPU.windows, GPU.speed, GPU.confirm, GPU.speedup_basis)
    assert CPU.board() == records.NO_FIGURES
    assert codec.loads(BoardFigures, records.board_json(GPU.board())) == GPU.board()


def test_storage_keeps_what_a_pipe_would_bound_and_refuses_ints_no_float_holds():
    """The records' dialect of the shared codec: a stored reason longer than any message's bound
    (a long traceback) reads back whole; an integer literal too large for a float is refused by
    name, never an OverflowError out of the reader."""
    long = dataclasses.replace(RESULT, reason="x" * 200_000)
    assert from_json(QualifyResult, to_json(long)).reason == long.reason
    doc = _doc(RESULT)
    doc["speedup"] = 10**400
    with pytest.raises(RecordError, match=r"QualifyResult\.speedup: an int outside 64 bits"):
        from_json(QualifyResult, doc)
