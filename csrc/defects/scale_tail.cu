// scale_tail: out = input * factor, one element per thread. The bounds check
// is off by one: the thread with idx == n reads input[n] and writes out[n],
// one element past both tensors. Every element in bounds is right.
#include "common/rapid_llm.cuh"

#if RL_DEVICE
template <typename T>
__global__ void scale_tail_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx < n) {  // the bug: should be idx < n
    out[idx] = static_cast<T>(static_cast<float>(in[idx]) * factor);
  }
}
#endif

#if RL_HOST
template <typename T>
__global__ void scale_tail_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);

void scale_tail(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_tail", {out, input});
  rl::check_contiguous("scale_tail", {out, input});
  rl::check_same("scale_tail", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  // n + 1 threads: the grid is sized for the bound the kernel checks.
  const unsigned blocks = static_cast<unsigned>(rl::cdiv(n, kThreads));
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_tail", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_tail_kernel<T>, blocks, kThreads, 0, out.data<T>(), input.data<T>(),
               static_cast<float>(factor), n);
  });
}
RL_EXPORT(scale_tail, "out = input * factor (writes one element past the end)")
#endif
// an edit: a new build, verified afresh
