// Frozen input of the build benchmark (benchmarks/jit/bench_build.py): keep unchanged (README.md here).
// scale: out = input * factor, fp16 / bf16 / fp32 (a fast-path source: no torch headers).
// The tutorial's kernel: one element per thread. Simple and correct, and far
// below the copy roofline (see notebooks/01_add_jit_kernel.ipynb for the
// vectorized version).
#include "common/rapid_llm.cuh"

#if RL_DEVICE
template <typename T>
__global__ void scale_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx < n) {
    out[idx] = static_cast<T>(static_cast<float>(in[idx]) * factor);
  }
}
#endif

#if RL_HOST
template <typename T>
__global__ void scale_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);

void scale(rl::Tensor out, rl::Tensor input, double factor) {
  // Step 1: validate. Tensor invariants live here, not in the Python wrapper.
  rl::check_cuda("scale", {out, input});
  rl::check_contiguous("scale", {out, input});
  rl::check_same("scale", out, input);

  // Step 2: extract. An empty tensor launches nothing (a 0-block grid is an error).
  const int64_t n = input.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = rl::cdiv(n, kThreads);
  RL_CHECK(blocks <= 0x7fffffff, "scale: tensor too large for a 1-D grid");

  // Step 3: launch on torch's current stream (rl::launch checks the launch), over the declared dtypes.
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, out.data<T>(), input.data<T>(),
               static_cast<float>(factor), n);
  });
}
RL_EXPORT(scale, "out = input * factor (out-first launcher)")
#endif
