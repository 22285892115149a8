"""`cacheon pin check --wheel PATH_OR_URL`: what a newer SGLang wheel breaks, read without installing it.

Why a wheel and not an install: a candidate pin must be judged on any host before its CUDA-only
dependencies exist. The wheel is a zip; its Python sources go into a private scratch dir and the
static compat canary (seams/compat.py, driven by SEAM_ADAPTERS) reads them with `ast`. On top of
the canary's rows, ASSUMPTIONS lists what the adapters and stock wrappers take for granted beyond
a signature (a base class that binds forward_cuda at construction, where a stock kernel is bound
from, an accessor that must not raise), and every `from sglang... import name` in seams/stock and
seams/adapters is checked too, so a new wrapper import is covered without a table edit. Each
break names the module, the symbol, what changed, and which cacheon file relies on it.

Exit codes: 0 nothing breaks; 1 at least one row breaks (the usual result for a newer SGLang:
that is the report, not a failure of the command); 2 usage (no wheel there, not an SGLang wheel).
"""

from __future__ import annotations

import ast
import re
import shutil
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from cacheon_subnet.errors import UsageError
from seams.compat import FAIL, OK, SKIP, CompatReport, render, static_check
from seams.compat_source import SourceTree, find_defs, toplevel

HERE = Path(__file__).resolve().parent
MAX_MEMBERS = 50_000
MAX_SOURCE_BYTES = 256 << 20
MAX_DOWNLOAD = 512 << 20


class Kind(Enum):
    BINDS = "binds"  # module binds the name (def, class, assignment or import)
    FROM = "from"  # module binds the name imported from a given module's symbol
    BASES = "bases"  # class derives from exactly these bases
    NO_RAISE = "no-raise"  # function body is more than an unconditional raise


@dataclass(frozen=True)
class Assumption:
    kind: Kind
    module: str
    symbol: str
    expect: tuple[str, ...]  # FROM: (module, name); BASES: base names; else ()
    why: str
    used_by: str  # the cacheon file that relies on it


ASSUMPTIONS: tuple[Assumption, ...] = (
    Assumption(
        Kind.BASES,
        "sglang.srt.layers.layernorm",
        "RMSNorm",
        ("MultiPlatformOp",),
        "forward_cuda is bound at construction, so the norm adapter's patch on it is the kernel the layer runs; "
        "a base that picks its kernel lazily can route around the patch silently",
        "seams/adapters/norm.py",
    ),
    Assumption(
        Kind.BASES,
        "sglang.srt.layers.activation",
        "SiluAndMul",
        ("MultiPlatformOp",),
        "as for RMSNorm: the activation adapter patches forward_cuda",
        "seams/adapters/activation.py",
    ),
    Assumption(
        Kind.FROM,
        "sglang.srt.layers.layernorm",
        "_jit_fused_add_rmsnorm",
        ("sglang.jit_kernel.norm", "fused_add_rmsnorm"),
        "the JIT fused add+RMSNorm that RMSNorm.forward_cuda reaches for supported hidden sizes: the stock "
        "kernel a norm.fused_add_rmsnorm crown is measured against",
        "seams/stock/norm.py",
    ),
    Assumption(
        Kind.NO_RAISE,
        "sglang.srt.server_args",
        "get_global_server_args",
        (),
        "the stock fused_experts wrapper reads the server args through it (enable_fused_moe_sum_all_reduce)",
        "seams/stock/moe.py",
    ),
    Assumption(
        Kind.BINDS,
        "sglang.srt.server_args",
        "set_global_server_args_for_scheduler",
        (),
        "the stock fused_experts wrapper installs default server args outside an engine",
        "seams/stock/moe.py",
    ),
    Assumption(
        Kind.BINDS,
        "sglang.srt.layers.layernorm",
        "is_batch_invariant_mode_enabled",
        (),
        "the norm adapter routes to stock in batch-invariant mode (looked up by name; absent reads as off)",
        "seams/adapters/norm.py",
    ),
)


