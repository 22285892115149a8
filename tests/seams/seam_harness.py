"""Helpers for the seam tests (test_seam_*.py): tiny torch-only candidate bundles, slot inputs,
in-process candidate registration, and starting role tests in fresh interpreters over the
stand-in SGLang runtime (fake_sglang_runtime.py). A plain module, not a conftest (other test files import the root conftest by name).

Candidates here compute the slot's own reference and write it into the out/inout arguments, so
any difference between what an adapter hands back to SGLang and the reference computed from the
SGLang-level inputs is the adapter's (or dispatch's) doing, not the kernel's.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from fake_sglang_runtime import runtime_sources, write_runtime  # noqa: F401 - re-exported: the role tests import them from here

from cacheon_subnet.bundle.archive import Bundle, bundle_from_files
from cacheon_subnet.bundle.engine_tree import SealedTree, build_tree
from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.compare import compare
from cacheon_subnet.slots.custom_op import register_slot_op
from cacheon_subnet.slots.spec import SlotSpec, case, dtype_name, dtype_of
from seams.dispatch import Candidate, Registry, guarded

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
ALL_SLOTS = (
    "norm.rmsnorm",
    "norm.fused_add_rmsnorm",
    "activation.silu_and_mul",
    "rope.neox",
    "attention.decode",
    "moe.topk_softmax",
    "moe.fused_experts",
)


def fn_name(slot_id: str) -> str:
    return slot_id.replace(".", "_")


# ---- candidate kernels --------------------------------------------------------------------
def reference_kernel(slot_id: str, calls: list | None = None) -> Callable[..., None]:
    """A faithful candidate: the slot reference, written into the caller's out/inout tensors."""
    spec = get_slot(slot_id)

    def kernel(**kw: Any) -> None:
        if calls is not None:
            calls.append(slot_id)
        tensors = {a.name: kw[a.name] for a in spec.args}
        params = {p.name: kw[p.name] for p in spec.params}
        ref = spec.reference(tensors, params)
        for a in spec.args:
            if a.written and a.name in ref:
                kw[a.name].copy_(ref[a.name])

    return kernel


KERNEL_MODULE = '''"""torch-only test candidates: each writes the slot reference into its outputs."""
# salt: {salt}
import os

from cacheon_subnet.slots import get_slot

_log = os.environ.get("CACHEON_TEST_IMPORT_LOG")
if _log:  # evidence that contribution code ran in this process
    with open(_log, "a") as f:
        f.write(f"{{__name__}} pid={{os.getpid()}}\\n")


def _make(slot_id):
    spec = get_slot(slot_id)

    def kernel(**kw):
        tensors = {{a.name: kw[a.name] for a in spec.args}}
        params = {{p.name: kw[p.name] for p in spec.params}}
        ref = spec.reference(tensors, params)
        for a in spec.args:
            if a.written and a.name in ref:
                kw[a.name].copy_(ref[a.name])

    return kernel

{defs}
'''


def bundle_files(
    slots: Sequence[str], salt: str = "", module: str = "kernel", op_extra: Mapping[str, str] | None = None
) -> dict[str, bytes]:
    """manifest.toml + one kernel module exposing one function per slot."""
    defs = "\n".join(f"{fn_name(s)} = _make({s!r})" for s in slots)
    manifest = ['schema = "cacheon.bundle/2"', "", "[bundle]", f'name = "seam-test-{salt or "x"}"']
    for s in slots:
        manifest += ["", "[[ops]]", f'slot = "{s}"', f'entry = "{module}:{fn_name(s)}"']
        if op_extra and s in op_extra:
            manifest.append(op_extra[s])
    return {
        "manifest.toml": ("\n".join(manifest) + "\n").encode(),
        f"{module}.py": KERNEL_MODULE.format(salt=salt, defs=defs).encode(),
    }


def make_bundle(slots: Sequence[str], salt: str = "", **kw: Any) -> Bundle:
    return bundle_from_files(bundle_files(slots, salt, **kw), source=f"<seam-test {salt}>")


def make_tree(root: Path, groups: Sequence[Sequence[str]]) -> SealedTree:
    """One bundle per group of slots (distinct salts -> distinct digests), every op selected."""
    selections = []
    for i, slots in enumerate(groups):
        b = make_bundle(slots, salt=f"g{i}")
        selections.append((b, b.manifest.ops))
    return build_tree(root, selections, scan_policy=False)  # instrumented stand-ins (os, open)


