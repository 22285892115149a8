"""Write arena/corpus/stdlib-docs.txt: English prose for real-model arena prompts.

The text is the docstrings of CPython's pure-Python standard library (PSF License 2.0, a
permissive licence; the file's header says so), taken with `ast` in sorted module order,
whitespace-normalised, deduplicated, and kept only when mostly prose (>= 12 words, few code
symbols). Deterministic for one CPython version; the file in the repo is the corpus (its sha256
is part of the arena id), this script only says how it was made.

    python scripts/make_corpus.py [--max-bytes 300000]
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import sysconfig
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "arena" / "corpus" / "stdlib-docs.txt"
SKIP = ("test", "idlelib", "lib2to3", "turtledemo", "site-packages", "ensurepip", "tkinter", "pydoc_data")
HEADER = (
    "# Docstrings of the CPython {ver} standard library, (c) Python Software Foundation, "
    "PSF License Version 2 (https://docs.python.org/3/license.html). Made by scripts/make_corpus.py.\n\n"
)


def _prose(doc: str) -> str | None:
    text = re.sub(r"\s+", " ", doc).strip()
    words = text.split()
    if len(words) < 12 or sum(c in "{}[]()=<>_*|\\`" for c in text) > len(text) / 25:
        return None
    return text


def docstrings(root: Path) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if any(part in SKIP or part.startswith("test") for part in rel.split("/")):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                text = _prose(doc) if doc else None
                if text and text not in seen:
                    seen.add(text)
                    out.append(text)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-bytes", type=int, default=300_000)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    root = Path(sysconfig.get_paths()["stdlib"])
    text = HEADER.format(ver=".".join(map(str, sys.version_info[:3])))
    for para in docstrings(root):
        if len(text.encode()) + len(para.encode()) + 2 > args.max_bytes:
            break
        text += para + "\n\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"{args.out}: {len(text.encode())} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
