"""Dead code and definition order, removed from a bundle's trees before the normalized identity
(identity.py) renames them, where that provably cannot change what runs.

Dropped: `pass` and constant expression statements in any body that has another statement;
module-level definitions nothing refers to (no load anywhere in the module, no relative import
of the name anywhere in the bundle, not an entry, not spelled in a string), when binding them
cannot fail or act at import: a def decorated by nothing or `@triton.jit` only, whose defaults
are literals and whose annotations are literals, names or attribute chains of names bound
before it (the policy allowlists every attribute, so none is missing); a constant
`NAME = <literal>`; `import torch / triton / math` (and the allowed submodules). A definition
dropped makes others unused in turn (repeated to a fixpoint).

Reordered: a run of module-level imports, constants and such defs between other statements,
sorted (imports, constants, defs; then by their shape with every name blanked), only where the
original order already bound every name a statement reads at import before it and no name is
bound twice: then both orders build the same namespace, and calls come after import.
A run whose own order reads a name before binding it (NameError at import) is kept and marked:
sorted, a valid run can come out in exactly that order (a def annotated with a def that sorts
after it), and the broken program must never share the fixed one's identity.
"""

from __future__ import annotations

import ast
import builtins
import copy
from collections import Counter
from collections.abc import Iterable

_PURE_IMPORTS = frozenset({"torch", "triton", "math", "triton.language", "torch.distributed"})
_DEF = (ast.FunctionDef, ast.AsyncFunctionDef)
_BUILTINS = frozenset(dir(builtins))
# Marks a run left unsorted because a statement reads, at import, a name bound later in it. No
# tidied program holds a bare constant statement (_strip_noops), so no sorted run reads like it.
_KEPT = "#order-kept"


def _literal(n: ast.AST | None) -> bool:
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
        n = n.operand
    if isinstance(n, (ast.Tuple, ast.List)):
        return all(_literal(e) for e in n.elts)
    return isinstance(n, ast.Constant)


def _chain(n: ast.AST | None) -> bool:
    while isinstance(n, ast.Attribute):
        n = n.value
    return isinstance(n, ast.Name)


def _import_time(st: ast.stmt) -> list[ast.AST]:
    """The expressions a module-level statement evaluates when the module is imported."""
    if isinstance(st, _DEF):
        a = st.args
        anns = [x.annotation for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x and x.annotation]
        return [
            *st.decorator_list,
            *a.defaults,
            *[d for d in a.kw_defaults if d],
            *anns,
            *([st.returns] if st.returns else []),
        ]
    if isinstance(st, ast.Assign):
        return [st.value]
    return []


def _kind(st: ast.stmt) -> int | None:
    """0 import, 1 constant, 2 def: a statement that binds without acting; None otherwise."""
    if isinstance(st, ast.Import) and all(a.name in _PURE_IMPORTS for a in st.names):
        return 0
    if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) and _literal(st.value):
        return 1
    if (
        isinstance(st, _DEF)
        and all(ast.unparse(d) == "triton.jit" for d in st.decorator_list)
        and all(_literal(d) for d in [*st.args.defaults, *st.args.kw_defaults] if d is not None)
        and all(_chain(e) for e in _import_time(st)[len(st.decorator_list) :] if not _literal(e))
    ):
        return 2
    return None


