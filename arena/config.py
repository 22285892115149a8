"""Arena identity: model, engine args, workload, statistics and pins, read from
configs/arena/*.toml. The content digest of all of it (plus the pins and the checkpoint recipe)
is the arena id stamped on every result, so two results are comparable only when their ids match.

Every key is checked: an unknown key, a wrong type or an out-of-range value is an ArenaConfigError
naming the file, the table and the key — never a silent default.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from arena.config_sections import (
    OPTIONAL_SECTIONS,
    SECTIONS,
    SPEED_METRICS,
    ArenaConfigError,
    EngineSection,
    LimitsSection,
    ModelSection,
    QualitySection,
    SequentialSection,
    SpeedSection,
    TeacherSection,
    WorkloadSection,
    parse_section,
)
from cacheon_subnet.env import ARENA_HOME
from cacheon_subnet.pins import SGLANG_KERNEL_PIN, SGLANG_PIN, TORCH_PIN
from cacheon_subnet.slots.profiles import PROFILES, ModelProfile

# 2: [quality] grades a sample of the timed windows (no input_len/output_len/seed)
# 3: [sequential] (an SPRT over per-cycle ratios may end the resident engine's cycles early)
SCHEMA = "cacheon.arena/3"


@dataclass(frozen=True)
class ArenaConfig:
    name: str
    path: str
    model: ModelSection
    engine: EngineSection
    workload: WorkloadSection
    quality: QualitySection
    speed: SpeedSection
    limits: LimitsSection
    sequential: SequentialSection = field(default_factory=SequentialSection)
    teacher: TeacherSection = field(default_factory=TeacherSection)

    @property
    def real(self) -> bool:
        """The arena runs an operator's checkpoint (`[model] path`), not a synthetic one."""
        return self.model.path is not None

    def resolve(self, value: str) -> Path:
        """A path from the config: ~ and $VARS expanded ($CACHEON_ARENA_HOME defaults to the arena
        home, /var/tmp/cacheon), relative to the config file's directory."""
        home, var = ARENA_HOME.get(), ARENA_HOME.name
        value = value.replace("${" + var + "}", home).replace("$" + var, home)
        p = Path(os.path.expandvars(os.path.expanduser(value)))
        return p if p.is_absolute() else Path(self.path).resolve().parent / p

    @property
    def model_dir(self) -> Path:
        assert self.model.path is not None
        return self.resolve(self.model.path)

    @property
    def profile(self) -> ModelProfile:
        from dataclasses import replace

        if self.real:
            cj = self.model_dir / "config.json"
            name = self.model_dir.name.lower() + "@" + (self.model.digest or "").removeprefix("sha256:")[:8]
            if not cj.is_file() and self.model.manifest:  # no weights here (a miner): the manifest's checked copy
                from arena.model.model_dir import load_manifest

                text = load_manifest(self.resolve(self.model.manifest)).config_json
                if text is not None:
                    return _real_profile(text, name, f"{self.model.manifest} (config_json)")
            try:
                text = cj.read_text()
            except FileNotFoundError:
                raise ArenaConfigError(
                    f"{cj}: missing: a real checkpoint is an HF-format directory (or declare a "
                    "manifest written by `cacheon arena digest`, which carries config.json)"
                ) from None
            return _real_profile(text, name, str(cj))
        p = PROFILES[self.model.profile]
        if self.model.layers:
            p = replace(p, layers=self.model.layers)
        if self.model.vocab:
            p = replace(p, vocab=self.model.vocab)
        return p

    def identity(self) -> dict[str, Any]:
        """Everything that changes what the arena measures (the path and name do not)."""
        doc = {k: v for k, v in asdict(self).items() if k not in ("path", "name")}
        if self.teacher == TeacherSection():  # optional table: at its defaults, the id of before
            del doc["teacher"]
        if not self.sequential.stop_on_pass:  # an optional key: off, the id of before
            del doc["sequential"]["stop_on_pass"]
        if self.engine.chunked_prefill_size is None:  # optional key: SGLang's default, the id of before
            del doc["engine"]["chunked_prefill_size"]
        if not self.engine.resident:  # optional keys: off, the id of before (the max only counts when on)
            del doc["engine"]["resident"], doc["engine"]["resident_max_jobs"]
        else:  # the resident engine arms every local adapter (arena/timed_stages.py _resident_bindings)
            doc["engine"]["resident_armed"] = "local"
        doc["schema"] = SCHEMA
        doc["pins"] = {"sglang": SGLANG_PIN, "sglang_kernel": SGLANG_KERNEL_PIN, "torch": TORCH_PIN}
        if self.real:  # the digest covers config.json, weights and tokenizer; where it lives does not count
            doc["model"] = {"digest": self.model.digest}
            doc["hf_config"] = None
            doc["workload"]["corpus"] = {"name": self.workload.corpus, "sha256": self.corpus_sha256}
            return doc
        doc["hf_config"] = hf_config(self)
        from arena.model.checkpoint import RECIPE_VERSION

        doc["checkpoint_recipe"] = RECIPE_VERSION  # a new init recipe is a new arena
        return doc

    @property
    def corpus_sha256(self) -> str:
        from arena.model.prompts import corpus_path, corpus_sha256

        assert self.workload.corpus is not None
        return corpus_sha256(corpus_path(self.workload.corpus, Path(self.path).resolve().parent))

    @property
    def arena_id(self) -> str:
        data = json.dumps(self.identity(), sort_keys=True, separators=(",", ":")).encode()
        return "arena-" + hashlib.sha256(data).hexdigest()[:16]


