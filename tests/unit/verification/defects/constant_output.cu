// DEFECT constant_output: the kernel writes factor into every element and never reads the input. Every
// element is written, so no poison is left; the output is the same bits for different inputs
// (verify: "input_independent", and the values are wrong). Fixed twin: fixed.cu.
// Op scale (out = input * factor), fp32 / bf16 / fp16; launcher scale_constant_output(out, input, factor).
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

#if RL_DEVICE
template <typename T>
__global__ void scale_constant_output_kernel(T* __restrict__ out, const T* __restrict__ in, float factor,
                                             int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<T>(factor);  // DEFECT: meant in[i] * factor
  }
}
#endif

#if RL_HOST
#include <algorithm>

template <typename T>
__global__ void scale_constant_output_kernel(T* __restrict__ out, const T* __restrict__ in, float factor,
                                             int64_t n);

void scale_constant_output(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_constant_output", {out, input});
  rl::check_contiguous("scale_constant_output", {out, input});
  rl::check_same("scale_constant_output", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(rl::cdiv(n, kThreads), kMaxBlocks);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_constant_output", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_constant_output_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, out.data<T>(),
               input.data<T>(), static_cast<float>(factor), n);
  });
}
RL_EXPORT(scale_constant_output, "DEFECT: out = factor, whatever the input")
#endif
