"""SGLang compatibility canary, driven by seams/table.py (SEAM_ADAPTERS, PLUGIN_GROUP, HOOK_TARGETS).

Why two modes: `static_check(DIR)` reads an unpacked SGLang tree with `ast` (nothing imported), so
any host -- CI without CUDA, a reviewer holding a candidate wheel -- can check a release before
installing it; `runtime_check()` inspects what the installed runtime really binds (the evidence
that counts inside the pinned engine image). Both check, per table row: the defining symbol
exists with the expected parameter names in order (defaults may change; renamed, missing,
reordered or new required parameters, or an expected name turned into *args/**kwargs or
positional-only, are breaks), and every patch point resolves (statically: the consumer defines
the name or binds it with a module-level `from x import name` chain that reaches the defining
module). Rows whose `requires` packages are absent / not importable are SKIPped: not evidence.

Exit codes (`cacheon compat`, scripts/check_sglang.py):
  0  found version == pin and every assessed row OK (SKIP rows are listed, never hidden);
  1  version == pin but some row FAILs (a seam, the plugin group or the hook API broke);
  2  version differs from the pin, or could not be determined / sglang is absent. 2 wins over 1:
     another runtime is another evaluation identity whether or not its seams still line up.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from seams.table import HOOK_TARGETS, PINNED, PLUGIN_GROUP, SEAM_ADAPTERS, SeamAdapter

OK, FAIL, SKIP = "OK", "FAIL", "SKIP"
EXIT_INTACT, EXIT_BROKEN, EXIT_VERSION = 0, 1, 2
# What the seam relies on beyond the rows (the released plugin interface; see sglang_chokepoints.md §1).
PLUGIN_GROUP_SITE = ("sglang.srt.plugins", "GENERAL_PLUGINS_GROUP")
HOOK_PARAMS: Mapping[str, tuple[str, ...]] = {
    "sglang.srt.plugins.hook_registry:HookRegistry.register": ("target", "hook", "hook_type", "source"),
}
HOOK_TYPE = ("sglang.srt.plugins.hook_registry", "HookType", ("AROUND", "REPLACE"))
PLUGINS_LOADED_BY = ("sglang.srt.managers.scheduler", "run_scheduler_process", "load_plugins")
_DEF = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class Param:
    """One parameter as both modes see it (kind = inspect.Parameter kind name)."""

    name: str
    kind: str
    has_default: bool


@dataclass(frozen=True)
class Row:
    kind: str  # "seam" | "plugin" | "hook"
    name: str  # binding id, or a short label
    target: str  # "module:symbol" checked
    status: str  # OK | FAIL | SKIP
    detail: str


@dataclass(frozen=True)
class CompatReport:
    mode: str  # "static" | "runtime"
    where: str  # source dir, or the installed sglang's location
    pinned: str
    found: str | None
    rows: tuple[Row, ...]

    @property
    def version_ok(self) -> bool:
        return self.found == self.pinned

    @property
    def failed(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.status == FAIL)

    @property
    def skipped(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.status == SKIP)

    @property
    def exit_code(self) -> int:
        if not self.version_ok:
            return EXIT_VERSION
        return EXIT_BROKEN if self.failed else EXIT_INTACT

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "where": self.where, "pinned": self.pinned, "found": self.found,
                "version_ok": self.version_ok, "exit_code": self.exit_code, "rows": [asdict(r) for r in self.rows]}


# -- signatures ----------------------------------------------------------------------------------
def compare_params(expected: tuple[str, ...], found: list[Param]) -> list[str]:
    """Differences that break callers or adapters; [] = compatible (defaults may differ)."""
    named = [p for p in found if p.kind not in ("VAR_POSITIONAL", "VAR_KEYWORD")]
    names = [p.name for p in named]
    problems: list[str] = []
    if names[: len(expected)] != list(expected):
        for i, exp in enumerate(expected):
            got = names[i] if i < len(names) else None
            if got == exp:
                continue
            if exp in names:
                problems.append(f"parameter {exp!r} moved from position {i} to {names.index(exp)}")
            elif got is not None and got not in expected:
                problems.append(f"parameter {i} renamed {exp!r} -> {got!r}")
            else:
                problems.append(f"parameter {exp!r} (position {i}) missing")
    extra_required = [p.name for p in named[len(expected):] if not p.has_default and p.name not in expected]
    if extra_required:
        problems.append(f"new required parameter(s) {', '.join(extra_required)}")
    for p in found:
        if p.name in expected and p.kind in ("VAR_POSITIONAL", "VAR_KEYWORD", "POSITIONAL_ONLY"):
            problems.append(f"parameter {p.name!r} is now {p.kind}")
    return problems


def format_params(params: list[Param]) -> str:
    out: list[str] = []
    for i, p in enumerate(params):
        if p.kind == "KEYWORD_ONLY" and not any(q.kind in ("KEYWORD_ONLY", "VAR_POSITIONAL") for q in params[:i]):
            out.append("*")
        out.append({"VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}.get(p.kind, "") + p.name + ("=" if p.has_default else ""))
        if p.kind == "POSITIONAL_ONLY" and (i + 1 == len(params) or params[i + 1].kind != "POSITIONAL_ONLY"):
            out.append("/")
    return f"({', '.join(out)})"


def _ast_params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[Param]:
    a = fn.args
    pos = a.posonlyargs + a.args
    first_default = len(pos) - len(a.defaults)
    out = [Param(x.arg, "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD", i >= first_default)
           for i, x in enumerate(pos)]
    if a.vararg:
        out.append(Param(a.vararg.arg, "VAR_POSITIONAL", True))
    out += [Param(k.arg, "KEYWORD_ONLY", d is not None) for k, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append(Param(a.kwarg.arg, "VAR_KEYWORD", True))
    if any(isinstance(d, ast.Name) and d.id == "classmethod" for d in fn.decorator_list):
        out = out[1:]  # inspect.signature of Class.method (bound) omits cls
    return out


def _sig_params(obj: Any) -> list[Param]:
    sig = inspect.signature(obj)
    return [Param(p.name, p.kind.name, p.default is not inspect.Parameter.empty or p.kind.name.startswith("VAR_"))
            for p in sig.parameters.values()]


# -- static reading ------------------------------------------------------------------------------
def _toplevel(body: list[ast.stmt], cond: bool = False) -> Iterator[tuple[ast.stmt, bool]]:
    """Statements run at import time (descending into if/try/with, not def/class); cond = guarded."""
    for st in body:
        yield st, cond
        if isinstance(st, ast.If):
            yield from _toplevel(st.body + st.orelse, True)
        elif isinstance(st, ast.Try):
            yield from _toplevel(st.body + st.orelse + st.finalbody, cond)
            for h in st.handlers:
                yield from _toplevel(h.body, True)
        elif isinstance(st, ast.With):
            yield from _toplevel(st.body, cond)


class SourceTree:
    """An unpacked tree holding `sglang/` (and optionally `sgl_kernel/`); parses files on demand."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._parsed: dict[str, ast.Module | None] = {}

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
            path = self.file(module)
            self._parsed[module] = ast.parse(path.read_text(encoding="utf-8"), str(path)) if path else None
        return self._parsed[module]

    def bindings(self, module: str, name: str) -> list[tuple[str, str, str, bool]]:
        """Module-level bindings of `name`: (kind def|class|assign|import, from_module, orig, guarded)."""
        tree, path = self.parse(module), self.file(module)
        if tree is None or path is None:
            return []
        out = []
        for st, cond in _toplevel(tree.body):
            if isinstance(st, (*_DEF, ast.ClassDef)) and st.name == name:
                out.append(("class" if isinstance(st, ast.ClassDef) else "def", module, name, cond))
            elif isinstance(st, (ast.Assign, ast.AnnAssign)):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    out.append(("assign", module, name, cond))
            elif isinstance(st, ast.ImportFrom):
                for alias in st.names:
                    if (alias.asname or alias.name) == name:
                        out.append(("import", self._absolute(module, path, st), alias.name, cond))
        return out

    @staticmethod
    def _absolute(module: str, path: Path, st: ast.ImportFrom) -> str:
        if not st.level:
            return st.module or ""
        pkg = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        base = pkg[: len(pkg) - (st.level - 1)]
        return ".".join(base + ([st.module] if st.module else []))


