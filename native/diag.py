"""What the compile lane tells a miner: `file:line: message`, with paths relative to the bundle.

Why one module: the lane's refusals come from four places (the pre-scan, nvcc's front ends,
ptxas, the PTX check) and from inside the sandbox, whose paths (the staged source dir, the out
dir, nvcc's /tmp files, the validator's venv) mean nothing to a miner and say where the
validator keeps things. Every message is rewritten to bundle paths (or `<cuda>`, `<cutlass>`,
`<out>`, `<tmp>`) and capped before it leaves the lane.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from cacheon_subnet.errors import BundleError, CacheonError

MAX_DIAGNOSTICS = 40
MAX_MESSAGE = 300


class NativeError(CacheonError):
    """The lane cannot run on this host (no pinned toolchain, the wall does not hold): the host's
    problem, never a verdict on the bundle (the CLI exits 2)."""


class Stage(StrEnum):
    """Where a compile was refused: the rule id is `native-<stage>`."""

    SCAN = "scan"  # the lexical pre-scan of the sources (native/scan.py), before nvcc runs
    COMPILE = "compile"  # nvcc -ptx: preprocessor, front end, cicc
    ASSEMBLE = "assemble"  # ptxas: PTX -> cubin
    DEPS = "deps"  # the compile read a file outside the sources and the validator's headers
    KERNELS = "kernels"  # the PTX entries against the manifest's declaration
    LIMIT = "limit"  # CPU, memory, wall time or output size of the lane


@dataclass(frozen=True)
class Diagnostic:
    file: str  # bundle-relative, or a placeholder (`<cuda>/...`, `<ptx of kernels/x.cu>`), or "" for the op
    line: int  # 1-based; 0 when the message has no line
    message: str

    def render(self) -> str:
        where = f"{self.file}:{self.line}: " if self.file and self.line else (f"{self.file}: " if self.file else "")
        return f"{where}{self.message}"


class CompileRefused(BundleError):
    """The bundle's sources do not compile into an artifact: a FAIL, with every diagnostic."""

    def __init__(self, stage: Stage, diagnostics: Iterable[Diagnostic]) -> None:
        self.stage = stage
        self.diagnostics = tuple(diagnostics)[:MAX_DIAGNOSTICS] or (Diagnostic("", 0, f"{stage.value} failed"),)
        first = self.diagnostics[0]
        super().__init__(first.file or "manifest.toml", f"native-{stage.value}", self.text())

    def text(self) -> str:
        return "\n".join(d.render() for d in self.diagnostics)


def redact(text: str, roots: Mapping[str, str]) -> str:
    """`text` with each host path root replaced by its placeholder ("" for the bundle root) and
    nvcc's temp files named `<tmp>`."""
    for root, name in sorted(roots.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(root.rstrip("/") + "/", f"{name}/" if name else "")
        text = text.replace(root.rstrip("/"), name or ".")
    return re.sub(r"/tmp/tmpxft_[0-9a-f_]+-\d+_", "<tmp>/", text)


# gcc -E:  kernels/x.cu:3:10: fatal error: y.cuh: No such file or directory
_GCC = re.compile(r"^(?P<file>[^\s:()]+):(?P<line>\d+):(?:\d+:)?\s*(?P<msg>.+)$")
# EDG front end (cudafe++/cicc):  kernels/x.cu(12): error: identifier "foo" is undefined
_EDG = re.compile(r"^(?P<file>[^\s:()]+)\((?P<line>\d+)\):\s*(?P<msg>.+)$")
# ptxas:  ptxas <out>/0/x.ptx, line 34; error   : Unknown symbol 'foo'
_PTXAS = re.compile(r"^ptxas (?P<file>\S+), line (?P<line>\d+); (?P<msg>.+)$")
_NOISE = re.compile(r"^(compilation terminated\.|\d+ errors? detected in the compilation of .*|\s*\^?\s*)$")


def parse_output(text: str, roots: Mapping[str, str], ptx_names: Mapping[str, str] | None = None) -> list[Diagnostic]:
    """Diagnostics from a compiler's output: lines that name a file and a line become one each,
    with the source line quoted under an EDG message folded in; other non-noise lines are kept
    as they are (a fatal error without a place, a signal). `ptx_names` maps a PTX file (as
    redacted) to what the miner knows it as."""
    out: list[Diagnostic] = []
    for raw in redact(text, roots).splitlines():
        line = raw.rstrip()
        if _NOISE.fullmatch(line):
            continue
        m = _PTXAS.match(line) or _GCC.match(line) or _EDG.match(line)
        if m:
            name = m["file"].removeprefix("./")
            name = (ptx_names or {}).get(name, name)
            out.append(Diagnostic(name, int(m["line"]), m["msg"].strip()[:MAX_MESSAGE]))
        elif out and raw.startswith((" ", "\t")) and out[-1].line:
            continue  # the quoted source line under an EDG message: the file:line already says where
        else:
            out.append(Diagnostic("", 0, line.strip()[:MAX_MESSAGE]))
        if len(out) >= MAX_DIAGNOSTICS:
            break
    return out
