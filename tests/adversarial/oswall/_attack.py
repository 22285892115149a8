"""Shared by the OS-wall attack scripts: they run INSIDE sandbox.launch, as if every static check
had been bypassed, and print one `RESULT <label> BLOCKED|ESCAPED <detail>` line per attempt."""

import json
import sys


def ctx() -> dict:
    return json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}


def report(label: str, escaped: bool, detail: object = "") -> None:
    print(f"RESULT {label} {'ESCAPED' if escaped else 'BLOCKED'} {detail}", flush=True)


def attempt(label: str, fn) -> None:
    """Run fn(); returning normally is an escape (detail = its value), an exception is blocked."""
    try:
        report(label, True, repr(fn())[:200])
    except BaseException as e:  # noqa: BLE001 - any refusal counts, including SystemExit from libs
        report(label, False, f"{type(e).__name__}: {e}"[:200])
