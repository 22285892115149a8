"""Qualification: how fast is a verified op, relative to the incumbent stack, and how sure are we.

`Qualifier` is the seam between the validator loop and an arena. The GPU arena (arena/) runs
the real SGLang engine; `CpuQualifier` is what a CPU-only validator (and the local demo) can do:
slot-level timing of the kernel against the fp32 reference, each in its own sandboxed worker,
on the host's clock, with B, C, C, B' interleaved and every timed output judged. Its results are labelled "cpu-timing" and its arena id differs from every
GPU arena, so they never mix with engine measurements.
(`Qualifier` and `QualifyResult` live in cacheon_subnet/records, which needs no torch.)
"""

from __future__ import annotations

import hashlib
import math
import statistics
from dataclasses import dataclass

from arena.cpu.case import CaseTimer
from arena.cpu.host_timing import TimingFailure
from cacheon_subnet import progress, sandbox
from cacheon_subnet.bundle import Bundle, OpEntry
from cacheon_subnet.errors import UsageError
from cacheon_subnet.records import CpuCase, CpuDetail, QualifyResult, Verdict
from cacheon_subnet.scoring.settle import Crown
from cacheon_subnet.slots import get_slot
from cacheon_subnet.verify import protocol as P
from cacheon_subnet.verify import wire
from cacheon_subnet.verify.client import (
    WorkerClient,
    WorkerConfig,
    WorkerDied,
    WorkerTimeout,
)
from cacheon_subnet.words import speed_words


