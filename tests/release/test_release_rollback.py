"""The rollback guard and the signature's domain: an older signed release, two releases under one
serial, a signature made for something else, each refused; each with the control that passes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from cacheon_subnet.cli import main
from cacheon_subnet.cliout import Exit
from cacheon_subnet.errors import UsageError
from cacheon_subnet.records.codec import to_json
from cacheon_subnet.release import trust
from cacheon_subnet.release.build import build_release, from_bundles
from cacheon_subnet.release.descriptor import MAX_SERIAL, Stamp, parse
from cacheon_subnet.release.sign import SIGNATURE_FILE, Signature, _layout, sign_wheel
from cacheon_subnet.release.verify import Guard, verify_wheel
from cacheon_subnet.release.wheel import read_wheel, write_wheel
from tests.release.fixtures import EXAMPLE, REPO, new_key, owner, versions  # noqa: F401 - fixtures

NORM = REPO / "examples" / "norm.rmsnorm"
ALICE = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY"  # an owner for the trust file's own tests


def _release(tmp: Path, key: Any, serial: int, example: Path = EXAMPLE) -> Path:
    wheel, _ = build_release(from_bundles([str(example)]), tmp / f"{example.name}-{serial}", Stamp(serial, 1765000000))
    sign_wheel(wheel, key)
    return wheel


def _verify(wheel: Path, key: Any, *flags: str) -> int:
    return main(["release", "verify", str(wheel), "--owner", key.ss58_address, *flags])


def _trusted() -> dict[str, trust.Seen]:
    return trust.load(Path(os.environ["CACHEON_RELEASE_TRUST"]))


def test_an_older_release_is_refused_after_a_newer_one(tmp_path: Path, owner: Any, versions, capsys) -> None:
    versions()
    old, new = _release(tmp_path, owner, 5), _release(tmp_path, owner, 7)
    assert _verify(old, owner) == Exit.OK  # first use: trusted, recorded
    assert _verify(new, owner) == Exit.OK
    assert _trusted()[owner.ss58_address].serial == 7
    capsys.readouterr()
    assert _verify(old, owner) == Exit.FAIL  # the replay
    out = capsys.readouterr().out
    assert "rollback: serial 5 is older than serial 7" in out and "--allow-rollback" in out
    assert _verify(old, owner, "--allow-rollback") == Exit.OK  # a deliberate downgrade
    assert _trusted()[owner.ss58_address].serial == 7  # ... which does not lower the mark


def test_two_releases_under_one_serial_are_refused(tmp_path: Path, owner: Any, versions, capsys) -> None:
    versions()
    a, b = _release(tmp_path, owner, 9), _release(tmp_path, owner, 9, NORM)
    assert _verify(a, owner) == Exit.OK
    assert _verify(a, owner) == Exit.OK  # the same release again is fine
    capsys.readouterr()
    assert _verify(b, owner, "--allow-rollback") == Exit.FAIL  # not a downgrade: a second release, same number
    assert "two releases under one serial" in capsys.readouterr().out


def test_min_serial_binds_a_host_that_has_seen_nothing(tmp_path: Path, owner: Any, versions) -> None:
    versions()
    wheel = _release(tmp_path, owner, 5)
    assert _verify(wheel, owner, "--min-serial", "6") == Exit.FAIL
    assert not Path(os.environ["CACHEON_RELEASE_TRUST"]).exists()  # a refusal records nothing
    assert _verify(wheel, owner, "--min-serial", "5") == Exit.OK


def test_only_an_owner_bound_verdict_is_recorded(tmp_path: Path, owner: Any, versions) -> None:
    """Without --owner, or signed by another key, nothing is remembered: else anyone's self-signed
    high serial would lock the owner's real releases out as rollbacks."""
    versions()
    mallory = new_key()
    forged = _release(tmp_path, mallory, MAX_SERIAL)
    assert main(["release", "verify", str(forged)]) == Exit.NO_DECISION
    assert _verify(forged, owner) == Exit.FAIL  # signed by mallory, not the owner
    assert _trusted() == {}
    assert _verify(_release(tmp_path, owner, 3), owner) == Exit.OK


