"""manifest.toml: what a bundle contributes, checked strictly (unknown keys are errors).

schema = "cacheon.bundle/3"     # 3: 2 + an op may carry CUDA sources ([ops.cuda], bundle/cuda.py)
[bundle]                      # optional metadata
name = "fast-rmsnorm"
[[ops]]
slot = "norm.rmsnorm"
entry = "rmsnorm_kernel:rmsnorm"   # module path inside the bundle : callable
variant = "default"                # optional, unique per slot
dtypes = ["bfloat16", "float16"]   # optional, default: every dtype of the slot
slot_version = 1                   # optional, must equal the catalog's version
[ops.constraints]                  # optional eligibility on symbolic dims
H = { multiple_of = 8 }
[ops.cuda]                         # optional (schema 3): CUDA kernels the op's wrapper launches
sources = ["kernels/rmsnorm.cu"]
kernels = { rmsnorm_bf16 = ["ptr", "ptr", "ptr", "i32", "i32", "f32"] }
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any

from cacheon_subnet.bundle.cuda import CudaSpec, parse_cuda
from cacheon_subnet.errors import ManifestError, SlotError
from cacheon_subnet.slots import get_slot

SCHEMA = "cacheon.bundle/3"  # = 2, and an op may carry CUDA sources ([ops.cuda], bundle/cuda.py)
# Still read as they were: a schema 2 bundle means exactly what it meant (Python/Triton sources under
# the allowlist policy v2), so its digest, its crowns and the bundles already committed on chain keep
# their meaning; only the `cuda` table needs 3.
READABLE_SCHEMAS = frozenset({"cacheon.bundle/2", SCHEMA})
RETIRED_SCHEMAS = {
    "cacheon.bundle/1": "schema 1 bundles were checked by a blocklist; port to 3: run `cacheon verify <dir>` "
    "(it reports every line the allowlist refuses), fix those, then set "
    f'schema = "{SCHEMA}"',
}
_TOP_KEYS = {"schema", "bundle", "ops"}
_BUNDLE_KEYS = {"name", "description", "author", "license", "homepage"}
_OP_KEYS = {"slot", "entry", "variant", "dtypes", "slot_version", "constraints", "cuda"}
_CONSTRAINT_KEYS = {"min", "max", "multiple_of", "in"}
_ENTRY = re.compile(r"^(?P<mod>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):(?P<attr>[A-Za-z_][A-Za-z0-9_]*)$")
_VARIANT = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,31}$")
MAX_OPS = 64
MANIFEST_BYTES = 256 * 1024
"""manifest.toml's size cap. tomllib is pure Python (~0.7 s a MiB) and a bundle's manifest is
parsed at every stage (fetch, screen, verify, qualify, and as every challenger's incumbent): a
valid 16 MiB manifest (a constraint's `in` list of 8.4 M integers, a 136 KiB archive) cost
11.6 s of the validator's CPU a load (red team 2026-12-05). The examples' largest is 604 bytes."""
MAX_ONE_OF = 256  # a constraint's `in` list: the sizes a kernel was tuned for, not a table


@dataclass(frozen=True)
class DimConstraint:
    dim: str
    min: int | None = None
    max: int | None = None
    multiple_of: int | None = None
    one_of: tuple[int, ...] | None = None

    def allows(self, value: int) -> bool:
        if self.min is not None and value < self.min:
            return False
        if self.max is not None and value > self.max:
            return False
        if self.multiple_of is not None and value % self.multiple_of:
            return False
        return self.one_of is None or value in self.one_of


@dataclass(frozen=True)
class OpEntry:
    slot: str
    slot_version: int
    module: str
    attr: str
    variant: str
    dtypes: tuple[str, ...]
    constraints: tuple[DimConstraint, ...] = ()
    cuda: CudaSpec | None = None  # schema 3: the kernels this op's wrapper launches (native/ compiles them)

    @property
    def entry(self) -> str:
        return f"{self.module}:{self.attr}"

    @property
    def key(self) -> str:
        return f"{self.slot}/{self.variant}"

    def eligible(self, dims: Mapping[str, int]) -> bool:
        return all(c.allows(dims[c.dim]) for c in self.constraints if c.dim in dims)

    def module_paths(self) -> tuple[str, str]:
        base = self.module.replace(".", "/")
        return f"{base}.py", f"{base}/__init__.py"


@dataclass(frozen=True)
class Manifest:
    schema: str
    name: str
    ops: tuple[OpEntry, ...]

    def cuda_modules(self, files: Container[str]) -> frozenset[str]:
        """The entry modules of ops with [ops.cuda] and of no other op: the only bundle files the
        policy scan lets `import native` (the validator's kernel launcher)."""
        paths = {o: [p for p in o.module_paths() if p in files] for o in self.ops}
        cuda = {p for o, ps in paths.items() if o.cuda is not None for p in ps}
        return frozenset(cuda - {p for o, ps in paths.items() if o.cuda is None for p in ps})

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "name": self.name,
            "ops": [
                {
                    "slot": o.slot,
                    "slot_version": o.slot_version,
                    "entry": o.entry,
                    "variant": o.variant,
                    "dtypes": list(o.dtypes),
                    "constraints": {
                        c.dim: {
                            k: v
                            for k, v in (
                                ("min", c.min),
                                ("max", c.max),
                                ("multiple_of", c.multiple_of),
                                ("in", list(c.one_of) if c.one_of else None),
                            )
                            if v is not None
                        }
                        for c in o.constraints
                    },
                    **({"cuda": o.cuda.to_json()} if o.cuda is not None else {}),  # absent: schema 2's doc, unchanged
                }
                for o in self.ops
            ],
        }


def parse_manifest(text: bytes | str, files: frozenset[str] | None = None) -> Manifest:
    """Parse and validate. `files` (bundle member paths) lets us check entry modules exist."""
    if len(text) > MANIFEST_BYTES:  # chars of a str: at most 4 bytes each, bounded all the same
        raise ManifestError("", f"{len(text)} bytes > {MANIFEST_BYTES}: a manifest names ops, it holds no data")
    try:
        raw = tomllib.loads(text.decode("utf-8") if isinstance(text, bytes) else text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ManifestError("", f"not valid TOML: {e}") from None
    except ValueError as e:  # not a TOMLDecodeError: an integer past int()'s 4300-digit limit escaped tomllib
        raise ManifestError("", f"not valid TOML: {str(e)[:200]}") from None
    except RecursionError:  # tomllib recurses per nested array/table: `x = [[[[...` thousands deep
        raise ManifestError("", "not valid TOML: nested too deeply") from None
    _no_unknown(raw, _TOP_KEYS, "")
    schema = raw.get("schema")
    if not isinstance(schema, str):
        raise ManifestError("schema", f"must be the string {SCHEMA!r}, got a {type(schema).__name__}")
    if schema in RETIRED_SCHEMAS:
        raise ManifestError("schema", f"{schema!r} is no longer accepted; {RETIRED_SCHEMAS[schema]}")
    if schema not in READABLE_SCHEMAS:
        raise ManifestError("schema", f"must be {SCHEMA!r}, got {schema!r}")
    meta = raw.get("bundle", {})
    if not isinstance(meta, dict):
        raise ManifestError("bundle", "must be a table")
    _no_unknown(meta, _BUNDLE_KEYS, "bundle.")
    for k, v in meta.items():
        if not isinstance(v, str) or len(v) > 512:
            raise ManifestError(f"bundle.{k}", "must be a string of at most 512 chars")
    ops_raw = raw.get("ops")
    if not isinstance(ops_raw, list) or not ops_raw:
        raise ManifestError("ops", "at least one [[ops]] entry is required")
    if len(ops_raw) > MAX_OPS:
        raise ManifestError("ops", f"at most {MAX_OPS} ops per bundle")
    ops = tuple(_parse_op(i, o, files, schema) for i, o in enumerate(ops_raw))
    seen: set[str] = set()
    for i, o in enumerate(ops):
        if o.key in seen:
            raise ManifestError(f"ops[{i}].variant", f"duplicate (slot, variant) {o.key}")
        seen.add(o.key)
    return Manifest(schema=schema, name=str(meta.get("name", "")), ops=ops)


def _parse_op(i: int, o: Any, files: frozenset[str] | None, schema: str = SCHEMA) -> OpEntry:
    where = f"ops[{i}]"
    if not isinstance(o, dict):
        raise ManifestError(where, "must be a table")
    _no_unknown(o, _OP_KEYS, f"{where}.")
    slot_id = o.get("slot")
    if not isinstance(slot_id, str):
        raise ManifestError(f"{where}.slot", "required string (see `cacheon slots`)")
    version = o.get("slot_version")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        raise ManifestError(f"{where}.slot_version", "must be an integer")
    try:
        spec = get_slot(slot_id, version)
    except SlotError as e:
        raise ManifestError(f"{where}.slot", str(e)) from None
    entry = o.get("entry")
    m = _ENTRY.fullmatch(entry) if isinstance(entry, str) else None  # `$` alone lets "...\n" through
    if not m:
        raise ManifestError(f"{where}.entry", f"must look like 'module.path:callable', got {entry!r}")
    module, attr = m["mod"], m["attr"]
    if any(part.startswith("__") for part in (*module.split("."), attr)):
        raise ManifestError(f"{where}.entry", f"{entry!r}: dunder names are module internals, not bundle functions")
    if module.split(".")[0] in {"cacheon_subnet", "seams", "arena", "torch", "triton", "sglang", "sgl_kernel"}:
        raise ManifestError(f"{where}.entry", f"module {module!r} must live inside the bundle")
    op = OpEntry(slot_id, spec.version, module, attr, "default", spec.dtypes)
    if files is not None and not any(p in files for p in op.module_paths()):
        raise ManifestError(
            f"{where}.entry", f"module {module!r} not found in bundle (expected {' or '.join(op.module_paths())})"
        )
    variant = o.get("variant", "default")
    if not isinstance(variant, str) or not _VARIANT.fullmatch(variant):
        raise ManifestError(f"{where}.variant", f"must match {_VARIANT.pattern}, got {variant!r}")
    dtypes = o.get("dtypes", list(spec.dtypes))
    if not isinstance(dtypes, list) or not dtypes or not all(isinstance(d, str) for d in dtypes):
        raise ManifestError(f"{where}.dtypes", "must be a non-empty list of dtype names")
    if len(set(dtypes)) != len(dtypes):
        raise ManifestError(f"{where}.dtypes", f"duplicates in {dtypes}")
    bad = [d for d in dtypes if d not in spec.dtypes]
    if bad:
        raise ManifestError(f"{where}.dtypes", f"{bad} not supported by {spec.key} (slot dtypes: {list(spec.dtypes)})")
    constraints = _parse_constraints(where, o.get("constraints", {}), spec)
    cuda = None
    if "cuda" in o:
        if schema != SCHEMA:
            raise ManifestError(
                f"{where}.cuda", f"CUDA sources need schema = {SCHEMA!r} ({schema!r} bundles are Python/Triton only)"
            )
        cuda = parse_cuda(where, o["cuda"], files)
    return OpEntry(slot_id, spec.version, module, attr, variant, tuple(dtypes), constraints, cuda)


def _parse_constraints(where: str, raw: Any, spec) -> tuple[DimConstraint, ...]:
    if not isinstance(raw, dict):
        raise ManifestError(f"{where}.constraints", "must be a table of dim = { min/max/multiple_of/in }")
    known = {d.name for a in spec.args for d in a.dims}
    out = []
    for dim, rule in sorted(raw.items()):
        field = f"{where}.constraints.{dim}"
        if dim not in known:
            raise ManifestError(field, f"unknown dim (slot {spec.id} dims: {sorted(known)})")
        if not isinstance(rule, dict) or not rule:
            raise ManifestError(field, "must be a non-empty table")
        _no_unknown(rule, _CONSTRAINT_KEYS, f"{field}.")
        vals = {}
        for k in ("min", "max", "multiple_of"):
            v = rule.get(k)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < (1 if k == "multiple_of" else 0)):
                raise ManifestError(f"{field}.{k}", "must be a non-negative integer (multiple_of >= 1)")
            vals[k] = v
        one_of = rule.get("in")
        if one_of is not None and (
            not isinstance(one_of, list)
            or not one_of
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in one_of)
        ):
            raise ManifestError(f"{field}.in", "must be a non-empty list of integers")
        if one_of is not None and len(one_of) > MAX_ONE_OF:
            raise ManifestError(f"{field}.in", f"{len(one_of)} values > {MAX_ONE_OF}")
        out.append(DimConstraint(dim, vals["min"], vals["max"], vals["multiple_of"], tuple(one_of) if one_of else None))
    return tuple(out)


def _no_unknown(table: dict, allowed: set[str], prefix: str) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        raise ManifestError(f"{prefix}{extra[0]}".rstrip("."), f"unknown key (allowed: {', '.join(sorted(allowed))})")
