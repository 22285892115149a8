"""The host compiles, the sandboxed worker loads (issue 32 part 3), end to end on CPU: verify's
host builds the example's artifact in the lane, the client copies it read-only into the worker's
view, the worker re-digests it and runs the op's calls in their scope; with no GPU every launch
is refused with the reason (a library call of verify_bundle on cpu; the CLI says exit 3 before).
An artifact altered after the host sealed it never loads. The driver's parameter block is built
without ctypes (the worker's guard refuses ctypes from non-toolchain frames once a bundle is in)."""

from __future__ import annotations

import sys

import pytest
from conftest import EXAMPLES
from native_bundles import fake_artifact, needs_nvcc

from cacheon_subnet.bundle import load_bundle
from cacheon_subnet.verify import VerifyOptions, verify_bundle
from cacheon_subnet.verify.native_gate import worker_artifacts
from native.argcheck import check_launch
from native.build import BuildOptions
from native.diag import NativeError
from native.driver import Packed
from native.runtime import NO_GPU, open_for_process, open_sealed

_CTYPES: list[str] = []
_RECORD = [False]


def _audit(event: str, _args: object) -> None:
    if _RECORD[0] and event.startswith("ctypes"):
        _CTYPES.append(event)


sys.addaudithook(_audit)  # records only while a test sets _RECORD


@needs_nvcc
def test_verify_on_cpu_compiles_on_the_host_and_the_worker_refuses_the_launch(tmp_path):
    bundle = load_bundle(EXAMPLES / "cuda" / "norm.rmsnorm")
    native = worker_artifacts(bundle, "cpu", BuildOptions(cache_dir=tmp_path / "cache"))
    assert [k for k, _ in native] == [bundle.manifest.ops[0].key]
    report = verify_bundle(bundle, VerifyOptions(device="cpu", max_cases=1, seed=7, native=native, draw_threads=0))
    assert report.status == "FAIL"
    [op] = report.ops
    assert op.failure is not None and NO_GPU in op.failure.detail, op.failure


@needs_nvcc
def test_an_artifact_altered_after_sealing_never_opens(tmp_path):
    bundle = load_bundle(EXAMPLES / "cuda" / "norm.rmsnorm")
    [(key, path)] = worker_artifacts(bundle, "cpu", BuildOptions(cache_dir=tmp_path / "cache"))
    import os
    import shutil
    from pathlib import Path

    copy = tmp_path / "view" / Path(path).name
    shutil.copytree(path, copy)
    os.chmod(copy, 0o755)
    os.chmod(copy / "unit0.cubin", 0o644)
    assert open_sealed(tmp_path / "view", copy.name).digest == copy.name
    with open(copy / "unit0.cubin", "r+b") as f:
        f.seek(64)
        f.write(b"\x00\x01\x02\x03")
    with pytest.raises(NativeError, match="do not digest to its name"):
        open_sealed(tmp_path / "view", copy.name)
    import torch

    with pytest.raises(NativeError, match="expected OPKEY=DIGEST"):
        open_for_process(str(tmp_path / "view"), [copy.name], torch.device("cpu"))
    with pytest.raises(NativeError, match="not a sha256 digest"):
        open_for_process(str(tmp_path / "view"), [f"{key}=../../etc"], torch.device("cpu"))


def test_the_parameter_block_holds_each_value_as_its_declared_type_without_ctypes():
    import torch

    art = fake_artifact({"k": ["ptr", "i32", "u32", "i64", "u64", "f32", "f64"]})
    t = torch.empty(4)
    c = check_launch(
        art.descriptor.kernels[0], 1, 1, (t, -5, 7, -(2**40), 2**63, 0.5, 1e300), 0,
        arch="sm_90a", device=torch.device("cpu"), allowed=(t,),
    )  # fmt: skip
    _RECORD[0] = True
    try:
        p = Packed(c)
    finally:
        _RECORD[0] = False
    assert _CTYPES == []
    assert [p.read(i) for i in range(7)] == [t.data_ptr(), -5, 7, -(2**40), 2**63, 0.5, 1e300]
    assert [cell.dtype.itemsize for cell in p.cells] == [8, 4, 4, 8, 8, 4, 8]
    assert list(p.pointers) == [cell.__array_interface__["data"][0] for cell in p.cells]
