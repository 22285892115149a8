"""A llama-architecture GGUF file -> an HF-format checkpoint SGLang loads (`LlamaForCausalLM`):
bf16 safetensors, config.json, tokenizer.json + tokenizer_config.json from the GGUF's own
tokenizer metadata. Deterministic: the same GGUF gives the same bytes (one safetensors file,
tensors dequantized on the CPU by the `gguf` package in float32 then rounded once to bf16,
JSON with sorted keys), so the content digest (arena/model/model_dir.py) can be recorded and checked.

What llama.cpp's converter changed is undone: q_proj and k_proj rows were permuted for GGML's
interleaved RoPE (convert_hf_to_gguf.py LlamaModel.permute); `_unpermute` is its inverse, so the
HF (neox-style, rotate-half) RoPE that SGLang's LlamaForCausalLM applies sees the original rows.
A GGUF without `output.weight` ties the LM head to the embedding (tie_word_embeddings).
Only the GGUF "gpt2" (byte-level BPE) tokenizer model is converted; anything else is refused.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# llama.cpp's pre-tokenizer names whose split is digits one by one, then the GPT-2 regex
# (llama-vocab.cpp: the STARCODER / SMOLLM / REFACT group) -> HF Digits(individual) + ByteLevel
_DIGIT_PRE = ("smollm", "starcoder", "refact", "codeshell")
_GPT2_PRE = ("gpt2", "default", "")


class GGUFConvertError(ValueError):
    """The GGUF is not one this converter turns into a faithful HF checkpoint (says why)."""


@dataclass(frozen=True)
class Converted:
    path: Path
    config: dict[str, Any]
    tensors: tuple[tuple[str, tuple[int, ...]], ...]  # (HF name, shape), in file order


def _field(reader: Any, key: str, default: Any = ...) -> Any:
    f = reader.fields.get(key)
    if f is None:
        if default is ...:
            raise GGUFConvertError(f"GGUF lacks metadata key {key!r}")
        return default
    return f.contents()


def hf_config(reader: Any, dtype: str = "bfloat16") -> dict[str, Any]:
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise GGUFConvertError(f"general.architecture {arch!r}: only 'llama' GGUFs are converted")
    heads = int(_field(reader, "llama.attention.head_count"))
    hidden = int(_field(reader, "llama.embedding_length"))
    names = {t.name for t in reader.tensors}
    vocab = int(_field(reader, "llama.vocab_size", len(_field(reader, "tokenizer.ggml.tokens"))))
    head_dim = int(
        _field(reader, "llama.attention.key_length", _field(reader, "llama.rope.dimension_count", hidden // heads))
    )
    if head_dim * heads != hidden or int(_field(reader, "llama.rope.dimension_count", head_dim)) != head_dim:
        raise GGUFConvertError(
            f"head_dim {head_dim} x {heads} heads != hidden {hidden}, or partial RoPE: not a plain llama layout"
        )
    if "rope_freqs.weight" in names or _field(reader, "llama.rope.scaling.type", "none") not in ("none", ""):
        raise GGUFConvertError("RoPE scaling is not converted (rope_freqs / llama.rope.scaling.*)")
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(_field(reader, "llama.feed_forward_length")),
        "num_hidden_layers": int(_field(reader, "llama.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_field(reader, "llama.attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "vocab_size": vocab,
        "max_position_embeddings": int(_field(reader, "llama.context_length")),
        "rope_theta": float(f"{float(_field(reader, 'llama.rope.freq_base', 10000.0)):.7g}"),
        "rms_norm_eps": float(f"{float(_field(reader, 'llama.attention.layer_norm_rms_epsilon')):.7g}"),
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "rope_scaling": None,
        "tie_word_embeddings": "output.weight" not in names,
        "torch_dtype": dtype,
        "bos_token_id": int(_field(reader, "tokenizer.ggml.bos_token_id", 1)),
        "eos_token_id": int(_field(reader, "tokenizer.ggml.eos_token_id", 2)),
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "use_cache": True,
    }


def hf_name(gguf_name: str) -> str:
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", gguf_name)
    if m and m.group(2) in _LAYER:
        return f"model.layers.{m.group(1)}.{_LAYER[m.group(2)]}.weight"
    m = re.fullmatch(r"(\w+)\.weight", gguf_name)
    if m and m.group(1) in _TOP:
        return f"{_TOP[m.group(1)]}.weight"
    raise GGUFConvertError(f"tensor {gguf_name!r} has no llama HF counterpart")


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's permute(w, n_head): rows (head, 2, d/2) -> (head, d/2, 2)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tensors(reader: Any, config: dict[str, Any]) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, bf16 tensor) for every GGUF tensor, dequantized in float32, in HF layer order."""
    from gguf.quants import dequantize

    def order(t: Any) -> tuple:
        name = hf_name(t.name)
        m = re.match(r"model\.layers\.(\d+)\.", name)
        return (0 if "embed" in name else 2 if m is None else 1, int(m.group(1)) if m else 0, name)

    dtype = getattr(torch, config["torch_dtype"])
    for t in sorted(reader.tensors, key=order):
        name = hf_name(t.name)
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))  # ggml ne0 is the innermost dim
        w = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        if name.endswith("q_proj.weight"):
            w = _unpermute(w, config["num_attention_heads"])
        elif name.endswith("k_proj.weight"):
            w = _unpermute(w, config["num_key_value_heads"])
        yield name, torch.from_numpy(np.array(w, dtype=np.float32, order="C", copy=True)).to(dtype)


