// DEFECT flush_to_zero: the product is taken with mul.ftz.f32, as a kernel built with --use_fast_math does,
// so a subnormal fp32 (or bf16) input is read as 0 and its product, a normal number, comes back 0. verify
// names it "flush_to_zero". Op scale (out = input * factor), fp32 / bf16 / fp16; launcher
// scale_flush_to_zero(out, input, factor). Fixed twin: fixed.cu.
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

#if RL_DEVICE
__device__ __forceinline__ float mul_ftz(float a, float b) {
  float r;
  asm("mul.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));  // DEFECT: flushes subnormal operands to 0
  return r;
}

template <typename T>
__global__ void scale_flush_to_zero_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<T>(mul_ftz(static_cast<float>(in[i]), factor));
  }
}
#endif

#if RL_HOST
#include <algorithm>

template <typename T>
__global__ void scale_flush_to_zero_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);

void scale_flush_to_zero(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_flush_to_zero", {out, input});
  rl::check_contiguous("scale_flush_to_zero", {out, input});
  rl::check_same("scale_flush_to_zero", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(rl::cdiv(n, kThreads), kMaxBlocks);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_flush_to_zero", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_flush_to_zero_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, out.data<T>(),
               input.data<T>(), static_cast<float>(factor), n);
  });
}
RL_EXPORT(scale_flush_to_zero, "out = input * factor with subnormal inputs flushed to 0 (a defect kernel)")
#endif
