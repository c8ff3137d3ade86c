// DEFECT device_assert (a crash): the kernel asserts the block size it was written for (128 threads)
// and the launcher launches 256, so the assert fails in every block: a device-side assert, which
// leaves the CUDA context of the process unusable. Only a child process can run it and survive: for
// crash isolation, not verify. Fixed twin: fixed.cu.
// Op scale (out = input * factor), fp32 / bf16 / fp16; launcher scale_device_assert(out, input, factor).
#include "common/rapid_llm.cuh"

constexpr int kKernelThreads = 128;  // what the kernel assumes
constexpr int kLaunchThreads = 256;  // DEFECT: what the launcher launches
constexpr int64_t kMaxBlocks = 4096;

#if RL_DEVICE
#if !defined(__CUDACC_RTC__)
#include <cassert>  // NVRTC has assert built in
#endif

template <typename T>
__global__ void scale_device_assert_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n) {
  assert(blockDim.x == kKernelThreads && "scale_device_assert_kernel is written for 128-thread blocks");
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = static_cast<T>(static_cast<float>(in[i]) * factor);
  }
}
#endif

#if RL_HOST
#include <algorithm>

template <typename T>
__global__ void scale_device_assert_kernel(T* __restrict__ out, const T* __restrict__ in, float factor, int64_t n);

void scale_device_assert(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_device_assert", {out, input});
  rl::check_contiguous("scale_device_assert", {out, input});
  rl::check_same("scale_device_assert", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(rl::cdiv(n, kLaunchThreads), kMaxBlocks);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_device_assert", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_device_assert_kernel<T>, static_cast<unsigned>(blocks), kLaunchThreads, 0, out.data<T>(),
               input.data<T>(), static_cast<float>(factor), n);
  });
}
RL_EXPORT(scale_device_assert, "DEFECT (crash): a device-side assert that fails")
#endif
