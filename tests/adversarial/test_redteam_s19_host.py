"""Red team 2026-12-05 (session 19): small archives that made the validator's own process work for
minutes to hours before any bounded child ran. Each shape goes through the archive path the fetch
stage takes (an uploaded tar.gz -> `load_bundle`), then through what screening runs in the host."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.bundle.identity import normalize
from cacheon_subnet.bundle.limits import DEFAULT_CUDA_LIMITS
from cacheon_subnet.errors import ManifestError
from native import scan
from native.build import BuildOptions
from native.commands import build_all

WRAPPER = b"def rmsnorm(x, weight, out, eps):\n    raise NotImplementedError\n"
DECL = 'k = ["ptr", "ptr", "i32", "f32"]'
TRIGRAPHS = b"??=" * (DEFAULT_CUDA_LIMITS.source_bytes // 3)  # one 512 KiB file of trigraphs


def bundle_dir(root: Path, ops: int, sources: dict[str, bytes], manifest_tail: str = "") -> Path:
    names = ", ".join(f'"{p}"' for p in sources if p.endswith((".cu", ".cuh")) and not p.startswith("junk/"))
    text = 'schema = "cacheon.bundle/3"\n' + "".join(
        f'[[ops]]\nslot = "norm.rmsnorm"\nvariant = "v{i}"\nentry = "w:rmsnorm"\n'
        f"[ops.cuda]\nsources = [{names}]\nkernels = {{ {DECL} }}\n"
        for i in range(ops)
    )
    src = root / "src"
    for rel, data in {"manifest.toml": (text + manifest_tail).encode(), "w.py": WRAPPER, **sources}.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    return src


def archive(tmp_path: Path, src: Path) -> Path:
    """A plain tar.gz of `src`'s files: what a miner uploads need not have passed `cacheon pack`."""
    out = tmp_path / "b.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for f in sorted(p for p in src.rglob("*") if p.is_file()):
            tar.add(f, arcname=f.relative_to(src).as_posix())
    return out


def test_sixty_four_ops_naming_the_same_trigraph_files_are_refused_at_load(tmp_path):
    """Was ~1.9 h (est.) of the validator's CPU: a quadratic line count, once an op."""
    sources = {"k0.cu": TRIGRAPHS, **{f"h{i}.cuh": TRIGRAPHS for i in range(1, 4)}}
    with pytest.raises(ManifestError, match="add up to"):
        load_bundle(archive(tmp_path, bundle_dir(tmp_path, 64, sources)))


def test_two_such_ops_fail_at_the_first_trigraph_of_the_first_op(tmp_path):
    """Was 216.6 s: now the first op's first file ends the scan, with at most 20 findings."""
    sources = {"k0.cu": TRIGRAPHS, **{f"h{i}.cuh": TRIGRAPHS for i in range(1, 4)}}
    bundle = load_bundle(archive(tmp_path, bundle_dir(tmp_path, 2, sources)))
    [refused] = build_all(bundle, BuildOptions(), first_refusal=True)
    assert refused.refused is not None and 0 < len(refused.refused.diagnostics) <= scan.MAX_DIAGNOSTICS


def test_unlisted_cu_members_are_hashed_as_bytes_never_normalised(tmp_path, monkeypatch):
    """Was 170 s and 1.6 GiB for 14 unlisted 16 MiB files: no op compiles them."""
    junk = {f"junk/j{i}.cu": os.urandom(1 << 18).hex().encode() for i in range(4)}  # under the ratio cap
    bundle = load_bundle(archive(tmp_path, bundle_dir(tmp_path, 1, {"k0.cu": b"int x;\n", **junk})))
    normalised: list[int] = []
    real = normalize.normal_form
    monkeypatch.setattr(normalize, "normal_form", lambda d: normalised.append(len(d)) or real(d))
    files = normalize.other_files(bundle.files, normalize.compiled_sources(bundle))
    assert normalised == [len(b"int x;\n")] and all(not files[p].startswith("cu-norm:") for p in junk)


def test_a_manifest_of_a_long_in_list_is_refused_at_load(tmp_path):
    """Was 11.6 s of tomllib at every load for a valid 16 MiB manifest (136 KiB archive)."""
    tail = "[ops.constraints]\nT = { in = [" + "1, " * 200_000 + "1] }\n"
    pad = os.urandom(1 << 20).hex().encode()  # keeps the archive under the 200x ratio cap, as the red team's did
    with pytest.raises(ManifestError, match="bytes >"):
        load_bundle(archive(tmp_path, bundle_dir(tmp_path, 1, {"k0.cu": b"int x;\n", "aaa_pad.txt": pad}, tail)))
