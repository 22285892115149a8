"""Red team (session 16): the CUDA launcher and its policy, attacked as a miner would.

Held attacks pin what refuses them; the fixed ones say so (each went red without its fix):
a tensor subclass whose data_ptr is an int that compares inside every span (argcheck._span takes
plain ints), verify's `--device cuda` scope that refused every honest launch (runtime.resolved),
scratch shapes torch cannot unpack and unbounded scratch counts (launcher.scratch)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "native"))
from native_bundles import SCALE, fake_artifact, manifest  # noqa: E402

import native  # noqa: E402
from cacheon_subnet.bundle import bundle_from_files  # noqa: E402
from cacheon_subnet.policy.scan import scan_files  # noqa: E402
from native import launcher, runtime  # noqa: E402
from native.argcheck import LaunchRefused, _pointer  # noqa: E402
from native.launcher import MAX_LAUNCHES, op_call  # noqa: E402

CPU = torch.device("cpu")
ART = fake_artifact({"scale": ["ptr", "ptr", "i32", "f32"]})


class Recorder:
    def __init__(self) -> None:
        self.calls: list = []

    def launch(self, art, entry, checked) -> None:
        self.calls.append(checked)


class Inside(int):
    """An int that says it is inside every span (what a Python tensor subclass could return)."""

    def __le__(self, other: object) -> bool:
        return True

    def __ge__(self, other: object) -> bool:
        return True

    def __add__(self, other: object) -> Inside:
        return Inside(int(self) + int(other))  # type: ignore[call-overload]

    __radd__ = __add__


class Liar(torch.Tensor):
    def data_ptr(self) -> int:  # type: ignore[override]
        return Inside(0xDEAD_BEEF_000)


def test_a_tensor_subclass_with_a_lying_data_ptr_never_reaches_the_driver():
    """Wall 1 refuses class definitions; this is the launcher's own line behind it. Before the fix
    the wild address 0xdeadbeef000 reached the driver as a checked pointer."""
    o, rec = torch.empty(4), Recorder()
    with op_call(ART, CPU, (o,), rec), pytest.raises(LaunchRefused, match="parameter 1: the tensor is not one of"):
        native.launch("scale", 1, 1, (o, torch.empty(4).as_subclass(Liar), 1, 1.0))
    assert rec.calls == []


def test_an_honest_parameter_subclass_still_launches():
    """The control: SGLang's weights are nn.Parameter subclasses; they pass by their real address."""
    w, rec = torch.nn.Parameter(torch.empty(8), requires_grad=False), Recorder()
    with op_call(ART, CPU, (w,), rec):
        native.launch("scale", 1, 1, (w, w[4:], 1, 1.0))
    assert rec.calls[0].values[:2] == (w.data_ptr(), w.data_ptr() + 16)


