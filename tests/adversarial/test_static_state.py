"""Cross-call state through a Triton decorator object (static/state_autotuner_keys_counter,
static/state_heuristics_values_memo): without the gate the attacks really keep state.

`triton.autotune` / `triton.heuristics` return module-lifetime objects whose `keys` (a list) and
`values` (a dict) carry dict-method names that VALUE_ATTRS allowed; read as values they are shared
containers a bundle could append to or store into. policy.py now allows a method name only as
the function of a call (`allowlist.VALUE_DATA` lists the attributes that may be read).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import torch

from cacheon_subnet.policy.scan import scan_source

CORPUS = Path(__file__).resolve().parent / "static"


def _load(name: str):
    os.environ.setdefault("TRITON_INTERPRET", "1")
    spec = importlib.util.spec_from_file_location(f"adv_{name}", CORPUS / name / "kernel.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ref(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def test_autotuner_keys_counter_turns_wrong_after_400_calls() -> None:
    mod = _load("state_autotuner_keys_counter")
    x, w, out = torch.randn(4, 64), torch.randn(64), torch.empty(4, 64)
    for _ in range(399):  # keys starts as ["n"]: 400 entries after 399 calls
        mod.rmsnorm(x, w, out, 1e-6)
    assert torch.allclose(out, _ref(x, w, 1e-6))
    mod.rmsnorm(x, w, out, 1e-6)  # the 400th call: the count survived 399 calls
    assert not torch.allclose(out, _ref(x, w, 1e-6))


def test_heuristics_values_memo_replays() -> None:
    mod = _load("state_heuristics_values_memo")
    w, out = torch.randn(64), torch.empty(4, 64)
    first = torch.randn(4, 64)
    mod.rmsnorm(first, w, out, 1e-6)
    second = torch.randn(4, 64)
    mod.rmsnorm(second, w, out, 1e-6)
    assert torch.equal(out, _ref(first, w, 1e-6))  # the first call's output, replayed


def test_method_names_only_as_calls() -> None:
    ok = (
        "import torch\n\ndef f(x, out):\n    v, i = x.topk(2)\n    d = {}\n    out.copy_(x.max(dim=-1).values"
        "[..., None] * 0 + v.sum() + len(list(d.keys())) + torch.finfo(x.dtype).max * 0)\n"
    )
    got = [f.rule for f in scan_source("k.py", ok)]
    assert got == ["P012"], got  # `.values` read off a return_types tuple: write `v, i = ...` instead
    assert [f.rule for f in scan_source("k.py", ok.replace(".values[..., None]", "[0][..., None]"))] == []
    bare = "def f(x):\n    g = x.add\n    return g\n"
    assert [f.rule for f in scan_source("k.py", bare)] == ["P012"]
