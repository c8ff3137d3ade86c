// Fixed twin of mutates_input, writes_nothing, other_stream, constant_output, out_of_bounds,
// uninit_global_read, null_write, device_assert, endless_loop and flush_to_zero: the plain correct kernel.
// Op scale (out = input * factor), fp32 / bf16 / fp16; launcher scale_fixed(out, input, factor).
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // a grid-stride loop covers any size beyond

#if RL_DEVICE
template <typename T>
__global__ void scale_fixed_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<T>(static_cast<float>(in[i]) * factor);
  }
}
#endif

#if RL_HOST
#include <algorithm>

template <typename T>
__global__ void scale_fixed_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);

void scale_fixed(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_fixed", {out, input});
  rl::check_contiguous("scale_fixed", {out, input});
  rl::check_same("scale_fixed", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(rl::cdiv(n, kThreads), kMaxBlocks);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_fixed", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_fixed_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, out.data<T>(), input.data<T>(),
               static_cast<float>(factor), n);
  });
}
RL_EXPORT(scale_fixed, "out = input * factor (the correct twin of the defect kernels)")
#endif
