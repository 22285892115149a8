"""Arena identity: configs load, ids are content digests, every bad key is named."""

from __future__ import annotations

from pathlib import Path

import arena_harness as h
import pytest

from arena.config import ArenaConfigError, load_config

CONFIGS = h.REPO / "configs" / "arena"


def test_shipped_arenas_load_with_distinct_stable_ids():
    dense, moe = load_config(CONFIGS / "dense.toml"), load_config(CONFIGS / "moe.toml")
    assert dense.arena_id != moe.arena_id
    assert dense.arena_id == load_config(CONFIGS / "dense.toml").arena_id
    assert dense.arena_id.startswith("arena-") and len(dense.arena_id) == 22
    assert dense.identity()["hf_config"]["model_type"] == "qwen3"
    assert moe.identity()["hf_config"]["model_type"] == "qwen3_moe"
    assert dense.engine.cuda_graph and dense.engine.attention_backend == "triton"
    import tomllib

    gpu = [p for p in sorted(CONFIGS.glob("*.toml")) if tomllib.loads(p.read_text()).get("kind") != "cpu"]
    ids = {p.name: load_config(p).arena_id for p in gpu}
    assert len(set(ids.values())) == len(ids) >= 4, ids


def test_capture_sizes_reach_the_engine_and_the_id():
    from arena.jobs import engine_kwargs

    dense = load_config(CONFIGS / "dense.toml")
    assert engine_kwargs(dense)["cuda_graph_bs"][-1] == dense.engine.cuda_graph_max_bs == 256
    assert "cuda_graph_bs" not in engine_kwargs(load_config(CONFIGS / "dense-tp2.toml"))  # SGLang's own list
    moe = load_config(CONFIGS / "moe.toml")
    assert engine_kwargs(moe)["cuda_graph_bs"] == list(dense.engine.cuda_graph_bs)


def _write(tmp: Path, text: str) -> Path:
    p = tmp / "a.toml"
    p.write_text(text)
    return p


def _dense_text(**subs: str) -> str:
    text = (CONFIGS / "dense.toml").read_text()
    for old, new in subs.items():
        assert old in text
        text = text.replace(old, new)
    return text


def test_any_identity_key_changes_the_id(tmp_path):
    base = load_config(CONFIGS / "dense.toml").arena_id
    for old, new in [
        ("output_len = 128", "output_len = 64"),
        ("seed = 0", "seed = 1"),
        ("page_size = 1", "page_size = 16"),
        ("margin = 0.005", "margin = 0.02"),
    ]:
        assert load_config(_write(tmp_path, _dense_text(**{old: new}))).arena_id != base, old


def test_name_and_path_are_not_identity(tmp_path):
    p = _write(tmp_path, _dense_text(**{'name = "qwen3-0.6b-dense"': 'name = "renamed"'}))
    assert load_config(p).arena_id == load_config(CONFIGS / "dense.toml").arena_id


@pytest.mark.parametrize(
    "old,new,needle",
    [
        ("page_size = 1", "page_size = 1\nbogus = 3", "[engine] unknown key(s) ['bogus']"),
        ("cycles = 8 ", "cycles = 1 ", "[workload] cycles"),
        ("page_size = 1", 'page_size = "one"', "[engine] page_size = 'one': expected int"),
        ('kind = "gpu"', 'kind = "cpu"', 'kind must be "gpu"'),
        ('profile = "qwen3-0.6b"', 'profile = "llama"', "[model] profile"),
        ("[limits]", "[limitz]", "unknown table(s) ['limitz']"),
        ("max_nll_mean_delta = 0.234", "max_nll_mean_deltaa = 0.234", "[quality.policy]"),
        ("top_k = 8", "top_k = 8\nseed = 777", "seed"),  # schema 1's quality windows are gone
        ("mem_fraction_static = 0.6", "mem_fraction_static = 2.0", "mem_fraction_static"),
        ("piecewise_cuda_graph = false", "piecewise_cuda_graph = true", "piecewise_cuda_graph"),
        ('metric = "decode_gpu_tokens_per_s"', 'metric = "decode_gpu_tokens_per_s"\nconfirm_cycles = 1', "confirm_cycles"),
        ("windows_per_role = 1 ", "windows_per_role = 0 ", "[workload] windows_per_role"),
        ("cuda_graph_bs = [1, 2, 4, 8, 16, 32, 64, 128, 192, 256]", "cuda_graph_bs = [8, 1, 256]", "[engine] cuda_graph_bs"),
        (
            "cuda_graph_bs = [1, 2, 4, 8, 16, 32, 64, 128, 192, 256]",
            "cuda_graph_bs = [1, 8, 128]",
            "ending at cuda_graph_max_bs",
        ),
        ("cuda_graph_bs = [1, 2, 4, 8, 16, 32, 64, 128, 192, 256]", "cuda_graph_bs = 8", "expected a list of integers"),
        ('metric = "decode_gpu_tokens_per_s"', 'metric = "gpu_seconds"', "[speed] metric"),
        ("settle_windows = 1 ", "settle_windows = -1 ", "[workload] settle_windows"),
        ("page_size = 1", "page_size = 1\nchunked_prefill_size = 100", "[engine] chunked_prefill_size"),
        ("page_size = 1", "page_size = 64\nchunked_prefill_size = 8200", "multiple of page_size (64)"),
    ],
)
def test_bad_config_names_file_table_and_key(tmp_path, old, new, needle):
    p = _write(tmp_path, _dense_text(**{old: new}))
    with pytest.raises(ArenaConfigError) as e:
        load_config(p)
    assert str(p) in str(e.value) and needle in str(e.value)


