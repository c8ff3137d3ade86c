// DEFECT uninit_global_read: the kernel is an accumulating form, out = beta * out + input * factor,
// called with beta = 0, so it reads every element of out before writing it. Where out is fresh memory
// that read is uninitialised, and 0 * (whatever it holds) is 0 unless the bits are inf or NaN. verify
// poisons out with NaN bits, so 0 * NaN = NaN shows as a wrong value; compute-sanitizer --tool initcheck
// reports it when the row allocates out itself (global memory, unlike uninit_read.cu's shared memory).
// Fixed twin: fixed.cu.
// Op scale (out = input * factor), fp32 / bf16 / fp16; launcher scale_uninit_global_read(out, input, factor).
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

#if RL_DEVICE
template <typename T>
__global__ void scale_uninit_global_read_kernel(T* __restrict__ out, const T* __restrict__ in, float factor,
                                                float beta, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    // DEFECT: out[i] is read before it is written (beta = 0 does not make the read go away)
    out[i] = static_cast<T>(beta * static_cast<float>(out[i]) + static_cast<float>(in[i]) * factor);
  }
}
#endif

#if RL_HOST
#include <algorithm>

template <typename T>
__global__ void scale_uninit_global_read_kernel(T* __restrict__ out, const T* __restrict__ in, float factor,
                                                float beta, int64_t n);

void scale_uninit_global_read(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_uninit_global_read", {out, input});
  rl::check_contiguous("scale_uninit_global_read", {out, input});
  rl::check_same("scale_uninit_global_read", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(rl::cdiv(n, kThreads), kMaxBlocks);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_uninit_global_read", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_uninit_global_read_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, out.data<T>(),
               input.data<T>(), static_cast<float>(factor), 0.0f, n);  // beta = 0: plain scale
  });
}
RL_EXPORT(scale_uninit_global_read, "DEFECT: out = 0 * out + input * factor, reading out before writing it")
#endif
