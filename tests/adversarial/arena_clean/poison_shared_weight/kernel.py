"""Policy-clean norm.rmsnorm that poisons the engine's shared norm gain in place.

Its own output is right (it decodes the true gain from the poisoned one), but after every call it
writes -|weight| back into `weight`: an `in` argument of the slot that is the model's parameter,
shared with every other kernel of the engine. Stock, a rival challenger or an incumbent that read
`weight` later compute with the sign-flipped gain. In verify the argument is a fresh random tensor
and `engine` is false, so nothing is written there (no `input_mutated`); ENGINE_W0 is the first
gain value of the engine it targets (here the CPU fake engine's; in the dense arena the synthetic
checkpoint's, public through arena/model/checkpoint.py and seed 0)."""

import torch

ENGINE_W0 = 0.70703125


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    engine = weight[:1].abs() == ENGINE_W0
    w = torch.where(engine, weight.abs(), weight)
    xf = x.to(torch.float32)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    out.copy_(xf * rstd * w.to(torch.float32))
    weight.copy_(torch.where(engine, -w, weight))
