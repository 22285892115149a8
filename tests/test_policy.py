"""The static policy scan flags each forbidden pattern with file, line and rule."""

from pathlib import Path

import pytest

from cacheon_subnet.verify.policy import scan_files, scan_source

from conftest import EXAMPLES


def rules(src: str) -> set[str]:
    return {f.rule for f in scan_source("k.py", src)}


@pytest.mark.parametrize("src,rule", [
    ("import subprocess", "P001"), ("import os", "P001"), ("from multiprocessing import Pool", "P001"),
    ("import socket", "P002"), ("import urllib.request", "P002"), ("import asyncio", "P002"),
    ("import ctypes", "P003"), ("from torch.utils.cpp_extension import load_inline", "P003"),
    ("import torch\ntorch.ops.load_library('x.so')", "P003"), ("import triton\ntriton.runtime.build", "P003"),
    ("import time", "P004"), ("import torch\ntorch.cuda.Event.elapsed_time = lambda *a: 0.0", "P004"),
    ("import torch\ntorch.matmul = None", "P004"), ("setattr(object, 'x', 1)", "P004"),
    ("import triton.language as tl\ntl.sum = None", "P004"),
    ("eval('1')", "P005"), ("exec('x=1')", "P005"), ("__import__('os')", "P005"), ("import importlib", "P005"),
    ("getattr(x, name)", "P005"),
    ("import gc", "P006"), ("import inspect", "P006"), ("f.__globals__", "P006"),
    ("x.item()", "P007"), ("x.tolist()", "P007"), ("x.cpu()", "P007"), ("import torch\ntorch.cuda.synchronize()", "P007"),
    ("import threading", "P008"), ("open('/tmp/x', 'w')", "P008"),
    ("import numpy", "P009"), ("import helpers", "P009"),
    ("def f(:\n", "P010"),
])
def test_rule_flagged(src, rule):
    assert rule in rules(src), scan_source("k.py", src)


def test_clean_kernel_code_passes():
    src = ("import math\nimport torch\nimport triton\nimport triton.language as tl\nfrom . import util\n"
           "from .util import helper\n\n@triton.jit\ndef k(x):\n    pass\n\n"
           "def run(x, out):\n    out[:] = x\n    y = getattr(x, 'shape')\n    return None\n")
    assert scan_source("k.py", src) == []


def test_findings_name_file_and_line():
    (f,) = scan_source("pkg/k.py", "x = 1\nimport socket\n")
    assert f.path == "pkg/k.py" and f.line == 2 and "P002" in str(f)


def test_faithful_examples_are_clean():
    for manifest in sorted(EXAMPLES.glob("*/manifest.toml")):
        files = {p.relative_to(manifest.parent).as_posix(): p.read_bytes() for p in manifest.parent.rglob("*.py")}
        assert scan_files(files) == [], manifest.parent.name