def test_verify_workers_bare_cuda_device_is_the_current_cuda_device(monkeypatch):
    """`cacheon verify --device cuda` made the worker's scope device torch.device("cuda"), which
    never equals the cuda:0 its tensors report: every honest launch was refused "the tensor is on
    cuda:0, the call runs on cuda". The wrap now resolves it to the current device."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        t = torch.empty(4, device="cuda")
    with pytest.raises(LaunchRefused, match="the tensor is on cuda:0, the call runs on cuda$"):
        _pointer("scale", 0, t, torch.device("cuda"), [])  # why the bare device cannot be the scope's
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    seen: list[torch.device] = []

    def entry() -> None:
        scope = launcher._SCOPE.get()
        assert scope is not None
        seen.append(scope.device)

    runtime.wrap(entry, ART, Recorder(), torch.device("cuda"))()
    assert seen == [torch.device("cuda", 0)]
    assert runtime.resolved(torch.device("cuda:1")) == torch.device("cuda:1") and runtime.resolved(CPU) == CPU


@pytest.mark.parametrize("shape", [(0, 2**70), (2**64, 0), (0, 2**63)])
def test_scratch_dims_torch_cannot_take_are_refused_by_name(shape):
    with op_call(ART, CPU, (), None), pytest.raises(LaunchRefused, match="must be non-negative"):
        native.scratch(shape, torch.float32)


def test_scratch_tensors_per_call_are_bounded():
    """Each launch checks its pointers against every scratch tensor of the call: 10^6 empty
    scratch tensors made each of 4096 launches a linear scan (minutes of host time in one call)."""
    with op_call(ART, CPU, (), None) as s:
        for _ in range(MAX_LAUNCHES):
            native.scratch(0, torch.float32)
        with pytest.raises(LaunchRefused, match=f"more than {MAX_LAUNCHES} scratch tensors"):
            native.scratch(0, torch.float32)
    assert len(s.scratch) == MAX_LAUNCHES


def test_a_pointer_bounds_its_start_not_the_kernels_reach():
    """What the launcher can promise (docs/security.md, "The launcher"): the tensor handed over lies
    inside the call's memory. A view of the last element plus an int the kernel adds to it is
    accepted: the kernel's own reach is the GPU corpus's to catch (native_gpu/), not a launch check.
    An empty view is a null pointer (torch reports data_ptr 0), accepted only beside an empty call
    tensor, never an address past a buffer."""
    o, i, rec = torch.empty(64), torch.empty(64), Recorder()
    with op_call(ART, CPU, (o, i), rec):
        native.launch("scale", 1, 1, (o[63:], i, 2**31 - 1, 1.0))
    assert rec.calls[0].values[:3] == (o.data_ptr() + 63 * 4, i.data_ptr(), 2**31 - 1)
    with op_call(ART, CPU, (o, i), rec), pytest.raises(LaunchRefused, match="parameter 1: the tensor is not one of"):
        native.launch("scale", 1, 1, (o, i[64:], 1, 1.0))
    with op_call(ART, CPU, (o, torch.empty(0)), rec):
        native.launch("scale", 1, 1, (o, i[64:], 1, 1.0))
    assert rec.calls[-1].values[1] == 0


GOOD = b"import native\n\ndef rmsnorm(x, weight, out, eps):\n    native.launch('scale', 1, 32, (out, x, 1, eps))\n"


def _findings(files: dict[str, bytes], extra_ops: str = "") -> list[str]:
    files = {"manifest.toml": manifest() + extra_ops.encode(), "k.cu": SCALE.encode(), **files}
    b = bundle_from_files(files)
    return [str(f) for f in scan_files(dict(b.files), cuda_modules=b.manifest.cuda_modules(b.files))]


@pytest.mark.parametrize(
    "tail",
    [
        b"from native import launch\n",
        b"from native.launcher import op_call\n",
        b"import native.launcher\n",
        b"def g(a):\n    return getattr(native, 'launch')(a)\n",
        b"def g(f=native.launch):\n    return f\n",
        b"def g():\n    m = native\n    return m\n",
        b"def g(a):\n    return [native][0].launch(a)\n",
        b"def g():\n    return native.launch.__wrapped__\n",
        b"def g():\n    return native.scratch.__globals__\n",
        b"def g():\n    return native.__dict__\n",
        b"def g():\n    return type(native)\n",
        b"native.launch('scale', 1, 1, ())\n",  # at import time (outside any call scope)
    ],
)
def test_every_other_route_to_the_launcher_is_a_policy_finding(tail):
    found = _findings({"w.py": GOOD + tail})
    assert found, tail


def test_a_triton_op_entered_in_the_cuda_ops_own_module_is_refused():
    triton_op = '[[ops]]\nslot = "activation.silu_and_mul"\nentry = "w:silu_and_mul"\n'
    src = GOOD + b"def silu_and_mul(x, out):\n    native.launch('scale', 1, 1, (out, x, 1, 1.0))\n"
    assert any("w.py" in f and "P003" in f for f in _findings({"w.py": src}, triton_op))
    assert _findings({"w.py": GOOD}) == []  # the control
