"""Deterministic synthetic HF-format checkpoints for the arena, made locally.

SGLang's dummy loader fills weights with U(+-1e-3), which gives near-uniform logits: every
kernel then "agrees" and quality checks judge nothing. Instead we write a seeded checkpoint whose
tensor names and shapes are exactly what SGLang 0.5.13.post1's `Qwen3ForCausalLM.load_weights`
(srt/models/qwen3.py) and `Qwen3MoeForCausalLM.load_weights` (srt/models/qwen3_moe.py) consume
from an HF checkpoint, so the engine loads it with `load_format="auto"` like a real model.

Init recipe (RECIPE_VERSION), every tensor drawn in float32 from its own torch.Generator seeded
with the first 8 bytes of sha256(f"{seed}:{name}"), then cast to the config's dtype:
  * linear / embedding / router weights and attention biases ~ N(0, initializer_range)
  * o_proj and down_proj (dense and expert) ~ N(0, initializer_range / sqrt(2 * num_layers)),
    GPT-2 style, so the residual stream stays bounded with depth
  * RMSNorm weights = clamp(1 + 0.2 * N(0, 1), 0.3, 2.0), deliberately not all ones: a kernel
    that ignores the norm weight must change the outputs.
Bytes are reproducible for the same (torch version, generator device); a CUDA generator draws
different numbers than the CPU one, so the stamp records the device and per-file sha256.

write_tensors / read_cached are that writer for any weight source (arena/model/train.py writes trained
weights through them), so every arena checkpoint shares one naming, stamp and caching rule.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

RECIPE_VERSION = "cacheon.synthckpt/1"
STAMP_NAME = "cacheon_checkpoint.json"
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
SHARD_BYTES = 2 * 1024**3  # HF-style shards of at most ~2 GiB
NORM_STD = 0.2
NORM_CLAMP = (0.3, 2.0)

_ARCH = {"qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


class CheckpointError(RuntimeError):
    """out_dir holds something that is not the checkpoint asked for."""


@dataclass(frozen=True)
class CheckpointInfo:
    """What was written (or found cached): bytes = tensor payload, as in the index total_size."""

    path: Path
    recipe_digest: str
    n_params: int
    bytes: int
    files: tuple[str, ...] = ()
    weights_sha256: str = ""  # sha256 over the per-file sha256s, in file order


@dataclass(frozen=True)
class TensorSpec:
    """One checkpoint tensor: HF name, shape and which init rule draws it."""

    name: str
    shape: tuple[int, ...]
    kind: str  # "linear" | "residual_out" | "norm" | "bias"


def recipe_digest(config: Mapping[str, Any], seed: int) -> str:
    """sha256 of canonical JSON {config, seed, recipe}: the checkpoint's identity."""
    doc = {"config": config, "recipe": RECIPE_VERSION, "seed": int(seed)}
    canon = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canon.encode()).hexdigest()


def _req(config: Mapping[str, Any], key: str) -> int:
    if key not in config:
        raise ValueError(f"checkpoint config lacks required key {key!r}")
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"checkpoint config {key!r} must be a positive int, got {value!r}")
    return value


def _dtype(config: Mapping[str, Any]) -> torch.dtype:
    name = config.get("torch_dtype", config.get("dtype", "bfloat16"))
    if name not in _DTYPES:
        raise ValueError(f"checkpoint config torch_dtype {name!r} not in {sorted(_DTYPES)}")
    return _DTYPES[name]


def _check_config(config: Mapping[str, Any]) -> str:
    """Reject configs whose checkpoint SGLang 0.5.13.post1 would load differently from HF."""
    model_type = config.get("model_type")
    if model_type not in _ARCH:
        raise ValueError(f"checkpoint model_type {model_type!r} not in {sorted(_ARCH)}")
    archs = config.get("architectures")
    if archs != [_ARCH[model_type]]:
        raise ValueError(
            f"checkpoint config architectures must be [{_ARCH[model_type]!r}] for "
            f"model_type {model_type!r} (SGLang picks the model class from it), got {archs!r}"
        )
    if config.get("hidden_act", "silu") != "silu":
        raise ValueError("checkpoint config hidden_act must be 'silu' (SGLang Qwen3 MLP)")
    heads, kv = _req(config, "num_attention_heads"), _req(config, "num_key_value_heads")
    if heads % kv:
        raise ValueError(f"num_attention_heads {heads} not a multiple of num_key_value_heads {kv}")
    if model_type == "qwen3_moe":
        # qwen3_moe.py Qwen3MoeDecoderLayer: "Qwen3MoE all layers are sparse" -- it ignores
        # mlp_only_layers / decoder_sparse_step, so a dense layer's weights would be dropped.
        if config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) != 1:
            raise ValueError(
                "qwen3_moe: SGLang 0.5.13.post1 builds every layer sparse; mlp_only_layers "
                "must be empty and decoder_sparse_step 1"
            )
        # Qwen3MoeForCausalLM always owns a separate lm_head and never copies embed_tokens in.
        if config.get("tie_word_embeddings", False):
            raise ValueError("qwen3_moe: tie_word_embeddings must be false (SGLang never ties it)")
        if _req(config, "num_experts_per_tok") > _req(config, "num_experts"):
            raise ValueError("qwen3_moe: num_experts_per_tok exceeds num_experts")
    return model_type


