"""GPU check: does arena.model.train.Qwen3Reference compute what SGLang 0.5.13.post1 computes?

Weights trained with the reference only mean the same thing inside the engine if the two forwards
agree, so this trains a short byte-level recipe on CUDA (arena.model.train.train_checkpoint), writes the
checkpoint, starts one SGLang Engine on it, teacher-forces held-out corpus sequences and compares
SGLang's per-token logprobs and top-5 with the reference's (bf16, same weights). A control run of
the reference with GPT-J (interleaved) RoPE shows how big a real semantic mismatch looks. It also
reports training speed (the few-minutes estimate) and greedy samples from both sides.

    python scripts/train_check.py [--out DIR] [--layers 28] [--steps 200] [--seconds 300]

Prints one JSON line ({"check": "train_reference_vs_sglang", "pass": ..., ...}); exit 0 = pass.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# Thresholds for "the same computation" at bf16: a semantic error (RoPE convention, norm order,
# GQA mapping) moves mean |dlogprob| by O(1) on a trained model, bf16 kernel noise by ~1e-2.
MAX_MEAN_ABS = 0.05
MAX_P99_ABS = 0.35
MIN_TOP1 = 0.97  # tie-aware: SGLang's top-1 is within TIE of the reference's best
TIE = 0.02


def model_config(layers: int, vocab: int) -> dict[str, Any]:
    """Qwen3-0.6B body (arena/config.py hf_config keys) with a byte-level vocab."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": layers,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": vocab,
        "max_position_embeddings": 4096,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "use_cache": True,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": layers,
        "initializer_range": 0.02,
    }


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def sglang_teacher(
    model_path: str, seqs: list[list[int]], prompt: int, greedy_new: int, cuda_graph: bool
) -> tuple[list[dict[str, Any]], list[int]]:
    """SGLang's input logprobs + top-5 for every token after `prompt`, and one greedy sample."""
    from sglang.srt.entrypoints.engine import Engine

    engine = Engine(
        model_path=model_path,
        skip_tokenizer_init=True,
        load_format="auto",
        attention_backend="triton",
        sampling_backend="pytorch",
        grammar_backend="none",
        disable_radix_cache=True,
        disable_cuda_graph=not cuda_graph,
        mem_fraction_static=0.5,
        random_seed=0,
    )
    try:
        outs = engine.generate(
            input_ids=seqs,
            sampling_params={"max_new_tokens": 1, "temperature": 0.0, "ignore_eos": True},
            return_logprob=True,
            top_logprobs_num=5,
            # input logprobs come back as [None] + values[:-1] from logprob_start_len
            # (logprob_result_processor.py:37): start one early to get every token after the prompt
            logprob_start_len=[prompt - 1] * len(seqs),
        )
        greedy = engine.generate(
            input_ids=[seqs[0][:prompt]],
            sampling_params={"max_new_tokens": greedy_new, "temperature": 0.0, "ignore_eos": True},
        )
    finally:
        engine.shutdown()
    return [o["meta_info"] for o in outs], list(greedy[0]["output_ids"])


def compare(ref: Any, seqs: list[list[int]], metas: list[dict[str, Any]], prompt: int) -> dict[str, Any]:
    """Per-token |logprob difference|, top-5 value differences, tie-aware and strict top-1."""
    import torch

    tok, top5, strict, tied = [], [], 0, 0
    dev = next(ref.parameters()).device
    for seq, mi in zip(seqs, metas):
        with torch.no_grad():
            lp = torch.log_softmax(ref(torch.tensor([seq], device=dev)).float()[0], -1).cpu()
        toks, tops = mi["input_token_logprobs"], mi["input_top_logprobs"]
        assert len(toks) == len(seq) - prompt + 1 and toks[0][0] is None, (len(toks), toks[:2])
        for i, j in enumerate(range(prompt, len(seq)), start=1):
            row = lp[j - 1]  # the distribution that predicts seq[j]
            assert int(toks[i][1]) == seq[j], (j, toks[i], seq[j])
            tok.append(abs(float(toks[i][0]) - float(row[seq[j]])))
            top5.extend(abs(float(v) - float(row[int(t)])) for v, t, *_ in tops[i])
            first = int(tops[i][0][1])
            strict += first == int(row.argmax())
            tied += float(row[first]) >= float(row.max()) - TIE
    n = len(tok)
    return {
        "positions": n,
        "token_lp_mean_abs": sum(tok) / n,
        "token_lp_p99_abs": _quantile(tok, 0.99),
        "token_lp_max_abs": max(tok),
        "top5_lp_mean_abs": sum(top5) / len(top5),
        "top5_lp_max_abs": max(top5),
        "top1_agree": strict / n,
        "top1_agree_tie": tied / n,
    }


