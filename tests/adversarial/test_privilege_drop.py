"""Class 3 (issue 14): the drop to an unprivileged user is never silently skipped.

From inside: contribution code (tests/adversarial/oswall/privileges.py, run in sandbox.launch as
if every static check had been bypassed) holds no root id, no capability, no supplementary group,
has no_new_privs set and cannot take root back. From outside: where the drop cannot be made or
did not happen, launching refuses with what to fix instead of running anything as root. The
monkeypatched variants of these refusals are in tests/sandbox/test_sandbox.py; these use real files."""

from __future__ import annotations

import ast
import sys
import tempfile
from pathlib import Path

import pytest

from cacheon_subnet import sandbox
from cacheon_subnet.sandbox import launcher
from tests.adversarial.test_oswall import POLICY, assert_blocked, run_attack

LABELS = {
    "root_ids",
    "capabilities",
    "bounding_set",
    "no_new_privs_off",
    "supplementary_groups",
    "setuid_root",
    "setgroups_root",
    "chown_to_root",
}


def test_contribution_code_holds_no_root_and_cannot_take_it_back(tmp_path):
    res, text = run_attack("privileges.py", {}, tmp_path)
    assert_blocked(res, text, LABELS)
    cfg = sandbox.wall_config()
    uids = ast.literal_eval(res["root_ids"][1].split(" Gid ")[0].removeprefix("Uid "))  # real, effective, saved, fs
    assert len(uids) == 4 and all(cfg.uid <= int(u) < cfg.uid + cfg.count for u in uids), res["root_ids"]


def test_control_weak_mode_runs_as_root(tmp_path, monkeypatch):
    """Control: with the wall off (same uid as this root test process) the same script sees root."""
    monkeypatch.setenv("CACHEON_SANDBOX", "weak")
    res, _ = run_attack("privileges.py", {}, tmp_path)
    assert res["root_ids"][0] == "ESCAPED" and res["capabilities"][0] == "ESCAPED", res


@pytest.fixture
def fresh_preflight():
    launcher.preflight.cache_clear()
    yield
    launcher.preflight.cache_clear()


def _launch(tmp_path: Path) -> None:
    proc = sandbox.launch([sys.executable, "-c", "pass"], scratch=tmp_path / "w", policy=POLICY)
    sandbox.stop(proc)


def test_a_venv_in_a_home_others_cannot_read_fails_closed(tmp_path, monkeypatch, fresh_preflight):
    """The issue's case: the interpreter's packages live under a 0700 home. A real directory of
    that mode on sys.path (as a venv under /root puts its site-packages) stops every launch."""
    home = Path(tempfile.mkdtemp(prefix="cacheon-home-", dir="/tmp"))
    site = home / ".venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    try:
        home.chmod(0o700)
        monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
        with pytest.raises(sandbox.SandboxError, match="cannot read the interpreter") as e:
            _launch(tmp_path)
        assert f"{home} (mode drwx------" in str(e.value), e.value  # names the dir that blocks it
        home.chmod(0o755)  # control: the same dir made readable launches
        launcher.preflight.cache_clear()
        _launch(tmp_path)
    finally:
        sandbox.remove_tree(home)


def test_a_setpriv_that_skips_the_drop_fails_closed(tmp_path, monkeypatch, fresh_preflight):
    """A setpriv that accepts its options and drops nothing (execs the rest as root): the
    preflight child reports uid 0, not the leased uid, and no child is ever started."""
    d = Path(tempfile.mkdtemp(prefix="cacheon-fake-setpriv-", dir="/tmp"))
    fake = d / "setpriv"
    fake.write_text('#!/bin/sh\nwhile [ "${1#--}" != "$1" ]; do shift; done\nexec "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("CACHEON_SETPRIV", str(fake))
    try:
        with pytest.raises(sandbox.SandboxError, match="the wall does not start") as e:
            _launch(tmp_path)
        assert str(e.value).endswith("(rc 0): '0'."), e.value  # the child ran as root: refused
    finally:
        sandbox.remove_tree(d)