# ---- slot inputs ----------------------------------------------------------------------------
SMALL_DIMS: Mapping[str, Mapping[str, int]] = {
    "norm.rmsnorm": {"T": 5, "H": 64},
    "norm.fused_add_rmsnorm": {"T": 5, "H": 64},
    "activation.silu_and_mul": {"T": 6, "D": 32},
    "rope.neox": {"T": 5, "HQ": 4, "HK": 2, "D": 16, "P": 64},
    "attention.decode": {"B": 3, "HQ": 4, "HK": 2, "D": 16, "S": 40, "N": 36, "MAXS": 4},
    "moe.topk_softmax": {"T": 6, "E": 8, "K": 2},
    "moe.fused_experts": {"T": 5, "H": 32, "I": 16, "E": 4, "K": 2},
}
SMALL_PARAMS: Mapping[str, Mapping[str, Any]] = {
    "norm.rmsnorm": {"eps": 1e-6},
    "norm.fused_add_rmsnorm": {"eps": 1e-6},
    "attention.decode": {"sm_scale": 16**-0.5},
    "moe.topk_softmax": {"renormalize": True, "topk": 2},
}
PROFILE = {"moe.topk_softmax": "qwen3-moe-mini", "moe.fused_experts": "qwen3-moe-mini"}


def slot_inputs(
    slot_id: str, dtype: torch.dtype = torch.bfloat16, seed: int = 0, dims: Mapping[str, int] | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    spec = get_slot(slot_id)
    d = dict(SMALL_DIMS[slot_id], **(dims or {}))
    params = dict(SMALL_PARAMS.get(slot_id, {}))
    c = case("seam-test", PROFILE.get(slot_id, "qwen3-0.6b"), d, **params)
    g = torch.Generator().manual_seed(seed)
    return spec.make_inputs(c, dtype, g), params


def check_against_reference(
    slot_id: str,
    inputs: Mapping[str, torch.Tensor],
    params: Mapping[str, Any],
    got: Mapping[str, torch.Tensor],
    act: torch.dtype,
) -> list[str]:
    """Compare the written arguments in `got` with the slot reference of `inputs` (copies taken
    before the call); returns problems (empty when every output is within tolerance)."""
    spec = get_slot(slot_id)
    ref = spec.reference(inputs, params)
    out = {n: got[n] for n in ref}
    if spec.canonicalize is not None:
        ref, out = spec.canonicalize(dict(ref)), spec.canonicalize(dict(out))
    problems = []
    for name, r in ref.items():
        cmp = compare(out[name], r, spec.tolerance(name, dtype_name(act)))
        if not cmp.ok:
            problems.append(f"{slot_id}.{name}: {cmp.detail}")
    return problems


def clone_all(t: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in t.items()}


# ---- in-process candidates (custom op + guarded, as activate_scheduler builds them) -----------
_ns = itertools.count()


def register_candidate(
    spec: SlotSpec,
    fn: Callable[..., Any],
    registry: Registry,
    stock: Callable[..., None] | None = None,
    dtypes: Iterable[str] | None = None,
    constraints: tuple = (),
    variant: str = "default",
    add: bool = True,
) -> Candidate:
    """Register `fn` the way activation does (guarded body behind a unique torch custom op);
    `add=False` binds the body to `registry` without listing the candidate there."""
    body = guarded(spec, fn, registry, stock)
    call = register_slot_op(spec, body, f"cacheon_seamtest_{os.getpid()}_{next(_ns)}", variant)
    cand = Candidate(
        spec.id, variant, "cacheon_c_test", tuple(dtype_of(d) for d in (dtypes or spec.dtypes)), constraints, call
    )
    if add:
        registry.add(spec, cand)
    return cand


def child_env(runtime: Path, extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEON_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(runtime), str(REPO), str(HERE)]), PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1"
    )
    env.update(extra)
    return env


def start_child(runtime: Path, scenario: str, env: Mapping[str, str]) -> subprocess.Popen:
    """Start `seam_child.py <scenario>` in a fresh interpreter (clean sys.modules)."""
    return subprocess.Popen(
        [sys.executable, str(HERE / "seam_child.py"), scenario],
        cwd=REPO,
        env=child_env(runtime, env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish_child(proc: subprocess.Popen, timeout: float = 120) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        raise AssertionError(f"child printed no result (rc {proc.returncode})\nstdout:\n{out}\nstderr:\n{err}")
    result = json.loads(lines[-1][len("RESULT ") :])
    result["_rc"], result["_stderr"] = proc.returncode, err
    return result
