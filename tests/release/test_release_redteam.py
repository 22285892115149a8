"""Red team (session 20) on the release path: each attack verified (or activated) before its fix.

Scripts that show each one against the unfixed code: /tmp/redteam_release/a01..a10 (session notes).
Wheel bytes the signature did not bind (METADATA, the version, bytes outside zipfile's members),
readers that inflated or recursed without bound, `verify` answering 0 with no owner, and a plugin
that activated under other torch/Triton pins or beside a second activator."""

from __future__ import annotations

import io
import json
import logging
import struct
import tracemalloc
import types
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cacheon_subnet.cli import main
from cacheon_subnet.cliout import Exit
from cacheon_subnet.release import runtime, wheel
from cacheon_subnet.release.build import build_release, from_bundles
from cacheon_subnet.release.sign import _layout, sign_wheel
from cacheon_subnet.release.verify import Outcome, verify_wheel
from cacheon_subnet.release.wheel import WheelError, WheelName, read_wheel, write_wheel
from tests.release.fixtures import EXAMPLE, REPO, built, new_key, owner, signed, versions  # noqa: F401 - fixtures
from tests.release.test_release_runtime import _installed, fake_registry  # noqa: F401 - fixture


def _rewrite(w: Path, edit: Callable[[dict[str, bytes], str, str], None], version: str | None = None) -> Path:
    """Members changed, RECORD recomputed (a careful tamperer); returns the (maybe renamed) wheel."""
    members = read_wheel(w)
    pkg, wn = _layout(members, str(w))
    members.pop(f"{wn.dist_info}/RECORD")
    edit(members, pkg, wn.dist_info)
    if version is not None:
        new = WheelName(wn.dist, version)
        members = {k.replace(wn.dist_info, new.dist_info): v for k, v in members.items()}
        w.unlink()
        wn = new
    return write_wheel(w.parent, wn, members)


def _found(w: Path, key: Any) -> list[tuple[str, str]]:
    report = verify_wheel(w, key.ss58_address)
    assert report.outcome is Outcome.REFUSED
    return [(f.check, f.detail) for f in report.findings]


# --- every byte pip acts on is bound -------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        (lambda t: t + "Requires-Dist: evil @ file:///tmp/evil-1-py3-none-any.whl\n", "line 7: 'Requires-Dist: evil @"),
        (lambda t: t.replace("cacheon-subnet==", "cacheon-subnet>="), "line 5: 'Requires-Dist: cacheon-subnet>="),
        (lambda t: t.replace("Name: ", "Name: evil\nName: ", 1), "line 2: 'Name: evil'"),
        (lambda t: t + "Requires-Python: <3\n", "line 7: 'Requires-Python: <3'"),
    ],
    ids=["url-requirement", "loosened-pin", "second-name", "requires-python"],
)
def test_metadata_is_bound_byte_for_byte(signed: Path, owner: Any, versions, edit, line: str) -> None:
    """Was VERIFIED: only a `Name:` line was checked, so a mirror's `Requires-Dist: evil @ URL` made a
    plain `pip install WHEEL` fetch and install an unsigned wheel (its .pth then ran everywhere)."""
    versions()

    def change(m: dict[str, bytes], pkg: str, di: str) -> None:
        m[f"{di}/METADATA"] = edit(m[f"{di}/METADATA"].decode()).encode()

    found = _found(_rewrite(signed, change), owner)
    assert [c for c, _ in found] == ["dist-info"] and "METADATA differs from what a release declares" in found[0][1]
    assert line in found[0][1]


def test_the_metadata_pins_follow_from_the_signed_descriptor(built: Path) -> None:
    from cacheon_subnet import __version__
    from cacheon_subnet.release.descriptor import parse

    members = read_wheel(built)
    pkg, wn = _layout(members, str(built))
    desc = parse(members[f"{pkg}/release.json"])
    assert desc.schema == "cacheon.release/3" and desc.cacheon_subnet == __version__
    assert json.loads(members[f"{pkg}/release.json"])["cacheon_subnet"] == __version__  # signed, canonical
    meta = members[f"{wn.dist_info}/METADATA"].decode().splitlines()
    assert [x for x in meta if x.startswith("Requires-Dist")] == [
        f"Requires-Dist: cacheon-subnet=={__version__}",
        f"Requires-Dist: sglang=={desc.runtime.sglang}",
    ]


def test_a_wheel_version_other_than_the_releases_is_refused(signed: Path, owner: Any, versions) -> None:
    """Was VERIFIED: the dist-info dir and file name renamed to version 999 (METADATA kept as built)."""
    versions()
    w = _rewrite(signed, lambda m, pkg, di: None, version="999")
    assert w.name.endswith("-999-py3-none-any.whl")
    assert ("dist-info", f"{w.name.split('-')[0]}-999.dist-info: version '999', a release's wheel is version 1") in _found(
        w, owner
    )


