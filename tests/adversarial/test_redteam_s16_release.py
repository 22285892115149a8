"""Red team (session 16): `cacheon release verify --owner` against wheels that are not what the
owner signed but that a tamperer shapes to slip past a check (the threat model's "Releases").

Each attack is a signed release, edited the way a careful tamperer would (RECORD recomputed), and
each must be REFUSED naming what differs."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cacheon_subnet.records.codec import RecordError
from cacheon_subnet.release.descriptor import DESCRIPTOR_FILE, parse
from cacheon_subnet.release.sign import _layout
from cacheon_subnet.release.verify import Outcome, verify_wheel
from cacheon_subnet.release.wheel import MAX_BYTES, WheelError, read_wheel, write_wheel
from tests.release.fixtures import built, owner, signed, versions  # noqa: F401 - fixtures


def _rewrite(wheel: Path, edit: Callable[[dict[str, bytes], str, str], None]) -> None:
    members = read_wheel(wheel)
    pkg, wn = _layout(members, str(wheel))
    members.pop(f"{wn.dist_info}/RECORD")
    edit(members, pkg, wn.dist_info)
    write_wheel(wheel.parent, wn, members)


def _refused(wheel: Path, owner: Any) -> list[tuple[str, str]]:
    report = verify_wheel(wheel, owner.ss58_address)
    assert report.outcome is Outcome.REFUSED
    return [(f.check, f.detail) for f in report.findings]


@pytest.mark.parametrize("extra", ["sglang/srt/x.dist-info/hook.py", "a/b/c.dist-info/entry_points.txt"])
def test_a_member_under_a_nested_dist_info_dir_is_refused(signed: Path, owner: Any, versions, extra: str) -> None:
    """Was VERIFIED: any member whose path merely contained ".dist-info/" passed as the wheel's own
    dist-info, so an unsigned file rode into another package's dir (fixed in verify._files)."""
    versions()
    _rewrite(signed, lambda m, pkg, di: m.__setitem__(extra, b"[sglang.srt.plugins]\nx = os:system\n"))
    assert ("file", f"{extra}: outside the release package") in _refused(signed, owner)


def test_a_second_top_level_dist_info_is_refused_as_layout(signed: Path, owner: Any, versions) -> None:
    versions()
    _rewrite(signed, lambda m, pkg, di: m.__setitem__("zzz-1.0.dist-info/entry_points.txt", b"[x]\ny = os:system\n"))
    ((check, detail),) = _refused(signed, owner)
    assert check == "layout" and "zzz-1.0.dist-info" in detail


@pytest.mark.parametrize("name", ["{pkg}/./extra.py", "{pkg}//extra.py", "{pkg}/tree/../extra.py"])
def test_dot_and_empty_path_parts_do_not_alias_a_sealed_file(signed: Path, owner: Any, versions, name: str) -> None:
    versions()
    with zipfile.ZipFile(signed, "a") as z:
        members = read_wheel(signed)
        pkg, _ = _layout(members, str(signed))
        z.writestr(name.format(pkg=pkg), b"import os\n")
    found = _refused(signed, owner)
    assert found and all(c in {"layout", "record", "file"} for c, _ in found)


def test_a_duplicate_member_name_is_refused_before_anything_else(signed: Path, owner: Any, versions) -> None:
    """pip extracts the last of two same-named members, zipfile.read the central directory's last:
    the reader refuses the wheel outright rather than pick one."""
    versions()
    members = read_wheel(signed)
    pkg, _ = _layout(members, str(signed))
    victim = next(p for p in members if p.endswith("/decode.py"))
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(signed, "a") as z:
        z.writestr(victim, b"import os\n")
    ((check, detail),) = _refused(signed, owner)
    assert check == "layout" and "appears twice" in detail


def test_a_record_row_listed_twice_is_refused(signed: Path, owner: Any, versions) -> None:
    versions()

    members = read_wheel(signed)
    pkg, wn = _layout(members, str(signed))
    rec_path = f"{wn.dist_info}/RECORD"
    rec = members[rec_path]
    members[rec_path] = rec + rec.splitlines()[0] + b"\n"
    with zipfile.ZipFile(signed, "w") as z:
        for p, d in members.items():
            z.writestr(p, d)
    assert any(c == "record" and "listed twice" in d for c, d in _refused(signed, owner))


def test_a_symlink_member_is_checked_by_its_bytes(signed: Path, owner: Any, versions) -> None:
    """A zip entry flagged as a symlink (pointing at /etc/passwd): pip writes its bytes as a file,
    unzip makes a link; since red team session 20 verify refuses any entry but a regular file."""
    versions()
    members = read_wheel(signed)
    victim = next(p for p in members if p.endswith("/decode.py"))
    with zipfile.ZipFile(signed, "w") as z:
        for p, d in members.items():
            info = zipfile.ZipInfo(p)
            if p == victim:
                info.external_attr = 0o120777 << 16
                d = b"/etc/passwd"
            z.writestr(info, d)
    ((check, detail),) = _refused(signed, owner)
    assert check == "layout" and "decode.py' is not a regular file (mode 0o120777" in detail


@pytest.mark.parametrize(
    "edit",
    [
        lambda b: b.replace(b",", b", ", 1),  # whitespace
        lambda b: b + b"\n",
        lambda b: b"\xef\xbb\xbf" + b,  # a BOM
        lambda b: b.replace(b"{", b'{"zz": 1, ', 1),  # an extra key
    ],
    ids=["space", "newline", "bom", "extra-key"],
)
def test_a_descriptor_in_any_other_byte_form_is_refused(signed: Path, edit: Callable[[bytes], bytes]) -> None:
    members = read_wheel(signed)
    pkg, _ = _layout(members, str(signed))
    data = members[f"{pkg}/{DESCRIPTOR_FILE}"]
    parse(data)  # the control: the signed form reads
    with pytest.raises(RecordError):
        parse(edit(data))


def test_a_declared_size_that_lies_is_bounded(tmp_path: Path) -> None:
    """A zip bomb whose central directory claims a tiny size: the reader stops at the declared size
    (zipfile checks the CRC at the end), so the bound on declared sizes bounds what is inflated."""
    path = tmp_path / "bomb.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a/x.py", b"\0" * (MAX_BYTES + 1))
    with pytest.raises(WheelError, match="MiB unpacked"):
        read_wheel(path)
    raw = bytearray(path.read_bytes())
    cd = raw.rfind(b"PK\x01\x02")  # the central directory entry: its uncompressed size at +24
    raw[cd + 24 : cd + 28] = (16).to_bytes(4, "little")
    lh = raw.find(b"PK\x03\x04")  # and the local header's at +22
    raw[lh + 22 : lh + 26] = (16).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(WheelError, match="cannot be read"):
        read_wheel(path)
