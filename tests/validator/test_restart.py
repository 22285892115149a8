"""kill -9 safety: a validator SIGKILLed at random points and restarted ends exactly where an
uninterrupted run ends (same verdicts, one crown per target, every evidence row settled once,
no weights published twice in one rate-limit window).

The validator runs in a subprocess (restart_worker.py) against a frozen LocalChain file it
advances itself; bundles are real archives served over loopback by this process; screening and
qualification are fast fakes. Seed: CACHEON_RESTART_SEED (printed on failure).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from validator_fakes import EXAMPLES, NETUID, VALIDATOR, FileServer, commit, make_archive, make_chain, snapshot

from cacheon_subnet import __spec_version__
from cacheon_subnet.chain import LocalChain
from cacheon_subnet.validator import ledger
from cacheon_subnet.validator.publish import readback_check
from cacheon_subnet.validator.state import StateDB

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("restart_worker.py")
RATE_LIMIT = 3
MAX_KILLS = 20


def _setup(tmp: Path, srv: FileServer) -> tuple[Path, int]:
    """A frozen chain with nine miners' commitments; returns (chain path, last reveal block)."""
    path = tmp / "chain.db"
    chain = make_chain(path, version_key=29, rate_limit=RATE_LIMIT, miners=9)
    a, da = make_archive(EXAMPLES / "norm.rmsnorm", tmp, "a", {"speed.txt": "1.10"})
    b, db_ = make_archive(EXAMPLES / "norm.rmsnorm", tmp, "b", {"speed.txt": "1.20"})
    _, dx = make_archive(EXAMPLES / "norm.rmsnorm", tmp, "x", {"speed.txt": "1.50"})  # never served
    w, dw = make_archive(EXAMPLES / "controls" / "wrong_math", tmp, "w")
    s, ds = make_archive(EXAMPLES / "activation.silu_and_mul", tmp, "s", {"speed.txt": "1.05"})
    r, dr = make_archive(EXAMPLES / "rope.neox", tmp, "r", {"speed.txt": "1.30"})
    srv.add("s.tar.gz", s)
    plan = [
        ("m0", da, srv.add("a.tar.gz", a), 1),
        ("m1", db_, srv.add("b.tar.gz", b), 1),
        ("m2", da, srv.add("a-copy.tar.gz", a), 1),  # copy of m0: duplicate
        ("m3", dw, srv.add("w.tar.gz", w), 1),  # broken: fails screening
        ("m4", ds, srv.url("redirect/2/s.tar.gz"), 1),  # served through two redirects
        ("m5", dr, srv.add("r.tar.gz", r), 12),  # earliest commit of r, revealed last: roles swap
        ("m6", dr, srv.add("r-copy.tar.gz", r), 1),
        ("m7", None, None, 1),  # malformed
        ("m8", dx, srv.add("b-as-x.tar.gz", b), 1),  # serves other content: digest mismatch
    ]
    last_reveal = 0
    for hotkey, digest, url, reveal in plan:
        if digest is None:
            block = chain.commit(hotkey, NETUID, "this is not a commitment", reveal)
        else:
            block = commit(chain, hotkey, digest, url, reveal)
        last_reveal = max(last_reveal, block + reveal)
        chain.advance(1)
    chain.close()
    return path, last_reveal


def _copy_chain(src: Path, dst: Path) -> Path:
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{src}{suffix}").exists():
            shutil.copy(f"{src}{suffix}", f"{dst}{suffix}")
    return dst


