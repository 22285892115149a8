"""Model profiles: the shapes real SGLang deployments push through each chokepoint.

Workload shapes of every slot are derived from these, so a kernel is judged on the extents
it will actually see (hidden sizes, head counts, expert counts, decode batch sizes, prefill
chunks), not on shapes a miner picked.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping


@dataclass(frozen=True)
class MoEProfile:
    n_experts: int
    top_k: int
    moe_intermediate: int
    norm_topk_prob: bool


@dataclass(frozen=True)
class ModelProfile:
    name: str
    hidden: int
    intermediate: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    layers: int
    vocab: int
    rms_eps: float
    rope_theta: float
    max_position: int
    moe: MoEProfile | None = None

    @property
    def q_size(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.n_kv_heads * self.head_dim


PROFILES: Mapping[str, ModelProfile] = MappingProxyType(
    {
        p.name: p
        for p in (
            # Qwen3-0.6B (config.json of the public checkpoint).
            ModelProfile("qwen3-0.6b", 1024, 3072, 16, 8, 128, 28, 151936, 1e-6, 1e6, 40960),
            # Qwen3-8B.
            ModelProfile("qwen3-8b", 4096, 12288, 32, 8, 128, 36, 151936, 1e-6, 1e6, 40960),
            # Qwen3-30B-A3B: the smallest public Qwen3-MoE.
            ModelProfile(
                "qwen3-30b-a3b", 2048, 6144, 32, 4, 128, 48, 151936, 1e-6, 1e6, 40960,
                moe=MoEProfile(n_experts=128, top_k=8, moe_intermediate=768, norm_topk_prob=True),
            ),
            # The synthetic MoE the arena builds locally (small enough for one H200 in minutes).
            ModelProfile(
                "qwen3-moe-mini", 1024, 3072, 16, 4, 128, 4, 32000, 1e-6, 1e6, 4096,
                moe=MoEProfile(n_experts=16, top_k=4, moe_intermediate=512, norm_topk_prob=True),
            ),
        )
    }
)

DENSE = ("qwen3-0.6b", "qwen3-8b")
MOE = ("qwen3-30b-a3b", "qwen3-moe-mini")

# Token counts per forward: decode batches (one token per request) and prefill chunks.
DECODE_BATCHES = {"verify": (1, 7), "gpu": (1, 8, 64), "bench": (1, 32, 256)}
PREFILL_TOKENS = {"verify": (33,), "gpu": (512,), "bench": (2048, 8192)}


def get(name: str) -> ModelProfile:
    return PROFILES[name]


def token_counts(tier: str) -> tuple[tuple[str, int], ...]:
    """(label, tokens) pairs for one tier: decode batches first, then prefill chunks."""
    return tuple((f"decode-bs{n}", n) for n in DECODE_BATCHES[tier]) + tuple(
        (f"prefill-{n}", n) for n in PREFILL_TOKENS[tier]
    )
