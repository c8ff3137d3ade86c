// Fixed twin of uninit_read.cu: every shared slot is written (0 past the end of the input), so the
// tail term reads a value that exists, and the term is left out when its weight is 0 (0 * an inf
// input would be NaN: with w = 0 this is exactly scale).
// Op scale (out = input * factor), fp32 / bf16 / fp16; launcher scale_uninit_read_fixed(out, input, factor).
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;  // the block size; one shared slot per thread
constexpr int64_t kMaxBlocks = 4096;

#if RL_DEVICE
template <typename T>
__global__ void scale_uninit_read_fixed_kernel(T* __restrict__ out, const T* __restrict__ in, float factor,
                                               float tail_weight, int64_t n) {
  __shared__ float tile[kThreads];
  const int t = threadIdx.x;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads; base < n;
       base += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t i = base + t;
    tile[t] = i < n ? static_cast<float>(in[i]) : 0.0f;  // every slot, the tail tile's too
    __syncthreads();
    const float x = tail_weight != 0.0f ? tile[t] + tail_weight * tile[kThreads - 1] : tile[t];
    if (i < n) out[i] = static_cast<T>(x * factor);
    __syncthreads();
  }
}
#endif

#if RL_HOST
#include <algorithm>

template <typename T>
__global__ void scale_uninit_read_fixed_kernel(T* __restrict__ out, const T* __restrict__ in, float factor,
                                               float tail_weight, int64_t n);

void scale_uninit_read_fixed(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_uninit_read_fixed", {out, input});
  rl::check_contiguous("scale_uninit_read_fixed", {out, input});
  rl::check_same("scale_uninit_read_fixed", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(rl::cdiv(n, kThreads), kMaxBlocks);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_uninit_read_fixed", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_uninit_read_fixed_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, out.data<T>(),
               input.data<T>(), static_cast<float>(factor), 0.0f, n);
  });
}
RL_EXPORT(scale_uninit_read_fixed, "out = input * factor through shared memory, every slot written")
#endif