def _worker(chain: Path, state: Path, min_block: int) -> subprocess.Popen:
    """Logs (warnings and up) go to a file beside the state dir, so no pipe can fill and block."""
    env = {**os.environ, "CACHEON_LOG_LEVEL": "warning"}
    with open(f"{state}.log", "a") as err:
        return subprocess.Popen(
            [sys.executable, str(WORKER), str(chain), str(state), str(min_block)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        )


def _log_tail(state: Path) -> str:
    return Path(f"{state}.log").read_text()[-3000:] if Path(f"{state}.log").exists() else ""


def _run_to_end(chain: Path, state: Path, min_block: int) -> None:
    p = _worker(chain, state, min_block)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0 and "done" in out, f"rc {p.returncode}\n{out}\n{_log_tail(state)}"


def _progress(state: Path) -> str:
    """One line: where the killed run's DB stood (shows kills land in different stages)."""
    if not (state / "validator.sqlite").exists():
        return "no DB yet"
    db = StateDB(state, readonly=True)
    try:
        counts = " ".join(f"{k}={v}" for k, v in db.counts().items() if v)
        n, settled = db.con.execute("SELECT COUNT(*), COALESCE(SUM(settled), 0) FROM evidence").fetchone()
        weights = ",".join(w.state for w in ledger.weights_rows(db))
        return f"{counts} | evidence {settled}/{n} | weights [{weights}]"
    finally:
        db.close()


def _check_invariants(state: Path, chain_path: Path) -> None:
    db = StateDB(state, readonly=True)
    con = db.con
    # every evidence row settled exactly once: each settlement still owns all rows it counted
    assert con.execute("SELECT COUNT(*) FROM evidence WHERE settled=0").fetchone()[0] == 0
    for s in con.execute("SELECT id, evidence_count FROM settlements"):
        n = con.execute("SELECT COUNT(*) FROM evidence WHERE settlement_id=?", (s["id"],)).fetchone()[0]
        assert n == s["evidence_count"], f"settlement {s['id']} counted {s['evidence_count']}, owns {n}"
    assert (
        con.execute("SELECT COUNT(*) FROM evidence WHERE settlement_id IS NULL AND outcome IS NOT 'voided'").fetchone()[0]
        == 0
    )
    # one crown per target, and it is in the history
    crowns = con.execute("SELECT target, contribution_id FROM crowns").fetchall()
    assert len({c["target"] for c in crowns}) == len(crowns)
    # weights: never two publications in one rate-limit window; the last one verified on chain
    rows = [w for w in ledger.weights_rows(db) if w.state in ("published", "verified", "failed")]
    blocks = sorted(w.block for w in rows if w.block is not None)
    assert all(b2 - b1 >= RATE_LIMIT for b1, b2 in zip(blocks, blocks[1:])), blocks
    last = ledger.last_weights(db)
    assert last is not None and last.state == "verified" and last.version_key == __spec_version__
    chain = LocalChain.open(chain_path)
    ok, detail = readback_check(last.uids, last.vals, chain.get_weights(NETUID, VALIDATOR))
    assert ok, detail
    db.close()


@pytest.mark.timeout(240)
def test_sigkill_at_random_points_converges_to_the_uninterrupted_result(tmp_path: Path) -> None:
    seed = int(os.environ.get("CACHEON_RESTART_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    with FileServer() as srv:
        base, last_reveal = _setup(tmp_path, srv)
        min_block = last_reveal + 2
        clean_chain = _copy_chain(base, tmp_path / "clean.db")
        killed_chain = _copy_chain(base, tmp_path / "killed.db")

        _run_to_end(clean_chain, tmp_path / "clean", min_block)

        kills, finished, trace = 0, False, []
        while kills < MAX_KILLS:
            p = _worker(killed_chain, tmp_path / "killed", min_block)
            assert p.stdout is not None
            line = p.stdout.readline()
            assert "ready" in line, f"seed {seed}: worker did not start: {line!r} {_log_tail(tmp_path / 'killed')}"
            time.sleep(rng.uniform(0.0, 0.08 + 0.02 * kills))  # later kills reach later stages
            if p.poll() is None:
                p.kill()
                p.wait(10)
                kills += 1
                trace.append(_progress(tmp_path / "killed"))
                continue
            out, _ = p.communicate(timeout=10)
            assert p.returncode == 0 and "done" in out, (
                f"seed {seed}: worker crashed rc {p.returncode}\n{_log_tail(tmp_path / 'killed')}"
            )
            finished = True
            break
        if not finished:
            _run_to_end(killed_chain, tmp_path / "killed", min_block)

    print(f"restart test: seed {seed}, {kills} kills, finished by itself: {finished}")
    print("  DB at each kill (states / evidence settled of total / weights rows):\n  " + "\n  ".join(trace))
    assert kills >= 3, f"seed {seed}: only {kills} kills landed; the test did not test restarts"
    clean, killed = StateDB(tmp_path / "clean", readonly=True), StateDB(tmp_path / "killed", readonly=True)
    want, got = snapshot(clean), snapshot(killed)
    assert got == want, f"seed {seed}: killed run differs\nclean:  {want}\nkilled: {got}"
    # the scenario itself resolved as designed
    by_hotkey = {v[0]: v for v in want["contributions"].values()}
    assert by_hotkey["m2"][2] == "duplicate" and by_hotkey["m6"][2] == "duplicate"
    assert by_hotkey["m3"][1] == "failed" and by_hotkey["m7"][2] == "malformed"
    assert by_hotkey["m8"][3] == "fetch"  # the stage; then why, in both runs:
    for db in (clean, killed):
        (why,) = db.con.execute("SELECT reason FROM contributions WHERE hotkey='m8'").fetchone()
        assert why.startswith("fetch: digest_mismatch"), why
    assert {t: c[1] for t, c in want["crowns"].items()} == {
        "norm.rmsnorm": "m1",
        "activation.silu_and_mul": "m4",
        "rope.neox": "m5",
    }
    clean.close()
    killed.close()
    for state, chain in ((tmp_path / "clean", clean_chain), (tmp_path / "killed", killed_chain)):
        _check_invariants(state, chain)
