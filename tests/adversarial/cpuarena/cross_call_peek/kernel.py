"""ATTACK: cross-call fusion. If all K calls of a batch lived in one storage, call 1 could read
calls 2..K through x.untyped_storage() and compute them all at once. It looks past the end of
its own input; each call is its own mapping, so there is nothing there and the peek fails."""

import torch


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    st = x.untyped_storage()
    nbytes = x.numel() * x.element_size()
    if st.nbytes() < 3 * nbytes:
        raise RuntimeError(f"storage holds {st.nbytes()} bytes: no neighbouring call to fuse with")
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(dim=-1, keepdim=True)
    out.copy_(x32 * torch.rsqrt(var + eps) * weight.to(torch.float32))
