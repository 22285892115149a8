"""What the rule mixins (module_rules, triton_rules, reach_rules) call on the checker that hosts them.

scan._Checker defines every member below; declaring them once here lets the type checker hold
each mixin to the host's real signatures. Nothing is defined at run time: the attributes are bare
annotations and the methods exist only for the checker.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cacheon_subnet.policy.scope import ModuleIndex


class RuleHost:
    m: ModuleIndex
    mods: Mapping[str, ModuleIndex]
    files: frozenset[str]
    dirs: frozenset[str]  # every directory holding a member (a set, not a scan of the members per name)
    cuda_modules: frozenset[str]  # entry modules of ops with [ops.cuda]: the only ones that may import native
    key: str  # this module's key in mods (policy.scope.module_key)
    kernel_params: frozenset[str]  # every parameter name of a decorated def in the bundle (launch keywords)
    groups: Mapping[tuple[str, str], frozenset[str]]  # (module, def) -> its process-group parameters
    scopes: list[tuple[frozenset[str], set[str]]]  # (required params, bound names), innermost last
    top_scope: tuple[frozenset[str], set[str]] | None  # scope of the module-level def being checked
    jit: bool  # inside a decorated (Triton) def

    if TYPE_CHECKING:

        def add(self, node: ast.AST, rule: str, msg: str) -> None: ...
        def resolve(self, name: str) -> str | None: ...
        def chain_of(self, node: ast.expr) -> str | None: ...
        def check_binding(self, node: ast.AST, name: str, where: str) -> None: ...
        def function(self, fn: ast.FunctionDef, top: bool) -> None: ...
        def stmt(self, st: ast.stmt) -> None: ...
        def expr(self, node: ast.expr, pos: str = "value") -> None: ...
        def name(self, node: ast.Name, pos: str) -> None: ...
        def attribute(self, node: ast.Attribute, pos: str) -> None: ...
        def annotation(self, node: ast.expr) -> None: ...
        def const(self, node: ast.expr) -> None: ...
