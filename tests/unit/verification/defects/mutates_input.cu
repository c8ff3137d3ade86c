// DEFECT mutates_input: the kernel also writes its result back into the input, so the output is right
// and a reference computed after the call agrees with it; only comparing the input before and after
// the call shows it (verify: "mutated_input"). Fixed twin: fixed.cu.
// Op scale (out = input * factor), fp32 / bf16 / fp16; launcher scale_mutates_input(out, input, factor).
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

#if RL_DEVICE
template <typename T>
__global__ void scale_mutates_input_kernel(T* __restrict__ out, T* __restrict__ in, float factor, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const T y = static_cast<T>(static_cast<float>(in[i]) * factor);
    out[i] = y;
    in[i] = y;  // DEFECT: a scratch write into the caller's input
  }
}
#endif

#if RL_HOST
#include <algorithm>

template <typename T>
__global__ void scale_mutates_input_kernel(T* __restrict__ out, T* __restrict__ in, float factor, int64_t n);

void scale_mutates_input(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_mutates_input", {out, input});
  rl::check_contiguous("scale_mutates_input", {out, input});
  rl::check_same("scale_mutates_input", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(rl::cdiv(n, kThreads), kMaxBlocks);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_mutates_input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_mutates_input_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, out.data<T>(),
               input.data<T>(), static_cast<float>(factor), n);
  });
}
RL_EXPORT(scale_mutates_input, "DEFECT: out = input * factor, and input = out too")
#endif
