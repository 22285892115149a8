"""A small Qwen3 trained locally on offline text, so the arena's quality checks judge a real model.

Why: random-init weights (arena/model/checkpoint.py) give flat logits and degenerate greedy text, so the
teacher-forced KL / NLL / greedy checks barely tell a faithful kernel from a wrong one.

* Qwen3Reference: pure-torch forward of SGLang 0.5.13.post1's Qwen3ForCausalLM with the HF names of
  arena.model.checkpoint.tensor_specs, so trained weights mean the same in the engine (scripts/train_check.py).
* Corpus: the *.py sources of Python's standard library, byte-level (token = byte, 0..255; no
  tokenizer files). It exists offline on every machine but DEPENDS ON THE PYTHON VERSION (and on
  how the distro packages the stdlib, e.g. a split-out test/), so its sha256 is in the recipe.
* train_checkpoint: arena.model.checkpoint's seeded init (make_tensor) -> AdamW, fixed step count ->
  checkpoint written by arena.model.checkpoint.write_tensors (same names / stamp / atomic rename / cache).

Determinism: on CPU one recipe gives bit-identical weights. On CUDA embedding and attention
backward use atomics, so two runs differ in the last bits: the recipe digest names the recipe,
the stamp's per-file sha256 (CheckpointInfo.weights_sha256) names the bytes an arena result cites.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import math
import os
import sys
import sysconfig
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from arena.model.checkpoint import RECIPE_VERSION, CheckpointInfo, make_tensor, read_cached, tensor_specs, write_tensors

TRAIN_RECIPE_VERSION = "cacheon.trainckpt/1"
BYTE_VOCAB = 256
MAX_CORPUS_BYTES = 32 * 1024**2
HOLDOUT_BYTES = 1024**2  # the corpus tail, never trained on: held-out loss and check sequences
_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})  # installed, not stdlib
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainRecipe:
    """Everything besides config, seed and corpus that shapes the trained weights."""

    steps: int = 600
    batch: int = 32
    seq_len: int = 512
    lr: float = 6e-4
    warmup_frac: float = 0.1  # linear warmup, then cosine to min_lr_frac * lr at `steps`
    min_lr_frac: float = 0.1
    weight_decay: float = 0.1  # matrices only; norms and the (tied) embedding are not decayed
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    corpus_max_bytes: int = MAX_CORPUS_BYTES


@dataclass(frozen=True, eq=False)
class Corpus:
    """Deterministic byte corpus: uint8 data, its sha256 and where it came from."""

    data: torch.Tensor
    sha256: str
    n_files: int
    python: str

    def split(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(train, heldout): the heldout tail is min(HOLDOUT_BYTES, 1/10 of the corpus)."""
        hold = min(HOLDOUT_BYTES, self.data.numel() // 10)
        return self.data[: self.data.numel() - hold], self.data[self.data.numel() - hold :]


@dataclass(frozen=True)
class TrainResult:
    """What a training run did: steps actually run (a seconds cap may stop it early) and losses."""

    steps_run: int
    losses: tuple[float, ...]  # per step, nats/byte
    final_loss: float  # mean of the last min(10, steps_run) step losses
    heldout_loss: float
    seconds: float


def corpus_files(root: Path | None = None) -> list[Path]:
    """stdlib *.py files sorted by relative path, without installed packages or bytecode dirs."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(base):  # symlinked dirs are not followed
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS]
        found.update({(Path(folder) / f).relative_to(base).as_posix(): Path(folder) / f for f in files if f.endswith(".py")})
    return [found[k] for k in sorted(found)]


@functools.lru_cache(maxsize=4)
def load_corpus(max_bytes: int = MAX_CORPUS_BYTES, root: str | None = None) -> Corpus:
    """Whole files in corpus_files order until max_bytes (the last one cut), as one byte string."""
    chunks: list[bytes] = []
    for path in corpus_files(Path(root) if root else None):
        chunks.append(path.read_bytes()[: max_bytes - sum(map(len, chunks))])
        if sum(map(len, chunks)) >= max_bytes:
            break
    raw, n = b"".join(chunks), len(chunks)
    if len(raw) < 1024**2:
        raise RuntimeError(f"stdlib corpus too small ({len(raw)} bytes from {n} files)")
    data = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    return Corpus(data, hashlib.sha256(raw).hexdigest(), n, sys.version.split()[0])


def corpus_sequences(corpus: Corpus, n: int, length: int, seed: int) -> list[list[int]]:
    """n heldout byte sequences of `length` at seeded offsets: check prompts the model never saw."""
    held, gen = corpus.split()[1], torch.Generator().manual_seed(_derived_seed(seed, "heldout"))
    return [held[o : o + length].tolist() for o in torch.randint(0, held.numel() - length, (n,), generator=gen).tolist()]


def _derived_seed(seed: int, what: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{what}".encode()).digest()[:8], "little") >> 1


def _rope_theta(config: Mapping[str, Any]) -> float:
    """qwen3.py:324-331 reads rope_parameters["rope_theta"] else rope_theta; only plain RoPE."""
    params = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or (params if "rope_theta" in params else None)
    if scaling and scaling.get("rope_type", scaling.get("type")) != "default":
        raise ValueError(f"Qwen3Reference supports plain RoPE only, got rope scaling {scaling!r}")
    theta = params.get("rope_theta", config.get("rope_theta"))
    if theta is None:  # SGLang's fallback (1e6) and transformers' default (1e4) disagree
        raise ValueError("config must state rope_theta explicitly")
    return float(theta)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Neox-style RoPE (rotary_embedding/utils.py:52-60): halves, not interleaved pairs; in fp32
    (the CUDA cos/sin cache stays fp32, base.py:74-77). x [B, T, heads, D], cos/sin [T, D/2]."""
    x1, x2 = x.float().chunk(2, dim=-1)
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)


