"""The receipts dir is a host dir the engine's sandbox uid writes; the host reads it back as root
after the run (seams.receipts.read_receipts). Whatever the candidate left there (a symlink to a
host secret outside its view, /dev/zero, a FIFO, a huge file, a million files) must neither be
followed, nor hang or balloon the validator, nor be copied into result.json: it is an unreadable
receipt, and the verdict is FAIL (red team 2026-12-01, `arena/receipt_symlink_host`)."""

from __future__ import annotations

import json
import os
import sys
import threading
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "arena"))

import arena_harness as h  # noqa: E402

from cacheon_subnet.bundle import load_bundle  # noqa: E402
from seams import receipts  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "arena"
SECRET = Path("/root/.cacheon-rt-receipt-secret.json")  # the path the bundle links to


def _read(d: Path, timeout: float = 20.0) -> list[dict]:
    """read_receipts in a thread: a read that blocks (a FIFO) is a failure, not a hung suite."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(receipts.read_receipts(d)), daemon=True)
    t.start()
    t.join(timeout)
    assert out, f"read_receipts({d}) did not return within {timeout:.0f} s (blocked)"
    return out[0]


def _unreadable(got: list[dict], what: str) -> None:
    assert got and all(r["role"] == "unreadable" for r in got), got
    assert any(what in e for r in got for e in r["errors"]), got


def test_a_symlinked_receipt_is_never_followed(tmp_path):
    secret = tmp_path / "hotkey"
    secret.write_text(json.dumps({"secretSeed": "0xfeed", "role": "scheduler"}))
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "receipt-a.json").symlink_to(secret)
    got = _read(tmp_path / "r")
    _unreadable(got, "receipt-a.json")
    assert "0xfeed" not in json.dumps(got)


def test_a_fifo_or_dev_zero_receipt_neither_hangs_nor_balloons(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    os.mkfifo(d / "receipt-fifo.json")
    _unreadable(_read(d), "receipt-fifo.json")
    (d / "receipt-fifo.json").unlink()
    (d / "receipt-zero.json").symlink_to("/dev/zero")
    _unreadable(_read(d), "receipt-zero.json")


def test_receipt_size_and_count_are_bounded(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    with open(d / "receipt-big.json", "wb") as f:
        f.truncate(receipts.MAX_RECEIPT_BYTES + 1)  # sparse: costs no disk
    _unreadable(_read(d), "receipt-big.json")
    (d / "receipt-big.json").unlink()
    for i in range(receipts.MAX_RECEIPT_FILES + 1):
        (d / f"receipt-{i}.json").write_text("{}")
    got = _read(d)
    assert len(got) == 1, len(got)
    _unreadable(got, "receipt files")


@pytest.fixture
def secret():
    if os.geteuid() != 0:
        pytest.skip("the secret stand-in lives under /root (a root host)")
    marker = f"0x{uuid.uuid4().hex}"
    SECRET.write_text(json.dumps({"secretSeed": marker, "ss58Address": "5Fake"}))
    SECRET.chmod(0o600)
    try:
        yield marker
    finally:
        SECRET.unlink(missing_ok=True)


@pytest.mark.slow
def test_a_receipt_symlink_to_a_host_secret_through_the_arena(tmp_path, monkeypatch, secret):
    """Whole CPU arena, engines behind the wall (the static allowlist bypassed as in
    test_arena_corpus.py): the candidate links receipt-zz-planted.json to a root-only file that
    is outside its view but not outside the host's. Before the fix the host read it as root and
    wrote the secret into result.json (0644, under the arena home) as a receipt."""
    import functools

    import arena.run
    from cacheon_subnet.bundle.engine_tree import build_tree

    h.runtime_env(tmp_path, monkeypatch)
    monkeypatch.setattr(arena.run, "build_tree", functools.partial(build_tree, scan_policy=False))
    monkeypatch.setenv("SGLANG_RT_RECEIPT_PLANT", "secret")
    r = h.run(load_bundle(CORPUS / "receipt_symlink_host"), tmp_path)
    result = (tmp_path / "work" / "result.json").read_text()
    assert secret not in result and secret not in json.dumps(r), "the host copied a secret it followed a link to"
    assert r["verdict"] == "FAIL", r["reason"]
    assert "receipt-zz-planted.json: a symlink (never followed)" in r["reason"], r["reason"]
