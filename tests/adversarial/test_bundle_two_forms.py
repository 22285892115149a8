"""One bundle, one digest, whichever form it takes (archive, directory, sealed engine tree).

The directory reader and the engine tree's re-digest both skip `__pycache__` (interpreter
caches are not content), but an archive member `__pycache__/notes.py` was kept: the archive's
digest then differed from the same bytes written out and read back, and `build_tree` refused
the bundle as `tree-content`, which the arena re-raises as infrastructure trouble (retried,
never a verdict) rather than the miner's FAIL. Such a member is refused at load, naming it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cacheon_subnet.bundle import bundle_from_files, load_bundle
from cacheon_subnet.errors import BundleError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validator"))
from validator_fakes import EXAMPLES  # noqa: E402


@pytest.mark.parametrize("member", ["__pycache__/notes.py", "pkg/__pycache__/x.py", "__pycache__/README"])
def test_pycache_member_is_refused(member):
    files = dict(load_bundle(EXAMPLES / "norm.rmsnorm").files)
    files[member] = b"X = 1\n"
    with pytest.raises(BundleError) as e:
        bundle_from_files(files)
    assert e.value.rule == "path-pycache" and e.value.path == member, e.value


def test_directory_form_still_skips_interpreter_caches(tmp_path):
    b = load_bundle(EXAMPLES / "norm.rmsnorm")
    d = b.write_to(tmp_path / "b", read_only=False)
    (d / "__pycache__").mkdir()
    (d / "__pycache__" / "kernel.cpython-311.pyc").write_bytes(b"\x00junk")
    assert load_bundle(d).digest == b.digest
