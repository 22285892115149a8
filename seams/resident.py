"""The rank's side of a timed engine kept across contributions (issue 30 item 4; docs/arena.md
"Resident timed engine").

Why in the rank: only a scheduler rank holds contribution code, so only validator code there can
put one contribution's sealed tree into a running engine, take it out again and say what of it is
left. Every call is an RPC carrying a fresh host nonce and is answered by one line in the rank's
answer log (seams/answers.py), in the answers dir of the job that asked: the host hands each
contribution its own dir, so nothing one contribution's turn wrote is ever read as another's.

  cacheon_install(env, answers, nonce)  answers and receipts move to the job's dir; the tree (or a
      host-set control) is registered exactly as at activation (seams/activate.py: digest check,
      policy re-scan, salted Triton keys), each custom op behind a Trampoline under a namespace
      unique to this install; route "candidate" and the graphs recaptured, as an engine start
      captures them. One contribution at a time.
  cacheon_remove(nonce)  route "stock" and recapture; the registry, the trampolines, the custom-op
      libraries, the static-input watch, the package's modules, path entries and import caches
      are dropped; a full collection runs (the frozen generation too); the answer names whatever
      of the package is still alive (weak references taken at install).
  cacheon_state(nonce)  SHA-256 of every parameter and buffer of the model, bit for bit, and what of
      any contribution the process still holds (modules, live objects, thread frames in its code,
      path entries, open fds into the trees). The host compares it with the engine's first reading.

What this cannot see (docs/security.md): raw device writes into memory no parameter or buffer
holds, and Python beyond the allowlist that hides from these reports; the stock canary window the
host runs after every removal is the check on outputs.
"""

from __future__ import annotations

import gc
import hashlib
import importlib
import linecache
import os
import sys
import time
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cacheon_subnet.env import ENGINE_TREE, RECEIPT_DIR, RESIDENT_ANSWERS, RESIDENT_TREES
from seams.activate import RESIDENT_ENV, note_active, register_candidates, selected_adapters
from seams.answers import check_nonce, snapshot
from seams.dispatch import REGISTRY, Registry, SeamError
from seams.integrity import WATCH
from seams.route import set_route

PREFIX = "cacheon_c_"  # every sealed package (cacheon_subnet.bundle.engine_tree.package_for)
TREES_ENV = RESIDENT_TREES.name  # the read-only dir the host puts each contribution's tree in
ANSWERS_ENV = RESIDENT_ANSWERS.name  # the dir holding one answers dir per job


class Trampoline:
    """What torch's dispatcher holds instead of the contribution's op body. torch.library keeps a
    reference to every Python kernel it was handed even after Library._destroy() (torch 2.13,
    measured here: one reference stays), which would keep the contribution's functions, and through
    them its module globals, alive for the engine's life. The rank empties this at removal."""

    __slots__ = ("fn", "__weakref__")

    def __init__(self, fn: Callable[..., None]) -> None:
        self.fn: Callable[..., None] | None = fn

    def __call__(self, **kw: Any) -> None:
        fn = self.fn
        if fn is None:
            raise SeamError("a removed contribution's kernel was called")
        return fn(**kw)


@dataclass
class Installed:
    """One contribution inside the rank, and what must be gone once it is removed."""

    root: str | None
    packages: tuple[str, ...]
    namespaces: tuple[str, ...]
    trampolines: list[Trampoline] = field(default_factory=list)
    refs: list[tuple[str, Any]] = field(default_factory=list)  # (name, weakref) of its modules and functions


def _owned(value: Any, packages: tuple[str, ...]) -> bool:
    """A module or function (through Triton's Autotuner/Heuristics/JIT wrappers) defined by `packages`."""

    def mine(name: Any) -> bool:
        return isinstance(name, str) and any(name == p or name.startswith(p + ".") for p in packages)

    if isinstance(value, types.ModuleType):
        return mine(value.__name__)
    for _ in range(8):
        if isinstance(value, types.FunctionType):
            return mine(value.__module__)
        value = value.__dict__.get("fn") if hasattr(value, "__dict__") else None
        if value is None:
            return False
    return False


def weak_refs(packages: tuple[str, ...]) -> list[tuple[str, Any]]:
    """Weak references to every module of `packages` and every function and JIT kernel they define."""
    refs: list[tuple[str, Any]] = []
    for name, mod in list(sys.modules.items()):
        if mod is None or not _owned(mod, packages):
            continue
        refs.append((name, weakref.ref(mod)))
        for attr, value in list(vars(mod).items()):
            if _owned(value, packages) and not isinstance(value, types.ModuleType):
                try:
                    refs.append((f"{name}.{attr}", weakref.ref(value)))
                except TypeError:
                    continue
    return refs