def tensor_specs(config: Mapping[str, Any]) -> list[TensorSpec]:
    """Every tensor of the HF checkpoint, in HF order, with its init kind."""
    model_type = _check_config(config)
    hidden, layers = _req(config, "hidden_size"), _req(config, "num_hidden_layers")
    vocab, heads = _req(config, "vocab_size"), _req(config, "num_attention_heads")
    kv = _req(config, "num_key_value_heads")
    head_dim = int(config.get("head_dim") or hidden // heads)
    bias = bool(config.get("attention_bias", False))
    specs = [TensorSpec("model.embed_tokens.weight", (vocab, hidden), "linear")]
    for i in range(layers):
        p = f"model.layers.{i}"
        specs.append(TensorSpec(f"{p}.input_layernorm.weight", (hidden,), "norm"))
        attn = {"q_proj": heads * head_dim, "k_proj": kv * head_dim, "v_proj": kv * head_dim}
        for proj, out in attn.items():
            specs.append(TensorSpec(f"{p}.self_attn.{proj}.weight", (out, hidden), "linear"))
            if bias:
                specs.append(TensorSpec(f"{p}.self_attn.{proj}.bias", (out,), "bias"))
        specs.append(TensorSpec(f"{p}.self_attn.o_proj.weight", (hidden, heads * head_dim), "residual_out"))
        if bias:  # qwen3.py / qwen3_moe.py: o_proj = RowParallelLinear(..., bias=attention_bias)
            specs.append(TensorSpec(f"{p}.self_attn.o_proj.bias", (hidden,), "bias"))
        specs.append(TensorSpec(f"{p}.self_attn.q_norm.weight", (head_dim,), "norm"))
        specs.append(TensorSpec(f"{p}.self_attn.k_norm.weight", (head_dim,), "norm"))
        specs.append(TensorSpec(f"{p}.post_attention_layernorm.weight", (hidden,), "norm"))
        if model_type == "qwen3":
            specs.extend(_mlp_specs(f"{p}.mlp", hidden, _req(config, "intermediate_size")))
        else:
            experts = _req(config, "num_experts")
            specs.append(TensorSpec(f"{p}.mlp.gate.weight", (experts, hidden), "linear"))
            inter = _req(config, "moe_intermediate_size")
            for e in range(experts):
                specs.extend(_mlp_specs(f"{p}.mlp.experts.{e}", hidden, inter))
    specs.append(TensorSpec("model.norm.weight", (hidden,), "norm"))
    if not config.get("tie_word_embeddings", False):
        specs.append(TensorSpec("lm_head.weight", (vocab, hidden), "linear"))
    return specs


def _mlp_specs(prefix: str, hidden: int, inter: int) -> list[TensorSpec]:
    return [
        TensorSpec(f"{prefix}.gate_proj.weight", (inter, hidden), "linear"),
        TensorSpec(f"{prefix}.up_proj.weight", (inter, hidden), "linear"),
        TensorSpec(f"{prefix}.down_proj.weight", (hidden, inter), "residual_out"),
    ]


def _tensor_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def make_tensor(spec: TensorSpec, config: Mapping[str, Any], seed: int, device: str = "cpu") -> torch.Tensor:
    """Draw one tensor by the recipe; returned contiguous on CPU in the config dtype."""
    gen = torch.Generator(device=device)
    gen.manual_seed(_tensor_seed(seed, spec.name))
    x = torch.randn(spec.shape, generator=gen, device=device, dtype=torch.float32)
    std = float(config.get("initializer_range", 0.02))
    if spec.kind == "norm":
        x = x.mul_(NORM_STD).add_(1.0).clamp_(*NORM_CLAMP)
    elif spec.kind == "residual_out":
        x = x.mul_(std / math.sqrt(2 * _req(config, "num_hidden_layers")))
    else:
        x = x.mul_(std)
    return x.to(_dtype(config)).cpu().contiguous()


def _shard_plan(specs: list[TensorSpec], itemsize: int, shard_bytes: int) -> list[list[TensorSpec]]:
    shards: list[list[TensorSpec]] = [[]]
    size = 0
    for spec in specs:
        n = math.prod(spec.shape) * itemsize
        if shards[-1] and size + n > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(spec)
        size += n
    return shards


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def _combined(file_sums: Mapping[str, str]) -> str:
    return hashlib.sha256("".join(f"{k}:{v}\n" for k, v in file_sums.items()).encode()).hexdigest()


def read_cached(out_dir: Path, digest: str, key: str = "recipe_digest") -> CheckpointInfo | None:
    """The checkpoint in out_dir whose stamp[key] is digest; None when out_dir is absent or empty.

    key lets a writer cache by what was *asked* (a trained checkpoint's "request_digest") while
    the returned recipe_digest stays what the directory actually holds. Anything else in out_dir
    raises: we never overwrite a directory we cannot prove is ours.
    """
    out_dir = Path(out_dir)
    if not out_dir.exists():
        return None
    stamp = out_dir / STAMP_NAME
    if not stamp.is_file():
        if out_dir.is_dir() and not any(out_dir.iterdir()):
            return None
        raise CheckpointError(f"{out_dir} exists without {STAMP_NAME}; refusing to overwrite it")
    doc = json.loads(stamp.read_text())
    if doc.get(key) != digest:
        raise CheckpointError(
            f"{out_dir} holds checkpoint {doc.get(key)!r}, not the requested {digest!r}; use another directory or delete it"
        )
    sums: dict[str, str] = doc["files"]
    for name in sums:
        if not (out_dir / name).is_file():
            raise CheckpointError(f"{out_dir} is stamped {digest} but lacks {name}")
    return CheckpointInfo(
        path=out_dir,
        recipe_digest=str(doc["recipe_digest"]),
        n_params=int(doc["n_params"]),
        bytes=int(doc["bytes"]),
        files=tuple(sums),
        weights_sha256=_combined(sums),
    )


def write_tensors(
    config: Mapping[str, Any],
    out_dir: Path,
    make: Callable[[TensorSpec], torch.Tensor],
    stamp_fields: Mapping[str, Any],
    *,
    cache_key: str = "recipe_digest",
    shard_bytes: int = SHARD_BYTES,
) -> CheckpointInfo:
    """Write config.json + safetensors + stamp into out_dir atomically; reuse a matching cache.

    make(spec) supplies each tensor of tensor_specs(config) (drawn, or taken from a trained state
    dict), shard by shard so a big model never sits in host memory whole; its shape is checked
    and it is cast to the config dtype. stamp_fields must carry "recipe_digest" and cache_key.
    """
    from safetensors.torch import save_file  # optional dep: the dev/gpu extras carry it

    out_dir = Path(out_dir)
    cached = read_cached(out_dir, str(stamp_fields[cache_key]), cache_key)
    if cached is not None:
        return cached
    specs = tensor_specs(config)
    dtype = _dtype(config)
    itemsize = torch.empty((), dtype=dtype).element_size()
    plan = _shard_plan(specs, itemsize, shard_bytes)
    n = len(plan)
    names = [f"model-{k:05d}-of-{n:05d}.safetensors" for k in range(1, n + 1)]
    names = [SINGLE_NAME] if n == 1 else names
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; the engine may run as another user
        (tmp / "config.json").write_text(json.dumps(dict(config), indent=2) + "\n")
        weight_map: dict[str, str] = {}
        sums: dict[str, str] = {}
        n_params = 0
        for fname, shard in zip(names, plan):
            tensors = {s.name: _checked(s, make(s), dtype) for s in shard}
            save_file(tensors, str(tmp / fname), metadata={"format": "pt"})
            n_params += sum(t.numel() for t in tensors.values())
            weight_map.update({name: fname for name in tensors})
            del tensors
            sums[fname] = _file_sha256(tmp / fname)
        total = n_params * itemsize
        if n > 1:
            index = {"metadata": {"total_size": total}, "weight_map": weight_map}
            (tmp / INDEX_NAME).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        stamp = {
            "schema": "cacheon.checkpoint/1",
            **stamp_fields,
            "model_type": config["model_type"],
            "n_params": n_params,
            "bytes": total,
            "files": sums,
        }
        (tmp / STAMP_NAME).write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")
        for f in tmp.iterdir():  # readable by every later engine: each runs as its own leased uid, the
            os.chmod(f, 0o644)  # writer's umask is 077 and the host re-owns the files once it is gone
        if out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()
        try:
            os.rename(tmp, out_dir)
        except OSError:  # lost a race: another writer finished first; accept only the same recipe
            raced = read_cached(out_dir, str(stamp_fields[cache_key]), cache_key)
            if raced is None:
                raise
            return raced
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return CheckpointInfo(
        path=out_dir,
        recipe_digest=str(stamp_fields["recipe_digest"]),
        n_params=n_params,
        bytes=total,
        files=tuple(sums),
        weights_sha256=_combined(sums),
    )


def _checked(spec: TensorSpec, tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if tuple(tensor.shape) != spec.shape:
        raise ValueError(f"{spec.name}: shape {tuple(tensor.shape)} != expected {spec.shape}")
    return tensor.detach().to(dtype).cpu().contiguous()


def write_checkpoint(
    config: Mapping[str, Any],
    out_dir: Path,
    seed: int,
    device: str = "cpu",
    *,
    shard_bytes: int = SHARD_BYTES,
) -> CheckpointInfo:
    """Write the seeded random-init checkpoint (module docstring) into out_dir; reuse a cache."""
    stamp = {
        "recipe_digest": recipe_digest(config, seed),
        "recipe": RECIPE_VERSION,
        "seed": int(seed),
        "generator": {"device": torch.device(device).type, "torch": torch.__version__},
    }
    try:
        return write_tensors(
            config,
            out_dir,
            lambda s: make_tensor(s, config, seed, device),
            stamp,
            shard_bytes=shard_bytes,
        )
    finally:
        if torch.device(device).type == "cuda":  # hand cached blocks back before the engine starts
            torch.cuda.empty_cache()
