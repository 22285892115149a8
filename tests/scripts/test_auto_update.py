"""scripts/auto_update.py on real git repos: only a newer vX.Y.Z release tag moves the checkout,
then reinstall and restart run; a dirty checkout or no newer release changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import auto_update  # noqa: E402


def git(d: Path, *a: str) -> str:
    return subprocess.run(
        ["git", "-C", str(d), "-c", "user.email=t@t", "-c", "user.name=t", *a], capture_output=True, text=True, check=True
    ).stdout


def release(d: Path, version: str, tag: bool = True) -> None:
    (d / "pyproject.toml").write_text(f'[project]\nname = "x"\nversion = "{version}"\n')
    git(d, "add", "-A")
    git(d, "commit", "-qm", version)
    if tag:
        git(d, "tag", f"v{version}")


@pytest.fixture
def repos(tmp_path):
    up = tmp_path / "upstream"
    up.mkdir()
    git(up, "init", "-q")
    release(up, "0.1.0")
    subprocess.run(["git", "clone", "-q", str(up), str(tmp_path / "deployed")], check=True)
    return up, tmp_path / "deployed"


def run(deployed: Path, tmp: Path, *extra: str) -> dict:
    marks = tmp / "marks"
    cmd = [
        sys.executable,
        str(REPO / "scripts" / "auto_update.py"),
        "--repo",
        str(deployed),
        "--once",
        "--install-cmd",
        f"touch {marks}-install",
        "--restart-cmd",
        f"touch {marks}-restart",
        *extra,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return {
        **json.loads(r.stdout.strip().splitlines()[-1]),
        "rc": r.returncode,
        "installed": Path(f"{marks}-install").exists(),
        "restarted": Path(f"{marks}-restart").exists(),
    }


def test_newest_release_only_moves_forward():
    assert auto_update.newest_release(["v0.1.0", "v0.2.0", "v0.10.1", "v1.0.0rc1", "latest"], "0.2.0") == "v0.10.1"
    assert auto_update.newest_release(["v0.1.0"], "0.1.0") is None
    assert auto_update.newest_release(["v0.0.9"], "0.1.0") is None


def test_a_newer_release_is_checked_out_installed_and_restarted(repos, tmp_path):
    up, deployed = repos
    release(up, "0.2.0")
    release(up, "0.3.0", tag=False)  # a branch head, not a release: never deployed
    out = run(deployed, tmp_path)
    assert out["action"] == "updated" and out["to"] == "v0.2.0" and out["installed"] and out["restarted"], out
    assert auto_update.checkout_version(deployed) == "0.2.0"
    again = run(deployed, tmp_path)
    assert again["action"] == "none" and again["rc"] == 0


def test_dry_run_and_dirty_checkouts_change_nothing(repos, tmp_path):
    up, deployed = repos
    release(up, "0.2.0")
    assert run(deployed, tmp_path, "--dry-run")["action"] == "would_update"
    (deployed / "pyproject.toml").write_text((deployed / "pyproject.toml").read_text() + "# local edit\n")
    out = run(deployed, tmp_path)
    assert out["action"] == "skipped" and not out["installed"] and not out["restarted"]
    assert auto_update.checkout_version(deployed) == "0.1.0"


def test_the_default_reinstall_keeps_the_validators_extras(tmp_path):
    """A release that moves the SGLang or bittensor pin must move them: the default reinstall is
    the documented install (the gpu and chain extras), not the bare package."""
    import shlex

    cmd = shlex.split(auto_update.default_install_cmd(tmp_path / "co dir"))
    assert cmd == [str(tmp_path / "co dir" / ".venv" / "bin" / "pip"), "install", "-e", f"{tmp_path / 'co dir'}[gpu,chain]"]


def test_a_failed_reinstall_puts_the_checkout_back_and_is_retried(repos, tmp_path):
    """The editable install runs the checkout's code: a release checked out over dependencies that
    failed to install would start (at the next restart) on the wrong pins. So it goes back."""
    up, deployed = repos
    release(up, "0.2.0")
    out = run(deployed, tmp_path, "--install-cmd", "false")
    assert out["action"] == "failed" and out["rc"] == 1 and "rolled_back_to" in out and not out["restarted"], out
    assert auto_update.checkout_version(deployed) == "0.1.0"
    again = run(deployed, tmp_path)  # the next check tries the release again
    assert again["action"] == "updated" and again["to"] == "v0.2.0" and auto_update.checkout_version(deployed) == "0.2.0"
