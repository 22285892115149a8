#!/usr/bin/env python
"""Weekly SGLang check: is there a newer release, and does the runtime we can see still fit?

Notification is kept apart from compatibility failure (docs: sglang_compatibility):
  * a PyPI release newer than the pin prints a GitHub `::warning::` line but exits 0 -- a bump is
    a reviewed rebaseline, never an automatic update; PyPI unreachable -> a warning, not a failure;
  * if sglang is importable, runtime_check() runs: version != pin -> 2, a broken seam -> 1;
  * if not, seam coverage is reported as skipped (no compatibility evidence is claimed);
  * --source DIR additionally runs the static check of an unpacked tree (same exit codes).
The exit code is the worst of the checks that ran (2 over 1 over 0).

    python scripts/check_sglang.py [--source DIR] [--timeout S] [--pypi-url URL]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a file from a checkout: make `seams` importable
    sys.path.insert(0, str(REPO))

from cacheon_subnet.pins import SGLANG_PIN  # noqa: E402

PYPI_URL = "https://pypi.org/pypi/sglang/json"


def _key(version: str) -> tuple:
    """Release ordering; packaging when present, else a numeric/post-release approximation."""
    try:
        from packaging.version import Version

        return (0, Version(version))
    except Exception:  # noqa: BLE001 - packaging absent or version unparsable
        nums = [int(n) for n in re.findall(r"\d+", version.split("+")[0])]
        pre = bool(re.search(r"(a|b|rc|dev)\d*", version))
        return (1, nums[:3], not pre, nums[3:])


def latest_release(url: str, timeout: float) -> str:
    req = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": "cacheon-sglang-check"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - fixed https/file URL
        return str(json.load(resp)["info"]["version"])


def check_release(pin: str, url: str, timeout: float) -> None:
    """Print what PyPI says; never affects the exit code."""
    try:
        latest = latest_release(url, timeout)
    except (OSError, urllib.error.URLError, ValueError, KeyError, TimeoutError) as e:
        print(
            f"::warning title=SGLang release check::could not query {url} ({type(e).__name__}: {e}); "
            f"release check skipped, pin stays {pin}"
        )
        return
    if _key(latest) > _key(pin):
        print(
            f"::warning title=SGLang release::sglang {latest} is newer than the pin {pin}; a bump is a reviewed "
            f"rebaseline (docs: SGLang compatibility, pin-bump procedure), not an automatic update"
        )
    else:
        print(f"sglang release: latest on PyPI is {latest}, pin is {pin} -- up to date")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", metavar="DIR", help="also run the static canary on an unpacked SGLang tree")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds for the PyPI query")
    p.add_argument("--pypi-url", default=PYPI_URL)
    args = p.parse_args(argv)

    check_release(SGLANG_PIN, args.pypi_url, args.timeout)
    from seams.compat import render, runtime_check, static_check

    codes: list[int] = []
    if importlib.util.find_spec("sglang") is not None:
        report = runtime_check()
        print(render(report))
        codes.append(report.exit_code)
    else:
        print("sglang is not importable here: runtime seam coverage SKIPPED (no compatibility evidence produced)")
    if args.source:
        report = static_check(args.source)
        print(render(report))
        codes.append(report.exit_code)
    return 2 if 2 in codes else max(codes, default=0)


if __name__ == "__main__":
    sys.exit(main())