def _binds(st: ast.stmt) -> list[str]:
    if isinstance(st, _DEF):
        return [st.name]
    if isinstance(st, ast.Import):
        return [a.asname or a.name.split(".")[0] for a in st.names]
    if isinstance(st, ast.ImportFrom):
        return [a.asname or a.name for a in st.names]
    if isinstance(st, (ast.Assign, ast.AnnAssign)):
        targets = st.targets if isinstance(st, ast.Assign) else [st.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return []


def _reads(nodes: Iterable[ast.AST]) -> set[str]:
    return {n.id for e in nodes for n in ast.walk(e) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _strip_noops(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                kept = [
                    s
                    for s in body
                    if not (isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)))
                ]
                setattr(node, field, kept or [ast.Pass()])


def _drop_unused(mods: dict[str, ast.Module], entries: set[tuple[str, str]]) -> set[str]:
    """Drop unused definitions to a fixpoint, by reference counts (each node counted once, and
    uncounted once when its statement goes).

    A statement may go when binding it cannot act or fail at import (_kind, and every name it
    reads then is bound before it) and none of its names is read in its module, relatively
    imported anywhere, spelled in a string, an entry or a dunder. Only the counts change as
    statements go, and only downwards, so whatever order they go in ends at the same program:
    re-walking every module per round removed one link of a chain of unused defs per round
    (quadratic: 1000 such defs cost 13 s CPU). Returns the string constants left."""
    loads = {m: Counter[str]() for m in mods}  # Name loads per module
    imported, strings = Counter[str](), Counter[str]()  # relative-import names / string constants, all modules
    for m, tree in mods.items():
        _account(tree, loads[m], imported, strings, 1)
    by_load: dict[tuple[str, str], list[tuple[str, ast.stmt]]] = {}  # who may go when (module, name) is unread
    by_name: dict[str, list[tuple[str, ast.stmt]]] = {}  # ... when a name is neither imported nor spelled
    todo: list[tuple[str, ast.stmt]] = []
    for m, tree in mods.items():
        before = set(_BUILTINS)  # names bound before the statement (what it may read at import)
        for st in tree.body:
            names = _binds(st)
            if (
                _kind(st) is not None
                and names
                and _reads(_import_time(st)) <= before
                and not any((m, n) in entries or n.startswith("__") for n in names)
            ):
                for n in names:
                    by_load.setdefault((m, n), []).append((m, st))
                    by_name.setdefault(n, []).append((m, st))
                todo.append((m, st))
            before |= set(names)
    gone: set[int] = set()

    def unused(m: str, st: ast.stmt) -> bool:
        return not any(loads[m][n] or imported[n] or strings[n] for n in _binds(st))

    while todo:
        m, st = todo.pop()
        if id(st) in gone or not unused(m, st):
            continue
        gone.add(id(st))
        for kind, key in _account(st, loads[m], imported, strings, -1):  # the counts that reached zero
            todo += by_load.get((m, key), []) if kind == "load" else by_name.get(key, [])
    for tree in mods.values():
        tree.body = [st for st in tree.body if id(st) not in gone] or [ast.Pass()]
    return {s for s, n in strings.items() if n}


def _account(
    node: ast.AST, loads: Counter[str], imported: Counter[str], strings: Counter[str], step: int
) -> list[tuple[str, str]]:
    """Add `step` to the counts of every name load, relative-import name and string in `node`;
    returns the (kind, key) counts that reached zero."""
    zero: list[tuple[str, str]] = []
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            loads[n.id] += step
            if not loads[n.id]:
                zero.append(("load", n.id))
        elif isinstance(n, ast.ImportFrom) and n.level:
            for a in n.names:
                imported[a.name] += step
                if not imported[a.name]:
                    zero.append(("name", a.name))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            strings[n.value] += step
            if not strings[n.value]:
                zero.append(("name", n.value))
    return zero


def _shape(st: ast.stmt) -> str:
    class _B(ast.NodeTransformer):
        def visit_Name(self, n: ast.Name) -> ast.AST:
            return ast.Name("_", n.ctx)

        def visit_arg(self, n: ast.arg) -> ast.AST:
            return ast.arg("_", self.visit(n.annotation) if n.annotation else None)

    new = _B().visit(copy.deepcopy(st))
    if isinstance(new, _DEF):
        new.name = "_"
    if isinstance(new, ast.Import):
        new.names = [ast.alias(a.name, None) for a in new.names]
    return ast.dump(new, annotate_fields=False)


def _reorder(tree: ast.Module) -> bool:
    """Sort the order-free runs; True when a run was kept as written (and marked)."""
    body = tree.body
    bound = [n for st in body for n in _binds(st)]
    if len(bound) != len(set(bound)):
        return False  # a name bound twice: order decides which one wins
    marked = False
    out: list[ast.stmt] = []
    run: list[ast.stmt] = []
    for st in [*body, None]:
        if st is not None and _kind(st) is not None:
            run.append(st)
            continue
        seen: set[str] = set()
        valid = True
        in_run = {n for s in run for n in _binds(s)}
        for s in run:
            if (_reads(_import_time(s)) & in_run) - seen:
                valid = False
            seen |= set(_binds(s))
        if valid:
            run = sorted(run, key=lambda s: (_kind(s), _shape(s)))
        elif run:  # kept as written, and marked: a sorted run of a valid program can read exactly like
            out.append(ast.Expr(ast.Constant(_KEPT)))  # this one, which fails at import (red team)
            marked = True
        out += run
        run = []
        if st is not None:
            out.append(st)
    tree.body = out
    return marked


def tidy(mods: dict[str, ast.Module], entries: set[tuple[str, str]]) -> set[str]:
    """Drop dead code and sort order-free definitions, in place (module name -> tree). Returns
    the string constants left in the trees (from the drop's counts: no walk of its own)."""
    for t in mods.values():
        _strip_noops(t)
    strings = _drop_unused(mods, entries)
    for t in mods.values():
        if _reorder(t):
            strings.add(_KEPT)
    return strings
