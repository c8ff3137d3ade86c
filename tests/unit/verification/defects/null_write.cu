// DEFECT null_write (a crash): the launcher hands the kernel a null output pointer, so every thread
// writes through nullptr: an illegal address error that poisons the CUDA context of the process (every
// later CUDA call fails). Only a child process can run it and survive: for crash isolation, not verify.
// Fixed twin: fixed.cu.
// Op scale (out = input * factor), fp32 / bf16 / fp16; launcher scale_null_write(out, input, factor).
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

#if RL_DEVICE
template <typename T>
__global__ void scale_null_write_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<T>(static_cast<float>(in[i]) * factor);
  }
}
#endif

#if RL_HOST
#include <algorithm>

template <typename T>
__global__ void scale_null_write_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);

void scale_null_write(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_null_write", {out, input});
  rl::check_contiguous("scale_null_write", {out, input});
  rl::check_same("scale_null_write", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(rl::cdiv(n, kThreads), kMaxBlocks);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_null_write", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out_p = nullptr;  // DEFECT: meant out.data<T>()
    rl::launch(scale_null_write_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, out_p, input.data<T>(),
               static_cast<float>(factor), n);
  });
}
RL_EXPORT(scale_null_write, "DEFECT (crash): writes through a null pointer")
#endif
