"""Static policy v2 of bundle sources: an allowlist, so that bundle Python reaches no object but
its arguments, allowlisted module attributes and its own definitions.

A module may hold only a docstring, the allowed imports, relative imports of bundle definitions,
constants, `raise` and function definitions (decorated only with triton.jit / autotune /
heuristics). Every name a function loads resolves, by Python's own scoping (no classes, no
global/nonlocal, so scopes are static), to a parameter or local, a bundle definition, an
allowlisted builtin, or an import root used as the base of an allowlisted attribute chain.
Attributes of computed values come from one short list; `_x` and `__x__` are never allowed; no
attribute is ever stored. The same rules hold in @triton.jit bodies, which Triton evaluates with
Python's getattr and calls (compiled) or runs as Python (TRITON_INTERPRET=1). The tables live in
allowlist.py; the argument is written out in docs/security.md. Each finding names file:line:rule.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cacheon_subnet.policy import allowlist as A
from cacheon_subnet.policy.groups import group_params
from cacheon_subnet.policy.module_rules import ModuleRules
from cacheon_subnet.policy.reach_rules import ReachRules
from cacheon_subnet.policy.scope import (
    ModuleIndex,
    bound_names,
    decode,
    directories,
    dotted,
    index,
    module_key,
    required_table,
    too_deep,
)
from cacheon_subnet.policy.triton_rules import TritonRules

POLICY_VERSION = 2
MAX_SOURCE_BYTES = 512 * 1024  # all .py of a bundle together; the largest example is under 9 KiB
MAX_DEPTH = 100  # AST levels; real kernels stay under 25, the checker needs about 3 frames per level
RULES = A.RULES
_ALL_BUILTINS = frozenset(dir(builtins))
_TRITON_INTERNAL = frozenset({"_semantic", "_builder", "_generator"})  # Triton passes its internals by these names
_CANON = {
    "torch": "torch",
    "triton": "triton",
    "math": "math",
    "tl": "triton.language",
    "dist": "torch.distributed",
    "native": "native",
}
_EXPRS = (
    ast.BinOp,
    ast.BoolOp,
    ast.Compare,
    ast.UnaryOp,
    ast.IfExp,
    ast.Tuple,
    ast.List,
    ast.Set,
    ast.Dict,
    ast.Subscript,
    ast.Slice,
    ast.JoinedStr,
    ast.FormattedValue,
    ast.Starred,
)
_FN_STMTS = (
    ast.Expr,
    ast.Return,
    ast.Pass,
    ast.Break,
    ast.Continue,
    ast.If,
    ast.While,
    ast.For,
    ast.Assign,
    ast.AugAssign,
    ast.AnnAssign,
    ast.Assert,
    ast.Raise,
    ast.FunctionDef,
)


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule} {RULES[self.rule]}: {self.message}"


def oversized(files: Mapping[str, bytes]) -> Finding | None:
    """The finding for more Python than the scan parses (None: within MAX_SOURCE_BYTES)."""
    sources = sorted(p for p in files if p.endswith(".py"))
    total = sum(len(files[p]) for p in sources)
    if total > MAX_SOURCE_BYTES:  # parsing costs ~400 bytes of host memory per source byte
        return Finding(sources[0], 1, "P010", f"{total} bytes of Python in the bundle > {MAX_SOURCE_BYTES}: not parsed")
    return None


def scan_files(
    files: Mapping[str, bytes],
    progress: Callable[[str, str], None] | None = None,
    parsed: dict[str, ast.Module] | None = None,
    cuda_modules: frozenset[str] = frozenset(),
) -> list[Finding]:
    """Every .py member of a bundle, checked together (relative imports resolve inside it).
        `progress(step, path)` is told each step as it starts (policy/child.py: which file a scan that
        ran out of its budget was at); `parsed` gets path -> tree of every module indexed (the child
        hands them to the identity: parsing is its largest single cost). `cuda_modules`: the paths of
    the entry modules of ops with [ops.cuda], the only ones that may `import native` (the launcher)."""
    out: list[Finding] = []
    mods: dict[str, ModuleIndex] = {}
    sources = sorted(p for p in files if p.endswith(".py"))
    big = oversized(files)
    if big is not None:
        return [big]
    step = progress or (lambda step, path: None)
    for path in sources:
        step("parsing", path)
        text, bad = decode(files[path])
        if bad:
            out.append(Finding(path, 1, "P020", bad))
            continue
        try:
            tree = ast.parse(text, filename=path)
        except SyntaxError as e:
            out.append(Finding(path, e.lineno or 0, "P010", str(e.msg)))
            continue
        except (RecursionError, MemoryError, ValueError) as e:  # parser stack, NUL bytes: refused, never raised
            out.append(Finding(path, 1, "P010", f"not parseable ({type(e).__name__}: {str(e)[:80]})"))
            continue
        deep = too_deep(tree, MAX_DEPTH)
        if deep is not None:  # the checker recurses over the tree: bound it before it runs
            out.append(Finding(path, getattr(deep, "lineno", 1), "P015", f"syntax nested deeper than {MAX_DEPTH} levels"))
            continue
        key = module_key(path)
        if key in mods:  # `x.py` beside `x/__init__.py`: one would go unchecked (and the sealed tree refuses it)
            out.append(
                Finding(
                    path,
                    1,
                    "P021",
                    f"module {key!r} has two sources ({mods[key].path} and {path}): one source per module name",
                )
            )
            continue
        mods[key] = index(path, tree, text)
        if parsed is not None:
            parsed[path] = tree
    params = frozenset(
        a.arg
        for m in mods.values()
        for d in m.defs.values()
        if d.decorator_list
        for a in d.args.posonlyargs + d.args.args + d.args.kwonlyargs
    )
    step("resolving process groups", "")
    groups = group_params(mods)
    names, dirs = frozenset(files), directories(files)
    for key in sorted(mods):
        step("checking", mods[key].path)
        out.extend(_Checker(mods[key], mods, names, params, key, groups, dirs, cuda_modules).run())
    return out


def scan_source(path: str, text: str) -> list[Finding]:
    return scan_files({path: text.encode("utf-8")})


class _Checker(ModuleRules, TritonRules, ReachRules):
    def __init__(
        self,
        mod: ModuleIndex,
        mods: Mapping[str, ModuleIndex],
        files: frozenset[str],
        params: frozenset[str],
        key: str = "",
        groups: Mapping[tuple[str, str], frozenset[str]] | None = None,
        dirs: frozenset[str] | None = None,
        cuda_modules: frozenset[str] = frozenset(),
    ):
        self.m, self.mods, self.files, self.kernel_params = mod, mods, files, params
        self.key, self.groups = key, groups or {}
        self.dirs = directories(files) if dirs is None else dirs
        self.cuda_modules = cuda_modules
        self.required = required_table(mod.tree)  # every scope's required params, in one pass
        self.findings: list[Finding] = []
        self.scopes: list[tuple[frozenset[str], set[str]]] = []  # (required params, bound names), innermost last
        self.jit = False
        self.top_scope: tuple[frozenset[str], set[str]] | None = None  # scope of the module-level def being checked

    def add(self, node: ast.AST, rule: str, msg: str) -> None:
        self.findings.append(Finding(self.m.path, getattr(node, "lineno", 0), rule, msg))

    def run(self) -> list[Finding]:
        for i, st in enumerate(self.m.tree.body):
            self.module_stmt(i, st)
        return self.findings

    def chain_of(self, node: ast.expr) -> str | None:
        """Canonical dotted name when `node` is an attribute chain rooted at an import (not a local)."""
        parts = dotted(node)
        if not parts or len(parts) < 2 or self.resolve(parts[0]) != "module":
            return None
        return ".".join([self.m.imports[parts[0]], *parts[1:]])

    # -- names -------------------------------------------------------------------------------
    def resolve(self, name: str) -> str | None:
        if any(name in names for _, names in self.scopes):
            return "local"
        if name in self.m.imports:
            return "module"
        if name in self.m.typing:
            return "typing"
        if name in self.m.globals:
            return "bundle"
        return "builtin" if name in A.BUILTINS else None

    def check_binding(self, node: ast.AST, name: str, where: str) -> None:
        if name.startswith("__") or name in _TRITON_INTERNAL:
            self.add(node, "P013", f"{where} {name!r}: dunder names and Triton's internal names are not allowed")
        elif name in _ALL_BUILTINS or name in _CANON or (self.scopes and name in self.m.globals):
            self.add(node, "P017", f"{where} {name!r} shadows a builtin, an import or a module-level name")

    # -- functions ---------------------------------------------------------------------------
    def function(self, fn: ast.FunctionDef, top: bool) -> None:
        if fn.decorator_list:
            if not top or self.jit:
                self.add(fn, "P018", "decorators are allowed on module-level kernels only")
            for d in fn.decorator_list:
                self.decorator(d)
            self.triton_source(fn)
            for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs:
                if a.arg in A.TRITON_RESERVED_PARAMS or a.arg.startswith("default_"):
                    self.add(
                        a,
                        "P018",
                        f"kernel parameter {a.arg!r} is a name Triton's launcher binds itself (a "
                        "compile option or a binder name)",
                    )
        self.arguments(fn.args)
        if fn.returns is not None:
            self.annotation(fn.returns)
        was, self.jit = self.jit, self.jit or bool(fn.decorator_list)
        self.scopes.append((self.required[id(fn)], bound_names(fn)))
        if top:  # the only scope whose callers group_pass sees (a bundle def called by name)
            self.top_scope = self.scopes[-1]
        for st in fn.body:
            self.stmt(st)
        self.scopes.pop()
        self.jit = was

    def arguments(self, args: ast.arguments) -> None:
        for d in args.defaults + [d for d in args.kw_defaults if d is not None]:
            self.const(d)
        for a in args.posonlyargs + args.args + args.kwonlyargs + [x for x in (args.vararg, args.kwarg) if x]:
            self.check_binding(a, a.arg, "parameter")
            if a.annotation is not None:
                self.annotation(a.annotation)

    # -- statements --------------------------------------------------------------------------
    def stmt(self, st: ast.stmt) -> None:
        if not isinstance(st, _FN_STMTS):
            for item in getattr(st, "items", []):  # with open(...): say what it would have opened too
                self.expr(item.context_expr)
            self.add(
                st,
                "P015",
                f"{type(st).__name__} statement (allowed in functions: expressions, assignments, "
                "if/for/while, return, raise, assert, nested def)",
            )
            return
        if isinstance(st, ast.FunctionDef):
            self.function(st, top=False)
            return
        if isinstance(st, ast.For):
            self.expr(st.iter)
            self.target(st.target, names_only=True)
        elif isinstance(st, ast.Assign):
            self.expr(st.value)
            for t in st.targets:
                self.target(t)
        elif isinstance(st, (ast.AugAssign, ast.AnnAssign)):
            if isinstance(st, ast.AnnAssign):
                self.annotation(st.annotation)
            if st.value is not None:
                self.expr(st.value)
            self.target(st.target)
        for field in ("test", "value", "exc", "cause", "msg"):
            v = getattr(st, field, None)
            if isinstance(v, ast.expr) and not isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                self.expr(v)
        for field in ("body", "orelse"):
            for s in getattr(st, field, []):
                self.stmt(s)

    def target(self, t: ast.expr, names_only: bool = False) -> None:
        if isinstance(t, ast.Name):
            self.check_binding(t, t.id, "local")
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                self.target(e, names_only)
        elif isinstance(t, ast.Starred):
            self.target(t.value, names_only)
        elif isinstance(t, ast.Attribute):
            self.add(t, "P004", f"assignment to attribute .{t.attr} (monkey-patching)")
        elif isinstance(t, ast.Subscript) and not names_only:
            base: ast.expr = t
            while isinstance(base, ast.Subscript):
                self.expr(base.slice)
                base = base.value
            if not (isinstance(base, ast.Name) and self.resolve(base.id) == "local"):
                self.add(t, "P017", f"item assignment into {ast.unparse(base)[:40]!r}: only into parameters and locals")
                self.expr(base)
        else:
            self.add(t, "P017", f"{type(t).__name__} as an assignment target (plain names only here)")

    # -- expressions -------------------------------------------------------------------------
    def expr(self, node: ast.expr, pos: str = "value") -> None:
        if isinstance(node, ast.Name):
            self.name(node, pos)
        elif isinstance(node, ast.Attribute):
            self.attribute(node, pos)
        elif isinstance(node, ast.Call):
            self.call(node)
        elif isinstance(node, ast.Lambda):
            self.arguments(node.args)
            self.scopes.append((self.required[id(node)], bound_names(node)))
            self.expr(node.body)
            self.scopes.pop()
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            self.comprehension(node)
        elif isinstance(node, ast.NamedExpr):
            self.expr(node.value)
            self.target(node.target, names_only=True)
        elif isinstance(node, ast.Constant):
            return
        elif isinstance(node, _EXPRS):
            for c in ast.iter_child_nodes(node):
                if isinstance(c, ast.expr):
                    self.expr(c)
        else:
            self.add(node, "P015", f"{type(node).__name__} expression")

    def comprehension(self, node: ast.expr) -> None:
        gens = node.generators  # type: ignore[attr-defined]
        self.expr(gens[0].iter)
        self.scopes.append((frozenset(), bound_names(node)))
        for i, g in enumerate(gens):
            if g.is_async:
                self.add(node, "P015", "async comprehension")
            self.target(g.target, names_only=True)
            if i:
                self.expr(g.iter)
            for cond in g.ifs:
                self.expr(cond)
        for part in ("elt", "key", "value"):
            if isinstance(getattr(node, part, None), ast.expr):
                self.expr(getattr(node, part))
        self.scopes.pop()

    def annotation(self, node: ast.expr) -> None:
        if isinstance(node, ast.Constant):
            if node.value is not None and node.value is not Ellipsis:
                self.add(
                    node, "P015", "string annotation (annotations are expressions here; Triton and typing may evaluate them)"
                )
        elif isinstance(node, (ast.Name, ast.Attribute)):
            self.expr(node, "annotation")
        elif isinstance(node, (ast.Subscript, ast.Tuple, ast.List, ast.BinOp)):
            for c in ast.iter_child_nodes(node):
                if isinstance(c, ast.expr):
                    self.annotation(c)
        else:
            self.add(node, "P015", f"{type(node).__name__} in an annotation")
