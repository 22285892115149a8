"""Module-level rules of the policy scan (mixed into policy._Checker).

A bundle module's namespace may hold only what the checker can name: the allowed imports, typing
names (annotations only), relative imports that resolve to another bundle module's function or
constant (never a module object: `from . import m`, a re-exported `torch`, or a package name
that a submodule import would rebind), function definitions and immutable constants.
"""

from __future__ import annotations

import ast

from cacheon_subnet.policy import allowlist as A
from cacheon_subnet.policy.host import RuleHost
from cacheon_subnet.policy.scope import resolve_relative

_CONST_EXPRS = (ast.BinOp, ast.BoolOp, ast.Compare, ast.UnaryOp, ast.IfExp, ast.Tuple)
MAX_REEXPORTS = 16
_CONST_CALLS = frozenset({"float", "int", "min", "max", "abs", "round", "pow"})


class ModuleRules(RuleHost):
    """Needs from the host class what policy/host.RuleHost declares."""

    def module_stmt(self, i: int, st: ast.stmt) -> None:
        if i == 0 and isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
            return
        if isinstance(st, ast.Import):
            for a in st.names:
                if a.name == A.NATIVE_MODULE and (a.asname is not None or self.m.path not in self.cuda_modules):
                    self.add(
                        st,
                        "P003",
                        "import of 'native' (the validator's kernel launcher): only as `import native`, in the entry "
                        "module of an op with [ops.cuda] (a Triton op or a helper module never launches CUDA kernels)",
                    )
                elif (a.name, a.asname) not in A.IMPORTS:
                    self.add(
                        st,
                        A.module_code(a.name),
                        f"import of {a.name!r}"
                        + (f" as {a.asname!r}" if a.asname else "")
                        + " (allowed: import torch / triton / math, triton.language as tl, torch.distributed as dist)",
                    )
        elif isinstance(st, ast.ImportFrom):
            self.import_from(st)
        elif isinstance(st, (ast.Assign, ast.AnnAssign)):
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            for t in targets:
                nodes = list(ast.walk(t))
                if any(isinstance(n, ast.Attribute) for n in nodes):
                    self.add(st, "P004", f"assignment to {ast.unparse(t)[:40]} (monkey-patching)")
                elif not all(isinstance(n, (ast.Name, ast.Tuple, ast.expr_context)) for n in nodes):
                    self.add(st, "P017", "module-level assignments bind plain names only")
                else:
                    for n in nodes:
                        if isinstance(n, ast.Name):
                            self.module_name(st, n.id)
            if isinstance(st, ast.AnnAssign):
                self.annotation(st.annotation)
            if st.value is None:
                self.add(st, "P014", "annotated name without a value")
            else:
                self.const(st.value)
        elif isinstance(st, ast.FunctionDef):
            self.module_name(st, st.name)
            self.function(st, top=True)
        elif isinstance(st, ast.Raise):
            self.stmt(st)
        else:
            if isinstance(st, ast.Expr):
                self.expr(st.value)
            self.add(
                st,
                "P015" if A.never_statement(st) else "P014",
                f"{type(st).__name__} at module level (allowed: docstring, imports, constants, def, raise)",
            )

    def module_name(self, node: ast.AST, name: str) -> None:
        self.check_binding(node, name, "module-level name")
        if self.m.path.endswith("__init__.py"):
            pkg = self.m.path[: -len("__init__.py")]
            if f"{pkg}{name}.py" in self.files or f"{pkg}{name}" in self.dirs:
                self.add(
                    node,
                    "P017",
                    f"{name!r} is also a submodule of this package (importing it rebinds the name to a module object)",
                )

    def import_from(self, st: ast.ImportFrom) -> None:
        if st.level == 0:
            mod, names = st.module or "", [a.name for a in st.names]
            if mod == "__future__" and names == ["annotations"]:
                return
            if mod == "typing" and all(n in A.TYPING_NAMES for n in names) and all(a.asname is None for a in st.names):
                return
            self.add(
                st,
                A.module_code(f"{mod}.{names[0]}" if names else mod),
                f"from {mod} import {', '.join(names)} (allowed: from typing import <annotations>, "
                "from __future__ import annotations, relative imports of bundle definitions)",
            )
            return
        for a in st.names:
            if a.name == "*":
                self.add(st, "P015", "star import")
                continue
            self.module_name(st, a.asname or a.name)
            target = resolve_relative(self.m.path, st.level, st.module)
            why = self.definition(target, a.name, set())
            src = self.mods.get(target) if target is not None else None
            if not why and src is not None and src.path in self.cuda_modules and self.m.path not in self.cuda_modules:
                why = f"{src.path} is a CUDA op's entry module: only another CUDA op's entry may import from it"
            if why:
                self.add(st, "P021", f"from {'.' * st.level}{st.module or ''} import {a.name}: {why}")

    def definition(self, target: str | None, name: str, seen: set[tuple[str, str]]) -> str | None:
        """None when `name` of bundle module `target` is a def or constant (transitively, followed
        in a loop: a chain of re-exports through thousands of files must not exhaust the stack)."""
        while True:
            if target is None:
                return "relative import beyond the bundle's top level"
            mod = self.mods.get(target)
            if mod is None:
                return f"module {target or '(bundle root)'!r} is not a .py file of the bundle"
            if mod.path.endswith("__init__.py"):
                pkg = mod.path[: -len("__init__.py")]
                if f"{pkg}{name}.py" in self.files or f"{pkg}{name}" in self.dirs:
                    return f"{name!r} is a submodule (a module object), not a definition"
            if name in mod.defs or name in mod.consts:
                return None
            if name not in mod.rel or (target, name) in seen:
                return f"{name!r} is not a function or constant defined in {mod.path}"
            if len(seen) >= MAX_REEXPORTS:
                return f"{name!r} is re-exported through more than {MAX_REEXPORTS} modules"
            seen = seen | {(target, name)}
            target, name, _ = mod.rel[name]

    def const(self, node: ast.expr) -> None:
        """Module-level values and defaults: immutable constant expressions only (no state survives a call)."""
        if isinstance(node, ast.Constant):
            return
        if isinstance(node, ast.Name):
            if self.resolve(node.id) != "bundle" or node.id in self.m.typing:
                self.add(node, "P014", f"{node.id!r} in a constant: only literals and other module constants")
            else:  # `SUM = _sum` / `f=_sum`: a group-taking def behind a constant or default (P016, as any alias)
                self.name(node, "value")
            return
        if isinstance(node, ast.Attribute):
            self.attribute(node, "value")
            return
        if isinstance(node, ast.Call) and not node.keywords:
            f = node.func
            if (isinstance(f, ast.Name) and f.id in _CONST_CALLS and self.resolve(f.id) == "builtin") or (
                self.chain_of(f) or ""
            ).startswith("math."):
                self.expr(f, "call")
                for a in node.args:
                    self.const(a)
                return
        if isinstance(node, _CONST_EXPRS):
            for c in ast.iter_child_nodes(node):
                if isinstance(c, ast.expr):
                    self.const(c)
            return
        self.add(
            node,
            "P014",
            f"{type(node).__name__} where a constant is required (literals, tuples, arithmetic, other constants)",
        )
        self.expr(node)  # and say what inside it is refused
