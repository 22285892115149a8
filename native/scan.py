"""The lexical pre-scan of an op's CUDA sources, before nvcc reads a byte of them.

Why: nvcc's preprocessor will open any path an `#include` names, and `#pragma`s set compiler
state; the sandbox wall bounds what that can reach and the dependency check (native/lane.py)
refuses any compile that read a file outside the sources and the validator's headers, but a
miner deserves the reason at the line that caused it, and a host file's bytes should never be
quoted back in a compiler error. So this scan reads the sources the way the C preprocessor's first
phases do (line splices, comments replaced by one space even across lines, string and character
literals, digit separators) and checks every directive:

- `#include` names a file literally: `"path"` of this op's sources (relative to the bundle root;
  no `..`, no absolute path, only `.cuh` headers) or a toolchain header `<name>` / `"name"`;
  never a macro, `#include_next`, `#import` or `#embed`;
- `#pragma` only `once`, `unroll [N]`, `nounroll`; no `_Pragma`, `__pragma`, `__has_include`;
- no `#line` or line markers (they would forge the file:line a miner is told), no raw string
  literals and no trigraphs (both change how the rest of a file lexes).

Anything the scan cannot read the same way the preprocessor would is refused, not guessed at.
What no lexical scan can see (a `_Pragma` made by token pasting or by a header macro that
stringizes its argument) is checked after preprocessing: `preprocessed_pragmas`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from cacheon_subnet.bundle.limits import DEFAULT_CUDA_LIMITS, CudaLimits
from native.diag import Diagnostic

ALLOWED_DIRECTIVES = frozenset(
    {"include", "define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else", "endif"}
    | {"pragma", "error", "warning"}
)
ALLOWED_PRAGMAS = ("once", "unroll", "nounroll")
FORBIDDEN_WORDS = re.compile(r"\b(_Pragma|__pragma|__has_include|__has_include_next|__has_embed)\b")
HEADER_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./+\-]{0,199}$")
MAX_DIAGNOSTICS = 20  # an op's (and a file's) first findings: the miner fixes those; more only cost the host
_TRIGRAPH = re.compile(r"\?\?[=/'()!<>\-]")
_SPLICE = re.compile(r"\\[ \t]*\n")
_RAW_PREFIX = re.compile(r"(?:^|[^A-Za-z0-9_])(?:u8|u|U|L)?R$")
_DIRECTIVE = re.compile(r"^[ \t\f\v]*(?:#|%:)[ \t\f\v]*(?P<name>[A-Za-z_][A-Za-z0-9_]*|\d+)?(?P<rest>.*)$")


@dataclass(frozen=True)
class Line:
    """One logical line after phases 1-3: `text` with comments as spaces, `code` the same with
    every literal's content blanked (what identifiers are searched in), `no` its first physical line."""

    text: str
    code: str
    no: int


def scan_sources(
    sources: Mapping[str, bytes], bundle_paths: frozenset[str], limits: CudaLimits = DEFAULT_CUDA_LIMITS
) -> list[Diagnostic]:
    """Every finding in an op's sources (path -> bytes, as listed in `[ops.cuda] sources`)."""
    out: list[Diagnostic] = []
    total = sum(len(b) for b in sources.values())
    if total > limits.total_bytes:
        out.append(Diagnostic("", 0, f"the op's CUDA sources hold {total} bytes > {limits.total_bytes}"))
    for path, data in sorted(sources.items()):
        if len(data) > limits.source_bytes:
            out.append(Diagnostic(path, 0, f"{len(data)} bytes > {limits.source_bytes} per CUDA source"))
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            out.append(Diagnostic(path, 0, f"not UTF-8 text ({e.reason} at byte {e.start})"))
            continue
        out += scan_file(path, text, frozenset(sources), bundle_paths)
        if len(out) >= MAX_DIAGNOSTICS:  # an op's first findings: the rest of its files are not read
            return out[:MAX_DIAGNOSTICS]
    return out