def _find_defs(tree: ast.Module, symbol: str) -> tuple[list[ast.FunctionDef | ast.AsyncFunctionDef], str]:
    owner, _, name = symbol.rpartition(".")
    body = tree.body
    if owner:
        classes = [st for st, _ in _toplevel(tree.body) if isinstance(st, ast.ClassDef) and st.name == owner]
        if not classes:
            return [], f"class {owner} not found"
        body = [st for c in classes for st in c.body]
    defs = [st for st, _ in _toplevel(body) if isinstance(st, _DEF) and st.name == name]
    if defs:
        return defs, ""
    where = f"class {owner} defines no {name} (inherited methods are not followed)" if owner else f"{name} not defined"
    return [], where


def _static_signature(src: SourceTree, target: str, expected: tuple[str, ...] | None) -> tuple[str, str]:
    module, symbol = target.split(":")
    tree = src.parse(module)
    if tree is None:
        return FAIL, f"module {module} not found in tree"
    defs, why = _find_defs(tree, symbol)
    if not defs:
        bound = src.bindings(module, symbol) if "." not in symbol else []
        return FAIL, (f"{symbol} is bound by {bound[0][0]} in {module}, not defined; signature not checkable"
                      if bound else f"{why} in {module}")
    shown = ""
    for fn in defs:  # every (e.g. platform-branch) definition must match
        params = _ast_params(fn)
        problems = compare_params(expected, params) if expected is not None else []
        if problems:
            return FAIL, f"{symbol}{format_params(params)} at line {fn.lineno}: " + "; ".join(problems)
        shown = f"{symbol}{format_params(params)}"
    return OK, shown


