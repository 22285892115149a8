"""Fixtures for the release tests: a built release from a real example bundle, and sr25519 keys.

Not a conftest.py: tests/ modules import the root conftest by name, and a second one would shadow it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cacheon_subnet.pins import SGLANG_KERNEL_PIN, SGLANG_PIN, TORCH_PIN, TRITON_PIN
from cacheon_subnet.release import runtime

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "attention.decode"


def new_key() -> Any:
    from bittensor.sp_core import CRYPTO_SR25519, Keypair

    return Keypair.create_from_mnemonic(Keypair.generate_mnemonic(12), CRYPTO_SR25519)


@pytest.fixture(scope="session")
def owner() -> Any:
    return new_key()


@pytest.fixture
def built(tmp_path: Path) -> Path:
    """An unsigned release wheel of examples/attention.decode."""
    from cacheon_subnet.release.build import build_release, from_bundles

    wheel, _ = build_release(from_bundles([str(EXAMPLE)]), tmp_path / "out")
    return wheel


@pytest.fixture
def signed(built: Path, owner: Any) -> Path:
    from cacheon_subnet.release.sign import sign_wheel

    sign_wheel(built, owner)
    return built


def fake_versions(monkeypatch: pytest.MonkeyPatch, **over: str | None) -> None:
    """Make runtime.installed_version answer the pinned runtime (or `over`, dist -> version)."""
    table: dict[str, str | None] = {
        "sglang": SGLANG_PIN,
        "torch": TORCH_PIN + "+cu130",
        "triton": TRITON_PIN,
        "sglang-kernel": SGLANG_KERNEL_PIN,
    }
    table.update({k.replace("_", "-"): v for k, v in over.items()})
    monkeypatch.setattr(runtime, "installed_version", lambda dist: table.get(dist))


@pytest.fixture
def versions(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    return lambda **over: fake_versions(monkeypatch, **over)
