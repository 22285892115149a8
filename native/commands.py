"""`cacheon native build BUNDLE [--arch sm_90a] [--cache DIR] [--json]`: compile every CUDA op of
a bundle in the sandboxed lane and print each artifact and its kernels.

Exit codes (cliout.Exit): 0 every CUDA op built (or found in the cache), 1 FAIL (a source was
refused or did not compile: each diagnostic as file:line: message), 2 usage (no such bundle, no
CUDA op in it, no pinned toolchain or no sandbox wall on this host).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cacheon_subnet.bundle import Bundle, OpEntry, load_bundle
from cacheon_subnet.cliout import Exit, emit
from cacheon_subnet.errors import UsageError
from native.artifact import Artifact
from native.build import BuildOptions, build_op, default_cache
from native.diag import CompileRefused
from native.lane import DEFAULT_ARCH


@dataclass(frozen=True)
class OpBuild:
    """One CUDA op's outcome: its artifact, or the refusal."""

    op: OpEntry
    artifact: Artifact | None
    refused: CompileRefused | None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"op": self.op.key}
        if self.artifact is not None:
            d = self.artifact.descriptor
            doc.update(
                status="cached" if self.artifact.cached else "built",
                artifact=str(self.artifact.path),
                digest=self.artifact.digest,
                arch=d.arch,
                toolchain={
                    "nvcc": d.toolchain.nvcc,
                    "host_cxx": d.toolchain.host_cxx,
                    "packages": list(d.toolchain.packages),
                },
                kernels=[{"symbol": k.symbol, "params": [p.value for p in k.params], "unit": k.unit} for k in d.kernels],
            )
        elif self.refused is not None:
            doc.update(
                status="FAIL",
                stage=self.refused.stage.value,
                diagnostics=[x.render() for x in self.refused.diagnostics],
            )
        return doc

    def render(self) -> str:
        if self.artifact is None:
            assert self.refused is not None
            lines = [f"{self.op.key}: FAIL ({self.refused.stage.value})"]
            return "\n".join(lines + [f"  {x.render()}" for x in self.refused.diagnostics])
        a, d = self.artifact, self.artifact.descriptor
        lines = [
            f"{self.op.key}: {'cached' if a.cached else 'built'} for {d.arch} (nvcc {d.toolchain.nvcc}, {d.toolchain.host_cxx})",
            f"  artifact {a.digest}",
            f"  at {a.path}",
        ]
        lines += [f"  kernel {k.symbol}({', '.join(p.value for p in k.params)})  {k.unit}" for k in d.kernels]
        return "\n".join(lines)


def cuda_ops(bundle: Bundle) -> list[OpEntry]:
    return [op for op in bundle.manifest.ops if op.cuda is not None]


def build_all(bundle: Bundle, opts: BuildOptions, first_refusal: bool = False) -> list[OpBuild]:
    """Every CUDA op of `bundle`, each built or refused (NativeError, the host's, propagates).
    first_refusal: stop at the first op refused (a validator: one refusal FAILs the bundle, and
    the rest would only cost its host a scan and a compile each)."""
    out = []
    for op in cuda_ops(bundle):
        try:
            out.append(OpBuild(op, build_op(bundle, op, opts), None))
        except CompileRefused as e:
            out.append(OpBuild(op, None, e))
            if first_refusal:
                break
    return out


def cmd_build(args: argparse.Namespace) -> int:
    bundle = load_bundle(args.bundle)
    if not cuda_ops(bundle):
        raise UsageError(f"{args.bundle}: no op has an [ops.cuda] table (manifest schema cacheon.bundle/3)")
    opts = BuildOptions(arch=args.arch, cache_dir=Path(args.cache) if args.cache else None)
    results = build_all(bundle, opts)
    ok = all(r.artifact is not None for r in results)
    payload = {"status": "built" if ok else "FAIL", "source": args.bundle, "ops": [r.to_json() for r in results]}
    head = f"cacheon native build: {'built' if ok else 'FAIL'}"
    emit(args, payload, "\n".join([head, *(r.render() for r in results)]))
    return Exit.OK if ok else Exit.FAIL


def register(sub: Any, groups: dict[str, Any]) -> None:
    n = sub.add_parser("native", help="CUDA kernels: compile a bundle's [ops.cuda] sources in the sandboxed lane")
    nsub = n.add_subparsers(dest="native_cmd", required=True)
    s = nsub.add_parser(
        "build",
        help="compile every CUDA op into its sealed artifact and list its kernels (exit 0 built, 1 FAIL, 2 usage)",
    )
    s.add_argument("bundle", help="bundle directory or .tar.gz")
    s.add_argument("--arch", default=DEFAULT_ARCH, help="GPU architecture the cubin is for (the H200: sm_90a)")
    s.add_argument("--cache", help=f"artifact cache dir (default {default_cache()})")
    s.add_argument("--json", action="store_true")
    s.set_defaults(handler=cmd_build)
