"""Model profiles: the shapes real SGLang deployments push through each chokepoint.

Workload shapes of every slot are derived from these, so a kernel is judged on the extents
it will actually see (hidden sizes, head counts, expert counts, decode batch sizes, prefill
chunks), not on shapes a miner picked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


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


_REGISTRY: dict[str, ModelProfile] = {
    p.name: p
    for p in (
        # Qwen3-0.6B (config.json of the public checkpoint).
        ModelProfile("qwen3-0.6b", 1024, 3072, 16, 8, 128, 28, 151936, 1e-6, 1e6, 40960),
        # Qwen3-8B.
        ModelProfile("qwen3-8b", 4096, 12288, 32, 8, 128, 36, 151936, 1e-6, 1e6, 40960),
        # Qwen3-30B-A3B: the smallest public Qwen3-MoE.
        ModelProfile(
            "qwen3-30b-a3b",
            2048,
            6144,
            32,
            4,
            128,
            48,
            151936,
            1e-6,
            1e6,
            40960,
            moe=MoEProfile(n_experts=128, top_k=8, moe_intermediate=768, norm_topk_prob=True),
        ),
        # The synthetic MoE the arena builds locally (small enough for one H200 in minutes).
        ModelProfile(
            "qwen3-moe-mini",
            1024,
            3072,
            16,
            4,
            128,
            4,
            32000,
            1e-6,
            1e6,
            4096,
            moe=MoEProfile(n_experts=16, top_k=4, moe_intermediate=512, norm_topk_prob=True),
        ),
    )
}
PROFILES: Mapping[str, ModelProfile] = MappingProxyType(_REGISTRY)  # built-ins + register()ed checkpoints

DENSE = ("qwen3-0.6b", "qwen3-8b")
MOE = ("qwen3-30b-a3b", "qwen3-moe-mini")

# Token counts per forward: decode batches (one token per request) and prefill chunks.
DECODE_BATCHES = {"verify": (1, 7), "gpu": (1, 8, 64), "bench": (1, 32, 256)}
PREFILL_TOKENS = {"verify": (33,), "gpu": (512,), "bench": (2048, 8192)}


def get(name: str) -> ModelProfile:
    return PROFILES[name]


def register(profile: ModelProfile) -> ModelProfile:
    """Make a checkpoint-derived profile known by name in this process (slot cases re-targeted to
    it carry their own constants, so a worker process never needs the registry)."""
    have = _REGISTRY.get(profile.name)
    if have is not None and have != profile:
        raise ValueError(f"model profile {profile.name!r} is already registered with other shapes")
    _REGISTRY[profile.name] = profile
    return profile


# model_type -> (experts key, top-k key, expert width key, renormalise key or a fixed value)
_MOE_KEYS: dict[str, tuple[str, str, str, str | bool]] = {
    "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob"),
    "qwen2_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob"),
    "mixtral": ("num_local_experts", "num_experts_per_tok", "intermediate_size", True),
}
DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def from_hf_config(doc: Mapping[str, object], name: str) -> ModelProfile:
    """The shapes a checkpoint pushes through every slot, read from its HF config.json.
    Missing or ill-typed keys are a ValueError naming the key (never a guessed shape); only
    HF's own documented defaults apply (num_key_value_heads = heads, head_dim = hidden / heads,
    rope_theta 10000, norm_topk_prob false)."""
    model_type = doc.get("model_type")
    if model_type not in DENSE_TYPES and model_type not in _MOE_KEYS:
        raise ValueError(f"model_type {model_type!r}: supported {sorted(DENSE_TYPES + tuple(_MOE_KEYS))}")

    def num(key: str, kind: type = int, default: object = None) -> int | float:
        v = doc.get(key, default)
        if v is None:
            raise ValueError(f"config.json lacks {key!r}")
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
        if not ok or (kind is int and not isinstance(v, int)):
            raise ValueError(f"config.json {key!r} = {v!r}: expected a positive {kind.__name__}")
        return kind(v)

    hidden, heads = int(num("hidden_size")), int(num("num_attention_heads"))
    kv = int(num("num_key_value_heads", int, heads))
    if heads % kv:
        raise ValueError(f"config.json num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")
    # a present head_dim is checked like every other key (a ValueError naming it, not int()'s TypeError)
    given = doc.get("head_dim")
    head_dim = int(num("head_dim")) if given else (hidden // heads if hidden % heads == 0 else None)
    if head_dim is None:
        raise ValueError(f"config.json lacks 'head_dim' and hidden_size {hidden} is not a multiple of {heads} heads")
    moe = None
    if model_type in _MOE_KEYS:
        ek, kk, ik, rk = _MOE_KEYS[model_type]
        renorm = rk if isinstance(rk, bool) else bool(doc.get(rk, False))
        moe = MoEProfile(n_experts=int(num(ek)), top_k=int(num(kk)), moe_intermediate=int(num(ik)), norm_topk_prob=renorm)
        if moe.top_k > moe.n_experts:
            raise ValueError(f"config.json {kk} {moe.top_k} exceeds {ek} {moe.n_experts}")
    return ModelProfile(
        name,
        hidden,
        int(num("intermediate_size")),
        heads,
        kv,
        int(head_dim),
        int(num("num_hidden_layers")),
        int(num("vocab_size")),
        float(num("rms_norm_eps", float)),
        float(num("rope_theta", float, 10000.0)),
        int(num("max_position_embeddings")),
        moe,
    )


def token_counts(tier: str) -> tuple[tuple[str, int], ...]:
    """(label, tokens) pairs for one tier: decode batches first, then prefill chunks."""
    return tuple((f"decode-bs{n}", n) for n in DECODE_BATCHES[tier]) + tuple(
        (f"prefill-{n}", n) for n in PREFILL_TOKENS[tier]
    )
