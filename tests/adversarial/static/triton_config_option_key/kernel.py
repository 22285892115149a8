"""Compile options as triton.Config / triton.heuristics keys (identifier strings and literals).

Config.all_kwargs() and Heuristics.run() hand every key to the launch as a keyword, and Triton
3.6 passes launch keywords to backend.parse_options: `{"debug": True}`,
`{"sanitize_overflow": False}`, `{"default_dot_input_precision": "ieee"}` or a heuristic
`"launch_pdl"` changed codegen past the CONFIG_OPTIONS rule (PASSed CPU verify unchanged); a
module constant as the key (`DBG = "debug"`) hid the name from a literal check."""

import torch
import triton
import triton.language as tl

DBG = "debug"


@triton.autotune(configs=[triton.Config({"BLOCK": 16,
                                         "debug": True,  # expect: P018
                                         "sanitize_overflow": False,  # expect: P018
                                         DBG: True})], key=[])  # expect: P018
@triton.heuristics({"SPARE": lambda args: 1,
                    "launch_pdl": lambda args: True})  # expect: P018
@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr, SPARE: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
