"""Worst-case bundle shapes for the static scan and the normalized identity, at the archive caps.

Each builder returns a bundle's files (manifest.toml, an honest `kernel.py` entry, and filler
modules) whose Python adds up to at most `cap` bytes (default: policy.MAX_SOURCE_BYTES, the
512 KiB a bundle may hold) and at most `members` files (the archive's 4096). The shapes are the
ones that used to make a per-function re-walk or a per-name scan quadratic: call chains in either
definition order ending in a collective, re-export chains, many small modules, a package
`__init__.py` of tens of thousands of names, deep expressions and long attribute chains, many
defs, constants, locals and name reads, nested defs and lambdas, chains of unused defs (the
identity's dead-code fixpoint) and names imported one by one.

Used by scripts/scan_scaling.py (docs/benchmarks.md's numbers), tests/policy/test_scan_linear.py and
tests/verify/test_scan_budget.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from cacheon_subnet.policy.scan import MAX_DEPTH, MAX_SOURCE_BYTES

MEMBERS = 4096  # bundle.limits.Limits.members
MANIFEST = b'schema = "cacheon.bundle/2"\n[[ops]]\nslot = "norm.rmsnorm"\nentry = "kernel:rmsnorm"\ndtypes = ["bfloat16"]\n'
HONEST = (
    "import torch\n\n\ndef rmsnorm(x, weight, out, eps):\n    x32 = x.to(torch.float32)\n"
    "    out.copy_(x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps) * weight)\n"
)
HEAD = "import torch\nimport torch.distributed as dist\n\n"
Files = dict[str, bytes]


def _base() -> Files:
    return {"manifest.toml": MANIFEST, "kernel.py": HONEST.encode()}


def _room(files: Files, cap: int) -> int:
    return cap - sum(len(v) for k, v in files.items() if k.endswith(".py"))


def _one_module(path: str, head: str, units: Iterator[str], cap: int, tail: Callable[[int], str] | None = None) -> Files:
    """`head` + as many units as fit in the cap (and `tail(n)` after n units, when given)."""
    files = _base()
    room = _room(files, cap) - len(head.encode()) - 256
    parts, n, used = [], 0, 0
    for u in units:
        size = len(u.encode())
        if used + size > room:
            break
        parts.append(u)
        used += size
        n += 1
    while True:  # the tail grows with n: drop units until everything fits
        body = (head + "".join(parts[:n]) + (tail(n) if tail else "")).encode()
        if len(body) <= _room(files, cap):
            files[path] = body
            return files
        n -= max(1, n // 100)


def _count(unit: Callable[[int], str]) -> Iterator[str]:
    i = 0
    while True:
        yield unit(i)
        i += 1


def chain(n: int, callee_after: bool = True) -> Files:
    """n defs, each passing its group to the next, the last one running a collective (the issue's
    measured shape: 250 / 1000 / 4000 defs). callee_after: f0 calls f1 defined below it."""
    defs = [f"def f{i}(x, group):\n    f{i + 1}(x, group)\n\n" for i in range(n - 1)]
    defs.append(f"def f{n - 1}(x, group):\n    dist.all_reduce(x, group=group)\n")
    if not callee_after:
        defs.reverse()
    files = _base()
    files["chain.py"] = (HEAD + "".join(defs)).encode()
    return files


def chain_fill(callee_after: bool = True, cap: int = MAX_SOURCE_BYTES) -> Files:
    """The longest such chain that fits the cap."""
    return _largest(lambda n: chain(n, callee_after), cap)


def many_modules(cap: int = MAX_SOURCE_BYTES, members: int = MEMBERS) -> Files:
    """One module per file, each calling the previous one's def by a relative import (a call chain
    across the bundle ending in a collective, callee in the module sorted last)."""
    files = _base()
    n = min(members - len(files), _room(files, cap) // 110)
    for i in range(n):
        if i == n - 1:
            body = "    dist.all_reduce(x, group=group)\n"
            imp = ""
        else:
            body = f"    g{i + 1:04d}(x, group)\n"
            imp = f"from .m{i + 1:04d} import g{i + 1:04d}\n"
        files[f"m{i:04d}.py"] = (HEAD + imp + f"def g{i:04d}(x, group):\n" + body).encode()
    return files


def package_init(cap: int = MAX_SOURCE_BYTES, members: int = MEMBERS) -> Files:
    """A package of ~4000 submodules whose __init__.py re-exports a def of each and binds tens of
    thousands of constants: every module-level name of an __init__.py is checked against the
    package's members (a scan of all of them per name, once)."""
    files = _base()
    n = members - len(files) - 1
    mods = {f"p/s{i:04d}.py": f"def h{i}(x):return x\n".encode() for i in range(n)}
    head = "".join(f"from .s{i:04d} import h{i}\n" for i in range(n))
    room = _room({**files, **mods}, cap) - len(head)
    consts, used, i = [], 0, 0
    while used + len(f"c{i}=0\n") <= room:
        consts.append(f"c{i}=0\n")
        used += len(consts[-1])
        i += 1
    return {**files, **mods, "p/__init__.py": (head + "".join(consts)).encode()}


