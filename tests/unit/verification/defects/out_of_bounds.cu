// DEFECT out_of_bounds: the loop bound is `i <= n`, so every element is computed right and one more,
// out[n] = in[n] * factor, is written past the end of out (and in[n] read past the end of the input).
// The result compares equal; the bytes after out change (verify: "guard_band"; compute-sanitizer
// memcheck when the next byte is not allocated). Fixed twin: fixed.cu.
// Op scale (out = input * factor), fp32 / bf16 / fp16; launcher scale_out_of_bounds(out, input, factor).
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

#if RL_DEVICE
template <typename T>
__global__ void scale_out_of_bounds_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i <= n; i += stride) {  // DEFECT
    out[i] = static_cast<T>(static_cast<float>(in[i]) * factor);
  }
}
#endif

#if RL_HOST
#include <algorithm>

template <typename T>
__global__ void scale_out_of_bounds_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);

void scale_out_of_bounds(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_out_of_bounds", {out, input});
  rl::check_contiguous("scale_out_of_bounds", {out, input});
  rl::check_same("scale_out_of_bounds", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(rl::cdiv(n, kThreads), kMaxBlocks);  // the grid-stride loop reaches n
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_out_of_bounds", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_out_of_bounds_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, out.data<T>(),
               input.data<T>(), static_cast<float>(factor), n);
  });
}
RL_EXPORT(scale_out_of_bounds, "DEFECT: out = input * factor, and one element written past the end of out")
#endif
