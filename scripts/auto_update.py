#!/usr/bin/env python3
"""Optional auto-update runner for a validator checkout under pm2 (off by default).

    python scripts/auto_update.py [--repo DIR] [--remote origin] [--interval 900] [--once]
        [--install-cmd "..."] [--restart-cmd "..."] [--dry-run]

Every --interval seconds: `git fetch --tags REMOTE`; the newest release tag vMAJOR.MINOR.PATCH
above the checkout's version (pyproject.toml) is checked out (detached), the package is
reinstalled (--install-cmd, default `<repo>/.venv/bin/pip install -e '<repo>[gpu,chain]'`: the
extras a validator runs with, so a release that moves the SGLang or bittensor pin moves them) and the validator
restarted (--restart-cmd, default `pm2 restart cacheon-validator`): its start-up checks then run
again on the new code. A failed reinstall puts the checkout back where it was (the next check
tries again), so the code on disk never runs over the old dependencies. Only release tags move
it: never a branch head. A checkout with local
changes is left alone (said in the log). Start it with configs/pm2/auto-update.config.js; the
subnet owner retires old versions by raising weights_version_key (docs/operators.md, Upgrades).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
import tomllib
from pathlib import Path

TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")


def parse(version: str) -> tuple[int, int, int] | None:
    m = TAG.match(version if version.startswith("v") else "v" + version)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def newest_release(tags: list[str], current: str) -> str | None:
    """The highest vX.Y.Z tag above `current` (pre-releases and other tags ignored)."""
    cur = parse(current)
    if cur is None:
        raise ValueError(f"current version {current!r} is not MAJOR.MINOR.PATCH")
    best = max(((parse(t), t) for t in tags if parse(t) is not None), default=None)
    return best[1] if best is not None and best[0] > cur else None


def _git(repo: Path, *args: str) -> str:
    r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {r.stderr.strip()[-500:]}")
    return r.stdout


def checkout_version(repo: Path) -> str:
    return tomllib.loads((repo / "pyproject.toml").read_text())["project"]["version"]


def default_install_cmd(repo: Path) -> str:
    """The install docs/operators.md prescribes: the checkout's venv, with the validator's extras
    (`gpu`: the SGLang/torch pins; `chain`: the bittensor SDK pin)."""
    return shlex.join([str(repo / ".venv" / "bin" / "pip"), "install", "-e", f"{repo}[gpu,chain]"])


def step(repo: Path, remote: str, install: str, restart: str, dry_run: bool) -> dict[str, object]:
    """One check; returns what it did (printed as a JSON line)."""
    current = checkout_version(repo)
    if _git(repo, "status", "--porcelain", "--untracked-files=no").strip():
        return {"action": "skipped", "reason": "the checkout has local changes; not updating", "version": current}
    _git(repo, "fetch", "--tags", "--force", remote)
    tag = newest_release(_git(repo, "tag", "--list", "v*").split(), current)
    if tag is None:
        return {"action": "none", "version": current}
    if dry_run:
        return {"action": "would_update", "from": current, "to": tag}
    before = _git(repo, "rev-parse", "HEAD").strip()
    _git(repo, "checkout", "--detach", f"refs/tags/{tag}")
    for cmd in (install, restart):
        r = subprocess.run(shlex.split(cmd), capture_output=True, text=True, timeout=1800)
        if r.returncode != 0:
            out = {
                "action": "failed",
                "from": current,
                "to": tag,
                "cmd": cmd,
                "rc": r.returncode,
                "stderr": r.stderr[-1000:],
            }
            if cmd == install:  # never leave new code over old dependencies: back, and retried next time
                _git(repo, "checkout", "--detach", before)
                out["rolled_back_to"] = before
            return out
    return {"action": "updated", "from": current, "to": tag}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--remote", default="origin")
    ap.add_argument("--interval", type=float, default=900.0)
    ap.add_argument("--once", action="store_true")
    ap.add_argument("--install-cmd", default=None)
    ap.add_argument("--restart-cmd", default="pm2 restart cacheon-validator")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    repo = Path(a.repo).resolve()
    install = a.install_cmd or default_install_cmd(repo)
    while True:
        try:
            out = step(repo, a.remote, install, a.restart_cmd, a.dry_run)
        except (RuntimeError, OSError, ValueError, subprocess.SubprocessError, KeyError) as e:
            out = {"action": "error", "error": str(e)[-1000:]}
        print(json.dumps({"event": "auto_update", **out}), flush=True)
        if a.once:
            return 1 if out["action"] in ("error", "failed") else 0
        time.sleep(a.interval)


if __name__ == "__main__":
    sys.exit(main())
