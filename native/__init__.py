"""Reviewed native builds: CUDA C++ kernels from miners, compiled in a sandboxed lane into sealed,
content-addressed artifacts (issue 32).

An op may carry CUDA sources (`[ops.cuda]`, cacheon_subnet/bundle/cuda.py). This package turns
them into an artifact: a lexical pre-scan of every directive (scan.py), nvcc and ptxas behind the
OS wall with the validator's flags and limits (lane.py), each kernel's parameters read from the
PTX and checked against the manifest (ptx.py), sealed and cached by what it was built from
(artifact.py). Only device code is used: no host code of a bundle is ever compiled into anything
that runs. The pinned toolchain: toolchain.py. The launcher (launcher.py: argcheck.py's checks,
driver.py's cuda-python calls) runs an artifact's kernels; bundle code reaches `native.launch`
and `native.scratch` and nothing else of this package (the policy scan holds that).
"""

from native.artifact import Artifact, Descriptor, KernelEntry
from native.build import BuildOptions, build_op, default_cache
from native.diag import CompileRefused, Diagnostic, NativeError, Stage
from native.lane import DEFAULT_ARCH, CompileBudget
from native.launcher import launch, scratch
from native.toolchain import ToolchainMissing, locate

__all__ = [
    "DEFAULT_ARCH",
    "Artifact",
    "BuildOptions",
    "CompileBudget",
    "CompileRefused",
    "Descriptor",
    "Diagnostic",
    "KernelEntry",
    "NativeError",
    "Stage",
    "ToolchainMissing",
    "build_op",
    "default_cache",
    "launch",
    "locate",
    "scratch",
]
