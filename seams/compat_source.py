"""Reading an SGLang source tree without importing it (the static half of seams/compat.py).

Why not import: a candidate release must be checkable on any host (CPU CI, a reviewer's laptop)
before its CUDA-only dependencies are installed, and importing would run its module-level code.
Everything here is `ast` over files: definitions, parameters, module-level bindings (including
those under `if _is_cuda:` / `try:` -- recorded as *guarded*), and `from x import name` chains.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

FuncDef = ast.FunctionDef | ast.AsyncFunctionDef
_DEF = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class Param:
    """One parameter as both modes see it (kind = an inspect.Parameter kind name)."""

    name: str
    kind: str
    has_default: bool


@dataclass(frozen=True)
class Binding:
    """A module-level binding of a name: how (def/class/assign/import), from where, guarded?"""

    kind: str
    source: str  # defining module for def/class/assign; the imported-from module for import
    orig: str  # the name in `source` (differs from the bound name for `import x as y`)
    guarded: bool  # only under an if/except branch (e.g. `if _is_cuda:`)


def toplevel(body: list[ast.stmt], guarded: bool = False) -> Iterator[tuple[ast.stmt, bool]]:
    """Statements run at import time (descends into if/try/with, not def/class)."""
    for st in body:
        yield st, guarded
        if isinstance(st, ast.If):
            yield from toplevel(st.body + st.orelse, True)
        elif isinstance(st, ast.Try):
            yield from toplevel(st.body + st.orelse + st.finalbody, guarded)
            for h in st.handlers:
                yield from toplevel(h.body, True)
        elif isinstance(st, ast.With):
            yield from toplevel(st.body, guarded)


def ast_params(fn: FuncDef) -> list[Param]:
    """Parameters as inspect.signature(Class.attr) would show them (a classmethod drops cls)."""
    a = fn.args
    pos = a.posonlyargs + a.args
    first_default = len(pos) - len(a.defaults)
    out = [
        Param(x.arg, "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD", i >= first_default)
        for i, x in enumerate(pos)
    ]
    if a.vararg:
        out.append(Param(a.vararg.arg, "VAR_POSITIONAL", True))
    out += [Param(k.arg, "KEYWORD_ONLY", d is not None) for k, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    if a.kwarg:
        out.append(Param(a.kwarg.arg, "VAR_KEYWORD", True))
    if any(isinstance(d, ast.Name) and d.id == "classmethod" for d in fn.decorator_list):
        out = out[1:]
    return out


def find_defs(tree: ast.Module, symbol: str) -> tuple[list[FuncDef], str]:
    """Every definition of "function" / "Class.method" at module/class level, or why none."""
    owner, _, name = symbol.rpartition(".")
    body = tree.body
    if owner:
        classes = [st for st, _ in toplevel(tree.body) if isinstance(st, ast.ClassDef) and st.name == owner]
        if not classes:
            return [], f"class {owner} not found"
        body = [st for c in classes for st in c.body]
    defs = [st for st, _ in toplevel(body) if isinstance(st, _DEF) and st.name == name]
    if defs:
        return defs, ""
    return [], (f"class {owner} defines no {name} (inherited methods are not followed)" if owner else f"{name} not defined")


def calls(node: ast.AST, callee: str) -> bool:
    """Does the code under `node` call `callee(...)` or `x.callee(...)`?"""
    return any(
        isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == callee for n in ast.walk(node)
    )


def constant(tree: ast.Module, name: str) -> object:
    for st, _ in toplevel(tree.body):
        if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in st.targets):
            return st.value.value if isinstance(st.value, ast.Constant) else None
    return None


def class_members(tree: ast.Module, cls: str) -> set[str] | None:
    """Names assigned in a class body (enum members), None when the class is absent."""
    found = [st for st, _ in toplevel(tree.body) if isinstance(st, ast.ClassDef) and st.name == cls]
    if not found:
        return None
    return {t.id for st in found[-1].body if isinstance(st, ast.Assign) for t in st.targets if isinstance(t, ast.Name)}


class SourceTree:
    """An unpacked tree holding `sglang/` (optionally `sgl_kernel/`); files parsed on demand."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._parsed: dict[str, ast.Module | None] = {}
        self._errors: dict[str, str] = {}

    def has_package(self, pkg: str) -> bool:
        return (self.root / pkg / "__init__.py").is_file() or (self.root / f"{pkg}.py").is_file()

    def file(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        for cand in (base.with_suffix(".py"), base / "__init__.py"):
            if cand.is_file():
                return cand
        return None

    def parse(self, module: str) -> ast.Module | None:
        if module not in self._parsed:
            path, tree = self.file(module), None
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"), str(path)) if path else None
            except (SyntaxError, UnicodeDecodeError) as e:  # e.g. syntax newer than this interpreter
                self._errors[module] = f"{type(e).__name__}: {e}"
            self._parsed[module] = tree
        return self._parsed[module]

    def missing(self, module: str) -> str:
        """Why parse(module) gave nothing: absent, or unreadable by this interpreter."""
        if module in self._errors:
            return f"module {module} cannot be parsed here ({self._errors[module]})"
        return f"module {module} not found in tree"

    def bindings(self, module: str, name: str) -> list[Binding]:
        tree, path = self.parse(module), self.file(module)
        if tree is None or path is None:
            return []
        out = []
        for st, guarded in toplevel(tree.body):
            if isinstance(st, (*_DEF, ast.ClassDef)) and st.name == name:
                out.append(Binding("class" if isinstance(st, ast.ClassDef) else "def", module, name, guarded))
            elif isinstance(st, (ast.Assign, ast.AnnAssign)):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    out.append(Binding("assign", module, name, guarded))
            elif isinstance(st, ast.ImportFrom):
                for alias in st.names:
                    if (alias.asname or alias.name) == name:
                        out.append(Binding("import", _absolute(module, path, st), alias.name, guarded))
        return out

    def resolves_to(self, module: str, name: str, goal: tuple[str, str], depth: int = 0) -> tuple[bool, str]:
        """Does `module.name` reach the definition `goal` = (module, name) via from-imports?"""
        binds = self.bindings(module, name)
        if not binds:
            return False, f"{module} does not bind {name} at module level"
        seen = []
        for b in binds:
            if b.kind == "def" and (module, name) == goal:
                return True, f"defined in {module}"
            if b.kind == "import":
                if (b.source, b.orig) == goal:
                    return True, f"{module}: from {b.source} import {b.orig}"
                if depth < 4 and self.file(b.source) is not None:
                    ok, how = self.resolves_to(b.source, b.orig, goal, depth + 1)
                    if ok:
                        return True, f"{module}: from {b.source} import {b.orig} -> {how}"
            seen.append(f"import from {b.source}" if b.kind == "import" else b.kind)
        return False, f"{module}.{name} is bound by {', '.join(seen)}; none reaches {goal[0]}:{goal[1]}"

    def version(self) -> str | None:
        """sglang/_version.py (what sglang.version imports), version.py, else dist-info METADATA."""
        for rel in ("sglang/_version.py", "sglang/version.py"):
            path = self.root / rel
            if not path.is_file():
                continue
            for st, _ in toplevel(ast.parse(path.read_text(encoding="utf-8")).body):
                if isinstance(st, ast.Assign) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
                    if any(isinstance(t, ast.Name) and t.id == "__version__" for t in st.targets):
                        return st.value.value
        for meta in sorted(self.root.glob("sglang-*.dist-info/METADATA")):
            for line in meta.read_text(encoding="utf-8").splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
        return None


def _absolute(module: str, path: Path, st: ast.ImportFrom) -> str:
    if not st.level:
        return st.module or ""
    pkg = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = pkg[: len(pkg) - (st.level - 1)]
    return ".".join(base + ([st.module] if st.module else []))