def scan_file(path: str, text: str, sources: frozenset[str], bundle_paths: frozenset[str]) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    text = text.replace("\r\n", "\n")
    if "\r" in text:
        return [Diagnostic(path, text[: text.index("\r")].count("\n") + 1, "a carriage return outside a CRLF line end")]
    line, at = 1, 0
    for m in _TRIGRAPH.finditer(text):  # the line counted on from the last match: linear, not
        line, at = line + text.count("\n", at, m.start()), m.start()  # a count from 0 a match
        out.append(Diagnostic(path, line, f"trigraph {m[0]!r} is not allowed"))
        if len(out) >= MAX_DIAGNOSTICS:
            break
    if out:  # a trigraph changes how the rest lexes: nothing after it reads as the compiler would
        return out
    lines, problem = logical_lines(text)
    for ln in lines:
        out += _check_line(path, ln, sources, bundle_paths)
        if len(out) >= MAX_DIAGNOSTICS:
            return out[:MAX_DIAGNOSTICS]
    if problem:
        out.append(Diagnostic(path, problem[0], problem[1]))
    return out


def logical_lines(text: str) -> tuple[list[Line], tuple[int, str] | None]:
    """Phases 1-3 of translation: splices joined, comments replaced by one space (a block comment
    spanning lines joins them, as it does for the preprocessor), literals kept. Returns the lines
    and the first thing that stopped the reading (line, why), if any."""
    chars: list[str] = []
    nos: list[int] = []
    pos, no = 0, 1
    for m in _SPLICE.finditer(text):  # phase 2: a backslash-newline (gcc: spaces may sit between) vanishes
        for c in text[pos : m.start()]:
            chars.append(c)
            nos.append(no)
            no += c == "\n"
        no += 1
        pos = m.end()
    for c in text[pos:]:
        chars.append(c)
        nos.append(no)
        no += c == "\n"
    src = "".join(chars)
    text_out: list[str] = []
    code_out: list[str] = []
    line_nos: list[int] = []
    i, n = 0, len(src)
    tok_start = ""  # first character of the identifier / pp-number being read ("" outside one)

    def emit(c: str, code: str | None = None, at: int = 0) -> None:
        text_out.append(c)
        code_out.append(c if code is None else code)
        line_nos.append(nos[min(at, n - 1)] if n else 1)

    while i < n:
        c = src[i]
        if c == "/" and src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            emit(" ", at=i - 1)
            tok_start = ""
            continue
        if c == "/" and src.startswith("/*", i):
            j = src.find("*/", i + 2)
            if j < 0:
                return _split(text_out, code_out, line_nos), (nos[i], "unterminated /* comment")
            emit(" ", at=i)
            i = j + 2
            tok_start = ""
            continue
        if c == '"' and _RAW_PREFIX.search("".join(text_out[-4:])):
            return _split(text_out, code_out, line_nos), (nos[i], 'raw string literals (R"...") are not allowed')
        if c == "'" and tok_start[:1].isdigit() and text_out and (text_out[-1].isalnum() or text_out[-1] == "_"):
            emit(c, at=i)  # a digit separator: 1'000'000
            i += 1
            continue
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" and j + 1 < n and src[j + 1] != "\n" else 1
            end = min(j + 1, n) if j < n and src[j] == c else j
            for k in range(i, end):
                emit(src[k], src[k] if k in (i, end - 1) else " ", at=k)
            i = end
            tok_start = ""
            continue
        if c.isalnum() or c == "_" or (c == "." and tok_start[:1].isdigit()):
            tok_start = tok_start or c
        else:
            tok_start = ""
        emit(c, at=i)
        i += 1
    return _split(text_out, code_out, line_nos), None


def _split(text: list[str], code: list[str], nos: list[int]) -> list[Line]:
    out: list[Line] = []
    start = 0
    for k, c in enumerate(text + ["\n"]):
        if c == "\n":
            out.append(Line("".join(text[start:k]), "".join(code[start:k]), nos[start] if start < len(nos) else 1))
            start = k + 1
    return out


