"""Compile options smuggled past the launch rule under a decoy kernel's parameter names.

The launch rule let a keyword through when it named a parameter of ANY kernel of the bundle;
Triton 3.6 hands every launch keyword to backend.parse_options, so `_decoy(ir_override,
extern_libs, ...)` made `_k[g](..., extern_libs=..., ptx_options=..., debug=...)` policy-clean
(it PASSed CPU verify, where the interpreter drops unknown keywords; on a GPU they link a
bitcode / LLVM IR file, add ptxas flags, load IR from a file: a %globaltimer clock). A parameter
spelled like a name of Triton's exec'd binder is as bad: with `specialize_impl` the binder
calls the argument (a bundle function) with Triton's backend object for every parameter."""

import torch
import triton
import triton.language as tl


@triton.jit
def _decoy(ir_override, extern_libs, ptx_options, debug):  # expect: P018
    pass


@triton.jit
def _binder(x_ptr, specialize_impl):  # expect: P018
    pass


def _spec(backend, arg, is_const, specialize, align):
    return ("i32", None)


@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


def _launch(x):
    _k[(1,)](x, BLOCK=16,
             extern_libs={"libdevice": "/tmp/evil.ll"},  # expect: P019
             ir_override="/tmp/evil.ptx")  # expect: P019


def rmsnorm(x, weight, out, eps):
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
