"""Copy identity of CUDA sources: a .cu file copied with its own identifiers renamed, its comments
and layout rewritten, or its literals respelled is the same normalized identity; a change of
behaviour (another intrinsic, another constant, another operator) is not."""

from __future__ import annotations

import pytest
from native_bundles import cuda_bundle

from cacheon_subnet.bundle.identity.cuda_form import normal_form
from cacheon_subnet.bundle.identity.normalize import normalized_identity

SRC = """// scale a vector
#define BLK 256
extern "C" __global__ void scale(float* out, const float* in, int n, float a) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;  /* one element a thread */
  if (idx < n) out[idx] = sqrtf(in[idx]) * a + 0x10;
}
"""
COPY = """#define BLK 256
extern "C" __global__ void scale(float *dst,const float *src,int count,float alpha){
    const int   k=blockIdx.x*blockDim.x+threadIdx.x;
    if(k<count) dst[k]=sqrtf(src[k])*alpha+16;   // renamed, reflowed
}
"""


def ident(src: str) -> str | None:
    return normalized_identity(cuda_bundle(src))


def test_a_renamed_reformatted_copy_has_the_same_identity():
    assert normal_form(SRC.encode()) == normal_form(COPY.encode())
    assert ident(SRC) == ident(COPY) is not None


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("sqrtf", "expf"),  # another intrinsic: not a declared name, kept verbatim
        ("0x10", "0x11"),  # another constant
        ("* a", "/ a"),  # another operator
        ("threadIdx.x", "threadIdx.y"),  # a built-in variable and its member
        ("idx < n", "idx <= n"),
    ],
)
def test_a_change_of_behaviour_is_never_merged(old, new):
    assert old in SRC
    assert ident(SRC) != ident(SRC.replace(old, new, 1))
