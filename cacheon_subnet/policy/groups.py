"""Which parameters of a bundle's functions carry a process group, so every caller must pass
its own group parameter on (policy.py enforces it at each call).

Why: a collective must run on the group the seam handed the entry function, never on the
default (world) group. policy.py already requires a collective's `group=` to be a required,
never-rebound parameter of the function that calls it; without this, a helper called as
`helper(t, None)` (or through a local alias) still handed `None` to that parameter. A parameter
is a group parameter when the function passes it as a collective's group, or into another
function's group parameter (a fixpoint over the bundle's module-level defs)."""

from __future__ import annotations

import ast
from collections.abc import Mapping

from cacheon_subnet.policy import allowlist as A
from cacheon_subnet.policy.scope import ModuleIndex, dotted

MAX_HOPS = 16  # re-export hops followed (as policy_module.definition)
Target = tuple[str, str]  # (module key, def name)


def callee(mods: Mapping[str, ModuleIndex], key: str, name: str) -> Target | None:
    """The bundle def a module-level `name` of module `key` names (following relative re-exports)."""
    for _ in range(MAX_HOPS + 1):
        mod = mods.get(key)
        if mod is None:
            return None
        if name in mod.defs:
            return key, name
        if name not in mod.rel or mod.rel[name][0] is None:
            return None
        key, name = mod.rel[name][0], mod.rel[name][1]  # type: ignore[assignment]
    return None


def bound_args(call: ast.Call, fn: ast.FunctionDef) -> dict[str, ast.expr]:
    """Parameter name -> the argument expression this call binds to it (positional and keyword)."""
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    out = {p: a for p, a in zip(params, call.args) if not isinstance(a, ast.Starred)}
    out.update({k.arg: k.value for k in call.keywords if k.arg is not None})
    return out


def collective_group(call: ast.Call, mod: ModuleIndex) -> ast.expr | None:
    """The group argument of a torch.distributed collective call (None: not one, or not given)."""
    parts = dotted(call.func)
    if not parts or len(parts) < 2 or parts[0] not in mod.imports:
        return None
    full = ".".join([mod.imports[parts[0]], *parts[1:]])
    if full not in A.GROUP_POSITION:
        return None
    return group_argument(call, A.GROUP_POSITION[full])


def group_argument(call: ast.Call, pos: int) -> ast.expr | None:
    """What a collective call passes as its group: `group=` or the positional argument at `pos`."""
    return next((k.value for k in call.keywords if k.arg == "group"), call.args[pos] if len(call.args) > pos else None)


def group_params(mods: Mapping[str, ModuleIndex]) -> dict[Target, frozenset[str]]:
    """For each bundle def, the parameters that reach a collective's group (transitively).

    A worklist over the call graph: each def is walked once, collecting the parameters it hands
    a collective directly and, per call of another bundle def, which of its own parameters it
    passes into which of the callee's; then a parameter found for a callee flows to its callers
    along those edges, each (def, parameter) once. The same least fixpoint as re-walking every
    def until nothing changes, which took one round per link of a call chain (quadratic: a
    policy-clean chain of 4000 defs ending in a collective cost 173 s CPU: docs/benchmarks.md)."""
    found: dict[Target, set[str]] = {(k, n): set() for k, m in mods.items() for n in m.defs}
    flows: dict[tuple[Target, str], list[tuple[Target, str]]] = {}  # (callee, its param) -> [(caller, its param)]
    for (key, name), own in found.items():
        mod = mods[key]
        fn = mod.defs[name]
        params = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            g = collective_group(node, mod)
            if isinstance(g, ast.Name) and g.id in params:
                own.add(g.id)
            target = callee(mods, key, node.func.id) if isinstance(node.func, ast.Name) else None
            if target is None:
                continue
            for p, a in bound_args(node, mods[target[0]].defs[target[1]]).items():
                if isinstance(a, ast.Name) and a.id in params:
                    flows.setdefault((target, p), []).append(((key, name), a.id))
    todo = [(t, p) for t, ps in found.items() for p in ps]
    while todo:
        for caller, q in flows.get(todo.pop(), ()):
            if q not in found[caller]:
                found[caller].add(q)
                todo.append((caller, q))
    return {t: frozenset(p) for t, p in found.items() if p}
