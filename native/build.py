"""One op's CUDA sources -> its sealed artifact: scan, cache lookup, walled compile, PTX check, seal."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cacheon_subnet.bundle import Bundle, OpEntry
from cacheon_subnet.bundle.cuda import KernelDecl
from cacheon_subnet.bundle.digest import content_digest
from cacheon_subnet.env import HOME
from cacheon_subnet.errors import UsageError
from cacheon_subnet.records import codec
from native import ptx
from native.artifact import DESCRIPTOR, DESCRIPTOR_SCHEMA, Artifact, Cache, Descriptor, KernelEntry, UnitRecord, cache_key
from native.diag import CompileRefused, Diagnostic, Stage
from native.lane import DEFAULT_ARCH, FLAGS, PTXAS_FLAGS, CompileBudget, UnitBuild, compile_unit
from native.scan import scan_sources
from native.toolchain import Toolchain, locate

ARCH = re.compile(r"^sm_[0-9]{2,3}[af]?$")


@dataclass(frozen=True)
class BuildOptions:
    arch: str = DEFAULT_ARCH
    cache_dir: Path | None = None  # default: $CACHEON_HOME/native (a validator passes its state dir's)
    budget: CompileBudget = CompileBudget()


def default_cache() -> Path:
    return Path(HOME.get()).expanduser() / "native"


def build_op(bundle: Bundle, op: OpEntry, opts: BuildOptions | None = None, tc: Toolchain | None = None) -> Artifact:
    """The artifact of `op`'s `[ops.cuda]` sources; CompileRefused (a FAIL, with file:line
    diagnostics) when they do not make one, NativeError when this host cannot run the lane."""
    opts = opts or BuildOptions()
    spec = op.cuda
    if spec is None:
        raise ValueError(f"op {op.key} has no [ops.cuda] table")
    if not ARCH.fullmatch(opts.arch):
        raise UsageError(f"--arch {opts.arch!r}: expected sm_<digits> with an optional a/f suffix, e.g. {DEFAULT_ARCH}")
    sources = {p: bundle.files[p] for p in spec.sources}
    findings = scan_sources(sources, frozenset(bundle.files))
    if findings:
        raise CompileRefused(Stage.SCAN, findings)
    tc = tc or locate()
    sources_digest = content_digest(sources)
    decl = spec.to_json()["kernels"]
    key = cache_key(sources_digest, decl, tc.identity, opts.arch, (*FLAGS, *PTXAS_FLAGS))
    cache = Cache(opts.cache_dir or default_cache())
    hit = cache.get(key)
    if hit is not None:
        return hit
    built = [compile_unit(sources, unit, opts.arch, tc, opts.budget) for unit in spec.units]
    kernels = _kernels(built, spec.kernels)
    units = tuple(
        UnitRecord(
            b.source,
            f"unit{i}.cubin",
            hashlib.sha256(b.cubin).hexdigest(),
            b.commands,
            tuple(h for h in b.headers if h in sources),
        )
        for i, b in enumerate(built)
    )
    cubin_of = {u.source: u.cubin for u in units}
    desc = Descriptor(
        DESCRIPTOR_SCHEMA,
        op.slot,
        op.variant,
        opts.arch,
        sources_digest,
        key,
        tc.identity,
        units,
        tuple(KernelEntry(k.symbol, k.params, k.ptx_params, k.unit, cubin_of[k.unit]) for k in kernels),
    )
    files = {DESCRIPTOR: codec.dumps(desc).encode(), **{u.cubin: b.cubin for u, b in zip(units, built)}}
    return cache.put(key, files)


def _kernels(built: list[UnitBuild], declared: Sequence[KernelDecl]) -> list[KernelEntry]:
    """Each declared kernel as compiled; CompileRefused(KERNELS) on any mismatch."""
    found = {b.source: ptx.entries(b.ptx) for b in built}
    diags, where = ptx.check(found, declared)
    by_unit = {b.source: b for b in built}
    for name, unit in sorted(where.items()):
        if name not in ptx.cubin_kernels(by_unit[unit].cubin):
            diags.append(Diagnostic(unit, 0, f"kernel {name} is in the PTX but not in the cubin ptxas made of it"))
    if diags:
        raise CompileRefused(Stage.KERNELS, diags)
    entries = {(u, e.name): e for u, es in found.items() for e in es}
    return [
        KernelEntry(k.name, k.params, entries[(where[k.name], k.name)].params, where[k.name], "")
        for k in sorted(declared, key=lambda k: k.name)
    ]
