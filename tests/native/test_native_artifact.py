"""Sealed, content-addressed artifacts: the name proves the content, a tampered one is never used."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from cacheon_subnet.bundle.cuda import ParamType
from cacheon_subnet.records import codec
from native.artifact import DESCRIPTOR, Cache, Descriptor, KernelEntry, UnitRecord, cache_key, load
from native.toolchain import ToolchainId

TC = ToolchainId("13.0.88", "cuda_13.0.r13.0/compiler.1", "g++ 12.2.0", ("nvidia-cuda-nvcc==13.0.88",))
CUBIN = b"\x7fELF fake cubin"


def _files(key: str = "k" * 64) -> dict[str, bytes]:
    desc = Descriptor(
        "cacheon.native/1",
        "norm.rmsnorm",
        "default",
        "sm_90a",
        "s" * 64,
        key,
        TC,
        (UnitRecord("k.cu", "unit0.cubin", hashlib.sha256(CUBIN).hexdigest(), (("$CUDA/bin/nvcc", "-ptx"),), ("k.cu",)),),
        (KernelEntry("scale", (ParamType.PTR, ParamType.F32), ("b64", "f32"), "k.cu", "unit0.cubin"),),
    )
    return {DESCRIPTOR: codec.dumps(desc).encode(), "unit0.cubin": CUBIN}


def test_put_seals_and_get_finds_it_by_key(tmp_path):
    cache = Cache(tmp_path)
    art = cache.put("a" * 64, _files())
    assert not art.cached and art.path.name == art.digest and art.cubin("scale") == CUBIN
    assert oct(art.path.stat().st_mode & 0o777) == "0o555" and all(
        (p.stat().st_mode & 0o777) == 0o444 for p in art.path.iterdir()
    )
    again = cache.get("a" * 64)
    assert again is not None and again.cached and again.digest == art.digest
    assert again.descriptor.kernels[0].params == (ParamType.PTR, ParamType.F32)
    assert cache.get("b" * 64) is None


@pytest.mark.parametrize("tamper", ["cubin", "extra_file", "descriptor_key", "key_file"])
def test_a_tampered_artifact_is_a_miss_and_is_replaced(tmp_path, tamper):
    cache = Cache(tmp_path)
    art = cache.put("a" * 64, _files())
    os.chmod(art.path, 0o755)
    if tamper == "cubin":
        (art.path / "unit0.cubin").chmod(0o644)
        (art.path / "unit0.cubin").write_bytes(b"evil")
    elif tamper == "extra_file":
        (art.path / "payload.so").write_bytes(b"x")
    elif tamper == "descriptor_key":
        doc = json.loads((art.path / DESCRIPTOR).read_text())
        doc["extra"] = 1
        (art.path / DESCRIPTOR).chmod(0o644)
        (art.path / DESCRIPTOR).write_text(json.dumps(doc))
    else:
        (tmp_path / "keys" / ("a" * 64)).write_text("../../etc\n")
    assert cache.get("a" * 64) is None
    fresh = cache.put("a" * 64, _files())
    assert cache.get("a" * 64) is not None and fresh.cubin("scale") == CUBIN


def test_a_descriptor_whose_cubin_hash_differs_does_not_load(tmp_path):
    files = _files()
    files["unit0.cubin"] = b"other bytes"  # the digest covers it, the descriptor's sha256 does not match
    art = Cache(tmp_path).put("c" * 64, {**_files(), "unit0.cubin": CUBIN})
    assert load(art.path, cached=True) is not None
    bad = Cache(tmp_path / "b")
    with pytest.raises(OSError, match="does not read back"):
        bad.put("d" * 64, files)


def test_the_key_covers_sources_declaration_toolchain_arch_and_flags():
    base = cache_key("s" * 64, {"k": ["ptr"]}, TC, "sm_90a", ("-ptx",))
    assert (
        len(
            {
                base,
                cache_key("t" * 64, {"k": ["ptr"]}, TC, "sm_90a", ("-ptx",)),
                cache_key("s" * 64, {"k": ["u64"]}, TC, "sm_90a", ("-ptx",)),
                cache_key("s" * 64, {"k": ["ptr"]}, ToolchainId("13.0.89", "", "", ()), "sm_90a", ("-ptx",)),
                cache_key("s" * 64, {"k": ["ptr"]}, TC, "sm_100a", ("-ptx",)),
                cache_key("s" * 64, {"k": ["ptr"]}, TC, "sm_90a", ("-ptx", "-G")),
            }
        )
        == 6
    )
