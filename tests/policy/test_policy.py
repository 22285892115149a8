"""The static allowlist policy (v2): conforming kernel code passes, everything else is refused
with file, line and rule. The adversarial corpus is in tests/adversarial/test_static_policy.py."""

import pytest
from conftest import EXAMPLES

from cacheon_subnet.policy import allowlist
from cacheon_subnet.policy.scan import RULES, scan_files, scan_source

HEAD = "import torch\nimport triton\nimport triton.language as tl\n\n"


def rules(src: str) -> set[str]:
    return {f.rule for f in scan_source("k.py", src)}


def fn(body: str, args: str = "x, out") -> str:
    return HEAD + f"def f({args}):\n" + "".join(f"    {line}\n" for line in body.splitlines())


@pytest.mark.parametrize(
    "src,rule",
    [
        ("import subprocess", "P001"),
        ("import os", "P001"),
        ("from multiprocessing import Pool", "P001"),
        ("import socket", "P002"),
        ("import urllib.request", "P002"),
        ("import ctypes", "P003"),
        ("from torch.utils.cpp_extension import load_inline", "P003"),
        ("import time", "P004"),
        ("import importlib", "P005"),
        ("import gc", "P006"),
        ("import inspect", "P006"),
        ("import threading", "P008"),
        ("import numpy", "P009"),
        ("import helpers", "P009"),
        ("import torch as t", "P009"),
        ("import triton.language as language", "P009"),
        ("from torch import nn", "P009"),
        ("import functools", "P004"),
        ("import operator", "P005"),
        ("import contextlib", "P009"),
        ("import dataclasses", "P009"),
        ("def f(:\n", "P010"),
        (fn("torch.ops.load_library('x.so')"), "P003"),
        (fn("triton.runtime.driver"), "P003"),
        (fn("torch.cuda.Event(enable_timing=True)"), "P004"),
        (fn("torch.cuda.synchronize()"), "P007"),
        (fn("x.item()"), "P007"),
        (fn("x.tolist()"), "P007"),
        (fn("x.cpu()"), "P007"),
        (fn("x.numpy()"), "P007"),
        (fn("eval('1')"), "P005"),
        (fn("exec('x=1')"), "P005"),
        (fn("getattr(x, 'shape')"), "P005"),
        (fn("type(x)"), "P005"),
        (fn("setattr(x, 'a', 1)"), "P004"),
        (fn("globals()"), "P006"),
        (fn("open('/tmp/x', 'w')"), "P008"),
        (fn("print(x)"), "P008"),
        (fn("__import__('os')"), "P005"),
        (fn("x.__class__"), "P006"),
        (fn("f.__globals__"), "P006"),
        (fn("x._version"), "P013"),
        (fn("x.untyped_storage()"), "P012"),
        (fn("x.data_ptr()"), "P012"),
        (fn("'{0.x}'.format(x)"), "P012"),
        (fn("y = torch"), "P016"),
        (fn("out.copy_(torch)"), "P016"),
        (fn("return tl"), "P016"),
        (fn("torch.empty"), "P016"),
        (fn("torch.float32(1)"), "P016"),
        (fn("torch.sys.modules"), "P004"),
        (fn("torch.os.getenv('X')"), "P001"),
        (fn("torch.rsqrt = x"), "P004"),
        (fn("x.add_ = out"), "P004"),
        (fn("torch.sqrt_fn = 1"), "P004"),
        (fn("y = [torch]"), "P016"),
        (fn("(y := torch)"), "P016"),
        (fn("for torch.x in out:\n    pass"), "P004"),
        (fn("for x[0] in out:\n    pass"), "P017"),
        (fn("range = 3"), "P017"),
        (fn("tl = 3"), "P017"),
        (fn("d = {}\nd[torch] = 1"), "P016"),
        (fn("torch.nn.functional.silu.x = 1"), "P004"),
        (fn("f(**x)"), "P019"),
        (fn("try:\n    pass\nexcept Exception as e:\n    pass"), "P015"),
        (fn("with x:\n    pass"), "P015"),
        (fn("global y"), "P015"),
        (fn("del x"), "P015"),
        (fn("yield x"), "P015"),
        (fn("import os"), "P015"),
        (fn("(v for v in x).gi_frame"), "P006"),
        (fn("lambda: y"), "P011"),
        (fn("undefined_name(x)"), "P011"),
        (fn("out.set_(x, 0, (9,), (1,))"), "P012"),
        (fn("out.set_(x)"), "P012"),
        (HEAD + "class K:\n    pass\n", "P015"),
        (HEAD + "x = torch.empty(3)\n", "P014"),
        (HEAD + "x = [1]\n", "P014"),
        (HEAD + "if True:\n    pass\n", "P014"),
        (HEAD + "torch.rsqrt = None\n", "P004"),
        (HEAD + "def f(x, cache={}):\n    pass\n", "P014"),
        (HEAD + "def f(x: 'torch.Tensor'):\n    pass\n", "P015"),
        (HEAD + "def f(x: print(1)):\n    pass\n", "P015"),
        (HEAD + "@staticmethod\ndef f(x):\n    pass\n", "P018"),
        (HEAD + "@triton.jit(launch_metadata=print)\ndef k(x):\n    pass\n", "P018"),
        (
            HEAD + "@triton.autotune(configs=[triton.Config({}, pre_hook=print)], key=[])\n@triton.jit\ndef k(x):\n"
            "    pass\n",
            "P018",
        ),
        (HEAD + "@triton.jit\ndef k(x):\n    '''\n    def k(x):\n    '''\n    tl.store(x, 1)\n", "P018"),
        (
            HEAD + "@triton.jit\ndef k(x):\n    tl.inline_asm_elementwise('mov', '=r', [x], dtype=tl.int32, "
            "is_pure=True, pack=1)\n",
            "P012",
        ),
        (HEAD + "@triton.jit\ndef k(x):\n    tl.core.builtin\n", "P012"),
        (HEAD + "def f(x, k):\n    k[(1,)](x, extern_libs={'libdevice': '/tmp/x.bc'})\n", "P019"),
        ("from .missing import f\n", "P021"),
        ("from ... import f\n", "P021"),
        ("from .k import torch\nimport torch\n", "P021"),
        ("# -*- coding: utf-7 -*-\nx = 1\n", "P020"),
        (HEAD + "@triton.autotune(configs=[], key=['n\\n'])\n@triton.jit\ndef k(n):\n    pass\n", "P018"),  # name + newline
        (fn("x.to(tl.float32, _semantic=None)"), "P013"),
        (HEAD + "def h(x, _semantic=None):\n    pass\n", "P013"),
    ],
)
def test_rule_flagged(src, rule):
    found = scan_source("k.py", src)
    assert rule in {f.rule for f in found}, found


