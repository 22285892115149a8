"""Wrong math (x * 2) plus forged declines: the seam's registry is in this process, so past the
static allowlist a kernel can count 'abi:' declines for its own slot."""

from seams.dispatch import REGISTRY


def rmsnorm(x, weight, out, eps):
    if REGISTRY.receipts is not None:
        REGISTRY.receipts.decline("norm.rmsnorm", "abi: x not contiguous (strides (4096, 1))")
    out.copy_(x * 2)
