"""The `group` argument across the custom-op boundary, and the static policy for collectives."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from cacheon_subnet.policy.scan import scan_source
from cacheon_subnet.slots import get_slot
from cacheon_subnet.slots.custom_op import op_schema, register_slot_op
from cacheon_subnet.slots.groups import group_name, register_resolver, resolve_group

_tags = itertools.count()
FAKE = SimpleNamespace(group_name="fake-pg")  # stands in for a ProcessGroup (has .group_name)


def test_schema_carries_the_group_as_a_string() -> None:
    assert op_schema(get_slot("collective.all_reduce")) == "(Tensor x, Tensor(a!) out, str group) -> ()"
    assert op_schema(get_slot("collective.ar_residual_rmsnorm")).endswith("float eps, str group) -> ()")
    assert "group" not in op_schema(get_slot("norm.rmsnorm"))


def test_group_names_and_resolvers() -> None:
    register_resolver("cacheontest/", lambda name: FAKE if name == "tp:0" else None)
    assert group_name(FAKE) == "fake-pg" and group_name("sglang/tp:0") == "sglang/tp:0"
    assert resolve_group("cacheontest/tp:0") is FAKE
    with pytest.raises(LookupError, match="not known"):
        resolve_group("cacheontest/tp:9")
    with pytest.raises(TypeError, match="ProcessGroup"):
        group_name(object())
    with pytest.raises(ValueError):
        register_resolver("nosep", lambda name: None)


def test_custom_op_hands_the_kernel_the_resolved_group() -> None:
    register_resolver("cacheontest/", lambda name: FAKE if name == "tp:0" else None)
    spec = get_slot("collective.all_reduce")
    seen: list[Any] = []

    def kernel(x: torch.Tensor, out: torch.Tensor, group: Any) -> None:
        seen.append(group)
        out.copy_(x * 2)

    call = register_slot_op(spec, kernel, "cacheon_collective_test", f"t{next(_tags)}")
    x, out = torch.ones(2, 4), torch.empty(2, 4)
    call(x=x, out=out, group="cacheontest/tp:0")
    assert seen == [FAKE] and torch.equal(out, x * 2)
    compiled = torch.compile(lambda **kw: call(**kw), fullgraph=True, backend="aot_eager", dynamic=False)
    compiled(x=x, out=out, group="cacheontest/tp:0")  # a str crosses Dynamo as a constant
    assert seen == [FAKE, FAKE]


@pytest.mark.parametrize(
    "src, rule",
    [
        ("import torch.distributed as dist\n", None),
        ("import torch\ndef f(x, out, group):\n    torch.distributed.all_reduce(out, group=group)\n", None),
        ("import torch.distributed as dist\ng = dist.new_group([0, 1])\n", "P002"),
        ("import torch\ntorch.distributed.init_process_group('gloo')\n", "P002"),
        ("import torch.distributed as dist\ns = dist.TCPStore('1.2.3.4', 1)\n", "P002"),
        ("import torch.distributed.rpc\n", "P002"),
        ("from torch.distributed import elastic\n", "P001"),
    ],
)
def test_policy_allows_collectives_not_group_creation(src: str, rule: str | None) -> None:
    rules = {f.rule for f in scan_source("k.py", src)}
    assert (not rules) if rule is None else rule in rules, rules  # module-level calls are also P014 (policy v2)
