"""Build the engine jobs of one qualification: the resident engine (B / C / B′ windows, candidate
route swapped in and out; its timed windows are also the graded ones) and the pristine teacher T."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arena.config import ArenaConfig, hf_config
from arena.verdict.speed import Window, plan


def engine_kwargs(cfg: ArenaConfig) -> dict[str, Any]:
    e = cfg.engine
    return {
        "load_format": "auto",
        "skip_tokenizer_init": True,
        "attention_backend": e.attention_backend,
        "sampling_backend": e.sampling_backend,
        "grammar_backend": "none",
        "random_seed": e.random_seed,
        "disable_cuda_graph": not e.cuda_graph,
        "disable_piecewise_cuda_graph": not (e.cuda_graph and e.piecewise_cuda_graph),
        "page_size": e.page_size,
        "context_length": e.context_length,
        "mem_fraction_static": e.mem_fraction_static,
        "max_running_requests": e.max_running_requests,
        "cuda_graph_max_bs": e.cuda_graph_max_bs,
        "tp_size": e.tp_size,
        "disable_radix_cache": True,  # repeated prompts would skip prefill (~30 % faster)
        "log_level": "warning",
        **({"cuda_graph_bs": list(e.cuda_graph_bs)} if e.cuda_graph_bs else {}),
        **({"chunked_prefill_size": e.chunked_prefill_size} if e.chunked_prefill_size else {}),
    }


def checkpoint_job(cfg: ArenaConfig, checkpoint_root: Path) -> dict[str, Any]:
    from arena.model.checkpoint import recipe_digest

    if cfg.real:  # the host installs a verified copy there first (arena.model.model_dir.install)
        d = (cfg.model.digest or "").removeprefix("sha256:")
        return {"kind": "real", "digest": cfg.model.digest, "dir": str(checkpoint_root / f"real-{d[:16]}")}
    doc = hf_config(cfg)
    if cfg.model.init == "trained":
        key = recipe_digest({**doc, "cacheon_trained_steps": cfg.model.train_steps}, cfg.model.seed)
        return {
            "kind": "trained",
            "hf_config": doc,
            "seed": cfg.model.seed,
            "steps": cfg.model.train_steps,
            "dir": str(checkpoint_root / f"trained-{key[:16]}"),
            "device": "cuda",
        }
    digest = recipe_digest(doc, cfg.model.seed)
    return {
        "hf_config": doc,
        "seed": cfg.model.seed,
        "dir": str(checkpoint_root / digest[:16]),
        "device": "cpu",
    }  # CPU draws are machine-independent


def _prompts(cfg: ArenaConfig, seed: int, n: int, length: int) -> dict[str, Any]:
    """Random token ids for random-init models; held-out corpus text for a trained byte model
    (ids it never saw in training would say nothing about quality); a real checkpoint's prompts are
    cut from the job's `text_tokens` (the corpus, tokenized by the host: arena/model/prompts.py)."""
    source = "text" if cfg.real else "corpus" if cfg.model.init == "trained" else "random"
    return {"seed": seed, "n": n, "len": length, "low": cfg.workload.vocab_low, "high": cfg.profile.vocab, "source": source}


prompt_spec = _prompts  # the resident timed engine's canary takes its prompts the same way (arena/engine/postcondition.py)


