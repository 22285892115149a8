"""Read-only inputs are compared bit for bit (verify's `input_mutated`, the CPU arena's check):
value equality has -0.0 == 0.0, the channel a policy-clean kernel kept a call counter in inside an
engine cache's exact zeros (red team 2026-12-04)."""

import torch

from cacheon_subnet.slots import get_slot
from cacheon_subnet.tensor_views import same_bits
from cacheon_subnet.verify.judge import check_inputs_untouched


def test_a_sign_of_zero_or_nan_payload_write_into_an_input_is_input_mutated():
    spec = get_slot("norm.rmsnorm")
    x, w = torch.zeros(2, 4), torch.ones(4)
    sent = {"x": x, "weight": w, "out": torch.empty(2, 4)}
    assert check_inputs_untouched(spec, sent, {**sent, "x": x.clone()}) is None
    signed = x.clone()
    signed[0, 0] = -0.0
    f = check_inputs_untouched(spec, sent, {**sent, "x": signed})
    assert f is not None and f.reason == "input_mutated", f
    nan = torch.full((4,), float("nan"))
    other_nan = nan.view(torch.int32).clone()
    other_nan[1] ^= 1
    assert same_bits(nan, nan.clone()) and not same_bits(nan, other_nan.view(torch.float32))
    assert same_bits(torch.tensor([1, 2]), torch.tensor([1, 2])) and not same_bits(
        torch.tensor([1.0]), torch.tensor([1.0, 2.0])
    )
