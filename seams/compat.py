"""SGLang compatibility canary, driven by seams/table.py (SEAM_ADAPTERS, PLUGIN_GROUP, HOOK_TARGETS).

Why two modes: `static_check(DIR)` reads an unpacked SGLang tree with `ast` (nothing imported,
see compat_source.py), so any host -- CPU CI, a reviewer holding a candidate wheel -- can check a
release before installing it; `runtime_check()` inspects what the installed runtime really binds,
the evidence that counts inside the pinned engine image. Per table row both check that the
defining symbol exists with the expected parameter names in order (defaults may change; renamed,
missing, reordered or new required parameters, or an expected name turned *args/**kwargs or
positional-only, are breaks) and that every patch point resolves (statically: defined there, or
bound by a module-level `from x import name` chain reaching the defining module; at runtime: the
same object). Rows whose `requires` packages are absent / not importable are SKIP: not evidence.
Beyond the rows: the plugin entry-point group, the HookRegistry API seams/hooks.py and
seams/plugin.py call (register/apply_hooks signatures, HookType members, Scheduler.__init__'s
leading parameters) and the calls that make plugins load and patches propagate.

Exit codes (`cacheon compat`, scripts/check_sglang.py):
  0  found version == pin and every assessed row OK (SKIP rows are listed, never hidden);
  1  version == pin but some row FAILs (a seam, the plugin group or the hook API broke);
  2  version differs from the pin, or is unknown / sglang absent. 2 wins over 1: another
     runtime is another evaluation identity whether or not its seams still line up.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import textwrap
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from seams.compat_source import Param, SourceTree, ast_params, calls, class_members, constant, find_defs
from seams.entry import MISSING_NOTE, PLUGIN_NAME, PLUGIN_VALUE, entry_point_problem
from seams.entry import ROW as ENTRY_ROW
from seams.table import HOOK_TARGETS, PINNED, PLUGIN_GROUP, SEAM_ADAPTERS, SeamAdapter

OK, FAIL, SKIP = "OK", "FAIL", "SKIP"
EXIT_INTACT, EXIT_BROKEN, EXIT_VERSION = 0, 1, 2
PLUGIN_GROUP_SITE = ("sglang.srt.plugins", "GENERAL_PLUGINS_GROUP")
# target -> (expected params, prefix_only). seams/hooks.py calls register(target, hook, AROUND) then
# apply_hooks(); seams/plugin.py's AROUND hook reads tp_rank at args[4] or by keyword.
API_PARAMS: Mapping[str, tuple[tuple[str, ...], bool]] = {
    "sglang.srt.plugins.hook_registry:HookRegistry.register": (("target", "hook", "hook_type", "source"), False),
    "sglang.srt.plugins.hook_registry:HookRegistry.apply_hooks": ((), False),
    "sglang.srt.managers.scheduler:Scheduler.__init__": (("self", "server_args", "port_args", "gpu_id", "tp_rank"), True),
}
HOOK_TYPE = ("sglang.srt.plugins.hook_registry", "HookType", ("AROUND", "REPLACE"))
CALLS: tuple[tuple[str, str, str], ...] = (  # (function, callee, why it matters)
    ("sglang.srt.managers.scheduler:run_scheduler_process", "load_plugins", "plugins load in every scheduler"),
    ("sglang.srt.plugins:load_plugins", "apply_hooks", "registered hooks get applied"),
    (
        "sglang.srt.plugins.hook_registry:HookRegistry._apply_target",
        "_propagate_patch",
        "patches reach by-value `from x import f` copies",
    ),
    (
        "sglang.srt.model_executor.cuda_graph_runner:CudaGraphRunner.replay",
        "wrap",
        "the arena's forward clock times each decode graph replay through ModelRunner.device_timer",
    ),
    (
        "sglang.srt.model_executor.model_runner:ModelRunner.forward_extend",
        "wrap",
        "the arena's forward clock times eager prefill through ModelRunner.device_timer",
    ),
)


@dataclass(frozen=True)
class Row:
    kind: str  # "seam" | "plugin" | "hook"
    name: str  # binding id, or a short label
    target: str  # "module:symbol" checked
    status: str  # OK | FAIL | SKIP
    detail: str


NOT_INSTALLED = "(sglang not installed)"


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
    def installed(self) -> bool:
        """False only for a runtime check on a host where sglang does not import at all."""
        return not (self.mode == "runtime" and self.where == NOT_INSTALLED)

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
        return {
            "mode": self.mode,
            "where": self.where,
            "pinned": self.pinned,
            "found": self.found,
            "version_ok": self.version_ok,
            "installed": self.installed,
            "exit_code": self.exit_code,
            "rows": [asdict(r) for r in self.rows],
        }


# -- signatures ----------------------------------------------------------------------------------
def compare_params(expected: tuple[str, ...], found: list[Param], prefix: bool = False) -> list[str]:
    """Differences that break callers or adapters; [] = compatible (defaults may differ)."""
    named = [p for p in found if p.kind not in ("VAR_POSITIONAL", "VAR_KEYWORD")]
    names = [p.name for p in named]
    problems: list[str] = []
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
    extra = [p.name for p in named[len(expected) :] if not p.has_default and p.name not in expected]
    if extra and not prefix:
        problems.append(f"new required parameter(s) {', '.join(extra)}")
    problems += [
        f"parameter {p.name!r} is now {p.kind}"
        for p in found
        if p.name in expected and p.kind in ("VAR_POSITIONAL", "VAR_KEYWORD", "POSITIONAL_ONLY")
    ]
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


def _judge(
    symbol: str, params: list[Param], expect: tuple[tuple[str, ...], bool] | None, where: str = ""
) -> tuple[str, str]:
    problems = compare_params(expect[0], params, expect[1]) if expect is not None else []
    shown = f"{symbol}{format_params(params)}"
    return (FAIL, f"{shown}{where}: " + "; ".join(problems)) if problems else (OK, shown)


# -- static --------------------------------------------------------------------------------------
def _static_signature(src: SourceTree, target: str, expect: tuple[tuple[str, ...], bool] | None) -> tuple[str, str]:
    module, symbol = target.split(":")
    tree = src.parse(module)
    if tree is None:
        return FAIL, src.missing(module)
    defs, why = find_defs(tree, symbol)
    if not defs:
        bound = src.bindings(module, symbol) if "." not in symbol else []
        return FAIL, (
            f"{symbol} is bound by {bound[0].kind} in {module}, not defined: signature not checkable"
            if bound
            else f"{why} in {module}"
        )
    verdict = (OK, "")
    for fn in defs:  # every (e.g. platform-branch) definition must match
        verdict = _judge(symbol, ast_params(fn), expect, f" (line {fn.lineno})")
        if verdict[0] == FAIL:
            break
    return verdict


def static_patch_point(src: SourceTree, point: str, row: SeamAdapter) -> tuple[bool, str]:
    """A patch point resolves statically: the method exists, or the name reaches the row's symbol."""
    module, attr = point.split(":")
    tree = src.parse(module)
    if tree is None:
        return False, f"patch point {point}: {src.missing(module)}"
    if "." in attr:
        defs, why = find_defs(tree, attr)
        return (True, "") if defs else (False, f"patch point {point}: {why}")
    if "." in row.symbol:
        return False, f"patch point {point} names a function but the row's symbol {row.symbol} is a method"
    ok, how = src.resolves_to(module, attr, (row.module, row.symbol))
    return ok, ("" if point == row.target else how) if ok else f"patch point {point}: {how}"


