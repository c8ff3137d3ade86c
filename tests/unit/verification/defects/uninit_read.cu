// DEFECT uninit_read: the kernel is shared with a smoothing variant, out = (x[i] + w * x[tile end]) * factor,
// and scale calls it with w = 0. The tail tile writes only the shared slots of elements that exist, so
// its last slot is never written and w * (that slot) reads uninitialised shared memory. 0 * a finite
// value is 0, so the result is right unless the stale bits happen to be inf or NaN (then 0 * it is NaN):
// verify passes on almost every run. compute-sanitizer's initcheck is documented for global memory
// only, so it is not expected to see this either (check it on a GPU); shared memory filled with NaN
// bits by a kernel launched just before would make verify see it. Fixed twin: uninit_read_fixed.cu.
// Op scale (out = input * factor), fp32 / bf16 / fp16; launcher scale_uninit_read(out, input, factor).
#include "common/rapid_llm.cuh"

constexpr int kThreads = 256;  // the block size; one shared slot per thread
constexpr int64_t kMaxBlocks = 4096;

#if RL_DEVICE
template <typename T>
__global__ void scale_uninit_read_kernel(T* __restrict__ out, const T* __restrict__ in, float factor,
                                         float tail_weight, int64_t n) {
  __shared__ float tile[kThreads];
  const int t = threadIdx.x;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads; base < n;
       base += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t i = base + t;
    if (i < n) tile[t] = static_cast<float>(in[i]);  // DEFECT: slots past n stay unwritten in the tail tile
    __syncthreads();
    const float tail = tile[kThreads - 1];  // uninitialised in a tail tile
    if (i < n) out[i] = static_cast<T>((tile[t] + tail_weight * tail) * factor);
    __syncthreads();
  }
}
#endif

#if RL_HOST
#include <algorithm>

template <typename T>
__global__ void scale_uninit_read_kernel(T* __restrict__ out, const T* __restrict__ in, float factor,
                                         float tail_weight, int64_t n);

void scale_uninit_read(rl::Tensor out, rl::Tensor input, double factor) {
  rl::check_cuda("scale_uninit_read", {out, input});
  rl::check_contiguous("scale_uninit_read", {out, input});
  rl::check_same("scale_uninit_read", out, input);
  const int64_t n = input.numel();
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>(rl::cdiv(n, kThreads), kMaxBlocks);
  rl::dispatch<rl::bf16, rl::fp16, rl::fp32>(input, "scale_uninit_read", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rl::launch(scale_uninit_read_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, out.data<T>(),
               input.data<T>(), static_cast<float>(factor), 0.0f, n);  // w = 0: plain scale
  });
}
RL_EXPORT(scale_uninit_read, "DEFECT: out = input * factor, plus 0 * an uninitialised shared value")
#endif
