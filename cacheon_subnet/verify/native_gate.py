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

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cacheon_subnet.bundle import Bundle, OpEntry
from cacheon_subnet.cliout import Exit
from cacheon_subnet.verify.static import bound as policy_bound
from native.build import BuildOptions
from native.commands import OpBuild, build_all
from native.diag import NativeError
from native.lane import DEFAULT_ARCH

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
    return NativeReport(bundle.source, findings, tuple(build_all(bundle, opts or BuildOptions(), first_refusal=True)))


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


def device_arch(device: str) -> str:
    """The cubin arch for `device`: its compute capability (sm_90a on the H200: the `a` features
    from Hopper on), DEFAULT_ARCH for a CPU device (compiled, never launched there)."""
    if not device.startswith("cuda"):
        return DEFAULT_ARCH
    import torch

    major, minor = torch.cuda.get_device_capability(torch.device(device))
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


def worker_artifacts(bundle: Bundle, device: str, opts: BuildOptions | None = None) -> tuple[tuple[str, str], ...]:
    """The host side of a run of `bundle` on `device`: every CUDA op compiled in the walled lane
    for that device's arch, as (op key, sealed artifact dir) for the worker (client.WorkerConfig
    .native). The compile never runs inside the worker: it only loads what this sealed.
    CompileRefused (the bundle's FAIL, file:line) for the first op that does not build;
    NativeError when this host cannot launch what it built (cuda-python missing on a GPU box)."""
    if not has_cuda(bundle):
        return ()
    if device.startswith("cuda"):
        from native.driver import DriverMissing, _driver

        try:
            _driver()
        except DriverMissing as e:
            raise NativeError(str(e)) from None
    return _built(bundle, opts or BuildOptions(arch=device_arch(device)))


def _built(bundle: Bundle, opts: BuildOptions) -> tuple[tuple[str, str], ...]:
    out = []
    for b in build_all(bundle, opts, first_refusal=True):
        if b.artifact is None:
            assert b.refused is not None
            raise b.refused
        out.append((b.op.key, str(b.artifact.path)))
    return tuple(out)


def tree_artifacts(
    selections: Sequence[tuple[Bundle, Sequence[OpEntry]]], arch: str = DEFAULT_ARCH
) -> dict[tuple[str, str], Path]:
    """engine_tree.build_tree's `artifacts` for these selections: each CUDA op compiled on the host
    for `arch` (the arena's H200 by default: the host process never opens a CUDA context of its
    own beside the engine's), keyed (bundle digest, op key). CompileRefused for one that does not build."""
    out: dict[tuple[str, str], Path] = {}
    for bundle, ops in selections:
        wanted = {op.key for op in ops if op.cuda is not None}
        if wanted:
            built = dict(_built(bundle, BuildOptions(arch=arch)))
            out.update({(bundle.digest, k): Path(built[k]) for k in wanted})
    return out
