"""Static scopes, module paths and the per-module index of the policy scan (policy.py).

With no classes, no `global`/`nonlocal` and no star imports, Python decides at compile time
which names a function binds: its parameters, every plain-name store in its body (walrus targets
inside its comprehensions included) and its nested defs. A load of any other name reads the
enclosing function's binding, then the module's, then builtins'. This module computes those
sets exactly as the compiler does, so the scan resolves each name to what Python will read.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from cacheon_subnet.policy import allowlist as A

_COMPS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def bound_names(node: ast.AST) -> set[str]:
    """Names local to the scope that `node` (def, lambda or comprehension) opens."""
    if isinstance(node, _COMPS):
        return {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
    args = node.args  # type: ignore[attr-defined]
    out = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    out.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
    body = node.body if isinstance(node.body, list) else [node.body]  # type: ignore[attr-defined]
    for st in body:
        _collect(st, out)
    return out


def required_params(node: ast.AST) -> frozenset[str]:
    """Parameters of a def or lambda that every caller must pass (no default) and that its body
    never rebinds. One scope; the checker reads required_table (every scope in one pass)."""
    body = node.body if isinstance(node.body, list) else [node.body]  # type: ignore[attr-defined]
    stored = {n.id for st in body for n in ast.walk(st) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return frozenset(_candidates(node) - stored)


def required_table(tree: ast.AST) -> dict[int, frozenset[str]]:
    """required_params of every def and lambda in `tree` (keyed by id(node)), in one pass.

    required_params walks a scope's whole body, nested scopes included, so asking it for each of
    d nested defs walked the innermost body d times (a 512 KiB bundle of ~90 nested defs took
    17 s CPU). Here each open scope's candidates sit on a stack per name; a store of that name
    marks the stack from the top down to the first entry already marked (marked entries are
    always a bottom run of the stack), so each entry is marked at most once."""
    table: dict[int, frozenset[str]] = {}
    open_: dict[str, list[list[Any]]] = {}  # name -> [[scope id, marked], ...], innermost last
    hits: dict[int, set[str]] = {}
    todo: list[tuple[int, ast.AST]] = [(_VISIT, tree)]
    while todo:
        op, node = todo.pop()
        if op == _OPEN:
            hits[id(node)] = set()
            for p in _candidates(node):
                open_.setdefault(p, []).append([id(node), False])
            continue
        if op == _CLOSE:
            cands = _candidates(node)
            for p in cands:
                open_[p].pop()
            table[id(node)] = frozenset(cands - hits.pop(id(node)))
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stack = open_.get(node.id, [])
            i = len(stack) - 1
            while i >= 0 and not stack[i][1]:
                stack[i][1] = True
                hits[stack[i][0]].add(node.id)
                i -= 1
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):  # signature first (outside), then the body (inside)
            body = node.body if isinstance(node.body, list) else [node.body]
            inside = {id(b) for b in body}
            todo.append((_CLOSE, node))
            todo.extend((_VISIT, c) for c in reversed(body))
            todo.append((_OPEN, node))
            todo.extend((_VISIT, c) for c in reversed([c for c in ast.iter_child_nodes(node) if id(c) not in inside]))
        else:
            todo.extend((_VISIT, c) for c in reversed(list(ast.iter_child_nodes(node))))
    return table


_VISIT, _OPEN, _CLOSE = 0, 1, 2


def _candidates(node: ast.AST) -> set[str]:
    args = node.args  # type: ignore[attr-defined]
    pos = args.posonlyargs + args.args
    req = {a.arg for a in pos[: len(pos) - len(args.defaults)]}
    return req | {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None}


def _collect(node: ast.AST, out: set[str]) -> None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        out.add(node.name)
        return
    if isinstance(node, ast.Lambda):
        return
    if isinstance(node, _COMPS):  # only walrus targets leak out of a comprehension
        out.update(n.target.id for n in ast.walk(node) if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name))
        return
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        out.add(node.id)
    for child in ast.iter_child_nodes(node):
        _collect(child, out)


def dotted(node: ast.AST) -> list[str] | None:
    """['torch', 'cuda', 'is_available'] for torch.cuda.is_available; None if not a name chain."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def too_deep(tree: ast.AST, limit: int) -> ast.AST | None:
    """The first node more than `limit` levels below `tree` (found without recursing), or None."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return node
        stack.extend((c, depth + 1) for c in ast.iter_child_nodes(node))
    return None


def module_key(path: str) -> str:
    """Bundle-relative module key: 'a/b.py' -> 'a/b', 'a/__init__.py' -> 'a', '__init__.py' -> ''."""
    stem = path[:-3]
    if stem == "__init__":
        return ""
    return stem.removesuffix("/__init__")


def directories(files: Mapping[str, bytes] | frozenset[str]) -> frozenset[str]:
    """Every directory that holds a member ('a/b/c.py' -> 'a', 'a/b'): a package's name is
    checked against it once per name instead of scanning every member per name."""
    out: set[str] = set()
    for p in files:
        i = p.find("/")
        while i != -1:
            out.add(p[:i])
            i = p.find("/", i + 1)
    return frozenset(out)


def resolve_relative(path: str, level: int, module: str | None) -> str | None:
    """Key of the module `from <level dots><module> import ...` in bundle file `path` names;
    None when it climbs above the bundle package (into the host's namespace)."""
    parts = path.split("/")[:-1]  # the package a module or an __init__.py belongs to
    up = level - 1
    if up > len(parts):
        return None
    base = parts[: len(parts) - up]
    return "/".join(base + (module.split(".") if module else []))


@dataclass(frozen=True)
class ModuleIndex:
    path: str
    tree: ast.Module
    lines: tuple[str, ...]
    imports: Mapping[str, str]  # bound name -> canonical module
    typing: frozenset[str]
    defs: Mapping[str, ast.FunctionDef]
    consts: frozenset[str]
    rel: Mapping[str, tuple[str | None, str, ast.ImportFrom]]  # name -> (target module key, its name, stmt)

    @cached_property
    def globals(self) -> frozenset[str]:
        """Built once: the checker asks for every name it resolves (rebuilt per lookup, a module
        of n definitions cost n^2)."""
        return frozenset(self.imports) | self.typing | frozenset(self.defs) | self.consts | frozenset(self.rel)


def decode(data: bytes) -> tuple[str, str | None]:
    """UTF-8 only: a coding cookie (utf-7, ...) would make Python run other text than we read."""
    try:
        enc, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode("utf-8")
    except (SyntaxError, UnicodeDecodeError) as e:
        return "", f"not decodable as UTF-8: {e}"
    if enc not in ("utf-8", "utf-8-sig"):
        return "", f"source encoding {enc!r}; only UTF-8 (no coding cookie) is read the same by this scan and by Python"
    return text, None


def index(path: str, tree: ast.Module, text: str) -> ModuleIndex:
    imports: dict[str, str] = {}
    typing: set[str] = set()
    defs: dict[str, ast.FunctionDef] = {}
    consts: set[str] = set()
    rel: dict[str, tuple[str | None, str, ast.ImportFrom]] = {}
    for st in tree.body:
        if isinstance(st, ast.Import):
            for a in st.names:
                if (a.name, a.asname) in A.IMPORTS:
                    name, mod = A.IMPORTS[(a.name, a.asname)]
                    imports[name] = mod
        elif isinstance(st, ast.ImportFrom) and st.level == 0 and st.module == "typing":
            typing.update(a.name for a in st.names if a.name in A.TYPING_NAMES and a.asname is None)
        elif isinstance(st, ast.ImportFrom) and st.level > 0:
            target = resolve_relative(path, st.level, st.module)
            rel.update({a.asname or a.name: (target, a.name, st) for a in st.names if a.name != "*"})
        elif isinstance(st, ast.FunctionDef):
            defs[st.name] = st
        elif isinstance(st, (ast.Assign, ast.AnnAssign)):
            for t in st.targets if isinstance(st, ast.Assign) else [st.target]:
                consts.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return ModuleIndex(path, tree, source_lines(text), imports, frozenset(typing), defs, frozenset(consts), rel)


def source_lines(text: str) -> tuple[str, ...]:
    """Lines as Python numbers them and as linecache (hence inspect, hence Triton) reads them:
    universal newlines, split on \\n only. Never str.splitlines(): it also breaks at U+2028,
    U+0085, \\x0c, \\x1c-\\x1e, so a comment full of those would shift every later line number
    and hide a fake `def` line from the def-line rule."""
    return tuple(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
