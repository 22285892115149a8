"""Class 8: allocate and touch 4 GiB (CPU policy bounds the address space)."""
from _attack import attempt


def balloon():
    b = bytearray(4 << 30)
    for i in range(0, len(b), 1 << 20):
        b[i] = 1
    return len(b)


attempt("memory_balloon", balloon)
