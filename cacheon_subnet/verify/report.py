"""Verify results: stable reason codes, per-op outcomes, one overall verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Stable reason codes (tests and validators match on these).
REASONS = {
    "bundle": "bundle violates a limit or path rule",
    "manifest": "manifest.toml is invalid",
    "policy": "static policy scan found forbidden code",
    "import_error": "importing the entry module raised",
    "import_timeout": "importing the bundle did not finish in time",
    "entry_missing": "the entry callable does not exist",
    "no_cases": "constraints exclude every workload shape of the slot",
    "exception": "the kernel raised",
    "return_value": "the kernel returned a value instead of writing its outputs",
    "host_sync": "the kernel synchronised with the host inside the op",
    "output_aliasing": "an output aliases an input or was re-pointed",
    "input_mutated": "an input the slot does not declare writable was changed",
    "partial_write": "some output elements were never written",
    "nan_inf": "NaN or Inf in an output",
    "nondeterministic": "two runs on identical inputs differ",
    "mismatch": "output outside the slot's tolerance vs the reference",
    "timeout": "a call did not finish in time (the worker was killed)",
    "crashed": "the worker process died",
    "graph_capture": "CUDA graph capture failed",
    "graph_replay": "CUDA graph replay with new inputs gave wrong results",
    "compile": "torch.compile(fullgraph=True) of the dispatch wrapper failed",
    "protocol": "the worker's reply was malformed or incomplete (fails closed)",
    "not_run": "not checked because an earlier failure stopped the worker",
    "rank_divergence": "a collective's outputs that must be identical on every rank differ between ranks",
}


@dataclass(frozen=True)
class Failure:
    reason: str
    detail: str
    case: str = ""
    dtype: str = ""
    stage: str = ""
    rank: int | None = None  # collective runs: the rank the failure was seen on

    def __str__(self) -> str:
        where = " ".join(
            x for x in (self.stage, self.dtype, self.case, "" if self.rank is None else f"rank {self.rank}") if x
        )
        return f"{self.reason}{' [' + where + ']' if where else ''}: {self.detail}"


@dataclass(frozen=True)
class OpResult:
    key: str
    slot: str
    entry: str
    dtypes: tuple[str, ...]
    status: str  # PASS | FAIL
    calls: int
    cases: int
    failure: Failure | None = None
    world_size: int = 1  # collective ops: ranks the op ran on (one process each)
    # of `cases`, the slot's tier shapes (what --max-cases caps); the rest are the odd and arena
    # sizes verify adds beyond the cap ("--max-cases 1" read "cases": 2 with no word why)
    tier_cases: int = 0


@dataclass(frozen=True)
class VerifyReport:
    status: str  # PASS | FAIL
    source: str
    digest: str
    device: str
    tier: str
    reasons: tuple[str, ...]
    findings: tuple[str, ...]
    ops: tuple[OpResult, ...]
    env: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    duration_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "PASS"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        lines = [f"cacheon verify: {self.status}  digest {self.digest[:16]}…  device {self.device} (tier {self.tier})"]
        for f in self.findings:
            lines.append(f"  policy  {f}")
        for op in self.ops:
            extra = f"  {op.failure}" if op.failure else ""
            ranks = f" x {op.world_size} ranks" if op.world_size > 1 else ""
            split = f" ({op.tier_cases} tier + {op.cases - op.tier_cases} odd/arena)" if 0 < op.tier_cases < op.cases else ""
            lines.append(
                f"  {op.status:4}  {op.key:32} {op.entry:36} {op.calls:4} calls / {op.cases} cases{split}{ranks}{extra}"
            )
        op_reasons = {f"{op.key}: {op.failure}" for op in self.ops if op.failure}
        for r in self.reasons:
            if r not in op_reasons:
                lines.append(f"  reason  {r}")
        lines.append(f"  ({self.duration_s:.1f} s)")
        return "\n".join(lines)