def test_conforming_kernel_code_passes():
    src = (
        '"""doc"""\nfrom __future__ import annotations\n\nimport math\nfrom typing import Optional\n'
        + HEAD
        + "from .util import helper, SCALE as _S\n\n_BLOCK = 2 ** 10\n_DTYPES = (torch.float32, torch.bfloat16)\n"
        "_C = math.sqrt(2.0) * _BLOCK\n\n\n"
        "@triton.heuristics({'EVEN': lambda args: args['n'] % args['BLOCK'] == 0})\n"
        "@triton.autotune(configs=[triton.Config({'BLOCK': 128}, num_warps=4)], key=['n'])\n"
        "@triton.jit\ndef _k(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    v = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)\n"
        "    for i in tl.static_range(2):\n        v = v * 2.0\n"
        "    tl.store(x_ptr + offs, v.to(x_ptr.dtype.element_ty), mask=offs < n)\n\n\n"
        "def run(x: torch.Tensor, out: torch.Tensor, eps: float = 1e-6, scale: Optional[float] = None) -> None:\n"
        "    T, H = x.shape\n    grid = lambda meta: (triton.cdiv(T * H, meta['BLOCK']),)\n"
        "    _k[grid](out, T * H)\n    tmp = torch.empty_like(out, dtype=torch.float32)\n"
        "    rows = [i * 2 for i in range(T) if i]\n    out[0, 0] = float(len(rows)) * _S\n"
        "    cfg = dict(a=1)\n    if (n := cfg.get('a')) and x.dtype in _DTYPES:\n        out.copy_(helper(x, n))\n"
        "    assert eps > 0, f'eps {eps} must be positive'\n    return None\n"
    )
    files = {"k.py": src.encode(), "util.py": b"SCALE = 0.5\n\n\ndef helper(x, n):\n    return x * n\n"}
    assert scan_files(files) == []


