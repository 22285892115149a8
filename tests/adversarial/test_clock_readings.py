"""The forward clock's answers come from the scheduler ranks, which import the bundle. A reading
that is not a finite positive number (NaN, inf, a string, a bool, a negative or missing value)
is no reading: the window gets a clock_error and no metric (never a win), instead of a NaN that
the judge later raises on (a traceback in the host) or a TypeError in the driver."""

from __future__ import annotations

import math

import pytest

from arena.engine.child import clock_metrics

GOOD = {"forwards": 10, "gpu_s": 0.5, "decode_gpu_s": 0.4, "decodes": 8}
BAD = [math.nan, math.inf, -math.inf, -1.0, 0, "0.5", True, None, [1.0], {"x": 1}]


@pytest.mark.parametrize("field", ["gpu_s", "forwards", "decode_gpu_s", "decodes"])
@pytest.mark.parametrize("value", BAD, ids=repr)
def test_a_bad_clock_reading_is_a_clock_error(field, value):
    if field in ("decode_gpu_s", "decodes") and value == 0 and not isinstance(value, bool):
        pytest.skip("0 decode steps is a real reading (a prefill-only window)")
    clock = dict(GOOD, **{field: value})
    out = clock_metrics({0: {"clock": clock}, 1: {"clock": dict(GOOD)}}, [0, 1], 100, 50)
    assert set(out) == {"clock_error"}, out
    assert "ranks [0, 1]" in out["clock_error"]


@pytest.mark.parametrize("answer", ["x", None, 3, {"clock": "fast"}, {"clock": None}])
def test_an_answer_that_is_not_a_clock_is_a_clock_error(answer):
    out = clock_metrics({0: answer}, [0], 100, 50)
    assert set(out) == {"clock_error"}, out


def test_good_readings_still_give_the_metrics():
    out = clock_metrics({0: {"clock": dict(GOOD)}, 1: {"clock": dict(GOOD, gpu_s=0.6)}}, [0, 1], 100, 50)
    assert out["gpu_s"] == 0.6 and out["decode_gpu_tokens_per_s"] == 100 / 0.4
    assert all(math.isfinite(v) for v in out.values())