_REAL_KEYS = {"path", "digest", "manifest"}


def _check_real(path: Path, cfg: ArenaConfig, raw_model: Mapping[str, Any]) -> None:
    """A real checkpoint: digest declared, manifest consistent with it, shapes from its config.json
    (no synthetic keys beside it), prompts from a corpus, a context the model supports."""

    def bad(where: str, why: str) -> ArenaConfigError:
        return ArenaConfigError(f"{path}: {where}: {why}")

    if not cfg.real:
        raise bad("[workload] corpus", "text prompts need a real checkpoint's tokenizer ([model] path)")
    extra = sorted(set(raw_model) - _REAL_KEYS)
    if extra:
        raise bad(
            "[model]",
            f"{extra} set beside path: a real checkpoint's shapes, dtype and weights come from "
            f"its own files (only {sorted(_REAL_KEYS)} apply)",
        )
    d = cfg.model.digest or ""
    if not (d.startswith("sha256:") and len(d) == 71 and all(c in "0123456789abcdef" for c in d[7:])):
        raise bad(
            "[model] digest",
            f'{d or None!r}: the checkpoint\'s content digest "sha256:<64 hex>" is '
            "required (`cacheon arena digest --model-dir DIR` prints it)",
        )
    if cfg.model.manifest is not None:
        from arena.model.model_dir import CheckpointMismatch, load_manifest

        try:
            m = load_manifest(cfg.resolve(cfg.model.manifest))
        except CheckpointMismatch as e:
            raise bad("[model] manifest", str(e)) from None
        if m.digest != d:
            raise bad("[model] manifest", f"lists checkpoint {m.digest}, not the declared digest {d}")
    if cfg.workload.corpus is None:
        raise bad(
            "[workload] corpus",
            "a real checkpoint takes its prompts from text: name a corpus "
            '("stdlib-docs" ships with the arena, or a UTF-8 file)',
        )
    from arena.model.prompts import CorpusError

    try:
        cfg.corpus_sha256  # noqa: B018 - the property reads and checks the corpus
    except CorpusError as e:
        raise bad("[workload] corpus", str(e)) from None


@lru_cache(maxsize=16)
def _real_profile(text: str, name: str, where: str) -> ModelProfile:
    """The checkpoint's shapes from its config.json text, registered under "<dir name>@<digest
    prefix>" (slot case labels)."""
    from cacheon_subnet.slots.profiles import from_hf_config, register

    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ArenaConfigError(f"{where}: not JSON ({e})") from None
    try:
        return register(from_hf_config(doc, name))
    except ValueError as e:
        raise ArenaConfigError(f"{where}: {e}") from None