@pytest.mark.parametrize(
    "k,util,rule",
    [
        ("from .util import torch\n", "import torch\n", "P021"),  # a module object through a relative import
        ("from .util import f\n", "from .k import f\n", "P021"),  # a cycle defines nothing
        ("from . import util\n", "X = 1\n", "P021"),  # the module itself
        ("from .util import f\n", "from .other import g as f\n", "P021"),
        ("from .util import f\n", "def f(x):\n    return x\n", None),
    ],
)
def test_relative_imports_name_definitions_only(k, util, rule):
    found = {f.rule for f in scan_files({"k.py": k.encode(), "util.py": util.encode()})}
    assert (rule in found) if rule else not found, found


def test_submodule_names_are_not_definitions():
    files = {"pkg/__init__.py": b"align = 1\n", "pkg/align.py": b"X = 1\n", "k.py": b"from .pkg import align\n"}
    found = scan_files(files)
    assert {(f.path, f.rule) for f in found} >= {("pkg/__init__.py", "P017"), ("k.py", "P021")}, found


def test_findings_name_file_and_line():
    (f,) = scan_source("pkg/k.py", "x = 1\nimport socket\n")
    assert f.path == "pkg/k.py" and f.line == 2 and str(f).startswith("pkg/k.py:2: P002")


def test_every_example_demo_and_control_but_policy_violation_is_clean():
    seen = 0
    for manifest in sorted(EXAMPLES.rglob("manifest.toml")):
        files = {p.relative_to(manifest.parent).as_posix(): p.read_bytes() for p in manifest.parent.rglob("*.py")}
        from cacheon_subnet.bundle import load_bundle

        cuda = load_bundle(manifest.parent).manifest.cuda_modules(files)  # the only modules that may import native
        found = scan_files(files, cuda_modules=cuda)
        if manifest.parent.name == "policy_violation":
            assert {f.rule for f in found} >= {"P001", "P004"}, found
        elif manifest.parent.name == "output_aliasing":  # out.set_(tmp): refused statically since set_ left
            assert [(f.rule, f.line) for f in found] == [("P012", 27)], [str(f) for f in found]
        else:
            assert found == [], (manifest.parent.name, [str(f) for f in found])
        seen += 1
    assert seen >= 25


def test_tables_hold_no_private_or_escape_names():
    for name in allowlist.VALUE_ATTRS | allowlist.BUILTINS:
        assert name.isidentifier() and not name.startswith("_"), name
    for chain in allowlist.MODULE_ATTRS:
        assert all(p.isidentifier() and not p.startswith("_") for p in chain.split(".")), chain
    never = {
        "storage",
        "untyped_storage",
        "data_ptr",
        "numpy",
        "item",
        "tolist",
        "cpu",
        "format",
        "format_map",
        "fn",
        "src",
        "run",
        "cache",
        "handle",
        "grad_fn",
        "register_hook",
        "apply_",
        "f_back",
        "gi_frame",
        "modules",
        "sys",
        "os",
        "getattr",
        "setattr",
        "type",
        "object",
        "eval",
        "exec",
        "open",
        "print",
        "globals",
        "vars",
        "data",
        "as_strided",
    }
    assert not (never - {"type"}) & allowlist.VALUE_ATTRS  # .type is torch.device.type / Tensor.type(dtype)
    assert not never & allowlist.BUILTINS
    assert not any(c.split(".")[-1] in never for c in allowlist.MODULE_ATTRS)
    assert set(allowlist.ATTR_CODES.values()) | set(allowlist.NAME_CODES.values()) <= set(RULES)


def test_interpreter_globals_never_shadow_allowed_builtins():
    """TRITON_INTERPRET copies triton.runtime.interpreter's globals into a kernel module's
    globals; none may take the place of a builtin the scan lets a bundle name."""
    interpreter = pytest.importorskip("triton.runtime.interpreter")
    assert not set(vars(interpreter)) & allowlist.BUILTINS


def test_miner_init_scaffolds_conforming_schema_2_bundles(tmp_path):
    from cacheon_subnet.bundle import load_bundle
    from cacheon_subnet.miner.scaffold import scaffold

    slots = sorted({op.slot for p in EXAMPLES.glob("*/manifest.toml") for op in load_bundle(p.parent).manifest.ops})
    assert len(slots) >= 8  # a slot may have several examples (attention.decode, attention.decode-onepass)
    for slot in slots:
        b = load_bundle(scaffold(slot, tmp_path / slot.replace(".", "-")))
        assert b.manifest.schema == "cacheon.bundle/2" and scan_files(b.files) == [], slot