def static_check(source_dir: str | Path) -> CompatReport:
    """Check an unpacked SGLang tree (DIR holding sglang/, optionally sgl_kernel/) without importing it."""
    from cacheon_subnet.errors import UsageError

    root = Path(source_dir).absolute()
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
        status, detail = _static_signature(src, a.target, (a.params, False))
        for point in a.patch_points if status == OK else ():
            ok, how = static_patch_point(src, point, a)
            status, detail = (status, f"{detail}; {how}" if how else detail) if ok else (FAIL, how)
            if not ok:
                break
        rows.append(Row("seam", a.binding, a.target, status, detail))
    mod, const = PLUGIN_GROUP_SITE
    tree = src.parse(mod)
    rows.append(_group_row(constant(tree, const) if tree else None))
    for target in _api_targets():
        rows.append(Row("hook", target.split(":")[1], target, *_static_signature(src, target, API_PARAMS.get(target))))
    mod, cls, _ = HOOK_TYPE
    tree = src.parse(mod)
    rows.append(_members_row(class_members(tree, cls) if tree else None))
    for target, callee, why in CALLS:
        mod, fn = target.split(":")
        tree = src.parse(mod)
        defs, missing = find_defs(tree, fn) if tree else ([], src.missing(mod))
        rows.append(_calls_row(target, callee, why, [calls(d, callee) for d in defs], missing))
    return CompatReport("static", str(root), PINNED, src.version(), tuple(rows))


