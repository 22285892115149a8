"""The host's preparation of an arena on a real checkpoint, before any engine starts: install a
verified copy of the operator's directory (arena/model/model_dir.py: refused, naming the file, unless
it is the declared digest), check the engine context against the model, and tokenize the
corpus with the checkpoint's tokenizer (arena/model/prompts.py). No SGLang, no contribution code."""

from __future__ import annotations

from pathlib import Path

from arena.config import ArenaConfig, ArenaConfigError
from arena.model.model_dir import install, load_manifest
from arena.model.prompts import corpus_tokens


def prepare(cfg: ArenaConfig, dst: Path) -> list[int]:
    """Install the checkpoint at `dst` (the path the engines load) and return the corpus tokens."""
    assert cfg.real and cfg.model.digest and cfg.workload.corpus
    want = load_manifest(cfg.resolve(cfg.model.manifest)) if cfg.model.manifest else None
    install(cfg.model_dir, dst, cfg.model.digest, want)
    p = cfg.profile  # from the operator's config.json, which the digest just covered
    ctx = cfg.engine.context_length
    if ctx > p.max_position:
        raise ArenaConfigError(
            f"{cfg.path}: [engine] context_length {ctx} exceeds the checkpoint's "
            f"max_position_embeddings {p.max_position} ({cfg.model_dir / 'config.json'})"
        )
    w = cfg.workload
    toks = corpus_tokens(cfg.workload.corpus, dst, p.vocab, w.input_len, Path(cfg.path).resolve().parent)
    return list(toks.tokens)