def reexport(cap: int = MAX_SOURCE_BYTES, hops: int = 16) -> Files:
    """N group-taking defs and N constants re-exported through `hops` modules (the policy's
    MAX_REEXPORTS), then each called through the last one: every name is resolved hop by hop."""
    files = _base()
    return _largest(lambda n: {**files, **_reexport(n, hops)}, cap)


def _reexport(n: int, hops: int) -> Files:
    files: Files = {}
    files["r00.py"] = (
        HEAD + "".join(f"C{i} = {i}\n\n\ndef q{i}(x, group):\n    dist.all_reduce(x, group=group)\n\n\n" for i in range(n))
    ).encode()
    for h in range(1, hops):
        files[f"r{h:02d}.py"] = "".join(f"from .r{h - 1:02d} import q{i}, C{i}\n" for i in range(n)).encode()
    imports = "".join(f"from .r{hops - 1:02d} import q{i}, C{i}\n" for i in range(n))
    calls = "".join(f"    q{i}(x, group)\n" for i in range(n))
    files["use.py"] = (imports + f"\n\ndef use(x, group):\n{calls}    return C{n - 1}\n").encode()
    return files


def _largest(build: Callable[[int], Files], cap: int) -> Files:
    """build(n) for the largest n whose Python fits the cap."""
    lo, hi = 1, cap // 16
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _room(build(mid), cap) >= 0:
            lo = mid
        else:
            hi = mid - 1
    return build(lo)


def deep_exprs(cap: int = MAX_SOURCE_BYTES) -> Files:
    """Functions whose one expression is nested just under MAX_DEPTH (a chain of abs() calls)."""
    k = MAX_DEPTH - 6
    return _one_module("deep.py", HEAD, _count(lambda i: f"def d{i}(x):\n    return {'abs(' * k}x{')' * k}\n\n"), cap)


def binop_exprs(cap: int = MAX_SOURCE_BYTES) -> Files:
    """Left-deep sums just under MAX_DEPTH."""
    k = MAX_DEPTH - 6
    return _one_module("binop.py", HEAD, _count(lambda i: f"def b{i}(x):\n    return {'+'.join(['x'] * k)}\n\n"), cap)


def attr_chains(cap: int = MAX_SOURCE_BYTES) -> Files:
    """Value attribute chains just under MAX_DEPTH (`x.T.T...`: each level used to re-derive the
    whole chain below it)."""
    k = MAX_DEPTH - 6
    return _one_module("attrs.py", HEAD, _count(lambda i: f"def a{i}(x):\n    return x{'.T' * k}\n\n"), cap)


def module_chains(cap: int = MAX_SOURCE_BYTES) -> Files:
    """Allowed module attribute chains (`torch.float32`) and refused long ones, many times."""
    return _one_module(
        "mods.py", HEAD, _count(lambda i: f"def t{i}(x):\n    return x.to(torch.float32) + torch.cuda{'.x' * 40}\n\n"), cap
    )


def many_defs(cap: int = MAX_SOURCE_BYTES) -> Files:
    return _one_module("defs.py", HEAD, _count(lambda i: f"def f{i}(x):\n    return x\n\n"), cap)


def many_consts(cap: int = MAX_SOURCE_BYTES) -> Files:
    """Module constants, each read by one function (every name lookup used to rebuild the
    module's name set)."""
    return _one_module(
        "consts.py",
        HEAD,
        _count(lambda i: f"K{i} = {i}\n"),
        cap,
        tail=lambda n: "\n\ndef k(x):\n" + "".join(f"    x = x + K{i}\n" for i in range(0, n, 64)) + "    return x\n",
    )


