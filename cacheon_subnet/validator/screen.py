"""Screening before anything is timed: a cheap static screen, then the sandboxed verify.

static_screen (fetched -> screened): every op names a slot in the catalog and the policy scan
finds nothing; no contribution code runs. Screener (screened -> verified): the same
`verify_bundle` miners run locally, on the validator's screening device (CPU by default), so
a bundle that fails here failed the published rules, not a validator quirk.

A Screener may raise for infrastructure trouble (sandbox could not start): the loop retries
that and ends in `no_decision`, never `failed`, because it says nothing about the bundle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from cacheon_subnet.bundle import Bundle
from cacheon_subnet.errors import SlotError
from cacheon_subnet.slots import get_slot


@dataclass(frozen=True)
class ScreenResult:
    passed: bool
    reasons: tuple[str, ...]
    detail: dict[str, Any] = field(default_factory=dict)
    undecided: bool = False  # not judged here (a CUDA bundle on a validator without the GPU launch): no_decision


class Screener(Protocol):
    def __call__(self, bundle: Bundle) -> ScreenResult: ...


def static_screen(bundle: Bundle) -> ScreenResult:
    """Checks that need no execution: known slots, clean policy scan. The scan and the copy
    identity (read next by copies.settle_copy) run in one bounded child (verify/static/bound.py):
    over its CPU, wall or memory budget, or dead, the bundle fails with rule P022 saying which,
    and the stage goes on with the next contribution."""
    from cacheon_subnet.verify.static import bound as policy_bound

    reasons: list[str] = []
    for op in bundle.manifest.ops:
        try:
            get_slot(op.slot)
        except SlotError as exc:
            reasons.append(f"{op.key}: unknown slot {op.slot!r} ({exc})")
    static = policy_bound.static_check(bundle, identity=True)
    reasons += [f"policy: {f}" for f in static.findings]
    return ScreenResult(
        not reasons, tuple(reasons), {"ops": [o.key for o in bundle.manifest.ops], "scan_cpu_s": round(static.cpu_s, 3)}
    )


@dataclass(frozen=True)
class VerifyScreener:
    """verify_bundle in the sandbox on `device` (default CPU: no GPU time spent on junk)."""

    device: str = "cpu"
    call_timeout_s: float = 120.0
    import_timeout_s: float = 120.0
    max_cases: int | None = None
    arena: Any = None  # verify.shapes.ArenaShapes of the configured GPU arena: verify its token counts too
    # one bundle's share of the (serial) screening stage; None: 900 s on a GPU (an honest bundle
    # took 108 s with every arena shape on the H200), 3600 s on CPU (interpreted Triton)
    deadline_s: float | None = None

    def __call__(self, bundle: Bundle) -> ScreenResult:
        from cacheon_subnet.verify import VerifyOptions, verify_bundle
        from cacheon_subnet.verify.native_gate import has_cuda, screen_native

        if has_cuda(bundle):  # compiled behind the wall + static checks; its trials need a GPU validator
            return ScreenResult(*screen_native(bundle))

        deadline = self.deadline_s if self.deadline_s is not None else (900.0 if self.device.startswith("cuda") else 3600.0)
        opts = VerifyOptions(
            device=self.device,
            call_timeout_s=self.call_timeout_s,
            import_timeout_s=self.import_timeout_s,
            max_cases=self.max_cases,
            arena=self.arena,
            deadline_s=deadline,
        )
        report = verify_bundle(bundle, opts)
        detail = {
            "status": report.status,
            "device": report.device,
            "tier": report.tier,
            "duration_s": round(report.duration_s, 3),
            "ops": [{"key": o.key, "status": o.status, "cases": o.cases} for o in report.ops],
        }
        return ScreenResult(report.passed, tuple(report.reasons), detail)
