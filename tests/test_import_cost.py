"""Commands that never touch a tensor must not import torch (~2.5 CPU-s per process).

`cacheon digest`, `pack`, `slots`, `miner init`, `--help`, the validator's state, status and loop
modules: each CLI process, test subprocess and restart worker used to pay a torch import
because bundle -> manifest -> slots imported it at module top. torch is now imported by the
functions that make or read tensors. One fresh interpreter runs the steps below in order and
reports, after each, whether torch (or triton) has been loaded: the first step that loads it is
the one that regressed.
"""

import json
import subprocess
import sys

from conftest import EXAMPLES, REPO

HEAVY = ("torch", "triton")

PROBE = r"""
import contextlib, io, json, sys
heavy, steps = json.loads(sys.argv[1]), json.loads(sys.argv[2])
report = []
for label, code in steps:
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, {})
    report.append([label, [m for m in heavy if m in sys.modules]])
print(json.dumps(report))
"""

STEPS = [
    ("import cacheon_subnet.cli", "import cacheon_subnet.cli"),
    (
        "build the CLI parser (every verb, extensions included)",
        "from cacheon_subnet.cli import build_parser; build_parser()",
    ),
    (
        "the slot catalog and every signature",
        "from cacheon_subnet.slots import all_slots; [s.signature() for s in all_slots()]",
    ),
    (
        "load a bundle (bundle rules, manifest parsing against the catalog)",
        f"from cacheon_subnet.bundle import load_bundle; load_bundle({str(EXAMPLES / 'norm.rmsnorm')!r})",
    ),
    (
        "cacheon digest",
        f"from cacheon_subnet.cli import main; assert main(['digest', {str(EXAMPLES / 'norm.rmsnorm')!r}]) == 0",
    ),
    ("cacheon slots --json", "from cacheon_subnet.cli import main; assert main(['slots', '--json']) == 0"),
    (
        "the static policy scan (cacheon pack, the validator's static screen)",
        "from cacheon_subnet.bundle import load_bundle; from cacheon_subnet.validator.screen import static_screen; "
        f"assert static_screen(load_bundle({str(EXAMPLES / 'norm.rmsnorm')!r})).passed",
    ),
    (
        "the validator's state, status, ledger, publish and loop modules",
        "import cacheon_subnet.validator.state, cacheon_subnet.validator.status, cacheon_subnet.validator.ledger, "
        "cacheon_subnet.validator.publish, cacheon_subnet.validator.loop",
    ),
]


def test_tensorless_paths_do_not_import_torch():
    r = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(HEAVY), json.dumps(STEPS)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert [label for label, _ in report] == [label for label, _ in STEPS]
    loaded = [(label, mods) for label, mods in report if mods]
    assert not loaded, f"first step that imported {loaded[0][1]}: {loaded[0][0]!r}"
