"""LocalChain shared by processes: concurrent writers, and SIGKILL in the middle of writes."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from cacheon_subnet.chain import LocalChain
from cacheon_subnet.chain.local import quantize

CTX = mp.get_context("spawn")  # no inherited handles or threads from the test process
N_MINERS = 6


def _writer(path: str, prefix: str, count: int, start: mp.Event) -> None:
    chain = LocalChain.open(path)
    start.wait(10)
    for i in range(count):
        hk = f"{prefix}{i}"
        chain.register(hk, f"cold-{prefix}")
        chain.commit(hk, 1, f"{hk}-payload", 1)
        chain.advance(1)


def test_two_processes_write_concurrently(tmp_path: Path) -> None:
    path = str(tmp_path / "c.db")
    LocalChain.create(path, seconds_per_block=0).close()
    start = CTX.Event()
    procs = [CTX.Process(target=_writer, args=(path, p, 25, start)) for p in ("a", "b")]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    chain = LocalChain.open(path)
    mg = chain.metagraph(1)
    assert [n.uid for n in mg.neurons] == list(range(51))  # contiguous, no uid handed out twice
    assert len(set(mg.hotkeys)) == 51
    assert chain.current_block() == 50
    data = {c.hotkey: c.data for c in chain.revealed_commitments(1)}
    assert len(data) == 50 and all(v == f"{k}-payload" for k, v in data.items())


def _pattern(k: int) -> list[float]:
    return [float(1 + (u + k) % N_MINERS) for u in range(N_MINERS)]


def _hammer(path: str, ready: mp.Event) -> None:
    chain = LocalChain.open(path)
    k = 0
    while True:
        chain.set_weights("v", 1, list(range(1, N_MINERS + 1)), _pattern(k), 0)
        chain.register(f"late{k}", "c")
        chain.commit(f"late{k}", 1, f"round-{k}", 1)
        chain.advance(1)
        k += 1
        if k == 20:
            ready.set()


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.13])
def test_sigkill_mid_write_leaves_consistent_db(tmp_path: Path, delay: float) -> None:
    path = str(tmp_path / "k.db")
    chain = LocalChain.create(path, seconds_per_block=0, weights_rate_limit=0)
    chain.register("v", "cv", 100.0, True)
    for i in range(1, N_MINERS):
        chain.register(f"m{i}", "cm")
    chain.close()
    ready = CTX.Event()
    child = CTX.Process(target=_hammer, args=(path, ready))
    child.start()
    assert ready.wait(20), "writer did not start"
    time.sleep(delay)
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    assert child.exitcode == -signal.SIGKILL

    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    chain = LocalChain.open(path)
    mg = chain.metagraph(1)
    assert [n.uid for n in mg.neurons] == list(range(len(mg.neurons)))
    # The weight row is one whole write: it matches exactly one iteration's pattern.
    back = chain.get_weights(1, "v")
    assert sorted(back) == list(range(1, N_MINERS + 1))
    stored = quantize([back[u] for u in sorted(back)])
    assert any(stored == quantize(_pattern(k)) for k in range(N_MINERS)), stored
    # The chain is still writable after the crash (no lock left behind).
    chain.set_weights("v", 1, [1], [1.0], 0)
    chain.commit("m1", 1, "after-crash", 1)
    chain.advance(1)
    assert "after-crash" in [c.data for c in chain.revealed_commitments(1)]


def _forked_register(chain: LocalChain) -> None:
    chain.register("from-child", "c")  # must open its own connection, not the parent's


def test_forked_child_reopens_its_connection(tmp_path: Path) -> None:
    chain = LocalChain.create(tmp_path / "f.db", seconds_per_block=0)
    chain.register("parent-1", "c")  # parent connection is open and used
    child = mp.get_context("fork").Process(target=_forked_register, args=(chain,))
    child.start()
    child.join(20)
    assert child.exitcode == 0
    chain.register("parent-2", "c")
    assert chain.metagraph(1).hotkeys == ("owner", "parent-1", "from-child", "parent-2")
