"""Synthetic checkpoints: exact HF/SGLang names and shapes, determinism, init stats, caching."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("safetensors")
from safetensors import safe_open  # noqa: E402

from arena.model.checkpoint import (  # noqa: E402
    CheckpointError,
    recipe_digest,
    write_checkpoint,
)

DENSE = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "vocab_size": 512,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "initializer_range": 0.02,
    "torch_dtype": "bfloat16",
}
MOE = {
    **DENSE,
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "tie_word_embeddings": False,
}


def _dense_expected(bias: bool = False) -> dict[str, tuple[int, ...]]:
    """Written out by hand from HF Qwen3 naming / SGLang qwen3.py load_weights."""
    exp: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (512, 64),
        "model.norm.weight": (64,),
    }
    for i in range(2):
        p = f"model.layers.{i}"
        exp[f"{p}.input_layernorm.weight"] = (64,)
        exp[f"{p}.post_attention_layernorm.weight"] = (64,)
        exp[f"{p}.self_attn.q_proj.weight"] = (4 * 16, 64)
        exp[f"{p}.self_attn.k_proj.weight"] = (2 * 16, 64)
        exp[f"{p}.self_attn.v_proj.weight"] = (2 * 16, 64)
        exp[f"{p}.self_attn.o_proj.weight"] = (64, 4 * 16)
        exp[f"{p}.self_attn.q_norm.weight"] = (16,)
        exp[f"{p}.self_attn.k_norm.weight"] = (16,)
        if bias:
            exp[f"{p}.self_attn.q_proj.bias"] = (64,)
            exp[f"{p}.self_attn.k_proj.bias"] = (32,)
            exp[f"{p}.self_attn.v_proj.bias"] = (32,)
            exp[f"{p}.self_attn.o_proj.bias"] = (64,)
        exp[f"{p}.mlp.gate_proj.weight"] = (128, 64)
        exp[f"{p}.mlp.up_proj.weight"] = (128, 64)
        exp[f"{p}.mlp.down_proj.weight"] = (64, 128)
    return exp


def _moe_expected() -> dict[str, tuple[int, ...]]:
    exp = {k: v for k, v in _dense_expected().items() if ".mlp." not in k}
    exp["lm_head.weight"] = (512, 64)
    for i in range(2):
        p = f"model.layers.{i}.mlp"
        exp[f"{p}.gate.weight"] = (4, 64)
        for e in range(4):
            exp[f"{p}.experts.{e}.gate_proj.weight"] = (32, 64)
            exp[f"{p}.experts.{e}.up_proj.weight"] = (32, 64)
            exp[f"{p}.experts.{e}.down_proj.weight"] = (64, 32)
    return exp


def _load(d: Path) -> dict[str, torch.Tensor]:
    files = sorted(d.glob("*.safetensors"))
    out: dict[str, torch.Tensor] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            for k in sf.keys():
                assert k not in out, f"{k} duplicated across shards"
                out[k] = sf.get_tensor(k)
    return out


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [
        (DENSE, _dense_expected()),
        (MOE, _moe_expected()),
        (
            {**DENSE, "attention_bias": True, "tie_word_embeddings": False},
            {**_dense_expected(bias=True), "lm_head.weight": (512, 64)},
        ),
    ],
    ids=["qwen3-tied", "qwen3_moe", "qwen3-bias-untied"],
)
def test_exact_names_shapes_dtype(tmp_path: Path, cfg: dict, expected: dict) -> None:
    info = write_checkpoint(cfg, tmp_path / "ck", seed=7)
    tensors = _load(tmp_path / "ck")
    assert {k: tuple(v.shape) for k, v in tensors.items()} == expected
    assert all(t.dtype == torch.bfloat16 for t in tensors.values())
    assert info.n_params == sum(t.numel() for t in tensors.values())
    assert info.bytes == 2 * info.n_params
    assert json.loads((tmp_path / "ck" / "config.json").read_text()) == cfg
    assert info.recipe_digest == recipe_digest(cfg, 7)
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == sorted(
        ["config.json", "model.safetensors", "cacheon_checkpoint.json"]
    )


def test_sharded_index_matches_files(tmp_path: Path) -> None:
    info = write_checkpoint(MOE, tmp_path / "ck", seed=7, shard_bytes=60_000)
    d = tmp_path / "ck"
    shards = sorted(p.name for p in d.glob("*.safetensors"))
    assert len(shards) > 1 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    index = json.loads((d / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards)
    assert set(index["weight_map"]) == set(_moe_expected())
    assert index["metadata"]["total_size"] == info.bytes
    write_checkpoint(MOE, tmp_path / "one", seed=7)
    a, b = _load(d), _load(tmp_path / "one")
    assert all(torch.equal(a[k], b[k]) for k in b)


def test_determinism(tmp_path: Path) -> None:
    a = write_checkpoint(DENSE, tmp_path / "a", seed=1)
    b = write_checkpoint(DENSE, tmp_path / "b", seed=1)
    c = write_checkpoint(DENSE, tmp_path / "c", seed=2)
    ab = (tmp_path / "a" / "model.safetensors").read_bytes()
    assert ab == (tmp_path / "b" / "model.safetensors").read_bytes()
    assert ab != (tmp_path / "c" / "model.safetensors").read_bytes()
    assert a.recipe_digest == b.recipe_digest != c.recipe_digest
    assert a.weights_sha256 == b.weights_sha256 != c.weights_sha256
    ta, tc = _load(tmp_path / "a"), _load(tmp_path / "c")
    assert not torch.equal(ta["model.layers.0.self_attn.q_proj.weight"], tc["model.layers.0.self_attn.q_proj.weight"])
    # each tensor has its own stream: two same-shaped tensors differ
    assert not torch.equal(ta["model.layers.0.mlp.gate_proj.weight"], ta["model.layers.0.mlp.up_proj.weight"])


def test_init_statistics(tmp_path: Path) -> None:
    write_checkpoint(MOE, tmp_path / "ck", seed=3)
    t = {k: v.float() for k, v in _load(tmp_path / "ck").items()}
    norms = [k for k in t if k.endswith(("layernorm.weight", "q_norm.weight", "k_norm.weight"))]
    norms.append("model.norm.weight")
    assert len(norms) == 2 * 4 + 1
    for k in norms:
        assert t[k].min() >= 0.3 and t[k].max() <= 2.0, k
    allnorm = torch.cat([t[k] for k in norms])
    assert not torch.all(allnorm == 1.0)
    assert 0.1 < allnorm.std() < 0.3 and abs(allnorm.mean() - 1.0) < 0.05
    plain = [
        k for k in t if k.endswith(".weight") and k not in norms and not k.endswith(("o_proj.weight", "down_proj.weight"))
    ]
    assert "model.layers.1.mlp.gate.weight" in plain and "lm_head.weight" in plain
    for k in plain:
        if t[k].numel() >= 2048:  # per tensor where the sample is big enough for 10 %
            assert abs(t[k].std().item() - 0.02) < 0.002, k
    every = torch.cat([t[k].flatten() for k in plain])
    assert abs(every.std().item() - 0.02) < 0.002 and abs(every.mean().item()) < 0.001
    scaled = [k for k in t if k.endswith(("o_proj.weight", "down_proj.weight"))]
    assert len(scaled) == 2 * (1 + 4)
    flat = torch.cat([t[k].flatten() for k in scaled])
    assert abs(flat.std().item() - 0.02 / 2.0) < 0.001  # 0.02 / sqrt(2 * 2 layers)


def test_cache_hit_does_not_rewrite(tmp_path: Path) -> None:
    first = write_checkpoint(DENSE, tmp_path / "ck", seed=5)
    f = tmp_path / "ck" / "model.safetensors"
    os.utime(f, (1_000_000, 1_000_000))
    before = f.stat().st_mtime_ns
    again = write_checkpoint(DENSE, tmp_path / "ck", seed=5)
    assert f.stat().st_mtime_ns == before
    assert again == first
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]  # no temp dir left behind


def test_mismatched_stamp_raises(tmp_path: Path) -> None:
    write_checkpoint(DENSE, tmp_path / "ck", seed=5)
    with pytest.raises(CheckpointError, match=str(tmp_path / "ck")):
        write_checkpoint(DENSE, tmp_path / "ck", seed=6)
    with pytest.raises(CheckpointError, match="ck"):
        write_checkpoint({**DENSE, "vocab_size": 256}, tmp_path / "ck", seed=5)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "x").write_text("x")
    with pytest.raises(CheckpointError, match="junk"):
        write_checkpoint(DENSE, junk, seed=5)
    (tmp_path / "empty").mkdir()
    assert write_checkpoint(DENSE, tmp_path / "empty", seed=5).n_params > 0


def test_recipe_digest_tracks_config_and_seed() -> None:
    base = recipe_digest(DENSE, 1)
    assert base == recipe_digest(dict(reversed(list(DENSE.items()))), 1)  # key order irrelevant
    assert base != recipe_digest({**DENSE, "rms_norm_eps": 1e-5}, 1)
    assert base != recipe_digest({**DENSE, "initializer_range": 0.03}, 1)
    assert base != recipe_digest(DENSE, 2)
    assert len(base) == 64


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({**MOE, "mlp_only_layers": [1]}, "mlp_only_layers"),
        ({**MOE, "decoder_sparse_step": 2}, "decoder_sparse_step"),
        ({**MOE, "tie_word_embeddings": True}, "tie_word_embeddings"),
        ({**DENSE, "model_type": "llama"}, "model_type"),
        ({**DENSE, "architectures": ["Qwen3MoeForCausalLM"]}, "architectures"),
        ({k: v for k, v in DENSE.items() if k != "intermediate_size"}, "intermediate_size"),
    ],
)
def test_rejects_configs_sglang_would_misload(tmp_path: Path, cfg: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        write_checkpoint(cfg, tmp_path / "ck", seed=1)
    assert not (tmp_path / "ck").exists()


def test_a_checkpoint_written_under_umask_077_is_readable_by_every_later_engine(tmp_path: Path) -> None:
    """The checkpoint step's engine writes with umask 077; each later engine runs as another leased
    uid and the host re-owns the files once the writer is gone (sandbox.stop: reclaim_tree). On
    the H200 (2026-12-02) every later engine then failed to open model.safetensors."""
    old = os.umask(0o077)
    try:
        write_checkpoint(MOE, tmp_path / "ck", seed=7, shard_bytes=60_000)
    finally:
        os.umask(old)
    d = tmp_path / "ck"
    assert d.stat().st_mode & 0o005 == 0o005
    files = list(d.iterdir())
    assert files and all(f.stat().st_mode & 0o004 for f in files), [(f.name, oct(f.stat().st_mode)) for f in files]
