"""`cacheon release verify`: a signed release passes; every refusal path has a broken control."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cacheon_subnet.cli import main
from cacheon_subnet.cliout import Exit
from cacheon_subnet.release.descriptor import canonical, package_name, parse
from cacheon_subnet.release.sign import _layout, sign_bytes, sign_wheel
from cacheon_subnet.release.verify import NO_SGLANG, Outcome, verify_wheel
from cacheon_subnet.release.wheel import WheelName, read_wheel, write_wheel
from tests.release.fixtures import built, new_key, owner, signed, versions  # noqa: F401 - fixtures


def _rewrite(wheel: Path, edit: Callable[[dict[str, bytes], str], None], keep_record: bool = False) -> None:
    """Change the wheel's members; RECORD is recomputed (a careful tamperer) unless keep_record."""
    members = read_wheel(wheel)
    pkg, wn = _layout(members, str(wheel))
    record = members.pop(f"{wn.dist_info}/RECORD")
    edit(members, pkg)
    write_wheel(wheel.parent, wn, members)
    if keep_record:  # put the old RECORD back over the recomputed one
        m = read_wheel(wheel)
        m[f"{wn.dist_info}/RECORD"] = record
        import zipfile

        with zipfile.ZipFile(wheel, "w") as z:
            for p, d in m.items():
                z.writestr(p, d)


def _checks(wheel: Path, owner: str | None = None) -> list[tuple[str, str]]:
    return [(f.check, f.detail) for f in verify_wheel(wheel, owner).findings]


def test_signed_release_verifies_against_the_pinned_runtime(signed: Path, owner: Any, versions) -> None:
    versions()
    report = verify_wheel(signed, owner.ss58_address)
    assert report.findings == () and report.outcome is Outcome.VERIFIED and report.signer == owner.ss58_address
    assert main(["release", "verify", str(signed), "--owner", owner.ss58_address]) == Exit.OK


def test_no_sglang_checks_the_wheel_only(signed: Path, owner: Any, versions, capsys) -> None:
    versions(sglang=None)
    report = verify_wheel(signed, owner.ss58_address)
    assert report.outcome is Outcome.WHEEL_ONLY and NO_SGLANG in report.runtime
    assert main(["release", "verify", str(signed), "--owner", owner.ss58_address]) == Exit.NO_DECISION == 3
    assert "runtime: sglang not installed — checked the wheel only" in capsys.readouterr().out


def test_wrong_sglang_version_is_refused(signed: Path, owner: Any, versions) -> None:
    versions(sglang="0.5.22")
    assert ("runtime", "sglang 0.5.22 installed, the release pins 0.5.13.post1") in _checks(signed, owner.ss58_address)
    assert main(["release", "verify", str(signed)]) == Exit.FAIL


def test_wrong_torch_and_missing_kernel_package_are_refused(signed: Path, owner: Any, versions) -> None:
    versions(torch="2.13.0+cpu", sglang_kernel=None)
    found = _checks(signed, owner.ss58_address)
    assert ("runtime", "torch 2.13.0+cpu installed, the release pins 2.11.0") in found
    assert ("runtime", "sglang-kernel not installed, the release pins 0.4.3") in found


def test_unsigned_is_refused(built: Path, versions) -> None:
    versions()
    assert [c for c, _ in _checks(built)] == ["signature"]


def test_resigned_by_another_key_is_refused_for_the_owner(signed: Path, owner: Any, versions) -> None:
    versions()
    sign_wheel(signed, new_key())
    ((check, detail),) = _checks(signed, owner.ss58_address)
    assert check == "signature" and f"not by the owner {owner.ss58_address}" in detail


def test_signature_copied_onto_another_descriptor_is_refused(signed: Path, owner: Any, versions) -> None:
    """The owner's signature file kept, the descriptor changed (a speedup raised): bytes differ."""
    versions()

    def edit(m: dict[str, bytes], pkg: str) -> None:
        doc = json.loads(m[f"{pkg}/release.json"])
        doc["crowns"][0]["contribution_id"] = "bundle:forged"
        m[f"{pkg}/release.json"] = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    _rewrite(signed, edit)
    found = _checks(signed, owner.ss58_address)
    assert ("signature" in {c for c, _ in found}) and ("name" in {c for c, _ in found})


def test_tampered_file_is_refused(signed: Path, owner: Any, versions) -> None:
    versions()

    def edit(m: dict[str, bytes], pkg: str) -> None:
        (kernel,) = [p for p in m if p.endswith("/decode.py")]
        m[kernel] = m[kernel].replace(b"0", b"1", 1)  # one digit: same size, other bytes

    _rewrite(signed, edit)
    ((check, detail),) = _checks(signed, owner.ss58_address)
    assert check == "file" and "decode.py: sha256" in detail and "!= sealed" in detail


def test_tampered_file_with_stale_record_is_refused_twice(signed: Path, owner: Any, versions) -> None:
    versions()

    def edit(m: dict[str, bytes], pkg: str) -> None:
        (kernel,) = [p for p in m if p.endswith("/decode.py")]
        m[kernel] = m[kernel].replace(b"def ", b"def  ", 1)

    _rewrite(signed, edit, keep_record=True)
    assert {c for c, _ in _checks(signed, owner.ss58_address)} == {"file", "record"}


