"""The manifest's `[ops.cuda]` table (schema 3): strict, and schema 2 keeps its meaning."""

from __future__ import annotations

import pytest
from native_bundles import SCALE_DECL, WRAPPER, cuda_bundle, manifest

from cacheon_subnet.bundle import bundle_from_files, parse_manifest
from cacheon_subnet.bundle.cuda import ParamType
from cacheon_subnet.errors import ManifestError

FILES = frozenset({"w.py", "k.cu", "kernels/common.cuh", "kernels/other.cu", "notes.md"})


def test_a_cuda_op_parses_into_sources_units_and_typed_kernels():
    m = parse_manifest(
        manifest('b = ["ptr", "u64", "f64"], a = []', '["kernels/common.cuh", "k.cu", "kernels/other.cu"]'), FILES
    )
    cuda = m.ops[0].cuda
    assert cuda is not None and cuda.units == ("k.cu", "kernels/other.cu")
    assert [(k.name, k.params) for k in cuda.kernels] == [("a", ()), ("b", (ParamType.PTR, ParamType.U64, ParamType.F64))]
    assert m.to_json()["ops"][0]["cuda"] == {
        "sources": ["kernels/common.cuh", "k.cu", "kernels/other.cu"],
        "kernels": {"a": [], "b": ["ptr", "u64", "f64"]},
    }


def test_schema_2_stays_readable_and_its_document_is_unchanged():
    """A committed /2 bundle means what it meant: no `cuda` key appears in its manifest document."""
    text = b'schema = "cacheon.bundle/2"\n[[ops]]\nslot = "norm.rmsnorm"\nentry = "w:rmsnorm"\n'
    b = bundle_from_files({"manifest.toml": text, "w.py": WRAPPER})
    assert b.manifest.schema == "cacheon.bundle/2" and b.manifest.ops[0].cuda is None
    assert "cuda" not in b.manifest.to_json()["ops"][0]


def test_a_cuda_table_needs_schema_3():
    with pytest.raises(ManifestError) as e:
        parse_manifest(manifest(schema="cacheon.bundle/2"), FILES)
    assert e.value.field == "ops[0].cuda" and "cacheon.bundle/3" in str(e.value)


@pytest.mark.parametrize(
    "sources,kernels,field,words",
    [
        ('["k-x.cu"]', SCALE_DECL, "ops[0].cuda.sources", "no dash"),
        ('["k x.cu"]', SCALE_DECL, "ops[0].cuda.sources", "no dash, space"),
        ('["-Xcompiler.cu"]', SCALE_DECL, "ops[0].cuda.sources", "pattern"),
        ('["../k.cu"]', SCALE_DECL, "ops[0].cuda.sources", "'..'"),
        ('["/etc/k.cu"]', SCALE_DECL, "ops[0].cuda.sources", "pattern"),
        ('["k.cpp"]', SCALE_DECL, "ops[0].cuda.sources", ".cu or .cuh"),
        ('["k.cu", "k.cu"]', SCALE_DECL, "ops[0].cuda.sources", "duplicates"),
        ('["missing.cu"]', SCALE_DECL, "ops[0].cuda.sources", "not in the bundle"),
        ('["kernels/common.cuh"]', SCALE_DECL, "ops[0].cuda.sources", "translation unit"),
        ("[]", SCALE_DECL, "ops[0].cuda.sources", "non-empty"),
        ('["k.cu"]', 'scale = ["ptr", "float"]', "ops[0].cuda.kernels.scale", "unknown parameter type 'float'"),
        ('["k.cu"]', 'scale = "ptr"', "ops[0].cuda.kernels.scale", "list of parameter types"),
        ('["k.cu"]', "_Z5scalev = []", "ops[0].cuda.kernels._Z5scalev", "plain C identifier"),
        ('["k.cu"]', "__scale = []", "ops[0].cuda.kernels.__scale", "plain C identifier"),
    ],
)
def test_bad_cuda_tables_name_the_field_and_why(sources, kernels, field, words):
    with pytest.raises(ManifestError) as e:
        parse_manifest(manifest(kernels, sources), FILES)
    assert e.value.field == field and words in str(e.value), str(e.value)


def test_unknown_keys_and_limits_are_refused():
    text = manifest().decode().replace("[ops.cuda]\n", "[ops.cuda]\nflags = ['-O0']\n")
    with pytest.raises(ManifestError) as e:
        parse_manifest(text, FILES)
    assert e.value.field == "ops[0].cuda.flags" and "unknown key" in str(e.value)
    many = ", ".join(f'"s{i}.cu"' for i in range(33))
    with pytest.raises(ManifestError) as e:
        parse_manifest(manifest(sources=f"[{many}]"), None)
    assert "33 files > 32" in str(e.value)
    params = ", ".join('"i32"' for _ in range(65))
    with pytest.raises(ManifestError) as e:
        parse_manifest(manifest(f"k = [{params}]"), FILES)
    assert "65 parameters > 64" in str(e.value)


def test_the_cuda_example_and_a_test_bundle_load():
    from conftest import EXAMPLES

    from cacheon_subnet.bundle import load_bundle

    ex = load_bundle(EXAMPLES / "cuda" / "norm.rmsnorm")
    assert ex.manifest.schema == "cacheon.bundle/3"
    assert [k.name for k in ex.manifest.ops[0].cuda.kernels] == ["rmsnorm_bf16", "rmsnorm_f16", "rmsnorm_f32"]
    assert cuda_bundle().manifest.ops[0].cuda.units == ("k.cu",)
