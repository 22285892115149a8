"""CPU cost of the static scan and the normalized identity on the worst bundle shapes, at the caps.

Each measurement runs in a fresh process under RLIMIT_CPU = --timeout (a killed one prints
`>T`), builds its bundle first (not counted), then times one call with time.process_time():

    scan      policy.scan_files(files)                     (in-process, what the child runs)
    identity  identity.normalized_identity(bundle)         (in-process)
    bounded   policy_bound.static_check(bundle, identity=True): the product path, scan + identity in
              one bounded child behind the sandbox wall (wall seconds; the child's own CPU: `child_cpu`)

    .venv/bin/python scripts/scan_scaling.py                       # every shape, scan + identity + bounded
    .venv/bin/python scripts/scan_scaling.py --chain 250,1000,4000 --what scan   # the issue's chain
    .venv/bin/python scripts/scan_scaling.py --shapes chain_callee_after --timeout 600
    .venv/bin/python scripts/scan_scaling.py --examples      # every example through the bounded child

Shapes: scripts/scan_shapes.py. Numbers: docs/benchmarks.md ("Session 13 ... static scan").
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def _files(shape: str) -> dict[str, bytes]:
    import scan_shapes

    if shape.startswith("chain:"):
        return scan_shapes.chain(int(shape.split(":")[1]))
    return scan_shapes.SHAPES[shape]()


def one(shape: str, what: str) -> dict[str, object]:
    from cacheon_subnet.bundle import bundle_from_files

    files = _files(shape)
    bundle = bundle_from_files(files)
    py = sum(len(v) for k, v in files.items() if k.endswith(".py"))
    out: dict[str, object] = {"shape": shape, "what": what, "files": len(files), "py_bytes": py}
    t0, w0 = time.process_time(), time.monotonic()
    if what == "scan":
        from cacheon_subnet.policy.scan import scan_files

        out["findings"] = len(scan_files(files))
    elif what == "identity":
        from cacheon_subnet.bundle.identity.normalize import normalized_identity

        out["identity"] = (normalized_identity(bundle) or "none")[:17]
    else:
        from cacheon_subnet.verify.static.bound import static_check

        res = static_check(bundle, identity=True)
        out.update(
            findings=len(res.findings),
            child_cpu=round(res.cpu_s, 2),
            identity=(res.norm_id or "none")[:17],
            breach=res.breach,
        )
    out["cpu_s"] = round(time.process_time() - t0, 3)
    out["wall_s"] = round(time.monotonic() - w0, 3)
    out["maxrss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return out


def measure(shape: str, what: str, timeout: int) -> dict[str, object]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (timeout, timeout + 1))

    r = subprocess.run(
        [sys.executable, __file__, "--one", shape, "--what", what],
        capture_output=True,
        text=True,
        preexec_fn=limit,
        timeout=timeout * 4 + 60,
        check=False,
    )  # noqa: PLW1509 - a measurement tool
    if r.returncode != 0:
        return {
            "shape": shape,
            "what": what,
            "cpu_s": f">{timeout}" if r.returncode < 0 else "error",
            "error": (r.stderr or r.stdout)[-300:],
        }
    return json.loads(r.stdout.strip().splitlines()[-1])


def examples() -> int:
    """The honest side of the budget: scan + identity of every example, through the product path."""
    from cacheon_subnet.bundle import load_bundle
    from cacheon_subnet.verify.static.bound import SCAN_CPU_S, forget, static_check

    worst = 0.0
    for manifest in sorted((HERE.parent / "examples").rglob("manifest.toml")):
        forget()
        t0 = time.monotonic()
        res = static_check(load_bundle(manifest.parent), identity=True)
        worst = max(worst, res.cpu_s)
        print(
            f"{manifest.parent.relative_to(HERE.parent)!s:45s} findings={len(res.findings):3d} "
            f"child_cpu={res.cpu_s:.3f} wall_s={time.monotonic() - t0:.3f}"
            + (f" {res.findings[-1][:160]}" if res.breach else ""),
            flush=True,
        )
    print(f"worst child CPU {worst:.3f} s of the {SCAN_CPU_S} s budget")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="", help="comma-separated names from scan_shapes.SHAPES (default: all)")
    ap.add_argument("--chain", default="", help="comma-separated def counts of the issue's chain shape")
    ap.add_argument("--what", default="scan,identity,bounded")
    ap.add_argument("--timeout", type=int, default=120, help="CPU seconds per measurement")
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)
    ap.add_argument("--examples", action="store_true", help="every bundle under examples/: the bounded child's CPU")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.what)))
        return 0
    if args.examples:
        return examples()
    import scan_shapes

    shapes = [f"chain:{n}" for n in args.chain.split(",") if n]
    if args.shapes or not shapes:
        shapes += [s for s in (args.shapes.split(",") if args.shapes else scan_shapes.SHAPES) if s]
    rows = []
    for shape in shapes:
        for what in args.what.split(","):
            row = measure(shape, what, args.timeout)
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                extra = f" child_cpu={row['child_cpu']}" if "child_cpu" in row else ""
                print(
                    f"{shape:22s} {what:9s} files={row.get('files', '?'):>5} py={row.get('py_bytes', '?'):>7} "
                    f"cpu_s={row['cpu_s']!s:>8} wall_s={row.get('wall_s', '?')!s:>8} "
                    f"rss={row.get('maxrss_mib', '?')}MiB{extra}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
