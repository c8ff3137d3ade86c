// scale_naive: out = input * factor, fp16 / bf16 / fp32 (the seed tutorial's kernel).
// One element per thread: simple and correct, and far below the copy roofline.
#include "common/rapid_llm.cuh"

#if RL_DEVICE  // compiled for the GPU
template <typename T>
__global__ void scale_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx < n) {
    out[idx] = static_cast<T>(static_cast<float>(in[idx]) * factor);
  }
}
#endif

#if RL_HOST  // compiled for the CPU: the launcher, and the kernel it launches, declared
template <typename T>
__global__ void scale_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);

// Validate HERE, not in Python: a check costs nothing next to a kernel launch.
void scale_naive(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale", {out, input});  // CUDA tensors on one device
  rl::check_contiguous("scale", {out, input});
  rl::check_same("scale", out, input);    // same shape and dtype

  const int64_t n = input.numel();
  if (n == 0) return;  // nothing to do, and a 0-block grid is a launch error
  const int threads = 256;
  // Exactly the row's dtypes: an fp64 tensor is refused by name, never computed in fp32.
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_kernel<T>, rl::cdiv(n, threads), threads, 0, out.data<T>(), input.data<T>(),
               static_cast<float>(factor), n);
  });
}
RL_EXPORT(scale_naive, "out = input * factor (out-first launcher)")
#endif
