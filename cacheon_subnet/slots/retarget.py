"""A slot's case re-targeted to another model's shapes (a checkpoint the operator names).

The slot definitions list the built-in profiles they were written for; a real checkpoint
(arena `[model] path`) brings its own hidden size, head geometry, MLP width and experts. Each
slot family reads a known set of its dims from the profile, so a case of any built-in profile
becomes the same workload point on the checkpoint's shapes: token counts and everything else the
case fixes stay, the model's extents and constants (eps, sm_scale, rope theta) are replaced.
A family this module does not know is not re-targeted (None): it is never guessed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from cacheon_subnet.slots.profiles import ModelProfile
from cacheon_subnet.slots.spec import ShapeCase, SlotSpec


def _dims(family: str, c: ShapeCase, p: ModelProfile) -> tuple[dict[str, int], dict, dict] | None:
    """(dims, params, constants) of `c` on profile `p`, or None where the slot does not apply."""
    d, params, consts = dict(c.dims), dict(c.params), dict(c.constants)
    if family in ("norm", "collective"):
        d["H"] = p.hidden
        if "eps" in params:
            params["eps"] = p.rms_eps
    elif family == "activation":
        d["D"] = p.intermediate
    elif family == "attention":
        d.update(HQ=p.n_heads, HK=p.n_kv_heads, D=p.head_dim)
        params["sm_scale"] = p.head_dim**-0.5
    elif family == "rope":
        d.update(HQ=p.n_heads, HK=p.n_kv_heads, D=p.head_dim, P=min(d["P"], p.max_position))
        consts["rope_theta"] = p.rope_theta
    elif family == "moe":
        if p.moe is None:
            return None
        m = p.moe
        d.update({k: v for k, v in (("E", m.n_experts), ("K", m.top_k)) if k in d})
        if "I" in d:
            d.update(H=p.hidden, I=m.moe_intermediate)
        if "renormalize" in params:
            params["renormalize"] = m.norm_topk_prob
        if "topk" in params:
            params["topk"] = m.top_k
    else:
        return None
    return d, params, consts


def for_profile(spec: SlotSpec, c: ShapeCase, p: ModelProfile) -> ShapeCase | None:
    """`c` on profile `p` (label `<p.name>/<the case's own tail>`), or None (see module doc)."""
    got = _dims(spec.id.split(".", 1)[0], c, p)
    if got is None:
        return None
    dims, params, consts = got
    tail = c.label.split("/", 1)[-1]
    return dataclasses.replace(c, label=f"{p.name}/{tail}", profile=p.name, dims=dims, params=params, constants=consts)


def profile_cases(spec: SlotSpec, cases: Sequence[ShapeCase], p: ModelProfile) -> list[ShapeCase]:
    """The slot's workload on `p`: every case re-targeted, duplicates (same dims and params) dropped."""
    out, seen = [], set()
    for c in cases:
        r = for_profile(spec, c, p)
        if r is None:
            continue
        key = (tuple(sorted(r.dims.items())), tuple(sorted((k, str(v)) for k, v in r.params.items())))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out
