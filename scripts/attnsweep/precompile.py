"""Triton's cache filled before anything is timed: compiling ~1 s a config would otherwise dominate.

The workers are spawned, so what they run must be importable by module path: `_warm_init` and
`_warm_one` are module-level functions of attnsweep.precompile and take and return Config (a
frozen dataclass of attnsweep.grid); a spawned child gets the parent's sys.path, which holds
scripts/ (the entry point's directory) and the repo root."""

from __future__ import annotations

import time
from typing import Any

from attnsweep.grid import Config
from attnsweep.sides import Candidate, load_example

# per worker process, filled by _warm_init: the example module and a tiny input of the head shape
_WARM: dict[str, Any] = {}


def _warm_init(hq: int, hk: int, d: int, max_splits: int, dtype: str) -> None:
    import torch

    g = torch.Generator().manual_seed(0)
    act = getattr(torch, dtype)
    B, ctx, S = 2, 64, 2 * 64 + 2
    t = {
        "q": torch.randn(B, hq, d, generator=g).to(act).cuda(),
        "k_buffer": torch.randn(S, hk, d, generator=g).to(act).cuda(),
        "v_buffer": torch.randn(S, hk, d, generator=g).to(act).cuda(),
        "kv_indptr": torch.tensor([0, ctx, 2 * ctx], dtype=torch.int32, device="cuda"),
        "kv_indices": torch.randperm(S - 1, generator=g)[: B * ctx].add(1).cuda(),
        "num_kv_splits": torch.full((B,), 2, dtype=torch.int32, device="cuda"),
        "lens": torch.full((B,), ctx),
        "max_splits": max_splits,
    }
    _WARM.update(mod=load_example(), t=t)


def _warm_one(cfg: Config) -> tuple[Config, str]:
    import torch

    try:
        Candidate(_WARM["mod"], cfg, _WARM["t"], 0.088)()
        torch.cuda.synchronize()
        return cfg, ""
    except Exception as e:  # noqa: BLE001 - reported; the timed shape fails the same way
        msg = str(e).strip().splitlines()
        return cfg, f"{type(e).__name__}: {msg[-1] if msg else ''}"[:200]


def precompile(
    configs: list[Config], hq: int, hk: int, d: int, max_splits: int, dtype: str, jobs: int, deadline: float
) -> tuple[dict[Config, str], float]:
    """Every config compiled once in `jobs` processes (tiny input, same head shape, so the same
    Triton specialisation and cache key): the timed process then loads cubins from the cache."""
    import concurrent.futures as cf
    import multiprocessing as mp

    t = time.monotonic()
    errors: dict[Config, str] = {}
    if jobs < 1 or not configs:
        return errors, 0.0
    ex = cf.ProcessPoolExecutor(
        max_workers=jobs, mp_context=mp.get_context("spawn"), initializer=_warm_init, initargs=(hq, hk, d, max_splits, dtype)
    )
    futs = [ex.submit(_warm_one, c) for c in configs]
    finished = False
    try:
        for f in cf.as_completed(futs, timeout=max(1.0, deadline - time.monotonic())):
            cfg, err = f.result()
            if err:
                errors[cfg] = err
        finished = True
    except cf.TimeoutError:
        print(f"precompile: stopped at the budget, {sum(f.done() for f in futs)}/{len(futs)} compiled", flush=True)
    except Exception as e:  # noqa: BLE001 - a broken pool: the timed process compiles on demand
        print(f"precompile: {type(e).__name__}: {e}", flush=True)
    ex.shutdown(wait=finished, cancel_futures=True)  # done: the workers exit now and free their GPU contexts
    return errors, time.monotonic() - t
