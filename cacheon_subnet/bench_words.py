"""What `cacheon bench` says about its own numbers: how long a case will take, and what the
baseline column was timed against. Kept apart from bench.py (the run itself) because both are
words a miner acts on and both were wrong (issue 34): "about 3 s a side" before a 9-minute case,
and a stock comparison that was really the fp32 reference."""

from __future__ import annotations

from dataclasses import dataclass

# bench_timing.time_pair's floor: each side's warm-up calls, then rounds of one call a side.
WARM_CALLS = 3
MIN_ROUNDS = 20


@dataclass(frozen=True)
class CaseCost:
    """One case's draw and fp32 reference call, measured on the host on the bench device just
    before the worker times it: what the case's time estimate scales with. A fixed "about 3 s a
    side" was printed on CPU while prefill-16384 took ~9 minutes (each side's 23-call floor at
    ~10 s a reference call)."""

    draw_s: float
    call_s: float
    ratio: float | None = None  # candidate / baseline time in this op's last timed case (None: none yet)

    def estimate_s(self, budget_s: float) -> float:
        """The worker draws the inputs twice (timed set, re-check set), warms each side up, times
        at least MIN_ROUNDS rounds (then until the noise target or the budget), and calls the
        candidate once more for the re-check. The baseline call is taken to cost one reference
        call, the candidate's `ratio` of it (1 before the op's first case)."""
        base = self.call_s
        cand = base * (self.ratio or 1.0)
        warm = max(WARM_CALLS * cand, min(0.25, budget_s / 4)) + max(WARM_CALLS * base, min(0.25, budget_s / 4))
        timed = max(budget_s, MIN_ROUNDS * (cand + base))
        return 2 * self.draw_s + warm + timed + cand

    def say(self, budget_s: float) -> str:
        ratio = f", the candidate's {self.ratio:.3g}x it as in the last case" if self.ratio else ""
        return (
            f"about {_secs(self.estimate_s(budget_s))} (one fp32 reference call takes {_secs(self.call_s)} "
            f"here{ratio}; each side runs at least {WARM_CALLS + MIN_ROUNDS} calls, then until the noise "
            f"target or --budget {budget_s:g} s)"
        )


_NO_STOCK = "reference fp32 ("


def baseline_label(worker_says: str, device: str) -> str:
    """What the baseline column says, in words a miner can act on. The worker falls back to the
    fp32 reference when stock SGLang is not there; on CPU it never is (SGLang's kernels are CUDA
    builds), and "stock kernel unavailable: ModuleNotFoundError: No module named 'sgl_kernel'"
    read like a broken install next to README's promise of a comparison with stock."""
    if not worker_says.startswith(_NO_STOCK):
        return worker_says  # "stock: <binding>"
    why = worker_says[len(_NO_STOCK) :].removesuffix(")")
    if why == "stock disabled":
        return "fp32 reference (stock disabled)"
    if not device.startswith("cuda"):
        return "fp32 reference (stock SGLang kernels are CUDA builds: bench --device cuda on a GPU compares with stock)"
    hint = "; pip install -e '.[gpu]' puts SGLang here" if "ModuleNotFoundError" in why or "ImportError" in why else ""
    return f"fp32 reference (no stock SGLang kernel here: {why}{hint})"


def _secs(s: float) -> str:
    if s < 0.01:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s" if s < 10 else f"{s:.0f} s" if s < 600 else f"{s / 60:.0f} min"
