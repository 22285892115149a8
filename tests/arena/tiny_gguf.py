"""A tiny llama GGUF written with the `gguf` package's own writer (tests of arena/model/gguf_convert.py):
byte-level BPE vocabulary (the 256 byte symbols, a few merges, three control tokens), one or two
layers of hidden 32, one tensor Q8_0-quantized so the dequantize path runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

HIDDEN, HEADS, KV, FF = 32, 2, 1, 64  # Q8_0 blocks are 32 wide
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a"]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def byte_symbols() -> list[str]:
    """GPT-2's bytes_to_unicode: the printable stand-in of every byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def vocab() -> list[str]:
    merged = ["".join(m.split(" ")) for m in MERGES]
    return SPECIAL + byte_symbols() + merged


def write(path: Path, layers: int = 1, seed: int = 0, tied: bool = True, arch: str = "llama") -> Path:
    import gguf

    rng = np.random.default_rng(seed)
    toks = vocab()
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_vocab_size(len(toks))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(toks)
    w.add_token_types([3] * len(SPECIAL) + [1] * (len(toks) - len(SPECIAL)))
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def t(name: str, *shape: int, quant: bool = False) -> None:
        x = rng.standard_normal(shape).astype(np.float32) * 0.1
        if quant:
            q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, x)

    t("token_embd.weight", len(toks), HIDDEN)
    for i in range(layers):
        t(f"blk.{i}.attn_norm.weight", HIDDEN)
        t(f"blk.{i}.attn_q.weight", HIDDEN, HIDDEN)
        t(f"blk.{i}.attn_k.weight", KV * HIDDEN // HEADS, HIDDEN)
        t(f"blk.{i}.attn_v.weight", KV * HIDDEN // HEADS, HIDDEN)
        t(f"blk.{i}.attn_output.weight", HIDDEN, HIDDEN)
        t(f"blk.{i}.ffn_norm.weight", HIDDEN)
        t(f"blk.{i}.ffn_gate.weight", FF, HIDDEN, quant=True)
        t(f"blk.{i}.ffn_up.weight", FF, HIDDEN)
        t(f"blk.{i}.ffn_down.weight", HIDDEN, FF)
    t("output_norm.weight", HIDDEN)
    if not tied:
        t("output.weight", len(toks), HIDDEN)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
