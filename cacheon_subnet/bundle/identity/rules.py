"""What the normalized identity (identity.py) must keep because the runtime reads it: kernel
parameter names Triton's launcher binds itself, and the manifest fields that decide which op
runs. Kept apart from identity.py so each stays small."""

from __future__ import annotations

import json
from typing import Any

from cacheon_subnet.bundle.archive import Bundle

# Triton 3.6 (runtime/jit.py) execs a binder `def dynamic_func(<params>, **options)` whose body
# uses params / specialization / specialize_impl / backend / JITCallable, with defaults bound as
# default_<name>; JITFunction.run(*args, grid, warmup, **kwargs) adds debug and
# instrumentation_mode to kwargs and asserts device / stream / device_type are absent; the
# Autotuner and Heuristics run(self, *args, **kwargs); and every backend option (CUDAOptions,
# HIPOptions) is claimed by a keyword of that name. A kernel parameter spelled like one of these
# behaves differently from the same kernel with it renamed (`debug` passed by position: "got
# multiple values for argument 'debug'"), so these parameters keep their spelling.
TRITON_RESERVED = frozenset(
    {
        "grid",
        "warmup",
        "debug",
        "instrumentation_mode",
        "options",
        "params",
        "specialization",
        "specialize_impl",
        "backend",
        "JITCallable",
        "dynamic_func",
        "self",
        "args",
        "kwargs",
        "nargs",
        "device",
        "stream",
        "device_type",
        # CUDAOptions / HIPOptions fields (triton 3.6)
        "allowed_dot_input_precisions",
        "arch",
        "backend_name",
        "default_dot_input_precision",
        "deprecated_fp8_dot_operand_dtypes",
        "enable_fp_fusion",
        "enable_reflect_ftz",
        "extern_libs",
        "ir_override",
        "launch_cooperative_grid",
        "launch_pdl",
        "max_num_imprecise_acc_default",
        "maxnreg",
        "num_ctas",
        "num_stages",
        "num_warps",
        "ptx_options",
        "ptx_version",
        "sanitize_overflow",
        "supported_fp8_dtypes",
        "warp_size",
        "allow_flush_denorm",
        "kpack",
        "matrix_instr_nonkdim",
        "schedule_hint",
        "waves_per_eu",
        "num_buffers_warp_spec",
        "num_consumer_groups",
        "reg_dec_producer",
        "reg_inc_consumer",
    }
)


def reserved_param(name: str) -> bool:
    """A parameter name the runtime may read by its spelling (kept verbatim by the identity)."""
    return name in TRITON_RESERVED or name.startswith("default_")


def manifest_doc(bundle: Bundle, entries: list[list[str]]) -> list[dict[str, Any]]:
    """The manifest fields that change what runs: slot, its version, dtypes, eligibility, the entry
    as renamed, and, among the ops of one slot, their manifest order (the qualifier times the
    first, validator/loop.py), their order by variant (the engine tree sorts a slot's candidates
    by variant and dispatch takes the first eligible one) and how many earlier ones share its
    custom-op tag (variant with - as _: a second registration of a tag fails the engine). The variant's
    spelling beyond that, the bundle's name and description do not count."""
    doc = bundle.manifest.to_json()["ops"]
    out = []
    for i, (o, e) in enumerate(zip(doc, entries)):
        same = [p for p in doc if p["slot"] == o["slot"]]
        variants = sorted({p["variant"] for p in same})
        out.append(
            {
                "slot": o["slot"],
                "slot_version": o["slot_version"],
                "dtypes": sorted(o["dtypes"]),
                "constraints": o["constraints"],
                "entry": e,
                "nth": [p["slot"] for p in doc[:i]].count(o["slot"]),
                "variant_rank": variants.index(o["variant"]),
                "tag_clash": [p["variant"].replace("-", "_") for p in doc[:i] if p["slot"] == o["slot"]].count(
                    o["variant"].replace("-", "_")
                ),
            }
        )
    return sorted(out, key=lambda d: json.dumps(d, sort_keys=True))
