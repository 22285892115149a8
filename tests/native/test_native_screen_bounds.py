"""What a CUDA bundle can make the validator's host do before any bounded child runs. Red team
2026-12-05: 64 ops naming the same four 512 KiB trigraph files (a 4.6 KB archive) made the lexical
pre-scan run ~2 h (a quadratic line count, once an op, on past the first refusal); 14 unlisted
16 MiB `.cu` files were normalised for the copy identity in the host (170 s, 1.6 GiB)."""

from __future__ import annotations

import pytest
from native_bundles import SCALE, SCALE_DECL, WRAPPER, cuda_bundle

from cacheon_subnet.bundle import bundle_from_files
from cacheon_subnet.bundle.identity import normalize
from cacheon_subnet.bundle.limits import DEFAULT_CUDA_LIMITS
from cacheon_subnet.errors import ManifestError
from native import scan
from native.build import BuildOptions
from native.commands import build_all


def test_a_files_trigraphs_are_reported_at_their_lines_and_capped():
    text = "int a;\n??=x\nint b;\n" + "??/\n" * 5000
    got = scan.scan_file("k.cu", text, frozenset({"k.cu"}), frozenset({"k.cu"}))
    assert len(got) == scan.MAX_DIAGNOSTICS and all("trigraph" in d.message for d in got)
    assert [d.line for d in got[:3]] == [2, 4, 5]


def test_a_files_other_findings_are_capped_too():
    text = "#pragma foo\n" * 500
    got = scan.scan_file("k.cu", text, frozenset({"k.cu"}), frozenset({"k.cu"}))
    assert len(got) == scan.MAX_DIAGNOSTICS


def ops_sharing(n_ops: int, sources: dict[str, bytes]):
    names = ", ".join(f'"{p}"' for p in sources)
    ops = "".join(
        f'[[ops]]\nslot = "norm.rmsnorm"\nvariant = "v{i}"\nentry = "w:rmsnorm"\n'
        f"[ops.cuda]\nsources = [{names}]\nkernels = {{ {SCALE_DECL} }}\n"
        for i in range(n_ops)
    )
    manifest = ('schema = "cacheon.bundle/3"\n' + ops).encode()
    return {"manifest.toml": manifest, "w.py": WRAPPER, **sources}


def test_the_ops_cuda_sources_added_up_are_capped_when_the_bundle_loads():
    big = DEFAULT_CUDA_LIMITS.source_bytes - 1024
    srcs = {"k.cu": SCALE.encode() + b"//" + b"x" * big}
    srcs |= {f"h{i}.cuh": b"//" + b"y" * big for i in range(3)}  # ~2 MiB an op
    bundle_from_files(ops_sharing(2, srcs))  # two ops: ~4 MiB, under the cap
    with pytest.raises(ManifestError, match="add up to"):
        bundle_from_files(ops_sharing(3, srcs))
    with pytest.raises(ManifestError, match="per CUDA source"):
        bundle_from_files(ops_sharing(1, {"k.cu": b"x" * (DEFAULT_CUDA_LIMITS.source_bytes + 1)}))


def test_an_unlisted_cu_counts_by_its_bytes_and_is_never_normalised(monkeypatch):
    extra = {"junk/j0.cu": b"a;" * 1000}
    listed = cuda_bundle(extra=extra)
    seen: list[bytes] = []
    real = normalize.normal_form
    monkeypatch.setattr(normalize, "normal_form", lambda d: seen.append(d) or real(d))
    doc = normalize.normalized_document(listed)
    assert doc is not None and seen == [SCALE.encode()]  # only the op's own source
    assert doc["files"]["k.cu"].startswith("cu-norm:") and not doc["files"]["junk/j0.cu"].startswith("cu-norm:")


def test_a_validator_stops_at_the_first_refused_op():
    bad = "??=include\n" + SCALE
    files = ops_sharing(3, {"k.cu": bad.encode()})
    bundle = bundle_from_files(files)
    every = build_all(bundle, BuildOptions())
    first = build_all(bundle, BuildOptions(), first_refusal=True)
    assert len(every) == 3 and all(b.refused is not None for b in every)
    assert len(first) == 1 and first[0].refused is not None
