"""manifest.toml errors name the field and say why."""

import pytest

from cacheon_subnet.bundle import bundle_from_files, parse_manifest
from cacheon_subnet.errors import BundleError, ManifestError

OK = {"kernel.py": b"def rmsnorm(x, weight, out, eps):\n    pass\n"}


def _m(text: str) -> str:
    return 'schema = "cacheon.bundle/2"\n' + text


def test_minimal_manifest_defaults():
    m = parse_manifest(_m('[[ops]]\nslot = "norm.rmsnorm"\nentry = "kernel:rmsnorm"\n'), frozenset(OK))
    op = m.ops[0]
    assert op.variant == "default" and op.slot_version == 1 and "bfloat16" in op.dtypes
    assert op.entry == "kernel:rmsnorm"


@pytest.mark.parametrize(
    "text,field",
    [
        ('schema = "cacheon.bundle/9"\n[[ops]]\nslot="norm.rmsnorm"\nentry="kernel:rmsnorm"\n', "schema"),
        (_m('extra = 1\n[[ops]]\nslot="norm.rmsnorm"\nentry="kernel:rmsnorm"\n'), "extra"),
        (_m(""), "ops"),
        (_m('[[ops]]\nslot="norm.nope"\nentry="kernel:rmsnorm"\n'), "ops[0].slot"),
        (_m('[[ops]]\nslot="norm.rmsnorm"\nslot_version=7\nentry="kernel:rmsnorm"\n'), "ops[0].slot"),
        (_m('[[ops]]\nslot="norm.rmsnorm"\nentry="kernel.rmsnorm"\n'), "ops[0].entry"),
        (_m('[[ops]]\nslot="norm.rmsnorm"\nentry="missing:rmsnorm"\n'), "ops[0].entry"),
        (_m('[[ops]]\nslot="norm.rmsnorm"\nentry="torch:rmsnorm"\n'), "ops[0].entry"),
        (_m('[[ops]]\nslot="norm.rmsnorm"\nentry="kernel:rmsnorm"\ndtypes=["int8"]\n'), "ops[0].dtypes"),
        (_m('[[ops]]\nslot="norm.rmsnorm"\nentry="kernel:rmsnorm"\ndtypes=[]\n'), "ops[0].dtypes"),
        (_m('[[ops]]\nslot="norm.rmsnorm"\nentry="kernel:rmsnorm"\nvariant="Bad Name"\n'), "ops[0].variant"),
        (_m('[[ops]]\nslot="norm.rmsnorm"\nentry="kernel:rmsnorm"\nbogus=1\n'), "ops[0].bogus"),
        (_m('[[ops]]\nslot="norm.rmsnorm"\nentry="kernel:rmsnorm"\n[ops.constraints]\nZ={max=4}\n'), "ops[0].constraints.Z"),
        (
            _m('[[ops]]\nslot="norm.rmsnorm"\nentry="kernel:rmsnorm"\n[ops.constraints]\nH={multiple_of=0}\n'),
            "ops[0].constraints.H.multiple_of",
        ),
        (
            _m(
                '[[ops]]\nslot="norm.rmsnorm"\nentry="kernel:rmsnorm"\n[[ops]]\nslot="norm.rmsnorm"\nentry="kernel:rmsnorm"\n'
            ),
            "ops[1].variant",
        ),
        ("not toml = = =", ""),
    ],
)
def test_manifest_errors_name_the_field(text, field):
    with pytest.raises(ManifestError) as e:
        parse_manifest(text, frozenset(OK))
    assert e.value.field == field, str(e.value)
    assert "manifest.toml" in str(e.value)


def test_constraints_gate_eligibility():
    m = parse_manifest(
        _m(
            '[[ops]]\nslot="norm.rmsnorm"\nentry="kernel:rmsnorm"\n[ops.constraints]\n'
            "H={multiple_of=1024, max=4096}\nT={in=[1,7]}\n"
        ),
        frozenset(OK),
    )
    op = m.ops[0]
    assert op.eligible({"T": 1, "H": 4096}) and not op.eligible({"T": 2, "H": 4096})
    assert not op.eligible({"T": 1, "H": 8192}) and not op.eligible({"T": 7, "H": 1000})


def test_missing_manifest():
    with pytest.raises(BundleError) as e:
        bundle_from_files(OK)
    assert e.value.rule == "manifest-missing"


def test_schema_1_is_refused_with_how_to_port():
    text = 'schema = "cacheon.bundle/1"\n[[ops]]\nslot="norm.rmsnorm"\nentry="kernel:rmsnorm"\n'
    with pytest.raises(ManifestError) as e:
        parse_manifest(text, frozenset(OK))
    msg = str(e.value)
    assert e.value.field == "schema" and "manifest.toml" in msg and "manifest.schema" in msg
    assert "cacheon verify" in msg and 'schema = "cacheon.bundle/3"' in msg


def test_every_manifest_in_the_repo_is_schema_2_unless_it_carries_cuda():
    """The shipped examples stay schema 2 (still read as they were): their digests anchor recorded
    evidence (the arena's quality calibration trusts runs of shipped bundles by digest); schema 3
    is for bundles with CUDA sources."""
    from conftest import REPO

    for m in sorted((REPO / "examples").rglob("manifest.toml")):
        man = parse_manifest(m.read_bytes())
        cuda = any(op.cuda is not None for op in man.ops)
        assert man.schema == ("cacheon.bundle/3" if cuda else "cacheon.bundle/2"), m


def test_a_manifest_is_small_and_an_in_list_short():
    """Red team 2026-12-05: a valid 16 MiB manifest (an `in` list of 8.4 M integers, a 136 KiB
    archive) cost 11.6 s of tomllib at each of a bundle's loads."""
    from cacheon_subnet.bundle.manifest import MANIFEST_BYTES, MAX_ONE_OF

    def listed(n: int) -> str:
        return _m(
            f'[[ops]]\nslot="norm.rmsnorm"\nentry="kernel:rmsnorm"\n[ops.constraints]\nT={{in=[{", ".join(["1"] * n)}]}}\n'
        )

    assert parse_manifest(listed(MAX_ONE_OF), frozenset(OK)).ops[0].eligible({"T": 1})
    with pytest.raises(ManifestError, match=f"> {MAX_ONE_OF}") as e:
        parse_manifest(listed(MAX_ONE_OF + 1), frozenset(OK))
    assert e.value.field.endswith(".in")
    padded = listed(1) + "#" * (MANIFEST_BYTES - len(listed(1)))
    assert parse_manifest(padded, frozenset(OK))  # at the cap: read
    with pytest.raises(ManifestError, match=f"> {MANIFEST_BYTES}"):
        parse_manifest(padded + "#", frozenset(OK))
