"""A validator state dir with what the leaderboard must show: a GPU crown with per-window figures,
a hostile miner (XSS in hotkey and reason, a reason far longer than any terminal line), a CPU
verdict and a malformed commitment. Built through the validator's own state and ledger code."""

from __future__ import annotations

import hashlib
from pathlib import Path

from cacheon_subnet.records import CpuDetail, QualifyResult, decode_detail
from cacheon_subnet.scoring.settle import SpeedPolicy
from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.state import StateDB

XSS_HOTKEY = "<script>alert('hk')</script>"
XSS_REASON = (
    "verify: kernel raised "
    + "RuntimeError('x' * 40) " * 20
    + '<img src=x onerror=alert(1)> "quoted" & ampersand END-OF-REASON'
)
GPU_ARENA = "arena-h200-llama-1b"


def cid(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def arena_detail(metric: str = "decode_gpu_tokens_per_s") -> dict:
    """The JSON of the detail arena.qualifier.to_qualify_result stores: resident + confirm windows,
    metric, speed (records.decode_detail makes it the GpuDetail record)."""

    def windows(c_gain: float, cycles: int) -> list[dict]:
        out = [{"index": 0, "cycle": -1, "role": "warmup", "route": "stock", metric: 900.0}]
        for c in range(cycles):
            for role, v in (("B", 1000.0), ("C", 1000.0 * c_gain), ("C", 1000.0 * c_gain + 2), ("B'", 1004.0)):
                out.append({"index": len(out), "cycle": c, "role": role, "route": "x", metric: v + c, "s": 1.0})
        return out

    speed = {"verdict": "PASS", "ratio": 1.052, "noise": 0.004, "bar": 1.008, "run_drift": 0.004, "reason": "C/B 1.0520"}
    return {
        "result_json": None,
        "evidence": None,
        "wall_s": 100.0,
        "metric": metric,
        "windows": windows(1.05, 3),
        "speed": speed,
        "speedup_basis": "measured vs stock",
        "confirm": {"windows": windows(1.05, 2), "speed": {**speed, "ratio": 1.05}},
    }


def make_state(root: Path) -> Path:
    state = root / "state"
    db = StateDB(state)
    rows = [
        (
            "good",
            "miner-good",
            "qualified",
            "qualified: every op measured",
            QualifyResult(
                "norm.rmsnorm",
                "PASS",
                True,
                1.052,
                1.052,
                0.004,
                GPU_ARENA,
                "gpu-arena",
                "speed: PASS",
                decode_detail(arena_detail()),
            ),
        ),
        (
            "evil",
            XSS_HOTKEY,
            "failed",
            XSS_REASON,
            QualifyResult(
                "rope.neox", "FAIL", False, 0.001, 0.001, 0.01, "cpu-abc", "cpu-timing", XSS_REASON, CpuDetail(())
            ),
        ),
    ]
    with db.tx() as con:
        for i, (name, hk, st, reason, _) in enumerate(rows):
            db.insert(
                con,
                cid=cid(name),
                hotkey=hk,
                uid=i + 1,
                commit_block=10 + i,
                reveal_block=11 + i,
                url=f"https://example.com/{name}.tar.gz",
                digest=cid("d" + name),
                state=st,
                reason=reason,
            )
        db.insert(
            con,
            cid="malformed:" + cid("junk")[:32],
            hotkey="miner-junk",
            uid=3,
            commit_block=12,
            reveal_block=13,
            url=None,
            digest=None,
            state="failed",
            rule="malformed",
            reason="malformed commitment: not_json",
        )
        for name, *_, result in rows:
            ledger.record_evidence(con, cid(name), result, 20, None)
        db.put("last_sync_block", 40, con)
        db.put("last_sync_at", 1.0, con)
    for target in ("norm.rmsnorm", "rope.neox"):
        ledger.settle(db, target, SpeedPolicy(), 30)
    db.close()
    return state