class RMSNorm(nn.Module):
    """SGLang RMSNorm.forward_native (layernorm.py:448-491), plain and fused-add forms: fp32
    variance AND fp32 weight multiply, then one cast (not HF's cast-before-multiply, which SGLang
    uses only under rl_on_policy_target)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps).to(x.dtype)

    def add(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """layernorm.py:458-465: sum in fp32, residual stored rounded, norm of the fp32 sum."""
        dtype = torch.promote_types(x.dtype, residual.dtype)  # bf16 in the engine, fp32 training
        s = x.float() + residual.float()
        return F.rms_norm(s, (s.shape[-1],), self.weight.float(), self.eps).to(dtype), s.to(dtype)


class Attention(nn.Module):
    """qwen3.py:170-181 + RadixAttention: qkv -> per-head q/k norm -> RoPE -> causal GQA."""

    def __init__(self, c: Mapping[str, Any], head_dim: int, eps: float) -> None:
        super().__init__()
        h, self.heads, self.kv, self.head_dim = (
            c["hidden_size"],
            c["num_attention_heads"],
            c["num_key_value_heads"],
            head_dim,
        )
        bias = bool(c.get("attention_bias", False))  # qwen3.py:123,132: qkv and o_proj alike
        self.q_proj, self.o_proj = nn.Linear(h, self.heads * head_dim, bias), nn.Linear(self.heads * head_dim, h, bias)
        self.k_proj, self.v_proj = nn.Linear(h, self.kv * head_dim, bias), nn.Linear(h, self.kv * head_dim, bias)
        self.q_norm, self.k_norm = RMSNorm(head_dim, eps), RMSNorm(head_dim, eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = rope(self.q_norm(self.q_proj(x).view(b, t, self.heads, self.head_dim)), cos, sin)
        k = rope(self.k_norm(self.k_proj(x).view(b, t, self.kv, self.head_dim)), cos, sin)
        v = self.v_proj(x).view(b, t, self.kv, self.head_dim)
        g = self.heads // self.kv  # query head i reads kv head i // g (repeat_interleave, not tile)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(g, 1), v.transpose(1, 2).repeat_interleave(g, 1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.head_dim**-0.5)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class MLP(nn.Module):
    """Qwen2MLP (qwen2.py:64-106): down(silu(gate(x)) * up(x)), the product in fp32 like the
    CUDA silu_and_mul kernel."""

    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(hidden, inter, bias=False), nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g, u = self.gate_proj(x), self.up_proj(x)
        return self.down_proj((F.silu(g.float()) * u.float()).to(g.dtype))


class DecoderLayer(nn.Module):
    """Qwen3DecoderLayer with LayerCommunicator's residual handling (communicator.py:524-593)."""

    def __init__(self, c: Mapping[str, Any], head_dim: int) -> None:
        super().__init__()
        eps = float(c.get("rms_norm_eps", 1e-6))
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(c["hidden_size"], eps), RMSNorm(c["hidden_size"], eps)
        self.self_attn = Attention(c, head_dim, eps)
        self.mlp = MLP(c["hidden_size"], c["intermediate_size"])

    def forward(
        self, h: torch.Tensor, residual: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:  # first layer: the embedding output is the residual
            residual, h = h, self.input_layernorm(h)
        else:
            h, residual = self.input_layernorm.add(h, residual)
        h, residual = self.post_attention_layernorm.add(self.self_attn(h, cos, sin), residual)
        return self.mlp(h), residual


class Qwen3Reference(nn.Module):
    """SGLang 0.5.13.post1 Qwen3ForCausalLM (dense, TP 1) in plain torch, HF parameter names.

    Logits are hidden @ W.T in the parameter dtype, W = embed_tokens when tie_word_embeddings
    (qwen3.py:490), else lm_head; SGLang then takes .float() (logits_processor.py:986) and
    log_softmax (:640). Computation dtype follows the parameters: bf16 weights reproduce the
    engine's roundings; fp32 weights under bf16 autocast are the training mode.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__()
        tensor_specs(config)  # the checkpoint writer's validation: model_type, heads, silu, ...
        if config["model_type"] != "qwen3":
            raise ValueError("Qwen3Reference is dense qwen3 only")
        self.head_dim = int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
        self.theta = _rope_theta(config)
        self.tied = bool(config.get("tie_word_embeddings", False))
        self.model = nn.ModuleDict(
            {  # `model.*`: embed_tokens (qwen2.py:360, no scale_emb), layers, norm
                "embed_tokens": nn.Embedding(config["vocab_size"], config["hidden_size"]),
                "layers": nn.ModuleList(DecoderLayer(config, self.head_dim) for _ in range(config["num_hidden_layers"])),
                "norm": RMSNorm(config["hidden_size"], float(config.get("rms_norm_eps", 1e-6))),
            }
        )
        if not self.tied:
            self.lm_head = nn.Linear(config["hidden_size"], config["vocab_size"], bias=False)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids [B, T] -> logits [B, T, vocab]; positions [T] default 0..T-1."""
        t = input_ids.shape[1]
        pos = torch.arange(t, device=input_ids.device) if positions is None else positions
        # cos/sin [T, D/2] in fp32 as base.py:_compute_inv_freq/_compute_cos_sin_cache (:130-155)
        d = torch.arange(0, self.head_dim, 2, dtype=torch.float, device=pos.device) / self.head_dim
        freqs = pos.float()[:, None] * (1.0 / self.theta**d)[None, :]
        cos, sin = freqs.cos(), freqs.sin()
        h, residual = self.model["embed_tokens"](input_ids), None
        for layer in self.model["layers"]:
            h, residual = layer(h, residual, cos, sin)
        h, _ = self.model["norm"].add(h, residual)  # final fused add + norm (qwen2.py:394)
        w = self.model["embed_tokens"].weight if self.tied else self.lm_head.weight
        return F.linear(h.to(w.dtype), w)


def init_model(config: Mapping[str, Any], seed: int, device: str = "cpu") -> Qwen3Reference:
    """arena.model.checkpoint's seeded init, drawn in fp32 on the CPU generator (same on any machine)."""
    f32 = {**config, "torch_dtype": "float32"}
    return _built(config, {s.name: make_tensor(s, f32, seed, "cpu") for s in tensor_specs(config)}).to(device)


def _built(config: Mapping[str, Any], state: Mapping[str, torch.Tensor]) -> Qwen3Reference:
    with torch.device("meta"):  # no throw-away default init of ~0.5B parameters
        model = Qwen3Reference(config)
    model.load_state_dict(state, strict=True, assign=True)
    return model


def load_reference(path: Path, device: str = "cpu", dtype: torch.dtype | None = None) -> Qwen3Reference:
    """A written checkpoint (any arena.model.checkpoint writer) as Qwen3Reference, in its stored dtype."""
    from safetensors.torch import load_file

    config = json.loads((Path(path) / "config.json").read_text())
    state = {k: v for f in sorted(Path(path).glob("*.safetensors")) for k, v in load_file(str(f)).items()}
    return _built(config, state).to(device=device, dtype=dtype or next(iter(state.values())).dtype).eval()


def train_recipe_digest(
    config: Mapping[str, Any], seed: int, recipe: TrainRecipe, corpus_sha256: str, steps_run: int | None = None
) -> str:
    """sha256 of {config, seed, init + train recipe, corpus, steps actually run (None: all)}."""
    doc = {
        "config": dict(config),
        "seed": int(seed),
        "recipe": TRAIN_RECIPE_VERSION,
        "init": RECIPE_VERSION,
        "train": asdict(recipe),
        "corpus": corpus_sha256,
        "steps_run": recipe.steps if steps_run is None else int(steps_run),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def lr_at(recipe: TrainRecipe, step: int) -> float:
    """Linear warmup over warmup_frac * steps, then cosine from lr to min_lr_frac * lr."""
    warm = max(1, round(recipe.warmup_frac * recipe.steps))
    cos = 0.5 * (1 + math.cos(math.pi * max(0, step - warm) / max(1, recipe.steps - warm)))
    return recipe.lr * min((step + 1) / warm, recipe.min_lr_frac + (1 - recipe.min_lr_frac) * cos)


def _batches(data: torch.Tensor, recipe: TrainRecipe, seed: int, device: str) -> Iterator[torch.Tensor]:
    """Seeded random windows [batch, seq_len + 1]; offsets drawn on the CPU (device-independent)."""
    gen, dev, span = torch.Generator().manual_seed(seed), data.to(device), torch.arange(recipe.seq_len + 1, device=device)
    while True:
        off = torch.randint(0, dev.numel() - recipe.seq_len - 1, (recipe.batch,), generator=gen)
        yield dev[off.to(device)[:, None] + span].long()


def _loss(model: Qwen3Reference, x: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x[:, :-1]).float().flatten(0, 1), x[:, 1:].flatten())


def _check_recipe(config: Mapping[str, Any], recipe: TrainRecipe) -> None:
    if config.get("vocab_size", 0) < BYTE_VOCAB:
        raise ValueError(f"byte-level training needs vocab_size >= {BYTE_VOCAB}")
    if (
        not 0 < recipe.seq_len <= int(config.get("max_position_embeddings", recipe.seq_len))
        or min(recipe.steps, recipe.batch) <= 0
        or recipe.lr <= 0
    ):
        raise ValueError(f"bad recipe {recipe} (seq_len must fit max_position_embeddings)")


def train(
    config: Mapping[str, Any],
    seed: int,
    recipe: TrainRecipe,
    *,
    device: str = "cpu",
    seconds: float | None = None,
    log_every: int = 50,
) -> tuple[Qwen3Reference, TrainResult]:
    """Train from the seeded init; fp32 master weights, bf16 autocast on CUDA, fp32 on CPU.

    seconds is a safety cap only: it stops after the step that crosses it (time is read without a
    device sync, so it may overrun by the queued work) and steps_run records where it stopped.
    """
    _check_recipe(config, recipe)
    corpus = load_corpus(recipe.corpus_max_bytes)
    train_data, held = corpus.split()
    cuda = torch.device(device).type == "cuda"
    model = init_model(config, seed, device).train()
    decay = {n for n, p in model.named_parameters() if p.ndim >= 2 and "embed_tokens" not in n}
    groups = [
        {"params": [p for n, p in model.named_parameters() if (n in decay) == d], "weight_decay": recipe.weight_decay * d}
        for d in (True, False)
    ]
    opt = torch.optim.AdamW(groups, lr=recipe.lr, betas=recipe.betas, **({"fused": True} if cuda else {}))
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext()
    losses = torch.zeros(recipe.steps, device=device)
    batches = _batches(train_data, recipe, _derived_seed(seed, "batches"), device)
    t0 = time.monotonic()
    for step in range(recipe.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(recipe, step)
        with amp:
            loss = _loss(model, next(batches))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        opt.step()
        losses[step] = loss.detach()
        if log_every and (step % log_every == 0 or step + 1 == recipe.steps):
            log.info(
                "train step %d/%d loss %.4f lr %.2e %.1fs",
                step + 1,
                recipe.steps,
                loss.item(),
                lr_at(recipe, step),
                time.monotonic() - t0,
            )
        if seconds is not None and time.monotonic() - t0 > seconds:
            log.warning("train: seconds cap %.0f hit after %d/%d steps", seconds, step + 1, recipe.steps)
            break
    del opt
    n = step + 1
    lst = tuple(float(v) for v in losses[:n].tolist())
    model.eval()
    with torch.no_grad(), amp:
        evals = _batches(held, replace(recipe, batch=min(recipe.batch, 16)), _derived_seed(seed, "eval"), device)
        heldout = sum(float(_loss(model, next(evals))) for _ in range(4)) / 4
    result = TrainResult(n, lst, sum(lst[-10:]) / len(lst[-10:]), heldout, time.monotonic() - t0)
    log.info("train done: %d steps, final loss %.4f, heldout %.4f, %.1fs", n, result.final_loss, heldout, result.seconds)
    return model, result


def train_checkpoint(
    config: Mapping[str, Any],
    out_dir: Path,
    seed: int,
    *,
    device: str,
    seconds: float | None = None,
    steps: int | None = None,
    batch: int = TrainRecipe.batch,
    seq_len: int = TrainRecipe.seq_len,
    lr: float = TrainRecipe.lr,
) -> CheckpointInfo:
    """Train (or find cached) the checkpoint of this recipe in out_dir.

    The cache key is the requested recipe, so a run stopped by `seconds` is reused rather than
    retrained; its recipe_digest then names the steps that actually ran.
    """
    recipe = TrainRecipe(steps=steps or TrainRecipe.steps, batch=batch, seq_len=seq_len, lr=lr)
    corpus = load_corpus(recipe.corpus_max_bytes)
    cached = read_cached(Path(out_dir), train_recipe_digest(config, seed, recipe, corpus.sha256), "request_digest")
    if cached is not None:
        return cached
    model, result = train(config, seed, recipe, device=device, seconds=seconds)
    state, every = model.state_dict(), max(1, result.steps_run // 50)
    stamp = {
        "recipe_digest": train_recipe_digest(config, seed, recipe, corpus.sha256, result.steps_run),
        "request_digest": train_recipe_digest(config, seed, recipe, corpus.sha256),
        "recipe": TRAIN_RECIPE_VERSION,
        "init_recipe": RECIPE_VERSION,
        "seed": int(seed),
        "train": {
            **asdict(recipe),
            "steps_run": result.steps_run,
            "final_loss": result.final_loss,
            "heldout_loss": result.heldout_loss,
            "seconds": round(result.seconds, 2),
            "loss_log": [[i + 1, round(v, 4)] for i, v in enumerate(result.losses) if (i + 1) % every == 0],
            "device": torch.device(device).type,
            "torch": torch.__version__,
        },
        "corpus": {
            "source": "python stdlib *.py",
            "sha256": corpus.sha256,
            "bytes": corpus.data.numel(),
            "files": corpus.n_files,
            "python": corpus.python,
        },
    }
    try:
        return write_tensors(config, out_dir, lambda s: state[s.name], stamp, cache_key="request_digest")
    finally:
        state.clear()  # the last references to the weights: free them before empty_cache
        del model
        if torch.device(device).type == "cuda":  # hand memory back before the engine starts
            torch.cuda.empty_cache()
