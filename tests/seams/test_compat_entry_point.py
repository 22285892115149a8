"""Red team 2026-12-01: `cacheon compat` was green while SGLang could never load the seam.

The canary checked SGLang's side (the group constant, `load_plugins`, the hook API) but never the
install's side: that exactly one entry point named `cacheon` in `sglang.srt.plugins` exists and
resolves to `seams.plugin:load`. A checkout run from source without `pip install` (no entry
point), or a second distribution declaring `cacheon` (SGLang keeps one plugin per name: the last
it sees, and swallows a plugin that fails to import or raises), left every engine without the seam
while compat said ALL SEAMS INTACT: every challenger then FAILed on missing receipts and nothing
could be crowned. Now compat has a row for it (exit 1) and the arena's preflight refuses to start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fake_sglang
import pytest

import seams.entry as entry
from arena import run as arena_run
from seams.compat import FAIL, OK


def _shadow(root: Path, value: str = "cacheon_shadow:load") -> None:
    info = root / "cacheon_shadow-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cacheon-shadow\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[sglang.srt.plugins]\ncacheon = {value}\n")
    (root / "cacheon_shadow.py").write_text("def load():\n    pass\n")


def _rows(root: Path) -> dict[str, Any]:
    import json

    proc = fake_sglang.run(
        root, "-c", "import json; from seams.compat import runtime_check; print(json.dumps(runtime_check().to_json()))"
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    return {"exit": report["exit_code"], **{r["name"]: (r["status"], r["detail"]) for r in report["rows"]}}


def test_intact_install_has_an_ok_entry_point_row(tmp_path: Path) -> None:
    root = tmp_path / "rt"
    fake_sglang.write(root, fake_sglang.modules())
    got = _rows(root)
    assert got[entry.ROW] == (OK, "cacheon = seams.plugin:load") and got["exit"] == 0, got


def test_a_second_cacheon_entry_point_is_broken(tmp_path: Path) -> None:
    root = tmp_path / "rt"
    fake_sglang.write(root, fake_sglang.modules())
    _shadow(root)
    got = _rows(root)
    assert got["exit"] == 1 and got.get(entry.ROW, ("", ""))[0] == FAIL, got
    assert "cacheon_shadow:load" in got[entry.ROW][1]


class _EP:
    def __init__(self, name: str, value: str, loads: Any = None) -> None:
        self.name, self.value, self._loads = name, value, loads

    def load(self) -> Any:
        if isinstance(self._loads, Exception):
            raise self._loads
        return self._loads


@pytest.mark.parametrize("case", ["missing", "other value", "import fails", "other object"])
def test_entry_point_problems(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    eps = {
        "missing": [_EP("other", "x:y")],
        "other value": [_EP("cacheon", "seams.plugin:loadx")],
        "import fails": [_EP("cacheon", "seams.plugin:load", ImportError("gone"))],
        "other object": [_EP("cacheon", "seams.plugin:load", lambda: None)],
    }[case]
    monkeypatch.setattr(entry, "entry_points", lambda group: eps if group == "sglang.srt.plugins" else [])
    assert entry.entry_point_problem(missing_ok=False), case
    assert (entry.entry_point_problem() is None) == (case == "missing"), case  # the engines get one


def _arena_host(monkeypatch: pytest.MonkeyPatch, eps: list) -> None:
    monkeypatch.setattr(entry, "entry_points", lambda group: eps)
    monkeypatch.setattr(arena_run.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: object())


def test_arena_preflight_refuses_a_broken_install(monkeypatch: pytest.MonkeyPatch) -> None:
    _arena_host(monkeypatch, [_EP("cacheon", "cacheon_shadow:load")])
    with pytest.raises(arena_run.ArenaUnavailable, match="entry point"):
        arena_run.preflight()


def test_a_source_checkout_without_an_entry_point_still_runs_the_arena(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lent GPU box runs the tree from PYTHONPATH, not a wheel: the host has no entry point,
    and each engine gets exactly ours from plugin_site. Preflight must not refuse that."""
    from arena.engine.host import plugin_site

    _arena_host(monkeypatch, [])
    arena_run.preflight()
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: [])
    site = plugin_site(tmp_path)
    assert site and "cacheon = seams.plugin:load" in next(Path(site).glob("*/entry_points.txt")).read_text()


def test_pyproject_declares_the_value_checked() -> None:
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert f'{entry.PLUGIN_NAME} = "{entry.PLUGIN_VALUE}"' in text
