"""Each engine's private copies of the JIT seed caches: copied in before it starts, copied back
after it stops only from an engine that loaded no contribution code.

An engine compiles kernels into Triton's, Inductor's, tvm-ffi's and FlashInfer's caches; sharing
one with a candidate would let it poison the stock kernels of every later engine (the pristine
teacher's above all), and starting cold costs ~30 s of nvcc. So every engine gets a copy of the
operator's seeds (arena/engine/home.py) under its own scratch, seen inside at one fixed path, and
only a pristine engine's new files flow back, whole or not at all. Apart from host.py because both
the one-shot host and the resident engines (arena/engine/resident.py) use it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path

from arena.engine.home import JIT_CACHES, cache_part

# Where every engine sees its private JIT caches. tvm-ffi writes the absolute path of its build
# dir into build.ninja, so a copy at another path rebuilds every JIT kernel (~30 s of nvcc per
# engine start on the H200, docs/benchmarks.md); at one fixed path the seeds hit.
JIT_INSIDE = "/cacheon-jit"


def private_caches(scratch: Path, seeds: Mapping[str, str]) -> dict[str, str]:
    """Each engine its own JIT caches (every one of arena.engine.home.JIT_CACHES: Triton, Inductor, XDG,
    tvm-ffi, FlashInfer) under its scratch, removed with it: a candidate that writes a cache entry
    can poison no other engine's stock kernels (the pristine teacher's above all). An operator's
    warm cache is copied in, never shared; of FlashInfer's base only its .cache/flashinfer."""
    env = {}
    for c in JIT_CACHES:
        d = scratch / "cache" / c.name
        shutil.rmtree(d, ignore_errors=True)
        src = seeds.get(c.key)
        if src and cache_part(c.key, src).is_dir():
            shutil.copytree(
                cache_part(c.key, src),
                cache_part(c.key, d),
                symlinks=False,
                ignore_dangling_symlinks=True,
                ignore=shutil.ignore_patterns(".cacheon-tmp-*"),
            )  # a copy-back a kill cut short
        d.mkdir(parents=True, exist_ok=True)
        env[c.key] = str(d)
    return env


def warm_seed_caches(private: Mapping[str, str], seeds: Mapping[str, str]) -> None:
    """Copy what an engine WITHOUT contribution code compiled into the operator's caches (new
    files only, never overwriting): later engines start warm. An engine that loaded a bundle
    never writes back, so a candidate cannot poison the stock kernels of a later engine."""
    for key, whole in private.items():
        dst = seeds.get(key)
        src = str(cache_part(key, whole))
        if not dst or not os.path.isdir(src) or os.path.realpath(src) != str(cache_part(key, os.path.realpath(whole))):
            continue  # FlashInfer's .cache/flashinfer must be a dir of the private copy, not a link out
        dst = str(cache_part(key, dst))  # of FlashInfer's base only .cache/flashinfer, both ways
        for d, _, files in os.walk(src):
            rel = os.path.relpath(d, src)
            for f in files:
                a, b = os.path.join(d, f), os.path.join(dst, rel, f)
                if os.path.islink(a) or os.path.exists(b) or f.startswith(".cacheon-tmp-"):
                    continue
                # whole or nothing: a seed is never rewritten, so a copy cut short (disk full, a
                # kill) must not stay; a temp name then link(), which never overwrites, so a
                # concurrent engine (another arena's copy-back or copy-in) sees no partial file
                tmp = os.path.join(os.path.dirname(b), f".cacheon-tmp-{os.getpid()}-{threading.get_ident()}")
                try:
                    os.makedirs(os.path.dirname(b), exist_ok=True)
                    shutil.copy2(a, tmp)
                    os.link(tmp, b)
                except OSError:
                    pass
                finally:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
