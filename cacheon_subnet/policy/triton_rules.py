"""Decorator and Triton-source rules of the policy scan (mixed into policy._Checker).

Triton re-reads a kernel's source text and evaluates its decorators' arguments: configs,
heuristics and options may carry callables (pre_hook, prune_configs_by, launch_metadata, repr)
or files (ir_override), so each decorator is taken apart literally: only the allowed option
names, literal configs, identifier strings and lambdas checked by the ordinary rules.
"""

from __future__ import annotations

import ast
import re

from cacheon_subnet.policy import allowlist as A
from cacheon_subnet.policy.host import RuleHost

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DEF_LINE = re.compile(r"^\s*def\b")
_KERNEL_DEF = re.compile(r"^def [A-Za-z_][A-Za-z0-9_]*\(")  # what compiled Triton and the interpreter both find


class TritonRules(RuleHost):
    """Needs from the host class what policy/host.RuleHost declares (const: module_rules')."""

    def triton_source(self, fn: ast.FunctionDef) -> None:
        """Triton re-reads a kernel's source: compiled mode from the first line matching `^def`,
        the interpreter from the LAST line starting with `def ` (the block's last line when none
        does). Only the real def line may, and it must be one both read as such."""
        first = min(d.lineno for d in fn.decorator_list)
        own = self.m.lines[fn.lineno - 1] if fn.lineno - 1 < len(self.m.lines) else ""
        if not _KERNEL_DEF.match(own):  # `def\t_k(`: the interpreter finds no 'def ' and runs the block's last line
            self.add(
                fn,
                "P018",
                f"kernel {fn.name}: its def line must start 'def {fn.name}(' (one space, column 0), the "
                "line Triton's interpreter and compiler both take for the kernel's source",
            )
        for no in range(first, (fn.end_lineno or fn.lineno) + 1):
            if no != fn.lineno and no - 1 < len(self.m.lines) and _DEF_LINE.match(self.m.lines[no - 1]):
                self.add(
                    ast.Pass(lineno=no),
                    "P018",
                    f"line {no} of kernel {fn.name} starts with 'def': Triton would take it for the kernel's source",
                )
        for n in ast.walk(fn):
            if n is not fn and isinstance(n, ast.FunctionDef):
                self.add(n, "P018", f"nested def inside kernel {fn.name}")

    def decorator(self, d: ast.expr) -> None:
        for n in ast.walk(d):
            if (
                isinstance(n, ast.Constant) and isinstance(n.value, str) and not _IDENT.fullmatch(n.value)
            ):  # `$` alone lets "name\n" through
                self.add(n, "P018", f"string {n.value[:40]!r} in a decorator: only identifiers (kernel argument names)")
        chain = self.chain_of(d.func if isinstance(d, ast.Call) else d)
        if chain == "triton.jit" and not isinstance(d, ast.Call):
            return
        if not isinstance(d, ast.Call) or chain not in ("triton.jit", "triton.autotune", "triton.heuristics"):
            self.add(
                d, "P018", f"decorator {ast.unparse(d)[:60]!r} (allowed: triton.jit, triton.autotune, triton.heuristics)"
            )
            return
        allowed = {"triton.jit": A.JIT_OPTIONS, "triton.autotune": A.AUTOTUNE_OPTIONS, "triton.heuristics": frozenset()}
        self.options(d, allowed[chain], 0 if chain == "triton.jit" else (2 if chain == "triton.autotune" else 1))
        values = list(d.args) + [k.value for k in d.keywords if k.arg]
        if chain == "triton.heuristics":
            for v in values:
                if not isinstance(v, ast.Dict) or None in v.keys:
                    self.add(v, "P018", "triton.heuristics takes one dict {'NAME': lambda args: ...}")
                    continue
                for k, fn in zip(v.keys, v.values):
                    if k is None:  # a **spread: already refused above
                        continue
                    self.const(k)
                    self.option_key(k)
                    self.expr(fn) if isinstance(fn, ast.Lambda) else self.add(fn, "P018", "heuristics values are lambdas")
            return
        for v in values:
            configs = v.elts if isinstance(v, (ast.List, ast.Tuple)) else [v]
            for c in configs:
                if self.chain_of(c.func if isinstance(c, ast.Call) else c) == "triton.Config":
                    self.config(c)
                else:
                    self.literal(c)

    def options(self, call: ast.Call, allowed: frozenset[str], max_args: int) -> None:
        if len(call.args) > max_args:
            self.add(call, "P018", f"at most {max_args} positional argument(s)")
        for k in call.keywords:
            if k.arg not in allowed:
                self.add(
                    k,
                    "P018",
                    f"option {k.arg or '**'}= (allowed: {', '.join(sorted(allowed)) or 'none'}; "
                    "no hooks, callables or files)",
                )

    def config(self, c: ast.expr) -> None:
        if not isinstance(c, ast.Call):
            self.add(c, "P016", "triton.Config must be called")
            return
        self.options(c, A.CONFIG_OPTIONS, 1)
        for v in list(c.args) + [k.value for k in c.keywords]:
            self.literal(v)
        for v in c.args[:1]:
            for k in v.keys if isinstance(v, ast.Dict) else []:
                self.option_key(k)

    def option_key(self, k: ast.expr | None) -> None:
        """A Config / heuristics key becomes a launch keyword: a string literal (a constant's name
        would hide which), never a compile option's name."""
        if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
            self.add(
                k or ast.Pass(lineno=0), "P018", "Config / heuristics keys are string literals (kernel parameter names)"
            )
        elif k.value in A.TRITON_OPTIONS - A.LAUNCH_OPTIONS:
            self.add(k, "P018", f"key {k.value!r} is a Triton compile option (it would reach backend.parse_options)")

    def literal(self, v: ast.expr) -> None:
        if isinstance(v, (ast.List, ast.Dict)):
            for c in ast.iter_child_nodes(v):
                if isinstance(c, ast.expr):
                    self.literal(c)
        else:
            self.const(v)
