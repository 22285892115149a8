"""Shared fixtures: repo paths and a bundle factory."""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
CONTROLS = EXAMPLES / "controls"

MANIFEST = """schema = "cacheon.bundle/3"

[[ops]]
slot = "norm.rmsnorm"
entry = "kernel:rmsnorm"
dtypes = ["bfloat16"]
"""


# The suite's engines start cold, each from nothing: no test warms or reads the validator's
# default seed caches under /var/tmp/cacheon/jit (tests/arena/test_warm.py turns them on).
os.environ.setdefault("CACHEON_JIT_SEEDS", "off")
# Triton in this process is the CPU interpreter, whatever imports it first: `@triton.jit` reads the
# variable when it decorates, and so does triton.language's own library. A test that sets it only
# before loading its kernel, after another test imported triton.language without it, interprets a
# kernel whose `tl.zeros` is a compiled-mode JITFunction ("Cannot call @triton.jit'd outside of the
# scope of a kernel": tests/slots/test_attention.py under -n 3, 2026-12-05). The suite has no GPU.
os.environ.setdefault("TRITON_INTERPRET", "1")
# One BLAS/OpenMP thread in every test process and child (CLI, engine, validator; verify workers
# already run with one: verify/client.py): two xdist workers on a 2-core box each spinning a
# 2-thread pool burned 2-3x the CPU-seconds of the same work (tests/arena/test_train.py on a
# loaded box: 17-36 s -> 9-10 s). The thread count changes no result a test checks.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
if "torch" in sys.modules:  # imported before this file (a plugin): the env var came too late for it
    sys.modules["torch"].set_num_threads(1)

# Files whose tests take the longest (make test prints --durations): collected first, so the two
# xdist workers start them early instead of one of them finishing the run alone.
# Longest single tests first (--durations of 2026-12-05, 2-core box, -n 2): xdist hands out the
# first quarter round-robin, so a 30 s test collected last would end the run on one worker.
HEAVY_FIRST = (
    "tests/test_demo.py",  # 98 s
    "tests/test_readme_flow.py",  # 31 s
    "tests/validator/web/test_validator_flood.py",  # 29 s, mostly waiting on validator passes
    "tests/arena/test_gpu_scripts.py",
    "tests/arena/test_gpu_e2e.py",
    "tests/slots/test_moe.py",
    "tests/arena/test_resident_timed.py",
    "tests/arena/test_arena_sequential_e2e.py",
    "tests/arena/test_arena_e2e.py",
    "tests/slots/test_attention.py",
    "tests/validator/test_validator_loop.py",
    "tests/validator/test_restart.py",
    "tests/validator/test_dispatch_ray.py",
    "tests/verify/test_verify_multirank.py",
    "tests/miner/test_miner_cli.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return next((i for i, f in enumerate(HEAVY_FIRST) if path == f), len(HEAVY_FIRST))

    items.sort(key=rank)  # stable: the order inside a file (and its module fixtures) is kept


@pytest.fixture(autouse=True)
def _release_trust_per_test(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """`release verify` remembers each owner's newest serial (release/trust.py): one file per test,
    so no verdict depends on what another test verified, and none writes to ~/.cacheon."""
    trust = tmp_path_factory.getbasetemp() / f"release-trust-{uuid.uuid4().hex}.json"
    monkeypatch.setenv("CACHEON_RELEASE_TRUST", str(trust))


@pytest.fixture(autouse=True)
def _sandbox_can_search_tmp(request: pytest.FixtureRequest) -> None:
    """pytest makes its temp dirs 0700; the sandbox's dedicated uid must search (not list) them
    to reach the paths a test hands to a sandboxed child, as it does under /var/tmp in production."""
    if "tmp_path" not in request.fixturenames:
        return
    searchable(request.getfixturevalue("tmp_path"))


def searchable(tmp: Path) -> Path:
    """Let the sandbox uid search `tmp` and the pytest dirs above it (module-scoped fixtures
    that make their own temp dirs call this too)."""
    chain = [tmp, *tmp.parents]
    # up to and including pytest-of-<user> (xdist adds a popen-gwN level below pytest-N)
    top = next((i for i, d in enumerate(chain) if d.name.startswith("pytest-of-")), 2)
    for d in chain[: top + 1]:
        try:
            d.chmod(d.stat().st_mode | 0o111)
        except OSError:
            pass
    return tmp


@pytest.fixture
def make_bundle(tmp_path: Path):
    """Write {path: text|bytes} into a fresh directory and return it."""

    def _make(files: dict[str, str | bytes], name: str = "bundle") -> Path:
        root = tmp_path / name
        root.mkdir()
        for rel, data in files.items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data.encode() if isinstance(data, str) else data)
        return root

    return _make


@pytest.fixture
def example_copy(tmp_path: Path):
    """Copy an example bundle into tmp_path so a test may modify it."""

    def _copy(rel: str) -> Path:
        dst = tmp_path / Path(rel).name
        shutil.copytree(EXAMPLES / rel, dst)
        return dst

    return _copy
