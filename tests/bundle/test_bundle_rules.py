"""Every limit and path rule rejects with a specific error naming the member and the rule."""

import gzip
import io
import os
import tarfile

import pytest
from conftest import MANIFEST

from cacheon_subnet.bundle import Limits, load_bundle, pack
from cacheon_subnet.errors import BundleError

KERNEL = "def rmsnorm(x, weight, out, eps):\n    out.copy_(x)\n"


def _tar(path, members):
    """members: list of (TarInfo-kwargs, data)."""
    with tarfile.open(path, "w:gz") as tar:
        for kw, data in members:
            info = tarfile.TarInfo(kw.pop("name"))
            for k, v in kw.items():
                setattr(info, k, v)
            info.size = len(data) if info.type == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
    return path


def _rule(excinfo):
    return excinfo.value.rule


def test_valid_directory_loads(make_bundle):
    b = load_bundle(make_bundle({"manifest.toml": MANIFEST, "kernel.py": KERNEL}))
    assert set(b.files) == {"manifest.toml", "kernel.py"} and len(b.digest) == 64


@pytest.mark.parametrize(
    "name,rule",
    [
        ("evil.so", "file-type"),
        ("x.pyc", "file-type"),
        ("hook.pth", "file-type"),
        ("sitecustomize.py", "file-name"),
        ("conftest.py", "file-name"),
        (".hidden.py", "path-chars"),
        ("a b.py", "path-chars"),
    ],
)
def test_disallowed_files(make_bundle, name, rule):
    root = make_bundle({"manifest.toml": MANIFEST, "kernel.py": KERNEL, name: "x = 1\n"})
    with pytest.raises(BundleError) as e:
        load_bundle(root)
    assert _rule(e) == rule and name in str(e.value)


def test_symlink_in_directory(make_bundle):
    root = make_bundle({"manifest.toml": MANIFEST, "kernel.py": KERNEL})
    os.symlink("/etc/passwd", root / "link.py")
    with pytest.raises(BundleError) as e:
        load_bundle(root)
    assert _rule(e) == "symlink" and "link.py" in str(e.value)


def test_hardlink_in_directory(make_bundle):
    root = make_bundle({"manifest.toml": MANIFEST, "kernel.py": KERNEL})
    os.link(root / "kernel.py", root / "copy.py")
    with pytest.raises(BundleError) as e:
        load_bundle(root)
    assert _rule(e) == "hardlink"


def test_fifo_in_directory(make_bundle):
    root = make_bundle({"manifest.toml": MANIFEST, "kernel.py": KERNEL})
    os.mkfifo(root / "pipe.py")
    with pytest.raises(BundleError) as e:
        load_bundle(root)
    assert _rule(e) == "special-file"


def test_binary_and_encoding(make_bundle):
    with pytest.raises(BundleError) as e:
        load_bundle(make_bundle({"manifest.toml": MANIFEST, "kernel.py": b"x=1\x00\x01"}))
    assert _rule(e) == "file-binary"


def test_limits_members_file_and_total(make_bundle):
    files = {"manifest.toml": MANIFEST, "kernel.py": KERNEL, "big.txt": "a" * 2000}
    with pytest.raises(BundleError) as e:
        load_bundle(make_bundle(files, "b1"), Limits(file_bytes=1000))
    assert _rule(e) == "file-too-large" and "big.txt" in str(e.value)
    with pytest.raises(BundleError) as e:
        load_bundle(make_bundle(files, "b2"), Limits(members=2))
    assert _rule(e) == "too-many-members"
    with pytest.raises(BundleError) as e:
        load_bundle(make_bundle(files, "b3"), Limits(unpacked_bytes=1500))
    assert _rule(e) == "unpacked-too-large"