# -- rows shared by both modes -------------------------------------------------------------------
def _api_targets() -> list[str]:
    return list(HOOK_TARGETS) + [t for t in API_PARAMS if t not in HOOK_TARGETS]


def _group_row(value: object) -> Row:
    mod, const = PLUGIN_GROUP_SITE
    ok = value == PLUGIN_GROUP
    return Row(
        "plugin",
        "entry-point group",
        f"{mod}:{const}",
        OK if ok else FAIL,
        f"{const} = {value!r}" + ("" if ok else f", expected {PLUGIN_GROUP!r}"),
    )


def _members_row(have: set[str] | None) -> Row:
    mod, cls, need = HOOK_TYPE
    if have is None:
        return Row("hook", cls, f"{mod}:{cls}", FAIL, "class not found")
    missing = [m for m in need if m not in have]
    return Row(
        "hook",
        cls,
        f"{mod}:{cls}",
        FAIL if missing else OK,
        f"missing member(s) {', '.join(missing)}" if missing else f"members {', '.join(sorted(have))}",
    )


def _calls_row(target: str, callee: str, why: str, found: list[bool], missing: str, status: str = FAIL) -> Row:
    label = f"{target.split(':')[1].split('.')[-1]} -> {callee}"
    if not found:
        return Row("plugin", label, target, status, missing)
    return Row("plugin", label, target, OK if all(found) else FAIL, why if all(found) else f"no {callee}() call any more")


# -- runtime -------------------------------------------------------------------------------------
def _import(name: str) -> tuple[Any, str, str]:
    """(module, status, why): a dependency missing on this host SKIPs; a moved sglang module FAILs."""
    try:
        return importlib.import_module(name), OK, ""
    except ModuleNotFoundError as e:
        top = (e.name or name).split(".")[0]
        try:
            present = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            present = False
        if not present:
            return None, SKIP, f"not assessed: {e.name!r} is not importable on this host"
        return None, FAIL, f"import {name} failed: {e}"
    except Exception as e:  # noqa: BLE001 - any other import-time failure is itself the finding
        return None, FAIL, f"import {name} failed: {type(e).__name__}: {str(e)[:160]}"


def _guarded_only(module: Any, name: str) -> bool:
    """True when the module's source binds `name` only under an if/except (a platform branch)."""
    path = Path(getattr(module, "__file__", "") or "")
    binds = SourceTree(path.parent).bindings(path.stem, name) if path.suffix == ".py" else []
    return bool(binds) and all(b.guarded for b in binds)


def _resolve(target: str) -> tuple[Any, str, str]:
    module, symbol = target.split(":")
    obj, status, why = _import(module)
    if obj is None:
        return None, status, why
    for part in symbol.split("."):
        if not hasattr(obj, part):
            if "." not in symbol and _guarded_only(obj, symbol):
                return None, SKIP, f"not assessed: {module} binds {symbol} only under a branch not taken here"
            return None, FAIL, f"{target}: {part} not found"
        obj = getattr(obj, part)
    return obj, OK, ""


def op_schema_params(obj: Any) -> list[Param] | None:
    """Parameters of a torch custom op from its schema, or None for anything else. SGLang's
    `register_custom_op` binds the module attribute to `torch.ops.sglang.<name>` (e.g.
    flashinfer_allreduce_residual_rmsnorm), whose Python signature is only (*args, **kwargs);
    the schema keeps the names, order, defaults and keyword-only markers."""
    schema = getattr(getattr(obj, "default", None), "_schema", None) or getattr(obj, "_schema", None)
    if schema is None or not hasattr(schema, "arguments"):
        return None
    return [
        Param(a.name, "KEYWORD_ONLY" if a.kwarg_only else "POSITIONAL_OR_KEYWORD", bool(a.has_default_value()))
        for a in schema.arguments
    ]


def _runtime_signature(target: str, expect: tuple[tuple[str, ...], bool] | None) -> tuple[str, str]:
    obj, status, why = _resolve(target)
    if obj is None:
        return status, why
    params = op_schema_params(obj)
    if params is None:
        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError) as e:
            return FAIL, f"{target}: no inspectable signature ({e})"
        params = [
            Param(p.name, p.kind.name, p.default is not p.empty or p.kind.name.startswith("VAR_"))
            for p in sig.parameters.values()
        ]
    return _judge(target.split(":")[1], params, expect)


