"""Red-team: sources built to break the scanner itself, not to slip past its rules.

The scan runs in trusted processes (`cacheon verify`'s host, the validator's screen stage, every
scheduler rank opening the engine tree). A bundle that makes it raise (RecursionError in the
parser or the checker, ValueError on NUL bytes) or eat the host's memory (a 16 MiB file parses
into ~7 GB of AST; 16 of them fit the archive limits) is a denial of service; each must end as
a finding with its rule, quickly, and never as an exception.
"""

from __future__ import annotations

import time

import pytest

from cacheon_subnet.bundle import bundle_from_files
from cacheon_subnet.policy.scan import MAX_DEPTH, MAX_SOURCE_BYTES, scan_files
from cacheon_subnet.validator.screen import static_screen
from cacheon_subnet.verify import VerifyOptions, runner, verify_bundle

MANIFEST = b'schema = "cacheon.bundle/2"\n[[ops]]\nslot = "norm.rmsnorm"\nentry = "kernel:rmsnorm"\ndtypes = ["bfloat16"]\n'
HONEST = (
    "import torch\n\n\ndef rmsnorm(x, weight, out, eps):\n    x32 = x.to(torch.float32)\n"
    "    out.copy_(x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps) * weight)\n"
)


def rules(files: dict[str, bytes]) -> set[tuple[str, int, str]]:
    return {(f.path, f.line, f.rule) for f in scan_files(files)}


@pytest.mark.parametrize(
    "expr",
    [
        "+".join(["x"] * 50000),  # left-deep BinOp: RecursionError inside ast.parse
        "-" * 50000 + "x",  # unary chain: MemoryError from the parser's stack
        "x" + ".t()" * 20000,  # RecursionError during ast construction
        "x if x else " * 5000 + "x",
    ],
)
def test_parser_giving_up_is_a_finding(expr: str) -> None:
    assert rules({"kernel.py": f"def f(x):\n    return {expr}\n".encode()}) == {("kernel.py", 1, "P010")}


def test_nul_byte_is_a_finding() -> None:
    """load_bundle refuses NUL already; scan_files (also called on engine trees) must not raise."""
    assert rules({"kernel.py": b"def f(x):\n    return x\x00\n"}) == {("kernel.py", 1, "P010")}


@pytest.mark.parametrize("n", [300, 2000])
def test_deep_but_parseable_is_refused(n: int) -> None:
    """Parses (300 chained calls), but the checker recursed ~3 frames per level: RecursionError."""
    got = rules({"kernel.py": f"def f(x):\n    return x{'.t()' * n}\n".encode()})
    assert got in ({("kernel.py", 2, "P015")}, {("kernel.py", 1, "P010")}), got


def test_depth_bound_leaves_real_kernels_alone() -> None:
    src = "def f(x):\n    return " + "abs(" * (MAX_DEPTH // 3) + "x" + ")" * (MAX_DEPTH // 3) + "\n"
    assert rules({"kernel.py": src.encode()}) == set()


def test_reexport_chain_through_many_files_is_a_finding() -> None:
    """`from .m<i-1> import X` in 1,500 files: the resolver recursed once per hop."""
    files = {"m0.py": b"X = 1\n", **{f"m{i}.py": f"from .m{i - 1} import X\n".encode() for i in range(1, 1500)}}
    got = rules(files)
    assert ("m1499.py", 1, "P021") in got and ("m16.py", 1, "P021") not in got


def test_oversized_python_is_refused_unparsed() -> None:
    """16 files of 16 MiB fit the archive limits; parsing them all would take ~100 GB."""
    blob = b"x = 1\n" * (MAX_SOURCE_BYTES // 6 + 1)
    t0 = time.monotonic()
    got = rules({"kernel.py": HONEST.encode(), "pad.py": blob})
    assert got == {("kernel.py", 1, "P010")} and time.monotonic() - t0 < 2


class _NoWorker:
    def __init__(self, *a, **k) -> None:
        raise AssertionError("a bundle refused by the policy reached the worker")


def test_product_paths_refuse_instead_of_raising(monkeypatch: pytest.MonkeyPatch) -> None:
    """The validator's screen stage and `cacheon verify` report policy, never a traceback."""
    deep = HONEST.replace("x.to(torch.float32)", "x.to(torch.float32)" + ".contiguous()" * 400)
    bundle = bundle_from_files({"manifest.toml": MANIFEST, "kernel.py": deep.encode()})
    screened = static_screen(bundle)
    assert not screened.passed and any("P015" in r for r in screened.reasons), screened.reasons
    monkeypatch.setattr(runner, "WorkerClient", _NoWorker)
    report = verify_bundle(bundle, VerifyOptions(device="cpu", max_cases=1))
    assert report.status == "FAIL" and report.reasons[0].startswith("policy:"), report.reasons