def test_an_unreadable_trust_file_stops_verify_and_is_kept(tmp_path: Path, owner: Any, versions, capsys) -> None:
    versions()
    wheel = _release(tmp_path, owner, 5)
    path = Path(os.environ["CACHEON_RELEASE_TRUST"])
    for body in (b"{not json", b'{"schema": "cacheon.release-trust/0", "owners": []}', b"[" * 100_000, b" " * (2 << 20)):
        path.write_bytes(body)
        assert _verify(wheel, owner) == Exit.USAGE
        assert str(path) in capsys.readouterr().err
        assert path.read_bytes() == body  # fail closed: never reset to an empty start
    assert _verify(wheel, owner, "--trust-file", str(tmp_path)) == Exit.USAGE  # a directory: unreadable


def test_a_write_that_dies_leaves_the_old_trust_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "trust.json"
    trust.record(path, trust.Candidate(ALICE, 4, "d" * 64, "cacheon_release_aaaaaaaaaaaa"))
    before = path.read_bytes()

    def dies(*_a: Any, **_k: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trust.os, "replace", dies)
    with pytest.raises(UsageError, match="No space left"):  # named, and the temp file is gone
        trust.record(path, trust.Candidate(ALICE, 5, "e" * 64, "cacheon_release_bbbbbbbbbbbb"))
    assert path.read_bytes() == before and trust.load(path)[ALICE].serial == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trust.json", "trust.json.lock"]


def _resign(wheel: Path, sig: Signature) -> None:
    members = read_wheel(wheel)
    pkg, wn = _layout(members, str(wheel))
    members.pop(f"{wn.dist_info}/RECORD")
    members[f"{pkg}/{SIGNATURE_FILE}"] = json.dumps(to_json(sig), sort_keys=True).encode()
    write_wheel(wheel.parent, wn, members)


def _descriptor(wheel: Path) -> bytes:
    members = read_wheel(wheel)
    return members[f"{_layout(members, str(wheel))[0]}/release.json"]


@pytest.mark.parametrize(
    "message",
    [
        pytest.param(lambda d: d, id="the-bare-descriptor"),  # a signature of these bytes made anywhere else
        pytest.param(lambda d: b"<Bytes>cacheon.release-signature/2\n" + d + b"</Bytes>", id="signRaw-wrapped"),
    ],
)
def test_a_signature_made_for_another_message_is_refused(tmp_path: Path, owner: Any, versions, message) -> None:
    versions()
    wheel = _release(tmp_path, owner, 5)
    data = _descriptor(wheel)
    _resign(wheel, Signature("cacheon.release-signature/2", owner.ss58_address, bytes(owner.sign(message(data))).hex()))
    found = [(f.check, f.detail) for f in verify_wheel(wheel, owner.ss58_address).findings]
    assert [c for c, _ in found] == ["signature"], found


def test_the_first_signature_schema_is_refused_by_name(tmp_path: Path, owner: Any, versions) -> None:
    versions()
    wheel = _release(tmp_path, owner, 5)
    _resign(wheel, Signature("cacheon.release-signature/1", owner.ss58_address, bytes(owner.sign(_descriptor(wheel))).hex()))
    found = verify_wheel(wheel, owner.ss58_address).findings
    assert any("cacheon.release-signature/1" in f.detail for f in found)