def test_missing_file_is_refused(signed: Path, owner: Any, versions) -> None:
    versions()
    _rewrite(signed, lambda m, pkg: m.pop(next(p for p in m if p.endswith("/manifest.toml"))))
    ((check, detail),) = _checks(signed, owner.ss58_address)
    assert check == "file" and "manifest.toml: sealed in the descriptor, missing from the wheel" in detail


def test_extra_file_is_refused(signed: Path, owner: Any, versions) -> None:
    versions()

    def edit(m: dict[str, bytes], pkg: str) -> None:
        m[f"{pkg}/tree/sitecustomize.py"] = b"print('hi')\n"
        m["evil.pth"] = b"import os\n"

    _rewrite(signed, edit)
    details = [d for c, d in _checks(signed, owner.ss58_address) if c == "file"]
    assert any("sitecustomize.py: in the wheel but not sealed" in d for d in details)
    assert any("evil.pth: outside the release package" in d for d in details)


def test_changed_entry_point_is_refused(signed: Path, owner: Any, versions) -> None:
    versions()

    def edit(m: dict[str, bytes], pkg: str) -> None:
        m[next(p for p in m if p.endswith("entry_points.txt"))] = b"[sglang.srt.plugins]\ncacheon = evil:load\n"

    _rewrite(signed, edit)
    assert [c for c, _ in _checks(signed, owner.ss58_address)] == ["dist-info"]


def test_descriptor_resigned_under_its_new_name_still_needs_the_owner(signed: Path, owner: Any, versions) -> None:
    """An attacker rebuilds a consistent release (name = new digest) and signs it with their key:
    everything checks but the owner."""
    versions()
    members = read_wheel(signed)
    pkg, wn = _layout(members, str(signed))
    data = members[f"{pkg}/release.json"]
    attacker = new_key()
    assert canonical(parse(data)) == data and package_name(data) == pkg  # only the signer differs
    members.pop(f"{wn.dist_info}/RECORD")
    members[f"{pkg}/release.sig"] = json.dumps(sign_bytes(attacker, data).__dict__, sort_keys=True).encode()
    write_wheel(signed.parent, WheelName(wn.dist, wn.version), members)
    assert [c for c, _ in _checks(signed, owner.ss58_address)] == ["signature"]
    assert _checks(signed) == []  # without --owner the signer is only reported


def test_not_a_wheel_is_refused_and_missing_path_is_usage(tmp_path: Path) -> None:
    bad = tmp_path / "x-1-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    assert main(["release", "verify", str(bad)]) == Exit.FAIL
    assert main(["release", "verify", str(tmp_path / "none.whl")]) == Exit.USAGE


@pytest.mark.parametrize("flags", [[], ["--key-file", "/nonexistent/key"]])
def test_sign_needs_a_readable_key(built: Path, flags: list[str]) -> None:
    assert main(["release", "sign", str(built), *flags]) == Exit.USAGE


def test_sign_from_a_key_file(built: Path, tmp_path: Path, versions) -> None:
    from bittensor.sp_core import serialized_keypair_to_keyfile_data

    versions()
    key = new_key()
    (tmp_path / "hk").write_bytes(serialized_keypair_to_keyfile_data(key))
    assert main(["release", "sign", str(built), "--key-file", str(tmp_path / "hk")]) == Exit.OK
    assert verify_wheel(built, key.ss58_address).outcome is Outcome.VERIFIED


def test_descriptor_inconsistent_with_its_own_tree_or_slots_is_refused(signed: Path) -> None:
    """A descriptor the owner signed by mistake (a builder bug): its tree digest or its bindings
    disagree with what it seals and crowns."""
    from dataclasses import replace

    from cacheon_subnet.release.verify import _files, _policy

    members = read_wheel(signed)
    pkg, _ = _layout(members, str(signed))
    desc = parse(members[f"{pkg}/release.json"])
    assert _files(members, pkg, desc) == [] and _policy(desc) == []
    wrong_tree = _files(members, pkg, replace(desc, tree_digest="0" * 64))
    assert [f.check for f in wrong_tree] == ["tree"]
    wrong_bindings = _policy(replace(desc, policy=replace(desc.policy, bindings=("attention", "norm"))))
    assert [f.check for f in wrong_bindings] == ["policy"]


def test_verify_without_owner_says_the_signer_is_unbound(signed: Path, owner: Any, versions) -> None:
    """Anyone can sign a wheel: without --owner the answer is no decision (exit 3), never 0."""
    versions()
    report = verify_wheel(signed)
    assert report.findings == () and report.outcome is Outcome.UNBOUND
    line = f"owner: not checked (pass --owner SS58 to bind the signer {owner.ss58_address}); exit 3, not verified"
    assert line in report.runtime
    assert main(["release", "verify", str(signed)]) == Exit.NO_DECISION