# --- the zip layout: nothing outside what zipfile lists ------------------------------------------


def _local(name: str, data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    comp = c.compress(data) + c.flush()
    head = struct.pack(
        "<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 8, 0, 0x21, zlib.crc32(data), len(comp), len(data), len(name), 0
    )
    return head + name.encode() + comp


def _splice_before_cd(raw: bytes, blob: bytes) -> bytes:
    end = len(raw) - 22
    cd_off = struct.unpack_from("<I", raw, end + 16)[0]
    out = bytearray(raw[:cd_off] + blob + raw[cd_off:])
    struct.pack_into("<I", out, end + len(blob) + 16, cd_off + len(blob))
    return bytes(out)


def _headers(raw: bytearray, local_off: int, central_off: int, value: int, fmt: str = "<H") -> None:
    """Write `value` at the same field of every local (+local_off) and central (+central_off) header."""
    for sig, off in ((b"PK\x03\x04", local_off), (b"PK\x01\x02", central_off)):
        i = raw.find(sig)
        while i >= 0:
            struct.pack_into(fmt, raw, i + off, value)
            i = raw.find(sig, i + 4)


def _prepend_zip(raw: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("evil.pth", "import os\n")
    return buf.getvalue() + raw


def _with_dir_entry(raw: bytes) -> bytes:
    buf = io.BytesIO(raw)
    with zipfile.ZipFile(buf, "a") as z:
        z.writestr(zipfile.ZipInfo("evil.pth/"), b"")
    return buf.getvalue()


def _with_extra(raw: bytes) -> bytes:
    """An Info-ZIP Unicode Path extra field on the first member (Python 3.12's zipfile uses it, 3.11's not)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as src, zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as dst:
        for n, info in enumerate(src.infolist()):
            out = zipfile.ZipInfo(info.filename, info.date_time)
            out.compress_type = zipfile.ZIP_DEFLATED
            if n == 0:
                path = b"evil.pth"
                out.extra = struct.pack("<HHBI", 0x7075, 5 + len(path), 1, zlib.crc32(info.filename.encode())) + path
            dst.writestr(out, src.read(info))
    return buf.getvalue()


def _non_ascii_name(raw: bytes) -> bytes:
    b = bytearray(raw)
    _headers(b, 6, 8, 0x800)
    i = b.find(b"PK\x01\x02")
    n = struct.unpack_from("<H", b, i + 28)[0]
    j = b.find(b[i + 46 : i + 46 + n])  # the same name in the local header
    b[i + 46 + n - 1] = b[j + n - 1] = 0xFF
    return bytes(b)


def _flagged(local: int, central: int, value: int) -> Callable[[bytes], bytes]:
    def edit(raw: bytes) -> bytes:
        b = bytearray(raw)
        _headers(b, local, central, value)
        return bytes(b)

    return edit


ZIP_ATTACKS: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "hidden-local-entry": (lambda r: _splice_before_cd(r, _local("evil.pth", b"import os\n")), "between the last member"),
    "prepended-zip": (_prepend_zip, "central directory does not end where the end record begins"),
    "trailing-bytes": (lambda r: r + b"junk", "does not end with a zip end record"),
    "archive-comment": (lambda r: r[:-2] + b"\x04\x00junk", "does not end with a zip end record"),
    "directory-entry": (_with_dir_entry, "'evil.pth/' is not a plain relative path"),
    "unicode-path-extra": (_with_extra, "extra fields, a comment or another disk"),
    "encrypted": (_flagged(6, 8, 0x1), "flags 0x0001"),
    "data-descriptor": (_flagged(6, 8, 0x8), "flags 0x0008"),
    "deflate64": (_flagged(8, 10, 9), "compression method 9"),
    "non-ascii-name": (_non_ascii_name, "is not a plain relative path"),
}


@pytest.mark.parametrize("attack", sorted(ZIP_ATTACKS))
def test_bytes_outside_zipfiles_view_are_refused_as_layout(signed: Path, owner: Any, versions, attack: str) -> None:
    """Was VERIFIED (hidden entry, prepended zip, directory entry, trailing bytes, comment, extra
    field) or a traceback (encrypted: RuntimeError; deflate64: NotImplementedError; a non-UTF-8
    name: UnicodeDecodeError)."""
    versions()
    edit, says = ZIP_ATTACKS[attack]
    signed.write_bytes(edit(signed.read_bytes()))
    ((check, detail),) = _found(signed, owner)
    assert check == "layout" and str(signed) in detail and says in detail, detail


def test_the_layout_control_reads_every_wheel_we_write(signed: Path, tmp_path: Path) -> None:
    from cacheon_subnet.release.zipform import layout_problem

    assert layout_problem(signed.read_bytes(), wheel.MAX_MEMBERS) is None
    plain = tmp_path / "p.whl"  # zipfile's defaults (stored, 0o600) too: only the layout is strict
    with zipfile.ZipFile(plain, "w") as z:
        z.writestr("a/b.py", b"x")
    assert read_wheel(plain) == {"a/b.py": b"x"}


def test_a_member_that_inflates_past_its_declared_size_is_read_in_bounded_steps(tmp_path: Path) -> None:
    """Was: zipfile's read() inflated the whole stream in one call before cutting it to the declared
    size (206 KiB declared 10 bytes: +434 MiB). Now at most CHUNK an inflate step."""
    inflated = 96 << 20
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    comp = b"".join(c.compress(b"\0" * (1 << 20)) for _ in range(inflated >> 20)) + c.flush()
    name = b"a/bomb.py"
    local = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 8, 0, 0x21, 0, len(comp), 10, len(name), 0) + name
    central = struct.pack(
        "<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, 8, 0, 0x21, 0, len(comp), 10, len(name), 0, 0, 0, 0, 0, 0
    )
    cd = central + name
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, len(cd), len(local) + len(comp), 0)
    path = tmp_path / "bomb.whl"
    path.write_bytes(local + comp + cd + end)
    tracemalloc.start()
    try:
        with pytest.raises(WheelError, match="'a/bomb.py' cannot be read"):
            read_wheel(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"peak {peak >> 20} MiB while inflating a member declared 10 bytes"


def test_a_corrupt_deflate_stream_is_a_finding(tmp_path: Path) -> None:
    path = tmp_path / "x.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a/x.py", b"print(1)\n" * 100)
    raw = bytearray(path.read_bytes())
    raw[30 + len("a/x.py")] = 0x07  # the deflate stream's first block: a reserved type (zlib.error, was a traceback)
    path.write_bytes(bytes(raw))
    with pytest.raises(WheelError, match="'a/x.py' cannot be read"):
        read_wheel(path)


def test_member_count_and_file_size_are_bounded_before_zipfile_parses(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "many.whl"
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 60000, 60000, 0, 0, 0)
    path.write_bytes(end)
    with pytest.raises(WheelError, match="60000 members, more than 8192"):
        read_wheel(path)
    monkeypatch.setattr(wheel, "MAX_WHEEL_BYTES", 10)
    with pytest.raises(WheelError, match="22 bytes, more than a release wheel's 10"):
        read_wheel(path)


# --- never a traceback ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("member", "data", "check", "says"),
    [
        ("release.json", b"[" * 100_000, "descriptor", "not JSON (RecursionError"),
        ("release.json", b" " * ((4 << 20) + 1), "descriptor", "more than 4194304"),
        ("release.sig", b"[" * 4000, "signature", "release.sig: not JSON (RecursionError"),
        ("release.sig", b"{}" + b" " * 5000, "signature", "release.sig: 5002 bytes, more than 4096"),
    ],
    ids=["deep-descriptor", "huge-descriptor", "deep-signature", "huge-signature"],
)
def test_a_hostile_descriptor_or_signature_is_a_finding(
    signed: Path, owner: Any, versions, member, data, check, says
) -> None:
    """Was a RecursionError traceback out of `cacheon release verify`."""
    versions()
    w = _rewrite(signed, lambda m, pkg, di: m.__setitem__(f"{pkg}/{member}", data))
    found = _found(w, owner)
    assert any(c == check and says in d for c, d in found), found


# --- who signed it ------------------------------------------------------------------------------


def test_a_self_signed_release_never_exits_0_without_owner(tmp_path: Path, versions) -> None:
    """Was exit 0: anyone builds and signs a consistent release; `verify WHEEL && pip install WHEEL`."""
    versions()
    w, _ = build_release(from_bundles([str(EXAMPLE)]), tmp_path)
    sign_wheel(w, new_key())
    report = verify_wheel(w)
    assert report.findings == () and report.outcome is Outcome.UNBOUND
    assert main(["release", "verify", str(w)]) == Exit.NO_DECISION


# --- the plugin at serving time ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("over", "says"),
    [
        ({"torch": "2.13.0+cu130"}, "torch 2.13.0+cu130 installed, the release pins 2.11.0"),
        ({"triton": "3.7.0"}, "triton 3.7.0 installed, the release pins 3.6.0"),
        ({"sglang_kernel": None}, "sglang-kernel not installed, the release pins 0.4.3"),
    ],
    ids=["torch", "triton", "sglang-kernel"],
)
def test_the_plugin_stays_stock_under_any_other_pin(
    signed: Path, tmp_path: Path, versions, fake_registry, caplog, over: dict[str, Any], says: str
) -> None:
    """Was: the plugin checked SGLang only and routed kernels measured under other torch/Triton."""
    versions(**over)
    pkg = _installed(signed, tmp_path / "site")
    with caplog.at_level(logging.WARNING, logger="cacheon.release"):
        assert runtime.load_release(pkg) is False
    assert fake_registry == []
    (line,) = [r.getMessage() for r in caplog.records]
    assert says in line and "stock kernels serve" in line


def test_a_local_version_tag_reads_alike_in_verify_and_the_plugin(
    signed: Path, tmp_path: Path, owner: Any, versions, fake_registry
) -> None:
    from cacheon_subnet.pins import SGLANG_PIN

    versions(sglang=SGLANG_PIN + "+cu130")  # was: verify accepted it, the plugin refused it
    assert verify_wheel(signed, owner.ss58_address).outcome is Outcome.VERIFIED
    assert runtime.load_release(_installed(signed, tmp_path / "site")) is True


def _plugins(monkeypatch: pytest.MonkeyPatch, names: list[str]) -> None:
    eps = [types.SimpleNamespace(name=n) for n in names]
    monkeypatch.setattr(runtime, "entry_points", lambda group: eps if group == "sglang.srt.plugins" else [])


def test_two_installed_releases_both_stay_stock_and_say_why(
    signed: Path, tmp_path: Path, versions, fake_registry, caplog, monkeypatch
) -> None:
    """Was: both registered an AROUND hook on Scheduler.__init__; the outermost (directory order)
    activated, the other's activation was a silent no-op, and both logged "routing"."""
    versions()
    pkg = _installed(signed, tmp_path / "site")
    other = "cacheon_release_0123456789ab"
    _plugins(monkeypatch, ["cacheon", pkg.name, other])
    with caplog.at_level(logging.WARNING, logger="cacheon.release"):
        assert runtime.load_release(pkg) is False
    (line,) = [r.getMessage() for r in caplog.records]
    assert f"2 cacheon releases installed ({other}, {pkg.name})" in line and "pip uninstall all but one" in line
    monkeypatch.setenv("SGLANG_PLUGINS", f"cacheon,{pkg.name}")  # the operator picks one: it serves
    assert runtime.load_release(pkg) is True
    assert runtime.other_releases(pkg.name) == []


def test_an_environment_arming_cacheons_own_plugin_keeps_the_release_stock(
    signed: Path, tmp_path: Path, versions, fake_registry, caplog, monkeypatch
) -> None:
    """Was: CACHEON_SEAM_NORM=1 in the serving environment armed the `cacheon` plugin beside the
    release; whichever hook was outermost activated its own tree."""
    versions()
    pkg = _installed(signed, tmp_path / "site")
    _plugins(monkeypatch, ["cacheon", pkg.name])
    monkeypatch.setenv("CACHEON_SEAM_NORM", "1")
    with caplog.at_level(logging.WARNING, logger="cacheon.release"):
        assert runtime.load_release(pkg) is False
    (line,) = [r.getMessage() for r in caplog.records]
    assert "arms cacheon's own seam plugin (CACHEON_SEAM_NORM=1)" in line
    monkeypatch.setenv("SGLANG_PLUGINS", pkg.name)  # SGLang will not load `cacheon`: no clash
    assert runtime.load_release(pkg) is True


def test_verify_says_what_this_host_must_do_first(signed: Path, owner: Any, versions, monkeypatch) -> None:
    versions()
    pkg, _ = _layout(read_wheel(signed), str(signed))
    _plugins(monkeypatch, ["cacheon_release_0123456789ab", pkg])
    report = verify_wheel(signed, owner.ss58_address)
    assert report.outcome is Outcome.VERIFIED
    assert any("cacheon_release_0123456789ab is installed here; pip uninstall" in r for r in report.runtime)


# --- the operator's order ------------------------------------------------------------------------


def test_the_readme_verifies_the_file_before_installing_it() -> None:
    """Was: `pip install` then `verify`. Installed first, a hostile wheel's .pth runs in every later
    Python process, `cacheon release verify` included, and can make it print VERIFIED (a09)."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Serving a release") :]
    block = section[section.index("```bash") : section.index("```", section.index("```bash") + 7)]
    assert block.index("cacheon release verify") < block.index("pip install"), block
