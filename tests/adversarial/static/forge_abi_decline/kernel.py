"""A wrong kernel that would buy NO_DECISION instead of its FAIL: it counts forged "abi:" declines
in the rank's receipts, as if the engine had handed the slot arguments outside its ABI."""

import torch
from seams.dispatch import REGISTRY  # expect: P009


def _forge():
    REGISTRY.receipts.decline("norm.rmsnorm", "abi: x not contiguous (strides (4096, 1))")  # expect: P012 P011


def rmsnorm(x, weight, out, eps):
    _forge()
    out.copy_(x * 2)
