"""On a GPU, bench times each side's call as a CUDA-graph replay, as the engine runs it: on the
lent H100 (docs/benchmarks.md session 18) the stock MoE call read 187 µs eager against 44 µs
replayed, its GPU work 42.5 µs, and bench's "1.55x" was mostly host dispatch. Both sides are read
on one clock: if one side cannot be captured, every side runs eager and the report says why."""

from __future__ import annotations

import torch

from cacheon_subnet import bench_report as bench
from cacheon_subnet import bench_timing
from cacheon_subnet.verify.protocol import GRAPH_CLOCK


def _sides(log: list[str]) -> dict:
    return {"candidate": lambda: log.append("candidate eager"), "baseline": lambda: log.append("baseline eager")}


def _fake_capture(log: list[str], refuse: str = ""):
    def capture(fn, restore):  # noqa: ANN001, ANN202
        restore()
        fn()  # torch captures after one warm call on a side stream; the fake makes that call too
        name = log[-1].split()[0]
        if name == refuse:
            raise RuntimeError("operation not permitted when stream is capturing")
        return lambda: log.append(f"{name} replay")

    return capture


def test_every_side_is_replayed_when_every_side_captures() -> None:
    log: list[str] = []
    replays, clock = bench_timing.graph_sides(_sides(log), lambda: None, _fake_capture(log))
    assert clock == GRAPH_CLOCK
    log.clear()
    for fn in replays.values():
        fn()
    assert log == ["candidate replay", "baseline replay"]


def test_one_side_that_cannot_be_captured_puts_every_side_on_the_eager_clock() -> None:
    log: list[str] = []
    sides = _sides(log)
    timed, clock = bench_timing.graph_sides(sides, lambda: None, _fake_capture(log, refuse="baseline"))
    assert clock.startswith("eager (baseline could not be captured in a CUDA graph: RuntimeError: operation not permitted")
    assert "host dispatch is in every side's time" in clock
    log.clear()
    for fn in timed.values():
        fn()
    assert log == ["candidate eager", "baseline eager"]  # the candidate's replay is not mixed with eager stock


def test_time_pair_on_a_gpu_times_the_replays(monkeypatch) -> None:  # noqa: ANN001
    """The wiring: on a CUDA device the timed callables are the captured replays, not the eager calls."""
    log: list[str] = []

    class FakeTimer:
        def __init__(self, device) -> None:  # noqa: ANN001
            pass

        def time_once(self, fn):  # noqa: ANN001, ANN202
            n = len(log)
            fn()
            return log[n:]

        def read(self, token) -> float:  # noqa: ANN001
            assert token and all(t.endswith("replay") for t in token), token
            return 1.0

    monkeypatch.setattr(bench_timing, "_Timer", FakeTimer)
    monkeypatch.setattr(bench_timing, "capture_graph", _fake_capture(log))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    stats, clock = bench_timing.time_pair(
        _sides(log), lambda: None, torch.device("cuda"), 0.0, 1.0, min_iters=2, max_iters=4
    )
    assert clock == GRAPH_CLOCK
    assert set(stats) == {"candidate", "baseline"} and stats["candidate"]["n"] == 4


def test_time_pair_on_cpu_reads_the_host_clock() -> None:
    stats, clock = bench_timing.time_pair({"a": lambda: None}, lambda: None, torch.device("cpu"), 0.0, 1.0, 2, 4)
    assert clock == "host clock" and stats["a"]["n"] == 4


def _row(clock: str, case: str = "c") -> bench.BenchRow:
    return bench.BenchRow(
        "norm.rmsnorm/default", case, "bfloat16", 1.0, 2.0, 2.0, "stock: x", 1, 1.0, None, 20, 0.01, "ok", clock=clock
    )


def test_the_report_says_which_clock_its_rows_were_read_on() -> None:
    assert bench.clock_lines((_row(GRAPH_CLOCK), _row(GRAPH_CLOCK, "d"))) == [
        "timed on: CUDA-graph replay (each side's call captured once and replayed, as the engine runs it)"
    ]
    mixed = bench.clock_lines((_row(GRAPH_CLOCK), _row("eager (candidate could not be captured ...)", "d")))
    assert mixed == [
        "timed on: CUDA-graph replay  [norm.rmsnorm/default c bfloat16]",
        "timed on: eager (candidate could not be captured ...)  [norm.rmsnorm/default d bfloat16]",
    ]
    assert bench.clock_lines((_row(""),)) == []


def test_the_l2_flush_reads_and_writes_only_its_sink() -> None:
    """A write flush left the L2 full of dirty lines that the timed call then wrote back (the MoE
    replay read 55.7 µs after `zero_`, 44.0 µs warm, 40.7 µs in the engine): the flush reads."""
    buf = torch.arange(1 << 12, dtype=torch.int32)
    before = buf.clone()
    sink = torch.empty((), dtype=torch.int32)
    bench_timing.flush_l2(buf, sink)
    assert torch.equal(buf, before) and int(sink) == int(before.max())