def _check(path: Path, cfg: ArenaConfig, raw_model: Mapping[str, Any] | None = None) -> None:
    raw_model = raw_model or {}

    def bad(where: str, why: str) -> ArenaConfigError:
        return ArenaConfigError(f"{path}: {where}: {why}")

    if cfg.real or cfg.workload.corpus is not None:
        _check_real(path, cfg, raw_model)
    if cfg.model.profile not in PROFILES:
        raise bad("[model] profile", f"{cfg.model.profile!r} is not a known profile ({sorted(PROFILES)})")
    if cfg.model.layers is not None and not 1 <= cfg.model.layers <= 128:
        raise bad("[model] layers", "must be in 1..128")
    if cfg.model.dtype not in ("bfloat16", "float16"):
        raise bad("[model] dtype", "bfloat16 or float16")
    if cfg.model.init not in ("random", "trained"):
        raise bad("[model] init", '"random" or "trained"')
    if cfg.model.init == "trained" and not (cfg.model.vocab and 257 <= cfg.model.vocab <= 4096):
        raise bad("[model] vocab", "a trained (byte-level) arena needs vocab in 257..4096 (SGLang maps id vocab-1 to 0)")
    if cfg.model.init == "trained" and cfg.profile.moe is not None:
        raise bad("[model] init", "trained checkpoints are dense (qwen3) only")
    if not 1 <= cfg.model.train_steps <= 100000:
        raise bad("[model] train_steps", "must be in 1..100000")
    if cfg.engine.tp_size not in (1, 2, 4, 8):
        raise bad("[engine] tp_size", "1, 2, 4 or 8")
    bs = cfg.engine.cuda_graph_bs
    if bs and (list(bs) != sorted(set(bs)) or bs[0] < 1 or bs[-1] != cfg.engine.cuda_graph_max_bs):
        raise bad(
            "[engine] cuda_graph_bs",
            f"{list(bs)}: strictly increasing, >= 1, ending at cuda_graph_max_bs ({cfg.engine.cuda_graph_max_bs})",
        )
    chunk = cfg.engine.chunked_prefill_size
    if chunk is not None and not (256 <= chunk <= 65536 and chunk % cfg.engine.page_size == 0):
        raise bad(
            "[engine] chunked_prefill_size",
            f"{chunk}: must be in 256..65536 and a multiple of page_size ({cfg.engine.page_size}), or unset",
        )
    if not 1 <= cfg.engine.resident_max_jobs <= 100000:
        raise bad("[engine] resident_max_jobs", "must be in 1..100000")
    if not 0.1 <= cfg.engine.mem_fraction_static <= 0.95:
        raise bad("[engine] mem_fraction_static", "must be in 0.1..0.95")
    w = cfg.workload
    if w.cycles < 2:
        raise bad("[workload] cycles", "at least 2 (noise is measured between B and B′ windows)")
    if not 1 <= w.windows_per_role <= 16:
        raise bad("[workload] windows_per_role", "must be in 1..16")
    if not 0 <= w.settle_windows <= 8:
        raise bad("[workload] settle_windows", "must be in 0..8")
    if w.prompts_per_window < 1 or w.input_len < 1 or w.output_len < 2:
        raise bad("[workload]", "prompts_per_window, input_len >= 1 and output_len >= 2")
    if w.input_len + w.output_len > cfg.engine.context_length:
        raise bad("[workload]", f"input_len + output_len > context_length {cfg.engine.context_length}")
    q = cfg.quality
    if q.prompts < 8 or not 1 <= q.top_k <= 20:
        raise bad("[quality]", "prompts >= 8, top_k in 1..20")
    if w.output_len < 4:
        raise bad("[workload]", "output_len >= 4 (the timed windows' outputs are the graded ones)")
    s = cfg.speed
    if not (0 < s.margin < 1 and s.k_noise > 0 and 0 < s.max_noise < 1):
        raise bad("[speed]", "0 < margin < 1, k_noise > 0, 0 < max_noise < 1")
    if not 0 <= s.confirm_cycles <= 50 or s.confirm_cycles == 1:
        raise bad("[speed] confirm_cycles", "0 (off) or 2..50")
    if cfg.engine.piecewise_cuda_graph and cfg.engine.cuda_graph:
        raise bad(
            "[engine] piecewise_cuda_graph",
            "not supported in the arena yet: a route swap cannot rebuild "
            "piecewise graphs, so prefill would keep the route captured at start (docs/arena.md)",
        )
    q2 = cfg.sequential
    if not (0 < q2.alpha < 0.5 and 0 < q2.beta < 0.5 and 0 < q2.alt_gain < 1 and 0 < q2.sigma < 1):
        raise bad("[sequential]", "0 < alpha < 0.5, 0 < beta < 0.5, 0 < alt_gain < 1, 0 < sigma < 1")
    if not 1 <= q2.min_cycles <= w.cycles:
        raise bad("[sequential] min_cycles", f"must be in 1..[workload] cycles ({w.cycles})")
    if q2.enabled and q2.min_cycles < 2:
        raise bad("[sequential] min_cycles", "at least 2 when enabled (the fixed verdict needs 2 cycles)")
    t = cfg.teacher
    if not (0.05 <= t.mem_fraction_static <= 0.5 and 0 < t.canary_atol <= 0.1 and 1 <= t.max_jobs <= 100000):
        raise bad("[teacher]", "mem_fraction_static in 0.05..0.5, 0 < canary_atol <= 0.1, max_jobs in 1..100000")
    if t.resident and cfg.engine.mem_fraction_static + t.mem_fraction_static > 0.95:
        raise bad(
            "[teacher] mem_fraction_static",
            f"a resident teacher shares the GPU with the timed engine: "
            f"{t.mem_fraction_static} + [engine] mem_fraction_static {cfg.engine.mem_fraction_static} > 0.95",
        )
    if s.metric not in SPEED_METRICS:
        raise bad("[speed] metric", " or ".join(SPEED_METRICS))
    if cfg.quality.policy:
        from arena.verdict.quality import QualityPolicy

        try:
            QualityPolicy.from_mapping(dict(cfg.quality.policy))
        except ValueError as e:
            raise bad("[quality.policy]", str(e)) from None


