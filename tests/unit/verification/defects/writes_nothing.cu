// DEFECT writes_nothing: the launcher's early return for an empty input tests `n >= 0`, so every
// call returns before launching and out keeps whatever it held: the poison pattern verify
// fills it with, or the uninitialised memory the row allocated itself (verify: "unwritten").
// Fixed twin: fixed.cu.
// Op scale (out = input * factor), fp32 / bf16 / fp16; launcher scale_writes_nothing(out, input, factor).
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

#if RL_DEVICE
template <typename T>
__global__ void scale_writes_nothing_kernel(T* __restrict__ out, const T* __restrict__ in, float factor,
                                            int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<T>(static_cast<float>(in[i]) * factor);
  }
}
#endif

#if RL_HOST
#include <algorithm>

template <typename T>
__global__ void scale_writes_nothing_kernel(T* __restrict__ out, const T* __restrict__ in, float factor,
                                            int64_t n);

void scale_writes_nothing(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_writes_nothing", {out, input});
  rl::check_contiguous("scale_writes_nothing", {out, input});
  rl::check_same("scale_writes_nothing", out, input);
  const int64_t n = input.numel();
  if (n >= 0) return;  // DEFECT: meant `n == 0` (an empty input launches nothing)
  const int64_t blocks = std::min<int64_t>(rl::cdiv(n, kThreads), kMaxBlocks);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_writes_nothing", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_writes_nothing_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, out.data<T>(),
               input.data<T>(), static_cast<float>(factor), n);
  });
}
RL_EXPORT(scale_writes_nothing, "DEFECT: returns before launching; out is never written")
#endif
