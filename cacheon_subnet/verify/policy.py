"""Static policy scan of bundle sources (defence in depth; the sandbox is the real wall).

A kernel needs torch, triton and a little stdlib math. Everything else a bundle might reach
for is how results get faked or hosts get hurt: spawning processes, sockets, native loading,
timers and monkey-patching (the `Event.elapsed_time` cheat), GC scans, dynamic code, host
syncs inside the op. Each finding names file, line and rule.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Mapping

ALLOWED_IMPORTS = frozenset({
    "torch", "triton", "triton.language", "math", "functools", "typing", "dataclasses", "itertools",
    "operator", "collections", "enum", "abc", "__future__", "numbers", "contextlib", "types",
    "torch.distributed",  # collective slots: the kernel gets its ProcessGroup as `group=`
})
ALLOWED_PREFIXES = ("triton.language.", "torch.nn.functional", "typing.", "collections.")

RULES: Mapping[str, str] = {
    "P001": "process spawning",
    "P002": "network access",
    "P003": "native code loading (ctypes/cffi/cpp_extension/load_library)",
    "P004": "timers or monkey-patching of torch/triton/builtins",
    "P005": "dynamic code (eval/exec/compile/__import__/importlib)",
    "P006": "GC / frame introspection",
    "P007": "host sync inside the op (graph-unsafe)",
    "P008": "threads, signals or environment mutation",
    "P009": "import outside the allowed set",
    "P010": "syntax error",
}

_MODULE_RULES = {
    "subprocess": "P001", "multiprocessing": "P001", "os": "P001", "pty": "P001", "shutil": "P001",
    "socket": "P002", "ssl": "P002", "http": "P002", "urllib": "P002", "requests": "P002", "aiohttp": "P002",
    "ftplib": "P002", "smtplib": "P002", "asyncio": "P002",
    "ctypes": "P003", "cffi": "P003", "torch.utils.cpp_extension": "P003", "importlib": "P005",
    "time": "P004", "timeit": "P004", "builtins": "P004", "sys": "P004", "inspect": "P006", "gc": "P006",
    "threading": "P008", "signal": "P008", "_thread": "P008", "concurrent": "P008", "marshal": "P005",
    "pickle": "P005", "triton.runtime": "P003", "triton.compiler": "P003", "triton.backends": "P003",
    "torch._C": "P003", "torch._dynamo": "P004", "torch.cuda.Event": "P004",
    "torch.distributed.rpc": "P002", "torch.distributed.elastic": "P001", "torch.distributed.run": "P001",
    "torch.distributed.launcher": "P001",
}
_CALL_RULES = {
    "eval": "P005", "exec": "P005", "compile": "P005", "__import__": "P005", "globals": "P006",
    "vars": "P006", "setattr": "P004", "delattr": "P004", "breakpoint": "P006", "open": "P008",
}
_ATTR_RULES = {
    "item": "P007", "tolist": "P007", "numpy": "P007", "synchronize": "P007",
    "load_library": "P003", "load_inline": "P003", "elapsed_time": "P004", "record_function": "P004",
    "__dict__": "P006", "__globals__": "P006", "__code__": "P006", "__builtins__": "P004",
    "f_back": "P006", "f_locals": "P006", "_getframe": "P006", "environ": "P008", "putenv": "P008",
    "__subclasses__": "P006", "__class__": "P006",
    # a collective kernel uses the group it is handed; creating groups / stores opens sockets
    "init_process_group": "P002", "new_group": "P002", "new_subgroups": "P002", "destroy_process_group": "P002",
    "TCPStore": "P002", "FileStore": "P002", "HashStore": "P002", "PrefixStore": "P002", "init_device_mesh": "P002",
}
_PROTECTED_ROOTS = frozenset({"torch", "triton", "math", "builtins", "time", "sys", "functools"})


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule} {RULES[self.rule]}: {self.message}"


def scan_files(files: Mapping[str, bytes]) -> list[Finding]:
    out: list[Finding] = []
    for path in sorted(files):
        if path.endswith(".py"):
            out.extend(scan_source(path, files[path].decode("utf-8", "replace")))
    return out


def scan_source(path: str, text: str) -> list[Finding]:
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as e:
        return [Finding(path, e.lineno or 0, "P010", str(e.msg))]
    v = _Visitor(path)
    v.visit(tree)
    return v.findings


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.findings: list[Finding] = []
        self.aliases: dict[str, str] = {}

    def add(self, node: ast.AST, rule: str, msg: str) -> None:
        self.findings.append(Finding(self.path, getattr(node, "lineno", 0), rule, msg))

    def _check_module(self, node: ast.AST, module: str) -> None:
        for prefix in sorted(_MODULE_RULES, key=len, reverse=True):
            if module == prefix or module.startswith(prefix + "."):
                self.add(node, _MODULE_RULES[prefix], f"import of {module!r}")
                return
        if module not in ALLOWED_IMPORTS and not module.startswith(ALLOWED_PREFIXES):
            self.add(node, "P009", f"import of {module!r} (allowed: {', '.join(sorted(ALLOWED_IMPORTS))}; "
                                   "use relative imports for modules of the bundle)")

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._check_module(node, a.name)
            self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self._check_module(node, node.module)
            for a in node.names:
                full = f"{node.module}.{a.name}"
                for prefix, rule in _MODULE_RULES.items():
                    if full == prefix:
                        self.add(node, rule, f"import of {full!r}")
                self.aliases[a.asname or a.name] = full
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func)
        if isinstance(node.func, ast.Name) and node.func.id in _CALL_RULES:
            self.add(node, _CALL_RULES[node.func.id], f"call to {node.func.id}()")
        if isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2:
            if not isinstance(node.args[1], ast.Constant):
                self.add(node, "P005", "getattr() with a computed attribute name")
        if name and name.split(".")[-1] == "cpu" and isinstance(node.func, ast.Attribute):
            self.add(node, "P007", f"{name}() copies to the host inside the op")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in _ATTR_RULES:
            self.add(node, _ATTR_RULES[node.attr], f"use of .{node.attr}")
        full = _dotted(node)
        if full:
            root = full.split(".")[0]
            resolved = self.aliases.get(root, root) + full[len(root):]
            for prefix in ("torch.utils.cpp_extension", "torch._C", "torch.ops.load_library", "triton.runtime",
                           "triton.compiler", "torch.cuda.Event", "torch._dynamo", "torch.cuda.set_sync_debug_mode"):
                if resolved == prefix or resolved.startswith(prefix + "."):
                    rule = "P003" if "cpp_extension" in prefix or "_C" in prefix or "load_library" in prefix or prefix.startswith("triton.") else "P004"
                    self.add(node, rule, f"use of {resolved}")
                    break
        self.generic_visit(node)

    def _check_target(self, target: ast.AST) -> None:
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            full = _dotted(target.value) or ""
            root = full.split(".")[0]
            if root and self.aliases.get(root, root).split(".")[0] in _PROTECTED_ROOTS:
                self.add(target, "P004", f"assignment into {full} (monkey-patching)")

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)