def _static_binding(src: SourceTree, module: str, name: str, goal: tuple[str, str], depth: int = 0) -> tuple[bool, str]:
    """Does `module.name` resolve, through module-level from-imports, to the symbol `goal`?"""
    binds = src.bindings(module, name)
    if not binds:
        return False, f"{module} does not bind {name} at module level"
    seen = []
    for kind, frm, orig, _ in binds:
        if kind == "def" and (module, name) == goal:
            return True, f"defined in {module}"
        if kind == "import":
            if (frm, orig) == goal:
                return True, f"{module}: from {frm} import {orig}"
            if depth < 4 and src.file(frm) is not None:
                ok, how = _static_binding(src, frm, orig, goal, depth + 1)
                if ok:
                    return True, f"{module}: from {frm} import {orig} -> {how}"
        seen.append(f"{kind} from {frm}" if kind == "import" else kind)
    return False, f"{module}.{name} is bound by {', '.join(seen)}; none reaches {goal[0]}:{goal[1]}"


def _static_patch_point(src: SourceTree, point: str, row: SeamAdapter) -> tuple[bool, str]:
    module, attr = point.split(":")
    if src.parse(module) is None:
        return False, f"patch point module {module} not found"
    if "." in attr:
        defs, why = _find_defs(src.parse(module), attr)  # type: ignore[arg-type]
        return (True, f"{point} defined") if defs else (False, f"patch point {point}: {why}")
    if "." in row.symbol:
        return False, f"patch point {point} names a function but the row's symbol {row.symbol} is a method"
    ok, how = _static_binding(src, module, attr, (row.module, row.symbol))
    return ok, how if ok else f"patch point {point}: {how}"


def _static_version(root: Path) -> str | None:
    for rel in ("sglang/_version.py", "sglang/version.py"):
        path = root / rel
        if not path.is_file():
            continue
        for st, _ in _toplevel(ast.parse(path.read_text(encoding="utf-8")).body):
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
                if any(isinstance(t, ast.Name) and t.id == "__version__" for t in st.targets):
                    return st.value.value
    for meta in sorted(root.glob("sglang-*.dist-info/METADATA")):
        for line in meta.read_text(encoding="utf-8").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return None


def _calls(fn: ast.AST, callee: str) -> bool:
    return any(isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == callee
               for n in ast.walk(fn))


def _constant(tree: ast.Module, name: str) -> object:
    for st, _ in _toplevel(tree.body):
        if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in st.targets):
            return st.value.value if isinstance(st.value, ast.Constant) else None
    return None


def _enum_members(cls: ast.ClassDef) -> set[str]:
    return {t.id for st in cls.body if isinstance(st, ast.Assign) for t in st.targets if isinstance(t, ast.Name)}


