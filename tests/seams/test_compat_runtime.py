"""runtime_check() end to end, against a generated stand-in runtime (no network, no CUDA)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import fake_sglang
import pytest

from cacheon_subnet.pins import SGLANG_PIN
from seams.compat import FAIL, OK, SKIP, _resolve, static_check
from seams.entry import ROW as ENTRY_ROW
from seams.table import SEAM_ADAPTERS

REPORT = "import json; from seams.compat import runtime_check; print(json.dumps(runtime_check().to_json()))"
KERNEL_ROWS = {a.binding for a in SEAM_ADAPTERS if "sgl_kernel" in a.requires}


def _runtime(root: Path) -> dict:
    proc = fake_sglang.run(root, "-c", REPORT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _status(report: dict) -> dict[str, tuple[str, str]]:
    return {r["name"]: (r["status"], r["detail"]) for r in report["rows"]}


def _fake(tmp_path: Path, **kw: object) -> tuple[Path, dict[str, str]]:
    return tmp_path / "rt", fake_sglang.modules(**kw)  # type: ignore[arg-type]


def test_intact_runtime_exit_0_and_agrees_with_static(tmp_path: Path) -> None:
    root, mods = _fake(tmp_path)
    fake_sglang.write(root, mods)
    report = _runtime(root)
    assert report["found"] == SGLANG_PIN and report["exit_code"] == 0, report
    assert {r["status"] for r in report["rows"]} == {OK}
    assert [r["name"] for r in report["rows"] if r["kind"] == "seam"] == [a.binding for a in SEAM_ADAPTERS]
    static = static_check(root)  # the same tree read without importing: same verdict row by row
    # the entry-point row is the install's, not SGLang's: runtime only (test_compat_entry_point.py)
    assert [(r.name, r.status) for r in static.rows] == [
        (r["name"], r["status"]) for r in report["rows"] if r["name"] != ENTRY_ROW
    ]
    proc = fake_sglang.run(root, "-m", "cacheon_subnet.cli", "compat")
    assert proc.returncode == 0 and "ALL SEAMS INTACT" in proc.stdout, proc.stdout + proc.stderr


def test_renamed_parameter_exit_1(tmp_path: Path) -> None:
    root, mods = _fake(tmp_path)
    mod = SEAM_ADAPTERS[0].module
    last = SEAM_ADAPTERS[0].params[-1]
    mods[mod] = mods[mod].replace(f", {last})", f", {last}_v2)")
    fake_sglang.write(root, mods)
    report = _runtime(root)
    status, detail = _status(report)[SEAM_ADAPTERS[0].binding]
    assert (status, report["exit_code"]) == (FAIL, 1) and f"renamed '{last}' -> '{last}_v2'" in detail
    proc = fake_sglang.run(root, "-m", "cacheon_subnet.cli", "compat")
    assert proc.returncode == 1 and f"BROKEN: {SEAM_ADAPTERS[0].binding}" in proc.stdout


def test_other_version_exit_2_names_both(tmp_path: Path) -> None:
    root, mods = _fake(tmp_path, version="0.5.14")
    fake_sglang.write(root, mods)
    proc = fake_sglang.run(root, "-m", "cacheon_subnet.cli", "compat")
    assert proc.returncode == 2
    assert f"pinned {SGLANG_PIN}, found 0.5.14 -- DIFFERS from pin" in proc.stdout


def test_kernel_absent_skips(tmp_path: Path) -> None:
    root, mods = _fake(tmp_path, kernel=False)
    fake_sglang.write(root, mods)
    if importlib.util.find_spec("sgl_kernel") is not None:
        pytest.skip("a real sgl_kernel is installed in this environment")
    report = _runtime(root)
    skipped = {n: d for n, (s, d) in _status(report).items() if s == SKIP}
    assert set(skipped) == KERNEL_ROWS and all("requires sgl_kernel" in d for d in skipped.values())
    assert report["exit_code"] == 0


def test_kernel_import_failure_skips_with_reason(tmp_path: Path) -> None:
    root, mods = _fake(tmp_path)
    mods["sgl_kernel"] = 'raise RuntimeError("no CUDA device is visible")\n'
    fake_sglang.write(root, mods)
    report = _runtime(root)
    for name in KERNEL_ROWS:
        status, detail = _status(report)[name]
        assert status == SKIP and "RuntimeError: no CUDA device is visible" in detail


def test_missing_dependency_skips_but_moved_module_fails(tmp_path: Path) -> None:
    root, mods = _fake(tmp_path)
    first, second = SEAM_ADAPTERS[0], SEAM_ADAPTERS[1]
    assert first.module != second.module
    mods[first.module] = "import cacheon_absent_dependency_xyz\n" + mods[first.module]
    del mods[second.module]  # the defining module moved away inside sglang
    fake_sglang.write(root, mods)
    rows = _status(_runtime(root))
    assert rows[first.binding][0] == SKIP and "cacheon_absent_dependency_xyz" in rows[first.binding][1]
    assert rows[second.binding][0] == FAIL and second.module in rows[second.binding][1]


def test_hook_api_break_fails(tmp_path: Path) -> None:
    root, mods = _fake(tmp_path)
    reg = "sglang.srt.plugins.hook_registry"
    mods[reg] = mods[reg].replace('    AROUND = "around"\n', "").replace("hook_type=HookType.AFTER", "kind=None")
    fake_sglang.write(root, mods)
    report = _runtime(root)
    rows = _status(report)
    assert rows["HookType"][0] == FAIL and "AROUND" in rows["HookType"][1]
    assert rows["HookRegistry.register"][0] == FAIL and report["exit_code"] == 1


def test_sglang_absent_exit_2() -> None:
    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("sglang is installed in this environment")
    proc = subprocess.run(
        [sys.executable, "-m", "cacheon_subnet.cli", "compat"],
        capture_output=True,
        text=True,
        cwd=fake_sglang.REPO,
        timeout=120,
    )
    assert proc.returncode == 2
    # absent is said as absent, not as a version that "differs" (issue 18)
    assert f"pinned {SGLANG_PIN}, SGLang not installed here" in proc.stdout
    assert "SGLang NOT INSTALLED" in proc.stdout and "DIFFERS" not in proc.stdout and "unknown" not in proc.stdout
    assert proc.stdout.count("SKIP") >= len(SEAM_ADAPTERS)


def test_branch_only_binding_is_skipped_not_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "cacheon_guard_probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "defs.py").write_text("def f(a):\n    pass\n")
    (pkg / "consumer.py").write_text("_on = False\nif _on:\n    from cacheon_guard_probe.defs import f\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    obj, status, why = _resolve("cacheon_guard_probe.consumer:f")
    assert obj is None and status == SKIP and "only under a branch not taken" in why
    obj, status, why = _resolve("cacheon_guard_probe.consumer:g")
    assert obj is None and status == FAIL
    for name in [m for m in sys.modules if m.startswith("cacheon_guard_probe")]:
        monkeypatch.delitem(sys.modules, name)
