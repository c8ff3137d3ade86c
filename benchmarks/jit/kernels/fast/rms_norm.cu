// Frozen input of the build benchmark (benchmarks/jit/bench_build.py): keep unchanged (README.md here).
// rms_norm: out = x / sqrt(mean(x^2) + eps) * weight, rows of [tokens, hidden]; fp32 accumulation,
// the weight multiplied in fp32 and rounded once. One block per row.
#include "common/rapid_llm.cuh"

#if RL_DEVICE
template <typename T, int kThreads>
__global__ void rms_norm_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ w,
                                float eps, int64_t hidden) {
  const T* row = x + blockIdx.x * hidden;
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    const float v = static_cast<float>(row[i]);
    sum += v * v;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __shared__ float partial[kThreads / 32];
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    sum = threadIdx.x < kThreads / 32 ? partial[threadIdx.x] : 0.f;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x == 0) partial[0] = rsqrtf(sum / static_cast<float>(hidden) + eps);
  }
  __syncthreads();
  const float inv = partial[0];
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    out[blockIdx.x * hidden + i] = static_cast<T>(static_cast<float>(row[i]) * inv * static_cast<float>(w[i]));
  }
}
#endif

#if RL_HOST
template <typename T, int kThreads>
__global__ void rms_norm_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ w,
                                float eps, int64_t hidden);

void rms_norm(rl::Tensor out, rl::Tensor x, rl::Tensor weight, double eps) {
  rl::check_cuda("rms_norm", {out, x, weight});
  rl::check_contiguous("rms_norm", {out, x, weight});
  rl::check_same("rms_norm", out, x);
  RL_CHECK(x.dim() == 2, "rms_norm: x must be [tokens, hidden], got ", x.describe());
  RL_CHECK(weight.dim() == 1 && weight.size(0) == x.size(1) && weight.dtype() == x.dtype(),
           "rms_norm: weight must be [hidden] of x's dtype, got ", weight.describe());
  const int64_t tokens = x.size(0), hidden = x.size(1);
  if (tokens == 0 || hidden == 0) return;
  constexpr int kThreads = 256;
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(x, "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(rms_norm_kernel<T, kThreads>, static_cast<unsigned>(tokens), kThreads, 0, out.data<T>(),
               x.data<T>(), weight.data<T>(), static_cast<float>(eps), hidden);
  });
}
RL_EXPORT(rms_norm, "out = x * rsqrt(mean(x^2) + eps) * weight (out-first launcher)")
#endif
