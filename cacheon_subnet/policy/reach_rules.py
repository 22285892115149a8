"""Reach rules of the policy scan (mixed into policy._Checker): what a name, an attribute chain or a
call found in bundle code may reach.

These are the leaves of the checker's walk, where bundle code would touch an object: a name must
resolve to a parameter, local, bundle definition or allowlisted builtin; an import root only as the
base of an allowlisted attribute chain; an attribute of a computed value only from one short list;
a call only with plain keywords, and a collective (or a bundle function that takes a process group)
only on the caller's own group parameter. They sit apart from scan.py, which walks statements and
expressions and hands every leaf here, so the allowlist's verdicts read in one place.
"""

from __future__ import annotations

import ast

from cacheon_subnet.policy import allowlist as A
from cacheon_subnet.policy.groups import bound_args, callee, group_argument
from cacheon_subnet.policy.host import RuleHost


class ReachRules(RuleHost):
    """Needs from the host class what policy/host.RuleHost declares."""

    def name(self, node: ast.Name, pos: str) -> None:
        kind = self.resolve(node.id)
        if node.id.startswith("__"):
            self.add(node, A.NAME_CODES.get(node.id, "P013"), f"name {node.id!r}: dunder names are not allowed")
        elif kind is None:
            self.add(
                node,
                A.NAME_CODES.get(node.id, "P011"),
                f"name {node.id!r} is not a parameter, local, bundle definition or allowlisted builtin",
            )
        elif kind == "module":
            self.add(node, "P016", f"module {node.id!r} used as a value: only {node.id}.<allowlisted attribute>")
        elif kind == "bundle" and pos != "call" and self.groups.get(callee(self.mods, self.key, node.id) or ("", "")):
            self.add(
                node,
                "P016",
                f"{node.id!r} takes a process group: call it by name (an alias would hide where its group comes from)",
            )
        elif kind == "typing" and pos != "annotation":
            self.add(node, "P016", f"typing name {node.id!r} outside an annotation")
        elif pos == "annotation" and kind == "builtin" and node.id not in A.ANNOTATION_BUILTINS:
            self.add(node, "P016", f"{node.id!r} in an annotation")

    def attribute(self, node: ast.Attribute, pos: str) -> None:
        full = self.chain_of(node)
        if full is not None:
            if node.attr.startswith("_"):
                self.add(
                    node,
                    A.ATTR_CODES.get(node.attr, "P013"),
                    f"attribute .{node.attr}: private and dunder attributes are never allowed",
                )
                return
            kind = A.MODULE_ATTRS.get(full)
            if full in A.NATIVE_CALLS and self.jit:
                self.add(node, "P018", f"{full} inside a Triton kernel: the launcher is called from the op's wrapper")
            elif kind is None:
                self.add(node, A.chain_code(full), f"{full} is not on the allowlist")
            elif not (kind == pos or (pos == "annotation" and kind == "value")):
                self.add(node, "P016", f"{full} ({kind}) used as {'a value' if pos == 'value' else pos}")
            return
        # A chain on a value: every shorter chain below has the same root, so none is a module chain
        # either. Walked in a loop, outermost first (re-deriving the chain per level was quadratic).
        while True:
            if node.attr.startswith("_"):
                self.add(
                    node,
                    A.ATTR_CODES.get(node.attr, "P013"),
                    f"attribute .{node.attr}: private and dunder attributes are never allowed",
                )
            elif pos == "annotation" or node.attr not in A.VALUE_ATTRS:
                self.add(node, A.ATTR_CODES.get(node.attr, "P012"), f".{node.attr} is not an allowed attribute of a value")
            elif pos != "call" and node.attr not in A.VALUE_DATA:
                self.add(
                    node,
                    "P012",
                    f".{node.attr} is a method here: only .{node.attr}(...) (read as a value it can "
                    "be a decorator object's shared list or dict)",
                )
            if not isinstance(node.value, ast.Attribute):
                self.expr(node.value)
                return
            node, pos = node.value, "value"

    def call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Subscript):  # kernel launch k[grid](...): kernel arguments + a few launch options
            self.expr(f)
            for k in node.keywords:
                if (
                    k.arg is not None
                    and k.arg not in A.LAUNCH_OPTIONS
                    and (k.arg not in self.kernel_params or k.arg in A.TRITON_OPTIONS)
                ):
                    self.add(
                        k,
                        "P019",
                        f"launch option {k.arg}= (allowed: kernel arguments, {', '.join(sorted(A.LAUNCH_OPTIONS))})",
                    )
        else:
            self.expr(f, "call" if isinstance(f, (ast.Name, ast.Attribute)) else "value")
            full = self.chain_of(f) or ""
            if full in A.GROUP_POSITION:
                self.group_arg(node, full, A.GROUP_POSITION[full])
            elif isinstance(f, ast.Name) and self.resolve(f.id) == "bundle":
                self.group_pass(node, f.id)
        if isinstance(f, ast.Attribute) and any(k.arg == "out" for k in node.keywords):
            self.add(
                node,
                "P019",
                f".{f.attr}(out=...) resizes or re-points its target in place: write into a "
                "tensor with .copy_() or a kernel instead",
            )
        if any(k.arg == "requires_grad" for k in node.keywords):  # kw-only on every factory
            self.add(
                node,
                "P019",
                "requires_grad=: a tensor that records autograd shows, in str(), whether the "
                "caller runs under grad mode, no_grad / a custom op, or inference_mode (verify "
                "from the engine)",
            )
        for a in node.args:
            self.expr(a)
        for k in node.keywords:
            if k.arg is None:
                self.add(k.value, "P019", "** unpacking in a call (pass keyword arguments by name)")
            elif k.arg.startswith("_"):  # _semantic=, _builder=, _generator=: Triton's internal channels
                self.add(k, "P013", f"keyword {k.arg}=: private keywords are not allowed")
            self.expr(k.value)

    def group_arg(self, node: ast.Call, full: str, pos: int) -> None:
        """Collectives name their group: a parameter every caller must pass, never rebound (the
        default group spans every rank of the engine, not the ranks the kernel was handed)."""
        if not self.own_group(group_argument(node, pos)):
            self.add(
                node,
                "P019",
                f"{full} needs group=<a parameter without default>: without it the default "
                "(world) group runs the collective",
            )
        if len(node.args) > pos + 1 or any(k.arg == "async_op" for k in node.keywords):
            self.add(
                node,
                "P019",
                f"{full}: async_op (or any argument after the group): the call would return with the "
                "collective still writing, a Work handle nothing may wait on; verify's device-wide "
                "synchronize hides that race, the engine's next kernel does not",
            )

    def own_group(self, g: ast.expr | None) -> bool:
        """`g` is a required, never-rebound parameter of the innermost function that binds it, and
        that function is a module-level def: a nested def's or a lambda's parameter is set by a call
        that group_pass never checks (`inner(out, None)` ran on the world group and PASSed verify:
        static/ops_group_nested_def_none)."""
        scope = next((s for s in reversed(self.scopes) if isinstance(g, ast.Name) and g.id in s[1]), None)
        return scope is not None and scope is self.top_scope and g.id in scope[0]  # type: ignore[union-attr]

    def group_pass(self, node: ast.Call, name: str) -> None:
        """A call of a bundle function that takes a process group passes the caller's own group on
        (policy/groups.py): never None, a default or anything computed."""
        target = callee(self.mods, self.key, name)
        wanted = self.groups.get(target) if target else None
        if not wanted:
            return
        bound = bound_args(node, self.mods[target[0]].defs[target[1]])  # type: ignore[index]
        for p in sorted(wanted):
            if not self.own_group(bound.get(p)):
                self.add(
                    node,
                    "P019",
                    f"{name}() takes a process group as {p!r}: pass your own group parameter "
                    "(one without default), never None or a computed value",
                )