def tokenizer_files(reader: Any, config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """tokenizer.json (HF `tokenizers` format) and tokenizer_config.json from GGUF metadata."""
    model = _field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise GGUFConvertError(f"tokenizer.ggml.model {model!r}: only byte-level BPE ('gpt2') is converted")
    pre = _field(reader, "tokenizer.ggml.pre", "")
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    pre_tok: dict[str, object]
    if pre in _DIGIT_PRE:
        pre_tok = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level]}
    elif pre in _GPT2_PRE:
        pre_tok = byte_level
    else:
        raise GGUFConvertError(f"tokenizer.ggml.pre {pre!r}: no known HF pre-tokenizer for it")
    toks = [str(x) for x in _field(reader, "tokenizer.ggml.tokens")]
    types = [int(x) for x in _field(reader, "tokenizer.ggml.token_type", [1] * len(toks))]
    merges = [str(x) for x in _field(reader, "tokenizer.ggml.merges")]
    if len(toks) != config["vocab_size"] or len(types) != len(toks) or len(set(toks)) != len(toks):
        raise GGUFConvertError(
            f"{len(toks)} tokens ({len(set(toks))} distinct, {len(types)} types) for a vocabulary of {config['vocab_size']}"
        )
    added = [
        {
            "id": i,
            "content": tok,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": ty == 3,
        }
        for i, (tok, ty) in enumerate(zip(toks, types))
        if ty in (3, 4)
    ]
    tj = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre_tok,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {tok: i for i, tok in enumerate(toks)},
            "merges": merges,
        },
    }

    def tok(key: str) -> str | None:
        i = _field(reader, key, None)
        return toks[int(i)] if i is not None and 0 <= int(i) < len(toks) else None

    tc = {
        "tokenizer_class": "GPT2Tokenizer",
        "model_max_length": config["max_position_embeddings"],
        "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(_field(reader, "tokenizer.ggml.add_eos_token", False)),
        "clean_up_tokenization_spaces": False,
        "bos_token": tok("tokenizer.ggml.bos_token_id"),
        "eos_token": tok("tokenizer.ggml.eos_token_id"),
        "unk_token": tok("tokenizer.ggml.unknown_token_id"),
        "pad_token": tok("tokenizer.ggml.padding_token_id"),
        "additional_special_tokens": [a["content"] for a in added if a["special"]],
    }
    template = _field(reader, "tokenizer.chat_template", None)
    if template:
        tc["chat_template"] = str(template)
    return {"tokenizer.json": tj, "tokenizer_config.json": tc}


def convert(gguf_path: str | Path, out_dir: str | Path, dtype: str = "bfloat16") -> Converted:
    """Write the HF checkpoint of `gguf_path` into `out_dir` (must not exist), atomically."""
    from gguf import GGUFReader
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    if out_dir.exists():
        raise GGUFConvertError(f"{out_dir} exists: the converter writes a fresh directory only")
    reader = GGUFReader(str(gguf_path))
    config = hf_config(reader, dtype)
    tok_files = tokenizer_files(reader, config)
    weights = dict(tensors(reader, config))
    want = {"model.embed_tokens.weight", "model.norm.weight"} | {
        f"model.layers.{i}.{v}.weight" for i in range(config["num_hidden_layers"]) for v in _LAYER.values()
    }
    if not config["tie_word_embeddings"]:
        want.add("lm_head.weight")
    if set(weights) != want:
        raise GGUFConvertError(
            f"tensors missing {sorted(want - set(weights))[:4]} / unexpected {sorted(set(weights) - want)[:4]}"
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        docs = {"config.json": config, **tok_files}
        for name, doc in docs.items():
            (tmp / name).write_text(json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        os.chmod(tmp, 0o755)
        os.rename(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return Converted(out_dir, config, tuple((n, tuple(t.shape)) for n, t in weights.items()))
