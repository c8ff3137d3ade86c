// Fixed twin of race.cu: the same exchange through shared memory, with a barrier after the writes
// and another before the next tile overwrites the slots.
// Op scale (out = input * factor), fp32 / bf16 / fp16; launcher scale_race_fixed(out, input, factor).
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;  // the block size; one shared slot per thread
constexpr int64_t kMaxBlocks = 4096;

#if RL_DEVICE
template <typename T>
__global__ void scale_race_fixed_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {
  __shared__ float tile[kThreads];
  const int t = threadIdx.x;
  const int partner = t ^ 1;
  // base is the same for every thread of the block, so each barrier is reached by all of them.
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads; base < n;
       base += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t i = base + t;
    tile[t] = i < n ? static_cast<float>(in[i]) : 0.0f;
    __syncthreads();  // every slot written before any is read
    const int64_t j = base + partner;
    if (j < n) out[j] = static_cast<T>(tile[partner] * factor);
    __syncthreads();  // every slot read before the next tile writes it
  }
}
#endif

#if RL_HOST
#include <algorithm>

template <typename T>
__global__ void scale_race_fixed_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);

void scale_race_fixed(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_race_fixed", {out, input});
  rl::check_contiguous("scale_race_fixed", {out, input});
  rl::check_same("scale_race_fixed", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(rl::cdiv(n, kThreads), kMaxBlocks);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_race_fixed", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_race_fixed_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, out.data<T>(),
               input.data<T>(), static_cast<float>(factor), n);
  });
}
RL_EXPORT(scale_race_fixed, "out = input * factor through shared memory, with barriers")
#endif