def static_check(source_dir: str | Path) -> CompatReport:
    """Check an unpacked SGLang tree (DIR holding sglang/, optionally sgl_kernel/) without importing it."""
    from cacheon_subnet.errors import UsageError

    root = Path(source_dir).resolve()
    if root.name == "sglang" and (root / "__init__.py").is_file():
        root = root.parent
    if not (root / "sglang" / "__init__.py").is_file():
        raise UsageError(f"{source_dir}: no sglang/ package here (pass the directory that contains sglang/)")
    src = SourceTree(root)
    rows: list[Row] = []
    for a in SEAM_ADAPTERS:
        absent = [p for p in a.requires if not src.has_package(p)]
        if absent:
            rows.append(Row("seam", a.binding, a.target, SKIP, f"requires {', '.join(absent)}: absent from {root}"))
            continue
        status, detail = _static_signature(src, a.target, a.params)
        if status == OK:
            for point in a.patch_points:
                ok, how = (True, "") if point == a.target else _static_patch_point(src, point, a)
                if not ok:
                    status, detail = FAIL, how
                    break
                detail += f"; {how}" if how else ""
        rows.append(Row("seam", a.binding, a.target, status, detail))
    rows += _static_plugin_rows(src)
    return CompatReport("static", str(root), PINNED, _static_version(root), tuple(rows))


def _static_plugin_rows(src: SourceTree) -> list[Row]:
    rows: list[Row] = []
    mod, const = PLUGIN_GROUP_SITE
    tree = src.parse(mod)
    value = _constant(tree, const) if tree else None
    rows.append(Row("plugin", "entry-point group", f"{mod}:{const}", OK if value == PLUGIN_GROUP else FAIL,
                    f"{const} = {value!r}" + ("" if value == PLUGIN_GROUP else f", expected {PLUGIN_GROUP!r}")))
    for target in HOOK_TARGETS:
        status, detail = _static_signature(src, target, HOOK_PARAMS.get(target))
        rows.append(Row("hook", target.split(":")[1], target, status, detail))
    mod, cls, members = HOOK_TYPE
    tree = src.parse(mod)
    found = [c for c, _ in _toplevel(tree.body) if isinstance(c, ast.ClassDef) and c.name == cls] if tree else []
    rows.append(_members_row(f"{mod}:{cls}", _enum_members(found[0]) if found else None, members))
    mod, fn, callee = PLUGINS_LOADED_BY
    tree = src.parse(mod)
    defs, why = _find_defs(tree, fn) if tree else ([], f"module {mod} not found")
    rows.append(_calls_row(f"{mod}:{fn}", callee, [_calls(d, callee) for d in defs], why))
    return rows


def _members_row(target: str, have: set[str] | None, need: tuple[str, ...]) -> Row:
    if have is None:
        return Row("hook", target.split(":")[1], target, FAIL, "class not found")
    missing = [m for m in need if m not in have]
    return Row("hook", target.split(":")[1], target, FAIL if missing else OK,
               f"missing member(s) {', '.join(missing)}" if missing else f"members {', '.join(sorted(have))}")


def _calls_row(target: str, callee: str, calls: list[bool], why: str) -> Row:
    label = f"{target.split(':')[1]} calls {callee}"
    if not calls:
        return Row("plugin", label, target, FAIL, why)
    return Row("plugin", label, target, OK if all(calls) else FAIL,
               "plugins load in every scheduler process" if all(calls) else f"no {callee}() call any more")


# -- runtime -------------------------------------------------------------------------------------
def _import(name: str) -> tuple[Any, str, str]:
    """(module, status, why): a dependency missing on this host SKIPs; a moved sglang module FAILs."""
    try:
        return importlib.import_module(name), OK, ""
    except ModuleNotFoundError as e:
        top = (e.name or name).split(".")[0]
        if importlib.util.find_spec(top) is None:
            return None, SKIP, f"not assessed: dependency {e.name!r} not importable on this host"
        return None, FAIL, f"import {name} failed: {e}"
    except Exception as e:  # noqa: BLE001 - any import-time failure is the finding
        return None, FAIL, f"import {name} failed: {type(e).__name__}: {str(e)[:160]}"


def _guarded_only(module: Any, name: str) -> bool:
    """True when the module's source binds `name` only under an if/except (a platform branch)."""
    path = Path(getattr(module, "__file__", "") or "")
    binds = SourceTree(path.parent).bindings(path.stem, name) if path.suffix == ".py" else []
    return bool(binds) and all(guarded for *_, guarded in binds)


def _resolve(target: str) -> tuple[Any, str, str]:
    module, symbol = target.split(":")
    obj, status, why = _import(module)
    if obj is None:
        return None, status, why
    for part in symbol.split("."):
        if not hasattr(obj, part):
            if "." not in symbol and _guarded_only(obj, symbol):
                return None, SKIP, f"not assessed: {module} binds {symbol} only under a condition not taken here"
            return None, FAIL, f"{target}: {part} not found"
        obj = getattr(obj, part)
    return obj, OK, ""


