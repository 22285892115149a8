"""`cacheon pin check`: a synthetic SGLang wheel that keeps every assumption passes them all; one
moved symbol (and each other known break) is reported with its location."""

from __future__ import annotations

import zipfile
from collections import defaultdict
from pathlib import Path

import pytest

from cacheon_subnet.cli import main
from seams.compat_source import SourceTree
from seams.pincheck import ASSUMPTIONS, FAIL, Kind, check, pin_check, scanned_imports

REPO = Path(__file__).resolve().parents[2]
PINNED_WHEEL = REPO / ".cacheon/sglang-src/wheels/sglang-0.5.13.post1-cp312-cp312-manylinux_2_34_x86_64.whl"


def faithful() -> dict[str, str]:
    """Module -> source that satisfies every assumption (built from the tables themselves)."""
    src: dict[str, list[str]] = defaultdict(list)
    for a in ASSUMPTIONS + scanned_imports():
        if a.kind is Kind.BASES:
            src[a.module].append(f"class {a.symbol}({', '.join(a.expect)}):\n    pass\n")
        elif a.kind is Kind.FROM:
            src[a.module].append(f"from {a.expect[0]} import {a.expect[1]} as {a.symbol}\n")
            src[a.expect[0]].append(f"def {a.expect[1]}():\n    pass\n")
        elif a.module == "sglang.srt" and a.symbol == "server_args":
            src["sglang.srt.server_args"].append("")
        else:
            src[a.module].append(f"def {a.symbol}():\n    return 1\n")
    return {m: "\n".join(dict.fromkeys(lines)) for m, lines in src.items()}


def wheel(tmp_path: Path, modules: dict[str, str], version: str = "0.5.99") -> Path:
    path = tmp_path / f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("sglang/__init__.py", "")
        z.writestr("sglang/version.py", f'__version__ = "{version}"\n')
        for mod, text in modules.items():
            z.writestr(mod.replace(".", "/") + ".py", text)
        z.writestr(f"sglang-{version}.dist-info/METADATA", f"Name: sglang\nVersion: {version}\n")
        z.writestr("sglang/big_model_weights.bin", b"\0" * 16)  # never unpacked
    return path


def _fails(report) -> dict[str, str]:
    return {f.location: f.what for f in report.findings if f.status == FAIL}


def test_faithful_wheel_keeps_every_assumption(tmp_path: Path) -> None:
    report = pin_check(str(wheel(tmp_path, faithful())))
    assert _fails(report) == {}
    assert report.canary.found == "0.5.99"


def test_moved_symbol_is_reported_with_its_location(tmp_path: Path) -> None:
    mods = faithful()
    mods["sglang.srt.layers.layernorm"] = mods["sglang.srt.layers.layernorm"].replace(
        "from sglang.jit_kernel.norm import fused_add_rmsnorm",
        "from sglang.kernels.ops.layernorm.norm import fused_add_rmsnorm",
    )
    mods["sglang.kernels.ops.layernorm.norm"] = "def fused_add_rmsnorm():\n    pass\n"
    report = pin_check(str(wheel(tmp_path, mods)))
    fails = _fails(report)
    assert list(fails) == ["sglang.srt.layers.layernorm:_jit_fused_add_rmsnorm"]
    assert (
        "was from sglang.jit_kernel.norm import fused_add_rmsnorm, now bound by from sglang.kernels.ops.layernorm.norm"
        in next(iter(fails.values()))
    )
    assert main(["pin", "check", "--wheel", str(wheel(tmp_path, mods, "0.5.98"))]) == 1


@pytest.mark.parametrize(
    ("module", "old", "new", "location", "said"),
    [
        (
            "sglang.srt.layers.layernorm",
            "class RMSNorm(MultiPlatformOp)",
            "class RMSNorm(BaseFusedOp)",
            "sglang.srt.layers.layernorm:RMSNorm",
            "base class was MultiPlatformOp, now BaseFusedOp",
        ),
        (
            "sglang.srt.server_args",
            "def get_global_server_args():\n    return 1",
            "def get_global_server_args():\n    'retired'\n    raise RuntimeError('use sglang.srt.runtime_context')",
            "sglang.srt.server_args:get_global_server_args",
            "now raises unconditionally: RuntimeError",
        ),
        (
            "sglang.jit_kernel.rope",
            "def apply_rope_with_cos_sin_cache_inplace",
            "def renamed_rope",
            "sglang.jit_kernel.rope:apply_rope_with_cos_sin_cache_inplace",
            "no longer binds apply_rope_with_cos_sin_cache_inplace",
        ),
    ],
)
def test_each_known_break_is_reported(tmp_path: Path, module: str, old: str, new: str, location: str, said: str) -> None:
    mods = faithful()
    assert old in mods[module]
    mods[module] = mods[module].replace(old, new)
    fails = _fails(pin_check(str(wheel(tmp_path, mods))))
    assert list(fails) == [location] and said in fails[location]


def test_vanished_module_says_where_the_symbol_went(tmp_path: Path) -> None:
    mods = faithful()
    body = mods.pop("sglang.jit_kernel.activation")
    mods["sglang.kernels.ops.activation"] = body
    what = _fails(pin_check(str(wheel(tmp_path, mods))))["sglang.jit_kernel.activation:silu_and_mul"]
    assert "not found" in what and "silu_and_mul is now defined in sglang.kernels.ops.activation" in what


def test_not_an_sglang_wheel_is_usage(tmp_path: Path) -> None:
    bad = tmp_path / "x.whl"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("other/__init__.py", "")
    assert main(["pin", "check", "--wheel", str(bad)]) == 2
    assert main(["pin", "check", "--wheel", str(tmp_path / "none.whl")]) == 2


def test_assumption_check_reads_a_tree(tmp_path: Path) -> None:
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text("")
    finding = check(SourceTree(tmp_path), ASSUMPTIONS[0])
    assert finding.status == FAIL and "not found" in finding.what and finding.used_by == "seams/adapters/norm.py"


@pytest.mark.skipif(not PINNED_WHEEL.is_file(), reason="the pinned SGLang wheel is not fetched on this host")
def test_the_pinned_wheel_breaks_nothing() -> None:
    report = pin_check(str(PINNED_WHEEL))
    assert report.breaks == 0 and report.exit_code == 0
