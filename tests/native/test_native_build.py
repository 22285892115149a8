"""The compile lane end to end: nvcc + ptxas behind the wall, an artifact per op, errors as file:line."""

from __future__ import annotations

import pytest
from native_bundles import SCALE, SCALE_DECL, cuda_bundle, needs_nvcc

from cacheon_subnet.bundle import load_bundle
from native import BuildOptions, CompileRefused, Stage, build_op

pytestmark = needs_nvcc


def _build(bundle, tmp_path, **kw):
    return build_op(bundle, bundle.manifest.ops[0], BuildOptions(cache_dir=tmp_path / "cache", **kw))


def test_the_cuda_example_builds_into_an_artifact_with_its_kernels_and_identity(tmp_path):
    from conftest import EXAMPLES

    b = load_bundle(EXAMPLES / "cuda" / "norm.rmsnorm")
    art = _build(b, tmp_path)
    d = art.descriptor
    assert not art.cached and art.path.name == art.digest and d.arch == "sm_90a"
    k = d.kernels[0]
    assert (k.symbol, [p.value for p in k.params], k.ptx_params) == (
        "rmsnorm_bf16",
        ["ptr", "ptr", "ptr", "i32", "i64", "i64", "f32"],
        ("b64", "b64", "b64", "b32", "b64", "b64", "f32"),
    )
    assert d.toolchain.nvcc == "13.0.88" and d.toolchain.host_cxx.startswith("g++")
    assert "nvidia-cuda-nvcc==13.0.88" in d.toolchain.packages
    unit = d.units[0]
    assert unit.reads == ("kernels/rmsnorm.cu", "kernels/convert.cuh")
    nvcc, ptxas = unit.commands
    assert nvcc[0] == "$CUDA/bin/nvcc" and "-arch=sm_90a" in nvcc and nvcc[-1] == "kernels/rmsnorm.cu"
    assert ptxas[0] == "$CUDA/bin/ptxas" and not any(str(tmp_path) in a or "/tmp/" in a for a in nvcc + ptxas)
    assert art.cubin("rmsnorm_f32")[:4] == b"\x7fELF"
    again = _build(b, tmp_path)
    assert again.cached and again.digest == art.digest


def test_a_compile_error_reaches_the_miner_as_bundle_file_and_line(tmp_path):
    src = SCALE + '\n#include "kernels/h.cuh"\n'
    extra = {"kernels/h.cuh": b"#pragma once\n\n__device__ int f() { return undefined_name; }\n"}
    b = cuda_bundle(src, extra=extra, sources='["k.cu", "kernels/h.cuh"]')
    with pytest.raises(CompileRefused) as e:
        _build(b, tmp_path)
    assert e.value.stage is Stage.COMPILE and e.value.rule == "native-compile"
    text = e.value.text()
    assert 'kernels/h.cuh:3: error: identifier "undefined_name" is undefined' in text, text
    assert "/tmp" not in text and "cacheon-native" not in text and str(tmp_path) not in text


def test_a_ptxas_error_names_the_ptx_of_its_unit(tmp_path):
    src = 'extern "C" __global__ void scale(float* o, const float* i, int n, float a) { asm volatile("bogus.op.u32 %0;" :: "r"(n)); }\n'
    with pytest.raises(CompileRefused) as e:
        _build(cuda_bundle(src), tmp_path)
    assert e.value.stage is Stage.ASSEMBLE and "<ptx of k.cu>:" in e.value.text(), e.value.text()


@pytest.mark.slow
def test_two_translation_units_and_a_kernel_defined_twice(tmp_path):
    other = 'extern "C" __global__ void other(int* p) { p[0] = 1; }\n'
    b = cuda_bundle(SCALE, f'{SCALE_DECL}, other = ["ptr"]', {"b.cu": other.encode()}, '["k.cu", "b.cu"]')
    art = _build(b, tmp_path)
    assert {k.symbol: (k.unit, k.cubin) for k in art.descriptor.kernels} == {
        "other": ("b.cu", "unit1.cubin"),
        "scale": ("k.cu", "unit0.cubin"),
    }
    twice = cuda_bundle(SCALE, SCALE_DECL, {"b.cu": SCALE.encode()}, '["k.cu", "b.cu"]')
    with pytest.raises(CompileRefused, match="kernel scale is also defined in b.cu"):
        _build(twice, tmp_path)


def test_a_bad_arch_is_a_usage_error(tmp_path):
    from cacheon_subnet.errors import UsageError

    with pytest.raises(UsageError, match="--arch"):
        _build(cuda_bundle(), tmp_path, arch="sm_90a -G")


def test_the_hosts_compiler_environment_never_reaches_nvcc(tmp_path, monkeypatch):
    """NVCC_PREPEND_FLAGS / NVCC_APPEND_FLAGS (read by nvcc) and CPATH (read by g++) in the
    validator's environment: the flags stay the lane's own."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "cuda_bf16.h").write_text("#error a host include dir reached the compile\n")
    for var in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS"):
        monkeypatch.setenv(var, "-DFROM_HOST=1")
    monkeypatch.setenv("CPATH", str(inc))
    src = "#include <cuda_bf16.h>\n#ifdef FROM_HOST\n#error a host flag reached nvcc\n#endif\n" + SCALE
    assert _build(cuda_bundle(src), tmp_path).descriptor.kernels[0].symbol == "scale"
