"""The tables of an arena config ([model], [engine], [workload], ...): one frozen dataclass each,
whose field defaults and types ARE the schema, and the one reader that holds a TOML table to it.

It exists apart from arena/config.py because the section types are what the rest of the arena
imports on their own (the speed verdict and the consensus simulation take a SpeedSection), with no
need of the whole config and its checks; config.py assembles them into an ArenaConfig, checks the
values across tables and computes the arena id. The reader refuses an unknown key or a wrong type
(ArenaConfigError names the file, the table and the key): never a silent default. The dataclasses
keep `from __future__ import annotations`: the reader tells an optional string field by its
annotation's text ("str | None").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cacheon_subnet.errors import CacheonError


class ArenaConfigError(CacheonError):
    """A configs/arena/*.toml problem: which file, which key, why."""


@dataclass(frozen=True)
class ModelSection:
    profile: str = "qwen3-0.6b"  # a name from cacheon_subnet.slots.profiles
    layers: int | None = None  # override the profile's depth (smaller arenas)
    seed: int = 0  # checkpoint init seed (arena/model/checkpoint.py)
    dtype: str = "bfloat16"
    init: str = "random"  # or "trained": a byte-level model trained on the device (arena/model/train.py)
    vocab: int | None = None  # override the profile's vocabulary (byte-level trained arenas: 257..4096)
    train_steps: int = 600
    # a real checkpoint (docs/arena.md "Real models"): an HF-format directory; its shapes come from
    # its config.json, its content digest ("sha256:...", arena.model.model_dir) is declared here and is
    # part of the arena id; manifest: the per-file list (`cacheon arena digest`) that names a
    # differing file. Relative paths are relative to this config file; ~ and $VARS expand.
    path: str | None = None
    digest: str | None = None
    manifest: str | None = None


@dataclass(frozen=True)
class EngineSection:
    attention_backend: str = "triton"
    sampling_backend: str = "pytorch"
    cuda_graph: bool = True
    piecewise_cuda_graph: bool = False  # not with route swaps yet (see arena/config.py _check)
    page_size: int = 1
    context_length: int = 4096
    mem_fraction_static: float = 0.6
    max_running_requests: int = 256
    cuda_graph_max_bs: int = 256
    # decode batch sizes to capture; () = SGLang's own list (36 sizes up to 256). Fewer sizes make
    # every route swap (a recapture) cheaper; other batch sizes pad up to the next captured one
    cuda_graph_bs: tuple[int, ...] = ()
    tp_size: int = 1
    random_seed: int = 0
    # tokens a prefill forward holds at most; None: SGLang's default by card memory (0.5.13.post1:
    # 8192 on 35-160 GB cards such as the H100 and H200, 16384 above). Part of the arena id when
    # set, left out while unset so existing ids hold; verify and bench size prefill by it
    chunked_prefill_size: int | None = None
    # one timed engine across contributions, each installed and removed by RPC and followed by the
    # post-condition (arena/engine/resident_timed.py). Off in every shipped config until the H200 measures
    # drift and role bias with it; part of the arena id when on (a warm, reused engine can change
    # the numbers), left out while off so existing ids hold
    resident: bool = False
    resident_max_jobs: int = 100  # contributions per resident engine before a fresh one


@dataclass(frozen=True)
class WorkloadSection:
    prompts_per_window: int = 256
    input_len: int = 256
    output_len: int = 128
    cycles: int = 6  # each cycle = windows B, C, C, B′ (ABBA: cancels linear drift)
    windows_per_role: int = 1  # n: a cycle is B×n, C×2n, B′×n (a swap costs ~3–4 s, a window ~1 s)
    settle_windows: int = 1  # untimed windows right after each route swap (the first ones dip)
    warmup_windows: int = 2
    seed: int = 1234
    vocab_low: int = 100  # prompt token ids are drawn from [vocab_low, vocab - 1]
    corpus: str | None = None  # real checkpoints: prompts cut from this text (arena/model/prompts.py)


@dataclass(frozen=True)
class QualitySection:
    # outputs graded per timed engine: that many C outputs, drawn by the host after the fact
    # from the timed C windows, each with the same prompt's output in its mirror baseline window
    prompts: int = 64
    # top-k logprobs requested in EVERY generate step (warm-up, settle, timed alike), so the
    # engine cannot tell graded windows apart; C's own logprobs feed the KL / logprob checks
    top_k: int = 8
    policy: Mapping[str, float] = field(default_factory=dict)  # arena.verdict.quality.QualityPolicy overrides


# wall-clock throughput (the host's clock around each window); output tokens per GPU-second of the
# window's forward passes; or per GPU-second of its decode steps alone (CUDA-graph replays)
# (seams/forward_clock.py: less and least exposed to host phases, docs/benchmarks.md); prompt
# tokens per GPU-second of the prefill (the forwards that are not decode steps: a guard, see
# arena.verdict.speed.guards_of)
SPEED_METRICS = (
    "output_tokens_per_s",
    "total_tokens_per_s",
    "gpu_tokens_per_s",
    "decode_gpu_tokens_per_s",
    "extend_gpu_tokens_per_s",
)


@dataclass(frozen=True)
class SpeedSection:
    margin: float = 0.01  # the smallest gain worth a crown
    k_noise: float = 3.0  # bar = 1 + max(margin, k_noise * noise)
    max_noise: float = 0.02  # above: NO_DECISION (the box is too noisy to decide)
    metric: str = "output_tokens_per_s"
    confirm_cycles: int = 3  # a PASS is re-measured in a fresh engine (fresh prompts); 0 = off


@dataclass(frozen=True)
class SequentialSection:
    """Wald's SPRT over per-cycle log(C/B) (arena/verdict/sequential.py, docs/arena.md "Sequential stop"):
    H0 no gain vs H1 a gain of alt_gain; the resident engine stops after the first cycle at which
    it decides. Off: every verdict runs all its cycles."""

    enabled: bool = False
    alpha: float = 0.01  # false crown rate (PASS with no gain) the test is set for
    beta: float = 0.05  # false FAIL rate at a gain of alt_gain
    alt_gain: float = 0.01
    sigma: float = 0.007  # assumed per-cycle SD of log(C/B); the observed SD is used when larger
    min_cycles: int = 2
    # a PASS decided early ends the cycles too (off: only FAIL stops early, a PASS runs them all;
    # docs/arena.md "Sequential stop" says why). Left out of the arena id while off.
    stop_on_pass: bool = False


@dataclass(frozen=True)
class TeacherSection:
    """The pristine teacher T (arena/engine/resident.py). Optional table: at its defaults it is not part
    of the arena's identity, so arenas written before it keep their id."""

    # keep one T across verdicts instead of starting one per graded verdict (off until its effect
    # on drift and role bias, as an idle co-tenant of the timed engines, is measured on a GPU)
    resident: bool = False
    mem_fraction_static: float = 0.25  # a resident T's share beside the timed engine's
    canary_atol: float = 1e-3  # how far T's canary logprobs may move since its first reading
    max_jobs: int = 200  # a resident T is recycled after this many verdicts


@dataclass(frozen=True)
class LimitsSection:
    engine_start_timeout_s: float = 300.0
    total_timeout_s: float = 1200.0
    gpu_free_timeout_s: float = 30.0


SECTIONS = {
    "model": ModelSection,
    "engine": EngineSection,
    "workload": WorkloadSection,
    "quality": QualitySection,
    "speed": SpeedSection,
    "limits": LimitsSection,
    "sequential": SequentialSection,
    "teacher": TeacherSection,
}
OPTIONAL_SECTIONS = ("teacher",)


def parse_section(path: Path, name: str, cls: type, raw: Any) -> Any:
    """Table `name` of the file at `path` as a `cls`: every key known, every value of its field's type."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ArenaConfigError(f"{path}: [{name}] must be a table")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ArenaConfigError(f"{path}: [{name}] unknown key(s) {unknown} (known: {sorted(known)})")
    defaults = cls()
    out: dict[str, Any] = {}
    for key, value in raw.items():
        want = getattr(defaults, key)
        if isinstance(want, tuple):
            if not (isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
                raise ArenaConfigError(f"{path}: [{name}] {key} = {value!r}: expected a list of integers")
            out[key] = tuple(value)
            continue
        if known[key].type == "str | None":
            if not isinstance(value, str) or not value:
                raise ArenaConfigError(f"{path}: [{name}] {key} = {value!r}: expected a non-empty string")
            out[key] = value
            continue
        ok = (
            isinstance(value, bool)
            if isinstance(want, bool)
            else isinstance(value, (int, float)) and not isinstance(value, bool)
            if isinstance(want, float)
            else isinstance(value, int) and not isinstance(value, bool)
            if isinstance(want, int)
            else isinstance(value, str)
            if isinstance(want, str)
            else isinstance(value, dict)
            if isinstance(want, Mapping)
            else value is None or isinstance(value, int)
        )
        if not ok:
            raise ArenaConfigError(f"{path}: [{name}] {key} = {value!r}: expected {type(want).__name__}")
        out[key] = float(value) if isinstance(want, float) else value
    return cls(**out)
