"""Runs one guard_bundle attack as bundle code under the audit hook, inside the wall."""
import ctypes  # noqa: F401 - the worker's own imports happen before the guard, as in verify/worker.py
import gc  # noqa: F401
import os
import subprocess  # noqa: F401
import sys
import threading  # noqa: F401

from _attack import ctx, report

c = ctx()
scratch = os.environ["CACHEON_SANDBOX_SCRATCH"]
from cacheon_subnet import guard

guard.install_guard(c["bundle_root"], [scratch])
sys.path.insert(0, c["bundle_root"])
import attack

before = len(guard.violations)
try:
    getattr(attack, c["kind"])(scratch)
    err = ""
except PermissionError as e:
    err = str(e)
refused = len(guard.violations) > before
report(c["kind"], not refused, err or (guard.violations[-1] if refused else "no refusal"))