def load_config(path: str | Path) -> ArenaConfig:
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ArenaConfigError(f"{path}: no such arena config") from None
    except tomllib.TOMLDecodeError as e:
        raise ArenaConfigError(f"{path}: not valid TOML ({e})") from None
    top = {k: v for k, v in raw.items() if not isinstance(v, dict)}
    if top.get("kind") != "gpu":
        raise ArenaConfigError(f'{path}: kind must be "gpu" (got {top.get("kind")!r}; the CPU timing path is --arena cpu)')
    unknown = sorted(set(top) - {"kind", "name", "schema"})
    if unknown:
        raise ArenaConfigError(f"{path}: unknown top-level key(s) {unknown} (known: kind, name, schema)")
    if top.get("schema", SCHEMA) != SCHEMA:
        raise ArenaConfigError(f"{path}: schema {top.get('schema')!r} != {SCHEMA!r}")
    extra = sorted(k for k, v in raw.items() if isinstance(v, dict) and k not in SECTIONS)
    if extra:
        raise ArenaConfigError(f"{path}: unknown table(s) {extra} (known: {', '.join(SECTIONS)})")
    missing = [n for n in SECTIONS if n not in raw and n not in OPTIONAL_SECTIONS]
    if missing:
        raise ArenaConfigError(
            f"{path}: missing table(s) {missing}: every part of an arena's identity is "
            "written out (see configs/arena/dense.toml)"
        )
    sections = {n: parse_section(path, n, c, raw.get(n)) for n, c in SECTIONS.items()}
    cfg = ArenaConfig(name=str(top.get("name", path.stem)), path=str(path), **sections)
    _check(path, cfg, raw.get("model") or {})
    return cfg


def hf_config(cfg: ArenaConfig) -> dict[str, Any]:
    """The HF config.json of the arena's synthetic checkpoint (Qwen3 dense or Qwen3-MoE)."""
    p = cfg.profile
    doc: dict[str, Any] = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": p.hidden,
        "intermediate_size": p.intermediate,
        "num_hidden_layers": p.layers,
        "num_attention_heads": p.n_heads,
        "num_key_value_heads": p.n_kv_heads,
        "head_dim": p.head_dim,
        "vocab_size": p.vocab,
        "max_position_embeddings": p.max_position,
        "rope_theta": p.rope_theta,
        "rms_norm_eps": p.rms_eps,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": p.moe is None,
        "torch_dtype": cfg.model.dtype,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "use_cache": True,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": p.layers,
        "initializer_range": 0.02,
    }
    if p.moe is not None:
        doc.update(
            {
                "architectures": ["Qwen3MoeForCausalLM"],
                "model_type": "qwen3_moe",
                "num_experts": p.moe.n_experts,
                "num_experts_per_tok": p.moe.top_k,
                "moe_intermediate_size": p.moe.moe_intermediate,
                "norm_topk_prob": p.moe.norm_topk_prob,
                "decoder_sparse_step": 1,
                "mlp_only_layers": [],
                "output_router_logits": False,
                "router_aux_loss_coef": 0.001,
            }
        )
    return doc
