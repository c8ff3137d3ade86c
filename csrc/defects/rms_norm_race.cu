// rms_norm_race: out = x / sqrt(mean(x^2) + eps) * weight, one block of 256 threads per row.
// The block reduction ends the old way: the last 64 partials are summed by one warp
// through volatile shared memory with no barrier between steps. Before Volta a warp ran
// in lockstep and this was safe; with independent thread scheduling it is a race: right
// on almost every run, and compute-sanitizer's racecheck reports it.
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;

#if RL_DEVICE
template <typename T>
__global__ void rms_norm_race_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight,
                                     int hidden, float eps) {
  __shared__ float partial[kThreads];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * hidden;
  const int tid = threadIdx.x;
  float sum_sq = 0.0f;
  for (int i = tid; i < hidden; i += kThreads) {
    const float v = static_cast<float>(x[base + i]);
    sum_sq += v * v;
  }
  partial[tid] = sum_sq;
  __syncthreads();
  for (int s = kThreads / 2; s > 32; s >>= 1) {
    if (tid < s) partial[tid] += partial[tid + s];
    __syncthreads();
  }
  if (tid < 32) {  // one warp adds the last 64 partials in registers: shuffles synchronise it
    float v = partial[tid] + partial[tid + 32];
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (tid == 0) partial[0] = v;
  }
  __syncthreads();
  const float scale = rsqrtf(partial[0] / static_cast<float>(hidden) + eps);
  for (int i = tid; i < hidden; i += kThreads) {
    out[base + i] = static_cast<T>(static_cast<float>(x[base + i]) * scale * static_cast<float>(weight[i]));
  }
}
#endif

#if RL_HOST
template <typename T>
__global__ void rms_norm_race_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight,
                                     int hidden, float eps);

void rms_norm_race(rl::Tensor out, rl::Tensor x, rl::Tensor weight, double eps) {
  rl::check_cuda("rms_norm_race", {out, x, weight});
  rl::check_same("rms_norm_race", out, x);
  const int64_t hidden = x.dim() ? x.size(-1) : 0;
  RL_CHECK(weight.dim() == 1 && weight.size(0) == hidden, "rms_norm_race: weight must be [", hidden, "], got ",
           weight.describe());
  const int64_t n = x.numel();
  if (n == 0) return;
  rl::check_contiguous("rms_norm_race", {out, x, weight});
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(x, "rms_norm_race", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(rms_norm_race_kernel<T>, static_cast<unsigned>(n / hidden), kThreads, 0, out.data<T>(),
               x.data<T>(), weight.data<T>(), static_cast<int>(hidden), static_cast<float>(eps));
  });
}
RL_EXPORT(rms_norm_race, "rms_norm with a warp-synchronous reduction: a race")
#endif
