"""One fully populated instance of every JSON record (every optional field set, so a round trip
exercises every field), and the stored detail JSON as the code before the records wrote it."""

from __future__ import annotations

from cacheon_subnet.records import (
    ArenaWindow,
    BoardFigures,
    ConfirmFigures,
    CpuCase,
    CpuDetail,
    CpuSeries,
    EvidenceSummary,
    GpuDetail,
    OffCpu,
    QualifyResult,
    Role,
    SpeedBrief,
    SpeedMetric,
    Verdict,
)

M = SpeedMetric.DECODE_GPU_TOKENS_PER_S
WINDOW = ArenaWindow(
    3,
    0,
    Role.B_PRIME,
    "stock",
    at=1.5e9,
    s=1.25,
    gpu_s=0.9,
    forwards=120.0,
    decode_gpu_s=0.8,
    decodes=100.0,
    extend_gpu_s=0.1,
    clock_error="forward clock: rank 1 reported nothing",
    output_tokens_per_s=1000.0,
    total_tokens_per_s=1500.0,
    gpu_tokens_per_s=1100.0,
    decode_gpu_tokens_per_s=1200.0,
    extend_gpu_tokens_per_s=9000.0,
)
BARE_WINDOW = ArenaWindow(4, 1, Role.C, "candidate", decode_gpu_tokens_per_s=1260.0)
SPEED = SpeedBrief(Verdict.PASS, 1.05, 0.004, 1.008, 0.002, "C/B 1.0500, bar 1.0080")
UNDETERMINED = SpeedBrief(Verdict.NO_DECISION, None, None, None, None, "only 1 complete B/C/B′ cycle(s)")
EVIDENCE = EvidenceSummary(False, ("rank 0: no 'fired' receipt",), ("the incumbent wrote into engine state",), (), ("n",))
CONFIRM = ConfirmFigures((BARE_WINDOW,), UNDETERMINED)
GPU = GpuDetail("/var/arena/result.json", "measured vs stock", EVIDENCE, (WINDOW, BARE_WINDOW), 321.5, M, SPEED, CONFIRM)
CASE = CpuCase(
    "gpu-4096x8",
    12.5,
    12.7,
    10.0,
    1.26,
    0.02,
    8,
    12,
    52,
    0.01,
    0.02,
    OffCpu(1.01, 1.02),
    0,
    "host",
    CpuSeries((12.5, 12.4), (12.7,), (10.0, 10.1)),
)
CPU = CpuDetail((CASE,))
RESULT = QualifyResult("norm.rmsnorm", Verdict.PASS, True, 1.05, 1.05, 0.004, "arena-x", "gpu-arena", "speed: PASS", GPU)

# every JSON record type, one instance each (the round trip test asserts none is missing)
SAMPLES = (
    WINDOW,
    BARE_WINDOW,
    SPEED,
    UNDETERMINED,
    EVIDENCE,
    CONFIRM,
    GPU,
    GPU.board(),
    BoardFigures(None, None, None, None, None),
    CASE,
    CASE.wall_over_cpu,
    CASE.series_us,
    CPU,
    RESULT,
    QualifyResult("rope.neox", Verdict.FAIL, False, 1.0, 1.0, 0.0, "cpu-1", "cpu-timing", "import failed", CPU),
    QualifyResult("rope.neox", Verdict.NO_DECISION, True, 1.0, 1.0, 0.0, "a", "fake", "no detail"),
)

# evidence.detail as the code before the records stored it (arena/qualifier.py to_qualify_result and
# arena/cpu/qualifier.py, json.dumps(sort_keys=True, default=str)): NaN for an undetermined
# figure, the evidence's per-rank counts and route acks, ints for the engine's counters
LEGACY_GPU = (
    '{"confirm": {"speed": {"bar": NaN, "noise": NaN, "ratio": NaN, "reason": "only 1 complete cycle(s)",'
    ' "run_drift": NaN, "verdict": "NO_DECISION"}, "windows": []}, "evidence": {"arena_problems": [],'
    ' "baseline_problems": [], "notes": [], "ok": true, "per_rank": {"0": {"norm.rmsnorm": {"active": 1,'
    ' "completed": 40, "fired": 40}}}, "problems": [], "routes": {"0": [{"epoch": 1, "route": "candidate",'
    ' "s": 0.5}]}}, "metric": "decode_gpu_tokens_per_s", "result_json": "/w/result.json", "speed": {"bar": 1.02,'
    ' "noise": 0.01, "ratio": 1.05, "reason": "C/B 1.0500", "run_drift": 0.001, "verdict": "PASS"},'
    ' "speedup_basis": "measured vs stock", "wall_s": 401.2, "windows": [{"at": 1767000000.123, "cycle": -1,'
    ' "decode_gpu_s": 0.5, "decode_gpu_tokens_per_s": 900.0, "decodes": 64, "forwards": 70, "gpu_s": 0.6,'
    ' "gpu_tokens_per_s": 800.0, "index": 0, "output_tokens_per_s": 700.0, "role": "warmup", "route": "stock",'
    ' "s": 0.9, "total_tokens_per_s": 950.0}, {"clock_error": "forward clock: ranks [0] reported [(0, \'\')]",'
    ' "cycle": 0, "decode_gpu_tokens_per_s": 1000.0, "index": 1, "role": "B\'", "route": "stock", "s": 1.0}]}'
)
LEGACY_CPU = (
    '{"cases": [{"baseline2_us": 12.7, "baseline_us": 12.5, "batches_judged": 52, "calls_per_batch": 8,'
    ' "candidate_us": 10.0, "case": "gpu-4096x8", "clock": "host", "frozen_cpu_ns": 0,'
    ' "ipc_overhead_frac": 0.01, "ipc_overhead_wall_frac": 0.02, "noise": 0.02, "rounds": 12,'
    ' "series_us": {"B": [12.5, 12.4], "B2": [12.7], "C": [10.0, 10.1]}, "speedup": 1.26,'
    ' "wall_over_cpu": {"baseline": 1.01, "candidate": 1.02}}]}'
)
