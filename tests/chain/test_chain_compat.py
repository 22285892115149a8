"""chain-compat: the installed SDK passes; a drifted fake SDK fails and names the difference."""

from __future__ import annotations

import ast
import dataclasses
import importlib.metadata
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from cacheon_subnet.chain import compat
from cacheon_subnet.chain.compat import BY_KEY, PIN, SURFACE, check_sdk, invoke, render

bt = pytest.importorskip("bittensor")


class Overlay:
    """The real SDK with some dotted names replaced (a fake, drifted SDK)."""

    def __init__(self, real: Any, patches: dict[str, Any]):
        self._real, self._patches, self._prefix = real, patches, ""

    def _child(self, prefix: str) -> Overlay:
        o = Overlay(self._real, self._patches)
        o._prefix = prefix
        return o

    def __getattr__(self, name: str) -> Any:
        path = f"{self._prefix}{name}"
        if path in self._patches:
            return self._patches[path]
        if any(p.startswith(path + ".") for p in self._patches):
            return self._child(path + ".")
        return compat.resolve(self._real, path)


def _row(report, key: str):
    return next(r for r in report.rows if r.name == key)


def test_installed_sdk_passes() -> None:
    report = check_sdk()
    assert report.version == PIN == "11.3.0"
    assert report.exit_code == 0, render(report)
    assert len(report.rows) == len(SURFACE) + 1
    text = render(report)
    assert "exit 0" in text and "subnets.metagraph" in text


def test_renamed_parameter_fails_and_is_named() -> None:
    class Subnets(bt.namespaces.Subnets):
        async def metagraph(self, net_uid: int, block: int | None = None, *, commitments: bool = True):  # netuid renamed
            return None

    fake = Overlay(bt, {"namespaces.Subnets": Subnets})
    report = check_sdk(fake, version=PIN)
    assert report.exit_code == 1
    row = _row(report, "subnets.metagraph")
    assert row.status == "FAIL" and "'net_uid'" in row.detail and "'netuid'" in row.detail
    assert [r.name for r in report.failures] == ["subnets.metagraph"]


def test_missing_method_fails() -> None:
    class SyncClient(bt.SyncClient):
        submit_call = None  # type: ignore[assignment]

    del_sync = type("SyncClient", (), {k: v for k, v in vars(bt.SyncClient).items() if k != "submit_call"})
    for fake_cls in (SyncClient, del_sync):
        report = check_sdk(Overlay(bt, {"SyncClient": fake_cls}), version=PIN)
        assert report.exit_code == 1
        assert _row(report, "client.submit_call").status == "FAIL"
    assert "no 'submit_call'" in _row(report, "client.submit_call").detail


def test_missing_field_fails() -> None:
    @dataclasses.dataclass
    class MetagraphNeuron:  # total_stake renamed to stake
        uid: int
        hotkey: str
        coldkey: str
        validator_permit: bool
        stake: float

    report = check_sdk(Overlay(bt, {"MetagraphNeuron": MetagraphNeuron}), version=PIN)
    assert report.exit_code == 1
    row = _row(report, "MetagraphNeuron.total_stake")
    assert row.status == "FAIL" and "'total_stake'" in row.detail


def test_new_required_parameter_and_positional_only_fail() -> None:
    @dataclasses.dataclass
    class SetWeights:
        netuid: int
        signature: str  # new required field
        uids: list = None
        weights: list = None
        version_key: int = 0

    def encrypt(data, reveal_in=None, /, *, reveal_at=None):  # reveal_in positional-only
        raise AssertionError

    fake = Overlay(bt, {"SetWeights": SetWeights, "timelock.encrypt": encrypt})
    report = check_sdk(fake, version=PIN)
    assert "new required parameter 'signature'" in _row(report, "SetWeights").detail
    assert "positional-only" in _row(report, "timelock.encrypt").detail
    assert report.exit_code == 1


def test_forwarded_keyword_checked_in_executor() -> None:
    class Executor(bt.executor.Executor):
        async def submit_call(self, call, wallet, *, sign_with="coldkey"):  # signer renamed
            raise AssertionError

    report = check_sdk(Overlay(bt, {"executor.Executor": Executor}), version=PIN)
    detail = _row(report, "client.submit_call").detail
    assert "'signer'" in detail and "forwarded" in detail


def test_missing_registry_read_fails() -> None:
    registry = {k: v for k, v in bt.reads.base.REGISTRY.items() if k != "weights"}
    report = check_sdk(Overlay(bt, {"reads.base.REGISTRY": registry}), version=PIN)
    assert _row(report, "weights.weights").status == "FAIL"


def test_version_mismatch_exits_2() -> None:
    report = check_sdk(bt, version="11.4.0")
    assert report.exit_code == 2
    assert "installed 11.4.0, pin 11.3.0" in _row(report, "bittensor version").detail


def test_sdk_absent_exits_2(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    monkeypatch.setitem(sys.modules, "bittensor", None)  # import now raises ImportError
    report = check_sdk()
    assert report.exit_code == 2 and report.version is None
    assert "pip install bittensor==11.3.0" in render(report)


def test_invoke_refuses_undeclared_arguments() -> None:
    target = types.SimpleNamespace(query=lambda *a, **k: "ok")
    assert invoke(target, "client.query", "item", [1]) == "ok"
    with pytest.raises(RuntimeError, match="SURFACE declares"):
        invoke(target, "client.query", "item", [1], block=5)
    with pytest.raises(RuntimeError, match="no call/read entry"):
        invoke(target, "client.nope")


def test_backend_uses_exactly_the_surface() -> None:
    """Every key bittensor_backend.py passes to the compat doors is in SURFACE, and every
    SURFACE entry is used (no stale rows that would make chain-compat lie)."""
    src = Path(compat.__file__).with_name("bittensor_backend.py").read_text()
    used = set()
    for node in ast.walk(ast.parse(src)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"sdk", "sdk_call", "invoke", "field"}
        ):
            used.update(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "_query":
            used.update(a.value for a in node.args if isinstance(a, ast.Constant))
    assert used - set(BY_KEY) == set()
    assert set(BY_KEY) - used == set()