def purge(packages: tuple[str, ...], root: str | None) -> list[str]:
    """The packages' modules out of sys.modules, the tree out of sys.path and the import caches."""
    gone = sorted(n for n in sys.modules if any(n == p or n.startswith(p + ".") for p in packages))
    for n in gone:
        del sys.modules[n]
    if root:
        sys.path[:] = [p for p in sys.path if p != root]
        for key in [k for k in sys.path_importer_cache if k == root or k.startswith(root + os.sep)]:
            del sys.path_importer_cache[key]
        for key in [k for k in linecache.cache if isinstance(k, str) and k.startswith(root + os.sep)]:
            del linecache.cache[key]
    importlib.invalidate_caches()
    return gone


def forget_interpreted(packages: tuple[str, ...]) -> int:
    """Triton's interpreter (TRITON_INTERPRET=1: the CPU fake engine) keeps every kernel it ran in a
    class-level table, InterpretedFunction.rewritten_fn (the function -> its rewritten copy), which
    kept a removed contribution's functions, and through them its module globals, alive (found by
    the alive check on the fake engine). Keys are function objects, so no other kernel could hit
    them; the entries of `packages` are dropped. The compiled path keeps no such table (checked in
    compiled mode: tests/arena/test_resident_contamination.py, the Triton-cache variant)."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return 0
    table = InterpretedFunction.__dict__.get("rewritten_fn")
    if not isinstance(table, dict):
        return 0
    mine = [k for k, v in list(table.items()) if _owned(k, packages) or _owned(v, packages)]
    for k in mine:
        del table[k]
    return len(mine)


def full_collect() -> int:
    """A collection of the whole heap, frozen objects included (recapture freezes what it finds)."""
    gc.unfreeze()
    n = gc.collect()
    gc.freeze()
    return n


def contribution_frames() -> list[str]:
    """Threads whose stack runs code of a sealed package: a contribution's work still running."""
    out = []
    for tid, frame in sys._current_frames().items():
        f: types.FrameType | None = frame
        while f is not None:
            name = f.f_globals.get("__name__")
            if isinstance(name, str) and name.startswith(PREFIX):
                out.append(f"thread {tid}: {name}.{f.f_code.co_name}")
                break
            f = f.f_back
    return out


def fds_under(root: str | None) -> list[str]:
    """This process's open files under `root` (a removed tree must hold none)."""
    if not root:
        return []
    out = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return ["/proc/self/fd unreadable"]
    for fd in names:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target == root or target.startswith(root.rstrip(os.sep) + os.sep):
            out.append(target)
    return out


def weights_digest(model: Any) -> tuple[str | None, int]:
    """SHA-256 over every parameter and buffer (name, dtype, shape and bytes, bit for bit)."""
    import torch

    if model is None or not hasattr(model, "named_parameters"):
        return None, 0
    h, n = hashlib.sha256(), 0
    for kind, items in (("param", model.named_parameters()), ("buffer", model.named_buffers())):
        for name, t in items:
            t = t.detach()
            h.update(f"{kind} {name} {t.dtype} {tuple(t.shape)}\n".encode())
            if t.numel():
                raw = t.contiguous().reshape(-1).view(torch.uint8).cpu()
                h.update(memoryview(raw.numpy()))
            n += 1
    return h.hexdigest(), n


