"""The toolchain pins are one fact: pins.py, the `native` extra, the Makefile's install."""

from __future__ import annotations

import os
import tomllib

import pytest
from conftest import REPO
from native_bundles import _WHY

from cacheon_subnet.pins import CUTLASS_PIN, NATIVE_PINS


def test_the_native_extra_is_exactly_the_pins():
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["native"]
    assert sorted(extra) == sorted(f"{d}=={v}" for d, v in NATIVE_PINS.items())


def test_make_install_installs_the_lane_and_the_cutlass_pin():
    make = (REPO / "Makefile").read_text()
    assert "'.[dev,chain,native]'" in make and f"CUTLASS_SPEC ?= nvidia-cutlass=={CUTLASS_PIN}" in make
    assert '--no-deps "$(CUTLASS_SPEC)"' in make


def test_ci_has_the_toolchain_so_the_lane_tests_run_there():
    """Elsewhere the nvcc tests skip with the reason; CI (CI=true, `make install`) must run them."""
    if os.environ.get("CI") != "true":
        pytest.skip("not CI: the compile lane's tests skip where the toolchain is absent")
    assert _WHY is None, _WHY