def scanned_imports(root: Path = HERE) -> tuple[Assumption, ...]:
    """Every `from sglang... import name` in seams/stock and seams/adapters, as a BINDS row."""
    out = []
    for sub in ("stock", "adapters"):
        for path in sorted((root / sub).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("sglang."):
                    for a in node.names:
                        rel = f"seams/{sub}/{path.name}"
                        out.append(Assumption(Kind.BINDS, node.module or "", a.name, (), f"imported by {rel}", rel))
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Finding:
    status: str  # OK | FAIL | SKIP
    location: str  # module:symbol
    what: str  # the assumption, or what changed
    used_by: str


def _class(src: SourceTree, module: str, name: str) -> ast.ClassDef | None:
    tree = src.parse(module)
    found = [st for st, _ in toplevel(tree.body) if isinstance(st, ast.ClassDef) and st.name == name] if tree else []
    return found[-1] if found else None


def defined_in(root: Path, name: str, limit: int = 3) -> tuple[str, ...]:
    """Modules of the tree that define `name` at top level: where a vanished symbol went."""
    pat = re.compile(rf"^(?:async def|def|class) {re.escape(name)}\b", re.M)
    found = []
    for path in sorted(root.rglob("*.py")):
        if pat.search(path.read_text(encoding="utf-8", errors="replace")):
            rel = path.relative_to(root).with_suffix("").parts
            found.append(".".join(rel[:-1] if rel[-1] == "__init__" else rel))
            if len(found) >= limit:
                break
    return tuple(found)


def _moved(src: SourceTree, symbol: str) -> str:
    name = symbol.split(".")[0]
    where = defined_in(src.root, name)
    return f"; {name} is now defined in {', '.join(where)}" if where else f"; {name} is defined nowhere in the wheel"


def check(src: SourceTree, a: Assumption) -> Finding:
    loc = f"{a.module}:{a.symbol}"
    if a.kind is Kind.BINDS and src.file(f"{a.module}.{a.symbol}") is not None:
        return Finding(OK, loc, f"submodule; {a.why}", a.used_by)  # `from sglang.srt import server_args`
    if src.parse(a.module) is None:
        return Finding(FAIL, loc, f"{src.missing(a.module)}{_moved(src, a.symbol)} ({a.why})", a.used_by)
    if a.kind is Kind.BINDS:
        ok = bool(src.bindings(a.module, a.symbol))
        if ok:
            return Finding(OK, loc, a.why, a.used_by)
        return Finding(FAIL, loc, f"{a.module} no longer binds {a.symbol}{_moved(src, a.symbol)} ({a.why})", a.used_by)
    if a.kind is Kind.FROM:
        binds = src.bindings(a.module, a.symbol)
        if any(b.kind == "import" and (b.source, b.orig) == a.expect for b in binds):
            return Finding(OK, loc, f"from {a.expect[0]} import {a.expect[1]}", a.used_by)
        now = ", ".join(f"from {b.source} import {b.orig}" if b.kind == "import" else b.kind for b in binds) or "nothing"
        return Finding(FAIL, loc, f"was from {a.expect[0]} import {a.expect[1]}, now bound by {now} ({a.why})", a.used_by)
    if a.kind is Kind.BASES:
        cls = _class(src, a.module, a.symbol)
        if cls is None:
            return Finding(FAIL, loc, f"class {a.symbol} not found ({a.why})", a.used_by)
        bases = tuple(ast.unparse(b) for b in cls.bases)
        if bases == a.expect:
            return Finding(OK, loc, f"class {a.symbol}({', '.join(bases)})", a.used_by)
        return Finding(
            FAIL, loc, f"base class was {', '.join(a.expect)}, now {', '.join(bases) or 'none'} ({a.why})", a.used_by
        )
    tree = src.parse(a.module)
    defs, why = find_defs(tree, a.symbol) if tree else ([], "")
    if not defs:
        return Finding(FAIL, loc, f"{why} ({a.why})", a.used_by)
    body = [st for st in defs[-1].body if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant))]
    if len(body) == 1 and isinstance(body[0], ast.Raise):
        msg = ast.unparse(body[0].exc)[:160] if body[0].exc is not None else "raise"
        return Finding(FAIL, loc, f"now raises unconditionally: {msg} ({a.why})", a.used_by)
    return Finding(OK, loc, a.why, a.used_by)


def canary_hints(src: SourceTree, canary: CompatReport) -> tuple[Finding, ...]:
    """For each seam-table row that FAILs because its module or symbol vanished: where it went."""
    out = []
    for r in canary.failed:
        if "not found" in r.detail:
            symbol = r.target.split(":", 1)[1].split(".")[0]
            out.append(Finding(FAIL, r.target, f"{r.name}: {r.detail}{_moved(src, symbol)}", "seams/table.py"))
    return tuple(out)