def many_locals(cap: int = MAX_SOURCE_BYTES) -> Files:
    """One function binding many locals next to many module names (each binding is checked
    against the module's globals)."""
    return _one_module(
        "locs.py", HEAD + "def big(x):\n", _count(lambda i: f"    v{i} = x\n"), cap, tail=lambda n: "    return x\n"
    )


def nested_defs(cap: int = MAX_SOURCE_BYTES, depth: int = MAX_DEPTH - 8) -> Files:
    """Defs nested ~90 deep (tab-indented, so indentation is cheap) around a body of many short
    statements on few lines: each level's scope sets used to walk everything below it."""
    head = HEAD + "".join("\t" * i + f"def n{i}(x{i}):\n" for i in range(depth))
    pad = "\t" * depth
    line = pad + ";".join(f"y{j}=1" for j in range(64)) + "\n"
    tail = "".join("\t" * (i + 1) + f"return n{i + 1}\n" for i in reversed(range(depth - 1)))
    return _one_module(
        "nested.py", head, _count(lambda i: line), cap - len(tail) - 64, tail=lambda n: pad + "return x0\n" + tail
    )


def nested_lambdas(cap: int = MAX_SOURCE_BYTES, depth: int = 40) -> Files:
    """Lambdas and comprehensions nested alternately, each holding a walrus, many times."""

    def unit(i: int) -> str:
        e = "x"
        for d in range(depth):
            e = f"(lambda a{d}: {e})" if d % 2 else f"[(w{d} := {e}) for c{d} in x]"
        return f"def l{i}(x):\n    return {e}\n\n"

    return _one_module("lams.py", HEAD, _count(unit), cap)


def dead_chain(cap: int = MAX_SOURCE_BYTES) -> Files:
    """Unused defs each called only by the one before it (the identity drops one per round)."""
    return _one_module(
        "dead.py",
        HEAD,
        _count(lambda i: f"def z{i}(x):\n    return z{i + 1}(x)\n\n"),
        cap,
        tail=lambda n: f"def z{n}(x):\n    return x\n",
    )


def import_fan(cap: int = MAX_SOURCE_BYTES) -> Files:
    """One module of many one-line defs, imported name by name by another (the identity looked
    each imported name up by scanning the whole module)."""
    files = _base()

    def build(n: int) -> Files:
        lib = "".join(f"def w{i}(x):return x\n" for i in range(n))
        imports = "".join(
            f"from .lib import {', '.join(f'w{i}' for i in range(j, min(j + 50, n)))}\n" for j in range(0, n, 50)
        )
        use = imports + "\n\ndef use(x):\n" + "".join(f"    x = w{i}(x)\n" for i in range(0, n, 64)) + "    return x\n"
        return {**files, "lib.py": lib.encode(), "use.py": use.encode()}

    return _largest(build, cap)


def global_reads(cap: int = MAX_SOURCE_BYTES) -> Files:
    """Many one-line defs, and one function calling them many times over (every name it resolved
    rebuilt the module's set of names: lookups x definitions)."""

    def build(n: int) -> Files:
        defs = "".join(f"def g{i}(x):return x\n" for i in range(n))
        calls = "".join(f"    x = g{(i * 7919) % n}(x)\n" for i in range(2 * n))
        return {**_base(), "reads.py": (HEAD + defs + "\n\ndef reads(x):\n" + calls + "    return x\n").encode()}

    return _largest(build, cap)


SHAPES: dict[str, Callable[[], Files]] = {
    "chain_callee_after": lambda: chain_fill(True),
    "chain_callee_before": lambda: chain_fill(False),
    "many_modules": many_modules,
    "package_init": package_init,
    "reexport": reexport,
    "deep_exprs": deep_exprs,
    "binop_exprs": binop_exprs,
    "attr_chains": attr_chains,
    "module_chains": module_chains,
    "many_defs": many_defs,
    "many_consts": many_consts,
    "many_locals": many_locals,
    "nested_defs": nested_defs,
    "nested_lambdas": nested_lambdas,
    "dead_chain": dead_chain,
    "import_fan": import_fan,
    "global_reads": global_reads,
}
