"""Prompts from text for arenas on a real checkpoint: a corpus named in the config, tokenized on
the host with the checkpoint's own tokenizer, then cut into fresh prompts per window.

The host (arena run) tokenizes the corpus once (`corpus_tokens`) and hands the token stream to
each engine job; the driver cuts window prompts from it (`text_prompts`, deterministic in the
window's seed, exactly like the random-id prompts of the synthetic arenas), so the engine needs
no tokenizer (SGLang runs with skip_tokenizer_init) and the teacher re-derives the same prompts.
Prompts start at seeded offsets anywhere in the stream: fresh across windows (the radix cache is
off anyway), natural text to the model.

A corpus is a name shipped in arena/corpus/ (`stdlib-docs`: docstrings of the CPython standard
library, PSF licence) or a path to a UTF-8 text file (relative to the arena config).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

from cacheon_subnet.errors import CacheonError

CORPUS_DIR = Path(__file__).resolve().parents[1] / "corpus"
MAX_CORPUS_BYTES = 64 << 20  # the token stream travels in every engine job


class CorpusError(CacheonError):
    """A corpus or tokenizer problem: which file, why."""


@dataclass(frozen=True)
class CorpusTokens:
    name: str
    sha256: str  # of the corpus file's bytes
    tokens: tuple[int, ...]


def corpus_path(name: str, base: Path | None = None) -> Path:
    """A shipped corpus by name, else a path (relative to `base`, the config's directory)."""
    shipped = CORPUS_DIR / f"{name}.txt"
    if "/" not in name and not name.endswith(".txt") and shipped.is_file():
        return shipped
    p = Path(name).expanduser()
    p = p if p.is_absolute() or base is None else base / p
    if not p.is_file():
        known = sorted(f.stem for f in CORPUS_DIR.glob("*.txt"))
        raise CorpusError(f"corpus {name!r}: neither a shipped corpus ({known}) nor a file ({p})")
    return p


def corpus_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_tokenizer(model_dir: Path):  # noqa: ANN201 - a tokenizers.Tokenizer or a transformers tokenizer
    """The checkpoint's tokenizer: tokenizer.json through `tokenizers` (light, CPU), else
    transformers' AutoTokenizer when installed (sentencepiece-only checkpoints)."""
    tj = model_dir / "tokenizer.json"
    if tj.is_file():
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise CorpusError(
                "tokenizing a corpus needs the `tokenizers` package (pip install 'cacheon-subnet[realmodel]')"
            ) from None
        try:
            return Tokenizer.from_file(str(tj))
        except Exception as e:  # tokenizers raises its own Exception type on a bad file
            raise CorpusError(f"{tj}: not a tokenizer the `tokenizers` package can read ({e})") from None
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise CorpusError(f"{model_dir}: no tokenizer.json, and transformers (for AutoTokenizer) is not installed") from None
    try:
        return AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except Exception as e:
        raise CorpusError(f"{model_dir}: AutoTokenizer cannot load its tokenizer ({e})") from None


def encode(tokenizer, text: str) -> list[int]:  # noqa: ANN001
    """Token ids without special tokens (prompts are cut from the middle of the stream)."""
    if hasattr(tokenizer, "encode_batch"):  # tokenizers.Tokenizer
        return list(tokenizer.encode(text, add_special_tokens=False).ids)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def corpus_tokens(name: str, model_dir: Path, vocab: int, min_len: int, base: Path | None = None) -> CorpusTokens:
    """Tokenize the corpus with the checkpoint's tokenizer. Refused: a corpus over MAX_CORPUS_BYTES,
    not UTF-8, shorter than one prompt, or giving ids outside the model's vocabulary."""
    path = corpus_path(name, base)
    raw = path.read_bytes()
    if len(raw) > MAX_CORPUS_BYTES:
        raise CorpusError(f"{path}: {len(raw)} bytes, more than {MAX_CORPUS_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}: not UTF-8 ({e})") from None
    ids = encode(load_tokenizer(Path(model_dir)), text)
    if len(ids) <= min_len:
        raise CorpusError(f"{path}: {len(ids)} tokens, fewer than one prompt needs ({min_len + 1})")
    if max(ids) >= vocab or min(ids) < 0:
        raise CorpusError(
            f"{path}: the tokenizer in {model_dir} gives ids up to {max(ids)}, outside the model's vocabulary ({vocab})"
        )
    return CorpusTokens(name, hashlib.sha256(raw).hexdigest(), tuple(ids))


def text_prompts(tokens: list[int] | tuple[int, ...], seed: int, n: int, length: int) -> list[list[int]]:
    """n prompts of `length` tokens at seeded offsets of the stream (same seed, same prompts)."""
    if len(tokens) <= length:
        raise CorpusError(f"token stream of {len(tokens)} tokens is shorter than a {length}-token prompt")
    r = random.Random(seed)
    starts = [r.randrange(0, len(tokens) - length) for _ in range(n)]
    return [list(tokens[s : s + length]) for s in starts]
