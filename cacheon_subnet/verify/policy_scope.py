"""Static scopes and module paths for the policy scan (policy.py).

With no classes, no `global`/`nonlocal` and no star imports, Python decides at compile time
which names a function binds: its parameters, every plain-name store in its body (walrus targets
inside its comprehensions included) and its nested defs. A load of any other name reads the
enclosing function's binding, then the module's, then builtins'. This module computes those
sets exactly as the compiler does, so the scan resolves each name to what Python will read.
"""

from __future__ import annotations

import ast

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


def module_key(path: str) -> str:
    """Bundle-relative module key: 'a/b.py' -> 'a/b', 'a/__init__.py' -> 'a', '__init__.py' -> ''."""
    stem = path[:-3]
    if stem == "__init__":
        return ""
    return stem[: -len("/__init__")] if stem.endswith("/__init__") else stem


def resolve_relative(path: str, level: int, module: str | None) -> str | None:
    """Key of the module `from <level dots><module> import ...` in bundle file `path` names;
    None when it climbs above the bundle package (into the host's namespace)."""
    parts = path.split("/")[:-1]  # the package a module or an __init__.py belongs to
    up = level - 1
    if up > len(parts):
        return None
    base = parts[: len(parts) - up]
    return "/".join(base + (module.split(".") if module else []))
