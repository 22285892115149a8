"""Exact runtime pins. The pin is part of evaluation identity, not a loose minimum."""

SGLANG_PIN = "0.5.13.post1"
SGLANG_KERNEL_PIN = "0.4.3"
TORCH_PIN = "2.11.0"  # what SGLang 0.5.13.post1 requires on the GPU box
TRITON_PIN = "3.6.0"  # what torch 2.11.0 brings on the H200 box (docs/benchmarks.md); a release binds it
BITTENSOR_PIN = "11.3.0"

# The CUDA compile lane (native/): nvcc and what it needs, from PyPI (`pip install -e '.[native]'`),
# 13.0 as on the H200 box (nvcc 13.0.88) and torch 2.11.0+cu130. The lane refuses to compile with
# any other version (native/toolchain.py): the toolchain is part of every artifact's identity.
CUDA_NVCC_PIN = "13.0.88"
NATIVE_PINS = {
    "nvidia-cuda-nvcc": CUDA_NVCC_PIN,  # nvcc, ptxas
    "nvidia-nvvm": "13.0.88",  # cicc: the device front end
    "nvidia-cuda-crt": "13.0.88",  # crt/ headers nvcc force-includes
    "nvidia-cuda-runtime": "13.0.96",  # cuda_runtime.h, cuda_fp16.h, cuda_bf16.h ...
    "nvidia-cuda-cccl": "13.0.85",  # cuda/std, cub, thrust headers (nvcc's -isystem include/cccl)
}
# Validator-owned headers beside the bundle's own: CUTLASS / CuTe (its wheel's C++ include tree).
# Optional: installed with --no-deps (its Python side pulls scipy, cuda-python ...; the lane reads
# headers only), and a compile without it simply has no cutlass/ or cute/ include dir.
CUTLASS_PIN = "4.2.0.0"
# The launcher's driver side (native/driver.py): NVIDIA's cuda-python bindings, 13.0 as the
# toolchain. In the `gpu` extra only (a 12 MB wheel that needs the GPU driver's libcuda): a CPU box
# compiles and checks CUDA bundles without it, only a launch imports it.
CUDA_BINDINGS_PIN = "13.0.3"