def test_missing_table_is_named_not_defaulted(tmp_path):
    text = (CONFIGS / "dense.toml").read_text()
    p = _write(tmp_path, text[: text.index("[limits]")])
    with pytest.raises(ArenaConfigError, match=r"missing table\(s\) \['limits'\]"):
        load_config(p)


def test_validator_gets_the_gpu_qualifier_from_a_config():
    from arena import qualifier_from_config

    q = qualifier_from_config(CONFIGS / "dense.toml", preflight=False)
    assert q.arena_id == load_config(CONFIGS / "dense.toml").arena_id and q.label == "gpu-arena"


def test_cli_arena_id_and_usage_errors(tmp_path, capsys):
    from cacheon_subnet.cli import main

    assert main(["arena", "id", "--config", str(CONFIGS / "moe.toml")]) == 0
    assert capsys.readouterr().out.strip() == load_config(CONFIGS / "moe.toml").arena_id
    assert (
        main(["arena", "run", "--config", str(tmp_path / "missing.toml"), "--bundle", str(h.REPO / "examples/norm.rmsnorm")])
        == 2
    )
    assert "no such arena config" in capsys.readouterr().err


def test_cli_control_usage_errors(capsys):
    from cacheon_subnet.cli import main

    cfg = str(CONFIGS / "dense.toml")
    assert main(["arena", "run", "--config", cfg]) == 2
    assert "--bundle is required" in capsys.readouterr().err
    assert main(["arena", "run", "--config", cfg, "--control", "stock-as-candidate"]) == 2
    assert "takes --slot" in capsys.readouterr().err
    assert main(["arena", "run", "--config", cfg, "--control", "stock-as-candidate", "--slot", "norm.nope"]) == 2
    assert "unknown slot" in capsys.readouterr().err
    slot = ["--slot", "norm.rmsnorm"]
    assert main(["arena", "run", "--config", cfg, "--control", "handicap", *slot]) == 2
    assert "--handicap-us MICROSECONDS goes with --control handicap" in capsys.readouterr().err
    assert main(["arena", "run", "--config", cfg, "--control", "stock-as-candidate", *slot, "--handicap-us", "50"]) == 2
    assert "goes with --control handicap or slowdown, and only with them" in capsys.readouterr().err
    assert main(["arena", "run", "--config", cfg, "--control", "handicap", *slot, "--handicap-us", "-5"]) == 2
    assert "--handicap-us -5: expected 0 < µs <= 100000" in capsys.readouterr().err


def test_tp2_arena_expects_both_ranks():
    from arena.jobs import engine_kwargs

    tp2 = load_config(CONFIGS / "dense-tp2.toml")
    assert tp2.engine.tp_size == 2 and engine_kwargs(tp2)["tp_size"] == 2
    assert tp2.arena_id != load_config(CONFIGS / "dense.toml").arena_id


def test_trained_arena_config_and_its_prompts(tmp_path):
    from arena.engine.child import Driver
    from arena.jobs import checkpoint_job, resident_steps

    cfg = load_config(CONFIGS / "dense-trained.toml")
    assert cfg.model.init == "trained" and cfg.profile.vocab == 512
    assert cfg.arena_id != load_config(CONFIGS / "dense.toml").arena_id
    job = checkpoint_job(cfg, tmp_path)
    assert job["kind"] == "trained" and job["steps"] == 600 and job["hf_config"]["vocab_size"] == 512
    steps, _ = resident_steps(cfg)
    p = next(s for s in steps if s["op"] == "generate")["prompts"]
    assert p["source"] == "corpus"
    d = Driver({}, record_fd=-1)
    a, b = d.prompts(dict(p, n=3, len=64)), d.prompts(dict(p, n=3, len=64))
    assert a == b and all(len(x) == 64 and max(x) < 256 for x in a)  # held-out bytes, deterministic


@pytest.mark.parametrize(
    "old,new,needle",
    [
        ('init = "trained"', 'init = "pretrained"', "[model] init"),
        ("vocab = 512", "vocab = 256", "[model] vocab"),
        ("train_steps = 600", "train_steps = 0", "[model] train_steps"),
    ],
)
def test_trained_arena_bad_keys(tmp_path, old, new, needle):
    text = (CONFIGS / "dense-trained.toml").read_text().replace(old, new)
    p = _write(tmp_path, text)
    with pytest.raises(ArenaConfigError) as e:
        load_config(p)
    assert needle in str(e.value)