def test_no_metadata_mutator_is_allowed():
    """set_, resize_, as_strided_, t_, ... change an argument's storage or layout for every later
    user (an engine's weight): none is callable on a value, and `out=` on a torch call is refused."""
    assert not allowlist.METADATA_MUTATORS & allowlist.VALUE_ATTRS
    for name in allowlist.METADATA_MUTATORS - {"data", "grad"}:
        assert rules(fn(f"x.{name}(out)")) & {"P012"}, name
    assert "P019" in rules(fn("torch.empty(8, out=x)"))
    assert "P019" in rules(fn("torch.sum(x, dim=0, out=out)"))
    assert rules(fn("out.copy_(torch.abs(x))")) == set()


def test_every_allowed_in_place_method_keeps_the_tensor_it_changes():
    """Measured, not listed: each in-place method (trailing `_`) the allowlist keeps writes values
    only; storage, offset, shape and strides of its tensor stay what they were."""
    import torch

    checked = []
    for name in sorted(n for n in allowlist.VALUE_ATTRS if n.endswith("_") and hasattr(torch.Tensor, n)):
        t = torch.rand(4, 6).t()  # non-contiguous: a layout change would show in the strides
        before = (t.untyped_storage().data_ptr(), t.storage_offset(), t.shape, t.stride())
        arg = {"copy_": (torch.rand(6, 4),), "fill_": (0.5,), "zero_": (), "clamp_": (0.0, 1.0)}.get(name, (2.0,))
        if name in ("sqrt_", "rsqrt_", "square_", "exp_", "neg_", "abs_"):
            arg = ()
        getattr(t, name)(*arg)
        assert (t.untyped_storage().data_ptr(), t.storage_offset(), t.shape, t.stride()) == before, name
        checked.append(name)
    assert len(checked) >= 14, checked


def test_triton_option_names_cover_the_installed_backends():
    """Every launch keyword (and every triton.Config / heuristics key) reaches Triton's
    backend.parse_options; allowlist.TRITON_OPTIONS must name each option field so that no kernel
    parameter, key or launch keyword can smuggle one (static/triton_option_param_smuggle)."""
    import dataclasses

    nvidia = pytest.importorskip("triton.backends.nvidia.compiler")
    fields = {f.name for f in dataclasses.fields(nvidia.CUDAOptions)}
    try:
        from triton.backends.amd.compiler import HIPOptions

        fields |= {f.name for f in dataclasses.fields(HIPOptions)}
    except ImportError:
        pass
    assert fields <= allowlist.TRITON_OPTIONS, sorted(fields - allowlist.TRITON_OPTIONS)
    assert allowlist.LAUNCH_OPTIONS <= allowlist.TRITON_OPTIONS
    from cacheon_subnet.bundle.identity.rules import TRITON_RESERVED

    assert TRITON_RESERVED <= allowlist.TRITON_RESERVED_PARAMS, sorted(TRITON_RESERVED - allowlist.TRITON_RESERVED_PARAMS)
    decoy = (
        "import triton\n\n@triton.jit\ndef k(x, extern_libs):\n    pass\n\n"
        "def f(x):\n    k[(1,)](x, 0)\n    k[(1,)](x, extern_libs={}, num_warps=4)\n"
    )
    assert [(f.line, f.rule) for f in scan_source("k.py", decoy)] == [(4, "P018"), (9, "P019")]


def test_a_module_with_two_sources_is_refused():
    """`x.py` beside `x/__init__.py`: both key as module x and only one was scanned, so an
    `import os` file passed verify beside a clean package (red team 2026-12-04; the sealed tree
    refuses the same bundle, so verify must too)."""
    files = {
        "rmsnorm/__init__.py": b"import torch\n\n\ndef f(x, out):\n    out.copy_(x)\n",
        "rmsnorm.py": b"import os\nos.system('id')\n",
    }
    found = scan_files(files)
    assert any(f.rule == "P021" and "two sources" in f.message for f in found), found
    assert scan_files({"rmsnorm/__init__.py": files["rmsnorm/__init__.py"]}) == []
