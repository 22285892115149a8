// RMSNorm for slot norm.rmsnorm@1: out = x / sqrt(mean(x^2) + eps) * weight, fp32 math.
// Launch: one block per row (grid = T), a multiple of 32 threads up to 1024 (block = 256 is a good start).
// Only device code is used: the validator compiles this file to a cubin for its GPU (sm_90a on
// the H200) and launches the extern "C" kernels declared in manifest.toml.
#include "kernels/convert.cuh"

template <typename T>
__device__ __forceinline__ void rmsnorm_row(T* out, const T* x, const T* w, int H, long long x_stride,
                                            long long out_stride, float eps) {
  const T* xr = x + blockIdx.x * x_stride;
  T* orow = out + blockIdx.x * out_stride;
  float ss = 0.f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    const float v = to_f32(xr[i]);
    ss += v * v;
  }
  __shared__ float warp_sums[32];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < (blockDim.x + 31) / 32 ? warp_sums[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) warp_sums[0] = v;
  }
  __syncthreads();
  const float rstd = 1.0f / sqrtf(warp_sums[0] / H + eps);  // IEEE sqrt and division, as the reference
  for (int i = threadIdx.x; i < H; i += blockDim.x) orow[i] = from_f32<T>(to_f32(xr[i]) * rstd * to_f32(w[i]));
}

extern "C" __global__ void rmsnorm_bf16(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* w, int H,
                                        long long x_stride, long long out_stride, float eps) {
  rmsnorm_row(out, x, w, H, x_stride, out_stride, eps);
}

extern "C" __global__ void rmsnorm_f16(__half* out, const __half* x, const __half* w, int H, long long x_stride,
                                       long long out_stride, float eps) {
  rmsnorm_row(out, x, w, H, x_stride, out_stride, eps);
}

extern "C" __global__ void rmsnorm_f32(float* out, const float* x, const float* w, int H, long long x_stride,
                                       long long out_stride, float eps) {
  rmsnorm_row(out, x, w, H, x_stride, out_stride, eps);
}
