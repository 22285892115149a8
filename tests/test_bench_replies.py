"""`cacheon bench` reads its worker's replies (the worker imports the bundle) through the verify
pipe's strict decoder (verify/protocol.py): a malformed load or bench reply is an error line
naming the message and the field, never a KeyError or a truthy "ok" read as a timing. A scripted
client stands in for the worker; the host's own reference re-check still runs."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES

from cacheon_subnet import bench
from cacheon_subnet.bundle import load_bundle

BUNDLE = load_bundle(EXAMPLES / "norm.rmsnorm")
KEY = BUNDLE.manifest.ops[0].key
OPTS = bench.BenchOptions(device="cpu", tier="verify", max_cases=1, stock=False, budget_s=0.01)
SIDE = {"median_us": 2.0, "mean_us": 2.1, "rel_stderr": 0.01, "min_us": 1.9, "n": 40}
LOADED = {"type": "loaded", "results": {KEY: {"ok": True}}}
TIMED = {
    "type": "bench",
    "ok": True,
    "timings": {"candidate": SIDE, "baseline": {**SIDE, "median_us": 4.0}},
    "baseline": "fp32 reference",
}


def run(monkeypatch, load, reply):
    answers = iter([load, reply])

    class Worker:
        alive = True

        def __init__(self, *a, **kw):
            pass

        def start(self):
            pass

        def request(self, msg, tensors, timeout_s, on_progress=None):
            return next(answers), {}

        def cleanup(self):
            pass

    monkeypatch.setattr(bench, "WorkerClient", Worker)
    return bench.bench_bundle(BUNDLE, OPTS)


@pytest.mark.parametrize(
    "load, reply, words",
    [
        ({"type": "loaded"}, TIMED, "worker: loaded message, field results: missing key 'results'"),
        ({**LOADED, "speedup": 9}, TIMED, "worker: loaded message, field speedup: unknown key"),
        ({"type": "loaded", "results": {KEY: {"ok": "yes"}}}, TIMED, "field results"),
        (LOADED, {**TIMED, "ok": 1}, "worker: bench message, field ok: int 1, expected bool"),
        (LOADED, {**TIMED, "hbm_gbps": float("nan")}, "worker: bench message, field hbm_gbps"),
        (LOADED, {**TIMED, "timings": {"candidate": {**SIDE, "n": True}}}, "timings['candidate'].n: bool True"),
        (LOADED, {**TIMED, "timings": {"candidate": {"median_us": 1.0}}}, "timings['candidate'].mean_us: missing"),
        (LOADED, {**TIMED, "error": "e" * 10_000}, "field error: a string of 10000 characters, over the 4096"),
        (LOADED, {"type": "bench", "ok": True}, "protocol: the bench reply times [], not the candidate and the baseline"),
        (LOADED, {**TIMED, "timings": {"candidate": SIDE}}, "times ['candidate'], not the candidate and the baseline"),
    ],
    ids=[
        "no-results",
        "unknown-key",
        "truthy-load",
        "int-ok",
        "nan-hbm",
        "bool-n",
        "short-side",
        "huge",
        "no-timings",
        "one-side",
    ],
)
def test_a_malformed_reply_is_a_named_error_line_never_a_row(monkeypatch, load, reply, words):
    report = run(monkeypatch, load, reply)
    assert not report.rows and not report.ok and any(words in e for e in report.errors), report.errors


def test_a_well_formed_reply_makes_a_row_and_a_failed_case_its_reason(monkeypatch):
    report = run(monkeypatch, LOADED, TIMED)
    (row,) = report.rows
    assert (row.candidate_us, row.baseline_us, row.speedup, row.n) == (2.0, 4.0, 2.0, 40)
    assert row.recheck == "FAIL protocol" and not report.errors  # no tensors came back: the host's re-check fails it
    failed = {"type": "bench", "ok": False, "reason": "exception", "error": "Traceback\nValueError: boom\n"}
    report = run(monkeypatch, LOADED, failed)
    assert not report.rows and report.errors == (
        f"{KEY} {bench._cases(bench.get_slot('norm.rmsnorm'), BUNDLE.manifest.ops[0], OPTS)[0][0].label}: exception: ['ValueError: boom']",
    )
    load_failed = {"type": "loaded", "results": {KEY: {"ok": False, "reason": "import_error", "error": "E\nImportError: x"}}}
    assert run(monkeypatch, load_failed, TIMED).errors == (f"{KEY}: import_error: ImportError: x",)
