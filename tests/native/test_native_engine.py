"""A CUDA op through the engine seam on CPU (issue 32 part 3): the host's artifact sealed in the
engine tree (its digest in tree.json, so the tree digest binds the cubin), re-digested when a
scheduler rank opens it, and the op's custom-op body running each call in the launcher's scope
(a recorder stands in for the driver). A CUDA op without its artifact never enters a tree."""

from __future__ import annotations

import os
import sys
import uuid

import pytest
import torch
from conftest import EXAMPLES
from native_bundles import fake_artifact

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.bundle.engine_tree import NATIVE_DIR, build_tree, open_tree
from cacheon_subnet.errors import BundleError
from cacheon_subnet.records import codec
from native import launcher
from native.artifact import DESCRIPTOR, Cache
from seams.activate import register_candidates
from seams.dispatch import Registry

DECL = {f"rmsnorm_{s}": ["ptr", "ptr", "ptr", "i32", "i64", "i64", "f32"] for s in ("bf16", "f16", "f32")}


class Recorder:
    def __init__(self) -> None:
        self.calls: list = []

    def launch(self, art, entry, checked) -> None:
        scope = launcher._SCOPE.get()
        self.calls.append((art.digest, checked, scope.tensors if scope else None))


def _sealed(tmp_path):
    """A sealed artifact of the example's declaration (no cubin: the recorder never loads one)."""
    desc = fake_artifact(DECL).descriptor
    return Cache(tmp_path / "cache").put("k" * 64, {DESCRIPTOR: codec.dumps(desc).encode()})


@pytest.fixture
def example(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    bundle = load_bundle(EXAMPLES / "cuda" / "norm.rmsnorm")
    art = _sealed(tmp_path)
    yield bundle, art
    for name in [m for m in sys.modules if m.startswith("cacheon_c_")]:
        del sys.modules[name]


def test_the_tree_seals_the_artifact_and_binds_its_digest(tmp_path, example):
    bundle, art = example
    [op] = bundle.manifest.ops
    tree = build_tree(tmp_path / "tree", [(bundle, [op])], artifacts={(bundle.digest, op.key): art.path})
    assert tree.ops[0].native == art.digest
    sealed = tree.root / NATIVE_DIR / art.digest
    assert sorted(os.listdir(sealed)) == [DESCRIPTOR]
    assert oct(os.stat(sealed / DESCRIPTOR).st_mode & 0o777) == "0o444"
    assert open_tree(tree.root, tree.digest).ops[0].native == art.digest


def test_a_cuda_op_without_its_artifact_never_enters_a_tree(tmp_path, example):
    bundle, _ = example
    with pytest.raises(BundleError, match="only with the artifact the host compiled"):
        build_tree(tmp_path / "tree", [(bundle, bundle.manifest.ops)])


def test_an_altered_artifact_in_the_tree_is_refused_at_open(tmp_path, example):
    bundle, art = example
    [op] = bundle.manifest.ops
    tree = build_tree(tmp_path / "tree", [(bundle, [op])], artifacts={(bundle.digest, op.key): art.path})
    d = tree.root / NATIVE_DIR / art.digest
    os.chmod(d, 0o755)
    os.chmod(d / DESCRIPTOR, 0o644)
    (d / DESCRIPTOR).write_bytes((d / DESCRIPTOR).read_bytes().replace(b"rmsnorm_f32", b"rmsnorm_f33"))
    with pytest.raises(BundleError, match="tree-native|digests to"):
        open_tree(tree.root, tree.digest)


def test_the_scheduler_ranks_body_launches_inside_each_calls_scope(tmp_path, example):
    bundle, art = example
    [op] = bundle.manifest.ops
    tree = build_tree(tmp_path / "tree", [(bundle, [op])], artifacts={(bundle.digest, op.key): art.path})
    env = {"CACHEON_ENGINE_TREE": str(tree.root), "CACHEON_ENGINE_TREE_DIGEST": tree.digest}
    reg, rec = Registry(), Recorder()
    register_candidates(env, ["norm.rmsnorm"], reg, suffix=f"_n{uuid.uuid4().hex[:8]}", native_driver=rec)
    [cand] = reg.candidates["norm.rmsnorm"]
    x, w, out = torch.randn(5, 32), torch.randn(32), torch.empty(5, 32)
    cand.call(x=x, weight=w, out=out, eps=1e-6)  # through torch's dispatcher, as SGLang calls it
    [(digest, c, tensors)] = rec.calls
    assert digest == art.digest and c.kernel == "rmsnorm_f32" and c.grid == (5, 1, 1)
    assert c.values == (out.data_ptr(), x.data_ptr(), w.data_ptr(), 32, 32, 32, 1e-6)
    assert {t.data_ptr() for t in tensors} == {x.data_ptr(), w.data_ptr(), out.data_ptr()}
    assert launcher._SCOPE.get() is None
