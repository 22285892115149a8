"""The static canary against real SGLang releases (and mutated copies of the pinned one)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from compat_sources import (  # noqa: F401
    OTHER_RELEASE,
    delete_def,
    edit,
    mutable_copy,
    other_tree,
    pinned_kernel,
    pinned_sglang,
    pinned_tree,
    pinned_tree_no_kernel,
    rename_param,
    replace_signature,
)

from cacheon_subnet.cli import main
from cacheon_subnet.errors import UsageError
from cacheon_subnet.pins import SGLANG_PIN
from seams.compat import FAIL, OK, SKIP, render, static_check, static_patch_point
from seams.compat_source import SourceTree
from seams.table import SEAM_ADAPTERS, by_binding

LAYERNORM = "sglang/srt/layers/layernorm.py"
DECODE = "sglang/srt/layers/attention/triton_ops/decode_attention.py"


def _rows(report) -> dict[str, object]:  # noqa: ANN001
    return {r.name: r for r in report.rows}


@pytest.fixture
def mutant(tmp_path: Path, pinned_tree: Path) -> Path:
    """A private copy of the pinned tree (symlinks until a file is edited)."""
    return mutable_copy(pinned_tree, tmp_path / "mutant")


def test_pinned_release_every_row_ok(pinned_tree: Path) -> None:
    report = static_check(pinned_tree)
    assert report.found == SGLANG_PIN and report.version_ok
    assert [r.name for r in report.rows if r.kind == "seam"] == [a.binding for a in SEAM_ADAPTERS]
    assert [(r.name, r.status, r.detail) for r in report.rows if r.status != OK] == []
    assert report.exit_code == 0
    assert "ALL SEAMS INTACT" in render(report) and "skipped" not in render(report)


def test_cli_static_exit_0_and_json(pinned_tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compat", "--source", str(pinned_tree)]) == 0
    out = capsys.readouterr().out
    assert f"pinned {SGLANG_PIN}, found {SGLANG_PIN} -- matches pin" in out
    assert main(["compat", "--source", str(pinned_tree / "sglang"), "--json"]) == 0  # the package dir works too
    payload = json.loads(capsys.readouterr().out)
    assert payload["exit_code"] == 0 and payload["found"] == SGLANG_PIN and payload["mode"] == "static"
    assert {r["status"] for r in payload["rows"]} == {OK}


def test_other_real_release_differs_exit_2(other_tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = static_check(other_tree)
    assert (report.pinned, report.found, report.exit_code) == (SGLANG_PIN, OTHER_RELEASE, 2)
    assert not report.failed  # seams intact, yet still exit 2: another runtime is another identity
    assert main(["compat", "--source", str(other_tree)]) == 2
    out = capsys.readouterr().out
    assert f"version: pinned {SGLANG_PIN}, found {OTHER_RELEASE} -- DIFFERS from pin" in out
    assert "VERSION DIFFERS" in out


def test_missing_package_skips(pinned_tree_no_kernel: Path) -> None:
    report = static_check(pinned_tree_no_kernel)
    needs_kernel = {a.binding for a in SEAM_ADAPTERS if "sgl_kernel" in a.requires}
    assert needs_kernel, "table has no sgl_kernel row any more; pick another optional package"
    assert {r.name for r in report.skipped} == needs_kernel
    assert all("requires sgl_kernel" in r.detail and "absent" in r.detail for r in report.skipped)
    assert report.exit_code == 0  # a skip is not a failure, but it is named
    assert f"skipped: {', '.join(sorted(needs_kernel))}" in render(report)


def test_mutations_name_row_and_difference(mutant: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rename_param(mutant / LAYERNORM, "RMSNorm.forward_cuda", "residual", "resid")
    delete_def(mutant / DECODE, "decode_attention_fwd")
    report = static_check(mutant)
    rows = _rows(report)
    assert {r.name for r in report.failed} == {"norm", "attention"}
    assert "renamed 'residual' -> 'resid'" in rows["norm"].detail
    assert "decode_attention_fwd not defined" in rows["attention"].detail
    assert report.exit_code == 1
    assert main(["compat", "--source", str(mutant)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  seam   norm" in out and "renamed 'residual' -> 'resid'" in out
    assert "BROKEN: norm, attention (exit 1)" in out


@pytest.mark.parametrize(
    "params, broken",
    [
        ("self, x, residual=0.5, post_residual_addition=1", None),  # defaults may change
        ("self, x, residual=None, post_residual_addition=None, extra=None", None),  # new optional param
        ("self, x, residual, post_residual_addition, extra", "new required parameter(s) extra"),
        ("self, x, post_residual_addition=None, residual=None", "parameter 'residual' moved from position 2 to 3"),
        ("self, x, residual=None", "parameter 'post_residual_addition' (position 3) missing"),
        ("self, x, *args, **kwargs", "parameter 'residual' (position 2) missing"),
        ("self, x, residual=None, /, post_residual_addition=None", "parameter 'residual' is now POSITIONAL_ONLY"),
    ],
)
def test_signature_rules(mutant: Path, params: str, broken: str | None) -> None:
    replace_signature(mutant / LAYERNORM, "RMSNorm.forward_cuda", params)
    row = _rows(static_check(mutant))["norm"]
    assert (row.status, broken is None or broken in row.detail) == (OK if broken is None else FAIL, True), row.detail


def test_plugin_and_hook_api_breaks(mutant: Path) -> None:
    edit(
        mutant / "sglang/srt/plugins/__init__.py",
        'GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"',
        'GENERAL_PLUGINS_GROUP = "sglang.plugins"',
    )
    edit(mutant / "sglang/srt/plugins/hook_registry.py", '    AROUND = "around"', '    WRAP = "around"')
    rename_param(mutant / "sglang/srt/managers/scheduler.py", "Scheduler.__init__", "tp_rank", "rank")
    rename_param(mutant / "sglang/srt/plugins/hook_registry.py", "HookRegistry.register", "hook_type", "kind")
    report = static_check(mutant)
    rows = _rows(report)
    assert {r.name for r in report.failed} == {
        "entry-point group",
        "HookType",
        "Scheduler.__init__",
        "HookRegistry.register",
    }
    assert "'sglang.plugins', expected 'sglang.srt.plugins'" in rows["entry-point group"].detail
    assert "missing member(s) AROUND" in rows["HookType"].detail
    assert "renamed 'tp_rank' -> 'rank'" in rows["Scheduler.__init__"].detail
    assert report.exit_code == 1


def test_plugins_must_still_load_in_the_scheduler(mutant: Path) -> None:
    edit(mutant / "sglang/srt/managers/scheduler.py", "    load_plugins()\n", "    pass\n")
    row = _rows(static_check(mutant))["run_scheduler_process -> load_plugins"]
    assert row.status == FAIL and "no load_plugins() call" in row.detail


def test_version_mismatch_wins_over_broken_seam(mutant: Path, capsys: pytest.CaptureFixture[str]) -> None:
    delete_def(mutant / DECODE, "decode_attention_fwd")
    edit(mutant / "sglang/_version.py", f"'{SGLANG_PIN}'", "'0.5.99'")
    report = static_check(mutant)
    assert report.found == "0.5.99" and report.failed and report.exit_code == 2
    assert "1 row(s) FAIL" in render(report)


def test_consumer_patch_points_resolve_through_imports(pinned_tree: Path) -> None:
    src = SourceTree(pinned_tree)
    rope, topk = by_binding("rope"), by_binding("moe_topk")
    ok, how = static_patch_point(src, "sglang.srt.layers.rotary_embedding.base:apply_rope_with_cos_sin_cache_inplace", rope)
    assert ok and "from sglang.jit_kernel.rope import" in how
    ok, how = static_patch_point(src, "sglang.srt.layers.moe.topk:topk_softmax", topk)  # via the sgl_kernel re-export
    assert ok and "from sgl_kernel import topk_softmax -> sgl_kernel: from sgl_kernel.moe import topk_softmax" in how
    assert not static_patch_point(src, "sglang.srt.layers.layernorm:apply_rope_with_cos_sin_cache_inplace", rope)[0]
    assert not static_patch_point(src, "sglang.srt.layers.moe.topk:topk_sigmoid", topk)[0]


def test_consumer_patch_point_broken_when_import_goes(mutant: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    point = "sglang.srt.layers.rotary_embedding.base:apply_rope_with_cos_sin_cache_inplace"
    row = dataclasses.replace(by_binding("rope"), patch_points=(point,))
    monkeypatch.setattr("seams.compat.SEAM_ADAPTERS", (row,))
    assert _rows(static_check(mutant))["rope"].status == OK
    edit(
        mutant / "sglang/srt/layers/rotary_embedding/base.py",
        "from sglang.jit_kernel.rope import apply_rope_with_cos_sin_cache_inplace",
        "from sglang.jit_kernel.rope_v2 import apply_rope_with_cos_sin_cache_inplace",
    )
    got = _rows(static_check(mutant))["rope"]
    assert got.status == FAIL and point in got.detail and "none reaches sglang.jit_kernel.rope" in got.detail


def test_not_a_source_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError):
        static_check(tmp_path)
    assert main(["compat", "--source", str(tmp_path)]) == 2
    assert "no sglang/ package" in capsys.readouterr().err


def test_skip_reasons_are_not_silent(pinned_tree_no_kernel: Path) -> None:
    text = render(static_check(pinned_tree_no_kernel))
    assert any(line.startswith(f"  {SKIP}") for line in text.splitlines())


def test_unparsable_module_fails_with_reason(mutant: Path) -> None:
    edit(mutant / DECODE, "def decode_attention_fwd(", "def decode_attention_fwd(q q, ")
    row = _rows(static_check(mutant))["attention"]
    assert row.status == FAIL and "cannot be parsed here (SyntaxError" in row.detail