@dataclass(frozen=True)
class PinReport:
    wheel: str
    canary: CompatReport
    findings: tuple[Finding, ...]
    hints: tuple[Finding, ...] = ()  # where the canary's vanished symbols went (not counted twice)

    @property
    def breaks(self) -> int:
        return len(self.canary.failed) + sum(f.status == FAIL for f in self.findings)

    @property
    def exit_code(self) -> int:
        return 1 if self.breaks else 0

    def render(self) -> str:
        lines = [
            f"cacheon pin check: {self.wheel}",
            f"sglang {self.canary.found or '(unknown)'} against the pin {self.canary.pinned}",
            "",
        ]
        lines += ["== seam table (static compat canary) ==", render(self.canary)]
        if self.hints:
            lines += ["", "== where the seam table's vanished symbols went =="]
            lines += [f"  {h.location}\n        {h.what}" for h in self.hints]
        lines += ["", "== adapter and stock-wrapper assumptions =="]
        for f in self.findings:
            lines.append(f"  {f.status:<5} {f.location}  [{f.used_by}]")
            lines.append(f"        {f.what}")
        lines += [
            "",
            f"result: {self.breaks} break(s) ({len(self.canary.failed)} seam-table row(s), "
            f"{sum(f.status == FAIL for f in self.findings)} assumption(s)); exit {self.exit_code}",
        ]
        return "\n".join(lines)


def _members(z: zipfile.ZipFile, where: str) -> Iterator[zipfile.ZipInfo]:
    infos = z.infolist()
    if len(infos) > MAX_MEMBERS:
        raise UsageError(f"{where}: {len(infos)} members, more than {MAX_MEMBERS}")
    total = 0
    for i in infos:
        n = i.filename
        top = n.split("/")[0]
        wanted = (top in ("sglang", "sgl_kernel") and n.endswith(".py")) or (
            top.endswith(".dist-info") and n.endswith("/METADATA")
        )
        if not wanted:
            continue
        if n.startswith("/") or ".." in n.split("/"):
            raise UsageError(f"{where}: member {n!r} is not a relative path")
        total += i.file_size
        if total > MAX_SOURCE_BYTES:
            raise UsageError(f"{where}: more than {MAX_SOURCE_BYTES >> 20} MiB of sources")
        yield i


def unpack_sources(wheel: Path, dest: Path) -> None:
    """The wheel's sglang/ (and sgl_kernel/) Python files and its METADATA, nothing else, into `dest`."""
    try:
        z = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as e:
        raise UsageError(f"{wheel}: not a readable wheel ({e})") from None
    with z:
        for i in _members(z, str(wheel)):
            out = dest.joinpath(*i.filename.split("/"))
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(i))
    if not (dest / "sglang" / "__init__.py").is_file():
        raise UsageError(f"{wheel}: no sglang/ package inside (is it an SGLang wheel?)")


def _download(url: str, dest: Path) -> Path:
    if not url.startswith("https://"):
        raise UsageError(f"{url}: only https:// URLs are fetched")
    path = dest / url.rsplit("/", 1)[-1].split("?")[0]
    with urllib.request.urlopen(url, timeout=60) as r, open(path, "wb") as f:  # noqa: S310 - https only
        n = 0
        while chunk := r.read(1 << 20):
            n += len(chunk)
            if n > MAX_DOWNLOAD:
                raise UsageError(f"{url}: larger than {MAX_DOWNLOAD >> 20} MiB")
            f.write(chunk)
    return path


def pin_check(wheel: str) -> PinReport:
    tmp = Path(tempfile.mkdtemp(prefix="cacheon-pincheck-"))
    try:
        path = _download(wheel, tmp) if "://" in wheel else Path(wheel)
        if not path.is_file():
            raise UsageError(f"{wheel}: no such wheel")
        unpack_sources(path, tmp / "src")
        canary = static_check(tmp / "src")
        src = SourceTree(tmp / "src")
        findings = tuple(check(src, a) for a in ASSUMPTIONS + scanned_imports())
        return PinReport(path.name, canary, findings, canary_hints(src, canary))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


__all__ = ["ASSUMPTIONS", "FAIL", "OK", "SKIP", "Assumption", "Finding", "Kind", "PinReport", "check", "pin_check"]