class ResidentRank:
    """The three RPCs of one scheduler rank of a resident timed engine."""

    def __init__(self, scheduler: Any, rank: int, registry: Registry, environ: dict[str, str]) -> None:
        from seams.forward_clock import answer_log

        self.scheduler, self.rank, self.registry = scheduler, rank, registry
        self.trees = os.path.realpath(environ[TREES_ENV]) if environ.get(TREES_ENV) else None
        self.answers_root = os.path.realpath(environ[ANSWERS_ENV]) if environ.get(ANSWERS_ENV) else None
        self.log = answer_log(environ.get(RECEIPT_DIR.name), rank)  # the one route/clock answer too
        self.slots = sorted({s for a in selected_adapters(environ) for s in a.slots})
        self.installs = 0
        self.current: Installed | None = None
        self.gone: list[tuple[str, Any]] = []  # weak refs of every removed contribution: must stay dead

    @property
    def runner(self) -> Any:
        return self.scheduler.tp_worker.model_runner

    def _redirect(self, answers: str) -> None:
        real = os.path.realpath(answers)
        if not self.answers_root or os.path.dirname(real) != self.answers_root or not os.path.isdir(real):
            raise ValueError(f"answers dir {answers!r} is not a job dir of this engine's answers root")
        self.log.redirect(real)
        if self.registry.receipts is not None:
            self.registry.receipts.reset(real)

    def install(self, env: dict[str, str], answers: str, nonce: str) -> None:
        check_nonce(nonce)
        if self.current is not None:
            raise RuntimeError("a contribution is installed already: remove it first")
        tree = env.get(ENGINE_TREE.name)
        if tree and (not self.trees or os.path.dirname(os.path.realpath(tree)) != self.trees):
            raise ValueError(f"tree {tree!r} is not a tree of this engine's trees dir")
        self._redirect(answers)
        self.installs += 1
        cur = Installed(os.path.realpath(tree) if tree else None, (), ())
        self.current = cur

        def wrap(body: Callable[..., None]) -> Callable[..., None]:
            cur.trampolines.append(Trampoline(body))
            return cur.trampolines[-1]

        before = set(_libs())
        try:
            sys.dont_write_bytecode = True
            cur.packages = register_candidates(dict(env), self.slots, self.registry, f"_r{self.installs}", wrap)
            cur.namespaces = tuple(sorted(set(_libs()) - before))
            cur.refs = weak_refs(cur.packages)
            note_active(self.registry, self.slots)
            ack = set_route(self.runner, "candidate", 0, self.registry)  # capture, as an engine start does
        except Exception as e:
            if self.registry.receipts is not None:
                for s in self.slots:
                    self.registry.receipts.note(s, "load_failed", repr(e))
            self.registry.disable()  # nothing half-installed is measured; the host restarts the engine
            raise
        self.log.answer(nonce, "install", {"ack": ack, "packages": list(cur.packages), **snapshot(self.registry.receipts)})

    def remove(self, nonce: str) -> None:
        check_nonce(nonce)
        cur, reg = self.current, self.registry
        if cur is None:
            raise RuntimeError("nothing is installed")
        t0 = time.perf_counter()
        before = snapshot(reg.receipts)
        ack = set_route(self.runner, "stock", 0, reg)  # graphs without the contribution's kernels
        reg.candidates.clear()
        for t in cur.trampolines:
            t.fn = None
        libs = _libs()
        for ns in cur.namespaces:
            lib = libs.pop(ns, None)
            if lib is not None:
                lib._destroy()
        WATCH.reset()
        purged = purge(cur.packages, cur.root)
        forgotten = forget_interpreted(cur.packages)
        cur.trampolines.clear()
        self.current = None
        collected = full_collect()
        import torch

        if torch.cuda.is_available():  # the allocator's blocks it cached go back: the next one starts as
            torch.cuda.empty_cache()  # a fresh engine would (its warm-up windows allocate again)
        self.gone += cur.refs
        self.log.answer(
            nonce,
            "remove",
            {
                "ack": ack,
                "purged": purged,
                "collected": collected,
                "interpreted": forgotten,
                "s": round(time.perf_counter() - t0, 4),
                "left": self.leftovers(),
                "counts_before": before["counts"],
            },
        )

    def leftovers(self) -> dict[str, Any]:
        """What of any contribution this process still holds (all empty after a clean removal)."""
        reg = self.registry
        return {
            "modules": sorted(n for n in sys.modules if n.startswith(PREFIX)),
            "alive": sorted({name for name, ref in self.gone if ref() is not None}),
            "frames": contribution_frames(),
            "sys_path": [p for p in sys.path if self.trees and p.startswith(self.trees)],
            "fds": fds_under(self.trees),
            "registry": {
                "enabled": reg.enabled,
                "route": reg.route,
                "candidates": sum(len(v) for v in reg.candidates.values()),
            },
            "watched": len(WATCH.copies),
            "installed": self.current is not None,
        }

    def state(self, nonce: str) -> None:
        check_nonce(nonce)
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()  # work a kernel left queued lands before the digest reads
        t0 = time.perf_counter()
        digest, n = weights_digest(getattr(self.runner, "model", None))
        # advisory, not judged: SGLang may allocate lazily in later windows (to be read on the H200)
        allocated = torch.cuda.memory_allocated() if torch.cuda.is_available() else None
        self.log.answer(
            nonce,
            "state",
            {
                "digest": digest,
                "tensors": n,
                "digest_s": round(time.perf_counter() - t0, 4),
                "left": self.leftovers(),
                "installs": self.installs,
                "cuda_allocated": allocated,
            },
        )


def _libs() -> dict[str, Any]:
    from cacheon_subnet.slots import custom_op

    return custom_op._libs


RPCS = ("cacheon_install", "cacheon_remove", "cacheon_state")


def attach(scheduler: Any, rank: int, registry: Registry = REGISTRY, environ: dict[str, str] | None = None) -> bool:
    """Give a resident timed engine's scheduler the three RPCs (only where the host asked for one)."""
    env = dict(os.environ if environ is None else environ)
    if env.get(RESIDENT_ENV) != "1":
        return False
    r = ResidentRank(scheduler, rank, registry, env)
    for name, fn in zip(RPCS, (r.install, r.remove, r.state)):
        setattr(scheduler, name, fn)
    return True
