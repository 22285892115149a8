"""The release's serving policy records the engine settings a crowned slot needs (issue 33 item 3):
attention.decode routes the triton backend's decode, so it takes effect only with
`--attention-backend triton` (SGLang's default decode attention on Hopper is FA3). `release verify`
and the runtime say so in one line; a descriptor that drops the setting is refused; a scheduler
started without it is warned; a release is never built from a crown under re-measure."""

from __future__ import annotations

import logging
import sqlite3
import time
import types
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cacheon_subnet.errors import UsageError
from cacheon_subnet.release import runtime
from cacheon_subnet.release.build import build_release, from_bundles, from_state
from cacheon_subnet.release.descriptor import ENGINE_NEEDS, parse
from cacheon_subnet.release.sign import _layout
from cacheon_subnet.release.verify import _policy, verify_wheel
from cacheon_subnet.release.wheel import read_wheel
from tests.release.fixtures import REPO, built, owner, signed, versions  # noqa: F401 - fixtures
from tests.release.test_release_build import _state

LINE = (
    "serving: attention.decode takes effect only with --attention-backend triton (the crown replaces the "
    "triton backend's decode_attention_fwd; SGLang's default decode attention on Hopper is FA3, which never calls it)"
)


def _desc(wheel: Path) -> Any:
    members = read_wheel(wheel)
    pkg, _ = _layout(members, str(wheel))
    return parse(members[f"{pkg}/release.json"])


def test_the_decode_crown_records_the_triton_backend_and_verify_says_it(signed: Path, owner: Any, versions) -> None:
    versions()
    (need,) = _desc(signed).policy.engine
    assert (need.slot, need.server_arg, need.value, need.flag) == (
        "attention.decode",
        "attention_backend",
        "triton",
        "--attention-backend triton",
    )
    report = verify_wheel(signed, owner.ss58_address)
    assert report.findings == () and report.runtime[0] == LINE and report.runtime.count(LINE) == 1
    assert LINE in report.render()


def test_a_slot_that_needs_no_setting_records_none(tmp_path: Path) -> None:
    wheel, desc = build_release(from_bundles([str(REPO / "examples" / "norm.rmsnorm")]), tmp_path)
    assert "norm.rmsnorm" not in ENGINE_NEEDS and desc.policy.engine == () and _desc(wheel).policy.engine == ()


def test_a_descriptor_that_drops_or_changes_the_setting_is_refused(signed: Path) -> None:
    desc = _desc(signed)
    assert _policy(desc) == []
    dropped = _policy(replace(desc, policy=replace(desc.policy, engine=())))
    assert [(f.check, f.detail) for f in dropped] == [
        ("policy", "engine settings [] != those the crowned slots need ['--attention-backend triton']")
    ]
    (need,) = desc.policy.engine
    other = _policy(replace(desc, policy=replace(desc.policy, engine=(replace(need, value="fa3"),))))
    assert [f.check for f in other] == ["policy"] and "--attention-backend fa3" in other[0].detail


def _installed(wheel: Path, site: Path) -> Path:
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    (pkg,) = [p for p in site.iterdir() if p.is_dir() and not p.name.endswith(".dist-info")]
    return pkg


@pytest.mark.parametrize(
    ("attention", "decode", "warned"),
    [
        ("triton", None, False),
        ("fa3", None, True),  # SGLang's Hopper default: the crown loads but is never called
        ("fa3", "triton", False),  # the decode override is what decode runs
        ("triton", "fa3", True),
    ],
)
def test_the_scheduler_is_warned_when_the_engine_does_not_run_the_setting(
    signed: Path, tmp_path: Path, versions, caplog, attention: str, decode: str | None, warned: bool
) -> None:
    versions()
    p = runtime.plan(_installed(signed, tmp_path / "site"))
    assert isinstance(p, runtime.Plan)
    sa = types.SimpleNamespace(attention_backend=attention, decode_attention_backend=decode)
    with caplog.at_level(logging.WARNING, logger="cacheon.release"):
        out = runtime.scheduler_hook(p, lambda rank, environ: True)(lambda *a, **k: "scheduler", "self", sa, "pa", 0, 0)
    assert out == "scheduler"
    said = "attention.decode needs --attention-backend triton, this engine runs attention_backend="
    assert (said in caplog.text) is warned


def test_the_plugin_says_the_setting_when_it_loads(signed: Path, tmp_path: Path, versions, caplog, monkeypatch) -> None:
    versions()
    monkeypatch.setattr(runtime, "register", lambda p: None)
    with caplog.at_level(logging.INFO, logger="cacheon.release"):
        assert runtime.load_release(_installed(signed, tmp_path / "site")) is True
    assert caplog.text.count(LINE) == 1


def test_no_release_is_built_from_a_crown_under_re_measure(tmp_path: Path) -> None:
    state = _state(tmp_path)
    assert len(from_state(state)) == 1
    con = sqlite3.connect(state / "validator.sqlite")
    con.execute(
        "INSERT INTO pin_bumps(target, contribution_id, hotkey, old_arena, new_arena, new_pins, state, opened_at)"
        " VALUES ('attention.decode', 'cid-1', 'hk', 'arena-x', 'arena-y', '{}', 'open', ?)",
        (time.time(),),
    )
    con.commit()
    con.close()
    with pytest.raises(UsageError, match="being re-measured after an arena change"):
        from_state(state)