def test_the_stamp_is_checked_where_it_is_made_and_where_it_is_read(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(UsageError, match="serial 0"):
        build_release(from_bundles([str(EXAMPLE)]), tmp_path / "a", Stamp(0, 1))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(UsageError, match="SOURCE_DATE_EPOCH"):
        Stamp.now()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1765000000")
    assert Stamp.now() == Stamp(1765000000, 1765000000) and Stamp.now(3) == Stamp(3, 1765000000)
    wheel, desc = build_release(from_bundles([str(EXAMPLE)]), tmp_path / "b", Stamp(2, 1765000000))
    assert parse(_descriptor(wheel)) == desc
    edited = _descriptor(wheel).replace(b'"serial":2', b'"serial":0')
    with pytest.raises(ValueError, match="serial 0 outside"):
        parse(edited)
    with pytest.raises(SystemExit) as usage:  # argparse's own usage error
        main(["release", "build", "--bundle", str(EXAMPLE), "--out", str(tmp_path / "c"), "--serial", "x"])
    assert usage.value.code == Exit.USAGE


def test_verify_says_the_serial_and_the_guard_reads_the_cli_flags(tmp_path: Path, owner: Any, versions, capsys) -> None:
    versions()
    wheel = _release(tmp_path, owner, 5)
    custom = tmp_path / "elsewhere" / "trust.json"
    assert _verify(wheel, owner, "--trust-file", str(custom)) == Exit.OK
    out = capsys.readouterr().out
    assert "release serial 5, issued 2025-12-06" in out and "trusted on first use" in out
    assert trust.load(custom)[owner.ss58_address].serial == 5 and _trusted() == {}
    report = verify_wheel(wheel, owner.ss58_address, Guard(custom))
    assert report.to_json()["serial"] == 5 and "verified here before" in report.render()


# Red team (session 21): a mirror operator against the guard.


def test_one_key_has_one_history_whatever_ss58_prefix_names_it(tmp_path: Path, owner: Any, versions, capsys) -> None:
    """The same public key in another SS58 format (Polkadot's 0, Kusama's 2) is the same owner: a
    mirror that rewrites release.sig's signer to the --owner an explorer shows must not get a fresh
    history, so the older release stays refused."""
    from bittensor.sp_core import ss58_encode

    versions()
    old, new = _release(tmp_path, owner, 5), _release(tmp_path, owner, 7)
    assert _verify(new, owner) == Exit.OK
    for prefix in (0, 2):
        other = ss58_encode(owner.public_key, prefix)
        members = read_wheel(old)
        sig = json.loads(members[f"{_layout(members, str(old))[0]}/{SIGNATURE_FILE}"])
        _resign(old, Signature(sig["schema"], other, sig["signature"]))  # the signer's spelling: not signed
        capsys.readouterr()
        assert main(["release", "verify", str(old), "--owner", other]) == Exit.FAIL
        assert "rollback: serial 5 is older than serial 7" in capsys.readouterr().out
    assert list(_trusted()) == [owner.ss58_address]
    assert main(["release", "verify", str(new), "--owner", "5NotAnAddress"]) == Exit.USAGE


def test_an_issued_time_past_year_9999_is_a_finding_not_a_crash(tmp_path: Path, versions) -> None:
    """`issued` up to 2**53 seconds read fine, then printing its date raised ValueError: any mirror's
    self-signed wheel crashed verify. The descriptor holds a date a clock can print."""
    from cacheon_subnet.release.descriptor import MAX_ISSUED

    versions()
    with pytest.raises(UsageError, match="issued"):
        build_release(from_bundles([str(EXAMPLE)]), tmp_path / "a", Stamp(5, MAX_ISSUED + 1))
    wheel = _release(tmp_path, new_key(), 5)
    members = read_wheel(wheel)
    pkg, wn = _layout(members, str(wheel))
    members[f"{pkg}/release.json"] = members[f"{pkg}/release.json"].replace(
        b'"issued":1765000000', b'"issued":%d' % MAX_SERIAL
    )
    members.pop(f"{wn.dist_info}/RECORD")
    write_wheel(wheel.parent, wn, members)
    report = verify_wheel(wheel)
    assert "issued" in report.render() and [f.check for f in report.findings] == ["descriptor"]
    assert _release(tmp_path, new_key(), 6).exists()  # the control: year 9999 itself builds


def test_a_verify_racing_another_rechecks_under_the_lock(tmp_path: Path, owner: Any, versions, monkeypatch) -> None:
    """Two verifies at once (a fleet sharing one trust file, a script run twice) both read the file
    before either wrote it: the older one must still be refused when it comes to record."""
    from cacheon_subnet.release import verify

    versions()
    old, new = _release(tmp_path, owner, 5), _release(tmp_path, owner, 7)
    path = Path(os.environ["CACHEON_RELEASE_TRUST"])
    first = verify._sequence

    def racing(guard: Guard, who: str | None, cand: trust.Candidate) -> Any:
        said = first(guard, who, cand)  # this verify read the file; the other one records now
        monkeypatch.setattr(verify, "_sequence", first)
        assert verify_wheel(new, owner.ss58_address, Guard(path)).findings == ()
        return said

    monkeypatch.setattr(verify, "_sequence", racing)
    report = verify_wheel(old, owner.ss58_address, Guard(path))
    assert [f.check for f in report.findings] == ["rollback"], report.findings
    assert _trusted()[owner.ss58_address].serial == 7


def test_planted_paths_beside_the_trust_file_are_not_followed(tmp_path: Path) -> None:
    """Whoever can write the trust file's directory (a shared CACHEON_RELEASE_TRUST) must not turn
    verify into a writer of another file, or hang it on a FIFO."""
    path, victim = tmp_path / "trust.json", tmp_path / "victim"
    victim.write_bytes(b"keep")
    c = trust.Candidate(ALICE, 4, "d" * 64, "cacheon_release_aaaaaaaaaaaa")
    (tmp_path / f"trust.json.{os.getpid()}.tmp").symlink_to(victim)  # the old, predictable temp name
    trust.record(path, c)
    assert victim.read_bytes() == b"keep" and trust.load(path)[ALICE].serial == 4
    path.unlink()
    (tmp_path / "trust.json.lock").unlink()
    (tmp_path / "trust.json.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UsageError, match="trust.json.lock"):
        trust.record(path, c)
    assert not (tmp_path / "elsewhere").exists()
    os.mkfifo(path)
    with pytest.raises(UsageError, match="not a regular file"):
        trust.load(path)


def test_a_trust_file_that_cannot_be_written_is_usage_naming_it(
    tmp_path: Path, owner: Any, versions, capsys, monkeypatch
) -> None:
    """Verify passed but cannot remember it (a read-only home, a full disk): exit 2 naming the file,
    not a traceback."""
    versions()
    wheel = _release(tmp_path, owner, 5)

    def full(*_a: Any, **_k: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trust.tempfile, "mkstemp", full)
    assert _verify(wheel, owner) == Exit.USAGE
    assert f"{os.environ['CACHEON_RELEASE_TRUST']} (No space left on device)" in capsys.readouterr().err


def test_a_trust_file_entry_is_checked_like_a_descriptor(tmp_path: Path, owner: Any) -> None:
    """A serial the descriptor could not carry, or an owner spelled in another SS58 format (a
    second history for one key), is a broken file: stop, never read around it."""
    from bittensor.sp_core import ss58_encode

    path = tmp_path / "trust.json"
    good = {"owner": owner.ss58_address, "serial": 4, "descriptor": "d" * 64, "name": "n", "verified_at": "t"}
    for bad in ({"serial": -1}, {"serial": MAX_SERIAL + 1}, {"owner": ss58_encode(owner.public_key, 0)}, {"owner": "x"}):
        path.write_text(json.dumps({"schema": trust.SCHEMA, "owners": [good | bad]}))
        with pytest.raises(UsageError, match=str(path)):
            trust.load(path)
    path.write_text(json.dumps({"schema": trust.SCHEMA, "owners": [good]}))
    assert trust.load(path)[owner.ss58_address].serial == 4


def test_a_mirrors_strings_reach_the_terminal_escaped(tmp_path: Path, owner: Any, versions) -> None:
    """release.sig's signer is not signed: an ESC sequence there must not redraw the verdict."""
    versions()
    wheel = _release(tmp_path, owner, 5)
    members = read_wheel(wheel)
    sig = json.loads(members[f"{_layout(members, str(wheel))[0]}/{SIGNATURE_FILE}"])
    _resign(wheel, Signature(sig["schema"], "\x1b[2A\x1b[2K\r\u202eVERIFIED", sig["signature"]))
    text = verify_wheel(wheel, owner.ss58_address).render()
    assert "REFUSED" in text and "\x1b" not in text and "\u202e" not in text and "\\x1b[2A" in text


def test_build_warns_when_an_explicit_serial_falls_below_the_default(tmp_path: Path, monkeypatch, capsys) -> None:
    """An owner who numbers a release 2 after default (clock) serials is refused everywhere as a
    rollback (red team s21): build says so when it happens."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1765000000")
    argv = ["release", "build", "--bundle", str(EXAMPLE), "--json", "--out"]
    assert main([*argv, str(tmp_path / "a"), "--serial", "2"]) == Exit.OK
    assert "will refuse this one as a rollback" in json.loads(capsys.readouterr().out)["note"]
    assert main([*argv, str(tmp_path / "b")]) == Exit.OK
    assert json.loads(capsys.readouterr().out)["note"] is None