@dataclass(frozen=True)
class CpuQualifier:
    """Slot-level CPU timing vs the fp32 reference, on the host's clock (advisory; labelled).

    Baseline and candidate run in two sandboxed workers of the same kind; the host times
    batches of K calls on fresh secret inputs through shared memory, freezes the side not being
    timed and judges every output (host_timing.py says why each piece is there)."""

    tier: str = "gpu"  # realistic extents, so per-call Python overhead does not decide the ratio
    cases: int = 2
    max_case_bytes: int = 6 << 20  # CPU-feasible and cache-friendly: page-fault noise dominates above
    budget_s: float = 4.0  # wall per case, host work included (min_iters rounds always run)
    hard_budget_factor: float = 3.0  # ... extended up to this many budgets while the band is over max_noise / 2
    target_rel_err: float = 0.01
    max_noise: float = 0.05
    min_iters: int = 8  # B C C B' rounds
    max_rounds: int = 60
    batch_target_s: float = 0.004  # K = calls per batch, sized so the fixed IPC cost stays small
    arena_bytes: int = 64 << 20  # shared memory per side (caps K)
    max_calls: int = 16
    max_off_cpu: float = 2.0  # C's wall/CPU may exceed B's by this factor (+0.25) before it fails
    busy_off_cpu: float = 1.5  # ... unless B's own wall/CPU is above this: a busy box, NO_DECISION
    # Worker-to-worker bias the paired rounds cannot see (B and B' share one process): the same
    # kernel as B and C read 0.82-1.09x over 7 runs on a loaded 2-core box (docs/benchmarks.md),
    # with paired bands of 1.2-2.3 %. So CPU timing is never trusted below 4.5 %: bar >= 1.09.
    noise_floor: float = 0.045
    # The two workers also differ by a bias B vs B' cannot see: the same reference code read
    # 1.10-1.25x cross-process on a loaded 2-core box (docs/benchmarks.md). Each case's speedup is
    # therefore the lower of that ratio and the one against the reference run inside the
    # candidate's own worker (case.py), which read 0.94-1.05x for the same code. An operator may
    # still discount every CPU speedup by this fraction (C/B / (1 + allowance)); 0 by default.
    bias_allowance: float = 0.0
    call_timeout_s: float = 300.0
    label: str = "cpu-timing"

    def __post_init__(self) -> None:
        for name in ("noise_floor", "bias_allowance"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0.0 <= v < 1.0):
                raise UsageError(f"CPU arena {name}: expected a number in [0, 1), got {v!r}")

    @property
    def arena_id(self) -> str:
        ident = (
            f"cpu-slot-timing/v5-host-clock-paired-inprocess-guard/{self.tier}/{self.cases}/{self.max_case_bytes}"
            f"/floor{self.noise_floor:g}/bias{self.bias_allowance:g}"
        )
        return "cpu-" + hashlib.sha256(ident.encode()).hexdigest()[:12]

    def qualify(self, bundle: Bundle, op: OpEntry, incumbent: Crown | None) -> QualifyResult:
        spec = get_slot(op.slot)
        if spec.collective:
            return self._result(op, "FAIL", False, 1.0, 1.0, 0.0, "collective slot: the CPU arena times one process")
        dtype = op.dtypes[0]
        cases = self.pick_cases(spec, op, dtype)
        if not cases:
            return self._result(op, "FAIL", False, 1.0, 1.0, 0.0, f"no {self.tier} case fits the CPU arena")
        policy = sandbox.SandboxPolicy(wall_timeout_s=self.call_timeout_s)
        base = WorkerClient(bundle, WorkerConfig(device="cpu", policy=policy))  # never imports the bundle
        cand = WorkerClient(bundle, WorkerConfig(device="cpu", policy=policy))
        ratios: list[float] = []
        noises: list[float] = []
        rows: list[CpuCase] = []
        try:
            # Starting the workers runs no bundle code: a failure here is the box's (it propagates:
            # the loop retries it and ends in NO_DECISION), never the miner's FAIL.
            base.start()
            cand.start()
        except BaseException:
            base.cleanup()
            cand.cleanup()
            raise
        try:
            raw, _ = cand.request(P.request(P.load_request([op])), None, self.call_timeout_s)
            why = _load_failure(raw, op.key)  # the candidate's worker wrote this reply: decoded strictly
            if why is not None:
                return self._result(op, "FAIL", False, 1.0, 1.0, 0.0, f"import failed: {why}")
            for case in progress.bar(cases, desc=f"{self.label} {op.key}", unit="shape"):
                row = CaseTimer(self, spec, op, case, dtype, base, cand).run()
                ratios.append(row.speedup)
                noises.append(row.noise)
                rows.append(row)
        except TimingFailure as e:
            if e.side in ("baseline", "box"):  # the validator's own side or the box: not the miner's verdict
                return self._result(op, "NO_DECISION", True, 1.0, 1.0, 0.0, f"{e.side}: {e.reason}", rows)
            return self._result(op, "FAIL", False, 1.0, 1.0, 0.0, e.reason, rows)
        except (WorkerTimeout, WorkerDied, TimeoutError, EOFError, OSError, wire.WireError) as e:
            if not base.alive:  # the validator's own reference worker broke (alone or with the box): no verdict
                return self._result(
                    op, "NO_DECISION", True, 1.0, 1.0, 0.0, f"baseline worker: {type(e).__name__}: {e}", rows
                )
            return self._result(op, "FAIL", False, 1.0, 1.0, 0.0, f"worker: {type(e).__name__}: {e}", rows)
        finally:
            base.cleanup()
            cand.cleanup()
        measured = math.exp(statistics.fmean(math.log(x) for x in ratios))
        vs_stock = measured / (1.0 + self.bias_allowance)
        noise = max(self.noise_floor, statistics.median(noises))
        vs_incumbent = vs_stock / incumbent.speedup_vs_stock if incumbent else vs_stock
        if noise > self.max_noise and vs_incumbent * (1 + 2 * noise) >= 1.0:
            # The noise band reaches above parity: we cannot tell. (Clearly slower is a verdict.)
            return self._result(
                op,
                "NO_DECISION",
                True,
                vs_incumbent,
                vs_stock,
                noise,
                f"too noisy: {noise:.3%} > {self.max_noise:.0%}",
                rows,
            )
        return self._result(
            op,
            "PASS",
            True,
            vs_incumbent,
            vs_stock,
            noise,
            f"{speed_words(vs_stock, 'the fp32 reference')} ({self._figure_words(vs_stock, measured)}) over "
            f"{len(rows)} shapes, host clock, the lower of the cross-process and in-process ratios, every timed "
            f"output checked (noise {noise:.2%})",
            rows,
        )

    def _figure_words(self, vs_stock: float, measured: float) -> str:
        if not self.bias_allowance:
            return f"{vs_stock:.3f}x"
        return f"{vs_stock:.3f}x: {measured:.3f}x measured, net of the {self.bias_allowance:.0%} bias allowance"

    def pick_cases(self, spec, op: OpEntry, dtype: str) -> list:
        """The largest eligible shapes that fit the CPU budget (largest first)."""
        from cacheon_subnet.slots.spec import dtype_of

        act = dtype_of(dtype)
        for tier in (self.tier, "verify"):
            fit = [c for c in spec.cases(tier) if op.eligible(c.dims) and spec.default_bytes(c, act) <= self.max_case_bytes]
            if fit:
                return sorted(fit, key=lambda c: (-spec.default_bytes(c, act), c.label))[: self.cases]
        return []

    def _result(
        self,
        op: OpEntry,
        verdict: str,
        ok: bool,
        sp: float,
        vs: float,
        noise: float,
        reason: str,
        rows: list[CpuCase] | None = None,
    ) -> QualifyResult:
        detail = CpuDetail(tuple(rows or ()))
        return QualifyResult(op.slot, Verdict(verdict), ok, sp, vs, noise, self.arena_id, self.label, reason, detail)


def _load_failure(raw: object, key: str) -> str | None:
    """Why the candidate's op did not load (None: it did). A reply that does not decode as a load
    reply (a missing, unknown or mistyped field, an oversized string) FAILs the op naming the
    field, never a KeyError in the validator."""
    try:
        loaded = P.read_reply(raw, P.Loaded).results.get(key)
    except P.ProtocolError as e:
        return f"malformed load reply: {e}"[:300]
    if loaded is None:
        return "no load answer for the op"
    return None if loaded.ok else str(loaded.reason)[:200]
