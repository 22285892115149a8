"""Sealed engine tree: build_tree -> open_tree, and every way a scheduler must refuse to load it."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from seam_harness import fn_name, make_bundle, make_tree

from cacheon_subnet.bundle.engine_tree import TREE_FILE, build_tree, canonical, open_tree, package_for
from cacheon_subnet.errors import BundleError

NORM = ("norm.rmsnorm", "norm.fused_add_rmsnorm")
OTHER = ("activation.silu_and_mul", "rope.neox")


def _writable(*paths: Path) -> None:
    """Tamper like an attacker with write access would (the tree is 0444/0555; root ignores it)."""
    for p in paths:
        os.chmod(p, (0o755 if p.is_dir() else 0o644))


def _rewrite_tree_json(root: Path, edit) -> str:  # noqa: ANN001
    """Edit tree.json and return the digest of the edited document (so the digest check passes
    and the next rule is the one that must fire)."""
    doc = json.loads((root / TREE_FILE).read_bytes())
    edit(doc)
    data = canonical(doc)
    _writable(root, root / TREE_FILE)
    (root / TREE_FILE).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def test_one_bundle_roundtrip(tmp_path: Path) -> None:
    b = make_bundle(
        NORM,
        salt="one",
        op_extra={"norm.rmsnorm": 'dtypes = ["bfloat16"]\nconstraints = { H = { multiple_of = 8, min = 16 } }'},
    )
    tree = build_tree(tmp_path / "t", [(b, b.manifest.ops)], scan_policy=False)
    assert tree.digest == hashlib.sha256((tmp_path / "t" / TREE_FILE).read_bytes()).hexdigest()
    again = open_tree(tmp_path / "t", tree.digest)
    assert again == tree
    pkg = package_for(b.digest)
    assert [(o.slot, o.package, o.digest, o.module, o.attr, o.qualified_module) for o in tree.ops] == [
        (s, pkg, b.digest, "kernel", fn_name(s), f"{pkg}.kernel") for s in sorted(NORM)
    ]
    rms = next(o for o in tree.ops if o.slot == "norm.rmsnorm")
    assert rms.dtypes == ("bfloat16",) and rms.constraints == (("H", {"min": 16, "multiple_of": 8}),)
    assert {p.name for p in (tmp_path / "t").iterdir()} == {TREE_FILE, pkg}
    assert {p.relative_to(tmp_path / "t" / pkg).as_posix() for p in (tmp_path / "t" / pkg).rglob("*")} == set(b.files)


def test_two_bundles_subset_and_location_independent_digest(tmp_path: Path) -> None:
    a, c = make_bundle(NORM, salt="a"), make_bundle(OTHER, salt="c")
    only_rope = [o for o in c.manifest.ops if o.slot == "rope.neox"]
    tree = build_tree(tmp_path / "t1", [(a, a.manifest.ops), (c, only_rope)], scan_policy=False)
    assert [(o.slot, o.package) for o in tree.ops] == [
        ("norm.fused_add_rmsnorm", package_for(a.digest)),
        ("norm.rmsnorm", package_for(a.digest)),
        ("rope.neox", package_for(c.digest)),
    ]  # unselected ops of a bundle are not in the tree
    assert open_tree(tmp_path / "t1", tree.digest).ops == tree.ops
    twin = build_tree(
        tmp_path / "t2", [(c, only_rope), (a, a.manifest.ops)], scan_policy=False
    )  # order of selections: irrelevant
    assert twin.digest == tree.digest
    other = build_tree(tmp_path / "t3", [(a, a.manifest.ops)], scan_policy=False)
    assert other.digest != tree.digest


def test_tree_is_read_only(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t", [NORM, OTHER])
    entries = [tree.root, *tree.root.rglob("*")]
    assert len(entries) == 1 + 1 + 2 * 3  # root, tree.json, two packages of manifest + kernel
    for p in entries:
        mode = stat.S_IMODE(os.lstat(p).st_mode)
        assert not stat.S_ISLNK(os.lstat(p).st_mode)
        assert mode & 0o222 == 0, f"{p} is writable ({oct(mode)})"
        assert mode == (0o555 if p.is_dir() else 0o444), f"{p}: {oct(mode)}"
    if os.geteuid() != 0:  # root ignores permission bits; everyone else must be refused
        with pytest.raises(PermissionError):
            (tree.root / TREE_FILE).write_text("{}")


@pytest.mark.parametrize("which", [NORM[0], OTHER[0]])
@pytest.mark.parametrize("tamper", ["manifest.toml", "kernel.py", "add-file", "remove-file", "add-dir-file"])
def test_tampered_package_refused(tmp_path: Path, tamper: str, which: str) -> None:
    tree = make_tree(tmp_path / "t", [NORM, OTHER])
    pkg = tree.root / next(o.package for o in tree.ops if o.slot == which)  # either package: each is checked
    _writable(pkg, *pkg.rglob("*"))
    if tamper == "add-file":
        (pkg / "extra.py").write_text("x = 1\n")
    elif tamper == "add-dir-file":
        (pkg / "sub").mkdir()
        (pkg / "sub" / "__init__.py").write_text("")
    elif tamper == "remove-file":
        (pkg / "manifest.toml").unlink()
    else:
        (pkg / tamper).write_bytes((pkg / tamper).read_bytes() + b"\n# tampered\n")
    with pytest.raises(BundleError) as e:
        open_tree(tree.root, tree.digest)
    assert e.value.rule == "tree-content" and e.value.path == pkg.name


def test_bytecode_cache_is_not_content(tmp_path: Path) -> None:
    """A rank that imported the package may leave __pycache__ behind (root ignores 0555); the
    next rank must still open the tree."""
    tree = make_tree(tmp_path / "t", [NORM])
    pkg = tree.root / tree.ops[0].package
    _writable(pkg)
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "kernel.cpython-311.pyc").write_bytes(b"\x00junk")
    assert open_tree(tree.root, tree.digest).ops == tree.ops


def test_wrong_expected_digest(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t", [NORM])
    other = make_tree(tmp_path / "u", [OTHER])
    for wrong in (other.digest, "0" * 64, tree.digest.upper(), ""):
        with pytest.raises(BundleError) as e:
            open_tree(tree.root, wrong)
        assert e.value.rule == "tree-digest" and e.value.path == TREE_FILE


def test_edited_tree_json_without_new_digest(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t", [NORM])
    _rewrite_tree_json(tree.root, lambda d: d["ops"].pop())
    with pytest.raises(BundleError) as e:
        open_tree(tree.root, tree.digest)
    assert e.value.rule == "tree-digest"


def test_package_name_must_match_digest(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t", [NORM, OTHER])
    other = next(o.package for o in tree.ops if o.slot in OTHER)

    def swap(doc: dict) -> None:  # a norm op keeps its own digest but names the other bundle's package
        op = next(o for o in doc["ops"] if o["slot"] in NORM)
        assert op["package"] != other
        op["package"] = other

    digest = _rewrite_tree_json(tree.root, swap)
    with pytest.raises(BundleError) as e:
        open_tree(tree.root, digest)
    assert e.value.rule == "tree-package" and e.value.path == TREE_FILE


def test_renamed_package_with_forged_digest(tmp_path: Path) -> None:
    """Consistent name and digest fields, but the files are not what that digest seals."""
    tree = make_tree(tmp_path / "t", [NORM])
    forged = hashlib.sha256(b"forged").hexdigest()
    _writable(tree.root)
    os.rename(tree.root / tree.ops[0].package, tree.root / package_for(forged))

    def forge(doc: dict) -> None:
        for o in doc["ops"]:
            o["package"], o["digest"] = package_for(forged), forged

    digest = _rewrite_tree_json(tree.root, forge)
    with pytest.raises(BundleError) as e:
        open_tree(tree.root, digest)
    assert e.value.rule == "tree-content" and e.value.path == package_for(forged)


def test_unknown_tree_version(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "t", [NORM])
    digest = _rewrite_tree_json(tree.root, lambda d: d.update(version=2))
    with pytest.raises(BundleError) as e:
        open_tree(tree.root, digest)
    assert e.value.rule == "tree-version"


def test_build_refuses_existing_root(tmp_path: Path) -> None:
    b = make_bundle(NORM)
    (tmp_path / "t").mkdir()
    with pytest.raises(FileExistsError):
        build_tree(tmp_path / "t", [(b, b.manifest.ops)], scan_policy=False)


# ---- the static policy on the one road into an engine -------------------------------------
_CHEAT = b"import os\n\ndef rmsnorm(x, weight, out, eps):\n    os.system('true')\n"


def _cheat_bundle():  # noqa: ANN202
    from cacheon_subnet.bundle import bundle_from_files

    manifest = (
        b'schema = "%s"\n[bundle]\nname = "cheat"\n[[ops]]\nslot = "norm.rmsnorm"\nentry = "kernel:rmsnorm"\n'
        % make_bundle(NORM).manifest.schema.encode()
    )
    return bundle_from_files({"manifest.toml": manifest, "kernel.py": _CHEAT}, source="<cheat>")


def test_policy_failing_bundle_is_never_sealed(tmp_path: Path) -> None:
    """`cacheon arena run --bundle` and scripts reach the engine through build_tree only."""
    b = _cheat_bundle()
    with pytest.raises(BundleError) as e:
        build_tree(tmp_path / "t", [(b, b.manifest.ops)])
    assert e.value.rule == "policy" and "kernel.py:" in e.value.detail
    assert not (tmp_path / "t" / package_for(b.digest)).exists()


def test_scheduler_refuses_unscanned_package(tmp_path: Path) -> None:
    """A tree written by hand (digests all consistent) still cannot carry policy-failing code."""
    from cacheon_subnet.bundle import load_bundle

    good = load_bundle(Path(__file__).resolve().parents[2] / "examples" / "norm.rmsnorm")
    tree = build_tree(tmp_path / "t", [(good, good.manifest.ops)])
    b = _cheat_bundle()
    _writable(tree.root)
    b.write_to(tree.root / package_for(b.digest), read_only=True)
    op = b.manifest.ops[0]
    digest = _rewrite_tree_json(
        tree.root,
        lambda d: d["ops"].append(
            {
                "package": package_for(b.digest),
                "digest": b.digest,
                "slot": op.slot,
                "variant": op.variant,
                "module": op.module,
                "attr": op.attr,
                "dtypes": list(op.dtypes),
                "constraints": {},
                "role": "challenger",
            }
        ),
    )
    with pytest.raises(BundleError) as e:
        open_tree(tree.root, digest)
    assert e.value.rule == "policy" and e.value.path == package_for(b.digest)


def test_a_module_shadowed_by_a_package_is_never_sealed(tmp_path: Path) -> None:
    """`rmsnorm.py` beside `rmsnorm/__init__.py`: the policy keyed both as module `rmsnorm` and scanned
    only the package, so a sibling with `import os` was sealed into the engine unscanned (CPython
    imports the package; the file was there all the same). Refused on both sides now."""
    from cacheon_subnet.bundle.archive import bundle_from_files

    ex = Path(__file__).resolve().parents[2] / "examples" / "norm.rmsnorm"
    evil = b'import os\nos.system("id")\n'
    b = bundle_from_files(
        {
            "manifest.toml": (ex / "manifest.toml").read_bytes(),
            "rmsnorm/__init__.py": (ex / "rmsnorm.py").read_bytes(),
            "rmsnorm.py": evil,
        }
    )
    with pytest.raises(BundleError) as e:
        build_tree(tmp_path / "t", [(b, b.manifest.ops)])
    assert e.value.rule == "policy" and "rmsnorm.py" in e.value.detail
    assert not (tmp_path / "t" / package_for(b.digest)).exists()
    tree = build_tree(tmp_path / "u", [(b, b.manifest.ops)], scan_policy=False)  # a hand-made tree ...
    digest = _rewrite_tree_json(tree.root, lambda d: d.update(policy_scanned=True))  # ... that says scanned
    with pytest.raises(BundleError) as e:
        open_tree(tree.root, digest)
    assert e.value.rule == "policy" and e.value.path == package_for(b.digest)
