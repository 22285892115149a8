"""Sample what the lent box is doing while the arena times windows: GPU SM/memory clocks,
utilisation, power, temperature and clock-event reasons (nvidia-smi), and host CPU busy/steal
(/proc/stat), each line stamped with time.time() so it joins the windows' `at` stamps.

Why: B/B′ drift on the H200 comes from phases 10-15 % slow, 2-10 windows long
(docs/benchmarks.md). Whether they are GPU clock events or host CPU contention decides the
remedy (a GPU-bound workload, or nothing the arena can fix).

    python3 scripts/box_monitor.py --out monitor.jsonl &   # stop with kill (SIGTERM)
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
import time

GPU_FIELDS = ("index", "clocks.sm", "clocks.mem", "utilization.gpu", "power.draw", "temperature.gpu")
REASONS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")


def _cpu() -> tuple[int, int, int]:
    """(busy, steal, total) jiffies over all CPUs."""
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (parts + [0] * 8)[:8]
    return user + nice + system + irq + softirq, steal, sum(parts[:8])


def _gpu_lines(out, period_ms: int, lock: threading.Lock) -> None:
    for reason in REASONS:
        cmd = [
            "nvidia-smi",
            f"--query-gpu={','.join(GPU_FIELDS + (reason,))}",
            "--format=csv,noheader,nounits",
            f"-lms={period_ms}",
        ]
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except FileNotFoundError:
            return
        got = False
        for line in proc.stdout:
            vals = [v.strip() for v in line.split(",")]
            if len(vals) != len(GPU_FIELDS) + 1:
                continue
            got = True
            rec = {"t": round(time.time(), 3), "src": "gpu"}
            for k, v in zip(GPU_FIELDS + ("reasons",), vals):
                try:
                    rec[k] = float(v) if k != "reasons" else v
                except ValueError:
                    rec[k] = v
            with lock:
                out.write(json.dumps(rec) + "\n")
                out.flush()
        if got:
            return


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--period-ms", type=int, default=250)
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    lock = threading.Lock()
    with open(a.out, "a") as out:
        threading.Thread(target=_gpu_lines, args=(out, a.period_ms, lock), daemon=True).start()
        prev = _cpu()
        while True:
            time.sleep(a.period_ms / 1000)
            now = _cpu()
            d = [n - p for n, p in zip(now, prev)]
            prev = now
            if d[2] > 0:
                with lock:
                    out.write(
                        json.dumps(
                            {
                                "t": round(time.time(), 3),
                                "src": "cpu",
                                "busy": round(d[0] / d[2], 4),
                                "steal": round(d[1] / d[2], 4),
                            }
                        )
                        + "\n"
                    )
                    out.flush()


if __name__ == "__main__":
    sys.exit(main())
