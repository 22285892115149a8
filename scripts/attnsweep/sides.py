"""The two sides timed against each other: the repo's example kernel under a forced launch config
(its shipped `_launch_config` is swapped only for the duration of a call) and stock SGLang's
decode_attention_fwd called exactly as TritonAttnBackend.forward_decode calls it."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnsweep.grid import Config
from attnsweep.inputs import scratch

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "attention.decode" / "decode.py"


def load_example() -> Any:
    """The example loaded by path under its own module name (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location("cacheon_sweep_attention_decode_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if not hasattr(mod, "_launch_config"):
        raise SystemExit(f"{EXAMPLE}: no _launch_config to replace")
    return mod


def default_config(mod: Any, batch: int, kv_heads: int) -> Config:
    """The example's shipped choice at this shape (the row marked * and `default`)."""
    return Config(*mod._launch_config(batch, kv_heads))


class Candidate:
    """The example under `cfg`: `_launch_config` is replaced for the duration of each call and
    counts its calls, so a wrapper that stopped consulting it shows up as an error."""

    def __init__(self, mod: Any, cfg: Config, t: dict[str, Any], sm_scale: float, bad_indices: Any = None) -> None:
        self.mod, self.cfg, self.t, self.sm_scale, self.calls = mod, cfg, t, sm_scale, 0
        self.s = scratch(t)
        self.indices = t["kv_indices"] if bad_indices is None else bad_indices
        self._orig = mod._launch_config

    def _picked(self, batch: int, kv_heads: int) -> tuple[int, int, int, int]:
        self.calls += 1
        c = self.cfg
        return c.block_n, c.warps, c.stages, c.splits

    def __call__(self) -> None:
        t, s = self.t, self.s
        self.mod._launch_config = self._picked
        try:
            self.mod.decode_attention(
                t["q"],
                t["k_buffer"],
                t["v_buffer"],
                s["o"],
                t["kv_indptr"],
                self.indices,
                t["num_kv_splits"],
                s["attn_logits"],
                s["attn_lse"],
                self.sm_scale,
            )
        finally:
            self.mod._launch_config = self._orig

    @property
    def out(self) -> Any:
        return self.s["o"]


def load_stock() -> tuple[Callable[..., None] | None, str]:
    try:
        from sglang.srt.layers.attention.triton_ops.decode_attention import decode_attention_fwd
    except Exception as e:  # noqa: BLE001 - SGLang absent (CPU box) or unimportable
        return None, f"stock SGLang unavailable: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return decode_attention_fwd, "sglang triton_ops.decode_attention.decode_attention_fwd"


def backend_use_pdl() -> bool:
    """TritonAttnBackend.use_pdl (triton_backend.py:185): is_arch_support_pdl() on CUDA, sm >= 90."""
    import torch

    if not torch.cuda.is_available():
        return False
    try:
        from sglang.jit_kernel.utils import is_arch_support_pdl

        return bool(is_arch_support_pdl())
    except Exception:  # noqa: BLE001 - the same rule, restated
        return torch.cuda.get_device_capability()[0] >= 9


class Stock:
    """Stock SGLang on the same inputs, with its own scratch (k/v scale 1.0, no logit cap or sinks)."""

    def __init__(self, fwd: Callable[..., None], t: dict[str, Any], sm_scale: float, use_pdl: bool) -> None:
        self.fwd, self.t, self.sm_scale, self.use_pdl = fwd, t, sm_scale, use_pdl
        self.s = scratch(t)

    def __call__(self) -> None:
        t, s = self.t, self.s
        self.fwd(
            t["q"],
            t["k_buffer"],
            t["v_buffer"],
            s["o"],
            t["kv_indptr"],
            t["kv_indices"],
            s["attn_logits"],
            s["attn_lse"],
            t["num_kv_splits"],
            s["attn_logits"].shape[2],
            self.sm_scale,
            1.0,
            1.0,
            logit_cap=0.0,
            sinks=None,
            xai_temperature_len=-1,
            has_mla=False,
            use_pdl=self.use_pdl,
        )

    @property
    def out(self) -> Any:
        return self.s["o"]
