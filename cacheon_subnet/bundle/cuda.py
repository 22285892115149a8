"""An op's `[ops.cuda]` table (manifest schema 3): the CUDA sources of its kernels and each
kernel's declared parameter list.

    [ops.cuda]
    sources = ["kernels/rmsnorm.cu", "kernels/common.cuh"]    # every file the compile may read
    [ops.cuda.kernels]
    rmsnorm_bf16 = ["ptr", "ptr", "ptr", "i32", "i32", "f32"]  # extern "C" __global__ entries

Why a declaration: the validator-owned launcher (issue 32, part 2) packs each argument by its
declared type, and the compile lane (native/) checks the declaration against what nvcc emitted
(the PTX `.entry`), so a launch never reads parameters the kernel does not have. Only device code
is used; `.cu` files are translation units, `.cuh` files may only be included.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cacheon_subnet.bundle.limits import CUDA_SOURCE, DEFAULT_CUDA_LIMITS, CudaLimits
from cacheon_subnet.errors import ManifestError

_CUDA_KEYS = {"sources", "kernels"}
# A C identifier that is neither reserved (`__x`, `_X`) nor a mangled C++ name (`_Z...`).
KERNEL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


class ParamType(StrEnum):
    """A kernel parameter, as the launcher will pass it. PTX keeps only the width and the class:
    ptr, i64 and u64 are all `.u64` (or .s64/.b64) there, i32 and u32 `.u32`/`.s32`/`.b32`."""

    PTR = "ptr"  # a device pointer: one of the call's tensors or the scratch it allocated
    I32 = "i32"
    U32 = "u32"
    I64 = "i64"
    U64 = "u64"
    F32 = "f32"
    F64 = "f64"

    @property
    def ptx_class(self) -> str:
        """The PTX parameter class this type must appear as (`b64`, `b32`, `f32`, `f64`)."""
        return _PTX_CLASS[self]


_PTX_CLASS = {
    ParamType.PTR: "b64",
    ParamType.I64: "b64",
    ParamType.U64: "b64",
    ParamType.I32: "b32",
    ParamType.U32: "b32",
    ParamType.F32: "f32",
    ParamType.F64: "f64",
}


@dataclass(frozen=True)
class KernelDecl:
    name: str
    params: tuple[ParamType, ...]


@dataclass(frozen=True)
class CudaSpec:
    sources: tuple[str, ...]  # as listed; translation units are the .cu ones
    kernels: tuple[KernelDecl, ...]  # sorted by name

    @property
    def units(self) -> tuple[str, ...]:
        return tuple(s for s in self.sources if s.endswith(".cu"))

    def to_json(self) -> dict[str, Any]:
        return {"sources": list(self.sources), "kernels": {k.name: [p.value for p in k.params] for k in self.kernels}}


def parse_cuda(where: str, raw: Any, files: frozenset[str] | None, limits: CudaLimits = DEFAULT_CUDA_LIMITS) -> CudaSpec:
    """The `cuda` table of op `where` ("ops[0]"); ManifestError names the field and why."""
    field = f"{where}.cuda"
    if not isinstance(raw, dict):
        raise ManifestError(field, 'must be a table: { sources = [...], kernels = { name = ["ptr", ...] } }')
    extra = sorted(set(raw) - _CUDA_KEYS)
    if extra:
        raise ManifestError(f"{field}.{extra[0]}", f"unknown key (allowed: {', '.join(sorted(_CUDA_KEYS))})")
    return CudaSpec(_sources(field, raw.get("sources"), files, limits), _kernels(field, raw.get("kernels"), limits))


def _sources(field: str, raw: Any, files: frozenset[str] | None, limits: CudaLimits) -> tuple[str, ...]:
    field += ".sources"
    if not isinstance(raw, list) or not raw or not all(isinstance(s, str) for s in raw):
        raise ManifestError(field, "must be a non-empty list of bundle paths (.cu and .cuh files)")
    if len(raw) > limits.sources:
        raise ManifestError(field, f"{len(raw)} files > {limits.sources}")
    if len(set(raw)) != len(raw):
        raise ManifestError(field, f"duplicates in {raw}")
    for s in raw:
        if not CUDA_SOURCE.fullmatch(s):
            raise ManifestError(
                field,
                f"{s!r}: a CUDA source is a relative path of at most 4 parts of letters, digits and _ ending in "
                f".cu or .cuh (pattern {CUDA_SOURCE.pattern}): no dash, space, dot or '..'",
            )
        if files is not None and s not in files:
            raise ManifestError(field, f"{s!r} is not in the bundle")
    if not any(s.endswith(".cu") for s in raw):
        raise ManifestError(field, "at least one .cu translation unit is required (.cuh files are only included)")
    return tuple(raw)


def _kernels(field: str, raw: Any, limits: CudaLimits) -> tuple[KernelDecl, ...]:
    field += ".kernels"
    if not isinstance(raw, dict) or not raw:
        raise ManifestError(field, 'must be a non-empty table: name = ["ptr", "i32", ...]')
    if len(raw) > limits.kernels:
        raise ManifestError(field, f"{len(raw)} kernels > {limits.kernels}")
    allowed = ", ".join(t.value for t in ParamType)
    out = []
    for name, params in sorted(raw.items()):
        if not KERNEL_NAME.fullmatch(name):
            raise ManifestError(
                f"{field}.{name}", f'must be a plain C identifier (pattern {KERNEL_NAME.pattern}): the extern "C" name'
            )
        if not isinstance(params, list) or not all(isinstance(p, str) for p in params):
            raise ManifestError(f"{field}.{name}", f"must be a list of parameter types ({allowed})")
        if len(params) > limits.params:
            raise ManifestError(f"{field}.{name}", f"{len(params)} parameters > {limits.params}")
        bad = [p for p in params if p not in ParamType._value2member_map_]
        if bad:
            raise ManifestError(f"{field}.{name}", f"unknown parameter type {bad[0]!r} (allowed: {allowed})")
        out.append(KernelDecl(name, tuple(ParamType(p) for p in params)))
    return tuple(out)


def check_source_sizes(ops: Sequence[Any], files: Mapping[str, bytes], limits: CudaLimits = DEFAULT_CUDA_LIMITS) -> None:
    """Every op's `[ops.cuda]` sources within the byte limits, checked when the bundle loads (a
    length each, no read of their bytes): one file, one op's together, and all ops' added up (a
    file two ops share counts twice). Why the last: the lexical pre-scan (native/scan.py) and the
    copy identity's normal form (identity/cuda_form.py) run on the validator's host at ~1 s a MiB,
    once an op, and 64 ops naming the same 2 MiB made ~2 h of screening (red team 2026-12-05)."""
    added = 0
    for i, op in enumerate(ops):
        spec = getattr(op, "cuda", None)
        if spec is None:
            continue
        sizes = {p: len(files[p]) for p in spec.sources if p in files}
        for p, n in sizes.items():
            if n > limits.source_bytes:
                raise ManifestError(f"ops[{i}].cuda.sources", f"{p}: {n} bytes > {limits.source_bytes} per CUDA source")
        total = sum(sizes.values())
        if total > limits.total_bytes:
            raise ManifestError(f"ops[{i}].cuda.sources", f"{total} bytes together > {limits.total_bytes} an op")
        added += total
        if added > limits.bundle_bytes:
            raise ManifestError(
                f"ops[{i}].cuda.sources", f"the ops' CUDA sources add up to {added} bytes > {limits.bundle_bytes} a bundle"
            )