@pytest.mark.parametrize(
    "name,rule",
    [
        ("/abs/kernel.py", "path-absolute"),
        ("../escape.py", "path-parent"),
        ("a/../../b.py", "path-parent"),
        ("a\\b.py", "path-backslash"),
        ("pkg\n/x.py", "path-chars"),  # red team: `^...$` matched before a trailing newline
    ],
)
def test_archive_path_rules(tmp_path, name, rule):
    arc = _tar(
        tmp_path / "b.tar.gz",
        [
            ({"name": "manifest.toml"}, MANIFEST.encode()),
            ({"name": "kernel.py"}, KERNEL.encode()),
            ({"name": name}, b"x=1\n"),
        ],
    )
    with pytest.raises(BundleError) as e:
        load_bundle(arc)
    assert _rule(e) == rule
    assert not (tmp_path / "escape.py").exists() and not (tmp_path.parent / "escape.py").exists()


@pytest.mark.parametrize(
    "kind,rule",
    [
        (tarfile.SYMTYPE, "symlink"),
        (tarfile.LNKTYPE, "hardlink"),
        (tarfile.CHRTYPE, "special-file"),
        (tarfile.FIFOTYPE, "special-file"),
    ],
)
def test_archive_member_types(tmp_path, kind, rule):
    arc = _tar(
        tmp_path / "b.tar.gz",
        [({"name": "manifest.toml"}, MANIFEST.encode()), ({"name": "x.py", "type": kind, "linkname": "/etc/passwd"}, b"")],
    )
    with pytest.raises(BundleError) as e:
        load_bundle(arc)
    assert _rule(e) == rule and "x.py" in str(e.value)


def test_archive_size_and_bomb(tmp_path):
    # A highly compressible member far over the per-file limit is stopped while streaming.
    arc = _tar(
        tmp_path / "bomb.tar.gz", [({"name": "manifest.toml"}, MANIFEST.encode()), ({"name": "big.txt"}, b"a" * (3 << 20))]
    )
    assert arc.stat().st_size < 100_000
    with pytest.raises(BundleError) as e:
        load_bundle(arc, Limits(file_bytes=1 << 20))
    assert _rule(e) == "file-too-large"
    with pytest.raises(BundleError) as e:
        load_bundle(arc, Limits(archive_bytes=1000))
    assert _rule(e) == "archive-too-large"


def test_corrupt_archive(tmp_path):
    p = tmp_path / "bad.tar.gz"
    p.write_bytes(gzip.compress(b"not a tar at all" * 100))
    with pytest.raises(BundleError) as e:
        load_bundle(p)
    assert _rule(e) == "archive-corrupt"


def test_case_collision_in_archive(tmp_path):
    arc = _tar(
        tmp_path / "b.tar.gz",
        [
            ({"name": "manifest.toml"}, MANIFEST.encode()),
            ({"name": "kernel.py"}, KERNEL.encode()),
            ({"name": "Kernel.py"}, b"x=1\n"),
        ],
    )
    with pytest.raises(BundleError) as e:
        load_bundle(arc)
    assert _rule(e) == "case-collision"


def test_pack_is_deterministic_and_round_trips(make_bundle, tmp_path):
    src = make_bundle({"manifest.toml": MANIFEST, "kernel.py": KERNEL, "sub/util.py": "y = 2\n"})
    a = pack(src, tmp_path / "a.tar.gz")
    os.utime(src / "kernel.py", (1, 1))  # metadata must not matter
    b = pack(src, tmp_path / "b.tar.gz")
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()
    assert a.digest == b.digest == load_bundle(tmp_path / "a.tar.gz").digest
    with tarfile.open(tmp_path / "a.tar.gz") as t:
        infos = t.getmembers()
    assert [i.name for i in infos] == sorted(i.name for i in infos)
    assert all(i.mtime == 0 and i.uid == 0 and i.mode == 0o644 for i in infos)


def test_extraction_is_read_only_and_confined(make_bundle, tmp_path):
    b = load_bundle(make_bundle({"manifest.toml": MANIFEST, "kernel.py": KERNEL}))
    root = b.write_to(tmp_path / "x" / "root")
    assert sorted(p.name for p in root.iterdir()) == ["kernel.py", "manifest.toml"]
    assert oct((root / "kernel.py").stat().st_mode & 0o777) == "0o444"