def _runtime_signature(target: str, expected: tuple[str, ...] | None) -> tuple[str, str]:
    obj, status, why = _resolve(target)
    if obj is None:
        return status, why
    try:
        params = _sig_params(obj)
    except (TypeError, ValueError) as e:
        return FAIL, f"{target}: no inspectable signature ({e})"
    problems = compare_params(expected, params) if expected is not None else []
    symbol = target.split(":")[1]
    return (FAIL, f"{symbol}{format_params(params)}: " + "; ".join(problems)) if problems \
        else (OK, f"{symbol}{format_params(params)}")


def runtime_check() -> CompatReport:
    """Import the installed SGLang and inspect every row (run inside the pinned engine image)."""
    sglang, _, why = _import("sglang")
    if sglang is None:
        rows = [Row("seam", a.binding, a.target, SKIP, f"sglang not importable: {why}") for a in SEAM_ADAPTERS]
        return CompatReport("runtime", "(not installed)", PINNED, None, tuple(rows))
    found = getattr(sglang, "__version__", None)
    rows: list[Row] = []
    for a in SEAM_ADAPTERS:
        blocked = [f"{p} ({w})" for p in a.requires for _, s, w in [_import(p)] if s != OK]
        if blocked:
            rows.append(Row("seam", a.binding, a.target, SKIP, f"requires {', '.join(blocked)}"))
            continue
        status, detail = _runtime_signature(a.target, a.params)
        defining = _resolve(a.target)[0] if status == OK else None
        for point in a.patch_points if status == OK else ():
            obj, pstatus, pwhy = _resolve(point)
            if obj is None or ("." not in point.split(":")[1] and obj is not defining):
                status, detail = (pstatus, pwhy) if obj is None else (FAIL, f"{point} is not {a.target}")
                break
        rows.append(Row("seam", a.binding, a.target, status, detail))
    mod, const = PLUGIN_GROUP_SITE
    plugins, status, why = _import(mod)
    value = getattr(plugins, const, None)
    rows.append(Row("plugin", "entry-point group", f"{mod}:{const}", status if plugins is None else
                    (OK if value == PLUGIN_GROUP else FAIL), why or f"{const} = {value!r}"))
    for target in HOOK_TARGETS:
        status, detail = _runtime_signature(target, HOOK_PARAMS.get(target))
        rows.append(Row("hook", target.split(":")[1], target, status, detail))
    mod, cls, members = HOOK_TYPE
    enum_cls, status, why = _resolve(f"{mod}:{cls}")
    rows.append(_members_row(f"{mod}:{cls}", set(getattr(enum_cls, "__members__", {})), members)
                if enum_cls is not None else Row("hook", cls, f"{mod}:{cls}", status, why))
    mod, fn, callee = PLUGINS_LOADED_BY
    func, status, why = _resolve(f"{mod}:{fn}")
    if func is None:
        rows.append(Row("plugin", f"{fn} calls {callee}", f"{mod}:{fn}", status, why))
    else:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
        rows.append(_calls_row(f"{mod}:{fn}", callee, [_calls(tree, callee)], ""))
    return CompatReport("runtime", str(Path(sglang.__file__).parent), PINNED, found, tuple(rows))


# -- output --------------------------------------------------------------------------------------
def render(report: CompatReport) -> str:
    """Every row with its reason, then the version line and a verdict naming the skips."""
    lines = [f"SGLang compat ({report.mode}: {report.where})"]
    for r in report.rows:
        lines.append(f"  {r.status:<4}  {r.kind:<6} {r.name:<22} {r.target}")
        if r.detail:
            lines.append(f"{'':14}{r.detail}")
    verdict = "matches pin" if report.version_ok else "DIFFERS from pin"
    lines.append(f"version: pinned {report.pinned}, found {report.found or 'unknown'} -- {verdict}")
    skipped = f" ({len(report.skipped)} skipped: {', '.join(r.name for r in report.skipped)})" if report.skipped else ""
    if report.exit_code == EXIT_VERSION:
        lines.append(f"result: VERSION DIFFERS (exit 2); {len(report.failed)} row(s) FAIL{skipped}")
    elif report.exit_code == EXIT_BROKEN:
        lines.append(f"result: BROKEN: {', '.join(r.name for r in report.failed)} (exit 1){skipped}")
    else:
        lines.append(f"result: ALL SEAMS INTACT{skipped}")
    return "\n".join(lines)
