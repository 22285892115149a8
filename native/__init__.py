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

import importlib
from typing import Any

from native.launcher import launch, scratch

# The compile lane (build, lane: the sandbox wall) loads only when asked for: bundle code and a
# release's serving runtime import this package for the launcher alone, and must not pull in the
# sandbox (tests/release/test_release_runtime.py blocks it).
_LAZY = {
    "Artifact": "native.artifact",
    "Descriptor": "native.artifact",
    "KernelEntry": "native.artifact",
    "BuildOptions": "native.build",
    "build_op": "native.build",
    "default_cache": "native.build",
    "CompileRefused": "native.diag",
    "Diagnostic": "native.diag",
    "NativeError": "native.diag",
    "Stage": "native.diag",
    "DEFAULT_ARCH": "native.lane",
    "CompileBudget": "native.lane",
    "ToolchainMissing": "native.toolchain",
    "locate": "native.toolchain",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'native' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


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