def ref_greedy(ref: Any, prompt_ids: list[int], n: int) -> list[int]:
    import torch

    ids, dev = list(prompt_ids), next(ref.parameters()).device
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(ref(torch.tensor([ids], device=dev))[0, -1].float().argmax()))
    return ids[len(prompt_ids) :]


def _text(ids: list[int]) -> str:
    return bytes(i for i in ids if i < 256).decode("utf-8", "replace")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "train-check"))
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--seconds", type=float, default=300.0, help="safety cap on training time")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-seqs", type=int, default=8)
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--greedy", type=int, default=64)
    ap.add_argument("--cuda-graph", action="store_true", help="leave SGLang's CUDA graphs on")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    import torch

    import arena.model.train as T

    out: dict[str, Any] = {
        "check": "train_reference_vs_sglang",
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
    }
    try:
        import sglang

        out["sglang"] = sglang.__version__
    except Exception as e:  # noqa: BLE001
        out["sglang"] = repr(e)
    config = model_config(a.layers, a.vocab)
    t0 = time.monotonic()
    info = T.train_checkpoint(
        config,
        Path(a.out) / "ckpt",
        a.seed,
        device="cuda",
        seconds=a.seconds,
        steps=a.steps,
        batch=a.batch,
        seq_len=a.seq_len,
        lr=a.lr,
    )
    stamp = json.loads((info.path / "cacheon_checkpoint.json").read_text())
    tr = stamp["train"]
    out["train"] = {
        k: tr[k] for k in ("steps", "steps_run", "batch", "seq_len", "lr", "seconds", "final_loss", "heldout_loss", "device")
    }
    out["train"].update(
        steps_per_s=tr["steps_run"] / max(tr["seconds"], 1e-9),
        heldout_bits_per_byte=tr["heldout_loss"] / math.log(2),
        wall_s_incl_write=round(time.monotonic() - t0, 1),
        loss_log=tr["loss_log"][::5],
    )
    out["checkpoint"] = {
        "path": str(info.path),
        "recipe_digest": info.recipe_digest,
        "weights_sha256": info.weights_sha256,
        "n_params": info.n_params,
        "corpus": stamp["corpus"],
    }
    torch.cuda.empty_cache()

    corpus = T.load_corpus()
    seqs = T.corpus_sequences(corpus, a.n_seqs, a.length, seed=a.seed)
    t1 = time.monotonic()
    metas, sgl_greedy = sglang_teacher(str(info.path), seqs, a.prompt, a.greedy, a.cuda_graph)
    out["sglang_s"] = round(time.monotonic() - t1, 1)

    ref = T.load_reference(info.path, device="cuda")  # bf16, as stored: the engine's weights
    out["metrics"] = compare(ref, seqs, metas, a.prompt)
    mine = ref_greedy(ref, seqs[0][: a.prompt], a.greedy)
    same = next((i for i, (x, y) in enumerate(zip(mine, sgl_greedy)) if x != y), min(len(mine), len(sgl_greedy)))
    out["greedy"] = {
        "prompt": _text(seqs[0][: a.prompt]),
        "sglang": _text(sgl_greedy),
        "reference": _text(mine),
        "agree_prefix": same,
        "distinct_sglang": len(set(sgl_greedy)),
    }

    good_rope = T.rope  # control: a real semantic mismatch (GPT-J pairs instead of Neox halves)

    def gptj(x: Any, cos: Any, sin: Any) -> Any:
        x1, x2 = x.float()[..., ::2], x.float()[..., 1::2]
        c, s = cos[:, None, :], sin[:, None, :]
        return torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), -1).flatten(-2).to(x.dtype)

    T.rope = gptj
    try:
        out["control_gptj_rope"] = compare(ref, seqs[:2], metas[:2], a.prompt)
    finally:
        T.rope = good_rope

    m, ctl = out["metrics"], out["control_gptj_rope"]
    out["pass"] = bool(
        m["token_lp_mean_abs"] <= MAX_MEAN_ABS
        and m["token_lp_p99_abs"] <= MAX_P99_ABS
        and m["top1_agree_tie"] >= MIN_TOP1
        and ctl["token_lp_mean_abs"] >= 5 * m["token_lp_mean_abs"]
    )
    out["thresholds"] = {"mean_abs": MAX_MEAN_ABS, "p99_abs": MAX_P99_ABS, "top1_tie": MIN_TOP1, "tie": TIE}
    print(json.dumps(out, default=str), flush=True)
    return 0 if out["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