def greedy_and_throughput_steps(
    cfg: ArenaConfig, greedy_prompts: int, greedy_tokens: int, reps: int, greedy_top_k: int = 0
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """An engine's greedy comparison step (its outputs kept) and `reps` timed throughput steps on
    the arena's workload: what a whole-engine A/B (scripts/seam_proof.py, scripts/release_serve.py)
    runs in every engine, the same prompts in each. greedy_top_k 1 keeps the chosen token's logprob."""
    w = cfg.workload
    greedy = {
        "op": "generate",
        "tag": "greedy",
        "keep_outputs": True,
        "top_k": greedy_top_k,
        "max_new_tokens": greedy_tokens,
        "prompts": {"seed": 777, "n": greedy_prompts, "len": 128, "low": 100, "high": cfg.profile.vocab},
    }
    tput = [
        {
            "op": "generate",
            "tag": f"tput-{i}",
            "timed": True,
            "top_k": 0,
            "max_new_tokens": w.output_len,
            "prompts": {
                "seed": 5000 + i,
                "n": w.prompts_per_window,
                "len": w.input_len,
                "low": 100,
                "high": cfg.profile.vocab,
            },
        }
        for i in range(reps)
    ]
    return greedy, tput


def window_tag(w: Window) -> str:
    return f"w{w.index:03d}-{w.role}"


def mirror(windows: tuple[Window, ...]) -> dict[int, int]:
    """C window -> the baseline window it is paired with (speed.paired's mirror: within a cycle
    B×n C×2n B′×n, C[j] mirrors B[n−1−j] and C[2n−1−j] mirrors B′[j]). A pair runs the same
    prompts, so the quality sample compares C and B on the same inputs."""
    by: dict[int, dict[str, list[Window]]] = {}
    for w in windows:
        if w.cycle >= 0:
            by.setdefault(w.cycle, {}).setdefault(w.role, []).append(w)
    out = {}
    for roles in by.values():
        b, cc, bp = roles.get("B", []), roles.get("C", []), roles.get("B'", [])
        n = len(b)
        if len(bp) != n or len(cc) != 2 * n:
            continue
        for j in range(n):
            out[cc[j].index] = b[n - 1 - j].index
            out[cc[2 * n - 1 - j].index] = bp[j].index
    return out


def resident_steps(
    cfg: ArenaConfig,
    baseline: str = "stock",
    confirm: bool = False,
    candidate: str = "candidate",
    quality: bool = True,
    gates: bool = False,
) -> tuple[list[dict[str, Any]], tuple[Window, ...]]:
    """Swap to the baseline (stock or the incumbent), warm-up, the B C C B′ cycles (swapping the
    route where it changes; `settle_windows` untimed windows after each swap).

    Every generate step reaches the engine in one form: the same prompt count and length, the
    same max_new_tokens and the same sampling parameters, logprob requests included (top_k =
    [quality] top_k whenever quality is graded): warm-up, settle and timed windows cannot be told
    apart, and the timed windows are the graded ones ("keep", a driver-only flag: the host picks
    the sample from them after the fact). A C window runs the same prompts as its mirror
    baseline window (mirror()); otherwise prompts are fresh everywhere.
    confirm: the confirmation pass — its own cycle count, prompts never used before.
    candidate/quality: the seam-overhead benchmark times "stock" against "pristine", ungraded.
    gates: the last window of every cycle but the final one carries "gate" (driver-only, like
    "keep"): the driver then waits for the host's go/stop (the sequential test, arena/verdict/sequential.py)."""
    w = cfg.workload
    cycles, salt = (cfg.speed.confirm_cycles, 104729) if confirm else (w.cycles, 0)
    windows = plan(cycles, w.warmup_windows, baseline, w.windows_per_role, candidate)
    pair = mirror(windows)
    top_k = cfg.quality.top_k if quality else 0
    steps: list[dict[str, Any]] = []
    route, epoch = "candidate", 0  # the engine starts with the candidate captured

    def gen(tag: str, seed: int, keep: bool) -> dict[str, Any]:
        return {
            "op": "generate",
            "tag": tag,
            "keep": keep,
            "top_k": top_k,
            "max_new_tokens": w.output_len,
            "prompts": _prompts(cfg, seed, w.prompts_per_window, w.input_len),
        }

    def to(r: str) -> None:
        nonlocal route, epoch
        if r != route:
            epoch += 1
            steps.append({"op": "route", "route": r, "epoch": epoch, "tag": f"route-{epoch}-{r}"})
            route = r
            for k in range(w.settle_windows):  # untimed: the first windows after a recapture dip
                steps.append(gen(f"settle-{epoch}-{k}", w.seed + salt + 15485863 + 31 * epoch + k, False))

    last = {}
    for win in windows:
        if win.cycle >= 0:
            last[win.cycle] = win.index
    gate_at = {i for c, i in last.items() if c != max(last)} if gates and last else set()
    for win in windows:
        to(win.route)
        seed = w.seed + salt + 7919 * (pair.get(win.index, win.index) + 1)
        steps.append(gen(window_tag(win), seed, quality and win.role != "warmup"))
        if win.index in gate_at:
            steps[-1]["gate"] = True
    return steps, windows


def teacher_steps(cfg: ArenaConfig, sequences: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One teacher-forcing step per (stage, role) sample: T scores exactly what was timed."""
    return [
        {
            "op": "teacher",
            "tag": f"T-{name}",
            "top_k": cfg.quality.top_k,
            "sequences": [{"key": s["key"], "prompt": s["prompt"], "cont": s["cont"]} for s in seqs],
        }
        for name, seqs in sequences.items()
    ]
