"""Red-team: hostile manifest values end as a ManifestError naming file and field, never a
traceback (the manifest is parsed in the validator's fetch stage and by `cacheon verify`)."""

from __future__ import annotations

import pytest

from cacheon_subnet.bundle.manifest import parse_manifest
from cacheon_subnet.errors import ManifestError

HEAD = 'schema = "cacheon.bundle/2"\n'
OP = '[[ops]]\nslot = "norm.rmsnorm"\nentry = "kernel:rmsnorm"\n'
FILES = frozenset({"manifest.toml", "kernel.py"})


@pytest.mark.parametrize(
    "text,field",
    [
        ('schema = ["cacheon.bundle/2"]\n' + OP, "schema"),  # was TypeError: unhashable type 'list'
        ("schema = { v = 2 }\n" + OP, "schema"),
        ("x = " + "[" * 5000 + "]" * 5000 + "\n", ""),  # was RecursionError inside tomllib
        (
            HEAD + '[[ops]]\nslot = "norm.rmsnorm"\nentry = "kernel:__class__"\n',
            "ops[0].entry",
        ),  # a callable that is no bundle def
        (HEAD + '[[ops]]\nslot = "norm.rmsnorm"\nentry = "__init__:rmsnorm"\n', "ops[0].entry"),
        (HEAD + OP + "[ops.constraints]\nH = { in = [true] }\n", "ops[0].constraints.H.in"),  # bool is not a size
        (HEAD + '[[ops]]\nslot = "norm.rmsnorm"\nentry = "../kernel:rmsnorm"\n', "ops[0].entry"),
        (HEAD + '[[ops]]\nslot = "norm.rmsnorm"\nentry = "/etc/passwd:x"\n', "ops[0].entry"),
        (HEAD + '[[ops]]\nslot = "norm.rmsnorm"\nentry = "kernel:rmsnorm"\nslot_version = 1.0\n', "ops[0].slot_version"),
        (
            HEAD + '[[ops]]\nslot = "norm.rmsnorm"\nentry = "kernel:rmsnorm"\nslot_version = 99999999999999999999\n',
            "ops[0].slot",
        ),
        (HEAD + '[[ops]]\nslot = 7\nentry = "kernel:rmsnorm"\n', "ops[0].slot"),
        (HEAD + OP + 'dtypes = [["bfloat16"]]\n', "ops[0].dtypes"),
        (HEAD + "ops = 3\n", "ops"),
        # was a bare ValueError out of tomllib (int()'s 4300-digit limit): the validator's fetch took it
        # for its own trouble (retried, then no_decision) and `cacheon verify` printed a traceback
        (HEAD + OP + "[ops.constraints]\nH = { min = " + "9" * 4301 + " }\n", ""),
        ("x = " + "1" * 5000 + "\n", ""),
        # `^...$` with .match accepted a trailing newline: variants "ab\n" and "ab_" are one custom-op
        # name in the engine (op_name), two to the normalized identity's tag-clash count
        (HEAD + OP + 'variant = "ab\\n"\n', "ops[0].variant"),
        (HEAD + '[[ops]]\nslot = "norm.rmsnorm"\nentry = "kernel:rmsnorm\\n"\n', "ops[0].entry"),
    ],
)
def test_hostile_manifest_is_a_field_error(text: str, field: str) -> None:
    with pytest.raises(ManifestError) as e:
        parse_manifest(text, FILES)
    assert e.value.field == field, str(e.value)
    assert "manifest.toml" in str(e.value)
