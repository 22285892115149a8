"""Trained arena checkpoints: reference forward semantics, training, writing, recipe identity."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

pytest.importorskip("safetensors")
from safetensors import safe_open  # noqa: E402

from arena.model.checkpoint import CheckpointError, tensor_specs  # noqa: E402
from arena.model.train import (  # noqa: E402
    BYTE_VOCAB,
    Qwen3Reference,
    TrainRecipe,
    corpus_files,
    corpus_sequences,
    init_model,
    load_corpus,
    load_reference,
    lr_at,
    train,
    train_checkpoint,
    train_recipe_digest,
)

TINY = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "vocab_size": 256,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "max_position_embeddings": 512,
    "initializer_range": 0.02,
    "torch_dtype": "bfloat16",
}
FAST = TrainRecipe(steps=30, batch=8, seq_len=64, lr=1e-2)


def _naive_logits(state: dict[str, torch.Tensor], cfg: dict, ids: list[int]) -> torch.Tensor:
    """One decoder layer written out position by position, head by head, in fp32."""
    hd, nh, nkv, eps = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    w = {k.removeprefix("model.layers.0."): v.double() for k, v in state.items()}

    def rms(v: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return v / torch.sqrt((v * v).mean(-1, keepdim=True) + eps) * weight

    def lin(v: torch.Tensor, name: str) -> torch.Tensor:
        b = w.get(f"{name}.bias")
        return v @ w[f"{name}.weight"].T + (0 if b is None else b)

    def rot(vec: torch.Tensor, p: int) -> torch.Tensor:  # neox: pair i with i + hd/2
        out = vec.clone()
        for i in range(hd // 2):
            ang = p * cfg["rope_theta"] ** (-2.0 * i / hd)
            a, b = vec[i], vec[i + hd // 2]
            out[i], out[i + hd // 2] = a * math.cos(ang) - b * math.sin(ang), b * math.cos(ang) + a * math.sin(ang)
        return out

    emb = w["model.embed_tokens.weight"]
    x = emb[ids]
    h = rms(x, w["input_layernorm.weight"])
    q = lin(h, "self_attn.q_proj").view(len(ids), nh, hd)
    k = lin(h, "self_attn.k_proj").view(len(ids), nkv, hd)
    v = lin(h, "self_attn.v_proj").view(len(ids), nkv, hd)
    heads = torch.zeros(len(ids), nh, hd, dtype=torch.float64)
    for p in range(len(ids)):
        for hh in range(nh):
            g = hh // (nh // nkv)
            qv = rot(rms(q[p, hh], w["self_attn.q_norm.weight"]), p)
            scores = torch.stack([qv @ rot(rms(k[j, g], w["self_attn.k_norm.weight"]), j) for j in range(p + 1)])
            probs = torch.softmax(scores / math.sqrt(hd), 0)
            heads[p, hh] = sum(probs[j] * v[j, g] for j in range(p + 1))
    r = x + lin(heads.reshape(len(ids), nh * hd), "self_attn.o_proj")
    h2 = rms(r, w["post_attention_layernorm.weight"])
    gate = lin(h2, "mlp.gate_proj")
    r = r + lin(gate / (1 + torch.exp(-gate)) * lin(h2, "mlp.up_proj"), "mlp.down_proj")
    head = emb if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return rms(r, w["model.norm.weight"]) @ head.T


@pytest.mark.parametrize("bias", [False, True], ids=["plain", "bias-untied"])
def test_reference_matches_naive_one_layer(bias: bool) -> None:
    cfg = {**TINY, "num_hidden_layers": 1, "attention_bias": bias, "tie_word_embeddings": not bias}
    model = init_model(cfg, seed=3)
    state = model.state_dict()
    gen = torch.Generator().manual_seed(0)
    for t in state.values():  # larger weights, uneven norms: every path moves the logits
        if t.ndim == 2:
            t.mul_(15.0)
        else:
            t.add_(0.3 * torch.randn(t.shape, generator=gen))
    ids = [5, 200, 17, 99, 3, 3, 250, 42, 7, 128, 64, 1]
    got = model(torch.tensor([ids])).double()[0]
    want = _naive_logits(state, cfg, ids)
    assert got.shape == (len(ids), cfg["vocab_size"])
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_reference_is_causal_and_position_dependent() -> None:
    model = init_model(TINY, seed=1)
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(1))
    base = model(ids)
    changed = ids.clone()
    changed[:, 16] = (changed[:, 16] + 1) % 256
    out = model(changed)
    assert torch.equal(out[:, :16], base[:, :16])
    assert not torch.allclose(out[:, 16:], base[:, 16:])
    shifted = model(ids, positions=torch.arange(24) + 5)  # RoPE: absolute shift changes nothing
    torch.testing.assert_close(shifted, base, rtol=1e-4, atol=1e-5)


def test_parameter_names_are_checkpoint_names() -> None:
    for cfg in (TINY, {**TINY, "tie_word_embeddings": False, "attention_bias": True}):
        names = {k: tuple(v.shape) for k, v in Qwen3Reference(cfg).state_dict().items()}
        assert names == {s.name: s.shape for s in tensor_specs(cfg)}


def test_corpus_is_stdlib_bytes() -> None:
    corpus = load_corpus()
    assert corpus.sha256 == hashlib.sha256(corpus.data.numpy().tobytes()).hexdigest()
    files = corpus_files()
    assert files and not any(p in ("site-packages", "dist-packages") for f in files for p in f.parts)
    assert corpus.n_files <= len(files) and corpus.data.numel() <= 32 * 1024**2
    assert int(corpus.data.max()) < BYTE_VOCAB
    small = load_corpus(2 * 1024**2)
    assert small.data.numel() == 2 * 1024**2 and small.sha256 != corpus.sha256
    assert torch.equal(small.data, corpus.data[: 2 * 1024**2])
    seqs = corpus_sequences(corpus, 3, 100, seed=0)
    assert seqs == corpus_sequences(corpus, 3, 100, seed=0) and all(len(s) == 100 for s in seqs)


def _state_digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode() + v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def test_training_reduces_loss_deterministically() -> None:
    m1, r1 = train(TINY, 0, FAST, log_every=0)
    m2, r2 = train(TINY, 0, FAST, log_every=0)
    assert r1.steps_run == 30 and len(r1.losses) == 30
    assert r1.final_loss < 0.8 * r1.losses[0], r1.losses
    assert r1.heldout_loss < 0.8 * math.log(BYTE_VOCAB)
    assert r1.losses == r2.losses and r1.final_loss == r2.final_loss
    assert _state_digest(m1) == _state_digest(m2)
    # another seed: its first loss (before any update, so no schedule matters) already differs
    _, r3 = train(TINY, 1, replace(FAST, steps=1), log_every=0)
    assert r3.losses[0] != r1.losses[0], (r3.losses, r1.losses)


def test_checkpoint_names_reload_and_cache(tmp_path: Path) -> None:
    recipe = replace(FAST, steps=5)
    kw = {"steps": 5, "batch": recipe.batch, "seq_len": recipe.seq_len, "lr": recipe.lr}
    info = train_checkpoint(TINY, tmp_path / "ck", 0, device="cpu", **kw)
    d = tmp_path / "ck"
    with safe_open(str(d / "model.safetensors"), framework="pt") as sf:
        shapes = {k: tuple(sf.get_tensor(k).shape) for k in sf.keys()}
        assert all(sf.get_tensor(k).dtype == torch.bfloat16 for k in sf.keys())
    assert shapes == {s.name: s.shape for s in tensor_specs(TINY)}
    stamp = json.loads((d / "cacheon_checkpoint.json").read_text())
    corpus = load_corpus()
    assert info.recipe_digest == stamp["recipe_digest"] == stamp["request_digest"]
    assert info.recipe_digest == train_recipe_digest(TINY, 0, recipe, corpus.sha256)
    assert stamp["train"]["steps_run"] == 5 and stamp["corpus"]["sha256"] == corpus.sha256
    assert stamp["corpus"]["python"] and math.isfinite(stamp["train"]["final_loss"])
    model, _ = train(TINY, 0, recipe, log_every=0)
    ids = torch.tensor(corpus_sequences(corpus, 2, 48, seed=4))
    with torch.no_grad():
        want = model.to(torch.bfloat16)(ids)
        got = load_reference(d)(ids)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    before = (d / "model.safetensors").stat().st_mtime_ns
    assert train_checkpoint(TINY, d, 0, device="cpu", **kw) == info
    assert (d / "model.safetensors").stat().st_mtime_ns == before
    with pytest.raises(CheckpointError, match="ck"):
        train_checkpoint(TINY, d, 0, device="cpu", **{**kw, "lr": 2e-2})


def test_seconds_cap_records_steps_run(tmp_path: Path) -> None:
    kw = {"steps": 50, "batch": 2, "seq_len": 32, "lr": 1e-3}
    info = train_checkpoint(TINY, tmp_path / "ck", 0, device="cpu", seconds=0.0, **kw)
    stamp = json.loads((tmp_path / "ck" / "cacheon_checkpoint.json").read_text())
    recipe, sha = TrainRecipe(**kw), load_corpus().sha256
    assert stamp["train"]["steps_run"] == 1 and stamp["train"]["steps"] == 50
    assert info.recipe_digest == train_recipe_digest(TINY, 0, recipe, sha, steps_run=1)
    assert stamp["request_digest"] == train_recipe_digest(TINY, 0, recipe, sha) != info.recipe_digest
    assert train_checkpoint(TINY, tmp_path / "ck", 0, device="cpu", seconds=0.0, **kw) == info


def test_recipe_digest_tracks_every_input() -> None:
    sha = load_corpus().sha256
    base = train_recipe_digest(TINY, 0, FAST, sha)
    assert base == train_recipe_digest(dict(reversed(list(TINY.items()))), 0, FAST, sha)
    assert base == train_recipe_digest(TINY, 0, FAST, sha, steps_run=FAST.steps)
    others = [
        train_recipe_digest(TINY, 0, replace(FAST, steps=31), sha),
        train_recipe_digest(TINY, 0, replace(FAST, lr=2e-2), sha),
        train_recipe_digest(TINY, 0, replace(FAST, batch=9), sha),
        train_recipe_digest(TINY, 0, replace(FAST, seq_len=65), sha),
        train_recipe_digest(TINY, 1, FAST, sha),
        train_recipe_digest(TINY, 0, FAST, load_corpus(2 * 1024**2).sha256),
        train_recipe_digest({**TINY, "vocab_size": 512}, 0, FAST, sha),
        train_recipe_digest(TINY, 0, FAST, sha, steps_run=29),
    ]
    assert len({base, *others}) == len(others) + 1


def test_schedule_and_config_guards(tmp_path: Path) -> None:
    r = TrainRecipe(steps=100, lr=1.0, warmup_frac=0.1, min_lr_frac=0.1)
    assert lr_at(r, 0) == pytest.approx(0.1) and lr_at(r, 9) == pytest.approx(1.0)
    assert lr_at(r, 99) == pytest.approx(0.1, abs=1e-3)
    assert all(lr_at(r, i) >= lr_at(r, i + 1) for i in range(9, 99))
    with pytest.raises(ValueError, match="vocab_size"):
        train_checkpoint({**TINY, "vocab_size": 200}, tmp_path / "a", 0, device="cpu", steps=1)
    with pytest.raises(ValueError, match="rope_theta"):
        Qwen3Reference({k: v for k, v in TINY.items() if k != "rope_theta"})
    with pytest.raises(ValueError, match="plain RoPE"):
        Qwen3Reference({**TINY, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    assert not (tmp_path / "a").exists()