def _runtime_seam(a: SeamAdapter) -> Row:
    blocked = [f"{p} ({w})" for p in a.requires for _, s, w in [_import(p)] if s != OK]
    if blocked:
        return Row("seam", a.binding, a.target, SKIP, f"requires {', '.join(blocked)}")
    status, detail = _runtime_signature(a.target, (a.params, False))
    defining = _resolve(a.target)[0] if status == OK else None
    for point in a.patch_points if status == OK else ():
        obj, pstatus, why = _resolve(point)
        if obj is None:
            return Row("seam", a.binding, a.target, pstatus, f"patch point {point}: {why}")
        if "." not in point.split(":")[1] and obj is not defining:
            return Row("seam", a.binding, a.target, FAIL, f"patch point {point} is not the object {a.target}")
    return Row("seam", a.binding, a.target, status, detail)


def runtime_check() -> CompatReport:
    """Import the installed SGLang and inspect every row (meant for the pinned engine image)."""
    sglang, _, why = _import("sglang")
    if sglang is None:
        rows = [Row("seam", a.binding, a.target, SKIP, f"sglang not importable: {why}") for a in SEAM_ADAPTERS]
        return CompatReport("runtime", NOT_INSTALLED, PINNED, None, tuple(rows))
    rows = [_runtime_seam(a) for a in SEAM_ADAPTERS]
    problem = entry_point_problem()  # the install's half: SGLang loads the seam only through it
    installed = any(ep.name == PLUGIN_NAME for ep in entry_points(group=PLUGIN_GROUP))
    rows.append(
        Row(
            "plugin",
            ENTRY_ROW,
            f"{PLUGIN_GROUP}:{PLUGIN_NAME}",
            FAIL if problem else OK,
            problem or (f"{PLUGIN_NAME} = {PLUGIN_VALUE}" if installed else MISSING_NOTE),
        )
    )
    mod, const = PLUGIN_GROUP_SITE
    plugins, status, why = _import(mod)
    rows.append(
        _group_row(getattr(plugins, const, None))
        if plugins is not None
        else Row("plugin", "entry-point group", f"{mod}:{const}", status, why)
    )
    for target in _api_targets():
        rows.append(Row("hook", target.split(":")[1], target, *_runtime_signature(target, API_PARAMS.get(target))))
    mod, cls, _ = HOOK_TYPE
    enum_cls, status, why = _resolve(f"{mod}:{cls}")
    rows.append(
        _members_row(set(getattr(enum_cls, "__members__", {})))
        if enum_cls is not None
        else Row("hook", cls, f"{mod}:{cls}", status, why)
    )
    for target, callee, reason in CALLS:
        func, status, why = _resolve(target)
        if func is None:
            rows.append(_calls_row(target, callee, reason, [], why, status))
            continue
        func = inspect.unwrap(getattr(func, "__func__", func))
        rows.append(
            _calls_row(target, callee, reason, [calls(ast.parse(textwrap.dedent(inspect.getsource(func))), callee)], "")
        )
    found = getattr(sglang, "__version__", None)
    return CompatReport("runtime", str(Path(sglang.__file__).parent), PINNED, found, tuple(rows))


# -- output --------------------------------------------------------------------------------------
def render(report: CompatReport) -> str:
    """Every row with its reason, the version line, and a verdict that names the skips."""
    lines = [f"SGLang compat ({report.mode}: {report.where})"]
    width = max((len(r.name) for r in report.rows), default=0)
    for r in report.rows:
        lines.append(f"  {r.status:<4}  {r.kind:<6} {r.name:<{width}}  {r.target}")
        if r.detail:
            lines.append(f"{'':14}{r.detail}")
    skipped = f" ({len(report.skipped)} skipped: {', '.join(r.name for r in report.skipped)})" if report.skipped else ""
    if not report.installed:
        lines.append(f"version: pinned {report.pinned}, SGLang not installed here")
        lines.append(
            f"result: SGLang NOT INSTALLED: nothing assessed (exit {EXIT_VERSION}); install the pin "
            f"(pip install -e '.[gpu]') or check a source tree with --source DIR"
        )
        return "\n".join(lines)
    verdict = "matches pin" if report.version_ok else "DIFFERS from pin"
    lines.append(f"version: pinned {report.pinned}, found {report.found or 'unknown'} -- {verdict}")
    if report.exit_code == EXIT_VERSION:
        lines.append(f"result: VERSION DIFFERS from pin {report.pinned} (exit 2); {len(report.failed)} row(s) FAIL{skipped}")
    elif report.exit_code == EXIT_BROKEN:
        lines.append(f"result: BROKEN: {', '.join(r.name for r in report.failed)} (exit 1){skipped}")
    else:
        lines.append(f"result: ALL SEAMS INTACT{skipped}")
    return "\n".join(lines)
