"""A sandboxed child's output is contribution-controlled: what the host keeps of it is bounded on
disk (LogSink's cap) and what it reads back is bounded in memory (tail_of reads from the end)."""

from __future__ import annotations

import subprocess
import sys
import time

from cacheon_subnet import sandbox
from cacheon_subnet.sandbox.logsink import LogSink, tail_of

FLOOD = "import os\nfor _ in range(64 * 1024): os.write(1, b'x' * 1023 + b'\\n')\nos.write(2, b'LAST-LINE\\n')\n"


def test_a_child_flooding_its_output_is_capped(tmp_path):
    sink = LogSink(tmp_path / "child.log", cap=1 << 20, keep=8 << 10)
    proc = sandbox.launch([sys.executable, "-c", FLOOD], scratch=tmp_path / "work",
                          policy=sandbox.SandboxPolicy(wall_timeout_s=60, cpu_seconds=60),
                          stdout=sink.fileno(), stderr=subprocess.STDOUT)
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
