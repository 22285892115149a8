"""`cacheon verify` (and the validator's screen) on a bundle with CUDA ops, where no GPU trial runs.

Why its own gate: a CUDA op's wrapper launches kernels of its compiled artifact through the
validator's launcher (native/launcher.py), which needs a CUDA device. So verify runs what can run
everywhere, exactly as a validator would before it spends GPU time (the static allowlist scan of
every .py file, which lets only a CUDA op's entry module call `native.launch`; every CUDA op
compiled behind the wall and checked against its manifest declaration), and then says plainly
that the trials were not run: exit 3 (cliout.Exit.NO_DECISION), never a PASS. The argument table
of each launch is checked by the launcher at the launch itself; verify does not run bundle code
on the host to pre-check it (that would be bundle code outside the sandbox). A refused or broken
source is a FAIL (exit 1) with file:line diagnostics. The validator's screen reads the same
report: a FAIL fails the contribution, otherwise it is `no_decision` with TRIALS_NOT_RUN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cacheon_subnet.bundle import Bundle
from cacheon_subnet.cliout import Exit
from cacheon_subnet.verify.static import bound as policy_bound
from native.build import BuildOptions
from native.commands import OpBuild, build_all

TRIALS_NOT_RUN = (
    "CUDA trials need a GPU validator: the kernels run only through the validator's launcher on a CUDA "
    "device; the sources compiled and every static check passed, but this is not a PASS"
)


@dataclass(frozen=True)
class NativeReport:
    source: str
    findings: tuple[str, ...]  # the static policy scan of the .py files
    builds: tuple[OpBuild, ...]

    @property
    def failed(self) -> bool:
        return bool(self.findings) or any(b.artifact is None for b in self.builds)

    @property
    def exit_code(self) -> int:
        return Exit.FAIL if self.failed else Exit.NO_DECISION

    @property
    def reasons(self) -> list[str]:
        return [f"policy: {f}" for f in self.findings] + [
            f"native: {d.render()}" for b in self.builds if b.refused for d in b.refused.diagnostics
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "status": "FAIL" if self.failed else "NOT_RUN",
            "source": self.source,
            "reasons": self.reasons,
            "native": [b.to_json() for b in self.builds],
            "trials": None if self.failed else TRIALS_NOT_RUN,
        }

    def render(self) -> str:
        lines = [f"cacheon verify: {'FAIL' if self.failed else 'NOT RUN (CUDA trials need a GPU validator)'}"]
        lines += [f"  policy: {f}" for f in self.findings] or ["  policy: ok"]
        for b in self.builds:
            lines += ["  native: " + b.render().replace("\n", "\n  ")]
        if not self.failed:
            lines.append(f"  trials: {TRIALS_NOT_RUN}")
        return "\n".join(lines)


def has_cuda(bundle: Bundle) -> bool:
    return any(op.cuda is not None for op in bundle.manifest.ops)


def check_native(bundle: Bundle, opts: BuildOptions | None = None) -> NativeReport:
    """The static scan and every CUDA op's compile; NativeError (no toolchain, no wall) propagates."""
    findings = tuple(policy_bound.static_check(bundle).findings)
    return NativeReport(bundle.source, findings, tuple(build_all(bundle, opts or BuildOptions())))


def screen_native(bundle: Bundle, opts: BuildOptions | None = None) -> tuple[bool, tuple[str, ...], dict[str, Any], bool]:
    """The validator screen's verdict on a CUDA bundle as (passed, reasons, detail, undecided):
    a FAIL when a check refuses it, else undecided with TRIALS_NOT_RUN. NativeError (this host
    cannot compile) propagates: the screen's infrastructure trouble, retried, never a verdict."""
    report = check_native(bundle, opts)
    doc = report.to_json()
    detail = {"status": doc["status"], "device": "none", "native": doc["native"]}
    if report.failed:
        return False, tuple(report.reasons), detail, False
    return False, (TRIALS_NOT_RUN,), detail, True
