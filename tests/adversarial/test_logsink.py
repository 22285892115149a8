"""A sandboxed child's output is contribution-controlled: what the host keeps of it is bounded on
disk (LogSink's cap) and what it reads back is bounded in memory (tail_of reads from the end)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from cacheon_subnet import sandbox
from cacheon_subnet.sandbox.logsink import LogSink, tail_of

FLOOD = "import os\nfor _ in range(64 * 1024): os.write(1, b'x' * 1023 + b'\\n')\nos.write(2, b'LAST-LINE\\n')\n"


def test_a_child_flooding_its_output_is_capped(tmp_path):
    sink = LogSink(tmp_path / "child.log", cap=1 << 20, keep=8 << 10)
    proc = sandbox.launch(
        [sys.executable, "-c", FLOOD],
        scratch=tmp_path / "work",
        policy=sandbox.SandboxPolicy(wall_timeout_s=60, cpu_seconds=60),
        stdout=sink.fileno(),
        stderr=subprocess.STDOUT,
    )
    sink.writer_passed()
    try:
        assert proc.wait(timeout=120) == 0
    finally:
        sandbox.stop(proc)
    sink.close()
    assert sink.kept == 1 << 20 and sink.dropped > 60 << 20, (sink.kept, sink.dropped)
    assert (tmp_path / "child.log").stat().st_size <= (1 << 20) + (8 << 10) + 200
    assert sink.tail(100).endswith("LAST-LINE\n") and tail_of(tmp_path / "child.log", 10) == "LAST-LINE\n"


def test_the_tail_of_a_huge_log_is_read_from_its_end(tmp_path):
    """A 16 GiB (sparse) worker log: reading it whole would take the host's memory."""
    log = tmp_path / "worker.log"
    with open(log, "wb") as f:
        f.truncate(16 << 30)
        f.seek(0, 2)
        f.write(b"the worker's last words\n")
    t = time.monotonic()
    assert tail_of(log, 24) == "the worker's last words\n"
    assert time.monotonic() - t < 1.0


@pytest.mark.slow
def test_a_verify_worker_flooding_its_output_leaves_only_the_cap_on_disk(tmp_path):
    """Red team 2026-12-04: the verify worker was handed worker.log itself, so a bundle past wall 1
    wrote up to its RLIMIT_FSIZE (256 MiB) onto the validator's disk per verify (and one per rank
    in a collective verify's launcher log); now its output goes through a LogSink like an engine's."""
    from cacheon_subnet.bundle import bundle_from_files
    from cacheon_subnet.sandbox.logsink import LOG_CAP
    from cacheon_subnet.verify.client import WorkerClient, WorkerConfig

    manifest = (
        b'schema = "cacheon.bundle/2"\n[bundle]\nname = "log-flood"\n[[ops]]\nslot = "norm.rmsnorm"\n'
        b'entry = "kernel:rmsnorm"\ndtypes = ["bfloat16"]\n'
    )
    kernel = (
        b"import os\n_b = b'x' * (1 << 20)\nfor _ in range(96):\n    os.write(1, _b)\nos.write(2, b'LAST-LINE\\n')\n"
        b"def rmsnorm(x, weight, out, eps):\n    pass\n"
    )
    bundle = bundle_from_files({"manifest.toml": manifest, "kernel.py": kernel}, source="<log flood>")
    client = WorkerClient(bundle, WorkerConfig())
    try:
        client.start()
        msg = {"type": "load", "ops": [{"key": "k", "slot": "norm.rmsnorm", "module": "kernel", "attr": "rmsnorm"}]}
        reply, _ = client.request(msg, None, 120)  # the import floods, then loads
        assert reply["results"]["k"]["ok"] is True, reply
        client.close()
        size = client.log_path.stat().st_size
        assert size <= LOG_CAP + (64 << 10) + 200, size >> 20
        assert client.log_tail(10) == "LAST-LINE\n"
    finally:
        client.cleanup()