def _check_line(path: str, ln: Line, sources: frozenset[str], bundle_paths: frozenset[str]) -> list[Diagnostic]:
    out = [
        Diagnostic(path, ln.no, f"{m[1]} is not allowed in CUDA sources (it reaches the compiler's own settings or files)")
        for m in FORBIDDEN_WORDS.finditer(ln.code)
    ]
    d = _DIRECTIVE.match(ln.text)
    if not d or not d["name"]:
        return out
    name, rest = d["name"], d["rest"].strip()
    if name not in ALLOWED_DIRECTIVES:
        why = "it would forge the file:line of later messages" if name == "line" or name.isdigit() else ""
        allowed = ", ".join(sorted(ALLOWED_DIRECTIVES))
        return [
            *out,
            Diagnostic(path, ln.no, f"#{name} is not allowed{' (' + why + ')' if why else ''}; allowed: {allowed}"),
        ]
    if name == "include":
        problem = include_problem(path, rest, sources, bundle_paths)
        if problem:
            out.append(Diagnostic(path, ln.no, problem))
    elif name == "pragma":
        words = rest.split()
        if not words or words[0] not in ALLOWED_PRAGMAS or (words[0] != "unroll" and len(words) > 1):
            out.append(
                Diagnostic(
                    path,
                    ln.no,
                    f"#pragma {rest[:60]!r} is not allowed (allowed: #pragma once, #pragma unroll [N], #pragma nounroll): "
                    "compiler settings are the validator's",
                )
            )
    return out


_MARKER = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"')
_PRAGMA_LINE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+(.*)$")


def preprocessed_pragmas(ii: str, sources: frozenset[str]) -> list[Diagnostic]:
    """The pragmas that reached the device front end from the bundle's own lines, in the
    preprocessor's output (`.cpp1.ii`): a `_Pragma` built by token pasting, or a header macro
    that stringizes its argument into one (glibc's, libstdc++'s `_PSTL_PRAGMA`), is invisible
    to the lexical scan and appears here as a `#pragma` line at the place of its expansion. Only
    `unroll [N]` / `nounroll` may come from a bundle file; the validator's headers keep theirs."""
    out: list[Diagnostic] = []
    file, no = "", 0
    for line in ii.splitlines():
        m = _MARKER.match(line)
        if m:
            file, no = m[2].removeprefix("./"), int(m[1])
            continue
        p = _PRAGMA_LINE.match(line)
        if p and file in sources and p[1].split()[:1] not in (["unroll"], ["nounroll"]):
            out.append(
                Diagnostic(
                    file,
                    no,
                    f"a #pragma {p[1].strip()[:60]!r} reached the compiler through a macro: only "
                    "unroll and nounroll may (compiler settings are the validator's)",
                )
            )
        no += 1
    return out


def include_problem(path: str, rest: str, sources: frozenset[str], bundle_paths: frozenset[str]) -> str | None:
    """Why `#include <rest>` in `path` is refused, or None."""
    m = re.fullmatch(r'"([^"]*)"', rest) or re.fullmatch(r"<([^>]*)>", rest)
    if not m:
        return f'#include {rest[:60]!r}: name the file literally ("x.cuh" or <header>), not through a macro'
    name, quoted = m[1], rest.startswith('"')
    if name.startswith("/"):
        return f"#include {rest}: absolute paths are not allowed (only this op's sources and toolchain headers)"
    if ".." in name.split("/") or "." in name.split("/")[:-1]:
        return f"#include {rest}: '..' and '.' are not allowed; name a bundle header by its path from the bundle root"
    if not HEADER_NAME.fullmatch(name):
        return f"#include {rest}: a header name is letters, digits and _ . / + - only"
    for cand in (posixpath.normpath(posixpath.join(posixpath.dirname(path), name)), name):
        if cand in sources:
            return None if cand.endswith(".cuh") else f"#include {rest}: only .cuh headers may be included"
        if quoted and cand in bundle_paths:
            return f"#include {rest}: {cand} is in the bundle but not in this op's [ops.cuda] sources; list it there"
    return None  # a toolchain header; the dependency check after the compile says where it was found
