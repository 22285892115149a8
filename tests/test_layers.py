"""The house's layers: every import points down (docs/architecture.md, "Layers").

Every module of the product (cacheon_subnet/, seams/, arena/, neurons/, scripts/) belongs to one
layer; it may import its own layer or a lower one, never a higher one. "Import" is read from the
source with `ast`, wherever it stands: at the top, inside a function, under `if TYPE_CHECKING`, a
literal handed to `importlib.import_module` / `__import__` / `find_spec`, and a module launched as
`python -m NAME`. A circle of files that import each other is refused at any layer. A module
that no layer claims fails too, so a new package is placed on purpose, not by accident.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOTS = ("cacheon_subnet", "seams", "arena", "native", "neurons", "scripts")

# Lowest first. A name claims the module of that name and everything under it ("=name": that module
# alone); the longest claim wins.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "base",
        tuple(
            f"cacheon_subnet.{m}"
            for m in (
                "errors log retry pins resources guard sockpath fdbudget netpolicy dnspool webapi progress connguard "
                "owned_dir httpsite lifecycle procs env cliout words jsonform msgcodec"
            ).split()
        )
        + ("=cacheon_subnet",),  # the package face alone (__version__, spec_version): "=" claims one module
    ),
    (
        "slots, scoring, sandbox",
        ("cacheon_subnet.slots", "cacheon_subnet.scoring", "cacheon_subnet.sandbox", "cacheon_subnet.tensor_views"),
    ),
    ("policy", ("cacheon_subnet.policy",)),
    ("bundle", ("cacheon_subnet.bundle",)),
    ("records", ("cacheon_subnet.records",)),
    ("chain", ("cacheon_subnet.chain", "cacheon_subnet.netfetch")),
    ("native", ("native",)),  # the CUDA compile lane: sandbox, bundle, records below; verify and arena above
    ("seams", ("seams", "cacheon_subnet.release.runtime", "cacheon_subnet.release.descriptor")),  # serving half
    ("verify", ("cacheon_subnet.verify", "cacheon_subnet.bench_timing")),
    ("arena", ("arena",)),
    (
        "validator, miner",
        (
            "cacheon_subnet.validator",
            "cacheon_subnet.miner",
            "cacheon_subnet.bench",
            "cacheon_subnet.bench_words",
            "cacheon_subnet.bench_report",
            "cacheon_subnet.bench_arena",
            "cacheon_subnet.release",  # build/sign/verify read validator state; runtime+descriptor sit at seams
        ),
    ),
    ("cli", ("cacheon_subnet.cli", "cacheon_subnet.demo", "cacheon_subnet.__main__")),
    ("entry points", ("neurons", "scripts")),
)
_LOADERS = {"import_module", "__import__", "find_spec"}


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    path: str
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (claim length, layer)
    for i, (_, claims) in enumerate(LAYERS):
        for claim in claims:
            exact = claim.startswith("=")
            claim = claim.lstrip("=")
            hit = module == claim or (not exact and module.startswith(claim + "."))
            if hit and (best is None or len(claim) > best[0]):
                best = (len(claim), i)
    return None if best is None else best[1]


def product_sources() -> dict[str, str]:
    return {str(p.relative_to(REPO)): p.read_text() for root in ROOTS for p in sorted((REPO / root).rglob("*.py"))}


def _known(name: str, modules: Iterable[str]) -> str | None:
    """The project module `name` refers to (a package, a module, or a name inside one), or None."""
    mods = set(modules)
    while name:
        if name in mods:
            return name
        name = name.rpartition(".")[0]
    return None


def edges(sources: Mapping[str, str]) -> list[Edge]:
    modules = {module_name(REPO / p) for p in sources}
    out: list[Edge] = []
    for path, text in sources.items():
        me = module_name(REPO / path)
        for node in ast.walk(ast.parse(text, filename=path)):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                fn = node.func
                called = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
                if called in _LOADERS and isinstance(node.args[0].value, str):
                    names = [node.args[0].value]
            elif isinstance(node, (ast.List, ast.Tuple)):  # [sys.executable, "-m", "pkg.mod", ...]
                consts = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
                names = [
                    str(consts[i + 1]) for i, c in enumerate(consts[:-1]) if c == "-m" and isinstance(consts[i + 1], str)
                ]
            for name in names:
                target = _known(name, modules)
                if target and target != me:
                    out.append(Edge(me, target, path, getattr(node, "lineno", 0)))
    return out


def upward(sources: Mapping[str, str]) -> list[str]:
    bad = []
    for e in edges(sources):
        lo, hi = layer_of(e.importer), layer_of(e.imported)
        if lo is not None and hi is not None and hi > lo:
            bad.append(
                f"{e.path}:{e.line}: {e.importer} (layer {LAYERS[lo][0]!r}) imports {e.imported} (layer {LAYERS[hi][0]!r}), above it"
            )
    return bad


def unplaced(sources: Mapping[str, str]) -> list[str]:
    return sorted(
        f"{p}: module {module_name(REPO / p)} has no layer" for p in sources if layer_of(module_name(REPO / p)) is None
    )


def circles(sources: Mapping[str, str]) -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan). A package's face (its __init__)
    handing on names of its own submodules is how Python packages work, so that edge is left out."""
    faces = {module_name(REPO / p) for p in sources if p.endswith("__init__.py")}
    graph: dict[str, set[str]] = {}
    for e in edges(sources):
        if not (e.importer in faces and e.imported.startswith(e.importer + ".")):
            graph.setdefault(e.importer, set()).add(e.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


SOURCES = product_sources()


def test_every_module_has_a_layer() -> None:
    assert not unplaced(SOURCES), "\n".join(unplaced(SOURCES))


def test_imports_point_down_only() -> None:
    bad = upward(SOURCES)
    assert not bad, "imports that run up the house:\n" + "\n".join(bad)


def test_no_circles() -> None:
    found = circles(SOURCES)
    assert not found, "modules that import each other: " + "; ".join(" <-> ".join(g) for g in found)


# Broken controls: each check, handed the real tree with one file changed, must see the change.


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("cacheon_subnet/scoring/weights.py", "from cacheon_subnet.validator import loop"),  # at the top
        (
            "seams/integrity.py",
            "def f():\n    from cacheon_subnet.verify.judge import check_inputs_untouched",
        ),  # in a function
        ("cacheon_subnet/bundle/digest.py", "import importlib\nimportlib.import_module('arena.run')"),  # through importlib
        ("arena/run.py", "ARGV = ['python', '-m', 'cacheon_subnet.validator.loop']"),  # a launched module
    ],
)
def test_an_upward_import_anywhere_in_a_real_file_is_refused(path: str, line: str) -> None:
    changed = dict(SOURCES)
    changed[path] = SOURCES[path] + "\n" + line + "\n"
    bad = upward(changed)
    assert any(b.startswith(path) for b in bad), bad


def test_a_circle_is_refused() -> None:
    changed = dict(SOURCES)
    changed["cacheon_subnet/procs.py"] = SOURCES["cacheon_subnet/procs.py"] + "\nfrom cacheon_subnet import lifecycle\n"
    assert any("cacheon_subnet.procs" in g and "cacheon_subnet.lifecycle" in g for g in circles(changed))


def test_a_module_no_layer_claims_is_refused() -> None:
    changed = dict(SOURCES)
    changed["cacheon_subnet/newthing/__init__.py"] = '"""x"""\n'
    assert unplaced(changed) == ["cacheon_subnet/newthing/__init__.py: module cacheon_subnet.newthing has no layer"]
