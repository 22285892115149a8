// Faithful eagerly; while captured into a CUDA graph it launches a kernel that writes nothing.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
__device__ __forceinline__ float f32(float v) { return v; }
__device__ __forceinline__ float f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T to(float v);
template <> __device__ __forceinline__ float to<float>(float v) { return v; }
template <> __device__ __forceinline__ __half to<__half>(float v) { return __float2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 to<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// A faithful row (one block per row), shared by every attack below.
template <typename T>
__device__ void row(T* out, const T* x, const T* w, int H, long long sx, long long so, float eps) {
  const T* xr = x + blockIdx.x * sx;
  T* orow = out + blockIdx.x * so;
  __shared__ float part[1024];
  float ss = 0.f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) { float v = f32(xr[i]); ss += v * v; }
  part[threadIdx.x] = ss;
  __syncthreads();
  if (threadIdx.x == 0) { float t = 0.f; for (int i = 0; i < blockDim.x; ++i) t += part[i]; part[0] = t; }
  __syncthreads();
  const float r = 1.0f / sqrtf(part[0] / H + eps);
  for (int i = threadIdx.x; i < H; i += blockDim.x) orow[i] = to<T>(f32(xr[i]) * r * f32(w[i]));
}
extern "C" __global__ void rms_bf16(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* w, int H, long long sx,
                                       long long so, float eps) {
  row(out, x, w, H, sx, so, eps);
}
extern "C" __global__ void rms_f16(__half* out, const __half* x, const __half* w, int H, long long sx,
                                       long long so, float eps) {
  row(out, x, w, H, sx, so, eps);
}
extern "C" __global__ void rms_f32(float* out, const float* x, const float* w, int H, long long sx,
                                       long long so, float eps) {
  row(out, x, w, H, sx, so, eps);
}
extern "C" __global__ void noop_bf16(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* w, int H, long long sx,
                                       long long so, float eps) {
  (void)out; (void)x; (void)w;
}
extern "C" __global__ void noop_f16(__half* out, const __half* x, const __half* w, int H, long long sx,
                                       long long so, float eps) {
  (void)out; (void)x; (void)w;
}
extern "C" __global__ void noop_f32(float* out, const float* x, const float* w, int H, long long sx,
                                       long long so, float eps) {
  (void)out; (void)x; (void)w;
}
