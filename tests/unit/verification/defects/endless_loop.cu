// DEFECT endless_loop (a hang): the grid-stride loop steps by threadIdx.x instead of blockDim.x, so
// thread 0 of every block never advances and spins forever (the store is volatile, so the compiler
// keeps the loop). The launch returns at once; the next synchronisation never does. Only a child
// process with a time limit can run it: for hang isolation, not verify. Fixed twin: fixed.cu.
// Op scale (out = input * factor), fp32 / bf16 / fp16; launcher scale_endless_loop(out, input, factor).
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

#if RL_DEVICE
template <typename T>
__global__ void scale_endless_loop_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {
  volatile T* dst = out;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = start; i < n; i += threadIdx.x) {  // DEFECT: meant gridDim.x * blockDim.x
    dst[i] = static_cast<T>(static_cast<float>(in[i]) * factor);
  }
}
#endif

#if RL_HOST
#include <algorithm>

template <typename T>
__global__ void scale_endless_loop_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);

void scale_endless_loop(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_endless_loop", {out, input});
  rl::check_contiguous("scale_endless_loop", {out, input});
  rl::check_same("scale_endless_loop", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(rl::cdiv(n, kThreads), kMaxBlocks);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_endless_loop", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_endless_loop_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, out.data<T>(),
               input.data<T>(), static_cast<float>(factor), n);
  });
}
RL_EXPORT(scale_endless_loop, "DEFECT (hang): thread 0 of every block loops forever")
#endif
